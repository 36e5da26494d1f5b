/*
 * test_multihost.c: gpuwire with its ranks on several hosts, on host memory. Run it under
 * scripts/multihost.sh, which makes one machine several hosts (each its own host name; MPI
 * splits the ranks by host), with the same layout as its argument.
 *
 * The program initializes MPI itself and learns the layout from MPI alone (every rank's
 * MPI_Get_processor_name): it must be the one asked for (so the test cannot pass on one host),
 * and every node-dependent answer of gpuwire is compared with what this program computes from
 * it: the node-local rank and size, the host name and the number of nodes in
 * gpuwire_comm_describe, on the world communicator, on splits that span hosts (one rank per
 * host, every other rank) or stay on one host, and on duplicates; collectives and a ring of
 * sendrecvs on each; a distributed array split across hosts (halo exchange between hosts, dot,
 * sum); checking mode with a mismatch on a rank of another host than rank 0 (an error on every
 * rank, no hang); a timeout while a rank on another host skips a collective (TIMEOUT on the
 * others within about the timeout, then COMM_BROKEN, no hang). test_comm, test_p2p and
 * test_darray (every operation, values computed independently) run on the same layouts.
 *
 * Usage: scripts/multihost.sh openmpi|mpich SLOTS test_multihost SLOTS   (SLOTS: ranks per
 * host, e.g. 2,2 or 1,2,1; at least 2 hosts). Prints "test_multihost: PASS (...)" from rank 0
 * and exits 0 when every check on every rank passed.
 */
#define _POSIX_C_SOURCE 200809L

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gwtest.h"

enum { MAX_RANKS = 64, NAME_LEN = MPI_MAX_PROCESSOR_NAME };

static const double T = 0.75;    /* the timeout of the timeout cases */
static const double SLACK = 3.0; /* margin over it for a loaded machine */

static int rank, size, hosts;
static char names[MAX_RANKS][NAME_LEN]; /* every rank's MPI_Get_processor_name */
static char myhost[256];                /* this rank's gethostname */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

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

static gpuwire_comm world(int check, double timeout)
{
    gpuwire_config cfg;
    gpuwire_comm c = GPUWIRE_COMM_NULL;
    EXPECT_OK(gpuwire_config_init(&cfg));
    cfg.check = check;
    cfg.timeout_seconds = timeout;
    EXPECT_OK(gpuwire_comm_world(&cfg, &c));
    return c;
}

static int same_host(int a, int b) { return strcmp(names[a], names[b]) == 0; }

/* ---- the layout, from MPI alone ----------------------------------------------------------- */

/* SLOTS "2,2": rank r's host index by the layout asked for (ranks placed in order). */
static int layout(const char *slots, int host_of[MAX_RANKS])
{
    int n = 0, h = 0;
    const char *p = slots;
    while (*p) {
        char *end;
        long k = strtol(p, &end, 10);
        if (end == p || k < 1 || n + k > MAX_RANKS || (*end != ',' && *end != '\0'))
            return -1;
        for (long i = 0; i < k; i++)
            host_of[n++] = h;
        h++;
        p = *end == ',' ? end + 1 : end;
    }
    hosts = h;
    return n;
}

/* The ranks are on the hosts asked for: names equal exactly when the layout says one host. */
static int layout_as_asked(const int host_of[MAX_RANKS])
{
    int ok = 1, distinct = 0;
    for (int a = 0; a < size; a++) {
        int first = 1;
        for (int b = 0; b < size; b++) {
            if (same_host(a, b) != (host_of[a] == host_of[b]))
                ok = 0;
            if (b < a && same_host(a, b))
                first = 0;
        }
        distinct += first;
    }
    return ok && distinct == hosts;
}

/* ---- a communicator's node-dependent answers, against the layout -------------------------- */

/* `c` has the world ranks `members[0..m-1]`, in its rank order: its rank, size, node-local rank
 * and size, number of nodes and host name are those the layout gives; collectives and a ring of
 * sendrecvs give the answers computed here. */
static void check_comm(gpuwire_comm c, const int *members, int m, const char *what)
{
    int me = -1, lrank = 0, lsize = 0, nodes = 0;
    int32_t r = -1, s = -1, lr = -1, ls = -1;
    char text[1024], want[300];
    for (int i = 0; i < m; i++) {
        int first = 1;
        if (members[i] == rank)
            me = i;
        for (int j = 0; j < i; j++)
            if (same_host(members[j], members[i]))
                first = 0;
        nodes += first;
    }
    if (me < 0) {
        gwt_fail(__FILE__, __LINE__, what, "this rank is not a member (test bug)");
        return;
    }
    for (int i = 0; i < m; i++)
        if (same_host(members[i], rank)) {
            if (i < me)
                lrank++;
            lsize++;
        }
    EXPECT_OK(gpuwire_comm_rank(c, &r));
    EXPECT_OK(gpuwire_comm_size(c, &s));
    EXPECT(r == me && s == m);
    EXPECT_OK(gpuwire_comm_local_rank(c, &lr));
    EXPECT_OK(gpuwire_comm_local_size(c, &ls));
    EXPECT(lr == lrank && ls == lsize);
    if (lr != lrank || ls != lsize)
        fprintf(stderr, "rank %d: %s: node-local %d/%d, expected %d/%d\n", rank, what, (int)lr,
                (int)ls, lrank, lsize);
    EXPECT_OK(gpuwire_comm_describe(c, text, sizeof text));
    snprintf(want, sizeof want, "; host=%s; nodes=%d;", myhost, nodes);
    EXPECT(strstr(text, want) != NULL);
    snprintf(want, sizeof want, "rank %d/%d (node-local %d/%d)", me, m, lrank, lsize);
    EXPECT(strstr(text, want) != NULL);
    if (strstr(text, want) == NULL || (rank == 0 && strcmp(what, "world") == 0))
        printf("rank %d: %s: %s\n", rank, what, text);

    /* allreduce of the world ranks, bcast from the last member, allgather, a ring. */
    gpuwire_buffer a = balloc(3, GPUWIRE_INT64), g = balloc(m, GPUWIRE_INT64);
    gpuwire_buffer sb = balloc(2, GPUWIRE_INT32), rb = balloc(2, GPUWIRE_INT32);
    int64_t *ap = (int64_t *)bptr(a), *gp = (int64_t *)bptr(g), sum = 0;
    int32_t *sp = (int32_t *)bptr(sb), *rp = (int32_t *)bptr(rb);
    for (int i = 0; i < m; i++)
        sum += members[i];
    for (int i = 0; i < 3; i++)
        ap[i] = rank * (i + 1);
    EXPECT_OK(gpuwire_allreduce(c, a, a, GPUWIRE_SUM, NULL));
    for (int i = 0; i < 3; i++)
        EXPECT(ap[i] == sum * (i + 1));
    for (int i = 0; i < 3; i++)
        ap[i] = me == m - 1 ? 1000 + i : -1;
    EXPECT_OK(gpuwire_bcast(c, a, m - 1, NULL));
    for (int i = 0; i < 3; i++)
        EXPECT(ap[i] == 1000 + i);
    ap[0] = rank;
    {
        gpuwire_buffer one = GPUWIRE_BUFFER_NULL;
        EXPECT_OK(gpuwire_buffer_view(a, 0, 1, &one));
        EXPECT_OK(gpuwire_allgather(c, one, g, NULL));
        EXPECT_OK(gpuwire_buffer_free(one));
    }
    for (int i = 0; i < m; i++)
        EXPECT(gp[i] == members[i]);
    sp[0] = rank;
    sp[1] = 7;
    rp[0] = rp[1] = -1;
    EXPECT_OK(gpuwire_sendrecv(c, sb, (me + 1) % m, 3, rb, (me + m - 1) % m, 3, NULL));
    EXPECT(rp[0] == members[(me + m - 1) % m] && rp[1] == 7);
    EXPECT_OK(gpuwire_buffer_free(a));
    EXPECT_OK(gpuwire_buffer_free(g));
    EXPECT_OK(gpuwire_buffer_free(sb));
    EXPECT_OK(gpuwire_buffer_free(rb));
}

/* ---- split and dup across hosts ----------------------------------------------------------- */

/* Splits `comm` (the world) by `color_of`, key = world rank; checks the part this rank is in. */
static void split_by(gpuwire_comm comm, int (*color_of)(int), const char *what)
{
    int members[MAX_RANKS], m = 0;
    gpuwire_comm sub = {77}, dup = {77};
    for (int q = 0; q < size; q++)
        if (color_of(q) == color_of(rank))
            members[m++] = q;
    EXPECT_OK(gpuwire_comm_split(comm, color_of(rank), rank, &sub));
    check_comm(sub, members, m, what);
    /* A duplicate of the part: the same answers. */
    EXPECT_OK(gpuwire_comm_dup(sub, &dup));
    check_comm(dup, members, m, "dup of that split");
    EXPECT_OK(gpuwire_comm_free(dup));
    EXPECT_OK(gpuwire_comm_free(sub));
}

static int node_local_rank_of(int q) /* one rank per host in each part: spans the hosts */
{
    int k = 0;
    for (int p = 0; p < q; p++)
        k += same_host(p, q);
    return k;
}
static int parity_of(int q) { return q % 2; }
static int host_of_rank(int q) /* the lowest rank on q's host: one part per host */
{
    for (int p = 0; p < q; p++)
        if (same_host(p, q))
            return p;
    return q;
}

static void splits(gpuwire_comm comm)
{
    int all[MAX_RANKS];
    gpuwire_comm dup = {77};
    for (int q = 0; q < size; q++)
        all[q] = q;
    EXPECT_OK(gpuwire_comm_dup(comm, &dup));
    check_comm(dup, all, size, "dup of the world");
    EXPECT_OK(gpuwire_comm_free(dup));
    split_by(comm, node_local_rank_of, "split by node-local rank (across hosts)");
    split_by(comm, parity_of, "split by rank parity");
    split_by(comm, host_of_rank, "split by host");
}

/* ---- distributed arrays split across hosts ------------------------------------------------ */

static void darray_across(gpuwire_comm comm)
{
    /* R rows of 3 columns, the default split (blocks end at host boundaries and within hosts),
     * one halo row; value (row, col) = 10 row + col. */
    enum { COLS = 3 };
    int64_t rows_g = 2 * size + 1, shape[2] = {rows_g, COLS}, off = -1, len = -1, q, rem;
    gpuwire_darray d = GPUWIRE_DARRAY_NULL;
    double *g = malloc(sizeof(double) * (size_t)(rows_g * COLS)), *v, dot = 0, want = 0, s = 0;
    void *data = NULL;
    if (!g)
        abort();
    EXPECT_OK(gpuwire_darray_create_nd(comm, 2, shape, GPUWIRE_DECIDE, 1, GPUWIRE_FLOAT64,
                                       GPUWIRE_SPACE_HOST, GPUWIRE_PARTITION_SCATTER, &d));
    for (int64_t i = 0; i < rows_g * COLS; i++) {
        g[i] = 10.0 * (double)(i / COLS) + (double)(i % COLS);
        want += g[i] * g[i];
    }
    EXPECT_OK(gpuwire_darray_set_global(d, g, NULL));
    EXPECT_OK(gpuwire_darray_global_offset(d, &off));
    EXPECT_OK(gpuwire_darray_local_len(d, &len));
    q = rows_g / size;
    rem = rows_g % size;
    EXPECT(len == (q + (rank < rem)) * COLS && off == (rank * q + (rank < rem ? rank : rem)) * COLS);
    off /= COLS;
    len /= COLS;
    EXPECT_OK(gpuwire_darray_data(d, &data));
    v = (double *)data - COLS; /* the halo row above */
    for (int c = 0; c < COLS; c++)
        v[c] = v[(len + 1) * COLS + c] = -1.0;
    EXPECT_OK(gpuwire_darray_halo_exchange(d, 1, NULL));
    for (int c = 0; c < COLS; c++) {
        EXPECT(v[c] == (rank > 0 ? 10.0 * (double)(off - 1) + c : -1.0));
        EXPECT(v[(len + 1) * COLS + c] == (rank < size - 1 ? 10.0 * (double)(off + len) + c : -1.0));
    }
    EXPECT_OK(gpuwire_darray_dot(d, d, &dot, NULL));
    EXPECT(dot == want); /* small integers: exact in any order */
    EXPECT_OK(gpuwire_darray_sum(d, &s, NULL));
    EXPECT(s == 10.0 * COLS * (double)(rows_g * (rows_g - 1) / 2) + (double)rows_g * (0 + 1 + 2));
    EXPECT_OK(gpuwire_darray_free(d));
    free(g);
}

/* ---- checking mode: a mismatch on a rank of another host ---------------------------------- */

static void checking_across(void)
{
    gpuwire_comm cc = world(1, 0.0);
    gpuwire_buffer a = balloc(4, GPUWIRE_FLOAT64), b = balloc(5, GPUWIRE_FLOAT64);
    double *ap = (double *)bptr(a), t0;
    int odd = size - 1; /* on the last host, never rank 0's */
    EXPECT(!same_host(odd, 0));
    for (int i = 0; i < 4; i++)
        ap[i] = 1.0;
    t0 = now();
    EXPECT_STATUS(gpuwire_allreduce(cc, rank == odd ? b : a, rank == odd ? b : a, GPUWIRE_SUM, NULL),
                  GPUWIRE_ERROR_COUNT_MISMATCH);
    EXPECT_LAST_ERROR_HAS("nothing was done on any rank");
    EXPECT(ap[0] == 1.0);
    EXPECT_STATUS(gpuwire_allreduce(cc, a, a, rank == odd ? GPUWIRE_MAX : GPUWIRE_SUM, NULL),
                  GPUWIRE_ERROR_OP_MISMATCH);
    EXPECT_STATUS(gpuwire_bcast(cc, a, rank == odd ? 1 : 0, NULL), GPUWIRE_ERROR_ROOT_MISMATCH);
    /* A bad argument on that rank: it gets its own error, every other rank REMOTE_ARGUMENT. */
    EXPECT_STATUS(gpuwire_allreduce(cc, a, a, rank == odd ? 99 : GPUWIRE_SUM, NULL),
                  rank == odd ? GPUWIRE_ERROR_INVALID_ARGUMENT : GPUWIRE_ERROR_REMOTE_ARGUMENT);
    if (rank != odd) {
        char want[64], msg[1024];
        snprintf(want, sizeof want, "rank %d rejected its arguments", odd);
        EXPECT(gpuwire_last_error(msg, sizeof msg) == GPUWIRE_SUCCESS && strstr(msg, want) != NULL);
    }
    EXPECT(now() - t0 < 30.0);
    /* The communicator still works. */
    EXPECT_OK(gpuwire_allreduce(cc, a, a, GPUWIRE_SUM, NULL));
    EXPECT(ap[0] == (double)size);
    EXPECT_OK(gpuwire_buffer_free(a));
    EXPECT_OK(gpuwire_buffer_free(b));
    EXPECT_OK(gpuwire_comm_free(cc));
}

/* ---- a timeout while a rank on another host skips a collective ---------------------------- */

static void timeout_across(int check)
{
    gpuwire_comm c = world(check, T);
    int skipper = size - 1; /* on the last host */
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank != skipper) {
        /* A call that timed out leaves its buffer to MPI: heap memory, never freed. */
        int64_t *p = calloc(8, sizeof *p);
        gpuwire_buffer b = GPUWIRE_BUFFER_NULL;
        double t0, secs;
        gpuwire_status st;
        if (!p)
            abort();
        EXPECT_OK(gpuwire_buffer_wrap(p, 8, GPUWIRE_INT64, GPUWIRE_SPACE_HOST, &b));
        t0 = now();
        st = gpuwire_allreduce(c, b, b, GPUWIRE_SUM, NULL);
        secs = now() - t0;
        EXPECT(st == GPUWIRE_ERROR_TIMEOUT);
        EXPECT(secs > T - 0.2 && secs < T + SLACK);
        printf("rank %d: allreduce that rank %d (host %s) skips, checking %s: %s after %.2f s\n",
               rank, skipper, names[skipper], check ? "on" : "off", gpuwire_status_string(st), secs);
        t0 = now();
        EXPECT_STATUS(gpuwire_allreduce(c, b, b, GPUWIRE_SUM, NULL), GPUWIRE_ERROR_COMM_BROKEN);
        EXPECT(now() - t0 < 1.0);
        EXPECT_OK(gpuwire_buffer_free(b));
    }
    /* The broken communicator is freed locally; MPI itself was never blocked. */
    EXPECT_OK(gpuwire_comm_free(c));
    MPI_Barrier(MPI_COMM_WORLD);
}

/* ---- the hierarchical path (HIER requested) on host memory -------------------------------- */

/* Element i of rank q's input: a small integer, exact in every datatype (float16 too). */
static int hval(int q, int i) { return (q * 7 + i * 3) % 5 + 1; }

static uint16_t half_of(int v) /* v in 1..2047 */
{
    int e = 0;
    while ((v >> (e + 1)) != 0)
        e++;
    return (uint16_t)(((e + 15) << 10) | (((v << 10) >> e) & 0x3ff));
}

/* Sets element i of `p` (datatype dt) to v (pairs: value v, index q). */
static void hput(void *p, int32_t dt, int i, int v, int q)
{
    float f = (float)v;
    uint32_t fb;
    memcpy(&fb, &f, 4);
    switch (dt) {
    case GPUWIRE_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case GPUWIRE_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case GPUWIRE_INT32: ((int32_t *)p)[i] = v; break;
    case GPUWIRE_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case GPUWIRE_INT64: ((int64_t *)p)[i] = v; break;
    case GPUWIRE_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    case GPUWIRE_FLOAT16: ((uint16_t *)p)[i] = half_of(v); break;
    case GPUWIRE_FLOAT32: ((float *)p)[i] = f; break;
    case GPUWIRE_FLOAT64: ((double *)p)[i] = v; break;
    case GPUWIRE_BFLOAT16: ((uint16_t *)p)[i] = (uint16_t)(fb >> 16); break;
    case GPUWIRE_COMPLEX64: ((float *)p)[2 * i] = f; ((float *)p)[2 * i + 1] = f - 2; break;
    case GPUWIRE_COMPLEX128: ((double *)p)[2 * i] = v; ((double *)p)[2 * i + 1] = v - 2; break;
    case GPUWIRE_FLOAT32_INT32: ((float *)p)[2 * i] = f; ((int32_t *)p)[2 * i + 1] = q; break;
    case GPUWIRE_FLOAT64_INT32: {
        char *e = (char *)p + 16 * i;
        double d = v;
        int32_t k = q;
        memcpy(e, &d, 8);
        memcpy(e + 8, &k, 4);
        break;
    }
    case GPUWIRE_INT32_INT32: ((int32_t *)p)[2 * i] = v; ((int32_t *)p)[2 * i + 1] = q; break;
    }
}

/* Whether n elements of a and b hold the same values (pairs with padding: value and index). */
static int hsame(const void *a, const void *b, int32_t dt, int n)
{
    if (dt != GPUWIRE_FLOAT64_INT32) {
        int64_t es = 0;
        gpuwire_dtype_size(dt, &es);
        return memcmp(a, b, (size_t)(es * n)) == 0;
    }
    for (int i = 0; i < n; i++)
        if (memcmp((const char *)a + 16 * i, (const char *)b + 16 * i, 12) != 0)
            return 0;
    return 1;
}

/* A rank of another host than rank 0's, not its host's first rank (a non-leader root); else the
 * last rank. */
static int far_non_leader(void)
{
    for (int q = size - 1; q > 0; q--)
        if (!same_host(q, 0) && same_host(q - 1, q))
            return q;
    return size - 1;
}

/* Creation is not bounded by the timeout (README, Timeouts): HIER's setup (its node and leaders
 * communicators, their agreements) with a timeout of 10 ms succeeds on every rank (it failed
 * with COMM_BROKEN, and some ranks hung, on this layout before: a helper's bug hunt). */
static void hier_create_tiny_timeout(void)
{
    gpuwire_config cfg;
    EXPECT_OK(gpuwire_config_init(&cfg));
    cfg.backend = GPUWIRE_BACKEND_HIER;
    cfg.timeout_seconds = 0.01;
    for (int round = 0; round < 3; round++) {
        gpuwire_comm h = GPUWIRE_COMM_NULL;
        EXPECT_OK(gpuwire_comm_world(&cfg, &h));
        EXPECT_OK(gpuwire_comm_free(h));
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

/* GPUWIRE_HIER_MIN_BYTES set after gpuwire_config_init to something that is not a number, on
 * rank 0 only: HIER's creation fails on every rank (it silently took the default before); set
 * empty, it is unset. */
static void hier_min_bytes_bad_at_run_time(void)
{
    gpuwire_config cfg;
    gpuwire_comm h = GPUWIRE_COMM_NULL;
    EXPECT_OK(gpuwire_config_init(&cfg));
    cfg.backend = GPUWIRE_BACKEND_HIER;
    if (rank == 0)
        setenv("GPUWIRE_HIER_MIN_BYTES", "abc", 1);
    gpuwire_status st = gpuwire_comm_world(&cfg, &h);
    EXPECT(st != GPUWIRE_SUCCESS);
    if (rank == 0) {
        EXPECT_LAST_ERROR_HAS("GPUWIRE_HIER_MIN_BYTES");
        unsetenv("GPUWIRE_HIER_MIN_BYTES");
    }
    if (st == GPUWIRE_SUCCESS)
        EXPECT_OK(gpuwire_comm_free(h));
    EXPECT_OK(gpuwire_comm_world(&cfg, &h));
    EXPECT_OK(gpuwire_comm_free(h));
    /* Empty on rank 0 only: unset, as for every variable (gpuwire_config_init takes it so), the
     * default on every rank (HIER's creation failed on every rank before). */
    if (rank == 0)
        setenv("GPUWIRE_HIER_MIN_BYTES", "", 1);
    EXPECT_OK(gpuwire_config_init(&cfg));
    cfg.backend = GPUWIRE_BACKEND_HIER;
    st = gpuwire_comm_world(&cfg, &h);
    EXPECT(st == GPUWIRE_SUCCESS);
    if (rank == 0)
        unsetenv("GPUWIRE_HIER_MIN_BYTES");
    if (st == GPUWIRE_SUCCESS)
        EXPECT_OK(gpuwire_comm_free(h));
}

static void hier_across(void)
{
    enum { N = 7 };
    gpuwire_config cfg;
    gpuwire_comm h = GPUWIRE_COMM_NULL, flat = GPUWIRE_COMM_NULL;
    int32_t backend = -1;
    char text[2048], want[200];
    long combos = 0;
    int nodes = 0, root = far_non_leader();

    for (int q = 0; q < size; q++)
        nodes += q == 0 || !same_host(q - 1, q);
    EXPECT_OK(gpuwire_config_init(&cfg));
    cfg.backend = GPUWIRE_BACKEND_HIER;
    EXPECT_OK(gpuwire_comm_world(&cfg, &h));
    cfg.backend = GPUWIRE_BACKEND_HOST;
    EXPECT_OK(gpuwire_comm_world(&cfg, &flat));
    EXPECT_OK(gpuwire_comm_backend(h, &backend));
    EXPECT(backend == GPUWIRE_BACKEND_HIER);
    EXPECT_OK(gpuwire_comm_describe(h, text, sizeof text));
    snprintf(want, sizeof want, "hierarchical: %d nodes, HOST inside each, HOST between leaders", nodes);
    EXPECT(strstr(text, "backend=HIER (requested;") != NULL && strstr(text, want) != NULL);
    if (rank == 0 || strstr(text, want) == NULL)
        printf("rank %d: hier: %s\n", rank, text);
    {
        int all[MAX_RANKS];
        for (int q = 0; q < size; q++)
            all[q] = q;
        check_comm(h, all, size, "hier world");
    }

    /* allreduce, out of place and in place, and reduce_scatter_block, identical to the flat
     * path's (plain MPI): every datatype (SUM, or MINLOC for the pairs) and every op (on int32,
     * else float64, else float64_int32), and what the flat path refuses HIER refuses alike
     * (float32 BAND, complex MAX). The composition is the same for every pair (AVG aside), so
     * CI's time goes to these. */
    int32_t pairs[64][2];
    int npairs = 0;
    for (int32_t dt = GPUWIRE_INT8; dt <= GPUWIRE_INT32_INT32; dt++) {
        pairs[npairs][0] = dt;
        pairs[npairs++][1] = dt >= GPUWIRE_FLOAT32_INT32 ? GPUWIRE_MINLOC : GPUWIRE_SUM;
    }
    for (int32_t op = GPUWIRE_PROD; op <= GPUWIRE_MAXLOC; op++) {
        pairs[npairs][0] = op >= GPUWIRE_MINLOC ? GPUWIRE_FLOAT64_INT32 : op == GPUWIRE_AVG ? GPUWIRE_FLOAT64 : GPUWIRE_INT32;
        pairs[npairs++][1] = op;
    }
    pairs[npairs][0] = GPUWIRE_INT8; /* AVG of integers: one division of the wrapped sum */
    pairs[npairs++][1] = GPUWIRE_AVG;
    pairs[npairs][0] = GPUWIRE_FLOAT32;
    pairs[npairs++][1] = GPUWIRE_BAND;
    pairs[npairs][0] = GPUWIRE_COMPLEX64;
    pairs[npairs++][1] = GPUWIRE_MAX;
    for (int k = 0; k < npairs; k++) {
        int32_t dt = pairs[k][0], op = pairs[k][1];
        gpuwire_buffer in = balloc(N, dt), a = balloc(N, dt), b = balloc(N, dt), c = balloc(N, dt);
        void *ip = bptr(in), *ap = bptr(a), *bp = bptr(b), *cp = bptr(c);
        gpuwire_status fs, hs;
        for (int i = 0; i < N; i++) {
            hput(ip, dt, i, hval(rank, i), rank);
            hput(cp, dt, i, hval(rank, i), rank);
        }
        fs = gpuwire_allreduce(flat, in, a, op, NULL);
        hs = gpuwire_allreduce(h, in, b, op, NULL);
        EXPECT(fs == hs);
        if (fs == GPUWIRE_SUCCESS) {
            combos++;
            EXPECT(hsame(ap, bp, dt, N));
            EXPECT_OK(gpuwire_allreduce(h, c, c, op, NULL)); /* in place */
            EXPECT(hsame(ap, cp, dt, N));
            if (!hsame(ap, bp, dt, N) || !hsame(ap, cp, dt, N))
                fprintf(stderr, "rank %d: hier allreduce dtype %d op %d differs from flat\n", rank, (int)dt, (int)op);
        }
        {
            /* reduce_scatter_block of the same pair: the leaders' step is a reduce_scatterv
             * (float64_int32 MINLOC/MAXLOC failed there with MPI_ERR_OP while MPI was given the
             * pair's move datatype). */
            gpuwire_buffer rin = balloc(N * size, dt), rf = balloc(N, dt), rh = balloc(N, dt);
            for (int i = 0; i < N * size; i++)
                hput(bptr(rin), dt, i, hval(rank, i), rank);
            fs = gpuwire_reduce_scatter_block(flat, rin, rf, op, NULL);
            hs = gpuwire_reduce_scatter_block(h, rin, rh, op, NULL);
            EXPECT(fs == hs);
            if (fs != hs)
                fprintf(stderr, "rank %d: hier reduce_scatter_block dtype %d op %d: status %d, flat %d\n", rank, (int)dt, (int)op, (int)hs, (int)fs);
            else if (fs == GPUWIRE_SUCCESS) {
                EXPECT(hsame(bptr(rf), bptr(rh), dt, N));
                if (!hsame(bptr(rf), bptr(rh), dt, N))
                    fprintf(stderr, "rank %d: hier reduce_scatter_block dtype %d op %d differs from flat\n", rank, (int)dt, (int)op);
            }
            EXPECT_OK(gpuwire_buffer_free(rin));
            EXPECT_OK(gpuwire_buffer_free(rf));
            EXPECT_OK(gpuwire_buffer_free(rh));
        }
        EXPECT_OK(gpuwire_buffer_free(in));
        EXPECT_OK(gpuwire_buffer_free(a));
        EXPECT_OK(gpuwire_buffer_free(b));
        EXPECT_OK(gpuwire_buffer_free(c));
    }
    EXPECT(combos == npairs - 2);

    /* Values computed here: int32 SUM and int64 MAX; float64 SUM of inexact values within
     * rounding of the flat path's (another order of combination), the same on every rank. */
    {
        gpuwire_buffer x = balloc(N, GPUWIRE_INT32), y = balloc(N, GPUWIRE_INT64);
        gpuwire_buffer f = balloc(N, GPUWIRE_FLOAT64), g = balloc(N, GPUWIRE_FLOAT64), g0 = balloc(N, GPUWIRE_FLOAT64);
        int32_t *xp = bptr(x);
        int64_t *yp = bptr(y);
        double *fp = bptr(f), *gp = bptr(g), *g0p = bptr(g0);
        for (int i = 0; i < N; i++) {
            xp[i] = hval(rank, i) * 1000003;
            yp[i] = (int64_t)hval(rank, i) << 40 | rank;
            fp[i] = 0.1 * (rank + 1) + 1e-3 * i;
        }
        EXPECT_OK(gpuwire_allreduce(h, x, x, GPUWIRE_SUM, NULL));
        EXPECT_OK(gpuwire_allreduce(h, y, y, GPUWIRE_MAX, NULL));
        EXPECT_OK(gpuwire_allreduce(h, f, g, GPUWIRE_SUM, NULL));
        EXPECT_OK(gpuwire_allreduce(flat, f, g0, GPUWIRE_SUM, NULL));
        for (int i = 0; i < N; i++) {
            int32_t s = 0;
            int64_t m = 0;
            for (int q = 0; q < size; q++) {
                s += hval(q, i) * 1000003;
                if (((int64_t)hval(q, i) << 40 | q) > m)
                    m = (int64_t)hval(q, i) << 40 | q;
            }
            EXPECT(xp[i] == s && yp[i] == m);
            EXPECT(gp[i] > g0p[i] - 1e-12 * g0p[i] && gp[i] < g0p[i] + 1e-12 * g0p[i]);
        }
        {
            double first = gp[0], top = 0;
            MPI_Allreduce(&first, &top, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            EXPECT(first == top); /* the same bits on every rank */
        }
        EXPECT_OK(gpuwire_buffer_free(x));
        EXPECT_OK(gpuwire_buffer_free(y));
        EXPECT_OK(gpuwire_buffer_free(f));
        EXPECT_OK(gpuwire_buffer_free(g));
        EXPECT_OK(gpuwire_buffer_free(g0));
    }

    /* bcast and reduce from a non-leader root on another host than rank 0's (in place too). */
    {
        gpuwire_buffer b = balloc(N, GPUWIRE_INT64), s = balloc(N, GPUWIRE_INT32), r = balloc(N, GPUWIRE_INT32);
        int64_t *bp = bptr(b);
        int32_t *sp = bptr(s), *rp = bptr(r);
        for (int i = 0; i < N; i++)
            bp[i] = rank == root ? 5000 + i : -1;
        EXPECT_OK(gpuwire_bcast(h, b, root, NULL));
        for (int i = 0; i < N; i++)
            EXPECT(bp[i] == 5000 + i);
        for (int pass = 0; pass < 2; pass++) {
            for (int i = 0; i < N; i++) {
                sp[i] = hval(rank, i) * (rank + 1);
                rp[i] = pass == 1 && rank == root ? sp[i] : -7;
            }
            if (pass == 0)
                EXPECT_OK(gpuwire_reduce(h, s, r, GPUWIRE_SUM, root, NULL));
            else
                EXPECT_OK(gpuwire_reduce(h, rank == root ? r : s, r, GPUWIRE_SUM, root, NULL)); /* in place at the root */
            for (int i = 0; i < N; i++) {
                int32_t want_i = 0;
                for (int q = 0; q < size; q++)
                    want_i += hval(q, i) * (q + 1);
                EXPECT(rank == root ? rp[i] == want_i : rp[i] == -7);
                if (rank == root && rp[i] != want_i)
                    fprintf(stderr, "rank %d: hier reduce pass %d [%d] = %d, expected %d\n", rank, pass, i, (int)rp[i], (int)want_i);
            }
        }
        /* reduce onto rank 0 (a leader) too. */
        for (int i = 0; i < N; i++)
            rp[i] = -7;
        EXPECT_OK(gpuwire_reduce(h, s, r, GPUWIRE_MAX, 0, NULL));
        if (rank == 0)
            for (int i = 0; i < N; i++) {
                int32_t m = 0;
                for (int q = 0; q < size; q++)
                    m = hval(q, i) * (q + 1) > m ? hval(q, i) * (q + 1) : m;
                EXPECT(rp[i] == m);
            }
        EXPECT_OK(gpuwire_buffer_free(b));
        EXPECT_OK(gpuwire_buffer_free(s));
        EXPECT_OK(gpuwire_buffer_free(r));
    }

    /* allgather, allgatherv with uneven counts (one rank sends none), in place too;
     * reduce_scatter_block. */
    {
        int counts[MAX_RANKS], displs[MAX_RANKS], total = 0;
        int64_t c64[MAX_RANKS];
        gpuwire_buffer s = balloc(3, GPUWIRE_INT32), g = balloc(3 * size, GPUWIRE_INT32);
        int32_t *sp = bptr(s), *gp = bptr(g);
        for (int pass = 0; pass < 2; pass++) {
            gpuwire_buffer mine = GPUWIRE_BUFFER_NULL;
            for (int i = 0; i < 3 * size; i++)
                gp[i] = -1;
            for (int i = 0; i < 3; i++)
                sp[i] = rank * 100 + i;
            if (pass == 1) {
                EXPECT_OK(gpuwire_buffer_view(g, 3 * rank, 3, &mine));
                memcpy(gp + 3 * rank, sp, 3 * sizeof *sp);
            }
            EXPECT_OK(gpuwire_allgather(h, pass == 1 ? mine : s, g, NULL));
            for (int q = 0; q < size; q++)
                for (int i = 0; i < 3; i++)
                    EXPECT(gp[3 * q + i] == q * 100 + i);
            if (pass == 1)
                EXPECT_OK(gpuwire_buffer_free(mine));
        }
        for (int q = 0; q < size; q++) {
            counts[q] = (q + 2) % 3;
            c64[q] = counts[q];
            displs[q] = total;
            total += counts[q];
        }
        {
            gpuwire_buffer v = balloc(total, GPUWIRE_INT32), vs = GPUWIRE_BUFFER_NULL;
            int32_t *vp = bptr(v);
            for (int pass = 0; pass < 2; pass++) {
                for (int i = 0; i < total; i++)
                    vp[i] = -1;
                for (int i = 0; i < counts[rank]; i++)
                    sp[i] = rank * 10 + i;
                if (pass == 0) {
                    EXPECT_OK(gpuwire_buffer_view(s, 0, counts[rank], &vs));
                } else {
                    EXPECT_OK(gpuwire_buffer_view(v, displs[rank], counts[rank], &vs));
                    memcpy(vp + displs[rank], sp, (size_t)counts[rank] * sizeof *sp);
                }
                EXPECT_OK(gpuwire_allgatherv(h, vs, v, c64, NULL));
                for (int q = 0; q < size; q++)
                    for (int i = 0; i < counts[q]; i++)
                        EXPECT(vp[displs[q] + i] == q * 10 + i);
                EXPECT_OK(gpuwire_buffer_free(vs));
            }
            EXPECT_OK(gpuwire_buffer_free(v));
        }
        {
            gpuwire_buffer rs = balloc(2 * size, GPUWIRE_INT64), rr = balloc(2, GPUWIRE_INT64), rf = balloc(2, GPUWIRE_INT64);
            int64_t *rsp = bptr(rs), *rrp = bptr(rr), *rfp = bptr(rf);
            for (int j = 0; j < 2 * size; j++)
                rsp[j] = hval(rank, j) * (j + 1);
            EXPECT_OK(gpuwire_reduce_scatter_block(h, rs, rr, GPUWIRE_SUM, NULL));
            EXPECT_OK(gpuwire_reduce_scatter_block(flat, rs, rf, GPUWIRE_SUM, NULL));
            for (int i = 0; i < 2; i++) {
                int64_t w = 0;
                for (int q = 0; q < size; q++)
                    w += hval(q, 2 * rank + i) * (2 * rank + i + 1);
                EXPECT(rrp[i] == w && rfp[i] == w);
            }
            EXPECT_OK(gpuwire_buffer_free(rs));
            EXPECT_OK(gpuwire_buffer_free(rr));
            EXPECT_OK(gpuwire_buffer_free(rf));
        }
        EXPECT_OK(gpuwire_buffer_free(s));
        EXPECT_OK(gpuwire_buffer_free(g));
    }
    /* Nonblocking forms and a group run the same composition (on the progress engine). */
    {
        gpuwire_buffer x = balloc(N, GPUWIRE_INT64), y = balloc(N, GPUWIRE_INT64), b = balloc(N, GPUWIRE_INT32);
        int64_t *xp = bptr(x), *yp = bptr(y);
        int32_t *bp = bptr(b);
        gpuwire_request rq[2] = {GPUWIRE_REQUEST_NULL, GPUWIRE_REQUEST_NULL};
        for (int i = 0; i < N; i++) {
            xp[i] = hval(rank, i) + rank;
            bp[i] = rank == root ? 77 + i : 0;
        }
        EXPECT_OK(gpuwire_iallreduce(h, x, y, GPUWIRE_SUM, NULL, &rq[0]));
        EXPECT_OK(gpuwire_ibcast(h, b, root, NULL, &rq[1]));
        EXPECT_OK(gpuwire_waitall(2, rq));
        for (int i = 0; i < N; i++) {
            int64_t w = 0;
            for (int q = 0; q < size; q++)
                w += hval(q, i) + q;
            EXPECT(yp[i] == w && bp[i] == 77 + i);
        }
        EXPECT_OK(gpuwire_group_start());
        EXPECT_OK(gpuwire_allreduce(h, x, x, GPUWIRE_MAX, NULL));
        EXPECT_OK(gpuwire_bcast(h, b, 0, NULL));
        EXPECT_OK(gpuwire_group_end());
        for (int i = 0; i < N; i++) {
            int64_t m = 0;
            for (int q = 0; q < size; q++)
                m = hval(q, i) + q > m ? hval(q, i) + q : m;
            EXPECT(xp[i] == m && bp[i] == 77 + i);
        }
        EXPECT_OK(gpuwire_buffer_free(x));
        EXPECT_OK(gpuwire_buffer_free(y));
        EXPECT_OK(gpuwire_buffer_free(b));
    }
    EXPECT_OK(gpuwire_comm_free(h));
    EXPECT_OK(gpuwire_comm_free(flat));
}

int main(int argc, char **argv)
{
    int provided, expected, host_of[MAX_RANKS], len = 0;
    long failures, total = 0;
    char name[NAME_LEN];
    gpuwire_comm comm = GPUWIRE_COMM_NULL;

    if (argc != 2 || (expected = layout(argv[1], host_of)) < 0) {
        fprintf(stderr, "usage: test_multihost SLOTS   (ranks per host, e.g. 2,2 or 1,2,1)\n");
        return 2;
    }
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gwt_rank = rank;
    if (size != expected || hosts < 2) {
        fprintf(stderr, "test_multihost: launched on %d ranks, expected %d on %d hosts (at least 2)\n",
                size, expected, hosts);
        MPI_Finalize();
        return 1;
    }
    memset(name, 0, sizeof name);
    MPI_Get_processor_name(name, &len);
    MPI_Allgather(name, NAME_LEN, MPI_CHAR, names, NAME_LEN, MPI_CHAR, MPI_COMM_WORLD);
    if (gethostname(myhost, sizeof myhost - 1) != 0)
        strcpy(myhost, "?");
    myhost[sizeof myhost - 1] = '\0';
    if (!layout_as_asked(host_of)) {
        if (rank == 0) {
            fprintf(stderr, "test_multihost: FAIL: the ranks are not on the %d hosts asked for (%s):", hosts, argv[1]);
            for (int q = 0; q < size; q++)
                fprintf(stderr, " %d@%s", q, names[q]);
            fprintf(stderr, " (run it under scripts/multihost.sh)\n");
        }
        MPI_Finalize();
        return 1;
    }

    EXPECT_OK(gpuwire_init());
    EXPECT_OK(gpuwire_comm_create((int32_t)MPI_Comm_c2f(MPI_COMM_WORLD), NULL, &comm));
    {
        int all[MAX_RANKS];
        for (int q = 0; q < size; q++)
            all[q] = q;
        check_comm(comm, all, size, "world");
    }
    splits(comm);
    darray_across(comm);
    checking_across();
    timeout_across(0);
    timeout_across(1);
    hier_across();
    hier_create_tiny_timeout();
    hier_min_bytes_bad_at_run_time();
    EXPECT_OK(gpuwire_comm_free(comm));
    EXPECT_OK(gpuwire_finalize());

    failures = gwt_failures();
    MPI_Allreduce(&failures, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (failures > 0)
        fprintf(stderr, "test_multihost: rank %d: %ld of %ld checks failed\n", rank, failures, gwt_checks);
    if (rank == 0) {
        if (total == 0)
            printf("test_multihost: PASS (%d ranks on %d hosts, %ld checks on rank 0)\n", size, hosts, gwt_checks);
        else
            printf("test_multihost: FAIL (%ld failed checks over all ranks)\n", total);
    }
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
