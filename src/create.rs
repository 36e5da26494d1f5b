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

/// Collective over `comm` (of `size` ranks): the number of nodes its ranks are on, from every
/// rank's node as MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) gave it (`node`, of `local_size`
/// ranks). Each rank names its node by its lowest member's rank in `comm` (found locally, with
/// MPI_Group_translate_ranks) and its members (a hash); the ranks exchange these over `comm`
/// only (no call on `node`, which may be the faulty one) and check that they agree
/// ([`check_nodes`]). Where they do not, every rank fails alike with GPUWIRE_ERROR_MPI instead
/// of hanging in the first collective on its node (seen with an Open MPI 4.1.6 on two hosts
/// simulated in one machine: two ranks of one host counted three ranks on their node).
fn count_nodes(comm: MPI_Comm, node: MPI_Comm, size: c_int, local_size: c_int) -> Result<c_int> {
    let n = local_size.max(0) as usize;
    let mut members = vec![0 as c_int; n];
    let locals: Vec<c_int> = (0..local_size).collect();
    // SAFETY: valid communicators; groups freed below; `members` has local_size entries.
    unsafe {
        let (mut gn, mut gc) = (std::mem::zeroed(), std::mem::zeroed());
        mpisys::check(sys::MPI_Comm_group(node, &mut gn), "MPI_Comm_group")?;
        mpisys::check(sys::MPI_Comm_group(comm, &mut gc), "MPI_Comm_group")?;
        let r = sys::MPI_Group_translate_ranks(gn, local_size, locals.as_ptr(), gc, members.as_mut_ptr());
        sys::MPI_Group_free(&mut gn);
        sys::MPI_Group_free(&mut gc);
        mpisys::check(r, "MPI_Group_translate_ranks (this node's ranks)")?;
    }
    members.sort_unstable();
    let hash = members.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, m| (h ^ *m as u32 as u64).wrapping_mul(0x1000_0000_01b3)) as i64;
    let mine = [members.first().map_or(-1, |m| *m as i64), local_size as i64, hash];
    let mut all = vec![0i64; 3 * size.max(0) as usize];
    // SAFETY: three i64 from every rank into `all` (3 x size entries).
    mpisys::check(
        unsafe { sys::MPI_Allgather(mine.as_ptr().cast(), 3, sys::RSMPI_INT64_T, all.as_mut_ptr().cast(), 3, sys::RSMPI_INT64_T, comm) },
        "MPI_Allgather (every rank's node)",
    )?;
    let recs: Vec<[i64; 3]> = all.chunks(3).map(|x| [x[0], x[1], x[2]]).collect();
    check_nodes(&recs).map(|k| k as c_int).map_err(|why| {
        Error::Mpi(format!("MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) gave the ranks inconsistent nodes ({why}): the MPI or the way it was launched is at fault (hosts whose ranks disagree about who shares their memory); gpuwire stops here rather than hang in the first call on such a node"))
    })
}

/// The number of nodes, from each rank's (lowest member, member count, hash of the members), or
/// why they disagree: every rank must be its node's lowest member or list the same node as that
/// member does, and a node's count must be the number of ranks naming it.
fn check_nodes(recs: &[[i64; 3]]) -> std::result::Result<usize, String> {
    let p = recs.len() as i64;
    let mut nodes = 0;
    for (r, rec) in recs.iter().enumerate() {
        let [lead, count, _] = *rec;
        if lead < 0 || lead > r as i64 || lead >= p {
            return Err(format!("rank {r} names rank {lead} as its node's lowest rank"));
        }
        let theirs = recs[lead as usize];
        if theirs != *rec {
            return Err(format!("rank {r} counts {count} ranks on the node of rank {lead}, which counts {} (or other ones)", theirs[1]));
        }
        let named = recs.iter().filter(|x| x[0] == lead).count() as i64;
        if named != count {
            return Err(format!("rank {lead}'s node has {count} ranks by its members' count, {named} ranks name it"));
        }
        nodes += (lead == r as i64) as usize;
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::check_nodes;

    #[test]
    fn consistent_nodes_are_counted_and_inconsistent_ones_refused() {
        // 2 nodes {0, 1} and {2, 3}; 3 nodes {0}, {1, 2}, {3}.
        assert_eq!(check_nodes(&[[0, 2, 7], [0, 2, 7], [2, 2, 9], [2, 2, 9]]), Ok(2));
        assert_eq!(check_nodes(&[[0, 1, 1], [1, 2, 5], [1, 2, 5], [3, 1, 4]]), Ok(3));
        assert_eq!(check_nodes(&[[0, 1, 1]]), Ok(1));
        // As seen with Open MPI 4.1.6 on simulated hosts: ranks 0 and 1 count three ranks on their
        // node, ranks 2 and 3 two on theirs.
        let e = check_nodes(&[[0, 3, 7], [0, 3, 7], [2, 2, 9], [2, 2, 9]]).unwrap_err();
        assert!(e.contains("rank 0's node has 3 ranks"), "{e}");
        // Members that disagree with their lowest rank (another hash or count).
        assert!(check_nodes(&[[0, 2, 7], [0, 2, 8]]).unwrap_err().contains("rank 1 counts 2 ranks on the node of rank 0"));
        // A lowest rank above the rank itself, or out of range.
        assert!(check_nodes(&[[1, 2, 7], [1, 2, 7]]).is_err());
        assert!(check_nodes(&[[0, 1, 1], [5, 1, 1]]).is_err());
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
        runtime::check_ready()?;
        if parent == mpisys::comm_null() {
            return Err(Error::InvalidArgument("the MPI communicator is MPI_COMM_NULL (or an invalid Fortran handle)".into()));
        }
        // Local, so every rank of an intercommunicator refuses it alike (its collectives have
        // another meaning, and gpuwire's own agreements on it would be erroneous MPI).
        let mut inter = 0;
        // SAFETY: parent is a communicator of the caller; inter is a plain int.
        mpisys::check(unsafe { sys::MPI_Comm_test_inter(parent, &mut inter) }, "MPI_Comm_test_inter")?;
        if inter != 0 {
            return Err(Error::InvalidArgument(
                "the MPI communicator is an intercommunicator; gpuwire works on intracommunicators (merge it with MPI_Intercomm_merge first)".into(),
            ));
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
        // Creation is not bounded by the timeout, on any rank (the README, Timeouts).
        let _unbounded = crate::comm::Unbounded::enter();
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
        let nodes = count_nodes(comm, node, size, local_size)?;
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
            // Until the configuration and backend are settled below.
            lean: false,
            engine: Arc::new(crate::engine::Engine::default()),
            backend_state: BackendState::default(),
            primary: AtomicU64::new(0),
            host_p2p: Default::default(),
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
        c.lean = crate::lean::applies(&c);
        c.host_p2p = backend::host_p2p(&c);
        crate::trace!("communicator ready: {}", c.choice.reason);
        Ok(c)
    }

    /// Collective: MPI_Comm_split of this communicator; ranks passing GPUWIRE_UNDEFINED (-1), or
    /// the MPI_UNDEFINED of the MPI gpuwire was built with (as MPI_PROC_NULL is taken for
    /// GPUWIRE_PROC_NULL), get `None`. A bad color on any rank is an error on every rank. The
    /// new communicator inherits this one's configuration. `local`: this rank's own verdict on
    /// its other arguments (the C call's output pointer), an error on every rank if it fails.
    pub fn split(&self, color: i32, key: i32, local: Result<()>) -> Result<Option<Communicator>> {
        let _call = self.enter_unbounded("gpuwire_comm_split")?;
        let none = color == -1 || color == mpisys::undefined();
        let valid = local.and_then(|()| {
            if color < 0 && !none {
                Err(Error::InvalidArgument(format!("color {color}: colors are >= 0, or GPUWIRE_UNDEFINED (MPI_UNDEFINED)")))
            } else {
                Ok(())
            }
        });
        self.agree_on_result(valid, "gpuwire_comm_split")?;
        let color = if none { None } else { Some(color) };
        let mut out = mpisys::comm_null();
        let color = color.unwrap_or_else(mpisys::undefined);
        // SAFETY: raw is valid.
        mpisys::check(unsafe { sys::MPI_Comm_split(self.raw.0, color, key, &mut out) }, "MPI_Comm_split")?;
        if out == mpisys::comm_null() {
            return Ok(None);
        }
        Self::adopt(out, Ok(self.config.clone())).map(Some)
    }

    /// Collective: a new communicator with the same ranks and configuration. `local`: this
    /// rank's own verdict on its other arguments (the C call's output pointer): the ranks agree
    /// on it first, so that a bad one is an error on every rank, not a hang of the others in
    /// MPI_Comm_dup.
    pub fn dup(&self, local: Result<()>) -> Result<Communicator> {
        let _call = self.enter_unbounded("gpuwire_comm_dup")?;
        self.agree_on_result(local, "gpuwire_comm_dup")?;
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

impl Communicator {
    /// At gpuwire_comm_free (collective), `self` being the caller's reference: where other
    /// holders keep the communicator (a distributed array, a pending request, another thread's
    /// call), or keep its arrays' internal duplicate, the last release comes later at a point of
    /// this rank alone (a local gpuwire_darray_free, a wait): what of the teardown waits for the
    /// other ranks is settled now (`backend::freed_while_held`).
    pub(crate) fn freed(self: &Arc<Self>) {
        let internal = self.internal.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let held = Arc::strong_count(self) > 1;
        if held {
            backend::freed_while_held(self);
        }
        if let Some(i) = internal {
            // Held by `self` and here, and by anything else.
            if held || Arc::strong_count(&i) > 2 {
                backend::freed_while_held(&i);
            }
        }
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
