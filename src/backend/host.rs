//! Plain MPI on memory that MPI can read and write: the HOST path, and the MPI layer that the
//! device backends call with their own (staged or device) pointers.
//!
//! Every function here is as its MPI counterpart (MPI_Send, MPI_Allreduce, ...) plus what MPI
//! lacks: AVG (MPI_SUM, then a division by the communicator size), float16/bfloat16 reductions
//! (gpuwire's user-defined MPI operations, also where the MPI's own operation is wrong) and
//! counts above 2^31-1: bcast, reduce and allreduce split into several MPI calls; point-to-point,
//! allgather, alltoall, gather and scatter send one element of a derived datatype
//! (`mpisys::Count`); allgatherv past int displacements and reduce_scatter past int counts take
//! other MPI calls (MPI_Alltoallw, one reduce per block).

use std::ffi::{c_int, c_void};

use crate::backend::p2p;
use crate::backend::path::{Blocks, Input, Path};
use crate::buffer::Buffer;
use crate::comm::{Communicator, collective};
use crate::device::Stream;
use crate::error::Result;
use crate::mpisys::{self, sys};
use crate::reduce;
use crate::request::Pending;
use crate::runtime;
use crate::types::{Dtype, ReduceOp};

/// Largest element count per MPI call when splitting large bcast/reduce/allreduce.
const MAX_CHUNK: usize = 1 << 30;

fn chunks(count: usize) -> impl Iterator<Item = (usize, usize)> {
    chunks_of(count, MAX_CHUNK)
}

/// (offset, length) of the pieces of `count` elements, at most `chunk` each (one empty piece
/// for count 0).
fn chunks_of(count: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..count.div_ceil(chunk).max(1)).map(move |i| {
        let off = i * chunk;
        (off, (count - off).min(chunk))
    })
}

/// Bytes of the scratch copy that replaces MPI_IN_PLACE at a non-zero reduce root where the MPI
/// crashes on it (`RuntimeInfo::reduce_in_place_root_broken`).
const IN_PLACE_SCRATCH_BYTES: usize = 64 << 20;

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
    pub(crate) fn of(input: Input) -> Src {
        match input {
            Input::InPlace => Src::InPlace,
            Input::Buf(b) => Src::Ptr(b.ptr()),
        }
    }
}

/// MPI_Send of `count` elements at `ptr` (in checking mode with its header: `p2p`).
pub fn send(c: &Communicator, ptr: usize, count: usize, dtype: Dtype, dest: i32, tag: i32) -> Result<()> {
    // ptr is valid for count elements (validated by the caller).
    p2p::send(c, ptr, count, dtype, dest, tag)
}

/// A receive of exactly `count` elements into `ptr`: a message of another size is an error and
/// is never written to the buffer (`p2p`: MPI is not trusted with truncation).
pub fn recv(c: &Communicator, ptr: usize, count: usize, dtype: Dtype, source: i32, tag: i32) -> Result<()> {
    p2p::recv(c, p2p::Want { ptr, count, dtype, source, tag, upto: false }).map(|_| ())
}

/// The request of a send (`p2p::Sending`).
pub type SendPending = p2p::Sending;
/// The request of a receive (`p2p::Recv`).
pub type RecvPending = p2p::Recv;

pub fn isend(c: &Communicator, ptr: usize, count: usize, dtype: Dtype, dest: i32, tag: i32) -> Result<SendPending> {
    // The caller keeps the memory alive until the request completes.
    p2p::isend(c, ptr, count, dtype, dest, tag)
}

pub fn irecv(c: &Communicator, ptr: usize, count: usize, dtype: Dtype, source: i32, tag: i32) -> Result<RecvPending> {
    p2p::post(c, p2p::Want { ptr, count, dtype, source, tag, upto: false })
}

/// A receive of up to `count` elements (as MPI_Irecv: `p2p::Want::upto`).
pub fn irecv_upto(c: &Communicator, ptr: usize, count: usize, dtype: Dtype, source: i32, tag: i32) -> Result<RecvPending> {
    p2p::post(c, p2p::Want { ptr, count, dtype, source, tag, upto: true })
}

/// MPI_Sendrecv, as a send and an exact receive (`recv`), both progressed until complete.
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
    // Nothing moves to or from GPUWIRE_PROC_NULL (callers may then pass a NULL pointer).
    let proc_null = crate::types::PROC_NULL;
    let send = if dest == proc_null { None } else { Some(p2p::isend(c, sptr, scount, sdtype, dest, stag)?) };
    // After the send is posted (a message to oneself then matches at once); the receive's wait
    // progresses MPI, and so the send (MPI_Mprobe, or a test loop when anything else needs it).
    let want = p2p::Want { ptr: rptr, count: rcount, dtype: rdtype, source, tag: rtag, upto: false };
    let recv = if source == proc_null { Ok(()) } else { p2p::recv(c, want).map(|_| ()) };
    // The send is completed whatever the receive did (as MPI_Sendrecv's).
    let sent = send.map_or(Ok(()), |s| s.finish());
    recv.and(sent)
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
    // MPICH before 4.1 crashes in MPI_Reduce with MPI_IN_PLACE at a non-zero root
    // (pmodels/mpich#6540): there the root's contribution goes in from a scratch copy, one
    // scratch-sized piece per call (every rank splits the same way: it depends on the MPI, the
    // root, the count and the datatype only). `recv` is host memory on every path that reduces here.
    let avoid_in_place = info.reduce_in_place_root_broken && root != 0;
    let chunk = if avoid_in_place { (IN_PLACE_SCRATCH_BYTES / dtype.size()).min(MAX_CHUNK) } else { MAX_CHUNK };
    let mut scratch: Vec<u64> = Vec::new();
    if avoid_in_place && is_root && matches!(send, Src::InPlace) {
        scratch = vec![0; (count.min(chunk) * dtype.size()).div_ceil(8)];
    }
    for (off, n) in chunks_of(count, chunk) {
        let r = if is_root { at(recv, off, dtype) } else { std::ptr::null_mut() };
        let s = if scratch.is_empty() {
            send.at(off, dtype)
        } else {
            // SAFETY: recv holds count elements (validated by the caller); scratch holds n.
            unsafe { std::ptr::copy_nonoverlapping(r as *const u8, scratch.as_mut_ptr().cast::<u8>(), n * dtype.size()) };
            scratch.as_ptr().cast()
        };
        // Ranges validated by the caller; n <= 2^30.
        collective!(c, "MPI_Reduce", MPI_Reduce(s, r, n as c_int, mpisys::reduce_datatype(dtype), mop, root, c.raw()), MPI_Ireduce)?;
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
        collective!(c, "MPI_Allreduce", MPI_Allreduce(send.at(off, dtype), at(recv, off, dtype), n as c_int, mpisys::reduce_datatype(dtype), mop, c.raw()), MPI_Iallreduce)?;
    }
    if divide && op == ReduceOp::GPUWIRE_AVG {
        avg_divide(c, recv, count, dtype)?;
    }
    Ok(())
}

/// MPI_Scan (`exclusive` false) or MPI_Exscan, in chunks of at most 2^30 elements (an
/// elementwise prefix splits like allreduce). AVG divides each rank's prefix by the number of
/// ranks it combines (rank + 1; exscan: rank) when `divide`. Exscan leaves rank 0's `recv` as
/// MPI does (MPI leaves it undefined; Open MPI and MPICH do not write it).
#[allow(clippy::too_many_arguments)]
pub fn scan(c: &Communicator, send: Src, recv: usize, count: usize, dtype: Dtype, op: ReduceOp, exclusive: bool, divide: bool) -> Result<()> {
    let info = runtime::ensure_ready()?;
    let mop = runtime::mpi_op(info, dtype, op);
    for (off, n) in chunks(count) {
        let (s, r, dt) = (send.at(off, dtype), at(recv, off, dtype), mpisys::reduce_datatype(dtype));
        // Ranges validated by the caller; n <= 2^30.
        if exclusive {
            collective!(c, "MPI_Exscan", MPI_Exscan(s, r, n as c_int, dt, mop, c.raw()), MPI_Iexscan)?;
        } else {
            collective!(c, "MPI_Scan", MPI_Scan(s, r, n as c_int, dt, mop, c.raw()), MPI_Iscan)?;
        }
    }
    if divide && op == ReduceOp::GPUWIRE_AVG {
        scan_divide(c, recv, count, dtype, exclusive)?;
    }
    Ok(())
}

/// The number of ranks whose data a scan (`exclusive` false) or exscan combines on this rank:
/// AVG's divisor (0 on exscan's rank 0, whose result is not defined).
pub fn scan_ranks(c: &Communicator, exclusive: bool) -> usize {
    c.rank() as usize + !exclusive as usize
}

/// AVG's division of a scan's result on host memory.
pub fn scan_divide(c: &Communicator, ptr: usize, count: usize, dtype: Dtype, exclusive: bool) -> Result<()> {
    match scan_ranks(c, exclusive) {
        0 => Ok(()),
        // SAFETY: ptr is host memory valid for count elements.
        k => unsafe { reduce::divide(dtype, ptr as *mut u8, count, k) },
    }
}

/// MPI_Allgather of `count` elements per rank.
pub fn allgather(c: &Communicator, send: Src, recv: usize, count: usize, dtype: Dtype) -> Result<()> {
    let n = mpisys::Count::new(dtype, count)?;
    // recv holds size*count elements (validated); a large-count type's extent is count elements.
    collective!(c, "MPI_Allgather", MPI_Allgather(send.at(0, dtype), n.n, n.dt, at(recv, 0, dtype), n.n, n.dt, c.raw()), MPI_Iallgather)
}

/// Displacements of contiguous blocks, as MPI ints (None when a count or a displacement does not
/// fit one).
fn displs(counts: &[usize]) -> Option<(Vec<c_int>, Vec<c_int>)> {
    let mut cs = Vec::with_capacity(counts.len());
    let mut ds = Vec::with_capacity(counts.len());
    let mut off = 0usize;
    for &n in counts {
        cs.push(c_int::try_from(n).ok()?);
        ds.push(c_int::try_from(off).ok()?);
        off = off.checked_add(n)?;
    }
    Some((cs, ds))
}

/// MPI_Allgatherv with blocks placed contiguously in rank order. Where a count or a displacement
/// passes MPI's int: MPI_Alltoallw with one derived datatype per block (its displacement inside
/// the type, in MPI_Aint), every rank sending its block to every rank.
pub fn allgatherv(c: &Communicator, send: Src, recv: usize, counts: &[usize], dtype: Dtype) -> Result<()> {
    let Some((cs, ds)) = displs(counts) else { return allgatherv_large(c, send, recv, counts, dtype) };
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

fn allgatherv_large(c: &Communicator, send: Src, recv: usize, counts: &[usize], dtype: Dtype) -> Result<()> {
    gatherv_large(c, send, recv, counts, dtype, None)
}

/// MPI_Allgatherv (`root` None) or MPI_Gatherv to `root` of blocks placed contiguously in rank
/// order, for counts and displacements past MPI's int: MPI_Alltoallw with one derived datatype
/// per block (its displacement inside the type, in MPI_Aint). In place (`Src::InPlace`), this
/// rank's block already sits in `recv`: it sends from there and skips itself.
pub fn gatherv_large(c: &Communicator, send: Src, recv: usize, counts: &[usize], dtype: Dtype, root: Option<i32>) -> Result<()> {
    let me = c.rank() as usize;
    let p = counts.len();
    let receives = root.is_none_or(|r| r as usize == me);
    let mut recvtypes = Vec::with_capacity(p);
    let mut off = 0usize;
    for &n in counts {
        if receives {
            recvtypes.push(mpisys::Count::at(dtype, n, off)?);
        }
        off = off.checked_add(n).ok_or_else(|| crate::error::Error::InvalidArgument("the counts overflow".into()))?;
    }
    let mine = mpisys::Count::new(dtype, counts[me])?;
    let (s, to_self) = match send {
        Src::InPlace => (at(recv, off_of(counts, me), dtype) as *const c_void, 0),
        Src::Ptr(p) => (at(p, 0, dtype) as *const c_void, 1),
    };
    let mut scounts = vec![0 as c_int; p];
    let mut rcounts = vec![0 as c_int; p];
    for j in 0..p {
        if root.is_none_or(|r| r as usize == j) {
            scounts[j] = mine.n;
        }
        if receives {
            rcounts[j] = 1;
        }
    }
    if receives {
        scounts[me] = if to_self == 0 { 0 } else { mine.n };
        rcounts[me] = to_self;
    }
    let zeros = vec![0 as c_int; p];
    let stypes = vec![mine.dt; p];
    let rtypes: Vec<sys::MPI_Datatype> = if receives { recvtypes.iter().map(|t| t.dt).collect() } else { vec![mine.dt; p] };
    // recv holds sum(counts) elements where it receives (validated); every array lives until the
    // call returns.
    let (s, r) = apart(s, &scounts, at(recv, 0, dtype), &rcounts);
    collective!(
        c,
        "MPI_Alltoallw (gatherv of large blocks)",
        MPI_Alltoallw(s, scounts.as_ptr(), zeros.as_ptr(), stypes.as_ptr(), r, rcounts.as_ptr(), zeros.as_ptr(), rtypes.as_ptr(), c.raw()),
        MPI_Ialltoallw
    )
}

fn off_of(counts: &[usize], r: usize) -> usize {
    counts[..r].iter().sum()
}

/// MPI_Reduce_scatter_block: `count` result elements per rank. Where `count` or the whole
/// input (`count` x ranks) passes MPI's int: one (chunked) reduce per rank's block to that rank.
pub fn reduce_scatter(c: &Communicator, send: Src, recv: usize, count: usize, dtype: Dtype, op: ReduceOp, divide: bool) -> Result<()> {
    let info = runtime::ensure_ready()?;
    let p = c.size() as usize;
    let (Ok(n), Some(Ok(_))) = (c_int::try_from(count), count.checked_mul(p).map(c_int::try_from)) else {
        let Src::Ptr(sp) = send else { return Err(crate::error::Error::Internal("in-place reduce_scatter".into())) };
        for j in 0..p {
            let r = if j == c.rank() as usize { recv } else { 0 };
            reduce(c, Src::Ptr(sp + j * count * dtype.size()), r, count, dtype, op, j as i32, divide)?;
        }
        return Ok(());
    };
    let mop = runtime::mpi_op(info, dtype, op);
    // send holds size*count elements, recv count (validated).
    collective!(c, "MPI_Reduce_scatter_block", MPI_Reduce_scatter_block(send.at(0, dtype), at(recv, 0, dtype), n, mpisys::reduce_datatype(dtype), mop, c.raw()), MPI_Ireduce_scatter_block)?;
    if divide && op == ReduceOp::GPUWIRE_AVG {
        avg_divide(c, recv, count, dtype)?;
    }
    Ok(())
}

/// MPI_Alltoall with `count` elements per pair of ranks.
pub fn alltoall(c: &Communicator, send: Src, recv: usize, count: usize, dtype: Dtype) -> Result<()> {
    let n = mpisys::Count::new(dtype, count)?;
    let dt = n.dt;
    let (s, sn) = match send {
        Src::InPlace => (mpisys::in_place() as *const c_void, 0),
        Src::Ptr(_) => (send.at(0, dtype), n.n),
    };
    // Both hold size*count elements (validated); a large-count type's extent is count elements.
    collective!(c, "MPI_Alltoall", MPI_Alltoall(s, sn, dt, at(recv, 0, dtype), n.n, dt, c.raw()), MPI_Ialltoall)
}

/// `alltoall` of host memory: in place from a copy of `recv` (`in_place_copy`), not with
/// MPI_IN_PLACE, which MPI requires on every rank or none (MPICH hangs where ranks mix them
/// above its short-message sizes), so that ranks may mix in place and not, as in alltoallv.
pub fn alltoall_host(c: &Communicator, send: Src, recv: usize, count: usize, dtype: Dtype) -> Result<()> {
    let Src::InPlace = send else { return alltoall(c, send, recv, count, dtype) };
    // `recv` holds size x count elements (validated by the caller).
    from_copy(recv, count * c.size() as usize, dtype, |copy| alltoall(c, Src::Ptr(copy), recv, count, dtype))
}

/// MPI_Gather of `count` elements per rank; `recv` significant at the root.
pub fn gather(c: &Communicator, send: Src, recv: usize, count: usize, dtype: Dtype, root: i32) -> Result<()> {
    let n = mpisys::Count::new(dtype, count)?;
    let r = if c.rank() == root { at(recv, 0, dtype) } else { std::ptr::null_mut() };
    // Validated by the caller; a large-count type's extent is count elements.
    collective!(c, "MPI_Gather", MPI_Gather(send.at(0, dtype), n.n, n.dt, r, n.n, n.dt, root, c.raw()), MPI_Igather)
}

/// MPI_Scatter of `count` elements per rank; `send` significant at the root. `recv` is
/// `Src::InPlace` at a root that keeps its block in place.
pub fn scatter(c: &Communicator, send: usize, recv: Src, count: usize, dtype: Dtype, root: i32) -> Result<()> {
    if c_int::try_from(count).is_err() {
        return scatter_large(c, send, recv, count, dtype, root);
    }
    let n = mpisys::Count::new(dtype, count)?;
    let s = if c.rank() == root { at(send, 0, dtype) } else { std::ptr::null_mut() };
    let r = match recv {
        Src::InPlace => mpisys::in_place(),
        Src::Ptr(p) => at(p, 0, dtype),
    };
    // Validated by the caller.
    collective!(c, "MPI_Scatter", MPI_Scatter(s, n.n, n.dt, r, n.n, n.dt, root, c.raw()), MPI_Iscatter)
}

/// MPI_Scatter past MPI's int count, as MPI_Alltoallw: MPICH 4.0's MPI_Scatter crashes on a
/// block of one large derived datatype, so the root sends block j to rank j as one element of a
/// derived type that holds it at its displacement.
fn scatter_large(c: &Communicator, send: usize, recv: Src, count: usize, dtype: Dtype, root: i32) -> Result<()> {
    let (me, p) = (c.rank() as usize, c.size() as usize);
    let is_root = me == root as usize;
    let block = mpisys::Count::new(dtype, count)?;
    let mut sendtypes = Vec::with_capacity(p);
    if is_root {
        for j in 0..p {
            let displ = j.checked_mul(count).ok_or_else(|| crate::error::Error::InvalidArgument("scatter: the counts overflow".into()))?;
            sendtypes.push(mpisys::Count::at(dtype, count, displ)?);
        }
    }
    let (r, mine) = match recv {
        Src::InPlace => (std::ptr::null_mut(), 0),
        Src::Ptr(ptr) => (at(ptr, 0, dtype), 1),
    };
    let mut scounts = vec![0 as c_int; p];
    let mut rcounts = vec![0 as c_int; p];
    if is_root {
        scounts.iter_mut().for_each(|x| *x = 1);
        scounts[me] = mine;
    }
    rcounts[root as usize] = mine;
    let zeros = vec![0 as c_int; p];
    let stypes: Vec<sys::MPI_Datatype> = if is_root { sendtypes.iter().map(|t| t.dt).collect() } else { vec![block.dt; p] };
    let rtypes = vec![block.dt; p];
    let s = if is_root { at(send, 0, dtype) } else { std::ptr::null_mut() };
    let (s, r) = apart(s, &scounts, r, &rcounts);
    // Validated by the caller; every array lives until the call returns.
    collective!(
        c,
        "MPI_Alltoallw (scatter of large blocks)",
        MPI_Alltoallw(s, scounts.as_ptr(), zeros.as_ptr(), stypes.as_ptr(), r, rcounts.as_ptr(), zeros.as_ptr(), rtypes.as_ptr(), c.raw()),
        MPI_Ialltoallw
    )
}

/// One rank's side of MPI_Alltoallw: `sb[j]` = (count, displacement) in elements of the block
/// of `send` for rank j, `rb[j]` the block of `recv` from rank j. A block is (count, byte
/// displacement, the element type) where both fit MPI's int, else one element of a derived
/// datatype that holds it at its displacement (`mpisys::Count::at`). The v-collectives with
/// caller displacements go through it: only MPI_Alltoallw lets each rank pick its own
/// representation (MPI_Alltoallv or MPI_Gatherv past int would have to be chosen alike on every
/// rank, and no rank knows the others' counts).
pub fn alltoallw(c: &Communicator, what: &str, send: usize, sb: &[(usize, usize)], recv: usize, rb: &[(usize, usize)], dtype: Dtype) -> Result<()> {
    let (p, me) = (c.size() as usize, c.rank() as usize);
    let base = mpisys::datatype(dtype);
    let es = dtype.size();
    let mut owned: Vec<mpisys::Count> = Vec::new();
    let mut side = |blocks: &[(usize, usize)]| -> Result<(Vec<c_int>, Vec<c_int>, Vec<sys::MPI_Datatype>)> {
        let (mut ns, mut ds, mut ts) = (vec![0 as c_int; p], vec![0 as c_int; p], vec![base; p]);
        for (j, &(n, d)) in blocks.iter().enumerate() {
            if n == 0 {
                continue;
            }
            // Open MPI's single-rank MPI_Alltoallw (coll/self) scales the byte displacement by
            // the extent: this rank's own block goes as a derived type at displacement 0.
            let own_displaced = j == me && d > 0;
            match (c_int::try_from(n), d.checked_mul(es).and_then(|b| c_int::try_from(b).ok())) {
                (Ok(n), Some(b)) if !own_displaced => {
                    ns[j] = n;
                    ds[j] = b;
                }
                _ => {
                    let t = mpisys::Count::at(dtype, n, d)?;
                    ns[j] = t.n;
                    ts[j] = t.dt;
                    owned.push(t);
                }
            }
        }
        Ok((ns, ds, ts))
    };
    let (sn, sd, st) = side(sb)?;
    let (rn, rd, rt) = side(rb)?;
    let s = match send {
        0 => std::ptr::null(),
        IN_PLACE => mpisys::in_place(),
        p => p as *const c_void,
    };
    let (s, r) = apart(s, &sn, recv as *mut c_void, &rn);
    // Every block lies inside its buffer (validated by the caller); every array lives until the
    // call returns.
    let r = collective!(
        c,
        what,
        MPI_Alltoallw(s, sn.as_ptr(), sd.as_ptr(), st.as_ptr(), r, rn.as_ptr(), rd.as_ptr(), rt.as_ptr(), c.raw()),
        MPI_Ialltoallw
    );
    if r.is_err() {
        // An abandoned request (a timeout) may still read the arrays and types.
        std::mem::forget((sn, sd, st, rn, rd, rt, owned));
    }
    r
}

/// `alltoallw`'s send address for MPI_IN_PLACE (no buffer lives at address 1).
const IN_PLACE: usize = 1;

/// The send and receive addresses of an MPI_Alltoallw, never the same unless MPI_IN_PLACE is
/// meant: Open MPI's nonblocking form (libnbc) takes a send buffer equal to the receive buffer
/// for in place, and then never sends. A gatherv's or scatterv's root whose own block is empty
/// and first passes such a pair (a timeout makes gpuwire use the nonblocking form: the other
/// ranks then waited for ever). The side whose counts are all 0 passes NULL instead.
fn apart(s: *const c_void, sn: &[c_int], r: *mut c_void, rn: &[c_int]) -> (*const c_void, *mut c_void) {
    if s.is_null() || s != r as *const c_void || s == mpisys::in_place() {
        return (s, r);
    }
    if rn.iter().all(|&n| n == 0) {
        (s, std::ptr::null_mut())
    } else if sn.iter().all(|&n| n == 0) {
        (std::ptr::null(), r)
    } else {
        (s, r)
    }
}

fn pairs(b: Blocks) -> Vec<(usize, usize)> {
    b.counts.iter().copied().zip(b.displs.iter().copied()).collect()
}

/// MPI_Alltoallv of blocks `sb` of `send` to blocks `rb` of `recv` (not in place: see
/// [`in_place_copy`]).
pub fn alltoallv(c: &Communicator, send: usize, sb: Blocks, recv: usize, rb: Blocks, dtype: Dtype) -> Result<()> {
    alltoallw(c, "MPI_Alltoallw (alltoallv)", send, &pairs(sb), recv, &pairs(rb), dtype)
}

/// A host copy of the first `elems` elements at `ptr` (an in-place alltoallv's input: sent from
/// there while the receives overwrite the buffer; MPI_IN_PLACE is not used, so that ranks may mix
/// in-place and not).
pub fn in_place_copy(ptr: usize, elems: usize, dtype: Dtype) -> Vec<u64> {
    let bytes = elems * dtype.size();
    let mut v = vec![0u64; bytes.div_ceil(8)];
    // SAFETY: host memory of `elems` elements (validated by the caller).
    unsafe { std::ptr::copy_nonoverlapping(ptr as *const u8, v.as_mut_ptr().cast::<u8>(), bytes) };
    v
}

/// `f` of the address of an `in_place_copy` of `elems` elements at `ptr`: an in-place exchange
/// sent from the copy. Where `f` fails, the copy is never freed (an abandoned request may still
/// read it).
pub fn from_copy(ptr: usize, elems: usize, dtype: Dtype, f: impl FnOnce(usize) -> Result<()>) -> Result<()> {
    let copy = in_place_copy(ptr, elems, dtype);
    let r = f(copy.as_ptr() as usize);
    if r.is_err() {
        std::mem::forget(copy);
    }
    r
}

/// MPI_Gatherv to `root` of `count` elements from `send` (`Src::InPlace`: the root's block is
/// already in `recv`) into blocks `rb` of the root's `recv`.
pub fn gatherv(c: &Communicator, send: Src, count: usize, recv: usize, rb: Option<Blocks>, dtype: Dtype, root: i32) -> Result<()> {
    let p = c.size() as usize;
    let (me, root) = (c.rank() as usize, root as usize);
    let mut sb = vec![(0, 0); p];
    let s = match send {
        Src::InPlace => 0,
        Src::Ptr(ptr) => {
            sb[root] = (count, 0);
            ptr
        }
    };
    let mut r = rb.map_or(vec![(0, 0); p], pairs);
    if me == root && matches!(send, Src::InPlace) {
        r[me] = (0, 0);
    }
    alltoallw(c, "MPI_Alltoallw (gatherv)", s, &sb, if me == root { recv } else { 0 }, &r, dtype)
}

/// MPI_Scatterv from blocks `sb` of the root's `send` to `count` elements of `recv`
/// (`Src::InPlace` at the root: its block stays in `send`).
pub fn scatterv(c: &Communicator, send: usize, sb: Option<Blocks>, recv: Src, count: usize, dtype: Dtype, root: i32) -> Result<()> {
    let p = c.size() as usize;
    let (me, root) = (c.rank() as usize, root as usize);
    let mut s = sb.map_or(vec![(0, 0); p], pairs);
    let mut rb = vec![(0, 0); p];
    let r = match recv {
        Src::InPlace => {
            s[me] = (0, 0);
            0
        }
        Src::Ptr(ptr) => {
            rb[root] = (count, 0);
            ptr
        }
    };
    alltoallw(c, "MPI_Alltoallw (scatterv)", if me == root { send } else { 0 }, &s, r, &rb, dtype)
}

/// MPI_Reduce_scatter: rank r receives the reduction of block r (`counts[r]` elements,
/// contiguous in rank order); in place (`Src::InPlace`) the input is `recv` and the result its
/// first `counts[r]` elements. Where a count or the sum passes MPI's int: one (chunked) reduce
/// per block to its rank (the counts are the same on every rank, so is the choice).
pub fn reduce_scatterv(c: &Communicator, send: Src, recv: usize, counts: &[usize], dtype: Dtype, op: ReduceOp, divide: bool) -> Result<()> {
    let info = runtime::ensure_ready()?;
    let me = c.rank() as usize;
    let total: usize = counts.iter().sum();
    let ints: Option<Vec<c_int>> = counts.iter().map(|n| c_int::try_from(*n).ok()).collect();
    let Some(ints) = ints.filter(|_| c_int::try_from(total).is_ok()) else {
        let es = dtype.size();
        for (j, &n) in counts.iter().enumerate() {
            let off = off_of(counts, j);
            let (s, r) = match send {
                Src::Ptr(sp) => (Src::Ptr(sp + off * es), if j == me { recv } else { 0 }),
                // In place: block j of `recv` is this rank's input; its own block is reduced
                // where it lies and moved to the start once every block has been reduced.
                Src::InPlace if j == me => (Src::InPlace, recv + off * es),
                Src::InPlace => (Src::Ptr(recv + off * es), 0),
            };
            reduce(c, s, r, n, dtype, op, j as i32, divide)?;
        }
        if matches!(send, Src::InPlace) && off_of(counts, me) > 0 {
            // SAFETY: recv holds the sum of the counts (validated); ptr::copy allows overlap.
            unsafe { std::ptr::copy((recv + off_of(counts, me) * es) as *const u8, recv as *mut u8, counts[me] * es) };
        }
        return Ok(());
    };
    let mop = runtime::mpi_op(info, dtype, op);
    // send (or recv, in place) holds the sum of the counts, recv counts[me] (validated); `ints`
    // lives until the call returns.
    let r = collective!(
        c,
        "MPI_Reduce_scatter",
        MPI_Reduce_scatter(send.at(0, dtype), at(recv, 0, dtype), ints.as_ptr(), mpisys::reduce_datatype(dtype), mop, c.raw()),
        MPI_Ireduce_scatter
    );
    if r.is_err() {
        std::mem::forget(ints);
        return r;
    }
    if divide && op == ReduceOp::GPUWIRE_AVG {
        avg_divide(c, recv, counts[me], dtype)?;
    }
    Ok(())
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
        Ok(p2p::boxed_send(isend(c, buf.ptr(), buf.count(), buf.dtype(), dest, tag)?))
    }
    fn irecv(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, _s: Stream) -> Result<Box<dyn Pending>> {
        Ok(p2p::boxed_recv(irecv(c, buf.ptr(), buf.count(), buf.dtype(), source, tag)?))
    }
    fn irecv_upto(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, _s: Stream) -> Result<Box<dyn Pending>> {
        Ok(p2p::boxed_recv(irecv_upto(c, buf.ptr(), buf.count(), buf.dtype(), source, tag)?))
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
    fn scan(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, exclusive: bool, _s: Stream) -> Result<()> {
        scan(c, Src::of(send), recv.ptr(), recv.count(), recv.dtype(), op, exclusive, true)
    }
    fn alltoall(&self, c: &Communicator, send: Input, recv: &Buffer, _s: Stream) -> Result<()> {
        alltoall_host(c, Src::of(send), recv.ptr(), recv.count() / c.size() as usize, recv.dtype())
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
    fn alltoallv(&self, c: &Communicator, send: Input, sb: Blocks, recv: &Buffer, rb: Blocks, _s: Stream) -> Result<()> {
        match send {
            Input::Buf(b) => alltoallv(c, b.ptr(), sb, recv.ptr(), rb, recv.dtype()),
            // Device memory here is the host side of a stream-ordered CUDA-aware call
            // (`ordered`), which makes no CUDA call: the MPI does the in-place exchange itself
            // (MPI_IN_PLACE: there every rank must then be in place, as MPI requires).
            Input::InPlace if !recv.is_host() => {
                alltoallw(c, "MPI_Alltoallw (alltoallv in place)", IN_PLACE, &pairs(rb), recv.ptr(), &pairs(rb), recv.dtype())
            }
            Input::InPlace => from_copy(recv.ptr(), rb.extent(), recv.dtype(), |copy| alltoallv(c, copy, rb, recv.ptr(), rb, recv.dtype())),
        }
    }
    fn gatherv(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, rb: Option<Blocks>, root: i32, _s: Stream) -> Result<()> {
        let (count, dtype) = match (send, recv) {
            (Input::Buf(b), _) => (b.count(), b.dtype()),
            (Input::InPlace, Some(r)) => (0, r.dtype()),
            (Input::InPlace, None) => unreachable!("in-place gatherv is only possible at the root"),
        };
        gatherv(c, Src::of(send), count, recv.map_or(0, |r| r.ptr()), rb, dtype, root)
    }
    fn scatterv(&self, c: &Communicator, send: Option<&Buffer>, sb: Option<Blocks>, recv: Input, root: i32, _s: Stream) -> Result<()> {
        let (count, dtype) = match (recv, send) {
            (Input::Buf(b), _) => (b.count(), b.dtype()),
            (Input::InPlace, Some(s)) => (0, s.dtype()),
            (Input::InPlace, None) => unreachable!("in-place scatterv is only possible at the root"),
        };
        scatterv(c, send.map_or(0, |s| s.ptr()), sb, Src::of(recv), count, dtype, root)
    }
    fn reduce_scatterv(&self, c: &Communicator, send: Input, recv: &Buffer, counts: &[usize], op: ReduceOp, _s: Stream) -> Result<()> {
        reduce_scatterv(c, Src::of(send), recv.ptr(), counts, recv.dtype(), op, true)
    }
}
