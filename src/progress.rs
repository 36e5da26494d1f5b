//! Progress of the receives that only gpuwire moves on (the IPC backend's pending receives, the
//! MPI paths' deferred receives of `backend::p2p`), without knowing a backend.
//!
//! Each backend declares a [`Source`]; the backend registry hands the list over once
//! (`backend::register_progress`, at communicator creation). Every gpuwire wait and test
//! (`Communicator::wait_mpi`, `p2p::wait_until`, the IPC waits) runs [`progress_all`]; gpuwire's
//! blocking MPI calls ask [`pending`] whether they must wait with a test loop that progresses
//! them (`Communicator::nb_p2p`). Under MPI_THREAD_MULTIPLE the progress thread
//! ([`progress_thread`]) also progresses them while the program is not inside a gpuwire wait.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::types::ThreadLevel;

/// What one backend has to progress.
pub struct Source {
    /// Whether anything of it may be pending (a hint, read without a lock).
    pub pending: fn() -> bool,
    /// Progresses what can be progressed now; never blocks.
    pub progress: fn(),
    /// Whether what is pending must be polled often (every 20 µs) even while gpuwire's waits
    /// run: a peer may be blocked until this process copies its data, and a stream may wait for
    /// it (the IPC backend's receives). Otherwise the thread leaves it to the waits.
    pub urgent: fn() -> bool,
}

static SOURCES: OnceLock<&'static [&'static Source]> = OnceLock::new();

/// What every pass of gpuwire's own waits and tests runs after the sources (never the progress
/// thread): the release of operations whose requests were freed in flight
/// (`request::reap_detached`), which nothing waits for and which may make CUDA calls.
static AFTER_PASS: OnceLock<fn()> = OnceLock::new();

/// Registers the process's sources, in the order `progress_all` runs them, and what runs after
/// them (the first call counts; later ones pass the same).
pub fn register(sources: &'static [&'static Source], after_pass: fn()) {
    let _ = SOURCES.set(sources);
    let _ = AFTER_PASS.set(after_pass);
}

fn sources() -> &'static [&'static Source] {
    SOURCES.get().copied().unwrap_or(&[])
}

/// Whether any receive of any source may be pending in this process.
pub fn pending() -> bool {
    sources().iter().any(|s| (s.pending)())
}

/// Passes of gpuwire's waits and tests ([`count_pass`]; not of a progress thread).
static PASSES: AtomicU64 = AtomicU64::new(0);

/// Progresses every source's pending receives that no other thread is progressing (each is
/// tried, never waited for).
pub fn progress_all() {
    count_pass();
    progress_sources();
    if let Some(f) = AFTER_PASS.get() {
        f();
    }
}

/// Counts a pass of gpuwire's waits and tests: [`progress_all`]'s, and a wait's or test's own
/// progress of a source (a receive's step matches the deferred receives itself, and a wait whose
/// first step completes makes no other pass).
pub fn count_pass() {
    // A load and a store, not an atomic add (a locked instruction per pass): only whether the
    // count moves matters, so an increment lost between two threads' passes loses nothing.
    PASSES.store(PASSES.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
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

/// A receive was posted that the progress thread should match while this process blocks in
/// MPI (or computes): starts the thread where MPI allows it and it is not running.
pub fn posted() {
    let mut t = lock(&THREAD);
    if t.running || t.shutdown || !thread_allowed() {
        return;
    }
    if let Some(old) = t.handle.take() {
        // It cleared `running` under this lock and returns without taking it again.
        let _ = old.join();
    }
    match std::thread::Builder::new().name("gpuwire-progress".into()).spawn(progress_thread) {
        Ok(h) => {
            t.handle = Some(h);
            t.running = true;
        }
        Err(e) => crate::trace!("progress: cannot start the progress thread ({e}); receives progress in gpuwire calls only"),
    }
}

/// At gpuwire_finalize, before any object is released: stops and joins the progress thread.
pub fn shutdown() {
    let h = {
        let mut t = lock(&THREAD);
        t.shutdown = true;
        t.handle.take()
    };
    if let Some(h) = h {
        let _ = h.join();
    }
}

/// The progress thread's state.
struct Thread {
    /// It runs (it clears this, under the lock, as it exits).
    running: bool,
    /// gpuwire_finalize began: no new thread.
    shutdown: bool,
    handle: Option<std::thread::JoinHandle<()>>,
}

static THREAD: Mutex<Thread> = Mutex::new(Thread { running: false, shutdown: false, handle: None });

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long the progress thread waits, with nothing pending, before it ends.
const IDLE_GRACE: Duration = Duration::from_millis(50);
/// How often the progress thread polls while an urgent source has something pending.
const POLL: Duration = Duration::from_micros(20);
/// How often it looks while nothing is pending (before it ends at IDLE_GRACE).
const IDLE_POLL: Duration = Duration::from_micros(200);
/// How long gpuwire's own waits and tests must have made no progress pass ([`passes`]) before
/// the thread progresses the sources that are not urgent itself.
const QUIET: Duration = Duration::from_millis(1);
/// The longest the thread sleeps between looks while gpuwire's waits progress (BACKOFF_MAX plus
/// QUIET bounds how late it takes over when the process then blocks in a plain MPI call).
const BACKOFF_MAX: Duration = Duration::from_millis(1);
/// The longest the thread sleeps after a long pass ([`progress_thread`]).
const LONG_NAP: Duration = Duration::from_millis(20);

/// The progress thread: runs while any source has something pending (and gpuwire is not
/// finalized). Started by [`posted`], joined by [`shutdown`].
///
/// - An urgent source pending (IPC receives): every source is polled every 20 µs.
/// - Otherwise (deferred receives of the MPI paths): they are progressed by the thread once
///   gpuwire's own waits and tests have made no progress pass for 1 ms (the process blocks in
///   a plain MPI call, or computes: as a posted MPI_Irecv would be matched there), then every
///   20 µs. While a gpuwire wait progresses them the thread stays out of the way, and looks
///   less and less often (every 20 µs doubling up to 1 ms): its passes and its wake-ups, each
///   preempting a rank that shares the core, cost up to 1 µs per message in the windowed
///   message-rate benchmark on 2 cores.
/// - Nothing pending: it looks every 200 µs, and ends after IDLE_GRACE.
fn progress_thread() {
    let r = std::panic::catch_unwind(|| {
        // Idle since: the thread stays IDLE_GRACE after the last pending receive, so that a
        // loop that leaves a receive pending in every iteration does not start a thread each time.
        let mut idle: Option<Instant> = None;
        // The waits' pass count when last seen to move, and when.
        let mut seen = passes();
        let mut still_since = Instant::now();
        let mut backoff = POLL;
        loop {
            {
                let mut t = lock(&THREAD);
                if t.shutdown || crate::runtime::ensure_ready().is_err() {
                    t.running = false;
                    return;
                }
                if pending() {
                    idle = None;
                } else {
                    let since = *idle.get_or_insert_with(Instant::now);
                    if since.elapsed() >= IDLE_GRACE {
                        t.running = false;
                        return;
                    }
                }
            }
            let now = Instant::now();
            let n = passes();
            if n != seen {
                seen = n;
                still_since = now;
                // A wait is progressing: look less and less often.
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
            let quiet_for = now.duration_since(still_since);
            let urgent = sources().iter().any(|s| (s.urgent)());
            let nap = if urgent || (idle.is_none() && quiet_for >= QUIET) {
                let t = Instant::now();
                progress_sources();
                backoff = POLL;
                // A long pass (thousands of deferred receives) holds their queue's lock, which
                // each new receive takes: the thread holds it at most a fifth of the time (it
                // held it almost always, and posting 16000 receives took 24 s; a helper's hunt),
                // up to LONG_NAP, and not while an urgent source (an IPC receive) is pending.
                if urgent { POLL } else { (t.elapsed() * 4).clamp(POLL, LONG_NAP) }
            } else if idle.is_some() {
                IDLE_POLL
            } else {
                backoff.max(QUIET - quiet_for)
            };
            std::thread::sleep(nap);
        }
    });
    if r.is_err() {
        lock(&THREAD).running = false;
        crate::trace!("progress: the progress thread panicked; receives progress in gpuwire calls only");
    }
}

/// Whether the progress thread may be used: MPI provides MPI_THREAD_MULTIPLE (it calls MPI_Test
/// concurrently with the program's MPI calls), and GPUWIRE_PROGRESS_THREAD is not 0 (or, when it
/// is not set, its former name GPUWIRE_IPC_PROGRESS_THREAD, from when the thread served IPC only).
pub fn thread_allowed() -> bool {
    static ENV_OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let off = *ENV_OFF.get_or_init(|| {
        // The old name is read where the new one is unset (or empty, as every variable: an empty
        // new name hid the old name's 0; a helper's hunt).
        let v = crate::config::env("GPUWIRE_PROGRESS_THREAD").or_else(|| crate::config::env("GPUWIRE_IPC_PROGRESS_THREAD"));
        v.and_then(|v| crate::config::parse_bool(&v)) == Some(false)
    });
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
