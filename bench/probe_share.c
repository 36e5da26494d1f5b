/* Small-message floor probe: what does an 8-byte device->host->device round trip cost when one
 * process, or two processes, use one GPU? Driver API through dlopen (builds without CUDA).
 * mpirun -np N probe_share [bytes] [mode]
 *   mode 0: every rank loops DtoH(bytes)+sync, HtoD+sync; ranks run at the same time
 *   mode 1: only rank 0 loops (the others hold a context and wait in MPI_Barrier)
 *   mode 2: as 0 but with an MPI_Sendrecv of the host bytes between (the staged exchange)
 *   mode 3: DtoH + sync only; 4: HtoD + sync only; 5: DtoD + sync; 6: cuMemsetD8 + sync
 *   7: cuMemcpyHtoD (synchronous) from pinned; 8: HtoDAsync from pageable memory + sync;
 *   9: HtoD through cuMemcpyBatchAsync with CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE + sync;
 *   10: DtoD through the same; 11: cuStreamWriteValue64 (first 8 bytes) + sync
 *   12: HtoD by cuMemcpy2DAsync (one row); 13: DtoD by cuMemcpy2DAsync (one row);
 *   14: HtoD by cuMemcpy2DAsync (rows of 64 B); 15: DtoD by cuMemcpy2DAsync (rows of 64 B)
 *   16: HtoD by cuMemcpy2DAsync (two rows of bytes/2)
 *   (all ranks at the same time)
 *   17: the chain of a stream-ordered staged allreduce of `bytes` (float32 sum), as
 *       src/backend/ordered.rs enqueues it, without gpuwire: on the stream DtoH into pinned
 *       memory, cuStreamWriteValue32 of a `ready` word in mapped host memory,
 *       cuStreamWaitValue32 of a `done` word, then the result HtoD as two rows (a plain copy
 *       from 32 KiB); on the host, spinning on `ready`, MPI_Allreduce, writing `done`. The
 *       stream work of the next call is enqueued while this call's result copy is pending, as
 *       a program's next call would be; the time per iteration is the median interval between
 *       two `ready`s seen by the host (all ranks at the same time)
 *   18: as 17, with only rank 0 looping (MPI_Allreduce on MPI_COMM_SELF; the others hold a
 *       context and wait in MPI_Barrier)
 *   19: as 17, the host waiting for the DtoH with cuStreamSynchronize and the result copied
 *       HtoD + cuStreamSynchronize (the host-blocking form: no flags)
 * Prints the median per-iteration time on rank 0. */
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef int CUresult; typedef int CUdevice; typedef void *CUcontext; typedef unsigned long long CUdeviceptr; typedef void *CUstream;
static CUresult (*cuInit)(unsigned); static CUresult (*cuDeviceGet)(CUdevice *, int);
static CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice); static CUresult (*cuCtxSetCurrent)(CUcontext);
static CUresult (*cuMemAlloc)(CUdeviceptr *, size_t); static CUresult (*cuMemAllocHost)(void **, size_t);
static CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
static CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
static CUresult (*cuStreamSynchronize)(CUstream); static CUresult (*cuStreamCreate)(CUstream *, unsigned);
static CUresult (*cuDevicePrimaryCtxSetFlags)(CUdevice, unsigned);
static CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
static CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
static CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
static CUresult (*cuStreamWriteValue64)(CUstream, CUdeviceptr, unsigned long long, unsigned);
typedef struct { int type; int id; } Loc;
typedef struct { int srcAccessOrder; Loc srcLocHint; Loc dstLocHint; unsigned flags; } Attrs;
static CUresult (*batch)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, Attrs *, size_t *, size_t, size_t *, CUstream);
static CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned);
typedef struct {
  size_t srcXInBytes, srcY; int srcMemoryType; const void *srcHost; CUdeviceptr srcDevice; void *srcArray; size_t srcPitch;
  size_t dstXInBytes, dstY; int dstMemoryType; void *dstHost; CUdeviceptr dstDevice; void *dstArray; size_t dstPitch;
  size_t WidthInBytes, Height;
} Copy2D;
static CUresult (*cuStreamWaitValue32)(CUstream, CUdeviceptr, unsigned, unsigned);
static CUresult (*cuStreamWriteValue32)(CUstream, CUdeviceptr, unsigned, unsigned);
static CUresult (*cuMemHostAlloc)(void **, size_t, unsigned);
static CUresult (*cuMemcpy2DAsync)(const Copy2D *, CUstream);
#define L(f) do { *(void **)&f = dlsym(h, #f "_v2"); if (!f) *(void **)&f = dlsym(h, #f); if (!f) { fprintf(stderr, "no %s\n", #f); return 1; } } while (0)
#define C(x) do { CUresult r_ = (x); if (r_) { fprintf(stderr, "%s = %d\n", #x, r_); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, np; MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &np);
  size_t bytes = argc > 1 ? strtoul(argv[1], 0, 0) : 8; int mode = argc > 2 ? atoi(argv[2]) : 0;
  unsigned flags = argc > 3 ? strtoul(argv[3], 0, 0) : 0; /* primary ctx flags: 1 spin, 2 yield, 4 blocking */
  void *h = dlopen("libcuda.so.1", RTLD_NOW); if (!h) { fprintf(stderr, "no libcuda\n"); return 1; }
  L(cuInit); L(cuDeviceGet); L(cuDevicePrimaryCtxRetain); L(cuCtxSetCurrent); L(cuMemAlloc); L(cuMemAllocHost);
  L(cuMemcpyDtoHAsync); L(cuMemcpyHtoDAsync); L(cuStreamSynchronize); L(cuStreamCreate); L(cuDevicePrimaryCtxSetFlags); L(cuMemcpyDtoDAsync); L(cuMemsetD8Async); L(cuMemcpyHtoD); L(cuStreamWriteValue64); L(cuMemHostGetDevicePointer);
  *(void **)&batch = dlsym(h, "cuMemcpyBatchAsync");
  L(cuMemcpy2DAsync); L(cuStreamWaitValue32); L(cuStreamWriteValue32); L(cuMemHostAlloc);
  C(cuInit(0)); CUdevice dev; C(cuDeviceGet(&dev, 0));
  if (flags) C(cuDevicePrimaryCtxSetFlags(dev, flags));
  CUcontext ctx; C(cuDevicePrimaryCtxRetain(&ctx, dev)); C(cuCtxSetCurrent(ctx));
  CUdeviceptr d, d2; C(cuMemAlloc(&d, bytes)); C(cuMemAlloc(&d2, bytes)); void *p, *q; C(cuMemAllocHost(&p, bytes)); C(cuMemAllocHost(&q, bytes));
  CUstream s; C(cuStreamCreate(&s, 1));
  char *pageable = malloc(bytes); memset(pageable, 1, bytes);
  enum { N = 2000 }; static double t[N];
  MPI_Barrier(MPI_COMM_WORLD);
  if (mode >= 17 && mode <= 19) { /* the staged allreduce's chain: see the header */
    volatile unsigned *w; C(cuMemHostAlloc((void **)&w, 64, 1 | 2)); /* portable, device-mapped */
    w[0] = w[8] = 0; CUdeviceptr ready_d, done_d;
    C(cuMemHostGetDevicePointer(&ready_d, (void *)&w[0], 0)); C(cuMemHostGetDevicePointer(&done_d, (void *)&w[8], 0));
    MPI_Comm mc = mode == 18 ? MPI_COMM_SELF : MPI_COMM_WORLD;
    int n = bytes >= 4 ? (int)(bytes / 4) : 1; size_t nb = (size_t)n * 4;
    Copy2D m; memset(&m, 0, sizeof m); m.WidthInBytes = nb / 2; m.Height = 2; m.srcPitch = m.dstPitch = nb / 2;
    m.srcMemoryType = 1; m.srcHost = q; m.dstMemoryType = 2; m.dstDevice = d;
    double last = 0;
    for (int i = 0; i <= N && !(mode == 18 && rank != 0); i++) {
      unsigned g = (unsigned)i + 1;
      C(cuMemcpyDtoHAsync(p, d, nb, s));
      if (mode == 19) C(cuStreamSynchronize(s));
      else { C(cuStreamWriteValue32(s, ready_d, g, 0)); C(cuStreamWaitValue32(s, done_d, g, 0)); } /* 0: GEQ */
      if (mode != 19) {
        if (nb < 32768 && nb >= 2) C(cuMemcpy2DAsync(&m, s)); else C(cuMemcpyHtoDAsync(d, q, nb, s));
        while (w[0] < g) ;
      }
      double now = MPI_Wtime();
      if (i > 0) t[i - 1] = now - last;
      last = now;
      MPI_Allreduce(p, q, n, MPI_FLOAT, MPI_SUM, mc);
      if (mode == 19) { C(cuMemcpy2DAsync(&m, s)); C(cuStreamSynchronize(s)); }
      else { __atomic_store_n(&w[8], g, __ATOMIC_RELEASE); }
    }
    C(cuStreamSynchronize(s));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) { qsort(t, N, sizeof t[0], cmp); printf("np=%d bytes=%zu mode=%d flags=%u: median %.1f us p10 %.1f p90 %.1f\n", np, nb, mode, flags, t[N / 2] * 1e6, t[N / 10] * 1e6, t[N * 9 / 10] * 1e6); }
    MPI_Finalize();
    return 0;
  }
  for (int i = 0; i < N; i++) {
    if (mode == 1 && rank != 0) continue;
    double t0 = MPI_Wtime();
    if (mode >= 3) {
      if (mode == 3) C(cuMemcpyDtoHAsync(p, d, bytes, s));
      if (mode == 4) C(cuMemcpyHtoDAsync(d, q, bytes, s));
      if (mode == 5) C(cuMemcpyDtoDAsync(d2, d, bytes, s));
      if (mode == 6) C(cuMemsetD8Async(d, 1, bytes, s));
      if (mode == 7) C(cuMemcpyHtoD(d, q, bytes));
      if (mode == 8) C(cuMemcpyHtoDAsync(d, pageable, bytes, s));
      if (mode == 9 || mode == 10) {
        if (!batch) { if (rank == 0) printf("no cuMemcpyBatchAsync\n"); break; }
        CUdeviceptr dst = d, src = d2; size_t sz = bytes, idx = 0, fail = 0;
        if (mode == 9) C(cuMemHostGetDevicePointer(&src, q, 0));
        Attrs a; memset(&a, 0, sizeof a); a.srcAccessOrder = 1; a.flags = 1;
        a.srcLocHint.type = mode == 9 ? 2 : 1; a.srcLocHint.id = 0; a.dstLocHint.type = 1; a.dstLocHint.id = 0;
        C(batch(&dst, &src, &sz, 1, &a, &idx, 1, &fail, s));
      }
      if (mode == 11) C(cuStreamWriteValue64(s, d, 42ull + i, 0));
      if (mode >= 12 && mode <= 16) {
        Copy2D m; memset(&m, 0, sizeof m);
        size_t w = (mode >= 14 && mode <= 15 && bytes >= 64) ? 64 : mode == 16 ? bytes / 2 : bytes;
        m.WidthInBytes = w; m.Height = bytes / w; m.srcPitch = w; m.dstPitch = w;
        if (mode == 12 || mode == 14 || mode == 16) { m.srcMemoryType = 1; m.srcHost = q; } else { m.srcMemoryType = 2; m.srcDevice = d2; }
        m.dstMemoryType = 2; m.dstDevice = d;
        C(cuMemcpy2DAsync(&m, s));
      }
      C(cuStreamSynchronize(s));
      t[i] = MPI_Wtime() - t0;
      continue;
    }
    C(cuMemcpyDtoHAsync(p, d, bytes, s)); C(cuStreamSynchronize(s));
    if (mode == 2) { int peer = rank ^ 1; if (peer < np) MPI_Sendrecv(p, (int)bytes, MPI_BYTE, peer, 0, q, (int)bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
    C(cuMemcpyHtoDAsync(d, q, bytes, s)); C(cuStreamSynchronize(s));
    t[i] = MPI_Wtime() - t0;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) { qsort(t, N, sizeof t[0], cmp); printf("np=%d bytes=%zu mode=%d flags=%u: median %.1f us p10 %.1f p90 %.1f\n", np, bytes, mode, flags, t[N / 2] * 1e6, t[N / 10] * 1e6, t[N * 9 / 10] * 1e6); }
  MPI_Finalize();
  return 0;
}
