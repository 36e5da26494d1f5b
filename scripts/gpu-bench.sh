#!/usr/bin/env bash
# The GPU benchmark, on the GPU machine, from the repository root (called by
# `scripts/gpu-run.sh bench`; or alone: `bash scripts/gpu-bench.sh`). Needs what scripts/gpu-test
# packs into .gpu/: bin/gpuwire-bench, the CUDA-aware Open MPI kit ompi-cuda-4.1.4.tar.xz, and
# bench/ (mpi4py_cupy.py, summarize.py).
#
# Steps, in this order (GPUWIRE_BENCH_STEPS picks groups: nccl, multi, single; default all):
#
# nccl (one GPU, CUDA_VISIBLE_DEVICES=0, mpirun -np 1: NCCL refuses two ranks on one GPU):
#   nccl-1gpu             gpuwire-bench device --backend nccl: gpuwire-nccl-1gpu beside raw-nccl-1gpu
#                         (raw NCCL in the same run), allreduce, allgather, reduce_scatter, exchange
#   nccl-1gpu-synced      the same for allreduce up to 1 MiB with a stream sync after every call
# multi (only when nvidia-smi -L lists >= 2 GPUs; one rank per GPU, CUDA_VISIBLE_DEVICES = all,
#   -x NCCL_NVLS_ENABLE, which stays 0):
#   nccl-<N>gpu           gpuwire-nccl-<N>gpu and raw-nccl-<N>gpu, every op, up to 1 GiB    stock
#   cuda_aware-<N>gpu     gpuwire-cuda_aware-<N>gpu, allreduce up to 256 MiB                the kit
#   staged-<N>gpu         gpuwire-staged-<N>gpu, allreduce up to 256 MiB                    stock
# single (one H200 shared by two ranks: CUDA_VISIBLE_DEVICES=0, mpirun -np 2):
#   gpuwire-ipc           gpuwire, backend IPC (allreduce, sendrecv, exchange) stock Open MPI
#   gpuwire-staged        gpuwire, backend MPI_STAGED            stock Open MPI (/usr, not CUDA-aware)
#   mpi4py-cupy-plain     cp.asnumpy -> Allreduce -> cp.asarray  stock
#   mpi4py-cupy-careful   pinned buffers, halves, sum on the GPU stock
#   gpuwire-cuda_aware    gpuwire, backend MPI_CUDA_AWARE        the CUDA-aware kit
#   raw-cuda-aware        MPI_Allreduce/Send/Recv on device ptrs the CUDA-aware kit
#   host-raw/host-gpuwire gpuwire-bench host (host memory)       stock
# alltoallv (issue 13; only when named in GPUWIRE_BENCH_STEPS): the uneven alltoallv (rank r sends
#   (r+1) k to each rank), 1 KiB .. 64 MiB per rank:
#   nccl-alltoallv-<N>gpu gpuwire-nccl against raw NCCL grouped send/recv (>= 2 GPUs)       stock
#   ipc-alltoallv         gpuwire IPC, two ranks sharing GPU 0                              stock
#   raw-cuda-aware-alltoallv  the kit's MPI_Alltoallv on device pointers, the same two ranks the kit
# hier (issue 20; only when named in GPUWIRE_BENCH_STEPS): 2 simulated hosts x 2 ranks, all four
#   on GPU 0 (scripts/multihost.sh: each host its own host name, TCP over loopback between
#   them; the "hosts" share this machine's memory bus), allreduce 8 B .. $GPUWIRE_BENCH_MAX_BYTES,
#   all under the kit (with the stock Open MPI every program tried hangs in this layout there):
#   gpuwire-hier-2x2      HIER (IPC inside each host, MPI_CUDA_AWARE between the leaders,
#                         their reductions staged)                                        the kit
#   gpuwire-staged-2x2    flat MPI_STAGED (--backend staged)                              the kit
#   gpuwire-cuda_aware-2x2 flat MPI_CUDA_AWARE                                           the kit
# halo (issue 18; only when named in GPUWIRE_BENCH_STEPS): --op halo, one group of two sends and two
#   receives per iteration, rows of 1 KiB .. 32 MiB:
#   nccl-halo-1gpu        gpuwire-nccl beside raw NCCL's grouped ncclSend/ncclRecv, 1 rank    stock
#   ipc-halo, staged-halo gpuwire IPC / MPI_STAGED, two ranks sharing GPU 0                  stock
#   raw-cuda-aware-halo   the kit's two MPI_Sendrecv on device pointers, the same two ranks   the kit
# halo3d (issue 15; only when named in GPUWIRE_BENCH_STEPS): gpuwire-bench halo3d, the six faces of
#   a 256^3 float64 local grid, two ranks sharing GPU 0, under the kit (CUDA-aware):
#   halo3d-auto           gpuwire (backend AUTO) vs the kit's subarray datatypes vs packing kernels + the kit's sends
#   halo3d-cuda_aware     the same with gpuwire's backend MPI_CUDA_AWARE                    the kit
#   (target: gpuwire >= 10x the derived datatypes and within 10 % of by hand: the HALO3D lines)
# copyrows (issue 19; only when named in GPUWIRE_BENCH_STEPS): IPC send/recv and the halo group,
#   two ranks sharing GPU 0, 1 KiB .. 16 MiB, receives copying through the mapping as one linear
#   copy and as 2-D copies (GPUWIRE_IPC_COPY_ROWS=0 / 1), same run, to decide its default:
#   ipc-linear, ipc-rows  gpuwire-ipc-linear, gpuwire-ipc-rows                            stock
# p2pstaged (issue 19; only when named in GPUWIRE_BENCH_STEPS): IPC send/recv and the halo group,
#   two ranks sharing GPU 0, 1 KiB .. 16 MiB, device messages above 1 KiB never staged through
#   host memory (GPUWIRE_IPC_STAGED_MAX=0: copied through the mapping) and always (16 MiB),
#   alternately, same run, to place the default:
#   ipc-mapped, ipc-staged  gpuwire-ipc-mapped, gpuwire-ipc-staged                         stock
# bw (issue 19; only when named in GPUWIRE_BENCH_STEPS): streaming bandwidth (OSU osu_bw: a window
#   of isends, then an acknowledgement; time per message) and the ping-pong one way, two ranks
#   sharing GPU 0, 1 MiB .. 256 MiB, beside the CUDA-aware MPI's own (raw) in the same call:
#   ipc-bw, staged-bw       gpuwire-ipc-bw, gpuwire-staged-bw                               stock
#   raw-cuda-aware-bw       raw-cuda-aware-bw                                               the kit
# floor (issue 19; only when named in GPUWIRE_BENCH_STEPS): MPI's floor under the staged two-phase
#   allreduce (bench/probe_exchange.c, mode 1, 256 MiB), gpuwire's staged allreduce and careful
#   staging by hand, 64 .. 256 MiB, three rounds in turn (hosts differ: compare within the call):
#   floor-probe, staged-floor, careful-floor                                              stock
# then one combined table (size x method, median), bus bandwidth tables, the gpuwire-nccl vs
# raw-nccl tables and the target checks (bench/summarize.py).
#
# Output: everything on stdout; with $OUT set (the device tool), the raw lines in
# $OUT/bench.txt, the CSV in $OUT/bench.csv and the table in $OUT/bench-summary.txt (else in
# /tmp/gpu-bench-out). Plot the CSV here with scripts/plot-bench.py.
#
# Knobs (environment): GPUWIRE_BENCH_BUDGET seconds for the whole run (default 360; a step that
# would not fit is shortened or skipped), GPUWIRE_BENCH_STEPS (default "nccl multi single"),
# GPUWIRE_BENCH_MAX_BYTES (default 256M; the one-GPU steps; e.g. 1M for a smoke run),
# GPUWIRE_BENCH_NCCL_MAX_BYTES (default 1G: multi-GPU NCCL), GPUWIRE_BENCH_MPI_MAX_BYTES (default
# 256M: multi-GPU staged and CUDA-aware, which are slow at large sizes), GPUWIRE_BENCH_MPI_OPS
# (default allreduce; e.g. allreduce,allgather,reduce_scatter,exchange), GPUWIRE_BENCH_ONLY (a
# comma-separated list of step labels: only those run, e.g. gpuwire-ipc,mpi4py-cupy-plain),
# GPUWIRE_BENCH_PY_EXTRA
# (extra arguments for mpi4py_cupy.py, e.g. --numpy for a dry run without a GPU), PYTHON (the
# interpreter with mpi4py and CuPy; default: python3 on PATH).
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
np1="mpirun -np 1 --oversubscribe --bind-to none"
STEPS=${GPUWIRE_BENCH_STEPS:-nccl multi single}
NCCL_MAXB=${GPUWIRE_BENCH_NCCL_MAX_BYTES:-1G}
MPI_MAXB=${GPUWIRE_BENCH_MPI_MAX_BYTES:-256M}
MPI_OPS=${GPUWIRE_BENCH_MPI_OPS:-allreduce}
# NCCL_NVLS_ENABLE=0 stays as the machine sets it (NVLink multicast off); passed on with -x.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
ALL_GPUS=$(seq -s, 0 $((NGPU > 0 ? NGPU - 1 : 0)))

log() { echo "$*" | tee -a "$RAW"; }
START=$SECONDS
declare -a SUMMARY=()
# step label limit_s launcher command...: one mpirun, cut to what is left of the budget. The
# caller sets CUDA_VISIBLE_DEVICES (passed on with -x) and MPIRUN (default: mpirun -np 2).
step() {
  local label=$1 limit=$2 launcher=$3
  shift 3
  local mpirun=${MPIRUN:-$np2}
  if [ -n "${GPUWIRE_BENCH_ONLY:-}" ]; then
    case ",$GPUWIRE_BENCH_ONLY," in *",$label,"*) ;; *) return ;; esac
  fi
  local left=$((BUDGET - (SECONDS - START) - 10))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 15 ]; then
    log "=== $label: SKIPPED (time budget of ${BUDGET}s spent)"
    SUMMARY+=("$label: skipped (time budget)")
    return
  fi
  log "=== $label (limit ${limit}s; CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset}): $mpirun $*"
  local t0=$SECONDS
  # shellcheck disable=SC2086
  # MPIX: the launcher's arguments that pass the environment on (none for scripts/multihost.sh,
  # whose ranks inherit it).
  # shellcheck disable=SC2086
  $launcher timeout -k 5 "$limit" $mpirun ${MPIX--x CUDA_VISIBLE_DEVICES -x NCCL_NVLS_ENABLE} "$@" 2>&1 | tee -a "$RAW"
  local rc=${PIPESTATUS[0]}
  local what="exit $rc"
  [ "$rc" = 124 ] && what="KILLED after ${limit}s (the BENCH lines before that are kept)"
  log "=== $label: $what, $((SECONDS - t0)) s"
  SUMMARY+=("$label: $what, $((SECONDS - t0)) s")
}
want() { case " ${STEPS//,/ } " in *" $1 "* | *" all "*) return 0 ;; esac; return 1; }

log "# gpu-bench.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
if command -v nvidia-smi >/dev/null; then
  log "# $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1); $NGPU GPU(s)"
else
  log "# nvidia-smi: not found"
fi
log "# python: $PY; steps: $STEPS; sizes 8 B .. $MAXB (one GPU), .. $NCCL_MAXB (multi-GPU NCCL), .. $MPI_MAXB (multi-GPU $MPI_OPS, staged and CUDA-aware); NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE; budget ${BUDGET}s"
[ -x "$B/gpuwire-bench" ] || log "=== .gpu/bin/gpuwire-bench is missing: run scripts/gpu-test on the build machine first"

if want nccl; then
  # One GPU: NCCL needs a GPU per rank, so 1 rank. Enqueued back to back (as nccl-tests), then
  # the per-call latency view (a sync after every call) for the small sizes.
  CUDA_VISIBLE_DEVICES=0 MPIRUN=$np1 step nccl-1gpu 90 stock "$B/gpuwire-bench" device --backend nccl --max-bytes "$MAXB" --target-ms 10 --tag 1gpu
  CUDA_VISIBLE_DEVICES=0 MPIRUN=$np1 step nccl-1gpu-synced 45 stock "$B/gpuwire-bench" device --backend nccl --op allreduce --max-bytes 1M --sync each --target-ms 10 --tag 1gpu-synced
fi
if want multi; then
  if [ "$NGPU" -lt 2 ]; then
    log "=== multi-GPU steps: SKIPPED (nvidia-smi -L lists $NGPU GPU(s); they need 2 or more)"
    SUMMARY+=("multi-GPU steps: skipped ($NGPU GPU)")
  else
    npN="mpirun -np $NGPU --oversubscribe --bind-to none"
    CUDA_VISIBLE_DEVICES=$ALL_GPUS MPIRUN=$npN step "nccl-${NGPU}gpu" 150 stock "$B/gpuwire-bench" device --backend nccl --max-bytes "$NCCL_MAXB" --target-ms 10 --tag "${NGPU}gpu"
    CUDA_VISIBLE_DEVICES=$ALL_GPUS MPIRUN=$npN step "cuda_aware-${NGPU}gpu" 90 kit "$B/gpuwire-bench" device --backend cuda_aware --op "$MPI_OPS" --max-bytes "$MPI_MAXB" --tag "${NGPU}gpu"
    CUDA_VISIBLE_DEVICES=$ALL_GPUS MPIRUN=$npN step "staged-${NGPU}gpu" 90 stock "$B/gpuwire-bench" device --backend staged --op "$MPI_OPS" --max-bytes "$MPI_MAXB" --tag "${NGPU}gpu"
  fi
fi
if [[ " ${STEPS//,/ } " == *" alltoallv "* ]]; then
  if [ "$NGPU" -ge 2 ]; then
    npN="mpirun -np $NGPU --oversubscribe --bind-to none"
    CUDA_VISIBLE_DEVICES=$ALL_GPUS MPIRUN=$npN step "nccl-alltoallv-${NGPU}gpu" 120 stock "$B/gpuwire-bench" device --backend nccl --op alltoallv --min-bytes 1K --max-bytes 64M --target-ms 10 --tag "alltoallv-${NGPU}gpu"
  fi
  CUDA_VISIBLE_DEVICES=0 step ipc-alltoallv 90 stock "$B/gpuwire-bench" device --backend ipc --op alltoallv --min-bytes 1K --max-bytes 64M
  CUDA_VISIBLE_DEVICES=0 step raw-cuda-aware-alltoallv 120 kit "$B/gpuwire-bench" device --backend raw-cuda-aware --op alltoallv --min-bytes 1K --max-bytes 64M
fi
if [[ " ${STEPS//,/ } " == *" hier "* ]]; then
  # 2 simulated hosts x 2 ranks on GPU 0: the hierarchical path against the flat ones, one run.
  mh="bash scripts/multihost.sh openmpi 2,2"
  CUDA_VISIBLE_DEVICES=0 MPIRUN=$mh MPIX= step gpuwire-hier-2x2 150 kit "$B/gpuwire-bench" device --backend hier --op allreduce --max-bytes "$MAXB" --tag 2x2
  CUDA_VISIBLE_DEVICES=0 MPIRUN=$mh MPIX= step gpuwire-staged-2x2 150 kit "$B/gpuwire-bench" device --backend staged --op allreduce --max-bytes "$MAXB" --tag 2x2
  CUDA_VISIBLE_DEVICES=0 MPIRUN=$mh MPIX= step gpuwire-cuda_aware-2x2 150 kit "$B/gpuwire-bench" device --backend cuda_aware --op allreduce --max-bytes "$MAXB" --tag 2x2
fi
if [[ " ${STEPS//,/ } " == *" halo "* ]]; then
  # One group of two sends and two receives per iteration (issue 18), same run: NCCL on one rank
  # beside raw NCCL's group; two ranks sharing GPU 0: IPC and staged (stock) against the kit's
  # two MPI_Sendrecv on device pointers.
  CUDA_VISIBLE_DEVICES=0 MPIRUN=$np1 step nccl-halo-1gpu 60 stock "$B/gpuwire-bench" device --backend nccl --op halo --min-bytes 1K --max-bytes 32M --target-ms 5 --reps 5 --tag halo-1gpu
  CUDA_VISIBLE_DEVICES=0 step ipc-halo 60 stock "$B/gpuwire-bench" device --backend ipc --op halo --min-bytes 1K --max-bytes 32M --target-ms 5 --reps 3
  CUDA_VISIBLE_DEVICES=0 step staged-halo 60 stock "$B/gpuwire-bench" device --backend staged --op halo --min-bytes 1K --max-bytes 32M --target-ms 5 --reps 3
  CUDA_VISIBLE_DEVICES=0 step raw-cuda-aware-halo 60 kit "$B/gpuwire-bench" device --backend raw-cuda-aware --op halo --min-bytes 1K --max-bytes 32M --target-ms 5 --reps 3
fi
if [[ " ${STEPS//,/ } " == *" copyrows "* ]]; then
  # Twice each, alternately (the shared GPU's time slices make single runs noisy).
  for r in 0 1 0 1; do
    name=$([ "$r" = 1 ] && echo rows || echo linear)
    CUDA_VISIBLE_DEVICES=0 GPUWIRE_IPC_COPY_ROWS=$r step "ipc-$name" 60 stock -x GPUWIRE_IPC_COPY_ROWS "$B/gpuwire-bench" device --backend ipc --op sendrecv,halo --min-bytes 1K --max-bytes 16M --target-ms 5 --reps 3 --tag "$name"
  done
fi
if [[ " ${STEPS//,/ } " == *" p2pstaged "* ]]; then
  for m in 0 16777216 0 16777216; do
    name=$([ "$m" = 0 ] && echo mapped || echo staged)
    CUDA_VISIBLE_DEVICES=0 GPUWIRE_IPC_STAGED_MAX=$m step "ipc-$name" 60 stock -x GPUWIRE_IPC_STAGED_MAX "$B/gpuwire-bench" device --backend ipc --op sendrecv,halo --min-bytes 1K --max-bytes 16M --target-ms 5 --reps 3 --tag "$name"
  done
fi
if [[ " ${STEPS//,/ } " == *" bw "* ]]; then
  CUDA_VISIBLE_DEVICES=0 step ipc-bw 90 stock "$B/gpuwire-bench" device --backend ipc --op bw,sendrecv --min-bytes 1M --max-bytes 256M --target-ms 20 --reps 5 --tag bw
  CUDA_VISIBLE_DEVICES=0 step staged-bw 90 stock "$B/gpuwire-bench" device --backend staged --op bw --min-bytes 1M --max-bytes 256M --target-ms 20 --reps 3 --tag bw
  CUDA_VISIBLE_DEVICES=0 step raw-cuda-aware-bw 90 kit "$B/gpuwire-bench" device --backend raw-cuda-aware --op bw,sendrecv --min-bytes 1M --max-bytes 256M --target-ms 20 --reps 3 --tag bw
fi
if [[ " ${STEPS//,/ } " == *" floor "* ]]; then
  for round in 1 2 3; do
    CUDA_VISIBLE_DEVICES=0 step floor-probe 60 stock "$B/probe_exchange" 268435456 4194304 5 1
    CUDA_VISIBLE_DEVICES=0 step staged-floor 90 stock "$B/gpuwire-bench" device --backend staged --op allreduce --min-bytes 64M --max-bytes 256M --target-ms 100 --reps 3
    # shellcheck disable=SC2086
    CUDA_VISIBLE_DEVICES=0 step careful-floor 90 stock_py "$PY" "$BENCH_DIR/mpi4py_cupy.py" --method careful --op allreduce --min-bytes 64M --max-bytes 256M --reps 3 $PY_EXTRA
  done
fi
if [[ " ${STEPS//,/ } " == *" halo3d "* ]]; then
  # AUTO under the kit on two ranks sharing a GPU is IPC (its `# gpuwire:` line says so).
  CUDA_VISIBLE_DEVICES=0 step halo3d-auto 240 kit "$B/gpuwire-bench" halo3d --n 256 --reps 3 --target-ms 20 --tag auto
  CUDA_VISIBLE_DEVICES=0 step halo3d-cuda_aware 240 kit "$B/gpuwire-bench" halo3d --n 256 --reps 3 --target-ms 20 --backend cuda_aware --tag cuda_aware
  grep -h "^HALO3D" "$RAW" 2> /dev/null || true
fi
if want single; then
  # Two ranks sharing GPU 0, also on a machine with more.
  export CUDA_VISIBLE_DEVICES=0
  step gpuwire-ipc 90 stock "$B/gpuwire-bench" device --backend ipc --op allreduce,sendrecv,exchange --max-bytes "$MAXB"
  step gpuwire-staged 90 stock "$B/gpuwire-bench" device --backend staged --op allreduce,sendrecv --max-bytes "$MAXB"
  # shellcheck disable=SC2086
  step mpi4py-cupy-plain 90 stock_py "$PY" "$BENCH_DIR/mpi4py_cupy.py" --method plain --max-bytes "$MAXB" $PY_EXTRA
  # shellcheck disable=SC2086
  step mpi4py-cupy-careful 90 stock_py "$PY" "$BENCH_DIR/mpi4py_cupy.py" --method careful --max-bytes "$MAXB" $PY_EXTRA
  step gpuwire-cuda_aware 90 kit "$B/gpuwire-bench" device --backend cuda_aware --op allreduce,sendrecv --max-bytes "$MAXB"
  step raw-cuda-aware 120 kit "$B/gpuwire-bench" device --backend raw-cuda-aware --op allreduce,sendrecv --max-bytes "$MAXB"
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
fi

echo
echo "=== steps"
printf '%s\n' "${SUMMARY[@]}"
echo
echo "=== combined table (median of each method; BENCH lines in $RAW)"
"$PY" "$BENCH_DIR/summarize.py" "$RAW" --csv "$OUTDIR/bench.csv" | tee "$OUTDIR/bench-summary.txt"
echo "total $((SECONDS - START)) s; files: $RAW $OUTDIR/bench.csv $OUTDIR/bench-summary.txt"
