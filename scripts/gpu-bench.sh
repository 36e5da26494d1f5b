#!/usr/bin/env bash
# The GPU benchmark, on the GPU machine, from the repository root (called by
# `scripts/gpu-run.sh bench`; or alone: `bash scripts/gpu-bench.sh`). Needs what scripts/gpu-test
# packs into .gpu/: bin/gpuwire-bench, the CUDA-aware Open MPI kit ompi-cuda-4.1.4.tar.xz, and
# bench/ (mpi4py_cupy.py, summarize.py).
#
# One mpirun -np 2 (one H200, two ranks) per method, in this order:
#   gpuwire-staged        gpuwire, backend MPI_STAGED            stock Open MPI (/usr, not CUDA-aware)
#   mpi4py-cupy-plain     cp.asnumpy -> Allreduce -> cp.asarray  stock
#   mpi4py-cupy-careful   pinned buffers, halves, sum on the GPU stock
#   gpuwire-cuda_aware    gpuwire, backend MPI_CUDA_AWARE        the CUDA-aware kit
#   raw-cuda-aware        MPI_Allreduce/Send/Recv on device ptrs the CUDA-aware kit
#   host-raw/host-gpuwire gpuwire-bench host (host memory)       stock
# then one combined table (size x method, median) and the target ratios.
#
# Output: everything on stdout; with $OUT set (the device tool), the raw lines in
# $OUT/bench.txt, the CSV in $OUT/bench.csv and the table in $OUT/bench-summary.txt (else in
# /tmp/gpu-bench-out). Plot the CSV here with scripts/plot-bench.py.
#
# Knobs (environment): GPUWIRE_BENCH_BUDGET seconds for the whole run (default 360; a step that
# would not fit is shortened or skipped), GPUWIRE_BENCH_MAX_BYTES (default 256M; e.g. 1M for a
# smoke run), GPUWIRE_BENCH_PY_EXTRA (extra arguments for mpi4py_cupy.py, e.g. --numpy for a dry
# run without a GPU), PYTHON (the interpreter with mpi4py and CuPy; default: python3 on PATH).
set -u
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
B=$PWD/.gpu/bin
BENCH_DIR=$PWD/.gpu/bench
[ -f "$BENCH_DIR/mpi4py_cupy.py" ] || BENCH_DIR=$PWD/bench
OUTDIR=${OUT:-/tmp/gpu-bench-out}
mkdir -p "$OUTDIR"
RAW=$OUTDIR/bench.txt
: > "$RAW"
BUDGET=${GPUWIRE_BENCH_BUDGET:-360}
MAXB=${GPUWIRE_BENCH_MAX_BYTES:-256M}
PY_EXTRA=${GPUWIRE_BENCH_PY_EXTRA:-}
# Resolved before stock() narrows PATH: the python3 that has mpi4py and CuPy.
PY=${PYTHON:-$(command -v python3)}
ORIG_PATH=$PATH
ORIG_LD=${LD_LIBRARY_PATH:-}

# The two MPIs, as in scripts/gpu-run.sh: stock = Ubuntu's Open MPI at /usr (not CUDA-aware),
# kit = the CUDA-aware Open MPI 4.1.4 unpacked to /tmp/k (shared with gpu-run.sh's tests).
stock() { env -u OPAL_PREFIX PATH=/usr/bin:/bin LD_LIBRARY_PATH="$B" "$@"; }
KIT=/tmp/k/ompi-cuda
kit() {
  [ -d "$KIT" ] || { mkdir -p /tmp/k && tar -C /tmp/k -xJf .gpu/ompi-cuda-4.1.4.tar.xz; }
  OPAL_PREFIX=$KIT PATH=$KIT/bin:/usr/bin:/bin LD_LIBRARY_PATH=$KIT/lib:$B "$@"
}
# Python under the stock MPI keeps the machine's own PATH and library path behind it (CuPy's
# CUDA libraries may be found through them).
stock_py() { env -u OPAL_PREFIX PATH="/usr/bin:/bin:$ORIG_PATH" LD_LIBRARY_PATH="$B${ORIG_LD:+:$ORIG_LD}" "$@"; }
np2="mpirun -np 2 --oversubscribe --bind-to none"

log() { echo "$*" | tee -a "$RAW"; }
START=$SECONDS
declare -a SUMMARY=()
step() { # label limit_s launcher command...: one mpirun, cut to what is left of the budget
  local label=$1 limit=$2 launcher=$3
  shift 3
  local left=$((BUDGET - (SECONDS - START) - 10))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 15 ]; then
    log "=== $label: SKIPPED (time budget of ${BUDGET}s spent)"
    SUMMARY+=("$label: skipped (time budget)")
    return
  fi
  log "=== $label (limit ${limit}s): $*"
  local t0=$SECONDS
  $launcher timeout -k 5 "$limit" $np2 "$@" 2>&1 | tee -a "$RAW"
  local rc=${PIPESTATUS[0]}
  local what="exit $rc"
  [ "$rc" = 124 ] && what="KILLED after ${limit}s (the BENCH lines before that are kept)"
  log "=== $label: $what, $((SECONDS - t0)) s"
  SUMMARY+=("$label: $what, $((SECONDS - t0)) s")
}

log "# gpu-bench.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
if command -v nvidia-smi >/dev/null; then
  log "# $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
else
  log "# nvidia-smi: not found"
fi
log "# python: $PY; sizes 8 B .. $MAXB; budget ${BUDGET}s"
[ -x "$B/gpuwire-bench" ] || log "=== .gpu/bin/gpuwire-bench is missing: run scripts/gpu-test on the build machine first"

step gpuwire-staged 90 stock "$B/gpuwire-bench" device --backend staged --max-bytes "$MAXB"
# shellcheck disable=SC2086
step mpi4py-cupy-plain 90 stock_py "$PY" "$BENCH_DIR/mpi4py_cupy.py" --method plain --max-bytes "$MAXB" $PY_EXTRA
# shellcheck disable=SC2086
step mpi4py-cupy-careful 90 stock_py "$PY" "$BENCH_DIR/mpi4py_cupy.py" --method careful --max-bytes "$MAXB" $PY_EXTRA
step gpuwire-cuda_aware 90 kit "$B/gpuwire-bench" device --backend cuda_aware --max-bytes "$MAXB"
step raw-cuda-aware 120 kit "$B/gpuwire-bench" device --backend raw-cuda-aware --max-bytes "$MAXB"
to_bytes() { # 256M, 1MiB, 4096 -> bytes
  local v=${1%[Bb]}
  v=${v%[iI]}
  case $v in
    *[Kk]) echo $((${v%?} << 10)) ;;
    *[Mm]) echo $((${v%?} << 20)) ;;
    *[Gg]) echo $((${v%?} << 30)) ;;
    *) echo "$v" ;;
  esac
}
HOSTMAX=$(to_bytes "$MAXB")
[ "$HOSTMAX" -gt $((64 << 20)) ] && HOSTMAX=$((64 << 20)) # host mode: 8 B .. 64 MiB
step host 60 stock "$B/gpuwire-bench" host --max-bytes "$HOSTMAX"

echo
echo "=== steps"
printf '%s\n' "${SUMMARY[@]}"
echo
echo "=== combined table (median of each method; BENCH lines in $RAW)"
"$PY" "$BENCH_DIR/summarize.py" "$RAW" --csv "$OUTDIR/bench.csv" | tee "$OUTDIR/bench-summary.txt"
echo "total $((SECONDS - START)) s; files: $RAW $OUTDIR/bench.csv $OUTDIR/bench-summary.txt"
