//! Per-communicator state of the IPC backend: [`IpcState`] (the shared host segment and its
//! window, the control communicators, the buffers this rank exported), its setup and collective
//! teardown, and [`View`], the range of a buffer that a call publishes, exports or delivers to.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use cudarc::driver::sys as cu;

use super::maps::{close_all, import, maps, Maps};
use super::shm::{self, lock, BufRecord, Cells, Seg, REC_HANDLE, REC_LOCAL_ONLY};
use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::device::{self, CtxGuard, Stream};
use crate::error::{Error, Result};
use crate::mpisys::{self, RawComm, sys};
use crate::types::Space;

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
pub(super) struct Inner {
    exports: HashMap<u64, Export>,
    pub(super) cells: Cells,
}

/// Per-communicator state of the IPC backend.
pub struct IpcState {
    pub(super) seg: Seg,
    win: Option<RawWin>,
    /// The base this rank registered with cuMemHostRegister (the whole segment, mapped into the
    /// device), if it could.
    registered: Option<usize>,
    /// The device address of the segment's base (its registration), 0 without one.
    seg_dev: u64,
    /// Whether this communicator's device collectives are stream-ordered (agreed at creation:
    /// see [`IpcState::stream_ordered`]).
    pub(super) so: bool,
    /// The stream of the last stream-ordered collective: a collective on another stream first
    /// makes its stream wait for that one's work, so that they run in call order on the GPU.
    pub(super) last_stream: Mutex<Option<(Stream, std::sync::Arc<device::Event>)>>,
    /// Events recorded after stream-ordered blocking sends' waits for their receivers (their
    /// streams read the segment until then): waited for before the segment is unregistered.
    pub(super) sends_in_flight: Mutex<Vec<device::Event>>,
    pub(super) ctrl: RawComm,
    pub(super) data: RawComm,
    pub(super) device: i32,
    pub(super) me: usize,
    pub(super) p: usize,
    /// Sequence number of the last collective (collectives are never concurrent on one
    /// communicator; the lock is held for the call).
    pub(super) coll: Mutex<u64>,
    pub(super) inner: Mutex<Inner>,
    /// Keeps a header and its data message posted in the same order.
    pub(super) send_order: Mutex<()>,
    /// Counted in `Maps::states` (set up completely; `destroy` uncounts it).
    counted: bool,
    /// This rank left at gpuwire_comm_free while other holders kept the communicator
    /// ([`IpcState::leave_now`]): `destroy` then waits for no rank.
    left: std::sync::atomic::AtomicBool,
    /// Tags of data messages (K_DATA), rotating through 0..=MPI_TAG_UB.
    pub(super) data_tag: std::sync::atomic::AtomicU64,
    /// Point-to-point headers taken off MPI by a probe, not yet received, in arrival order
    /// (`p2p::probe`; each a `p2p::Header`).
    pub(super) probed: Mutex<Vec<Box<dyn std::any::Any + Send>>>,
}

impl std::fmt::Debug for IpcState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IpcState(rank {} of {}, device {})", self.me, self.p, self.device)
    }
}

/// Page size assumed for the segment's alignment (slots are page multiples).
const PAGE: usize = 4096;

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
            seg_dev: 0,
            so: false,
            last_stream: Mutex::new(None),
            sends_in_flight: Mutex::new(Vec::new()),
            ctrl: RawComm(mpisys::comm_null()),
            data: RawComm(mpisys::comm_null()),
            device,
            me,
            p,
            coll: Mutex::new(0),
            inner: Mutex::new(Inner { exports: HashMap::new(), cells: Cells::default() }),
            send_order: Mutex::new(()),
            counted: false,
            left: std::sync::atomic::AtomicBool::new(false),
            data_tag: std::sync::atomic::AtomicU64::new(0),
            probed: Mutex::default(),
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
            // The whole segment, mapped into the device: this rank's stream writes words of its
            // slot and waits on words of the peers' (stream-ordered collectives).
            // SAFETY: page-multiple range of this process's mapping of the window.
            let r = unsafe { cu::cuMemHostRegister_v2(seg_base as *mut c_void, bytes, cu::CU_MEMHOSTREGISTER_PORTABLE | cu::CU_MEMHOSTREGISTER_DEVICEMAP) };
            if r == cu::CUresult::CUDA_SUCCESS {
                st.registered = Some(seg_base);
                let mut d: cu::CUdeviceptr = 0;
                // SAFETY: registered with DEVICEMAP just above, in the current context.
                if unsafe { cu::cuMemHostGetDevicePointer_v2(&mut d, seg_base as *mut c_void, 0) } == cu::CUresult::CUDA_SUCCESS {
                    st.seg_dev = d as u64;
                }
            } else {
                crate::trace!("ipc: cuMemHostRegister of the segment failed ({r:?}); small copies use pageable memory, and device collectives block the host");
            }
        }
        // Stream-ordered collectives where every rank can: the same on every rank.
        let want = Self::stream_ordered(c) && st.seg_dev != 0;
        let mut v = [-(want as i64)];
        c.allreduce_max_i64(&mut v, "agreeing on stream-ordered IPC collectives")?;
        st.so = v[0] == -1;
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

    /// Whether this rank can stream-order its device collectives: the progress engine can run
    /// (MPI_THREAD_MULTIPLE: nonblocking forms run there and complete on the host), the host
    /// is not asked to wait (GPUWIRE_HOST_SYNC=1), not in checking mode (whose verdicts come
    /// from the call), and not turned off (`GPUWIRE_IPC_STREAM_ORDERED=0`, or off/no/false).
    fn stream_ordered(c: &Communicator) -> bool {
        crate::engine::available() && !crate::engine::host_sync() && !c.config().check && crate::config::ipc_stream_ordered()
    }

    /// Notes a stream-ordered send's wait (its event, recorded after it); forgets those passed.
    pub(super) fn send_in_flight(&self, e: device::Event) {
        let mut g = lock(&self.sends_in_flight);
        g.retain(|x| !x.query().unwrap_or(true));
        g.push(e);
    }

    /// Whether this communicator's device collectives are stream-ordered (describe).
    pub fn collectives_stream_ordered(&self) -> bool {
        self.so
    }

    /// The device address (for stream memory operations) of a word of the segment.
    pub(super) fn word_dev(&self, w: &std::sync::atomic::AtomicU32) -> u64 {
        self.seg_dev + (w as *const std::sync::atomic::AtomicU32 as usize - self.seg.base) as u64
    }

    /// gpuwire_comm_free while other holders keep the communicator (a distributed array, a
    /// pending request): this rank's leave word says it abandoned the segment's collective
    /// release now, at the collective free, so that the other ranks' teardowns do not wait
    /// for its last release (which comes at a point of this rank alone: it hung there, waiting
    /// for ranks that were waiting for it), and its own `destroy` then waits for none. The
    /// window is left to MPI_Finalize, as after a timeout.
    pub fn leave_now(&self) {
        if self.seg.base != 0 {
            self.seg.slot(self.me).leave.0.store(shm::LEAVE_ABANDONED, Ordering::Release);
        }
        self.left.store(true, Ordering::Release);
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
            // Stream-ordered work that still reads or writes the segment's words (the last
            // collective's place, the sends' waits, the receives' copies) is done before the
            // segment is unregistered (a stream waiting on it would then fault).
            if let Some((_, e)) = lock(&self.last_stream).take() {
                let _ = e.wait_host();
            }
            for e in lock(&self.sends_in_flight).drain(..) {
                let _ = e.wait_host();
            }
            maps().quiesce();
            lock(&self.inner).exports.clear();
            if let Some(b) = self.registered.take() {
                // SAFETY: registered in `new`.
                unsafe { cu::cuMemHostUnregister(b as *mut c_void) };
            }
        }
        super::watch::forget(&self.seg);
        let mut free_win = false;
        if self.seg.base != 0 {
            let seg = self.seg;
            let words: Vec<&std::sync::atomic::AtomicU64> = (0..seg.p).map(|r| &seg.slot(r).leave.0).collect();
            free_win = shm::leave(&words, self.me, c.config().timeout, c.is_broken() || self.left.load(Ordering::Acquire));
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
            // A broken communicator's duplicates stay allocated, as its own (`Communicator`'s
            // drop): a timeout may have abandoned requests on them, and a message a late rank
            // sent on them would otherwise reach a later communicator that MPI gives the same
            // context id (a new communicator's creation then hung).
            for comm in [&mut self.ctrl, &mut self.data] {
                if comm.0 != mpisys::comm_null() && !c.is_broken() {
                    sys::MPI_Comm_free(&mut comm.0);
                }
            }
        }
    }

    /// The record of `v` for peers: an IPC handle for exportable device memory.
    pub(super) fn export(&self, v: Option<View>) -> BufRecord {
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
    pub(super) fn import(&self, maps: &mut Maps, peer: usize, rec: &BufRecord) -> Result<usize> {
        import(maps, self.device, self.me, peer, rec)
    }
}

/// A contiguous range of a buffer.
#[derive(Clone, Copy, Debug)]
pub(super) struct View {
    pub(super) ptr: usize,
    pub(super) bytes: usize,
    pub(super) space: Space,
}

impl View {
    pub(super) fn of(b: &Buffer) -> View {
        View { ptr: b.ptr(), bytes: b.bytes(), space: b.space() }
    }
    pub(super) fn at(self, off: usize, bytes: usize) -> View {
        View { ptr: self.ptr + off, bytes, space: self.space }
    }
    pub(super) fn host(self) -> bool {
        self.space.is_host_accessible()
    }
}

pub(super) fn state(c: &Communicator) -> Result<&IpcState> {
    c.backend_state.get::<IpcState>().ok_or_else(|| Error::Internal("IPC path used on a communicator without IPC state".into()))
}

/// Writes host `bytes` to `dst` on `stream` and waits: host memory directly, device memory of
/// ranks sharing the GPU as `device::htod_shared` does, else a copy.
pub(super) fn deliver(dst: View, bytes: &[u8], stream: Stream, shared: bool) -> Result<()> {
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

/// Whether IPC point-to-point receives into device memory of a GPU the ranks share copy from the
/// sender's mapping as 2-D copies (`p2p`: `RecvOp::copy_mapped`, `device::dtod_rows_async`):
/// only with `GPUWIRE_IPC_COPY_ROWS=1` until bench/probe_d2d.c and the benchmark have shown on a
/// GPU that they are faster (not yet run on one, 2026-12-05); otherwise one linear copy.
pub(super) fn copy_rows_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GPUWIRE_IPC_COPY_ROWS").ok().and_then(|v| crate::config::parse_bool(&v)) == Some(true))
}

/// Whether IPC reduces through the mappings in one fused kernel (`coll`: `Lead::fused_into`):
/// `GPUWIRE_IPC_KERNELS=0` reduces rank by rank, as in gpuwire 0.1 (to compare in one run).
pub(super) fn kernels_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GPUWIRE_IPC_KERNELS").ok().and_then(|v| crate::config::parse_bool(&v)) != Some(false))
}
