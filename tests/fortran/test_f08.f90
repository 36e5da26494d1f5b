! test_f08.f90: module gpuwire_f08 in a program that uses mpi_f08: communicators from and to
! type(MPI_Comm), and the integer forms through comm%MPI_VAL. On 1, 2 or 3 ranks.
!
! Usage: mpirun -n N test_f08
program test_f08
  use, intrinsic :: iso_fortran_env, only: int32, error_unit
  use mpi_f08, only: MPI_Init, MPI_Finalize, MPI_Comm, MPI_Comm_size, MPI_Comm_split, &
    MPI_Comm_free, MPI_COMM_WORLD
  use gpuwire_f08
  implicit none
  type(gpuwire_comm) :: a, b, c
  type(MPI_Comm) :: dup, half
  type(gpuwire_buffer) :: buf
  integer(int32), target :: x(1)
  integer :: size_a, size_b, size_mpi, size_c, rank, ierr, failures
  failures = 0
  call MPI_Init()
  call gpuwire_init()
  call gpuwire_comm_create(MPI_COMM_WORLD, a)                 ! type(MPI_Comm)
  call gpuwire_comm_create(MPI_COMM_WORLD%MPI_VAL, b, ierror=ierr) ! its integer handle
  if (ierr /= GPUWIRE_SUCCESS) failures = failures + 1
  call gpuwire_comm_size(a, size_a)
  call gpuwire_comm_size(b, size_b)
  call gpuwire_comm_rank(a, rank)
  ! gpuwire's own duplicate as a type(MPI_Comm), usable with mpi_f08.
  call gpuwire_comm_mpi(a, dup)
  call MPI_Comm_size(dup, size_mpi)
  if (size_a /= size_b .or. size_a /= size_mpi) failures = failures + 1
  ! A communicator over an mpi_f08 sub-communicator (ranks split in halves).
  call MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, half)
  call gpuwire_comm_create(half, c)
  call MPI_Comm_free(half) ! gpuwire keeps its own duplicate
  call gpuwire_comm_size(c, size_c)
  if (size_c /= min(2, size_a - 2 * (rank / 2))) failures = failures + 1
  x = 1
  call gpuwire_buffer_wrap(x, buf)
  call gpuwire_allreduce(c, buf, buf, GPUWIRE_SUM)
  if (x(1) /= size_c) failures = failures + 1
  call gpuwire_comm_mpi(GPUWIRE_COMM_NULL, dup, ierr)
  if (ierr /= GPUWIRE_ERROR_INVALID_HANDLE) failures = failures + 1
  x = failures
  call gpuwire_allreduce(a, buf, buf, GPUWIRE_SUM)
  if (rank == 0) then
    if (x(1) == 0) then
      print '(a,i0,a)', 'test_f08: PASS (', size_a, ' ranks)'
    else
      write (error_unit, '(a,i0,a)') 'test_f08: FAIL (', x(1), ' failures)'
    end if
  end if
  failures = x(1)
  call gpuwire_buffer_free(buf)
  call gpuwire_comm_free(c)
  call gpuwire_comm_free(b)
  call gpuwire_comm_free(a)
  call gpuwire_finalize()
  call MPI_Finalize()
  if (failures /= 0) stop 1
end program test_f08
