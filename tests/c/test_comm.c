/*
 * test_comm.c: gpuwire communicators and data movement, from a program that owns MPI.
 *
 * The program initializes MPI itself; gpuwire_init adopts it, gpuwire_finalize leaves it up and
 * the program finalizes it. Communicators enter through MPI_Comm_c2f (the path every C program
 * uses); a split communicator is checked rank by rank. Every point-to-point operation and every
 * collective is run on host buffers and its result compared with an answer this program
 * computes independently; checking mode (config check = 1) is tested for each kind of
 * cross-rank disagreement.
 *
 * Usage: mpirun -n P test_comm P   (any P >= 1; the argument is the rank count expected)
 * Prints "test_comm: PASS (...)" from rank 0 and exits 0 when every check on every rank passed.
 */
#define _POSIX_C_SOURCE 200809L

#include <complex.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gwtest.h"

static gpuwire_comm comm;
static int rank, size;

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

static void bfree(gpuwire_buffer b) { EXPECT_OK(gpuwire_buffer_free(b)); }

static int32_t gw_thread_level(int mpi_level)
{
    if (mpi_level == MPI_THREAD_MULTIPLE)
        return GPUWIRE_THREAD_MULTIPLE;
    if (mpi_level == MPI_THREAD_SERIALIZED)
        return GPUWIRE_THREAD_SERIALIZED;
    if (mpi_level == MPI_THREAD_FUNNELED)
        return GPUWIRE_THREAD_FUNNELED;
    return GPUWIRE_THREAD_SINGLE;
}

/* ---- communicators from MPI handles ------------------------------------------------------- */

static void from_mpi_handles(void)
{
    gpuwire_comm c;
    MPI_Comm mine, theirs;
    MPI_Errhandler eh;
    int32_t r, s, fint;
    int cmp, msize;
    int64_t *v;
    gpuwire_buffer b;

    /* MPI_COMM_NULL is an argument error, not a crash. */
    EXPECT_UNTOUCHED_H(gpuwire_comm_create(MPI_Comm_c2f(MPI_COMM_NULL), NULL, &c),
                       GPUWIRE_ERROR_INVALID_ARGUMENT, c, 77u);
    EXPECT_LAST_ERROR_HAS("MPI_COMM_NULL");
    /* An intercommunicator (even ranks against odd ones) is an argument error on every rank:
     * Open MPI aborted the job in gpuwire's own agreement on it, MPICH returned an MPI error. */
    {
        int wr;
        MPI_Comm_rank(MPI_COMM_WORLD, &wr);
        if (size >= 2) {
            MPI_Comm half, inter;
            MPI_Comm_split(MPI_COMM_WORLD, wr % 2, wr, &half);
            MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, wr % 2 ? 0 : 1, 42, &inter);
            EXPECT_UNTOUCHED_H(gpuwire_comm_create(MPI_Comm_c2f(inter), NULL, &c), GPUWIRE_ERROR_INVALID_ARGUMENT, c, 77u);
            EXPECT_LAST_ERROR_HAS("intercommunicator");
            MPI_Comm_free(&inter);
            MPI_Comm_free(&half);
        }
    }
    /* Fortran handles that name no communicator are an argument error with a message, on
     * every MPI: garbage integers, MPICH's encodings of a built-in index past its table, a
     * direct index past the preallocated block (read out of bounds by MPICH), an indirect block
     * never allocated, another object's handle, a freed communicator. The world's and the
     * self communicator's error handlers are as before (MPICH raises these errors on the
     * world, which gpuwire must not leave changed), whatever they were. */
    {
        const int32_t bad[] = {1, 12345, -7, -1, 123456, INT32_MAX, INT32_MIN,
                               (int32_t)0x44000002, (int32_t)0x44000010, (int32_t)0x84000000 + 8,
                               (int32_t)0x84000000 + 100000, (int32_t)0x87ffffff,
                               (int32_t)0xc4001000, (int32_t)0xc4ffffff, (int32_t)0xc7ffffff,
#if defined(MPICH_VERSION)
                               /* small integers and other objects' handles: Open MPI's Fortran
                                * handles are table indices, which may name a live communicator */
                               3, (int32_t)MPI_Type_c2f(MPI_INT), (int32_t)MPI_Op_c2f(MPI_SUM),
                               (int32_t)MPI_Group_c2f(MPI_GROUP_EMPTY),
#endif
                               0};
        const int32_t live[] = {(int32_t)MPI_Comm_c2f(MPI_COMM_WORLD), (int32_t)MPI_Comm_c2f(MPI_COMM_SELF),
                                (int32_t)MPI_Comm_c2f(MPI_COMM_NULL)};
        MPI_Errhandler before;
        size_t i, j;
        int round, tried = 0;
        MPI_Comm_dup(MPI_COMM_WORLD, &mine);
        fint = (int32_t)MPI_Comm_c2f(mine);
        MPI_Comm_free(&mine);
        EXPECT_UNTOUCHED_H(gpuwire_comm_create(fint, NULL, &c), GPUWIRE_ERROR_INVALID_ARGUMENT, c, 77u);
        EXPECT_LAST_ERROR_HAS("the Fortran handle");
        for (round = 0; round < 2; round++) {
            /* Round 1: the program's own handler on the world is MPI_ERRORS_RETURN. */
            if (round == 1)
                MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
            for (i = 0; i < sizeof bad / sizeof *bad; i++) {
                int skip = 0;
                for (j = 0; j < sizeof live / sizeof *live; j++)
                    skip |= bad[i] == live[j];
                if (skip)
                    continue; /* names a communicator on this MPI (1 is MPI_COMM_SELF on Open MPI) */
                tried++;
                EXPECT_UNTOUCHED_H(gpuwire_comm_create(bad[i], NULL, &c), GPUWIRE_ERROR_INVALID_ARGUMENT, c, 77u);
                EXPECT_LAST_ERROR_HAS("the Fortran handle");
            }
            MPI_Comm_get_errhandler(MPI_COMM_WORLD, &before);
            EXPECT(before == (round == 0 ? MPI_ERRORS_ARE_FATAL : MPI_ERRORS_RETURN));
            MPI_Errhandler_free(&before);
            MPI_Comm_get_errhandler(MPI_COMM_SELF, &before);
            EXPECT(before == MPI_ERRORS_ARE_FATAL);
            MPI_Errhandler_free(&before);
        }
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
        EXPECT(tried >= 28);
    }

    /* The caller's communicator is duplicated: it keeps its error handler and may be freed
     * while gpuwire's communicator lives on. */
    MPI_Comm_dup(MPI_COMM_WORLD, &mine);
    EXPECT_OK(gpuwire_comm_create((int32_t)MPI_Comm_c2f(mine), NULL, &c));
    MPI_Comm_get_errhandler(mine, &eh);
    EXPECT(eh == MPI_ERRORS_ARE_FATAL);
    MPI_Errhandler_free(&eh);
    MPI_Comm_free(&mine);
    EXPECT_OK(gpuwire_comm_rank(c, &r));
    EXPECT_OK(gpuwire_comm_size(c, &s));
    EXPECT(r == rank && s == size);
    b = balloc(1, GPUWIRE_INT64);
    v = (int64_t *)bptr(b);
    *v = rank + 1;
    EXPECT_OK(gpuwire_allreduce(c, b, b, GPUWIRE_SUM, NULL));
    EXPECT(*v == (int64_t)size * (size + 1) / 2);

    /* gpuwire's own duplicate, usable with plain MPI: congruent with the world, not it. */
    EXPECT_OK(gpuwire_comm_mpi(c, &fint));
    theirs = MPI_Comm_f2c(fint);
    EXPECT(theirs != MPI_COMM_NULL);
    MPI_Comm_compare(theirs, MPI_COMM_WORLD, &cmp);
    EXPECT(cmp == MPI_CONGRUENT);
    MPI_Comm_size(theirs, &msize);
    EXPECT(msize == size);
    bfree(b);
    EXPECT_OK(gpuwire_comm_free(c));
    EXPECT_STATUS(gpuwire_comm_mpi(c, &fint), GPUWIRE_ERROR_INVALID_HANDLE);

    /* The world's own error handler is untouched by gpuwire. */
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh);
    EXPECT(eh == MPI_ERRORS_ARE_FATAL);
    MPI_Errhandler_free(&eh);
}

/* ---- point-to-point ----------------------------------------------------------------------- */

static void point_to_point(void)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    gpuwire_buffer s = balloc(4, GPUWIRE_INT64), r = balloc(4, GPUWIRE_INT64), big, extra;
    int64_t *sp = (int64_t *)bptr(s), *rp = (int64_t *)bptr(r);
    gpuwire_request reqs[3], req;
    int32_t flag;
    int i, spins;

    /* Periodic ring with sendrecv (on one rank, a rank sends to itself). */
    for (i = 0; i < 4; i++) {
        sp[i] = rank * 100 + i;
        rp[i] = -1;
    }
    EXPECT_OK(gpuwire_sendrecv(comm, s, next, 3, r, prev, 3, NULL));
    for (i = 0; i < 4; i++)
        EXPECT(rp[i] == prev * 100 + i);

    /* Open chain: GPUWIRE_PROC_NULL at the ends; a receive from it leaves the buffer alone. */
    for (i = 0; i < 4; i++)
        rp[i] = -1;
    EXPECT_OK(gpuwire_sendrecv(comm, s, rank + 1 < size ? rank + 1 : GPUWIRE_PROC_NULL, 4, r,
                               rank > 0 ? rank - 1 : GPUWIRE_PROC_NULL, 4, NULL));
    for (i = 0; i < 4; i++)
        EXPECT(rp[i] == (rank > 0 ? (rank - 1) * 100 + i : -1));
    EXPECT_OK(gpuwire_sendrecv(comm, s, GPUWIRE_PROC_NULL, 4, r, GPUWIRE_PROC_NULL, 4, NULL));
    EXPECT_STATUS(gpuwire_sendrecv(comm, s, next, 4, s, prev, 4, NULL),
                  GPUWIRE_ERROR_INVALID_ARGUMENT); /* overlapping buffers, refused locally */

    /* Blocking send/recv between pairs (0->1, 2->3, ...); PROC_NULL does nothing. */
    for (i = 0; i < 4; i++)
        rp[i] = -1;
    if (rank % 2 == 0 && rank + 1 < size)
        EXPECT_OK(gpuwire_send(comm, s, rank + 1, 5, NULL));
    else if (rank % 2 == 1)
        EXPECT_OK(gpuwire_recv(comm, r, rank - 1, 5, NULL));
    for (i = 0; i < 4; i++)
        EXPECT(rp[i] == (rank % 2 == 1 ? (rank - 1) * 100 + i : -1));
    EXPECT_OK(gpuwire_send(comm, s, GPUWIRE_PROC_NULL, 5, NULL));
    EXPECT_OK(gpuwire_recv(comm, r, GPUWIRE_PROC_NULL, 5, NULL));
    EXPECT(rp[0] == (rank % 2 == 1 ? (rank - 1) * 100 : -1));

    /* isend/irecv around the ring, completed by polling gpuwire_test and by waitall. */
    for (i = 0; i < 4; i++)
        rp[i] = -1;
    EXPECT_OK(gpuwire_irecv(comm, r, prev, 6, NULL, &reqs[0]));
    EXPECT_OK(gpuwire_isend(comm, s, next, 6, NULL, &reqs[1]));
    EXPECT_OK(gpuwire_isend(comm, s, GPUWIRE_PROC_NULL, 6, NULL, &reqs[2]));
    EXPECT(reqs[0].h != 0 && reqs[1].h != 0);
    flag = 0;
    for (spins = 0; spins < 100000000 && !flag; spins++)
        EXPECT_OK(gpuwire_test(&reqs[0], &flag));
    EXPECT(flag == 1 && reqs[0].h == 0);
    EXPECT_OK(gpuwire_waitall(3, reqs)); /* reqs[0] is NULL now: skipped */
    EXPECT(reqs[1].h == 0 && reqs[2].h == 0);
    for (i = 0; i < 4; i++)
        EXPECT(rp[i] == prev * 100 + i);
    req = GPUWIRE_REQUEST_NULL;
    EXPECT_OK(gpuwire_wait(&req)); /* the NULL request completes at once */
    flag = 0;
    EXPECT_OK(gpuwire_test(&req, &flag));
    EXPECT(flag == 1);

    /* A request keeps its buffer alive after the buffer's handle is freed. */
    big = balloc(1000, GPUWIRE_INT32);
    extra = balloc(1000, GPUWIRE_INT32);
    {
        int32_t *bp = (int32_t *)bptr(big), *ep = (int32_t *)bptr(extra);
        for (i = 0; i < 1000; i++) {
            bp[i] = rank * 7 + i;
            ep[i] = -1;
        }
        EXPECT_OK(gpuwire_irecv(comm, extra, prev, 7, NULL, &reqs[0]));
        EXPECT_OK(gpuwire_isend(comm, big, next, 7, NULL, &reqs[1]));
        bfree(big);
        EXPECT_OK(gpuwire_waitall(2, reqs));
        for (i = 0; i < 1000; i++)
            EXPECT(ep[i] == prev * 7 + i);
    }
    bfree(extra);
    bfree(s);
    bfree(r);
}

/* Runs gpuwire's progress (every wait and test progresses the operations of freed requests)
 * until p[i] == base + i for i < 4, or 10 s passed: whether a freed receive took its message. */
static int freed_receive_arrived(volatile int64_t *p, int64_t base)
{
    gpuwire_buffer z = balloc(0, GPUWIRE_INT64);
    gpuwire_request q = GPUWIRE_REQUEST_NULL;
    int32_t flag = 0, i, all = 0;
    double t0 = MPI_Wtime();
    while (!all && MPI_Wtime() - t0 < 10.0) {
        EXPECT_OK(gpuwire_isend(comm, z, GPUWIRE_PROC_NULL, 0, NULL, &q));
        EXPECT_OK(gpuwire_test(&q, &flag));
        for (all = 1, i = 0; i < 4; i++)
            all &= p[i] == base + i;
    }
    bfree(z);
    return all;
}

/* gpuwire_request_free, as MPI_Request_free: a completed request is released; a pending one goes
 * on (a receive takes the message sent later, the communicator usable); on a broken
 * communicator one not complete is abandoned at once, its receive cancelled. */
static void request_free(void)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    gpuwire_buffer s = balloc(4, GPUWIRE_INT64), r = balloc(4, GPUWIRE_INT64);
    int64_t *sp = (int64_t *)bptr(s), *rp = (int64_t *)bptr(r), late[4] = {0, 0, 0, 0};
    gpuwire_request req = GPUWIRE_REQUEST_NULL, reqs[2];
    gpuwire_config cfg;
    gpuwire_comm dc, tc;
    int32_t fint = 0;
    MPI_Comm mc;
    MPI_Request mr;
    double t0;
    int i;

    EXPECT_STATUS(gpuwire_request_free(NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_OK(gpuwire_request_free(&req)); /* NULL: at once */
    req.h = 0x1234567;
    EXPECT_STATUS(gpuwire_request_free(&req), GPUWIRE_ERROR_INVALID_HANDLE);
    EXPECT(req.h == 0x1234567);

    /* Completed (a send to PROC_NULL), and in flight (a ring exchange): released at once, the
     * operations going on, the data in place once they complete, the communicator usable. */
    EXPECT_OK(gpuwire_isend(comm, s, GPUWIRE_PROC_NULL, 8, NULL, &req));
    EXPECT_OK(gpuwire_request_free(&req));
    EXPECT(req.h == 0);
    EXPECT_OK(gpuwire_config_init(&cfg));
    cfg.timeout_seconds = 60.0;
    EXPECT_OK(gpuwire_comm_world(&cfg, &tc));
    for (i = 0; i < 4; i++) {
        sp[i] = rank * 10 + i;
        rp[i] = -1;
    }
    EXPECT_OK(gpuwire_irecv(tc, r, prev, 8, NULL, &reqs[0]));
    EXPECT_OK(gpuwire_isend(tc, s, next, 8, NULL, &reqs[1]));
    EXPECT_OK(gpuwire_request_free(&reqs[0]));
    EXPECT_OK(gpuwire_request_free(&reqs[1]));
    EXPECT(reqs[0].h == 0 && reqs[1].h == 0);
    EXPECT(freed_receive_arrived(rp, prev * 10));
    EXPECT_OK(gpuwire_barrier(tc, NULL));
    EXPECT_OK(gpuwire_comm_free(tc));

    /* A send in flight goes on after gpuwire_request_free, as after MPI_Request_free (the
     * fire-and-forget idiom; it broke the communicator): the free returns at once, the
     * communicator stays usable, the buffer's handle may be freed as well (the send keeps its
     * memory), and the receiver, which posts its receive only after a barrier, gets the data.
     * 1 MiB: past every eager size, so the send cannot have completed at the free. */
    {
        const int64_t n = 1 << 17;
        gpuwire_buffer big = balloc(n, GPUWIRE_INT64), got = balloc(n, GPUWIRE_INT64);
        int64_t *bp = (int64_t *)bptr(big), *gp = (int64_t *)bptr(got), wrong = 0;
        for (int64_t k = 0; k < n; k++) {
            bp[k] = rank * 1000000 + k;
            gp[k] = -1;
        }
        EXPECT_OK(gpuwire_isend(comm, big, next, 12, NULL, &req));
        EXPECT_OK(gpuwire_request_free(&req));
        EXPECT(req.h == 0);
        bfree(big);
        EXPECT_OK(gpuwire_barrier(comm, NULL));
        EXPECT_OK(gpuwire_recv(comm, got, prev, 12, NULL));
        for (int64_t k = 0; k < n; k++)
            wrong += gp[k] != prev * 1000000 + k;
        EXPECT(wrong == 0);
        EXPECT_OK(gpuwire_barrier(comm, NULL));
        bfree(got);
    }

    /* A nonblocking collective freed in flight goes on as well (MPI forbids freeing one; it
     * broke the communicator, and the other ranks waited for it): rank 0 calls last (so the
     * others' are in flight at their free), every rank frees its request at once, and a later
     * blocking allreduce runs after it, the freed one's result in place by then. */
    {
        gpuwire_buffer x = balloc(4, GPUWIRE_INT64), y = balloc(4, GPUWIRE_INT64);
        gpuwire_buffer one = balloc(1, GPUWIRE_INT64), n = balloc(1, GPUWIRE_INT64);
        int64_t *xp = (int64_t *)bptr(x), *yp = (int64_t *)bptr(y);
        for (i = 0; i < 4; i++) {
            xp[i] = rank + i;
            yp[i] = -1;
        }
        *(int64_t *)bptr(one) = 1;
        EXPECT_OK(gpuwire_barrier(comm, NULL));
        if (rank == 0) {
            t0 = MPI_Wtime();
            while (MPI_Wtime() - t0 < 0.2)
                ;
        }
        EXPECT_OK(gpuwire_iallreduce(comm, x, y, GPUWIRE_SUM, NULL, &req));
        EXPECT_OK(gpuwire_request_free(&req));
        EXPECT(req.h == 0);
        EXPECT_OK(gpuwire_allreduce(comm, one, n, GPUWIRE_SUM, NULL));
        EXPECT(*(int64_t *)bptr(n) == size);
        for (i = 0; i < 4; i++)
            EXPECT(yp[i] == (int64_t)size * (size - 1) / 2 + (int64_t)size * i);
        bfree(x);
        bfree(y);
        bfree(one);
        bfree(n);
    }

    /* In checking mode, a freed iallreduce whose counts differ between ranks fails on every rank
     * with nobody to tell; the ranks then run the same later collectives (its error was the
     * next call's "earlier operation failed" on a rank when that rank happened to notice: rank
     * 0, noticing last, skipped another allreduce than the others, and two mismatched
     * allreduces returned success with wrong sums). */
    if (size >= 2) {
        gpuwire_comm cc;
        gpuwire_status async = GPUWIRE_ERROR_INTERNAL;
        EXPECT_OK(gpuwire_config_init(&cfg));
        cfg.check = 1;
        EXPECT_OK(gpuwire_comm_world(&cfg, &cc));
        gpuwire_buffer a = balloc(rank == 0 ? 1 : 2, GPUWIRE_INT64), b = balloc(rank == 0 ? 1 : 2, GPUWIRE_INT64);
        gpuwire_buffer one = balloc(1, GPUWIRE_INT64), tot = balloc(1, GPUWIRE_INT64), z = balloc(0, GPUWIRE_INT64);
        gpuwire_status freed;
        EXPECT_OK(gpuwire_iallreduce(cc, a, b, GPUWIRE_SUM, NULL, &req));
        /* Released either way; its error comes with the free when the engine has already run
         * the agreement (as gpuwire_wait's would), else it is lost, as documented. */
        freed = gpuwire_request_free(&req);
        EXPECT(freed == GPUWIRE_SUCCESS || freed == GPUWIRE_ERROR_COUNT_MISMATCH);
        EXPECT(req.h == 0);
        if (rank == 0) {
            t0 = MPI_Wtime();
            while (MPI_Wtime() - t0 < 0.2)
                ;
        }
        EXPECT_OK(gpuwire_isend(cc, z, GPUWIRE_PROC_NULL, 0, NULL, &req));
        EXPECT_OK(gpuwire_request_free(&req)); /* looks at the freed ones */
        for (i = 0; i < 4; i++) {
            *(int64_t *)bptr(one) = 10 * (i + 1);
            *(int64_t *)bptr(tot) = -1;
            EXPECT_OK(gpuwire_allreduce(cc, one, tot, GPUWIRE_SUM, NULL));
            EXPECT(*(int64_t *)bptr(tot) == 10 * (i + 1) * size);
        }
        EXPECT_OK(gpuwire_comm_get_async_error(cc, &async));
        EXPECT(async == GPUWIRE_SUCCESS);
        EXPECT_OK(gpuwire_comm_free(cc));
        bfree(a);
        bfree(b);
        bfree(one);
        bfree(tot);
        bfree(z);
    }

    /* A receive whose message has not come, freed, goes on, as after MPI_Request_free: the free
     * returns at once (also with a timeout, which does not apply to it: the message comes after
     * it), the communicator stays usable, and the message sent later lands in the buffer, ahead of
     * a second message of the same sender and tag (MPI's order). */
    for (int timed = 0; timed < 2; timed++) {
        gpuwire_buffer s2 = balloc(4, GPUWIRE_INT64), r2 = balloc(4, GPUWIRE_INT64);
        int64_t *second = (int64_t *)bptr(r2);
        EXPECT_OK(gpuwire_config_init(&cfg));
        cfg.timeout_seconds = timed ? 1.0 : 0.0;
        EXPECT_OK(gpuwire_comm_world(&cfg, &dc));
        for (i = 0; i < 4; i++) {
            sp[i] = rank * 100 + i;
            ((int64_t *)bptr(s2))[i] = rank * 1000 + i;
            rp[i] = second[i] = -1;
        }
        EXPECT_OK(gpuwire_irecv(dc, r, prev, 9, NULL, &req));
        t0 = MPI_Wtime();
        EXPECT_OK(gpuwire_request_free(&req));
        EXPECT(req.h == 0);
        EXPECT(MPI_Wtime() - t0 < 0.5);
        EXPECT(rp[0] == -1);
        EXPECT_OK(gpuwire_barrier(dc, NULL));
        if (timed) {
            t0 = MPI_Wtime();
            while (MPI_Wtime() - t0 < 1.5)
                ;
        }
        /* Isends: a blocking send to oneself (one rank) with no receive posted may block for
         * ever (MPICH's does). */
        EXPECT_OK(gpuwire_isend(dc, s, next, 9, NULL, &reqs[0]));
        EXPECT_OK(gpuwire_isend(dc, s2, next, 9, NULL, &reqs[1]));
        EXPECT_OK(gpuwire_recv(dc, r2, prev, 9, NULL));
        EXPECT_OK(gpuwire_waitall(2, reqs));
        for (i = 0; i < 4; i++)
            EXPECT(second[i] == prev * 1000 + i);
        EXPECT(freed_receive_arrived(rp, prev * 100));
        EXPECT_OK(gpuwire_barrier(dc, NULL));
        EXPECT_OK(gpuwire_comm_free(dc));
        bfree(s2);
        bfree(r2);
    }

    /* On a broken communicator (a wait's timeout broke it), a receive not yet matched is
     * abandoned at once and cancelled: the message sent later on gpuwire's own MPI communicator is
     * not written into its buffer. */
    EXPECT_OK(gpuwire_config_init(&cfg));
    cfg.timeout_seconds = 1.0;
    EXPECT_OK(gpuwire_comm_world(&cfg, &tc));
    for (i = 0; i < 4; i++)
        rp[i] = -1;
    EXPECT_OK(gpuwire_irecv(tc, r, prev, 10, NULL, &reqs[0]));
    EXPECT_OK(gpuwire_irecv(tc, s, prev, 11, NULL, &reqs[1]));
    EXPECT_STATUS(gpuwire_wait(&reqs[1]), GPUWIRE_ERROR_TIMEOUT);
    t0 = MPI_Wtime();
    EXPECT_STATUS(gpuwire_request_free(&reqs[0]), GPUWIRE_ERROR_COMM_BROKEN);
    EXPECT_LAST_ERROR_HAS("abandoned");
    EXPECT(reqs[0].h == 0);
    EXPECT(MPI_Wtime() - t0 < 0.5);
    EXPECT_STATUS(gpuwire_barrier(tc, NULL), GPUWIRE_ERROR_COMM_BROKEN);
    EXPECT_OK(gpuwire_comm_mpi(tc, &fint));
    mc = MPI_Comm_f2c(fint);
    MPI_Barrier(MPI_COMM_WORLD);
    for (i = 0; i < 4; i++)
        sp[i] = rank * 10 + i;
    EXPECT(MPI_Isend(sp, 4, MPI_INT64_T, next, 10, mc, &mr) == MPI_SUCCESS);
    EXPECT(MPI_Recv(late, 4, MPI_INT64_T, prev, 10, mc, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    EXPECT(MPI_Wait(&mr, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    for (i = 0; i < 4; i++)
        EXPECT(late[i] == prev * 10 + i && rp[i] == -1);
    EXPECT_OK(gpuwire_comm_free(tc));

    bfree(s);
    bfree(r);
}

/* gpuwire_cancel, as MPI_Cancel: a receive whose message has not come is withdrawn and completes
 * at once, its status cancelled, its buffer untouched, and the message sent afterwards goes to
 * the next receive; contiguous and strided (a view), without and with checking mode, waited for
 * by gpuwire_wait_status, gpuwire_waitany and gpuwire_testall. Sends and completed requests are
 * not cancelled; the argument errors. A wait that hung (a receive not withdrawn) times out. */
static void cancel_requests(void)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    gpuwire_request req = GPUWIRE_REQUEST_NULL, reqs[2];
    gpuwire_status_t st, sts[2];
    gpuwire_config cfg;
    gpuwire_comm cc;
    int32_t idx = -1, flag = 0;
    int i, pp;

    EXPECT_STATUS(gpuwire_cancel(NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_OK(gpuwire_cancel(&req)); /* NULL: nothing */
    req.h = 0x1234567;
    EXPECT_STATUS(gpuwire_cancel(&req), GPUWIRE_ERROR_INVALID_HANDLE);
    req.h = 0;

    /* A request of a group that has not ended: cancel and testsome refuse it (INVALID_ARGUMENT,
     * nothing written), and it completes after the group's end as it would have. */
    {
        gpuwire_buffer gs = balloc(2, GPUWIRE_INT64), gr = balloc(2, GPUWIRE_INT64);
        int64_t *gsp = (int64_t *)bptr(gs), *grp = (int64_t *)bptr(gr);
        int32_t n = -7, at[2] = {-7, -7};
        gsp[0] = 40 + rank;
        gsp[1] = 41 + rank;
        grp[0] = grp[1] = -1;
        EXPECT_OK(gpuwire_group_start());
        EXPECT_OK(gpuwire_irecv(comm, gr, rank, 40, NULL, &reqs[0]));
        EXPECT_OK(gpuwire_isend(comm, gs, rank, 40, NULL, &reqs[1]));
        EXPECT_STATUS(gpuwire_cancel(&reqs[0]), GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_LAST_ERROR_HAS("group");
        EXPECT_STATUS(gpuwire_testsome(2, reqs, &n, at, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT(n == -7 && at[0] == -7 && reqs[0].h != 0 && reqs[1].h != 0);
        EXPECT_OK(gpuwire_group_end());
        EXPECT_OK(gpuwire_waitall(2, reqs));
        EXPECT(grp[0] == 40 + rank && grp[1] == 41 + rank);
        bfree(gs);
        bfree(gr);
    }

    for (int check = 0; check < 2; check++) {
        gpuwire_buffer s = balloc(8, GPUWIRE_INT64), r = balloc(8, GPUWIRE_INT64), got = balloc(4, GPUWIRE_INT64), v;
        int64_t *sp = (int64_t *)bptr(s), *rp = (int64_t *)bptr(r), *gp = (int64_t *)bptr(got);
        EXPECT_OK(gpuwire_config_init(&cfg));
        cfg.check = check;
        cfg.timeout_seconds = 20.0;
        EXPECT_OK(gpuwire_comm_world(&cfg, &cc));
        for (i = 0; i < 8; i++) {
            sp[i] = rank * 10 + i;
            rp[i] = -1;
        }
        /* Contiguous, wildcards: waited for with its status. */
        EXPECT_OK(gpuwire_irecv_status(cc, r, GPUWIRE_ANY_SOURCE, GPUWIRE_ANY_TAG, NULL, &req));
        EXPECT_OK(gpuwire_cancel(&req));
        EXPECT(req.h != 0); /* still to be completed, as in MPI */
        memset(&st, 0x5a, sizeof st);
        EXPECT_OK(gpuwire_wait_status(&req, &st));
        EXPECT(req.h == 0 && st.cancelled == 1 && st.count == 0 && st.source == GPUWIRE_ANY_SOURCE && st.tag == GPUWIRE_ANY_TAG);
        /* Two, one of them into a strided view (every other element of r), by waitany and
         * testall. */
        EXPECT_OK(gpuwire_buffer_view_strided(r, 0, 4, 1, 2, &v));
        EXPECT_OK(gpuwire_irecv(cc, v, prev, 5, NULL, &reqs[0]));
        EXPECT_OK(gpuwire_irecv(cc, got, prev, 6, NULL, &reqs[1]));
        EXPECT_OK(gpuwire_cancel(&reqs[0]));
        EXPECT_OK(gpuwire_cancel(&reqs[1]));
        EXPECT_OK(gpuwire_waitany(2, reqs, &idx, &st));
        EXPECT(idx >= 0 && idx < 2 && st.cancelled == 1);
        for (flag = 0, i = 0; i < 200 && !flag; i++)
            EXPECT_OK(gpuwire_testall(2, reqs, &flag, sts));
        EXPECT(flag && reqs[0].h == 0 && reqs[1].h == 0);
        EXPECT(sts[1 - idx].cancelled == 1);
        EXPECT_OK(gpuwire_buffer_free(v));
        for (i = 0; i < 8; i++)
            EXPECT(rp[i] == -1);
        /* The messages sent now go to the next receives. */
        EXPECT_OK(gpuwire_barrier(cc, NULL));
        for (int tag = 5; tag <= 6; tag++) {
            EXPECT_OK(gpuwire_buffer_view(s, 0, 4, &v));
            EXPECT_OK(gpuwire_isend(cc, v, next, tag, NULL, &req));
            for (i = 0; i < 4; i++)
                gp[i] = -1;
            EXPECT_OK(gpuwire_recv(cc, got, prev, tag, NULL));
            EXPECT_OK(gpuwire_wait(&req));
            EXPECT_OK(gpuwire_buffer_free(v));
            for (i = 0; i < 4; i++)
                EXPECT(gp[i] == prev * 10 + i);
        }
        for (i = 0; i < 8; i++)
            EXPECT(rp[i] == -1);
        /* Not cancelled: a send (it completes as sent, the peer receives it). */
        pp = (prev + size - 1) % size;
        EXPECT_OK(gpuwire_isend(cc, got, next, 7, NULL, &reqs[0]));
        EXPECT_OK(gpuwire_cancel(&reqs[0]));
        EXPECT_OK(gpuwire_buffer_view(r, 0, 4, &v));
        EXPECT_OK(gpuwire_recv(cc, v, prev, 7, NULL));
        EXPECT_OK(gpuwire_wait_status(&reqs[0], &st));
        EXPECT(st.cancelled == 0);
        for (i = 0; i < 4; i++)
            EXPECT(rp[i] == pp * 10 + i);
        /* A receive whose message may have matched meanwhile: it took the message (not
         * cancelled), or it did not and the next receive takes it; never both, never neither. */
        EXPECT_OK(gpuwire_buffer_free(v));
        for (i = 0; i < 8; i++)
            rp[i] = -1;
        EXPECT_OK(gpuwire_irecv_status(cc, r, prev, 8, NULL, &req));
        EXPECT_OK(gpuwire_send(cc, s, next, 8, NULL));
        EXPECT_OK(gpuwire_cancel(&req));
        EXPECT_OK(gpuwire_wait_status(&req, &st));
        if (st.cancelled) {
            EXPECT(rp[0] == -1 && st.count == 0);
            EXPECT_OK(gpuwire_recv_status(cc, r, prev, 8, NULL, &st));
            EXPECT(st.cancelled == 0);
        }
        EXPECT(st.count == 8 && st.source == prev && st.tag == 8);
        for (i = 0; i < 8; i++)
            EXPECT(rp[i] == prev * 10 + i);
        EXPECT_OK(gpuwire_barrier(cc, NULL));
        EXPECT_OK(gpuwire_comm_free(cc));
        bfree(s);
        bfree(r);
        bfree(got);
    }
}

/* gpuwire_waitsome and gpuwire_testsome, as MPI_Waitsome / MPI_Testsome: messages to oneself,
 * values and statuses checked; every completed request released and listed in array order;
 * GPUWIRE_UNDEFINED when all are NULL; a failed request listed with its error in its status and
 * returned; the argument errors. */
static void some_requests(void)
{
    gpuwire_buffer z = balloc(0, GPUWIRE_INT64), a = balloc(2, GPUWIRE_INT64), b = balloc(3, GPUWIRE_INT64);
    int64_t *ap = (int64_t *)bptr(a), *bp = (int64_t *)bptr(b);
    gpuwire_request reqs[4] = {GPUWIRE_REQUEST_NULL, GPUWIRE_REQUEST_NULL, GPUWIRE_REQUEST_NULL, GPUWIRE_REQUEST_NULL};
    gpuwire_status_t sts[4];
    int32_t out = -7, idx[4] = {-7, -7, -7, -7};
    int i;

    EXPECT_OK(gpuwire_testsome(4, reqs, &out, idx, sts));
    EXPECT(out == GPUWIRE_UNDEFINED);
    out = -7;
    EXPECT_OK(gpuwire_waitsome(0, NULL, &out, NULL, NULL));
    EXPECT(out == GPUWIRE_UNDEFINED);
    EXPECT_STATUS(gpuwire_waitsome(4, reqs, NULL, idx, sts), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_testsome(-1, reqs, &out, idx, sts), GPUWIRE_ERROR_INVALID_ARGUMENT);
    /* `indices` is required with count > 0, also where every request is NULL. */
    out = -7;
    EXPECT_STATUS(gpuwire_testsome(4, reqs, &out, NULL, sts), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_waitsome(4, reqs, &out, NULL, sts), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT(out == -7);

    /* [0] complete at once (to PROC_NULL), [1] NULL, [2] and [3] receives from oneself. */
    ap[0] = -1;
    ap[1] = -1;
    for (i = 0; i < 3; i++)
        bp[i] = -1;
    EXPECT_OK(gpuwire_isend(comm, z, GPUWIRE_PROC_NULL, 0, NULL, &reqs[0]));
    EXPECT_OK(gpuwire_irecv_status(comm, a, rank, 31, NULL, &reqs[2]));
    EXPECT_OK(gpuwire_irecv(comm, b, rank, 32, NULL, &reqs[3]));
    EXPECT_STATUS(gpuwire_testsome(4, reqs, &out, NULL, sts), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_OK(gpuwire_testsome(4, reqs, &out, idx, sts));
    EXPECT(out == 1 && idx[0] == 0 && reqs[0].h == 0 && reqs[2].h != 0 && reqs[3].h != 0);
    EXPECT(sts[0].error == GPUWIRE_SUCCESS && sts[0].cancelled == 0);
    reqs[1] = reqs[2];
    EXPECT_STATUS(gpuwire_testsome(4, reqs, &out, idx, sts), GPUWIRE_ERROR_INVALID_ARGUMENT); /* twice */
    reqs[1] = GPUWIRE_REQUEST_NULL;
    {
        int64_t one = 11, three[3] = {21, 22, 23};
        gpuwire_buffer o = GPUWIRE_BUFFER_NULL, t = GPUWIRE_BUFFER_NULL;
        EXPECT_OK(gpuwire_buffer_wrap(&one, 1, GPUWIRE_INT64, GPUWIRE_SPACE_HOST, &o));
        EXPECT_OK(gpuwire_buffer_wrap(three, 3, GPUWIRE_INT64, GPUWIRE_SPACE_HOST, &t));
        EXPECT_OK(gpuwire_send(comm, o, rank, 31, NULL)); /* shorter: irecv_status takes it */
        EXPECT_OK(gpuwire_send(comm, t, rank, 32, NULL));
        int32_t got = 0, seen[4] = {0, 0, 0, 0};
        double t0 = MPI_Wtime();
        while (got < 2 && MPI_Wtime() - t0 < 10.0) {
            EXPECT_OK(gpuwire_waitsome(4, reqs, &out, idx, sts));
            EXPECT(out >= 1 && out <= 2);
            for (i = 0; i < out; i++) {
                EXPECT(idx[i] == 2 || idx[i] == 3);
                EXPECT(i == 0 || idx[i] > idx[i - 1]);
                seen[idx[i]]++;
                if (idx[i] == 2)
                    EXPECT(sts[i].source == rank && sts[i].tag == 31 && sts[i].count == 1 && sts[i].error == GPUWIRE_SUCCESS);
                else
                    EXPECT(sts[i].source == rank && sts[i].tag == 32 && sts[i].count == 3);
            }
            got += out;
        }
        EXPECT(got == 2 && seen[2] == 1 && seen[3] == 1 && reqs[2].h == 0 && reqs[3].h == 0);
        EXPECT(ap[0] == 11 && ap[1] == -1 && bp[0] == 21 && bp[2] == 23);
        EXPECT_OK(gpuwire_waitsome(4, reqs, &out, idx, sts));
        EXPECT(out == GPUWIRE_UNDEFINED);
        /* A failure: an exact receive of 2 elements given 3 (COUNT_MISMATCH), listed with its
         * error, beside a success. */
        EXPECT_OK(gpuwire_irecv(comm, a, rank, 33, NULL, &reqs[1]));
        EXPECT_OK(gpuwire_isend(comm, z, GPUWIRE_PROC_NULL, 0, NULL, &reqs[3]));
        EXPECT_OK(gpuwire_send(comm, t, rank, 33, NULL));
        out = 0;
        gpuwire_status st = GPUWIRE_SUCCESS;
        for (t0 = MPI_Wtime(); out < 2 && MPI_Wtime() - t0 < 10.0;) {
            int32_t n = 0;
            gpuwire_status r = gpuwire_waitsome(4, reqs, &n, idx, sts);
            for (i = 0; i < n; i++)
                if (idx[i] == 1) {
                    EXPECT(sts[i].error == GPUWIRE_ERROR_COUNT_MISMATCH);
                    st = r;
                }
            out += n;
        }
        EXPECT(out == 2 && st == GPUWIRE_ERROR_COUNT_MISMATCH && reqs[1].h == 0 && reqs[3].h == 0);
        EXPECT_LAST_ERROR_HAS("request 1");
        EXPECT_OK(gpuwire_buffer_free(o));
        EXPECT_OK(gpuwire_buffer_free(t));
    }
    bfree(z);
    bfree(a);
    bfree(b);
}

/* ---- allreduce, against answers computed here --------------------------------------------- */

/* What rank q contributes at element i: small values, so every sum and product is exact. */
static int contrib_signed(int q, int i) { return (q * 3 + i) % 4 - 1; } /* -1 .. 2 */
static int contrib_unsigned(int q, int i) { return (q * 3 + i) % 4 + 1; } /* 1 .. 4 */

#define DEFINE_ALLREDUCE_CHECK(FN, T, DT, CONTRIB)                                             \
    static void FN(int32_t op)                                                                 \
    {                                                                                          \
        enum { n = 9 };                                                                        \
        gpuwire_buffer s = balloc(n, DT), r = balloc(n, DT);                                   \
        T *sp = (T *)bptr(s), *rp = (T *)bptr(r), want[n];                                     \
        int i, q;                                                                              \
        for (i = 0; i < n; i++) {                                                              \
            T acc = (T)CONTRIB(0, i);                                                          \
            for (q = 1; q < size; q++) {                                                       \
                T v = (T)CONTRIB(q, i);                                                        \
                if (op == GPUWIRE_SUM || op == GPUWIRE_AVG)                                    \
                    acc = (T)(acc + v);                                                        \
                else if (op == GPUWIRE_PROD)                                                   \
                    acc = (T)(acc * v);                                                        \
                else if (op == GPUWIRE_MAX)                                                    \
                    acc = v > acc ? v : acc;                                                   \
                else if (op == GPUWIRE_MIN)                                                    \
                    acc = v < acc ? v : acc;                                                   \
            }                                                                                  \
            if (op == GPUWIRE_AVG)                                                             \
                acc = (T)(acc / (T)size);                                                      \
            want[i] = acc;                                                                     \
            sp[i] = (T)CONTRIB(rank, i);                                                       \
            rp[i] = (T)99;                                                                     \
        }                                                                                      \
        EXPECT_OK(gpuwire_allreduce(comm, s, r, op, NULL));                                    \
        for (i = 0; i < n; i++)                                                                \
            EXPECT(rp[i] == want[i] && sp[i] == (T)CONTRIB(rank, i));                          \
        EXPECT_OK(gpuwire_allreduce(comm, s, s, op, NULL)); /* in place */                     \
        for (i = 0; i < n; i++)                                                                \
            EXPECT(sp[i] == want[i]);                                                          \
        bfree(s);                                                                              \
        bfree(r);                                                                              \
    }

DEFINE_ALLREDUCE_CHECK(allreduce_i8, int8_t, GPUWIRE_INT8, contrib_signed)
DEFINE_ALLREDUCE_CHECK(allreduce_u8, uint8_t, GPUWIRE_UINT8, contrib_unsigned)
DEFINE_ALLREDUCE_CHECK(allreduce_i32, int32_t, GPUWIRE_INT32, contrib_signed)
DEFINE_ALLREDUCE_CHECK(allreduce_u32, uint32_t, GPUWIRE_UINT32, contrib_unsigned)
DEFINE_ALLREDUCE_CHECK(allreduce_i64, int64_t, GPUWIRE_INT64, contrib_signed)
DEFINE_ALLREDUCE_CHECK(allreduce_u64, uint64_t, GPUWIRE_UINT64, contrib_unsigned)
DEFINE_ALLREDUCE_CHECK(allreduce_f32, float, GPUWIRE_FLOAT32, contrib_signed)
DEFINE_ALLREDUCE_CHECK(allreduce_f64, double, GPUWIRE_FLOAT64, contrib_signed)

static uint32_t contrib_bits(int q, int i)
{
    return (UINT32_C(1) << ((q * 5 + i) % 32)) | (UINT32_C(0x0F0F0F0F) ^ (uint32_t)(q * 0x1111));
}

/* Integer AVG forms the sum in the datatype, wrapping on overflow, then divides (truncating
 * toward zero): the header's rule, computed here in unsigned arithmetic. */
/* Messages to oneself whose receive buffer overlaps the send's (erroneous in MPI: a pending
 * send's buffer written): MPICH copies them with a memcpy that asserts on overlap and aborted
 * the process (helper-100's hunt, 2026-12-07). Each receive gets the send's data, as from any
 * other memory: a blocking receive into a pending isend's own buffer, after a probe too; an
 * irecv posted first, into the memory that a later isend reads; a view overlapping half of the
 * send's, of 16 B and 512 KiB. */
static void self_overlap(void)
{
    enum { big = 1 << 17 };
    gpuwire_buffer b = balloc(big, GPUWIRE_INT64), v;
    int64_t *p = (int64_t *)bptr(b);
    gpuwire_request q[2];
    gpuwire_status_t st;
    int64_t n, i, bad;
    EXPECT_OK(gpuwire_buffer_view(b, 0, 1, &v));
    p[0] = 77 + rank;
    EXPECT_OK(gpuwire_isend(comm, v, rank, 41, NULL, &q[0]));
    EXPECT_OK(gpuwire_recv(comm, v, rank, 41, NULL));
    EXPECT_OK(gpuwire_wait(&q[0]));
    EXPECT(p[0] == 77 + rank);
    EXPECT_OK(gpuwire_isend(comm, v, rank, 42, NULL, &q[0]));
    EXPECT_OK(gpuwire_probe(comm, rank, 42, GPUWIRE_INT64, &st));
    EXPECT(st.count == 1);
    EXPECT_OK(gpuwire_recv(comm, v, rank, 42, NULL));
    EXPECT_OK(gpuwire_wait(&q[0]));
    EXPECT(p[0] == 77 + rank);
    EXPECT_OK(gpuwire_irecv(comm, v, rank, 43, NULL, &q[0]));
    EXPECT_OK(gpuwire_isend(comm, v, rank, 43, NULL, &q[1]));
    EXPECT_OK(gpuwire_waitall(2, q));
    EXPECT(p[0] == 77 + rank);
    bfree(v);
    for (n = 2; n <= big / 2; n *= big / 4) {
        gpuwire_buffer s = bview(b, 0, n), r = bview(b, n / 2, n);
        for (i = 0; i < big; i++)
            p[i] = i * 3 + rank;
        EXPECT_OK(gpuwire_isend(comm, s, rank, 44, NULL, &q[0]));
        EXPECT_OK(gpuwire_irecv(comm, r, rank, 44, NULL, &q[1]));
        EXPECT_OK(gpuwire_waitall(2, q));
        for (i = 0, bad = 0; i < n; i++)
            bad += p[n / 2 + i] != i * 3 + rank;
        EXPECT(bad == 0);
        bfree(s);
        bfree(r);
    }
    bfree(b);
}

static void allreduce_avg_wraps(void)
{
    gpuwire_buffer b32 = balloc(2, GPUWIRE_INT32), b64 = balloc(2, GPUWIRE_INT64);
    int32_t *p32 = (int32_t *)bptr(b32);
    int64_t *p64 = (int64_t *)bptr(b64);
    uint32_t s32[2] = {0, 0};
    uint64_t s64[2] = {0, 0};
    int q, i;
    for (i = 0; i < 2; i++) {
        p32[i] = i == 0 ? 1500000000 : -1500000000 - rank;
        p64[i] = i == 0 ? INT64_MAX - 5 : INT64_MIN + 3 + rank;
    }
    for (q = 0; q < size; q++) {
        s32[0] += (uint32_t)1500000000;
        s32[1] += (uint32_t)(-1500000000 - q);
        s64[0] += (uint64_t)(INT64_MAX - 5);
        s64[1] += (uint64_t)(INT64_MIN + 3 + q);
    }
    EXPECT_OK(gpuwire_allreduce(comm, b32, b32, GPUWIRE_AVG, NULL));
    EXPECT_OK(gpuwire_allreduce(comm, b64, b64, GPUWIRE_AVG, NULL));
    for (i = 0; i < 2; i++) {
        /* uint32_t -> int32_t of a value above INT32_MAX: two's complement, as the header says */
        int32_t w32 = s32[i] > (uint32_t)INT32_MAX ? -(int32_t)(~s32[i]) - 1 : (int32_t)s32[i];
        int64_t w64 = s64[i] > (uint64_t)INT64_MAX ? -(int64_t)(~s64[i]) - 1 : (int64_t)s64[i];
        EXPECT(p32[i] == w32 / size);
        EXPECT(p64[i] == w64 / size);
    }
    bfree(b32);
    bfree(b64);
}

static void allreduce_bitwise(void)
{
    static const int32_t ops[] = {GPUWIRE_BAND, GPUWIRE_BOR, GPUWIRE_BXOR};
    enum { n = 6 };
    gpuwire_buffer s = balloc(n, GPUWIRE_UINT32), r = balloc(n, GPUWIRE_UINT32);
    uint32_t *sp = (uint32_t *)bptr(s), *rp = (uint32_t *)bptr(r), want;
    size_t k;
    int i, q;
    for (k = 0; k < 3; k++) {
        for (i = 0; i < n; i++)
            sp[i] = contrib_bits(rank, i);
        EXPECT_OK(gpuwire_allreduce(comm, s, r, ops[k], NULL));
        for (i = 0; i < n; i++) {
            want = contrib_bits(0, i);
            for (q = 1; q < size; q++)
                want = ops[k] == GPUWIRE_BAND  ? (want & contrib_bits(q, i))
                       : ops[k] == GPUWIRE_BOR ? (want | contrib_bits(q, i))
                                               : (want ^ contrib_bits(q, i));
            EXPECT(rp[i] == want);
        }
    }
    bfree(s);
    bfree(r);
}

/* The logical ops on int32 and uint8 with mixed zeros and nonzeros (256: a zero low byte), and
 * the scans of int32 SUM and LXOR, against serial loops over the ranks' values; a single rank's
 * value passes through unchanged (as MPI); LAND on float32 refused. */
static int32_t logic_val(int q, int i)
{
    static const int32_t v[] = {0, 1, 256, -1, 0, 7, 0};
    return v[(q * 3 + i) % 7];
}

static int32_t logic_ref(int32_t op, int upto, int i)
{
    int32_t acc = logic_val(0, i);
    int q;
    for (q = 1; q < upto; q++) {
        int32_t x = logic_val(q, i);
        acc = op == GPUWIRE_LAND  ? (acc != 0 && x != 0)
              : op == GPUWIRE_LOR ? (acc != 0 || x != 0)
                                  : ((acc != 0) != (x != 0));
    }
    return acc;
}

typedef struct {
    double value;
    int32_t index;
} double_int;

static void logical_scans_and_locs(void)
{
    static const int32_t ops[] = {GPUWIRE_LAND, GPUWIRE_LOR, GPUWIRE_LXOR};
    enum { n = 7 };
    gpuwire_buffer s = balloc(n, GPUWIRE_INT32), r = balloc(n, GPUWIRE_INT32), e = balloc(n, GPUWIRE_INT32);
    int32_t *sp = (int32_t *)bptr(s), *rp = (int32_t *)bptr(r), *ep = (int32_t *)bptr(e);
    gpuwire_request q[2];
    double_int mine[3], got[3], mpi[3];
    gpuwire_buffer bm, bg, bf;
    float f[2] = {1.0f, 2.0f};
    size_t k;
    int i;
    for (k = 0; k < 3; k++) {
        for (i = 0; i < n; i++) {
            sp[i] = logic_val(rank, i);
            ep[i] = -5;
        }
        EXPECT_OK(gpuwire_allreduce(comm, s, r, ops[k], NULL));
        for (i = 0; i < n; i++)
            EXPECT(rp[i] == logic_ref(ops[k], size, i));
        EXPECT_OK(gpuwire_scan(comm, s, r, ops[k], NULL));
        EXPECT_OK(gpuwire_exscan(comm, s, e, ops[k], NULL));
        for (i = 0; i < n; i++) {
            EXPECT(rp[i] == logic_ref(ops[k], rank + 1, i));
            EXPECT(ep[i] == (rank == 0 ? -5 : logic_ref(ops[k], rank, i)));
        }
    }
    /* Nonblocking, in a group: SUM scan and exscan in place. */
    for (i = 0; i < n; i++) {
        sp[i] = rank * 10 + i;
        ep[i] = rank * 10 + i;
    }
    EXPECT_OK(gpuwire_group_start());
    EXPECT_OK(gpuwire_iscan(comm, s, r, GPUWIRE_SUM, NULL, &q[0]));
    EXPECT_OK(gpuwire_iexscan(comm, e, e, GPUWIRE_SUM, NULL, &q[1]));
    EXPECT_OK(gpuwire_group_end());
    EXPECT_OK(gpuwire_waitall(2, q));
    for (i = 0; i < n; i++) {
        EXPECT(rp[i] == 10 * rank * (rank + 1) / 2 + (rank + 1) * i);
        EXPECT(ep[i] == (rank == 0 ? i : 10 * (rank - 1) * rank / 2 + rank * i));
    }
    /* Rank 0's exscan receive buffer is not significant (MPI_Exscan): GPUWIRE_BUFFER_NULL there,
     * blocking and nonblocking; rank 0's send buffer stays as it was. */
    for (i = 0; i < n; i++) {
        sp[i] = rank * 10 + i;
        ep[i] = -5;
    }
    EXPECT_OK(gpuwire_exscan(comm, s, rank == 0 ? GPUWIRE_BUFFER_NULL : e, GPUWIRE_SUM, NULL));
    for (i = 0; i < n; i++)
        EXPECT(ep[i] == (rank == 0 ? -5 : 10 * (rank - 1) * rank / 2 + rank * i) && sp[i] == rank * 10 + i);
    EXPECT_OK(gpuwire_iexscan(comm, s, rank == 0 ? GPUWIRE_BUFFER_NULL : e, GPUWIRE_MAX, NULL, &q[0]));
    EXPECT_OK(gpuwire_wait(&q[0]));
    for (i = 0; i < n; i++)
        EXPECT(ep[i] == (rank == 0 ? -5 : (rank - 1) * 10 + i) && sp[i] == rank * 10 + i);
    /* ... also where rank 0 sends from a view that cannot be received into (stride 0: its 7
     * elements are sp[0], 0). */
    {
        gpuwire_buffer z;
        for (i = 0; i < n; i++)
            ep[i] = -5;
        EXPECT_OK(gpuwire_buffer_view_strided(s, 0, n, 1, 0, &z));
        EXPECT_OK(gpuwire_exscan(comm, rank == 0 ? z : s, rank == 0 ? GPUWIRE_BUFFER_NULL : e, GPUWIRE_SUM, NULL));
        for (i = 0; i < n; i++)
            EXPECT(ep[i] == (rank == 0 ? -5 : 10 * (rank - 1) * rank / 2 + (rank - 1) * i) && sp[i] == rank * 10 + i);
        bfree(z);
    }
    /* A scan's is significant on every rank. */
    EXPECT_STATUS(gpuwire_scan(comm, s, GPUWIRE_BUFFER_NULL, GPUWIRE_SUM, NULL), GPUWIRE_ERROR_INVALID_HANDLE);
    /* MINLOC on MPI_DOUBLE_INT's C layout, against MPI's own MPI_MINLOC and a serial loop:
     * values tie on even and odd ranks; the lowest index wins. */
    for (i = 0; i < 3; i++) {
        mine[i].value = (double)((rank + i) % 2);
        mine[i].index = i == 1 ? 100 - rank : rank;
        got[i].value = -1;
        got[i].index = -1;
    }
    EXPECT_OK(gpuwire_buffer_wrap(mine, 3, GPUWIRE_FLOAT64_INT32, GPUWIRE_SPACE_HOST, &bm));
    EXPECT_OK(gpuwire_buffer_wrap(got, 3, GPUWIRE_FLOAT64_INT32, GPUWIRE_SPACE_HOST, &bg));
    EXPECT_OK(gpuwire_allreduce(comm, bm, bg, GPUWIRE_MINLOC, NULL));
    MPI_Allreduce(mine, mpi, 3, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD);
    for (i = 0; i < 3; i++) {
        double_int want = {(double)(i % 2), 0};
        int qq, first = 1;
        for (qq = 0; qq < size; qq++) {
            double_int c = {(double)((qq + i) % 2), i == 1 ? 100 - qq : qq};
            if (first || c.value < want.value || (c.value == want.value && c.index < want.index))
                want = c;
            first = 0;
        }
        EXPECT(got[i].value == want.value && got[i].index == want.index);
        EXPECT(got[i].value == mpi[i].value && got[i].index == mpi[i].index);
    }
    EXPECT_OK(gpuwire_allreduce(comm, bm, bg, GPUWIRE_MAXLOC, NULL));
    MPI_Allreduce(mine, mpi, 3, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
    for (i = 0; i < 3; i++)
        EXPECT(got[i].value == mpi[i].value && got[i].index == mpi[i].index);
    /* Bad input: LAND on float32, MINLOC on int32, SUM on a pair: refused, nothing written. */
    EXPECT_OK(gpuwire_buffer_wrap(f, 2, GPUWIRE_FLOAT32, GPUWIRE_SPACE_HOST, &bf));
    EXPECT_STATUS(gpuwire_allreduce(comm, bf, bf, GPUWIRE_LAND, NULL), GPUWIRE_ERROR_UNSUPPORTED_OP);
    EXPECT_STATUS(gpuwire_scan(comm, bf, bf, GPUWIRE_LOR, NULL), GPUWIRE_ERROR_UNSUPPORTED_OP);
    EXPECT(f[0] == 1.0f && f[1] == 2.0f);
    EXPECT_STATUS(gpuwire_allreduce(comm, s, r, GPUWIRE_MINLOC, NULL), GPUWIRE_ERROR_UNSUPPORTED_OP);
    EXPECT_STATUS(gpuwire_exscan(comm, bm, bg, GPUWIRE_SUM, NULL), GPUWIRE_ERROR_UNSUPPORTED_OP);
    bfree(bf);
    bfree(bm);
    bfree(bg);
    bfree(s);
    bfree(r);
    bfree(e);
}

/* IEEE binary16 and bfloat16 encodings of a small positive integer k (exact). */
static uint16_t f16_of(int k)
{
    int e = 0;
    while ((k >> (e + 1)) != 0)
        e++;
    return (uint16_t)(((e + 15) << 10) | ((k - (1 << e)) << (10 - e)));
}

static uint16_t bf16_of(int k)
{
    float f = (float)k;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}

static void allreduce_half(int32_t dtype)
{
    uint16_t (*enc)(int) = dtype == GPUWIRE_FLOAT16 ? f16_of : bf16_of;
    gpuwire_buffer b = balloc(1, dtype);
    uint16_t *v = (uint16_t *)bptr(b);
    EXPECT(f16_of(1) == 0x3C00 && f16_of(3) == 0x4200 && bf16_of(1) == 0x3F80);
    *v = enc(1);
    EXPECT_OK(gpuwire_allreduce(comm, b, b, GPUWIRE_SUM, NULL));
    EXPECT(*v == enc(size));
    *v = enc(rank + 1);
    EXPECT_OK(gpuwire_allreduce(comm, b, b, GPUWIRE_MAX, NULL));
    EXPECT(*v == enc(size));
    *v = enc(rank + 1);
    EXPECT_OK(gpuwire_allreduce(comm, b, b, GPUWIRE_MIN, NULL));
    EXPECT(*v == enc(1));
    *v = enc(2);
    EXPECT_OK(gpuwire_allreduce(comm, b, b, GPUWIRE_PROD, NULL));
    EXPECT(*v == enc(1 << size));
    *v = enc(2);
    EXPECT_OK(gpuwire_allreduce(comm, b, b, GPUWIRE_AVG, NULL));
    EXPECT(*v == enc(2));
    bfree(b);
}

static void allreduce_complex(void)
{
    enum { n = 3 };
    gpuwire_buffer s = balloc(n, GPUWIRE_COMPLEX128), r = balloc(n, GPUWIRE_COMPLEX128);
    gpuwire_buffer s64 = balloc(n, GPUWIRE_COMPLEX64);
    double complex *sp = (double complex *)bptr(s), *rp = (double complex *)bptr(r);
    float complex *fp = (float complex *)bptr(s64);
    double complex sum, prod, z;
    int i, q;
    for (i = 0; i < n; i++) {
        sp[i] = (double)(rank + 1) + (double)(i - rank) * I;
        fp[i] = (float)(rank + 1) + (float)(i - rank) * I;
    }
    EXPECT_OK(gpuwire_allreduce(comm, s, r, GPUWIRE_SUM, NULL));
    EXPECT_OK(gpuwire_allreduce(comm, s64, s64, GPUWIRE_SUM, NULL));
    for (i = 0; i < n; i++) {
        sum = 0;
        for (q = 0; q < size; q++)
            sum += (double)(q + 1) + (double)(i - q) * I;
        EXPECT(rp[i] == sum);
        EXPECT(crealf(fp[i]) == (float)creal(sum) && cimagf(fp[i]) == (float)cimag(sum));
    }
    /* PROD is complex multiplication (exact on these small integers in any order). */
    EXPECT_OK(gpuwire_allreduce(comm, s, r, GPUWIRE_PROD, NULL));
    for (i = 0; i < n; i++) {
        prod = 1;
        for (q = 0; q < size; q++) {
            z = (double)(q + 1) + (double)(i - q) * I;
            prod *= z;
        }
        EXPECT(creal(rp[i]) == creal(prod) && cimag(rp[i]) == cimag(prod));
    }
    /* AVG divides both parts by the rank count. */
    EXPECT_OK(gpuwire_allreduce(comm, s, r, GPUWIRE_AVG, NULL));
    for (i = 0; i < n; i++) {
        sum = 0;
        for (q = 0; q < size; q++)
            sum += (double)(q + 1) + (double)(i - q) * I;
        EXPECT(creal(rp[i]) == creal(sum) / size && cimag(rp[i]) == cimag(sum) / size);
    }
    /* Complex numbers have no order: MIN/MAX are refused on every rank. */
    EXPECT_STATUS(gpuwire_allreduce(comm, s, r, GPUWIRE_MAX, NULL), GPUWIRE_ERROR_UNSUPPORTED_OP);
    bfree(s64);
    bfree(s);
    bfree(r);
}

static void allreduce_errors(void)
{
    gpuwire_buffer a = balloc(8, GPUWIRE_FLOAT64), f = balloc(8, GPUWIRE_FLOAT32);
    gpuwire_buffer lo = bview(a, 0, 4), hi = bview(a, 2, 4), five = bview(a, 0, 5);
    /* Local argument errors: every rank makes the same one, so none waits for the others. */
    EXPECT_STATUS(gpuwire_allreduce(comm, a, a, GPUWIRE_BAND, NULL), GPUWIRE_ERROR_UNSUPPORTED_OP);
    EXPECT_LAST_ERROR_HAS("BAND");
    EXPECT_STATUS(gpuwire_allreduce(comm, a, a, 99, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(gpuwire_allreduce(comm, lo, hi, GPUWIRE_SUM, NULL),
                  GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("overlap");
    EXPECT_STATUS(gpuwire_allreduce(comm, lo, five, GPUWIRE_SUM, NULL),
                  GPUWIRE_ERROR_COUNT_MISMATCH);
    EXPECT_STATUS(gpuwire_allreduce(comm, a, f, GPUWIRE_SUM, NULL), GPUWIRE_ERROR_DTYPE_MISMATCH);
    EXPECT_STATUS(gpuwire_allreduce(comm, a, GPUWIRE_BUFFER_NULL, GPUWIRE_SUM, NULL),
                  GPUWIRE_ERROR_INVALID_HANDLE);
    EXPECT_STATUS(gpuwire_bcast(comm, a, size, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
    bfree(five);
    bfree(hi);
    bfree(lo);
    bfree(f);
    bfree(a);
}

/* ---- the other collectives ---------------------------------------------------------------- */

static void bcast_reduce(void)
{
    gpuwire_buffer b = balloc(5, GPUWIRE_INT32), s = balloc(3, GPUWIRE_FLOAT64), r;
    int32_t *bp = (int32_t *)bptr(b);
    double *sp = (double *)bptr(s), *rp;
    int root, i, q;

    EXPECT_OK(gpuwire_barrier(comm, NULL));
    for (root = 0; root < size; root++) {
        for (i = 0; i < 5; i++)
            bp[i] = rank == root ? root * 100 + i : -1;
        EXPECT_OK(gpuwire_bcast(comm, b, root, NULL));
        for (i = 0; i < 5; i++)
            EXPECT(bp[i] == root * 100 + i);
    }

    /* reduce to the last rank; the others pass GPUWIRE_BUFFER_NULL. */
    root = size - 1;
    r = rank == root ? balloc(3, GPUWIRE_FLOAT64) : GPUWIRE_BUFFER_NULL;
    for (i = 0; i < 3; i++)
        sp[i] = (rank + 1) * (i + 0.5);
    EXPECT_OK(gpuwire_reduce(comm, s, r, GPUWIRE_SUM, root, NULL));
    if (rank == root) {
        rp = (double *)bptr(r);
        for (i = 0; i < 3; i++) {
            double want = 0.0;
            for (q = 0; q < size; q++)
                want += (q + 1) * (i + 0.5);
            EXPECT(rp[i] == want);
        }
        bfree(r);
    }
    for (i = 0; i < 3; i++)
        EXPECT(sp[i] == (rank + 1) * (i + 0.5)); /* the send buffer is not changed */
    /* reduce in place at root 0 (send == recv there), MAX. */
    EXPECT_OK(gpuwire_reduce(comm, s, rank == 0 ? s : GPUWIRE_BUFFER_NULL, GPUWIRE_MAX, 0, NULL));
    if (rank == 0)
        for (i = 0; i < 3; i++)
            EXPECT(sp[i] == size * (i + 0.5));
    bfree(s);
    bfree(b);
}

static void gathers(void)
{
    enum { n = 3 };
    gpuwire_buffer s = balloc(n, GPUWIRE_INT64), all = balloc((int64_t)n * size, GPUWIRE_INT64);
    gpuwire_buffer mine = bview(all, (int64_t)n * rank, n), g;
    int64_t *sp = (int64_t *)bptr(s), *ap = (int64_t *)bptr(all), *gp;
    int i, q, root;

    for (i = 0; i < n; i++)
        sp[i] = rank * 10 + i;
    EXPECT_OK(gpuwire_allgather(comm, s, all, NULL));
    for (q = 0; q < size; q++)
        for (i = 0; i < n; i++)
            EXPECT(ap[q * n + i] == q * 10 + i);
    /* In place: the send buffer is this rank's block of the receive buffer. */
    memset(ap, 0, sizeof(int64_t) * n * (size_t)size);
    for (i = 0; i < n; i++)
        ap[rank * n + i] = rank * 20 + i;
    EXPECT_OK(gpuwire_allgather(comm, mine, all, NULL));
    for (q = 0; q < size; q++)
        for (i = 0; i < n; i++)
            EXPECT(ap[q * n + i] == q * 20 + i);
    EXPECT_STATUS(gpuwire_allgather(comm, s, s, NULL),
                  size == 1 ? GPUWIRE_SUCCESS : GPUWIRE_ERROR_COUNT_MISMATCH);

    /* gather to the first and to the last rank; non-roots pass GPUWIRE_BUFFER_NULL. */
    for (root = 0; root < size; root += (size > 1 ? size - 1 : 1)) {
        g = rank == root ? balloc((int64_t)n * size, GPUWIRE_INT64) : GPUWIRE_BUFFER_NULL;
        EXPECT_OK(gpuwire_gather(comm, s, g, root, NULL));
        if (rank == root) {
            gp = (int64_t *)bptr(g);
            for (q = 0; q < size; q++)
                for (i = 0; i < n; i++)
                    EXPECT(gp[q * n + i] == q * 10 + i);
            bfree(g);
        }
    }
    /* gather in place at the root. */
    for (i = 0; i < n; i++)
        ap[rank * n + i] = rank * 30 + i;
    EXPECT_OK(gpuwire_gather(comm, rank == 0 ? mine : s, rank == 0 ? all : GPUWIRE_BUFFER_NULL, 0,
                             NULL));
    if (rank == 0)
        for (q = 0; q < size; q++)
            for (i = 0; i < n; i++)
                EXPECT(ap[q * n + i] == (q == 0 ? 30 * q + i : q * 10 + i));
    bfree(mine);
    bfree(all);
    bfree(s);
}

static void scatters_and_alltoall(void)
{
    enum { n = 2 };
    gpuwire_buffer r = balloc(n, GPUWIRE_INT32), src, rs, a2a_s, a2a_r, mine;
    int32_t *rp = (int32_t *)bptr(r), *p, *q2;
    int root = size - 1, i, q, d;

    /* scatter from the last rank; non-roots pass GPUWIRE_BUFFER_NULL. */
    src = rank == root ? balloc((int64_t)n * size, GPUWIRE_INT32) : GPUWIRE_BUFFER_NULL;
    if (rank == root) {
        p = (int32_t *)bptr(src);
        for (q = 0; q < size; q++)
            for (i = 0; i < n; i++)
                p[q * n + i] = q * 7 + i;
    }
    EXPECT_OK(gpuwire_scatter(comm, src, r, root, NULL));
    for (i = 0; i < n; i++)
        EXPECT(rp[i] == rank * 7 + i);
    /* in place at the root: its receive buffer is its own block of the send buffer. */
    if (rank == root) {
        mine = bview(src, (int64_t)n * root, n);
        p = (int32_t *)bptr(src);
        for (q = 0; q < size; q++)
            for (i = 0; i < n; i++)
                p[q * n + i] = q * 9 + i;
        EXPECT_OK(gpuwire_scatter(comm, src, mine, root, NULL));
        for (i = 0; i < n; i++)
            EXPECT(p[root * n + i] == root * 9 + i);
        bfree(mine);
        bfree(src);
    } else {
        EXPECT_OK(gpuwire_scatter(comm, GPUWIRE_BUFFER_NULL, r, root, NULL));
        for (i = 0; i < n; i++)
            EXPECT(rp[i] == rank * 9 + i);
    }

    /* reduce_scatter: block b of the sum goes to rank b. */
    rs = balloc((int64_t)n * size, GPUWIRE_INT32);
    p = (int32_t *)bptr(rs);
    for (d = 0; d < size; d++)
        for (i = 0; i < n; i++)
            p[d * n + i] = (rank + 1) * (d * n + i + 1);
    EXPECT_OK(gpuwire_reduce_scatter(comm, rs, r, GPUWIRE_SUM, NULL));
    for (i = 0; i < n; i++)
        EXPECT(rp[i] == (rank * n + i + 1) * size * (size + 1) / 2);
    bfree(rs);

    /* alltoall: block d of rank s's send buffer lands in block s of rank d's receive buffer. */
    a2a_s = balloc((int64_t)n * size, GPUWIRE_INT32);
    a2a_r = balloc((int64_t)n * size, GPUWIRE_INT32);
    p = (int32_t *)bptr(a2a_s);
    q2 = (int32_t *)bptr(a2a_r);
    for (d = 0; d < size; d++)
        for (i = 0; i < n; i++)
            p[d * n + i] = rank * 1000 + d * 10 + i;
    EXPECT_OK(gpuwire_alltoall(comm, a2a_s, a2a_r, NULL));
    for (q = 0; q < size; q++)
        for (i = 0; i < n; i++)
            EXPECT(q2[q * n + i] == q * 1000 + rank * 10 + i);
    EXPECT_OK(gpuwire_alltoall(comm, a2a_s, a2a_s, NULL)); /* in place */
    for (q = 0; q < size; q++)
        for (i = 0; i < n; i++)
            EXPECT(p[q * n + i] == q * 1000 + rank * 10 + i);
    bfree(a2a_r);
    bfree(a2a_s);
    bfree(r);

    /* In place on one rank only (the last), with blocks of 99132 bytes: MPI_IN_PLACE must be on
     * every rank or none, and MPICH hung on 4 ranks (helper-102's differential tester,
     * 2026-12-07); gpuwire's in place sends from a copy. */
    {
        enum { big = 99132 };
        int inplace = rank == size - 1;
        gpuwire_buffer bs = balloc((int64_t)big * size, GPUWIRE_INT8), br = inplace ? bs : balloc((int64_t)big * size, GPUWIRE_INT8);
        int8_t *sp = (int8_t *)bptr(bs), *rp8 = (int8_t *)bptr(br);
        long bad = 0, k;
        for (k = 0; k < (long)big * size; k++)
            sp[k] = (int8_t)(rank * 16 + k / big + k % 3);
        EXPECT_OK(gpuwire_alltoall(comm, bs, br, NULL));
        for (q = 0; q < size; q++)
            for (k = 0; k < big; k++)
                bad += rp8[(long)q * big + k] != (int8_t)(q * 16 + rank + ((long)rank * big + k) % 3);
        EXPECT(bad == 0);
        if (!inplace)
            bfree(br);
        bfree(bs);
    }
}

/* allgatherv with rank r sending count(r) elements; counts given, or exchanged by gpuwire. */
static void allgatherv_with(int zero_first)
{
    int64_t counts[64], total = 0, off = 0, mycount, bad[64];
    gpuwire_buffer s, all, mine;
    double *sp, *ap;
    int q, i;
    for (q = 0; q < size; q++) {
        counts[q] = (zero_first && q == 0) ? 0 : q + 1;
        total += counts[q];
        if (q < rank)
            off += counts[q];
    }
    mycount = counts[rank];
    s = balloc(mycount, GPUWIRE_FLOAT64);
    all = balloc(total, GPUWIRE_FLOAT64);
    sp = (double *)bptr(s);
    ap = (double *)bptr(all);
    for (i = 0; i < mycount; i++)
        sp[i] = rank * 100 + i + 0.25;

    EXPECT_OK(gpuwire_allgatherv(comm, s, all, counts, NULL));
    for (q = 0, off = 0; q < size; off += counts[q], q++)
        for (i = 0; i < counts[q]; i++)
            EXPECT(ap[off + i] == q * 100 + i + 0.25);
    if (total > 0) /* an empty buffer's pointer is NULL */
        memset(ap, 0, sizeof(double) * (size_t)total);
    EXPECT_OK(gpuwire_allgatherv(comm, s, all, NULL, NULL)); /* counts exchanged */
    for (q = 0, off = 0; q < size; off += counts[q], q++)
        for (i = 0; i < counts[q]; i++)
            EXPECT(ap[off + i] == q * 100 + i + 0.25);

    /* In place: this rank's block of the receive buffer is the send buffer. */
    for (q = 0, off = 0; q < rank; q++)
        off += counts[q];
    if (total > 0) /* an empty buffer's pointer is NULL */
        memset(ap, 0, sizeof(double) * (size_t)total);
    for (i = 0; i < mycount; i++)
        ap[off + i] = rank * 200 + i;
    mine = bview(all, off, mycount);
    EXPECT_OK(gpuwire_allgatherv(comm, mine, all, counts, NULL));
    for (q = 0, off = 0; q < size; off += counts[q], q++)
        for (i = 0; i < counts[q]; i++)
            EXPECT(ap[off + i] == q * 200 + i);

    /* Argument errors made alike on every rank. */
    memcpy(bad, counts, sizeof(int64_t) * (size_t)size);
    bad[size - 1] = -1;
    EXPECT_STATUS(gpuwire_allgatherv(comm, s, all, bad, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("is negative");
    memcpy(bad, counts, sizeof(int64_t) * (size_t)size);
    bad[rank] += 1; /* every rank claims one element more than it sends */
    EXPECT_STATUS(gpuwire_allgatherv(comm, s, all, bad, NULL), GPUWIRE_ERROR_COUNT_MISMATCH);
    bfree(mine);
    bfree(all);
    bfree(s);
}

/* ---- split -------------------------------------------------------------------------------- */

static void split(void)
{
    gpuwire_comm half = {77}, sub = {77};
    int32_t r, s;
    int color = rank % 2, members = 0, my_index = 0, q;
    int64_t sum = 0, *v;
    gpuwire_buffer b;
    char text[1024], want[64];

    /* color = parity, key = -rank: each half in descending world-rank order. */
    EXPECT_OK(gpuwire_comm_split(comm, color, -rank, &half));
    for (q = size - 1; q >= 0; q--)
        if (q % 2 == color) {
            if (q == rank)
                my_index = members;
            members++;
            sum += q;
        }
    EXPECT_OK(gpuwire_comm_rank(half, &r));
    EXPECT_OK(gpuwire_comm_size(half, &s));
    EXPECT(s == members && r == my_index);
    b = balloc(1, GPUWIRE_INT64);
    v = (int64_t *)bptr(b);
    *v = rank;
    EXPECT_OK(gpuwire_allreduce(half, b, b, GPUWIRE_SUM, NULL));
    EXPECT(*v == sum); /* only the same-parity ranks took part */
    EXPECT_OK(gpuwire_comm_describe(half, text, sizeof text));
    snprintf(want, sizeof want, "rank %d/%d", my_index, members);
    EXPECT(strstr(text, want) != NULL);

    /* A split of the split, and GPUWIRE_UNDEFINED: the first rank of each half sits out. */
    EXPECT_OK(gpuwire_comm_split(half, r == 0 ? GPUWIRE_UNDEFINED : 0, 0, &sub));
    if (r == 0) {
        EXPECT(sub.h == 0);
    } else {
        EXPECT_OK(gpuwire_comm_size(sub, &s));
        EXPECT(s == members - 1);
        *v = 1;
        EXPECT_OK(gpuwire_allreduce(sub, b, b, GPUWIRE_SUM, NULL));
        EXPECT(*v == members - 1);
        EXPECT_OK(gpuwire_comm_free(sub));
    }
    /* MPI's own MPI_UNDEFINED too (as MPI_PROC_NULL is taken; it was INVALID_ARGUMENT). */
    EXPECT_OK(gpuwire_comm_split(half, r == 0 ? MPI_UNDEFINED : 0, 0, &sub));
    if (r == 0) {
        EXPECT(sub.h == 0);
    } else {
        EXPECT_OK(gpuwire_comm_size(sub, &s));
        EXPECT(s == members - 1);
        EXPECT_OK(gpuwire_comm_free(sub));
    }
    bfree(b);
    EXPECT_OK(gpuwire_comm_free(half));

    /* A NULL output pointer on the last rank only: NULL_ARGUMENT on every rank (the ranks agree
     * on it), never the others waiting in MPI_Comm_split / MPI_Comm_dup; nothing is made. */
    sub.h = 77;
    EXPECT_STATUS(gpuwire_comm_split(comm, 0, 0, rank == size - 1 ? NULL : &sub),
                  GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("out");
    EXPECT(sub.h == 77);
    EXPECT_STATUS(gpuwire_comm_dup(comm, rank == size - 1 ? NULL : &sub), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("out");
    EXPECT(sub.h == 77);
    /* And the communicator still works. */
    EXPECT_OK(gpuwire_comm_dup(comm, &sub));
    EXPECT_OK(gpuwire_comm_free(sub));
}

/* ---- checking mode ------------------------------------------------------------------------ */

static void checking_mode(void)
{
    gpuwire_config cfg;
    gpuwire_comm cc;
    gpuwire_buffer a, b, f, stale;
    double *ap, *bp;
    int i;

    EXPECT_OK(gpuwire_config_init(&cfg));
    cfg.check = 1;
    EXPECT_OK(gpuwire_comm_world(&cfg, &cc));
    a = balloc(4, GPUWIRE_FLOAT64);
    b = balloc(5, GPUWIRE_FLOAT64);
    f = balloc(4, GPUWIRE_FLOAT32);
    stale = balloc(4, GPUWIRE_FLOAT64);
    bfree(stale);
    ap = (double *)bptr(a);
    bp = (double *)bptr(b);

    for (i = 0; i < 4; i++)
        ap[i] = rank + i;
    EXPECT_OK(gpuwire_allreduce(cc, a, a, GPUWIRE_SUM, NULL)); /* agreed, then done */
    EXPECT(ap[3] == size * 3.0 + size * (size - 1) / 2.0);

    if (size < 2) {
        printf("test_comm: note: cross-rank disagreement checks need >= 2 ranks (run with 2, 3)\n");
    } else {
        /* Different counts: every rank gets COUNT_MISMATCH and no data moves. */
        for (i = 0; i < 5; i++)
            bp[i] = -1.0;
        EXPECT_STATUS(gpuwire_allreduce(cc, rank == 0 ? b : a, rank == 0 ? b : a, GPUWIRE_SUM,
                                        NULL),
                      GPUWIRE_ERROR_COUNT_MISMATCH);
        EXPECT_LAST_ERROR_HAS("nothing was done on any rank");
        EXPECT(bp[0] == -1.0);
        EXPECT_STATUS(gpuwire_allreduce(cc, rank == 0 ? f : a, rank == 0 ? f : a, GPUWIRE_SUM,
                                        NULL),
                      GPUWIRE_ERROR_DTYPE_MISMATCH);
        EXPECT_STATUS(gpuwire_allreduce(cc, a, a, rank == 0 ? GPUWIRE_MAX : GPUWIRE_SUM, NULL),
                      GPUWIRE_ERROR_OP_MISMATCH);
        EXPECT_STATUS(gpuwire_bcast(cc, a, rank % 2, NULL), GPUWIRE_ERROR_ROOT_MISMATCH);
        /* In place on rank 0 only: MPI_IN_PLACE must be on every rank or none (a mix hung or
         * corrupted the heap in Open MPI's nonblocking allreduce; helper-102). */
        {
            gpuwire_buffer c4 = balloc(4, GPUWIRE_FLOAT64);
            double *cp = (double *)bptr(c4);
            for (i = 0; i < 4; i++)
                cp[i] = -2.0;
            EXPECT_STATUS(gpuwire_allreduce(cc, a, rank == 0 ? a : c4, GPUWIRE_SUM, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
            EXPECT_LAST_ERROR_HAS("in place and others not");
            EXPECT(cp[0] == -2.0);
            EXPECT_STATUS(gpuwire_scan(cc, a, rank == 0 ? a : c4, GPUWIRE_SUM, NULL), GPUWIRE_ERROR_INVALID_ARGUMENT);
            bfree(c4);
        }
        /* One rank's bad argument: it gets its own error, the others REMOTE_ARGUMENT. */
        EXPECT_STATUS(gpuwire_allreduce(cc, a, a, rank == 0 ? 99 : GPUWIRE_SUM, NULL),
                      rank == 0 ? GPUWIRE_ERROR_INVALID_ARGUMENT : GPUWIRE_ERROR_REMOTE_ARGUMENT);
        if (rank != 0)
            EXPECT_LAST_ERROR_HAS("rank 0 rejected its arguments");
        EXPECT_STATUS(gpuwire_bcast(cc, rank == size - 1 ? stale : a, 0, NULL),
                      rank == size - 1 ? GPUWIRE_ERROR_INVALID_HANDLE
                                       : GPUWIRE_ERROR_REMOTE_ARGUMENT);
        EXPECT_STATUS(gpuwire_reduce(cc, a, GPUWIRE_BUFFER_NULL, GPUWIRE_SUM, 0, NULL),
                      rank == 0 ? GPUWIRE_ERROR_INVALID_ARGUMENT : GPUWIRE_ERROR_REMOTE_ARGUMENT);
        /* allgatherv with recvcounts on rank 0 and NULL elsewhere: the message says so (it
         * once read "different element counts (from -1 to N)", -1 standing for NULL). */
        {
            int64_t counts[64];
            gpuwire_buffer one = bview(a, 0, 1), all = balloc(size, GPUWIRE_FLOAT64);
            for (i = 0; i < size && i < 64; i++)
                counts[i] = 1;
            EXPECT_STATUS(gpuwire_allgatherv(cc, one, all, rank == 0 ? counts : NULL, NULL),
                          GPUWIRE_ERROR_COUNT_MISMATCH);
            EXPECT_LAST_ERROR_HAS("some ranks passed recvcounts and others NULL");
            bfree(all);
            bfree(one);
        }
    }
    /* The communicator still works after refused calls. */
    for (i = 0; i < 4; i++)
        ap[i] = 1.0;
    EXPECT_OK(gpuwire_allreduce(cc, a, a, GPUWIRE_SUM, NULL));
    EXPECT(ap[0] == (double)size);

    bfree(f);
    bfree(b);
    bfree(a);
    EXPECT_OK(gpuwire_comm_free(cc));
}

int main(int argc, char **argv)
{
    int provided, finalized = -1, expected;
    int32_t flag = -1, level = -1;
    long failures, total = 0;

    if (argc != 2) {
        fprintf(stderr, "usage: test_comm EXPECTED_RANKS\n");
        return 2;
    }
    expected = atoi(argv[1]);
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gwt_rank = rank;
    if (size != expected) {
        fprintf(stderr, "test_comm: launched on %d ranks, expected %d (wrong launcher?)\n", size,
                expected);
        MPI_Finalize();
        return 1;
    }
    if (size > 64) {
        fprintf(stderr, "test_comm: at most 64 ranks\n");
        MPI_Finalize();
        return 1;
    }

    EXPECT_OK(gpuwire_init());
    EXPECT_OK(gpuwire_owns_mpi(&flag));
    EXPECT(flag == 0); /* the program initialized MPI: gpuwire adopted it */
    EXPECT_OK(gpuwire_query_thread(&level));
    EXPECT(level == gw_thread_level(provided));
    EXPECT_OK(gpuwire_comm_create((int32_t)MPI_Comm_c2f(MPI_COMM_WORLD), NULL, &comm));

    from_mpi_handles();
    point_to_point();
    request_free();
    cancel_requests();
    some_requests();
    self_overlap();
    allreduce_i8(GPUWIRE_SUM);
    allreduce_i8(GPUWIRE_AVG);
    allreduce_i8(GPUWIRE_MIN);
    allreduce_u8(GPUWIRE_PROD);
    allreduce_u8(GPUWIRE_MAX);
    allreduce_i32(GPUWIRE_SUM);
    allreduce_i32(GPUWIRE_PROD);
    allreduce_i32(GPUWIRE_MAX);
    allreduce_i32(GPUWIRE_MIN);
    allreduce_i32(GPUWIRE_AVG);
    allreduce_u32(GPUWIRE_SUM);
    allreduce_u32(GPUWIRE_AVG);
    allreduce_i64(GPUWIRE_SUM);
    allreduce_i64(GPUWIRE_PROD);
    allreduce_i64(GPUWIRE_AVG);
    allreduce_u64(GPUWIRE_MIN);
    allreduce_u64(GPUWIRE_SUM);
    allreduce_f32(GPUWIRE_SUM);
    allreduce_f32(GPUWIRE_PROD);
    allreduce_f32(GPUWIRE_AVG);
    allreduce_f64(GPUWIRE_SUM);
    allreduce_f64(GPUWIRE_PROD);
    allreduce_f64(GPUWIRE_MAX);
    allreduce_f64(GPUWIRE_MIN);
    allreduce_f64(GPUWIRE_AVG);
    allreduce_avg_wraps();
    allreduce_bitwise();
    logical_scans_and_locs();
    allreduce_half(GPUWIRE_FLOAT16);
    allreduce_half(GPUWIRE_BFLOAT16);
    allreduce_complex();
    allreduce_errors();
    bcast_reduce();
    gathers();
    scatters_and_alltoall();
    allgatherv_with(0);
    allgatherv_with(1);
    split();
    checking_mode();

    EXPECT_OK(gpuwire_comm_free(comm));
    EXPECT_OK(gpuwire_finalize());
    /* gpuwire did not own MPI: it is still up, and the world still works. */
    MPI_Finalized(&finalized);
    EXPECT(finalized == 0);
    failures = gwt_failures();
    MPI_Allreduce(&failures, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (failures > 0)
        fprintf(stderr, "test_comm: rank %d: %ld of %ld checks failed\n", rank, failures,
                gwt_checks);
    if (rank == 0) {
        if (total == 0)
            printf("test_comm: PASS (%ld checks on rank 0, %d ranks)\n", gwt_checks, size);
        else
            printf("test_comm: FAIL (%ld failed checks over all ranks)\n", total);
    }
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
