#!/usr/bin/env bash
# On the GPU machine: where the small-message floor of two ranks on one GPU comes from
# (bench/probe_share.c, packed by scripts/gpu-test). One GPU (CUDA_VISIBLE_DEVICES=0).
# Modes: see bench/probe_share.c.
set -u
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 CUDA_VISIBLE_DEVICES=0
P="env -u OPAL_PREFIX PATH=/usr/bin:/bin mpirun --oversubscribe --bind-to none -x CUDA_VISIBLE_DEVICES"
B=.gpu/bin/probe_share
for mode in ${PROBE_MODES:-0 3 4 5 6}; do
  for b in ${PROBE_SIZES:-8 256 4096 16384 32768 65536}; do $P -np 2 $B $b $mode; done
done
