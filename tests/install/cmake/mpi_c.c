/* mpi_c.c: a C program that calls MPI itself, built with the plain C compiler and
 * gpuwire::gpuwire alone (the target brings MPI's include directory and library): gpuwire over
 * a communicator of the program's, MPI_Comm_split by parity. */
#include <mpi.h>
#include <stdio.h>

#include "gpuwire.h"

int main(int argc, char **argv)
{
    MPI_Comm half;
    gpuwire_comm comm = GPUWIRE_COMM_NULL;
    gpuwire_buffer buf = GPUWIRE_BUFFER_NULL;
    int rank = -1, size = 0, want = 0, i;
    int32_t sum[1];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    sum[0] = rank;
    for (i = rank % 2; i < size; i += 2)
        want += i;
    if (gpuwire_init() != GPUWIRE_SUCCESS || gpuwire_comm_create(MPI_Comm_c2f(half), NULL, &comm) != GPUWIRE_SUCCESS ||
        gpuwire_buffer_wrap(sum, 1, GPUWIRE_INT32, GPUWIRE_SPACE_HOST, &buf) != GPUWIRE_SUCCESS ||
        gpuwire_allreduce(comm, buf, buf, GPUWIRE_SUM, NULL) != GPUWIRE_SUCCESS || sum[0] != want)
        MPI_Abort(MPI_COMM_WORLD, 1);
    printf("mpi_c: rank %d: sum over its half %d\n", rank, (int)sum[0]);
    gpuwire_buffer_free(buf);
    gpuwire_comm_free(comm);
    if (gpuwire_finalize() != GPUWIRE_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Comm_free(&half);
    MPI_Finalize();
    return 0;
}
