/*
 * test_darray.c: distributed arrays (gpuwire_darray_*) from C, on host memory.
 *
 * Every gpuwire_darray function is called, with its result compared against an answer this
 * program computes itself from the global data: queries and views of a 1-D array split unevenly,
 * set_global / allgather / gather, fill, axpy, scale, dot (complex: conjugated, checked against
 * C99's conj), norms, sum, min, max, redistribution to a user-given split and to BROADCAST,
 * bcast, the halo exchange of a 2-D array, argument errors on every rank, and handles after
 * gpuwire_finalize. The Rust test tests/mpi_darray.rs covers every datatype and more splits.
 *
 * Usage: mpirun -n P test_darray P   (any P >= 1; the argument is the rank count expected)
 * Prints "test_darray: PASS (...)" from rank 0 and exits 0 when every check on every rank passed.
 */
#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gwtest.h"

#define N 11 /* uneven on 2 and 3 ranks */

static gpuwire_comm comm;
static int32_t rank, size;

static gpuwire_darray make(int64_t n, int64_t local, int32_t dtype, int32_t partition)
{
    gpuwire_darray d = GPUWIRE_DARRAY_NULL;
    EXPECT_OK(gpuwire_darray_create(comm, n, local, dtype, GPUWIRE_SPACE_HOST, partition, &d));
    return d;
}

/* The default split: (offset, length) of rank r. */
static void split(int64_t n, int r, int64_t *off, int64_t *len)
{
    int64_t q = n / size, rem = n % size;
    *len = q + (r < rem ? 1 : 0);
    *off = r * q + (r < rem ? r : rem);
}

static void queries_and_views(void)
{
    gpuwire_darray d = make(N, GPUWIRE_DECIDE, GPUWIRE_FLOAT64, GPUWIRE_PARTITION_SCATTER);
    int64_t v = -1, off, len, lens[64], shape[1], r;
    int32_t i32 = -1;
    gpuwire_buffer local = GPUWIRE_BUFFER_NULL, whole = GPUWIRE_BUFFER_NULL;
    void *data = NULL, *p = NULL;

    split(N, rank, &off, &len);
    EXPECT_OK(gpuwire_darray_global_len(d, &v));
    EXPECT(v == N);
    EXPECT_OK(gpuwire_darray_local_len(d, &v));
    EXPECT(v == len);
    EXPECT_OK(gpuwire_darray_global_offset(d, &v));
    EXPECT(v == off);
    /* The array's communicator and its rank count (what lens needs), a handle of its own. */
    gpuwire_comm dc = GPUWIRE_COMM_NULL;
    EXPECT_OK(gpuwire_darray_comm(d, &dc, &i32));
    EXPECT(i32 == size && dc.h != 0);
    int32_t dsize = -1;
    EXPECT_OK(gpuwire_comm_size(dc, &dsize));
    EXPECT(dsize == size);
    EXPECT_OK(gpuwire_comm_free(dc));
    EXPECT_STATUS(gpuwire_darray_comm(d, NULL, &i32), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_darray_comm(d, &dc, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_UNTOUCHED_H(gpuwire_darray_comm(GPUWIRE_DARRAY_NULL, &dc, &i32), GPUWIRE_ERROR_INVALID_HANDLE, dc, 77u);
    EXPECT_OK(gpuwire_darray_local_lens(d, lens));
    for (r = 0; r < size; r++) {
        int64_t o, l;
        split(N, (int)r, &o, &l);
        EXPECT(lens[r] == l);
    }
    EXPECT_OK(gpuwire_darray_ndim(d, &i32));
    EXPECT(i32 == 1);
    EXPECT_OK(gpuwire_darray_shape(d, shape));
    EXPECT(shape[0] == N);
    EXPECT_OK(gpuwire_darray_local_shape(d, shape));
    EXPECT(shape[0] == len);
    EXPECT_OK(gpuwire_darray_halo(d, &v));
    EXPECT(v == 0);
    EXPECT_OK(gpuwire_darray_dtype(d, &i32));
    EXPECT(i32 == GPUWIRE_FLOAT64);
    EXPECT_OK(gpuwire_darray_space(d, &i32));
    EXPECT(i32 == GPUWIRE_SPACE_HOST);
    EXPECT_OK(gpuwire_darray_partition(d, &i32));
    EXPECT(i32 == GPUWIRE_PARTITION_SCATTER);
    EXPECT_OK(gpuwire_darray_data(d, &data));
    EXPECT_OK(gpuwire_darray_local(d, &local));
    EXPECT_OK(gpuwire_buffer_pointer(local, &p));
    EXPECT(p == data);
    EXPECT_OK(gpuwire_buffer_count(local, &v));
    EXPECT(v == len);
    EXPECT_OK(gpuwire_darray_local_with_halo(d, &whole));
    EXPECT_OK(gpuwire_buffer_count(whole, &v));
    EXPECT(v == len);
    EXPECT_OK(gpuwire_buffer_free(whole));
    EXPECT_OK(gpuwire_buffer_free(local));

    /* Out-parameters are written only on success. */
    EXPECT_UNTOUCHED(gpuwire_darray_local_len(GPUWIRE_DARRAY_NULL, &v), GPUWIRE_ERROR_INVALID_HANDLE, v, 55);
    EXPECT_UNTOUCHED(gpuwire_darray_local_len(AS_DARRAY(comm), &v), GPUWIRE_ERROR_INVALID_HANDLE, v, 55);
    EXPECT_LAST_ERROR_HAS("communicator handle");
    EXPECT_STATUS(gpuwire_darray_local_len(d, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_OK(gpuwire_darray_free(d));
    EXPECT_STATUS(gpuwire_darray_free(d), GPUWIRE_ERROR_INVALID_HANDLE);
}

static void data_and_arithmetic(void)
{
    gpuwire_darray x = make(N, GPUWIRE_DECIDE, GPUWIRE_FLOAT64, GPUWIRE_PARTITION_SCATTER);
    gpuwire_darray y = make(N, GPUWIRE_DECIDE, GPUWIRE_FLOAT64, GPUWIRE_PARTITION_SCATTER);
    double g[N], h[N], out[N], v, alpha = 2.0, half = 0.5, want, n1 = 0, n2 = 0, ninf = 0;
    int i;

    for (i = 0; i < N; i++) {
        g[i] = i - 4;   /* -4 .. 6 */
        h[i] = 2 * i + 1;
    }
    EXPECT_OK(gpuwire_darray_set_global(x, g, NULL));
    EXPECT_OK(gpuwire_darray_set_global(y, h, NULL));
    memset(out, 0, sizeof out);
    EXPECT_OK(gpuwire_darray_allgather(x, out, NULL));
    EXPECT(memcmp(out, g, sizeof g) == 0);
    memset(out, 0, sizeof out);
    EXPECT_OK(gpuwire_darray_gather(y, rank == size - 1 ? out : NULL, size - 1, NULL));
    if (rank == size - 1)
        EXPECT(memcmp(out, h, sizeof h) == 0);

    /* y = 2 x + y, then y *= 0.5: y_i = x_i + h_i / 2. */
    EXPECT_OK(gpuwire_darray_axpy(&alpha, x, y, NULL));
    EXPECT_OK(gpuwire_darray_scale(y, &half, NULL));
    EXPECT_OK(gpuwire_darray_allgather(y, out, NULL));
    for (i = 0; i < N; i++)
        EXPECT(out[i] == g[i] + h[i] / 2.0);

    EXPECT_OK(gpuwire_darray_dot(x, y, &v, NULL));
    for (want = 0, i = 0; i < N; i++) {
        want += g[i] * (g[i] + h[i] / 2.0);
        n1 += fabs(g[i]);
        n2 += g[i] * g[i];
        ninf = fabs(g[i]) > ninf ? fabs(g[i]) : ninf;
    }
    EXPECT(v == want);
    EXPECT_OK(gpuwire_darray_norm(x, GPUWIRE_NORM_1, &v, NULL));
    EXPECT(v == n1);
    EXPECT_OK(gpuwire_darray_norm(x, GPUWIRE_NORM_2, &v, NULL));
    EXPECT(v == sqrt(n2));
    EXPECT_OK(gpuwire_darray_norm(x, GPUWIRE_NORM_INF, &v, NULL));
    EXPECT(v == ninf);
    EXPECT_OK(gpuwire_darray_sum(x, &v, NULL));
    EXPECT(v == 11.0); /* -4 + ... + 6 */
    EXPECT_OK(gpuwire_darray_min(x, &v, NULL));
    EXPECT(v == -4.0);
    EXPECT_OK(gpuwire_darray_max(x, &v, NULL));
    EXPECT(v == 6.0);
    v = 3.25;
    EXPECT_OK(gpuwire_darray_fill(x, &v, NULL));
    EXPECT_OK(gpuwire_darray_sum(x, &v, NULL));
    EXPECT(v == 3.25 * N);

    /* Errors: a datatype the operation does not take; arrays split otherwise. */
    {
        gpuwire_darray i32 = make(N, GPUWIRE_DECIDE, GPUWIRE_INT32, GPUWIRE_PARTITION_SCATTER);
        gpuwire_darray longer = make(N + 1, GPUWIRE_DECIDE, GPUWIRE_FLOAT64, GPUWIRE_PARTITION_SCATTER);
        EXPECT_STATUS(gpuwire_darray_dot(i32, i32, &v, NULL), GPUWIRE_ERROR_UNSUPPORTED_DTYPE);
        EXPECT_LAST_ERROR_HAS("int32");
        EXPECT_STATUS(gpuwire_darray_axpy(&alpha, longer, y, NULL), GPUWIRE_ERROR_COUNT_MISMATCH);
        EXPECT_STATUS(gpuwire_darray_norm(x, 7, &v, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_OK(gpuwire_darray_free(longer));
        EXPECT_OK(gpuwire_darray_free(i32));
    }
    EXPECT_OK(gpuwire_darray_free(y));
    EXPECT_OK(gpuwire_darray_free(x));
}

static void complex_dot(void)
{
    gpuwire_darray x = make(N, GPUWIRE_DECIDE, GPUWIRE_COMPLEX128, GPUWIRE_PARTITION_SCATTER);
    gpuwire_darray y = make(N, GPUWIRE_DECIDE, GPUWIRE_COMPLEX128, GPUWIRE_PARTITION_SCATTER);
    double complex gx[N], gy[N], d, want = 0;
    int i;
    for (i = 0; i < N; i++) {
        gx[i] = (double)i + 1.0 * I;
        gy[i] = 1.0 - (double)(i % 4) * I;
        want += conj(gx[i]) * gy[i];
    }
    EXPECT_OK(gpuwire_darray_set_global(x, gx, NULL));
    EXPECT_OK(gpuwire_darray_set_global(y, gy, NULL));
    EXPECT_OK(gpuwire_darray_dot(x, y, &d, NULL));
    EXPECT(d == want); /* sum of conj(x_i) y_i, as BLAS zdotc */
    EXPECT_OK(gpuwire_darray_dot(x, x, &d, NULL));
    EXPECT(cimag(d) == 0.0 && creal(d) > 0.0);
    EXPECT_STATUS(gpuwire_darray_min(x, &d, NULL), GPUWIRE_ERROR_UNSUPPORTED_DTYPE);
    EXPECT_OK(gpuwire_darray_free(y));
    EXPECT_OK(gpuwire_darray_free(x));
}

static void redistribution(void)
{
    /* Everything on the last rank: the others hold no element. */
    gpuwire_darray a = make(N, GPUWIRE_DECIDE, GPUWIRE_INT64, GPUWIRE_PARTITION_SCATTER);
    gpuwire_darray b = make(N, rank == size - 1 ? N : 0, GPUWIRE_INT64, GPUWIRE_PARTITION_SCATTER);
    gpuwire_darray c = make(N, GPUWIRE_DECIDE, GPUWIRE_INT64, GPUWIRE_PARTITION_BROADCAST);
    int64_t g[N], out[N], len = -1, s = 0;
    int64_t *p;
    void *data;
    int i;
    for (i = 0; i < N; i++)
        g[i] = 1000 - 37 * i;
    EXPECT_OK(gpuwire_darray_set_global(a, g, NULL));
    EXPECT_OK(gpuwire_darray_redistribute(a, b, NULL));
    EXPECT_OK(gpuwire_darray_local_len(b, &len));
    EXPECT(len == (rank == size - 1 ? N : 0));
    EXPECT_OK(gpuwire_darray_allgather(b, out, NULL));
    EXPECT(memcmp(out, g, sizeof g) == 0);
    EXPECT_OK(gpuwire_darray_redistribute(b, c, NULL));
    EXPECT_OK(gpuwire_darray_data(c, &data));
    p = data;
    for (i = 0; i < N; i++)
        EXPECT(p[i] == g[i]);
    EXPECT_OK(gpuwire_darray_sum(b, &s, NULL));
    EXPECT(s == 11000 - 37 * 55);
    /* A local write to a BROADCAST array, then bcast from rank 0 makes the copies equal. */
    p[0] = rank;
    EXPECT_OK(gpuwire_darray_bcast(c, 0, NULL));
    EXPECT(p[0] == 0);
    EXPECT_OK(gpuwire_darray_free(c));
    EXPECT_OK(gpuwire_darray_free(b));
    EXPECT_OK(gpuwire_darray_free(a));

    /* Local lengths that do not add up: an error on every rank. */
    {
        gpuwire_darray bad = {77};
        EXPECT_UNTOUCHED_H(gpuwire_darray_create(comm, N, 1, GPUWIRE_INT64, GPUWIRE_SPACE_HOST,
                                                 GPUWIRE_PARTITION_SCATTER, &bad),
                           GPUWIRE_ERROR_COUNT_MISMATCH, bad, 77u);
        EXPECT_LAST_ERROR_HAS("add up to");
    }
}

static void halo_exchange(void)
{
    /* 2-D: N rows of 4 columns, one halo row; value (row, col) = 10 row + col. */
    int64_t shape[2] = {N, 4}, off, len, rows;
    gpuwire_darray d = GPUWIRE_DARRAY_NULL;
    double g[N * 4], *v;
    void *data;
    int i, c;
    EXPECT_OK(gpuwire_darray_create_nd(comm, 2, shape, GPUWIRE_DECIDE, 1, GPUWIRE_FLOAT64,
                                       GPUWIRE_SPACE_HOST, GPUWIRE_PARTITION_SCATTER, &d));
    for (i = 0; i < N * 4; i++)
        g[i] = 10 * (i / 4) + i % 4;
    EXPECT_OK(gpuwire_darray_set_global(d, g, NULL));
    EXPECT_OK(gpuwire_darray_data(d, &data));
    split(N, rank, &off, &len);
    rows = len;
    v = (double *)data - 4; /* the halo row above */
    for (c = 0; c < 4; c++)
        v[c] = v[(rows + 1) * 4 + c] = -1.0;
    EXPECT_OK(gpuwire_darray_halo_exchange(d, 1, NULL));
    for (c = 0; c < 4; c++) {
        EXPECT(v[c] == (rank > 0 ? 10 * (off - 1) + c : -1.0));
        EXPECT(v[(rows + 1) * 4 + c] == (rank < size - 1 ? 10 * (off + rows) + c : -1.0));
    }
    EXPECT_STATUS(gpuwire_darray_halo_exchange(d, 2, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("halo");
    EXPECT_OK(gpuwire_darray_free(d));
}

int main(int argc, char **argv)
{
    gpuwire_darray fails, leftover;
    int64_t failures = 0, mine;

    if (argc != 2) {
        fprintf(stderr, "usage: test_darray EXPECTED_RANKS\n");
        return 2;
    }
    if (gpuwire_init() != GPUWIRE_SUCCESS || gpuwire_comm_world(NULL, &comm) != GPUWIRE_SUCCESS ||
        gpuwire_comm_rank(comm, &rank) != GPUWIRE_SUCCESS ||
        gpuwire_comm_size(comm, &size) != GPUWIRE_SUCCESS) {
        fprintf(stderr, "test_darray: setup failed\n");
        return 1;
    }
    gwt_rank = rank;
    if (size != atoi(argv[1]) || size > 64) {
        fprintf(stderr, "test_darray: launched on %d ranks, expected %s (wrong launcher?)\n",
                (int)size, argv[1]);
        return 1;
    }
    queries_and_views();
    data_and_arithmetic();
    complex_dot();
    redistribution();
    halo_exchange();

    /* The ranks' failure counts, added up by a distributed array of one element per rank. */
    fails = make(size, 1, GPUWIRE_INT64, GPUWIRE_PARTITION_SCATTER);
    mine = gwt_failures();
    EXPECT_OK(gpuwire_darray_fill(fails, &mine, NULL));
    EXPECT_OK(gpuwire_darray_sum(fails, &failures, NULL));
    EXPECT_OK(gpuwire_darray_free(fails));
    leftover = make(4, GPUWIRE_DECIDE, GPUWIRE_FLOAT32, GPUWIRE_PARTITION_SCATTER);
    EXPECT_OK(gpuwire_comm_free(comm));
    EXPECT_OK(gpuwire_finalize());
    EXPECT_STATUS(gpuwire_darray_free(leftover), GPUWIRE_ERROR_ALREADY_FINALIZED);
    failures += gwt_failures() - mine;
    if (rank == 0 && failures == 0)
        printf("test_darray: PASS (%d ranks, %ld checks on rank 0)\n", (int)size, gwt_checks);
    if (failures != 0)
        fprintf(stderr, "test_darray: rank %d: %ld failed checks (all ranks before finalize: %ld)\n",
                (int)rank, gwt_failures(), (long)failures);
    return failures == 0 ? 0 : 1;
}
