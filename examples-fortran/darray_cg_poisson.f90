! darray_cg_poisson.f90: examples-c/darray_cg_poisson.c in Fortran: cg_poisson written with
! distributed arrays (type(gpuwire_darray)), with the same problem, start vector, stopping rule
! and checks, and the same output lines, so that both print the same iteration count and error
! (and the same as cg_poisson, bit for bit, on host memory).
!
!   -Laplace(u) = f on the unit square, u = 0 on the boundary,
!   f(x, y) = 2 pi^2 sin(pi x) sin(pi y), exact solution u(x, y) = sin(pi x) sin(pi y).
!
! Every vector is an N x N distributed array (C shape [N, N]) split by rows, the default split;
! x and p carry one halo row above and below for the stencil. Grid row i of this rank is column i
! of a Fortran view v(N, ...) of the array's memory (the C example's row-major layout).
!
! What gpuwire does: the halo exchange, the vector updates (axpy, scale), the dot products and
! norms (each one allreduce), copying (redistribute). What the program does: the stencil, on this
! rank's rows. On host memory it reads and writes the arrays in place, through Fortran pointers
! to their memory (gpuwire_darray_data, gpuwire_darray_local_with_halo); with "device" the
! arrays live on the GPU and every gpuwire operation runs there, while this example applies the
! stencil on host copies of its rows (a GPU code would launch its own kernel on the device
! address that gpuwire_darray_data returns).
!
! Usage: mpirun -n P darray_cg_poisson [N [EXPECTED_RANKS [host|device]]]   (default N = 768)
! The last line is "darray_cg_poisson: PASS" or "darray_cg_poisson: FAIL ..."; exit status 0 on
! success, 1 on failure (including an unavailable device: the message says why).
program darray_cg_poisson
  use, intrinsic :: iso_c_binding, only: c_ptr, c_f_pointer
  use, intrinsic :: iso_fortran_env, only: int64, real64, error_unit, output_unit
  use gpuwire
  implicit none

  integer, parameter :: default_n = 768, max_iters = 100000
  real(real64), parameter :: cg_tol = 1e-9_real64, residual_max = 1e-8_real64
  real(real64), parameter :: pi = 3.14159265358979323846_real64

  type(gpuwire_comm) :: comm
  type(gpuwire_darray) :: x, p, r, b, ap, e
  integer :: rank, size, n, space, iters, expected
  integer(int64) :: nloc, row0
  logical :: on_device, ok
  real(real64), allocatable, target :: mirror_in(:), mirror_out(:) ! host copies (device only)
  real(real64) :: h, bb, rr, rr_new, alpha, beta, resid, err, maxs, pred, scaled, q
  integer(int64) :: t0, t1, rate
  character(len=1024) :: describe
  character(len=32) :: arg

  call gpuwire_init()
  call gpuwire_comm_world(comm)
  call gpuwire_comm_rank(comm, rank)
  call gpuwire_comm_size(comm, size)
  n = default_n
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) n
  end if
  if (command_argument_count() >= 2) then
    call get_command_argument(2, arg)
    read (arg, *) expected
    if (expected /= size) then
      write (error_unit, '(a,i0,a,a,a)') 'darray_cg_poisson: launched on ', size, &
        ' ranks, expected ', trim(arg), ' (wrong launcher?)'
      stop 1
    end if
  end if
  on_device = .false.
  if (command_argument_count() >= 3) then
    call get_command_argument(3, arg)
    on_device = arg == 'device'
  end if
  space = merge(GPUWIRE_SPACE_DEVICE, GPUWIRE_SPACE_HOST, on_device)
  if (n < 1 .or. n < size) then
    if (rank == 0) write (error_unit, '(a,i0,a,i0,a)') &
      'darray_cg_poisson: need 1 <= P <= N (N = ', n, ', P = ', size, ')'
    stop 1
  end if
  h = 1.0_real64 / (n + 1)

  ! N x N grids split by rows; x and p with one halo row for the stencil.
  call grid(1, x)
  call grid(1, p)
  call grid(0, r)
  call grid(0, b)
  call grid(0, ap)
  call grid(0, e)
  call gpuwire_darray_local_len(x, nloc)
  call gpuwire_darray_global_offset(x, row0)
  nloc = nloc / n
  row0 = row0 / n
  allocate (mirror_in(n * (nloc + 2)), mirror_out(n * (nloc + 2)))
  call set(b, 2) ! rhs
  call set(x, 3) ! start

  call gpuwire_barrier(comm)
  call system_clock(t0, rate)
  ! r = b - A x0, p = r
  call apply_a(x, ap)
  call gpuwire_darray_redistribute(b, r)
  call gpuwire_darray_axpy(-1.0_real64, ap, r)
  call gpuwire_darray_redistribute(r, p)
  bb = dot(b, b)
  rr = dot(r, r)
  iters = 0
  do while (iters < max_iters .and. sqrt(rr / bb) >= cg_tol)
    call apply_a(p, ap)
    alpha = rr / dot(p, ap)
    call gpuwire_darray_axpy(alpha, p, x)   ! x += alpha p
    call gpuwire_darray_axpy(-alpha, ap, r) ! r -= alpha Ap
    rr_new = dot(r, r)
    beta = rr_new / rr
    call gpuwire_darray_scale(p, beta)      ! p = r + beta p
    call gpuwire_darray_axpy(1.0_real64, r, p)
    rr = rr_new
    iters = iters + 1
  end do
  call gpuwire_barrier(comm)
  call system_clock(t1)

  ! The true residual, and the error against the exact solution.
  call apply_a(x, ap)
  call gpuwire_darray_redistribute(b, r)
  call gpuwire_darray_axpy(-1.0_real64, ap, r)
  resid = sqrt(dot(r, r) / bb)
  call set(e, 1) ! exact
  call gpuwire_darray_max(e, maxs)
  call gpuwire_darray_axpy(-1.0_real64, x, e)
  call gpuwire_darray_norm(e, GPUWIRE_NORM_INF, err)
  q = sin(pi * h / 2.0_real64)
  pred = ((pi * h / 2.0_real64) * (pi * h / 2.0_real64) / (q * q) - 1.0_real64) * maxs
  scaled = err * real(n + 1, real64) * real(n + 1, real64)
  ok = iters < max_iters .and. resid < residual_max .and. scaled < 1.0_real64 .and. &
    abs(err - pred) <= 0.01_real64 * pred

  if (rank == 0) then
    call gpuwire_comm_describe(comm, describe)
    write (*, '(a,a,a)') 'darray_cg_poisson: -Laplace(u) = f on the unit square, 5-point ' &
      // 'stencil, ', trim(merge('device', 'host  ', on_device)), ' memory'
    write (*, '(a,i0,a,i0,a,i0)') 'grid: ', n, ' x ', n, ' interior points, h = 1/', n + 1
    write (*, '(a,i0)') 'ranks: ', size
    write (*, '(a,i0)') 'iterations: ', iters
    write (*, '(a,a)') 'relative residual: ', c_e(resid, 3)
    write (*, '(a,a)') 'max error: ', c_e(err, 15)
    write (*, '(a,a,a,a,a)') 'error * (N+1)^2: ', c_f(scaled, 6), ' (the scheme''s own error: ', &
      c_f(pred * real(n + 1, real64) * real(n + 1, real64), 6), ')'
    write (*, '(a,a,a)') 'wall time: ', c_f(real(t1 - t0, real64) / real(rate, real64), 3), &
      ' s (CG iterations only)'
    write (*, '(a,a)') 'backend: ', trim(describe)
    if (ok) then
      write (*, '(a)') 'darray_cg_poisson: PASS'
    else
      write (*, '(a)') 'darray_cg_poisson: FAIL (see the values above)'
    end if
    flush (output_unit)
  end if
  deallocate (mirror_in, mirror_out)
  call gpuwire_darray_free(e)
  call gpuwire_darray_free(ap)
  call gpuwire_darray_free(b)
  call gpuwire_darray_free(r)
  call gpuwire_darray_free(p)
  call gpuwire_darray_free(x)
  call gpuwire_comm_free(comm)
  call gpuwire_finalize()
  if (.not. ok) stop 1

contains

  ! An N x N grid (C shape [N, N]) split by rows, with `halo` ghost rows.
  subroutine grid(halo, v)
    integer, intent(in) :: halo
    type(gpuwire_darray), intent(out) :: v
    call gpuwire_darray_create_nd(comm, [n, n], GPUWIRE_DECIDE, halo, GPUWIRE_FLOAT64, space, &
      GPUWIRE_PARTITION_SCATTER, v)
  end subroutine grid

  ! This rank's rows of v in host memory as a Fortran array a(N, first:...): with `halo`, the
  ! ghost row above (first = 0), the owned rows 1..nloc and the ghost row below; without, the
  ! owned rows (first = 1). Host arrays: the array's own memory; device arrays: a copy in
  ! mirror_in (slot 1) or mirror_out (slot 2), made when `read`.
  function rows(v, halo, slot, read) result(a)
    type(gpuwire_darray), intent(in) :: v
    logical, intent(in) :: halo, read
    integer, intent(in) :: slot
    real(real64), pointer, contiguous :: a(:, :)
    real(real64), pointer, contiguous :: flat(:)
    type(gpuwire_buffer) :: buf
    type(c_ptr) :: addr
    integer(int64) :: count, first
    first = merge(0, 1, halo)
    count = n * (nloc + 2 * (1 - first))
    if (.not. on_device) then
      if (halo) then
        call gpuwire_darray_local_with_halo(v, buf) ! starts at the ghost row above
        call gpuwire_buffer_pointer(buf, addr)
        call gpuwire_buffer_free(buf) ! the view goes; the array keeps its memory
      else
        call gpuwire_darray_data(v, addr)         ! the first owned element
      end if
      call c_f_pointer(addr, flat, [count])
    else
      if (slot == 1) then
        flat => mirror_in(1:count)
      else
        flat => mirror_out(1:count)
      end if
      if (read) then
        if (halo) then
          call gpuwire_darray_local_with_halo(v, buf)
        else
          call gpuwire_darray_local(v, buf)
        end if
        call gpuwire_buffer_copy_to_host(buf, flat)
        call gpuwire_buffer_free(buf)
      end if
    end if
    a(1:n, first:first + count / n - 1) => flat
  end function rows

  ! After writing to rows(v, .false., 2, ...): device arrays get the host copy back.
  subroutine rows_done(v)
    type(gpuwire_darray), intent(in) :: v
    type(gpuwire_buffer) :: buf
    if (.not. on_device) return
    call gpuwire_darray_local(v, buf)
    call gpuwire_buffer_copy_from_host(buf, mirror_out(1:n * nloc))
    call gpuwire_buffer_free(buf)
  end subroutine rows_done

  ! out = A v on this rank's rows; column 0 of u (v with its halo) is the halo row above (zero at
  ! the top edge: the boundary), column nloc + 1 the one below.
  subroutine apply_a(v, out)
    type(gpuwire_darray), intent(in) :: v, out
    real(real64), pointer, contiguous :: u(:, :), o(:, :)
    integer(int64) :: i
    integer :: j
    real(real64) :: right
    call gpuwire_darray_halo_exchange(v, 1)
    u => rows(v, .true., 1, .true.)
    o => rows(out, .false., 2, .false.)
    do i = 1, nloc
      right = 0
      if (n > 1) right = u(2, i)
      o(1, i) = 4.0_real64 * u(1, i) - u(1, i - 1) - u(1, i + 1) - right
      do j = 2, n - 1
        o(j, i) = 4.0_real64 * u(j, i) - u(j, i - 1) - u(j, i + 1) - u(j - 1, i) - u(j + 1, i)
      end do
      if (n > 1) o(n, i) = 4.0_real64 * u(n, i) - u(n, i - 1) - u(n, i + 1) - u(n - 1, i)
    end do
    call rows_done(out)
  end subroutine apply_a

  ! v = f(global row, column) on this rank's rows, f = exact (1), rhs (2) or start (3).
  subroutine set(v, f)
    type(gpuwire_darray), intent(in) :: v
    integer, intent(in) :: f
    real(real64), pointer, contiguous :: o(:, :)
    integer(int64) :: i, g
    integer :: j
    o => rows(v, .false., 2, .false.)
    do i = 1, nloc
      g = row0 + i - 1
      do j = 1, n
        select case (f)
        case (1); o(j, i) = exact(g, j - 1)
        case (2); o(j, i) = rhs(g, j - 1)
        case default; o(j, i) = start(g, j - 1)
        end select
      end do
    end do
    call rows_done(v)
  end subroutine set

  function dot(a, c) result(d)
    type(gpuwire_darray), intent(in) :: a, c
    real(real64) :: d
    call gpuwire_darray_dot(a, c, d)
  end function dot

  ! The exact solution u, the right-hand side b = h^2 f = h^2 2 pi^2 u, the start vector x0.
  function exact(g, j) result(v)
    integer(int64), intent(in) :: g
    integer, intent(in) :: j
    real(real64) :: v
    v = sin(pi * (j + 1) * h) * sin(pi * (g + 1) * h)
  end function exact

  function rhs(g, j) result(v)
    integer(int64), intent(in) :: g
    integer, intent(in) :: j
    real(real64) :: v
    v = h * h * 2.0_real64 * pi * pi * sin(pi * (j + 1) * h) * sin(pi * (g + 1) * h)
  end function rhs

  function start(g, j) result(v)
    integer(int64), intent(in) :: g
    integer, intent(in) :: j
    real(real64) :: v
    v = hash01(g * n + j)
  end function start

  ! A value in [0, 1) determined by the global index k alone: splitmix64, as in the C example.
  ! Fortran has no unsigned wrap-around, so the 64-bit arithmetic works on 16-bit limbs.
  function hash01(k) result(v)
    integer(int64), intent(in) :: k
    real(real64) :: v
    integer(int64) :: z
    z = add64(k, pattern(int(z'9E3779B9', int64), int(z'7F4A7C15', int64)))
    z = mul64(ieor(z, shiftr(z, 30)), pattern(int(z'BF58476D', int64), int(z'1CE4E5B9', int64)))
    z = mul64(ieor(z, shiftr(z, 27)), pattern(int(z'94D049BB', int64), int(z'133111EB', int64)))
    z = ieor(z, shiftr(z, 31))
    v = real(shiftr(z, 11), real64) * (1.0_real64 / 9007199254740992.0_real64) ! 53 bits / 2^53
  end function hash01

  ! The 64-bit pattern hi * 2^32 + lo (hi, lo < 2^32).
  pure function pattern(hi, lo) result(z)
    integer(int64), intent(in) :: hi, lo
    integer(int64) :: z
    z = ior(shiftl(hi, 32), lo)
  end function pattern

  pure function to_limbs(a) result(l)
    integer(int64), intent(in) :: a
    integer(int64) :: l(0:3)
    integer :: i
    do i = 0, 3
      l(i) = ibits(a, 16 * i, 16)
    end do
  end function to_limbs

  ! Carries limbs holding more than 16 bits upward, dropping what passes bit 63.
  pure function from_limbs(l) result(a)
    integer(int64), intent(in) :: l(0:3)
    integer(int64) :: a, carry, t
    integer :: i
    a = 0
    carry = 0
    do i = 0, 3
      t = l(i) + carry
      a = ior(a, shiftl(iand(t, int(z'FFFF', int64)), 16 * i))
      carry = shiftr(t, 16)
    end do
  end function from_limbs

  pure function add64(a, c) result(z) ! (a + c) mod 2^64
    integer(int64), intent(in) :: a, c
    integer(int64) :: z
    z = from_limbs(to_limbs(a) + to_limbs(c))
  end function add64

  pure function mul64(a, c) result(z) ! (a * c) mod 2^64
    integer(int64), intent(in) :: a, c
    integer(int64) :: z, u(0:3), w(0:3), s(0:3)
    integer :: i, j
    u = to_limbs(a)
    w = to_limbs(c)
    s = 0
    do i = 0, 3
      do j = 0, 3 - i
        s(i + j) = s(i + j) + u(i) * w(j) ! < 4 * 2^32: no overflow
      end do
    end do
    z = from_limbs(s)
  end function mul64

  ! C's "%.<d>e": ES format with a lower-case exponent letter.
  function c_e(v, d) result(s)
    real(real64), intent(in) :: v
    integer, intent(in) :: d
    character(len=:), allocatable :: s
    character(len=40) :: buf
    character(len=16) :: fmt
    integer :: k
    write (fmt, '(a,i0,a,i0,a)') '(es', d + 8, '.', d, 'e2)'
    write (buf, fmt) v
    s = trim(adjustl(buf))
    k = index(s, 'E')
    if (k > 0) s(k:k) = 'e'
  end function c_e

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

end program darray_cg_poisson
