! reject_section.f90: MUST NOT COMPILE (with -cpp); with -cpp -DCONTROL it must compile.
! A non-contiguous array section cannot become a buffer: it would be a compiler temporary, which a
! nonblocking call could send after it is gone.
program reject_section
  use gpuwire
  implicit none
  real, target :: a(4, 4)
  type(gpuwire_buffer) :: buf
  a = 0
#ifdef CONTROL
  call gpuwire_buffer_wrap(a(:, 2), buf) ! a contiguous column: accepted
#else
  call gpuwire_buffer_wrap(a(2, :), buf) ! a row, stride 4: rejected
#endif
end program reject_section
