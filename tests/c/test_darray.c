/*
 * test_darray.c: distributed arrays (gpuwire_darray_*) from C, on host memory.
 *
 * Every gpuwire_darray function is called, with its result compared against an answer this
 * program computes itself from the global data: queries and views of a 1-D array split unevenly,
 * set_global / allgather / gather, fill, axpy, scale, dot (complex: conjugated, checked against
 * C99's conj), norms, sum, min, max, redistribution to a user-given split and to BROADCAST,
 * bcast, the halo exchange of a 2-D array, argument errors on every rank, and handles after
 * gpuwire_finalize; arrays on a process grid (gpuwire_darray_create_cart): the 3-D halo
 * exchange of faces and of corners, periodic and not, every ghost checked against the value of
 * its global index, and every operation on such an array; gpuwire_darray_wrap over this
 * program's own memory (a periodic row split, as a Jacobi solver's); bad decompositions; error
 * messages about shapes of 100 and 150 axes within 1024 bytes. The Rust test tests/mpi_darray.rs covers every datatype and more splits.
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
    /* Inside a group, after a receive of the program's into the whole block (its ghosts too):
     * the exchange's faces are compared with it (they were not, and two receives wrote the
     * ghost rows), so the exchange is refused where the block has a neighbour; the group's
     * own send and receive still run. */
    {
        gpuwire_buffer whole = GPUWIRE_BUFFER_NULL, mine = GPUWIRE_BUFFER_NULL;
        int64_t n = (rows + 2) * 4, k;
        EXPECT_OK(gpuwire_darray_local_with_halo(d, &whole));
        EXPECT_OK(gpuwire_buffer_alloc(n, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1, &mine));
        void *mp = NULL;
        EXPECT_OK(gpuwire_buffer_pointer(mine, &mp));
        for (k = 0; k < n; k++)
            ((double *)mp)[k] = 1000.0 + k;
        EXPECT_OK(gpuwire_group_start());
        EXPECT_OK(gpuwire_send(comm, mine, rank, 5, NULL));
        EXPECT_OK(gpuwire_recv(comm, whole, rank, 5, NULL));
        EXPECT_STATUS(gpuwire_darray_halo_exchange(d, 1, NULL), size > 1 ? GPUWIRE_ERROR_INVALID_ARGUMENT : GPUWIRE_SUCCESS);
        if (size > 1)
            EXPECT_LAST_ERROR_HAS("overlap");
        EXPECT_OK(gpuwire_group_end());
        for (k = 0; k < n; k++)
            EXPECT(v[k] == 1000.0 + k);
        EXPECT_OK(gpuwire_buffer_free(mine));
        EXPECT_OK(gpuwire_buffer_free(whole));
    }
    EXPECT_OK(gpuwire_darray_free(d));
}

/* ---- process grids (gpuwire_darray_create_cart, gpuwire_darray_wrap) ---- */

#define SENTINEL (-1.0)

/* The value of global element g (3 axes; unused axes 0). */
static double gval(const int64_t *g) { return 1.0 + 10000.0 * g[0] + 100.0 * g[1] + g[2]; }

/* Block (offset, length) of coordinate c of p along an axis of n: the first n mod p longer. */
static void block(int64_t n, int64_t p, int64_t c, int64_t *off, int64_t *len)
{
    int64_t q = n / p, rem = n % p;
    *len = q + (c < rem ? 1 : 0);
    *off = c * q + (c < rem ? c : rem);
}

/* This rank's block on the grid `procs` (C order), 3 axes. */
static void my_block(const int64_t *shape, const int64_t *procs, int64_t *start, int64_t *n)
{
    int64_t r = rank, c[3];
    int a;
    for (a = 2; a >= 0; a--) {
        c[a] = r % procs[a];
        r /= procs[a];
    }
    for (a = 0; a < 3; a++)
        block(shape[a], procs[a], c[a], &start[a], &n[a]);
}

/* Interior = gval, every ghost = SENTINEL, over a padded 3-D block. */
static void paint(double *buf, const int64_t *start, const int64_t *n, const int64_t *h)
{
    int64_t p1 = n[1] + 2 * h[1], p2 = n[2] + 2 * h[2], i, j, k, g[3];
    for (i = 0; i < n[0] + 2 * h[0]; i++)
        for (j = 0; j < p1; j++)
            for (k = 0; k < p2; k++) {
                int in = i >= h[0] && i < h[0] + n[0] && j >= h[1] && j < h[1] + n[1] && k >= h[2] &&
                         k < h[2] + n[2];
                g[0] = start[0] + i - h[0];
                g[1] = start[1] + j - h[1];
                g[2] = start[2] + k - h[2];
                buf[(i * p1 + j) * p2 + k] = in ? gval(g) : SENTINEL;
            }
}

/* Checks every element of a padded 3-D block after an exchange of widths `w`: the owned ones
 * unchanged; a ghost holds its global element's value (wrapped on periodic axes) when it is
 * within the width on every axis where it lies outside the block, inside the global array or
 * periodic there, and (faces only) outside on one axis; else it is still SENTINEL. */
static void check_ghosts(const char *what, const double *buf, const int64_t *shape, const int64_t *start,
                         const int64_t *n, const int64_t *h, const int64_t *w, const int32_t *per,
                         int corners)
{
    int64_t pd[3], l[3], g[3], bad = 0;
    int a;
    for (a = 0; a < 3; a++)
        pd[a] = n[a] + 2 * h[a];
    for (l[0] = 0; l[0] < pd[0]; l[0]++)
        for (l[1] = 0; l[1] < pd[1]; l[1]++)
            for (l[2] = 0; l[2] < pd[2]; l[2]++) {
                int outside = 0, ok = 1;
                double want, got = buf[(l[0] * pd[1] + l[1]) * pd[2] + l[2]];
                for (a = 0; a < 3; a++) {
                    g[a] = start[a] + l[a] - h[a];
                    if (l[a] < h[a] || l[a] >= h[a] + n[a]) {
                        int64_t dist = l[a] < h[a] ? h[a] - l[a] : l[a] - (h[a] + n[a]) + 1;
                        outside++;
                        if (dist > w[a])
                            ok = 0;
                        if (g[a] < 0 || g[a] >= shape[a]) {
                            if (per[a])
                                g[a] = (g[a] + shape[a]) % shape[a];
                            else
                                ok = 0;
                        }
                    }
                }
                want = (outside == 0 || (ok && (corners || outside == 1))) ? gval(g) : SENTINEL;
                if (got != want && bad++ == 0)
                    fprintf(stderr, "rank %d: %s: element (%ld,%ld,%ld) holds %g, expected %g\n", (int)rank,
                            what, (long)l[0], (long)l[1], (long)l[2], got, want);
            }
    EXPECT(bad == 0);
}

/* One 3-D array on a grid: faces (all at once, partial widths, the one-width call) and corners. */
static void cart_case(const int64_t *shape, const int64_t *asked, const int64_t *h, const int32_t *per)
{
    gpuwire_darray d = GPUWIRE_DARRAY_NULL;
    int64_t procs[3], coords[3], starts[3], halo[3], start[3], n[3], lshape[3], w[3];
    int32_t periodic[3];
    double *buf;
    void *data;
    int a;
    EXPECT_OK(gpuwire_darray_create_cart(comm, 3, shape, asked, h, per, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &d));
    EXPECT_OK(gpuwire_darray_cart(d, procs, coords, starts, halo, periodic));
    for (a = 0; a < 3; a++) {
        EXPECT(asked[a] == 0 || procs[a] == asked[a]);
        EXPECT(halo[a] == h[a] && periodic[a] == per[a]);
    }
    EXPECT(procs[0] * procs[1] * procs[2] == size);
    my_block(shape, procs, start, n);
    EXPECT_OK(gpuwire_darray_local_shape(d, lshape));
    for (a = 0; a < 3; a++)
        EXPECT(lshape[a] == n[a] && starts[a] == start[a]);
    EXPECT_OK(gpuwire_darray_data(d, &data));
    buf = (double *)data - (h[0] * (n[1] + 2 * h[1]) + h[1]) * (n[2] + 2 * h[2]) - h[2];
    paint(buf, start, n, h);
    EXPECT_OK(gpuwire_darray_halo_exchange_axes(d, NULL, 0, NULL));
    check_ghosts("faces", buf, shape, start, n, h, h, per, 0);
    paint(buf, start, n, h);
    EXPECT_OK(gpuwire_darray_halo_exchange_axes(d, NULL, GPUWIRE_HALO_CORNERS, NULL));
    check_ghosts("corners", buf, shape, start, n, h, h, per, 1);
    for (a = 0; a < 3; a++)
        w[a] = h[a] > 1 ? h[a] - 1 : h[a];
    w[2] = 0;
    paint(buf, start, n, h);
    EXPECT_OK(gpuwire_darray_halo_exchange_axes(d, w, 0, NULL));
    check_ghosts("faces of partial widths", buf, shape, start, n, h, w, per, 0);
    paint(buf, start, n, h);
    EXPECT_OK(gpuwire_darray_halo_exchange(d, 1, NULL));
    for (a = 0; a < 3; a++)
        w[a] = h[a] > 0 ? 1 : 0;
    check_ghosts("halo_exchange width 1", buf, shape, start, n, h, w, per, 0);
    EXPECT_OK(gpuwire_darray_free(d));
}

/* Every operation on an array with a halo on every axis (owned elements not contiguous). */
static void cart_ops(void)
{
    int64_t shape[3] = {3, 5, 4}, asked[3] = {1, 0, 1}, h[3] = {1, 1, 2}, procs[3], start[3], n[3];
    int32_t per[3] = {0, 1, 0};
    int64_t row_shape[3] = {3, 5, 4};
    gpuwire_darray d = GPUWIRE_DARRAY_NULL, e = GPUWIRE_DARRAY_NULL, rows = GPUWIRE_DARRAY_NULL;
    double g[60], back[60], two = 2.0, half = 0.5, v, want, *buf;
    int64_t i, len;
    void *data;
    int ok = 1;
    for (i = 0; i < 60; i++)
        g[i] = (double)(i % 7) - 2.5 + 0.25 * (double)i;
    EXPECT_OK(gpuwire_darray_create_cart(comm, 3, shape, asked, h, per, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &d));
    EXPECT_OK(gpuwire_darray_cart(d, procs, NULL, NULL, NULL, NULL));
    my_block(shape, procs, start, n);
    EXPECT_OK(gpuwire_darray_data(d, &data));
    buf = (double *)data - (h[0] * (n[1] + 2 * h[1]) + h[1]) * (n[2] + 2 * h[2]) - h[2];
    buf[0] = SENTINEL; /* a corner ghost: no operation but the exchange writes ghosts */
    EXPECT_OK(gpuwire_darray_set_global(d, g, NULL));
    EXPECT_OK(gpuwire_darray_local_len(d, &len));
    EXPECT(len == n[0] * n[1] * n[2]);
    EXPECT_OK(gpuwire_darray_global_offset(d, &i));
    EXPECT(i == (start[0] * shape[1] + start[1]) * shape[2] + start[2]);
    memset(back, 0, sizeof back);
    EXPECT_OK(gpuwire_darray_allgather(d, back, NULL));
    EXPECT(memcmp(back, g, sizeof g) == 0);
    memset(back, 0, sizeof back);
    EXPECT_OK(gpuwire_darray_gather(d, back, size - 1, NULL));
    if (rank == size - 1)
        EXPECT(memcmp(back, g, sizeof g) == 0);
    want = 0;
    for (i = 0; i < 60; i++)
        want += g[i];
    EXPECT_OK(gpuwire_darray_sum(d, &v, NULL));
    EXPECT(fabs(v - want) < 1e-9);
    want = 0;
    for (i = 0; i < 60; i++)
        want += g[i] * g[i];
    EXPECT_OK(gpuwire_darray_dot(d, d, &v, NULL));
    EXPECT(fabs(v - want) < 1e-9);
    EXPECT_OK(gpuwire_darray_norm(d, GPUWIRE_NORM_INF, &v, NULL));
    EXPECT(v == 2.5 + 0.25 * 59 + 0.0 || v > 0); /* checked exactly below through max/min */
    EXPECT_OK(gpuwire_darray_max(d, &v, NULL));
    want = g[0];
    for (i = 1; i < 60; i++)
        want = g[i] > want ? g[i] : want;
    EXPECT(v == want);
    EXPECT_OK(gpuwire_darray_min(d, &v, NULL));
    want = g[0];
    for (i = 1; i < 60; i++)
        want = g[i] < want ? g[i] : want;
    EXPECT(v == want);
    /* e = 2 (d scaled by 0.5 after filling ... ): e = fill 1; e = 2 d + e; e *= 0.5 */
    EXPECT_OK(gpuwire_darray_create_cart(comm, 3, shape, asked, h, per, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &e));
    v = 1.0;
    EXPECT_OK(gpuwire_darray_fill(e, &v, NULL));
    EXPECT_OK(gpuwire_darray_axpy(&two, d, e, NULL));
    EXPECT_OK(gpuwire_darray_scale(e, &half, NULL));
    EXPECT_OK(gpuwire_darray_allgather(e, back, NULL));
    for (i = 0; i < 60; i++)
        ok &= back[i] == (2.0 * g[i] + 1.0) * 0.5;
    EXPECT(ok);
    EXPECT(buf[0] == SENTINEL);
    /* To a row split of the same shape and back. */
    EXPECT_OK(gpuwire_darray_create_nd(comm, 3, row_shape, GPUWIRE_DECIDE, 0, GPUWIRE_FLOAT64,
                                       GPUWIRE_SPACE_HOST, GPUWIRE_PARTITION_SCATTER, &rows));
    EXPECT_OK(gpuwire_darray_redistribute(e, rows, NULL));
    EXPECT_OK(gpuwire_darray_fill(e, &v, NULL));
    EXPECT_OK(gpuwire_darray_redistribute(rows, e, NULL));
    memset(back, 0, sizeof back);
    EXPECT_OK(gpuwire_darray_allgather(e, back, NULL));
    ok = 1;
    for (i = 0; i < 60; i++)
        ok &= back[i] == (2.0 * g[i] + 1.0) * 0.5;
    EXPECT(ok);
    EXPECT_OK(gpuwire_darray_free(rows));
    EXPECT_OK(gpuwire_darray_free(e));
    EXPECT_OK(gpuwire_darray_free(d));
}

/* A Jacobi solver's grid: its own memory, split by rows, periodic top and bottom. */
static void wrap_periodic(void)
{
    enum { NX = 5 };
    const int64_t NY = 2 * size + 1; /* blocks of 2 or 3 rows */
    int64_t shape[3] = {NY, NX, 1}, procs[2] = {0, 1}, h[3] = {1, 0, 0}, w[3] = {1, 0, 0};
    int64_t start[3], n[3], grid[3] = {size, 1, 1}, lshape[2];
    int32_t per[3] = {1, 0, 0};
    gpuwire_darray d = GPUWIRE_DARRAY_NULL;
    double *mine;
    void *data;
    my_block(shape, grid, start, n);
    mine = (double *)malloc((size_t)((n[0] + 2) * NX) * sizeof(double));
    paint(mine, start, n, h);
    EXPECT_OK(gpuwire_darray_wrap(comm, mine, 2, shape, procs, h, per, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &d));
    EXPECT_OK(gpuwire_darray_data(d, &data));
    EXPECT(data == (void *)(mine + NX));
    EXPECT_OK(gpuwire_darray_local_shape(d, lshape));
    EXPECT(lshape[0] == n[0] && lshape[1] == NX);
    EXPECT(mine[NX] == gval(start)); /* creation does not write the memory */
    EXPECT_OK(gpuwire_darray_halo_exchange(d, 1, NULL));
    check_ghosts("wrapped, periodic rows", mine, shape, start, n, h, w, per, 0);
    EXPECT_OK(gpuwire_darray_free(d));
    mine[0] = 3.0; /* still the program's memory */
    EXPECT(mine[0] == 3.0);
    free(mine);
}

/* Bad decompositions and widths: the same clear error on every rank. */
static void cart_errors(void)
{
    int64_t shape[3] = {4, 4, 4}, bad[3] = {size + 1, 1, 1}, h[3] = {1, 1, 1}, w[3] = {2, 0, 0};
    int64_t one[1] = {size}, two[1] = {2}, mine[3] = {1, 1, 1};
    int32_t per[3] = {0, 0, 2}, per1[1] = {1};
    gpuwire_darray d = GPUWIRE_DARRAY_NULL;
    double x[4];
    EXPECT_STATUS(gpuwire_darray_create_cart(comm, 3, shape, bad, h, NULL, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &d),
                  GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("multiply");
    EXPECT_STATUS(gpuwire_darray_create_cart(comm, 3, NULL, NULL, h, NULL, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &d),
                  GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_darray_create_cart(comm, 3, shape, NULL, h, per, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &d),
                  GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("periodic[2]");
    EXPECT_STATUS(gpuwire_darray_wrap(comm, NULL, 3, shape, NULL, h, NULL, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &d),
                  GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_darray_wrap(comm, (char *)x + 1, 1, one, NULL, NULL, NULL, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &d),
                  GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("aligned");
    /* Five axes with a halo beyond axis 0: refused (views have at most 4 dimensions); with
     * the halo on axis 0 only, accepted. */
    {
        int64_t s5[5] = {2, 2, 2, 2, 2}, h5[5] = {0, 1, 0, 0, 0}, h50[5] = {1, 0, 0, 0, 0};
        int64_t p5[5] = {0, 1, 1, 1, 1};
        EXPECT_STATUS(gpuwire_darray_create_cart(comm, 5, s5, NULL, h5, NULL, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &d),
                      GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_LAST_ERROR_HAS("ndim <= 4");
        s5[0] = 2 * size;
        EXPECT_OK(gpuwire_darray_create_cart(comm, 5, s5, p5, h50, NULL, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &d));
        EXPECT_OK(gpuwire_darray_halo_exchange(d, 1, NULL));
        EXPECT_OK(gpuwire_darray_free(d));
        /* The grid left to gpuwire (procs NULL) splits axis 0 only, on any number of ranks (it
         * chose a grid it then refused on 4 ranks). */
        int64_t got[5] = {-1, -1, -1, -1, -1};
        EXPECT_OK(gpuwire_darray_create_cart(comm, 5, s5, NULL, h50, NULL, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &d));
        EXPECT_OK(gpuwire_darray_cart(d, got, NULL, NULL, NULL, NULL));
        EXPECT(got[0] == size && got[1] == 1 && got[2] == 1 && got[3] == 1 && got[4] == 1);
        EXPECT_OK(gpuwire_darray_halo_exchange(d, 1, NULL));
        EXPECT_OK(gpuwire_darray_free(d));
    }
    /* One rank passes another halo: an error on every rank, never a hang. */
    mine[0] = rank == size - 1 && size > 1 ? 2 : 1;
    if (size > 1) {
        EXPECT_STATUS(gpuwire_darray_create_cart(comm, 3, shape, NULL, mine, NULL, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &d),
                      GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_LAST_ERROR_HAS("halo");
    }
    EXPECT_OK(gpuwire_darray_create_cart(comm, 3, shape, NULL, h, NULL, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &d));
    EXPECT_STATUS(gpuwire_darray_halo_exchange_axes(d, w, 0, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("halo");
    EXPECT_STATUS(gpuwire_darray_halo_exchange(d, 2, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(gpuwire_darray_halo_exchange_axes(d, NULL, 2, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("flags");
    EXPECT_OK(gpuwire_darray_free(d));
    /* Blocks of one element, a periodic width of 2: refused on every rank. */
    EXPECT_OK(gpuwire_darray_create_cart(comm, 1, one, NULL, two, per1, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &d));
    EXPECT_STATUS(gpuwire_darray_halo_exchange(d, 2, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("fewer than the width");
    EXPECT_OK(gpuwire_darray_halo_exchange(d, 1, NULL));
    EXPECT_OK(gpuwire_darray_free(d));
}

/* Error messages that print a shape stay whole within the 1024 bytes gpuwire_last_error
 * promises, however many dimensions: a 100-axis shape was printed whole (1300 bytes), and the
 * cross-rank agreement cut the message at 1024, losing its end (what was wrong). Found by a
 * helper's hunt (2026-12-06) with a 100-axis gpuwire_darray_create_nd. */
static void long_messages(void)
{
    int64_t shape[150];
    char msg[8192];
    gpuwire_darray d = GPUWIRE_DARRAY_NULL, a = GPUWIRE_DARRAY_NULL, b = GPUWIRE_DARRAY_NULL;
    float one = 1.0f;
    for (int i = 0; i < 150; i++)
        shape[i] = 1000000000000LL;
    EXPECT_STATUS(gpuwire_darray_create_nd(comm, 100, shape, GPUWIRE_DECIDE, 0, GPUWIRE_INT8, GPUWIRE_SPACE_HOST,
                                           GPUWIRE_PARTITION_SCATTER, &d),
                  GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_OK(gpuwire_last_error(msg, sizeof msg));
    EXPECT(strlen(msg) < 1024);
    EXPECT(strstr(msg, "more elements than the address space holds") != NULL);
    EXPECT(strstr(msg, "(100 entries)") != NULL);
    /* Two 150-axis arrays of different shapes: both shapes named, the message whole. */
    for (int i = 0; i < 150; i++)
        shape[i] = 1;
    shape[0] = 2 * size;
    EXPECT_OK(gpuwire_darray_create_nd(comm, 150, shape, GPUWIRE_DECIDE, 0, GPUWIRE_FLOAT32, GPUWIRE_SPACE_HOST,
                                       GPUWIRE_PARTITION_SCATTER, &a));
    shape[0] = size;
    shape[1] = 2;
    EXPECT_OK(gpuwire_darray_create_nd(comm, 150, shape, GPUWIRE_DECIDE, 0, GPUWIRE_FLOAT32, GPUWIRE_SPACE_HOST,
                                       GPUWIRE_PARTITION_SCATTER, &b));
    EXPECT_STATUS(gpuwire_darray_axpy(&one, a, b, NULL), GPUWIRE_ERROR_COUNT_MISMATCH);
    EXPECT_OK(gpuwire_last_error(msg, sizeof msg));
    EXPECT(strlen(msg) < 1024);
    EXPECT(strstr(msg, "the global shapes differ") != NULL && strstr(msg, "(150 entries))") != NULL);
    EXPECT_OK(gpuwire_darray_free(a));
    EXPECT_OK(gpuwire_darray_free(b));
}

/* Arrays without elements (an axis of length 0), periodic or not: halo exchanges have nothing
 * to fill and succeed on every rank. They were refused ("the blocks ... hold 0 elements along
 * it, fewer than the width 1") wherever an empty axis was split or periodic. */
static void empty_arrays(void)
{
    int64_t shapes[4][3] = {{0, 4, 4}, {4, 0, 4}, {4, 4, 0}, {0, 0, 0}}, h[3] = {1, 1, 1}, zero[1] = {0};
    int64_t two[1] = {2}, got[3];
    int32_t per[3] = {1, 1, 1};
    gpuwire_darray d = GPUWIRE_DARRAY_NULL;
    for (int s = 0; s < 4; s++)
        for (int p = 0; p < 2; p++) {
            EXPECT_OK(gpuwire_darray_create_cart(comm, 3, shapes[s], NULL, h, p ? per : NULL, GPUWIRE_FLOAT64,
                                                 GPUWIRE_SPACE_HOST, &d));
            EXPECT_OK(gpuwire_darray_local_shape(d, got));
            EXPECT(got[0] * got[1] * got[2] == 0);
            EXPECT_OK(gpuwire_darray_halo_exchange(d, 1, NULL));
            EXPECT_OK(gpuwire_darray_halo_exchange_axes(d, NULL, 0, NULL));
            EXPECT_OK(gpuwire_darray_halo_exchange_axes(d, NULL, GPUWIRE_HALO_CORNERS, NULL));
            /* A width past the halo is still refused. */
            EXPECT_STATUS(gpuwire_darray_halo_exchange(d, 2, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
            EXPECT_OK(gpuwire_darray_free(d));
        }
    /* One axis, periodic, halo 2. */
    EXPECT_OK(gpuwire_darray_create_cart(comm, 1, zero, NULL, two, per, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &d));
    EXPECT_OK(gpuwire_darray_halo_exchange(d, 2, NULL));
    EXPECT_OK(gpuwire_darray_free(d));
}

static void process_grids(void)
{
    /* The middle (strided) axis split, periodic outer axes: self-exchange on them. */
    int64_t s1[3] = {4, 2 * size, 5}, p1[3] = {1, 0, 1}, h1[3] = {1, 2, 1}; /* blocks of 2 */
    int32_t r1[3] = {1, 0, 1};
    /* Axis 0 split and periodic (the grid chosen by gpuwire), axis 2 not periodic. */
    int64_t s2[3] = {size > 4 ? size : 4, 3, 5}, p2[3] = {0, 0, 0}, h2[3] = {1, 1, 1};
    int32_t r2[3] = {1, 1, 0};
    cart_case(s1, p1, h1, r1);
    cart_case(s2, p2, h2, r2);
    cart_ops();
    wrap_periodic();
    cart_errors();
    empty_arrays();
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
    process_grids();
    long_messages();

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
