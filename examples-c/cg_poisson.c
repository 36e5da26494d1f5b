/*
 * cg_poisson.c: conjugate gradient for the 2-D Poisson equation, rows split across ranks.
 *
 *   -Laplace(u) = f on the unit square, u = 0 on the boundary,
 *   f(x, y) = 2 pi^2 sin(pi x) sin(pi y), exact solution u(x, y) = sin(pi x) sin(pi y).
 *
 * Discretisation: the 5-point Laplacian on the N x N interior grid, h = 1/(N+1), point (i, j) at
 * x = (j+1) h, y = (i+1) h. The system is scaled by h^2: A u = b with (A u)_ij = 4 u_ij - u_(i-1)j
 * - u_(i+1)j - u_i(j-1) - u_i(j+1) and b = h^2 f. The grid rows are split across the P ranks
 * with the default split: every rank gets N / P rows and the first N mod P ranks one more.
 *
 * Communication, all through gpuwire:
 *  - halo exchange: before each application of A, every rank swaps its first and last rows with
 *    its neighbours by gpuwire_sendrecv into one halo row above and one below its block
 *    (GPUWIRE_PROC_NULL at the top and bottom edge, where the halo row stays 0: the boundary);
 *  - dot products: a local sum, then gpuwire_allreduce SUM on one float64;
 *  - the max-norm error: gpuwire_allreduce MAX.
 *
 * CG (unpreconditioned) stops when the updated residual satisfies ||r|| / ||b|| < 1e-9. It starts
 * from a pseudo-random x0 (values in [0, 1) hashed from the global grid index, so the same on
 * every rank count), not from 0: this b is an eigenvector of A (sin(pi x) sin(pi y) is an
 * eigenfunction of the 5-point Laplacian), so CG from x0 = 0 would finish in one iteration.
 * The program then recomputes the true residual b - A x and checks:
 *  1. ||b - A x|| / ||b|| < 1e-8;
 *  2. the discretisation error max |x - u| is O(h^2): error * (N+1)^2 < 1.0;
 *  3. it matches the error the 5-point scheme makes on this f (known in closed form, since
 *     sin(pi x) sin(pi y) is an eigenfunction of the discrete Laplacian:
 *     u_h / u = (pi h / 2)^2 / sin^2(pi h / 2)) to 1%.
 * Iteration count and error agree across rank counts (only the summation order of the dot
 * products changes with P).
 *
 * Usage: mpirun -n P cg_poisson [N [EXPECTED_RANKS]]   (N >= P; default N = 768)
 * Prints grid, ranks, iterations, relative residual, error, wall time and the communicator's
 * backend line; the last line is "cg_poisson: PASS" or "cg_poisson: FAIL ...". Exit code 0 on
 * success, 1 on failure.
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

#define DEFAULT_N 768 /* about 3 s on 2 ranks of a 2-core machine, release build */
#define CG_TOL 1e-9      /* stopping test on the updated residual */
#define RESIDUAL_MAX 1e-8 /* check on the true residual */
#define MAX_ITERS 100000

static void die(const char *call, gpuwire_status st, int line)
{
    char msg[1024];
    if (gpuwire_last_error(msg, sizeof msg) != GPUWIRE_SUCCESS)
        msg[0] = '\0';
    fprintf(stderr, "cg_poisson.c:%d: %s failed: %s (status %d): %s\n", line, call,
            gpuwire_status_string((int32_t)st), (int)st, msg);
    exit(1);
}
#define CHECK(call)                                   \
    do {                                              \
        gpuwire_status st_ = (call);                  \
        if (st_ != GPUWIRE_SUCCESS)                   \
            die(#call, st_, __LINE__);                \
    } while (0)

/* A distributed grid vector: this rank's nloc rows of N values, with one halo row above (row 0)
 * and one below (row nloc+1). Element (i, j) of row i is v[i * N + j]. */
typedef struct {
    gpuwire_buffer buf;                   /* (nloc + 2) x N float64 */
    gpuwire_buffer first, last;           /* views: interior rows 1 and nloc (what we send) */
    gpuwire_buffer halo_top, halo_bottom; /* views: rows 0 and nloc + 1 (what we receive) */
    double *v;
} field;

static gpuwire_comm comm;
static int32_t rank, size;
static int N, nloc, prev, next; /* prev/next: the neighbouring ranks, or GPUWIRE_PROC_NULL */
static gpuwire_buffer scalar;   /* one float64 for the reductions */
static double *scalar_v;

static void field_alloc(field *f)
{
    void *p;
    CHECK(gpuwire_buffer_alloc((int64_t)(nloc + 2) * N, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1,
                               &f->buf));
    CHECK(gpuwire_buffer_view(f->buf, 0, N, &f->halo_top));
    CHECK(gpuwire_buffer_view(f->buf, (int64_t)N, N, &f->first));
    CHECK(gpuwire_buffer_view(f->buf, (int64_t)nloc * N, N, &f->last));
    CHECK(gpuwire_buffer_view(f->buf, (int64_t)(nloc + 1) * N, N, &f->halo_bottom));
    CHECK(gpuwire_buffer_pointer(f->buf, &p));
    f->v = (double *)p;
}

static void field_free(field *f)
{
    CHECK(gpuwire_buffer_free(f->halo_bottom));
    CHECK(gpuwire_buffer_free(f->last));
    CHECK(gpuwire_buffer_free(f->first));
    CHECK(gpuwire_buffer_free(f->halo_top));
    CHECK(gpuwire_buffer_free(f->buf));
}

/* Fills the halo rows with the neighbours' edge rows. */
static void halo_exchange(field *f)
{
    /* My first row goes up to prev; my bottom halo comes from next's first row. */
    CHECK(gpuwire_sendrecv(comm, f->first, prev, 1, f->halo_bottom, next, 1, NULL));
    /* My last row goes down to next; my top halo comes from prev's last row. */
    CHECK(gpuwire_sendrecv(comm, f->last, next, 2, f->halo_top, prev, 2, NULL));
}

/* out = A f on this rank's rows (out uses the same layout; its halo rows are not touched). */
static void apply_A(field *f, double *out)
{
    int i, j;
    const double *v = f->v;
    halo_exchange(f);
    for (i = 1; i <= nloc; i++) {
        const double *up = v + (size_t)(i - 1) * N, *me = v + (size_t)i * N,
                     *down = v + (size_t)(i + 1) * N;
        double *o = out + (size_t)i * N;
        o[0] = 4.0 * me[0] - up[0] - down[0] - (N > 1 ? me[1] : 0.0);
        for (j = 1; j < N - 1; j++)
            o[j] = 4.0 * me[j] - up[j] - down[j] - me[j - 1] - me[j + 1];
        if (N > 1)
            o[N - 1] = 4.0 * me[N - 1] - up[N - 1] - down[N - 1] - me[N - 2];
    }
}

/* Reduces one double across the ranks with op (GPUWIRE_SUM or GPUWIRE_MAX), in place. */
static double all(double local, int32_t op)
{
    *scalar_v = local;
    CHECK(gpuwire_allreduce(comm, scalar, scalar, op, NULL));
    return *scalar_v;
}

/* The global dot product of two vectors in the field layout (interior rows only). */
static double dot(const double *a, const double *b)
{
    size_t k, lo = (size_t)N, hi = (size_t)(nloc + 1) * N;
    double s = 0.0;
    for (k = lo; k < hi; k++)
        s += a[k] * b[k];
    return all(s, GPUWIRE_SUM);
}

/* A value in [0, 1) determined by the global index k alone (splitmix64). */
static double hash01(uint64_t k)
{
    uint64_t z = k + UINT64_C(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0); /* 53 bits / 2^53 */
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    field x, p;
    double *r, *Ap, *b;
    double h, bb, rr, rr_new, alpha, beta, t0, t1, resid, err, pred, maxs, scaled;
    size_t k, lo, hi, len;
    int i, j, g, row0, base, rem, iters = 0, ok = 1;
    char describe[1024];
    void *ptr;

    CHECK(gpuwire_init());
    CHECK(gpuwire_comm_world(NULL, &comm));
    CHECK(gpuwire_comm_rank(comm, &rank));
    CHECK(gpuwire_comm_size(comm, &size));

    N = argc > 1 ? atoi(argv[1]) : DEFAULT_N;
    if (argc > 2 && atoi(argv[2]) != size) {
        fprintf(stderr, "cg_poisson: launched on %d ranks, expected %s (wrong launcher?)\n",
                (int)size, argv[2]);
        return 1;
    }
    if (N < 1 || N < size) {
        if (rank == 0)
            fprintf(stderr, "cg_poisson: N = %s is not valid: need 1 <= P <= N (P = %d)\n",
                    argc > 1 ? argv[1] : "?", (int)size);
        CHECK(gpuwire_comm_free(comm));
        CHECK(gpuwire_finalize());
        return 1;
    }

    /* The default split: N / P rows each, one more for the first N mod P ranks. */
    base = N / size;
    rem = N % size;
    nloc = base + (rank < rem ? 1 : 0);
    row0 = rank * base + (rank < rem ? rank : rem);
    prev = rank > 0 ? rank - 1 : GPUWIRE_PROC_NULL;
    next = rank < size - 1 ? rank + 1 : GPUWIRE_PROC_NULL;
    h = 1.0 / (N + 1);

    CHECK(gpuwire_buffer_alloc(1, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1, &scalar));
    CHECK(gpuwire_buffer_pointer(scalar, &ptr));
    scalar_v = (double *)ptr;
    field_alloc(&x);
    field_alloc(&p);
    /* Vectors that never cross ranks are plain C arrays in the same layout. */
    len = (size_t)(nloc + 2) * N;
    r = calloc(len, sizeof *r);
    Ap = calloc(len, sizeof *Ap);
    b = calloc(len, sizeof *b);
    if (!r || !Ap || !b) {
        fprintf(stderr, "cg_poisson: out of memory\n");
        return 1;
    }
    lo = (size_t)N;
    hi = (size_t)(nloc + 1) * N;

    for (i = 1; i <= nloc; i++) {
        g = row0 + i - 1; /* global row */
        for (j = 0; j < N; j++) {
            b[(size_t)i * N + j] = h * h * 2.0 * M_PI * M_PI * sin(M_PI * (j + 1) * h) *
                                   sin(M_PI * (g + 1) * h);
            x.v[(size_t)i * N + j] = hash01((uint64_t)g * (uint64_t)N + (uint64_t)j);
        }
    }

    CHECK(gpuwire_barrier(comm, NULL));
    t0 = now();

    /* CG: r = b - A x0, p = r. */
    apply_A(&x, Ap);
    for (k = lo; k < hi; k++)
        r[k] = b[k] - Ap[k];
    memcpy(p.v, r, len * sizeof *r);
    bb = dot(b, b);
    rr = dot(r, r);
    while (iters < MAX_ITERS && sqrt(rr / bb) >= CG_TOL) {
        apply_A(&p, Ap);
        alpha = rr / dot(p.v, Ap);
        for (k = lo; k < hi; k++) {
            x.v[k] += alpha * p.v[k];
            r[k] -= alpha * Ap[k];
        }
        rr_new = dot(r, r);
        beta = rr_new / rr;
        for (k = lo; k < hi; k++)
            p.v[k] = r[k] + beta * p.v[k];
        rr = rr_new;
        iters++;
    }

    CHECK(gpuwire_barrier(comm, NULL));
    t1 = now();

    /* The true residual b - A x. */
    apply_A(&x, Ap);
    for (k = lo; k < hi; k++)
        r[k] = b[k] - Ap[k];
    resid = sqrt(dot(r, r) / bb);

    /* The max-norm error against the exact solution, and the scheme's known error. */
    err = 0.0;
    maxs = 0.0;
    for (i = 1; i <= nloc; i++) {
        g = row0 + i - 1;
        for (j = 0; j < N; j++) {
            double s = sin(M_PI * (j + 1) * h) * sin(M_PI * (g + 1) * h);
            double e = fabs(x.v[(size_t)i * N + j] - s);
            if (e > err)
                err = e;
            if (s > maxs)
                maxs = s;
        }
    }
    err = all(err, GPUWIRE_MAX);
    maxs = all(maxs, GPUWIRE_MAX);
    {
        double q = sin(M_PI * h / 2.0);
        pred = ((M_PI * h / 2.0) * (M_PI * h / 2.0) / (q * q) - 1.0) * maxs;
    }
    scaled = err * (double)(N + 1) * (double)(N + 1);

    if (rank == 0) {
        CHECK(gpuwire_comm_describe(comm, describe, sizeof describe));
        printf("cg_poisson: -Laplace(u) = f on the unit square, 5-point stencil\n");
        printf("grid: %d x %d interior points (%ld unknowns), h = 1/%d\n", N, N,
               (long)N * (long)N, N + 1);
        printf("ranks: %d (rows per rank: %d..%d)\n", (int)size, base, base + (rem ? 1 : 0));
        printf("iterations: %d\n", iters);
        printf("relative residual: %.3e (true ||b - A x|| / ||b||; CG stopped at %.0e)\n", resid,
               CG_TOL);
        printf("max error: %.15e\n", err);
        printf("error * (N+1)^2: %.6f (the scheme's own error on this f: %.6f)\n", scaled,
               pred * (double)(N + 1) * (double)(N + 1));
        printf("wall time: %.3f s (CG iterations only)\n", t1 - t0);
        printf("backend: %s\n", describe);
        if (iters >= MAX_ITERS) {
            printf("cg_poisson: FAIL: CG did not converge in %d iterations\n", MAX_ITERS);
            ok = 0;
        }
        if (!(resid < RESIDUAL_MAX)) {
            printf("cg_poisson: FAIL: relative residual %.3e is not below %.0e\n", resid,
                   RESIDUAL_MAX);
            ok = 0;
        }
        if (!(scaled < 1.0)) {
            printf("cg_poisson: FAIL: error %.3e is not O(h^2): error * (N+1)^2 = %.3f >= 1\n",
                   err, scaled);
            ok = 0;
        }
        if (!(fabs(err - pred) <= 0.01 * pred)) {
            printf("cg_poisson: FAIL: error %.6e differs from the scheme's %.6e by more than 1%%\n",
                   err, pred);
            ok = 0;
        }
        if (ok)
            printf("cg_poisson: PASS\n");
        fflush(stdout);
    }
    /* Rank 0 decided; every rank returns its verdict. */
    *scalar_v = ok ? 0.0 : 1.0;
    CHECK(gpuwire_bcast(comm, scalar, 0, NULL));
    ok = *scalar_v == 0.0;

    free(b);
    free(Ap);
    free(r);
    field_free(&p);
    field_free(&x);
    CHECK(gpuwire_buffer_free(scalar));
    CHECK(gpuwire_comm_free(comm));
    CHECK(gpuwire_finalize());
    return ok ? 0 : 1;
}
