/* The cost of issuing a group of strided views against the group's exchange: a transpose into
 * columns on 1 rank (messages to itself), host memory. N receives into the N column views of a
 * ROWS x N int32 matrix, each beside a contiguous send of ROWS elements; the time from
 * gpuwire_group_start to the last call (issuing: argument checks and the comparison of the
 * group's buffers) and the time of gpuwire_group_end (the exchange), medians of REPS groups.
 *   mpicc -O2 -Iinclude bench/group_views.c -o group_views -Ltarget/release -lgpuwire \
 *       -Wl,-rpath,$PWD/target/release
 *   mpirun -np 1 ./group_views 256 4096 [REPS]     (N ROWS; REPS default 5)
 * Prints "N x ROWS column views: issue MS ms, group_end MS ms" and checks the received values. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "gpuwire.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void ok(gpuwire_status s, const char *what)
{
    if (s != GPUWIRE_SUCCESS) {
        char m[512];
        gpuwire_last_error(m, sizeof m);
        fprintf(stderr, "%s: %s\n", what, m);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s N ROWS [REPS]\n", argv[0]);
        return 2;
    }
    const int64_t n = atoll(argv[1]), rows = atoll(argv[2]);
    const int reps = argc > 3 ? atoi(argv[3]) : 5;
    if (n < 1 || rows < 1 || reps < 1 || reps > 100)
        return 2;
    ok(gpuwire_init(), "init");
    gpuwire_comm c;
    ok(gpuwire_comm_world(NULL, &c), "comm_world");
    gpuwire_buffer mat, src;
    ok(gpuwire_buffer_alloc(n * rows, GPUWIRE_INT32, GPUWIRE_SPACE_HOST, -1, &mat), "alloc");
    ok(gpuwire_buffer_alloc(n * rows, GPUWIRE_INT32, GPUWIRE_SPACE_HOST, -1, &src), "alloc");
    gpuwire_buffer *col = malloc((size_t)n * sizeof *col), *row = malloc((size_t)n * sizeof *row);
    double *ti = malloc((size_t)reps * sizeof *ti), *te = malloc((size_t)reps * sizeof *te);
    int32_t *m, *s;
    ok(gpuwire_buffer_pointer(mat, (void **)&m), "pointer");
    ok(gpuwire_buffer_pointer(src, (void **)&s), "pointer");
    for (int64_t k = 0; k < n * rows; k++)
        s[k] = (int32_t)k;
    for (int64_t j = 0; j < n; j++) {
        ok(gpuwire_buffer_view_strided(mat, j, rows, 1, n, &col[j]), "view_strided");
        ok(gpuwire_buffer_view(src, j * rows, rows, &row[j]), "view");
    }
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        ok(gpuwire_group_start(), "group_start");
        for (int64_t j = 0; j < n; j++) {
            ok(gpuwire_recv(c, col[j], 0, (int32_t)(j % 30000), NULL), "recv");
            ok(gpuwire_send(c, row[j], 0, (int32_t)(j % 30000), NULL), "send");
        }
        double t1 = now();
        ok(gpuwire_group_end(), "group_end");
        double t2 = now();
        ti[r] = t1 - t0, te[r] = t2 - t1;
        for (int64_t k = 0; k < n * rows; k++) /* element (i, j) is row j's element i */
            if (m[k] != (int32_t)(k % n * rows + k / n)) {
                fprintf(stderr, "wrong value at %lld\n", (long long)k);
                return 1;
            }
        for (int64_t k = 0; k < n * rows; k++)
            m[k] = -1;
    }
    qsort(ti, (size_t)reps, sizeof *ti, cmp);
    qsort(te, (size_t)reps, sizeof *te, cmp);
    printf("%lld x %lld column views: issue %.2f ms, group_end %.2f ms (medians of %d)\n", (long long)n, (long long)rows,
           1e3 * ti[reps / 2], 1e3 * te[reps / 2], reps);
    for (int64_t j = 0; j < n; j++)
        gpuwire_buffer_free(col[j]), gpuwire_buffer_free(row[j]);
    gpuwire_buffer_free(mat), gpuwire_buffer_free(src);
    gpuwire_comm_free(c);
    free(col), free(row), free(ti), free(te);
    gpuwire_finalize();
    return 0;
}
