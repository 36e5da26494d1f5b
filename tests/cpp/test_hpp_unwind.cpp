// test_hpp_unwind.cpp: gpuwire.hpp's destructors never block without bound (C++17).
//
//  1. An exception thrown while an irecv that no rank will ever match is pending reaches its
//     catch at once (no timeout: the request's destructor abandons the receive), the receive
//     buffer is untouched, and the communicator is broken: the next call throws
//     GPUWIRE_ERROR_COMM_BROKEN. (Before, the destructor waited for ever: the run timed out.)
//  2. The same on a communicator with a 1 s timeout: the catch is reached after the timeout.
//  3. Without an exception, a request destroyed while pending on a communicator without a
//     timeout is abandoned too (the communicator broken); request::free() reports it.
//  4. A comm destroyed while an exception unwinds is not freed collectively (the other ranks may
//     never reach their free): its handle stays valid, and is freed later on every rank.
// Prints "test_hpp_unwind: PASS" on rank 0 when every rank passed. Run it under a time limit: a
// destructor that blocks makes it hang.
//
// Usage: mpirun -n N test_hpp_unwind [EXPECTED_RANKS]
#include "gpuwire.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace gw = gpuwire;

static int failures = 0;
static int rank_ = -1;

#define EXPECT(cond)                                                                             \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            std::fprintf(stderr, "FAILED rank %d %s:%d: %s\n", rank_, __FILE__, __LINE__, #cond); \
            failures++;                                                                          \
        }                                                                                        \
    } while (0)

// `stmt` must throw gpuwire::error with status `want`.
#define EXPECT_CODE(stmt, want)                                                                  \
    do {                                                                                         \
        int code_ = GPUWIRE_SUCCESS;                                                             \
        try {                                                                                    \
            stmt;                                                                                \
        } catch (const gw::error &e_) {                                                          \
            code_ = e_.code();                                                                   \
        }                                                                                        \
        if (code_ != (want)) {                                                                   \
            std::fprintf(stderr, "FAILED rank %d %s:%d: %s gave status %d, expected %d\n",       \
                         rank_, __FILE__, __LINE__, #stmt, code_, (int)(want));                  \
            failures++;                                                                          \
        }                                                                                        \
    } while (0)

static double now()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// Throws while a receive from `source` with `tag`, which nobody sends, is pending on `c`; returns
// the seconds from the throw to the catch (-1 if the catch was not reached).
static double throw_with_pending_recv(const gw::comm &c, std::vector<double> &in, int32_t source,
                                      int32_t tag)
{
    double thrown = 0.0;
    try {
        gw::buffer b = gw::buffer::wrap(in);
        gw::request r = c.irecv(b, source, tag);
        thrown = now();
        throw std::runtime_error("an error while a receive is pending");
    } catch (const std::runtime_error &e) {
        if (std::strcmp(e.what(), "an error while a receive is pending") == 0)
            return now() - thrown;
    }
    return -1.0;
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
            std::fprintf(stderr,
                         "test_hpp_unwind: launched on %d ranks, expected %s (wrong launcher?)\n",
                         (int)size, argv[1]);
            return 1;
        }
        const int32_t left = (rank_ + size - 1) % size;
        std::vector<double> in(4, -1.0);
        try {
            // 1. No timeout: abandoned at once.
            {
                gw::comm c = world.dup();
                const double dt = throw_with_pending_recv(c, in, left, 1);
                EXPECT(dt >= 0.0 && dt < 10.0);
                EXPECT(in[0] == -1.0 && in[3] == -1.0);
                EXPECT_CODE(c.barrier(), GPUWIRE_ERROR_COMM_BROKEN);
                EXPECT(gw::last_error().find("abandoned") != std::string::npos);
            }
            // 2. A 1 s timeout: waited for up to it, then abandoned.
            {
                gpuwire_config cfg = gw::config_init();
                cfg.timeout_seconds = 1.0;
                gw::comm c = gw::comm::world(cfg);
                const double dt = throw_with_pending_recv(c, in, left, 2);
                EXPECT(dt >= 0.9 && dt < 30.0);
                EXPECT(in[0] == -1.0);
                EXPECT_CODE(c.barrier(), GPUWIRE_ERROR_COMM_BROKEN);
            }
            // 3. No exception, no timeout: destroyed or freed while pending, abandoned.
            {
                gw::comm c = world.dup();
                gw::buffer b = gw::buffer::wrap(in);
                {
                    gw::request r = c.irecv(b, left, 3);
                    EXPECT(r.active());
                } // abandoned
                EXPECT_CODE(c.barrier(), GPUWIRE_ERROR_COMM_BROKEN);
                gw::comm d = world.dup();
                gw::request r = d.irecv(b, left, 4);
                EXPECT_CODE(r.free(), GPUWIRE_ERROR_COMM_BROKEN);
                EXPECT(!r.active());
                EXPECT_CODE(d.barrier(), GPUWIRE_ERROR_COMM_BROKEN);
                EXPECT(in[0] == -1.0);
            }
            // 4. A comm destroyed by unwinding is left alone (no collective free).
            gpuwire_comm kept = GPUWIRE_COMM_NULL;
            try {
                gw::comm c = world.dup();
                kept = c.get();
                throw std::runtime_error("unwinding past a comm");
            } catch (const std::runtime_error &) {
            }
            int32_t r = -1;
            EXPECT(gpuwire_comm_rank(kept, &r) == GPUWIRE_SUCCESS && r == rank_);
            EXPECT(gpuwire_comm_free(kept) == GPUWIRE_SUCCESS); // every rank frees it here
            world.barrier();
        } catch (const gw::error &e) {
            std::fprintf(stderr, "FAILED rank %d: unexpected gpuwire::error %d: %s\n", rank_,
                         (int)e.code(), e.what());
            failures++;
        }
        std::vector<int32_t> bad{failures};
        world.allreduce(gw::span<int32_t>(bad), GPUWIRE_SUM);
        if (rank_ == 0)
            std::printf("test_hpp_unwind: %s (%d ranks, %d failures)\n", bad[0] ? "FAIL" : "PASS",
                        (int)size, (int)bad[0]);
        failures = bad[0];
        world.barrier();
        env.finalize();
    }
    return failures ? 1 : 0;
}
