// test_header.cpp: gpuwire.h compiled as C++17 (-Wall -Wextra -Werror -pedantic) and used.
//
// C++ sees the enums with their fixed int32_t underlying type and the functions inside
// extern "C"; this calls a few functions that work before gpuwire_init (no MPI launch needed).
#include "gpuwire.h"

#include <cstdio>
#include <cstring>
#include <type_traits>

static_assert(sizeof(gpuwire_dtype) == 4, "gpuwire_dtype is 32 bits");
static_assert(std::is_same<std::underlying_type<gpuwire_op>::type, int32_t>::value,
              "gpuwire_op has underlying type int32_t");
static_assert(sizeof(gpuwire_comm) == 8 && sizeof(gpuwire_buffer) == 8 &&
                  sizeof(gpuwire_request) == 8,
              "handles are 64-bit integers");
static_assert(std::is_standard_layout<gpuwire_config>::value, "gpuwire_config is plain data");

int main()
{
    int failures = 0;
    int32_t major = -1, minor = -1, patch = -1;
    if (gpuwire_get_version(&major, &minor, &patch) != GPUWIRE_SUCCESS ||
        major != GPUWIRE_VERSION_MAJOR || minor != GPUWIRE_VERSION_MINOR ||
        patch != GPUWIRE_VERSION_PATCH)
        failures++;
    int64_t bytes = 0;
    if (gpuwire_dtype_size(GPUWIRE_COMPLEX128, &bytes) != GPUWIRE_SUCCESS || bytes != 16)
        failures++;
    gpuwire_config cfg;
    if (gpuwire_config_init(&cfg) != GPUWIRE_SUCCESS)
        failures++;
    gpuwire_buffer b = GPUWIRE_BUFFER_NULL;
    if (gpuwire_buffer_alloc(4, GPUWIRE_FLOAT32, GPUWIRE_SPACE_HOST, -1, &b) !=
        GPUWIRE_ERROR_NOT_INITIALIZED)
        failures++;
    char msg[256];
    if (gpuwire_last_error(msg, sizeof msg) != GPUWIRE_SUCCESS ||
        std::strstr(msg, "gpuwire_buffer_alloc") == nullptr)
        failures++;
    if (std::strcmp(gpuwire_status_string(GPUWIRE_ERROR_NOT_INITIALIZED),
                    "gpuwire_init has not been called") != 0)
        failures++;
    std::printf("test_header_cxx: %s (gpuwire %s)\n", failures ? "FAIL" : "PASS",
                GPUWIRE_VERSION_STRING);
    return failures ? 1 : 0;
}
