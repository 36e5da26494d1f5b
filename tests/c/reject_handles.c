/* reject_handles.c: handles of different kinds are different types, so passing one where another
 * is expected must not compile, in C and in C++ (scripts/run-c-tests.sh compiles this file as
 * both). Each -DCASE=N is one mistake and must be refused at the line that makes it; without
 * CASE the same calls with the right handles must compile cleanly (-Wall -Wextra -Werror
 * -pedantic), so a refusal is the mistake's and not some other error's.
 *
 * Handles passed by value (cases 1 to 6) are constraint violations in C and errors in C++ with
 * any flags. A pointer to the wrong handle for an out-parameter (cases 7 and 8) is an error in
 * C++, and in C a diagnostic that GCC before 14 makes a warning (-Wincompatible-pointer-types),
 * an error under -Werror or -pedantic-errors. */

#include "gpuwire.h"

#ifndef CASE
#define CASE 0
#endif

int reject_handles(gpuwire_comm comm, gpuwire_buffer buf, gpuwire_buffer other, gpuwire_darray x,
                   gpuwire_darray y, gpuwire_request req);

int reject_handles(gpuwire_comm comm, gpuwire_buffer buf, gpuwire_buffer other, gpuwire_darray x,
                   gpuwire_darray y, gpuwire_request req)
{
    gpuwire_status st = GPUWIRE_SUCCESS;
    gpuwire_comm sub = GPUWIRE_COMM_NULL;
    gpuwire_buffer local = GPUWIRE_BUFFER_NULL;
    double alpha = 2.0;
    int32_t rank = -1;
    (void)req;
    (void)y;
#if CASE == 1 /* a communicator and a buffer swapped */
    st = gpuwire_allreduce(buf, comm, other, GPUWIRE_SUM, NULL); /* REFUSED */
#elif CASE == 2 /* a buffer for a communicator */
    st = gpuwire_comm_rank(buf, &rank); /* REFUSED */
#elif CASE == 3 /* a distributed array for a buffer */
    st = gpuwire_bcast(comm, x, 0, NULL); /* REFUSED */
#elif CASE == 4 /* a request for a communicator */
    st = gpuwire_comm_free(req); /* REFUSED */
#elif CASE == 5 /* a plain integer for a handle */
    st = gpuwire_buffer_free(0); /* REFUSED */
#elif CASE == 6 /* a buffer for a distributed array */
    st = gpuwire_darray_axpy(&alpha, x, buf, NULL); /* REFUSED */
#elif CASE == 7 /* out-parameter: a buffer's address for a communicator's */
    st = gpuwire_comm_dup(comm, &local); /* REFUSED */
#elif CASE == 8 /* out-parameter: a communicator's address for a request's */
    st = gpuwire_isend(comm, buf, 0, 0, NULL, &sub); /* REFUSED */
#else /* the same calls, right */
    gpuwire_request r = GPUWIRE_REQUEST_NULL;
    st = gpuwire_allreduce(comm, buf, other, GPUWIRE_SUM, NULL);
    st = gpuwire_comm_rank(comm, &rank);
    st = gpuwire_bcast(comm, buf, 0, NULL);
    st = gpuwire_comm_free(comm);
    st = gpuwire_buffer_free(GPUWIRE_BUFFER_NULL);
    st = gpuwire_darray_axpy(&alpha, x, y, NULL);
    st = gpuwire_comm_dup(comm, &sub);
    st = gpuwire_isend(comm, buf, 0, 0, NULL, &r);
    st = gpuwire_darray_local(x, &local);
#endif
    (void)sub;
    (void)local;
    return (int)st + (int)rank;
}
