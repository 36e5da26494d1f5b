//! Communicators: gpuwire's own duplicate of an MPI communicator, its node-local view, its
//! configuration, and the backend chosen for device buffers.
//!
//! Creation, `split` and `dup` are collective over the parent communicator. gpuwire duplicates
//! the caller's communicator and sets MPI_ERRORS_RETURN on its duplicate only, so the caller's
//! communicator keeps its own error handler and gpuwire's traffic never matches the caller's.

use std::cell::Cell;
use std::ffi::c_int;
use std::sync::{Arc, Mutex};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::backend::{self, Choice};
use crate::config::Config;
use crate::error::{Error, Result, Status};
use crate::handles::{Kind, Registry};
use crate::mpisys::{self, MPI_Comm, RawComm, sys};
use crate::runtime;
use crate::types::BackendKind;

/// All live communicators, by handle.
pub static COMMS: Registry<Communicator> = Registry::new(Kind::Comm);

/// A gpuwire communicator.
#[derive(Debug)]
pub struct Communicator {
    raw: RawComm,
    node: RawComm,
    rank: i32,
    size: i32,
    local_rank: i32,
    local_size: i32,
    /// The number of nodes the ranks are on (of MPI_Comm_split_type SHARED).
    nodes: i32,
    config: Config,
    choice: Choice,
    /// Why the communicator is broken; shared with its internal duplicate ([`Self::internal`]).
    broken: Arc<Mutex<Option<String>>>,
    /// The duplicate that carries gpuwire's own messages on behalf of this communicator.
    internal: Mutex<Option<Arc<Communicator>>>,
    /// MPI collectives in their nonblocking form with a test loop that progresses pending IPC
    /// receives (agreed at creation, the same on every rank: `ipc::collectives_must_progress`,
    /// MPI_THREAD_SERIALIZED).
    nb_coll: bool,
    /// The thread (`thread_id`) inside a collective on this communicator, 0 when none.
    busy: AtomicU64,
    /// The progress engine of the operations that complete after their call (`crate::op`).
    engine: Arc<crate::engine::Engine>,
    pub(crate) backend_state: backend::State,
}

static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's number for `Communicator::busy` (never 0).
    static THREAD_ID: u64 = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
    /// The deadline of the gpuwire call this thread is in (set by `Communicator::enter`): every
    /// MPI step of one call (its agreement, its chunks, its sends and receives) shares it.
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Whether this thread is in a call that creates a communicator (`enter_unbounded`): its
    /// steps have no deadline, as MPI_Comm_split and MPI_Comm_dup have none.
    static UNBOUNDED: Cell<bool> = const { Cell::new(false) };
}

fn thread_id() -> u64 {
    THREAD_ID.with(|t| *t)
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
    fn drop(&mut self) {
        if self.release {
            self.c.busy.store(0, Ordering::Release);
        }
        if self.clear_deadline {
            DEADLINE.with(|d| d.set(None));
        }
        if self.clear_unbounded {
            UNBOUNDED.with(|u| u.set(false));
        }
    }
}

/// MPI communicators being set up; freed if setup fails part-way.
struct Owned(Vec<MPI_Comm>);

impl Owned {
    fn release(mut self) -> Vec<MPI_Comm> {
        std::mem::take(&mut self.0)
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        for c in self.0.iter_mut() {
            // SAFETY: each was created by MPI for us and is not used elsewhere.
            unsafe { sys::MPI_Comm_free(c) };
        }
    }
}

impl Communicator {
    /// Collective over `parent`: duplicates it and builds a communicator.
    pub fn create(parent: MPI_Comm, config: Result<Config>) -> Result<Communicator> {
        runtime::ensure_ready()?;
        if parent == mpisys::comm_null() {
            return Err(Error::InvalidArgument("the MPI communicator is MPI_COMM_NULL (or an invalid Fortran handle)".into()));
        }
        let mut dup = mpisys::comm_null();
        // SAFETY: parent is a communicator of the caller.
        mpisys::check(unsafe { sys::MPI_Comm_dup(parent, &mut dup) }, "MPI_Comm_dup")?;
        Self::adopt(dup, config)
    }

    /// Collective over `comm`, which gpuwire now owns (freed on failure too). `config` is this
    /// rank's configuration, or why it could not be read: every rank learns of any rank's bad
    /// or different configuration and fails the same way, instead of hanging.
    fn adopt(comm: MPI_Comm, config: Result<Config>) -> Result<Communicator> {
        let mut owned = Owned(vec![comm]);
        // SAFETY: comm is a valid communicator owned by gpuwire.
        unsafe {
            mpisys::check(sys::MPI_Comm_set_errhandler(comm, sys::RSMPI_ERRORS_RETURN), "MPI_Comm_set_errhandler")?;
        }
        let (mut rank, mut size) = (0, 0);
        let mut node = mpisys::comm_null();
        // SAFETY: as above; outputs are plain ints and a communicator.
        unsafe {
            mpisys::check(sys::MPI_Comm_rank(comm, &mut rank), "MPI_Comm_rank")?;
            mpisys::check(sys::MPI_Comm_size(comm, &mut size), "MPI_Comm_size")?;
            mpisys::check(
                sys::MPI_Comm_split_type(comm, sys::RSMPI_COMM_TYPE_SHARED, rank, sys::RSMPI_INFO_NULL, &mut node),
                "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)",
            )?;
        }
        owned.0.push(node);
        let (mut local_rank, mut local_size) = (0, 0);
        // SAFETY: node is valid.
        unsafe {
            mpisys::check(sys::MPI_Comm_rank(node, &mut local_rank), "MPI_Comm_rank")?;
            mpisys::check(sys::MPI_Comm_size(node, &mut local_size), "MPI_Comm_size")?;
        }
        // The number of nodes: one leader (node-local rank 0) on each.
        let (leader, mut nodes): (c_int, c_int) = ((local_rank == 0) as c_int, 0);
        // SAFETY: one int each way, on comm.
        mpisys::check(
            unsafe { sys::MPI_Allreduce((&leader as *const c_int).cast(), (&mut nodes as *mut c_int).cast(), 1, sys::RSMPI_INT32_T, sys::RSMPI_SUM, comm) },
            "MPI_Allreduce (the number of nodes)",
        )?;
        let mut c = Communicator {
            raw: RawComm(comm),
            node: RawComm(node),
            rank,
            size,
            local_rank,
            local_size,
            nodes,
            // No timeout or checking until the configuration is agreed.
            config: Config::default(),
            choice: Choice::default(),
            broken: Arc::new(Mutex::new(None)),
            internal: Mutex::new(None),
            // Until agreed below: the same (nonblocking) form on every rank.
            nb_coll: true,
            busy: AtomicU64::new(0),
            engine: Arc::new(crate::engine::Engine::default()),
            backend_state: backend::State::default(),
        };
        // From here on `c` frees both communicators when dropped (also on the error paths below).
        owned.release();
        let config = c.agree_on_result(config, "reading the configuration")?;
        c.agree_config(&config)?;
        c.config = config;
        crate::trace!("communicator: rank {rank}/{size}, node-local {local_rank}/{local_size}; choosing backend");
        let local = backend::choose(&c);
        crate::trace!("local backend choice: {:?}", local.as_ref().map(|ch| (ch.kind.name(), ch.device, ch.reason.clone())));
        let mut choice = c.agree_on_result(local, "choosing the backend")?;
        // Ranks may differ under AUTO (one without CUDA, one without libnccl): all take the
        // least capable backend chosen anywhere, which every rank can use (HOST < MPI_STAGED <
        // MPI_CUDA_AWARE < IPC < NCCL; IPC's eligibility is already the same on every rank).
        let k = capability(choice.kind);
        let mut v = [k, -k, (crate::backend::ipc::collectives_must_progress() || runtime::serialized()) as i64];
        c.allreduce_max_i64(&mut v, "agreeing on the backend")?;
        c.nb_coll = v[2] != 0;
        if v[0] != -v[1] {
            let lowest = of_capability(-v[1]);
            if lowest != choice.kind {
                choice.reason = format!("auto: another rank can only use {}, so every rank does (this rank could use {})", lowest.name(), choice.kind.name());
                choice.kind = lowest;
                if lowest == BackendKind::GPUWIRE_BACKEND_HOST {
                    choice.device = -1;
                }
            }
        }
        c.choice = choice;
        crate::trace!("agreed backend {}; setting up", c.choice.kind.name());
        let set = backend::setup(&mut c);
        c.agree_on_result(set, "setting up the backend")?;
        crate::trace!("communicator ready: {}", c.choice.reason);
        Ok(c)
    }

    /// Every rank must pass the same configuration (the device may differ): one exchange.
    fn agree_config(&self, cfg: &Config) -> Result<()> {
        let t = cfg.timeout.map(|t| t.as_micros().min(i64::MAX as u128) as i64).unwrap_or(0);
        let fields: [(&str, i64); 5] = [
            ("backend", cfg.backend as i64),
            ("check", cfg.check as i64),
            ("timeout", t),
            ("staging", cfg.staging as i64),
            ("chunk_bytes", cfg.chunk_bytes as i64),
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

    /// Collective: MPI_Comm_split of this communicator; ranks passing GPUWIRE_UNDEFINED (-1)
    /// get `None`. A bad color on any rank is an error on every rank. The new communicator
    /// inherits this one's configuration.
    pub fn split(&self, color: i32, key: i32) -> Result<Option<Communicator>> {
        let _call = self.enter_unbounded("gpuwire_comm_split")?;
        let valid = if color < 0 && color != -1 {
            Err(Error::InvalidArgument(format!("color {color}: colors are >= 0, or GPUWIRE_UNDEFINED")))
        } else {
            Ok(())
        };
        self.agree_on_result(valid, "gpuwire_comm_split")?;
        let color = if color == -1 { None } else { Some(color) };
        let mut out = mpisys::comm_null();
        let color = color.unwrap_or_else(mpisys::undefined);
        // SAFETY: raw is valid.
        mpisys::check(unsafe { sys::MPI_Comm_split(self.raw.0, color, key, &mut out) }, "MPI_Comm_split")?;
        if out == mpisys::comm_null() {
            return Ok(None);
        }
        Self::adopt(out, Ok(self.config.clone())).map(Some)
    }

    /// Collective: a new communicator with the same ranks and configuration.
    pub fn dup(&self) -> Result<Communicator> {
        let _call = self.enter_unbounded("gpuwire_comm_dup")?;
        let mut out = mpisys::comm_null();
        // SAFETY: raw is valid.
        mpisys::check(unsafe { sys::MPI_Comm_dup(self.raw.0, &mut out) }, "MPI_Comm_dup")?;
        Self::adopt(out, Ok(self.config.clone()))
    }

    /// The communicator of gpuwire's own messages on behalf of this one (those of distributed
    /// arrays): a duplicate with the same ranks, configuration, backend and device, so that no
    /// message of the program, whatever its tag, matches one of gpuwire's. Made the first time
    /// it is asked for (collective over this communicator then; a full setup of the backend),
    /// then shared by every later caller; freed with this communicator; broken when this one is
    /// broken, and this one with it. Not in the handle registry: the program never sees it.
    pub(crate) fn internal(&self) -> Result<Arc<Communicator>> {
        let mut slot = self.internal.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = &*slot {
            return Ok(c.clone());
        }
        self.ensure_usable()?;
        let mut out = mpisys::comm_null();
        // SAFETY: raw is valid.
        let dup = mpisys::check(unsafe { sys::MPI_Comm_dup(self.raw.0, &mut out) }, "MPI_Comm_dup");
        let owned = Owned(if dup.is_ok() { vec![out] } else { Vec::new() });
        self.agree_on_result(dup, "duplicating the communicator for gpuwire's own messages")?;
        let out = owned.release()[0];
        let mut config = self.config.clone();
        config.backend = self.choice.kind;
        if self.choice.device >= 0 {
            config.device = self.choice.device;
        }
        let mut c = Self::adopt(out, Ok(config))?;
        c.broken = self.broken.clone();
        let c = Arc::new(c);
        *slot = Some(c.clone());
        Ok(c)
    }

    pub fn raw(&self) -> MPI_Comm {
        self.raw.0
    }
    /// This communicator's progress engine.
    pub fn engine(&self) -> &Arc<crate::engine::Engine> {
        &self.engine
    }
    /// Whether MPI collectives on this communicator run as their nonblocking form waited by
    /// `wait_mpi` (`host::collective!`), the same on every rank (MPI does not match a blocking
    /// collective with a nonblocking one): with a timeout (the configuration is agreed), or when
    /// agreed at creation: any rank sees a GPU but has no IPC progress thread, or runs under
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
            "gpuwire {}: backend={} ({}); device={}; rank {}/{} (node-local {}/{}); host={}; nodes={}; mpi={}; thread level={}; check={}; timeout={}; {}",
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
        )
    }

    /// How operations that complete after their call are run here (describe).
    fn progress_note(&self) -> String {
        if !crate::engine::available() {
            return "progress=none (below MPI_THREAD_MULTIPLE: nonblocking operations complete before their call returns, and device operations block the host)".into();
        }
        let device = match self.choice.kind {
            BackendKind::GPUWIRE_BACKEND_HOST => "",
            BackendKind::GPUWIRE_BACKEND_NCCL => "; device operations enqueued on their stream by NCCL",
            _ if crate::engine::host_sync() => "; device operations wait for completion on the host (GPUWIRE_HOST_SYNC=1)",
            _ if self.config.check => "; device operations wait for completion on the host (checking mode)",
            _ if crate::engine::stream_ordered() => "; device operations stream-ordered (GPUWIRE_STREAM_ORDERED=1, experimental: the call returns before the data moves)",
            _ => "; blocking device operations return when their data is in place",
        };
        format!("progress=engine thread (nonblocking operations run there){device}")
    }

    /// Fails if an earlier timeout or abort broke this communicator.
    pub fn ensure_usable(&self) -> Result<()> {
        runtime::ensure_ready()?;
        match &*self.broken.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(why) => Err(Error::CommBroken(why.clone())),
            None => Ok(()),
        }
    }

    /// Whether an earlier timeout or abort broke this communicator.
    pub fn is_broken(&self) -> bool {
        self.broken.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// Marks the communicator unusable; later calls return GPUWIRE_ERROR_COMM_BROKEN.
    pub fn mark_broken(&self, why: String) {
        *self.broken.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
    }

    /// Begins a gpuwire call on this communicator: fails if an earlier timeout broke it. A
    /// collective (`collective`: every collective and every call that creates or frees a
    /// communicator from this one) claims the communicator for this thread, and fails at once
    /// with GPUWIRE_ERROR_INVALID_ARGUMENT while another thread is inside one (MPI forbids
    /// concurrent collectives on one communicator; the calls would corrupt each other's data):
    /// one atomic compare-exchange; a call nested in a collective of the same thread passes.
    /// With a timeout configured, the call's deadline starts here (unless this thread is already
    /// inside a call that has one): every MPI step of the call shares it (`wait_mpi`).
    pub fn enter(&self, what: &str, collective: bool) -> Result<CallGuard<'_>> {
        self.ensure_usable()?;
        let mut release = false;
        if collective {
            let me = thread_id();
            match self.busy.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => release = true,
                Err(t) if t == me => {}
                Err(_) => {
                    return Err(Error::InvalidArgument(format!(
                        "{what}: a collective is already in progress on this communicator on another thread (MPI forbids concurrent collectives on one communicator: give each thread its own communicator, e.g. from gpuwire_comm_dup, or serialize the calls)"
                    )));
                }
            }
        }
        let clear_deadline = match self.config.timeout {
            Some(t) => DEADLINE.with(|d| d.get().is_none() && {
                d.set(Some(Instant::now() + t));
                true
            }),
            None => false,
        };
        Ok(CallGuard { c: self, release, clear_deadline, clear_unbounded: false })
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

    /// The deadline of this thread's current gpuwire call (`enter`), else one timeout from now;
    /// `None` without a timeout.
    pub fn call_deadline(&self) -> Option<Instant> {
        if UNBOUNDED.with(|u| u.get()) {
            return None;
        }
        DEADLINE.with(|d| d.get()).or_else(|| self.config.timeout.map(|t| Instant::now() + t))
    }

    /// What is left of this thread's current call's deadline (`call_deadline`), for waits that
    /// take a duration (IPC); `None` without a timeout.
    pub fn remaining(&self) -> Option<std::time::Duration> {
        self.call_deadline().map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// Whether gpuwire's blocking MPI calls on this communicator must run as their nonblocking
    /// form waited by `wait_mpi`: with a deadline to keep (a timeout), under
    /// MPI_THREAD_SERIALIZED (the MPI lock is released between tests), or while IPC receives may
    /// be pending (`ipc::recvs_pending`). For point-to-point calls (each rank may choose alone).
    pub fn nb_p2p(&self) -> bool {
        self.config.timeout.is_some() || runtime::serialized() || crate::backend::ipc::recvs_pending()
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
        crate::backend::host::collective!(
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
        self.wait_mpi(&mut req, mpisys::status_ignore(), what, false)?;
        v.copy_from_slice(buf);
        // SAFETY: the request completed: MPI no longer uses buf, which came from the Box leaked
        // above.
        drop(unsafe { Box::from_raw(buf as *mut [T]) });
        Ok(())
    }

    /// Waits for `req`, an active request of a call on this communicator (or MPI_REQUEST_NULL):
    /// MPI_Test in a loop (under MPI_THREAD_SERIALIZED, each test holds gpuwire's MPI lock, so
    /// other threads' calls proceed in between) that progresses the process's pending IPC
    /// receives (a peer may be blocked in a send to this process until it copies the data),
    /// until the call's deadline (`call_deadline`), if any. At the deadline a receive
    /// (`cancel`) is cancelled (MPI_Cancel, then completed); any other request is abandoned (MPI
    /// cannot cancel a collective): MPI may still read its send buffer and write its receive
    /// buffer if the peer arrives later. The communicator is then broken, and TIMEOUT returned.
    pub fn wait_mpi(&self, req: &mut sys::MPI_Request, status: *mut sys::MPI_Status, what: &str, cancel: bool) -> Result<()> {
        let deadline = self.call_deadline();
        let mut spins = 0u32;
        loop {
            let mut flag: c_int = 0;
            {
                let _mpi = runtime::mpi_lock();
                // SAFETY: an active request of ours, or MPI_REQUEST_NULL.
                mpisys::check(unsafe { sys::MPI_Test(req, &mut flag, status) }, what)?;
            }
            if flag != 0 {
                return Ok(());
            }
            crate::backend::ipc::progress_all();
            if deadline.is_some_and(|d| Instant::now() >= d) {
                if cancel {
                    let _mpi = runtime::mpi_lock();
                    // SAFETY: an active receive of ours; a cancelled request's wait returns
                    // whatever the other processes do (MPI standard, MPI_Cancel).
                    unsafe {
                        sys::MPI_Cancel(req);
                        sys::MPI_Wait(req, mpisys::status_ignore());
                    }
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
            crate::backend::host::collective!(self, "MPI_Bcast", MPI_Bcast(buf.as_mut_ptr().cast(), len, sys::RSMPI_UINT8_T, root, raw), MPI_Ibcast)?;
        }
        code = i32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
        msg.copy_from_slice(&buf[4..]);
        let end = msg.iter().position(|b| *b == 0).unwrap_or(msg.len());
        let text = String::from_utf8_lossy(&msg[..end]).into_owned();
        let status = Status::from_i32(code).unwrap_or(Status::GPUWIRE_ERROR_INTERNAL);
        // The rank's message already names its kind ("backend unavailable: ..."): strip that.
        let detail = text.split_once(": ").map(|(_, d)| d.to_string()).unwrap_or(text);
        Err(Error::from_status(status, format!("{what} failed on rank {lowest}: {detail}")))
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        // The internal duplicate first (it is freed on every rank where this one is).
        drop(self.internal.get_mut().unwrap_or_else(|p| p.into_inner()).take());
        if runtime::mpi_finalized() {
            return;
        }
        backend::teardown(self);
        if self.is_broken() {
            // A timeout may have abandoned MPI requests on them, which MPI still progresses (and
            // would crash on a freed communicator): both are left to MPI_Finalize.
            return;
        }
        // SAFETY: both communicators are owned by this value and freed only here.
        unsafe {
            let mut node = self.node.0;
            sys::MPI_Comm_free(&mut node);
            let mut raw = self.raw.0;
            sys::MPI_Comm_free(&mut raw);
        }
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

/// The order in which AUTO falls back between ranks: a rank that chose a backend can use every
/// backend of lower capability.
const CAPABILITY: [BackendKind; 5] = [
    BackendKind::GPUWIRE_BACKEND_HOST,
    BackendKind::GPUWIRE_BACKEND_MPI_STAGED,
    BackendKind::GPUWIRE_BACKEND_MPI_CUDA_AWARE,
    BackendKind::GPUWIRE_BACKEND_IPC,
    BackendKind::GPUWIRE_BACKEND_NCCL,
];

fn capability(k: BackendKind) -> i64 {
    CAPABILITY.iter().position(|&x| x == k).unwrap_or(0) as i64
}

fn of_capability(i: i64) -> BackendKind {
    CAPABILITY.get(i as usize).copied().unwrap_or(BackendKind::GPUWIRE_BACKEND_HOST)
}

#[cfg(test)]
mod capability_tests {
    use super::*;

    #[test]
    fn auto_falls_back_to_a_backend_every_rank_can_use() {
        // One rank loads libnccl (NCCL), another not (IPC): IPC, not NCCL as by enum value.
        let pick = |a: BackendKind, b: BackendKind| of_capability(capability(a).min(capability(b)));
        assert_eq!(pick(BackendKind::GPUWIRE_BACKEND_NCCL, BackendKind::GPUWIRE_BACKEND_IPC), BackendKind::GPUWIRE_BACKEND_IPC);
        assert_eq!(pick(BackendKind::GPUWIRE_BACKEND_IPC, BackendKind::GPUWIRE_BACKEND_MPI_STAGED), BackendKind::GPUWIRE_BACKEND_MPI_STAGED);
        assert_eq!(pick(BackendKind::GPUWIRE_BACKEND_NCCL, BackendKind::GPUWIRE_BACKEND_MPI_CUDA_AWARE), BackendKind::GPUWIRE_BACKEND_MPI_CUDA_AWARE);
        assert_eq!(pick(BackendKind::GPUWIRE_BACKEND_NCCL, BackendKind::GPUWIRE_BACKEND_HOST), BackendKind::GPUWIRE_BACKEND_HOST);
        for k in CAPABILITY {
            assert_eq!(of_capability(capability(k)), k);
        }
    }
}
