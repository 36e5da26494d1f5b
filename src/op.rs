//! One operation, described once, and where it runs: now on the caller's thread, on the
//! communicator's progress engine (`crate::engine`), or at the end of a group (`crate::group`).
//!
//! Every exported operation (blocking or nonblocking) becomes an [`Op`] that owns its buffers,
//! and [`issue`] decides:
//!
//! - **Host memory, blocking form**: runs now, on the caller's thread, as MPI's blocking call —
//!   after waiting for the operations of this communicator still queued on its engine, so every
//!   operation reaches MPI in call order.
//! - **Nonblocking form** (isend/irecv and the i-collectives): queued on the engine, which runs
//!   the blocking form's code; the request completes when it has run. NCCL device operations are
//!   enqueued on their stream now (NCCL is asynchronous itself); the request completes when the
//!   stream passes them.
//! - **Device memory on MPI_STAGED and MPI_CUDA_AWARE** (and an NCCL communicator's calls that
//!   mix host and device memory), either form: stream-ordered (`crate::backend::ordered`): the
//!   call enqueues its device work on its stream and returns; the host side runs on the engine
//!   (on the caller's thread, waiting for the stream too, with `GPUWIRE_HOST_SYNC=1`, in checking
//!   mode, and below MPI_THREAD_MULTIPLE).
//! - **Device memory on IPC, blocking form**: runs now and returns when its data is in place (as
//!   in gpuwire 0.1).
//!
//! Inside a group (`crate::group::submit`, the exported functions' entry) an operation is
//! recorded instead, and issued at the outermost `gpuwire_group_end`.
//!
//! An operation that fails after its call returned (nobody waits for it) is the communicator's
//! asynchronous error: returned by the next call on the communicator (which then does nothing)
//! and by `gpuwire_comm_async_error`.

use std::sync::{Arc, Mutex};

use crate::buffer::{Buffer, Role};
use crate::comm::Communicator;
use crate::device::{CtxGuard, Event, Stream};
use crate::backend::ordered::{self, HostSide};
use crate::engine::{self, Done};
use crate::error::{Error, Result};
use crate::ops::Layout;
use crate::request::{Pending, Request};
use crate::types::ReduceOp;

/// An operation with its arguments, owning its buffers.
#[derive(Clone, Debug)]
pub enum Op {
    Send { buf: Arc<Buffer>, dest: i32, tag: i32 },
    Recv { buf: Arc<Buffer>, source: i32, tag: i32 },
    Isend { buf: Arc<Buffer>, dest: i32, tag: i32 },
    /// `upto`: a message of up to the buffer's count (gpuwire_irecv_status), else exactly it.
    Irecv { buf: Arc<Buffer>, source: i32, tag: i32, upto: bool },
    Sendrecv { send: Arc<Buffer>, dest: i32, sendtag: i32, recv: Arc<Buffer>, source: i32, recvtag: i32 },
    Barrier,
    Bcast { buf: Arc<Buffer>, root: i32 },
    Reduce { send: Arc<Buffer>, recv: Option<Arc<Buffer>>, op: ReduceOp, root: i32 },
    Allreduce { send: Arc<Buffer>, recv: Arc<Buffer>, op: ReduceOp },
    Allgather { send: Arc<Buffer>, recv: Arc<Buffer> },
    Allgatherv { send: Arc<Buffer>, recv: Arc<Buffer>, counts: Option<Vec<i64>> },
    ReduceScatter { send: Arc<Buffer>, recv: Arc<Buffer>, op: ReduceOp },
    /// MPI_Scan, or MPI_Exscan when `exclusive`.
    Scan { send: Arc<Buffer>, recv: Arc<Buffer>, op: ReduceOp, exclusive: bool },
    Alltoall { send: Arc<Buffer>, recv: Arc<Buffer> },
    Gather { send: Arc<Buffer>, recv: Option<Arc<Buffer>>, root: i32 },
    Scatter { send: Option<Arc<Buffer>>, recv: Arc<Buffer>, root: i32 },
    // The layouts boxed: every operation moves through the call's layers by value, at the
    // size of the largest variant.
    Alltoallv { send: Arc<Buffer>, sendl: Box<Layout>, recv: Arc<Buffer>, recvl: Box<Layout> },
    Gatherv { send: Arc<Buffer>, recv: Option<Arc<Buffer>>, recvl: Box<Layout>, root: i32 },
    Scatterv { send: Option<Arc<Buffer>>, sendl: Box<Layout>, recv: Arc<Buffer>, root: i32 },
    ReduceScatterv { send: Arc<Buffer>, recv: Arc<Buffer>, counts: Option<Vec<i64>>, op: ReduceOp },
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Send { .. } => "send",
            Op::Recv { .. } => "recv",
            Op::Isend { .. } => "isend",
            Op::Irecv { .. } => "irecv",
            Op::Sendrecv { .. } => "sendrecv",
            Op::Barrier => "barrier",
            Op::Bcast { .. } => "bcast",
            Op::Reduce { .. } => "reduce",
            Op::Allreduce { .. } => "allreduce",
            Op::Allgather { .. } => "allgather",
            Op::Allgatherv { .. } => "allgatherv",
            Op::ReduceScatter { .. } => "reduce_scatter",
            Op::Scan { exclusive: false, .. } => "scan",
            Op::Scan { exclusive: true, .. } => "exscan",
            Op::Alltoall { .. } => "alltoall",
            Op::Gather { .. } => "gather",
            Op::Scatter { .. } => "scatter",
            Op::Alltoallv { .. } => "alltoallv",
            Op::Gatherv { .. } => "gatherv",
            Op::Scatterv { .. } => "scatterv",
            Op::ReduceScatterv { .. } => "reduce_scatterv",
        }
    }

    /// The operation's kind as the backends' routing names it.
    pub(crate) fn operation(&self) -> crate::backend::Operation {
        use crate::backend::Operation as O;
        match self {
            Op::Send { .. } => O::Send,
            Op::Recv { .. } => O::Recv,
            Op::Isend { .. } => O::Isend,
            Op::Irecv { .. } => O::Irecv,
            Op::Sendrecv { .. } => O::Sendrecv,
            Op::Barrier => O::Barrier,
            Op::Bcast { .. } => O::Bcast,
            Op::Reduce { .. } => O::Reduce,
            Op::Allreduce { .. } => O::Allreduce,
            Op::Allgather { .. } => O::Allgather,
            Op::Allgatherv { .. } => O::Allgatherv,
            Op::ReduceScatter { .. } => O::ReduceScatter,
            Op::Scan { .. } => O::Scan,
            Op::Alltoall { .. } => O::Alltoall,
            Op::Gather { .. } => O::Gather,
            Op::Scatter { .. } => O::Scatter,
            Op::Alltoallv { .. } => O::Alltoallv,
            Op::Gatherv { .. } => O::Gatherv,
            Op::Scatterv { .. } => O::Scatterv,
            Op::ReduceScatterv { .. } => O::ReduceScatterv,
        }
    }

    /// The buffers of the operation as given (without allocating; `None` where there is none).
    pub(crate) fn slots(&self) -> [Option<&Arc<Buffer>>; 2] {
        match self {
            Op::Send { buf, .. } | Op::Recv { buf, .. } | Op::Isend { buf, .. } | Op::Irecv { buf, .. } | Op::Bcast { buf, .. } => [Some(buf), None],
            Op::Sendrecv { send, recv, .. } => [Some(send), Some(recv)],
            Op::Barrier => [None, None],
            Op::Reduce { send, recv, .. } | Op::Gather { send, recv, .. } | Op::Gatherv { send, recv, .. } => [Some(send), recv.as_ref()],
            Op::Scatter { send, recv, .. } | Op::Scatterv { send, recv, .. } => [send.as_ref(), Some(recv)],
            Op::Alltoallv { send, recv, .. } | Op::ReduceScatterv { send, recv, .. } => [Some(send), Some(recv)],
            Op::Allreduce { send, recv, .. }
            | Op::Allgather { send, recv }
            | Op::Allgatherv { send, recv, .. }
            | Op::ReduceScatter { send, recv, .. }
            | Op::Scan { send, recv, .. }
            | Op::Alltoall { send, recv } => [Some(send), Some(recv)],
        }
    }

    /// The buffers this rank's part of the operation reads or writes.
    pub fn buffers(&self) -> Vec<Arc<Buffer>> {
        self.slots().into_iter().flatten().cloned().collect()
    }

    /// This rank's buffers in slot order, with what the operation does with each
    /// (`crate::backend::ordered`); `rebind` takes replacements in the same order.
    pub(crate) fn parts(&self, c: &Communicator) -> Vec<(Arc<Buffer>, Role)> {
        use crate::view::Slotted;
        self.roles(c.rank()).into_iter().filter_map(|(b, r)| b.map(|b| (b.clone(), r))).collect()
    }

    /// The same operation on other buffers (`subs`: one per buffer, in slot order).
    pub(crate) fn rebind(&self, subs: &[Arc<Buffer>]) -> Op {
        let mut it = subs.iter().cloned();
        let mut next = |old: &Arc<Buffer>| it.next().unwrap_or_else(|| old.clone());
        match self {
            Op::Send { buf, dest, tag } => Op::Send { buf: next(buf), dest: *dest, tag: *tag },
            Op::Recv { buf, source, tag } => Op::Recv { buf: next(buf), source: *source, tag: *tag },
            Op::Isend { buf, dest, tag } => Op::Isend { buf: next(buf), dest: *dest, tag: *tag },
            Op::Irecv { buf, source, tag, upto } => Op::Irecv { buf: next(buf), source: *source, tag: *tag, upto: *upto },
            Op::Sendrecv { send, dest, sendtag, recv, source, recvtag } => {
                let send = next(send);
                Op::Sendrecv { send, dest: *dest, sendtag: *sendtag, recv: next(recv), source: *source, recvtag: *recvtag }
            }
            Op::Barrier => Op::Barrier,
            Op::Bcast { buf, root } => Op::Bcast { buf: next(buf), root: *root },
            Op::Reduce { send, recv, op, root } => {
                let send = next(send);
                Op::Reduce { send, recv: recv.as_ref().map(&mut next), op: *op, root: *root }
            }
            Op::Allreduce { send, recv, op } => {
                let send = next(send);
                Op::Allreduce { send, recv: next(recv), op: *op }
            }
            Op::Allgather { send, recv } => {
                let send = next(send);
                Op::Allgather { send, recv: next(recv) }
            }
            Op::Allgatherv { send, recv, counts } => {
                let send = next(send);
                Op::Allgatherv { send, recv: next(recv), counts: counts.clone() }
            }
            Op::ReduceScatter { send, recv, op } => {
                let send = next(send);
                Op::ReduceScatter { send, recv: next(recv), op: *op }
            }
            Op::Scan { send, recv, op, exclusive } => {
                let send = next(send);
                Op::Scan { send, recv: next(recv), op: *op, exclusive: *exclusive }
            }
            Op::Alltoall { send, recv } => {
                let send = next(send);
                Op::Alltoall { send, recv: next(recv) }
            }
            Op::Gather { send, recv, root } => {
                let send = next(send);
                Op::Gather { send, recv: recv.as_ref().map(&mut next), root: *root }
            }
            Op::Scatter { send, recv, root } => {
                let send = send.as_ref().map(&mut next);
                Op::Scatter { send, recv: next(recv), root: *root }
            }
            Op::Alltoallv { send, sendl, recv, recvl } => {
                let send = next(send);
                Op::Alltoallv { send, sendl: sendl.clone(), recv: next(recv), recvl: recvl.clone() }
            }
            Op::Gatherv { send, recv, recvl, root } => {
                let send = next(send);
                Op::Gatherv { send, recv: recv.as_ref().map(&mut next), recvl: recvl.clone(), root: *root }
            }
            Op::Scatterv { send, sendl, recv, root } => {
                let send = send.as_ref().map(&mut next);
                Op::Scatterv { send, sendl: sendl.clone(), recv: next(recv), root: *root }
            }
            Op::ReduceScatterv { send, recv, counts, op } => {
                let send = next(send);
                Op::ReduceScatterv { send, recv: next(recv), counts: counts.clone(), op: *op }
            }
        }
    }

    /// Whether the operation is point-to-point.
    pub fn is_p2p(&self) -> bool {
        matches!(self, Op::Send { .. } | Op::Recv { .. } | Op::Isend { .. } | Op::Irecv { .. } | Op::Sendrecv { .. })
    }

    /// The buffers this rank's part of the operation reads or writes while it runs, and whether
    /// it writes each (`crate::view::Slotted::roles`); none of a send to or receive from
    /// GPUWIRE_PROC_NULL, which touches nothing. What a group compares across its operations.
    pub fn touched(&self, rank: i32) -> [Option<(&Arc<Buffer>, bool)>; 2] {
        use crate::view::Slotted;
        let idle = |r: i32| crate::ops::peer(r) == crate::types::PROC_NULL;
        match self {
            // The point-to-point forms without the table (a group's per-operation cost). A view
            // that a receive from PROC_NULL keeps by copying it out and back (gpuwire_sendrecv's,
            // gpuwire_irecv_status's: `roles`) is written.
            Op::Send { buf, dest, .. } | Op::Isend { buf, dest, .. } => [(!idle(*dest)).then_some((buf, false)), None],
            Op::Irecv { buf, source, upto: true, .. } => [(!idle(*source) || buf.shape().is_some()).then_some((buf, true)), None],
            Op::Recv { buf, source, .. } | Op::Irecv { buf, source, .. } => [(!idle(*source)).then_some((buf, true)), None],
            Op::Sendrecv { send, dest, recv, source, .. } => [(!idle(*dest)).then_some((send, false)), (!idle(*source) || recv.shape().is_some()).then_some((recv, true))],
            _ => {
                let [(a, ra), (b, rb)] = self.roles(rank);
                [(a, ra), (b, rb)].map(|(x, role)| x.filter(|_| role != Role::Unused).map(|x| (x, role != Role::In)))
            }
        }
    }

    /// Whether any of this rank's significant buffers is device (or managed) memory (a
    /// non-root's receive buffer of reduce and gather, send buffer of scatter, is not).
    pub fn on_device(&self, c: &Communicator) -> bool {
        let [a, b] = self.slots();
        let (a, b) = match self {
            Op::Reduce { root, .. } | Op::Gather { root, .. } | Op::Gatherv { root, .. } if c.rank() != *root => (a, None),
            Op::Scatter { root, .. } | Op::Scatterv { root, .. } if c.rank() != *root => (None, b),
            _ => (a, b),
        };
        a.is_some_and(|x| !x.is_host()) || b.is_some_and(|x| !x.is_host())
    }

    /// This rank's own validation of the arguments (no communication): what the call returns at
    /// once. The operation validates again when it runs (and agrees in checking mode).
    pub fn check(&self, c: &Communicator) -> Result<()> {
        let p2p = |what: &str, role: &str, r: i32, tag: i32| {
            c.check_rank(what, role, r, true)?;
            c.check_tag(what, tag)
        };
        if crate::view::has_views(self) {
            crate::view::check(self, c.rank())?;
        }
        match self {
            Op::Send { dest, tag, .. } => p2p("send", "destination", *dest, *tag),
            Op::Isend { dest, tag, .. } => p2p("isend", "destination", *dest, *tag),
            Op::Recv { buf, source, tag } => c.check_source_tag("recv", *source, *tag).and_then(|()| c.check_wildcard_path("recv", buf, *source, *tag)),
            Op::Irecv { buf, source, tag, .. } => c.check_source_tag("irecv", *source, *tag).and_then(|()| c.check_wildcard_path("irecv", buf, *source, *tag)),
            Op::Sendrecv { send, dest, sendtag, recv, source, recvtag } => {
                p2p("sendrecv", "destination", *dest, *sendtag)?;
                c.check_source_tag("sendrecv", *source, *recvtag)?;
                c.check_wildcard_path("sendrecv", recv, *source, *recvtag)?;
                if send.overlaps(recv) {
                    return Err(Error::InvalidArgument("sendrecv: the send and receive buffers overlap".into()));
                }
                Ok(())
            }
            Op::Barrier => Ok(()),
            Op::Bcast { buf, root } => c.plan_bcast(buf, *root).1.map(|_| ()),
            Op::Reduce { send, recv, op, root } => c.plan_reduce(send, recv.as_deref(), *op, *root).1.map(|_| ()),
            Op::Allreduce { send, recv, op } => c.plan_allreduce(send, recv, *op).1.map(|_| ()),
            Op::Allgather { send, recv } => c.plan_allgather(send, recv).1.map(|_| ()),
            Op::Allgatherv { send, recv, counts } => c.plan_allgatherv(send, recv, counts.as_deref()),
            Op::ReduceScatter { send, recv, op } => c.plan_reduce_scatter(send, recv, *op).1.map(|_| ()),
            Op::Scan { send, recv, op, exclusive } => c.plan_scan(send, recv, *op, *exclusive).1.map(|_| ()),
            Op::Alltoall { send, recv } => c.plan_alltoall(send, recv).1.map(|_| ()),
            Op::Gather { send, recv, root } => c.plan_gather(send, recv.as_deref(), *root).1.map(|_| ()),
            Op::Scatter { send, recv, root } => c.plan_scatter(send.as_deref(), recv, *root).1.map(|_| ()),
            Op::Alltoallv { send, sendl, recv, recvl } => c.plan_alltoallv(send, sendl, recv, recvl).1.map(|_| ()),
            Op::Gatherv { send, recv, recvl, root } => c.plan_gatherv(send, recv.as_deref(), recvl, *root).1.map(|_| ()),
            Op::Scatterv { send, sendl, recv, root } => c.plan_scatterv(send.as_deref(), sendl, recv, *root).1.map(|_| ()),
            Op::ReduceScatterv { send, recv, counts, op } => c.plan_reduce_scatterv(send, recv, counts.as_deref(), *op).1.map(|_| ()),
        }
    }

    /// The validation at the call of an operation that runs later (queued, or in a group): this
    /// rank's argument errors are returned, except a collective's in checking mode, which still
    /// runs so that every rank learns of the error in its agreement (none is left waiting).
    pub fn check_at_call(&self, c: &Communicator) -> Result<()> {
        match self.check(c) {
            Err(e) if !c.config().check || self.is_p2p() => Err(e),
            _ => Ok(()),
        }
    }

    /// Runs the operation to completion on this thread (the blocking form), on `stream`. A
    /// nonblocking point-to-point operation is started and then completed. Strided and subarray
    /// views are packed into scratch first and unpacked after (`crate::view`).
    pub fn run(&self, c: &Arc<Communicator>, stream: Stream) -> Result<()> {
        if !crate::view::has_views(self) {
            return self.run_contiguous(c, stream);
        }
        let p = crate::view::pack(self, c, stream).map_err(|e| self.failed_views(c, e))?;
        p.op.run_contiguous(c, stream)?;
        p.unpack(stream)?;
        if p.unpacks_on_device() && !self.nccl_native(c) {
            // The MPI paths return when the data is in place: the unpack too.
            let _ctx = CtxGuard::enter(c.device())?;
            crate::device::sync(stream)?;
        }
        Ok(())
    }

    /// A collective's view error in checking mode reaches the other ranks through the agreement
    /// (none of them is left waiting); otherwise it is returned as it is.
    fn failed_views(&self, c: &Communicator, e: Error) -> Error {
        if c.config().check && !self.is_p2p() { c.fail_collective(self.name(), e) } else { e }
    }

    fn run_contiguous(&self, c: &Arc<Communicator>, stream: Stream) -> Result<()> {
        match self {
            Op::Send { buf, dest, tag } => c.send(buf, *dest, *tag, stream),
            Op::Recv { buf, source, tag } => c.recv(buf, *source, *tag, stream),
            Op::Isend { buf, dest, tag } => c.isend(buf.clone(), *dest, *tag, stream)?.wait(),
            Op::Irecv { buf, source, tag, upto } => c.irecv(buf.clone(), *source, *tag, *upto, stream)?.wait(),
            Op::Sendrecv { send, dest, sendtag, recv, source, recvtag } => c.sendrecv(send, *dest, *sendtag, recv, *source, *recvtag, stream),
            Op::Barrier => c.barrier(stream),
            Op::Bcast { buf, root } => c.bcast(buf, *root, stream),
            Op::Reduce { send, recv, op, root } => c.reduce(send, recv.as_deref(), *op, *root, stream),
            Op::Allreduce { send, recv, op } => c.allreduce(send, recv, *op, stream),
            Op::Allgather { send, recv } => c.allgather(send, recv, stream),
            Op::Allgatherv { send, recv, counts } => c.allgatherv(send, recv, counts.as_deref(), stream),
            Op::ReduceScatter { send, recv, op } => c.reduce_scatter(send, recv, *op, stream),
            Op::Scan { send, recv, op, exclusive } => c.scan(send, recv, *op, *exclusive, stream),
            Op::Alltoall { send, recv } => c.alltoall(send, recv, stream),
            Op::Gather { send, recv, root } => c.gather(send, recv.as_deref(), *root, stream),
            Op::Scatter { send, recv, root } => c.scatter(send.as_deref(), recv, *root, stream),
            Op::Alltoallv { send, sendl, recv, recvl } => c.alltoallv(send, sendl, recv, recvl, stream),
            Op::Gatherv { send, recv, recvl, root } => c.gatherv(send, recv.as_deref(), recvl, *root, stream),
            Op::Scatterv { send, sendl, recv, root } => c.scatterv(send.as_deref(), sendl, recv, *root, stream),
            Op::ReduceScatterv { send, recv, counts, op } => c.reduce_scatterv(send, recv, counts.as_deref(), *op, stream),
        }
    }

    /// Starts a nonblocking point-to-point operation (isend/irecv) now and returns its request
    /// (of a view: on scratch, unpacked when the request completes), which takes the buffers.
    fn start(self, c: &Arc<Communicator>, stream: Stream) -> Result<Request> {
        if !crate::view::has_views(&self) {
            return self.start_contiguous(c, stream);
        }
        let p = crate::view::pack(&self, c, stream)?;
        let inner = p.op.clone().start_contiguous(c, stream)?;
        let pending = crate::view::Unpacking { inner: Some(inner), packed: Some(p), stream, matched: None };
        Ok(Request::new(Box::new(pending), c.clone(), self.buffers()))
    }

    fn start_contiguous(self, c: &Arc<Communicator>, stream: Stream) -> Result<Request> {
        match self {
            Op::Isend { buf, dest, tag } | Op::Send { buf, dest, tag } => c.isend(buf, dest, tag, stream),
            Op::Irecv { buf, source, tag, upto } => c.irecv(buf, source, tag, upto, stream),
            Op::Recv { buf, source, tag } => c.irecv(buf, source, tag, false, stream),
            other => Err(Error::Internal(format!("{} is not a point-to-point start", other.name()))),
        }
    }

    /// A nonblocking receive's status as far as its arguments tell (its source and tag, the
    /// whole buffer; a GPUWIRE_PROC_NULL receive's empty one): what a path that reports none
    /// (NCCL) gives; `None` for other operations.
    pub(crate) fn known_status(&self) -> Option<crate::request::Status> {
        let Op::Irecv { buf, source, tag, .. } = self else { return None };
        if *source == crate::types::PROC_NULL || *source == crate::mpisys::proc_null() {
            return Some(crate::request::Status { source: crate::types::PROC_NULL, tag: crate::types::ANY_TAG, count: 0, cancelled: false });
        }
        Some(crate::request::Status { source: *source, tag: *tag, count: buf.count() as i64, cancelled: false })
    }

    /// Whether this operation, with device memory, goes to NCCL (which orders it on its stream
    /// itself) rather than to an MPI or IPC path. What NCCL has not (point-to-point under
    /// GPUWIRE_P2P_MATCHING=mpi; scan/exscan; the reductions
    /// `nccl::reduces` refuses: complex PROD, bitwise and logical ops, MINLOC/MAXLOC) is not: it
    /// takes the communicator's stream-ordered MPI path, and in a group it runs after the NCCL
    /// group, not inside it (where the NCCL operations before it would not have run yet).
    pub(crate) fn nccl_native(&self, c: &Communicator) -> bool {
        let served = match self {
            Op::Scan { .. } => false,
            // GPUWIRE_P2P_MATCHING=mpi: point-to-point takes the staged MPI path (MPI's matching).
            _ if self.is_p2p() && crate::backend::mpi_matched_p2p(c) => false,
            Op::Reduce { send, op, .. } | Op::Allreduce { send, op, .. } | Op::ReduceScatter { send, op, .. } => crate::backend::nccl::reduces(send.dtype(), *op),
            _ => true,
        };
        served && nccl_takes(c, self.slots())
    }
}

/// Whether an operation that NCCL serves (`Op::nccl_native`'s first test) on `bufs` goes to
/// NCCL on `c`: its backend is NCCL and every buffer is device memory. `Op::nccl_native` and the
/// lean path (`crate::lean`) both call it.
#[inline]
pub(crate) fn nccl_takes(c: &Communicator, bufs: [Option<&Arc<Buffer>>; 2]) -> bool {
    c.backend() == crate::types::BackendKind::GPUWIRE_BACKEND_NCCL && bufs.into_iter().flatten().all(|b| !b.is_host())
}

/// Whether a receive's source is GPUWIRE_PROC_NULL (or MPI_PROC_NULL): it receives nothing.
fn from_nobody(source: i32) -> bool {
    crate::ops::peer(source) == crate::types::PROC_NULL
}

/// The operation as the views see it (`crate::view`): its slots and this rank's role in each,
/// the one table of roles (the stream-ordered staging reads it too, through `parts`).
impl crate::view::Slotted for Op {
    fn what(&self) -> &'static str {
        self.name()
    }
    fn slots(&self) -> [Option<&Arc<Buffer>>; 2] {
        Op::slots(self)
    }
    fn roles(&self, rank: i32) -> [(Option<&Arc<Buffer>>, Role); 2] {
        let op = self;
        use Role::*;
        let root_role = |root: i32, at_root: Role| if rank == root { at_root } else { Unused };
        match op {
            // A send to PROC_NULL reads nothing (as MPI): its view is not packed.
            Op::Send { buf, dest, .. } | Op::Isend { buf, dest, .. } if from_nobody(*dest) => [(Some(buf), Unused), (None, Unused)],
            Op::Send { buf, .. } | Op::Isend { buf, .. } => [(Some(buf), In), (None, Unused)],
            // A receive of up to its count (irecv_status): what a shorter message leaves is kept
            // (packed or staged in and out). One from PROC_NULL receives nothing and writes
            // nothing (as MPI): not packed, nor unpacked (which rewrote the view's elements with
            // their values at the start, over what another operation of its group wrote there).
            Op::Irecv { buf, upto: true, .. } => [(Some(buf), InOut), (None, Unused)],
            Op::Recv { buf, source, .. } | Op::Irecv { buf, source, .. } if from_nobody(*source) => [(Some(buf), Unused), (None, Unused)],
            Op::Recv { buf, .. } | Op::Irecv { buf, .. } => [(Some(buf), Out), (None, Unused)],
            Op::Bcast { buf, root } => [(Some(buf), if rank == *root { In } else { Out }), (None, Unused)],
            Op::Sendrecv { send, dest, recv, source, .. } => [(Some(send), if from_nobody(*dest) { Unused } else { In }), (Some(recv), if from_nobody(*source) { InOut } else { Out })],
            Op::Barrier => [(None, Unused), (None, Unused)],
            Op::Reduce { send, recv, root, .. } | Op::Gather { send, recv, root } => [(Some(send), In), (recv.as_ref(), root_role(*root, Out))],
            Op::Scatter { send, recv, root } | Op::Scatterv { send, recv, root, .. } => [(send.as_ref(), root_role(*root, In)), (Some(recv), Out)],
            // What lies between receive blocks, and exscan's rank 0's buffer, stay as they were.
            Op::Gatherv { send, recv, root, .. } => [(Some(send), In), (recv.as_ref(), root_role(*root, InOut))],
            Op::Alltoallv { send, recv, .. } => [(Some(send), In), (Some(recv), InOut)],
            Op::Scan { send, recv, exclusive, .. } => [(Some(send), In), (Some(recv), if *exclusive && rank == 0 { InOut } else { Out })],
            Op::ReduceScatterv { send, recv, .. } => [(Some(send), In), (Some(recv), Out)],
            Op::Allreduce { send, recv, .. }
            | Op::Allgather { send, recv }
            | Op::Allgatherv { send, recv, .. }
            | Op::ReduceScatter { send, recv, .. }
            | Op::Alltoall { send, recv } => [(Some(send), In), (Some(recv), Out)],
        }
    }

    fn received_somewhere(&self) -> [bool; 2] {
        [matches!(self, Op::Bcast { .. }), false]
    }

    fn replace(&self, a: Option<Arc<Buffer>>, b: Option<Arc<Buffer>>) -> Op {
        let mut op = self.clone();
        let pick = |slot: &mut Arc<Buffer>, with: &Option<Arc<Buffer>>| {
            if let Some(w) = with {
                *slot = w.clone();
            }
        };
        let pick_opt = |slot: &mut Option<Arc<Buffer>>, with: &Option<Arc<Buffer>>| {
            if let (Some(s), Some(w)) = (slot.as_mut(), with) {
                *s = w.clone();
            }
        };
        match &mut op {
            Op::Send { buf, .. } | Op::Isend { buf, .. } | Op::Recv { buf, .. } | Op::Irecv { buf, .. } | Op::Bcast { buf, .. } => pick(buf, &a),
            Op::Sendrecv { send, recv, .. } => {
                pick(send, &a);
                pick(recv, &b);
            }
            Op::Barrier => {}
            Op::Reduce { send, recv, .. } | Op::Gather { send, recv, .. } => {
                pick(send, &a);
                pick_opt(recv, &b);
            }
            Op::Scatter { send, recv, .. } | Op::Scatterv { send, recv, .. } => {
                pick_opt(send, &a);
                pick(recv, &b);
            }
            Op::Gatherv { send, recv, .. } => {
                pick(send, &a);
                pick_opt(recv, &b);
            }
            Op::Alltoallv { send, recv, .. } | Op::Scan { send, recv, .. } | Op::ReduceScatterv { send, recv, .. } => {
                pick(send, &a);
                pick(recv, &b);
            }
            Op::Allreduce { send, recv, .. }
            | Op::Allgather { send, recv }
            | Op::Allgatherv { send, recv, .. }
            | Op::ReduceScatter { send, recv, .. }
            | Op::Alltoall { send, recv } => {
                pick(send, &a);
                pick(recv, &b);
            }
        }
        op
    }
}

/// Whether `GPUWIRE_TRACE=1`: one line per exported operation on stderr ([`trace_line`]).
#[inline]
pub fn tracing() -> bool {
    crate::config::env_flag_once(&crate::hot::PROCESS.tracing, "GPUWIRE_TRACE")
}

/// A blocking call that failed by a timeout or a broken communicator may have left an MPI
/// request behind (abandoned at its deadline): MPI may still write its buffers when a late peer
/// arrives (in MPI_Finalize at the latest), so they are never freed.
fn keep_if_abandoned(op: &Op, e: &Error) {
    keep_slots_if_abandoned(op.slots(), e);
}

/// `keep_if_abandoned` of an operation's buffers (`Op::slots`) held apart from an `Op`.
pub(crate) fn keep_slots_if_abandoned(slots: [Option<&Arc<Buffer>>; 2], e: &Error) {
    if e.abandons() {
        for b in slots.into_iter().flatten() {
            std::mem::forget(b.clone());
        }
    }
}

/// Whether nothing queued on `c`'s engine must reach MPI before `op` (on device memory or
/// not): a point-to-point operation on host memory waits only for queued point-to-point
/// operations (`Engine::no_p2p`: MPI matches it apart from collectives), every other operation
/// for everything queued.
fn nothing_before(c: &Communicator, op: &Op, device: bool) -> bool {
    if !device && op.is_p2p() { c.engine().no_p2p() } else { c.engine().idle() }
}

/// Where `issue` sends `op` and why, in words (for `GPUWIRE_TRACE`); `grouped` inside a group.
pub fn route(c: &Communicator, op: &Op, nonblocking: bool, grouped: bool) -> String {
    let device = op.on_device(c);
    // Host memory takes plain MPI unless the backend does the operation on host memory itself
    // (HIER's collectives, IPC's): `backend::decide`, as the call itself is routed.
    let backend = if device || crate::backend::native_on_host(c, op.operation()) { c.backend().name() } else { "HOST" };
    let memory = if device { "device memory" } else { "host memory" };
    let how = if grouped {
        "recorded in the thread's group, started at gpuwire_group_end"
    } else if nonblocking && device && op.nccl_native(c) {
        "enqueued on the stream by NCCL; the request completes when the stream passes it"
    } else if nonblocking && op.is_p2p() {
        if nothing_before(c, op, device) { "started now" } else { "queued behind earlier operations of the communicator (progress engine)" }
    } else if nonblocking && device && c.device() >= 0 && ordered::applies(c, true) && !ordered::returns_early(c) {
        "stream-ordered, MPI on the calling thread (GPUWIRE_HOST_SYNC=1, checking mode, or below MPI_THREAD_MULTIPLE); the request completes when the outputs are in place"
    } else if nonblocking {
        if engine::available() { "queued on the communicator's progress engine" } else { "run now (below MPI_THREAD_MULTIPLE)" }
    } else if device && op.nccl_native(c) {
        "enqueued on the stream by NCCL"
    } else if device && ordered::applies(c, nonblocking) {
        if ordered::returns_early(c) {
            "stream-ordered: device work enqueued on the stream, MPI on the progress engine"
        } else {
            "stream-ordered, MPI on the calling thread, which then waits for the stream (GPUWIRE_HOST_SYNC=1, checking mode, or below MPI_THREAD_MULTIPLE)"
        }
    } else if !nothing_before(c, op, device) {
        "queued behind earlier operations of the communicator, waited for"
    } else if device && crate::backend::ipc::p2p_stream_ordered(c) {
        "run now on the calling thread, stream-ordered by IPC where it can be (collectives, point-to-point of more than 1 KiB): enqueued on the stream around the shared segment's words"
    } else {
        "run now on the calling thread"
    };
    format!("{backend} ({memory}): {how}")
}

/// The `GPUWIRE_TRACE` line of one call of `op`: operation, bytes, backend, why, time, outcome;
/// `name` replaces the operation's name (a blocking receive made of a nonblocking one).
pub fn trace_line(c: &Communicator, op: &Op, name: Option<&str>, route: &str, nonblocking: bool, took: std::time::Duration, r: std::result::Result<(), &Error>) {
    let bytes = op.buffers().iter().map(|b| b.bytes()).max().unwrap_or(0);
    let name = match name {
        Some(n) => n.to_string(),
        None if nonblocking && !op.is_p2p() => format!("i{}", op.name()),
        None => op.name().to_string(),
    };
    trace_call(c, &name, bytes, route, took, r);
}

/// The `GPUWIRE_TRACE` line of one call (`trace_line`, and the probes, which move no data).
pub fn trace_call(c: &Communicator, name: &str, bytes: usize, route: &str, took: std::time::Duration, r: std::result::Result<(), &Error>) {
    let outcome = match r {
        Ok(()) => "ok".to_string(),
        Err(e) => format!("error: {e}"),
    };
    let line = format!(
        "gpuwire-trace[{}] rank {}/{}: {name} {bytes} B; {route}; {:.1} us; {outcome}\n",
        std::process::id(),
        c.rank(),
        c.size(),
        took.as_secs_f64() * 1e6
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
}

/// Issues `op` on `c` now (see the module's comment): `Ok(None)` for a blocking form, the
/// request of a nonblocking one (`nonblocking`). Outside a group; `crate::group::submit` is the
/// entry that also records operations in groups.
pub fn issue(c: &Arc<Communicator>, op: Op, stream: Stream, nonblocking: bool) -> Result<Option<Request>> {
    engine::free_dropped();
    if let Some(e) = c.engine().take_async_error() {
        return Err(engine::earlier_failure(e, NOTHING));
    }
    // The communicator may break under this call by that failure (it waited behind it).
    issue_now(c, op, stream, nonblocking).map_err(|e| issued_error(c, e))
}

/// What a call that fails before doing anything says of itself when it reports an earlier
/// asynchronous failure instead.
const NOTHING: &str = "nothing was done by this call";

/// The error `issue` returns for `e`, an error of the issued operation: the communicator's
/// asynchronous failure instead where that failure broke it (`Engine::or_earlier_failure`).
#[inline]
pub(crate) fn issued_error(c: &Communicator, e: Error) -> Error {
    c.engine().or_earlier_failure(e, NOTHING)
}

fn issue_now(c: &Arc<Communicator>, op: Op, stream: Stream, nonblocking: bool) -> Result<Option<Request>> {
    let eng = c.engine();
    if !op.is_p2p() {
        // Another thread inside a collective on `c`: refused now, not after returning.
        c.collective_elsewhere(|| op.name())?;
    }
    let device = op.on_device(c);
    // On device memory: whether NCCL does it (it orders it on its stream itself).
    let native = device && op.nccl_native(c);
    if device && c.device() >= 0 && !native && ordered::applies(c, nonblocking) {
        return issue_ordered(c, op, stream, nonblocking);
    }
    let host_p2p = !device && op.is_p2p();
    let clear = nothing_before(c, &op, device);
    // The common case first, as in gpuwire 0.1: a blocking call that runs now on this thread
    // (validation, agreement and errors are the operation's own).
    if !nonblocking && clear {
        if device && c.device() >= 0 && !native {
            refuse_capture(c, stream)?;
        }
        op.run(c, stream).inspect_err(|e| keep_if_abandoned(&op, e))?;
        if device {
            host_sync_after(c, stream)?;
        }
        return Ok(None);
    }
    if nonblocking && host_p2p && clear && !crate::view::has_views(&op) {
        // isend/irecv on host memory, started now: `Communicator::isend` / `irecv` validate
        // (as `check_at_call` would, in the same order) before anything is posted.
        return op.start(c, stream).map(Some);
    }
    c.ensure_usable()?;
    op.check_at_call(c)?;
    if device && c.device() >= 0 && !native {
        refuse_capture(c, stream)?;
    }
    let bufs = op.buffers();
    if nonblocking && op.is_p2p() {
        if clear {
            return op.start(c, stream).map(Some);
        }
        // Queued behind earlier operations: the engine starts it in its turn, and the request
        // then completes it (the engine does not wait for the message).
        let slot: Arc<Mutex<Option<Request>>> = Arc::new(Mutex::new(None));
        let (c2, op2, s2) = (c.clone(), op.clone(), slot.clone());
        let done = eng.submit(
            Box::new(move || {
                let r = op2.start(&c2, stream)?;
                *s2.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
                Ok(())
            }),
            false,
            true,
        );
        return Ok(Some(Request::new(Box::new(Queued { done, then: Some(slot), comm: c.clone() }), c.clone(), bufs)));
    }
    if nonblocking {
        if native {
            eng.drain()?;
            return Ok(Some(start_nccl(c, op, stream, bufs)?));
        }
        // The engine runs the blocking form (on a device buffer: it waits for `stream` first).
        let (c2, op2) = (c.clone(), op.clone());
        let done = eng.submit(Box::new(move || op2.run(&c2, stream)), false, false);
        return Ok(Some(Request::new(Box::new(Queued { done, then: None, comm: c.clone() }), c.clone(), bufs)));
    }
    // Behind earlier operations of this communicator: in its turn, and waited for.
    let (c2, op2) = (c.clone(), op.clone());
    let p2p = op.is_p2p();
    let done = eng.submit(Box::new(move || op2.run(&c2, stream)), false, p2p);
    done.wait_until(None)
        .unwrap_or_else(|| Err(Error::Internal("engine wait without deadline ended".into())))
        .inspect_err(|e| keep_if_abandoned(&op, e))?;
    if device {
        host_sync_after(c, stream)?;
    }
    Ok(None)
}

/// After a blocking operation on device memory has run (`issue_now`, the lean path:
/// `crate::lean`): under `GPUWIRE_HOST_SYNC=1` (`engine::host_sync`) the host also waits for
/// `stream`, in `c`'s device's context.
#[inline]
pub(crate) fn host_sync_after(c: &Communicator, stream: Stream) -> Result<()> {
    if engine::host_sync() {
        let _ctx = CtxGuard::enter(c.device())?;
        crate::device::sync(stream)?;
    }
    Ok(())
}

/// A device operation of an MPI path, stream-ordered (`crate::backend::ordered`): validated at
/// the call (in checking mode by the agreement, on the calling thread), then its device work
/// enqueued on `stream` and its MPI calls made, on staging, by the host side.
///
/// Strided and subarray views are packed into device scratch on `stream` first (kernels at the
/// call, `crate::view`); the operation then runs stream-ordered on the scratch, and the unpack
/// kernels follow on `stream` (a nonblocking form's when its request completes).
fn issue_ordered(c: &Arc<Communicator>, op: Op, stream: Stream, nonblocking: bool) -> Result<Option<Request>> {
    if !crate::view::has_views(&op) {
        return issue_ordered_contiguous(c, op, stream, nonblocking);
    }
    c.ensure_usable()?;
    let p = {
        let _ctx = CtxGuard::enter(c.device())?;
        crate::view::pack(&op, c, stream).map_err(|e| op.failed_views(c, e))?
    };
    let bufs = op.buffers();
    match issue_ordered_contiguous(c, p.op.clone(), stream, nonblocking)? {
        Some(inner) => {
            let pending = crate::view::Unpacking { inner: Some(inner), packed: Some(p), stream, matched: None };
            Ok(Some(Request::new(Box::new(pending), c.clone(), bufs)))
        }
        None => {
            let _ctx = CtxGuard::enter(c.device())?;
            if p.unpacks_on_host() {
                // A host view is unpacked by this thread, once the stream passed the operation.
                crate::device::sync(stream)?;
            }
            p.unpack(stream)?;
            if !ordered::returns_early(c) {
                crate::device::sync(stream)?;
            }
            Ok(None)
        }
    }
}

fn issue_ordered_contiguous(c: &Arc<Communicator>, op: Op, stream: Stream, nonblocking: bool) -> Result<Option<Request>> {
    c.ensure_usable()?;
    if !c.config().check {
        op.check(c)?;
    } else if let Err(e) = op.check(c) {
        // Checking mode agrees in the host side, on the staging, which need not show this rank's
        // refusal of its own buffers (a send buffer overlapping the receive buffer is staged
        // apart from it): the call on the caller's buffers agrees the refusal with the other
        // ranks' host sides instead, in call order, and returns it on every rank.
        c.engine().drain()?;
        return match op.run(c, stream) {
            Ok(()) => Err(e),
            Err(agreed) => Err(agreed),
        };
    }
    let inline = ordered::inline(c, nonblocking);
    if inline {
        // The host side runs on this thread: after everything queued, in call order.
        c.engine().drain()?;
    }
    if let (false, false, Op::Allreduce { send, recv, op: rop }) = (nonblocking, c.config().check, &op) {
        // A large one reduced on the stream, in two phases (the same MPI calls as the general
        // path below makes for it, which reduces on the CPU; checking mode takes that path, whose
        // call agrees with the other ranks first).
        use crate::backend::split;
        if if inline { split::blocking(c, send, recv, *rop, stream)? } else { split::issue(c, send, recv, *rop, stream)? } {
            return Ok(None);
        }
    }
    let bufs = op.buffers();
    let parts = op.parts(c);
    let c2 = c.clone();
    // A blocking send or receive whose host side runs on the engine is started there and
    // completed by the engine (`ordered::starts_blocking`), so that it does not hold up the
    // engine's later operations: another thread's send on the same communicator, which the peer
    // may need before it sends this receive's message.
    let started_blocking = !nonblocking && matches!(op, Op::Send { .. } | Op::Recv { .. }) && ordered::starts_blocking(c, &parts);
    // A blocking sendrecv too, as its two parts (it ran a blocking receive on the engine, which
    // held up the communicator's later host sides: two threads' sendrecvs called in opposite
    // orders on two ranks waited for each other for ever).
    let started_pair = !nonblocking && matches!(op, Op::Sendrecv { .. }) && ordered::starts_blocking(c, &parts);
    let side = if started_pair {
        HostSide::Start(Box::new(move |subs| {
            let Op::Sendrecv { send, dest, sendtag, recv, source, recvtag } = op.rebind(subs) else { unreachable!("a sendrecv") };
            StartedPair::start(&c2, Op::Isend { buf: send, dest, tag: sendtag }, Op::Recv { buf: recv, source, tag: recvtag })
        }))
    } else if (nonblocking && op.is_p2p()) || started_blocking {
        HostSide::Start(Box::new(move |subs| {
            let r = op.rebind(subs).start(&c2, Stream(0))?;
            Ok(Box::new(Started(r)) as Box<dyn Pending>)
        }))
    } else if let Op::Sendrecv { .. } = op {
        // Its two halves fail apart (as host::sendrecv's, an isend, the receive, the isend
        // completed): a refused send part leaves the receive part's message received, and its
        // output is delivered (`op.parts`: the send is part 0, the receive part 1). As one
        // operation, a send refused in checking mode lost the message its receive part had
        // taken (a helper's bug hunt, MPI_STAGED).
        HostSide::Parts(Box::new(move |subs| {
            let Op::Sendrecv { send, dest, sendtag, recv, source, recvtag } = op.rebind(subs) else { unreachable!("a sendrecv") };
            let sending = Op::Isend { buf: send, dest, tag: sendtag }.start(&c2, Stream(0));
            let received = Op::Recv { buf: recv, source, tag: recvtag }.run(&c2, Stream(0));
            let sent = sending.and_then(|r| r.wait());
            match (received, sent) {
                (Ok(()), Ok(())) => Ok(()),
                (Err(e), Ok(())) => Err((e, vec![1])),
                (Ok(()), Err(e)) => Err((e, vec![0])),
                (Err(e), Err(_)) => Err((e, vec![0, 1])),
            }
        }))
    } else {
        HostSide::Run(Box::new(move |subs| op.rebind(subs).run(&c2, Stream(0))))
    };
    let pending = ordered::issue(c, stream, parts, nonblocking, side)?;
    Ok(pending.map(|p| Request::new(p, c.clone(), bufs)))
}

/// The MPI and IPC paths wait for the caller's stream on the host, which a stream being
/// captured into a CUDA graph forbids (the capture would be invalidated): refused instead, with
/// an error that says so, before anything is done.
fn refuse_capture(c: &Communicator, stream: Stream) -> Result<()> {
    let _ctx = CtxGuard::enter(c.device())?;
    engine::refuse_capture(stream)
}

/// A nonblocking NCCL operation: enqueued now; its request completes when the stream has passed
/// it.
fn start_nccl(c: &Arc<Communicator>, op: Op, stream: Stream, bufs: Vec<Arc<Buffer>>) -> Result<Request> {
    op.run(c, stream)?;
    let _ctx = CtxGuard::enter(c.device())?;
    let ev = Event::new()?;
    ev.record(stream)?;
    let r = Request::new(Box::new(Passed { ev, device: c.device() }), c.clone(), bufs);
    // A receive's status: its (named) source and tag, the whole buffer (NCCL has no wildcards).
    Ok(match op.known_status() {
        Some(st) => r.with_status(st),
        None => r,
    })
}

/// The request of an operation queued on the engine: complete when the engine has run it (and,
/// for a queued isend/irecv, when the operation the engine started has completed).
struct Queued {
    done: Arc<Done>,
    then: Option<Arc<Mutex<Option<Request>>>>,
    comm: Arc<Communicator>,
}

impl Queued {
    fn started(&self) -> Option<Arc<Mutex<Option<Request>>>> {
        self.then.clone()
    }
}

impl Pending for Queued {
    fn status(&self) -> Option<crate::request::Status> {
        let slot = self.started()?;
        let r = slot.lock().unwrap_or_else(|p| p.into_inner());
        r.as_ref().map(|r| r.status())
    }
    fn ready_to_wait(&self) -> Result<()> {
        if self.done.peek().is_none() {
            if crate::backend::nccl::holds_turn(&self.comm) {
                return Err(Error::InvalidArgument(
                    "the request's operation is queued behind others on its NCCL communicator, on which this thread's open group has issued operations: it runs after the group's end (waiting for it inside the group would never return); wait after gpuwire_group_end".into(),
                ));
            }
        }
        Ok(())
    }
    fn ready_to_block(&self) -> Result<()> {
        if self.done.peek().is_none() {
            // A wait that would close a cycle of NCCL turns (`Engine::waiting`): refused here,
            // the request left as it was.
            drop(self.comm.engine().waiting()?);
        }
        Ok(())
    }
    fn wait(&mut self) -> Result<()> {
        self.ready_to_wait()?;
        // A wait for the engine, as its drain, listed (`ready_to_block` refused one that would
        // close a cycle of NCCL turns; one that forms only now is refused here, the request
        // then failed).
        let listed = if self.done.peek().is_none() { self.comm.engine().waiting()? } else { None };
        self.done.wait_until(None).unwrap_or_else(|| Err(Error::Internal("engine wait without deadline ended".into())))?;
        drop(listed);
        if let Some(slot) = self.started() {
            if let Some(r) = slot.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
                return r.wait();
            }
        }
        Ok(())
    }
    fn test(&mut self) -> Result<bool> {
        match self.done.peek() {
            None => Ok(false),
            Some(Err(e)) => Err(e),
            Some(Ok(())) => match self.started() {
                Some(slot) => match slot.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
                    Some(r) => r.test(),
                    None => Ok(true),
                },
                None => Ok(true),
            },
        }
    }
    fn test_settled(&mut self, until: std::time::Instant) -> Result<bool> {
        self.done.wait_until(Some(until));
        self.test()
    }
    /// The receive the engine has started, where it has (one still queued is not withdrawn).
    fn cancel(&mut self) -> bool {
        let Some(slot) = self.started() else { return false };
        let r = slot.lock().unwrap_or_else(|p| p.into_inner());
        r.as_ref().is_some_and(|r| r.cancel().unwrap_or(false))
    }
}

/// A started point-to-point operation's request, as the pending half of another request.
struct Started(Request);

impl Pending for Started {
    fn status(&self) -> Option<crate::request::Status> {
        Some(self.0.status())
    }
    fn cancel(&mut self) -> bool {
        self.0.cancel().unwrap_or(false)
    }
    fn wait(&mut self) -> Result<()> {
        self.0.wait()
    }
    fn test(&mut self) -> Result<bool> {
        self.0.test()
    }
    fn abandon(self: Box<Self>) -> bool {
        // Given up at once (the caller's wait failed: its timeout is used up).
        self.0.abandon()
    }
}

/// A blocking sendrecv's send and receive parts, started by its host side on the engine and
/// completed by the engine (`ordered::starts_blocking`), as a blocking send's or receive's. Its
/// parts fail apart, as `host::sendrecv`'s: a part that failed to start leaves the other going
/// (a receive whose message came is delivered); the outcome is the receive's failure, else the
/// send's.
struct StartedPair {
    send: Option<Request>,
    recv: Option<Request>,
    /// The parts' outcomes once known: [send, receive].
    outcome: [Option<Result<()>>; 2],
}

impl StartedPair {
    /// Starts `send` (an isend), then `recv` (a receive that takes exactly its buffer), on `c`.
    fn start(c: &Arc<Communicator>, send: Op, recv: Op) -> Result<Box<dyn Pending>> {
        let sending = send.start(c, Stream(0));
        let receiving = recv.start(c, Stream(0));
        let mut p = StartedPair { send: None, recv: None, outcome: [None, None] };
        match sending {
            Ok(r) => p.send = Some(r),
            Err(e) => p.outcome[0] = Some(Err(e)),
        }
        match receiving {
            Ok(r) => p.recv = Some(r),
            // Neither started: the call fails now, with the receive's error.
            Err(e) if p.send.is_none() => return Err(e),
            Err(e) => p.outcome[1] = Some(Err(e)),
        }
        Ok(Box::new(p))
    }

    fn result(&mut self) -> Result<()> {
        let [s, r] = std::mem::take(&mut self.outcome);
        r.unwrap_or(Ok(())).and(s.unwrap_or(Ok(())))
    }
}

impl Pending for StartedPair {
    fn wait(&mut self) -> Result<()> {
        if let Some(r) = self.recv.take() {
            self.outcome[1] = Some(r.wait());
        }
        if let Some(s) = self.send.take() {
            self.outcome[0] = Some(s.wait());
        }
        self.result()
    }
    fn test(&mut self) -> Result<bool> {
        for (part, slot) in [&mut self.send, &mut self.recv].into_iter().enumerate() {
            let Some(r) = slot.as_ref() else { continue };
            match r.test() {
                Ok(false) => {}
                done => {
                    self.outcome[part] = Some(done.map(|_| ()));
                    *slot = None;
                }
            }
        }
        if self.send.is_some() || self.recv.is_some() {
            return Ok(false);
        }
        self.result().map(|()| true)
    }
    fn failed_part(&self) -> Option<Error> {
        self.outcome.iter().rev().flatten().find_map(|o| o.as_ref().err().cloned())
    }
    fn abandon(self: Box<Self>) -> bool {
        // The send goes on (detached: its buffers kept until it completes, or given up on a
        // broken communicator); the receive is given up at once.
        let sent = self.send.is_none_or(|s| s.free().is_ok());
        let received = self.recv.is_none_or(|r| r.abandon());
        sent && received
    }
}

/// The request of a nonblocking NCCL collective: complete when its stream has passed it.
struct Passed {
    ev: Event,
    device: i32,
}

// SAFETY: a CUDA event handle, used with its context current.
unsafe impl Send for Passed {}

impl Pending for Passed {
    fn wait(&mut self) -> Result<()> {
        let _g = CtxGuard::enter(self.device)?;
        self.ev.wait_host()
    }
    fn test(&mut self) -> Result<bool> {
        let _g = CtxGuard::enter(self.device)?;
        self.ev.query()
    }
}
