/*
 * test_api.c: gpuwire's C-facing behaviours that do not need data to move between ranks.
 *
 * gpuwire initializes MPI itself here (see test_comm.c for a program that initializes MPI
 * first). Covered: the lifecycle (before gpuwire_init, twice, after gpuwire_finalize), status
 * strings, the version, datatype sizes, NULL out-pointers (GPUWIRE_ERROR_NULL_ARGUMENT),
 * out-parameters left untouched on failure, buffers (alloc, wrap, views, copies, frees, stale
 * and foreign handles), the thread's last error (truncation, NUL termination, per-thread
 * messages with two pthreads), configuration and the GPUWIRE_* environment variables,
 * communicator queries and describe, stale buffer and request handles, waitall with a request
 * twice, and backend requests on a machine without CUDA.
 *
 * Usage: mpirun -n P test_api P   (any P >= 1; the argument is the rank count expected)
 * Prints "test_api: PASS (...)" from rank 0 and exits 0 when every check on every rank passed.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv, pthread barriers */

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gwtest.h"

static const char *const env_vars[] = {"GPUWIRE_BACKEND", "GPUWIRE_DEVICE",  "GPUWIRE_CHECK",
                                       "GPUWIRE_TIMEOUT", "GPUWIRE_STAGING", "GPUWIRE_CHUNK_BYTES",
                                       "GPUWIRE_P2P_MATCHING", "GPUWIRE_NCCL_INIT_TIMEOUT",
                                       "GPUWIRE_IPC_STREAM_ORDERED"};

static void clear_env(void)
{
    size_t i;
    for (i = 0; i < sizeof env_vars / sizeof env_vars[0]; i++)
        unsetenv(env_vars[i]);
}

/* ---- before gpuwire_init ------------------------------------------------------------------ */

static void before_init(void)
{
    char msg[64];
    int32_t flag, major, minor, patch, level;
    int64_t bytes;
    gpuwire_buffer b;
    gpuwire_comm c;
    gpuwire_request r;
    gpuwire_config cfg;

    /* Nothing failed on this thread yet: the last error is "". */
    memset(msg, 'X', sizeof msg);
    EXPECT_OK(gpuwire_last_error(msg, sizeof msg));
    EXPECT(msg[0] == '\0');

    /* What works before gpuwire_init. */
    EXPECT_OK(gpuwire_initialized(&flag));
    EXPECT(flag == 0);
    EXPECT_OK(gpuwire_get_version(&major, &minor, &patch));
    EXPECT_OK(gpuwire_dtype_size(GPUWIRE_FLOAT64, &bytes));
    EXPECT(bytes == 8);
    EXPECT_OK(gpuwire_config_init(&cfg));
    EXPECT(strcmp(gpuwire_status_string(GPUWIRE_SUCCESS), "success") == 0);

    /* Everything that takes or makes a handle needs gpuwire_init. */
    EXPECT_UNTOUCHED_H(gpuwire_buffer_alloc(4, GPUWIRE_FLOAT32, GPUWIRE_SPACE_HOST, -1, &b),
                       GPUWIRE_ERROR_NOT_INITIALIZED, b, 77u);
    EXPECT_LAST_ERROR_HAS("gpuwire_buffer_alloc: ");
    EXPECT_LAST_ERROR_HAS("gpuwire_init");
    EXPECT_UNTOUCHED_H(gpuwire_buffer_wrap(&bytes, 1, GPUWIRE_INT64, GPUWIRE_SPACE_HOST, &b),
                       GPUWIRE_ERROR_NOT_INITIALIZED, b, 77u);
    EXPECT_UNTOUCHED_H(gpuwire_comm_world(NULL, &c), GPUWIRE_ERROR_NOT_INITIALIZED, c, 77u);
    EXPECT_UNTOUCHED_H(gpuwire_comm_create(0, NULL, &c), GPUWIRE_ERROR_NOT_INITIALIZED, c, 77u);
    EXPECT_UNTOUCHED(gpuwire_query_thread(&level), GPUWIRE_ERROR_NOT_INITIALIZED, level, 77);
    EXPECT_UNTOUCHED(gpuwire_owns_mpi(&flag), GPUWIRE_ERROR_NOT_INITIALIZED, flag, 77);
    EXPECT_STATUS(gpuwire_buffer_free((gpuwire_buffer){1}), GPUWIRE_ERROR_NOT_INITIALIZED);
    EXPECT_STATUS(gpuwire_comm_free((gpuwire_comm){1}), GPUWIRE_ERROR_NOT_INITIALIZED);
    r = GPUWIRE_REQUEST_NULL;
    EXPECT_STATUS(gpuwire_wait(&r), GPUWIRE_ERROR_NOT_INITIALIZED);
    EXPECT_STATUS(gpuwire_finalize(), GPUWIRE_ERROR_NOT_INITIALIZED);
}

/* ---- status strings, version, datatype sizes ---------------------------------------------- */

static void status_strings(void)
{
    int32_t i, j;
    const char *unknown = "unknown status code";
    for (i = 0; i <= GPUWIRE_ERROR_TRUNCATE; i++) {
        const char *s = gpuwire_status_string(i);
        EXPECT(s != NULL && s[0] != '\0' && strcmp(s, unknown) != 0);
        for (j = 0; j < i && s != NULL; j++)
            EXPECT(strcmp(s, gpuwire_status_string(j)) != 0); /* one description per code */
    }
    EXPECT(strcmp(gpuwire_status_string(-1), unknown) == 0);
    EXPECT(strcmp(gpuwire_status_string(GPUWIRE_ERROR_TRUNCATE + 1), unknown) == 0);
    EXPECT(strcmp(gpuwire_status_string(INT32_MAX), unknown) == 0);
    EXPECT(strcmp(gpuwire_status_string(GPUWIRE_ERROR_NULL_ARGUMENT),
                  "a required pointer argument is NULL") == 0);
}

static void version(void)
{
    int32_t major = -1, minor = -1, patch = -1;
    char s[32];
    EXPECT_OK(gpuwire_get_version(&major, &minor, &patch));
    EXPECT(major == GPUWIRE_VERSION_MAJOR && minor == GPUWIRE_VERSION_MINOR &&
           patch == GPUWIRE_VERSION_PATCH);
    snprintf(s, sizeof s, "%d.%d.%d", (int)major, (int)minor, (int)patch);
    EXPECT(strcmp(s, GPUWIRE_VERSION_STRING) == 0);
    /* NULL pointers are refused before anything is written. */
    minor = patch = 55;
    EXPECT_STATUS(gpuwire_get_version(NULL, &minor, &patch), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT(minor == 55 && patch == 55);
    EXPECT_STATUS(gpuwire_get_version(&major, NULL, &patch), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_get_version(&major, &minor, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
}

static void dtype_sizes(void)
{
    static const struct {
        int32_t dtype;
        int64_t bytes;
    } sizes[] = {{GPUWIRE_INT8, 1},    {GPUWIRE_UINT8, 1},     {GPUWIRE_INT32, 4},
                 {GPUWIRE_UINT32, 4},  {GPUWIRE_INT64, 8},     {GPUWIRE_UINT64, 8},
                 {GPUWIRE_FLOAT16, 2}, {GPUWIRE_FLOAT32, 4},   {GPUWIRE_FLOAT64, 8},
                 {GPUWIRE_BFLOAT16, 2}, {GPUWIRE_COMPLEX64, 8}, {GPUWIRE_COMPLEX128, 16},
                 {GPUWIRE_FLOAT32_INT32, 8}, {GPUWIRE_FLOAT64_INT32, 16}, {GPUWIRE_INT32_INT32, 8}};
    size_t i;
    int64_t bytes;
    for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        bytes = -1;
        EXPECT_OK(gpuwire_dtype_size(sizes[i].dtype, &bytes));
        EXPECT(bytes == sizes[i].bytes);
    }
    EXPECT_UNTOUCHED(gpuwire_dtype_size(15, &bytes), GPUWIRE_ERROR_UNSUPPORTED_DTYPE, bytes, -7);
    EXPECT_UNTOUCHED(gpuwire_dtype_size(-1, &bytes), GPUWIRE_ERROR_UNSUPPORTED_DTYPE, bytes, -7);
    EXPECT_STATUS(gpuwire_dtype_size(GPUWIRE_INT8, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
}

/* ---- lifecycle queries -------------------------------------------------------------------- */

static void lifecycle(void)
{
    int32_t flag = -1, level = -1;
    EXPECT_OK(gpuwire_init());
    EXPECT_OK(gpuwire_init()); /* again: does nothing */
    EXPECT_OK(gpuwire_initialized(&flag));
    EXPECT(flag == 1);
    EXPECT_OK(gpuwire_owns_mpi(&flag));
    EXPECT(flag == 1); /* nobody had initialized MPI: gpuwire did */
    EXPECT_OK(gpuwire_query_thread(&level));
    EXPECT(level >= GPUWIRE_THREAD_SINGLE && level <= GPUWIRE_THREAD_MULTIPLE);
    EXPECT_STATUS(gpuwire_initialized(NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_owns_mpi(NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_query_thread(NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
}

/* ---- NULL out-pointers -------------------------------------------------------------------- */

static void null_out_pointers(gpuwire_comm comm, gpuwire_buffer buf)
{
    double x = 0.0;
    gpuwire_request req = GPUWIRE_REQUEST_NULL;
    int32_t flag;

    EXPECT_STATUS(gpuwire_buffer_alloc(1, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1, NULL),
                  GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("`out` must not be NULL");
    EXPECT_STATUS(gpuwire_buffer_wrap(&x, 1, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, NULL),
                  GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_buffer_view(buf, 0, 1, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_buffer_pointer(buf, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_buffer_count(buf, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_buffer_dtype(buf, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_buffer_space(buf, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_buffer_device(buf, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_buffer_owned(buf, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_buffer_contiguous(buf, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_buffer_copy_from_host(buf, NULL, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_buffer_copy_to_host(buf, NULL, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_config_init(NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_comm_create(0, NULL, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_comm_world(NULL, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_comm_split(comm, 0, 0, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_comm_dup(comm, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_comm_rank(comm, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_comm_size(comm, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_comm_local_rank(comm, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_comm_local_size(comm, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_comm_backend(comm, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_comm_device(comm, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_comm_mpi(comm, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_comm_describe(comm, NULL, 16), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_isend(comm, buf, GPUWIRE_PROC_NULL, 0, NULL, NULL),
                  GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_irecv(comm, buf, GPUWIRE_PROC_NULL, 0, NULL, NULL),
                  GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_wait(NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_test(NULL, &flag), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_test(&req, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_waitall(1, NULL), GPUWIRE_ERROR_NULL_ARGUMENT);
    EXPECT_STATUS(gpuwire_last_error(NULL, 16), GPUWIRE_ERROR_NULL_ARGUMENT);
}

/* ---- out-parameters are written only on success ------------------------------------------- */

static void untouched_on_failure(gpuwire_comm comm, gpuwire_buffer buf)
{
    const uint64_t S = UINT64_C(0x5EE5EE5EE5EE5EE5); /* handle sentinel */
    gpuwire_buffer b;
    gpuwire_comm c;
    gpuwire_request r;
    int64_t n;
    int32_t i32;
    void *p;
    gpuwire_buffer stale;
    char dummy[8];

    EXPECT_OK(gpuwire_buffer_alloc(2, GPUWIRE_INT32, GPUWIRE_SPACE_HOST, -1, &stale));
    EXPECT_OK(gpuwire_buffer_free(stale));

    EXPECT_UNTOUCHED_H(gpuwire_buffer_alloc(-1, GPUWIRE_FLOAT32, GPUWIRE_SPACE_HOST, -1, &b),
                       GPUWIRE_ERROR_INVALID_ARGUMENT, b, S);
    EXPECT_UNTOUCHED_H(gpuwire_buffer_alloc(4, 42, GPUWIRE_SPACE_HOST, -1, &b),
                       GPUWIRE_ERROR_UNSUPPORTED_DTYPE, b, S);
    EXPECT_UNTOUCHED_H(gpuwire_buffer_alloc(4, GPUWIRE_FLOAT32, GPUWIRE_SPACE_AUTO, -1, &b),
                       GPUWIRE_ERROR_INVALID_ARGUMENT, b, S);
    EXPECT_UNTOUCHED_H(gpuwire_buffer_alloc(4, GPUWIRE_FLOAT32, 9, -1, &b),
                       GPUWIRE_ERROR_INVALID_ARGUMENT, b, S);
    EXPECT_UNTOUCHED_H(gpuwire_buffer_alloc(INT64_MAX, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1, &b),
                       GPUWIRE_ERROR_INVALID_ARGUMENT, b, S);
    EXPECT_UNTOUCHED_H(gpuwire_buffer_wrap(NULL, 3, GPUWIRE_FLOAT32, GPUWIRE_SPACE_HOST, &b),
                       GPUWIRE_ERROR_NULL_ARGUMENT, b, S);
    EXPECT_UNTOUCHED_H(gpuwire_buffer_wrap(dummy, -2, GPUWIRE_INT8, GPUWIRE_SPACE_HOST, &b),
                       GPUWIRE_ERROR_INVALID_ARGUMENT, b, S);
    EXPECT_UNTOUCHED_H(gpuwire_buffer_wrap(dummy, 1, 42, GPUWIRE_SPACE_HOST, &b),
                       GPUWIRE_ERROR_UNSUPPORTED_DTYPE, b, S);
    EXPECT_UNTOUCHED_H(gpuwire_buffer_view(buf, 0, 1000, &b), GPUWIRE_ERROR_INVALID_ARGUMENT, b, S);
    EXPECT_UNTOUCHED_H(gpuwire_buffer_view(stale, 0, 1, &b), GPUWIRE_ERROR_INVALID_HANDLE, b, S);
    EXPECT_UNTOUCHED(gpuwire_buffer_pointer(stale, &p), GPUWIRE_ERROR_INVALID_HANDLE, p,
                     (void *)dummy);
    EXPECT_UNTOUCHED(gpuwire_buffer_count(stale, &n), GPUWIRE_ERROR_INVALID_HANDLE, n, -7);
    EXPECT_LAST_ERROR_HAS("already freed");
    EXPECT_UNTOUCHED(gpuwire_buffer_dtype(stale, &i32), GPUWIRE_ERROR_INVALID_HANDLE, i32, -7);
    EXPECT_UNTOUCHED(gpuwire_buffer_space(stale, &i32), GPUWIRE_ERROR_INVALID_HANDLE, i32, -7);
    EXPECT_UNTOUCHED(gpuwire_buffer_device(stale, &i32), GPUWIRE_ERROR_INVALID_HANDLE, i32, -7);
    EXPECT_UNTOUCHED(gpuwire_buffer_owned(stale, &i32), GPUWIRE_ERROR_INVALID_HANDLE, i32, -7);
    /* A handle of the wrong kind. */
    EXPECT_UNTOUCHED(gpuwire_comm_rank(AS_COMM(buf), &i32), GPUWIRE_ERROR_INVALID_HANDLE, i32, -7);
    EXPECT_LAST_ERROR_HAS("is a buffer handle, not a communicator handle");
    EXPECT_UNTOUCHED(gpuwire_buffer_count(AS_BUFFER(comm), &n), GPUWIRE_ERROR_INVALID_HANDLE, n, -7);
    EXPECT_UNTOUCHED(gpuwire_comm_size(GPUWIRE_COMM_NULL, &i32), GPUWIRE_ERROR_INVALID_HANDLE, i32, -7);
    EXPECT_UNTOUCHED(gpuwire_comm_local_rank(AS_COMM(buf), &i32), GPUWIRE_ERROR_INVALID_HANDLE, i32, -7);
    EXPECT_UNTOUCHED(gpuwire_comm_local_size(AS_COMM(buf), &i32), GPUWIRE_ERROR_INVALID_HANDLE, i32, -7);
    EXPECT_UNTOUCHED(gpuwire_comm_backend(AS_COMM(buf), &i32), GPUWIRE_ERROR_INVALID_HANDLE, i32, -7);
    EXPECT_UNTOUCHED(gpuwire_comm_device(AS_COMM(buf), &i32), GPUWIRE_ERROR_INVALID_HANDLE, i32, -7);
    EXPECT_UNTOUCHED(gpuwire_comm_mpi(AS_COMM(buf), &i32), GPUWIRE_ERROR_INVALID_HANDLE, i32, -7);
    EXPECT_UNTOUCHED_H(gpuwire_comm_split(AS_COMM(buf), 0, 0, &c), GPUWIRE_ERROR_INVALID_HANDLE, c, S);
    EXPECT_UNTOUCHED_H(gpuwire_comm_split(comm, -5, 0, &c), GPUWIRE_ERROR_INVALID_ARGUMENT, c, S);
    EXPECT_UNTOUCHED_H(gpuwire_comm_dup(AS_COMM(buf), &c), GPUWIRE_ERROR_INVALID_HANDLE, c, S);
    EXPECT_UNTOUCHED_H(gpuwire_isend(comm, stale, 0, 0, NULL, &r), GPUWIRE_ERROR_INVALID_HANDLE, r,
                       S);
    EXPECT_UNTOUCHED_H(gpuwire_irecv(comm, buf, 1 << 30, 0, NULL, &r),
                       GPUWIRE_ERROR_INVALID_ARGUMENT, r, S);
    EXPECT_LAST_ERROR_HAS("is not a rank of this communicator");
    EXPECT_UNTOUCHED_H(gpuwire_isend(comm, buf, 0, -1, NULL, &r), GPUWIRE_ERROR_INVALID_ARGUMENT, r,
                       S);
    EXPECT_LAST_ERROR_HAS("tag -1");
    /* A stale request handle: nothing is written back. */
    r.h = S;
    EXPECT_STATUS(gpuwire_wait(&r), GPUWIRE_ERROR_INVALID_HANDLE);
    EXPECT(r.h == S);
    i32 = -7;
    EXPECT_STATUS(gpuwire_test(&r, &i32), GPUWIRE_ERROR_INVALID_HANDLE);
    EXPECT(r.h == S && i32 == -7);
    EXPECT_STATUS(gpuwire_waitall(-1, &r), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_OK(gpuwire_waitall(0, NULL));
}

/* ---- buffers ------------------------------------------------------------------------------ */

static void buffers(void)
{
    gpuwire_buffer buf, v1, v2, empty, w, w0;
    double host[8], back[8], wrapped[4] = {1.5, 2.5, 3.5, 4.5};
    char storage[32];
    void *p, *pv;
    int64_t n;
    int32_t i32;
    int i;

    EXPECT_OK(gpuwire_buffer_alloc(8, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1, &buf));
    EXPECT(buf.h != 0);
    EXPECT_OK(gpuwire_buffer_count(buf, &n));
    EXPECT(n == 8);
    EXPECT_OK(gpuwire_buffer_dtype(buf, &i32));
    EXPECT(i32 == GPUWIRE_FLOAT64);
    EXPECT_OK(gpuwire_buffer_space(buf, &i32));
    EXPECT(i32 == GPUWIRE_SPACE_HOST);
    EXPECT_OK(gpuwire_buffer_device(buf, &i32));
    EXPECT(i32 == -1);
    EXPECT_OK(gpuwire_buffer_owned(buf, &i32));
    EXPECT(i32 == 1);
    EXPECT_OK(gpuwire_buffer_pointer(buf, &p));
    EXPECT(p != NULL && (uintptr_t)p % 64 == 0); /* host memory is 64-byte aligned */
    for (i = 0; i < 8; i++)
        EXPECT(((double *)p)[i] == 0.0); /* zero-filled */

    /* Copies in and out. */
    for (i = 0; i < 8; i++)
        host[i] = 10.0 + i;
    EXPECT_OK(gpuwire_buffer_copy_from_host(buf, host, NULL));
    for (i = 0; i < 8; i++)
        EXPECT(((double *)p)[i] == 10.0 + i);
    memset(back, 0, sizeof back);
    EXPECT_OK(gpuwire_buffer_copy_to_host(buf, back, NULL));
    EXPECT(memcmp(host, back, sizeof host) == 0);

    /* Views share memory; a view of a view refers to the original. */
    EXPECT_OK(gpuwire_buffer_view(buf, 2, 4, &v1));
    EXPECT_OK(gpuwire_buffer_pointer(v1, &pv));
    EXPECT((char *)pv == (char *)p + 2 * sizeof(double));
    EXPECT_OK(gpuwire_buffer_count(v1, &n));
    EXPECT(n == 4);
    EXPECT_OK(gpuwire_buffer_owned(v1, &i32));
    EXPECT(i32 == 1);
    /* Contiguous: an allocation and a view; not a strided view (its elements lie apart). */
    i32 = -1;
    EXPECT_OK(gpuwire_buffer_contiguous(v1, &i32));
    EXPECT(i32 == 1);
    EXPECT_OK(gpuwire_buffer_view_strided(buf, 0, 3, 1, 2, &w));
    EXPECT_OK(gpuwire_buffer_contiguous(w, &i32));
    EXPECT(i32 == 0);
    EXPECT_OK(gpuwire_buffer_free(w));
    EXPECT_OK(gpuwire_buffer_view(v1, 1, 2, &v2));
    EXPECT_OK(gpuwire_buffer_pointer(v2, &pv));
    EXPECT((char *)pv == (char *)p + 3 * sizeof(double));
    EXPECT_STATUS(gpuwire_buffer_view(v1, 3, 2, &w), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(gpuwire_buffer_view(buf, -1, 2, &w), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(gpuwire_buffer_view(buf, 0, -1, &w), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_OK(gpuwire_buffer_view(buf, 8, 0, &w)); /* empty, at the end */
    EXPECT_OK(gpuwire_buffer_free(w));

    /* A view keeps the memory alive after its parent's handle is freed (a sanitizer build
     * reports a use after free here if it does not). */
    EXPECT_OK(gpuwire_buffer_free(buf));
    EXPECT_STATUS(gpuwire_buffer_free(buf), GPUWIRE_ERROR_INVALID_HANDLE); /* twice */
    EXPECT_STATUS(gpuwire_buffer_count(buf, &n), GPUWIRE_ERROR_INVALID_HANDLE);
    EXPECT_OK(gpuwire_buffer_copy_from_host(v2, host, NULL));
    memset(back, 0, sizeof back);
    EXPECT_OK(gpuwire_buffer_copy_to_host(v1, back, NULL));
    EXPECT(back[0] == 12.0 && back[1] == 10.0 && back[2] == 11.0 && back[3] == 15.0);
    EXPECT_OK(gpuwire_buffer_free(v1));
    EXPECT_OK(gpuwire_buffer_free(v2));

    /* An empty owned buffer has a NULL pointer; copies of 0 bytes accept NULL. */
    EXPECT_OK(gpuwire_buffer_alloc(0, GPUWIRE_INT8, GPUWIRE_SPACE_HOST, -1, &empty));
    p = (void *)storage;
    EXPECT_OK(gpuwire_buffer_pointer(empty, &p));
    EXPECT(p == NULL);
    EXPECT_OK(gpuwire_buffer_copy_from_host(empty, NULL, NULL));
    EXPECT_OK(gpuwire_buffer_copy_to_host(empty, NULL, NULL));
    EXPECT_OK(gpuwire_buffer_free(empty));

    /* Wrapped memory is borrowed: same pointer, not owned, host (no CUDA needed to tell). */
    EXPECT_OK(gpuwire_buffer_wrap(wrapped, 4, GPUWIRE_FLOAT64, GPUWIRE_SPACE_AUTO, &w));
    EXPECT_OK(gpuwire_buffer_pointer(w, &p));
    EXPECT(p == (void *)wrapped);
    EXPECT_OK(gpuwire_buffer_owned(w, &i32));
    EXPECT(i32 == 0);
    EXPECT_OK(gpuwire_buffer_space(w, &i32));
    EXPECT(i32 == GPUWIRE_SPACE_HOST);
    EXPECT_OK(gpuwire_buffer_device(w, &i32));
    EXPECT(i32 == -1);
    EXPECT_OK(gpuwire_buffer_copy_to_host(w, back, NULL));
    EXPECT(back[0] == 1.5 && back[3] == 4.5);
    EXPECT_OK(gpuwire_buffer_free(w));
    EXPECT(wrapped[2] == 3.5); /* gpuwire never frees or changes borrowed memory */
    EXPECT_OK(gpuwire_buffer_wrap(wrapped, 4, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &w));
    EXPECT_OK(gpuwire_buffer_free(w));
    EXPECT_OK(gpuwire_buffer_wrap(NULL, 0, GPUWIRE_FLOAT32, GPUWIRE_SPACE_HOST, &w0));
    EXPECT_OK(gpuwire_buffer_free(w0));
    /* A float32 at an odd address is misaligned. */
    EXPECT_STATUS(gpuwire_buffer_wrap(wrapped[0] > 0 ? (void *)((char *)wrapped + 1) : NULL, 2,
                                      GPUWIRE_FLOAT32, GPUWIRE_SPACE_HOST, &w),
                  GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("not aligned");
    /* Elements are aligned as in C: a complex64 (two floats) and the 32-bit pairs to 4 bytes
     * (a Fortran complex(real32) or a std::complex<float> at an address 4 mod 8 was refused),
     * a complex128 and the float64 pair to 8. `wrapped` is 8-byte aligned. */
    {
        char *at4 = (char *)wrapped + 4, *at2 = (char *)wrapped + 2;
        EXPECT_OK(gpuwire_buffer_wrap(at4, 1, GPUWIRE_COMPLEX64, GPUWIRE_SPACE_HOST, &w));
        EXPECT_OK(gpuwire_buffer_free(w));
        EXPECT_OK(gpuwire_buffer_wrap(at4, 1, GPUWIRE_FLOAT32_INT32, GPUWIRE_SPACE_HOST, &w));
        EXPECT_OK(gpuwire_buffer_free(w));
        EXPECT_OK(gpuwire_buffer_wrap(at4, 1, GPUWIRE_INT32_INT32, GPUWIRE_SPACE_HOST, &w));
        EXPECT_OK(gpuwire_buffer_free(w));
        EXPECT_STATUS(gpuwire_buffer_wrap(at2, 1, GPUWIRE_COMPLEX64, GPUWIRE_SPACE_HOST, &w),
                      GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_LAST_ERROR_HAS("aligned to 4 bytes");
        EXPECT_STATUS(gpuwire_buffer_wrap(at4, 1, GPUWIRE_COMPLEX128, GPUWIRE_SPACE_HOST, &w),
                      GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_STATUS(gpuwire_buffer_wrap(at4, 1, GPUWIRE_FLOAT64_INT32, GPUWIRE_SPACE_HOST, &w),
                      GPUWIRE_ERROR_INVALID_ARGUMENT);
        EXPECT_STATUS(gpuwire_buffer_wrap(at4, 1, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &w),
                      GPUWIRE_ERROR_INVALID_ARGUMENT);
    }
    EXPECT_STATUS(gpuwire_buffer_wrap(storage, 4, GPUWIRE_INT8, 7, &w),
                  GPUWIRE_ERROR_INVALID_ARGUMENT);

    /* Freeing the NULL handle or a handle of another kind touches nothing. */
    EXPECT_STATUS(gpuwire_buffer_free(GPUWIRE_BUFFER_NULL), GPUWIRE_ERROR_INVALID_HANDLE);
}

/* Device memory: allocated where CUDA works, else GPUWIRE_ERROR_BACKEND_UNAVAILABLE.
 * Returns 1 when this process has no usable CUDA device. */
static int device_memory_unavailable(void)
{
    const uint64_t S = UINT64_C(0x5EE5EE5EE5EE5EE5);
    gpuwire_buffer b = {S};
    gpuwire_status st = gpuwire_buffer_alloc(4, GPUWIRE_FLOAT32, GPUWIRE_SPACE_DEVICE, -1, &b);
    if (st == GPUWIRE_SUCCESS) {
        EXPECT_OK(gpuwire_buffer_free(b));
        return 0;
    }
    EXPECT_STATUS(st, GPUWIRE_ERROR_BACKEND_UNAVAILABLE);
    EXPECT(b.h == S);
    EXPECT_LAST_ERROR_HAS("cannot allocate device memory");
    return 1;
}

/* ---- the thread's last error -------------------------------------------------------------- */

static void last_error_truncation(void)
{
    char full[1024], small[32];
    int64_t n;
    size_t len;

    EXPECT_STATUS(gpuwire_buffer_count(GPUWIRE_BUFFER_NULL, &n), GPUWIRE_ERROR_INVALID_HANDLE);
    EXPECT_OK(gpuwire_last_error(full, sizeof full));
    len = strlen(full);
    EXPECT(len > 20 && len < sizeof full - 1);
    EXPECT(strncmp(full, "gpuwire_buffer_count: ", 22) == 0); /* "function: message" */

    /* Truncated to buflen - 1 bytes, NUL-terminated, nothing written past buflen. */
    memset(small, 'X', sizeof small);
    EXPECT_OK(gpuwire_last_error(small, 8));
    EXPECT(strncmp(small, full, 7) == 0 && small[7] == '\0' && small[8] == 'X');
    memset(small, 'X', sizeof small);
    EXPECT_OK(gpuwire_last_error(small, 1));
    EXPECT(small[0] == '\0' && small[1] == 'X');
    memset(small, 'X', sizeof small);
    EXPECT_STATUS(gpuwire_last_error(small, 0), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT(small[0] == 'X');
    EXPECT_STATUS(gpuwire_last_error(NULL, 8), GPUWIRE_ERROR_NULL_ARGUMENT);

    /* gpuwire_last_error's own failures and successful calls keep the message. */
    EXPECT_OK(gpuwire_dtype_size(GPUWIRE_INT32, &n));
    memset(small, 'X', sizeof small);
    EXPECT_OK(gpuwire_last_error(small, sizeof small));
    EXPECT(strncmp(small, full, sizeof small - 1) == 0 && small[sizeof small - 1] == '\0');
}

typedef struct {
    int which;                 /* 0: provokes UNSUPPORTED_DTYPE, 1: INVALID_HANDLE, 2: nothing */
    pthread_barrier_t *barrier;
    gpuwire_status st;
    char msg[1024];
} thread_arg;

static void *thread_main(void *p)
{
    thread_arg *a = (thread_arg *)p;
    int64_t n;
    if (a->which == 0)
        a->st = gpuwire_dtype_size(99, &n);
    else if (a->which == 1)
        a->st = gpuwire_buffer_count(GPUWIRE_BUFFER_NULL, &n);
    else
        a->st = GPUWIRE_SUCCESS;
    /* Every thread has failed (or not) before any reads its message. */
    pthread_barrier_wait(a->barrier);
    if (gpuwire_last_error(a->msg, sizeof a->msg) != GPUWIRE_SUCCESS)
        strcpy(a->msg, "<gpuwire_last_error failed>");
    pthread_barrier_wait(a->barrier);
    return NULL;
}

static void thread_local_errors(void)
{
    pthread_t t[3];
    thread_arg a[3];
    pthread_barrier_t barrier;
    char mine[1024];
    int32_t r;
    int i;

    /* This thread's own message, which the others must not overwrite. */
    EXPECT_STATUS(gpuwire_comm_rank(GPUWIRE_COMM_NULL, &r), GPUWIRE_ERROR_INVALID_HANDLE);
    EXPECT(pthread_barrier_init(&barrier, NULL, 3) == 0);
    for (i = 0; i < 3; i++) {
        a[i].which = i;
        a[i].barrier = &barrier;
        a[i].msg[0] = '\0';
        EXPECT(pthread_create(&t[i], NULL, thread_main, &a[i]) == 0);
    }
    for (i = 0; i < 3; i++)
        EXPECT(pthread_join(t[i], NULL) == 0);
    pthread_barrier_destroy(&barrier);

    EXPECT(a[0].st == GPUWIRE_ERROR_UNSUPPORTED_DTYPE);
    EXPECT(strncmp(a[0].msg, "gpuwire_dtype_size: ", 20) == 0);
    EXPECT(strstr(a[0].msg, "99") != NULL);
    EXPECT(a[1].st == GPUWIRE_ERROR_INVALID_HANDLE);
    EXPECT(strncmp(a[1].msg, "gpuwire_buffer_count: ", 22) == 0);
    EXPECT(a[2].msg[0] == '\0'); /* a thread with no failure reads "" */
    EXPECT_OK(gpuwire_last_error(mine, sizeof mine));
    EXPECT(strncmp(mine, "gpuwire_comm_rank: ", 19) == 0);
}

/* ---- configuration and environment -------------------------------------------------------- */

static void config(void)
{
    gpuwire_config cfg, saved;
    gpuwire_comm c;

    clear_env();
    memset(&cfg, 0, sizeof cfg);
    EXPECT_OK(gpuwire_config_init(&cfg));
    EXPECT(cfg.backend == GPUWIRE_BACKEND_AUTO && cfg.device == -1 && cfg.check == 0);
    EXPECT(cfg.staging == GPUWIRE_STAGING_PINNED && cfg.timeout_seconds == 0.0);
    EXPECT(cfg.chunk_bytes == 4194304 && cfg.p2p_matching == GPUWIRE_P2P_MATCHING_BACKEND);

    /* The environment overrides the defaults. */
    setenv("GPUWIRE_BACKEND", "host", 1);
    setenv("GPUWIRE_DEVICE", "0", 1);
    setenv("GPUWIRE_CHECK", "1", 1);
    setenv("GPUWIRE_TIMEOUT", "2.5", 1);
    setenv("GPUWIRE_STAGING", "pageable", 1);
    setenv("GPUWIRE_CHUNK_BYTES", "8192", 1);
    setenv("GPUWIRE_P2P_MATCHING", "mpi", 1);
    EXPECT_OK(gpuwire_config_init(&cfg));
    EXPECT(cfg.backend == GPUWIRE_BACKEND_HOST && cfg.device == 0 && cfg.check == 1);
    EXPECT(cfg.timeout_seconds == 2.5 && cfg.staging == GPUWIRE_STAGING_PAGEABLE);
    EXPECT(cfg.chunk_bytes == 8192 && cfg.p2p_matching == GPUWIRE_P2P_MATCHING_MPI);
    clear_env();
    setenv("GPUWIRE_P2P_MATCHING", "nccl", 1);
    EXPECT_STATUS(gpuwire_config_init(&cfg), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("GPUWIRE_P2P_MATCHING");
    clear_env();

    /* An invalid variable is named in the message and leaves *cfg untouched. */
    memset(&cfg, 0xA5, sizeof cfg);
    saved = cfg;
    setenv("GPUWIRE_CHECK", "maybe", 1);
    EXPECT_STATUS(gpuwire_config_init(&cfg), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("GPUWIRE_CHECK");
    EXPECT(memcmp(&cfg, &saved, sizeof cfg) == 0);
    /* ... and so does a communicator made with cfg = NULL (local: fails on every rank). */
    c.h = 77;
    EXPECT_STATUS(gpuwire_comm_world(NULL, &c), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT(c.h == 77);
    clear_env();
    setenv("GPUWIRE_BACKEND", "gpu", 1);
    EXPECT_STATUS(gpuwire_config_init(&cfg), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("GPUWIRE_BACKEND");
    clear_env();
    /* Read by the NCCL backend only, and refused where NCCL is not used too (it was taken
     * without a look there, and failed only the first NCCL communicator). */
    setenv("GPUWIRE_NCCL_INIT_TIMEOUT", "-5", 1);
    EXPECT_STATUS(gpuwire_config_init(&cfg), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("GPUWIRE_NCCL_INIT_TIMEOUT");
    EXPECT_UNTOUCHED_H(gpuwire_comm_world(NULL, &c), GPUWIRE_ERROR_INVALID_ARGUMENT, c, 77u);
    EXPECT_LAST_ERROR_HAS("GPUWIRE_NCCL_INIT_TIMEOUT");
    setenv("GPUWIRE_NCCL_INIT_TIMEOUT", "0", 1);
    EXPECT_OK(gpuwire_config_init(&cfg));
    clear_env();
    /* Read by the IPC backend only, where any value but "0" was taken for on ("off", "no",
     * "false", "2"): the on/off forms of the other switches, anything else refused everywhere. */
    setenv("GPUWIRE_IPC_STREAM_ORDERED", "2", 1);
    EXPECT_STATUS(gpuwire_config_init(&cfg), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("GPUWIRE_IPC_STREAM_ORDERED");
    EXPECT_LAST_ERROR_HAS("0 or 1 (also off/on, no/yes, false/true)");
    EXPECT_UNTOUCHED_H(gpuwire_comm_world(NULL, &c), GPUWIRE_ERROR_INVALID_ARGUMENT, c, 77u);
    EXPECT_LAST_ERROR_HAS("GPUWIRE_IPC_STREAM_ORDERED");
    setenv("GPUWIRE_IPC_STREAM_ORDERED", "Off", 1);
    EXPECT_OK(gpuwire_config_init(&cfg));
    setenv("GPUWIRE_IPC_STREAM_ORDERED", "", 1); /* empty: unset, as every variable */
    EXPECT_OK(gpuwire_config_init(&cfg));
    clear_env();

    /* Fields set by the caller are validated by gpuwire_comm_create. */
    EXPECT_OK(gpuwire_config_init(&saved));
    cfg = saved;
    cfg.backend = 42;
    EXPECT_UNTOUCHED_H(gpuwire_comm_world(&cfg, &c), GPUWIRE_ERROR_INVALID_ARGUMENT, c, 77u);
    cfg = saved;
    cfg.device = -2;
    EXPECT_UNTOUCHED_H(gpuwire_comm_world(&cfg, &c), GPUWIRE_ERROR_INVALID_ARGUMENT, c, 77u);
    cfg = saved;
    cfg.check = 2;
    EXPECT_UNTOUCHED_H(gpuwire_comm_world(&cfg, &c), GPUWIRE_ERROR_INVALID_ARGUMENT, c, 77u);
    cfg = saved;
    cfg.staging = 5;
    EXPECT_UNTOUCHED_H(gpuwire_comm_world(&cfg, &c), GPUWIRE_ERROR_INVALID_ARGUMENT, c, 77u);
    cfg = saved;
    cfg.timeout_seconds = -1.0;
    EXPECT_UNTOUCHED_H(gpuwire_comm_world(&cfg, &c), GPUWIRE_ERROR_INVALID_ARGUMENT, c, 77u);
    cfg = saved;
    cfg.chunk_bytes = 100;
    EXPECT_UNTOUCHED_H(gpuwire_comm_world(&cfg, &c), GPUWIRE_ERROR_INVALID_ARGUMENT, c, 77u);
    EXPECT_LAST_ERROR_HAS("chunk_bytes");
    cfg = saved;
    cfg.p2p_matching = 2;
    EXPECT_UNTOUCHED_H(gpuwire_comm_world(&cfg, &c), GPUWIRE_ERROR_INVALID_ARGUMENT, c, 77u);
    EXPECT_LAST_ERROR_HAS("p2p_matching");

    /* Timeouts: 0 (none), or 0.001 s (1 ms) to 1e9 s. Huge values were a caught panic
     * (GPUWIRE_ERROR_INTERNAL), tiny ones were accepted and then timed out. */
    {
        const double bad_t[] = {1e300, 1.8447e19, 1.8446744073709552e19, 1e10, 1e9 * 1.000001,
                                1e-9, 0.0009, -1e-9};
        const char *const bad_env[] = {"1e300", "1.8447e19", "1e10", "1e-9", "0.0009", "inf"};
        size_t i;
        for (i = 0; i < sizeof bad_t / sizeof *bad_t; i++) {
            cfg = saved;
            cfg.timeout_seconds = bad_t[i];
            EXPECT_UNTOUCHED_H(gpuwire_comm_world(&cfg, &c), GPUWIRE_ERROR_INVALID_ARGUMENT, c, 77u);
            EXPECT_LAST_ERROR_HAS("config.timeout_seconds");
            EXPECT_LAST_ERROR_HAS("0.001 (1 ms) to 1e9");
        }
        for (i = 0; i < sizeof bad_env / sizeof *bad_env; i++) {
            setenv("GPUWIRE_TIMEOUT", bad_env[i], 1);
            memset(&cfg, 0xA5, sizeof cfg);
            saved = cfg;
            EXPECT_STATUS(gpuwire_config_init(&cfg), GPUWIRE_ERROR_INVALID_ARGUMENT);
            EXPECT_LAST_ERROR_HAS("GPUWIRE_TIMEOUT");
            EXPECT_LAST_ERROR_HAS("0.001 (1 ms) to 1e9");
            EXPECT(memcmp(&cfg, &saved, sizeof cfg) == 0);
            EXPECT_UNTOUCHED_H(gpuwire_comm_world(NULL, &c), GPUWIRE_ERROR_INVALID_ARGUMENT, c, 77u);
            EXPECT_LAST_ERROR_HAS("GPUWIRE_TIMEOUT");
        }
        setenv("GPUWIRE_TIMEOUT", "0.001", 1);
        EXPECT_OK(gpuwire_config_init(&cfg));
        EXPECT(cfg.timeout_seconds == 0.001);
        setenv("GPUWIRE_TIMEOUT", "1e9", 1);
        EXPECT_OK(gpuwire_config_init(&cfg));
        EXPECT(cfg.timeout_seconds == 1e9);
        clear_env();
        /* The longest timeout works (a deadline that far away is representable). */
        cfg.timeout_seconds = 1e9;
        EXPECT_OK(gpuwire_comm_world(&cfg, &c));
        EXPECT_OK(gpuwire_barrier(c, NULL));
        EXPECT_OK(gpuwire_comm_free(c));
    }
}

/* ---- stale handles and waitall ------------------------------------------------------------ */

/* Copies of a freed buffer or request handle stay invalid however many handles come after
 * (the registry never issues a handle twice; its unit tests drive one slot through all 2^24
 * generations), and waitall refuses a request given twice, or a stale or foreign handle. */
static void stale_handles_and_waitall(gpuwire_comm comm)
{
    gpuwire_buffer b, stale, live, sb, rb;
    gpuwire_request r, s, stale_r, arr[5], saved[5];
    int32_t rank, *sp, *rp, i32, fl;
    int64_t n;
    void *p;
    int i, k;

    EXPECT_OK(gpuwire_comm_rank(comm, &rank));
    EXPECT_OK(gpuwire_buffer_alloc(4, GPUWIRE_INT32, GPUWIRE_SPACE_HOST, -1, &stale));
    EXPECT_OK(gpuwire_buffer_free(stale));
    for (i = 0; i < 5000; i++) {
        EXPECT_OK(gpuwire_buffer_alloc(1, GPUWIRE_INT8, GPUWIRE_SPACE_HOST, -1, &b));
        EXPECT(b.h != stale.h);
        EXPECT_OK(gpuwire_buffer_free(b));
    }
    EXPECT_OK(gpuwire_buffer_alloc(4, GPUWIRE_INT32, GPUWIRE_SPACE_HOST, -1, &live));
    EXPECT(live.h != stale.h);
    EXPECT_UNTOUCHED(gpuwire_buffer_count(stale, &n), GPUWIRE_ERROR_INVALID_HANDLE, n, -7);
    EXPECT_STATUS(gpuwire_buffer_free(stale), GPUWIRE_ERROR_INVALID_HANDLE);
    EXPECT_LAST_ERROR_HAS("already freed");
    EXPECT_OK(gpuwire_buffer_count(live, &n)); /* the stale free did not free the live buffer */
    EXPECT(n == 4);
    EXPECT_OK(gpuwire_buffer_free(live));

    /* Requests: messages to this rank itself. */
    EXPECT_OK(gpuwire_buffer_alloc(4, GPUWIRE_INT32, GPUWIRE_SPACE_HOST, -1, &sb));
    EXPECT_OK(gpuwire_buffer_alloc(4, GPUWIRE_INT32, GPUWIRE_SPACE_HOST, -1, &rb));
    EXPECT_OK(gpuwire_buffer_pointer(sb, &p));
    sp = (int32_t *)p;
    EXPECT_OK(gpuwire_buffer_pointer(rb, &p));
    rp = (int32_t *)p;
    stale_r = GPUWIRE_REQUEST_NULL;
    for (k = 0; k < 300; k++) {
        for (i = 0; i < 4; i++) {
            sp[i] = k * 4 + i;
            rp[i] = -1;
        }
        EXPECT_OK(gpuwire_irecv(comm, rb, rank, 5, NULL, &r));
        EXPECT_OK(gpuwire_isend(comm, sb, rank, 5, NULL, &s));
        EXPECT(r.h != stale_r.h && s.h != stale_r.h);
        if (k == 0)
            stale_r = r;
        arr[0] = r;
        arr[1] = s;
        EXPECT_OK(gpuwire_waitall(2, arr));
        EXPECT(arr[0].h == 0 && arr[1].h == 0);
        EXPECT(rp[0] == k * 4 && rp[3] == k * 4 + 3);
    }
    r = stale_r;
    EXPECT_STATUS(gpuwire_wait(&r), GPUWIRE_ERROR_INVALID_HANDLE);
    EXPECT(r.h == stale_r.h);
    i32 = -7;
    EXPECT_STATUS(gpuwire_test(&r, &i32), GPUWIRE_ERROR_INVALID_HANDLE);
    EXPECT(i32 == -7);

    /* waitall with one request twice (among NULL entries, which may repeat): refused before
     * anything is waited for, the array as it was; then waited properly. */
    EXPECT_OK(gpuwire_irecv(comm, rb, rank, 6, NULL, &r));
    EXPECT_OK(gpuwire_isend(comm, sb, rank, 6, NULL, &s));
    arr[0] = GPUWIRE_REQUEST_NULL;
    arr[1] = r;
    arr[2] = s;
    arr[3] = GPUWIRE_REQUEST_NULL;
    arr[4] = r;
    memcpy(saved, arr, sizeof arr);
    EXPECT_STATUS(gpuwire_waitall(5, arr), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("requests[1] and requests[4] are the same request");
    EXPECT(memcmp(arr, saved, sizeof arr) == 0);
    arr[2] = s;
    arr[4] = s;
    EXPECT_STATUS(gpuwire_waitall(5, arr), GPUWIRE_ERROR_INVALID_ARGUMENT);
    EXPECT_LAST_ERROR_HAS("requests[2] and requests[4] are the same request");
    /* A freed request's handle, or a buffer's, is refused before anything is waited for, as
     * in gpuwire_waitany and gpuwire_testall (the two live requests were completed and
     * released first, and the array changed, in a call that returned INVALID_HANDLE). */
    arr[4] = stale_r;
    memcpy(saved, arr, sizeof arr);
    EXPECT_STATUS(gpuwire_waitall(5, arr), GPUWIRE_ERROR_INVALID_HANDLE);
    EXPECT_LAST_ERROR_HAS("request 4: ");
    EXPECT_LAST_ERROR_HAS("nothing was waited for");
    EXPECT(memcmp(arr, saved, sizeof arr) == 0);
    arr[4].h = sb.h;
    memcpy(saved, arr, sizeof arr);
    EXPECT_STATUS(gpuwire_waitall(5, arr), GPUWIRE_ERROR_INVALID_HANDLE);
    EXPECT_LAST_ERROR_HAS("not a request handle");
    EXPECT(memcmp(arr, saved, sizeof arr) == 0);
    arr[4] = GPUWIRE_REQUEST_NULL;
    EXPECT_OK(gpuwire_waitall(5, arr));
    for (i = 0; i < 5; i++)
        EXPECT(arr[i].h == 0);
    EXPECT(rp[0] == 299 * 4);

    /* testany and waitany refuse a stale handle wherever it stands, before testing anything:
     * `*index` and `*flag` unwritten, the array as it was (testany tested the pending receive
     * first, then wrote index 1 with INVALID_HANDLE). */
    EXPECT_OK(gpuwire_irecv(comm, rb, rank, 7, NULL, &r));
    arr[0] = r;
    arr[1] = stale_r;
    memcpy(saved, arr, sizeof arr);
    i32 = -7;
    fl = -7;
    EXPECT_STATUS(gpuwire_testany(2, arr, &i32, &fl, NULL), GPUWIRE_ERROR_INVALID_HANDLE);
    EXPECT_LAST_ERROR_HAS("request 1: ");
    EXPECT(i32 == -7 && fl == -7);
    EXPECT(memcmp(arr, saved, sizeof arr) == 0);
    EXPECT_STATUS(gpuwire_waitany(2, arr, &i32, NULL), GPUWIRE_ERROR_INVALID_HANDLE);
    EXPECT_LAST_ERROR_HAS("request 1: ");
    EXPECT(i32 == -7);
    EXPECT(memcmp(arr, saved, sizeof arr) == 0);
    EXPECT_OK(gpuwire_send(comm, sb, rank, 7, NULL));
    EXPECT_OK(gpuwire_wait(&arr[0]));
    EXPECT_OK(gpuwire_buffer_free(sb));
    EXPECT_OK(gpuwire_buffer_free(rb));
}

/* ---- communicators ------------------------------------------------------------------------ */

static void comm_queries(gpuwire_comm comm, int32_t expected_size)
{
    int32_t rank = -1, size = -1, lrank = -1, lsize = -1, backend = -1, device = -7, fint;
    char text[1024], small[16], want[64];
    gpuwire_comm dup;

    EXPECT_OK(gpuwire_comm_rank(comm, &rank));
    EXPECT_OK(gpuwire_comm_size(comm, &size));
    EXPECT(size == expected_size && rank >= 0 && rank < size);
    /* One node: every rank is node-local. */
    EXPECT_OK(gpuwire_comm_local_rank(comm, &lrank));
    EXPECT_OK(gpuwire_comm_local_size(comm, &lsize));
    EXPECT(lsize == size && lrank == rank);
    EXPECT_OK(gpuwire_comm_backend(comm, &backend));
    EXPECT(backend >= GPUWIRE_BACKEND_HOST && backend <= GPUWIRE_BACKEND_IPC); /* never AUTO */
    EXPECT_OK(gpuwire_comm_device(comm, &device));
    EXPECT(device >= -1);
    if (backend == GPUWIRE_BACKEND_HOST)
        EXPECT(device == -1);
    EXPECT_OK(gpuwire_comm_mpi(comm, &fint));

    EXPECT_OK(gpuwire_comm_describe(comm, text, sizeof text));
    EXPECT(strstr(text, "backend=") != NULL && strstr(text, "mpi=") != NULL);
    snprintf(want, sizeof want, "rank %d/%d", (int)rank, (int)size);
    EXPECT(strstr(text, want) != NULL);
    memset(small, 'X', sizeof small);
    EXPECT_OK(gpuwire_comm_describe(comm, small, 10));
    EXPECT(strlen(small) == 9 && strncmp(small, text, 9) == 0 && small[10] == 'X');
    EXPECT_STATUS(gpuwire_comm_describe(comm, small, 0), GPUWIRE_ERROR_INVALID_ARGUMENT);

    /* dup: same ranks, a new handle; freeing twice is refused. */
    EXPECT_OK(gpuwire_comm_dup(comm, &dup));
    EXPECT(dup.h != comm.h && dup.h != 0);
    EXPECT_OK(gpuwire_comm_rank(dup, &lrank));
    EXPECT(lrank == rank);
    EXPECT_OK(gpuwire_comm_free(dup));
    EXPECT_STATUS(gpuwire_comm_free(dup), GPUWIRE_ERROR_INVALID_HANDLE);
    EXPECT_STATUS(gpuwire_comm_rank(dup, &lrank), GPUWIRE_ERROR_INVALID_HANDLE);
    EXPECT_STATUS(gpuwire_comm_free(GPUWIRE_COMM_NULL), GPUWIRE_ERROR_INVALID_HANDLE);
}

/* Backend requests (collective: every rank makes the same requests). */
static void backends(int no_cuda)
{
    static const int32_t device_backends[] = {GPUWIRE_BACKEND_MPI_STAGED,
                                              GPUWIRE_BACKEND_MPI_CUDA_AWARE,
                                              GPUWIRE_BACKEND_NCCL,
                                              GPUWIRE_BACKEND_IPC,
                                              GPUWIRE_BACKEND_HIER};
    static const char *const names[] = {"MPI_STAGED", "MPI_CUDA_AWARE", "NCCL", "IPC",
                                        "HIER was requested but cannot be used: the ranks are all on one node"};
    gpuwire_config cfg;
    gpuwire_comm c;
    int32_t backend;
    size_t i;
    char msg[1024];

    EXPECT_OK(gpuwire_config_init(&cfg));
    cfg.backend = GPUWIRE_BACKEND_HOST;
    EXPECT_OK(gpuwire_comm_world(&cfg, &c));
    EXPECT_OK(gpuwire_comm_backend(c, &backend));
    EXPECT(backend == GPUWIRE_BACKEND_HOST);
    EXPECT_OK(gpuwire_comm_free(c));

    if (!no_cuda)
        return; /* with CUDA, which device backends work depends on the machine */
    cfg.backend = GPUWIRE_BACKEND_AUTO;
    EXPECT_OK(gpuwire_comm_world(&cfg, &c));
    EXPECT_OK(gpuwire_comm_backend(c, &backend));
    EXPECT(backend == GPUWIRE_BACKEND_HOST); /* AUTO without CUDA */
    EXPECT_OK(gpuwire_comm_free(c));
    for (i = 0; i < sizeof device_backends / sizeof device_backends[0]; i++) {
        cfg.backend = device_backends[i];
        EXPECT_UNTOUCHED_H(gpuwire_comm_world(&cfg, &c), GPUWIRE_ERROR_BACKEND_UNAVAILABLE, c, 77u);
        EXPECT(gpuwire_last_error(msg, sizeof msg) == GPUWIRE_SUCCESS &&
               strstr(msg, names[i]) != NULL);
    }
}

/* ---- after gpuwire_finalize --------------------------------------------------------------- */

static void after_finalize(gpuwire_comm comm, gpuwire_buffer buf)
{
    int32_t flag = -1, r;
    int64_t n;
    gpuwire_buffer b;
    char msg[256];

    EXPECT_STATUS(gpuwire_finalize(), GPUWIRE_ERROR_ALREADY_FINALIZED);
    EXPECT_STATUS(gpuwire_init(), GPUWIRE_ERROR_ALREADY_FINALIZED);
    EXPECT_LAST_ERROR_HAS("cannot be initialized twice");
    EXPECT_OK(gpuwire_initialized(&flag));
    EXPECT(flag == 0);
    EXPECT_UNTOUCHED(gpuwire_comm_rank(comm, &r), GPUWIRE_ERROR_ALREADY_FINALIZED, r, -7);
    EXPECT_UNTOUCHED(gpuwire_buffer_count(buf, &n), GPUWIRE_ERROR_ALREADY_FINALIZED, n, -7);
    EXPECT_UNTOUCHED_H(gpuwire_buffer_alloc(1, GPUWIRE_INT8, GPUWIRE_SPACE_HOST, -1, &b),
                       GPUWIRE_ERROR_ALREADY_FINALIZED, b, 77u);
    EXPECT_UNTOUCHED(gpuwire_query_thread(&r), GPUWIRE_ERROR_ALREADY_FINALIZED, r, -7);
    EXPECT_STATUS(gpuwire_buffer_free(buf), GPUWIRE_ERROR_ALREADY_FINALIZED);
    EXPECT_STATUS(gpuwire_comm_free(comm), GPUWIRE_ERROR_ALREADY_FINALIZED);
    /* What works at any time still does. */
    EXPECT_OK(gpuwire_last_error(msg, sizeof msg));
    EXPECT_OK(gpuwire_dtype_size(GPUWIRE_COMPLEX64, &n));
    EXPECT(n == 8);
}

int main(int argc, char **argv)
{
    gpuwire_comm comm;
    gpuwire_buffer buf, total;
    int32_t rank, size, expected;
    int64_t *t;
    long global;
    void *p;
    int no_cuda;

    if (argc != 2) {
        fprintf(stderr, "usage: test_api EXPECTED_RANKS\n");
        return 2;
    }
    expected = (int32_t)atoi(argv[1]);

    before_init();
    status_strings();
    version();
    dtype_sizes();
    lifecycle();

    if (gpuwire_comm_world(NULL, &comm) != GPUWIRE_SUCCESS ||
        gpuwire_comm_rank(comm, &rank) != GPUWIRE_SUCCESS ||
        gpuwire_comm_size(comm, &size) != GPUWIRE_SUCCESS) {
        fprintf(stderr, "test_api: cannot make the world communicator\n");
        return 1;
    }
    gwt_rank = rank;
    if (size != expected) {
        fprintf(stderr, "test_api: launched on %d ranks, expected %d (wrong launcher?)\n",
                (int)size, (int)expected);
        return 1;
    }

    EXPECT_OK(gpuwire_buffer_alloc(4, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1, &buf));
    null_out_pointers(comm, buf);
    untouched_on_failure(comm, buf);
    buffers();
    no_cuda = device_memory_unavailable();
    last_error_truncation();
    thread_local_errors();
    config();
    comm_queries(comm, expected);
    stale_handles_and_waitall(comm);
    backends(no_cuda);

    /* Combine the ranks' failure counts while MPI is still up. */
    if (gpuwire_buffer_alloc(1, GPUWIRE_INT64, GPUWIRE_SPACE_HOST, -1, &total) != GPUWIRE_SUCCESS ||
        gpuwire_buffer_pointer(total, &p) != GPUWIRE_SUCCESS) {
        fprintf(stderr, "test_api: cannot allocate the result buffer\n");
        return 1;
    }
    t = (int64_t *)p;
    *t = gwt_failures();
    EXPECT_OK(gpuwire_allreduce(comm, total, total, GPUWIRE_SUM, NULL));
    global = (long)*t;

    /* Handles stay allocated on purpose: gpuwire_finalize releases them. */
    EXPECT_OK(gpuwire_finalize());
    after_finalize(comm, buf);

    if (gwt_failures() > 0) {
        fprintf(stderr, "test_api: FAIL on rank %d (%ld of %ld checks failed)\n", (int)rank,
                gwt_failures(), gwt_checks);
        return 1;
    }
    if (global > 0)
        return 1; /* another rank failed before finalize and said so */
    if (rank == 0)
        printf("test_api: PASS (%ld checks per rank, %d ranks)\n", gwt_checks, (int)size);
    return 0;
}
