/* The few MPI values that are preprocessor macros in mpi.h and that rsmpi does not export.
 * Compiled with the same mpicc that rsmpi uses, so they match the MPI we link against. */
#include <mpi.h>

void *gpuwire_shim_in_place(void) { return MPI_IN_PLACE; }
int gpuwire_shim_tag_ub_key(void) { return MPI_TAG_UB; }
int gpuwire_shim_mpi_version(void) { return MPI_VERSION * 100 + MPI_SUBVERSION; }
