! reject_no_target.f90: MUST NOT COMPILE (with -cpp); with -cpp -DCONTROL it must compile.
! An array without TARGET (or POINTER) cannot become a buffer: the buffer outlives the call, and
! only a target's address stays meaningful after it.
program reject_no_target
  use gpuwire
  implicit none
#ifdef CONTROL
  real(kind(1.0d0)), target :: x(8) ! accepted
#else
  real(kind(1.0d0)) :: x(8) ! rejected
#endif
  type(gpuwire_buffer) :: buf
  x = 0
  call gpuwire_buffer_wrap(x, buf)
end program reject_no_target
