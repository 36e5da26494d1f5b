//! The data paths, and the one place that chooses among them: [`BACKENDS`], the registry.
//!
//! Each backend is one entry of [`BACKENDS`]: when it can be used (its eligibility, judged at
//! communicator creation), its state (setup, teardown), its [`Path`], what it does natively
//! (operations, reductions, memory) and its fallback, the backend of the same communicator that
//! does the rest. The list's order is AUTO's (the first eligible entry), and the order used when
//! ranks chose differently (every rank takes the entry furthest down the list that any rank
//! chose: each can use those below its own). [`route`] picks each call's path from the entry
//! alone; no backend calls another.
//!
//! **Routing rule.** Whether a call is native or goes to the fallback depends only on what every
//! rank passes alike (MPI requires it of a correct program; checking mode verifies it): the
//! operation, and a reduction's datatype and op. The memory kinds of a rank's buffers choose
//! between plain MPI ([`host`]: host-accessible buffers only) and the device backend, on each
//! rank, as before (checking mode refuses a collective whose ranks differ there).

pub mod devstate;
pub mod hier;
pub mod host;
pub mod ipc;
pub mod mpi_cuda_aware;
pub mod mpi_staged;
pub mod nccl;
pub mod ordered;
pub mod p2p;
pub mod path;
pub mod ring;
pub mod split;
pub mod topology;
pub mod turn;

pub use path::{Blocks, Input, OpSet, Operation, Path};

use std::sync::Mutex;

use crate::buffer::Buffer;
use crate::comm::{Choice, Communicator, HostP2p};
use crate::device::{self, Stream};
use crate::mpisys;
use crate::error::{Error, Result};
use crate::request::Pending;
use crate::types::{BackendKind, Dtype, ReduceOp};

/// The backends' progress sources, in the order every wait runs them (`crate::progress`).
static PROGRESS: [&crate::progress::Source; 2] = [&p2p::PROGRESS, &ipc::PROGRESS];

/// Hands the backends' progress sources to `crate::progress` (at every communicator creation;
/// the first counts).
pub fn register_progress() {
    crate::progress::register(&PROGRESS, crate::request::reap_detached);
}

/// gpuwire_comm_abort's part in the backends (`Communicator::abort`): NCCL aborts its
/// communicator; the MPI paths have nothing to abort (the communicator is broken: gpuwire's
/// waits end).
pub fn abort(c: &Communicator, why: String) {
    match c.backend() {
        BackendKind::GPUWIRE_BACKEND_NCCL => nccl::abort_comm(c, why),
        BackendKind::GPUWIRE_BACKEND_IPC => ipc::abort(c, why),
        _ => c.mark_broken(why),
    }
}

// ---- the registry ----------------------------------------------------------------------------

/// What eligibility is judged from, at creation.
pub(crate) struct Probe<'a> {
    c: &'a Communicator,
    /// This rank's device, if it has one.
    device: Option<i32>,
    /// Whether this process has CUDA with devices.
    cuda: bool,
}

/// Operations a backend does on device memory.
pub(crate) enum Ops {
    /// Every operation of [`Path`] (a new one too: the MPI paths, which have no fallback).
    Every,
    /// These; a new operation goes to the fallback until it is listed.
    Only(OpSet),
}

impl Ops {
    fn contains(&self, op: Operation) -> bool {
        match self {
            Ops::Every => true,
            Ops::Only(l) => l.contains(op),
        }
    }
}

/// What a backend does itself; the rest goes to its fallback. In order: what [`decide`] reads
/// first (`Backend`'s layout).
#[repr(C)]
pub(crate) struct Native {
    /// The operations it does with host memory only, or with no buffer, too (else plain MPI).
    pub host: OpSet,
    /// The operations it does on device memory.
    pub ops: Ops,
    /// The reductions (datatype, op) it does.
    pub reduces: fn(Dtype, ReduceOp) -> bool,
    /// Whether it takes a call that mixes host and device buffers.
    pub mixed: bool,
    /// Whether ranks of one call may pass different memory kinds (host buffers on one, device
    /// buffers on another, as MPI allows): a host-memory rank's path (plain MPI, or this
    /// backend's own for the operations in `host`) makes the same MPI calls as a device rank's,
    /// also where the device rank's call goes to the fallback. Where not, checking mode compares
    /// the memory kinds (`Communicator::agree`) and refuses a mix on every rank.
    pub kinds_per_rank: bool,
    /// What goes to the fallback at the call, decided there by every rank together, in words.
    pub at_call: &'static str,
}

/// One backend. In order, aligned to a cache line: what every call's routing reads ([`entry`],
/// [`decide`], [`route`]) in the entry's first two lines (`crate::hot`'s reason).
#[repr(C, align(64))]
pub(crate) struct Backend {
    pub kind: BackendKind,
    path: &'static dyn Path,
    /// What does, on the same communicator, what this one does not natively.
    pub fallback: Option<Fallback>,
    pub native: Native,
    /// Whether it can be used, with its words for the reason, or why not. Collective over the
    /// communicator when the agreed configuration may take this backend (so every rank calls
    /// it, whatever its own state).
    eligible: fn(&Probe) -> Result<std::result::Result<String, String>>,
    /// The reason when it was requested (from its eligibility's words).
    requested: fn(&str) -> String,
    /// The error when it was requested but cannot be used (from why not).
    refused: fn(&str) -> String,
    /// AUTO took it: the last clause of the reason (None: the clause before says it).
    taken: fn(&str) -> Option<String>,
    /// AUTO passed it over: its clause of the reason.
    passed: fn(&str) -> String,
    /// Collective, once every rank agreed on the choice: makes its state. Under AUTO it may
    /// hand the communicator to the next eligible backend (`fall_back_from`).
    setup: fn(&mut Communicator) -> Result<()>,
    /// Releases its state, if the communicator has it (every entry's runs at a free).
    teardown: fn(&mut Communicator),
    /// At gpuwire_comm_free, when other holders keep the communicator (`freed_while_held`):
    /// settles now, at the collective free, what of its teardown waits for the other ranks,
    /// since the teardown itself comes later at a point of this rank alone.
    freed_while_held: fn(&Communicator),
}

/// A backend's fallback: another backend of the same communicator, and the path that takes a
/// call there (with any step of leaving the first one: NCCL closes its open group).
pub(crate) struct Fallback {
    pub kind: BackendKind,
    path: &'static dyn Path,
}

/// Every operation but barrier (which has no buffer: plain MPI unless a backend does it itself)
/// and scan, as NCCL does them.
const NCCL_OPS: OpSet = OpSet::of(&[
    Operation::Send,
    Operation::Recv,
    Operation::Isend,
    Operation::Irecv,
    Operation::Sendrecv,
    Operation::Bcast,
    Operation::Reduce,
    Operation::Allreduce,
    Operation::Allgather,
    Operation::Allgatherv,
    Operation::ReduceScatter,
    Operation::Alltoall,
    Operation::Gather,
    Operation::Scatter,
    Operation::Alltoallv,
    Operation::Gatherv,
    Operation::Scatterv,
    Operation::ReduceScatterv,
]);
/// NCCL's and scan: every operation with buffers, as IPC does them.
const IPC_OPS: OpSet = OpSet::of(&[
    Operation::Send,
    Operation::Recv,
    Operation::Isend,
    Operation::Irecv,
    Operation::Sendrecv,
    Operation::Bcast,
    Operation::Reduce,
    Operation::Allreduce,
    Operation::Allgather,
    Operation::Allgatherv,
    Operation::ReduceScatter,
    Operation::Scan,
    Operation::Alltoall,
    Operation::Gather,
    Operation::Scatter,
    Operation::Alltoallv,
    Operation::Gatherv,
    Operation::Scatterv,
    Operation::ReduceScatterv,
    Operation::Barrier,
]);
/// What HIER composes from its node and leaders communicators (on host memory too).
const HIER_OPS: OpSet = OpSet::of(&[Operation::Bcast, Operation::Reduce, Operation::Allreduce, Operation::Allgather, Operation::Allgatherv, Operation::ReduceScatter]);

fn every_reduction(_: Dtype, _: ReduceOp) -> bool {
    true
}
fn no_state(_: &mut Communicator) -> Result<()> {
    Ok(())
}
fn no_teardown(_: &mut Communicator) {}
fn nothing_to_settle(_: &Communicator) {}
fn eligible_always(_: &Probe) -> Result<std::result::Result<String, String>> {
    Ok(Ok(String::new()))
}

/// The backends, most capable first: AUTO's order, and the order used when ranks disagree.
pub(crate) static BACKENDS: [Backend; 6] = [
    Backend {
        kind: BackendKind::GPUWIRE_BACKEND_NCCL,
        // Two ranks on one GPU make NCCL unusable (collective: every rank asks).
        eligible: |p| {
            let shared = topology::shared_gpus(p.c, p.device)?;
            Ok(match shared {
                Some(s) => Err(s),
                None if !p.cuda => Err("no CUDA".into()),
                None => nccl::available(),
            })
        },
        requested: |v| format!("requested; NCCL {v}"),
        refused: |e| format!("NCCL was requested but cannot be used: {e}"),
        taken: |v| Some(format!("every rank has its own GPU and NCCL {v} loads")),
        passed: |why| format!("NCCL not used ({why})"),
        setup: setup_nccl,
        teardown: |c| {
            if let Some(mut n) = c.backend_state.take::<nccl::NcclState>() {
                n.destroy(c.is_broken());
            }
        },
        // ncclCommDestroy waits for no other rank.
        freed_while_held: nothing_to_settle,
        path: &nccl::NcclPath,
        // A host-memory rank takes plain MPI, a device rank NCCL (or the fallback's ring).
        native: Native { ops: Ops::Only(NCCL_OPS), reduces: nccl::reduces, mixed: false, kinds_per_rank: false, host: OpSet::of(&[]), at_call: "" },
        fallback: Some(Fallback { kind: BackendKind::GPUWIRE_BACKEND_MPI_STAGED, path: &FROM_NCCL }),
    },
    Backend {
        kind: BackendKind::GPUWIRE_BACKEND_HIER,
        // Ranks on several nodes, one node with two or more (collective: every rank asks).
        eligible: |p| hier::eligible(p.c, p.cuda),
        requested: |v| format!("requested; {v}"),
        refused: |e| format!("HIER was requested but cannot be used: {e}"),
        // The setup says how (what each level chose).
        taken: |_| None,
        passed: |why| format!("hierarchical not used ({why})"),
        setup: setup_hier,
        teardown: |c| drop(c.backend_state.take::<hier::HierState>()),
        freed_while_held: |c| {
            if let Some(h) = c.backend_state.get::<hier::HierState>() {
                h.freed_while_held();
            }
        },
        path: &hier::HierPath,
        native: Native {
            ops: Ops::Only(HIER_OPS),
            reduces: hier::reduces,
            mixed: false,
            // Device calls below GPUWIRE_HIER_MIN_BYTES take the flat staged path, host calls HIER's.
            kinds_per_rank: false,
            host: HIER_OPS,
            at_call: "device-memory calls of fewer bytes than GPUWIRE_HIER_MIN_BYTES (64 KiB unless set)",
        },
        fallback: Some(Fallback { kind: BackendKind::GPUWIRE_BACKEND_MPI_STAGED, path: &mpi_staged::StagedPath }),
    },
    Backend {
        kind: BackendKind::GPUWIRE_BACKEND_IPC,
        eligible: |p| ipc::eligible(p.c, p.device),
        requested: |v| format!("requested; {v}"),
        refused: |e| format!("IPC was requested but cannot be used: {e}"),
        taken: |v| Some(format!("{v}: CUDA IPC")),
        passed: |why| format!("IPC not used ({why})"),
        setup: |c| {
            let st = ipc::IpcState::new(c, c.device())?;
            if st.collectives_stream_ordered() {
                c.backend_state.set(crate::comm::StreamNote(
                    "; device collectives, and blocking sends, receives and sendrecvs of more than 1 KiB (also in groups), stream-ordered: enqueued on their stream around words of the shared segment, the call returning before the data moves (isend and irecv return at once and complete on the host; messages of at most 1 KiB wait for their stream, as do those staged through host memory between ranks sharing a GPU: up to GPUWIRE_IPC_STAGED_MAX, 256 KiB unless set)",
                ));
            }
            c.backend_state.set_first(st);
            Ok(())
        },
        teardown: |c| {
            if let Some(mut s) = c.backend_state.take::<ipc::IpcState>() {
                s.destroy(c);
            }
        },
        freed_while_held: |c| {
            if let Some(s) = c.backend_state.get::<ipc::IpcState>() {
                s.leave_now();
            }
        },
        path: &ipc::IpcPath,
        // Host memory too, every operation: the two sides of a message, and the ranks of a
        // collective, must use one protocol, and none knows the others' memory (memory kinds are
        // each rank's own: a rank's host buffer meets another's device buffer in the IPC call,
        // whose small-message path takes host memory and which stages the call on every rank
        // when any rank's memory cannot be exported). Its barrier synchronises on the shared
        // segment.
        native: Native {
            ops: Ops::Only(IPC_OPS),
            reduces: every_reduction,
            mixed: true,
            kinds_per_rank: true,
            host: IPC_OPS,
            at_call: "memory IPC cannot export (MANAGED, host, VMM allocations without IPC support), and reductions above 1 KiB where the GPU kernels do not work",
        },
        // At the call, inside the IPC path (it needs the published buffer records).
        fallback: Some(Fallback { kind: BackendKind::GPUWIRE_BACKEND_MPI_STAGED, path: &mpi_staged::StagedPath }),
    },
    Backend {
        kind: BackendKind::GPUWIRE_BACKEND_MPI_CUDA_AWARE,
        eligible: |p| {
            if !p.cuda {
                return Ok(Err("no CUDA".into()));
            }
            let (aware, source) = mpisys::cuda_support()?;
            Ok(if aware == Some(true) { Ok(source) } else { Err(source) })
        },
        requested: |source| format!("requested; {source}"),
        refused: |source| format!(
            "MPI_CUDA_AWARE was requested but the MPI is not known to be CUDA-aware ({source}); gpuwire never gives a device pointer to such an MPI (use MPI_STAGED, or set GPUWIRE_CUDA_AWARE=1 if you know better)"
        ),
        taken: |source| Some(format!("the MPI is CUDA-aware ({source})")),
        // Passed over, AUTO takes MPI_STAGED, which is always eligible.
        passed: |source| format!("the MPI is not known to be CUDA-aware ({source}), so device data is staged through host memory"),
        setup: no_state,
        teardown: no_teardown,
        freed_while_held: nothing_to_settle,
        path: &mpi_cuda_aware::CudaAwarePath,
        // Reductions on host memory too: a large one takes the ring on every rank whatever its
        // memory (device chunks by the CUDA-aware MPI and GPU kernels, host ones by the CPU), so
        // that a rank's host buffers meet another's device buffers (plain MPI's collective there
        // hung against the ring). The other operations are the same MPI calls either way.
        native: Native {
            ops: Ops::Every,
            reduces: every_reduction,
            mixed: true,
            kinds_per_rank: true,
            host: OpSet::of(&[Operation::Reduce, Operation::Allreduce, Operation::ReduceScatter]),
            at_call: "",
        },
        fallback: None,
    },
    Backend {
        kind: BackendKind::GPUWIRE_BACKEND_MPI_STAGED,
        eligible: eligible_always,
        requested: |_| "requested".into(),
        refused: |e| format!("MPI_STAGED was requested but cannot be used: {e}"),
        taken: |_| None,
        passed: |why| format!("MPI_STAGED not used ({why})"),
        setup: no_state,
        teardown: no_teardown,
        freed_while_held: nothing_to_settle,
        path: &mpi_staged::StagedPath,
        // Allreduce on host memory too: a large one is made in two phases on every rank whatever
        // its memory (`split`), so that a rank's host buffers meet another's device buffers.
        native: Native { ops: Ops::Every, reduces: every_reduction, mixed: true, kinds_per_rank: true, host: OpSet::of(&[Operation::Allreduce]), at_call: "" },
        fallback: None,
    },
    Backend {
        kind: BackendKind::GPUWIRE_BACKEND_HOST,
        eligible: eligible_always,
        requested: |_| "requested; device buffers are refused".into(),
        refused: |e| format!("HOST was requested but cannot be used: {e}"),
        taken: |_| None,
        passed: |why| format!("HOST not used ({why})"),
        setup: no_state,
        teardown: no_teardown,
        freed_while_held: nothing_to_settle,
        path: &host::HostPath,
        native: Native { ops: Ops::Only(OpSet::of(&[])), reduces: every_reduction, mixed: false, kinds_per_rank: false, host: OpSet::of(&[]), at_call: "" },
        fallback: None,
    },
];

/// The registry's entry of `kind` (AUTO has none: it is resolved at creation).
pub(crate) fn entry(kind: BackendKind) -> Result<&'static Backend> {
    BACKENDS.iter().find(|b| b.kind == kind).ok_or_else(|| Error::Internal(format!("no backend {} in the registry", kind.name())))
}

/// How capable `kind` is: higher for entries further up [`BACKENDS`] (0 for the last). Ranks that
/// chose differently all take the least capable choice, which every one of them can use.
pub fn capability(kind: BackendKind) -> i64 {
    BACKENDS.iter().position(|b| b.kind == kind).map_or(0, |i| (BACKENDS.len() - 1 - i) as i64)
}

/// The backend of capability `i` ([`capability`]).
pub fn of_capability(i: i64) -> BackendKind {
    usize::try_from(i).ok().and_then(|i| (BACKENDS.len() - 1).checked_sub(i)).map_or(BackendKind::GPUWIRE_BACKEND_HOST, |k| BACKENDS[k].kind)
}

// ---- choosing, setting up, tearing down --------------------------------------------------------

/// At communicator creation (local, but for the collective eligibility checks; the caller agrees
/// the outcome across ranks): picks the backend for device buffers and this rank's device.
pub fn choose(c: &Communicator) -> Result<Choice> {
    let cfg = c.config();
    let requested = cfg.backend;
    if requested == BackendKind::GPUWIRE_BACKEND_HOST {
        let host = entry(requested)?;
        return Ok(Choice { kind: requested, reason: (host.requested)(""), device: -1, ..Choice::default() });
    }
    let cuda = device::cuda_with_devices();
    // A bad device is reported after the collective exchanges below, which every rank must
    // make whatever its own state (the caller agrees the outcome).
    let mut bad_device = None;
    let device = match &cuda {
        Ok(cuda) if cfg.device >= cuda.device_count => {
            bad_device = Some(Error::InvalidArgument(format!(
                "device {} was requested but this process sees {} CUDA device(s)",
                cfg.device, cuda.device_count
            )));
            None
        }
        Ok(_) if cfg.device >= 0 => Some(cfg.device),
        Ok(cuda) => Some(c.local_rank() % cuda.device_count),
        Err(_) => None,
    };
    // The eligibility of every backend the (agreed) configuration may take, in the list's
    // order: collective checks among them, so every rank asks, whatever its own state.
    let probe = Probe { c, device, cuda: cuda.is_ok() };
    let auto = requested == BackendKind::GPUWIRE_BACKEND_AUTO;
    let mut judged = Vec::new();
    for b in BACKENDS.iter().filter(|b| (auto && b.kind != BackendKind::GPUWIRE_BACKEND_HOST) || b.kind == requested) {
        judged.push((b, (b.eligible)(&probe)?));
    }
    if let Some(e) = bad_device {
        return Err(e);
    }
    if let Err(e) = cuda {
        if auto {
            return Ok(Choice { kind: BackendKind::GPUWIRE_BACKEND_HOST, reason: format!("auto: {}", e.detail()), device: -1, ..Choice::default() });
        }
        if let [(b, judged)] = &judged[..] {
            if b.kind == BackendKind::GPUWIRE_BACKEND_HIER {
                // HIER composes communicators of its own: without CUDA, for host memory.
                return match judged {
                    Ok(v) => Ok(Choice { kind: b.kind, reason: format!("{}; host memory only ({})", (b.requested)(v), e.detail()), device: -1, ..Choice::default() }),
                    Err(why) => Err(Error::BackendUnavailable((b.refused)(why))),
                };
            }
        }
        return Err(Error::BackendUnavailable(format!("{} was requested but cannot be used: {}", requested.name(), e.detail())));
    }
    let device = device.unwrap_or(0);
    let (kind, reason) = if auto {
        auto_pick(&judged, Vec::new())?
    } else {
        match &judged[..] {
            [(b, Ok(v))] => (b.kind, (b.requested)(v)),
            [(b, Err(e))] => return Err(Error::BackendUnavailable((b.refused)(e))),
            _ => return Err(Error::Internal(format!("{} is not in the registry", requested.name()))),
        }
    };
    Ok(Choice { kind, reason: device_reason(&reason, device, cfg.device >= 0), device, ..Choice::default() })
}

/// AUTO's pick among judged backends (in the list's order): the first eligible one, with the
/// reason `auto: <clauses>; <why each before it was passed over>; <its own words>`.
fn auto_pick(judged: &[(&'static Backend, std::result::Result<String, String>)], mut clauses: Vec<String>) -> Result<(BackendKind, String)> {
    for (b, e) in judged {
        match e {
            Ok(v) => {
                clauses.extend((b.taken)(v));
                return Ok((b.kind, format!("auto: {}", clauses.join("; "))));
            }
            Err(why) => clauses.push((b.passed)(why)),
        }
    }
    Err(Error::Internal("auto: no backend of the registry is eligible".into()))
}

/// The reason of a device backend's choice, with how its device was chosen.
fn device_reason(reason: &str, device: i32, configured: bool) -> String {
    let how = if configured { "as configured (GPUWIRE_DEVICE or config.device)" } else { "the node-local rank modulo the device count" };
    format!("{reason}; device {device}, {how}")
}

/// Collective: sets up the chosen backend's state once every rank agreed on the choice (a
/// backend that gives way under AUTO hands over to the next one, whose setup then runs), then
/// the device state every device backend uses, and records the routing table.
pub fn setup(c: &mut Communicator) -> Result<()> {
    // Host buffers of staged nonblocking requests (`devstate::pool`).
    c.backend_state.set(devstate::Pool::default());
    if c.config().check {
        let check = p2p::check_comms(c)?;
        c.backend_state.set(check);
    }
    loop {
        let kind = c.backend();
        (entry(kind)?.setup)(c)?;
        if c.backend() == kind {
            break;
        }
    }
    let kind = c.backend();
    if kind != BackendKind::GPUWIRE_BACKEND_HOST && c.device() >= 0 {
        let st = devstate::DevState::new(c, c.device())?;
        let note = match &st.kernels {
            Ok(()) if st.gpu_shared && kind != BackendKind::GPUWIRE_BACKEND_IPC => format!(
                "; large reductions run on the GPU; ranks share a GPU, so reductions up to {} KiB run on a host copy (its compute engine is time-sliced between them)",
                st.small_bytes() >> 10
            ),
            Ok(()) => "; large reductions run on the GPU".to_string(),
            Err(e) => format!("; reductions run on the host ({e})"),
        };
        c.append_reason(&note);
        c.backend_state.set(Mutex::new(st));
    }
    let mut routing = routing_table(entry(kind)?);
    if mpi_matched_p2p(c) {
        routing.push_str("; with p2p_matching = mpi, MPI_STAGED does device point-to-point (send, recv, isend, irecv, sendrecv: MPI's matching, tags and wildcards)");
    }
    c.set_routing(routing);
    Ok(())
}

/// Collective: makes HIER's node and leaders communicators (each choosing its own backend), and
/// says in the reason what they chose. Under AUTO, every rank falls back together
/// (`fall_back_from`) when any node's ranks cannot move device memory between themselves
/// directly (IPC or NCCL inside the node), or any rank could not make its communicators.
fn setup_hier(c: &mut Communicator) -> Result<()> {
    use BackendKind::*;
    let flat = entry(GPUWIRE_BACKEND_HIER)?.fallback.as_ref().map(|f| f.path).ok_or_else(|| Error::Internal("HIER has no fallback".into()))?;
    let made = hier::HierState::new(c, flat, entry(GPUWIRE_BACKEND_MPI_STAGED)?.path);
    let agreed = c.agree_on_result(made.as_ref().map(|_| ()).map_err(Clone::clone), "making HIER's node and leaders communicators");
    let st = match (made, agreed) {
        (Ok(st), Ok(())) => st,
        (_, Err(e)) if c.config().backend != GPUWIRE_BACKEND_AUTO || e.status() == crate::error::Status::GPUWIRE_ERROR_INVALID_ARGUMENT => return Err(e),
        (_, Err(e)) => return fall_back_from(c, GPUWIRE_BACKEND_HIER, &format!("making its communicators failed: {}", e.detail())),
        (Err(e), Ok(())) => return Err(e),
    };
    // Every rank learns whether some node is not direct, whether the nodes chose alike, and the
    // leaders' backend.
    let node = st.node_backend();
    let direct = matches!(node, GPUWIRE_BACKEND_IPC | GPUWIRE_BACKEND_NCCL);
    let mut v = [(!direct) as i64, node as i64, -(node as i64), st.leaders_backend().map_or(-1, |k| k as i64)];
    c.allreduce_max_i64(&mut v, "agreeing on HIER's levels")?;
    let leaders = BackendKind::from_c(v[3] as i32).ok();
    let words = leaders.map_or("", hier::exchange_words);
    let leaders = leaders.map_or("?", |k| k.name());
    if c.config().backend == GPUWIRE_BACKEND_AUTO && v[0] != 0 {
        drop(st);
        return fall_back_from(c, GPUWIRE_BACKEND_HIER, "the ranks of some node cannot use IPC among themselves");
    }
    let inside = if v[1] == -v[2] { format!("{} inside each", node.name()) } else { format!("{} inside this one (other nodes differ)", node.name()) };
    let note = format!("; hierarchical: {} nodes, {inside}, {leaders} between leaders{words}", st.nodes());
    c.append_reason(&note);
    c.backend_state.set_first(st);
    Ok(())
}

/// Collective: creates the NCCL communicator, and every rank learns whether any rank could not
/// (an NCCL error, or its initialization deadline: `nccl::NcclState::new`). NCCL requested: that
/// error on every rank. AUTO: every rank falls back together to what AUTO takes after NCCL
/// (`fall_back_from`), with the reason in the choice; a bad GPUWIRE_NCCL_INIT_TIMEOUT stays an
/// error.
fn setup_nccl(c: &mut Communicator) -> Result<()> {
    let made = nccl::NcclState::new(c, c.device());
    let agreed = c.agree_on_result(made.as_ref().map(|_| ()).map_err(Clone::clone), "creating the NCCL communicator");
    let e = match (made, agreed) {
        (Ok(st), Ok(())) => {
            c.backend_state.set_first(st);
            return Ok(());
        }
        (Ok(mut st), Err(e)) => {
            st.destroy(true); // made here, but not on another rank
            e
        }
        (Err(_), Err(e)) | (Err(e), Ok(())) => e,
    };
    if c.config().backend != BackendKind::GPUWIRE_BACKEND_AUTO || e.status() == crate::error::Status::GPUWIRE_ERROR_INVALID_ARGUMENT {
        return Err(e);
    }
    fall_back_from(c, BackendKind::GPUWIRE_BACKEND_NCCL, &format!("creating its communicator failed: {}", e.detail()))
}

/// Collective, under AUTO once every rank knows that backend `failed` cannot be set up (`why`):
/// every rank takes what AUTO takes among the entries after it, as `choose` would, the least
/// capable of the ranks' picks where they differ; the reason says why.
fn fall_back_from(c: &mut Communicator, failed: BackendKind, why: &str) -> Result<()> {
    let mut judged = Vec::new();
    {
        let probe = Probe { c, device: Some(c.device()), cuda: true };
        for b in BACKENDS.iter().skip_while(|b| b.kind != failed).skip(1).filter(|b| b.kind != BackendKind::GPUWIRE_BACKEND_HOST) {
            judged.push((b, (b.eligible)(&probe)?));
        }
    }
    let passed = (entry(failed)?.passed)(why);
    let (mut kind, mut reason) = auto_pick(&judged, vec![passed.clone()])?;
    let k = capability(kind);
    let mut v = [k, -k];
    c.allreduce_max_i64(&mut v, "agreeing on the backend")?;
    if v[0] != -v[1] && of_capability(-v[1]) != kind {
        let lowest = of_capability(-v[1]);
        reason = format!("auto: {passed}; another rank can only use {}, so every rank does (this rank could use {})", lowest.name(), kind.name());
        kind = lowest;
    }
    crate::trace!("{} could not be set up on every rank; auto falls back to {}", failed.name(), kind.name());
    let reason = device_reason(&reason, c.device(), c.config().device >= 0);
    c.fall_back(kind, reason);
    Ok(())
}

/// gpuwire_comm_free left other holders of `c` (a distributed array, a pending request, another
/// thread's call): each backend's `freed_while_held`, so that the teardown that comes with the
/// last release, at a point of this rank alone, waits for no other rank.
pub fn freed_while_held(c: &Communicator) {
    for b in BACKENDS.iter() {
        (b.freed_while_held)(c);
    }
}

/// Releases backend state before the MPI communicators are freed.
pub fn teardown(c: &mut Communicator) {
    if let Some(mut k) = c.backend_state.take::<p2p::Check>() {
        // A broken communicator's checking-mode duplicates stay allocated, as its own (a late
        // rank's header on them would reach a later communicator of the same context id).
        if !c.is_broken() {
            k.free();
        }
    }
    for b in BACKENDS.iter() {
        (b.teardown)(c);
    }
    if let Some(m) = c.backend_state.take::<Mutex<devstate::DevState>>() {
        let mut st = m.into_inner().unwrap_or_else(|p| p.into_inner());
        if c.is_broken() {
            // A timeout may have abandoned MPI requests on the private communicator and its
            // staging memory, which MPI still progresses: both stay allocated.
            std::mem::forget(st);
        } else {
            st.free_comm();
        }
    }
}

// ---- routing -----------------------------------------------------------------------------------

/// Where a call goes ([`decide`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// The communicator's backend itself.
    Native,
    /// The backend's fallback (of the same communicator).
    Fallback(BackendKind),
    /// Plain MPI: host-accessible buffers only.
    Host,
    /// Device memory on a communicator without a device backend.
    Refused,
}

/// The memory of a call's buffers on this rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Memory {
    /// No buffer, or host-accessible buffers only.
    Host,
    /// Device buffers only.
    Device,
    /// Host and device buffers together.
    Mixed,
}

impl Memory {
    pub fn of(bufs: &[Option<&Buffer>]) -> Memory {
        let (mut host, mut dev) = (false, false);
        for b in bufs.iter().flatten() {
            if b.is_host() { host = true } else { dev = true }
        }
        match (host, dev) {
            (_, false) => Memory::Host,
            (false, true) => Memory::Device,
            (true, true) => Memory::Mixed,
        }
    }
}

/// The registry's rule: where backend `b` sends a call of `op` (with `reduction`, for the
/// reductions) on buffers of `memory`.
pub(crate) fn decide(b: &Backend, op: Operation, reduction: Option<(Dtype, ReduceOp)>, memory: Memory) -> Route {
    let n = &b.native;
    if memory == Memory::Host {
        return if n.host.contains(op) { Route::Native } else { Route::Host };
    }
    if b.kind == BackendKind::GPUWIRE_BACKEND_HOST {
        return Route::Refused;
    }
    let native = n.ops.contains(op) && reduction.is_none_or(|(d, o)| (n.reduces)(d, o)) && (n.mixed || memory == Memory::Device);
    match (native, &b.fallback) {
        (true, _) | (false, None) => Route::Native,
        (false, Some(f)) => Route::Fallback(f.kind),
    }
}

/// Whether ranks of a call on `c` may pass different memory kinds (`Native::kinds_per_rank`).
pub fn kinds_per_rank(c: &Communicator) -> bool {
    entry(c.backend()).is_ok_and(|b| b.native.kinds_per_rank)
}

/// Whether `c`'s backend does `op` on host memory itself (`decide`'s `Route::Native` for host
/// buffers), rather than plain MPI: what `GPUWIRE_TRACE` names.
pub fn native_on_host(c: &Communicator, op: Operation) -> bool {
    entry(c.backend()).is_ok_and(|b| b.native.host.contains(op))
}

/// The path of a call of `op` (with `reduction`, for the reductions) on these buffers of this
/// rank on communicator `c`: its backend, its backend's fallback, or plain MPI ([`decide`]).
pub fn route(c: &Communicator, op: Operation, reduction: Option<(Dtype, ReduceOp)>, bufs: &[Option<&Buffer>]) -> Result<&'static dyn Path> {
    let b = entry(c.backend())?;
    let memory = Memory::of(bufs);
    if op.is_p2p() && memory != Memory::Host && mpi_matched_p2p(c) {
        // GPUWIRE_P2P_MATCHING=mpi on NCCL: device point-to-point matched as MPI (its fallback).
        return Ok(&FROM_NCCL);
    }
    match decide(b, op, reduction, memory) {
        Route::Native => Ok(b.path),
        Route::Host => Ok(&host::HostPath),
        Route::Fallback(_) => b.fallback.as_ref().map(|f| f.path).ok_or_else(|| Error::Internal("a fallback route without a fallback".into())),
        Route::Refused => {
            let space = bufs.iter().flatten().find(|x| !x.is_host()).map_or("device", |x| x.space().name());
            Err(Error::BackendUnavailable(format!(
                "a {space} buffer was given, but this communicator's backend is {} ({})",
                b.kind.name(),
                c.choice().reason
            )))
        }
    }
}

/// Where [`route`] sends point-to-point operations on host memory on `c`
/// (`Communicator::host_p2p`, fixed once the backend is set up: routing a host buffer reads
/// nothing but the backend's table): `Mpi` where it gives every one plain MPI (every backend but
/// IPC, which carries host messages itself), else `EachCall`.
/// (The table's decision is compared, not the paths: they are zero-sized, and two references to
/// different zero-sized statics may have the same address.)
pub(crate) fn host_p2p(c: &Communicator) -> HostP2p {
    let Ok(b) = entry(c.backend()) else { return HostP2p::EachCall };
    let all = [Operation::Send, Operation::Recv, Operation::Isend, Operation::Irecv, Operation::Sendrecv]
        .into_iter()
        .all(|op| matches!(decide(b, op, None, Memory::Host), Route::Host));
    if all { HostP2p::Mpi } else { HostP2p::EachCall }
}

/// As MPI_Probe (`block`) / MPI_Iprobe of (`source`, `tag`) on `c`: IPC's point-to-point
/// messages are headers on its own control communicator (`ipc::probe`); every other backend's
/// that a probe can see are MPI messages on `c` itself (`p2p::probe`: host memory, and device
/// memory on the MPI paths and on NCCL under GPUWIRE_P2P_MATCHING=mpi).
pub fn probe(c: &Communicator, source: i32, tag: i32, block: bool) -> Result<Option<p2p::Matched>> {
    if c.backend() == BackendKind::GPUWIRE_BACKEND_IPC {
        return ipc::probe(c, source, tag, block);
    }
    p2p::probe(c, source, tag, block)
}

/// Which messages a probe on `c` sees, in words (`GPUWIRE_TRACE`): as [`probe`].
pub fn probe_route(c: &Communicator) -> &'static str {
    if c.backend() == BackendKind::GPUWIRE_BACKEND_IPC {
        "IPC (the headers of its point-to-point messages, host and device)"
    } else if mpi_matched_p2p(c) || c.backend() != BackendKind::GPUWIRE_BACKEND_NCCL {
        "MPI (the communicator's MPI messages)"
    } else {
        "MPI (the communicator's messages of host memory; NCCL's device messages are not seen)"
    }
}

/// Whether `c`'s device point-to-point leaves its backend for MPI's matching: NCCL (which matches
/// device messages by peer and order only, ignoring tags, with no wildcards) under
/// GPUWIRE_P2P_MATCHING=mpi, whose device sends and receives then all go through the staged MPI
/// path of the same communicator (both sides of every message, as the setting is agreed at
/// creation), after the open NCCL group is closed (`FROM_NCCL`). Without the setting nothing is
/// added to NCCL's send/recv (a wildcard device receive there is refused:
/// `Communicator::check_wildcard_path`).
pub(crate) fn mpi_matched_p2p(c: &Communicator) -> bool {
    c.backend() == BackendKind::GPUWIRE_BACKEND_NCCL && c.config().p2p_matching == crate::types::P2pMatching::GPUWIRE_P2P_MATCHING_MPI
}

// ---- the routing table, in words (gpuwire_comm_describe) ---------------------------------------

fn names(ops: impl Iterator<Item = Operation>) -> String {
    ops.map(|o| o.name()).collect::<Vec<_>>().join(", ")
}

/// The reductions `b` does not do itself, in words ("BAND, PROD on complex64/complex128"), or "".
fn reductions_not_native(b: &Backend) -> String {
    let mut out = Vec::new();
    for op in ReduceOp::ALL {
        let defined: Vec<Dtype> = Dtype::ALL.into_iter().filter(|d| op.check_supported(*d).is_ok()).collect();
        let not: Vec<Dtype> = defined.iter().copied().filter(|d| !(b.native.reduces)(*d, op)).collect();
        if not.is_empty() {
            continue;
        }
        if not.len() == defined.len() {
            out.push(op.name().to_string());
        } else {
            out.push(format!("{} on {}", op.name(), not.iter().map(|d| d.name()).collect::<Vec<_>>().join("/")));
        }
    }
    match out.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => out.join(""),
    }
}

/// The routing table of backend `b`: which operations it does itself, what goes to its fallback
/// and what to plain MPI (`gpuwire_comm_describe`).
pub(crate) fn routing_table(b: &Backend) -> String {
    let name = b.kind.name();
    if b.kind == BackendKind::GPUWIRE_BACKEND_HOST {
        return "routing: every call by HOST (plain MPI; device buffers are refused)".into();
    }
    let n = &b.native;
    let device: Vec<Operation> = Operation::ALL.into_iter().filter(|o| *o != Operation::Barrier && n.ops.contains(*o)).collect();
    let host_too: Vec<Operation> = n.host.iter().filter(|o| *o != Operation::Barrier).collect();
    let mut parts = if !device.is_empty() && device.iter().all(|o| host_too.contains(o)) {
        vec![format!("{name} does {} on device and host memory", names(device.into_iter()))]
    } else {
        let mut p = vec![format!("{name} does {} on device memory", names(device.into_iter()))];
        if !host_too.is_empty() {
            p[0].push_str(&format!(", {} on host memory too", names(host_too.into_iter())));
        }
        p
    };
    if n.host.contains(Operation::Barrier) {
        parts[0].push_str(", and barrier");
    }
    if let Some(fb) = b.fallback.as_ref().map(|f| f.kind) {
        let mut to = Vec::new();
        let missing: Vec<Operation> = Operation::ALL.into_iter().filter(|o| !n.ops.contains(*o) && !n.host.contains(*o) && *o != Operation::Barrier).collect();
        if !missing.is_empty() {
            to.push(names(missing.into_iter()));
        }
        let red = reductions_not_native(b);
        if !red.is_empty() {
            to.push(format!("the reductions {red}"));
        }
        if !n.mixed {
            to.push("calls mixing host and device memory".into());
        }
        if !to.is_empty() {
            parts.push(format!("{} does {}", fb.name(), to.join(", and ")));
        }
        if !n.at_call.is_empty() {
            parts.push(format!("{} does, decided at the call by every rank together, {}", fb.name(), n.at_call));
        }
    }
    let calls = if n.host.is_empty() { "calls" } else { "the other calls" };
    let barrier = if n.host.contains(Operation::Barrier) { "" } else { ", and barrier" };
    if !Operation::ALL.iter().all(|o| n.host.contains(*o)) {
        parts.push(format!("HOST (plain MPI) does {calls} on host memory only{barrier}"));
    }
    format!("routing: {}", parts.join("; "))
}

// ---- the fallback path of NCCL -----------------------------------------------------------------

/// NCCL's fallback path: the open NCCL group closed first (`nccl::leave`), so stream order is
/// kept, then the staged MPI path of the same communicator.
struct Leaving {
    leave: fn(&Communicator) -> Result<()>,
    to: &'static dyn Path,
}

static FROM_NCCL: Leaving = Leaving { leave: nccl::leave, to: &mpi_staged::StagedPath };

impl Path for Leaving {
    fn send(&self, c: &Communicator, buf: &Buffer, dest: i32, tag: i32, stream: Stream) -> Result<()> {
        (self.leave)(c)?;
        self.to.send(c, buf, dest, tag, stream)
    }
    fn recv(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<()> {
        (self.leave)(c)?;
        self.to.recv(c, buf, source, tag, stream)
    }
    fn isend(&self, c: &Communicator, buf: &Buffer, dest: i32, tag: i32, stream: Stream) -> Result<Box<dyn Pending>> {
        (self.leave)(c)?;
        self.to.isend(c, buf, dest, tag, stream)
    }
    fn irecv(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<Box<dyn Pending>> {
        (self.leave)(c)?;
        self.to.irecv(c, buf, source, tag, stream)
    }
    fn irecv_upto(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<Box<dyn Pending>> {
        (self.leave)(c)?;
        self.to.irecv_upto(c, buf, source, tag, stream)
    }
    fn sendrecv(&self, c: &Communicator, send: &Buffer, dest: i32, sendtag: i32, recv: &Buffer, source: i32, recvtag: i32, stream: Stream) -> Result<()> {
        (self.leave)(c)?;
        self.to.sendrecv(c, send, dest, sendtag, recv, source, recvtag, stream)
    }
    fn barrier(&self, c: &Communicator, stream: Stream) -> Result<()> {
        (self.leave)(c)?;
        self.to.barrier(c, stream)
    }
    fn bcast(&self, c: &Communicator, buf: &Buffer, root: i32, stream: Stream) -> Result<()> {
        (self.leave)(c)?;
        self.to.bcast(c, buf, root, stream)
    }
    fn reduce(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, op: ReduceOp, root: i32, stream: Stream) -> Result<()> {
        (self.leave)(c)?;
        self.to.reduce(c, send, recv, op, root, stream)
    }
    fn allreduce(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<()> {
        (self.leave)(c)?;
        self.to.allreduce(c, send, recv, op, stream)
    }
    fn allgather(&self, c: &Communicator, send: Input, recv: &Buffer, stream: Stream) -> Result<()> {
        (self.leave)(c)?;
        self.to.allgather(c, send, recv, stream)
    }
    fn allgatherv(&self, c: &Communicator, send: Input, recv: &Buffer, counts: &[usize], stream: Stream) -> Result<()> {
        (self.leave)(c)?;
        self.to.allgatherv(c, send, recv, counts, stream)
    }
    fn reduce_scatter(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<()> {
        (self.leave)(c)?;
        self.to.reduce_scatter(c, send, recv, op, stream)
    }
    fn scan(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, exclusive: bool, stream: Stream) -> Result<()> {
        (self.leave)(c)?;
        self.to.scan(c, send, recv, op, exclusive, stream)
    }
    fn alltoall(&self, c: &Communicator, send: Input, recv: &Buffer, stream: Stream) -> Result<()> {
        (self.leave)(c)?;
        self.to.alltoall(c, send, recv, stream)
    }
    fn gather(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, root: i32, stream: Stream) -> Result<()> {
        (self.leave)(c)?;
        self.to.gather(c, send, recv, root, stream)
    }
    fn scatter(&self, c: &Communicator, send: Option<&Buffer>, recv: Input, root: i32, stream: Stream) -> Result<()> {
        (self.leave)(c)?;
        self.to.scatter(c, send, recv, root, stream)
    }
    fn alltoallv(&self, c: &Communicator, send: Input, sb: Blocks, recv: &Buffer, rb: Blocks, stream: Stream) -> Result<()> {
        (self.leave)(c)?;
        self.to.alltoallv(c, send, sb, recv, rb, stream)
    }
    fn gatherv(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, rb: Option<Blocks>, root: i32, stream: Stream) -> Result<()> {
        (self.leave)(c)?;
        self.to.gatherv(c, send, recv, rb, root, stream)
    }
    fn scatterv(&self, c: &Communicator, send: Option<&Buffer>, sb: Option<Blocks>, recv: Input, root: i32, stream: Stream) -> Result<()> {
        (self.leave)(c)?;
        self.to.scatterv(c, send, sb, recv, root, stream)
    }
    fn reduce_scatterv(&self, c: &Communicator, send: Input, recv: &Buffer, counts: &[usize], op: ReduceOp, stream: Stream) -> Result<()> {
        (self.leave)(c)?;
        self.to.reduce_scatterv(c, send, recv, counts, op, stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use BackendKind::*;

    /// Point-to-point on host memory: plain MPI for every operation on every backend but IPC,
    /// which does every one itself (`host_p2p` gives `Mpi` on all the others, and `ipchostorder`
    /// in tests/gpu.rs checks IPC's order of host and device messages).
    #[test]
    fn host_point_to_point_is_plain_mpi_but_on_ipc() {
        let p2p = [Operation::Send, Operation::Recv, Operation::Isend, Operation::Irecv, Operation::Sendrecv];
        for b in BACKENDS.iter() {
            for op in p2p {
                let r = decide(b, op, None, Memory::Host);
                if b.kind == GPUWIRE_BACKEND_IPC {
                    assert!(matches!(r, Route::Native), "IPC, {}: {r:?}", op.name());
                } else {
                    assert!(matches!(r, Route::Host), "{}, {}: {r:?}", b.kind.name(), op.name());
                }
            }
        }
    }

    #[test]
    fn auto_falls_back_to_a_backend_every_rank_can_use() {
        // One rank loads libnccl (NCCL), another not (IPC): IPC, not NCCL as by enum value.
        let pick = |a: BackendKind, b: BackendKind| of_capability(capability(a).min(capability(b)));
        assert_eq!(pick(GPUWIRE_BACKEND_NCCL, GPUWIRE_BACKEND_IPC), GPUWIRE_BACKEND_IPC);
        assert_eq!(pick(GPUWIRE_BACKEND_IPC, GPUWIRE_BACKEND_MPI_STAGED), GPUWIRE_BACKEND_MPI_STAGED);
        assert_eq!(pick(GPUWIRE_BACKEND_NCCL, GPUWIRE_BACKEND_MPI_CUDA_AWARE), GPUWIRE_BACKEND_MPI_CUDA_AWARE);
        assert_eq!(pick(GPUWIRE_BACKEND_NCCL, GPUWIRE_BACKEND_HOST), GPUWIRE_BACKEND_HOST);
        for b in BACKENDS.iter() {
            assert_eq!(of_capability(capability(b.kind)), b.kind);
        }
    }

    #[test]
    fn calls_go_where_the_registry_says() {
        use Memory::*;
        use Operation::*;
        let at = |k: BackendKind, op: Operation, red: Option<(Dtype, ReduceOp)>, m: Memory| decide(entry(k).unwrap(), op, red, m);
        let staged = Route::Fallback(GPUWIRE_BACKEND_MPI_STAGED);
        let (sum, band, prod) = (ReduceOp::GPUWIRE_SUM, ReduceOp::GPUWIRE_BAND, ReduceOp::GPUWIRE_PROD);
        let (i32_, f32_, c64) = (Dtype::GPUWIRE_INT32, Dtype::GPUWIRE_FLOAT32, Dtype::GPUWIRE_COMPLEX64);
        // NCCL: device memory natively, but bitwise ops, complex PROD and mixed memory go to the
        // staged path; barrier and host memory to plain MPI.
        for op in NCCL_OPS.iter() {
            assert_eq!(at(GPUWIRE_BACKEND_NCCL, op, None, Device), Route::Native, "{op:?}");
            assert_eq!(at(GPUWIRE_BACKEND_NCCL, op, None, Host), Route::Host, "{op:?}");
            assert_eq!(at(GPUWIRE_BACKEND_NCCL, op, None, Mixed), staged, "{op:?}");
        }
        for op in [Reduce, Allreduce, ReduceScatter] {
            assert_eq!(at(GPUWIRE_BACKEND_NCCL, op, Some((f32_, sum)), Device), Route::Native);
            assert_eq!(at(GPUWIRE_BACKEND_NCCL, op, Some((c64, sum)), Device), Route::Native);
            assert_eq!(at(GPUWIRE_BACKEND_NCCL, op, Some((f32_, prod)), Device), Route::Native);
            assert_eq!(at(GPUWIRE_BACKEND_NCCL, op, Some((c64, prod)), Device), staged);
            assert_eq!(at(GPUWIRE_BACKEND_NCCL, op, Some((i32_, band)), Device), staged);
            assert_eq!(at(GPUWIRE_BACKEND_NCCL, op, Some((i32_, band)), Host), Route::Host);
        }
        assert_eq!(at(GPUWIRE_BACKEND_NCCL, Barrier, None, Host), Route::Host);
        assert_eq!(at(GPUWIRE_BACKEND_NCCL, Scan, Some((f32_, sum)), Device), staged);
        assert_eq!(at(GPUWIRE_BACKEND_IPC, Scan, Some((f32_, sum)), Device), Route::Native);
        // IPC: everything with device memory, and with host memory too (c026596: a rank's host
        // buffers meet another's device buffers in one protocol).
        for op in Operation::ALL {
            if op != Barrier {
                assert_eq!(at(GPUWIRE_BACKEND_IPC, op, Some((i32_, band)), Device), Route::Native, "{op:?}");
                assert_eq!(at(GPUWIRE_BACKEND_IPC, op, None, Mixed), Route::Native, "{op:?}");
            }
            assert_eq!(at(GPUWIRE_BACKEND_IPC, op, None, Host), Route::Native, "{op:?}");
        }
        // The MPI paths: every call with device memory; host memory by plain MPI, except
        // MPI_STAGED's allreduce (a large one in two phases on every rank: `split`) and
        // MPI_CUDA_AWARE's reductions (a large one by the ring on every rank).
        for k in [GPUWIRE_BACKEND_MPI_STAGED, GPUWIRE_BACKEND_MPI_CUDA_AWARE] {
            for op in Operation::ALL {
                if op == Barrier {
                    assert_eq!(at(k, op, None, Host), Route::Host);
                    continue;
                }
                assert_eq!(at(k, op, Some((c64, prod)), Device), Route::Native, "{k:?} {op:?}");
                assert_eq!(at(k, op, None, Mixed), Route::Native, "{k:?} {op:?}");
                let own = match k {
                    GPUWIRE_BACKEND_MPI_STAGED => op == Allreduce,
                    _ => [Reduce, Allreduce, ReduceScatter].contains(&op),
                };
                assert_eq!(at(k, op, None, Host), if own { Route::Native } else { Route::Host }, "{k:?} {op:?}");
            }
        }
        // HIER: its six collectives on device and host memory; the rest (and mixed memory) to the
        // staged path on device memory, to plain MPI on host memory.
        for op in Operation::ALL {
            let mine = HIER_OPS.contains(op);
            assert_eq!(at(GPUWIRE_BACKEND_HIER, op, Some((f32_, sum)), Device), if mine { Route::Native } else { staged }, "{op:?}");
            assert_eq!(at(GPUWIRE_BACKEND_HIER, op, Some((i32_, band)), Host), if mine { Route::Native } else { Route::Host }, "{op:?}");
            if op != Barrier {
                assert_eq!(at(GPUWIRE_BACKEND_HIER, op, None, Mixed), staged, "{op:?}");
            }
        }
        assert_eq!(at(GPUWIRE_BACKEND_HOST, Allreduce, None, Device), Route::Refused);
        assert_eq!(at(GPUWIRE_BACKEND_HOST, Allreduce, None, Host), Route::Host);
    }

    #[test]
    fn the_routing_table_names_what_goes_where() {
        let t = |k: BackendKind| routing_table(entry(k).unwrap());
        let nccl = t(GPUWIRE_BACKEND_NCCL);
        assert!(nccl.starts_with("routing: NCCL does send, recv, isend, irecv, sendrecv, bcast, reduce, allreduce, "), "{nccl}");
        assert!(nccl.contains("; MPI_STAGED does scan/exscan, and the reductions PROD on complex64/complex128, BAND, BOR, BXOR, LAND, LOR, LXOR, MINLOC and MAXLOC, and calls mixing host and device memory;"), "{nccl}");
        assert!(nccl.ends_with("; HOST (plain MPI) does calls on host memory only, and barrier"), "{nccl}");
        let ipc = t(GPUWIRE_BACKEND_IPC);
        assert!(ipc.contains("IPC does send, recv, isend, irecv, sendrecv, bcast,"), "{ipc}");
        assert!(ipc.contains("scatter, alltoallv, gatherv, scatterv, reduce_scatterv on device and host memory, and barrier;"), "{ipc}");
        assert!(ipc.contains("MPI_STAGED does, decided at the call by every rank together, memory IPC cannot export"), "{ipc}");
        // Every call on host memory too (memory kinds are each rank's own): nothing left to HOST.
        assert!(!ipc.contains("HOST (plain MPI)"), "{ipc}");
        let staged = t(GPUWIRE_BACKEND_MPI_STAGED);
        assert!(!staged.contains("does the reductions") && staged.ends_with("on device memory, allreduce on host memory too; HOST (plain MPI) does the other calls on host memory only, and barrier"), "{staged}");
        assert_eq!(t(GPUWIRE_BACKEND_HOST), "routing: every call by HOST (plain MPI; device buffers are refused)");
        for b in BACKENDS.iter() {
            eprintln!("{}", routing_table(b));
        }
    }

    #[test]
    fn auto_says_why_in_the_words_it_always_did() {
        let e = |k: BackendKind| entry(k).unwrap();
        let judged = |v: Vec<(BackendKind, std::result::Result<&str, &str>)>| -> Vec<(&'static Backend, std::result::Result<String, String>)> {
            v.into_iter().map(|(k, r)| (e(k), r.map(String::from).map_err(String::from))).collect()
        };
        let pick = |v| auto_pick(&judged(v), Vec::new()).unwrap();
        let (n, i, a, s) = (GPUWIRE_BACKEND_NCCL, GPUWIRE_BACKEND_IPC, GPUWIRE_BACKEND_MPI_CUDA_AWARE, GPUWIRE_BACKEND_MPI_STAGED);
        let h = GPUWIRE_BACKEND_HIER;
        // Across nodes on shared GPUs: hierarchical, its setup says how.
        assert_eq!(pick(vec![(n, Err("share")), (h, Ok("2 nodes")), (i, Err("x")), (a, Err("q")), (s, Ok(""))]), (h, "auto: NCCL not used (share)".into()));
        assert_eq!(
            pick(vec![(n, Err("share")), (h, Err("one node")), (i, Ok("all 2 ranks")), (a, Err("q")), (s, Ok(""))]),
            (i, "auto: NCCL not used (share); hierarchical not used (one node); all 2 ranks: CUDA IPC".into())
        );
        assert_eq!(pick(vec![(n, Ok("2.28.3")), (i, Err("x")), (a, Err("q")), (s, Ok(""))]), (n, "auto: every rank has its own GPU and NCCL 2.28.3 loads".into()));
        assert_eq!(pick(vec![(n, Err("why")), (i, Ok("all 2 ranks")), (a, Err("q")), (s, Ok(""))]), (i, "auto: NCCL not used (why); all 2 ranks: CUDA IPC".into()));
        assert_eq!(
            pick(vec![(n, Err("why")), (i, Err("no")), (a, Ok("src")), (s, Ok(""))]),
            (a, "auto: NCCL not used (why); IPC not used (no); the MPI is CUDA-aware (src)".into())
        );
        assert_eq!(
            pick(vec![(n, Err("why")), (i, Err("no")), (a, Err("src")), (s, Ok(""))]),
            (s, "auto: NCCL not used (why); IPC not used (no); the MPI is not known to be CUDA-aware (src), so device data is staged through host memory".into())
        );
    }

    #[test]
    fn device_reason_reads_as_a_sentence() {
        assert_eq!(super::device_reason("requested", 0, true), "requested; device 0, as configured (GPUWIRE_DEVICE or config.device)");
        assert_eq!(super::device_reason("auto: x", 3, false), "auto: x; device 3, the node-local rank modulo the device count");
    }
}
