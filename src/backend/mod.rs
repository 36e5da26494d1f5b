//! The data paths, and the one place that chooses among them.
//!
//! Host-accessible buffers (HOST, PINNED) always go through plain MPI ([`host`]). Device buffers
//! go through the communicator's chosen backend. The choice is made once, collectively, when the
//! communicator is created, and recorded with its reason for `gpuwire_comm_describe`.

pub mod host;

use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::device::{self, Stream};
use crate::error::{Error, Result};
use crate::request::Pending;
use crate::types::{BackendKind, ReduceOp};

/// The backend chosen for a communicator's device buffers, its device, and why.
#[derive(Clone, Debug)]
pub struct Choice {
    pub kind: BackendKind,
    pub reason: String,
    /// CUDA device of this rank, or -1.
    pub device: i32,
}

impl Default for Choice {
    fn default() -> Self {
        Choice { kind: BackendKind::GPUWIRE_BACKEND_HOST, reason: String::new(), device: -1 }
    }
}

/// Per-communicator state of the device backends (staging buffers, NCCL communicator, ...).
#[derive(Debug, Default)]
pub struct State {}

/// The send-side data of a collective: a buffer, or the receive buffer itself (MPI_IN_PLACE).
#[derive(Clone, Copy, Debug)]
pub enum Input<'a> {
    InPlace,
    Buf(&'a Buffer),
}

/// One data path. Arguments are already validated (ranks, counts, datatypes, ops), so a path
/// only moves and reduces data. Every method is called by all ranks that the MPI semantics
/// require (collectives by every rank, in the same order).
pub trait Path: Sync {
    fn send(&self, c: &Communicator, buf: &Buffer, dest: i32, tag: i32, stream: Stream) -> Result<()>;
    fn recv(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<()>;
    fn isend(&self, c: &Communicator, buf: &Buffer, dest: i32, tag: i32, stream: Stream) -> Result<Box<dyn Pending>>;
    fn irecv(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<Box<dyn Pending>>;
    #[allow(clippy::too_many_arguments)]
    fn sendrecv(&self, c: &Communicator, send: &Buffer, dest: i32, sendtag: i32, recv: &Buffer, source: i32, recvtag: i32, stream: Stream) -> Result<()>;
    fn barrier(&self, c: &Communicator, stream: Stream) -> Result<()>;
    fn bcast(&self, c: &Communicator, buf: &Buffer, root: i32, stream: Stream) -> Result<()>;
    /// `recv` is `Some` on the root only.
    fn reduce(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, op: ReduceOp, root: i32, stream: Stream) -> Result<()>;
    fn allreduce(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<()>;
    fn allgather(&self, c: &Communicator, send: Input, recv: &Buffer, stream: Stream) -> Result<()>;
    /// `counts[r]` elements from rank r, placed contiguously in rank order.
    fn allgatherv(&self, c: &Communicator, send: Input, recv: &Buffer, counts: &[usize], stream: Stream) -> Result<()>;
    fn reduce_scatter(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, stream: Stream) -> Result<()>;
    fn alltoall(&self, c: &Communicator, send: Input, recv: &Buffer, stream: Stream) -> Result<()>;
    /// `recv` is `Some` on the root only.
    fn gather(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, root: i32, stream: Stream) -> Result<()>;
    /// `send` is `Some` on the root only.
    fn scatter(&self, c: &Communicator, send: Option<&Buffer>, recv: Input, root: i32, stream: Stream) -> Result<()>;
}

/// Collective, at communicator creation: picks the backend for device buffers.
pub fn choose(c: &Communicator) -> Result<Choice> {
    let requested = c.config().backend;
    let cuda = device::cuda_with_devices();
    match requested {
        BackendKind::GPUWIRE_BACKEND_HOST => Ok(Choice {
            kind: BackendKind::GPUWIRE_BACKEND_HOST,
            reason: "requested; device buffers are refused".into(),
            device: -1,
        }),
        BackendKind::GPUWIRE_BACKEND_AUTO => match cuda {
            Err(e) => Ok(Choice {
                kind: BackendKind::GPUWIRE_BACKEND_HOST,
                reason: format!("auto: {}", strip_kind(&e)),
                device: -1,
            }),
            Ok(_) => Ok(Choice {
                kind: BackendKind::GPUWIRE_BACKEND_HOST,
                reason: "auto: this build of gpuwire moves host memory only".into(),
                device: -1,
            }),
        },
        other => {
            let e = match cuda {
                Err(e) => strip_kind(&e),
                Ok(_) => "this build of gpuwire moves host memory only".into(),
            };
            Err(Error::BackendUnavailable(format!("{} was requested but cannot be used: {e}", other.name())))
        }
    }
}

fn strip_kind(e: &Error) -> String {
    let s = e.to_string();
    s.split_once(": ").map(|(_, d)| d.to_string()).unwrap_or(s)
}

/// Sets up the chosen backend's state (collective; after `choose` agreed).
pub fn setup(_c: &mut Communicator) -> Result<()> {
    Ok(())
}

/// Releases backend state before the MPI communicators are freed.
pub fn teardown(_c: &mut Communicator) {}

/// The path that moves these buffers on this communicator.
pub fn path_for(c: &Communicator, bufs: &[Option<&Buffer>]) -> Result<&'static dyn Path> {
    if let Some(b) = bufs.iter().flatten().find(|b| !b.is_host()) {
        return Err(Error::BackendUnavailable(format!(
            "a {} buffer was given, but this communicator's backend is {} ({})",
            b.space().name(),
            c.backend().name(),
            c.choice().reason
        )));
    }
    Ok(&host::HostPath)
}
