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

use crate::backend::{self, Blocks, Input, Operation, Path};
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
    /// Whether this rank's call is in place, where MPI requires MPI_IN_PLACE on every rank or
    /// none (allreduce, scan, exscan, allgather, allgatherv: `in_place_of`).
    pub in_place: Option<bool>,
}

impl Sig {
    fn with_bufs(mut self, bufs: &[Option<&Buffer>]) -> Sig {
        self.device = Some(bufs.iter().flatten().any(|b| !b.is_host()));
        self
    }

    /// With whether the call is in place on this rank, where its arguments resolved and it
    /// sends something (an empty send buffer is either).
    fn in_place_of(mut self, input: Option<&Input>, send: &Buffer) -> Sig {
        self.in_place = input.filter(|_| send.count() > 0).map(|i| matches!(i, Input::InPlace));
        self
    }
}

/// The collectives checking mode tells apart (other names are hashed).
const COLLECTIVES: [&str; 16] = [
    "barrier", "bcast", "reduce", "allreduce", "allgather", "allgatherv", "reduce_scatter", "alltoall", "gather", "scatter", "scan", "exscan", "alltoallv", "gatherv",
    "scatterv", "reduce_scatterv",
];

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
use crate::types::{ANY_SOURCE, ANY_TAG};

/// Whether `r` names no rank: GPUWIRE_PROC_NULL, or the MPI_PROC_NULL of the MPI gpuwire was
/// built with.
fn is_proc_null(r: i32) -> bool {
    r == PROC_NULL || r == mpisys::proc_null()
}

/// A validated peer rank with MPI_PROC_NULL as GPUWIRE_PROC_NULL (what the paths compare with).
pub(crate) fn peer(r: i32) -> i32 {
    if is_proc_null(r) { PROC_NULL } else { r }
}

/// Whether `r` is a wildcard source: GPUWIRE_ANY_SOURCE, or the MPI_ANY_SOURCE of the MPI
/// gpuwire was built with.
fn is_any_source(r: i32) -> bool {
    r == ANY_SOURCE || r == mpisys::any_source()
}

/// Whether `t` is a wildcard tag: GPUWIRE_ANY_TAG, or this MPI's MPI_ANY_TAG.
fn is_any_tag(t: i32) -> bool {
    t == ANY_TAG || t == mpisys::any_tag()
}

/// A validated receive's source, with MPI's constants as gpuwire's.
fn recv_source(r: i32) -> i32 {
    if is_any_source(r) { ANY_SOURCE } else { peer(r) }
}

/// A validated receive's tag, with MPI_ANY_TAG as GPUWIRE_ANY_TAG.
fn recv_tag(t: i32) -> i32 {
    if is_any_tag(t) { ANY_TAG } else { t }
}

#[inline]
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
#[inline]
fn input<'a>(what: &str, send: &'a Buffer, recv: &Buffer, block: usize) -> Result<Input<'a>> {
    if send.count() > 0 && send.ptr() == recv.ptr() + block * recv.dtype().size() && send.dtype() == recv.dtype() {
        return Ok(Input::InPlace);
    }
    if send.overlaps(recv) {
        return Err(overlapping_input(what, send, recv, block));
    }
    Ok(Input::Buf(send))
}

/// An allreduce's own checks of its arguments on this rank (datatypes, the operation on that
/// datatype, counts, overlap), in the order their errors are reported: its input (in place or
/// `send`). `plan_allreduce` and the lean path (`crate::lean`) both call it.
#[inline]
pub(crate) fn allreduce_args<'a>(send: &'a Buffer, recv: &Buffer, op: ReduceOp) -> Result<Input<'a>> {
    let what = "allreduce";
    let dtype = same_dtype(what, send, recv)?;
    op.check_supported(dtype)?;
    if send.count() != recv.count() {
        return Err(count_mismatch(what, format!("send has {} elements, receive {}", send.count(), recv.count())));
    }
    input(what, send, recv, 0)
}

/// Why `input` refused `send`.
#[cold]
#[inline(never)]
fn overlapping_input(what: &str, send: &Buffer, recv: &Buffer, block: usize) -> Error {
    Error::InvalidArgument(format!(
        "{what}: the send and receive buffers overlap; use disjoint buffers, or for in-place pass exactly {}",
        if block == 0 && send.count() == recv.count() { "the same buffer as send and receive".to_string() } else { "a view of this rank's own block of the receive buffer as the send buffer".to_string() }
    ))
}

/// Why `Communicator::check_tag` refused `tag` (`ub`: MPI_TAG_UB).
#[cold]
#[inline(never)]
fn bad_tag(what: &str, tag: i32, ub: i32) -> Error {
    if is_any_tag(tag) {
        return Error::InvalidArgument(format!(
            "{what}: tag {tag} is a wildcard (GPUWIRE_ANY_TAG / MPI_ANY_TAG), which only a receive or probe takes: pass a tag 0..={ub}"
        ));
    }
    if tag < 0 {
        return Error::InvalidArgument(format!(
            "{what}: tag {tag} is negative: pass a tag 0..={ub} (a receive or probe may pass GPUWIRE_ANY_TAG / MPI_ANY_TAG)"
        ));
    }
    Error::InvalidArgument(format!("{what}: tag {tag} is outside 0..={ub} (MPI_TAG_UB of this MPI)"))
}

fn count_mismatch(what: &str, detail: String) -> Error {
    Error::CountMismatch(format!("{what}: {detail}"))
}

/// A v-collective's counts and displacements as the caller gave them (one entry per rank, in
/// elements; `None` for a NULL array): validated into [`OwnedBlocks`] by [`layout`].
#[derive(Clone, Debug, Default)]
pub struct Layout {
    pub counts: Option<Vec<i64>>,
    /// `None`: the blocks lie contiguously in rank order (displacements = prefix sums).
    pub displs: Option<Vec<i64>>,
}

/// Validated counts and displacements, in elements (see [`Blocks`]).
#[derive(Clone, Debug, Default)]
pub struct OwnedBlocks {
    pub counts: Vec<usize>,
    pub displs: Vec<usize>,
}

impl OwnedBlocks {
    pub fn view(&self) -> Blocks<'_> {
        Blocks { counts: &self.counts, displs: &self.displs }
    }
}

/// Validates `l` for a buffer of `len` elements on a communicator of `p` ranks: every count and
/// displacement non-negative, every non-empty block inside the buffer (overflow checked), and receive
/// blocks (`disjoint`) not overlapping one another (MPI forbids writing an element twice).
/// `role` names the arrays in messages ("send", "recv").
fn layout(what: &str, role: &str, l: &Layout, p: usize, len: usize, disjoint: bool) -> Result<OwnedBlocks> {
    let Some(counts) = l.counts.as_deref() else {
        return Err(Error::InvalidArgument(format!("{what}: {role}counts is NULL but significant on this rank")));
    };
    if counts.len() != p || l.displs.as_ref().is_some_and(|d| d.len() != p) {
        return Err(Error::InvalidArgument(format!("{what}: {role}counts and displacements need one entry per rank ({p})")));
    }
    let mut b = OwnedBlocks { counts: Vec::with_capacity(p), displs: Vec::with_capacity(p) };
    let mut next = 0usize;
    for (j, &c) in counts.iter().enumerate() {
        let n = usize::try_from(c).map_err(|_| Error::InvalidArgument(format!("{what}: {role}counts[{j}] = {c} is negative")))?;
        let d = match l.displs.as_deref() {
            Some(ds) => usize::try_from(ds[j]).map_err(|_| Error::InvalidArgument(format!("{what}: {role} displacement [{j}] = {} is negative", ds[j])))?,
            None => next,
        };
        if n == 0 {
            // An empty block reads and writes nothing, wherever it is (as in MPI): kept inside
            // the buffer, so that no path computes an address past it.
            b.counts.push(0);
            b.displs.push(d.min(len));
            continue;
        }
        let end = d.checked_add(n).filter(|e| *e <= len).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{what}: {role} block {j} ({n} elements at displacement {d}) ends past the {role} buffer's {len} elements; nothing was sent"
            ))
        })?;
        next = end;
        b.counts.push(n);
        b.displs.push(d);
    }
    if disjoint {
        let mut spans: Vec<(usize, usize, usize)> = b.counts.iter().zip(&b.displs).enumerate().filter(|(_, (n, _))| **n > 0).map(|(j, (n, d))| (*d, d + n, j)).collect();
        spans.sort_unstable();
        if let Some(w) = spans.windows(2).find(|w| w[1].0 < w[0].1) {
            return Err(Error::InvalidArgument(format!(
                "{what}: {role} blocks {} and {} overlap (elements {}..{} and {}..{}); an element may be received once; nothing was sent",
                w[0].2, w[1].2, w[0].0, w[0].1, w[1].0, w[1].1
            )));
        }
    }
    Ok(b)
}

/// Whether `send` is the very memory of `recv` (the same handle, or the same address, datatype
/// and count): an in-place call; an error when the two overlap otherwise.
fn same_memory(what: &str, send: &Buffer, recv: &Buffer) -> Result<bool> {
    if std::ptr::eq(send, recv) || (send.ptr() == recv.ptr() && send.count() == recv.count() && send.dtype() == recv.dtype() && send.count() > 0) {
        return Ok(true);
    }
    if send.overlaps(recv) {
        return Err(Error::InvalidArgument(format!(
            "{what}: the send and receive buffers overlap; use disjoint buffers, or for in-place pass the same buffer as both"
        )));
    }
    Ok(false)
}

impl Communicator {
    #[inline]
    pub(crate) fn check_rank(&self, what: &str, role: &str, r: i32, allow_proc_null: bool) -> Result<()> {
        if (0..self.size()).contains(&r) || (allow_proc_null && is_proc_null(r)) {
            return Ok(());
        }
        Err(self.bad_rank(what, role, r, allow_proc_null))
    }

    /// Why `check_rank` refused `r`.
    #[cold]
    #[inline(never)]
    fn bad_rank(&self, what: &str, role: &str, r: i32, allow_proc_null: bool) -> Error {
        if allow_proc_null && is_any_source(r) {
            return Error::InvalidArgument(format!(
                "{what}: {role} {r} is a wildcard (GPUWIRE_ANY_SOURCE / MPI_ANY_SOURCE), which only a receive or probe takes: pass a rank 0..{}, or GPUWIRE_PROC_NULL for none",
                self.size() - 1
            ));
        }
        if allow_proc_null && r < 0 {
            // MPI_ANY_SOURCE is -1 in Open MPI and -2 in MPICH: any other negative rank.
            return Error::InvalidArgument(format!(
                "{what}: {role} {r} is negative and no rank: pass a rank 0..{}, GPUWIRE_PROC_NULL / MPI_PROC_NULL ({}) for none{}",
                self.size() - 1,
                mpisys::proc_null(),
                if role == "source" { ", or GPUWIRE_ANY_SOURCE / MPI_ANY_SOURCE for any" } else { "" }
            ));
        }
        Error::InvalidArgument(format!(
            "{what}: {role} {r} is not a rank of this communicator (ranks are 0..{}{})",
            self.size() - 1,
            if allow_proc_null { ", or GPUWIRE_PROC_NULL" } else { "" }
        ))
    }

    #[inline]
    pub(crate) fn check_tag(&self, what: &str, tag: i32) -> Result<()> {
        runtime::check_ready()?;
        let ub = runtime::tag_ub();
        if (0..=ub).contains(&tag) {
            return Ok(());
        }
        Err(bad_tag(what, tag, ub))
    }

    /// The source and tag of a receive or probe: a rank, GPUWIRE_PROC_NULL or GPUWIRE_ANY_SOURCE
    /// (or MPI's constants), a tag or GPUWIRE_ANY_TAG (or MPI_ANY_TAG).
    pub(crate) fn check_source_tag(&self, what: &str, source: i32, tag: i32) -> Result<()> {
        if !is_any_source(source) {
            self.check_rank(what, "source", source, true)?;
        }
        if !is_any_tag(tag) {
            self.check_tag(what, tag)?;
        }
        Ok(())
    }

    /// A wildcard receive of device memory on NCCL without GPUWIRE_P2P_MATCHING=mpi (the one
    /// path without wildcards) is refused, naming the setting.
    pub(crate) fn check_wildcard_path(&self, what: &str, buf: &Buffer, source: i32, tag: i32) -> Result<()> {
        // NCCL matches device messages by peer and order only; under GPUWIRE_P2P_MATCHING=mpi its
        // device point-to-point goes through MPI (`backend::mpi_matched_p2p`). Every other
        // backend matches device messages as MPI (IPC: its control headers are MPI messages).
        if (is_any_source(source) || is_any_tag(tag)) && !buf.is_host() && self.backend() == crate::types::BackendKind::GPUWIRE_BACKEND_NCCL && !crate::backend::mpi_matched_p2p(self) {
            return Err(Error::BackendUnavailable(format!(
                "{what}: a receive of device memory with GPUWIRE_ANY_SOURCE or GPUWIRE_ANY_TAG on the NCCL backend, which has no wildcards (NCCL matches device messages by peer and order): create the communicator with p2p_matching = GPUWIRE_P2P_MATCHING_MPI (GPUWIRE_P2P_MATCHING=mpi, on every rank) for MPI's matching of device messages, or name the source and tag, or receive into host memory"
            )));
        }
        Ok(())
    }

    /// gpuwire_comm_abort: breaks the communicator (every pending gpuwire wait on it and every
    /// later operation fails with COMM_BROKEN) and aborts what the backend can abort.
    pub fn abort(&self) -> Result<()> {
        // A communicator broken earlier (a timeout) keeps its reason; its backend is aborted
        // all the same (NCCL kernels still waiting for a peer end).
        let why = match self.ensure_usable() {
            Err(Error::CommBroken(why)) => why,
            _ => format!("the communicator was aborted (gpuwire_comm_abort on rank {})", self.rank()),
        };
        crate::backend::abort(self, why);
        Ok(())
    }

    /// As MPI_Probe (`block`) / MPI_Iprobe: what the next message from `source` with `tag` that
    /// a receive would match is (wildcards allowed), in elements of `dtype`; `None` when not
    /// blocking and there is none. GPUWIRE_PROC_NULL: at once, a status of GPUWIRE_PROC_NULL,
    /// GPUWIRE_ANY_TAG and 0 elements (as MPI).
    pub fn probe(&self, source: i32, tag: i32, dtype: Dtype, block: bool) -> Result<Option<crate::request::Status>> {
        let what = if block { "probe" } else { "iprobe" };
        let _call = self.enter(what, false)?;
        self.check_source_tag(what, source, tag)?;
        let source = recv_source(source);
        if source == PROC_NULL {
            return Ok(Some(crate::request::Status { source: PROC_NULL, tag: ANY_TAG, count: 0, cancelled: false }));
        }
        Ok(crate::backend::probe(self, source, recv_tag(tag), block)?.map(|m| m.status(dtype)))
    }

    /// The path of a call of `op` on these buffers (`backend::route`).
    #[inline]
    pub(crate) fn path(&self, op: Operation, bufs: &[Option<&Buffer>]) -> Result<&'static dyn Path> {
        // Point-to-point on host memory: routed once, at creation (`Communicator::host_p2p`).
        if self.host_p2p == crate::comm::HostP2p::Mpi && op.is_p2p() && bufs.iter().flatten().all(|b| b.is_host()) {
            return Ok(&backend::host::HostPath);
        }
        backend::route(self, op, None, bufs)
    }

    /// `given`, the path of a call of `op` on these buffers where the caller knows it (the lean
    /// path's NCCL device calls), else [`Self::path`].
    #[inline]
    fn path_or(&self, given: Option<&'static dyn Path>, op: Operation, bufs: &[Option<&Buffer>]) -> Result<&'static dyn Path> {
        match given {
            Some(p) => Ok(p),
            None => self.path(op, bufs),
        }
    }

    /// The path of a reduction of `dtype` with `rop` on these buffers (`backend::route`).
    pub(crate) fn reduce_path(&self, op: Operation, dtype: Dtype, rop: ReduceOp, bufs: &[Option<&Buffer>]) -> Result<&'static dyn Path> {
        backend::route(self, op, Some((dtype, rop)), bufs)
    }

    /// Runs checking mode's agreement (when on) and returns the locally validated value, or the
    /// error every rank returns.
    #[inline]
    pub fn agree<T>(&self, what: &str, sig: Sig, local: Result<T>) -> Result<T> {
        self.ensure_usable()?;
        if !self.config().check {
            return local;
        }
        self.agree_checked(what, sig, local)
    }

    /// `agree` in checking mode: the exchange.
    #[inline(never)]
    fn agree_checked<T>(&self, what: &str, sig: Sig, local: Result<T>) -> Result<T> {
        let opt = |v: Option<i64>| v.unwrap_or(-1);
        let vals = [
            // A count beyond i64 (a sum of caller counts) fails its local check anyway.
            opt(sig.count.map(|c| i64::try_from(c).unwrap_or(i64::MAX))),
            opt(sig.dtype.map(|d| d as i64)),
            opt(sig.op.map(|o| o as i64)),
            opt(sig.root.map(|r| r as i64)),
            // Memory kinds are each rank's own where every kind takes the same MPI calls (IPC,
            // MPI_STAGED, MPI_CUDA_AWARE: `backend::kinds_per_rank`); NCCL and HIER route by kind.
            opt(sig.device.filter(|_| !crate::backend::kinds_per_rank(self)).map(|d| d as i64)),
        ];
        // The failing rank + 1, or 0, far below zero: what another MPI call's data puts there
        // (counts, context ids: small and not negative) is then out of its range.
        const FLAG: i64 = i64::MIN / 2;
        let err_flag = FLAG + if local.is_err() { self.rank() as i64 + 1 } else { 0 };
        let kind = collective_id(what);
        // Whether some rank is in place, and whether some rank is not (neither: no buffer sent).
        let (inp, notp) = (sig.in_place.is_some_and(|b| b) as i64, sig.in_place.is_some_and(|b| !b) as i64);
        let mut v = [err_flag, vals[0], -vals[0], vals[1], -vals[1], vals[2], -vals[2], vals[3], -vals[3], vals[4], -vals[4], kind, -kind, inp, notp];
        self.allreduce_max_i64(&mut v, what)?;
        if !(FLAG..=FLAG + self.size() as i64).contains(&v[0]) {
            // No rank's flag: what met this agreement was no agreement of gpuwire's (another
            // rank's gpuwire_comm_dup or comm_split, whose MPI calls use this communicator's MPI
            // communicator): its values mean nothing, that rank may be left waiting, and the
            // ranks' MPI calls on the communicator are out of step for good.
            let msg = format!(
                "{what}: the ranks' calls did not match: another rank is in a call of another kind on this communicator (gpuwire_comm_dup, gpuwire_comm_split, ...?); nothing was done on this rank, the others may be left waiting, and the communicator is now broken"
            );
            self.mark_broken(msg.clone());
            return Err(Error::InvalidArgument(msg));
        }
        if v[11] != -v[12] {
            // Different collectives met (a gather against a scatter, a bcast against an
            // allreduce): nothing else can be compared, and nothing is done.
            let other = if v[11] == kind { -v[12] } else { v[11] };
            return Err(Error::InvalidArgument(format!(
                "{what}: the ranks called different collectives ({what} here, {} on another rank); nothing was done on any rank",
                collective_name(other)
            )));
        }
        if v[0] != FLAG {
            return match local {
                Err(e) => Err(e),
                Ok(_) => Err(Error::RemoteArgument(format!(
                    "{what}: rank {} rejected its arguments (its own error says why); nothing was done on any rank",
                    v[0] - FLAG - 1
                ))),
            };
        }
        // Datatypes first: counts of different datatypes do not compare (MPI's type signature).
        if v[3] != -v[4] {
            let name = |x: i64| Dtype::from_c(x as i32).map(|d| d.name()).unwrap_or("?");
            return Err(Error::DtypeMismatch(format!(
                "{what}: ranks passed different datatypes ({} and {}); nothing was done on any rank",
                name(-v[4]),
                name(v[3])
            )));
        }
        let (cmax, cmin) = (v[1], -v[2]);
        if cmax != cmin && cmin == -1 {
            // No count on some ranks (-1): an allgatherv with NULL recvcounts there, met by one
            // with recvcounts.
            let mine = if vals[0] == -1 { "NULL" } else { "given" };
            return Err(count_mismatch(
                what,
                format!("some ranks passed recvcounts and others NULL (this rank {mine}); every rank must do the same; nothing was done on any rank"),
            ));
        }
        if cmax != cmin {
            return Err(count_mismatch(
                what,
                format!("ranks passed different element counts (from {cmin} to {cmax}; this rank {}); nothing was done on any rank", vals[0]),
            ));
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
                "{what}: some ranks passed device buffers and others host buffers; on a {} communicator every rank of a collective must pass the same kind (IPC, MPI_STAGED and MPI_CUDA_AWARE take a mix); nothing was done on any rank",
                self.backend().name()
            )));
        }
        if v[13] == 1 && v[14] == 1 {
            return Err(Error::InvalidArgument(format!(
                "{what}: some ranks called it in place and others not; MPI_IN_PLACE must be given on every rank or none (as MPI requires); nothing was done on any rank"
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
        self.send_on(None, buf, dest, tag, stream)
    }

    /// [`Self::send`] on `path` where the caller knows the path that routing would give (the
    /// lean path's NCCL device calls: `lean::send`), routed here where `None`.
    #[inline]
    pub(crate) fn send_on(&self, path: Option<&'static dyn Path>, buf: &Buffer, dest: i32, tag: i32, stream: Stream) -> Result<()> {
        let _call = self.enter("send", false)?;
        self.check_rank("send", "destination", dest, true)?;
        self.check_tag("send", tag)?;
        let dest = peer(dest);
        if dest == PROC_NULL {
            return Ok(());
        }
        self.path_or(path, Operation::Send, &[Some(buf)])?.send(self, buf, dest, tag, stream)
    }

    /// As MPI_Recv of exactly `buf.count()` elements from `source`.
    pub fn recv(&self, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<()> {
        self.recv_on(None, buf, source, tag, stream)
    }

    /// [`Self::recv`] on `path`, as [`Self::send_on`] (`lean::recv`).
    #[inline]
    pub(crate) fn recv_on(&self, path: Option<&'static dyn Path>, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<()> {
        let _call = self.enter("recv", false)?;
        self.check_source_tag("recv", source, tag)?;
        self.check_wildcard_path("recv", buf, source, tag)?;
        let (source, tag) = (recv_source(source), recv_tag(tag));
        if source == PROC_NULL {
            return Ok(());
        }
        self.path_or(path, Operation::Recv, &[Some(buf)])?.recv(self, buf, source, tag, stream)
    }

    /// As MPI_Isend; the request keeps the communicator and the buffer alive (it takes `buf`).
    pub fn isend(self: &Arc<Self>, buf: Arc<Buffer>, dest: i32, tag: i32, stream: Stream) -> Result<Request> {
        let pending = self.start_isend(&buf, dest, tag, stream)?;
        Ok(Request::of_one(pending, self.clone(), buf))
    }

    /// [`Self::isend`]'s operation, started, for a request that the caller makes (taking an
    /// `Arc` of the communicator that it owns: `lean::isend`).
    pub(crate) fn start_isend(&self, buf: &Arc<Buffer>, dest: i32, tag: i32, stream: Stream) -> Result<Box<dyn crate::request::Pending>> {
        self.ensure_usable()?;
        self.check_rank("isend", "destination", dest, true)?;
        self.check_tag("isend", tag)?;
        let dest = peer(dest);
        if dest == PROC_NULL {
            return Ok(Box::new(Done));
        }
        self.path(Operation::Isend, &[Some(buf)])?.isend(self, buf, dest, tag, stream)
    }

    /// As MPI_Irecv of exactly `buf.count()` elements, or with `upto` of up to them. The
    /// request reports what it matched (a GPUWIRE_PROC_NULL receive: GPUWIRE_PROC_NULL,
    /// GPUWIRE_ANY_TAG, 0 elements, as MPI). The request takes `buf`.
    pub fn irecv(self: &Arc<Self>, buf: Arc<Buffer>, source: i32, tag: i32, upto: bool, stream: Stream) -> Result<Request> {
        let (pending, s) = self.start_irecv(&buf, source, tag, upto, stream)?;
        Ok(Request::of_one(pending, self.clone(), buf).with_status(s))
    }

    /// [`Self::irecv`]'s operation, posted, and the status its request reports when the path
    /// reports none, for a request that the caller makes (as [`Self::start_isend`]).
    pub(crate) fn start_irecv(&self, buf: &Arc<Buffer>, source: i32, tag: i32, upto: bool, stream: Stream) -> Result<(Box<dyn crate::request::Pending>, crate::request::Status)> {
        self.ensure_usable()?;
        self.check_source_tag("irecv", source, tag)?;
        self.check_wildcard_path("irecv", buf, source, tag)?;
        let (source, tag) = (recv_source(source), recv_tag(tag));
        if source == PROC_NULL {
            return Ok((Box::new(Done), crate::request::Status { source: PROC_NULL, tag: ANY_TAG, count: 0, cancelled: false }));
        }
        let path = self.path(Operation::Irecv, &[Some(buf)])?;
        let pending = if upto { path.irecv_upto(self, buf, source, tag, stream)? } else { path.irecv(self, buf, source, tag, stream)? };
        // Paths without wildcards report nothing: the source and tag are the given ones.
        Ok((pending, crate::request::Status { source, tag, count: buf.count() as i64, cancelled: false }))
    }

    /// As MPI_Sendrecv (either side may be GPUWIRE_PROC_NULL).
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv(&self, send: &Buffer, dest: i32, sendtag: i32, recv: &Buffer, source: i32, recvtag: i32, stream: Stream) -> Result<()> {
        self.sendrecv_on(None, send, dest, sendtag, recv, source, recvtag, stream)
    }

    /// [`Self::sendrecv`] on `path`, as [`Self::send_on`] (`lean::sendrecv`).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn sendrecv_on(&self, path: Option<&'static dyn Path>, send: &Buffer, dest: i32, sendtag: i32, recv: &Buffer, source: i32, recvtag: i32, stream: Stream) -> Result<()> {
        let _call = self.enter("sendrecv", false)?;
        self.check_rank("sendrecv", "destination", dest, true)?;
        self.check_tag("sendrecv", sendtag)?;
        self.check_source_tag("sendrecv", source, recvtag)?;
        self.check_wildcard_path("sendrecv", recv, source, recvtag)?;
        let (dest, source, recvtag) = (peer(dest), recv_source(source), recv_tag(recvtag));
        if send.overlaps(recv) {
            return Err(Error::InvalidArgument("sendrecv: the send and receive buffers overlap".into()));
        }
        let p = self.path_or(path, Operation::Sendrecv, &[Some(send), Some(recv)])?;
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
        let local = (|| {
            let input = allreduce_args(send, recv, op)?;
            Ok((input, self.reduce_path(Operation::Allreduce, send.dtype(), op, &[Some(send), Some(recv)])?))
        })();
        let sig = Sig { count: Some(recv.count()), dtype: Some(recv.dtype()), op: Some(op), ..Sig::default() }
            .with_bufs(&[Some(send), Some(recv)])
            .in_place_of(local.as_ref().ok().map(|l| &l.0), send);
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
        let sig = Sig { count: Some(recv.count()), dtype: Some(recv.dtype()), op: Some(op), ..Sig::default() }
            .with_bufs(&[Some(send), Some(recv)])
            .in_place_of(local.as_ref().ok().map(|l| &l.0), send);
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
        let sig = Sig { count: Some(n), dtype: Some(send.dtype()), ..Sig::default() }
            .with_bufs(&[Some(send), Some(recv)])
            .in_place_of(local.as_ref().ok().map(|l| &l.0), send);
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
        let sig = Sig { count: Some(counts.iter().map(|c| *c as usize).fold(0usize, usize::wrapping_add)), dtype: Some(send.dtype()), ..Sig::default() }
            .with_bufs(&[Some(send), Some(recv)])
            .in_place_of(local.as_ref().ok().map(|l| &l.0), send);
        (sig, local)
    }

    /// As MPI_Allgatherv with blocks placed contiguously in rank order (no padding).
    /// `counts[r]` is rank r's element count; `None` exchanges the counts first (one extra
    /// MPI_Allgather). In-place when `send` is exactly this rank's block of `recv`.
    pub fn allgatherv(&self, send: &Buffer, recv: &Buffer, counts: Option<&[i64]>, stream: Stream) -> Result<()> {
        let what = "allgatherv";
        let _call = self.enter(what, true)?;
        let size = self.size() as usize;
        let given = counts.is_some();
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
        if given {
            // (Counts gpuwire exchanged are the same on every rank by construction.)
            self.agree_counts(what, &ucounts)?;
        }
        path.allgatherv(self, input, recv, &ucounts, stream)
    }

    /// Checking mode: fails with COUNT_MISMATCH on every rank unless every rank passed the same
    /// `recvcounts` (the MAX of each entry and of its negation across ranks).
    fn agree_counts(&self, what: &str, counts: &[usize]) -> Result<()> {
        if !self.config().check {
            return Ok(());
        }
        let mut v: Vec<i64> = counts.iter().map(|n| *n as i64).chain(counts.iter().map(|n| -(*n as i64))).collect();
        self.allreduce_max_i64(&mut v, what)?;
        let p = counts.len();
        if let Some(j) = (0..p).find(|&j| v[j] != -v[p + j]) {
            return Err(count_mismatch(
                what,
                format!("ranks passed different recvcounts (recvcounts[{j}] from {} to {}; this rank {}); nothing was done on any rank", -v[p + j], v[j], counts[j]),
            ));
        }
        Ok(())
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

impl Communicator {
    /// Checking mode's agreement of a v-collective's count matrix (after `agree`): `sends[j]`
    /// elements go from this rank to rank j, `recvs[j]` are expected from rank j. One
    /// MPI_Alltoall of the send counts, then every rank returns the error of the lowest rank that
    /// found a mismatch (NCCL would hang or corrupt on one, NVIDIA/nccl#788).
    fn agree_matrix(&self, what: &str, sends: &[usize], recvs: &[usize]) -> Result<()> {
        if !self.config().check {
            return Ok(());
        }
        let mine: Vec<i64> = sends.iter().map(|n| *n as i64).collect();
        let mut got = vec![0i64; sends.len()];
        // One int64 to and from each rank.
        let r = crate::comm::collective!(
            self,
            "MPI_Alltoall (checking the count matrix)",
            MPI_Alltoall(mine.as_ptr().cast(), 1, sys::RSMPI_INT64_T, got.as_mut_ptr().cast(), 1, sys::RSMPI_INT64_T, self.raw()),
            MPI_Ialltoall
        );
        if r.is_err() {
            // An abandoned request (a timeout) may still use both.
            std::mem::forget((mine, got));
            return r;
        }
        let me = self.rank();
        let local = match got.iter().zip(recvs).enumerate().find(|(_, (g, r))| **g != **r as i64) {
            None => Ok(()),
            Some((j, (g, r))) => Err(count_mismatch(
                what,
                format!("rank {me} expects {r} elements from rank {j}, which sends it {g}; nothing was done on any rank"),
            )),
        };
        self.agree_on_result(local, what)
    }

    #[allow(clippy::type_complexity)]
    pub(crate) fn plan_alltoallv<'a>(&self, send: &'a Buffer, sendl: &Layout, recv: &Buffer, recvl: &Layout) -> (Sig, Result<(Input<'a>, OwnedBlocks, OwnedBlocks, &'static dyn Path)>) {
        let what = "alltoallv";
        let p = self.size() as usize;
        let local = (|| {
            same_dtype(what, send, recv)?;
            let rb = layout(what, "recv", recvl, p, recv.count(), true)?;
            if same_memory(what, send, recv)? {
                return Ok((Input::InPlace, rb.clone(), rb, self.path(Operation::Alltoallv, &[Some(recv)])?));
            }
            let sb = layout(what, "send", sendl, p, send.count(), false)?;
            Ok((Input::Buf(send), sb, rb, self.path(Operation::Alltoallv, &[Some(send), Some(recv)])?))
        })();
        let sig = Sig { dtype: Some(recv.dtype()), ..Sig::default() }.with_bufs(&[Some(send), Some(recv)]);
        (sig, local)
    }

    /// As MPI_Alltoallv: block j of `send` (`sendl`) goes to rank j, rank j's block is received
    /// into block j of `recv` (`recvl`). In place (MPI_IN_PLACE) when `send` is `recv`'s memory:
    /// the send blocks are then the receive blocks, and `sendl` is ignored.
    pub fn alltoallv(&self, send: &Buffer, sendl: &Layout, recv: &Buffer, recvl: &Layout, stream: Stream) -> Result<()> {
        let what = "alltoallv";
        let _call = self.enter(what, true)?;
        let (sig, local) = self.plan_alltoallv(send, sendl, recv, recvl);
        let (input, sb, rb, path) = self.agree(what, sig, local)?;
        self.agree_matrix(what, &sb.counts, &rb.counts)?;
        path.alltoallv(self, input, sb.view(), recv, rb.view(), stream)
    }

    #[allow(clippy::type_complexity)]
    pub(crate) fn plan_gatherv<'a>(&self, send: &'a Buffer, recv: Option<&'a Buffer>, recvl: &Layout, root: i32) -> (Sig, Result<(Input<'a>, Option<(&'a Buffer, OwnedBlocks)>, &'static dyn Path)>) {
        let what = "gatherv";
        let is_root = self.rank() == root;
        let local = (|| {
            self.check_rank(what, "root", root, false)?;
            if !is_root {
                return Ok((Input::Buf(send), None, self.path(Operation::Gatherv, &[Some(send)])?));
            }
            let Some(r) = recv else { return Err(Error::InvalidArgument(format!("{what}: the root needs a receive buffer"))) };
            same_dtype(what, send, r)?;
            let rb = layout(what, "recv", recvl, self.size() as usize, r.count(), true)?;
            let me = root as usize;
            if send.count() != rb.counts[me] {
                return Err(count_mismatch(what, format!("recvcounts[{me}] = {} but the root sends {} elements", rb.counts[me], send.count())));
            }
            let input = input(what, send, r, rb.displs[me])?;
            Ok((input, Some((r, rb)), self.path(Operation::Gatherv, &[Some(send), Some(r)])?))
        })();
        let sig = Sig { dtype: Some(send.dtype()), root: Some(root), ..Sig::default() }.with_bufs(&[Some(send), if is_root { recv } else { None }]);
        (sig, local)
    }

    /// As MPI_Gatherv: rank j's `send` lands in block j of the root's `recv` (`recvl`, significant
    /// at the root only; others may pass `None`). In place at the root when its `send` is exactly
    /// its own block of `recv`.
    pub fn gatherv(&self, send: &Buffer, recv: Option<&Buffer>, recvl: &Layout, root: i32, stream: Stream) -> Result<()> {
        let what = "gatherv";
        let _call = self.enter(what, true)?;
        let (sig, local) = self.plan_gatherv(send, recv, recvl, root);
        let (input, at_root, path) = self.agree(what, sig, local)?;
        if self.config().check {
            let p = self.size() as usize;
            let mut sends = vec![0; p];
            sends[root as usize] = send.count();
            let recvs = at_root.as_ref().map_or(vec![0; p], |(_, b)| b.counts.clone());
            self.agree_matrix(what, &sends, &recvs)?;
        }
        match &at_root {
            Some((r, b)) => path.gatherv(self, input, Some(r), Some(b.view()), root, stream),
            None => path.gatherv(self, input, None, None, root, stream),
        }
    }

    #[allow(clippy::type_complexity)]
    pub(crate) fn plan_scatterv<'a>(&self, send: Option<&'a Buffer>, sendl: &Layout, recv: &'a Buffer, root: i32) -> (Sig, Result<(Input<'a>, Option<(&'a Buffer, OwnedBlocks)>, &'static dyn Path)>) {
        let what = "scatterv";
        let is_root = self.rank() == root;
        let local = (|| {
            self.check_rank(what, "root", root, false)?;
            if !is_root {
                return Ok((Input::Buf(recv), None, self.path(Operation::Scatterv, &[Some(recv)])?));
            }
            let Some(s) = send else { return Err(Error::InvalidArgument(format!("{what}: the root needs a send buffer"))) };
            same_dtype(what, s, recv)?;
            let sb = layout(what, "send", sendl, self.size() as usize, s.count(), false)?;
            let me = root as usize;
            if recv.count() != sb.counts[me] {
                return Err(count_mismatch(what, format!("sendcounts[{me}] = {} but the root receives {} elements", sb.counts[me], recv.count())));
            }
            let rinput = input(what, recv, s, sb.displs[me])?;
            Ok((rinput, Some((s, sb)), self.path(Operation::Scatterv, &[Some(s), Some(recv)])?))
        })();
        let sig = Sig { dtype: Some(recv.dtype()), root: Some(root), ..Sig::default() }.with_bufs(&[if is_root { send } else { None }, Some(recv)]);
        (sig, local)
    }

    /// As MPI_Scatterv: block j of the root's `send` (`sendl`, significant at the root only;
    /// others may pass `None`) lands in rank j's `recv`. In place at the root when its `recv` is
    /// exactly its own block of `send`.
    pub fn scatterv(&self, send: Option<&Buffer>, sendl: &Layout, recv: &Buffer, root: i32, stream: Stream) -> Result<()> {
        let what = "scatterv";
        let _call = self.enter(what, true)?;
        let (sig, local) = self.plan_scatterv(send, sendl, recv, root);
        let (rinput, at_root, path) = self.agree(what, sig, local)?;
        if self.config().check {
            let p = self.size() as usize;
            let mut recvs = vec![0; p];
            recvs[root as usize] = recv.count();
            let sends = at_root.as_ref().map_or(vec![0; p], |(_, b)| b.counts.clone());
            self.agree_matrix(what, &sends, &recvs)?;
        }
        match &at_root {
            Some((s, b)) => path.scatterv(self, Some(s), Some(b.view()), rinput, root, stream),
            None => path.scatterv(self, None, None, rinput, root, stream),
        }
    }

    pub(crate) fn plan_reduce_scatterv<'a>(&self, send: &'a Buffer, recv: &Buffer, counts: Option<&[i64]>, op: ReduceOp) -> (Sig, Result<(Input<'a>, Vec<usize>, &'static dyn Path)>) {
        let what = "reduce_scatterv";
        let p = self.size() as usize;
        let local = (|| {
            let dtype = same_dtype(what, send, recv)?;
            op.check_supported(dtype)?;
            let Some(counts) = counts else { return Err(Error::InvalidArgument(format!("{what}: recvcounts is NULL"))) };
            let l = Layout { counts: Some(counts.to_vec()), displs: None };
            let in_place = same_memory(what, send, recv)?;
            let total = counts.iter().try_fold(0i64, |t, c| if *c < 0 { None } else { t.checked_add(*c) });
            if total.is_none() && counts.iter().all(|c| *c >= 0) {
                return Err(count_mismatch(what, format!("the recvcounts add up to more than {} elements but the send buffer holds {}", i64::MAX, send.count())));
            }
            let b = layout(what, "recv", &l, p, total.and_then(|t| usize::try_from(t).ok()).unwrap_or(usize::MAX), false)?;
            let total: usize = b.counts.iter().sum();
            let me = self.rank() as usize;
            if send.count() != total {
                return Err(count_mismatch(what, format!("the recvcounts add up to {total} elements but the send buffer holds {}", send.count())));
            }
            if !in_place && recv.count() != b.counts[me] {
                return Err(count_mismatch(what, format!("recvcounts[{me}] = {} but the receive buffer holds {} elements", b.counts[me], recv.count())));
            }
            let input = if in_place { Input::InPlace } else { Input::Buf(send) };
            Ok((input, b.counts, self.reduce_path(Operation::ReduceScatterv, recv.dtype(), op, &[Some(send), Some(recv)])?))
        })();
        let sig = Sig { dtype: Some(recv.dtype()), op: Some(op), ..Sig::default() }.with_bufs(&[Some(send), Some(recv)]);
        (sig, local)
    }

    /// As MPI_Reduce_scatter: every rank's `send` holds the sum of `counts` elements; rank r
    /// receives the reduction of block r (`counts[r]` elements, blocks contiguous in rank order)
    /// in `recv`. In place (MPI_IN_PLACE) when `send` is `recv`'s memory: the result is then in
    /// its first `counts[rank]` elements. Checking mode agrees `counts` across ranks.
    pub fn reduce_scatterv(&self, send: &Buffer, recv: &Buffer, counts: Option<&[i64]>, op: ReduceOp, stream: Stream) -> Result<()> {
        let what = "reduce_scatterv";
        let _call = self.enter(what, true)?;
        let (sig, local) = self.plan_reduce_scatterv(send, recv, counts, op);
        let (input, ucounts, path) = self.agree(what, sig, local)?;
        self.agree_counts(what, &ucounts)?;
        path.reduce_scatterv(self, input, recv, &ucounts, op, stream)
    }
}

/// A request that is complete from the start (operations with GPUWIRE_PROC_NULL).
pub(crate) struct Done;

impl crate::request::Pending for Done {
    fn always_ready(&self) -> bool {
        true
    }
    fn wait(&mut self) -> Result<()> {
        Ok(())
    }
    fn test(&mut self) -> Result<bool> {
        Ok(true)
    }
}
