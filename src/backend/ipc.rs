//! IPC: CUDA IPC between the ranks of one node. MPI carries only control messages; device data
//! moves through IPC mappings of the peers' own buffers, at GPU-memory speed, also when the MPI
//! is not CUDA-aware and NCCL cannot be used (ranks sharing a GPU).
//!
//! **Eligibility** (checked collectively at creation, the same outcome on every rank): every rank
//! of the communicator on one node (its MPI_COMM_TYPE_SHARED part is the whole communicator), a
//! CUDA device on every rank, and every pair of ranks' devices the same GPU or peers
//! (`cuDeviceCanAccessPeer`, tested on each rank towards every other rank's device, found by
//! UUID).
//!
//! **Shared host segment**: an `MPI_Win_allocate_shared` window over the communicator, one
//! page-aligned slot per rank (`ipc_shm::Slot`): sequence counters on their own cache lines, two
//! alternating call areas (status, buffer records, 1 KiB of data), and completion cells of
//! point-to-point sends. Each rank page-locks its own slot (`cuMemHostRegister`, portable), so
//! device-to-host copies into it run on the copy engine. Ranks synchronise on these counters
//! (spinning, then yielding), never with an MPI barrier per call. Every wait honours the
//! communicator's timeout (`GPUWIRE_ERROR_TIMEOUT` naming the operation and the ranks that did not
//! arrive; the communicator is then broken) and stops when the communicator is broken — except
//! where a peer already works on this rank's buffers: who gives up and who works is decided by a
//! compare-and-swap on a claim word (`ipc_shm::claim`/`abandon`): each rank's `cstate` for
//! collectives (the leader claims every follower before any device work), the sender's
//! completion cell for sends (the receiver claims before it copies). A rank that lost the race
//! waits for the worker without a deadline; a worker that lost touches nothing and fails.
//!
//! **Exporting buffers**: for device memory gpuwire asks the driver for the allocation's base and
//! size (`cuMemGetAddressRange`), its `CU_POINTER_ATTRIBUTE_BUFFER_ID` and an IPC handle of the
//! base (`cuIpcGetMemHandle`, cached per buffer id), and publishes (base, offset, buffer id,
//! handle, and the exporting process's id, `ipc_shm::proc_id`). Importers open a handle once
//! (`cuIpcOpenMemHandle`, lazy peer access) and cache the mapping process-wide (`Maps`), under
//! (exporter process, importing device) and buffer id, for every IPC communicator of the
//! process: a dup or split uses the same mappings, and one eviction of a stale mapping covers
//! them all. One lock (`MAPS`) covers every use of a mapping, from the lookup until the device
//! work through it is complete (the stream synchronised); mappings are closed only under it.
//!
//! *How gpuwire learns of a free*: it does not need to be told. The driver gives every
//! allocation of a process a buffer id that is never reused, so an allocation freed and a new one
//! made at the same address (by gpuwire_buffer_free/alloc, or by the user's own
//! cuMemFree/cuMemAlloc around gpuwire_buffer_wrap) has a new id: the importer opens the new
//! handle and never reads through the old mapping. *What a peer holds*: an open mapping keeps the
//! exporter's physical memory from being reused until it is closed (the address of a freed
//! buffer may be reused at once; its pages are not); the CUDA documentation calls freeing
//! exported memory before the importer closes its mapping undefined, so gpuwire keeps at most
//! 64 mappings per peer process (least recently used closed first) and closes every mapping when
//! the process's last IPC communicator is freed, and at gpuwire_finalize. Memory gpuwire cannot export (MANAGED, host memory, VMM allocations
//! without IPC support) makes that call take the staged MPI path of the same communicator on
//! every rank (decided together, from the published records) — never an error.
//!
//! **Collectives**: when ranks share a GPU, work of two processes on its compute engine is
//! time-sliced (~270 µs per kernel or device-to-device copy when both issue one), so ONE rank,
//! the leader (rank 0), enqueues all device work of a collective on its own stream (the stream
//! of its call), reading the peers' inputs and writing their outputs through the mappings, in
//! rank order (reductions accumulate rank 0's input, then rank 1's, ...: deterministic, the same
//! bits on every rank); all reads of an input happen before an output that may alias it is
//! written. It then waits for its stream and bumps its `done` counter, which the others wait
//! for. Reductions use the NVRTC kernels of the MPI paths (AVG is SUM, then a division), so the
//! results equal theirs for every datatype and op. Calls whose per-rank data is at most 1 KiB
//! never touch the compute engine: each rank copies its input device-to-host into its slot
//! (copy engine), reduces or assembles in rank order on the CPU, and writes its result as
//! `device::htod_shared` does when the ranks share the GPU (stream writes up to 8 bytes, else a
//! 2-D copy: the copy engine), else as a copy.
//!
//! **Point-to-point**: control messages on private duplicates of the communicator, with the
//! user's tag, so MPI does the matching (in posting order). The sender waits for its stream,
//! then sends a header; messages up to 1 KiB travel inside it. Larger device data: the header
//! carries the IPC record; the receiver opens the mapping, copies into its buffer on its stream,
//! waits for it, and stores the send's generation in the sender's completion cell; the send
//! completes then. Memory that cannot be exported travels as a second MPI message of host bytes,
//! and so do device sends of more than 1 KiB and up to 512 KiB between ranks sharing a GPU
//! (staged through pinned host memory by copy-engine copies, below 32 KiB on the receiver as
//! `device::htod_shared` does: the receiver's device-to-device copy would wait ~150 µs for the
//! other process's time slice on the compute engine).
//! A send to oneself passes the pointer.
//!
//! **Progress**: pending irecvs of every IPC communicator are registered process-wide (`RECVS`,
//! weak references). They are progressed by every IPC wait (of any communicator), under
//! MPI_THREAD_MULTIPLE by a progress thread that runs while the registry is not empty
//! (`progress_thread`; joined by `shutdown` at gpuwire_finalize), and by gpuwire's own MPI
//! calls (`wait_request`: nonblocking MPI and a test loop): point-to-point ones while any
//! receive is pending (`host::blocking!`), collectives on communicators whose ranks agreed at
//! creation that some rank needs it (`comm::collective!`, `progress::collectives_must_progress`; the form
//! of a collective must be the same on every rank, or MPI does not match them).
//! Progress for another owner only try-locks the receive and the mapping lock, never waits.
//! The receive's copy is enqueued on the receive's stream from whichever thread progresses it;
//! the user may use the buffer only after the request completed, so that is ordered. The
//! request keeps its communicator and buffer alive until it drops its `IpcRecv`, which marks the
//! receive closed under its lock first: a closed receive is never progressed again.
//!
//! **Stream semantics**: as MPI_STAGED: a call first waits for the work already on the caller's
//! stream, and returns when its output is complete in the caller's buffer (the host is blocked
//! for the duration, as by MPI).
//!
//! **Freeing**: gpuwire_comm_free is collective. The IPC communicator waits (up to the timeout,
//! if one is configured) until every rank has reached its own free, in two phases
//! (`ipc_shm::leave`), and frees the window only if every rank completed both, else every rank
//! leaves it to MPI_Finalize: a rank that frees its communicator while peers still use it waits
//! for them, and no rank is left alone in MPI_Win_free. A broken communicator abandons at once.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};
use std::time::Duration;

use cudarc::driver::sys as cu;

use crate::backend::devstate::{self, Pool, PoolBuf};
use crate::backend::ipc_shm::{self as shm, BufRecord, CallArea, Cells, Lru, Seg, Stop, REC_HANDLE, REC_LOCAL_ONLY, REC_NONE, SMALL, ST_ERROR, ST_OK};
use crate::backend::mpi_staged::{StagedPath, input_buf};
use crate::backend::ring::{self, Loc};
use crate::backend::path::{Input, Path};
use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::device::{self, CtxGuard, Stream};
use crate::error::{Error, Result, Status};
use crate::mpisys::{self, RawComm, RawRequest, sys};
use crate::progress::{self, progress_all};
use crate::reduce;
use crate::request::Pending;
use crate::types::{Dtype, ReduceOp, Space};

// ---- eligibility ---------------------------------------------------------------------------

fn uuid_of(device: i32) -> Option<[u8; 16]> {
    let u = cudarc::driver::result::device::get(device).and_then(cudarc::driver::result::device::get_uuid).ok()?;
    let mut b = [0u8; 16];
    for (i, x) in u.bytes.iter().enumerate() {
        b[i] = *x as u8;
    }
    Some(b)
}

fn hex(u: &[u8]) -> String {
    u.iter().map(|x| format!("{x:02x}")).collect()
}

/// Collective over `c` (every rank calls it, with or without CUDA): whether the IPC backend can
/// be used, with the reason, or why not. The outcome and its text are the same on every rank.
pub fn eligible(c: &Communicator, device: Option<i32>) -> Result<std::result::Result<String, String>> {
    let p = c.size() as usize;
    if c.local_size() != c.size() {
        return Ok(Err("the ranks are not all on one node".into()));
    }
    let mut mine = [0u8; 17];
    if let Some(u) = device.and_then(uuid_of) {
        mine[0] = 1;
        mine[1..].copy_from_slice(&u);
    }
    let mut all = vec![0u8; 17 * p];
    // SAFETY: fixed-size records, one per rank.
    mpisys::check(
        unsafe { sys::MPI_Allgather(mine.as_ptr().cast(), 17, sys::RSMPI_UINT8_T, all.as_mut_ptr().cast(), 17, sys::RSMPI_UINT8_T, c.raw()) },
        "MPI_Allgather (device of every rank)",
    )?;
    let recs: Vec<&[u8]> = all.chunks(17).collect();
    if let Some(r) = recs.iter().position(|x| x[0] == 0) {
        return Ok(Err(format!("rank {r} has no usable CUDA device")));
    }
    // Each rank checks that its device reaches every other rank's device.
    let me = c.rank() as usize;
    let mut bad = [i64::MAX, 0, 0];
    if let Some(d) = device {
        let count = device::cuda().map(|x| x.device_count).unwrap_or(0);
        let local: Vec<Option<[u8; 16]>> = (0..count).map(uuid_of).collect();
        for q in 0..p {
            if recs[q] == recs[me] {
                continue;
            }
            let Some(od) = local.iter().position(|u| u.as_ref().map(|u| &u[..]) == Some(&recs[q][1..])) else {
                bad = [me as i64, q as i64, 1];
                break;
            };
            let mut ok: c_int = 0;
            let (a, b) = (cudarc::driver::result::device::get(d), cudarc::driver::result::device::get(od as i32));
            if let (Ok(a), Ok(b)) = (a, b) {
                // SAFETY: writes one int; valid device handles.
                unsafe { cu::cuDeviceCanAccessPeer(&mut ok, a, b) };
            }
            if ok == 0 {
                bad = [me as i64, q as i64, 2];
                break;
            }
        }
    }
    let mut worst = vec![0i64; 3 * p];
    // SAFETY: three int64 per rank.
    mpisys::check(
        unsafe { sys::MPI_Allgather(bad.as_ptr().cast(), 3, sys::RSMPI_INT64_T, worst.as_mut_ptr().cast(), 3, sys::RSMPI_INT64_T, c.raw()) },
        "MPI_Allgather (device reachability)",
    )?;
    if let Some(w) = worst.chunks(3).filter(|w| w[0] != i64::MAX).min_by_key(|w| (w[0], w[1])) {
        let (a, b) = (w[0] as usize, w[1] as usize);
        return Ok(Err(if w[2] == 1 {
            format!("rank {a} cannot see the GPU of rank {b} (GPU-{}; CUDA_VISIBLE_DEVICES differs?)", hex(&recs[b][1..]))
        } else {
            format!("the GPU of rank {a} cannot access the GPU of rank {b} (cuDeviceCanAccessPeer)")
        }));
    }
    let one = recs.iter().all(|x| *x == recs[0]);
    Ok(Ok(format!("all {p} ranks on one node and their devices reach each other{}", if one { " (one shared GPU)" } else { "" })))
}

// ---- state ---------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
struct RawWin(sys::MPI_Win);
// SAFETY: an MPI handle; MPI arbitrates its use.
unsafe impl Send for RawWin {}
unsafe impl Sync for RawWin {}

/// An exported allocation (exporter side), by buffer id.
#[derive(Clone, Copy, Debug)]
struct Export {
    base: u64,
    size: u64,
    handle: [u8; 64],
}

/// State shared by calls, under one lock held only for local work (never across a wait).
struct Inner {
    exports: HashMap<u64, Export>,
    cells: Cells,
}

/// Per-communicator state of the IPC backend.
pub struct IpcState {
    seg: Seg,
    win: Option<RawWin>,
    /// The base this rank registered with cuMemHostRegister (its slot), if it could.
    registered: Option<usize>,
    ctrl: RawComm,
    data: RawComm,
    device: i32,
    me: usize,
    p: usize,
    /// Sequence number of the last collective (collectives are never concurrent on one
    /// communicator; the lock is held for the call).
    coll: Mutex<u64>,
    inner: Mutex<Inner>,
    /// Keeps a header and its data message posted in the same order.
    send_order: Mutex<()>,
    /// Counted in `Maps::states` (set up completely; `destroy` uncounts it).
    counted: bool,
    /// Tags of data messages (K_DATA), rotating through 0..=MPI_TAG_UB.
    data_tag: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for IpcState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IpcState(rank {} of {}, device {})", self.me, self.p, self.device)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Page size assumed for the segment's alignment (slots are page multiples).
const PAGE: usize = 4096;

// ---- process-wide: mappings ----------------------------------------------------------------

/// An open mapping of a peer's allocation.
#[derive(Clone, Copy, Debug)]
struct Mapping {
    ptr: u64,
    /// The exporter's allocation range [base, base + size) in its own address space.
    base: u64,
    size: u64,
}

/// The process's mappings of its peers' allocations, shared by every IPC communicator: one
/// cache per (exporter process, importing device), by buffer id. One lock covers every use: a
/// call holds it from the lookup until the device work that reads or writes through the
/// mappings is complete (its stream synchronised), and mappings are only closed under it, so
/// none is closed while in use.
struct Maps {
    lrus: BTreeMap<(u64, i32), Lru<u64, Mapping>>,
    /// Live IPC communicators of this process; the last one's free closes every mapping.
    states: usize,
}

static MAPS: Mutex<Maps> = Mutex::new(Maps { lrus: BTreeMap::new(), states: 0 });

fn maps() -> MutexGuard<'static, Maps> {
    lock(&MAPS)
}

fn close_mapping(device: i32, m: Mapping) {
    // Closed in the context that opened it (the importing device's primary context).
    let _g = CtxGuard::enter(device);
    // SAFETY: a mapping opened by gpuwire, removed from the cache: closed once.
    let r = unsafe { cu::cuIpcCloseMemHandle(m.ptr) };
    crate::trace!("ipc: closed the mapping of {:#x} ({} bytes) at {:#x}: {r:?}", m.base, m.size, m.ptr);
}

/// Closes every mapping (the last IPC communicator's free; gpuwire_finalize).
fn close_all(m: &mut Maps) {
    for (&(_, device), l) in m.lrus.iter_mut() {
        l.drain(|x| close_mapping(device, x));
    }
    m.lrus.clear();
}

/// The address, in this process, of the memory `rec` of rank `peer` (of a communicator on
/// which this process is rank `me`, using `device`) describes (0 for none). The caller holds
/// `maps` for as long as it uses the address.
fn import(maps: &mut Maps, device: i32, me: usize, peer: usize, rec: &BufRecord) -> Result<usize> {
    if rec.kind == REC_NONE {
        return Ok(0);
    }
    if rec.kind != REC_HANDLE {
        return Err(Error::Internal(format!("rank {peer}'s buffer has no IPC handle")));
    }
    if peer == me || rec.proc_id == shm::proc_id() {
        return Ok((rec.base + rec.offset) as usize);
    }
    let key = (rec.proc_id, device);
    // A cached mapping whose range overlaps this allocation's in the exporter's address space is
    // of an allocation the exporter has freed (two live allocations never overlap), and the
    // driver refuses to open the new one beside it (CUDA_ERROR_ALREADY_MAPPED): close it, in
    // every device's cache of that process, whichever communicator opened it. No call uses it:
    // uses hold `maps` until their device work is complete.
    if !maps.lrus.get(&key).is_some_and(|l| l.contains(&rec.id)) {
        let (b, e) = (rec.base, rec.base + rec.size);
        for (&(_, dev), l) in maps.lrus.iter_mut().filter(|((p, _), _)| *p == rec.proc_id) {
            l.evict_if(|_, m| m.base < e && b < m.base + m.size, |m| {
                crate::trace!("ipc: closing rank {peer}'s freed allocation at {:#x} (mapped at {:#x})", m.base, m.ptr);
                close_mapping(dev, m)
            });
        }
    }
    let pid = rec.proc_id >> 32;
    let m = maps.lrus.entry(key).or_insert_with(|| Lru::new(shm::MAPPINGS_PER_PEER)).get_or_open(
        rec.id,
        || {
            // SAFETY: a handle record written by the peer (64 bytes).
            let mut h: cu::CUipcMemHandle = unsafe { std::mem::zeroed() };
            for (i, b) in rec.handle.iter().enumerate() {
                h.reserved[i] = *b as _;
            }
            let mut d: cu::CUdeviceptr = 0;
            // SAFETY: opens the peer's allocation in the current (primary) context.
            let r = unsafe { cu::cuIpcOpenMemHandle_v2(&mut d, h, cu::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32) };
            if r == cu::CUresult::CUDA_ERROR_ALREADY_MAPPED {
                return Err(Error::Cuda(format!(
                    "cuIpcOpenMemHandle: rank {peer}'s allocation at {:#x} ({} bytes, buffer id {}, process {pid}) is already mapped in this process, though gpuwire closed its own mappings overlapping it (is it mapped by other code in this process, or by a context of another device?)",
                    rec.base, rec.size, rec.id
                )));
            }
            device::check(r, "cuIpcOpenMemHandle").map_err(|e| {
                Error::Cuda(format!("opening rank {peer}'s allocation at {:#x} ({} bytes, process {pid}): {e}", rec.base, rec.size))
            })?;
            crate::trace!("ipc: opened rank {peer}'s buffer {} ({} bytes, process {pid}) at {d:#x}", rec.id, rec.size);
            Ok(Mapping { ptr: d, base: rec.base, size: rec.size })
        },
        |m| close_mapping(device, m),
    )?;
    Ok((m.ptr + rec.offset) as usize)
}

// ---- process-wide: pending receives and their progress ------------------------------------

/// Pending irecvs of every IPC communicator of the process.
struct Recvs {
    ops: Vec<Weak<Mutex<RecvOp>>>,
    /// A progress thread is running (it clears this, under the lock, as it exits).
    running: bool,
    /// gpuwire_finalize began: no new thread.
    shutdown: bool,
    thread: Option<std::thread::JoinHandle<()>>,
}

static RECVS: Mutex<Recvs> = Mutex::new(Recvs { ops: Vec::new(), running: false, shutdown: false, thread: None });
/// Entries of RECVS (a hint read without the lock).
static PENDING: AtomicUsize = AtomicUsize::new(0);

/// Whether IPC receives may be pending in this process (the IPC part of `progress::pending`).
fn recvs_pending() -> bool {
    PENDING.load(Ordering::Acquire) > 0
}

/// The IPC receives' part of `progress`: every IPC wait progresses every source's receives, and
/// the progress thread, started for IPC receives or deferred receives of the MPI paths (`p2p`),
/// runs while any is pending.
pub static PROGRESS: progress::Source = progress::Source { pending: recvs_pending, progress: progress_recvs, posted: deferred_receive_posted };

fn register(op: &Arc<Mutex<RecvOp>>) {
    let mut g = lock(&RECVS);
    g.ops.push(Arc::downgrade(op));
    PENDING.store(g.ops.len(), Ordering::Release);
    start_thread(&mut g);
}

/// A receive was posted (a deferred receive of the MPI paths, `p2p`): the progress thread (where
/// MPI allows it) matches it also while this process blocks in a plain MPI call or an MPI
/// collective, as a posted MPI_Irecv would be matched there.
fn deferred_receive_posted() {
    start_thread(&mut lock(&RECVS));
}

/// Starts the progress thread unless it runs, gpuwire is finalizing, or MPI does not allow it;
/// under RECVS.
fn start_thread(g: &mut Recvs) {
    if !g.running && !g.shutdown && progress::thread_allowed() {
        if let Some(old) = g.thread.take() {
            // It cleared `running` under this lock and returns without taking it again.
            let _ = old.join();
        }
        match std::thread::Builder::new().name("gpuwire-ipc".into()).spawn(progress_thread) {
            Ok(h) => {
                g.thread = Some(h);
                g.running = true;
            }
            Err(e) => crate::trace!("ipc: cannot start the progress thread ({e}); receives progress in gpuwire calls only"),
        }
    }
}

/// The registered receives that still need progress (pruning the others); under RECVS.
fn live_ops(g: &mut Recvs) -> Vec<Arc<Mutex<RecvOp>>> {
    let mut out = Vec::new();
    g.ops.retain(|w| {
        let Some(a) = w.upgrade() else { return false };
        let keep = match a.try_lock() {
            Ok(op) => op.wants_progress(),
            Err(TryLockError::WouldBlock) => true,
            Err(TryLockError::Poisoned(p)) => p.into_inner().wants_progress(),
        };
        if keep {
            out.push(a);
        }
        keep
    });
    PENDING.store(g.ops.len(), Ordering::Release);
    out
}

/// Progresses every pending IPC irecv of the process that no other thread is progressing (each
/// is tried, never waited for, and never blocks on the mapping lock).
fn progress_recvs() {
    if PENDING.load(Ordering::Acquire) == 0 {
        return;
    }
    let ops = live_ops(&mut lock(&RECVS));
    poll_ops(&ops);
}

fn poll_ops(ops: &[Arc<Mutex<RecvOp>>]) {
    for a in ops {
        if let Ok(mut op) = a.try_lock() {
            if op.wants_progress() {
                op.poll_keep(true);
            }
        }
    }
}

/// The progress thread: runs while IPC receives or deferred receives of the MPI paths (`p2p`)
/// are pending (and gpuwire is not finalized), polling them every 20 µs, and IDLE_GRACE longer
/// (every 200 µs). Started by `register` and `deferred_receive_posted`, joined by `shutdown`.
/// How long the progress thread waits, with nothing pending, before it ends.
const IDLE_GRACE: Duration = Duration::from_millis(50);

fn progress_thread() {
    let r = std::panic::catch_unwind(|| {
        // Idle since: the thread stays IDLE_GRACE after the last pending receive, so that a
        // loop that leaves a receive pending in every iteration does not start a thread each time.
        let mut idle: Option<std::time::Instant> = None;
        loop {
            let ops = {
                let mut g = lock(&RECVS);
                if g.shutdown || crate::runtime::ensure_ready().is_err() {
                    g.running = false;
                    return;
                }
                let ops = live_ops(&mut g);
                if ops.is_empty() && !progress::pending() {
                    let since = *idle.get_or_insert_with(std::time::Instant::now);
                    if since.elapsed() >= IDLE_GRACE {
                        g.running = false;
                        return;
                    }
                } else {
                    idle = None;
                }
                ops
            };
            // Every source's receives: the MPI paths' deferred ones (`p2p`) and these.
            progress_all();
            drop(ops);
            std::thread::sleep(Duration::from_micros(if idle.is_some() { 200 } else { 20 }));
        }
    });
    if r.is_err() {
        lock(&RECVS).running = false;
        crate::trace!("ipc: the progress thread panicked; receives progress in gpuwire calls only");
    }
}

/// At gpuwire_finalize, before any object is released: stops and joins the progress thread.
pub fn shutdown() {
    let h = {
        let mut g = lock(&RECVS);
        g.shutdown = true;
        g.thread.take()
    };
    if let Some(h) = h {
        let _ = h.join();
    }
}

/// At gpuwire_finalize, after every communicator was released: closes the mappings that are
/// still open (a communicator still held by another thread's call keeps nothing open after).
pub fn close_all_mappings() {
    close_all(&mut maps());
}

/// Waits for an MPI request, progressing the process's pending IPC receives meanwhile (so that
/// gpuwire's own blocking MPI calls never hang on a peer that waits for this process to copy
/// its send).
pub fn wait_request(req: &mut sys::MPI_Request, what: &str) -> Result<()> {
    let mut spins = 0u32;
    loop {
        let mut flag: c_int = 0;
        let mpi = crate::runtime::mpi_lock();
        // SAFETY: an active request of the caller's, or MPI_REQUEST_NULL.
        mpisys::check(unsafe { sys::MPI_Test(req, &mut flag, mpisys::status_ignore()) }, what)?;
        drop(mpi);
        if flag != 0 {
            return Ok(());
        }
        progress_all();
        spins += 1;
        if spins > 20_000 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

impl IpcState {
    /// Collective over `c`: allocates and registers the shared segment, duplicates the control
    /// communicators.
    pub fn new(c: &Communicator, device: i32) -> Result<IpcState> {
        let p = c.size() as usize;
        let me = c.rank() as usize;
        let bytes = Seg::bytes(p);
        let mut base: *mut c_void = std::ptr::null_mut();
        // SAFETY: RSMPI_WIN_NULL is a constant.
        let mut win: sys::MPI_Win = unsafe { sys::RSMPI_WIN_NULL };
        // Rank 0 allocates the whole segment, plus a page of slack: Open MPI's window base is only
        // 8-byte aligned (seen: 0x...108), and the slots must start on a page boundary.
        let mine = if me == 0 { bytes + PAGE } else { 0 } as sys::MPI_Aint;
        // SAFETY: collective over c; writes the base pointer and the window.
        mpisys::check(
            unsafe { sys::MPI_Win_allocate_shared(mine, 1, sys::RSMPI_INFO_NULL, c.raw(), (&mut base as *mut *mut c_void).cast(), &mut win) },
            "MPI_Win_allocate_shared (IPC segment)",
        )?;
        let mut st = IpcState {
            // Placeholder until the base is known (never dereferenced before).
            seg: Seg { base: 0, p },
            win: Some(RawWin(win)),
            registered: None,
            ctrl: RawComm(mpisys::comm_null()),
            data: RawComm(mpisys::comm_null()),
            device,
            me,
            p,
            coll: Mutex::new(0),
            inner: Mutex::new(Inner { exports: HashMap::new(), cells: Cells::default() }),
            send_order: Mutex::new(()),
            counted: false,
            data_tag: std::sync::atomic::AtomicU64::new(0),
        };
        let (mut qsize, mut disp, mut qbase): (sys::MPI_Aint, c_int, *mut c_void) = (0, 0, std::ptr::null_mut());
        // SAFETY: valid window; writes size, unit and base of rank 0's part.
        mpisys::check(
            unsafe { sys::MPI_Win_shared_query(win, 0, &mut qsize, &mut disp, (&mut qbase as *mut *mut c_void).cast()) },
            "MPI_Win_shared_query (IPC segment)",
        )?;
        // The first page boundary of this process's mapping. Every process maps the segment at
        // a page-aligned address, so the pad is the same everywhere; checked, since the slots
        // must be at the same offset on every rank.
        let pad = (PAGE - (qbase as usize) % PAGE) % PAGE;
        let mut pads = [pad as i64, -(pad as i64)];
        c.allreduce_max_i64(&mut pads, "agreeing on the IPC segment's alignment")?;
        if qbase.is_null() || (qsize as usize) < bytes + pad || pads[0] != -pads[1] {
            return Err(Error::Mpi(format!(
                "the shared window has {qsize} bytes at {qbase:?} (page pad {pad}, on other ranks {}..{}); {bytes} bytes from a page boundary were asked for",
                -pads[1],
                pads[0]
            )));
        }
        let seg_base = qbase as usize + pad;
        // SAFETY: the window holds p slots from seg_base; each rank zeroes its own before the
        // barrier below.
        st.seg = unsafe { Seg::new(seg_base, p) };
        let my = seg_base + me * shm::SLOT_BYTES;
        // SAFETY: this rank's slot, inside the window.
        unsafe { std::ptr::write_bytes(my as *mut u8, 0, shm::SLOT_BYTES) };
        {
            let _g = CtxGuard::enter(device)?;
            // SAFETY: page-multiple range of this process's mapping of the window.
            let r = unsafe { cu::cuMemHostRegister_v2(my as *mut c_void, shm::SLOT_BYTES, cu::CU_MEMHOSTREGISTER_PORTABLE) };
            if r == cu::CUresult::CUDA_SUCCESS {
                st.registered = Some(my);
            } else {
                crate::trace!("ipc: cuMemHostRegister of the segment slot failed ({r:?}); small copies use pageable memory");
            }
        }
        let mut ctrl = mpisys::comm_null();
        let mut data = mpisys::comm_null();
        // SAFETY: collective duplicates of c.
        unsafe {
            mpisys::check(sys::MPI_Comm_dup(c.raw(), &mut ctrl), "MPI_Comm_dup")?;
            st.ctrl = RawComm(ctrl);
            mpisys::check(sys::MPI_Comm_dup(c.raw(), &mut data), "MPI_Comm_dup")?;
            st.data = RawComm(data);
            // Every slot is zeroed before anyone reads one.
            mpisys::check(sys::MPI_Barrier(c.raw()), "MPI_Barrier")?;
        }
        crate::trace!("ipc: segment of {bytes} bytes at {seg_base:#x} (window base {qbase:?}), slot {} bytes", shm::SLOT_BYTES);
        maps().states += 1;
        st.counted = true;
        Ok(st)
    }

    /// Collective teardown (at communicator free): closes every mapping when this was the
    /// process's last IPC communicator, then leaves in two phases (`ipc_shm::leave`) and frees
    /// the window only if every rank left in time; else the window is left to MPI_Finalize.
    pub fn destroy(&mut self, c: &Communicator) {
        if self.counted {
            self.counted = false;
            let mut m = maps();
            m.states = m.states.saturating_sub(1);
            if m.states == 0 {
                close_all(&mut m);
            }
        }
        if let Ok(_g) = CtxGuard::enter(self.device) {
            lock(&self.inner).exports.clear();
            if let Some(b) = self.registered.take() {
                // SAFETY: registered in `new`.
                unsafe { cu::cuMemHostUnregister(b as *mut c_void) };
            }
        }
        let mut free_win = false;
        if self.seg.base != 0 {
            let seg = self.seg;
            let words: Vec<&std::sync::atomic::AtomicU64> = (0..seg.p).map(|r| &seg.slot(r).leave.0).collect();
            free_win = shm::leave(&words, self.me, c.config().timeout, c.is_broken());
            if !free_win {
                crate::trace!(
                    "ipc: not every rank left the communicator in time (leave words {:?}); the window is left to MPI_Finalize",
                    words.iter().map(|w| w.load(Ordering::Acquire)).collect::<Vec<_>>()
                );
            }
        }
        // SAFETY: created in `new`, freed once; the window only when every rank frees it.
        unsafe {
            if free_win {
                if let Some(mut w) = self.win.take() {
                    sys::MPI_Win_free(&mut w.0);
                }
            }
            for comm in [&mut self.ctrl, &mut self.data] {
                if comm.0 != mpisys::comm_null() {
                    sys::MPI_Comm_free(&mut comm.0);
                }
            }
        }
    }

    /// The record of `v` for peers: an IPC handle for exportable device memory.
    fn export(&self, v: Option<View>) -> BufRecord {
        let Some(v) = v else { return BufRecord::default() };
        if v.bytes == 0 {
            return BufRecord::default();
        }
        if v.space != Space::GPUWIRE_SPACE_DEVICE {
            return BufRecord { kind: REC_LOCAL_ONLY, ..Default::default() };
        }
        match self.export_device(v.ptr) {
            Ok(Some(r)) => r,
            Ok(None) => BufRecord { kind: REC_LOCAL_ONLY, ..Default::default() },
            Err(e) => {
                crate::trace!("ipc: cannot export {:#x}: {e}; this call is staged", v.ptr);
                BufRecord { kind: REC_LOCAL_ONLY, ..Default::default() }
            }
        }
    }

    fn export_device(&self, ptr: usize) -> Result<Option<BufRecord>> {
        let dptr = ptr as cu::CUdeviceptr;
        let mut id: u64 = 0;
        // SAFETY: writes one unsigned long long.
        let r = unsafe { cu::cuPointerGetAttribute((&mut id as *mut u64).cast(), cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_BUFFER_ID, dptr) };
        if r != cu::CUresult::CUDA_SUCCESS {
            return Ok(None);
        }
        let mut capable: c_int = 1;
        // SAFETY: writes one int (an unknown attribute leaves it as it was).
        let r = unsafe {
            cu::cuPointerGetAttribute((&mut capable as *mut c_int).cast(), cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, dptr)
        };
        if r == cu::CUresult::CUDA_SUCCESS && capable == 0 {
            return Ok(None);
        }
        let mut inner = lock(&self.inner);
        let e = match inner.exports.get(&id) {
            Some(e) => *e,
            None => {
                let (mut base, mut size): (cu::CUdeviceptr, usize) = (0, 0);
                // SAFETY: writes base and size of the allocation holding dptr.
                device::check(unsafe { cu::cuMemGetAddressRange_v2(&mut base, &mut size, dptr) }, "cuMemGetAddressRange")?;
                // SAFETY: zeroed handle storage, written by the driver.
                let mut h: cu::CUipcMemHandle = unsafe { std::mem::zeroed() };
                // SAFETY: base is the start of a device allocation of this process.
                let r = unsafe { cu::cuIpcGetMemHandle(&mut h, base) };
                if r != cu::CUresult::CUDA_SUCCESS {
                    crate::trace!("ipc: cuIpcGetMemHandle({base:#x}) = {r:?}: not exportable");
                    return Ok(None);
                }
                let mut handle = [0u8; 64];
                for (i, b) in h.reserved.iter().enumerate() {
                    handle[i] = *b as u8;
                }
                if inner.exports.len() >= 4096 {
                    inner.exports.clear();
                }
                let e = Export { base, size: size as u64, handle };
                inner.exports.insert(id, e);
                e
            }
        };
        Ok(Some(BufRecord { kind: REC_HANDLE, _pad: 0, base: e.base, offset: ptr as u64 - e.base, id, size: e.size, proc_id: shm::proc_id(), handle: e.handle }))
    }

    /// The address, in this process, of the memory `rec` of rank `peer` describes (0 for none).
    /// The caller holds `maps` for as long as it uses the address (mappings are only closed
    /// under it).
    fn import(&self, maps: &mut Maps, peer: usize, rec: &BufRecord) -> Result<usize> {
        import(maps, self.device, self.me, peer, rec)
    }
}

// ---- collectives ---------------------------------------------------------------------------

/// A contiguous range of a buffer.
#[derive(Clone, Copy, Debug)]
struct View {
    ptr: usize,
    bytes: usize,
    space: Space,
}

impl View {
    fn of(b: &Buffer) -> View {
        View { ptr: b.ptr(), bytes: b.bytes(), space: b.space() }
    }
    fn at(self, off: usize, bytes: usize) -> View {
        View { ptr: self.ptr + off, bytes, space: self.space }
    }
    fn host(self) -> bool {
        self.space.is_host_accessible()
    }
}

/// One collective call in progress.
struct Coll<'a> {
    c: &'a Communicator,
    s: &'a IpcState,
    seq: u64,
    stream: Stream,
    what: &'static str,
    /// This rank's failure before the exchange (published, then returned on every rank).
    local: Result<()>,
    _lock: MutexGuard<'a, u64>,
    _ctx: CtxGuard,
}

fn state(c: &Communicator) -> Result<&IpcState> {
    c.backend_state.get::<IpcState>().ok_or_else(|| Error::Internal("IPC path used on a communicator without IPC state".into()))
}

impl<'a> Coll<'a> {
    fn begin(c: &'a Communicator, what: &'static str, bufs: &[Option<&Buffer>], stream: Stream) -> Result<Coll<'a>> {
        let s = state(c)?;
        let ctx = CtxGuard::enter(s.device)?;
        let mut g = lock(&s.coll);
        *g += 1;
        let seq = *g;
        let mut local = Ok(());
        for b in bufs.iter().flatten() {
            if local.is_ok() {
                local = devstate::check_device(c, b);
            }
        }
        if local.is_ok() {
            local = device::sync(stream);
        }
        Ok(Coll { c, s, seq, stream, what, local, _lock: g, _ctx: ctx })
    }

    fn me(&self) -> usize {
        self.s.me
    }
    fn p(&self) -> usize {
        self.s.p
    }
    fn area(&self, r: usize) -> *mut CallArea {
        self.s.seg.area(r, self.seq)
    }
    fn rec(&self, r: usize, k: usize) -> BufRecord {
        // SAFETY: published before rank r's arrival, which the caller observed.
        unsafe { std::ptr::read(std::ptr::addr_of!((*self.area(r)).rec[k])) }
    }
    /// Rank r's small data of this call.
    fn data(&self, r: usize) -> &[u8] {
        let a = self.area(r);
        // SAFETY: written before rank r's arrival; not rewritten before this rank's next arrival.
        unsafe {
            let n = ((*a).data_bytes as usize).min(SMALL);
            std::slice::from_raw_parts(std::ptr::addr_of!((*a).data) as *const u8, n)
        }
    }

    /// Copies `v` (at most SMALL bytes) into this rank's slot (device-to-host on the copy engine).
    fn stage_in(&mut self, v: Option<View>) {
        if self.local.is_err() {
            return;
        }
        let a = self.area(self.me());
        // SAFETY: this rank's own call area.
        let dst = unsafe { std::ptr::addr_of_mut!((*a).data) as usize };
        let n = v.map(|v| v.bytes).unwrap_or(0);
        // SAFETY: as above.
        unsafe { (*a).data_bytes = n as u64 };
        if let Some(v) = v.filter(|v| v.bytes > 0) {
            self.local = if v.host() {
                // SAFETY: host memory of the caller valid for n bytes; n <= SMALL.
                unsafe { std::ptr::copy_nonoverlapping(v.ptr as *const u8, dst as *mut u8, n) };
                Ok(())
            } else {
                device::copy_async(dst, v.ptr, n, self.stream).and_then(|()| device::sync(self.stream))
            };
        }
    }

    /// Publishes this rank's status and records, then waits until every rank arrived. Returns
    /// the lowest failing rank's error on every rank, else whether any rank's buffer cannot be
    /// exported (the call then takes the staged path everywhere).
    fn exchange(&mut self, recs: [BufRecord; 2]) -> Result<bool> {
        let a = self.area(self.me());
        // SAFETY: this rank's own call area; peers read it only after the Release store below.
        unsafe {
            (*a).rec = recs;
            (*a).result = ST_OK;
            match &self.local {
                Ok(()) => (*a).status = ST_OK,
                Err(e) => {
                    (*a).status = ST_ERROR;
                    (*a).code = e.status() as i32;
                    shm::put_text(&mut (*std::ptr::addr_of_mut!((*a).msg)), &e.to_string());
                }
            }
        }
        let mine = self.s.seg.slot(self.me());
        mine.cstate.0.store(shm::claim_word(self.seq, shm::OFFERED), Ordering::Release);
        mine.arrive.0.store(self.seq, Ordering::Release);
        if let Err(e) = self.wait(|s| &s.arrive, None) {
            if self.me() == 0 {
                // The leader gives up: ranks that arrive after all must not wait for its `done`.
                self.publish_result(&Err(Error::from_status(e.status(), format!("{}: the leader (rank 0) gave up: {e}", self.what))));
            }
            return Err(e);
        }
        for r in 0..self.p() {
            let a = self.area(r);
            // SAFETY: published before rank r's arrival.
            let (st, code) = unsafe { ((*a).status, (*a).code) };
            if st == ST_ERROR {
                // SAFETY: as above.
                let msg = shm::get_text(unsafe { &*std::ptr::addr_of!((*a).msg) });
                let detail = msg.split_once(": ").map(|(_, d)| d.to_string()).unwrap_or(msg);
                let status = Status::from_i32(code).unwrap_or(Status::GPUWIRE_ERROR_INTERNAL);
                return Err(Error::from_status(status, format!("{} failed on rank {r}: {detail}", self.what)));
            }
        }
        Ok((0..self.p()).any(|r| (0..2).any(|k| self.rec(r, k).kind == REC_LOCAL_ONLY)))
    }

    /// Waits until `field` reached this call's sequence number on every rank (or on `only`).
    fn wait(&self, field: fn(&shm::Slot) -> &shm::Counter, only: Option<usize>) -> Result<()> {
        let (seg, seq) = (self.s.seg, self.seq);
        let ready = || match only {
            Some(r) => field(seg.slot(r)).0.load(Ordering::Acquire) >= seq,
            None => (0..seg.p).all(|r| field(seg.slot(r)).0.load(Ordering::Acquire) >= seq),
        };
        // Pending irecvs progress meanwhile: a peer may be blocked in a send to this rank before
        // it reaches this collective.
        // One deadline per gpuwire call: what is left of it.
        let r = shm::spin_until(self.c.remaining(), || self.c.is_broken(), || {
            if ready() {
                return Ok(true);
            }
            progress_all();
            Ok(false)
        })?;
        match r {
            Ok(()) => Ok(()),
            // Everyone arrived just as the deadline passed: no reason to give up.
            Err(Stop::TimedOut) if ready() => Ok(()),
            Err(stop) if self.me() != 0 && !shm::abandon(&seg.slot(self.me()).cstate.0, seq) => {
                // The leader claimed this rank's buffers first: it is working on them (all ranks
                // arrived), and this rank may not return before it is done. No deadline: the
                // leader's device work runs, and its `done` follows.
                crate::trace!("ipc: {}: {stop:?} while the leader works on this rank's buffers; waiting for it", self.what);
                shm::spin_until(None, || false, || {
                    if ready() {
                        return Ok(true);
                    }
                    progress_all();
                    Ok(false)
                })?
                .map_err(|_| Error::Internal("unbounded wait ended".into()))
            }
            Err(Stop::Broken) => {
                self.c.ensure_usable()?;
                Err(Error::CommBroken(format!("{}: the communicator broke while waiting", self.what)))
            }
            Err(Stop::TimedOut) => {
                let late: Vec<usize> = seg.behind(seq, field).into_iter().filter(|r| only.is_none_or(|o| o == *r)).collect();
                let t = self.c.config().timeout.map(|t| t.as_secs_f64()).unwrap_or(0.0);
                let msg = format!(
                    "{}: rank(s) {late:?} did not arrive within the communicator's timeout of {t:.3} s (a rank did not make the matching call?); the communicator is now broken",
                    self.what
                );
                self.c.mark_broken(msg.clone());
                Err(Error::Timeout(msg))
            }
        }
    }

    /// Writes `bytes` (this rank's result) to `dst` and waits for it.
    fn deliver(&self, dst: View, bytes: &[u8]) -> Result<()> {
        let shared = devstate::dev(self.c)?.gpu_shared;
        deliver(dst, bytes, self.stream, shared)
    }

    /// The leader's device work: `work` enqueues on the leader's stream; then the stream is
    /// waited for and `done` published with the outcome. Other ranks wait for it.
    fn lead_or_follow(&self, work: impl FnOnce(&mut Lead) -> Result<()>) -> Result<()> {
        if self.me() != 0 {
            self.wait(|s| &s.done, Some(0))?;
            let a = self.area(0);
            // SAFETY: written by the leader before its `done` store, which was observed.
            let (res, code) = unsafe { ((*a).result, (*a).rcode) };
            if res == ST_ERROR {
                // SAFETY: as above.
                let msg = shm::get_text(unsafe { &*std::ptr::addr_of!((*a).rmsg) });
                let status = Status::from_i32(code).unwrap_or(Status::GPUWIRE_ERROR_INTERNAL);
                return Err(Error::from_status(status, msg));
            }
            return Ok(());
        }
        // Claim every follower's buffers before touching any: a follower that gave up first
        // (its wait timed out) has returned, and its buffers may be gone.
        let seg = self.s.seg;
        let refused = (1..self.p()).find(|r| shm::claim(&seg.slot(*r).cstate.0, self.seq).is_err());
        let r = match refused {
            Some(q) => {
                let msg = format!("rank {q} gave up waiting (its timeout) before the device work started; nothing was done; the communicator is now broken");
                self.c.mark_broken(format!("{}: {msg}", self.what));
                Err(Error::CommBroken(msg))
            }
            None => {
                let mut m = maps();
                let mut l = Lead { co: self, maps: &mut m };
                work(&mut l).and_then(|()| device::sync(self.stream))
            }
        };
        let r = r.map_err(|e| {
            let detail = e.to_string();
            let detail = detail.split_once(": ").map(|(_, d)| d.to_string()).unwrap_or(detail);
            Error::from_status(e.status(), format!("{} failed on rank 0 (the leader of the device work): {detail}", self.what))
        });
        self.publish_result(&r);
        r
    }

    /// The leader's outcome of this call, published with its `done`.
    fn publish_result(&self, r: &Result<()>) {
        let a = self.area(0);
        // SAFETY: the leader's own call area; read by others after the Release store below.
        unsafe {
            match r {
                Ok(()) => (*a).result = ST_OK,
                Err(e) => {
                    (*a).result = ST_ERROR;
                    (*a).rcode = e.status() as i32;
                    // Without the kind's prefix ("CUDA error: "): the followers' Error adds it
                    // again, and every rank must show the same message.
                    let text = e.to_string();
                    let detail = text.split_once(": ").map_or(text.as_str(), |(_, d)| d);
                    shm::put_text(&mut (*std::ptr::addr_of_mut!((*a).rmsg)), detail);
                }
            }
        }
        self.s.seg.slot(0).done.0.store(self.seq, Ordering::Release);
    }
}

/// Writes host `bytes` to `dst` on `stream` and waits: host memory directly, device memory of
/// ranks sharing the GPU as `device::htod_shared` does, else a copy.
fn deliver(dst: View, bytes: &[u8], stream: Stream, shared: bool) -> Result<()> {
    let n = bytes.len().min(dst.bytes);
    if n == 0 {
        return Ok(());
    }
    if dst.host() {
        // SAFETY: host memory of the caller valid for n bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst.ptr as *mut u8, n) };
        return Ok(());
    }
    // Ranks sharing the GPU: off the time-sliced compute engine (device::htod_shared).
    if shared && dst.space == Space::GPUWIRE_SPACE_DEVICE {
        return device::htod_shared(dst.ptr, &bytes[..n], stream);
    }
    device::copy_async(dst.ptr, bytes.as_ptr() as usize, n, stream)?;
    device::sync(stream)
}

/// The leader's view of a call: peers' buffers through their mappings.
struct Lead<'b, 'a> {
    co: &'b Coll<'a>,
    maps: &'b mut Maps,
}

impl Lead<'_, '_> {
    /// Rank r's buffer k (0 input, 1 output) in this process (0 when it has none).
    fn ptr(&mut self, r: usize, k: usize) -> Result<usize> {
        let rec = self.co.rec(r, k);
        self.co.s.import(self.maps, r, &rec)
    }
    /// Whether rank r passed the same memory as input and output (in place).
    fn same(&self, r: usize) -> bool {
        let (a, b) = (self.co.rec(r, 0), self.co.rec(r, 1));
        a.kind == REC_HANDLE && b.kind == REC_HANDLE && a.id == b.id && a.offset == b.offset
    }
    fn copy(&self, dst: usize, src: usize, bytes: usize) -> Result<()> {
        ring::copy(Loc { ptr: dst, host: false }, Loc { ptr: src, host: false }, bytes, self.co.stream)
    }
    fn combine(&self, dst: usize, src: usize, n: usize, dtype: Dtype, op: ReduceOp) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        ring::combine(self.co.s.device, Loc { ptr: dst, host: false }, Loc { ptr: src, host: false }, n, dtype, op, self.co.stream)
    }
    fn avg(&self, x: usize, n: usize, dtype: Dtype, op: ReduceOp) -> Result<()> {
        if op != ReduceOp::GPUWIRE_AVG || n == 0 {
            return Ok(());
        }
        ring::divide(self.co.s.device, Loc { ptr: x, host: false }, n, dtype, self.co.p(), self.co.stream)
    }
    /// `acc = in_0 op in_1 op ... op in_{p-1}` over n elements at byte offset `off` of every
    /// rank's input, in rank order; AVG divided.
    fn reduce_into(&mut self, acc: usize, off: usize, n: usize, dtype: Dtype, op: ReduceOp) -> Result<()> {
        let b = n * dtype.size();
        let i0 = self.ptr(0, 0)?;
        self.copy(acc, i0 + off, b)?;
        for r in 1..self.co.p() {
            let ir = self.ptr(r, 0)?;
            self.combine(acc, ir + off, n, dtype, op)?;
        }
        self.avg(acc, n, dtype, op)
    }
    /// Device scratch of the leader (the communicator's working-copy scratch).
    fn scratch(&self, bytes: usize) -> Result<usize> {
        let mut st = devstate::dev(self.co.c)?;
        st.dev[1].get(bytes)
    }
}

/// `acc = d_0 op d_1 op ...` on the host, in rank order, over n elements at byte offset `off` of
/// every rank's small data; AVG divided.
fn host_reduce(co: &Coll, off: usize, n: usize, dtype: Dtype, op: ReduceOp) -> Result<Vec<u8>> {
    let b = n * dtype.size();
    let mut acc = vec![0u64; b.div_ceil(8)];
    let accp = acc.as_mut_ptr() as *mut u8;
    let d0 = co.data(0);
    // SAFETY: acc holds b bytes; the data areas hold the ranks' inputs (length checked).
    unsafe {
        if d0.len() < off + b {
            return Err(Error::Internal("small reduction: a rank published less data than expected".into()));
        }
        std::ptr::copy_nonoverlapping(d0.as_ptr().add(off), accp, b);
        for r in 1..co.p() {
            let dr = co.data(r);
            if dr.len() < off + b {
                return Err(Error::Internal("small reduction: a rank published less data than expected".into()));
            }
            // The data areas are 64-byte aligned; copy out anyway to keep alignment independent of off.
            let mut tmp = vec![0u64; b.div_ceil(8)];
            std::ptr::copy_nonoverlapping(dr.as_ptr().add(off), tmp.as_mut_ptr() as *mut u8, b);
            reduce::combine(dtype, op, accp, tmp.as_ptr() as *const u8, n)?;
        }
        if op == ReduceOp::GPUWIRE_AVG {
            reduce::divide(dtype, accp, n, co.p())?;
        }
    }
    let mut out = vec![0u8; b];
    // SAFETY: acc holds b bytes.
    unsafe { std::ptr::copy_nonoverlapping(accp, out.as_mut_ptr(), b) };
    Ok(out)
}

fn in_view(send: Input, recv: &Buffer, block_bytes: usize, bytes: usize) -> View {
    match send {
        Input::Buf(b) => View::of(b),
        Input::InPlace => View::of(recv).at(block_bytes, bytes),
    }
}

/// Whether GPU reduction kernels work on every rank (agreed at setup).
fn kernels_ok(c: &Communicator) -> bool {
    devstate::dev(c).map(|st| st.kernels.is_ok()).unwrap_or(false)
}

// ---- point-to-point -------------------------------------------------------------------------

const MAGIC: u32 = 0x6770_6970; // "gpip"
const K_INLINE: u32 = 1;
const K_HANDLE: u32 = 2;
const K_LOCAL: u32 = 3;
const K_DATA: u32 = 4;
/// Device sends in this range go as K_DATA (staged through host memory) when ranks share a GPU.
const STAGED_P2P_MIN: usize = SMALL + 1;
const STAGED_P2P_MAX: usize = 512 << 10;

/// A control message (only the first HDR_FIXED + inline bytes travel).
#[repr(C)]
#[derive(Clone, Copy)]
struct Header {
    magic: u32,
    kind: u32,
    src: i32,
    tag: i32,
    bytes: u64,
    cell: u64,
    generation: u64,
    /// The sender's element count and datatype (compared by the receiver in checking mode).
    count: u64,
    dtype: i32,
    /// CHECK_COMPARE: the receiver compares count and datatype (checking mode); CHECK_CELL: an
    /// inline or data message names a completion cell that the receiver ends (so the sender
    /// learns of a refusal).
    check: u32,
    /// K_LOCAL: the sender's pointer (the same process); K_DATA: the tag of the data message.
    ptr: u64,
    rec: BufRecord,
    data: [u8; SMALL],
}

const HDR_FIXED: usize = std::mem::size_of::<Header>() - SMALL;
const CHECK_COMPARE: u32 = 1;
const CHECK_CELL: u32 = 2;

fn zeroed_header() -> Box<Header> {
    // SAFETY: all-zero is a valid Header (plain integers and arrays).
    Box::new(unsafe { std::mem::zeroed() })
}

fn mpi_test(req: &mut RawRequest) -> Result<bool> {
    let mut flag: c_int = 0;
    // SAFETY: a request of ours, or MPI_REQUEST_NULL (then flag is true).
    mpisys::check(unsafe { sys::MPI_Test(&mut req.0, &mut flag, mpisys::status_ignore()) }, "MPI_Test")?;
    Ok(flag != 0)
}

fn isend_bytes(comm: RawComm, ptr: usize, bytes: usize, dest: i32, tag: i32) -> Result<RawRequest> {
    let n = mpisys::Count::new(Dtype::GPUWIRE_UINT8, bytes)?;
    let mut req = mpisys::request_null();
    // SAFETY: ptr valid for bytes until the request completes (kept by the operation).
    mpisys::check(unsafe { sys::MPI_Isend(ptr as *const c_void, n.n, n.dt, dest, tag, comm.0, &mut req) }, "MPI_Isend")?;
    Ok(RawRequest(req))
}

fn irecv_bytes(comm: RawComm, ptr: usize, bytes: usize, source: i32, tag: i32) -> Result<RawRequest> {
    let n = mpisys::Count::new(Dtype::GPUWIRE_UINT8, bytes)?;
    let mut req = mpisys::request_null();
    // SAFETY: as above.
    mpisys::check(unsafe { sys::MPI_Irecv(ptr as *mut c_void, n.n, n.dt, source, tag, comm.0, &mut req) }, "MPI_Irecv")?;
    Ok(RawRequest(req))
}

/// A send in flight.
struct SendOp {
    reqs: Vec<RawRequest>,
    _hdr: Box<Header>,
    /// The completion cell the receiver stores into (mapping and local sends).
    cell: Option<(usize, u64)>,
    staged: Option<PoolBuf>,
    pool: *const Pool,
    state: *const IpcState,
    dest: i32,
}
// SAFETY: the pointers refer to the communicator's state, which the request keeps alive.
unsafe impl Send for SendOp {}

impl SendOp {
    fn start(c: &Communicator, buf: &Buffer, dest: i32, tag: i32, stream: Stream) -> Result<SendOp> {
        let s = state(c)?;
        devstate::check_device(c, buf)?;
        let _g = CtxGuard::enter(s.device)?;
        device::sync(stream)?;
        let v = View::of(buf);
        let mut h = zeroed_header();
        h.magic = MAGIC;
        h.src = c.rank();
        h.tag = tag;
        h.bytes = v.bytes as u64;
        h.count = buf.count() as u64;
        h.dtype = buf.dtype() as i32;
        let mut op = SendOp { reqs: Vec::new(), _hdr: zeroed_header(), cell: None, staged: None, pool: devstate::pool(c)?, state: s, dest };
        let mut len = HDR_FIXED;
        let mut data: Option<(usize, usize, i32)> = None;
        if v.bytes <= SMALL {
            h.kind = K_INLINE;
            if v.bytes > 0 {
                let dst = h.data.as_mut_ptr() as usize;
                if v.host() {
                    // SAFETY: the caller's host memory, v.bytes <= SMALL.
                    unsafe { std::ptr::copy_nonoverlapping(v.ptr as *const u8, dst as *mut u8, v.bytes) };
                } else {
                    device::copy_async(dst, v.ptr, v.bytes, stream)?;
                    device::sync(stream)?;
                }
            }
            len += v.bytes;
        } else {
            // Ranks sharing a GPU: above 1 KiB and up to 512 KiB the data goes as an MPI message
            // staged through pinned host memory (two copy-engine copies; below 32 KiB the
            // receiver's as device::htod_shared) rather than the receiver's device-to-device
            // copy, which waits for the other process's time slice on the compute engine
            // (~150 µs; staged 31–118 µs from 32 KiB, measured on the H200).
            let staged = dest as usize != s.me && !v.host() && (STAGED_P2P_MIN..=STAGED_P2P_MAX).contains(&v.bytes) && devstate::dev(c)?.gpu_shared;
            let mut rec = if dest as usize == s.me || staged { BufRecord::default() } else { s.export(Some(v)) };
            // A send through a mapping needs a completion cell; with all of them taken (sends
            // waiting for their receivers) it goes as a data message instead, which MPI completes.
            let mut cell = None;
            if dest as usize == s.me || rec.kind == REC_HANDLE {
                cell = lock(&s.inner).cells.take(&s.seg.slot(s.me).cells);
                if cell.is_none() && dest as usize != s.me {
                    rec = BufRecord::default();
                }
            }
            if dest as usize == s.me {
                h.kind = K_LOCAL;
                h.ptr = v.ptr as u64;
                // Whether the pointer is host memory.
                h.rec.kind = if v.host() { REC_LOCAL_ONLY } else { REC_NONE };
            } else if rec.kind == REC_HANDLE {
                h.kind = K_HANDLE;
                h.rec = rec;
            } else {
                h.kind = K_DATA;
                let src = if v.host() {
                    v.ptr
                } else {
                    let st = devstate::dev(c)?;
                    let pb = devstate::pool(c)?.take(v.bytes, st.pinned(), s.device)?;
                    drop(st);
                    let p = pb.ptr;
                    op.staged = Some(pb);
                    device::copy_async(p, v.ptr, v.bytes, stream)?;
                    device::sync(stream)?;
                    p
                };
                // The data message gets a tag of its own, named in the header: the receiver may
                // process two headers from this rank out of order (request tests), and must still
                // match each with its own data.
                let dtag = (s.data_tag.fetch_add(1, Ordering::Relaxed) as i64 % (crate::runtime::ensure_ready()?.tag_ub as i64 + 1)) as i32;
                h.ptr = dtag as u64;
                data = Some((src, v.bytes, dtag));
            }
            if matches!(h.kind, K_LOCAL | K_HANDLE) {
                let Some((cell, generation)) = cell else {
                    return Err(Error::InvalidArgument(format!(
                        "send to itself: {} sends of more than {SMALL} bytes are already waiting for their receivers on this communicator (complete some first)",
                        shm::CELLS
                    )));
                };
                h.cell = cell as u64;
                h.generation = generation;
                op.cell = Some((cell, generation));
            }
        }
        if c.config().check {
            // Checking mode: the receiver compares count and datatype, and an inline or data
            // message takes a completion cell too, so that a refusal fails this send as well
            // (without a free cell it goes without: then only the receiver reports it).
            h.check = CHECK_COMPARE;
            if op.cell.is_none() {
                if let Some((cell, generation)) = lock(&s.inner).cells.take(&s.seg.slot(s.me).cells) {
                    h.cell = cell as u64;
                    h.generation = generation;
                    h.check |= CHECK_CELL;
                    op.cell = Some((cell, generation));
                }
            }
        }
        let hp = &*h as *const Header as usize;
        {
            let _order = lock(&s.send_order);
            op.reqs.push(isend_bytes(s.ctrl, hp, len, dest, tag)?);
            if let Some((p, n, dtag)) = data {
                op.reqs.push(isend_bytes(s.data, p, n, dest, dtag)?);
            }
        }
        op._hdr = h;
        Ok(op)
    }

    fn test(&mut self) -> Result<bool> {
        for r in self.reqs.iter_mut() {
            if !mpi_test(r)? {
                return Ok(false);
            }
        }
        if let Some((cell, generation)) = self.cell {
            // SAFETY: see the Send impl.
            let s = unsafe { &*self.state };
            match shm::cell_end(&s.seg.slot(s.me).cells, cell, generation) {
                None => return Ok(false),
                Some(shm::DONE) => {}
                Some(st @ (shm::REFUSED_COUNT | shm::REFUSED_DTYPE)) => {
                    self.cell = None;
                    let what = if st == shm::REFUSED_DTYPE { "datatype" } else { "size (element count)" };
                    let msg = format!("send: rank {}'s receive refused this message: its {what} differs from the receive buffer's (the receiver's error names both); nothing was received", self.dest);
                    return Err(if st == shm::REFUSED_DTYPE { Error::DtypeMismatch(msg) } else { Error::CountMismatch(msg) });
                }
                Some(_) => {
                    self.cell = None;
                    return Err(Error::Cuda(format!(
                        "send: rank {}'s receive of this message failed while copying it (its own error says why)",
                        self.dest
                    )));
                }
            }
        }
        if let Some(b) = self.staged.take() {
            // SAFETY: see the Send impl.
            unsafe { (*self.pool).give(b) };
        }
        Ok(true)
    }

    fn quitter(&self) -> Quitter {
        Quitter { cell: self.cell, state: self.state }
    }
}

/// What a send needs to give up at a timeout.
#[derive(Clone, Copy)]
struct Quitter {
    cell: Option<(usize, u64)>,
    state: *const IpcState,
}

impl Quitter {
    /// Whether the send may give up. A send through a mapping gives up only if its receiver has
    /// not claimed it (then never will); once claimed, the receiver is copying from this rank's
    /// buffer (or finished), and the send must wait for it.
    fn give_up(&self) -> bool {
        let Some((cell, generation)) = self.cell else { return true };
        // SAFETY: the communicator's state, alive while its send is (see SendOp).
        let s = unsafe { &*self.state };
        shm::abandon(&s.seg.slot(s.me).cells[cell], generation)
    }

    /// Waits (without a deadline) until the receiver that claimed the send finished; true.
    fn wait_finished(&self) -> bool {
        if let Some((cell, generation)) = self.cell {
            // SAFETY: as in give_up.
            let s = unsafe { &*self.state };
            let _ = shm::spin_until(None, || false, || Ok(shm::cell_done(&s.seg.slot(s.me).cells, cell, generation).is_some()));
        }
        true
    }
}

enum RState {
    Header,
    Data { req: RawRequest, pb: Option<PoolBuf> },
    Done,
}

/// A receive in flight.
pub struct RecvOp {
    hdr: Box<Header>,
    req: RawRequest,
    state: RState,
    dst: View,
    stream: Stream,
    error: Option<Error>,
    ipc: *const IpcState,
    pool: *const Pool,
    pinned: bool,
    /// Ranks share the GPU (small deliveries avoid the compute engine: `device::htod_shared`).
    shared: bool,
    /// The receive buffer's element count and datatype.
    count: usize,
    dtype: crate::types::Dtype,
    /// Set by the owner (IpcRecv) when it is dropped: the pointers above may dangle from then
    /// on, and nobody may progress the operation any more.
    closed: bool,
}
// SAFETY: the pointers refer to the communicator's state and the receive buffer, which the
// request keeps alive until it drops its IpcRecv; that sets `closed` under the operation's lock
// first, and no thread progresses a closed operation.
unsafe impl Send for RecvOp {}

impl RecvOp {
    fn start(c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<RecvOp> {
        let s = state(c)?;
        devstate::check_device(c, buf)?;
        let (pinned, shared) = {
            let st = devstate::dev(c)?;
            (st.pinned(), st.gpu_shared)
        };
        {
            // The receive buffer may be written as soon as a message arrives: order it after the
            // caller's earlier work.
            let _g = CtxGuard::enter(s.device)?;
            device::sync(stream)?;
        }
        let hdr = zeroed_header();
        let req = irecv_bytes(s.ctrl, &*hdr as *const Header as usize, std::mem::size_of::<Header>(), source, tag)?;
        Ok(RecvOp {
            hdr,
            req,
            state: RState::Header,
            dst: View::of(buf),
            stream,
            error: None,
            ipc: s,
            pool: devstate::pool(c)?,
            pinned,
            shared,
            count: buf.count(),
            dtype: buf.dtype(),
            closed: false,
        })
    }

    /// Whether another thread may progress it (the owner's request is alive, not finished).
    fn wants_progress(&self) -> bool {
        !self.closed && !matches!(self.state, RState::Done)
    }

    /// Progress; errors are kept for the owner. `others`: called for another owner (a wait of
    /// another call or communicator, the progress thread): never blocks on the mapping lock.
    fn poll_keep(&mut self, others: bool) {
        if self.closed {
            return;
        }
        if let Err(e) = self.progress(others) {
            self.state = RState::Done;
            self.error = Some(e);
        }
    }

    /// Whether complete (its error, once, when it failed).
    fn poll(&mut self) -> Result<bool> {
        self.poll_keep(false);
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        Ok(matches!(self.state, RState::Done))
    }

    fn progress(&mut self, others: bool) -> Result<()> {
        // SAFETY: see the Send impl.
        let s = unsafe { &*self.ipc };
        loop {
            match &mut self.state {
                RState::Done => return Ok(()),
                RState::Header => {
                    // Once complete, the request is MPI_REQUEST_NULL: testing it again (after a
                    // return below without progress) reports it complete again.
                    if !mpi_test(&mut self.req)? {
                        return Ok(());
                    }
                    let h = *self.hdr;
                    if h.magic != MAGIC {
                        self.state = RState::Done;
                        return Err(Error::Internal("recv: a control message without gpuwire's header arrived".into()));
                    }
                    let bytes = h.bytes as usize;
                    // A message of another size (or, in checking mode, count or datatype) is
                    // refused: nothing is written to the buffer.
                    let refused = self.verdict(&h).is_some();
                    let n = self.dst.bytes;
                    let _g = CtxGuard::enter(s.device)?;
                    let moved = match h.kind {
                        K_INLINE if refused => Ok(()),
                        K_INLINE => deliver(self.dst, &h.data[..n.min(SMALL)], self.stream, self.shared),
                        K_LOCAL | K_HANDLE => {
                            // The mapping lock before the claim: a caller for another owner
                            // that cannot take it now comes back later, with nothing claimed.
                            let mut mapg = if h.kind == K_HANDLE {
                                match MAPS.try_lock() {
                                    Ok(g) => Some(g),
                                    Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
                                    Err(TryLockError::WouldBlock) if others => return Ok(()),
                                    Err(TryLockError::WouldBlock) => Some(maps()),
                                }
                            } else {
                                None
                            };
                            let sender_ok = (h.src as usize) < s.p && (h.cell as usize) < shm::CELLS;
                            if !sender_ok {
                                self.state = RState::Done;
                                return Err(Error::Internal(format!("recv: a header from rank {} names completion cell {}", h.src, h.cell)));
                            }
                            let word = &s.seg.slot(h.src as usize).cells[h.cell as usize];
                            // Claimed before the sender's memory is read: a sender that gave up
                            // first (timed out) has returned, and its buffer may be gone.
                            if shm::claim(word, h.generation).is_err() {
                                self.state = RState::Done;
                                return Err(Error::CommBroken(format!(
                                    "recv: rank {} gave up this send (its timeout) before it was received; nothing was received",
                                    h.src
                                )));
                            }
                            if let Some((st, e)) = self.verdict(&h) {
                                drop(mapg);
                                shm::refuse(word, h.generation, st);
                                self.state = RState::Done;
                                return Err(e);
                            }
                            let r = if h.kind == K_LOCAL {
                                let src_host = h.rec.kind == REC_LOCAL_ONLY;
                                ring::copy(Loc { ptr: self.dst.ptr, host: self.dst.host() }, Loc { ptr: h.ptr as usize, host: src_host }, n, self.stream)
                                    .and_then(|()| device::sync(self.stream))
                            } else {
                                let m = mapg.as_mut().expect("taken for K_HANDLE");
                                s.import(m, h.src as usize, &h.rec).and_then(|src| {
                                    device::copy_async(self.dst.ptr, src, n, self.stream)?;
                                    device::sync(self.stream)
                                })
                            };
                            drop(mapg);
                            // The sender may go on (told whether its data arrived).
                            shm::finish(word, h.generation, r.is_ok());
                            r
                        }
                        K_DATA => {
                            let (target, pb) = if self.dst.host() && !refused {
                                (self.dst.ptr, None)
                            } else {
                                // SAFETY: see the Send impl.
                                let pb = unsafe { (*self.pool).take(bytes, self.pinned, s.device)? };
                                (pb.ptr, Some(pb))
                            };
                            let req = irecv_bytes(s.data, target, bytes, h.src, h.ptr as i32)?;
                            self.state = RState::Data { req, pb };
                            continue;
                        }
                        k => Err(Error::Internal(format!("recv: unknown control message kind {k}"))),
                    };
                    self.state = RState::Done;
                    moved?;
                    return self.end(&h);
                }
                RState::Data { req, pb } => {
                    if !mpi_test(req)? {
                        return Ok(());
                    }
                    let h = *self.hdr;
                    let taken = pb.take();
                    let refused = self.verdict(&h).is_some();
                    let n = self.dst.bytes;
                    let r = match taken {
                        Some(b) if refused => {
                            // SAFETY: see the Send impl.
                            unsafe { (*self.pool).give(b) };
                            Ok(())
                        }
                        Some(b) => {
                            let _g = CtxGuard::enter(s.device)?;
                            let r = if self.shared && self.dst.space == Space::GPUWIRE_SPACE_DEVICE && n < device::SHARED_HTOD_2D_MAX {
                                // SAFETY: the pool buffer holds the `bytes` >= n received bytes.
                                let src = unsafe { std::slice::from_raw_parts(b.ptr as *const u8, n) };
                                device::htod_shared(self.dst.ptr, src, self.stream)
                            } else {
                                ring::copy(Loc { ptr: self.dst.ptr, host: self.dst.host() }, Loc { ptr: b.ptr, host: true }, n, self.stream)
                                    .and_then(|()| if self.dst.host() { Ok(()) } else { device::sync(self.stream) })
                            };
                            // SAFETY: see the Send impl.
                            unsafe { (*self.pool).give(b) };
                            r
                        }
                        None => Ok(()),
                    };
                    self.state = RState::Done;
                    r?;
                    return self.end(&h);
                }
            }
        }
    }

    /// Why the message in `h` is refused (its completion state and the receiver's error), or
    /// None when it is exactly this receive: its bytes always, its count and datatype in
    /// checking mode.
    fn verdict(&self, h: &Header) -> Option<(u64, Error)> {
        let bytes = h.bytes as usize;
        let theirs = crate::types::Dtype::from_c(h.dtype).map(|d| d.name()).unwrap_or("?");
        if h.check & CHECK_COMPARE != 0 && h.dtype != self.dtype as i32 {
            return Some((shm::REFUSED_DTYPE, Error::DtypeMismatch(format!(
                "recv: rank {} sent {} {theirs} elements but this receive is of {} {} elements (checking mode); nothing was received",
                h.src, h.count, self.count, self.dtype.name()
            ))));
        }
        if bytes != self.dst.bytes || (h.check & CHECK_COMPARE != 0 && h.count as usize != self.count) {
            let how = if bytes < self.dst.bytes { "shorter than" } else { "longer than" };
            return Some((shm::REFUSED_COUNT, Error::CountMismatch(format!(
                "recv: the message from rank {} (tag {}) has {bytes} bytes ({} {theirs} elements), {how} the receive buffer's {} bytes ({} {} elements); a receive takes exactly its buffer's count: the message was discarded and the buffer not written",
                h.src, h.tag, h.count, self.dst.bytes, self.count, self.dtype.name()
            ))));
        }
        None
    }

    /// The end of an inline or data message: its completion cell, when it has one (checking
    /// mode), tells the sender; then the receiver's own error, if refused.
    fn end(&self, h: &Header) -> Result<()> {
        let verdict = self.verdict(h);
        if h.check & CHECK_CELL != 0 && matches!(h.kind, K_INLINE | K_DATA) {
            // SAFETY: see the Send impl.
            let s = unsafe { &*self.ipc };
            if (h.src as usize) < s.p && (h.cell as usize) < shm::CELLS {
                let word = &s.seg.slot(h.src as usize).cells[h.cell as usize];
                // A sender that gave up (its timeout) has returned already: nothing to tell.
                if shm::claim(word, h.generation).is_ok() {
                    match &verdict {
                        Some((st, _)) => shm::refuse(word, h.generation, *st),
                        None => shm::finish(word, h.generation, true),
                    }
                }
            }
        }
        verdict.map_or(Ok(()), |(_, e)| Err(e))
    }
}

/// Waits for `done` while progressing the process's pending receives, up to the timeout. At
/// the timeout, `give_up` says whether the operation may end there (a send whose receiver
/// already claimed it may not: the wait goes on, without a deadline, until the receiver is done).
fn wait_p2p(c: &Communicator, what: &str, mut done: impl FnMut() -> Result<bool>, give_up: impl FnOnce() -> bool) -> Result<()> {
    // One deadline per gpuwire call: what is left of it.
    let r = shm::spin_until(c.remaining(), || c.is_broken(), || {
        if done()? {
            return Ok(true);
        }
        progress_all();
        Ok(false)
    })?;
    match r {
        Ok(()) => Ok(()),
        Err(stop) if !give_up() => {
            crate::trace!("ipc: {what}: {stop:?} while the receiver copies this send; waiting for it");
            shm::spin_until(None, || false, || {
                if done()? {
                    return Ok(true);
                }
                progress_all();
                Ok(false)
            })?
            .map_err(|_| Error::Internal("unbounded wait ended".into()))
        }
        Err(Stop::Broken) => {
            c.ensure_usable()?;
            Err(Error::CommBroken(format!("{what}: the communicator broke while waiting")))
        }
        Err(Stop::TimedOut) => {
            let t = c.config().timeout.map(|t| t.as_secs_f64()).unwrap_or(0.0);
            let msg = format!("{what} did not complete within the communicator's timeout of {t:.3} s (no matching call on the other rank?); the communicator is now broken");
            c.mark_broken(msg.clone());
            Err(Error::Timeout(msg))
        }
    }
}

struct IpcSend {
    op: Option<SendOp>,
    comm: *const Communicator,
}
// SAFETY: the request keeps the communicator alive; SendOp is Send.
unsafe impl Send for IpcSend {}

impl Pending for IpcSend {
    fn wait(&mut self) -> Result<()> {
        let Some(mut op) = self.op.take() else { return Ok(()) };
        // SAFETY: see the Send impl.
        let c = unsafe { &*self.comm };
        let q = op.quitter();
        let r = wait_p2p(c, "isend", || op.test(), || q.give_up());
        if r.is_err() {
            // MPI or the receiver may still use the header and data: never free them.
            std::mem::forget(op);
        }
        r
    }
    fn test(&mut self) -> Result<bool> {
        let Some(op) = self.op.as_mut() else { return Ok(true) };
        if op.test()? {
            self.op = None;
            return Ok(true);
        }
        progress_all();
        Ok(false)
    }
    fn abandon(self: Box<Self>) -> bool {
        drop(self); // see Drop: the receiver may still read the data
        false
    }
}

impl Drop for IpcSend {
    /// A send dropped before it completed (its request freed, gpuwire_finalize): its buffer may
    /// go. Gives it up, or, when its receiver is already copying from it, waits for that copy.
    fn drop(&mut self) {
        let Some(mut op) = self.op.take() else { return };
        // After the program's MPI_Finalize the segment may be gone, and MPI_Test would abort.
        if crate::runtime::mpi_finalized() {
            std::mem::forget(op);
            return;
        }
        if !op.quitter().give_up() {
            let _ = shm::spin_until(None, || false, || Ok(op.test().unwrap_or(true)));
        }
        // MPI may still use the header and data.
        std::mem::forget(op);
    }
}

struct IpcRecv {
    op: Arc<Mutex<RecvOp>>,
    comm: *const Communicator,
    finished: bool,
}
// SAFETY: as IpcSend.
unsafe impl Send for IpcRecv {}

impl Pending for IpcRecv {
    fn wait(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        // SAFETY: see the Send impl.
        let c = unsafe { &*self.comm };
        let op = self.op.clone();
        let r = wait_p2p(c, "irecv", || lock(&op).poll(), || true);
        self.finished = true;
        r
    }
    fn test(&mut self) -> Result<bool> {
        if self.finished {
            return Ok(true);
        }
        // Busy: the progress thread (or another wait) is progressing it right now.
        let done = match self.op.try_lock() {
            Ok(mut op) => op.poll()?,
            Err(TryLockError::Poisoned(p)) => p.into_inner().poll()?,
            Err(TryLockError::WouldBlock) => false,
        };
        if done {
            self.finished = true;
        } else {
            progress_all();
        }
        Ok(done)
    }
    fn abandon(self: Box<Self>) -> bool {
        drop(self); // see Drop: closed, so no thread progresses it; MPI may still write the data
        false
    }
}

impl Drop for IpcRecv {
    /// Closes the operation under its lock (so no other thread progresses it once the request's
    /// communicator and buffer may be released), keeping it alive forever when MPI may still
    /// write into its header or data (not finished: an error, or a request freed while pending).
    fn drop(&mut self) {
        let mut op = lock(&self.op);
        op.closed = true;
        if !matches!(op.state, RState::Done) {
            std::mem::forget(self.op.clone());
        }
    }
}

// ---- the path ------------------------------------------------------------------------------

/// The IPC path.
pub struct IpcPath;

impl Path for IpcPath {
    fn send(&self, c: &Communicator, buf: &Buffer, dest: i32, tag: i32, stream: Stream) -> Result<()> {
        let mut op = SendOp::start(c, buf, dest, tag, stream)?;
        let q = op.quitter();
        let r = wait_p2p(c, "send", || op.test(), || q.give_up());
        if r.is_err() {
            std::mem::forget(op);
        }
        r
    }

    fn recv(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<()> {
        let mut op = RecvOp::start(c, buf, source, tag, stream)?;
        let r = wait_p2p(c, "recv", || op.poll(), || true);
        if r.is_err() && !matches!(op.state, RState::Done) {
            std::mem::forget(op);
        }
        r
    }

    fn isend(&self, c: &Communicator, buf: &Buffer, dest: i32, tag: i32, stream: Stream) -> Result<Box<dyn Pending>> {
        let op = SendOp::start(c, buf, dest, tag, stream)?;
        Ok(Box::new(IpcSend { op: Some(op), comm: c }))
    }

    fn irecv(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<Box<dyn Pending>> {
        let op = Arc::new(Mutex::new(RecvOp::start(c, buf, source, tag, stream)?));
        register(&op);
        Ok(Box::new(IpcRecv { op, comm: c, finished: false }))
    }

    fn sendrecv(&self, c: &Communicator, send: &Buffer, dest: i32, sendtag: i32, recv: &Buffer, source: i32, recvtag: i32, stream: Stream) -> Result<()> {
        let proc_null = crate::types::PROC_NULL;
        // The receive first (a message to oneself then finds it).
        let mut r = if source == proc_null { None } else { Some(RecvOp::start(c, recv, source, recvtag, stream)?) };
        let mut w = if dest == proc_null { None } else { Some(SendOp::start(c, send, dest, sendtag, stream)?) };
        let q = w.as_ref().map(|o| o.quitter());
        // At a timeout the send part gives up, or (its receiver copying) ends first; the call
        // then fails as a whole, also when the receive part was complete.
        let give_up = || q.is_none_or(|q| q.give_up() || q.wait_finished());
        let res = wait_p2p(c, "sendrecv", || {
            let rd = match r.as_mut() {
                Some(op) => op.poll()?,
                None => true,
            };
            let sd = match w.as_mut() {
                Some(op) => op.test()?,
                None => true,
            };
            Ok(rd && sd)
        }, give_up);
        if res.is_err() {
            std::mem::forget(r);
            std::mem::forget(w);
        }
        res
    }

    fn barrier(&self, c: &Communicator, stream: Stream) -> Result<()> {
        let mut co = Coll::begin(c, "barrier", &[], stream)?;
        co.exchange([BufRecord::default(); 2]).map(|_| ())
    }

    fn bcast(&self, c: &Communicator, buf: &Buffer, root: i32, stream: Stream) -> Result<()> {
        let bytes = buf.bytes();
        let root = root as usize;
        let mut co = Coll::begin(c, "bcast", &[Some(buf)], stream)?;
        let me = co.me();
        if bytes <= SMALL {
            co.stage_in(if me == root { Some(View::of(buf)) } else { None });
            co.exchange([BufRecord::default(); 2])?;
            if me != root {
                let d = co.data(root).to_vec();
                co.deliver(View::of(buf), &d)?;
            }
            return Ok(());
        }
        let rec = co.s.export(Some(View::of(buf)));
        if co.exchange([rec, BufRecord::default()])? {
            drop(co);
            return StagedPath.bcast(c, buf, root as i32, stream);
        }
        co.lead_or_follow(|l| {
            let src = l.ptr(root, 0)?;
            for r in (0..l.co.p()).filter(|r| *r != root) {
                let d = l.ptr(r, 0)?;
                l.copy(d, src, bytes)?;
            }
            Ok(())
        })
    }

    fn reduce(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, op: ReduceOp, root: i32, stream: Stream) -> Result<()> {
        let (n, dtype) = match (send, recv) {
            (Input::Buf(b), _) => (b.count(), b.dtype()),
            (Input::InPlace, Some(r)) => (r.count(), r.dtype()),
            _ => return Err(Error::Internal("in-place reduce off the root".into())),
        };
        let bytes = n * dtype.size();
        let input = match (send, recv) {
            (Input::Buf(b), _) => View::of(b),
            (Input::InPlace, Some(r)) => View::of(r),
            _ => unreachable!(),
        };
        let root = root as usize;
        let mut co = Coll::begin(c, "reduce", &[input_buf(send), recv], stream)?;
        if bytes <= SMALL {
            co.stage_in(Some(input));
            co.exchange([BufRecord::default(); 2])?;
            if let Some(r) = recv {
                let out = host_reduce(&co, 0, n, dtype, op)?;
                co.deliver(View::of(r), &out)?;
            }
            return Ok(());
        }
        let recs = [co.s.export(Some(input)), co.s.export(recv.map(View::of))];
        if co.exchange(recs)? || !kernels_ok(c) {
            drop(co);
            return StagedPath.reduce(c, send, recv, op, root as i32, stream);
        }
        co.lead_or_follow(|l| {
            let out = l.ptr(root, 1)?;
            // The root's input is its output when in place: accumulate elsewhere unless the root
            // is rank 0 (whose input is read first).
            let acc = if root != 0 && l.same(root) { l.scratch(bytes)? } else { out };
            l.reduce_into(acc, 0, n, dtype, op)?;
            l.copy(out, acc, bytes)
        })
    }

    fn allreduce(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<()> {
        let (n, dtype, bytes) = (recv.count(), recv.dtype(), recv.bytes());
        let input = in_view(send, recv, 0, bytes);
        let mut co = Coll::begin(c, "allreduce", &[input_buf(send), Some(recv)], stream)?;
        if bytes <= SMALL {
            co.stage_in(Some(input));
            co.exchange([BufRecord::default(); 2])?;
            let out = host_reduce(&co, 0, n, dtype, op)?;
            return co.deliver(View::of(recv), &out);
        }
        let recs = [co.s.export(Some(input)), co.s.export(Some(View::of(recv)))];
        if co.exchange(recs)? || !kernels_ok(c) {
            drop(co);
            return StagedPath.allreduce(c, send, recv, op, stream);
        }
        co.lead_or_follow(|l| {
            let o0 = l.ptr(0, 1)?;
            l.reduce_into(o0, 0, n, dtype, op)?;
            for r in 1..l.co.p() {
                let o = l.ptr(r, 1)?;
                l.copy(o, o0, bytes)?;
            }
            Ok(())
        })
    }

    fn allgather(&self, c: &Communicator, send: Input, recv: &Buffer, stream: Stream) -> Result<()> {
        let p = c.size() as usize;
        let counts = vec![recv.count() / p; p];
        gatherv(c, "allgather", send, Some(recv), &counts, None, stream)
    }

    fn allgatherv(&self, c: &Communicator, send: Input, recv: &Buffer, counts: &[usize], stream: Stream) -> Result<()> {
        gatherv(c, "allgatherv", send, Some(recv), counts, None, stream)
    }

    fn reduce_scatter(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<()> {
        let Input::Buf(sb) = send else { return Err(Error::Internal("in-place reduce_scatter".into())) };
        let (m, dtype) = (recv.count(), recv.dtype());
        let mb = m * dtype.size();
        let mut co = Coll::begin(c, "reduce_scatter", &[Some(sb), Some(recv)], stream)?;
        let me = co.me();
        if sb.bytes() <= SMALL {
            co.stage_in(Some(View::of(sb)));
            co.exchange([BufRecord::default(); 2])?;
            let out = host_reduce(&co, me * mb, m, dtype, op)?;
            return co.deliver(View::of(recv), &out);
        }
        let recs = [co.s.export(Some(View::of(sb))), co.s.export(Some(View::of(recv)))];
        if co.exchange(recs)? || !kernels_ok(c) {
            drop(co);
            return StagedPath.reduce_scatter(c, send, recv, op, stream);
        }
        co.lead_or_follow(|l| {
            for r in 0..l.co.p() {
                let o = l.ptr(r, 1)?;
                l.reduce_into(o, r * mb, m, dtype, op)?;
            }
            Ok(())
        })
    }

    fn alltoall(&self, c: &Communicator, send: Input, recv: &Buffer, stream: Stream) -> Result<()> {
        let p = c.size() as usize;
        let bytes = recv.bytes();
        let kb = bytes / p;
        let input = in_view(send, recv, 0, bytes);
        let mut co = Coll::begin(c, "alltoall", &[input_buf(send), Some(recv)], stream)?;
        let me = co.me();
        if bytes <= SMALL {
            co.stage_in(Some(input));
            co.exchange([BufRecord::default(); 2])?;
            let mut out = vec![0u8; bytes];
            for q in 0..p {
                let d = co.data(q);
                if d.len() < (me + 1) * kb {
                    return Err(Error::Internal("small alltoall: a rank published less data than expected".into()));
                }
                out[q * kb..(q + 1) * kb].copy_from_slice(&d[me * kb..(me + 1) * kb]);
            }
            return co.deliver(View::of(recv), &out);
        }
        let recs = [co.s.export(Some(input)), co.s.export(Some(View::of(recv)))];
        if co.exchange(recs)? {
            drop(co);
            return StagedPath.alltoall(c, send, recv, stream);
        }
        co.lead_or_follow(|l| {
            // Inputs of in-place ranks are overwritten by the exchange: copy them aside first.
            let inplace: Vec<usize> = (0..p).filter(|r| l.same(*r)).collect();
            let tmp = if inplace.is_empty() { 0 } else { l.scratch(inplace.len() * bytes)? };
            let mut src = vec![0usize; p];
            for (q, s) in src.iter_mut().enumerate() {
                let i = l.ptr(q, 0)?;
                *s = match inplace.iter().position(|r| *r == q) {
                    Some(k) => {
                        l.copy(tmp + k * bytes, i, bytes)?;
                        tmp + k * bytes
                    }
                    None => i,
                };
            }
            for r in 0..p {
                let o = l.ptr(r, 1)?;
                for (q, s) in src.iter().enumerate() {
                    l.copy(o + q * kb, s + r * kb, kb)?;
                }
            }
            Ok(())
        })
    }

    fn gather(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, root: i32, stream: Stream) -> Result<()> {
        let p = c.size() as usize;
        let n = match (send, recv) {
            (Input::Buf(b), _) => b.count(),
            (Input::InPlace, Some(r)) => r.count() / p,
            _ => return Err(Error::Internal("in-place gather off the root".into())),
        };
        gatherv(c, "gather", send, recv, &vec![n; p], Some(root as usize), stream)
    }

    fn scatter(&self, c: &Communicator, send: Option<&Buffer>, recv: Input, root: i32, stream: Stream) -> Result<()> {
        let p = c.size() as usize;
        let root = root as usize;
        let (n, dtype) = match (recv, send) {
            (Input::Buf(b), _) => (b.count(), b.dtype()),
            (Input::InPlace, Some(s)) => (s.count() / p, s.dtype()),
            _ => return Err(Error::Internal("in-place scatter off the root".into())),
        };
        let nb = n * dtype.size();
        let me = c.rank() as usize;
        // This rank's output: its receive buffer, or its block of the root's send buffer.
        let out = match (recv, send) {
            (Input::Buf(b), _) => View::of(b),
            (Input::InPlace, Some(s)) => View::of(s).at(me * nb, nb),
            _ => unreachable!(),
        };
        let mut co = Coll::begin(c, "scatter", &[send, input_buf(recv)], stream)?;
        if p * nb <= SMALL {
            co.stage_in(send.map(View::of));
            co.exchange([BufRecord::default(); 2])?;
            if !matches!(recv, Input::InPlace) {
                let d = co.data(root);
                if d.len() < (me + 1) * nb {
                    return Err(Error::Internal("small scatter: the root published less data than expected".into()));
                }
                let mine = d[me * nb..(me + 1) * nb].to_vec();
                co.deliver(out, &mine)?;
            }
            return Ok(());
        }
        let recs = [co.s.export(send.map(View::of)), co.s.export(Some(out))];
        if co.exchange(recs)? {
            drop(co);
            return StagedPath.scatter(c, send, recv, root as i32, stream);
        }
        co.lead_or_follow(|l| {
            let src = l.ptr(root, 0)?;
            for q in 0..p {
                let o = l.ptr(q, 1)?;
                l.copy(o, src + q * nb, nb)?;
            }
            Ok(())
        })
    }
}

/// allgather(v) (root None) and gather (root Some): `counts[q]` elements from rank q, placed
/// contiguously in rank order in every rank's (or the root's) `recv`.
fn gatherv(c: &Communicator, what: &'static str, send: Input, recv: Option<&Buffer>, counts: &[usize], root: Option<usize>, stream: Stream) -> Result<()> {
    let p = c.size() as usize;
    let me = c.rank() as usize;
    let dtype = match (send, recv) {
        (Input::Buf(b), _) => b.dtype(),
        (_, Some(r)) => r.dtype(),
        _ => return Err(Error::Internal(format!("in-place {what} without a receive buffer"))),
    };
    let es = dtype.size();
    let disp: Vec<usize> = counts.iter().scan(0, |a, n| {
        let d = *a;
        *a += n;
        Some(d)
    }).collect();
    let total: usize = counts.iter().sum();
    let input = match (send, recv) {
        (Input::Buf(b), _) => View::of(b),
        (Input::InPlace, Some(r)) => View::of(r).at(disp[me] * es, counts[me] * es),
        _ => unreachable!(),
    };
    let input = View { bytes: counts[me] * es, ..input };
    let mut co = Coll::begin(c, what, &[input_buf(send), recv], stream)?;
    let largest = counts.iter().max().copied().unwrap_or(0) * es;
    if largest <= SMALL {
        co.stage_in(Some(input));
        co.exchange([BufRecord::default(); 2])?;
        if let Some(r) = recv.filter(|_| root.is_none_or(|x| x == me)) {
            let mut out = vec![0u8; total * es];
            for q in 0..p {
                let d = co.data(q);
                let b = counts[q] * es;
                if d.len() < b {
                    return Err(Error::Internal(format!("small {what}: a rank published less data than expected")));
                }
                out[disp[q] * es..disp[q] * es + b].copy_from_slice(&d[..b]);
            }
            co.deliver(View::of(r), &out)?;
        }
        return Ok(());
    }
    let recs = [co.s.export(Some(input)), co.s.export(recv.map(View::of))];
    if co.exchange(recs)? {
        drop(co);
        return match root {
            None => match recv {
                Some(r) => StagedPath.allgatherv(c, send, r, counts, stream),
                None => Err(Error::Internal(format!("{what} without a receive buffer"))),
            },
            Some(x) => StagedPath.gather(c, send, recv, x as i32, stream),
        };
    }
    co.lead_or_follow(|l| {
        let dests: Vec<usize> = match root {
            Some(x) => vec![x],
            None => (0..p).collect(),
        };
        let mut src = vec![0usize; p];
        for (q, s) in src.iter_mut().enumerate() {
            *s = l.ptr(q, 0)?;
        }
        for r in dests {
            let o = l.ptr(r, 1)?;
            for q in 0..p {
                l.copy(o + disp[q] * es, src[q], counts[q] * es)?;
            }
        }
        Ok(())
    })
}

#[allow(dead_code)]
fn _assert_sync() {
    fn is_sync<T: Sync + Send>() {}
    is_sync::<IpcState>();
}
