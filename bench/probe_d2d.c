/* Device-to-device copies through a CUDA IPC mapping on a GPU shared by two processes (issue 19):
 * which way of copying stays off the time-sliced compute engine?
 *   mpirun -np 2 probe_d2d [iterations] [bytes...]      (both ranks on one GPU: device 0)
 * (default: 200 iterations; 2 KiB, 64 KiB, 1 MiB, 16 MiB and 256 MiB)
 * Rank 1 exports a buffer (cuIpcGetMemHandle); rank 0 opens it (cuIpcOpenMemHandle) and times
 * copies from the mapping into its own buffer, each followed by cuStreamSynchronize, as the IPC
 * point-to-point receiver does, while rank 1 is in turn
 *   idle     waiting in MPI_Recv (holding its context)
 *   wait     with a stream blocked in cuStreamWaitValue32 (a stream-ordered sender waiting for
 *            its receiver's `done` word)
 *   kernels  running spin kernels back to back (4 of ~20 us, then a synchronize)
 *   copies   making linear 4 KiB device-to-device copies + synchronize (compute engine)
 * Ways of copying n bytes: cuMemcpyAsync; cuMemcpyDtoDAsync; cuMemcpy2DAsync of 1 row, 2 rows,
 * rows of 1 MiB, 256 KiB, 64 KiB, 4 KiB (where that makes 2 rows or more); cuMemcpyBatchAsync
 * with CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE (where the driver has it); "ord" forms: the
 * receiver's stream-ordered sequence (cuStreamWaitValue32 on a word already set, the copy,
 * cuStreamWriteValue32). Every copy's bytes are checked afterwards (a wrong one prints BAD).
 * Prints one table on rank 0: median [p10 p90] us per copy + synchronize. Driver API through
 * dlopen (builds without CUDA); the spin kernel is PTX, compiled by the driver. Gives up after
 * PROBE_D2D_LIMIT seconds (default 100) with a message naming the step. */
#include <dlfcn.h>
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult; typedef int CUdevice; typedef void *CUcontext; typedef unsigned long long CUdeviceptr;
typedef void *CUstream; typedef void *CUmodule; typedef void *CUfunction;
typedef struct { char reserved[64]; } CUipcMemHandle;
typedef struct {
  size_t srcXInBytes, srcY; int srcMemoryType; const void *srcHost; CUdeviceptr srcDevice; void *srcArray; size_t srcPitch;
  size_t dstXInBytes, dstY; int dstMemoryType; void *dstHost; CUdeviceptr dstDevice; void *dstArray; size_t dstPitch;
  size_t WidthInBytes, Height;
} Copy2D;
typedef struct { int type; int id; } Loc;
typedef struct { int srcAccessOrder; Loc srcLocHint; Loc dstLocHint; unsigned flags; } Attrs;
enum { MEMTYPE_DEVICE = 2 };

static CUresult (*cuInit)(unsigned); static CUresult (*cuDeviceGet)(CUdevice *, int);
static CUresult (*cuDeviceGetName)(char *, int, CUdevice);
static CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice); static CUresult (*cuCtxSetCurrent)(CUcontext);
static CUresult (*cuMemAlloc)(CUdeviceptr *, size_t); static CUresult (*cuMemFree)(CUdeviceptr);
static CUresult (*cuMemHostAlloc)(void **, size_t, unsigned);
static CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned);
static CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
static CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
static CUresult (*cuMemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
static CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
static CUresult (*cuMemcpy2DAsync)(const Copy2D *, CUstream);
static CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
static CUresult (*cuStreamCreate)(CUstream *, unsigned); static CUresult (*cuStreamSynchronize)(CUstream);
static CUresult (*cuStreamWaitValue32)(CUstream, CUdeviceptr, uint32_t, unsigned);
static CUresult (*cuStreamWriteValue32)(CUstream, CUdeviceptr, uint32_t, unsigned);
static CUresult (*cuIpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
static CUresult (*cuIpcOpenMemHandle)(CUdeviceptr *, CUipcMemHandle, unsigned);
static CUresult (*cuIpcCloseMemHandle)(CUdeviceptr);
static CUresult (*cuModuleLoadDataEx)(CUmodule *, const void *, unsigned, int *, void **);
static CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
static CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **);
/* CUDA 12.8's form (with failIdx); CUDA 13's is cuMemcpyBatchAsync_v2, without it. */
static CUresult (*batch)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, Attrs *, size_t *, size_t, size_t *, CUstream);

static int rank;
static const char *volatile step = "start";
static void on_alarm(int sig) {
  (void)sig;
  char m[256];
  int k = snprintf(m, sizeof m, "probe_d2d: rank %d: gave up (PROBE_D2D_LIMIT) in: %s\n", rank, step);
  if (k > 0) (void)!write(2, m, (size_t)k);
  _exit(3);
}
#define L(f) do { *(void **)&f = dlsym(h, #f "_v2"); if (!f) *(void **)&f = dlsym(h, #f); if (!f) { fprintf(stderr, "probe_d2d: libcuda has no %s\n", #f); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
#define C(x) do { CUresult r_ = (x); if (r_) { fprintf(stderr, "probe_d2d: rank %d: %s = %d (in: %s)\n", rank, #x, r_, step); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

/* A kernel that spins for `cycles` clock cycles (one thread). */
static const char *SPIN_PTX =
  ".version 7.0\n.target sm_70\n.address_size 64\n"
  ".visible .entry spin(.param .u64 spin_param_0)\n{\n"
  "  .reg .pred %p<2>;\n  .reg .b64 %rd<6>;\n"
  "  ld.param.u64 %rd2, [spin_param_0];\n  mov.u64 %rd3, %clock64;\n"
  "$L__BB0_1:\n  mov.u64 %rd4, %clock64;\n  sub.s64 %rd5, %rd4, %rd3;\n"
  "  setp.lt.u64 %p1, %rd5, %rd2;\n  @%p1 bra $L__BB0_1;\n  ret;\n}\n";

static unsigned char pattern(size_t i) { return (unsigned char)(((uint32_t)i * 2654435761u) >> 24) ^ (unsigned char)(i >> 16); }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static double now(void) { return MPI_Wtime(); }

enum { BG_IDLE, BG_WAIT, BG_KERNELS, BG_COPIES, NBG, CMD_QUIT = 99 };
static const char *BG_NAME[NBG] = { "idle", "wait", "kernels", "copies" };
enum { M_LINEAR, M_DTOD, M_1ROW, M_2ROWS, M_R1M, M_R256K, M_R64K, M_R4K, M_BATCH, M_ORD_LINEAR, M_ORD_2ROWS, NM };
static const char *M_NAME[NM] = {
  "cuMemcpyAsync (linear)", "cuMemcpyDtoDAsync", "2-D, 1 row", "2-D, 2 rows", "2-D, rows of 1 MiB",
  "2-D, rows of 256 KiB", "2-D, rows of 64 KiB", "2-D, rows of 4 KiB", "batch, PREFER_OVERLAP",
  "ord: wait+linear+write", "ord: wait+2 rows+write" };

/* Row width of a 2-D way for n bytes; 0 where it does not apply. */
static size_t row_width(int m, size_t n) {
  size_t w = m == M_1ROW ? n : (m == M_2ROWS || m == M_ORD_2ROWS) ? n / 2 : m == M_R1M ? 1u << 20 : m == M_R256K ? 256u << 10 : m == M_R64K ? 64u << 10 : m == M_R4K ? 4u << 10 : 0;
  if (!w || n % w || (m != M_1ROW && n / w < 2)) return 0;
  return w;
}

/* Enqueues one copy of n bytes from src to dst on s; nonzero: the driver's error. */
static CUresult copy(int m, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  switch (m) {
  case M_LINEAR: case M_ORD_LINEAR: return cuMemcpyAsync(dst, src, n, s);
  case M_DTOD: return cuMemcpyDtoDAsync(dst, src, n, s);
  case M_BATCH: {
    CUdeviceptr d = dst, sp = src; size_t sz = n, idx = 0, fail = 0; Attrs a; memset(&a, 0, sizeof a);
    a.srcAccessOrder = 1; /* CU_MEMCPY_SRC_ACCESS_ORDER_STREAM */
    a.srcLocHint.type = 1; a.dstLocHint.type = 1; /* CU_MEM_LOCATION_TYPE_DEVICE, device 0 */
    a.flags = 1; /* CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE */
    return batch(&d, &sp, &sz, 1, &a, &idx, 1, &fail, s);
  }
  default: {
    size_t w = row_width(m, n); Copy2D c; memset(&c, 0, sizeof c);
    c.srcMemoryType = MEMTYPE_DEVICE; c.srcDevice = src; c.srcPitch = w;
    c.dstMemoryType = MEMTYPE_DEVICE; c.dstDevice = dst; c.dstPitch = w;
    c.WidthInBytes = w; c.Height = n / w;
    return cuMemcpy2DAsync(&c, s);
  }
  }
}

static int applies(int m, size_t n) {
  if (m == M_BATCH) return batch != NULL;
  if (m == M_LINEAR || m == M_DTOD || m == M_ORD_LINEAR) return 1;
  return row_width(m, n) != 0;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int np; MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &np);
  if (np != 2) { if (!rank) fprintf(stderr, "probe_d2d: run with exactly 2 ranks (mpirun -np 2)\n"); MPI_Finalize(); return 1; }
  const char *lim = getenv("PROBE_D2D_LIMIT");
  signal(SIGALRM, on_alarm); alarm(lim ? (unsigned)atoi(lim) : 100);
  int iters = argc > 1 ? atoi(argv[1]) : 200; if (iters < 5) iters = 5;
  size_t sizes[16]; int ns = 0;
  for (int i = 2; i < argc && ns < 16; i++) sizes[ns++] = strtoul(argv[i], 0, 0);
  if (!ns) { sizes[0] = 2048; sizes[1] = 64 << 10; sizes[2] = 1 << 20; sizes[3] = 16 << 20; sizes[4] = 256 << 20; ns = 5; }
  size_t maxb = 0; for (int i = 0; i < ns; i++) if (sizes[i] > maxb) maxb = sizes[i];

  void *h = dlopen("libcuda.so.1", RTLD_NOW); if (!h) { fprintf(stderr, "probe_d2d: no libcuda.so.1\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
  L(cuInit); L(cuDeviceGet); L(cuDeviceGetName); L(cuDevicePrimaryCtxRetain); L(cuCtxSetCurrent); L(cuMemAlloc); L(cuMemFree);
  L(cuMemHostAlloc); L(cuMemHostGetDevicePointer); L(cuMemcpyHtoD); L(cuMemcpyDtoH); L(cuMemcpyAsync); L(cuMemcpyDtoDAsync);
  L(cuMemcpy2DAsync); L(cuMemsetD8Async); L(cuStreamCreate); L(cuStreamSynchronize); L(cuStreamWaitValue32); L(cuStreamWriteValue32);
  L(cuIpcGetMemHandle); L(cuIpcOpenMemHandle); L(cuIpcCloseMemHandle); L(cuModuleLoadDataEx); L(cuModuleGetFunction); L(cuLaunchKernel);
  *(void **)&batch = dlsym(h, "cuMemcpyBatchAsync");

  step = "context"; C(cuInit(0)); CUdevice dev; C(cuDeviceGet(&dev, 0));
  CUcontext ctx; C(cuDevicePrimaryCtxRetain(&ctx, dev)); C(cuCtxSetCurrent(ctx));
  CUstream s; C(cuStreamCreate(&s, 1)); /* CU_STREAM_NON_BLOCKING */
  /* A page-locked, device-mapped word per rank for the stream waits and writes. */
  volatile uint32_t *word; CUdeviceptr word_dev;
  step = "mapped word"; C(cuMemHostAlloc((void **)&word, 64, 2 /* DEVICEMAP */)); C(cuMemHostGetDevicePointer(&word_dev, (void *)word, 0));
  word[0] = 0; word[1] = 0;
  unsigned char *host; step = "host buffer"; C(cuMemHostAlloc((void **)&host, maxb, 0));
  CUdeviceptr buf; step = "device buffer"; C(cuMemAlloc(&buf, maxb));

  if (rank == 1) {
    /* The exporter, and the other process on the GPU. */
    for (size_t i = 0; i < maxb; i++) host[i] = pattern(i);
    step = "fill"; C(cuMemcpyHtoD(buf, host, maxb));
    CUipcMemHandle ipc; step = "cuIpcGetMemHandle"; C(cuIpcGetMemHandle(&ipc, buf));
    MPI_Send(&ipc, sizeof ipc, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
    CUdeviceptr scratch; step = "scratch"; C(cuMemAlloc(&scratch, 8192));
    CUfunction spin = NULL; CUmodule mod;
    char log[4096] = ""; int opt[2] = { 4 /* CU_JIT_ERROR_LOG_BUFFER */, 5 /* ..._SIZE_BYTES */ };
    void *val[2] = { log, (void *)(uintptr_t)sizeof log };
    if (cuModuleLoadDataEx(&mod, SPIN_PTX, 2, opt, val) == 0 && cuModuleGetFunction(&spin, mod, "spin") == 0) {
      int ok = 1; MPI_Send(&ok, 1, MPI_INT, 0, 1, MPI_COMM_WORLD);
    } else {
      fprintf(stderr, "probe_d2d: the spin kernel did not load (no 'kernels' column): %s\n", log);
      int ok = 0; MPI_Send(&ok, 1, MPI_INT, 0, 1, MPI_COMM_WORLD);
    }
    unsigned long long cycles = 40000; /* ~20 us at 2 GHz */
    void *args[] = { &cycles };
    uint32_t waits = 0;
    int cmd; step = "rank 1 waiting for a command"; MPI_Recv(&cmd, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    while (cmd != CMD_QUIT) {
      int ack = 1;
      if (cmd == BG_IDLE) {
        MPI_Send(&ack, 1, MPI_INT, 0, 3, MPI_COMM_WORLD);
        step = "rank 1 idle"; MPI_Recv(&cmd, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        continue;
      }
      if (cmd == BG_WAIT) {
        /* A stream blocked until the phase ends: the host writes the word then. */
        step = "rank 1 stream wait"; C(cuStreamWaitValue32(s, word_dev, ++waits, 0 /* GEQ */));
        MPI_Send(&ack, 1, MPI_INT, 0, 3, MPI_COMM_WORLD);
        int next; MPI_Recv(&next, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        word[0] = waits; __sync_synchronize();
        C(cuStreamSynchronize(s));
        cmd = next;
        continue;
      }
      /* kernels / copies: busy until the next command. */
      int next = 0, flag = 0, sent = 0; MPI_Request rq;
      MPI_Irecv(&next, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, &rq);
      step = cmd == BG_KERNELS ? "rank 1 spin kernels" : "rank 1 copies";
      while (!flag) {
        if (cmd == BG_KERNELS && spin) for (int k = 0; k < 4; k++) C(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
        if (cmd == BG_COPIES) C(cuMemcpyDtoDAsync(scratch + 4096, scratch, 4096, s));
        if (!sent) { MPI_Send(&ack, 1, MPI_INT, 0, 3, MPI_COMM_WORLD); sent = 1; }
        C(cuStreamSynchronize(s));
        MPI_Test(&rq, &flag, MPI_STATUS_IGNORE);
      }
      cmd = next;
    }
    MPI_Barrier(MPI_COMM_WORLD); /* rank 0 closed its mapping */
    alarm(0);
    MPI_Finalize();
    return 0;
  }

  /* Rank 0: imports and measures; a row is printed as soon as it is measured. */
  CUipcMemHandle ipc; step = "receiving the IPC handle"; MPI_Recv(&ipc, sizeof ipc, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  CUdeviceptr peer; step = "cuIpcOpenMemHandle"; C(cuIpcOpenMemHandle(&peer, ipc, 1 /* LAZY_ENABLE_PEER_ACCESS */));
  int have_spin; MPI_Recv(&have_spin, 1, MPI_INT, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  unsigned char *want = malloc(maxb); for (size_t i = 0; i < maxb; i++) want[i] = pattern(i);
  double *t = malloc(sizeof(double) * (size_t)iters);
  char name[128] = "?"; cuDeviceGetName(name, sizeof name, dev);
  printf("# probe_d2d: 2 ranks on one GPU (%s). Rank 0 copies n bytes from rank 1's buffer through a CUDA IPC\n", name);
  printf("# mapping into its own, then cuStreamSynchronize: median [p10 p90] us over up to %d copies (0.3 s a cell).\n", iters);
  printf("# Rank 1 meanwhile: idle (in MPI_Recv); wait (its stream in cuStreamWaitValue32); kernels (spin\n");
  printf("# kernels, 4 x ~20 us then sync, back to back); copies (linear 4 KiB device-to-device copies + sync).\n");
  printf("# BAD: the copied bytes were wrong. ERR: the driver refused it (its error code).\n");
  printf("%-9s %-24s", "bytes", "way");
  for (int bg = 0; bg < NBG; bg++) printf(" %-22s", BG_NAME[bg]);
  printf("\n");
  fflush(stdout);
  uint32_t seq = 0;
  for (int si = 0; si < ns; si++) {
    size_t n = sizes[si];
    for (int m = 0; m < NM; m++) {
      if (!applies(m, n)) continue;
      printf("%-9zu %-24s", n, M_NAME[m]);
      for (int bg = 0; bg < NBG; bg++) {
        char v[64];
        if (bg == BG_KERNELS && !have_spin) { printf(" %-22s", "n/a"); continue; }
        int ack; step = "starting the background"; MPI_Send(&bg, 1, MPI_INT, 1, 2, MPI_COMM_WORLD);
        MPI_Recv(&ack, 1, MPI_INT, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        step = M_NAME[m];
        C(cuMemsetD8Async(buf, 0, n, s)); C(cuStreamSynchronize(s));
        int ord = m == M_ORD_LINEAR || m == M_ORD_2ROWS, k = 0, bad = 0;
        CUresult err = 0;
        double t_end = now() + 0.3; /* at most 0.3 s a cell */
        for (int i = -5; i < iters && !err; i++) {
          double t0 = now();
          if (ord) { word[1] = ++seq; err = cuStreamWaitValue32(s, word_dev + 4, seq, 0 /* GEQ */); }
          if (!err) err = copy(m, buf, peer, n, s);
          if (!err && ord) err = cuStreamWriteValue32(s, word_dev + 8, seq, 0);
          CUresult r = cuStreamSynchronize(s);
          if (!err) err = r;
          if (i >= 0) t[k++] = now() - t0;
          if (now() > t_end && k >= 5) break;
        }
        if (err) {
          fprintf(stderr, "probe_d2d: %s of %zu bytes (rank 1 %s): error %d\n", M_NAME[m], n, BG_NAME[bg], err);
          snprintf(v, sizeof v, "ERR %d", err);
        } else {
          if (ord && word[2] != seq) bad = 1;
          C(cuMemcpyDtoH(host, buf, n));
          if (memcmp(host, want, n)) bad = 1;
          qsort(t, (size_t)k, sizeof t[0], cmp);
          snprintf(v, sizeof v, "%.1f [%.1f %.1f]%s", t[k / 2] * 1e6, t[k / 10] * 1e6, t[k * 9 / 10] * 1e6, bad ? " BAD" : "");
        }
        printf(" %-22s", v);
        fflush(stdout);
      }
      printf("\n");
      fflush(stdout);
    }
  }
  int quit = CMD_QUIT; MPI_Send(&quit, 1, MPI_INT, 1, 2, MPI_COMM_WORLD);
  step = "cuIpcCloseMemHandle"; C(cuIpcCloseMemHandle(peer));
  MPI_Barrier(MPI_COMM_WORLD);
  alarm(0);
  MPI_Finalize();
  return 0;
}
