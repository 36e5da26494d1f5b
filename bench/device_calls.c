/* Host cost of gpuwire's NCCL calls on device buffers against the same raw NCCL calls, 1 rank,
 * on one stream with no synchronisation inside the loop (as NCCL programs call them).
 *
 * Runs on a GPU machine (real NCCL: the host time of enqueuing) and, for instruction counts and
 * profiles, on any machine with the null device (bench/null_device.c; scripts/null-device.sh
 * builds it and runs this program both ways):
 *   mpicc -O2 -Iinclude bench/device_calls.c -o device_calls -Ltarget/release -lgpuwire \
 *       -Wl,-rpath,$PWD/target/release -ldl
 *   LD_LIBRARY_PATH=.nulldev valgrind --tool=callgrind --collect-atstart=no \
 *       --toggle-collect=run_loop --callgrind-out-file=cg.C.N ./device_calls C N
 * Instructions per iteration = (total of cg.C.200 - total of cg.C.0) / 200. Cases: 0
 * gpuwire_allreduce of 8 B; 1 gpuwire_sendrecv of 8 B to itself; 2 a halo group
 * (gpuwire_group_start, two gpuwire_send and two gpuwire_recv of 8 B rows, gpuwire_group_end);
 * 3-5 the same with raw NCCL (ncclAllReduce; ncclSend + ncclRecv in a group; the group of four).
 *
 * Wall clock: `./device_calls time [REPS]` prints, per case, the medians of REPS (default 31)
 * blocks of gpuwire and raw NCCL timed alternately (each block ends with a stream
 * synchronisation), and the median of the blocks' differences (ns added per call or group). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpuwire.h"

typedef struct {
    char internal[128];
} nccl_id;
static int (*nccl_get_unique_id)(nccl_id *);
static int (*nccl_init_rank)(void **, int, nccl_id, int);
static int (*nccl_destroy)(void *);
static int (*nccl_all_reduce)(const void *, void *, size_t, int, int, void *, void *);
static int (*nccl_send)(const void *, size_t, int, int, void *, void *);
static int (*nccl_recv)(void *, size_t, int, int, void *, void *);
static int (*nccl_group_start)(void);
static int (*nccl_group_end)(void);
static int (*cu_stream_create)(void **, unsigned);
static int (*cu_stream_synchronize)(void *);
static int (*cu_primary_retain)(void **, int);
static int (*cu_ctx_set_current)(void *);

#define FLOAT32 7 /* ncclFloat32 */
#define SUM 0     /* ncclSum */

static gpuwire_comm comm;
static void *nccl, *stream;
static gpuwire_buffer s, r, rows[4];
static char *sp, *rp;

__attribute__((noinline)) void run_loop(int which, int n) {
    for (int k = 0; k < n; k++) {
        switch (which) {
        case 0: gpuwire_allreduce(comm, s, r, GPUWIRE_SUM, stream); break;
        case 1: gpuwire_sendrecv(comm, s, 0, 2, r, 0, 2, stream); break;
        case 2:
            gpuwire_group_start();
            gpuwire_send(comm, rows[0], 0, 1, stream);
            gpuwire_send(comm, rows[1], 0, 2, stream);
            gpuwire_recv(comm, rows[2], 0, 1, stream);
            gpuwire_recv(comm, rows[3], 0, 2, stream);
            gpuwire_group_end();
            break;
        case 3: nccl_all_reduce(sp, rp, 2, FLOAT32, SUM, nccl, stream); break;
        case 4:
            nccl_group_start();
            nccl_send(sp, 2, FLOAT32, 0, nccl, stream);
            nccl_recv(rp, 2, FLOAT32, 0, nccl, stream);
            nccl_group_end();
            break;
        case 5:
            nccl_group_start();
            nccl_send(sp, 2, FLOAT32, 0, nccl, stream);
            nccl_send(sp + 8, 2, FLOAT32, 0, nccl, stream);
            nccl_recv(rp, 2, FLOAT32, 0, nccl, stream);
            nccl_recv(rp + 8, 2, FLOAT32, 0, nccl, stream);
            nccl_group_end();
            break;
        }
    }
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void timed(int which, int n) {
    run_loop(which, n);
    cu_stream_synchronize(stream);
}

static void wall_clock(int reps) {
    static const char *names[3] = {"allreduce 8 B", "sendrecv 8 B", "halo group 8 B"};
    static const int iters[3] = {2000, 2000, 1000};
    double g[201], w[201], d[201];
    if (reps < 1 || reps > 201) reps = 31;
    for (int c = 0; c < 3; c++) {
        timed(c, iters[c]);
        timed(c + 3, iters[c]);
        for (int k = 0; k < reps; k++) {
            double t0 = now_ns();
            timed(c, iters[c]);
            double t1 = now_ns();
            timed(c + 3, iters[c]);
            double t2 = now_ns();
            g[k] = (t1 - t0) / iters[c];
            w[k] = (t2 - t1) / iters[c];
            d[k] = g[k] - w[k];
        }
        qsort(g, reps, sizeof g[0], by_value);
        qsort(w, reps, sizeof w[0], by_value);
        qsort(d, reps, sizeof d[0], by_value);
        printf("%-15s raw %8.1f ns  gpuwire %8.1f ns  added %8.1f ns\n", names[c], w[reps / 2], g[reps / 2], d[reps / 2]);
    }
}

static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "device_calls: %s not found\n", name);
        exit(2);
    }
    return p;
}

static int fail(const char *what) {
    char msg[512];
    gpuwire_last_error(msg, sizeof msg);
    fprintf(stderr, "device_calls: %s: %s\n", what, msg);
    return 2;
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int timing = argc >= 2 && strcmp(argv[1], "time") == 0;
    if (!timing && argc != 3) {
        fprintf(stderr, "usage: device_calls CASE ITERATIONS | device_calls time [REPS]\n");
        return 2;
    }
    void *cu = dlopen("libcuda.so.1", RTLD_NOW), *nc = dlopen("libnccl.so.2", RTLD_NOW);
    if (!cu || !nc) {
        fprintf(stderr, "device_calls: needs libcuda.so.1 and libnccl.so.2 (or the null device's)\n");
        return 2;
    }
    nccl_get_unique_id = (int (*)(nccl_id *))sym(nc, "ncclGetUniqueId");
    nccl_init_rank = (int (*)(void **, int, nccl_id, int))sym(nc, "ncclCommInitRank");
    nccl_destroy = (int (*)(void *))sym(nc, "ncclCommDestroy");
    nccl_all_reduce = (int (*)(const void *, void *, size_t, int, int, void *, void *))sym(nc, "ncclAllReduce");
    nccl_send = (int (*)(const void *, size_t, int, int, void *, void *))sym(nc, "ncclSend");
    nccl_recv = (int (*)(void *, size_t, int, int, void *, void *))sym(nc, "ncclRecv");
    nccl_group_start = (int (*)(void))sym(nc, "ncclGroupStart");
    nccl_group_end = (int (*)(void))sym(nc, "ncclGroupEnd");
    cu_stream_create = (int (*)(void **, unsigned))sym(cu, "cuStreamCreate");
    cu_stream_synchronize = (int (*)(void *))sym(cu, "cuStreamSynchronize");
    cu_primary_retain = (int (*)(void **, int))sym(cu, "cuDevicePrimaryCtxRetain");
    cu_ctx_set_current = (int (*)(void *))sym(cu, "cuCtxSetCurrent");

    if (gpuwire_init() != GPUWIRE_SUCCESS) return fail("gpuwire_init");
    gpuwire_config cfg;
    gpuwire_config_init(&cfg);
    cfg.backend = GPUWIRE_BACKEND_NCCL;
    if (gpuwire_comm_world(&cfg, &comm) != GPUWIRE_SUCCESS) return fail("gpuwire_comm_world (NCCL, 1 rank)");
    int device = 0;
    gpuwire_comm_device(comm, &device);
    void *ctx;
    if (cu_primary_retain(&ctx, device) || cu_ctx_set_current(ctx) || cu_stream_create(&stream, 1)) {
        fprintf(stderr, "device_calls: no context or stream on device %d\n", device);
        return 2;
    }
    nccl_id id;
    if (nccl_get_unique_id(&id) || nccl_init_rank(&nccl, 1, id, 0)) {
        fprintf(stderr, "device_calls: raw NCCL communicator\n");
        return 2;
    }
    gpuwire_buffer sb, rb; /* 4 float32 each: s and r are their first 2, rows their halves */
    if (gpuwire_buffer_alloc(4, GPUWIRE_FLOAT32, GPUWIRE_SPACE_DEVICE, device, &sb) ||
        gpuwire_buffer_alloc(4, GPUWIRE_FLOAT32, GPUWIRE_SPACE_DEVICE, device, &rb))
        return fail("gpuwire_buffer_alloc");
    gpuwire_buffer_pointer(sb, (void **)&sp);
    gpuwire_buffer_pointer(rb, (void **)&rp);
    if (gpuwire_buffer_view(sb, 0, 2, &s) || gpuwire_buffer_view(rb, 0, 2, &r) || gpuwire_buffer_view(sb, 0, 2, &rows[0]) ||
        gpuwire_buffer_view(sb, 2, 2, &rows[1]) || gpuwire_buffer_view(rb, 0, 2, &rows[2]) || gpuwire_buffer_view(rb, 2, 2, &rows[3]))
        return fail("gpuwire_buffer_view");
    if (timing) {
        wall_clock(argc > 2 ? atoi(argv[2]) : 31);
    } else {
        int which = atoi(argv[1]), n = atoi(argv[2]);
        run_loop(which, 50); /* warm-up: in both counts, so it cancels */
        run_loop(which, n);
        cu_stream_synchronize(stream);
    }
    gpuwire_comm_free(comm);
    nccl_destroy(nccl);
    gpuwire_finalize();
    MPI_Finalize();
    return 0;
}
