! gpuwire_f08.f90: gpuwire for programs that `use mpi_f08`. Compile it after gpuwire.f90, with the
! same MPI's Fortran wrapper (it uses that MPI's mpi_f08 module):
!
!     mpifort -c gpuwire.f90 gpuwire_f08.f90
!
! `use gpuwire_f08` gives everything of `use gpuwire`, and extends two generics with forms that
! take type(MPI_Comm) instead of an integer handle (the dummy argument is `communicator`: a
! name `mpi_comm` would clash with the type's name in Fortran, which ignores case):
!
!     call gpuwire_comm_create(MPI_COMM_WORLD, comm [, cfg] [, ierror])
!     call gpuwire_comm_mpi(comm, communicator [, ierror])  ! communicator: type(MPI_Comm)
!
! (The integer forms stay: gpuwire_comm_create(MPI_COMM_WORLD%MPI_VAL, comm) is the same call.)
module gpuwire_f08
  use mpi_f08, only: MPI_Comm
  use gpuwire
  implicit none
  private :: MPI_Comm, gw_comm_create_f08, gw_comm_mpi_f08

  interface gpuwire_comm_create
    module procedure gw_comm_create_f08
  end interface
  interface gpuwire_comm_mpi
    module procedure gw_comm_mpi_f08
  end interface

contains

  subroutine gw_comm_create_f08(communicator, comm, cfg, ierror)
    type(MPI_Comm), intent(in) :: communicator
    type(gpuwire_comm), intent(out) :: comm
    type(gpuwire_config), intent(in), optional :: cfg
    integer, intent(out), optional :: ierror
    call gpuwire_comm_create(communicator%MPI_VAL, comm, cfg, ierror)
  end subroutine gw_comm_create_f08

  subroutine gw_comm_mpi_f08(comm, communicator, ierror)
    type(gpuwire_comm), intent(in) :: comm
    type(MPI_Comm), intent(out) :: communicator
    integer, intent(out), optional :: ierror
    integer :: handle
    call gpuwire_comm_mpi(comm, handle, ierror) ! without ierror, a failure stops the program
    if (present(ierror)) then
      if (ierror /= GPUWIRE_SUCCESS) return
    end if
    communicator%MPI_VAL = handle
  end subroutine gw_comm_mpi_f08

end module gpuwire_f08
