//! Progress of the IPC backend's pending receives: the process-wide registry of irecvs (`RECVS`,
//! registered with `crate::progress` as `PROGRESS`), the progress thread that runs while any is
//! pending, and `wait_request`, an MPI wait that progresses them.

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, TryLockError, Weak};
use std::time::{Duration, Instant};

use super::p2p::RecvOp;
use super::shm::lock;
use crate::error::Result;
use crate::mpisys::{self, sys};
use crate::progress::{self, progress_all};

/// Pending irecvs of every IPC communicator of the process.
struct Recvs {
    ops: Vec<Weak<Mutex<RecvOp>>>,
    /// A progress thread is running (it clears this, under the lock, as it exits).
    running: bool,
    /// gpuwire_finalize began: no new thread.
    shutdown: bool,
    thread: Option<std::thread::JoinHandle<()>>,
}

static RECVS: Mutex<Recvs> = Mutex::new(Recvs { ops: Vec::new(), running: false, shutdown: false, thread: None });
/// Entries of RECVS (a hint read without the lock).
static PENDING: AtomicUsize = AtomicUsize::new(0);

/// Whether IPC receives may be pending in this process (the IPC part of `progress::pending`).
fn recvs_pending() -> bool {
    PENDING.load(Ordering::Acquire) > 0
}

/// The IPC receives' part of `progress`: every IPC wait progresses every source's receives, and
/// the progress thread, started for IPC receives or deferred receives of the MPI paths (`p2p`),
/// runs while any is pending.
pub static PROGRESS: progress::Source = progress::Source { pending: recvs_pending, progress: progress_recvs, posted: deferred_receive_posted };

pub(super) fn register(op: &Arc<Mutex<RecvOp>>) {
    let mut g = lock(&RECVS);
    g.ops.push(Arc::downgrade(op));
    PENDING.store(g.ops.len(), Ordering::Release);
    start_thread(&mut g);
}

/// A receive was posted (a deferred receive of the MPI paths, `p2p`): the progress thread (where
/// MPI allows it) matches it also while this process blocks in a plain MPI call or an MPI
/// collective, as a posted MPI_Irecv would be matched there.
fn deferred_receive_posted() {
    start_thread(&mut lock(&RECVS));
}

/// Starts the progress thread unless it runs, gpuwire is finalizing, or MPI does not allow it;
/// under RECVS.
fn start_thread(g: &mut Recvs) {
    if !g.running && !g.shutdown && progress::thread_allowed() {
        if let Some(old) = g.thread.take() {
            // It cleared `running` under this lock and returns without taking it again.
            let _ = old.join();
        }
        match std::thread::Builder::new().name("gpuwire-ipc".into()).spawn(progress_thread) {
            Ok(h) => {
                g.thread = Some(h);
                g.running = true;
            }
            Err(e) => crate::trace!("ipc: cannot start the progress thread ({e}); receives progress in gpuwire calls only"),
        }
    }
}

/// The registered receives that still need progress (pruning the others); under RECVS.
fn live_ops(g: &mut Recvs) -> Vec<Arc<Mutex<RecvOp>>> {
    let mut out = Vec::new();
    g.ops.retain(|w| {
        let Some(a) = w.upgrade() else { return false };
        let keep = match a.try_lock() {
            Ok(op) => op.wants_progress(),
            Err(TryLockError::WouldBlock) => true,
            Err(TryLockError::Poisoned(p)) => p.into_inner().wants_progress(),
        };
        if keep {
            out.push(a);
        }
        keep
    });
    PENDING.store(g.ops.len(), Ordering::Release);
    out
}

/// Progresses every pending IPC irecv of the process that no other thread is progressing (each
/// is tried, never waited for, and never blocks on the mapping lock).
fn progress_recvs() {
    if PENDING.load(Ordering::Acquire) == 0 {
        return;
    }
    let ops = live_ops(&mut lock(&RECVS));
    poll_ops(&ops);
}

fn poll_ops(ops: &[Arc<Mutex<RecvOp>>]) {
    for a in ops {
        if let Ok(mut op) = a.try_lock() {
            if op.wants_progress() {
                op.poll_keep(true);
            }
        }
    }
}

/// How long the progress thread waits, with nothing pending, before it ends.
const IDLE_GRACE: Duration = Duration::from_millis(50);
/// How often the progress thread polls while IPC receives are pending.
const POLL: Duration = Duration::from_micros(20);
/// How often it looks while nothing is pending (before it ends at IDLE_GRACE).
const IDLE_POLL: Duration = Duration::from_micros(200);
/// How long gpuwire's own waits and tests must have made no progress pass
/// (`progress::passes`) before the thread matches deferred receives of the MPI paths itself.
const QUIET: Duration = Duration::from_millis(1);
/// The longest the thread sleeps between looks while gpuwire's waits progress (`BACKOFF_MAX`
/// plus QUIET bounds how late it takes over when the process then blocks in a plain MPI call).
const BACKOFF_MAX: Duration = Duration::from_millis(1);

/// The progress thread: runs while IPC receives or deferred receives of the MPI paths (`p2p`)
/// are pending (and gpuwire is not finalized). Started by `register` and
/// `deferred_receive_posted`, joined by `shutdown`.
///
/// - IPC receives pending: every source is polled every 20 µs (a peer may be blocked in a send
///   to this process until it copies the data, and a stream may wait for the receive).
/// - Only deferred receives of the MPI paths pending: they are matched by the thread once
///   gpuwire's own waits and tests have made no progress pass for 100 µs (the process blocks in
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
        let mut seen = progress::passes();
        let mut still_since = Instant::now();
        let mut backoff = POLL;
        loop {
            let ops = {
                let mut g = lock(&RECVS);
                if g.shutdown || crate::runtime::ensure_ready().is_err() {
                    g.running = false;
                    return;
                }
                let ops = live_ops(&mut g);
                if ops.is_empty() && !progress::pending() {
                    let since = *idle.get_or_insert_with(Instant::now);
                    if since.elapsed() >= IDLE_GRACE {
                        g.running = false;
                        return;
                    }
                } else {
                    idle = None;
                }
                ops
            };
            let now = Instant::now();
            let passes = progress::passes();
            if passes != seen {
                seen = passes;
                still_since = now;
                // A wait is progressing: look less and less often (each look preempts a rank
                // that may share this core).
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
            let quiet_for = now.duration_since(still_since);
            let nap = if !ops.is_empty() || (idle.is_none() && quiet_for >= QUIET) {
                // Every source's receives: the MPI paths' deferred ones (`p2p`) and these.
                progress::progress_sources();
                backoff = POLL;
                POLL
            } else if idle.is_some() {
                IDLE_POLL
            } else {
                backoff.max(QUIET - quiet_for)
            };
            drop(ops);
            std::thread::sleep(nap);
        }
    });
    if r.is_err() {
        lock(&RECVS).running = false;
        crate::trace!("ipc: the progress thread panicked; receives progress in gpuwire calls only");
    }
}

/// At gpuwire_finalize, before any object is released: stops and joins the progress thread.
pub fn shutdown() {
    let h = {
        let mut g = lock(&RECVS);
        g.shutdown = true;
        g.thread.take()
    };
    if let Some(h) = h {
        let _ = h.join();
    }
}

/// Waits for an MPI request, progressing the process's pending IPC receives meanwhile (so that
/// gpuwire's own blocking MPI calls never hang on a peer that waits for this process to copy
/// its send).
pub fn wait_request(req: &mut sys::MPI_Request, what: &str) -> Result<()> {
    let mut spins = 0u32;
    loop {
        let mut flag: c_int = 0;
        let mpi = crate::runtime::mpi_lock();
        // SAFETY: an active request of the caller's, or MPI_REQUEST_NULL.
        mpisys::check(unsafe { sys::MPI_Test(req, &mut flag, mpisys::status_ignore()) }, what)?;
        drop(mpi);
        if flag != 0 {
            return Ok(());
        }
        progress_all();
        spins += 1;
        if spins > 20_000 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}
