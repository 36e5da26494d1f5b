! cg_poisson.f90: examples-c/cg_poisson.c in Fortran: conjugate gradient for the 2-D Poisson
! equation, rows split across ranks, with the same grid, split, starting vector, stopping test
! and checks, and the same output lines, so that both print the same iteration count and error.
!
!   -Laplace(u) = f on the unit square, u = 0 on the boundary,
!   f(x, y) = 2 pi^2 sin(pi x) sin(pi y), exact solution u(x, y) = sin(pi x) sin(pi y).
!
! The 5-point Laplacian on the N x N interior grid, h = 1/(N+1), scaled by h^2. Grid row i (y)
! of this rank is column i of a Fortran array v(N, 0:nloc+1), so that its memory is the C
! example's row-major layout; columns 0 and nloc+1 are the halo rows. Each field is a Fortran
! array wrapped by gpuwire_buffer_wrap, with views (gpuwire_buffer_view) of its first and last
! interior rows and of its two halo rows:
!  - halo exchange: gpuwire_sendrecv of the edge rows with the neighbours (GPUWIRE_PROC_NULL at
!    the top and bottom edge, where the halo row stays 0: the boundary);
!  - dot products: a local sum, then gpuwire_allreduce SUM on one real64;
!  - the max-norm error: gpuwire_allreduce MAX.
! This program lets gpuwire_init initialize MPI (and finalize it), as the C example does.
!
! Usage: mpirun -n P cg_poisson [N [EXPECTED_RANKS]]   (N >= P; default N = 768)
! The last line is "cg_poisson: PASS" or "cg_poisson: FAIL ..."; exit status 0 on success.
program cg_poisson
  use, intrinsic :: iso_fortran_env, only: int64, real64, error_unit, output_unit
  use gpuwire
  implicit none

  integer, parameter :: default_n = 768, max_iters = 100000
  real(real64), parameter :: cg_tol = 1e-9_real64, residual_max = 1e-8_real64
  real(real64), parameter :: pi = 3.14159265358979323846_real64

  ! A distributed grid vector: this rank's nloc rows of N values and two halo rows.
  type :: field
    real(real64), allocatable :: v(:, :)            ! (N, 0:nloc+1)
    type(gpuwire_buffer) :: buf                     ! all of v
    type(gpuwire_buffer) :: first, last             ! views: rows 1 and nloc (what we send)
    type(gpuwire_buffer) :: halo_top, halo_bottom   ! views: rows 0 and nloc+1 (what we receive)
  end type field

  type(gpuwire_comm) :: comm
  integer :: rank, size, n, nloc, prev, next
  type(gpuwire_buffer) :: scalar ! one real64 for the reductions
  real(real64), target :: scalar_v(1)

  type(field), target :: x, p
  real(real64), allocatable :: r(:, :), ap(:, :), b(:, :)
  real(real64) :: h, bb, rr, rr_new, alpha, beta, resid, err, pred, maxs, scaled, s, e, q
  integer(int64) :: t0, t1, rate
  integer :: i, j, g, row0, base, rem, iters, expected
  logical :: ok
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
      write (error_unit, '(a,i0,a,a,a)') 'cg_poisson: launched on ', size, ' ranks, expected ', &
        trim(arg), ' (wrong launcher?)'
      stop 1
    end if
  end if
  if (n < 1 .or. n < size) then
    if (rank == 0) write (error_unit, '(a,i0,a,i0,a)') 'cg_poisson: N = ', n, &
      ' is not valid: need 1 <= P <= N (P = ', size, ')'
    call gpuwire_comm_free(comm)
    call gpuwire_finalize()
    stop 1
  end if

  ! The default split: N / P rows each, one more for the first N mod P ranks.
  base = n / size
  rem = mod(n, size)
  nloc = base
  if (rank < rem) nloc = nloc + 1
  row0 = rank * base + min(rank, rem)
  prev = GPUWIRE_PROC_NULL
  if (rank > 0) prev = rank - 1
  next = GPUWIRE_PROC_NULL
  if (rank < size - 1) next = rank + 1
  h = 1.0_real64 / (n + 1)

  scalar_v = 0
  call gpuwire_buffer_wrap(scalar_v, scalar)
  call field_alloc(x)
  call field_alloc(p)
  ! Vectors that never cross ranks are plain arrays in the same layout.
  allocate (r(n, 0:nloc + 1), ap(n, 0:nloc + 1), b(n, 0:nloc + 1))
  r = 0
  ap = 0
  b = 0

  do i = 1, nloc
    g = row0 + i - 1 ! global row
    do j = 1, n
      b(j, i) = h * h * 2.0_real64 * pi * pi * sin(pi * j * h) * sin(pi * (g + 1) * h)
      x%v(j, i) = hash01(int(g, int64) * n + (j - 1))
    end do
  end do

  call gpuwire_barrier(comm)
  call system_clock(t0, rate)

  ! CG: r = b - A x0, p = r.
  call apply_a(x, ap)
  r(:, 1:nloc) = b(:, 1:nloc) - ap(:, 1:nloc)
  p%v = r
  bb = dot(b, b)
  rr = dot(r, r)
  iters = 0
  do while (iters < max_iters .and. sqrt(rr / bb) >= cg_tol)
    call apply_a(p, ap)
    alpha = rr / dot(p%v, ap)
    x%v(:, 1:nloc) = x%v(:, 1:nloc) + alpha * p%v(:, 1:nloc)
    r(:, 1:nloc) = r(:, 1:nloc) - alpha * ap(:, 1:nloc)
    rr_new = dot(r, r)
    beta = rr_new / rr
    p%v(:, 1:nloc) = r(:, 1:nloc) + beta * p%v(:, 1:nloc)
    rr = rr_new
    iters = iters + 1
  end do

  call gpuwire_barrier(comm)
  call system_clock(t1)

  ! The true residual b - A x.
  call apply_a(x, ap)
  r(:, 1:nloc) = b(:, 1:nloc) - ap(:, 1:nloc)
  resid = sqrt(dot(r, r) / bb)

  ! The max-norm error against the exact solution, and the scheme's known error.
  err = 0
  maxs = 0
  do i = 1, nloc
    g = row0 + i - 1
    do j = 1, n
      s = sin(pi * j * h) * sin(pi * (g + 1) * h)
      e = abs(x%v(j, i) - s)
      if (e > err) err = e
      if (s > maxs) maxs = s
    end do
  end do
  err = all_ranks(err, GPUWIRE_MAX)
  maxs = all_ranks(maxs, GPUWIRE_MAX)
  q = sin(pi * h / 2.0_real64)
  pred = ((pi * h / 2.0_real64) * (pi * h / 2.0_real64) / (q * q) - 1.0_real64) * maxs
  scaled = err * real(n + 1, real64) * real(n + 1, real64)

  ok = .true.
  if (rank == 0) then
    call gpuwire_comm_describe(comm, describe)
    write (*, '(a)') 'cg_poisson: -Laplace(u) = f on the unit square, 5-point stencil'
    write (*, '(a,i0,a,i0,a,i0,a,i0)') 'grid: ', n, ' x ', n, ' interior points (', &
      int(n, int64) * n, ' unknowns), h = 1/', n + 1
    write (*, '(a,i0,a,i0,a,i0,a)') 'ranks: ', size, ' (rows per rank: ', base, '..', &
      base + merge(1, 0, rem /= 0), ')'
    write (*, '(a,i0)') 'iterations: ', iters
    write (*, '(a,a,a)') 'relative residual: ', c_e(resid, 3), &
      ' (true ||b - A x|| / ||b||; CG stopped at 1e-09)'
    write (*, '(a,a)') 'max error: ', c_e(err, 15)
    write (*, '(a,a,a,a,a)') 'error * (N+1)^2: ', c_f(scaled, 6), &
      ' (the scheme''s own error on this f: ', &
      c_f(pred * real(n + 1, real64) * real(n + 1, real64), 6), ')'
    write (*, '(a,a,a)') 'wall time: ', c_f(real(t1 - t0, real64) / real(rate, real64), 3), &
      ' s (CG iterations only)'
    write (*, '(a,a)') 'backend: ', trim(describe)
    if (iters >= max_iters) then
      write (*, '(a,i0,a)') 'cg_poisson: FAIL: CG did not converge in ', max_iters, ' iterations'
      ok = .false.
    end if
    if (.not. (resid < residual_max)) then
      write (*, '(a,a,a)') 'cg_poisson: FAIL: relative residual ', c_e(resid, 3), &
        ' is not below 1e-08'
      ok = .false.
    end if
    if (.not. (scaled < 1.0_real64)) then
      write (*, '(a,a,a,a,a)') 'cg_poisson: FAIL: error ', c_e(err, 3), &
        ' is not O(h^2): error * (N+1)^2 = ', c_f(scaled, 3), ' >= 1'
      ok = .false.
    end if
    if (.not. (abs(err - pred) <= 0.01_real64 * pred)) then
      write (*, '(a,a,a,a,a)') 'cg_poisson: FAIL: error ', c_e(err, 6), &
        ' differs from the scheme''s ', c_e(pred, 6), ' by more than 1%'
      ok = .false.
    end if
    if (ok) write (*, '(a)') 'cg_poisson: PASS'
    flush (output_unit)
  end if
  ! Rank 0 decided; every rank returns its verdict.
  scalar_v(1) = merge(0.0_real64, 1.0_real64, ok)
  call gpuwire_bcast(comm, scalar, 0)
  ok = scalar_v(1) < 0.5_real64

  call field_free(p)
  call field_free(x)
  call gpuwire_buffer_free(scalar)
  call gpuwire_comm_free(comm)
  call gpuwire_finalize()
  if (.not. ok) stop 1

contains

  subroutine field_alloc(f)
    type(field), intent(inout), target :: f
    allocate (f%v(n, 0:nloc + 1))
    f%v = 0
    call gpuwire_buffer_wrap(f%v, f%buf) ! the array's own memory: f must stay allocated
    call gpuwire_buffer_view(f%buf, 0, n, f%halo_top)
    call gpuwire_buffer_view(f%buf, n, n, f%first)
    call gpuwire_buffer_view(f%buf, int(nloc, int64) * n, int(n, int64), f%last)
    call gpuwire_buffer_view(f%buf, int(nloc + 1, int64) * n, int(n, int64), f%halo_bottom)
  end subroutine field_alloc

  subroutine field_free(f)
    type(field), intent(inout) :: f
    call gpuwire_buffer_free(f%halo_bottom)
    call gpuwire_buffer_free(f%last)
    call gpuwire_buffer_free(f%first)
    call gpuwire_buffer_free(f%halo_top)
    call gpuwire_buffer_free(f%buf)
    deallocate (f%v)
  end subroutine field_free

  ! Fills the halo rows with the neighbours' edge rows.
  subroutine halo_exchange(f)
    type(field), intent(in) :: f
    ! My first row goes up to prev; my bottom halo comes from next's first row.
    call gpuwire_sendrecv(comm, f%first, prev, 1, f%halo_bottom, next, 1)
    ! My last row goes down to next; my top halo comes from prev's last row.
    call gpuwire_sendrecv(comm, f%last, next, 2, f%halo_top, prev, 2)
  end subroutine halo_exchange

  ! out = A f on this rank's rows (out's halo rows are not touched).
  subroutine apply_a(f, out)
    type(field), intent(inout) :: f
    real(real64), intent(inout) :: out(:, 0:)
    integer :: i, j
    real(real64) :: right
    call halo_exchange(f)
    associate (v => f%v)
      do i = 1, nloc
        right = 0
        if (n > 1) right = v(2, i)
        out(1, i) = 4.0_real64 * v(1, i) - v(1, i - 1) - v(1, i + 1) - right
        do j = 2, n - 1
          out(j, i) = 4.0_real64 * v(j, i) - v(j, i - 1) - v(j, i + 1) - v(j - 1, i) - v(j + 1, i)
        end do
        if (n > 1) out(n, i) = 4.0_real64 * v(n, i) - v(n, i - 1) - v(n, i + 1) - v(n - 1, i)
      end do
    end associate
  end subroutine apply_a

  ! Reduces one real64 across the ranks with op (GPUWIRE_SUM or GPUWIRE_MAX), in place.
  function all_ranks(local, op) result(v)
    real(real64), intent(in) :: local
    integer, intent(in) :: op
    real(real64) :: v
    scalar_v(1) = local
    call gpuwire_allreduce(comm, scalar, scalar, op)
    v = scalar_v(1)
  end function all_ranks

  ! The global dot product of two vectors in the field layout (interior rows only), summed in
  ! the C example's order.
  function dot(a, c) result(v)
    real(real64), intent(in) :: a(:, 0:), c(:, 0:)
    real(real64) :: v, t
    integer :: i, j
    t = 0
    do i = 1, nloc
      do j = 1, n
        t = t + a(j, i) * c(j, i)
      end do
    end do
    v = all_ranks(t, GPUWIRE_SUM)
  end function dot

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
    integer(int64) :: z, x(0:3), y(0:3), w(0:3)
    integer :: i, j
    x = to_limbs(a)
    y = to_limbs(c)
    w = 0
    do i = 0, 3
      do j = 0, 3 - i
        w(i + j) = w(i + j) + x(i) * y(j) ! < 4 * 2^32: no overflow
      end do
    end do
    z = from_limbs(w)
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

end program cg_poisson
