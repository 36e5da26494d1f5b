//! Library lifecycle: who owns MPI, the thread level, gpuwire's own MPI operations, finalize.
//!
//! `init` adopts an MPI the host program initialized (and then never finalizes it), or
//! initializes MPI itself asking for MPI_THREAD_MULTIPLE. `finalize` invalidates every handle,
//! has gpuwire's objects freed (by `ffi::lifecycle`, which knows them: nothing here imports the
//! layers above MPI), frees gpuwire's MPI operations, and finalizes MPI only if gpuwire
//! initialized it.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::error::{Error, Result};
use crate::hot::PROCESS;
use crate::mpisys::{self, RawOp, sys};
use crate::types::{Dtype, ReduceOp, ThreadLevel};

const UNINIT: u8 = 0;
const READY: u8 = 1;
const FINALIZED: u8 = 2;

// The state, UNINIT, READY or FINALIZED, is `hot::PROCESS.state`.
static INFO: OnceLock<RuntimeInfo> = OnceLock::new();
static LIFECYCLE: Mutex<()> = Mutex::new(());
// `PROCESS.mpi_gone`: set by MPI itself when MPI_Finalize starts (see `watch_finalize`): one
// atomic load per call instead of an MPI_Finalized call (which takes a lock in Open MPI) on
// every operation.
/// MPI provides MPI_THREAD_SERIALIZED: gpuwire's MPI calls hold `MPI_LOCK` (`mpi_lock`).
static SERIALIZED: AtomicBool = AtomicBool::new(false);
static MPI_LOCK: Mutex<()> = Mutex::new(());
// `PROCESS.main_only`: MPI provides MPI_THREAD_FUNNELED or MPI_THREAD_SINGLE: only MPI's main
// thread (the one that called gpuwire_init, checked there) may call gpuwire (`ensure_ready`).
static MAIN_THREAD: OnceLock<std::thread::ThreadId> = OnceLock::new();

thread_local! {
    /// Whether this thread is `MAIN_THREAD` (0 = not known yet, 1 = yes, 2 = no).
    static IS_MAIN: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// Whether gpuwire must serialize its own MPI calls (MPI_THREAD_SERIALIZED).
pub fn serialized() -> bool {
    SERIALIZED.load(Ordering::Relaxed)
}

/// Under MPI_THREAD_SERIALIZED, gpuwire's process-wide MPI lock, held around each of its MPI
/// calls (blocking calls then run as their nonblocking form and a test loop that takes the
/// lock for each test: a lock held across a blocking call could deadlock two threads of one
/// rank); `None` at other thread levels.
pub fn mpi_lock() -> Option<std::sync::MutexGuard<'static, ()>> {
    if serialized() { Some(MPI_LOCK.lock().unwrap_or_else(|p| p.into_inner())) } else { None }
}

/// [`mpi_lock`] where it is free: `None` when this or another thread holds it (the caller then
/// makes no MPI call), `Some(None)` at the other thread levels.
pub fn try_mpi_lock() -> Option<Option<std::sync::MutexGuard<'static, ()>>> {
    if !serialized() {
        return Some(None);
    }
    match MPI_LOCK.try_lock() {
        Ok(g) => Some(Some(g)),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(Some(p.into_inner())),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// Lets MPI progress this process's operations in flight (MPI_Iprobe on MPI_COMM_SELF, where
/// gpuwire sends nothing: it matches no message and leaves any alone). For gpuwire's waits that
/// make no MPI call (the IPC backend's waits on shared memory): a send in flight there, such as
/// an isend of host memory on an IPC communicator, may need its sender inside MPI to move (Open
/// MPI's shared-memory transport without single-copy support copies it through fragments that
/// the sender writes), and a peer waiting for it would wait for ever, where inside a real MPI
/// call it completes. Does nothing when another thread holds gpuwire's MPI lock
/// (MPI_THREAD_SERIALIZED), or outside MPI_Init .. MPI_Finalize.
pub fn poke_progress() {
    let Some(_mpi) = try_mpi_lock() else { return };
    let mut initialized: c_int = 0;
    // SAFETY: may be called at any time.
    unsafe { sys::MPI_Initialized(&mut initialized) };
    if initialized == 0 || mpisys::finalized() {
        return;
    }
    let mut flag: c_int = 0;
    // SAFETY: plain out-parameters; MPI_COMM_SELF is always valid before MPI_Finalize.
    let mut status: sys::MPI_Status = unsafe { std::mem::zeroed() };
    // An error is no reason to fail the wait: the operations it moves report their own.
    let _ = unsafe { sys::MPI_Iprobe(mpisys::any_source(), mpisys::any_tag(), sys::RSMPI_COMM_SELF, &mut flag, &mut status) };
}

/// Under MPI_THREAD_FUNNELED or SINGLE, refuses a call from a thread other than MPI's main
/// thread: MPI would abort (or corrupt its state) on that thread's MPI calls.
fn check_thread(level: ThreadLevel) -> Result<()> {
    let main = IS_MAIN.with(|m| {
        if m.get() == 0 {
            let yes = MAIN_THREAD.get().is_some_and(|t| *t == std::thread::current().id());
            m.set(if yes { 1 } else { 2 });
        }
        m.get() == 1
    });
    if main {
        return Ok(());
    }
    Err(Error::InvalidArgument(format!(
        "MPI was initialized with {}, which allows MPI calls from MPI's main thread only, and this is another thread: call gpuwire from the thread that initialized MPI (and gpuwire), or initialize MPI with MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE (MPI_Init_thread)",
        level.name()
    )))
}

/// What finishes gpuwire's MPI work when MPI_Finalize begins (`init`'s argument).
static AT_MPI_FINALIZE: OnceLock<fn()> = OnceLock::new();

/// MPI_COMM_SELF's attribute, deleted by MPI at the start of MPI_Finalize (the program's, or
/// gpuwire_finalize's): MPI still works here. `init`'s `at_mpi_finalize` runs first
/// (`ffi::lifecycle`: operations queued on progress engines run, the progress thread stops; at
/// gpuwire_finalize's own MPI_Finalize nothing is left). Without it an engine was inside MPI
/// while MPI_Finalize tore MPI down (a segfault in 1 to 2 of 10 runs of a program that queued a
/// nonblocking barrier and allreduce, then called MPI_Finalize without gpuwire_finalize), or
/// skipped its queued collective on one rank and not on another. Then no gpuwire call makes an
/// MPI call any more (`mpi_gone`).
unsafe extern "C" fn finalize_started(_c: sys::MPI_Comm, _k: c_int, _v: *mut c_void, _x: *mut c_void) -> c_int {
    if let Some(f) = AT_MPI_FINALIZE.get() {
        // No panic may unwind into MPI.
        let _ = std::panic::catch_unwind(f);
    }
    PROCESS.mpi_gone.store(true, Ordering::Release);
    0
}

unsafe extern "C" fn no_copy(_c: sys::MPI_Comm, _k: c_int, _x: *mut c_void, _i: *mut c_void, _o: *mut c_void, flag: *mut c_int) -> c_int {
    // SAFETY: MPI passes a valid flag pointer; 0 = the attribute is not copied to duplicates.
    unsafe { *flag = 0 };
    0
}

/// MPI deletes the attributes of MPI_COMM_SELF first thing in MPI_Finalize (MPI standard,
/// "Allowing User Functions at Process Termination"): an attribute there tells gpuwire when the
/// program finalizes MPI under it.
fn watch_finalize() -> Result<()> {
    let mut key: c_int = 0;
    // SAFETY: valid callbacks with the MPI signatures; the attribute value is unused.
    unsafe {
        mpisys::check(sys::MPI_Comm_create_keyval(Some(no_copy), Some(finalize_started), &mut key, std::ptr::null_mut()), "MPI_Comm_create_keyval")?;
        mpisys::check(sys::MPI_Comm_set_attr(sys::RSMPI_COMM_SELF, key, std::ptr::null_mut()), "MPI_Comm_set_attr(MPI_COMM_SELF)")
    }
}

/// Facts recorded at `init`.
#[derive(Debug)]
pub struct RuntimeInfo {
    /// gpuwire called MPI_Init_thread (and so will call MPI_Finalize).
    pub owns_mpi: bool,
    /// Thread level MPI provides.
    pub thread_level: ThreadLevel,
    /// MPI_Get_library_version, first line.
    pub mpi_library: String,
    /// MPI_TAG_UB.
    pub tag_ub: i32,
    /// User-defined MPI operations for float16/bfloat16 x SUM/PROD/MAX/MIN.
    half_ops: [[RawOp; 4]; 2],
    /// gpuwire's own MPI operations, one per base operation (index `ReduceOp as usize`; AVG's
    /// slot holds a second SUM), on every datatype but float16/bfloat16.
    own_ops: [RawOp; 13],
    /// `own[dtype][op]`: this MPI's predefined operation differs from `reduce::combine` (found at
    /// init by `probe_builtin_ops`), so gpuwire's own operation is used instead.
    own: [[bool; 13]; 15],
    /// MPICH before 4.1: MPI_Reduce with MPI_IN_PLACE at a non-zero root crashes
    /// (pmodels/mpich#6540, fixed in 4.1 by #6543).
    pub reduce_in_place_root_broken: bool,
}

/// Fails unless `init` ran and `finalize` did not.
#[inline]
pub fn ensure_ready() -> Result<&'static RuntimeInfo> {
    // Every call's case, inlined at each of its several checks per operation.
    if open() {
        if let Some(info) = INFO.get() {
            return Ok(info);
        }
    }
    ensure_ready_slow()
}

/// MPI_TAG_UB, once `ensure_ready` or `check_ready` succeeded (`RuntimeInfo::tag_ub`, kept in
/// `hot::PROCESS`).
#[inline]
pub fn tag_ub() -> i32 {
    PROCESS.tag_ub.load(Ordering::Relaxed)
}

/// `ensure_ready` for a caller that needs no `RuntimeInfo`: its common case reads one cache
/// line (`hot::PROCESS`), not `INFO`'s too.
#[inline]
pub fn check_ready() -> Result<()> {
    if open() {
        return Ok(());
    }
    ensure_ready_slow().map(|_| ())
}

/// The common case of `ensure_ready`: ready, MPI not finalized, any thread may call.
#[inline(always)]
fn open() -> bool {
    PROCESS.state.load(Ordering::Acquire) == READY && !PROCESS.mpi_gone.load(Ordering::Acquire) && !PROCESS.main_only.load(Ordering::Relaxed)
}

#[cold]
#[inline(never)]
fn ensure_ready_slow() -> Result<&'static RuntimeInfo> {
    match PROCESS.state.load(Ordering::Acquire) {
        // A program that initialized MPI itself may have finalized it under gpuwire's feet: any
        // MPI call now would abort the process.
        READY if PROCESS.mpi_gone.load(Ordering::Acquire) => Err(Error::AlreadyFinalized(
            "the program called MPI_Finalize; gpuwire can make no MPI call any more (call gpuwire_finalize before MPI_Finalize)".into(),
        )),
        READY => {
            let info = INFO.get().expect("INFO is set before READY");
            if PROCESS.main_only.load(Ordering::Relaxed) {
                check_thread(info.thread_level)?;
            }
            Ok(info)
        }
        UNINIT => Err(Error::NotInitialized("call gpuwire_init before any other gpuwire function that takes or makes a handle".into())),
        _ => Err(Error::AlreadyFinalized("gpuwire_finalize was called; no gpuwire handle is valid any more".into())),
    }
}

/// Whether `init` ran and `finalize` did not.
pub fn is_ready() -> bool {
    PROCESS.state.load(Ordering::Acquire) == READY
}

fn thread_level_from_mpi(provided: c_int) -> ThreadLevel {
    // SAFETY: reading constants.
    unsafe {
        if provided == sys::RSMPI_THREAD_MULTIPLE {
            ThreadLevel::GPUWIRE_THREAD_MULTIPLE
        } else if provided == sys::RSMPI_THREAD_SERIALIZED {
            ThreadLevel::GPUWIRE_THREAD_SERIALIZED
        } else if provided == sys::RSMPI_THREAD_FUNNELED {
            ThreadLevel::GPUWIRE_THREAD_FUNNELED
        } else {
            ThreadLevel::GPUWIRE_THREAD_SINGLE
        }
    }
}

fn library_version() -> String {
    let mut buf = vec![0u8; 8192];
    let mut len: c_int = 0;
    // SAFETY: MPI_MAX_LIBRARY_VERSION_STRING is 256 (Open MPI) or 8192 (MPICH).
    let rc = unsafe { sys::MPI_Get_library_version(buf.as_mut_ptr().cast(), &mut len) };
    if rc != 0 || len <= 0 {
        return "unknown MPI".into();
    }
    buf.truncate(len as usize);
    let s = String::from_utf8_lossy(&buf).replace(['\0', '\t'], " ");
    // "Open MPI v4.1.4, package: ..." or "MPICH Version: 4.0.2\n...": the first line, first clause.
    let first = s.lines().next().unwrap_or("").split(',').next().unwrap_or("").trim();
    let first = first.replace("Version:", "").split_whitespace().collect::<Vec<_>>().join(" ");
    if first.is_empty() { "unknown MPI".into() } else { first }
}

/// gpuwire_init. `at_mpi_finalize` runs when MPI_Finalize begins, while MPI still works (see
/// `finalize_started`).
pub fn init(at_mpi_finalize: fn()) -> Result<()> {
    let _guard = LIFECYCLE.lock().unwrap_or_else(|p| p.into_inner());
    let _ = AT_MPI_FINALIZE.set(at_mpi_finalize);
    match PROCESS.state.load(Ordering::Acquire) {
        READY => return Ok(()),
        FINALIZED => {
            return Err(Error::AlreadyFinalized(
                "gpuwire_init after gpuwire_finalize: gpuwire cannot be initialized twice in one process".into(),
            ));
        }
        _ => {}
    }
    let mut initialized: c_int = 0;
    let mut finalized: c_int = 0;
    // SAFETY: both may be called at any time.
    unsafe {
        mpisys::check(sys::MPI_Initialized(&mut initialized), "MPI_Initialized")?;
        mpisys::check(sys::MPI_Finalized(&mut finalized), "MPI_Finalized")?;
    }
    if finalized != 0 {
        return Err(Error::AlreadyFinalized("MPI was already finalized by the program; gpuwire cannot use it".into()));
    }
    check_mpi_flavour()?;
    let owns_mpi = initialized == 0;
    let mut provided: c_int = 0;
    if owns_mpi {
        // SAFETY: MPI is not initialized; NULL argc/argv are allowed.
        let rc = unsafe {
            sys::MPI_Init_thread(std::ptr::null_mut(), std::ptr::null_mut(), sys::RSMPI_THREAD_MULTIPLE, &mut provided)
        };
        mpisys::check(rc, "MPI_Init_thread")?;
    } else {
        // SAFETY: MPI is initialized.
        mpisys::check(unsafe { sys::MPI_Query_thread(&mut provided) }, "MPI_Query_thread")?;
    }
    let level = thread_level_from_mpi(provided);
    if matches!(level, ThreadLevel::GPUWIRE_THREAD_SINGLE | ThreadLevel::GPUWIRE_THREAD_FUNNELED) {
        let mut main: c_int = 0;
        // SAFETY: MPI is initialized; may be called from any thread.
        mpisys::check(unsafe { sys::MPI_Is_thread_main(&mut main) }, "MPI_Is_thread_main")?;
        if main == 0 {
            return Err(Error::InvalidArgument(format!(
                "MPI was initialized with {}, which allows MPI calls from MPI's main thread only, and gpuwire_init was called from another thread: call it from the thread that initialized MPI, or initialize MPI with MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE",
                level.name()
            )));
        }
        let _ = MAIN_THREAD.set(std::thread::current().id());
        PROCESS.main_only.store(true, Ordering::Relaxed);
    }
    SERIALIZED.store(level == ThreadLevel::GPUWIRE_THREAD_SERIALIZED, Ordering::Relaxed);
    watch_finalize()?;
    let half_ops = create_half_ops()?;
    let own_ops = create_ops(&[own_sum, own_prod, own_max, own_min, own_sum, own_band, own_bor, own_bxor, own_land, own_lor, own_lxor, own_minloc, own_maxloc])?;
    let own = probe_builtin_ops();
    let mpi_library = library_version();
    let info = RuntimeInfo {
        owns_mpi,
        thread_level: level,
        reduce_in_place_root_broken: mpich_before(&mpi_library, (4, 1)),
        mpi_library,
        tag_ub: mpisys::tag_ub(),
        half_ops,
        own_ops: std::array::from_fn(|i| own_ops[i]),
        own,
    };
    // INFO can only be set once per process; a process initializes gpuwire once.
    crate::trace!("init: MPI {} ({}), owns MPI: {owns_mpi}, thread level {}", info.mpi_library, if owns_mpi { "initialized by gpuwire" } else { "adopted" }, info.thread_level.name());
    let replaced: Vec<String> = Dtype::ALL
        .iter()
        .flat_map(|d| ReduceOp::ALL.iter().filter(|o| info.own[*d as usize][**o as usize]).map(move |o| format!("{} {}", d.name(), o.name())))
        .collect();
    crate::trace!("init: gpuwire's own MPI operations for {} (the MPI's own differ from gpuwire's semantics); in-place reduce at a non-zero root {}", if replaced.is_empty() { "none".into() } else { replaced.join(", ") }, if info.reduce_in_place_root_broken { "avoided (MPICH before 4.1)" } else { "passed to MPI" });
    PROCESS.tag_ub.store(info.tag_ub, Ordering::Relaxed);
    // MPI's constants read once here, so the per-call line is written before any call.
    let _ = (mpisys::proc_null(), mpisys::any_source(), mpisys::any_tag());
    INFO.set(info).map_err(|_| Error::Internal("runtime info set twice".into()))?;
    PROCESS.state.store(READY, Ordering::Release);
    Ok(())
}

unsafe extern "C" {
    fn gpuwire_shim_mpi_flavour() -> c_int;
}

/// The MPI that answers at run time must be the one gpuwire was compiled against: a program
/// built with another MPI's compiler wrapper would otherwise crash inside MPI.
fn check_mpi_flavour() -> Result<()> {
    // SAFETY: returns a compile-time constant.
    let built = match unsafe { gpuwire_shim_mpi_flavour() } {
        1 => "Open MPI",
        2 => "MPICH",
        _ => return Ok(()),
    };
    let running = library_version();
    let other = if built == "Open MPI" { "MPICH" } else { "Open MPI" };
    if running.contains(other) && !running.contains(built) {
        return Err(Error::Mpi(format!(
            "gpuwire was built against {built} but the program runs with {running}: build the program with {built}'s compiler wrapper (or gpuwire with MPICC set to the program's MPI)"
        )));
    }
    Ok(())
}

/// gpuwire_finalize: `drain` finishes what still needs MPI and the handles, then every handle is
/// invalidated, `release` frees gpuwire's objects (`ffi::lifecycle`, which knows them), and MPI's
/// part follows; then `release`'s error, if any (requests still in flight), is returned.
pub fn finalize(drain: impl FnOnce(), release: impl FnOnce() -> Result<()>) -> Result<()> {
    let _guard = LIFECYCLE.lock().unwrap_or_else(|p| p.into_inner());
    let info = ensure_ready()?;
    drain();
    // Invalidate every handle first; then objects release their MPI resources as their last
    // reference drops (here, unless an operation on another thread still holds one).
    PROCESS.state.store(FINALIZED, Ordering::Release);
    // Its error (requests still in flight) is returned once MPI is finalized.
    let released = release();
    let mut finalized: c_int = 0;
    // SAFETY: may be called at any time.
    unsafe { mpisys::check(sys::MPI_Finalized(&mut finalized), "MPI_Finalized")? };
    if finalized != 0 {
        return released; // the program finalized MPI already; nothing of ours is left to free
    }
    for op in info.half_ops.iter().flatten().chain(info.own_ops.iter()) {
        let mut o = op.0;
        // SAFETY: created by MPI_Op_create in init and freed only here.
        unsafe { sys::MPI_Op_free(&mut o) };
    }
    if info.owns_mpi {
        // SAFETY: gpuwire initialized MPI and nothing of gpuwire uses it any more.
        mpisys::check(unsafe { sys::MPI_Finalize() }, "MPI_Finalize")?;
    }
    released
}

/// Whether gpuwire initialized MPI (and finalizes it at gpuwire_finalize); readable after
/// gpuwire_finalize too. False before gpuwire_init.
pub fn owns_mpi() -> bool {
    INFO.get().is_some_and(|i| i.owns_mpi)
}

/// Whether MPI is finalized (objects check this before freeing MPI handles in `Drop`).
pub fn mpi_finalized() -> bool {
    mpisys::finalized()
}

const HALF_BASE_OPS: [ReduceOp; 4] = [ReduceOp::GPUWIRE_SUM, ReduceOp::GPUWIRE_PROD, ReduceOp::GPUWIRE_MAX, ReduceOp::GPUWIRE_MIN];

macro_rules! user_fn {
    ($name:ident, $dtype:expr, $op:expr) => {
        unsafe extern "C" fn $name(invec: *mut c_void, inoutvec: *mut c_void, len: *mut c_int, _dt: *mut sys::MPI_Datatype) {
            // A panic must not unwind into MPI; the combination is always supported here.
            let _ = std::panic::catch_unwind(|| {
                // SAFETY: MPI passes `*len` elements of the operation's datatype in both vectors.
                let n = unsafe { *len } as usize;
                let _ = unsafe { crate::reduce::combine($dtype, $op, inoutvec.cast(), invec.cast(), n) };
            });
        }
    };
}
user_fn!(f16_sum, Dtype::GPUWIRE_FLOAT16, ReduceOp::GPUWIRE_SUM);
user_fn!(f16_prod, Dtype::GPUWIRE_FLOAT16, ReduceOp::GPUWIRE_PROD);
user_fn!(f16_max, Dtype::GPUWIRE_FLOAT16, ReduceOp::GPUWIRE_MAX);
user_fn!(f16_min, Dtype::GPUWIRE_FLOAT16, ReduceOp::GPUWIRE_MIN);
user_fn!(bf16_sum, Dtype::GPUWIRE_BFLOAT16, ReduceOp::GPUWIRE_SUM);
user_fn!(bf16_prod, Dtype::GPUWIRE_BFLOAT16, ReduceOp::GPUWIRE_PROD);
user_fn!(bf16_max, Dtype::GPUWIRE_BFLOAT16, ReduceOp::GPUWIRE_MAX);
user_fn!(bf16_min, Dtype::GPUWIRE_BFLOAT16, ReduceOp::GPUWIRE_MIN);

/// gpuwire's own operation `$op` on any datatype with an MPI type of its own (not float16 and
/// bfloat16, which share MPI_UINT16_T and have their own `user_fn!`s): the datatype is found from
/// the MPI datatype that MPI passes.
macro_rules! own_fn {
    ($name:ident, $op:expr) => {
        unsafe extern "C" fn $name(invec: *mut c_void, inoutvec: *mut c_void, len: *mut c_int, dt: *mut sys::MPI_Datatype) {
            let _ = std::panic::catch_unwind(|| {
                // SAFETY: MPI passes its datatype and `*len` elements of it in both vectors.
                let (n, dt) = unsafe { (*len as usize, *dt) };
                if let Some(d) = Dtype::ALL.iter().copied().find(|d| !d.is_half() && mpisys::reduce_datatype(*d) == dt) {
                    let _ = unsafe { crate::reduce::combine(d, $op, inoutvec.cast(), invec.cast(), n) };
                }
            });
        }
    };
}
own_fn!(own_sum, ReduceOp::GPUWIRE_SUM);
own_fn!(own_prod, ReduceOp::GPUWIRE_PROD);
own_fn!(own_max, ReduceOp::GPUWIRE_MAX);
own_fn!(own_min, ReduceOp::GPUWIRE_MIN);
own_fn!(own_band, ReduceOp::GPUWIRE_BAND);
own_fn!(own_bor, ReduceOp::GPUWIRE_BOR);
own_fn!(own_bxor, ReduceOp::GPUWIRE_BXOR);
own_fn!(own_land, ReduceOp::GPUWIRE_LAND);
own_fn!(own_lor, ReduceOp::GPUWIRE_LOR);
own_fn!(own_lxor, ReduceOp::GPUWIRE_LXOR);
own_fn!(own_minloc, ReduceOp::GPUWIRE_MINLOC);
own_fn!(own_maxloc, ReduceOp::GPUWIRE_MAXLOC);

/// Elements of each probe vector: longer than the MPIs' vector loops (AVX-512 holds 64 bytes)
/// and not a multiple of a vector, so both the vector part and the tail are probed.
const PROBE_N: usize = 259;

/// Probe data for element `i` of `d`, `variant` 0 or 1 (the two operands): integers that
/// overflow SUM and PROD (200 for uint8, 100 for int8, above half the range for wider types),
/// 0xF0../0x0F.. patterns that order differently signed and unsigned, the signed extremes and
/// pseudo-random bits; exact small reals (no NaN: MPI does not define MIN/MAX on NaN).
fn probe_elem(d: Dtype, i: usize, variant: usize, out: &mut [u8]) {
    let size = out.len();
    if d.is_integer() {
        let bits = 8 * size as u32;
        let m = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
        let rep = |b: u8| u64::from_ne_bytes([b; 8]) & m;
        let top = 1u64 << (bits - 1);
        let v = variant as u64;
        let x = match i % 8 {
            0 if bits == 8 => if d == Dtype::GPUWIRE_UINT8 { 200 } else { 100 },
            0 => top / 2 + 100 + v,
            1 => rep(0xF0) ^ v,
            2 => rep(0x0F) ^ v,
            3 => if variant == 0 { rep(0xF0) } else { rep(0x0F) },
            4 => if variant == 0 { rep(0x0F) } else { rep(0xF0) },
            5 => top + v,
            6 => top - 1 - v,
            _ => (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(v.wrapping_mul(0xD1B5_4A32_D192_ED03)).rotate_left(29),
        } & m;
        out.copy_from_slice(&x.to_ne_bytes()[..size]);
    } else if d.is_pair() {
        // Every third element ties (both operands' values equal), with indices in either
        // order, so ties are decided by the index both ways; the others differ.
        let v = if i % 3 == 0 { ((i / 3) % 5) as f64 - 2.0 } else { ((i * 7 + variant * 3) % 5) as f64 - 2.0 };
        let idx = ((i as i32).wrapping_mul(37) ^ (variant as i32 * 11)) % 97 - 40;
        let w = match d {
            Dtype::GPUWIRE_FLOAT32_INT32 => { out[..4].copy_from_slice(&(v as f32).to_ne_bytes()); 4 }
            Dtype::GPUWIRE_FLOAT64_INT32 => { out[..8].copy_from_slice(&v.to_ne_bytes()); 8 }
            _ => { out[..4].copy_from_slice(&(v as i32).to_ne_bytes()); 4 }
        };
        out[w..w + 4].copy_from_slice(&idx.to_ne_bytes());
    } else {
        let re = |k: usize| ((k % 13) as f64 - 6.0) * 0.5;
        let k = i * 3 + variant * 5;
        match d {
            Dtype::GPUWIRE_FLOAT32 => out.copy_from_slice(&(re(k) as f32).to_ne_bytes()),
            Dtype::GPUWIRE_FLOAT64 => out.copy_from_slice(&re(k).to_ne_bytes()),
            Dtype::GPUWIRE_COMPLEX64 => {
                out[..4].copy_from_slice(&(re(k) as f32).to_ne_bytes());
                out[4..].copy_from_slice(&(re(k + 7) as f32).to_ne_bytes());
            }
            Dtype::GPUWIRE_COMPLEX128 => {
                out[..8].copy_from_slice(&re(k).to_ne_bytes());
                out[8..].copy_from_slice(&re(k + 7).to_ne_bytes());
            }
            _ => unreachable!("float16/bfloat16 are not probed"),
        }
    }
}

/// Which predefined MPI operations give other results than gpuwire's semantics (integers wrap,
/// unsigned types compare as unsigned; `reduce::combine`): each (datatype, operation) is applied
/// once with MPI_Reduce_local to vectors that catch saturation and signed/unsigned confusion,
/// and compared with `reduce::combine`. Known cases: Open MPI 4.1's AVX loops saturate 8-bit
/// SUM; MPICH 4.0 compares MPI_UINT8_T, MPI_UINT32_T and MPI_UINT64_T as signed in MIN/MAX
/// (pmodels/mpich#6083). uint64 MIN/MAX always use gpuwire's own operations.
fn probe_builtin_ops() -> [[bool; 13]; 15] {
    let mut own = [[false; 13]; 15];
    own[Dtype::GPUWIRE_UINT64 as usize][ReduceOp::GPUWIRE_MAX as usize] = true;
    own[Dtype::GPUWIRE_UINT64 as usize][ReduceOp::GPUWIRE_MIN as usize] = true;
    for d in Dtype::ALL.into_iter().filter(|d| !d.is_half()) {
        let size = d.size();
        // u64 storage keeps every datatype's elements aligned.
        let mut a = vec![0u64; (PROBE_N * size).div_ceil(8)];
        let mut b = vec![0u64; a.len()];
        {
            // SAFETY: the byte views cover the vectors' own storage.
            let (ab, bb) = unsafe {
                (std::slice::from_raw_parts_mut(a.as_mut_ptr().cast::<u8>(), PROBE_N * size), std::slice::from_raw_parts_mut(b.as_mut_ptr().cast::<u8>(), PROBE_N * size))
            };
            for i in 0..PROBE_N {
                probe_elem(d, i, 0, &mut ab[i * size..(i + 1) * size]);
                probe_elem(d, i, 1, &mut bb[i * size..(i + 1) * size]);
            }
        }
        for op in ReduceOp::ALL {
            if op == ReduceOp::GPUWIRE_AVG || op.check_supported(d).is_err() || own[d as usize][op as usize] {
                continue;
            }
            let (mut want, mut got) = (a.clone(), a.clone());
            // SAFETY: both vectors hold PROBE_N aligned elements of `d`.
            let combined = unsafe { crate::reduce::combine(d, op, want.as_mut_ptr().cast(), b.as_ptr().cast(), PROBE_N) };
            let builtin = builtin_op(op);
            // SAFETY: as above; a predefined operation on a predefined datatype.
            let rc = unsafe { sys::MPI_Reduce_local(b.as_ptr().cast(), got.as_mut_ptr().cast(), PROBE_N as c_int, mpisys::reduce_datatype(d), builtin) };
            own[d as usize][op as usize] = combined.is_err() || rc != 0 || want != got;
        }
        own[d as usize][ReduceOp::GPUWIRE_AVG as usize] = own[d as usize][ReduceOp::GPUWIRE_SUM as usize];
    }
    own
}

/// Whether `library` (the first line of MPI_Get_library_version) is MPICH older than `v`.
fn mpich_before(library: &str, v: (u32, u32)) -> bool {
    let Some(rest) = library.strip_prefix("MPICH") else { return false };
    let mut parts = rest.trim().split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).map(|s| s.parse::<u32>().unwrap_or(0));
    match (parts.next(), parts.next()) {
        (Some(major), Some(minor)) => (major, minor) < v,
        _ => false,
    }
}

fn builtin_op(op: ReduceOp) -> sys::MPI_Op {
    // SAFETY: reading constants.
    unsafe {
        match op {
            ReduceOp::GPUWIRE_SUM | ReduceOp::GPUWIRE_AVG => sys::RSMPI_SUM,
            ReduceOp::GPUWIRE_PROD => sys::RSMPI_PROD,
            ReduceOp::GPUWIRE_MAX => sys::RSMPI_MAX,
            ReduceOp::GPUWIRE_MIN => sys::RSMPI_MIN,
            ReduceOp::GPUWIRE_BAND => sys::RSMPI_BAND,
            ReduceOp::GPUWIRE_BOR => sys::RSMPI_BOR,
            ReduceOp::GPUWIRE_BXOR => sys::RSMPI_BXOR,
            ReduceOp::GPUWIRE_LAND => sys::RSMPI_LAND,
            ReduceOp::GPUWIRE_LOR => sys::RSMPI_LOR,
            ReduceOp::GPUWIRE_LXOR => sys::RSMPI_LXOR,
            ReduceOp::GPUWIRE_MINLOC => mpisys::loc_op(false),
            ReduceOp::GPUWIRE_MAXLOC => mpisys::loc_op(true),
        }
    }
}

type UserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut sys::MPI_Datatype);

fn create_ops(fns: &[UserFn]) -> Result<Vec<RawOp>> {
    let mut out = Vec::with_capacity(fns.len());
    for f in fns {
        // SAFETY: reading a constant to have an initial handle value.
        let mut op = unsafe { sys::RSMPI_SUM };
        // SAFETY: `f` has the MPI_User_function signature; commutative.
        let rc = unsafe { sys::MPI_Op_create(Some(*f), 1, &mut op) };
        mpisys::check(rc, "MPI_Op_create")?;
        out.push(RawOp(op));
    }
    Ok(out)
}

fn create_half_ops() -> Result<[[RawOp; 4]; 2]> {
    let fns: [[UserFn; 4]; 2] = [[f16_sum, f16_prod, f16_max, f16_min], [bf16_sum, bf16_prod, bf16_max, bf16_min]];
    let mut out = [[RawOp(unsafe { sys::RSMPI_SUM }); 4]; 2];
    for (t, row) in fns.iter().enumerate() {
        for (o, f) in row.iter().enumerate() {
            let mut op = out[t][o].0;
            // SAFETY: `f` has the MPI_User_function signature; commutative.
            let rc = unsafe { sys::MPI_Op_create(Some(*f), 1, &mut op) };
            mpisys::check(rc, "MPI_Op_create (float16/bfloat16 reduction)")?;
            out[t][o] = RawOp(op);
        }
    }
    Ok(out)
}

/// The MPI operation that performs `op` on `dtype` (AVG maps to its SUM step): the MPI's
/// predefined operation where it computes gpuwire's semantics, else gpuwire's own. The
/// combination must have passed `ReduceOp::check_supported`.
pub fn mpi_op(info: &RuntimeInfo, dtype: Dtype, op: ReduceOp) -> sys::MPI_Op {
    let base = if op == ReduceOp::GPUWIRE_AVG { ReduceOp::GPUWIRE_SUM } else { op };
    if dtype.is_half() {
        let t = if dtype == Dtype::GPUWIRE_FLOAT16 { 0 } else { 1 };
        let o = HALF_BASE_OPS.iter().position(|x| *x == base).expect("half ops cover SUM/PROD/MAX/MIN");
        return info.half_ops[t][o].0;
    }
    if info.own[dtype as usize][base as usize] {
        return info.own_ops[base as usize].0;
    }
    builtin_op(base)
}
