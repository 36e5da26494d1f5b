! gpuwire.f90: the Fortran interface of gpuwire (Fortran 2018: assumed-rank arguments; tested
! with gfortran 12 and Open MPI's and MPICH's mpifort).
!
! Compile this file with the same compiler, and the same MPI's wrapper, as your program (Fortran
! module files are compiler-specific), then link with -lgpuwire:
!
!     mpifort -c gpuwire.f90                       # gpuwire_types.mod, gpuwire_c.mod, gpuwire.mod
!     mpifort prog.f90 gpuwire.o -L<libdir> -lgpuwire -Wl,-rpath,<libdir>
!
! Three modules, from the lowest level up:
!
!   gpuwire_types  the constants (status codes, datatypes, ops, spaces, backends, partitions,
!                  norms, ...), the handle types gpuwire_comm, gpuwire_buffer, gpuwire_request,
!                  gpuwire_darray (one integer(c_int64_t) component `handle`, 0 = NULL) and
!                  gpuwire_config, a bind(C) mirror of the C struct. Needs neither mpi nor
!                  mpi_f08.
!   gpuwire_c      one bind(C) interface for every function of gpuwire.h, with the C name, the C
!                  arguments and the status as the function result. Handles are plain
!                  integer(gpuwire_handle_kind) values. For code that wants the C API as is.
!   gpuwire        what a Fortran program uses: `use gpuwire` gives gpuwire_types and, for every C
!                  function, an mpi_f08-style subroutine of the same name (see "Conventions").
!
! Conventions of module gpuwire
!   - Each C function gpuwire_X has a generic subroutine gpuwire_X (gpuwire_status_string is a
!     function returning the string). Arguments keep the C order, with these changes: handles
!     are type(gpuwire_comm) / type(gpuwire_buffer) / type(gpuwire_request); 0/1 flags are
!     logical; strings are character(len=*); pointers to data are Fortran arrays; the optional
!     C arguments (cfg, recvcounts, stream) are optional Fortran arguments placed last, to be
!     passed by keyword (stream=...); every subroutine ends with an optional `ierror`.
!   - With `ierror` present, it receives the status (GPUWIRE_SUCCESS = 0, or an error code) and
!     the program goes on. Without it, an error prints "gpuwire: <call> failed: ..." with the
!     detailed message to the standard error unit and ends the program with `error stop` (the
!     Fortran analogue of MPI's default MPI_ERRORS_ARE_FATAL). gpuwire_last_error(message)
!     returns the detailed message of the calling thread's last failure, whether the library or
!     this module found it (an array of the wrong type or size). (It tracks failures of calls
!     through module gpuwire: after one found here, the failure of a direct gpuwire_c call is
!     reported once a call through gpuwire fails again.)
!   - MPI communicators enter as their integer handle: `comm` from `use mpi`, `comm%MPI_VAL` from
!     `use mpi_f08`. Module gpuwire_f08 (include/gpuwire_f08.f90, compiled after this file)
!     adds forms of gpuwire_comm_create and gpuwire_comm_mpi that take type(MPI_Comm).
!   - Counts, offsets and sizes are integer(int64); the input counts and offsets of a call may
!     instead all be default integers.
!   - Outputs are intent(out): on failure an output handle is NULL (its default value) and
!     other outputs are undefined, except where a call's comment says otherwise.
!   - gpuwire_comm_free, gpuwire_buffer_free, gpuwire_darray_free, gpuwire_request_free and a
!     completed gpuwire_wait / gpuwire_test set the handle to NULL (GPUWIRE_COMM_NULL,
!     GPUWIRE_BUFFER_NULL, GPUWIRE_DARRAY_NULL, GPUWIRE_REQUEST_NULL).
!
! Fortran arrays as buffers
!   - gpuwire_buffer_wrap(array, buf) makes a buffer over the array's own memory (no copy) for
!     arrays of integer(int8), integer(int32), integer(int64), real(real32), real(real64),
!     complex(real32), complex(real64), of any rank from 1 to 15. The array must be simply
!     contiguous and have the TARGET or POINTER attribute, and it must stay allocated
!     while the buffer, a view of it or a request using it exists. Anything else, in particular
!     a non-contiguous section such as A(2,:) or an array without TARGET, is rejected at
!     compile time (the dummy argument is a contiguous pointer with intent(in)): a buffer can
!     never refer to a compiler temporary, so a nonblocking call never sends one. Declare
!     arrays used by nonblocking calls ASYNCHRONOUS as well, as for MPI.
!   - gpuwire_buffer_copy_from_host(buf, array) and gpuwire_buffer_copy_to_host(buf, array) are
!     blocking and take any array, contiguous or not: a non-contiguous section is copied in
!     and out by the compiler around the call, which is correct for a blocking copy. The array
!     must have the buffer's datatype and element count (GPUWIRE_ERROR_DTYPE_MISMATCH,
!     GPUWIRE_ERROR_COUNT_MISMATCH otherwise; the array is then left unchanged).
!   - Device memory (CUDA Fortran, OpenACC, cudaMalloc) enters through the type(c_ptr) forms of
!     gpuwire_buffer_wrap and of the copies.
!
! Distributed arrays (type(gpuwire_darray), the gpuwire_darray_* subroutines)
!   - gpuwire_darray_create(comm, global_len, local_len, dtype, space, partition, darray) and
!     gpuwire_darray_create_nd(comm, shape, local_rows, halo, dtype, space, partition, darray):
!     `shape` is the C shape, row-major (C order) with axis 0 split over the ranks, so a Fortran
!     array v(n2, n1) has the memory of the C shape [n1, n2] and each rank owns whole columns of
!     it (its last dimension). ndim is size(shape). local_len / local_rows is GPUWIRE_DECIDE or a
!     count; a default-integer local_len (GPUWIRE_DECIDE is one) goes with an int64 global_len too.
!   - Host data passes as Fortran arrays, as for the blocking buffer copies: any array (a
!     section is copied in and out around the call) of integer(int8/int32/int64),
!     real(real32/real64), complex(real32/real64), of the darray's datatype, with its global
!     length for gpuwire_darray_set_global, _allgather and _gather. The array is checked on the
!     ranks that read or write it; where the C function does not look at it (a SCATTER rank that
!     owns nothing in set_global, ranks other than 0 of a BROADCAST set_global, ranks other than
!     the root in gather) it may be of any size, e.g. empty. An array of another type or size
!     where it is used is GPUWIRE_ERROR_DTYPE_MISMATCH / GPUWIRE_ERROR_COUNT_MISMATCH, found
!     through the C call (made with a NULL array), so in checking mode the other ranks of a
!     collective fail too instead of waiting. The type(c_ptr) forms take any address.
!   - Scalars (fill values, alpha, the results of dot, sum, min and max) are Fortran scalars of
!     the darray's datatype (checked the same way), or a type(c_ptr) for the other datatypes;
!     gpuwire_darray_norm's result is real(real64) for every datatype.
!   - gpuwire_darray_local_lens(darray, lens) writes one entry per rank of the array's
!     communicator: `lens` must have at least that many (the array cannot tell; MPI does not
!     check the count arrays of MPI_Allgatherv either). gpuwire_darray_shape and _local_shape
!     check that their array has at least ndim entries.
!
! Every function of include/gpuwire.h must appear here, twice: in gpuwire_c with the same name,
! argument count and argument kinds, and as a generic in gpuwire. scripts/check-bindings.py
! checks both (and the constants and the config struct) in `make test`.

! ---------------------------------------------------------------------------------------------
module gpuwire_types
  use, intrinsic :: iso_c_binding, only: c_int, c_int32_t, c_int64_t, c_double
  implicit none
  private
  public :: gpuwire_handle_kind, gpuwire_comm, gpuwire_buffer, gpuwire_request, gpuwire_darray, &
    gpuwire_config
  public :: operator(==), operator(/=)

  ! Version of these interfaces (gpuwire_get_version gives the library's at run time).
  integer, parameter, public :: GPUWIRE_VERSION_MAJOR = 0
  integer, parameter, public :: GPUWIRE_VERSION_MINOR = 1
  integer, parameter, public :: GPUWIRE_VERSION_PATCH = 0
  character(len=*), parameter, public :: GPUWIRE_VERSION_STRING = "0.1.0"

  ! Status codes (gpuwire_status).
  integer(c_int), parameter, public :: GPUWIRE_SUCCESS = 0
  integer(c_int), parameter, public :: GPUWIRE_ERROR_NULL_ARGUMENT = 1
  integer(c_int), parameter, public :: GPUWIRE_ERROR_INVALID_ARGUMENT = 2
  integer(c_int), parameter, public :: GPUWIRE_ERROR_INVALID_HANDLE = 3
  integer(c_int), parameter, public :: GPUWIRE_ERROR_COUNT_MISMATCH = 4
  integer(c_int), parameter, public :: GPUWIRE_ERROR_DTYPE_MISMATCH = 5
  integer(c_int), parameter, public :: GPUWIRE_ERROR_OP_MISMATCH = 6
  integer(c_int), parameter, public :: GPUWIRE_ERROR_ROOT_MISMATCH = 7
  integer(c_int), parameter, public :: GPUWIRE_ERROR_UNSUPPORTED_DTYPE = 8
  integer(c_int), parameter, public :: GPUWIRE_ERROR_UNSUPPORTED_OP = 9
  integer(c_int), parameter, public :: GPUWIRE_ERROR_BACKEND_UNAVAILABLE = 10
  integer(c_int), parameter, public :: GPUWIRE_ERROR_MPI = 11
  integer(c_int), parameter, public :: GPUWIRE_ERROR_CUDA = 12
  integer(c_int), parameter, public :: GPUWIRE_ERROR_NCCL = 13
  integer(c_int), parameter, public :: GPUWIRE_ERROR_TIMEOUT = 14
  integer(c_int), parameter, public :: GPUWIRE_ERROR_NOT_INITIALIZED = 15
  integer(c_int), parameter, public :: GPUWIRE_ERROR_ALREADY_FINALIZED = 16
  integer(c_int), parameter, public :: GPUWIRE_ERROR_INTERNAL = 17
  integer(c_int), parameter, public :: GPUWIRE_ERROR_REMOTE_ARGUMENT = 18
  integer(c_int), parameter, public :: GPUWIRE_ERROR_COMM_BROKEN = 19

  ! Datatypes (gpuwire_dtype). Fortran types: integer(int8) INT8, integer(int32) INT32,
  ! integer(int64) INT64, real(real32) FLOAT32, real(real64) FLOAT64, complex(real32)
  ! COMPLEX64, complex(real64) COMPLEX128.
  integer(c_int32_t), parameter, public :: GPUWIRE_INT8 = 0
  integer(c_int32_t), parameter, public :: GPUWIRE_UINT8 = 1
  integer(c_int32_t), parameter, public :: GPUWIRE_INT32 = 2
  integer(c_int32_t), parameter, public :: GPUWIRE_UINT32 = 3
  integer(c_int32_t), parameter, public :: GPUWIRE_INT64 = 4
  integer(c_int32_t), parameter, public :: GPUWIRE_UINT64 = 5
  integer(c_int32_t), parameter, public :: GPUWIRE_FLOAT16 = 6
  integer(c_int32_t), parameter, public :: GPUWIRE_FLOAT32 = 7
  integer(c_int32_t), parameter, public :: GPUWIRE_FLOAT64 = 8
  integer(c_int32_t), parameter, public :: GPUWIRE_BFLOAT16 = 9
  integer(c_int32_t), parameter, public :: GPUWIRE_COMPLEX64 = 10
  integer(c_int32_t), parameter, public :: GPUWIRE_COMPLEX128 = 11

  ! Reduction operations (gpuwire_op).
  integer(c_int32_t), parameter, public :: GPUWIRE_SUM = 0
  integer(c_int32_t), parameter, public :: GPUWIRE_PROD = 1
  integer(c_int32_t), parameter, public :: GPUWIRE_MAX = 2
  integer(c_int32_t), parameter, public :: GPUWIRE_MIN = 3
  integer(c_int32_t), parameter, public :: GPUWIRE_AVG = 4
  integer(c_int32_t), parameter, public :: GPUWIRE_BAND = 5
  integer(c_int32_t), parameter, public :: GPUWIRE_BOR = 6
  integer(c_int32_t), parameter, public :: GPUWIRE_BXOR = 7

  ! Memory spaces (gpuwire_space).
  integer(c_int32_t), parameter, public :: GPUWIRE_SPACE_AUTO = 0
  integer(c_int32_t), parameter, public :: GPUWIRE_SPACE_HOST = 1
  integer(c_int32_t), parameter, public :: GPUWIRE_SPACE_DEVICE = 2
  integer(c_int32_t), parameter, public :: GPUWIRE_SPACE_PINNED = 3
  integer(c_int32_t), parameter, public :: GPUWIRE_SPACE_MANAGED = 4

  ! Backends for device buffers (gpuwire_backend).
  integer(c_int32_t), parameter, public :: GPUWIRE_BACKEND_AUTO = 0
  integer(c_int32_t), parameter, public :: GPUWIRE_BACKEND_HOST = 1
  integer(c_int32_t), parameter, public :: GPUWIRE_BACKEND_MPI_STAGED = 2
  integer(c_int32_t), parameter, public :: GPUWIRE_BACKEND_MPI_CUDA_AWARE = 3
  integer(c_int32_t), parameter, public :: GPUWIRE_BACKEND_NCCL = 4
  integer(c_int32_t), parameter, public :: GPUWIRE_BACKEND_IPC = 5

  ! Staging of the staged backend (gpuwire_staging).
  integer(c_int32_t), parameter, public :: GPUWIRE_STAGING_PINNED = 0
  integer(c_int32_t), parameter, public :: GPUWIRE_STAGING_PAGEABLE = 1

  ! MPI thread levels (gpuwire_thread_level).
  integer(c_int32_t), parameter, public :: GPUWIRE_THREAD_SINGLE = 0
  integer(c_int32_t), parameter, public :: GPUWIRE_THREAD_FUNNELED = 1
  integer(c_int32_t), parameter, public :: GPUWIRE_THREAD_SERIALIZED = 2
  integer(c_int32_t), parameter, public :: GPUWIRE_THREAD_MULTIPLE = 3

  ! A rank that sends and receives nothing (as MPI_PROC_NULL, which is accepted too; no MPI's
  ! constant); the split color "in no new communicator" (as MPI_UNDEFINED).
  integer(c_int32_t), parameter, public :: GPUWIRE_PROC_NULL = -1000
  integer(c_int32_t), parameter, public :: GPUWIRE_UNDEFINED = -1

  ! Distributed arrays: partitions (gpuwire_partition), norms (gpuwire_norm), and the local
  ! length "let gpuwire decide" (a default integer, for local_len and local_rows).
  integer(c_int32_t), parameter, public :: GPUWIRE_PARTITION_SCATTER = 0
  integer(c_int32_t), parameter, public :: GPUWIRE_PARTITION_BROADCAST = 1
  integer(c_int32_t), parameter, public :: GPUWIRE_NORM_INF = 0
  integer(c_int32_t), parameter, public :: GPUWIRE_NORM_1 = 1
  integer(c_int32_t), parameter, public :: GPUWIRE_NORM_2 = 2
  integer, parameter, public :: GPUWIRE_DECIDE = -1

  ! Handles: the C handles are uint64_t; every value gpuwire issues fits an integer(c_int64_t).
  integer, parameter :: gpuwire_handle_kind = c_int64_t

  ! A communicator (lifecycle: gpuwire_comm_create / _world / _split / _dup, operations,
  ! gpuwire_comm_free). Compare handles with == and /=.
  type :: gpuwire_comm
    integer(gpuwire_handle_kind) :: handle = 0
  end type gpuwire_comm

  ! A buffer (gpuwire_buffer_alloc / _wrap / _view, operations, gpuwire_buffer_free).
  type :: gpuwire_buffer
    integer(gpuwire_handle_kind) :: handle = 0
  end type gpuwire_buffer

  ! A nonblocking operation (gpuwire_isend / _irecv, then gpuwire_wait / _test / _waitall).
  type :: gpuwire_request
    integer(gpuwire_handle_kind) :: handle = 0
  end type gpuwire_request

  ! A distributed array (gpuwire_darray_create / _create_nd, operations, gpuwire_darray_free).
  type :: gpuwire_darray
    integer(gpuwire_handle_kind) :: handle = 0
  end type gpuwire_darray

  type(gpuwire_comm), parameter, public :: GPUWIRE_COMM_NULL = gpuwire_comm(0_gpuwire_handle_kind)
  type(gpuwire_buffer), parameter, public :: &
    GPUWIRE_BUFFER_NULL = gpuwire_buffer(0_gpuwire_handle_kind)
  type(gpuwire_request), parameter, public :: &
    GPUWIRE_REQUEST_NULL = gpuwire_request(0_gpuwire_handle_kind)
  type(gpuwire_darray), parameter, public :: &
    GPUWIRE_DARRAY_NULL = gpuwire_darray(0_gpuwire_handle_kind)

  ! Configuration of a communicator: the C struct gpuwire_config, field for field. Fill it
  ! with gpuwire_config_init (defaults, then the GPUWIRE_* environment variables), change
  ! fields, pass it as `cfg` to gpuwire_comm_create or gpuwire_comm_world.
  type, bind(C) :: gpuwire_config
    integer(c_int32_t) :: backend         ! a GPUWIRE_BACKEND_* value (GPUWIRE_BACKEND)
    integer(c_int32_t) :: device          ! CUDA device ordinal, -1 = node-local rank modulo
                                          ! the number of devices (GPUWIRE_DEVICE)
    integer(c_int32_t) :: check           ! 1 = checking mode for collectives (GPUWIRE_CHECK)
    integer(c_int32_t) :: staging         ! a GPUWIRE_STAGING_* value (GPUWIRE_STAGING)
    real(c_double) :: timeout_seconds     ! 0 = none, else 0.001 to 1e9 s (GPUWIRE_TIMEOUT)
    integer(c_int64_t) :: chunk_bytes     ! staging chunk, >= 4096 (GPUWIRE_CHUNK_BYTES)
  end type gpuwire_config

  interface operator(==)
    module procedure comm_eq, buffer_eq, request_eq, darray_eq
  end interface
  interface operator(/=)
    module procedure comm_ne, buffer_ne, request_ne, darray_ne
  end interface

contains

  elemental logical function comm_eq(a, b)
    type(gpuwire_comm), intent(in) :: a, b
    comm_eq = a%handle == b%handle
  end function comm_eq

  elemental logical function comm_ne(a, b)
    type(gpuwire_comm), intent(in) :: a, b
    comm_ne = a%handle /= b%handle
  end function comm_ne

  elemental logical function buffer_eq(a, b)
    type(gpuwire_buffer), intent(in) :: a, b
    buffer_eq = a%handle == b%handle
  end function buffer_eq

  elemental logical function buffer_ne(a, b)
    type(gpuwire_buffer), intent(in) :: a, b
    buffer_ne = a%handle /= b%handle
  end function buffer_ne

  elemental logical function request_eq(a, b)
    type(gpuwire_request), intent(in) :: a, b
    request_eq = a%handle == b%handle
  end function request_eq

  elemental logical function request_ne(a, b)
    type(gpuwire_request), intent(in) :: a, b
    request_ne = a%handle /= b%handle
  end function request_ne

  elemental logical function darray_eq(a, b)
    type(gpuwire_darray), intent(in) :: a, b
    darray_eq = a%handle == b%handle
  end function darray_eq

  elemental logical function darray_ne(a, b)
    type(gpuwire_darray), intent(in) :: a, b
    darray_ne = a%handle /= b%handle
  end function darray_ne

end module gpuwire_types

! ---------------------------------------------------------------------------------------------
! The C functions themselves: the names, arguments and results of include/gpuwire.h. Statuses are
! integer(c_int) results; handles are integer(gpuwire_handle_kind) values; optional arguments
! (cfg, recvcounts) are passed as NULL when absent.
module gpuwire_c
  use, intrinsic :: iso_c_binding, only: c_int, c_int32_t, c_int64_t, c_size_t, c_double, &
    c_ptr, c_char
  use gpuwire_types, only: gpuwire_handle_kind, gpuwire_config
  implicit none
  private
  public :: gpuwire_buffer_alloc, gpuwire_buffer_wrap, gpuwire_buffer_view, gpuwire_buffer_free, &
    gpuwire_buffer_copy_from_host, gpuwire_buffer_copy_to_host, gpuwire_buffer_pointer, &
    gpuwire_buffer_count, gpuwire_buffer_dtype, gpuwire_buffer_space, gpuwire_buffer_device, &
    gpuwire_buffer_owned, gpuwire_dtype_size, gpuwire_config_init, gpuwire_comm_create, &
    gpuwire_comm_world, gpuwire_comm_free, gpuwire_comm_split, gpuwire_comm_dup, &
    gpuwire_comm_rank, gpuwire_comm_size, gpuwire_comm_local_rank, gpuwire_comm_local_size, &
    gpuwire_comm_backend, gpuwire_comm_device, gpuwire_comm_mpi, gpuwire_comm_describe, &
    gpuwire_init, gpuwire_finalize, gpuwire_initialized, gpuwire_query_thread, gpuwire_owns_mpi, &
    gpuwire_send, gpuwire_recv, gpuwire_isend, gpuwire_irecv, gpuwire_wait, gpuwire_test, &
    gpuwire_request_free, gpuwire_waitall, gpuwire_sendrecv, gpuwire_barrier, gpuwire_bcast, &
    gpuwire_reduce, &
    gpuwire_allreduce, gpuwire_allgather, gpuwire_allgatherv, gpuwire_reduce_scatter, &
    gpuwire_alltoall, gpuwire_gather, gpuwire_scatter, gpuwire_status_string, &
    gpuwire_last_error, gpuwire_get_version
  public :: gpuwire_darray_create, gpuwire_darray_create_nd, gpuwire_darray_free, &
    gpuwire_darray_global_len, gpuwire_darray_local_len, gpuwire_darray_global_offset, &
    gpuwire_darray_ndim, gpuwire_darray_halo, gpuwire_darray_dtype, gpuwire_darray_space, &
    gpuwire_darray_partition, gpuwire_darray_data, gpuwire_darray_local_lens, &
    gpuwire_darray_shape, gpuwire_darray_local_shape, gpuwire_darray_local, &
    gpuwire_darray_local_with_halo, gpuwire_darray_fill, gpuwire_darray_set_global, &
    gpuwire_darray_allgather, gpuwire_darray_gather, gpuwire_darray_redistribute, &
    gpuwire_darray_bcast, gpuwire_darray_axpy, gpuwire_darray_scale, gpuwire_darray_dot, &
    gpuwire_darray_norm, gpuwire_darray_sum, gpuwire_darray_min, gpuwire_darray_max, &
    gpuwire_darray_halo_exchange

  interface

    function gpuwire_buffer_alloc(count, dtype, space, device, out) &
        bind(C, name="gpuwire_buffer_alloc") result(st)
      import :: c_int, c_int32_t, c_int64_t, gpuwire_handle_kind
      integer(c_int64_t), value :: count
      integer(c_int32_t), value :: dtype
      integer(c_int32_t), value :: space
      integer(c_int32_t), value :: device
      integer(gpuwire_handle_kind), intent(out) :: out
      integer(c_int) :: st
    end function gpuwire_buffer_alloc

    function gpuwire_buffer_wrap(ptr, count, dtype, space, out) &
        bind(C, name="gpuwire_buffer_wrap") result(st)
      import :: c_int, c_int32_t, c_int64_t, c_ptr, gpuwire_handle_kind
      type(c_ptr), value :: ptr
      integer(c_int64_t), value :: count
      integer(c_int32_t), value :: dtype
      integer(c_int32_t), value :: space
      integer(gpuwire_handle_kind), intent(out) :: out
      integer(c_int) :: st
    end function gpuwire_buffer_wrap

    function gpuwire_buffer_view(buf, offset, count, out) &
        bind(C, name="gpuwire_buffer_view") result(st)
      import :: c_int, c_int64_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: buf
      integer(c_int64_t), value :: offset
      integer(c_int64_t), value :: count
      integer(gpuwire_handle_kind), intent(out) :: out
      integer(c_int) :: st
    end function gpuwire_buffer_view

    function gpuwire_buffer_free(buf) bind(C, name="gpuwire_buffer_free") result(st)
      import :: c_int, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: buf
      integer(c_int) :: st
    end function gpuwire_buffer_free

    function gpuwire_buffer_copy_from_host(buf, src, stream) &
        bind(C, name="gpuwire_buffer_copy_from_host") result(st)
      import :: c_int, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: buf
      type(c_ptr), value :: src
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_buffer_copy_from_host

    function gpuwire_buffer_copy_to_host(buf, dst, stream) &
        bind(C, name="gpuwire_buffer_copy_to_host") result(st)
      import :: c_int, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: buf
      type(c_ptr), value :: dst
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_buffer_copy_to_host

    function gpuwire_buffer_pointer(buf, ptr) bind(C, name="gpuwire_buffer_pointer") result(st)
      import :: c_int, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: buf
      type(c_ptr), intent(out) :: ptr
      integer(c_int) :: st
    end function gpuwire_buffer_pointer

    function gpuwire_buffer_count(buf, count) bind(C, name="gpuwire_buffer_count") result(st)
      import :: c_int, c_int64_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: buf
      integer(c_int64_t), intent(out) :: count
      integer(c_int) :: st
    end function gpuwire_buffer_count

    function gpuwire_buffer_dtype(buf, dtype) bind(C, name="gpuwire_buffer_dtype") result(st)
      import :: c_int, c_int32_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: buf
      integer(c_int32_t), intent(out) :: dtype
      integer(c_int) :: st
    end function gpuwire_buffer_dtype

    function gpuwire_buffer_space(buf, space) bind(C, name="gpuwire_buffer_space") result(st)
      import :: c_int, c_int32_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: buf
      integer(c_int32_t), intent(out) :: space
      integer(c_int) :: st
    end function gpuwire_buffer_space

    function gpuwire_buffer_device(buf, device) bind(C, name="gpuwire_buffer_device") result(st)
      import :: c_int, c_int32_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: buf
      integer(c_int32_t), intent(out) :: device
      integer(c_int) :: st
    end function gpuwire_buffer_device

    function gpuwire_buffer_owned(buf, owned) bind(C, name="gpuwire_buffer_owned") result(st)
      import :: c_int, c_int32_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: buf
      integer(c_int32_t), intent(out) :: owned
      integer(c_int) :: st
    end function gpuwire_buffer_owned

    function gpuwire_dtype_size(dtype, bytes) bind(C, name="gpuwire_dtype_size") result(st)
      import :: c_int, c_int32_t, c_int64_t
      integer(c_int32_t), value :: dtype
      integer(c_int64_t), intent(out) :: bytes
      integer(c_int) :: st
    end function gpuwire_dtype_size

    function gpuwire_config_init(cfg) bind(C, name="gpuwire_config_init") result(st)
      import :: c_int, gpuwire_config
      type(gpuwire_config), intent(out) :: cfg
      integer(c_int) :: st
    end function gpuwire_config_init

    function gpuwire_comm_create(mpi_comm, cfg, out) bind(C, name="gpuwire_comm_create") result(st)
      import :: c_int, c_int32_t, gpuwire_config, gpuwire_handle_kind
      integer(c_int32_t), value :: mpi_comm
      type(gpuwire_config), intent(in), optional :: cfg
      integer(gpuwire_handle_kind), intent(out) :: out
      integer(c_int) :: st
    end function gpuwire_comm_create

    function gpuwire_comm_world(cfg, out) bind(C, name="gpuwire_comm_world") result(st)
      import :: c_int, gpuwire_config, gpuwire_handle_kind
      type(gpuwire_config), intent(in), optional :: cfg
      integer(gpuwire_handle_kind), intent(out) :: out
      integer(c_int) :: st
    end function gpuwire_comm_world

    function gpuwire_comm_free(comm) bind(C, name="gpuwire_comm_free") result(st)
      import :: c_int, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(c_int) :: st
    end function gpuwire_comm_free

    function gpuwire_comm_split(comm, color, key, out) bind(C, name="gpuwire_comm_split") result(st)
      import :: c_int, c_int32_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(c_int32_t), value :: color
      integer(c_int32_t), value :: key
      integer(gpuwire_handle_kind), intent(out) :: out
      integer(c_int) :: st
    end function gpuwire_comm_split

    function gpuwire_comm_dup(comm, out) bind(C, name="gpuwire_comm_dup") result(st)
      import :: c_int, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(gpuwire_handle_kind), intent(out) :: out
      integer(c_int) :: st
    end function gpuwire_comm_dup

    function gpuwire_comm_rank(comm, rank) bind(C, name="gpuwire_comm_rank") result(st)
      import :: c_int, c_int32_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(c_int32_t), intent(out) :: rank
      integer(c_int) :: st
    end function gpuwire_comm_rank

    function gpuwire_comm_size(comm, size) bind(C, name="gpuwire_comm_size") result(st)
      import :: c_int, c_int32_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(c_int32_t), intent(out) :: size
      integer(c_int) :: st
    end function gpuwire_comm_size

    function gpuwire_comm_local_rank(comm, local_rank) &
        bind(C, name="gpuwire_comm_local_rank") result(st)
      import :: c_int, c_int32_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(c_int32_t), intent(out) :: local_rank
      integer(c_int) :: st
    end function gpuwire_comm_local_rank

    function gpuwire_comm_local_size(comm, local_size) &
        bind(C, name="gpuwire_comm_local_size") result(st)
      import :: c_int, c_int32_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(c_int32_t), intent(out) :: local_size
      integer(c_int) :: st
    end function gpuwire_comm_local_size

    function gpuwire_comm_backend(comm, backend) bind(C, name="gpuwire_comm_backend") result(st)
      import :: c_int, c_int32_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(c_int32_t), intent(out) :: backend
      integer(c_int) :: st
    end function gpuwire_comm_backend

    function gpuwire_comm_device(comm, device) bind(C, name="gpuwire_comm_device") result(st)
      import :: c_int, c_int32_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(c_int32_t), intent(out) :: device
      integer(c_int) :: st
    end function gpuwire_comm_device

    function gpuwire_comm_mpi(comm, mpi_comm) bind(C, name="gpuwire_comm_mpi") result(st)
      import :: c_int, c_int32_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(c_int32_t), intent(out) :: mpi_comm
      integer(c_int) :: st
    end function gpuwire_comm_mpi

    function gpuwire_comm_describe(comm, buf, buflen) &
        bind(C, name="gpuwire_comm_describe") result(st)
      import :: c_char, c_int, c_size_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      character(kind=c_char), intent(out) :: buf(*)
      integer(c_size_t), value :: buflen
      integer(c_int) :: st
    end function gpuwire_comm_describe

    function gpuwire_init() bind(C, name="gpuwire_init") result(st)
      import :: c_int
      integer(c_int) :: st
    end function gpuwire_init

    function gpuwire_finalize() bind(C, name="gpuwire_finalize") result(st)
      import :: c_int
      integer(c_int) :: st
    end function gpuwire_finalize

    function gpuwire_initialized(flag) bind(C, name="gpuwire_initialized") result(st)
      import :: c_int, c_int32_t
      integer(c_int32_t), intent(out) :: flag
      integer(c_int) :: st
    end function gpuwire_initialized

    function gpuwire_query_thread(provided) bind(C, name="gpuwire_query_thread") result(st)
      import :: c_int, c_int32_t
      integer(c_int32_t), intent(out) :: provided
      integer(c_int) :: st
    end function gpuwire_query_thread

    function gpuwire_owns_mpi(flag) bind(C, name="gpuwire_owns_mpi") result(st)
      import :: c_int, c_int32_t
      integer(c_int32_t), intent(out) :: flag
      integer(c_int) :: st
    end function gpuwire_owns_mpi

    function gpuwire_send(comm, buf, dest, tag, stream) bind(C, name="gpuwire_send") result(st)
      import :: c_int, c_int32_t, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(gpuwire_handle_kind), value :: buf
      integer(c_int32_t), value :: dest
      integer(c_int32_t), value :: tag
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_send

    function gpuwire_recv(comm, buf, source, tag, stream) bind(C, name="gpuwire_recv") result(st)
      import :: c_int, c_int32_t, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(gpuwire_handle_kind), value :: buf
      integer(c_int32_t), value :: source
      integer(c_int32_t), value :: tag
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_recv

    function gpuwire_isend(comm, buf, dest, tag, stream, request) &
        bind(C, name="gpuwire_isend") result(st)
      import :: c_int, c_int32_t, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(gpuwire_handle_kind), value :: buf
      integer(c_int32_t), value :: dest
      integer(c_int32_t), value :: tag
      type(c_ptr), value :: stream
      integer(gpuwire_handle_kind), intent(out) :: request
      integer(c_int) :: st
    end function gpuwire_isend

    function gpuwire_irecv(comm, buf, source, tag, stream, request) &
        bind(C, name="gpuwire_irecv") result(st)
      import :: c_int, c_int32_t, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(gpuwire_handle_kind), value :: buf
      integer(c_int32_t), value :: source
      integer(c_int32_t), value :: tag
      type(c_ptr), value :: stream
      integer(gpuwire_handle_kind), intent(out) :: request
      integer(c_int) :: st
    end function gpuwire_irecv

    function gpuwire_wait(request) bind(C, name="gpuwire_wait") result(st)
      import :: c_int, gpuwire_handle_kind
      integer(gpuwire_handle_kind), intent(inout) :: request
      integer(c_int) :: st
    end function gpuwire_wait

    function gpuwire_request_free(request) bind(C, name="gpuwire_request_free") result(st)
      import :: c_int, gpuwire_handle_kind
      integer(gpuwire_handle_kind), intent(inout) :: request
      integer(c_int) :: st
    end function gpuwire_request_free

    function gpuwire_test(request, flag) bind(C, name="gpuwire_test") result(st)
      import :: c_int, c_int32_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), intent(inout) :: request
      integer(c_int32_t), intent(out) :: flag
      integer(c_int) :: st
    end function gpuwire_test

    function gpuwire_waitall(count, requests) bind(C, name="gpuwire_waitall") result(st)
      import :: c_int, c_int32_t, gpuwire_handle_kind
      integer(c_int32_t), value :: count
      integer(gpuwire_handle_kind), intent(inout) :: requests(*)
      integer(c_int) :: st
    end function gpuwire_waitall

    function gpuwire_sendrecv(comm, sendbuf, dest, sendtag, recvbuf, source, recvtag, stream) &
        bind(C, name="gpuwire_sendrecv") result(st)
      import :: c_int, c_int32_t, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(gpuwire_handle_kind), value :: sendbuf
      integer(c_int32_t), value :: dest
      integer(c_int32_t), value :: sendtag
      integer(gpuwire_handle_kind), value :: recvbuf
      integer(c_int32_t), value :: source
      integer(c_int32_t), value :: recvtag
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_sendrecv

    function gpuwire_barrier(comm, stream) bind(C, name="gpuwire_barrier") result(st)
      import :: c_int, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_barrier

    function gpuwire_bcast(comm, buf, root, stream) bind(C, name="gpuwire_bcast") result(st)
      import :: c_int, c_int32_t, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(gpuwire_handle_kind), value :: buf
      integer(c_int32_t), value :: root
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_bcast

    function gpuwire_reduce(comm, sendbuf, recvbuf, op, root, stream) &
        bind(C, name="gpuwire_reduce") result(st)
      import :: c_int, c_int32_t, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(gpuwire_handle_kind), value :: sendbuf
      integer(gpuwire_handle_kind), value :: recvbuf
      integer(c_int32_t), value :: op
      integer(c_int32_t), value :: root
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_reduce

    function gpuwire_allreduce(comm, sendbuf, recvbuf, op, stream) &
        bind(C, name="gpuwire_allreduce") result(st)
      import :: c_int, c_int32_t, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(gpuwire_handle_kind), value :: sendbuf
      integer(gpuwire_handle_kind), value :: recvbuf
      integer(c_int32_t), value :: op
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_allreduce

    function gpuwire_allgather(comm, sendbuf, recvbuf, stream) &
        bind(C, name="gpuwire_allgather") result(st)
      import :: c_int, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(gpuwire_handle_kind), value :: sendbuf
      integer(gpuwire_handle_kind), value :: recvbuf
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_allgather

    function gpuwire_allgatherv(comm, sendbuf, recvbuf, recvcounts, stream) &
        bind(C, name="gpuwire_allgatherv") result(st)
      import :: c_int, c_int64_t, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(gpuwire_handle_kind), value :: sendbuf
      integer(gpuwire_handle_kind), value :: recvbuf
      integer(c_int64_t), intent(in), optional :: recvcounts(*)
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_allgatherv

    function gpuwire_reduce_scatter(comm, sendbuf, recvbuf, op, stream) &
        bind(C, name="gpuwire_reduce_scatter") result(st)
      import :: c_int, c_int32_t, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(gpuwire_handle_kind), value :: sendbuf
      integer(gpuwire_handle_kind), value :: recvbuf
      integer(c_int32_t), value :: op
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_reduce_scatter

    function gpuwire_alltoall(comm, sendbuf, recvbuf, stream) &
        bind(C, name="gpuwire_alltoall") result(st)
      import :: c_int, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(gpuwire_handle_kind), value :: sendbuf
      integer(gpuwire_handle_kind), value :: recvbuf
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_alltoall

    function gpuwire_gather(comm, sendbuf, recvbuf, root, stream) &
        bind(C, name="gpuwire_gather") result(st)
      import :: c_int, c_int32_t, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(gpuwire_handle_kind), value :: sendbuf
      integer(gpuwire_handle_kind), value :: recvbuf
      integer(c_int32_t), value :: root
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_gather

    function gpuwire_scatter(comm, sendbuf, recvbuf, root, stream) &
        bind(C, name="gpuwire_scatter") result(st)
      import :: c_int, c_int32_t, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(gpuwire_handle_kind), value :: sendbuf
      integer(gpuwire_handle_kind), value :: recvbuf
      integer(c_int32_t), value :: root
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_scatter

    function gpuwire_status_string(status) bind(C, name="gpuwire_status_string") result(str)
      import :: c_int32_t, c_ptr
      integer(c_int32_t), value :: status
      type(c_ptr) :: str
    end function gpuwire_status_string

    function gpuwire_last_error(buf, buflen) bind(C, name="gpuwire_last_error") result(st)
      import :: c_char, c_int, c_size_t
      character(kind=c_char), intent(out) :: buf(*)
      integer(c_size_t), value :: buflen
      integer(c_int) :: st
    end function gpuwire_last_error

    function gpuwire_get_version(major, minor, patch) bind(C, name="gpuwire_get_version") result(st)
      import :: c_int, c_int32_t
      integer(c_int32_t), intent(out) :: major
      integer(c_int32_t), intent(out) :: minor
      integer(c_int32_t), intent(out) :: patch
      integer(c_int) :: st
    end function gpuwire_get_version

    ! ---- distributed arrays ----

    function gpuwire_darray_create(comm, global_len, local_len, dtype, space, partition, out) &
        bind(C, name="gpuwire_darray_create") result(st)
      import :: c_int, c_int32_t, c_int64_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(c_int64_t), value :: global_len
      integer(c_int64_t), value :: local_len
      integer(c_int32_t), value :: dtype
      integer(c_int32_t), value :: space
      integer(c_int32_t), value :: partition
      integer(gpuwire_handle_kind), intent(out) :: out
      integer(c_int) :: st
    end function gpuwire_darray_create

    function gpuwire_darray_create_nd(comm, ndim, shape, local_rows, halo, dtype, space, &
        partition, out) &
        bind(C, name="gpuwire_darray_create_nd") result(st)
      import :: c_int, c_int32_t, c_int64_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: comm
      integer(c_int32_t), value :: ndim
      integer(c_int64_t), intent(in) :: shape(*)
      integer(c_int64_t), value :: local_rows
      integer(c_int64_t), value :: halo
      integer(c_int32_t), value :: dtype
      integer(c_int32_t), value :: space
      integer(c_int32_t), value :: partition
      integer(gpuwire_handle_kind), intent(out) :: out
      integer(c_int) :: st
    end function gpuwire_darray_create_nd

    function gpuwire_darray_free(d) bind(C, name="gpuwire_darray_free") result(st)
      import :: c_int, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      integer(c_int) :: st
    end function gpuwire_darray_free

    function gpuwire_darray_global_len(d, len) bind(C, name="gpuwire_darray_global_len") result(st)
      import :: c_int, c_int64_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      integer(c_int64_t), intent(out) :: len
      integer(c_int) :: st
    end function gpuwire_darray_global_len

    function gpuwire_darray_local_len(d, len) bind(C, name="gpuwire_darray_local_len") result(st)
      import :: c_int, c_int64_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      integer(c_int64_t), intent(out) :: len
      integer(c_int) :: st
    end function gpuwire_darray_local_len

    function gpuwire_darray_global_offset(d, offset) &
        bind(C, name="gpuwire_darray_global_offset") result(st)
      import :: c_int, c_int64_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      integer(c_int64_t), intent(out) :: offset
      integer(c_int) :: st
    end function gpuwire_darray_global_offset

    function gpuwire_darray_ndim(d, ndim) bind(C, name="gpuwire_darray_ndim") result(st)
      import :: c_int, c_int32_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      integer(c_int32_t), intent(out) :: ndim
      integer(c_int) :: st
    end function gpuwire_darray_ndim

    function gpuwire_darray_halo(d, halo) bind(C, name="gpuwire_darray_halo") result(st)
      import :: c_int, c_int64_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      integer(c_int64_t), intent(out) :: halo
      integer(c_int) :: st
    end function gpuwire_darray_halo

    function gpuwire_darray_dtype(d, dtype) bind(C, name="gpuwire_darray_dtype") result(st)
      import :: c_int, c_int32_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      integer(c_int32_t), intent(out) :: dtype
      integer(c_int) :: st
    end function gpuwire_darray_dtype

    function gpuwire_darray_space(d, space) bind(C, name="gpuwire_darray_space") result(st)
      import :: c_int, c_int32_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      integer(c_int32_t), intent(out) :: space
      integer(c_int) :: st
    end function gpuwire_darray_space

    function gpuwire_darray_partition(d, partition) &
        bind(C, name="gpuwire_darray_partition") result(st)
      import :: c_int, c_int32_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      integer(c_int32_t), intent(out) :: partition
      integer(c_int) :: st
    end function gpuwire_darray_partition

    function gpuwire_darray_data(d, ptr) bind(C, name="gpuwire_darray_data") result(st)
      import :: c_int, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      type(c_ptr), intent(out) :: ptr
      integer(c_int) :: st
    end function gpuwire_darray_data

    function gpuwire_darray_local_lens(d, lens) bind(C, name="gpuwire_darray_local_lens") result(st)
      import :: c_int, c_int64_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      integer(c_int64_t), intent(out) :: lens(*)
      integer(c_int) :: st
    end function gpuwire_darray_local_lens

    function gpuwire_darray_shape(d, shape) bind(C, name="gpuwire_darray_shape") result(st)
      import :: c_int, c_int64_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      integer(c_int64_t), intent(out) :: shape(*)
      integer(c_int) :: st
    end function gpuwire_darray_shape

    function gpuwire_darray_local_shape(d, shape) &
        bind(C, name="gpuwire_darray_local_shape") result(st)
      import :: c_int, c_int64_t, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      integer(c_int64_t), intent(out) :: shape(*)
      integer(c_int) :: st
    end function gpuwire_darray_local_shape

    function gpuwire_darray_local(d, out) bind(C, name="gpuwire_darray_local") result(st)
      import :: c_int, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      integer(gpuwire_handle_kind), intent(out) :: out
      integer(c_int) :: st
    end function gpuwire_darray_local

    function gpuwire_darray_local_with_halo(d, out) &
        bind(C, name="gpuwire_darray_local_with_halo") result(st)
      import :: c_int, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      integer(gpuwire_handle_kind), intent(out) :: out
      integer(c_int) :: st
    end function gpuwire_darray_local_with_halo

    function gpuwire_darray_fill(d, value, stream) bind(C, name="gpuwire_darray_fill") result(st)
      import :: c_int, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      type(c_ptr), value :: value
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_darray_fill

    function gpuwire_darray_set_global(d, src, stream) &
        bind(C, name="gpuwire_darray_set_global") result(st)
      import :: c_int, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      type(c_ptr), value :: src
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_darray_set_global

    function gpuwire_darray_allgather(d, dst, stream) &
        bind(C, name="gpuwire_darray_allgather") result(st)
      import :: c_int, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      type(c_ptr), value :: dst
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_darray_allgather

    function gpuwire_darray_gather(d, dst, root, stream) &
        bind(C, name="gpuwire_darray_gather") result(st)
      import :: c_int, c_int32_t, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      type(c_ptr), value :: dst
      integer(c_int32_t), value :: root
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_darray_gather

    function gpuwire_darray_redistribute(src, dst, stream) &
        bind(C, name="gpuwire_darray_redistribute") result(st)
      import :: c_int, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: src
      integer(gpuwire_handle_kind), value :: dst
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_darray_redistribute

    function gpuwire_darray_bcast(d, root, stream) bind(C, name="gpuwire_darray_bcast") result(st)
      import :: c_int, c_int32_t, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      integer(c_int32_t), value :: root
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_darray_bcast

    function gpuwire_darray_axpy(alpha, x, y, stream) bind(C, name="gpuwire_darray_axpy") result(st)
      import :: c_int, c_ptr, gpuwire_handle_kind
      type(c_ptr), value :: alpha
      integer(gpuwire_handle_kind), value :: x
      integer(gpuwire_handle_kind), value :: y
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_darray_axpy

    function gpuwire_darray_scale(d, alpha, stream) bind(C, name="gpuwire_darray_scale") result(st)
      import :: c_int, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      type(c_ptr), value :: alpha
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_darray_scale

    function gpuwire_darray_dot(x, y, result, stream) bind(C, name="gpuwire_darray_dot") result(st)
      import :: c_int, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: x
      integer(gpuwire_handle_kind), value :: y
      type(c_ptr), value :: result
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_darray_dot

    function gpuwire_darray_norm(d, kind, result, stream) &
        bind(C, name="gpuwire_darray_norm") result(st)
      import :: c_double, c_int, c_int32_t, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      integer(c_int32_t), value :: kind
      real(c_double), intent(out) :: result
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_darray_norm

    function gpuwire_darray_sum(d, result, stream) bind(C, name="gpuwire_darray_sum") result(st)
      import :: c_int, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      type(c_ptr), value :: result
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_darray_sum

    function gpuwire_darray_min(d, result, stream) bind(C, name="gpuwire_darray_min") result(st)
      import :: c_int, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      type(c_ptr), value :: result
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_darray_min

    function gpuwire_darray_max(d, result, stream) bind(C, name="gpuwire_darray_max") result(st)
      import :: c_int, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      type(c_ptr), value :: result
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_darray_max

    function gpuwire_darray_halo_exchange(d, width, stream) &
        bind(C, name="gpuwire_darray_halo_exchange") result(st)
      import :: c_int, c_int64_t, c_ptr, gpuwire_handle_kind
      integer(gpuwire_handle_kind), value :: d
      integer(c_int64_t), value :: width
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function gpuwire_darray_halo_exchange
  end interface

end module gpuwire_c

! ---------------------------------------------------------------------------------------------
! What a Fortran program uses: the constants and handle types of gpuwire_types, and an
! mpi_f08-style generic subroutine for every C function (see the conventions at the top).
module gpuwire
  use, intrinsic :: iso_c_binding, only: c_int, c_int32_t, c_int64_t, c_size_t, c_char, &
    c_ptr, c_null_ptr, c_null_char, c_loc, c_f_pointer, c_associated
  use, intrinsic :: iso_fortran_env, only: int8, int32, int64, real32, real64, error_unit
  use gpuwire_types
  implicit none
  private :: c_int, c_int32_t, c_int64_t, c_size_t, c_char, c_ptr, c_null_ptr, c_null_char, &
    c_loc, c_f_pointer, c_associated
  private :: int8, int32, int64, real32, real64, error_unit

  ! -- lifecycle, status, version ---------------------------------------------------------------
  interface gpuwire_init
    module procedure gw_init
  end interface
  interface gpuwire_finalize
    module procedure gw_finalize
  end interface
  interface gpuwire_initialized
    module procedure gw_initialized
  end interface
  interface gpuwire_query_thread
    module procedure gw_query_thread
  end interface
  interface gpuwire_owns_mpi
    module procedure gw_owns_mpi
  end interface
  interface gpuwire_status_string
    module procedure gw_status_string
  end interface
  interface gpuwire_last_error
    module procedure gw_last_error
  end interface
  interface gpuwire_get_version
    module procedure gw_get_version
  end interface

  ! -- configuration and communicators ------------------------------------------------------------
  interface gpuwire_config_init
    module procedure gw_config_init
  end interface
  interface gpuwire_comm_create
    module procedure gw_comm_create
  end interface
  interface gpuwire_comm_world
    module procedure gw_comm_world
  end interface
  interface gpuwire_comm_free
    module procedure gw_comm_free
  end interface
  interface gpuwire_comm_split
    module procedure gw_comm_split
  end interface
  interface gpuwire_comm_dup
    module procedure gw_comm_dup
  end interface
  interface gpuwire_comm_rank
    module procedure gw_comm_rank
  end interface
  interface gpuwire_comm_size
    module procedure gw_comm_size
  end interface
  interface gpuwire_comm_local_rank
    module procedure gw_comm_local_rank
  end interface
  interface gpuwire_comm_local_size
    module procedure gw_comm_local_size
  end interface
  interface gpuwire_comm_backend
    module procedure gw_comm_backend
  end interface
  interface gpuwire_comm_device
    module procedure gw_comm_device
  end interface
  interface gpuwire_comm_mpi
    module procedure gw_comm_mpi
  end interface
  interface gpuwire_comm_describe
    module procedure gw_comm_describe
  end interface

  ! -- buffers ----------------------------------------------------------------------------------
  interface gpuwire_buffer_alloc
    module procedure gw_buffer_alloc, gw_buffer_alloc_i4
  end interface
  ! wrap(array, buf [, space] [, ierror]) for Fortran arrays;
  ! wrap(ptr, count, dtype, space, buf [, ierror]) for any address (device memory).
  interface gpuwire_buffer_wrap
    module procedure wrap_i8, wrap_i32, wrap_i64, wrap_r32, wrap_r64, wrap_c32, wrap_c64
    module procedure gw_buffer_wrap_ptr, gw_buffer_wrap_ptr_i4
  end interface
  interface gpuwire_buffer_view
    module procedure gw_buffer_view, gw_buffer_view_i4
  end interface
  interface gpuwire_buffer_free
    module procedure gw_buffer_free
  end interface
  ! copy_from_host(buf, array or c_ptr [, stream] [, ierror]); copy_to_host likewise.
  interface gpuwire_buffer_copy_from_host
    module procedure copy_from_i8, copy_from_i32, copy_from_i64, copy_from_r32, copy_from_r64, &
      copy_from_c32, copy_from_c64, gw_copy_from_ptr
  end interface
  interface gpuwire_buffer_copy_to_host
    module procedure copy_to_i8, copy_to_i32, copy_to_i64, copy_to_r32, copy_to_r64, &
      copy_to_c32, copy_to_c64, gw_copy_to_ptr
  end interface
  interface gpuwire_buffer_pointer
    module procedure gw_buffer_pointer
  end interface
  interface gpuwire_buffer_count
    module procedure gw_buffer_count
  end interface
  interface gpuwire_buffer_dtype
    module procedure gw_buffer_dtype
  end interface
  interface gpuwire_buffer_space
    module procedure gw_buffer_space
  end interface
  interface gpuwire_buffer_device
    module procedure gw_buffer_device
  end interface
  interface gpuwire_buffer_owned
    module procedure gw_buffer_owned
  end interface
  interface gpuwire_dtype_size
    module procedure gw_dtype_size
  end interface

  ! -- point-to-point and requests --------------------------------------------------------------
  interface gpuwire_send
    module procedure gw_send
  end interface
  interface gpuwire_recv
    module procedure gw_recv
  end interface
  interface gpuwire_isend
    module procedure gw_isend
  end interface
  interface gpuwire_irecv
    module procedure gw_irecv
  end interface
  interface gpuwire_wait
    module procedure gw_wait
  end interface
  interface gpuwire_test
    module procedure gw_test
  end interface
  interface gpuwire_request_free
    module procedure gw_request_free
  end interface
  interface gpuwire_waitall
    module procedure gw_waitall
  end interface
  interface gpuwire_sendrecv
    module procedure gw_sendrecv
  end interface

  ! -- collectives --------------------------------------------------------------------------------
  interface gpuwire_barrier
    module procedure gw_barrier
  end interface
  interface gpuwire_bcast
    module procedure gw_bcast
  end interface
  interface gpuwire_reduce
    module procedure gw_reduce
  end interface
  interface gpuwire_allreduce
    module procedure gw_allreduce
  end interface
  interface gpuwire_allgather
    module procedure gw_allgather
  end interface
  interface gpuwire_allgatherv
    module procedure gw_allgatherv
  end interface
  interface gpuwire_reduce_scatter
    module procedure gw_reduce_scatter
  end interface
  interface gpuwire_alltoall
    module procedure gw_alltoall
  end interface
  interface gpuwire_gather
    module procedure gw_gather
  end interface
  interface gpuwire_scatter
    module procedure gw_scatter
  end interface

  ! -- distributed arrays ---------------------------------------------------------------------
  ! create(comm, global_len, local_len, dtype, space, partition, darray [, ierror]): int64 or
  ! default-integer lengths (a default-integer local_len, e.g. GPUWIRE_DECIDE, with either).
  interface gpuwire_darray_create
    module procedure gw_darray_create, gw_darray_create_i4, gw_darray_create_i8_i4
  end interface
  ! create_nd(comm, shape, local_rows, halo, dtype, space, partition, darray [, ierror]): shape(:)
  ! in C order; int64 or default integers (an int64 shape with default-integer local_rows, halo).
  interface gpuwire_darray_create_nd
    module procedure gw_darray_create_nd, gw_darray_create_nd_i4, gw_darray_create_nd_i8_i4
  end interface
  interface gpuwire_darray_free
    module procedure gw_darray_free
  end interface
  interface gpuwire_darray_global_len
    module procedure gw_darray_global_len
  end interface
  interface gpuwire_darray_local_len
    module procedure gw_darray_local_len
  end interface
  interface gpuwire_darray_global_offset
    module procedure gw_darray_global_offset
  end interface
  interface gpuwire_darray_ndim
    module procedure gw_darray_ndim
  end interface
  interface gpuwire_darray_halo
    module procedure gw_darray_halo
  end interface
  interface gpuwire_darray_dtype
    module procedure gw_darray_dtype
  end interface
  interface gpuwire_darray_space
    module procedure gw_darray_space
  end interface
  interface gpuwire_darray_partition
    module procedure gw_darray_partition
  end interface
  interface gpuwire_darray_data
    module procedure gw_darray_data
  end interface
  interface gpuwire_darray_local_lens
    module procedure gw_darray_local_lens
  end interface
  interface gpuwire_darray_shape
    module procedure gw_darray_shape
  end interface
  interface gpuwire_darray_local_shape
    module procedure gw_darray_local_shape
  end interface
  interface gpuwire_darray_local
    module procedure gw_darray_local
  end interface
  interface gpuwire_darray_local_with_halo
    module procedure gw_darray_local_with_halo
  end interface
  ! fill(darray, value [, stream] [, ierror]): a scalar of the array's datatype, or a c_ptr to one.
  interface gpuwire_darray_fill
    module procedure darray_fill_i8, darray_fill_i32, darray_fill_i64, darray_fill_r32, &
      darray_fill_r64, darray_fill_c32, darray_fill_c64, gw_darray_fill_ptr
  end interface
  ! set_global(darray, src [, stream] [, ierror]); allgather(darray, dst ...); gather(darray, dst,
  ! root ...): Fortran arrays of the array's datatype and global length, or c_ptr addresses.
  interface gpuwire_darray_set_global
    module procedure darray_set_global_i8, darray_set_global_i32, darray_set_global_i64, &
      darray_set_global_r32, darray_set_global_r64, darray_set_global_c32, darray_set_global_c64, &
      gw_darray_set_global_ptr
  end interface
  interface gpuwire_darray_allgather
    module procedure darray_allgather_i8, darray_allgather_i32, darray_allgather_i64, &
      darray_allgather_r32, darray_allgather_r64, darray_allgather_c32, darray_allgather_c64, &
      gw_darray_allgather_ptr
  end interface
  interface gpuwire_darray_gather
    module procedure darray_gather_i8, darray_gather_i32, darray_gather_i64, darray_gather_r32, &
      darray_gather_r64, darray_gather_c32, darray_gather_c64, gw_darray_gather_ptr
  end interface
  interface gpuwire_darray_redistribute
    module procedure gw_darray_redistribute
  end interface
  interface gpuwire_darray_bcast
    module procedure gw_darray_bcast
  end interface
  ! axpy(alpha, x, y ...), scale(darray, alpha ...), dot(x, y, result ...): real and complex scalars
  ! (or c_ptr); sum: every Fortran type; min, max: integers and reals.
  interface gpuwire_darray_axpy
    module procedure darray_axpy_r32, darray_axpy_r64, darray_axpy_c32, darray_axpy_c64, &
      gw_darray_axpy_ptr
  end interface
  interface gpuwire_darray_scale
    module procedure darray_scale_r32, darray_scale_r64, darray_scale_c32, darray_scale_c64, &
      gw_darray_scale_ptr
  end interface
  interface gpuwire_darray_dot
    module procedure darray_dot_r32, darray_dot_r64, darray_dot_c32, darray_dot_c64, &
      gw_darray_dot_ptr
  end interface
  interface gpuwire_darray_norm
    module procedure gw_darray_norm
  end interface
  interface gpuwire_darray_sum
    module procedure darray_sum_i8, darray_sum_i32, darray_sum_i64, darray_sum_r32, &
      darray_sum_r64, darray_sum_c32, darray_sum_c64, gw_darray_sum_ptr
  end interface
  interface gpuwire_darray_min
    module procedure darray_min_i8, darray_min_i32, darray_min_i64, darray_min_r32, &
      darray_min_r64, gw_darray_min_ptr
  end interface
  interface gpuwire_darray_max
    module procedure darray_max_i8, darray_max_i32, darray_max_i64, darray_max_r32, &
      darray_max_r64, gw_darray_max_ptr
  end interface
  interface gpuwire_darray_halo_exchange
    module procedure gw_darray_halo_exchange, gw_darray_halo_exchange_i4
  end interface

  ! The specific procedures are reached through the generics above only.
  private :: gw_init, gw_finalize, gw_initialized, gw_query_thread, gw_owns_mpi, &
    gw_status_string, gw_last_error, gw_get_version, gw_config_init, gw_comm_create, &
    gw_comm_world, gw_comm_free, gw_comm_split, gw_comm_dup, gw_comm_rank, gw_comm_size, &
    gw_comm_local_rank, gw_comm_local_size, gw_comm_backend, gw_comm_device, gw_comm_mpi, &
    gw_comm_describe, gw_buffer_alloc, gw_buffer_alloc_i4, gw_buffer_wrap_ptr, &
    gw_buffer_wrap_ptr_i4, gw_buffer_view, gw_buffer_view_i4, gw_buffer_free, &
    gw_copy_from_ptr, gw_copy_to_ptr, gw_buffer_pointer, gw_buffer_count, gw_buffer_dtype, &
    gw_buffer_space, gw_buffer_device, gw_buffer_owned, gw_dtype_size, gw_send, gw_recv, &
    gw_isend, gw_irecv, gw_wait, gw_test, gw_request_free, gw_waitall, gw_sendrecv, gw_barrier, &
    gw_bcast, &
    gw_reduce, gw_allreduce, gw_allgather, gw_allgatherv, gw_reduce_scatter, gw_alltoall, &
    gw_gather, gw_scatter
  private :: wrap_i8, wrap_i32, wrap_i64, wrap_r32, wrap_r64, wrap_c32, wrap_c64, &
    copy_from_i8, copy_from_i32, copy_from_i64, copy_from_r32, copy_from_r64, copy_from_c32, &
    copy_from_c64, copy_to_i8, copy_to_i32, copy_to_i64, copy_to_r32, copy_to_r64, copy_to_c32, &
    copy_to_c64
  private :: gw_darray_create, gw_darray_create_i4, gw_darray_create_i8_i4, gw_darray_create_nd, &
    gw_darray_create_nd_i4, gw_darray_create_nd_i8_i4, gw_darray_free, gw_darray_global_len, &
    gw_darray_local_len, gw_darray_global_offset, gw_darray_ndim, gw_darray_halo, gw_darray_dtype, &
    gw_darray_space, gw_darray_partition, gw_darray_data, gw_darray_local_lens, gw_darray_shape, &
    gw_darray_local_shape, gw_darray_local, gw_darray_local_with_halo, gw_darray_fill_ptr, &
    gw_darray_set_global_ptr, gw_darray_allgather_ptr, gw_darray_gather_ptr, &
    gw_darray_redistribute, gw_darray_bcast, gw_darray_axpy_ptr, gw_darray_scale_ptr, &
    gw_darray_dot_ptr, gw_darray_norm, gw_darray_sum_ptr, gw_darray_min_ptr, gw_darray_max_ptr, &
    gw_darray_halo_exchange, gw_darray_halo_exchange_i4
  private :: darray_fill_i8, darray_fill_i32, darray_fill_i64, darray_fill_r32, darray_fill_r64, &
    darray_fill_c32, darray_fill_c64, darray_set_global_i8, darray_set_global_i32, &
    darray_set_global_i64, darray_set_global_r32, darray_set_global_r64, darray_set_global_c32, &
    darray_set_global_c64, darray_allgather_i8, darray_allgather_i32, darray_allgather_i64, &
    darray_allgather_r32, darray_allgather_r64, darray_allgather_c32, darray_allgather_c64, &
    darray_gather_i8, darray_gather_i32, darray_gather_i64, darray_gather_r32, darray_gather_r64, &
    darray_gather_c32, darray_gather_c64, darray_axpy_r32, darray_axpy_r64, darray_axpy_c32, &
    darray_axpy_c64, darray_scale_r32, darray_scale_r64, darray_scale_c32, darray_scale_c64, &
    darray_dot_r32, darray_dot_r64, darray_dot_c32, darray_dot_c64, darray_sum_i8, darray_sum_i32, &
    darray_sum_i64, darray_sum_r32, darray_sum_r64, darray_sum_c32, darray_sum_c64, darray_min_i8, &
    darray_min_i32, darray_min_i64, darray_min_r32, darray_min_r64, darray_max_i8, darray_max_i32, &
    darray_max_i64, darray_max_r32, darray_max_r64
  private :: finish, fail, die, stream_or_null, c_chars_to_string, dtype_name, itoa, &
    wrap_address, copy_host, darray_host, darray_scalar, darray_shape

  ! The message of the last error found here, in Fortran (an array of the wrong type or size),
  ! and whether it is newer than the C library's own last error. Per thread under OpenMP.
  character(len=1024), save, private :: f_message = ''
  logical, save, private :: f_message_newer = .false.
  !$omp threadprivate(f_message, f_message_newer)

contains

  ! ---- helpers ---------------------------------------------------------------------------------

  ! After a C call: hands the status to `ierror`, or stops the program on an error without it.
  subroutine finish(st, name, ierror)
    integer(c_int), intent(in) :: st
    character(len=*), intent(in) :: name
    integer, intent(out), optional :: ierror
    if (st /= GPUWIRE_SUCCESS) f_message_newer = .false.
    if (present(ierror)) then
      ierror = int(st)
    else if (st /= GPUWIRE_SUCCESS) then
      call die(st, name)
    end if
  end subroutine finish

  ! An error found in Fortran, before or instead of the C call.
  subroutine fail(st, name, what, ierror)
    integer(c_int), intent(in) :: st
    character(len=*), intent(in) :: name, what
    integer, intent(out), optional :: ierror
    f_message = name // ': ' // what
    f_message_newer = .true.
    if (present(ierror)) then
      ierror = int(st)
    else
      call die(st, name)
    end if
  end subroutine fail

  subroutine die(st, name)
    integer(c_int), intent(in) :: st
    character(len=*), intent(in) :: name
    character(len=1024) :: message
    call gw_last_error(message)
    write (error_unit, '(a)') 'gpuwire: ' // name // ' failed: ' // gw_status_string(int(st)) &
      // ' (status ' // itoa(int(st, int64)) // '): ' // trim(message)
    flush (error_unit)
    error stop 1
  end subroutine die

  function stream_or_null(stream) result(s)
    type(c_ptr), intent(in), optional :: stream
    type(c_ptr) :: s
    s = c_null_ptr
    if (present(stream)) s = stream
  end function stream_or_null

  ! The characters of a NUL-terminated C string in `chars`, as a Fortran string in `text`
  ! (truncated to len(text), blank-padded).
  subroutine c_chars_to_string(chars, text)
    character(kind=c_char), intent(in) :: chars(:)
    character(len=*), intent(out) :: text
    integer :: i
    text = ''
    do i = 1, min(size(chars), len(text))
      if (chars(i) == c_null_char) exit
      text(i:i) = chars(i)
    end do
  end subroutine c_chars_to_string

  function itoa(i) result(s)
    integer(int64), intent(in) :: i
    character(len=:), allocatable :: s
    character(len=24) :: buf
    write (buf, '(i0)') i
    s = trim(buf)
  end function itoa

  function dtype_name(dtype) result(s)
    integer(c_int32_t), intent(in) :: dtype
    character(len=:), allocatable :: s
    select case (dtype)
    case (GPUWIRE_INT8); s = 'GPUWIRE_INT8'
    case (GPUWIRE_UINT8); s = 'GPUWIRE_UINT8'
    case (GPUWIRE_INT32); s = 'GPUWIRE_INT32'
    case (GPUWIRE_UINT32); s = 'GPUWIRE_UINT32'
    case (GPUWIRE_INT64); s = 'GPUWIRE_INT64'
    case (GPUWIRE_UINT64); s = 'GPUWIRE_UINT64'
    case (GPUWIRE_FLOAT16); s = 'GPUWIRE_FLOAT16'
    case (GPUWIRE_FLOAT32); s = 'GPUWIRE_FLOAT32'
    case (GPUWIRE_FLOAT64); s = 'GPUWIRE_FLOAT64'
    case (GPUWIRE_BFLOAT16); s = 'GPUWIRE_BFLOAT16'
    case (GPUWIRE_COMPLEX64); s = 'GPUWIRE_COMPLEX64'
    case (GPUWIRE_COMPLEX128); s = 'GPUWIRE_COMPLEX128'
    case default; s = 'datatype ' // itoa(int(dtype, int64))
    end select
  end function dtype_name

  subroutine wrap_address(p, count, dtype, buf, space, ierror)
    use gpuwire_c, only: c => gpuwire_buffer_wrap
    type(c_ptr), intent(in) :: p
    integer(int64), intent(in) :: count
    integer(c_int32_t), intent(in) :: dtype
    type(gpuwire_buffer), intent(out) :: buf
    integer, intent(in), optional :: space
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: sp
    sp = GPUWIRE_SPACE_AUTO
    if (present(space)) sp = int(space, c_int32_t)
    call finish(c(p, count, dtype, sp, buf%handle), 'gpuwire_buffer_wrap', ierror)
  end subroutine wrap_address

  ! A blocking copy between a buffer and a Fortran array of n elements of dtype at p.
  subroutine copy_host(to_buffer, buf, p, n, dtype, stream, ierror)
    use gpuwire_c, only: c_from => gpuwire_buffer_copy_from_host, &
      c_to => gpuwire_buffer_copy_to_host, c_count => gpuwire_buffer_count, &
      c_dtype => gpuwire_buffer_dtype
    logical, intent(in) :: to_buffer
    type(gpuwire_buffer), intent(in) :: buf
    type(c_ptr), intent(in) :: p
    integer(int64), intent(in) :: n
    integer(c_int32_t), intent(in) :: dtype
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    character(len=:), allocatable :: name
    integer(c_int) :: st
    integer(c_int32_t) :: bdtype
    integer(c_int64_t) :: bcount
    if (to_buffer) then
      name = 'gpuwire_buffer_copy_from_host'
    else
      name = 'gpuwire_buffer_copy_to_host'
    end if
    st = c_dtype(buf%handle, bdtype)
    if (st == GPUWIRE_SUCCESS) st = c_count(buf%handle, bcount)
    if (st /= GPUWIRE_SUCCESS) then
      call finish(st, name, ierror)
      return
    end if
    if (bdtype /= dtype) then
      call fail(GPUWIRE_ERROR_DTYPE_MISMATCH, name, 'the array''s type is ' // dtype_name(dtype) &
        // ', the buffer holds ' // dtype_name(bdtype), ierror)
      return
    end if
    if (bcount /= n) then
      call fail(GPUWIRE_ERROR_COUNT_MISMATCH, name, 'the array has ' // itoa(n) &
        // ' elements, the buffer ' // itoa(bcount), ierror)
      return
    end if
    if (to_buffer) then
      st = c_from(buf%handle, p, stream_or_null(stream))
    else
      st = c_to(buf%handle, p, stream_or_null(stream))
    end if
    call finish(st, name, ierror)
  end subroutine copy_host

  ! ---- lifecycle, status, version ------------------------------------------------------------

  subroutine gw_init(ierror)
    use gpuwire_c, only: c => gpuwire_init
    integer, intent(out), optional :: ierror
    call finish(c(), 'gpuwire_init', ierror)
  end subroutine gw_init

  subroutine gw_finalize(ierror)
    use gpuwire_c, only: c => gpuwire_finalize
    integer, intent(out), optional :: ierror
    call finish(c(), 'gpuwire_finalize', ierror)
  end subroutine gw_finalize

  subroutine gw_initialized(flag, ierror)
    use gpuwire_c, only: c => gpuwire_initialized
    logical, intent(out) :: flag
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: v
    integer(c_int) :: st
    st = c(v)
    flag = st == GPUWIRE_SUCCESS .and. v /= 0
    call finish(st, 'gpuwire_initialized', ierror)
  end subroutine gw_initialized

  subroutine gw_query_thread(provided, ierror)
    use gpuwire_c, only: c => gpuwire_query_thread
    integer, intent(out) :: provided
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: v
    integer(c_int) :: st
    st = c(v)
    if (st == GPUWIRE_SUCCESS) provided = int(v)
    call finish(st, 'gpuwire_query_thread', ierror)
  end subroutine gw_query_thread

  subroutine gw_owns_mpi(flag, ierror)
    use gpuwire_c, only: c => gpuwire_owns_mpi
    logical, intent(out) :: flag
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: v
    integer(c_int) :: st
    st = c(v)
    flag = st == GPUWIRE_SUCCESS .and. v /= 0
    call finish(st, 'gpuwire_owns_mpi', ierror)
  end subroutine gw_owns_mpi

  ! The static description of a status code (as the C function; never fails).
  function gw_status_string(status) result(s)
    use gpuwire_c, only: c => gpuwire_status_string
    integer, intent(in) :: status
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer :: n
    type(c_ptr) :: p
    p = c(int(status, c_int32_t))
    if (.not. c_associated(p)) then
      s = ''
      return
    end if
    call c_f_pointer(p, chars, [4096])
    n = 0
    do while (n < size(chars))
      if (chars(n + 1) == c_null_char) exit
      n = n + 1
    end do
    allocate (character(len=n) :: s)
    call c_chars_to_string(chars(1:n), s)
  end function gw_status_string

  ! The detailed message of this thread's last failure (blank-padded, truncated to len(message)).
  subroutine gw_last_error(message, ierror)
    use gpuwire_c, only: c => gpuwire_last_error
    character(len=*), intent(out) :: message
    integer, intent(out), optional :: ierror
    character(kind=c_char) :: chars(len(message) + 1)
    integer(c_int) :: st
    if (f_message_newer) then
      message = f_message
      if (present(ierror)) ierror = GPUWIRE_SUCCESS
      return
    end if
    st = c(chars, size(chars, kind=c_size_t))
    if (st == GPUWIRE_SUCCESS) then
      call c_chars_to_string(chars, message)
    else
      message = ''
    end if
    if (present(ierror)) ierror = int(st)
  end subroutine gw_last_error

  subroutine gw_get_version(major, minor, patch, ierror)
    use gpuwire_c, only: c => gpuwire_get_version
    integer, intent(out) :: major, minor, patch
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: a, b, d
    integer(c_int) :: st
    st = c(a, b, d)
    if (st == GPUWIRE_SUCCESS) then
      major = int(a)
      minor = int(b)
      patch = int(d)
    end if
    call finish(st, 'gpuwire_get_version', ierror)
  end subroutine gw_get_version

  ! ---- configuration and communicators ---------------------------------------------------------

  subroutine gw_config_init(cfg, ierror)
    use gpuwire_c, only: c => gpuwire_config_init
    type(gpuwire_config), intent(out) :: cfg
    integer, intent(out), optional :: ierror
    call finish(c(cfg), 'gpuwire_config_init', ierror)
  end subroutine gw_config_init

  ! gpuwire_comm_create(mpi_comm, comm [, cfg] [, ierror]): `mpi_comm` is the integer handle of an
  ! MPI communicator (`comm` from use mpi, `comm%MPI_VAL` from use mpi_f08). Collective.
  subroutine gw_comm_create(mpi_comm, comm, cfg, ierror)
    use gpuwire_c, only: c => gpuwire_comm_create
    integer, intent(in) :: mpi_comm
    type(gpuwire_comm), intent(out) :: comm
    type(gpuwire_config), intent(in), optional :: cfg
    integer, intent(out), optional :: ierror
    call finish(c(int(mpi_comm, c_int32_t), cfg, comm%handle), 'gpuwire_comm_create', ierror)
  end subroutine gw_comm_create

  subroutine gw_comm_world(comm, cfg, ierror)
    use gpuwire_c, only: c => gpuwire_comm_world
    type(gpuwire_comm), intent(out) :: comm
    type(gpuwire_config), intent(in), optional :: cfg
    integer, intent(out), optional :: ierror
    call finish(c(cfg, comm%handle), 'gpuwire_comm_world', ierror)
  end subroutine gw_comm_world

  ! Frees the communicator and sets `comm` to GPUWIRE_COMM_NULL (left unchanged on failure).
  subroutine gw_comm_free(comm, ierror)
    use gpuwire_c, only: c => gpuwire_comm_free
    type(gpuwire_comm), intent(inout) :: comm
    integer, intent(out), optional :: ierror
    integer(c_int) :: st
    st = c(comm%handle)
    if (st == GPUWIRE_SUCCESS) comm = GPUWIRE_COMM_NULL
    call finish(st, 'gpuwire_comm_free', ierror)
  end subroutine gw_comm_free

  subroutine gw_comm_split(comm, color, key, newcomm, ierror)
    use gpuwire_c, only: c => gpuwire_comm_split
    type(gpuwire_comm), intent(in) :: comm
    integer, intent(in) :: color, key
    type(gpuwire_comm), intent(out) :: newcomm
    integer, intent(out), optional :: ierror
    call finish(c(comm%handle, int(color, c_int32_t), int(key, c_int32_t), newcomm%handle), &
      'gpuwire_comm_split', ierror)
  end subroutine gw_comm_split

  subroutine gw_comm_dup(comm, newcomm, ierror)
    use gpuwire_c, only: c => gpuwire_comm_dup
    type(gpuwire_comm), intent(in) :: comm
    type(gpuwire_comm), intent(out) :: newcomm
    integer, intent(out), optional :: ierror
    call finish(c(comm%handle, newcomm%handle), 'gpuwire_comm_dup', ierror)
  end subroutine gw_comm_dup

  subroutine gw_comm_rank(comm, rank, ierror)
    use gpuwire_c, only: c => gpuwire_comm_rank
    type(gpuwire_comm), intent(in) :: comm
    integer, intent(out) :: rank
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: v
    integer(c_int) :: st
    st = c(comm%handle, v)
    if (st == GPUWIRE_SUCCESS) rank = int(v)
    call finish(st, 'gpuwire_comm_rank', ierror)
  end subroutine gw_comm_rank

  subroutine gw_comm_size(comm, size, ierror)
    use gpuwire_c, only: c => gpuwire_comm_size
    type(gpuwire_comm), intent(in) :: comm
    integer, intent(out) :: size
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: v
    integer(c_int) :: st
    st = c(comm%handle, v)
    if (st == GPUWIRE_SUCCESS) size = int(v)
    call finish(st, 'gpuwire_comm_size', ierror)
  end subroutine gw_comm_size

  subroutine gw_comm_local_rank(comm, local_rank, ierror)
    use gpuwire_c, only: c => gpuwire_comm_local_rank
    type(gpuwire_comm), intent(in) :: comm
    integer, intent(out) :: local_rank
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: v
    integer(c_int) :: st
    st = c(comm%handle, v)
    if (st == GPUWIRE_SUCCESS) local_rank = int(v)
    call finish(st, 'gpuwire_comm_local_rank', ierror)
  end subroutine gw_comm_local_rank

  subroutine gw_comm_local_size(comm, local_size, ierror)
    use gpuwire_c, only: c => gpuwire_comm_local_size
    type(gpuwire_comm), intent(in) :: comm
    integer, intent(out) :: local_size
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: v
    integer(c_int) :: st
    st = c(comm%handle, v)
    if (st == GPUWIRE_SUCCESS) local_size = int(v)
    call finish(st, 'gpuwire_comm_local_size', ierror)
  end subroutine gw_comm_local_size

  subroutine gw_comm_backend(comm, backend, ierror)
    use gpuwire_c, only: c => gpuwire_comm_backend
    type(gpuwire_comm), intent(in) :: comm
    integer, intent(out) :: backend
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: v
    integer(c_int) :: st
    st = c(comm%handle, v)
    if (st == GPUWIRE_SUCCESS) backend = int(v)
    call finish(st, 'gpuwire_comm_backend', ierror)
  end subroutine gw_comm_backend

  subroutine gw_comm_device(comm, device, ierror)
    use gpuwire_c, only: c => gpuwire_comm_device
    type(gpuwire_comm), intent(in) :: comm
    integer, intent(out) :: device
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: v
    integer(c_int) :: st
    st = c(comm%handle, v)
    if (st == GPUWIRE_SUCCESS) device = int(v)
    call finish(st, 'gpuwire_comm_device', ierror)
  end subroutine gw_comm_device

  ! The integer MPI handle of gpuwire's own duplicate (owned by gpuwire: do not free it).
  subroutine gw_comm_mpi(comm, mpi_comm, ierror)
    use gpuwire_c, only: c => gpuwire_comm_mpi
    type(gpuwire_comm), intent(in) :: comm
    integer, intent(out) :: mpi_comm
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: v
    integer(c_int) :: st
    st = c(comm%handle, v)
    if (st == GPUWIRE_SUCCESS) mpi_comm = int(v)
    call finish(st, 'gpuwire_comm_mpi', ierror)
  end subroutine gw_comm_mpi

  ! One line describing the communicator (truncated to len(description); 1023 hold it).
  subroutine gw_comm_describe(comm, description, ierror)
    use gpuwire_c, only: c => gpuwire_comm_describe
    type(gpuwire_comm), intent(in) :: comm
    character(len=*), intent(out) :: description
    integer, intent(out), optional :: ierror
    character(kind=c_char) :: chars(len(description) + 1)
    integer(c_int) :: st
    st = c(comm%handle, chars, size(chars, kind=c_size_t))
    if (st == GPUWIRE_SUCCESS) call c_chars_to_string(chars, description)
    call finish(st, 'gpuwire_comm_describe', ierror)
  end subroutine gw_comm_describe

  ! ---- buffers -----------------------------------------------------------------------------------

  subroutine gw_buffer_alloc(count, dtype, space, device, buf, ierror)
    use gpuwire_c, only: c => gpuwire_buffer_alloc
    integer(int64), intent(in) :: count
    integer, intent(in) :: dtype, space, device
    type(gpuwire_buffer), intent(out) :: buf
    integer, intent(out), optional :: ierror
    call finish(c(count, int(dtype, c_int32_t), int(space, c_int32_t), int(device, c_int32_t), &
      buf%handle), 'gpuwire_buffer_alloc', ierror)
  end subroutine gw_buffer_alloc

  subroutine gw_buffer_alloc_i4(count, dtype, space, device, buf, ierror)
    integer, intent(in) :: count, dtype, space, device
    type(gpuwire_buffer), intent(out) :: buf
    integer, intent(out), optional :: ierror
    call gw_buffer_alloc(int(count, int64), dtype, space, device, buf, ierror)
  end subroutine gw_buffer_alloc_i4

  ! wrap(ptr, count, dtype, space, buf): `count` elements of `dtype` at any address, e.g. device
  ! memory from CUDA Fortran (c_loc of a device array) or cudaMalloc.
  subroutine gw_buffer_wrap_ptr(ptr, count, dtype, space, buf, ierror)
    type(c_ptr), intent(in) :: ptr
    integer(int64), intent(in) :: count
    integer, intent(in) :: dtype, space
    type(gpuwire_buffer), intent(out) :: buf
    integer, intent(out), optional :: ierror
    call wrap_address(ptr, count, int(dtype, c_int32_t), buf, space, ierror)
  end subroutine gw_buffer_wrap_ptr

  subroutine gw_buffer_wrap_ptr_i4(ptr, count, dtype, space, buf, ierror)
    type(c_ptr), intent(in) :: ptr
    integer, intent(in) :: count, dtype, space
    type(gpuwire_buffer), intent(out) :: buf
    integer, intent(out), optional :: ierror
    call wrap_address(ptr, int(count, int64), int(dtype, c_int32_t), buf, space, ierror)
  end subroutine gw_buffer_wrap_ptr_i4

  ! Elements [offset, offset + count) of `buf` (offset 0 = the first element).
  subroutine gw_buffer_view(buf, offset, count, view, ierror)
    use gpuwire_c, only: c => gpuwire_buffer_view
    type(gpuwire_buffer), intent(in) :: buf
    integer(int64), intent(in) :: offset, count
    type(gpuwire_buffer), intent(out) :: view
    integer, intent(out), optional :: ierror
    call finish(c(buf%handle, offset, count, view%handle), 'gpuwire_buffer_view', ierror)
  end subroutine gw_buffer_view

  subroutine gw_buffer_view_i4(buf, offset, count, view, ierror)
    type(gpuwire_buffer), intent(in) :: buf
    integer, intent(in) :: offset, count
    type(gpuwire_buffer), intent(out) :: view
    integer, intent(out), optional :: ierror
    call gw_buffer_view(buf, int(offset, int64), int(count, int64), view, ierror)
  end subroutine gw_buffer_view_i4

  ! Frees the buffer handle and sets `buf` to GPUWIRE_BUFFER_NULL (left unchanged on failure).
  subroutine gw_buffer_free(buf, ierror)
    use gpuwire_c, only: c => gpuwire_buffer_free
    type(gpuwire_buffer), intent(inout) :: buf
    integer, intent(out), optional :: ierror
    integer(c_int) :: st
    st = c(buf%handle)
    if (st == GPUWIRE_SUCCESS) buf = GPUWIRE_BUFFER_NULL
    call finish(st, 'gpuwire_buffer_free', ierror)
  end subroutine gw_buffer_free

  ! copy_from_host(buf, src): the buffer's count x element size bytes from address `src`.
  subroutine gw_copy_from_ptr(buf, src, stream, ierror)
    use gpuwire_c, only: c => gpuwire_buffer_copy_from_host
    type(gpuwire_buffer), intent(in) :: buf
    type(c_ptr), intent(in) :: src
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(buf%handle, src, stream_or_null(stream)), 'gpuwire_buffer_copy_from_host', &
      ierror)
  end subroutine gw_copy_from_ptr

  subroutine gw_copy_to_ptr(buf, dst, stream, ierror)
    use gpuwire_c, only: c => gpuwire_buffer_copy_to_host
    type(gpuwire_buffer), intent(in) :: buf
    type(c_ptr), intent(in) :: dst
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(buf%handle, dst, stream_or_null(stream)), 'gpuwire_buffer_copy_to_host', &
      ierror)
  end subroutine gw_copy_to_ptr

  ! The address of the first element: c_f_pointer(ptr, x, [n]) gives a Fortran view of host memory.
  subroutine gw_buffer_pointer(buf, ptr, ierror)
    use gpuwire_c, only: c => gpuwire_buffer_pointer
    type(gpuwire_buffer), intent(in) :: buf
    type(c_ptr), intent(out) :: ptr
    integer, intent(out), optional :: ierror
    type(c_ptr) :: v
    integer(c_int) :: st
    st = c(buf%handle, v)
    if (st == GPUWIRE_SUCCESS) ptr = v
    call finish(st, 'gpuwire_buffer_pointer', ierror)
  end subroutine gw_buffer_pointer

  subroutine gw_buffer_count(buf, count, ierror)
    use gpuwire_c, only: c => gpuwire_buffer_count
    type(gpuwire_buffer), intent(in) :: buf
    integer(int64), intent(out) :: count
    integer, intent(out), optional :: ierror
    integer(c_int64_t) :: v
    integer(c_int) :: st
    st = c(buf%handle, v)
    if (st == GPUWIRE_SUCCESS) count = v
    call finish(st, 'gpuwire_buffer_count', ierror)
  end subroutine gw_buffer_count

  subroutine gw_buffer_dtype(buf, dtype, ierror)
    use gpuwire_c, only: c => gpuwire_buffer_dtype
    type(gpuwire_buffer), intent(in) :: buf
    integer, intent(out) :: dtype
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: v
    integer(c_int) :: st
    st = c(buf%handle, v)
    if (st == GPUWIRE_SUCCESS) dtype = int(v)
    call finish(st, 'gpuwire_buffer_dtype', ierror)
  end subroutine gw_buffer_dtype

  subroutine gw_buffer_space(buf, space, ierror)
    use gpuwire_c, only: c => gpuwire_buffer_space
    type(gpuwire_buffer), intent(in) :: buf
    integer, intent(out) :: space
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: v
    integer(c_int) :: st
    st = c(buf%handle, v)
    if (st == GPUWIRE_SUCCESS) space = int(v)
    call finish(st, 'gpuwire_buffer_space', ierror)
  end subroutine gw_buffer_space

  subroutine gw_buffer_device(buf, device, ierror)
    use gpuwire_c, only: c => gpuwire_buffer_device
    type(gpuwire_buffer), intent(in) :: buf
    integer, intent(out) :: device
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: v
    integer(c_int) :: st
    st = c(buf%handle, v)
    if (st == GPUWIRE_SUCCESS) device = int(v)
    call finish(st, 'gpuwire_buffer_device', ierror)
  end subroutine gw_buffer_device

  subroutine gw_buffer_owned(buf, owned, ierror)
    use gpuwire_c, only: c => gpuwire_buffer_owned
    type(gpuwire_buffer), intent(in) :: buf
    logical, intent(out) :: owned
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: v
    integer(c_int) :: st
    st = c(buf%handle, v)
    owned = st == GPUWIRE_SUCCESS .and. v /= 0
    call finish(st, 'gpuwire_buffer_owned', ierror)
  end subroutine gw_buffer_owned

  subroutine gw_dtype_size(dtype, bytes, ierror)
    use gpuwire_c, only: c => gpuwire_dtype_size
    integer, intent(in) :: dtype
    integer(int64), intent(out) :: bytes
    integer, intent(out), optional :: ierror
    integer(c_int64_t) :: v
    integer(c_int) :: st
    st = c(int(dtype, c_int32_t), v)
    if (st == GPUWIRE_SUCCESS) bytes = v
    call finish(st, 'gpuwire_dtype_size', ierror)
  end subroutine gw_dtype_size

  ! ---- point-to-point and requests ---------------------------------------------------------------

  subroutine gw_send(comm, buf, dest, tag, stream, ierror)
    use gpuwire_c, only: c => gpuwire_send
    type(gpuwire_comm), intent(in) :: comm
    type(gpuwire_buffer), intent(in) :: buf
    integer, intent(in) :: dest, tag
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(comm%handle, buf%handle, int(dest, c_int32_t), int(tag, c_int32_t), &
      stream_or_null(stream)), 'gpuwire_send', ierror)
  end subroutine gw_send

  subroutine gw_recv(comm, buf, source, tag, stream, ierror)
    use gpuwire_c, only: c => gpuwire_recv
    type(gpuwire_comm), intent(in) :: comm
    type(gpuwire_buffer), intent(in) :: buf
    integer, intent(in) :: source, tag
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(comm%handle, buf%handle, int(source, c_int32_t), int(tag, c_int32_t), &
      stream_or_null(stream)), 'gpuwire_recv', ierror)
  end subroutine gw_recv

  subroutine gw_isend(comm, buf, dest, tag, request, stream, ierror)
    use gpuwire_c, only: c => gpuwire_isend
    type(gpuwire_comm), intent(in) :: comm
    type(gpuwire_buffer), intent(in) :: buf
    integer, intent(in) :: dest, tag
    type(gpuwire_request), intent(out) :: request
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(comm%handle, buf%handle, int(dest, c_int32_t), int(tag, c_int32_t), &
      stream_or_null(stream), request%handle), 'gpuwire_isend', ierror)
  end subroutine gw_isend

  subroutine gw_irecv(comm, buf, source, tag, request, stream, ierror)
    use gpuwire_c, only: c => gpuwire_irecv
    type(gpuwire_comm), intent(in) :: comm
    type(gpuwire_buffer), intent(in) :: buf
    integer, intent(in) :: source, tag
    type(gpuwire_request), intent(out) :: request
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(comm%handle, buf%handle, int(source, c_int32_t), int(tag, c_int32_t), &
      stream_or_null(stream), request%handle), 'gpuwire_irecv', ierror)
  end subroutine gw_irecv

  subroutine gw_wait(request, ierror)
    use gpuwire_c, only: c => gpuwire_wait
    type(gpuwire_request), intent(inout) :: request
    integer, intent(out), optional :: ierror
    call finish(c(request%handle), 'gpuwire_wait', ierror)
  end subroutine gw_wait

  subroutine gw_test(request, flag, ierror)
    use gpuwire_c, only: c => gpuwire_test
    type(gpuwire_request), intent(inout) :: request
    logical, intent(out) :: flag
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: v
    integer(c_int) :: st
    st = c(request%handle, v)
    flag = st == GPUWIRE_SUCCESS .and. v /= 0
    call finish(st, 'gpuwire_test', ierror)
  end subroutine gw_test

  ! Frees a request without blocking longer than its communicator's timeout (abandoning one still
  ! pending then, which breaks the communicator: see gpuwire.h); it is GPUWIRE_REQUEST_NULL after.
  subroutine gw_request_free(request, ierror)
    use gpuwire_c, only: c => gpuwire_request_free
    type(gpuwire_request), intent(inout) :: request
    integer, intent(out), optional :: ierror
    call finish(c(request%handle), 'gpuwire_request_free', ierror)
  end subroutine gw_request_free

  ! Waits for every request of the array (any shape of section); each becomes
  ! GPUWIRE_REQUEST_NULL, a failed one too; the first failure is returned.
  subroutine gw_waitall(requests, ierror)
    use gpuwire_c, only: c => gpuwire_waitall
    type(gpuwire_request), intent(inout) :: requests(:)
    integer, intent(out), optional :: ierror
    integer(gpuwire_handle_kind) :: handles(size(requests))
    integer(c_int) :: st
    handles = requests%handle
    st = c(int(size(requests), c_int32_t), handles)
    requests%handle = handles
    call finish(st, 'gpuwire_waitall', ierror)
  end subroutine gw_waitall

  subroutine gw_sendrecv(comm, sendbuf, dest, sendtag, recvbuf, source, recvtag, stream, ierror)
    use gpuwire_c, only: c => gpuwire_sendrecv
    type(gpuwire_comm), intent(in) :: comm
    type(gpuwire_buffer), intent(in) :: sendbuf, recvbuf
    integer, intent(in) :: dest, sendtag, source, recvtag
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(comm%handle, sendbuf%handle, int(dest, c_int32_t), int(sendtag, c_int32_t), &
      recvbuf%handle, int(source, c_int32_t), int(recvtag, c_int32_t), stream_or_null(stream)), &
      'gpuwire_sendrecv', ierror)
  end subroutine gw_sendrecv

  ! ---- collectives ---------------------------------------------------------------------------------

  subroutine gw_barrier(comm, stream, ierror)
    use gpuwire_c, only: c => gpuwire_barrier
    type(gpuwire_comm), intent(in) :: comm
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(comm%handle, stream_or_null(stream)), 'gpuwire_barrier', ierror)
  end subroutine gw_barrier

  subroutine gw_bcast(comm, buf, root, stream, ierror)
    use gpuwire_c, only: c => gpuwire_bcast
    type(gpuwire_comm), intent(in) :: comm
    type(gpuwire_buffer), intent(in) :: buf
    integer, intent(in) :: root
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(comm%handle, buf%handle, int(root, c_int32_t), stream_or_null(stream)), &
      'gpuwire_bcast', ierror)
  end subroutine gw_bcast

  subroutine gw_reduce(comm, sendbuf, recvbuf, op, root, stream, ierror)
    use gpuwire_c, only: c => gpuwire_reduce
    type(gpuwire_comm), intent(in) :: comm
    type(gpuwire_buffer), intent(in) :: sendbuf, recvbuf
    integer, intent(in) :: op, root
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(comm%handle, sendbuf%handle, recvbuf%handle, int(op, c_int32_t), &
      int(root, c_int32_t), stream_or_null(stream)), 'gpuwire_reduce', ierror)
  end subroutine gw_reduce

  subroutine gw_allreduce(comm, sendbuf, recvbuf, op, stream, ierror)
    use gpuwire_c, only: c => gpuwire_allreduce
    type(gpuwire_comm), intent(in) :: comm
    type(gpuwire_buffer), intent(in) :: sendbuf, recvbuf
    integer, intent(in) :: op
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(comm%handle, sendbuf%handle, recvbuf%handle, int(op, c_int32_t), &
      stream_or_null(stream)), 'gpuwire_allreduce', ierror)
  end subroutine gw_allreduce

  subroutine gw_allgather(comm, sendbuf, recvbuf, stream, ierror)
    use gpuwire_c, only: c => gpuwire_allgather
    type(gpuwire_comm), intent(in) :: comm
    type(gpuwire_buffer), intent(in) :: sendbuf, recvbuf
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(comm%handle, sendbuf%handle, recvbuf%handle, stream_or_null(stream)), &
      'gpuwire_allgather', ierror)
  end subroutine gw_allgather

  ! allgatherv(comm, sendbuf, recvbuf [, recvcounts] [, stream] [, ierror]): `recvcounts` has one
  ! entry per rank; without it gpuwire exchanges the counts. A `recvcounts` of another length is
  ! GPUWIRE_ERROR_INVALID_ARGUMENT, reported through the C call so that, in checking mode, the
  ! other ranks fail too (GPUWIRE_ERROR_REMOTE_ARGUMENT) instead of waiting.
  subroutine gw_allgatherv(comm, sendbuf, recvbuf, recvcounts, stream, ierror)
    use gpuwire_c, only: c => gpuwire_allgatherv, c_size => gpuwire_comm_size
    type(gpuwire_comm), intent(in) :: comm
    type(gpuwire_buffer), intent(in) :: sendbuf, recvbuf
    integer(int64), intent(in), optional :: recvcounts(:)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: nranks
    integer(c_int) :: st
    if (present(recvcounts)) then
      st = c_size(comm%handle, nranks)
      if (st == GPUWIRE_SUCCESS .and. size(recvcounts) /= nranks) then
        ! A NULL send buffer makes the C call fail on this rank as a bad argument would.
        st = c(comm%handle, GPUWIRE_BUFFER_NULL%handle, recvbuf%handle, &
          stream=stream_or_null(stream))
        call fail(GPUWIRE_ERROR_INVALID_ARGUMENT, 'gpuwire_allgatherv', 'recvcounts has ' &
          // itoa(int(size(recvcounts), int64)) // ' entries, the communicator ' &
          // itoa(int(nranks, int64)) // ' ranks', ierror)
        return
      end if
    end if
    call finish(c(comm%handle, sendbuf%handle, recvbuf%handle, recvcounts, &
      stream_or_null(stream)), 'gpuwire_allgatherv', ierror)
  end subroutine gw_allgatherv

  subroutine gw_reduce_scatter(comm, sendbuf, recvbuf, op, stream, ierror)
    use gpuwire_c, only: c => gpuwire_reduce_scatter
    type(gpuwire_comm), intent(in) :: comm
    type(gpuwire_buffer), intent(in) :: sendbuf, recvbuf
    integer, intent(in) :: op
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(comm%handle, sendbuf%handle, recvbuf%handle, int(op, c_int32_t), &
      stream_or_null(stream)), 'gpuwire_reduce_scatter', ierror)
  end subroutine gw_reduce_scatter

  subroutine gw_alltoall(comm, sendbuf, recvbuf, stream, ierror)
    use gpuwire_c, only: c => gpuwire_alltoall
    type(gpuwire_comm), intent(in) :: comm
    type(gpuwire_buffer), intent(in) :: sendbuf, recvbuf
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(comm%handle, sendbuf%handle, recvbuf%handle, stream_or_null(stream)), &
      'gpuwire_alltoall', ierror)
  end subroutine gw_alltoall

  subroutine gw_gather(comm, sendbuf, recvbuf, root, stream, ierror)
    use gpuwire_c, only: c => gpuwire_gather
    type(gpuwire_comm), intent(in) :: comm
    type(gpuwire_buffer), intent(in) :: sendbuf, recvbuf
    integer, intent(in) :: root
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(comm%handle, sendbuf%handle, recvbuf%handle, int(root, c_int32_t), &
      stream_or_null(stream)), 'gpuwire_gather', ierror)
  end subroutine gw_gather

  subroutine gw_scatter(comm, sendbuf, recvbuf, root, stream, ierror)
    use gpuwire_c, only: c => gpuwire_scatter
    type(gpuwire_comm), intent(in) :: comm
    type(gpuwire_buffer), intent(in) :: sendbuf, recvbuf
    integer, intent(in) :: root
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(comm%handle, sendbuf%handle, recvbuf%handle, int(root, c_int32_t), &
      stream_or_null(stream)), 'gpuwire_scatter', ierror)
  end subroutine gw_scatter

  ! ---- distributed arrays ----------------------------------------------------------------------

  subroutine gw_darray_create(comm, global_len, local_len, dtype, space, partition, darray, ierror)
    use gpuwire_c, only: c => gpuwire_darray_create
    type(gpuwire_comm), intent(in) :: comm
    integer(int64), intent(in) :: global_len, local_len
    integer, intent(in) :: dtype, space, partition
    type(gpuwire_darray), intent(out) :: darray
    integer, intent(out), optional :: ierror
    call finish(c(comm%handle, global_len, local_len, int(dtype, c_int32_t), &
      int(space, c_int32_t), int(partition, c_int32_t), darray%handle), 'gpuwire_darray_create', &
      ierror)
  end subroutine gw_darray_create

  subroutine gw_darray_create_i4(comm, global_len, local_len, dtype, space, partition, darray, &
      ierror)
    type(gpuwire_comm), intent(in) :: comm
    integer, intent(in) :: global_len, local_len
    integer, intent(in) :: dtype, space, partition
    type(gpuwire_darray), intent(out) :: darray
    integer, intent(out), optional :: ierror
    call gw_darray_create(comm, int(global_len, int64), int(local_len, int64), dtype, space, &
      partition, darray, ierror)
  end subroutine gw_darray_create_i4

  subroutine gw_darray_create_i8_i4(comm, global_len, local_len, dtype, space, partition, &
      darray, ierror)
    type(gpuwire_comm), intent(in) :: comm
    integer(int64), intent(in) :: global_len
    integer, intent(in) :: local_len
    integer, intent(in) :: dtype, space, partition
    type(gpuwire_darray), intent(out) :: darray
    integer, intent(out), optional :: ierror
    call gw_darray_create(comm, global_len, int(local_len, int64), dtype, space, partition, &
      darray, ierror)
  end subroutine gw_darray_create_i8_i4

  ! `shape` in C order (row-major, axis 0 split); ndim = size(shape).
  subroutine gw_darray_create_nd(comm, shape, local_rows, halo, dtype, space, partition, darray, &
      ierror)
    use gpuwire_c, only: c => gpuwire_darray_create_nd
    type(gpuwire_comm), intent(in) :: comm
    integer(int64), intent(in) :: shape(:)
    integer(int64), intent(in) :: local_rows, halo
    integer, intent(in) :: dtype, space, partition
    type(gpuwire_darray), intent(out) :: darray
    integer, intent(out), optional :: ierror
    integer(c_int64_t) :: dims(max(size(shape), 1))
    dims = 0
    dims(1:size(shape)) = shape
    call finish(c(comm%handle, int(size(shape), c_int32_t), dims, local_rows, halo, &
      int(dtype, c_int32_t), int(space, c_int32_t), int(partition, c_int32_t), darray%handle), &
      'gpuwire_darray_create_nd', ierror)
  end subroutine gw_darray_create_nd

  subroutine gw_darray_create_nd_i4(comm, shape, local_rows, halo, dtype, space, partition, &
      darray, ierror)
    type(gpuwire_comm), intent(in) :: comm
    integer, intent(in) :: shape(:)
    integer, intent(in) :: local_rows, halo
    integer, intent(in) :: dtype, space, partition
    type(gpuwire_darray), intent(out) :: darray
    integer, intent(out), optional :: ierror
    call gw_darray_create_nd(comm, int(shape, int64), int(local_rows, int64), int(halo, int64), &
      dtype, space, partition, darray, ierror)
  end subroutine gw_darray_create_nd_i4

  subroutine gw_darray_create_nd_i8_i4(comm, shape, local_rows, halo, dtype, space, partition, &
      darray, ierror)
    type(gpuwire_comm), intent(in) :: comm
    integer(int64), intent(in) :: shape(:)
    integer, intent(in) :: local_rows, halo
    integer, intent(in) :: dtype, space, partition
    type(gpuwire_darray), intent(out) :: darray
    integer, intent(out), optional :: ierror
    call gw_darray_create_nd(comm, shape, int(local_rows, int64), int(halo, int64), dtype, &
      space, partition, darray, ierror)
  end subroutine gw_darray_create_nd_i8_i4

  ! Frees the array handle and sets `darray` to GPUWIRE_DARRAY_NULL (left unchanged on failure).
  subroutine gw_darray_free(darray, ierror)
    use gpuwire_c, only: c => gpuwire_darray_free
    type(gpuwire_darray), intent(inout) :: darray
    integer, intent(out), optional :: ierror
    integer(c_int) :: st
    st = c(darray%handle)
    if (st == GPUWIRE_SUCCESS) darray = GPUWIRE_DARRAY_NULL
    call finish(st, 'gpuwire_darray_free', ierror)
  end subroutine gw_darray_free

  subroutine gw_darray_global_len(darray, len, ierror)
    use gpuwire_c, only: c => gpuwire_darray_global_len
    type(gpuwire_darray), intent(in) :: darray
    integer(int64), intent(out) :: len
    integer, intent(out), optional :: ierror
    integer(c_int64_t) :: v
    integer(c_int) :: st
    st = c(darray%handle, v)
    if (st == GPUWIRE_SUCCESS) len = v
    call finish(st, 'gpuwire_darray_global_len', ierror)
  end subroutine gw_darray_global_len

  subroutine gw_darray_local_len(darray, len, ierror)
    use gpuwire_c, only: c => gpuwire_darray_local_len
    type(gpuwire_darray), intent(in) :: darray
    integer(int64), intent(out) :: len
    integer, intent(out), optional :: ierror
    integer(c_int64_t) :: v
    integer(c_int) :: st
    st = c(darray%handle, v)
    if (st == GPUWIRE_SUCCESS) len = v
    call finish(st, 'gpuwire_darray_local_len', ierror)
  end subroutine gw_darray_local_len

  ! The global index (0-based, as in C) of this rank's first owned element.
  subroutine gw_darray_global_offset(darray, offset, ierror)
    use gpuwire_c, only: c => gpuwire_darray_global_offset
    type(gpuwire_darray), intent(in) :: darray
    integer(int64), intent(out) :: offset
    integer, intent(out), optional :: ierror
    integer(c_int64_t) :: v
    integer(c_int) :: st
    st = c(darray%handle, v)
    if (st == GPUWIRE_SUCCESS) offset = v
    call finish(st, 'gpuwire_darray_global_offset', ierror)
  end subroutine gw_darray_global_offset

  subroutine gw_darray_ndim(darray, ndim, ierror)
    use gpuwire_c, only: c => gpuwire_darray_ndim
    type(gpuwire_darray), intent(in) :: darray
    integer, intent(out) :: ndim
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: v
    integer(c_int) :: st
    st = c(darray%handle, v)
    if (st == GPUWIRE_SUCCESS) ndim = int(v)
    call finish(st, 'gpuwire_darray_ndim', ierror)
  end subroutine gw_darray_ndim

  subroutine gw_darray_halo(darray, halo, ierror)
    use gpuwire_c, only: c => gpuwire_darray_halo
    type(gpuwire_darray), intent(in) :: darray
    integer(int64), intent(out) :: halo
    integer, intent(out), optional :: ierror
    integer(c_int64_t) :: v
    integer(c_int) :: st
    st = c(darray%handle, v)
    if (st == GPUWIRE_SUCCESS) halo = v
    call finish(st, 'gpuwire_darray_halo', ierror)
  end subroutine gw_darray_halo

  subroutine gw_darray_dtype(darray, dtype, ierror)
    use gpuwire_c, only: c => gpuwire_darray_dtype
    type(gpuwire_darray), intent(in) :: darray
    integer, intent(out) :: dtype
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: v
    integer(c_int) :: st
    st = c(darray%handle, v)
    if (st == GPUWIRE_SUCCESS) dtype = int(v)
    call finish(st, 'gpuwire_darray_dtype', ierror)
  end subroutine gw_darray_dtype

  subroutine gw_darray_space(darray, space, ierror)
    use gpuwire_c, only: c => gpuwire_darray_space
    type(gpuwire_darray), intent(in) :: darray
    integer, intent(out) :: space
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: v
    integer(c_int) :: st
    st = c(darray%handle, v)
    if (st == GPUWIRE_SUCCESS) space = int(v)
    call finish(st, 'gpuwire_darray_space', ierror)
  end subroutine gw_darray_space

  subroutine gw_darray_partition(darray, partition, ierror)
    use gpuwire_c, only: c => gpuwire_darray_partition
    type(gpuwire_darray), intent(in) :: darray
    integer, intent(out) :: partition
    integer, intent(out), optional :: ierror
    integer(c_int32_t) :: v
    integer(c_int) :: st
    st = c(darray%handle, v)
    if (st == GPUWIRE_SUCCESS) partition = int(v)
    call finish(st, 'gpuwire_darray_partition', ierror)
  end subroutine gw_darray_partition

  ! The address of this rank's first owned element (a device address for DEVICE arrays; NULL
  ! when the rank holds nothing). Host memory: c_f_pointer(ptr, v, local_shape reversed) gives a
  ! Fortran view of the owned elements.
  subroutine gw_darray_data(darray, ptr, ierror)
    use gpuwire_c, only: c => gpuwire_darray_data
    type(gpuwire_darray), intent(in) :: darray
    type(c_ptr), intent(out) :: ptr
    integer, intent(out), optional :: ierror
    type(c_ptr) :: v
    integer(c_int) :: st
    st = c(darray%handle, v)
    if (st == GPUWIRE_SUCCESS) ptr = v
    call finish(st, 'gpuwire_darray_data', ierror)
  end subroutine gw_darray_data

  ! Every rank's number of owned elements, in rank order, into lens(1:nranks): `lens` needs at
  ! least one entry per rank of the array's communicator (not checked: see the top of the file).
  subroutine gw_darray_local_lens(darray, lens, ierror)
    use gpuwire_c, only: c => gpuwire_darray_local_lens
    type(gpuwire_darray), intent(in) :: darray
    integer(int64), contiguous, intent(inout) :: lens(:)
    integer, intent(out), optional :: ierror
    call finish(c(darray%handle, lens), 'gpuwire_darray_local_lens', ierror)
  end subroutine gw_darray_local_lens

  ! The global shape (C order) into shape(1:ndim); `shape` needs at least ndim entries.
  subroutine gw_darray_shape(darray, shape, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int64), intent(inout) :: shape(:)
    integer, intent(out), optional :: ierror
    call darray_shape(.false., darray, shape, ierror)
  end subroutine gw_darray_shape

  ! This rank's shape (the global shape with its own row count first) into shape(1:ndim).
  subroutine gw_darray_local_shape(darray, shape, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int64), intent(inout) :: shape(:)
    integer, intent(out), optional :: ierror
    call darray_shape(.true., darray, shape, ierror)
  end subroutine gw_darray_local_shape

  subroutine darray_shape(local, darray, shape, ierror)
    use gpuwire_c, only: c_ndim => gpuwire_darray_ndim, c_shape => gpuwire_darray_shape, &
      c_local => gpuwire_darray_local_shape
    logical, intent(in) :: local
    type(gpuwire_darray), intent(in) :: darray
    integer(int64), intent(inout) :: shape(:)
    integer, intent(out), optional :: ierror
    character(len=:), allocatable :: name
    integer(c_int32_t) :: ndim
    integer(c_int64_t), allocatable :: v(:)
    integer(c_int) :: st
    if (local) then
      name = 'gpuwire_darray_local_shape'
    else
      name = 'gpuwire_darray_shape'
    end if
    st = c_ndim(darray%handle, ndim)
    if (st /= GPUWIRE_SUCCESS) then
      call finish(st, name, ierror)
      return
    end if
    if (size(shape) < ndim) then
      call fail(GPUWIRE_ERROR_COUNT_MISMATCH, name, 'the array has ' &
        // itoa(int(size(shape), int64)) // ' entries, the distributed array ' &
        // itoa(int(ndim, int64)) // ' dimensions', ierror)
      return
    end if
    allocate (v(ndim))
    if (local) then
      st = c_local(darray%handle, v)
    else
      st = c_shape(darray%handle, v)
    end if
    if (st == GPUWIRE_SUCCESS) shape(1:ndim) = v
    call finish(st, name, ierror)
  end subroutine darray_shape

  ! A new buffer viewing this rank's owned elements (free it with gpuwire_buffer_free).
  subroutine gw_darray_local(darray, buf, ierror)
    use gpuwire_c, only: c => gpuwire_darray_local
    type(gpuwire_darray), intent(in) :: darray
    type(gpuwire_buffer), intent(out) :: buf
    integer, intent(out), optional :: ierror
    call finish(c(darray%handle, buf%handle), 'gpuwire_darray_local', ierror)
  end subroutine gw_darray_local

  ! A new buffer viewing the halo rows above, the owned rows and the halo rows below.
  subroutine gw_darray_local_with_halo(darray, buf, ierror)
    use gpuwire_c, only: c => gpuwire_darray_local_with_halo
    type(gpuwire_darray), intent(in) :: darray
    type(gpuwire_buffer), intent(out) :: buf
    integer, intent(out), optional :: ierror
    call finish(c(darray%handle, buf%handle), 'gpuwire_darray_local_with_halo', ierror)
  end subroutine gw_darray_local_with_halo

  ! fill(darray, value): `value` is the address of one element of the array's datatype.
  subroutine gw_darray_fill_ptr(darray, value, stream, ierror)
    use gpuwire_c, only: c => gpuwire_darray_fill
    type(gpuwire_darray), intent(in) :: darray
    type(c_ptr), intent(in) :: value
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(darray%handle, value, stream_or_null(stream)), 'gpuwire_darray_fill', ierror)
  end subroutine gw_darray_fill_ptr

  ! set_global(darray, src): `src` is the address of global_len elements in host memory.
  subroutine gw_darray_set_global_ptr(darray, src, stream, ierror)
    use gpuwire_c, only: c => gpuwire_darray_set_global
    type(gpuwire_darray), intent(in) :: darray
    type(c_ptr), intent(in) :: src
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(darray%handle, src, stream_or_null(stream)), 'gpuwire_darray_set_global', &
      ierror)
  end subroutine gw_darray_set_global_ptr

  subroutine gw_darray_allgather_ptr(darray, dst, stream, ierror)
    use gpuwire_c, only: c => gpuwire_darray_allgather
    type(gpuwire_darray), intent(in) :: darray
    type(c_ptr), intent(in) :: dst
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(darray%handle, dst, stream_or_null(stream)), 'gpuwire_darray_allgather', &
      ierror)
  end subroutine gw_darray_allgather_ptr

  subroutine gw_darray_gather_ptr(darray, dst, root, stream, ierror)
    use gpuwire_c, only: c => gpuwire_darray_gather
    type(gpuwire_darray), intent(in) :: darray
    type(c_ptr), intent(in) :: dst
    integer, intent(in) :: root
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(darray%handle, dst, int(root, c_int32_t), stream_or_null(stream)), &
      'gpuwire_darray_gather', ierror)
  end subroutine gw_darray_gather_ptr

  ! Copies the values of `src` into `dst` (same communicator, shape and datatype; any split).
  subroutine gw_darray_redistribute(src, dst, stream, ierror)
    use gpuwire_c, only: c => gpuwire_darray_redistribute
    type(gpuwire_darray), intent(in) :: src, dst
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(src%handle, dst%handle, stream_or_null(stream)), 'gpuwire_darray_redistribute', &
      ierror)
  end subroutine gw_darray_redistribute

  subroutine gw_darray_bcast(darray, root, stream, ierror)
    use gpuwire_c, only: c => gpuwire_darray_bcast
    type(gpuwire_darray), intent(in) :: darray
    integer, intent(in) :: root
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(darray%handle, int(root, c_int32_t), stream_or_null(stream)), &
      'gpuwire_darray_bcast', ierror)
  end subroutine gw_darray_bcast

  subroutine gw_darray_axpy_ptr(alpha, x, y, stream, ierror)
    use gpuwire_c, only: c => gpuwire_darray_axpy
    type(c_ptr), intent(in) :: alpha
    type(gpuwire_darray), intent(in) :: x, y
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(alpha, x%handle, y%handle, stream_or_null(stream)), 'gpuwire_darray_axpy', &
      ierror)
  end subroutine gw_darray_axpy_ptr

  subroutine gw_darray_scale_ptr(darray, alpha, stream, ierror)
    use gpuwire_c, only: c => gpuwire_darray_scale
    type(gpuwire_darray), intent(in) :: darray
    type(c_ptr), intent(in) :: alpha
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(darray%handle, alpha, stream_or_null(stream)), 'gpuwire_darray_scale', ierror)
  end subroutine gw_darray_scale_ptr

  subroutine gw_darray_dot_ptr(x, y, result, stream, ierror)
    use gpuwire_c, only: c => gpuwire_darray_dot
    type(gpuwire_darray), intent(in) :: x, y
    type(c_ptr), intent(in) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(x%handle, y%handle, result, stream_or_null(stream)), 'gpuwire_darray_dot', &
      ierror)
  end subroutine gw_darray_dot_ptr

  ! norm(darray, kind, result): GPUWIRE_NORM_1, _2 or _INF; a real(real64) for every datatype.
  subroutine gw_darray_norm(darray, kind, result, stream, ierror)
    use gpuwire_c, only: c => gpuwire_darray_norm
    type(gpuwire_darray), intent(in) :: darray
    integer, intent(in) :: kind
    real(real64), intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    real(real64) :: v
    integer(c_int) :: st
    st = c(darray%handle, int(kind, c_int32_t), v, stream_or_null(stream))
    if (st == GPUWIRE_SUCCESS) result = v
    call finish(st, 'gpuwire_darray_norm', ierror)
  end subroutine gw_darray_norm

  subroutine gw_darray_sum_ptr(darray, result, stream, ierror)
    use gpuwire_c, only: c => gpuwire_darray_sum
    type(gpuwire_darray), intent(in) :: darray
    type(c_ptr), intent(in) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(darray%handle, result, stream_or_null(stream)), 'gpuwire_darray_sum', ierror)
  end subroutine gw_darray_sum_ptr

  subroutine gw_darray_min_ptr(darray, result, stream, ierror)
    use gpuwire_c, only: c => gpuwire_darray_min
    type(gpuwire_darray), intent(in) :: darray
    type(c_ptr), intent(in) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(darray%handle, result, stream_or_null(stream)), 'gpuwire_darray_min', ierror)
  end subroutine gw_darray_min_ptr

  subroutine gw_darray_max_ptr(darray, result, stream, ierror)
    use gpuwire_c, only: c => gpuwire_darray_max
    type(gpuwire_darray), intent(in) :: darray
    type(c_ptr), intent(in) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(darray%handle, result, stream_or_null(stream)), 'gpuwire_darray_max', ierror)
  end subroutine gw_darray_max_ptr

  subroutine gw_darray_halo_exchange(darray, width, stream, ierror)
    use gpuwire_c, only: c => gpuwire_darray_halo_exchange
    type(gpuwire_darray), intent(in) :: darray
    integer(int64), intent(in) :: width
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call finish(c(darray%handle, width, stream_or_null(stream)), 'gpuwire_darray_halo_exchange', &
      ierror)
  end subroutine gw_darray_halo_exchange

  subroutine gw_darray_halo_exchange_i4(darray, width, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer, intent(in) :: width
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call gw_darray_halo_exchange(darray, int(width, int64), stream, ierror)
  end subroutine gw_darray_halo_exchange_i4

  ! The array forms of set_global (which = 1), allgather (2) and gather (3): `p` is the address
  ! of n elements of dtype. An array of another type or length goes to the C call as NULL, so the
  ! call fails (GPUWIRE_ERROR_NULL_ARGUMENT, agreed across ranks in checking mode) exactly where
  ! it would read or write the array; that error is then reported as the mismatch it is.
  subroutine darray_host(which, darray, p, n, dtype, root, stream, ierror)
    use gpuwire_c, only: c_set => gpuwire_darray_set_global, &
      c_allgather => gpuwire_darray_allgather, c_gather => gpuwire_darray_gather, &
      c_dtype => gpuwire_darray_dtype, c_len => gpuwire_darray_global_len
    integer, intent(in) :: which
    type(gpuwire_darray), intent(in) :: darray
    type(c_ptr), intent(in) :: p
    integer(int64), intent(in) :: n
    integer(c_int32_t), intent(in) :: dtype
    integer, intent(in) :: root
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    character(len=:), allocatable :: name
    integer(c_int32_t) :: ddtype
    integer(c_int64_t) :: len
    integer(c_int) :: st
    type(c_ptr) :: q
    select case (which)
    case (1); name = 'gpuwire_darray_set_global'
    case (2); name = 'gpuwire_darray_allgather'
    case default; name = 'gpuwire_darray_gather'
    end select
    st = c_dtype(darray%handle, ddtype)
    if (st == GPUWIRE_SUCCESS) st = c_len(darray%handle, len)
    if (st /= GPUWIRE_SUCCESS) then
      call finish(st, name, ierror)
      return
    end if
    q = p
    if (ddtype /= dtype .or. len /= n) q = c_null_ptr
    select case (which)
    case (1); st = c_set(darray%handle, q, stream_or_null(stream))
    case (2); st = c_allgather(darray%handle, q, stream_or_null(stream))
    case default; st = c_gather(darray%handle, q, int(root, c_int32_t), stream_or_null(stream))
    end select
    if (st == GPUWIRE_ERROR_NULL_ARGUMENT .and. ddtype /= dtype) then
      call fail(GPUWIRE_ERROR_DTYPE_MISMATCH, name, 'the array''s type is ' // dtype_name(dtype) &
        // ', the distributed array holds ' // dtype_name(ddtype), ierror)
    else if (st == GPUWIRE_ERROR_NULL_ARGUMENT .and. len /= n) then
      call fail(GPUWIRE_ERROR_COUNT_MISMATCH, name, 'the array has ' // itoa(n) &
        // ' elements, the distributed array ' // itoa(len), ierror)
    else
      call finish(st, name, ierror)
    end if
  end subroutine darray_host

  ! The scalar forms: fill (which = 1), scale (2), axpy (3: x = a, y = b), dot (4: x = a, y = b),
  ! sum (5), min (6), max (7); `p` is the address of one element of dtype. A scalar of another
  ! type goes to the C call as NULL (as in darray_host).
  subroutine darray_scalar(which, a, b, p, dtype, stream, ierror)
    use gpuwire_c, only: c_fill => gpuwire_darray_fill, c_scale => gpuwire_darray_scale, &
      c_axpy => gpuwire_darray_axpy, c_dot => gpuwire_darray_dot, c_sum => gpuwire_darray_sum, &
      c_min => gpuwire_darray_min, c_max => gpuwire_darray_max, c_dtype => gpuwire_darray_dtype
    integer, intent(in) :: which
    type(gpuwire_darray), intent(in) :: a, b
    type(c_ptr), intent(in) :: p
    integer(c_int32_t), intent(in) :: dtype
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    character(len=:), allocatable :: name, arg
    integer(c_int32_t) :: ddtype
    integer(c_int) :: st
    type(c_ptr) :: q, s
    select case (which)
    case (1); name = 'gpuwire_darray_fill'; arg = 'value'
    case (2); name = 'gpuwire_darray_scale'; arg = 'alpha'
    case (3); name = 'gpuwire_darray_axpy'; arg = 'alpha'
    case (4); name = 'gpuwire_darray_dot'; arg = 'result'
    case (5); name = 'gpuwire_darray_sum'; arg = 'result'
    case (6); name = 'gpuwire_darray_min'; arg = 'result'
    case default; name = 'gpuwire_darray_max'; arg = 'result'
    end select
    ! axpy's alpha is an element of y's datatype; every other scalar one of the first array's.
    if (which == 3) then
      st = c_dtype(b%handle, ddtype)
    else
      st = c_dtype(a%handle, ddtype)
    end if
    if (st /= GPUWIRE_SUCCESS) then
      call finish(st, name, ierror)
      return
    end if
    q = p
    if (ddtype /= dtype) q = c_null_ptr
    s = stream_or_null(stream)
    select case (which)
    case (1); st = c_fill(a%handle, q, s)
    case (2); st = c_scale(a%handle, q, s)
    case (3); st = c_axpy(q, a%handle, b%handle, s)
    case (4); st = c_dot(a%handle, b%handle, q, s)
    case (5); st = c_sum(a%handle, q, s)
    case (6); st = c_min(a%handle, q, s)
    case default; st = c_max(a%handle, q, s)
    end select
    if (st == GPUWIRE_ERROR_NULL_ARGUMENT .and. ddtype /= dtype) then
      call fail(GPUWIRE_ERROR_DTYPE_MISMATCH, name, '`' // arg // '` is ' // dtype_name(dtype) &
        // ', the distributed array holds ' // dtype_name(ddtype), ierror)
    else
      call finish(st, name, ierror)
    end if
  end subroutine darray_scalar

  ! ---- arrays: one specific per type; each generic's specifics differ only in the type ---------

  subroutine wrap_i8(array, buf, space, ierror)
    integer(int8), pointer, contiguous, intent(in) :: array(..)
    type(gpuwire_buffer), intent(out) :: buf
    integer, intent(in), optional :: space
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(array) > 0) p = c_loc(array)
    call wrap_address(p, size(array, kind=int64), GPUWIRE_INT8, buf, space, ierror)
  end subroutine wrap_i8

  subroutine wrap_i32(array, buf, space, ierror)
    integer(int32), pointer, contiguous, intent(in) :: array(..)
    type(gpuwire_buffer), intent(out) :: buf
    integer, intent(in), optional :: space
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(array) > 0) p = c_loc(array)
    call wrap_address(p, size(array, kind=int64), GPUWIRE_INT32, buf, space, ierror)
  end subroutine wrap_i32

  subroutine wrap_i64(array, buf, space, ierror)
    integer(int64), pointer, contiguous, intent(in) :: array(..)
    type(gpuwire_buffer), intent(out) :: buf
    integer, intent(in), optional :: space
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(array) > 0) p = c_loc(array)
    call wrap_address(p, size(array, kind=int64), GPUWIRE_INT64, buf, space, ierror)
  end subroutine wrap_i64

  subroutine wrap_r32(array, buf, space, ierror)
    real(real32), pointer, contiguous, intent(in) :: array(..)
    type(gpuwire_buffer), intent(out) :: buf
    integer, intent(in), optional :: space
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(array) > 0) p = c_loc(array)
    call wrap_address(p, size(array, kind=int64), GPUWIRE_FLOAT32, buf, space, ierror)
  end subroutine wrap_r32

  subroutine wrap_r64(array, buf, space, ierror)
    real(real64), pointer, contiguous, intent(in) :: array(..)
    type(gpuwire_buffer), intent(out) :: buf
    integer, intent(in), optional :: space
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(array) > 0) p = c_loc(array)
    call wrap_address(p, size(array, kind=int64), GPUWIRE_FLOAT64, buf, space, ierror)
  end subroutine wrap_r64

  subroutine wrap_c32(array, buf, space, ierror)
    complex(real32), pointer, contiguous, intent(in) :: array(..)
    type(gpuwire_buffer), intent(out) :: buf
    integer, intent(in), optional :: space
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(array) > 0) p = c_loc(array)
    call wrap_address(p, size(array, kind=int64), GPUWIRE_COMPLEX64, buf, space, ierror)
  end subroutine wrap_c32

  subroutine wrap_c64(array, buf, space, ierror)
    complex(real64), pointer, contiguous, intent(in) :: array(..)
    type(gpuwire_buffer), intent(out) :: buf
    integer, intent(in), optional :: space
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(array) > 0) p = c_loc(array)
    call wrap_address(p, size(array, kind=int64), GPUWIRE_COMPLEX128, buf, space, ierror)
  end subroutine wrap_c64

  subroutine copy_from_i8(buf, src, stream, ierror)
    type(gpuwire_buffer), intent(in) :: buf
    integer(int8), contiguous, target, intent(in) :: src(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(src) > 0) p = c_loc(src)
    call copy_host(.true., buf, p, size(src, kind=int64), GPUWIRE_INT8, stream, ierror)
  end subroutine copy_from_i8

  subroutine copy_from_i32(buf, src, stream, ierror)
    type(gpuwire_buffer), intent(in) :: buf
    integer(int32), contiguous, target, intent(in) :: src(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(src) > 0) p = c_loc(src)
    call copy_host(.true., buf, p, size(src, kind=int64), GPUWIRE_INT32, stream, ierror)
  end subroutine copy_from_i32

  subroutine copy_from_i64(buf, src, stream, ierror)
    type(gpuwire_buffer), intent(in) :: buf
    integer(int64), contiguous, target, intent(in) :: src(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(src) > 0) p = c_loc(src)
    call copy_host(.true., buf, p, size(src, kind=int64), GPUWIRE_INT64, stream, ierror)
  end subroutine copy_from_i64

  subroutine copy_from_r32(buf, src, stream, ierror)
    type(gpuwire_buffer), intent(in) :: buf
    real(real32), contiguous, target, intent(in) :: src(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(src) > 0) p = c_loc(src)
    call copy_host(.true., buf, p, size(src, kind=int64), GPUWIRE_FLOAT32, stream, ierror)
  end subroutine copy_from_r32

  subroutine copy_from_r64(buf, src, stream, ierror)
    type(gpuwire_buffer), intent(in) :: buf
    real(real64), contiguous, target, intent(in) :: src(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(src) > 0) p = c_loc(src)
    call copy_host(.true., buf, p, size(src, kind=int64), GPUWIRE_FLOAT64, stream, ierror)
  end subroutine copy_from_r64

  subroutine copy_from_c32(buf, src, stream, ierror)
    type(gpuwire_buffer), intent(in) :: buf
    complex(real32), contiguous, target, intent(in) :: src(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(src) > 0) p = c_loc(src)
    call copy_host(.true., buf, p, size(src, kind=int64), GPUWIRE_COMPLEX64, stream, ierror)
  end subroutine copy_from_c32

  subroutine copy_from_c64(buf, src, stream, ierror)
    type(gpuwire_buffer), intent(in) :: buf
    complex(real64), contiguous, target, intent(in) :: src(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(src) > 0) p = c_loc(src)
    call copy_host(.true., buf, p, size(src, kind=int64), GPUWIRE_COMPLEX128, stream, ierror)
  end subroutine copy_from_c64

  subroutine copy_to_i8(buf, dst, stream, ierror)
    type(gpuwire_buffer), intent(in) :: buf
    integer(int8), contiguous, target, intent(inout) :: dst(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(dst) > 0) p = c_loc(dst)
    call copy_host(.false., buf, p, size(dst, kind=int64), GPUWIRE_INT8, stream, ierror)
  end subroutine copy_to_i8

  subroutine copy_to_i32(buf, dst, stream, ierror)
    type(gpuwire_buffer), intent(in) :: buf
    integer(int32), contiguous, target, intent(inout) :: dst(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(dst) > 0) p = c_loc(dst)
    call copy_host(.false., buf, p, size(dst, kind=int64), GPUWIRE_INT32, stream, ierror)
  end subroutine copy_to_i32

  subroutine copy_to_i64(buf, dst, stream, ierror)
    type(gpuwire_buffer), intent(in) :: buf
    integer(int64), contiguous, target, intent(inout) :: dst(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(dst) > 0) p = c_loc(dst)
    call copy_host(.false., buf, p, size(dst, kind=int64), GPUWIRE_INT64, stream, ierror)
  end subroutine copy_to_i64

  subroutine copy_to_r32(buf, dst, stream, ierror)
    type(gpuwire_buffer), intent(in) :: buf
    real(real32), contiguous, target, intent(inout) :: dst(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(dst) > 0) p = c_loc(dst)
    call copy_host(.false., buf, p, size(dst, kind=int64), GPUWIRE_FLOAT32, stream, ierror)
  end subroutine copy_to_r32

  subroutine copy_to_r64(buf, dst, stream, ierror)
    type(gpuwire_buffer), intent(in) :: buf
    real(real64), contiguous, target, intent(inout) :: dst(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(dst) > 0) p = c_loc(dst)
    call copy_host(.false., buf, p, size(dst, kind=int64), GPUWIRE_FLOAT64, stream, ierror)
  end subroutine copy_to_r64

  subroutine copy_to_c32(buf, dst, stream, ierror)
    type(gpuwire_buffer), intent(in) :: buf
    complex(real32), contiguous, target, intent(inout) :: dst(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(dst) > 0) p = c_loc(dst)
    call copy_host(.false., buf, p, size(dst, kind=int64), GPUWIRE_COMPLEX64, stream, ierror)
  end subroutine copy_to_c32

  subroutine copy_to_c64(buf, dst, stream, ierror)
    type(gpuwire_buffer), intent(in) :: buf
    complex(real64), contiguous, target, intent(inout) :: dst(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(dst) > 0) p = c_loc(dst)
    call copy_host(.false., buf, p, size(dst, kind=int64), GPUWIRE_COMPLEX128, stream, ierror)
  end subroutine copy_to_c64

  ! ---- distributed arrays: host arrays and scalars, one specific per type ------------------------

  subroutine darray_set_global_i8(darray, src, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int8), contiguous, target, intent(in) :: src(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(src) > 0) p = c_loc(src)
    call darray_host(1, darray, p, size(src, kind=int64), GPUWIRE_INT8, 0, stream, ierror)
  end subroutine darray_set_global_i8

  subroutine darray_set_global_i32(darray, src, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int32), contiguous, target, intent(in) :: src(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(src) > 0) p = c_loc(src)
    call darray_host(1, darray, p, size(src, kind=int64), GPUWIRE_INT32, 0, stream, ierror)
  end subroutine darray_set_global_i32

  subroutine darray_set_global_i64(darray, src, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int64), contiguous, target, intent(in) :: src(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(src) > 0) p = c_loc(src)
    call darray_host(1, darray, p, size(src, kind=int64), GPUWIRE_INT64, 0, stream, ierror)
  end subroutine darray_set_global_i64

  subroutine darray_set_global_r32(darray, src, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    real(real32), contiguous, target, intent(in) :: src(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(src) > 0) p = c_loc(src)
    call darray_host(1, darray, p, size(src, kind=int64), GPUWIRE_FLOAT32, 0, stream, ierror)
  end subroutine darray_set_global_r32

  subroutine darray_set_global_r64(darray, src, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    real(real64), contiguous, target, intent(in) :: src(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(src) > 0) p = c_loc(src)
    call darray_host(1, darray, p, size(src, kind=int64), GPUWIRE_FLOAT64, 0, stream, ierror)
  end subroutine darray_set_global_r64

  subroutine darray_set_global_c32(darray, src, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    complex(real32), contiguous, target, intent(in) :: src(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(src) > 0) p = c_loc(src)
    call darray_host(1, darray, p, size(src, kind=int64), GPUWIRE_COMPLEX64, 0, stream, ierror)
  end subroutine darray_set_global_c32

  subroutine darray_set_global_c64(darray, src, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    complex(real64), contiguous, target, intent(in) :: src(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(src) > 0) p = c_loc(src)
    call darray_host(1, darray, p, size(src, kind=int64), GPUWIRE_COMPLEX128, 0, stream, ierror)
  end subroutine darray_set_global_c64

  subroutine darray_allgather_i8(darray, dst, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int8), contiguous, target, intent(inout) :: dst(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(dst) > 0) p = c_loc(dst)
    call darray_host(2, darray, p, size(dst, kind=int64), GPUWIRE_INT8, 0, stream, ierror)
  end subroutine darray_allgather_i8

  subroutine darray_allgather_i32(darray, dst, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int32), contiguous, target, intent(inout) :: dst(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(dst) > 0) p = c_loc(dst)
    call darray_host(2, darray, p, size(dst, kind=int64), GPUWIRE_INT32, 0, stream, ierror)
  end subroutine darray_allgather_i32

  subroutine darray_allgather_i64(darray, dst, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int64), contiguous, target, intent(inout) :: dst(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(dst) > 0) p = c_loc(dst)
    call darray_host(2, darray, p, size(dst, kind=int64), GPUWIRE_INT64, 0, stream, ierror)
  end subroutine darray_allgather_i64

  subroutine darray_allgather_r32(darray, dst, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    real(real32), contiguous, target, intent(inout) :: dst(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(dst) > 0) p = c_loc(dst)
    call darray_host(2, darray, p, size(dst, kind=int64), GPUWIRE_FLOAT32, 0, stream, ierror)
  end subroutine darray_allgather_r32

  subroutine darray_allgather_r64(darray, dst, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    real(real64), contiguous, target, intent(inout) :: dst(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(dst) > 0) p = c_loc(dst)
    call darray_host(2, darray, p, size(dst, kind=int64), GPUWIRE_FLOAT64, 0, stream, ierror)
  end subroutine darray_allgather_r64

  subroutine darray_allgather_c32(darray, dst, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    complex(real32), contiguous, target, intent(inout) :: dst(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(dst) > 0) p = c_loc(dst)
    call darray_host(2, darray, p, size(dst, kind=int64), GPUWIRE_COMPLEX64, 0, stream, ierror)
  end subroutine darray_allgather_c32

  subroutine darray_allgather_c64(darray, dst, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    complex(real64), contiguous, target, intent(inout) :: dst(..)
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(dst) > 0) p = c_loc(dst)
    call darray_host(2, darray, p, size(dst, kind=int64), GPUWIRE_COMPLEX128, 0, stream, ierror)
  end subroutine darray_allgather_c64

  subroutine darray_gather_i8(darray, dst, root, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int8), contiguous, target, intent(inout) :: dst(..)
    integer, intent(in) :: root
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(dst) > 0) p = c_loc(dst)
    call darray_host(3, darray, p, size(dst, kind=int64), GPUWIRE_INT8, root, stream, ierror)
  end subroutine darray_gather_i8

  subroutine darray_gather_i32(darray, dst, root, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int32), contiguous, target, intent(inout) :: dst(..)
    integer, intent(in) :: root
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(dst) > 0) p = c_loc(dst)
    call darray_host(3, darray, p, size(dst, kind=int64), GPUWIRE_INT32, root, stream, ierror)
  end subroutine darray_gather_i32

  subroutine darray_gather_i64(darray, dst, root, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int64), contiguous, target, intent(inout) :: dst(..)
    integer, intent(in) :: root
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(dst) > 0) p = c_loc(dst)
    call darray_host(3, darray, p, size(dst, kind=int64), GPUWIRE_INT64, root, stream, ierror)
  end subroutine darray_gather_i64

  subroutine darray_gather_r32(darray, dst, root, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    real(real32), contiguous, target, intent(inout) :: dst(..)
    integer, intent(in) :: root
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(dst) > 0) p = c_loc(dst)
    call darray_host(3, darray, p, size(dst, kind=int64), GPUWIRE_FLOAT32, root, stream, ierror)
  end subroutine darray_gather_r32

  subroutine darray_gather_r64(darray, dst, root, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    real(real64), contiguous, target, intent(inout) :: dst(..)
    integer, intent(in) :: root
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(dst) > 0) p = c_loc(dst)
    call darray_host(3, darray, p, size(dst, kind=int64), GPUWIRE_FLOAT64, root, stream, ierror)
  end subroutine darray_gather_r64

  subroutine darray_gather_c32(darray, dst, root, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    complex(real32), contiguous, target, intent(inout) :: dst(..)
    integer, intent(in) :: root
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(dst) > 0) p = c_loc(dst)
    call darray_host(3, darray, p, size(dst, kind=int64), GPUWIRE_COMPLEX64, root, stream, ierror)
  end subroutine darray_gather_c32

  subroutine darray_gather_c64(darray, dst, root, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    complex(real64), contiguous, target, intent(inout) :: dst(..)
    integer, intent(in) :: root
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(dst) > 0) p = c_loc(dst)
    call darray_host(3, darray, p, size(dst, kind=int64), GPUWIRE_COMPLEX128, root, stream, ierror)
  end subroutine darray_gather_c64

  subroutine darray_fill_i8(darray, value, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int8), target, intent(in) :: value
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(1, darray, darray, c_loc(value), GPUWIRE_INT8, stream, ierror)
  end subroutine darray_fill_i8

  subroutine darray_fill_i32(darray, value, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int32), target, intent(in) :: value
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(1, darray, darray, c_loc(value), GPUWIRE_INT32, stream, ierror)
  end subroutine darray_fill_i32

  subroutine darray_fill_i64(darray, value, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int64), target, intent(in) :: value
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(1, darray, darray, c_loc(value), GPUWIRE_INT64, stream, ierror)
  end subroutine darray_fill_i64

  subroutine darray_fill_r32(darray, value, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    real(real32), target, intent(in) :: value
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(1, darray, darray, c_loc(value), GPUWIRE_FLOAT32, stream, ierror)
  end subroutine darray_fill_r32

  subroutine darray_fill_r64(darray, value, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    real(real64), target, intent(in) :: value
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(1, darray, darray, c_loc(value), GPUWIRE_FLOAT64, stream, ierror)
  end subroutine darray_fill_r64

  subroutine darray_fill_c32(darray, value, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    complex(real32), target, intent(in) :: value
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(1, darray, darray, c_loc(value), GPUWIRE_COMPLEX64, stream, ierror)
  end subroutine darray_fill_c32

  subroutine darray_fill_c64(darray, value, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    complex(real64), target, intent(in) :: value
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(1, darray, darray, c_loc(value), GPUWIRE_COMPLEX128, stream, ierror)
  end subroutine darray_fill_c64

  subroutine darray_scale_r32(darray, alpha, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    real(real32), target, intent(in) :: alpha
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(2, darray, darray, c_loc(alpha), GPUWIRE_FLOAT32, stream, ierror)
  end subroutine darray_scale_r32

  subroutine darray_scale_r64(darray, alpha, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    real(real64), target, intent(in) :: alpha
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(2, darray, darray, c_loc(alpha), GPUWIRE_FLOAT64, stream, ierror)
  end subroutine darray_scale_r64

  subroutine darray_scale_c32(darray, alpha, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    complex(real32), target, intent(in) :: alpha
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(2, darray, darray, c_loc(alpha), GPUWIRE_COMPLEX64, stream, ierror)
  end subroutine darray_scale_c32

  subroutine darray_scale_c64(darray, alpha, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    complex(real64), target, intent(in) :: alpha
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(2, darray, darray, c_loc(alpha), GPUWIRE_COMPLEX128, stream, ierror)
  end subroutine darray_scale_c64

  subroutine darray_axpy_r32(alpha, x, y, stream, ierror)
    type(gpuwire_darray), intent(in) :: x, y
    real(real32), target, intent(in) :: alpha
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(3, x, y, c_loc(alpha), GPUWIRE_FLOAT32, stream, ierror)
  end subroutine darray_axpy_r32

  subroutine darray_axpy_r64(alpha, x, y, stream, ierror)
    type(gpuwire_darray), intent(in) :: x, y
    real(real64), target, intent(in) :: alpha
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(3, x, y, c_loc(alpha), GPUWIRE_FLOAT64, stream, ierror)
  end subroutine darray_axpy_r64

  subroutine darray_axpy_c32(alpha, x, y, stream, ierror)
    type(gpuwire_darray), intent(in) :: x, y
    complex(real32), target, intent(in) :: alpha
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(3, x, y, c_loc(alpha), GPUWIRE_COMPLEX64, stream, ierror)
  end subroutine darray_axpy_c32

  subroutine darray_axpy_c64(alpha, x, y, stream, ierror)
    type(gpuwire_darray), intent(in) :: x, y
    complex(real64), target, intent(in) :: alpha
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(3, x, y, c_loc(alpha), GPUWIRE_COMPLEX128, stream, ierror)
  end subroutine darray_axpy_c64

  subroutine darray_dot_r32(x, y, result, stream, ierror)
    type(gpuwire_darray), intent(in) :: x, y
    real(real32), target, intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(4, x, y, c_loc(result), GPUWIRE_FLOAT32, stream, ierror)
  end subroutine darray_dot_r32

  subroutine darray_dot_r64(x, y, result, stream, ierror)
    type(gpuwire_darray), intent(in) :: x, y
    real(real64), target, intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(4, x, y, c_loc(result), GPUWIRE_FLOAT64, stream, ierror)
  end subroutine darray_dot_r64

  subroutine darray_dot_c32(x, y, result, stream, ierror)
    type(gpuwire_darray), intent(in) :: x, y
    complex(real32), target, intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(4, x, y, c_loc(result), GPUWIRE_COMPLEX64, stream, ierror)
  end subroutine darray_dot_c32

  subroutine darray_dot_c64(x, y, result, stream, ierror)
    type(gpuwire_darray), intent(in) :: x, y
    complex(real64), target, intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(4, x, y, c_loc(result), GPUWIRE_COMPLEX128, stream, ierror)
  end subroutine darray_dot_c64

  subroutine darray_sum_i8(darray, result, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int8), target, intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(5, darray, darray, c_loc(result), GPUWIRE_INT8, stream, ierror)
  end subroutine darray_sum_i8

  subroutine darray_sum_i32(darray, result, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int32), target, intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(5, darray, darray, c_loc(result), GPUWIRE_INT32, stream, ierror)
  end subroutine darray_sum_i32

  subroutine darray_sum_i64(darray, result, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int64), target, intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(5, darray, darray, c_loc(result), GPUWIRE_INT64, stream, ierror)
  end subroutine darray_sum_i64

  subroutine darray_sum_r32(darray, result, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    real(real32), target, intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(5, darray, darray, c_loc(result), GPUWIRE_FLOAT32, stream, ierror)
  end subroutine darray_sum_r32

  subroutine darray_sum_r64(darray, result, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    real(real64), target, intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(5, darray, darray, c_loc(result), GPUWIRE_FLOAT64, stream, ierror)
  end subroutine darray_sum_r64

  subroutine darray_sum_c32(darray, result, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    complex(real32), target, intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(5, darray, darray, c_loc(result), GPUWIRE_COMPLEX64, stream, ierror)
  end subroutine darray_sum_c32

  subroutine darray_sum_c64(darray, result, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    complex(real64), target, intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(5, darray, darray, c_loc(result), GPUWIRE_COMPLEX128, stream, ierror)
  end subroutine darray_sum_c64

  subroutine darray_min_i8(darray, result, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int8), target, intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(6, darray, darray, c_loc(result), GPUWIRE_INT8, stream, ierror)
  end subroutine darray_min_i8

  subroutine darray_min_i32(darray, result, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int32), target, intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(6, darray, darray, c_loc(result), GPUWIRE_INT32, stream, ierror)
  end subroutine darray_min_i32

  subroutine darray_min_i64(darray, result, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int64), target, intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(6, darray, darray, c_loc(result), GPUWIRE_INT64, stream, ierror)
  end subroutine darray_min_i64

  subroutine darray_min_r32(darray, result, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    real(real32), target, intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(6, darray, darray, c_loc(result), GPUWIRE_FLOAT32, stream, ierror)
  end subroutine darray_min_r32

  subroutine darray_min_r64(darray, result, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    real(real64), target, intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(6, darray, darray, c_loc(result), GPUWIRE_FLOAT64, stream, ierror)
  end subroutine darray_min_r64

  subroutine darray_max_i8(darray, result, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int8), target, intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(7, darray, darray, c_loc(result), GPUWIRE_INT8, stream, ierror)
  end subroutine darray_max_i8

  subroutine darray_max_i32(darray, result, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int32), target, intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(7, darray, darray, c_loc(result), GPUWIRE_INT32, stream, ierror)
  end subroutine darray_max_i32

  subroutine darray_max_i64(darray, result, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    integer(int64), target, intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(7, darray, darray, c_loc(result), GPUWIRE_INT64, stream, ierror)
  end subroutine darray_max_i64

  subroutine darray_max_r32(darray, result, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    real(real32), target, intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(7, darray, darray, c_loc(result), GPUWIRE_FLOAT32, stream, ierror)
  end subroutine darray_max_r32

  subroutine darray_max_r64(darray, result, stream, ierror)
    type(gpuwire_darray), intent(in) :: darray
    real(real64), target, intent(out) :: result
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    call darray_scalar(7, darray, darray, c_loc(result), GPUWIRE_FLOAT64, stream, ierror)
  end subroutine darray_max_r64

end module gpuwire
