/* The few MPI values that are preprocessor macros in mpi.h and that rsmpi does not export.
 * Compiled with the same mpicc that rsmpi uses, so they match the MPI we link against. */
#include <mpi.h>

void *gpuwire_shim_in_place(void) { return MPI_IN_PLACE; }
int gpuwire_shim_tag_ub_key(void) { return MPI_TAG_UB; }
int gpuwire_shim_mpi_version(void) { return MPI_VERSION * 100 + MPI_SUBVERSION; }
/* 1 = Open MPI, 2 = MPICH (and derivatives that define MPICH_VERSION), 0 = another MPI. */
int gpuwire_shim_mpi_flavour(void)
{
#if defined(OPEN_MPI)
    return 1;
#elif defined(MPICH_VERSION)
    return 2;
#else
    return 0;
#endif
}
