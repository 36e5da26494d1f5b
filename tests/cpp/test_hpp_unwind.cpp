// test_hpp_unwind.cpp: gpuwire.hpp's destructors never block without bound (C++17).
//
//  1. An exception thrown while an irecv whose message has not been sent is pending reaches its
//     catch at once (the request's destructor cancels the receive and frees it), the receive
//     buffer is untouched, the communicator usable, and the message sent afterwards goes to the
//     next receive, not to the cancelled one. (Before 2026-12-05 the destructor waited for ever:
//     the run timed out; until 2026-12-07 it abandoned the receive and broke the communicator.)
//  2. The same on a communicator with a 1 s timeout: the catch is reached at once too.
//  3. Without an exception, a request destroyed while pending is cancelled alike; one freed by
//     request::free() goes on (as after MPI_Request_free) and takes the message sent later.
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

// Throws while a receive from `source` with `tag`, not sent yet, is pending on `c`; returns the
// seconds from the throw to the catch (-1 if the catch was not reached).
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

// After a receive of `tag` from `left` was cancelled: this rank sends to `right` with `tag`, and a
// new receive takes the message from `left`, while `in` (the cancelled receive's memory) stays
// untouched. True when both hold.
static bool message_goes_to_next_receive(const gw::comm &c, const std::vector<double> &in, int32_t left,
                                         int32_t right, int32_t tag)
{
    std::vector<double> out(4, 10.0 * tag + rank_), got(4, -1.0);
    // An isend: a blocking send to oneself (one rank) before its receive is posted may block
    // for ever (MPICH does).
    gw::request s = c.isend(gw::buffer::wrap(out), right, tag);
    c.recv(gw::buffer::wrap(got), left, tag);
    s.wait();
    return got[0] == 10.0 * tag + left && got[3] == 10.0 * tag + left && in[0] == -1.0 && in[3] == -1.0;
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
        const int32_t left = (rank_ + size - 1) % size, right = (rank_ + 1) % size;
        std::vector<double> in(4, -1.0);
        try {
            // 1. No timeout: cancelled at once.
            {
                gw::comm c = world.dup();
                const double dt = throw_with_pending_recv(c, in, left, 1);
                EXPECT(dt >= 0.0 && dt < 10.0);
                EXPECT(in[0] == -1.0 && in[3] == -1.0);
                c.barrier();
                EXPECT(message_goes_to_next_receive(c, in, left, right, 1));
            }
            // 2. A 1 s timeout: cancelled at once too.
            {
                gpuwire_config cfg = gw::config_init();
                cfg.timeout_seconds = 1.0;
                gw::comm c = gw::comm::world(cfg);
                const double dt = throw_with_pending_recv(c, in, left, 2);
                EXPECT(dt >= 0.0 && dt < 0.9);
                EXPECT(in[0] == -1.0);
                c.barrier();
                EXPECT(message_goes_to_next_receive(c, in, left, right, 2));
            }
            // 3. No exception: destroyed while pending, cancelled; freed, it goes on.
            {
                gw::comm c = world.dup();
                gw::buffer b = gw::buffer::wrap(in);
                {
                    gw::request r = c.irecv(b, left, 3);
                    EXPECT(r.active());
                } // cancelled
                c.barrier();
                EXPECT(message_goes_to_next_receive(c, in, left, right, 3));
                gw::request r = c.irecv(b, left, 4);
                r.free();
                EXPECT(!r.active());
                c.barrier();
                std::vector<double> out(4, 100.0 + rank_);
                gw::request s = c.isend(gw::buffer::wrap(out), right, 4);
                // Each test of a request (here an isend to PROC_NULL) completes what freed
                // requests received.
                const double t0 = now();
                while (in[0] != 100.0 + left && now() - t0 < 10.0)
                    (void)c.isend(gw::buffer::wrap(out), GPUWIRE_PROC_NULL, 5).test();
                EXPECT(in[0] == 100.0 + left && in[3] == 100.0 + left);
                s.wait();
                c.barrier();
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
