// test_hpp.cpp: the C++ header gpuwire.hpp, on 1, 2 and 3 ranks (C++17, -Wall -Wextra -Werror).
//
// RAII (handles freed by destructors, moves leave NULL, move-only types, a nested environment
// that does not finalize), exceptions (status code and message), spans (views of std::vector, std::array, C arrays; host_span of buffers), every
// communicator query and every operation with data checked, requests (wait, test, wait_all, a
// pending request waited for by its destructor on a communicator with a timeout; the cases
// without a timeout and during unwinding are in test_hpp_unwind.cpp), and every gpuwire::darray method with its
// result checked (1-D and 2-D arrays, spans and scalars of the wrong type or length, complex dot).
// Prints "test_hpp: PASS" on rank 0 when every rank passed.
//
// Usage: mpirun -n N test_hpp [EXPECTED_RANKS]
#include "gpuwire.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

namespace gw = gpuwire;

static_assert(!std::is_copy_constructible<gw::comm>::value, "comm is move-only");
static_assert(!std::is_copy_assignable<gw::buffer>::value, "buffer is move-only");
static_assert(!std::is_copy_constructible<gw::request>::value, "request is move-only");
static_assert(!std::is_copy_constructible<gw::darray>::value &&
                  !std::is_copy_assignable<gw::darray>::value &&
                  std::is_nothrow_move_constructible<gw::darray>::value &&
                  std::is_nothrow_move_assignable<gw::darray>::value,
              "darray is move-only");
static_assert(std::is_nothrow_move_constructible<gw::comm>::value &&
                  std::is_nothrow_move_constructible<gw::buffer>::value &&
                  std::is_nothrow_move_constructible<gw::request>::value &&
                  std::is_nothrow_move_assignable<gw::buffer>::value,
              "moves do not throw");
static_assert(gw::dtype_v<double> == GPUWIRE_FLOAT64 && gw::dtype_v<const int32_t> == GPUWIRE_INT32 &&
                  gw::dtype_v<std::complex<float>> == GPUWIRE_COMPLEX64 &&
                  gw::dtype_v<uint8_t> == GPUWIRE_UINT8,
              "datatypes from element types");
static_assert(std::is_base_of<std::runtime_error, gw::error>::value, "gpuwire::error is an exception");

static int failures = 0;
static int rank_ = -1;
// Destroyed after main returned, once the main thread's thread-locals are gone: their frees fail
// (gpuwire is finalized), quietly. Recording that error used to panic in the library and abort
// the process (exit status 134) after the PASS line.
static gw::buffer static_leftover;
static gw::comm static_comm;

#define EXPECT(cond)                                                                             \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            std::fprintf(stderr, "FAILED rank %d %s:%d: %s\n", rank_, __FILE__, __LINE__, #cond); \
            failures++;                                                                          \
        }                                                                                        \
    } while (0)

// `stmt` must throw gpuwire::error with status `want` and a message containing `text`.
#define EXPECT_THROW(stmt, want, text)                                                           \
    do {                                                                                         \
        bool thrown_ = false;                                                                    \
        try {                                                                                    \
            stmt;                                                                                \
        } catch (const gw::error &e_) {                                                          \
            thrown_ = true;                                                                      \
            if (e_.code() != (want) || std::strstr(e_.what(), text) == nullptr) {                \
                std::fprintf(stderr, "FAILED rank %d %s:%d: %s threw code %d \"%s\"\n", rank_,    \
                             __FILE__, __LINE__, #stmt, (int)e_.code(), e_.what());              \
                failures++;                                                                      \
            }                                                                                    \
        }                                                                                        \
        if (!thrown_) {                                                                          \
            std::fprintf(stderr, "FAILED rank %d %s:%d: %s did not throw\n", rank_, __FILE__,    \
                         __LINE__, #stmt);                                                       \
            failures++;                                                                          \
        }                                                                                        \
    } while (0)

static void test_before_init()
{
    gw::version_info v = gw::version();
    EXPECT(v.major == GPUWIRE_VERSION_MAJOR && v.minor == GPUWIRE_VERSION_MINOR &&
           v.patch == GPUWIRE_VERSION_PATCH);
    EXPECT(gw::dtype_size(GPUWIRE_COMPLEX128) == 16);
    EXPECT_THROW(gw::dtype_size(static_cast<gpuwire_dtype>(99)), GPUWIRE_ERROR_UNSUPPORTED_DTYPE,
                 "gpuwire_dtype_size");
    EXPECT(!gw::environment::initialized());
    EXPECT_THROW(gw::buffer::alloc<float>(4), GPUWIRE_ERROR_NOT_INITIALIZED, "gpuwire_buffer_alloc");
    EXPECT(gw::last_error().find("gpuwire_buffer_alloc") != std::string::npos);
    EXPECT(gw::status_string(GPUWIRE_ERROR_NOT_INITIALIZED) == "gpuwire_init has not been called");
    gpuwire_config cfg = gw::config_init();
    EXPECT(cfg.chunk_bytes >= 4096);
}

static void test_buffers_and_spans()
{
    // RAII: the destructor frees the handle.
    gpuwire_buffer raw = GPUWIRE_BUFFER_NULL;
    {
        gw::buffer b = gw::buffer::alloc<double>(4);
        raw = b.get();
        EXPECT(raw.h != 0 && b.count() == 4 && b.owned());
        EXPECT(b.dtype() == GPUWIRE_FLOAT64 && b.space() == GPUWIRE_SPACE_HOST && b.device() == -1);
        gw::span<double> s = b.host_span<double>();
        EXPECT(s.size() == 4 && s[0] == 0.0 && s[3] == 0.0); // zero-filled
        EXPECT_THROW(b.host_span<float>(), GPUWIRE_ERROR_DTYPE_MISMATCH, "host_span");
        // Moves transfer the handle and leave NULL behind.
        gw::buffer c = std::move(b);
        EXPECT(!b && b.get().h == 0 && c.get().h == raw.h);
        gw::buffer d;
        d = std::move(c);
        EXPECT(!c && d.get().h == raw.h);
    }
    int64_t n = -1;
    EXPECT(gpuwire_buffer_count(raw, &n) == GPUWIRE_ERROR_INVALID_HANDLE);

    // A braced list is a span of its values ({0, 2} was span(nullptr, 2): the literal 0 went to
    // span(T *, size) as the null pointer, so procs {0, 2} of create_cart became NULL, all 0).
    auto listed = [](gw::span<const int64_t> s) {
        return s.size() == 2 && s.data() != nullptr && s[0] == 0 && s[1] == 2;
    };
    EXPECT(listed({0, 2}));

    // Spans over std::vector, std::array and C arrays; wrap borrows their memory.
    std::vector<int32_t> v(6);
    std::iota(v.begin(), v.end(), 10);
    gw::buffer bv = gw::buffer::wrap(v);
    EXPECT(bv.count() == 6 && !bv.owned() && bv.dtype() == GPUWIRE_INT32);
    EXPECT(bv.pointer() == static_cast<void *>(v.data()));
    gw::span<int32_t> sv = bv.host_span<int32_t>();
    EXPECT(sv.data() == v.data() && sv.size() == 6 && sv[5] == 15);
    gw::buffer view = bv.view(2, 3);
    EXPECT(view.count() == 3 && view.pointer() == static_cast<void *>(v.data() + 2));
    EXPECT(view.contiguous() && view.host_span<int32_t>()[0] == 12);
    // A strided view's elements are not consecutive: host_span refuses it (it gave count()
    // consecutive elements, which are not the view's).
    gw::buffer every_other = bv.view_strided(0, 3, 1, 2);
    EXPECT(!every_other.contiguous());
    EXPECT_THROW(every_other.host_span<int32_t>(), GPUWIRE_ERROR_INVALID_ARGUMENT, "not consecutive");
    std::array<float, 3> arr{{1.0f, 2.0f, 3.0f}};
    gw::buffer ba = gw::buffer::wrap(gw::span<float>(arr));
    EXPECT(ba.count() == 3 && ba.dtype() == GPUWIRE_FLOAT32);
    std::complex<double> carr[2];
    gw::buffer bc = gw::buffer::wrap(gw::span<std::complex<double>>(carr));
    EXPECT(bc.count() == 2 && bc.dtype() == GPUWIRE_COMPLEX128);
    const std::vector<int32_t> &cv = v;
    gw::span<const int32_t> csv(cv);
    EXPECT(csv.size() == 6 && csv.subspan(1, 2)[0] == 11 && csv.first(1)[0] == 10 &&
           csv.last(1)[0] == 15);

    // Copies checked against the buffer's type and length.
    gw::buffer owned = gw::buffer::alloc<int32_t>(6);
    owned.copy_from_host(csv);
    std::vector<int32_t> back(6, -1);
    owned.copy_to_host(gw::span<int32_t>(back));
    EXPECT(back == v);
    std::vector<int32_t> shorter(5);
    EXPECT_THROW(owned.copy_to_host(gw::span<int32_t>(shorter)), GPUWIRE_ERROR_COUNT_MISMATCH,
                 "5 elements");
    std::vector<float> wrong(6);
    EXPECT_THROW(owned.copy_to_host(gw::span<float>(wrong)), GPUWIRE_ERROR_DTYPE_MISMATCH,
                 "datatype");

    // Errors carry the C code and the detailed message, which names the function.
    EXPECT_THROW(gw::buffer::wrap(v.data(), -1, GPUWIRE_INT32), GPUWIRE_ERROR_INVALID_ARGUMENT,
                 "gpuwire_buffer_wrap");
    EXPECT_THROW(bv.view(4, 3), GPUWIRE_ERROR_INVALID_ARGUMENT, "gpuwire_buffer_view");
    gw::buffer freed = gw::buffer::alloc<float>(1);
    freed.free();
    EXPECT(!freed);
    EXPECT_THROW(gw::buffer(raw).count(), GPUWIRE_ERROR_INVALID_HANDLE, "gpuwire_buffer_count");
    // release() gives the handle up: the destructor then leaves it alone.
    gw::buffer keep = gw::buffer::alloc<float>(1);
    gpuwire_buffer kept = keep.release();
    EXPECT(!keep && gpuwire_buffer_free(kept) == GPUWIRE_SUCCESS);
}

static void test_comm(const gw::comm &world)
{
    const int32_t rank = world.rank(), size = world.size();
    EXPECT(world.local_rank() >= 0 && world.local_rank() < world.local_size());
    EXPECT(world.backend() != GPUWIRE_BACKEND_AUTO);
    EXPECT(world.device() >= -1);
    EXPECT(world.mpi() != 0);
    EXPECT(world.describe().find("gpuwire") != std::string::npos);
    EXPECT(gw::environment::initialized() && gw::environment::owns_mpi());
    EXPECT(gw::environment::thread_level() >= GPUWIRE_THREAD_SINGLE);
    // An environment made while gpuwire is initialized (a library routine's) does not finalize
    // it: the destructor of this one used to call gpuwire_finalize, and every later call threw
    // GPUWIRE_ERROR_ALREADY_FINALIZED.
    {
        gw::environment inner;
        EXPECT(gw::environment::initialized());
    }
    EXPECT(gw::environment::initialized());
    world.barrier();

    // split: even and odd ranks; the last rank of an odd count sits out (GPUWIRE_UNDEFINED).
    int32_t color = (size % 2 == 1 && rank == size - 1) ? GPUWIRE_UNDEFINED : rank % 2;
    gw::comm half = world.split(color, rank);
    EXPECT(static_cast<bool>(half) == (color != GPUWIRE_UNDEFINED));
    if (half)
        EXPECT(half.rank() == rank / 2);
    gw::comm copy = world.dup();
    EXPECT(copy.size() == size && copy.rank() == rank);
    gw::comm moved = std::move(copy);
    EXPECT(!copy && moved.size() == size);

    // A communicator over the MPI handle of gpuwire's own duplicate, in checking mode.
    gpuwire_config cfg = gw::config_init();
    cfg.check = 1;
    gw::comm checked = gw::comm::from_mpi(world.mpi(), cfg);
    EXPECT(checked.size() == size);
    gw::comm checked_world = gw::comm::world(cfg);
    EXPECT(checked_world.rank() == rank);
    // A root out of range throws on every rank.
    std::vector<double> one(1);
    EXPECT_THROW(checked.bcast(gw::buffer::wrap(one), size), GPUWIRE_ERROR_INVALID_ARGUMENT,
                 "gpuwire_bcast");
}

static void test_operations(const gw::comm &world)
{
    const int32_t rank = world.rank(), size = world.size();
    const int32_t right = (rank + 1) % size, left = (rank + size - 1) % size;

    // allreduce in place, on a buffer and on a span.
    std::vector<double> x(4, rank + 1.0);
    world.allreduce(gw::buffer::wrap(x), GPUWIRE_SUM);
    EXPECT(x[0] == size * (size + 1) / 2.0 && x[3] == x[0]);
    std::array<int64_t, 2> m{{rank, -rank}};
    world.allreduce(gw::span<int64_t>(m), GPUWIRE_MAX);
    EXPECT(m[0] == size - 1 && m[1] == 0);
    // On containers themselves (they did not compile: no span is deduced from a std::vector),
    // and long long, the 64-bit integer type int64_t is not on Linux.
    std::vector<double> y(3, rank + 1.0);
    world.allreduce(y, GPUWIRE_SUM);
    EXPECT(y[0] == size * (size + 1) / 2.0 && y[2] == y[0]);
    std::vector<long long> ll(2, rank);
    world.allreduce(ll, GPUWIRE_MAX);
    EXPECT(ll[0] == size - 1 && ll[1] == size - 1);
    EXPECT(gw::buffer::wrap(ll).dtype() == GPUWIRE_INT64);
    std::array<int32_t, 2> b2{{rank, 7}};
    world.bcast(b2, size - 1);
    EXPECT(b2[0] == size - 1 && b2[1] == 7);
    {
        gw::buffer cb = gw::buffer::alloc<double>(3);
        std::vector<double> back(3, -1.0);
        cb.copy_from_host(y);
        cb.copy_to_host(back);
        EXPECT(back == y);
        y[1] = 42.0;
        cb.copy_from_host(gw::span<double>(y));
        cb.copy_to_host(gw::span<double>(back));
        EXPECT(back[1] == 42.0);
    }
    // allreduce out of place.
    gw::buffer s = gw::buffer::alloc<int32_t>(3), r = gw::buffer::alloc<int32_t>(3);
    for (int32_t &e : s.host_span<int32_t>())
        e = rank;
    world.allreduce(s, r, GPUWIRE_SUM);
    EXPECT(r.host_span<int32_t>()[2] == size * (size - 1) / 2);

    // scan, exscan (rank 0's buffer untouched), iscan, iexscan; MINLOC on gw::float64_int32
    // (ties: the lower index).
    world.scan(s, r, GPUWIRE_SUM);
    EXPECT(r.host_span<int32_t>()[0] == rank * (rank + 1) / 2);
    for (int32_t &e : r.host_span<int32_t>())
        e = -9;
    world.exscan(s, r, GPUWIRE_MAX);
    EXPECT(r.host_span<int32_t>()[1] == (rank == 0 ? -9 : rank - 1));
    world.iscan(s, r, GPUWIRE_LOR).wait();
    EXPECT(r.host_span<int32_t>()[2] == (rank == 0 ? 0 : 1));
    world.iexscan(s, r, GPUWIRE_SUM).wait();
    if (rank > 0)
        EXPECT(r.host_span<int32_t>()[0] == rank * (rank - 1) / 2);
    std::array<gw::float64_int32, 2> loc{{{double(rank % 2), 50 - rank}, {1.0, rank}}};
    world.allreduce(gw::span<gw::float64_int32>(loc), GPUWIRE_MINLOC);
    EXPECT(loc[0].value == 0.0 && loc[0].index == 50 - 2 * ((size - 1) / 2));
    EXPECT(loc[1].value == 1.0 && loc[1].index == 0);
    EXPECT_THROW(world.allreduce(gw::span<double>(x), GPUWIRE_LAND), GPUWIRE_ERROR_UNSUPPORTED_OP, "LAND");

    // bcast from the last rank.
    std::vector<float> b(5, rank == size - 1 ? 7.5f : 0.0f);
    world.bcast(gw::span<float>(b), size - 1);
    EXPECT(b[4] == 7.5f);

    // Strided and subarray views (issue 15): column 1 of a 4 x 5 row-major matrix broadcast from
    // the last rank, the 2 x 2 block at (1, 2) summed into column 4, a wrap_strided send.
    {
        std::vector<int32_t> mat(20);
        for (int32_t k = 0; k < 20; k++)
            mat[k] = 100 * rank + k;
        gw::buffer whole = gw::buffer::wrap(mat);
        world.bcast(whole.view_strided(1, 4, 1, 5), size - 1);
        gw::buffer blk = whole.view_subarray({4, 5}, {2, 2}, {1, 2});
        world.allreduce(blk, whole.view_strided(4, 4, 1, 5), GPUWIRE_SUM);
        int bad = 0;
        for (int32_t i = 0; i < 4; i++)
            for (int32_t j = 0; j < 5; j++) {
                int32_t want = 100 * rank + 5 * i + j;
                if (j == 1)
                    want = 100 * (size - 1) + 5 * i + 1;
                if (j == 4) { // the block's elements (1,2) (1,3) (2,2) (2,3), summed over ranks
                    const int32_t at[4] = {7, 8, 12, 13};
                    want = 100 * size * (size - 1) / 2 + size * at[i];
                }
                bad += mat[5 * i + j] != want;
            }
        EXPECT(bad == 0);
        std::vector<int32_t> got(4, -1);
        gw::buffer rows = gw::buffer::wrap_strided(mat.data(), {2, 2}, {1, 10}, GPUWIRE_INT32);
        rows.copy_to_host(gw::span<int32_t>(got));
        EXPECT(got[0] == mat[0] && got[1] == mat[1] && got[2] == mat[10] && got[3] == mat[11]);
        EXPECT_THROW(whole.view_strided(0, 5, 1, 5), GPUWIRE_ERROR_INVALID_ARGUMENT,
                     "gpuwire_buffer_view_strided");
        EXPECT_THROW(whole.view_subarray({4, 5}, {2}, {0, 0}), GPUWIRE_ERROR_INVALID_ARGUMENT,
                     "differ in length");
    }

    // reduce to rank 0 (others pass a NULL buffer as the receive buffer).
    gw::buffer rsend = gw::buffer::wrap(x);
    std::vector<double> total(4, -1.0);
    world.reduce(rsend, rank == 0 ? gw::buffer::wrap(total) : gw::buffer(), GPUWIRE_SUM, 0);
    if (rank == 0)
        EXPECT(total[1] == x[1] * size);

    // allgather and allgatherv (with and without counts).
    std::vector<int32_t> mine(2, rank), all(2 * static_cast<std::size_t>(size), -1);
    world.allgather(gw::buffer::wrap(mine), gw::buffer::wrap(all));
    EXPECT(all[2 * static_cast<std::size_t>(size) - 1] == size - 1 && all[0] == 0);
    std::vector<int64_t> counts(static_cast<std::size_t>(size));
    int64_t sum = 0;
    for (int32_t i = 0; i < size; i++)
        sum += counts[static_cast<std::size_t>(i)] = i + 1;
    std::vector<int32_t> vsend(static_cast<std::size_t>(rank) + 1, rank), vrecv(static_cast<std::size_t>(sum), -1);
    world.allgatherv(gw::buffer::wrap(vsend), gw::buffer::wrap(vrecv), gw::span<const int64_t>(counts));
    EXPECT(vrecv[0] == 0 && vrecv[static_cast<std::size_t>(sum) - 1] == size - 1);
    std::fill(vrecv.begin(), vrecv.end(), -1);
    world.allgatherv(gw::buffer::wrap(vsend), gw::buffer::wrap(vrecv));
    EXPECT(vrecv[static_cast<std::size_t>(sum) - 1] == size - 1);
    std::vector<int64_t> too_few(static_cast<std::size_t>(size) + 1, 1);
    EXPECT_THROW(world.allgatherv(gw::buffer::wrap(vsend), gw::buffer::wrap(vrecv),
                                  gw::span<const int64_t>(too_few)),
                 GPUWIRE_ERROR_INVALID_ARGUMENT, "recvcounts");

    // reduce_scatter: block r of the sum to rank r.
    std::vector<int32_t> rs(static_cast<std::size_t>(size) * 2);
    std::iota(rs.begin(), rs.end(), 0);
    std::vector<int32_t> block(2, -1);
    world.reduce_scatter(gw::buffer::wrap(rs), gw::buffer::wrap(block), GPUWIRE_SUM);
    EXPECT(block[0] == 2 * rank * size && block[1] == (2 * rank + 1) * size);

    // alltoall: element j of rank i's send goes to rank j's element i.
    std::vector<int32_t> a2a(static_cast<std::size_t>(size)), a2r(static_cast<std::size_t>(size), -1);
    for (int32_t j = 0; j < size; j++)
        a2a[static_cast<std::size_t>(j)] = 100 * rank + j;
    world.alltoall(gw::buffer::wrap(a2a), gw::buffer::wrap(a2r));
    EXPECT(a2r[static_cast<std::size_t>(size) - 1] == 100 * (size - 1) + rank);

    // gather and scatter at rank 0.
    std::vector<int32_t> g(static_cast<std::size_t>(size), -1), one(1, rank * 3);
    world.gather(gw::buffer::wrap(one), rank == 0 ? gw::buffer::wrap(g) : gw::buffer(), 0);
    if (rank == 0)
        EXPECT(g[static_cast<std::size_t>(size) - 1] == 3 * (size - 1));
    std::vector<int32_t> got(1, -1);
    world.scatter(rank == 0 ? gw::buffer::wrap(g) : gw::buffer(), gw::buffer::wrap(got), 0);
    EXPECT(got[0] == rank * 3);

    // The v-collectives: rank r sends r + 1 elements (100 r + j) to rank j, blocks contiguous
    // (empty displacement spans); gatherv / scatterv at the last rank; reduce_scatterv with rank
    // j's block j + 1 elements; each blocking and nonblocking.
    {
        const std::size_t p = static_cast<std::size_t>(size), me = static_cast<std::size_t>(rank);
        std::vector<int64_t> sc(p, rank + 1), rc(p), none;
        std::vector<int32_t> vs, vr;
        for (std::size_t j = 0; j < p; j++) {
            rc[j] = static_cast<int64_t>(j) + 1;
            vs.insert(vs.end(), me + 1, 100 * rank + static_cast<int32_t>(j));
        }
        for (int pass = 0; pass < 2; pass++) {
            vr.assign(p * (p + 1) / 2, -1);
            gw::buffer bs = gw::buffer::wrap(vs), br = gw::buffer::wrap(vr);
            if (pass == 0)
                world.alltoallv(bs, sc, none, br, rc, none);
            else
                world.ialltoallv(bs, sc, none, br, rc, none).wait();
            bool good = true;
            for (std::size_t j = 0, at = 0; j < p; at += j + 1, j++)
                for (std::size_t k = 0; k <= j; k++)
                    good = good && vr[at + k] == 100 * static_cast<int32_t>(j) + rank;
            EXPECT(good);
        }
        EXPECT_THROW(world.alltoallv(gw::buffer::wrap(vs), too_few, none, gw::buffer::wrap(vr), rc, none),
                     GPUWIRE_ERROR_INVALID_ARGUMENT, "one entry per rank");
        const int32_t root = size - 1;
        std::vector<int32_t> gs(me + 1, 7 * rank), gr(p * (p + 1) / 2, -1);
        for (int pass = 0; pass < 2; pass++) {
            std::fill(gr.begin(), gr.end(), -1);
            gw::buffer bg = rank == root ? gw::buffer::wrap(gr) : gw::buffer();
            if (pass == 0)
                world.gatherv(gw::buffer::wrap(gs), bg, rc, none, root);
            else
                world.igatherv(gw::buffer::wrap(gs), bg, rc, none, root).wait();
            if (rank == root)
                EXPECT(gr[0] == 0 && gr[p * (p + 1) / 2 - 1] == 7 * (size - 1));
        }
        for (int pass = 0; pass < 2; pass++) {
            std::vector<int32_t> back(me + 1, -1);
            gw::buffer bg = rank == root ? gw::buffer::wrap(gr) : gw::buffer();
            if (pass == 0)
                world.scatterv(bg, rc, none, gw::buffer::wrap(back), root);
            else
                world.iscatterv(bg, rc, none, gw::buffer::wrap(back), root).wait();
            EXPECT(back[0] == 7 * rank && back[me] == 7 * rank);
        }
        std::vector<int32_t> in(p * (p + 1) / 2), out;
        std::iota(in.begin(), in.end(), rank);
        const int32_t off = rank * (rank + 1) / 2;
        for (int pass = 0; pass < 2; pass++) {
            out.assign(me + 1, -1);
            if (pass == 0)
                world.reduce_scatterv(gw::buffer::wrap(in), gw::buffer::wrap(out), rc, GPUWIRE_SUM);
            else
                world.ireduce_scatterv(gw::buffer::wrap(in), gw::buffer::wrap(out), rc, GPUWIRE_SUM).wait();
            EXPECT(out[0] == size * off + size * (size - 1) / 2 && out[me] == size * (off + rank) + size * (size - 1) / 2);
        }
        std::vector<int32_t> blk(2, -1);
        world.reduce_scatter_block(gw::buffer::wrap(rs), gw::buffer::wrap(blk), GPUWIRE_SUM);
        EXPECT(blk[0] == 2 * rank * size && blk[1] == (2 * rank + 1) * size);
        blk.assign(2, -1);
        world.ireduce_scatter_block(gw::buffer::wrap(rs), gw::buffer::wrap(blk), GPUWIRE_SUM).wait();
        EXPECT(blk[0] == 2 * rank * size && blk[1] == (2 * rank + 1) * size);
    }

    // Point-to-point around the ring.
    std::vector<double> out(3, rank), in(3, -1.0);
    gw::buffer bout = gw::buffer::wrap(out), bin = gw::buffer::wrap(in);
    world.sendrecv(bout, right, 1, bin, left, 1);
    EXPECT(in[2] == left);
    if (size > 1) {
        if (rank % 2 == 0) {
            world.send(bout, right, 2);
            world.recv(bin, left, 2);
        } else {
            world.recv(bin, left, 2);
            world.send(bout, right, 2);
        }
        EXPECT(in[0] == left);
    }
    world.send(bout, GPUWIRE_PROC_NULL, 0); // returns at once

    // Requests: wait, test, wait_all, and the destructor of a pending request.
    std::fill(in.begin(), in.end(), -1.0);
    gw::request rr = world.irecv(bin, left, 3);
    gw::request rsend_req = world.isend(bout, right, 3);
    EXPECT(rr.active());
    rsend_req.wait();
    EXPECT(!rsend_req.active());
    while (!rr.test()) {
    }
    EXPECT(!rr.active() && in[1] == left);
    std::vector<gw::request> reqs;
    std::fill(in.begin(), in.end(), -1.0);
    reqs.push_back(world.irecv(bin, left, 4));
    reqs.push_back(world.isend(bout, right, 4));
    reqs.emplace_back(); // a NULL request is skipped
    gw::wait_all(reqs);
    EXPECT(!reqs[0].active() && !reqs[1].active() && in[2] == left);
    {
        gpuwire_config cfg = gw::config_init();
        cfg.timeout_seconds = 60.0;
        gw::comm timed = gw::comm::world(cfg);
        std::fill(in.begin(), in.end(), -1.0);
        // request::cancel (gpuwire_cancel): the receive is withdrawn unless its message matched
        // already; then the message goes to the next receive. A send is not cancelled.
        gw::request pending_recv = timed.irecv_status(bin, left, 5);
        gw::request pending_send = timed.isend(bout, right, 5);
        pending_recv.cancel();
        pending_send.cancel();
        const gpuwire_status_t cst = pending_recv.wait_status();
        if (cst.cancelled) {
            EXPECT(in[0] == -1.0 && cst.count == 0);
            timed.recv(bin, left, 5);
        } else {
            EXPECT(cst.count == 3 && cst.source == left);
        }
        EXPECT(in[0] == left && in[2] == left);
        const gpuwire_status_t sst = pending_send.wait_status();
        EXPECT(sst.cancelled == 0);
    }

    // Receive status, wildcards and probes (issue 13): from the left neighbour, any tag.
    std::vector<double> wide(5, -1.0);
    gw::buffer bwide = gw::buffer::wrap(wide);
    gw::request ws = world.isend(bout, right, 6);
    gpuwire_status_t ps = world.probe(GPUWIRE_ANY_SOURCE, 6, GPUWIRE_FLOAT64);
    EXPECT(ps.source == left && ps.tag == 6 && ps.count == 3);
    gpuwire_status_t got_st{};
    EXPECT(world.iprobe(left, GPUWIRE_ANY_TAG, GPUWIRE_FLOAT64, got_st) && got_st.tag == 6);
    gpuwire_status_t rs_st = world.recv_status(bwide, GPUWIRE_ANY_SOURCE, GPUWIRE_ANY_TAG);
    EXPECT(rs_st.source == left && rs_st.tag == 6 && rs_st.count == 3 && wide[2] == left && wide[3] == -1.0);
    ws.wait();
    std::vector<gw::request> st_reqs;
    st_reqs.push_back(world.irecv_status(bwide, GPUWIRE_ANY_SOURCE, 7));
    st_reqs.push_back(world.isend(bout, right, 7));
    int32_t first = gw::wait_any(st_reqs);
    EXPECT(first == 0 || first == 1);
    int32_t idx = 0;
    gpuwire_status_t any_st{};
    while (!gw::test_any(st_reqs, idx, &any_st)) {
    }
    EXPECT(!st_reqs[0].active() && !st_reqs[1].active());
    st_reqs[0] = world.irecv_status(bwide, left, 8);
    st_reqs[1] = world.isend(bout, right, 8);
    gpuwire_status_t all_st[2];
    while (!gw::test_all(st_reqs, all_st)) {
    }
    EXPECT(all_st[0].source == left && all_st[0].count == 3 && all_st[1].count == 0);
    // wait_some / test_some: the indices of those completed, in order, with their statuses.
    st_reqs[0] = world.irecv_status(bwide, left, 13);
    st_reqs[1] = world.isend(bout, right, 13);
    std::vector<int32_t> done_idx;
    for (int pass = 0; pass < 1000000 && done_idx.size() < 2; pass++) {
        std::vector<gpuwire_status_t> some_st;
        std::vector<int32_t> got = pass % 2 ? gw::test_some(st_reqs, &some_st) : gw::wait_some(st_reqs, &some_st);
        EXPECT(got.size() == some_st.size());
        for (std::size_t k = 0; k < got.size(); k++) {
            done_idx.push_back(got[k]);
            if (got[k] == 0)
                EXPECT(some_st[k].source == left && some_st[k].tag == 13 && some_st[k].count == 3);
        }
    }
    EXPECT(done_idx.size() == 2 && done_idx[0] != done_idx[1] && !st_reqs[0].active() && !st_reqs[1].active());
    EXPECT(gw::wait_some(st_reqs).empty()); // every request NULL
    gw::request one_req = world.irecv_status(bwide, left, 9);
    gw::request one_send = world.isend(bout, right, 9);
    gpuwire_status_t ts{};
    while (!one_req.test_status(ts)) {
    }
    EXPECT(ts.tag == 9);
    one_send.wait();
    gw::request wreq = world.irecv_status(bwide, left, 10);
    gw::request wsend = world.isend(bout, right, 10);
    EXPECT(wreq.wait_status().tag == 10);
    wsend.wait();
    // A request that fails: wait_any's and test_any's error names its index (as MPI_Waitany's
    // `index`), and the request is released. A receive of 5 elements of a message of 3 is
    // refused (COUNT_MISMATCH); index 0 is a NULL request.
    for (int form = 0; form < 2; form++) {
        std::vector<double> five(5, -1.0);
        gw::buffer bfive = gw::buffer::wrap(five);
        std::vector<gw::request> fr;
        fr.emplace_back();
        fr.push_back(world.irecv(bfive, left, 11 + form));
        gw::request fsend = world.isend(bout, right, 11 + form);
        int32_t at = -5;
        gpuwire_status code = GPUWIRE_SUCCESS;
        try {
            if (form == 0) {
                (void)gw::wait_any(fr);
            } else {
                int32_t unused = 0;
                while (!gw::test_any(fr, unused)) {
                }
            }
        } catch (const gw::error &e) {
            at = e.index();
            code = e.code();
        }
        EXPECT(at == 1 && code == GPUWIRE_ERROR_COUNT_MISMATCH && !fr[1].active());
        fsend.wait();
    }
    {
        gw::comm doomed = gw::comm::world();
        EXPECT(doomed.async_error() == GPUWIRE_SUCCESS);
        doomed.abort();
        EXPECT(doomed.async_error() == GPUWIRE_ERROR_COMM_BROKEN);
        EXPECT_THROW(doomed.barrier(), GPUWIRE_ERROR_COMM_BROKEN, "aborted");
    }
    world.barrier();
}

// Distributed arrays: every gpuwire::darray method, checked against answers computed here from the
// global data (11 elements: uneven on 2 and 3 ranks).
static void test_darray(const gw::comm &world)
{
    const int32_t rank = world.rank(), size = world.size();
    const int64_t n = 11;
    auto split = [&](int64_t len, int32_t r, int64_t &off, int64_t &cnt) {
        const int64_t q = len / size, rem = len % size;
        cnt = q + (r < rem ? 1 : 0);
        off = r * q + (r < rem ? r : rem);
    };
    int64_t off = 0, len = 0;
    split(n, rank, off, len);

    // RAII and moves.
    gpuwire_darray raw = GPUWIRE_DARRAY_NULL;
    {
        gw::darray d = gw::darray::create<double>(world, n);
        raw = d.get();
        gw::darray e = std::move(d);
        EXPECT(!d && d.get().h == 0 && e.get().h == raw.h);
        gw::darray f;
        f = std::move(e);
        EXPECT(!e && f.get().h == raw.h && f.global_len() == n);
    }
    int64_t v = -1;
    EXPECT(gpuwire_darray_global_len(raw, &v) == GPUWIRE_ERROR_INVALID_HANDLE);

    // Queries.
    gw::darray x = gw::darray::create<double>(world, n);
    gw::darray y = gw::darray::create(world, n, GPUWIRE_DECIDE, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST,
                                      GPUWIRE_PARTITION_SCATTER);
    EXPECT(x.global_len() == n && x.local_len() == len && x.global_offset() == off);
    EXPECT(x.ndim() == 1 && x.halo() == 0 && x.dtype() == GPUWIRE_FLOAT64 &&
           x.space() == GPUWIRE_SPACE_HOST && x.partition() == GPUWIRE_PARTITION_SCATTER);
    std::vector<int64_t> lens = x.local_lens();
    EXPECT(lens.size() == static_cast<std::size_t>(size));
    for (int32_t r = 0; r < size; r++) {
        int64_t o, c;
        split(n, r, o, c);
        EXPECT(lens[static_cast<std::size_t>(r)] == c);
    }
    EXPECT(x.shape() == std::vector<int64_t>{n} && x.local_shape() == std::vector<int64_t>{len});
    gw::buffer lb = x.local(), wb = x.local_with_halo();
    EXPECT(lb.count() == len && wb.count() == len && (len == 0 || lb.pointer() == x.data()));
    {
        // An adopted handle: local_lens asks the array's communicator for its size
        // (gpuwire_darray_comm). release() gives the handle back, so y keeps it.
        gw::darray unknown(y.get());
        EXPECT(unknown.local_lens() == lens);
        EXPECT(unknown.release().h == y.get().h);
        gw::darray adopted(y.get(), size);
        EXPECT(adopted.local_lens() == lens);
        EXPECT(adopted.release().h == y.get().h && !adopted);
        // A comm_size too small is not trusted: local_lens wrote size entries into a vector of
        // comm_size (a heap overflow; a helper's hunt).
        gw::darray wrong(y.get(), 1);
        EXPECT(wrong.local_lens() == lens);
        EXPECT(wrong.release().h == y.get().h);
    }

    // Data: set_global, allgather, gather; arithmetic; reductions.
    std::vector<double> g(static_cast<std::size_t>(n)), h(g.size()), out(g.size());
    for (std::size_t i = 0; i < g.size(); i++) {
        g[i] = static_cast<double>(i) - 4.0; // -4 .. 6
        h[i] = 2.0 * static_cast<double>(i) + 1.0;
    }
    x.set_global(gw::span<const double>(g));
    EXPECT(x.host_span<double>().size() == static_cast<std::size_t>(len) &&
           (len == 0 || x.host_span<double>()[0] == g[static_cast<std::size_t>(off)]));
    x.allgather(gw::span<double>(out));
    EXPECT(out == g);
    std::fill(out.begin(), out.end(), 0.0);
    if (rank == size - 1)
        x.gather(gw::span<double>(out), size - 1);
    else
        x.gather(gw::span<double>(), size - 1); // not read elsewhere: empty is fine
    if (rank == size - 1)
        EXPECT(out == g);
    std::fill(out.begin(), out.end(), 0.0);
    x.allgather(static_cast<void *>(out.data()));
    x.gather(rank == 0 ? static_cast<void *>(out.data()) : nullptr, 0);
    EXPECT(out == g);
    EXPECT_THROW(x.host_span<float>(), GPUWIRE_ERROR_DTYPE_MISMATCH, "host_span");
    EXPECT_THROW(x.allgather(gw::span<double>(out.data(), out.size() - 1)),
                 GPUWIRE_ERROR_COUNT_MISMATCH, "10 elements");
    std::vector<float> wrong(g.size());
    EXPECT_THROW(x.allgather(gw::span<float>(wrong)), GPUWIRE_ERROR_DTYPE_MISMATCH,
                 "GPUWIRE_FLOAT32");
    y.set_global(static_cast<const void *>(h.data()));
    y.axpy(2.0, x);                           // y = 2 x + y
    const double half = 0.5;
    y.scale(static_cast<const void *>(&half)); // y = x + h / 2
    y.allgather(gw::span<double>(out));
    double want_dot = 0.0, n1 = 0.0, n2 = 0.0, sum = 0.0;
    for (std::size_t i = 0; i < g.size(); i++) {
        EXPECT(out[i] == g[i] + h[i] / 2.0);
        want_dot += g[i] * out[i];
        n1 += std::abs(g[i]);
        n2 += g[i] * g[i];
        sum += g[i];
    }
    EXPECT(x.dot<double>(y) == want_dot);
    double d = 0.0;
    x.dot(y, &d);
    EXPECT(d == want_dot);
    EXPECT(x.norm(GPUWIRE_NORM_1) == n1 && std::abs(x.norm() - std::sqrt(n2)) < 1e-12 &&
           x.norm(GPUWIRE_NORM_INF) == 6.0);
    EXPECT(x.sum<double>() == sum && x.min<double>() == -4.0 && x.max<double>() == 6.0);
    double r = 0.0;
    x.sum(&r);
    EXPECT(r == sum);
    x.min(&r);
    EXPECT(r == -4.0);
    x.max(&r);
    EXPECT(r == 6.0);
    EXPECT_THROW(x.sum<float>(), GPUWIRE_ERROR_DTYPE_MISMATCH, "gpuwire_darray_sum");
    EXPECT_THROW(y.axpy(2.0f, x), GPUWIRE_ERROR_DTYPE_MISMATCH, "alpha");
    y.axpy(static_cast<const void *>(&half), x); // y = x / 2 + x + h / 2
    y.scale(2.0);
    y.allgather(gw::span<double>(out));
    EXPECT(out[3] == 3.0 * g[3] + h[3]);
    y.fill(1.5);
    EXPECT(y.sum<double>() == 1.5 * static_cast<double>(n));
    const double minus = -1.0;
    y.fill(static_cast<const void *>(&minus));
    EXPECT(y.max<double>() == -1.0);

    // Redistribution to BROADCAST and to everything on rank 0; bcast.
    gw::darray bc = gw::darray::create<double>(world, n, GPUWIRE_DECIDE, GPUWIRE_SPACE_HOST,
                                               GPUWIRE_PARTITION_BROADCAST);
    x.redistribute(bc);
    gw::span<double> all = bc.host_span<double>();
    EXPECT(all.size() == g.size() && std::equal(all.begin(), all.end(), g.begin()));
    if (rank == size - 1)
        std::fill(all.begin(), all.end(), 7.0);
    bc.bcast(size - 1);
    EXPECT(all[0] == 7.0 && all[static_cast<std::size_t>(n) - 1] == 7.0);
    gw::darray z = gw::darray::create<double>(world, n, rank == 0 ? n : 0);
    x.redistribute(z);
    EXPECT(z.local_len() == (rank == 0 ? n : 0));
    if (rank == 0)
        EXPECT(z.host_span<double>()[10] == 6.0);

    // A 2-D int32 array with a halo row: row i holds i; halo_exchange fills the ghost rows.
    const int64_t rows = 2 * size + 1, cols = 3;
    std::array<int64_t, 2> shape{{rows, cols}};
    gw::darray grid =
        gw::darray::create_nd<int32_t>(world, gw::span<const int64_t>(shape), GPUWIRE_DECIDE, 1);
    int64_t r0 = 0, nr = 0;
    split(rows, rank, r0, nr);
    EXPECT(grid.ndim() == 2 && grid.halo() == 1 &&
           grid.shape() == std::vector<int64_t>({rows, cols}) &&
           grid.local_shape() == std::vector<int64_t>({nr, cols}));
    std::vector<int32_t> rowvals(static_cast<std::size_t>(rows * cols));
    for (std::size_t i = 0; i < rowvals.size(); i++)
        rowvals[i] = static_cast<int32_t>(static_cast<int64_t>(i) / cols);
    grid.set_global(gw::span<int32_t>(rowvals));
    grid.halo_exchange(1);
    gw::buffer whole = grid.local_with_halo();
    gw::span<int32_t> w = whole.host_span<int32_t>();
    EXPECT(w.size() == static_cast<std::size_t>((nr + 2) * cols));
    if (nr > 0 && r0 > 0)
        EXPECT(w[0] == r0 - 1 && w[2] == r0 - 1);
    if (nr > 0 && r0 + nr < rows)
        EXPECT(w[static_cast<std::size_t>((nr + 1) * cols)] == r0 + nr);
    EXPECT(grid.sum<int32_t>() == cols * rows * (rows - 1) / 2);
    EXPECT(grid.min<int32_t>() == 0 && grid.max<int32_t>() == rows - 1);
    gw::darray grid2 = gw::darray::create_nd(world, gw::span<const int64_t>(shape),
                                             GPUWIRE_DECIDE, 0, GPUWIRE_INT32);
    grid.redistribute(grid2);
    EXPECT(grid2.sum<int32_t>() == cols * rows * (rows - 1) / 2);

    // The grid over this program's own rows with a ghost row each side, periodic along the
    // rows (create_cart's layout; wrap; halo_exchange_axes with corners; cart()).
    std::array<int64_t, 2> procs{{0, 1}}, halo{{1, 0}};
    std::array<int32_t, 2> periodic{{1, 0}};
    std::vector<int32_t> own(static_cast<std::size_t>((nr + 2) * cols), -1);
    for (int64_t i = 0; i < nr * cols; i++)
        own[static_cast<std::size_t>(cols + i)] = static_cast<int32_t>(r0 + i / cols);
    gw::darray wrapped = gw::darray::wrap(world, own.data(), gw::span<const int64_t>(shape),
                                          gw::span<const int64_t>(procs), gw::span<const int64_t>(halo),
                                          gw::span<const int32_t>(periodic), GPUWIRE_INT32,
                                          GPUWIRE_SPACE_HOST);
    // Widths {0, 0} exchange nothing (they were the empty list: the array's halos).
    wrapped.halo_exchange_axes({0, 0});
    EXPECT(own.front() == -1 && own.back() == -1);
    wrapped.halo_exchange_axes({}, GPUWIRE_HALO_CORNERS);
    // One width per axis (a shorter span was read past its end): refused on every rank.
    std::array<int64_t, 1> one_width{{1}};
    EXPECT_THROW(wrapped.halo_exchange_axes(gw::span<const int64_t>(one_width)), GPUWIRE_ERROR_INVALID_ARGUMENT,
                 "one per axis");
    EXPECT(own[0] == (r0 + rows - 1) % rows && own[static_cast<std::size_t>((nr + 1) * cols)] == (r0 + nr) % rows);
    gw::darray::cart_info ci = wrapped.cart();
    EXPECT(ci.procs[0] == size && ci.coords[0] == rank && ci.starts[0] == r0 && ci.periodic[0] == 1);
    gw::darray cart = gw::darray::create_cart(world, gw::span<const int64_t>(shape), {}, {}, {},
                                              GPUWIRE_INT32);
    // Per-axis braced lists (procs {0, 1} was span(nullptr, 1): one entry for two axes).
    EXPECT(gw::darray::create_cart(world, gw::span<const int64_t>(shape), {0, 1}, {1, 0}, {1, 0},
                                   GPUWIRE_INT32).cart().procs == std::vector<int64_t>({size, 1}));
    EXPECT(cart.cart().halo[0] == 0);
    // Lists of another length than shape: named, on every rank (the message said "ndim = -1").
    EXPECT_THROW(gw::darray::create_cart(world, gw::span<const int64_t>(shape), {}, {1}, {}, GPUWIRE_INT32),
                 GPUWIRE_ERROR_INVALID_ARGUMENT, "shape has 2 axes but procs has 0, halo 1 and periodic 0");
    EXPECT_THROW(gw::darray::wrap(world, own.data(), gw::span<const int64_t>(shape), {0, 1, 1}, {}, {},
                                  GPUWIRE_INT32),
                 GPUWIRE_ERROR_INVALID_ARGUMENT, "gpuwire_darray_wrap: shape has 2 axes but procs has 3");
    EXPECT(wrapped.host_span<int32_t>().size() == static_cast<std::size_t>(nr * cols));
    // A halo on the second axis: the owned elements are not consecutive (host_span gave the
    // local_len() elements from the first owned one, ghosts among them).
    std::array<int64_t, 2> halo2{{0, 1}};
    gw::darray padded = gw::darray::create_cart(world, gw::span<const int64_t>(shape), {},
                                                gw::span<const int64_t>(halo2), {}, GPUWIRE_INT32);
    EXPECT_THROW(padded.host_span<int32_t>(), GPUWIRE_ERROR_INVALID_ARGUMENT, "not consecutive");

    // complex128: dot conjugates its first argument, dot(c, c) = ||c||^2.
    gw::darray c = gw::darray::create<std::complex<double>>(world, 4);
    std::vector<std::complex<double>> cv{{1, 2}, {3, -1}, {0, -2}, {1, 0}};
    c.set_global(gw::span<std::complex<double>>(cv));
    EXPECT(c.dot<std::complex<double>>(c) == std::complex<double>(20.0, 0.0));
    c.fill(std::complex<double>(0.0, 1.0));
    EXPECT(c.sum<std::complex<double>>() == std::complex<double>(0.0, 4.0));

    // Argument errors on every rank; free reports errors, reset ignores them.
    EXPECT_THROW(x.halo_exchange(1), GPUWIRE_ERROR_INVALID_ARGUMENT,
                 "gpuwire_darray_halo_exchange");
    EXPECT_THROW(x.bcast(0), GPUWIRE_ERROR_INVALID_ARGUMENT, "gpuwire_darray_bcast");
    EXPECT_THROW(gw::darray::create<double>(world, -1), GPUWIRE_ERROR_INVALID_ARGUMENT,
                 "gpuwire_darray_create");
    gpuwire_darray kept = x.get();
    x.free();
    EXPECT(!x && gpuwire_darray_free(kept) == GPUWIRE_ERROR_INVALID_HANDLE);
    world.barrier();
}

int main(int argc, char **argv)
{
    test_before_init();
    int32_t size = 0;
    {
        gw::environment env;
        gw::comm world = gw::comm::world();
        rank_ = world.rank();
        size = world.size();
        if (argc > 1 && std::atoi(argv[1]) != size) {
            std::fprintf(stderr, "test_hpp: launched on %d ranks, expected %s (wrong launcher?)\n",
                         (int)size, argv[1]);
            return 1;
        }
        try {
            test_buffers_and_spans();
            test_comm(world);
            test_operations(world);
            test_darray(world);
        } catch (const gw::error &e) {
            std::fprintf(stderr, "FAILED rank %d: unexpected gpuwire::error %d: %s\n", rank_,
                         (int)e.code(), e.what());
            failures++;
        }
        // Every rank's verdict.
        std::array<int32_t, 1> bad{{failures}};
        world.allreduce(gw::span<int32_t>(bad), GPUWIRE_SUM);
        if (rank_ == 0)
            std::printf("test_hpp: %s (%d ranks, %d failures)\n", bad[0] ? "FAIL" : "PASS",
                        (int)size, (int)bad[0]);
        failures = bad[0];
        // Handles destroyed after finalize are ignored quietly: `leftover` outlives env.finalize().
        gw::buffer leftover = gw::buffer::alloc<float>(1);
        static_leftover = gw::buffer::alloc<float>(1);
        static_comm = world.dup();
        world.barrier();
        env.finalize();
        EXPECT(!gw::environment::initialized());
    } // world, leftover: freed after finalize (ignored)
    return failures ? 1 : 0;
}
