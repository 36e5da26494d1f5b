/*
 * test_darray_wire.c: what distributed arrays must never do to the program around them.
 *
 * 1. Their messages never meet the program's: a program message posted before a halo exchange
 *    (or a gather) with the tag and peer of one of gpuwire's own messages (32001, 32002, 32004)
 *    reaches the program's own receive, and the ghost rows (the gathered array) hold the
 *    neighbours' rows, not the program's data.
 * 2. Checking mode (a communicator with check = 1 and a timeout) agrees every collective
 *    distributed-array call across ranks: a halo width, a root, a norm kind or an array that
 *    differs between ranks, or ranks in different calls, is an error on every rank (nothing
 *    moves: the ghost rows keep their marker), and the communicator stays usable.
 * 3. Sizes from caller values that overflow (halo INT64_MAX, INT64_MAX - 3, shapes whose product
 *    or byte size does not fit) are GPUWIRE_ERROR_INVALID_ARGUMENT on every rank; nothing is
 *    allocated too small (built with -fsanitize=address in the --sanitize pass).
 *
 * Usage: mpirun -n P test_darray_wire P   (any P >= 1; parts 1 and 2 need 2 ranks or more)
 * Prints "test_darray_wire: PASS (...)" from rank 0 and exits 0 when every check on every rank
 * passed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gwtest.h"

#define ROWS 8 /* global rows of the 2-D arrays */
#define COLS 3 /* elements per row */
#define MARK -777.0 /* the program's own messages */
#define GHOST -5.0  /* ghost rows before an exchange */

static gpuwire_comm plain, checked;
static int32_t rank, size;

/* The default split of ROWS rows: first row and row count of rank r. */
static void split(int r, int64_t *first, int64_t *n)
{
    int64_t q = ROWS / size, rem = ROWS % size;
    *n = q + (r < rem ? 1 : 0);
    *first = r * q + (r < rem ? r : rem);
}

static double value(int64_t row, int64_t col) { return 100.0 * (double)row + (double)col; }

/* A ROWS x COLS float64 SCATTER array with `halo` ghost rows, element (i, j) = value(i, j),
 * every ghost element GHOST. */
static gpuwire_darray grid(gpuwire_comm comm, int64_t halo)
{
    int64_t shape[2] = {ROWS, COLS}, first, n, i, j;
    double global[ROWS * COLS], *data = NULL;
    gpuwire_darray d = GPUWIRE_DARRAY_NULL;

    EXPECT_OK(gpuwire_darray_create_nd(comm, 2, shape, GPUWIRE_DECIDE, halo, GPUWIRE_FLOAT64,
                                       GPUWIRE_SPACE_HOST, GPUWIRE_PARTITION_SCATTER, &d));
    for (i = 0; i < ROWS; i++)
        for (j = 0; j < COLS; j++)
            global[i * COLS + j] = value(i, j);
    EXPECT_OK(gpuwire_darray_set_global(d, global, NULL));
    EXPECT_OK(gpuwire_darray_data(d, (void **)&data));
    split(rank, &first, &n);
    if (data != NULL)
        for (i = 0; i < halo * COLS; i++) {
            data[-halo * COLS + i] = GHOST;
            data[n * COLS + i] = GHOST;
        }
    return d;
}

/* Ghost row k above (k = -1, -2, ...) or below (k = n, n + 1, ...) this rank's block must hold
 * global row `first + k` (or GHOST where that row does not exist or was not exchanged). */
static int ghosts_hold(gpuwire_darray d, int64_t width, int64_t halo)
{
    int64_t first, n, k, j;
    double *data = NULL;
    int ok = 1;

    split(rank, &first, &n);
    if (gpuwire_darray_data(d, (void **)&data) != GPUWIRE_SUCCESS || data == NULL)
        return n == 0;
    for (k = -halo; k < n + halo; k++) {
        int64_t g = first + k;
        int exchanged = (k < 0 && -k <= width) || (k >= n && k - n < width);
        if (k >= 0 && k < n)
            continue;
        for (j = 0; j < COLS; j++) {
            double want = exchanged && g >= 0 && g < ROWS ? value(g, j) : GHOST;
            if (data[k * COLS + j] != want) {
                fprintf(stderr, "rank %d: ghost row %ld, column %ld holds %g, expected %g\n", (int)rank,
                        (long)k, (long)j, data[k * COLS + j], want);
                ok = 0;
            }
        }
    }
    return ok;
}

/* A host buffer of `n` float64, every element `v`. */
static gpuwire_buffer filled(int64_t n, double v)
{
    gpuwire_buffer b = GPUWIRE_BUFFER_NULL;
    double *p = NULL;
    int64_t i;
    EXPECT_OK(gpuwire_buffer_alloc(n, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1, &b));
    EXPECT_OK(gpuwire_buffer_pointer(b, (void **)&p));
    for (i = 0; p != NULL && i < n; i++)
        p[i] = v;
    return b;
}

static int all_equal(gpuwire_buffer b, int64_t n, double v)
{
    double *p = NULL;
    int64_t i;
    if (gpuwire_buffer_pointer(b, (void **)&p) != GPUWIRE_SUCCESS || p == NULL)
        return 0;
    for (i = 0; i < n; i++)
        if (p[i] != v)
            return 0;
    return 1;
}

/* 1. Program messages with gpuwire's internal tags, posted before a halo exchange and a gather. */
static void tags_do_not_collide(gpuwire_comm comm)
{
    gpuwire_darray d = grid(comm, 1);
    gpuwire_request to_below = GPUWIRE_REQUEST_NULL, to_above = GPUWIRE_REQUEST_NULL;
    gpuwire_buffer down = filled(COLS, MARK), up = filled(COLS, MARK);
    gpuwire_buffer from_above = filled(COLS, 0.0), from_below = filled(COLS, 0.0);
    int64_t first, n, r;
    double gathered[ROWS * COLS];
    gpuwire_buffer *blocks = calloc((size_t)size, sizeof *blocks);
    gpuwire_request *reqs = calloc((size_t)size, sizeof *reqs);

    /* Exactly a halo row, to the ranks the exchange sends to, with its tags: 32001 downward
     * (to rank + 1), 32002 upward (to rank - 1). */
    if (rank + 1 < size)
        EXPECT_OK(gpuwire_isend(comm, down, rank + 1, 32001, NULL, &to_below));
    if (rank > 0)
        EXPECT_OK(gpuwire_isend(comm, up, rank - 1, 32002, NULL, &to_above));
    EXPECT_OK(gpuwire_darray_halo_exchange(d, 1, NULL));
    EXPECT(ghosts_hold(d, 1, 1));
    if (rank > 0) {
        EXPECT_OK(gpuwire_recv(comm, from_above, rank - 1, 32001, NULL));
        EXPECT(all_equal(from_above, COLS, MARK));
    }
    if (rank + 1 < size) {
        EXPECT_OK(gpuwire_recv(comm, from_below, rank + 1, 32002, NULL));
        EXPECT(all_equal(from_below, COLS, MARK));
    }
    EXPECT_OK(gpuwire_wait(&to_below));
    EXPECT_OK(gpuwire_wait(&to_above));

    /* Gather at rank 0: every other rank first sends its block's size with tag 32004. */
    split(rank, &first, &n);
    if (rank > 0 && n > 0) {
        blocks[0] = filled(n * COLS, MARK);
        EXPECT_OK(gpuwire_isend(comm, blocks[0], 0, 32004, NULL, &reqs[0]));
    }
    memset(gathered, 0, sizeof gathered);
    EXPECT_OK(gpuwire_darray_gather(d, gathered, 0, NULL));
    if (rank == 0) {
        int64_t i, j, bad = 0;
        for (i = 0; i < ROWS; i++)
            for (j = 0; j < COLS; j++)
                bad += gathered[i * COLS + j] != value(i, j);
        EXPECT(bad == 0);
        for (r = 1; r < size; r++) {
            int64_t f, m;
            split((int)r, &f, &m);
            if (m == 0)
                continue;
            blocks[r] = filled(m * COLS, 0.0);
            EXPECT_OK(gpuwire_recv(comm, blocks[r], (int32_t)r, 32004, NULL));
            EXPECT(all_equal(blocks[r], m * COLS, MARK));
        }
    } else if (n > 0) {
        EXPECT_OK(gpuwire_wait(&reqs[0]));
    }
    for (r = 0; r < size; r++)
        if (blocks[r].h != 0)
            EXPECT_OK(gpuwire_buffer_free(blocks[r]));
    free(blocks);
    free(reqs);
    EXPECT_OK(gpuwire_buffer_free(down));
    EXPECT_OK(gpuwire_buffer_free(up));
    EXPECT_OK(gpuwire_buffer_free(from_above));
    EXPECT_OK(gpuwire_buffer_free(from_below));
    EXPECT_OK(gpuwire_darray_free(d));
}

/* A call that must return `code` on every rank of the checked communicator. */
#define EXPECT_ALL(call, code) EXPECT_STATUS(call, code)

/* 2. Arguments that differ between ranks, in checking mode. */
static void checking_mode_agrees(void)
{
    gpuwire_darray d = grid(checked, 2), other, small, bc, skew, gone;
    int64_t shape[2] = {ROWS + 1, COLS}, shape0[2] = {ROWS, COLS};
    double gathered[(ROWS + 1) * COLS], result = 0.0, zero = 0.0;

    /* A halo width that differs: width 1 on rank 0, 2 elsewhere. Nothing moves. */
    EXPECT_ALL(gpuwire_darray_halo_exchange(d, rank == 0 ? 1 : 2, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("halo width");
    EXPECT(ghosts_hold(d, 0, 2));

    /* Rank 0 exchanges another array (another shape) than the others. */
    EXPECT_OK(gpuwire_darray_create_nd(checked, 2, shape, GPUWIRE_DECIDE, 2, GPUWIRE_FLOAT64,
                                       GPUWIRE_SPACE_HOST, GPUWIRE_PARTITION_SCATTER, &other));
    EXPECT_ALL(gpuwire_darray_halo_exchange(rank == 0 ? other : d, 1, NULL), GPUWIRE_ERROR_COUNT_MISMATCH);
    EXPECT(ghosts_hold(d, 0, 2));
    EXPECT_ALL(gpuwire_darray_allgather(rank == 0 ? other : d, gathered, NULL), GPUWIRE_ERROR_COUNT_MISMATCH);

    /* Another datatype on rank 0. */
    EXPECT_OK(gpuwire_darray_create(checked, ROWS * COLS, GPUWIRE_DECIDE, GPUWIRE_INT64,
                                    GPUWIRE_SPACE_HOST, GPUWIRE_PARTITION_SCATTER, &small));
    EXPECT_ALL(gpuwire_darray_allgather(rank == 0 ? small : d, gathered, NULL), GPUWIRE_ERROR_DTYPE_MISMATCH);

    /* Roots that differ (this hung before, even with a timeout). */
    EXPECT_ALL(gpuwire_darray_gather(d, gathered, rank == 0 ? 0 : 1, NULL), GPUWIRE_ERROR_ROOT_MISMATCH);
    EXPECT_OK(gpuwire_darray_create(checked, 4, GPUWIRE_DECIDE, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST,
                                    GPUWIRE_PARTITION_BROADCAST, &bc));
    EXPECT_ALL(gpuwire_darray_bcast(bc, rank == 0 ? 0 : 1, NULL), GPUWIRE_ERROR_ROOT_MISMATCH);

    /* Different norms, different reductions, redistribution into different arrays. */
    EXPECT_ALL(gpuwire_darray_norm(d, rank == 0 ? GPUWIRE_NORM_1 : GPUWIRE_NORM_2, &result, NULL),
               GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("norm kind");
    if (rank == 0)
        EXPECT_ALL(gpuwire_darray_sum(d, &result, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
    else
        EXPECT_ALL(gpuwire_darray_dot(d, d, &result, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("different collectives");
    /* Redistribution into arrays of the same shape split differently: all rows on rank 0. */
    EXPECT_OK(gpuwire_darray_create_nd(checked, 2, shape0, rank == 0 ? ROWS : 0, 0, GPUWIRE_FLOAT64,
                                       GPUWIRE_SPACE_HOST, GPUWIRE_PARTITION_SCATTER, &skew));
    EXPECT_ALL(gpuwire_darray_redistribute(d, rank == 0 ? skew : d, NULL), GPUWIRE_ERROR_COUNT_MISMATCH);
    EXPECT_LAST_ERROR_HAS("second array");

    /* A freed array on rank 0 in a call of two arrays: INVALID_HANDLE there, and the other
     * array's communicator tells the other ranks (REMOTE_ARGUMENT), which waited for rank 0 in
     * the call's agreement before. (Not a refused redistribute source: its partition, which
     * rank 0 cannot know, decides whether the call is collective.) */
    EXPECT_OK(gpuwire_darray_create_nd(checked, 2, shape0, GPUWIRE_DECIDE, 2, GPUWIRE_FLOAT64,
                                       GPUWIRE_SPACE_HOST, GPUWIRE_PARTITION_SCATTER, &gone));
    EXPECT_OK(gpuwire_darray_free(gone));
    {
        gpuwire_status want = rank == 0 ? GPUWIRE_ERROR_INVALID_HANDLE : GPUWIRE_ERROR_REMOTE_ARGUMENT;
        EXPECT_ALL(gpuwire_darray_dot(d, rank == 0 ? gone : d, &result, NULL), want);
        EXPECT_ALL(gpuwire_darray_dot(rank == 0 ? gone : d, d, &result, NULL), want);
        EXPECT_ALL(gpuwire_darray_redistribute(d, rank == 0 ? gone : d, NULL), want);
        /* axpy of SCATTER arrays is local: only rank 0 fails. BROADCAST arrays agree on alpha.
         * (alpha 0 leaves y as it is.) */
        EXPECT_ALL(gpuwire_darray_axpy(&zero, d, rank == 0 ? gone : d, NULL),
                   rank == 0 ? GPUWIRE_ERROR_INVALID_HANDLE : GPUWIRE_SUCCESS);
        EXPECT_OK(gpuwire_darray_create(checked, 4, GPUWIRE_DECIDE, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST,
                                        GPUWIRE_PARTITION_BROADCAST, &gone));
        EXPECT_OK(gpuwire_darray_free(gone));
        EXPECT_ALL(gpuwire_darray_axpy(&zero, bc, rank == 0 ? gone : bc, NULL), want);
        EXPECT_ALL(gpuwire_darray_axpy(&zero, rank == 0 ? gone : bc, bc, NULL), want);
    }

    /* After every mismatch the communicator still works. */
    EXPECT_OK(gpuwire_darray_halo_exchange(d, 2, NULL));
    EXPECT(ghosts_hold(d, 2, 2));
    EXPECT_OK(gpuwire_darray_free(d));
    EXPECT_OK(gpuwire_darray_free(other));
    EXPECT_OK(gpuwire_darray_free(small));
    EXPECT_OK(gpuwire_darray_free(bc));
    EXPECT_OK(gpuwire_darray_free(skew));
}

/* 3. Sizes that overflow. */
static void sizes_overflow(gpuwire_comm comm)
{
    const int64_t halos[] = {INT64_MAX, INT64_MAX - 3, INT64_MAX / 2, INT64_MAX / 2 - 1, INT64_MAX / 16,
                             (int64_t)1 << 61, (int64_t)1 << 60};
    const int64_t shapes[][2] = {{INT64_MAX, 1},
                                 {1, INT64_MAX},
                                 {(int64_t)1 << 32, (int64_t)1 << 32},
                                 {(int64_t)1 << 31, (int64_t)1 << 30},
                                 {INT64_MAX / 8 + 1, 1},
                                 {(int64_t)1 << 60, 2}};
    gpuwire_darray d = GPUWIRE_DARRAY_NULL, ok = GPUWIRE_DARRAY_NULL;
    size_t i;
    int64_t shape[2] = {4, 2}, len = -1;
    double one = 1.0, sum = 0.0;

    for (i = 0; i < sizeof halos / sizeof halos[0]; i++) {
        EXPECT_UNTOUCHED_H(gpuwire_darray_create_nd(comm, 2, shape, GPUWIRE_DECIDE, halos[i], GPUWIRE_FLOAT64,
                                                    GPUWIRE_SPACE_HOST, GPUWIRE_PARTITION_SCATTER, &d),
                           GPUWIRE_ERROR_INVALID_ARGUMENT, d, 0);
        EXPECT_UNTOUCHED_H(gpuwire_darray_create_nd(comm, 1, shape, GPUWIRE_DECIDE, halos[i], GPUWIRE_INT8,
                                                    GPUWIRE_SPACE_HOST, GPUWIRE_PARTITION_SCATTER, &d),
                           GPUWIRE_ERROR_INVALID_ARGUMENT, d, 0);
    }
    for (i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        EXPECT_UNTOUCHED_H(gpuwire_darray_create_nd(comm, 2, shapes[i], GPUWIRE_DECIDE, 0, GPUWIRE_COMPLEX128,
                                                    GPUWIRE_SPACE_HOST, GPUWIRE_PARTITION_SCATTER, &d),
                           GPUWIRE_ERROR_INVALID_ARGUMENT, d, 0);
    EXPECT_UNTOUCHED_H(gpuwire_darray_create(comm, INT64_MAX, GPUWIRE_DECIDE, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST,
                                             GPUWIRE_PARTITION_SCATTER, &d),
                       GPUWIRE_ERROR_INVALID_ARGUMENT, d, 0);
    EXPECT_UNTOUCHED_H(gpuwire_darray_create(comm, INT64_MAX / 8 + 1, GPUWIRE_DECIDE, GPUWIRE_FLOAT64,
                                             GPUWIRE_SPACE_HOST, GPUWIRE_PARTITION_BROADCAST, &d),
                       GPUWIRE_ERROR_INVALID_ARGUMENT, d, 0);
    /* Local lengths whose sum wraps: INT64_MAX on every rank but the last. */
    if (size > 1)
        EXPECT_UNTOUCHED_H(gpuwire_darray_create(comm, 4, rank == size - 1 ? 4 : INT64_MAX, GPUWIRE_FLOAT64,
                                                 GPUWIRE_SPACE_HOST, GPUWIRE_PARTITION_SCATTER, &d),
                           GPUWIRE_ERROR_COUNT_MISMATCH, d, 0);
    /* Views past the end, and at offsets that overflow. */
    {
        gpuwire_buffer b = filled(8, 0.0), v = GPUWIRE_BUFFER_NULL;
        EXPECT_UNTOUCHED_H(gpuwire_buffer_view(b, INT64_MAX, 2, &v), GPUWIRE_ERROR_INVALID_ARGUMENT, v, 0);
        EXPECT_UNTOUCHED_H(gpuwire_buffer_view(b, 2, INT64_MAX, &v), GPUWIRE_ERROR_INVALID_ARGUMENT, v, 0);
        EXPECT_UNTOUCHED_H(gpuwire_buffer_view(b, 7, 2, &v), GPUWIRE_ERROR_INVALID_ARGUMENT, v, 0);
        EXPECT_UNTOUCHED_H(gpuwire_buffer_alloc(INT64_MAX / 8 + 1, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1, &v),
                           GPUWIRE_ERROR_INVALID_ARGUMENT, v, 0);
        EXPECT_UNTOUCHED_H(gpuwire_buffer_wrap(&one, INT64_MAX / 4, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &v),
                           GPUWIRE_ERROR_INVALID_ARGUMENT, v, 0);
        EXPECT_OK(gpuwire_buffer_free(b));
    }
    /* The heap is intact: a normal array works (with ASan, any write outside a block stopped
     * the program already). */
    EXPECT_OK(gpuwire_darray_create_nd(comm, 2, shape, GPUWIRE_DECIDE, 1, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST,
                                       GPUWIRE_PARTITION_SCATTER, &ok));
    EXPECT_OK(gpuwire_darray_fill(ok, &one, NULL));
    EXPECT_OK(gpuwire_darray_halo_exchange(ok, 1, NULL));
    EXPECT_OK(gpuwire_darray_sum(ok, &sum, NULL));
    EXPECT(sum == 8.0);
    EXPECT_OK(gpuwire_darray_global_len(ok, &len));
    EXPECT(len == 8);
    EXPECT_OK(gpuwire_darray_free(ok));
}

int main(int argc, char **argv)
{
    gpuwire_config cfg;
    gpuwire_darray fails;
    int64_t failures = 0, mine;

    if (argc != 2) {
        fprintf(stderr, "usage: test_darray_wire EXPECTED_RANKS\n");
        return 2;
    }
    if (gpuwire_init() != GPUWIRE_SUCCESS || gpuwire_comm_world(NULL, &plain) != GPUWIRE_SUCCESS ||
        gpuwire_comm_rank(plain, &rank) != GPUWIRE_SUCCESS || gpuwire_comm_size(plain, &size) != GPUWIRE_SUCCESS) {
        fprintf(stderr, "test_darray_wire: setup failed\n");
        return 1;
    }
    gwt_rank = rank;
    if (size != atoi(argv[1])) {
        fprintf(stderr, "test_darray_wire: launched on %d ranks, expected %s (wrong launcher?)\n", (int)size,
                argv[1]);
        return 1;
    }
    EXPECT_OK(gpuwire_config_init(&cfg));
    cfg.check = 1;
    cfg.timeout_seconds = 60.0;
    EXPECT_OK(gpuwire_comm_world(&cfg, &checked));

    sizes_overflow(plain);
    sizes_overflow(checked);
    if (size > 1) {
        tags_do_not_collide(plain);
        tags_do_not_collide(checked);
        checking_mode_agrees();
    }

    fails = GPUWIRE_DARRAY_NULL;
    EXPECT_OK(gpuwire_darray_create(plain, size, 1, GPUWIRE_INT64, GPUWIRE_SPACE_HOST, GPUWIRE_PARTITION_SCATTER,
                                    &fails));
    mine = gwt_failures();
    EXPECT_OK(gpuwire_darray_fill(fails, &mine, NULL));
    EXPECT_OK(gpuwire_darray_sum(fails, &failures, NULL));
    EXPECT_OK(gpuwire_darray_free(fails));
    EXPECT_OK(gpuwire_comm_free(checked));
    EXPECT_OK(gpuwire_comm_free(plain));
    EXPECT_OK(gpuwire_finalize());
    failures += gwt_failures() - mine;
    if (rank == 0 && failures == 0)
        printf("test_darray_wire: PASS (%d ranks, %ld checks on rank 0)\n", (int)size, gwt_checks);
    if (failures != 0)
        fprintf(stderr, "test_darray_wire: FAIL (rank %d: %ld failed checks)\n", (int)rank, gwt_failures());
    return failures == 0 ? 0 : 1;
}
