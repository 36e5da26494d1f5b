/* Instructions per call of gpuwire's host layer against the raw MPI call, on 1 rank (messages
 * to itself), counted by callgrind: deterministic, so a loaded machine does not blur them.
 *   cc=mpicc; $cc -O2 -Iinclude bench/host_calls.c -o host_calls -Ltarget/release -lgpuwire \
 *       -Wl,-rpath,$PWD/target/release
 *   for c in 0 1 2 3 4 5 6 7 8 9; do for n in 0 200; do
 *     valgrind --tool=callgrind --collect-atstart=no --toggle-collect=run_loop \
 *       --callgrind-out-file=cg.$c.$n ./host_calls $c $n; done; done
 * Instructions per iteration = (total of cg.C.200 - total of cg.C.0) / 200 (/ 64 for cases 3,
 * 7 and 9: per message pair). Cases: 0 gpuwire_isend to GPUWIRE_PROC_NULL + gpuwire_wait;
 * 1 gpuwire_allreduce of 8 B; 2 gpuwire_sendrecv of 8 B to itself; 3 a window of 64
 * gpuwire_irecv + 64 gpuwire_isend to itself + gpuwire_waitall; 4-7 the same with raw MPI
 * (MPI_Isend + MPI_Wait, MPI_Allreduce, MPI_Sendrecv, MPI_Irecv/MPI_Isend/MPI_Waitall);
 * 8 and 9 cases 2 and 3 in raw MPI calls made as gpuwire makes them for receives that take
 * exactly their buffer (src/backend/p2p.rs: a message is matched first, MPI_Mprobe or
 * MPI_Improbe, and received once its size is known to fit): 8 MPI_Isend + MPI_Mprobe +
 * MPI_Mrecv + MPI_Wait; 9 per receive an MPI_Improbe at its post that finds nothing (the
 * receive is deferred), the 64 MPI_Isend, then per receive MPI_Improbe + MPI_Imrecv, and
 * MPI_Waitall. They are the floor of gpuwire's receive semantics on this MPI: what gpuwire's
 * own code adds is case 2 - case 8 and case 3 - case 9.
 *
 * Wall clock of the same loops: `./host_calls time [REPS]` prints, per case, the medians of
 * REPS (default 31) blocks of gpuwire and raw MPI timed alternately, and the median of the
 * blocks' differences (ns added per call; per message pair for the window). Atomic instructions
 * weigh more there than in the counts (about 6 ns each on the development machine).
 *
 * HOST_CALLS_THRASH=BYTES (environment) writes BYTES of other memory before each call, in
 * `host_thrash`, as a message of that size copied between calls would: the call then finds its
 * data colder. Counted, the data lines a call touches (callgrind's cache simulation, collection
 * off inside `host_thrash`):
 *   HOST_CALLS_THRASH=2097152 valgrind --tool=callgrind --cache-sim=yes --D1=32768,8,64 \
 *     --LL=1048576,16,64 --collect-atstart=no --toggle-collect=run_loop \
 *     --toggle-collect=host_thrash --callgrind-out-file=cc.$c.$n ./host_calls $c $n
 * lines per call = (DLmr + DLmw of cc.C.100 - of cc.C.0) / 100 (n = 0 and 100); which ones:
 * scripts/cold-lines.py. Timed: HOST_CALLS_THRASH=65536 ./host_calls time (each block's time
 * includes the writes, for gpuwire and raw MPI alike; the difference is what colder data
 * costs the call). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpuwire.h"

#define W 64
static gpuwire_comm comm;
static MPI_Comm raw;
static float sb[2 * W], rb[2 * W];
static gpuwire_buffer s[W], r[W];

/* HOST_CALLS_THRASH (see the header). */
static size_t thrash_bytes;
static char *thrash_mem;

__attribute__((noinline)) void host_thrash(void) {
    if (thrash_bytes) memset(thrash_mem, (int)(thrash_bytes & 0x7f), thrash_bytes);
}

__attribute__((noinline)) void run_loop(int which, int n) {
    for (int k = 0; k < n; k++) {
        host_thrash();
        switch (which) {
        case 0: {
            gpuwire_request q;
            gpuwire_isend(comm, s[0], GPUWIRE_PROC_NULL, 1, NULL, &q);
            gpuwire_wait(&q);
            break;
        }
        case 1: gpuwire_allreduce(comm, s[0], r[0], GPUWIRE_SUM, NULL); break;
        case 2: gpuwire_sendrecv(comm, s[0], 0, 2, r[0], 0, 2, NULL); break;
        case 3: {
            gpuwire_request q[2 * W];
            for (int i = 0; i < W; i++) gpuwire_irecv(comm, r[i], 0, 1, NULL, &q[i]);
            for (int i = 0; i < W; i++) gpuwire_isend(comm, s[i], 0, 1, NULL, &q[W + i]);
            gpuwire_waitall(2 * W, q);
            break;
        }
        case 4: {
            MPI_Request q;
            MPI_Isend(sb, 2, MPI_FLOAT, MPI_PROC_NULL, 1, raw, &q);
            MPI_Wait(&q, MPI_STATUS_IGNORE);
            break;
        }
        case 5: MPI_Allreduce(sb, rb, 2, MPI_FLOAT, MPI_SUM, raw); break;
        case 6: MPI_Sendrecv(sb, 2, MPI_FLOAT, 0, 2, rb, 2, MPI_FLOAT, 0, 2, raw, MPI_STATUS_IGNORE); break;
        case 7: {
            MPI_Request q[2 * W];
            for (int i = 0; i < W; i++) MPI_Irecv(rb + 2 * i, 2, MPI_FLOAT, 0, 1, raw, &q[i]);
            for (int i = 0; i < W; i++) MPI_Isend(sb + 2 * i, 2, MPI_FLOAT, 0, 1, raw, &q[W + i]);
            MPI_Waitall(2 * W, q, MPI_STATUSES_IGNORE);
            break;
        }
        case 8: {
            MPI_Request q;
            MPI_Message m;
            MPI_Isend(sb, 2, MPI_FLOAT, 0, 2, raw, &q);
            MPI_Mprobe(0, 2, raw, &m, MPI_STATUS_IGNORE);
            MPI_Mrecv(rb, 2, MPI_FLOAT, &m, MPI_STATUS_IGNORE);
            MPI_Wait(&q, MPI_STATUS_IGNORE);
            break;
        }
        case 9: {
            MPI_Request q[2 * W];
            MPI_Message m;
            int found;
            for (int i = 0; i < W; i++) MPI_Improbe(0, 1, raw, &found, &m, MPI_STATUS_IGNORE);
            for (int i = 0; i < W; i++) MPI_Isend(sb + 2 * i, 2, MPI_FLOAT, 0, 1, raw, &q[W + i]);
            for (int i = 0; i < W; i++) {
                MPI_Improbe(0, 1, raw, &found, &m, MPI_STATUS_IGNORE);
                MPI_Imrecv(rb + 2 * i, 2, MPI_FLOAT, &m, &q[i]);
            }
            MPI_Waitall(2 * W, q, MPI_STATUSES_IGNORE);
            break;
        }
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

/* Cases `a` and `b` alternately, `reps` blocks of `iters` iterations (`per` calls or message
 * pairs each): prints the medians per call of `b` (raw), of `a` and of their difference. */
static void compare(const char *name, int a, int b, int iters, double per, int reps, const char *who, const char *note) {
    double g[201], w[201], d[201];
    run_loop(a, iters);
    run_loop(b, iters);
    for (int k = 0; k < reps; k++) {
        double t0 = now_ns();
        run_loop(a, iters);
        double t1 = now_ns();
        run_loop(b, iters);
        double t2 = now_ns();
        g[k] = (t1 - t0) / per;
        w[k] = (t2 - t1) / per;
        d[k] = g[k] - w[k];
    }
    qsort(g, reps, sizeof g[0], by_value);
    qsort(w, reps, sizeof w[0], by_value);
    qsort(d, reps, sizeof d[0], by_value);
    printf("%-17s raw %8.1f ns  %s %8.1f ns  added %8.1f ns%s\n", name, w[reps / 2], who, g[reps / 2], d[reps / 2], note);
}

static void wall_clock(int reps) {
    static const char *names[4] = {"isend+wait", "allreduce 8 B", "sendrecv 8 B", "window, per pair"};
    static const int iters[4] = {20000, 20000, 10000, 300};
    if (reps < 1 || reps > 201) reps = 31;
    for (int c = 0; c < 4; c++)
        compare(names[c], c, c + 4, iters[c], c == 3 ? iters[c] * (double)W : iters[c], reps, "gpuwire", "");
    /* gpuwire's receive semantics in raw MPI (cases 8 and 9) against plain MPI (6 and 7): what
     * matching before receiving costs MPI itself, and so the least gpuwire can add. */
    for (int c = 2; c < 4; c++)
        compare(names[c], c + 6, c + 4, iters[c], c == 3 ? iters[c] * (double)W : iters[c], reps, "matched", "  (raw MPI, gpuwire's matching)");
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    const char *thrash = getenv("HOST_CALLS_THRASH");
    if (thrash && atol(thrash) > 0) {
        thrash_bytes = (size_t)atol(thrash);
        thrash_mem = malloc(thrash_bytes);
        if (!thrash_mem) return 2;
    }
    int timing = argc >= 2 && strcmp(argv[1], "time") == 0;
    if ((!timing && argc != 3) || gpuwire_init() != GPUWIRE_SUCCESS) return 2;
    gpuwire_config cfg;
    gpuwire_config_init(&cfg);
    cfg.backend = GPUWIRE_BACKEND_HOST;
    if (gpuwire_comm_world(&cfg, &comm) != GPUWIRE_SUCCESS) return 2;
    MPI_Comm_dup(MPI_COMM_WORLD, &raw);
    for (int i = 0; i < W; i++) {
        gpuwire_buffer_wrap(sb + 2 * i, 2, GPUWIRE_FLOAT32, GPUWIRE_SPACE_HOST, &s[i]);
        gpuwire_buffer_wrap(rb + 2 * i, 2, GPUWIRE_FLOAT32, GPUWIRE_SPACE_HOST, &r[i]);
    }
    if (timing) {
        wall_clock(argc > 2 ? atoi(argv[2]) : 31);
    } else {
        int which = atoi(argv[1]), n = atoi(argv[2]);
        run_loop(which, 50); /* warm-up: in both counts, so it cancels */
        run_loop(which, n);
    }
    gpuwire_finalize();
    MPI_Comm_free(&raw);
    MPI_Finalize();
    return 0;
}
