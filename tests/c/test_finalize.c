/*
 * test_finalize.c: the end of a program with operations still in flight (2 ranks). Each rank
 * prints "test_finalize: PASS (rank R, MODE)" and exits 0 when its checks hold.
 *
 *   inflight:    gpuwire initializes MPI. Rank 0 isends 8 MiB (a gpuwire allocation whose handle
 *                it then frees: the request keeps the memory) and posts an irecv that no rank
 *                sends to, waits for neither, and calls gpuwire_finalize, which must finalize and
 *                return GPUWIRE_ERROR_INVALID_ARGUMENT for its 2 requests in flight. Rank 1
 *                receives the 8 MiB 300 ms later, while rank 0 is in MPI_Finalize, and checks
 *                every value. Dropping the requests freed the send's memory under MPI: a segfault
 *                in 10 of 10 runs (and wrong values at 64 KiB), 2026-12-07.
 *   irecvlate:   rank 0 posts an irecv of 8 MiB and calls gpuwire_finalize at once (the receive is
 *                deferred: its message has not come), which must return
 *                GPUWIRE_ERROR_INVALID_ARGUMENT for 1 request in flight; rank 1 sends the 8 MiB
 *                300 ms later with a blocking gpuwire_send, which must complete. The deferred
 *                receive, withdrawn at finalize, left rank 1 in MPI_Send and rank 0 in
 *                MPI_Finalize for ever (14 of 14 runs); it is posted to MPI now. Open MPI only
 *                (scripts/run-c-tests.sh): MPICH's MPI_Finalize hangs the same way in the plain
 *                MPI program.
 *   opengroup:   rank 0 opens a group (nested in another), puts an irecv, an isend and a blocking
 *                send to rank 1 in it and calls gpuwire_finalize without ending it: the
 *                operations never start, and finalize must say so (GPUWIRE_ERROR_INVALID_ARGUMENT,
 *                3 operations), finalize all the same, and count no request in flight. It
 *                returned GPUWIRE_SUCCESS and dropped them without a word (helper-100's hunt,
 *                2026-12-07). Rank 1 finalizes.
 *   mpifinalize: the program initializes MPI (MPI_THREAD_MULTIPLE); both ranks queue a
 *                nonblocking barrier and allreduce of 8 MiB on the progress engine, rank 1 after
 *                100 ms, wait for neither, and call MPI_Finalize without gpuwire_finalize: the
 *                engine runs its queue before MPI tears itself down (it was inside MPI there: a
 *                segfault in 1 to 2 of 10 runs). The allreduce's values are checked (the buffers
 *                are still the program's: gpuwire_finalize was not called).
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gwtest.h"

#define N (1L << 20) /* float64 elements: 8 MiB, past every eager limit */

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* gpuwire_init (gpuwire initializes MPI) and MPI_COMM_WORLD's communicator: this rank, or -1
 * unless there are 2 ranks. */
static int32_t world(gpuwire_comm *comm)
{
    int32_t rank = -1, size = 0;
    EXPECT_OK(gpuwire_init());
    EXPECT_OK(gpuwire_comm_world(NULL, comm));
    EXPECT_OK(gpuwire_comm_rank(*comm, &rank));
    EXPECT_OK(gpuwire_comm_size(*comm, &size));
    gwt_rank = rank;
    if (size != 2) {
        fprintf(stderr, "test_finalize: run with 2 ranks\n");
        return -1;
    }
    return rank;
}

static int inflight(void)
{
    gpuwire_comm comm;
    gpuwire_buffer buf, other;
    gpuwire_request send_req, recv_req;
    void *p = NULL;
    int32_t rank = world(&comm);
    if (rank < 0)
        return 1;
    EXPECT_OK(gpuwire_buffer_alloc(N, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1, &buf));
    EXPECT_OK(gpuwire_buffer_pointer(buf, &p));
    double *d = p;
    if (rank == 0) {
        for (long i = 0; i < N; i++)
            d[i] = (double)i * 0.5;
        EXPECT_OK(gpuwire_isend(comm, buf, 1, 7, NULL, &send_req));
        EXPECT_OK(gpuwire_buffer_free(buf)); /* the request keeps the memory */
        EXPECT_OK(gpuwire_buffer_alloc(16, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1, &other));
        EXPECT_OK(gpuwire_irecv(comm, other, 1, 9, NULL, &recv_req)); /* nobody sends tag 9 */
        /* A freed receive nobody sends to (tag 10): left to MPI, as after MPI_Request_free, and
         * not counted. */
        gpuwire_request freed;
        EXPECT_OK(gpuwire_irecv(comm, other, 1, 10, NULL, &freed));
        EXPECT_OK(gpuwire_request_free(&freed));
        EXPECT_STATUS(gpuwire_finalize(), GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_LAST_ERROR_HAS("2 requests were still in flight");
        /* Finalized all the same. */
        int32_t flag = -1;
        EXPECT_OK(gpuwire_initialized(&flag));
        EXPECT(flag == 0);
    } else {
        memset(d, 0, N * sizeof(double));
        sleep_ms(300);
        EXPECT_OK(gpuwire_recv(comm, buf, 0, 7, NULL));
        long wrong = 0;
        for (long i = 0; i < N; i++)
            wrong += d[i] != (double)i * 0.5;
        EXPECT(wrong == 0);
        if (wrong)
            fprintf(stderr, "rank 1: %ld of %ld values wrong\n", wrong, N);
        EXPECT_OK(gpuwire_finalize());
    }
    return gwt_failures() != 0;
}

static int irecvlate(void)
{
    gpuwire_comm comm;
    gpuwire_buffer buf;
    gpuwire_request req;
    void *p = NULL;
    int32_t rank = world(&comm);
    if (rank < 0)
        return 1;
    EXPECT_OK(gpuwire_buffer_alloc(N, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1, &buf));
    if (rank == 0) {
        EXPECT_OK(gpuwire_irecv(comm, buf, 1, 5, NULL, &req));
        EXPECT_STATUS(gpuwire_finalize(), GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_LAST_ERROR_HAS("1 request was still in flight");
    } else {
        EXPECT_OK(gpuwire_buffer_pointer(buf, &p));
        double *d = p;
        for (long i = 0; i < N; i++)
            d[i] = (double)i;
        sleep_ms(300);
        EXPECT_OK(gpuwire_send(comm, buf, 0, 5, NULL));
        EXPECT_OK(gpuwire_finalize());
    }
    return gwt_failures() != 0;
}

static int opengroup(void)
{
    gpuwire_comm comm;
    gpuwire_buffer a, b, c;
    gpuwire_request rr, sr;
    int32_t rank = world(&comm);
    if (rank < 0)
        return 1;
    if (rank == 0) {
        EXPECT_OK(gpuwire_buffer_alloc(16, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1, &a));
        EXPECT_OK(gpuwire_buffer_alloc(16, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1, &b));
        EXPECT_OK(gpuwire_buffer_alloc(16, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1, &c));
        EXPECT_OK(gpuwire_group_start());
        EXPECT_OK(gpuwire_group_start());
        EXPECT_OK(gpuwire_irecv(comm, a, 1, 11, NULL, &rr));
        EXPECT_OK(gpuwire_isend(comm, b, 1, 12, NULL, &sr));
        EXPECT_OK(gpuwire_send(comm, c, 1, 13, NULL));
        EXPECT_OK(gpuwire_group_end()); /* the inner one: the outer stays open */
        EXPECT_STATUS(gpuwire_finalize(), GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_LAST_ERROR_HAS("3 operations of a group left open");
        char msg[1024] = "";
        gpuwire_last_error(msg, sizeof msg);
        EXPECT(strstr(msg, "in flight") == NULL);
        int32_t flag = -1;
        EXPECT_OK(gpuwire_initialized(&flag));
        EXPECT(flag == 0);
    } else {
        EXPECT_OK(gpuwire_finalize());
    }
    return gwt_failures() != 0;
}

static int mpifinalize(int *argc, char ***argv)
{
    int provided = 0, rank = -1, size = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gwt_rank = rank;
    if (size != 2 || provided != MPI_THREAD_MULTIPLE) {
        fprintf(stderr, "test_finalize mpifinalize: needs 2 ranks and MPI_THREAD_MULTIPLE\n");
        MPI_Finalize();
        return 1;
    }
    gpuwire_comm comm;
    gpuwire_buffer a, b;
    gpuwire_request r1, r2;
    void *pa = NULL, *pb = NULL;
    EXPECT_OK(gpuwire_init());
    EXPECT_OK(gpuwire_comm_world(NULL, &comm));
    EXPECT_OK(gpuwire_buffer_alloc(N, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1, &a));
    EXPECT_OK(gpuwire_buffer_alloc(N, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1, &b));
    EXPECT_OK(gpuwire_buffer_pointer(a, &pa));
    EXPECT_OK(gpuwire_buffer_pointer(b, &pb));
    double *x = pa, *y = pb;
    for (long i = 0; i < N; i++) {
        x[i] = (double)(i % 1000) + rank;
        y[i] = -1.0;
    }
    if (rank == 1)
        sleep_ms(100);
    EXPECT_OK(gpuwire_ibarrier(comm, NULL, &r1));
    EXPECT_OK(gpuwire_iallreduce(comm, a, b, GPUWIRE_SUM, NULL, &r2));
    MPI_Finalize(); /* without gpuwire_finalize, the requests never waited for */
    long wrong = 0;
    for (long i = 0; i < N; i++)
        wrong += y[i] != 2.0 * (double)(i % 1000) + 1.0;
    EXPECT(wrong == 0);
    if (wrong)
        fprintf(stderr, "rank %d: %ld of %ld allreduce values wrong\n", rank, wrong, N);
    return gwt_failures() != 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int failed;
    if (!strcmp(mode, "inflight")) {
        failed = inflight();
    } else if (!strcmp(mode, "irecvlate")) {
        failed = irecvlate();
    } else if (!strcmp(mode, "opengroup")) {
        failed = opengroup();
    } else if (!strcmp(mode, "mpifinalize")) {
        failed = mpifinalize(&argc, &argv);
    } else {
        fprintf(stderr, "usage: test_finalize inflight|irecvlate|opengroup|mpifinalize\n");
        return 2;
    }
    if (failed)
        return 1;
    printf("test_finalize: PASS (rank %d, %s)\n", gwt_rank, mode);
    return 0;
}
