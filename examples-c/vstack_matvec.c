/*
 * vstack_matvec.c: a block-row (vertically stacked) operator applied across ranks.
 *
 * The operator H is a vertical stack of P blocks, one per rank; rank r owns block B_r, a 20x20
 * matrix of ones. The input d is a vector of 400 ones, viewed as a 20x20 matrix D (row-major);
 * rank 0 fills it and gpuwire_bcast gives every rank a copy. Each rank computes its block of
 * y = H d, namely y_r = B_r D (20x20 ones times 20x20 ones: 400 entries, each equal to 20), and
 * gpuwire_allgather assembles the whole y (400 x P entries) on every rank, in rank order. The
 * program checks that every entry of the gathered y is 20 on every rank.
 *
 * y_r is computed directly into this rank's block of y (a gpuwire_buffer_view), so the
 * allgather runs in place.
 *
 * Usage: mpirun -n P vstack_matvec [EXPECTED_RANKS]   (any P >= 1)
 * Exit code 0 on success, 1 on any failure.
 */
#include <stdio.h>
#include <stdlib.h>

#include "gpuwire.h"

#define NB 20          /* block size: B_r is NB x NB, D is NB x NB */
#define ND (NB * NB)   /* length of d and of each y_r */

static void die(const char *call, gpuwire_status st, int line)
{
    char msg[1024];
    if (gpuwire_last_error(msg, sizeof msg) != GPUWIRE_SUCCESS)
        msg[0] = '\0';
    fprintf(stderr, "vstack_matvec.c:%d: %s failed: %s (status %d): %s\n", line, call,
            gpuwire_status_string((int32_t)st), (int)st, msg);
    exit(1);
}
#define CHECK(call)                                   \
    do {                                              \
        gpuwire_status st_ = (call);                  \
        if (st_ != GPUWIRE_SUCCESS)                   \
            die(#call, st_, __LINE__);                \
    } while (0)

int main(int argc, char **argv)
{
    gpuwire_comm comm = GPUWIRE_COMM_NULL;
    gpuwire_buffer d = GPUWIRE_BUFFER_NULL, y = GPUWIRE_BUFFER_NULL, y_mine = GPUWIRE_BUFFER_NULL;
    gpuwire_buffer flag = GPUWIRE_BUFFER_NULL;
    int32_t rank, size, *bad, bad_total;
    float B[NB][NB];
    const float *dv;
    float *yr, *yall;
    int64_t ylen, i;
    void *p;
    int row, col, k, wrong = 0;

    CHECK(gpuwire_init());
    CHECK(gpuwire_comm_world(NULL, &comm));
    CHECK(gpuwire_comm_rank(comm, &rank));
    CHECK(gpuwire_comm_size(comm, &size));
    if (argc > 1 && atoi(argv[1]) != size) {
        fprintf(stderr, "vstack_matvec: launched on %d ranks, expected %s (wrong launcher?)\n",
                (int)size, argv[1]);
        return 1;
    }

    /* This rank's operator block: ones. */
    for (row = 0; row < NB; row++)
        for (col = 0; col < NB; col++)
            B[row][col] = 1.0f;

    /* The input vector, filled at rank 0 and broadcast. */
    CHECK(gpuwire_buffer_alloc(ND, GPUWIRE_FLOAT32, GPUWIRE_SPACE_HOST, -1, &d));
    CHECK(gpuwire_buffer_pointer(d, &p));
    if (rank == 0)
        for (i = 0; i < ND; i++)
            ((float *)p)[i] = 1.0f;
    CHECK(gpuwire_bcast(comm, d, 0, NULL));
    dv = (const float *)p;

    /* y holds all P blocks; y_mine is this rank's block of it. */
    ylen = (int64_t)ND * size;
    CHECK(gpuwire_buffer_alloc(ylen, GPUWIRE_FLOAT32, GPUWIRE_SPACE_HOST, -1, &y));
    CHECK(gpuwire_buffer_view(y, (int64_t)ND * rank, ND, &y_mine));
    CHECK(gpuwire_buffer_pointer(y_mine, &p));
    yr = (float *)p;

    /* y_r = B_r D, with D the 20x20 row-major view of d. */
    for (row = 0; row < NB; row++)
        for (col = 0; col < NB; col++) {
            float s = 0.0f;
            for (k = 0; k < NB; k++)
                s += B[row][k] * dv[k * NB + col];
            yr[row * NB + col] = s;
        }

    /* In place: the send buffer is exactly this rank's block of the receive buffer. */
    CHECK(gpuwire_allgather(comm, y_mine, y, NULL));

    CHECK(gpuwire_buffer_pointer(y, &p));
    yall = (float *)p;
    for (i = 0; i < ylen; i++)
        if (yall[i] != 20.0f) {
            if (wrong < 5)
                fprintf(stderr, "rank %d: y[%ld] = %g, expected 20\n", (int)rank, (long)i,
                        (double)yall[i]);
            wrong++;
        }

    CHECK(gpuwire_buffer_alloc(1, GPUWIRE_INT32, GPUWIRE_SPACE_HOST, -1, &flag));
    CHECK(gpuwire_buffer_pointer(flag, &p));
    bad = (int32_t *)p;
    *bad = wrong;
    CHECK(gpuwire_allreduce(comm, flag, flag, GPUWIRE_SUM, NULL));
    bad_total = *bad;
    if (rank == 0) {
        if (bad_total == 0)
            printf("vstack_matvec: PASS (%d ranks: y = H d has %ld entries, all equal to 20)\n",
                   (int)size, (long)ylen);
        else
            printf("vstack_matvec: FAIL (%d wrong entries of y)\n", (int)bad_total);
    }

    CHECK(gpuwire_buffer_free(flag));
    CHECK(gpuwire_buffer_free(y_mine));
    CHECK(gpuwire_buffer_free(y));
    CHECK(gpuwire_buffer_free(d));
    CHECK(gpuwire_comm_free(comm));
    CHECK(gpuwire_finalize());
    return bad_total == 0 ? 0 : 1;
}
