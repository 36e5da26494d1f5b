//! Deadlines of stream-ordered sends. A blocking send on a stream-ordered IPC communicator
//! returns once its header is out and leaves its stream waiting for the receiver's copy (the
//! `done` word of its completion cell, `p2p::SendOp::order_after`). With a timeout configured,
//! that wait is watched here: should the word not have come by the call's deadline (a receiver
//! that never posts its receive), the watch breaks the communicator on this rank with
//! GPUWIRE_ERROR_TIMEOUT as its asynchronous error, which the next call or
//! `gpuwire_comm_get_async_error` reports, then ends the wait as `gpuwire_comm_abort` would —
//! this rank's `aborted` word set, every stream wait on the segment released (the peers' calls
//! see the abort: COMM_BROKEN). In that order: a call whose stream wait returns finds the
//! communicator broken.
//!
//! One thread for the process, running while a watch is pending (it touches only words of the
//! shared segments: no MPI, no CUDA), polling every [`POLL`]. A communicator's watches are
//! forgotten before its segment is unregistered (`IpcState::destroy`).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::shm::{Seg, lock};
use crate::comm::Broken;
use crate::engine::Engine;
use crate::error::Error;

/// How often pending watches are read.
const POLL: Duration = Duration::from_millis(1);

struct Watch {
    /// The segment (of an `IpcState` that forgets its watches before it unmaps it: [`forget`]).
    seg: Seg,
    me: usize,
    cell: usize,
    generation: u32,
    deadline: Instant,
    broken: Arc<Broken>,
    engine: Arc<Engine>,
    what: &'static str,
}

struct Watches {
    list: Vec<Watch>,
    running: bool,
}

static WATCHES: Mutex<Watches> = Mutex::new(Watches { list: Vec::new(), running: false });

/// Watches `seg`'s completion cell `cell` of rank `me` until its `done` word reaches
/// `generation`, or `deadline` (module comment). `what` names the call for the error.
#[allow(clippy::too_many_arguments)]
pub(super) fn watch(seg: &Seg, me: usize, cell: usize, generation: u32, deadline: Instant, broken: &Arc<Broken>, engine: &Arc<Engine>, what: &'static str) {
    let mut g = lock(&WATCHES);
    g.list.push(Watch { seg: *seg, me, cell, generation, deadline, broken: broken.clone(), engine: engine.clone(), what });
    if !g.running {
        g.running = true;
        let started = std::thread::Builder::new().name("gpuwire-ipc-watch".into()).spawn(run);
        if started.is_err() {
            // No thread: the deadline is not enforced (as without a timeout), said once here.
            g.running = false;
            g.list.clear();
        }
    }
}

/// Forgets the watches of `seg` (its state is going; its stream work has ended).
pub(super) fn forget(seg: &Seg) {
    lock(&WATCHES).list.retain(|w| w.seg.base != seg.base);
}

/// Whether `w`'s word has come (wrapping, as the stream's GEQ wait compares).
fn arrived(w: &Watch) -> bool {
    // Mapped while the watch exists (`forget`, under WATCHES' lock).
    let done = w.seg.slot(w.me).cgpu[w.cell].done.load(Ordering::Acquire);
    done.wrapping_sub(w.generation) as i32 >= 0
}

fn run() {
    loop {
        std::thread::sleep(POLL);
        let mut g = lock(&WATCHES);
        let now = Instant::now();
        g.list.retain(|w| {
            if arrived(w) {
                return false;
            }
            if now < w.deadline {
                return true;
            }
            // Marked broken before the streams' waits are released: a call whose stream wait
            // returns then finds the communicator broken (a send staged behind this one went
            // out on it when the mark came after; both locks taken here are leaves).
            let why = format!("{}: timeout: the receiver did not take the stream-ordered message before the deadline; the stream's wait for it was released and the communicator aborted", w.what);
            w.engine.note_error(&Error::Timeout(why.clone()));
            w.broken.mark(why);
            w.seg.slot(w.me).aborted.0.store(1, Ordering::Release);
            w.seg.release_all();
            false
        });
        if g.list.is_empty() {
            g.running = false;
        }
        let running = g.running;
        drop(g);
        if !running {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::shm::tests::segment;
    use super::*;

    fn until(what: &str, f: impl Fn() -> bool) {
        let t = Instant::now();
        while !f() {
            assert!(t.elapsed() < Duration::from_secs(10), "{what}: not within 10 s");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_send_whose_word_comes_is_forgotten_and_one_past_its_deadline_aborts() {
        let (_m1, seg) = segment(2);
        let (_m2, late) = segment(2);
        let (b1, e1) = (Arc::new(Broken::default()), Arc::new(Engine::default()));
        let (b2, e2) = (Arc::new(Broken::default()), Arc::new(Engine::default()));
        // Generation 5 of cell 3 on rank 1: its done word comes (written 5, as the receiver's
        // stream would) well before a deadline 1 h away.
        watch(&seg, 1, 3, 5, Instant::now() + Duration::from_secs(3600), &b1, &e1, "send");
        // Another segment's send, its deadline 20 ms away, whose word never comes (wrapping: the
        // word 2^32 - 1 is behind generation 2).
        late.slot(0).cgpu[1].done.store(u32::MAX, Ordering::Release);
        watch(&late, 0, 1, 2, Instant::now() + Duration::from_millis(20), &b2, &e2, "sendrecv");
        seg.slot(1).cgpu[3].done.store(5, Ordering::Release);
        until("the watches end", || lock(&WATCHES).list.iter().all(|w| w.seg.base != seg.base && w.seg.base != late.base));
        // The first ended quietly.
        assert_eq!(seg.slot(1).aborted.0.load(Ordering::Acquire), 0);
        assert!(b1.why().is_none());
        assert!(e1.take_async_error().is_none());
        // The second aborted its communicator: this rank's word set, every GPU word moved ahead
        // (the stream's wait released), broken with TIMEOUT as the asynchronous error.
        assert_eq!(late.slot(0).aborted.0.load(Ordering::Acquire), 1);
        assert!(late.slot(0).cgpu[1].done.load(Ordering::Acquire).wrapping_sub(2) as i32 >= 0);
        assert!(late.slot(1).gpu.ready.load(Ordering::Acquire) >= 1 << 30);
        until("the communicator is broken", || b2.why().is_some());
        assert!(b2.why().is_some_and(|w| w.contains("sendrecv: timeout")), "{:?}", b2.why());
        let e = e2.take_async_error().expect("an asynchronous error");
        assert_eq!(e.status(), crate::error::Status::GPUWIRE_ERROR_TIMEOUT, "{e}");
    }

    #[test]
    fn forget_drops_a_segments_watches() {
        let (_m, seg) = segment(1);
        let (b, e) = (Arc::new(Broken::default()), Arc::new(Engine::default()));
        watch(&seg, 0, 0, 1, Instant::now() + Duration::from_millis(200), &b, &e, "send");
        forget(&seg);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(seg.slot(0).aborted.0.load(Ordering::Acquire), 0);
        assert!(b.why().is_none());
    }
}
