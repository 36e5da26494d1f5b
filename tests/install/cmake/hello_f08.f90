! hello_f08.f90: module gpuwire_f08 through CMake's gpuwire::fortran_f08 target alone (which
! brings gpuwire, gpuwire_f08 and mpi_f08): gpuwire over MPI_COMM_WORLD as a type(MPI_Comm).
program hello_f08
  use, intrinsic :: iso_fortran_env, only: real64
  use mpi_f08
  use gpuwire_f08
  implicit none
  type(gpuwire_comm) :: comm
  type(gpuwire_buffer) :: buf
  type(MPI_Comm) :: back
  real(real64), target :: x(3)
  integer :: rank, size
  call MPI_Init()
  call gpuwire_init()
  call gpuwire_comm_create(MPI_COMM_WORLD, comm)
  call gpuwire_comm_rank(comm, rank)
  call gpuwire_comm_size(comm, size)
  call gpuwire_comm_mpi(comm, back)
  x = rank + 1
  call gpuwire_buffer_wrap(x, buf)
  call gpuwire_allreduce(comm, buf, buf, GPUWIRE_SUM)
  if (any(x /= size * (size + 1) / 2)) error stop 'hello_f08: wrong allreduce'
  if (rank == 0) print '(a,i0,a)', 'hello_f08: PASS (', size, ' ranks)'
  call gpuwire_buffer_free(buf)
  call gpuwire_comm_free(comm)
  call gpuwire_finalize()
  call MPI_Finalize()
end program hello_f08
