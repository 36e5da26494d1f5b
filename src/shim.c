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

/* MPI_Comm_f2c of a Fortran handle that the caller gave gpuwire, checked so that no value makes
 * MPI abort: writes the handle to *out and returns 0, or returns
 *   1  not a communicator handle of this MPI (a garbage integer, another object's handle),
 *   2  a communicator handle that is not in use (freed, or never created).
 * Open MPI's MPI_Comm_f2c looks the index up in its table and returns NULL for anything else.
 * MPICH's is a cast, and MPICH checks a communicator argument in two ways that can abort: an
 * index past its preallocated block is read out of bounds (a segfault, or an assertion for the
 * built-in kind), and the error for a freed or unused handle is raised on MPI_COMM_WORLD, whose
 * handler is MPI_ERRORS_ARE_FATAL unless the program changed it. So the encoding is checked
 * first (kind, object type, index within the preallocated block: MPIR_COMM_PREALLOC is 8 in
 * MPICH and its derivatives), then the handle is given to MPI_Comm_size with MPI_ERRORS_RETURN
 * on MPI_COMM_WORLD and MPI_COMM_SELF for the duration of that one call; the program's handlers
 * are restored before returning (under a lock, so that concurrent calls restore them too). */
#if defined(MPICH_VERSION)
#include <pthread.h>
static pthread_mutex_t errhandler_lock = PTHREAD_MUTEX_INITIALIZER;
#endif
int gpuwire_shim_comm_f2c(MPI_Fint f, MPI_Comm *out)
{
#if defined(OPEN_MPI)
    MPI_Comm c = MPI_Comm_f2c(f);
    if (c == NULL) {
        return 1;
    }
    *out = c;
    return 0;
#elif defined(MPICH_VERSION)
    unsigned h = (unsigned)f;
    unsigned kind = h >> 30, type = (h >> 26) & 0xFu, index = h & 0x03FFFFFFu;
    MPI_Comm c = MPI_Comm_f2c(f);
    int rc, size;
    MPI_Errhandler world, self;
    if (c == MPI_COMM_NULL || c == MPI_COMM_WORLD || c == MPI_COMM_SELF) {
        *out = c;
        return 0;
    }
    if (type != 1 /* MPIR_COMM */ || kind == 0 /* invalid */ || kind == 1 /* built-in */ || (kind == 2 /* direct */ && index >= 8)) {
        return 1;
    }
    pthread_mutex_lock(&errhandler_lock);
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &world);
    MPI_Comm_get_errhandler(MPI_COMM_SELF, &self);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    rc = MPI_Comm_size(c, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, world);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, self);
    MPI_Errhandler_free(&world);
    MPI_Errhandler_free(&self);
    pthread_mutex_unlock(&errhandler_lock);
    if (rc != MPI_SUCCESS) {
        return 2;
    }
    *out = c;
    return 0;
#else
    *out = MPI_Comm_f2c(f);
    return 0;
#endif
}

/* MPI_MINLOC, MPI_MAXLOC and the pair datatypes they reduce (rsmpi exports none of them). */
MPI_Op gpuwire_shim_op_minloc(void) { return MPI_MINLOC; }
MPI_Op gpuwire_shim_op_maxloc(void) { return MPI_MAXLOC; }
MPI_Datatype gpuwire_shim_float_int(void) { return MPI_FLOAT_INT; }
MPI_Datatype gpuwire_shim_double_int(void) { return MPI_DOUBLE_INT; }
MPI_Datatype gpuwire_shim_2int(void) { return MPI_2INT; }
