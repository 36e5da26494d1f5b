#!/usr/bin/env bash
# Runs on the GPU machine (see scripts/gpu-test): the GPU tests with the stock Open MPI (not
# CUDA-aware: AUTO must stage) and with the CUDA-aware Open MPI kit, then a pass/fail table.
# Usage: bash scripts/gpu-run.sh [tests|bench|examples|nccl|ipc|nbc|multi|darray|fortran|python|all|multinode]...
# (multinode is not part of all: name it.)
set -u
cd "$(dirname "$0")/.."
what=${*:-all}
export GPUWIRE_GPU_TEST_VERBOSE=${GPUWIRE_GPU_TEST_VERBOSE:-0} GPUWIRE_DEBUG=${GPUWIRE_DEBUG:-0}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
B=$PWD/.gpu/bin
OUTDIR=${OUT:-/tmp/gpu-out}
mkdir -p "$OUTDIR"
LOG=$OUTDIR/gpu-run.log
: > "$LOG"
nvidia-smi -L | tee -a "$LOG"
NGPU=$(nvidia-smi -L | grep -c '^GPU')
# The single-GPU runs use GPU 0 only, also on a machine with more (then ranks share it, as the
# one-GPU machine's tests expect). NCCL_NVLS_ENABLE=0 stays as the machine sets it.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
stock() { env -u OPAL_PREFIX PATH=/usr/bin:/bin LD_LIBRARY_PATH="$B" "$@"; }
KIT=/tmp/k/ompi-cuda
kit() {
  [ -d "$KIT" ] || { mkdir -p /tmp/k && tar -C /tmp/k -xJf .gpu/ompi-cuda-4.1.4.tar.xz; }
  OPAL_PREFIX=$KIT PATH=$KIT/bin:/usr/bin:/bin LD_LIBRARY_PATH=$KIT/lib:$B "$@"
}
np2="mpirun -np 2 --oversubscribe --bind-to none"
np1="mpirun -np 1 --oversubscribe --bind-to none"
LIMIT=${GPUWIRE_GPU_CASE_LIMIT:-150}
gputest() { # label launcher cases [extra -x vars]: one mpirun, killed after $LIMIT s
  # (GPU_BIN picks the test binary: gpu-tests, or gpu-darray-tests for distributed arrays)
  local label=$1 launcher=$2 cases=$3; shift 3
  echo "=== $label: $cases" | tee -a "$LOG"
  GPUWIRE_GPU_TEST=$cases $launcher timeout -k 5 "$LIMIT" $np2 -x GPUWIRE_GPU_TEST -x GPUWIRE_GPU_TEST_VERBOSE -x GPUWIRE_DEBUG -x CUDA_VISIBLE_DEVICES -x NCCL_NVLS_ENABLE "$@" "$B/${GPU_BIN:-gpu-tests}" 2>&1 \
    | stdbuf -oL sed -u "s/^/[$label] /" | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || echo "[$label] RESULT FAIL run rank - exited with status $rc (124 = killed after ${LIMIT}s)" | tee -a "$LOG"
}
has() { case " $what " in *" $1 "*|*" all "*) return 0;; esac; return 1; }
if has smoke; then
  gputest stock-smoke stock c17,c14
fi
if has tests; then
  gputest stock-auto stock c17,c14,c16,c11,c15,ops,opswrap,scan,c13,c12,p2pexact,p2pstatus,capture,vcoll,zerocount,views
  GPUWIRE_BACKEND=mpi_staged gputest kit-staged kit ops,opswrap,scan,c13,c14,c17,reqfree,p2pexact,p2pstatus,capture,vcoll,zerocount,views,threadp2p,threadsendrecv,nbccomms,commloop -x GPUWIRE_BACKEND
  # A rank merely late to an allreduce, timeout 2 s, checking off and on: no rank blocks longer.
  GPUWIRE_BACKEND=mpi_staged gputest staged-late stock late,sendtimeout,sendnext,sendwait,sendisend,sendrecvfail,irecvtimeout -x GPUWIRE_BACKEND
  GPUWIRE_BACKEND=mpi_cuda_aware gputest kit-cuda-aware kit ops,opswrap,scan,c12,c13,c14,c16,c17,reqfree,p2pexact,p2pstatus,capture,vcoll,zerocount,views,nbcmixed,nbccomms,threadp2p,threadsendrecv -x GPUWIRE_BACKEND
  # Memory kinds mixed across ranks, checking mode on (it refused such calls on IPC and CUDA-aware before).
  GPUWIRE_CHECK=1 GPUWIRE_BACKEND=mpi_cuda_aware gputest kit-cuda-aware-check kit nbcmixed -x GPUWIRE_BACKEND -x GPUWIRE_CHECK
  GPUWIRE_CHECK=1 GPUWIRE_BACKEND=ipc gputest ipc-check stock nbcmixed -x GPUWIRE_BACKEND -x GPUWIRE_CHECK
fi
if has nccl || has tests; then
  # One GPU: NCCL on 1-rank communicators (every operation, datatype and op); C15 with 2 ranks.
  GPUWIRE_BACKEND=nccl GPUWIRE_GPU_TEST_NP=1 np2=$np1 gputest nccl-1rank stock ops,opswrap,scan,c13,c14,c16,c17,p2pexact,p2pstatus,capture,vcoll,views,nbccomms,threadwait,threadorder,threadgroup,threadposts,threadexit,threadexitturn,turndrain,grouporder,groupcomms,groupcheck,checkmixed,abortgroup -x GPUWIRE_BACKEND -x GPUWIRE_GPU_TEST_NP
  gputest stock-c15 stock c15
  # NCCL's initialization deadline (1 ms: never kept): NCCL requested fails with TIMEOUT, AUTO
  # falls back and says why (one rank, so AUTO tries NCCL).
  GPUWIRE_NCCL_INIT_TIMEOUT=0.001 GPUWIRE_GPU_TEST_NP=1 np2=$np1 gputest nccl-initdeadline stock ncclinit -x GPUWIRE_NCCL_INIT_TIMEOUT -x GPUWIRE_GPU_TEST_NP
fi
if has ipc; then
  # CUDA IPC, stock (not CUDA-aware) Open MPI, ranks sharing GPU 0: every operation x datatype x
  # op, stream ordering, tails, results in the caller's buffer, isend/irecv; the
  # free-then-reallocate case, a rank freeing its communicator while a peer still works, memory
  # IPC cannot export; pending receives progressing outside IPC waits (ipcprogress); mappings
  # shared by a dup'ed communicator (ipcdup); with 2 and with 3 ranks. Then AUTO picks IPC
  # (2 ranks, no GPUWIRE_BACKEND).
  ipccases=${GPUWIRE_IPC_CASES:-ipcprogress,ipcdup,ops,opswrap,scan,c12,c13,c14,c17,ipcfree,ipcexit,ipcmixed,ipchostorder,reqfree,p2pexact,p2pstatus,capture,vcoll,views,nbccomms,threadwait,threadp2p,threadsendrecv,grouporder,groupcomms,groupcheck,checkmixed}
  GPUWIRE_BACKEND=ipc gputest ipc-np2 stock "$ipccases" -x GPUWIRE_BACKEND
  GPUWIRE_BACKEND=ipc GPUWIRE_GPU_TEST_NP=3 np2="mpirun -np 3 --oversubscribe --bind-to none" \
    gputest ipc-np3 stock "$ipccases" -x GPUWIRE_BACKEND -x GPUWIRE_GPU_TEST_NP
  # Without the progress thread: receives progress in gpuwire's own waits only (wildcard,
  # probed and ordered receives too: p2pstatus).
  GPUWIRE_BACKEND=ipc GPUWIRE_PROGRESS_THREAD=0 gputest ipc-nothread stock ipcprogress,p2pstatus -x GPUWIRE_BACKEND -x GPUWIRE_PROGRESS_THREAD
  # IPC point-to-point receivers copying through the mapping as 2-D copies (experimental,
  # GPUWIRE_IPC_COPY_ROWS=1): odd sizes (ops), exact and status receives, stream order.
  GPUWIRE_BACKEND=ipc GPUWIRE_IPC_COPY_ROWS=1 gputest ipc-copyrows stock ops,p2pexact,p2pstatus,p2pordered,ipcprogress -x GPUWIRE_BACKEND -x GPUWIRE_IPC_COPY_ROWS
  gputest ipc-auto stock ipcauto,c15
  # A timeout configured: a collective one rank skips fails on every rank within it; a
  # stream-ordered send nobody receives releases its stream at the deadline (sendtimeout).
  GPUWIRE_BACKEND=ipc gputest ipc-timeout stock timeout,late,sendtimeout,sendnext,sendwait,sendisend,sendrecvfail,irecvtimeout -x GPUWIRE_BACKEND
  # A sendrecv blocking the host whose receive part failed before its send part timed out: the
  # receive's error is the call's (it was TIMEOUT).
  GPUWIRE_BACKEND=ipc GPUWIRE_IPC_STREAM_ORDERED=0 gputest ipc-timeout-blocking stock sendrecvfail -x GPUWIRE_BACKEND -x GPUWIRE_IPC_STREAM_ORDERED
fi
if has nbc; then
  # Issue 18 on device buffers, every device backend: each nonblocking collective, 11 outstanding,
  # completed out of order (nbc); groups of 2, 4, 8 sends then receives to different peers, nested,
  # a halo ring, nonblocking forms in a group (nbcgroup); "returns before the data" (nbcearly: a
  # 50 ms kernel, then allreduce / iallreduce / sendrecv / a group of send and recv on its stream: under 25 ms on the host,
  # right result after cuStreamSynchronize; a cudaFree while one is pending) on the
  # stream-ordered backends (NCCL, MPI_STAGED, IPC; MPI_CUDA_AWARE still blocks the host); mixed
  # memory kinds across ranks (nbcmixed: host buffers on one rank, device on another) on
  # MPI_STAGED and IPC.
  nbccases=nbc,nbcgroup
  # MPI_STAGED's large allreduces in two phases (split), stream-ordered and with the host
  # waiting (hostsync: the CPU reduces), on 2 and 3 ranks.
  GPUWIRE_BACKEND=mpi_staged gputest nbc-kit-staged kit $nbccases,nbcearly,nbcstreams,p2pordered,nbcmixed,split,deliverorder,hostside,mismatch -x GPUWIRE_BACKEND
  GPUWIRE_BACKEND=mpi_cuda_aware gputest nbc-kit-cuda-aware kit $nbccases -x GPUWIRE_BACKEND
  GPUWIRE_BACKEND=mpi_staged GPUWIRE_HOST_SYNC=1 gputest nbc-kit-staged-hostsync kit $nbccases,nbcmixed,split -x GPUWIRE_BACKEND -x GPUWIRE_HOST_SYNC
  GPUWIRE_BACKEND=mpi_staged GPUWIRE_GPU_TEST_NP=3 np2="mpirun -np 3 --oversubscribe --bind-to none" \
    gputest nbc-staged-np3 stock nbcmixed,split,hostside -x GPUWIRE_BACKEND -x GPUWIRE_GPU_TEST_NP
  GPUWIRE_BACKEND=ipc gputest nbc-ipc-np2 stock $nbccases,nbcearly,nbcstreams,p2pordered,nbcmixed,mismatch -x GPUWIRE_BACKEND
  GPUWIRE_BACKEND=ipc GPUWIRE_GPU_TEST_NP=3 np2="mpirun -np 3 --oversubscribe --bind-to none" \
    gputest nbc-ipc-np3 stock $nbccases,nbcearly,nbcstreams,p2pordered,nbcmixed,hostside -x GPUWIRE_BACKEND -x GPUWIRE_GPU_TEST_NP
  # IPC collectives blocking the host, as before (GPUWIRE_IPC_STREAM_ORDERED=0).
  GPUWIRE_BACKEND=ipc GPUWIRE_IPC_STREAM_ORDERED=0 gputest nbc-ipc-blocking stock $nbccases,nbcstreams,p2pordered,nbcmixed -x GPUWIRE_BACKEND -x GPUWIRE_IPC_STREAM_ORDERED
  GPUWIRE_BACKEND=nccl GPUWIRE_GPU_TEST_NP=1 np2=$np1 gputest nbc-nccl-1rank stock $nbccases,nbcearly -x GPUWIRE_BACKEND -x GPUWIRE_GPU_TEST_NP
  gputest nbc-stock-auto stock $nbccases
fi
if has darray; then
  # Distributed arrays on device memory: every backend, and NCCL on one rank.
  dcases=dops,dmove,dhalo,dstream,dtags,dgrid,dfree,dcomm
  GPU_BIN=gpu-darray-tests gputest darray-stock-auto stock $dcases
  GPUWIRE_BACKEND=mpi_staged GPU_BIN=gpu-darray-tests gputest darray-kit-staged kit $dcases -x GPUWIRE_BACKEND
  GPUWIRE_BACKEND=mpi_cuda_aware GPU_BIN=gpu-darray-tests gputest darray-kit-cuda-aware kit $dcases -x GPUWIRE_BACKEND
  GPUWIRE_BACKEND=nccl GPUWIRE_GPU_TEST_NP=1 np2=$np1 GPU_BIN=gpu-darray-tests gputest darray-nccl-1rank stock $dcases -x GPUWIRE_BACKEND -x GPUWIRE_GPU_TEST_NP
  # IPC: the arrays' internal communicator has its own IPC channel (dtags: program messages
  # with the arrays' old tags around a halo exchange and a gather).
  GPUWIRE_BACKEND=ipc GPU_BIN=gpu-darray-tests gputest darray-ipc stock dhalo,dtags,dgrid,dfree -x GPUWIRE_BACKEND
  # Process grids and wrapped device memory (dgrid) on 1 and 3 ranks too (2 above), the ranks
  # sharing the GPU: one rank's periodic axes exchange with itself.
  np3="mpirun -np 3 --oversubscribe --bind-to none"
  GPUWIRE_GPU_TEST_NP=1 np2=$np1 GPU_BIN=gpu-darray-tests gputest darray-grid-1rank stock dgrid -x GPUWIRE_GPU_TEST_NP
  GPUWIRE_GPU_TEST_NP=3 np2=$np3 GPU_BIN=gpu-darray-tests gputest darray-grid-np3 stock dgrid -x GPUWIRE_GPU_TEST_NP
  GPUWIRE_BACKEND=mpi_cuda_aware GPUWIRE_GPU_TEST_NP=3 np2=$np3 GPU_BIN=gpu-darray-tests gputest darray-grid-kit-cuda-aware-np3 kit dgrid -x GPUWIRE_BACKEND -x GPUWIRE_GPU_TEST_NP
fi
example() { # label launcher np binary args... (GPUWIRE_EXAMPLES=regex selects by label)
  local label=$1 launcher=$2 np=$3; shift 3
  [[ $label =~ ${GPUWIRE_EXAMPLES:-.} ]] || return 0
  echo "=== example $label" | tee -a "$LOG"
  $launcher timeout -k 5 "$LIMIT" mpirun -np "$np" --oversubscribe --bind-to none -x GPUWIRE_BACKEND -x CUDA_VISIBLE_DEVICES -x NCCL_NVLS_ENABLE "$@" 2>&1 \
    | grep -v "cuMemHostRegister\|^ *$\|^-----*$\|^  *Host: \|Registration cache:\|help message\|orte_base_help_aggregate" | tail -14 | sed "s/^/[$label] /" | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" = 0 ]; then echo "[$label] RESULT PASS example rank - ok" | tee -a "$LOG"
  else echo "[$label] RESULT FAIL example rank - exited with status $rc" | tee -a "$LOG"; fi
}
if has multi; then
  if [ "$NGPU" -lt 2 ]; then
    echo "[multi] RESULT FAIL setup rank - this machine has $NGPU GPU(s); the multi-GPU runs need 2 or more" | tee -a "$LOG"
  else
    # One rank per GPU: AUTO picks NCCL. Every operation x datatype x op, the stream-ordering and
    # other cases, mismatched counts with checking on, another device current, then a timeout.
    all=$(seq -s, 0 $((NGPU - 1)))
    CUDA_VISIBLE_DEVICES=$all GPUWIRE_GPU_TEST_NP=$NGPU np2="mpirun -np $NGPU --oversubscribe --bind-to none" \
      gputest multi-nccl stock "${GPUWIRE_MULTI_CASES:-ops,opswrap,scan,c12,c13,c14,c16,c17,mismatch,p2pexact,p2pstatus,otherdev,timeout,late,vcoll,views,directrefused,groupblame,threadwait,threadorder,threadgroup,threadposts,threadexit,threadexitturn,turndrain,grouporder,groupcomms,groupcheck,checkmixed,abortgroup}" -x GPUWIRE_GPU_TEST_NP
    # The library loaded where libnccl is absent: AUTO falls back, NCCL requested says why.
    CUDA_VISIBLE_DEVICES=$all GPUWIRE_NCCL_LIBRARY=/nonexistent/libnccl.so.2 GPUWIRE_GPU_TEST_NP=$NGPU np2="mpirun -np $NGPU --oversubscribe --bind-to none" \
      gputest multi-no-nccl stock nonccl -x GPUWIRE_GPU_TEST_NP -x GPUWIRE_NCCL_LIBRARY
    # NCCL's initialization deadline with one rank per GPU: TIMEOUT when requested, AUTO falls back.
    CUDA_VISIBLE_DEVICES=$all GPUWIRE_NCCL_INIT_TIMEOUT=0.001 GPUWIRE_GPU_TEST_NP=$NGPU np2="mpirun -np $NGPU --oversubscribe --bind-to none" \
      gputest multi-nccl-initdeadline stock ncclinit -x GPUWIRE_GPU_TEST_NP -x GPUWIRE_NCCL_INIT_TIMEOUT
    # Staged on GPUs of their own: the ring with GPU reductions from 64 KiB up (ranks sharing a
    # GPU take the host path up to 2 MiB, so the one-GPU runs reach the ring less often).
    CUDA_VISIBLE_DEVICES=$all GPUWIRE_BACKEND=mpi_staged GPUWIRE_GPU_TEST_NP=$NGPU np2="mpirun -np $NGPU --oversubscribe --bind-to none" \
      gputest multi-staged stock ops,opswrap,scan,c13,vcoll -x GPUWIRE_GPU_TEST_NP -x GPUWIRE_BACKEND
    CUDA_VISIBLE_DEVICES=$all GPUWIRE_BACKEND=mpi_cuda_aware GPUWIRE_GPU_TEST_NP=$NGPU np2="mpirun -np $NGPU --oversubscribe --bind-to none" \
      gputest multi-cuda-aware kit ops,opswrap,scan,c13,vcoll -x GPUWIRE_GPU_TEST_NP -x GPUWIRE_BACKEND
    # IPC between ranks on GPUs of their own (peer access over NVLink), forced: every operation,
    # stream ordering, free-then-reallocate, progress of pending receives.
    CUDA_VISIBLE_DEVICES=$all GPUWIRE_BACKEND=ipc GPUWIRE_GPU_TEST_NP=$NGPU np2="mpirun -np $NGPU --oversubscribe --bind-to none" \
      gputest multi-ipc stock ops,opswrap,scan,c12,c13,c17,ipcfree,ipcprogress,ipcdup -x GPUWIRE_GPU_TEST_NP -x GPUWIRE_BACKEND
    CUDA_VISIBLE_DEVICES=$all example cg-device-nccl-multi stock "$NGPU" "$B/cg_poisson_device" 768 "$NGPU"
  fi
fi
if has examples; then
  # The main job, host and device, on the same grid: iterations and error must agree.
  example cg-host stock 2 "$B/cg_poisson" 768 2
  example cg-device-staged stock 2 "$B/cg_poisson_device" 768 2
  GPUWIRE_BACKEND=mpi_cuda_aware example cg-device-cuda-aware kit 2 "$B/cg_poisson_device" 768 2
  example cg-device-nccl-1rank stock 1 "$B/cg_poisson_device" 768 1
  example isend-irecv stock 2 "$B/isend_irecv" 2
  example vstack-matvec stock 2 "$B/vstack_matvec" 2
fi
agree() { # label-a label-b: the same CG iteration count, max errors within 1e-10
  local ia ib ea eb
  ia=$(sed -n "s/^\[$1\] iterations: //p" "$LOG" | tail -1); ib=$(sed -n "s/^\[$2\] iterations: //p" "$LOG" | tail -1)
  ea=$(sed -n "s/^\[$1\] max error: //p" "$LOG" | tail -1); eb=$(sed -n "s/^\[$2\] max error: //p" "$LOG" | tail -1)
  if [ -n "$ia" ] && [ "$ia" = "$ib" ] && awk -v a="$ea" -v b="$eb" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= 1e-10) }'; then
    echo "[$2] RESULT PASS agree rank - iterations $ib, error $eb (as $1)" | tee -a "$LOG"
  else
    echo "[$2] RESULT FAIL agree rank - iterations ${ib:-?} vs ${ia:-?}, error ${eb:-?} vs ${ea:-?} ($1)" | tee -a "$LOG"
  fi
}
if has examples || has darray; then
  # Distributed-array examples, host and device memory: the same answers.
  example darray-cg-host stock 2 "$B/darray_cg_poisson" 768 2
  example darray-cg-device stock 2 "$B/darray_cg_poisson" 768 2 device
  GPUWIRE_BACKEND=mpi_cuda_aware example darray-cg-device-cuda-aware kit 2 "$B/darray_cg_poisson" 768 2 device
  example darray-cg-host-1rank stock 1 "$B/darray_cg_poisson" 768 1
  GPUWIRE_BACKEND=nccl example darray-cg-device-nccl-1rank stock 1 "$B/darray_cg_poisson" 768 1 device
  for l in darray-cg-device darray-cg-device-cuda-aware; do agree darray-cg-host $l; done
  agree darray-cg-host-1rank darray-cg-device-nccl-1rank
  example darray-blockrow-host stock 2 "$B/darray_blockrow" 2
  example darray-blockrow-device stock 2 "$B/darray_blockrow" 2 device
  GPUWIRE_BACKEND=mpi_cuda_aware example darray-blockrow-device-cuda-aware kit 2 "$B/darray_blockrow" 2 device
  GPUWIRE_BACKEND=nccl example darray-blockrow-device-nccl-1rank stock 1 "$B/darray_blockrow" 1 device
fi
if has fortran || has darray; then
  # The Fortran examples (examples-fortran), host and device memory: the same answers as C.
  if stock ldd "$B/darray_cg_poisson_f" | grep -q "not found"; then
    echo "[fortran] RESULT FAIL setup rank - $(stock ldd "$B/darray_cg_poisson_f" | grep 'not found' | tr -s ' \t' ' ')" | tee -a "$LOG"
  else
    has darray || example darray-cg-host stock 2 "$B/darray_cg_poisson" 768 2
    has darray || example darray-cg-host-1rank stock 1 "$B/darray_cg_poisson" 768 1
    example fortran-darray-cg-host stock 2 "$B/darray_cg_poisson_f" 768 2
    example fortran-darray-cg-device stock 2 "$B/darray_cg_poisson_f" 768 2 device
    GPUWIRE_BACKEND=nccl example fortran-darray-cg-device-nccl-1rank stock 1 "$B/darray_cg_poisson_f" 768 1 device
    for l in fortran-darray-cg-host fortran-darray-cg-device; do agree darray-cg-host $l; done
    agree darray-cg-host-1rank fortran-darray-cg-device-nccl-1rank
    example fortran-darray-blockrow-host stock 2 "$B/darray_blockrow_f" 2
    example fortran-darray-blockrow-device stock 2 "$B/darray_blockrow_f" 2 device
    example fortran-cg-host stock 2 "$B/cg_poisson_f" 768 2
  fi
fi
if [[ " $what " == *" multinode "* ]]; then
  # Hosts simulated on this one machine (scripts/multihost.sh: one MPI daemon per host, started
  # through scripts/multihost-agent.sh in place of ssh, each host its own host name in a UTS
  # namespace, TCP over loopback between hosts; it sets OMPI_MCA_plm=rsh over this machine's
  # isolated), every rank on GPU 0: 2 hosts x 1 rank, 2 hosts x 2 ranks. acrosshosts: describe
  # counts 2 nodes, AUTO takes neither IPC (not one node) nor NCCL (one GPU UUID: shared, whatever
  # the host names) and says why, IPC and NCCL requested fail saying why; 2 x 1: AUTO says
  # why not HIER (one rank per host), HIER requested fails saying why; 2 x 2: AUTO takes HIER
  # (IPC inside each host; between the leaders stock: MPI_STAGED, kit: MPI_CUDA_AWARE with
  # their reductions staged), and HIER's allreduce (also 4 MiB, the leaders' staged ring),
  # reduce to a non-leader root, reduce_scatter_block (float64_int32 MINLOC too) and
  # allgatherv equal the flat staged path's (and on 2 x 2 the cases again with
  # GPUWIRE_HIER_MIN_BYTES=0: HIER composes every size); then every operation x datatype x op on
  # AUTO (2 x 1 stock: staged, kit: CUDA-aware; 2 x 2: HIER) and MPI_STAGED forced (kit), and
  # cg_poisson_device, whose answers must agree between the two layouts.
  # 2 x 2 runs under the kit only: with the stock Open MPI every gpuwire program tried there
  # hung in that layout before any output (2026-12-01/02: the gpu-tests and the isend_irecv
  # example). A plain MPI program runs there, but MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)
  # gives ranks 0 and 1 a node of three ranks and ranks 2 and 3 one of two (2026-12-02): the
  # MPI's fault in this layout; gpuwire's creation now fails with GPUWIRE_ERROR_MPI there
  # (src/create.rs: count_nodes; not yet run there). Its stock steps are skipped with a NOTE
  # (the stock steps run on 2 x 1).
  # GPUWIRE_MULTINODE_SLOTS="1,1" (or "2,2") runs one layout only (each takes a few minutes).
  mh_example() { # label launcher slots binary args...: as example, on simulated hosts
    local label=$1 launcher=$2 slots=$3; shift 3
    echo "=== example $label" | tee -a "$LOG"
    $launcher timeout -k 5 "$LIMIT" bash scripts/multihost.sh openmpi "$slots" "$@" 2>&1 \
      | grep -v "cuMemHostRegister\|^ *$\|^-----*$\|^  *Host: \|Registration cache:\|help message\|orte_base_help_aggregate" | tail -14 | sed "s/^/[$label] /" | tee -a "$LOG"
    local rc=${PIPESTATUS[0]}
    if [ "$rc" = 0 ]; then echo "[$label] RESULT PASS example rank - ok" | tee -a "$LOG"
    else echo "[$label] RESULT FAIL example rank - exited with status $rc" | tee -a "$LOG"; fi
  }
  for slots in ${GPUWIRE_MULTINODE_SLOTS:-1,1 2,2}; do
    n=$((${slots%,*} + ${slots#*,})) l=mh2x${slots%,*}
    # The MPI of the stock steps (and of cg_poisson_device): the kit where stock hangs (2 x 2).
    cg=stock
    if [ "$slots" = 2,2 ]; then
      cg=kit
      echo "NOTE $l: the stock Open MPI steps are skipped: its MPI_Comm_split_type(SHARED) gives the ranks inconsistent nodes in the 2 x 2 layout on this machine (gpuwire programs hung there; now creation fails with GPUWIRE_ERROR_MPI); 2 x 2 runs under the kit" | tee -a "$LOG"
    else
      GPUWIRE_GPU_TEST_NP=$n np2="bash scripts/multihost.sh openmpi $slots" \
        gputest "$l-stock-auto" stock acrosshosts,ops,opswrap,scan,c13,c14,c17 -x GPUWIRE_GPU_TEST_NP
    fi
    GPUWIRE_GPU_TEST_NP=$n np2="bash scripts/multihost.sh openmpi $slots" \
      gputest "$l-kit-auto" kit acrosshosts,ops,c13,c14 -x GPUWIRE_GPU_TEST_NP
    GPUWIRE_BACKEND=mpi_staged GPUWIRE_GPU_TEST_NP=$n np2="bash scripts/multihost.sh openmpi $slots" \
      gputest "$l-kit-staged" kit acrosshosts,ops,c13,c14 -x GPUWIRE_GPU_TEST_NP -x GPUWIRE_BACKEND
    if [ "$slots" = 2,2 ]; then
      # HIER at every size (its device calls below 64 KiB take the flat path by default), then
      # the other cases the stock step would have run (two runs: each within $LIMIT s).
      GPUWIRE_HIER_MIN_BYTES=0 GPUWIRE_GPU_TEST_NP=$n np2="bash scripts/multihost.sh openmpi $slots" \
        gputest "$l-kit-hier0" kit acrosshosts,ops,c13,c14 -x GPUWIRE_GPU_TEST_NP -x GPUWIRE_HIER_MIN_BYTES
      GPUWIRE_HIER_MIN_BYTES=0 GPUWIRE_GPU_TEST_NP=$n np2="bash scripts/multihost.sh openmpi $slots" \
        gputest "$l-kit-hier0-more" kit opswrap,scan,c17 -x GPUWIRE_GPU_TEST_NP -x GPUWIRE_HIER_MIN_BYTES
    fi
    mh_example "$l-cg-device" $cg "$slots" "$B/cg_poisson_device" 512 "$n"
  done
  if grep -q "^\[mh2x1-cg-device\] iterations" "$LOG" && grep -q "^\[mh2x2-cg-device\] iterations" "$LOG"; then
    agree mh2x1-cg-device mh2x2-cg-device
  fi
fi
if has python; then
  # examples-python/allreduce.py on CuPy device arrays (--cupy makes CuPy and a GPU required),
  # through the ctypes module and mpi4py. Needs a python3 with mpi4py (for this Open MPI), NumPy
  # and CuPy on this machine; without them a NOTE says it was not run.
  # The interpreter is resolved on the full PATH (the machine's is /opt/torch/.venv/bin/python3),
  # before stock() narrows PATH to the stock MPI; PYTHON overrides.
  PY=${PYTHON:-$(command -v python3)}
  if stock "$PY" -c 'import numpy, cupy, mpi4py' > /dev/null 2>&1; then
    GPUWIRE_LIBRARY=$B/libgpuwire.so example python-cupy stock 2 -x GPUWIRE_LIBRARY "$PY" examples-python/allreduce.py 2 --cupy
    # The module's byte-order refusal on CuPy arrays (and its freeing rules) on the GPU machine.
    GPUWIRE_LIBRARY=$B/libgpuwire.so example python-bindings-cupy stock 2 -x GPUWIRE_LIBRARY "$PY" tests/python/test_bindings.py 2 --cupy
    # The package's pytest suite: host arrays, then CuPy (and PyTorch where it is installed) on the GPU.
    if stock "$PY" -c 'import pytest' > /dev/null 2>&1; then
      GPUWIRE_LIBRARY=$B/libgpuwire.so example python-pytest-cupy stock 2 -x GPUWIRE_LIBRARY "$PY" -m pytest -q -p no:cacheprovider --color=no -rs tests/python/test_package.py
    else
      echo "NOTE python: no pytest for $PY; tests/python/test_package.py was not run" | tee -a "$LOG"
    fi
  else
    echo "NOTE python: no python3 ($PY) with mpi4py, NumPy and CuPy here; the CuPy example and test_bindings.py were not run" | tee -a "$LOG"
  fi
fi
if has bench && [ -x "$B/gpuwire-bench" ]; then
  echo "=== bench" | tee -a "$LOG"
  bash scripts/gpu-bench.sh 2>&1 | tee -a "$LOG"
fi
echo "=== summary"
grep -h "RESULT" "$LOG" | sed 's/^\[\([^]]*\)\] RESULT \(PASS\|FAIL\) \([a-z0-9]*\) rank \([0-9]*\).*/\1 \3 \2/' | sort | uniq -c | sort -k2
fails=$(grep -c "RESULT FAIL" "$LOG" || true)
echo "failures: $fails"
[ "$fails" = 0 ]
