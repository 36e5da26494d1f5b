! isend_irecv.f90: examples-c/isend_irecv.c in Fortran, from a program that uses mpi_f08 itself.
!
! The program initializes MPI (MPI_Init); gpuwire_init then adopts it, and gpuwire_comm_create
! takes MPI_COMM_WORLD as a type(MPI_Comm) (module gpuwire_f08). Rank 0 holds ten real32 values
! 100, 110, ..., 190; rank 1 holds zeros. Rank 0 sends its array with gpuwire_isend, rank 1
! receives into its array with gpuwire_irecv, both wait. Ranks 2 and above take part in setup
! and teardown only. gpuwire_gather brings every rank's values to rank 0, which prints them in
! rank order, before and after, in the C example's format; the output is the C example's.
!
! The arrays are wrapped (gpuwire_buffer_wrap): they need TARGET, and ASYNCHRONOUS because a
! nonblocking call uses them.
!
! Usage: mpirun -n 2 isend_irecv [EXPECTED_RANKS]
! Exit status 0 on success, 1 on any failure (a gpuwire error stops the program: no ierror).
program isend_irecv
  use, intrinsic :: iso_fortran_env, only: int32, real32, error_unit, output_unit
  use mpi_f08, only: MPI_Init, MPI_Finalize, MPI_COMM_WORLD
  use gpuwire_f08
  implicit none

  integer, parameter :: count = 10
  type(gpuwire_comm) :: comm
  type(gpuwire_buffer) :: buf, flag
  type(gpuwire_request) :: req
  real(real32), target, asynchronous :: v(count)
  integer(int32), target :: bad(1)
  integer :: rank, size, i, wrong, expected, bad_total
  real(real32) :: expect
  character(len=32) :: arg

  call MPI_Init()
  call gpuwire_init() ! MPI is running: gpuwire adopts it and leaves MPI_Finalize to us
  call gpuwire_comm_create(MPI_COMM_WORLD, comm)
  call gpuwire_comm_rank(comm, rank)
  call gpuwire_comm_size(comm, size)
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) expected
    if (expected /= size) then
      write (error_unit, '(a,i0,a,a,a)') 'isend_irecv: launched on ', size, &
        ' ranks, expected ', trim(arg), ' (wrong launcher?)'
      stop 1
    end if
  end if
  if (size < 2) then
    if (rank == 0) write (error_unit, '(a,i0)') 'isend_irecv: needs at least 2 ranks, got ', size
    call gpuwire_comm_free(comm)
    call gpuwire_finalize()
    call MPI_Finalize()
    stop 1
  end if

  ! Rank 0's values; a buffer over the array's own memory (no copy).
  v = 0
  if (rank == 0) v = [(real(100 + 10 * i, real32), i = 0, count - 1)]
  call gpuwire_buffer_wrap(v, buf)

  call print_values('before')

  if (rank == 0) then
    call gpuwire_isend(comm, buf, 1, 0, req)
  else if (rank == 1) then
    call gpuwire_irecv(comm, buf, 0, 0, req)
  end if
  call gpuwire_wait(req) ! GPUWIRE_REQUEST_NULL (ranks >= 2) returns at once

  wrong = 0
  if (req /= GPUWIRE_REQUEST_NULL) then
    write (error_unit, '(a,i0,a)') 'rank ', rank, ': gpuwire_wait did not reset the request'
    wrong = wrong + 1
  end if

  call print_values('after')

  do i = 1, count
    expect = 0
    if (rank <= 1) expect = real(100 + 10 * (i - 1), real32)
    if (abs(v(i) - expect) > 0) then ! exact values expected
      write (error_unit, '(a,i0,a,i0,a,g0,a,g0)') 'rank ', rank, ': element ', i - 1, ' is ', &
        v(i), ', expected ', expect
      wrong = wrong + 1
    end if
  end do

  ! Every rank learns whether any rank saw a wrong value.
  bad(1) = wrong
  call gpuwire_buffer_wrap(bad, flag)
  call gpuwire_allreduce(comm, flag, flag, GPUWIRE_SUM)
  bad_total = bad(1)
  if (rank == 0) then
    if (bad_total == 0) then
      write (*, '(a,i0,a)') 'isend_irecv: PASS (rank 1 received 100..190 from rank 0; ', size, &
        ' ranks)'
    else
      write (*, '(a,i0,a)') 'isend_irecv: FAIL (', bad_total, ' wrong values)'
    end if
    flush (output_unit)
  end if

  call gpuwire_buffer_free(flag)
  call gpuwire_buffer_free(buf)
  call gpuwire_comm_free(comm)
  call gpuwire_finalize()
  call MPI_Finalize()
  if (bad_total /= 0) stop 1

contains

  ! Every rank's values, printed by rank 0 in rank order ("rank R WHEN: 100 110 ..."). Collective.
  subroutine print_values(when)
    character(len=*), intent(in) :: when
    real(real32), allocatable, target :: all(:, :)
    type(gpuwire_buffer) :: mine, gathered
    character(len=256) :: line
    integer :: r, k, n
    ! Non-roots pass GPUWIRE_BUFFER_NULL: the receive buffer matters at the root only.
    gathered = GPUWIRE_BUFFER_NULL
    if (rank == 0) then
      allocate (all(count, 0:size - 1))
      call gpuwire_buffer_wrap(all, gathered)
    end if
    call gpuwire_buffer_wrap(v, mine)
    call gpuwire_gather(comm, mine, gathered, 0)
    call gpuwire_buffer_free(mine)
    if (rank /= 0) return
    do r = 0, size - 1
      write (line, '(a,i0,a,a,a)') 'rank ', r, ' ', when, ':'
      n = len_trim(line)
      do k = 1, count
        write (line(n + 1:), '(1x,i0)') nint(all(k, r))
        n = len_trim(line)
      end do
      write (*, '(a)') line(1:n)
    end do
    flush (output_unit)
    call gpuwire_buffer_free(gathered)
  end subroutine print_values

end program isend_irecv
