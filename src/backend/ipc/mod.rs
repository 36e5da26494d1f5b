//! IPC: CUDA IPC between the ranks of one node. MPI carries only control messages; device data
//! moves through IPC mappings of the peers' own buffers, at GPU-memory speed, also when the MPI
//! is not CUDA-aware and NCCL cannot be used (ranks sharing a GPU). The design (eligibility, the
//! shared segment, exporting buffers, collectives, point-to-point, progress, stream semantics,
//! freeing) is described in docs/IPC.md.
//!
//! **Eligibility** (checked collectively at creation, the same outcome on every rank): every rank
//! of the communicator on one node, a CUDA device on every rank, and every pair of ranks' devices
//! the same GPU or peers ([`eligible`]).
//!
//! The files, from the bottom up: [`shm`] the shared host segment's layout and the waits and
//! claims on it (pure, unit-tested); `maps` the process's mappings of peers' buffers; `state`
//! the per-communicator state ([`IpcState`]) and the buffers it exports; `p2p` point-to-point;
//! `progress` the pending receives and the progress thread; `watch` the deadlines of
//! stream-ordered sends; `coll` the collectives; this file
//! the eligibility and the [`Path`] that dispatches to them.

use std::ffi::c_int;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys as cu;

use crate::backend::path::{Blocks, Input, Path};
use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::device::{self, Stream};
use crate::error::Result;
use crate::mpisys::{self, sys};
use crate::request::Pending;
use crate::types::ReduceOp;

mod coll;
mod maps;
mod p2p;
mod progress;
pub mod shm;
mod state;
mod watch;

pub use maps::close_all_mappings;
pub use progress::PROGRESS;
pub use state::IpcState;

use p2p::{IpcRecv, RecvOp};
use progress::register;

// ---- eligibility ---------------------------------------------------------------------------

fn uuid_of(device: i32) -> Option<[u8; 16]> {
    let u = cudarc::driver::result::device::get(device).and_then(cudarc::driver::result::device::get_uuid).ok()?;
    let mut b = [0u8; 16];
    for (i, x) in u.bytes.iter().enumerate() {
        b[i] = *x as u8;
    }
    Some(b)
}

fn hex(u: &[u8]) -> String {
    u.iter().map(|x| format!("{x:02x}")).collect()
}

/// Collective over `c` (every rank calls it, with or without CUDA): whether the IPC backend can
/// be used, with the reason, or why not. The outcome and its text are the same on every rank.
/// gpuwire_comm_abort on an IPC communicator: sets this rank's `aborted` word of the shared
/// segment (the peers on the node find it within their next few hundred polls: `broken`) and
/// breaks the communicator.
pub fn abort(c: &Communicator, why: String) {
    if let Some(st) = c.backend_state.get::<IpcState>() {
        st.seg.slot(st.me).aborted.0.store(1, std::sync::atomic::Ordering::Release);
        // Stream-ordered calls of every rank waiting on this segment's words go on.
        st.seg.release_all();
    }
    c.mark_broken(why);
}

/// Whether the communicator is broken: on this rank, or aborted by a peer (its `aborted` word
/// of the shared segment: the communicator is then broken here too).
pub(super) fn broken(c: &Communicator) -> bool {
    if c.is_broken() {
        return true;
    }
    let Some(st) = c.backend_state.get::<IpcState>() else { return false };
    let Some(r) = (0..st.p).find(|&r| st.seg.slot(r).aborted.0.load(std::sync::atomic::Ordering::Acquire) != 0) else { return false };
    c.mark_broken(format!("the communicator was aborted (gpuwire_comm_abort on rank {r})"));
    true
}

/// Whether blocking point-to-point calls on `c` from this thread can be stream-ordered (an IPC
/// communicator whose ranks agreed on it, off the progress engine): `crate::group` then issues a
/// group's point-to-point part through [`group_p2p`].
pub fn p2p_stream_ordered(c: &Communicator) -> bool {
    c.backend_state.get::<IpcState>().is_some_and(|s| s.so) && !crate::engine::on_engine_thread()
}

/// A group's blocking sends (buffer, dest, tag) and receives (buffer, source, tag) on `c`,
/// started together and stream-ordered (`p2p::batch`): the outcome, and which sends and which
/// receives failed.
pub fn group_p2p(c: &Communicator, sends: &[(&Buffer, i32, i32)], recvs: &[(&Buffer, i32, i32)], stream: Stream) -> (Result<()>, Vec<bool>, Vec<bool>) {
    p2p::batch(c, sends, recvs, stream)
}

pub fn eligible(c: &Communicator, device: Option<i32>) -> Result<std::result::Result<String, String>> {
    let p = c.size() as usize;
    if c.local_size() != c.size() {
        return Ok(Err("the ranks are not all on one node".into()));
    }
    let mut mine = [0u8; 17];
    if let Some(u) = device.and_then(uuid_of) {
        mine[0] = 1;
        mine[1..].copy_from_slice(&u);
    }
    let mut all = vec![0u8; 17 * p];
    // SAFETY: fixed-size records, one per rank.
    mpisys::check(
        unsafe { sys::MPI_Allgather(mine.as_ptr().cast(), 17, sys::RSMPI_UINT8_T, all.as_mut_ptr().cast(), 17, sys::RSMPI_UINT8_T, c.raw()) },
        "MPI_Allgather (device of every rank)",
    )?;
    let recs: Vec<&[u8]> = all.chunks(17).collect();
    if let Some(r) = recs.iter().position(|x| x[0] == 0) {
        return Ok(Err(format!("rank {r} has no usable CUDA device")));
    }
    // Each rank checks that its device reaches every other rank's device.
    let me = c.rank() as usize;
    let mut bad = [i64::MAX, 0, 0];
    if let Some(d) = device {
        let count = device::cuda().map(|x| x.device_count).unwrap_or(0);
        let local: Vec<Option<[u8; 16]>> = (0..count).map(uuid_of).collect();
        for q in 0..p {
            if recs[q] == recs[me] {
                continue;
            }
            let Some(od) = local.iter().position(|u| u.as_ref().map(|u| &u[..]) == Some(&recs[q][1..])) else {
                bad = [me as i64, q as i64, 1];
                break;
            };
            let mut ok: c_int = 0;
            let (a, b) = (cudarc::driver::result::device::get(d), cudarc::driver::result::device::get(od as i32));
            if let (Ok(a), Ok(b)) = (a, b) {
                // SAFETY: writes one int; valid device handles.
                unsafe { cu::cuDeviceCanAccessPeer(&mut ok, a, b) };
            }
            if ok == 0 {
                bad = [me as i64, q as i64, 2];
                break;
            }
        }
    }
    let mut worst = vec![0i64; 3 * p];
    // SAFETY: three int64 per rank.
    mpisys::check(
        unsafe { sys::MPI_Allgather(bad.as_ptr().cast(), 3, sys::RSMPI_INT64_T, worst.as_mut_ptr().cast(), 3, sys::RSMPI_INT64_T, c.raw()) },
        "MPI_Allgather (device reachability)",
    )?;
    if let Some(w) = worst.chunks(3).filter(|w| w[0] != i64::MAX).min_by_key(|w| (w[0], w[1])) {
        let (a, b) = (w[0] as usize, w[1] as usize);
        return Ok(Err(if w[2] == 1 {
            format!("rank {a} cannot see the GPU of rank {b} (GPU-{}; CUDA_VISIBLE_DEVICES differs?)", hex(&recs[b][1..]))
        } else {
            format!("the GPU of rank {a} cannot access the GPU of rank {b} (cuDeviceCanAccessPeer)")
        }));
    }
    let one = recs.iter().all(|x| *x == recs[0]);
    Ok(Ok(format!("all {p} ranks on one node and their devices reach each other{}", if one { " (one shared GPU)" } else { "" })))
}

// ---- the path ------------------------------------------------------------------------------

/// A started irecv (of exactly its buffer's count, or with `upto` of up to it), registered with
/// the progress of pending receives. Here, not in p2p: the registry (progress) sits above p2p.
fn irecv(c: &Communicator, buf: &Buffer, source: i32, tag: i32, upto: bool, stream: Stream) -> Result<Box<dyn Pending>> {
    let op = Arc::new(Mutex::new(RecvOp::start(c, buf, source, tag, stream, false, upto)?));
    register(&op);
    Ok(Box::new(IpcRecv { op, comm: c, finished: false }))
}

/// As MPI_Probe / MPI_Iprobe on an IPC communicator, whose point-to-point messages (host and
/// device memory) are headers on its control communicator (`p2p::probe`).
pub fn probe(c: &Communicator, source: i32, tag: i32, block: bool) -> Result<Option<crate::backend::p2p::Matched>> {
    p2p::probe(c, source, tag, block)
}

/// The IPC path: point-to-point in `p2p`, collectives in `coll`.
pub struct IpcPath;

impl Path for IpcPath {
    fn send(&self, c: &Communicator, buf: &Buffer, dest: i32, tag: i32, stream: Stream) -> Result<()> {
        p2p::send(c, buf, dest, tag, stream)
    }

    fn recv(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<()> {
        p2p::recv(c, buf, source, tag, stream)
    }

    fn isend(&self, c: &Communicator, buf: &Buffer, dest: i32, tag: i32, stream: Stream) -> Result<Box<dyn Pending>> {
        p2p::isend(c, buf, dest, tag, stream)
    }

    fn irecv(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<Box<dyn Pending>> {
        // Here, not in p2p: the registry of pending receives (progress) sits above p2p.
        irecv(c, buf, source, tag, false, stream)
    }

    fn irecv_upto(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<Box<dyn Pending>> {
        irecv(c, buf, source, tag, true, stream)
    }

    fn sendrecv(&self, c: &Communicator, send: &Buffer, dest: i32, sendtag: i32, recv: &Buffer, source: i32, recvtag: i32, stream: Stream) -> Result<()> {
        p2p::sendrecv(c, send, dest, sendtag, recv, source, recvtag, stream)
    }

    fn barrier(&self, c: &Communicator, stream: Stream) -> Result<()> {
        coll::barrier(c, stream)
    }

    fn bcast(&self, c: &Communicator, buf: &Buffer, root: i32, stream: Stream) -> Result<()> {
        coll::bcast(c, buf, root, stream)
    }

    fn reduce(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, op: ReduceOp, root: i32, stream: Stream) -> Result<()> {
        coll::reduce(c, send, recv, op, root, stream)
    }

    fn allreduce(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<()> {
        coll::allreduce(c, send, recv, op, stream)
    }

    fn allgather(&self, c: &Communicator, send: Input, recv: &Buffer, stream: Stream) -> Result<()> {
        coll::allgather(c, send, recv, stream)
    }

    fn allgatherv(&self, c: &Communicator, send: Input, recv: &Buffer, counts: &[usize], stream: Stream) -> Result<()> {
        coll::allgatherv(c, send, recv, counts, stream)
    }

    fn reduce_scatter(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<()> {
        coll::reduce_scatter(c, send, recv, op, stream)
    }

    fn scan(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, exclusive: bool, stream: Stream) -> Result<()> {
        coll::scan(c, send, recv, op, exclusive, stream)
    }

    fn alltoall(&self, c: &Communicator, send: Input, recv: &Buffer, stream: Stream) -> Result<()> {
        coll::alltoall(c, send, recv, stream)
    }

    fn gather(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, root: i32, stream: Stream) -> Result<()> {
        coll::gather(c, send, recv, root, stream)
    }

    fn scatter(&self, c: &Communicator, send: Option<&Buffer>, recv: Input, root: i32, stream: Stream) -> Result<()> {
        coll::scatter(c, send, recv, root, stream)
    }

    fn alltoallv(&self, c: &Communicator, send: Input, sb: Blocks, recv: &Buffer, rb: Blocks, stream: Stream) -> Result<()> {
        coll::alltoallv_blocks(c, send, sb, recv, rb, stream)
    }

    fn gatherv(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, rb: Option<Blocks>, root: i32, stream: Stream) -> Result<()> {
        coll::gatherv_blocks(c, send, recv, rb, root, stream)
    }

    fn scatterv(&self, c: &Communicator, send: Option<&Buffer>, sb: Option<Blocks>, recv: Input, root: i32, stream: Stream) -> Result<()> {
        coll::scatterv_blocks(c, send, sb, recv, root, stream)
    }

    fn reduce_scatterv(&self, c: &Communicator, send: Input, recv: &Buffer, counts: &[usize], op: ReduceOp, stream: Stream) -> Result<()> {
        coll::reduce_scatterv(c, send, recv, counts, op, stream)
    }
}

#[allow(dead_code)]
fn _assert_sync() {
    fn is_sync<T: Sync + Send>() {}
    is_sync::<IpcState>();
}
