! error_stop.f90: without ierror, a failing call prints gpuwire's message and ends the program
! with error stop (the test expects a non-zero exit status and the message).
program error_stop
  use gpuwire
  implicit none
  type(gpuwire_comm) :: comm
  integer :: rank
  call gpuwire_init()
  call gpuwire_comm_rank(comm, rank) ! comm is GPUWIRE_COMM_NULL: GPUWIRE_ERROR_INVALID_HANDLE
  print '(a)', 'error_stop: FAIL (the program went on after an error)'
end program error_stop
