//! The IPC collectives: a call in progress ([`Coll`]: the exchange of status and buffer records
//! through the shared segment, the waits, the leader's outcome), the leader's device work through
//! the peers' mappings ([`Lead`]), the small-message path through the segment, and each
//! collective of the `Path` trait.

use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use super::maps::{maps, Maps};
use super::shm::{self, lock, BufRecord, CallArea, Stop, REC_HANDLE, REC_LOCAL_ONLY, SMALL, ST_ERROR, ST_OK};
use super::state::{deliver, state, IpcState, View};
use crate::backend::devstate;
use crate::backend::mpi_staged::{StagedPath, input_buf};
use crate::backend::path::{Blocks, Input, Path};
use crate::backend::ring::{self, Loc};
use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::device::{self, CtxGuard, Stream, kernels};
use crate::error::{Error, Result, Status};
use crate::progress::progress_all;
use crate::reduce;
use crate::types::{Dtype, ReduceOp};

/// One collective call in progress.
struct Coll<'a> {
    c: &'a Communicator,
    s: &'a IpcState,
    seq: u64,
    stream: Stream,
    what: &'static str,
    /// This rank's failure before the exchange (published, then returned on every rank).
    local: Result<()>,
    /// Whether this call's device work is stream-ordered: enqueued on `stream` around words of
    /// the shared segment, the call returning before it is done (the communicator's mode,
    /// `IpcState::so`, except on an engine thread, whose jobs complete requests).
    so: bool,
    _lock: MutexGuard<'a, u64>,
    _ctx: CtxGuard,
}

impl<'a> Coll<'a> {
    fn begin(c: &'a Communicator, what: &'static str, bufs: &[Option<&Buffer>], stream: Stream) -> Result<Coll<'a>> {
        let s = state(c)?;
        let ctx = CtxGuard::enter(s.device)?;
        let mut g = lock(&s.coll);
        *g += 1;
        let seq = *g;
        let mut local = Ok(());
        for b in bufs.iter().flatten() {
            if local.is_ok() {
                local = devstate::check_device(c, b);
            }
        }
        let so = s.so && !crate::engine::on_engine_thread();
        if local.is_ok() {
            local = if s.so { arrive_ordered(s, stream, so, seq) } else { device::sync(stream) };
        }
        Ok(Coll { c, s, seq, stream, what, local, so, _lock: g, _ctx: ctx })
    }

    /// Whether a call of `bytes` goes through the segment's small data (the host reduces):
    /// only where device collectives block the host; stream-ordered, every device call takes
    /// the leader's device work (a call without data has nothing to order).
    fn small(&self, bytes: usize) -> bool {
        bytes == 0 || (bytes <= SMALL && !self.s.so)
    }

    fn me(&self) -> usize {
        self.s.me
    }
    fn p(&self) -> usize {
        self.s.p
    }
    fn area(&self, r: usize) -> *mut CallArea {
        self.s.seg.area(r, self.seq)
    }
    fn rec(&self, r: usize, k: usize) -> BufRecord {
        // SAFETY: published before rank r's arrival, which the caller observed.
        unsafe { std::ptr::read(std::ptr::addr_of!((*self.area(r)).rec[k])) }
    }
    /// Rank r's small data of this call.
    fn data(&self, r: usize) -> &[u8] {
        let a = self.area(r);
        // SAFETY: written before rank r's arrival; not rewritten before this rank's next arrival.
        unsafe {
            let n = ((*a).data_bytes as usize).min(SMALL);
            std::slice::from_raw_parts(std::ptr::addr_of!((*a).data) as *const u8, n)
        }
    }

    /// Copies `v` (at most SMALL bytes) into this rank's slot (device-to-host on the copy engine).
    fn stage_in(&mut self, v: Option<View>) {
        if self.local.is_err() {
            return;
        }
        let a = self.area(self.me());
        // SAFETY: this rank's own call area.
        let dst = unsafe { std::ptr::addr_of_mut!((*a).data) as usize };
        let n = v.map(|v| v.bytes).unwrap_or(0);
        // SAFETY: as above.
        unsafe { (*a).data_bytes = n as u64 };
        if let Some(v) = v.filter(|v| v.bytes > 0) {
            self.local = if v.host() {
                // SAFETY: host memory of the caller valid for n bytes; n <= SMALL.
                unsafe { std::ptr::copy_nonoverlapping(v.ptr as *const u8, dst as *mut u8, n) };
                Ok(())
            } else {
                device::copy_async(dst, v.ptr, n, self.stream).and_then(|()| device::sync(self.stream))
            };
        }
    }

    /// Publishes this rank's status and records, then waits until every rank arrived. Returns
    /// the lowest failing rank's error on every rank, else whether any rank's buffer cannot be
    /// exported (the call then takes the staged path everywhere).
    fn exchange(&mut self, recs: [BufRecord; 2]) -> Result<bool> {
        let a = self.area(self.me());
        // SAFETY: this rank's own call area; peers read it only after the Release store below.
        unsafe {
            (*a).rec = recs;
            (*a).result = ST_OK;
            match &self.local {
                Ok(()) => (*a).status = ST_OK,
                Err(e) => {
                    (*a).status = ST_ERROR;
                    (*a).code = e.status() as i32;
                    shm::put_text(&mut (*std::ptr::addr_of_mut!((*a).msg)), &e.to_string());
                }
            }
        }
        let mine = self.s.seg.slot(self.me());
        mine.cstate.0.store(shm::claim_word(self.seq, shm::OFFERED), Ordering::Release);
        mine.arrive.0.store(self.seq, Ordering::Release);
        if let Err(e) = self.wait(|s| &s.arrive, None) {
            if self.me() == 0 {
                // The leader gives up: ranks that arrive after all must not wait for its `done`.
                self.publish_result(&Err(Error::from_status(e.status(), format!("{}: the leader (rank 0) gave up: {e}", self.what))));
            }
            return Err(e);
        }
        for r in 0..self.p() {
            let a = self.area(r);
            // SAFETY: published before rank r's arrival.
            let (st, code) = unsafe { ((*a).status, (*a).code) };
            if st == ST_ERROR {
                // SAFETY: as above.
                let msg = shm::get_text(unsafe { &*std::ptr::addr_of!((*a).msg) });
                let detail = crate::error::without_kind(&msg);
                let status = Status::from_i32(code).unwrap_or(Status::GPUWIRE_ERROR_INTERNAL);
                return Err(Error::from_status(status, format!("{} failed on rank {r}: {detail}", self.what)));
            }
        }
        Ok((0..self.p()).any(|r| (0..2).any(|k| self.rec(r, k).kind == REC_LOCAL_ONLY)))
    }

    /// Waits until `field` reached this call's sequence number on every rank (or on `only`).
    fn wait(&self, field: fn(&shm::Slot) -> &shm::Counter, only: Option<usize>) -> Result<()> {
        let (seg, seq) = (self.s.seg, self.seq);
        let ready = || match only {
            Some(r) => field(seg.slot(r)).0.load(Ordering::Acquire) >= seq,
            None => (0..seg.p).all(|r| field(seg.slot(r)).0.load(Ordering::Acquire) >= seq),
        };
        // Pending irecvs progress meanwhile: a peer may be blocked in a send to this rank before
        // it reaches this collective.
        // One deadline per gpuwire call: what is left of it.
        let r = shm::spin_until(self.c.remaining(), || super::broken(self.c), || {
            if ready() {
                return Ok(true);
            }
            progress_all();
            Ok(false)
        })?;
        match r {
            Ok(()) => Ok(()),
            // Everyone arrived just as the deadline passed: no reason to give up.
            Err(Stop::TimedOut) if ready() => Ok(()),
            Err(stop) if self.me() != 0 && !shm::abandon(&seg.slot(self.me()).cstate.0, seq) => {
                // The leader claimed this rank's buffers first: it is working on them (all ranks
                // arrived), and this rank may not return before it is done. No deadline: the
                // leader's device work runs, and its `done` follows.
                crate::trace!("ipc: {}: {stop:?} while the leader works on this rank's buffers; waiting for it", self.what);
                shm::spin_until(None, || false, || {
                    if ready() {
                        return Ok(true);
                    }
                    progress_all();
                    Ok(false)
                })?
                .map_err(|_| Error::Internal("unbounded wait ended".into()))
            }
            Err(Stop::Broken) => {
                self.c.ensure_usable()?;
                Err(Error::CommBroken(format!("{}: the communicator broke while waiting", self.what)))
            }
            Err(Stop::TimedOut) => {
                let late: Vec<usize> = seg.behind(seq, field).into_iter().filter(|r| only.is_none_or(|o| o == *r)).collect();
                let t = self.c.config().timeout.map(|t| t.as_secs_f64()).unwrap_or(0.0);
                let msg = format!(
                    "{}: rank(s) {late:?} did not arrive within the communicator's timeout of {t:.3} s (a rank did not make the matching call?); the communicator is now broken",
                    self.what
                );
                self.c.mark_broken(msg.clone());
                Err(Error::Timeout(msg))
            }
        }
    }

    /// Writes `bytes` (this rank's result) to `dst` and waits for it.
    fn deliver(&self, dst: View, bytes: &[u8]) -> Result<()> {
        let shared = devstate::dev(self.c)?.gpu_shared;
        deliver(dst, bytes, self.stream, shared)
    }

    /// The leader's device work: `work` enqueues on the leader's stream; then the stream is
    /// waited for and `done` published with the outcome. Other ranks wait for it.
    ///
    /// Stream-ordered (`IpcState::so`), the leader enqueues, before the work, waits for every
    /// follower's `ready` word and, after it, a write of its own `done` word; it publishes its
    /// outcome once the work is enqueued. A follower whose call is stream-ordered then enqueues
    /// a wait for that `done` word and returns; one on an engine thread waits for it on the
    /// host.
    fn lead_or_follow(&self, work: impl FnOnce(&mut Lead) -> Result<()>) -> Result<()> {
        if self.me() != 0 {
            self.wait(|s| &s.done, Some(0))?;
            let a = self.area(0);
            // SAFETY: written by the leader before its `done` store, which was observed.
            let (res, code) = unsafe { ((*a).result, (*a).rcode) };
            if res == ST_ERROR {
                // SAFETY: as above.
                let msg = shm::get_text(unsafe { &*std::ptr::addr_of!((*a).rmsg) });
                let status = Status::from_i32(code).unwrap_or(Status::GPUWIRE_ERROR_INTERNAL);
                return Err(Error::from_status(status, msg));
            }
            if self.s.so {
                let w = &self.s.seg.slot(0).gpu.done;
                if self.so {
                    device::stream_wait_geq(self.stream, self.s.word_dev(w), self.seq as u32)?;
                    self.leave_ordered()?;
                } else {
                    self.wait_word(w)?;
                }
            }
            return Ok(());
        }
        // Claim every follower's buffers before touching any: a follower that gave up first
        // (its wait timed out) has returned, and its buffers may be gone.
        let seg = self.s.seg;
        let refused = (1..self.p()).find(|r| shm::claim(&seg.slot(*r).cstate.0, self.seq).is_err());
        let r = match refused {
            Some(q) => {
                let msg = format!("rank {q} gave up waiting (its timeout) before the device work started; nothing was done; the communicator is now broken");
                self.c.mark_broken(format!("{}: {msg}", self.what));
                Err(Error::CommBroken(msg))
            }
            None if self.s.so => {
                let mut m = maps();
                let r = (|| {
                    for q in 1..self.p() {
                        device::stream_wait_geq(self.stream, self.s.word_dev(&seg.slot(q).gpu.ready), self.seq as u32)?;
                    }
                    let mut l = Lead { co: self, maps: &mut m };
                    work(&mut l)?;
                    device::stream_write(self.stream, self.s.word_dev(&seg.slot(0).gpu.done), self.seq as u32)?;
                    if !self.so {
                        return device::sync(self.stream);
                    }
                    let e = std::sync::Arc::new(device::Event::new()?);
                    e.record(self.stream)?;
                    m.in_flight(e.clone());
                    *lock(&self.s.last_stream) = Some((self.stream, e));
                    Ok(())
                })();
                if r.is_err() {
                    // The followers take the error from the published outcome and do not wait
                    // for `done`; later calls' words are written by later calls.
                    crate::trace!("ipc: {}: the leader's stream-ordered device work failed", self.what);
                }
                r
            }
            None => {
                let mut m = maps();
                let mut l = Lead { co: self, maps: &mut m };
                work(&mut l).and_then(|()| device::sync(self.stream))
            }
        };
        let r = r.map_err(|e| e.reworded(format!("{} failed on rank 0 (the leader of the device work): {}", self.what, e.detail())));
        self.publish_result(&r);
        r
    }

    /// A stream-ordered follower's end of a call: its stream's place after the call, for the
    /// next call on another stream.
    fn leave_ordered(&self) -> Result<()> {
        let e = std::sync::Arc::new(device::Event::new()?);
        e.record(self.stream)?;
        *lock(&self.s.last_stream) = Some((self.stream, e));
        Ok(())
    }

    /// Waits on the host until the leader's stream wrote this call's `done` word (a call on an
    /// engine thread must be complete when it returns).
    fn wait_word(&self, w: &std::sync::atomic::AtomicU32) -> Result<()> {
        let seq = self.seq as u32;
        let reached = || (w.load(Ordering::Acquire).wrapping_sub(seq) as i32) >= 0;
        match shm::spin_until(self.c.remaining(), || super::broken(self.c), || Ok(reached()))? {
            Ok(()) => Ok(()),
            Err(_) if reached() => Ok(()),
            Err(Stop::Broken) => Err(Error::CommBroken(format!("{}: the communicator broke while waiting for the leader's device work", self.what))),
            Err(Stop::TimedOut) => {
                let msg = format!("{}: the leader's device work did not finish within the communicator's timeout; the communicator is now broken", self.what);
                self.c.mark_broken(msg.clone());
                Err(Error::Timeout(msg))
            }
        }
    }

    /// The leader's outcome of this call, published with its `done`.
    fn publish_result(&self, r: &Result<()>) {
        let a = self.area(0);
        // SAFETY: the leader's own call area; read by others after the Release store below.
        unsafe {
            match r {
                Ok(()) => (*a).result = ST_OK,
                Err(e) => {
                    (*a).result = ST_ERROR;
                    (*a).rcode = e.status() as i32;
                    // Without the kind's prefix ("CUDA error: "): the followers' Error adds it
                    // again, and every rank must show the same message.
                    shm::put_text(&mut (*std::ptr::addr_of_mut!((*a).rmsg)), e.detail());
                }
            }
        }
        self.s.seg.slot(0).done.0.store(self.seq, Ordering::Release);
    }
}

/// The leader's view of a call: peers' buffers through their mappings.
struct Lead<'b, 'a> {
    co: &'b Coll<'a>,
    maps: &'b mut Maps,
}

impl Lead<'_, '_> {
    /// Rank r's buffer k (0 input, 1 output) in this process (0 when it has none).
    fn ptr(&mut self, r: usize, k: usize) -> Result<usize> {
        let rec = self.co.rec(r, k);
        self.co.s.import(self.maps, r, &rec)
    }
    /// Whether rank r passed the same memory as input and output (in place).
    fn same(&self, r: usize) -> bool {
        let (a, b) = (self.co.rec(r, 0), self.co.rec(r, 1));
        a.kind == REC_HANDLE && b.kind == REC_HANDLE && a.id == b.id && a.offset == b.offset
    }
    fn copy(&self, dst: usize, src: usize, bytes: usize) -> Result<()> {
        ring::copy(Loc { ptr: dst, host: false }, Loc { ptr: src, host: false }, bytes, self.co.stream)
    }
    fn combine(&self, dst: usize, src: usize, n: usize, dtype: Dtype, op: ReduceOp) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        ring::combine(self.co.s.device, Loc { ptr: dst, host: false }, Loc { ptr: src, host: false }, n, dtype, op, self.co.stream)
    }
    fn avg(&self, x: usize, n: usize, dtype: Dtype, op: ReduceOp) -> Result<()> {
        if op != ReduceOp::GPUWIRE_AVG || n == 0 {
            return Ok(());
        }
        ring::divide(self.co.s.device, Loc { ptr: x, host: false }, n, dtype, self.co.p(), self.co.stream)
    }
    /// As [`Lead::reduce_into`] into every one of `outs` at once, by one fused kernel that reads
    /// each input once and writes each output once (`kernels::reduce_all`; the same order of
    /// combination, so the same result), where there is one for (dtype, op) and the ranks are
    /// few enough; whether it ran.
    fn fused_into(&mut self, off: usize, outs: &[usize], n: usize, dtype: Dtype, op: ReduceOp) -> Result<bool> {
        let p = self.co.p();
        if n == 0 || !super::state::kernels_on() || !kernels::fused(dtype, op) || p > kernels::ALL_MAX || outs.len() > kernels::ALL_MAX {
            return Ok(false);
        }
        let mut ins = Vec::with_capacity(p);
        for r in 0..p {
            ins.push(self.ptr(r, 0)? + off);
        }
        kernels::reduce_all(self.co.s.device, dtype, op, &ins, outs, n, self.co.stream)?;
        Ok(true)
    }
    /// `acc = in_0 op in_1 op ... op in_{p-1}` over n elements at byte offset `off` of every
    /// rank's input, in rank order; AVG divided.
    fn reduce_into(&mut self, acc: usize, off: usize, n: usize, dtype: Dtype, op: ReduceOp) -> Result<()> {
        let b = n * dtype.size();
        let i0 = self.ptr(0, 0)?;
        self.copy(acc, i0 + off, b)?;
        for r in 1..self.co.p() {
            let ir = self.ptr(r, 0)?;
            self.combine(acc, ir + off, n, dtype, op)?;
        }
        self.avg(acc, n, dtype, op)
    }
    /// Rank r's prefix (as MPI_Scan; `exclusive`: as MPI_Exscan, rank 0's output not written)
    /// into every rank's output, over n elements, in rank order with a running accumulator in
    /// scratch: an output that is its rank's input (in place) is written only after that input
    /// has been read. AVG divides each output by the number of ranks it combines.
    fn scan_into(&mut self, n: usize, dtype: Dtype, op: ReduceOp, exclusive: bool) -> Result<()> {
        let b = n * dtype.size();
        // Two accumulators, 256-byte aligned: the prefix so far, and the next one.
        let half = b.next_multiple_of(256);
        let base = self.scratch(2 * half)?;
        let (mut acc, mut next) = (base, base + half);
        let i0 = self.ptr(0, 0)?;
        self.copy(acc, i0, b)?;
        for r in 0..self.co.p() {
            let (ir, or) = (self.ptr(r, 0)?, self.ptr(r, 1)?);
            if r > 0 {
                // next = acc op in_r, read before out_r is written.
                self.copy(next, acc, b)?;
                self.combine(next, ir, n, dtype, op)?;
            }
            let (val, k) = match (exclusive, r) {
                (true, 0) => (0, 0),
                (true, _) => (acc, r),
                (false, 0) => (acc, 1),
                (false, _) => (next, r + 1),
            };
            if k > 0 && or != val {
                self.copy(or, val, b)?;
                if op == ReduceOp::GPUWIRE_AVG && n > 0 {
                    ring::divide(self.co.s.device, Loc { ptr: or, host: false }, n, dtype, k, self.co.stream)?;
                }
            }
            if r > 0 {
                std::mem::swap(&mut acc, &mut next);
            }
        }
        Ok(())
    }
    /// Device scratch of the leader (the communicator's working-copy scratch).
    fn scratch(&self, bytes: usize) -> Result<usize> {
        let mut st = devstate::dev(self.co.c)?;
        st.dev[1].get(bytes)
    }
}

/// The start of a call on a stream-ordered communicator: `stream` first waits for the
/// previous stream-ordered collective's place in its stream when that was another stream (the
/// communicator's collectives run in call order on the GPU, so each word of the segment only
/// grows), then this rank's `ready` word becomes `seq`: written by the stream once the work
/// before the call is done (`so`), or by the host after waiting for the stream.
fn arrive_ordered(s: &IpcState, stream: Stream, so: bool, seq: u64) -> Result<()> {
    if let Some((prev, e)) = lock(&s.last_stream).as_ref() {
        if *prev != stream {
            device::stream_wait_event(stream, e)?;
        }
    }
    let w = &s.seg.slot(s.me).gpu.ready;
    if so {
        device::stream_write(stream, s.word_dev(w), seq as u32)?;
        // This write is the call's place on its stream, also for a call without device work
        // (a barrier, empty buffers, a call that takes the staged path): a later call on another
        // stream waits for it, and the segment's teardown too. Without it a follower's `ready`
        // word could go back (this write landing after a later call's on another stream: the
        // leader's stream then waited for ever), and the write could land after the segment was
        // unregistered and freed (a helper's bug hunt, null device).
        let e = std::sync::Arc::new(device::Event::new()?);
        e.record(stream)?;
        *lock(&s.last_stream) = Some((stream, e));
        return Ok(());
    }
    device::sync(stream)?;
    w.store(seq as u32, Ordering::Release);
    Ok(())
}

/// `acc = d_0 op d_1 op ...` on the host, in rank order, over n elements at byte offset `off` of
/// every rank's small data; AVG divided.
fn host_reduce(co: &Coll, off: usize, n: usize, dtype: Dtype, op: ReduceOp) -> Result<Vec<u8>> {
    host_reduce_ranks(co, off, n, dtype, op, co.p())
}

/// As [`host_reduce`] over the data of ranks 0..`upto` only (`upto` >= 1; AVG divides by it).
fn host_reduce_ranks(co: &Coll, off: usize, n: usize, dtype: Dtype, op: ReduceOp, upto: usize) -> Result<Vec<u8>> {
    let b = n * dtype.size();
    let mut acc = vec![0u64; b.div_ceil(8)];
    let accp = acc.as_mut_ptr() as *mut u8;
    let d0 = co.data(0);
    // SAFETY: acc holds b bytes; the data areas hold the ranks' inputs (length checked).
    unsafe {
        if d0.len() < off + b {
            return Err(Error::Internal("small reduction: a rank published less data than expected".into()));
        }
        std::ptr::copy_nonoverlapping(d0.as_ptr().add(off), accp, b);
        for r in 1..upto {
            let dr = co.data(r);
            if dr.len() < off + b {
                return Err(Error::Internal("small reduction: a rank published less data than expected".into()));
            }
            // The data areas are 64-byte aligned; copy out anyway to keep alignment independent of off.
            let mut tmp = vec![0u64; b.div_ceil(8)];
            std::ptr::copy_nonoverlapping(dr.as_ptr().add(off), tmp.as_mut_ptr() as *mut u8, b);
            reduce::combine(dtype, op, accp, tmp.as_ptr() as *const u8, n)?;
        }
        if op == ReduceOp::GPUWIRE_AVG {
            reduce::divide(dtype, accp, n, upto)?;
        }
    }
    let mut out = vec![0u8; b];
    // SAFETY: acc holds b bytes.
    unsafe { std::ptr::copy_nonoverlapping(accp, out.as_mut_ptr(), b) };
    Ok(out)
}

fn in_view(send: Input, recv: &Buffer, block_bytes: usize, bytes: usize) -> View {
    match send {
        Input::Buf(b) => View::of(b),
        Input::InPlace => View::of(recv).at(block_bytes, bytes),
    }
}

/// Whether GPU reduction kernels work on every rank (agreed at setup).
fn kernels_ok(c: &Communicator) -> bool {
    devstate::dev(c).map(|st| st.kernels.is_ok()).unwrap_or(false)
}

// ---- the collectives -----------------------------------------------------------------------

pub(super) fn barrier(c: &Communicator, stream: Stream) -> Result<()> {
    let mut co = Coll::begin(c, "barrier", &[], stream)?;
    co.exchange([BufRecord::default(); 2]).map(|_| ())
}

pub(super) fn bcast(c: &Communicator, buf: &Buffer, root: i32, stream: Stream) -> Result<()> {
    let bytes = buf.bytes();
    let root = root as usize;
    let mut co = Coll::begin(c, "bcast", &[Some(buf)], stream)?;
    let me = co.me();
    if co.small(bytes) {
        co.stage_in(if me == root { Some(View::of(buf)) } else { None });
        co.exchange([BufRecord::default(); 2])?;
        if me != root {
            let d = co.data(root).to_vec();
            co.deliver(View::of(buf), &d)?;
        }
        return Ok(());
    }
    let rec = co.s.export(Some(View::of(buf)));
    if co.exchange([rec, BufRecord::default()])? {
        drop(co);
        return StagedPath.bcast(c, buf, root as i32, stream);
    }
    co.lead_or_follow(|l| {
        let src = l.ptr(root, 0)?;
        for r in (0..l.co.p()).filter(|r| *r != root) {
            let d = l.ptr(r, 0)?;
            l.copy(d, src, bytes)?;
        }
        Ok(())
    })
}

pub(super) fn reduce(c: &Communicator, send: Input, recv: Option<&Buffer>, op: ReduceOp, root: i32, stream: Stream) -> Result<()> {
    let (n, dtype) = match (send, recv) {
        (Input::Buf(b), _) => (b.count(), b.dtype()),
        (Input::InPlace, Some(r)) => (r.count(), r.dtype()),
        _ => return Err(Error::Internal("in-place reduce off the root".into())),
    };
    let bytes = n * dtype.size();
    let input = match (send, recv) {
        (Input::Buf(b), _) => View::of(b),
        (Input::InPlace, Some(r)) => View::of(r),
        _ => unreachable!(),
    };
    let root = root as usize;
    let mut co = Coll::begin(c, "reduce", &[input_buf(send), recv], stream)?;
    if co.small(bytes) {
        co.stage_in(Some(input));
        co.exchange([BufRecord::default(); 2])?;
        if let Some(r) = recv {
            let out = host_reduce(&co, 0, n, dtype, op)?;
            co.deliver(View::of(r), &out)?;
        }
        return Ok(());
    }
    let recs = [co.s.export(Some(input)), co.s.export(recv.map(View::of))];
    if co.exchange(recs)? || !kernels_ok(c) {
        drop(co);
        return StagedPath.reduce(c, send, recv, op, root as i32, stream);
    }
    co.lead_or_follow(|l| {
        let out = l.ptr(root, 1)?;
        if l.fused_into(0, &[out], n, dtype, op)? {
            return Ok(());
        }
        // The root's input is its output when in place: accumulate elsewhere unless the root
        // is rank 0 (whose input is read first).
        let acc = if root != 0 && l.same(root) { l.scratch(bytes)? } else { out };
        l.reduce_into(acc, 0, n, dtype, op)?;
        l.copy(out, acc, bytes)
    })
}

pub(super) fn allreduce(c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<()> {
    let (n, dtype, bytes) = (recv.count(), recv.dtype(), recv.bytes());
    let input = in_view(send, recv, 0, bytes);
    let mut co = Coll::begin(c, "allreduce", &[input_buf(send), Some(recv)], stream)?;
    if co.small(bytes) {
        co.stage_in(Some(input));
        co.exchange([BufRecord::default(); 2])?;
        let out = host_reduce(&co, 0, n, dtype, op)?;
        return co.deliver(View::of(recv), &out);
    }
    let recs = [co.s.export(Some(input)), co.s.export(Some(View::of(recv)))];
    if co.exchange(recs)? || !kernels_ok(c) {
        drop(co);
        return StagedPath.allreduce(c, send, recv, op, stream);
    }
    co.lead_or_follow(|l| {
        let mut outs = Vec::with_capacity(l.co.p());
        for r in 0..l.co.p() {
            outs.push(l.ptr(r, 1)?);
        }
        if l.fused_into(0, &outs, n, dtype, op)? {
            return Ok(());
        }
        let o0 = outs[0];
        l.reduce_into(o0, 0, n, dtype, op)?;
        for r in 1..l.co.p() {
            let o = l.ptr(r, 1)?;
            l.copy(o, o0, bytes)?;
        }
        Ok(())
    })
}

/// As MPI_Scan (`exclusive` false) or MPI_Exscan: small inputs through the shared segment, each
/// rank reducing its prefix on the host; large ones by the leader with GPU kernels, in rank
/// order through the mappings (`Lead::scan_into`). Exscan leaves rank 0's `recv` untouched.
pub(super) fn scan(c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, exclusive: bool, stream: Stream) -> Result<()> {
    let (n, dtype, bytes) = (recv.count(), recv.dtype(), recv.bytes());
    let input = in_view(send, recv, 0, bytes);
    let mut co = Coll::begin(c, if exclusive { "exscan" } else { "scan" }, &[input_buf(send), Some(recv)], stream)?;
    let upto = co.me() + !exclusive as usize;
    if co.small(bytes) {
        co.stage_in(Some(input));
        co.exchange([BufRecord::default(); 2])?;
        if upto == 0 {
            return Ok(());
        }
        let out = host_reduce_ranks(&co, 0, n, dtype, op, upto)?;
        return co.deliver(View::of(recv), &out);
    }
    let recs = [co.s.export(Some(input)), co.s.export(Some(View::of(recv)))];
    if co.exchange(recs)? || !kernels_ok(c) {
        drop(co);
        return StagedPath.scan(c, send, recv, op, exclusive, stream);
    }
    co.lead_or_follow(|l| l.scan_into(n, dtype, op, exclusive))
}

pub(super) fn allgather(c: &Communicator, send: Input, recv: &Buffer, stream: Stream) -> Result<()> {
    let p = c.size() as usize;
    let counts = vec![recv.count() / p; p];
    gatherv(c, "allgather", send, Some(recv), &counts, None, stream)
}

pub(super) fn allgatherv(c: &Communicator, send: Input, recv: &Buffer, counts: &[usize], stream: Stream) -> Result<()> {
    gatherv(c, "allgatherv", send, Some(recv), counts, None, stream)
}

pub(super) fn reduce_scatter(c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<()> {
    let Input::Buf(sb) = send else { return Err(Error::Internal("in-place reduce_scatter".into())) };
    let (m, dtype) = (recv.count(), recv.dtype());
    let mb = m * dtype.size();
    let mut co = Coll::begin(c, "reduce_scatter", &[Some(sb), Some(recv)], stream)?;
    let me = co.me();
    if co.small(sb.bytes()) {
        co.stage_in(Some(View::of(sb)));
        co.exchange([BufRecord::default(); 2])?;
        let out = host_reduce(&co, me * mb, m, dtype, op)?;
        return co.deliver(View::of(recv), &out);
    }
    let recs = [co.s.export(Some(View::of(sb))), co.s.export(Some(View::of(recv)))];
    if co.exchange(recs)? || !kernels_ok(c) {
        drop(co);
        return StagedPath.reduce_scatter(c, send, recv, op, stream);
    }
    co.lead_or_follow(|l| {
        for r in 0..l.co.p() {
            let o = l.ptr(r, 1)?;
            if !l.fused_into(r * mb, &[o], m, dtype, op)? {
                l.reduce_into(o, r * mb, m, dtype, op)?;
            }
        }
        Ok(())
    })
}

pub(super) fn alltoall(c: &Communicator, send: Input, recv: &Buffer, stream: Stream) -> Result<()> {
    let p = c.size() as usize;
    let bytes = recv.bytes();
    let kb = bytes / p;
    let input = in_view(send, recv, 0, bytes);
    let mut co = Coll::begin(c, "alltoall", &[input_buf(send), Some(recv)], stream)?;
    let me = co.me();
    if co.small(bytes) {
        co.stage_in(Some(input));
        co.exchange([BufRecord::default(); 2])?;
        let mut out = vec![0u8; bytes];
        for q in 0..p {
            let d = co.data(q);
            if d.len() < (me + 1) * kb {
                return Err(Error::Internal("small alltoall: a rank published less data than expected".into()));
            }
            out[q * kb..(q + 1) * kb].copy_from_slice(&d[me * kb..(me + 1) * kb]);
        }
        return co.deliver(View::of(recv), &out);
    }
    let recs = [co.s.export(Some(input)), co.s.export(Some(View::of(recv)))];
    if co.exchange(recs)? {
        drop(co);
        return StagedPath.alltoall(c, send, recv, stream);
    }
    co.lead_or_follow(|l| {
        // Inputs of in-place ranks are overwritten by the exchange: copy them aside first.
        let inplace: Vec<usize> = (0..p).filter(|r| l.same(*r)).collect();
        let tmp = if inplace.is_empty() { 0 } else { l.scratch(inplace.len() * bytes)? };
        let mut src = vec![0usize; p];
        for (q, s) in src.iter_mut().enumerate() {
            let i = l.ptr(q, 0)?;
            *s = match inplace.iter().position(|r| *r == q) {
                Some(k) => {
                    l.copy(tmp + k * bytes, i, bytes)?;
                    tmp + k * bytes
                }
                None => i,
            };
        }
        for r in 0..p {
            let o = l.ptr(r, 1)?;
            for (q, s) in src.iter().enumerate() {
                l.copy(o + q * kb, s + r * kb, kb)?;
            }
        }
        Ok(())
    })
}

pub(super) fn gather(c: &Communicator, send: Input, recv: Option<&Buffer>, root: i32, stream: Stream) -> Result<()> {
    let p = c.size() as usize;
    let n = match (send, recv) {
        (Input::Buf(b), _) => b.count(),
        (Input::InPlace, Some(r)) => r.count() / p,
        _ => return Err(Error::Internal("in-place gather off the root".into())),
    };
    gatherv(c, "gather", send, recv, &vec![n; p], Some(root as usize), stream)
}

pub(super) fn scatter(c: &Communicator, send: Option<&Buffer>, recv: Input, root: i32, stream: Stream) -> Result<()> {
    let p = c.size() as usize;
    let root = root as usize;
    let (n, dtype) = match (recv, send) {
        (Input::Buf(b), _) => (b.count(), b.dtype()),
        (Input::InPlace, Some(s)) => (s.count() / p, s.dtype()),
        _ => return Err(Error::Internal("in-place scatter off the root".into())),
    };
    let nb = n * dtype.size();
    let me = c.rank() as usize;
    // This rank's output: its receive buffer, or its block of the root's send buffer.
    let out = match (recv, send) {
        (Input::Buf(b), _) => View::of(b),
        (Input::InPlace, Some(s)) => View::of(s).at(me * nb, nb),
        _ => unreachable!(),
    };
    let mut co = Coll::begin(c, "scatter", &[send, input_buf(recv)], stream)?;
    if co.small(p * nb) {
        co.stage_in(send.map(View::of));
        co.exchange([BufRecord::default(); 2])?;
        if !matches!(recv, Input::InPlace) {
            let d = co.data(root);
            if d.len() < (me + 1) * nb {
                return Err(Error::Internal("small scatter: the root published less data than expected".into()));
            }
            let mine = d[me * nb..(me + 1) * nb].to_vec();
            co.deliver(out, &mine)?;
        }
        return Ok(());
    }
    let recs = [co.s.export(send.map(View::of)), co.s.export(Some(out))];
    if co.exchange(recs)? {
        drop(co);
        return StagedPath.scatter(c, send, recv, root as i32, stream);
    }
    co.lead_or_follow(|l| {
        let src = l.ptr(root, 0)?;
        for q in 0..p {
            let o = l.ptr(q, 1)?;
            l.copy(o, src + q * nb, nb)?;
        }
        Ok(())
    })
}

/// allgather(v) (root None) and gather (root Some): `counts[q]` elements from rank q, placed
/// contiguously in rank order in every rank's (or the root's) `recv`.
fn gatherv(c: &Communicator, what: &'static str, send: Input, recv: Option<&Buffer>, counts: &[usize], root: Option<usize>, stream: Stream) -> Result<()> {
    let p = c.size() as usize;
    let me = c.rank() as usize;
    let dtype = match (send, recv) {
        (Input::Buf(b), _) => b.dtype(),
        (_, Some(r)) => r.dtype(),
        _ => return Err(Error::Internal(format!("in-place {what} without a receive buffer"))),
    };
    let es = dtype.size();
    let disp: Vec<usize> = counts.iter().scan(0, |a, n| {
        let d = *a;
        *a += n;
        Some(d)
    }).collect();
    let total: usize = counts.iter().sum();
    let input = match (send, recv) {
        (Input::Buf(b), _) => View::of(b),
        (Input::InPlace, Some(r)) => View::of(r).at(disp[me] * es, counts[me] * es),
        _ => unreachable!(),
    };
    let input = View { bytes: counts[me] * es, ..input };
    let mut co = Coll::begin(c, what, &[input_buf(send), recv], stream)?;
    let largest = counts.iter().max().copied().unwrap_or(0) * es;
    if co.small(largest) {
        co.stage_in(Some(input));
        co.exchange([BufRecord::default(); 2])?;
        if let Some(r) = recv.filter(|_| root.is_none_or(|x| x == me)) {
            let mut out = vec![0u8; total * es];
            for q in 0..p {
                let d = co.data(q);
                let b = counts[q] * es;
                if d.len() < b {
                    return Err(Error::Internal(format!("small {what}: a rank published less data than expected")));
                }
                out[disp[q] * es..disp[q] * es + b].copy_from_slice(&d[..b]);
            }
            co.deliver(View::of(r), &out)?;
        }
        return Ok(());
    }
    let recs = [co.s.export(Some(input)), co.s.export(recv.map(View::of))];
    if co.exchange(recs)? {
        drop(co);
        return match root {
            None => match recv {
                Some(r) => StagedPath.allgatherv(c, send, r, counts, stream),
                None => Err(Error::Internal(format!("{what} without a receive buffer"))),
            },
            Some(x) => StagedPath.gather(c, send, recv, x as i32, stream),
        };
    }
    co.lead_or_follow(|l| {
        let dests: Vec<usize> = match root {
            Some(x) => vec![x],
            None => (0..p).collect(),
        };
        let mut src = vec![0usize; p];
        for (q, s) in src.iter_mut().enumerate() {
            *s = l.ptr(q, 0)?;
        }
        for r in dests {
            let o = l.ptr(r, 1)?;
            for q in 0..p {
                l.copy(o + disp[q] * es, src[q], counts[q] * es)?;
            }
        }
        Ok(())
    })
}

/// As MPI_Reduce_scatter: rank r gets the reduction, in rank order, of block r (`counts[r]`
/// elements at the sum of the counts before it) of every rank's input. In place, the input is
/// `recv` (the sum of the counts) and rank r's block lands at its start. Small calls through the
/// segment (the host reduces); large ones by the leader with GPU kernels through the mappings,
/// into every rank's output, or, when some rank is in place (its output overlaps its input's
/// blocks), first into the leader's scratch and copied out after every block was read.
pub(super) fn reduce_scatterv(c: &Communicator, send: Input, recv: &Buffer, counts: &[usize], op: ReduceOp, stream: Stream) -> Result<()> {
    let (p, me) = (c.size() as usize, c.rank() as usize);
    let (dtype, es) = (recv.dtype(), recv.dtype().size());
    let disp: Vec<usize> = counts.iter().scan(0, |a, n| {
        let d = *a;
        *a += n;
        Some(d)
    }).collect();
    let total: usize = counts.iter().sum();
    let input = match send {
        Input::Buf(b) => View::of(b),
        Input::InPlace => View::of(recv),
    };
    let input = View { bytes: total * es, ..input };
    let output = View::of(recv).at(0, counts[me] * es);
    let mut co = Coll::begin(c, "reduce_scatterv", &[input_buf(send), Some(recv)], stream)?;
    if co.small(total * es) {
        co.stage_in(Some(input));
        co.exchange([BufRecord::default(); 2])?;
        if counts[me] == 0 {
            return Ok(());
        }
        let out = host_reduce(&co, disp[me] * es, counts[me], dtype, op)?;
        return co.deliver(output, &out);
    }
    let recs = [co.s.export(Some(input)), co.s.export(Some(View::of(recv)))];
    if co.exchange(recs)? || !kernels_ok(c) {
        drop(co);
        return StagedPath.reduce_scatterv(c, send, recv, counts, op, stream);
    }
    co.lead_or_follow(|l| {
        let blocks = (0..p).filter(|r| counts[*r] > 0);
        if (0..p).any(|r| l.same(r)) {
            let base = l.scratch(total * es)?;
            for r in blocks.clone() {
                l.reduce_into(base + disp[r] * es, disp[r] * es, counts[r], dtype, op)?;
            }
            for r in blocks {
                let o = l.ptr(r, 1)?;
                l.copy(o, base + disp[r] * es, counts[r] * es)?;
            }
        } else {
            for r in blocks {
                let o = l.ptr(r, 1)?;
                l.reduce_into(o, disp[r] * es, counts[r], dtype, op)?;
            }
        }
        Ok(())
    })
}

// ---- the v-collectives ----------------------------------------------------------------------

/// What one rank gives a v-collective through the mappings: its input and output (`None` where
/// it has none), and its layout: `sc[j]` elements to rank j from element `sd[j]` of the input,
/// rank j's block received at element `rd[j]` of the output.
struct VSide<'a> {
    input: Option<View>,
    output: Option<&'a Buffer>,
    sc: Vec<usize>,
    sd: Vec<usize>,
    rd: Vec<usize>,
}

/// alltoallv, gatherv and scatterv natively: each rank's layout reaches the leader by one
/// MPI_Gather (3 x size int64 per rank), the buffers' records by the shared segment; then the
/// leader copies every non-empty block q -> r from rank q's input to rank r's output through the
/// mappings (copy engine), inputs of in-place ranks (the same memory as input and output) first
/// set aside in its scratch. Memory a rank cannot export makes every rank take `staged`.
fn vcoll(c: &Communicator, what: &'static str, dtype: Dtype, side: VSide, bufs: &[Option<&Buffer>], stream: Stream, staged: impl FnOnce() -> Result<()>) -> Result<()> {
    let p = c.size() as usize;
    let es = dtype.size();
    let mine: Vec<i64> = side.sc.iter().chain(&side.sd).chain(&side.rd).map(|x| *x as i64).collect();
    let mut all = vec![0i64; if c.rank() == 0 { 3 * p * p } else { 1 }];
    let n = (3 * p) as std::ffi::c_int;
    // 3p int64 from every rank into the leader's `all` (rank order).
    let r = crate::comm::collective!(
        c,
        "MPI_Gather (IPC v-collective layouts)",
        MPI_Gather(mine.as_ptr().cast(), n, crate::mpisys::sys::RSMPI_INT64_T, all.as_mut_ptr().cast(), n, crate::mpisys::sys::RSMPI_INT64_T, 0, c.raw()),
        MPI_Igather
    );
    if r.is_err() {
        // An abandoned request (a timeout) may still use both.
        std::mem::forget((mine, all));
        return r;
    }
    let mut co = Coll::begin(c, what, bufs, stream)?;
    let recs = [co.s.export(side.input), co.s.export(side.output.map(View::of))];
    if co.exchange(recs)? {
        drop(co);
        return staged();
    }
    co.lead_or_follow(|l| {
        let at = |q: usize, k: usize, j: usize| all[q * 3 * p + k * p + j] as usize;
        // Bytes of rank q's input that its blocks reach.
        let extent = |q: usize| (0..p).filter(|j| at(q, 0, *j) > 0).map(|j| (at(q, 1, j) + at(q, 0, j)) * es).max().unwrap_or(0);
        let inplace: Vec<usize> = (0..p).filter(|q| extent(*q) > 0 && l.same(*q)).collect();
        let aside: usize = inplace.iter().map(|q| extent(*q)).sum();
        let tmp = if aside == 0 { 0 } else { l.scratch(aside)? };
        let mut src = vec![0usize; p];
        let mut used = 0;
        for (q, s) in src.iter_mut().enumerate() {
            if extent(q) == 0 {
                continue;
            }
            let i = l.ptr(q, 0)?;
            *s = if inplace.contains(&q) {
                l.copy(tmp + used, i, extent(q))?;
                used += extent(q);
                tmp + used - extent(q)
            } else {
                i
            };
        }
        for r in 0..p {
            if (0..p).all(|q| at(q, 0, r) == 0) {
                continue;
            }
            let o = l.ptr(r, 1)?;
            for q in 0..p {
                let n = at(q, 0, r);
                if n > 0 {
                    l.copy(o + at(r, 2, q) * es, src[q] + at(q, 1, r) * es, n * es)?;
                }
            }
        }
        Ok(())
    })
}

pub(super) fn alltoallv_blocks(c: &Communicator, send: Input, sb: Blocks, recv: &Buffer, rb: Blocks, stream: Stream) -> Result<()> {
    let input = match send {
        Input::Buf(b) => View::of(b),
        Input::InPlace => View::of(recv),
    };
    let side = VSide { input: Some(input), output: Some(recv), sc: sb.counts.to_vec(), sd: sb.displs.to_vec(), rd: rb.displs.to_vec() };
    vcoll(c, "alltoallv", recv.dtype(), side, &[input_buf(send), Some(recv)], stream, || StagedPath.alltoallv(c, send, sb, recv, rb, stream))
}

pub(super) fn gatherv_blocks(c: &Communicator, send: Input, recv: Option<&Buffer>, rb: Option<Blocks>, root: i32, stream: Stream) -> Result<()> {
    let (p, root_u) = (c.size() as usize, root as usize);
    let dtype = match (send, recv) {
        (Input::Buf(b), _) => b.dtype(),
        (_, Some(r)) => r.dtype(),
        _ => return Err(Error::Internal("in-place gatherv without a receive buffer".into())),
    };
    let mut sc = vec![0; p];
    // In place at the root: its block is already where it goes (nothing to copy).
    let input = match send {
        Input::Buf(b) => {
            sc[root_u] = b.count();
            Some(View::of(b))
        }
        Input::InPlace => None,
    };
    let rd = rb.map_or(vec![0; p], |b| b.displs.to_vec());
    let side = VSide { input, output: recv, sc, sd: vec![0; p], rd };
    vcoll(c, "gatherv", dtype, side, &[input_buf(send), recv], stream, || StagedPath.gatherv(c, send, recv, rb, root, stream))
}

pub(super) fn scatterv_blocks(c: &Communicator, send: Option<&Buffer>, sb: Option<Blocks>, recv: Input, root: i32, stream: Stream) -> Result<()> {
    let (p, me) = (c.size() as usize, c.rank() as usize);
    let dtype = match (recv, send) {
        (Input::Buf(b), _) => b.dtype(),
        (_, Some(s)) => s.dtype(),
        _ => return Err(Error::Internal("in-place scatterv without a send buffer".into())),
    };
    let (mut sc, sd) = sb.map_or((vec![0; p], vec![0; p]), |b| (b.counts.to_vec(), b.displs.to_vec()));
    let output = match recv {
        Input::Buf(b) => Some(b),
        Input::InPlace => {
            // In place at the root: its block stays where it is.
            sc[me] = 0;
            None
        }
    };
    let side = VSide { input: send.map(View::of), output, sc, sd, rd: vec![0; p] };
    vcoll(c, "scatterv", dtype, side, &[send, input_buf(recv)], stream, || StagedPath.scatterv(c, send, sb, recv, root, stream))
}
