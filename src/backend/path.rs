//! What every data path implements: the `Path` trait (one method per [`Operation`], the unit
//! the registry routes) and `Input`, the send side of a collective. Each backend imports this,
//! never the registry (`backend`).

use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::device::Stream;
use crate::error::Result;
use crate::request::Pending;
use crate::types::ReduceOp;

/// The operations of [`Path`], one per method: what the registry (`backend::route`) routes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Send,
    Recv,
    Isend,
    Irecv,
    Sendrecv,
    Barrier,
    Bcast,
    Reduce,
    Allreduce,
    Allgather,
    Allgatherv,
    ReduceScatter,
    /// scan and exscan (one `Path` method).
    Scan,
    Alltoall,
    Gather,
    Scatter,
}

impl Operation {
    pub const ALL: [Operation; 16] = [
        Operation::Send,
        Operation::Recv,
        Operation::Isend,
        Operation::Irecv,
        Operation::Sendrecv,
        Operation::Barrier,
        Operation::Bcast,
        Operation::Reduce,
        Operation::Allreduce,
        Operation::Allgather,
        Operation::Allgatherv,
        Operation::ReduceScatter,
        Operation::Scan,
        Operation::Alltoall,
        Operation::Gather,
        Operation::Scatter,
    ];

    /// The operation's name in the API (gpuwire_<name>).
    pub fn name(self) -> &'static str {
        use Operation::*;
        match self {
            Send => "send",
            Recv => "recv",
            Isend => "isend",
            Irecv => "irecv",
            Sendrecv => "sendrecv",
            Barrier => "barrier",
            Bcast => "bcast",
            Reduce => "reduce",
            Allreduce => "allreduce",
            Allgather => "allgather",
            Allgatherv => "allgatherv",
            ReduceScatter => "reduce_scatter",
            Scan => "scan/exscan",
            Alltoall => "alltoall",
            Gather => "gather",
            Scatter => "scatter",
        }
    }

    pub fn is_p2p(self) -> bool {
        matches!(self, Operation::Send | Operation::Recv | Operation::Isend | Operation::Irecv | Operation::Sendrecv)
    }
}

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
    /// Inclusive (`exclusive` false: as MPI_Scan) or exclusive (as MPI_Exscan) prefix reduction
    /// in rank order; exscan leaves rank 0's `recv` untouched.
    fn scan(&self, c: &Communicator, send: Input, recv: &Buffer, op: ReduceOp, exclusive: bool, stream: Stream) -> Result<()>;
    fn alltoall(&self, c: &Communicator, send: Input, recv: &Buffer, stream: Stream) -> Result<()>;
    /// `recv` is `Some` on the root only.
    fn gather(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, root: i32, stream: Stream) -> Result<()>;
    /// `send` is `Some` on the root only.
    fn scatter(&self, c: &Communicator, send: Option<&Buffer>, recv: Input, root: i32, stream: Stream) -> Result<()>;
}
