//! Handle registries: the integers that C, Fortran and other FFIs hold for gpuwire's objects.
//!
//! A handle is a 64-bit integer: bits 56..64 name the kind of object (communicator, buffer,
//! request, distributed array), bits 32..56 a generation, bits 0..32 a slot. Freeing an object
//! bumps its slot's generation, so a stale copy of the handle is recognised as freed instead of
//! reaching freed or reused memory; a handle of another kind, a garbage integer and 0 (the NULL
//! handle) are recognised too. No lookup ever dereferences caller-provided memory.
//!
//! Registries hand out `Arc`s: an object stays alive while an operation or a pending request
//! uses it, even if its handle is freed meanwhile; the last `Arc` releases it.

use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

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
    inner: Mutex<Slots<T>>,
}

impl<T> Registry<T> {
    pub const fn new(kind: Kind) -> Self {
        Registry { kind, inner: Mutex::new(Slots { slots: Vec::new(), free: Vec::new(), live: 0 }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots<T>> {
        // A panic while holding the lock cannot leave the slab inconsistent (every mutation is
        // a single assignment), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `value` and returns its new handle (never 0).
    pub fn insert(&self, value: Arc<T>) -> u64 {
        let mut s = self.lock();
        s.live += 1;
        let index = match s.free.pop() {
            Some(i) => i,
            None => {
                s.slots.push(Slot { generation: 0, value: None });
                s.slots.len() - 1
            }
        };
        let slot = &mut s.slots[index];
        slot.generation = (slot.generation % GEN_MASK) + 1; // 1..=GEN_MASK, never 0
        slot.value = Some(value);
        ((self.kind as u64) << 56) | (slot.generation << 32) | index as u64
    }

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
        let (index, generation) = self.decode(h)?;
        let s = self.lock();
        match s.slots.get(index) {
            Some(Slot { generation: g, value: Some(v) }) if *g == generation => Ok(v.clone()),
            _ => Err(self.stale(h)),
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
                s.free.push(index);
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
                s.free.push(i);
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
        let h = r.insert(Arc::new(5));
        assert_eq!(*r.get(h).unwrap(), 5);
        let c = other.insert(Arc::new(1));
        assert!(r.get(c).unwrap_err().to_string().contains("communicator handle"));
        assert!(r.get(0).unwrap_err().to_string().contains("NULL"));
        assert!(r.get(0x1234).is_err());
        r.remove(h).unwrap();
        assert!(r.get(h).unwrap_err().to_string().contains("freed"));
        assert!(r.remove(h).is_err());
        // The slot is reused with a new generation: the old handle stays invalid.
        let h2 = r.insert(Arc::new(6));
        assert_ne!(h, h2);
        assert!(r.get(h).is_err());
        assert_eq!(*r.get(h2).unwrap(), 6);
        assert_eq!(r.live(), 1);
        assert_eq!(r.drain().len(), 1);
        assert!(r.get(h2).is_err());
    }
}
