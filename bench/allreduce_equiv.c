/* gpuwire_allreduce's lean path (src/lean.rs) against the general path: every case prints its
 * status, last error and result, on a plain communicator (lean path where its tests pass), a
 * checking-mode one and one with a timeout (always the general path), then on an aborted one.
 * Build it once against a library with the lean path and once against one without (the commit
 * before it), run both on 1, 2 and 3 ranks, and compare: the outputs must be the same.
 *   mpicc -O1 -Iinclude bench/allreduce_equiv.c -o equiv -Ltarget/release -lgpuwire \
 *       -Wl,-rpath,$PWD/target/release
 *   for np in 1 2 3; do mpirun --oversubscribe -n $np ./equiv | sort -s -k1,1 > eq.$np; done
 * Cases: SUM, in place, AVG, MAX; datatype and count mismatches; MIN on complex and BAND on
 * float; an unknown op; overlapping views; in place through two views of the same memory; a
 * strided send view; empty buffers; behind an iallreduce not yet waited for; inside a group
 * (valid and invalid); a freed buffer handle; the NULL communicator.
 *
 * `./equiv nccl` runs the same cases on device memory on NCCL communicators (the lean path of
 * a device allreduce NCCL does), with three more: BAND on int32 (NCCL's fallback), device send
 * with host receive (mixed), and a host allreduce on the NCCL communicator. Needs -ldl; on a
 * machine without a GPU, the null device (scripts/null-device.sh) on 1 rank:
 *   LD_LIBRARY_PATH=.nulldev NULLDEV_STREAMS=async mpirun -n 1 ./equiv nccl
 * and again with GPUWIRE_HOST_SYNC=1 or GPUWIRE_NCCL_NONBLOCKING=1. */
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpuwire.h"

static int rank;
/* Device mode (`nccl`): every array of a case lives in `mem`, mirrored by device memory at
 * `dmem` (copied in by sync_in after the host writes it, out after each call). */
static int dev;
static struct {
    float a[8], b[8];
    double d[8];
    float x[4], y[4];
    int32_t i[8];
} mem;
static char *dmem;
static int (*cu_htod)(uintptr_t, const void *, size_t);
static int (*cu_dtoh)(void *, uintptr_t, size_t);
static int (*cu_ctx_sync)(void);
static void sync_in(void) {
    if (dev) cu_htod((uintptr_t)dmem, &mem, sizeof mem);
}
static void sync_out(void) {
    if (dev) {
        cu_ctx_sync();
        cu_dtoh(&mem, (uintptr_t)dmem, sizeof mem);
    }
}
static void show(const char *what, gpuwire_status st, const float *v, int n) {
    char m[600] = "";
    if (st != GPUWIRE_SUCCESS) gpuwire_last_error(m, sizeof m);
    sync_out();
    printf("[%d] %-28s -> %d %s |", rank, what, (int)st, m);
    for (int i = 0; i < n; i++) printf(" %g", v[i]);
    printf("\n");
    fflush(stdout);
}
static gpuwire_buffer wrap_host(void *p, int64_t n, int dt) {
    gpuwire_buffer b;
    gpuwire_buffer_wrap(p, n, dt, GPUWIRE_SPACE_HOST, &b);
    return b;
}
/* In device mode, the device mirror of `p` (an address in `mem`). */
static gpuwire_buffer wrap(void *p, int64_t n, int dt) {
    if (!dev) return wrap_host(p, n, dt);
    gpuwire_buffer b;
    gpuwire_buffer_wrap(dmem + ((char *)p - (char *)&mem), n, dt, GPUWIRE_SPACE_DEVICE, &b);
    return b;
}
static void fill(float *a, int n, float base) { for (int i = 0; i < n; i++) a[i] = base + i + rank; }

static void cases(gpuwire_comm c, const char *tag) {
    float *a = mem.a, *b = mem.b;
    double *d = mem.d;
    char name[64];
#define RUN(label, expr, out, n) do { snprintf(name, sizeof name, "%s %s", tag, label); show(name, (expr), out, n); } while (0)
    memset(&mem, 0, sizeof mem);
    fill(a, 4, 1); memset(b, 0, sizeof mem.b);
    sync_in();
    gpuwire_buffer sa = wrap(a, 4, GPUWIRE_FLOAT32), sb = wrap(b, 4, GPUWIRE_FLOAT32);
    RUN("sum", gpuwire_allreduce(c, sa, sb, GPUWIRE_SUM, NULL), b, 4);
    RUN("inplace", gpuwire_allreduce(c, sa, sa, GPUWIRE_SUM, NULL), a, 4);
    fill(a, 4, 1);
    sync_in();
    RUN("avg", gpuwire_allreduce(c, sa, sb, GPUWIRE_AVG, NULL), b, 4);
    RUN("max", gpuwire_allreduce(c, sa, sb, GPUWIRE_MAX, NULL), b, 4);
    gpuwire_buffer sd = wrap(d, 4, GPUWIRE_FLOAT64);
    RUN("dtype mismatch", gpuwire_allreduce(c, sa, sd, GPUWIRE_SUM, NULL), b, 0);
    gpuwire_buffer s3 = wrap(b, 3, GPUWIRE_FLOAT32);
    RUN("count mismatch", gpuwire_allreduce(c, sa, s3, GPUWIRE_SUM, NULL), b, 0);
    gpuwire_buffer cx = wrap(d, 2, GPUWIRE_COMPLEX64), cy = wrap(d + 4, 2, GPUWIRE_COMPLEX64);
    RUN("min complex", gpuwire_allreduce(c, cx, cy, GPUWIRE_MIN, NULL), b, 0);
    RUN("band float", gpuwire_allreduce(c, sa, sb, GPUWIRE_BAND, NULL), b, 0);
    RUN("bad op", gpuwire_allreduce(c, sa, sb, 99, NULL), b, 0);
    gpuwire_buffer v0, v1, v2;
    gpuwire_buffer_view(sa, 0, 2, &v0);
    gpuwire_buffer_view(sa, 1, 2, &v1);
    gpuwire_buffer_view(sa, 0, 2, &v2);
    fill(a, 4, 1);
    sync_in();
    RUN("overlap", gpuwire_allreduce(c, v0, v1, GPUWIRE_SUM, NULL), a, 4);
    RUN("inplace views", gpuwire_allreduce(c, v0, v2, GPUWIRE_SUM, NULL), a, 4);
    gpuwire_buffer st;
    fill(a, 8, 1);
    sync_in();
    gpuwire_buffer s8 = wrap(a, 8, GPUWIRE_FLOAT32);
    gpuwire_buffer_view_strided(s8, 0, 2, 1, 2, &st);
    gpuwire_buffer b2 = wrap(b, 2, GPUWIRE_FLOAT32);
    RUN("strided send", gpuwire_allreduce(c, st, b2, GPUWIRE_SUM, NULL), b, 2);
    gpuwire_buffer e1 = wrap(b, 0, GPUWIRE_FLOAT32), e2 = wrap(b + 4, 0, GPUWIRE_FLOAT32);
    RUN("empty", gpuwire_allreduce(c, e1, e2, GPUWIRE_SUM, NULL), b, 0);
    /* Behind a nonblocking one that was not waited for. */
    float *x = mem.x, *y = mem.y;
    fill(a, 4, 1); fill(x, 4, 10); memset(b, 0, sizeof mem.b); memset(y, 0, sizeof mem.y);
    sync_in();
    gpuwire_buffer sx = wrap(x, 4, GPUWIRE_FLOAT32), sy = wrap(y, 4, GPUWIRE_FLOAT32);
    gpuwire_request q;
    gpuwire_status s1 = gpuwire_iallreduce(c, sa, sb, GPUWIRE_SUM, NULL, &q);
    RUN("after iallreduce", gpuwire_allreduce(c, sx, sy, GPUWIRE_SUM, NULL), y, 4);
    RUN("iallreduce wait", s1 ? s1 : gpuwire_wait(&q), b, 4);
    /* In a group. */
    memset(y, 0, sizeof mem.y);
    sync_in();
    gpuwire_group_start();
    RUN("in group", gpuwire_allreduce(c, sx, sy, GPUWIRE_SUM, NULL), y, 4);
    RUN("group end", gpuwire_group_end(), y, 4);
    gpuwire_group_start();
    RUN("group bad", gpuwire_allreduce(c, sa, sd, GPUWIRE_SUM, NULL), y, 0);
    RUN("group bad end", gpuwire_group_end(), y, 0);
    gpuwire_buffer stale = sb; /* a copy, freed below through another copy */
    gpuwire_buffer tmp = wrap(b, 4, GPUWIRE_FLOAT32), tmpc = tmp;
    gpuwire_buffer_free(tmp);
    RUN("freed recv", gpuwire_allreduce(c, sa, tmpc, GPUWIRE_SUM, NULL), b, 0);
    RUN("null comm", gpuwire_allreduce(GPUWIRE_COMM_NULL, sa, stale, GPUWIRE_SUM, NULL), b, 0);
    /* BAND on int32 (NCCL's fallback on device), device send into host receive (mixed), and a
     * host allreduce on this communicator. */
    for (int k = 0; k < 8; k++) mem.i[k] = 7 + k + rank;
    sync_in();
    gpuwire_buffer ia = wrap(mem.i, 4, GPUWIRE_INT32), ib = wrap(mem.i + 4, 4, GPUWIRE_INT32);
    RUN("band int32", gpuwire_allreduce(c, ia, ib, GPUWIRE_BAND, NULL), b, 0);
    float h[4] = {0, 0, 0, 0}, hs[4] = {5, 6, 7, 8};
    gpuwire_buffer hb = wrap_host(h, 4, GPUWIRE_FLOAT32), hsb = wrap_host(hs, 4, GPUWIRE_FLOAT32);
    RUN("mixed", gpuwire_allreduce(c, sx, hb, GPUWIRE_SUM, NULL), h, 4);
    RUN("host", gpuwire_allreduce(c, hsb, hb, GPUWIRE_SUM, NULL), h, 4);
    printf("[%d] %-28s -> | %d %d %d %d\n", rank, "band int32 result", mem.i[4], mem.i[5], mem.i[6], mem.i[7]);
    gpuwire_buffer *all[] = {&sa, &sb, &sd, &s3, &cx, &cy, &v0, &v1, &v2, &st, &s8, &b2, &e1, &e2, &sx, &sy, &ia, &ib, &hb, &hsb};
    for (unsigned i = 0; i < sizeof all / sizeof *all; i++) gpuwire_buffer_free(*all[i]);
}

/* Device mode's setup: the CUDA driver's copies, a context current, the device mirror. */
static int device_setup(void) {
    void *cu = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cu) return 1;
    int (*retain)(void **, int) = (int (*)(void **, int))dlsym(cu, "cuDevicePrimaryCtxRetain");
    int (*set)(void *) = (int (*)(void *))dlsym(cu, "cuCtxSetCurrent");
    int (*alloc)(uintptr_t *, size_t) = (int (*)(uintptr_t *, size_t))dlsym(cu, "cuMemAlloc_v2");
    cu_htod = (int (*)(uintptr_t, const void *, size_t))dlsym(cu, "cuMemcpyHtoD_v2");
    cu_dtoh = (int (*)(void *, uintptr_t, size_t))dlsym(cu, "cuMemcpyDtoH_v2");
    cu_ctx_sync = (int (*)(void))dlsym(cu, "cuCtxSynchronize");
    void *ctx;
    uintptr_t p;
    if (!retain || !set || !alloc || !cu_htod || !cu_dtoh || !cu_ctx_sync || retain(&ctx, 0) || set(ctx) || alloc(&p, sizeof mem)) return 1;
    dmem = (char *)p;
    return 0;
}

/* A world communicator of this mode's backend (NCCL on device memory, else HOST), in checking
 * mode or not, with a timeout of `timeout` seconds (0: none). */
static gpuwire_comm world(int check, double timeout) {
    gpuwire_config cfg;
    gpuwire_comm c;
    memset(&c, 0, sizeof c);
    gpuwire_config_init(&cfg);
    cfg.backend = dev ? GPUWIRE_BACKEND_NCCL : GPUWIRE_BACKEND_HOST;
    cfg.check = check;
    cfg.timeout_seconds = timeout;
    gpuwire_comm_world(&cfg, &c);
    return c;
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    gpuwire_init();
    dev = argc > 1 && strcmp(argv[1], "nccl") == 0;
    if (dev && device_setup()) {
        fprintf(stderr, "equiv: no CUDA device\n");
        return 2;
    }
    gpuwire_comm c = world(0, 0);
    cases(c, "plain");
    gpuwire_comm_free(c);
    c = world(1, 0);
    cases(c, "check");
    gpuwire_comm_free(c);
    c = world(0, 5);
    cases(c, "timeout");
    /* Aborted: broken. */
    float *a = mem.a, *b = mem.b;
    a[0] = 1, a[1] = 2;
    sync_in();
    gpuwire_buffer sa = wrap(a, 2, GPUWIRE_FLOAT32), sb = wrap(b, 2, GPUWIRE_FLOAT32);
    gpuwire_comm_abort(c);
    show("aborted", gpuwire_allreduce(c, sa, sb, GPUWIRE_SUM, NULL), b, 0);
    show("aborted bad dtype", gpuwire_allreduce(c, sa, wrap(b, 1, GPUWIRE_FLOAT64), GPUWIRE_SUM, NULL), b, 0);
    gpuwire_comm_free(c);
    gpuwire_finalize();
    MPI_Finalize();
    return 0;
}
