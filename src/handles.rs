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
//! for the life of the process. A retired slot costs 16 bytes; the 2^32 slots hold 2^56
//! handles (centuries of allocations), after which `insert` fails instead of reusing one.
//!
//! Registries hand out `Arc`s: an object stays alive while an operation or a pending request
//! uses it, even if its handle is freed meanwhile; the last `Arc` releases it.

use std::mem::MaybeUninit;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

/// The allocation of `a`'s object, the object dropped, when `a` is its only reference (no other
/// `Arc`, no `Weak`): kept for a later object of the same type ([`refill`]), so that an object
/// made and dropped once per operation (a request) need not cost an allocation each. Otherwise
/// `a` is dropped as usual and `None` returned.
pub fn vacate<T>(mut a: Arc<T>) -> Option<Arc<MaybeUninit<T>>> {
    Arc::get_mut(&mut a)?;
    // SAFETY: `a` is the only reference (checked above), and MaybeUninit<T> has T's size and
    // alignment (what Arc::from_raw asks of another type).
    let mut m: Arc<MaybeUninit<T>> = unsafe { Arc::from_raw(Arc::into_raw(a).cast::<MaybeUninit<T>>()) };
    let p = Arc::get_mut(&mut m).expect("the only reference").as_mut_ptr();
    // SAFETY: the object is initialized and is never used as a T again (`m` is a MaybeUninit now:
    // should the object's drop panic, nothing is dropped twice).
    unsafe { std::ptr::drop_in_place(p) };
    Some(m)
}

/// `value` in an allocation that [`vacate`] returned.
pub fn refill<T>(mut spare: Arc<MaybeUninit<T>>, value: T) -> Arc<T> {
    match Arc::get_mut(&mut spare) {
        Some(slot) => {
            slot.write(value);
            // SAFETY: written just above.
            unsafe { spare.assume_init() }
        }
        // Not reachable (vacate returns the only reference); a new allocation is right anyway.
        None => Arc::new(value),
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
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Comm => "communicator",
            Kind::Buffer => "buffer",
            Kind::Request => "request",
            Kind::DArray => "distributed array",
        }
    }

    fn from_tag(tag: u64) -> Option<Kind> {
        match tag {
            0xC0 => Some(Kind::Comm),
            0xB0 => Some(Kind::Buffer),
            0xA0 => Some(Kind::Request),
            0xD0 => Some(Kind::DArray),
            _ => None,
        }
    }
}

struct Slot<T> {
    generation: u64,
    value: Option<Arc<T>>,
}

struct Slots<T> {
    slots: Vec<Slot<T>>,
    free: Vec<usize>,
    live: usize,
}

/// A registry of one kind of object.
pub struct Registry<T> {
    kind: Kind,
    /// The last generation a slot issues before it is retired (GEN_MASK; less in tests).
    last_generation: u64,
    /// The number of slots (2^32; less in tests).
    max_slots: usize,
    inner: Mutex<Slots<T>>,
}

impl<T> Registry<T> {
    pub const fn new(kind: Kind) -> Self {
        Self::with_limits(kind, GEN_MASK, 1 << 32)
    }

    /// A registry whose slots retire after `last_generation` objects and which has `max_slots`
    /// slots: tests reach both limits quickly through the code that production uses.
    const fn with_limits(kind: Kind, last_generation: u64, max_slots: usize) -> Self {
        Registry { kind, last_generation, max_slots, inner: Mutex::new(Slots { slots: Vec::new(), free: Vec::new(), live: 0 }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots<T>> {
        // A panic while holding the lock cannot leave the slab inconsistent (every mutation is
        // a single assignment), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `value` and returns its new handle (never 0, never one issued before).
    pub fn insert(&self, value: Arc<T>) -> Result<u64> {
        let mut s = self.lock();
        let index = match s.free.pop() {
            Some(i) => i,
            None if s.slots.len() < self.max_slots => {
                s.slots.push(Slot { generation: 0, value: None });
                s.slots.len() - 1
            }
            None => {
                return Err(Error::Internal(format!(
                    "every {} handle has been issued ({} slots of {} generations): the process has created too many objects",
                    self.kind.name(),
                    self.max_slots,
                    self.last_generation
                )));
            }
        };
        s.live += 1;
        let slot = &mut s.slots[index];
        // Free slots have a generation left (see `release`): 1..=last_generation, never 0.
        slot.generation += 1;
        slot.value = Some(value);
        Ok(((self.kind as u64) << 56) | (slot.generation << 32) | index as u64)
    }

    /// Returns slot `index`, just emptied, to the free list, unless its last generation is
    /// used up: then it is retired, and no handle of it is ever issued again.
    fn release(&self, s: &mut Slots<T>, index: usize) {
        if s.slots[index].generation < self.last_generation {
            s.free.push(index);
        }
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
    pub fn get(&self, h: u64) -> Result<Arc<T>> {
        // A handle of this kind found in its slot: no error value built on the way.
        if h >> 56 == self.kind as u64 {
            let (index, generation) = ((h & 0xFFFF_FFFF) as usize, (h >> 32) & GEN_MASK);
            if let Some(Slot { generation: g, value: Some(v) }) = self.lock().slots.get(index) {
                if *g == generation {
                    return Ok(v.clone());
                }
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

    /// Unregisters `h` and returns its object; later lookups of `h` fail.
    pub fn remove(&self, h: u64) -> Result<Arc<T>> {
        let (index, generation) = self.decode(h)?;
        let mut s = self.lock();
        let taken = match s.slots.get_mut(index) {
            Some(slot) if slot.generation == generation && slot.value.is_some() => slot.value.take(),
            _ => None,
        };
        match taken {
            Some(v) => {
                self.release(&mut s, index);
                s.live -= 1;
                Ok(v)
            }
            None => Err(self.stale(h)),
        }
    }

    /// Unregisters every object (gpuwire_finalize) and returns them, oldest slot first.
    pub fn drain(&self) -> Vec<Arc<T>> {
        let mut s = self.lock();
        let mut out = Vec::new();
        for i in 0..s.slots.len() {
            if let Some(v) = s.slots[i].value.take() {
                out.push(v);
                self.release(&mut s, i);
            }
        }
        s.live = 0;
        out
    }

    /// Number of live handles.
    pub fn live(&self) -> usize {
        self.lock().live
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
}
