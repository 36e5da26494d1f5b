//! Plain MPI on memory that MPI can read and write: the HOST path, and the MPI layer that the
//! device backends call with their own (staged or device) pointers.
//!
//! Every function here is as its MPI counterpart (MPI_Send, MPI_Allreduce, ...) plus what MPI
//! lacks: AVG (MPI_SUM, then a division by the communicator size), float16/bfloat16 reductions
//! (gpuwire's user-defined MPI operations) and counts above 2^31-1 for bcast, reduce and
//! allreduce (split into several MPI calls).

use std::ffi::{c_int, c_void};

use crate::backend::{Input, Path};
use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::device::Stream;
use crate::error::Result;
use crate::mpisys::{self, RawRequest, sys};
use crate::reduce;
use crate::request::Pending;
use crate::runtime;
use crate::types::{Dtype, ReduceOp};

/// A blocking point-to-point MPI call on communicator `$c`, as its nonblocking form waited by
/// `Communicator::wait_mpi` (a test loop that progresses pending IPC receives, keeps the call's
/// deadline and, under MPI_THREAD_SERIALIZED, takes gpuwire's MPI lock for each test) when
/// `Communicator::nb_p2p`: with a timeout, under SERIALIZED, or while IPC receives may be pending
/// (a peer may be blocked in a send to this process until it copies the data, before it reaches
/// this call). Otherwise the blocking form. (A blocking send matches a nonblocking receive and
/// the reverse, so each rank may choose on its own.)
macro_rules! blocking {
    ($c:expr, $what:expr, $b:ident($($a:expr),* $(,)?), $nb:ident) => {{
        if $c.nb_p2p() {
            let mut req = crate::mpisys::request_null();
            {
                let _mpi = crate::runtime::mpi_lock();
                // SAFETY: as the blocking form; the arguments stay valid until the request
                // completes (waited for below; at a timeout see `wait_mpi`).
                crate::mpisys::check(unsafe { crate::mpisys::sys::$nb($($a),*, &mut req) }, $what)?;
            }
            $c.wait_mpi(&mut req, crate::mpisys::status_ignore(), $what, false)
        } else {
            // SAFETY: as documented at the call.
            crate::mpisys::check(unsafe { crate::mpisys::sys::$b($($a),*) }, $what)
        }
    }};
}
/// A blocking MPI collective on communicator `$c`: its nonblocking form waited by
/// `Communicator::wait_mpi` (as `blocking!`) when the communicator's ranks agreed on that
/// (`Communicator::nb_collectives`: a timeout, MPI_THREAD_SERIALIZED, IPC receives to progress),
/// else the blocking form. Never decided per rank: MPI does not match a blocking collective with
/// a nonblocking one (the ranks would hang). At a timeout the request is abandoned: MPI may
/// still use the buffers if a peer arrives later (callers leak the memory of their own that the
/// call references, rather than free it).
macro_rules! collective {
    ($c:expr, $what:expr, $b:ident($($a:expr),* $(,)?), $nb:ident) => {{
        if $c.nb_collectives() {
            let mut req = crate::mpisys::request_null();
            {
                let _mpi = crate::runtime::mpi_lock();
                // SAFETY: as the blocking form; the arguments stay valid until the request
                // completes (waited for below; at a timeout see above).
                crate::mpisys::check(unsafe { crate::mpisys::sys::$nb($($a),*, &mut req) }, $what)?;
            }
            $c.wait_mpi(&mut req, crate::mpisys::status_ignore(), $what, false)
        } else {
            // SAFETY: as documented at the call.
            crate::mpisys::check(unsafe { crate::mpisys::sys::$b($($a),*) }, $what)
        }
    }};
}
pub(crate) use collective;

/// Largest element count per MPI call when splitting large bcast/reduce/allreduce.
const MAX_CHUNK: usize = 1 << 30;

fn chunks(count: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..count.div_ceil(MAX_CHUNK).max(1)).map(move |i| {
        let off = i * MAX_CHUNK;
        (off, (count - off).min(MAX_CHUNK))
    })
}

fn at(ptr: usize, elems: usize, dtype: Dtype) -> *mut c_void {
    if ptr == 0 { std::ptr::null_mut() } else { (ptr + elems * dtype.size()) as *mut c_void }
}

/// A raw send pointer: a buffer's address or MPI_IN_PLACE.
#[derive(Clone, Copy, Debug)]
pub enum Src {
    InPlace,
    Ptr(usize),
}

impl Src {
    fn at(self, elems: usize, dtype: Dtype) -> *const c_void {
        match self {
            Src::InPlace => mpisys::in_place(),
            Src::Ptr(p) => at(p, elems, dtype),
        }
    }
    fn of(input: Input) -> Src {
        match input {
            Input::InPlace => Src::InPlace,
            Input::Buf(b) => Src::Ptr(b.ptr()),
        }
    }
}

/// MPI_Send of `count` elements at `ptr`.
pub fn send(c: &Communicator, ptr: usize, count: usize, dtype: Dtype, dest: i32, tag: i32) -> Result<()> {
    let n = mpisys::count_i32(count, "send")?;
    // ptr is valid for count elements (validated by the caller).
    blocking!(c, "MPI_Send", MPI_Send(at(ptr, 0, dtype), n, mpisys::datatype(dtype), dest, tag, c.raw()), MPI_Isend)
}

/// MPI_Recv of exactly `count` elements into `ptr`.
pub fn recv(c: &Communicator, ptr: usize, count: usize, dtype: Dtype, source: i32, tag: i32) -> Result<()> {
    let n = mpisys::count_i32(count, "recv")?;
    if c.nb_p2p() {
        let mut req = mpisys::request_null();
        let mpi = runtime::mpi_lock();
        // SAFETY: as below; waited for before returning (cancelled at a timeout).
        mpisys::check(unsafe { sys::MPI_Irecv(at(ptr, 0, dtype), n, mpisys::datatype(dtype), source, tag, c.raw(), &mut req) }, "MPI_Irecv")?;
        drop(mpi);
        return c.wait_mpi(&mut req, mpisys::status_ignore(), "MPI_Recv", true);
    }
    // SAFETY: as above.
    mpisys::check(
        unsafe { sys::MPI_Recv(at(ptr, 0, dtype), n, mpisys::datatype(dtype), source, tag, c.raw(), mpisys::status_ignore()) },
        "MPI_Recv",
    )
}

/// An MPI_Request of MPI_Isend/MPI_Irecv.
pub struct MpiPending(pub RawRequest);

impl Pending for MpiPending {
    fn wait(&mut self) -> Result<()> {
        if crate::backend::ipc::recvs_pending() || runtime::serialized() {
            return crate::backend::ipc::wait_request(&mut self.0.0, "MPI_Wait");
        }
        // SAFETY: an active request of ours.
        mpisys::check(unsafe { sys::MPI_Wait(&mut self.0.0, mpisys::status_ignore()) }, "MPI_Wait")
    }
    fn test(&mut self) -> Result<bool> {
        let mut flag: c_int = 0;
        let mpi = runtime::mpi_lock();
        // SAFETY: as above.
        mpisys::check(unsafe { sys::MPI_Test(&mut self.0.0, &mut flag, mpisys::status_ignore()) }, "MPI_Test")?;
        drop(mpi);
        if flag == 0 {
            // A test loop must not starve a peer blocked in a send to this process.
            crate::backend::ipc::progress_all();
        }
        Ok(flag != 0)
    }
}

pub fn isend(c: &Communicator, ptr: usize, count: usize, dtype: Dtype, dest: i32, tag: i32) -> Result<MpiPending> {
    let n = mpisys::count_i32(count, "isend")?;
    let mut req = mpisys::request_null();
    let _mpi = runtime::mpi_lock();
    // SAFETY: as above; the caller keeps the memory alive until the request completes.
    mpisys::check(
        unsafe { sys::MPI_Isend(at(ptr, 0, dtype), n, mpisys::datatype(dtype), dest, tag, c.raw(), &mut req) },
        "MPI_Isend",
    )?;
    Ok(MpiPending(RawRequest(req)))
}

pub fn irecv(c: &Communicator, ptr: usize, count: usize, dtype: Dtype, source: i32, tag: i32) -> Result<MpiPending> {
    let n = mpisys::count_i32(count, "irecv")?;
    let mut req = mpisys::request_null();
    let _mpi = runtime::mpi_lock();
    // SAFETY: as above.
    mpisys::check(
        unsafe { sys::MPI_Irecv(at(ptr, 0, dtype), n, mpisys::datatype(dtype), source, tag, c.raw(), &mut req) },
        "MPI_Irecv",
    )?;
    Ok(MpiPending(RawRequest(req)))
}

/// A peer rank as MPI takes it: GPUWIRE_PROC_NULL becomes this MPI's MPI_PROC_NULL.
fn mpi_rank(r: i32) -> i32 {
    if r == crate::ops::PROC_NULL { mpisys::proc_null() } else { r }
}

#[allow(clippy::too_many_arguments)]
pub fn sendrecv(
    c: &Communicator,
    sptr: usize,
    scount: usize,
    sdtype: Dtype,
    dest: i32,
    stag: i32,
    rptr: usize,
    rcount: usize,
    rdtype: Dtype,
    source: i32,
    rtag: i32,
) -> Result<()> {
    // Nothing moves to or from GPUWIRE_PROC_NULL: its side has count 0 (callers may then pass a
    // NULL pointer, which MPI refuses with a count > 0 even for MPI_PROC_NULL).
    let proc_null = crate::ops::PROC_NULL;
    let sn = if dest == proc_null { 0 } else { mpisys::count_i32(scount, "sendrecv")? };
    let rn = if source == proc_null { 0 } else { mpisys::count_i32(rcount, "sendrecv")? };
    // GPUWIRE_PROC_NULL (-1) is not MPI_PROC_NULL in every MPI (Open MPI's is -2).
    let (dest, source) = (mpi_rank(dest), mpi_rank(source));
    if c.nb_p2p() {
        let (mut rq, mut sq) = (mpisys::request_null(), mpisys::request_null());
        let mpi = runtime::mpi_lock();
        // SAFETY: as below; both waited for before returning (the receive is left active only
        // when posting the send failed, as MPI_Sendrecv would fail; cancelled at a timeout).
        unsafe {
            mpisys::check(sys::MPI_Irecv(at(rptr, 0, rdtype), rn, mpisys::datatype(rdtype), source, rtag, c.raw(), &mut rq), "MPI_Irecv")?;
            mpisys::check(sys::MPI_Isend(at(sptr, 0, sdtype), sn, mpisys::datatype(sdtype), dest, stag, c.raw(), &mut sq), "MPI_Isend")?;
        }
        drop(mpi);
        // The receive first: at a timeout it is cancelled, and the send abandoned.
        let r = c.wait_mpi(&mut rq, mpisys::status_ignore(), "MPI_Sendrecv", true);
        return r.and_then(|_| c.wait_mpi(&mut sq, mpisys::status_ignore(), "MPI_Sendrecv", false));
    }
    // SAFETY: both ranges validated by the caller.
    mpisys::check(
        unsafe {
            sys::MPI_Sendrecv(
                at(sptr, 0, sdtype),
                sn,
                mpisys::datatype(sdtype),
                dest,
                stag,
                at(rptr, 0, rdtype),
                rn,
                mpisys::datatype(rdtype),
                source,
                rtag,
                c.raw(),
                mpisys::status_ignore(),
            )
        },
        "MPI_Sendrecv",
    )
}

pub fn barrier(c: &Communicator) -> Result<()> {
    // Our own communicator.
    collective!(c, "MPI_Barrier", MPI_Barrier(c.raw()), MPI_Ibarrier)
}

pub fn bcast(c: &Communicator, ptr: usize, count: usize, dtype: Dtype, root: i32) -> Result<()> {
    for (off, n) in chunks(count) {
        // ptr valid for count elements; n <= 2^30.
        collective!(c, "MPI_Bcast", MPI_Bcast(at(ptr, off, dtype), n as c_int, mpisys::datatype(dtype), root, c.raw()), MPI_Ibcast)?;
    }
    Ok(())
}

/// Divides host memory by the communicator size (second step of AVG).
pub fn avg_divide(c: &Communicator, ptr: usize, count: usize, dtype: Dtype) -> Result<()> {
    // SAFETY: ptr is host memory valid for count elements.
    unsafe { reduce::divide(dtype, ptr as *mut u8, count, c.size() as usize) }
}

/// MPI_Reduce; `recv` is significant at the root only. With `divide`, AVG's division is done
/// here on host memory; device callers pass false and divide on the device.
#[allow(clippy::too_many_arguments)]
pub fn reduce(c: &Communicator, send: Src, recv: usize, count: usize, dtype: Dtype, op: ReduceOp, root: i32, divide: bool) -> Result<()> {
    let info = runtime::ensure_ready()?;
    let mop = runtime::mpi_op(info, dtype, op);
    let is_root = c.rank() == root;
    for (off, n) in chunks(count) {
        let r = if is_root { at(recv, off, dtype) } else { std::ptr::null_mut() };
        // Ranges validated by the caller; n <= 2^30.
        collective!(c, "MPI_Reduce", MPI_Reduce(send.at(off, dtype), r, n as c_int, mpisys::datatype(dtype), mop, root, c.raw()), MPI_Ireduce)?;
    }
    if divide && is_root && op == ReduceOp::GPUWIRE_AVG {
        avg_divide(c, recv, count, dtype)?;
    }
    Ok(())
}

/// MPI_Allreduce (AVG divided here when `divide`).
pub fn allreduce(c: &Communicator, send: Src, recv: usize, count: usize, dtype: Dtype, op: ReduceOp, divide: bool) -> Result<()> {
    let info = runtime::ensure_ready()?;
    let mop = runtime::mpi_op(info, dtype, op);
    for (off, n) in chunks(count) {
        // Ranges validated by the caller; n <= 2^30.
        collective!(c, "MPI_Allreduce", MPI_Allreduce(send.at(off, dtype), at(recv, off, dtype), n as c_int, mpisys::datatype(dtype), mop, c.raw()), MPI_Iallreduce)?;
    }
    if divide && op == ReduceOp::GPUWIRE_AVG {
        avg_divide(c, recv, count, dtype)?;
    }
    Ok(())
}

/// MPI_Allgather of `count` elements per rank.
pub fn allgather(c: &Communicator, send: Src, recv: usize, count: usize, dtype: Dtype) -> Result<()> {
    let n = mpisys::count_i32(count, "allgather")?;
    let dt = mpisys::datatype(dtype);
    // recv holds size*count elements (validated).
    collective!(c, "MPI_Allgather", MPI_Allgather(send.at(0, dtype), n, dt, at(recv, 0, dtype), n, dt, c.raw()), MPI_Iallgather)
}

/// Displacements of contiguous blocks, as MPI ints.
fn displs(counts: &[usize], what: &str) -> Result<(Vec<c_int>, Vec<c_int>)> {
    let mut cs = Vec::with_capacity(counts.len());
    let mut ds = Vec::with_capacity(counts.len());
    let mut off = 0usize;
    for &n in counts {
        cs.push(mpisys::count_i32(n, what)?);
        ds.push(mpisys::count_i32(off, what)?);
        off += n;
    }
    Ok((cs, ds))
}

/// MPI_Allgatherv with blocks placed contiguously in rank order.
pub fn allgatherv(c: &Communicator, send: Src, recv: usize, counts: &[usize], dtype: Dtype) -> Result<()> {
    let (cs, ds) = displs(counts, "allgatherv")?;
    let dt = mpisys::datatype(dtype);
    let mine = cs[c.rank() as usize];
    // recv holds sum(counts) elements (validated); cs and ds live until the call returns.
    let r = collective!(c, "MPI_Allgatherv", MPI_Allgatherv(send.at(0, dtype), mine, dt, at(recv, 0, dtype), cs.as_ptr(), ds.as_ptr(), dt, c.raw()), MPI_Iallgatherv);
    if r.is_err() {
        // An abandoned request (a timeout) may still read the counts.
        std::mem::forget((cs, ds));
    }
    r
}

/// MPI_Reduce_scatter_block: `count` result elements per rank.
pub fn reduce_scatter(c: &Communicator, send: Src, recv: usize, count: usize, dtype: Dtype, op: ReduceOp, divide: bool) -> Result<()> {
    let info = runtime::ensure_ready()?;
    let n = mpisys::count_i32(count, "reduce_scatter")?;
    mpisys::count_i32(count * c.size() as usize, "reduce_scatter")?;
    let mop = runtime::mpi_op(info, dtype, op);
    // send holds size*count elements, recv count (validated).
    collective!(c, "MPI_Reduce_scatter_block", MPI_Reduce_scatter_block(send.at(0, dtype), at(recv, 0, dtype), n, mpisys::datatype(dtype), mop, c.raw()), MPI_Ireduce_scatter_block)?;
    if divide && op == ReduceOp::GPUWIRE_AVG {
        avg_divide(c, recv, count, dtype)?;
    }
    Ok(())
}

/// MPI_Alltoall with `count` elements per pair of ranks.
pub fn alltoall(c: &Communicator, send: Src, recv: usize, count: usize, dtype: Dtype) -> Result<()> {
    let n = mpisys::count_i32(count, "alltoall")?;
    let dt = mpisys::datatype(dtype);
    let (s, sn) = match send {
        Src::InPlace => (mpisys::in_place() as *const c_void, 0),
        Src::Ptr(_) => (send.at(0, dtype), n),
    };
    // Both hold size*count elements (validated).
    collective!(c, "MPI_Alltoall", MPI_Alltoall(s, sn, dt, at(recv, 0, dtype), n, dt, c.raw()), MPI_Ialltoall)
}

/// MPI_Gather of `count` elements per rank; `recv` significant at the root.
pub fn gather(c: &Communicator, send: Src, recv: usize, count: usize, dtype: Dtype, root: i32) -> Result<()> {
    let n = mpisys::count_i32(count, "gather")?;
    let dt = mpisys::datatype(dtype);
    let r = if c.rank() == root { at(recv, 0, dtype) } else { std::ptr::null_mut() };
    // Validated by the caller.
    collective!(c, "MPI_Gather", MPI_Gather(send.at(0, dtype), n, dt, r, n, dt, root, c.raw()), MPI_Igather)
}

/// MPI_Scatter of `count` elements per rank; `send` significant at the root. `recv` is
/// `Src::InPlace` at a root that keeps its block in place.
pub fn scatter(c: &Communicator, send: usize, recv: Src, count: usize, dtype: Dtype, root: i32) -> Result<()> {
    let n = mpisys::count_i32(count, "scatter")?;
    let dt = mpisys::datatype(dtype);
    let s = if c.rank() == root { at(send, 0, dtype) } else { std::ptr::null_mut() };
    let r = match recv {
        Src::InPlace => mpisys::in_place(),
        Src::Ptr(p) => at(p, 0, dtype),
    };
    // Validated by the caller.
    collective!(c, "MPI_Scatter", MPI_Scatter(s, n, dt, r, n, dt, root, c.raw()), MPI_Iscatter)
}

/// The HOST path: buffers MPI can take as they are.
pub struct HostPath;

impl Path for HostPath {
    fn send(&self, c: &Communicator, buf: &Buffer, dest: i32, tag: i32, _s: Stream) -> Result<()> {
        send(c, buf.ptr(), buf.count(), buf.dtype(), dest, tag)
    }
    fn recv(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, _s: Stream) -> Result<()> {
        recv(c, buf.ptr(), buf.count(), buf.dtype(), source, tag)
    }
    fn isend(&self, c: &Communicator, buf: &Buffer, dest: i32, tag: i32, _s: Stream) -> Result<Box<dyn Pending>> {
        Ok(Box::new(isend(c, buf.ptr(), buf.count(), buf.dtype(), dest, tag)?))
    }
    fn irecv(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, _s: Stream) -> Result<Box<dyn Pending>> {
        Ok(Box::new(irecv(c, buf.ptr(), buf.count(), buf.dtype(), source, tag)?))
    }
    fn sendrecv(&self, c: &Communicator, s: &Buffer, dest: i32, stag: i32, r: &Buffer, source: i32, rtag: i32, _s: Stream) -> Result<()> {
        sendrecv(c, s.ptr(), s.count(), s.dtype(), dest, stag, r.ptr(), r.count(), r.dtype(), source, rtag)
    }
    fn barrier(&self, c: &Communicator, _s: Stream) -> Result<()> {
        barrier(c)
    }
    fn bcast(&self, c: &Communicator, buf: &Buffer, root: i32, _s: Stream) -> Result<()> {
        bcast(c, buf.ptr(), buf.count(), buf.dtype(), root)
    }
    fn reduce(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, op: ReduceOp, root: i32, _s: Stream) -> Result<()> {
        let (count, dtype) = match (send, recv) {
            (Input::Buf(b), _) => (b.count(), b.dtype()),
            (Input::InPlace, Some(r)) => (r.count(), r.dtype()),
            (Input::InPlace, None) => unreachable!("in-place reduce is only possible at the root"),
        };
        reduce(c, Src::of(send), recv.map_or(0, |r| r.ptr()), count, dtype, op, root, true)
    }
    fn allreduce(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, _s: Stream) -> Result<()> {
        allreduce(c, Src::of(send), recv.ptr(), recv.count(), recv.dtype(), op, true)
    }
    fn allgather(&self, c: &Communicator, send: Input, recv: &Buffer, _s: Stream) -> Result<()> {
        allgather(c, Src::of(send), recv.ptr(), recv.count() / c.size() as usize, recv.dtype())
    }
    fn allgatherv(&self, c: &Communicator, send: Input, recv: &Buffer, counts: &[usize], _s: Stream) -> Result<()> {
        allgatherv(c, Src::of(send), recv.ptr(), counts, recv.dtype())
    }
    fn reduce_scatter(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, _s: Stream) -> Result<()> {
        let send = match send {
            Input::InPlace => unreachable!("reduce_scatter input and output differ in size"),
            Input::Buf(b) => Src::Ptr(b.ptr()),
        };
        reduce_scatter(c, send, recv.ptr(), recv.count(), recv.dtype(), op, true)
    }
    fn alltoall(&self, c: &Communicator, send: Input, recv: &Buffer, _s: Stream) -> Result<()> {
        alltoall(c, Src::of(send), recv.ptr(), recv.count() / c.size() as usize, recv.dtype())
    }
    fn gather(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, root: i32, _s: Stream) -> Result<()> {
        let (count, dtype) = match (send, recv) {
            (Input::Buf(b), _) => (b.count(), b.dtype()),
            (Input::InPlace, Some(r)) => (r.count() / c.size() as usize, r.dtype()),
            (Input::InPlace, None) => unreachable!("in-place gather is only possible at the root"),
        };
        gather(c, Src::of(send), recv.map_or(0, |r| r.ptr()), count, dtype, root)
    }
    fn scatter(&self, c: &Communicator, send: Option<&Buffer>, recv: Input, root: i32, _s: Stream) -> Result<()> {
        let (count, dtype) = match (recv, send) {
            (Input::Buf(b), _) => (b.count(), b.dtype()),
            (Input::InPlace, Some(s)) => (s.count() / c.size() as usize, s.dtype()),
            (Input::InPlace, None) => unreachable!("in-place scatter is only possible at the root"),
        };
        scatter(c, send.map_or(0, |s| s.ptr()), Src::of(recv), count, dtype, root)
    }
}
