/*
 * darray_cg_poisson.c: cg_poisson.c written with distributed arrays (gpuwire_darray).
 *
 * The same problem, start vector, stopping rule and checks as cg_poisson.c: -Laplace(u) = f on
 * the unit square, u = sin(pi x) sin(pi y), the 5-point stencil on the N x N interior grid scaled
 * by h^2, unpreconditioned CG from a hashed pseudo-random x0 until ||r|| / ||b|| < 1e-9; then
 * ||b - A x|| / ||b|| < 1e-8, error * (N+1)^2 < 1, and the error matches the scheme's own error to
 * 1%. Every vector is an N x N distributed array split by rows (the default split); x and p
 * carry one halo row above and below for the stencil.
 *
 * What gpuwire does: the halo exchange, the vector updates (axpy, scale), the dot products and
 * norms (each one allreduce), copying (redistribute). What the program does: the stencil, on
 * this rank's rows. On host memory it reads and writes the arrays in place; with "device" the
 * arrays live on the GPU and every gpuwire operation runs there, while this example applies the
 * stencil on host copies of its rows (a GPU code would launch its own kernel on the device
 * pointer that gpuwire_darray_data returns).
 *
 * gpuwire's axpy is two roundings, as the loops of cg_poisson.c, and its host dot product sums in
 * the same order: on host memory this program computes the same bits as cg_poisson.c.
 *
 * Usage: mpirun -n P darray_cg_poisson [N [EXPECTED_RANKS [host|device]]]   (default N = 768)
 * Exit code 0 on success, 1 on failure (including an unavailable device: the message says why).
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpuwire.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

#define CG_TOL 1e-9
#define RESIDUAL_MAX 1e-8
#define MAX_ITERS 100000

static void die(const char *call, gpuwire_status st, int line)
{
    char msg[1024];
    if (gpuwire_last_error(msg, sizeof msg) != GPUWIRE_SUCCESS)
        msg[0] = '\0';
    fprintf(stderr, "darray_cg_poisson.c:%d: %s failed: %s (status %d): %s\n", line, call,
            gpuwire_status_string((int32_t)st), (int)st, msg);
    exit(1);
}
#define CHECK(call)                        \
    do {                                   \
        gpuwire_status st_ = (call);       \
        if (st_ != GPUWIRE_SUCCESS)        \
            die(#call, st_, __LINE__);     \
    } while (0)

static int N, on_device;
static int64_t nloc, row0;   /* this rank's rows and its first global row */
static double *mirror[2];    /* host copies of local rows (device arrays only) */
static double h;

/* This rank's rows of v in host memory (with the halo rows when `halo`): the array's own memory
 * for host arrays, a copy in mirror[slot] for device arrays. */
static double *rows(gpuwire_darray v, int halo, int slot, int read)
{
    gpuwire_buffer b;
    void *p;
    if (!on_device) {
        CHECK(gpuwire_darray_data(v, &p));
        return (double *)p - (halo ? N : 0);
    }
    if (read) {
        CHECK(halo ? gpuwire_darray_local_with_halo(v, &b) : gpuwire_darray_local(v, &b));
        CHECK(gpuwire_buffer_copy_to_host(b, mirror[slot], NULL));
        CHECK(gpuwire_buffer_free(b));
    }
    return mirror[slot];
}

/* After writing to rows(v, 0, slot, ...): device arrays get the host copy back. */
static void rows_done(gpuwire_darray v, int slot)
{
    gpuwire_buffer b;
    if (!on_device)
        return;
    CHECK(gpuwire_darray_local(v, &b));
    CHECK(gpuwire_buffer_copy_from_host(b, mirror[slot], NULL));
    CHECK(gpuwire_buffer_free(b));
}

/* out = A v on this rank's rows. Row 0 of `in` is the halo row above (zero at the top edge:
 * the boundary), row nloc + 1 the one below. */
static void apply_A(gpuwire_darray v, gpuwire_darray out)
{
    const double *in;
    double *o;
    int64_t i;
    int j;
    CHECK(gpuwire_darray_halo_exchange(v, 1, NULL));
    in = rows(v, 1, 0, 1);
    o = rows(out, 0, 1, 0);
    for (i = 0; i < nloc; i++) {
        const double *up = in + i * N, *me = up + N, *down = me + N;
        double *oi = o + i * N;
        oi[0] = 4.0 * me[0] - up[0] - down[0] - (N > 1 ? me[1] : 0.0);
        for (j = 1; j < N - 1; j++)
            oi[j] = 4.0 * me[j] - up[j] - down[j] - me[j - 1] - me[j + 1];
        if (N > 1)
            oi[N - 1] = 4.0 * me[N - 1] - up[N - 1] - down[N - 1] - me[N - 2];
    }
    rows_done(out, 1);
}

/* A value in [0, 1) determined by the global index k alone (splitmix64), as cg_poisson.c. */
static double hash01(uint64_t k)
{
    uint64_t z = k + UINT64_C(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* The exact solution u, the right-hand side b = h^2 f = h^2 2 pi^2 u, the start vector x0. */
static double exact(int64_t g, int j) { return sin(M_PI * (j + 1) * h) * sin(M_PI * (g + 1) * h); }
static double rhs(int64_t g, int j) { return h * h * 2.0 * M_PI * M_PI * sin(M_PI * (j + 1) * h) * sin(M_PI * (g + 1) * h); }
static double start(int64_t g, int j) { return hash01((uint64_t)g * (uint64_t)N + (uint64_t)j); }

/* v = f(global row, column) on this rank's rows. */
static void set(gpuwire_darray v, double (*f)(int64_t, int))
{
    double *o = rows(v, 0, 1, 0);
    int64_t i;
    int j;
    for (i = 0; i < nloc; i++)
        for (j = 0; j < N; j++)
            o[i * N + j] = f(row0 + i, j);
    rows_done(v, 1);
}

static double dot(gpuwire_darray a, gpuwire_darray b)
{
    double d;
    CHECK(gpuwire_darray_dot(a, b, &d, NULL));
    return d;
}

static void axpy(double alpha, gpuwire_darray x, gpuwire_darray y)
{
    CHECK(gpuwire_darray_axpy(&alpha, x, y, NULL));
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    gpuwire_comm comm;
    gpuwire_darray x, p, r, b, Ap, e;
    int32_t rank, size, space;
    int64_t shape[2];
    double bb, rr, rr_new, alpha, beta, t0, t1, resid, err, maxs, pred, scaled, q;
    int iters = 0, ok = 1;
    char describe[1024];

    CHECK(gpuwire_init());
    CHECK(gpuwire_comm_world(NULL, &comm));
    CHECK(gpuwire_comm_rank(comm, &rank));
    CHECK(gpuwire_comm_size(comm, &size));
    N = argc > 1 ? atoi(argv[1]) : 768;
    if (argc > 2 && atoi(argv[2]) != size) {
        fprintf(stderr, "darray_cg_poisson: launched on %d ranks, expected %s (wrong launcher?)\n",
                (int)size, argv[2]);
        return 1;
    }
    on_device = argc > 3 && strcmp(argv[3], "device") == 0;
    space = on_device ? GPUWIRE_SPACE_DEVICE : GPUWIRE_SPACE_HOST;
    if (N < 1 || N < size) {
        if (rank == 0)
            fprintf(stderr, "darray_cg_poisson: need 1 <= P <= N (N = %d, P = %d)\n", N, (int)size);
        return 1;
    }
    h = 1.0 / (N + 1);

    /* N x N grids split by rows; x and p with one halo row for the stencil. */
    shape[0] = shape[1] = N;
#define GRID(halo, v)                                                                     \
    CHECK(gpuwire_darray_create_nd(comm, 2, shape, GPUWIRE_DECIDE, halo, GPUWIRE_FLOAT64, space, \
                                   GPUWIRE_PARTITION_SCATTER, &v))
    GRID(1, x);
    GRID(1, p);
    GRID(0, r);
    GRID(0, b);
    GRID(0, Ap);
    GRID(0, e);
    CHECK(gpuwire_darray_local_len(x, &nloc));
    CHECK(gpuwire_darray_global_offset(x, &row0));
    nloc /= N;
    row0 /= N;
    mirror[0] = malloc((size_t)(nloc + 2) * (size_t)N * sizeof(double));
    mirror[1] = malloc((size_t)(nloc + 2) * (size_t)N * sizeof(double));
    if (!mirror[0] || !mirror[1])
        return 1;
    set(b, rhs);
    set(x, start);

    CHECK(gpuwire_barrier(comm, NULL));
    t0 = now();
    /* r = b - A x0, p = r */
    apply_A(x, Ap);
    CHECK(gpuwire_darray_redistribute(b, r, NULL));
    axpy(-1.0, Ap, r);
    CHECK(gpuwire_darray_redistribute(r, p, NULL));
    bb = dot(b, b);
    rr = dot(r, r);
    while (iters < MAX_ITERS && sqrt(rr / bb) >= CG_TOL) {
        apply_A(p, Ap);
        alpha = rr / dot(p, Ap);
        axpy(alpha, p, x);   /* x += alpha p  */
        axpy(-alpha, Ap, r); /* r -= alpha Ap */
        rr_new = dot(r, r);
        beta = rr_new / rr;
        CHECK(gpuwire_darray_scale(p, &beta, NULL)); /* p = r + beta p */
        axpy(1.0, r, p);
        rr = rr_new;
        iters++;
    }
    CHECK(gpuwire_barrier(comm, NULL));
    t1 = now();

    /* The true residual, and the error against the exact solution. */
    apply_A(x, Ap);
    CHECK(gpuwire_darray_redistribute(b, r, NULL));
    axpy(-1.0, Ap, r);
    resid = sqrt(dot(r, r) / bb);
    set(e, exact);
    CHECK(gpuwire_darray_max(e, &maxs, NULL));
    axpy(-1.0, x, e);
    CHECK(gpuwire_darray_norm(e, GPUWIRE_NORM_INF, &err, NULL));
    q = sin(M_PI * h / 2.0);
    pred = ((M_PI * h / 2.0) * (M_PI * h / 2.0) / (q * q) - 1.0) * maxs;
    scaled = err * (double)(N + 1) * (double)(N + 1);
    ok = iters < MAX_ITERS && resid < RESIDUAL_MAX && scaled < 1.0 && fabs(err - pred) <= 0.01 * pred;

    if (rank == 0) {
        CHECK(gpuwire_comm_describe(comm, describe, sizeof describe));
        printf("darray_cg_poisson: -Laplace(u) = f on the unit square, 5-point stencil, %s memory\n",
               on_device ? "device" : "host");
        printf("grid: %d x %d interior points, h = 1/%d\n", N, N, N + 1);
        printf("ranks: %d\n", (int)size);
        printf("iterations: %d\n", iters);
        printf("relative residual: %.3e\n", resid);
        printf("max error: %.15e\n", err);
        printf("error * (N+1)^2: %.6f (the scheme's own error: %.6f)\n", scaled,
               pred * (N + 1) * (N + 1));
        printf("wall time: %.3f s (CG iterations only)\n", t1 - t0);
        printf("backend: %s\n", describe);
        printf("darray_cg_poisson: %s\n", ok ? "PASS" : "FAIL (see the values above)");
    }
    free(mirror[0]);
    free(mirror[1]);
    CHECK(gpuwire_darray_free(e));
    CHECK(gpuwire_darray_free(Ap));
    CHECK(gpuwire_darray_free(b));
    CHECK(gpuwire_darray_free(r));
    CHECK(gpuwire_darray_free(p));
    CHECK(gpuwire_darray_free(x));
    CHECK(gpuwire_comm_free(comm));
    CHECK(gpuwire_finalize());
    return ok ? 0 : 1;
}
