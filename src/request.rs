//! Requests of nonblocking operations (isend/irecv, the nonblocking collectives), as MPI_Request.
//!
//! A request keeps its communicator and buffers alive until it completes, so freeing either
//! handle while a transfer is in flight is safe. Completing a request (wait, or a test that
//! reports completion) frees its handle, as MPI sets a completed request to MPI_REQUEST_NULL.
//! Freeing a request that has not completed (gpuwire_request_free, the C++ destructor, Python's
//! garbage collector) never blocks: its operation goes on (`Detached`), as after
//! MPI_Request_free. Cancelling one (gpuwire_cancel, MPI_Cancel) withdraws a receive whose
//! message has not matched, where its path can (`Pending::cancel`); the C++ destructor and
//! Python's collector cancel before they free.

use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::error::{Error, Result};
use crate::handles::{self, Kind, Registry};

/// What a completed receive matched: the source rank, the tag and the element count received
/// (`gpuwire_status_t` without its error). Every other request, a GPUWIRE_REQUEST_NULL and a
/// receive that has not matched report [`Status::EMPTY`], as MPI's empty status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    pub source: i32,
    pub tag: i32,
    pub count: i64,
    /// The request was cancelled (gpuwire_cancel): nothing was received (MPI_Test_cancelled).
    pub cancelled: bool,
}

impl Status {
    /// MPI's empty status: any source, any tag, no elements.
    pub const EMPTY: Status = Status { source: crate::types::ANY_SOURCE, tag: crate::types::ANY_TAG, count: 0, cancelled: false };
    /// The status of a cancelled receive: the empty status, cancelled.
    pub const CANCELLED: Status = Status { cancelled: true, ..Status::EMPTY };
}

/// All live requests, by handle.
pub static REQUESTS: Registry<Request> = Registry::new(Kind::Request);

/// Most allocations of completed requests a thread keeps for its next ones ([`register`],
/// [`release`]).
const SPARE_REQUESTS: usize = handles::SPARES;

thread_local! {
    /// Allocations of this thread's completed requests, for its next ones.
    static SPARE: RefCell<Vec<handles::Spare<Request>>> = const { RefCell::new(Vec::new()) };
}

/// Registers `r` and returns its handle: in the allocation of a request that this thread
/// completed earlier when it has one (no allocation per request in a loop of isends and waits).
#[inline]
pub fn register(r: Request) -> Result<u64> {
    let spare = SPARE.try_with(|s| s.borrow_mut().pop()).ok().flatten();
    let a = match spare {
        Some(m) => handles::refill(m, r),
        None => Arc::new(r),
    };
    REQUESTS.insert(a)
}

/// Unregisters `h`, a completed (or failed) request: later uses of `h` fail as freed, and its
/// object's allocation is kept for the thread's next request when nothing else refers to it.
pub fn release(h: u64) {
    let Ok(r) = REQUESTS.remove(h) else { return };
    if let Some(m) = handles::vacate(r) {
        let _ = SPARE.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < SPARE_REQUESTS {
                s.push(m);
            }
        });
    }
}

/// How long a wait or test on a communicator found broken waits for an engine's operation to
/// report its own outcome ([`Pending::test_settled`]); the engine's MPI loop sees the break
/// within milliseconds.
const SETTLE: Duration = Duration::from_millis(500);

/// The backend's half of a nonblocking operation.
pub trait Pending: Send {
    /// Blocks until the operation is complete (its data is in place).
    fn wait(&mut self) -> Result<()>;
    /// Whether the operation is complete, without blocking; true finishes it as `wait` does.
    fn test(&mut self) -> Result<bool>;
    /// Gives the operation up without blocking: cancels it where the backend can, and never
    /// frees memory that MPI, a device or a peer may still read or write. Returns true when
    /// nothing is left in flight (it completed or was cancelled), false when something may still
    /// use the request's buffer (which must then never be freed). The default leaks the whole
    /// operation.
    fn abandon(self: Box<Self>) -> bool {
        std::mem::forget(self);
        false
    }
    /// Whether the operation may be waited for or tested now: an operation of a group that has
    /// not ended may not (it starts at the group's end); the default is yes.
    fn ready_to_wait(&self) -> Result<()> {
        Ok(())
    }
    /// Whether a blocking wait for it may start now (beyond [`Self::ready_to_wait`]): refused
    /// where the wait could never return; tests, which never block, do not ask. The default is
    /// yes.
    fn ready_to_block(&self) -> Result<()> {
        Ok(())
    }
    /// Whether [`Self::ready_to_wait`] and [`Self::ready_to_block`] are the defaults, which
    /// always allow: the request then answers them without taking its lock. The default is no
    /// (an implementation that overrides either must leave this so).
    fn always_ready(&self) -> bool {
        false
    }
    /// What the receive matched, once it has (also when it failed after matching, e.g. a
    /// truncated message); `None` for other operations and where the path does not know (the
    /// request's own default is then used: `Request::with_status`).
    fn status(&self) -> Option<Status> {
        None
    }
    /// A failure of a part of the operation known before the whole completed (a sendrecv whose
    /// receive part failed while its send part goes on): what a timeout that gives up the rest
    /// reports first, the timeout appended (as a host sendrecv returns its receive's failure).
    /// The default: none.
    fn failed_part(&self) -> Option<Error> {
        None
    }
    /// gpuwire_cancel (MPI_Cancel): withdraws the operation if it can be withdrawn without
    /// effect (a receive whose message has not matched): true, and the operation then tests
    /// complete, nothing written, nothing matched. Otherwise false, the operation left as it was
    /// to complete as it would have (a send, a collective, a receive already matched, and the
    /// paths that cannot withdraw a receive: the default).
    fn cancel(&mut self) -> bool {
        false
    }
    /// Drops the completed operation; a path may keep its allocation for the thread's next
    /// operation ([`handles::unbox`]). The default drops it.
    fn recycle(self: Box<Self>) {}
    /// On a communicator found broken: whether the operation is complete, waiting up to `until`
    /// for an outcome that is on its way. An operation run by gpuwire's engine ends promptly
    /// once its communicator is broken, and the timeout that broke it may be this operation's
    /// own (its error, TIMEOUT, is then the one to report, not the COMM_BROKEN it caused), so
    /// such a path waits for the engine's result; the default tests once.
    fn test_settled(&mut self, until: Instant) -> Result<bool> {
        let _ = until;
        self.test()
    }
}

/// The buffers a request keeps alive: isend's and irecv's one without a Vec of its own.
enum Held {
    One(Arc<Buffer>),
    Many(Vec<Arc<Buffer>>),
}

impl Held {
    /// Another hold on the same buffers.
    fn share(&self) -> Held {
        match self {
            Held::One(b) => Held::One(b.clone()),
            Held::Many(v) => Held::Many(v.clone()),
        }
    }

    /// Keeps the buffers alive for the life of the process (MPI may still use them).
    fn keep_for_ever(&self) {
        match self {
            Held::One(b) => std::mem::forget(b.clone()),
            Held::Many(v) => std::mem::forget(v.clone()),
        }
    }
}

/// A request's operation and what it matched, under one lock (a wait or test takes it once).
struct Inner {
    /// The operation, until it completed (or failed, or was given up).
    pending: Option<Box<dyn Pending>>,
    /// What the operation matched, noted when it completed (or failed).
    matched: Option<Status>,
    /// A wait or test of the C API ([`Request::finish`]) reported the request complete (or
    /// failed): its handle is released next, and another thread's wait that raced it finds this.
    reported: bool,
    /// gpuwire_cancel withdrew the operation ([`Pending::cancel`]): its status says so.
    cancelled: bool,
}

type Locked<'a> = std::sync::MutexGuard<'a, Inner>;

/// A nonblocking operation in flight.
pub struct Request {
    inner: Mutex<Inner>,
    comm: Arc<Communicator>,
    /// The buffers the operation reads or writes, kept alive until it completes.
    bufs: Held,
    /// The status of a receive whose path reports none (a known source and tag, the buffer's
    /// count: the NCCL and IPC paths, whose receives take exactly their buffer).
    /// (Status::EMPTY where the path reports its own.)
    default_status: Status,
    /// The operation's [`Pending::always_ready`].
    always_ready: bool,
    /// The thread (`comm::thread_id`) of a gpuwire_waitany, gpuwire_waitsome or gpuwire_waitall
    /// that holds the request for its whole call, as gpuwire_wait holds its request (0: none):
    /// meanwhile another thread's cancel, free or test of it is refused, and its wait waits until
    /// the call lets go ([`Self::hold`]).
    held: std::sync::atomic::AtomicU64,
}

/// An operation whose request gpuwire_request_free released while it was in flight: it goes on,
/// as after MPI_Request_free (a send, a receive, a nonblocking collective), and its buffers and
/// communicator stay alive until it completes.
struct Detached {
    op: Box<dyn Pending>,
    bufs: Held,
    /// Kept alive for the operation (a send refers to its communicator).
    _comm: Arc<Communicator>,
}

/// The detached operations of the process, and how many (read without the lock).
static DETACHED: Mutex<Vec<Detached>> = Mutex::new(Vec::new());
static N_DETACHED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Releases the detached operations that have completed (never blocks). One that failed has
/// nobody to tell, as a request freed in MPI: its error is lost, but for a line on stderr. It is
/// not made the communicator's asynchronous error, which the next operation of this rank alone
/// would return instead of running: when a rank notices depends on its own calls and timing, so
/// the ranks would skip different collectives (found by a new-user pass: wrong sums reported
/// as success in checking mode, or a hang). A failure that breaks the communicator (a timeout)
/// still breaks it.
///
/// Run at every gpuwire wait or test of a request (`Request::finish`) and after every progress
/// pass of gpuwire's waits and tests (`progress::register`), never by the progress thread or an
/// engine thread (a device operation's test makes CUDA calls, which an engine thread must not).
/// MPI, the stream, the peer, the engine or the progress of deferred receives moves them on;
/// what completes here is the last step of some (a receive into a view unpacks its message).
pub fn reap_detached() {
    use std::sync::atomic::Ordering;
    if N_DETACHED.load(Ordering::Relaxed) == 0 || crate::engine::on_engine_thread() {
        return;
    }
    // A test below may run a progress pass itself: the list is then busy and left alone.
    let Ok(mut list) = DETACHED.try_lock() else { return };
    list.retain_mut(|d| match d.op.test() {
        Ok(false) => true,
        Ok(true) => false,
        Err(e) => {
            d.failed(&e);
            false
        }
    });
    N_DETACHED.store(list.len(), Ordering::Relaxed);
}

/// At gpuwire_finalize (after the engines ran their queues), the requests whose handles were
/// never completed or freed (`list`: the registry's, drained) and the operations of freed ones
/// (`Detached`): a completed one is released; then `before_abandon` runs (`ffi::lifecycle`: the
/// receives still deferred are posted to MPI, `p2p::post_deferred_at_finalize`, which returns
/// how many); then each one still in flight is given up ([`Pending::abandon`]: a receive not yet
/// matched is withdrawn; whatever MPI, a peer or a device may still read or write keeps its
/// buffers for the rest of the process, never freed under it). A request that another thread
/// still waits for (erroneous: gpuwire_finalize is called once no other thread uses gpuwire)
/// counts as in flight and is kept whole. Returns how many of `list` were in flight (a freed
/// request's operation is left to MPI as MPI_Request_free leaves it, not counted), and
/// `before_abandon`'s count, which gpuwire_finalize reports as an error once it has finalized.
pub fn settle_at_finalize(list: Vec<Arc<Request>>, before_abandon: impl FnOnce() -> usize) -> (usize, usize) {
    let detached = std::mem::take(&mut *DETACHED.lock().unwrap_or_else(|e| e.into_inner()));
    N_DETACHED.store(0, std::sync::atomic::Ordering::Relaxed);
    let mut going = Vec::new();
    for mut d in detached {
        match d.op.test() {
            Ok(true) => {}
            Err(e) => d.failed(&e),
            Ok(false) => going.push(d),
        }
    }
    let mut in_flight = Vec::new();
    let mut busy = 0;
    for r in list {
        let taken = match r.inner.try_lock() {
            Ok(mut i) => Some(i.pending.take()),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner().pending.take()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        let Some(op) = taken else {
            busy += 1;
            std::mem::forget(r);
            continue;
        };
        let Some(mut op) = op else { continue };
        match op.test() {
            Ok(true) => op.recycle(),
            Err(e) => r.keep_if_abandoned(&e),
            Ok(false) => in_flight.push((r, op)),
        }
    }
    let n = in_flight.len() + busy;
    let posted = before_abandon();
    for d in going {
        let bufs = d.bufs.share();
        if !d.op.abandon() {
            bufs.keep_for_ever();
        }
    }
    for (r, op) in in_flight {
        r.give_up(op);
    }
    (n, posted)
}

impl Detached {
    /// It failed: its buffers are kept for ever if MPI may still use them (a timeout), and the
    /// error, which has no caller to go to, is a line on stderr.
    fn failed(&self, e: &Error) {
        if e.abandons() {
            self.bufs.keep_for_ever();
        }
        let line = format!("gpuwire[{}]: warning: an operation whose request was freed failed (the error has no caller to go to): {e}\n", std::process::id());
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    }
}

impl Request {
    pub fn new(pending: Box<dyn Pending>, comm: Arc<Communicator>, bufs: Vec<Arc<Buffer>>) -> Request {
        Self::holding(pending, comm, Held::Many(bufs))
    }

    /// A request of an operation on one buffer (isend, irecv).
    pub fn of_one(pending: Box<dyn Pending>, comm: Arc<Communicator>, buf: Arc<Buffer>) -> Request {
        Self::holding(pending, comm, Held::One(buf))
    }

    #[inline]
    fn holding(pending: Box<dyn Pending>, comm: Arc<Communicator>, bufs: Held) -> Request {
        let always_ready = pending.always_ready();
        Request {
            inner: Mutex::new(Inner { pending: Some(pending), matched: None, reported: false, cancelled: false }),
            comm,
            bufs,
            default_status: Status::EMPTY,
            always_ready,
            held: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The request with the status it reports when its path reports none.
    pub fn with_status(mut self, s: Status) -> Request {
        self.default_status = s;
        self
    }

    /// The status of a completed (or failed) request: what its receive matched, else
    /// [`Status::EMPTY`].
    pub fn status(&self) -> Status {
        self.status_of(&self.lock())
    }

    fn status_of(&self, i: &Inner) -> Status {
        if i.cancelled {
            return Status::CANCELLED;
        }
        i.matched.unwrap_or(self.default_status)
    }

    /// gpuwire_cancel: the operation is withdrawn where it can be ([`Pending::cancel`]: a
    /// receive whose message has not matched), and then completes at once, its status cancelled;
    /// else it is left to complete as it would have. Never blocks. A request already complete
    /// is left as it is. `Err` (the request left as it was): a request of a group that has not
    /// ended, one that another thread waits for or tests, one already reported complete.
    /// `Ok(true)` where it was withdrawn.
    pub fn cancel(&self) -> Result<bool> {
        let mut i = self.try_lock(0)?;
        if i.reported {
            return Err(Self::reported_elsewhere());
        }
        Self::ready(&i, false)?;
        if let Some(op) = i.pending.as_mut() {
            i.cancelled |= op.cancel();
        }
        Ok(i.cancelled)
    }

    fn lock(&self) -> Locked<'_> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes what `op` matched (at its completion or failure).
    fn note(matched: &mut Option<Status>, op: &dyn Pending) {
        if let Some(s) = op.status() {
            *matched = Some(s);
        }
    }

    /// The communicator of the request.
    pub fn comm(&self) -> &Arc<Communicator> {
        &self.comm
    }

    /// Whether the request may be waited for or tested now ([`Pending::ready_to_wait`]); a
    /// completed request may.
    pub fn ready_to_wait(&self) -> Result<()> {
        if self.always_ready {
            return Ok(());
        }
        Self::ready(&self.lock(), false)
    }

    /// [`Self::ready_to_wait`], for a blocking wait ([`Pending::ready_to_block`]).
    pub fn ready_to_block(&self) -> Result<()> {
        if self.always_ready {
            return Ok(());
        }
        Self::ready(&self.lock(), true)
    }

    /// gpuwire_request_free's claim of the request before it releases the handle, under one
    /// lock: `Err` where [`Self::ready_to_wait`] refuses, while another thread waits for or
    /// tests the request (MPI: erroneous; the free would block until that wait ends, for ever if
    /// it never does), and where another thread's wait or test reported it complete. Else the
    /// request is marked reported, so that a wait or test that another thread begins meanwhile
    /// fails (INVALID_HANDLE) instead of completing it too, and its operation, if any, is
    /// returned for [`Self::free_op`]. (A test, then the free, let such a wait in between: both
    /// calls then succeeded, the free after that wait.)
    pub fn claim_for_free(&self) -> Result<Option<Box<dyn Pending>>> {
        let mut i = self.try_lock(0)?;
        if i.reported {
            return Err(Self::reported_elsewhere());
        }
        Self::ready(&i, false)?;
        i.reported = true;
        Ok(i.pending.take())
    }

    /// [`Self::ready_to_wait`] for a test (gpuwire_testany, gpuwire_testall), which never blocks:
    /// `Err` while another thread waits for or tests the request, as [`Self::claim_for_free`].
    pub fn ready_to_test(&self) -> Result<()> {
        Self::ready(&*self.try_lock(0)?, false)
    }

    /// The request's lock, unless another thread holds it or the request (it waits for or
    /// tests the request: erroneous in MPI): then INVALID_ARGUMENT, the request left as it was.
    /// `me`: as in [`Self::finish`].
    fn try_lock(&self, me: u64) -> Result<Locked<'_>> {
        if self.held_by_other(me) {
            return Err(Self::busy());
        }
        match self.inner.try_lock() {
            Ok(i) => Ok(i),
            Err(std::sync::TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => Err(Self::busy()),
        }
    }

    fn busy() -> Error {
        Error::InvalidArgument(
            "another thread is waiting for or testing this request: a request may be completed, tested or freed by one thread at a time (as in MPI); the request was left as it was".into(),
        )
    }

    /// gpuwire_waitany, gpuwire_waitsome and gpuwire_waitall hold each of their requests for
    /// their whole call, by their thread `me` (`comm::thread_id`), as gpuwire_wait holds its
    /// request by its lock (theirs they take one at a time, to test or wait): another thread's
    /// cancel, free or test is refused meanwhile (`try_lock`), and its wait waits until the call
    /// lets go ([`Self::finish`]), then finds the request reported complete by the call
    /// (INVALID_HANDLE) or waits for it. The call lets go of those it did not complete
    /// ([`Self::unhold`]).
    pub fn hold(&self, me: u64) {
        self.held.store(me, std::sync::atomic::Ordering::Release);
    }

    /// Lets go of the request held by thread `me` ([`Self::hold`]).
    pub fn unhold(&self, me: u64) {
        use std::sync::atomic::Ordering;
        let _ = self.held.compare_exchange(me, 0, Ordering::Release, Ordering::Relaxed);
    }

    /// Whether a gpuwire_waitany, gpuwire_waitsome or gpuwire_waitall holds the request
    /// ([`Self::hold`]), other than the caller's own (`me`, 0 for a call that holds none: the
    /// calls of a thread inside such a call are that call's).
    #[inline]
    fn held_by_other(&self, me: u64) -> bool {
        let h = self.held.load(std::sync::atomic::Ordering::Acquire);
        h != 0 && h != me
    }

    fn ready(i: &Inner, block: bool) -> Result<()> {
        match i.pending.as_ref() {
            Some(p) if block => p.ready_to_wait().and_then(|()| p.ready_to_block()),
            Some(p) => p.ready_to_wait(),
            None => Ok(()),
        }
    }

    /// gpuwire_wait (`wait`) or gpuwire_test of the request, under one lock: `Err` when it may
    /// not be waited for yet ([`Self::ready_to_wait`]: left as it was); else the outcome of
    /// [`Self::wait`] (as `Ok(true)`) or [`Self::test`], with the request's status then.
    ///
    /// A test never blocks: `Err` while another thread waits for or tests the request (it
    /// blocked until that wait ended). A wait blocks behind another thread's wait or test of the
    /// request, and then fails with INVALID_HANDLE where that one reported the request complete
    /// (both reported the completion).
    ///
    /// `me`: the thread of the gpuwire_waitany, waitsome or waitall that holds the request
    /// ([`Self::hold`]), 0 for a call that holds none. A request that another thread's such call
    /// holds: a wait waits until that call lets go of it (then finds it reported complete by
    /// that call, INVALID_HANDLE, or waits for it), a test is refused.
    pub fn finish(&self, wait: bool, me: u64) -> Result<(Result<bool>, Status)> {
        // Operations of freed requests that have completed are released (a receive into a view
        // unpacks then), also where this request's own first step completes it.
        reap_detached();
        if wait && self.held_by_other(me) {
            self.wait_unheld(me)?;
        }
        let mut i = if wait {
            self.lock()
        } else {
            match self.try_lock(me) {
                Ok(i) => i,
                // The call that holds the request tests it while another thread looks at it (a
                // wait of it, waiting for the hold to end: `wait_unheld`): not complete yet.
                Err(_) if me != 0 => return Ok((Ok(false), Status::EMPTY)),
                Err(e) => return Err(e),
            }
        };
        if i.reported {
            return Err(Self::reported_elsewhere());
        }
        Self::ready(&i, wait)?;
        let done = if wait { self.wait_locked(&mut i).map(|()| true) } else { self.test_locked(&mut i) };
        i.reported = !matches!(done, Ok(false));
        Ok((done.map_err(|e| self.earlier(e)), self.status_of(&i)))
    }

    /// Waits until no other thread's call holds the request ([`Self::hold`]), or until that call
    /// reported it complete: then INVALID_HANDLE (the caller leaves the registry's slot, which the
    /// release of the handle waits for).
    #[cold]
    #[inline(never)]
    fn wait_unheld(&self, me: u64) -> Result<()> {
        let mut spins = 0u32;
        while self.held_by_other(me) {
            if let Ok(i) = self.inner.try_lock() {
                if i.reported {
                    return Err(Self::reported_elsewhere());
                }
            }
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
        Ok(())
    }

    /// A request that failed because its communicator broke under it, by an earlier operation's
    /// failure after that operation's call had returned: that failure, once
    /// (`Engine::or_earlier_failure`).
    fn earlier(&self, e: Error) -> Error {
        self.comm.engine().or_earlier_failure(e, "and this request's operation with it")
    }

    /// Blocks until complete. A second call returns at once. With a timeout configured on the
    /// communicator, the wait is a test loop that gives up at the timeout: the communicator is
    /// then broken, TIMEOUT returned, and the operation abandoned: its buffer is never freed
    /// (MPI may still write it when the peer arrives).
    pub fn wait(&self) -> Result<()> {
        self.wait_locked(&mut self.lock()).map_err(|e| self.earlier(e))
    }

    fn wait_locked(&self, i: &mut Inner) -> Result<()> {
        let Some(mut op) = i.pending.take() else { return Ok(()) };
        let matched = &mut i.matched;
        // A communicator broken earlier completes nothing more: COMM_BROKEN at once unless the
        // operation already completed (so one timeout breaks a waitall once, not per request).
        if let Err(e) = self.comm.ensure_usable() {
            return self.give_up_broken(matched, op, e);
        }
        let Some(t) = self.comm.config().timeout else {
            let r = op.wait();
            Self::note(matched, &*op);
            match &r {
                Ok(()) => op.recycle(),
                Err(e) => self.keep_if_abandoned(e),
            }
            return r;
        };
        // From the start of a gpuwire_waitall (`comm::Since`), else from now.
        let deadline = crate::comm::since() + t;
        let mut spins = 0u32;
        loop {
            match op.test() {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => {
                    Self::note(matched, &*op);
                    self.keep_if_abandoned(&e);
                    return Err(e);
                }
            }
            if let Err(e) = self.comm.ensure_usable() {
                return self.give_up_broken(matched, op, e);
            }
            if Instant::now() >= deadline {
                // MPI may still write the buffer when the peer arrives: never freed then.
                self.give_up(op);
                let msg = format!(
                    "wait: the request did not complete within the communicator's timeout of {:.3} s (no matching call on the other rank?); the communicator is now broken",
                    t.as_secs_f64()
                );
                self.comm.mark_broken(msg.clone());
                return Err(Error::Timeout(msg));
            }
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
        Self::note(matched, &*op);
        op.recycle();
        Ok(())
    }

    /// [`Self::test`] for gpuwire_testall, which never blocks: `Err` (the request left as it
    /// was) while another thread waits for or tests it, or where another thread's wait or test
    /// reported it complete; else the test's outcome.
    pub fn try_test(&self) -> Result<Result<bool>> {
        let mut i = self.try_lock(0)?;
        if i.reported {
            return Err(Self::reported_elsewhere());
        }
        Ok(self.test_locked(&mut i).map_err(|e| self.earlier(e)))
    }

    /// A completion that gpuwire_testall reported (and then released the request): another
    /// thread's wait that raced it finds this ([`Self::finish`]).
    pub fn mark_reported(&self) {
        self.lock().reported = true;
    }

    fn reported_elsewhere() -> Error {
        Error::InvalidHandle(
            "another thread's wait, test or gpuwire_request_free completed or freed this request meanwhile, and released it (a request may be completed or freed by one thread at a time, as in MPI)".into(),
        )
    }

    /// Whether complete; completes it when it is. On a communicator broken meanwhile, a request
    /// that has not completed is given up and COMM_BROKEN returned.
    pub fn test(&self) -> Result<bool> {
        self.test_locked(&mut self.lock()).map_err(|e| self.earlier(e))
    }

    fn test_locked(&self, i: &mut Inner) -> Result<bool> {
        let Inner { pending: p, matched, .. } = i;
        match p.as_mut() {
            None => Ok(true),
            Some(op) => {
                let done = match op.test() {
                    Ok(d) => d,
                    Err(e) => {
                        Self::note(matched, &**op);
                        self.keep_if_abandoned(&e);
                        return Err(e);
                    }
                };
                if done {
                    Self::note(matched, &**op);
                    p.take().expect("pending checked above").recycle();
                } else if let Err(e) = self.comm.ensure_usable() {
                    let op = p.take().expect("pending checked above");
                    return self.give_up_broken(matched, op, e).map(|()| true);
                }
                Ok(done)
            }
        }
    }

    /// On a broken communicator: Ok if `op` completed after all, its own error if it failed (the
    /// timeout that broke the communicator may be its own: with a timeout configured, every MPI
    /// wait of gpuwire's has a deadline and sees the break, so [`Pending::test_settled`] waits up
    /// to [`SETTLE`] for that; without one, the communicator was aborted and an engine's blocking
    /// MPI call may never return), else it is abandoned (its buffer kept for ever if MPI may
    /// still use it) and `broken` returned.
    fn give_up_broken(&self, matched: &mut Option<Status>, mut op: Box<dyn Pending>, broken: Error) -> Result<()> {
        let settle = if self.comm.config().timeout.is_some() { SETTLE } else { Duration::ZERO };
        let done = op.test_settled(Instant::now() + settle);
        Self::note(matched, &*op);
        if let Err(e) = &done {
            self.keep_if_abandoned(e);
        }
        if done? {
            return Ok(());
        }
        self.give_up(op);
        Err(broken)
    }

    /// An operation that failed by a timeout or a broken communicator may have left its MPI
    /// request behind (an engine's step abandoned at its deadline): its buffers are kept for
    /// ever, as at a wait's own timeout.
    fn keep_if_abandoned(&self, e: &Error) {
        if e.abandons() {
            self.bufs.keep_for_ever();
        }
    }

    /// Gives the operation up at once, as [`Pending::abandon`], for a request that is part of
    /// another's operation abandoned at its timeout (`view::Unpacking`): true when nothing is left
    /// in flight (it had completed, or was cancelled); else its buffers are kept for ever. Never
    /// waits (`free` would wait for the communicator's timeout once more).
    pub fn abandon(&self) -> bool {
        let Some(op) = self.lock().pending.take() else { return true };
        self.give_up(op)
    }

    /// [`Pending::abandon`] of `op`, this request's operation: true when nothing is left in
    /// flight; else the request's buffers are kept for ever (MPI, a peer or a device may still
    /// read or write them).
    fn give_up(&self, op: Box<dyn Pending>) -> bool {
        let done = op.abandon();
        if !done {
            self.bufs.keep_for_ever();
        }
        done
    }

    /// gpuwire_request_free: an operation not yet complete goes on (`Detached`: Ok(())), as after
    /// MPI_Request_free: a send or a nonblocking collective until its peers meet it, a receive
    /// until its message comes (which it then takes, in MPI's matching order). One that has
    /// completed is released as gpuwire_wait releases it (Ok(()), or its error). On a broken
    /// communicator, which completes nothing more, one not complete is abandoned at once (see
    /// [`Pending::abandon`]; the buffer is then kept for ever if MPI may still use it):
    /// Error::CommBroken. Never blocks.
    pub fn free(&self) -> Result<()> {
        let op = self.lock().pending.take();
        op.map_or(Ok(()), |op| self.free_op(op))
    }

    /// [`Self::free`] of the operation taken out of the request (`claim_for_free`).
    pub fn free_op(&self, mut op: Box<dyn Pending>) -> Result<()> {
        reap_detached();
        match op.test() {
            Ok(true) => return Ok(()),
            Err(e) => {
                // Failed: finished, released as gpuwire_wait releases it.
                self.keep_if_abandoned(&e);
                return Err(e);
            }
            Ok(false) => {}
        }
        if self.comm.is_broken() {
            // MPI (or a peer, a device) may still read or write the buffer: kept for ever then.
            self.give_up(op);
            return Err(Error::CommBroken(
                "a request on a broken communicator that had not completed was abandoned (gpuwire_request_free: its receive cancelled or its send left to MPI)".into(),
            ));
        }
        // Its buffers are kept until it completes (`reap_detached`).
        let mut list = DETACHED.lock().unwrap_or_else(|e| e.into_inner());
        list.push(Detached { op, bufs: self.bufs.share(), _comm: self.comm.clone() });
        N_DETACHED.store(list.len(), std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}
