! hello_fortran.f90: module gpuwire through CMake's gpuwire::fortran target: an allgather.
program hello_fortran
  use, intrinsic :: iso_fortran_env, only: int32
  use gpuwire
  implicit none
  type(gpuwire_comm) :: comm
  type(gpuwire_buffer) :: mine, all
  integer(int32), target :: me(1)
  integer(int32), allocatable, target :: ranks(:)
  integer :: rank, size, i
  call gpuwire_init()
  call gpuwire_comm_world(comm)
  call gpuwire_comm_rank(comm, rank)
  call gpuwire_comm_size(comm, size)
  me = rank
  allocate (ranks(size))
  call gpuwire_buffer_wrap(me, mine)
  call gpuwire_buffer_wrap(ranks, all)
  call gpuwire_allgather(comm, mine, all)
  if (any(ranks /= [(i, i = 0, size - 1)])) error stop 'hello_fortran: wrong allgather'
  if (rank == 0) print '(a,i0,a)', 'hello_fortran: PASS (', size, ' ranks)'
  call gpuwire_buffer_free(all)
  call gpuwire_buffer_free(mine)
  call gpuwire_comm_free(comm)
  call gpuwire_finalize()
end program hello_fortran
