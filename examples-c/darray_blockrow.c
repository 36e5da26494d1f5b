/*
 * darray_blockrow.c: a block-row operator (PyLops-MPI's MPIVStack) on distributed arrays.
 *
 * H = [H_0; H_1; ...; H_(P-1)] stacks P row blocks: rank r owns H_r, m_r rows by n columns, with
 * M = 10 P + 3 rows in all (the default split: the first 3 ranks get 11 rows, the others 10).
 *   forward:  y = H x      x is BROADCAST (every rank holds all n entries), y is SCATTER (rank r
 *                          owns y_r = H_r x): no communication at all;
 *   adjoint:  x' = H^T y   = sum over r of H_r^T y_r: each rank writes its term into the local
 *                          buffer of a BROADCAST array, and gpuwire_allreduce (SUM, in place)
 *                          adds them up on every rank.
 * Entries are small integers, H_ij = (i + 2j) mod 7 - 3 and x_j = j mod 5 - 2, so every result
 * is exact. Checks, on every rank:
 *  1. y, gathered to every rank (gpuwire_darray_allgather), equals the serial y = H x;
 *  2. the dot test of an operator and its adjoint: <y, H x> = <H^T y, x>, i.e.
 *     gpuwire_darray_dot(y, y) == gpuwire_darray_dot(x', x);
 *  3. ||y||_2 and sum(y) equal the serial values.
 *
 * With "device" the arrays live on the GPU and gpuwire's operations run there; the local
 * products H_r x and H_r^T y_r are this program's own code and run on host copies (a GPU code
 * would call cuBLAS on the pointers gpuwire_darray_data returns).
 *
 * Usage: mpirun -n P darray_blockrow [EXPECTED_RANKS [host|device]]   (any P >= 1)
 * Exit code 0 on success, 1 on failure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuwire.h"

#define NCOLS 16

static void die(const char *call, gpuwire_status st, int line)
{
    char msg[1024];
    if (gpuwire_last_error(msg, sizeof msg) != GPUWIRE_SUCCESS)
        msg[0] = '\0';
    fprintf(stderr, "darray_blockrow.c:%d: %s failed: %s (status %d): %s\n", line, call,
            gpuwire_status_string((int32_t)st), (int)st, msg);
    exit(1);
}
#define CHECK(call)                        \
    do {                                   \
        gpuwire_status st_ = (call);       \
        if (st_ != GPUWIRE_SUCCESS)        \
            die(#call, st_, __LINE__);     \
    } while (0)

static double H(int64_t i, int64_t j) { return (double)((i + 2 * j) % 7) - 3.0; }
static double xval(int64_t j) { return (double)(j % 5) - 2.0; }

/* Copies this rank's elements of v to or from host memory (a plain copy for host arrays). */
static void local_copy(gpuwire_darray v, double *host, int to_host)
{
    gpuwire_buffer b;
    CHECK(gpuwire_darray_local(v, &b));
    CHECK(to_host ? gpuwire_buffer_copy_to_host(b, host, NULL)
                  : gpuwire_buffer_copy_from_host(b, host, NULL));
    CHECK(gpuwire_buffer_free(b));
}

int main(int argc, char **argv)
{
    gpuwire_comm comm;
    gpuwire_darray x, y, xt, bad;
    gpuwire_buffer xt_local;
    int32_t rank, size, space, wrong = 0, wrong_total;
    int64_t M, m, row0, i, j;
    double xs[NCOLS], xh[NCOLS], xth[NCOLS], *yh, *yall, yy, xtx, norm, sum, s, want_norm = 0.0,
           want_sum = 0.0;

    CHECK(gpuwire_init());
    CHECK(gpuwire_comm_world(NULL, &comm));
    CHECK(gpuwire_comm_rank(comm, &rank));
    CHECK(gpuwire_comm_size(comm, &size));
    if (argc > 1 && atoi(argv[1]) != size) {
        fprintf(stderr, "darray_blockrow: launched on %d ranks, expected %s (wrong launcher?)\n",
                (int)size, argv[1]);
        return 1;
    }
    space = argc > 2 && strcmp(argv[2], "device") == 0 ? GPUWIRE_SPACE_DEVICE : GPUWIRE_SPACE_HOST;
    M = 10 * (int64_t)size + 3;

    CHECK(gpuwire_darray_create(comm, NCOLS, GPUWIRE_DECIDE, GPUWIRE_FLOAT64, space,
                                GPUWIRE_PARTITION_BROADCAST, &x));
    CHECK(gpuwire_darray_create(comm, NCOLS, GPUWIRE_DECIDE, GPUWIRE_FLOAT64, space,
                                GPUWIRE_PARTITION_BROADCAST, &xt));
    CHECK(gpuwire_darray_create(comm, M, GPUWIRE_DECIDE, GPUWIRE_FLOAT64, space,
                                GPUWIRE_PARTITION_SCATTER, &y));
    CHECK(gpuwire_darray_local_len(y, &m));
    CHECK(gpuwire_darray_global_offset(y, &row0));
    yh = calloc((size_t)m + 1, sizeof *yh);
    yall = calloc((size_t)M, sizeof *yall);
    if (!yh || !yall)
        return 1;

    /* x: rank 0's values reach every rank (BROADCAST arrays take user data from rank 0). */
    for (j = 0; j < NCOLS; j++)
        xs[j] = xval(j);
    CHECK(gpuwire_darray_set_global(x, xs, NULL));

    /* Forward: y_r = H_r x, on this rank's rows. */
    local_copy(x, xh, 1);
    for (i = 0; i < m; i++) {
        for (s = 0.0, j = 0; j < NCOLS; j++)
            s += H(row0 + i, j) * xh[j];
        yh[i] = s;
    }
    local_copy(y, yh, 0);

    /* Adjoint: x' = sum_r H_r^T y_r, the terms added up by one allreduce. */
    for (j = 0; j < NCOLS; j++) {
        for (s = 0.0, i = 0; i < m; i++)
            s += H(row0 + i, j) * yh[i];
        xth[j] = s;
    }
    local_copy(xt, xth, 0);
    CHECK(gpuwire_darray_local(xt, &xt_local));
    CHECK(gpuwire_allreduce(comm, xt_local, xt_local, GPUWIRE_SUM, NULL));
    CHECK(gpuwire_buffer_free(xt_local));

    /* 1. y against the serial product. */
    CHECK(gpuwire_darray_allgather(y, yall, NULL));
    for (i = 0; i < M; i++) {
        for (s = 0.0, j = 0; j < NCOLS; j++)
            s += H(i, j) * xval(j);
        want_norm += s * s;
        want_sum += s;
        if (yall[i] != s && wrong++ < 5)
            fprintf(stderr, "rank %d: y[%ld] = %g, expected %g\n", (int)rank, (long)i, yall[i], s);
    }
    want_norm = sqrt(want_norm);
    /* 2. The dot test. 3. Norm and sum. */
    CHECK(gpuwire_darray_dot(y, y, &yy, NULL));
    CHECK(gpuwire_darray_dot(xt, x, &xtx, NULL));
    CHECK(gpuwire_darray_norm(y, GPUWIRE_NORM_2, &norm, NULL));
    CHECK(gpuwire_darray_sum(y, &sum, NULL));
    if (yy != xtx || norm != want_norm || sum != want_sum) {
        fprintf(stderr, "rank %d: <y, Hx> = %g, <H^T y, x> = %g, ||y|| = %.17g (expected %.17g), "
                "sum(y) = %g (expected %g)\n", (int)rank, yy, xtx, norm, want_norm, sum, want_sum);
        wrong++;
    }

    /* Every rank's verdict, added up: an int32 array with one element per rank. */
    CHECK(gpuwire_darray_create(comm, size, 1, GPUWIRE_INT32, GPUWIRE_SPACE_HOST,
                                GPUWIRE_PARTITION_SCATTER, &bad));
    CHECK(gpuwire_darray_fill(bad, &wrong, NULL));
    CHECK(gpuwire_darray_sum(bad, &wrong_total, NULL));
    if (rank == 0) {
        if (wrong_total == 0)
            printf("darray_blockrow: PASS (%d ranks, %s memory: y = H x has %ld entries; "
                   "<y, Hx> = <H^T y, x> = %g; ||y|| = %.6f)\n",
                   (int)size, space == GPUWIRE_SPACE_HOST ? "host" : "device", (long)M, yy, norm);
        else
            printf("darray_blockrow: FAIL (%d failed checks)\n", (int)wrong_total);
    }

    free(yall);
    free(yh);
    CHECK(gpuwire_darray_free(bad));
    CHECK(gpuwire_darray_free(y));
    CHECK(gpuwire_darray_free(xt));
    CHECK(gpuwire_darray_free(x));
    CHECK(gpuwire_comm_free(comm));
    CHECK(gpuwire_finalize());
    return wrong_total == 0 ? 0 : 1;
}
