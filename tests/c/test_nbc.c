/*
 * test_nbc.c: nonblocking collectives and groups on host memory (issue 18).
 *
 * - Every nonblocking collective (ibarrier, ibcast, ireduce, iallreduce SUM / MAX / AVG and in
 *   place, iallgather, iallgatherv with counts and with NULL, ireduce_scatter, ialltoall,
 *   igather, iscatter) with values computed here; thirteen outstanding at once on one
 *   communicator, a large one among them, completed in reverse order, by a gpuwire_test loop,
 *   by gpuwire_waitall, in a per-rank order, and across two communicators.
 * - The nonblocking form on some ranks matches the blocking form on the others, also with two
 *   outstanding on the nonblocking ranks completed in reverse order.
 * - Under MPI_THREAD_MULTIPLE the call returns before the other ranks have called: ibarrier,
 *   iallreduce and ibcast on one rank, gpuwire_test says "not yet", then the others are
 *   released by a raw MPI message (a call that blocked instead would time out, not hang). An
 *   iallreduce no other rank joins times out (0.75 s) instead of hanging.
 * - Argument errors come from the call itself, the same as the blocking form's, with the
 *   request pointer and the receive buffer untouched (count and datatype mismatches, bad roots,
 *   NULL request, invalid handles, unknown and unsupported ops, negative and wrong counts); the
 *   communicator is in step afterwards. iallgatherv copies its counts at the call.
 * - (part "free") The request keeps its buffers and communicator alive: both handles freed
 *   while an iallreduce is outstanding, gpuwire_comm_free included, 50 rounds.
 * - Checking mode (config.check and GPUWIRE_CHECK=1): count, datatype, op, root mismatches and
 *   another collective, reported by the call or the wait on every rank, no hang; one rank's bad
 *   argument is REMOTE_ARGUMENT on the others; a good request outstanding beside a bad one;
 *   a mismatch inside a group.
 * - Groups: K = 2, 4, 8 blocking sends then K blocking receives of 1 to 4 MiB to different peers
 *   (and to every other rank), an order that deadlocks without the group; nesting (only the
 *   outermost end starts); isend / irecv / sendrecv and collectives, blocking and nonblocking,
 *   in one group; a halo exchange ring in one group; an argument error inside a group;
 *   group_end without start; wait / test on a request of an unfinished group; group_end
 *   returning its operations' first error; groups are per thread.
 * - (part "vcoll", issue 13) The nonblocking v-collectives: ialltoallv (rank r sends r + 1
 *   elements to each rank, received with a gap before each block), igatherv and iscatterv at
 *   the last rank, ireduce_scatterv (rank j gets j + 1 elements), ireduce_scatter_block and
 *   gpuwire_reduce_scatter_block, all outstanding at once (their arrays overwritten after the
 *   call), completed by waitall; values computed here.
 *
 * Usage: mpirun -n P test_nbc P [funneled] [part]   (part: coll, many, mixed, early, timeout,
 * args, check, group; default all of these; or free, run only when named). "funneled" initializes MPI with MPI_THREAD_FUNNELED (operations
 * then complete inside their call; the "early" part is skipped). Prints
 * "test_nbc: PASS (P ranks, ...)" from rank 0.
 */
#define _POSIX_C_SOURCE 200809L

#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gwtest.h"

#define FILL 0x7e
#define MAXP 64

static int rank, size, next, prev, multiple;
static gpuwire_comm world;

static gpuwire_buffer balloc(int64_t n, int32_t dtype)
{
    gpuwire_buffer b = GPUWIRE_BUFFER_NULL;
    EXPECT_OK(gpuwire_buffer_alloc(n, dtype, GPUWIRE_SPACE_HOST, -1, &b));
    return b;
}

static void *bptr(gpuwire_buffer b)
{
    void *p = NULL;
    EXPECT_OK(gpuwire_buffer_pointer(b, &p));
    return p;
}

static gpuwire_buffer bview(gpuwire_buffer b, int64_t off, int64_t n)
{
    gpuwire_buffer v = GPUWIRE_BUFFER_NULL;
    EXPECT_OK(gpuwire_buffer_view(b, off, n, &v));
    return v;
}

static void bfree(gpuwire_buffer b)
{
    if (b.h != 0)
        EXPECT_OK(gpuwire_buffer_free(b));
}

static int all_bytes(const void *p, size_t n, unsigned char v)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != v)
            return 0;
    return 1;
}

/* Values: rank r's element i; alltoall / scatter blocks: rank r's block for rank q. */
static int32_t v(int r, int64_t i) { return (int32_t)(r * 1000 + i + 1); }
static int32_t w(int r, int q, int64_t i) { return (int32_t)(((r * 16 + q) << 20) + i); }

/* The first element of `p` (n int32) that is not f(i), or -1; reported with its values. */
#define EXPECT_SEQ(p, n, expr)                                                             \
    do {                                                                                   \
        const int32_t *p_ = (p);                                                           \
        int64_t bad_ = -1;                                                                 \
        int32_t got_ = 0, want_ = 0;                                                       \
        for (int64_t i = 0; i < (int64_t)(n); i++) {                                       \
            int32_t e_ = (int32_t)(expr);                                                  \
            if (p_[i] != e_) {                                                             \
                bad_ = i, got_ = p_[i], want_ = e_;                                        \
                break;                                                                     \
            }                                                                              \
        }                                                                                  \
        gwt_checks++;                                                                      \
        if (bad_ >= 0) {                                                                   \
            char d_[200];                                                                  \
            snprintf(d_, sizeof d_, "element %lld is %ld, expected %ld (%s)", (long long)bad_, \
                     (long)got_, (long)want_, what);                                       \
            gwt_fail(__FILE__, __LINE__, #p " = " #expr, d_);                              \
        }                                                                                  \
    } while (0)

/* ---- one operation of each kind: set up, start (blocking or not), verify ------------------ */

enum kind {
    K_BARRIER,
    K_BCAST,
    K_REDUCE,
    K_ALLREDUCE_SUM,
    K_ALLREDUCE_MAX,
    K_ALLREDUCE_AVG_INPLACE,
    K_ALLGATHER,
    K_ALLGATHERV_COUNTS,
    K_ALLGATHERV_NULL,
    K_REDUCE_SCATTER,
    K_ALLTOALL,
    K_GATHER,
    K_SCATTER,
    NKINDS
};
static const char *const kind_name[] = {"barrier",        "bcast",         "reduce",
                                        "allreduce SUM",  "allreduce MAX", "allreduce AVG in place",
                                        "allgather",      "allgatherv",    "allgatherv (NULL counts)",
                                        "reduce_scatter", "alltoall",      "gather",
                                        "scatter"};

typedef struct {
    int kind, root;
    int64_t n;
    int64_t counts[MAXP];
    gpuwire_buffer a, b;
    gpuwire_request rq;
} op_t;

/* allgatherv counts: rank q gives 3q + q % 2 + n % 3 elements (rank 0 none for n % 3 == 0). */
static int64_t vcount(int q, int64_t n) { return 3 * q + q % 2 + n % 3; }

static void setup(op_t *o, int kind, int64_t n, int root)
{
    memset(o, 0, sizeof *o);
    o->kind = kind, o->n = n, o->root = root;
    o->rq = GPUWIRE_REQUEST_NULL;
    int32_t *a, *b;
    switch (kind) {
    case K_BARRIER:
        break;
    case K_BCAST:
        o->a = balloc(n, GPUWIRE_INT32);
        a = bptr(o->a);
        for (int64_t i = 0; i < n; i++)
            a[i] = rank == root ? v(root, i) : -1;
        break;
    case K_REDUCE:
    case K_ALLREDUCE_SUM:
    case K_ALLREDUCE_MAX:
        o->a = balloc(n, GPUWIRE_INT32);
        if (kind != K_REDUCE || rank == root)
            o->b = balloc(n, GPUWIRE_INT32);
        a = bptr(o->a);
        for (int64_t i = 0; i < n; i++)
            a[i] = v(rank, i);
        if (o->b.h != 0)
            memset(bptr(o->b), FILL, (size_t)n * 4);
        break;
    case K_ALLREDUCE_AVG_INPLACE: {
        o->a = balloc(n, GPUWIRE_FLOAT64);
        double *d = bptr(o->a);
        for (int64_t i = 0; i < n; i++)
            d[i] = v(rank, i);
        break;
    }
    case K_ALLGATHER:
        o->a = balloc(n, GPUWIRE_INT32);
        o->b = balloc(n * size, GPUWIRE_INT32);
        a = bptr(o->a);
        for (int64_t i = 0; i < n; i++)
            a[i] = v(rank, i);
        memset(bptr(o->b), FILL, (size_t)(n * size) * 4);
        break;
    case K_ALLGATHERV_COUNTS:
    case K_ALLGATHERV_NULL: {
        int64_t total = 0;
        for (int q = 0; q < size; q++)
            total += o->counts[q] = vcount(q, n);
        o->a = balloc(o->counts[rank], GPUWIRE_INT32);
        o->b = balloc(total, GPUWIRE_INT32);
        a = bptr(o->a);
        for (int64_t i = 0; i < o->counts[rank]; i++)
            a[i] = v(rank, i);
        if (total > 0)
            memset(bptr(o->b), FILL, (size_t)total * 4);
        break;
    }
    case K_REDUCE_SCATTER:
        o->a = balloc(n * size, GPUWIRE_INT32);
        o->b = balloc(n, GPUWIRE_INT32);
        a = bptr(o->a);
        for (int64_t i = 0; i < n * size; i++)
            a[i] = v(rank, i);
        memset(bptr(o->b), FILL, (size_t)n * 4);
        break;
    case K_ALLTOALL:
        o->a = balloc(n * size, GPUWIRE_INT32);
        o->b = balloc(n * size, GPUWIRE_INT32);
        a = bptr(o->a);
        for (int q = 0; q < size; q++)
            for (int64_t i = 0; i < n; i++)
                a[q * n + i] = w(rank, q, i);
        memset(bptr(o->b), FILL, (size_t)(n * size) * 4);
        break;
    case K_GATHER:
        o->a = balloc(n, GPUWIRE_INT32);
        a = bptr(o->a);
        for (int64_t i = 0; i < n; i++)
            a[i] = v(rank, i);
        if (rank == root) {
            o->b = balloc(n * size, GPUWIRE_INT32);
            memset(bptr(o->b), FILL, (size_t)(n * size) * 4);
        }
        break;
    case K_SCATTER:
        if (rank == root) {
            o->a = balloc(n * size, GPUWIRE_INT32);
            a = bptr(o->a);
            for (int q = 0; q < size; q++)
                for (int64_t i = 0; i < n; i++)
                    a[q * n + i] = w(root, q, i);
        }
        o->b = balloc(n, GPUWIRE_INT32);
        b = bptr(o->b);
        memset(b, FILL, (size_t)n * 4);
        break;
    }
}

/* Starts the operation on `c`: the nonblocking form (request in o->rq) or the blocking one. */
static gpuwire_status start(op_t *o, gpuwire_comm c, int nonblocking)
{
    gpuwire_request *rq = &o->rq;
    const int64_t *counts = o->kind == K_ALLGATHERV_COUNTS ? o->counts : NULL;
    if (nonblocking) {
        switch (o->kind) {
        case K_BARRIER: return gpuwire_ibarrier(c, NULL, rq);
        case K_BCAST: return gpuwire_ibcast(c, o->a, o->root, NULL, rq);
        case K_REDUCE: return gpuwire_ireduce(c, o->a, o->b, GPUWIRE_SUM, o->root, NULL, rq);
        case K_ALLREDUCE_SUM: return gpuwire_iallreduce(c, o->a, o->b, GPUWIRE_SUM, NULL, rq);
        case K_ALLREDUCE_MAX: return gpuwire_iallreduce(c, o->a, o->b, GPUWIRE_MAX, NULL, rq);
        case K_ALLREDUCE_AVG_INPLACE: return gpuwire_iallreduce(c, o->a, o->a, GPUWIRE_AVG, NULL, rq);
        case K_ALLGATHER: return gpuwire_iallgather(c, o->a, o->b, NULL, rq);
        case K_ALLGATHERV_COUNTS:
        case K_ALLGATHERV_NULL: return gpuwire_iallgatherv(c, o->a, o->b, counts, NULL, rq);
        case K_REDUCE_SCATTER: return gpuwire_ireduce_scatter(c, o->a, o->b, GPUWIRE_SUM, NULL, rq);
        case K_ALLTOALL: return gpuwire_ialltoall(c, o->a, o->b, NULL, rq);
        case K_GATHER: return gpuwire_igather(c, o->a, o->b, o->root, NULL, rq);
        case K_SCATTER: return gpuwire_iscatter(c, o->a, o->b, o->root, NULL, rq);
        }
    } else {
        switch (o->kind) {
        case K_BARRIER: return gpuwire_barrier(c, NULL);
        case K_BCAST: return gpuwire_bcast(c, o->a, o->root, NULL);
        case K_REDUCE: return gpuwire_reduce(c, o->a, o->b, GPUWIRE_SUM, o->root, NULL);
        case K_ALLREDUCE_SUM: return gpuwire_allreduce(c, o->a, o->b, GPUWIRE_SUM, NULL);
        case K_ALLREDUCE_MAX: return gpuwire_allreduce(c, o->a, o->b, GPUWIRE_MAX, NULL);
        case K_ALLREDUCE_AVG_INPLACE: return gpuwire_allreduce(c, o->a, o->a, GPUWIRE_AVG, NULL);
        case K_ALLGATHER: return gpuwire_allgather(c, o->a, o->b, NULL);
        case K_ALLGATHERV_COUNTS:
        case K_ALLGATHERV_NULL: return gpuwire_allgatherv(c, o->a, o->b, counts, NULL);
        case K_REDUCE_SCATTER: return gpuwire_reduce_scatter(c, o->a, o->b, GPUWIRE_SUM, NULL);
        case K_ALLTOALL: return gpuwire_alltoall(c, o->a, o->b, NULL);
        case K_GATHER: return gpuwire_gather(c, o->a, o->b, o->root, NULL);
        case K_SCATTER: return gpuwire_scatter(c, o->a, o->b, o->root, NULL);
        }
    }
    return GPUWIRE_ERROR_INTERNAL;
}

static int64_t sum_v(int64_t i)
{
    int64_t s = 0;
    for (int q = 0; q < size; q++)
        s += v(q, i);
    return s;
}

/* Checks the result (values computed here) and frees the buffers. `what` names the case. */
static void verify(op_t *o, const char *what)
{
    int64_t n = o->n;
    int32_t *a = o->a.h ? bptr(o->a) : NULL, *b = o->b.h ? bptr(o->b) : NULL;
    EXPECT(o->rq.h == 0);
    switch (o->kind) {
    case K_BARRIER:
        break;
    case K_BCAST:
        EXPECT_SEQ(a, n, v(o->root, i));
        break;
    case K_REDUCE:
        if (rank == o->root)
            EXPECT_SEQ(b, n, sum_v(i));
        EXPECT_SEQ(a, n, v(rank, i)); /* the send buffer is unchanged */
        break;
    case K_ALLREDUCE_SUM:
        EXPECT_SEQ(b, n, sum_v(i));
        EXPECT_SEQ(a, n, v(rank, i));
        break;
    case K_ALLREDUCE_MAX:
        EXPECT_SEQ(b, n, v(size - 1, i));
        break;
    case K_ALLREDUCE_AVG_INPLACE: {
        const double *d = bptr(o->a);
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++)
            if (d[i] != (double)sum_v(i) / size)
                bad = i;
        gwt_checks++;
        if (bad >= 0) {
            char m[200];
            snprintf(m, sizeof m, "element %lld is %g, expected %g (%s)", (long long)bad, d[bad],
                     (double)sum_v(bad) / size, what);
            gwt_fail(__FILE__, __LINE__, "allreduce AVG in place", m);
        }
        break;
    }
    case K_ALLGATHER:
        for (int q = 0; q < size; q++)
            EXPECT_SEQ(b + q * n, n, v(q, i));
        break;
    case K_ALLGATHERV_COUNTS:
    case K_ALLGATHERV_NULL: {
        int64_t off = 0;
        for (int q = 0; q < size; off += o->counts[q], q++)
            EXPECT_SEQ(b + off, o->counts[q], v(q, i));
        break;
    }
    case K_REDUCE_SCATTER:
        EXPECT_SEQ(b, n, sum_v(rank * n + i));
        break;
    case K_ALLTOALL:
        for (int q = 0; q < size; q++)
            EXPECT_SEQ(b + q * n, n, w(q, rank, i));
        break;
    case K_GATHER:
        if (rank == o->root)
            for (int q = 0; q < size; q++)
                EXPECT_SEQ(b + q * n, n, v(q, i));
        break;
    case K_SCATTER:
        EXPECT_SEQ(b, n, w(o->root, rank, i));
        break;
    }
    bfree(o->a);
    bfree(o->b);
    o->a = o->b = GPUWIRE_BUFFER_NULL;
}

/* A call's status, then (when it succeeded) its wait's. */
static gpuwire_status call_then_wait(gpuwire_status st, gpuwire_request *rq)
{
    if (st != GPUWIRE_SUCCESS)
        return st;
    return gpuwire_wait(rq);
}

/* ---- each nonblocking collective alone ---------------------------------------------------- */

static void each_collective(void)
{
    static const int64_t ns[] = {1, 7, 1000, 70000};
    char what[128];
    for (size_t s = 0; s < sizeof ns / sizeof ns[0]; s++)
        for (int k = 0; k < NKINDS; k++) {
            int rooted = k == K_BCAST || k == K_REDUCE || k == K_GATHER || k == K_SCATTER;
            for (int root = 0; root < (rooted ? size : 1); root += size > 1 ? size - 1 : 1) {
                op_t o;
                snprintf(what, sizeof what, "i%s n=%lld root %d", kind_name[k], (long long)ns[s], root);
                setup(&o, k, ns[s], root);
                o.rq.h = 77;
                EXPECT_OK(start(&o, world, 1));
                EXPECT(o.rq.h != 77);
                EXPECT_OK(gpuwire_wait(&o.rq));
                verify(&o, what);
            }
        }
}

/* ---- many outstanding, completed in other orders ------------------------------------------ */

enum order { REVERSE, TEST_LOOP, WAITALL, PER_RANK, NORDERS };
static const char *const order_name[] = {"reverse waits", "test loop", "waitall", "per-rank order"};

static void complete(gpuwire_request *rqs, int m, int order)
{
    switch (order) {
    case REVERSE:
        for (int j = m - 1; j >= 0; j--)
            EXPECT_OK(gpuwire_wait(&rqs[j]));
        break;
    case TEST_LOOP: {
        /* Test the last one first, round after round, until all are done (60 s at most). */
        double t0 = MPI_Wtime();
        int left = 0;
        for (int j = 0; j < m; j++)
            left += rqs[j].h != 0;
        while (left > 0 && MPI_Wtime() - t0 < 60.0) {
            for (int j = m - 1; j >= 0; j--) {
                if (rqs[j].h == 0)
                    continue;
                int32_t flag = -1;
                gpuwire_status st = gpuwire_test(&rqs[j], &flag);
                if (st != GPUWIRE_SUCCESS || (flag != 0 && flag != 1)) {
                    EXPECT_OK(st);
                    EXPECT(flag == 0 || flag == 1);
                    rqs[j] = GPUWIRE_REQUEST_NULL;
                    left--;
                } else if (flag == 1) {
                    EXPECT(rqs[j].h == 0);
                    left--;
                }
            }
            /* A pause between rounds, as a program's loop has its own work: one that never
               sleeps is a second busy thread beside the engine's MPI polling, and Linux can then
               starve the other rank for a minute on 2 cores (bench/probe_starve.c). */
            struct timespec pause = {0, 20000};
            nanosleep(&pause, NULL);
        }
        gwt_checks++;
        if (left > 0) {
            char d[80];
            snprintf(d, sizeof d, "%d of %d requests still pending after 60 s of gpuwire_test", left, m);
            gwt_fail(__FILE__, __LINE__, "test loop", d);
            for (int j = 0; j < m; j++)
                (void)gpuwire_wait(&rqs[j]);
        }
        break;
    }
    case WAITALL:
        EXPECT_OK(gpuwire_waitall(m, rqs));
        for (int j = 0; j < m; j++)
            EXPECT(rqs[j].h == 0);
        break;
    case PER_RANK:
        /* Rank r starts at request 5r (mod m); even ranks go forwards, odd ones backwards. */
        for (int j = 0; j < m; j++) {
            int idx = ((rank % 2 ? m - 1 - j : j) + rank * 5) % m;
            EXPECT_OK(gpuwire_wait(&rqs[idx]));
        }
        break;
    }
}

static void many_outstanding(void)
{
    char what[128];
    op_t ops[NKINDS + 1];
    gpuwire_request rqs[NKINDS + 1];
    for (int order = 0; order < NORDERS; order++) {
        /* Every kind, sizes differing by kind, and a 4 MiB allreduce issued second. */
        int m = 0;
        for (int k = 0; k < NKINDS; k++) {
            setup(&ops[m], k, 100 + 37 * k + order, k % size);
            EXPECT_OK(start(&ops[m], world, 1));
            m++;
            if (k == 0) {
                setup(&ops[m], K_ALLREDUCE_SUM, 1 << 20, 0);
                EXPECT_OK(start(&ops[m], world, 1));
                m++;
            }
        }
        for (int j = 0; j < m; j++)
            rqs[j] = ops[j].rq;
        complete(rqs, m, order);
        for (int j = 0; j < m; j++) {
            ops[j].rq = rqs[j];
            snprintf(what, sizeof what, "%s, %d outstanding, %s", kind_name[ops[j].kind], m, order_name[order]);
            verify(&ops[j], what);
        }
    }

    /* On two communicators at once, interleaved, completed in reverse. */
    gpuwire_comm dup = GPUWIRE_COMM_NULL;
    EXPECT_OK(gpuwire_comm_dup(world, &dup));
    for (int j = 0; j < 8; j++) {
        setup(&ops[j], j % 2 ? K_ALLREDUCE_SUM : K_ALLGATHER, 500 + j, 0);
        EXPECT_OK(start(&ops[j], j % 3 ? dup : world, 1));
    }
    for (int j = 7; j >= 0; j--)
        EXPECT_OK(gpuwire_wait(&ops[j].rq));
    for (int j = 0; j < 8; j++) {
        snprintf(what, sizeof what, "%s on two communicators", kind_name[ops[j].kind]);
        verify(&ops[j], what);
    }

    EXPECT_OK(gpuwire_comm_free(dup));

    /* iallgatherv copies its counts at the call: the array is overwritten before the wait. */
    op_t o;
    setup(&o, K_ALLGATHERV_COUNTS, 50, 0);
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)size);
    EXPECT(counts != NULL);
    memcpy(counts, o.counts, sizeof(int64_t) * (size_t)size);
    EXPECT_OK(gpuwire_iallgatherv(world, o.a, o.b, counts, NULL, &o.rq));
    for (int qq = 0; qq < size; qq++)
        counts[qq] = -12345;
    free(counts);
    EXPECT_OK(gpuwire_wait(&o.rq));
    verify(&o, "iallgatherv with its counts array overwritten before the wait");
}

/* ---- the request keeps its buffers and communicator alive --------------------------------
 * The handles are freed while an iallreduce is outstanding (the memory is the test's own,
 * wrapped): gpuwire_comm_free is collective, and must not fail nor wait for the request. 50
 * rounds, on communicators with a timeout (a rank left in the free fails instead of hanging). */
static void free_while_pending(void)
{
    char what[128];
    gpuwire_config cfg;
    EXPECT_OK(gpuwire_config_init(&cfg));
    cfg.timeout_seconds = 30.0;
    gpuwire_comm tc = GPUWIRE_COMM_NULL;
    EXPECT_OK(gpuwire_comm_world(&cfg, &tc));
    int64_t n = 30000;
    int32_t *mem = malloc((size_t)n * 8);
    EXPECT(mem != NULL);
    for (int round = 0; round < 50 && gwt_failures() == 0; round++) {
        gpuwire_comm dup = GPUWIRE_COMM_NULL;
        EXPECT_OK(gpuwire_comm_dup(tc, &dup));
        for (int64_t i = 0; i < n; i++)
            mem[i] = v(rank, i);
        memset(mem + n, FILL, (size_t)n * 4);
        gpuwire_buffer s = GPUWIRE_BUFFER_NULL, r = GPUWIRE_BUFFER_NULL;
        EXPECT_OK(gpuwire_buffer_wrap(mem, n, GPUWIRE_INT32, GPUWIRE_SPACE_HOST, &s));
        EXPECT_OK(gpuwire_buffer_wrap(mem + n, n, GPUWIRE_INT32, GPUWIRE_SPACE_HOST, &r));
        gpuwire_request q = GPUWIRE_REQUEST_NULL;
        EXPECT_OK(gpuwire_iallreduce(dup, s, r, GPUWIRE_SUM, NULL, &q));
        bfree(s);
        bfree(r);
        EXPECT_OK(gpuwire_comm_free(dup));
        EXPECT_OK(gpuwire_wait(&q));
        snprintf(what, sizeof what, "round %d: iallreduce whose buffers and communicator were freed before the wait", round);
        EXPECT_SEQ(mem + n, n, sum_v(i));
    }
    free(mem);
    EXPECT_OK(gpuwire_comm_free(tc));
}

/* ---- nonblocking on some ranks, blocking on the others ------------------------------------ */

static void mixed_forms(void)
{
    char what[128];
    for (int k = 0; k < NKINDS; k++) {
        /* Rank 0 nonblocking, then the even ranks. */
        for (int pattern = 0; pattern < 2; pattern++) {
            int nb = pattern == 0 ? rank == 0 : rank % 2 == 0;
            op_t o;
            setup(&o, k, 200 + k, size - 1);
            EXPECT_OK(start(&o, world, nb));
            if (nb)
                EXPECT_OK(gpuwire_wait(&o.rq));
            snprintf(what, sizeof what, "%s, %s", kind_name[k], pattern == 0 ? "nonblocking on rank 0 only" : "nonblocking on even ranks");
            verify(&o, what);
        }
    }
    /* Two outstanding on rank 0 (completed in reverse); blocking in call order elsewhere. */
    op_t a, b;
    setup(&a, K_ALLREDUCE_SUM, 1 << 18, 0);
    setup(&b, K_ALLGATHER, 1 << 16, 0);
    EXPECT_OK(start(&a, world, rank == 0));
    EXPECT_OK(start(&b, world, rank == 0));
    if (rank == 0) {
        EXPECT_OK(gpuwire_wait(&b.rq));
        EXPECT_OK(gpuwire_wait(&a.rq));
    }
    verify(&a, "iallreduce on rank 0 (waited second), allreduce elsewhere");
    verify(&b, "iallgather on rank 0 (waited first), allgather elsewhere");
    /* Every rank: a blocking collective while its own nonblocking one is outstanding (it starts
     * after it, in call order). */
    setup(&a, K_ALLREDUCE_SUM, 1 << 18, 0);
    setup(&b, K_ALLTOALL, 1000, 0);
    EXPECT_OK(start(&a, world, 1));
    EXPECT_OK(start(&b, world, 0));
    verify(&b, "alltoall (blocking) while an iallreduce is outstanding");
    EXPECT_OK(gpuwire_wait(&a.rq));
    verify(&a, "iallreduce outstanding across a blocking alltoall");
}

/* ---- the call returns before the others have called (MPI_THREAD_MULTIPLE) ---------------- */

static void returns_early(void)
{
    if (size < 2 || !multiple)
        return;
    /* A timeout: a call that blocks instead of returning fails within it, never hangs. */
    gpuwire_config cfg;
    EXPECT_OK(gpuwire_config_init(&cfg));
    cfg.timeout_seconds = 30.0;
    gpuwire_comm tc = GPUWIRE_COMM_NULL;
    EXPECT_OK(gpuwire_comm_world(&cfg, &tc));
    for (int k = 0; k < 3; k++) {
        int kind = k == 0 ? K_BARRIER : k == 1 ? K_ALLREDUCE_SUM : K_BCAST;
        char what[128];
        snprintf(what, sizeof what, "i%s started on rank 0 before the others", kind_name[kind]);
        op_t o;
        setup(&o, kind, 100000, 0);
        int token = 0;
        if (rank == 0) {
            double t0 = MPI_Wtime();
            EXPECT_OK(start(&o, tc, 1));
            double dt = MPI_Wtime() - t0;
            EXPECT(dt < 10.0);
            int32_t flag = -1;
            EXPECT_OK(gpuwire_test(&o.rq, &flag));
            gwt_checks++;
            if (flag != 0)
                gwt_fail(__FILE__, __LINE__, what, "gpuwire_test says it completed before the other ranks called");
            for (int q = 1; q < size; q++)
                MPI_Send(&token, 1, MPI_INT, q, 99, MPI_COMM_WORLD);
        } else {
            MPI_Recv(&token, 1, MPI_INT, 0, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            EXPECT_OK(start(&o, tc, 1));
        }
        EXPECT_OK(gpuwire_wait(&o.rq));
        verify(&o, what);
    }
    EXPECT_OK(gpuwire_comm_async_error(tc));
    EXPECT_OK(gpuwire_comm_free(tc));
}

/* An iallreduce the other ranks never join: its wait (or, below MPI_THREAD_MULTIPLE, its call)
 * returns TIMEOUT within the communicator's timeout of 0.75 s, never hangs. (That communicator is
 * then broken on rank 0 and left to gpuwire_finalize.) */
static void pending_timeout(void)
{
    if (size < 2)
        return;
    gpuwire_config cfg;
    EXPECT_OK(gpuwire_config_init(&cfg));
    cfg.timeout_seconds = 0.75;
    gpuwire_comm tc = GPUWIRE_COMM_NULL;
    EXPECT_OK(gpuwire_comm_world(&cfg, &tc));
    if (rank == 0) {
        gpuwire_buffer b = balloc(5, GPUWIRE_INT32);
        gpuwire_request q = GPUWIRE_REQUEST_NULL;
        double t0 = MPI_Wtime();
        EXPECT_STATUS(call_then_wait(gpuwire_iallreduce(tc, b, b, GPUWIRE_SUM, NULL, &q), &q), GPUWIRE_ERROR_TIMEOUT);
        double dt = MPI_Wtime() - t0;
        EXPECT(dt >= 0.5 && dt < 30.0);
        bfree(b);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Ranks that disagree on a collective on a communicator with a timeout (its MPI collectives are
 * nonblocking and tested in a loop): rank 0 passes fewer elements than the others, then one rank
 * skips a bcast that the others make before a barrier. Every rank returns an error or, where its
 * MPI sees nothing wrong, success or TIMEOUT: never is the job killed (Open MPI raised the error
 * of a nonblocking collective's request on MPI_COMM_WORLD's fatal handler, not on gpuwire's
 * communicator), and MPI_COMM_WORLD's handler is the program's afterwards. */
static int survivable(gpuwire_status st)
{
    return st == GPUWIRE_SUCCESS || st == GPUWIRE_ERROR_MPI || st == GPUWIRE_ERROR_TIMEOUT || st == GPUWIRE_ERROR_COMM_BROKEN;
}

static void mismatch_timeout(void)
{
    if (size < 2)
        return;
    for (int k = 0; k < 3; k++) {
        gpuwire_config cfg;
        EXPECT_OK(gpuwire_config_init(&cfg));
        cfg.timeout_seconds = 0.75;
        gpuwire_comm tc = GPUWIRE_COMM_NULL;
        EXPECT_OK(gpuwire_comm_world(&cfg, &tc));
        gpuwire_status st;
        if (k < 2) {
            int64_t n = rank == 0 ? 8 : 64;
            gpuwire_buffer s = balloc(n, GPUWIRE_INT32), r = balloc(n, GPUWIRE_INT32);
            memset(bptr(s), 0, (size_t)n * 4);
            if (k == 0) {
                st = gpuwire_allreduce(tc, s, r, GPUWIRE_SUM, NULL);
            } else {
                gpuwire_request q = GPUWIRE_REQUEST_NULL;
                st = call_then_wait(gpuwire_iallreduce(tc, s, r, GPUWIRE_SUM, NULL, &q), &q);
            }
            gwt_checks++;
            if (!survivable(st))
                gwt_fail(__FILE__, __LINE__, "allreduce with counts that differ across ranks", gpuwire_status_string(st));
            /* gpuwire keeps their memory while MPI may still write it (an abandoned request). */
            bfree(s);
            bfree(r);
        } else {
            gpuwire_buffer b = balloc(1 << 18, GPUWIRE_INT32);
            memset(bptr(b), 0, (size_t)4 << 18);
            st = GPUWIRE_SUCCESS;
            if (rank != 1)
                st = gpuwire_bcast(tc, b, 0, NULL);
            if (st == GPUWIRE_SUCCESS)
                st = gpuwire_barrier(tc, NULL);
            gwt_checks++;
            if (!survivable(st))
                gwt_fail(__FILE__, __LINE__, "rank 1 skips a bcast before a barrier", gpuwire_status_string(st));
            bfree(b);
        }
        MPI_Errhandler h;
        MPI_Comm_get_errhandler(MPI_COMM_WORLD, &h);
        gwt_checks++;
        if (h != MPI_ERRORS_ARE_FATAL)
            gwt_fail(__FILE__, __LINE__, "MPI_COMM_WORLD's error handler after a failed collective", "not MPI_ERRORS_ARE_FATAL any more");
        MPI_Errhandler_free(&h);
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

/* A collective the last rank joins after the others timed out: MPI completes the abandoned
 * requests later (here in a barrier), writing the early ranks' receive buffers, which the program
 * has freed meanwhile. gpuwire keeps that memory (it freed it before: a later allocation got the
 * late peer's data, and MPI_Finalize aborted on a corrupted heap). Blocking and nonblocking. */
static void late_peer(void)
{
    if (size < 2)
        return;
    const int64_t n = 4096;
    for (int k = 0; k < 2; k++) {
        gpuwire_config cfg;
        EXPECT_OK(gpuwire_config_init(&cfg));
        cfg.timeout_seconds = 0.3;
        gpuwire_comm tc = GPUWIRE_COMM_NULL;
        EXPECT_OK(gpuwire_comm_world(&cfg, &tc));
        gpuwire_buffer s = balloc(n, GPUWIRE_INT32), r = balloc(n, GPUWIRE_INT32);
        for (int64_t i = 0; i < n; i++)
            ((int32_t *)bptr(s))[i] = 1;
        if (rank < size - 1) {
            gpuwire_request q = GPUWIRE_REQUEST_NULL;
            gpuwire_status st = k == 0 ? gpuwire_allreduce(tc, s, r, GPUWIRE_SUM, NULL)
                                       : call_then_wait(gpuwire_iallreduce(tc, s, r, GPUWIRE_SUM, NULL, &q), &q);
            gwt_checks++;
            if (st != GPUWIRE_ERROR_TIMEOUT)
                gwt_fail(__FILE__, __LINE__, "an allreduce the last rank joins late", gpuwire_status_string(st));
            bfree(s);
            bfree(r);
            /* Fresh memory of the same size, likely where the freed buffers were. */
            gpuwire_buffer fresh[8];
            for (int j = 0; j < 8; j++) {
                fresh[j] = balloc(n, GPUWIRE_INT32);
                memset(bptr(fresh[j]), 0x5a, (size_t)n * 4);
            }
            MPI_Barrier(MPI_COMM_WORLD);
            MPI_Barrier(MPI_COMM_WORLD);
            for (int j = 0; j < 8; j++) {
                EXPECT(all_bytes(bptr(fresh[j]), (size_t)n * 4, 0x5a));
                bfree(fresh[j]);
            }
        } else {
            MPI_Barrier(MPI_COMM_WORLD);
            EXPECT_OK(gpuwire_allreduce(tc, s, r, GPUWIRE_SUM, NULL));
            EXPECT(((int32_t *)bptr(r))[n - 1] == size);
            MPI_Barrier(MPI_COMM_WORLD);
            bfree(s);
            bfree(r);
            EXPECT_OK(gpuwire_comm_free(tc));
        }
    }
}

/* ---- what a pending nonblocking collective must not hold up ---------------------------------
 * A pending iallreduce, then gpuwire_comm_dup and gpuwire_comm_split on the same communicator
 * from the same thread: they run after it (in call order), and it completes with its value.
 * gpuwire_comm_dup used to run beside it on the engine: one of the two was refused as "a
 * collective already in progress on another thread" (or the ranks hung). */
static void create_after_pending(void)
{
    for (int k = 0; k < 2; k++) {
        gpuwire_buffer x = balloc(1, GPUWIRE_INT32), y = balloc(1, GPUWIRE_INT32);
        *(int32_t *)bptr(x) = rank + 1;
        *(int32_t *)bptr(y) = -1;
        gpuwire_request q = GPUWIRE_REQUEST_NULL;
        EXPECT_OK(gpuwire_iallreduce(world, x, y, GPUWIRE_SUM, NULL, &q));
        gpuwire_comm d = GPUWIRE_COMM_NULL;
        if (k == 0)
            EXPECT_OK(gpuwire_comm_dup(world, &d));
        else
            EXPECT_OK(gpuwire_comm_split(world, 0, rank, &d));
        EXPECT_OK(gpuwire_wait(&q));
        EXPECT(*(int32_t *)bptr(y) == size * (size + 1) / 2);
        EXPECT_OK(gpuwire_comm_free(d));
        bfree(x);
        bfree(y);
    }
}

/* Point-to-point on host memory is not held behind a pending collective (MPI matches them
 * apart): rank 0 starts an iallreduce and then sends to rank 1, which receives before it starts
 * its iallreduce. Valid MPI; it timed out (hung without a timeout) while the send waited behind
 * the allreduce on the engine. Then the same with threads: one thread's iallreduce and wait in a
 * loop, another thread's sendrecv ring on the same communicator. */
static gpuwire_comm shared;
static int thread_failures;

static void *sendrecv_ring(void *arg)
{
    (void)arg;
    gpuwire_buffer s = balloc(4, GPUWIRE_INT32), r = balloc(4, GPUWIRE_INT32);
    for (int it = 0; it < 40; it++) {
        int32_t *sp = bptr(s), *rp = bptr(r);
        for (int i = 0; i < 4; i++)
            sp[i] = 1000 * rank + it + i;
        gpuwire_status st = gpuwire_sendrecv(shared, s, next, 5, r, prev, 5, NULL);
        if (st != GPUWIRE_SUCCESS || rp[3] != 1000 * prev + it + 3) {
            __atomic_add_fetch(&thread_failures, 1, __ATOMIC_RELAXED);
            break;
        }
    }
    bfree(s);
    bfree(r);
    return NULL;
}

static void p2p_beside_pending(void)
{
    if (size < 2 || !multiple)
        return;
    gpuwire_config cfg;
    EXPECT_OK(gpuwire_config_init(&cfg));
    cfg.timeout_seconds = 5.0;
    EXPECT_OK(gpuwire_comm_world(&cfg, &shared));
    gpuwire_buffer x = balloc(1, GPUWIRE_INT32), y = balloc(1, GPUWIRE_INT32), m = balloc(8, GPUWIRE_INT32);
    *(int32_t *)bptr(x) = 2;
    gpuwire_request q = GPUWIRE_REQUEST_NULL;
    if (rank == 0) {
        EXPECT_OK(gpuwire_iallreduce(shared, x, y, GPUWIRE_SUM, NULL, &q));
        for (int i = 0; i < 8; i++)
            ((int32_t *)bptr(m))[i] = 70 + i;
        EXPECT_OK(gpuwire_send(shared, m, 1, 9, NULL));
    } else {
        if (rank == 1) {
            EXPECT_OK(gpuwire_recv(shared, m, 0, 9, NULL));
            EXPECT(((int32_t *)bptr(m))[7] == 77);
        }
        EXPECT_OK(gpuwire_iallreduce(shared, x, y, GPUWIRE_SUM, NULL, &q));
    }
    EXPECT_OK(gpuwire_wait(&q));
    EXPECT(*(int32_t *)bptr(y) == 2 * size);

    pthread_t t;
    thread_failures = 0;
    EXPECT(pthread_create(&t, NULL, sendrecv_ring, NULL) == 0);
    for (int it = 0; it < 40; it++) {
        *(int32_t *)bptr(x) = it;
        EXPECT_OK(gpuwire_iallreduce(shared, x, y, GPUWIRE_SUM, NULL, &q));
        EXPECT_OK(gpuwire_wait(&q));
        EXPECT(*(int32_t *)bptr(y) == it * size);
    }
    pthread_join(t, NULL);
    gwt_checks++;
    if (thread_failures)
        gwt_fail(__FILE__, __LINE__, "a sendrecv ring beside another thread's iallreduce loop", "failed or received wrong data");
    bfree(x);
    bfree(y);
    bfree(m);
    EXPECT_OK(gpuwire_comm_free(shared));
}

/* ---- argument errors from the call itself ------------------------------------------------- */

/* The nonblocking call fails with `code`, writes no request, and the blocking form with the
 * same arguments returns the same code. */
#define EXPECT_BOTH(icall, bcall, code)                                                 \
    do {                                                                                \
        rq.h = 77;                                                                      \
        EXPECT_STATUS(icall, code);                                                     \
        gwt_checks++;                                                                   \
        if (rq.h != 77)                                                                 \
            gwt_fail(__FILE__, __LINE__, #icall " wrote a request although it failed", NULL); \
        EXPECT_STATUS(bcall, code);                                                     \
    } while (0)

static void argument_errors(void)
{
    const int64_t n = 6;
    gpuwire_request rq = {77};
    gpuwire_buffer s = balloc(n, GPUWIRE_INT32), r = balloc(n, GPUWIRE_INT32);
    gpuwire_buffer r1 = balloc(n + 1, GPUWIRE_INT32), f = balloc(n, GPUWIRE_FLOAT64);
    gpuwire_buffer big = balloc(n * size, GPUWIRE_INT32), big1 = balloc(n * size + 1, GPUWIRE_INT32);
    gpuwire_buffer stale = balloc(n, GPUWIRE_INT32);
    bfree(stale);
    memset(bptr(r), FILL, (size_t)n * 4);
    memset(bptr(r1), FILL, (size_t)(n + 1) * 4);
    memset(bptr(big), FILL, (size_t)(n * size) * 4);
    memset(bptr(big1), FILL, (size_t)(n * size + 1) * 4);

    /* Counts and datatypes that disagree on this rank. */
    EXPECT_BOTH(gpuwire_iallreduce(world, s, r1, GPUWIRE_SUM, NULL, &rq), gpuwire_allreduce(world, s, r1, GPUWIRE_SUM, NULL), GPUWIRE_ERROR_COUNT_MISMATCH);
    EXPECT_BOTH(gpuwire_iallreduce(world, s, f, GPUWIRE_SUM, NULL, &rq), gpuwire_allreduce(world, s, f, GPUWIRE_SUM, NULL), GPUWIRE_ERROR_DTYPE_MISMATCH);
    /* (A root's own receive count is checked on one rank only: the others would start the
     * collective; on one rank it is an error of every rank.) */
    if (size == 1) {
        EXPECT_BOTH(gpuwire_ireduce(world, s, r1, GPUWIRE_SUM, 0, NULL, &rq), gpuwire_reduce(world, s, r1, GPUWIRE_SUM, 0, NULL), GPUWIRE_ERROR_COUNT_MISMATCH);
        EXPECT_BOTH(gpuwire_igather(world, s, big1, 0, NULL, &rq), gpuwire_gather(world, s, big1, 0, NULL), GPUWIRE_ERROR_COUNT_MISMATCH);
        EXPECT_BOTH(gpuwire_iscatter(world, big1, r, 0, NULL, &rq), gpuwire_scatter(world, big1, r, 0, NULL), GPUWIRE_ERROR_COUNT_MISMATCH);
    }
    EXPECT_BOTH(gpuwire_iallgather(world, s, big1, NULL, &rq), gpuwire_allgather(world, s, big1, NULL), GPUWIRE_ERROR_COUNT_MISMATCH);
    EXPECT_BOTH(gpuwire_ireduce_scatter(world, big1, r, GPUWIRE_SUM, NULL, &rq), gpuwire_reduce_scatter(world, big1, r, GPUWIRE_SUM, NULL), GPUWIRE_ERROR_COUNT_MISMATCH);
    EXPECT_BOTH(gpuwire_ialltoall(world, big, big1, NULL, &rq), gpuwire_alltoall(world, big, big1, NULL), GPUWIRE_ERROR_COUNT_MISMATCH);
    if (size > 1) /* not a multiple of the number of ranks */
        EXPECT_BOTH(gpuwire_ialltoall(world, big1, big1, NULL, &rq), gpuwire_alltoall(world, big1, big1, NULL), GPUWIRE_ERROR_COUNT_MISMATCH);
    /* Bad roots. */
    int bad_roots[] = {size, -1, size + 5, GPUWIRE_PROC_NULL};
    for (size_t j = 0; j < sizeof bad_roots / sizeof bad_roots[0]; j++) {
        int root = bad_roots[j];
        EXPECT_BOTH(gpuwire_ibcast(world, s, root, NULL, &rq), gpuwire_bcast(world, s, root, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_BOTH(gpuwire_ireduce(world, s, r, GPUWIRE_SUM, root, NULL, &rq), gpuwire_reduce(world, s, r, GPUWIRE_SUM, root, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_BOTH(gpuwire_igather(world, s, big, root, NULL, &rq), gpuwire_gather(world, s, big, root, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_BOTH(gpuwire_iscatter(world, big, r, root, NULL, &rq), gpuwire_scatter(world, big, r, root, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
    }
    /* Ops. */
    EXPECT_BOTH(gpuwire_iallreduce(world, s, r, 99, NULL, &rq), gpuwire_allreduce(world, s, r, 99, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_BOTH(gpuwire_iallreduce(world, f, f, GPUWIRE_BAND, NULL, &rq), gpuwire_allreduce(world, f, f, GPUWIRE_BAND, NULL), GPUWIRE_ERROR_UNSUPPORTED_OP);
    EXPECT_BOTH(gpuwire_ireduce_scatter(world, big, r, -3, NULL, &rq), gpuwire_reduce_scatter(world, big, r, -3, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
    /* Handles. */
    EXPECT_BOTH(gpuwire_iallreduce(GPUWIRE_COMM_NULL, s, r, GPUWIRE_SUM, NULL, &rq), gpuwire_allreduce(GPUWIRE_COMM_NULL, s, r, GPUWIRE_SUM, NULL), GPUWIRE_ERROR_INVALID_HANDLE);
    EXPECT_BOTH(gpuwire_ibarrier(GPUWIRE_COMM_NULL, NULL, &rq), gpuwire_barrier(GPUWIRE_COMM_NULL, NULL), GPUWIRE_ERROR_INVALID_HANDLE);
    EXPECT_BOTH(gpuwire_iallreduce(world, stale, r, GPUWIRE_SUM, NULL, &rq), gpuwire_allreduce(world, stale, r, GPUWIRE_SUM, NULL), GPUWIRE_ERROR_INVALID_HANDLE);
    EXPECT_BOTH(gpuwire_ibcast(world, stale, 0, NULL, &rq), gpuwire_bcast(world, stale, 0, NULL), GPUWIRE_ERROR_INVALID_HANDLE);
    EXPECT_BOTH(gpuwire_iallgather(world, s, GPUWIRE_BUFFER_NULL, NULL, &rq), gpuwire_allgather(world, s, GPUWIRE_BUFFER_NULL, NULL), GPUWIRE_ERROR_INVALID_HANDLE);
    /* allgatherv counts: negative; not this rank's send count. */
    int64_t counts[MAXP];
    for (int q = 0; q < size; q++)
        counts[q] = n;
    counts[size - 1] = -1;
    EXPECT_BOTH(gpuwire_iallgatherv(world, s, big, counts, NULL, &rq), gpuwire_allgatherv(world, s, big, counts, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
    for (int q = 0; q < size; q++)
        counts[q] = n;
    counts[rank] = n + 1;
    EXPECT_BOTH(gpuwire_iallgatherv(world, s, big, counts, NULL, &rq), gpuwire_allgatherv(world, s, big, counts, NULL), GPUWIRE_ERROR_COUNT_MISMATCH);
    /* A NULL request pointer: nothing started (the blocking form with these arguments works). */
    EXPECT_STATUS(gpuwire_ibarrier(world, NULL, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_ibcast(world, s, 0, NULL, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_ireduce(world, s, r, GPUWIRE_SUM, 0, NULL, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_iallreduce(world, s, r, GPUWIRE_SUM, NULL, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_iallgather(world, s, big, NULL, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_iallgatherv(world, s, big, NULL, NULL, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_ireduce_scatter(world, big, r, GPUWIRE_SUM, NULL, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_ialltoall(world, big, big, NULL, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_igather(world, s, big, 0, NULL, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_iscatter(world, big, r, 0, NULL, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    /* Nothing was received, and the communicator is in step: a collective works. */
    EXPECT(all_bytes(bptr(r), (size_t)n * 4, FILL));
    EXPECT(all_bytes(bptr(r1), (size_t)(n + 1) * 4, FILL));
    EXPECT(all_bytes(bptr(big1), (size_t)(n * size + 1) * 4, FILL));
    EXPECT(all_bytes(bptr(big), (size_t)(n * size) * 4, FILL));
    op_t o;
    setup(&o, K_ALLGATHER, n, 0);
    EXPECT_OK(start(&o, world, 1));
    EXPECT_OK(gpuwire_wait(&o.rq));
    verify(&o, "iallgather after the refused calls");
    /* The asynchronous-error query: nothing failed after its call returned. */
    EXPECT_OK(gpuwire_comm_async_error(world));
    EXPECT_STATUS(gpuwire_comm_async_error(GPUWIRE_COMM_NULL), GPUWIRE_ERROR_INVALID_HANDLE);
    bfree(s), bfree(r), bfree(r1), bfree(f), bfree(big), bfree(big1);
}

/* ---- checking mode ------------------------------------------------------------------------ */

/* On every rank, the call or its wait returns `code` (any failure when code is -1). */
static void expect_everywhere(gpuwire_status st, gpuwire_request *rq, int code, const char *what)
{
    gpuwire_request before = *rq;
    gpuwire_status got = call_then_wait(st, rq);
    if (st != GPUWIRE_SUCCESS)
        EXPECT(rq->h == before.h); /* a failed call writes no request */
    gwt_checks++;
    if ((code == -1 && got == GPUWIRE_SUCCESS) || (code != -1 && got != (gpuwire_status)code)) {
        char d[1400], msg[1024];
        if (gpuwire_last_error(msg, sizeof msg) != GPUWIRE_SUCCESS)
            msg[0] = '\0';
        snprintf(d, sizeof d, "%s: call %d, call or wait %d (%s), expected %d", what, (int)st, (int)got, msg, code);
        gwt_fail(__FILE__, __LINE__, "checking mode", d);
    }
    if (rq->h != 0 && rq->h != 77)
        (void)gpuwire_wait(rq);
}

static void in_step(gpuwire_comm cc, const char *what)
{
    op_t o;
    setup(&o, K_ALLREDUCE_SUM, 9, 0);
    EXPECT_OK(start(&o, cc, 1));
    EXPECT_OK(gpuwire_wait(&o.rq));
    verify(&o, what);
}

static void checking_on(gpuwire_comm cc)
{
    gpuwire_buffer a5 = balloc(5, GPUWIRE_INT32), a6 = balloc(6, GPUWIRE_INT32), f5 = balloc(5, GPUWIRE_FLOAT64);
    gpuwire_request rq;
    int z = rank == 0;
    in_step(cc, "checking mode: a good iallreduce");
    if (size < 2) {
        bfree(a5), bfree(a6), bfree(f5);
        return;
    }
    memset(bptr(a6), FILL, 24);
    rq.h = 77;
    expect_everywhere(gpuwire_iallreduce(cc, z ? a5 : a6, z ? a5 : a6, GPUWIRE_SUM, NULL, &rq), &rq, GPUWIRE_ERROR_COUNT_MISMATCH, "iallreduce count 5 on rank 0, 6 elsewhere");
    if (!z)
        EXPECT(all_bytes(bptr(a6), 24, FILL));
    in_step(cc, "after a count mismatch");
    rq.h = 77;
    expect_everywhere(gpuwire_iallreduce(cc, z ? f5 : a5, z ? f5 : a5, GPUWIRE_SUM, NULL, &rq), &rq, GPUWIRE_ERROR_DTYPE_MISMATCH, "iallreduce float64 on rank 0, int32 elsewhere");
    rq.h = 77;
    expect_everywhere(gpuwire_iallreduce(cc, a5, a5, z ? GPUWIRE_MAX : GPUWIRE_SUM, NULL, &rq), &rq, GPUWIRE_ERROR_OP_MISMATCH, "iallreduce MAX on rank 0, SUM elsewhere");
    rq.h = 77;
    expect_everywhere(gpuwire_ibcast(cc, a5, z ? 0 : size - 1, NULL, &rq), &rq, GPUWIRE_ERROR_ROOT_MISMATCH, "ibcast root 0 on rank 0, the last elsewhere");
    rq.h = 77;
    expect_everywhere(z ? gpuwire_iallreduce(cc, a5, a5, GPUWIRE_SUM, NULL, &rq) : gpuwire_ibcast(cc, a5, 0, NULL, &rq), &rq, -1, "iallreduce on rank 0, ibcast elsewhere");
    in_step(cc, "after another collective");
    /* One rank's bad argument: its own error from the call, REMOTE_ARGUMENT on the others. */
    rq.h = 77;
    gpuwire_status st = gpuwire_iallreduce(cc, a5, a5, z ? 99 : GPUWIRE_SUM, NULL, &rq);
    if (z) {
        EXPECT(st == GPUWIRE_ERROR_INVALID_ARGUMENT && rq.h == 77);
    } else {
        expect_everywhere(st, &rq, GPUWIRE_ERROR_REMOTE_ARGUMENT, "iallreduce with rank 0's op 99");
    }
    /* The nonblocking form on rank 0, the blocking form elsewhere, counts differing. */
    rq.h = 77;
    if (z)
        expect_everywhere(gpuwire_iallreduce(cc, a5, a5, GPUWIRE_SUM, NULL, &rq), &rq, GPUWIRE_ERROR_COUNT_MISMATCH, "iallreduce of 5 on rank 0 against allreduce of 6");
    else
        EXPECT_STATUS(gpuwire_allreduce(cc, a6, a6, GPUWIRE_SUM, NULL), GPUWIRE_ERROR_COUNT_MISMATCH);
    /* A bad one and a good one outstanding; the good one waited first. */
    op_t good;
    gpuwire_request bad = GPUWIRE_REQUEST_NULL;
    gpuwire_status bst = gpuwire_iallreduce(cc, z ? a5 : a6, z ? a5 : a6, GPUWIRE_SUM, NULL, &bad);
    setup(&good, K_ALLGATHER, 33, 0);
    EXPECT_OK(start(&good, cc, 1));
    EXPECT_OK(gpuwire_wait(&good.rq));
    verify(&good, "a good iallgather outstanding beside a mismatched iallreduce");
    expect_everywhere(bst, &bad, GPUWIRE_ERROR_COUNT_MISMATCH, "the mismatched iallreduce, waited second");
    /* A mismatch inside a group: reported by group_end or by the wait, on every rank. */
    rq = GPUWIRE_REQUEST_NULL;
    EXPECT_OK(gpuwire_group_start());
    gpuwire_status gs = gpuwire_iallreduce(cc, z ? a5 : a6, z ? a5 : a6, GPUWIRE_SUM, NULL, &rq);
    gpuwire_status ge = gpuwire_group_end();
    gpuwire_status gw = rq.h != 0 ? gpuwire_wait(&rq) : GPUWIRE_SUCCESS;
    gwt_checks++;
    if (gs == GPUWIRE_SUCCESS && ge == GPUWIRE_SUCCESS && gw == GPUWIRE_SUCCESS)
        gwt_fail(__FILE__, __LINE__, "checking mode in a group", "a count mismatch of an iallreduce inside a group was not reported (call, group_end, wait all succeeded)");
    in_step(cc, "after a mismatch in a group");
    /* A good collective, then one whose op code rank 0 cannot resolve, in one group: rank 0's
     * call fails at once, but the other ranks learn of it in the group's call order, so the
     * first one still runs on every rank and the second is done on none. (The refused call's
     * agreement was once made at its call, ahead of the group: it met the other ranks' first
     * allreduce, and their second one then reduced with rank 0's first.) */
    {
        int32_t *x = bptr(a5), *y = bptr(a6);
        for (int i = 0; i < 5; i++)
            x[i] = rank + i;
        memset(y, FILL, 24);
        EXPECT_OK(gpuwire_group_start());
        EXPECT_OK(gpuwire_allreduce(cc, a5, a5, GPUWIRE_SUM, NULL));
        EXPECT_STATUS(gpuwire_allreduce(cc, a6, a6, z ? 99 : GPUWIRE_SUM, NULL), z ? GPUWIRE_ERROR_INVALID_ARGUMENT : GPUWIRE_SUCCESS);
        EXPECT_STATUS(gpuwire_group_end(), z ? GPUWIRE_ERROR_INVALID_ARGUMENT : GPUWIRE_ERROR_REMOTE_ARGUMENT);
        int good = 1;
        for (int i = 0; i < 5; i++)
            good &= x[i] == size * (size - 1) / 2 + size * i;
        gwt_checks++;
        if (!good)
            gwt_fail(__FILE__, __LINE__, "checking mode in a group", "a good allreduce before rank 0's refused one in the same group gave a wrong result");
        EXPECT(all_bytes(y, 24, FILL));
    }
    in_step(cc, "after a refused call in a group");
    /* Rank 0's iallreduce with op code 99 returns at once (its agreement, which tells the
     * others, runs on the engine): rank 0 then sends to rank 1, which receives before its own
     * iallreduce. (The agreement was once made at the call, which then waited for rank 1,
     * itself waiting for the message: a hang, here a timeout.) Below MPI_THREAD_MULTIPLE a
     * nonblocking collective completes at its call, so this order deadlocks there as documented. */
    if (multiple) {
        rq = GPUWIRE_REQUEST_NULL;
        if (z) {
            rq.h = 77;
            EXPECT_STATUS(gpuwire_iallreduce(cc, a5, a5, 99, NULL, &rq), GPUWIRE_ERROR_INVALID_ARGUMENT);
            EXPECT(rq.h == 77);
            EXPECT_OK(gpuwire_send(cc, a6, 1, 5, NULL));
        } else {
            if (rank == 1)
                EXPECT_OK(gpuwire_recv(cc, a6, 0, 5, NULL));
            expect_everywhere(gpuwire_iallreduce(cc, a5, a5, GPUWIRE_SUM, NULL, &rq), &rq, GPUWIRE_ERROR_REMOTE_ARGUMENT, "iallreduce against rank 0's op 99, rank 0 sending to rank 1 after its call");
        }
        in_step(cc, "after a refused nonblocking call followed by a send");
    }
    bfree(a5), bfree(a6), bfree(f5);
}

static void checking(void)
{
    gpuwire_config cfg;
    EXPECT_OK(gpuwire_config_init(&cfg));
    cfg.check = 1;
    cfg.timeout_seconds = 60.0; /* a rank left waiting fails within it instead of hanging */
    gpuwire_comm cc = GPUWIRE_COMM_NULL;
    EXPECT_OK(gpuwire_comm_world(&cfg, &cc));
    checking_on(cc);
    EXPECT_OK(gpuwire_comm_free(cc));
    /* GPUWIRE_CHECK=1 in the environment, read by gpuwire_comm_world(NULL). */
    setenv("GPUWIRE_CHECK", "1", 1);
    setenv("GPUWIRE_TIMEOUT", "60", 1);
    cc = GPUWIRE_COMM_NULL;
    EXPECT_OK(gpuwire_comm_world(NULL, &cc));
    unsetenv("GPUWIRE_CHECK");
    unsetenv("GPUWIRE_TIMEOUT");
    checking_on(cc);
    EXPECT_OK(gpuwire_comm_free(cc));
}

/* ---- groups ------------------------------------------------------------------------------- */

static int peer_to(int r, int j) { return size == 1 ? r : (r + 1 + j % (size - 1)) % size; }
static int peer_from(int r, int j) { return size == 1 ? r : (r + size - 1 - j % (size - 1)) % size; }

/* K blocking sends of n int32 to different peers, then K blocking receives, in one group:
 * send j goes to peer_to(rank, j) with tag j; receive j comes from peer_from(rank, j). Without
 * the group the first send waits for a receive that its peer posts only after its own sends. */
static void group_sends_then_recvs(gpuwire_comm c, int k, int64_t n, int nest)
{
    char what[128];
    snprintf(what, sizeof what, "group of %d sends then %d receives of %lld int32%s", k, k, (long long)n, nest ? ", nested" : "");
    gpuwire_buffer *sb = calloc((size_t)k, sizeof *sb), *rb = calloc((size_t)k, sizeof *rb);
    EXPECT(sb && rb);
    for (int j = 0; j < k; j++) {
        sb[j] = balloc(n, GPUWIRE_INT32);
        rb[j] = balloc(n, GPUWIRE_INT32);
        int32_t *p = bptr(sb[j]);
        for (int64_t i = 0; i < n; i++)
            p[i] = w(rank, j, i);
        memset(bptr(rb[j]), FILL, (size_t)n * 4);
    }
    EXPECT_OK(gpuwire_group_start());
    if (nest)
        EXPECT_OK(gpuwire_group_start());
    for (int j = 0; j < k; j++)
        EXPECT_OK(gpuwire_send(c, sb[j], peer_to(rank, j), j, NULL));
    if (nest) {
        EXPECT_OK(gpuwire_group_end()); /* not the outermost: starts nothing */
        EXPECT_OK(gpuwire_group_start());
        EXPECT_OK(gpuwire_group_start());
    }
    for (int j = 0; j < k; j++)
        EXPECT_OK(gpuwire_recv(c, rb[j], peer_from(rank, j), j, NULL));
    if (nest) {
        EXPECT_OK(gpuwire_group_end());
        EXPECT_OK(gpuwire_group_end());
    }
    EXPECT_OK(gpuwire_group_end());
    for (int j = 0; j < k; j++) {
        int from = peer_from(rank, j);
        EXPECT_SEQ((int32_t *)bptr(rb[j]), n, w(from, j, i));
        bfree(sb[j]);
        bfree(rb[j]);
    }
    free(sb);
    free(rb);
}

/* isend / irecv, sendrecv, a blocking and a nonblocking collective, all in one group. */
static void group_mixed(gpuwire_comm c)
{
    const char *what = "group of irecv, isend, sendrecv, allreduce, iallgather, ibcast";
    const int64_t n = 1 << 18;
    gpuwire_buffer s = balloc(n, GPUWIRE_INT32), r = balloc(n, GPUWIRE_INT32);
    gpuwire_buffer s2 = balloc(n, GPUWIRE_INT32), r2 = balloc(n, GPUWIRE_INT32);
    int32_t *sp = bptr(s), *s2p = bptr(s2);
    for (int64_t i = 0; i < n; i++)
        sp[i] = w(rank, 1, i), s2p[i] = w(rank, 2, i);
    memset(bptr(r), FILL, (size_t)n * 4);
    memset(bptr(r2), FILL, (size_t)n * 4);
    op_t ar, ag, bc;
    setup(&ar, K_ALLREDUCE_SUM, 1000, 0);
    setup(&ag, K_ALLGATHER, 100, 0);
    setup(&bc, K_BCAST, 77, size - 1);
    gpuwire_request rq[4] = {GPUWIRE_REQUEST_NULL, GPUWIRE_REQUEST_NULL, GPUWIRE_REQUEST_NULL, GPUWIRE_REQUEST_NULL};
    EXPECT_OK(gpuwire_group_start());
    EXPECT_OK(gpuwire_irecv(c, r, prev, 31, NULL, &rq[0]));
    EXPECT_OK(start(&ar, c, 0)); /* blocking form: returns at once, result at group_end */
    EXPECT_OK(gpuwire_sendrecv(c, s2, prev, 32, r2, next, 32, NULL));
    EXPECT_OK(start(&ag, c, 1));
    EXPECT_OK(gpuwire_isend(c, s, next, 31, NULL, &rq[1]));
    EXPECT_OK(start(&bc, c, 1));
    rq[2] = ag.rq, rq[3] = bc.rq;
    ag.rq = bc.rq = GPUWIRE_REQUEST_NULL;
    EXPECT_OK(gpuwire_group_end());
    /* Host memory: the blocking forms' data is in place when group_end returns. */
    verify(&ar, "allreduce (blocking form) in a group");
    EXPECT_SEQ((int32_t *)bptr(r2), n, w(next, 2, i));
    EXPECT_OK(gpuwire_waitall(4, rq));
    EXPECT_SEQ((int32_t *)bptr(r), n, w(prev, 1, i));
    verify(&ag, "iallgather in a group");
    verify(&bc, "ibcast in a group");
    bfree(s), bfree(r), bfree(s2), bfree(r2);
}

/* A periodic halo exchange: rows of m int32, interior of `rows` rows between two ghost rows;
 * in one group: blocking send of the first row to the left, of the last to the right, then the
 * receives of both ghosts. Three steps, the interior changing each step. */
static void group_halo(gpuwire_comm c)
{
    const int64_t m = 1 << 18, rows = 4;
    gpuwire_buffer all = balloc(m * (rows + 2), GPUWIRE_INT32);
    gpuwire_buffer ghost_lo = bview(all, 0, m), first = bview(all, m, m);
    gpuwire_buffer last = bview(all, m * rows, m), ghost_hi = bview(all, m * (rows + 1), m);
    int32_t *p = bptr(all);
    char what[96];
    for (int step = 0; step < 3; step++) {
        snprintf(what, sizeof what, "halo exchange ring in one group, step %d", step);
        for (int64_t row = 1; row <= rows; row++)
            for (int64_t i = 0; i < m; i++)
                p[row * m + i] = w(rank, (int)row, i) + step;
        memset(p, FILL, (size_t)m * 4);
        memset(p + m * (rows + 1), FILL, (size_t)m * 4);
        EXPECT_OK(gpuwire_group_start());
        EXPECT_OK(gpuwire_send(c, first, prev, 1, NULL));  /* goes left */
        EXPECT_OK(gpuwire_send(c, last, next, 2, NULL));   /* goes right */
        EXPECT_OK(gpuwire_recv(c, ghost_hi, next, 1, NULL));
        EXPECT_OK(gpuwire_recv(c, ghost_lo, prev, 2, NULL));
        EXPECT_OK(gpuwire_group_end());
        EXPECT_SEQ(p, m, w(prev, (int)rows, i) + step);
        EXPECT_SEQ(p + m * (rows + 1), m, w(next, 1, i) + step);
    }
    bfree(ghost_lo), bfree(first), bfree(last), bfree(ghost_hi), bfree(all);
}

static void group_errors(gpuwire_comm c)
{
    /* group_end without a start; an empty group; one end too many. */
    EXPECT_STATUS(gpuwire_group_end(), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_OK(gpuwire_group_start());
    EXPECT_OK(gpuwire_group_end());
    EXPECT_STATUS(gpuwire_group_end(), GPUWIRE_ERROR_INVALID_ARGUMENT);

    /* wait / test on a request of a group that has not ended: INVALID_ARGUMENT (waiting would
     * never return), and the request is left as it was; the operation still runs at group_end,
     * and for host memory its data is in place when group_end returns. */
    const int64_t n = 1 << 18;
    gpuwire_buffer s = balloc(n, GPUWIRE_INT32), r = balloc(n, GPUWIRE_INT32);
    int32_t *sp = bptr(s);
    for (int64_t i = 0; i < n; i++)
        sp[i] = w(rank, 3, i);
    memset(bptr(r), FILL, (size_t)n * 4);
    gpuwire_request rr = GPUWIRE_REQUEST_NULL, sr = GPUWIRE_REQUEST_NULL;
    op_t ar;
    setup(&ar, K_ALLREDUCE_SUM, 10, 0);
    /* A receive posted before the group whose message is sent after it. */
    gpuwire_buffer ps = balloc(4, GPUWIRE_INT32), pr = balloc(4, GPUWIRE_INT32);
    for (int64_t i = 0; i < 4; i++)
        ((int32_t *)bptr(ps))[i] = w(rank, 5, i);
    memset(bptr(pr), FILL, 16);
    gpuwire_request pre = GPUWIRE_REQUEST_NULL;
    EXPECT_OK(gpuwire_irecv(c, pr, prev, 42, NULL, &pre));
    EXPECT_OK(gpuwire_group_start());
    EXPECT_OK(gpuwire_irecv(c, r, prev, 41, NULL, &rr));
    gpuwire_request keep = rr;
    EXPECT_STATUS(gpuwire_wait(&rr), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("group");
    EXPECT(rr.h == keep.h);
    EXPECT_OK(start(&ar, c, 1));
    keep = ar.rq;
    int32_t flag = -1;
    EXPECT_STATUS(gpuwire_test(&ar.rq, &flag), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT(flag == -1);
    EXPECT(ar.rq.h == keep.h);
    /* waitall of the group's request and the earlier receive (its message comes after the
     * group): refused before anything is waited for (waiting for the receive first never
     * returned), the array left as it was, in either order. */
    gpuwire_request both[2] = {ar.rq, pre};
    EXPECT_STATUS(gpuwire_waitall(2, both), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("group");
    EXPECT(both[0].h == ar.rq.h && both[1].h == pre.h);
    gpuwire_request swapped[2] = {pre, ar.rq};
    EXPECT_STATUS(gpuwire_waitall(2, swapped), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT(swapped[0].h == pre.h && swapped[1].h == ar.rq.h);
    /* gpuwire_request_free too (it set the handle to NULL while the operation still ran). */
    EXPECT_STATUS(gpuwire_request_free(&rr), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT(rr.h != 0);
    /* An argument error inside the group comes back at once; the op is not added. */
    gpuwire_request bad = {77};
    EXPECT_STATUS(gpuwire_isend(c, s, -5, 41, NULL, &bad), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT(bad.h == 77);
    EXPECT_STATUS(gpuwire_send(c, s, size, 41, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(gpuwire_ibcast(c, s, size, NULL, &bad), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(gpuwire_allreduce(c, s, r, 99, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT(bad.h == 77);
    EXPECT_OK(gpuwire_isend(c, s, next, 41, NULL, &sr));
    EXPECT_OK(gpuwire_group_end());
    const char *what = "irecv in a group whose wait was refused before group_end";
    EXPECT_SEQ((int32_t *)bptr(r), n, w(prev, 3, i)); /* host memory: in place at group_end */
    EXPECT_OK(gpuwire_wait(&rr));
    EXPECT_OK(gpuwire_wait(&sr));
    EXPECT_OK(gpuwire_wait(&ar.rq));
    verify(&ar, "iallreduce in a group whose test was refused before group_end");
    EXPECT_OK(gpuwire_send(c, ps, next, 42, NULL));
    EXPECT_OK(gpuwire_wait(&pre));
    what = "irecv posted before the group, its waitall refused inside it";
    EXPECT_SEQ((int32_t *)bptr(pr), 4, w(prev, 5, i));
    bfree(ps), bfree(pr);
    /* The communicator is in step. */
    in_step(c, "after the group with refused calls");
    bfree(s), bfree(r);
}

/* Groups are per thread: another thread's blocking allreduce (on its own communicator) while
 * this thread is inside a group is not deferred into that group. */
static gpuwire_comm thread_comm;
static gpuwire_status thread_status = GPUWIRE_ERROR_INTERNAL;
static int32_t thread_result = -1;

static void *allreduce_thread(void *arg)
{
    (void)arg;
    int32_t x = 1;
    gpuwire_buffer b = GPUWIRE_BUFFER_NULL;
    if (gpuwire_buffer_wrap(&x, 1, GPUWIRE_INT32, GPUWIRE_SPACE_HOST, &b) == GPUWIRE_SUCCESS) {
        thread_status = gpuwire_allreduce(thread_comm, b, b, GPUWIRE_SUM, NULL);
        thread_result = x;
        (void)gpuwire_buffer_free(b);
    }
    return NULL;
}

static void group_per_thread(void)
{
    if (!multiple)
        return;
    EXPECT_OK(gpuwire_comm_dup(world, &thread_comm));
    EXPECT_OK(gpuwire_group_start());
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, allreduce_thread, NULL) == 0);
    EXPECT(pthread_join(t, NULL) == 0);
    EXPECT_OK(gpuwire_group_end());
    EXPECT(thread_status == GPUWIRE_SUCCESS && thread_result == size);
    EXPECT_OK(gpuwire_comm_free(thread_comm));
}

/* A thread that exits inside a group: its isend never starts, and the request it made fails
 * (INVALID_ARGUMENT naming the exit) when the main thread waits for it, instead of being refused
 * for good; the buffer is not sent (the peer's receive below gets the next message). */
static gpuwire_request exited_request; /* zero: the NULL handles */
static gpuwire_status exited_status = GPUWIRE_ERROR_INTERNAL;
static gpuwire_buffer exited_buffer;

static void *exit_inside_group(void *arg)
{
    (void)arg;
    if (gpuwire_group_start() == GPUWIRE_SUCCESS)
        exited_status = gpuwire_isend(thread_comm, exited_buffer, next, 61, NULL, &exited_request);
    return NULL; /* no gpuwire_group_end */
}

static void group_thread_exits(void)
{
    if (!multiple)
        return;
    EXPECT_OK(gpuwire_comm_dup(world, &thread_comm));
    exited_buffer = balloc(3, GPUWIRE_INT32);
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, exit_inside_group, NULL) == 0);
    EXPECT(pthread_join(t, NULL) == 0);
    EXPECT_OK(exited_status);
    EXPECT_STATUS(gpuwire_wait(&exited_request), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("exited");
    EXPECT(exited_request.h == 0);
    /* Nothing was sent: the next message with that tag is this one. */
    int32_t *v = bptr(exited_buffer);
    v[0] = v[1] = v[2] = 1000 + rank;
    gpuwire_buffer got = balloc(3, GPUWIRE_INT32);
    EXPECT_OK(gpuwire_sendrecv(thread_comm, exited_buffer, next, 61, got, prev, 61, NULL));
    EXPECT(((int32_t *)bptr(got))[0] == 1000 + prev);
    bfree(got), bfree(exited_buffer);
    EXPECT_OK(gpuwire_comm_free(thread_comm));
}

/* group_end returns the first error of the group's operations: a receive of 6 elements for a
 * message of 5 (every rank), COUNT_MISMATCH, the receive buffer untouched. */
static void group_first_error(gpuwire_comm c)
{
    gpuwire_buffer s5 = balloc(5, GPUWIRE_INT32), r6 = balloc(6, GPUWIRE_INT32);
    memset(bptr(r6), FILL, 24);
    EXPECT_OK(gpuwire_group_start());
    EXPECT_OK(gpuwire_send(c, s5, next, 51, NULL));
    EXPECT_OK(gpuwire_recv(c, r6, prev, 51, NULL));
    EXPECT_STATUS(gpuwire_group_end(), GPUWIRE_ERROR_COUNT_MISMATCH);
    EXPECT(all_bytes(bptr(r6), 24, FILL));
    in_step(c, "after a group whose receive failed");
    bfree(s5), bfree(r6);
}

/* Operations of one group whose buffers overlap where one writes are refused at their call
 * (INVALID_ARGUMENT, as gpuwire_sendrecv's overlapping buffers): a receive into the buffer a
 * send of the group reads was accepted, and above the eager size one rank kept its own data
 * (its receive landed before the send read the buffer). The group's other operations still
 * run, with their data right. Sends reading the same buffer, a send to GPUWIRE_PROC_NULL and
 * disjoint views of one allocation are fine. */
static void group_overlap(gpuwire_comm c)
{
    const int64_t n = 1 << 20; /* 4 MiB: above every eager size */
    gpuwire_buffer a = balloc(2 * n, GPUWIRE_INT32), r = balloc(n, GPUWIRE_INT32), r2 = balloc(n, GPUWIRE_INT32);
    gpuwire_buffer lo = bview(a, 0, n), mid = bview(a, n / 2, n), hi = bview(a, n, n);
    int32_t *p = bptr(a);
    const char *what;
    for (int64_t i = 0; i < 2 * n; i++)
        p[i] = w(rank, 6, i);
    memset(bptr(r), FILL, (size_t)n * 4);
    memset(bptr(r2), FILL, (size_t)n * 4);
    int32_t depth = -1;
    EXPECT_OK(gpuwire_group_depth(&depth));
    EXPECT(depth == 0);
    EXPECT_STATUS(gpuwire_group_depth(NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_OK(gpuwire_group_start());
    EXPECT_OK(gpuwire_group_depth(&depth));
    EXPECT(depth == 1);
    EXPECT_OK(gpuwire_send(c, lo, next, 61, NULL));
    EXPECT_OK(gpuwire_send(c, lo, prev, 62, NULL)); /* reads the same buffer: fine */
    EXPECT_STATUS(gpuwire_recv(c, lo, prev, 61, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("overlap");
    EXPECT_STATUS(gpuwire_recv(c, mid, prev, 61, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT); /* a view half over it */
    gpuwire_request q = {77};
    EXPECT_STATUS(gpuwire_irecv(c, a, prev, 61, NULL, &q), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT(q.h == 77);
    EXPECT_OK(gpuwire_recv(c, r, prev, 61, NULL));
    EXPECT_STATUS(gpuwire_recv(c, r, next, 62, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT); /* two receives into r */
    EXPECT_OK(gpuwire_recv(c, r2, next, 62, NULL));
    EXPECT_STATUS(gpuwire_send(c, r2, next, 63, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT); /* reads what a receive writes */
    EXPECT_OK(gpuwire_send(c, hi, GPUWIRE_PROC_NULL, 64, NULL));
    EXPECT_OK(gpuwire_recv(c, hi, GPUWIRE_PROC_NULL, 64, NULL)); /* PROC_NULL touches nothing */
    EXPECT_OK(gpuwire_group_end());
    what = "the group's receive beside refused overlapping ones";
    EXPECT_SEQ((int32_t *)bptr(r), n, w(prev, 6, i));
    what = "the group's second receive";
    EXPECT_SEQ((int32_t *)bptr(r2), n, w(next, 6, i));
    what = "the group's send buffer, not overwritten";
    EXPECT_SEQ(p, 2 * n, w(rank, 6, i));
    /* A collective of the group writing what a send of it reads: refused on every rank alike. */
    EXPECT_OK(gpuwire_group_start());
    EXPECT_OK(gpuwire_send(c, hi, next, 65, NULL));
    EXPECT_STATUS(gpuwire_allreduce(c, lo, hi, GPUWIRE_SUM, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("overlap");
    EXPECT_OK(gpuwire_recv(c, r, prev, 65, NULL));
    EXPECT_OK(gpuwire_group_end());
    what = "the group's receive beside a refused allreduce";
    EXPECT_SEQ((int32_t *)bptr(r), n, w(prev, 6, n + i));

    /* Interleaved strided views of one matrix (m rows of 4 columns): a send of column 1 and a
     * receive into column 0 (above the last row) share no element, so both run. A receive from GPUWIRE_PROC_NULL
     * into column 2 beside a receive into the (contiguous) last row, which meets column 2 there,
     * writes nothing: the column's view was copied out and back at the group's end, over what
     * the other receive wrote. */
    const int64_t m = 4096;
    gpuwire_buffer mat = balloc(4 * m, GPUWIRE_INT32), col0, col1, col2, rowl, four = balloc(4, GPUWIRE_INT32);
    EXPECT_OK(gpuwire_buffer_view_strided(mat, 0, m - 1, 1, 4, &col0)); /* above the last row */
    EXPECT_OK(gpuwire_buffer_view_strided(mat, 1, m - 1, 1, 4, &col1));
    EXPECT_OK(gpuwire_buffer_view_strided(mat, 2, m, 1, 4, &col2));
    EXPECT_OK(gpuwire_buffer_view(mat, 4 * (m - 1), 4, &rowl));
    int32_t *mq = bptr(mat), *fq = bptr(four);
    for (int64_t k = 0; k < 4; k++)
        fq[k] = w(rank, 8, k);
    for (int order = 0; order < 2; order++) {
        for (int64_t k = 0; k < 4 * m; k++)
            mq[k] = k % 4 == 1 ? w(rank, 7, k / 4) : -1;
        EXPECT_OK(gpuwire_group_start());
        if (order == 0)
            EXPECT_OK(gpuwire_recv(c, col2, GPUWIRE_PROC_NULL, 66, NULL));
        EXPECT_OK(gpuwire_recv(c, col0, prev, 66, NULL));
        EXPECT_OK(gpuwire_recv(c, rowl, prev, 67, NULL));
        if (order == 1)
            EXPECT_OK(gpuwire_recv(c, col2, GPUWIRE_PROC_NULL, 66, NULL));
        EXPECT_OK(gpuwire_send(c, col1, next, 66, NULL));
        EXPECT_OK(gpuwire_send(c, four, next, 67, NULL));
        EXPECT_OK(gpuwire_group_end());
        int good = 1;
        for (int64_t k = 0; k < m - 1 && good; k++)
            good = mq[4 * k] == w(prev, 7, k) && mq[4 * k + 1] == w(rank, 7, k) && mq[4 * k + 2] == -1 && mq[4 * k + 3] == -1;
        for (int64_t k = 0; k < 4 && good; k++)
            good = mq[4 * (m - 1) + k] == w(prev, 8, k);
        EXPECT(good);
        if (!good)
            fprintf(stderr, "rank %d (order %d): last row %d %d %d %d, want %d %d %d %d\n", rank, order, mq[4 * (m - 1)], mq[4 * (m - 1) + 1],
                    mq[4 * (m - 1) + 2], mq[4 * (m - 1) + 3], w(prev, 8, 0), w(prev, 8, 1), w(prev, 8, 2), w(prev, 8, 3));
    }
    bfree(col2), bfree(rowl), bfree(four);

    /* A group of more than 32 operations (compared through ordered maps of ranges): 40
     * receives into the even chunks of `rb`, 40 sends of the chunks of `sb`; then a receive
     * into chunk 4 again, one across chunks 9 and 10, a send of chunk 6 of `rb` and a receive
     * into a strided view over chunks 1, 4 and 7 are refused;
     * a second send of chunk 3 of `sb` (reads only) and a send of the odd chunks of `rb` (a
     * strided view interleaved with the received chunks, no element shared) run. */
    {
        const int64_t K = 1024, NC = 40;
        gpuwire_buffer sb = balloc(NC * K, GPUWIRE_INT32), rb = balloc(2 * NC * K, GPUWIRE_INT32);
        gpuwire_buffer extra = balloc(K, GPUWIRE_INT32), odd_in = balloc(NC * K, GPUWIRE_INT32);
        gpuwire_buffer sv[40], rv[40], bad1, bad2, bad3, bad4, s3, odd;
        int32_t *sp = bptr(sb), *rp = bptr(rb);
        for (int64_t k = 0; k < NC * K; k++)
            sp[k] = w(rank, 9, k);
        for (int64_t k = 0; k < 2 * NC * K; k++)
            rp[k] = k / K % 2 ? w(rank, 10, k) : -1;
        for (int j = 0; j < NC; j++) {
            EXPECT_OK(gpuwire_buffer_view(sb, j * K, K, &sv[j]));
            EXPECT_OK(gpuwire_buffer_view(rb, 2 * j * K, K, &rv[j]));
        }
        EXPECT_OK(gpuwire_buffer_view(rb, 4 * K, K, &bad1));
        EXPECT_OK(gpuwire_buffer_view(rb, 9 * K + K / 2, K, &bad2));
        EXPECT_OK(gpuwire_buffer_view(rb, 6 * K, 8, &bad3));
        EXPECT_OK(gpuwire_buffer_view_strided(rb, K, 3, 8, 3 * K, &bad4)); /* chunks 1, 4, 7 */
        EXPECT_OK(gpuwire_buffer_view(sb, 3 * K, K, &s3));
        EXPECT_OK(gpuwire_buffer_view_strided(rb, K, NC, K, 2 * K, &odd));
        EXPECT_OK(gpuwire_group_start());
        for (int j = 0; j < NC; j++) {
            EXPECT_OK(gpuwire_recv(c, rv[j], prev, 100 + j, NULL));
            EXPECT_OK(gpuwire_send(c, sv[j], next, 100 + j, NULL));
        }
        EXPECT_STATUS(gpuwire_recv(c, bad1, prev, 98, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_LAST_ERROR_HAS("overlap");
        EXPECT_STATUS(gpuwire_recv(c, bad2, prev, 98, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_STATUS(gpuwire_send(c, bad3, next, 98, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_STATUS(gpuwire_recv(c, bad4, prev, 98, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_OK(gpuwire_send(c, s3, next, 99, NULL));
        EXPECT_OK(gpuwire_recv(c, extra, prev, 99, NULL));
        EXPECT_OK(gpuwire_send(c, odd, next, 97, NULL));
        EXPECT_OK(gpuwire_recv(c, odd_in, prev, 97, NULL));
        EXPECT_OK(gpuwire_group_end());
        int good = 1;
        for (int64_t k = 0; k < 2 * NC * K && good; k++)
            good = rp[k] == (k / K % 2 ? w(rank, 10, k) : w(prev, 9, k / (2 * K) * K + k % K));
        EXPECT(good);
        what = "a second send of a chunk, in a large group";
        EXPECT_SEQ((int32_t *)bptr(extra), K, w(prev, 9, 3 * K + i));
        what = "a strided send interleaved with the group's receives";
        EXPECT_SEQ((int32_t *)bptr(odd_in), NC * K, w(prev, 10, (2 * (i / K) + 1) * K + i % K));
        for (int j = 0; j < NC; j++)
            bfree(sv[j]), bfree(rv[j]);
        bfree(bad1), bfree(bad2), bfree(bad3), bfree(bad4), bfree(s3), bfree(odd), bfree(sb), bfree(rb), bfree(extra), bfree(odd_in);
    }
    /* A large group of column views (compared as rectangles of a grid whose rows are the
     * matrix's: src/group/overlap.rs): receives into the top halves of columns 0..39 of an R x C
     * matrix, beside their sends. Then, run: a receive into the bottom half of column 0 (same
     * column, other rows), into all of column 41, into a piece of the last row, a send of the
     * even rows of column 45 (another stride, over that piece of the last row); refused: a
     * receive into rows H - 1 and H of column 5, into a piece of row 7 across column 3, a
     * send of the even rows of column 10, and a receive into runs of two elements from the
     * last column of row H (each run continues in column 0 of the next row: only those meet). */
    {
        enum { R = 64, C = 48, H = R / 2, NC = 40 };
        gpuwire_buffer cm = balloc(R * C, GPUWIRE_INT32), cs = balloc(NC * H, GPUWIRE_INT32), top[NC], src[NC];
        gpuwire_buffer s12 = balloc(H, GPUWIRE_INT32), s13 = balloc(6, GPUWIRE_INT32), s15 = balloc(R, GPUWIRE_INT32);
        gpuwire_buffer r45 = balloc(R / 2, GPUWIRE_INT32), bottom0, col41, lastrow, even45, straddle, rowbit, odd10, wrap;
        int32_t *mp = bptr(cm), *sp = bptr(cs), *p12 = bptr(s12), *p13 = bptr(s13), *p15 = bptr(s15);
        for (int64_t k = 0; k < R * C; k++)
            mp[k] = k % C >= 42 ? w(rank, 14, k / C) : -1;
        for (int64_t k = 0; k < NC * H; k++)
            sp[k] = w(rank, 11, k);
        for (int64_t k = 0; k < R; k++) {
            if (k < H)
                p12[k] = w(rank, 12, k);
            if (k < 6)
                p13[k] = w(rank, 13, k);
            p15[k] = w(rank, 15, k);
        }
        for (int j = 0; j < NC; j++) {
            EXPECT_OK(gpuwire_buffer_view_strided(cm, j, H, 1, C, &top[j]));
            src[j] = bview(cs, j * H, H);
        }
        EXPECT_OK(gpuwire_buffer_view_strided(cm, H * C, H, 1, C, &bottom0));
        EXPECT_OK(gpuwire_buffer_view_strided(cm, 41, R, 1, C, &col41));
        lastrow = bview(cm, (R - 1) * C + 42, 6);
        EXPECT_OK(gpuwire_buffer_view_strided(cm, 45, R / 2, 1, 2 * C, &even45));
        EXPECT_OK(gpuwire_buffer_view_strided(cm, (H - 1) * C + 5, 2, 1, C, &straddle));
        rowbit = bview(cm, 7 * C + 2, 3);
        EXPECT_OK(gpuwire_buffer_view_strided(cm, 10, H / 2, 1, 2 * C, &odd10));
        EXPECT_OK(gpuwire_buffer_view_strided(cm, H * C + C - 1, 3, 2, C, &wrap));
        EXPECT_OK(gpuwire_group_start());
        for (int j = 0; j < NC; j++) {
            EXPECT_OK(gpuwire_recv(c, top[j], prev, 200 + j, NULL));
            EXPECT_OK(gpuwire_send(c, src[j], next, 200 + j, NULL));
        }
        EXPECT_OK(gpuwire_recv(c, bottom0, prev, 190, NULL));
        EXPECT_OK(gpuwire_send(c, s12, next, 190, NULL));
        EXPECT_OK(gpuwire_recv(c, col41, prev, 191, NULL));
        EXPECT_OK(gpuwire_send(c, s15, next, 191, NULL));
        EXPECT_OK(gpuwire_recv(c, lastrow, prev, 192, NULL));
        EXPECT_OK(gpuwire_send(c, s13, next, 192, NULL));
        EXPECT_OK(gpuwire_send(c, even45, next, 193, NULL));
        EXPECT_OK(gpuwire_recv(c, r45, prev, 193, NULL));
        EXPECT_STATUS(gpuwire_recv(c, straddle, prev, 194, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_LAST_ERROR_HAS("overlap");
        EXPECT_STATUS(gpuwire_recv(c, rowbit, prev, 194, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_STATUS(gpuwire_send(c, odd10, next, 194, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_STATUS(gpuwire_recv(c, wrap, prev, 194, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_OK(gpuwire_group_end());
        int good = 1;
        for (int64_t i = 0; i < R && good; i++)
            for (int64_t j = 0; j < C && good; j++) {
                int32_t want = j >= 42 ? w(rank, 14, i) : -1;
                if (i < H && j < NC)
                    want = w(prev, 11, j * H + i);
                else if (j == 0)
                    want = w(prev, 12, i - H);
                else if (j == 41)
                    want = w(prev, 15, i);
                else if (i == R - 1 && j >= 42)
                    want = w(prev, 13, j - 42);
                good = mp[i * C + j] == want;
                if (!good)
                    fprintf(stderr, "rank %d: column views, element (%lld, %lld) = %d, want %d\n", rank, (long long)i, (long long)j, mp[i * C + j], want);
            }
        EXPECT(good);
        what = "the even rows of a column, sent beside a receive into the last row";
        EXPECT_SEQ((int32_t *)bptr(r45), R / 2, w(prev, 14, 2 * i));
        for (int j = 0; j < NC; j++)
            bfree(top[j]), bfree(src[j]);
        bfree(bottom0), bfree(col41), bfree(lastrow), bfree(even45), bfree(straddle), bfree(rowbit), bfree(odd10), bfree(wrap);
        bfree(cm), bfree(cs), bfree(s12), bfree(s13), bfree(s15), bfree(r45);
    }
    bfree(col0), bfree(col1), bfree(mat);
    in_step(c, "after groups with overlapping buffers refused");
    bfree(lo), bfree(mid), bfree(hi), bfree(a), bfree(r), bfree(r2);
}

static void groups(void)
{
    /* A timeout: a group that deadlocks fails within it instead of hanging the test. */
    gpuwire_config cfg;
    EXPECT_OK(gpuwire_config_init(&cfg));
    cfg.timeout_seconds = 60.0;
    gpuwire_comm c = GPUWIRE_COMM_NULL;
    EXPECT_OK(gpuwire_comm_world(&cfg, &c));
    int ks[] = {2, 4, 8};
    for (size_t j = 0; j < 3; j++)
        group_sends_then_recvs(c, ks[j], ks[j] == 8 ? (1 << 18) : (1 << 20), 0); /* 1 or 4 MiB */
    if (size > 2)
        group_sends_then_recvs(c, size - 1, 1 << 20, 0); /* every other rank once */
    group_sends_then_recvs(c, 4, 1 << 20, 1);
    group_mixed(c);
    group_halo(c);
    group_overlap(c);
    group_errors(c);
    group_first_error(c);
    group_per_thread();
    group_thread_exits();
    /* A group on the world communicator (no timeout) too. */
    group_sends_then_recvs(world, 2, 1 << 20, 0);
    EXPECT_OK(gpuwire_comm_async_error(c));
    EXPECT_OK(gpuwire_comm_free(c));
}

/* The nonblocking v-collectives, all outstanding at once (see the file's comment). */
static void v_collectives(void)
{
    int64_t sc[MAXP], sd[MAXP], rc[MAXP], rd[MAXP], gc[MAXP], tri = (int64_t)size * (size + 1) / 2;
    int64_t off = (int64_t)rank * (rank + 1) / 2, at = 0;
    int root = size - 1, j, k, good = 1;
    gpuwire_request rq[5];
    for (j = 0; j < size; j++) {
        sc[j] = rank + 1, sd[j] = (int64_t)j * (rank + 1), rc[j] = j + 1, gc[j] = j + 1;
        rd[j] = at + 1; /* a gap of one element before each block */
        at += j + 2;
    }
    gpuwire_buffer a_s = balloc(sc[0] * size, GPUWIRE_INT32), a_r = balloc(at, GPUWIRE_INT32);
    gpuwire_buffer g_s = balloc(rank + 1, GPUWIRE_INT32), g_r = balloc(tri, GPUWIRE_INT32);
    gpuwire_buffer s_r = balloc(rank + 1, GPUWIRE_INT32), rs_s = balloc(tri, GPUWIRE_INT32);
    gpuwire_buffer rs_r = balloc(rank + 1, GPUWIRE_INT32), b_s = balloc(2 * size, GPUWIRE_INT32);
    gpuwire_buffer b_r = balloc(2, GPUWIRE_INT32), b_r2 = balloc(2, GPUWIRE_INT32);
    int32_t *as = bptr(a_s), *ar = bptr(a_r), *gs = bptr(g_s), *gr = bptr(g_r), *sr = bptr(s_r);
    int32_t *rss = bptr(rs_s), *rsr = bptr(rs_r), *bs = bptr(b_s), *br = bptr(b_r), *br2 = bptr(b_r2);
    for (j = 0; j < size; j++)
        for (k = 0; k <= rank; k++)
            as[j * (rank + 1) + k] = 100 * rank + j;
    for (k = 0; k < at; k++)
        ar[k] = -1;
    for (k = 0; k <= rank; k++)
        gs[k] = 7 * rank, sr[k] = -1, rsr[k] = -1;
    for (k = 0; k < tri; k++)
        gr[k] = -1, rss[k] = (int32_t)k + rank;
    if (rank == root) /* the scatterv source: rank j's block of j + 1 elements holds 5 j */
        for (j = 0, at = 0; j < size; at += j + 1, j++)
            for (k = 0; k <= j; k++)
                gr[at + k] = 5 * j;
    for (k = 0; k < 2 * size; k++)
        bs[k] = k;
    br[0] = br[1] = br2[0] = br2[1] = -1;
    EXPECT_OK(gpuwire_ialltoallv(world, a_s, sc, sd, a_r, rc, rd, NULL, &rq[0]));
    EXPECT_OK(gpuwire_iscatterv(world, rank == root ? g_r : GPUWIRE_BUFFER_NULL, gc, NULL, s_r, root, NULL, &rq[1]));
    EXPECT_OK(gpuwire_ireduce_scatterv(world, rs_s, rs_r, gc, GPUWIRE_SUM, NULL, &rq[2]));
    EXPECT_OK(gpuwire_ireduce_scatter_block(world, b_s, b_r, GPUWIRE_SUM, NULL, &rq[3]));
    for (j = 0; j < size; j++) /* copied at the call */
        sc[j] = sd[j] = rc[j] = rd[j] = gc[j] = -5;
    EXPECT_OK(gpuwire_waitall(4, rq));
    for (j = 0; j < size; j++)
        gc[j] = j + 1;
    /* igatherv after iscatterv read g_r: it overwrites g_r at the root. */
    EXPECT_OK(gpuwire_igatherv(world, g_s, rank == root ? g_r : GPUWIRE_BUFFER_NULL, gc, NULL, root, NULL, &rq[4]));
    EXPECT_OK(gpuwire_reduce_scatter_block(world, b_s, b_r2, GPUWIRE_SUM, NULL));
    EXPECT_OK(gpuwire_wait(&rq[4]));
    for (j = 0, at = 0; j < size; at += j + 2, j++) {
        good = good && ar[at] == -1;
        for (k = 0; k <= j; k++)
            good = good && ar[at + 1 + k] == 100 * j + rank;
    }
    EXPECT(good);
    for (k = 0; k <= rank; k++)
        EXPECT(sr[k] == 5 * rank && rsr[k] == size * (int32_t)(off + k) + size * (size - 1) / 2);
    if (rank == root)
        for (j = 0, at = 0; j < size; at += j + 1, j++)
            for (k = 0; k <= j; k++)
                EXPECT(gr[at + k] == 7 * j);
    EXPECT(br[0] == 2 * rank * size && br[1] == (2 * rank + 1) * size);
    EXPECT(br2[0] == 2 * rank * size && br2[1] == (2 * rank + 1) * size);
    gpuwire_buffer all[] = {a_s, a_r, g_s, g_r, s_r, rs_s, rs_r, b_s, b_r, b_r2};
    for (j = 0; j < 10; j++)
        bfree(all[j]);
}

int main(int argc, char **argv)
{
    int provided = 0, funneled = 0, expected;
    const char *only = "";
    if (argc < 2) {
        fprintf(stderr, "usage: test_nbc EXPECTED_RANKS [funneled] [part]\n");
        return 2;
    }
    expected = atoi(argv[1]);
    for (int j = 2; j < argc; j++) {
        if (!strcmp(argv[j], "funneled"))
            funneled = 1;
        else
            only = argv[j];
    }
    MPI_Init_thread(&argc, &argv, funneled ? MPI_THREAD_FUNNELED : MPI_THREAD_MULTIPLE, &provided);
    multiple = provided == MPI_THREAD_MULTIPLE;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gwt_rank = rank;
    if (size != expected || size > MAXP) {
        fprintf(stderr, "test_nbc: launched on %d ranks, expected %d (wrong launcher?)\n", size, expected);
        MPI_Finalize();
        return 1;
    }
    next = (rank + 1) % size;
    prev = (rank + size - 1) % size;
    EXPECT_OK(gpuwire_init());
    EXPECT_OK(gpuwire_comm_create((int32_t)MPI_Comm_c2f(MPI_COMM_WORLD), NULL, &world));

    if (!*only || !strcmp(only, "coll"))
        each_collective();
    if (!*only || !strcmp(only, "many"))
        many_outstanding();
    if (!*only || !strcmp(only, "mixed"))
        mixed_forms();
    if (!*only || !strcmp(only, "early"))
        returns_early();
    if (!*only || !strcmp(only, "timeout")) {
        pending_timeout();
        mismatch_timeout();
        late_peer();
    }
    if (!*only || !strcmp(only, "order")) {
        create_after_pending();
        p2p_beside_pending();
    }
    if (!*only || !strcmp(only, "args"))
        argument_errors();
    if (!*only || !strcmp(only, "check"))
        checking();
    if (!*only || !strcmp(only, "group"))
        groups();
    if (!*only || !strcmp(only, "vcoll"))
        v_collectives();
    if (!strcmp(only, "free")) /* run on its own: see free_while_pending */
        free_while_pending();

    EXPECT_OK(gpuwire_comm_free(world));
    EXPECT_OK(gpuwire_finalize());
    long failed = gwt_failures(), all = 0, checks = gwt_checks, all_checks = 0;
    MPI_Reduce(&failed, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&checks, &all_checks, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        if (all == 0)
            printf("test_nbc: PASS (%d ranks, %s, %ld checks)\n", size, multiple ? "MPI_THREAD_MULTIPLE" : "below MPI_THREAD_MULTIPLE", all_checks);
        else
            printf("test_nbc: FAIL (%ld of %ld checks failed)\n", all, all_checks);
    }
    MPI_Finalize();
    return all == 0 ? 0 : 1;
}
