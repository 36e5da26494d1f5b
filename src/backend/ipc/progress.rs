//! Progress of the IPC backend's pending receives: the process-wide registry of irecvs (`RECVS`,
//! registered with `crate::progress` as `PROGRESS`, whose progress thread polls them while any
//! is pending).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, TryLockError, Weak};

use super::p2p::RecvOp;
use super::shm::lock;
use crate::progress;

/// Pending irecvs of every IPC communicator of the process.
static RECVS: Mutex<Vec<Weak<Mutex<RecvOp>>>> = Mutex::new(Vec::new());
/// Entries of RECVS (a hint read without the lock).
static PENDING: AtomicUsize = AtomicUsize::new(0);

/// Whether IPC receives may be pending in this process (the IPC part of `progress::pending`).
fn recvs_pending() -> bool {
    PENDING.load(Ordering::Acquire) > 0
}

/// The IPC receives' part of `progress`: every wait progresses every source's receives, and the
/// progress thread polls them every 20 µs while any is pending (urgent: a peer's send may wait
/// for this process to copy its data).
pub static PROGRESS: progress::Source = progress::Source { pending: recvs_pending, progress: progress_recvs, urgent: recvs_pending };

pub(super) fn register(op: &Arc<Mutex<RecvOp>>) {
    {
        let mut g = lock(&RECVS);
        g.push(Arc::downgrade(op));
        PENDING.store(g.len(), Ordering::Release);
    }
    progress::posted();
}

/// The registered receives that still need progress (pruning the others); under RECVS.
fn live_ops(g: &mut Vec<Weak<Mutex<RecvOp>>>) -> Vec<Arc<Mutex<RecvOp>>> {
    let mut out = Vec::new();
    g.retain(|w| {
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
    PENDING.store(g.len(), Ordering::Release);
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
