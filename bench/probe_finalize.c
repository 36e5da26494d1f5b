/* MPICH finalize probe: may another thread make MPI calls while MPI_Finalize runs the delete
 * callbacks of MPI_COMM_SELF's attributes? (Plain MPI, no gpuwire.) Found as an intermittent
 * failure of `test_finalize mpifinalize` with MPICH 4.0.2 (Debian 12): rank 0's MPI_Finalize
 * printed "Error in system call pthread_mutex_destroy: Device or resource busy", asserted in
 * src/mpi/init/mutex.c and exited 1. In that mode the program calls MPI_Finalize right after
 * queuing a nonblocking barrier and allreduce, without gpuwire_finalize; gpuwire learns of it in
 * such a callback (`runtime::watch_finalize`) and waits there while its engine thread runs the
 * queued operations (`ffi::lifecycle::at_mpi_finalize`): MPI calls of another thread during
 * MPI_Finalize.
 *
 * mpicc.mpich -O1 -pthread bench/probe_finalize.c -o probe_finalize
 * mpiexec.mpich -np 1 gdb -q -batch -ex run --args ./probe_finalize MODE : -np 1 ./probe_finalize MODE
 *
 * Each rank duplicates MPI_COMM_WORLD and sets an attribute on MPI_COMM_SELF; a second thread
 * calls MPI_Barrier and an MPI_Allreduce of 8 MiB on the duplicate (rank 1 starts 100 ms late);
 * the main thread calls MPI_Finalize, whose callback joins the thread. MODE:
 *   (none)  the thread's calls run during MPI_Finalize's callback (as gpuwire's engine's)
 *   before  the thread's calls end before MPI_Finalize
 *   incb    the callback makes the calls itself, on the finalizing thread
 *   split   the thread makes the MPI_Barrier, the callback (after joining it) the MPI_Allreduce
 * Measured here (2026-12-07, MPICH 4.0.2, 2 cores, under gdb, which makes it likelier): none 5 of
 * 6 and 4 of 6 runs asserted; before 0 of 6; incb 0 of 6 (values right); split 8 of 8. Without
 * gdb, a first version of the first mode asserted in 3 of 30 runs, and gpuwire's test_finalize
 * mpifinalize in 2 of 30 on a loaded machine. So running the queued operations on the finalizing
 * thread would not avoid it where one has started on the engine thread (split), as in that test:
 * only the program can, by completing its requests (or calling gpuwire_finalize) before
 * MPI_Finalize (README, Threads). scripts/run-c-tests.sh runs that mode again when this assertion
 * is what failed. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N (1L << 20)

static MPI_Comm dupc;
static double *x, *y;
static pthread_t thread;
static int incb; /* 1: incb, 2: split */

static void *idle(void *arg)
{
    return arg;
}

static void *barrier_only(void *arg)
{
    MPI_Barrier(dupc);
    return arg;
}

static void *work(void *arg)
{
    MPI_Barrier(dupc);
    MPI_Allreduce(x, y, N, MPI_DOUBLE, MPI_SUM, dupc);
    usleep(50000); /* as gpuwire's engine thread, which ends 50 ms after its queue ran dry */
    return arg;
}

/* The delete callback of MPI_COMM_SELF's attribute: the first thing MPI_Finalize does. */
static int at_finalize(MPI_Comm c, int key, void *value, void *extra)
{
    (void)c, (void)key, (void)value, (void)extra;
    if (incb == 1)
        work(NULL);
    if (incb == 2) {
        pthread_join(thread, NULL);
        MPI_Allreduce(x, y, N, MPI_DOUBLE, MPI_SUM, dupc);
        return MPI_SUCCESS;
    }
    pthread_join(thread, NULL);
    return MPI_SUCCESS;
}

int main(int argc, char **argv)
{
    int provided, rank, key;
    const char *mode = argc > 1 ? argv[1] : "";
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_dup(MPI_COMM_WORLD, &dupc);
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, at_finalize, &key, NULL);
    MPI_Comm_set_attr(MPI_COMM_SELF, key, NULL);
    x = malloc(N * sizeof *x);
    y = malloc(N * sizeof *y);
    for (long i = 0; i < N; i++)
        x[i] = (double)(i % 1000) + rank;
    if (rank == 1)
        usleep(100000);
    incb = !strcmp(mode, "incb") ? 1 : !strcmp(mode, "split") ? 2 : 0;
    pthread_create(&thread, NULL, incb == 1 ? idle : incb == 2 ? barrier_only : work, NULL);
    if (!strcmp(mode, "before")) {
        /* The thread's calls end before MPI_Finalize: nothing left for the callback. */
        pthread_join(thread, NULL);
        pthread_create(&thread, NULL, idle, NULL);
    }
    MPI_Finalize();
    long wrong = 0;
    for (long i = 0; i < N; i++)
        wrong += y[i] != 2.0 * (double)(i % 1000) + 1.0;
    printf("rank %d: MPI_Finalize returned; %ld values wrong\n", rank, wrong);
    return wrong != 0;
}
