/* Instructions per call of gpuwire's host layer against the raw MPI call, on 1 rank (messages
 * to itself), counted by callgrind: deterministic, so a loaded machine does not blur them.
 *   cc=mpicc; $cc -O2 -Iinclude bench/host_calls.c -o host_calls -Ltarget/release -lgpuwire \
 *       -Wl,-rpath,$PWD/target/release
 *   for c in 0 1 2 3 4 5 6 7; do for n in 0 200; do
 *     valgrind --tool=callgrind --collect-atstart=no --toggle-collect=run_loop \
 *       --callgrind-out-file=cg.$c.$n ./host_calls $c $n; done; done
 * Instructions per iteration = (total of cg.C.200 - total of cg.C.0) / 200 (/ 64 for cases 3
 * and 7: per message pair). Cases: 0 gpuwire_isend to GPUWIRE_PROC_NULL + gpuwire_wait;
 * 1 gpuwire_allreduce of 8 B; 2 gpuwire_sendrecv of 8 B to itself; 3 a window of 64
 * gpuwire_irecv + 64 gpuwire_isend to itself + gpuwire_waitall; 4-7 the same with raw MPI
 * (MPI_Isend + MPI_Wait, MPI_Allreduce, MPI_Sendrecv, MPI_Irecv/MPI_Isend/MPI_Waitall). */
#include <mpi.h>
#include <stdlib.h>

#include "gpuwire.h"

#define W 64
static gpuwire_comm comm;
static MPI_Comm raw;
static float sb[2 * W], rb[2 * W];
static gpuwire_buffer s[W], r[W];

__attribute__((noinline)) void run_loop(int which, int n) {
    for (int k = 0; k < n; k++) {
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
        }
    }
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (argc != 3 || gpuwire_init() != GPUWIRE_SUCCESS) return 2;
    gpuwire_config cfg;
    gpuwire_config_init(&cfg);
    cfg.backend = GPUWIRE_BACKEND_HOST;
    if (gpuwire_comm_world(&cfg, &comm) != GPUWIRE_SUCCESS) return 2;
    MPI_Comm_dup(MPI_COMM_WORLD, &raw);
    for (int i = 0; i < W; i++) {
        gpuwire_buffer_wrap(sb + 2 * i, 2, GPUWIRE_FLOAT32, GPUWIRE_SPACE_HOST, &s[i]);
        gpuwire_buffer_wrap(rb + 2 * i, 2, GPUWIRE_FLOAT32, GPUWIRE_SPACE_HOST, &r[i]);
    }
    int which = atoi(argv[1]), n = atoi(argv[2]);
    run_loop(which, 50); /* warm-up: in both counts, so it cancels */
    run_loop(which, n);
    gpuwire_finalize();
    MPI_Comm_free(&raw);
    MPI_Finalize();
    return 0;
}
