/*
 * test_p2p.c: point-to-point ranks and message sizes (issue 17, items 1, 2 and 16).
 *
 * - GPUWIRE_PROC_NULL is no MPI's constant; the MPI_PROC_NULL of the MPI this program was
 *   compiled with is accepted (nothing moves); MPI_ANY_SOURCE / MPI_ANY_TAG (either MPI's values:
 *   every other negative rank or tag) are refused with GPUWIRE_ERROR_INVALID_ARGUMENT, buffer
 *   untouched.
 * - A receive takes exactly its buffer's count: a shorter or longer message is
 *   GPUWIRE_ERROR_COUNT_MISMATCH, below and above the eager sizes, to another rank and to
 *   oneself, blocking, nonblocking (posted before and after the message arrived) and sendrecv;
 *   nothing is written to the buffer, nor to a guard region after it (the receive is a view of a
 *   larger allocation); the next exact message then arrives intact.
 * - Checking mode (config check = 1): a datatype or count mismatch fails on both sides, also
 *   when the bytes are not a whole number of the receiver's elements.
 *
 * Ring: rank r sends to r+1 and receives from r-1 (mod P; oneself on 1 rank).
 * Usage: mpirun -n P test_p2p [ranks|sizes|mistyped|checking|pending]   Prints "test_p2p: PASS (...)" from rank 0.
 */
#define _POSIX_C_SOURCE 200809L

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gwtest.h"

#define GUARD 4096
#define FILL 0x7e

static int rank, size, next, prev;

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

static int all_bytes(const void *p, size_t n, unsigned char v)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != v)
            return 0;
    return 1;
}

static void fill_seq(int32_t *p, int64_t n, int32_t base)
{
    for (int64_t i = 0; i < n; i++)
        p[i] = base + (int32_t)i;
}

static int is_seq(const int32_t *p, int64_t n, int32_t base)
{
    for (int64_t i = 0; i < n; i++)
        if (p[i] != base + (int32_t)i)
            return 0;
    return 1;
}

/* ---- item 1: ranks and tags -------------------------------------------------------------- */

static void test_ranks(gpuwire_comm comm)
{
    /* The header's constant collides with no constant of this MPI. */
    EXPECT(GPUWIRE_PROC_NULL != MPI_ANY_SOURCE);
    EXPECT(GPUWIRE_PROC_NULL != MPI_PROC_NULL);
    EXPECT(GPUWIRE_PROC_NULL != MPI_ROOT);
    EXPECT(GPUWIRE_PROC_NULL != MPI_UNDEFINED);

    gpuwire_buffer b = balloc(4, GPUWIRE_INT32), b2 = balloc(4, GPUWIRE_INT32);
    int32_t *p = bptr(b);
    gpuwire_request rq = {77};

    /* MPI_ANY_SOURCE, and every other negative rank that is not a PROC_NULL (Open MPI's and
     * MPICH's wildcards, MPI_ROOT): refused, nothing received. */
    int bad[] = {MPI_ANY_SOURCE, -1, -2, -3, -4, -5, -999, -1001};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int r = bad[i];
        if (r == MPI_PROC_NULL)
            continue;
        memset(p, FILL, 16);
        EXPECT_STATUS(gpuwire_recv(comm, b, r, 0, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_LAST_ERROR_HAS("wildcards are not supported yet");
        EXPECT(all_bytes(p, 16, FILL));
        EXPECT_UNTOUCHED_H(gpuwire_irecv(comm, b, r, 0, NULL, &rq), GPUWIRE_ERROR_INVALID_ARGUMENT, rq, 77u);
        EXPECT_STATUS(gpuwire_send(comm, b, r, 0, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_UNTOUCHED_H(gpuwire_isend(comm, b, r, 0, NULL, &rq), GPUWIRE_ERROR_INVALID_ARGUMENT, rq, 77u);
        EXPECT_STATUS(gpuwire_sendrecv(comm, b, GPUWIRE_PROC_NULL, 0, b, r, 0, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_STATUS(gpuwire_sendrecv(comm, b, r, 0, b, GPUWIRE_PROC_NULL, 0, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
    }
    /* MPI_ANY_TAG (and any negative tag). */
    EXPECT_STATUS(gpuwire_recv(comm, b, rank, MPI_ANY_TAG, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("wildcard tags are not supported yet");
    EXPECT_UNTOUCHED_H(gpuwire_irecv(comm, b, rank, MPI_ANY_TAG, NULL, &rq), GPUWIRE_ERROR_INVALID_ARGUMENT, rq, 77u);
    EXPECT_STATUS(gpuwire_send(comm, b, rank, -2, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);

    /* MPI_PROC_NULL of this MPI and GPUWIRE_PROC_NULL: accepted, nothing moves. */
    int nulls[] = {MPI_PROC_NULL, GPUWIRE_PROC_NULL};
    for (int i = 0; i < 2; i++) {
        int r = nulls[i];
        memset(p, FILL, 16);
        EXPECT_OK(gpuwire_recv(comm, b, r, 0, NULL));
        EXPECT_OK(gpuwire_send(comm, b, r, 0, NULL));
        EXPECT(all_bytes(p, 16, FILL));
        EXPECT_OK(gpuwire_irecv(comm, b, r, 3, NULL, &rq));
        EXPECT_OK(gpuwire_wait(&rq));
        EXPECT(rq.h == 0);
        EXPECT_OK(gpuwire_isend(comm, b, r, 3, NULL, &rq));
        EXPECT_OK(gpuwire_wait(&rq));
        EXPECT_OK(gpuwire_sendrecv(comm, b2, r, 0, b, r, 0, NULL));
        EXPECT(all_bytes(p, 16, FILL));
    }
    /* Mixed: a real exchange around the ring with the null rank on one side. */
    gpuwire_buffer s = balloc(4, GPUWIRE_INT32);
    fill_seq(bptr(s), 4, 100 * rank);
    memset(p, FILL, 16);
    EXPECT_OK(gpuwire_irecv(comm, b, prev, 5, NULL, &rq));
    EXPECT_OK(gpuwire_sendrecv(comm, s, next, 5, b2, MPI_PROC_NULL, 5, NULL));
    EXPECT_OK(gpuwire_wait(&rq));
    EXPECT(is_seq(p, 4, 100 * prev));
    memset(p, FILL, 16);
    EXPECT_OK(gpuwire_isend(comm, s, next, 6, NULL, &rq));
    EXPECT_OK(gpuwire_sendrecv(comm, b2, MPI_PROC_NULL, 6, b, prev, 6, NULL));
    EXPECT_OK(gpuwire_wait(&rq));
    EXPECT(is_seq(p, 4, 100 * prev));
    EXPECT_OK(gpuwire_buffer_free(s));
    EXPECT_OK(gpuwire_buffer_free(b2));
    EXPECT_OK(gpuwire_buffer_free(b));
}

/* ---- item 2: exact counts ---------------------------------------------------------------- */

enum mode { BLOCKING, IRECV_FIRST, IRECV_LATE, SENDRECV, SELF_SENDRECV, SELF_IRECV, IRECV_SEND };
static const char *mode_name[] = {"recv", "irecv posted first", "irecv posted late", "sendrecv", "sendrecv to self", "irecv from self",
                                  "irecv, then a blocking send (which must progress the irecv)"};

/* One message of `sn` int32 into a receive of `rn` int32 (a view followed by a guard region).
 * Expects `want` on the receiving side; afterwards an exact message must arrive intact. */
static void one(gpuwire_comm comm, int mode, int64_t sn, int64_t rn, gpuwire_status want)
{
    int self = mode == SELF_SENDRECV || mode == SELF_IRECV;
    int to = self ? rank : next, from = self ? rank : prev;
    int64_t guard = GUARD / 4;
    gpuwire_buffer s = balloc(sn, GPUWIRE_INT32);
    gpuwire_buffer all = balloc(rn + guard, GPUWIRE_INT32);
    gpuwire_buffer r = bview(all, 0, rn);
    fill_seq(bptr(s), sn, 1000 * rank + 1);
    int32_t *rp = bptr(all);
    memset(rp, FILL, (size_t)(rn + guard) * 4);
    gpuwire_request sq = GPUWIRE_REQUEST_NULL, rq = GPUWIRE_REQUEST_NULL;
    int tag = 40 + mode;
    gpuwire_status got = GPUWIRE_SUCCESS;
    switch (mode) {
    case BLOCKING:
        EXPECT_OK(gpuwire_isend(comm, s, to, tag, NULL, &sq));
        got = gpuwire_recv(comm, r, from, tag, NULL);
        break;
    case IRECV_FIRST:
    case SELF_IRECV:
        EXPECT_OK(gpuwire_irecv(comm, r, from, tag, NULL, &rq));
        MPI_Barrier(MPI_COMM_WORLD);
        EXPECT_OK(gpuwire_isend(comm, s, to, tag, NULL, &sq));
        got = gpuwire_wait(&rq);
        break;
    case IRECV_LATE:
        EXPECT_OK(gpuwire_isend(comm, s, to, tag, NULL, &sq));
        MPI_Barrier(MPI_COMM_WORLD);
        EXPECT_OK(gpuwire_irecv(comm, r, from, tag, NULL, &rq));
        got = gpuwire_wait(&rq);
        break;
    case SENDRECV:
    case SELF_SENDRECV:
        got = gpuwire_sendrecv(comm, s, to, tag, r, from, tag, NULL);
        break;
    case IRECV_SEND:
        /* Every rank: irecv, then a blocking send (above the eager size it waits for the peer's
         * irecv, which the peer's own blocking send must match meanwhile). */
        EXPECT_OK(gpuwire_irecv(comm, r, from, tag, NULL, &rq));
        EXPECT_OK(gpuwire_send(comm, s, to, tag, NULL));
        got = gpuwire_wait(&rq);
        break;
    }
    char msg[1024];
    if (gpuwire_last_error(msg, sizeof msg) != GPUWIRE_SUCCESS)
        msg[0] = '\0';
    gwt_checks++;
    if (got != want) {
        char d[1400];
        snprintf(d, sizeof d, "%s of %lld int32 into %lld: status %d, want %d (%s)", mode_name[mode], (long long)sn, (long long)rn, (int)got, (int)want, msg);
        gwt_fail(__FILE__, __LINE__, "receive status", d);
    }
    if (want == GPUWIRE_ERROR_COUNT_MISMATCH) {
        /* Both sizes, in elements and bytes; nothing written, guard intact. */
        char a[64], b[64];
        snprintf(a, sizeof a, "%lld bytes", (long long)sn * 4);
        snprintf(b, sizeof b, "%lld int32 elements", (long long)rn);
        EXPECT(strstr(msg, a) != NULL);
        EXPECT(strstr(msg, b) != NULL);
        EXPECT(all_bytes(rp, (size_t)rn * 4, FILL));
    } else if (want == GPUWIRE_SUCCESS) {
        EXPECT(is_seq(rp, rn, 1000 * from + 1));
    }
    gwt_checks++;
    if (!all_bytes(rp + rn, (size_t)guard * 4, FILL)) {
        char d[256];
        snprintf(d, sizeof d, "%s of %lld int32 into %lld wrote past the receive buffer", mode_name[mode], (long long)sn, (long long)rn);
        gwt_fail(__FILE__, __LINE__, "guard region", d);
    }
    if (sq.h != 0)
        EXPECT_OK(gpuwire_wait(&sq));
    /* The channel is still in step: an exact message arrives intact. */
    gpuwire_buffer s2 = balloc(rn, GPUWIRE_INT32);
    fill_seq(bptr(s2), rn, 7 * rank + 3);
    EXPECT_OK(gpuwire_sendrecv(comm, s2, to, tag, r, from, tag, NULL));
    EXPECT(is_seq(rp, rn, 7 * from + 3));
    EXPECT(all_bytes(rp + rn, (size_t)guard * 4, FILL));
    EXPECT_OK(gpuwire_buffer_free(s2));
    EXPECT_OK(gpuwire_buffer_free(r));
    EXPECT_OK(gpuwire_buffer_free(all));
    EXPECT_OK(gpuwire_buffer_free(s));
    MPI_Barrier(MPI_COMM_WORLD);
}

static void test_sizes(gpuwire_comm comm)
{
    /* Elements: 12 bytes up to 1.2 MB, across Open MPI's eager sizes (1 KiB to oneself, 4 KiB
     * to another rank) and MPICH's. */
    int64_t ns[] = {3, 100, 300, 2000, 70000, 300000};
    for (int m = BLOCKING; m <= IRECV_SEND; m++) {
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
            int64_t n = ns[i];
            one(comm, m, n, n, GPUWIRE_SUCCESS);
            one(comm, m, n, n + 2, GPUWIRE_ERROR_COUNT_MISMATCH); /* short */
            one(comm, m, n + 5, n, GPUWIRE_ERROR_COUNT_MISMATCH); /* long */
            one(comm, m, 2 * n, n, GPUWIRE_ERROR_COUNT_MISMATCH); /* twice as long */
        }
        one(comm, m, 0, 4, GPUWIRE_ERROR_COUNT_MISMATCH);
        one(comm, m, 4, 0, GPUWIRE_ERROR_COUNT_MISMATCH);
        one(comm, m, 0, 0, GPUWIRE_SUCCESS);
    }
}

static int64_t dsize(int32_t dt)
{
    switch (dt) {
    case GPUWIRE_INT8:
    case GPUWIRE_UINT8:
        return 1;
    case GPUWIRE_INT32:
        return 4;
    default:
        return 8;
    }
}

/* ---- item 2: checking mode, datatype and count on both sides ------------------------------ */

/* Rank r sends `sn` elements of `sdt` to next; receives `rn` of `rdt` from prev; all ranks do
 * the same, so every rank is a sender and a receiver: both sides must report `want`. */
static void checked(gpuwire_comm comm, int self, int blocking_send, int64_t sn, int32_t sdt, int64_t rn, int32_t rdt, gpuwire_status want)
{
    int to = self ? rank : next, from = self ? rank : prev;
    gpuwire_buffer s = balloc(sn, sdt);
    gpuwire_buffer all = balloc(rn + 64, rdt);
    gpuwire_buffer r = bview(all, 0, rn);
    int64_t rbytes = (rn + 64) * dsize(rdt), sbytes = sn * dsize(sdt);
    memset(bptr(s), 0x11, (size_t)sbytes);
    unsigned char *rp = bptr(all);
    memset(rp, FILL, (size_t)rbytes);
    gpuwire_request sq = GPUWIRE_REQUEST_NULL, rq = GPUWIRE_REQUEST_NULL;
    gpuwire_status rs, ss;
    if (blocking_send && !self) {
        /* Receive posted first, then a blocking send (waits for the receiver's answer). */
        EXPECT_OK(gpuwire_irecv(comm, r, from, 9, NULL, &rq));
        ss = gpuwire_send(comm, s, to, 9, NULL);
        rs = gpuwire_wait(&rq);
    } else if (self) {
        rs = gpuwire_sendrecv(comm, s, to, 9, r, from, 9, NULL);
        ss = rs;
    } else {
        EXPECT_OK(gpuwire_isend(comm, s, to, 9, NULL, &sq));
        rs = gpuwire_recv(comm, r, from, 9, NULL);
        ss = gpuwire_wait(&sq);
    }
    gwt_checks += 2;
    if (rs != want || ss != want) {
        char msg[1024], d[1400];
        if (gpuwire_last_error(msg, sizeof msg) != GPUWIRE_SUCCESS)
            msg[0] = '\0';
        snprintf(d, sizeof d, "%s%s %lld of dtype %d into %lld of dtype %d: receive %d, send %d, want %d (last error: %s)", self ? "to self " : "",
                 blocking_send ? "blocking" : "isend", (long long)sn, (int)sdt, (long long)rn, (int)rdt, (int)rs, (int)ss, (int)want, msg);
        gwt_fail(__FILE__, __LINE__, "checking mode", d);
    }
    if (want != GPUWIRE_SUCCESS)
        EXPECT(all_bytes(rp, (size_t)rbytes, FILL));
    else
        EXPECT(all_bytes(rp + sbytes, (size_t)(rbytes - sbytes), FILL));
    EXPECT_OK(gpuwire_buffer_free(r));
    EXPECT_OK(gpuwire_buffer_free(all));
    EXPECT_OK(gpuwire_buffer_free(s));
    MPI_Barrier(MPI_COMM_WORLD);
}

static void test_checking(void)
{
    gpuwire_config cfg;
    EXPECT_OK(gpuwire_config_init(&cfg));
    cfg.check = 1;
    gpuwire_comm cc = GPUWIRE_COMM_NULL;
    EXPECT_OK(gpuwire_comm_create((int32_t)MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &cc));
    for (int self = 0; self < 2; self++) {
        for (int bl = 0; bl < 2; bl++) {
            checked(cc, self, bl, 5, GPUWIRE_INT32, 5, GPUWIRE_INT32, GPUWIRE_SUCCESS);
            checked(cc, self, bl, 3000, GPUWIRE_FLOAT64, 3000, GPUWIRE_FLOAT64, GPUWIRE_SUCCESS);
            /* Same bytes, other datatype. */
            checked(cc, self, bl, 4, GPUWIRE_INT32, 2, GPUWIRE_FLOAT64, GPUWIRE_ERROR_DTYPE_MISMATCH);
            checked(cc, self, bl, 4000, GPUWIRE_INT32, 2000, GPUWIRE_FLOAT64, GPUWIRE_ERROR_DTYPE_MISMATCH);
            /* Bytes that are not a whole number of the receiver's elements (12 into float64). */
            checked(cc, self, bl, 3, GPUWIRE_INT32, 2, GPUWIRE_FLOAT64, GPUWIRE_ERROR_DTYPE_MISMATCH);
            checked(cc, self, bl, 3, GPUWIRE_INT32, 5, GPUWIRE_FLOAT64, GPUWIRE_ERROR_DTYPE_MISMATCH);
            checked(cc, self, bl, 7, GPUWIRE_INT8, 1, GPUWIRE_FLOAT64, GPUWIRE_ERROR_DTYPE_MISMATCH);
            /* Count: 3 into 5, 5 into 3. */
            checked(cc, self, bl, 3, GPUWIRE_INT32, 5, GPUWIRE_INT32, GPUWIRE_ERROR_COUNT_MISMATCH);
            checked(cc, self, bl, 5000, GPUWIRE_INT32, 3000, GPUWIRE_INT32, GPUWIRE_ERROR_COUNT_MISMATCH);
            /* And the channel is in step afterwards. */
            checked(cc, self, bl, 6, GPUWIRE_UINT8, 6, GPUWIRE_UINT8, GPUWIRE_SUCCESS);
        }
    }
    EXPECT_OK(gpuwire_comm_free(cc));
}

/* Without checking mode, a mistyped receive of bytes that are not a whole number of its elements
 * is a count error (no MPICH assertion), and the same bytes in another type arrive as bytes. */
static void test_mistyped_unchecked(gpuwire_comm comm)
{
    gpuwire_buffer s = balloc(3, GPUWIRE_INT32);
    gpuwire_buffer r = balloc(2, GPUWIRE_FLOAT64);
    memset(bptr(r), FILL, 16);
    gpuwire_request sq = GPUWIRE_REQUEST_NULL;
    EXPECT_OK(gpuwire_isend(comm, s, next, 11, NULL, &sq));
    EXPECT_STATUS(gpuwire_recv(comm, r, prev, 11, NULL), GPUWIRE_ERROR_COUNT_MISMATCH);
    EXPECT_LAST_ERROR_HAS("not a whole number of float64 elements");
    EXPECT(all_bytes(bptr(r), 16, FILL));
    EXPECT_OK(gpuwire_wait(&sq));
    EXPECT_OK(gpuwire_buffer_free(s));
    EXPECT_OK(gpuwire_buffer_free(r));
    MPI_Barrier(MPI_COMM_WORLD);
}

/* ---- a receive left pending while its rank blocks in a collective ----------------------------
 * A nonblocking receive that gpuwire defers (its message had not arrived) must still be matched
 * while its rank blocks in a collective, as a posted MPI_Irecv is: here the last rank's blocking
 * send of 1 MiB (above every eager size) to rank 0 completes only once rank 0, waiting in the
 * barrier, has matched it. Without that (gpuwire's progress thread, under MPI_THREAD_MULTIPLE)
 * the ranks hang. */
static void test_pending_across_collective(gpuwire_comm comm)
{
    if (size < 2)
        return;
    const int64_t n = 1 << 18;
    gpuwire_buffer r = balloc(n, GPUWIRE_INT32), s = balloc(n, GPUWIRE_INT32);
    fill_seq(bptr(s), n, 1000 * rank);
    memset(bptr(r), FILL, (size_t)n * 4);
    gpuwire_request q = GPUWIRE_REQUEST_NULL;
    EXPECT_OK(gpuwire_irecv(comm, r, prev, 77, NULL, &q));
    if (rank == 0) {
        EXPECT_OK(gpuwire_barrier(comm, NULL));
        EXPECT_OK(gpuwire_send(comm, s, next, 77, NULL));
    } else {
        EXPECT_OK(gpuwire_send(comm, s, next, 77, NULL));
        EXPECT_OK(gpuwire_barrier(comm, NULL));
    }
    EXPECT_OK(gpuwire_wait(&q));
    EXPECT(is_seq(bptr(r), n, 1000 * prev));
    EXPECT_OK(gpuwire_buffer_free(r));
    EXPECT_OK(gpuwire_buffer_free(s));
}

int main(int argc, char **argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gwt_rank = rank;
    next = (rank + 1) % size;
    prev = (rank + size - 1) % size;
    EXPECT_OK(gpuwire_init());
    gpuwire_comm comm = GPUWIRE_COMM_NULL;
    EXPECT_OK(gpuwire_comm_create((int32_t)MPI_Comm_c2f(MPI_COMM_WORLD), NULL, &comm));

    /* An argument runs one part only: ranks, sizes, mistyped, checking or pending. */
    const char *only = argc > 1 ? argv[1] : "";
    if (!*only || !strcmp(only, "ranks"))
        test_ranks(comm);
    if (!*only || !strcmp(only, "sizes"))
        test_sizes(comm);
    if (!*only || !strcmp(only, "mistyped"))
        test_mistyped_unchecked(comm);
    if (!*only || !strcmp(only, "checking"))
        test_checking();
    if (!*only || !strcmp(only, "pending"))
        test_pending_across_collective(comm);

    EXPECT_OK(gpuwire_comm_free(comm));
    EXPECT_OK(gpuwire_finalize());
    long failed = gwt_failures(), all = 0, checks = gwt_checks, all_checks = 0;
    MPI_Reduce(&failed, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&checks, &all_checks, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        if (all == 0)
            printf("test_p2p: PASS (%d ranks, %ld checks)\n", size, all_checks);
        else
            printf("test_p2p: FAIL (%ld of %ld checks failed)\n", all, all_checks);
    }
    MPI_Finalize();
    return all == 0 ? 0 : 1;
}
