/*
 * header_only.c: gpuwire.h needs neither mpi.h nor any CUDA header. Compiled with the plain C
 * compiler (no MPI include path) as C99, C11 and C17 with -Wall -Wextra -Werror -pedantic.
 */
#include "gpuwire.h"

typedef char assert_handles_are_64_bit[(sizeof(gpuwire_comm) == 8) ? 1 : -1];
typedef char assert_dtype_is_32_bit[(sizeof(gpuwire_dtype) == 4) ? 1 : -1];

int header_only(gpuwire_comm comm, gpuwire_buffer buf);

int header_only(gpuwire_comm comm, gpuwire_buffer buf)
{
    gpuwire_config cfg;
    gpuwire_request req = GPUWIRE_REQUEST_NULL;
    gpuwire_status st = gpuwire_config_init(&cfg);
    if (st == GPUWIRE_SUCCESS)
        st = gpuwire_isend(comm, buf, GPUWIRE_PROC_NULL, 0, NULL, &req);
    if (st == GPUWIRE_SUCCESS)
        st = gpuwire_wait(&req);
    return (int)st;
}
