//! Creating and freeing communicators: `create` (from an MPI communicator), `split`, `dup`, the
//! internal duplicate of distributed arrays, and `Drop`. Above the backends: creation asks the
//! registry to choose and set up a backend (`backend::choose`, `backend::setup`), and a free
//! tears it down (`backend::teardown`); `comm` defines the communicator, and imports no backend.
//!
//! Creation, `split` and `dup` are collective over the parent communicator. gpuwire duplicates
//! the caller's communicator and sets MPI_ERRORS_RETURN on its duplicate only, so the caller's
//! communicator keeps its own error handler and gpuwire's traffic never matches the caller's.

use std::ffi::c_int;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use crate::backend;
use crate::comm::{BackendState, Choice, Communicator};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::mpisys::{self, MPI_Comm, RawComm, sys};
use crate::runtime;
use crate::types::BackendKind;

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
    /// or different configuration and fails the same way, instead of hanging. (Also the HIER
    /// backend's node and leaders communicators: `backend::hier`.)
    pub(crate) fn adopt(comm: MPI_Comm, config: Result<Config>) -> Result<Communicator> {
        backend::register_progress();
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
            broken: Arc::default(),
            internal: Mutex::new(None),
            // Until agreed below: the same (nonblocking) form on every rank.
            nb_coll: true,
            busy: AtomicU64::new(0),
            engine: Arc::new(crate::engine::Engine::default()),
            backend_state: BackendState::default(),
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
        // least capable backend chosen anywhere, which every rank can use (the registry's order,
        // `backend::BACKENDS`; IPC's eligibility is already the same on every rank).
        let k = backend::capability(choice.kind);
        let mut v = [k, -k, (crate::progress::collectives_must_progress() || runtime::serialized()) as i64];
        c.allreduce_max_i64(&mut v, "agreeing on the backend")?;
        c.nb_coll = v[2] != 0;
        if v[0] != -v[1] {
            let lowest = backend::of_capability(-v[1]);
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
