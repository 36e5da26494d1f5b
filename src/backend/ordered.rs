//! Stream-ordered device operations of the staged MPI path (MPI_STAGED, and the calls of an NCCL
//! communicator that mix host and device memory), as NCCL orders its own: the call
//! enqueues its device work on the caller's stream and returns; the operation happens after the
//! work enqueued on that stream before the call, and the stream's later work sees its result.
//!
//! How: at the call, on the caller's thread, every CUDA step is enqueued on the caller's stream
//! around two flags in mapped host memory (`crate::engine::Flag`):
//!
//! 1. each device buffer the operation reads is copied into a page-locked
//!    staging block (`device::staging`); then the stream writes `ready`;
//! 2. the host side — on the communicator's progress engine, or on the caller's thread where
//!    the engine cannot run it — waits for `ready`, makes the operation's MPI calls (the plain
//!    MPI path, `host`, on the staging blocks), and writes `done`;
//! 3. the stream waits for `done`, then copies the staging blocks the operation wrote into the
//!    device buffers.
//!
//! The host side makes no CUDA call, so a device-synchronizing call of the program (cudaFree, ...)
//! while operations are pending cannot deadlock with it. Every rank makes the same MPI calls,
//! whatever memory each passes (host, pinned or device: memory kinds are each rank's own, as in
//! MPI): a collective where one rank passes host buffers and another device buffers matches.
//!
//! A nonblocking form reads its inputs in stream order too (the copies at its place in the
//! stream) but its outputs are delivered by a private stream of gpuwire's after the host side,
//! and complete with its request (the caller's stream never waits for it: an irecv and an isend
//! on one stream by two ranks must not deadlock). As MPI, the buffers may be used after the wait.
//! A nonblocking receive's delivery is enqueued only once its MPI receive succeeded (by the wait
//! or test that sees it complete): a receive that fails (a message of the wrong size) leaves its
//! buffer as it was, and nothing is written to it after its wait returned.

use std::sync::{Arc, Mutex};

use crate::buffer::{Buffer, Role};
use crate::comm::Communicator;
use crate::device::staging::{self, Ticket};
use crate::device::{self, CtxGuard, Event, Stream};
use crate::engine::{self, Done, Flag};
use crate::error::{Error, Result};
use crate::request::Pending;
use crate::types::BackendKind;

/// The host side of an operation, given its buffers with staging substituted (the order of the
/// parts): run it to completion, or start it (a nonblocking point-to-point operation) and
/// return its pending half.
pub enum HostSide {
    Run(Box<dyn FnOnce(&[Arc<Buffer>]) -> Result<()> + Send>),
    /// As `Run`, for several operations in one (a group's batch): a failure names the parts
    /// that failed with it (their staging holds no result). Run on the calling thread, the
    /// other parts' results are still delivered, then the failure returned with those parts
    /// ([`Failed`]).
    Parts(Box<dyn FnOnce(&[Arc<Buffer>]) -> std::result::Result<(), (Error, Vec<usize>)> + Send>),
    Start(Box<dyn FnOnce(&[Arc<Buffer>]) -> Result<Box<dyn Pending>> + Send>),
}

/// A failure of [`issue`]: its error, and the parts that failed where a batch's host side
/// (`HostSide::Parts`) ran on the calling thread and failed in some of its parts, whose other
/// parts' results were then delivered; `None` where the operation failed as a whole.
#[derive(Debug)]
pub struct Failed {
    pub error: Error,
    pub parts: Option<Vec<usize>>,
}

impl From<Error> for Failed {
    fn from(error: Error) -> Failed {
        Failed { error, parts: None }
    }
}

impl From<Failed> for Error {
    fn from(f: Failed) -> Error {
        f.error
    }
}

/// Whether device operations on `c` go through here: on MPI_STAGED and on NCCL's mixed calls.
/// NCCL's own are ordered by NCCL. IPC's collectives are stream-ordered by the IPC backend
/// itself (the leader's device work enqueued at the call, the cross-process waits as stream
/// memory operations on the shared segment: docs/IPC.md), not here: an engine thread making its
/// CUDA calls while the caller's stream waited for it deadlocked on the H200 (2026-12-01), in
/// `cuIpcCloseMemHandle`, and in every call while the program freed memory. And
/// MPI_CUDA_AWARE's block the host as in gpuwire 0.1: a CUDA-aware MPI makes CUDA calls of its own
/// on device memory (synchronous copies on the legacy stream among them), which wait for a stream
/// that waits for gpuwire's host side; giving it device memory from the engine, or from the
/// calling thread while other streams waited, hung and gave wrong results on the H200
/// (2026-12-01, GPU cases nbc, darray_blockrow and cg_poisson_device with the kit's Open MPI).
pub fn applies(c: &Communicator, _nonblocking: bool) -> bool {
    matches!(c.backend(), BackendKind::GPUWIRE_BACKEND_MPI_STAGED | BackendKind::GPUWIRE_BACKEND_NCCL)
}

/// Where the host side runs: on the engine, unless the engine cannot call MPI (below
/// MPI_THREAD_MULTIPLE), the host must wait anyway (`GPUWIRE_HOST_SYNC=1`), or checking mode must
/// return every rank's verdict from the call.
fn on_engine(c: &Communicator, _nonblocking: bool) -> bool {
    engine::available() && !engine::host_sync() && !c.config().check
}

/// Whether the host side of a call on `c` runs on the calling thread ([`on_engine`]).
pub fn inline(c: &Communicator, nonblocking: bool) -> bool {
    !on_engine(c, nonblocking)
}

/// Whether a blocking point-to-point call on `c` with these parts is started by its host side
/// and completed by the engine ([`HostSide::Start`], `Engine::watch`): a host side on the engine
/// (the call returns before its data moves) with no host memory among its parts (whose call
/// waits for its host side to complete).
pub fn starts_blocking(c: &Communicator, parts: &[(Arc<Buffer>, Role)]) -> bool {
    on_engine(c, false) && !parts.iter().any(|(b, role)| b.is_host() && *role != Role::Unused)
}

/// Whether the blocking device calls of `c` return before their data moved ([`on_engine`]).
pub fn returns_early(c: &Communicator) -> bool {
    on_engine(c, false)
}

/// The staging plan of one operation.
struct Plan {
    /// The buffers the host side uses, in the parts' order.
    subs: Vec<Arc<Buffer>>,
    /// (staging, device, bytes) copies before the host side, and after it.
    before: Vec<(usize, usize, usize)>,
    after: Vec<After>,
    /// The parts each copy of `after` holds the results of (a part staged inside another's
    /// staging, in place, shares its copy).
    after_parts: Vec<Vec<usize>>,
}

/// A copy of a result from its staging block into the device buffer, after the host side.
#[derive(Clone, Copy)]
pub(crate) struct After {
    pub staging: usize,
    pub dst: usize,
    pub bytes: usize,
    /// Into device memory of a GPU that processes share: small copies go as two rows
    /// (`device::htod_pinned_async`), off the time-sliced compute engine.
    pub rows: bool,
}

impl After {
    /// Enqueues the copy on `stream`.
    pub fn enqueue(&self, stream: Stream) -> Result<()> {
        if self.rows {
            device::htod_pinned_async(self.dst, self.staging, self.bytes, stream)
        } else {
            device::copy_async(self.dst, self.staging, self.bytes, stream)
        }
    }
}

fn plan(c: &Communicator, parts: &[(Arc<Buffer>, Role)], ticket: &Arc<Ticket>) -> Result<Plan> {
    let device = c.device();
    let mut subs: Vec<Option<Arc<Buffer>>> = vec![None; parts.len()];
    let (mut before, mut after, mut after_parts) = (Vec::new(), Vec::new(), Vec::new());
    // Staged parts, the largest ranges first: a part inside another (an in-place block) is a
    // view of the other's staging, so in-place stays in-place.
    let mut staged: Vec<usize> = Vec::new();
    for (i, (b, role)) in parts.iter().enumerate() {
        crate::backend::devstate::check_device(c, b)?;
        if b.is_host() || *role == Role::Unused {
            subs[i] = Some(b.clone());
        } else if b.bytes() == 0 {
            // Nothing to stage; but host memory on the host side, as the staged parts are, so
            // that its MPI calls are plain MPI's as on every other rank and it never waits for a
            // stream (an empty device part took the staged path there, on one rank only: its
            // engine synchronized the caller's stream, which waited for the engine's next flag;
            // a helper's bug hunt, 2026-12-06).
            // One substitute for one buffer: an empty in-place call (the same buffer as send and
            // receive, which only its identity marks in place) stays in place on the host side.
            let same = (0..i).find(|&j| Arc::ptr_eq(&parts[j].0, b)).and_then(|j| subs[j].clone());
            subs[i] = Some(same.unwrap_or_else(|| Arc::new(Buffer::staging(b.ptr(), 0, b.dtype(), device))));
        } else {
            staged.push(i);
        }
    }
    staged.sort_by_key(|&i| (parts[i].0.range().0, std::cmp::Reverse(parts[i].0.bytes())));
    // (container index, its staging pointer, its role so far), and the parts inside each
    let mut outer: Vec<(usize, usize, Role)> = Vec::new();
    let mut inside: Vec<Vec<usize>> = Vec::new();
    for &i in &staged {
        let (b, role) = (&parts[i].0, parts[i].1);
        let (lo, hi) = b.range();
        if let Some(k) = outer.iter().position(|(j, _, _)| {
            let (l, h) = parts[*j].0.range();
            l <= lo && hi <= h
        }) {
            let (j, sp, r) = outer[k];
            outer[k].2 = r.join(role);
            inside[k].push(i);
            let ptr = sp + (lo - parts[j].0.range().0);
            subs[i] = Some(Arc::new(Buffer::staging(ptr, b.count(), b.dtype(), device)));
        } else {
            let sp = staging::take(device, b.bytes(), ticket)?;
            outer.push((i, sp, role));
            inside.push(vec![i]);
            subs[i] = Some(Arc::new(Buffer::staging(sp, b.count(), b.dtype(), device)));
        }
    }
    let shared = !outer.is_empty() && crate::backend::devstate::dev(c)?.gpu_shared;
    for ((j, sp, role), parts_in) in outer.into_iter().zip(inside) {
        let b = &parts[j].0;
        if role.reads() {
            before.push((sp, b.ptr(), b.bytes()));
        }
        if role.writes() {
            let rows = shared && b.space() == crate::types::Space::GPUWIRE_SPACE_DEVICE;
            after.push(After { staging: sp, dst: b.ptr(), bytes: b.bytes(), rows });
            after_parts.push(parts_in);
        }
    }
    Ok(Plan { subs: subs.into_iter().map(|s| s.expect("every part planned")).collect(), before, after, after_parts })
}

/// Issues one stream-ordered operation with these `parts` on `stream` (see the module's
/// comment). A blocking form returns `None` at once (on the engine; its failure becomes the
/// communicator's asynchronous error) or after its host side (on the caller's thread: then the
/// stream is also waited for, as MPI's blocking meaning); a nonblocking form returns its pending
/// half. Arguments are validated (`Op::check`) before.
pub fn issue(c: &Arc<Communicator>, stream: Stream, parts: Vec<(Arc<Buffer>, Role)>, nonblocking: bool, side: HostSide) -> std::result::Result<Option<Box<dyn Pending>>, Failed> {
    let device = c.device();
    let _ctx = CtxGuard::enter(device)?;
    engine::refuse_capture(stream)?;
    let ticket = Arc::new(Ticket::default());
    let p = plan(c, &parts, &ticket)?;
    let eng = c.engine();
    let flag = eng.flag(device)?;
    // The host side needs the stream's earlier work done when it reads staged data.
    let wait_ready = !p.before.is_empty();
    for &(sp, dp, n) in &p.before {
        device::copy_async(sp, dp, n, stream)?;
    }
    if wait_ready {
        device::stream_write(stream, flag.ready_word(), flag.value)?;
    }
    let mut out_event = None;
    let mut deliver = None;
    let engine_side = on_engine(c, nonblocking);
    // A blocking call with host memory among its parts (memory kinds are the rank's own, input
    // against output too) waits for its host side, which reads and writes host memory in place:
    // as MPI's blocking meaning, a host output holds the result and a host input may be
    // rewritten once the call returned (the stream waits only for staged outputs).
    let host_wait = !nonblocking && engine_side && parts.iter().any(|(b, role)| b.is_host() && *role != Role::Unused);
    // A nonblocking receive's outputs: delivered once it succeeded (`Ordered::deliver`).
    let deliver_later = nonblocking && matches!(side, HostSide::Start(_)) && !p.after.is_empty();
    if !nonblocking && !engine_side {
        // The host side runs below, on this thread: the results are copied only if it succeeded
        // (a refused receive leaves its buffer as it was).
    } else if !nonblocking {
        if !p.after.is_empty() {
            device::stream_wait_geq(stream, flag.done_dev, flag.value)?;
        }
        for a in &p.after {
            a.enqueue(stream)?;
        }
        let ev = Event::new()?;
        ev.record(stream)?;
        ticket.set_event(ev);
    } else if deliver_later {
        let at_call = Event::new()?;
        at_call.record(stream)?;
        deliver = Some(Deliver { after: p.after.clone(), at_call, ticket: ticket.clone() });
    } else if !p.after.is_empty() {
        // Delivered by a private stream, after the work before the call and the host side.
        let at_call = Event::new()?;
        at_call.record(stream)?;
        let (_, enqueued) = on_idle_stream(device, |ps| -> Result<(Event, Event)> {
            device::stream_wait_event(ps, &at_call)?;
            device::stream_wait_geq(ps, flag.done_dev, flag.value)?;
            for a in &p.after {
                a.enqueue(ps)?;
            }
            let (ev, ev2) = (Event::new()?, Event::new()?);
            ev.record(ps)?;
            ev2.record(ps)?;
            Ok((ev, ev2))
        })?;
        let (ev, ev2) = enqueued?;
        ticket.set_event(ev2);
        out_event = Some(ev);
    } else {
        let ev = Event::new()?;
        ev.record(stream)?;
        ticket.set_event(ev);
    }
    let subs = p.subs;
    let c2 = c.clone();
    let stop = move || c2.is_broken().then(|| Error::CommBroken("the communicator broke while an operation waited for its stream".into()));
    let started: Arc<Mutex<Option<Started>>> = Arc::new(Mutex::new(None));
    let (t2, s2) = (ticket.clone(), started.clone());
    // A receive delivered later keeps its staging until its delivery (`Ordered::deliver`), not
    // only until its MPI receive completed.
    let t_started = if deliver_later { Arc::new(Ticket::default()) } else { ticket.clone() };
    let (after, after_parts) = (p.after, p.after_parts);
    let (eng2, report) = (eng.clone(), engine_side && !nonblocking && !host_wait);
    // A blocking operation started on the engine (`starts_blocking`): the engine completes it
    // (`Engine::watch`), its flag released then; its failure the communicator's asynchronous
    // error, as a blocking form's host side's is.
    let watched = engine_side && !nonblocking && !host_wait && matches!(side, HostSide::Start(_));
    let (s3, c3) = (started.clone(), c.clone());
    // Inline and blocking, the results are copied after the host side: the staging is free
    // once the stream has been waited for, below.
    let finish_here = engine_side || nonblocking;
    // The outputs (each copy's parts) that the stream copies from staging whatever the host side
    // does (enqueued at the call): a failed operation's output gets its staging's bytes, which
    // its error must not call untouched. Also where it failed before its MPI calls (a
    // communicator broken while it waited for `ready`): the flag is released on every way out
    // of the host side (`Flag`'s drop writes `done`), so the stream copies all the same
    // (whatever earlier operations left in the staging).
    let copied_anyway = if !deliver_later && (engine_side || nonblocking) { after_parts.clone() } else { Vec::new() };
    let host = move || -> std::result::Result<(), Failed> {
        let flag = flag;
        let r = (|| -> std::result::Result<(), Failed> {
            if wait_ready {
                crate::trace!("ordered: host side waits for its stream (flag {})", flag.value);
                flag.wait_ready(&stop)?;
            }
            crate::trace!("ordered: host side runs (flag {})", flag.value);
            match side {
                HostSide::Run(f) => f(&subs)?,
                HostSide::Parts(f) => f(&subs).map_err(|(error, parts)| Failed { error, parts: Some(parts) })?,
                HostSide::Start(f) => {
                    let pend = f(&subs)?;
                    *s2.lock().unwrap_or_else(|p| p.into_inner()) = Some(Started { pending: Some(pend), flag: None, matched: None });
                }
            }
            Ok(())
        })();
        let r = r.map_err(|f| match undefined_outputs(&copied_anyway, f.parts.as_deref()) {
            0 => f,
            n => Failed { error: outputs_undefined(f.error, n), parts: f.parts },
        });
        crate::trace!("ordered: host side ran (flag {}): {r:?}", flag.value);
        // The buffers go before the stream is released: no CUDA memory is freed here (an engine
        // thread never frees: see `engine::free_dropped`).
        drop(subs);
        // Nobody waits for a blocking form on the engine: its failure is the communicator's
        // asynchronous error, recorded before the stream is released (a program that
        // synchronizes the stream, then asks, sees it).
        if report {
            if let Err(f) = &r {
                eng2.note_error(&f.error);
            }
        }
        // A started operation releases its flag when it completes; everything else now.
        let mut g = s2.lock().unwrap_or_else(|p| p.into_inner());
        match g.as_mut() {
            Some(st) if r.is_ok() => {
                st.flag = Some((flag, t_started));
                if watched {
                    drop(g);
                    eng2.watch(complete_started(s3, c3, undefined_outputs(&copied_anyway, None)));
                }
            }
            _ => {
                drop(flag);
                if finish_here {
                    t2.finish();
                }
            }
        }
        r
    };
    if !engine_side {
        let r = host();
        if !nonblocking {
            if let Err(f) = r {
                let Some(failed) = &f.parts else {
                    ticket.finish();
                    return Err(f);
                };
                // A batch's other parts succeeded: their results are delivered (their messages
                // were received; only the failed parts' buffers are left as they were).
                let delivered = (|| {
                    for (a, parts) in after.iter().zip(&after_parts) {
                        if !parts.iter().any(|i| failed.contains(i)) {
                            a.enqueue(stream)?;
                        }
                    }
                    device::sync(stream)
                })();
                // A failed copy or wait may leave copies queued that read the staging: it is
                // then never reused (as where the copies below fail). Nothing was delivered for
                // certain then: the batch failed as a whole.
                return Err(match delivered {
                    Ok(()) => {
                        ticket.finish();
                        f
                    }
                    Err(e) => e.into(),
                });
            }
            for a in &after {
                a.enqueue(stream)?;
            }
            let r = device::sync(stream);
            ticket.finish();
            return r.map(|()| None).map_err(Failed::from);
        }
        let done = Done::finished(r.map_err(Error::from));
        return Ok(Some(Box::new(Ordered { done, started, out_event, deliver, device })));
    }
    // Counted as point-to-point whatever it is: a device operation's host side keeps its place
    // before every later operation of the communicator (its stream waits for it in call order).
    let done = eng.submit(Box::new(move || host().map_err(Error::from)), false, true);
    if host_wait {
        return done.wait_until(None).unwrap_or_else(|| Err(Error::Internal("engine wait without deadline ended".into()))).map(|()| None).map_err(Failed::from);
    }
    if !nonblocking {
        return Ok(None);
    }
    Ok(Some(Box::new(Ordered { done, started, out_event, deliver, device })))
}

/// The engine's poll of a blocking operation its host side started (`Engine::watch`): its
/// outcome once complete (its flag released, its staging free); at the communicator's timeout
/// (counted from the start) or once the communicator broke, the operation is abandoned: its flag
/// released (the stream goes on), its staging kept for good (MPI may still write it), the
/// communicator broken with GPUWIRE_ERROR_TIMEOUT.
/// `undefined`: its outputs the stream copies out of staging all the same (a receive's), which
/// its failure leaves undefined (`outputs_undefined`).
fn complete_started(started: Arc<Mutex<Option<Started>>>, c: Arc<Communicator>, undefined: usize) -> engine::Watched {
    let deadline = c.config().timeout.map(|t| (std::time::Instant::now() + t, t));
    // A failure is the communicator's asynchronous error before the flag is released: a program
    // that synchronizes the stream, then asks, sees it (`Engine::watch` leaves it to the poll).
    let note = move |c: &Communicator, e: Error| {
        let e = if undefined > 0 { outputs_undefined(e, undefined) } else { e };
        c.engine().note_error(&e);
        e
    };
    Box::new(move || {
        let mut g = started.lock().unwrap_or_else(|p| p.into_inner());
        let st = g.as_mut()?;
        match st.pending.as_mut().map_or(Ok(true), |p| p.test()) {
            Ok(false) => {}
            Ok(true) => {
                st.pending = None;
                st.finish(&Ok(()));
                return Some(Ok(()));
            }
            Err(e) => {
                st.pending = None;
                let r = Err(note(&c, e));
                st.finish(&r);
                return Some(r);
            }
        }
        let why = match deadline {
            Some((d, t)) if std::time::Instant::now() >= d => {
                let msg = format!(
                    "a blocking point-to-point operation did not complete within the communicator's timeout of {:.3} s (no matching call on the other rank?); its stream's wait was released and the communicator is now broken",
                    t.as_secs_f64()
                );
                c.mark_broken(msg.clone());
                Error::Timeout(msg)
            }
            _ if c.is_broken() => Error::CommBroken("the communicator broke while a blocking point-to-point operation was in progress; its stream's wait was released".into()),
            _ => return None,
        };
        // A part that failed first is the error (with the timeout after it), as a host
        // sendrecv's receive failure is.
        let why = match st.pending.as_ref().and_then(|p| p.failed_part()) {
            Some(first) => first.reworded(format!("{}; then {}", first.detail(), why)),
            None => why,
        };
        let why = note(&c, why);
        // Abandoned: MPI may still use the staging, which is never taken again (the ticket is
        // not finished); the stream goes on.
        if let Some(p) = st.pending.take() {
            let _ = p.abandon();
        }
        if let Some((flag, ticket)) = st.flag.take() {
            drop(flag);
            std::mem::forget(ticket);
        }
        Some(Err(why))
    })
}

/// How many of the output copies `copied` (each its parts), which the stream makes whatever the
/// host side does, a failure of the parts `failed` (`None`: of the whole operation) leaves
/// undefined: those holding a failed part. None for a failed send (it has no output).
fn undefined_outputs(copied: &[Vec<usize>], failed: Option<&[usize]>) -> usize {
    copied.iter().filter(|parts| failed.is_none_or(|f| parts.iter().any(|i| f.contains(i)))).count()
}

/// `e` of a host side that failed with `n` (at least one) of its device outputs copied out of
/// staging all the same ([`undefined_outputs`]): their contents, said.
fn outputs_undefined(e: Error, n: usize) -> Error {
    let detail = e.detail();
    let note = if n == 1 {
        "the failed operation's MPI calls use staging, which the stream copied into its device output buffer all the same, as enqueued at the call, so that buffer's contents are undefined"
    } else {
        "the failed operations' MPI calls use staging, which the stream copied into their device output buffers all the same, as enqueued at the call, so those buffers' contents are undefined"
    };
    Error::from_status(e.status(), format!("{detail} (stream-ordered: {note})"))
}

/// Runs `f` (which enqueues a delivery of nonblocking operations' outputs) on a private stream of
/// `device` (non-blocking: never waits for the legacy stream) that has no work left, a new one
/// where none is idle (so as many as deliveries are ever pending at once: a busy one shared
/// would bring the wait behind another operation back), under the list's lock, so that no other
/// delivery takes the stream before `f`'s work is on it.
/// A delivery waits for its own operation only: operations of different communicators, and
/// receives from different ranks, complete in any order. One stream per device made a wait
/// for a later operation wait for every earlier one's delivery, and a valid program (rank 0
/// iallreduce on c1, iallreduce on c2, waits for c2's, then sends to rank 1, which joins c1
/// only after that message) hung (a helper's bug hunt, 2026-12-06). Returns the stream too.
fn on_idle_stream<R>(device: i32, f: impl FnOnce(Stream) -> R) -> Result<(Stream, R)> {
    static STREAMS: Mutex<Vec<(i32, usize)>> = Mutex::new(Vec::new());
    let mut g = STREAMS.lock().unwrap_or_else(|p| p.into_inner());
    let mut idle = None;
    for &(_, s) in g.iter().filter(|(d, _)| *d == device) {
        if device::stream_idle(Stream(s))? {
            idle = Some(Stream(s));
            break;
        }
    }
    let ps = match idle {
        Some(s) => s,
        None => {
            let s = device::private_stream(device)?;
            g.push((device, s.0));
            s
        }
    };
    Ok((ps, f(ps)))
}

/// A started nonblocking point-to-point operation: its MPI request, then the flag and ticket it
/// releases when complete.
struct Started {
    pending: Option<Box<dyn Pending>>,
    flag: Option<(Flag, Arc<Ticket>)>,
    /// What the operation's receive matched, kept when `pending` is dropped.
    matched: Option<crate::request::Status>,
}

impl Started {
    /// The operation ended with `outcome`: its flag released (the stream goes on), its staging
    /// free again, unless the failure left its MPI request behind (`Error::abandons`: a late
    /// peer may still write the staging, which is then never taken again).
    fn finish<T>(&mut self, outcome: &Result<T>) {
        if let Some((flag, ticket)) = self.flag.take() {
            drop(flag);
            if outcome.as_ref().err().is_some_and(|e| e.abandons()) {
                std::mem::forget(ticket);
            } else {
                ticket.finish();
            }
        }
    }
}

impl Pending for Started {
    fn status(&self) -> Option<crate::request::Status> {
        self.pending.as_ref().and_then(|p| p.status()).or(self.matched)
    }
    fn wait(&mut self) -> Result<()> {
        let r = match self.pending.as_mut() {
            Some(p) => p.wait(),
            None => Ok(()),
        };
        self.matched = self.status();
        self.pending = None;
        self.finish(&r);
        r
    }
    fn test(&mut self) -> Result<bool> {
        let Some(p) = self.pending.as_mut() else { return Ok(true) };
        match p.test() {
            Ok(false) => Ok(false),
            r => {
                self.matched = self.status();
                self.pending = None;
                self.finish(&r);
                r
            }
        }
    }
}

/// The request of a nonblocking stream-ordered operation: its host side has run (or started its
/// MPI request), that request has completed, and the private stream has delivered the outputs.
struct Ordered {
    done: Arc<Done>,
    started: Arc<Mutex<Option<Started>>>,
    out_event: Option<Event>,
    /// A receive's delivery, not yet enqueued.
    deliver: Option<Deliver>,
    device: i32,
}

/// The copies of a nonblocking receive's staging into its device buffers, enqueued on the
/// delivery stream ([`on_idle_stream`]) after the caller's stream's work before the call
/// (`at_call`) once the receive succeeded; its staging is the ticket's until they ran.
struct Deliver {
    after: Vec<After>,
    at_call: Event,
    ticket: Arc<Ticket>,
}

// SAFETY: a CUDA event handle, used with its context current.
unsafe impl Send for Ordered {}

impl Ordered {
    /// The receive succeeded: its delivery enqueued (`out_event` after it).
    fn deliver(&mut self) -> Result<()> {
        let Some(d) = self.deliver.take() else { return Ok(()) };
        let _g = CtxGuard::enter(self.device)?;
        let picked = on_idle_stream(self.device, |ps| -> Result<()> {
            device::stream_wait_event(ps, &d.at_call)?;
            for a in &d.after {
                a.enqueue(ps)?;
            }
            let (ev, ev2) = (Event::new()?, Event::new()?);
            ev.record(ps)?;
            ev2.record(ps)?;
            d.ticket.set_event(ev2);
            self.out_event = Some(ev);
            Ok(())
        });
        let (ps, r) = match picked {
            Ok(x) => x,
            Err(e) => {
                // Nothing was enqueued: the staging is free.
                d.ticket.finish();
                return Err(e);
            }
        };
        if r.is_err() {
            // Copies enqueued before the failure still read the staging: done before it is free.
            let _ = device::sync(ps);
        }
        d.ticket.finish();
        r
    }

    /// The receive failed: nothing is delivered, its staging is free.
    fn no_delivery(&mut self) {
        if let Some(d) = self.deliver.take() {
            d.ticket.finish();
        }
    }

    fn delivered(&mut self, block: bool) -> Result<bool> {
        let Some(ev) = self.out_event.as_ref() else { return Ok(true) };
        let _g = CtxGuard::enter(self.device)?;
        if block {
            ev.wait_host()?;
        } else if !ev.query()? {
            return Ok(false);
        }
        self.out_event = None;
        Ok(true)
    }
}

impl Pending for Ordered {
    fn status(&self) -> Option<crate::request::Status> {
        self.started.lock().unwrap_or_else(|p| p.into_inner()).as_ref().and_then(|s| s.status())
    }
    fn wait(&mut self) -> Result<()> {
        let r = self.done.wait_until(None).unwrap_or_else(|| Err(Error::Internal("engine wait without deadline ended".into())));
        let r = r.and_then(|()| match self.started.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            Some(p) => p.wait(),
            None => Ok(()),
        });
        if let Err(e) = r {
            self.no_delivery();
            return Err(e);
        }
        self.deliver()?;
        self.delivered(true).map(|_| ())
    }
    fn test(&mut self) -> Result<bool> {
        let r = match self.done.peek() {
            None => return Ok(false),
            Some(r) => r,
        };
        let r = r.and_then(|()| match self.started.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            Some(p) => p.test(),
            None => Ok(true),
        });
        match r {
            Ok(false) => return Ok(false),
            Ok(true) => {}
            Err(e) => {
                self.no_delivery();
                return Err(e);
            }
        }
        self.deliver()?;
        self.delivered(false)
    }
    fn test_settled(&mut self, until: std::time::Instant) -> Result<bool> {
        self.done.wait_until(Some(until));
        self.test()
    }
    fn abandon(self: Box<Self>) -> bool {
        // The MPI request is given up (cancelled where MPI can), and the flag released so that
        // the private stream moves on; what it then copies into the buffer is undefined, and the
        // buffer stays alive (false: the request keeps it). Staging in use stays taken.
        let this = *self;
        if let Some(st) = this.started.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            if let Some(p) = st.pending.take() {
                let _ = p.abandon();
            }
            if let Some((flag, _ticket)) = st.flag.take() {
                drop(flag);
            }
        }
        std::mem::forget(this.out_event);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undefined_outputs_are_the_failed_parts_copied_anyway() {
        // A receive (part 0 copied out), a send (no output): failed as a whole.
        assert_eq!(undefined_outputs(&[vec![0]], None), 1);
        assert_eq!(undefined_outputs(&[], None), 0);
        // A batch: send 0, recv 1, send 2, recv 3 (copies of parts 1 and 3).
        let copied = [vec![1], vec![3]];
        assert_eq!(undefined_outputs(&copied, Some(&[0, 2])), 0);
        assert_eq!(undefined_outputs(&copied, Some(&[0, 3])), 1);
        assert_eq!(undefined_outputs(&copied, Some(&[1, 3])), 2);
        // In place: one copy holds parts 0 and 1.
        assert_eq!(undefined_outputs(&[vec![0, 1]], Some(&[1])), 1);
        // Outputs delivered only after success (inline, or a nonblocking receive's delivery).
        assert_eq!(undefined_outputs(&[], Some(&[1])), 0);
    }

    #[test]
    fn the_note_keeps_the_error() {
        let e = outputs_undefined(Error::CountMismatch("allreduce: counts differ".into()), 1);
        assert_eq!(e.status(), crate::error::Status::GPUWIRE_ERROR_COUNT_MISMATCH);
        let t = e.to_string();
        assert!(t.starts_with("count mismatch: allreduce: counts differ (stream-ordered: "), "{t}");
        assert!(t.contains("its device output buffer") && t.contains("contents are undefined"), "{t}");
        let t = outputs_undefined(Error::CommBroken("x".into()), 2).to_string();
        assert!(t.starts_with("communicator broken: x (") && t.contains("those buffers' contents are undefined"), "{t}");
    }
}
