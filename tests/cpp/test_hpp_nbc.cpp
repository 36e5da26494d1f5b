// test_hpp_nbc.cpp: gpuwire.hpp's nonblocking collectives and group guard (issue 18), on 1 to 4
// ranks (C++17, -Wall -Wextra -Werror).
//
// Every comm::i* method returns a request; eight are outstanding at once and completed in
// reverse order, by test() and by wait_all(), values computed here; an argument error throws
// and returns no request; gpuwire::group around blocking sends then receives of 4 MiB to every
// peer (an order that deadlocks without the group), nested, ended by end() and by the
// destructor, also while an exception unwinds (the thread is not left inside the group: a
// blocking allreduce afterwards has its data at once); check_async_error().
// Prints "test_hpp_nbc: PASS" on rank 0 when every rank passed.
//
// Usage: mpirun -n N test_hpp_nbc [EXPECTED_RANKS]
#include "gpuwire.hpp"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace gw = gpuwire;

static_assert(!std::is_copy_constructible<gw::group>::value && !std::is_move_constructible<gw::group>::value,
              "a group guard is tied to its scope");

static int failures = 0;
static int rank_ = -1;

#define EXPECT(cond)                                                                             \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            std::fprintf(stderr, "FAILED rank %d %s:%d: %s\n", rank_, __FILE__, __LINE__, #cond); \
            failures++;                                                                          \
        }                                                                                        \
    } while (0)

#define EXPECT_THROW(stmt, want)                                                                 \
    do {                                                                                         \
        bool thrown_ = false;                                                                    \
        try {                                                                                    \
            stmt;                                                                                \
        } catch (const gw::error &e_) {                                                          \
            thrown_ = true;                                                                      \
            if (e_.code() != (want)) {                                                           \
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

static std::size_t z(int64_t v) { return static_cast<std::size_t>(v); }
static int32_t val(int32_t r, int64_t i) { return static_cast<int32_t>(r * 1000 + i + 1); }

static void test_collectives(const gw::comm &world, int order)
{
    const int32_t rank = world.rank(), size = world.size(), last = size - 1;
    const int64_t n = 300;
    std::vector<int32_t> mine(z(n)), big(z(n * size));
    for (int64_t i = 0; i < n; i++)
        mine[z(i)] = val(rank, i);
    for (int64_t i = 0; i < n * size; i++)
        big[z(i)] = val(rank, i);
    std::vector<int32_t> bc(z(n), -1), red(z(n), -1), ar(z(n), -1), ag(z(n * size), -1);
    std::vector<int32_t> agv(z(n * size), -1), rs(z(n), -1), a2a(z(n * size), -1), g(z(n * size), -1);
    std::vector<int32_t> sc(z(n), -1), scsrc(z(n * size));
    std::vector<double> avg(z(n));
    for (int64_t i = 0; i < n; i++)
        avg[z(i)] = val(rank, i);
    for (int64_t i = 0; i < n * size; i++)
        scsrc[z(i)] = static_cast<int32_t>(7 * i);
    if (rank == last)
        bc = mine;
    gw::buffer bmine = gw::buffer::wrap(mine), bbig = gw::buffer::wrap(big);
    std::vector<int64_t> counts(z(size), n);
    std::vector<gw::request> rq;
    rq.push_back(world.ibarrier());
    rq.push_back(world.ibcast(gw::buffer::wrap(bc), last));
    rq.push_back(world.ireduce(bmine, rank == 0 ? gw::buffer::wrap(red) : gw::buffer(), GPUWIRE_SUM, 0));
    rq.push_back(world.iallreduce(bmine, gw::buffer::wrap(ar), GPUWIRE_MAX));
    rq.push_back(world.iallreduce(gw::buffer::wrap(avg), GPUWIRE_AVG)); // in place
    rq.push_back(world.iallgather(bmine, gw::buffer::wrap(ag)));
    rq.push_back(order % 2 ? world.iallgatherv(bmine, gw::buffer::wrap(agv))
                           : world.iallgatherv(bmine, gw::buffer::wrap(agv), gw::span<const int64_t>(counts)));
    rq.push_back(world.ireduce_scatter(bbig, gw::buffer::wrap(rs), GPUWIRE_SUM));
    rq.push_back(world.ialltoall(bbig, gw::buffer::wrap(a2a)));
    rq.push_back(world.igather(bmine, rank == last ? gw::buffer::wrap(g) : gw::buffer(), last));
    rq.push_back(world.iscatter(rank == 0 ? gw::buffer::wrap(scsrc) : gw::buffer(), gw::buffer::wrap(sc), 0));
    if (order == 0) {
        for (std::size_t j = rq.size(); j-- > 0;)
            rq[j].wait();
    } else if (order == 1) {
        std::size_t left = 0;
        for (const gw::request &r : rq)
            left += r.active() ? 1 : 0;
        for (int spins = 0; left > 0 && spins < 100000000; spins++)
            for (std::size_t j = rq.size(); j-- > 0;)
                if (rq[j].active() && rq[j].test())
                    left--;
        EXPECT(left == 0);
    } else {
        gw::wait_all(rq);
    }
    for (const gw::request &r : rq)
        EXPECT(!r.active());
    bool ok_bc = true, ok_red = true, ok_ar = true, ok_avg = true, ok_ag = true, ok_agv = true;
    bool ok_rs = true, ok_a2a = true, ok_g = true, ok_sc = true;
    for (int64_t i = 0; i < n; i++) {
        int64_t sum = 0, sum_rs = 0;
        for (int32_t q = 0; q < size; q++)
            sum += val(q, i), sum_rs += val(q, rank * n + i);
        ok_bc = ok_bc && bc[z(i)] == val(last, i);
        ok_red = ok_red && (rank != 0 || red[z(i)] == sum);
        ok_ar = ok_ar && ar[z(i)] == val(last, i);
        ok_avg = ok_avg && avg[z(i)] == static_cast<double>(sum) / size;
        ok_rs = ok_rs && rs[z(i)] == sum_rs;
        ok_sc = ok_sc && sc[z(i)] == 7 * (rank * n + i);
        for (int32_t q = 0; q < size; q++) {
            ok_ag = ok_ag && ag[z(q * n + i)] == val(q, i);
            ok_agv = ok_agv && agv[z(q * n + i)] == val(q, i);
            ok_a2a = ok_a2a && a2a[z(q * n + i)] == val(q, rank * n + i);
            ok_g = ok_g && (rank != last || g[z(q * n + i)] == val(q, i));
        }
    }
    EXPECT(ok_bc);
    EXPECT(ok_red);
    EXPECT(ok_ar);
    EXPECT(ok_avg);
    EXPECT(ok_ag);
    EXPECT(ok_agv);
    EXPECT(ok_rs);
    EXPECT(ok_a2a);
    EXPECT(ok_g);
    EXPECT(ok_sc);
}

static void test_errors(const gw::comm &world)
{
    const int32_t size = world.size();
    std::vector<int32_t> a(4, 1), b(5, -1);
    EXPECT_THROW(gw::request r = world.iallreduce(gw::buffer::wrap(a), gw::buffer::wrap(b), GPUWIRE_SUM), GPUWIRE_ERROR_COUNT_MISMATCH);
    EXPECT_THROW(gw::request r = world.ibcast(gw::buffer::wrap(a), size), GPUWIRE_ERROR_INVALID_ARGUMENT);
    std::vector<int64_t> too_many(static_cast<std::size_t>(size) + 1, 4);
    EXPECT_THROW(gw::request r = world.iallgatherv(gw::buffer::wrap(a), gw::buffer::wrap(b), gw::span<const int64_t>(too_many)),
                 GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT(b[0] == -1);
    world.check_async_error();
}

static void test_groups(const gw::comm &world)
{
    const int32_t rank = world.rank(), size = world.size();
    const std::size_t n = std::size_t(1) << 20; // 4 MiB of int32
    // To every other rank (oneself on one rank): all sends, then all receives.
    std::vector<std::vector<int32_t>> out, in;
    std::vector<int32_t> peers;
    for (int32_t q = 0; q < size; q++)
        if (q != rank || size == 1)
            peers.push_back(q);
    for (std::size_t j = 0; j < peers.size(); j++) {
        out.emplace_back(n, rank * 100 + peers[j]);
        in.emplace_back(n, -1);
    }
    for (int nest = 0; nest < 2; nest++) {
        for (auto &v : in)
            std::fill(v.begin(), v.end(), -1);
        {
            gw::group g;
            for (std::size_t j = 0; j < peers.size(); j++)
                world.send(gw::buffer::wrap(out[j]), peers[j], 10 + nest);
            EXPECT(gw::group::depth() == 1);
            if (nest) {
                gw::group inner; // ended by its destructor: not the outermost, starts nothing
                EXPECT(gw::group::depth() == 2);
                for (std::size_t j = 0; j < peers.size(); j++)
                    world.recv(gw::buffer::wrap(in[j]), peers[j], 10 + nest);
            } else {
                for (std::size_t j = 0; j < peers.size(); j++)
                    world.recv(gw::buffer::wrap(in[j]), peers[j], 10 + nest);
            }
            if (nest == 0)
                g.end();
            g.end(); // a second end does nothing
        }
        bool ok = true;
        for (std::size_t j = 0; j < peers.size(); j++)
            ok = ok && in[j].front() == peers[j] * 100 + rank && in[j].back() == peers[j] * 100 + rank;
        EXPECT(ok);
    }
    // A nonblocking collective and isend / irecv in a group.
    {
        std::vector<double> x(1000, rank + 1.0), ring_in(5, -1.0), ring_out(5, rank);
        gw::request a, s, r;
        {
            gw::group g;
            a = world.iallreduce(gw::buffer::wrap(x), GPUWIRE_SUM);
            r = world.irecv(gw::buffer::wrap(ring_in), (rank + size - 1) % size, 20);
            s = world.isend(gw::buffer::wrap(ring_out), (rank + 1) % size, 20);
            EXPECT_THROW(a.wait(), GPUWIRE_ERROR_INVALID_ARGUMENT); // the group has not ended
        }
        a.wait();
        r.wait();
        s.wait();
        EXPECT(x[999] == size * (size + 1) / 2.0);
        EXPECT(ring_in[4] == (rank + size - 1) % size);
    }
    // An exception inside a group: the guard ends it while unwinding.
    std::vector<int32_t> one(1, 1); // declared before the guard: it must outlive the group's end
    try {
        gw::group g;
        world.allreduce(gw::buffer::wrap(one), GPUWIRE_SUM);
        throw std::runtime_error("unwind");
    } catch (const std::runtime_error &) {
    }
    std::array<int32_t, 1> after{{1}};
    world.allreduce(gw::span<int32_t>(after), GPUWIRE_SUM); // outside any group: done on return
    EXPECT(after[0] == size);
    EXPECT(one[0] == size); // the allreduce issued in the group ran at the guard's end
    // group_end without a start (the C function: the guard cannot do this).
    EXPECT(gpuwire_group_end() == GPUWIRE_ERROR_INVALID_ARGUMENT);
}

int main(int argc, char **argv)
{
    int32_t size = 0;
    {
        gw::environment env;
        gw::comm world = gw::comm::world();
        rank_ = world.rank();
        size = world.size();
        if (argc > 1 && std::atoi(argv[1]) != size) {
            std::fprintf(stderr, "test_hpp_nbc: launched on %d ranks, expected %s (wrong launcher?)\n",
                         (int)size, argv[1]);
            return 1;
        }
        try {
            for (int order = 0; order < 3; order++)
                test_collectives(world, order);
            test_errors(world);
            test_groups(world);
        } catch (const gw::error &e) {
            std::fprintf(stderr, "FAILED rank %d: unexpected gpuwire::error %d: %s\n", rank_,
                         (int)e.code(), e.what());
            failures++;
        }
        std::array<int32_t, 1> bad{{failures}};
        world.allreduce(gw::span<int32_t>(bad), GPUWIRE_SUM);
        if (rank_ == 0)
            std::printf("test_hpp_nbc: %s (%d ranks, %d failures)\n", bad[0] ? "FAIL" : "PASS",
                        (int)size, (int)bad[0]);
        failures = bad[0];
        world.barrier();
    }
    return failures ? 1 : 0;
}
