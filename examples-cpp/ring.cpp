// ring.cpp: gpuwire from C++ (include/gpuwire.hpp): a ring exchange and a checksum.
//
// Every rank fills a std::vector<double> with its rank, sends it to its right neighbour with
// isend and receives its left neighbour's with irecv (move-only gpuwire::request objects, waited
// for together with gpuwire::wait_all), then every rank adds up what it received with an
// in-place allreduce on a gpuwire::span. Errors are gpuwire::error exceptions carrying the status
// code and gpuwire's message; no handle needs freeing by hand.
//
// Usage: mpirun -n P ring [EXPECTED_RANKS]; prints "ring: PASS (...)" on rank 0.
#include "gpuwire.hpp"

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char **argv)
{
    try {
        gpuwire::environment env; // gpuwire_init ... gpuwire_finalize
        gpuwire::comm world = gpuwire::comm::world();
        const int32_t rank = world.rank(), size = world.size();
        if (argc > 1 && std::atoi(argv[1]) != size) {
            std::fprintf(stderr, "ring: launched on %d ranks, expected %s (wrong launcher?)\n",
                         (int)size, argv[1]);
            return 1;
        }
        const int32_t right = (rank + 1) % size, left = (rank + size - 1) % size;

        std::vector<double> mine(1000, rank), theirs(1000, -1.0);
        gpuwire::buffer out = gpuwire::buffer::wrap(mine), in = gpuwire::buffer::wrap(theirs);
        std::vector<gpuwire::request> requests;
        requests.push_back(world.irecv(in, left, 0));
        requests.push_back(world.isend(out, right, 0));
        gpuwire::wait_all(requests);

        // Each rank checks its neighbour's block, then all ranks agree.
        double sum = 0.0;
        for (double v : in.host_span<double>())
            sum += v;
        double expect_sum = 1000.0 * left;
        int32_t wrong[1] = {sum == expect_sum ? 0 : 1};
        world.allreduce(gpuwire::span<int32_t>(wrong), GPUWIRE_SUM);
        double total[1] = {sum};
        world.allreduce(gpuwire::span<double>(total), GPUWIRE_SUM);

        if (rank == 0) {
            if (wrong[0] == 0)
                std::printf("ring: PASS (%d ranks; checksum %.0f = 1000 x (0 + ... + %d))\n",
                            (int)size, total[0], (int)size - 1);
            else
                std::printf("ring: FAIL (%d ranks received a wrong block)\n", (int)wrong[0]);
        }
        return wrong[0] == 0 ? 0 : 1;
    } catch (const gpuwire::error &e) {
        std::fprintf(stderr, "ring: %s\n", e.what());
        return 1;
    }
}
