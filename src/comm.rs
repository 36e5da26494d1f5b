//! Communicators: gpuwire's own duplicate of an MPI communicator, its node-local view, its
//! configuration, and the backend chosen for device buffers; the MPI steps every backend shares
//! (a call's deadline and collective slot, `wait_mpi`, `agree_on_result`, `collective!`).
//!
//! Below the backends: creating, splitting, duplicating and freeing a communicator, which choose
//! and set up a backend, are in `create`.

use std::any::Any;
use std::cell::Cell;
use std::ffi::c_int;
use std::sync::{Arc, Mutex};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::config::Config;
use crate::error::{Error, Result, Status};
use crate::handles::{Kind, Registry};
use crate::mpisys::{self, MPI_Comm, RawComm, sys};
use crate::runtime;
use crate::types::BackendKind;

/// A blocking MPI collective on communicator `$c`: its nonblocking form waited by
/// `Communicator::wait_mpi` (as `blocking!`) when the communicator's ranks agreed on that
/// (`Communicator::nb_collectives`: a timeout, MPI_THREAD_SERIALIZED, IPC receives to progress),
/// else the blocking form. Never decided per rank: MPI does not match a blocking collective with
/// a nonblocking one (the ranks would hang). At a timeout the request is abandoned: MPI may
/// still use the buffers if a peer arrives later (callers leak the memory of their own that the
/// call references, rather than free it).
macro_rules! collective {
    ($c:expr, $what:expr, $b:ident($($a:expr),* $(,)?), $nb:ident) => {{
        if $c.nb_collectives() {
            let mut req = crate::mpisys::request_null();
            {
                let _mpi = crate::runtime::mpi_lock();
                // SAFETY: as the blocking form; the arguments stay valid until the request
                // completes (waited for below; at a timeout see above).
                crate::mpisys::check(unsafe { crate::mpisys::sys::$nb($($a),*, &mut req) }, $what)?;
            }
            $c.wait_mpi(&mut req, $what, crate::comm::Waited::Collective)
        } else {
            // SAFETY: as documented at the call.
            crate::mpisys::check(unsafe { crate::mpisys::sys::$b($($a),*) }, $what)
        }
    }};
}
pub(crate) use collective;

/// What [`Communicator::wait_mpi`] waits for: how it is tested, and what becomes of it at the
/// deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waited {
    /// A nonblocking collective (tested by `mpisys::test_collective`); abandoned at the deadline.
    Collective,
    /// A send, or a receive that is left to MPI at the deadline.
    PointToPoint,
    /// A receive, cancelled at the deadline.
    Receive,
}

/// All live communicators, by handle.
pub static COMMS: Registry<Communicator> = Registry::pinnable();

impl crate::handles::Pinnable for Communicator {
    const KIND: Kind = Kind::Comm;
    fn registry() -> &'static Registry<Self> {
        &COMMS
    }
}

///
/// Laid out in order, aligned to a cache line: the words every call reads in the first two
/// lines (`crate::hot`'s reason), what only some calls read after them.
#[derive(Debug)]
#[repr(C, align(64))]
pub struct Communicator {
    pub(crate) config: Config,
    /// The thread (`thread_id`) inside a collective on this communicator, 0 when none.
    pub(crate) busy: AtomicU64,
    /// The progress engine of the operations that complete after their call (`crate::op`).
    pub(crate) engine: Arc<crate::engine::Engine>,
    /// Why the communicator is broken; shared with its internal duplicate ([`Self::internal`]).
    pub(crate) broken: Arc<Broken>,
    pub(crate) backend_state: BackendState,
    pub(crate) raw: RawComm,
    pub(crate) rank: i32,
    pub(crate) size: i32,
    /// Whether a blocking allreduce (on host memory, or on device memory that NCCL does) may take
    /// `crate::lean`'s path (`lean::applies`, fixed at creation).
    pub(crate) lean: bool,
    /// MPI collectives in their nonblocking form with a test loop that progresses pending IPC
    /// receives (agreed at creation, the same on every rank: `progress::collectives_must_progress`,
    /// MPI_THREAD_SERIALIZED).
    pub(crate) nb_coll: bool,
    /// Its backend and device first, in the second line (`Choice`'s layout).
    pub(crate) choice: Choice,
    pub(crate) node: RawComm,
    pub(crate) local_rank: i32,
    pub(crate) local_size: i32,
    /// The number of nodes the ranks are on (of MPI_Comm_split_type SHARED).
    pub(crate) nodes: i32,
    /// The duplicate that carries gpuwire's own messages on behalf of this communicator.
    pub(crate) internal: Mutex<Option<Arc<Communicator>>>,
    /// The handle that created the communicator made (0 until registered): gpuwire_comm_free of
    /// it is the collective free; of another (gpuwire_darray_comm's) a local release.
    pub(crate) primary: AtomicU64,
    /// Where point-to-point calls on host memory go, routed once when the backend is set up
    /// (`backend::host_p2p`): what `backend::route` gives every such call.
    pub(crate) host_p2p: HostP2p,
}

/// [`Communicator::host_p2p`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum HostP2p {
    /// Routed at each call (until the backend is set up, and where the operations differ).
    #[default]
    EachCall,
    /// Plain MPI (`backend::host::HostPath`), every point-to-point operation.
    Mpi,
}

/// Why a communicator is broken (`None`: it is not), with a flag that every call reads without
/// the lock (`Communicator::ensure_usable`).
#[derive(Debug, Default)]
pub struct Broken {
    set: std::sync::atomic::AtomicBool,
    why: Mutex<Option<String>>,
}

impl Communicator {
    /// Registers a new C API handle of `c` (`COMMS.insert`): its primary one (made by the call
    /// that created the communicator), or another (gpuwire_darray_comm's).
    pub(crate) fn new_handle(c: Arc<Communicator>, primary: bool) -> crate::error::Result<u64> {
        let me = c.clone();
        let h = COMMS.insert(c)?;
        if primary {
            me.primary.store(h, Ordering::Release);
        }
        Ok(h)
    }

    /// Whether `h` is the communicator's primary handle, whose free is the collective one.
    pub(crate) fn is_primary(&self, h: u64) -> bool {
        self.primary.load(Ordering::Acquire) == h
    }
}

impl Broken {
    pub(crate) fn why(&self) -> Option<String> {
        if !self.set.load(Ordering::Acquire) {
            return None;
        }
        self.why.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn mark(&self, why: String) {
        *self.why.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
        self.set.store(true, Ordering::Release);
    }
}

/// The backend chosen for a communicator's device buffers, its device, and why. In order: the
/// words calls read first (`Communicator`'s layout).
#[derive(Clone, Debug)]
#[repr(C)]
pub struct Choice {
    pub kind: BackendKind,
    /// CUDA device of this rank, or -1.
    pub device: i32,
    pub reason: String,
    /// The routing table of the backend, in words (`backend::routing_table`; describe).
    pub routing: String,
}

impl Default for Choice {
    fn default() -> Self {
        Choice { kind: BackendKind::GPUWIRE_BACKEND_HOST, reason: String::new(), device: -1, routing: String::new() }
    }
}

/// The backends' state of a communicator (staging buffers, the NCCL communicator, ...), type-erased
/// so that this module knows no backend: at most one value of each type, each read by the
/// backend that defines the type, set up and torn down by the backend registry (`backend`).
/// Each value with its type's id, compared inline: `dyn Any`'s own is a call through its
/// vtable per value held (an NCCL communicator's state is its third: ~25 instructions a lookup).
/// A backend's own state, which its every call looks up, is set first ([`BackendState::set_first`]):
/// one compare, in the one cache line of the first entry (entries are 32-byte aligned).
#[derive(Default)]
pub struct BackendState(Vec<Entry>);

/// One value of [`BackendState`] with its type's id.
#[repr(align(32))]
struct Entry(std::any::TypeId, Box<dyn Any + Send + Sync>);

/// A backend's own words on how its device operations complete (describe's `progress=`), set
/// in [`BackendState`] where they differ from its kind's usual ones.
pub struct StreamNote(pub &'static str);

impl BackendState {
    /// The value of type `T`, if set (a TypeId compare per value held: a few).
    #[inline]
    pub fn get<T: Any>(&self) -> Option<&T> {
        let id = std::any::TypeId::of::<T>();
        let Entry(_, v) = self.0.iter().find(|e| e.0 == id)?;
        // SAFETY: `set` stored the value with its own type's id: it is a T.
        Some(unsafe { &*(&**v as *const (dyn Any + Send + Sync)).cast::<T>() })
    }
    /// Sets the value of type `T` (replacing one set before), after the others.
    pub fn set<T: Any + Send + Sync>(&mut self, v: T) {
        drop(self.take::<T>());
        self.0.push(Entry(std::any::TypeId::of::<T>(), Box::new(v)));
    }
    /// `set`, before the others: for a backend's own state, which its every call looks up.
    pub fn set_first<T: Any + Send + Sync>(&mut self, v: T) {
        drop(self.take::<T>());
        self.0.insert(0, Entry(std::any::TypeId::of::<T>(), Box::new(v)));
    }
    /// Takes the value of type `T` out, if set.
    pub fn take<T: Any>(&mut self) -> Option<T> {
        let id = std::any::TypeId::of::<T>();
        let i = self.0.iter().position(|e| e.0 == id)?;
        self.0.remove(i).1.downcast().ok().map(|v| *v)
    }
}

impl std::fmt::Debug for BackendState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BackendState({} values)", self.0.len())
    }
}

static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The deadline of the gpuwire call this thread is in (set by `Communicator::enter`): every
    /// MPI step of one call (its agreement, its chunks, its sends and receives) shares it.
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Whether this thread is in a call that creates a communicator (`enter_unbounded`): its
    /// steps have no deadline, as MPI_Comm_split and MPI_Comm_dup have none.
    static UNBOUNDED: Cell<bool> = const { Cell::new(false) };
    /// When the call on several requests this thread is in began (`Since`): each request's
    /// deadline counts from then, not from the moment its turn comes.
    static SINCE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// While alive, the deadlines of this thread's gpuwire steps count from its making, not from
/// each step's start (`Communicator::enter`, `call_deadline`): gpuwire_waitall waits for its
/// requests one after another, each against its own communicator's timeout from the call's
/// start, so that the call is bounded by one timeout (the longest), not one per request.
pub(crate) struct Since(bool);

impl Since {
    pub(crate) fn now() -> Since {
        Since(SINCE.with(|s| s.get().is_none() && {
            s.set(Some(Instant::now()));
            true
        }))
    }
}

impl Drop for Since {
    fn drop(&mut self) {
        if self.0 {
            SINCE.with(|s| s.set(None));
        }
    }
}

/// The start that a deadline counts from now: the current `Since`, else now.
pub(crate) fn since() -> Instant {
    SINCE.with(|s| s.get()).unwrap_or_else(Instant::now)
}

/// While alive, this thread's gpuwire steps have no deadline (`call_deadline`): for the creation
/// of a communicator (`Communicator::adopt`), whose agreements and backend setup (HIER's node
/// and leaders communicators, IPC's segment) are as unbounded as the MPI_Comm_dup before them,
/// on every rank alike (a rank that gave up would leave a late one blocked in them).
pub(crate) struct Unbounded(bool);

impl Unbounded {
    pub(crate) fn enter() -> Unbounded {
        Unbounded(UNBOUNDED.with(|u| u.replace(true)))
    }
}

impl Drop for Unbounded {
    fn drop(&mut self) {
        let was = self.0;
        UNBOUNDED.with(|u| u.set(was));
    }
}

/// This thread's number for `Communicator::busy` and `Request::hold` (never 0); a progress
/// engine's thread's is marked [`ENGINE_ENTRY`] (engine threads are marked before their first
/// call).
pub(crate) fn thread_id() -> u64 {
    // This thread's number for `Communicator::busy` (0 until its first use).
    crate::hot::with_thread(|t| {
        let t = &t.comm_id;
        let v = t.get();
        if v != 0 {
            return v;
        }
        let v = NEXT_THREAD.fetch_add(1, Ordering::Relaxed) | if crate::engine::on_engine_thread() { ENGINE_ENTRY } else { 0 };
        t.set(v);
        v
    })
}

/// `Communicator::busy`'s mark of an entry made by a progress engine's thread (for the operation
/// of a call that has returned).
const ENGINE_ENTRY: u64 = 1 << 63;

fn concurrent_collective(what: &str) -> Error {
    Error::InvalidArgument(format!(
        "{what}: a collective is already in progress on this communicator on another thread (MPI forbids concurrent collectives on one communicator: give each thread its own communicator, e.g. from gpuwire_comm_dup, or serialize the calls)"
    ))
}

/// One gpuwire call on a communicator (`Communicator::enter`): releases the collective slot and
/// the call's deadline when the call returns, on every path.
pub struct CallGuard<'a> {
    c: &'a Communicator,
    release: bool,
    clear_deadline: bool,
    clear_unbounded: bool,
}

impl Drop for CallGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.release {
            self.c.busy.store(0, Ordering::Release);
        }
        if self.clear_deadline || self.clear_unbounded {
            self.clear_thread();
        }
    }
}

impl CallGuard<'_> {
    #[cold]
    #[inline(never)]
    fn clear_thread(&self) {
        if self.clear_deadline {
            DEADLINE.with(|d| d.set(None));
        }
        if self.clear_unbounded {
            UNBOUNDED.with(|u| u.set(false));
        }
    }
}

impl Communicator {
    /// Every rank must pass the same configuration (the device may differ): one exchange.
    pub(crate) fn agree_config(&self, cfg: &Config) -> Result<()> {
        let t = cfg.timeout.map(|t| t.as_micros().min(i64::MAX as u128) as i64).unwrap_or(0);
        let fields: [(&str, i64); 6] = [
            ("backend", cfg.backend as i64),
            ("check", cfg.check as i64),
            ("timeout", t),
            ("staging", cfg.staging as i64),
            ("chunk_bytes", cfg.chunk_bytes as i64),
            ("p2p_matching", cfg.p2p_matching as i64),
        ];
        let mut v: Vec<i64> = fields.iter().flat_map(|(_, x)| [*x, -*x]).collect();
        self.allreduce_max_i64(&mut v, "agreeing on the configuration")?;
        // The timeout travels in microseconds and is shown in seconds (0 s = none).
        let shown = |name: &str, x: i64| if name == "timeout" { format!("{} s", x as f64 / 1e6) } else { x.to_string() };
        for (i, (name, _)) in fields.iter().enumerate() {
            if v[2 * i] != -v[2 * i + 1] {
                return Err(Error::InvalidArgument(format!(
                    "the ranks have different configurations: {name} ranges from {} to {} (set it, or its GPUWIRE_* environment variable, the same on every rank)",
                    shown(name, -v[2 * i + 1]),
                    shown(name, v[2 * i])
                )));
            }
        }
        Ok(())
    }

    pub fn raw(&self) -> MPI_Comm {
        self.raw.0
    }
    /// This communicator's progress engine.
    pub fn engine(&self) -> &Arc<crate::engine::Engine> {
        &self.engine
    }
    /// Whether MPI collectives on this communicator run as their nonblocking form waited by
    /// `wait_mpi` (`collective!`), the same on every rank (MPI does not match a blocking
    /// collective with a nonblocking one): with a timeout (the configuration is agreed), or when
    /// agreed at creation: any rank sees a GPU but has no progress thread, or runs under
    /// MPI_THREAD_SERIALIZED.
    pub fn nb_collectives(&self) -> bool {
        self.nb_coll || self.config.timeout.is_some()
    }
    pub fn node_comm(&self) -> MPI_Comm {
        self.node.0
    }
    pub fn rank(&self) -> i32 {
        self.rank
    }
    pub fn size(&self) -> i32 {
        self.size
    }
    pub fn local_rank(&self) -> i32 {
        self.local_rank
    }
    pub fn local_size(&self) -> i32 {
        self.local_size
    }
    /// The number of nodes (shared-memory domains) the ranks are on.
    pub fn nodes(&self) -> i32 {
        self.nodes
    }
    pub fn config(&self) -> &Config {
        &self.config
    }
    /// The backend used for device buffers (host buffers always go through plain MPI).
    pub fn backend(&self) -> BackendKind {
        self.choice.kind
    }
    pub fn choice(&self) -> &Choice {
        &self.choice
    }
    /// Replaces the agreed backend during setup, on every rank alike (AUTO after NCCL could not be
    /// set up on some rank: `backend::setup`).
    pub(crate) fn fall_back(&mut self, kind: BackendKind, reason: String) {
        self.choice.kind = kind;
        self.choice.reason = reason;
    }
    /// Records the routing table of the set-up backend (`backend::setup`).
    pub(crate) fn set_routing(&mut self, table: String) {
        self.choice.routing = table;
    }
    /// Adds to the backend's reason (setup notes such as where reductions run).
    pub(crate) fn append_reason(&mut self, note: &str) {
        self.choice.reason.push_str(note);
    }

    /// CUDA device of this rank, or -1 without one.
    pub fn device(&self) -> i32 {
        self.choice.device
    }

    /// The human-readable line of gpuwire_comm_describe.
    pub fn describe(&self) -> String {
        let info = runtime::ensure_ready().ok();
        let device = if self.choice.device >= 0 { format!("cuda:{}", self.choice.device) } else { "none".into() };
        format!(
            "gpuwire {}: backend={} ({}); device={}; rank {}/{} (node-local {}/{}); host={}; nodes={}; mpi={}; thread level={}; check={}; timeout={}; {}; {}",
            env!("CARGO_PKG_VERSION"),
            self.choice.kind.name(),
            self.choice.reason,
            device,
            self.rank,
            self.size,
            self.local_rank,
            self.local_size,
            host_name(),
            self.nodes,
            info.map(|i| i.mpi_library.as_str()).unwrap_or("?"),
            info.map(|i| i.thread_level.name()).unwrap_or("?"),
            if self.config.check { "on" } else { "off" },
            self.config.timeout.map(|t| format!("{:.3}s", t.as_secs_f64())).unwrap_or_else(|| "none".into()),
            self.progress_note(),
            self.choice.routing,
        )
    }

    /// How operations that complete after their call are run here (describe).
    fn progress_note(&self) -> String {
        if !crate::engine::available() {
            return "progress=none (below MPI_THREAD_MULTIPLE: nonblocking operations complete before their call returns, and device operations block the host)".into();
        }
        let device = match self.choice.kind {
            _ if self.backend_state.get::<StreamNote>().is_some() => self.backend_state.get::<StreamNote>().map_or("", |n| n.0),
            BackendKind::GPUWIRE_BACKEND_HOST => "",
            BackendKind::GPUWIRE_BACKEND_NCCL => "; device operations enqueued on their stream by NCCL",
            BackendKind::GPUWIRE_BACKEND_IPC => "; blocking device operations return when their data is in place (IPC collectives are stream-ordered only with MPI_THREAD_MULTIPLE, outside checking mode and GPUWIRE_HOST_SYNC=1, unless GPUWIRE_IPC_STREAM_ORDERED=0)",
            BackendKind::GPUWIRE_BACKEND_HIER => "; hierarchical device operations return when their node's last step has its data in place (each step as its level's backend runs it)",
            BackendKind::GPUWIRE_BACKEND_MPI_CUDA_AWARE => "; blocking device operations return when their data is in place (not yet stream-ordered on a CUDA-aware MPI)",
            _ if crate::engine::host_sync() => "; device operations stream-ordered, and wait for completion on the host (GPUWIRE_HOST_SYNC=1)",
            _ if self.config.check => "; device operations stream-ordered, and wait for completion on the host (checking mode)",
            _ => "; device operations stream-ordered: enqueued on their stream, MPI on the engine thread (the call returns before the data moves)",
        };
        format!("progress=engine thread (nonblocking operations run there){device}")
    }

    /// Fails if an earlier timeout or abort broke this communicator.
    #[inline]
    pub fn ensure_usable(&self) -> Result<()> {
        runtime::check_ready()?;
        if self.is_broken() {
            return self.broken_error();
        }
        Ok(())
    }

    /// `ensure_usable`'s answer on a communicator whose broken flag is set.
    #[cold]
    #[inline(never)]
    fn broken_error(&self) -> Result<()> {
        match self.broken.why() {
            Some(why) => Err(Error::CommBroken(why)),
            None => Ok(()),
        }
    }

    /// Whether an earlier timeout or abort broke this communicator.
    pub fn is_broken(&self) -> bool {
        self.broken.set.load(Ordering::Acquire)
    }

    /// Marks the communicator unusable; later calls return GPUWIRE_ERROR_COMM_BROKEN.
    pub fn mark_broken(&self, why: String) {
        self.broken.mark(why);
    }

    /// Begins a gpuwire call on this communicator: fails if an earlier timeout broke it. A
    /// collective (`collective`: every collective and every call that creates or frees a
    /// communicator from this one) claims the communicator for this thread, and fails at once
    /// with GPUWIRE_ERROR_INVALID_ARGUMENT while another thread is inside one (MPI forbids
    /// concurrent collectives on one communicator; the calls would corrupt each other's data):
    /// one atomic compare-exchange; a call nested in a collective of the same thread passes.
    /// With a timeout configured, the call's deadline starts here (unless this thread is already
    /// inside a call that has one): every MPI step of the call shares it (`wait_mpi`). A
    /// collective first waits for what the communicator's engine has queued.
    #[inline]
    pub fn enter(&self, what: &str, collective: bool) -> Result<CallGuard<'_>> {
        self.ensure_usable()?;
        let mut release = false;
        if collective {
            if !self.engine.idle() && !crate::engine::on_engine_thread() {
                // After the operations this communicator's engine still has queued (a pending
                // nonblocking collective before gpuwire_comm_dup, say): in call order, as MPI,
                // never concurrently with them. Operations issued through `op::issue` find the
                // engine idle here (it queues them otherwise); dup, split and the distributed
                // arrays' creation come here directly.
                self.engine().drain()?;
            }
            // An engine thread's entry is marked (`thread_id`, `collective_elsewhere`).
            let me = thread_id();
            match self.busy.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => release = true,
                Err(t) if t == me => {}
                Err(_) => return Err(concurrent_collective(what)),
            }
        }
        let clear_deadline = match self.config.timeout {
            Some(t) => DEADLINE.with(|d| d.get().is_none() && {
                d.set(Some(since() + t));
                true
            }),
            None => false,
        };
        Ok(CallGuard { c: self, release, clear_deadline, clear_unbounded: false })
    }

    /// At the call of a collective that may complete after it returns (queued on the engine,
    /// or stream-ordered): refused, as `enter` would refuse it, where another thread of the
    /// program is inside a collective on this communicator now — the operation would meet it on
    /// the engine after this call had returned success, and fail there (its error then the
    /// communicator's asynchronous error, its output not written). A collective that the
    /// engine runs for this or another call is not another thread's.
    #[inline]
    pub fn collective_elsewhere(&self, what: impl FnOnce() -> &'static str) -> Result<()> {
        let b = self.busy.load(Ordering::Acquire);
        if b != 0 && b & ENGINE_ENTRY == 0 {
            return self.collective_elsewhere_held(b, what());
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn collective_elsewhere_held(&self, b: u64, what: &str) -> Result<()> {
        if b != thread_id() && thread_id() & ENGINE_ENTRY == 0 {
            return Err(concurrent_collective(what));
        }
        Ok(())
    }

    /// As `enter` for a collective that creates a communicator (split, dup, the first
    /// distributed array's internal duplicate): no step of it has a deadline, on any rank alike,
    /// since the MPI calls it makes (MPI_Comm_split, MPI_Comm_dup) cannot be bounded: a rank
    /// that gave up while another was late would leave that one blocked in them for ever.
    pub fn enter_unbounded(&self, what: &str) -> Result<CallGuard<'_>> {
        let mut g = self.enter(what, true)?;
        if g.clear_deadline {
            DEADLINE.with(|d| d.set(None));
            g.clear_deadline = false;
        }
        g.clear_unbounded = !UNBOUNDED.with(|u| u.replace(true));
        Ok(g)
    }

    /// Whether the distributed arrays' internal duplicate exists (`internal`).
    pub(crate) fn has_internal(&self) -> bool {
        self.internal.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// The deadline of this thread's current gpuwire call (`enter`), else one timeout from now
    /// (from the start of a wait on several requests: `Since`); `None` without a timeout.
    pub fn call_deadline(&self) -> Option<Instant> {
        if UNBOUNDED.with(|u| u.get()) {
            return None;
        }
        DEADLINE.with(|d| d.get()).or_else(|| self.config.timeout.map(|t| since() + t))
    }

    /// What is left of this thread's current call's deadline (`call_deadline`), for waits that
    /// take a duration (IPC); `None` without a timeout.
    pub fn remaining(&self) -> Option<std::time::Duration> {
        self.call_deadline().map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// Whether gpuwire's blocking MPI calls on this communicator must run as their nonblocking
    /// form waited by `wait_mpi`: with a deadline to keep (a timeout), under
    /// MPI_THREAD_SERIALIZED (the MPI lock is released between tests), or while IPC receives may
    /// be pending (`progress::pending`). For point-to-point calls (each rank may choose alone).
    pub fn nb_p2p(&self) -> bool {
        self.config.timeout.is_some() || runtime::serialized() || crate::progress::pending()
    }

    /// Element-wise MAX of `v` across ranks (in place). With a deadline the exchange is
    /// nonblocking and abandoned at the deadline: the communicator is then broken.
    pub fn allreduce_max_i64(&self, v: &mut [i64], what: &str) -> Result<()> {
        let n = v.len() as c_int;
        if self.call_deadline().is_some() {
            let raw = self.raw.0;
            // SAFETY: p is valid for n int64 until the request completes (`on_heap`).
            return self.on_heap(v, what, |p, req| unsafe { sys::MPI_Iallreduce(mpisys::in_place(), p.cast(), n, sys::RSMPI_INT64_T, sys::RSMPI_MAX, raw, req) });
        }
        let ptr = v.as_mut_ptr().cast();
        // v is valid for n int64; in-place allreduce on our own communicator.
        collective!(
            self,
            "MPI_Allreduce",
            MPI_Allreduce(mpisys::in_place(), ptr, n, sys::RSMPI_INT64_T, sys::RSMPI_MAX, self.raw.0),
            MPI_Iallreduce
        )
    }

    /// Runs the nonblocking MPI call `post` on a heap copy of `v` and waits for it (`wait_mpi`),
    /// then copies the result back. At the deadline the request is abandoned while MPI may still
    /// write the copy (a late peer), so the copy is then leaked rather than freed.
    fn on_heap<T: Copy + 'static>(&self, v: &mut [T], what: &str, post: impl FnOnce(*mut T, &mut sys::MPI_Request) -> c_int) -> Result<()> {
        let buf: &'static mut [T] = Box::leak(v.to_vec().into_boxed_slice());
        let bptr: *mut T = buf.as_mut_ptr();
        let mut req = mpisys::request_null();
        {
            let _mpi = runtime::mpi_lock();
            mpisys::check(post(bptr, &mut req), what)?;
        }
        self.wait_mpi(&mut req, what, Waited::Collective)?;
        v.copy_from_slice(buf);
        // SAFETY: the request completed: MPI no longer uses buf, which came from the Box leaked
        // above.
        drop(unsafe { Box::from_raw(buf as *mut [T]) });
        Ok(())
    }

    /// Waits for `req`, an active request of a call on this communicator (or MPI_REQUEST_NULL):
    /// MPI_Test in a loop (under MPI_THREAD_SERIALIZED, each test holds gpuwire's MPI lock, so
    /// other threads' calls proceed in between; a collective's by `mpisys::test_collective`,
    /// so that its error is returned on every MPI) that progresses the process's pending IPC
    /// receives (a peer may be blocked in a send to this process until it copies the data),
    /// until the call's deadline (`call_deadline`), if any. At the deadline a receive
    /// ([`Waited::Receive`]) is cancelled (MPI_Cancel, then completed); any other request is
    /// abandoned (MPI cannot cancel a collective): MPI may still read its send buffer and write
    /// its receive buffer if the peer arrives later. The communicator is then broken, and
    /// TIMEOUT returned.
    pub fn wait_mpi(&self, req: &mut sys::MPI_Request, what: &str, kind: Waited) -> Result<()> {
        let deadline = self.call_deadline();
        let cancel = kind == Waited::Receive;
        let mut spins = 0u32;
        loop {
            let mut flag: c_int = 0;
            {
                let _mpi = runtime::mpi_lock();
                // SAFETY: an active request of ours, or MPI_REQUEST_NULL.
                let rc = match kind {
                    Waited::Collective => mpisys::test_collective(req, &mut flag),
                    _ => unsafe { sys::MPI_Test(req, &mut flag, mpisys::status_ignore()) },
                };
                mpisys::check(rc, what)?;
            }
            if flag != 0 {
                return Ok(());
            }
            crate::progress::progress_all();
            // Broken meanwhile (gpuwire_comm_abort, another thread's timeout): given up at once.
            let broken = if spins % 64 == 63 { self.ensure_usable().err() } else { None };
            if broken.is_some() || deadline.is_some_and(|d| Instant::now() >= d) {
                if cancel {
                    let _mpi = runtime::mpi_lock();
                    // SAFETY: an active receive of ours; a cancelled request's wait returns
                    // whatever the other processes do (MPI standard, MPI_Cancel).
                    unsafe {
                        sys::MPI_Cancel(req);
                        sys::MPI_Wait(req, mpisys::status_ignore());
                    }
                }
                if let Some(e) = broken {
                    return Err(e);
                }
                let t = self.config.timeout.map(|t| t.as_secs_f64()).unwrap_or(0.0);
                let msg = format!(
                    "{what} did not complete within the communicator's timeout of {t:.3} s (another rank did not make the matching call, or was late?); the communicator is now broken"
                );
                self.mark_broken(msg.clone());
                return Err(Error::Timeout(msg));
            }
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else if spins < 20_000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
    }

    /// Collective: every rank learns whether any rank's `local` failed, and all return the same
    /// outcome — the error of the lowest failing rank, with its message — or their own Ok value.
    pub fn agree_on_result<T>(&self, local: Result<T>, what: &str) -> Result<T> {
        let failed_rank = if local.is_err() { self.rank as i64 } else { i64::MAX };
        // MAX of the negation is the minimum failing rank.
        let mut v = [-failed_rank];
        self.allreduce_max_i64(&mut v, what)?;
        let lowest = -v[0];
        if lowest == i64::MAX {
            return local;
        }
        // The lowest failing rank broadcasts its status code and message.
        let mut msg = [0u8; 1024];
        let mut code: i32 = 0;
        if lowest == self.rank as i64 {
            if let Err(e) = &local {
                code = e.status() as i32;
                let text = e.to_string();
                let n = text.len().min(msg.len() - 1);
                msg[..n].copy_from_slice(&text.as_bytes()[..n]);
            }
        }
        // One fixed-size buffer (code, then message) on our own communicator; every rank calls.
        let mut buf = [0u8; 4 + 1024];
        buf[..4].copy_from_slice(&code.to_le_bytes());
        buf[4..].copy_from_slice(&msg);
        let (raw, root, len) = (self.raw.0, lowest as c_int, buf.len() as c_int);
        if self.call_deadline().is_some() {
            // SAFETY: p is valid for len bytes until the request completes (`on_heap`).
            self.on_heap(&mut buf, what, |p, req| unsafe { sys::MPI_Ibcast(p.cast(), len, sys::RSMPI_UINT8_T, root, raw, req) })?;
        } else {
            collective!(self, "MPI_Bcast", MPI_Bcast(buf.as_mut_ptr().cast(), len, sys::RSMPI_UINT8_T, root, raw), MPI_Ibcast)?;
        }
        code = i32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
        msg.copy_from_slice(&buf[4..]);
        let end = msg.iter().position(|b| *b == 0).unwrap_or(msg.len());
        let text = String::from_utf8_lossy(&msg[..end]).into_owned();
        let status = Status::from_i32(code).unwrap_or(Status::GPUWIRE_ERROR_INTERNAL);
        // The rank's message already names its kind ("backend unavailable: ..."): strip that.
        Err(Error::from_status(status, format!("{what} failed on rank {lowest}: {}", crate::error::without_kind(&text))))
    }
}

/// This machine's host name (gethostname), "?" if it cannot be read.
pub(crate) fn host_name() -> String {
    let mut host = [0u8; 256];
    // SAFETY: writes at most len - 1 bytes; the last stays NUL.
    if unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len() - 1) } != 0 {
        return "?".into();
    }
    let end = host.iter().position(|b| *b == 0).unwrap_or(host.len());
    String::from_utf8_lossy(&host[..end]).into_owned()
}

#[cfg(test)]
mod layout_tests {
    use super::{Choice, Communicator};
    use std::mem::{align_of, offset_of};

    /// What every call reads of a communicator lies in its first two cache lines (`crate::hot`
    /// says why): the configuration (timeout, checking), the collective slot, the engine, the
    /// broken flag's `Arc`, the backend state, the raw communicator, rank and size, the lean
    /// flag, the backend and the device.
    #[test]
    fn per_call_fields_in_the_first_two_lines() {
        assert_eq!(align_of::<Communicator>(), 64);
        let end = |off: usize, len: usize| off + len;
        for (what, last) in [
            ("config", end(offset_of!(Communicator, config), std::mem::size_of::<crate::config::Config>())),
            ("busy", end(offset_of!(Communicator, busy), 8)),
            ("engine", end(offset_of!(Communicator, engine), 8)),
            ("broken", end(offset_of!(Communicator, broken), 8)),
            ("backend_state", end(offset_of!(Communicator, backend_state), 24)),
            ("raw", end(offset_of!(Communicator, raw), std::mem::size_of::<crate::mpisys::RawComm>())),
            ("size", end(offset_of!(Communicator, size), 4)),
            ("lean", end(offset_of!(Communicator, lean), 1)),
            ("choice.kind", end(offset_of!(Communicator, choice) + offset_of!(Choice, kind), 4)),
            ("choice.device", end(offset_of!(Communicator, choice) + offset_of!(Choice, device), 4)),
        ] {
            assert!(last <= 128, "{what} ends at byte {last}");
        }
    }
}
