#!/usr/bin/env bash
# The host cost of gpuwire's NCCL calls, measured on any machine (no GPU needed): builds the null
# device (bench/null_device.c: libcuda, libnccl and libnvrtc answered on the CPU) into .nulldev/
# and bench/device_calls.c against target/release, then prints
#   - instructions per call (callgrind, deterministic): gpuwire_allreduce of 8 B, gpuwire_sendrecv
#     of 8 B and a halo group (two sends, two receives), each against the same raw NCCL calls;
#   - the wall clock of the same loops (`device_calls time`: medians, ns added per call).
# Usage: bash scripts/null-device.sh [count|time|all]   (default all; needs `cargo build --release`)
# On the GPU machine the same program runs against the real libraries:
#   mpirun -np 1 .gpu/bin/device_calls time   (built by scripts/gpu-test)
set -eu
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
what=${1:-all}
mkdir -p .nulldev
cc -O2 -Wall -Wextra -shared -fPIC -o .nulldev/libcuda.so bench/null_device.c -lpthread
for l in libcuda.so.1 libnccl.so libnccl.so.2 libnvrtc.so; do ln -sf libcuda.so .nulldev/$l; done
bash scripts/soname-link.sh target/release >/dev/null
mpicc -O2 -Wall -Wextra -Iinclude bench/device_calls.c -o .nulldev/device_calls -Ltarget/release -lgpuwire \
  -Wl,-rpath,"$PWD/target/release" -ldl
run="env LD_LIBRARY_PATH=$PWD/.nulldev mpirun -np 1 --bind-to none"
if [ "$what" = all ] || [ "$what" = count ]; then
  command -v valgrind >/dev/null || { echo "valgrind is needed for the counts (apt-get install valgrind)"; exit 2; }
  names=("allreduce 8 B" "sendrecv 8 B" "halo group 8 B")
  declare -A per
  for c in 0 1 2 3 4 5; do
    for n in 0 200; do
      $run valgrind --tool=callgrind --collect-atstart=no --toggle-collect=run_loop \
        --callgrind-out-file=.nulldev/cg.$c.$n .nulldev/device_calls $c $n >/dev/null 2>&1
    done
    a=$(awk '/^(summary|totals):/ {print $2; exit}' .nulldev/cg.$c.0)
    b=$(awk '/^(summary|totals):/ {print $2; exit}' .nulldev/cg.$c.200)
    per[$c]=$(( (b - a) / 200 ))
  done
  echo "instructions per call (callgrind; profiles in .nulldev/cg.C.200, callgrind_annotate --inclusive=yes):"
  for c in 0 1 2; do
    printf "%-15s raw NCCL %6d  gpuwire %6d  added %6d\n" "${names[$c]}" "${per[$((c + 3))]}" "${per[$c]}" $(( per[$c] - per[$((c + 3))] ))
  done
fi
if [ "$what" = all ] || [ "$what" = time ]; then
  echo "wall clock (medians of 31 blocks, gpuwire and raw NCCL alternately):"
  $run .nulldev/device_calls time
fi
