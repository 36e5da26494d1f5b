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
    Alltoallv,
    Gatherv,
    Scatterv,
    ReduceScatterv,
}

impl Operation {
    pub const ALL: [Operation; 20] = [
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
        Operation::Alltoallv,
        Operation::Gatherv,
        Operation::Scatterv,
        Operation::ReduceScatterv,
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
            Alltoallv => "alltoallv",
            Gatherv => "gatherv",
            Scatterv => "scatterv",
            ReduceScatterv => "reduce_scatterv",
        }
    }

    pub fn is_p2p(self) -> bool {
        matches!(self, Operation::Send | Operation::Recv | Operation::Isend | Operation::Irecv | Operation::Sendrecv)
    }
}

/// A set of operations, one bit each: what the registry's tables list (a call's routing tests
/// one bit instead of searching a list).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpSet(u32);

// One bit per operation.
const _: () = assert!(Operation::ALL.len() <= 32);

impl OpSet {
    /// The set of `ops`.
    pub const fn of(ops: &[Operation]) -> OpSet {
        let mut bits = 0;
        let mut i = 0;
        while i < ops.len() {
            bits |= 1 << ops[i] as u32;
            i += 1;
        }
        OpSet(bits)
    }

    #[inline]
    pub fn contains(self, op: Operation) -> bool {
        self.0 & (1 << op as u32) != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The operations in the set, in [`Operation::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = Operation> {
        Operation::ALL.into_iter().filter(move |o| self.contains(*o))
    }
}

/// The send-side data of a collective: a buffer, or the receive buffer itself (MPI_IN_PLACE).
#[derive(Clone, Copy, Debug)]
pub enum Input<'a> {
    InPlace,
    Buf(&'a Buffer),
}

/// Validated blocks of a v-collective's buffer: block j holds `counts[j]` elements at element
/// `displs[j]` (inside the buffer; receive blocks never overlap one another).
#[derive(Clone, Copy, Debug)]
pub struct Blocks<'a> {
    pub counts: &'a [usize],
    pub displs: &'a [usize],
}

impl Blocks<'_> {
    /// Elements from the buffer's start to the end of its last non-empty block.
    pub fn extent(&self) -> usize {
        self.counts.iter().zip(self.displs).filter(|(n, _)| **n > 0).map(|(n, d)| n + d).max().unwrap_or(0)
    }
    /// The non-empty blocks, as (rank, count, displacement).
    pub fn each(&self) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        self.counts.iter().zip(self.displs).enumerate().filter(|(_, (n, _))| **n > 0).map(|(j, (n, d))| (j, *n, *d))
    }
}

/// One data path. Arguments are already validated (ranks, counts, datatypes, ops), so a path
/// only moves and reduces data. Every method is called by all ranks that the MPI semantics
/// require (collectives by every rank, in the same order).
pub trait Path: Sync {
    fn send(&self, c: &Communicator, buf: &Buffer, dest: i32, tag: i32, stream: Stream) -> Result<()>;
    fn recv(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<()>;
    fn isend(&self, c: &Communicator, buf: &Buffer, dest: i32, tag: i32, stream: Stream) -> Result<Box<dyn Pending>>;
    fn irecv(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<Box<dyn Pending>>;
    /// A receive of up to `buf`'s count (as MPI_Irecv; a longer message is
    /// GPUWIRE_ERROR_TRUNCATE); its request reports what it matched (`Pending::status`). The
    /// default, for paths whose receives take exactly their buffer (NCCL, IPC), is `irecv`.
    fn irecv_upto(&self, c: &Communicator, buf: &Buffer, source: i32, tag: i32, stream: Stream) -> Result<Box<dyn Pending>> {
        self.irecv(c, buf, source, tag, stream)
    }
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
    /// Block j of `send` (`sb`) goes to rank j; rank j's block lands in block j of `recv` (`rb`).
    /// In place (`Input::InPlace`): the send blocks are the receive blocks of `recv` (`sb` is `rb`).
    fn alltoallv(&self, c: &Communicator, send: Input, sb: Blocks, recv: &Buffer, rb: Blocks, stream: Stream) -> Result<()>;
    /// `recv` and `rb` are `Some` on the root only. In place at the root: its block is already in
    /// `recv` at `rb.displs[root]`.
    fn gatherv(&self, c: &Communicator, send: Input, recv: Option<&Buffer>, rb: Option<Blocks>, root: i32, stream: Stream) -> Result<()>;
    /// `send` and `sb` are `Some` on the root only. In place at the root: its block stays in `send`.
    fn scatterv(&self, c: &Communicator, send: Option<&Buffer>, sb: Option<Blocks>, recv: Input, root: i32, stream: Stream) -> Result<()>;
    /// Rank r receives the reduction of block r (`counts[r]` elements, blocks contiguous in rank
    /// order) of every rank's input. In place (`Input::InPlace`): the input is `recv` itself (the
    /// sum of the counts) and the result lands in its first `counts[rank]` elements.
    fn reduce_scatterv(&self, c: &Communicator, send: Input, recv: &Buffer, counts: &[usize], op: ReduceOp, stream: Stream) -> Result<()>;
}
