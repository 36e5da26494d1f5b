/*
 * fuzz_api.c: calls every function of gpuwire.h with arguments a careless or hostile program
 * could pass: handles that are valid, freed, of another kind or garbage; integers at and near
 * the extremes (0, -1, INT32/INT64 min and max, values whose products or sums overflow); NULL
 * pointers; enum values outside their range. gpuwire must answer each with a status: no crash,
 * no abort, no hang, no sanitizer report (run-c-tests.sh --sanitize builds this with
 * -fsanitize=address,undefined), no GPUWIRE_ERROR_INTERNAL (a caught panic), no timeout.
 *
 * Two phases, with the same pseudo-random sequence on every rank (a fixed seed), so that every
 * rank makes the same calls with the same arguments and collectives meet:
 *   1. a sweep: every function once with valid arguments, then once for each bad value of each
 *      argument in turn, the others valid ("one bad argument");
 *   2. random calls: each argument bad with probability 1/5.
 * Collectives run on communicators in checking mode with a timeout (where one rank's bad
 * argument is promised to be an error on every rank): the program checks that every rank
 * succeeded or every rank failed. Point-to-point messages go to the sending rank itself and are
 * always received, so nothing blocks legitimately. Host memory only (device spaces are asked
 * for, and refused where there is no GPU).
 *
 * Not fuzzed here (other parts of issue 17 own them, each with its own test): MPI Fortran
 * handles that name no communicator (MPICH aborts inside MPI_Comm_dup), timeouts that are
 * huge, tiny or not finite, messages longer than the receive or of another datatype, and the
 * handle generation wrap.
 *
 * Usage: mpirun -n P fuzz_api P [SEED [RANDOM_CALLS]]
 * Prints "fuzz_api: PASS (...)" from rank 0 and exits 0 when no rank saw a fault.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuwire.h"

/* ---- pseudo-random numbers (splitmix64), the same on every rank ---------------------------- */

static uint64_t rng_state;

static uint64_t rnd64(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int rnd(int n) { return (int)(rnd64() % (uint64_t)n); }

/* ---- state --------------------------------------------------------------------------------- */

static int32_t rank, size;
static long calls, faults, statuses[32];
static const char *current = "";

#define NCOMM 6
#define NBUF 16
#define NDARR 10
#define NSTALE 16
#define BASE_BUFS 10  /* buffers [0, BASE_BUFS) are made at the start and never freed */
#define BASE_DARRS 6  /* likewise for distributed arrays */
#define MAX_BYTES 256 /* largest buffer kept in the pool: every message stays far below any
                       * eager limit, and every host array below fits in `scratch` */

static gpuwire_comm comms[NCOMM];     /* [0]: the world in checking mode; all span every rank */
static gpuwire_buffer bufs[NBUF];
static gpuwire_darray darrs[NDARR];
static uint64_t stale[NSTALE];        /* handles freed earlier (of any kind) */
static int nstale;
static double scratch[8192];          /* host memory for src, dst, values, results */
static double wrapped[64];            /* memory behind wrapped buffers */

static void add_stale(uint64_t h)
{
    if (h != 0)
        stale[nstale++ % NSTALE] = h;
}

/* ---- argument generators ------------------------------------------------------------------- */

/* Every generator call is one argument "slot". In the sweep, slot `bad_slot` gets bad value
 * number `bad_idx` (modulo the number of bad values it has) and every other slot a valid one;
 * in the random phase each slot is bad with probability 1/5. */
static int sweep, slot, bad_slot = -1, bad_idx, slot_bad_values[32];

static int bad(int nbad)
{
    int s = slot++;
    if (s < 32)
        slot_bad_values[s] = nbad;
    if (sweep)
        return s == bad_slot ? bad_idx % nbad : -1;
    return rnd(5) == 0 ? rnd(nbad) : -1;
}

static const int64_t i64_bad[] = {-1, -2, INT64_MIN, INT64_MIN + 1, INT64_MAX, INT64_MAX - 1, INT64_MAX - 3,
                                  INT64_MAX / 2, INT64_MAX / 2 + 1, INT64_MAX / 8 + 1, INT64_MAX / 16,
                                  (int64_t)1 << 62, (int64_t)1 << 61, (int64_t)1 << 48, (int64_t)INT32_MIN,
                                  -((int64_t)1 << 40)};
#define N_I64_BAD ((int)(sizeof i64_bad / sizeof i64_bad[0]))
static const int32_t i32_bad[] = {-1, -2, -3, INT32_MIN, INT32_MIN + 1, INT32_MAX, INT32_MAX - 1, 99, 12345};
#define N_I32_BAD ((int)(sizeof i32_bad / sizeof i32_bad[0]))

/* A count, length, offset, halo or width: small when valid. */
static int64_t a_count(int64_t valid_max)
{
    int b = bad(N_I64_BAD);
    return b < 0 ? rnd((int)valid_max + 1) : i64_bad[b];
}

/* An enum value among `n` valid ones (0..n-1), or outside them. */
static int32_t a_enum(int n)
{
    static const int32_t more[] = {-1, INT32_MIN, INT32_MAX, 64, 256};
    int b = bad(5 + 1);
    if (b < 0)
        return rnd(n);
    return b == 5 ? n : more[b];
}

/* A root (0..size-1) or a rank that is none. */
static int32_t a_root(void)
{
    int b = bad(N_I32_BAD + 1);
    if (b < 0)
        return rnd(size);
    return b == N_I32_BAD ? size : i32_bad[b];
}

/* A peer of a point-to-point call: this rank itself, GPUWIRE_PROC_NULL, or no rank. */
static int32_t a_peer(void)
{
    int b = bad(N_I32_BAD + 1);
    if (b < 0)
        return rnd(4) == 0 ? GPUWIRE_PROC_NULL : rank;
    return b == N_I32_BAD ? size : i32_bad[b];
}

/* The source of a receive that never waits: oneself and the wildcards (GPUWIRE_ANY_SOURCE, and
 * this MPI's MPI_ANY_SOURCE among the bad values) become GPUWIRE_PROC_NULL, nothing would match
 * them; other values are kept (refused when no rank). */
static int32_t recv_source(int32_t peer)
{
    return (peer == rank || peer == GPUWIRE_ANY_SOURCE || peer == MPI_ANY_SOURCE) ? GPUWIRE_PROC_NULL : peer;
}

static int32_t a_tag(void)
{
    static const int32_t tags[] = {-1, INT32_MIN, INT32_MAX, 32001, 32767, 1 << 30};
    int b = bad(6);
    return b < 0 ? rnd(100) : tags[b];
}

/* A handle that is not a valid one of the kind asked for. */
static uint64_t bad_handle(int b, uint64_t other_kind)
{
    switch (b) {
    case 0: return 0;
    case 1: { /* draws whatever nstale is (it may differ between ranks) */
        uint64_t r = rnd64();
        return nstale > 0 ? stale[r % (uint64_t)(nstale < NSTALE ? nstale : NSTALE)] : 0;
    }
    case 2: return other_kind;
    case 3: return UINT64_MAX;
    case 4: return 1;
    case 5: return 0x8000000000000000ULL;
    case 6: return 0xdeadbeefcafef00dULL;
    default: return rnd64() | 1;
    }
}
#define N_BAD_HANDLE 8

static gpuwire_comm a_comm(void)
{
    int b = bad(N_BAD_HANDLE);
    if (b < 0)
        return comms[rnd(4) == 0 ? rnd(NCOMM) : 0];
    return (gpuwire_comm){bad_handle(b, bufs[rnd(BASE_BUFS)].h)};
}

static gpuwire_buffer a_buf(void)
{
    int b = bad(N_BAD_HANDLE);
    if (b < 0)
        return bufs[rnd(NBUF)];
    return (gpuwire_buffer){bad_handle(b, rnd(2) ? comms[0].h : darrs[0].h)};
}

/* A buffer, or GPUWIRE_BUFFER_NULL where the argument may be absent (a non-root's receive). */
static gpuwire_buffer a_buf_opt(void)
{
    gpuwire_buffer h = a_buf();
    return rnd(8) == 0 ? GPUWIRE_BUFFER_NULL : h;
}

static gpuwire_darray a_darr(void)
{
    int b = bad(N_BAD_HANDLE);
    if (b < 0)
        return darrs[rnd(NDARR)];
    return (gpuwire_darray){bad_handle(b, rnd(2) ? comms[0].h : bufs[0].h)};
}

/* An out-parameter: `valid`, or NULL. */
static void *a_out(void *valid) { return bad(1) < 0 ? valid : NULL; }

/* Host memory to read or write (at most sizeof scratch bytes are ever touched): scratch, NULL,
 * or scratch + 1 (misaligned). */
static void *a_mem(void)
{
    int b = bad(2);
    return b < 0 ? (void *)scratch : b == 0 ? NULL : (void *)((char *)scratch + 1);
}

/* A stream: host buffers ignore it. */
static void *a_stream(void) { return bad(1) < 0 ? NULL : (void *)(uintptr_t)0x1000; }

/* ---- checks after each call ---------------------------------------------------------------- */

static void fault(const char *what)
{
    char msg[1024];
    if (gpuwire_last_error(msg, sizeof msg) != GPUWIRE_SUCCESS)
        msg[0] = '\0';
    /* Every rank goes on to the end (the ranks' calls must stay the same); the first 20 faults
     * are printed. */
    if (++faults > 20)
        return;
    fprintf(stderr, "fuzz_api: FAULT rank %d call %ld %s (%s, bad slot %d value %d): %s; last error \"%s\"\n",
            (int)rank, calls, current, sweep ? "sweep" : "random", bad_slot, bad_idx, what, msg);
    fflush(stderr);
}

/* Every call ends here: the status is a known code, not INTERNAL, not a timeout; for calls over
 * a whole communicator (`all`), every rank succeeded or every rank failed. */
static void done(gpuwire_status st, int all)
{
    int ok = st == GPUWIRE_SUCCESS, lo = ok, hi = ok;
    calls++;
    if ((int)st < 0 || (int)st > 31 || gpuwire_status_string((int32_t)st) == NULL)
        fault("unknown status code");
    else
        statuses[st]++;
    if (st == GPUWIRE_ERROR_INTERNAL)
        fault("GPUWIRE_ERROR_INTERNAL (a caught panic or broken invariant)");
    if (st == GPUWIRE_ERROR_TIMEOUT || st == GPUWIRE_ERROR_COMM_BROKEN)
        fault("a timeout: some rank was left waiting");
    if (all) {
        MPI_Allreduce(&ok, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&ok, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (lo != hi)
            fault(ok ? "succeeded here but failed on another rank" : "failed here but succeeded on another rank");
    }
}

/* Whether a call on distributed array `d` is collective: SCATTER for reductions, gathers and
 * redistribution, BROADCAST for fill, set_global, axpy and scale (on other arrays they are local,
 * and a rank's own error is its own). An invalid handle is an error on every rank alike. */
static int partition_of(gpuwire_darray d)
{
    int32_t p = -1;
    return gpuwire_darray_partition(d, &p) == GPUWIRE_SUCCESS ? p : -1;
}
static int scatter_of(gpuwire_darray d) { return partition_of(d) == GPUWIRE_PARTITION_SCATTER; }
static int bcast_of(gpuwire_darray d) { return partition_of(d) == GPUWIRE_PARTITION_BROADCAST; }

/* ---- keeping what calls create ------------------------------------------------------------- */

static int64_t buf_bytes(gpuwire_buffer b)
{
    int64_t n = -1, es = -1;
    int32_t dt = -1;
    if (gpuwire_buffer_count(b, &n) != GPUWIRE_SUCCESS || gpuwire_buffer_dtype(b, &dt) != GPUWIRE_SUCCESS ||
        gpuwire_dtype_size(dt, &es) != GPUWIRE_SUCCESS)
        return -1;
    return n * es;
}

/* A new buffer joins the pool when small (its slot's old buffer is freed), else is freed. Local
 * calls may succeed on some ranks only (views of a distributed array's local part differ in
 * length): nothing here draws a random number, so the ranks' sequences stay the same. */
static void keep_buf(gpuwire_buffer b)
{
    static int next;
    int64_t bytes = buf_bytes(b);
    int i = BASE_BUFS + next++ % (NBUF - BASE_BUFS);
    if (bytes < 0 || bytes > MAX_BYTES) {
        if (gpuwire_buffer_free(b) != GPUWIRE_SUCCESS)
            fault("freeing a new buffer failed");
        add_stale(b.h);
        return;
    }
    if (bufs[i].h != 0 && gpuwire_buffer_free(bufs[i]) == GPUWIRE_SUCCESS)
        add_stale(bufs[i].h);
    bufs[i] = b;
}

/* Likewise for distributed arrays (collective: every rank keeps or frees alike). */
static void keep_darr(gpuwire_darray d)
{
    int64_t n = -1, halo = -1, local = -1, lens[64];
    int i = BASE_DARRS + rnd(NDARR - BASE_DARRS);
    int small = gpuwire_darray_global_len(d, &n) == GPUWIRE_SUCCESS && gpuwire_darray_halo(d, &halo) == GPUWIRE_SUCCESS &&
                gpuwire_darray_local_len(d, &local) == GPUWIRE_SUCCESS && gpuwire_darray_local_lens(d, lens) == GPUWIRE_SUCCESS &&
                n >= 0 && n <= 64 && halo <= 4;
    if (!small) {
        if (gpuwire_darray_free(d) != GPUWIRE_SUCCESS)
            fault("freeing a new distributed array failed");
        add_stale(d.h);
        return;
    }
    if (darrs[i].h != 0 && gpuwire_darray_free(darrs[i]) == GPUWIRE_SUCCESS)
        add_stale(darrs[i].h);
    darrs[i] = d;
}

/* A new communicator joins the pool if it is in checking mode with a timeout (so that no
 * collective on it can hang), else is freed (collective: every rank got the same one). */
static void keep_comm(gpuwire_comm c)
{
    char desc[2048];
    int i = 1 + rnd(NCOMM - 1);
    int checked = gpuwire_comm_describe(c, desc, sizeof desc) == GPUWIRE_SUCCESS && strstr(desc, "check=on") &&
                  !strstr(desc, "timeout=none");
    if (!checked) {
        if (gpuwire_comm_free(c) != GPUWIRE_SUCCESS)
            fault("freeing a new communicator failed");
        add_stale(c.h);
        return;
    }
    if (comms[i].h != 0 && gpuwire_comm_free(comms[i]) == GPUWIRE_SUCCESS)
        add_stale(comms[i].h);
    comms[i] = c;
}

/* A configuration: valid (checking on, a timeout) or with one field out of range. */
static void a_config(gpuwire_config *cfg)
{
    static const double timeouts[] = {0.0, -1.0, -1e-3};
    int b;
    gpuwire_config_init(cfg);
    cfg->check = 1;
    cfg->timeout_seconds = 60.0;
    cfg->backend = rnd(3) == 0 ? GPUWIRE_BACKEND_HOST : GPUWIRE_BACKEND_AUTO;
    if ((b = bad(N_I32_BAD)) >= 0)
        cfg->backend = i32_bad[b];
    if ((b = bad(N_I32_BAD)) >= 0)
        cfg->device = i32_bad[b];
    if ((b = bad(N_I32_BAD)) >= 0)
        cfg->check = i32_bad[b];
    if ((b = bad(N_I32_BAD)) >= 0)
        cfg->staging = i32_bad[b];
    if ((b = bad(3)) >= 0)
        cfg->timeout_seconds = timeouts[b];
    if ((b = bad(N_I64_BAD + 2)) >= 0)
        cfg->chunk_bytes = b < N_I64_BAD ? i64_bad[b] : b == N_I64_BAD ? 0 : 4095;
}

/* A point-to-point message to this rank itself with the arguments of the call under test, then
 * a matching receive, so that nothing is left pending. */
static void self_message(gpuwire_comm c, gpuwire_buffer b, int32_t tag, gpuwire_request *req, int how)
{
    gpuwire_buffer r = GPUWIRE_BUFFER_NULL;
    gpuwire_request rr = GPUWIRE_REQUEST_NULL, both[2];
    int64_t n = 0;
    int32_t dt = 0, flag = 0;
    if (gpuwire_buffer_count(b, &n) != GPUWIRE_SUCCESS || gpuwire_buffer_dtype(b, &dt) != GPUWIRE_SUCCESS ||
        gpuwire_buffer_alloc(n, dt, GPUWIRE_SPACE_HOST, -1, &r) != GPUWIRE_SUCCESS) {
        fault("cannot make the receive buffer of a pending message");
        return;
    }
    if (how == 0) {
        done(gpuwire_recv(c, r, rank, tag, NULL), 0);
        done(gpuwire_wait(req), 0);
    } else if (how == 1) {
        done(gpuwire_irecv(c, r, rank, tag, NULL, &rr), 0);
        both[0] = *req;
        both[1] = rr;
        done(gpuwire_waitall(2, both), 0);
        *req = GPUWIRE_REQUEST_NULL;
        add_stale(rr.h);
    } else {
        long spins = 0;
        done(gpuwire_irecv(c, r, rank, tag, NULL, &rr), 0);
        while (rr.h != 0 && gpuwire_test(&rr, &flag) == GPUWIRE_SUCCESS && !flag && ++spins < 100000000L)
            ;
        if (rr.h != 0)
            fault("a receive from this rank itself did not complete");
        done(gpuwire_wait(req), 0);
    }
    if (gpuwire_buffer_free(r) != GPUWIRE_SUCCESS)
        fault("freeing a receive buffer failed");
}

/* ---- one call of function `f` -------------------------------------------------------------- */

enum { F_COUNT = 88 };

static void call(int f)
{
    char text[64];
    int64_t i64 = 0, lens[64], shape[8], counts[64], displs[64], rcounts[64];
    int32_t i32 = 0, j32 = 0, k32 = 0;
    void *ptr = NULL;
    gpuwire_buffer ob = GPUWIRE_BUFFER_NULL;
    gpuwire_darray od = GPUWIRE_DARRAY_NULL;
    gpuwire_comm oc = GPUWIRE_COMM_NULL;
    gpuwire_request req = GPUWIRE_REQUEST_NULL, reqs[4];
    gpuwire_config cfg;
    gpuwire_status st;
    int i;

    slot = 0;
    for (i = 0; i < 64; i++)
        counts[i] = 8, lens[i] = 0;
    for (i = 0; i < 8; i++)
        shape[i] = 1 + rnd(3);
#define CASE(n, name) \
    case n:           \
        current = name;
    switch (f) {
    /* lifecycle and errors */
    CASE(0, "gpuwire_init") done(gpuwire_init(), 0); break;
    CASE(1, "gpuwire_initialized") done(gpuwire_initialized(a_out(&i32)), 0); break;
    CASE(2, "gpuwire_query_thread") done(gpuwire_query_thread(a_out(&i32)), 0); break;
    CASE(3, "gpuwire_owns_mpi") done(gpuwire_owns_mpi(a_out(&i32)), 0); break;
    CASE(4, "gpuwire_get_version") {
        int32_t *a = a_out(&i32), *b = a_out(&j32), *c = a_out(&k32);
        done(gpuwire_get_version(a, b, c), 0);
    } break;
    CASE(5, "gpuwire_status_string") {
        int b = bad(N_I32_BAD);
        const char *s = gpuwire_status_string(b < 0 ? rnd(20) : i32_bad[b]);
        done(s != NULL && strlen(s) > 0 ? GPUWIRE_SUCCESS : GPUWIRE_ERROR_INTERNAL, 0);
    } break;
    CASE(6, "gpuwire_last_error") {
        static const size_t lens_[] = {0, 1, 2, 7};
        int b = bad(5);
        char *p = b == 4 ? NULL : text;
        size_t n = b < 0 ? sizeof text : b < 4 ? lens_[b] : sizeof text;
        done(gpuwire_last_error(p, n), 0);
    } break;
    CASE(7, "gpuwire_config_init") done(gpuwire_config_init(a_out(&cfg)), 0); break;
    /* buffers */
    CASE(8, "gpuwire_buffer_alloc") {
        int64_t n = a_count(5);
        int32_t dt = a_enum(15), sp = rnd(4) ? GPUWIRE_SPACE_HOST : a_enum(5), dev = bad(1) < 0 ? -1 : i32_bad[rnd(N_I32_BAD)];
        gpuwire_buffer *out = a_out(&ob);
        st = gpuwire_buffer_alloc(n, dt, sp, dev, out);
        done(st, 0);
        if (st == GPUWIRE_SUCCESS)
            keep_buf(ob);
    } break;
    CASE(9, "gpuwire_buffer_wrap") {
        int b = bad(3);
        void *p = b < 0 ? (void *)wrapped : b == 0 ? NULL : b == 1 ? (void *)((char *)wrapped + 1) : (void *)(uintptr_t)8;
        int64_t n = a_count(8);
        int32_t dt = a_enum(15), sp = rnd(3) ? GPUWIRE_SPACE_HOST : a_enum(5);
        gpuwire_buffer *out = a_out(&ob);
        st = gpuwire_buffer_wrap(p, n, dt, sp, out);
        done(st, 0);
        /* Only a buffer that lies inside `wrapped` may ever be used. */
        if (st == GPUWIRE_SUCCESS) {
            if (p == (void *)wrapped && buf_bytes(ob) >= 0 && buf_bytes(ob) <= (int64_t)sizeof wrapped)
                keep_buf(ob);
            else if (gpuwire_buffer_free(ob) == GPUWIRE_SUCCESS)
                add_stale(ob.h);
        }
    } break;
    CASE(10, "gpuwire_buffer_view") {
        gpuwire_buffer p = a_buf();
        int64_t off = a_count(4), n = a_count(4);
        gpuwire_buffer *out = a_out(&ob);
        st = gpuwire_buffer_view(p, off, n, out);
        done(st, 0);
        if (st == GPUWIRE_SUCCESS)
            keep_buf(ob);
    } break;
    CASE(11, "gpuwire_buffer_free") {
        /* Valid: one made during the run (the base buffers stay). */
        int i_ = BASE_BUFS + rnd(NBUF - BASE_BUFS), b = bad(N_BAD_HANDLE);
        gpuwire_buffer h = b < 0 ? bufs[i_] : (gpuwire_buffer){bad_handle(b, comms[0].h)};
        done(gpuwire_buffer_free(h), 0);
        if (b < 0) {
            add_stale(h.h);
            bufs[i_] = GPUWIRE_BUFFER_NULL;
        }
    } break;
    CASE(12, "gpuwire_buffer_copy_from_host") {
        gpuwire_buffer b = a_buf();
        void *m = a_mem(), *s = a_stream();
        done(gpuwire_buffer_copy_from_host(b, m, s), 0);
    } break;
    CASE(13, "gpuwire_buffer_copy_to_host") {
        gpuwire_buffer b = a_buf();
        void *m = a_mem(), *s = a_stream();
        done(gpuwire_buffer_copy_to_host(b, m, s), 0);
    } break;
    CASE(14, "gpuwire_buffer_pointer") { gpuwire_buffer b = a_buf(); done(gpuwire_buffer_pointer(b, a_out(&ptr)), 0); } break;
    CASE(15, "gpuwire_buffer_count") { gpuwire_buffer b = a_buf(); done(gpuwire_buffer_count(b, a_out(&i64)), 0); } break;
    CASE(16, "gpuwire_buffer_dtype") { gpuwire_buffer b = a_buf(); done(gpuwire_buffer_dtype(b, a_out(&i32)), 0); } break;
    CASE(17, "gpuwire_buffer_space") { gpuwire_buffer b = a_buf(); done(gpuwire_buffer_space(b, a_out(&i32)), 0); } break;
    CASE(18, "gpuwire_buffer_device") { gpuwire_buffer b = a_buf(); done(gpuwire_buffer_device(b, a_out(&i32)), 0); } break;
    CASE(19, "gpuwire_buffer_owned") { gpuwire_buffer b = a_buf(); done(gpuwire_buffer_owned(b, a_out(&i32)), 0); } break;
    CASE(20, "gpuwire_dtype_size") { int32_t dt = a_enum(15); done(gpuwire_dtype_size(dt, a_out(&i64)), 0); } break;
    /* communicators */
    CASE(21, "gpuwire_comm_world") {
        gpuwire_config *p;
        a_config(&cfg);
        p = bad(1) < 0 ? &cfg : NULL;
        st = gpuwire_comm_world(p, a_out(&oc));
        done(st, 1);
        if (st == GPUWIRE_SUCCESS)
            keep_comm(oc);
    } break;
    CASE(22, "gpuwire_comm_create") {
        int b = bad(1);
        int32_t fint = b < 0 ? (int32_t)MPI_Comm_c2f(MPI_COMM_WORLD) : (int32_t)MPI_Comm_c2f(MPI_COMM_NULL);
        a_config(&cfg);
        st = gpuwire_comm_create(fint, &cfg, a_out(&oc));
        done(st, 1);
        if (st == GPUWIRE_SUCCESS)
            keep_comm(oc);
    } break;
    CASE(23, "gpuwire_comm_dup") {
        gpuwire_comm c = a_comm();
        st = gpuwire_comm_dup(c, a_out(&oc));
        done(st, 1);
        if (st == GPUWIRE_SUCCESS)
            keep_comm(oc);
    } break;
    CASE(24, "gpuwire_comm_split") {
        /* The same color on every rank (GPUWIRE_UNDEFINED: no rank gets a communicator). */
        static const int32_t colors[] = {-2, INT32_MIN, GPUWIRE_UNDEFINED};
        gpuwire_comm c = a_comm();
        int b = bad(3);
        int32_t color = b < 0 ? rnd(3) : colors[b], key = bad(1) < 0 ? rnd(5) : i32_bad[rnd(N_I32_BAD)];
        oc = GPUWIRE_COMM_NULL;
        st = gpuwire_comm_split(c, color, key, a_out(&oc));
        done(st, 1);
        if (st == GPUWIRE_SUCCESS && oc.h != 0)
            keep_comm(oc);
    } break;
    CASE(25, "gpuwire_comm_free") {
        int i_ = 1 + rnd(NCOMM - 1), b = bad(N_BAD_HANDLE);
        gpuwire_comm h = b < 0 ? comms[i_] : (gpuwire_comm){bad_handle(b, bufs[0].h)};
        done(gpuwire_comm_free(h), 1);
        if (b < 0) {
            add_stale(h.h);
            comms[i_] = GPUWIRE_COMM_NULL;
        }
    } break;
    CASE(26, "gpuwire_comm_rank") { gpuwire_comm c = a_comm(); done(gpuwire_comm_rank(c, a_out(&i32)), 0); } break;
    CASE(27, "gpuwire_comm_size") { gpuwire_comm c = a_comm(); done(gpuwire_comm_size(c, a_out(&i32)), 0); } break;
    CASE(28, "gpuwire_comm_local_rank") { gpuwire_comm c = a_comm(); done(gpuwire_comm_local_rank(c, a_out(&i32)), 0); } break;
    CASE(29, "gpuwire_comm_local_size") { gpuwire_comm c = a_comm(); done(gpuwire_comm_local_size(c, a_out(&i32)), 0); } break;
    CASE(30, "gpuwire_comm_backend") { gpuwire_comm c = a_comm(); done(gpuwire_comm_backend(c, a_out(&i32)), 0); } break;
    CASE(31, "gpuwire_comm_device") { gpuwire_comm c = a_comm(); done(gpuwire_comm_device(c, a_out(&i32)), 0); } break;
    CASE(32, "gpuwire_comm_mpi") { gpuwire_comm c = a_comm(); done(gpuwire_comm_mpi(c, a_out(&i32)), 0); } break;
    CASE(33, "gpuwire_comm_describe") {
        static const size_t lens_[] = {0, 1, 3};
        gpuwire_comm c = a_comm();
        int b = bad(4);
        done(gpuwire_comm_describe(c, b == 3 ? NULL : text, b < 0 ? sizeof text : b < 3 ? lens_[b] : sizeof text), 0);
    } break;
    /* distributed arrays */
    CASE(34, "gpuwire_darray_create") {
        gpuwire_comm c = a_comm();
        int64_t n = a_count(9), local = bad(1) < 0 ? GPUWIRE_DECIDE : a_count(3);
        int32_t dt = a_enum(15), sp = rnd(4) ? GPUWIRE_SPACE_HOST : a_enum(5), part = a_enum(2);
        st = gpuwire_darray_create(c, n, local, dt, sp, part, a_out(&od));
        done(st, 1);
        if (st == GPUWIRE_SUCCESS)
            keep_darr(od);
    } break;
    CASE(35, "gpuwire_darray_create_nd") {
        static const int32_t ndims[] = {0, -1, INT32_MIN, 8};
        gpuwire_comm c = a_comm();
        int b = bad(4), k;
        int32_t ndim = b < 0 ? 1 + rnd(3) : ndims[b];
        int64_t local, halo;
        int32_t dt, sp, part;
        for (k = 0; k < 3; k++) {
            int bb = bad(N_I64_BAD);
            if (bb >= 0)
                shape[k] = i64_bad[bb];
        }
        local = bad(1) < 0 ? GPUWIRE_DECIDE : a_count(3);
        halo = a_count(2);
        dt = a_enum(15);
        sp = rnd(4) ? GPUWIRE_SPACE_HOST : a_enum(5);
        part = rnd(3) ? GPUWIRE_PARTITION_SCATTER : a_enum(2);
        st = gpuwire_darray_create_nd(c, ndim, a_out(shape), local, halo, dt, sp, part, a_out(&od));
        done(st, 1);
        if (st == GPUWIRE_SUCCESS)
            keep_darr(od);
    } break;
    CASE(36, "gpuwire_darray_free") {
        int i_ = BASE_DARRS + rnd(NDARR - BASE_DARRS), b = bad(N_BAD_HANDLE);
        gpuwire_darray h = b < 0 ? darrs[i_] : (gpuwire_darray){bad_handle(b, bufs[0].h)};
        done(gpuwire_darray_free(h), 0);
        if (b < 0) {
            add_stale(h.h);
            darrs[i_] = GPUWIRE_DARRAY_NULL;
        }
    } break;
    CASE(37, "gpuwire_darray_global_len") { gpuwire_darray d = a_darr(); done(gpuwire_darray_global_len(d, a_out(&i64)), 0); } break;
    CASE(38, "gpuwire_darray_local_len") { gpuwire_darray d = a_darr(); done(gpuwire_darray_local_len(d, a_out(&i64)), 0); } break;
    CASE(39, "gpuwire_darray_global_offset") { gpuwire_darray d = a_darr(); done(gpuwire_darray_global_offset(d, a_out(&i64)), 0); } break;
    CASE(40, "gpuwire_darray_ndim") { gpuwire_darray d = a_darr(); done(gpuwire_darray_ndim(d, a_out(&i32)), 0); } break;
    CASE(41, "gpuwire_darray_halo") { gpuwire_darray d = a_darr(); done(gpuwire_darray_halo(d, a_out(&i64)), 0); } break;
    CASE(42, "gpuwire_darray_dtype") { gpuwire_darray d = a_darr(); done(gpuwire_darray_dtype(d, a_out(&i32)), 0); } break;
    CASE(43, "gpuwire_darray_space") { gpuwire_darray d = a_darr(); done(gpuwire_darray_space(d, a_out(&i32)), 0); } break;
    CASE(44, "gpuwire_darray_partition") { gpuwire_darray d = a_darr(); done(gpuwire_darray_partition(d, a_out(&i32)), 0); } break;
    CASE(45, "gpuwire_darray_data") { gpuwire_darray d = a_darr(); done(gpuwire_darray_data(d, a_out(&ptr)), 0); } break;
    CASE(46, "gpuwire_darray_local_lens") { gpuwire_darray d = a_darr(); done(gpuwire_darray_local_lens(d, a_out(lens)), 0); } break;
    CASE(47, "gpuwire_darray_shape") { gpuwire_darray d = a_darr(); done(gpuwire_darray_shape(d, a_out(shape)), 0); } break;
    CASE(48, "gpuwire_darray_local_shape") { gpuwire_darray d = a_darr(); done(gpuwire_darray_local_shape(d, a_out(shape)), 0); } break;
    CASE(49, "gpuwire_darray_local") {
        gpuwire_darray d = a_darr();
        st = gpuwire_darray_local(d, a_out(&ob));
        done(st, 0);
        if (st == GPUWIRE_SUCCESS)
            keep_buf(ob);
    } break;
    CASE(50, "gpuwire_darray_local_with_halo") {
        gpuwire_darray d = a_darr();
        st = gpuwire_darray_local_with_halo(d, a_out(&ob));
        done(st, 0);
        if (st == GPUWIRE_SUCCESS)
            keep_buf(ob);
    } break;
    CASE(51, "gpuwire_darray_fill") { gpuwire_darray d = a_darr(); void *m = a_mem(); done(gpuwire_darray_fill(d, m, a_stream()), bcast_of(d)); } break;
    CASE(52, "gpuwire_darray_set_global") { gpuwire_darray d = a_darr(); void *m = a_mem(); done(gpuwire_darray_set_global(d, m, a_stream()), bcast_of(d)); } break;
    CASE(53, "gpuwire_darray_allgather") { gpuwire_darray d = a_darr(); void *m = a_mem(); done(gpuwire_darray_allgather(d, m, a_stream()), scatter_of(d)); } break;
    CASE(54, "gpuwire_darray_gather") {
        gpuwire_darray d = a_darr();
        void *m = a_mem();
        int32_t root = a_root();
        done(gpuwire_darray_gather(d, m, root, a_stream()), scatter_of(d));
    } break;
    CASE(55, "gpuwire_darray_redistribute") { gpuwire_darray s = a_darr(), d = a_darr(); done(gpuwire_darray_redistribute(s, d, a_stream()), scatter_of(s)); } break;
    CASE(56, "gpuwire_darray_bcast") { gpuwire_darray d = a_darr(); int32_t root = a_root(); done(gpuwire_darray_bcast(d, root, a_stream()), 1); } break;
    CASE(57, "gpuwire_darray_axpy") {
        void *m = a_mem();
        gpuwire_darray x = a_darr(), y = a_darr();
        done(gpuwire_darray_axpy(m, x, y, a_stream()), bcast_of(y));
    } break;
    CASE(58, "gpuwire_darray_scale") { gpuwire_darray d = a_darr(); void *m = a_mem(); done(gpuwire_darray_scale(d, m, a_stream()), bcast_of(d)); } break;
    CASE(59, "gpuwire_darray_dot") {
        gpuwire_darray x = a_darr(), y = a_darr();
        void *m = a_mem();
        done(gpuwire_darray_dot(x, y, m, a_stream()), scatter_of(x));
    } break;
    CASE(60, "gpuwire_darray_norm") {
        gpuwire_darray d = a_darr();
        int32_t kind = a_enum(3);
        double *m = a_out(scratch);
        done(gpuwire_darray_norm(d, kind, m, a_stream()), scatter_of(d));
    } break;
    CASE(61, "gpuwire_darray_sum") { gpuwire_darray d = a_darr(); void *m = a_mem(); done(gpuwire_darray_sum(d, m, a_stream()), scatter_of(d)); } break;
    CASE(62, "gpuwire_darray_min") { gpuwire_darray d = a_darr(); void *m = a_mem(); done(gpuwire_darray_min(d, m, a_stream()), scatter_of(d)); } break;
    CASE(63, "gpuwire_darray_max") { gpuwire_darray d = a_darr(); void *m = a_mem(); done(gpuwire_darray_max(d, m, a_stream()), scatter_of(d)); } break;
    CASE(64, "gpuwire_darray_halo_exchange") {
        gpuwire_darray d = a_darr();
        int64_t w = a_count(3);
        done(gpuwire_darray_halo_exchange(d, w, a_stream()), 1);
    } break;
    /* point-to-point: to this rank itself (then received), to GPUWIRE_PROC_NULL, or refused */
    CASE(65, "gpuwire_send") {
        /* Never a real message (a blocking send to oneself may wait for its receive). */
        gpuwire_comm c = a_comm();
        gpuwire_buffer b = a_buf();
        int32_t peer = a_peer(), tag = a_tag();
        done(gpuwire_send(c, b, peer == rank ? GPUWIRE_PROC_NULL : peer, tag, a_stream()), 0);
    } break;
    CASE(66, "gpuwire_recv") {
        gpuwire_comm c = a_comm();
        gpuwire_buffer b = a_buf();
        int32_t peer = a_peer(), tag = a_tag();
        done(gpuwire_recv(c, b, recv_source(peer), tag, a_stream()), 0);
    } break;
    CASE(67, "gpuwire_isend") {
        gpuwire_comm c = a_comm();
        gpuwire_buffer b = a_buf();
        int32_t peer = a_peer(), tag = a_tag();
        gpuwire_request *out = a_out(&req);
        void *s = a_stream();
        int how = rnd(3);
        st = gpuwire_isend(c, b, peer, tag, s, out);
        done(st, 0);
        if (st == GPUWIRE_SUCCESS && peer == rank)
            self_message(c, b, tag, &req, how);
        else if (st == GPUWIRE_SUCCESS)
            done(gpuwire_wait(&req), 0);
    } break;
    CASE(68, "gpuwire_irecv") {
        /* A real receive only from GPUWIRE_PROC_NULL (nothing would match it). */
        gpuwire_comm c = a_comm();
        gpuwire_buffer b = a_buf();
        int32_t peer = a_peer(), tag = a_tag();
        gpuwire_request *out = a_out(&req);
        st = gpuwire_irecv(c, b, recv_source(peer), tag, a_stream(), out);
        done(st, 0);
        if (st == GPUWIRE_SUCCESS)
            done(gpuwire_wait(&req), 0);
    } break;
    CASE(69, "gpuwire_wait") {
        int b = bad(4);
        req.h = b == 1 ? bufs[0].h : b == 2 ? (nstale ? stale[0] : 7) : b == 3 ? 0xdeadbeefULL : 0;
        done(gpuwire_wait(b == 0 ? NULL : &req), 0);
    } break;
    CASE(70, "gpuwire_test") {
        int b = bad(3);
        req.h = b == 1 ? comms[0].h : b == 2 ? 0x1234567ULL : 0;
        done(gpuwire_test(b == 0 ? NULL : &req, a_out(&i32)), 0);
    } break;
    CASE(71, "gpuwire_waitall") {
        static const int32_t counts_[] = {-1, INT32_MIN, -4};
        int b = bad(3), k;
        int32_t n = b < 0 ? rnd(5) : counts_[b];
        for (k = 0; k < 4; k++)
            reqs[k] = rnd(2) ? GPUWIRE_REQUEST_NULL : (gpuwire_request){bad_handle(rnd(N_BAD_HANDLE), bufs[1].h)};
        done(gpuwire_waitall(n, a_out(reqs)), 0);
    } break;
    CASE(72, "gpuwire_sendrecv") {
        /* With a real message, the receive buffer is a fresh one of the send's datatype and
         * count (a longer or mistyped receive is another item's test). */
        gpuwire_comm c = a_comm();
        gpuwire_buffer sb = a_buf(), rb = a_buf(), fresh = GPUWIRE_BUFFER_NULL;
        int32_t dest = a_peer(), source = a_peer(), tag = a_tag(), dt = 0;
        int64_t n = 0;
        if (dest == rank && source == rank && gpuwire_buffer_count(sb, &n) == GPUWIRE_SUCCESS &&
            gpuwire_buffer_dtype(sb, &dt) == GPUWIRE_SUCCESS &&
            gpuwire_buffer_alloc(n, dt, GPUWIRE_SPACE_HOST, -1, &fresh) == GPUWIRE_SUCCESS)
            rb = fresh;
        else if (dest == rank || source == rank) /* one side real, the other not: no message */
            dest = source = GPUWIRE_PROC_NULL;
        done(gpuwire_sendrecv(c, sb, dest, tag, rb, source, tag, a_stream()), 0);
        if (fresh.h != 0 && gpuwire_buffer_free(fresh) != GPUWIRE_SUCCESS)
            fault("freeing a receive buffer failed");
    } break;
    /* collectives (checking mode on every communicator of the pool) */
    CASE(73, "gpuwire_barrier") { gpuwire_comm c = a_comm(); done(gpuwire_barrier(c, a_stream()), 1); } break;
    CASE(74, "gpuwire_bcast") {
        gpuwire_comm c = a_comm();
        gpuwire_buffer b = a_buf();
        int32_t root = a_root();
        done(gpuwire_bcast(c, b, root, a_stream()), 1);
    } break;
    CASE(75, "gpuwire_reduce") {
        gpuwire_comm c = a_comm();
        gpuwire_buffer s = a_buf(), r = a_buf_opt();
        int32_t op = a_enum(13), root = a_root();
        done(gpuwire_reduce(c, s, r, op, root, a_stream()), 1);
    } break;
    CASE(76, "gpuwire_allreduce") {
        gpuwire_comm c = a_comm();
        gpuwire_buffer s = a_buf(), r = rnd(3) ? a_buf() : s;
        int32_t op = a_enum(13);
        done(gpuwire_allreduce(c, s, r, op, a_stream()), 1);
    } break;
    CASE(77, "gpuwire_allgather") {
        gpuwire_comm c = a_comm();
        gpuwire_buffer s = a_buf(), r = a_buf();
        done(gpuwire_allgather(c, s, r, a_stream()), 1);
    } break;
    CASE(78, "gpuwire_allgatherv") {
        gpuwire_comm c = a_comm();
        gpuwire_buffer s = a_buf(), r = a_buf();
        int k, b;
        int64_t n = 0;
        gpuwire_buffer_count(s, &n);
        for (k = 0; k < size; k++)
            counts[k] = n;
        if ((b = bad(N_I64_BAD)) >= 0)
            counts[rnd(size)] = i64_bad[b];
        done(gpuwire_allgatherv(c, s, r, rnd(3) ? counts : NULL, a_stream()), 1);
    } break;
    CASE(79, "gpuwire_reduce_scatter") {
        gpuwire_comm c = a_comm();
        gpuwire_buffer s = a_buf(), r = a_buf();
        int32_t op = a_enum(13);
        done(gpuwire_reduce_scatter(c, s, r, op, a_stream()), 1);
    } break;
    CASE(80, "gpuwire_alltoall") {
        gpuwire_comm c = a_comm();
        gpuwire_buffer s = a_buf(), r = rnd(4) ? a_buf() : s;
        done(gpuwire_alltoall(c, s, r, a_stream()), 1);
    } break;
    CASE(81, "gpuwire_gather") {
        gpuwire_comm c = a_comm();
        gpuwire_buffer s = a_buf(), r = a_buf_opt();
        int32_t root = a_root();
        done(gpuwire_gather(c, s, r, root, a_stream()), 1);
    } break;
    CASE(82, "gpuwire_scatter") {
        gpuwire_comm c = a_comm();
        gpuwire_buffer s = a_buf_opt(), r = a_buf();
        int32_t root = a_root();
        done(gpuwire_scatter(c, s, r, root, a_stream()), 1);
    } break;
    CASE(83, "gpuwire_darray_create_nd (sizes)") {
        /* create_nd again, its size arguments extreme more often, each on four shapes (1-D and
         * 2-D, blocks of 1 to 16 rows), then used: the class of item 12 (halo INT64_MAX on a
         * shape [8] once made a 6-element storage for 8 elements). */
        static const int64_t shapes[4][2] = {{8, 1}, {16, 1}, {4, 2}, {3, 5}};
        int64_t halo = a_count(2), dims[2];
        int bd[2], k, m;
        for (k = 0; k < 2; k++)
            bd[k] = bad(N_I64_BAD);
        for (m = 0; m < 4; m++) {
            for (k = 0; k < 2; k++)
                dims[k] = bd[k] >= 0 ? i64_bad[bd[k]] : shapes[m][k];
            st = gpuwire_darray_create_nd(comms[0], m < 2 ? 1 : 2, dims, GPUWIRE_DECIDE, halo,
                                          m % 2 ? GPUWIRE_INT8 : GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST,
                                          GPUWIRE_PARTITION_SCATTER, &od);
            done(st, 1);
            if (st == GPUWIRE_SUCCESS) {
                double one = 1.0;
                done(gpuwire_darray_fill(od, &one, NULL), 0);
                done(gpuwire_darray_halo_exchange(od, halo, NULL), 1);
                done(gpuwire_darray_sum(od, scratch, NULL), 1);
                keep_darr(od);
            }
        }
    } break;
    /* The v-collectives: counts and displacements small, contiguous (NULL) or one of them
     * extreme; every rank passes the same arrays, so a count matrix that does not match is an
     * error on every rank (checking mode), as is a bad value. */
    CASE(84, "gpuwire_alltoallv") {
        gpuwire_comm c = a_comm();
        gpuwire_buffer s = a_buf(), r = rnd(4) ? a_buf() : s;
        int k, b;
        for (k = 0; k < size; k++)
            counts[k] = rnd(3), displs[k] = rnd(4), rcounts[k] = rnd(4) ? counts[k] : rnd(3);
        if ((b = bad(N_I64_BAD)) >= 0)
            (rnd(2) ? counts : rnd(2) ? displs : rcounts)[rnd(size)] = i64_bad[b];
        done(gpuwire_alltoallv(c, s, bad(1) < 0 ? counts : NULL, rnd(3) ? displs : NULL, r, bad(1) < 0 ? rcounts : NULL,
                               rnd(3) ? displs : NULL, a_stream()), 1);
    } break;
    CASE(85, "gpuwire_gatherv") {
        gpuwire_comm c = a_comm();
        gpuwire_buffer s = a_buf(), r = a_buf_opt();
        int32_t root = a_root();
        int k, b;
        int64_t n = 0;
        gpuwire_buffer_count(s, &n);
        for (k = 0; k < size; k++)
            counts[k] = n, displs[k] = n * (size - 1 - k);
        if ((b = bad(N_I64_BAD)) >= 0)
            (rnd(2) ? counts : displs)[rnd(size)] = i64_bad[b];
        done(gpuwire_gatherv(c, s, r, bad(1) < 0 ? counts : NULL, rnd(3) ? displs : NULL, root, a_stream()), 1);
    } break;
    CASE(86, "gpuwire_scatterv") {
        gpuwire_comm c = a_comm();
        gpuwire_buffer s = a_buf_opt(), r = a_buf();
        int32_t root = a_root();
        int k, b;
        int64_t n = 0;
        gpuwire_buffer_count(r, &n);
        for (k = 0; k < size; k++)
            counts[k] = n, displs[k] = rnd(3);
        if ((b = bad(N_I64_BAD)) >= 0)
            (rnd(2) ? counts : displs)[rnd(size)] = i64_bad[b];
        done(gpuwire_scatterv(c, s, bad(1) < 0 ? counts : NULL, rnd(3) ? displs : NULL, r, root, a_stream()), 1);
    } break;
    CASE(87, "gpuwire_reduce_scatterv") {
        gpuwire_comm c = a_comm();
        gpuwire_buffer s = a_buf(), r = rnd(4) ? a_buf() : s;
        int32_t op = a_enum(8);
        int k, b;
        int64_t n = 0;
        gpuwire_buffer_count(r, &n);
        for (k = 0; k < size; k++)
            counts[k] = n;
        if ((b = bad(N_I64_BAD)) >= 0)
            counts[rnd(size)] = i64_bad[b];
        done(gpuwire_reduce_scatterv(c, s, r, bad(1) < 0 ? counts : NULL, op, a_stream()), 1);
    } break;
    default:
        fprintf(stderr, "fuzz_api: no function %d\n", f);
        faults++;
    }
#undef CASE
}

/* ---- setup, phases, teardown --------------------------------------------------------------- */

static void setup(void)
{
    gpuwire_config cfg;
    int64_t shape[2] = {6, 3};
    int i;

    gpuwire_config_init(&cfg);
    cfg.check = 1;
    cfg.timeout_seconds = 60.0;
    if (gpuwire_comm_world(&cfg, &comms[0]) != GPUWIRE_SUCCESS || gpuwire_comm_dup(comms[0], &comms[1]) != GPUWIRE_SUCCESS) {
        fprintf(stderr, "fuzz_api: cannot create the communicators\n");
        exit(1);
    }
    for (i = 0; i < 64; i++)
        wrapped[i] = (double)i;
    for (i = 0; i < 8192; i++)
        scratch[i] = 1.0 + (double)(i % 7);
    /* The base buffers: matching and mismatched shapes for the collectives. */
    if (gpuwire_buffer_alloc(8, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1, &bufs[0]) ||
        gpuwire_buffer_alloc(8, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1, &bufs[1]) ||
        gpuwire_buffer_alloc(8 * (int64_t)size, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1, &bufs[2]) ||
        gpuwire_buffer_alloc((int64_t)size, GPUWIRE_INT32, GPUWIRE_SPACE_HOST, -1, &bufs[3]) ||
        gpuwire_buffer_alloc(3, GPUWIRE_INT8, GPUWIRE_SPACE_HOST, -1, &bufs[4]) ||
        gpuwire_buffer_alloc(4, GPUWIRE_COMPLEX128, GPUWIRE_SPACE_HOST, -1, &bufs[5]) ||
        gpuwire_buffer_view(bufs[2], 2, 4, &bufs[6]) ||
        gpuwire_buffer_wrap(wrapped, 8, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &bufs[7]) ||
        gpuwire_buffer_alloc(0, GPUWIRE_FLOAT32, GPUWIRE_SPACE_HOST, -1, &bufs[8]) ||
        gpuwire_buffer_alloc(2 * (int64_t)size, GPUWIRE_UINT64, GPUWIRE_SPACE_HOST, -1, &bufs[9])) {
        fprintf(stderr, "fuzz_api: cannot create the buffers\n");
        exit(1);
    }
    /* The base arrays: SCATTER split by default and by hand, N-D with a halo, BROADCAST,
     * integers, complex. */
    if (gpuwire_darray_create(comms[0], 10, GPUWIRE_DECIDE, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST,
                              GPUWIRE_PARTITION_SCATTER, &darrs[0]) ||
        gpuwire_darray_create(comms[0], 10, rank == 0 ? 10 : 0, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST,
                              GPUWIRE_PARTITION_SCATTER, &darrs[1]) ||
        gpuwire_darray_create_nd(comms[0], 2, shape, GPUWIRE_DECIDE, 2, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST,
                                 GPUWIRE_PARTITION_SCATTER, &darrs[2]) ||
        gpuwire_darray_create(comms[0], 5, GPUWIRE_DECIDE, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST,
                              GPUWIRE_PARTITION_BROADCAST, &darrs[3]) ||
        gpuwire_darray_create(comms[1], 7, GPUWIRE_DECIDE, GPUWIRE_INT32, GPUWIRE_SPACE_HOST,
                              GPUWIRE_PARTITION_SCATTER, &darrs[4]) ||
        gpuwire_darray_create(comms[0], 4, GPUWIRE_DECIDE, GPUWIRE_COMPLEX128, GPUWIRE_SPACE_HOST,
                              GPUWIRE_PARTITION_SCATTER, &darrs[5])) {
        fprintf(stderr, "fuzz_api: cannot create the distributed arrays\n");
        exit(1);
    }
}

int main(int argc, char **argv)
{
    long random_calls = argc > 3 ? atol(argv[3]) : 2500, i, total = 0;
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) : 17;
    int f, s, v, k, provided = 0;
    char msg[1024];

    if (argc < 2) {
        fprintf(stderr, "usage: fuzz_api EXPECTED_RANKS [SEED [RANDOM_CALLS]]\n");
        return 2;
    }
    /* Calls before gpuwire_init: refused, nothing crashes. */
    {
        gpuwire_buffer b = GPUWIRE_BUFFER_NULL;
        int32_t flag = -1;
        if (gpuwire_buffer_alloc(4, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1, &b) != GPUWIRE_ERROR_NOT_INITIALIZED ||
            gpuwire_initialized(&flag) != GPUWIRE_SUCCESS || flag != 0 ||
            gpuwire_darray_free((gpuwire_darray){0x1234}) != GPUWIRE_ERROR_NOT_INITIALIZED) {
            fprintf(stderr, "fuzz_api: calls before gpuwire_init are not refused\n");
            return 1;
        }
    }
    if (gpuwire_init() != GPUWIRE_SUCCESS || gpuwire_query_thread(&provided) != GPUWIRE_SUCCESS) {
        gpuwire_last_error(msg, sizeof msg);
        fprintf(stderr, "fuzz_api: gpuwire_init failed: %s\n", msg);
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != atoi(argv[1]) || size > 64) {
        fprintf(stderr, "fuzz_api: launched on %d ranks, expected %s (wrong launcher?)\n", (int)size, argv[1]);
        return 1;
    }
    rng_state = seed;
    setup();

    /* 1. The sweep: each function with valid arguments, then each argument bad in turn. */
    sweep = 1;
    for (f = 0; f < F_COUNT; f++) {
        bad_slot = -1;
        call(f);
        for (s = 0, k = slot; s < k && s < 32; s++) {
            for (v = 0;; v++) {
                bad_slot = s;
                bad_idx = v;
                call(f);
                if (v + 1 >= slot_bad_values[s])
                    break;
            }
        }
    }
    /* 2. Random calls. */
    sweep = 0;
    bad_slot = -1;
    for (i = 0; i < random_calls; i++)
        call(rnd(F_COUNT));

    /* Every rank made as many calls, and the world communicator still works. */
    MPI_Allreduce(&calls, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (total != calls * size)
        fault("the ranks made different numbers of calls");
    current = "final barrier";
    done(gpuwire_barrier(comms[0], NULL), 1);
    current = "teardown";
    for (k = 0; k < NDARR; k++)
        if (darrs[k].h != 0 && gpuwire_darray_free(darrs[k]) != GPUWIRE_SUCCESS)
            fault("freeing a pooled distributed array failed");
    for (k = 0; k < NBUF; k++)
        if (bufs[k].h != 0 && gpuwire_buffer_free(bufs[k]) != GPUWIRE_SUCCESS)
            fault("freeing a pooled buffer failed");
    for (k = 0; k < NCOMM; k++)
        if (comms[k].h != 0 && gpuwire_comm_free(comms[k]) != GPUWIRE_SUCCESS)
            fault("freeing a pooled communicator failed");
    {
        long all_faults = 0;
        MPI_Allreduce(&faults, &all_faults, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        faults = all_faults;
    }
    if (gpuwire_finalize() != GPUWIRE_SUCCESS) {
        fprintf(stderr, "fuzz_api: gpuwire_finalize failed\n");
        faults++;
    }
    /* After gpuwire_finalize every handle is refused. */
    if (gpuwire_comm_rank(comms[0], &rank) != GPUWIRE_ERROR_ALREADY_FINALIZED ||
        gpuwire_buffer_free((gpuwire_buffer){0xdeadbeefULL}) != GPUWIRE_ERROR_ALREADY_FINALIZED) {
        fprintf(stderr, "fuzz_api: handles after gpuwire_finalize are not refused\n");
        faults++;
    }
    if (faults == 0 && rank == 0) {
        printf("fuzz_api: PASS (%d ranks, seed %llu, %ld calls per rank; statuses:", (int)size,
               (unsigned long long)seed, calls);
        for (k = 0; k < 32; k++)
            if (statuses[k])
                printf(" %d:%ld", k, statuses[k]);
        printf(")\n");
    }
    return faults == 0 ? 0 : 1;
}
