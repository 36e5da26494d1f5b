//! The progress engine: operations that complete after their call returned.
//!
//! Each communicator has one engine: a queue of operations run in call order by a thread of
//! gpuwire's (started at the first queued operation, gone 50 ms after the queue ran dry). It runs
//! what must not block the caller: the nonblocking collectives on host memory, the device
//! operations of the MPI and IPC paths (stream-ordered: see [`Gate`]), and every operation issued
//! while earlier ones are still queued (so operations of one communicator always reach MPI in
//! call order, the same on every rank). An operation runs on the engine exactly as its blocking
//! form runs on the caller's thread (the same code: `Communicator::allreduce` and its
//! neighbours), so a nonblocking form matches the blocking form on another rank.
//!
//! The engine calls MPI from its own thread: it needs MPI_THREAD_MULTIPLE. Below that level
//! ([`available`] false) every operation runs on the caller's thread before the call returns.
//!
//! This module knows nothing of backends: it runs closures, records completions and errors, and
//! orders device streams.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::device::{self, CtxGuard, Event, Stream};
use crate::error::{Error, Result};

/// How long an idle engine thread waits for more work before it ends.
const IDLE: Duration = Duration::from_millis(50);

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

/// Whether `GPUWIRE_HOST_SYNC=1`: every device operation also waits for its completion on the
/// host (MPI's blocking meaning; for debugging).
pub fn host_sync() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| crate::config::env_flag("GPUWIRE_HOST_SYNC"))
}

/// Blocks until no engine has an operation queued or running (gpuwire_finalize, before MPI is
/// finalized).
pub fn drain_all() {
    let mut n = lock(&OUTSTANDING);
    while *n > 0 {
        n = OUTSTANDING_CV.wait(n).unwrap_or_else(|p| p.into_inner());
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
    work: Box<dyn FnOnce(Stream) -> Result<()> + Send>,
    done: Arc<Done>,
    /// Device ordering: the event at the call's place in the caller's stream (waited for before
    /// the work) and the gate value to release afterwards.
    gate: Option<(Event, i32, u32)>,
    /// Whether nobody waits for this job's result: a failure is then kept as the
    /// communicator's asynchronous error.
    detached: bool,
}

// SAFETY: the event is a CUDA handle, usable from any thread with its context current.
unsafe impl Send for Job {}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Whether the engine thread is running.
    thread: bool,
}

/// A communicator's engine.
#[derive(Default)]
pub struct Engine {
    q: Mutex<Queue>,
    cv: Condvar,
    /// Queued or running operations.
    outstanding: AtomicUsize,
    gate: Mutex<Option<Gate>>,
    /// The first failure of an operation that nobody waits for, until reported.
    async_error: Mutex<Option<Error>>,
    /// Whether `async_error` is set (read without the lock on every call).
    has_async_error: std::sync::atomic::AtomicBool,
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

    /// Waits until everything queued so far has run (an operation that must run on the
    /// caller's thread, after the queued ones).
    pub fn drain(&self) {
        if self.idle() {
            return;
        }
        let mut g = lock(&self.q);
        while self.outstanding.load(Ordering::Acquire) > 0 {
            g = self.cv.wait_timeout(g, Duration::from_millis(1)).unwrap_or_else(|p| p.into_inner()).0;
        }
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

    /// Queues `work`; it runs after everything queued before it. Below MPI_THREAD_MULTIPLE it
    /// runs now, on this thread. `detached`: nobody will wait for the result, so a failure
    /// becomes the communicator's asynchronous error.
    pub fn submit(self: &Arc<Self>, work: Box<dyn FnOnce() -> Result<()> + Send>, detached: bool) -> Arc<Done> {
        self.push(Box::new(move |_| work()), None, detached)
    }

    /// Queues device work ordered in `stream` (see [`Gate`]): it runs once the work enqueued on
    /// `stream` before this call has finished, and `stream`'s later work waits until it has run.
    /// The caller's thread never waits. `Ok(None)`, nothing queued, where streams cannot be
    /// ordered so (below MPI_THREAD_MULTIPLE, or a driver without stream memory operations):
    /// the caller then runs the operation itself, blocking. Fails when `stream` is being
    /// captured into a CUDA graph. `work` gets the engine's private stream of `device` (a
    /// non-blocking stream: the caller's may be the legacy stream, waiting for the engine), and
    /// must have finished its work there when it returns.
    pub fn submit_on_stream(self: &Arc<Self>, device: i32, stream: Stream, work: Box<dyn FnOnce(Stream) -> Result<()> + Send>, detached: bool) -> Result<Option<Arc<Done>>> {
        if !stream_ordered() {
            return Ok(None);
        }
        let _ctx = CtxGuard::enter(device)?;
        refuse_capture(stream)?;
        let ev = Event::new()?;
        ev.record(stream)?;
        // The queue lock orders gate values as the queue orders jobs. Counted as outstanding
        // before the stream waits, so no deferred free runs while it does (`device::free_deferred`).
        let mut q = lock(&self.q);
        self.reserve();
        let value = {
            let mut g = lock(&self.gate);
            if g.is_none() {
                match Gate::new(device) {
                    Ok(gate) => *g = Some(gate),
                    Err(e) => {
                        self.unreserve();
                        return Ok(refused(e));
                    }
                }
            }
            let gate = g.as_mut().expect("made above");
            let v = gate.next.wrapping_add(1);
            if let Err(e) = gate.hold(stream, v) {
                self.unreserve();
                return Ok(refused(e));
            }
            gate.next = v;
            v
        };
        let done = Arc::new(Done::default());
        crate::trace!("engine: queued stream-ordered operation {value} (stream {:#x})", stream.0);
        self.enqueue(&mut q, Job { work, done: done.clone(), gate: Some((ev, device, value)), detached });
        Ok(Some(done))
    }

    fn push(self: &Arc<Self>, work: Box<dyn FnOnce(Stream) -> Result<()> + Send>, gate: Option<(Event, i32, u32)>, detached: bool) -> Arc<Done> {
        if !available() {
            let r = work(Stream(0));
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
        self.enqueue(&mut q, Job { work, done: done.clone(), gate, detached });
        done
    }

    /// Counts one more outstanding operation (before it is queued).
    fn reserve(&self) {
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        *lock(&OUTSTANDING) += 1;
    }

    fn unreserve(&self) {
        self.outstanding.fetch_sub(1, Ordering::AcqRel);
        let mut n = lock(&OUTSTANDING);
        *n -= 1;
        if *n == 0 {
            OUTSTANDING_CV.notify_all();
        }
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
                for j in jobs {
                    self.run_job(j);
                }
            }
        } else {
            self.cv.notify_all();
        }
    }

    fn note_error(&self, e: &Error) {
        let mut a = lock(&self.async_error);
        if a.is_none() {
            *a = Some(e.clone());
            self.has_async_error.store(true, Ordering::Release);
        }
    }

    fn run_job(&self, job: Job) {
        let Job { work, done, gate, detached } = job;
        let mut release = None;
        let r = (|| {
            let Some((ev, device, value)) = gate else { return work(Stream(0)) };
            let _ctx = CtxGuard::enter(device)?;
            release = Some(value);
            // The call's place in the caller's stream: the data it reads is final.
            crate::trace!("engine: operation {value} waits for its place in the stream");
            ev.wait_host()?;
            let s = lock(&self.gate).as_ref().map(|g| g.work).unwrap_or(Stream(0));
            crate::trace!("engine: operation {value} runs");
            let r = work(s);
            crate::trace!("engine: operation {value} done ({})", if r.is_ok() { "ok" } else { "failed" });
            r
        })();
        if let Some(v) = release {
            if let Some(g) = lock(&self.gate).as_ref() {
                g.release(v);
                crate::trace!("engine: released the streams waiting for operation {v}");
            }
        }
        if detached {
            if let Err(e) = &r {
                self.note_error(e);
            }
        }
        done.set(r);
        self.outstanding.fetch_sub(1, Ordering::AcqRel);
        let mut n = lock(&OUTSTANDING);
        *n -= 1;
        if *n == 0 {
            // No stream waits on engine work any more: what engines dropped can be freed.
            device::free_deferred();
            OUTSTANDING_CV.notify_all();
        }
        drop(n);
        self.cv.notify_all();
    }

    fn run(self: Arc<Self>) {
        device::defer_frees_on_this_thread();
        loop {
            let job = {
                let mut q = lock(&self.q);
                let mut since = Instant::now();
                loop {
                    if let Some(j) = q.jobs.pop_front() {
                        break j;
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
            self.run_job(job);
        }
    }
}

/// Set when the driver refused a stream gate: device operations block the caller from then on.
static GATE_REFUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn refused(e: Error) -> Option<Arc<Done>> {
    crate::trace!("stream ordering on the progress engine refused ({e}): device operations block the host from now on");
    GATE_REFUSED.store(true, Ordering::Relaxed);
    None
}

/// Whether `GPUWIRE_STREAM_ORDERED=1`: device operations of the MPI and IPC paths are
/// stream-ordered through the engine's [`Gate`]. Experimental, off by default. Seen on the H200
/// (2026-12-01, `diag` runs of GPU case c14 with GPUWIRE_DEBUG=1): one rank passes every
/// operation; with two ranks (MPI_STAGED and IPC alike) a reduce hung while the engine ran it
/// and the program's main thread called `cuMemFree` on another buffer. `cuMemFree` waits for
/// the device's outstanding work, which includes the caller's stream waiting on the gate, while
/// the engine needs CUDA calls (its copies) to release the gate. Any device-synchronizing CUDA
/// call of the program (cudaFree, cudaMallocHost, ...) while an operation is pending can so
/// deadlock. The way out is NCCL's: enqueue every CUDA step of an operation (the copies to and
/// from pinned staging, the reduction kernels) on the caller's stream at the call, around
/// stream waits and stream writes, so that the engine itself makes MPI calls on host memory and
/// writes flags, and never calls CUDA.
fn stream_ordered_requested() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| crate::config::env_flag("GPUWIRE_STREAM_ORDERED"))
}

/// Whether device operations of the MPI and IPC paths are stream-ordered: requested
/// (`GPUWIRE_STREAM_ORDERED=1`), not refused by the driver so far, and the engine available.
pub fn stream_ordered() -> bool {
    stream_ordered_requested() && available() && !GATE_REFUSED.load(Ordering::Relaxed) && !host_sync()
}

/// Refuses a stream being captured into a CUDA graph: a capture would record the stream wait
/// once, and every replay would then wait on a value that no replay releases.
pub fn refuse_capture(stream: Stream) -> Result<()> {
    if device::is_capturing(stream)? {
        return Err(Error::InvalidArgument(
            "the stream is being captured into a CUDA graph: device operations of the MPI and IPC backends wait for the stream on the host or on gpuwire's progress engine, and cannot be captured (NCCL's can); nothing was done and the capture is intact: end the capture, or issue the operation outside it".into(),
        ));
    }
    Ok(())
}

/// Stream ordering of engine work: a counter in page-locked host memory mapped into the device.
/// A call enqueues on its stream a wait until the counter reaches the call's value
/// (`cuStreamWaitValue32`, cyclic GEQ), so the stream's later work waits; the engine, once the
/// event recorded at the call's place has completed and the work has run, writes the value.
/// Values grow by one per call in queue order, and the engine runs calls in that order.
struct Gate {
    host: *mut u32,
    dev: u64,
    next: u32,
    /// The stream the engine's device work runs on (non-blocking; never destroyed).
    work: Stream,
}

// SAFETY: the mapped word is written by the engine and read by the device only.
unsafe impl Send for Gate {}

impl Gate {
    fn new(device: i32) -> Result<Gate> {
        let (host, dev) = device::mapped_word(device)?;
        let work = device::private_stream(device)?;
        Ok(Gate { host, dev, next: 0, work })
    }

    fn hold(&self, stream: Stream, value: u32) -> Result<()> {
        device::stream_wait_geq(stream, self.dev, value)
    }

    fn release(&self, value: u32) {
        // SAFETY: `host` is the mapped word, alive for the process (never freed: a stream may
        // still wait on it).
        unsafe { std::ptr::write_volatile(self.host, value) };
        std::sync::atomic::fence(Ordering::SeqCst);
    }
}
