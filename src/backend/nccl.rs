//! NCCL: the fastest path when every rank has its own GPU.
//!
//! - Loading: libnccl is opened at run time (`GPUWIRE_NCCL_LIBRARY` if set, else `libnccl.so`,
//!   else `libnccl.so.2`, the name most installs ship); without it the backend is unavailable and
//!   says so.
//! - Bootstrap: rank 0 makes the unique id, MPI broadcasts it, every rank joins with its device.
//!   Split and dup communicators bootstrap their own NCCL communicator the same way over their
//!   MPI communicator. The initialization has a deadline ([`init_timeout`]: 60 s by default),
//!   so that a peer that never joins or a misconfigured network cannot hang communicator
//!   creation; `backend::setup` makes every rank learn of any rank's failure (NCCL requested:
//!   the error on every rank; AUTO: every rank falls back). By default the communicator is a
//!   blocking one (ncclCommInitRank, on a thread of its own that the caller waits for up to the
//!   deadline; at the deadline that thread is left behind, and aborts the communicator should
//!   the initialization ever end). With `GPUWIRE_NCCL_NONBLOCKING=1` (NCCL >= 2.18) it is a
//!   nonblocking one (ncclCommInitRankConfig, `blocking = 0`; its initialization polled with
//!   ncclCommGetAsyncError and aborted at the deadline): on the H200 (NCCL 2.28.3, 1 rank) every
//!   launch of a group (send/recv pairs) then cost ~44 us more, waiting for ncclInProgress to
//!   end (`settle`), so it is not the default.
//! - Before NCCL is called, the ranks exchange their device UUIDs over MPI: two ranks on one GPU
//!   (one UUID, whatever their host names say) make NCCL unusable (it refuses them); a requested
//!   NCCL backend then fails on every rank with the same message naming the ranks and the
//!   device, and AUTO falls back to an MPI path.
//! - Operations are enqueued on the caller's stream and return at once (asynchronous to the host,
//!   as NCCL). isend/irecv are posted, and the next other call on the communicator (or a
//!   wait/test), from any thread, launches them in one NCCL group, so a send and a receive
//!   posted together progress together (`NcclState::close_group`).
//! - What NCCL cannot do correctly is routed: complex SUM/AVG run as float SUM on a real view of
//!   twice the length; AVG is SUM then a division kernel (as on the MPI paths, so the results
//!   are the same bits); complex PROD, bitwise and logical ops, MINLOC/MAXLOC and scan/exscan
//!   (NCCL has none of them: [`reduces`]) are not NCCL's: the registry routes them to the staged
//!   MPI path of the same communicator, after [`leave`], on every rank alike (the choice depends
//!   on the operation, datatype and op only, which the ranks share).
//! - With a timeout configured every operation waits for its completion, polling
//!   ncclCommGetAsyncError; past the deadline gpuwire aborts the NCCL communicator, returns
//!   GPUWIRE_ERROR_TIMEOUT and the communicator is broken from then on.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::backend::devstate;
use crate::backend::mpi_staged;
use crate::backend::p2p::{self, Agreement};
use crate::backend::ring::{self, Loc};
use crate::backend::turn::{self, TurnLock};
use crate::backend::path::{Blocks, Input, Path};
use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::device::{self, CtxGuard, Event, Stream};
use crate::error::{Error, Result};
use crate::mpisys::{self, sys};
use crate::request::Pending;
use crate::types::{Dtype, ReduceOp};

type NcclComm = *mut c_void;

/// ncclResult_t ncclInProgress: a nonblocking communicator is completing the call in the
/// background.
const IN_PROGRESS: c_int = 7;

/// `ncclConfig_t` as NCCL 2.18 declares it (nccl.h: `size`, `magic`, `version`, `blocking`,
/// `cgaClusterSize`, `minCTAs`, `maxCTAs`, `netName`, `splitShare`). NCCL copies the first
/// `size` bytes over its own NCCL_CONFIG_INITIALIZER defaults, so later versions' further fields
/// keep their defaults; `version` tells it which of these fields the caller knew.
#[repr(C)]
struct NcclConfig {
    size: usize,
    magic: u32,
    version: u32,
    blocking: c_int,
    cga_cluster_size: c_int,
    min_ctas: c_int,
    max_ctas: c_int,
    net_name: *const c_char,
    split_share: c_int,
}

/// The NCCL version (NCCL_VERSION(2, 18, 0)) whose `ncclConfig_t` [`NcclConfig`] is; the config
/// form is used only with a library at least this new.
const CONFIG_VERSION: c_int = 21800;

impl NcclConfig {
    /// NCCL_CONFIG_INITIALIZER of NCCL 2.18 (every attribute NCCL_CONFIG_UNDEF_INT or NULL),
    /// with `blocking = 0`.
    fn nonblocking() -> NcclConfig {
        const UNDEF: c_int = c_int::MIN; // NCCL_CONFIG_UNDEF_INT
        NcclConfig {
            size: std::mem::size_of::<NcclConfig>(),
            magic: 0xcafebeef,
            version: CONFIG_VERSION as u32,
            blocking: 0,
            cga_cluster_size: UNDEF,
            min_ctas: UNDEF,
            max_ctas: UNDEF,
            net_name: std::ptr::null(),
            split_share: UNDEF,
        }
    }
}

thread_local! {
    /// This thread's open gpuwire group and its NCCL group (one thread-local: each access from
    /// the shared library costs a call): `OPEN`, the NCCL group is open ([`issue_direct`];
    /// [`with_group`] at the group's end closes it); `DEFERRED`, a point-to-point operation of
    /// the gpuwire group was recorded for its end ([`defer_direct`]).
    static DIRECT: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}
const OPEN: u8 = 1;
const DEFERRED: u8 = 2;

/// This thread exits with its gpuwire group open (`group::Open`'s drop): an NCCL group it
/// opened at the group's point-to-point calls is ended (NCCL has their operations in its
/// communicators' plans already; left there, another thread's next group would launch them),
/// and its turns at NCCL given back (`turn`), so no other thread waits for them forever. Where
/// the end answers ncclInProgress (nonblocking communicators), each of `comms` (the group's) is
/// settled first: nothing may be issued on it before.
pub fn thread_exits_in_group(comms: &[&Communicator]) {
    let d = DIRECT.with(|d| d.replace(0));
    if d & OPEN != 0 {
        if let Ok(api) = api() {
            // SAFETY: closes the group `issue_direct` opened on this thread.
            if unsafe { (api.group_end)() } == IN_PROGRESS {
                settle_all(api, comms);
            }
        }
    }
    aborts_pending(comms, false);
    turn::end_group();
    aborts_pending(comms, true);
}

/// After a group end that answered ncclInProgress: waits for each of `comms` (NCCL's) to leave
/// that state; the first error of one, else ncclSuccess.
fn settle_all(api: &Api, comms: &[&Communicator]) -> c_int {
    let mut e = 0;
    for c in comms {
        let Ok(st) = state(c) else { continue };
        // The group keeps the turns of the communicators it issued operations on; one whose
        // operation failed before it took the turn has nothing of this group in progress.
        if !st.turn.mine() {
            continue;
        }
        let s = settle(api, st.comm_turned(), IN_PROGRESS);
        if s != 0 && e == 0 {
            e = s;
        }
    }
    e
}

/// Whether this thread has `c`'s turn at NCCL (inside its group, which has issued operations on
/// it): work other threads queued on `c` since then waits for the group's end, so the group
/// must not wait for it (`group`'s drains).
pub fn holds_turn(c: &Communicator) -> bool {
    c.backend_state.get::<NcclState>().is_some_and(|st| st.turn.mine())
}

/// A point-to-point operation of this thread's gpuwire group was recorded for its end: its later
/// ones are too ([`direct_possible`]), so NCCL sees them in call order (`on` false: a new group).
pub fn defer_direct(on: bool) {
    DIRECT.with(|d| d.set(if on { d.get() | DEFERRED } else { d.get() & !DEFERRED }));
}

/// How many NCCL communicators have isend/irecv operations posted and not yet launched.
static POSTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether a point-to-point operation on `c` may be issued at its call ([`issue_direct`]): none
/// of the gpuwire group's was recorded for its end ([`defer_direct`]), and its NCCL group is
/// open already or no communicator has isend/irecv operations posted (after `c`'s own are
/// launched). Those would join the gpuwire group's NCCL group if launched inside it, so a wait
/// for them inside the gpuwire group could not return; with such operations posted, the
/// group's operations are issued at its end instead.
pub fn direct_possible(c: &Communicator) -> Result<bool> {
    match DIRECT.with(|d| d.get()) {
        OPEN => return Ok(true),
        0 => {}
        _ => return Ok(false),
    }
    state(c)?.close_group();
    Ok(POSTED.load(std::sync::atomic::Ordering::Acquire) == 0)
}

/// Whether this thread's gpuwire group has its NCCL group open ([`issue_direct`]).
pub fn direct_open() -> bool {
    DIRECT.with(|d| d.get()) & OPEN != 0
}

/// What [`issue_direct`] refuses `buf` for (a buffer on another device), checked for every buffer
/// of an operation before any of it is issued.
pub fn check_direct(c: &Communicator, buf: &Buffer) -> Result<()> {
    devstate::check_device(c, buf)
}

/// A send (`send`) or a receive of all of `buf` with `peer` issued at once, as NCCL does, into
/// the NCCL group of this thread's open gpuwire group (opened at its first such operation,
/// after `c`'s posted isend/irecv operations were launched; launched by [`with_group`] at the gpuwire
/// group's end). For the blocking and nonblocking point-to-point forms of a gpuwire group, not
/// in checking mode (which agrees each message first) and without views (packed at the end):
/// the group's host cost is then NCCL's own (issue 18's halo benchmark). The caller validated
/// the arguments (`Op::check_at_call`) and every buffer of the operation ([`check_direct`]);
/// `peer` is not GPUWIRE_PROC_NULL.
pub fn issue_direct(c: &Communicator, buf: &Buffer, peer: i32, send: bool, stream: Stream) -> Result<()> {
    let st = state(c)?;
    let api = api()?;
    let _g = CtxGuard::enter(st.device)?;
    // isend/irecv operations posted earlier come first: launched on their own before the group's
    // NCCL group opens, joining it after.
    st.close_group();
    let d = DIRECT.with(|d| d.get());
    if d & OPEN == 0 {
        // SAFETY: closed by `with_group` at the gpuwire group's end, on this thread.
        check(api, std::ptr::null_mut(), unsafe { (api.group_start)() }, "ncclGroupStart")?;
        DIRECT.with(|x| x.set(d | OPEN));
        // Turns taken from here on are kept until the group's end.
        turn::begin_group();
    }
    // The communicator's turn, this thread's until the group's end.
    let _turn = st.turn.take()?;
    let comm = st.comm_turned();
    if comm.is_null() {
        return Err(Error::CommBroken(format!("{}: the NCCL communicator was aborted", if send { "ncclSend" } else { "ncclRecv" })));
    }
    // SAFETY: device memory of the buffer's elements on `c`'s device (checked above), kept alive
    // by the group's entry until its end and by the caller until the stream has passed it.
    unsafe { send_or_recv(api, comm, buf.ptr(), buf.count(), buf.dtype(), peer, send, stream) }
}

/// One ncclSend (`send`) or ncclRecv of `count` elements of `dtype` at `ptr` with `peer` on
/// `stream`, on `comm` (whose lock the caller holds), and its outcome.
///
/// # Safety
/// `ptr` is device memory of `count` elements on the communicator's device that stays valid
/// until the stream has passed the operation.
#[allow(clippy::too_many_arguments)]
#[inline]
unsafe fn send_or_recv(api: &Api, comm: NcclComm, ptr: usize, count: usize, dtype: Dtype, peer: i32, send: bool, stream: Stream) -> Result<()> {
    let (n, d, s) = (nccl_count(dtype, count), nccl_dtype(dtype), stream.0 as *mut c_void);
    // SAFETY: as the function's contract.
    let r = unsafe { if send { (api.send)(ptr as *const c_void, n, d, peer, comm, s) } else { (api.recv)(ptr as *mut c_void, n, d, peer, comm, s) } };
    check(api, comm, r, if send { "ncclSend" } else { "ncclRecv" })
}

/// How long communicator creation waits for NCCL's initialization by default.
pub const DEFAULT_INIT_TIMEOUT: Duration = Duration::from_secs(60);

#[repr(C)]
#[derive(Clone, Copy)]
struct UniqueId {
    internal: [c_char; 128],
}

/// The NCCL entry points gpuwire uses, resolved once.
struct Api {
    _lib: libloading::Library,
    version: c_int,
    get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> c_int,
    comm_init_rank: unsafe extern "C" fn(*mut NcclComm, c_int, UniqueId, c_int) -> c_int,
    /// ncclCommInitRankConfig, resolved only from NCCL 2.18 on ([`CONFIG_VERSION`]).
    comm_init_rank_config: Option<unsafe extern "C" fn(*mut NcclComm, c_int, UniqueId, c_int, *mut NcclConfig) -> c_int>,
    /// ncclCommFinalize (NCCL >= 2.14), for nonblocking communicators.
    comm_finalize: Option<unsafe extern "C" fn(NcclComm) -> c_int>,
    comm_destroy: unsafe extern "C" fn(NcclComm) -> c_int,
    comm_abort: unsafe extern "C" fn(NcclComm) -> c_int,
    comm_get_async_error: unsafe extern "C" fn(NcclComm, *mut c_int) -> c_int,
    get_error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    get_last_error: Option<unsafe extern "C" fn(NcclComm) -> *const c_char>,
    all_reduce: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, NcclComm, *mut c_void) -> c_int,
    broadcast: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, NcclComm, *mut c_void) -> c_int,
    reduce: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, c_int, NcclComm, *mut c_void) -> c_int,
    all_gather: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, NcclComm, *mut c_void) -> c_int,
    reduce_scatter: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, NcclComm, *mut c_void) -> c_int,
    send: unsafe extern "C" fn(*const c_void, usize, c_int, c_int, NcclComm, *mut c_void) -> c_int,
    recv: unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, NcclComm, *mut c_void) -> c_int,
    group_start: unsafe extern "C" fn() -> c_int,
    group_end: unsafe extern "C" fn() -> c_int,
}

static API: OnceLock<std::result::Result<Api, String>> = OnceLock::new();

fn load() -> std::result::Result<Api, String> {
    // NCCL >= 2.22 connects peers lazily, inside the first operation that needs them, and that
    // call then blocks the host until the peer joins: no deadline could be kept. Ask for the
    // connections at initialization (which is collective anyway) unless the user chose.
    if std::env::var_os("NCCL_RUNTIME_CONNECT").is_none() {
        // SAFETY: done once, before NCCL is loaded; gpuwire reads no environment concurrently.
        unsafe { std::env::set_var("NCCL_RUNTIME_CONNECT", "0") };
    }
    let mut why = Vec::new();
    // GPUWIRE_NCCL_LIBRARY names the library to load (a path or a soname) instead of the search.
    let chosen = std::env::var("GPUWIRE_NCCL_LIBRARY").ok().filter(|v| !v.trim().is_empty());
    let names: Vec<String> = match &chosen {
        Some(v) => vec![v.trim().to_string()],
        None => vec!["libnccl.so".into(), "libnccl.so.2".into()],
    };
    for name in &names {
        // SAFETY: loading NCCL runs its (trusted) initializers.
        match unsafe { libloading::Library::new(name) } {
            Ok(lib) => return resolve(lib).map_err(|e| format!("{name}: {e}")),
            Err(e) => why.push(format!("{name}: {e}")),
        }
    }
    Err(format!("libnccl could not be loaded ({})", why.join("; ")))
}

fn resolve(lib: libloading::Library) -> std::result::Result<Api, String> {
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the symbol has the signature of the field it is stored in (nccl.h).
            *unsafe { lib.get(concat!($name, "\0").as_bytes()) }.map_err(|e| format!("missing {}: {e}", $name))?
        };
    }
    let get_version: unsafe extern "C" fn(*mut c_int) -> c_int = sym!("ncclGetVersion");
    let mut version = 0;
    // SAFETY: writes one int.
    unsafe { get_version(&mut version) };
    // SAFETY: optional symbol (NCCL >= 2.13).
    let get_last_error = unsafe { lib.get::<unsafe extern "C" fn(NcclComm) -> *const c_char>(b"ncclGetLastError\0") }.ok().map(|s| *s);
    // SAFETY: optional symbols of the signatures of nccl.h (2.18 for the config's layout).
    let (comm_init_rank_config, comm_finalize) = if version >= CONFIG_VERSION {
        unsafe {
            (
                lib.get::<unsafe extern "C" fn(*mut NcclComm, c_int, UniqueId, c_int, *mut NcclConfig) -> c_int>(b"ncclCommInitRankConfig\0").ok().map(|s| *s),
                lib.get::<unsafe extern "C" fn(NcclComm) -> c_int>(b"ncclCommFinalize\0").ok().map(|s| *s),
            )
        }
    } else {
        (None, None)
    };
    Ok(Api {
        version,
        get_unique_id: sym!("ncclGetUniqueId"),
        comm_init_rank: sym!("ncclCommInitRank"),
        comm_init_rank_config,
        comm_finalize,
        comm_destroy: sym!("ncclCommDestroy"),
        comm_abort: sym!("ncclCommAbort"),
        comm_get_async_error: sym!("ncclCommGetAsyncError"),
        get_error_string: sym!("ncclGetErrorString"),
        get_last_error,
        all_reduce: sym!("ncclAllReduce"),
        broadcast: sym!("ncclBroadcast"),
        reduce: sym!("ncclReduce"),
        all_gather: sym!("ncclAllGather"),
        reduce_scatter: sym!("ncclReduceScatter"),
        send: sym!("ncclSend"),
        recv: sym!("ncclRecv"),
        group_start: sym!("ncclGroupStart"),
        group_end: sym!("ncclGroupEnd"),
        _lib: lib,
    })
}

fn api() -> Result<&'static Api> {
    API.get_or_init(load).as_ref().map_err(|e| Error::BackendUnavailable(e.clone()))
}

/// Whether NCCL can be loaded here, and its version ("2.28.3"), or why not.
pub fn available() -> std::result::Result<String, String> {
    API.get_or_init(load).as_ref().map(|a| format!("{}.{}.{}", a.version / 10000, (a.version / 100) % 100, a.version % 100)).map_err(|e| e.clone())
}

/// The outcome of a call on `comm` that returned `r`. On a nonblocking communicator a call may
/// return ncclInProgress while NCCL completes it in the background (connecting peers, launching
/// a group); nothing may be enqueued behind it on its streams until the communicator's state
/// leaves ncclInProgress. This waits for that, as a blocking communicator waits inside the call,
/// and returns the state.
fn settle(api: &Api, comm: NcclComm, r: c_int) -> c_int {
    if r != IN_PROGRESS || comm.is_null() {
        return r;
    }
    loop {
        let mut state: c_int = IN_PROGRESS;
        // SAFETY: a valid communicator; writes one int.
        let q = unsafe { (api.comm_get_async_error)(comm, &mut state) };
        if q != 0 {
            return q;
        }
        if state != IN_PROGRESS {
            return state;
        }
        std::thread::yield_now();
    }
}

/// The outcome of an NCCL call that returned `r` on `comm` (`settle`d), as a gpuwire error with
/// NCCL's messages. The success of a call that completed (`r` = ncclSuccess) costs one compare.
#[inline]
fn check(api: &Api, comm: NcclComm, r: c_int, what: &str) -> Result<()> {
    if r == 0 { Ok(()) } else { check_outcome(api, comm, r, what) }
}

#[cold]
#[inline(never)]
fn check_outcome(api: &Api, comm: NcclComm, r: c_int, what: &str) -> Result<()> {
    let r = settle(api, comm, r);
    if r == 0 {
        return Ok(());
    }
    // SAFETY: NCCL returns static strings.
    let text = unsafe { CStr::from_ptr((api.get_error_string)(r)) }.to_string_lossy().into_owned();
    let last = match api.get_last_error {
        Some(f) if !comm.is_null() => {
            // SAFETY: as above.
            let s = unsafe { CStr::from_ptr(f(comm)) }.to_string_lossy().into_owned();
            if s.is_empty() { String::new() } else { format!(": {s}") }
        }
        _ => String::new(),
    };
    Err(Error::Nccl(format!("{what} failed: {text} (ncclResult {r}){last}")))
}

/// NCCL's datatype for `d` (complex types go as their real component type).
#[inline]
fn nccl_dtype(d: Dtype) -> c_int {
    // From a constant, not the table in memory that `nccl_dtype_by_match` compiles to (a cache
    // line per call: `crate::hot`): 4 bits per datatype code, code 0 lowest.
    const CODES: u64 = {
        let (mut v, mut i) = (0u64, 0);
        while i < Dtype::ALL.len() {
            assert!(Dtype::ALL[i] as usize == i && nccl_dtype_by_match(Dtype::ALL[i]) < 16);
            v |= (nccl_dtype_by_match(Dtype::ALL[i]) as u64) << (4 * i);
            i += 1;
        }
        v
    };
    ((CODES >> (4 * d as u32)) & 15) as c_int
}

/// `nccl_dtype`'s definition.
const fn nccl_dtype_by_match(d: Dtype) -> c_int {
    use Dtype::*;
    match d {
        GPUWIRE_INT8 => 0,
        GPUWIRE_UINT8 => 1,
        GPUWIRE_INT32 => 2,
        GPUWIRE_UINT32 => 3,
        GPUWIRE_INT64 => 4,
        GPUWIRE_UINT64 => 5,
        GPUWIRE_FLOAT16 => 6,
        GPUWIRE_FLOAT32 | GPUWIRE_COMPLEX64 => 7,
        GPUWIRE_FLOAT64 | GPUWIRE_COMPLEX128 => 8,
        GPUWIRE_BFLOAT16 => 9,
        // Moved only (their reductions are routed): two 32-bit or two 64-bit words.
        GPUWIRE_FLOAT32_INT32 | GPUWIRE_INT32_INT32 => 3,
        GPUWIRE_FLOAT64_INT32 => 5,
    }
}

/// Elements NCCL sees for `n` elements of `d` (a complex is two reals, a pair two words).
fn nccl_count(d: Dtype, n: usize) -> usize {
    if d.is_complex() || d.is_pair() { 2 * n } else { n }
}

/// Whether NCCL performs the reduction `op` on `d` itself (the registry's declaration: the
/// others go to the communicator's fallback, `backend::route`).
pub fn reduces(d: Dtype, op: ReduceOp) -> bool {
    nccl_op(d, op).is_some()
}

/// NCCL's op for a reduction it performs correctly, or None when gpuwire must route it.
#[inline]
fn nccl_op(d: Dtype, op: ReduceOp) -> Option<c_int> {
    // Tests on the codes, not a `match` on `op` (a table in memory, a cache line per call:
    // `crate::hot`): gpuwire's PROD, MAX and MIN are NCCL's 1, 2 and 3 (ncclProd, ncclMax,
    // ncclMin; the test below checks every pair).
    if op == ReduceOp::GPUWIRE_SUM || op == ReduceOp::GPUWIRE_AVG {
        Some(0) // ncclSum; AVG: SUM, then divide
    } else if (1..=3).contains(&(op as c_int)) && !d.is_complex() {
        Some(op as c_int)
    } else {
        None // complex PROD, MAX and MIN, bitwise and logical ops, MINLOC/MAXLOC
    }
}

/// Per-communicator NCCL state.
///
/// Laid out in order and aligned to a cache line, what every call reads first (in one line:
/// `crate::hot`'s reason), `open` last.
#[repr(C, align(64))]
pub struct NcclState {
    /// The NCCL communicator (null once aborted or destroyed). Changed only by a thread that
    /// has the turn and holds `comm_lock`: a thread with the turn reads it as it is
    /// ([`NcclState::comm_turned`]), others under the lock ([`NcclState::comm_locked`]).
    comm: std::sync::atomic::AtomicPtr<c_void>,
    /// Which thread makes NCCL calls on it (`turn`).
    turn: TurnLock,
    /// libnccl's entry points (loaded before the state is made).
    api: &'static Api,
    /// The primary context of `device` (retained for the life of the process).
    ctx: cudarc::driver::sys::CUcontext,
    device: i32,
    /// Made by ncclCommInitRankConfig with `blocking = 0`.
    nonblocking: bool,
    /// Whether `open` may hold a group (set under its lock when one is opened, cleared when it is
    /// taken): lets every other call skip that lock when no isend/irecv is pending.
    maybe_open: std::sync::atomic::AtomicBool,
    /// An abort waits for the end of the group that keeps the turn ([`abort`]).
    abort_pending: std::sync::atomic::AtomicBool,
    comm_lock: Mutex<()>,
    /// The isend/irecv operations posted and not yet launched, and their group; the next call
    /// on this communicator, from any thread, launches them (`close_group`).
    open: Mutex<Posted>,
}

/// How many communicators have an abort pending (their groups' ends check: [`aborts_pending`]).
static ABORTS_PENDING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

// SAFETY: the NCCL communicator is used by the thread that has the turn (NCCL allows one thread
// at a time), and polled for asynchronous errors (which NCCL allows from any thread) under
// `comm_lock`; `ctx`, a primary context retained for the life of the process, may be made
// current on any thread.
unsafe impl Send for NcclState {}
unsafe impl Sync for NcclState {}

impl std::fmt::Debug for NcclState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NcclState(device {})", self.device)
    }
}

/// A launch's outcome: each stream's completion event.
type Launched = Result<Vec<(Stream, Arc<Event>)>>;

/// A group of point-to-point operations launched together: once launched, each stream's
/// completion event (or the launch's error).
pub struct Group {
    done: Mutex<Option<Launched>>,
    /// The thread that posted its operations.
    thread: std::thread::ThreadId,
}

impl Group {
    /// After the launch of its operations on `streams`: each stream's completion event.
    fn record(&self, streams: impl Iterator<Item = Stream>) {
        let mut evs: Vec<(Stream, Arc<Event>)> = Vec::new();
        let mut r = Ok(());
        for s in streams {
            if r.is_ok() && !evs.iter().any(|(t, _)| *t == s) {
                r = Event::new().and_then(|e| e.record(s).map(|()| evs.push((s, Arc::new(e)))));
            }
        }
        *self.done.lock().unwrap_or_else(|p| p.into_inner()) = Some(r.map(|()| evs));
    }
}

/// A communicator's isend/irecv operations not yet launched, in posting order, and the group of
/// each thread that posted some (one per thread: a thread's own open NCCL group takes only its
/// own, `close_group`).
struct Posted {
    posts: Vec<Post>,
    groups: Vec<(std::thread::ThreadId, Arc<Group>)>,
}

/// An isend or irecv waiting for its group's launch.
struct Post {
    ptr: usize,
    count: usize,
    dtype: Dtype,
    peer: i32,
    send: bool,
    stream: Stream,
    /// The thread that posted it.
    thread: std::thread::ThreadId,
}

thread_local! {
    /// Groups of isend/irecv operations that joined this thread's open NCCL group (a gpuwire
    /// group's, [`with_group`]): their completion events are recorded after its end.
    static JOINED: std::cell::RefCell<Vec<(Arc<Group>, Vec<Stream>)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The NCCL state of `c` (NCCL backend only).
fn state(c: &Communicator) -> Result<&NcclState> {
    c.backend_state.get::<NcclState>().ok_or_else(|| Error::Internal("NCCL path used on a communicator without NCCL".into()))
}

impl NcclState {
    /// Collective: bootstraps the NCCL communicator over MPI. Fails (on this rank) if NCCL's
    /// initialization fails or does not complete within [`init_timeout`]; the caller agrees the
    /// outcome across ranks.
    pub fn new(c: &Communicator, device: i32) -> Result<NcclState> {
        // Any rank's failure before the bootstrap (libnccl, GPUWIRE_NCCL_INIT_TIMEOUT, its device) is
        // every rank's, so no rank waits in it alone.
        let (api, timeout, ctx) = (api(), init_timeout(c.config().timeout), crate::device::primary_context(device).and_then(|p| CtxGuard::enter_primary(p).map(|g| (p, g))));
        let mut id = UniqueId { internal: [0; 128] };
        let got = match (&api, &timeout, &ctx) {
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => Err(e.clone()),
            // SAFETY: writes the id.
            (Ok(api), Ok(_), Ok(_)) if c.rank() == 0 => check(api, std::ptr::null_mut(), unsafe { (api.get_unique_id)(&mut id) }, "ncclGetUniqueId"),
            _ => Ok(()),
        };
        c.agree_on_result(got, "making the NCCL unique id")?;
        let (api, timeout, (primary, _g)) = (api?, timeout?, ctx?);
        // SAFETY: 128 bytes from rank 0 to all.
        mpisys::check(
            unsafe { sys::MPI_Bcast(id.internal.as_mut_ptr().cast(), 128, sys::RSMPI_UINT8_T, 0, c.raw()) },
            "MPI_Bcast (NCCL unique id)",
        )?;
        let comm: NcclComm;
        let nonblocking = api.comm_init_rank_config.is_some() && nonblocking_requested();
        if let (true, Some(init)) = (nonblocking, api.comm_init_rank_config) {
            crate::trace!("nccl: ncclCommInitRankConfig (nonblocking) rank {} of {} on device {device}, deadline {timeout:?}", c.rank(), c.size());
            comm = init_nonblocking(api, init, c.size(), id, c.rank(), timeout)?;
        } else {
            crate::trace!("nccl: ncclCommInitRank rank {} of {} on device {device}, deadline {timeout:?}", c.rank(), c.size());
            comm = init_bounded(api, device, c.size(), id, c.rank(), timeout)?;
        }
        let turn = TurnLock::default();
        // The engine's drains skip what waits for this thread's group (`Engine::drain`).
        c.engine().set_turn(turn.share());
        Ok(NcclState {
            comm: std::sync::atomic::AtomicPtr::new(comm),
            comm_lock: Mutex::new(()),
            api,
            ctx: primary,
            device,
            nonblocking,
            open: Mutex::new(Posted { posts: Vec::new(), groups: Vec::new() }),
            maybe_open: std::sync::atomic::AtomicBool::new(false),
            abort_pending: std::sync::atomic::AtomicBool::new(false),
            turn,
        })
    }

    /// The NCCL communicator, for a thread that has the turn (every change of it is made with
    /// the turn: no lock needed).
    #[inline]
    fn comm_turned(&self) -> NcclComm {
        self.comm.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The NCCL communicator for a thread without the turn, locked against its abort (null
    /// once aborted).
    fn comm_locked(&self) -> (std::sync::MutexGuard<'_, ()>, NcclComm) {
        let g = self.comm_lock.lock().unwrap_or_else(|p| p.into_inner());
        (g, self.comm.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Takes the NCCL communicator out (null left), by a thread that has the turn.
    fn take_comm(&self) -> NcclComm {
        let _g = self.comm_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.comm.swap(std::ptr::null_mut(), std::sync::atomic::Ordering::AcqRel)
    }

    /// Launches the posted isend/irecv operations, if any, from whichever thread calls: one
    /// ncclGroupStart, their ncclSend/ncclRecv in posting order, one ncclGroupEnd; then records
    /// each stream's completion event in each posting thread's group. The launch is made under
    /// the `open` lock and `maybe_open` cleared only after it, so another thread's call on this
    /// communicator waits for it: the posted operations come first in stream order and in NCCL's
    /// order. Inside this thread's open NCCL group (a gpuwire group's: `DIRECT`, `IN_GROUP`)
    /// only this thread's posts are taken: they join that group and their events are recorded
    /// after its end ([`with_group`]); other threads' stay posted for their next calls. An error
    /// of the launch is the groups' requests' (their wait or test).
    #[inline]
    fn close_group(&self) {
        if self.maybe_open.load(std::sync::atomic::Ordering::Acquire) {
            self.launch_posted();
        }
    }

    /// [`Self::close_group`] with operations posted.
    #[cold]
    #[inline(never)]
    fn launch_posted(&self) {
        use std::sync::atomic::Ordering::{AcqRel, Release};
        let joins = direct_open() || IN_GROUP.with(|g| g.get());
        // The turn first, then the posts (the order every thread takes them in).
        let turn = self.turn.take();
        let mut o = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if o.posts.is_empty() {
            return;
        }
        let (posts, groups) = if joins {
            let me = std::thread::current().id();
            let Some(i) = o.groups.iter().position(|(t, _)| *t == me) else { return };
            let g = o.groups.swap_remove(i);
            let (mine, others): (Vec<Post>, Vec<Post>) = std::mem::take(&mut o.posts).into_iter().partition(|p| p.thread == me);
            o.posts = others;
            (mine, vec![g])
        } else {
            (std::mem::take(&mut o.posts), std::mem::take(&mut o.groups))
        };
        // The launch and the events in the device's context, whatever the calling thread holds.
        let ctx = CtxGuard::enter(self.device);
        // The turn held until the launch has returned (`Result::and` would drop it first, and
        // the launch reads the communicator as the turn's holder: `comm_turned`).
        let launched = match (&turn, &ctx) {
            (Ok(_), Ok(_)) => self.launch(&posts),
            (Err(e), _) | (_, Err(e)) => Err(e.clone()),
        };
        drop(turn);
        for (t, g) in groups {
            let streams = posts.iter().filter(|p| p.thread == t).map(|p| p.stream);
            match &launched {
                Ok(()) if joins => JOINED.with(|j| j.borrow_mut().push((g, streams.collect()))),
                Ok(()) => g.record(streams),
                Err(e) => *g.done.lock().unwrap_or_else(|p| p.into_inner()) = Some(Err(e.clone())),
            }
        }
        if o.posts.is_empty() {
            POSTED.fetch_sub(1, AcqRel);
            self.maybe_open.store(false, Release);
        }
    }

    /// `posts` in one NCCL group on this thread (in the device's context: `close_group`).
    fn launch(&self, posts: &[Post]) -> Result<()> {
        let api = api()?;
        // (`close_group` took the turn.)
        let comm = self.comm_turned();
        if comm.is_null() {
            return Err(Error::CommBroken("ncclSend/ncclRecv: the NCCL communicator was aborted".into()));
        }
        // SAFETY: paired with the group_end below on this thread.
        check(api, std::ptr::null_mut(), unsafe { (api.group_start)() }, "ncclGroupStart")?;
        let mut first = Ok(());
        for p in posts {
            // SAFETY: device memory of `count` elements on this communicator's device (checked at
            // the call), kept alive by the request until the stream has passed the operation.
            let r = unsafe { send_or_recv(api, comm, p.ptr, p.count, p.dtype, p.peer, p.send, p.stream) };
            if first.is_ok() {
                first = r;
            }
        }
        // SAFETY: closes the group opened above.
        let e = check(api, comm, unsafe { (api.group_end)() }, "ncclGroupEnd");
        first.and(e)
    }

    /// The async error of the NCCL communicator (ncclSuccess = 0).
    pub fn async_error(&self) -> Result<c_int> {
        let api = api()?;
        let (_g, comm) = self.comm_locked();
        let mut e: c_int = 0;
        // SAFETY: valid communicator (not aborted while the lock is held).
        check(api, comm, unsafe { (api.comm_get_async_error)(comm, &mut e) }, "ncclCommGetAsyncError")?;
        Ok(e)
    }

    /// Waits for `stream` (up to the call's deadline, polling NCCL's async error). Inside a
    /// gpuwire group ([`with_group`]) nothing is launched before the group ends: no wait then.
    #[inline]
    fn finish(&self, c: &Communicator, stream: Stream, what: &str) -> Result<()> {
        match c.config().timeout {
            None => Ok(()),
            Some(t) => self.finish_by(c, stream, what, t),
        }
    }

    /// `finish` with a timeout `t`.
    #[inline(never)]
    fn finish_by(&self, c: &Communicator, stream: Stream, what: &str, t: Duration) -> Result<()> {
        if IN_GROUP.with(|g| g.get()) {
            return Ok(());
        }
        let ev = Event::new()?;
        ev.record(stream)?;
        // One deadline per gpuwire call (`Communicator::enter`), shared with its other steps.
        wait_event(self, c, &ev, c.call_deadline().unwrap_or(Instant::now() + t), what)
    }

    /// Takes the abort marked pending on this communicator ([`abort`]), if any.
    fn take_pending_abort(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        let pending = self.abort_pending.swap(false, SeqCst);
        if pending {
            ABORTS_PENDING.fetch_sub(1, SeqCst);
        }
        pending
    }

    /// ncclCommAbort, by a thread that has the turn ([`abort`]): the communicator is not used
    /// again (its calls find it aborted).
    fn abort_now(&self) {
        if let Ok(api) = api() {
            let comm = self.take_comm();
            if !comm.is_null() {
                // SAFETY: aborting a communicator whose operations hang; never used again.
                unsafe { (api.comm_abort)(comm) };
            }
        }
    }

    /// Releases the NCCL communicator.
    pub fn destroy(&mut self, abort: bool) {
        let abort = self.take_pending_abort() || abort;
        let Ok(api) = api() else { return };
        // Posted operations are launched (or, on an aborted communicator, fail) first.
        self.close_group();
        let comm = std::mem::replace(self.comm.get_mut(), std::ptr::null_mut());
        if comm.is_null() {
            return;
        }
        let _g = CtxGuard::enter(self.device);
        // SAFETY: the communicator is not used after this. A nonblocking one is finalized first
        // (its operations flushed; ncclInProgress waited for), as NCCL asks.
        unsafe {
            if abort {
                (api.comm_abort)(comm);
            } else {
                if let (true, Some(finalize)) = (self.nonblocking, api.comm_finalize) {
                    settle(api, comm, finalize(comm));
                }
                (api.comm_destroy)(comm);
            }
        }
    }
}

thread_local! {
    /// Whether this thread is inside [`with_group`].
    static IN_GROUP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` inside one NCCL group (ncclGroupStart / ncclGroupEnd on this thread): the NCCL
/// operations `f` issues on `comms` are launched together when it returns (a gpuwire group).
/// On nonblocking NCCL communicators the end may return ncclInProgress: it then waits for each
/// of `comms` to leave that state, as a blocking communicator waits inside the call.
pub fn with_group<T>(comms: &[&Communicator], f: impl FnOnce() -> Result<T>) -> Result<T> {
    let api = api()?;
    if DIRECT.with(|d| d.replace(0)) & OPEN != 0 {
        // The gpuwire group's NCCL group is open already (`issue_direct`): `f` adds to it and
        // the end below closes it.
    } else {
        // SAFETY: paired with group_end below on this thread.
        check(api, std::ptr::null_mut(), unsafe { (api.group_start)() }, "ncclGroupStart")?;
        // The turns of the communicators `f` uses are kept until the end below.
        turn::begin_group();
    }
    let was = IN_GROUP.with(|g| g.replace(true));
    // A panic in `f` (caught at the C boundary) still ends the NCCL group and gives the turns
    // back.
    let unwinding = Unwinding { api, was, comms };
    let r = f();
    std::mem::forget(unwinding);
    IN_GROUP.with(|g| g.set(was));
    // SAFETY: closes the group opened above.
    let mut e = unsafe { (api.group_end)() };
    if e == IN_PROGRESS {
        e = settle_all(api, comms);
    }
    aborts_pending(comms, false);
    turn::end_group();
    aborts_pending(comms, true);
    let e = check(api, std::ptr::null_mut(), e, "ncclGroupEnd");
    if JOINED.with(|j| !j.borrow().is_empty()) {
        finish_joined(&e);
    }
    let v = r?;
    e?;
    Ok(v)
}

/// [`with_group`]'s end, where its `f` panicked.
struct Unwinding<'a, 'b> {
    api: &'static Api,
    was: bool,
    comms: &'a [&'b Communicator],
}

impl Drop for Unwinding<'_, '_> {
    fn drop(&mut self) {
        // SAFETY: closes the group `with_group` opened (or found open) on this thread.
        if unsafe { (self.api.group_end)() } == IN_PROGRESS {
            settle_all(self.api, self.comms);
        }
        IN_GROUP.with(|g| g.set(self.was));
        aborts_pending(self.comms, false);
        turn::end_group();
        aborts_pending(self.comms, true);
        finish_joined(&Err(Error::Internal("the group's end failed (a panic)".into())));
    }
}

/// After this thread's NCCL group ended with `launched`: the isend/irecv groups launched inside
/// it (`close_group`) complete after its end.
#[cold]
fn finish_joined(launched: &Result<()>) {
    for (g, streams) in JOINED.with(|j| std::mem::take(&mut *j.borrow_mut())) {
        match launched {
            Ok(()) => g.record(streams.into_iter()),
            Err(x) => *g.done.lock().unwrap_or_else(|p| p.into_inner()) = Some(Err(x.clone())),
        }
    }
}

/// How long communicator creation waits for NCCL's initialization: GPUWIRE_NCCL_INIT_TIMEOUT
/// (seconds; 0 = no limit) when set, else the longer of [`DEFAULT_INIT_TIMEOUT`] and the
/// communicator's timeout (`comm_timeout`). `None`: no limit.
fn init_timeout(comm_timeout: Option<Duration>) -> Result<Option<Duration>> {
    match std::env::var("GPUWIRE_NCCL_INIT_TIMEOUT") {
        Ok(v) if !v.trim().is_empty() => crate::config::nccl_init_timeout(&v),
        _ => Ok(Some(comm_timeout.map_or(DEFAULT_INIT_TIMEOUT, |t| t.max(DEFAULT_INIT_TIMEOUT)))),
    }
}

/// Whether `GPUWIRE_NCCL_NONBLOCKING=1`: NCCL communicators are made nonblocking (module doc).
fn nonblocking_requested() -> bool {
    crate::config::env_flag("GPUWIRE_NCCL_NONBLOCKING")
}

/// The blocking ncclCommInitRank on a thread of its own (in `device`'s context), waited for up
/// to `timeout`. At the deadline TIMEOUT is returned and the thread left behind: it cannot be
/// interrupted inside NCCL; should the initialization end after all, it aborts what it made.
fn init_bounded(api: &'static Api, device: i32, size: i32, id: UniqueId, rank: i32, timeout: Option<Duration>) -> Result<NcclComm> {
    let init = move || -> Result<usize> {
        let _g = CtxGuard::enter(device)?;
        let mut comm: NcclComm = std::ptr::null_mut();
        // SAFETY: every rank calls with the same id; collective.
        check(api, std::ptr::null_mut(), unsafe { (api.comm_init_rank)(&mut comm, size, id, rank) }, "ncclCommInitRank")?;
        Ok(comm as usize)
    };
    let Some(t) = timeout else { return init().map(|c| c as NcclComm) };
    let (tx, rx) = std::sync::mpsc::channel::<Result<usize>>();
    std::thread::Builder::new()
        .name("gpuwire-nccl-init".into())
        .spawn(move || {
            if let Err(std::sync::mpsc::SendError(Ok(late))) = tx.send(init()) {
                // Nobody waits any more (the deadline passed): the communicator is not used.
                // SAFETY: a communicator of ours, never handed out.
                unsafe { (api.comm_abort)(late as NcclComm) };
            }
        })
        .map_err(|e| Error::Internal(format!("could not start the NCCL initialization thread: {e}")))?;
    match rx.recv_timeout(t) {
        Ok(r) => r.map(|c| c as NcclComm),
        Err(_) => Err(Error::Timeout(format!(
            "creating the NCCL communicator did not complete within {:.3} s (a rank that never joined, or a misconfigured NCCL network?); it was given up (GPUWIRE_NCCL_INIT_TIMEOUT sets this deadline; 0 = none)",
            t.as_secs_f64()
        ))),
    }
}

/// ncclCommInitRankConfig with `blocking = 0`, then ncclCommGetAsyncError polled until the
/// initialization ends or `timeout` passes; on a failure or at the deadline the communicator is
/// aborted (ncclCommAbort) and the error returned.
fn init_nonblocking(
    api: &Api,
    init: unsafe extern "C" fn(*mut NcclComm, c_int, UniqueId, c_int, *mut NcclConfig) -> c_int,
    size: i32,
    id: UniqueId,
    rank: i32,
    timeout: Option<Duration>,
) -> Result<NcclComm> {
    let what = "ncclCommInitRankConfig";
    let mut cfg = NcclConfig::nonblocking();
    let mut comm: NcclComm = std::ptr::null_mut();
    let start = Instant::now();
    // SAFETY: every rank calls with the same id (collective); NCCL reads cfg.size bytes of cfg.
    let mut state = unsafe { init(&mut comm, size, id, rank, &mut cfg) };
    let fail = |comm: NcclComm, e: Error| {
        if !comm.is_null() {
            // SAFETY: a communicator that failed or is abandoned; never used again.
            unsafe { (api.comm_abort)(comm) };
        }
        Err(e)
    };
    loop {
        match state {
            0 => return Ok(comm),
            IN_PROGRESS if comm.is_null() => return fail(comm, Error::Nccl(format!("{what} returned ncclInProgress without a communicator"))),
            IN_PROGRESS => {}
            r => return fail(comm, check(api, comm, r, what).err().unwrap_or_else(|| Error::Nccl(format!("{what} failed")))),
        }
        if let Some(t) = timeout.filter(|t| start.elapsed() >= *t) {
            return fail(
                comm,
                Error::Timeout(format!(
                    "creating the NCCL communicator did not complete within {:.3} s (a rank that never joined, or a misconfigured NCCL network?); it was aborted (GPUWIRE_NCCL_INIT_TIMEOUT sets this deadline; 0 = none)",
                    t.as_secs_f64()
                )),
            );
        }
        std::thread::sleep(Duration::from_millis(1));
        // SAFETY: a communicator being initialized; writes one int.
        let q = unsafe { (api.comm_get_async_error)(comm, &mut state) };
        if q != 0 {
            state = q;
        }
    }
}

/// Polls an event until done, the deadline passes (abort, broken communicator), or NCCL reports
/// an asynchronous error.
fn wait_event(st: &NcclState, c: &Communicator, ev: &Event, deadline: Instant, what: &str) -> Result<()> {
    loop {
        if ev.query()? {
            return Ok(());
        }
        let e = st.async_error()?;
        if e != 0 && e != 7 {
            let api = api()?;
            let err = check(api, st.comm_locked().1, e, what).err().unwrap_or_else(|| Error::Nccl(what.into()));
            abort(st, c, format!("{what}: NCCL reported an asynchronous error: {err}"));
            return Err(err);
        }
        if Instant::now() >= deadline {
            let t = c.config().timeout.map(|t| t.as_secs_f64()).unwrap_or(0.0);
            let msg = format!("{what} did not complete within the communicator's timeout of {t:.3} s (did every rank make the matching call?); the NCCL communicator was aborted and this communicator is now broken");
            abort(st, c, msg.clone());
            return Err(Error::Timeout(msg));
        }
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
}

/// gpuwire_comm_abort on an NCCL communicator: ncclCommAbort (this rank's NCCL operations end)
/// and the communicator broken.
pub fn abort_comm(c: &Communicator, why: String) {
    match c.backend_state.get::<NcclState>() {
        Some(st) => abort(st, c, why),
        None => c.mark_broken(why),
    }
}

/// NCCL's communicators take one thread at a time, and ncclCommAbort frees the communicator:
/// where a group (this thread's or another's) keeps its turn, its NCCL group has operations on
/// it that its ncclGroupEnd still reaches, so that group's end aborts it ([`aborts_pending`]);
/// another thread's call outside a group is waited for (as its lock on the communicator was
/// before turns). The communicator is broken first (its operations' results in that group's end
/// say so: `group`).
fn abort(st: &NcclState, c: &Communicator, why: String) {
    use std::sync::atomic::Ordering::SeqCst;
    c.mark_broken(why);
    let now = |_turn: turn::Turn| {
        st.take_pending_abort();
        st.abort_now();
    };
    loop {
        match st.turn.for_abort(Duration::MAX) {
            turn::ForAbort::Now(t) => return now(t),
            turn::ForAbort::KeptByAGroup | turn::ForAbort::Busy => {
                if !st.abort_pending.swap(true, SeqCst) {
                    ABORTS_PENDING.fetch_add(1, SeqCst);
                }
                // Still kept after the mark: the group's end aborts it (before or after it gives
                // its turns back); else it was given back meanwhile, perhaps before the mark was
                // seen: made here.
                match st.turn.for_abort(Duration::ZERO) {
                    turn::ForAbort::KeptByAGroup => return,
                    turn::ForAbort::Now(t) => return now(t),
                    turn::ForAbort::Busy => {}
                }
            }
        }
    }
}

/// A group's end: the aborts of `comms` that waited for it ([`abort`]) — after its
/// ncclGroupEnd and before it gives its turns back (`after` false), and once it gave them back
/// (`after`: an abort marked between the two looks, its second look still seeing the turn kept,
/// made now with the turn). The communicators are broken already: their operations' results
/// say so (`group`).
#[inline]
fn aborts_pending(comms: &[&Communicator], after: bool) {
    if ABORTS_PENDING.load(std::sync::atomic::Ordering::SeqCst) != 0 {
        aborts_pending_now(comms, after);
    }
}

#[cold]
#[inline(never)]
fn aborts_pending_now(comms: &[&Communicator], after: bool) {
    for c in comms {
        let Ok(st) = state(c) else { continue };
        if !st.abort_pending.load(std::sync::atomic::Ordering::SeqCst) {
            continue;
        }
        let _turn = match after {
            // Only where this thread's group keeps the turn: another thread's group that keeps
            // it aborts it at its own end (the communicator's pointer is changed with the turn).
            false if !st.turn.mine() => continue,
            false => None,
            true => match st.turn.for_abort(Duration::MAX) {
                turn::ForAbort::Now(t) => Some(t),
                _ => continue,
            },
        };
        if st.take_pending_abort() {
            st.abort_now();
        }
    }
}

/// The NCCL path.
pub struct NcclPath;

struct Ctx<'a> {
    c: &'a Communicator,
    st: &'a NcclState,
    api: &'static Api,
    stream: Stream,
    _g: CtxGuard,
    /// Inside [`Ctx::group`]: the NCCL communicator, locked with the turn taken for the whole
    /// group (its calls take neither again).
    grouped: std::cell::Cell<Option<NcclComm>>,
}

#[inline]
fn enter<'a>(c: &'a Communicator, bufs: &[Option<&Buffer>], stream: Stream) -> Result<Ctx<'a>> {
    let st = state(c)?;
    for b in bufs.iter().flatten() {
        // The communicator's device, as the state keeps it (in the line that this call reads).
        devstate::check_device_of(st.device, b)?;
    }
    let g = CtxGuard::enter_primary(st.ctx)?;
    st.close_group();
    // An aborted communicator (null) is refused by `Ctx::call`, under the lock it takes anyway.
    Ok(Ctx { c, st, api: st.api, stream, _g: g, grouped: std::cell::Cell::new(None) })
}

impl Ctx<'_> {
    fn call(&self, what: &str, f: impl FnOnce(NcclComm) -> c_int) -> Result<()> {
        if let Some(comm) = self.grouped.get() {
            return self.call_on(comm, what, f);
        }
        let _turn = self.st.turn.take()?;
        self.call_on(self.st.comm_turned(), what, f)
    }
    /// `call` on `comm`, locked by the caller with the turn taken.
    #[inline]
    fn call_on(&self, comm: NcclComm, what: &str, f: impl FnOnce(NcclComm) -> c_int) -> Result<()> {
        if comm.is_null() {
            return Err(Error::CommBroken(format!("{what}: the NCCL communicator was aborted")));
        }
        let r = f(comm);
        check(self.api, comm, r, what)
    }
    #[inline]
    fn done(&self, what: &str) -> Result<()> {
        self.st.finish(self.c, self.stream, what)
    }
    fn s(&self) -> *mut c_void {
        self.stream.0 as *mut c_void
    }
    /// AVG's division (device kernel) after a SUM.
    fn divide(&self, b: &Buffer, op: ReduceOp) -> Result<()> {
        if op == ReduceOp::GPUWIRE_AVG {
            ring::divide(self.st.device, Loc { ptr: b.ptr(), host: false }, b.count(), b.dtype(), self.c.size() as usize, self.stream)?;
        }
        Ok(())
    }
    fn group<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let _turn = self.st.turn.take()?;
        // SAFETY: paired with group_end below on this thread.
        check(self.api, std::ptr::null_mut(), unsafe { (self.api.group_start)() }, "ncclGroupStart")?;
        // The turn is this thread's to the group's end (the calls inside use it: `Ctx::call`).
        let comm = self.st.comm_turned();
        self.grouped.set(Some(comm));
        let r = f();
        self.grouped.set(None);
        // SAFETY: closes the group opened above. Its ncclInProgress (nonblocking) is waited for on
        // the communicator.
        let e = check(self.api, comm, unsafe { (self.api.group_end)() }, "ncclGroupEnd");
        let v = r?;
        e?;
        Ok(v)
    }
    fn send(&self, ptr: usize, n: usize, d: Dtype, peer: i32) -> Result<()> {
        // SAFETY: device memory of n elements, kept alive by the caller until the stream passes.
        self.call("ncclSend", |c| unsafe { (self.api.send)(ptr as *const c_void, nccl_count(d, n), nccl_dtype(d), peer, c, self.s()) })
    }
    fn recv(&self, ptr: usize, n: usize, d: Dtype, peer: i32) -> Result<()> {
        // SAFETY: as above.
        self.call("ncclRecv", |c| unsafe { (self.api.recv)(ptr as *mut c_void, nccl_count(d, n), nccl_dtype(d), peer, c, self.s()) })
    }
}

/// A request of a grouped NCCL send or receive.
struct GroupedPending {
    group: Arc<Group>,
    stream: Stream,
    state: *const NcclState,
    device: i32,
    /// Checking mode: its agreement (`p2p::agree_later`) and communicator, until finished
    /// ([`GroupedPending::agreed`]).
    agreement: Option<Box<(Agreement, *const Communicator)>>,
}
// SAFETY: the NCCL state belongs to the communicator the request keeps alive.
unsafe impl Send for GroupedPending {}

impl GroupedPending {
    /// Launches the posted operations if they are not yet, then: `None` while another thread
    /// launches them (inside its gpuwire group, until that group's end), else the launch's
    /// outcome and this stream's completion event (none where the launch had no event).
    fn launched(&self) -> Result<Option<Option<Arc<Event>>>> {
        // SAFETY: see the Send impl.
        unsafe { &*self.state }.close_group();
        let done = self.group.done.lock().unwrap_or_else(|p| p.into_inner());
        match done.as_ref() {
            None => Ok(None),
            Some(Err(e)) => Err(e.clone()),
            Some(Ok(evs)) => Ok(Some(evs.iter().find(|(s, _)| *s == self.stream).map(|(_, e)| e.clone()))),
        }
    }

    /// Checking mode, once its operation is launched: whether its agreement completed
    /// (`block`: waited for, up to the communicator's timeout). A mismatch, or the timeout, is
    /// its error; its operation, launched without the peer's, would never complete: the NCCL
    /// communicator is aborted (as at a timeout: [`abort`]) and the communicator broken.
    fn agreed(&mut self, block: bool) -> Result<bool> {
        let Some(a) = self.agreement.as_mut() else { return Ok(true) };
        // SAFETY: the request keeps its communicator alive.
        let c = unsafe { &*a.1 };
        let r = match a.0.poll() {
            Ok(false) if !block => return Ok(false),
            Err(e) => Err(e),
            _ => self.agreement.take().map_or(Ok(()), |a| a.0.finish(c).and_then(|each| each.into_iter().collect())),
        };
        if let Err(e) = &r {
            // SAFETY: see the Send impl.
            abort(unsafe { &*self.state }, c, e.to_string());
        }
        r.map(|()| true)
    }

    /// [`Self::launched`]; where the launch failed, a mismatch its agreement has already found
    /// is the error instead (the cause: an operation without its match may fail to launch).
    fn launched_or_mismatch(&mut self) -> Result<Option<Option<Arc<Event>>>> {
        self.launched().or_else(|e| self.agreed(false).and(Err(e)))
    }

    /// Its operation joined this thread's open gpuwire group's NCCL group: launched at that
    /// group's end (waiting here would never return).
    fn joined_here(&self) -> bool {
        JOINED.with(|j| j.borrow().iter().any(|(g, _)| Arc::ptr_eq(g, &self.group)))
    }
}

impl Pending for GroupedPending {
    fn ready_to_wait(&self) -> Result<()> {
        if self.joined_here() {
            return Err(Error::InvalidArgument(
                "the request's NCCL send or receive was launched inside this thread's open group: it starts at the outermost gpuwire_group_end (waiting for it inside the group would never return)".into(),
            ));
        }
        if direct_open() && self.group.thread != std::thread::current().id() && self.group.done.lock().unwrap_or_else(|p| p.into_inner()).is_none() {
            return Err(Error::InvalidArgument(
                "the request's NCCL send or receive was posted by another thread and is not launched yet: its thread's next call launches it, or a call outside a group (this thread's open group cannot take it: NCCL's groups are per thread)".into(),
            ));
        }
        Ok(())
    }
    fn wait(&mut self) -> Result<()> {
        let _g = CtxGuard::enter(self.device)?;
        self.ready_to_wait()?;
        loop {
            match self.launched_or_mismatch()? {
                Some(ev) => {
                    self.agreed(true)?;
                    return ev.map_or(Ok(()), |e| e.wait_host());
                }
                None => {
                    // Another thread launches it (its gpuwire group's end, or its next call);
                    // where this thread's own open group would have to: refused.
                    self.ready_to_wait()?;
                    std::thread::sleep(Duration::from_micros(20));
                }
            }
        }
    }
    fn test(&mut self) -> Result<bool> {
        let _g = CtxGuard::enter(self.device)?;
        self.ready_to_wait()?;
        match self.launched_or_mismatch()? {
            None => Ok(false),
            Some(_) if !self.agreed(false)? => Ok(false),
            Some(None) => Ok(true),
            Some(Some(e)) => e.query(),
        }
    }
}

/// An isend or irecv of a gpuwire group's end (`with_group`, whose `Op::run` waits for it):
/// issued into the group's NCCL group, launched and stream-ordered with the group's other
/// operations, nothing for the host to wait for.
struct InGroup;

impl Pending for InGroup {
    fn wait(&mut self) -> Result<()> {
        Ok(())
    }
    fn test(&mut self) -> Result<bool> {
        Ok(true)
    }
}

/// `post` posted on `c` (launched by the next call: `NcclState::close_group`), with its
/// checking-mode agreement if any.
fn grouped(c: &Communicator, post: Post, agreement: Option<Agreement>) -> Result<Box<dyn Pending>> {
    let st = state(c)?;
    if st.comm_locked().1.is_null() {
        return Err(Error::CommBroken("the NCCL communicator was aborted".into()));
    }
    let (stream, me) = (post.stream, post.thread);
    let mut open = st.open.lock().unwrap_or_else(|p| p.into_inner());
    if open.posts.is_empty() {
        POSTED.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
    let group = match open.groups.iter().find(|(t, _)| *t == me) {
        Some((_, g)) => g.clone(),
        None => {
            let g = Arc::new(Group { done: Mutex::new(None), thread: me });
            open.groups.push((me, g.clone()));
            g
        }
    };
    open.posts.push(post);
    st.maybe_open.store(true, std::sync::atomic::Ordering::Release);
    drop(open);
    let agreement = agreement.map(|a| Box::new((a, c as *const Communicator)));
    Ok(Box::new(GroupedPending { group, stream, state: st as *const NcclState, device: st.device, agreement }))
}

/// Before a call of this communicator leaves NCCL for the fallback path (`backend::route`):
/// launches its posted isend/irecv operations, so stream order is kept.
pub fn leave(c: &Communicator) -> Result<()> {
    state(c)?.close_group();
    Ok(())
}

/// Checking mode's agreement of a blocking send or receive (`p2p::agree_peer`), made after `c`'s
/// posted isend/irecv operations were launched (as its `enter` would, a step later): the peer
/// may make the call this agreement waits for only once one of them completed.
fn agree(c: &Communicator, send: Option<(i32, Dtype, usize)>, recv: Option<(i32, Dtype, usize)>) -> Result<()> {
    if c.config().check {
        launch_posted(c)?;
    }
    p2p::agree_peer(c, send, recv)
}

/// Launches `c`'s posted isend/irecv operations now (those its next call would launch): before
/// a checking-mode agreement that the peer may answer only once one of them completed (a
/// blocking send's, `agree`; a group's, `group::agree_together`).
pub(crate) fn launch_posted(c: &Communicator) -> Result<()> {
    state(c)?.close_group();
    Ok(())
}

/// A reduction NCCL does not do reached its path (the registry routes those elsewhere).
fn not_native(what: &str, d: Dtype, op: ReduceOp) -> Error {
    Error::Internal(format!("{what} of {} with {} reached the NCCL path, which does not do it (the registry routes it to the fallback)", d.name(), op.name()))
}

fn inp<'a>(i: Input<'a>, recv: &'a Buffer) -> &'a Buffer {
    match i {
        Input::InPlace => recv,
        Input::Buf(b) => b,
    }
}

impl Path for NcclPath {
    fn send(&self, c: &Communicator, buf: &Buffer, dest: i32, _tag: i32, stream: Stream) -> Result<()> {
        // NCCL cannot detect a count or datatype mismatch (it hangs or corrupts): checking mode
        // compares them first (`agree`).
        agree(c, Some((dest, buf.dtype(), buf.count())), None)?;
        let cx = enter(c, &[Some(buf)], stream)?;
        cx.group(|| cx.send(buf.ptr(), buf.count(), buf.dtype(), dest))?;
        cx.done("ncclSend")
    }
    fn recv(&self, c: &Communicator, buf: &Buffer, source: i32, _tag: i32, stream: Stream) -> Result<()> {
        agree(c, None, Some((source, buf.dtype(), buf.count())))?;
        let cx = enter(c, &[Some(buf)], stream)?;
        cx.group(|| cx.recv(buf.ptr(), buf.count(), buf.dtype(), source))?;
        cx.done("ncclRecv")
    }
    fn isend(&self, c: &Communicator, buf: &Buffer, dest: i32, _tag: i32, stream: Stream) -> Result<Box<dyn Pending>> {
        devstate::check_device(c, buf)?;
        if IN_GROUP.with(|g| g.get()) {
            let cx = enter(c, &[Some(buf)], stream)?;
            cx.send(buf.ptr(), buf.count(), buf.dtype(), dest)?;
            return Ok(Box::new(InGroup));
        }
        let agreement = p2p::agree_later(c, (true, dest, buf.dtype(), buf.count()))?;
        grouped(c, Post { ptr: buf.ptr(), count: buf.count(), dtype: buf.dtype(), peer: dest, send: true, stream, thread: std::thread::current().id() }, agreement)
    }
    fn irecv(&self, c: &Communicator, buf: &Buffer, source: i32, _tag: i32, stream: Stream) -> Result<Box<dyn Pending>> {
        devstate::check_device(c, buf)?;
        if IN_GROUP.with(|g| g.get()) {
            let cx = enter(c, &[Some(buf)], stream)?;
            cx.recv(buf.ptr(), buf.count(), buf.dtype(), source)?;
            return Ok(Box::new(InGroup));
        }
        let agreement = p2p::agree_later(c, (false, source, buf.dtype(), buf.count()))?;
        grouped(c, Post { ptr: buf.ptr(), count: buf.count(), dtype: buf.dtype(), peer: source, send: false, stream, thread: std::thread::current().id() }, agreement)
    }
    fn sendrecv(&self, c: &Communicator, s: &Buffer, dest: i32, _st: i32, r: &Buffer, source: i32, _rt: i32, stream: Stream) -> Result<()> {
        let proc_null = crate::types::PROC_NULL;
        agree(
            c,
            (dest != proc_null).then(|| (dest, s.dtype(), s.count())),
            (source != proc_null).then(|| (source, r.dtype(), r.count())),
        )?;
        let cx = enter(c, &[Some(s), Some(r)], stream)?;
        cx.group(|| {
            if dest != proc_null {
                cx.send(s.ptr(), s.count(), s.dtype(), dest)?;
            }
            if source != proc_null {
                cx.recv(r.ptr(), r.count(), r.dtype(), source)?;
            }
            Ok(())
        })?;
        cx.done("ncclSend/ncclRecv")
    }
    fn barrier(&self, c: &Communicator, stream: Stream) -> Result<()> {
        // An MPI barrier after the stream's earlier work (NCCL has none).
        let st = state(c)?;
        st.close_group();
        let _g = CtxGuard::enter(st.device)?;
        device::sync(stream)?;
        crate::backend::host::barrier(c)
    }
    fn bcast(&self, c: &Communicator, buf: &Buffer, root: i32, stream: Stream) -> Result<()> {
        let cx = enter(c, &[Some(buf)], stream)?;
        let (d, n) = (buf.dtype(), buf.count());
        // SAFETY: device buffer of n elements on every rank.
        cx.call("ncclBroadcast", |cm| unsafe {
            (cx.api.broadcast)(buf.ptr() as *const c_void, buf.ptr() as *mut c_void, nccl_count(d, n), nccl_dtype(d), root, cm, cx.s())
        })?;
        cx.done("ncclBroadcast")
    }
    fn reduce(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, op: ReduceOp, root: i32, stream: Stream) -> Result<()> {
        let sb = match (send, recv) {
            (Input::Buf(b), _) => b,
            (Input::InPlace, Some(r)) => r,
            _ => return Err(Error::Internal("in-place reduce off the root".into())),
        };
        let (d, n) = (sb.dtype(), sb.count());
        let Some(nop) = nccl_op(d, op) else {
            return Err(not_native("reduce", d, op));
        };
        let cx = enter(c, &[Some(sb), recv], stream)?;
        let rp = recv.map_or(std::ptr::null_mut(), |r| r.ptr() as *mut c_void);
        // SAFETY: device buffers of n elements (recv at the root).
        cx.call("ncclReduce", |cm| unsafe { (cx.api.reduce)(sb.ptr() as *const c_void, rp, nccl_count(d, n), nccl_dtype(d), nop, root, cm, cx.s()) })?;
        if let Some(r) = recv {
            cx.divide(r, op)?;
        }
        cx.done("ncclReduce")
    }
    fn allreduce(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<()> {
        let sb = inp(send, recv);
        let (d, n) = (recv.dtype(), recv.count());
        let Some(nop) = nccl_op(d, op) else {
            return Err(not_native("allreduce", d, op));
        };
        let cx = enter(c, &[Some(sb), Some(recv)], stream)?;
        // SAFETY: device buffers of n elements.
        cx.call("ncclAllReduce", |cm| unsafe {
            (cx.api.all_reduce)(sb.ptr() as *const c_void, recv.ptr() as *mut c_void, nccl_count(d, n), nccl_dtype(d), nop, cm, cx.s())
        })?;
        cx.divide(recv, op)?;
        cx.done("ncclAllReduce")
    }
    fn allgather(&self, c: &Communicator, send: Input, recv: &Buffer, stream: Stream) -> Result<()> {
        let n = recv.count() / c.size() as usize;
        let d = recv.dtype();
        let sp = match send {
            Input::InPlace => recv.ptr() + c.rank() as usize * n * d.size(),
            Input::Buf(b) => b.ptr(),
        };
        let cx = enter(c, &[mpi_staged::input_buf(send), Some(recv)], stream)?;
        // SAFETY: send n elements, recv size x n (NCCL accepts the in-place layout).
        cx.call("ncclAllGather", |cm| unsafe { (cx.api.all_gather)(sp as *const c_void, recv.ptr() as *mut c_void, nccl_count(d, n), nccl_dtype(d), cm, cx.s()) })?;
        cx.done("ncclAllGather")
    }
    fn allgatherv(&self, c: &Communicator, send: Input, recv: &Buffer, counts: &[usize], stream: Stream) -> Result<()> {
        let d = recv.dtype();
        let es = d.size();
        let me = c.rank() as usize;
        let cx = enter(c, &[mpi_staged::input_buf(send), Some(recv)], stream)?;
        let mut off = 0;
        let mut offs = Vec::with_capacity(counts.len());
        for n in counts {
            offs.push(off);
            off += n;
        }
        let (sp, sn) = match send {
            Input::InPlace => (recv.ptr() + offs[me] * es, counts[me]),
            Input::Buf(b) => (b.ptr(), b.count()),
        };
        cx.group(|| {
            for (q, (&n, &o)) in counts.iter().zip(&offs).enumerate() {
                if q != me && sn > 0 {
                    cx.send(sp, sn, d, q as i32)?;
                }
                if q != me && n > 0 {
                    cx.recv(recv.ptr() + o * es, n, d, q as i32)?;
                }
            }
            Ok(())
        })?;
        if let Input::Buf(b) = send {
            ring::copy(Loc { ptr: recv.ptr() + offs[me] * es, host: false }, Loc { ptr: b.ptr(), host: b.is_host() }, b.bytes(), stream)?;
        }
        cx.done("allgatherv")
    }
    fn reduce_scatter(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<()> {
        let Input::Buf(sb) = send else { return Err(Error::Internal("in-place reduce_scatter".into())) };
        let (d, n) = (recv.dtype(), recv.count());
        let Some(nop) = nccl_op(d, op) else {
            return Err(not_native("reduce_scatter", d, op));
        };
        let cx = enter(c, &[Some(sb), Some(recv)], stream)?;
        // SAFETY: send size x n, recv n elements.
        cx.call("ncclReduceScatter", |cm| unsafe {
            (cx.api.reduce_scatter)(sb.ptr() as *const c_void, recv.ptr() as *mut c_void, nccl_count(d, n), nccl_dtype(d), nop, cm, cx.s())
        })?;
        cx.divide(recv, op)?;
        cx.done("ncclReduceScatter")
    }
    fn scan(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, exclusive: bool, stream: Stream) -> Result<()> {
        // NCCL has no scan: the registry routes it to the fallback.
        let _ = (c, send, exclusive, stream);
        Err(not_native("scan", recv.dtype(), op))
    }
    fn alltoall(&self, c: &Communicator, send: Input, recv: &Buffer, stream: Stream) -> Result<()> {
        let p = c.size() as usize;
        let d = recv.dtype();
        let k = recv.count() / p;
        let bytes = k * d.size();
        let cx = enter(c, &[mpi_staged::input_buf(send), Some(recv)], stream)?;
        // In place: send from a device copy of the input.
        let src = match send {
            Input::Buf(b) => b.ptr(),
            Input::InPlace => {
                let mut st = devstate::dev(c)?;
                let tmp = st.dev[1].get(recv.bytes())?;
                device::copy_async(tmp, recv.ptr(), recv.bytes(), stream)?;
                tmp
            }
        };
        cx.group(|| {
            for q in 0..p {
                cx.send(src + q * bytes, k, d, q as i32)?;
                cx.recv(recv.ptr() + q * bytes, k, d, q as i32)?;
            }
            Ok(())
        })?;
        cx.done("alltoall")
    }
    fn gather(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, root: i32, stream: Stream) -> Result<()> {
        let p = c.size() as usize;
        let me = c.rank() as usize;
        let (d, n) = match (send, recv) {
            (Input::Buf(b), _) => (b.dtype(), b.count()),
            (Input::InPlace, Some(r)) => (r.dtype(), r.count() / p),
            _ => return Err(Error::Internal("in-place gather off the root".into())),
        };
        let bytes = n * d.size();
        let cx = enter(c, &[mpi_staged::input_buf(send), recv], stream)?;
        cx.group(|| {
            if let Input::Buf(b) = send {
                if me as i32 != root {
                    cx.send(b.ptr(), n, d, root)?;
                }
            }
            if let Some(r) = recv {
                for q in 0..p {
                    if q != me {
                        cx.recv(r.ptr() + q * bytes, n, d, q as i32)?;
                    }
                }
            }
            Ok(())
        })?;
        if let (Input::Buf(b), Some(r)) = (send, recv) {
            ring::copy(Loc { ptr: r.ptr() + me * bytes, host: false }, Loc { ptr: b.ptr(), host: b.is_host() }, bytes, stream)?;
        }
        cx.done("gather")
    }
    fn scatter(&self, c: &Communicator, send: Option<&Buffer>, recv: Input, root: i32, stream: Stream) -> Result<()> {
        let p = c.size() as usize;
        let me = c.rank() as usize;
        let (d, n) = match (recv, send) {
            (Input::Buf(b), _) => (b.dtype(), b.count()),
            (Input::InPlace, Some(s)) => (s.dtype(), s.count() / p),
            _ => return Err(Error::Internal("in-place scatter off the root".into())),
        };
        let bytes = n * d.size();
        let cx = enter(c, &[send, mpi_staged::input_buf(recv)], stream)?;
        cx.group(|| {
            if let Some(s) = send {
                for q in 0..p {
                    if q != me {
                        cx.send(s.ptr() + q * bytes, n, d, q as i32)?;
                    }
                }
            }
            if let Input::Buf(r) = recv {
                if me as i32 != root {
                    cx.recv(r.ptr(), n, d, root)?;
                }
            }
            Ok(())
        })?;
        if let (Some(s), Input::Buf(r)) = (send, recv) {
            ring::copy(Loc { ptr: r.ptr(), host: r.is_host() }, Loc { ptr: s.ptr() + me * bytes, host: false }, bytes, stream)?;
        }
        cx.done("scatter")
    }
    /// Grouped ncclSend/ncclRecv of the non-empty blocks (as Horovod's and vLLM's alltoallv);
    /// checking mode has agreed the count matrix, which NCCL cannot check (NVIDIA/nccl#788).
    fn alltoallv(&self, c: &Communicator, send: Input, sb: Blocks, recv: &Buffer, rb: Blocks, stream: Stream) -> Result<()> {
        let d = recv.dtype();
        let es = d.size();
        let cx = enter(c, &[mpi_staged::input_buf(send), Some(recv)], stream)?;
        // In place: send from a device copy of the input.
        let src = match send {
            Input::Buf(b) => b.ptr(),
            Input::InPlace => {
                let bytes = rb.extent() * es;
                let mut st = devstate::dev(c)?;
                let tmp = st.dev[1].get(bytes)?;
                device::copy_async(tmp, recv.ptr(), bytes, stream)?;
                tmp
            }
        };
        cx.group(|| {
            for (q, n, o) in sb.each() {
                cx.send(src + o * es, n, d, q as i32)?;
            }
            for (q, n, o) in rb.each() {
                cx.recv(recv.ptr() + o * es, n, d, q as i32)?;
            }
            Ok(())
        })?;
        cx.done("alltoallv")
    }
    fn gatherv(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, rb: Option<Blocks>, root: i32, stream: Stream) -> Result<()> {
        let me = c.rank() as usize;
        let cx = enter(c, &[mpi_staged::input_buf(send), recv], stream)?;
        cx.group(|| {
            if let Input::Buf(b) = send {
                if me as i32 != root && b.count() > 0 {
                    cx.send(b.ptr(), b.count(), b.dtype(), root)?;
                }
            }
            if let (Some(r), Some(rb)) = (recv, rb) {
                for (q, n, o) in rb.each() {
                    if q != me {
                        cx.recv(r.ptr() + o * r.dtype().size(), n, r.dtype(), q as i32)?;
                    }
                }
            }
            Ok(())
        })?;
        if let (Input::Buf(b), Some(r), Some(rb)) = (send, recv, rb) {
            ring::copy(Loc { ptr: r.ptr() + rb.displs[me] * b.dtype().size(), host: false }, Loc { ptr: b.ptr(), host: b.is_host() }, b.bytes(), stream)?;
        }
        cx.done("gatherv")
    }
    fn scatterv(&self, c: &Communicator, send: Option<&Buffer>, sb: Option<Blocks>, recv: Input, root: i32, stream: Stream) -> Result<()> {
        let me = c.rank() as usize;
        let cx = enter(c, &[send, mpi_staged::input_buf(recv)], stream)?;
        cx.group(|| {
            if let (Some(s), Some(sb)) = (send, sb) {
                for (q, n, o) in sb.each() {
                    if q != me {
                        cx.send(s.ptr() + o * s.dtype().size(), n, s.dtype(), q as i32)?;
                    }
                }
            }
            if let Input::Buf(r) = recv {
                if me as i32 != root && r.count() > 0 {
                    cx.recv(r.ptr(), r.count(), r.dtype(), root)?;
                }
            }
            Ok(())
        })?;
        if let (Some(s), Some(sb), Input::Buf(r)) = (send, sb, recv) {
            ring::copy(Loc { ptr: r.ptr(), host: r.is_host() }, Loc { ptr: s.ptr() + sb.displs[me] * s.dtype().size(), host: false }, r.bytes(), stream)?;
        }
        cx.done("scatterv")
    }
    /// One ncclReduce per rank's block (to that rank), in one NCCL group: NCCL has no
    /// reduce-scatter with counts.
    fn reduce_scatterv(&self, c: &Communicator, send: Input, recv: &Buffer, counts: &[usize], op: ReduceOp, stream: Stream) -> Result<()> {
        let d = recv.dtype();
        let es = d.size();
        let Some(nop) = nccl_op(d, op) else {
            return Err(not_native("reduce_scatterv", d, op));
        };
        let me = c.rank() as usize;
        let n_me = counts[me];
        let cx = enter(c, &[mpi_staged::input_buf(send), Some(recv)], stream)?;
        let (base, out) = match send {
            Input::Buf(b) => (b.ptr(), recv.ptr()),
            // In place: this rank's result goes to a device scratch block first (its input
            // blocks are read until the group has run), then to the start of `recv`.
            Input::InPlace => (recv.ptr(), devstate::dev(c)?.dev[1].get(n_me * es)?),
        };
        cx.group(|| {
            let mut off = 0;
            for (j, &n) in counts.iter().enumerate() {
                if n > 0 {
                    let rp = if j == me { out as *mut c_void } else { std::ptr::null_mut() };
                    // SAFETY: device input of the sum of the counts; `out` holds n at the root.
                    cx.call("ncclReduce", |cm| unsafe { (cx.api.reduce)((base + off * es) as *const c_void, rp, nccl_count(d, n), nccl_dtype(d), nop, j as c_int, cm, cx.s()) })?;
                }
                off += n;
            }
            Ok(())
        })?;
        if out != recv.ptr() && n_me > 0 {
            device::copy_async(recv.ptr(), out, n_me * es, stream)?;
        }
        if op == ReduceOp::GPUWIRE_AVG && n_me > 0 {
            ring::divide(cx.st.device, Loc { ptr: recv.ptr(), host: false }, n_me, d, c.size() as usize, stream)?;
        }
        cx.done("reduce_scatterv")
    }
}

#[cfg(test)]
mod tests {
    use super::NcclConfig;
    use std::mem::{offset_of, size_of};

    #[test]
    fn config_has_the_layout_of_nccl_2_18() {
        // nccl.h 2.18 on LP64: size_t size; unsigned magic, version; int blocking,
        // cgaClusterSize, minCTAs, maxCTAs; const char *netName; int splitShare.
        assert_eq!(offset_of!(NcclConfig, size), 0);
        assert_eq!(offset_of!(NcclConfig, magic), 8);
        assert_eq!(offset_of!(NcclConfig, version), 12);
        assert_eq!(offset_of!(NcclConfig, blocking), 16);
        assert_eq!(offset_of!(NcclConfig, cga_cluster_size), 20);
        assert_eq!(offset_of!(NcclConfig, min_ctas), 24);
        assert_eq!(offset_of!(NcclConfig, max_ctas), 28);
        assert_eq!(offset_of!(NcclConfig, net_name), 32);
        assert_eq!(offset_of!(NcclConfig, split_share), 40);
        assert_eq!(size_of::<NcclConfig>(), 48);
        let c = NcclConfig::nonblocking();
        assert_eq!((c.size, c.magic, c.version, c.blocking), (48, 0xcafebeef, 21800, 0));
        assert_eq!((c.cga_cluster_size, c.min_ctas, c.max_ctas, c.split_share), (i32::MIN, i32::MIN, i32::MIN, i32::MIN));
        assert!(c.net_name.is_null());
    }

    /// The datatype and op codes read from constants (`nccl_dtype`, `nccl_op`) against nccl.h's
    /// values, written out here: ncclInt8 0, ncclUint8 1, ncclInt32 2, ncclUint32 3, ncclInt64
    /// 4, ncclUint64 5, ncclFloat16 6, ncclFloat32 7, ncclFloat64 8, ncclBfloat16 9; ncclSum 0,
    /// ncclProd 1, ncclMax 2, ncclMin 3.
    #[test]
    fn nccl_codes_of_every_datatype_and_op() {
        use crate::types::{Dtype, ReduceOp};
        // In `Dtype::ALL`'s order: complex as their component, pairs as two words.
        let dtypes = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 7, 8, 3, 5, 3];
        for (d, want) in Dtype::ALL.iter().zip(dtypes) {
            assert_eq!(super::nccl_dtype(*d), want, "{d:?}");
        }
        for d in Dtype::ALL {
            let complex = matches!(d, Dtype::GPUWIRE_COMPLEX64 | Dtype::GPUWIRE_COMPLEX128);
            for op in ReduceOp::ALL {
                let want = match op {
                    ReduceOp::GPUWIRE_SUM | ReduceOp::GPUWIRE_AVG => Some(0),
                    ReduceOp::GPUWIRE_PROD if !complex => Some(1),
                    ReduceOp::GPUWIRE_MAX if !complex => Some(2),
                    ReduceOp::GPUWIRE_MIN if !complex => Some(3),
                    _ => None,
                };
                assert_eq!(super::nccl_op(d, op), want, "{d:?} {op:?}");
            }
        }
    }
}
