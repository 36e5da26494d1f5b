! reject_section.f90: MUST NOT COMPILE (with -cpp); with -cpp -DCONTROL it must compile.
! gpuwire_buffer_wrap takes non-contiguous sections of rank 1 to 7 as strided buffers (the
! section's elements where they are; test_fortran checks them); of a higher rank the array must be
! simply contiguous: a section would be a compiler temporary, which a nonblocking call could send
! after it is gone.
program reject_section
  use gpuwire
  implicit none
  real, target :: a(2, 2, 2, 2, 2, 2, 2, 2, 2)
  type(gpuwire_buffer) :: buf
  a = 0
#ifdef CONTROL
  call gpuwire_buffer_wrap(a(:, :, :, :, :, :, :, :, 2), buf) ! contiguous, rank 8: accepted
#else
  call gpuwire_buffer_wrap(a(2, :, :, :, :, :, :, :, :), buf) ! stride 2, rank 8: rejected
#endif
end program reject_section
