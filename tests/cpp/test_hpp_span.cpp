// test_hpp_span.cpp: gpuwire.hpp's container overloads with C++20's std::span (-std=c++20).
//
// A temporary std::span (a view: its elements outlive it) binds to wrap, copy_to_host, bcast
// and allreduce as a named one does (it did not compile before: those overloads took C &); a
// temporary std::vector (its elements would go with it) still does not compile. Values are
// checked on every rank. Prints "test_hpp_span: PASS" on rank 0 when every rank passed.
//
// Usage: mpirun -n N test_hpp_span [EXPECTED_RANKS]
#include "gpuwire.hpp"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace gw = gpuwire;

template <class C, class = void> struct can_allreduce : std::false_type {};
template <class C>
struct can_allreduce<C, std::void_t<decltype(std::declval<const gw::comm &>().allreduce(
                            std::declval<C>(), GPUWIRE_SUM))>> : std::true_type {};
template <class C, class = void> struct can_wrap : std::false_type {};
template <class C>
struct can_wrap<C, std::void_t<decltype(gw::buffer::wrap(std::declval<C>()))>> : std::true_type {};

static_assert(can_allreduce<std::span<double>>::value && can_wrap<std::span<double>>::value,
              "a temporary std::span is taken");
static_assert(can_allreduce<std::vector<double> &>::value && can_wrap<std::vector<double> &>::value,
              "a named std::vector is taken");
static_assert(!can_allreduce<std::vector<double>>::value && !can_wrap<std::vector<double>>::value,
              "a temporary std::vector is refused (its elements would go with it)");

static int failures = 0;

#define EXPECT(cond)                                                                             \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            std::fprintf(stderr, "FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond);               \
            failures++;                                                                          \
        }                                                                                        \
    } while (0)

int main(int argc, char **argv)
{
    gw::environment env;
    gw::comm world = gw::comm::world();
    const int32_t rank = world.rank(), size = world.size();
    if (argc > 1 && std::atoi(argv[1]) != size) {
        std::fprintf(stderr, "test_hpp_span: launched on %d ranks, expected %s\n", (int)size, argv[1]);
        return 1;
    }
    try {
        // allreduce in place on the middle three of five elements, through a temporary span.
        std::vector<double> v{-1.0, rank + 1.0, 2.0 * rank, 3.0, -1.0};
        world.allreduce(std::span<double>(v).subspan(1, 3), GPUWIRE_SUM);
        const double n = size;
        EXPECT(v[0] == -1.0 && v[4] == -1.0);
        EXPECT(v[1] == n * (n + 1) / 2 && v[2] == n * (n - 1) && v[3] == 3.0 * n);
        // bcast from the last rank into a temporary span of a std::array.
        std::array<int32_t, 4> a{};
        if (rank == size - 1)
            a = {7, 8, 9, 10};
        world.bcast(std::span<int32_t>(a), size - 1);
        EXPECT(a[0] == 7 && a[3] == 10);
        // wrap a temporary span, and copy a buffer out into one.
        std::vector<float> f{1.5f, 2.5f};
        gw::buffer b = gw::buffer::wrap(std::span<float>(f));
        EXPECT(b.count() == 2 && b.dtype() == GPUWIRE_FLOAT32);
        world.allreduce(b, GPUWIRE_MAX);
        std::vector<float> out(2, 0.0f);
        b.copy_to_host(std::span<float>(out));
        EXPECT(out[0] == 1.5f && out[1] == 2.5f);
    } catch (const gw::error &e) {
        std::fprintf(stderr, "FAILED rank %d: gpuwire::error %d: %s\n", (int)rank, (int)e.code(), e.what());
        failures++;
    }
    std::array<int32_t, 1> bad{{failures}};
    world.allreduce(std::span<int32_t>(bad), GPUWIRE_SUM);
    if (rank == 0)
        std::printf("test_hpp_span: %s (%d ranks, %d failures)\n", bad[0] ? "FAIL" : "PASS", (int)size, (int)bad[0]);
    return bad[0] ? 1 : 0;
}
