#!/usr/bin/env bash
# The null device (bench/null_device.c: libcuda, libnccl for one rank and libnvrtc answered on
# the CPU), built into .nulldev/, for two jobs on machines without a GPU.
#
# Usage: bash scripts/null-device.sh [count|time|cold|all]   (default all: count and time; needs
#   `cargo build --release`)
#   The host cost of gpuwire's NCCL calls: builds bench/device_calls.c against target/release and
#   prints instructions per call (callgrind, deterministic) and the wall clock of the same loops
#   (`device_calls time`: medians, ns added per call) for gpuwire_allreduce of 8 B,
#   gpuwire_sendrecv of 8 B and a halo group (two sends, two receives), each against the same
#   raw NCCL calls. On the GPU machine the same program runs against the real libraries:
#   mpirun -np 1 .gpu/bin/device_calls time   (built by scripts/gpu-test)
#
# Usage: bash scripts/null-device.sh tests   (make test-rust, so CI)
#        bash scripts/null-device.sh tests-mpich   (make test-mpich: a subset with MPICH)
#   GPU test cases (tests/gpu.rs) on the null device with asynchronous streams
#   (NULLDEV_STREAMS=async) and its emulated kernels, values checked, an unknown kernel failing
#   to launch, every job exiting 0: the device paths' host logic (stream ordering through the
#   progress engine, staging, flags, groups, the two-phase reductions, views) on NCCL (one
#   rank; two devices for directrefused), MPI_STAGED (two and three ranks), MPI_CUDA_AWARE
#   with GPUWIRE_CUDA_AWARE=1 (the null device's "device" memory is host memory, which any MPI
#   takes) and IPC (two and three ranks; NULLDEV_IPC=1 emulates CUDA IPC with shared memory).
#   Not covered here: real GPUs' timing and memory, NCCL across ranks, CUDA graphs: the GPU
#   machine runs those (scripts/gpu-run.sh).
set -eu
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
what=${1:-all}
mkdir -p .nulldev
cc -O2 -Wall -Wextra -shared -fPIC -o .nulldev/libcuda.so bench/null_device.c -lpthread -lm
for l in libcuda.so.1 libnccl.so libnccl.so.2 libnvrtc.so; do ln -sf libcuda.so .nulldev/$l; done
if [ "$what" = tests ] || [ "$what" = tests-mpich ]; then
  bin=$(cargo test --test gpu --no-run --message-format=json 2>/dev/null | python3 -c 'import sys, json
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "gpu" and m.get("executable"): print(m["executable"])' | tail -1)
  dbin=$(cargo test --test gpu_darray --no-run --message-format=json 2>/dev/null | python3 -c 'import sys, json
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "gpu_darray" and m.get("executable"): print(m["executable"])' | tail -1)
  [ -n "$bin" ] && [ -n "$dbin" ] || { echo "null-device: the gpu test binaries did not build"; exit 1; }
  failed=0
  # run_cases LABEL RANKS CASES [VAR=VALUE...]: every rank must print RESULT PASS for every case.
  run_cases() {
    local label=$1 np=$2 cases=$3; shift 3
    local want=$(( np * $(echo "$cases" | tr ',' '\n' | wc -l) ))
    local xs=() kv
    for kv in "$@"; do xs+=(-x "${kv%%=*}"); done
    local out
    local rc=0
    local launch=(mpirun -np "$np" --oversubscribe --bind-to none -x NULLDEV_STREAMS -x NULLDEV_KERNELS -x LD_LIBRARY_PATH
      -x GPUWIRE_GPU_TEST_NP -x GPUWIRE_GPU_TEST "${xs[@]}")
    [ "$what" = tests-mpich ] && launch=(mpiexec.mpich -np "$np" -genvall)
    out=$(env NULLDEV_STREAMS=async NULLDEV_KERNELS=fail LD_LIBRARY_PATH="$PWD/.nulldev" GPUWIRE_GPU_TEST_NP="$np" \
      GPUWIRE_GPU_TEST="$cases" "$@" timeout 300 "${launch[@]}" "${runbin:-$bin}" 2>&1) || rc=$?
    local pass
    pass=$(echo "$out" | grep -c '^RESULT PASS' || true)
    if [ "$rc" -ne 0 ] || [ "$pass" -ne "$want" ] || echo "$out" | grep -q '^RESULT FAIL'; then
      echo "$out" | grep -v '^RESULT PASS' | tail -30
      echo "FAIL null-device $label ($cases, $np rank(s)): $pass of $want RESULT PASS lines, exit status $rc"
      failed=1
    else
      echo "PASS null-device $label ($cases, $np rank(s)): $pass of $want"
    fi
  }
  if [ "$what" = tests-mpich ]; then
    # The MPICH build (make test-mpich: CARGO_TARGET_DIR and MPICC set for it): a subset.
    run_cases mpich-staged 2 p2pstatus,split,nbcmixed,nbc,nbcgroup,zerocount GPUWIRE_BACKEND=staged
    run_cases mpich-ipc 2 p2pstatus,nbcmixed,nbc,nbcgroup GPUWIRE_BACKEND=ipc NULLDEV_IPC=1
    run_cases mpich-nccl 1 nbc,nbcgroup GPUWIRE_BACKEND=nccl
    [ "$failed" = 0 ] || exit 1
    echo "null-device: MPI_STAGED, IPC and NCCL passed on the null device with MPICH"
    exit 0
  fi
  # Not here: the cases that time ranks against each other or the host against a kernel (late,
  # sendtimeout, nbcearly: run on the GPU machine; on a loaded CI machine they could fail) and
  # `timeout`, whose blocking TIMEOUT holds on IPC and NCCL, not on the
  # stream-ordered MPI paths (their timeout is the communicator's asynchronous error).
  run_cases nccl 1 ops,opswrap,scan,c13,c16,p2pstatus,vcoll,nbc,nbcgroup,nbcstreams,nbccomms,views,threadwait,threadorder,threadgroup,threadposts,threadexit,threadexitturn,turndrain,grouporder,groupcomms,groupcheck,checkmixed,abortgroup GPUWIRE_BACKEND=nccl
  run_cases nccl-two-devices 1 directrefused,groupblame GPUWIRE_BACKEND=nccl NULLDEV_DEVICES=2
  # Nonblocking NCCL communicators: every call may answer ncclInProgress, which gpuwire settles.
  run_cases nccl-nonblocking 1 ops,c16,nbc,nbcgroup,threadwait,threadorder,threadgroup,threadposts,threadexit,threadexitturn,turndrain,grouporder,groupcomms,groupcheck,checkmixed,abortgroup GPUWIRE_BACKEND=nccl GPUWIRE_NCCL_NONBLOCKING=1
  run_cases staged 2 ops,opswrap,scan,c12,c13,mismatch,p2pexact,p2pstatus,reqfree,vcoll,zerocount,split,nbcmixed,nbc,nbcgroup,p2pordered,views,threadwait,grouporder,groupcomms,groupcheck,checkmixed,deliverorder,hostside,threadp2p,threadsendrecv,nbccomms,commloop \
    GPUWIRE_BACKEND=staged
  run_cases staged-np3 3 split,nbcmixed,nbc,hostside GPUWIRE_BACKEND=staged
  # A stream-ordered send that times out, then the next call: it reports the send's TIMEOUT, once
  # (rank 0 only; its peer stays away 2 s past the deadline).
  run_cases staged-sendnext 2 sendnext GPUWIRE_BACKEND=staged
  run_cases staged-sendwait 2 sendwait GPUWIRE_BACKEND=staged
  # A device irecv nothing matches, waited for or freed: TIMEOUT after the timeout, not twice it
  # (the started receive's request was freed, waiting again).
  run_cases staged-irecvtimeout 2 irecvtimeout GPUWIRE_BACKEND=staged
  # A sendrecv whose receive part fails at once and whose send part times out: the receive's
  # error, the timeout appended (its parts now start on the engine, completed by it).
  run_cases staged-sendrecvfail 2 sendrecvfail GPUWIRE_BACKEND=staged
  # threadp2p, threadsendrecv: two threads' blocking device point-to-point, each waiting for the
  # other rank's other thread (one thread's receive held the communicator's device state, and
  # with it the other thread's send: a hang).
  run_cases cuda_aware 2 ops,scan,c13,p2pstatus,reqfree,vcoll,zerocount,nbc,nbcgroup,nbcmixed,nbccomms,views,hostside,threadp2p,threadsendrecv GPUWIRE_BACKEND=cuda_aware GPUWIRE_CUDA_AWARE=1
  # Memory kinds mixed across ranks in checking mode (refused there before, though the path takes them).
  run_cases cuda_aware-check 2 nbcmixed GPUWIRE_BACKEND=cuda_aware GPUWIRE_CUDA_AWARE=1 GPUWIRE_CHECK=1
  # Distributed arrays on device memory (tests/gpu_darray.rs; their kernels emulated too).
  dcases=dops,dmove,dhalo,dstream,dtags,dgrid,dfree,dcomm
  runbin=$dbin run_cases darray-nccl 1 $dcases GPUWIRE_BACKEND=nccl
  runbin=$dbin run_cases darray-staged 2 $dcases GPUWIRE_BACKEND=staged
  runbin=$dbin run_cases darray-cuda_aware 2 $dcases GPUWIRE_BACKEND=cuda_aware GPUWIRE_CUDA_AWARE=1
  runbin=$dbin run_cases darray-ipc 2 $dcases GPUWIRE_BACKEND=ipc NULLDEV_IPC=1
  # CUDA IPC between the ranks' processes (NULLDEV_IPC=1: device memory in a shared memfd).
  # nbcstreams: collectives on two streams, among them a barrier and an empty bcast (no device
  # work) whose place on their stream a later call on the other must wait for.
  run_cases ipc 2 ops,opswrap,scan,c13,mismatch,ipcprogress,ipcdup,ipcfree,ipcexit,ipcmixed,ipchostorder,reqfree,p2pexact,p2pstatus,vcoll,zerocount,views,nbc,nbcgroup,nbcstreams,nbccomms,p2pordered,nbcmixed,threadwait,threadp2p,threadsendrecv,grouporder,groupcomms,groupcheck,checkmixed \
    GPUWIRE_BACKEND=ipc NULLDEV_IPC=1
  run_cases ipc-np3 3 nbcmixed,nbc,nbcstreams,hostside GPUWIRE_BACKEND=ipc NULLDEV_IPC=1
  # Collectives and point-to-point blocking the host (no stream ordering): a blocking send
  # whose receiver refused it (another size) completes outside checking mode, as MPI_Send; a
  # sendrecv whose receive part failed before its send part timed out reports the receive's error.
  run_cases ipc-blocking 2 p2pordered,p2pexact,sendrecvfail GPUWIRE_BACKEND=ipc NULLDEV_IPC=1 GPUWIRE_IPC_STREAM_ORDERED=0
  run_cases ipc-check 2 nbcmixed GPUWIRE_BACKEND=ipc NULLDEV_IPC=1 GPUWIRE_CHECK=1
  # Without the progress thread, pending receives progress only in gpuwire's calls (ipcprogress
  # part E: a test of an irecv must not wait there for its sender's stream).
  run_cases ipc-nothread 2 ipcprogress,p2pstatus GPUWIRE_BACKEND=ipc NULLDEV_IPC=1 GPUWIRE_PROGRESS_THREAD=0
  # Two communicators broken by a timeout one after the other, each created after the last was
  # freed: the second's creation hung when the first's IPC duplicates were freed (a late rank's
  # message on them reached the second, which MPI gave the same context id).
  run_cases ipc-sendnext 2 sendnext,sendwait,sendisend GPUWIRE_BACKEND=ipc NULLDEV_IPC=1
  [ "$failed" = 0 ] || exit 1
  echo "null-device: the NCCL, MPI_STAGED, MPI_CUDA_AWARE and IPC paths passed on the null device (emulated kernels and CUDA IPC; the GPU machine runs them on a GPU)"
  exit 0
fi
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
if [ "$what" = cold ]; then
  # A real NCCL launch (driver, kernel arguments) replaces much of the CPU's caches, so the
  # rest of gpuwire's call, and its next call, find their data cold: on the GPU machines'
  # hosts that, not the instruction count, is most of what gpuwire adds. Each null NCCL
  # launch here writes 2 MiB (NULLDEV_THRASH; callgrind counts nothing inside it) and callgrind
  # simulates a 1 MiB last-level cache: the data misses per call are the cache lines the call
  # touches (distinct lines; a line touched before and after a launch counts twice). Then the
  # wall clock of the same. Which instructions miss, and their source lines:
  # scripts/cold-lines.py (its doc has the profiling command).
  command -v valgrind >/dev/null || { echo "valgrind is needed for the counts (apt-get install valgrind)"; exit 2; }
  declare -A miss
  for c in 0 1 2 3 4 5; do
    for n in 0 100; do
      NULLDEV_THRASH=2097152 $run -x NULLDEV_THRASH valgrind --tool=callgrind --cache-sim=yes --D1=32768,8,64 --LL=1048576,16,64 \
        --collect-atstart=no --toggle-collect=run_loop --toggle-collect=nulldev_thrash --callgrind-out-file=.nulldev/cc.$c.$n .nulldev/device_calls $c $n >/dev/null 2>&1
    done
    # events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw: data lines missed in the last level
    a=$(awk '/^(summary|totals):/ {print $9 + $10; exit}' .nulldev/cc.$c.0)
    b=$(awk '/^(summary|totals):/ {print $9 + $10; exit}' .nulldev/cc.$c.100)
    miss[$c]=$(( (b - a) / 100 ))
  done
  echo "cold data cache lines per call (callgrind's cache simulation, caches replaced at each NCCL call;"
  echo "profiles in .nulldev/cc.C.100, callgrind_annotate --show=DLmr,DLmw --sort=DLmr):"
  names=("allreduce 8 B" "sendrecv 8 B" "halo group 8 B")
  for c in 0 1 2; do
    printf "%-15s raw NCCL %5d  gpuwire %5d  added %5d\n" "${names[$c]}" "${miss[$((c + 3))]}" "${miss[$c]}" $(( miss[$c] - miss[$((c + 3))] ))
  done
  echo "wall clock with the caches replaced at each NCCL call (medians of 15 blocks):"
  NULLDEV_THRASH=2097152 $run -x NULLDEV_THRASH .nulldev/device_calls time 15
fi
