! test_fortran.f90: the Fortran module gpuwire from a program that uses `use mpi` (integer
! handles) and initializes MPI itself; on 1, 2 and 3 ranks.
!
! Every generic of module gpuwire is called (scripts/check-bindings.py checks that each C
! function is called from a Fortran test or example); arrays of every supported type and of
! ranks 1 to 4 are wrapped; blocking copies to and from non-contiguous sections are checked
! element by element; non-contiguous sections (a(2,:), c(:,j,:)) wrapped as strided buffers move
! exact values (bcast, allreduce, sendrecv); strided and subarray views; errors come back through ierror with gpuwire_last_error's message; every
! gpuwire_darray generic is called with its result checked; test_kinds.inc (generated) runs every
! per-type specific (scalars, arrays of rank 1 to 15, allreduce and bcast on Fortran variables).
! Prints "test_fortran: PASS" on rank 0 when every rank passed.
!
! Usage: mpirun -n N test_fortran [EXPECTED_RANKS]
program test_fortran
  use, intrinsic :: iso_c_binding, only: c_ptr, c_loc, c_f_pointer, c_associated, c_null_ptr, &
    c_sizeof
  use, intrinsic :: iso_fortran_env, only: int8, int32, int64, real32, real64, error_unit, &
    output_unit
  use mpi, only: MPI_Init, MPI_Finalize, MPI_Comm_size, MPI_COMM_WORLD
  use gpuwire
  implicit none

  integer :: failures = 0, checks = 0
  integer :: rank = -1, nranks, ierr, mpierr, expected
  type(gpuwire_comm) :: world
  character(len=32) :: arg

  call test_before_init()
  call MPI_Init(mpierr)
  call gpuwire_init(ierr)
  call expect_ok(ierr, 'gpuwire_init')
  call gpuwire_comm_create(MPI_COMM_WORLD, world, ierror=ierr) ! an integer MPI handle
  call expect_ok(ierr, 'gpuwire_comm_create(MPI_COMM_WORLD)')
  call gpuwire_comm_rank(world, rank)
  call gpuwire_comm_size(world, nranks)
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) expected
    if (expected /= nranks) then
      write (error_unit, '(a,i0,a,a,a)') 'test_fortran: launched on ', nranks, &
        ' ranks, expected ', trim(arg), ' (wrong launcher?)'
      stop 1
    end if
  end if

  call test_lifecycle()
  call test_wrap_every_type_and_rank()
  call test_copies_and_sections()
  call test_sections_as_buffers()
  call test_buffer_queries()
  call test_communicators()
  call test_point_to_point()
  call test_status_and_probe()
  call test_collectives()
  call test_vcollectives()
  call test_nonblocking_and_groups()
  call test_group_plain_variables()
  call test_complex_alignment()
  call test_scans_and_pairs()
  call test_darray()
  call test_every_kind()
  call verdict()

contains

  subroutine expect(cond, what)
    logical, intent(in) :: cond
    character(len=*), intent(in) :: what
    checks = checks + 1
    if (.not. cond) then
      failures = failures + 1
      write (error_unit, '(a,i0,a,a)') 'FAILED rank ', rank, ': ', what
      flush (error_unit)
    end if
  end subroutine expect

  subroutine expect_status(st, want, what)
    integer, intent(in) :: st, want
    character(len=*), intent(in) :: what
    character(len=1024) :: message
    if (st /= want) then
      call gpuwire_last_error(message)
      call expect(.false., what // ': status ' // gpuwire_status_string(st) // ', expected ' &
        // gpuwire_status_string(want) // '; last error: ' // trim(message))
    else
      call expect(.true., what)
    end if
  end subroutine expect_status

  subroutine expect_ok(st, what)
    integer, intent(in) :: st
    character(len=*), intent(in) :: what
    call expect_status(st, GPUWIRE_SUCCESS, what)
  end subroutine expect_ok

  ! Calls that work before gpuwire_init, and the error of one that does not.
  subroutine test_before_init()
    integer :: major, minor, patch
    integer(int64) :: bytes
    logical :: flag
    type(gpuwire_config) :: cfg
    type(gpuwire_buffer) :: b
    character(len=1024) :: message
    call gpuwire_get_version(major, minor, patch)
    call expect(major == GPUWIRE_VERSION_MAJOR .and. minor == GPUWIRE_VERSION_MINOR .and. &
      patch == GPUWIRE_VERSION_PATCH, 'gpuwire_get_version matches the module')
    call gpuwire_dtype_size(GPUWIRE_COMPLEX128, bytes)
    call expect(bytes == 16, 'complex128 is 16 bytes')
    call gpuwire_dtype_size(99, bytes, ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_UNSUPPORTED_DTYPE), 'gpuwire_dtype_size(99)')
    call gpuwire_initialized(flag)
    call expect(.not. flag, 'not initialized before gpuwire_init')
    call gpuwire_config_init(cfg)
    call expect(cfg%chunk_bytes >= 4096 .and. cfg%device >= -1, 'gpuwire_config_init defaults')
    call expect(c_sizeof(cfg) == 40, 'gpuwire_config has the C struct''s size (40 bytes)')
    call expect(cfg%p2p_matching == GPUWIRE_P2P_MATCHING_BACKEND, 'gpuwire_config_init: p2p_matching defaults to backend')
    call gpuwire_buffer_alloc(4, GPUWIRE_FLOAT32, GPUWIRE_SPACE_HOST, -1, b, ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_NOT_INITIALIZED), 'gpuwire_buffer_alloc before init')
    call gpuwire_last_error(message)
    call expect(index(message, 'gpuwire_buffer_alloc') > 0, 'the last error names the function')
    call expect(gpuwire_status_string(int(GPUWIRE_ERROR_NOT_INITIALIZED)) == &
      'gpuwire_init has not been called', 'gpuwire_status_string')
    call expect(gpuwire_status_string(12345) == 'unknown status code', 'unknown status string')
  end subroutine test_before_init

  subroutine test_lifecycle()
    logical :: flag
    integer :: level
    call gpuwire_initialized(flag)
    call expect(flag, 'gpuwire_initialized after init')
    call gpuwire_owns_mpi(flag)
    call expect(.not. flag, 'gpuwire adopted the program''s MPI')
    call gpuwire_query_thread(level)
    call expect(level >= GPUWIRE_THREAD_SINGLE .and. level <= GPUWIRE_THREAD_MULTIPLE, &
      'gpuwire_query_thread')
    call gpuwire_init(ierr) ! again: does nothing
    call expect_ok(ierr, 'gpuwire_init twice')
  end subroutine test_lifecycle

  ! One buffer per supported type; ranks 1 to 4; the buffer is the array's memory.
  subroutine test_wrap_every_type_and_rank()
    integer(int8), target :: i8(3, 2)
    integer(int32), target :: i32(5)
    integer(int64), target :: i64(2, 2, 2)
    real(real32), allocatable, target :: r32(:)
    real(real64), target :: r64(2, 2, 2, 2), r64v(0:3, 2)
    complex(real32), target :: c32(4)
    complex(real64), pointer, contiguous :: c64(:, :)
    complex(real64), target, allocatable :: c64_storage(:, :)
    real(real64), target :: empty(0)
    real(real64), pointer, contiguous :: nothing(:)
    real(real64), pointer :: nothing0
    type(gpuwire_buffer) :: b
    allocate (r32(7), c64_storage(3, 3))
    c64 => c64_storage(:, 2:3)
    call check_wrap_i8(i8)
    call gpuwire_buffer_wrap(i32, b)
    call check_buffer(b, 5_int64, GPUWIRE_INT32, c_loc(i32), 'integer(int32) rank 1')
    call gpuwire_buffer_wrap(i64, b)
    call check_buffer(b, 8_int64, GPUWIRE_INT64, c_loc(i64), 'integer(int64) rank 3')
    call gpuwire_buffer_wrap(r32, b)
    call check_buffer(b, 7_int64, GPUWIRE_FLOAT32, c_loc(r32), 'real(real32) allocatable')
    call gpuwire_buffer_wrap(r64, b)
    call check_buffer(b, 16_int64, GPUWIRE_FLOAT64, c_loc(r64), 'real(real64) rank 4')
    call gpuwire_buffer_wrap(r64v, b)
    call check_buffer(b, 8_int64, GPUWIRE_FLOAT64, c_loc(r64v), 'real(real64) rank 2')
    call gpuwire_buffer_wrap(r64v(:, 2), b) ! a contiguous section
    call check_buffer(b, 4_int64, GPUWIRE_FLOAT64, c_loc(r64v(0, 2)), 'contiguous section r64v(:, 2)')
    call gpuwire_buffer_wrap(c32, b, space=GPUWIRE_SPACE_HOST)
    call check_buffer(b, 4_int64, GPUWIRE_COMPLEX64, c_loc(c32), 'complex(real32), space HOST')
    call gpuwire_buffer_wrap(c64, b) ! a contiguous pointer
    call check_buffer(b, 6_int64, GPUWIRE_COMPLEX128, c_loc(c64_storage(1, 2)), &
      'complex(real64) contiguous pointer')
    call gpuwire_buffer_wrap(empty, b)
    call check_buffer(b, 0_int64, GPUWIRE_FLOAT64, c_null_ptr, 'an empty array')
    ! The c_ptr forms (any address), with default-integer and int64 counts.
    call gpuwire_buffer_wrap(c_loc(i32), 5, GPUWIRE_INT32, GPUWIRE_SPACE_AUTO, b)
    call check_buffer(b, 5_int64, GPUWIRE_INT32, c_loc(i32), 'c_ptr form')
    call gpuwire_buffer_wrap(c_loc(i64), 8_int64, GPUWIRE_INT64, GPUWIRE_SPACE_HOST, b)
    call check_buffer(b, 8_int64, GPUWIRE_INT64, c_loc(i64), 'c_ptr form, int64 count')
    call gpuwire_buffer_wrap(c_loc(i32), -1, GPUWIRE_INT32, GPUWIRE_SPACE_AUTO, b, ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_ARGUMENT), 'wrap with a negative count')
    call expect(b == GPUWIRE_BUFFER_NULL, 'a failed wrap leaves a NULL handle')
    ! A disassociated pointer is an error, not a crash.
    nullify (nothing, nothing0)
    call gpuwire_buffer_wrap(nothing, b, ierror=ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_NULL_ARGUMENT), 'wrap of a disassociated pointer')
    call gpuwire_buffer_wrap(nothing0, b, ierror=ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_NULL_ARGUMENT), 'wrap of a disassociated scalar')
    call expect(b == GPUWIRE_BUFFER_NULL, 'a failed wrap of a pointer leaves a NULL handle')
    deallocate (r32, c64_storage)
  end subroutine test_wrap_every_type_and_rank

  subroutine check_wrap_i8(a)
    integer(int8), intent(inout), target, contiguous :: a(:, :)
    type(gpuwire_buffer) :: b
    call gpuwire_buffer_wrap(a, b)
    call check_buffer(b, 6_int64, GPUWIRE_INT8, c_loc(a), 'integer(int8) contiguous dummy')
  end subroutine check_wrap_i8

  ! Checks count, datatype, address and ownership of a wrapped buffer, then frees it.
  subroutine check_buffer(b, count, dtype, address, what)
    type(gpuwire_buffer), intent(inout) :: b
    integer(int64), intent(in) :: count
    integer, intent(in) :: dtype
    type(c_ptr), intent(in) :: address
    character(len=*), intent(in) :: what
    integer(int64) :: n
    integer :: dt, space, device
    logical :: owned
    type(c_ptr) :: p
    call expect(b /= GPUWIRE_BUFFER_NULL, what // ': a handle')
    call gpuwire_buffer_count(b, n)
    call gpuwire_buffer_dtype(b, dt)
    call gpuwire_buffer_pointer(b, p)
    call gpuwire_buffer_owned(b, owned)
    call gpuwire_buffer_space(b, space)
    call gpuwire_buffer_device(b, device)
    call expect(n == count .and. dt == dtype .and. .not. owned .and. &
      space == GPUWIRE_SPACE_HOST .and. device == -1, what // ': count, dtype, space, owner')
    if (count > 0) call expect(c_associated(p, address), what // ': the array''s own memory')
    call gpuwire_buffer_free(b)
    call expect(b == GPUWIRE_BUFFER_NULL, what // ': gpuwire_buffer_free sets NULL')
  end subroutine check_buffer

  ! Blocking copies take any array: non-contiguous sections are copied in and out correctly.
  subroutine test_copies_and_sections()
    real(real64) :: a(3, 4), expect_a(3, 4), w(8)
    integer(int32), target :: m(4, 4)
    real(real32) :: wrong_type(4)
    real(real64) :: wrong_size(5)
    type(gpuwire_buffer) :: b, v
    real(real64), pointer :: p(:)
    type(c_ptr) :: ptr
    character(len=1024) :: message
    integer :: j
    a = reshape([(real(j, real64), j = 1, 12)], [3, 4])
    expect_a = a
    call gpuwire_buffer_alloc(4_int64, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, -1, b)
    ! copy_from_host from row 2 (stride 3): the buffer holds a(2,1), a(2,2), a(2,3), a(2,4).
    call gpuwire_buffer_copy_from_host(b, a(2, :))
    call gpuwire_buffer_pointer(b, ptr)
    call c_f_pointer(ptr, p, [4])
    call expect(all(p == [2.0_real64, 5.0_real64, 8.0_real64, 11.0_real64]), &
      'copy_from_host from the section a(2,:)')
    ! copy_to_host into row 3: only row 3 changes.
    p = [-1.0_real64, -2.0_real64, -3.0_real64, -4.0_real64]
    call gpuwire_buffer_copy_to_host(b, a(3, :))
    expect_a(3, :) = [-1.0_real64, -2.0_real64, -3.0_real64, -4.0_real64]
    call expect(all(a == expect_a), 'copy_to_host into the section a(3,:), the rest untouched')
    ! A section with stride 2: the elements in between are untouched.
    w = 0
    call gpuwire_buffer_copy_to_host(b, w(1:8:2))
    call expect(all(w(1:8:2) == [-1.0_real64, -2.0_real64, -3.0_real64, -4.0_real64]) .and. &
      all(w(2:8:2) == 0), 'copy_to_host into the section w(1:8:2)')
    ! Type and size are checked; the array stays unchanged on error.
    wrong_type = 7
    call gpuwire_buffer_copy_to_host(b, wrong_type, ierror=ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_DTYPE_MISMATCH), 'copy_to_host into real32')
    call gpuwire_last_error(message)
    call expect(index(message, 'gpuwire_buffer_copy_to_host') > 0 .and. &
      index(message, 'GPUWIRE_FLOAT32') > 0, 'the message names the call and the type: ' &
      // trim(message))
    call expect(all(wrong_type == 7), 'the array is unchanged after the error')
    wrong_size = 9
    call gpuwire_buffer_copy_from_host(b, wrong_size, ierror=ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_COUNT_MISMATCH), 'copy_from_host from 5 elements')
    ! A C error after a Fortran one: gpuwire_last_error reports the newer.
    call gpuwire_buffer_view(b, 3, 2, v, ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_ARGUMENT), 'view out of range')
    call gpuwire_last_error(message)
    call expect(index(message, 'gpuwire_buffer_view') > 0, 'the newer (C) error is reported')
    ! The c_ptr forms of the copies.
    m = 0
    call gpuwire_buffer_free(b)
    call gpuwire_buffer_alloc(4, GPUWIRE_INT32, GPUWIRE_SPACE_HOST, -1, b)
    m(:, 1) = [1, 2, 3, 4]
    call gpuwire_buffer_copy_from_host(b, c_loc(m))
    call gpuwire_buffer_copy_to_host(b, m(2, :)) ! row 2 = column 1
    call expect(all(m(2, :) == [1, 2, 3, 4]), 'c_ptr copy_from_host, then into a row')
    call gpuwire_buffer_copy_to_host(b, c_loc(m), stream=c_null_ptr)
    call expect(m(4, 1) == 4, 'c_ptr copy_to_host')
    call gpuwire_buffer_free(b)
  end subroutine test_copies_and_sections

  ! Owned buffers: alloc with default-integer and int64 counts, views, queries.
  ! Non-contiguous sections as buffers (issue 15): a row and a plane of a 3-D array wrapped where
  ! they are (strided buffers), moved by bcast, allreduce and sendrecv with exact values, the
  ! elements around them untouched; strided and subarray views of a buffer; a reversed section
  ! refused.
  subroutine test_sections_as_buffers()
    type :: rec
      real(real64) :: x
      real(real32) :: y
    end type rec
    real(real64), target :: a(4, 5), got(6)
    integer(int32), target :: c(3, 4, 2), d(3, 4, 2)
    type(rec), target :: t(5)
    complex(real64), target :: z(4)
    real(real32), pointer :: ty(:)
    real(real64), pointer :: zim(:)
    type(gpuwire_buffer) :: b, b2, v
    integer(int64) :: n
    integer :: i, j, k, root, left, right
    logical :: good
    root = nranks - 1
    ! Sections of a component (t(:)%x, z%re): gfortran calls them contiguous, and they were
    ! wrapped as packed elements (the root's y and imaginary parts overwrote this rank's, and
    ! the last x and real parts were not received).
    do i = 1, 5
      t(i)%x = 10 * rank + i
      t(i)%y = -1 - 100 * rank
    end do
    z = [(cmplx(10 * rank + i, -10 * rank - i, real64), i = 1, 4)]
    call gpuwire_buffer_wrap(t(:)%x, b)
    call gpuwire_bcast(world, b, root, ierror=ierr)
    call expect_ok(ierr, 'bcast of the component section t(:)%x')
    call expect(all(t%x == [(10 * root + i, i = 1, 5)]) .and. all(t%y == -1 - 100 * rank), &
      't(:)%x is the root''s, t(:)%y this rank''s')
    call gpuwire_buffer_free(b)
    call gpuwire_buffer_wrap(z%re, b)
    call gpuwire_bcast(world, b, root, ierror=ierr)
    call expect_ok(ierr, 'bcast of z%re')
    call expect(all(z%re == [(10 * root + i, i = 1, 4)]) .and. all(z%im == [(-10 * rank - i, i = 1, 4)]), &
      'z%re is the root''s, z%im this rank''s')
    call gpuwire_buffer_free(b)
    ! A section of a later component goes through a pointer: gfortran 12 passes t(:)%y and z%im
    ! themselves with the parent's address (the buffer would start at t(1)%x, z(1)%re).
    ty => t(:)%y
    call gpuwire_buffer_wrap(ty, b)
    call gpuwire_bcast(world, b, root, ierror=ierr)
    call expect_ok(ierr, 'bcast of ty => t(:)%y')
    call expect(all(t%y == -1 - 100 * root) .and. all(t%x == [(10 * root + i, i = 1, 5)]), &
      'ty => t(:)%y: t%y is the root''s, t%x untouched')
    call gpuwire_buffer_free(b)
    zim => z%im
    call gpuwire_buffer_wrap(zim, b)
    call gpuwire_bcast(world, b, root, ierror=ierr)
    call expect_ok(ierr, 'bcast of zim => z%im')
    call expect(all(z == [(cmplx(10 * root + i, -10 * root - i, real64), i = 1, 4)]), &
      'zim => z%im: z%im is the root''s, z%re untouched')
    call gpuwire_buffer_free(b)
    do j = 1, 5
      do i = 1, 4
        a(i, j) = 100 * rank + 10 * i + j + 0.25_real64
      end do
    end do
    ! bcast of the row a(2, :) (stride 4): the root's row exactly, the other rows this rank's.
    call gpuwire_buffer_wrap(a(2, :), b, ierror=ierr)
    call expect_ok(ierr, 'wrap of the section a(2,:)')
    call gpuwire_buffer_count(b, n)
    call expect(n == 5, 'the row buffer holds 5 elements')
    call gpuwire_bcast(world, b, root, ierror=ierr)
    call expect_ok(ierr, 'bcast of a(2,:)')
    call expect(all(a(2, :) == [(100 * root + 20 + j + 0.25_real64, j = 1, 5)]), 'a(2,:) is the root''s row')
    call expect(all(a(1, :) == [(100 * rank + 10 + j + 0.25_real64, j = 1, 5)]) .and. &
      all(a(3, :) == [(100 * rank + 30 + j + 0.25_real64, j = 1, 5)]), 'the other rows untouched')
    call gpuwire_buffer_free(b)
    ! allreduce of the plane c(:, 2, :) into d(:, 3, :); sendrecv of c(:, 4, :) into d(:, 1, :).
    do k = 1, 2
      do j = 1, 4
        do i = 1, 3
          c(i, j, k) = 1000 * rank + 100 * i + 10 * j + k
        end do
      end do
    end do
    d = -1
    call gpuwire_buffer_wrap(c(:, 2, :), b)
    call gpuwire_buffer_wrap(d(:, 3, :), b2)
    call gpuwire_allreduce(world, b, b2, GPUWIRE_SUM, ierror=ierr)
    call expect_ok(ierr, 'allreduce of c(:,2,:) into d(:,3,:)')
    call expect(all(d(:, 3, :) == reshape([((1000 * (nranks * (nranks - 1) / 2) + nranks * (100 * i + 20 + k), &
      i = 1, 3), k = 1, 2)], [3, 2])), 'd(:,3,:) is the sum of every rank''s c(:,2,:)')
    call gpuwire_buffer_free(b)
    call gpuwire_buffer_free(b2)
    right = mod(rank + 1, nranks)
    left = mod(rank + nranks - 1, nranks)
    call gpuwire_buffer_wrap(c(:, 4, :), b)
    call gpuwire_buffer_wrap(d(:, 1, :), b2)
    call gpuwire_sendrecv(world, b, right, 3, b2, left, 3, ierror=ierr)
    call expect_ok(ierr, 'sendrecv of c(:,4,:) into d(:,1,:)')
    call expect(all(d(:, 1, :) == reshape([((1000 * left + 100 * i + 40 + k, i = 1, 3), k = 1, 2)], [3, 2])), &
      'd(:,1,:) is the left neighbour''s c(:,4,:)')
    call expect(all(d(:, 2, :) == -1) .and. all(d(:, 4, :) == -1), 'd''s other planes untouched')
    call gpuwire_buffer_free(b)
    call gpuwire_buffer_free(b2)
    ! Views of a buffer over the whole of a: a strided row, a subarray, a strided wrap.
    call gpuwire_buffer_wrap(a, b)
    call gpuwire_buffer_view_strided(b, 2, 5, 1, 4, v) ! the row a(3, :)
    call gpuwire_buffer_contiguous(v, good)
    call expect(.not. good, 'a strided view is not contiguous')
    call gpuwire_buffer_copy_to_host(v, got(1:5))
    call expect(all(got(1:5) == a(3, :)), 'view_strided: the row a(3,:)')
    call gpuwire_buffer_free(v)
    call gpuwire_buffer_view_subarray(b, [4, 5], [2, 3], [1, 1], v) ! a(2:3, 2:4)
    call gpuwire_buffer_copy_to_host(v, got)
    call expect(all(got == [a(2:3, 2), a(2:3, 3), a(2:3, 4)]), 'view_subarray: a(2:3,2:4) in order')
    call gpuwire_buffer_free(v)
    call gpuwire_buffer_view_subarray(b, [4_int64, 5_int64], [3_int64, 2_int64], [0_int64, 0_int64], v, &
      order=GPUWIRE_ORDER_C) ! rows of 5: elements 0 1 5 6 10 11
    call gpuwire_buffer_copy_to_host(v, got)
    call expect(all(got == [a(1, 1), a(2, 1), a(2, 2), a(3, 2), a(3, 3), a(4, 3)]), 'view_subarray in C order')
    call gpuwire_buffer_free(v)
    call gpuwire_buffer_free(b)
    call gpuwire_buffer_wrap_strided(c_loc(a(2, 2)), [2_int64, 3_int64], [1_int64, 4_int64], &
      GPUWIRE_FLOAT64, b)
    call gpuwire_buffer_copy_to_host(b, got)
    call expect(all(got == [a(2:3, 2), a(2:3, 3), a(2:3, 4)]), 'wrap_strided: a(2:3,2:4)')
    call gpuwire_buffer_free(b)
    ! A reversed section (negative stride) is refused with a clear error.
    call gpuwire_buffer_wrap(a(4:1:-1, 1), b, ierror=ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_ARGUMENT), 'wrap of the reversed section a(4:1:-1,1)')
  end subroutine test_sections_as_buffers

  subroutine test_buffer_queries()
    type(gpuwire_buffer) :: b, v, v2
    integer(int64) :: n
    logical :: owned
    type(c_ptr) :: p, pv
    real(real32), pointer :: x(:)
    call gpuwire_buffer_alloc(10, GPUWIRE_FLOAT32, GPUWIRE_SPACE_HOST, -1, b)
    call gpuwire_buffer_owned(b, owned)
    call expect(owned, 'an allocated buffer is owned')
    call gpuwire_buffer_pointer(b, p)
    call c_f_pointer(p, x, [10])
    call expect(all(x == 0), 'allocated memory is zero-filled')
    call gpuwire_buffer_view(b, 2, 5, v)
    call gpuwire_buffer_view(b, 4_int64, 6_int64, v2)
    call gpuwire_buffer_count(v, n)
    call gpuwire_buffer_pointer(v, pv)
    call expect(n == 5 .and. c_associated(pv, c_loc(x(3))), 'view(2, 5) starts at element 3')
    call gpuwire_buffer_owned(v2, owned)
    call expect(owned, 'a view reports its original''s owner')
    call gpuwire_buffer_contiguous(v2, owned)
    call expect(owned, 'a view is contiguous')
    call gpuwire_buffer_free(b)
    call gpuwire_buffer_count(v2, n) ! the view keeps the memory alive
    call expect(n == 6, 'a view outlives its parent handle')
    call gpuwire_buffer_free(v)
    call gpuwire_buffer_free(v2)
    call gpuwire_buffer_free(v2, ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_HANDLE), 'freeing NULL')
    call gpuwire_buffer_alloc(-1_int64, GPUWIRE_FLOAT32, GPUWIRE_SPACE_HOST, -1, b, ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_ARGUMENT), 'alloc with a negative count')
  end subroutine test_buffer_queries

  subroutine test_communicators()
    type(gpuwire_comm) :: w2, half, copy, checked
    type(gpuwire_config) :: cfg
    integer :: r, s, lr, ls, backend, device, fhandle, msize, color
    character(len=1024) :: text
    call gpuwire_comm_world(w2)
    call gpuwire_comm_rank(w2, r)
    call gpuwire_comm_size(w2, s)
    call expect(r == rank .and. s == nranks, 'gpuwire_comm_world')
    call gpuwire_comm_local_rank(w2, lr)
    call gpuwire_comm_local_size(w2, ls)
    call expect(lr >= 0 .and. lr < ls, 'local rank and size')
    call gpuwire_comm_backend(w2, backend)
    call expect(backend /= GPUWIRE_BACKEND_AUTO, 'a backend was chosen')
    call gpuwire_comm_device(w2, device)
    call expect(device >= -1, 'gpuwire_comm_device')
    call gpuwire_comm_describe(w2, text)
    call expect(index(text, 'gpuwire') == 1, 'gpuwire_comm_describe: ' // trim(text))
    ! The MPI handle of gpuwire's duplicate works with `use mpi`.
    call gpuwire_comm_mpi(w2, fhandle)
    call MPI_Comm_size(fhandle, msize, mpierr)
    call expect(msize == nranks, 'gpuwire_comm_mpi gives a usable integer handle')
    ! split: even and odd ranks, the last of an odd count out.
    color = mod(rank, 2)
    if (mod(nranks, 2) == 1 .and. rank == nranks - 1) color = GPUWIRE_UNDEFINED
    call gpuwire_comm_split(w2, color, rank, half)
    if (color == GPUWIRE_UNDEFINED) then
      call expect(half == GPUWIRE_COMM_NULL, 'split with GPUWIRE_UNDEFINED gives NULL')
    else
      call gpuwire_comm_rank(half, r)
      call expect(r == rank / 2, 'rank in the half')
      call gpuwire_comm_free(half)
    end if
    call gpuwire_comm_dup(w2, copy)
    call gpuwire_comm_size(copy, s)
    call expect(s == nranks .and. copy /= w2, 'gpuwire_comm_dup')
    call gpuwire_comm_free(copy)
    call expect(copy == GPUWIRE_COMM_NULL, 'gpuwire_comm_free sets NULL')
    call gpuwire_comm_rank(copy, r, ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_HANDLE), 'a freed communicator')
    ! A configuration from Fortran: checking mode.
    call gpuwire_config_init(cfg)
    cfg%check = 1
    call gpuwire_comm_create(MPI_COMM_WORLD, checked, cfg)
    call gpuwire_comm_describe(checked, text)
    call expect(index(text, 'check=on') > 0, 'cfg%check = 1 reaches the library: ' // trim(text))
    call gpuwire_comm_free(checked)
    cfg%chunk_bytes = 1
    call gpuwire_comm_world(checked, cfg, ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_ARGUMENT), 'cfg%chunk_bytes = 1')
    call gpuwire_comm_free(w2)
  end subroutine test_communicators

  ! The nonblocking collectives, completed in reverse order, groups, the asynchronous error.
  ! scan, exscan (rank 0's recvbuf untouched), iscan, iexscan in a group; MINLOC/MAXLOC on the
  ! pair types (ties: the lower index); LAND on integers, and on a real: an error.
  subroutine test_scans_and_pairs()
    integer(int64), target :: x(2), sc(2), ex(2)
    real(real64), target :: f(1)
    type(gpuwire_pair_float64), allocatable, target :: dp(:), dq(:)
    type(gpuwire_pair_float32), allocatable, target :: fp(:)
    type(gpuwire_pair_int32), allocatable, target :: ip(:)
    type(gpuwire_buffer) :: bx, bsc, bex, bd, bdq, bf, bfp, bip
    type(gpuwire_request) :: reqs(2)
    integer :: st, q
    x = [int(rank + 1, int64), int(mod(rank, 2), int64)]
    sc = -1
    ex = -7
    call gpuwire_buffer_wrap(x, bx)
    call gpuwire_buffer_wrap(sc, bsc)
    call gpuwire_buffer_wrap(ex, bex)
    call gpuwire_scan(world, bx, bsc, GPUWIRE_SUM)
    call expect(sc(1) == (rank + 1) * (rank + 2) / 2, 'scan SUM')
    call gpuwire_exscan(world, bx, bex, GPUWIRE_SUM, ierror=st)
    call expect_ok(st, 'exscan')
    if (rank == 0) then
      call expect(all(ex == -7), 'exscan leaves rank 0''s recvbuf untouched')
    else
      call expect(ex(1) == rank * (rank + 1) / 2, 'exscan SUM')
    end if
    ! LOR of 0/1 over ranks 0..r: 1 once rank 1 is included (a single rank's value as it is).
    call gpuwire_group_start()
    call gpuwire_iscan(world, bx, bsc, GPUWIRE_LOR, reqs(1))
    call gpuwire_iexscan(world, bx, bex, GPUWIRE_MAX, reqs(2), stream=c_null_ptr)
    call gpuwire_group_end()
    call gpuwire_waitall(reqs)
    call expect(sc(2) == merge(0, 1, rank == 0), 'iscan LOR (grouped)')
    if (rank > 0) call expect(ex(1) == rank, 'iexscan MAX (grouped)')
    ! MINLOC / MAXLOC on float64 pairs: value mod(rank, 2) ties; the lower index wins.
    allocate (dp(2), dq(2), fp(1), ip(1))
    dp(1) = gpuwire_pair_float64(real(mod(rank, 2), real64), 10 - rank)
    dp(2) = gpuwire_pair_float64(real(rank, real64), rank)
    call gpuwire_buffer_wrap(dp, bd)
    call gpuwire_buffer_wrap(dq, bdq)
    call gpuwire_allreduce(world, bd, bdq, GPUWIRE_MINLOC)
    ! Value 0 on every even rank; the lowest index among them: the last even rank's 10 - r.
    q = 2 * ((nranks - 1) / 2)
    call expect(dq(1)%value == 0 .and. dq(1)%index == 10 - q, 'allreduce MINLOC float64_int32 tie')
    call expect(dq(2)%value == 0 .and. dq(2)%index == 0, 'allreduce MINLOC float64_int32')
    fp(1) = gpuwire_pair_float32(1.0, nranks - rank)
    call gpuwire_buffer_wrap(fp, bfp)
    call gpuwire_allreduce(world, bfp, bfp, GPUWIRE_MAXLOC)
    call expect(fp(1)%value == 1.0 .and. fp(1)%index == 1, 'allreduce MAXLOC float32_int32: all tie')
    ip(1) = gpuwire_pair_int32(rank, rank)
    call gpuwire_buffer_wrap(ip, bip)
    call gpuwire_scan(world, bip, bip, GPUWIRE_MAXLOC)
    call expect(ip(1)%value == rank .and. ip(1)%index == rank, 'scan MAXLOC int32_int32 in place')
    ! LAND on a real: an error (on every rank), nothing written.
    f = 2d0
    call gpuwire_buffer_wrap(f, bf)
    call gpuwire_allreduce(world, bf, bf, GPUWIRE_LAND, ierror=st)
    call expect_status(st, int(GPUWIRE_ERROR_UNSUPPORTED_OP), 'allreduce LAND on float64')
    call expect(f(1) == 2d0, 'a refused LAND leaves the buffer')
    call gpuwire_allreduce(world, bx, bsc, GPUWIRE_LAND)
    call expect(sc(1) == 1 .and. sc(2) == 0, 'allreduce LAND on int64')
    call gpuwire_buffer_free(bx)
    call gpuwire_buffer_free(bsc)
    call gpuwire_buffer_free(bex)
    call gpuwire_buffer_free(bd)
    call gpuwire_buffer_free(bdq)
    call gpuwire_buffer_free(bf)
    call gpuwire_buffer_free(bfp)
    call gpuwire_buffer_free(bip)
    deallocate (dp, dq, fp, ip)
  end subroutine test_scans_and_pairs

  subroutine test_nonblocking_and_groups()
    integer :: right, left, r, st
    integer, parameter :: k = 3
    real(real64), target :: x(k), sum_(k), mx(k), all_(k * nranks), allv(k * nranks), bc(k), &
      rs_in(k * nranks), rs_out(k), a2a_in(k * nranks), a2a_out(k * nranks), gat(k * nranks), &
      sca(k), red(k), scs(k * nranks), out(4), in1(4), in2(4)
    type(gpuwire_buffer) :: bx, bsum, bmx, ball, ballv, bbc, brsi, brso, bai, bao, bgat, bsca, &
      bred, bscs, bout, bin1, bin2
    type(gpuwire_request) :: reqs(11), req
    integer(int64) :: counts(nranks)
    x = [(real(rank * 10 + r, real64), r = 1, k)]
    bc = -1
    if (rank == 0) bc = [7d0, 8d0, 9d0]
    rs_in = [(real(rank + r, real64), r = 1, k * nranks)]
    a2a_in = [(real(rank * 100 + r, real64), r = 1, k * nranks)]
    gat = -1
    sca = -1
    red = -1
    scs = [(real(q_of(r) * 10 + mod(r - 1, k) + 1, real64), r = 1, k * nranks)]
    counts = k
    call gpuwire_buffer_wrap(x, bx)
    call gpuwire_buffer_wrap(sum_, bsum)
    call gpuwire_buffer_wrap(mx, bmx)
    call gpuwire_buffer_wrap(all_, ball)
    call gpuwire_buffer_wrap(allv, ballv)
    call gpuwire_buffer_wrap(bc, bbc)
    call gpuwire_buffer_wrap(rs_in, brsi)
    call gpuwire_buffer_wrap(rs_out, brso)
    call gpuwire_buffer_wrap(a2a_in, bai)
    call gpuwire_buffer_wrap(a2a_out, bao)
    call gpuwire_buffer_wrap(gat, bgat)
    call gpuwire_buffer_wrap(sca, bsca)
    call gpuwire_buffer_wrap(red, bred)
    call gpuwire_buffer_wrap(scs, bscs)
    call gpuwire_iallreduce(world, bx, bsum, GPUWIRE_SUM, reqs(1))
    call gpuwire_iallreduce(world, bx, bmx, GPUWIRE_MAX, reqs(2), stream=c_null_ptr)
    call gpuwire_iallgather(world, bx, ball, reqs(3))
    call gpuwire_iallgatherv(world, bx, ballv, reqs(4), recvcounts=counts)
    call gpuwire_ibcast(world, bbc, 0, reqs(5))
    call gpuwire_ireduce_scatter(world, brsi, brso, GPUWIRE_SUM, reqs(6))
    call gpuwire_ialltoall(world, bai, bao, reqs(7))
    call gpuwire_igather(world, bx, bgat, 0, reqs(8))
    call gpuwire_iscatter(world, bscs, bsca, 0, reqs(9))
    call gpuwire_ireduce(world, bx, bred, GPUWIRE_SUM, nranks - 1, reqs(10))
    call gpuwire_ibarrier(world, reqs(11))
    do r = 11, 1, -1
      call gpuwire_wait(reqs(r))
    end do
    call expect(all(reqs == GPUWIRE_REQUEST_NULL), 'nonblocking collectives: every request completed')
    call expect(all(sum_ == [(real(10 * nranks * (nranks - 1) / 2 + nranks * r, real64), r = 1, k)]), &
      'iallreduce SUM')
    call expect(all(mx == [(real((nranks - 1) * 10 + r, real64), r = 1, k)]), 'iallreduce MAX')
    call expect(all(all_ == [((real(q_of(r) * 10 + mod(r - 1, k) + 1, real64)), r = 1, k * nranks)]), &
      'iallgather')
    call expect(all(allv == all_), 'iallgatherv with counts')
    call expect(all(bc == [7d0, 8d0, 9d0]), 'ibcast')
    call expect(all(rs_out == [(real(nranks * (rank * k + r) + nranks * (nranks - 1) / 2, real64), &
      r = 1, k)]), 'ireduce_scatter')
    call expect(all(a2a_out == [(real(q_of(r) * 100 + rank * k + mod(r - 1, k) + 1, real64), &
      r = 1, k * nranks)]), 'ialltoall')
    if (rank == 0) call expect(all(gat == all_), 'igather at the root')
    call expect(all(sca == x), 'iscatter (block r of the root''s input is rank r''s x)')
    if (rank == nranks - 1) call expect(all(red == sum_), 'ireduce at the last rank')
    ! Argument errors come from the call; no request is made.
    call gpuwire_iallreduce(world, bx, ball, GPUWIRE_SUM, req, ierror=st)
    if (nranks > 1) then
      call expect_status(st, int(GPUWIRE_ERROR_COUNT_MISMATCH), 'iallreduce count mismatch')
      call expect(req == GPUWIRE_REQUEST_NULL, 'no request after an argument error')
    else
      call gpuwire_wait(req) ! one rank: the counts agree, the call is valid
    end if
    ! A halo exchange in one group: blocking sends first, then receives.
    right = mod(rank + 1, nranks)
    left = mod(rank + nranks - 1, nranks)
    out = rank
    in1 = -1
    in2 = -1
    call gpuwire_buffer_wrap(out, bout)
    call gpuwire_buffer_wrap(in1, bin1)
    call gpuwire_buffer_wrap(in2, bin2)
    call gpuwire_group_start()
    call gpuwire_group_start(ierror=st) ! nested
    call expect_ok(st, 'nested gpuwire_group_start')
    call gpuwire_send(world, bout, right, 31)
    call gpuwire_send(world, bout, left, 32)
    call gpuwire_group_end()
    call gpuwire_recv(world, bin1, left, 31)
    call gpuwire_irecv(world, bin2, right, 32, req) ! a nonblocking form in the group
    call gpuwire_group_end()
    call expect(all(in1 == left), 'a group of sends then receives: from the left')
    call gpuwire_wait(req)
    call expect(all(in2 == right), 'a group of sends then receives: from the right (irecv)')
    call gpuwire_group_end(ierror=st)
    call expect_status(st, int(GPUWIRE_ERROR_INVALID_ARGUMENT), 'gpuwire_group_end without a start')
    call gpuwire_comm_async_error(world, st)
    call expect_ok(st, 'gpuwire_comm_async_error: none')
    call gpuwire_buffer_free(bout)
    call gpuwire_buffer_free(bin1)
    call gpuwire_buffer_free(bin2)
    call gpuwire_buffer_free(bscs)
    call gpuwire_buffer_free(bx)
    call gpuwire_buffer_free(bsum)
    call gpuwire_buffer_free(bmx)
    call gpuwire_buffer_free(ball)
    call gpuwire_buffer_free(ballv)
    call gpuwire_buffer_free(bbc)
    call gpuwire_buffer_free(brsi)
    call gpuwire_buffer_free(brso)
    call gpuwire_buffer_free(bai)
    call gpuwire_buffer_free(bao)
    call gpuwire_buffer_free(bgat)
    call gpuwire_buffer_free(bsca)
    call gpuwire_buffer_free(bred)
  end subroutine test_nonblocking_and_groups

  ! gpuwire_group_depth, and the forms on plain variables inside a group: refused (the group
  ! would run them at its end, after the compiler freed its copy of y(2,:): the result was lost,
  ! and the next copy at the same address was refused as overlapping), as they work outside.
  ! A complex(real32) needs 4-byte alignment only: the component z below lies at 4 mod 8 (after
  ! a real64 and a real32), and the plain-variable forms take it (refused as "not aligned"
  ! before: a new user's bug hunt, 2026-12-06).
  subroutine test_complex_alignment()
    use iso_c_binding, only: c_loc, c_intptr_t
    type :: holder
      real(real64) :: a
      real(real32) :: w
      complex(real32) :: z(2)
    end type holder
    type(holder), target :: h
    complex(real32) :: s(2)
    integer :: st
    h%a = 0
    h%w = 0
    h%z = cmplx(rank + 1, 2 * (rank + 1), real32)
    s = h%z
    call expect(mod(transfer(c_loc(h%z), 0_c_intptr_t), 8_c_intptr_t) == 4, 'the complex(real32) component lies at 4 mod 8')
    call gpuwire_allreduce(world, s, h%z, GPUWIRE_SUM, ierror=st)
    call expect_status(st, int(GPUWIRE_SUCCESS), 'allreduce into a complex(real32) at 4 mod 8')
    call expect(all(h%z == cmplx(nranks * (nranks + 1) / 2, nranks * (nranks + 1), real32)), 'its sum')
  end subroutine test_complex_alignment

  subroutine test_group_plain_variables()
    real(real64) :: x(4), y(3, 4), z(3, 4)
    integer :: depth, st
    call gpuwire_group_depth(depth)
    call expect(depth == 0, 'gpuwire_group_depth outside a group')
    x = rank + 1
    y = -1
    z = 7
    call gpuwire_group_start()
    call gpuwire_group_start()
    call gpuwire_group_depth(depth)
    call expect(depth == 2, 'gpuwire_group_depth in a nested group')
    call gpuwire_allreduce(world, x, y(2, :), GPUWIRE_SUM, ierror=st)
    call expect_status(st, int(GPUWIRE_ERROR_INVALID_ARGUMENT), 'allreduce of plain variables in a group')
    call gpuwire_bcast(world, z(1, :), 0, ierror=st)
    call expect_status(st, int(GPUWIRE_ERROR_INVALID_ARGUMENT), 'bcast of a plain variable in a group')
    call gpuwire_group_end()
    call gpuwire_group_depth(depth)
    call expect(depth == 1, 'gpuwire_group_depth after an inner end')
    call gpuwire_group_end()
    call expect(all(y == -1), 'refused in a group: nothing written')
    call gpuwire_allreduce(world, x, y(2, :), GPUWIRE_SUM)
    call expect(all(y(2, :) == nranks * (nranks + 1) / 2), 'the same allreduce outside a group')
  end subroutine test_group_plain_variables

  ! The rank whose block element r (1-based) of a size x k gathered array is.
  integer function q_of(r)
    integer, intent(in) :: r
    q_of = (r - 1) / 3
  end function q_of

  subroutine test_point_to_point()
    integer :: right, left, j
    logical :: flag
    real(real64), target, asynchronous :: out(3), in(3)
    type(gpuwire_buffer) :: bout, bin
    type(gpuwire_request) :: reqs(3), req
    type(gpuwire_status_t) :: st
    type(gpuwire_comm) :: dc
    right = mod(rank + 1, nranks)
    left = mod(rank + nranks - 1, nranks)
    out = rank
    in = -1
    call gpuwire_buffer_wrap(out, bout)
    call gpuwire_buffer_wrap(in, bin)
    call gpuwire_sendrecv(world, bout, right, 1, bin, left, 1)
    call expect(all(in == left), 'sendrecv around the ring')
    if (nranks > 1) then
      in = -1
      if (mod(rank, 2) == 0) then
        call gpuwire_send(world, bout, right, 2)
        call gpuwire_recv(world, bin, left, 2)
      else
        call gpuwire_recv(world, bin, left, 2)
        call gpuwire_send(world, bout, right, 2)
      end if
      call expect(all(in == left), 'send and recv')
    end if
    call gpuwire_send(world, bout, GPUWIRE_PROC_NULL, 0)
    in = -1
    call gpuwire_irecv(world, bin, left, 3, reqs(1))
    call gpuwire_isend(world, bout, right, 3, reqs(2))
    call expect(reqs(2) /= GPUWIRE_REQUEST_NULL, 'gpuwire_isend gives a request')
    call gpuwire_waitall(reqs) ! reqs(3) is NULL: skipped
    call expect(all(reqs == GPUWIRE_REQUEST_NULL) .and. all(in == left), 'isend, irecv, waitall')
    in = -1
    call gpuwire_isend(world, bout, right, 4, reqs(1), stream=c_null_ptr)
    call gpuwire_irecv(world, bin, left, 4, req)
    flag = .false.
    do j = 1, 100000000
      call gpuwire_test(req, flag)
      if (flag) exit
    end do
    call expect(flag .and. req == GPUWIRE_REQUEST_NULL .and. all(in == left), 'gpuwire_test')
    call gpuwire_wait(reqs(1))
    call gpuwire_wait(reqs(1)) ! NULL: returns at once
    call gpuwire_isend(world, bout, nranks, 5, req, ierror=ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_ARGUMENT), 'isend to a rank out of range')
    ! gpuwire_request_free: a completed request is released; a pending receive goes on, as after
    ! MPI_Request_free, and takes the message sent later. gpuwire_cancel withdraws a receive
    ! whose message has not matched: it completes at once, cancelled, its buffer untouched.
    call gpuwire_isend(world, bout, GPUWIRE_PROC_NULL, 5, req)
    call gpuwire_request_free(req)
    call expect(req == GPUWIRE_REQUEST_NULL, 'gpuwire_request_free of a completed request')
    call gpuwire_comm_dup(world, dc)
    in = -1
    call gpuwire_irecv(dc, bin, left, 6, req)
    call gpuwire_cancel(req)
    call gpuwire_wait_status(req, st)
    call expect(req == GPUWIRE_REQUEST_NULL .and. st%cancelled == 1 .and. all(in == -1), &
      'a cancelled receive completes, cancelled, its buffer untouched')
    call gpuwire_irecv(dc, bin, left, 7, req)
    call gpuwire_request_free(req)
    call expect(req == GPUWIRE_REQUEST_NULL, 'gpuwire_request_free of a pending receive')
    call gpuwire_barrier(dc) ! usable
    call gpuwire_send(dc, bout, right, 7)
    ! Each test of a request (here one to PROC_NULL) completes what freed requests received.
    do j = 1, 1000000
      call gpuwire_isend(dc, bout, GPUWIRE_PROC_NULL, 8, req)
      call gpuwire_test(req, flag)
      if (all(in == left)) exit
    end do
    call expect(all(in == left), 'the freed receive took the message sent after its free')
    call gpuwire_comm_free(dc)
    call gpuwire_buffer_free(bout)
    call gpuwire_buffer_free(bin)
  end subroutine test_point_to_point

  ! Issue 13: wildcards and receive status, probes, waitany / testany / testall, abort, the
  ! asynchronous error, a distributed array's communicator. Messages to oneself (any rank count).
  subroutine test_status_and_probe()
    integer(int32), target, asynchronous :: out(3), in(5), small(2)
    type(gpuwire_buffer) :: bout, bin, bsmall
    type(gpuwire_request) :: reqs(2), req
    type(gpuwire_status_t) :: st, sts(2)
    type(gpuwire_comm) :: dc, ac
    type(gpuwire_darray) :: d
    integer(int64), allocatable :: lens(:)
    integer :: idx, j, n, aerr, somei(2)
    logical :: flag
    out = [7, 8, 9]
    in = -1
    call gpuwire_buffer_wrap(out, bout)
    call gpuwire_buffer_wrap(in, bin)
    call gpuwire_buffer_wrap(small, bsmall)
    ! A shorter message than the buffer, with wildcards: source, tag and count reported.
    call gpuwire_isend(world, bout, rank, 11, req)
    call gpuwire_recv_status(world, bin, GPUWIRE_ANY_SOURCE, GPUWIRE_ANY_TAG, st)
    call expect(st%source == rank .and. st%tag == 11 .and. st%count == 3 .and. st%error == 0, &
      'gpuwire_recv_status with wildcards')
    call expect(all(in(1:3) == out) .and. all(in(4:5) == -1), 'a short message fills the start')
    call gpuwire_wait(req)
    ! Probe, iprobe, then a longer message than the buffer: GPUWIRE_ERROR_TRUNCATE.
    call gpuwire_isend(world, bout, rank, 12, req)
    call gpuwire_probe(world, GPUWIRE_ANY_SOURCE, 12, GPUWIRE_INT32, st)
    call expect(st%source == rank .and. st%count == 3, 'gpuwire_probe')
    call gpuwire_iprobe(world, rank, 12, GPUWIRE_INT8, flag, st)
    call expect(flag .and. st%count == 12, 'gpuwire_iprobe (in bytes)')
    call gpuwire_iprobe(world, rank, 13, GPUWIRE_INT32, flag, st)
    call expect(.not. flag, 'gpuwire_iprobe finds nothing')
    small = -1
    call gpuwire_recv_status(world, bsmall, rank, 12, st, ierror=ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_TRUNCATE), 'a longer message: truncated')
    call expect(all(small == -1), 'the truncated receive wrote nothing')
    call gpuwire_wait(req)
    ! irecv_status with wait_status / test_status.
    call gpuwire_irecv_status(world, bin, GPUWIRE_ANY_SOURCE, 14, req)
    call gpuwire_send(world, bout, rank, 14)
    call gpuwire_wait_status(req, st)
    call expect(st%tag == 14 .and. st%count == 3 .and. req == GPUWIRE_REQUEST_NULL, 'gpuwire_wait_status')
    call gpuwire_irecv_status(world, bin, rank, 15, req)
    call gpuwire_send(world, bout, rank, 15)
    flag = .false.
    do j = 1, 100000000
      call gpuwire_test_status(req, flag, st)
      if (flag) exit
    end do
    call expect(flag .and. st%tag == 15, 'gpuwire_test_status')
    ! waitany (1-based index), testany, testall, with null requests.
    reqs = GPUWIRE_REQUEST_NULL
    call gpuwire_waitany(reqs, idx, st)
    call expect(idx == GPUWIRE_UNDEFINED .and. st%source == GPUWIRE_ANY_SOURCE, 'waitany of nulls')
    call gpuwire_isend(world, bout, rank, 16, reqs(1))
    call gpuwire_irecv_status(world, bin, rank, 16, reqs(2))
    call gpuwire_waitany(reqs, idx)
    call expect(idx == 1 .or. idx == 2, 'gpuwire_waitany')
    flag = .false.
    do j = 1, 100000000
      call gpuwire_testany(reqs, idx, flag, st)
      if (flag) exit
    end do
    call expect(flag .and. all(reqs == GPUWIRE_REQUEST_NULL), 'gpuwire_testany')
    call gpuwire_isend(world, bout, rank, 17, reqs(1))
    call gpuwire_irecv_status(world, bin, rank, 17, reqs(2))
    flag = .false.
    do j = 1, 100000000
      call gpuwire_testall(reqs, flag, sts)
      if (flag) exit
    end do
    call expect(flag .and. sts(2)%tag == 17 .and. sts(2)%count == 3 .and. sts(1)%count == 0, &
      'gpuwire_testall')
    call gpuwire_testall(reqs(1:1), flag, sts, ierror=ierr)
    call expect(flag .and. ierr == 0, 'gpuwire_testall of nulls')
    ! gpuwire_testsome / gpuwire_waitsome: 1-based indices, in order, with their statuses.
    call gpuwire_isend(world, bout, rank, 19, reqs(1))
    call gpuwire_irecv_status(world, bin, rank, 19, reqs(2))
    n = 0
    do j = 1, 100000000
      call gpuwire_testsome(reqs, idx, somei, sts)
      if (idx > 0) n = n + idx
      if (idx > 0) then
        if (somei(idx) == 2) call expect(sts(idx)%tag == 19 .and. sts(idx)%count == 3, 'gpuwire_testsome status')
      end if
      if (n == 2) exit
    end do
    call expect(n == 2 .and. all(reqs == GPUWIRE_REQUEST_NULL), 'gpuwire_testsome')
    call gpuwire_waitsome(reqs, idx, somei)
    call expect(idx == GPUWIRE_UNDEFINED, 'gpuwire_waitsome of nulls')
    call gpuwire_irecv_status(world, bin, rank, 20, reqs(2))
    call gpuwire_send(world, bout, rank, 20)
    call gpuwire_waitsome(reqs, idx, somei, sts)
    call expect(idx == 1 .and. somei(1) == 2 .and. sts(1)%tag == 20 .and. all(in(1:3) == out), 'gpuwire_waitsome')
    call gpuwire_waitsome(reqs, idx, somei(1:1), ierror=ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_ARGUMENT), 'gpuwire_waitsome with too few indices')
    call gpuwire_recv_status(world, bin, -5, 0, st, ierror=ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_ARGUMENT), 'a bad source')
    ! Abort: later calls fail at once; the asynchronous error says broken.
    call gpuwire_comm_dup(world, ac)
    call gpuwire_comm_get_async_error(ac, aerr)
    call expect(aerr == GPUWIRE_SUCCESS, 'no asynchronous error')
    call gpuwire_comm_abort(ac)
    call gpuwire_send(ac, bout, rank, 1, ierror=ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_COMM_BROKEN), 'a send after gpuwire_comm_abort')
    call gpuwire_comm_get_async_error(ac, aerr)
    call expect(aerr == GPUWIRE_ERROR_COMM_BROKEN, 'gpuwire_comm_get_async_error after abort')
    call gpuwire_comm_free(ac)
    ! A distributed array's communicator sizes local_lens.
    call gpuwire_darray_create(world, int(4 * nranks, int64), GPUWIRE_DECIDE, GPUWIRE_INT32, &
      GPUWIRE_SPACE_HOST, GPUWIRE_PARTITION_SCATTER, d)
    call gpuwire_darray_comm(d, dc, n)
    call expect(n == nranks .and. dc /= GPUWIRE_COMM_NULL, 'gpuwire_darray_comm')
    allocate (lens(n))
    call gpuwire_darray_local_lens(d, lens)
    call expect(all(lens == 4), 'local_lens sized by darray_comm')
    call gpuwire_comm_free(dc)
    if (nranks > 1) then
      deallocate (lens)
      allocate (lens(n - 1))
      call gpuwire_darray_local_lens(d, lens, ierror=ierr)
      call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_ARGUMENT), 'local_lens too short')
    end if
    call gpuwire_darray_free(d)
    call gpuwire_buffer_free(bout)
    call gpuwire_buffer_free(bin)
    call gpuwire_buffer_free(bsmall)
  end subroutine test_status_and_probe

  subroutine test_collectives()
    type(gpuwire_comm) :: checked
    type(gpuwire_config) :: cfg
    real(real64), target :: x(4), total(4)
    integer(int32), target :: mine(2), everyone(2, 0:nranks - 1)
    integer(int32), target, allocatable :: vsend(:), vrecv(:), rs(:), a2a(:), a2r(:), g(:)
    integer(int32), target :: block(2), one(1), got(1)
    integer(int64) :: counts(nranks), wrong_counts(nranks + 1)
    complex(real64), target :: z(2)
    type(gpuwire_buffer) :: bx, btotal, b1, b2, bnull
    type(gpuwire_request) :: req
    integer :: j, sum_counts
    call gpuwire_barrier(world)
    ! allreduce in place and out of place; complex sum.
    x = rank + 1
    call gpuwire_buffer_wrap(x, bx)
    call gpuwire_allreduce(world, bx, bx, GPUWIRE_SUM)
    call expect(all(x == nranks * (nranks + 1) / 2.0_real64), 'allreduce in place')
    z = cmplx(rank, 1, real64)
    call gpuwire_buffer_wrap(z, b1)
    call gpuwire_allreduce(world, b1, b1, GPUWIRE_SUM)
    call expect(all(abs(z - cmplx(nranks * (nranks - 1) / 2, nranks, real64)) < 1e-12_real64), &
      'complex(real64) allreduce')
    call gpuwire_buffer_free(b1)
    ! bcast from the last rank.
    total = -1
    if (rank == nranks - 1) total = 42
    call gpuwire_buffer_wrap(total, btotal)
    call gpuwire_bcast(world, btotal, nranks - 1)
    call expect(all(total == 42), 'bcast')
    ! reduce to rank 0; non-roots pass GPUWIRE_BUFFER_NULL.
    x = rank
    total = -1
    bnull = GPUWIRE_BUFFER_NULL
    if (rank == 0) then
      call gpuwire_reduce(world, bx, btotal, GPUWIRE_MAX, 0)
      call expect(all(total == nranks - 1), 'reduce MAX at the root')
    else
      call gpuwire_reduce(world, bx, bnull, GPUWIRE_MAX, 0)
    end if
    ! allgather of rank-2 data into a rank-2 array.
    mine = rank
    everyone = -1
    call gpuwire_buffer_wrap(mine, b1)
    call gpuwire_buffer_wrap(everyone, b2)
    call gpuwire_allgather(world, b1, b2)
    call expect(all(everyone(:, nranks - 1) == nranks - 1) .and. all(everyone(:, 0) == 0), &
      'allgather')
    call gpuwire_buffer_free(b1)
    call gpuwire_buffer_free(b2)
    ! allgatherv: rank r sends r + 1 elements; with counts, without, and with a wrong count.
    allocate (vsend(rank + 1))
    vsend = rank
    sum_counts = nranks * (nranks + 1) / 2
    allocate (vrecv(sum_counts))
    counts = [(int(j + 1, int64), j = 0, nranks - 1)]
    call gpuwire_buffer_wrap(vsend, b1)
    call gpuwire_buffer_wrap(vrecv, b2)
    vrecv = -1
    call gpuwire_allgatherv(world, b1, b2, counts)
    call expect(vrecv(1) == 0 .and. vrecv(sum_counts) == nranks - 1, 'allgatherv with counts')
    vrecv = -1
    call gpuwire_allgatherv(world, b1, b2)
    call expect(vrecv(sum_counts) == nranks - 1, 'allgatherv, counts exchanged')
    vrecv = -1
    call gpuwire_allgatherv(world, b1, b2, int(counts))
    call expect(vrecv(1) == 0 .and. vrecv(sum_counts) == nranks - 1, 'allgatherv with default-integer counts')
    vrecv = -1
    call gpuwire_iallgatherv(world, b1, b2, req, int(counts))
    call gpuwire_wait(req)
    call expect(vrecv(1) == 0 .and. vrecv(sum_counts) == nranks - 1, 'iallgatherv with default-integer counts')
    ! A recvcounts of the wrong length fails on every rank of a checking communicator.
    call gpuwire_config_init(cfg)
    cfg%check = 1
    call gpuwire_comm_world(checked, cfg)
    wrong_counts = 1
    call gpuwire_allgatherv(checked, b1, b2, wrong_counts, ierror=ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_ARGUMENT), 'allgatherv, wrong recvcounts')
    call gpuwire_barrier(checked) ! still usable: the failure was agreed
    ! The same in the nonblocking form on rank 0 only: its call fails, the others' waits do
    ! (they waited for ever before: the binding made no C call on rank 0).
    if (rank == 0) then
      call gpuwire_iallgatherv(checked, b1, b2, req, wrong_counts, ierror=ierr)
      call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_ARGUMENT), 'iallgatherv, wrong recvcounts')
    else
      call gpuwire_iallgatherv(checked, b1, b2, req, counts, ierror=ierr)
      call expect_ok(ierr, 'iallgatherv beside a rank with wrong recvcounts')
      call gpuwire_wait(req, ierr)
      call expect_status(ierr, int(GPUWIRE_ERROR_REMOTE_ARGUMENT), 'iallgatherv beside a rank with wrong recvcounts: its wait')
    end if
    call gpuwire_barrier(checked)
    call gpuwire_comm_free(checked)
    call gpuwire_buffer_free(b1)
    call gpuwire_buffer_free(b2)
    ! reduce_scatter: block r of the sum.
    allocate (rs(2 * nranks))
    rs = [(j, j = 0, 2 * nranks - 1)]
    call gpuwire_buffer_wrap(rs, b1)
    call gpuwire_buffer_wrap(block, b2)
    call gpuwire_reduce_scatter(world, b1, b2, GPUWIRE_SUM)
    call expect(block(1) == 2 * rank * nranks .and. block(2) == (2 * rank + 1) * nranks, &
      'reduce_scatter')
    call gpuwire_buffer_free(b1)
    call gpuwire_buffer_free(b2)
    ! alltoall.
    allocate (a2a(nranks), a2r(nranks))
    a2a = [(100 * rank + j, j = 0, nranks - 1)]
    call gpuwire_buffer_wrap(a2a, b1)
    call gpuwire_buffer_wrap(a2r, b2)
    call gpuwire_alltoall(world, b1, b2)
    call expect(a2r(nranks) == 100 * (nranks - 1) + rank, 'alltoall')
    call gpuwire_buffer_free(b1)
    call gpuwire_buffer_free(b2)
    ! gather and scatter at rank 0.
    allocate (g(nranks))
    g = -1
    one = 3 * rank
    call gpuwire_buffer_wrap(one, b1)
    b2 = GPUWIRE_BUFFER_NULL
    if (rank == 0) call gpuwire_buffer_wrap(g, b2)
    call gpuwire_gather(world, b1, b2, 0)
    if (rank == 0) call expect(g(nranks) == 3 * (nranks - 1), 'gather')
    got = -1
    call gpuwire_buffer_free(b1)
    call gpuwire_buffer_wrap(got, b1)
    call gpuwire_scatter(world, b2, b1, 0)
    call expect(got(1) == 3 * rank, 'scatter')
    call gpuwire_buffer_free(b1)
    if (rank == 0) call gpuwire_buffer_free(b2)
    call gpuwire_buffer_free(bx)
    call gpuwire_buffer_free(btotal)
  end subroutine test_collectives

  ! The v-collectives, blocking and nonblocking, with values computed here: rank r sends r + 1
  ! elements (100 r + j) to rank j; gatherv / scatterv at the last rank with rank j's block of
  ! j + 1 elements placed in reverse rank order; reduce_scatterv with rank j's block j + 1
  ! elements.
  subroutine test_vcollectives()
    integer(int32), target, allocatable :: s(:), r(:), g(:), rs(:), out(:), ip(:)
    integer(int64) :: sc(nranks), sd(nranks), rc(nranks), rd(nranks), gc(nranks), gd(nranks)
    integer(int64) :: short(1), none(0)
    integer :: none4(0)
    integer(int32), target :: blk(2), sent(nranks)
    type(gpuwire_buffer) :: b1, b2, bnull
    type(gpuwire_request) :: req
    integer :: j, k, root, total, pass
    logical :: good
    bnull = GPUWIRE_BUFFER_NULL
    root = nranks - 1
    ! alltoallv, then ialltoallv.
    allocate (s((rank + 1) * nranks), r(nranks * (nranks + 1) / 2))
    do j = 0, nranks - 1
      sc(j + 1) = rank + 1
      sd(j + 1) = j * (rank + 1)
      rc(j + 1) = j + 1
      rd(j + 1) = j * (j + 1) / 2
      s(j * (rank + 1) + 1:(j + 1) * (rank + 1)) = 100 * rank + j
    end do
    call gpuwire_buffer_wrap(s, b1)
    call gpuwire_buffer_wrap(r, b2)
    do pass = 1, 4 ! passes 3 and 4 with default-integer counts and displacements
      r = -1
      if (pass == 1) then
        call gpuwire_alltoallv(world, b1, sc, sd, b2, rc, rd, ierror=ierr)
      else if (pass == 2) then
        call gpuwire_ialltoallv(world, b1, sc, sd, b2, rc, rd, req, ierror=ierr)
        call gpuwire_wait(req)
      else if (pass == 3) then
        call gpuwire_alltoallv(world, b1, int(sc), int(sd), b2, int(rc), int(rd), ierror=ierr)
      else
        call gpuwire_ialltoallv(world, b1, int(sc), int(sd), b2, int(rc), int(rd), req, ierror=ierr)
        call gpuwire_wait(req)
      end if
      call expect_ok(ierr, 'alltoallv')
      good = .true.
      do j = 0, nranks - 1
        good = good .and. all(r(rd(j + 1) + 1:rd(j + 1) + j + 1) == 100 * j + rank)
      end do
      call expect(good, 'alltoallv / ialltoallv')
    end do
    ! A count array of the wrong length: INVALID_ARGUMENT (the C call is still made, so a
    ! checking communicator's other ranks would fail too).
    short = 1
    call gpuwire_alltoallv(world, b1, short, sd, b2, rc, rd, ierror=ierr)
    if (nranks /= 1) call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_ARGUMENT), &
      'alltoallv with a short sendcounts')
    call gpuwire_buffer_free(b1)
    call gpuwire_buffer_free(b2)
    ! In place (the send buffer is the receive buffer, or a second handle of its memory): the
    ! send arrays are not read, as in C, so empty ones will do. Block j (2 elements at 2 j)
    ! holds 100 rank + j before, 100 j + rank after.
    allocate (ip(2 * nranks))
    call gpuwire_buffer_wrap(ip, b1)
    call gpuwire_buffer_wrap(ip, b2)
    do j = 0, nranks - 1
      rc(j + 1) = 2
      rd(j + 1) = 2 * j
    end do
    do pass = 1, 4 ! pass 3 with default-integer arrays; passes 3 and 4 through the second handle
      do j = 0, nranks - 1
        ip(2 * j + 1:2 * j + 2) = 100 * rank + j
      end do
      if (pass == 1) then
        call gpuwire_alltoallv(world, b1, none, none, b1, rc, rd, ierror=ierr)
      else if (pass == 2) then
        call gpuwire_ialltoallv(world, b1, none, none, b1, rc, rd, req, ierror=ierr)
        call gpuwire_wait(req)
      else if (pass == 3) then
        call gpuwire_alltoallv(world, b2, none4, none4, b1, int(rc), int(rd), ierror=ierr)
      else
        call gpuwire_ialltoallv(world, b1, none, none, b2, rc, rd, req, ierror=ierr)
        call gpuwire_wait(req)
      end if
      call expect_ok(ierr, 'alltoallv in place')
      good = .true.
      do j = 0, nranks - 1
        good = good .and. all(ip(2 * j + 1:2 * j + 2) == 100 * j + rank)
      end do
      call expect(good, 'alltoallv / ialltoallv in place, empty send arrays')
    end do
    call gpuwire_buffer_free(b1)
    call gpuwire_buffer_free(b2)
    ! gatherv and igatherv to the last rank, blocks in reverse rank order.
    total = nranks * (nranks + 1) / 2
    allocate (g(total))
    k = 0
    do j = nranks - 1, 0, -1
      gc(j + 1) = j + 1
      gd(j + 1) = k
      k = k + j + 1
    end do
    deallocate (s)
    allocate (s(rank + 1))
    s = 7 * rank
    call gpuwire_buffer_wrap(s, b1)
    call gpuwire_buffer_wrap(g, b2)
    do pass = 1, 4 ! passes 3 and 4 with default-integer counts and displacements
      g = -1
      if (pass == 1) then
        if (rank == root) then
          call gpuwire_gatherv(world, b1, b2, gc, gd, root)
        else
          call gpuwire_gatherv(world, b1, bnull, gc, gd, root)
        end if
      else if (pass == 2) then
        if (rank == root) then
          call gpuwire_igatherv(world, b1, b2, gc, gd, root, req)
        else
          call gpuwire_igatherv(world, b1, bnull, gc, gd, root, req)
        end if
        call gpuwire_wait(req)
      else if (pass == 3) then
        call gpuwire_gatherv(world, b1, merge(b2, bnull, rank == root), int(gc), int(gd), root)
      else
        call gpuwire_igatherv(world, b1, merge(b2, bnull, rank == root), int(gc), int(gd), root, req)
        call gpuwire_wait(req)
      end if
      if (rank == root) then
        good = .true.
        do j = 0, nranks - 1
          good = good .and. all(g(gd(j + 1) + 1:gd(j + 1) + j + 1) == 7 * j)
        end do
        call expect(good, 'gatherv / igatherv at the last rank')
      end if
    end do
    ! scatterv and iscatterv from the last rank: rank j gets its block back from g (7 j).
    do pass = 1, 4 ! passes 3 and 4 with default-integer counts and displacements
      s = -1
      if (pass == 1) then
        call gpuwire_scatterv(world, b2, gc, gd, b1, root)
      else if (pass == 2) then
        call gpuwire_iscatterv(world, b2, gc, gd, b1, root, req)
        call gpuwire_wait(req)
      else if (pass == 3) then
        call gpuwire_scatterv(world, b2, int(gc), int(gd), b1, root)
      else
        call gpuwire_iscatterv(world, b2, int(gc), int(gd), b1, root, req)
        call gpuwire_wait(req)
      end if
      call expect(all(s == 7 * rank), 'scatterv / iscatterv from the last rank')
    end do
    call gpuwire_buffer_free(b1)
    call gpuwire_buffer_free(b2)
    ! reduce_scatterv and ireduce_scatterv: rank j gets j + 1 elements of the sum.
    total = nranks * (nranks + 1) / 2
    allocate (rs(total), out(rank + 1))
    rs = [(j + rank, j = 0, total - 1)]
    do j = 0, nranks - 1
      rc(j + 1) = j + 1
    end do
    call gpuwire_buffer_wrap(rs, b1)
    call gpuwire_buffer_wrap(out, b2)
    k = rank * (rank + 1) / 2 ! this rank's offset
    do pass = 1, 4 ! passes 3 and 4 with default-integer counts
      out = -1
      if (pass == 1) then
        call gpuwire_reduce_scatterv(world, b1, b2, rc, GPUWIRE_SUM)
      else if (pass == 2) then
        call gpuwire_ireduce_scatterv(world, b1, b2, rc, GPUWIRE_SUM, req)
        call gpuwire_wait(req)
      else if (pass == 3) then
        call gpuwire_reduce_scatterv(world, b1, b2, int(rc), GPUWIRE_SUM)
      else
        call gpuwire_ireduce_scatterv(world, b1, b2, int(rc), GPUWIRE_SUM, req)
        call gpuwire_wait(req)
      end if
      good = .true.
      do j = 1, rank + 1
        good = good .and. out(j) == nranks * (k + j - 1) + nranks * (nranks - 1) / 2
      end do
      call expect(good, 'reduce_scatterv / ireduce_scatterv')
    end do
    call gpuwire_buffer_free(b1)
    call gpuwire_buffer_free(b2)
    ! reduce_scatter_block and ireduce_scatter_block (gpuwire_reduce_scatter's new name).
    sent = [(j, j = 0, nranks - 1)]
    call gpuwire_buffer_wrap(sent, b1)
    call gpuwire_buffer_wrap(blk(1:1), b2)
    blk = -1
    call gpuwire_reduce_scatter_block(world, b1, b2, GPUWIRE_SUM)
    call expect(blk(1) == nranks * rank, 'reduce_scatter_block')
    blk = -1
    call gpuwire_ireduce_scatter_block(world, b1, b2, GPUWIRE_SUM, req)
    call gpuwire_wait(req)
    call expect(blk(1) == nranks * rank, 'ireduce_scatter_block')
    call gpuwire_buffer_free(b1)
    call gpuwire_buffer_free(b2)
  end subroutine test_vcollectives

  ! Distributed arrays: every gpuwire_darray generic, with answers computed here from the global
  ! data (11 elements: uneven on 2 and 3 ranks); host arrays and scalars of the wrong type or
  ! length, sections, the c_ptr forms; a 2-D array with a halo; complex dot.
  subroutine test_darray()
    integer, parameter :: n = 11
    type(gpuwire_darray) :: x, y, bc, z, grid, grid2, cx, empty, cart, cart2, wrapped
    integer(int64) :: procs(2), coords(2), starts(2), halo2(2)
    logical :: per2(2)
    integer(int32), allocatable, target :: own(:, :)
    real(real64), target :: g(n), h(n), out(n), m(3, n), val
    real(real64) :: want(n), d, r, n1, n2
    real(real32) :: wrong(n), r32
    integer(int64) :: v, off, len, lens(nranks + 2), shape2(2), none(0)
    integer :: i, ndim, dt, sp, part, rows, r0, nr
    integer(int64) :: o, l
    integer(int32) :: isum, imin, imax
    integer(int32), target :: gv(3, 2 * nranks + 1)
    integer(int32), pointer :: w(:, :)
    complex(real64), target :: cv(4), zc
    real(real64), pointer :: mine(:)
    type(gpuwire_buffer) :: b
    type(c_ptr) :: p
    character(len=1024) :: message

    call split(n, rank, off, len)
    g = [(real(i - 5, real64), i = 1, n)] ! -4 .. 6
    h = [(real(2 * i - 1, real64), i = 1, n)]

    ! Creation in every integer form, queries.
    call gpuwire_darray_create(world, n, GPUWIRE_DECIDE, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &
      GPUWIRE_PARTITION_SCATTER, x)
    call gpuwire_darray_create(world, int(n, int64), GPUWIRE_DECIDE, GPUWIRE_FLOAT64, &
      GPUWIRE_SPACE_HOST, GPUWIRE_PARTITION_SCATTER, y)
    call gpuwire_darray_create(world, int(n, int64), -1_int64, GPUWIRE_FLOAT64, &
      GPUWIRE_SPACE_HOST, GPUWIRE_PARTITION_SCATTER, z, ierr)
    call expect_ok(ierr, 'gpuwire_darray_create with int64 lengths')
    call expect(x /= GPUWIRE_DARRAY_NULL .and. x /= y, 'distinct darray handles')
    call gpuwire_darray_global_len(x, v)
    call expect(v == n, 'gpuwire_darray_global_len')
    call gpuwire_darray_local_len(x, v)
    call expect(v == len, 'gpuwire_darray_local_len')
    call gpuwire_darray_global_offset(x, v)
    call expect(v == off, 'gpuwire_darray_global_offset')
    lens = -7
    call gpuwire_darray_local_lens(x, lens)
    do i = 0, nranks - 1
      call split(n, i, o, l)
      call expect(lens(i + 1) == l, 'gpuwire_darray_local_lens')
    end do
    call expect(all(lens(nranks + 1:) == -7), 'local_lens writes one entry per rank only')
    call gpuwire_darray_ndim(x, ndim)
    call gpuwire_darray_dtype(x, dt)
    call gpuwire_darray_space(x, sp)
    call gpuwire_darray_partition(x, part)
    call expect(ndim == 1 .and. dt == GPUWIRE_FLOAT64 .and. sp == GPUWIRE_SPACE_HOST .and. &
      part == GPUWIRE_PARTITION_SCATTER, 'ndim, dtype, space, partition')
    call gpuwire_darray_halo(x, v)
    call expect(v == 0, 'gpuwire_darray_halo')
    shape2 = -1
    call gpuwire_darray_shape(x, shape2)
    call expect(shape2(1) == n .and. shape2(2) == -1, 'gpuwire_darray_shape (1 of 2 entries)')
    call gpuwire_darray_local_shape(x, shape2)
    call expect(shape2(1) == len, 'gpuwire_darray_local_shape')
    call gpuwire_darray_shape(x, none, ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_COUNT_MISMATCH), 'gpuwire_darray_shape into 0 entries')
    call gpuwire_darray_data(x, p)
    call gpuwire_darray_local(x, b)
    call gpuwire_buffer_count(b, v)
    call expect(v == len, 'gpuwire_darray_local counts the owned elements')
    if (len > 0) call expect(c_associated(p, buffer_address(b)), 'gpuwire_darray_data = local')
    call gpuwire_buffer_free(b)
    call gpuwire_darray_local_with_halo(x, b)
    call gpuwire_buffer_count(b, v)
    call expect(v == len, 'gpuwire_darray_local_with_halo without a halo')
    call gpuwire_buffer_free(b)

    ! set_global, allgather, gather: arrays, sections, c_ptr forms.
    call gpuwire_darray_set_global(x, g)
    call gpuwire_darray_data(x, p)
    if (len > 0) then
      call c_f_pointer(p, mine, [len])
      call expect(all(mine == g(off + 1:off + len)), 'set_global: the owned part')
    end if
    out = 0
    call gpuwire_darray_allgather(x, out)
    call expect(all(out == g), 'gpuwire_darray_allgather')
    m = 0
    call gpuwire_darray_allgather(x, m(2, :)) ! a section (stride 3): copied out by the compiler
    call expect(all(m(2, :) == g) .and. all(m(1, :) == 0) .and. all(m(3, :) == 0), &
      'allgather into the section m(2,:)')
    out = 0
    if (rank == nranks - 1) then
      call gpuwire_darray_gather(x, out, nranks - 1)
      call expect(all(out == g), 'gpuwire_darray_gather at the root')
    else
      call gpuwire_darray_gather(x, out(1:0), nranks - 1) ! not used here: any size
    end if
    call gpuwire_darray_set_global(y, c_loc(h))
    out = 0
    call gpuwire_darray_allgather(y, c_loc(out), stream=c_null_ptr)
    call expect(all(out == h), 'set_global and allgather, c_ptr forms')
    out = 0
    if (rank == 0) then
      call gpuwire_darray_gather(y, c_loc(out), 0)
      call expect(all(out == h), 'gather, c_ptr form')
    else
      call gpuwire_darray_gather(y, c_null_ptr, 0)
    end if
    wrong = 5
    call gpuwire_darray_allgather(x, wrong, ierror=ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_DTYPE_MISMATCH), 'allgather into real32')
    call gpuwire_last_error(message)
    call expect(index(message, 'gpuwire_darray_allgather') > 0 .and. &
      index(message, 'GPUWIRE_FLOAT32') > 0, 'the message names the call and the type: ' &
      // trim(message))
    call expect(all(wrong == 5), 'the array is unchanged after the error')
    call gpuwire_darray_allgather(x, out(1:n - 1), ierror=ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_COUNT_MISMATCH), 'allgather into 10 elements')
    call gpuwire_darray_set_global(x, g(1:n - 1), ierror=ierr)
    if (len > 0) then
      call expect_status(ierr, int(GPUWIRE_ERROR_COUNT_MISMATCH), 'set_global from 10 elements')
    else
      call expect_ok(ierr, 'set_global: a rank owning nothing does not read src')
    end if

    ! Elementwise: y = 2 x + y, y = y / 2, then the c_ptr forms.
    call gpuwire_darray_axpy(2.0_real64, x, y)
    call gpuwire_darray_scale(y, 0.5_real64)
    want = g + h / 2
    call gpuwire_darray_allgather(y, out)
    call expect(all(out == want), 'gpuwire_darray_axpy and gpuwire_darray_scale')
    val = -1
    call gpuwire_darray_axpy(c_loc(val), x, y) ! y = y - x = h / 2
    val = 4
    call gpuwire_darray_scale(y, c_loc(val))   ! y = 2 h
    call gpuwire_darray_allgather(y, out)
    call expect(all(out == 2 * h), 'axpy and scale, c_ptr forms')
    call gpuwire_darray_axpy(2.0_real32, x, y, ierror=ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_DTYPE_MISMATCH), 'axpy with a real32 alpha')
    call gpuwire_last_error(message)
    call expect(index(message, 'alpha') > 0, 'the message names alpha: ' // trim(message))
    call gpuwire_darray_set_global(y, want)

    ! Reductions.
    call gpuwire_darray_dot(x, y, d)
    call expect(d == sum(g * want), 'gpuwire_darray_dot')
    d = 0
    call gpuwire_darray_dot(x, y, c_loc(val))
    call expect(val == sum(g * want), 'gpuwire_darray_dot, c_ptr form')
    n1 = sum(abs(g))
    n2 = sqrt(sum(g * g))
    call gpuwire_darray_norm(x, GPUWIRE_NORM_1, r)
    call expect(r == n1, 'gpuwire_darray_norm 1')
    call gpuwire_darray_norm(x, GPUWIRE_NORM_2, r)
    call expect(abs(r - n2) < 1e-12_real64, 'gpuwire_darray_norm 2')
    call gpuwire_darray_norm(x, GPUWIRE_NORM_INF, r, stream=c_null_ptr)
    call expect(r == 6, 'gpuwire_darray_norm inf')
    call gpuwire_darray_sum(x, r)
    call expect(r == sum(g), 'gpuwire_darray_sum')
    call gpuwire_darray_min(x, r)
    call expect(r == -4, 'gpuwire_darray_min')
    call gpuwire_darray_max(x, r)
    call expect(r == 6, 'gpuwire_darray_max')
    call gpuwire_darray_sum(x, c_loc(val))
    call expect(val == sum(g), 'gpuwire_darray_sum, c_ptr form')
    call gpuwire_darray_min(x, c_loc(val))
    call expect(val == -4, 'gpuwire_darray_min, c_ptr form')
    call gpuwire_darray_max(x, c_loc(val))
    call expect(val == 6, 'gpuwire_darray_max, c_ptr form')
    call gpuwire_darray_sum(x, r32, ierror=ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_DTYPE_MISMATCH), 'sum into a real32')
    call gpuwire_darray_fill(y, 1.5_real64)
    call gpuwire_darray_sum(y, r)
    call expect(r == 1.5_real64 * n, 'gpuwire_darray_fill')
    val = -2
    call gpuwire_darray_fill(y, c_loc(val))
    call gpuwire_darray_max(y, r)
    call expect(r == -2, 'gpuwire_darray_fill, c_ptr form')
    call gpuwire_darray_fill(y, 1, ierror=ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_DTYPE_MISMATCH), 'fill with an integer')

    ! Redistribution to BROADCAST and to everything on rank 0; bcast.
    call gpuwire_darray_create(world, n, GPUWIRE_DECIDE, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &
      GPUWIRE_PARTITION_BROADCAST, bc)
    call gpuwire_darray_redistribute(x, bc)
    call gpuwire_darray_data(bc, p)
    call c_f_pointer(p, mine, [n])
    call expect(all(mine == g), 'redistribute to BROADCAST')
    if (rank == nranks - 1) mine = 7
    call gpuwire_darray_bcast(bc, nranks - 1)
    call expect(all(mine == 7), 'gpuwire_darray_bcast')
    call gpuwire_darray_free(z)
    call gpuwire_darray_create(world, n, merge(n, 0, rank == 0), GPUWIRE_FLOAT64, &
      GPUWIRE_SPACE_HOST, GPUWIRE_PARTITION_SCATTER, z)
    call gpuwire_darray_redistribute(x, z)
    call gpuwire_darray_local_len(z, v)
    call expect(v == merge(n, 0, rank == 0), 'a user-given split')
    if (rank == 0) then
      call gpuwire_darray_data(z, p)
      call c_f_pointer(p, mine, [n])
      call expect(all(mine == g), 'redistribute to everything on rank 0')
    end if
    call gpuwire_darray_bcast(x, 0, ierror=ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_ARGUMENT), 'bcast of a SCATTER array')

    ! A 2-D int32 array (C shape [rows, 3], Fortran gv(3, rows)) with a halo row; row i holds i.
    rows = 2 * nranks + 1
    call split(rows, rank, off, len)
    r0 = int(off)
    nr = int(len)
    gv = spread([(i, i = 0, rows - 1)], 1, 3)
    call gpuwire_darray_create_nd(world, [rows, 3], GPUWIRE_DECIDE, 1, GPUWIRE_INT32, &
      GPUWIRE_SPACE_HOST, GPUWIRE_PARTITION_SCATTER, grid)
    call gpuwire_darray_shape(grid, shape2)
    call expect(shape2(1) == rows .and. shape2(2) == 3, '2-D gpuwire_darray_shape')
    call gpuwire_darray_local_shape(grid, shape2)
    call expect(shape2(1) == nr .and. shape2(2) == 3, '2-D gpuwire_darray_local_shape')
    call gpuwire_darray_halo(grid, v)
    call expect(v == 1, '2-D gpuwire_darray_halo')
    call gpuwire_darray_set_global(grid, gv)
    call gpuwire_darray_halo_exchange(grid, 1)
    call gpuwire_darray_local_with_halo(grid, b)
    call gpuwire_buffer_pointer(b, p)
    call c_f_pointer(p, w, [3, nr + 2])
    if (nr > 0 .and. r0 > 0) call expect(all(w(:, 1) == r0 - 1), 'the ghost row above')
    if (nr > 0 .and. r0 + nr < rows) call expect(all(w(:, nr + 2) == r0 + nr), &
      'the ghost row below')
    if (nr > 0) call expect(all(w(:, 2) == r0), 'the first owned row')
    call gpuwire_buffer_free(b)
    call gpuwire_darray_halo_exchange(grid, 0_int64)
    call gpuwire_darray_sum(grid, isum)
    call gpuwire_darray_min(grid, imin)
    call gpuwire_darray_max(grid, imax)
    call expect(isum == 3 * rows * (rows - 1) / 2 .and. imin == 0 .and. imax == rows - 1, &
      'int32 sum, min, max')
    call gpuwire_darray_create_nd(world, [int(rows, int64), 3_int64], GPUWIRE_DECIDE, 0, &
      GPUWIRE_INT32, GPUWIRE_SPACE_HOST, GPUWIRE_PARTITION_SCATTER, grid2)
    call gpuwire_darray_redistribute(grid, grid2)
    gv = -1
    call gpuwire_darray_allgather(grid2, gv)
    call expect(all(gv == spread([(i, i = 0, rows - 1)], 1, 3)), '2-D redistribute, allgather')
    call gpuwire_darray_free(grid2)
    call gpuwire_darray_create_nd(world, [int(rows, int64), 3_int64], -1_int64, 2_int64, &
      GPUWIRE_INT32, GPUWIRE_SPACE_HOST, GPUWIRE_PARTITION_SCATTER, grid2, ierr)
    call expect_ok(ierr, 'create_nd with int64 arguments')
    call gpuwire_darray_halo_exchange(grid2, 3, ierror=ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_ARGUMENT), 'a width above the halo')

    ! The same grid on a process grid, periodic along the rows (C axis 0): the first rank's
    ! ghost row above is the last row, the last rank's below the first; then over this program's
    ! own array w(3, nr + 2) (gpuwire_darray_wrap), corners asked for.
    call gpuwire_darray_create_cart(world, [rows, 3], [0, 1], [1, 0], [.true., .false.], &
      GPUWIRE_INT32, GPUWIRE_SPACE_HOST, cart)
    call gpuwire_darray_cart(cart, procs, coords, starts, halo2, per2)
    call expect(procs(1) == nranks .and. procs(2) == 1 .and. coords(1) == rank .and. &
      starts(1) == r0 .and. halo2(1) == 1 .and. halo2(2) == 0 .and. per2(1) .and. &
      .not. per2(2), 'gpuwire_darray_cart')
    call gpuwire_darray_set_global(cart, gv)
    call gpuwire_darray_halo_exchange_axes(cart, [1_int64, 0_int64], 0)
    ! One width per axis: fewer would make the C function read past the end of the array.
    call gpuwire_darray_halo_exchange_axes(cart, [1_int64], 0, ierror=ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_ARGUMENT), 'halo_exchange_axes, 1 width for 2 axes')
    call gpuwire_darray_halo_exchange_axes(cart, [1, 0, 0], 0, ierror=ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_ARGUMENT), 'halo_exchange_axes, 3 widths for 2 axes')
    ! Arrays of the wrong length on rank 0 only: creation fails on every rank (the others waited
    ! for ever before: the binding made no C call on rank 0).
    if (rank == 0) then
      call gpuwire_darray_create_cart(world, [rows, 3], [0, 1], [1, 0], [.true., .false., .true.], &
        GPUWIRE_INT32, GPUWIRE_SPACE_HOST, cart2, ierr)
      call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_ARGUMENT), 'create_cart, 3 periodic entries for 2 axes')
    else
      call gpuwire_darray_create_cart(world, [rows, 3], [0, 1], [1, 0], [.true., .false.], &
        GPUWIRE_INT32, GPUWIRE_SPACE_HOST, cart2, ierr)
      call expect(ierr /= GPUWIRE_SUCCESS, 'create_cart beside a rank with 3 periodic entries fails')
    end if
    call gpuwire_darray_local_with_halo(cart, b)
    call gpuwire_buffer_pointer(b, p)
    call c_f_pointer(p, w, [3, nr + 2])
    call expect(all(w(:, 1) == modulo(r0 - 1, rows)) .and. all(w(:, nr + 2) == &
      modulo(r0 + nr, rows)), 'periodic ghost rows (create_cart)')
    call gpuwire_buffer_free(b)
    call gpuwire_darray_free(cart)
    allocate(own(3, nr + 2))
    own = -1
    do i = 1, nr
      own(:, i + 1) = r0 + i - 1
    end do
    call gpuwire_darray_wrap(world, c_loc(own), [int(rows, int64), 3_int64], [0_int64, 1_int64], &
      [1_int64, 0_int64], [.true., .false.], GPUWIRE_INT32, GPUWIRE_SPACE_HOST, wrapped)
    call gpuwire_darray_halo_exchange_axes(wrapped, [1, 0], int(GPUWIRE_HALO_CORNERS))
    call expect(all(own(:, 1) == modulo(r0 - 1, rows)) .and. all(own(:, nr + 2) == &
      modulo(r0 + nr, rows)), 'periodic ghost rows (wrap)')
    call gpuwire_darray_free(wrapped)
    call gpuwire_darray_wrap(world, c_loc(own), [rows, 3], [nranks + 1, 1], [1, 0], &
      [.true., .false.], GPUWIRE_INT32, GPUWIRE_SPACE_HOST, wrapped, ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_ARGUMENT), 'a grid of another size')
    deallocate(own)

    ! complex(real64): dot conjugates its first argument, dot(c, c) = ||c||^2.
    cv = [cmplx(1, 2, real64), cmplx(3, -1, real64), cmplx(0, -2, real64), cmplx(1, 0, real64)]
    call gpuwire_darray_create(world, 4, GPUWIRE_DECIDE, GPUWIRE_COMPLEX128, GPUWIRE_SPACE_HOST, &
      GPUWIRE_PARTITION_SCATTER, cx)
    call gpuwire_darray_set_global(cx, cv)
    call gpuwire_darray_dot(cx, cx, zc)
    call expect(zc == cmplx(20, 0, real64), 'complex dot conjugates its first argument')
    call gpuwire_darray_fill(cx, cmplx(0, 1, real64))
    call gpuwire_darray_sum(cx, zc)
    call expect(zc == cmplx(0, 4, real64), 'complex fill and sum')

    ! free sets NULL; a freed handle is invalid; a creation error leaves NULL.
    call gpuwire_darray_create(world, -1, GPUWIRE_DECIDE, GPUWIRE_FLOAT64, GPUWIRE_SPACE_HOST, &
      GPUWIRE_PARTITION_SCATTER, empty, ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_ARGUMENT), 'a negative global length')
    call expect(empty == GPUWIRE_DARRAY_NULL, 'a failed create leaves a NULL handle')
    call gpuwire_darray_free(x)
    call expect(x == GPUWIRE_DARRAY_NULL, 'gpuwire_darray_free sets NULL')
    call gpuwire_darray_free(x, ierr)
    call expect_status(ierr, int(GPUWIRE_ERROR_INVALID_HANDLE), 'freeing a NULL darray')
    call gpuwire_darray_free(y)
    call gpuwire_darray_free(z)
    call gpuwire_darray_free(bc)
    call gpuwire_darray_free(grid)
    call gpuwire_darray_free(grid2)
    call gpuwire_darray_free(cx)
  end subroutine test_darray

  ! The default split: (offset, length) of rank r for n elements.
  subroutine split(n, r, off, len)
    integer, intent(in) :: n, r
    integer(int64), intent(out) :: off, len
    integer :: q, rem
    q = n / nranks
    rem = mod(n, nranks)
    len = q
    if (r < rem) len = len + 1
    off = int(r, int64) * q + min(r, rem)
  end subroutine split

  function buffer_address(b) result(p)
    type(gpuwire_buffer), intent(in) :: b
    type(c_ptr) :: p
    call gpuwire_buffer_pointer(b, p)
  end function buffer_address

  ! test_every_kind and one test_kind_* per Fortran type (generated by scripts/gen-fortran.py):
  ! every per-type specific of module gpuwire, each rank of gpuwire_buffer_wrap.
  include 'test_kinds.inc'

  subroutine verdict()
    integer(int32), target :: bad(1)
    type(gpuwire_buffer) :: b
    bad = failures
    call gpuwire_buffer_wrap(bad, b)
    call gpuwire_allreduce(world, b, b, GPUWIRE_SUM)
    call gpuwire_buffer_free(b)
    if (rank == 0) then
      if (bad(1) == 0) then
        write (*, '(a,i0,a,i0,a)') 'test_fortran: PASS (', nranks, ' ranks, ', checks, &
          ' checks on rank 0)'
      else
        write (*, '(a,i0,a)') 'test_fortran: FAIL (', bad(1), ' failed checks)'
      end if
      flush (output_unit)
    end if
    call gpuwire_comm_free(world)
    call gpuwire_finalize()
    call MPI_Finalize(mpierr)
    if (bad(1) /= 0) stop 1
  end subroutine verdict

end program test_fortran
