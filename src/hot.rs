//! The words that every call reads, of the process and of the calling thread, each set packed
//! in one cache line (issue 19).
//!
//! A real NCCL launch (the driver, the kernel's arguments), and any long wait, leaves the CPU's
//! caches full of other data: each line a call reads after it comes from further away, about
//! 3 ns or more (docs/PERFORMANCE.md, "24th session" and "25th session"; `bash
//! scripts/null-device.sh cold` counts them). Statics of their own modules, these words lay in as
//! many lines as modules, wherever the linker put them; here the process's lie in one 64-byte
//! line ([`PROCESS`]) and the thread's in one more ([`with_thread`]).
//!
//! Each word belongs to the module its doc names, which alone writes it and reads it through
//! its own functions (`runtime::ensure_ready`, `op::tracing`, `mpisys::any_source`, ...): this
//! module only lays them out, and imports nothing (no circle). The process's words are written
//! once (at init, at their first read) or where they change, rarely: a write takes the line
//! from every other core, and every call on every thread reads it.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU8, AtomicU64, Ordering};

/// The process's per-call words (see the module doc). At most 64 bytes, aligned to a cache line.
#[repr(C, align(64))]
pub(crate) struct Process {
    /// `runtime`: its state (UNINIT, READY, FINALIZED).
    pub(crate) state: AtomicU8,
    /// `runtime`: MPI_Finalize has begun (set by MPI itself).
    pub(crate) mpi_gone: AtomicBool,
    /// `runtime`: only MPI's main thread may call gpuwire (MPI_THREAD_FUNNELED or SINGLE).
    pub(crate) main_only: AtomicBool,
    /// `op::tracing`: GPUWIRE_TRACE, 0 (off) or 1 (on), [`UNREAD`] until read ([`read_once`]).
    pub(crate) tracing: AtomicI32,
    /// `engine::host_sync`: GPUWIRE_HOST_SYNC, as `tracing`.
    pub(crate) host_sync: AtomicI32,
    /// `device`: whether allocations that engine threads dropped wait to be freed.
    pub(crate) device_dead: AtomicBool,
    /// `runtime`: MPI_TAG_UB (set by `runtime::init`).
    pub(crate) tag_ub: AtomicI32,
    /// `mpisys`: this MPI's MPI_PROC_NULL, MPI_ANY_SOURCE and MPI_ANY_TAG ([`UNREAD`] until read).
    pub(crate) mpi_constants: [AtomicI32; 3],
    /// `device`: the driver's cuCtxGetCurrent (null until resolved).
    pub(crate) ctx_get_current: AtomicPtr<()>,
    /// `pin`: how many communicator and buffer handles have been freed (`pin::retire`); a
    /// thread's remembered lookups are valid while it is unchanged.
    pub(crate) frees: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Process>() <= 64 && std::mem::align_of::<Process>() == 64);

pub(crate) static PROCESS: Process = Process {
    state: AtomicU8::new(0),
    mpi_gone: AtomicBool::new(false),
    main_only: AtomicBool::new(false),
    tracing: AtomicI32::new(UNREAD),
    host_sync: AtomicI32::new(UNREAD),
    device_dead: AtomicBool::new(false),
    tag_ub: AtomicI32::new(0),
    mpi_constants: [const { AtomicI32::new(UNREAD) }; 3],
    ctx_get_current: AtomicPtr::new(std::ptr::null_mut()),
    frees: AtomicU64::new(0),
};

/// A word of [`PROCESS`] not yet read (no MPI constant and no flag has this value).
pub(crate) const UNREAD: i32 = i32::MIN;

/// The value kept in `word`: `read()` at the first call, kept for the process (two threads may
/// both read it at first; they store the same value).
#[inline]
pub(crate) fn read_once(word: &AtomicI32, read: impl FnOnce() -> i32) -> i32 {
    match word.load(Ordering::Relaxed) {
        UNREAD => {
            let v = read();
            word.store(v, Ordering::Relaxed);
            v
        }
        v => v,
    }
}

/// The calling thread's per-call words (see the module doc); no destructor, so reachable
/// until the thread's end (after its other thread-locals are destroyed too).
#[repr(C, align(64))]
pub(crate) struct Thread {
    /// `comm`: this thread's number for `Communicator::busy` (0 until its first use).
    pub(crate) comm_id: Cell<u64>,
    /// `backend::turn`: the thread's turn token, with the in-group bit (0 until its first use).
    pub(crate) turn_token: Cell<usize>,
    /// `pin`: this thread's pin record (null until claimed, and again once given back).
    pub(crate) pin_record: Cell<*const ()>,
    /// `pin`: the objects that this thread's last pinned lookups found for the handles of its
    /// record (null: none), and `Process::frees` then (`u64::MAX`: remembers nothing).
    pub(crate) pinned_objects: [Cell<*const ()>; 3],
    pub(crate) pinned_frees: Cell<u64>,
    /// `group`: whether this thread is inside a group.
    pub(crate) group_open: Cell<bool>,
    /// `pin`: what a call noted of its pin's handles (`Pin::set_checked`, 0: nothing), kept while
    /// the thread's pins name the same handles in the same places.
    pub(crate) checked: Cell<u8>,
}

const _: () = assert!(std::mem::size_of::<Thread>() == 64);

thread_local! {
    static THREAD: Thread = const {
        Thread {
            comm_id: Cell::new(0),
            turn_token: Cell::new(0),
            pin_record: Cell::new(std::ptr::null()),
            pinned_objects: [const { Cell::new(std::ptr::null()) }; 3],
            pinned_frees: Cell::new(u64::MAX),
            group_open: Cell::new(false),
            checked: Cell::new(0),
        }
    };
}

/// `f` of the calling thread's words.
#[inline(always)]
pub(crate) fn with_thread<R>(f: impl FnOnce(&Thread) -> R) -> R {
    THREAD.with(f)
}
