//! Page-locked staging memory for the stream-ordered operations of the MPI paths
//! (`crate::backend::ordered`), reused across calls and communicators.
//!
//! An operation takes blocks at its call and hands each a [`Ticket`]; a block is free again once
//! its ticket says the operation has finished with it: the host side is done (`finish`) and the
//! stream has passed the copies that read or write it (the ticket's event). Blocks are taken and
//! freed only on the calling threads, never on a progress-engine thread (which makes no CUDA call).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::{CudaAlloc, Event};
use crate::error::Result;
use crate::types::Space;

/// When a staging block may be reused.
#[derive(Debug, Default)]
pub struct Ticket {
    finished: AtomicBool,
    event: Mutex<Option<Event>>,
}

// SAFETY: the event is a CUDA handle, usable from any thread with its context current.
unsafe impl Sync for Ticket {}

impl Ticket {
    /// The host side is done with the blocks (MPI no longer reads or writes them).
    pub fn finish(&self) {
        self.finished.store(true, Ordering::Release);
    }
    /// The last stream work that uses the blocks.
    pub fn set_event(&self, ev: Event) {
        *self.event.lock().unwrap_or_else(|p| p.into_inner()) = Some(ev);
    }
    /// Whether the blocks are free (the caller's context current).
    fn free(&self) -> bool {
        self.finished.load(Ordering::Acquire) && self.event.lock().unwrap_or_else(|p| p.into_inner()).as_ref().is_none_or(|e| e.query().unwrap_or(false))
    }
}

struct Block {
    alloc: CudaAlloc,
    ticket: Option<Arc<Ticket>>,
}

static POOL: Mutex<Vec<Block>> = Mutex::new(Vec::new());

/// A page-locked block of at least `bytes` on `device`'s context (portable), owned by `ticket`
/// until it is free: the smallest free block that fits, else a new one (a power of two). Blocks
/// are never freed while the program runs: cuMemFreeHost synchronizes the device, and a stream
/// may be waiting for the host side of an operation that this very thread is to issue next (seen
/// on the H200 as a hang). The pool grows to what the program has in flight at once. The
/// caller's thread, the device's context current.
pub fn take(device: i32, bytes: usize, ticket: &Arc<Ticket>) -> Result<usize> {
    let bytes = bytes.max(1);
    let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
    let best = pool
        .iter()
        .enumerate()
        .filter(|(_, b)| b.alloc.device == device && b.alloc.bytes >= bytes && b.ticket.as_ref().is_none_or(|t| t.free()))
        .min_by_key(|(_, b)| b.alloc.bytes)
        .map(|(i, _)| i);
    if let Some(i) = best {
        pool[i].ticket = Some(ticket.clone());
        return Ok(pool[i].alloc.ptr);
    }
    let want = bytes.max(4096).checked_next_power_of_two().unwrap_or(bytes);
    let alloc = CudaAlloc::new(Space::GPUWIRE_SPACE_PINNED, device, want)?;
    let ptr = alloc.ptr;
    pool.push(Block { alloc, ticket: Some(ticket.clone()) });
    Ok(ptr)
}

/// Frees every block no operation uses (gpuwire_finalize; blocks still in use are kept).
pub fn release_free() {
    POOL.lock().unwrap_or_else(|p| p.into_inner()).retain(|b| !b.ticket.as_ref().is_none_or(|t| t.free()));
}
