#!/usr/bin/env bash
# seed-target.sh FROM TO: starts the MPICH build directory TO (target/mpich/debug) from the Open
# MPI one FROM (target/debug) when TO does not exist yet, so that a cold `make test` compiles the
# dependencies that do not depend on the MPI (bindgen, cbindgen, cudarc, syn, serde, ...) once,
# not twice. Left out, and so built again for the other MPI: every unit of the crates that do
# depend on it (mpi-sys, whose build script probes the MPI but does not rerun when MPICC changes;
# mpi; gpuwire), their build-script outputs and their artifacts. A copy, not links: cargo
# rewrites fingerprint files in place. Does nothing when TO exists (cargo keeps it up to date) or
# FROM has no build.
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 FROM TO" >&2; exit 2; }
from=$1 to=$2
if [[ -e $to || ! -d $from/.fingerprint || ! -d $from/deps ]]; then
    exit 0
fi
mpi_dep() { # NAME: true for the units and artifacts of mpi-sys, mpi and gpuwire
    case $1 in
    mpi-* | mpi_sys-* | libmpi-* | libmpi_sys-* | gpuwire-* | gpuwire_* | libgpuwire*) return 0 ;;
    *) return 1 ;;
    esac
}
tmp=$to.seed.$$
rm -rf "$tmp"
mkdir -p "$tmp/.fingerprint" "$tmp/build" "$tmp/deps"
n=0
for dir in .fingerprint build; do
    for f in "$from/$dir"/*; do
        [[ -e $f ]] || continue
        mpi_dep "${f##*/}" && continue
        cp -a "$f" "$tmp/$dir/"
        n=$((n + 1))
    done
done
# deps: the libraries (rlib, rmeta, proc-macro .so) and their dep-info, not executables (tests)
for f in "$from"/deps/lib* "$from"/deps/*.d; do
    [[ -e $f ]] || continue
    mpi_dep "${f##*/}" && continue
    cp -a "$f" "$tmp/deps/"
done
mkdir -p "$(dirname "$to")"
mv "$tmp" "$to"
echo "seed-target: $to started from $from ($n units; mpi-sys, mpi and gpuwire left to build)"
