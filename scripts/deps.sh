#!/usr/bin/env bash
# deps.sh: checks that what gpuwire's build, demo and tests need is installed.
#
# Needed: cargo/rustc >= 1.85; Open MPI (mpicc, mpicxx, mpifort, mpirun); MPICH (mpicc.mpich,
# mpicxx.mpich, mpifort.mpich, mpiexec.mpich); libclang (bindgen, used by the mpi crate); a C and
# C++ compiler; gfortran; python3 with mpi4py (built for Open MPI), NumPy, pytest and venv, for
# the Python package's tests (scripts/find-python.sh finds it: python3 on the PATH or
# /usr/bin/python3); cmake;
# pkg-config; readelf; make.
#
# When something is missing on Debian/Ubuntu: as root it runs
#   apt-get update && apt-get install -y <packages>      (noninteractive)
# and checks again; otherwise it prints that command and fails. Rust is not installed here
# (the distribution's may be too old): install it with rustup.
set -euo pipefail

packages=(libopenmpi-dev openmpi-bin libclang-dev libmpich-dev mpich gfortran python3
    python3-numpy python3-mpi4py python3-pip python3-pytest python3-venv cmake pkg-config g++ binutils make)
min_rust=1.85

have() { command -v "$1" > /dev/null 2>&1; }
has_pip() { python3 -m pip --version > /dev/null 2>&1; }
has_mpi4py() { bash "$(dirname "$0")/find-python.sh" "Open MPI" > /dev/null; }
mpi4py_python_has() { # MODULE: the python3 with mpi4py imports it (pytest; venv, for pip install ./python)
    local py
    py=$(bash "$(dirname "$0")/find-python.sh" "Open MPI") && "$py" -c "import $1" > /dev/null 2>&1
}
is_open_mpi() { # mpicc and mpirun must be Open MPI's (an alternatives switch can point them at MPICH)
    have mpicc && have mpirun && mpirun --version 2>&1 | grep -q "Open MPI" \
        && mpicc --showme:version > /dev/null 2>&1
}
has_libclang() {
    if [[ -n ${LIBCLANG_PATH:-} ]] && compgen -G "$LIBCLANG_PATH/libclang*.so*" > /dev/null; then
        return 0
    fi
    compgen -G "/usr/lib/llvm-*/lib/libclang*.so*" > /dev/null \
        || compgen -G "/usr/lib/*/libclang*.so*" > /dev/null \
        || compgen -G "/usr/lib64/libclang*.so*" > /dev/null
}

missing=()
check() { # DESCRIPTION COMMAND...
    local what=$1
    shift
    "$@" || missing+=("$what")
}
# `deps.sh --demo`: only what `make demo` needs (Open MPI, libclang, a C compiler, make).
demo_only=0
[[ ${1:-} == --demo ]] && demo_only=1
if [[ $demo_only -eq 1 ]]; then
    packages=(libopenmpi-dev openmpi-bin libclang-dev gcc make)
fi

check_all() {
    missing=()
    if [[ $demo_only -eq 1 ]]; then
        check "Open MPI (mpicc, mpirun)" is_open_mpi
        check "libclang (for bindgen)" has_libclang
        check "cc" have cc
        check "make" have make
        return
    fi
    check "Open MPI (mpicc, mpirun)" is_open_mpi
    check "mpicxx (Open MPI)" have mpicxx
    check "mpifort (Open MPI)" have mpifort
    check "mpicc.mpich" have mpicc.mpich
    check "mpicxx.mpich" have mpicxx.mpich
    check "mpifort.mpich" have mpifort.mpich
    check "mpiexec.mpich" have mpiexec.mpich
    check "libclang (for bindgen)" has_libclang
    check "cc" have cc
    check "c++" have c++
    check "gfortran" have gfortran
    check "python3" have python3
    check "pip (python3 -m pip)" has_pip
    check "python3 with mpi4py (Open MPI) and NumPy" has_mpi4py
    check "pytest for that python3" mpi4py_python_has pytest
    check "venv and ensurepip for that python3" mpi4py_python_has ensurepip
    check "cmake" have cmake
    check "pkg-config" have pkg-config
    check "readelf" have readelf
    check "make" have make
}

# Rust first: it cannot come from the distribution's packages here.
if ! have cargo || ! have rustc; then
    echo "deps: cargo and rustc >= $min_rust are needed: install Rust with rustup (https://rustup.rs)" >&2
    exit 1
fi
rust_version=$(rustc --version | awk '{print $2}')
if [[ $(printf '%s\n%s\n' "$min_rust" "$rust_version" | sort -V | head -n1) != "$min_rust" ]]; then
    echo "deps: rustc $rust_version is older than $min_rust: run 'rustup update'" >&2
    exit 1
fi

check_all
if [[ ${#missing[@]} -eq 0 ]]; then
    if [[ $demo_only -eq 1 ]]; then
        echo "deps: what make demo needs is here (rustc $rust_version, Open MPI, libclang, cc, make)"
    else
        echo "deps: all prerequisites found (rustc $rust_version, Open MPI, MPICH, libclang, compilers, gfortran, python3 with mpi4py and NumPy, cmake, pkg-config)"
    fi
    exit 0
fi

echo "deps: missing: ${missing[*]}"
install_cmd="apt-get update && apt-get install -y ${packages[*]}"
if ! have apt-get; then
    echo "deps: this is not a Debian/Ubuntu system: install the equivalents of: ${packages[*]}" >&2
    exit 1
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "deps: run as root (or with sudo):" >&2
    echo "  sudo env DEBIAN_FRONTEND=noninteractive sh -c '$install_cmd'" >&2
    exit 1
fi

echo "deps: installing: ${packages[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y "${packages[@]}"

check_all
if [[ ${#missing[@]} -ne 0 ]]; then
    echo "deps: still missing after installing packages: ${missing[*]}" >&2
    exit 1
fi
echo "deps: all prerequisites installed"
