//! CUDA through cudarc's driver API, loaded at run time.
//!
//! gpuwire builds and runs on machines without CUDA: [`cuda`] checks that libcuda can be loaded
//! before any driver call (cudarc panics otherwise) and turns its absence into
//! `Error::BackendUnavailable("no CUDA driver found ...")`.
//!
//! Contexts: gpuwire only uses each device's *primary* context. [`CtxGuard::enter`] makes it
//! current on the calling thread and restores the caller's current context when dropped, so any
//! host thread, also one that never touched CUDA, can call any gpuwire function.

pub mod array_kernels;
pub mod kernels;
pub mod staging;

use std::ffi::c_void;
use std::sync::OnceLock;

use cudarc::driver::sys;

use crate::error::{Error, Result};
use crate::hot::PROCESS;
use crate::types::Space;

/// Facts about the CUDA driver of this process.
#[derive(Debug)]
pub struct Cuda {
    /// Visible devices.
    pub device_count: i32,
    /// cuDriverGetVersion (e.g. 13000 for CUDA 13.0).
    pub driver_version: i32,
}

static CUDA: OnceLock<std::result::Result<Cuda, String>> = OnceLock::new();

/// Formats a driver error with its name and description.
pub fn driver_error(what: &str, e: cudarc::driver::DriverError) -> Error {
    let name = e.error_name().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
    let text = e.error_string().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
    Error::Cuda(format!("{what} failed: {name} ({text})"))
}

/// Checks a raw `CUresult`.
pub fn check(r: sys::CUresult, what: &str) -> Result<()> {
    r.result().map_err(|e| driver_error(what, e))
}

fn load() -> std::result::Result<Cuda, String> {
    // SAFETY: only tries to open the library.
    if !unsafe { sys::is_culib_present() } {
        return Err("no CUDA driver found (libcuda.so could not be loaded; is the NVIDIA driver installed and on the library path?)".into());
    }
    cudarc::driver::result::init().map_err(|e| format!("cuInit failed: {e:?} (no usable GPU, or the driver does not match)"))?;
    let device_count = cudarc::driver::result::device::get_count().map_err(|e| format!("cuDeviceGetCount failed: {e:?}"))?;
    let mut driver_version = 0;
    // SAFETY: writes one int.
    unsafe { sys::cuDriverGetVersion(&mut driver_version) };
    Ok(Cuda { device_count, driver_version })
}

/// The CUDA driver, or `BackendUnavailable` saying why it cannot be used.
pub fn cuda() -> Result<&'static Cuda> {
    CUDA.get_or_init(load).as_ref().map_err(|m| Error::BackendUnavailable(m.clone()))
}

/// The CUDA driver when it loaded and sees at least one device.
pub fn cuda_with_devices() -> Result<&'static Cuda> {
    let c = cuda()?;
    if c.device_count < 1 {
        return Err(Error::BackendUnavailable("the CUDA driver loaded but sees no device (CUDA_VISIBLE_DEVICES?)".into()));
    }
    Ok(c)
}

struct Primary(sys::CUcontext);
// SAFETY: a CUcontext is a handle usable from any thread.
unsafe impl Send for Primary {}
unsafe impl Sync for Primary {}

static PRIMARY: OnceLock<Vec<OnceLock<std::result::Result<Primary, String>>>> = OnceLock::new();

/// The primary contexts of the first devices once retained (every gpuwire call on a device
/// looks its context up: [`CtxGuard::enter`]; NCCL's keep theirs: [`CtxGuard::enter_primary`]).
static PRIMARY_FAST: [std::sync::atomic::AtomicPtr<sys::CUctx_st>; 16] = [const { std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()) }; 16];

/// Where the primary context of `device` is kept once retained, if it has a place.
#[inline]
fn primary_fast(device: i32) -> Option<&'static std::sync::atomic::AtomicPtr<sys::CUctx_st>> {
    usize::try_from(device).ok().and_then(|d| PRIMARY_FAST.get(d))
}

/// The primary context of `device` (retained once for the life of the process).
#[inline]
pub fn primary_context(device: i32) -> Result<sys::CUcontext> {
    if let Some(fast) = primary_fast(device) {
        let ctx = fast.load(std::sync::atomic::Ordering::Acquire);
        if !ctx.is_null() {
            return Ok(ctx);
        }
    }
    primary_context_slow(device)
}

type CtxGetCurrent = unsafe extern "C" fn(*mut sys::CUcontext) -> sys::CUresult;

/// cuCtxGetCurrent through the pointer kept in `hot::PROCESS` (cudarc's wrapper reads a
/// `OnceLock` of its own, another cache line per call), resolved by `primary_context_slow`.
#[inline]
fn ctx_get_current(cur: &mut sys::CUcontext) -> sys::CUresult {
    let f = PROCESS.ctx_get_current.load(std::sync::atomic::Ordering::Acquire);
    if f.is_null() {
        // SAFETY: writes one handle.
        return unsafe { sys::cuCtxGetCurrent(cur) };
    }
    // SAFETY: `f` is the driver's cuCtxGetCurrent (`resolve_ctx_get_current`); it writes one
    // handle.
    unsafe { std::mem::transmute::<*mut (), CtxGetCurrent>(f)(cur) }
}

/// Keeps the driver's cuCtxGetCurrent for [`ctx_get_current`] (once the driver is loaded).
fn resolve_ctx_get_current() {
    // SAFETY: the driver is loaded (`cuda` succeeded); the symbol has cuCtxGetCurrent's type.
    if let Ok(f) = unsafe { sys::culib().get::<CtxGetCurrent>(b"cuCtxGetCurrent\0") } {
        PROCESS.ctx_get_current.store(*f as *mut (), std::sync::atomic::Ordering::Release);
    }
}

#[cold]
#[inline(never)]
fn primary_context_slow(device: i32) -> Result<sys::CUcontext> {
    let c = cuda_with_devices()?;
    if device < 0 || device >= c.device_count {
        return Err(Error::InvalidArgument(format!(
            "CUDA device {device} does not exist (this process sees {} device(s))",
            c.device_count
        )));
    }
    let slots = PRIMARY.get_or_init(|| (0..c.device_count).map(|_| OnceLock::new()).collect());
    let slot = slots[device as usize].get_or_init(|| {
        let dev = cudarc::driver::result::device::get(device).map_err(|e| format!("cuDeviceGet({device}): {e:?}"))?;
        // SAFETY: dev is a valid device.
        let ctx = unsafe { cudarc::driver::result::primary_ctx::retain(dev) }
            .map_err(|e| format!("cuDevicePrimaryCtxRetain({device}): {e:?}"))?;
        Ok(Primary(ctx))
    });
    let ctx = slot.as_ref().map(|p| p.0).map_err(|m| Error::Cuda(m.clone()))?;
    resolve_ctx_get_current();
    if let Some(fast) = primary_fast(device) {
        fast.store(ctx, std::sync::atomic::Ordering::Release);
    }
    Ok(ctx)
}

/// The device of the calling thread's current CUDA context, if one is current.
pub fn current_device() -> Result<Option<i32>> {
    cuda_with_devices()?;
    let mut cur: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: writes one handle.
    check(unsafe { sys::cuCtxGetCurrent(&mut cur) }, "cuCtxGetCurrent")?;
    if cur.is_null() {
        return Ok(None);
    }
    let mut dev: sys::CUdevice = 0;
    // SAFETY: a context is current.
    check(unsafe { sys::cuCtxGetDevice(&mut dev) }, "cuCtxGetDevice")?;
    Ok(Some(dev))
}

/// Makes a device's primary context current on this thread for the guard's lifetime, then
/// restores whatever was current before (nothing, or another context).
pub struct CtxGuard {
    pushed: bool,
}

impl CtxGuard {
    #[inline]
    pub fn enter(device: i32) -> Result<CtxGuard> {
        Self::enter_primary(primary_context(device)?)
    }

    /// `enter` with the device's primary context `ctx` (from [`primary_context`]) at hand.
    #[inline]
    pub fn enter_primary(ctx: sys::CUcontext) -> Result<CtxGuard> {
        let mut cur: sys::CUcontext = std::ptr::null_mut();
        check(ctx_get_current(&mut cur), "cuCtxGetCurrent")?;
        if cur == ctx {
            return Ok(CtxGuard { pushed: false });
        }
        // SAFETY: ctx is a retained primary context.
        check(unsafe { sys::cuCtxPushCurrent_v2(ctx) }, "cuCtxPushCurrent")?;
        Ok(CtxGuard { pushed: true })
    }
}

impl Drop for CtxGuard {
    fn drop(&mut self) {
        if self.pushed {
            let mut popped: sys::CUcontext = std::ptr::null_mut();
            // SAFETY: pops the context this guard pushed on this thread.
            unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
        }
    }
}

/// Memory gpuwire allocated with the CUDA driver; freed on drop.
#[derive(Debug)]
pub struct CudaAlloc {
    pub ptr: usize,
    pub bytes: usize,
    pub device: i32,
    pub space: Space,
}

impl CudaAlloc {
    /// Allocates `bytes` (> 0) of `space` (DEVICE, PINNED or MANAGED) on `device`, zeroed.
    pub fn new(space: Space, device: i32, bytes: usize) -> Result<CudaAlloc> {
        let _g = CtxGuard::enter(device)?;
        crate::trace!("cuda: allocating {bytes} bytes of {} on thread {:?}", space.name(), std::thread::current().name());
        let ptr = match space {
            Space::GPUWIRE_SPACE_DEVICE | Space::GPUWIRE_SPACE_MANAGED => {
                let mut p: sys::CUdeviceptr = 0;
                if space == Space::GPUWIRE_SPACE_DEVICE {
                    // SAFETY: writes one pointer.
                    check(unsafe { sys::cuMemAlloc_v2(&mut p, bytes) }, "cuMemAlloc")?;
                } else {
                    // SAFETY: as above; CU_MEM_ATTACH_GLOBAL = 1.
                    check(unsafe { sys::cuMemAllocManaged(&mut p, bytes, 1) }, "cuMemAllocManaged")?;
                }
                // SAFETY: p is `bytes` long on the current context. The memset runs on a private
                // non-blocking stream, finished before returning (so the memory is zero for work on
                // any stream): never on the legacy stream, which waits for every blocking stream,
                // and a caller's stream may be waiting on gpuwire's progress engine, the thread
                // that may be allocating here (`crate::engine`).
                let zeroed = (|| {
                    let mut s: sys::CUstream = std::ptr::null_mut();
                    check(unsafe { sys::cuStreamCreate(&mut s, 1) }, "cuStreamCreate")?;
                    let r = check(unsafe { sys::cuMemsetD8Async(p, 0, bytes, s) }, "cuMemsetD8Async")
                        .and_then(|()| check(unsafe { sys::cuStreamSynchronize(s) }, "cuStreamSynchronize"));
                    unsafe { sys::cuStreamDestroy_v2(s) };
                    r
                })();
                if let Err(e) = zeroed {
                    unsafe { sys::cuMemFree_v2(p) };
                    return Err(e);
                }
                p as usize
            }
            Space::GPUWIRE_SPACE_PINNED => {
                let mut p: *mut c_void = std::ptr::null_mut();
                // SAFETY: writes one pointer; flags 0 = portable default.
                check(unsafe { sys::cuMemAllocHost_v2(&mut p, bytes) }, "cuMemAllocHost")?;
                // SAFETY: p is `bytes` of host memory.
                unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, bytes) };
                p as usize
            }
            _ => return Err(Error::Internal(format!("CudaAlloc of space {}", space.name()))),
        };
        Ok(CudaAlloc { ptr, bytes, device, space })
    }
}

/// Allocations dropped on a progress-engine thread, freed once no engine work is outstanding:
/// cuMemFree and cuMemFreeHost synchronize the device, and a caller's stream may be waiting for
/// the very thread that frees (`crate::engine`).
static GRAVEYARD: std::sync::Mutex<Vec<CudaAlloc>> = std::sync::Mutex::new(Vec::new());
// Whether GRAVEYARD may hold something (read without its lock on every call):
// `hot::PROCESS.device_dead`.

thread_local! {
    static DEFER_FREES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Makes this thread's CudaAlloc drops deferred (`free_deferred`): the engine thread's.
pub fn defer_frees_on_this_thread() {
    DEFER_FREES.with(|d| d.set(true));
}

/// Whether allocations wait in the graveyard (`free_deferred`); one atomic load.
pub fn has_deferred() -> bool {
    PROCESS.device_dead.load(std::sync::atomic::Ordering::Acquire)
}

/// Frees the allocations deferred so far (call when no stream waits on engine work).
pub fn free_deferred() {
    if !PROCESS.device_dead.swap(false, std::sync::atomic::Ordering::AcqRel) {
        return;
    }
    let dead: Vec<CudaAlloc> = std::mem::take(&mut *GRAVEYARD.lock().unwrap_or_else(|p| p.into_inner()));
    let was = DEFER_FREES.with(|d| d.replace(false));
    drop(dead);
    DEFER_FREES.with(|d| d.set(was));
}

impl Drop for CudaAlloc {
    fn drop(&mut self) {
        if DEFER_FREES.with(|d| d.get()) {
            let a = CudaAlloc { ptr: self.ptr, bytes: self.bytes, device: self.device, space: self.space };
            self.ptr = 0;
            GRAVEYARD.lock().unwrap_or_else(|p| p.into_inner()).push(a);
            // Written only where it changes: every call reads its line (`crate::hot`).
            if !PROCESS.device_dead.load(std::sync::atomic::Ordering::Relaxed) {
                PROCESS.device_dead.store(true, std::sync::atomic::Ordering::Release);
            }
            return;
        }
        if self.ptr == 0 {
            return;
        }
        crate::trace!("cuda: freeing {} bytes of {} on thread {:?}", self.bytes, self.space.name(), std::thread::current().name());
        let Ok(_g) = CtxGuard::enter(self.device) else { return };
        // SAFETY: allocated by `new` and freed only here.
        unsafe {
            match self.space {
                Space::GPUWIRE_SPACE_PINNED => {
                    sys::cuMemFreeHost(self.ptr as *mut c_void);
                }
                _ => {
                    sys::cuMemFree_v2(self.ptr as sys::CUdeviceptr);
                }
            }
        }
    }
}

/// A CUDA stream given by the caller as `void *` (NULL = the legacy default stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stream(pub usize);

impl Stream {
    pub fn raw(self) -> sys::CUstream {
        self.0 as sys::CUstream
    }
}

/// Copies `bytes` between any two spaces (unified addressing) after the work already enqueued on
/// `stream`, and returns when the copy is complete.
pub fn copy_sync(device: i32, dst: usize, src: usize, bytes: usize, stream: Stream) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    let _g = CtxGuard::enter(device)?;
    // SAFETY: caller guarantees both ranges are valid for `bytes`.
    unsafe {
        check(sys::cuMemcpyAsync(dst as sys::CUdeviceptr, src as sys::CUdeviceptr, bytes, stream.raw()), "cuMemcpyAsync")?;
        check(sys::cuStreamSynchronize(stream.raw()), "cuStreamSynchronize")
    }
}

/// What CUDA knows of a pointer: its space and device (HOST and -1 for memory CUDA does not
/// know, or when there is no CUDA driver at all).
pub fn detect_space(ptr: usize) -> Result<(Space, i32)> {
    if ptr == 0 || cuda_with_devices().is_err() {
        return Ok((Space::GPUWIRE_SPACE_HOST, -1));
    }
    let mut mem_type: u32 = 0;
    // SAFETY: writes one unsigned int; an unknown pointer yields CUDA_ERROR_INVALID_VALUE.
    let r = unsafe {
        sys::cuPointerGetAttribute(
            (&mut mem_type as *mut u32).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            ptr as sys::CUdeviceptr,
        )
    };
    if r != sys::CUresult::CUDA_SUCCESS {
        return Ok((Space::GPUWIRE_SPACE_HOST, -1)); // ordinary host memory, unknown to CUDA
    }
    let mut managed: u32 = 0;
    let mut ordinal: i32 = -1;
    // SAFETY: as above.
    unsafe {
        sys::cuPointerGetAttribute(
            (&mut managed as *mut u32).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED,
            ptr as sys::CUdeviceptr,
        );
        sys::cuPointerGetAttribute(
            (&mut ordinal as *mut i32).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            ptr as sys::CUdeviceptr,
        );
    }
    let space = if managed != 0 {
        Space::GPUWIRE_SPACE_MANAGED
    } else if mem_type == sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 {
        Space::GPUWIRE_SPACE_DEVICE
    } else {
        Space::GPUWIRE_SPACE_PINNED
    };
    Ok((space, ordinal))
}

/// Enqueues a copy of `bytes` on `stream` (any direction, unified addressing). Does not wait.
pub fn copy_async(dst: usize, src: usize, bytes: usize, stream: Stream) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    // SAFETY: caller guarantees both ranges are valid for `bytes` until the copy completes, and
    // that the right context is current.
    check(unsafe { sys::cuMemcpyAsync(dst as sys::CUdeviceptr, src as sys::CUdeviceptr, bytes, stream.raw()) }, "cuMemcpyAsync")
}

/// Host-to-device copies below this size run on the compute engine when made as one linear copy
/// (H200, driver 580), so that processes sharing the GPU wait for each other's time slice
/// (~270 µs); [`htod_shared`] makes them as 2-D copies instead.
pub(crate) const SHARED_HTOD_2D_MAX: usize = 32 << 10;

/// Pinned host bounce buffers of [`SHARED_HTOD_2D_MAX`] bytes for [`htod_shared`] (portable: usable
/// from every context). Allocated on first use, reused, never freed (one per thread copying at
/// once, for the life of the process).
static BOUNCE: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

fn bounce_take() -> Result<usize> {
    if let Some(p) = BOUNCE.lock().unwrap_or_else(|p| p.into_inner()).pop() {
        return Ok(p);
    }
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: allocates pinned host memory; CU_MEMHOSTALLOC_PORTABLE = 1.
    check(
        unsafe { sys::cuMemHostAlloc(&mut p, SHARED_HTOD_2D_MAX, 1) },
        "cuMemHostAlloc (bounce buffer)",
    )?;
    Ok(p as usize)
}

/// Copies the host bytes `src` to device memory at `dst` on `stream` and waits for it, in the way
/// that stays off the compute engine when processes share the GPU: up to 8 bytes as stream
/// writes ([`write_small`], ~6.5 µs), below [`SHARED_HTOD_2D_MAX`] from a pinned bounce buffer as
/// [`htod_pinned_async`] makes it (2-D copies of two rows: the copy engine, ~8.7 µs from 64 B to
/// 32 KiB with two ranks on one H200, against ~270 µs for a linear copy there and ~1.5 µs per 8
/// bytes for stream writes; probe modes 4, 11 and 16 of bench/probe_share.c), above that as one
/// linear copy (the copy engine too). For device (not managed) memory; the right context is
/// current (caller).
pub fn htod_shared(dst: usize, src: &[u8], stream: Stream) -> Result<()> {
    let n = src.len();
    if n == 0 {
        return Ok(());
    }
    if n <= 8 && write_small(dst, src, stream)? {
        return sync(stream);
    }
    if !(2..SHARED_HTOD_2D_MAX).contains(&n) {
        copy_async(dst, src.as_ptr() as usize, n, stream)?;
        return sync(stream);
    }
    let b = bounce_take()?;
    // SAFETY: the bounce buffer holds SHARED_HTOD_2D_MAX > n bytes and is ours until returned.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), b as *mut u8, n) };
    let r = htod_pinned_async(dst, b, n, stream).and_then(|()| sync(stream));
    if r.is_ok() {
        BOUNCE.lock().unwrap_or_else(|p| p.into_inner()).push(b);
    }
    // On an error a copy may still read the buffer: it is not reused.
    r
}

/// Enqueues a copy of `bytes` from pinned host memory at `src` to device (not managed) memory at
/// `dst` on `stream`, without a wait (the caller keeps `src` until the stream passed the copy):
/// from 2 bytes to below [`SHARED_HTOD_2D_MAX`] as 2-D copies of two rows ([`copy_rows`]), which
/// take the copy engine where a linear copy of that size waits for the other processes' time
/// slice on a shared GPU; otherwise one linear copy. For [`htod_shared`] and the stream-ordered
/// staged path's results (`backend::ordered`), whose bytes are not known when the copy is
/// enqueued (no stream writes).
pub fn htod_pinned_async(dst: usize, src: usize, bytes: usize, stream: Stream) -> Result<()> {
    if !(2..SHARED_HTOD_2D_MAX).contains(&bytes) {
        return copy_async(dst, src, bytes, stream);
    }
    copy_rows(dst, src, Source::Host, bytes, usize::MAX, stream)
}

/// Device-to-device copies up to this size are made by [`dtod_rows_async`] as 2-D copies. A
/// linear one (`cuMemcpyAsync`) runs on the compute engine whatever its size (H200, driver
/// 580), so on a GPU that processes share it waits for the other's time slice (~150 µs an IPC
/// point-to-point message, 2 KiB to 16 MiB, issue 19). To be the largest size at which 2-D
/// copies still beat a linear copy with the other process busy, as bench/probe_d2d.c measures
/// it (`bash scripts/gpu-probe.sh d2d`; 16 MiB until it has run on a GPU: the sizes issue 19
/// measured).
pub(crate) const SHARED_DTOD_2D_MAX: usize = 16 << 20;

/// The widest row of [`dtod_rows_async`]'s 2-D copies (`usize::MAX`: two rows, as the host
/// copies' [`htod_pinned_async`]), to be chosen from bench/probe_d2d.c's rows of 1 MiB, 256 KiB,
/// 64 KiB and 4 KiB.
pub(crate) const SHARED_DTOD_ROW_MAX: usize = usize::MAX;

/// Enqueues a copy of `bytes` from device memory at `src` (this process's, or a peer's through
/// an IPC mapping) to device (not managed) memory at `dst` on `stream`, without a wait: from 2
/// bytes up to [`SHARED_DTOD_2D_MAX`] as 2-D copies of rows of at most [`SHARED_DTOD_ROW_MAX`]
/// bytes ([`copy_rows`]), meant to run on a copy engine as the two-row host-to-device copies do,
/// off the time-sliced compute engine (bench/probe_d2d.c checks it); otherwise one linear copy.
/// For receivers of IPC point-to-point messages on a shared GPU (`backend::ipc::p2p`); elsewhere
/// device-to-device copies stay linear. The right context is current (caller).
pub fn dtod_rows_async(dst: usize, src: usize, bytes: usize, stream: Stream) -> Result<()> {
    if !(2..=SHARED_DTOD_2D_MAX).contains(&bytes) {
        return copy_async(dst, src, bytes, stream);
    }
    copy_rows(dst, src, Source::Device, bytes, SHARED_DTOD_ROW_MAX, stream)
}

/// Where a 2-D copy reads: host (pinned) or device memory. It writes device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Host,
    Device,
}

/// Rows wider than this are never made (CU_DEVICE_ATTRIBUTE_MAX_PITCH is 2^31 - 1 bytes on the
/// GPUs gpuwire runs on; a 2-D copy with a larger pitch is refused).
const ROW_LIMIT: usize = 1 << 30;

/// How [`copy_rows`] splits `bytes` (at least 2) into 2-D copies of at least two rows each, rows
/// at most `row_max` bytes wide: (offset, row width, rows) of up to three copies, in order. The
/// body is rows of w = min(bytes / 2, row_max) bytes; what is left (fewer than w bytes) goes as
/// two rows of half of it, and an odd last byte with its neighbour as two rows of one byte (that
/// neighbour is copied twice, the same bytes).
fn row_plan(bytes: usize, row_max: usize) -> ([(usize, usize, usize); 3], usize) {
    debug_assert!(bytes >= 2);
    let mut plan = [(0, 0, 0); 3];
    let w = (bytes / 2).min(row_max).clamp(1, ROW_LIMIT);
    let rows = bytes / w;
    plan[0] = (0, w, rows);
    let mut k = 1;
    let done = rows * w;
    let rest = bytes - done;
    if rest >= 2 {
        plan[k] = (done, rest / 2, 2);
        k += 1;
    }
    if rest % 2 == 1 {
        plan[k] = (bytes - 2, 1, 2);
        k += 1;
    }
    (plan, k)
}

/// Enqueues a copy of `bytes` (at least 2) from `src` to device memory at `dst` on `stream` as
/// 2-D copies of at least two rows of at most `row_max` bytes ([`row_plan`]): one row would be a
/// linear copy, which runs on the compute engine where two or more rows take a copy engine
/// (host-to-device: bench/probe_share.c modes 12 and 16; device-to-device: bench/probe_d2d.c).
fn copy_rows(dst: usize, src: usize, from: Source, bytes: usize, row_max: usize, stream: Stream) -> Result<()> {
    let (plan, k) = row_plan(bytes, row_max);
    for &(off, w, rows) in &plan[..k] {
        copy_2d(dst + off, src + off, from, w, w, rows, stream)?;
    }
    Ok(())
}

/// Enqueues a 2-D copy of `height` rows of `width` bytes, `pitch` bytes apart on both sides, from
/// memory at `src` (host or device, `from`) to device memory at `dst`.
fn copy_2d(
    dst: usize,
    src: usize,
    from: Source,
    width: usize,
    pitch: usize,
    height: usize,
    stream: Stream,
) -> Result<()> {
    let m = copy_2d_params(dst, src, from, width, pitch, height);
    // SAFETY: both ranges valid for (height - 1) x pitch + width bytes (callers); a host source
    // is pinned and kept until the stream passed the copy.
    check(
        unsafe { sys::cuMemcpy2DAsync_v2(&m, stream.raw()) },
        "cuMemcpy2DAsync",
    )
}

/// The parameter block of [`copy_2d`] (every field set: the memory-type enums have no zero value,
/// so an all-zero block is not a valid Rust value).
fn copy_2d_params(
    dst: usize,
    src: usize,
    from: Source,
    width: usize,
    pitch: usize,
    height: usize,
) -> sys::CUDA_MEMCPY2D {
    let host = from == Source::Host;
    sys::CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: if host { sys::CUmemorytype::CU_MEMORYTYPE_HOST } else { sys::CUmemorytype::CU_MEMORYTYPE_DEVICE },
        srcHost: if host { src as *const c_void } else { std::ptr::null() },
        srcDevice: if host { 0 } else { src as sys::CUdeviceptr },
        srcArray: std::ptr::null_mut(),
        srcPitch: pitch,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        dstHost: std::ptr::null_mut(),
        dstDevice: dst as sys::CUdeviceptr,
        dstArray: std::ptr::null_mut(),
        dstPitch: pitch,
        WidthInBytes: width,
        Height: height,
    }
}

/// Largest host-to-device write that [`write_small`] does with stream memory operations.
pub(crate) const SMALL_WRITE_BYTES: usize = 1024;

static MEMOPS_REFUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Writes the host bytes `src` (read now) to device memory at `dst`, ordered on `stream` after
/// the work enqueued before it, as stream write-value operations (`cuStreamBatchMemOp`) instead of
/// a copy. Does not wait; the caller synchronizes when it must.
///
/// Why: when processes share a GPU, each one's work on the graphics/compute engine waits for the
/// time slice of the others. A small `cuMemcpyHtoDAsync` (below 32 KiB on the H200), like a
/// kernel, a memset or a device-to-device copy, runs there: with two ranks on one H200 each
/// costs ~270 µs when both ranks issue one at once, while a device-to-host copy (copy engine)
/// costs 8.5 µs and a stream write-value 6.5 µs (bench/probe_share.c, scripts/gpu-probe.sh).
///
/// Returns Ok(false), having done nothing, where it does not apply: `src` longer than
/// [`SMALL_WRITE_BYTES`], `dst` or the length not a multiple of 4 bytes, or a driver that refuses
/// stream memory operations (remembered); the caller copies instead.
pub fn write_small(dst: usize, src: &[u8], stream: Stream) -> Result<bool> {
    use std::sync::atomic::Ordering;
    let n = src.len();
    if n == 0 {
        return Ok(true);
    }
    if n > SMALL_WRITE_BYTES || dst % 4 != 0 || n % 4 != 0 || MEMOPS_REFUSED.load(Ordering::Relaxed) {
        return Ok(false);
    }
    let mut ops: Vec<sys::CUstreamBatchMemOpParams> = Vec::with_capacity(n / 4);
    let mut off = 0;
    while off < n {
        // SAFETY: an all-zero parameter block is valid.
        let mut op: sys::CUstreamBatchMemOpParams = unsafe { std::mem::zeroed() };
        // SAFETY: writing the writeValue member of a zeroed union.
        let w = unsafe { &mut op.writeValue };
        w.address = (dst + off) as sys::CUdeviceptr;
        // flags 0 = CU_STREAM_WRITE_VALUE_DEFAULT. (CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER on
        // all but the first write was refused by the H200's driver 580 with
        // CUDA_ERROR_INVALID_VALUE.) Each write costs ~1.5 µs there, so 1 KiB costs ~200 µs,
        // still below a contended small copy (~270 µs).
        if (dst + off) % 8 == 0 && n - off >= 8 {
            w.operation = sys::CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_64;
            w.__bindgen_anon_1.value64 = u64::from_ne_bytes(src[off..off + 8].try_into().expect("8 bytes"));
            off += 8;
        } else {
            w.operation = sys::CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_32;
            w.__bindgen_anon_1.value = u32::from_ne_bytes(src[off..off + 4].try_into().expect("4 bytes"));
            off += 4;
        }
        ops.push(op);
    }
    // At most 1024 / 4 = 256 operations; the driver takes fewer than 256 per batch.
    for (i, part) in ops.chunks_mut(128).enumerate() {
        // SAFETY: `part` holds valid write operations on memory the caller guarantees is device
        // memory valid for `src.len()` bytes; the right context is current (caller).
        let r = unsafe { sys::cuStreamBatchMemOp_v2(stream.raw(), part.len() as u32, part.as_mut_ptr(), 0) };
        match r {
            sys::CUresult::CUDA_SUCCESS => {}
            // Refused before anything was enqueued: copy instead, now and from now on.
            r if i == 0 => {
                crate::trace!("cuStreamBatchMemOp refused ({r:?}): small deliveries are copies from now on");
                MEMOPS_REFUSED.store(true, Ordering::Relaxed);
                return Ok(false);
            }
            r => return check(r, "cuStreamBatchMemOp").map(|_| false),
        }
    }
    Ok(true)
}

/// Whether `stream` is being captured into a CUDA graph (`cuStreamIsCapturing`). The legacy
/// default stream (NULL) is never captured.
pub fn is_capturing(stream: Stream) -> Result<bool> {
    let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: a stream handle of the caller (or NULL); `st` is a valid out-parameter.
    check(unsafe { sys::cuStreamIsCapturing(stream.raw(), &mut st) }, "cuStreamIsCapturing")?;
    Ok(st != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

/// `n` zeroed 32-bit words of page-locked host memory mapped into `device`'s address space:
/// their host address and their device address, for stream writes and waits that order a
/// stream with the host (`crate::engine::Flags`). Never freed (a stream may wait on them until
/// the process ends).
pub fn mapped_words(device: i32, n: usize) -> Result<(*mut u32, u64)> {
    let _ctx = CtxGuard::enter(device)?;
    let bytes = n.checked_mul(4).ok_or_else(|| Error::Internal(format!("{n} mapped words overflow")))?.max(64);
    let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: allocates `bytes` of page-locked memory, PORTABLE | DEVICEMAP.
    check(unsafe { sys::cuMemHostAlloc(&mut p, bytes, 0x1 | 0x2) }, "cuMemHostAlloc (stream flags)")?;
    // SAFETY: `p` is `bytes` writable bytes just allocated.
    unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, bytes) };
    let mut d: sys::CUdeviceptr = 0;
    // SAFETY: `p` was allocated with DEVICEMAP in the current context.
    check(unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, p, 0) }, "cuMemHostGetDevicePointer")?;
    Ok((p.cast::<u32>(), d as u64))
}

/// Enqueues on `stream` a write of `value` to the 32-bit word at device address `addr` (a
/// mapped word of [`mapped_words`]), made after the stream's earlier work has completed and is
/// visible to the host (`CU_STREAM_WRITE_VALUE_DEFAULT`).
pub fn stream_write(stream: Stream, addr: u64, value: u32) -> Result<()> {
    // SAFETY: `addr` is a mapped word of `mapped_words`, alive for the process.
    check(unsafe { sys::cuStreamWriteValue32_v2(stream.raw(), addr as sys::CUdeviceptr, value, 0) }, "cuStreamWriteValue32")
}

/// Enqueues on `stream` a wait for `ev` (recorded on another stream).
pub fn stream_wait_event(stream: Stream, ev: &Event) -> Result<()> {
    // SAFETY: both handles are valid in the current context.
    check(unsafe { sys::cuStreamWaitEvent(stream.raw(), ev.0, 0) }, "cuStreamWaitEvent")
}

/// Whether all the work enqueued on `stream` has finished (never blocks).
pub fn stream_idle(stream: Stream) -> Result<bool> {
    // SAFETY: a stream handle of gpuwire's.
    match unsafe { sys::cuStreamQuery(stream.raw()) } {
        sys::CUresult::CUDA_SUCCESS => Ok(true),
        sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        r => check(r, "cuStreamQuery").map(|_| false),
    }
}

/// A new non-blocking stream on `device` (it never waits for the legacy stream), never
/// destroyed.
pub fn private_stream(device: i32) -> Result<Stream> {
    let _ctx = CtxGuard::enter(device)?;
    let mut s: sys::CUstream = std::ptr::null_mut();
    // SAFETY: writes one stream handle; CU_STREAM_NON_BLOCKING = 1.
    check(unsafe { sys::cuStreamCreate(&mut s, 1) }, "cuStreamCreate")?;
    Ok(Stream(s as usize))
}

/// Enqueues on `stream` a wait until the 32-bit word at device address `addr` reaches `value`
/// (cyclic comparison, `CU_STREAM_WAIT_VALUE_GEQ`): the stream's later work starts after it.
pub fn stream_wait_geq(stream: Stream, addr: u64, value: u32) -> Result<()> {
    // SAFETY: `addr` is a mapped word of `mapped_words`, alive for the process.
    check(unsafe { sys::cuStreamWaitValue32_v2(stream.raw(), addr as sys::CUdeviceptr, value, sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32) }, "cuStreamWaitValue32")
}

/// Blocks until all work enqueued on `stream` is complete.
pub fn sync(stream: Stream) -> Result<()> {
    // SAFETY: a stream handle of the caller (or NULL).
    check(unsafe { sys::cuStreamSynchronize(stream.raw()) }, "cuStreamSynchronize")
}

/// A CUDA event without timing, for ordering between the host and a stream.
#[derive(Debug)]
pub struct Event(sys::CUevent);
// SAFETY: an event handle is usable from any thread.
unsafe impl Send for Event {}
// SAFETY: the driver's event calls (record, query, synchronize, stream waits) are thread-safe;
// `Event` has no state of its own beside the handle.
unsafe impl Sync for Event {}

impl Event {
    pub fn new() -> Result<Event> {
        let mut e: sys::CUevent = std::ptr::null_mut();
        // SAFETY: writes one handle; CU_EVENT_DISABLE_TIMING = 2.
        check(unsafe { sys::cuEventCreate(&mut e, 2) }, "cuEventCreate")?;
        Ok(Event(e))
    }
    /// Marks the current end of `stream`'s work.
    pub fn record(&self, stream: Stream) -> Result<()> {
        // SAFETY: valid event and stream.
        check(unsafe { sys::cuEventRecord(self.0, stream.raw()) }, "cuEventRecord")
    }
    /// Whether the recorded work is done (never blocks).
    pub fn query(&self) -> Result<bool> {
        // SAFETY: valid event.
        match unsafe { sys::cuEventQuery(self.0) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => check(r, "cuEventQuery").map(|_| false),
        }
    }
    /// Blocks the host until the recorded work is done.
    pub fn wait_host(&self) -> Result<()> {
        // SAFETY: valid event.
        check(unsafe { sys::cuEventSynchronize(self.0) }, "cuEventSynchronize")
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed only here.
        unsafe { sys::cuEventDestroy_v2(self.0) };
    }
}

/// Grow-only scratch memory of one space, reused across calls (staging buffers, device
/// temporaries). Never shrinks until dropped.
#[derive(Debug)]
pub struct Scratch {
    space: Space,
    device: i32,
    alloc: Option<CudaAlloc>,
    host: Vec<u64>,
}

impl Scratch {
    /// `space` PINNED or DEVICE use the CUDA driver; HOST uses pageable memory.
    pub fn new(space: Space, device: i32) -> Scratch {
        Scratch { space, device, alloc: None, host: Vec::new() }
    }

    /// A pointer to at least `bytes` bytes (8-byte aligned; 256 for CUDA memory).
    pub fn get(&mut self, bytes: usize) -> Result<usize> {
        let bytes = bytes.max(8);
        if self.space == Space::GPUWIRE_SPACE_HOST {
            let words = bytes.div_ceil(8);
            if self.host.len() < words {
                self.host = vec![0u64; words];
            }
            return Ok(self.host.as_mut_ptr() as usize);
        }
        if self.alloc.as_ref().is_none_or(|a| a.bytes < bytes) {
            self.alloc = None; // free the old one first
            // Round up to limit regrowth: next power of two above 1 MiB granularity.
            let want = bytes.max(1 << 20).next_power_of_two();
            self.alloc = Some(CudaAlloc::new(self.space, self.device, want)?);
        }
        Ok(self.alloc.as_ref().map(|a| a.ptr).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 2-D copy's parameter block is built without CUDA (CI has none): every field a valid
    /// value (an all-zero block is not one: its memory-type enums have no zero).
    #[test]
    fn copy_2d_params_are_two_rows() {
        let m = copy_2d_params(0x7000_0000, 0x1000, Source::Host, 3, 3, 2);
        assert_eq!(m.srcMemoryType, sys::CUmemorytype::CU_MEMORYTYPE_HOST);
        assert_eq!(m.dstMemoryType, sys::CUmemorytype::CU_MEMORYTYPE_DEVICE);
        assert_eq!(
            (m.srcHost as usize, m.srcDevice, m.dstDevice as usize),
            (0x1000, 0, 0x7000_0000)
        );
        assert_eq!(
            (m.WidthInBytes, m.Height, m.srcPitch, m.dstPitch),
            (3, 2, 3, 3)
        );
        assert!(m.srcArray.is_null() && m.dstArray.is_null() && m.dstHost.is_null());
        let d = copy_2d_params(0x7000_0000, 0x5000_0000, Source::Device, 8, 8, 4);
        assert_eq!(d.srcMemoryType, sys::CUmemorytype::CU_MEMORYTYPE_DEVICE);
        assert_eq!((d.srcDevice as usize, d.srcHost as usize), (0x5000_0000, 0));
        assert_eq!((d.WidthInBytes, d.Height, d.srcPitch, d.dstPitch), (8, 4, 8, 8));
    }

    /// Every byte of `bytes` is copied (the odd last byte's neighbour twice, the same bytes), by
    /// at most three 2-D copies of at least two rows each, no row wider than the limit.
    #[test]
    fn row_plan_covers_every_byte_in_rows() {
        let sizes = [2, 3, 4, 5, 7, 8, 9, 1000, 1025, 2048, 4097, 65536, 65537, (1 << 20) + 3, 16 << 20, (16 << 20) + 1];
        for &bytes in &sizes {
            for row_max in [1, 2, 3, 64 << 10, 1 << 20, usize::MAX] {
                let (plan, k) = row_plan(bytes, row_max);
                assert!((1..=3).contains(&k), "{bytes} {row_max}");
                let mut seen = vec![0u8; bytes];
                for &(off, w, rows) in &plan[..k] {
                    assert!(rows >= 2 && w >= 1 && w <= row_max.max(1) && w <= ROW_LIMIT, "{bytes} {row_max}: {:?}", &plan[..k]);
                    for b in &mut seen[off..off + w * rows] {
                        *b += 1;
                    }
                }
                assert!(seen.iter().all(|&c| c >= 1), "{bytes} {row_max}: {:?} misses bytes", &plan[..k]);
                let twice = seen.iter().filter(|&&c| c > 1).count();
                assert!(twice <= 1 && (twice == 0 || seen[bytes - 2] == 2), "{bytes} {row_max}: {:?}", &plan[..k]);
            }
        }
        // Two rows where nothing limits them (the host copies' way), and the 1 GiB row limit.
        assert_eq!(row_plan(2048, usize::MAX), ([(0, 1024, 2), (0, 0, 0), (0, 0, 0)], 1));
        assert_eq!(row_plan(5, usize::MAX).0[..2], [(0, 2, 2), (3, 1, 2)]);
        assert_eq!(row_plan(4 << 30, usize::MAX).0[0], (0, 1 << 30, 4));
    }
}
