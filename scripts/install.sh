#!/usr/bin/env bash
# install.sh: installs a built gpuwire into PREFIX (`make install` runs it after cargo build).
#
# usage: scripts/install.sh BUILD_DIR PREFIX [LIBDIR [INCLUDEDIR]]
#   BUILD_DIR   where cargo put libgpuwire.so and libgpuwire.a (target/release, target/debug, ...)
#   PREFIX      an absolute path; LIBDIR defaults to PREFIX/lib, INCLUDEDIR to PREFIX/include
#   DESTDIR     (environment) staging root for packagers: files go to DESTDIR/PREFIX/..., the
#               paths written into them stay PREFIX/...
#
# Installs, for version X.Y.Z (soname libgpuwire.so.X.Y for 0.x, libgpuwire.so.X from 1.0):
#   LIBDIR/libgpuwire.so.X.Y.Z        the shared library (soname recorded in it)
#   LIBDIR/libgpuwire.so.X.Y          -> libgpuwire.so.X.Y.Z  (what programs load: their NEEDED)
#   LIBDIR/libgpuwire.so              -> libgpuwire.so.X.Y    (what -lgpuwire finds at link time)
#   LIBDIR/libgpuwire.a               the static library
#   INCLUDEDIR/gpuwire.h gpuwire.hpp  C and C++ headers
#   INCLUDEDIR/gpuwire.f90 gpuwire_f08.f90   Fortran module sources (compile them with your
#                                     compiler: .mod files are compiler-specific), and the
#                                     gpuwire_*.inc files gpuwire.f90 includes
#   LIBDIR/pkgconfig/gpuwire.pc       pkg-config: Cflags, Libs with -rpath to LIBDIR; variables
#                                     fortran_source, fortran_f08_source, python_path
#   LIBDIR/pkgconfig/gpuwire-static.pc   the static library and the system libraries it needs
#   LIBDIR/pkgconfig/gpuwire-fortran.pc, gpuwire-fortran-f08.pc   the Fortran modules gpuwire
#                                     and gpuwire_f08 compiled with the MPI's Fortran wrapper
#                                     (LIBDIR/gpuwire/fortran/*.mod, LIBDIR/libgpuwire_fortran.a,
#                                     libgpuwire_fortran_f08.a; GPUWIRE_FC picks the compiler)
#   LIBDIR/cmake/gpuwire/             find_package(gpuwire): gpuwire::gpuwire (shared),
#                                     gpuwire::gpuwire_static, gpuwire::fortran and
#                                     gpuwire::fortran_f08 (when Fortran is enabled), each with
#                                     its MPI (find_dependency(MPI))
#   PREFIX/share/gpuwire/python/gpuwire/   the Python package (as `pip install ./python` installs
#                                     it), which loads LIBDIR's library
set -euo pipefail

[[ $# -ge 2 && $# -le 4 ]] || { echo "usage: $0 BUILD_DIR PREFIX [LIBDIR [INCLUDEDIR]]" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
build=$1 prefix=$2
libdir=${3:-$prefix/lib} includedir=${4:-$prefix/include}
destdir=${DESTDIR:-}
for d in "$prefix" "$libdir" "$includedir"; do
    [[ $d == /* ]] || { echo "$0: $d is not an absolute path" >&2; exit 2; }
done
so=$build/libgpuwire.so
for f in "$so" "$build/libgpuwire.a"; do
    [[ -f $f ]] || { echo "$0: $f is missing: build the library first (cargo build)" >&2; exit 1; }
done

# Version from the header the build generated; soname from the library itself.
version_part() { sed -n "s/^#define GPUWIRE_VERSION_$1 \\([0-9]*\\)$/\\1/p" "$root/include/gpuwire.h"; }
major=$(version_part MAJOR) minor=$(version_part MINOR) patch=$(version_part PATCH)
version=$major.$minor.$patch
soname=$(readelf -d "$so" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
[[ -n $soname ]] || { echo "$0: $so has no soname" >&2; exit 1; }
real=libgpuwire.so.$version
# The MPI the library was built against: its NEEDED libmpi* (for the record), and where the
# loader finds it now (the static library needs it on the link line).
mpi_needed=$(readelf -d "$so" | sed -n 's/.*Shared library: \[\(libmpi[^]]*\)\].*/\1/p' | head -n 1)
mpi_path=$(ldd "$so" 2> /dev/null | awk -v n="$mpi_needed" '$1 == n && $3 ~ /^\// {print $3; exit}')
mpi_link=${mpi_path:--lmpi}

L=$destdir$libdir I=$destdir$includedir S=$destdir$prefix/share/gpuwire
install -d "$L" "$L/pkgconfig" "$L/cmake/gpuwire" "$I" "$S/python"

install -m 755 "$so" "$L/$real"
[[ $soname == "$real" ]] || ln -sfn "$real" "$L/$soname"
ln -sfn "$soname" "$L/libgpuwire.so"
install -m 644 "$build/libgpuwire.a" "$L/libgpuwire.a"
for h in gpuwire.h gpuwire.hpp gpuwire.f90 gpuwire_f08.f90 gpuwire_c.inc gpuwire_generics.inc gpuwire_kinds.inc; do
    install -m 644 "$root/include/$h" "$I/$h"
done
# The Python package, whose loader goes to this prefix's library first (after GPUWIRE_LIBRARY).
rm -rf "$S/python/gpuwire" "$S/python/gpuwire.py"
install -d "$S/python/gpuwire"
for f in "$root"/python/gpuwire/*.py; do
    install -m 644 "$f" "$S/python/gpuwire/"
done
sed "s|^_INSTALLED_LIBRARY = None$|_INSTALLED_LIBRARY = \"$libdir/$soname\"|" \
    "$root/python/gpuwire/_library.py" > "$S/python/gpuwire/_library.py"
grep -q "^_INSTALLED_LIBRARY = \"" "$S/python/gpuwire/_library.py" ||
    { echo "$0: could not set _INSTALLED_LIBRARY in the installed gpuwire/_library.py" >&2; exit 1; }

# What the static library needs besides itself: the MPI, then the system libraries of
# rustc --print native-static-libs.
static_libs="$mpi_link -ldl -lgcc_s -lutil -lrt -lpthread -lm -lc"

cat > "$L/pkgconfig/gpuwire.pc" << EOF
prefix=$prefix
libdir=$libdir
includedir=$includedir
fortran_source=\${includedir}/gpuwire.f90
fortran_f08_source=\${includedir}/gpuwire_f08.f90
python_path=\${prefix}/share/gpuwire/python
mpi_library=$mpi_needed

Name: gpuwire
Description: Communicators and host/GPU buffers for MPI programs in C, C++, Fortran and Python (built against ${mpi_needed:-an MPI library})
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lgpuwire
EOF

cat > "$L/pkgconfig/gpuwire-static.pc" << EOF
prefix=$prefix
libdir=$libdir
includedir=$includedir

Name: gpuwire-static
Description: gpuwire as a static library, with the MPI library it was built against
Version: $version
Cflags: -I\${includedir}
Libs: \${libdir}/libgpuwire.a $static_libs
EOF

# The Fortran modules, compiled once with the Fortran wrapper of the MPI the library was built
# against (GPUWIRE_FC overrides it; GPUWIRE_FFLAGS the flags), for the pkg-config modules
# gpuwire-fortran and gpuwire-fortran-f08: LIBDIR/gpuwire/fortran/*.mod and
# LIBDIR/libgpuwire_fortran.a, libgpuwire_fortran_f08.a. Module files are compiler-specific:
# other compilers compile the installed sources (CMake's gpuwire::fortran does). Without a Fortran
# compiler, or where the compile fails, these are left out with a warning.
fortran_sources=(gpuwire.f90) fortran_f08_sources=(gpuwire_f08.f90)
fc=${GPUWIRE_FC:-mpifort}
if [[ -z ${GPUWIRE_FC:-} && $mpi_needed == libmpich* ]] && command -v mpifort.mpich > /dev/null; then
    fc=mpifort.mpich
fi
read -r -a fflags <<< "${GPUWIRE_FFLAGS:--O2 -fPIC}"
fbuild=$(mktemp -d "${TMPDIR:-/tmp}/gpuwire-install-fortran.XXXXXX")
fortran_ok=0
if command -v "$fc" > /dev/null &&
    (cd "$fbuild" && "$fc" "${fflags[@]}" -c "${fortran_sources[@]/#/$root/include/}" &&
        "$fc" "${fflags[@]}" -c "${fortran_f08_sources[@]/#/$root/include/}") > "$fbuild/log" 2>&1; then
    fortran_ok=1
    fc_version=$("$fc" --version 2> /dev/null | head -n 1)
    install -d "$L/gpuwire/fortran"
    install -m 644 "$fbuild"/*.mod "$L/gpuwire/fortran/"
    rm -f "$L/libgpuwire_fortran.a" "$L/libgpuwire_fortran_f08.a"
    (cd "$fbuild" && ar rcs "$L/libgpuwire_fortran.a" "${fortran_sources[@]/%.f90/.o}" &&
        ar rcs "$L/libgpuwire_fortran_f08.a" "${fortran_f08_sources[@]/%.f90/.o}")
    cat > "$L/pkgconfig/gpuwire-fortran.pc" << EOF
prefix=$prefix
libdir=$libdir
includedir=$includedir
moduledir=\${libdir}/gpuwire/fortran
source=\${includedir}/gpuwire.f90
fortran_compiler=$fc_version

Name: gpuwire-fortran
Description: gpuwire's Fortran module gpuwire, compiled with $fc ($fc_version); other compilers compile \${source}
Version: $version
Requires: gpuwire
Cflags: -I\${moduledir}
Libs: -L\${libdir} -lgpuwire_fortran
EOF
    cat > "$L/pkgconfig/gpuwire-fortran-f08.pc" << EOF
prefix=$prefix
libdir=$libdir
includedir=$includedir
moduledir=\${libdir}/gpuwire/fortran
source=\${includedir}/gpuwire_f08.f90
fortran_compiler=$fc_version

Name: gpuwire-fortran-f08
Description: gpuwire's Fortran module gpuwire_f08 (for mpi_f08 programs: compile them with the same MPI's wrapper), compiled with $fc ($fc_version)
Version: $version
Requires: gpuwire-fortran
Libs: -L\${libdir} -lgpuwire_fortran_f08
EOF
else
    echo "$0: warning: could not compile the Fortran modules with '$fc' (GPUWIRE_FC): gpuwire-fortran.pc and gpuwire-fortran-f08.pc are not installed" >&2
    [[ -f $fbuild/log ]] && sed -e 's/^/    | /' "$fbuild/log" | tail -n 20 >&2
fi
rm -rf "$fbuild"

cat > "$L/cmake/gpuwire/gpuwire-config.cmake" << EOF
# gpuwire $version, installed by scripts/install.sh. One line per language after find_package:
#
#   find_package(gpuwire 0.1 REQUIRED)
#   target_link_libraries(app PRIVATE gpuwire::gpuwire)        # C and C++ (gpuwire.hpp)
#   target_link_libraries(app PRIVATE gpuwire::gpuwire_static) # the same, static library
#   target_link_libraries(app PRIVATE gpuwire::fortran)        # Fortran: use gpuwire
#   target_link_libraries(app PRIVATE gpuwire::fortran_f08)    # Fortran: use gpuwire_f08 (mpi_f08)
#
# Each target brings MPI: find_package(gpuwire) finds MPI (FindMPI) for the languages the project
# enabled, and the targets link MPI::MPI_C (MPI::MPI_CXX in a C++-only project, MPI::MPI_Fortran
# in a Fortran-only one; the Fortran targets MPI::MPI_Fortran too). That MPI must be the one
# gpuwire was built against (gpuwire_MPI_LIBRARY): find_package(gpuwire) fails when FindMPI found
# another (choose it with -DMPI_C_COMPILER=..., -DMPI_Fortran_COMPILER=... or MPI_HOME). The
# Fortran targets exist when the project enabled Fortran before find_package(gpuwire): static
# libraries compiled from the installed gpuwire.f90 and gpuwire_f08.f90 with the project's Fortran
# compiler (module files are compiler-specific); gpuwire::fortran_f08 needs an MPI with the
# mpi_f08 module (MPI_Fortran_HAVE_F08_MODULE).
set(gpuwire_VERSION "$version")
set(gpuwire_INCLUDE_DIR "$includedir")
set(gpuwire_LIBRARY "$libdir/$real")
set(gpuwire_STATIC_LIBRARY "$libdir/libgpuwire.a")
set(gpuwire_FORTRAN_SOURCE "$includedir/gpuwire.f90")
set(gpuwire_FORTRAN_F08_SOURCE "$includedir/gpuwire_f08.f90")
set(gpuwire_PYTHON_PATH "$prefix/share/gpuwire/python")
set(gpuwire_MPI_LIBRARY "$mpi_needed")
set(gpuwire_MPI_LIBRARY_PATH "$mpi_path")

include(CMakeFindDependencyMacro)
set(_gpuwire_mpi_languages)
foreach(_gpuwire_lang C CXX Fortran)
  if(CMAKE_\${_gpuwire_lang}_COMPILER_LOADED)
    list(APPEND _gpuwire_mpi_languages \${_gpuwire_lang})
  endif()
endforeach()
if(NOT _gpuwire_mpi_languages)
  set(gpuwire_FOUND FALSE)
  set(gpuwire_NOT_FOUND_MESSAGE "enable C, CXX or Fortran before find_package(gpuwire)")
  return()
endif()
find_dependency(MPI COMPONENTS \${_gpuwire_mpi_languages})
# The MPI found is the one the library was built against: two MPIs in one process do not work.
if(gpuwire_MPI_LIBRARY_PATH)
  get_filename_component(_gpuwire_mpi_want "\${gpuwire_MPI_LIBRARY_PATH}" REALPATH)
  foreach(_gpuwire_lang IN LISTS _gpuwire_mpi_languages)
    set(_gpuwire_mpi_same FALSE)
    foreach(_gpuwire_lib IN LISTS MPI_\${_gpuwire_lang}_LIBRARIES)
      get_filename_component(_gpuwire_lib_real "\${_gpuwire_lib}" REALPATH)
      if(_gpuwire_lib_real STREQUAL _gpuwire_mpi_want)
        set(_gpuwire_mpi_same TRUE)
      endif()
    endforeach()
    if(NOT _gpuwire_mpi_same)
      set(gpuwire_FOUND FALSE)
      set(gpuwire_NOT_FOUND_MESSAGE "gpuwire was built against \${gpuwire_MPI_LIBRARY_PATH}, but FindMPI found another MPI for \${_gpuwire_lang} (MPI_\${_gpuwire_lang}_LIBRARIES: \${MPI_\${_gpuwire_lang}_LIBRARIES}): choose gpuwire's MPI with -DMPI_\${_gpuwire_lang}_COMPILER=<its compiler wrapper> or MPI_HOME")
      return()
    endif()
  endforeach()
endif()
if(TARGET MPI::MPI_C)
  set(_gpuwire_mpi MPI::MPI_C)
elseif(TARGET MPI::MPI_CXX)
  set(_gpuwire_mpi MPI::MPI_CXX)
else()
  set(_gpuwire_mpi MPI::MPI_Fortran)
endif()

if(NOT TARGET gpuwire::gpuwire)
  add_library(gpuwire::gpuwire SHARED IMPORTED)
  set_target_properties(gpuwire::gpuwire PROPERTIES
    IMPORTED_LOCATION "\${gpuwire_LIBRARY}"
    IMPORTED_SONAME "$soname"
    INTERFACE_INCLUDE_DIRECTORIES "\${gpuwire_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "\${_gpuwire_mpi}")
endif()
if(NOT TARGET gpuwire::gpuwire_static)
  add_library(gpuwire::gpuwire_static STATIC IMPORTED)
  set_target_properties(gpuwire::gpuwire_static PROPERTIES
    IMPORTED_LOCATION "\${gpuwire_STATIC_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "\${gpuwire_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "\${_gpuwire_mpi};dl;gcc_s;util;rt;pthread;m")
endif()
if(CMAKE_Fortran_COMPILER_LOADED AND NOT TARGET gpuwire::fortran)
  set(_gpuwire_modules "\${CMAKE_CURRENT_BINARY_DIR}/gpuwire_modules")
  add_library(gpuwire_fortran STATIC "\${gpuwire_FORTRAN_SOURCE}")
  set_target_properties(gpuwire_fortran PROPERTIES Fortran_MODULE_DIRECTORY "\${_gpuwire_modules}")
  target_include_directories(gpuwire_fortran INTERFACE "\${_gpuwire_modules}")
  target_link_libraries(gpuwire_fortran PUBLIC gpuwire::gpuwire MPI::MPI_Fortran)
  add_library(gpuwire::fortran ALIAS gpuwire_fortran)
  if(MPI_Fortran_HAVE_F08_MODULE)
    add_library(gpuwire_fortran_f08 STATIC "\${gpuwire_FORTRAN_F08_SOURCE}")
    set_target_properties(gpuwire_fortran_f08 PROPERTIES Fortran_MODULE_DIRECTORY "\${_gpuwire_modules}")
    target_link_libraries(gpuwire_fortran_f08 PUBLIC gpuwire_fortran MPI::MPI_Fortran)
    add_library(gpuwire::fortran_f08 ALIAS gpuwire_fortran_f08)
  endif()
endif()
set(gpuwire_FOUND TRUE)
EOF

# Compatible versions follow the soname: the same 0.MINOR below 1.0, the same MAJOR from 1.0.
cat > "$L/cmake/gpuwire/gpuwire-config-version.cmake" << EOF
set(PACKAGE_VERSION "$version")
if(NOT CMAKE_SIZEOF_VOID_P STREQUAL "" AND NOT CMAKE_SIZEOF_VOID_P EQUAL 8)
  set(PACKAGE_VERSION "\${PACKAGE_VERSION} (64-bit)")
  set(PACKAGE_VERSION_UNSUITABLE TRUE)
elseif(NOT PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
elseif(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
elseif(PACKAGE_FIND_VERSION_MAJOR EQUAL $major AND ($major GREATER 0 OR PACKAGE_FIND_VERSION_MINOR EQUAL $minor))
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION VERSION_EQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
else()
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
endif()
EOF

echo "installed gpuwire $version into $destdir$prefix:"
echo "  $libdir/$real ($soname, libgpuwire.so), libgpuwire.a"
echo "  $includedir/gpuwire.h gpuwire.hpp gpuwire.f90 gpuwire_f08.f90"
echo "  $libdir/pkgconfig/gpuwire.pc gpuwire-static.pc, $libdir/cmake/gpuwire/"
if [[ $fortran_ok -eq 1 ]]; then
    echo "  $libdir/pkgconfig/gpuwire-fortran.pc gpuwire-fortran-f08.pc: modules compiled with $fc ($fc_version)"
fi
echo "  $prefix/share/gpuwire/python/gpuwire/ (the Python package)"
