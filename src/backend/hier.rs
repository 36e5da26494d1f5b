//! HIER: the hierarchical path of a communicator whose ranks span nodes, built from two gpuwire
//! communicators of its own, each with the backend its own registry chose: the node communicator
//! (the ranks of this rank's node: CUDA IPC between them on device memory) and, on each node's
//! leader (node-local rank 0), the leaders communicator (one rank per node: MPI_STAGED, or
//! MPI_CUDA_AWARE when the MPI is). An operation is the node's part onto the leader, the
//! leaders' collective, then the node's part back, each an ordinary operation of those
//! communicators (validated, routed and run as the program's own calls are): no data movement
//! of its own.
//!
//! | operation | on each node | between the leaders | on each node |
//! | --- | --- | --- | --- |
//! | allreduce | reduce onto the leader | allreduce in place | bcast from the leader |
//! | bcast | (root's node) bcast from the root | bcast from the root's leader | bcast from the leader |
//! | reduce | reduce onto the leader | reduce onto the root's leader | (root's node) leader sends to the root |
//! | allgather | gather onto the leader | allgatherv of the node blocks in place | bcast |
//! | allgatherv | allgatherv of the node's block | allgatherv of the node blocks in place | bcast |
//! | reduce_scatter_block | reduce onto the leader | reduce_scatterv of the node blocks | scatter |
//!
//! Each node's ranks are consecutive in rank order (an eligibility condition), so a node's blocks
//! of an allgather or a reduce_scatter are one contiguous block in rank order, and the leaders
//! (ordered by rank) hold them in the parent's order: the results are placed exactly as the flat
//! paths place them. Reductions combine in another order than the flat paths (each node first,
//! then the nodes): exact for integers, bitwise and logical ops, MIN/MAX/MINLOC/MAXLOC; a
//! floating-point sum or product may differ from a flat path's in its last bits (as between MPI
//! algorithms), and is the same on every rank (the leader's result is broadcast).
//!
//! Streams: each step runs on the call's stream, as the program's own calls on that stream would,
//! so each starts after the one before it (IPC synchronizes the stream first; the staged path is
//! stream-ordered).
//!
//! Between the leaders, device memory reaches the MPI only where the MPI moves it without
//! reducing it ([`exchange`]): with CUDA-aware leaders, bcast and allgatherv hand the MPI device
//! pointers; every reduction (allreduce, reduce, reduce_scatterv) takes MPI_STAGED's path on the
//! leaders communicator instead (device to pinned host memory, MPI on the host copies, back to the
//! device; large ones a ring of staged exchanges combined by GPU kernels), so no MPI ever applies
//! an operation, its own or gpuwire's (float16, AVG, ...), to device memory.

use std::ffi::c_int;

use crate::backend::path::{Blocks, Input, Path};
use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::device::Stream;
use crate::error::{Error, Result};
use crate::mpisys::{self, sys};
use crate::request::Pending;
use crate::types::{BackendKind, ReduceOp};
use crate::view::Scratch;

/// How the leaders' step of a call on device memory moves it between the nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exchange {
    /// The leaders communicator's own path (NCCL: on the device; MPI_STAGED: through host memory;
    /// MPI_CUDA_AWARE: device pointers to the MPI).
    Own,
    /// MPI_STAGED's path on the leaders communicator: the MPI sees host memory only.
    Staged,
}

/// The leaders' exchange, for leaders whose backend is `leaders`, of a step that reduces
/// (`reducing`: allreduce, reduce, reduce_scatterv) or only moves data (bcast, allgatherv). A
/// CUDA-aware MPI reduces device memory with its predefined operations on predefined datatypes
/// at best (gpuwire's own MPI operations, for float16, bfloat16 and the ops an MPI gets wrong,
/// run on the host and cannot read it), so every reduction between CUDA-aware leaders is staged;
/// NCCL reduces on the device itself, MPI_STAGED stages already.
pub(crate) fn exchange(leaders: BackendKind, reducing: bool) -> Exchange {
    if reducing && leaders == BackendKind::GPUWIRE_BACKEND_MPI_CUDA_AWARE { Exchange::Staged } else { Exchange::Own }
}

/// The words of the leaders' exchange in `gpuwire_comm_describe` (after "X between leaders").
pub(crate) fn exchange_words(leaders: BackendKind) -> &'static str {
    match exchange(leaders, true) {
        Exchange::Staged => ", their reductions staged through host memory (device pointers for bcast and allgatherv only)",
        Exchange::Own => "",
    }
}

/// The tag of the message that carries a reduce's result from the root's leader to the root
/// (on the private node communicator: no other message uses it).
const TO_ROOT: i32 = 1;

/// The layout of a communicator's ranks on nodes, from every rank's node-local rank and size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// The first rank of each node, in rank order (the leaders'), and its rank count.
    pub first: Vec<usize>,
    pub sizes: Vec<usize>,
}

impl Layout {
    /// From (node-local rank, node-local size) of every rank, in rank order: the nodes, or why
    /// the ranks of a node are not consecutive.
    pub(crate) fn of(locals: &[(i32, i32)]) -> std::result::Result<Layout, String> {
        let (mut first, mut sizes) = (Vec::new(), Vec::new());
        for (r, &(l, n)) in locals.iter().enumerate() {
            if l == 0 {
                if let (Some(f), Some(s)) = (first.last(), sizes.last()) {
                    if r - f != *s {
                        return Err(format!("the ranks of each node are not consecutive in rank order (the node of rank {f} has {s} ranks, but another node's first rank is rank {r}, after {} of them)", r - f));
                    }
                }
                first.push(r);
                sizes.push(n.max(1) as usize);
            } else if first.last().is_none_or(|f| r - f != l as usize) {
                return Err(format!("the ranks of each node are not consecutive in rank order (rank {r} is node-local rank {l})"));
            }
        }
        if let (Some(f), Some(s)) = (first.last(), sizes.last()) {
            if locals.len() - f != *s {
                return Err(format!("the ranks of each node are not consecutive in rank order (the node of rank {f} has {s} ranks)"));
            }
        }
        Ok(Layout { first, sizes })
    }

    /// The node of rank `r`.
    fn node_of(&self, r: usize) -> usize {
        self.first.partition_point(|f| *f <= r) - 1
    }
}

/// Collective over `c`: whether HIER can be used, with its words (the nodes), or why not.
/// `cuda`: this process has CUDA with devices; without, HIER is for host memory and is taken only
/// when requested.
pub(crate) fn eligible(c: &Communicator, cuda: bool) -> Result<std::result::Result<String, String>> {
    let layout = layout(c)?;
    let nodes = layout.as_ref().map_or(0, |l| l.first.len());
    let most = layout.as_ref().map_or(0, |l| l.sizes.iter().copied().max().unwrap_or(0));
    Ok(match layout {
        Err(why) => Err(why),
        Ok(_) if nodes < 2 => Err("the ranks are all on one node".into()),
        Ok(_) if most < 2 => Err("every node has one rank".into()),
        Ok(_) if !cuda && c.config().backend == BackendKind::GPUWIRE_BACKEND_AUTO => Err("no CUDA".into()),
        Ok(_) => Ok(format!("{nodes} nodes of up to {most} ranks")),
    })
}

/// Collective over `c`: the layout of its ranks on nodes (every rank learns every rank's
/// node-local rank and size).
fn layout(c: &Communicator) -> Result<std::result::Result<Layout, String>> {
    let mine: [c_int; 2] = [c.local_rank(), c.local_size()];
    let mut all = vec![0 as c_int; 2 * c.size() as usize];
    // SAFETY: two ints from every rank into `all` (2 x size entries).
    mpisys::check(
        unsafe { sys::MPI_Allgather(mine.as_ptr().cast(), 2, sys::RSMPI_INT32_T, all.as_mut_ptr().cast(), 2, sys::RSMPI_INT32_T, c.raw()) },
        "MPI_Allgather (node-local rank and size of every rank)",
    )?;
    let locals: Vec<(i32, i32)> = all.chunks(2).map(|x| (x[0], x[1])).collect();
    Ok(Layout::of(&locals))
}

/// The state of a HIER communicator: its node communicator, its leaders communicator (on the
/// leaders), and the layout.
pub(crate) struct HierState {
    node: Communicator,
    leaders: Option<Communicator>,
    layout: Layout,
    /// This rank's node.
    me: usize,
    /// The flat path (the registry's fallback of HIER) that device calls of fewer bytes than
    /// `min_bytes` take (`GPUWIRE_HIER_MIN_BYTES`, agreed by every rank): there one exchange
    /// costs less than three steps.
    flat: &'static dyn Path,
    min_bytes: usize,
    /// MPI_STAGED's path, and whether the leaders' reductions on device memory take it
    /// ([`exchange`]; on the leaders).
    staged: &'static dyn Path,
    stage_reductions: bool,
}

impl HierState {
    /// `backend::freed_while_held` of the node and leaders communicators, which are released
    /// with this one.
    pub(crate) fn freed_while_held(&self) {
        crate::backend::freed_while_held(&self.node);
        if let Some(l) = &self.leaders {
            crate::backend::freed_while_held(l);
        }
    }

    /// Collective over `c` (every rank agreed on HIER): makes the node and leaders communicators,
    /// each choosing its own backend under AUTO (with `c`'s timeout, device and staging;
    /// checking mode is `c`'s, done before the parts start), broken when `c` is. `staged`:
    /// MPI_STAGED's path, for the leaders' reductions where [`exchange`] says so.
    pub(crate) fn new(c: &Communicator, flat: &'static dyn Path, staged: &'static dyn Path) -> Result<HierState> {
        let layout = layout(c)?.map_err(|why| Error::BackendUnavailable(format!("HIER: {why}")))?;
        let shared = crate::backend::topology::shared_gpus(c, (c.device() >= 0).then_some(c.device()))?.is_some();
        // A value that is not a number is -1 here: every rank then fails (this one with its own
        // error), none is left in HIER's setup.
        let local = crate::config::hier_min_bytes(shared);
        let m = local.as_ref().map_or(-1, |b| i64::try_from(*b).unwrap_or(i64::MAX));
        let mut v = [m, -m];
        c.allreduce_max_i64(&mut v, "agreeing on GPUWIRE_HIER_MIN_BYTES")?;
        let min_bytes = local?;
        if v[1] == 1 {
            return Err(Error::InvalidArgument("another rank's GPUWIRE_HIER_MIN_BYTES is not a number of bytes >= 0 (its error says which)".into()));
        }
        if v[0] != -v[1] {
            return Err(Error::InvalidArgument(format!(
                "the ranks have different GPUWIRE_HIER_MIN_BYTES (from {} to {}): set it the same on every rank",
                -v[1], v[0]
            )));
        }
        let mut config = c.config().clone();
        config.backend = BackendKind::GPUWIRE_BACKEND_AUTO;
        config.check = false;
        if c.device() >= 0 {
            config.device = c.device();
        }
        // Both MPI communicators first, on every rank (collective over `c`), then each level's
        // creation, its outcome agreed over `c` after each, so no rank is left in a collective
        // that another rank gave up before.
        let mut dup = mpisys::comm_null();
        // SAFETY: the node communicator of `c` is valid; `dup` is gpuwire's (adopt frees it).
        let made = mpisys::check(unsafe { sys::MPI_Comm_dup(c.node_comm(), &mut dup) }, "MPI_Comm_dup (HIER's node communicator)");
        let lead = c.local_rank() == 0;
        let mut out = mpisys::comm_null();
        let color = if lead { 0 } else { mpisys::undefined() };
        // SAFETY: raw is valid; `out` is gpuwire's (adopt frees it) or MPI_COMM_NULL.
        let split = mpisys::check(unsafe { sys::MPI_Comm_split(c.raw(), color, c.rank(), &mut out) }, "MPI_Comm_split (HIER's leaders)");
        let free = |mut x: mpisys::MPI_Comm| {
            if x != mpisys::comm_null() {
                // SAFETY: made above for HIER, used nowhere else.
                unsafe { sys::MPI_Comm_free(&mut x) };
            }
        };
        if let Err(e) = c.agree_on_result(made.and(split), "making HIER's MPI communicators") {
            free(dup);
            free(out);
            return Err(e);
        }
        let node = match c.agree_on_result(Communicator::adopt(dup, Ok(config.clone())), "making HIER's node communicator") {
            Ok(n) => n,
            Err(e) => {
                free(out);
                return Err(e);
            }
        };
        let leaders = if lead { Some(Communicator::adopt(out, Ok(config))) } else { None };
        let leaders = c.agree_on_result(leaders.transpose(), "making HIER's leaders communicator")?;
        let (mut node, mut leaders) = (node, leaders);
        node.broken = c.broken.clone();
        if let Some(l) = leaders.as_mut() {
            l.broken = c.broken.clone();
        }
        let me = layout.node_of(c.rank() as usize);
        let stage_reductions = leaders.as_ref().is_some_and(|l| exchange(l.backend(), true) == Exchange::Staged);
        Ok(HierState { node, leaders, layout, me, flat, min_bytes, staged, stage_reductions })
    }

    /// The backend of this rank's node communicator.
    pub(crate) fn node_backend(&self) -> BackendKind {
        self.node.backend()
    }

    /// The backend of the leaders communicator (on a leader).
    pub(crate) fn leaders_backend(&self) -> Option<BackendKind> {
        self.leaders.as_ref().map(|l| l.backend())
    }

    /// The number of nodes.
    pub(crate) fn nodes(&self) -> usize {
        self.layout.first.len()
    }

    fn leaders(&self) -> Result<&Communicator> {
        self.leaders.as_ref().ok_or_else(|| Error::Internal("HIER: a leaders' step on a rank that is not its node's leader".into()))
    }

    /// The flat path for a device call of `bytes` (the same on every rank) below `min_bytes`.
    fn small(&self, b: &Buffer, bytes: usize) -> Option<&'static dyn Path> {
        (!b.is_host() && bytes < self.min_bytes).then_some(self.flat)
    }

    fn lead(&self) -> bool {
        self.leaders.is_some()
    }

    /// On a leader, for a reduction on `b` that takes MPI_STAGED's path ([`exchange`]: device
    /// memory between CUDA-aware leaders): the call entered on the leaders communicator, as its
    /// own calls are (its deadline, its broken state); else None (the leaders' own call).
    fn staged_reduction(&self, b: &Buffer, what: &str) -> Result<Option<crate::comm::CallGuard<'_>>> {
        if !self.stage_reductions || b.is_host() {
            return Ok(None);
        }
        self.leaders()?.enter(what, true).map(Some)
    }

    /// The leaders' reduce onto leader `root`, in place there (`at_root`: `b` is the receive
    /// buffer), else from `b`.
    fn leaders_reduce(&self, b: &Buffer, at_root: bool, op: ReduceOp, root: i32, stream: Stream) -> Result<()> {
        let l = self.leaders()?;
        if let Some(_call) = self.staged_reduction(b, "reduce")? {
            let p = self.staged;
            return if at_root { p.reduce(l, Input::InPlace, Some(b), op, root, stream) } else { p.reduce(l, Input::Buf(b), None, op, root, stream) };
        }
        l.reduce(b, at_root.then_some(b), op, root, stream)
    }

    /// The leaders' allreduce in place.
    fn leaders_allreduce(&self, b: &Buffer, op: ReduceOp, stream: Stream) -> Result<()> {
        let l = self.leaders()?;
        if let Some(_call) = self.staged_reduction(b, "allreduce")? {
            return self.staged.allreduce(l, Input::InPlace, b, op, stream);
        }
        l.allreduce(b, b, op, stream)
    }

    /// The leaders' reduce_scatterv in place (`counts` per leader: its result lands in `b`'s
    /// first elements).
    fn leaders_reduce_scatterv(&self, b: &Buffer, counts: &[usize], op: ReduceOp, stream: Stream) -> Result<()> {
        let l = self.leaders()?;
        if let Some(_call) = self.staged_reduction(b, "reduce_scatterv")? {
            return self.staged.reduce_scatterv(l, Input::InPlace, b, counts, op, stream);
        }
        l.reduce_scatterv(b, b, Some(&counts_i64(counts)?), op, stream)
    }

    /// Node-local rank of `r` and its node.
    fn place(&self, r: usize) -> (usize, i32) {
        let k = self.layout.node_of(r);
        (k, (r - self.layout.first[k]) as i32)
    }
}

fn state(c: &Communicator) -> Result<&HierState> {
    c.backend_state.get::<HierState>().ok_or_else(|| Error::Internal("HIER path on a communicator without its state".into()))
}

/// Scratch of `like`'s count, datatype and memory kind (from the process-wide scratch cache of
/// `crate::view`, so repeated calls allocate nothing).
fn scratch(like: &Buffer, stream: Stream) -> Result<Scratch> {
    Scratch::for_view(like, stream)
}

/// AVG is SUM on both levels, then one division by the communicator's size where the result is
/// complete (as the flat paths: the sum formed in the datatype, then divided). Host memory only:
/// the registry sends AVG on device memory to the fallback.
fn sum_for_avg(op: ReduceOp) -> (ReduceOp, bool) {
    if op == ReduceOp::GPUWIRE_AVG { (ReduceOp::GPUWIRE_SUM, true) } else { (op, false) }
}

fn divide(c: &Communicator, b: &Buffer) -> Result<()> {
    if !b.is_host() {
        return Err(Error::Internal("HIER: AVG on device memory is the fallback's".into()));
    }
    // SAFETY: host-accessible memory of b.count() elements, written by this call's last step.
    unsafe { crate::reduce::divide(b.dtype(), b.ptr() as *mut u8, b.count(), c.size() as usize) }
}

/// Whether HIER reduces (`dtype`, `op`) on device memory itself: all but AVG (one division of
/// the whole sum, which the node's and leaders' AVG would not give).
pub(crate) fn reduces(_: crate::types::Dtype, op: ReduceOp) -> bool {
    op != ReduceOp::GPUWIRE_AVG
}

/// Frees scratch `t` after its steps, unless they failed: a step abandoned at a timeout may leave
/// MPI a request that still uses it (leaked, as the MPI paths leak theirs).
fn kept(t: Scratch, done: Result<()>) -> Result<()> {
    if done.is_err() {
        std::mem::forget(t);
    }
    done
}

/// `n` x `per` as a count, checked.
fn times(n: usize, per: usize) -> Result<usize> {
    n.checked_mul(per).ok_or_else(|| Error::InvalidArgument(format!("HIER: {n} x {per} elements overflow")))
}

/// As i64 counts (the communicators' operations take the C API's counts).
fn counts_i64(v: &[usize]) -> Result<Vec<i64>> {
    v.iter().map(|n| i64::try_from(*n).map_err(|_| Error::InvalidArgument(format!("HIER: a count of {n} elements overflows")))).collect()
}

fn not_routed(what: &str) -> Error {
    Error::Internal(format!("HIER: {what} is not routed to the hierarchical path (the registry sends it to the fallback)"))
}

/// The hierarchical path.
pub struct HierPath;

impl Path for HierPath {
    fn send(&self, _: &Communicator, _: &Buffer, _: i32, _: i32, _: Stream) -> Result<()> {
        Err(not_routed("send"))
    }
    fn recv(&self, _: &Communicator, _: &Buffer, _: i32, _: i32, _: Stream) -> Result<()> {
        Err(not_routed("recv"))
    }
    fn isend(&self, _: &Communicator, _: &Buffer, _: i32, _: i32, _: Stream) -> Result<Box<dyn Pending>> {
        Err(not_routed("isend"))
    }
    fn irecv(&self, _: &Communicator, _: &Buffer, _: i32, _: i32, _: Stream) -> Result<Box<dyn Pending>> {
        Err(not_routed("irecv"))
    }
    fn sendrecv(&self, _: &Communicator, _: &Buffer, _: i32, _: i32, _: &Buffer, _: i32, _: i32, _: Stream) -> Result<()> {
        Err(not_routed("sendrecv"))
    }
    fn barrier(&self, _: &Communicator, _: Stream) -> Result<()> {
        Err(not_routed("barrier"))
    }

    fn bcast(&self, c: &Communicator, buf: &Buffer, root: i32, stream: Stream) -> Result<()> {
        let st = state(c)?;
        if let Some(p) = st.small(buf, buf.bytes()) {
            return p.bcast(c, buf, root, stream);
        }
        let (k, l) = st.place(root as usize);
        if st.me == k {
            st.node.bcast(buf, l, stream)?;
        }
        if st.lead() {
            st.leaders()?.bcast(buf, k as i32, stream)?;
        }
        if st.me != k {
            st.node.bcast(buf, 0, stream)?;
        }
        Ok(())
    }

    fn reduce(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, op: ReduceOp, root: i32, stream: Stream) -> Result<()> {
        let st = state(c)?;
        let (k, l) = st.place(root as usize);
        let (op, avg) = sum_for_avg(op);
        let at_root = |r: &Buffer| if avg { divide(c, r) } else { Ok(()) };
        let s = match (send, recv) {
            (Input::Buf(b), _) => b,
            (Input::InPlace, Some(r)) => r,
            (Input::InPlace, None) => return Err(Error::Internal("HIER reduce: in place without a receive buffer".into())),
        };
        if let Some(p) = st.small(s, s.bytes()) {
            return p.reduce(c, send, recv, if avg { ReduceOp::GPUWIRE_AVG } else { op }, root, stream);
        }
        if !st.lead() {
            st.node.reduce(s, None, op, 0, stream)?;
            if st.me == k && c.rank() == root {
                let r = recv.ok_or_else(|| Error::Internal("HIER reduce: the root has no receive buffer".into()))?;
                st.node.recv(r, 0, TO_ROOT, stream)?;
                at_root(r)?;
            }
            return Ok(());
        }
        if c.rank() == root {
            let r = recv.ok_or_else(|| Error::Internal("HIER reduce: the root has no receive buffer".into()))?;
            st.node.reduce(s, Some(r), op, 0, stream)?;
            st.leaders_reduce(r, true, op, k as i32, stream)?;
            return at_root(r);
        }
        let scr = scratch(s, stream)?;
        let t: &Buffer = scr.buf();
        let done = (|| {
            st.node.reduce(s, Some(t), op, 0, stream)?;
            if st.me == k {
                st.leaders_reduce(t, true, op, k as i32, stream)?;
                st.node.send(t, l, TO_ROOT, stream)
            } else {
                st.leaders_reduce(t, false, op, k as i32, stream)
            }
        })();
        kept(scr, done)
    }

    fn allreduce(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<()> {
        let st = state(c)?;
        let s = match send {
            Input::Buf(b) => b,
            Input::InPlace => recv,
        };
        if let Some(p) = st.small(recv, recv.bytes()) {
            return p.allreduce(c, send, recv, op, stream);
        }
        let (op, avg) = sum_for_avg(op);
        if st.lead() {
            st.node.reduce(s, Some(recv), op, 0, stream)?;
            st.leaders_allreduce(recv, op, stream)?;
            if avg {
                divide(c, recv)?;
            }
        } else {
            st.node.reduce(s, None, op, 0, stream)?;
        }
        st.node.bcast(recv, 0, stream)
    }

    fn allgather(&self, c: &Communicator, send: Input, recv: &Buffer, stream: Stream) -> Result<()> {
        let st = state(c)?;
        if let Some(p) = st.small(recv, recv.bytes()) {
            return p.allgather(c, send, recv, stream);
        }
        let n = recv.count() / c.size() as usize;
        let r = c.rank() as usize;
        let own;
        let s = match send {
            Input::Buf(b) => b,
            Input::InPlace => {
                own = recv.part(times(r, n)?, n);
                &own
            }
        };
        let lay = &st.layout;
        let block = recv.part(times(lay.first[st.me], n)?, times(lay.sizes[st.me], n)?);
        if st.lead() {
            st.node.gather(s, Some(&block), 0, stream)?;
            let counts = counts_i64(&lay.sizes.iter().map(|m| times(*m, n)).collect::<Result<Vec<usize>>>()?)?;
            st.leaders()?.allgatherv(&block, recv, Some(&counts), stream)?;
        } else {
            st.node.gather(s, None, 0, stream)?;
        }
        st.node.bcast(recv, 0, stream)
    }

    fn allgatherv(&self, c: &Communicator, send: Input, recv: &Buffer, counts: &[usize], stream: Stream) -> Result<()> {
        let st = state(c)?;
        if let Some(p) = st.small(recv, recv.bytes()) {
            return p.allgatherv(c, send, recv, counts, stream);
        }
        let lay = &st.layout;
        let sum = |v: &[usize]| v.iter().try_fold(0usize, |t, x| t.checked_add(*x)).ok_or_else(|| Error::InvalidArgument("HIER allgatherv: the counts overflow".into()));
        let r = c.rank() as usize;
        let own;
        let s = match send {
            Input::Buf(b) => b,
            Input::InPlace => {
                own = recv.part(sum(&counts[..r])?, counts[r]);
                &own
            }
        };
        let (f, m) = (lay.first[st.me], lay.sizes[st.me]);
        let mine = &counts[f..f + m];
        let block = recv.part(sum(&counts[..f])?, sum(mine)?);
        st.node.allgatherv(s, &block, Some(&counts_i64(mine)?), stream)?;
        if st.lead() {
            let per_node: Vec<usize> = lay.first.iter().zip(&lay.sizes).map(|(f, m)| sum(&counts[*f..f + m])).collect::<Result<_>>()?;
            st.leaders()?.allgatherv(&block, recv, Some(&counts_i64(&per_node)?), stream)?;
        }
        st.node.bcast(recv, 0, stream)
    }

    fn reduce_scatter(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<()> {
        let st = state(c)?;
        let Input::Buf(s) = send else { return Err(Error::Internal("HIER reduce_scatter: in place is not a reduce_scatter_block".into())) };
        if let Some(p) = st.small(s, s.bytes()) {
            return p.reduce_scatter(c, send, recv, op, stream);
        }
        let n = recv.count();
        let (op, avg) = sum_for_avg(op);
        if !st.lead() {
            st.node.reduce(s, None, op, 0, stream)?;
            st.node.scatter(None, recv, 0, stream)?;
            return if avg { divide(c, recv) } else { Ok(()) };
        }
        let lay = &st.layout;
        let counts = lay.sizes.iter().map(|m| times(*m, n)).collect::<Result<Vec<usize>>>()?;
        let mine = times(lay.sizes[st.me], n)?;
        let scr = scratch(s, stream)?;
        let t: &Buffer = scr.buf();
        let done = (|| {
            st.node.reduce(s, Some(t), op, 0, stream)?;
            // In place: the node's blocks land in t's first elements.
            st.leaders_reduce_scatterv(t, &counts, op, stream)?;
            st.node.scatter(Some(&t.part(0, mine)), recv, 0, stream)
        })();
        kept(scr, done)?;
        if avg { divide(c, recv) } else { Ok(()) }
    }

    fn scan(&self, _: &Communicator, _: Input, _: &Buffer, _: ReduceOp, _: bool, _: Stream) -> Result<()> {
        Err(not_routed("scan"))
    }
    fn alltoall(&self, _: &Communicator, _: Input, _: &Buffer, _: Stream) -> Result<()> {
        Err(not_routed("alltoall"))
    }
    fn gather(&self, _: &Communicator, _: Input, _: Option<&Buffer>, _: i32, _: Stream) -> Result<()> {
        Err(not_routed("gather"))
    }
    fn scatter(&self, _: &Communicator, _: Option<&Buffer>, _: Input, _: i32, _: Stream) -> Result<()> {
        Err(not_routed("scatter"))
    }
    fn alltoallv(&self, _: &Communicator, _: Input, _: Blocks, _: &Buffer, _: Blocks, _: Stream) -> Result<()> {
        Err(not_routed("alltoallv"))
    }
    fn gatherv(&self, _: &Communicator, _: Input, _: Option<&Buffer>, _: Option<Blocks>, _: i32, _: Stream) -> Result<()> {
        Err(not_routed("gatherv"))
    }
    fn scatterv(&self, _: &Communicator, _: Option<&Buffer>, _: Option<Blocks>, _: Input, _: i32, _: Stream) -> Result<()> {
        Err(not_routed("scatterv"))
    }
    fn reduce_scatterv(&self, _: &Communicator, _: Input, _: &Buffer, _: &[usize], _: ReduceOp, _: Stream) -> Result<()> {
        Err(not_routed("reduce_scatterv"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_of_consecutive_nodes_only() {
        let l = Layout::of(&[(0, 2), (1, 2), (0, 2), (1, 2)]).unwrap();
        assert_eq!((l.first.clone(), l.sizes.clone()), (vec![0, 2], vec![2, 2]));
        assert_eq!((0..4).map(|r| l.node_of(r)).collect::<Vec<_>>(), vec![0, 0, 1, 1]);
        let l = Layout::of(&[(0, 1), (0, 2), (1, 2), (0, 1)]).unwrap();
        assert_eq!((l.first.clone(), l.sizes.clone()), (vec![0, 1, 3], vec![1, 2, 1]));
        assert_eq!((0..4).map(|r| l.node_of(r)).collect::<Vec<_>>(), vec![0, 1, 1, 2]);
        // Round-robin placement (A B A B): not consecutive.
        assert!(Layout::of(&[(0, 2), (0, 2), (1, 2), (1, 2)]).is_err());
        assert!(Layout::of(&[(0, 3), (1, 3), (0, 1)]).is_err());
        assert!(Layout::of(&[(0, 2), (1, 2), (0, 2)]).is_err());
    }

    #[test]
    fn the_mpi_reduces_no_device_memory_between_leaders() {
        use BackendKind::*;
        for k in [GPUWIRE_BACKEND_NCCL, GPUWIRE_BACKEND_MPI_CUDA_AWARE, GPUWIRE_BACKEND_MPI_STAGED, GPUWIRE_BACKEND_HOST] {
            // Moves (bcast, allgatherv) take the leaders' own path: device pointers where the MPI
            // is CUDA-aware.
            assert_eq!(exchange(k, false), Exchange::Own, "{k:?}");
        }
        // Reductions: staged between CUDA-aware leaders; NCCL reduces on the device, MPI_STAGED
        // stages already, HOST has host memory only.
        assert_eq!(exchange(GPUWIRE_BACKEND_MPI_CUDA_AWARE, true), Exchange::Staged);
        for k in [GPUWIRE_BACKEND_NCCL, GPUWIRE_BACKEND_MPI_STAGED, GPUWIRE_BACKEND_HOST] {
            assert_eq!(exchange(k, true), Exchange::Own, "{k:?}");
        }
        assert_eq!(exchange_words(GPUWIRE_BACKEND_MPI_STAGED), "");
        assert!(exchange_words(GPUWIRE_BACKEND_MPI_CUDA_AWARE).contains("reductions staged through host memory"));
    }
}
