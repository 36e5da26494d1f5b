//! Ring reduce-scatter and allgather over MPI point-to-point, reducing on the GPU: the large-message
//! reduction algorithm of the MPI device backends.
//!
//! The data (n elements) is split into P blocks with the default partition (the first n mod P
//! ranks get one more element). Reduce-scatter takes P-1 steps; in step s rank r sends block
//! (r-s-1) mod P to rank r+1 and receives block (r-s-2) mod P from rank r-1, combining it into
//! its own copy, so rank r ends with the fully reduced block r. Allgather then circulates the
//! reduced blocks in P-1 steps. Every block is reduced in one place, in one order, so all ranks
//! end with identical bits.
//!
//! Each step is an [`exchange`]: either *staged* (device chunks copied to host staging,
//! MPI on the host copies, results copied back and combined by a kernel, with the copies of
//! chunk i+1 overlapping the MPI transfer of chunk i) or *direct* (device pointers handed to a
//! CUDA-aware MPI).

use std::ffi::c_int;

use crate::backend::devstate::DevState;
use crate::comm::Communicator;
use crate::device::{self, Stream, kernels};
use crate::error::Result;
use crate::mpisys::{self, RawRequest, sys};
use crate::reduce;
use crate::types::{Dtype, ReduceOp};

/// Tag of gpuwire's own ring messages (on the private communicator).
const RING_TAG: c_int = 7;

/// A memory location and whether the CPU can access it directly.
#[derive(Clone, Copy, Debug)]
pub struct Loc {
    pub ptr: usize,
    pub host: bool,
}

impl Loc {
    pub fn at(self, bytes: usize) -> Loc {
        Loc { ptr: self.ptr + bytes, host: self.host }
    }
}

/// What happens to received data.
#[derive(Clone, Copy, Debug)]
pub enum Sink {
    /// It replaces the destination.
    Copy,
    /// It is combined into the destination: `dst = received op dst`.
    Combine(Dtype, ReduceOp),
}

/// The default partition of n elements over p ranks: (offset, length) per rank, the first
/// n mod p ranks one element longer.
pub fn partition(n: usize, p: usize) -> Vec<(usize, usize)> {
    let (q, rem) = (n / p, n % p);
    let mut off = 0;
    (0..p)
        .map(|r| {
            let len = q + (r < rem) as usize;
            let b = (off, len);
            off += len;
            b
        })
        .collect()
}

/// Copies `bytes` from `src` to `dst`: on the host at once when both are host memory, else
/// enqueued on `stream`.
pub fn copy(dst: Loc, src: Loc, bytes: usize, stream: Stream) -> Result<()> {
    if bytes == 0 || dst.ptr == src.ptr {
        return Ok(());
    }
    if dst.host && src.host {
        // SAFETY: both ranges are valid host memory for `bytes` (validated by the callers).
        unsafe { std::ptr::copy(src.ptr as *const u8, dst.ptr as *mut u8, bytes) };
        return Ok(());
    }
    device::copy_async(dst.ptr, src.ptr, bytes, stream)
}

/// Combines `n` elements at `src` into `dst` (`dst = src op dst`). Device memory uses the
/// GPU kernel on `stream`; host memory the CPU.
pub fn combine(device: i32, dst: Loc, src: Loc, n: usize, dtype: Dtype, op: ReduceOp, stream: Stream) -> Result<()> {
    if dst.host {
        // SAFETY: both are host memory valid for n elements.
        unsafe { reduce::combine(dtype, op, dst.ptr as *mut u8, src.ptr as *const u8, n) }
    } else {
        kernels::combine(device, dtype, op, dst.ptr, src.ptr, n, stream)
    }
}

/// Divides `n` elements at `x` by `d` (AVG), on the GPU for device memory.
pub fn divide(device: i32, x: Loc, n: usize, dtype: Dtype, d: usize, stream: Stream) -> Result<()> {
    if x.host {
        // SAFETY: host memory valid for n elements.
        unsafe { reduce::divide(dtype, x.ptr as *mut u8, n, d) }
    } else {
        kernels::divide(device, dtype, x.ptr, n, d as i64, stream)
    }
}

fn isend(comm: sys::MPI_Comm, ptr: usize, bytes: usize, dest: i32) -> Result<RawRequest> {
    let mut req = mpisys::request_null();
    let n = mpisys::Count::new(Dtype::GPUWIRE_UINT8, bytes)?;
    let _mpi = crate::runtime::mpi_lock();
    // SAFETY: ptr valid for `bytes` until the request completes (callers wait before reuse).
    mpisys::check(unsafe { sys::MPI_Isend(ptr as *const _, n.n, n.dt, dest, RING_TAG, comm, &mut req) }, "MPI_Isend")?;
    Ok(RawRequest(req))
}

fn irecv(comm: sys::MPI_Comm, ptr: usize, bytes: usize, source: i32) -> Result<RawRequest> {
    let mut req = mpisys::request_null();
    let n = mpisys::Count::new(Dtype::GPUWIRE_UINT8, bytes)?;
    let _mpi = crate::runtime::mpi_lock();
    // SAFETY: as above.
    mpisys::check(unsafe { sys::MPI_Irecv(ptr as *mut _, n.n, n.dt, source, RING_TAG, comm, &mut req) }, "MPI_Irecv")?;
    Ok(RawRequest(req))
}

/// Waits for the requests of one ring step of a call on `c`: with the call's deadline when it
/// has one (`Communicator::wait_mpi`; at the deadline the step is abandoned).
fn wait_all(c: &Communicator, reqs: &mut Vec<RawRequest>) -> Result<()> {
    let mut raw: Vec<sys::MPI_Request> = reqs.iter().map(|r| r.0).collect();
    reqs.clear();
    if raw.is_empty() {
        return Ok(());
    }
    if c.nb_p2p() {
        for r in raw.iter_mut() {
            c.wait_mpi(r, "MPI_Waitall (ring step)", crate::comm::Waited::PointToPoint)?;
        }
        return Ok(());
    }
    // SAFETY: active requests of ours.
    mpisys::check(
        unsafe { sys::MPI_Waitall(raw.len() as c_int, raw.as_mut_ptr(), sys::RSMPI_STATUSES_IGNORE) },
        "MPI_Waitall",
    )
}

/// One ring step: sends `sbytes` at `send` to `dest` and receives `rbytes` from `source` into
/// `recv` according to `sink`. Returns when the received data is in place.
#[allow(clippy::too_many_arguments)]
pub fn exchange(
    st: &mut DevState,
    c: &Communicator,
    direct: bool,
    send: Loc,
    sbytes: usize,
    dest: i32,
    recv: Loc,
    rbytes: usize,
    source: i32,
    sink: Sink,
    stream: Stream,
) -> Result<()> {
    crate::trace!("ring exchange ({}): send {sbytes} B to {dest}, receive {rbytes} B from {source}", if direct { "direct" } else { "staged" });
    if direct {
        exchange_direct(st, c, send, sbytes, dest, recv, rbytes, source, sink, stream)
    } else {
        exchange_staged(st, c, send, sbytes, dest, recv, rbytes, source, sink, stream)
    }
}

#[allow(clippy::too_many_arguments)]
fn exchange_direct(st: &mut DevState, c: &Communicator, send: Loc, sbytes: usize, dest: i32, recv: Loc, rbytes: usize, source: i32, sink: Sink, stream: Stream) -> Result<()> {
    // The data sent may have been produced by a kernel on `stream` (the previous step).
    device::sync(stream)?;
    let comm = st.coll.0;
    let target = match sink {
        Sink::Copy => recv,
        Sink::Combine(..) => Loc { ptr: st.dev[0].get(rbytes)?, host: false },
    };
    let mut reqs = Vec::with_capacity(2);
    if rbytes > 0 {
        reqs.push(irecv(comm, target.ptr, rbytes, source)?);
    }
    if sbytes > 0 {
        reqs.push(isend(comm, send.ptr, sbytes, dest)?);
    }
    wait_all(c, &mut reqs)?;
    if let Sink::Combine(dtype, op) = sink {
        if rbytes > 0 {
            let tmp = if recv.host {
                // A host destination: bring the received device data over first.
                let h = st.host[1].get(rbytes)?;
                device::copy_async(h, target.ptr, rbytes, stream)?;
                device::sync(stream)?;
                Loc { ptr: h, host: true }
            } else {
                target
            };
            combine(st.device, recv, tmp, rbytes / dtype.size(), dtype, op, stream)?;
        }
    }
    device::sync(stream)
}

#[allow(clippy::too_many_arguments)]
fn exchange_staged(st: &mut DevState, c: &Communicator, send: Loc, sbytes: usize, dest: i32, recv: Loc, rbytes: usize, source: i32, sink: Sink, stream: Stream) -> Result<()> {
    let esize = match sink {
        Sink::Combine(d, _) => d.size(),
        Sink::Copy => 1,
    };
    // Chunks hold whole elements (every element size divides 16).
    let chunk = (st.chunk / 16 * 16).max(16);
    let ns = sbytes.div_ceil(chunk);
    let nr = rbytes.div_ceil(chunk);
    let sslots = st.host[0].get(2 * chunk)?;
    let rslots = st.host[1].get(2 * chunk)?;
    let dslots = if !recv.host && matches!(sink, Sink::Combine(..)) { st.dev[0].get(2 * chunk)? } else { 0 };
    st.event(3)?;
    let comm = st.coll.0;
    let device = st.device;
    let len = |i: usize, total: usize| chunk.min(total - i * chunk);
    let sslot = |i: usize| if send.host { send.ptr + i * chunk } else { sslots + (i % 2) * chunk };
    // Prologue: the first outgoing chunk to the host.
    if ns > 0 && !send.host {
        device::copy_async(sslot(0), send.ptr, len(0, sbytes), stream)?;
        st.event(0)?.record(stream)?;
    }
    let mut reqs = Vec::with_capacity(2);
    for i in 0..ns.max(nr) {
        if i < ns && !send.host {
            st.event(i % 2)?.wait_host()?;
            if i + 1 < ns {
                // Overlaps the next device-to-host copy with this chunk's transfer. The slot was
                // last read by the send of chunk i-1, which completed.
                device::copy_async(sslot(i + 1), send.ptr + (i + 1) * chunk, len(i + 1, sbytes), stream)?;
                st.event((i + 1) % 2)?.record(stream)?;
            }
        }
        let direct_recv = recv.host && matches!(sink, Sink::Copy);
        let rslot = if direct_recv { recv.ptr + i * chunk } else { rslots + (i % 2) * chunk };
        if i < nr {
            if i >= 2 && !recv.host {
                // The host-to-device copy of chunk i-2 must have read this slot.
                st.event(2 + i % 2)?.wait_host()?;
            }
            reqs.push(irecv(comm, rslot, len(i, rbytes), source)?);
        }
        if i < ns {
            reqs.push(isend(comm, sslot(i), len(i, sbytes), dest)?);
        }
        wait_all(c, &mut reqs)?;
        if i < nr {
            let n = len(i, rbytes);
            let dst = recv.at(i * chunk);
            match sink {
                Sink::Copy if direct_recv => {}
                Sink::Copy => {
                    device::copy_async(dst.ptr, rslot, n, stream)?;
                    st.event(2 + i % 2)?.record(stream)?;
                }
                Sink::Combine(dtype, op) if recv.host => {
                    combine(device, dst, Loc { ptr: rslot, host: true }, n / esize, dtype, op, stream)?;
                }
                Sink::Combine(dtype, op) => {
                    let d = dslots + (i % 2) * chunk;
                    device::copy_async(d, rslot, n, stream)?;
                    st.event(2 + i % 2)?.record(stream)?;
                    combine(device, dst, Loc { ptr: d, host: false }, n / esize, dtype, op, stream)?;
                }
            }
        }
    }
    device::sync(stream)
}

/// Ring reduce-scatter in place on `data` (n elements): afterwards this rank's block of the
/// default partition holds the reduction over all ranks. Returns the partition.
#[allow(clippy::too_many_arguments)]
pub fn reduce_scatter(
    st: &mut DevState,
    c: &Communicator,
    direct: bool,
    data: Loc,
    n: usize,
    dtype: Dtype,
    op: ReduceOp,
    stream: Stream,
) -> Result<Vec<(usize, usize)>> {
    let p = c.size() as usize;
    let r = c.rank() as usize;
    let blocks = partition(n, p);
    let es = dtype.size();
    let (right, left) = (((r + 1) % p) as i32, ((r + p - 1) % p) as i32);
    for s in 0..p.saturating_sub(1) {
        let sb = blocks[(r + 2 * p - s - 1) % p];
        let rb = blocks[(r + 2 * p - s - 2) % p];
        exchange(st, c, direct, data.at(sb.0 * es), sb.1 * es, right, data.at(rb.0 * es), rb.1 * es, left, Sink::Combine(dtype, op), stream)?;
    }
    Ok(blocks)
}

/// Ring allgather in place: every rank contributes its block of the default partition of
/// `data` (n elements) and ends with all blocks.
pub fn allgather(st: &mut DevState, c: &Communicator, direct: bool, data: Loc, n: usize, es: usize, stream: Stream) -> Result<()> {
    let p = c.size() as usize;
    let r = c.rank() as usize;
    let blocks = partition(n, p);
    let (right, left) = (((r + 1) % p) as i32, ((r + p - 1) % p) as i32);
    for s in 0..p.saturating_sub(1) {
        let sb = blocks[(r + p - s) % p];
        let rb = blocks[(r + 2 * p - s - 1) % p];
        exchange(st, c, direct, data.at(sb.0 * es), sb.1 * es, right, data.at(rb.0 * es), rb.1 * es, left, Sink::Copy, stream)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_gives_first_ranks_one_more() {
        assert_eq!(partition(10, 3), vec![(0, 4), (4, 3), (7, 3)]);
        assert_eq!(partition(2, 3), vec![(0, 1), (1, 1), (2, 0)]);
        assert_eq!(partition(0, 2), vec![(0, 0), (0, 0)]);
    }

    /// Simulates the ring schedule on P "ranks" in memory: every rank must end with its block
    /// fully reduced (reduce-scatter) and then all blocks (allgather).
    #[test]
    fn ring_schedule_reduces_every_block_once_per_rank() {
        for p in 1..6usize {
            let n = 17;
            let blocks = partition(n, p);
            // data[r][i] = contributions mask: which ranks' values are summed into element i.
            let mut data: Vec<Vec<u64>> = (0..p).map(|r| vec![1u64 << r; n]).collect();
            for s in 0..p.saturating_sub(1) {
                let sent: Vec<(usize, Vec<u64>)> = (0..p)
                    .map(|r| {
                        let sb = blocks[(r + 2 * p - s - 1) % p];
                        ((r + 1) % p, data[r][sb.0..sb.0 + sb.1].to_vec())
                    })
                    .collect();
                for (to, chunk) in sent {
                    let rb = blocks[(to + 2 * p - s - 2) % p];
                    assert_eq!(rb.1, chunk.len());
                    for (k, v) in chunk.iter().enumerate() {
                        assert_eq!(data[to][rb.0 + k] & v, 0, "a contribution reduced twice");
                        data[to][rb.0 + k] |= v;
                    }
                }
            }
            let all = (1u64 << p) - 1;
            for r in 0..p {
                let b = blocks[r];
                assert!(data[r][b.0..b.0 + b.1].iter().all(|v| *v == all), "p={p} rank {r}");
            }
            for s in 0..p.saturating_sub(1) {
                let sent: Vec<(usize, usize, Vec<u64>)> = (0..p)
                    .map(|r| {
                        let sb = blocks[(r + p - s) % p];
                        ((r + 1) % p, sb.0, data[r][sb.0..sb.0 + sb.1].to_vec())
                    })
                    .collect();
                for (to, off, chunk) in sent {
                    let rb = blocks[(to + 2 * p - s - 1) % p];
                    assert_eq!(rb.0, off);
                    data[to][off..off + chunk.len()].copy_from_slice(&chunk);
                }
            }
            assert!(data.iter().all(|d| d.iter().all(|v| *v == all)), "p={p}");
        }
    }
}
