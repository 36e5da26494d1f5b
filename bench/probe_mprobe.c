/* Message-rate floor of receives that match before they receive (what gpuwire's receives do, so
 * that MPI never writes past a receive buffer: src/backend/p2p.rs) against plain pre-posted
 * receives, in one run, with no gpuwire in between. OSU osu_bw style: rank 0 sends a window of
 * W messages of B bytes (MPI_Isend, MPI_Waitall) and waits for a 4-byte acknowledgement; rank 1
 * receives the window and acknowledges it.
 *   mode 0 (raw):    rank 1 posts W MPI_Irecv, then MPI_Waitall.
 *   mode 1 (match):  rank 1 tries MPI_Improbe for each receive in posting order (MPI_Imrecv when
 *                    its message is there, else it stays queued), then completes them in order:
 *                    a queued one is matched by MPI_Improbe + MPI_Imrecv in a test loop, every
 *                    received one waited for with MPI_Wait.
 * Window 0: a ping-pong of blocking calls instead (what `gpuwire-bench host --op sendrecv`
 * times): rank 0 MPI_Send then receives, rank 1 receives then MPI_Send, the receive being
 *   mode 0 (raw):    MPI_Recv;
 *   mode 1 (match):  MPI_Mprobe, the size from the status, MPI_Mrecv (gpuwire_recv's path);
 * the time printed is one way (half the round trip).
 * mpirun -np 2 probe_mprobe [bytes] [window] [iterations per block] [repetitions]
 * Prints, for both modes, the median time per message over the repetitions (blocks alternate
 * between the modes, the order flipping each repetition) and the median per-repetition
 * difference. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A blocking receive of `bytes` from `peer`: MPI_Recv (mode 0) or matched first (mode 1). */
static void recv_one(int mode, char *buf, int bytes, int peer, MPI_Comm comm) {
    if (mode == 0) {
        MPI_Recv(buf, bytes, MPI_BYTE, peer, 1, comm, MPI_STATUS_IGNORE);
        return;
    }
    MPI_Message m;
    MPI_Status st;
    int n;
    MPI_Mprobe(peer, 1, comm, &m, &st);
    MPI_Get_count(&st, MPI_BYTE, &n); /* the size check gpuwire makes */
    MPI_Mrecv(buf, n, MPI_BYTE, &m, MPI_STATUS_IGNORE);
}

/* Window 0: one way of a ping-pong, per message. */
static double pingpong(int mode, int rank, char *buf, int bytes, int iters, MPI_Comm comm) {
    MPI_Barrier(comm);
    double t0 = MPI_Wtime();
    for (int k = 0; k < iters; k++) {
        if (rank == 0) {
            MPI_Send(buf, bytes, MPI_BYTE, 1, 1, comm);
            recv_one(mode, buf, bytes, 1, comm);
        } else {
            recv_one(mode, buf, bytes, 0, comm);
            MPI_Send(buf, bytes, MPI_BYTE, 0, 1, comm);
        }
    }
    double t = (MPI_Wtime() - t0) / (2.0 * iters);
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
    return t;
}

static double block(int mode, int rank, char *buf, int bytes, int w, int iters, MPI_Comm comm) {
    if (w == 0)
        return pingpong(mode, rank, buf, bytes, iters, comm);
    MPI_Request *q = malloc(sizeof(MPI_Request) * w);
    MPI_Message *m = malloc(sizeof(MPI_Message) * w);
    int *matched = malloc(sizeof(int) * w);
    int ack = 0;
    MPI_Barrier(comm);
    double t0 = MPI_Wtime();
    for (int k = 0; k < iters; k++) {
        if (rank == 0) {
            for (int i = 0; i < w; i++) MPI_Isend(buf + (size_t)i * bytes, bytes, MPI_BYTE, 1, 1, comm, &q[i]);
            MPI_Waitall(w, q, MPI_STATUSES_IGNORE);
            MPI_Recv(&ack, 1, MPI_INT, 1, 2, comm, MPI_STATUS_IGNORE);
        } else if (mode == 0) {
            for (int i = 0; i < w; i++) MPI_Irecv(buf + (size_t)i * bytes, bytes, MPI_BYTE, 0, 1, comm, &q[i]);
            MPI_Waitall(w, q, MPI_STATUSES_IGNORE);
            MPI_Send(&ack, 1, MPI_INT, 0, 2, comm);
        } else {
            int first = 0; /* receives before `first` have matched */
            for (int i = 0; i < w; i++) {
                int flag = 0;
                matched[i] = 0;
                if (first == i) {
                    MPI_Status st;
                    MPI_Improbe(0, 1, comm, &flag, &m[i], &st);
                    if (flag) {
                        int n;
                        MPI_Get_count(&st, MPI_BYTE, &n); /* the size check gpuwire makes */
                        MPI_Imrecv(buf + (size_t)i * bytes, n, MPI_BYTE, &m[i], &q[i]);
                        matched[i] = 1;
                        first = i + 1;
                    }
                }
            }
            for (int i = 0; i < w; i++) {
                while (!matched[i]) {
                    int flag = 0;
                    MPI_Status st;
                    MPI_Improbe(0, 1, comm, &flag, &m[i], &st);
                    if (flag) {
                        int n;
                        MPI_Get_count(&st, MPI_BYTE, &n);
                        MPI_Imrecv(buf + (size_t)i * bytes, n, MPI_BYTE, &m[i], &q[i]);
                        matched[i] = 1;
                    }
                }
                MPI_Wait(&q[i], MPI_STATUS_IGNORE);
            }
            MPI_Send(&ack, 1, MPI_INT, 0, 2, comm);
        }
    }
    double t = (MPI_Wtime() - t0) / ((double)iters * w);
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
    free(q);
    free(m);
    free(matched);
    return t;
}

int main(int argc, char **argv) {
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "probe_mprobe: run it on 2 ranks\n");
        MPI_Finalize();
        return 2;
    }
    int bytes = argc > 1 ? atoi(argv[1]) : 8, w = argc > 2 ? atoi(argv[2]) : 64;
    int iters = argc > 3 ? atoi(argv[3]) : 200, reps = argc > 4 ? atoi(argv[4]) : 21;
    if (reps > 101) reps = 101;
    char *buf = calloc((size_t)bytes * (w > 0 ? w : 1), 1);
    double t[2][101], d[101];
    block(0, rank, buf, bytes, w, iters / 4 + 1, MPI_COMM_WORLD);
    block(1, rank, buf, bytes, w, iters / 4 + 1, MPI_COMM_WORLD);
    for (int r = 0; r < reps; r++) {
        int a = r % 2;
        t[a][r] = block(a, rank, buf, bytes, w, iters, MPI_COMM_WORLD);
        t[1 - a][r] = block(1 - a, rank, buf, bytes, w, iters, MPI_COMM_WORLD);
        d[r] = t[1][r] - t[0][r];
    }
    if (rank == 0) {
        qsort(t[0], reps, sizeof(double), cmpd);
        qsort(t[1], reps, sizeof(double), cmpd);
        qsort(d, reps, sizeof(double), cmpd);
        if (w == 0)
            printf("probe_mprobe %d B, ping-pong: raw (MPI_Recv) %.3f us, match first (MPI_Mprobe + MPI_Mrecv) %.3f us one way; added %.3f us (medians of %d repetitions)\n",
                   bytes, t[0][reps / 2] * 1e6, t[1][reps / 2] * 1e6, d[reps / 2] * 1e6, reps);
        else
            printf("probe_mprobe %d B, window %d: raw (MPI_Irecv) %.3f us, match first (MPI_Improbe + MPI_Imrecv) %.3f us per message; added %.3f us (medians of %d repetitions)\n",
                   bytes, w, t[0][reps / 2] * 1e6, t[1][reps / 2] * 1e6, d[reps / 2] * 1e6, reps);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
