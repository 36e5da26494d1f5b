//! Whose turn it is at an NCCL communicator.
//!
//! NCCL's communicators are not thread-safe, and an NCCL operation made inside a thread's group
//! (ncclGroupStart) enters its communicator's plan at its call: another thread's ncclGroupEnd
//! on that communicator would launch it apart from the rest of its group (on the GPU, a send
//! without its receive: a hang). So one thread at a time makes NCCL calls on a communicator —
//! that thread has the communicator's *turn* — from its first operation on it inside a group to
//! the group's ncclGroupEnd ([`begin_group`] … [`end_group`]), or for one call outside a group.
//! Threads on different communicators (NCCL's one communicator per thread) never wait for each
//! other.
//!
//! A thread that would wait for a turn held by a thread that waits (directly or through
//! others) for a turn it holds — two threads' groups spanning the same communicators in
//! opposite orders — is refused with `GPUWIRE_ERROR_INVALID_ARGUMENT` instead of waiting for
//! ever.

use std::cell::RefCell;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::error::{Error, Result};

/// One communicator's turn: the token of the thread that has it (0: none); shared with the
/// groups that keep it (a communicator freed inside a group leaves nothing dangling).
#[derive(Debug, Default)]
pub struct TurnLock {
    owner: Arc<Word>,
}

/// A turn's word: the token of the thread that has it (0: none; it derefs to this word), and
/// how many threads wait for it, in one allocation: a release reads both, one cache line
/// (`crate::hot`'s reason), and a wait writes nothing that other communicators' calls read.
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub struct Word {
    owner: AtomicUsize,
    /// Threads waiting for this turn ([`wait_for`]): a release signals only where some do.
    waiting: AtomicUsize,
}

impl std::ops::Deref for Word {
    type Target = AtomicUsize;
    fn deref(&self) -> &AtomicUsize {
        &self.owner
    }
}

/// This thread's token and the turns it keeps until its group's end.
struct Mine {
    token: usize,
    /// Inside a group: turns taken are kept until [`end_group`].
    in_group: bool,
    kept: Vec<Arc<Word>>,
}

impl Drop for Mine {
    /// A thread that exits with turns kept gives them back (`group::Open`'s drop, destroyed
    /// first: [`touch`], has ended its NCCL group and given them back already).
    fn drop(&mut self) {
        for l in self.kept.drain(..) {
            release(&l);
        }
    }
}

thread_local! {
    static MINE: RefCell<Mine> = const { RefCell::new(Mine { token: 0, in_group: false, kept: Vec::new() }) };
}

/// [`Mine`]'s token, and [`IN_GROUP`] while `in_group` (`hot::Thread::turn_token`): readable
/// without its borrow (and after its destruction at the thread's exit, when its turns have been
/// given back).
#[inline(always)]
fn token() -> usize {
    crate::hot::with_thread(|t| t.turn_token.get())
}

fn set_token(v: usize) {
    crate::hot::with_thread(|t| t.turn_token.set(v));
}

/// Tokens are even: [`token`]'s lowest bit says whether the thread is inside its group, a turn
/// word's whether a group keeps it ([`KEPT`]).
static NEXT_TOKEN: AtomicUsize = AtomicUsize::new(4);
const IN_GROUP: usize = 1;
const KEPT: usize = 1;
/// The holder of a turn taken for an abort by a thread without a token.
const ABORTING: usize = 2;
/// The threads waiting for a turn, and which (thread token, lock address): what [`wait_for`]
/// follows to refuse a cycle. Its lock also orders the signal of a release.
static WAITS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());
static FREED: Condvar = Condvar::new();

/// A turn taken for one call, given back when dropped (inside a group: kept to its end).
pub struct Turn {
    lock: *const Word,
}

impl Drop for Turn {
    #[inline]
    fn drop(&mut self) {
        if !self.lock.is_null() {
            // SAFETY: the guard does not outlive the communicator of the call that took it.
            release(unsafe { &*self.lock });
        }
    }
}

impl TurnLock {
    /// This thread's turn at the communicator: at once where it has it already or nobody has,
    /// else after the thread that has it gives it back. Inside a group ([`begin_group`]) it is
    /// kept until [`end_group`].
    #[inline]
    pub fn take(&self) -> Result<Turn> {
        // The common cases without [`MINE`]'s borrow: this thread has the turn already (a
        // group's later operations on the communicator), or nobody has it and this call takes it
        // outside a group.
        let t = token();
        let me = t & !IN_GROUP;
        if me != 0 {
            let o = self.owner.load(Relaxed);
            if o & !KEPT == me {
                return Ok(Turn { lock: std::ptr::null() });
            }
            if t & IN_GROUP == 0 && o == 0 && self.owner.compare_exchange(0, me, SeqCst, Relaxed).is_ok() {
                return Ok(Turn { lock: &*self.owner });
            }
        }
        self.take_now()
    }

    #[inline(never)]
    fn take_now(&self) -> Result<Turn> {
        MINE.with(|m| {
            let mut m = m.borrow_mut();
            if m.token == 0 {
                m.token = NEXT_TOKEN.fetch_add(2, Relaxed);
                set_token(m.token | if m.in_group { IN_GROUP } else { 0 });
            }
            let me = m.token;
            if self.owner.load(Relaxed) & !KEPT == me {
                return Ok(Turn { lock: std::ptr::null() });
            }
            if self.owner.compare_exchange(0, me, SeqCst, Relaxed).is_err() {
                wait_for(self, me)?;
            }
            if m.in_group {
                // Kept: marked so (`kept_by_a_group`), this thread's still.
                self.owner.store(me | KEPT, SeqCst);
                m.kept.push(self.owner.clone());
                Ok(Turn { lock: std::ptr::null() })
            } else {
                Ok(Turn { lock: &*self.owner })
            }
        })
    }

    /// Whether this thread has the turn (inside its group: then the communicator's queued work
    /// of other threads waits for the group's end, and must not be waited for).
    pub fn mine(&self) -> bool {
        held_here(&self.owner)
    }

    /// The turn for an abort ([`abort_turn`]).
    pub fn for_abort(&self, patience: Duration) -> ForAbort {
        abort_turn(&self.owner, patience)
    }

    /// The turn's word, for the communicator's engine (`Engine::set_turn`).
    pub fn share(&self) -> Arc<Word> {
        self.owner.clone()
    }
}

/// Whether this thread has the turn whose word is `owner` ([`TurnLock::share`]).
pub fn held_here(owner: &AtomicUsize) -> bool {
    let o = owner.load(Relaxed);
    o != 0 && token() & !IN_GROUP == o & !KEPT
}

/// What [`abort_turn`] found.
pub enum ForAbort {
    /// This thread has the turn now (or had it outside a group): the communicator may be
    /// aborted; the guard gives it back.
    Now(Turn),
    /// A group (of any thread, this one's too) keeps the turn: its NCCL group has operations
    /// on the communicator in NCCL's plan, and its end still uses it.
    KeptByAGroup,
    /// Another thread's call has had it for longer than the wait allowed.
    Busy,
}

/// The turn for an abort of the communicator whose word is `owner`: taken at once where it is
/// free or this thread's outside a group, after another thread's call outside a group (up to
/// `patience`); never while a group keeps it (the group's end must abort it after its NCCL
/// group: NCCL's communicators take one thread at a time, and an abort frees the communicator).
fn abort_turn(owner: &Word, patience: Duration) -> ForAbort {
    let me = token() & !IN_GROUP;
    let t0 = std::time::Instant::now();
    loop {
        let o = owner.load(SeqCst);
        if o & KEPT != 0 {
            return ForAbort::KeptByAGroup;
        }
        if o != 0 && o == me {
            return ForAbort::Now(Turn { lock: std::ptr::null() });
        }
        if o == 0 && owner.compare_exchange(0, ABORTING, SeqCst, Relaxed).is_ok() {
            return ForAbort::Now(Turn { lock: owner });
        }
        if t0.elapsed() >= patience {
            return ForAbort::Busy;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Whether the thread that has the turn `owner` waits, directly or through others, for a turn
/// `me` holds (`w`: the listed waits).
fn closes_cycle(w: &[(usize, usize)], owner: &AtomicUsize, me: usize) -> bool {
    let mut holder = owner.load(SeqCst) & !KEPT;
    for _ in 0..1024 {
        let Some(&(_, other)) = w.iter().find(|(t, _)| *t == holder && holder != 0) else { return false };
        // SAFETY: a turn some thread waits for is alive while its entry is listed (the waiter
        // removes it under this mutex before its call returns).
        holder = unsafe { &*(other as *const Word) }.load(SeqCst) & !KEPT;
        if holder == me {
            return true;
        }
    }
    false
}

fn cycle_refused() -> Error {
    Error::InvalidArgument(
        "NCCL communicator in use: another thread's open group has issued operations on it and waits for a communicator this thread's group has issued operations on (NCCL's communicators take one thread at a time: order the two groups' communicators alike, or make the groups one after the other); this operation was not issued".into(),
    )
}

/// Waits for `lock`'s turn, unless its holder waits (through others) for a turn `me` holds.
#[cold]
#[inline(never)]
fn wait_for(lock: &TurnLock, me: usize) -> Result<()> {
    let addr = &*lock.owner as *const Word as usize;
    let mut w = WAITS.lock().unwrap_or_else(|p| p.into_inner());
    if closes_cycle(&w, &lock.owner, me) {
        return Err(cycle_refused());
    }
    w.push((me, addr));
    lock.owner.waiting.fetch_add(1, SeqCst);
    while lock.owner.compare_exchange(0, me, SeqCst, Relaxed).is_err() {
        w = FREED.wait_timeout(w, Duration::from_millis(1)).unwrap_or_else(|p| p.into_inner()).0;
    }
    lock.owner.waiting.fetch_sub(1, SeqCst);
    if let Some(i) = w.iter().position(|&(t, l)| t == me && l == addr) {
        w.swap_remove(i);
    }
    Ok(())
}

/// A wait for a communicator's engine, listed as a wait for its turn ([`engine_wait`]); unlisted
/// when dropped.
pub struct EngineWait {
    me: usize,
    addr: usize,
}

impl Drop for EngineWait {
    fn drop(&mut self) {
        let mut w = WAITS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = w.iter().position(|&(t, l)| t == self.me && l == self.addr) {
            w.swap_remove(i);
        }
    }
}

/// This thread is about to wait for the queued work of the communicator whose turn is `owner`
/// (`Engine::drain`): that work may need the turn, so while this thread's group keeps turns the
/// wait is one for `owner`'s holder, as [`TurnLock::take`]'s. Refused
/// (`GPUWIRE_ERROR_INVALID_ARGUMENT`) where that holder waits, directly or through others, for a
/// turn this thread keeps — two groups holding two communicators in opposite orders while a
/// third thread's calls are queued on both engines would otherwise wait for each other for
/// ever; else listed until the returned guard is dropped (`None`: this thread keeps no turns,
/// so nobody can be waiting for it).
pub fn engine_wait(owner: &Arc<Word>) -> Result<Option<EngineWait>> {
    let me = MINE.try_with(|m| m.try_borrow().ok().filter(|m| !m.kept.is_empty()).map(|m| m.token)).ok().flatten();
    let Some(me) = me else { return Ok(None) };
    let mut w = WAITS.lock().unwrap_or_else(|p| p.into_inner());
    if closes_cycle(&w, owner, me) {
        return Err(cycle_refused());
    }
    let addr = &**owner as *const Word as usize;
    w.push((me, addr));
    Ok(Some(EngineWait { me, addr }))
}

/// Gives the turn of `owner` back (signalling only where some thread waits).
#[inline]
fn release(owner: &Word) {
    owner.store(0, SeqCst);
    if owner.waiting.load(SeqCst) > 0 {
        let _w = WAITS.lock().unwrap_or_else(|p| p.into_inner());
        FREED.notify_all();
    }
}

/// Makes this thread's turns' record exist: `group`'s thread-local calls it first, so that at
/// the thread's exit the group's drop (which ends the NCCL group, then gives the turns back)
/// runs before the record's own (thread-locals are destroyed in the reverse order of their
/// first use): a turn is never free while the exiting thread's operations are in its
/// communicator's plan.
pub fn touch() {
    MINE.with(|_| ());
}

/// This thread's group begins (an NCCL group open across calls): turns taken from now on are
/// kept until [`end_group`].
pub fn begin_group() {
    MINE.with(|m| m.borrow_mut().in_group = true);
    set_token(token() | IN_GROUP);
}

/// This thread's NCCL group ended: the turns it kept are given back.
pub fn end_group() {
    let _ = MINE.try_with(|m| {
        let mut m = m.borrow_mut();
        m.in_group = false;
        set_token(token() & !IN_GROUP);
        for l in m.kept.drain(..) {
            release(&l);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_is_one_threads_and_reentrant() {
        let l = Arc::new(TurnLock::default());
        let t = l.take().unwrap();
        let again = l.take().unwrap();
        assert!(l.mine());
        let l2 = l.clone();
        let other = std::thread::spawn(move || {
            let _t = l2.take().unwrap();
            assert!(l2.mine());
        });
        std::thread::sleep(Duration::from_millis(20));
        assert!(!other.is_finished(), "another thread took a turn this thread has");
        drop(again);
        assert!(l.mine(), "the inner guard gave the turn back");
        drop(t);
        other.join().unwrap();
        assert!(!l.mine());
    }

    #[test]
    fn a_group_keeps_its_turns_and_a_cycle_is_refused() {
        let (x, y) = (Arc::new(TurnLock::default()), Arc::new(TurnLock::default()));
        begin_group();
        drop(x.take().unwrap());
        assert!(x.mine(), "kept to the group's end");
        let (x2, y2) = (x.clone(), y.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        // The other thread's group has y, then waits for x.
        let other = std::thread::spawn(move || {
            begin_group();
            drop(y2.take().unwrap());
            tx.send(()).unwrap();
            let r = x2.take().map(|_| ());
            end_group();
            r
        });
        rx.recv().unwrap();
        // Until the other thread is listed as waiting for x (not any thread: other tests' too).
        let xa = &*x.owner as *const Word as usize;
        while !WAITS.lock().unwrap().iter().any(|&(_, l)| l == xa) {
            std::thread::yield_now();
        }
        let e = y.take().map(|_| ()).expect_err("a cycle is refused");
        assert!(format!("{e}").contains("opposite") || format!("{e}").contains("order"), "{e}");
        end_group();
        assert!(!x.mine());
        other.join().unwrap().unwrap();
        assert!(!y.mine());
    }
}
