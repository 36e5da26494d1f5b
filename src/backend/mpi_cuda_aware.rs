//! MPI_CUDA_AWARE: device pointers handed to an MPI known to accept them.
//!
//! Every call first waits for the work already enqueued on the caller's stream (MPI reads the
//! memory from the host's point of view), then calls MPI on the device pointers and returns when
//! the data is in place. Reductions do not use the MPI's own collective, which for device
//! buffers reduces on the CPU and is slow (Open MPI: 624 ms for a 256 MiB allreduce on one
//! H200): up to 64 KiB they reduce a host copy with one MPI call (lowest latency), above they
//! run the ring of `ring` with CUDA-aware point-to-point and GPU kernels. scan and exscan reduce
//! a host copy with one MPI call at every size.

use crate::backend::devstate;
use crate::backend::host::{self, Src};
use crate::backend::mpi_staged::{self, Call, input_buf};
use crate::backend::path::{Blocks, Input, Path};
use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::device::{CtxGuard, Stream};
use crate::error::{Error, Result};
use crate::request::Pending;
use crate::types::ReduceOp;

/// The CUDA-aware path.
pub struct CudaAwarePath;

fn src(i: Input) -> Src {
    match i {
        Input::InPlace => Src::InPlace,
        Input::Buf(b) => Src::Ptr(b.ptr()),
    }
}

/// A point-to-point call's [`Call::begin`] without the communicator's device state, whose lock
/// `Call` holds to its end: point-to-point uses none of that state (no staging, no ring), and a
/// blocking receive that held the lock held up every other thread's send on the communicator,
/// which the peer may need before it sends that receive's message (a hang; a helper's bug hunt,
/// 2026-12-06). Checks the buffers' devices, enters the device, waits for `stream`.
fn begin_p2p(c: &Communicator, bufs: &[&Buffer], stream: Stream) -> Result<CtxGuard> {
    for b in bufs {
        devstate::check_device(c, b)?;
    }
    let device = devstate::dev(c)?.device;
    let ctx = CtxGuard::enter(device)?;
    crate::device::sync(stream)?;
    Ok(ctx)
}

impl Path for CudaAwarePath {
    fn send(&self, c: &Communicator, buf: &Buffer, dest: i32, tag: i32, stream: Stream) -> Result<()> {
        let _ctx = begin_p2p(c, &[buf], stream)?;
        host::send(c, buf.ptr(), buf.count(), buf.dtype(), dest, tag)
    }

    fn recv(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<()> {
        let _ctx = begin_p2p(c, &[buf], stream)?;
        host::recv(c, buf.ptr(), buf.count(), buf.dtype(), source, tag)
    }

    fn isend(&self, c: &Communicator, buf: &Buffer, dest: i32, tag: i32, stream: Stream) -> Result<Box<dyn Pending>> {
        let _ctx = begin_p2p(c, &[buf], stream)?;
        let p: host::SendPending = host::isend(c, buf.ptr(), buf.count(), buf.dtype(), dest, tag)?;
        Ok(Box::new(p))
    }

    fn irecv(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<Box<dyn Pending>> {
        let _ctx = begin_p2p(c, &[buf], stream)?;
        Ok(Box::new(host::irecv(c, buf.ptr(), buf.count(), buf.dtype(), source, tag)?))
    }

    fn irecv_upto(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<Box<dyn Pending>> {
        let _ctx = begin_p2p(c, &[buf], stream)?;
        Ok(Box::new(host::irecv_upto(c, buf.ptr(), buf.count(), buf.dtype(), source, tag)?))
    }

    fn sendrecv(&self, c: &Communicator, s: &Buffer, dest: i32, stag: i32, r: &Buffer, source: i32, rtag: i32, stream: Stream) -> Result<()> {
        let _ctx = begin_p2p(c, &[s, r], stream)?;
        host::sendrecv(c, s.ptr(), s.count(), s.dtype(), dest, stag, r.ptr(), r.count(), r.dtype(), source, rtag)
    }

    fn barrier(&self, c: &Communicator, stream: Stream) -> Result<()> {
        let _call = Call::begin(c, &[], stream)?;
        host::barrier(c)
    }

    fn bcast(&self, c: &Communicator, buf: &Buffer, root: i32, stream: Stream) -> Result<()> {
        let _call = Call::begin(c, &[Some(buf)], stream)?;
        host::bcast(c, buf.ptr(), buf.count(), buf.dtype(), root)
    }

    fn reduce(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, op: ReduceOp, root: i32, stream: Stream) -> Result<()> {
        let mut call = Call::begin(c, &[input_buf(send), recv], stream)?;
        let bytes = input_buf(send).or(recv).map_or(0, |b| b.bytes());
        if call.gpu_reduce(bytes) {
            mpi_staged::reduce_ring(&mut call, send, recv, op, root, true)
        } else {
            mpi_staged::reduce_staged(&mut call, send, recv, op, root)
        }
    }

    fn allreduce(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<()> {
        let mut call = Call::begin(c, &[input_buf(send), Some(recv)], stream)?;
        if call.gpu_reduce(recv.bytes()) {
            mpi_staged::allreduce_ring(&mut call, send, recv, op, true)
        } else {
            mpi_staged::allreduce_staged(&mut call, send, recv, op)
        }
    }

    fn allgather(&self, c: &Communicator, send: Input, recv: &Buffer, stream: Stream) -> Result<()> {
        let _call = Call::begin(c, &[input_buf(send), Some(recv)], stream)?;
        host::allgather(c, src(send), recv.ptr(), recv.count() / c.size() as usize, recv.dtype())
    }

    fn allgatherv(&self, c: &Communicator, send: Input, recv: &Buffer, counts: &[usize], stream: Stream) -> Result<()> {
        let _call = Call::begin(c, &[input_buf(send), Some(recv)], stream)?;
        host::allgatherv(c, src(send), recv.ptr(), counts, recv.dtype())
    }

    fn reduce_scatter(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<()> {
        let Input::Buf(s) = send else { return Err(Error::Internal("in-place reduce_scatter".into())) };
        let mut call = Call::begin(c, &[Some(s), Some(recv)], stream)?;
        if call.gpu_reduce(s.bytes()) {
            mpi_staged::reduce_scatter_ring(&mut call, s, recv, op, true)
        } else {
            mpi_staged::reduce_scatter_staged(&mut call, s, recv, op)
        }
    }

    fn scan(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, exclusive: bool, stream: Stream) -> Result<()> {
        // On a host copy, as the small reductions: MPI would reduce device memory on the CPU
        // (and gpuwire's own MPI operations cannot read device memory).
        let mut call = Call::begin(c, &[input_buf(send), Some(recv)], stream)?;
        mpi_staged::scan_staged(&mut call, send, recv, op, exclusive)
    }

    fn alltoall(&self, c: &Communicator, send: Input, recv: &Buffer, stream: Stream) -> Result<()> {
        let _call = Call::begin(c, &[input_buf(send), Some(recv)], stream)?;
        host::alltoall(c, src(send), recv.ptr(), recv.count() / c.size() as usize, recv.dtype())
    }

    fn gather(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, root: i32, stream: Stream) -> Result<()> {
        let _call = Call::begin(c, &[input_buf(send), recv], stream)?;
        let n = match (send, recv) {
            (Input::Buf(b), _) => b.count(),
            (Input::InPlace, Some(r)) => r.count() / c.size() as usize,
            _ => return Err(Error::Internal("in-place gather off the root".into())),
        };
        let dtype = input_buf(send).or(recv).map(|b| b.dtype()).expect("a buffer");
        host::gather(c, src(send), recv.map_or(0, |r| r.ptr()), n, dtype, root)
    }

    fn scatter(&self, c: &Communicator, send: Option<&Buffer>, recv: Input, root: i32, stream: Stream) -> Result<()> {
        let _call = Call::begin(c, &[send, input_buf(recv)], stream)?;
        let (n, dtype) = match (recv, send) {
            (Input::Buf(b), _) => (b.count(), b.dtype()),
            (Input::InPlace, Some(s)) => (s.count() / c.size() as usize, s.dtype()),
            _ => return Err(Error::Internal("in-place scatter off the root".into())),
        };
        host::scatter(c, send.map_or(0, |s| s.ptr()), src(recv), n, dtype, root)
    }

    fn alltoallv(&self, c: &Communicator, send: Input, sb: Blocks, recv: &Buffer, rb: Blocks, stream: Stream) -> Result<()> {
        let mut call = Call::begin(c, &[input_buf(send), Some(recv)], stream)?;
        let dtype = recv.dtype();
        match send {
            Input::Buf(b) => host::alltoallv(c, b.ptr(), sb, recv.ptr(), rb, dtype),
            Input::InPlace if recv.is_host() => host::from_copy(recv.ptr(), rb.extent(), dtype, |copy| host::alltoallv(c, copy, rb, recv.ptr(), rb, dtype)),
            Input::InPlace => {
                // The input copied aside on the device, which the receives then overwrite.
                let bytes = rb.extent() * dtype.size();
                let tmp = call.st.dev[1].get(bytes)?;
                crate::device::copy_async(tmp, recv.ptr(), bytes, stream)?;
                crate::device::sync(stream)?;
                host::alltoallv(c, tmp, rb, recv.ptr(), rb, dtype)
            }
        }
    }

    fn gatherv(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, rb: Option<Blocks>, root: i32, stream: Stream) -> Result<()> {
        let _call = Call::begin(c, &[input_buf(send), recv], stream)?;
        let (count, dtype) = match (send, recv) {
            (Input::Buf(b), _) => (b.count(), b.dtype()),
            (Input::InPlace, Some(r)) => (0, r.dtype()),
            _ => return Err(Error::Internal("in-place gatherv off the root".into())),
        };
        host::gatherv(c, src(send), count, recv.map_or(0, |r| r.ptr()), rb, dtype, root)
    }

    fn scatterv(&self, c: &Communicator, send: Option<&Buffer>, sb: Option<Blocks>, recv: Input, root: i32, stream: Stream) -> Result<()> {
        let _call = Call::begin(c, &[send, input_buf(recv)], stream)?;
        let (count, dtype) = match (recv, send) {
            (Input::Buf(b), _) => (b.count(), b.dtype()),
            (Input::InPlace, Some(s)) => (0, s.dtype()),
            _ => return Err(Error::Internal("in-place scatterv off the root".into())),
        };
        host::scatterv(c, send.map_or(0, |s| s.ptr()), sb, src(recv), count, dtype, root)
    }

    fn reduce_scatterv(&self, c: &Communicator, send: Input, recv: &Buffer, counts: &[usize], op: ReduceOp, stream: Stream) -> Result<()> {
        // MPI reduces a host copy (its own reduction of device memory runs on the CPU, and
        // gpuwire's float16 operations read the memory on the host).
        let mut call = Call::begin(c, &[input_buf(send), Some(recv)], stream)?;
        mpi_staged::reduce_scatterv_staged(&mut call, send, recv, counts, op)
    }
}
