//! IPC point-to-point: control messages (a [`Header`], with the data inline up to 1 KiB) on the
//! state's private duplicates of the communicator; larger device data through a mapping of the
//! sender's buffer and a completion cell, or as a second MPI message of host bytes. [`SendOp`]
//! and [`RecvOp`] are the operations in flight, `IpcSend` and `IpcRecv` their requests.
//!
//! Matching is MPI's, on host and device memory alike: a header is an MPI message from the
//! sender with the caller's tag, and every receive posts its header's MPI_Irecv when it starts,
//! with MPI's MPI_ANY_SOURCE / MPI_ANY_TAG for GPUWIRE_ANY_SOURCE / GPUWIRE_ANY_TAG (so MPI's
//! non-overtaking order holds between receives, wildcard or not). What the header says (its
//! source, tag, size) decides the rest: the data message's source and tag, the completion cell,
//! the receive's status. A receive of up to its count (`upto`: gpuwire_(i)recv_status) takes a
//! shorter message of whole elements into its buffer's start; a longer one is
//! GPUWIRE_ERROR_TRUNCATE, with nothing written. A probe (`probe`) takes the header it finds off
//! MPI (MPI_Improbe, MPI_Mrecv) into the communicator's `IpcState::probed` list, in arrival order, to
//! read its size, with every earlier header of the probed source(s), whatever its tag (so that
//! none is left behind in MPI); a receive that starts later takes the first header of that list
//! that it matches before it posts its own (under the list's lock, so that no header passes
//! between).

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, TryLockError};

use super::maps::{maps, MAPS};
use super::shm::{self, lock, BufRecord, Stop, REC_HANDLE, REC_LOCAL_ONLY, REC_NONE, SMALL};
use super::state::{copy_rows_on, deliver, state, IpcState, View};
use crate::backend::devstate::{self, Pool, PoolBuf};
use crate::backend::ring::{self, Loc};
use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::device::{self, CtxGuard, Stream};
use crate::error::{Error, Result};
use crate::mpisys::{self, RawComm, RawRequest, sys};
use crate::progress::progress_all;
use crate::request::Pending;
use crate::types::{Dtype, Space};

const MAGIC: u32 = 0x6770_6970; // "gpip"
const K_INLINE: u32 = 1;
const K_HANDLE: u32 = 2;
const K_LOCAL: u32 = 3;
const K_DATA: u32 = 4;
/// Device sends from this size up to `GPUWIRE_IPC_STAGED_MAX` bytes (`config::ipc_staged_max`)
/// go as K_DATA (staged through host memory) when ranks share a GPU.
const STAGED_P2P_MIN: usize = SMALL + 1;

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
    /// Nonzero for a stream-ordered send (K_HANDLE): the receiver waits for the cell's GPU
    /// `ready` word before it copies and writes its `done` word after (`shm::CellWords`).
    ordered: u32,
    /// K_LOCAL: the sender's pointer (the same process); K_DATA: the tag of the data message.
    ptr: u64,
    rec: BufRecord,
    data: [u8; SMALL],
}

const HDR_FIXED: usize = std::mem::size_of::<Header>() - SMALL;
const CHECK_COMPARE: u32 = 1;
const CHECK_CELL: u32 = 2;

/// The header at `i` of a probed list (`IpcState::probed`: only headers are put there).
fn probed_at(list: &[Box<dyn std::any::Any + Send>], i: usize) -> Option<&Header> {
    list.get(i).and_then(|h| h.downcast_ref::<Header>())
}

/// MPI's source and tag for gpuwire's (its wildcards as MPI's).
fn mpi_source_tag(source: i32, tag: i32) -> (i32, i32) {
    let any_s = source == crate::types::ANY_SOURCE || source == mpisys::any_source();
    let any_t = tag == crate::types::ANY_TAG || tag == mpisys::any_tag();
    (if any_s { mpisys::any_source() } else { source }, if any_t { mpisys::any_tag() } else { tag })
}

/// Whether header `h` is a message that a receive or probe of (`source`, `tag`) takes.
fn takes(h: &Header, source: i32, tag: i32) -> bool {
    let (s, t) = mpi_source_tag(source, tag);
    (s == mpisys::any_source() || s == h.src) && (t == mpisys::any_tag() || t == h.tag)
}

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
    /// A stream-ordered send's completion cell (its GPU words): a blocking send's stream waits
    /// for the receiver's copy ([`SendOp::order_after`]; its host `cell` is None); an isend's
    /// request completes once the receiver's copy wrote the cell's `done` word (its host `cell`
    /// is the same cell, for giving up at a timeout).
    ordered: Option<(usize, u64)>,
    /// Checking mode: a refusal by the receiver is this send's error too (as MPI_Ssend's
    /// answer); outside it the send completes as MPI_Send does, and only the receive fails.
    check: bool,
}

/// How a send may be stream-ordered ([`SendOp::start`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Order {
    /// Not: the call waits for its stream first (engine jobs, sends to oneself, ...).
    No,
    /// A blocking send or sendrecv: its stream waits for the receiver's copy.
    Stream,
    /// An isend: the stream only marks where the data is ready; the request completes on the
    /// host when the receiver has copied it.
    Request,
}
// SAFETY: the pointers refer to the communicator's state, which the request keeps alive.
unsafe impl Send for SendOp {}

impl SendOp {
    /// `order`: how the call may be stream-ordered (see [`SendOp::start_ordered`]).
    fn start(c: &Communicator, buf: &Buffer, dest: i32, tag: i32, stream: Stream, order: Order) -> Result<SendOp> {
        let s = state(c)?;
        devstate::check_device(c, buf)?;
        let _g = CtxGuard::enter(s.device)?;
        let v = View::of(buf);
        let mut h = zeroed_header();
        h.magic = MAGIC;
        h.src = c.rank();
        h.tag = tag;
        h.bytes = v.bytes as u64;
        h.count = buf.count() as u64;
        h.dtype = buf.dtype() as i32;
        let mut op = SendOp { reqs: Vec::new(), _hdr: zeroed_header(), cell: None, staged: None, pool: devstate::pool(c)?, state: s, dest, ordered: None, check: c.config().check };
        // Ranks sharing a GPU: above 1 KiB and up to `GPUWIRE_IPC_STAGED_MAX` (256 KiB) the data
        // goes as an MPI message staged through pinned host memory (two copy-engine copies; below
        // 32 KiB the receiver's as device::htod_shared) rather than the receiver's
        // device-to-device copy through the mapping, which waits for the other process's time
        // slice (~150 µs, whether that process's streams wait on the GPU or not; staged 21–73 µs,
        // `config::DEFAULT_IPC_STAGED_MAX`). Such a send waits for its stream on the host, also
        // where it could be stream-ordered.
        let staged = dest as usize != s.me && !v.host() && (STAGED_P2P_MIN..=crate::config::ipc_staged_max()).contains(&v.bytes) && devstate::dev(c)?.gpu_shared;
        if order != Order::No && s.so && !staged && !crate::engine::on_engine_thread() && !v.host() && v.bytes > SMALL && dest as usize != s.me {
            if op.start_ordered(c, s, &mut h, v, stream, order)? {
                return Ok(op);
            }
        }
        device::sync(stream)?;
        // The stream may have passed an earlier call that failed meanwhile (a stream-ordered send
        // whose receiver never came, released at its deadline): nothing goes out on a broken
        // communicator.
        c.ensure_usable()?;
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
            let mut rec = if dest as usize == s.me || staged { BufRecord::default() } else { s.export(Some(v)) };
            // A send through a mapping needs a completion cell; with all of them taken (sends
            // waiting for their receivers) it goes as a data message instead, which MPI completes.
            let mut cell = None;
            if dest as usize == s.me || rec.kind == REC_HANDLE {
                let slot = s.seg.slot(s.me);
                cell = lock(&s.inner).cells.take(&slot.cells, &slot.cgpu, false);
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
                let slot = s.seg.slot(s.me);
                if let Some((cell, generation)) = lock(&s.inner).cells.take(&slot.cells, &slot.cgpu, false) {
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

    /// A stream-ordered send (more than 1 KiB of exportable device memory to another rank, on a
    /// stream-ordered communicator): no wait for the stream. The stream writes the cell's GPU
    /// `ready` word where the send is in it; the header (with the buffer's IPC record) goes at
    /// once; the receiver's stream waits for `ready`, copies through its mapping and writes the
    /// cell's `done` word, which this rank's stream waits for ([`SendOp::order_after`]) before
    /// its later work may touch the buffer. None (nothing done) when the buffer cannot be
    /// exported or no cell is free: the send then takes the blocking path.
    fn start_ordered(&mut self, c: &Communicator, s: &IpcState, h: &mut Box<Header>, v: View, stream: Stream, order: Order) -> Result<bool> {
        let rec = s.export(Some(v));
        if rec.kind != REC_HANDLE {
            return Ok(false);
        }
        let slot = s.seg.slot(s.me);
        let Some((cell, generation)) = lock(&s.inner).cells.take(&slot.cells, &slot.cgpu, true) else { return Ok(false) };
        if let Err(e) = device::stream_write(stream, s.word_dev(&slot.cgpu[cell].ready), generation as u32) {
            // No receiver will be told of it: the cell ends here.
            shm::abandon(&slot.cells[cell], generation);
            slot.cgpu[cell].done.store(generation as u32, Ordering::Release);
            return Err(e);
        }
        h.kind = K_HANDLE;
        h.rec = rec;
        h.cell = cell as u64;
        h.generation = generation;
        h.ordered = 1;
        if c.config().check {
            h.check = CHECK_COMPARE;
        }
        self.ordered = Some((cell, generation));
        if order == Order::Request {
            self.cell = Some((cell, generation));
        }
        let hp = &**h as *const Header as usize;
        {
            let _order = lock(&s.send_order);
            self.reqs.push(isend_bytes(s.ctrl, hp, HDR_FIXED, self.dest, h.tag)?);
        }
        self._hdr = std::mem::replace(h, zeroed_header());
        Ok(true)
    }

    /// A stream-ordered send's end on its stream: the stream waits until the receiver's stream
    /// has copied the data (after the receives of the same call were enqueued, so that two ranks
    /// exchanging data never wait for each other's later work).
    fn order_after(&self, c: &Communicator, stream: Stream, what: &'static str) -> Result<()> {
        let Some((cell, generation)) = self.ordered.filter(|_| self.cell.is_none()) else { return Ok(()) };
        // SAFETY: see the Send impl.
        let s = unsafe { &*self.state };
        let _g = CtxGuard::enter(s.device)?;
        device::stream_wait_geq(stream, s.word_dev(&s.seg.slot(s.me).cgpu[cell].done), generation as u32)?;
        if let Some(t) = c.config().timeout {
            // The wait ends at the call's deadline should the receiver not come (`watch`).
            let deadline = c.call_deadline().unwrap_or_else(|| std::time::Instant::now() + t);
            super::watch::watch(&s.seg, s.me, cell, generation as u32, deadline, &c.broken, c.engine(), what);
        }
        let e = device::Event::new()?;
        e.record(stream)?;
        s.send_in_flight(e);
        Ok(())
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
                Some(shm::REFUSED_COUNT | shm::REFUSED_DTYPE) if !self.check => self.cell = None,
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
        if let Some((cell, generation)) = self.ordered.filter(|_| self.cell.is_some()) {
            // A stream-ordered isend: complete once the receiver's copy happened on the GPU.
            // SAFETY: see the Send impl.
            let s = unsafe { &*self.state };
            if !shm::reached(&s.seg.slot(s.me).cgpu[cell].done, generation as u32) {
                return Ok(false);
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
    /// Ranks share the GPU (deliveries into device memory avoid the compute engine:
    /// `device::htod_shared`, `RecvOp::copy_mapped`).
    shared: bool,
    /// Whether a stream-ordered send's copy is only enqueued on `stream` (a blocking receive on
    /// the caller's thread, into device memory, on a stream-ordered communicator); else it is
    /// complete when the receive is.
    so: bool,
    /// A receive into device memory that completes on the host copies on a stream of its own
    /// (`stream` is then that one, ordered after the caller's work before the call by an event):
    /// never behind later work of the caller's stream, such as a stream-ordered send's wait for
    /// its receiver (an irecv, then a send, then a wait, on two ranks, must not deadlock).
    side: Option<(i32, Stream)>,
    /// The receive buffer's element count and datatype.
    count: usize,
    dtype: crate::types::Dtype,
    /// A message of up to `count` elements is taken (as MPI's receives), else exactly `count`.
    upto: bool,
    /// What the header said (source, tag, bytes), once it arrived: the receive's status.
    matched: Option<(i32, i32, u64)>,
    /// Set by the owner (IpcRecv) when it is dropped: the pointers above may dangle from then
    /// on, and nobody may progress the operation any more.
    closed: bool,
}
// SAFETY: the pointers refer to the communicator's state and the receive buffer, which the
// request keeps alive until it drops its IpcRecv; that sets `closed` under the operation's lock
// first, and no thread progresses a closed operation.
unsafe impl Send for RecvOp {}

impl RecvOp {
    /// `ordered`: the receive may be stream-ordered (a blocking receive or sendrecv on the
    /// caller's thread). `source` and `tag` may be wildcards (gpuwire's or MPI's); `upto`: see
    /// the field.
    pub(super) fn start(c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream, ordered: bool, upto: bool) -> Result<RecvOp> {
        let s = state(c)?;
        devstate::check_device(c, buf)?;
        let (pinned, shared) = {
            let st = devstate::dev(c)?;
            (st.pinned(), st.gpu_shared)
        };
        let so = ordered && s.so && !crate::engine::on_engine_thread() && buf.space() == Space::GPUWIRE_SPACE_DEVICE;
        let mut side = None;
        if !so {
            // The receive buffer may be written as soon as a message arrives: order it after the
            // caller's earlier work. (Stream-ordered, every write to it goes through the stream.)
            let _g = CtxGuard::enter(s.device)?;
            if buf.is_host() || !s.so {
                device::sync(stream)?;
            } else {
                let own = take_side(s.device)?;
                let e = device::Event::new()?;
                e.record(stream).and_then(|()| device::stream_wait_event(own, &e)).inspect_err(|_| give_side(s.device, own))?;
                side = Some((s.device, own));
            }
        }
        let stream = side.map_or(stream, |(_, own)| own);
        let mut hdr = zeroed_header();
        let req = {
            // A header a probe took off MPI comes first (it arrived before any still in MPI).
            let mut probed = lock(&s.probed);
            match (0..probed.len()).position(|i| probed_at(&probed, i).is_some_and(|h| takes(h, source, tag))) {
                Some(i) => {
                    hdr = probed.remove(i).downcast::<Header>().map_err(|_| Error::Internal("a probed control message that is no header".into()))?;
                    // A null request tests complete: the header is processed at once.
                    RawRequest(mpisys::request_null())
                }
                None => {
                    let (ms, mt) = mpi_source_tag(source, tag);
                    irecv_bytes(s.ctrl, &*hdr as *const Header as usize, std::mem::size_of::<Header>(), ms, mt)?
                }
            }
        };
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
            so,
            side,
            count: buf.count(),
            dtype: buf.dtype(),
            upto,
            matched: None,
            closed: false,
        })
    }

    /// What the receive matched, once its header arrived (also when it then failed).
    fn status(&self) -> Option<crate::request::Status> {
        self.matched.map(|(source, tag, bytes)| crate::request::Status { source, tag, count: (bytes / self.dtype.size() as u64) as i64, cancelled: false })
    }

    /// Whether another thread may progress it (the owner's request is alive, not finished).
    pub(super) fn wants_progress(&self) -> bool {
        !self.closed && !matches!(self.state, RState::Done)
    }

    /// Progress; errors are kept for the owner. `others`: called for another owner (a wait of
    /// another call or communicator, the progress thread): never blocks on the mapping lock.
    pub(super) fn poll_keep(&mut self, others: bool) {
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
                    self.matched = Some((h.src, h.tag, h.bytes));
                    let bytes = h.bytes as usize;
                    // A message of another size (or, in checking mode, count or datatype) is
                    // refused: nothing is written to the buffer. `n`: the bytes written (fewer
                    // than the buffer's for a shorter message taken by an `upto` receive).
                    let refused = self.verdict(&h).is_some();
                    let n = bytes.min(self.dst.bytes);
                    let _g = CtxGuard::enter(s.device)?;
                    let moved = match h.kind {
                        K_INLINE if refused => Ok(()),
                        K_INLINE => deliver(self.dst, &h.data[..n.min(SMALL)], self.stream, self.shared),
                        K_LOCAL | K_HANDLE => {
                            let sender_ok = (h.src as usize) < s.p && (h.cell as usize) < shm::CELLS;
                            if !sender_ok {
                                self.state = RState::Done;
                                return Err(Error::Internal(format!("recv: a header from rank {} names completion cell {}", h.src, h.cell)));
                            }
                            // A stream-ordered send's data is ready once the sender's stream wrote
                            // its `ready` word. A receive that completes on the host (not `so`)
                            // comes back until then, with nothing claimed: it never blocks the
                            // progress of other operations, and its call keeps its deadline.
                            let gw = &s.seg.slot(h.src as usize).cgpu[h.cell as usize];
                            let ordered = h.ordered != 0 && h.kind == K_HANDLE;
                            let g32 = h.generation as u32;
                            if ordered && !refused && !self.so && !shm::reached(&gw.ready, g32) {
                                return Ok(());
                            }
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
                                if ordered {
                                    // The sender's stream waits for this word: nothing is copied.
                                    gw.done.store(g32, Ordering::Release);
                                }
                                shm::refuse(word, h.generation, st);
                                self.state = RState::Done;
                                return Err(e);
                            }
                            let r = if ordered && self.so {
                                // Enqueued after the work before this call: wait for the sender's
                                // stream, copy, tell the sender's stream.
                                let m = mapg.as_mut().expect("taken for K_HANDLE");
                                s.import(m, h.src as usize, &h.rec).and_then(|src| {
                                    device::stream_wait_geq(self.stream, s.word_dev(&gw.ready), g32)?;
                                    self.copy_mapped(src, n)?;
                                    device::stream_write(self.stream, s.word_dev(&gw.done), g32)?;
                                    let e = Arc::new(device::Event::new()?);
                                    e.record(self.stream)?;
                                    m.in_flight(e);
                                    Ok(())
                                })
                            } else if ordered {
                                // Complete on return: after the sender's stream reached the send
                                // (its `ready` word, read on the host above), copy and wait.
                                let m = mapg.as_mut().expect("taken for K_HANDLE");
                                s.import(m, h.src as usize, &h.rec).and_then(|src| {
                                    self.copy_mapped(src, n)?;
                                    device::sync(self.stream)
                                })
                            } else if h.kind == K_LOCAL {
                                let src_host = h.rec.kind == REC_LOCAL_ONLY;
                                ring::copy(Loc { ptr: self.dst.ptr, host: self.dst.host() }, Loc { ptr: h.ptr as usize, host: src_host }, n, self.stream)
                                    .and_then(|()| device::sync(self.stream))
                            } else {
                                let m = mapg.as_mut().expect("taken for K_HANDLE");
                                s.import(m, h.src as usize, &h.rec).and_then(|src| {
                                    self.copy_mapped(src, n)?;
                                    device::sync(self.stream)
                                })
                            };
                            drop(mapg);
                            if ordered && (!self.so || r.is_err()) {
                                // Copied (or failed): the sender's stream may go on.
                                gw.done.store(g32, Ordering::Release);
                            }
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
                    let n = (h.bytes as usize).min(self.dst.bytes);
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

    /// Enqueues the copy of `n` bytes from a sender's buffer mapped at `src` into this receive's
    /// buffer on its stream: on a GPU that ranks share, into device memory, with
    /// `GPUWIRE_IPC_COPY_ROWS=1` as 2-D copies (`device::dtod_rows_async`, meant for a copy engine;
    /// a linear copy waits for the other process's time slice on the compute engine; off by
    /// default until measured on a GPU), else as one copy.
    fn copy_mapped(&self, src: usize, n: usize) -> Result<()> {
        if self.shared && self.dst.space == Space::GPUWIRE_SPACE_DEVICE && copy_rows_on() {
            device::dtod_rows_async(self.dst.ptr, src, n, self.stream)
        } else {
            device::copy_async(self.dst.ptr, src, n, self.stream)
        }
    }

    /// Why the message in `h` is refused (its completion state and the receiver's error), or
    /// None when this receive takes it: its bytes always (exactly the buffer's; with `upto` whole
    /// elements up to them, a longer message GPUWIRE_ERROR_TRUNCATE), its count and datatype in
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
        if self.upto {
            let es = self.dtype.size();
            if bytes > self.dst.bytes {
                return Some((shm::REFUSED_COUNT, Error::Truncate(format!(
                    "recv: the message from rank {} (tag {}) has {bytes} bytes ({} {theirs} elements), longer than the receive buffer's {} bytes ({} {} elements); a receive takes up to its buffer's count: the message was discarded and the buffer not written",
                    h.src, h.tag, h.count, self.dst.bytes, self.count, self.dtype.name()
                ))));
            }
            if bytes % es != 0 {
                return Some((shm::REFUSED_COUNT, Error::CountMismatch(format!(
                    "recv: the message from rank {} (tag {}) has {bytes} bytes, not a whole number of {} elements; the message was discarded and the buffer not written",
                    h.src, h.tag, self.dtype.name()
                ))));
            }
            return None;
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

impl Drop for RecvOp {
    fn drop(&mut self) {
        // A finished receive's own stream is idle (its copy was waited for): reused.
        if let Some((device, st)) = self.side.take().filter(|_| matches!(self.state, RState::Done)) {
            give_side(device, st);
        }
    }
}

/// Streams of gpuwire's for receives that complete on the host (`RecvOp::side`), by device,
/// reused (never destroyed).
static SIDE: Mutex<Vec<(i32, Stream)>> = Mutex::new(Vec::new());

fn take_side(device: i32) -> Result<Stream> {
    let mut g = lock(&SIDE);
    match g.iter().position(|(d, _)| *d == device) {
        Some(i) => Ok(g.swap_remove(i).1),
        None => {
            drop(g);
            device::private_stream(device)
        }
    }
}

fn give_side(device: i32, st: Stream) {
    lock(&SIDE).push((device, st));
}

/// Waits for `done` while progressing the process's pending receives, up to the timeout. At
/// the timeout, `give_up` says whether the operation may end there (a send whose receiver
/// already claimed it may not: the wait goes on, without a deadline, until the receiver is done).
fn wait_p2p(c: &Communicator, what: &str, mut done: impl FnMut() -> Result<bool>, give_up: impl FnOnce() -> bool) -> Result<()> {
    // One deadline per gpuwire call: what is left of it.
    let r = shm::spin_until(c.remaining(), || super::broken(c), || {
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

pub(super) struct IpcRecv {
    pub(super) op: Arc<Mutex<RecvOp>>,
    pub(super) comm: *const Communicator,
    pub(super) finished: bool,
}
// SAFETY: as IpcSend.
unsafe impl Send for IpcRecv {}

impl Pending for IpcRecv {
    fn status(&self) -> Option<crate::request::Status> {
        lock(&self.op).status()
    }
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

// ---- the operations ------------------------------------------------------------------------

pub(super) fn send(c: &Communicator, buf: &Buffer, dest: i32, tag: i32, stream: Stream) -> Result<()> {
    let mut op = SendOp::start(c, buf, dest, tag, stream, Order::Stream)?;
    if let Err(e) = op.order_after(c, stream, "send") {
        std::mem::forget(op);
        return Err(e);
    }
    let q = op.quitter();
    let r = wait_p2p(c, "send", || op.test(), || q.give_up());
    if r.is_err() {
        std::mem::forget(op);
    }
    r
}

pub(super) fn recv(c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<()> {
    let mut op = RecvOp::start(c, buf, source, tag, stream, true, false)?;
    let r = wait_p2p(c, "recv", || op.poll(), || true);
    if r.is_err() && !matches!(op.state, RState::Done) {
        std::mem::forget(op);
    }
    r
}

pub(super) fn isend(c: &Communicator, buf: &Buffer, dest: i32, tag: i32, stream: Stream) -> Result<Box<dyn Pending>> {
    let op = SendOp::start(c, buf, dest, tag, stream, Order::Request)?;
    Ok(Box::new(IpcSend { op: Some(op), comm: c }))
}

#[allow(clippy::too_many_arguments)]
pub(super) fn sendrecv(c: &Communicator, send: &Buffer, dest: i32, sendtag: i32, recv: &Buffer, source: i32, recvtag: i32, stream: Stream) -> Result<()> {
    let proc_null = crate::types::PROC_NULL;
    // The receive first (a message to oneself then finds it).
    let mut r = if source == proc_null { None } else { Some(RecvOp::start(c, recv, source, recvtag, stream, true, false)?) };
    let mut w = if dest == proc_null { None } else { Some(SendOp::start(c, send, dest, sendtag, stream, Order::Stream)?) };
    let q = w.as_ref().map(|o| o.quitter());
    // At a timeout the send part gives up, or (its receiver copying) ends first; the call
    // then fails as a whole, also when the receive part was complete.
    let give_up = || q.is_none_or(|q| q.give_up() || q.wait_finished());
    // A part that fails (a receive refusing its message, a send its receiver refused in
    // checking mode) is done; the other goes on to completion, as MPI_Sendrecv's: a send part
    // left behind by a refused receive was still read (through the mapping) after the call
    // returned, and a receive part left behind by a refused send stayed posted in MPI, taking
    // a later message (a helper's bug hunt). The first failure is the call's.
    let (mut rfail, mut wfail): (Option<Error>, Option<Error>) = (None, None);
    let res = wait_p2p(c, "sendrecv", || {
        let rd = match r.as_mut() {
            Some(_) if rfail.is_some() => true,
            Some(op) => op.poll().unwrap_or_else(|e| {
                rfail = Some(e);
                true
            }),
            None => true,
        };
        let sd = match w.as_mut() {
            Some(_) if wfail.is_some() => true,
            Some(op) => op.test().unwrap_or_else(|e| {
                wfail = Some(e);
                true
            }),
            None => true,
        };
        Ok(rd && sd)
    }, give_up);
    if let Err(e) = res {
        std::mem::forget(r);
        std::mem::forget(w);
        // A part that failed before the other timed out: its error is the call's (the first
        // failure, as a host sendrecv's); the timeout has broken the communicator all the same.
        return Err(match rfail.or(wfail) {
            Some(first) => first.reworded(format!("{}; then {e}", first.detail())),
            None => e,
        });
    }
    if wfail.is_some() {
        // Left to the process, as a failed single send is.
        std::mem::forget(w.take());
    }
    // A stream-ordered send part waits for its receiver after this rank's receive was enqueued.
    w.as_ref().map_or(Ok(()), |w| w.order_after(c, stream, "sendrecv"))?;
    rfail.or(wfail).map_or(Ok(()), Err)
}

/// A group's point-to-point part on a stream-ordered IPC communicator (`crate::group`): every
/// receive started, then every send (each stream-ordered where it can be, as in [`sendrecv`]),
/// all completed on the host (their headers; the copies enqueued), then the sends' waits for
/// their receivers enqueued on `stream`. GPUWIRE_PROC_NULL peers are skipped. Also says which
/// sends and receives failed (in the order given; all of them where the batch as a whole
/// failed), so that the caller still delivers the others' results (their views' unpacking).
pub(super) fn batch(c: &Communicator, sends: &[(&Buffer, i32, i32)], recvs: &[(&Buffer, i32, i32)], stream: Stream) -> (Result<()>, Vec<bool>, Vec<bool>) {
    let proc_null = crate::types::PROC_NULL;
    let all_failed = |e: Error| (Err(e), vec![true; sends.len()], vec![true; recvs.len()]);
    let rix: Vec<usize> = (0..recvs.len()).filter(|i| recvs[*i].1 != proc_null).collect();
    let six: Vec<usize> = (0..sends.len()).filter(|i| sends[*i].1 != proc_null).collect();
    let mut rs = Vec::new();
    for &i in &rix {
        let (b, source, tag) = recvs[i];
        match RecvOp::start(c, b, source, tag, stream, true, false) {
            Ok(r) => rs.push(r),
            Err(e) => {
                // The receives started are posted in MPI: never freed.
                std::mem::forget(rs);
                return all_failed(e);
            }
        }
    }
    let mut ws = Vec::new();
    for &i in &six {
        let (b, dest, tag) = sends[i];
        match SendOp::start(c, b, dest, tag, stream, Order::Stream) {
            Ok(w) => ws.push(w),
            Err(e) => {
                std::mem::forget((rs, ws));
                return all_failed(e);
            }
        }
    }
    let qs: Vec<Quitter> = ws.iter().map(|w| w.quitter()).collect();
    let give_up = || qs.iter().all(|q| q.give_up() || q.wait_finished());
    // An operation that fails (a receive refusing its message, a send its receiver refused) is
    // done; the others go on to completion, so that a refused message loses no other of the
    // group (they were all lost: a helper's bug hunt, 2026-12-06). The first failure is the
    // group's.
    let (mut rfail, mut wfail): (Vec<Option<Error>>, Vec<Option<Error>>) = (rs.iter().map(|_| None).collect(), ws.iter().map(|_| None).collect());
    let res = wait_p2p(c, "group", || {
        let mut all = true;
        for (op, f) in rs.iter_mut().zip(rfail.iter_mut()).filter(|(_, f)| f.is_none()) {
            match op.poll() {
                Ok(done) => all &= done,
                Err(e) => *f = Some(e),
            }
        }
        for (op, f) in ws.iter_mut().zip(wfail.iter_mut()).filter(|(_, f)| f.is_none()) {
            match op.test() {
                Ok(done) => all &= done,
                Err(e) => *f = Some(e),
            }
        }
        Ok(all)
    }, give_up);
    if let Err(e) = res {
        std::mem::forget((rs, ws));
        return all_failed(e);
    }
    let (mut sfailed, mut rfailed) = (vec![false; sends.len()], vec![false; recvs.len()]);
    // Failed operations are left to the process (forgotten), as a failed single send or
    // receive is; the others are ended as in a group without failure.
    let mut first = None;
    for ((op, f), &i) in rs.into_iter().zip(rfail).zip(&rix) {
        if let Some(e) = f {
            first.get_or_insert(e);
            rfailed[i] = true;
            std::mem::forget(op);
        }
    }
    let mut sent = Vec::new();
    for ((w, f), &i) in ws.into_iter().zip(wfail).zip(&six) {
        match f {
            Some(e) => {
                first.get_or_insert(e);
                sfailed[i] = true;
                std::mem::forget(w);
            }
            None => sent.push((w, i)),
        }
    }
    for (w, i) in &sent {
        if let Err(e) = w.order_after(c, stream, "group") {
            sfailed[*i] = true;
            first.get_or_insert(e);
        }
    }
    (first.map_or(Ok(()), Err), sfailed, rfailed)
}

/// As MPI_Probe (`block`) / MPI_Iprobe of (`source`, `tag`) on an IPC communicator (wildcards
/// allowed): the next message (host or device memory) that a receive of them would take, as
/// (source, tag, bytes), without receiving its data; `None` when not blocking and there is none.
/// A header found in MPI is taken off it into the communicator's `IpcState::probed` list (to read its
/// size), where the next receive that matches it finds it first. Receives posted earlier take
/// their messages first (their headers' MPI receives were posted before). Waits no longer than
/// the call's deadline.
pub(super) fn probe(c: &Communicator, source: i32, tag: i32, block: bool) -> Result<Option<crate::backend::p2p::Matched>> {
    let s = state(c)?;
    let (ms, _) = mpi_source_tag(source, tag);
    let found = |h: &Header| crate::backend::p2p::Matched { source: h.src, tag: h.tag, bytes: h.bytes };
    let look = || -> Result<Option<crate::backend::p2p::Matched>> {
        let mut probed = lock(&s.probed);
        if let Some(h) = (0..probed.len()).filter_map(|i| probed_at(&probed, i)).find(|h| takes(h, source, tag)) {
            return Ok(Some(found(h)));
        }
        let _mpi = crate::runtime::mpi_lock();
        // Every header from the probed source(s) is taken off MPI in arrival order, whatever its
        // tag, up to the first that matches: a receive takes a probed header before any still in
        // MPI, so none that a sender sent before the matching one may stay behind in MPI (a
        // probe of tag 5, then a receive of MPI_ANY_TAG, must receive an earlier tag 6 first).
        let any_tag = mpisys::any_tag();
        loop {
            // SAFETY: reading a constant; plain out-parameters.
            let mut msg = unsafe { sys::RSMPI_MESSAGE_NULL };
            let mut flag: c_int = 0;
            let mut status: sys::MPI_Status = unsafe { std::mem::zeroed() };
            mpisys::check(unsafe { sys::MPI_Improbe(ms, any_tag, s.ctrl.0, &mut flag, &mut msg, &mut status) }, "MPI_Improbe (IPC control)")?;
            if flag == 0 {
                return Ok(None);
            }
            let mut h = zeroed_header();
            // SAFETY: a control message is at most a Header.
            mpisys::check(
                unsafe { sys::MPI_Mrecv((&mut *h as *mut Header).cast(), std::mem::size_of::<Header>() as c_int, sys::RSMPI_UINT8_T, &mut msg, mpisys::status_ignore()) },
                "MPI_Mrecv (IPC control)",
            )?;
            if h.magic != MAGIC {
                return Err(Error::Internal("probe: a control message without gpuwire's header arrived".into()));
            }
            let m = found(&h);
            let hit = takes(&h, source, tag);
            probed.push(h);
            if hit {
                return Ok(Some(m));
            }
        }
    };
    if !block {
        progress_all();
        return look();
    }
    let mut got = None;
    wait_p2p(c, "probe", || {
        got = look()?;
        Ok(got.is_some())
    }, || true)?;
    Ok(got)
}
