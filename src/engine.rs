//! The progress engine: operations that complete after their call returned.
//!
//! Each communicator has one engine: a queue of operations run in call order by a thread of
//! gpuwire's (started at the first queued operation, gone 50 ms after the queue ran dry). It runs
//! what must not block the caller: the nonblocking collectives on host memory, the host side of
//! the stream-ordered device operations of the MPI paths (`crate::backend::ordered`, ordered
//! with their streams by [`Flags`]), and every operation issued
//! while earlier ones are still queued (so operations of one communicator always reach MPI in
//! call order, the same on every rank; a point-to-point operation on host memory waits only for
//! queued point-to-point operations: [`Engine::no_p2p`]). An operation runs on the engine exactly as its blocking
//! form runs on the caller's thread (the same code: `Communicator::allreduce` and its
//! neighbours), so a nonblocking form matches the blocking form on another rank. A job may
//! leave an operation it started to the engine to complete ([`Engine::watch`]: a stream-ordered
//! blocking send or receive, whose stream waits for its flag), polled between jobs and while a
//! job waits for its stream: such operations reach MPI in call order and complete in any order.
//!
//! The engine calls MPI from its own thread: it needs MPI_THREAD_MULTIPLE. Below that level
//! ([`available`] false) every operation runs on the caller's thread before the call returns.
//!
//! This module knows nothing of backends: it runs closures, records completions and errors, and
//! keeps the flags that order device streams with the host. An engine thread makes no CUDA call
//! for a stream-ordered operation (the calling thread enqueued its device work), so a program's
//! device-synchronizing call (cudaFree, ...) while one is pending cannot deadlock with it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::device::{self, Stream};
use crate::error::{Error, Result};

/// How long an idle engine thread waits for more work before it ends.
const IDLE: Duration = Duration::from_millis(50);

/// How long the engine thread waits for more work between polls of its watched operations
/// ([`Engine::watch`]), once none has started or completed for [`SPIN`]; until then it polls
/// them without waiting (a small message completes within microseconds).
const POLL: Duration = Duration::from_micros(20);
const SPIN: Duration = Duration::from_micros(200);
/// For the first part of [`SPIN`] the engine thread polls without yielding between polls: a
/// yield is a system call (about a microsecond on the GPU machines), and a small message's
/// completion is due within microseconds of its start (blocking MPI_STAGED send/recv on one
/// H100, before: +3 to +5 µs per trip against the job's own blocking MPI wait).
const HOT: Duration = Duration::from_micros(50);

/// An operation a job started and left to the engine to complete ([`Engine::watch`]): polled
/// until it returns its outcome.
pub type Watched = Box<dyn FnMut() -> Option<Result<()>> + Send>;

/// Operations queued on any engine and not finished (`drain_all`, before MPI_Finalize).
static OUTSTANDING: Mutex<usize> = Mutex::new(0);
static OUTSTANDING_CV: Condvar = Condvar::new();

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Set by `gpuwire_init` (`ffi::lifecycle`): whether MPI provides MPI_THREAD_MULTIPLE.
static MULTIPLE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Told at initialization whether MPI provides MPI_THREAD_MULTIPLE.
pub fn set_thread_multiple(yes: bool) {
    MULTIPLE.store(yes, Ordering::Relaxed);
}

/// Whether an engine thread may call MPI (MPI_THREAD_MULTIPLE).
pub fn available() -> bool {
    MULTIPLE.load(Ordering::Relaxed)
}

thread_local! {
    /// Whether this thread runs an engine's jobs (`on_engine_thread`).
    static ON_ENGINE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The engine whose thread this is (`Engine::run`): a job waiting here for its stream polls
    /// that engine's watched operations meanwhile (`poll_this_engine`).
    static THIS_ENGINE: std::cell::RefCell<std::sync::Weak<Engine>> = const { std::cell::RefCell::new(std::sync::Weak::new()) };
}

/// Polls the watched operations of the engine whose thread this is, if any (`Engine::watch`):
/// called where a job waits for its stream, which may itself wait for a watched operation's
/// flag (a send enqueued after a blocking receive on the same stream), so that the wait ends.
fn poll_this_engine() {
    if let Some(e) = THIS_ENGINE.with(|t| t.borrow().upgrade()) {
        let _ = e.poll_watched();
    }
}

/// Whether the calling thread is running an engine's job: an operation called there must be
/// complete when it returns (the job's end completes a request), so it may not merely enqueue
/// its device work on a stream (the IPC backend's collectives check this).
pub fn on_engine_thread() -> bool {
    ON_ENGINE.with(|c| c.get())
}

/// Whether `GPUWIRE_HOST_SYNC=1`: every device operation also waits for its completion on the
/// host (MPI's blocking meaning; for debugging).
#[inline]
pub fn host_sync() -> bool {
    crate::config::env_flag_once(&crate::hot::PROCESS.host_sync, "GPUWIRE_HOST_SYNC")
}

/// Blocks until no engine has an operation queued or running (gpuwire_finalize, before MPI is
/// finalized).
pub fn drain_all() {
    let mut n = lock(&OUTSTANDING);
    while *n > 0 {
        n = OUTSTANDING_CV.wait(n).unwrap_or_else(|p| p.into_inner());
    }
    drop(n);
    free_dropped();
}

/// Frees, on the calling thread, the CUDA memory that engine threads dropped
/// (`device::free_deferred`), when no engine has work queued or running. Never on an engine
/// thread: cuMemFree synchronizes the device, and a stream may be waiting for the next
/// operation of that very engine (seen on the H200 as a hang of GPU case opswrap on
/// MPI_STAGED). Called at every operation's issue and at gpuwire_finalize.
pub fn free_dropped() {
    if device::has_deferred() && *lock(&OUTSTANDING) == 0 {
        device::free_deferred();
    }
}

/// The completion of one queued operation: its result, once it has run.
#[derive(Debug, Default)]
pub struct Done {
    result: Mutex<Option<Result<()>>>,
    cv: Condvar,
}

impl Done {
    /// A completion that has already happened.
    pub fn finished(r: Result<()>) -> Arc<Done> {
        Arc::new(Done { result: Mutex::new(Some(r)), cv: Condvar::new() })
    }

    pub fn set(&self, r: Result<()>) {
        *lock(&self.result) = Some(r);
        self.cv.notify_all();
    }

    /// The result once the operation has run, `None` before.
    pub fn peek(&self) -> Option<Result<()>> {
        lock(&self.result).clone()
    }

    /// Waits until the operation has run, up to `deadline`; `None` at the deadline.
    pub fn wait_until(&self, deadline: Option<Instant>) -> Option<Result<()>> {
        let mut g = lock(&self.result);
        loop {
            if let Some(r) = g.as_ref() {
                return Some(r.clone());
            }
            match deadline {
                None => g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return None;
                    }
                    g = self.cv.wait_timeout(g, d - now).unwrap_or_else(|p| p.into_inner()).0;
                }
            }
        }
    }
}

/// One queued operation.
struct Job {
    /// Called with the engine's private stream (stream-ordered work) or the null stream.
    work: Box<dyn FnOnce() -> Result<()> + Send>,
    done: Arc<Done>,
    /// Whether nobody waits for this job's result: a failure is then kept as the
    /// communicator's asynchronous error.
    detached: bool,
    /// Whether it may make point-to-point calls (`Engine::no_p2p`).
    p2p: bool,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Whether the engine thread is running.
    thread: bool,
}

/// A communicator's engine. Laid out in order and aligned to a cache line: the words every
/// call reads first, in one line (`crate::hot`'s reason).
#[derive(Default)]
#[repr(C, align(64))]
pub struct Engine {
    /// Queued or running operations.
    outstanding: AtomicUsize,
    /// Of those, the ones that may make point-to-point calls (`no_p2p`).
    p2p: AtomicUsize,
    /// Whether `async_error` is set (read without the lock on every call).
    has_async_error: std::sync::atomic::AtomicBool,
    q: Mutex<Queue>,
    cv: Condvar,
    flags: Mutex<Option<Flags>>,
    /// The first failure of an operation that nobody waits for, until reported.
    async_error: Mutex<Option<Error>>,
    /// The communicator's NCCL turn, where it has one (`crate::backend::turn`).
    turn: std::sync::OnceLock<Arc<crate::backend::turn::Word>>,
    /// Operations started by jobs and completed here ([`Engine::watch`]).
    watched: Mutex<Vec<Watched>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Engine({} outstanding)", self.outstanding.load(Ordering::Relaxed))
    }
}

impl Engine {
    /// Whether nothing is queued or running: an operation may then run on the caller's thread
    /// without overtaking an earlier one.
    pub fn idle(&self) -> bool {
        self.outstanding.load(Ordering::Acquire) == 0
    }

    /// Whether no operation that may make point-to-point calls is queued or running: a
    /// point-to-point operation on host memory may then run on the caller's thread (MPI matches
    /// point-to-point messages apart from collectives, so it need not wait for queued
    /// collectives, and holding it behind them deadlocks valid programs: a rank whose engine
    /// runs an allreduce while its peer waits in a receive for a send queued behind it).
    pub fn no_p2p(&self) -> bool {
        self.p2p.load(Ordering::Acquire) == 0
    }

    /// The communicator's NCCL turn (set once, at the NCCL backend's setup).
    pub fn set_turn(&self, turn: Arc<crate::backend::turn::Word>) {
        let _ = self.turn.set(turn);
    }

    /// Waits until everything queued so far has run (an operation that must run on the
    /// caller's thread, after the queued ones) — except where this thread's group has the
    /// communicator's NCCL turn: it drained the engine when it took it, and what other threads
    /// queued since then needs that turn, so it runs after the group's end (waiting for it here
    /// would never return). Where another thread has the turn and waits for one this thread's
    /// group keeps, the queued work could never run: GPUWIRE_ERROR_INVALID_ARGUMENT
    /// (`turn::engine_wait`), nothing waited for.
    pub fn drain(&self) -> Result<()> {
        if self.idle() || self.turn.get().is_some_and(|t| crate::backend::turn::held_here(t)) {
            return Ok(());
        }
        let _listed = self.waiting()?;
        let mut g = lock(&self.q);
        while self.outstanding.load(Ordering::Acquire) > 0 {
            g = self.cv.wait_timeout(g, Duration::from_millis(1)).unwrap_or_else(|p| p.into_inner()).0;
        }
        Ok(())
    }

    /// This thread is about to wait for work queued here (a drain, a queued request's wait):
    /// where the communicator has an NCCL turn that another thread has, the wait is listed as
    /// one for that turn until the guard is dropped, and refused (GPUWIRE_ERROR_INVALID_ARGUMENT)
    /// where it would close a cycle of waits (`turn::engine_wait`).
    pub fn waiting(&self) -> Result<Option<crate::backend::turn::EngineWait>> {
        match self.turn.get() {
            Some(t) if !crate::backend::turn::held_here(t) => crate::backend::turn::engine_wait(t),
            _ => Ok(None),
        }
    }

    /// Whether an asynchronous error waits to be taken (`take_async_error`), without taking it.
    #[inline]
    pub fn has_async_error(&self) -> bool {
        self.has_async_error.load(Ordering::Acquire)
    }

    /// Takes the asynchronous error (reported once).
    pub fn take_async_error(&self) -> Option<Error> {
        if !self.has_async_error.load(Ordering::Acquire) {
            return None;
        }
        let mut a = lock(&self.async_error);
        self.has_async_error.store(false, Ordering::Release);
        a.take()
    }

    /// `e`, unless it is COMM_BROKEN and this engine holds an asynchronous failure (that of an
    /// operation which failed after its call had returned, and broke the communicator): then
    /// that failure, taken, so that the program hears it once (`op::issue` for calls,
    /// `Request` for waits and tests). `this`: what the failure did to the caller, in words.
    pub fn or_earlier_failure(&self, e: Error, this: &str) -> Error {
        match e {
            Error::CommBroken(_) => self.take_async_error().map_or(e, |a| earlier_failure(a, this)),
            e => e,
        }
    }

    /// Queues `work`; it runs after everything queued before it. Below MPI_THREAD_MULTIPLE it
    /// runs now, on this thread. `detached`: nobody will wait for the result, so a failure
    /// becomes the communicator's asynchronous error. `p2p`: it may make point-to-point calls
    /// (host point-to-point operations then wait for it: [`Engine::no_p2p`]).
    pub fn submit(self: &Arc<Self>, work: Box<dyn FnOnce() -> Result<()> + Send>, detached: bool, p2p: bool) -> Arc<Done> {
        if !available() {
            let r = work();
            if detached {
                if let Err(e) = &r {
                    self.note_error(e);
                }
            }
            return Done::finished(r);
        }
        let done = Arc::new(Done::default());
        let mut q = lock(&self.q);
        self.reserve();
        if p2p {
            self.p2p.fetch_add(1, Ordering::AcqRel);
        }
        self.enqueue(&mut q, Job { work, done: done.clone(), detached, p2p });
        done
    }

    /// Called by a job on the engine thread: `poll` completes an operation the job started (a
    /// blocking point-to-point operation's MPI request, whose stream waits for its flag), so
    /// that the queue goes on meanwhile: one thread's blocking receive no longer holds back
    /// another thread's send on the same communicator (each rank's threads waiting for the
    /// other's messages deadlocked). The engine polls it between jobs until it returns its
    /// outcome; `poll` itself records a failure as the communicator's asynchronous error (as a
    /// blocking form's is), before it releases what waits for the operation. It
    /// counts as an outstanding point-to-point operation until then (`idle`, `drain`, `no_p2p`).
    /// Off the engine thread (no engine thread could start) it is completed here.
    pub fn watch(&self, mut poll: Watched) {
        if !on_engine_thread() || !lock(&self.q).thread {
            while poll().is_none() {
                std::thread::yield_now();
            }
            return;
        }
        // Often complete at once (a small send): then nothing is left to watch.
        if poll().is_some() {
            return;
        }
        self.reserve();
        self.p2p.fetch_add(1, Ordering::AcqRel);
        lock(&self.watched).push(poll);
    }

    /// Polls the watched operations once: (whether some are left, how many completed).
    fn poll_watched(&self) -> (bool, usize) {
        let mut list = std::mem::take(&mut *lock(&self.watched));
        if list.is_empty() {
            return (false, 0);
        }
        let mut finished = 0;
        list.retain_mut(|poll| match poll() {
            None => true,
            Some(_) => {
                finished += 1;
                false
            }
        });
        let mut g = lock(&self.watched);
        // Those a job watched meanwhile (none: jobs run on this thread) after the older ones.
        list.append(&mut g);
        *g = list;
        let left = !g.is_empty();
        drop(g);
        for _ in 0..finished {
            self.finish_one(true);
        }
        (left, finished)
    }

    /// The next pair of stream flags of this communicator on `device` ([`Flags`]).
    pub fn flag(&self, device: i32) -> Result<Flag> {
        let mut g = lock(&self.flags);
        if g.as_ref().is_none_or(|f| f.device != device) {
            *g = Some(Flags::new(device)?);
        }
        g.as_mut().expect("made above").next()
    }

    /// Counts one more outstanding operation (before it is queued).
    fn reserve(&self) {
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        *lock(&OUTSTANDING) += 1;
    }

    /// Queues a reserved job.
    fn enqueue(self: &Arc<Self>, q: &mut Queue, job: Job) {
        q.jobs.push_back(job);
        if !q.thread {
            q.thread = true;
            let me = self.clone();
            if let Err(e) = std::thread::Builder::new().name("gpuwire-engine".into()).spawn(move || me.run()) {
                // No thread: run the queue here (the caller waits, as below MULTIPLE).
                q.thread = false;
                crate::trace!("engine thread not started ({e}): running the operation on the caller's thread");
                let jobs: Vec<Job> = q.jobs.drain(..).collect();
                let was = ON_ENGINE.with(|c| c.replace(true));
                for j in jobs {
                    self.run_job(j);
                }
                ON_ENGINE.with(|c| c.set(was));
            }
        } else {
            self.cv.notify_all();
        }
    }

    /// Records `e` as the communicator's asynchronous error (the first one is kept until
    /// reported).
    pub fn note_error(&self, e: &Error) {
        let mut a = lock(&self.async_error);
        if a.is_none() {
            *a = Some(e.clone());
            self.has_async_error.store(true, Ordering::Release);
        }
    }

    fn run_job(&self, job: Job) {
        let Job { work, done, detached, p2p } = job;
        let r = work();
        if detached {
            if let Err(e) = &r {
                self.note_error(e);
            }
        }
        done.set(r);
        self.finish_one(p2p);
    }

    /// One outstanding operation (`p2p`: of those, a point-to-point one) less.
    fn finish_one(&self, p2p: bool) {
        if p2p {
            self.p2p.fetch_sub(1, Ordering::AcqRel);
        }
        self.outstanding.fetch_sub(1, Ordering::AcqRel);
        let mut n = lock(&OUTSTANDING);
        *n -= 1;
        if *n == 0 {
            OUTSTANDING_CV.notify_all();
        }
        drop(n);
        self.cv.notify_all();
    }

    fn run(self: Arc<Self>) {
        device::defer_frees_on_this_thread();
        ON_ENGINE.with(|c| c.set(true));
        THIS_ENGINE.with(|t| *t.borrow_mut() = Arc::downgrade(&self));
        // Since when watched operations are polled without waiting (`HOT`, `SPIN`).
        let mut active = Instant::now();
        loop {
            // Watched operations progress between jobs, and while none is queued.
            let (watching, completed) = self.poll_watched();
            if completed > 0 {
                active = Instant::now();
            }
            let job = {
                let mut q = lock(&self.q);
                let mut since = Instant::now();
                loop {
                    if let Some(j) = q.jobs.pop_front() {
                        break Some(j);
                    }
                    let quiet = if watching { active.elapsed() } else { SPIN };
                    if quiet < SPIN {
                        drop(q);
                        if quiet < HOT {
                            for _ in 0..16 {
                                std::hint::spin_loop();
                            }
                        } else {
                            std::thread::yield_now();
                        }
                        break None;
                    }
                    if watching {
                        let (g, _) = self.cv.wait_timeout(q, POLL).unwrap_or_else(|p| p.into_inner());
                        q = g;
                        match q.jobs.pop_front() {
                            Some(j) => break Some(j),
                            None => break None,
                        }
                    }
                    if since.elapsed() >= IDLE {
                        q.thread = false;
                        return;
                    }
                    let (g, t) = self.cv.wait_timeout(q, IDLE).unwrap_or_else(|p| p.into_inner());
                    q = g;
                    if !t.timed_out() {
                        since = Instant::now();
                    }
                }
            };
            if let Some(job) = job {
                self.run_job(job);
                // It may have started an operation to watch.
                active = Instant::now();
            }
        }
    }
}

/// Refuses a stream being captured into a CUDA graph: a capture would record the stream's waits
/// for gpuwire's flags once, and every replay would then wait on values that no replay writes.
pub fn refuse_capture(stream: Stream) -> Result<()> {
    if device::is_capturing(stream)? {
        return Err(Error::InvalidArgument(
            "the stream is being captured into a CUDA graph: device operations of the MPI and IPC backends are ordered with their stream by gpuwire's host threads, and cannot be captured (NCCL's can); nothing was done and the capture is intact: end the capture, or issue the operation outside it".into(),
        ));
    }
    Ok(())
}

/// Slots of [`Flags`] per communicator: at most this many stream-ordered operations of one
/// communicator may be unfinished at once.
const FLAG_SLOTS: usize = 8192;

/// The flags that order a stream with the host side of a stream-ordered operation
/// (`crate::backend::ordered`): pairs of 32-bit words in page-locked host memory mapped into the
/// device, one pair per operation (values grow by one per operation, never 0; slot = value mod
/// [`FLAG_SLOTS`]). The stream writes the operation's value into `ready` once the work before the
/// call has finished (`cuStreamWriteValue32`); the host side waits for it, moves the data, and
/// writes the value into `done`, which the stream waits for before the work after the call
/// (`cuStreamWaitValue32`, cyclic GEQ: a later operation's value in the slot also releases it).
///
/// The words are never freed (a stream may wait on them until the process ends): a dropped
/// engine's block goes to the next engine of its device ([`SPARE_FLAGS`]), its values going on
/// from where they stopped, so that a stream's wait enqueued before stays released. Not where
/// an operation may still be in flight, or a stream may still write a `ready` that no host side
/// saw (`tainted`): that block is kept for good, as every block was (64 KiB of page-locked memory
/// per communicator that did device work on MPI_STAGED; a helper's lifecycle hunt).
struct Flags {
    host: *mut u32,
    dev: u64,
    device: i32,
    next: u32,
    /// Whether each slot's last operation has finished (written its `done`).
    finished: Vec<Arc<std::sync::atomic::AtomicBool>>,
    /// A `Flag` of the block was dropped while a stream's write of its `ready` was enqueued and
    /// not yet seen: the stream may still write it, over a later operation's.
    tainted: Arc<std::sync::atomic::AtomicBool>,
}

// SAFETY: the mapped words are written by the host through `Flag`s and read by the device.
unsafe impl Send for Flags {}

/// Blocks of dropped engines, for the next engines of their devices ([`Flags`]).
static SPARE_FLAGS: Mutex<Vec<Flags>> = Mutex::new(Vec::new());

impl Flags {
    fn new(device: i32) -> Result<Flags> {
        {
            let mut spare = lock(&SPARE_FLAGS);
            if let Some(i) = spare.iter().position(|f| f.device == device) {
                return Ok(spare.swap_remove(i));
            }
        }
        let (host, dev) = device::mapped_words(device, 2 * FLAG_SLOTS)?;
        // One "finished" for every slot not used yet (`next` gives each operation its own): one
        // allocation, not one per slot (8192 of them, 260 KB per block).
        let done = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let finished = vec![done; FLAG_SLOTS];
        Ok(Flags { host, dev, device, next: 0, finished, tainted: Arc::default() })
    }

    fn next(&mut self) -> Result<Flag> {
        let mut v = self.next.wrapping_add(1);
        if v == 0 {
            v = 1;
        }
        let i = v as usize % FLAG_SLOTS;
        if !self.finished[i].load(Ordering::Acquire) {
            return Err(Error::InvalidArgument(format!(
                "more than {FLAG_SLOTS} stream-ordered device operations of this communicator are unfinished: wait for some of its requests first"
            )));
        }
        self.next = v;
        let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
        self.finished[i] = finished.clone();
        // SAFETY: slot i of 2 * FLAG_SLOTS words.
        let (ready, done) = unsafe { (self.host.add(2 * i), self.host.add(2 * i + 1)) };
        let dev = self.dev + 8 * i as u64;
        Ok(Flag { value: v, ready, done, ready_dev: dev, done_dev: dev + 4, finished, ready_pending: std::sync::atomic::AtomicBool::new(false), tainted: self.tainted.clone() })
    }
}

impl Drop for Flags {
    fn drop(&mut self) {
        // `finished` first: a `Flag` sets `tainted` before `finished` (so a taint is seen once
        // every flag is seen finished).
        if !self.finished.iter().all(|f| f.load(Ordering::Acquire)) || self.tainted.load(Ordering::Acquire) {
            return;
        }
        let spare = Flags {
            host: self.host,
            dev: self.dev,
            device: self.device,
            next: self.next,
            finished: std::mem::take(&mut self.finished),
            tainted: self.tainted.clone(),
        };
        // (The spare's own drop, should the list be dropped, would only push it back: the list
        // is a static, never dropped.)
        lock(&SPARE_FLAGS).push(spare);
    }
}

/// One operation's pair of [`Flags`]. Dropping it writes `done` (releases the stream), so every
/// path out of an operation, failures too, releases it.
#[derive(Debug)]
pub struct Flag {
    pub value: u32,
    ready: *const u32,
    done: *mut u32,
    /// The device addresses of the pair, for `device::stream_write` ([`Flag::ready_word`]) and
    /// `stream_wait_geq`.
    ready_dev: u64,
    pub done_dev: u64,
    finished: Arc<std::sync::atomic::AtomicBool>,
    /// A stream's write of `ready` is enqueued ([`Flag::ready_word`]) and no host side saw it yet.
    ready_pending: std::sync::atomic::AtomicBool,
    tainted: Arc<std::sync::atomic::AtomicBool>,
}

// SAFETY: the words are mapped host memory, alive for the process, read and written volatile.
unsafe impl Send for Flag {}

impl Flag {
    /// The device address of `ready`, for the stream's write of it (`device::stream_write`),
    /// which [`Flag::wait_ready`] then waits for.
    pub fn ready_word(&self) -> u64 {
        self.ready_pending.store(true, Ordering::Release);
        self.ready_dev
    }

    /// Whether the stream has written `ready`.
    fn ready_reached(&self) -> bool {
        // SAFETY: a mapped word (see `Flags`).
        let now = unsafe { std::ptr::read_volatile(self.ready) };
        (now.wrapping_sub(self.value) as i32) >= 0 && now != 0
    }

    /// Waits on the host until the stream has written `ready` (the work before the call has
    /// finished), or `stop` gives a reason to give up (the communicator broken). No CUDA call.
    pub fn wait_ready(&self, stop: &dyn Fn() -> Option<Error>) -> Result<()> {
        let t0 = Instant::now();
        let mut n = 0u32;
        loop {
            if self.ready_reached() {
                std::sync::atomic::fence(Ordering::Acquire);
                self.ready_pending.store(false, Ordering::Release);
                return Ok(());
            }
            n += 1;
            if n % 16 == 0 {
                // The stream may wait for a watched operation's flag (a send enqueued behind a
                // blocking receive on the same stream): polled from the start, not only once the
                // wait sleeps (2 ms each blocking ping-pong on MPI_STAGED otherwise).
                poll_this_engine();
            }
            if n < 2000 {
                std::hint::spin_loop();
            } else if t0.elapsed() < Duration::from_millis(2) {
                std::thread::yield_now();
            } else {
                if n % 64 == 0 {
                    if let Some(e) = stop() {
                        return Err(e);
                    }
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }
}

impl Drop for Flag {
    fn drop(&mut self) {
        if self.ready_pending.load(Ordering::Acquire) && !self.ready_reached() {
            self.tainted.store(true, Ordering::Release);
        }
        std::sync::atomic::fence(Ordering::Release);
        // SAFETY: a mapped word (see `Flags`).
        unsafe { std::ptr::write_volatile(self.done, self.value) };
        std::sync::atomic::fence(Ordering::SeqCst);
        self.finished.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::turn::{self, TurnLock};
    use std::sync::mpsc;

    /// Two threads' groups keep two NCCL communicators' turns in opposite orders while a third
    /// thread's calls, queued on both engines, need those turns: each group's drain of the other
    /// communicator's engine would wait for ever. One of the two drains is refused; the other
    /// returns once the refused thread's group has ended, and the queued calls then run.
    #[test]
    fn a_drain_that_closes_a_cycle_of_turns_is_refused() {
        set_thread_multiple(true);
        let (x, y) = (Arc::new(TurnLock::default()), Arc::new(TurnLock::default()));
        let (ex, ey) = (Arc::new(Engine::default()), Arc::new(Engine::default()));
        ex.set_turn(x.share());
        ey.set_turn(y.share());
        let (held_tx, held_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        let mut go = Vec::new();
        for (mine, other) in [(x.clone(), ey.clone()), (y.clone(), ex.clone())] {
            let (held, done) = (held_tx.clone(), done_tx.clone());
            let (go_tx, go_rx) = mpsc::channel::<()>();
            go.push(go_tx);
            std::thread::spawn(move || {
                turn::begin_group();
                drop(mine.take().unwrap());
                held.send(()).unwrap();
                go_rx.recv().unwrap();
                let r = other.drain();
                turn::end_group();
                done.send(r).unwrap();
            });
        }
        held_rx.recv().unwrap();
        held_rx.recv().unwrap();
        // The third thread's calls, each needing its communicator's turn.
        let queued: Vec<Arc<Done>> = [(&ex, &x), (&ey, &y)]
            .into_iter()
            .map(|(e, t)| {
                let t = t.clone();
                e.submit(Box::new(move || t.take().map(drop)), false, false)
            })
            .collect();
        for g in go {
            g.send(()).unwrap();
        }
        let within = Duration::from_secs(20);
        let first = done_rx.recv_timeout(within).expect("a drain of a cycle of turns hung");
        let second = done_rx.recv_timeout(within).expect("the other drain did not return after the refused group ended");
        let refused: Vec<&Error> = [&first, &second].into_iter().filter_map(|r| r.as_ref().err()).collect();
        assert_eq!(refused.len(), 1, "exactly one of the two drains is refused: {first:?}, {second:?}");
        assert_eq!(refused[0].status(), crate::error::Status::GPUWIRE_ERROR_INVALID_ARGUMENT, "{}", refused[0]);
        for d in queued {
            let r = d.wait_until(Some(Instant::now() + within)).expect("a queued call never ran");
            assert!(r.is_ok(), "{r:?}");
        }
        assert!(!x.mine() && !y.mine());
    }
}

/// The error of a call or request that met an earlier operation's asynchronous failure `a`.
#[cold]
pub fn earlier_failure(a: Error, this: &str) -> Error {
    Error::from_status(a.status(), format!("an earlier operation on this communicator failed after its call had returned ({this}): {a}"))
}
