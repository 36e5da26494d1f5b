//! Pins: a call's use of the objects behind its handles without counting references (issue 19).
//!
//! A lookup that returns an `Arc` costs two atomic instructions (the count taken, then given
//! back): on the Intel hosts of the GPU machines about 6 ns each, where gpuwire's whole share of
//! an NCCL call of 8 B is meant to stay under 150 ns. A pinned call instead announces itself
//! once, with the handles it names ([`pin`]: plain stores, then one store made visible to every
//! thread before the call reads a handle's slot), and borrows their communicator and buffers
//! from the registries (`Registry::get_pinned`): no count is taken.
//!
//! What keeps a borrowed object alive: a registry whose lookups may be pinned (`Registry::
//! pinnable`: communicators and buffers) does not drop the reference it gives up when a handle
//! is freed while a thread is pinned with that handle ([`retire`]: a free by the program while
//! another thread's call uses the object); that reference waits in a list until every such
//! thread has unpinned, and is dropped by the thread that finds this: one of those threads at
//! its unpin (told by its own record's `notify`, not by a word that every call of every thread
//! would read: on the GPU machines' hosts each cache line a call touches costs more than its
//! instructions), or the next free of a communicator or buffer, or gpuwire_finalize. A thread pinned with
//! the handle then may have looked it up before the free; a thread that pins later finds the
//! slot empty.
//!
//! So an object is dropped at its free, as without pins, unless another thread's call is using
//! it; then at the end of that call, or at the latest (where that call ended just as the free
//! was made, or its thread exited) at the next free of a communicator or buffer, or at
//! gpuwire_finalize. A thread blocked in a call for long (a receive waiting for a rare message)
//! holds back only the objects of that call, never the memory of buffers that other threads
//! make and free meanwhile. A buffer's drop is local (its memory released). A communicator
//! freed while another thread's call uses it is held as that call's reference held it before
//! pins: its free finds it held (`Communicator::freed`) and settles at once what of its
//! teardown needs the other ranks; the rest comes with the drop, in the thread that drops it.

//! Each thread's pin word ([`Record`]) counts up: odd while pinned; the handles of the pin are
//! stored before it. A freeing thread notes the odd words of the records that name its handle;
//! the reference may be dropped once each of them has changed. The memory orderings are the
//! pair of a Dekker exchange: a pin's store and its reads of slot states are sequentially
//! consistent, as are a free's clearing of the state and its reads of pin words, so that either
//! the pinned lookup sees the handle freed, or the free sees the pin (and, reading its word,
//! the handles stored before it).
//!
//! Remembered objects (issue 19, 28th session): a program calls with the same handles again
//! and again (an allreduce of the same buffers each iteration). A thread remembers what its
//! pinned lookups found (`hot::Thread::pinned_objects`, per place of its record's handles) with
//! the process's count of communicator and buffer frees then (`hot::Process::frees`, which
//! every free increments between its clearing of the slot and its reading of pin words); its
//! next pin with the same handle in the same place, the count unchanged, borrows the object
//! without a lookup ([`remember`] has the argument). A lookup reads the handle's registry and
//! slot, two cache lines more after an NCCL launch than the thread's own line, which a pin reads
//! anyway.

use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};

/// One thread's pin word and nesting depth; records are never freed (a thread that exits
/// leaves its record to the next thread that starts pinning). One cache line each: a call
/// reads one, and no thread's writes share another's line.
#[repr(align(64))]
struct Record {
    /// Odd while the thread is pinned; only its thread writes it.
    word: AtomicU64,
    /// The handles the thread's outermost pin may borrow (0: none), stored before `word`.
    handles: [AtomicU64; PINNED],
    /// Pins nested inside the outermost one (its thread's alone: relaxed).
    depth: AtomicU32,
    /// Whether a free left a reference waiting for this thread's unpin ([`retire`]): read by
    /// the unpin, in the record's line (not a shared word that every call would read).
    notify: AtomicBool,
    /// Whether a thread has this record.
    taken: AtomicBool,
    /// The next record of the list ([`RECORDS`]), set before the record is published.
    next: AtomicPtr<Record>,
}

/// Every record ever made (a list that only grows, at its head).
static RECORDS: AtomicPtr<Record> = AtomicPtr::new(std::ptr::null_mut());

/// A record for this thread: a free one, or a new one.
fn claim() -> &'static Record {
    let mut p = RECORDS.load(Acquire);
    while !p.is_null() {
        // SAFETY: records are leaked, never freed.
        let r = unsafe { &*p };
        if !r.taken.load(Relaxed) && r.taken.compare_exchange(false, true, Acquire, Relaxed).is_ok() {
            return r;
        }
        p = r.next.load(Relaxed);
    }
    let r: &'static Record = Box::leak(Box::new(Record {
        word: AtomicU64::new(0),
        handles: [const { AtomicU64::new(0) }; PINNED],
        depth: AtomicU32::new(0),
        notify: AtomicBool::new(false),
        taken: AtomicBool::new(true),
        next: AtomicPtr::new(std::ptr::null_mut()),
    }));
    let mut head = RECORDS.load(Relaxed);
    loop {
        r.next.store(head, Relaxed);
        match RECORDS.compare_exchange_weak(head, (r as *const Record).cast_mut(), Release, Relaxed) {
            Ok(_) => return r,
            Err(h) => head = h,
        }
    }
}

/// This thread's record, given back at its exit.
struct Mine(&'static Record);

impl Drop for Mine {
    /// No reclaim here: a drop of a communicator needs thread-locals that may be destroyed
    /// already (the next free or gpuwire_finalize reclaims what waited for this thread). The
    /// thread's remembered objects are its record's handles': forgotten with it.
    fn drop(&mut self) {
        crate::hot::with_thread(|t| {
            t.pin_record.set(std::ptr::null());
            t.pinned_frees.set(u64::MAX);
            t.checked.set(0);
        });
        self.0.notify.store(false, Relaxed);
        self.0.taken.store(false, Release);
    }
}

thread_local! {
    static MINE: Mine = Mine(claim());
}

/// This thread's record (`None` once its thread-locals are destroyed): in the common case read
/// from `hot::Thread::pin_record` (`t`, the thread's words: a thread-local without a destructor,
/// in the line of the thread's other per-call words), set at the claim and cleared by `Mine`'s
/// drop.
#[inline]
fn record(t: &crate::hot::Thread) -> Option<&'static Record> {
    let p = t.pin_record.get();
    if !p.is_null() {
        // SAFETY: set from this thread's `Mine`, which keeps the record (leaked: never freed)
        // taken until its drop clears the pointer first.
        return Some(unsafe { &*p.cast::<Record>() });
    }
    record_slow()
}

#[cold]
#[inline(never)]
fn record_slow() -> Option<&'static Record> {
    let r = MINE.try_with(|m| m.0).ok()?;
    // A record of another thread's last handles: nothing this thread remembers is for them
    // (where thread-locals may come back after their destruction, a second record).
    crate::hot::with_thread(|t| {
        t.pin_record.set((r as *const Record).cast());
        t.pinned_frees.set(u64::MAX);
        t.checked.set(0);
    });
    Some(r)
}

/// Most handles one pin names.
pub(crate) const PINNED: usize = 3;

/// A thread's pin ([`pin`]): while it lives, the objects of its handles looked up through it
/// stay alive. Not `Send`: it is its thread's.
pub struct Pin {
    /// `None` once the thread's thread-locals are destroyed (a call from an atexit handler):
    /// lookups then count references, as without pins.
    record: Option<&'static Record>,
    /// The handles it may borrow (none for a nested pin: the outermost's are published).
    handles: [u64; PINNED],
    /// The thread's words (`hot::Thread`), valid until the thread ends: the pin is its thread's.
    thread: *const crate::hot::Thread,
    /// Bit i: the thread's remembered object for `handles[i]` (`hot::Thread::pinned_objects`)
    /// is valid: its earlier pins named the same handle in the same place and no communicator
    /// or buffer handle was freed since ([`remember`]). (Not copied here: each word of the pin
    /// is a word of its caller's frame, read again after an NCCL launch.)
    known: u8,
}

/// Pins this thread, for borrowing the objects of `handles` (0: none), until the guard is
/// dropped. A pin inside another (nested) borrows nothing: its lookups count references.
#[inline]
pub fn pin(handles: [u64; PINNED]) -> Pin {
    let thread = crate::hot::with_thread(|t| t as *const crate::hot::Thread);
    // SAFETY: the calling thread's words, which have no destructor: valid until it ends.
    let t = unsafe { &*thread };
    let record = record(t);
    let mut mine = [0; PINNED];
    let mut known = 0;
    if let Some(r) = record {
        let d = r.depth.load(Relaxed);
        if d == 0 {
            let mut same = [false; PINNED];
            for ((slot, h), same) in r.handles.iter().zip(handles).zip(&mut same) {
                *same = slot.load(Relaxed) == h;
                // Release (a plain store on x86): a free that reads these then the word again
                // knows the previous pin's end came first (`pinned_with`).
                slot.store(h, Release);
            }
            // Sequentially consistent (so also a release of the handles above).
            r.word.store(r.word.load(Relaxed) + 1, SeqCst);
            known = remember(t, same);
            mine = handles;
        }
        r.depth.store(d + 1, Relaxed);
    }
    Pin { record, handles: mine, known, thread }
}

/// Which of the objects that the thread's earlier pins found for its record's handles are
/// valid for the new pin (a bit per place): those in the places where it names the `same`
/// handle, where no communicator or buffer handle has been freed since they were found (the
/// thread's remembered objects, `hot::Thread::pinned_objects`, for the handles in the same
/// places of its record, while `Process::frees` is unchanged: `hot::Thread::pinned_frees`). The
/// others are forgotten, and the thread remembers what this pin's lookups find ([`Pin::found`]).
///
/// Why a remembered object is alive and its handle's: it was found by a pinned lookup made
/// after its pin read `Process::frees` as `frees`. A free clears the handle's slot, then
/// increments `Process::frees`, then reads the pin words (`retire`), each sequentially
/// consistent. A free whose increment came before that read had cleared the slot before the
/// lookup, which then found nothing; so every free of the handle since the lookup increments
/// `frees` later. This pin read `frees` unchanged after its own store (the Dekker pair of
/// `retire`'s increment and reading of pin words): no such free has incremented it yet, and
/// each one that will reads this pin's word after its increment, finds the thread pinned with
/// the handle, and keeps the object until the unpin.
///
/// What a call noted of the handles (`Pin::set_checked`) is forgotten where a place's handle
/// differs; it does not depend on frees (a handle is never issued twice: a live one names the
/// same object as when it was noted).
#[inline]
fn remember(t: &crate::hot::Thread, same: [bool; PINNED]) -> u8 {
    // Sequentially consistent after the pin's store.
    let frees = crate::hot::PROCESS.frees.load(SeqCst);
    let valid = t.pinned_frees.get() == frees;
    if !valid {
        t.pinned_frees.set(frees);
    }
    let mut known = 0;
    for (i, (k, same)) in t.pinned_objects.iter().zip(same).enumerate() {
        if valid && same {
            known |= 1 << i;
        } else {
            k.set(std::ptr::null());
            if !same {
                t.checked.set(0);
            }
        }
    }
    known
}

impl Pin {
    /// Where a lookup of `h` may borrow: the index of `h` among the pin's handles, where the
    /// pin names it (and the thread has its record).
    #[inline]
    pub(crate) fn position(&self, h: u64) -> Option<usize> {
        if self.record.is_none() || h == 0 {
            return None;
        }
        self.handles.iter().position(|&x| x == h)
    }

    /// The object of the pin's handle `i` if the thread remembers it ([`remember`]).
    #[inline]
    pub(crate) fn known(&self, i: usize) -> Option<*const ()> {
        if self.known & (1 << i) == 0 {
            return None;
        }
        // SAFETY: the words of this pin's thread (a `Pin` is not `Send`), valid until it ends.
        let p = unsafe { &*self.thread }.pinned_objects[i].get();
        (!p.is_null()).then_some(p)
    }

    /// What a call noted of this pin's handles with [`Self::set_checked`] while the thread's
    /// pins since (this one too) named the same handles in the same places: a note that
    /// depends on nothing but the handles (their objects' fixed properties: a live handle names
    /// the same object for ever, `handles::Registry::insert`). 0: nothing noted, or the pin is
    /// nested or has no record (it names no handles).
    #[inline]
    pub(crate) fn checked(&self) -> u8 {
        if self.record.is_none() || self.handles[0] == 0 {
            return 0;
        }
        // SAFETY: the words of this pin's thread (a `Pin` is not `Send`), valid until it ends.
        unsafe { &*self.thread }.checked.get()
    }

    /// Notes `v` (not 0) of this pin's handles, for [`Self::checked`] of the thread's next pins
    /// with the same handles (one note per thread: the last replaces it). Nothing for a nested
    /// pin or one without a record.
    #[inline]
    pub(crate) fn set_checked(&self, v: u8) {
        if self.record.is_some() && self.handles[0] != 0 {
            // SAFETY: as in `checked`.
            unsafe { &*self.thread }.checked.set(v);
        }
    }

    /// A pinned lookup found `p` for the pin's handle `i`: the thread remembers it for its next
    /// pins with the same handle in that place ([`remember`]).
    #[inline]
    pub(crate) fn found(&self, i: usize, p: *const ()) {
        // SAFETY: the words of this pin's thread (a `Pin` is not `Send`), valid until it ends.
        unsafe { &*self.thread }.pinned_objects[i].set(p);
    }
}

impl Drop for Pin {
    #[inline]
    fn drop(&mut self) {
        let Some(r) = self.record else { return };
        let d = r.depth.load(Relaxed) - 1;
        r.depth.store(d, Relaxed);
        if d == 0 {
            r.word.store(r.word.load(Relaxed) + 1, Release);
            if r.notify.load(Relaxed) {
                r.notify.store(false, Relaxed);
                reclaim();
            }
        }
    }
}

/// An object borrowed through a pin (or, without one, owned): derefs to its `Arc`, which a
/// caller clones where it keeps the object past the call.
pub struct Borrowed<'p, T> {
    arc: ManuallyDrop<Arc<T>>,
    owned: bool,
    _pin: PhantomData<&'p Pin>,
}

impl<'p, T> Borrowed<'p, T> {
    /// The registry's reference `p` (`Arc::into_raw`), not counted: alive while `'p`'s pin is.
    ///
    /// # Safety
    /// `p` must stay a live `Arc`'s pointer for `'p`: a pinnable registry's, read under the pin.
    #[inline]
    pub(crate) unsafe fn pinned(p: *const T) -> Self {
        // SAFETY: the caller's promise; never dropped (ManuallyDrop, `owned` false).
        Borrowed { arc: ManuallyDrop::new(unsafe { Arc::from_raw(p) }), owned: false, _pin: PhantomData }
    }

    #[inline]
    pub(crate) fn owned(a: Arc<T>) -> Self {
        Borrowed { arc: ManuallyDrop::new(a), owned: true, _pin: PhantomData }
    }
}

impl<T> Borrowed<'_, T> {
    /// A reference of the caller's own, to keep past the call.
    #[inline]
    pub fn to_arc(&self) -> Arc<T> {
        Arc::clone(&self.arc)
    }
}

impl<T> Deref for Borrowed<'_, T> {
    type Target = Arc<T>;
    #[inline]
    fn deref(&self) -> &Arc<T> {
        &self.arc
    }
}

impl<T> Drop for Borrowed<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: an owned reference, dropped once.
            unsafe { ManuallyDrop::drop(&mut self.arc) }
        }
    }
}

/// A reference given up by a free while threads were pinned, and the pin words it waits on.
struct Retired {
    /// Kept only to be dropped.
    _object: Box<dyn Send>,
    waits: Vec<(&'static Record, u64)>,
}

/// The retired references not yet dropped, and their number (read before the lock is taken:
/// every free of a communicator or buffer reclaims).
static RETIRED: Mutex<Vec<Retired>> = Mutex::new(Vec::new());
static N_RETIRED: AtomicUsize = AtomicUsize::new(0);

/// The odd pin words of the records pinned now with handle `h`, read after the caller made its
/// free visible (a sequentially consistent clearing of the slot). A record's handles read after
/// its word are that pin's (stored before it), or a later pin's: then that pin is over, and
/// waiting for the word to change costs nothing.
fn pinned_with(h: u64) -> Vec<(&'static Record, u64)> {
    let mut out = Vec::new();
    let mut p = RECORDS.load(Acquire);
    while !p.is_null() {
        // SAFETY: records are never freed.
        let r = unsafe { &*p };
        let w = r.word.load(SeqCst);
        // The word read again after the handles: unchanged, they are that pin's; changed, that
        // pin is over (and its end, a Release store, ordered before this Acquire load).
        if w & 1 == 1 && r.handles.iter().any(|x| x.load(Acquire) == h) && r.word.load(Acquire) == w {
            out.push((r, w));
        }
        p = r.next.load(Relaxed);
    }
    out
}

/// The registry's reference `a` to the object of handle `h`, just freed (its slot cleared):
/// returned for the caller to drop where no thread is pinned with `h`; else a new reference is
/// returned and `a` waits until each of those threads has unpinned ([`reclaim`]).
pub(crate) fn retire<T: Send + Sync + 'static>(a: Arc<T>, h: u64) -> Arc<T> {
    // Every thread's remembered objects (`remember`) are forgotten from here: sequentially
    // consistent, after the caller's clearing of the slot and before the pin words are read.
    crate::hot::PROCESS.frees.fetch_add(1, SeqCst);
    let waits = pinned_with(h);
    if waits.is_empty() {
        // What waited for threads that have unpinned since, and missed their `notify`.
        reclaim();
        return a;
    }
    let keep = a.clone();
    for (r, _) in &waits {
        r.notify.store(true, Relaxed);
    }
    {
        let mut list = RETIRED.lock().unwrap_or_else(|p| p.into_inner());
        list.push(Retired { _object: Box::new(a), waits });
        N_RETIRED.store(list.len(), Release);
    }
    // Threads that unpinned meanwhile may not have seen `notify`: look now.
    reclaim();
    keep
}

/// Drops the retired references whose pinned threads have all unpinned since (outside the
/// list's lock: a drop may free a communicator, which may free more).
pub(crate) fn reclaim() {
    // (A retire that this reads as 0 had not pushed yet: it reclaims itself after its push.)
    if N_RETIRED.load(Acquire) == 0 {
        return;
    }
    let done: Vec<Retired> = {
        // Waited for, not tried: a reclaim running now may have read this thread's word before
        // its unpin, and this one must then look again.
        let mut list = RETIRED.lock().unwrap_or_else(|p| p.into_inner());
        if list.is_empty() {
            return;
        }
        let (done, wait): (Vec<Retired>, Vec<Retired>) =
            std::mem::take(&mut *list).into_iter().partition(|x| x.waits.iter().all(|(r, w)| r.word.load(SeqCst) != *w));
        *list = wait;
        N_RETIRED.store(list.len(), Release);
        done
    };
    drop(done);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handles::{Kind, Pinnable, Registry};
    use std::sync::atomic::AtomicBool;
    use std::sync::atomic::Ordering::AcqRel;

    // Each test has its registry, of a type and a kind of its own (`Pinnable`): pins name
    // handles, and two registries of one kind issue the same handles.

    /// The objects of the tests: each knows its handle and says when it is dropped. A type per
    /// test, each with its registry and a kind that no object of the process has.
    trait MakeProbe: Sized {
        fn make(dropped: Arc<AtomicBool>) -> Self;
    }

    macro_rules! probe_type {
        ($t:ident, $kind:ident) => {
            struct $t {
                // Read by the test that uses this type from several threads (the others leave it).
                #[allow(dead_code)]
                handle: AtomicU64,
                dropped: Arc<AtomicBool>,
            }
            impl Drop for $t {
                fn drop(&mut self) {
                    self.dropped.store(true, SeqCst);
                }
            }
            impl crate::handles::Pinnable for $t {
                const KIND: Kind = Kind::$kind;
                fn registry() -> &'static Registry<Self> {
                    static R: Registry<$t> = Registry::pinnable();
                    &R
                }
            }
            impl MakeProbe for $t {
                fn make(dropped: Arc<AtomicBool>) -> Self {
                    $t { handle: AtomicU64::new(0), dropped }
                }
            }
        };
    }
    probe_type!(ProbeA, TestA);
    probe_type!(ProbeB, TestB);
    probe_type!(ProbeC, TestC);
    probe_type!(ProbeD, TestD);

    fn probe<T: MakeProbe>() -> (Arc<T>, Arc<AtomicBool>) {
        let dropped = Arc::new(AtomicBool::new(false));
        (Arc::new(T::make(dropped.clone())), dropped)
    }

    /// Until `f` holds, reclaiming meanwhile (other tests' threads may be pinned at a free, and
    /// hold its drop until they unpin); false after 10 s.
    fn eventually(f: impl Fn() -> bool) -> bool {
        let t0 = std::time::Instant::now();
        while !f() {
            if t0.elapsed() > std::time::Duration::from_secs(10) {
                return false;
            }
            reclaim();
            std::thread::yield_now();
        }
        true
    }

    /// A handle freed while another thread holds its object through a pin: the object lives
    /// until that thread unpins, then is dropped; the handle is refused at once.
    #[test]
    fn a_free_waits_for_the_pinned_thread() {
        let reg = ProbeA::registry();
        let (p, dropped) = probe();
        let h = reg.insert(p).unwrap();
        let (pinned_tx, pinned_rx) = std::sync::mpsc::channel();
        let (freed_tx, freed_rx) = std::sync::mpsc::channel::<()>();
        let d = dropped.clone();
        let t = std::thread::spawn(move || {
            let pin = pin([h, 0, 0]);
            let b = reg.get_pinned(&pin, h).unwrap();
            pinned_tx.send(()).unwrap();
            freed_rx.recv().unwrap();
            // Freed, and still here.
            assert!(!d.load(SeqCst));
            assert!(reg.get_pinned(&pin, h).is_err());
            drop(b);
        });
        pinned_rx.recv().unwrap();
        drop(reg.remove(h).unwrap());
        assert!(!dropped.load(SeqCst), "dropped under another thread's pin");
        assert!(reg.get(h).is_err());
        freed_tx.send(()).unwrap();
        t.join().unwrap();
        // Dropped by that thread's unpin (its record's `notify`, set before the free returned).
        assert!(dropped.load(SeqCst), "not dropped at the unpin");
    }

    /// A free while other threads are pinned with other handles (a receive blocked for long)
    /// drops the object at once; so does a free after the freeing thread's own pinned lookup.
    #[test]
    fn a_free_under_other_pins_drops_at_once() {
        let reg = ProbeB::registry();
        let (p, dropped) = probe();
        let h = reg.insert(p).unwrap();
        let (q, _) = probe();
        let other = reg.insert(q).unwrap();
        {
            let pin = pin([h, 0, 0]);
            let b = reg.get_pinned(&pin, h).unwrap();
            assert!(!b.dropped.load(SeqCst));
            // Nested pins: the inner one's drop leaves the thread pinned.
            drop(super::pin([0, 0, 0]));
            assert!(reg.get_pinned(&pin, h).is_ok());
        }
        let (pinned_tx, pinned_rx) = std::sync::mpsc::channel();
        let (freed_tx, freed_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            let pin = pin([other, 0, 0]);
            let b = reg.get_pinned(&pin, other).unwrap();
            pinned_tx.send(()).unwrap();
            freed_rx.recv().unwrap();
            drop(b);
        });
        pinned_rx.recv().unwrap();
        drop(reg.remove(h).unwrap());
        assert!(dropped.load(SeqCst), "held for another thread's pin of another handle");
        freed_tx.send(()).unwrap();
        t.join().unwrap();
        drop(reg.remove(other).unwrap());
    }

    /// Threads that look handles up under pins while another frees them and inserts new ones
    /// (reusing the slots): every lookup that succeeds finds the handle's own object, never a
    /// dropped one nor the next object of its slot.
    #[test]
    fn pinned_lookups_race_frees() {
        let reg = ProbeC::registry();
        const N: usize = 9;
        let handles: Arc<Vec<AtomicU64>> = Arc::new((0..N).map(|_| AtomicU64::new(0)).collect());
        let stop = Arc::new(AtomicBool::new(false));
        let found = Arc::new(AtomicUsize::new(0));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (handles, stop, found) = (handles.clone(), stop.clone(), found.clone());
                std::thread::spawn(move || {
                    while !stop.load(Relaxed) {
                        for pair in handles.chunks(PINNED) {
                            let hs = [pair[0].load(Acquire), pair[1].load(Acquire), pair[2].load(Acquire)];
                            let pin = pin(hs);
                            for h in hs {
                                if let Ok(b) = reg.get_pinned(&pin, h) {
                                    assert_eq!(b.handle.load(Acquire), h, "another handle's object");
                                    assert!(!b.dropped.load(SeqCst), "a dropped object");
                                    found.fetch_add(1, Relaxed);
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        let mut drops = Vec::new();
        let t0 = std::time::Instant::now();
        let mut i = 0;
        while t0.elapsed() < std::time::Duration::from_millis(300) {
            let (p, dropped) = probe::<ProbeC>();
            let h = reg.insert(p.clone()).unwrap();
            p.handle.store(h, Release);
            drop(p);
            let old = handles[i % N].swap(h, AcqRel);
            if old != 0 {
                drop(reg.remove(old).unwrap());
            }
            drops.push(dropped);
            i += 1;
        }
        stop.store(true, Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        for h in handles.iter() {
            drop(reg.remove(h.load(Acquire)).unwrap());
        }
        assert!(found.load(Relaxed) > 0);
        assert!(eventually(|| drops.iter().all(|d| d.load(SeqCst))), "objects never dropped");
    }
    /// `f` again until no communicator or buffer handle was freed while it ran (other tests
    /// free theirs meanwhile, and each free makes every thread forget what it remembers): its
    /// last result; false after 10000 tries.
    fn without_frees(f: impl Fn() -> bool) -> bool {
        for _ in 0..10000 {
            let before = crate::hot::PROCESS.frees.load(SeqCst);
            let ok = f();
            if crate::hot::PROCESS.frees.load(SeqCst) == before {
                return ok;
            }
            std::thread::yield_now();
        }
        false
    }

    /// A thread's next pin with the same handle in the same place borrows the object that its
    /// earlier pin's lookup found, while no handle is freed; a free of any handle, another
    /// thread's or its own, and a pin with another handle in that place make it look it up
    /// again, and a freed handle is then refused. Another registry of the same type borrows no
    /// remembered object.
    #[test]
    fn remembered_objects_until_a_free() {
        let reg = ProbeD::registry();
        let (p, dropped) = probe();
        let h = reg.insert(p).unwrap();
        let (q, _) = probe();
        let other = reg.insert(q).unwrap();
        let lookup = |hs: [u64; PINNED]| {
            let pin = pin(hs);
            hs.iter().filter(|&&x| x != 0).all(|&x| reg.get_pinned(&pin, x).is_ok())
        };
        {
            let pin = pin([0, 0, other]);
            assert!(pin.known(2).is_none(), "remembered before any lookup");
        }
        // Remembered by the next pin with the same handle in the same place.
        assert!(without_frees(|| {
            lookup([other, h, 0]);
            let pin = pin([other, h, 0]);
            pin.known(0).is_some() && pin.known(1).is_some() && reg.get_pinned(&pin, h).is_ok()
        }));
        assert!(without_frees(|| {
            lookup([0, h, 0]);
            let pin = pin([0, h, 0]);
            pin.known(0).is_none() && pin.known(1).is_some()
        }));
        // Other handles in those places: forgotten.
        assert!(without_frees(|| {
            lookup([other, h, 0]);
            let pin = pin([h, other, 0]);
            pin.known(0).is_none() && pin.known(1).is_none()
        }));
        // The same handle in the same place stays remembered; a place named otherwise meanwhile
        // is forgotten.
        assert!(without_frees(|| {
            lookup([h, other, 0]);
            lookup([h, 0, 0]);
            let pin = pin([h, other, 0]);
            pin.known(0).is_some() && pin.known(1).is_none()
        }));
        // Another registry of the type (not the type's own) borrows nothing remembered.
        {
            static ELSEWHERE: Registry<ProbeD> = Registry::pinnable();
            assert!(without_frees(|| {
                lookup([h, 0, 0]);
                let pin = pin([h, 0, 0]);
                pin.known(0).is_some() && ELSEWHERE.get_pinned(&pin, h).is_err()
            }));
        }
        // Another handle freed by another thread: forgotten, and found again by a lookup.
        lookup([h, other, 0]);
        let (x, _) = probe::<ProbeD>();
        let unrelated = reg.insert(x).unwrap();
        std::thread::spawn(move || drop(reg.remove(unrelated).unwrap())).join().unwrap();
        {
            let pin = pin([h, other, 0]);
            assert!(pin.known(0).is_none(), "remembered across a free");
            assert!(reg.get_pinned(&pin, h).is_ok());
        }
        // `h` freed by this thread: refused at the next pin, and dropped (no pin holds it).
        lookup([h, other, 0]);
        drop(reg.remove(h).unwrap());
        assert!(dropped.load(SeqCst));
        {
            let pin = pin([h, other, 0]);
            assert!(pin.known(0).is_none());
            assert!(reg.get_pinned(&pin, h).is_err(), "a freed handle borrowed");
            assert!(reg.get_pinned(&pin, other).is_ok());
        }
        drop(reg.remove(other).unwrap());
    }
}
