! darray_blockrow.f90: examples-c/darray_blockrow.c in Fortran: a block-row operator
! (PyLops-MPI's MPIVStack) on distributed arrays, with the same operator, checks and output line.
!
! H = [H_0; H_1; ...; H_(P-1)] stacks P row blocks: rank r owns H_r, m_r rows by n columns, with
! M = 10 P + 3 rows in all (the default split: the first 3 ranks get 11 rows, the others 10).
!   forward:  y = H x      x is BROADCAST (every rank holds all n entries), y is SCATTER (rank r
!                          owns y_r = H_r x): no communication at all;
!   adjoint:  x' = H^T y   = sum over r of H_r^T y_r: each rank writes its term into the local
!                          buffer of a BROADCAST array, and gpuwire_allreduce (SUM, in place)
!                          adds them up on every rank.
! Entries are small integers, H_ij = (i + 2j) mod 7 - 3 and x_j = j mod 5 - 2 (i, j from 0), so
! every result is exact. Checks, on every rank:
!  1. y, gathered to every rank (gpuwire_darray_allgather), equals the serial y = H x;
!  2. the dot test of an operator and its adjoint: <y, H x> = <H^T y, x>, i.e.
!     gpuwire_darray_dot(y, y) == gpuwire_darray_dot(x', x);
!  3. ||y||_2 and sum(y) equal the serial values.
!
! With "device" the arrays live on the GPU and gpuwire's operations run there; the local products
! H_r x and H_r^T y_r are this program's own code and run on host copies (a GPU code would call
! cuBLAS on the addresses gpuwire_darray_data returns).
!
! Usage: mpirun -n P darray_blockrow [EXPECTED_RANKS [host|device]]   (any P >= 1)
! Exit status 0 on success, 1 on failure.
program darray_blockrow
  use, intrinsic :: iso_fortran_env, only: int32, int64, real64, error_unit, output_unit
  use gpuwire
  implicit none

  integer, parameter :: ncols = 16

  type(gpuwire_comm) :: comm
  type(gpuwire_darray) :: x, y, xt, bad
  type(gpuwire_buffer) :: xt_local
  integer :: rank, size, space, expected
  integer(int32) :: wrong, wrong_total
  integer(int64) :: mrows, m, row0, i, j
  real(real64) :: xs(0:ncols - 1), xh(0:ncols - 1), xth(0:ncols - 1), yy, xtx, norm, total, s, &
    want_norm, want_sum
  real(real64), allocatable :: yh(:), yall(:)
  character(len=32) :: arg

  call gpuwire_init()
  call gpuwire_comm_world(comm)
  call gpuwire_comm_rank(comm, rank)
  call gpuwire_comm_size(comm, size)
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) expected
    if (expected /= size) then
      write (error_unit, '(a,i0,a,a,a)') 'darray_blockrow: launched on ', size, &
        ' ranks, expected ', trim(arg), ' (wrong launcher?)'
      stop 1
    end if
  end if
  space = GPUWIRE_SPACE_HOST
  if (command_argument_count() >= 2) then
    call get_command_argument(2, arg)
    if (arg == 'device') space = GPUWIRE_SPACE_DEVICE
  end if
  mrows = 10_int64 * size + 3

  call gpuwire_darray_create(comm, ncols, GPUWIRE_DECIDE, GPUWIRE_FLOAT64, space, &
    GPUWIRE_PARTITION_BROADCAST, x)
  call gpuwire_darray_create(comm, ncols, GPUWIRE_DECIDE, GPUWIRE_FLOAT64, space, &
    GPUWIRE_PARTITION_BROADCAST, xt)
  call gpuwire_darray_create(comm, mrows, GPUWIRE_DECIDE, GPUWIRE_FLOAT64, space, &
    GPUWIRE_PARTITION_SCATTER, y)
  call gpuwire_darray_local_len(y, m)
  call gpuwire_darray_global_offset(y, row0)
  allocate (yh(0:m - 1), yall(0:mrows - 1))
  yh = 0
  yall = 0

  ! x: rank 0's values reach every rank (BROADCAST arrays take user data from rank 0).
  do j = 0, ncols - 1
    xs(j) = xval(j)
  end do
  call gpuwire_darray_set_global(x, xs)

  ! Forward: y_r = H_r x, on this rank's rows.
  call local_copy(x, xh, .true.)
  do i = 0, m - 1
    s = 0
    do j = 0, ncols - 1
      s = s + hval(row0 + i, j) * xh(j)
    end do
    yh(i) = s
  end do
  call local_copy(y, yh, .false.)

  ! Adjoint: x' = sum_r H_r^T y_r, the terms added up by one allreduce.
  do j = 0, ncols - 1
    s = 0
    do i = 0, m - 1
      s = s + hval(row0 + i, j) * yh(i)
    end do
    xth(j) = s
  end do
  call local_copy(xt, xth, .false.)
  call gpuwire_darray_local(xt, xt_local)
  call gpuwire_allreduce(comm, xt_local, xt_local, GPUWIRE_SUM)
  call gpuwire_buffer_free(xt_local)

  ! 1. y against the serial product.
  wrong = 0
  want_norm = 0
  want_sum = 0
  call gpuwire_darray_allgather(y, yall)
  do i = 0, mrows - 1
    s = 0
    do j = 0, ncols - 1
      s = s + hval(i, j) * xval(j)
    end do
    want_norm = want_norm + s * s
    want_sum = want_sum + s
    if (differ(yall(i), s)) then
      if (wrong < 5) write (error_unit, '(a,i0,a,i0,a,g0,a,g0)') 'rank ', rank, ': y[', i, &
        '] = ', yall(i), ', expected ', s
      wrong = wrong + 1
    end if
  end do
  want_norm = sqrt(want_norm)
  ! 2. The dot test. 3. Norm and sum.
  call gpuwire_darray_dot(y, y, yy)
  call gpuwire_darray_dot(xt, x, xtx)
  call gpuwire_darray_norm(y, GPUWIRE_NORM_2, norm)
  call gpuwire_darray_sum(y, total)
  if (differ(yy, xtx) .or. differ(norm, want_norm) .or. differ(total, want_sum)) then
    write (error_unit, '(a,i0,a,g0,a,g0,a,g0,a,g0,a,g0,a,g0,a)') 'rank ', rank, ': <y, Hx> = ', &
      yy, ', <H^T y, x> = ', xtx, ', ||y|| = ', norm, ' (expected ', want_norm, '), sum(y) = ', &
      total, ' (expected ', want_sum, ')'
    wrong = wrong + 1
  end if

  ! Every rank's verdict, added up: an int32 array with one element per rank.
  call gpuwire_darray_create(comm, size, 1, GPUWIRE_INT32, GPUWIRE_SPACE_HOST, &
    GPUWIRE_PARTITION_SCATTER, bad)
  call gpuwire_darray_fill(bad, wrong)
  call gpuwire_darray_sum(bad, wrong_total)
  if (rank == 0) then
    if (wrong_total == 0) then
      write (*, '(a,i0,a,a,a,i0,a,a,a,a,a)') 'darray_blockrow: PASS (', size, ' ranks, ', &
        trim(merge('host  ', 'device', space == GPUWIRE_SPACE_HOST)), &
        ' memory: y = H x has ', mrows, ' entries; <y, Hx> = <H^T y, x> = ', c_g(yy), &
        '; ||y|| = ', c_f(norm, 6), ')'
    else
      write (*, '(a,i0,a)') 'darray_blockrow: FAIL (', wrong_total, ' failed checks)'
    end if
    flush (output_unit)
  end if

  deallocate (yall, yh)
  call gpuwire_darray_free(bad)
  call gpuwire_darray_free(y)
  call gpuwire_darray_free(xt)
  call gpuwire_darray_free(x)
  call gpuwire_comm_free(comm)
  call gpuwire_finalize()
  if (wrong_total /= 0) stop 1

contains

  ! a /= b, exactly (NaN differs from everything), in a form -Wcompare-reals accepts.
  elemental logical function differ(a, b)
    real(real64), intent(in) :: a, b
    differ = .not. (a <= b .and. a >= b)
  end function differ

  pure function hval(i, j) result(v)
    integer(int64), intent(in) :: i, j
    real(real64) :: v
    v = real(mod(i + 2 * j, 7_int64), real64) - 3.0_real64
  end function hval

  pure function xval(j) result(v)
    integer(int64), intent(in) :: j
    real(real64) :: v
    v = real(mod(j, 5_int64), real64) - 2.0_real64
  end function xval

  ! Copies this rank's elements of v to or from host memory (a plain copy for host arrays).
  subroutine local_copy(v, host, to_host)
    type(gpuwire_darray), intent(in) :: v
    real(real64), intent(inout) :: host(:)
    logical, intent(in) :: to_host
    type(gpuwire_buffer) :: b
    call gpuwire_darray_local(v, b)
    if (to_host) then
      call gpuwire_buffer_copy_to_host(b, host)
    else
      call gpuwire_buffer_copy_from_host(b, host)
    end if
    call gpuwire_buffer_free(b)
  end subroutine local_copy

  ! C's "%g": 6 significant digits, %e style for exponents below -4 or from 6 on, %f style
  ! otherwise, trailing zeros (and a trailing point) removed.
  function c_g(v) result(s)
    real(real64), intent(in) :: v
    character(len=:), allocatable :: s
    character(len=40) :: buf
    integer :: k, e
    if (v <= 0 .and. v >= 0) then
      s = merge('-0', '0 ', sign(1.0_real64, v) < 0)
      s = trim(s)
      return
    end if
    write (buf, '(es14.5e3)') v ! d.ddddde+xxx: the exponent after rounding to 6 digits
    k = index(buf, 'E')
    read (buf(k + 1:), *) e
    if (e < -4 .or. e >= 6) then
      s = strip(trim(adjustl(buf(:k - 1))))
      write (buf, '(i0)') abs(e)
      s = s // 'e' // merge('-', '+', e < 0) // repeat('0', max(0, 2 - len_trim(buf))) // trim(buf)
    else
      write (buf, '(f0.' // itoa(5 - e) // ')') v
      s = strip(trim(adjustl(buf)))
      if (s(1:1) == '.') s = '0' // s
      if (len(s) > 1) then
        if (s(1:2) == '-.') s = '-0' // s(2:)
      end if
    end if
  end function c_g

  ! Without trailing zeros after a decimal point, and without the point itself if nothing follows.
  function strip(t) result(s)
    character(len=*), intent(in) :: t
    character(len=:), allocatable :: s
    s = t
    if (index(s, '.') == 0) return
    do while (s(len(s):len(s)) == '0')
      s = s(:len(s) - 1)
    end do
    if (s(len(s):len(s)) == '.') s = s(:len(s) - 1)
  end function strip

  function itoa(i) result(s)
    integer, intent(in) :: i
    character(len=:), allocatable :: s
    character(len=12) :: buf
    write (buf, '(i0)') i
    s = trim(buf)
  end function itoa

  ! C's "%.<d>f": F format with the leading zero C prints (0.5, not .5).
  function c_f(v, d) result(s)
    real(real64), intent(in) :: v
    integer, intent(in) :: d
    character(len=:), allocatable :: s
    character(len=40) :: buf
    character(len=16) :: fmt
    write (fmt, '(a,i0,a)') '(f0.', d, ')'
    write (buf, fmt) v
    s = trim(adjustl(buf))
    if (s(1:1) == '.') s = '0' // s
    if (len(s) > 1) then
      if (s(1:2) == '-.') s = '-0' // s(2:)
    end if
  end function c_f

end program darray_blockrow
