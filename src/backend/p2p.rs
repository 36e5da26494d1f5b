//! Receives that take exactly their buffer: MPI never sees a receive shorter than its message.
//!
//! Neither MPI can be trusted with a message longer than the receive. Open MPI 4.1 writes the
//! whole message past the end of the buffer above its eager size (1 KiB to oneself, 4 KiB to
//! another rank, blocking or not, MPI_Recv, MPI_Irecv and MPI_Sendrecv alike) and reports a
//! truncated send-receive to oneself below it as a success; MPICH 4.0 asserts on a message whose
//! bytes are not a whole number of the receive's elements. So every receive first matches its
//! message without receiving it (MPI_Mprobe, MPI_Improbe), reads its size from the status, and
//! only then receives it: into the buffer when the size is exactly the buffer's, else into a
//! scratch allocation that is dropped, and the receive fails with GPUWIRE_ERROR_COUNT_MISMATCH
//! naming both sizes (the buffer is not written).
//!
//! A receive that takes *up to* its buffer's count (`Want::upto`: gpuwire_recv_status,
//! gpuwire_irecv_status, as MPI) receives a shorter message (of whole elements) into the
//! buffer's start and reports its count; a longer one is GPUWIRE_ERROR_TRUNCATE (as
//! MPI_ERR_TRUNCATE), received into scratch memory as above, the buffer not written.
//!
//! A nonblocking receive whose message has not arrived when it is posted is *deferred*: it waits
//! in `QUEUE`, in posting order, and is matched by `progress`, which every gpuwire wait and test
//! and every blocking point-to-point call of gpuwire runs while any receive is deferred (through
//! `progress::progress_all` and `progress::pending`). MPI's matching order is kept also with
//! GPUWIRE_ANY_SOURCE and GPUWIRE_ANY_TAG: a message goes to the earliest posted receive that matches it. Where an
//! earlier unmatched entry of the same communicator could match some of an entry's messages
//! (same or wildcard source, same or wildcard tag: `overlap`), `progress` looks at the entry's
//! next message first (MPI_Iprobe) and gives it to the earliest entry it matches: a wildcard
//! receive posted after a receive of (0, tag 7) takes a message of tag 5 at once, as in MPI
//! (waiting behind the earlier receive instead hung a sender of tag 5 that needs its match,
//! 2026-12-05). What a receive matched (source, tag, size) is kept for its status
//! (`Recv::status`).
//!
//! In checking mode a send also sends a header (datatype and count) on the communicator's
//! checking duplicate (`Check::hdr`) with the same tag, and completes only once the receiver's
//! answer (`Check::ack`) arrived: a datatype or count mismatch fails on both sides.

use std::ffi::{c_int, c_void};
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::comm::Communicator;
use crate::error::{Error, Result};
use crate::handles::{self, Spares};
use crate::mpisys::{self, RawComm, RawRequest, sys};
use crate::request::Pending;
use crate::types::Dtype;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The checking-mode duplicates of a communicator (made at creation when checking is on).
#[derive(Debug)]
pub struct Check {
    /// Headers, sender to receiver, with the message's tag.
    pub hdr: RawComm,
    /// Answers, receiver to sender, with the message's tag.
    pub ack: RawComm,
}

/// The header of checking mode: what the sender sends.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
struct Hdr {
    dtype: i64,
    count: i64,
}

/// The receiver's answer: its own datatype and count, and whether they matched.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
struct Ack {
    ok: i64,
    dtype: i64,
    count: i64,
}

const HDR_WORDS: c_int = 2;
const ACK_WORDS: c_int = 3;

/// What a receive wants. `source` and `tag` may be `types::ANY_SOURCE` / `types::ANY_TAG`.
#[derive(Clone, Copy, Debug)]
pub struct Want {
    pub ptr: usize,
    pub count: usize,
    pub dtype: Dtype,
    pub source: i32,
    pub tag: i32,
    /// A message of up to `count` elements is received (as MPI); else exactly `count`.
    pub upto: bool,
}

impl Want {
    fn bytes(&self) -> usize {
        self.count * self.dtype.size()
    }
}

/// MPI's source for gpuwire's (GPUWIRE_ANY_SOURCE as MPI_ANY_SOURCE).
fn mpi_source(s: i32) -> i32 {
    if s == crate::types::ANY_SOURCE { mpisys::any_source() } else { s }
}

/// MPI's tag for gpuwire's (GPUWIRE_ANY_TAG as MPI_ANY_TAG).
fn mpi_tag(t: i32) -> i32 {
    if t == crate::types::ANY_TAG { mpisys::any_tag() } else { t }
}

/// Whether two receives' (source, tag) could match the same message.
fn overlap(a: (i32, i32), b: (i32, i32)) -> bool {
    use crate::types::{ANY_SOURCE, ANY_TAG};
    (a.0 == b.0 || a.0 == ANY_SOURCE || b.0 == ANY_SOURCE) && (a.1 == b.1 || a.1 == ANY_TAG || b.1 == ANY_TAG)
}

/// What a matched message is: its source, tag and byte size.
#[derive(Clone, Copy, Debug)]
pub struct Matched {
    pub source: i32,
    pub tag: i32,
    pub bytes: u64,
}

impl Matched {
    fn of(status: &sys::MPI_Status) -> Result<Matched> {
        Ok(Matched { source: status.MPI_SOURCE, tag: status.MPI_TAG, bytes: message_bytes(status)? })
    }

    /// As a request's status, in elements of `dtype` (whole elements only).
    pub fn status(&self, dtype: Dtype) -> crate::request::Status {
        crate::request::Status { source: self.source, tag: self.tag, count: (self.bytes / dtype.size() as u64) as i64, cancelled: false }
    }
}

enum State {
    /// Posted; no message matched yet (queued).
    Unmatched,
    /// Checking mode: the header from `source` with `tag` matched and was answered; that
    /// sender's data message is next.
    Checked { err: Option<Error>, ack: Box<Ack>, ack_req: RawRequest, source: i32, tag: i32 },
    /// Matched; MPI receives it (into `scratch` when its size is wrong: `err` says so; or, with
    /// `into` the buffer, when it goes through scratch memory: `through_scratch`).
    Receiving { req: RawRequest, scratch: Option<Vec<u8>>, err: Option<Error>, ack_req: RawRequest, _ack: Option<Box<Ack>>, into: usize },
    /// Complete (its error, taken once).
    Done(Option<Error>),
    /// Posted to MPI as a plain receive at gpuwire_finalize, its request given up
    /// ([`post_deferred_at_finalize`]): never complete for gpuwire.
    Posted,
}

struct Entry {
    want: Want,
    /// The communicator's MPI handle and identity, its checking duplicates when checking.
    comm: RawComm,
    key: usize,
    check: Option<(RawComm, RawComm)>,
    state: Mutex<Stage>,
}

/// A receive's state and what it matched, under the entry's lock.
struct Stage {
    now: State,
    /// What the receive matched (set when its data message matched).
    matched: Option<Matched>,
}

impl Stage {
    const POSTED: Stage = Stage { now: State::Unmatched, matched: None };
}

impl Entry {
    fn sig(&self) -> Sig {
        (self.key, self.want.source, self.want.tag)
    }
}

// SAFETY: the pointers in `want` refer to memory that the request keeps alive; the MPI handles
// are used under MPI_THREAD_MULTIPLE or by one thread at a time.
unsafe impl Send for Entry {}
unsafe impl Sync for Entry {}

/// The (communicator, source, tag) of a receive: what decides which messages it could take.
type Sig = (usize, i32, i32);

/// The receives of the process that later receives must not overtake.
struct Queue {
    /// Deferred receives, in posting order.
    entries: Vec<Arc<Entry>>,
    /// A blocking receive waiting in MPI_Mprobe (`recv`): only one at a time, made on an empty
    /// queue, so it is earlier than every entry.
    probing: Option<Sig>,
    /// `progress`'s marks of the entries that leave the queue, and its list of unmatched ones
    /// beyond the first few (kept: no allocation per pass).
    gone: Vec<bool>,
    spill: Vec<Waiting>,
    /// `progress`'s [`Index`] of many unmatched entries (kept: its tables are reused).
    index: Option<Box<Index>>,
}

impl Queue {
    /// The receives queued, the probing one included.
    fn len(&self) -> usize {
        self.entries.len() + self.probing.is_some() as usize
    }

    /// Whether a queued receive of communicator `key` could take the messages of (`source`,
    /// `tag`).
    fn overlaps(&self, key: usize, source: i32, tag: i32) -> bool {
        self.probing.into_iter().chain(self.entries.iter().map(|e| e.sig())).any(|x| x.0 == key && overlap((x.1, x.2), (source, tag)))
    }
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue { entries: Vec::new(), probing: None, gone: Vec::new(), spill: Vec::new(), index: None });
/// Receives queued (`Queue::len`; read without the lock).
static QUEUED: AtomicUsize = AtomicUsize::new(0);

/// Whether any receive is deferred: blocking calls must then progress them (`progress`).
pub fn deferred() -> bool {
    QUEUED.load(Ordering::Acquire) > 0
}

/// The deferred receives' part of `crate::progress`.
/// Not urgent: the progress thread matches them only while gpuwire's own waits do not.
pub static PROGRESS: crate::progress::Source = crate::progress::Source { pending: deferred, progress, urgent: never };

fn never() -> bool {
    false
}

/// Matches what can be matched of the deferred receives, in posting order: each message to the
/// earliest receive that matches it.
pub fn progress() {
    if !deferred() {
        return;
    }
    let mut q = lock(&QUEUE);
    // Under MPI_THREAD_SERIALIZED, gpuwire's MPI lock for the matching calls below.
    let _mpi = crate::runtime::mpi_lock();
    let Queue { entries, probing, gone, spill, index } = &mut *q;
    gone.clear();
    gone.resize(entries.len(), false);
    spill.clear();
    if let Some(x) = index.as_mut() {
        x.clear();
    }
    let mut earlier = Earlier { few: [Waiting::Taken; 4], n: 0, more: spill, index, indexed: false };
    // A blocking receive in MPI_Mprobe is earlier than every entry.
    if let Some(sig) = *probing {
        earlier.push(Waiting::Opaque(sig));
    }
    for (i, e) in entries.iter().enumerate() {
        let sig = e.sig();
        if Arc::strong_count(e) == 1 {
            // Its request is gone (never waited for): nothing may be written for it any more.
            gone[i] = true;
            continue;
        }
        if earlier.competes(sig, true) {
            // An earlier receive of the same signature takes every message of this one first
            // (not locked: not a receive a later one's message can go to in this pass).
            earlier.push(Waiting::Opaque(sig));
            continue;
        }
        let Ok(mut st) = e.state.try_lock() else {
            earlier.push(Waiting::Opaque(sig));
            continue;
        };
        match step(entries, gone, &mut earlier, i, &mut st) {
            Ok(true) => gone[i] = true,
            Ok(false) => earlier.push(match st.now {
                State::Checked { source, tag, .. } => Waiting::Data((sig.0, source, tag)),
                _ => Waiting::Unmatched(sig, i),
            }),
            Err(err) => {
                st.now = State::Done(Some(err));
                gone[i] = true;
            }
        }
    }
    let mut i = 0;
    entries.retain(|_| {
        i += 1;
        !gone[i - 1]
    });
    QUEUED.store(q.len(), Ordering::Release);
}

/// What an entry that a pass of `progress` left unmatched could still take, in posting order.
#[derive(Clone, Copy)]
enum Waiting {
    /// An unmatched receive (its signature; its index in the queue).
    Unmatched(Sig, usize),
    /// Checking mode: a receive whose header from (source, tag) matched, waiting for that
    /// sender's data message (communicator, source, tag).
    Data(Sig),
    /// A receive not looked at (its lock was busy, an earlier unmatched one has its signature,
    /// or the blocking receive in MPI_Mprobe): every message its signature matches waits for it.
    Opaque(Sig),
    /// Matched since (a later entry's message went to it).
    Taken,
}

/// The entries a pass of `progress` left unmatched, in posting order: the first few inline, the
/// rest in the queue's kept vector (no allocation per pass).
struct Earlier<'a> {
    few: [Waiting; 4],
    n: usize,
    more: &'a mut Vec<Waiting>,
    /// Past [`INDEXED`] entries, their counts by signature (`competes` without a scan).
    index: &'a mut Option<Box<Index>>,
    indexed: bool,
}

/// How many entries an [`Earlier`] scans; past that it keeps an [`Index`]. Each entry of a pass
/// asks `competes`: with N deferred receives of distinct signatures a pass took N^2 steps under
/// the queue's lock (16000 receives: a quarter of a second per pass, and posting them took 24 s
/// while the progress thread ran passes; a helper's hunt, 2026-12-06).
const INDEXED: usize = 32;

/// The counts of [`Waiting`] entries by what they could take.
#[derive(Default)]
struct Index {
    /// Unmatched and not looked-at entries (`Waiting::Unmatched`, `Waiting::Opaque`).
    takes: Counts,
    /// Checking mode's waits for a sender's data (`Waiting::Data`).
    data: Counts,
}

impl Index {
    fn clear(&mut self) {
        self.takes.clear();
        self.data.clear();
    }

    fn count(&mut self, w: Waiting, by: i32) {
        match w {
            Waiting::Unmatched(x, _) | Waiting::Opaque(x) => self.takes.count(x, by),
            Waiting::Data(x) => self.data.count(x, by),
            Waiting::Taken => {}
        }
    }
}

/// Signatures counted four ways, so that "does any counted signature `overlap` this one" is four
/// lookups at most: an exact (source, tag) matches the four combinations of itself and the
/// wildcards; a wildcard source any source with that tag or the wildcard tag; and so on.
#[derive(Default)]
struct Counts {
    exact: std::collections::HashMap<Sig, i32>,
    by_source: std::collections::HashMap<(usize, i32), i32>,
    by_tag: std::collections::HashMap<(usize, i32), i32>,
    by_key: std::collections::HashMap<usize, i32>,
}

impl Counts {
    fn clear(&mut self) {
        self.exact.clear();
        self.by_source.clear();
        self.by_tag.clear();
        self.by_key.clear();
    }

    fn count(&mut self, x: Sig, by: i32) {
        *self.exact.entry(x).or_default() += by;
        *self.by_source.entry((x.0, x.1)).or_default() += by;
        *self.by_tag.entry((x.0, x.2)).or_default() += by;
        *self.by_key.entry(x.0).or_default() += by;
    }

    /// Whether one of the same signature is counted.
    fn has(&self, x: Sig) -> bool {
        self.exact.get(&x).is_some_and(|n| *n > 0)
    }

    /// Whether one that `overlap`s `x` (on its communicator) is counted.
    fn overlapping(&self, x: Sig) -> bool {
        use crate::types::{ANY_SOURCE, ANY_TAG};
        let (key, s, t) = x;
        let n = |m: &std::collections::HashMap<(usize, i32), i32>, k: (usize, i32)| m.get(&k).copied().unwrap_or(0);
        let e = |k: Sig| self.exact.get(&k).copied().unwrap_or(0);
        match (s == ANY_SOURCE, t == ANY_TAG) {
            (true, true) => self.by_key.get(&key).is_some_and(|n| *n > 0),
            (true, false) => n(&self.by_tag, (key, t)) + n(&self.by_tag, (key, ANY_TAG)) > 0,
            (false, true) => n(&self.by_source, (key, s)) + n(&self.by_source, (key, ANY_SOURCE)) > 0,
            (false, false) => e((key, s, t)) + e((key, ANY_SOURCE, t)) + e((key, s, ANY_TAG)) + e((key, ANY_SOURCE, ANY_TAG)) > 0,
        }
    }
}

impl Earlier<'_> {
    fn push(&mut self, w: Waiting) {
        if self.n < self.few.len() {
            self.few[self.n] = w;
            self.n += 1;
        } else {
            self.more.push(w);
        }
        if self.indexed {
            self.index.as_mut().expect("indexed").count(w, 1);
        } else if self.len() > INDEXED {
            let x = self.index.get_or_insert_with(Box::default);
            x.clear();
            for k in 0..self.n {
                x.count(self.few[k], 1);
            }
            for w in self.more.iter() {
                x.count(*w, 1);
            }
            self.indexed = true;
        }
    }

    fn len(&self) -> usize {
        self.n + self.more.len()
    }

    fn get(&self, k: usize) -> Waiting {
        if k < self.n { self.few[k] } else { self.more[k - self.few.len()] }
    }

    fn set(&mut self, k: usize, w: Waiting) {
        if self.indexed {
            let old = self.get(k);
            let x = self.index.as_mut().expect("indexed");
            x.count(old, -1);
            x.count(w, 1);
        }
        if k < self.n { self.few[k] = w } else { self.more[k - self.few.len()] = w }
    }

    /// Whether an earlier entry could take a message (or, in checking mode, a header and then a
    /// data message) that unmatched receive `sig` matches; with `same`, whether an unmatched one
    /// has exactly `sig` (it takes all of `sig`'s messages first).
    fn competes(&self, sig: Sig, same: bool) -> bool {
        if let (true, Some(x)) = (self.indexed, self.index.as_ref()) {
            return if same { x.takes.has(sig) } else { x.takes.overlapping(sig) || x.data.overlapping(sig) };
        }
        (0..self.len()).any(|k| match self.get(k) {
            Waiting::Unmatched(x, _) | Waiting::Opaque(x) => if same { x == sig } else { x.0 == sig.0 && overlap((x.1, x.2), (sig.1, sig.2)) },
            Waiting::Data(x) => !same && x.0 == sig.0 && overlap((x.1, x.2), (sig.1, sig.2)),
            Waiting::Taken => false,
        })
    }

    /// The place of the earliest entry that the next message from `source` with `tag` (MPI's
    /// values) on communicator `key` goes to (its header, in checking mode), if an earlier one
    /// could take it.
    fn first_for(&self, key: usize, source: i32, tag: i32) -> Option<usize> {
        (0..self.len()).find(|&k| match self.get(k) {
            Waiting::Unmatched(x, _) | Waiting::Opaque(x) => x.0 == key && overlap((x.1, x.2), (source, tag)),
            _ => false,
        })
    }

    /// Whether an entry before place `pos` could take the next checking-mode data message of
    /// `d` (communicator, source, tag): one waiting for that sender's data (whose header came
    /// first), or one not looked at.
    fn data_before(&self, pos: usize, d: Sig) -> bool {
        (0..pos.min(self.len())).any(|k| match self.get(k) {
            Waiting::Data(x) => x == d,
            Waiting::Opaque(x) => x.0 == d.0 && overlap((x.1, x.2), (d.1, d.2)),
            _ => false,
        })
    }
}

/// One matching step of entry `i` (locked: `st`) in a pass of `progress`: true once its message
/// matched. Where no earlier unmatched entry could take its messages, as `try_match`. Where one
/// could, the entry looks at its next message (MPI_Iprobe), from a source s: if no earlier entry
/// matches it, it is this entry's; else the earliest entry that matches it takes the earliest
/// message of s that matches that entry (which may be earlier than the one looked at, of a tag
/// this entry does not take) — unless an entry earlier still matches that one, which then takes
/// its own earliest of s, and so on (each step goes to an earlier entry, so it ends). Then the
/// entry looks again. It stops when its own message matched, none is there, or the earliest is an
/// entry not looked at.
fn step(entries: &[Arc<Entry>], gone: &mut [bool], earlier: &mut Earlier, i: usize, st: &mut Stage) -> Result<bool> {
    let e = &entries[i];
    let sig = e.sig();
    match st.now {
        State::Unmatched => {}
        State::Checked { source, tag, .. } => {
            // Checking mode: a sender's data messages come in the order of its headers.
            if earlier.data_before(earlier.len(), (sig.0, source, tag)) {
                return Ok(false);
            }
            return try_match(e, st, None, false);
        }
        _ => return Ok(true),
    }
    if !earlier.competes(sig, false) {
        return try_match(e, st, None, false);
    }
    for _ in 0..=earlier.len() {
        let Some((source, tag)) = peek(e, None)? else { return Ok(false) };
        let Some(mut k) = earlier.first_for(sig.0, source, tag) else {
            // No earlier receive matches it: this one's.
            return take(e, st, (source, tag), earlier, earlier.len());
        };
        // The earliest entry k and the earliest message of `source` it matches, where no entry
        // before k matches that message.
        let (j, xsig, from) = loop {
            let Waiting::Unmatched(xsig, j) = earlier.get(k) else { return Ok(false) };
            let Some(m) = peek(&entries[j], Some(source))? else { return Ok(false) };
            match earlier.first_for(sig.0, m.0, m.1) {
                Some(k2) if k2 < k => k = k2,
                _ => break (j, xsig, m),
            }
        };
        let Ok(mut other) = entries[j].state.try_lock() else { return Ok(false) };
        if Arc::strong_count(&entries[j]) == 1 {
            // Its request is gone since its turn: nothing may be written for it.
            gone[j] = true;
            earlier.set(k, Waiting::Taken);
            continue;
        }
        match take(&entries[j], &mut other, from, earlier, k) {
            Ok(true) => {
                gone[j] = true;
                earlier.set(k, Waiting::Taken);
            }
            Ok(false) => match other.now {
                State::Checked { source, tag, .. } => earlier.set(k, Waiting::Data((xsig.0, source, tag))),
                _ => return Ok(false),
            },
            Err(err) => {
                other.now = State::Done(Some(err));
                gone[j] = true;
                earlier.set(k, Waiting::Taken);
            }
        }
    }
    Ok(false)
}

/// Unmatched entry `e` (at place `pos` of `earlier`) takes the next message from `from` (MPI's
/// source and tag), which it matches; in checking mode the header, then the data message unless
/// an entry before it waits for that sender's data.
fn take(e: &Entry, st: &mut Stage, from: (i32, i32), earlier: &Earlier, pos: usize) -> Result<bool> {
    if e.check.is_none() {
        return try_match(e, st, Some(from), false);
    }
    if try_match(e, st, Some(from), true)? {
        return Ok(true);
    }
    match st.now {
        State::Checked { source, tag, .. } if !earlier.data_before(pos, (e.key, source, tag)) => try_match(e, st, None, false),
        _ => Ok(false),
    }
}

/// The source and tag (MPI's) of the next message that entry `e` could take (its header's, in
/// checking mode; with `source`, of that source only, which `e` matches), without taking it;
/// `None` when none is there.
fn peek(e: &Entry, source: Option<i32>) -> Result<Option<(i32, i32)>> {
    let comm = e.check.map_or(e.comm, |(hdr, _)| hdr);
    let mut flag: c_int = 0;
    // SAFETY: plain out-parameters.
    let mut status: sys::MPI_Status = unsafe { std::mem::zeroed() };
    let from = source.unwrap_or_else(|| mpi_source(e.want.source));
    mpisys::check(unsafe { sys::MPI_Iprobe(from, mpi_tag(e.want.tag), comm.0, &mut flag, &mut status) }, "MPI_Iprobe")?;
    Ok((flag != 0).then_some((status.MPI_SOURCE, status.MPI_TAG)))
}

/// One nonblocking matching step of an entry: true once its message (and in checking mode its
/// header) matched. `from`: an unmatched entry takes the next message (header) of this source
/// and tag (MPI's), one that its own source and tag match, rather than of its own;
/// `header_only`: in checking mode it stops once its header matched.
fn try_match(e: &Entry, stage: &mut Stage, from: Option<(i32, i32)>, header_only: bool) -> Result<bool> {
    let (want_source, want_tag) = from.unwrap_or((mpi_source(e.want.source), mpi_tag(e.want.tag)));
    let Stage { now: st, matched } = stage;
    loop {
        match st {
            State::Unmatched => {
                if let Some((hdr_comm, ack_comm)) = e.check {
                    let mut h = Hdr::default();
                    let Some((source, tag)) = improbe_recv(hdr_comm, want_source, want_tag, (&mut h as *mut Hdr).cast(), HDR_WORDS)? else {
                        return Ok(false);
                    };
                    let (err, ack) = compare(&e.want, source, &h);
                    let ack = Box::new(ack);
                    let mut req = mpisys::request_null();
                    // SAFETY: the answer lives in the entry until the send completed.
                    mpisys::check(
                        unsafe { sys::MPI_Isend((&*ack as *const Ack).cast(), ACK_WORDS, sys::RSMPI_INT64_T, source, tag, ack_comm.0, &mut req) },
                        "MPI_Isend (checking-mode answer)",
                    )?;
                    *st = State::Checked { err, ack, ack_req: RawRequest(req), source, tag };
                    if header_only {
                        return Ok(false);
                    }
                    continue;
                }
                let Some((mut msg, status)) = improbe(e, want_source, want_tag)? else { return Ok(false) };
                let m = Matched::of(&status)?;
                *matched = Some(m);
                *st = receive(&e.want, || comm_rank(e.comm), &mut msg, m, None, RawRequest(mpisys::request_null()), None)?;
                return Ok(true);
            }
            State::Checked { source, tag, .. } => {
                // The data message of the sender whose header matched (not any other's).
                let Some((mut msg, status)) = improbe(e, *source, *tag)? else { return Ok(false) };
                let m = Matched::of(&status)?;
                *matched = Some(m);
                let State::Checked { err, ack, ack_req, .. } = std::mem::replace(st, State::Unmatched) else { unreachable!() };
                *st = receive(&e.want, || comm_rank(e.comm), &mut msg, m, err, ack_req, Some(ack))?;
                return Ok(true);
            }
            _ => return Ok(true),
        }
    }
}

/// MPI_Improbe of the entry's data message (MPI's source and tag): the matched message and its
/// status, if there.
fn improbe(e: &Entry, source: i32, tag: i32) -> Result<Option<(sys::MPI_Message, sys::MPI_Status)>> {
    let mut msg = message_null();
    let mut flag: c_int = 0;
    // SAFETY: plain out-parameters.
    let mut status: sys::MPI_Status = unsafe { std::mem::zeroed() };
    mpisys::check(unsafe { sys::MPI_Improbe(source, tag, e.comm.0, &mut flag, &mut msg, &mut status) }, "MPI_Improbe")?;
    Ok((flag != 0).then_some((msg, status)))
}

fn message_null() -> sys::MPI_Message {
    // SAFETY: reading a constant exported by rsmpi's shim.
    unsafe { sys::RSMPI_MESSAGE_NULL }
}

/// MPI_Improbe, then MPI_Mrecv of exactly `words` int64 into `ptr` (a header or an answer,
/// which always has that size): the message's source and tag, `None` when no message is there.
fn improbe_recv(comm: RawComm, source: i32, tag: i32, ptr: *mut c_void, words: c_int) -> Result<Option<(i32, i32)>> {
    let mut msg = message_null();
    let mut flag: c_int = 0;
    // SAFETY: plain out-parameters.
    let mut status: sys::MPI_Status = unsafe { std::mem::zeroed() };
    mpisys::check(unsafe { sys::MPI_Improbe(source, tag, comm.0, &mut flag, &mut msg, &mut status) }, "MPI_Improbe (checking mode)")?;
    if flag == 0 {
        return Ok(None);
    }
    let got = message_bytes(&status)?;
    if got != words as u64 * 8 {
        let mut scratch = vec![0u8; got as usize];
        // SAFETY: scratch holds the whole message.
        unsafe { sys::MPI_Mrecv(scratch.as_mut_ptr().cast(), got as c_int, sys::RSMPI_UINT8_T, &mut msg, mpisys::status_ignore()) };
        return Err(Error::Internal(format!("checking mode: a control message of {got} bytes arrived (expected {})", words * 8)));
    }
    // SAFETY: ptr holds `words` int64.
    mpisys::check(unsafe { sys::MPI_Mrecv(ptr, words, sys::RSMPI_INT64_T, &mut msg, mpisys::status_ignore()) }, "MPI_Mrecv (checking mode)")?;
    Ok(Some((status.MPI_SOURCE, status.MPI_TAG)))
}

/// The receiver's side of checking mode for a header from `source`: its error (if any) and its
/// answer.
fn compare(w: &Want, source: i32, h: &Hdr) -> (Option<Error>, Ack) {
    let ack = Ack { ok: 0, dtype: w.dtype as i64, count: w.count as i64 };
    let their = Dtype::from_c(h.dtype as i32).map(|d| d.name()).unwrap_or("?");
    if h.dtype != w.dtype as i64 {
        let e = Error::DtypeMismatch(format!(
            "recv: rank {source} sent {} {their} elements but this receive is of {} {} elements (checking mode); nothing was received",
            h.count, w.count, w.dtype.name()
        ));
        return (Some(e), ack);
    }
    if w.upto && h.count > w.count as i64 {
        let e = Error::Truncate(format!(
            "recv: rank {source} sent {} {their} elements but this receive takes at most {} (checking mode); nothing was received",
            h.count, w.count
        ));
        return (Some(e), ack);
    }
    if !w.upto && h.count != w.count as i64 {
        let e = Error::CountMismatch(format!(
            "recv: rank {source} sent {} {their} elements but this receive takes exactly {} (checking mode); nothing was received",
            h.count, w.count
        ));
        return (Some(e), ack);
    }
    (None, Ack { ok: 1, ..ack })
}

/// Whether a message of `got` bytes goes into the receive's buffer: exactly its size, or with
/// `upto` a whole number of elements up to it.
fn fits(w: &Want, got: u64) -> bool {
    let want = w.bytes() as u64;
    got == want || (w.upto && got < want && got % w.dtype.size() as u64 == 0)
}

/// The byte size of a matched message.
fn message_bytes(status: &sys::MPI_Status) -> Result<u64> {
    let mut got: sys::MPI_Count = 0;
    // SAFETY: a status filled by MPI_(I)mprobe.
    mpisys::check(unsafe { sys::MPI_Get_elements_x(status, sys::RSMPI_UINT8_T, &mut got) }, "MPI_Get_elements_x")?;
    u64::try_from(got).map_err(|_| Error::Mpi(format!("MPI_Get_elements_x returned {got} bytes")))
}

/// A datatype of exactly `bytes` bytes with its count (MPI_UINT8_T up to 2^31-1, else a struct
/// of MiB blocks and the rest); true when the type must be freed.
fn bytes_type(bytes: u64) -> Result<(sys::MPI_Datatype, c_int, bool)> {
    if let Ok(n) = c_int::try_from(bytes) {
        // SAFETY: a constant.
        return Ok((unsafe { sys::RSMPI_UINT8_T }, n, false));
    }
    const MIB: u64 = 1 << 20;
    let q = c_int::try_from(bytes / MIB).map_err(|_| Error::InvalidArgument(format!("a message of {bytes} bytes is too large")))?;
    let r = (bytes % MIB) as c_int;
    // SAFETY: building and committing derived types from constants.
    unsafe {
        let mut mib = sys::RSMPI_UINT8_T;
        mpisys::check(sys::MPI_Type_contiguous(MIB as c_int, sys::RSMPI_UINT8_T, &mut mib), "MPI_Type_contiguous")?;
        let lens = [q, r];
        let displs: [sys::MPI_Aint; 2] = [0, (bytes / MIB * MIB) as sys::MPI_Aint];
        let types = [mib, sys::RSMPI_UINT8_T];
        let mut t = sys::RSMPI_UINT8_T;
        let rc = sys::MPI_Type_create_struct(2, lens.as_ptr(), displs.as_ptr(), types.as_ptr(), &mut t);
        sys::MPI_Type_free(&mut mib);
        mpisys::check(rc, "MPI_Type_create_struct")?;
        mpisys::check(sys::MPI_Type_commit(&mut t), "MPI_Type_commit")?;
        Ok((t, 1, true))
    }
}

/// Starts the receive of a matched message: into the buffer when it fits (`fits`: and checking
/// mode found no mismatch), else into scratch memory, with the error. `me`: this process's rank
/// (`through_scratch`).
fn receive(w: &Want, me: impl FnOnce() -> i32, msg: &mut sys::MPI_Message, m: Matched, err: Option<Error>, ack_req: RawRequest, ack: Option<Box<Ack>>) -> Result<State> {
    let got = m.bytes;
    let mut req = mpisys::request_null();
    let fit = fits(w, got) && err.is_none();
    if fit && !through_scratch(me, m) {
        // Past MPI's int count as one element of a derived type (freed once posted: MPI keeps
        // it alive for the receive).
        let n = mpisys::Count::new(w.dtype, (got / w.dtype.size() as u64) as usize)?;
        // SAFETY: the buffer holds exactly the message (validated by the caller, kept alive by
        // the request).
        mpisys::check(unsafe { sys::MPI_Imrecv(w.ptr as *mut c_void, n.n, n.dt, msg, &mut req) }, "MPI_Imrecv")?;
        return Ok(State::Receiving { req: RawRequest(req), scratch: None, err: None, ack_req, _ack: ack, into: 0 });
    }
    let (err, into) = if fit { (None, w.ptr) } else { (Some(err.unwrap_or_else(|| size_error(w, m))), 0) };
    let mut scratch = vec![0u8; got.max(1) as usize];
    let (t, n, free) = bytes_type(got)?;
    // SAFETY: scratch holds the whole message.
    let rc = unsafe { sys::MPI_Imrecv(scratch.as_mut_ptr().cast(), n, t, msg, &mut req) };
    if free {
        let mut t = t;
        // SAFETY: a type of ours; MPI keeps it alive for the pending receive.
        unsafe { sys::MPI_Type_free(&mut t) };
    }
    mpisys::check(rc, "MPI_Imrecv (through scratch memory)")?;
    Ok(State::Receiving { req: RawRequest(req), scratch: Some(scratch), err, ack_req, _ack: ack, into })
}

/// Whether a message that fits its receive goes through scratch memory first (`receive`'s
/// `into`): a message of the process to itself (`me`: its rank), which MPI copies straight from the send
/// buffer with a memcpy, wrong where the two overlap (a receive into the memory of the
/// process's own pending send: erroneous in MPI, but gpuwire never aborts or writes garbage).
/// MPICH asserts there, aborting the process; Open MPI's memcpy (its self transport above its
/// eager size, `SELF_EAGER`; below it the send copied the message already) is undefined
/// behaviour (ASan: memcpy-param-overlap). Such a message is received into scratch memory and
/// copied into the buffer.
#[inline]
fn through_scratch(me: impl FnOnce() -> i32, m: Matched) -> bool {
    (cfg!(mpich) || m.bytes > SELF_EAGER) && m.source == me()
}

/// This process's rank in `comm` (-1 if MPI cannot say), for `through_scratch`.
fn comm_rank(comm: RawComm) -> i32 {
    let mut rank: c_int = -1;
    // SAFETY: a live communicator of the receive; a plain out-parameter.
    if unsafe { sys::MPI_Comm_rank(comm.0, &mut rank) } != 0 {
        return -1;
    }
    rank
}

/// Open MPI's btl_self_eager_limit by default: a message to oneself up to this size is copied
/// at its send (a larger configured limit only costs the scratch copy).
const SELF_EAGER: u64 = 1024;

/// A completed `State::Receiving`'s data copied from its scratch memory into the buffer, when
/// it went through scratch (`through_scratch`) and succeeded.
fn copy_in(scratch: Option<Vec<u8>>, into: usize, err: &Option<Error>, bytes: u64) {
    if let (Some(s), true, None) = (scratch, into != 0, err) {
        // SAFETY: `into` is the receive's buffer, which holds the message (`fits`), kept alive
        // by the request; the scratch memory is gpuwire's own.
        unsafe { std::ptr::copy_nonoverlapping(s.as_ptr(), into as *mut u8, bytes as usize) };
    }
}

fn size_error(w: &Want, m: Matched) -> Error {
    let got = m.bytes;
    let es = w.dtype.size() as u64;
    let theirs = if got % es == 0 { format!("{} {} elements", got / es, w.dtype.name()) } else { format!("not a whole number of {} elements", w.dtype.name()) };
    let how = if got < w.bytes() as u64 { "shorter than" } else { "longer than" };
    let rule = if w.upto { "a receive takes up to its buffer's count, in whole elements" } else { "a receive takes exactly its buffer's count" };
    let msg = format!(
        "recv: the message from rank {} (tag {}) has {got} bytes ({theirs}), {how} the receive buffer's {} bytes ({} {} elements); {rule}: the message was discarded and the buffer not written",
        m.source,
        m.tag,
        w.bytes(),
        w.count,
        w.dtype.name()
    );
    if w.upto && got > w.bytes() as u64 { Error::Truncate(msg) } else { Error::CountMismatch(msg) }
}

/// A receive in flight (the request of gpuwire_irecv, and blocking receives that had to wait).
pub struct Recv {
    /// Taken by `drop` only.
    e: ManuallyDrop<Arc<Entry>>,
    comm: *const Communicator,
    /// Complete (its step returned its outcome), with what it matched: read without the
    /// entry's lock from then on.
    finished: Option<Option<Matched>>,
}

thread_local! {
    /// Allocations of this thread's completed requests' parts, for its next ones (no allocation
    /// per request in a loop of isends, irecvs and waits).
    static SPARE_SENDS: Spares<Sending> = const { std::cell::RefCell::new(Vec::new()) };
    static SPARE_RECVS: Spares<Recv> = const { std::cell::RefCell::new(Vec::new()) };
    static SPARE_ENTRIES: std::cell::RefCell<Vec<handles::Spare<Entry>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A send's request, boxed in an allocation of an earlier one when the thread has one.
pub fn boxed_send(s: Sending) -> Box<dyn Pending> {
    handles::boxed::<Sending>(&SPARE_SENDS, s)
}

/// A receive's request, boxed in an allocation of an earlier one when the thread has one.
pub fn boxed_recv(r: Recv) -> Box<dyn Pending> {
    handles::boxed::<Recv>(&SPARE_RECVS, r)
}

/// `e` in the allocation of an entry this thread's requests dropped, when there is one.
fn new_entry(e: Entry) -> Arc<Entry> {
    match SPARE_ENTRIES.try_with(|s| s.try_borrow_mut().ok().and_then(|mut s| s.pop())).ok().flatten() {
        Some(m) => handles::refill(m, e),
        None => Arc::new(e),
    }
}
// SAFETY: the request keeps the communicator alive; Entry is Send.
unsafe impl Send for Recv {}

impl Drop for Recv {
    fn drop(&mut self) {
        // An unmatched receive is withdrawn (`progress` drops entries nobody holds); a matched
        // one not finished (dropped at a timeout or an abort) may still have MPI writing its
        // scratch or sending its checking-mode answer from the entry: the entry is leaked with
        // its requests (the answer's box was freed under its MPI_Isend: a helper's reading).
        // SAFETY: `e` is never used again.
        let e = unsafe { ManuallyDrop::take(&mut self.e) };
        if self.finished.is_none() && matches!(&lock(&e.state).now, State::Receiving { .. } | State::Checked { .. } | State::Posted) {
            std::mem::forget(e);
            return;
        }
        spare_entry(e);
    }
}

/// Keeps the allocation of an entry that is no longer queued for the thread's next receive,
/// when `e` is its last reference.
fn spare_entry(e: Arc<Entry>) {
    if let Some(m) = handles::vacate(e) {
        let _ = SPARE_ENTRIES.try_with(|s| {
            if let Ok(mut s) = s.try_borrow_mut() {
                if s.len() < handles::SPARES {
                    s.push(m);
                }
            }
        });
    }
}

fn test_req(req: &mut RawRequest, what: &str) -> Result<bool> {
    // MPI_REQUEST_NULL tests complete: no MPI call (a receive's checking-mode answer, which
    // every receive tests, is null outside checking mode).
    if req.0 == mpisys::request_null() {
        return Ok(true);
    }
    let _mpi = crate::runtime::mpi_lock();
    let mut flag: c_int = 0;
    // SAFETY: a request of ours, or MPI_REQUEST_NULL (then flag is true).
    mpisys::check(unsafe { sys::MPI_Test(&mut req.0, &mut flag, mpisys::status_ignore()) }, what)?;
    Ok(flag != 0)
}

impl Recv {
    /// The byte size of the matched message, once matched.
    pub fn received_bytes(&self) -> Option<u64> {
        self.matched().map(|m| m.bytes)
    }

    fn matched(&self) -> Option<Matched> {
        match self.finished {
            Some(m) => m,
            None => lock(&self.e.state).matched,
        }
    }

    fn step(&mut self) -> Result<bool> {
        if self.finished.is_some() {
            return Ok(true);
        }
        let mut st = lock(&self.e.state);
        if matches!(&st.now, State::Unmatched | State::Checked { .. }) {
            drop(st);
            progress();
            // (A wait's pass: the progress thread leaves the queue to it.)
            crate::progress::count_pass();
            st = lock(&self.e.state);
        }
        let outcome = match &mut st.now {
            State::Unmatched | State::Checked { .. } | State::Posted => return Ok(false),
            State::Receiving { req, ack_req, .. } => {
                if !test_req(req, "MPI_Test (recv)")? || !test_req(ack_req, "MPI_Test (checking-mode answer)")? {
                    return Ok(false);
                }
                let State::Receiving { err, scratch, into, .. } = std::mem::replace(&mut st.now, State::Done(None)) else { unreachable!() };
                copy_in(scratch, into, &err, st.matched.map_or(0, |m| m.bytes));
                err.map_or(Ok(true), Err)
            }
            State::Done(e) => e.take().map_or(Ok(true), Err),
        };
        self.finished = Some(st.matched);
        outcome
    }
}

impl Pending for Recv {
    fn recycle(self: Box<Self>) {
        handles::unbox(&SPARE_RECVS, self)
    }
    fn always_ready(&self) -> bool {
        true
    }
    fn wait(&mut self) -> Result<()> {
        let c = self.comm;
        // SAFETY: see the Send impl.
        wait_until(unsafe { &*c }, "recv", || self.step())
    }
    fn test(&mut self) -> Result<bool> {
        let done = self.step()?;
        if !done {
            crate::progress::progress_all();
        }
        Ok(done)
    }
    fn status(&self) -> Option<crate::request::Status> {
        self.matched().map(|m| m.status(self.e.want.dtype))
    }
    /// A receive whose message has not matched (in checking mode: whose header has not) leaves
    /// the queue; its step then reports it complete, nothing matched or written.
    fn cancel(&mut self) -> bool {
        if self.finished.is_some() {
            return false;
        }
        // Under the queue's lock (taken before the entry's, as `progress` does), so that no
        // other thread matches the entry between the look and the withdrawal.
        let mut q = lock(&QUEUE);
        let mut st = lock(&self.e.state);
        if !matches!(st.now, State::Unmatched) {
            return false;
        }
        st.now = State::Done(None);
        drop(st);
        q.entries.retain(|e| !Arc::ptr_eq(e, &*self.e));
        QUEUED.store(q.len(), Ordering::Release);
        true
    }
    /// An unmatched receive is withdrawn (nothing will ever be written for it: true); one whose
    /// message matched, or whose checking-mode answer is in flight, is left to MPI (false).
    fn abandon(self: Box<Self>) -> bool {
        // Under the queue's lock (taken before the entry's, as `progress` does), so that no
        // other thread matches the entry between the look and the withdrawal.
        let mut q = lock(&QUEUE);
        let unmatched = matches!(&lock(&self.e.state).now, State::Unmatched | State::Done(_));
        if unmatched {
            q.entries.retain(|e| !Arc::ptr_eq(e, &*self.e));
            QUEUED.store(q.len(), Ordering::Release);
            drop(q);
            drop(self);
        } else {
            std::mem::forget(self);
        }
        unmatched
    }
}

/// At gpuwire_finalize, between the test of every request still held and the abandon of those
/// in flight (`request::settle_at_finalize`): each receive still deferred, which its abandon
/// would withdraw, is posted to MPI instead, in posting order, as a plain MPI_Irecv of exactly
/// its buffer (kept for the rest of the process by the abandon), its MPI request freed. As a
/// plain MPI program's receive left pending, it takes its sender's message: a sender blocked on
/// it (a message past the eager size) completes, and MPI_Finalize returns on both ranks.
/// Withdrawn, the receive left both hung there (a helper's hunt: 14 of 14 runs). The exact-size
/// protocol (module doc) is not kept for these: a longer message is left to MPI, in a program
/// that left its receive in flight: a longer message past this MPI's eager size is written past
/// the buffer's end by Open MPI 4.1 (module doc), as in the plain MPI program. Receives of
/// checking mode (whose senders wait for an answer that no one sends) and those whose request
/// is gone are withdrawn, as before. Returns how many were posted.
pub fn post_deferred_at_finalize() -> usize {
    let mut q = lock(&QUEUE);
    let entries = std::mem::take(&mut q.entries);
    let mut posted = 0;
    for e in entries {
        // Held by a request (the queue's reference and the `Recv`'s).
        let held = Arc::strong_count(&e) > 1;
        let mut st = lock(&e.state);
        if held && e.check.is_none() && matches!(st.now, State::Unmatched) && post_plain(&e.want, &e.comm) {
            st.now = State::Posted;
            posted += 1;
        } else {
            drop(st);
            q.entries.push(e);
        }
    }
    QUEUED.store(q.len(), Ordering::Release);
    posted
}

/// MPI_Irecv of exactly `w`'s buffer on `comm`, its request freed (the receive goes on): true
/// once MPI_Irecv succeeded (MPI then may write the buffer, whatever MPI_Request_free returns).
fn post_plain(w: &Want, comm: &RawComm) -> bool {
    let Ok(n) = mpisys::Count::new(w.dtype, w.count) else { return false };
    let mut req = mpisys::request_null();
    // SAFETY: the buffer holds `count` elements and is kept for the rest of the process (the
    // request's abandon keeps it: the receive is not unmatched any more).
    unsafe {
        if sys::MPI_Irecv(w.ptr as *mut c_void, n.n, n.dt, mpi_source(w.source), mpi_tag(w.tag), comm.0, &mut req) != 0 {
            return false;
        }
        sys::MPI_Request_free(&mut req);
    }
    true
}

/// Polls `done` until true, progressing deferred and IPC receives, up to the communicator's
/// timeout (then the communicator is broken, as every gpuwire timeout does).
pub fn wait_until(c: &Communicator, what: &str, mut done: impl FnMut() -> Result<bool>) -> Result<()> {
    // The deadline of the whole gpuwire call (`Communicator::enter`), shared by its steps.
    let deadline = c.call_deadline();
    let mut spins = 0u32;
    loop {
        if done()? {
            return Ok(());
        }
        crate::progress::progress_all();
        if let Some(d) = deadline {
            if Instant::now() >= d {
                let t = c.config().timeout.map(|t| t.as_secs_f64()).unwrap_or(0.0);
                let msg = format!("{what} did not complete within the communicator's timeout of {t:.3} s (no matching call on the other rank?); the communicator is now broken");
                c.mark_broken(msg.clone());
                return Err(Error::Timeout(msg));
            }
        }
        c.ensure_usable()?;
        spins += 1;
        if spins > 20_000 {
            std::thread::sleep(Duration::from_micros(20));
        } else if spins > 1000 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Posts a receive: matched now when its message is there and no earlier receive of the same
/// communicator, source and tag waits, else deferred.
pub fn post(c: &Communicator, w: Want) -> Result<Recv> {
    let check = check_of(c).map(|k| (k.hdr, k.ack));
    let e = new_entry(Entry { want: w, comm: RawComm(c.raw()), key: c as *const Communicator as usize, check, state: Mutex::new(Stage::POSTED) });
    let mut q = lock(&QUEUE);
    let behind = q.overlaps(e.key, w.source, w.tag);
    if !behind {
        let mut st = lock(&e.state);
        let mpi = crate::runtime::mpi_lock();
        let matched = try_match(&e, &mut st, None, false)?;
        drop(mpi);
        drop(st);
        if matched {
            return Ok(Recv { e: ManuallyDrop::new(e), comm: c, finished: None });
        }
    }
    // (A blocking receive waiting in MPI_Mprobe is no work for the progress thread.)
    let first = q.entries.is_empty();
    q.entries.push(e.clone());
    QUEUED.store(q.len(), Ordering::Release);
    drop(q);
    if first {
        // The queue was empty: a progress thread that saw it so may have ended. While it holds
        // entries, `progress::pending` keeps that thread running, so only the first needs it.
        crate::progress::posted();
    }
    Ok(Recv { e: ManuallyDrop::new(e), comm: c, finished: None })
}

/// A blocking receive of `w`: MPI_Mprobe and a receive when nothing else needs progress (the
/// common case), else a posted receive waited for. What it matched.
///
/// While it waits in MPI_Mprobe the receive is held in `QUEUE` (`Queue::probing`), as the
/// earlier receive it is: a receive that another thread posts meanwhile and that could take the
/// same message waits behind it, as behind a posted MPI_Recv. MPICH does not treat a pending
/// MPI_Mprobe as a posted receive: another thread's later MPI_Improbe took its message (the
/// later receive got the first message, or a wildcard one took a message it did not fit and
/// the blocked receive waited for ever).
pub fn recv(c: &Communicator, w: Want) -> Result<Matched> {
    // (`nb_p2p`: no timeout, not MPI_THREAD_SERIALIZED, no IPC receive pending.)
    if !deferred() && !c.nb_p2p() && check_of(c).is_none() {
        let mut q = lock(&QUEUE);
        if q.len() == 0 {
            // `progress` never tries what it blocks, nor does `post` match such a receive at
            // once; MPI matches nothing for it (its message is this MPI_Mprobe's).
            q.probing = Some((c as *const Communicator as usize, w.source, w.tag));
            QUEUED.store(q.len(), Ordering::Release);
            drop(q);
            let mut msg = message_null();
            // SAFETY: plain out-parameters.
            let mut status: sys::MPI_Status = unsafe { std::mem::zeroed() };
            let r = mpisys::check(unsafe { sys::MPI_Mprobe(mpi_source(w.source), mpi_tag(w.tag), c.raw(), &mut msg, &mut status) }, "MPI_Mprobe");
            let mut q = lock(&QUEUE);
            q.probing = None;
            QUEUED.store(q.len(), Ordering::Release);
            drop(q);
            r?;
            return recv_probed(w, c, msg, &status);
        }
        // Another thread deferred a receive meanwhile: posted below, behind it where it overlaps.
    }
    let mut r = post(c, w)?;
    r.wait()?;
    r.matched().ok_or_else(|| Error::Internal("a completed receive matched no message".into()))
}

/// The rest of `recv` once MPI_Mprobe matched `msg`: received into the buffer when its size is
/// exact, else into scratch memory and the size error returned.
fn recv_probed(w: Want, c: &Communicator, mut msg: sys::MPI_Message, status: &sys::MPI_Status) -> Result<Matched> {
    let m = Matched::of(status)?;
    if m.bytes == w.bytes() as u64 && !through_scratch(|| c.rank(), m) {
        let n = mpisys::Count::new(w.dtype, w.count)?;
        // SAFETY: the buffer holds exactly the matched message (validated by the caller).
        mpisys::check(unsafe { sys::MPI_Mrecv(w.ptr as *mut c_void, n.n, n.dt, &mut msg, mpisys::status_ignore()) }, "MPI_Mrecv")?;
        return Ok(m);
    }
    let st = receive(&w, || c.rank(), &mut msg, m, None, RawRequest(mpisys::request_null()), None)?;
    let State::Receiving { mut req, err, scratch, into, .. } = st else { unreachable!() };
    // SAFETY: the receive just started; its memory (buffer or scratch) lives until it ends.
    let r = mpisys::check(unsafe { sys::MPI_Wait(&mut req.0, mpisys::status_ignore()) }, "MPI_Wait (recv)");
    r?;
    copy_in(scratch, into, &err, m.bytes);
    err.map_or(Ok(m), Err)
}

/// As MPI_Probe (`block`) or MPI_Iprobe of (`source`, `tag`) on `c` (wildcards allowed): what
/// the next message a receive of them would match is, without receiving it; `None` when
/// `block` is false and none is there. Deferred receives are progressed first (a receive
/// posted earlier takes its message before a probe sees it, as in MPI).
pub fn probe(c: &Communicator, source: i32, tag: i32, block: bool) -> Result<Option<Matched>> {
    let (s, t) = (mpi_source(source), mpi_tag(tag));
    let iprobe = || -> Result<Option<Matched>> {
        loop {
            progress();
            let queued = QUEUED.load(Ordering::Acquire);
            // Under the queue's lock (taken before MPI's, as `progress` takes them): no deferred
            // receive matches the message between the probe and the look at the queue (the
            // progress thread could have taken it, and the probe reported a message gone).
            let q = lock(&QUEUE);
            let m = {
                let _mpi = crate::runtime::mpi_lock();
                let mut flag: c_int = 0;
                // SAFETY: plain out-parameters.
                let mut status: sys::MPI_Status = unsafe { std::mem::zeroed() };
                mpisys::check(unsafe { sys::MPI_Iprobe(s, t, c.raw(), &mut flag, &mut status) }, "MPI_Iprobe")?;
                if flag == 0 {
                    return Ok(None);
                }
                Matched::of(&status)?
            };
            if !spoken_for(&q, c, m.source, m.tag) {
                return Ok(Some(m));
            }
            drop(q);
            // The message arrived after the pass above, and a receive posted before the probe
            // matches it: that receive takes it (the next pass), and the probe looks again. If
            // no receive could take it yet (one waits behind an earlier one), the probe sees
            // nothing for now.
            progress();
            if QUEUED.load(Ordering::Acquire) >= queued {
                return Ok(None);
            }
        }
    };
    if !block {
        return iprobe();
    }
    if !deferred() && !c.nb_p2p() {
        // SAFETY: plain out-parameters.
        let mut status: sys::MPI_Status = unsafe { std::mem::zeroed() };
        mpisys::check(unsafe { sys::MPI_Probe(s, t, c.raw(), &mut status) }, "MPI_Probe")?;
        return Matched::of(&status).map(Some);
    }
    let mut found = None;
    wait_until(c, "probe", || {
        found = iprobe()?;
        Ok(found.is_some())
    })?;
    Ok(found)
}

/// Whether a queued receive of `c` that has not taken its message yet could take one from
/// `source` with `tag` (MPI's rank and tag): it takes it before a probe sees it, as in MPI.
fn spoken_for(queue: &Queue, c: &Communicator, source: i32, tag: i32) -> bool {
    queue.overlaps(c as *const Communicator as usize, source, tag)
}

/// A blocking send of `count` elements at `ptr`: MPI_Send when nothing needs progress and no
/// deadline is set (as `Sending::finish` would wait with MPI_Wait then), else a send in flight
/// waited for.
pub fn send(c: &Communicator, ptr: usize, count: usize, dtype: Dtype, dest: i32, tag: i32) -> Result<()> {
    if check_of(c).is_none() && !deferred() && !c.nb_p2p() {
        let n = mpisys::Count::new(dtype, count)?;
        let p = if ptr == 0 { std::ptr::null() } else { ptr as *const c_void };
        // SAFETY: ptr is valid for count elements (validated by the caller); no lock is needed
        // (`nb_p2p`: not MPI_THREAD_SERIALIZED).
        return mpisys::check(unsafe { sys::MPI_Send(p, n.n, n.dt, dest, tag, c.raw()) }, "MPI_Send");
    }
    isend(c, ptr, count, dtype, dest, tag)?.finish()
}

/// A send in flight: the data, and in checking mode the header and the receiver's answer.
pub struct Sending {
    req: RawRequest,
    check: Option<Box<SendCheck>>,
    comm: *const Communicator,
    done: bool,
}
// SAFETY: as Recv.
unsafe impl Send for Sending {}

struct SendCheck {
    hdr: Hdr,
    ack: Ack,
    hdr_req: RawRequest,
    ack_req: RawRequest,
    dest: i32,
    dtype: Dtype,
    count: usize,
}

/// Serialises the posting of a header and its data message (two threads sending to one rank
/// with one tag would otherwise cross them).
static SEND_ORDER: Mutex<()> = Mutex::new(());

/// Starts a send of `count` elements at `ptr` (MPI_Isend; in checking mode with its header and
/// the receive of the answer).
pub fn isend(c: &Communicator, ptr: usize, count: usize, dtype: Dtype, dest: i32, tag: i32) -> Result<Sending> {
    let n = mpisys::Count::new(dtype, count)?;
    let mut s = Sending { req: RawRequest(mpisys::request_null()), check: None, comm: c, done: false };
    let _order = check_of(c).map(|_| lock(&SEND_ORDER));
    let _mpi = crate::runtime::mpi_lock();
    if let Some(k) = check_of(c) {
        let mut sc = Box::new(SendCheck {
            hdr: Hdr { dtype: dtype as i64, count: count as i64 },
            ack: Ack::default(),
            hdr_req: RawRequest(mpisys::request_null()),
            ack_req: RawRequest(mpisys::request_null()),
            dest,
            dtype,
            count,
        });
        // SAFETY: the header and the answer live in the box until both requests completed.
        unsafe {
            mpisys::check(sys::MPI_Irecv((&mut sc.ack as *mut Ack).cast(), ACK_WORDS, sys::RSMPI_INT64_T, dest, tag, k.ack.0, &mut sc.ack_req.0), "MPI_Irecv (checking-mode answer)")?;
            mpisys::check(sys::MPI_Isend((&sc.hdr as *const Hdr).cast(), HDR_WORDS, sys::RSMPI_INT64_T, dest, tag, k.hdr.0, &mut sc.hdr_req.0), "MPI_Isend (checking-mode header)")?;
        }
        s.check = Some(sc);
    }
    let p = if ptr == 0 { std::ptr::null() } else { ptr as *const c_void };
    // SAFETY: ptr is valid for count elements until the request completes (the caller's).
    mpisys::check(unsafe { sys::MPI_Isend(p, n.n, n.dt, dest, tag, c.raw(), &mut s.req.0) }, "MPI_Isend")?;
    Ok(s)
}

impl Sending {
    fn step(&mut self) -> Result<bool> {
        if self.done {
            return Ok(true);
        }
        progress();
        crate::progress::count_pass();
        if !test_req(&mut self.req, "MPI_Test (send)")? {
            return Ok(false);
        }
        if let Some(sc) = self.check.as_mut() {
            if !test_req(&mut sc.hdr_req, "MPI_Test (checking-mode header)")? || !test_req(&mut sc.ack_req, "MPI_Test (checking-mode answer)")? {
                return Ok(false);
            }
        }
        self.done = true;
        if let Some(sc) = self.check.take() {
            if sc.ack.ok != 1 {
                let theirs = Dtype::from_c(sc.ack.dtype as i32).map(|d| d.name()).unwrap_or("?");
                let msg = format!(
                    "send: rank {} receives {} {theirs} elements but this send is of {} {} elements (checking mode); the message was discarded",
                    sc.dest,
                    sc.ack.count,
                    sc.count,
                    sc.dtype.name()
                );
                return Err(if sc.ack.dtype != sc.dtype as i64 { Error::DtypeMismatch(msg) } else { Error::CountMismatch(msg) });
            }
        }
        Ok(true)
    }

    /// Waits for completion (MPI_Wait when nothing needs progress and no deadline is set).
    pub fn finish(mut self) -> Result<()> {
        // SAFETY: see the Send impl.
        let c = unsafe { &*self.comm };
        if self.check.is_none() && !deferred() && !c.nb_p2p() {
            self.done = true;
            // SAFETY: an active request of ours.
            return mpisys::check(unsafe { sys::MPI_Wait(&mut self.req.0, mpisys::status_ignore()) }, "MPI_Wait (send)");
        }
        let r = wait_until(c, "send", || self.step());
        if r.is_err() && !self.done {
            // Abandoned at a deadline: MPI may still read the header; the box must outlive it.
            std::mem::forget(self.check.take());
        }
        r
    }
}

impl Pending for Sending {
    fn recycle(self: Box<Self>) {
        handles::unbox(&SPARE_SENDS, self)
    }
    fn always_ready(&self) -> bool {
        true
    }
    fn wait(&mut self) -> Result<()> {
        // SAFETY: see the Send impl.
        let c = unsafe { &*self.comm };
        let r = wait_until(c, "send", || self.step());
        if r.is_err() && !self.done {
            std::mem::forget(self.check.take());
        }
        r
    }
    fn test(&mut self) -> Result<bool> {
        let done = self.step()?;
        if !done {
            crate::progress::progress_all();
        }
        Ok(done)
    }
}

/// `c`'s checking-mode duplicates ([`check_comms`]), made at its creation in checking mode only
/// (`backend::setup`): without checking mode, no search of its backend state.
#[inline]
fn check_of(c: &Communicator) -> Option<&Check> {
    if !c.config().check {
        return None;
    }
    c.backend_state.get::<Check>()
}

/// Collective over `c` (checking mode): the two duplicates of checking mode.
pub fn check_comms(c: &Communicator) -> Result<Check> {
    let (mut hdr, mut ack) = (mpisys::comm_null(), mpisys::comm_null());
    // SAFETY: c is a valid communicator; the duplicates are ours.
    unsafe {
        mpisys::check(sys::MPI_Comm_dup(c.raw(), &mut hdr), "MPI_Comm_dup (checking-mode headers)")?;
        if let Err(e) = mpisys::check(sys::MPI_Comm_dup(c.raw(), &mut ack), "MPI_Comm_dup (checking-mode answers)") {
            sys::MPI_Comm_free(&mut hdr);
            return Err(e);
        }
        sys::MPI_Comm_set_errhandler(hdr, sys::RSMPI_ERRORS_RETURN);
        sys::MPI_Comm_set_errhandler(ack, sys::RSMPI_ERRORS_RETURN);
    }
    Ok(Check { hdr: RawComm(hdr), ack: RawComm(ack) })
}

impl Check {
    /// Frees the duplicates (at communicator release).
    pub fn free(&mut self) {
        // SAFETY: ours, and no longer used.
        unsafe {
            sys::MPI_Comm_free(&mut self.hdr.0);
            sys::MPI_Comm_free(&mut self.ack.0);
        }
    }
}

/// Checking mode on a path whose messages carry no size or datatype (NCCL): before any data
/// moves, the sender and the receiver of each message exchange their (datatype, count) by MPI
/// (the sender's on `Check::hdr`, the receiver's on `Check::ack`, tag 0, as NCCL matches by
/// order per peer, not by tag) and each compares: a mismatch fails on both sides, and nothing is
/// enqueued. `send` and `recv` are (peer, datatype, count). Inside [`agreed_together`] it agrees
/// nothing (the group's agreements were made together). The nonblocking forms take part too
/// ([`agree_later`]), so blocking and nonblocking forms may be mixed.
pub fn agree_peer(c: &Communicator, send: Option<(i32, Dtype, usize)>, recv: Option<(i32, Dtype, usize)>) -> Result<()> {
    if check_of(c).is_none() || AGREED.with(|a| a.get()) {
        return Ok(());
    }
    let sides: Vec<Side> = [send.map(|(p, d, n)| (true, p, d, n)), recv.map(|(p, d, n)| (false, p, d, n))].into_iter().flatten().collect();
    Agreement::post(c, sides)?.finish(c)?.into_iter().collect()
}

/// Checking mode on NCCL for a nonblocking form (isend, irecv): its side of the exchange of
/// `agree_peer`, posted at its call (in call order with the blocking forms' agreements, so each
/// peer's headers come in NCCL's order of messages) and finished when its request is waited for
/// or tested ([`Agreement::poll`], [`Agreement::finish`]); its NCCL operation is enqueued at the
/// call all the same, so a mismatch found then is too late to stop it (the error says so; the
/// caller aborts the NCCL communicator). `None` without checking mode and inside
/// [`agreed_together`].
pub fn agree_later(c: &Communicator, side: Side) -> Result<Option<Agreement>> {
    if check_of(c).is_none() || AGREED.with(|a| a.get()) {
        return Ok(None);
    }
    let mut a = Agreement::post(c, vec![side])?;
    a.late = true;
    Ok(Some(a))
}

/// One side of a message in a checking-mode agreement: whether this rank sends it, the peer,
/// the datatype and the count.
pub type Side = (bool, i32, Dtype, usize);

thread_local! {
    /// Set while operations run whose agreements were made together (`agreed_together`).
    static AGREED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with `agree_peer` agreeing nothing on this thread: for a group's point-to-point
/// operations whose agreements were posted together ([`Agreement::post`], every communicator's
/// before any is waited for) and passed. One at a time, a send's agreement would wait for its
/// receiver's, which the peer's group may issue after its own send to this rank (a halo
/// exchange in a group hung in checking mode).
pub fn agreed_together<T>(f: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            AGREED.with(|a| a.set(self.0));
        }
    }
    let _reset = Reset(AGREED.with(|a| a.replace(true)));
    f()
}

/// A checking-mode agreement of several messages (see `agree_peer`), posted: its headers sent
/// and the peers' being received. Dropped before its exchanges completed (abandoned at a
/// deadline, or its request's operation failed first), its headers are leaked: MPI may still
/// write them.
pub struct Agreement {
    sides: Vec<Side>,
    /// This rank's headers and the peers', one each per side.
    hb: ManuallyDrop<Box<(Vec<Hdr>, Vec<Hdr>)>>,
    reqs: Vec<RawRequest>,
    /// Finished after its NCCL operation was enqueued ([`agree_later`]).
    late: bool,
}

impl Agreement {
    /// Posts the exchanges of `sides`, in their order (NCCL's order per peer). Without checking
    /// mode, an agreement that passes every side.
    pub fn post(c: &Communicator, sides: Vec<Side>) -> Result<Agreement> {
        let n = sides.len();
        let mut a = Agreement { hb: ManuallyDrop::new(Box::new((vec![Hdr::default(); n], vec![Hdr::default(); n]))), reqs: Vec::new(), sides, late: false };
        let Some(k) = check_of(c) else {
            a.sides.clear();
            return Ok(a);
        };
        a.reqs = vec![RawRequest(mpisys::request_null()); 2 * n];
        let (mine, theirs) = &mut **a.hb;
        // Under MPI_THREAD_SERIALIZED, gpuwire's MPI lock for the posting calls (as its other MPI
        // calls; the tests take it each: `test_req`). A review noticed it missing.
        let _mpi = crate::runtime::mpi_lock();
        for (i, &(send, peer, dtype, count)) in a.sides.iter().enumerate() {
            let (out, inp) = if send { (k.hdr, k.ack) } else { (k.ack, k.hdr) };
            mine[i] = Hdr { dtype: dtype as i64, count: count as i64 };
            // SAFETY: mine and theirs live until the requests completed (leaked by the drop
            // otherwise, as MPI may still use them).
            unsafe {
                mpisys::check(sys::MPI_Irecv((&mut theirs[i] as *mut Hdr).cast(), HDR_WORDS, sys::RSMPI_INT64_T, peer, 0, inp.0, &mut a.reqs[2 * i].0), "MPI_Irecv (checking mode)")?;
                mpisys::check(sys::MPI_Isend((&mine[i] as *const Hdr).cast(), HDR_WORDS, sys::RSMPI_INT64_T, peer, 0, out.0, &mut a.reqs[2 * i + 1].0), "MPI_Isend (checking mode)")?;
            }
        }
        Ok(a)
    }

    /// Whether the exchanges completed (MPI_Test; never blocks).
    pub fn poll(&mut self) -> Result<bool> {
        for q in self.reqs.iter_mut() {
            if !test_req(q, "MPI_Test (checking mode)")? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Waits for the exchanges (up to the communicator's timeout) and compares: each side's
    /// outcome, in order (a mismatch is DTYPE_MISMATCH or COUNT_MISMATCH, as on the peer).
    pub fn finish(mut self, c: &Communicator) -> Result<Vec<Result<()>>> {
        wait_until(c, "point-to-point agreement (checking mode)", || self.poll())?;
        let theirs = &self.hb.1;
        Ok(self
            .sides
            .iter()
            .enumerate()
            .map(|(i, &(send, peer, dtype, count))| {
                let t = theirs[i];
                if t.dtype == dtype as i64 && t.count == count as i64 {
                    return Ok(());
                }
                let name = Dtype::from_c(t.dtype as i32).map(|d| d.name()).unwrap_or("?");
                let (me, other) = match (send, self.late) {
                    (true, false) => ("send", "receives"),
                    (false, false) => ("recv", "sends"),
                    (true, true) => ("isend", "receives"),
                    (false, true) => ("irecv", "sends"),
                };
                let moved = if self.late {
                    "its NCCL operation was enqueued at the call, before the mismatch was known: the NCCL communicator was aborted and this communicator is now broken"
                } else {
                    "nothing was moved"
                };
                let msg = format!("{me}: rank {peer} {other} {} {name} elements but this {me} is of {count} {} elements (checking mode); {moved}", t.count, dtype.name());
                Err(if t.dtype != dtype as i64 { Error::DtypeMismatch(msg) } else { Error::CountMismatch(msg) })
            })
            .collect())
    }
}

impl Drop for Agreement {
    fn drop(&mut self) {
        if self.reqs.iter().all(|q| q.0 == mpisys::request_null()) {
            // SAFETY: dropped once, here; MPI no longer uses the headers.
            unsafe { ManuallyDrop::drop(&mut self.hb) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{ANY_SOURCE, ANY_TAG};

    /// `competes` with the index (past `INDEXED` entries) answers as the scan does, for entries
    /// and queries of every kind: exact, wildcard source, tag or both, two communicators,
    /// entries taken since.
    #[test]
    fn indexed_competes_is_the_scan() {
        let seed = std::cell::Cell::new(12345u64);
        let next = |n: u64| {
            seed.set(seed.get().wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407));
            (seed.get() >> 33) % n
        };
        let pick = |n: u64| {
            let key = next(2) as usize;
            let s = if next(4) == 0 { ANY_SOURCE } else { next(n) as i32 };
            let t = if next(4) == 0 { ANY_TAG } else { next(n) as i32 };
            (key, s, t)
        };
        for round in 0..20 {
            let (mut spill, mut index) = (Vec::new(), None);
            let mut e = Earlier { few: [Waiting::Taken; 4], n: 0, more: &mut spill, index: &mut index, indexed: false };
            let mut scan: Vec<Waiting> = Vec::new();
            for i in 0..(10 + 10 * round) {
                let w = match next(3) {
                    0 => Waiting::Unmatched(pick(5), i),
                    1 => Waiting::Opaque(pick(5)),
                    _ => Waiting::Data(pick(5)),
                };
                e.push(w);
                scan.push(w);
                if next(5) == 0 {
                    let k = next(scan.len() as u64) as usize;
                    e.set(k, Waiting::Taken);
                    scan[k] = Waiting::Taken;
                }
            }
            assert_eq!(e.indexed, scan.len() > INDEXED);
            for _ in 0..200 {
                let q = pick(5);
                for same in [true, false] {
                    let want = scan.iter().any(|w| match *w {
                        Waiting::Unmatched(x, _) | Waiting::Opaque(x) => if same { x == q } else { x.0 == q.0 && overlap((x.1, x.2), (q.1, q.2)) },
                        Waiting::Data(x) => !same && x.0 == q.0 && overlap((x.1, x.2), (q.1, q.2)),
                        Waiting::Taken => false,
                    });
                    assert_eq!(e.competes(q, same), want, "round {round}, query {q:?}, same {same}");
                }
            }
        }
    }
}
