/* The MPI floor of a two-phase allreduce between two processes (what MPI_STAGED's large
 * allreduces do, src/backend/split.rs, and what careful staging by hand does with its halves),
 * with no GPU and no reduction: on host memory, per segment of S bytes, phase 1 exchanges the
 * half that the other rank reduces (MPI_Sendrecv of S / 2 bytes each way), phase 2 exchanges
 * the reduced halves (again S / 2 each way); N / S segments. So each rank sends N bytes and
 * receives N bytes, as the two-phase allreduce of N bytes on two ranks does. Mode 1 makes the
 * same exchanges as gpuwire's own calls do (`split::exchange`, `split::gather`): phase 1 one
 * MPI_Alltoallw of float blocks (byte displacements, nothing to itself), phase 2 one in-place
 * MPI_Allgatherv. Also prints
 * MPI_Allreduce (MPI_FLOAT, MPI_SUM) of the same N bytes on the same host memory for scale.
 *   mpirun -np 2 probe_exchange [N bytes, default 256 MiB] [S bytes, default 4 MiB] [repetitions, default 5] [mode 0|1, default 0]
 * Memory: plain malloc, or page-locked with cudaHostAlloc in the real path; a host-only probe
 * cannot page-lock, and MPI's shared-memory transport copies either the same way.
 * Prints the median (and min) ms of the two phases and of MPI_Allreduce, and the implied rate
 * (bytes each rank sends per second). */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0)
            fprintf(stderr, "probe_exchange: run it on 2 ranks\n");
        MPI_Finalize();
        return 2;
    }
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)256 << 20;
    size_t seg = argc > 2 ? strtoull(argv[2], NULL, 0) : (size_t)4 << 20;
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    int mode = argc > 4 ? atoi(argv[4]) : 0;
    if (seg < 8 || seg > n || reps < 1 || reps > 100 || n >= (size_t)1 << 31 || mode < 0 || mode > 1) {
        if (rank == 0)
            fprintf(stderr, "probe_exchange: need 8 <= S <= N < 2 GiB, 1..100 repetitions, mode 0 or 1\n");
        MPI_Finalize();
        return 2;
    }
    seg &= ~(size_t)7;
    n &= ~(size_t)7;
    char *a = malloc(n), *b = malloc(n), *c = malloc(n);
    if (!a || !b || !c) {
        fprintf(stderr, "probe_exchange: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(a, rank + 1, n);
    memset(b, 0, n);
    memset(c, 0, n);
    int peer = 1 - rank;
    double *tx = malloc(sizeof(double) * reps), *ta = malloc(sizeof(double) * reps);
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up (first touch of every page) */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (size_t off = 0; off < n && mode == 1; off += seg) {
            /* In floats: rank 0's block [0, h), rank 1's [h, s). */
            int s = (int)((n - off < seg ? n - off : seg) / 4), h = s / 2, at = (int)(off / 4);
            int len[2] = {h, s - h}, start[2] = {at, at + h};
            int sc[2] = {0, 0}, sd[2] = {0, 0}, rc[2] = {0, 0}, rd[2] = {0, 0};
            MPI_Datatype ts[2] = {MPI_FLOAT, MPI_FLOAT};
            sc[peer] = len[peer];
            sd[peer] = start[peer] * 4;
            rc[peer] = len[rank];
            rd[peer] = 0;
            MPI_Alltoallw(a, sc, sd, ts, b + off, rc, rd, ts, MPI_COMM_WORLD);
            MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, (float *)c, len, start, MPI_FLOAT, MPI_COMM_WORLD);
        }
        for (size_t off = 0; off < n && mode == 0; off += seg) {
            size_t s = n - off < seg ? n - off : seg, h = s / 2;
            /* Phase 1: rank 0 reduces the first half, rank 1 the second: send the other's. */
            char *mine = a + off + (rank ? h : 0), *theirs = a + off + (rank ? 0 : h);
            MPI_Sendrecv(theirs, (int)(rank ? h : s - h), MPI_BYTE, peer, 1, b + off, (int)(rank ? s - h : h), MPI_BYTE, peer, 1,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            /* Phase 2: send this rank's reduced half, receive the other's. */
            MPI_Sendrecv(mine, (int)(rank ? s - h : h), MPI_BYTE, peer, 2, c + off, (int)(rank ? h : s - h), MPI_BYTE, peer, 2,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        double t1 = MPI_Wtime();
        MPI_Barrier(MPI_COMM_WORLD);
        double t2 = MPI_Wtime();
        MPI_Allreduce(a, b, (int)(n / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double t3 = MPI_Wtime();
        if (r >= 0) {
            tx[r] = (t1 - t0) * 1e3;
            ta[r] = (t3 - t2) * 1e3;
        }
    }
    /* Rank 0's times are the ones printed; the barrier before each phase lines the ranks up. */
    if (rank == 0) {
        double mx = tx[0], ma = ta[0];
        for (int r = 1; r < reps; r++) {
            mx = tx[r] < mx ? tx[r] : mx;
            ma = ta[r] < ma ? ta[r] : ma;
        }
        qsort(tx, reps, sizeof(double), cmpd);
        qsort(ta, reps, sizeof(double), cmpd);
        double medx = tx[reps / 2], meda = ta[reps / 2];
        printf("probe_exchange: N %zu bytes, segments of %zu, %d repetitions, mode %d\n", n, seg, reps, mode);
        printf("  two phases (%s, no reduction): median %.2f ms, min %.2f ms, %.2f GB/s sent per rank\n",
               mode ? "MPI_Alltoallw, MPI_Allgatherv in place" : "MPI_Sendrecv of the halves", medx, mx, n / (medx * 1e-3) / 1e9);
        printf("  MPI_Allreduce (float, sum):                            median %.2f ms, min %.2f ms\n", meda, ma);
    }
    free(a);
    free(b);
    free(c);
    free(tx);
    free(ta);
    MPI_Finalize();
    return 0;
}
