/* static_c.c: gpuwire linked statically (gpuwire::gpuwire_static): a broadcast from rank 0. */
#include <stdio.h>

#include "gpuwire.h"

int main(void)
{
    gpuwire_comm comm = GPUWIRE_COMM_NULL;
    gpuwire_buffer buf = GPUWIRE_BUFFER_NULL;
    int32_t rank = -1, size = 0, value[1];
    if (gpuwire_init() != GPUWIRE_SUCCESS || gpuwire_comm_world(NULL, &comm) != GPUWIRE_SUCCESS ||
        gpuwire_comm_rank(comm, &rank) != GPUWIRE_SUCCESS ||
        gpuwire_comm_size(comm, &size) != GPUWIRE_SUCCESS)
        return 1;
    value[0] = rank == 0 ? 42 : 0;
    if (gpuwire_buffer_wrap(value, 1, GPUWIRE_INT32, GPUWIRE_SPACE_HOST, &buf) != GPUWIRE_SUCCESS ||
        gpuwire_bcast(comm, buf, 0, NULL) != GPUWIRE_SUCCESS)
        return 1;
    printf("static_c: rank %d of %d got %d\n", (int)rank, (int)size, (int)value[0]);
    gpuwire_buffer_free(buf);
    gpuwire_comm_free(comm);
    return gpuwire_finalize() == GPUWIRE_SUCCESS && value[0] == 42 ? 0 : 1;
}
