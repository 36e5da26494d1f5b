//! The pure parts of the IPC backend, testable without CUDA or MPI: the layout of the shared host
//! segment, waits on its counters with a deadline, the bounded cache of opened mappings, the
//! completion cells of point-to-point sends, the claim words that decide between a worker and a
//! rank giving up (one-sided timeouts), and the two-phase leave of a communicator's free.
//!
//! The segment holds one [`Slot`] per rank, [`SLOT_BYTES`] apart (a multiple of the page size, so
//! no two ranks' counters share a cache line). Every field another process reads is either an
//! atomic, or plain data written before a Release store of an atomic and read after the Acquire
//! load that observed it.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::Result;

/// Bytes of data a rank may place in its slot per collective call (the small-message path).
pub(crate) const SMALL: usize = 1024;

/// Completion cells per rank (point-to-point sends in flight that wait for their receiver).
pub(crate) const CELLS: usize = 512;

/// Mappings of one peer's allocations kept open (least recently used closed first).
pub(crate) const MAPPINGS_PER_PEER: usize = 64;

/// A counter alone on its cache line.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct Counter(pub AtomicU64);

/// What a rank publishes about one of its buffers for a collective or a send.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufRecord {
    /// [`REC_NONE`], [`REC_HANDLE`] or [`REC_LOCAL_ONLY`].
    pub kind: u32,
    pub _pad: u32,
    /// Allocation base in the exporter's address space.
    pub base: u64,
    /// Offset of the buffer from the base.
    pub offset: u64,
    /// CU_POINTER_ATTRIBUTE_BUFFER_ID of the allocation (unique in the exporter's process).
    pub id: u64,
    /// Allocation size in bytes.
    pub size: u64,
    /// The exporting process ([`proc_id`]: its pid in the high 32 bits, a random nonce in the
    /// low ones): the key of the process-wide mapping cache, with `id`.
    pub proc_id: u64,
    /// The CUipcMemHandle of the allocation base.
    pub handle: [u8; 64],
}

/// This process's identity in [`BufRecord::proc_id`]: pid << 32 | a random 32-bit nonce (the pid
/// alone could repeat across PID namespaces of one node).
pub fn proc_id() -> u64 {
    static ID: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *ID.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        ((std::process::id() as u64) << 32) | (h.finish() & 0xffff_ffff)
    })
}

/// No buffer (this rank has no such argument in this call).
pub(crate) const REC_NONE: u32 = 0;
/// Exported device memory: peers open `handle`.
pub(crate) const REC_HANDLE: u32 = 1;
/// Memory that cannot be exported (managed, host, VMM without IPC): the call takes the staged
/// MPI path on every rank.
pub(crate) const REC_LOCAL_ONLY: u32 = 2;

impl Default for BufRecord {
    fn default() -> Self {
        BufRecord { kind: REC_NONE, _pad: 0, base: 0, offset: 0, id: 0, size: 0, proc_id: 0, handle: [0; 64] }
    }
}

/// Call status a rank publishes with its arrival.
pub(crate) const ST_OK: u32 = 0;
/// This rank failed before the exchange; `code` and `msg` say how.
pub(crate) const ST_ERROR: u32 = 2;

/// One rank's part of one collective call (two of them alternate by the parity of the call's
/// sequence number: a rank can be at most one call ahead of the slowest reader).
#[repr(C, align(64))]
pub struct CallArea {
    /// [`ST_OK`] or [`ST_ERROR`] of this rank's preparation.
    pub status: u32,
    /// gpuwire status code of the error (with `msg`).
    pub code: i32,
    /// The leader's outcome of the device work: [`ST_OK`] or [`ST_ERROR`] (with `rcode`, `rmsg`).
    pub result: u32,
    pub rcode: i32,
    /// Bytes in `data`.
    pub data_bytes: u64,
    pub rec: [BufRecord; 2],
    pub msg: [u8; 256],
    pub rmsg: [u8; 256],
    pub data: [u8; SMALL],
}

/// Words of a slot that GPU streams write (`cuStreamWriteValue32`) and wait for
/// (`cuStreamWaitValue32`, cyclic GEQ) through each process's registration of the segment: the
/// low 32 bits of collective sequence numbers, which grow by one per collective. A
/// communicator's stream-ordered collectives run in call order on the GPU (`coll.rs`), so each
/// word only grows.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct GpuWords {
    /// The collective whose place this rank's stream has reached (its inputs are ready).
    pub ready: std::sync::atomic::AtomicU32,
    /// The last collective whose device work this rank (the leader) has finished on its stream.
    pub done: std::sync::atomic::AtomicU32,
}

/// One rank's slot of the shared segment.
#[repr(C)]
pub struct Slot {
    /// Sequence number of the last collective this rank arrived at (its records are published).
    pub arrive: Counter,
    /// Sequence number of the last collective whose device work this rank (the leader) finished.
    pub done: Counter,
    /// This rank's progress through the communicator's free ([`LEAVING`], [`LEFT`],
    /// [`LEAVE_ABANDONED`]; see [`leave`]).
    pub leave: Counter,
    /// This rank's claim word of its current collective ([`claim_word`] of the call's sequence
    /// number): OFFERED when it arrived, CLAIMED by the leader before it touches this rank's
    /// buffers, ABANDONED by this rank when it gave up first.
    pub cstate: Counter,
    /// Nonzero once this rank aborted the communicator (gpuwire_comm_abort): the communicator's
    /// broken flag, which every peer's wait reads (`super::broken`).
    pub aborted: Counter,
    /// The words this rank's stream writes and the peers' streams wait on (stream-ordered
    /// collectives, `coll.rs`).
    pub gpu: GpuWords,
    pub call: [CallArea; 2],
    /// Completion cells of this rank's sends: claim words ([`claim_word`]) of the send's
    /// generation: OFFERED by the sender, CLAIMED by the receiver before it reads the sender's
    /// memory, then DONE or FAILED by it; ABANDONED by a sender that gave up first.
    pub cells: [AtomicU64; CELLS],
    /// The GPU words of the completion cells, for stream-ordered sends (`p2p.rs`).
    pub cgpu: [CellWords; CELLS],
}

/// The GPU words of one completion cell (low 32 bits of the send's generation), for a
/// stream-ordered send: the sender's stream writes `ready` where the send is in it; the
/// receiver's stream waits for it, copies, and writes `done`, which the sender's stream waits
/// for before its later work.
#[repr(C)]
#[derive(Debug, Default)]
pub struct CellWords {
    pub ready: std::sync::atomic::AtomicU32,
    pub done: std::sync::atomic::AtomicU32,
}

/// Whether a 32-bit GPU word has reached `v` (the cyclic comparison of `cuStreamWaitValue32`'s
/// GEQ).
pub fn reached(w: &std::sync::atomic::AtomicU32, v: u32) -> bool {
    (w.load(Ordering::Acquire).wrapping_sub(v) as i32) >= 0
}

/// Distance between two ranks' slots (page multiple).
pub(crate) const SLOT_BYTES: usize = std::mem::size_of::<Slot>().next_multiple_of(4096);

/// The segment: `p` slots from `base`.
#[derive(Clone, Copy, Debug)]
pub struct Seg {
    pub base: usize,
    pub p: usize,
}

impl Seg {
    /// # Safety
    /// `base` must point to `p * SLOT_BYTES` bytes, zeroed before any rank uses them, that live
    /// as long as the returned value is used.
    pub unsafe fn new(base: usize, p: usize) -> Seg {
        Seg { base, p }
    }

    pub fn bytes(p: usize) -> usize {
        p * SLOT_BYTES
    }

    pub fn slot(&self, r: usize) -> &Slot {
        assert!(r < self.p, "slot {r} of {}", self.p);
        // SAFETY: in bounds (checked), aligned (page multiple from an aligned base), valid for the
        // life of the segment (Seg::new's contract); shared fields are atomics.
        unsafe { &*((self.base + r * SLOT_BYTES) as *const Slot) }
    }

    /// Rank `r`'s call area for sequence number `seq` (raw: other processes write it too).
    pub fn area(&self, r: usize, seq: u64) -> *mut CallArea {
        let s = self.slot(r) as *const Slot as *mut Slot;
        // SAFETY: a field of a valid slot.
        unsafe { std::ptr::addr_of_mut!((*s).call[(seq % 2) as usize]) }
    }

    /// Releases every stream wait on this segment's GPU words, on every rank (an aborted
    /// communicator: its later operations fail at the call, and no stream may be left waiting
    /// for a peer that will not come, as `ncclCommAbort` ends NCCL's kernels): every word is
    /// moved 2^30 ahead, past any sequence number or generation enqueued before.
    pub fn release_all(&self) {
        let ahead = |w: &std::sync::atomic::AtomicU32| {
            let _ = w.fetch_add(1 << 30, Ordering::AcqRel);
        };
        for r in 0..self.p {
            let s = self.slot(r);
            ahead(&s.gpu.ready);
            ahead(&s.gpu.done);
            for c in &s.cgpu {
                ahead(&c.ready);
                ahead(&c.done);
            }
        }
    }

    /// Ranks whose `field` counter is below `v`.
    pub fn behind(&self, v: u64, field: impl Fn(&Slot) -> &Counter) -> Vec<usize> {
        (0..self.p).filter(|r| field(self.slot(*r)).0.load(Ordering::Acquire) < v).collect()
    }
}

/// Copies `s` into a fixed field, truncated, NUL-terminated.
pub fn put_text(dst: &mut [u8], s: &str) {
    let n = s.len().min(dst.len() - 1);
    dst[..n].copy_from_slice(&s.as_bytes()[..n]);
    dst[n] = 0;
}

/// The text of a field written by [`put_text`].
pub fn get_text(src: &[u8]) -> String {
    let end = src.iter().position(|b| *b == 0).unwrap_or(src.len());
    String::from_utf8_lossy(&src[..end]).into_owned()
}

/// Why a wait ended without its condition.
#[derive(Debug, PartialEq, Eq)]
pub enum Stop {
    TimedOut,
    Broken,
}

/// Polls `ready` until it is true: spins first, then yields the CPU. Stops at `timeout` (from
/// now) or when `broken` says the communicator broke (both checked every few hundred polls).
/// A wait that lasts (past 1024 polls) lets MPI progress every 256 polls
/// (`runtime::poke_progress`): a peer may be waiting for this process's sends in flight (an
/// isend of host memory goes as an MPI message), which move only while it is inside MPI.
pub fn spin_until(timeout: Option<Duration>, mut broken: impl FnMut() -> bool, mut ready: impl FnMut() -> Result<bool>) -> Result<std::result::Result<(), Stop>> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut i: u64 = 0;
    loop {
        if ready()? {
            return Ok(Ok(()));
        }
        i += 1;
        if i % 256 == 0 {
            if broken() {
                return Ok(Err(Stop::Broken));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(Err(Stop::TimedOut));
            }
            if i >= 1024 {
                crate::runtime::poke_progress();
            }
        }
        if i < 20_000 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// A bounded map of open resources (IPC mappings), least recently used evicted (and closed)
/// first.
pub struct Lru<K, V> {
    cap: usize,
    tick: u64,
    map: HashMap<K, (V, u64)>,
}

impl<K: Eq + Hash + Copy, V: Copy> Lru<K, V> {
    pub fn new(cap: usize) -> Self {
        Lru { cap: cap.max(1), tick: 0, map: HashMap::new() }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The value for `key`, opened with `open` when absent (after closing the least recently used
    /// entry with `close` when full).
    pub fn get_or_open(&mut self, key: K, open: impl FnOnce() -> Result<V>, mut close: impl FnMut(V)) -> Result<V> {
        self.tick += 1;
        if let Some(e) = self.map.get_mut(&key) {
            e.1 = self.tick;
            return Ok(e.0);
        }
        let v = open()?;
        if self.map.len() >= self.cap {
            if let Some(old) = self.map.iter().min_by_key(|(_, (_, t))| *t).map(|(k, _)| *k) {
                if let Some((ov, _)) = self.map.remove(&old) {
                    close(ov);
                }
            }
        }
        self.map.insert(key, (v, self.tick));
        Ok(v)
    }

    /// Whether some entry's value satisfies `pred`.
    pub fn any(&self, pred: impl Fn(&V) -> bool) -> bool {
        self.map.values().any(|(v, _)| pred(v))
    }

    pub fn contains(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    /// Closes and removes every entry for which `pred` holds.
    pub fn evict_if(&mut self, pred: impl Fn(&K, &V) -> bool, mut close: impl FnMut(V)) {
        let keys: Vec<K> = self.map.iter().filter(|(k, (v, _))| pred(k, v)).map(|(k, _)| *k).collect();
        for k in keys {
            if let Some((v, _)) = self.map.remove(&k) {
                close(v);
            }
        }
    }

    /// Closes and removes everything.
    pub fn drain(&mut self, mut close: impl FnMut(V)) {
        for (_, (v, _)) in self.map.drain() {
            close(v);
        }
    }
}

/// Allocation of this rank's completion cells. A cell is free again once its send ended: its word
/// says DONE, FAILED or ABANDONED for the generation it was last given (generations only grow,
/// so an old receiver never mistakes a newer send for its own).
#[derive(Debug)]
pub struct Cells {
    assigned: Vec<u64>,
    /// Whether the cell's last send was stream-ordered.
    ordered: Vec<bool>,
    next: usize,
    generation: u64,
}

impl Default for Cells {
    fn default() -> Self {
        Cells::new(CELLS)
    }
}

impl Cells {
    pub fn new(n: usize) -> Cells {
        Cells { assigned: vec![0; n], ordered: vec![false; n], next: 0, generation: 0 }
    }

    /// A free cell and its new generation, or None when all are in use. The cell's word is set
    /// to OFFERED(generation) here, before the header that names it is sent. A cell whose last
    /// send was stream-ordered is free only once the receiver's stream has also written that
    /// send's `done` word in `gpu` (its copy happened, not only its enqueueing). `ordered`:
    /// whether the new send is.
    pub fn take(&mut self, cells: &[AtomicU64], gpu: &[CellWords], ordered: bool) -> Option<(usize, u64)> {
        for k in 0..cells.len() {
            let i = (self.next + k) % cells.len();
            let w = cells[i].load(Ordering::Acquire);
            let free = self.assigned[i] == 0 || (claim_tag(w) == self.assigned[i] && matches!(claim_state(w), DONE | FAILED | ABANDONED | REFUSED_COUNT | REFUSED_DTYPE));
            let copied = !self.ordered[i] || reached(&gpu[i].done, self.assigned[i] as u32);
            if free && copied {
                self.generation += 1;
                self.assigned[i] = self.generation;
                self.ordered[i] = ordered;
                self.next = (i + 1) % cells.len();
                cells[i].store(claim_word(self.generation, OFFERED), Ordering::Release);
                return Some((i, self.generation));
            }
        }
        None
    }
}

/// How the send that took (cell, generation) stands: None while its receiver has not finished,
/// Some(true) when it delivered, Some(false) when its copy failed or it refused the message (the
/// receiver reports why).
pub fn cell_done(cells: &[AtomicU64], cell: usize, generation: u64) -> Option<bool> {
    cell_end(cells, cell, generation).map(|st| st == DONE)
}

/// How a send's completion cell ended (DONE, FAILED, REFUSED_COUNT, REFUSED_DTYPE), or None
/// while it is pending.
pub fn cell_end(cells: &[AtomicU64], cell: usize, generation: u64) -> Option<u64> {
    let w = cells[cell].load(Ordering::Acquire);
    if claim_tag(w) != generation {
        // Reused: only after this send ended (never while it waits).
        return Some(DONE);
    }
    match claim_state(w) {
        st @ (DONE | FAILED | REFUSED_COUNT | REFUSED_DTYPE) => Some(st),
        _ => None,
    }
}

// ---- claim words ---------------------------------------------------------------------------
//
// A claim word decides, with one compare-and-swap, between a worker that is about to use a
// rank's memory (the leader of a collective, the receiver of a send) and that rank giving up
// (its wait timed out): whoever moves the word out of OFFERED first wins. A rank that lost knows
// the worker is using its memory and waits for it to finish, without a deadline (the work is
// running: one device operation); a worker that lost touches nothing and reports the error.

/// Offered for work (a rank arrived at a collective; a send is waiting for its receiver).
pub(crate) const OFFERED: u64 = 1;
/// The worker claimed it and is using the rank's memory.
pub(crate) const CLAIMED: u64 = 2;
/// The rank gave up first: nobody may touch its memory.
pub(crate) const ABANDONED: u64 = 3;
/// The worker finished (completion cells).
pub(crate) const DONE: u64 = 4;
/// The worker's copy failed (completion cells).
pub(crate) const FAILED: u64 = 5;
/// The receiver refused the message: its size (or, in checking mode, its element count) is not
/// the receive buffer's (completion cells).
pub(crate) const REFUSED_COUNT: u64 = 6;
/// The receiver refused the message: another datatype (checking mode; completion cells).
pub(crate) const REFUSED_DTYPE: u64 = 7;

/// The word of `tag` (a sequence number or generation, below 2^60) in `state`.
pub const fn claim_word(tag: u64, state: u64) -> u64 {
    (tag << 3) | state
}
pub const fn claim_tag(w: u64) -> u64 {
    w >> 3
}
pub const fn claim_state(w: u64) -> u64 {
    w & 7
}

/// The worker's side: OFFERED(tag) -> CLAIMED(tag). Err(the word found) when it was not offered
/// for this tag (abandoned, or another call's).
pub fn claim(w: &AtomicU64, tag: u64) -> std::result::Result<(), u64> {
    w.compare_exchange(claim_word(tag, OFFERED), claim_word(tag, CLAIMED), Ordering::AcqRel, Ordering::Acquire).map(|_| ())
}

/// The giving-up side: OFFERED(tag) -> ABANDONED(tag). True when this side won (nobody will
/// touch its memory for this tag); false when a worker claimed it first.
pub fn abandon(w: &AtomicU64, tag: u64) -> bool {
    w.compare_exchange(claim_word(tag, OFFERED), claim_word(tag, ABANDONED), Ordering::AcqRel, Ordering::Acquire).is_ok()
}

/// The worker's end: CLAIMED(tag) -> DONE(tag) or FAILED(tag).
pub fn finish(w: &AtomicU64, tag: u64, ok: bool) {
    w.store(claim_word(tag, if ok { DONE } else { FAILED }), Ordering::Release);
}

/// The worker's end when it refused the message (REFUSED_COUNT or REFUSED_DTYPE).
pub fn refuse(w: &AtomicU64, tag: u64, state: u64) {
    w.store(claim_word(tag, state), Ordering::Release);
}

// ---- leaving a communicator ----------------------------------------------------------------
//
// MPI_Win_free is collective: one rank calling it alone hangs. Every rank's `leave` word goes
// 0 -> LEAVING when it reaches the free; a rank that saw every rank LEAVING (or beyond) moves
// to LEFT, one that did not in time (or whose communicator is broken) to LEAVE_ABANDONED. Both
// are final. A LEFT rank then waits until no rank is LEAVING any more (each such rank ends its
// own bounded wait) and frees the window only if every rank is LEFT: all LEFT ranks see the same
// final words, so they all decide alike, and an abandoning rank never frees.

pub(crate) const LEAVING: u64 = 1;
pub(crate) const LEFT: u64 = 2;
pub(crate) const LEAVE_ABANDONED: u64 = 3;

/// The decision of a LEFT rank from every rank's leave word.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum LeaveDecision {
    /// A rank is still LEAVING (or not there).
    Wait,
    /// Every rank is LEFT: call MPI_Win_free.
    Free,
    /// A rank abandoned: leave the window to MPI_Finalize.
    Skip,
}

pub fn leave_decision(words: impl IntoIterator<Item = u64>) -> LeaveDecision {
    let mut wait = false;
    for w in words {
        if w == LEAVE_ABANDONED {
            return LeaveDecision::Skip;
        }
        if w < LEFT {
            wait = true;
        }
    }
    if wait { LeaveDecision::Wait } else { LeaveDecision::Free }
}

/// Rank `me`'s leave over the ranks' `words`: true when the window may be freed (every rank then
/// gets true); false when it must be left to MPI_Finalize. `broken`: this rank's communicator is
/// broken (it abandons at once). Each wait is bounded by `timeout` (none: unbounded).
pub fn leave(words: &[&AtomicU64], me: usize, timeout: Option<Duration>, broken: bool) -> bool {
    let mine = words[me];
    if broken {
        mine.store(LEAVE_ABANDONED, Ordering::Release);
        return false;
    }
    mine.store(LEAVING, Ordering::Release);
    let all_here = || words.iter().all(|w| w.load(Ordering::Acquire) >= LEAVING);
    if !matches!(spin_until(timeout, || false, || Ok(all_here())), Ok(Ok(()))) {
        mine.store(LEAVE_ABANDONED, Ordering::Release);
        return false;
    }
    mine.store(LEFT, Ordering::Release);
    // Every rank still LEAVING ends its own bounded wait within its timeout (they all have the
    // same one); twice that, plus a second, before this rank assumes one is gone.
    let bound = timeout.map(|t| t * 2 + Duration::from_secs(1));
    let mut decision = LeaveDecision::Wait;
    let r = spin_until(bound, || false, || {
        decision = leave_decision(words.iter().map(|w| w.load(Ordering::Acquire)));
        Ok(decision != LeaveDecision::Wait)
    });
    if !matches!(r, Ok(Ok(()))) {
        mine.store(LEAVE_ABANDONED, Ordering::Release);
        return false;
    }
    decision == LeaveDecision::Free
}

/// Locks `m`, also when a thread panicked holding it (the IPC state stays usable).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::sync::Arc;

    /// Page-aligned zeroed memory standing in for the MPI window (also for `watch`'s tests).
    pub(in crate::backend::ipc) fn segment(p: usize) -> (Vec<u8>, Seg) {
        let mut mem = vec![0u8; Seg::bytes(p) + 4096];
        let base = (mem.as_mut_ptr() as usize).next_multiple_of(4096);
        // SAFETY: base..base+p*SLOT_BYTES lies in `mem`, zeroed; the tests keep `mem` alive.
        (mem, unsafe { Seg::new(base, p) })
    }

    #[test]
    fn slot_layout_is_padded_and_page_multiple() {
        assert_eq!(SLOT_BYTES % 4096, 0);
        assert!(SLOT_BYTES >= std::mem::size_of::<Slot>());
        assert_eq!(std::mem::size_of::<Counter>(), 64);
        assert_eq!(std::mem::size_of::<BufRecord>(), 112);
        assert!(std::mem::size_of::<CallArea>() >= SMALL + 2 * 112);
        assert_eq!(std::mem::align_of::<CallArea>(), 64);
        let (_m, seg) = segment(3);
        // Counters of one slot on distinct cache lines; slots at SLOT_BYTES.
        let s0 = seg.slot(0) as *const Slot as usize;
        assert_eq!(seg.slot(1) as *const Slot as usize - s0, SLOT_BYTES);
        let a = &seg.slot(0).arrive as *const Counter as usize;
        let d = &seg.slot(0).done as *const Counter as usize;
        assert_eq!(d - a, 64);
        // Two call areas alternate by parity.
        assert_ne!(seg.area(1, 4), seg.area(1, 5));
        assert_eq!(seg.area(1, 4), seg.area(1, 6));
    }

    #[test]
    fn text_fields_truncate() {
        let mut f = [0u8; 8];
        put_text(&mut f, "hello world");
        assert_eq!(get_text(&f), "hello w");
        put_text(&mut f, "hi");
        assert_eq!(get_text(&f), "hi");
    }

    #[test]
    fn waits_see_other_threads_and_time_out() {
        let (_m, seg) = segment(2);
        let base = seg.base;
        // A "peer" thread arrives after 20 ms.
        let t = std::thread::spawn(move || {
            // SAFETY: the segment outlives the thread (joined below).
            let seg = unsafe { Seg::new(base, 2) };
            std::thread::sleep(Duration::from_millis(20));
            seg.slot(1).arrive.0.store(1, Ordering::Release);
        });
        seg.slot(0).arrive.0.store(1, Ordering::Release);
        let r = spin_until(Some(Duration::from_secs(10)), || false, || Ok(seg.behind(1, |s| &s.arrive).is_empty())).unwrap();
        assert_eq!(r, Ok(()));
        t.join().unwrap();
        // Nobody arrives at 2: a timeout, naming rank 1 (and 0) as behind.
        let t0 = Instant::now();
        let r = spin_until(Some(Duration::from_millis(30)), || false, || Ok(seg.behind(2, |s| &s.arrive).is_empty())).unwrap();
        assert_eq!(r, Err(Stop::TimedOut));
        assert!(t0.elapsed() >= Duration::from_millis(30));
        assert_eq!(seg.behind(2, |s| &s.arrive), vec![0, 1]);
        // A broken communicator ends the wait at once.
        let r = spin_until(None, || true, || Ok(false)).unwrap();
        assert_eq!(r, Err(Stop::Broken));
        // An error from the condition is returned.
        assert!(spin_until(None, || false, || Err(crate::error::Error::Internal("x".into()))).is_err());
    }

    #[test]
    fn lru_is_keyed_by_buffer_id_and_bounded() {
        // Keys (peer, buffer id); a fake opener counts opens, a closer records closes.
        let opened = std::cell::Cell::new(0u64);
        let mut closed = Vec::new();
        let mut c: Lru<(usize, u64), u64> = Lru::new(2);
        let open = |k: (usize, u64)| {
            opened.set(opened.get() + 1);
            Ok(1000 + k.1)
        };
        assert_eq!(c.get_or_open((1, 7), || open((1, 7)), |v| closed.push(v)).unwrap(), 1007);
        // The same allocation again: no second open.
        assert_eq!(c.get_or_open((1, 7), || open((1, 7)), |v| closed.push(v)).unwrap(), 1007);
        assert_eq!(opened.get(), 1);
        // A new allocation at the same address has a new buffer id: a new mapping, never the old.
        assert_eq!(c.get_or_open((1, 8), || open((1, 8)), |v| closed.push(v)).unwrap(), 1008);
        assert_eq!(opened.get(), 2);
        // Touch 7, then a third key evicts the least recently used (8), closing it.
        c.get_or_open((1, 7), || open((1, 7)), |v| closed.push(v)).unwrap();
        c.get_or_open((1, 9), || open((1, 9)), |v| closed.push(v)).unwrap();
        assert_eq!(closed, vec![1008]);
        assert_eq!(c.len(), 2);
        // A failed open leaves the cache as it was.
        assert!(c.get_or_open((1, 10), || Err(crate::error::Error::Cuda("no".into())), |v| closed.push(v)).is_err());
        assert_eq!(c.len(), 2);
        let mut rest = Vec::new();
        c.drain(|v| rest.push(v));
        rest.sort();
        assert_eq!(rest, vec![1007, 1009]);
        assert!(c.is_empty());
    }

    #[test]
    fn lru_evict_if_closes_only_matching_entries() {
        // Values (base, size) of the exporter's allocations: a new allocation overlapping a
        // cached one evicts it (the old one was freed), a disjoint one stays.
        let mut c: Lru<u64, (u64, u64)> = Lru::new(8);
        for (id, base) in [(1u64, 0x1000u64), (2, 0x3000), (3, 0x5000)] {
            c.get_or_open(id, || Ok((base, 0x1000)), |_| {}).unwrap();
        }
        let (b, e) = (0x2800u64, 0x3800u64);
        let mut closed = Vec::new();
        c.evict_if(|_, v| v.0 < e && b < v.0 + v.1, |v| closed.push(v.0));
        assert_eq!(closed, vec![0x3000]);
        assert!(c.contains(&1) && !c.contains(&2) && c.contains(&3));
    }

    #[test]
    fn cells_are_reused_only_after_completion() {
        let cells: Arc<Vec<AtomicU64>> = Arc::new((0..4).map(|_| AtomicU64::new(0)).collect());
        let gpu: Vec<CellWords> = (0..4).map(|_| CellWords::default()).collect();
        let mut a = Cells::new(4);
        let taken: Vec<(usize, u64)> = (0..4).map(|_| a.take(&cells, &gpu, false).unwrap()).collect();
        assert_eq!(taken.iter().map(|t| t.0).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        assert!(a.take(&cells, &gpu, false).is_none(), "all four in flight");
        assert_eq!(cell_done(&cells, 2, taken[2].1), None);
        // The receiver claims send 2: still in flight, and the sender can no longer abandon it.
        claim(&cells[2], taken[2].1).unwrap();
        assert!(a.take(&cells, &gpu, false).is_none());
        assert!(!abandon(&cells[2], taken[2].1));
        assert_eq!(cell_done(&cells, 2, taken[2].1), None);
        finish(&cells[2], taken[2].1, true);
        assert_eq!(cell_done(&cells, 2, taken[2].1), Some(true));
        let (i, g) = a.take(&cells, &gpu, false).unwrap();
        assert_eq!(i, 2);
        assert!(g > taken[2].1);
        // The old send still reads as complete; the new one not yet.
        assert_eq!(cell_done(&cells, 2, taken[2].1), Some(true));
        assert_eq!(cell_done(&cells, 2, g), None);
        // Send 0's sender gives up first: its receiver may not claim it, and the cell is free.
        assert!(abandon(&cells[0], taken[0].1));
        assert_eq!(claim(&cells[0], taken[0].1), Err(claim_word(taken[0].1, ABANDONED)));
        let (j, g2) = a.take(&cells, &gpu, false).unwrap();
        assert_eq!(j, 0);
        // A late receiver of the abandoned send cannot claim the cell's new send either.
        assert!(claim(&cells[0], taken[0].1).is_err());
        claim(&cells[0], g2).unwrap();
        finish(&cells[0], g2, false);
        assert_eq!(cell_done(&cells, 0, g2), Some(false));
        // A failed send frees its cell too.
        let (k, g3) = a.take(&cells, &gpu, true).unwrap();
        assert_eq!(k, 0);
        // A stream-ordered send: finished on the host (its copy enqueued), it is free only once
        // the receiver's stream wrote its done word.
        claim(&cells[0], g3).unwrap();
        finish(&cells[0], g3, true);
        for c in [1, 3] {
            claim(&cells[c], taken[c].1).unwrap();
            finish(&cells[c], taken[c].1, true);
        }
        assert_eq!(a.take(&cells, &gpu, false).map(|t| t.0), Some(1));
        assert_eq!(a.take(&cells, &gpu, false).map(|t| t.0), Some(3));
        assert!(a.take(&cells, &gpu, false).is_none(), "cell 0 copied on the GPU not yet");
        gpu[0].done.store(g3 as u32, Ordering::Release);
        assert_eq!(a.take(&cells, &gpu, false).map(|t| t.0), Some(0));
        assert!(reached(&gpu[0].done, g3 as u32 - 5) && !reached(&gpu[0].done, g3 as u32 + 1));
    }

    #[test]
    fn claim_words_decide_between_worker_and_quitter() {
        let w = AtomicU64::new(0);
        // Not offered yet: neither side can move it.
        assert!(claim(&w, 5).is_err());
        assert!(!abandon(&w, 5));
        w.store(claim_word(5, OFFERED), Ordering::Release);
        // Another call's claim fails.
        assert!(claim(&w, 4).is_err());
        assert!(claim(&w, 5).is_ok());
        assert!(!abandon(&w, 5), "claimed: the quitter must wait");
        w.store(claim_word(6, OFFERED), Ordering::Release);
        assert!(abandon(&w, 6));
        assert_eq!(claim(&w, 6), Err(claim_word(6, ABANDONED)));
        assert_eq!(claim_tag(claim_word(1 << 40, CLAIMED)), 1 << 40);
        assert_eq!(claim_state(claim_word(1 << 40, CLAIMED)), CLAIMED);
    }

    #[test]
    fn claim_race_has_exactly_one_winner() {
        // A worker and a quitter race on many words: exactly one side wins each, and the words
        // end as the winner left them.
        for round in 0..200u64 {
            let w = Arc::new(AtomicU64::new(claim_word(round, OFFERED)));
            let w2 = w.clone();
            let quitter = std::thread::spawn(move || abandon(&w2, round));
            let worker = claim(&w, round).is_ok();
            let quit = quitter.join().unwrap();
            assert!(worker ^ quit, "round {round}: worker {worker}, quitter {quit}");
            let st = claim_state(w.load(Ordering::Acquire));
            assert_eq!(st, if worker { CLAIMED } else { ABANDONED });
        }
    }

    #[test]
    fn leave_decisions() {
        use LeaveDecision::*;
        assert_eq!(leave_decision([LEFT, LEFT, LEFT]), Free);
        assert_eq!(leave_decision([LEFT, LEAVING, LEFT]), Wait);
        assert_eq!(leave_decision([LEFT, 0, LEFT]), Wait);
        assert_eq!(leave_decision([LEFT, LEAVING, LEAVE_ABANDONED]), Skip);
        assert_eq!(leave_decision([LEAVE_ABANDONED, LEFT]), Skip);
    }

    /// Runs `leave` on p threads over shared words; `arrive[r]`: None = rank r never leaves,
    /// Some((delay, broken)).
    fn run_leave(arrive: Vec<Option<(u64, bool)>>, timeout: Duration) -> Vec<Option<bool>> {
        let p = arrive.len();
        let words: Arc<Vec<AtomicU64>> = Arc::new((0..p).map(|_| AtomicU64::new(0)).collect());
        let hs: Vec<_> = arrive
            .into_iter()
            .enumerate()
            .map(|(r, a)| {
                let words = words.clone();
                std::thread::spawn(move || {
                    let (delay, broken) = a?;
                    std::thread::sleep(Duration::from_millis(delay));
                    let refs: Vec<&AtomicU64> = words.iter().collect();
                    Some(leave(&refs, r, Some(timeout), broken))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn leave_frees_only_when_every_rank_agrees() {
        let t = Duration::from_millis(200);
        // Everyone comes (at different times, well within the timeout): all free.
        assert_eq!(run_leave(vec![Some((0, false)), Some((50, false)), Some((100, false))], Duration::from_secs(2)), vec![Some(true); 3]);
        // One never comes: nobody frees.
        assert_eq!(run_leave(vec![Some((0, false)), None, Some((10, false))], t), vec![Some(false), None, Some(false)]);
        // One comes broken: nobody frees (and the others do not wait out their timeout).
        let t0 = Instant::now();
        assert_eq!(run_leave(vec![Some((0, false)), Some((0, true))], Duration::from_secs(5)), vec![Some(false); 2]);
        assert!(t0.elapsed() < Duration::from_secs(4));
        // One comes after the others gave up: it sees their abandon and does not free either.
        // (1.2 s after their deadline: on a loaded machine a thread may start late.)
        assert_eq!(run_leave(vec![Some((0, false)), Some((1400, false))], t), vec![Some(false); 2]);
        // Around the deadline: whatever happens, all ranks that return decide alike.
        for d in [150u64, 190, 200, 210, 250] {
            let r = run_leave(vec![Some((0, false)), Some((d, false)), Some((d / 2, false))], t);
            let frees: Vec<bool> = r.iter().map(|x| x.unwrap()).collect();
            assert!(frees.iter().all(|f| *f == frees[0]), "delay {d}: {frees:?}");
        }
    }
}
