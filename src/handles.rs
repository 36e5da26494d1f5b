//! Handle registries: the integers that C, Fortran and other FFIs hold for gpuwire's objects.
//!
//! A handle is a 64-bit integer: bits 56..64 name the kind of object (communicator, buffer,
//! request, distributed array), bits 32..56 a generation, bits 0..32 a slot. Freeing an object
//! bumps its slot's generation, so a stale copy of the handle is recognised as freed instead of
//! reaching freed or reused memory; a handle of another kind, a garbage integer and 0 (the NULL
//! handle) are recognised too. No lookup ever dereferences caller-provided memory.
//!
//! A slot never issues the same handle twice: once it has used its last generation (2^24 - 1
//! objects) it is retired and a new slot takes over, so copies of a freed handle stay invalid
//! for the life of the process. A retired slot costs 24 bytes; the 2^32 slots hold 2^56
//! handles (centuries of allocations), after which `insert` fails instead of reusing one.
//!
//! Registries hand out `Arc`s: an object stays alive while an operation or a pending request
//! uses it, even if its handle is freed meanwhile; the last `Arc` releases it. Lookups, inserts
//! and removals take no lock (see [`Registry`]): threads that use different handles do not
//! wait for each other. The C API's lookups of communicators and buffers go through the
//! thread's recent handles ([`Recent`]: a weak reference per handle, checked against its slot),
//! which halves the atomic instructions of a lookup, the most of what it costs. The calls whose
//! common case keeps no object past the call (a blocking allreduce, sendrecv, send, recv)
//! borrow instead, counting no reference ([`Registry::get_pinned`], `crate::pin`).

use std::cell::{RefCell, UnsafeCell};
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::sync::{Arc, Weak};
use std::thread::LocalKey;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::error::{Error, Result};
use crate::pin::{Borrowed, Pin};

/// The allocation of `a`'s object, the object dropped, when `a` is its only reference (no other
/// `Arc`, no `Weak`): kept for a later object of the same type ([`refill`]), so that an object
/// made and dropped once per operation (a request) need not cost an allocation each. Otherwise
/// `a` is dropped as usual and `None` returned. One atomic instruction (`Arc::get_mut`'s).
#[inline]
pub fn vacate<T>(mut a: Arc<T>) -> Option<Spare<T>> {
    Arc::get_mut(&mut a)?;
    // SAFETY: `a` is the only reference (checked above; this thread owns it, so nothing makes
    // another meanwhile), and MaybeUninit<T> has T's size and alignment (what Arc::from_raw asks
    // of another type). The object is initialized and is never used as a T again (`m` is a
    // MaybeUninit now: should the object's drop panic, nothing is dropped twice); the only
    // reference may write through its pointer, as `refill` does.
    unsafe {
        let m: Arc<MaybeUninit<T>> = Arc::from_raw(Arc::into_raw(a).cast::<MaybeUninit<T>>());
        std::ptr::drop_in_place(Arc::as_ptr(&m).cast_mut().cast::<T>());
        Some(Spare(m))
    }
}

/// The allocation of an object that [`vacate`] dropped: the only reference to it (not `Clone`),
/// for [`refill`].
pub struct Spare<T>(Arc<MaybeUninit<T>>);

/// Most allocations of one type a thread keeps for its next objects ([`boxed`], [`unbox`], and
/// the `Arc`s of [`vacate`] where their owners keep them).
pub(crate) const SPARES: usize = 256;

/// A thread's kept allocations of one type (the value of a `thread_local!`).
pub type Spares<T> = RefCell<Vec<Box<MaybeUninit<T>>>>;

/// `value` in a box: in an allocation kept in `spares` ([`unbox`]) when the thread has one, so
/// that an object made and dropped once per operation need not cost an allocation each.
#[inline]
pub fn boxed<T>(spares: &'static LocalKey<Spares<T>>, value: T) -> Box<T> {
    match spares.try_with(|s| s.try_borrow_mut().ok().and_then(|mut s| s.pop())).ok().flatten() {
        Some(mut b) => {
            // (`Box::write` would say this, but needs Rust 1.87; the crate builds with 1.85.)
            b.write(value);
            // SAFETY: just initialized.
            unsafe { b.assume_init() }
        }
        None => Box::new(value),
    }
}

/// Drops `b`'s object and keeps its allocation in `spares` (up to [`SPARES`]; else freed).
#[inline]
pub fn unbox<T>(spares: &'static LocalKey<Spares<T>>, b: Box<T>) {
    let p = Box::into_raw(b);
    // SAFETY: `p` is the box's initialized object, never used as a T again (should its drop
    // panic, the allocation is leaked, nothing dropped twice).
    unsafe { std::ptr::drop_in_place(p) };
    // SAFETY: the box's allocation, MaybeUninit<T> of T's layout.
    let m = unsafe { Box::from_raw(p.cast::<MaybeUninit<T>>()) };
    let _ = spares.try_with(|s| {
        if let Ok(mut s) = s.try_borrow_mut() {
            if s.len() < SPARES {
                s.push(m);
            }
        }
    });
}

/// `value` in an allocation that [`vacate`] returned. No atomic instruction.
#[inline]
pub fn refill<T>(Spare(spare): Spare<T>, value: T) -> Arc<T> {
    debug_assert!(Arc::strong_count(&spare) == 1 && Arc::weak_count(&spare) == 0, "a spare is never shared");
    let p = Arc::into_raw(spare).cast_mut();
    // SAFETY: `vacate` made the spare from the only reference to its allocation, and a `Spare`
    // cannot be cloned or downgraded: this is still the only reference, so writing through it
    // is what `Arc::get_mut` would allow, without its check. The write initializes the object,
    // as Arc<T> asks.
    unsafe {
        (*p).write(value);
        Arc::from_raw(p.cast_const().cast::<T>())
    }
}

const GEN_BITS: u32 = 24;
const GEN_MASK: u64 = (1 << GEN_BITS) - 1;

/// The kind of object a handle names (stored in its top byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Comm = 0xC0,
    Buffer = 0xB0,
    Request = 0xA0,
    DArray = 0xD0,
    /// The unit tests' pinnable registries (`pin`'s tests): kinds no object of the process has.
    #[cfg(test)]
    TestA = 0x1A,
    #[cfg(test)]
    TestB = 0x1B,
    #[cfg(test)]
    TestC = 0x1C,
    #[cfg(test)]
    TestD = 0x1D,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Comm => "communicator",
            Kind::Buffer => "buffer",
            Kind::Request => "request",
            Kind::DArray => "distributed array",
            #[cfg(test)]
            Kind::TestA | Kind::TestB | Kind::TestC | Kind::TestD => "test object",
        }
    }

    fn from_tag(tag: u64) -> Option<Kind> {
        match tag {
            0xC0 => Some(Kind::Comm),
            0xB0 => Some(Kind::Buffer),
            0xA0 => Some(Kind::Request),
            0xD0 => Some(Kind::DArray),
            #[cfg(test)]
            0x1A => Some(Kind::TestA),
            #[cfg(test)]
            0x1B => Some(Kind::TestB),
            #[cfg(test)]
            0x1C => Some(Kind::TestC),
            #[cfg(test)]
            0x1D => Some(Kind::TestD),
            _ => None,
        }
    }
}

/// An object kept in a pinnable registry: the one registry of its type ([`Pinnable::registry`]),
/// whose handles are of its kind. Within the crate, one type per kind: a thread remembers its
/// pins' objects by handle (`crate::pin::remember`), and only the type's own registry borrows
/// them (`Registry::get_pinned`), so a remembered object is of the type and the registry that
/// look it up. The process's are `Communicator` and `Buffer`; the unit tests' have kinds of
/// their own.
pub(crate) trait Pinnable: Send + Sync + Sized + 'static {
    const KIND: Kind;
    /// The type's registry, made by [`Registry::pinnable`].
    fn registry() -> &'static Registry<Self>;
}

/// A slot's state word: its generation (bits 33..), whether it holds an object (bit 32) and
/// the number of lookups reading it at this moment (bits 0..32).
const OCCUPIED: u64 = 1 << 32;
const GEN_SHIFT: u32 = 33;
const READERS: u64 = OCCUPIED - 1;

struct Slot<T> {
    state: AtomicU64,
    /// `Arc::into_raw` of the object while OCCUPIED; written only by the thread that owns the
    /// slot (the inserter before it sets OCCUPIED, the remover once no lookup reads it).
    value: AtomicPtr<T>,
    /// The next free slot (index + 1; 0: none) while this one is on the free list.
    next: AtomicU32,
}

/// Slots are allocated in chunks that never move or shrink: chunk k holds `CHUNK0 << k` slots,
/// from index `CHUNK0 * (2^k - 1)`; 27 chunks hold the 2^32 slots that a handle can name.
const CHUNK0: usize = 64;
const CHUNKS: usize = 27;

/// Chunk and offset of slot `index`.
#[inline]
fn locate(index: usize) -> (usize, usize) {
    let q = index / CHUNK0 + 1;
    let k = (usize::BITS - 1 - q.leading_zeros()) as usize;
    (k, index - CHUNK0 * ((1 << k) - 1))
}

/// Entries of a thread's [`Recent`] handles of one registry.
const RECENT: usize = 32;
/// Highest score of a [`Recent`] entry.
const RECENT_SCORE: u8 = 3;

/// A handle a thread looked up, with a weak reference to its object (which keeps only the
/// allocation: the object is dropped with its last `Arc`, as without the entry).
struct Remembered<T> {
    /// The handle (0: no entry).
    handle: u64,
    /// Its slot's state word.
    state: *const AtomicU64,
    /// The state's bits 32.. while the slot holds this handle's object: its generation, occupied.
    occupied: u64,
    object: Weak<T>,
    /// Hits, up to RECENT_SCORE, less the lookups of other handles that wanted the entry since.
    score: u8,
    /// The last other handle that wanted the entry: it takes the entry when it misses again
    /// with the score at 0. So handles that share an entry, or many handles looked up in turn
    /// (more than there are entries), do not evict one another at every lookup (an eviction
    /// costs two atomic instructions).
    candidate: u64,
}

impl<T> Remembered<T> {
    const EMPTY: Remembered<T> = Remembered { handle: 0, state: std::ptr::null(), occupied: 0, object: Weak::new(), score: 0, candidate: 0 };
}

/// A thread's recently looked-up handles of one registry, by slot (direct-mapped): what
/// [`Registry::get_recent`] looks in first (the value of a `thread_local!`).
pub struct Recent<T> {
    entries: UnsafeCell<[Remembered<T>; RECENT]>,
}

impl<T> Default for Recent<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Recent<T> {
    pub const fn new() -> Self {
        Recent { entries: UnsafeCell::new([const { Remembered::EMPTY }; RECENT]) }
    }

    /// The entry of `h`'s slot.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    fn entry(&self, h: u64) -> &mut Remembered<T> {
        // SAFETY: a thread's own (thread_local), and no reference into it outlives the call that
        // took it (`hit`, `note`, which call nothing that could reach it).
        unsafe { &mut (*self.entries.get())[h as usize % RECENT] }
    }

    /// `h`'s object, if `h` is here and its slot holds it still.
    #[inline]
    fn hit(&self, h: u64) -> Option<Arc<T>> {
        let e = self.entry(h);
        if e.handle != h || h == 0 {
            return None;
        }
        // SAFETY: a slot of the registry that made the entry (handles name their registry's
        // kind); its chunks never move and are never freed while the registry exists.
        let s = unsafe { &*e.state }.load(Ordering::Acquire);
        if s >> 32 != e.occupied {
            return None;
        }
        // The registry holds the object, unless a removal came just after the load: the upgrade
        // then fails (and `get` refuses the handle) or finds the object alive, as a lookup
        // counted before that removal would.
        let a = e.object.upgrade()?;
        e.score = (e.score + 1).min(RECENT_SCORE);
        Some(a)
    }

    /// After a `get` of `h` (`found`, in `state`'s slot) that `hit` did not answer: `h` takes
    /// the entry when it is free, or when `h` missed it last and its score is down to 0.
    fn note(&self, h: u64, state: Option<&AtomicU64>, found: Option<&Arc<T>>) {
        let e = self.entry(h);
        if e.handle == h && h != 0 {
            // Freed (or being freed).
            *e = Remembered::EMPTY;
        }
        let (Some(state), Some(a)) = (state, found) else { return };
        if e.handle != 0 && (e.score > 0 || e.candidate != h) {
            e.score = e.score.saturating_sub(1);
            e.candidate = h;
            return;
        }
        *e = Remembered { handle: h, state, occupied: (((h >> 32) & GEN_MASK) << 1) | 1, object: Arc::downgrade(a), score: 1, candidate: 0 };
    }
}

/// A registry of one kind of object.
///
/// Lookups take no lock: a lookup announces itself in the slot's state word (one atomic add),
/// checks generation and occupancy in the value that add returned, clones the `Arc` and leaves
/// (one atomic subtract). `remove` clears OCCUPIED first (lookups that come later refuse the
/// handle) and then waits for the lookups already inside the slot, a few instructions each (or
/// a borrowing [`Registry::with`]'s call), before it takes the object; so a lookup never touches
/// an object that was released. Slots live
/// in chunks that are never freed while the registry exists, so a garbage handle that names an
/// allocated slot reads only the registry's memory. Free slots are on a lock-free stack whose
/// head carries a 32-bit count of its changes (ABA: a pop fails unless the head is unchanged).
///
/// Laid out in order, aligned to a cache line: what a lookup reads (the kind, `retire`, the
/// first chunks' pointers) in the first line (`crate::hot`'s reason).
#[repr(C, align(64))]
pub struct Registry<T> {
    /// What a removal does with the registry's reference where lookups may be pinned
    /// ([`Registry::pinnable`]: `pin::retire`); `None` where they are not.
    retire: Option<fn(Arc<T>, u64) -> Arc<T>>,
    kind: Kind,
    chunks: [AtomicPtr<Slot<T>>; CHUNKS],
    /// The last generation a slot issues before it is retired (GEN_MASK; less in tests).
    last_generation: u64,
    /// The number of slots (2^32; less in tests).
    max_slots: usize,
    /// Slots taken into use so far (the next new slot's index).
    used: AtomicUsize,
    /// The free list's head: its count of changes (bits 32..64), the top slot's index + 1
    /// (bits 0..32; 0 when empty).
    free: AtomicU64,
    /// The registry owns `Arc<T>`s: Send and Sync as they are.
    _owns: PhantomData<Arc<T>>,
}

impl<T> Registry<T> {
    pub const fn new(kind: Kind) -> Self {
        Self::with_limits(kind, GEN_MASK, 1 << 32)
    }

    /// A registry whose lookups may be pinned ([`Registry::get_pinned`]): a removal keeps the
    /// registry's reference while threads are pinned (`crate::pin::retire`). The registry of a
    /// [`Pinnable`] type (its `registry()`); only that one borrows the objects a thread remembers.
    pub(crate) const fn pinnable() -> Self
    where
        T: Pinnable,
    {
        let mut r = Self::new(T::KIND);
        r.retire = Some(crate::pin::retire::<T>);
        r
    }

    /// A registry whose slots retire after `last_generation` objects and which has `max_slots`
    /// slots: tests reach both limits quickly through the code that production uses.
    const fn with_limits(kind: Kind, last_generation: u64, max_slots: usize) -> Self {
        Registry {
            kind,
            last_generation,
            max_slots,
            chunks: [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS],
            used: AtomicUsize::new(0),
            free: AtomicU64::new(0),
            retire: None,
            _owns: PhantomData,
        }
    }

    /// Slot `index` if its chunk is allocated.
    #[inline]
    fn slot(&self, index: usize) -> Option<&Slot<T>> {
        let (k, at) = locate(index);
        let c = self.chunks.get(k)?.load(Ordering::Acquire);
        if c.is_null() {
            return None;
        }
        // SAFETY: chunk k holds `CHUNK0 << k` initialized slots (`at` is less) and is freed only
        // when the registry is dropped.
        Some(unsafe { &*c.add(at) })
    }

    /// Slot `index`, allocating its chunk if no thread did yet.
    fn slot_or_allocate(&self, index: usize) -> &Slot<T> {
        let (k, at) = locate(index);
        let mut c = self.chunks[k].load(Ordering::Acquire);
        if c.is_null() {
            let fresh: Box<[Slot<T>]> =
                (0..CHUNK0 << k).map(|_| Slot { state: AtomicU64::new(0), value: AtomicPtr::new(std::ptr::null_mut()), next: AtomicU32::new(0) }).collect();
            let fresh = Box::into_raw(fresh).cast::<Slot<T>>();
            c = match self.chunks[k].compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => fresh,
                Err(other) => {
                    // SAFETY: `fresh` was made just above and never shared.
                    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(fresh, CHUNK0 << k)) });
                    other
                }
            };
        }
        // SAFETY: as in `slot`.
        unsafe { &*c.add(at) }
    }

    /// A free slot off the free list.
    fn pop_free(&self) -> Option<usize> {
        let mut head = self.free.load(Ordering::Acquire);
        loop {
            let top = (head & 0xFFFF_FFFF) as usize;
            if top == 0 {
                return None;
            }
            // A slot on the free list has its chunk (it was in use); should `top` be popped and
            // reused meanwhile, `next` may be stale but the head's count has changed: the
            // exchange fails and the loop reads again.
            let next = self.slot(top - 1).expect("a free slot's chunk").next.load(Ordering::Relaxed) as u64;
            let new = ((head >> 32).wrapping_add(1) << 32) | next;
            match self.free.compare_exchange_weak(head, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(top - 1),
                Err(h) => head = h,
            }
        }
    }

    fn push_free(&self, index: usize) {
        let slot = self.slot(index).expect("a used slot's chunk");
        let mut head = self.free.load(Ordering::Relaxed);
        loop {
            slot.next.store((head & 0xFFFF_FFFF) as u32, Ordering::Relaxed);
            let new = ((head >> 32).wrapping_add(1) << 32) | (index as u64 + 1);
            match self.free.compare_exchange_weak(head, new, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// Registers `value` and returns its new handle (never 0, never one issued before).
    #[inline]
    pub fn insert(&self, value: Arc<T>) -> Result<u64> {
        let index = match self.pop_free() {
            Some(i) => i,
            None => match self.used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < self.max_slots).then_some(n + 1)) {
                Ok(i) => i,
                Err(_) => {
                    return Err(Error::Internal(format!(
                        "every {} handle has been issued ({} slots of {} generations): the process has created too many objects",
                        self.kind.name(),
                        self.max_slots,
                        self.last_generation
                    )));
                }
            },
        };
        let slot = self.slot_or_allocate(index);
        // Release: a pinned lookup that reads this pointer then sees the slot's state changed
        // (`get_pinned`'s second read of it).
        slot.value.store(Arc::into_raw(value).cast_mut(), Ordering::Release);
        // Free slots have a generation left (see `remove`): the new one is 1..=last_generation,
        // never 0. Lookups may be counted in the word meanwhile: one addition keeps their count.
        let s = slot.state.fetch_add((1 << GEN_SHIFT) | OCCUPIED, Ordering::Release);
        let generation = (s >> GEN_SHIFT) + 1;
        Ok(((self.kind as u64) << 56) | (generation << 32) | index as u64)
    }

    #[inline]
    fn decode(&self, h: u64) -> Result<(usize, u64)> {
        if h == 0 {
            return Err(Error::InvalidHandle(format!("the NULL {} handle (0) was given", self.kind.name())));
        }
        let tag = h >> 56;
        if tag != self.kind as u64 {
            return Err(Error::InvalidHandle(match Kind::from_tag(tag) {
                Some(k) => format!("handle {h:#x} is a {} handle, not a {} handle", k.name(), self.kind.name()),
                None => format!("{h:#x} is not a gpuwire {} handle (it was never issued)", self.kind.name()),
            }));
        }
        Ok(((h & 0xFFFF_FFFF) as usize, (h >> 32) & GEN_MASK))
    }

    fn stale(&self, h: u64) -> Error {
        Error::InvalidHandle(format!("{} handle {h:#x} was already freed (or never issued)", self.kind.name()))
    }

    /// The object behind `h`.
    #[inline]
    pub fn get(&self, h: u64) -> Result<Arc<T>> {
        // A handle of this kind found in its slot: no lock, no error value built on the way.
        if h >> 56 == self.kind as u64 {
            let (index, generation) = ((h & 0xFFFF_FFFF) as usize, (h >> 32) & GEN_MASK);
            if let Some(slot) = self.slot(index) {
                let s = slot.state.fetch_add(1, Ordering::Acquire);
                let found = if s >> 32 == (generation << 1) | 1 {
                    let p = slot.value.load(Ordering::Relaxed);
                    // SAFETY: OCCUPIED with this generation when this lookup was counted: `p` is
                    // the registry's `Arc`, which `remove` releases only once the count is 0.
                    unsafe {
                        Arc::increment_strong_count(p);
                        Some(Arc::from_raw(p))
                    }
                } else {
                    None
                };
                slot.state.fetch_sub(1, Ordering::Release);
                if let Some(v) = found {
                    return Ok(v);
                }
            }
        }
        Err(self.refused(h))
    }

    /// `get` through this thread's [`Recent`] handles of the registry: a handle found there
    /// whose slot still holds it (one plain load) has its object from the weak reference kept
    /// there, one atomic instruction instead of the three of `get`. Any other handle takes
    /// `get`, and the entry when the entry's score allows ([`Recent`]).
    /// One `Recent` per registry: its entries point into this registry's slots.
    #[inline]
    pub fn get_recent(&'static self, recent: &'static LocalKey<Recent<T>>, h: u64) -> Result<Arc<T>> {
        recent.try_with(|r| self.get_in(Some(r), h)).unwrap_or_else(|_| self.get(h))
    }

    /// The object behind `h`, borrowed for as long as `pin` lives, without counting a reference
    /// (`crate::pin`), where the registry is its type's own ([`Pinnable::registry`]) and `pin`
    /// names `h`; otherwise (and for a handle refused) as [`Registry::get`].
    #[inline]
    pub(crate) fn get_pinned<'p>(&self, pin: &'p Pin, h: u64) -> Result<Borrowed<'p, T>>
    where
        T: Pinnable,
    {
        // The kind and the registry are the type's (constants): a remembered object is borrowed
        // without reading the registry, one cache line fewer after an NCCL launch
        // (`crate::hot`). Another registry of the type (none in the process) looks up and
        // counts a reference, as `get`.
        if h >> 56 == T::KIND as u64 && std::ptr::eq(self, T::registry()) {
            if let Some(i) = pin.position(h) {
                if let Some(p) = pin.known(i) {
                    // SAFETY: found by a pinned lookup of `h` in this registry (the only one
                    // that remembers objects of `h`'s kind: `Pinnable`), and no handle has been
                    // freed since (`pin::remember`): the registry's reference, alive while `pin`
                    // is, as below.
                    return Ok(unsafe { Borrowed::pinned(p.cast::<T>()) });
                }
                let (index, generation) = ((h & 0xFFFF_FFFF) as usize, (h >> 32) & GEN_MASK);
                if let Some(slot) = self.slot(index).filter(|_| self.retire.is_some()) {
                    // Sequentially consistent after the pin's store (`crate::pin`).
                    let s = slot.state.load(Ordering::SeqCst);
                    if s >> 32 == (generation << 1) | 1 {
                        let p = slot.value.load(Ordering::Acquire);
                        // The state again: unchanged, `p` is this generation's (an insert of a
                        // later one stores its pointer after the removal changed the state, with
                        // Release).
                        std::sync::atomic::fence(Ordering::Acquire);
                        if slot.state.load(Ordering::Relaxed) >> 32 == s >> 32 {
                            pin.found(i, p.cast_const().cast());
                            // SAFETY: the registry's reference of this generation, read under
                            // `pin`, which names `h`: its removal came after the pin's store (the
                            // state was still occupied after it), so `retire` keeps the reference
                            // until the pin is dropped.
                            return Ok(unsafe { Borrowed::pinned(p) });
                        }
                    }
                }
            }
        }
        self.get(h).map(Borrowed::owned)
    }

    /// `get_recent` in the thread's recent handles reached already (`None` once its
    /// thread-locals are destroyed: `get` alone), for a caller that looks up several handles
    /// with one reach of its thread-local.
    #[inline]
    pub fn get_in(&'static self, recent: Option<&Recent<T>>, h: u64) -> Result<Arc<T>> {
        match recent.and_then(|r| r.hit(h)) {
            Some(a) => Ok(a),
            None => self.get_noted(recent, h),
        }
    }

    /// `get_in` of a handle that is not in `recent` (or is there, but freed).
    #[inline(never)]
    fn get_noted(&self, recent: Option<&Recent<T>>, h: u64) -> Result<Arc<T>> {
        let found = self.get(h);
        if let Some(r) = recent {
            let slot = found.as_ref().ok().and_then(|_| self.slot((h & 0xFFFF_FFFF) as usize));
            r.note(h, slot.map(|s| &s.state), found.as_ref().ok());
        }
        found
    }

    /// `f` of the object behind `h`, borrowed: the lookup stays counted in its slot while `f`
    /// runs (one atomic instruction in, one out), instead of cloning the `Arc`. A removal of `h`
    /// meanwhile waits until `f` returns: for calls that no other thread's removal may meet (a
    /// request's wait or test: its own thread removes it once it completed).
    #[inline]
    pub fn with<R>(&self, h: u64, f: impl FnOnce(&Arc<T>) -> R) -> Result<R> {
        if h >> 56 == self.kind as u64 {
            let (index, generation) = ((h & 0xFFFF_FFFF) as usize, (h >> 32) & GEN_MASK);
            if let Some(slot) = self.slot(index) {
                /// Leaves the slot's count of lookups, also if `f` unwinds.
                struct Counted<'a>(&'a AtomicU64);
                impl Drop for Counted<'_> {
                    fn drop(&mut self) {
                        self.0.fetch_sub(1, Ordering::Release);
                    }
                }
                let s = slot.state.fetch_add(1, Ordering::Acquire);
                let counted = Counted(&slot.state);
                if s >> 32 == (generation << 1) | 1 {
                    // SAFETY: OCCUPIED with this generation when this lookup was counted: the
                    // pointer is the registry's `Arc`, which `remove` releases only once the count
                    // is 0 (after `counted` is dropped); it is not dropped here.
                    let a = std::mem::ManuallyDrop::new(unsafe { Arc::from_raw(slot.value.load(Ordering::Relaxed)) });
                    let r = f(&a);
                    drop(counted);
                    return Ok(r);
                }
                drop(counted);
            }
        }
        Err(self.refused(h))
    }

    /// Why `get` refused `h`: NULL, another kind, never issued, or freed.
    #[cold]
    fn refused(&self, h: u64) -> Error {
        match self.decode(h) {
            Err(e) => e,
            Ok(_) => self.stale(h),
        }
    }

    /// Takes the object out of slot `index` if it holds generation `generation`; then returns
    /// the slot to the free list, unless its last generation is used up: then it is retired,
    /// and no handle of it is ever issued again.
    fn take(&self, index: usize, generation: u64) -> Option<Arc<T>> {
        let slot = self.slot(index)?;
        let mut s = slot.state.load(Ordering::Relaxed);
        loop {
            if s >> 32 != (generation << 1) | 1 {
                return None;
            }
            // Sequentially consistent: either a pinned lookup sees the slot cleared, or `retire`
            // (below) sees its pin (`crate::pin`).
            match slot.state.compare_exchange_weak(s, s & !OCCUPIED, Ordering::SeqCst, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        // This thread owns the slot now. Lookups counted after the exchange see it empty and
        // leave `value` alone; those counted before it (`s`'s count) may still be cloning the
        // Arc (a few instructions): wait for them.
        if s & READERS != 0 {
            let mut spins = 0u32;
            while slot.state.load(Ordering::Acquire) & READERS != 0 {
                spins += 1;
                if spins < 100 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        let p = slot.value.load(Ordering::Relaxed);
        if generation < self.last_generation {
            self.push_free(index);
        }
        // SAFETY: `p` is the `Arc::into_raw` that `insert` stored for this generation; no counted
        // lookup reads it any more and no other `take` won the exchange above (pinned lookups
        // may: `retire` keeps it for them).
        let a = unsafe { Arc::from_raw(p) };
        Some(match self.retire {
            Some(retire) => retire(a, ((self.kind as u64) << 56) | (generation << 32) | index as u64),
            None => a,
        })
    }

    /// Unregisters `h` and returns its object; later lookups of `h` fail.
    pub fn remove(&self, h: u64) -> Result<Arc<T>> {
        let (index, generation) = self.decode(h)?;
        self.take(index, generation).ok_or_else(|| self.stale(h))
    }

    /// Unregisters every object (gpuwire_finalize) and returns them, oldest slot first.
    pub fn drain(&self) -> Vec<Arc<T>> {
        let mut out = Vec::new();
        for i in 0..self.used.load(Ordering::Acquire) {
            let Some(slot) = self.slot(i) else { continue };
            let s = slot.state.load(Ordering::Acquire);
            if s & OCCUPIED != 0 {
                out.extend(self.take(i, s >> GEN_SHIFT));
            }
        }
        out
    }

    /// Number of live handles (counted over the slots: for tests and diagnostics).
    pub fn live(&self) -> usize {
        (0..self.used.load(Ordering::Acquire)).filter(|&i| self.slot(i).is_some_and(|s| s.state.load(Ordering::Relaxed) & OCCUPIED != 0)).count()
    }
}

impl<T> Drop for Registry<T> {
    fn drop(&mut self) {
        drop(self.drain());
        for (k, c) in self.chunks.iter_mut().enumerate() {
            let c = *c.get_mut();
            if !c.is_null() {
                // SAFETY: made by `slot_or_allocate` as a boxed slice of this length.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(c, CHUNK0 << k)) });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_foreign_and_null_handles_are_refused() {
        let r: Registry<i32> = Registry::new(Kind::Buffer);
        let other: Registry<i32> = Registry::new(Kind::Comm);
        let h = r.insert(Arc::new(5)).unwrap();
        assert_eq!(*r.get(h).unwrap(), 5);
        let c = other.insert(Arc::new(1)).unwrap();
        assert!(r.get(c).unwrap_err().to_string().contains("communicator handle"));
        assert!(r.get(0).unwrap_err().to_string().contains("NULL"));
        assert!(r.get(0x1234).is_err());
        r.remove(h).unwrap();
        assert!(r.get(h).unwrap_err().to_string().contains("freed"));
        assert!(r.remove(h).is_err());
        // The slot is reused with a new generation: the old handle stays invalid.
        let h2 = r.insert(Arc::new(6)).unwrap();
        assert_ne!(h, h2);
        assert!(r.get(h).is_err());
        assert_eq!(*r.get(h2).unwrap(), 6);
        assert_eq!(r.live(), 1);
        assert_eq!(r.drain().len(), 1);
        assert!(r.get(h2).is_err());
    }

    /// Drives one slot through `last` generations and `free` copies of every handle: none is
    /// ever issued twice, every stale copy stays invalid (also for remove), and the slot is
    /// retired for a new one.
    fn cycle_one_slot(r: &Registry<u64>, last: u64) {
        let mut stale = std::collections::HashSet::new();
        let first = r.insert(Arc::new(0)).unwrap();
        r.remove(first).unwrap();
        stale.insert(first);
        for n in 1..last + 2 {
            let h = r.insert(Arc::new(n)).unwrap();
            assert!(stale.insert(h), "handle {h:#x} issued twice (cycle {n})");
            assert_eq!(*r.get(h).unwrap(), n);
            // Each slot issues `last` handles, then the next slot takes over.
            assert_eq!(h & 0xFFFF_FFFF, n / last, "cycle {n}");
            r.remove(h).unwrap();
        }
        assert_eq!(r.live(), 0);
        for h in &stale {
            assert!(r.get(*h).unwrap_err().to_string().contains("freed"));
            assert!(r.remove(*h).is_err());
        }
        // A stale copy of the first slot's handles cannot free the new slot's object.
        let h = r.insert(Arc::new(7)).unwrap();
        for s in &stale {
            assert!(r.remove(*s).is_err());
        }
        assert_eq!(*r.get(h).unwrap(), 7);
    }

    #[test]
    fn a_slot_never_reissues_a_handle() {
        cycle_one_slot(&Registry::with_limits(Kind::Request, 5, 1 << 32), 5);
        cycle_one_slot(&Registry::with_limits(Kind::Buffer, 1, 1 << 32), 1);
    }

    #[test]
    fn a_slot_never_reissues_a_handle_at_the_production_limit() {
        // 2^24 cycles of one slot, in the real registry: the generation field is then used up.
        let r: Registry<u64> = Registry::new(Kind::Buffer);
        let first = r.insert(Arc::new(0)).unwrap();
        r.remove(first).unwrap();
        let (v, mut h) = (Arc::new(1), 0);
        for _ in 1..=GEN_MASK {
            h = r.insert(v.clone()).unwrap();
            r.remove(h).unwrap();
        }
        assert_eq!(h & 0xFFFF_FFFF, 1, "the last generation of slot 0 was issued twice");
        let next = r.insert(Arc::new(1)).unwrap();
        assert_ne!(next, first);
        assert!(r.remove(first).is_err());
        assert_eq!(*r.get(next).unwrap(), 1);
    }

    /// A request's allocation reused (`vacate`, `refill`, as `request::register` and `release`
    /// do): the object is dropped at once, the next one lives in the same memory, and the freed
    /// handle stays refused; a shared object is never vacated.
    #[test]
    fn vacated_allocations_are_reused_and_old_handles_refused() {
        #[derive(Debug)]
        struct Noted(Arc<std::sync::atomic::AtomicUsize>, u64);
        impl Drop for Noted {
            fn drop(&mut self) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let drops = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let r: Registry<Noted> = Registry::new(Kind::Request);
        let h1 = r.insert(Arc::new(Noted(drops.clone(), 1))).unwrap();
        let a = r.get(h1).unwrap();
        r.remove(h1).unwrap();
        let at = Arc::as_ptr(&a) as usize;
        let spare = vacate(a).expect("the last reference");
        assert_eq!(drops.load(std::sync::atomic::Ordering::SeqCst), 1, "vacate drops the object");
        let h2 = r.insert(refill(spare, Noted(drops.clone(), 2))).unwrap();
        assert_ne!(h1, h2);
        let b = r.get(h2).unwrap();
        assert_eq!((b.1, Arc::as_ptr(&b) as usize), (2, at), "the new object lives in the old allocation");
        assert!(r.get(h1).unwrap_err().to_string().contains("request handle") && r.get(h1).unwrap_err().to_string().contains("freed"));
        assert!(r.remove(h1).is_err());
        // Shared (the registry still holds it): not vacated, not dropped.
        assert!(vacate(b).is_none());
        assert_eq!(drops.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(r.get(h2).unwrap().1, 2);
        // A Weak reference also keeps the allocation from reuse.
        let c = r.remove(h2).unwrap();
        let w = Arc::downgrade(&c);
        assert!(vacate(c).is_none());
        assert!(w.upgrade().is_none(), "dropped as usual");
        assert_eq!(drops.load(std::sync::atomic::Ordering::SeqCst), 2);
        // Many outstanding at once, then all released and reissued: every handle distinct, every
        // stale one refused, every object dropped once.
        let mut spares = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for round in 0..3u64 {
            let hs: Vec<u64> = (0..1000u64)
                .map(|i| {
                    let v = Noted(drops.clone(), round * 1000 + i);
                    let a = match spares.pop() {
                        Some(m) => refill(m, v),
                        None => Arc::new(v),
                    };
                    r.insert(a).unwrap()
                })
                .collect();
            assert_eq!(r.live(), 1000);
            for (i, h) in hs.iter().enumerate() {
                assert!(seen.insert(*h), "handle {h:#x} issued twice");
                let a = r.get(*h).unwrap();
                assert_eq!(a.1, round * 1000 + i as u64);
                r.remove(*h).unwrap();
                spares.push(vacate(a).expect("the last reference"));
            }
            assert_eq!(r.live(), 0);
        }
        assert_eq!(drops.load(std::sync::atomic::Ordering::SeqCst), 2 + 3000);
        for h in &seen {
            assert!(r.get(*h).unwrap_err().to_string().contains("freed"));
        }
        assert!(r.get(0).unwrap_err().to_string().contains("NULL"));
    }

    #[test]
    fn an_exhausted_registry_refuses_to_reuse_handles() {
        let r: Registry<u64> = Registry::with_limits(Kind::DArray, 2, 3);
        let mut seen = std::collections::HashSet::new();
        for n in 0..6 {
            let h = r.insert(Arc::new(n)).unwrap();
            assert!(seen.insert(h));
            r.remove(h).unwrap();
        }
        let e = r.insert(Arc::new(9)).unwrap_err();
        assert!(e.to_string().contains("every distributed array handle has been issued"), "{e}");
        assert_eq!(r.live(), 0);
        // Draining retires exhausted slots too.
        let r: Registry<u64> = Registry::with_limits(Kind::Comm, 1, 2);
        r.insert(Arc::new(1)).unwrap();
        assert_eq!(r.drain().len(), 1);
        r.insert(Arc::new(2)).unwrap();
        r.drain();
        assert!(r.insert(Arc::new(3)).is_err());
    }

    /// Several threads insert, look up and remove their own handles while others look up every
    /// handle they saw: a live handle always gives its own object, a removed one is refused
    /// from then on, every object is dropped exactly once, and no handle is issued twice.
    #[test]
    fn concurrent_insert_get_remove_keep_every_guarantee() {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
        #[derive(Debug)]
        struct Noted(Arc<AtomicUsize>, u64);
        impl Drop for Noted {
            fn drop(&mut self) {
                self.0.fetch_add(1, SeqCst);
            }
        }
        // Few generations per slot: slots retire and new chunks are allocated during the run.
        let r: Arc<Registry<Noted>> = Arc::new(Registry::with_limits(Kind::Request, 7, 1 << 32));
        let drops = Arc::new(AtomicUsize::new(0));
        let freed = Arc::new(std::sync::Mutex::new(Vec::<u64>::new()));
        let stop = Arc::new(AtomicBool::new(false));
        const PER_THREAD: u64 = 20_000;
        let writers: Vec<_> = (0..4u64)
            .map(|t| {
                let (r, drops, freed) = (r.clone(), drops.clone(), freed.clone());
                std::thread::spawn(move || {
                    let mut mine = Vec::new();
                    let mut issued = Vec::new();
                    for n in 0..PER_THREAD {
                        let v = t * PER_THREAD + n;
                        let h = r.insert(Arc::new(Noted(drops.clone(), v))).unwrap();
                        issued.push(h);
                        mine.push((h, v));
                        assert_eq!(r.get(h).unwrap().1, v);
                        if mine.len() > 16 || n % 3 == 0 {
                            let (h, v) = mine.swap_remove((n as usize * 7) % mine.len());
                            assert_eq!(r.remove(h).unwrap().1, v);
                            assert!(r.get(h).is_err() && r.remove(h).is_err(), "a removed handle is refused");
                            freed.lock().unwrap().push(h);
                        }
                    }
                    for (h, v) in mine {
                        assert_eq!(r.remove(h).unwrap().1, v);
                    }
                    issued
                })
            })
            .collect();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (r, freed, stop) = (r.clone(), freed.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut checks = 0u64;
                    while !stop.load(SeqCst) {
                        let hs: Vec<u64> = freed.lock().unwrap().iter().rev().take(64).copied().collect();
                        for h in hs {
                            assert!(r.get(h).is_err(), "freed handle {h:#x} found");
                            checks += 1;
                        }
                        // Garbage and foreign handles next to live slots.
                        assert!(r.get(0xB0_000001_00000000).is_err() && r.get(0).is_err());
                        assert!(r.get(0xA0_000000_FFFF_FFFF).is_err());
                    }
                    checks
                })
            })
            .collect();
        let mut seen = std::collections::HashSet::new();
        for w in writers {
            for h in w.join().unwrap() {
                assert!(seen.insert(h), "handle {h:#x} issued twice");
            }
        }
        stop.store(true, SeqCst);
        for t in readers {
            t.join().unwrap();
        }
        assert_eq!(r.live(), 0);
        assert_eq!(drops.load(SeqCst), 4 * PER_THREAD as usize, "every object dropped once");
        for h in freed.lock().unwrap().iter() {
            assert!(r.get(*h).unwrap_err().to_string().contains("freed"));
        }
        // Lookups of one live handle from 3 threads while it is removed and released at once:
        // each gets the object or a refusal, never a released one (it is dropped exactly once).
        for round in 0..500u64 {
            let before = drops.load(SeqCst);
            let h = r.insert(Arc::new(Noted(drops.clone(), round))).unwrap();
            let go = Arc::new(AtomicBool::new(false));
            let ts: Vec<_> = (0..3)
                .map(|_| {
                    let (r, go) = (r.clone(), go.clone());
                    std::thread::spawn(move || {
                        while !go.load(SeqCst) {
                            std::hint::spin_loop();
                        }
                        while let Ok(a) = r.get(h) {
                            assert_eq!(a.1, round);
                        }
                    })
                })
                .collect();
            go.store(true, SeqCst);
            std::thread::yield_now();
            drop(r.remove(h).unwrap());
            for t in ts {
                t.join().unwrap();
            }
            assert_eq!(drops.load(SeqCst), before + 1, "round {round}: the object is dropped once");
        }
    }

    /// `get_recent`: a handle looked up before is found through the thread's entry (a weak
    /// reference: the object is dropped when freed); a freed handle is refused, also while its
    /// object lives on and after its slot took a new one; handles that share an entry do not
    /// evict one another at every lookup.
    #[test]
    fn recent_handles_are_found_while_live_only() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        #[derive(Debug)]
        struct Noted(u64);
        impl Drop for Noted {
            fn drop(&mut self) {
                DROPS.fetch_add(1, SeqCst);
            }
        }
        static R: Registry<Noted> = Registry::new(Kind::Buffer);
        thread_local! {
            static MINE: Recent<Noted> = const { Recent::new() };
        }
        let remembered = |h: u64| Arc::weak_count(&R.get(h).unwrap()) == 1;
        let h = R.insert(Arc::new(Noted(1))).unwrap();
        assert!(R.get_recent(&MINE, 0).unwrap_err().to_string().contains("NULL"), "the NULL handle, as a free entry's");
        assert_eq!(R.get_recent(&MINE, h).unwrap().0, 1);
        assert!(remembered(h), "the first lookup takes the free entry");
        assert!(R.get_recent(&MINE, 0).is_err() && R.get_recent(&MINE, h ^ 1 << 40).is_err());
        assert_eq!(R.get_recent(&MINE, h).unwrap().0, 1);
        drop(R.remove(h).unwrap());
        assert_eq!(DROPS.load(SeqCst), 1, "the entry keeps no object alive");
        assert!(R.get_recent(&MINE, h).unwrap_err().to_string().contains("freed"));
        let h2 = R.insert(Arc::new(Noted(2))).unwrap();
        assert_eq!(h2 & 0xFFFF_FFFF, h & 0xFFFF_FFFF, "the slot is reused");
        assert!(R.get_recent(&MINE, h).is_err());
        assert_eq!(R.get_recent(&MINE, h2).unwrap().0, 2);
        assert_eq!(R.get_recent(&MINE, h2).unwrap().0, 2);
        let kept = R.get_recent(&MINE, h2).unwrap();
        drop(R.remove(h2).unwrap());
        assert!(R.get_recent(&MINE, h2).is_err(), "freed while its object lives on");
        drop(kept);
        // Slots 0 and RECENT share an entry.
        let hs: Vec<u64> = (0..=RECENT as u64).map(|i| R.insert(Arc::new(Noted(10 + i))).unwrap()).collect();
        let (a, b) = (hs[0], hs[RECENT]);
        assert_eq!(a as usize % RECENT, b as usize % RECENT);
        for _ in 0..3 {
            R.get_recent(&MINE, a).unwrap();
        }
        for _ in 0..10 {
            assert_eq!(R.get_recent(&MINE, b).unwrap().0, 10 + RECENT as u64);
            assert_eq!(R.get_recent(&MINE, a).unwrap().0, 10);
        }
        assert!(remembered(a) && !remembered(b), "a, hit between b's lookups, keeps the entry");
        for _ in 0..4 {
            R.get_recent(&MINE, b).unwrap();
        }
        assert!(remembered(b) && !remembered(a), "b, looked up in a row, takes it");
        std::thread::spawn(move || assert_eq!(R.get_recent(&MINE, a).unwrap().0, 10)).join().unwrap();
        for h in hs {
            drop(R.remove(h).unwrap());
        }
        assert_eq!(DROPS.load(SeqCst), 3 + RECENT);
    }

    /// `with`: the object borrowed for the call, no `Arc` taken; a stale handle refused; a
    /// removal by another thread meanwhile waits until the call returns.
    #[test]
    fn with_borrows_and_removal_waits_for_it() {
        use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
        let r: Arc<Registry<u64>> = Arc::new(Registry::new(Kind::Request));
        let h = r.insert(Arc::new(7)).unwrap();
        assert_eq!(r.with(h, |v| (**v, Arc::strong_count(v))).unwrap(), (7, 1));
        let removed = Arc::new(AtomicBool::new(false));
        let (r2, removed2) = (r.clone(), removed.clone());
        let seen = r
            .with(h, move |v| {
                let t = std::thread::spawn(move || {
                    drop(r2.remove(h).unwrap());
                    removed2.store(true, SeqCst);
                });
                std::thread::sleep(std::time::Duration::from_millis(50));
                (**v, removed.load(SeqCst), t)
            })
            .unwrap();
        seen.2.join().unwrap();
        assert_eq!((seen.0, seen.1), (7, false), "the removal waited for the borrow");
        assert!(r.with(h, |_| ()).unwrap_err().to_string().contains("freed"));
        assert!(r.with(0, |_| ()).is_err());
    }

    /// `get_recent` from several threads while handles are inserted and removed (slots retire
    /// after 7 generations): a live handle gives its own object, a freed one is refused, every
    /// object is dropped once.
    #[test]
    fn concurrent_recent_lookups_find_live_handles_only() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        #[derive(Debug)]
        struct Noted(u64);
        impl Drop for Noted {
            fn drop(&mut self) {
                DROPS.fetch_add(1, SeqCst);
            }
        }
        static R: Registry<Noted> = Registry::with_limits(Kind::Request, 7, 1 << 32);
        thread_local! {
            static MINE: Recent<Noted> = const { Recent::new() };
        }
        static LIVE: std::sync::Mutex<Vec<(u64, u64)>> = std::sync::Mutex::new(Vec::new());
        const PER_THREAD: u64 = 20_000;
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                std::thread::spawn(move || {
                    for n in 0..PER_THREAD {
                        let v = t * PER_THREAD + n;
                        let h = R.insert(Arc::new(Noted(v))).unwrap();
                        assert_eq!(R.get_recent(&MINE, h).unwrap().0, v);
                        LIVE.lock().unwrap().push((h, v));
                        // Another thread's handle, looked up twice (remembered), then freed.
                        let other = {
                            let mut l = LIVE.lock().unwrap();
                            let i = (n as usize * 7) % l.len();
                            l.swap_remove(i)
                        };
                        for _ in 0..2 {
                            assert_eq!(R.get_recent(&MINE, other.0).unwrap().0, other.1, "handle {:#x} gave another object", other.0);
                        }
                        assert_eq!(R.remove(other.0).unwrap().0, other.1);
                        assert!(R.get_recent(&MINE, other.0).is_err(), "freed handle {:#x} found", other.0);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        for (h, _) in std::mem::take(&mut *LIVE.lock().unwrap()) {
            drop(R.remove(h).unwrap());
        }
        assert_eq!(DROPS.load(SeqCst), 4 * PER_THREAD as usize);
    }

    /// `boxed` and `unbox`: the object is dropped at once, the next one of the thread lives in
    /// the same memory, at most SPARES allocations are kept, and another thread's are its own.
    #[test]
    fn unboxed_allocations_serve_the_next_box() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        struct Noted(#[allow(dead_code)] u64);
        impl Drop for Noted {
            fn drop(&mut self) {
                DROPS.fetch_add(1, SeqCst);
            }
        }
        thread_local! {
            static KEPT: Spares<Noted> = const { RefCell::new(Vec::new()) };
        }
        let a = boxed(&KEPT, Noted(1));
        let at = &*a as *const Noted as usize;
        unbox(&KEPT, a);
        assert_eq!(DROPS.load(SeqCst), 1, "unbox drops the object");
        let b = boxed(&KEPT, Noted(2));
        assert_eq!((b.0, &*b as *const Noted as usize), (2, at), "the next box is the kept allocation");
        let many: Vec<Box<Noted>> = (0..SPARES as u64 + 10).map(|i| boxed(&KEPT, Noted(i))).collect();
        for m in many {
            unbox(&KEPT, m);
        }
        assert_eq!(KEPT.with(|k| k.borrow().len()), SPARES, "at most SPARES kept");
        std::thread::spawn(|| assert_eq!(KEPT.with(|k| k.borrow().len()), 0)).join().unwrap();
        drop(b);
        assert_eq!(DROPS.load(SeqCst), 2 + SPARES + 10);
    }
}
