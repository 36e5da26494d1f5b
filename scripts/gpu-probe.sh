#!/usr/bin/env bash
# On the GPU machine: where the small-message floor of two ranks on one GPU comes from
# (bench/probe_share.c, packed by scripts/gpu-test). One GPU (CUDA_VISIBLE_DEVICES=0).
# Modes: see bench/probe_share.c.
#   bash scripts/gpu-probe.sh d2d [iterations] [bytes...]
# instead runs bench/probe_d2d.c once: device-to-device copies through a CUDA IPC mapping with
# the other rank idle or busy, one table (default 2 KiB, 64 KiB, 1 MiB, 16 MiB, 256 MiB; under 100 s; also
# written to $OUT/probe_d2d.txt when OUT is set).
#   bash scripts/gpu-probe.sh exchange [N bytes] [segment bytes] [repetitions] [mode]
# instead runs bench/probe_exchange.c: the MPI floor of a two-phase allreduce of N bytes on two
# ranks (host memory, no reduction), beside MPI_Allreduce (MPI_STAGED's large allreduces, issue 19).
set -u
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 CUDA_VISIBLE_DEVICES=0
P="env -u OPAL_PREFIX PATH=/usr/bin:/bin mpirun --oversubscribe --bind-to none -x CUDA_VISIBLE_DEVICES"
if [ "${1:-}" = d2d ]; then
  shift
  export PROBE_D2D_LIMIT=${PROBE_D2D_LIMIT:-100}
  set -o pipefail
  timeout -k 5 $((PROBE_D2D_LIMIT + 10)) $P -x PROBE_D2D_LIMIT -np 2 .gpu/bin/probe_d2d "$@" 2>&1 | tee "${OUT:-/tmp}/probe_d2d.txt"
  exit
fi
if [ "${1:-}" = exchange ]; then
  shift
  timeout -k 5 300 $P -np 2 .gpu/bin/probe_exchange "$@"
  exit
fi
B=.gpu/bin/probe_share
for mode in ${PROBE_MODES:-0 3 4 5 6}; do
  for b in ${PROBE_SIZES:-8 256 4096 16384 32768 65536}; do $P -np 2 $B $b $mode; done
done
