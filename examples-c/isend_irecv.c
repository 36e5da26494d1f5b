/*
 * isend_irecv.c: the classic GPU-MPI first program, on host memory.
 *
 * Rank 0 holds ten float32 values 100, 110, ..., 190; rank 1 holds zeros. Rank 0 sends its
 * buffer with gpuwire_isend, rank 1 receives it with gpuwire_irecv, both wait. Every rank prints
 * its buffer before and after; the program checks that rank 1 received 100..190 and that rank 0
 * still holds them. Ranks 2 and above take part in setup and teardown only.
 *
 * Each rank formats its own line; gpuwire_gather brings the lines to rank 0, which prints them in
 * rank order (lines that several ranks write at once can interleave in the launcher's output).
 *
 * Usage: mpirun -n 2 isend_irecv [EXPECTED_RANKS]
 *   EXPECTED_RANKS (optional): fail unless the program runs on exactly this many ranks (a binary
 *   started by another MPI's launcher runs as N singletons; this catches it).
 *
 * Exit code 0 on success, 1 on any failure (a gpuwire error or a wrong value).
 */
#include <stdio.h>
#include <stdlib.h>

#include "gpuwire.h"

#define COUNT 10
#define LINE 128 /* bytes per printed line */

/* On failure: the status's static description, then this thread's detailed message. */
static void die(const char *call, gpuwire_status st, int line)
{
    char msg[1024];
    if (gpuwire_last_error(msg, sizeof msg) != GPUWIRE_SUCCESS)
        msg[0] = '\0';
    fprintf(stderr, "isend_irecv.c:%d: %s failed: %s (status %d): %s\n", line, call,
            gpuwire_status_string((int32_t)st), (int)st, msg);
    exit(1);
}
#define CHECK(call)                                   \
    do {                                              \
        gpuwire_status st_ = (call);                  \
        if (st_ != GPUWIRE_SUCCESS)                   \
            die(#call, st_, __LINE__);                \
    } while (0)

/* Every rank's buffer, printed by rank 0 in rank order. Collective. */
static void print_buffers(gpuwire_comm comm, int32_t rank, int32_t size, const char *when,
                          const float *v)
{
    gpuwire_buffer mine = GPUWIRE_BUFFER_NULL, all = GPUWIRE_BUFFER_NULL;
    char *line, *lines;
    void *p;
    int i, n;

    CHECK(gpuwire_buffer_alloc(LINE, GPUWIRE_INT8, GPUWIRE_SPACE_HOST, -1, &mine));
    CHECK(gpuwire_buffer_pointer(mine, &p));
    line = (char *)p;
    n = snprintf(line, LINE, "rank %d %s:", (int)rank, when);
    for (i = 0; i < COUNT && n > 0 && n < LINE; i++)
        n += snprintf(line + n, LINE - (size_t)n, " %g", (double)v[i]);
    if (rank == 0)
        CHECK(gpuwire_buffer_alloc((int64_t)LINE * size, GPUWIRE_INT8, GPUWIRE_SPACE_HOST, -1,
                                   &all));
    /* Non-roots pass GPUWIRE_BUFFER_NULL: the receive buffer matters at the root only. */
    CHECK(gpuwire_gather(comm, mine, all, 0, NULL));
    if (rank == 0) {
        CHECK(gpuwire_buffer_pointer(all, &p));
        lines = (char *)p;
        for (i = 0; i < size; i++)
            printf("%s\n", lines + (size_t)i * LINE);
        fflush(stdout);
        CHECK(gpuwire_buffer_free(all));
    }
    CHECK(gpuwire_buffer_free(mine));
}

int main(int argc, char **argv)
{
    gpuwire_comm comm = GPUWIRE_COMM_NULL;
    gpuwire_buffer buf = GPUWIRE_BUFFER_NULL, flag = GPUWIRE_BUFFER_NULL;
    gpuwire_request req = GPUWIRE_REQUEST_NULL;
    int32_t rank, size, bad_total;
    int32_t *bad;
    float *v;
    void *p;
    int i, wrong = 0;

    CHECK(gpuwire_init());
    CHECK(gpuwire_comm_world(NULL, &comm));
    CHECK(gpuwire_comm_rank(comm, &rank));
    CHECK(gpuwire_comm_size(comm, &size));
    if (argc > 1 && atoi(argv[1]) != size) {
        fprintf(stderr, "isend_irecv: launched on %d ranks, expected %s (wrong launcher?)\n",
                (int)size, argv[1]);
        return 1;
    }
    if (size < 2) {
        if (rank == 0)
            fprintf(stderr, "isend_irecv: needs at least 2 ranks, got %d\n", (int)size);
        CHECK(gpuwire_comm_free(comm));
        CHECK(gpuwire_finalize());
        return 1;
    }

    /* Owned, zero-filled host memory; gpuwire_buffer_pointer gives its address. */
    CHECK(gpuwire_buffer_alloc(COUNT, GPUWIRE_FLOAT32, GPUWIRE_SPACE_HOST, -1, &buf));
    CHECK(gpuwire_buffer_pointer(buf, &p));
    v = (float *)p;
    if (rank == 0)
        for (i = 0; i < COUNT; i++)
            v[i] = (float)(100 + 10 * i);

    print_buffers(comm, rank, size, "before", v);

    if (rank == 0)
        CHECK(gpuwire_isend(comm, buf, 1, 0, NULL, &req));
    else if (rank == 1)
        CHECK(gpuwire_irecv(comm, buf, 0, 0, NULL, &req));
    /* Waiting on GPUWIRE_REQUEST_NULL (ranks >= 2) returns at once. */
    CHECK(gpuwire_wait(&req));
    if (req.h != 0) {
        fprintf(stderr, "rank %d: gpuwire_wait did not reset the request\n", (int)rank);
        wrong++;
    }

    print_buffers(comm, rank, size, "after", v);

    for (i = 0; i < COUNT; i++) {
        float expect = (rank <= 1) ? (float)(100 + 10 * i) : 0.0f;
        if (v[i] != expect) {
            fprintf(stderr, "rank %d: element %d is %g, expected %g\n", (int)rank, i, (double)v[i],
                    (double)expect);
            wrong++;
        }
    }

    /* Every rank learns whether any rank saw a wrong value. */
    CHECK(gpuwire_buffer_alloc(1, GPUWIRE_INT32, GPUWIRE_SPACE_HOST, -1, &flag));
    CHECK(gpuwire_buffer_pointer(flag, &p));
    bad = (int32_t *)p;
    *bad = wrong;
    CHECK(gpuwire_allreduce(comm, flag, flag, GPUWIRE_SUM, NULL));
    bad_total = *bad;
    if (rank == 0) {
        if (bad_total == 0)
            printf("isend_irecv: PASS (rank 1 received 100..190 from rank 0; %d ranks)\n",
                   (int)size);
        else
            printf("isend_irecv: FAIL (%d wrong values)\n", (int)bad_total);
    }

    CHECK(gpuwire_buffer_free(flag));
    CHECK(gpuwire_buffer_free(buf));
    CHECK(gpuwire_comm_free(comm));
    CHECK(gpuwire_finalize());
    return bad_total == 0 ? 0 : 1;
}
