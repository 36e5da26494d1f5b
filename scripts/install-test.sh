#!/usr/bin/env bash
# install-test.sh: `make install` into a scratch prefix, then programs built against the
# installed tree alone, outside the checkout, run under mpirun (Open MPI):
#   - the README's blocks, extracted by scripts/readme-blocks.py and run as written, with PREFIX
#     set: the install itself, C with pkg-config (shared and static), C++ with CMake and with
#     pkg-config, Fortran (the installed module source), Python (the installed package, and
#     `pip install ./python` into a virtual environment: the README's hello.py and the pytest
#     suite tests/python/test_package.py against the pip-installed package);
#   - tests/install/cmake: an out-of-tree CMake project built with the plain compilers, one
#     program per target (gpuwire::gpuwire with a program that calls MPI itself,
#     gpuwire::gpuwire_static, gpuwire::fortran, gpuwire::fortran_f08), each bringing its MPI;
#     find_package's version rule (0.2 refused) and its refusal of another MPI (MPICH's);
#   - the Fortran modules through pkg-config (gpuwire-fortran, gpuwire-fortran-f08);
#   - the installed files: soname and links, each program's NEEDED and rpath and the library it
#     loads (the installed one, not the build tree's), pkg-config, DESTDIR staging.
# Prints PASS/FAIL/SKIP lines, then "c-install: N passed, N failed, N skipped".
#
# usage: scripts/install-test.sh       (after `cargo build`; installs GPUWIRE_PROFILE, default
#                                       debug: the build make test already has)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/gpuwire-install-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
logs=$root/build/install-test/logs
results=$root/build/results
rm -rf "$logs"
mkdir -p "$logs" "$results"
timeout_s=${GPUWIRE_TEST_TIMEOUT:-300}

export PREFIX=$work/prefix
export GPUWIRE_PROFILE=${GPUWIRE_PROFILE:-debug}
if [[ $(id -u) -eq 0 ]]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# The README says `mpirun -n 2`: allow 2 ranks on fewer cores, unpinned.
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
unset GPUWIRE_LIBRARY PKG_CONFIG_PATH PYTHONPATH

passed=0 failed=0 skipped=0
record() { # STATUS ID [DETAIL]
    local status=$1 id=$2 detail=${3:-}
    case $status in
    PASS) passed=$((passed + 1)) ;;
    FAIL) failed=$((failed + 1)) ;;
    SKIP) skipped=$((skipped + 1)) ;;
    esac
    printf '%s %s%s\n' "$status" "[install] $id" "${detail:+ ($detail)}"
}
show_log() { sed -e 's/^/    | /' "$1" | tail -n 40; }
expect() { # ID CONDITION-COMMAND... : PASS when the command succeeds
    local id=$1
    shift
    if "$@" > /dev/null 2>&1; then record PASS "$id"; else record FAIL "$id" "$*"; fi
}
finish() {
    echo "c-install: $passed passed, $failed failed, $skipped skipped"
    echo "$passed $failed $skipped" > "$results/c-install.txt"
    if [[ $failed -gt 0 ]]; then exit 1; fi
    if [[ $skipped -gt 0 && -n ${CI:-} ]]; then
        echo "c-install: $skipped test(s) skipped on CI, where every test must run" >&2
        exit 1
    fi
    exit 0
}

echo "== install and out-of-tree projects (PREFIX=$PREFIX, GPUWIRE_PROFILE=$GPUWIRE_PROFILE)"

# python3 in the README's commands: one with mpi4py for Open MPI and NumPy.
python_ok=0
if py=$(bash "$root/scripts/find-python.sh" "Open MPI"); then
    mkdir -p "$work/bin"
    ln -s "$py" "$work/bin/python3"
    export PATH=$work/bin:$PATH
    python_ok=1
fi

# ---- the README's blocks -------------------------------------------------------------------------

readme=$work/readme
if ! python3 "$root/scripts/readme-blocks.py" "$root/README.md" "$readme" > "$work/blocks.txt" 2> "$logs/readme-blocks.log"; then
    record FAIL "README blocks extracted" "log $logs/readme-blocks.log"
    show_log "$logs/readme-blocks.log"
    finish
fi
for name in install c cpp fortran python python-pip; do
    grep -q "^$name " "$work/blocks.txt" || record FAIL "README has a tested '$name' block"
done

# run_block NAME PATTERNS: runs README block NAME (bash -e); passes on exit status 0 and output
# matching every extended regex in PATTERNS (one per line).
run_block() {
    local name=$1 patterns=$2 log=$logs/readme-$1.log dir rc
    dir=$readme/$name
    [[ $(awk -v n="$name" '$1 == n {print $2}' "$work/blocks.txt") == checkout ]] && dir=$root
    if [[ ! -f $readme/$name/run.sh ]]; then
        record FAIL "README '$name' block" "not found"
        return 1
    fi
    (cd "$dir" && timeout -k 10 "$timeout_s" bash -euo pipefail "$readme/$name/run.sh") > "$log" 2>&1
    rc=$?
    local why=""
    if [[ $rc -ne 0 ]]; then
        why="exit status $rc"
    else
        while IFS= read -r p; do
            [[ -z $p ]] && continue
            grep -qE -- "$p" "$log" || { why="output lacks /$p/"; break; }
        done <<< "$patterns"
    fi
    if [[ -z $why ]]; then
        record PASS "README '$name' block: $(grep -cv '^$' "$readme/$name/run.sh") command(s) as written"
        return 0
    fi
    record FAIL "README '$name' block" "$why; log $log"
    show_log "$log"
    return 1
}
# Unanchored: two ranks' lines may interleave in the launcher's output.
sum_ok='rank 0: sum of ranks = 1(\.0)?([^0-9.]|$)
rank 1: sum of ranks = 1(\.0)?([^0-9.]|$)'
# loads_installed PROGRAM: the program needs the soname and loads it from PREFIX/lib. (No
# `grep -q` after a pipe: under pipefail, the writer's SIGPIPE would fail the pipeline.)
loads_installed() {
    readelf -d "$1" | grep 'NEEDED.*\[libgpuwire.so.0.1\]' > /dev/null &&
        ldd "$1" | grep "libgpuwire.so.0.1 => $PREFIX/lib/libgpuwire.so.0.1 " > /dev/null
}
has_rpath() { readelf -d "$1" | grep -E '(RPATH|RUNPATH)' | grep "$PREFIX/lib" > /dev/null; }
no_gpuwire_needed() { ! readelf -d "$1" | grep 'NEEDED.*libgpuwire' > /dev/null; }

# 1. make install
if ! run_block install "^installed gpuwire [0-9.]+ into $PREFIX"; then
    finish
fi
L=$PREFIX/lib
soname_of() { readelf -d "$1" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p'; }
version=$(sed -n 's/^#define GPUWIRE_VERSION_STRING "\(.*\)"$/\1/p' "$root/include/gpuwire.h")
expect "installed libgpuwire.so.$version has the soname libgpuwire.so.0.1" \
    test "$(soname_of "$L/libgpuwire.so.$version")" = libgpuwire.so.0.1
expect "links libgpuwire.so -> libgpuwire.so.0.1 -> libgpuwire.so.$version" \
    test "$(readlink "$L/libgpuwire.so")/$(readlink "$L/libgpuwire.so.0.1")" = "libgpuwire.so.0.1/libgpuwire.so.$version"
expect "installed libgpuwire.a, headers, Fortran sources, Python module, CMake files" \
    test -f "$L/libgpuwire.a" -a -f "$PREFIX/include/gpuwire.h" -a -f "$PREFIX/include/gpuwire.hpp" \
    -a -f "$PREFIX/include/gpuwire.f90" -a -f "$PREFIX/include/gpuwire_f08.f90" \
    -a -f "$PREFIX/share/gpuwire/python/gpuwire/__init__.py" -a -f "$L/cmake/gpuwire/gpuwire-config.cmake" \
    -a -f "$L/cmake/gpuwire/gpuwire-config-version.cmake" -a -f "$L/pkgconfig/gpuwire-fortran.pc" \
    -a -f "$L/pkgconfig/gpuwire-fortran-f08.pc" -a -f "$L/libgpuwire_fortran.a" -a -f "$L/gpuwire/fortran/gpuwire.mod"
expect "installed headers are the checkout's" cmp "$PREFIX/include/gpuwire.h" "$root/include/gpuwire.h"
expect "pkg-config --modversion gpuwire is $version" \
    test "$(PKG_CONFIG_PATH=$L/pkgconfig pkg-config --modversion gpuwire)" = "$version"

# 2. C: pkg-config, shared and static
if run_block c "$sum_ok"; then
    expect "C program (pkg-config) needs libgpuwire.so.0.1 and loads PREFIX/lib's" loads_installed "$readme/c/hello"
    expect "C program (pkg-config) has an rpath to PREFIX/lib" has_rpath "$readme/c/hello"
    expect "C program (gpuwire-static) does not need libgpuwire.so" no_gpuwire_needed "$readme/c/hello_static"
fi
# 3. C++: CMake and pkg-config
if run_block cpp "$sum_ok"; then
    expect "C++ program (CMake, gpuwire::gpuwire) loads PREFIX/lib's library" loads_installed "$readme/cpp/build/hello_cpp"
    expect "C++ program (pkg-config) loads PREFIX/lib's library" loads_installed "$readme/cpp/hello_cpp"
fi
# 4. Fortran: the installed module source
if run_block fortran "$sum_ok"; then
    expect "Fortran program loads PREFIX/lib's library" loads_installed "$readme/fortran/hello_f"
fi
# 5. Python: the package make install copied (finds the installed library by itself), then
# `pip install ./python` into a virtual environment, which finds the library through pkg-config.
if [[ $python_ok -eq 1 ]]; then
    run_block python "$sum_ok"
    expect "installed package gpuwire loads PREFIX/lib's library" \
        grep -q "^_INSTALLED_LIBRARY = \"$L/libgpuwire.so.0.1\"$" "$PREFIX/share/gpuwire/python/gpuwire/_library.py"
    if run_block python-pip "^gpuwire \\(0, 1, 0\\) from $L/libgpuwire.so.0.1 \\(pkg-config\\)$"; then
        vpy=$PREFIX/venv/bin/python3
        log=$logs/pip-hello.log
        if (cd "$readme/python" && export PKG_CONFIG_PATH=$L/pkgconfig &&
            timeout -k 10 "$timeout_s" mpirun -n 2 "$vpy" hello.py) > "$log" 2>&1 &&
            grep -qE "rank 0: sum of ranks = 1([^0-9.]|$)" "$log" && grep -qE "rank 1: sum of ranks = 1([^0-9.]|$)" "$log"; then
            record PASS "pip-installed package: the README's hello.py on 2 ranks"
        else
            record FAIL "pip-installed package: the README's hello.py on 2 ranks" "log $log"
            show_log "$log"
        fi
        log=$logs/pip-pytest.log
        if (cd "$work" && export PKG_CONFIG_PATH=$L/pkgconfig GPUWIRE_TEST_INSTALLED=1 &&
            timeout -k 10 "$timeout_s" mpirun -n 2 "$vpy" -m pytest -q -p no:cacheprovider --color=no \
                "$root/tests/python/test_package.py") > "$log" 2>&1; then
            record PASS "pip-installed package: pytest tests/python/test_package.py on 2 ranks ($(grep -m1 -oE '[0-9]+ passed' "$log"))"
        else
            record FAIL "pip-installed package: pytest tests/python/test_package.py on 2 ranks" "log $log"
            show_log "$log"
        fi
    fi
else
    record SKIP "README 'python' and 'python-pip' blocks" "no python3 with mpi4py (Open MPI) and NumPy"
fi

# ---- a CMake project: the static library, the Fortran module target, the version rule ---------

# Built with the plain compilers (gcc, gfortran: no MPI wrapper), so MPI reaches each program
# only through the gpuwire target it links.
cm=$work/cmake
cp -r "$root/tests/install/cmake" "$cm"
log=$logs/cmake-project.log
if (cd "$cm" && cmake -S . -B build -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_C_COMPILER=gcc -DCMAKE_Fortran_COMPILER=gfortran &&
    cmake --build build) > "$log" 2>&1; then
    record PASS "CMake project (gcc, gfortran): find_package(gpuwire 0.1.0); gpuwire::gpuwire, gpuwire_static, fortran, fortran_f08 bring MPI; 0.2 refused"
    expect "CMake static program does not need libgpuwire.so" no_gpuwire_needed "$cm/build/static_c"
    expect "CMake program (gpuwire::gpuwire) loads PREFIX/lib's library" loads_installed "$cm/build/mpi_c"
    log=$logs/cmake-run.log
    if (cd "$cm" && timeout -k 10 "$timeout_s" mpirun -n 2 ./build/static_c &&
        timeout -k 10 "$timeout_s" mpirun -n 2 ./build/mpi_c &&
        timeout -k 10 "$timeout_s" mpirun -n 2 ./build/hello_fortran &&
        timeout -k 10 "$timeout_s" mpirun -n 2 ./build/hello_f08) > "$log" 2>&1 &&
        grep -q "static_c: rank 1 of 2 got 42" "$log" && grep -q "mpi_c: rank 1: sum over its half 1" "$log" &&
        grep -q "^hello_fortran: PASS (2 ranks)" "$log" && grep -q "^hello_f08: PASS (2 ranks)" "$log"; then
        record PASS "CMake project programs (static C, C with MPI, Fortran, Fortran mpi_f08) run on 2 ranks"
    else
        record FAIL "CMake project programs run on 2 ranks" "log $log"
        show_log "$log"
    fi
else
    record FAIL "CMake project: find_package(gpuwire 0.1.0), gpuwire::gpuwire, gpuwire_static, fortran, fortran_f08" "log $log"
    show_log "$log"
fi

# find_package(gpuwire) refuses an MPI other than the library's (here MPICH's for an Open MPI
# build), naming both.
if command -v mpicc.mpich > /dev/null; then
    mm=$work/cmake-mpi
    mkdir -p "$mm"
    printf 'cmake_minimum_required(VERSION 3.16)\nproject(other_mpi LANGUAGES C)\nfind_package(gpuwire 0.1 REQUIRED)\n' > "$mm/CMakeLists.txt"
    log=$logs/cmake-other-mpi.log
    if (cd "$mm" && cmake -S . -B build -DCMAKE_PREFIX_PATH="$PREFIX" -DMPI_C_COMPILER=mpicc.mpich) > "$log" 2>&1; then
        record FAIL "CMake: find_package(gpuwire) refuses another MPI (MPI_C_COMPILER=mpicc.mpich)" "it configured; log $log"
    elif tr -s ' \n' ' ' < "$log" | grep -q "gpuwire was built against .*libmpi.so.* but FindMPI found another MPI for C"; then
        record PASS "CMake: find_package(gpuwire) refuses another MPI (MPI_C_COMPILER=mpicc.mpich), naming both"
    else
        record FAIL "CMake: find_package(gpuwire) refuses another MPI" "not for that reason; log $log"
        show_log "$log"
    fi
else
    record SKIP "CMake: find_package(gpuwire) refuses another MPI" "no mpicc.mpich"
fi

# pkg-config for the Fortran modules: one command per program with the MPI's wrapper.
pf=$work/pkgconfig-fortran
mkdir -p "$pf"
log=$logs/pkgconfig-fortran.log
if (cd "$pf" && export PKG_CONFIG_PATH=$L/pkgconfig &&
    mpifort "$root/tests/install/cmake/hello_fortran.f90" $(pkg-config --cflags --libs gpuwire-fortran) -o hello_fortran &&
    mpifort "$root/tests/install/cmake/hello_f08.f90" $(pkg-config --cflags --libs gpuwire-fortran-f08) -o hello_f08 &&
    timeout -k 10 "$timeout_s" mpirun -n 2 ./hello_fortran && timeout -k 10 "$timeout_s" mpirun -n 2 ./hello_f08) > "$log" 2>&1 &&
    grep -q "^hello_fortran: PASS (2 ranks)" "$log" && grep -q "^hello_f08: PASS (2 ranks)" "$log"; then
    record PASS "pkg-config gpuwire-fortran, gpuwire-fortran-f08: mpifort prog.f90 \$(pkg-config --cflags --libs ...), run on 2 ranks"
    expect "Fortran program (pkg-config) loads PREFIX/lib's library" loads_installed "$pf/hello_f08"
else
    record FAIL "pkg-config gpuwire-fortran, gpuwire-fortran-f08" "log $log"
    show_log "$log"
fi

# find_package's version rule, case by case (the version file evaluated in script mode).
cat > "$work/version.cmake" << EOF
set(CMAKE_SIZEOF_VOID_P 8)
foreach(want 0.1 0.1.0 0.0.9 0.2 1.0)
  string(REPLACE "." ";" parts "\${want}")
  list(GET parts 0 PACKAGE_FIND_VERSION_MAJOR)
  list(GET parts 1 PACKAGE_FIND_VERSION_MINOR)
  set(PACKAGE_FIND_VERSION \${want})
  unset(PACKAGE_VERSION_COMPATIBLE)
  include("$L/cmake/gpuwire/gpuwire-config-version.cmake")
  message("\${want}:\${PACKAGE_VERSION_COMPATIBLE}")
endforeach()
EOF
got=$(cmake -P "$work/version.cmake" 2>&1 | tr '\n' ' ')
if [[ $got == "0.1:TRUE 0.1.0:TRUE 0.0.9:FALSE 0.2:FALSE 1.0:FALSE " ]]; then
    record PASS "CMake version rule: 0.1 and 0.1.0 accepted; 0.0.9, 0.2, 1.0 refused"
else
    record FAIL "CMake version rule" "got: $got"
fi

# ---- DESTDIR staging: files under DESTDIR, paths inside them without it ------------------------

log=$logs/destdir.log
if (cd "$root" && make --no-print-directory install DESTDIR="$work/stage" PREFIX=/opt/gpuwire) > "$log" 2>&1 &&
    [[ -f $work/stage/opt/gpuwire/lib/libgpuwire.so.$version ]] &&
    grep -qx "prefix=/opt/gpuwire" "$work/stage/opt/gpuwire/lib/pkgconfig/gpuwire.pc" &&
    ! grep -rq "$work/stage" "$work/stage/opt/gpuwire/lib/pkgconfig" "$work/stage/opt/gpuwire/lib/cmake" "$work/stage/opt/gpuwire/share"; then
    record PASS "make install DESTDIR=... PREFIX=/opt/gpuwire stages files, paths say /opt/gpuwire"
else
    record FAIL "make install with DESTDIR" "log $log"
    show_log "$log"
fi

finish
