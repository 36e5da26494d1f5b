//! The operations of a communicator: argument validation, the optional cross-rank agreement of
//! checking mode, then dispatch to a data path.
//!
//! Semantics are MPI's (MPI_Send, MPI_Allreduce, ...), on buffer handles: counts come from the
//! buffers, in elements. Validation happens before anything is sent, so a call that returns an
//! argument error has moved no data. With checking on (config `check` or GPUWIRE_CHECK=1),
//! every collective first agrees count, datatype, op and root across ranks with one small
//! MPI_Allreduce; a disagreement, or any rank's local argument error, returns an error on every
//! rank and nothing is done.

use std::sync::Arc;

use crate::backend::{self, Input, Operation, Path};
use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::device::Stream;
use crate::error::{Error, Result};
use crate::mpisys::{self, sys};
use crate::request::Request;
use crate::runtime;
use crate::types::{Dtype, ReduceOp};

/// What checking mode agrees across ranks; `None` for what does not apply.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sig {
    pub count: Option<usize>,
    pub dtype: Option<Dtype>,
    pub op: Option<ReduceOp>,
    pub root: Option<i32>,
    /// Whether this rank's buffers need the device path (ranks must agree: the host and device
    /// paths use different MPI message patterns).
    pub device: Option<bool>,
}

impl Sig {
    fn with_bufs(mut self, bufs: &[Option<&Buffer>]) -> Sig {
        self.device = Some(bufs.iter().flatten().any(|b| !b.is_host()));
        self
    }
}

/// The collectives checking mode tells apart (other names are hashed).
const COLLECTIVES: [&str; 12] =
    ["barrier", "bcast", "reduce", "allreduce", "allgather", "allgatherv", "reduce_scatter", "alltoall", "gather", "scatter", "scan", "exscan"];

/// A stable number for a collective's name (FNV-1a), the same on every rank.
fn collective_id(what: &str) -> i64 {
    let mut h: u32 = 0x811c9dc5;
    for b in what.bytes() {
        h = (h ^ b as u32).wrapping_mul(0x01000193);
    }
    h as i64
}

fn collective_name(id: i64) -> String {
    COLLECTIVES
        .iter()
        .find(|n| collective_id(n) == id)
        .map(|n| n.to_string())
        .unwrap_or_else(|| "another operation".into())
}

/// `GPUWIRE_PROC_NULL`: a send or receive to/from it does nothing (as MPI_PROC_NULL).
pub(crate) use crate::types::PROC_NULL;

/// Whether `r` names no rank: GPUWIRE_PROC_NULL, or the MPI_PROC_NULL of the MPI gpuwire was
/// built with.
fn is_proc_null(r: i32) -> bool {
    r == PROC_NULL || r == mpisys::proc_null()
}

/// A validated peer rank with MPI_PROC_NULL as GPUWIRE_PROC_NULL (what the paths compare with).
fn peer(r: i32) -> i32 {
    if is_proc_null(r) { PROC_NULL } else { r }
}

fn same_dtype(what: &str, a: &Buffer, b: &Buffer) -> Result<Dtype> {
    if a.dtype() != b.dtype() {
        return Err(Error::DtypeMismatch(format!(
            "{what}: the send buffer holds {} but the receive buffer {}",
            a.dtype().name(),
            b.dtype().name()
        )));
    }
    Ok(a.dtype())
}

/// `send` as a collective input: `InPlace` when it is exactly `recv`'s block starting at element
/// `block`; an error when it overlaps `recv` otherwise (MPI forbids aliased buffers).
fn input<'a>(what: &str, send: &'a Buffer, recv: &Buffer, block: usize) -> Result<Input<'a>> {
    if send.count() > 0 && send.ptr() == recv.ptr() + block * recv.dtype().size() && send.dtype() == recv.dtype() {
        return Ok(Input::InPlace);
    }
    if send.overlaps(recv) {
        return Err(Error::InvalidArgument(format!(
            "{what}: the send and receive buffers overlap; use disjoint buffers, or for in-place pass exactly {}",
            if block == 0 && send.count() == recv.count() { "the same buffer as send and receive".to_string() } else { "a view of this rank's own block of the receive buffer as the send buffer".to_string() }
        )));
    }
    Ok(Input::Buf(send))
}

fn count_mismatch(what: &str, detail: String) -> Error {
    Error::CountMismatch(format!("{what}: {detail}"))
}

impl Communicator {
    pub(crate) fn check_rank(&self, what: &str, role: &str, r: i32, allow_proc_null: bool) -> Result<()> {
        if (allow_proc_null && is_proc_null(r)) || (0..self.size()).contains(&r) {
            return Ok(());
        }
        if allow_proc_null && r < 0 {
            // MPI_ANY_SOURCE is -1 in Open MPI and -2 in MPICH: any other negative rank.
            return Err(Error::InvalidArgument(format!(
                "{what}: {role} {r} is a wildcard or special rank (MPI_ANY_SOURCE?); wildcards are not supported yet: pass a rank 0..{}, or GPUWIRE_PROC_NULL / MPI_PROC_NULL ({}) for none",
                self.size() - 1,
                mpisys::proc_null()
            )));
        }
        Err(Error::InvalidArgument(format!(
            "{what}: {role} {r} is not a rank of this communicator (ranks are 0..{}{})",
            self.size() - 1,
            if allow_proc_null { ", or GPUWIRE_PROC_NULL" } else { "" }
        )))
    }

    pub(crate) fn check_tag(&self, what: &str, tag: i32) -> Result<()> {
        let ub = runtime::ensure_ready()?.tag_ub;
        if (0..=ub).contains(&tag) {
            return Ok(());
        }
        if tag < 0 {
            return Err(Error::InvalidArgument(format!(
                "{what}: tag {tag} is negative (MPI_ANY_TAG?); wildcard tags are not supported yet: pass a tag 0..={ub}"
            )));
        }
        Err(Error::InvalidArgument(format!("{what}: tag {tag} is outside 0..={ub} (MPI_TAG_UB of this MPI)")))
    }

    /// The path of a call of `op` on these buffers (`backend::route`).
    pub(crate) fn path(&self, op: Operation, bufs: &[Option<&Buffer>]) -> Result<&'static dyn Path> {
        backend::route(self, op, None, bufs)
    }

    /// The path of a reduction of `dtype` with `rop` on these buffers (`backend::route`).
    pub(crate) fn reduce_path(&self, op: Operation, dtype: Dtype, rop: ReduceOp, bufs: &[Option<&Buffer>]) -> Result<&'static dyn Path> {
        backend::route(self, op, Some((dtype, rop)), bufs)
    }

    /// Runs checking mode's agreement (when on) and returns the locally validated value, or the
    /// error every rank returns.
    pub fn agree<T>(&self, what: &str, sig: Sig, local: Result<T>) -> Result<T> {
        self.ensure_usable()?;
        if !self.config().check {
            return local;
        }
        let opt = |v: Option<i64>| v.unwrap_or(-1);
        let vals = [
            // A count beyond i64 (a sum of caller counts) fails its local check anyway.
            opt(sig.count.map(|c| i64::try_from(c).unwrap_or(i64::MAX))),
            opt(sig.dtype.map(|d| d as i64)),
            opt(sig.op.map(|o| o as i64)),
            opt(sig.root.map(|r| r as i64)),
            // Memory kinds are each rank's own where every kind takes the same MPI calls (the
            // plain MPI path and the stream-ordered staged path); the others route by kind.
            opt(sig.device.filter(|_| self.backend() != crate::types::BackendKind::GPUWIRE_BACKEND_MPI_STAGED).map(|d| d as i64)),
        ];
        let err_flag = if local.is_err() { self.rank() as i64 + 1 } else { 0 };
        let kind = collective_id(what);
        let mut v = [err_flag, vals[0], -vals[0], vals[1], -vals[1], vals[2], -vals[2], vals[3], -vals[3], vals[4], -vals[4], kind, -kind];
        self.allreduce_max_i64(&mut v, what)?;
        if v[11] != -v[12] {
            // Different collectives met (a gather against a scatter, a bcast against an
            // allreduce): nothing else can be compared, and nothing is done.
            let other = if v[11] == kind { -v[12] } else { v[11] };
            return Err(Error::InvalidArgument(format!(
                "{what}: the ranks called different collectives ({what} here, {} on another rank); nothing was done on any rank",
                collective_name(other)
            )));
        }
        if v[0] != 0 {
            return match local {
                Err(e) => Err(e),
                Ok(_) => Err(Error::RemoteArgument(format!(
                    "{what}: rank {} rejected its arguments (its own error says why); nothing was done on any rank",
                    v[0] - 1
                ))),
            };
        }
        let (cmax, cmin) = (v[1], -v[2]);
        if cmax != cmin {
            return Err(count_mismatch(
                what,
                format!("ranks passed different element counts (from {cmin} to {cmax}; this rank {}); nothing was done on any rank", vals[0]),
            ));
        }
        if v[3] != -v[4] {
            let name = |x: i64| Dtype::from_c(x as i32).map(|d| d.name()).unwrap_or("?");
            return Err(Error::DtypeMismatch(format!(
                "{what}: ranks passed different datatypes ({} and {}); nothing was done on any rank",
                name(-v[4]),
                name(v[3])
            )));
        }
        if v[5] != -v[6] {
            let name = |x: i64| ReduceOp::from_c(x as i32).map(|o| o.name()).unwrap_or("?");
            return Err(Error::OpMismatch(format!(
                "{what}: ranks passed different reduction operations ({} and {}); nothing was done on any rank",
                name(-v[6]),
                name(v[5])
            )));
        }
        if v[7] != -v[8] {
            return Err(Error::RootMismatch(format!(
                "{what}: ranks passed different roots ({} and {}); nothing was done on any rank",
                -v[8],
                v[7]
            )));
        }
        if v[9] != -v[10] {
            return Err(Error::InvalidArgument(format!(
                "{what}: some ranks passed device buffers and others host buffers; every rank of a collective must pass the same kind; nothing was done on any rank"
            )));
        }
        local
    }

    /// A collective whose arguments could not even be resolved on this rank (an invalid handle
    /// or enum value): in checking mode the other ranks are told, so none of them hangs.
    pub fn fail_collective(&self, what: &str, e: Error) -> Error {
        let _call = match self.enter(what, true) {
            Ok(g) => g,
            Err(busy) => return busy,
        };
        match self.agree::<()>(what, Sig::default(), Err(e)) {
            Err(e) => e,
            Ok(()) => Error::Internal("agreement on a failed call succeeded".into()),
        }
    }

    // ---- point-to-point -------------------------------------------------------------------

    /// As MPI_Send of all of `buf`'s elements to `dest` (GPUWIRE_PROC_NULL: no-op).
    pub fn send(&self, buf: &Buffer, dest: i32, tag: i32, stream: Stream) -> Result<()> {
        let _call = self.enter("send", false)?;
        self.check_rank("send", "destination", dest, true)?;
        self.check_tag("send", tag)?;
        let dest = peer(dest);
        if dest == PROC_NULL {
            return Ok(());
        }
        self.path(Operation::Send, &[Some(buf)])?.send(self, buf, dest, tag, stream)
    }

    /// As MPI_Recv of exactly `buf.count()` elements from `source`.
    pub fn recv(&self, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<()> {
        let _call = self.enter("recv", false)?;
        self.check_rank("recv", "source", source, true)?;
        self.check_tag("recv", tag)?;
        let source = peer(source);
        if source == PROC_NULL {
            return Ok(());
        }
        self.path(Operation::Recv, &[Some(buf)])?.recv(self, buf, source, tag, stream)
    }

    /// As MPI_Isend; the request keeps the communicator and the buffer alive.
    pub fn isend(self: &Arc<Self>, buf: &Arc<Buffer>, dest: i32, tag: i32, stream: Stream) -> Result<Request> {
        self.ensure_usable()?;
        self.check_rank("isend", "destination", dest, true)?;
        self.check_tag("isend", tag)?;
        let dest = peer(dest);
        let pending: Box<dyn crate::request::Pending> = if dest == PROC_NULL {
            Box::new(Done)
        } else {
            self.path(Operation::Isend, &[Some(buf)])?.isend(self, buf, dest, tag, stream)?
        };
        Ok(Request::new(pending, self.clone(), vec![buf.clone()]))
    }

    /// As MPI_Irecv of exactly `buf.count()` elements.
    pub fn irecv(self: &Arc<Self>, buf: &Arc<Buffer>, source: i32, tag: i32, stream: Stream) -> Result<Request> {
        self.ensure_usable()?;
        self.check_rank("irecv", "source", source, true)?;
        self.check_tag("irecv", tag)?;
        let source = peer(source);
        let pending: Box<dyn crate::request::Pending> = if source == PROC_NULL {
            Box::new(Done)
        } else {
            self.path(Operation::Irecv, &[Some(buf)])?.irecv(self, buf, source, tag, stream)?
        };
        Ok(Request::new(pending, self.clone(), vec![buf.clone()]))
    }

    /// As MPI_Sendrecv (either side may be GPUWIRE_PROC_NULL).
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv(&self, send: &Buffer, dest: i32, sendtag: i32, recv: &Buffer, source: i32, recvtag: i32, stream: Stream) -> Result<()> {
        let _call = self.enter("sendrecv", false)?;
        self.check_rank("sendrecv", "destination", dest, true)?;
        self.check_rank("sendrecv", "source", source, true)?;
        self.check_tag("sendrecv", sendtag)?;
        self.check_tag("sendrecv", recvtag)?;
        let (dest, source) = (peer(dest), peer(source));
        if send.overlaps(recv) {
            return Err(Error::InvalidArgument("sendrecv: the send and receive buffers overlap".into()));
        }
        let p = self.path(Operation::Sendrecv, &[Some(send), Some(recv)])?;
        p.sendrecv(self, send, dest, sendtag, recv, source, recvtag, stream)
    }

    // ---- collectives ----------------------------------------------------------------------
    //
    // Each collective is its local validation (`plan_*`: this rank's arguments alone, what
    // checking mode agrees, and the path), then the agreement, then the path. The progress
    // engine and groups run the `plan_*` half at the call and the whole later (`crate::op`).

    /// As MPI_Barrier (ordered after the work on `stream` for device backends).
    pub fn barrier(&self, stream: Stream) -> Result<()> {
        let _call = self.enter("barrier", true)?;
        let path = self.agree("barrier", Sig::default(), self.path(Operation::Barrier, &[]))?;
        path.barrier(self, stream)
    }

    pub(crate) fn plan_bcast(&self, buf: &Buffer, root: i32) -> (Sig, Result<&'static dyn Path>) {
        let local = (|| {
            self.check_rank("bcast", "root", root, false)?;
            self.path(Operation::Bcast, &[Some(buf)])
        })();
        let sig = Sig { count: Some(buf.count()), dtype: Some(buf.dtype()), root: Some(root), ..Sig::default() }.with_bufs(&[Some(buf)]);
        (sig, local)
    }

    /// As MPI_Bcast of all of `buf`'s elements from `root`.
    pub fn bcast(&self, buf: &Buffer, root: i32, stream: Stream) -> Result<()> {
        let _call = self.enter("bcast", true)?;
        let (sig, local) = self.plan_bcast(buf, root);
        let path = self.agree("bcast", sig, local)?;
        path.bcast(self, buf, root, stream)
    }

    #[allow(clippy::type_complexity)]
    pub(crate) fn plan_reduce<'a>(&self, send: &'a Buffer, recv: Option<&'a Buffer>, op: ReduceOp, root: i32) -> (Sig, Result<(Input<'a>, Option<&'a Buffer>, &'static dyn Path)>) {
        let what = "reduce";
        let is_root = self.rank() == root;
        let local = (|| {
            self.check_rank(what, "root", root, false)?;
            op.check_supported(send.dtype())?;
            let input = match recv {
                Some(r) if is_root => {
                    same_dtype(what, send, r)?;
                    if send.count() != r.count() {
                        return Err(count_mismatch(what, format!("send has {} elements, receive {}", send.count(), r.count())));
                    }
                    input(what, send, r, 0)?
                }
                None if is_root => return Err(Error::InvalidArgument(format!("{what}: the root needs a receive buffer"))),
                _ => Input::Buf(send),
            };
            let recv = if is_root { recv } else { None };
            Ok((input, recv, self.reduce_path(Operation::Reduce, send.dtype(), op, &[Some(send), recv])?))
        })();
        let sig = Sig { count: Some(send.count()), dtype: Some(send.dtype()), op: Some(op), root: Some(root), ..Sig::default() }.with_bufs(&[Some(send), if is_root { recv } else { None }]);
        (sig, local)
    }

    /// As MPI_Reduce. `recv` is needed at the root only (others may pass `None`); in-place at the
    /// root when `send` and `recv` are the same memory.
    pub fn reduce(&self, send: &Buffer, recv: Option<&Buffer>, op: ReduceOp, root: i32, stream: Stream) -> Result<()> {
        let _call = self.enter("reduce", true)?;
        let (sig, local) = self.plan_reduce(send, recv, op, root);
        let (input, recv, path) = self.agree("reduce", sig, local)?;
        path.reduce(self, input, recv, op, root, stream)
    }

    pub(crate) fn plan_allreduce<'a>(&self, send: &'a Buffer, recv: &Buffer, op: ReduceOp) -> (Sig, Result<(Input<'a>, &'static dyn Path)>) {
        let what = "allreduce";
        let local = (|| {
            let dtype = same_dtype(what, send, recv)?;
            op.check_supported(dtype)?;
            if send.count() != recv.count() {
                return Err(count_mismatch(what, format!("send has {} elements, receive {}", send.count(), recv.count())));
            }
            Ok((input(what, send, recv, 0)?, self.reduce_path(Operation::Allreduce, dtype, op, &[Some(send), Some(recv)])?))
        })();
        let sig = Sig { count: Some(recv.count()), dtype: Some(recv.dtype()), op: Some(op), ..Sig::default() }.with_bufs(&[Some(send), Some(recv)]);
        (sig, local)
    }

    /// As MPI_Allreduce; in-place when `send` and `recv` are the same memory.
    pub fn allreduce(&self, send: &Buffer, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<()> {
        let _call = self.enter("allreduce", true)?;
        let (sig, local) = self.plan_allreduce(send, recv, op);
        let (input, path) = self.agree("allreduce", sig, local)?;
        path.allreduce(self, input, recv, op, stream)
    }

    pub(crate) fn plan_scan<'a>(&self, send: &'a Buffer, recv: &Buffer, op: ReduceOp, exclusive: bool) -> (Sig, Result<(Input<'a>, &'static dyn Path)>) {
        let what = if exclusive { "exscan" } else { "scan" };
        let local = (|| {
            let dtype = same_dtype(what, send, recv)?;
            op.check_supported(dtype)?;
            if send.count() != recv.count() {
                return Err(count_mismatch(what, format!("send has {} elements, receive {}", send.count(), recv.count())));
            }
            Ok((input(what, send, recv, 0)?, self.reduce_path(Operation::Scan, dtype, op, &[Some(send), Some(recv)])?))
        })();
        let sig = Sig { count: Some(recv.count()), dtype: Some(recv.dtype()), op: Some(op), ..Sig::default() }.with_bufs(&[Some(send), Some(recv)]);
        (sig, local)
    }

    /// As MPI_Scan (`exclusive` false: rank r receives the reduction of ranks 0..=r) or
    /// MPI_Exscan (ranks 0..r; rank 0's `recv` is left untouched); in-place when `send` and
    /// `recv` are the same memory.
    pub fn scan(&self, send: &Buffer, recv: &Buffer, op: ReduceOp, exclusive: bool, stream: Stream) -> Result<()> {
        let what = if exclusive { "exscan" } else { "scan" };
        let _call = self.enter(what, true)?;
        let (sig, local) = self.plan_scan(send, recv, op, exclusive);
        let (input, path) = self.agree(what, sig, local)?;
        path.scan(self, input, recv, op, exclusive, stream)
    }

    pub(crate) fn plan_allgather<'a>(&self, send: &'a Buffer, recv: &Buffer) -> (Sig, Result<(Input<'a>, &'static dyn Path)>) {
        let what = "allgather";
        let n = send.count();
        let local = (|| {
            same_dtype(what, send, recv)?;
            if n.checked_mul(self.size() as usize) != Some(recv.count()) {
                return Err(count_mismatch(
                    what,
                    format!("the receive buffer must hold size x send count = {} x {n} elements, it holds {}", self.size(), recv.count()),
                ));
            }
            Ok((input(what, send, recv, self.rank() as usize * n)?, self.path(Operation::Allgather, &[Some(send), Some(recv)])?))
        })();
        let sig = Sig { count: Some(n), dtype: Some(send.dtype()), ..Sig::default() }.with_bufs(&[Some(send), Some(recv)]);
        (sig, local)
    }

    /// As MPI_Allgather: `recv` holds size x `send.count()` elements, rank r's block at r x count.
    /// In-place when `send` is exactly this rank's block of `recv`.
    pub fn allgather(&self, send: &Buffer, recv: &Buffer, stream: Stream) -> Result<()> {
        let _call = self.enter("allgather", true)?;
        let (sig, local) = self.plan_allgather(send, recv);
        let (input, path) = self.agree("allgather", sig, local)?;
        path.allgather(self, input, recv, stream)
    }

    /// The local checks of allgatherv that need no exchange (the counts, when given, are
    /// checked by `plan_allgatherv_counts`).
    pub(crate) fn plan_allgatherv(&self, send: &Buffer, recv: &Buffer, counts: Option<&[i64]>) -> Result<()> {
        match counts {
            Some(c) => self.plan_allgatherv_counts(send, recv, c).1.map(|_| ()),
            None => same_dtype("allgatherv", send, recv).map(|_| ()),
        }
    }

    #[allow(clippy::type_complexity)]
    fn plan_allgatherv_counts<'a>(&self, send: &'a Buffer, recv: &Buffer, counts: &[i64]) -> (Sig, Result<(Input<'a>, Vec<usize>, &'static dyn Path)>) {
        let what = "allgatherv";
        let size = self.size() as usize;
        let local = (|| {
            same_dtype(what, send, recv)?;
            let mut ucounts = Vec::with_capacity(size);
            for (r, &c) in counts.iter().enumerate() {
                ucounts.push(usize::try_from(c).map_err(|_| {
                    Error::InvalidArgument(format!("{what}: counts[{r}] = {c} is negative"))
                })?);
            }
            let me = self.rank() as usize;
            if ucounts[me] != send.count() {
                return Err(count_mismatch(what, format!("counts[{me}] = {} but this rank sends {} elements", ucounts[me], send.count())));
            }
            let total = ucounts.iter().try_fold(0usize, |t, c| t.checked_add(*c));
            if total != Some(recv.count()) {
                let total = total.map_or("more than the address space holds".to_string(), |t| t.to_string());
                return Err(count_mismatch(what, format!("the counts add up to {total} elements but the receive buffer holds {}", recv.count())));
            }
            let block: usize = ucounts[..me].iter().sum();
            Ok((input(what, send, recv, block)?, ucounts, self.path(Operation::Allgatherv, &[Some(send), Some(recv)])?))
        })();
        let sig = Sig { count: Some(counts.iter().map(|c| *c as usize).fold(0usize, usize::wrapping_add)), dtype: Some(send.dtype()), ..Sig::default() }.with_bufs(&[Some(send), Some(recv)]);
        (sig, local)
    }

    /// As MPI_Allgatherv with blocks placed contiguously in rank order (no padding).
    /// `counts[r]` is rank r's element count; `None` exchanges the counts first (one extra
    /// MPI_Allgather). In-place when `send` is exactly this rank's block of `recv`.
    pub fn allgatherv(&self, send: &Buffer, recv: &Buffer, counts: Option<&[i64]>, stream: Stream) -> Result<()> {
        let what = "allgatherv";
        let _call = self.enter(what, true)?;
        let size = self.size() as usize;
        let exchanged;
        let counts: &[i64] = match counts {
            Some(c) => c,
            None => {
                if self.config().check {
                    // Agree before the exchange that every rank can make this call: a rank whose
                    // arguments did not resolve takes part in one agreement only
                    // (`fail_collective`), and must not leave the others in the exchange.
                    let sig = Sig { dtype: Some(send.dtype()), ..Sig::default() };
                    self.agree(what, sig, same_dtype(what, send, recv).map(|_| ()))?;
                } else {
                    self.ensure_usable()?;
                }
                let mut all = vec![0i64; size];
                let mine = Box::new(send.count() as i64);
                // One int64 from each rank into `all` (size entries).
                let r = crate::comm::collective!(
                    self,
                    "MPI_Allgather (allgatherv counts)",
                    MPI_Allgather((&*mine as *const i64).cast(), 1, sys::RSMPI_INT64_T, all.as_mut_ptr().cast(), 1, sys::RSMPI_INT64_T, self.raw()),
                    MPI_Iallgather
                );
                if r.is_err() {
                    // An abandoned request (a timeout) may still use both.
                    std::mem::forget((mine, all));
                    return r;
                }
                exchanged = all;
                &exchanged
            }
        };
        let (sig, local) = self.plan_allgatherv_counts(send, recv, counts);
        let (input, ucounts, path) = self.agree(what, sig, local)?;
        path.allgatherv(self, input, recv, &ucounts, stream)
    }

    pub(crate) fn plan_reduce_scatter(&self, send: &Buffer, recv: &Buffer, op: ReduceOp) -> (Sig, Result<&'static dyn Path>) {
        let what = "reduce_scatter";
        let local = (|| {
            let dtype = same_dtype(what, send, recv)?;
            op.check_supported(dtype)?;
            if recv.count().checked_mul(self.size() as usize) != Some(send.count()) {
                return Err(count_mismatch(
                    what,
                    format!("the send buffer must hold size x receive count = {} x {} elements, it holds {}", self.size(), recv.count(), send.count()),
                ));
            }
            if send.overlaps(recv) {
                return Err(Error::InvalidArgument(format!("{what}: the send and receive buffers overlap")));
            }
            self.reduce_path(Operation::ReduceScatter, recv.dtype(), op, &[Some(send), Some(recv)])
        })();
        let sig = Sig { count: Some(recv.count()), dtype: Some(recv.dtype()), op: Some(op), ..Sig::default() }.with_bufs(&[Some(send), Some(recv)]);
        (sig, local)
    }

    /// As MPI_Reduce_scatter_block: `send` holds size x `recv.count()` elements; rank r receives
    /// the reduction of block r.
    pub fn reduce_scatter(&self, send: &Buffer, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<()> {
        let _call = self.enter("reduce_scatter", true)?;
        let (sig, local) = self.plan_reduce_scatter(send, recv, op);
        let path = self.agree("reduce_scatter", sig, local)?;
        path.reduce_scatter(self, Input::Buf(send), recv, op, stream)
    }

    pub(crate) fn plan_alltoall<'a>(&self, send: &'a Buffer, recv: &Buffer) -> (Sig, Result<(Input<'a>, &'static dyn Path)>) {
        let what = "alltoall";
        let size = self.size() as usize;
        let local = (|| {
            same_dtype(what, send, recv)?;
            if send.count() != recv.count() || recv.count() % size != 0 {
                return Err(count_mismatch(
                    what,
                    format!("both buffers must hold the same multiple of the size {size}; send has {}, receive {}", send.count(), recv.count()),
                ));
            }
            Ok((input(what, send, recv, 0)?, self.path(Operation::Alltoall, &[Some(send), Some(recv)])?))
        })();
        let sig = Sig { count: Some(recv.count()), dtype: Some(recv.dtype()), ..Sig::default() }.with_bufs(&[Some(send), Some(recv)]);
        (sig, local)
    }

    /// As MPI_Alltoall: both buffers hold size x k elements; block r of `send` goes to rank r.
    /// In-place when `send` and `recv` are the same memory.
    pub fn alltoall(&self, send: &Buffer, recv: &Buffer, stream: Stream) -> Result<()> {
        let _call = self.enter("alltoall", true)?;
        let (sig, local) = self.plan_alltoall(send, recv);
        let (input, path) = self.agree("alltoall", sig, local)?;
        path.alltoall(self, input, recv, stream)
    }

    #[allow(clippy::type_complexity)]
    pub(crate) fn plan_gather<'a>(&self, send: &'a Buffer, recv: Option<&'a Buffer>, root: i32) -> (Sig, Result<(Input<'a>, Option<&'a Buffer>, &'static dyn Path)>) {
        let what = "gather";
        let is_root = self.rank() == root;
        let n = send.count();
        let local = (|| {
            self.check_rank(what, "root", root, false)?;
            let input = match recv {
                Some(r) if is_root => {
                    same_dtype(what, send, r)?;
                    if n.checked_mul(self.size() as usize) != Some(r.count()) {
                        return Err(count_mismatch(
                            what,
                            format!("the root's receive buffer must hold size x send count = {} x {n} elements, it holds {}", self.size(), r.count()),
                        ));
                    }
                    input(what, send, r, root as usize * n)?
                }
                None if is_root => return Err(Error::InvalidArgument(format!("{what}: the root needs a receive buffer"))),
                _ => Input::Buf(send),
            };
            let recv = if is_root { recv } else { None };
            Ok((input, recv, self.path(Operation::Gather, &[Some(send), recv])?))
        })();
        let sig = Sig { count: Some(n), dtype: Some(send.dtype()), root: Some(root), ..Sig::default() }.with_bufs(&[Some(send), if is_root { recv } else { None }]);
        (sig, local)
    }

    /// As MPI_Gather: the root's `recv` holds size x `send.count()` elements (others may pass
    /// `None`). In-place at the root when `send` is exactly the root's block of `recv`.
    pub fn gather(&self, send: &Buffer, recv: Option<&Buffer>, root: i32, stream: Stream) -> Result<()> {
        let _call = self.enter("gather", true)?;
        let (sig, local) = self.plan_gather(send, recv, root);
        let (input, recv, path) = self.agree("gather", sig, local)?;
        path.gather(self, input, recv, root, stream)
    }

    #[allow(clippy::type_complexity)]
    pub(crate) fn plan_scatter<'a>(&self, send: Option<&'a Buffer>, recv: &'a Buffer, root: i32) -> (Sig, Result<(Input<'a>, Option<&'a Buffer>, &'static dyn Path)>) {
        let what = "scatter";
        let is_root = self.rank() == root;
        let n = recv.count();
        let local = (|| {
            self.check_rank(what, "root", root, false)?;
            let rinput = match send {
                Some(s) if is_root => {
                    same_dtype(what, s, recv)?;
                    if n.checked_mul(self.size() as usize) != Some(s.count()) {
                        return Err(count_mismatch(
                            what,
                            format!("the root's send buffer must hold size x receive count = {} x {n} elements, it holds {}", self.size(), s.count()),
                        ));
                    }
                    input(what, recv, s, root as usize * n)?
                }
                None if is_root => return Err(Error::InvalidArgument(format!("{what}: the root needs a send buffer"))),
                _ => Input::Buf(recv),
            };
            let send = if is_root { send } else { None };
            Ok((rinput, send, self.path(Operation::Scatter, &[send, Some(recv)])?))
        })();
        let sig = Sig { count: Some(n), dtype: Some(recv.dtype()), root: Some(root), ..Sig::default() }.with_bufs(&[if is_root { send } else { None }, Some(recv)]);
        (sig, local)
    }

    /// As MPI_Scatter: the root's `send` holds size x `recv.count()` elements (others may pass
    /// `None`). In-place at the root when `recv` is exactly the root's block of `send`.
    pub fn scatter(&self, send: Option<&Buffer>, recv: &Buffer, root: i32, stream: Stream) -> Result<()> {
        let _call = self.enter("scatter", true)?;
        let (sig, local) = self.plan_scatter(send, recv, root);
        let (rinput, send, path) = self.agree("scatter", sig, local)?;
        path.scatter(self, send, rinput, root, stream)
    }
}

/// A request that is complete from the start (operations with GPUWIRE_PROC_NULL).
pub(crate) struct Done;

impl crate::request::Pending for Done {
    fn wait(&mut self) -> Result<()> {
        Ok(())
    }
    fn test(&mut self) -> Result<bool> {
        Ok(true)
    }
}
