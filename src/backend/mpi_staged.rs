//! MPI_STAGED: device data staged through host memory around an MPI that is not CUDA-aware.
//!
//! Every call first waits for the work already enqueued on the caller's stream, so the data it
//! reads is final; it returns when the result is in the caller's own buffer (the host is blocked
//! for the duration, as MPI blocks). No device pointer is ever given to MPI.
//!
//! - Point-to-point: one MPI message per call, with the element datatype (so a device buffer on
//!   one side matches a host buffer on the other); isend/irecv stage through pooled buffers.
//! - bcast: pipelined in chunks: the device-to-host copy of chunk i+1 overlaps the MPI_Bcast of
//!   chunk i (root), the host-to-device copy of chunk i the MPI_Bcast of chunk i+1 (others).
//! (What follows is the blocking form, which other backends fall back to. An MPI_STAGED
//! communicator's own device calls are stream-ordered, `ordered`; its allreduces of 2 MiB and
//! more, on any memory, go in two phases, `split`.)
//!
//! - allreduce, reduce, reduce_scatter: up to 64 KiB (2 MiB when ranks share a GPU), one MPI
//!   collective on a host copy (latency-bound); above, a ring of pipelined staged exchanges
//!   with the reductions done by GPU kernels (`ring`). Without NVRTC, MPI reduces a host copy
//!   at every size.
//! - allgather(v), alltoall, gather, scatter: one MPI collective on host copies.
//! - alltoallv, gatherv, scatterv, reduce_scatterv: one MPI collective on host copies of the
//!   blocks' extent; only the received blocks are copied back (what lies between them is left as
//!   it was, as MPI leaves it).
//!
//! The staging memory (page-locked by default, pageable on request) belongs to the
//! communicator and is reused across calls.

use std::sync::MutexGuard;

use crate::backend::devstate::{self, DevState, PoolBuf};
use crate::backend::host::{self, Src};
use crate::backend::ring::{self, Loc};
use crate::backend::split;
use crate::backend::path::{Blocks, Input, Path};
use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::device::{self, CtxGuard, Stream};
use crate::error::{Error, Result};
use crate::mpisys;
use crate::request::Pending;
use crate::types::{BackendKind, Dtype, ReduceOp};

/// The staged path.
pub struct StagedPath;

/// What every device-path call holds: the context, the communicator's device state.
pub struct Call<'a> {
    pub c: &'a Communicator,
    pub st: MutexGuard<'a, DevState>,
    pub stream: Stream,
    _ctx: CtxGuard,
}

impl<'a> Call<'a> {
    /// Enters the communicator's device, checks the buffers' devices, and waits for the work
    /// enqueued earlier on `stream`.
    pub fn begin(c: &'a Communicator, bufs: &[Option<&Buffer>], stream: Stream) -> Result<Call<'a>> {
        for b in bufs.iter().flatten() {
            devstate::check_device(c, b)?;
        }
        let st = devstate::dev(c)?;
        let ctx = CtxGuard::enter(st.device)?;
        device::sync(stream)?;
        Ok(Call { c, st, stream, _ctx: ctx })
    }

    pub fn device(&self) -> i32 {
        self.st.device
    }

    /// A host view of `bytes` at `src` (the memory itself when host-accessible, else a copy in
    /// staging slot `slot`). Waits for the copy.
    pub fn to_host(&mut self, src: Loc, bytes: usize, slot: usize) -> Result<usize> {
        if src.host {
            return Ok(src.ptr);
        }
        let h = self.st.host[slot].get(bytes)?;
        ring::copy(Loc { ptr: h, host: true }, src, bytes, self.stream)?;
        device::sync(self.stream)?;
        Ok(h)
    }

    /// Host memory to receive `bytes` destined for `dst` (the memory itself when
    /// host-accessible, else staging slot `slot`); `from_host` finishes the delivery.
    pub fn host_for(&mut self, dst: Loc, bytes: usize, slot: usize) -> Result<usize> {
        if dst.host {
            return Ok(dst.ptr);
        }
        self.st.host[slot].get(bytes)
    }

    /// Copies `bytes` from host `h` to `dst` unless they are the same memory, and waits. When
    /// ranks share the GPU, below 32 KiB to device memory as [`device::htod_shared`] does (off the
    /// time-sliced compute engine); on a GPU of its own a plain copy.
    pub fn from_host(&mut self, dst: Loc, h: usize, bytes: usize) -> Result<()> {
        if dst.ptr != h {
            if !dst.host && self.st.gpu_shared && bytes < device::SHARED_HTOD_2D_MAX {
                // SAFETY: `h` is host memory valid for `bytes` (staging or the caller's buffer).
                let src = unsafe { std::slice::from_raw_parts(h as *const u8, bytes) };
                return device::htod_shared(dst.ptr, src, self.stream);
            }
            ring::copy(dst, Loc { ptr: h, host: true }, bytes, self.stream)?;
        }
        device::sync(self.stream)
    }

    /// Whether large reductions take the ring, which reduces on the GPU (NVRTC kernels available
    /// everywhere). Never on an MPI_STAGED communicator's own calls (its groups' collectives): a
    /// rank there may pass host memory, which takes the host calls (`split` from 2 MiB, one MPI
    /// collective below), and every rank must make the same MPI calls.
    pub fn gpu_reduce(&self, bytes: usize) -> bool {
        bytes > self.st.small_bytes() && self.st.kernels.is_ok() && self.c.backend() != BackendKind::GPUWIRE_BACKEND_MPI_STAGED
    }
}

pub fn loc(b: &Buffer) -> Loc {
    Loc { ptr: b.ptr(), host: b.is_host() }
}

/// Staged allreduce (also the small-message path of the CUDA-aware backend): on host copies, by
/// the calls a host-memory rank makes (`split` from 2 MiB on an MPI_STAGED communicator).
pub fn allreduce_staged(call: &mut Call, send: Input, recv: &Buffer, op: ReduceOp) -> Result<()> {
    let (n, dtype, bytes) = (recv.count(), recv.dtype(), recv.bytes());
    let src = match send {
        Input::InPlace => loc(recv),
        Input::Buf(b) => loc(b),
    };
    let h_in = call.to_host(src, bytes, 0)?;
    let h_out = call.host_for(loc(recv), bytes, 1)?;
    let s = if h_in == h_out { Src::InPlace } else { Src::Ptr(h_in) };
    if split::applies(call.c, bytes) {
        split::allreduce_host(call.c, s, h_out, n, dtype, op)?;
    } else {
        host::allreduce(call.c, s, h_out, n, dtype, op, true)?;
    }
    call.from_host(loc(recv), h_out, bytes)
}

/// Large allreduce: copy to the receive buffer, ring reduce-scatter, ring allgather.
pub fn allreduce_ring(call: &mut Call, send: Input, recv: &Buffer, op: ReduceOp, direct: bool) -> Result<()> {
    let (n, dtype) = (recv.count(), recv.dtype());
    if let Input::Buf(b) = send {
        ring::copy(loc(recv), loc(b), recv.bytes(), call.stream)?;
    }
    let (c, stream, device) = (call.c, call.stream, call.device());
    ring::reduce_scatter(&mut call.st, c, direct, loc(recv), n, dtype, op, stream)?;
    if op == ReduceOp::GPUWIRE_AVG {
        let b = ring::partition(n, c.size() as usize)[c.rank() as usize];
        ring::divide(device, loc(recv).at(b.0 * dtype.size()), b.1, dtype, c.size() as usize, stream)?;
    }
    ring::allgather(&mut call.st, c, direct, loc(recv), n, dtype.size(), stream)?;
    device::sync(stream)
}

/// A device working copy of `send` (n elements): the input of the ring algorithms that must
/// not modify the caller's send buffer.
fn working_copy(call: &mut Call, send: Loc, bytes: usize) -> Result<Loc> {
    let w = Loc { ptr: call.st.dev[1].get(bytes)?, host: false };
    ring::copy(w, send, bytes, call.stream)?;
    Ok(w)
}

/// Large reduce_scatter: working copy, ring reduce-scatter, this rank's block to `recv`.
pub fn reduce_scatter_ring(call: &mut Call, send: &Buffer, recv: &Buffer, op: ReduceOp, direct: bool) -> Result<()> {
    let (n, dtype) = (send.count(), send.dtype());
    let w = working_copy(call, loc(send), send.bytes())?;
    let (c, stream, device) = (call.c, call.stream, call.device());
    // The block partition of reduce_scatter is even (every rank recv.count()); the ring's
    // default partition coincides with it exactly because n = size x recv.count().
    let blocks = ring::reduce_scatter(&mut call.st, c, direct, w, n, dtype, op, stream)?;
    let b = blocks[c.rank() as usize];
    debug_assert_eq!(b.1, recv.count());
    ring::copy(loc(recv), w.at(b.0 * dtype.size()), recv.bytes(), stream)?;
    device::sync(stream)?;
    if op == ReduceOp::GPUWIRE_AVG {
        ring::divide(device, loc(recv), recv.count(), dtype, c.size() as usize, stream)?;
    }
    device::sync(stream)
}

/// Large reduce: working copy, ring reduce-scatter, blocks gathered at the root.
pub fn reduce_ring(call: &mut Call, send: Input, recv: Option<&Buffer>, op: ReduceOp, root: i32, direct: bool) -> Result<()> {
    let src = match (send, recv) {
        (Input::Buf(b), _) => b,
        (Input::InPlace, Some(r)) => r,
        (Input::InPlace, None) => return Err(Error::Internal("in-place reduce off the root".into())),
    };
    let (n, dtype) = (src.count(), src.dtype());
    let es = dtype.size();
    let w = working_copy(call, loc(src), src.bytes())?;
    let (c, stream, device) = (call.c, call.stream, call.device());
    let blocks = ring::reduce_scatter(&mut call.st, c, direct, w, n, dtype, op, stream)?;
    device::sync(stream)?;
    let me = blocks[c.rank() as usize];
    let counts: Vec<usize> = blocks.iter().map(|b| b.1 * es).collect();
    if direct {
        let r = recv.map_or(0, |r| r.ptr());
        gatherv_bytes(c, w.ptr + me.0 * es, me.1 * es, r, &counts, root)?;
    } else {
        let h_me = call.to_host(w.at(me.0 * es), me.1 * es, 0)?;
        let h_root = match recv {
            Some(r) => call.host_for(loc(r), r.bytes(), 1)?,
            None => 0,
        };
        gatherv_bytes(c, h_me, me.1 * es, h_root, &counts, root)?;
        if let Some(r) = recv {
            call.from_host(loc(r), h_root, r.bytes())?;
        }
    }
    if let Some(r) = recv {
        if op == ReduceOp::GPUWIRE_AVG {
            ring::divide(device, loc(r), n, dtype, c.size() as usize, stream)?;
        }
    }
    device::sync(stream)
}

/// MPI_Gatherv of byte blocks in rank order (`recv` significant at the root); past MPI's int
/// counts or displacements, `host::gatherv_large`.
fn gatherv_bytes(c: &Communicator, send: usize, sbytes: usize, recv: usize, counts: &[usize], root: i32) -> Result<()> {
    let mut cs = Vec::with_capacity(counts.len());
    let mut ds = Vec::with_capacity(counts.len());
    let mut off = 0usize;
    for &n in counts {
        let (Ok(n32), Ok(off32)) = (i32::try_from(n), i32::try_from(off)) else {
            return host::gatherv_large(c, Src::Ptr(send), recv, counts, Dtype::GPUWIRE_UINT8, Some(root));
        };
        cs.push(n32);
        ds.push(off32);
        off += n;
    }
    let sn = mpisys::count_i32(sbytes, "reduce")?;
    let u8t = unsafe { mpisys::sys::RSMPI_UINT8_T };
    // Ranges validated by the callers; cs and ds live until the call returns.
    let r = crate::comm::collective!(c, "MPI_Gatherv", MPI_Gatherv(send as *const _, sn, u8t, recv as *mut _, cs.as_ptr(), ds.as_ptr(), u8t, root, c.raw()), MPI_Igatherv);
    if r.is_err() {
        // An abandoned request (a timeout) may still read the counts.
        std::mem::forget((cs, ds));
    }
    r
}

/// Small staged reduce: host copy, MPI_Reduce, copy back at the root.
pub fn reduce_staged(call: &mut Call, send: Input, recv: Option<&Buffer>, op: ReduceOp, root: i32) -> Result<()> {
    let src = match (send, recv) {
        (Input::Buf(b), _) => loc(b),
        (Input::InPlace, Some(r)) => loc(r),
        (Input::InPlace, None) => return Err(Error::Internal("in-place reduce off the root".into())),
    };
    let (n, dtype) = match (send, recv) {
        (Input::Buf(b), _) => (b.count(), b.dtype()),
        (_, Some(r)) => (r.count(), r.dtype()),
        _ => unreachable!(),
    };
    let bytes = n * dtype.size();
    let h_in = call.to_host(src, bytes, 0)?;
    let h_out = match recv {
        Some(r) => call.host_for(loc(r), bytes, 1)?,
        None => 0,
    };
    let s = if recv.is_some() && h_in == h_out { Src::InPlace } else { Src::Ptr(h_in) };
    crate::trace!("staged reduce: {n} x {} to root {root}, host in {h_in:#x} out {h_out:#x} in_place {}", dtype.name(), matches!(s, Src::InPlace));
    host::reduce(call.c, s, h_out, n, dtype, op, root, true)?;
    if let Some(r) = recv {
        if crate::debug_enabled() && bytes >= 4 {
            crate::trace!("staged reduce: root's host result starts with bytes {:?}", unsafe { std::slice::from_raw_parts(h_out as *const u8, 4) });
        }
        call.from_host(loc(r), h_out, bytes)?;
    }
    Ok(())
}

/// Staged scan/exscan (every size, and the CUDA-aware and NCCL paths' too): host copy, one
/// MPI_Scan/MPI_Exscan, copy back (not on exscan's rank 0, whose buffer is left untouched).
pub fn scan_staged(call: &mut Call, send: Input, recv: &Buffer, op: ReduceOp, exclusive: bool) -> Result<()> {
    let (n, dtype, bytes) = (recv.count(), recv.dtype(), recv.bytes());
    let src = match send {
        Input::InPlace => loc(recv),
        Input::Buf(b) => loc(b),
    };
    let h_in = call.to_host(src, bytes, 0)?;
    let h_out = call.host_for(loc(recv), bytes, 1)?;
    let s = if h_in == h_out { Src::InPlace } else { Src::Ptr(h_in) };
    host::scan(call.c, s, h_out, n, dtype, op, exclusive, true)?;
    if exclusive && call.c.rank() == 0 {
        // Exscan's rank 0 receives nothing: its buffer is left as it was.
        return Ok(());
    }
    call.from_host(loc(recv), h_out, bytes)
}

/// Small staged reduce_scatter.
pub fn reduce_scatter_staged(call: &mut Call, send: &Buffer, recv: &Buffer, op: ReduceOp) -> Result<()> {
    let h_in = call.to_host(loc(send), send.bytes(), 0)?;
    let h_out = call.host_for(loc(recv), recv.bytes(), 1)?;
    host::reduce_scatter(call.c, Src::Ptr(h_in), h_out, recv.count(), recv.dtype(), op, true)?;
    call.from_host(loc(recv), h_out, recv.bytes())
}

/// A staged isend: the data is copied to a pooled host buffer now; MPI sends it in the background.
struct StagedSend {
    inner: host::SendPending,
    buf: Option<PoolBuf>,
    pool: *const devstate::Pool,
}
// SAFETY: the pool pointer refers to the communicator's state, which the request keeps alive.
unsafe impl Send for StagedSend {}

impl Pending for StagedSend {
    fn wait(&mut self) -> Result<()> {
        let r = self.inner.wait();
        self.release();
        r
    }
    fn test(&mut self) -> Result<bool> {
        let done = self.inner.test()?;
        if done {
            self.release();
        }
        Ok(done)
    }
}

impl StagedSend {
    fn release(&mut self) {
        if let Some(b) = self.buf.take() {
            // SAFETY: see the Send impl.
            unsafe { (*self.pool).give(b) };
        }
    }
}

/// A staged irecv: MPI receives into a pooled host buffer; completion copies it to the device.
struct StagedRecv {
    inner: host::RecvPending,
    buf: Option<PoolBuf>,
    pool: *const devstate::Pool,
    dst: usize,
    bytes: usize,
    device: i32,
    stream: Stream,
}
// SAFETY: as StagedSend.
unsafe impl Send for StagedRecv {}

impl StagedRecv {
    /// Gives the staging buffer back without copying (the receive failed: the caller's buffer
    /// stays as it was).
    fn release(&mut self) {
        if let Some(b) = self.buf.take() {
            // SAFETY: see StagedSend.
            unsafe { (*self.pool).give(b) };
        }
    }

    fn finish(&mut self) -> Result<()> {
        if let Some(b) = self.buf.take() {
            let _g = CtxGuard::enter(self.device)?;
            // A receive of up to the buffer's count copies what arrived, no more.
            let bytes = self.inner.received_bytes().map_or(self.bytes, |n| (n as usize).min(self.bytes));
            let r = devstate::copy_wait(b.ptr, self.dst, bytes, self.stream);
            // SAFETY: see StagedSend.
            unsafe { (*self.pool).give(b) };
            r?;
        }
        Ok(())
    }
}

impl Pending for StagedRecv {
    fn status(&self) -> Option<crate::request::Status> {
        self.inner.status()
    }
    fn wait(&mut self) -> Result<()> {
        if let Err(e) = self.inner.wait() {
            self.release();
            return Err(e);
        }
        self.finish()
    }
    fn test(&mut self) -> Result<bool> {
        match self.inner.test() {
            Ok(false) => return Ok(false),
            Ok(true) => {}
            Err(e) => {
                self.release();
                return Err(e);
            }
        }
        self.finish()?;
        Ok(true)
    }
}

impl Path for StagedPath {
    fn send(&self, c: &Communicator, buf: &Buffer, dest: i32, tag: i32, stream: Stream) -> Result<()> {
        let mut call = Call::begin(c, &[Some(buf)], stream)?;
        let h = call.to_host(loc(buf), buf.bytes(), 0)?;
        host::send(c, h, buf.count(), buf.dtype(), dest, tag)
    }

    fn recv(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<()> {
        let mut call = Call::begin(c, &[Some(buf)], stream)?;
        let h = call.host_for(loc(buf), buf.bytes(), 1)?;
        host::recv(c, h, buf.count(), buf.dtype(), source, tag)?;
        call.from_host(loc(buf), h, buf.bytes())
    }

    fn isend(&self, c: &Communicator, buf: &Buffer, dest: i32, tag: i32, stream: Stream) -> Result<Box<dyn Pending>> {
        let call = Call::begin(c, &[Some(buf)], stream)?;
        let pool = devstate::pool(c)?;
        let pb = pool.take(buf.bytes(), call.st.pinned(), call.device())?;
        ring::copy(Loc { ptr: pb.ptr, host: true }, loc(buf), buf.bytes(), stream)?;
        device::sync(stream)?;
        let inner = host::isend(c, pb.ptr, buf.count(), buf.dtype(), dest, tag)?;
        Ok(Box::new(StagedSend { inner, buf: Some(pb), pool }))
    }

    fn irecv(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<Box<dyn Pending>> {
        let call = Call::begin(c, &[Some(buf)], stream)?;
        let pool = devstate::pool(c)?;
        let pb = pool.take(buf.bytes(), call.st.pinned(), call.device())?;
        let inner = host::irecv(c, pb.ptr, buf.count(), buf.dtype(), source, tag)?;
        Ok(Box::new(StagedRecv { inner, buf: Some(pb), pool, dst: buf.ptr(), bytes: buf.bytes(), device: call.device(), stream }))
    }

    fn irecv_upto(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<Box<dyn Pending>> {
        let call = Call::begin(c, &[Some(buf)], stream)?;
        let pool = devstate::pool(c)?;
        let pb = pool.take(buf.bytes(), call.st.pinned(), call.device())?;
        let inner = host::irecv_upto(c, pb.ptr, buf.count(), buf.dtype(), source, tag)?;
        Ok(Box::new(StagedRecv { inner, buf: Some(pb), pool, dst: buf.ptr(), bytes: buf.bytes(), device: call.device(), stream }))
    }

    fn sendrecv(&self, c: &Communicator, s: &Buffer, dest: i32, stag: i32, r: &Buffer, source: i32, rtag: i32, stream: Stream) -> Result<()> {
        let mut call = Call::begin(c, &[Some(s), Some(r)], stream)?;
        let proc_null = crate::types::PROC_NULL;
        // Nothing is sent to / received from GPUWIRE_PROC_NULL: no staging, and the receive
        // buffer must stay untouched (a halo at the domain's edge).
        let hs = if dest == proc_null { 0 } else { call.to_host(loc(s), s.bytes(), 0)? };
        let hr = if source == proc_null { 0 } else { call.host_for(loc(r), r.bytes(), 1)? };
        host::sendrecv(c, hs, s.count(), s.dtype(), dest, stag, hr, r.count(), r.dtype(), source, rtag)?;
        if source == proc_null {
            return Ok(());
        }
        call.from_host(loc(r), hr, r.bytes())
    }

    fn barrier(&self, c: &Communicator, stream: Stream) -> Result<()> {
        let _call = Call::begin(c, &[], stream)?;
        host::barrier(c)
    }

    fn bcast(&self, c: &Communicator, buf: &Buffer, root: i32, stream: Stream) -> Result<()> {
        let mut call = Call::begin(c, &[Some(buf)], stream)?;
        bcast_pipelined(&mut call, buf, root)
    }

    fn reduce(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, op: ReduceOp, root: i32, stream: Stream) -> Result<()> {
        let mut call = Call::begin(c, &[input_buf(send), recv], stream)?;
        let bytes = reduce_bytes(send, recv);
        if call.gpu_reduce(bytes) {
            reduce_ring(&mut call, send, recv, op, root, false)
        } else {
            reduce_staged(&mut call, send, recv, op, root)
        }
    }

    fn allreduce(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<()> {
        if c.backend() == BackendKind::GPUWIRE_BACKEND_MPI_STAGED && recv.is_host() && input_buf(send).is_none_or(|b| b.is_host()) {
            // Host memory of an MPI_STAGED communicator (the registry routes it here; so does the
            // stream-ordered path's host side, on its staging): large ones in two phases, as
            // every rank's device memory is reduced.
            return if split::applies(c, recv.bytes()) {
                split::allreduce_host(c, Src::of(send), recv.ptr(), recv.count(), recv.dtype(), op)
            } else {
                host::HostPath.allreduce(c, send, recv, op, stream)
            };
        }
        if c.backend() == BackendKind::GPUWIRE_BACKEND_MPI_STAGED && split::blocking(c, input_buf(send).unwrap_or(recv), recv, op, stream)? {
            // Device memory of an MPI_STAGED communicator in a blocking call (its groups, HIER's
            // leaders): from 2 MiB the two phases with the reduction on the stream.
            return Ok(());
        }
        let mut call = Call::begin(c, &[input_buf(send), Some(recv)], stream)?;
        if call.gpu_reduce(recv.bytes()) {
            allreduce_ring(&mut call, send, recv, op, false)
        } else {
            allreduce_staged(&mut call, send, recv, op)
        }
    }

    fn allgather(&self, c: &Communicator, send: Input, recv: &Buffer, stream: Stream) -> Result<()> {
        let n = recv.count() / c.size() as usize;
        let counts = vec![n; c.size() as usize];
        let mut call = Call::begin(c, &[input_buf(send), Some(recv)], stream)?;
        gatherv_staged(&mut call, send, recv, &counts, None)
    }

    fn allgatherv(&self, c: &Communicator, send: Input, recv: &Buffer, counts: &[usize], stream: Stream) -> Result<()> {
        let mut call = Call::begin(c, &[input_buf(send), Some(recv)], stream)?;
        gatherv_staged(&mut call, send, recv, counts, None)
    }

    fn reduce_scatter(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<()> {
        let Input::Buf(s) = send else { return Err(Error::Internal("in-place reduce_scatter".into())) };
        let mut call = Call::begin(c, &[Some(s), Some(recv)], stream)?;
        if call.gpu_reduce(s.bytes()) {
            reduce_scatter_ring(&mut call, s, recv, op, false)
        } else {
            reduce_scatter_staged(&mut call, s, recv, op)
        }
    }

    fn scan(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, exclusive: bool, stream: Stream) -> Result<()> {
        let mut call = Call::begin(c, &[input_buf(send), Some(recv)], stream)?;
        scan_staged(&mut call, send, recv, op, exclusive)
    }

    fn alltoall(&self, c: &Communicator, send: Input, recv: &Buffer, stream: Stream) -> Result<()> {
        let mut call = Call::begin(c, &[input_buf(send), Some(recv)], stream)?;
        let bytes = recv.bytes();
        let h_out = call.host_for(loc(recv), bytes, 1)?;
        let s = match send {
            Input::InPlace => {
                if h_out != recv.ptr() {
                    ring::copy(Loc { ptr: h_out, host: true }, loc(recv), bytes, call.stream)?;
                    device::sync(call.stream)?;
                }
                Src::InPlace
            }
            Input::Buf(b) => Src::Ptr(call.to_host(loc(b), bytes, 0)?),
        };
        host::alltoall_host(c, s, h_out, recv.count() / c.size() as usize, recv.dtype())?;
        call.from_host(loc(recv), h_out, bytes)
    }

    fn gather(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, root: i32, stream: Stream) -> Result<()> {
        let mut call = Call::begin(c, &[input_buf(send), recv], stream)?;
        let n = match (send, recv) {
            (Input::Buf(b), _) => b.count(),
            (Input::InPlace, Some(r)) => r.count() / c.size() as usize,
            _ => return Err(Error::Internal("in-place gather off the root".into())),
        };
        let counts = vec![n; c.size() as usize];
        match recv {
            Some(r) => gatherv_staged(&mut call, send, r, &counts, Some(root)),
            None => {
                let Input::Buf(b) = send else { unreachable!() };
                let h = call.to_host(loc(b), b.bytes(), 0)?;
                host::gather(c, Src::Ptr(h), 0, n, b.dtype(), root)
            }
        }
    }

    fn scatter(&self, c: &Communicator, send: Option<&Buffer>, recv: Input, root: i32, stream: Stream) -> Result<()> {
        let mut call = Call::begin(c, &[send, input_buf(recv)], stream)?;
        let (n, dtype) = match (recv, send) {
            (Input::Buf(b), _) => (b.count(), b.dtype()),
            (Input::InPlace, Some(s)) => (s.count() / c.size() as usize, s.dtype()),
            _ => return Err(Error::Internal("in-place scatter off the root".into())),
        };
        let h_send = match send {
            Some(s) => call.to_host(loc(s), s.bytes(), 0)?,
            None => 0,
        };
        match recv {
            Input::InPlace => host::scatter(c, h_send, Src::InPlace, n, dtype, root),
            Input::Buf(r) => {
                let h = call.host_for(loc(r), r.bytes(), 1)?;
                host::scatter(c, h_send, Src::Ptr(h), n, dtype, root)?;
                call.from_host(loc(r), h, r.bytes())
            }
        }
    }

    fn alltoallv(&self, c: &Communicator, send: Input, sb: Blocks, recv: &Buffer, rb: Blocks, stream: Stream) -> Result<()> {
        let mut call = Call::begin(c, &[input_buf(send), Some(recv)], stream)?;
        alltoallv_staged(&mut call, send, sb, recv, rb)
    }

    fn gatherv(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, rb: Option<Blocks>, root: i32, stream: Stream) -> Result<()> {
        let mut call = Call::begin(c, &[input_buf(send), recv], stream)?;
        gatherv_blocks_staged(&mut call, send, recv, rb, root)
    }

    fn scatterv(&self, c: &Communicator, send: Option<&Buffer>, sb: Option<Blocks>, recv: Input, root: i32, stream: Stream) -> Result<()> {
        let mut call = Call::begin(c, &[send, input_buf(recv)], stream)?;
        scatterv_staged(&mut call, send, sb, recv, root)
    }

    fn reduce_scatterv(&self, c: &Communicator, send: Input, recv: &Buffer, counts: &[usize], op: ReduceOp, stream: Stream) -> Result<()> {
        let mut call = Call::begin(c, &[input_buf(send), Some(recv)], stream)?;
        reduce_scatterv_staged(&mut call, send, recv, counts, op)
    }
}

/// Copies the received blocks `rb` from host `h` (a staging copy of `recv`'s first elements)
/// back into `recv`, and waits; nothing when `h` is `recv` itself.
fn deliver_blocks(call: &mut Call, recv: &Buffer, h: usize, rb: Blocks, skip: Option<usize>) -> Result<()> {
    if h == recv.ptr() {
        return Ok(());
    }
    let es = recv.dtype().size();
    for (j, n, d) in rb.each() {
        if Some(j) != skip {
            ring::copy(loc(recv).at(d * es), Loc { ptr: h + d * es, host: true }, n * es, call.stream)?;
        }
    }
    device::sync(call.stream)
}

/// A host copy of the first `bytes` of `b` that is not `b` itself (an in-place input, which the
/// receives overwrite): staging slot `slot`, or for host memory a copy in `keep`.
fn private_copy(call: &mut Call, b: &Buffer, bytes: usize, slot: usize, keep: &mut Vec<u64>) -> Result<usize> {
    if b.is_host() {
        *keep = host::in_place_copy(b.ptr(), bytes / b.dtype().size(), b.dtype());
        return Ok(keep.as_ptr() as usize);
    }
    call.to_host(loc(b), bytes, slot)
}

/// Staged alltoallv.
pub fn alltoallv_staged(call: &mut Call, send: Input, sb: Blocks, recv: &Buffer, rb: Blocks) -> Result<()> {
    let c = call.c;
    let dtype = recv.dtype();
    let es = dtype.size();
    let rbytes = rb.extent() * es;
    let h_out = call.host_for(loc(recv), rbytes, 1)?;
    let mut keep = Vec::new();
    let h_in = match send {
        Input::InPlace => private_copy(call, recv, rbytes, 0, &mut keep)?,
        Input::Buf(b) => call.to_host(loc(b), sb.extent() * es, 0)?,
    };
    let r = host::alltoallv(c, h_in, sb, h_out, rb, dtype);
    if r.is_err() {
        std::mem::forget(keep);
    }
    r?;
    deliver_blocks(call, recv, h_out, rb, None)
}

/// Staged gatherv: the root receives the blocks into a host copy and copies back only them.
pub fn gatherv_blocks_staged(call: &mut Call, send: Input, recv: Option<&Buffer>, rb: Option<Blocks>, root: i32) -> Result<()> {
    let c = call.c;
    let me = c.rank() as usize;
    let (count, dtype) = match (send, recv) {
        (Input::Buf(b), _) => (b.count(), b.dtype()),
        (Input::InPlace, Some(r)) => (0, r.dtype()),
        _ => return Err(Error::Internal("in-place gatherv off the root".into())),
    };
    let es = dtype.size();
    let s = match send {
        Input::InPlace => Src::InPlace,
        Input::Buf(b) => Src::Ptr(call.to_host(loc(b), b.bytes(), 0)?),
    };
    let (Some(r), Some(rb)) = (recv, rb) else {
        return host::gatherv(c, s, count, 0, None, dtype, root);
    };
    let h_out = call.host_for(loc(r), rb.extent() * es, 1)?;
    host::gatherv(c, s, count, h_out, Some(rb), dtype, root)?;
    // In place, the root's own block is already in place (and not in the staging copy).
    deliver_blocks(call, r, h_out, rb, matches!(send, Input::InPlace).then_some(me))
}

/// Staged scatterv: the root sends from a host copy of its blocks' extent.
pub fn scatterv_staged(call: &mut Call, send: Option<&Buffer>, sb: Option<Blocks>, recv: Input, root: i32) -> Result<()> {
    let c = call.c;
    let (count, dtype) = match (recv, send) {
        (Input::Buf(b), _) => (b.count(), b.dtype()),
        (Input::InPlace, Some(s)) => (0, s.dtype()),
        _ => return Err(Error::Internal("in-place scatterv off the root".into())),
    };
    let h_send = match (send, sb) {
        (Some(s), Some(sb)) => call.to_host(loc(s), sb.extent() * dtype.size(), 0)?,
        _ => 0,
    };
    match recv {
        Input::InPlace => host::scatterv(c, h_send, sb, Src::InPlace, count, dtype, root),
        Input::Buf(r) => {
            let h = call.host_for(loc(r), r.bytes(), 1)?;
            host::scatterv(c, h_send, sb, Src::Ptr(h), count, dtype, root)?;
            call.from_host(loc(r), h, r.bytes())
        }
    }
}

/// Staged reduce_scatterv (also CUDA-aware's: MPI reduces a host copy).
pub fn reduce_scatterv_staged(call: &mut Call, send: Input, recv: &Buffer, counts: &[usize], op: ReduceOp) -> Result<()> {
    let c = call.c;
    let dtype = recv.dtype();
    let es = dtype.size();
    let total: usize = counts.iter().sum();
    let mine = counts[c.rank() as usize] * es;
    let (s, h_out) = match send {
        Input::InPlace if recv.is_host() => (Src::InPlace, recv.ptr()),
        Input::InPlace => {
            let h = call.to_host(loc(recv), total * es, 1)?;
            (Src::InPlace, h)
        }
        Input::Buf(b) => {
            let h_in = call.to_host(loc(b), b.bytes(), 0)?;
            (Src::Ptr(h_in), call.host_for(loc(recv), mine, 1)?)
        }
    };
    host::reduce_scatterv(c, s, h_out, counts, dtype, op, true)?;
    call.from_host(loc(recv), h_out, mine)
}

pub fn input_buf(i: Input<'_>) -> Option<&Buffer> {
    match i {
        Input::Buf(b) => Some(b),
        Input::InPlace => None,
    }
}

fn reduce_bytes(send: Input, recv: Option<&Buffer>) -> usize {
    match (send, recv) {
        (Input::Buf(b), _) => b.bytes(),
        (Input::InPlace, Some(r)) => r.bytes(),
        _ => 0,
    }
}

/// Staged allgatherv (root None) or gatherv at `root` into `recv`, blocks contiguous in rank order.
fn gatherv_staged(call: &mut Call, send: Input, recv: &Buffer, counts: &[usize], root: Option<i32>) -> Result<()> {
    let c = call.c;
    let dtype = recv.dtype();
    let es = dtype.size();
    let me = c.rank() as usize;
    let block: usize = counts[..me].iter().sum();
    let bytes = recv.bytes();
    let h_out = call.host_for(loc(recv), bytes, 1)?;
    let s = match send {
        Input::InPlace => {
            // The contribution already sits in this rank's block of recv: stage just that block.
            let n = counts[me];
            if h_out != recv.ptr() {
                ring::copy(Loc { ptr: h_out + block * es, host: true }, loc(recv).at(block * es), n * es, call.stream)?;
                device::sync(call.stream)?;
            }
            Src::InPlace
        }
        Input::Buf(b) => Src::Ptr(call.to_host(loc(b), b.bytes(), 0)?),
    };
    match root {
        None => host::allgatherv(c, s, h_out, counts, dtype)?,
        Some(root) => host::gather(c, s, h_out, counts[0], dtype, root)?,
    }
    call.from_host(loc(recv), h_out, bytes)
}

/// Bcast in chunks with the copies of one chunk overlapping the MPI_Bcast of the next.
fn bcast_pipelined(call: &mut Call, buf: &Buffer, root: i32) -> Result<()> {
    let c = call.c;
    let bytes = buf.bytes();
    let chunk = (call.st.chunk / 16 * 16).max(16);
    let nchunks = bytes.div_ceil(chunk);
    let u8t = Dtype::GPUWIRE_UINT8;
    if buf.is_host() {
        // The device ranks' MPI calls, chunk by chunk (memory kinds are each rank's own: a host
        // rank meets device ranks here when a backend falls back to this path).
        for i in 0..nchunks {
            host::bcast(c, buf.ptr() + i * chunk, chunk.min(bytes - i * chunk), u8t, root)?;
        }
        return Ok(());
    }
    let slots = call.st.host[0].get(2 * chunk)?;
    call.st.event(1)?;
    let stream = call.stream;
    let len = |i: usize| chunk.min(bytes - i * chunk);
    let slot = |i: usize| slots + (i % 2) * chunk;
    if c.rank() == root {
        if nchunks > 0 {
            device::copy_async(slot(0), buf.ptr(), len(0), stream)?;
            call.st.event(0)?.record(stream)?;
        }
        for i in 0..nchunks {
            call.st.event(i % 2)?.wait_host()?;
            if i + 1 < nchunks {
                device::copy_async(slot(i + 1), buf.ptr() + (i + 1) * chunk, len(i + 1), stream)?;
                call.st.event((i + 1) % 2)?.record(stream)?;
            }
            host::bcast(c, slot(i), len(i), u8t, root)?;
        }
    } else {
        for i in 0..nchunks {
            if i >= 2 {
                call.st.event(i % 2)?.wait_host()?;
            }
            host::bcast(c, slot(i), len(i), u8t, root)?;
            device::copy_async(buf.ptr() + i * chunk, slot(i), len(i), stream)?;
            call.st.event(i % 2)?.record(stream)?;
        }
    }
    device::sync(stream)
}
