//! Large allreduces of MPI_STAGED in two phases: the blocks move between ranks as MPI data
//! (never reduced by MPI), and each rank reduces its own block itself — by a GPU kernel on its
//! stream for device memory ([`issue`], stream-ordered), on the CPU for host memory
//! ([`allreduce_host`]).
//!
//! Why: the host side of a stream-ordered operation makes no CUDA call (`crate::backend::ordered`:
//! a CUDA call there deadlocked against a program's device-synchronizing calls), so a staged
//! allreduce made in one phase is MPI's own on the staging blocks, and Open MPI reduces on one
//! CPU core: 247 ms for 256 MiB of float32 on two ranks of the H200 machine, where copying the
//! data both ways over PCIe takes about 10 ms. Here the reduction runs on the stream between two
//! host phases, ordered by two flags per segment.
//!
//! The algorithm (a reduce-scatter, then an allgather), the same MPI calls on every rank whatever
//! memory it passes, since they depend only on what every rank passes alike (the element count,
//! the datatype's size, the number of ranks): an allreduce of at least [`MIN_BYTES`] on an
//! MPI_STAGED communicator of two or more ranks is split into segments of about
//! [`SEGMENT_BYTES`], each split into one block per rank (MPI's default split: the first
//! `n mod P` ranks one element more, `ring::partition`). For segment s:
//!
//! 1. *phase 1*: one `MPI_Alltoallw` sends block j to rank j; rank r receives block r of every
//!    other rank;
//! 2. rank r reduces block r: its own, then the received ones in rank order (`dst = got op dst`,
//!    as `reduce::combine`; AVG divides the sum by P), so the block's bits do not depend on
//!    whether a GPU or a CPU reduced it;
//! 3. *phase 2*: one `MPI_Allgatherv` (in place) gives every rank every reduced block.
//!
//! The phases go in the order phase 1 of segment 0, then for s = 1.. phase 1 of s and phase 2 of
//! s - 1, then phase 2 of the last segment ([`drive`]), so that a device rank's stream reduces
//! segment s while its host side exchanges segment s + 1.
//!
//! The stream-ordered device form, on the caller's stream at the call: the blocks of every
//! segment that other ranks reduce are copied into page-locked staging, and after each segment
//! the stream writes that segment's first `ready` flag. The communicator's progress engine waits
//! for it, makes phase 1 into a second staging block, and writes `done`; the stream (waiting for
//! that `done`) reduces the segment's own block by a kernel that reads the received blocks
//! straight from the page-locked staging, writes the result into the receive buffer and into
//! staging, and writes the second `ready`; the engine makes phase 2 on the staging and writes the
//! second `done`, after which the stream copies the other ranks' blocks into the receive buffer.
//! The call returns before any of it has run, as every stream-ordered call of MPI_STAGED.
//! Where the call must block (the collectives of a group, HIER's leaders, `GPUWIRE_HOST_SYNC=1`,
//! below MPI_THREAD_MULTIPLE) the calling thread makes the host side itself, then waits for the
//! stream ([`blocking`]). Nonblocking forms and checking mode take the general stream-ordered
//! path, whose host side reduces on the CPU ([`allreduce_host`] on its staging).
//!
//! Not yet run on a GPU (2026-12-05): the GPU cases `split` and `nbcmixed` cover it; they pass
//! on the null device (`make test`: `scripts/null-device.sh tests`, 2 and 3 ranks), which runs
//! the kernels as C loops.

use std::cell::Cell;
use std::mem::MaybeUninit;
use std::sync::Arc;

use crate::backend::devstate;
use crate::backend::host::{self, Src};
use crate::backend::ordered::After;
use crate::backend::ring;
use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::device::staging::{self, Ticket};
use crate::device::{self, CtxGuard, Event, Stream, kernels};
use crate::engine::{self, Flag};
use crate::error::{Error, Result};
use crate::types::{BackendKind, Dtype, ReduceOp, Space};

/// The smallest allreduce (bytes) made in two phases. Below it one `MPI_Allreduce` on a host copy
/// is faster: it is latency-bound, and the two-phase form waits twice for its stream.
pub(crate) const MIN_BYTES: usize = 2 << 20;

/// The size of a segment (bytes, rounded down to whole elements), unless the buffer holds more
/// than [`MAX_SEGMENTS`] of them; then segments are larger.
pub(crate) const SEGMENT_BYTES: usize = 4 << 20;

/// The most segments of one call.
const MAX_SEGMENTS: usize = 256;

/// The piece of a block (bytes, rounded down to whole elements) that [`allreduce_host`] reduces
/// at a time: every input is combined into it while it stays in cache.
const CHUNK_BYTES: usize = 32 << 10;

/// The largest received-blocks buffer (bytes) that a thread keeps for its next
/// [`allreduce_host`]: one segment's, for buffers of up to [`MAX_SEGMENTS`] segments.
const KEEP_BYTES: usize = 2 * SEGMENT_BYTES;

thread_local! {
    /// The received-blocks buffer of the thread's last [`allreduce_host`], reused as it is, not
    /// zeroed: only what MPI wrote into it is read.
    static SCRATCH: Cell<Option<Box<[MaybeUninit<u64>]>>> = const { Cell::new(None) };
}

/// Whether an allreduce of `bytes` on `c` is made in two phases (the same answer on every rank).
pub fn applies(c: &Communicator, bytes: usize) -> bool {
    c.backend() == BackendKind::GPUWIRE_BACKEND_MPI_STAGED && c.size() > 1 && bytes >= MIN_BYTES
}

/// One segment: its first element, and per rank its block (offset in the segment, length), in
/// elements.
struct Segment {
    start: usize,
    blocks: Vec<(usize, usize)>,
}

impl Segment {
    fn len(&self) -> usize {
        self.blocks.iter().map(|b| b.1).sum()
    }
}

/// The segments of `n` elements of `size` bytes over `p` ranks.
fn segments(n: usize, size: usize, p: usize) -> Vec<Segment> {
    let per = (SEGMENT_BYTES / size).max(1).max(n.div_ceil(MAX_SEGMENTS));
    (0..n.div_ceil(per))
        .map(|s| {
            let start = s * per;
            Segment { start, blocks: ring::partition(per.min(n - start), p) }
        })
        .collect()
}

/// The order of the phases (the module's comment): `phase1(s)` and `phase2(s)` for each of
/// `segs` segments (none for an empty buffer: every rank's count is the same).
fn drive(segs: usize, mut phase1: impl FnMut(usize) -> Result<()>, mut phase2: impl FnMut(usize) -> Result<()>) -> Result<()> {
    if segs == 0 {
        return Ok(());
    }
    for s in 0..segs {
        phase1(s)?;
        if s > 0 {
            phase2(s - 1)?;
        }
    }
    phase2(segs - 1)
}

/// Phase 1 of `seg`: block j of the buffer at `input` (whose element 0 is the buffer's first) to
/// rank j, and block `me` of every other rank j into `got` at `j * own` elements.
fn exchange(c: &Communicator, seg: &Segment, me: usize, input: usize, got: usize, dtype: Dtype) -> Result<()> {
    let own = seg.blocks[me].1;
    let sb: Vec<(usize, usize)> = seg.blocks.iter().enumerate().map(|(j, &(o, l))| if j == me { (0, 0) } else { (l, seg.start + o) }).collect();
    let rb: Vec<(usize, usize)> = (0..seg.blocks.len()).map(|j| if j == me { (0, 0) } else { (own, j * own) }).collect();
    host::alltoallw(c, "MPI_Alltoallw (allreduce in two phases: the blocks to the ranks that reduce them)", input, &sb, got, &rb, dtype)
}

/// Phase 2 of `seg`: every rank's reduced block, already at its place in `buf`, to every rank.
fn gather(c: &Communicator, seg: &Segment, buf: usize, dtype: Dtype) -> Result<()> {
    let counts: Vec<usize> = seg.blocks.iter().map(|b| b.1).collect();
    host::allgatherv(c, Src::InPlace, buf + seg.start * dtype.size(), &counts, dtype)
}

/// A blocking two-phase allreduce of host memory: `send` (or `recv` in place) to `recv`, `n`
/// elements. The caller checked [`applies`] and validated the buffers.
pub fn allreduce_host(c: &Communicator, send: Src, recv: usize, n: usize, dtype: Dtype, op: ReduceOp) -> Result<()> {
    let (p, me, es) = (c.size() as usize, c.rank() as usize, dtype.size());
    let segs = segments(n, es, p);
    let most = segs.iter().map(|s| s.blocks[me].1).max().unwrap_or(0);
    let bytes = most.checked_mul(p * es).ok_or_else(|| Error::InvalidArgument("allreduce: the count overflows".into()))?;
    // 8-byte aligned, as every datatype needs.
    let words = bytes.div_ceil(8);
    let mut keep = match SCRATCH.try_with(Cell::take) {
        Ok(Some(b)) if b.len() >= words => b,
        _ => Box::new_uninit_slice(words),
    };
    let got = keep.as_mut_ptr() as usize;
    let input = match send {
        Src::InPlace => recv,
        Src::Ptr(ptr) => ptr,
    };
    let r = drive(
        segs.len(),
        |s| {
            let seg = &segs[s];
            exchange(c, seg, me, input, got, dtype)?;
            let (off, len) = seg.blocks[me];
            let at = (seg.start + off) * es;
            // SAFETY: the caller's buffers hold `n` elements, `got` holds p blocks of `len`, those
            // of the other ranks written by `exchange`; input and output are the same memory or
            // disjoint (validated).
            unsafe { reduce_own(dtype, op, input + at, recv + at, got, len, me, p) }
        },
        |s| gather(c, &segs[s], recv, dtype),
    );
    if r.as_ref().is_err_and(|e| e.abandons()) {
        // A request abandoned at a deadline may still write it (a late peer).
        std::mem::forget(keep);
    } else if keep.len() * 8 <= KEEP_BYTES {
        let _ = SCRATCH.try_with(|s| s.set(Some(keep)));
    }
    r
}

/// Rank `me`'s block of `n` elements reduced into `out`: `own`, then the blocks of the other
/// ranks in rank order (rank j's at `got` + j n elements), each as `reduce::combine`, AVG divided
/// by `p`, a piece of [`CHUNK_BYTES`] at a time (every element the same steps in the same order
/// as a whole block at a time).
///
/// # Safety
/// `own` and `out` valid for `n` elements of `dtype`, aligned for it, the same memory or
/// disjoint; `got` + j n valid and initialized for `n` elements for every j but `me`.
#[allow(clippy::too_many_arguments)]
unsafe fn reduce_own(dtype: Dtype, op: ReduceOp, own: usize, out: usize, got: usize, n: usize, me: usize, p: usize) -> Result<()> {
    let es = dtype.size();
    let step = (CHUNK_BYTES / es).max(1);
    let mut i = 0;
    while i < n {
        let k = step.min(n - i);
        let (o, at) = (out + i * es, i * es);
        // SAFETY: pieces of the blocks of the caller's contract.
        unsafe {
            if own != out {
                std::ptr::copy_nonoverlapping((own + at) as *const u8, o as *mut u8, k * es);
            }
            for j in (0..p).filter(|&j| j != me) {
                crate::reduce::combine(dtype, op, o as *mut u8, (got + j * n * es + at) as *const u8, k)?;
            }
            if op == ReduceOp::GPUWIRE_AVG {
                crate::reduce::divide(dtype, o as *mut u8, k, p)?;
            }
        }
        i += k;
    }
    Ok(())
}

/// The stream-ordered two-phase allreduce of device memory (the module's comment): enqueued on
/// `stream`, its MPI calls made by `c`'s progress engine; returns false, having done nothing, where
/// it does not apply (then the caller's general stream-ordered path, `backend::ordered`, makes the
/// same MPI calls with the reduction on the CPU: [`allreduce_host`] on the staging). Arguments are
/// validated before; the engine must be able to run the host side (`ordered::returns_early`).
pub fn issue(c: &Arc<Communicator>, send: &Buffer, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<bool> {
    let Some(prepared) = prepare(c, send, recv, op, stream)? else { return Ok(false) };
    let (c2, eng) = (c.clone(), c.engine().clone());
    let host = move || -> Result<()> {
        let mut prepared = prepared;
        let r = prepared.host_side(&c2);
        // Nobody waits for it: a failure is the communicator's asynchronous error, recorded
        // before the stream is released (`Prepared::finish`).
        if let Err(e) = &r {
            eng.note_error(e);
        }
        prepared.finish(&r);
        r
    };
    // Counted as point-to-point, as `ordered::issue`'s: its place before every later operation.
    c.engine().submit(Box::new(host), false, true);
    Ok(true)
}

/// The same two-phase allreduce with the host side on the calling thread, which then waits for
/// the stream (a blocking call: the collectives of a group on MPI_STAGED, HIER's leaders,
/// `GPUWIRE_HOST_SYNC=1`, below MPI_THREAD_MULTIPLE). False, having done nothing, where it does
/// not apply, and on a progress-engine thread (which takes no staging).
pub fn blocking(c: &Communicator, send: &Buffer, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<bool> {
    if engine::on_engine_thread() {
        return Ok(false);
    }
    let Some(mut prepared) = prepare(c, send, recv, op, stream)? else { return Ok(false) };
    let r = prepared.host_side(c);
    prepared.finish(&r);
    r?;
    let _ctx = CtxGuard::enter(c.device())?;
    device::sync(stream)?;
    Ok(true)
}

/// A two-phase allreduce whose stream work is enqueued: what its host side needs.
struct Prepared {
    segs: Vec<Segment>,
    /// Where each segment's received blocks start in `got` (bytes).
    got_at: Vec<usize>,
    /// Per segment, the flags before phase 1 and before phase 2 (dropped when the phase is done:
    /// that writes `done`, and the stream goes on).
    first: Vec<Option<Flag>>,
    second: Vec<Option<Flag>>,
    /// The buffer as MPI sends and receives it (element i at byte i * es), and the received
    /// blocks: page-locked staging.
    staged: usize,
    got: usize,
    ticket: Arc<Ticket>,
    me: usize,
    dtype: Dtype,
    device: i32,
}

impl Prepared {
    /// Phase 1 and phase 2 of every segment, in [`drive`]'s order, each after its flag's `ready`.
    fn host_side(&mut self, c: &Communicator) -> Result<()> {
        let stop = || c.is_broken().then(|| Error::CommBroken("the communicator broke while an operation waited for its stream".into()));
        let Prepared { segs, got_at, first, second, staged, got, me, dtype, .. } = self;
        drive(
            segs.len(),
            |s| {
                first[s].as_ref().expect("each phase once").wait_ready(&stop)?;
                exchange(c, &segs[s], *me, *staged, *got + got_at[s], *dtype)?;
                first[s] = None;
                Ok(())
            },
            |s| {
                second[s].as_ref().expect("each phase once").wait_ready(&stop)?;
                gather(c, &segs[s], *staged, *dtype)?;
                second[s] = None;
                Ok(())
            },
        )
    }

    /// Releases the stream (the flags left, after a failure) and the staging: a request abandoned
    /// at a deadline may still write its staging (a late peer), which then stays taken for good.
    fn finish(mut self, r: &Result<()>) {
        self.first.clear();
        self.second.clear();
        if !r.as_ref().is_err_and(|e| e.abandons()) {
            self.ticket.finish();
        }
    }
}

/// Enqueues the stream's part of a two-phase allreduce (the module's comment) and returns what
/// its host side needs; None, having done nothing, where it does not apply: not an allreduce
/// [`applies`] to, memory other than device memory, no GPU kernels, or no flags left (the
/// general path needs one).
fn prepare(c: &Communicator, send: &Buffer, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<Option<Prepared>> {
    let (n, dtype, bytes) = (recv.count(), recv.dtype(), recv.bytes());
    let in_place = send.ptr() == recv.ptr();
    if !applies(c, bytes) || recv.is_host() || (!in_place && send.is_host()) {
        return Ok(None);
    }
    devstate::check_device(c, recv)?;
    devstate::check_device(c, send)?;
    let shared = {
        let st = devstate::dev(c)?;
        if st.kernels.is_err() {
            return Ok(None);
        }
        st.gpu_shared
    };
    let device = c.device();
    let _ctx = CtxGuard::enter(device)?;
    engine::refuse_capture(stream)?;
    let (p, me, es) = (c.size() as usize, c.rank() as usize, dtype.size());
    let segs = segments(n, es, p);
    let mut got_at = Vec::with_capacity(segs.len());
    let mut total = 0usize;
    for seg in &segs {
        got_at.push(total);
        total = seg.blocks[me].1.checked_mul(p * es).and_then(|b| total.checked_add(b)).ok_or_else(|| Error::InvalidArgument("allreduce: the count overflows".into()))?;
    }
    // The flags first: where they run out (many operations unfinished), the general path (one
    // flag) takes the call, with the same MPI calls.
    let eng = c.engine();
    let (mut first, mut second) = (Vec::with_capacity(segs.len()), Vec::with_capacity(segs.len()));
    for _ in &segs {
        match (eng.flag(device), eng.flag(device)) {
            (Ok(a), Ok(b)) => {
                first.push(Some(a));
                second.push(Some(b));
            }
            _ => return Ok(None),
        }
    }
    let ticket = Arc::new(Ticket::default());
    let staged = staging::take(device, bytes, &ticket)?;
    let got = match staging::take(device, total, &ticket) {
        Ok(g) => g,
        Err(e) => {
            ticket.finish();
            return Err(e);
        }
    };
    let prepared = Prepared { segs, got_at, first, second, staged, got, ticket, me, dtype, device };
    let rows = shared && recv.space() == Space::GPUWIRE_SPACE_DEVICE;
    let src = if in_place { recv.ptr() } else { send.ptr() };
    match enqueue(&prepared, src, recv.ptr(), op, p, rows, stream) {
        Ok(()) => Ok(Some(prepared)),
        Err(e) => {
            // Whatever was enqueued runs through (the flags released) before the staging is
            // taken again.
            if let Ok(ev) = Event::new().and_then(|ev| ev.record(stream).map(|()| ev)) {
                prepared.ticket.set_event(ev);
            }
            prepared.finish(&Ok(()));
            Err(e)
        }
    }
}

/// The stream's part: the blocks other ranks reduce copied into staging (then each segment's
/// first `ready`); per segment, after its first `done`, this rank's block reduced into `dst` and
/// into staging (then its second `ready`), and after its second `done` the other blocks copied
/// from staging into `dst` (`rows`: small ones as two-row copies, device memory of a shared GPU).
fn enqueue(pr: &Prepared, src: usize, dst: usize, op: ReduceOp, p: usize, rows: bool, stream: Stream) -> Result<()> {
    let (me, es, staged, got) = (pr.me, pr.dtype.size(), pr.staged, pr.got);
    // A flag's `ready` address marks it written by the stream (`Flag::ready_word`): taken only
    // for the writes.
    let ready = |f: &Option<Flag>| f.as_ref().map(|f| (f.ready_word(), f.value)).expect("taken above");
    let done = |f: &Option<Flag>| f.as_ref().map(|f| (f.done_dev, f.value)).expect("taken above");
    // (first byte, own block's first byte, own block's bytes, last byte + 1) of segment s.
    let span = |s: usize| {
        let seg = &pr.segs[s];
        let (off, len) = seg.blocks[me];
        (seg.start * es, (seg.start + off) * es, len * es, (seg.start + seg.len()) * es)
    };
    for s in 0..pr.segs.len() {
        let (a, own, len, b) = span(s);
        device::copy_async(staged + a, src + a, own - a, stream)?;
        device::copy_async(staged + own + len, src + own + len, b - own - len, stream)?;
        let (word, value) = ready(&pr.first[s]);
        device::stream_write(stream, word, value)?;
    }
    let deliver = |s: usize| -> Result<()> {
        let (a, own, len, b) = span(s);
        let (word, value) = done(&pr.second[s]);
        device::stream_wait_geq(stream, word, value)?;
        for (from, bytes) in [(a, own - a), (own + len, b - own - len)] {
            After { staging: staged + from, dst: dst + from, bytes, rows: rows && bytes < device::SHARED_HTOD_2D_MAX }.enqueue(stream)?;
        }
        Ok(())
    };
    for s in 0..pr.segs.len() {
        let (word, value) = done(&pr.first[s]);
        device::stream_wait_geq(stream, word, value)?;
        let (_, own, len, _) = span(s);
        let ins: Vec<usize> = std::iter::once(src + own).chain((0..p).filter(|&j| j != me).map(|j| got + pr.got_at[s] + j * len)).collect();
        reduce_block(pr.device, pr.dtype, op, &ins, dst + own, staged + own, len / es, p, stream)?;
        let (word, value) = ready(&pr.second[s]);
        device::stream_write(stream, word, value)?;
        if s > 0 {
            deliver(s - 1)?;
        }
    }
    deliver(pr.segs.len() - 1)?;
    let ev = Event::new()?;
    ev.record(stream)?;
    pr.ticket.set_event(ev);
    Ok(())
}

/// Enqueues the reduction of one block of `n` elements: `ins[0]` (this rank's own block, device
/// memory), then the others in order, into `out` (device memory; it may be `ins[0]`) and into
/// `staged` (page-locked host memory).
#[allow(clippy::too_many_arguments)]
fn reduce_block(device: i32, dtype: Dtype, op: ReduceOp, ins: &[usize], out: usize, staged: usize, n: usize, p: usize, stream: Stream) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let bytes = n * dtype.size();
    let sum = if op == ReduceOp::GPUWIRE_AVG { ReduceOp::GPUWIRE_SUM } else { op };
    if kernels::fused(dtype, sum) && ins.len() <= kernels::ALL_MAX {
        if op == ReduceOp::GPUWIRE_AVG {
            kernels::reduce_all(device, dtype, sum, ins, &[out], n, stream)?;
        } else {
            // One kernel writes both: no copy of the result to the host.
            return kernels::reduce_all(device, dtype, sum, ins, &[out, staged], n, stream);
        }
    } else {
        device::copy_async(out, ins[0], if out == ins[0] { 0 } else { bytes }, stream)?;
        for &input in &ins[1..] {
            kernels::combine(device, dtype, op, out, input, n, stream)?;
        }
    }
    if op == ReduceOp::GPUWIRE_AVG {
        kernels::divide(device, dtype, out, n, p as i64, stream)?;
    }
    device::copy_async(staged, out, bytes, stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_cover_the_buffer_in_order_with_mpi_block_split() {
        for (n, size, p) in [(1 << 20, 4, 2), ((3 << 20) + 5, 4, 3), (10, 8, 4), (1 << 28, 4, 2), (7, 1, 8)] {
            let segs = segments(n, size, p);
            assert!(segs.len() <= MAX_SEGMENTS, "{n} {size} {p}: {} segments", segs.len());
            let mut next = 0;
            for seg in &segs {
                assert_eq!(seg.start, next);
                assert_eq!(seg.blocks.len(), p);
                // Blocks contiguous, the first n mod P one longer.
                let mut off = 0;
                for &(o, l) in &seg.blocks {
                    assert_eq!(o, off);
                    off += l;
                }
                assert!(seg.blocks.windows(2).all(|w| w[0].1 == w[1].1 || w[0].1 == w[1].1 + 1));
                next += seg.len();
            }
            assert_eq!(next, n);
        }
        assert_eq!(segments(SEGMENT_BYTES / 4 * 3, 4, 2).len(), 3);
        assert!(segments(0, 4, 2).is_empty());
        assert!(drive(0, |_| panic!("no segment"), |_| panic!("no segment")).is_ok());
    }

    #[test]
    fn phases_alternate_so_the_stream_reduces_while_the_next_segment_moves() {
        let order = |segs: usize| {
            let log = std::cell::RefCell::new(Vec::new());
            let note = |phase: usize, s: usize| {
                log.borrow_mut().push((phase, s));
                Ok(())
            };
            drive(segs, |s| note(1, s), |s| note(2, s)).unwrap();
            log.into_inner()
        };
        assert_eq!(order(3), [(1, 0), (1, 1), (2, 0), (1, 2), (2, 1), (2, 2)]);
        assert_eq!(order(1), [(1, 0), (2, 0)]);
    }
}
