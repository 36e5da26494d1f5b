//! Progress of the receives that only gpuwire moves on (the IPC backend's pending receives, the
//! MPI paths' deferred receives of `backend::p2p`), without knowing a backend.
//!
//! Each backend declares a [`Source`]; the backend registry hands the list over once
//! (`backend::register_progress`, at communicator creation). Every gpuwire wait and test
//! (`Communicator::wait_mpi`, `p2p::wait_until`, the IPC waits) and the IPC progress thread run
//! [`progress_all`]; gpuwire's blocking MPI calls ask [`pending`] whether they must wait with a
//! test loop that progresses them (`Communicator::nb_p2p`).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::types::ThreadLevel;

/// What one backend has to progress.
pub struct Source {
    /// Whether anything of it may be pending (a hint, read without a lock).
    pub pending: fn() -> bool,
    /// Progresses what can be progressed now; never blocks.
    pub progress: fn(),
    /// A receive was posted (of any source) that must progress also while this process blocks
    /// in a plain MPI call: starts the source's progress thread where MPI allows it, or nothing.
    pub posted: fn(),
}

static SOURCES: OnceLock<&'static [&'static Source]> = OnceLock::new();

/// Registers the process's sources, in the order `progress_all` runs them (the first call
/// counts; later ones pass the same list).
pub fn register(sources: &'static [&'static Source]) {
    let _ = SOURCES.set(sources);
}

fn sources() -> &'static [&'static Source] {
    SOURCES.get().copied().unwrap_or(&[])
}

/// Whether any receive of any source may be pending in this process.
pub fn pending() -> bool {
    sources().iter().any(|s| (s.pending)())
}

/// Passes of [`progress_all`] made by gpuwire's waits and tests (not by a progress thread).
static PASSES: AtomicU64 = AtomicU64::new(0);

/// Progresses every source's pending receives that no other thread is progressing (each is
/// tried, never waited for).
pub fn progress_all() {
    PASSES.fetch_add(1, Ordering::Relaxed);
    progress_sources();
}

/// How many passes gpuwire's waits and tests have made: a progress thread that sees the count
/// move knows that a wait is progressing every source, and need not.
pub fn passes() -> u64 {
    PASSES.load(Ordering::Relaxed)
}

/// [`progress_all`] of a progress thread (not counted in [`passes`]).
pub fn progress_sources() {
    for s in sources() {
        (s.progress)();
    }
}

/// A receive was posted that a progress thread should match while this process blocks in MPI.
pub fn posted() {
    for s in sources() {
        (s.posted)();
    }
}

/// Whether the progress thread may be used: MPI provides MPI_THREAD_MULTIPLE (it calls MPI_Test
/// concurrently with the program's MPI calls), and GPUWIRE_IPC_PROGRESS_THREAD is not 0.
pub fn thread_allowed() -> bool {
    static ENV_OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let off = *ENV_OFF.get_or_init(|| std::env::var("GPUWIRE_IPC_PROGRESS_THREAD").ok().and_then(|v| crate::config::parse_bool(&v)) == Some(false));
    !off && crate::runtime::ensure_ready().is_ok_and(|i| i.thread_level == ThreadLevel::GPUWIRE_THREAD_MULTIPLE)
}

/// Whether this process may hold IPC receives that only gpuwire's own waits progress: it sees a
/// GPU (so it may join an IPC communicator) and has no progress thread (`thread_allowed`).
/// Communicators agree on it at creation (any rank) and then run every MPI collective in its
/// nonblocking form with a test loop that progresses receives (`Communicator::nb_collectives`):
/// the form must be the same on every rank, because MPI never matches a blocking collective
/// with a nonblocking one.
pub fn collectives_must_progress() -> bool {
    crate::device::cuda_with_devices().is_ok() && !thread_allowed()
}
