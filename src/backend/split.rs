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
use crate::types::{BackendKind, Dtype, ReduceOp};

/// The smallest allreduce (bytes) made in two phases. Below it one `MPI_Allreduce` on a host copy
/// is faster: it is latency-bound, and the two-phase form waits twice for its stream.
pub(crate) const MIN_BYTES: usize = 2 << 20;

/// The size of a segment (bytes, rounded down to whole elements), unless the buffer holds more
/// than [`MAX_SEGMENTS`] of them; then segments are larger.
pub(crate) const SEGMENT_BYTES: usize = 4 << 20;

/// The most segments of one call.
const MAX_SEGMENTS: usize = 256;

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
/// `segs` (at least one) segments.
fn drive(segs: usize, mut phase1: impl FnMut(usize) -> Result<()>, mut phase2: impl FnMut(usize) -> Result<()>) -> Result<()> {
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
    let mut got = vec![0u64; bytes.div_ceil(8)];
    let got = got.as_mut_ptr() as usize;
    let input = match send {
        Src::InPlace => recv,
        Src::Ptr(ptr) => ptr,
    };
    drive(
        segs.len(),
        |s| {
            let seg = &segs[s];
            exchange(c, seg, me, input, got, dtype)?;
            let (off, len) = seg.blocks[me];
            let at = (seg.start + off) * es;
            let (own, out) = (input + at, recv + at);
            // SAFETY: the caller's buffers hold `n` elements, `got` holds p blocks of `len`;
            // `own` and `out` are the same memory or disjoint (validated).
            unsafe {
                if own != out {
                    std::ptr::copy_nonoverlapping(own as *const u8, out as *mut u8, len * es);
                }
                for j in (0..p).filter(|&j| j != me) {
                    crate::reduce::combine(dtype, op, out as *mut u8, (got + j * len * es) as *const u8, len)?;
                }
                if op == ReduceOp::GPUWIRE_AVG {
                    crate::reduce::divide(dtype, out as *mut u8, len, p)?;
                }
            }
            Ok(())
        },
        |s| gather(c, &segs[s], recv, dtype),
    )
}

/// The stream-ordered two-phase allreduce of device memory (the module's comment): enqueued on
/// `stream`, its MPI calls made by `c`'s progress engine; returns false, having done nothing, where
/// it does not apply (then the caller's general stream-ordered path, `backend::ordered`, makes the
/// same MPI calls with the reduction on the CPU: [`allreduce_host`] on the staging). Arguments are
/// validated before; the engine must be able to run the host side (`ordered::returns_early`).
pub fn issue(c: &Arc<Communicator>, send: &Arc<Buffer>, recv: &Arc<Buffer>, op: ReduceOp, stream: Stream) -> Result<bool> {
    let (n, dtype, bytes) = (recv.count(), recv.dtype(), recv.bytes());
    let in_place = send.ptr() == recv.ptr();
    if !applies(c, bytes) || recv.is_host() || (!in_place && send.is_host()) {
        return Ok(false);
    }
    devstate::check_device(c, recv)?;
    devstate::check_device(c, send)?;
    let shared = {
        let st = devstate::dev(c)?;
        if st.kernels.is_err() {
            return Ok(false);
        }
        st.gpu_shared
    };
    let device = c.device();
    let _ctx = CtxGuard::enter(device)?;
    engine::refuse_capture(stream)?;
    let (p, me, es) = (c.size() as usize, c.rank() as usize, dtype.size());
    let segs = segments(n, es, p);
    // Where each segment's received blocks start in `got` (bytes).
    let mut got_at = Vec::with_capacity(segs.len());
    let mut total = 0usize;
    for seg in &segs {
        got_at.push(total);
        total = seg.blocks[me].1.checked_mul(p * es).and_then(|b| total.checked_add(b)).ok_or_else(|| Error::InvalidArgument("allreduce: the count overflows".into()))?;
    }
    let ticket = Arc::new(Ticket::default());
    // `staged`: the buffer as MPI sends and receives it (element i at byte i * es).
    let staged = staging::take(device, bytes, &ticket)?;
    let got = staging::take(device, total, &ticket)?;
    let eng = c.engine();
    let mut first = Vec::with_capacity(segs.len());
    let mut second = Vec::with_capacity(segs.len());
    for _ in &segs {
        first.push(Some(eng.flag(device)?));
        second.push(Some(eng.flag(device)?));
    }
    let flag = |f: &Option<Flag>| f.as_ref().map(|f| (f.ready_dev, f.done_dev, f.value)).expect("taken above");
    let (src, dst) = (if in_place { recv.ptr() } else { send.ptr() }, recv.ptr());
    // (first byte, own block's first byte, own block's bytes, last byte + 1) of segment s.
    let span = |seg: &Segment| {
        let (off, len) = seg.blocks[me];
        (seg.start * es, (seg.start + off) * es, len * es, (seg.start + seg.len()) * es)
    };
    for (s, seg) in segs.iter().enumerate() {
        let (a, own, len, b) = span(seg);
        device::copy_async(staged + a, src + a, own - a, stream)?;
        device::copy_async(staged + own + len, src + own + len, b - own - len, stream)?;
        device::stream_write(stream, flag(&first[s]).0, flag(&first[s]).2)?;
    }
    // The other ranks' reduced blocks of segment s into the receive buffer, once phase 2 is done.
    let deliver = |s: usize| -> Result<()> {
        let (a, own, len, b) = span(&segs[s]);
        let (_, done, value) = flag(&second[s]);
        device::stream_wait_geq(stream, done, value)?;
        for (from, bytes) in [(a, own - a), (own + len, b - own - len)] {
            let rows = shared && bytes < device::SHARED_HTOD_2D_MAX;
            After { staging: staged + from, dst: dst + from, bytes, rows }.enqueue(stream)?;
        }
        Ok(())
    };
    for (s, seg) in segs.iter().enumerate() {
        let (_, done, value) = flag(&first[s]);
        device::stream_wait_geq(stream, done, value)?;
        let (_, own, len, _) = span(seg);
        let ins: Vec<usize> = std::iter::once(src + own).chain((0..p).filter(|&j| j != me).map(|j| got + got_at[s] + j * len)).collect();
        reduce_block(device, dtype, op, &ins, dst + own, staged + own, len / es, p, stream)?;
        device::stream_write(stream, flag(&second[s]).0, flag(&second[s]).2)?;
        if s > 0 {
            deliver(s - 1)?;
        }
    }
    deliver(segs.len() - 1)?;
    let ev = Event::new()?;
    ev.record(stream)?;
    ticket.set_event(ev);
    let c2 = c.clone();
    let eng2 = eng.clone();
    let host = move || -> Result<()> {
        let stop = || c2.is_broken().then(|| Error::CommBroken("the communicator broke while an operation waited for its stream".into()));
        let r = drive(
            segs.len(),
            |s| {
                first[s].as_ref().expect("each phase once").wait_ready(&stop)?;
                exchange(&c2, &segs[s], me, staged, got + got_at[s], dtype)?;
                // Dropping the flag writes its `done`: the stream goes on.
                first[s] = None;
                Ok(())
            },
            |s| {
                second[s].as_ref().expect("each phase once").wait_ready(&stop)?;
                gather(&c2, &segs[s], staged, dtype)?;
                second[s] = None;
                Ok(())
            },
        );
        // Nobody waits for it: a failure is the communicator's asynchronous error, recorded
        // before the stream is released (the flags left, dropped below).
        if let Err(e) = &r {
            eng2.note_error(e);
        }
        drop((first, second));
        // A request abandoned at a deadline may still write its staging (a late peer): that stays
        // taken for good.
        if !r.as_ref().is_err_and(|e| e.abandons()) {
            ticket.finish();
        }
        r
    };
    // Counted as point-to-point, as `ordered::issue`'s: its place before every later operation.
    eng.submit(Box::new(host), false, true);
    Ok(true)
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
