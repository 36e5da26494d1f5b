#!/usr/bin/env bash
# soname-link.sh: in each DIR holding a freshly built libgpuwire.so, makes the link
# SONAME -> libgpuwire.so (SONAME as recorded in the library, e.g. libgpuwire.so.0.1).
#
# usage: scripts/soname-link.sh [--copy] DIR...
#   --copy  copy the library to its soname instead of linking (for trees that travel to
#           machines where symbolic links may not survive the transfer: scripts/gpu-test)
#
# Programs linked with -lgpuwire record the soname, not libgpuwire.so, as NEEDED: the loader then
# looks for libgpuwire.so.0.1 along their rpath. Cargo writes only libgpuwire.so, so every place
# that links programs against a build directory (make demo, scripts/run-c-tests.sh,
# scripts/gpu-test) runs this after `cargo build`. The link is relative, so it stays valid when
# cargo rebuilds the library; run it again after a version change (a new soname).
set -euo pipefail
copy=0
if [[ ${1:-} == --copy ]]; then
    copy=1
    shift
fi
[[ $# -ge 1 ]] || { echo "usage: $0 [--copy] DIR..." >&2; exit 2; }
for dir in "$@"; do
    lib=$dir/libgpuwire.so
    if [[ ! -f $lib ]]; then
        echo "$0: $lib is missing: build the library first" >&2
        exit 1
    fi
    soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
    if [[ -z $soname ]]; then
        echo "$0: $lib has no soname (was it built by this checkout's build.rs?)" >&2
        exit 1
    fi
    if [[ $soname == libgpuwire.so ]]; then
        continue
    elif [[ $copy -eq 1 ]]; then
        rm -f "$dir/$soname"
        cp "$lib" "$dir/$soname"
    else
        ln -sfn libgpuwire.so "$dir/$soname"
    fi
done
