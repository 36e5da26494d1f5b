//! Distributed arrays: one global array split over the ranks of a communicator, on host or
//! device memory (gpuwire_darray).
//!
//! A distributed array has a global shape (1-D: one length; N-D: split along axis 0 into blocks
//! of whole rows, a row being the product of the other dimensions), a datatype, a memory space
//! and a partition:
//! - SCATTER: rank r owns rows [start_r, start_r + rows_r); by default the first N mod P ranks
//!   get one row more than the others ([`crate::backend::ring::partition`]), or every rank gives
//!   its own count and they must add up to N;
//! - BROADCAST: every rank holds all N rows; gpuwire keeps the copies identical (user data —
//!   a global array, a fill value, a scalar — is taken from rank 0 and broadcast).
//!
//! Storage: one gpuwire [`Buffer`] per rank of (halo + rows_r + halo) rows: `halo` ghost rows
//! above the owned block, the owned rows, `halo` ghost rows below, contiguous and row-major.
//! Ghost rows hold copies of the neighbouring ranks' edge rows after a halo exchange; those
//! beyond the global edges are never written by gpuwire.
//!
//! Operations compute on the owned rows only: on the host with plain loops, on the device with
//! the kernels of [`crate::device::array_kernels`]; reductions then combine the ranks' partial
//! results with one allreduce (SCATTER only: a BROADCAST array is reduced locally). All data
//! movement goes through the operations (allgatherv, bcast, sendrecv, send, recv, allreduce)
//! of the communicator's internal duplicate ([`Communicator::internal`]), so every backend
//! serves distributed arrays and no message of the program matches one of theirs, whatever
//! its tag. Checking mode's agreements run on the array's communicator itself, where they meet
//! the program's other collectives (so that a rank in a distributed-array call and another in
//! a plain collective learn of it).

use std::sync::{Arc, Mutex};

use crate::backend::ring;
use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::device::array_kernels::{self as ak, Acc, Comb, Red};
use crate::device::{self, CtxGuard, Scratch, Stream};
use crate::error::{Error, Result};
use crate::handles::{Kind, Registry};
use crate::ops::{PROC_NULL, Sig};
use crate::types::{Dtype, NormKind, Partition, ReduceOp, Space};

/// All live distributed arrays, by handle.
pub static DARRAYS: Registry<DArray> = Registry::new(Kind::DArray);

/// Tags of gpuwire's own messages for distributed arrays (on the communicator's internal
/// duplicate, where only gpuwire sends: the program's tags never meet them).
pub(crate) const TAG_HALO_DOWN: i32 = 32001;
pub(crate) const TAG_HALO_UP: i32 = 32002;
pub(crate) const TAG_REDISTRIBUTE: i32 = 32003;
pub(crate) const TAG_GATHER: i32 = 32004;

/// What a rank asks for when it creates a distributed array (already converted from C).
#[derive(Clone, Debug)]
pub struct Spec {
    /// Global shape; axis 0 is split.
    pub shape: Vec<usize>,
    /// This rank's rows, or `None` to let gpuwire decide (the default partition).
    pub local_rows: Option<usize>,
    /// Ghost rows above and below the owned block.
    pub halo: usize,
    pub dtype: Dtype,
    pub space: Space,
    pub partition: Partition,
}

impl Spec {
    /// Elements per row (product of the dimensions after the first).
    fn row(&self) -> Result<usize> {
        self.shape[1..].iter().try_fold(1usize, |a, d| a.checked_mul(*d)).ok_or_else(|| overflow(&self.shape))
    }

    fn validate(&self, comm: &Communicator) -> Result<()> {
        if self.shape.is_empty() {
            return Err(Error::InvalidArgument("the shape has no dimension (ndim must be at least 1)".into()));
        }
        let row = self.row()?;
        let elements = |rows: usize| rows.checked_mul(row).filter(|t| t.checked_mul(self.dtype.size()).is_some_and(|b| b <= isize::MAX as usize));
        elements(self.shape[0]).ok_or_else(|| overflow(&self.shape))?;
        // The storage of the largest block (all rows) with its ghost rows must be addressable.
        self.halo.checked_mul(2).and_then(|h| h.checked_add(self.shape[0])).and_then(elements).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "halo = {}: {} ghost rows above and below rows of {row} elements of {} need more memory than the address space holds",
                self.halo,
                self.halo,
                self.dtype.name()
            ))
        })?;
        if self.space == Space::GPUWIRE_SPACE_AUTO {
            return Err(Error::InvalidArgument("GPUWIRE_SPACE_AUTO is not a memory space to allocate in: pass HOST, DEVICE, PINNED or MANAGED".into()));
        }
        if !self.space.is_host_accessible() && comm.backend() == crate::types::BackendKind::GPUWIRE_BACKEND_HOST {
            return Err(Error::BackendUnavailable(format!(
                "a {} distributed array needs a communicator that moves device memory, but this one's backend is HOST ({})",
                self.space.name(),
                comm.choice().reason
            )));
        }
        if self.partition == Partition::GPUWIRE_PARTITION_BROADCAST {
            if self.halo != 0 {
                return Err(Error::InvalidArgument(format!("halo = {}: a BROADCAST array holds every row on every rank and has no halo (pass 0)", self.halo)));
            }
            if let Some(r) = self.local_rows.filter(|r| *r != self.shape[0]) {
                return Err(Error::InvalidArgument(format!(
                    "local length {r}: every rank of a BROADCAST array holds all {} rows (pass GPUWIRE_DECIDE)",
                    self.shape[0]
                )));
            }
        }
        Ok(())
    }
}

fn overflow(shape: &[usize]) -> Error {
    Error::InvalidArgument(format!("the shape {shape:?} has more elements than the address space holds"))
}

/// FNV-1a of the shape: ranks compare it to find a shape that differs in any dimension.
fn shape_hash(shape: &[usize]) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for d in shape {
        for b in (*d as u64).to_le_bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    (h >> 1) as i64
}

/// Half-open interval of global rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rows {
    lo: usize,
    hi: usize,
}

impl Rows {
    fn and(self, o: Rows) -> Rows {
        let lo = self.lo.max(o.lo);
        Rows { lo, hi: self.hi.min(o.hi).max(lo) }
    }
    fn len(self) -> usize {
        self.hi - self.lo
    }
    fn is_empty(self) -> bool {
        self.hi == self.lo
    }
}

/// A distributed array (see the module documentation).
#[derive(Debug)]
pub struct DArray {
    comm: Arc<Communicator>,
    /// `comm`'s internal duplicate: every message of the array goes over it.
    wire: Arc<Communicator>,
    dtype: Dtype,
    space: Space,
    partition: Partition,
    shape: Vec<usize>,
    /// Elements per row.
    row: usize,
    /// Rows held by each rank (all N for BROADCAST).
    rows: Vec<usize>,
    /// First global row of each rank (0 for BROADCAST).
    starts: Vec<usize>,
    halo: usize,
    storage: Arc<Buffer>,
    /// Device scratch of the reductions (device arrays only).
    scratch: Mutex<Option<Scratch>>,
}

impl DArray {
    /// Collective over `comm`: creates this rank's part of a distributed array. Every rank's
    /// argument errors (`spec`) are agreed first, so a mistake on one rank is an error on all;
    /// the ranks' specifications are then exchanged (one allgather) and must agree.
    pub fn create(comm: &Arc<Communicator>, spec: Result<Spec>) -> Result<DArray> {
        // The first array of a communicator creates its internal duplicate: a communicator
        // creation, so unbounded by the timeout (`enter_unbounded`) on every rank alike.
        let _call = if comm.has_internal() { comm.enter("gpuwire_darray_create", true)? } else { comm.enter_unbounded("gpuwire_darray_create")? };
        let local = spec.and_then(|s| s.validate(comm).map(|()| s));
        let spec = comm.agree_on_result(local, "the argument check")?;
        // Every message of the array (from here on) goes over the internal duplicate.
        let wire = comm.internal()?;
        let p = comm.size() as usize;
        let me = comm.rank() as usize;
        let row = spec.row()?;
        let n = spec.shape[0];
        const D: usize = 9;
        let mine: [i64; D] = [
            spec.shape.len() as i64,
            n as i64,
            row as i64,
            shape_hash(&spec.shape),
            spec.dtype as i64,
            spec.partition as i64,
            spec.halo as i64,
            spec.local_rows.map_or(-1, |r| r as i64),
            spec.space.is_host_accessible() as i64,
        ];
        let mut all = vec![0i64; D * p];
        {
            let send = Buffer::wrap(mine.as_ptr() as usize, D as i64, Dtype::GPUWIRE_INT64, Space::GPUWIRE_SPACE_HOST)?;
            let recv = Buffer::wrap(all.as_mut_ptr() as usize, (D * p) as i64, Dtype::GPUWIRE_INT64, Space::GPUWIRE_SPACE_HOST)?;
            wire.allgather(&send, &recv, Stream(0))?;
        }
        // Every rank checks the same gathered data, so every rank returns the same error.
        let unit = if spec.shape.len() == 1 { "elements" } else { "rows" };
        for r in 1..p {
            let (a, b) = (&all[..D], &all[r * D..(r + 1) * D]);
            if a[..4] != b[..4] {
                return Err(Error::CountMismatch(format!(
                    "rank {r} passed another global shape than rank 0 (ndim {} with {} x {} elements, against ndim {} with {} x {}); every rank must pass the same shape",
                    b[0], b[1], b[2], a[0], a[1], a[2]
                )));
            }
            if a[4] != b[4] {
                let name = |x: i64| Dtype::from_c(x as i32).map(|d| d.name()).unwrap_or("?");
                return Err(Error::DtypeMismatch(format!("rank {r} passed {} but rank 0 {}", name(b[4]), name(a[4]))));
            }
            if a[5] != b[5] {
                return Err(Error::InvalidArgument(format!("rank {r} passed another partition than rank 0; every rank must pass the same")));
            }
            if a[6] != b[6] {
                return Err(Error::InvalidArgument(format!("rank {r} passed halo {} but rank 0 halo {}; every rank must pass the same", b[6], a[6])));
            }
            if a[8] != b[8] {
                return Err(Error::InvalidArgument(format!(
                    "rank {r} asked for {} memory and rank 0 for {} memory; every rank must use the same kind",
                    if b[8] == 1 { "host" } else { "device" },
                    if a[8] == 1 { "host" } else { "device" }
                )));
            }
        }
        let rows: Vec<usize> = match spec.partition {
            Partition::GPUWIRE_PARTITION_BROADCAST => vec![n; p],
            Partition::GPUWIRE_PARTITION_SCATTER => {
                let asked: Vec<i64> = (0..p).map(|r| all[r * D + 7]).collect();
                let decided = asked.iter().filter(|v| **v < 0).count();
                if decided == p {
                    ring::partition(n, p).into_iter().map(|(_, len)| len).collect()
                } else if decided > 0 {
                    let which: Vec<usize> = (0..p).filter(|r| asked[*r] < 0).collect();
                    return Err(Error::InvalidArgument(format!(
                        "ranks {which:?} passed GPUWIRE_DECIDE and the others a local length ({asked:?}); pass GPUWIRE_DECIDE on every rank, or a length on every rank"
                    )));
                } else {
                    let sum = asked.iter().try_fold(0usize, |s, v| s.checked_add(*v as usize));
                    if sum != Some(n) {
                        return Err(Error::CountMismatch(format!(
                            "the local lengths {asked:?} ({unit} per rank) add up to {} but the global length along axis 0 is {n}",
                            sum.map_or("more than the address space holds".to_string(), |s| s.to_string())
                        )));
                    }
                    asked.into_iter().map(|v| v as usize).collect()
                }
            }
        };
        let starts = match spec.partition {
            Partition::GPUWIRE_PARTITION_BROADCAST => vec![0; p],
            Partition::GPUWIRE_PARTITION_SCATTER => rows.iter().scan(0usize, |s, r| Some(std::mem::replace(s, *s + r))).collect(),
        };
        // validate() bounded (N + 2 halo) x row x size, and rows[me] <= N.
        let count = spec.halo.checked_mul(2).and_then(|h| h.checked_add(rows[me])).and_then(|r| r.checked_mul(row)).ok_or_else(|| overflow(&spec.shape))?;
        let count = i64::try_from(count).map_err(|_| overflow(&spec.shape))?;
        let device = if spec.space == Space::GPUWIRE_SPACE_HOST { -1 } else { comm.device() };
        let storage = Buffer::alloc(count, spec.dtype, spec.space, device);
        let storage = wire.agree_on_result(storage, "allocating the distributed array")?;
        crate::trace!(
            "darray: {:?} {} {} on {} memory, rank {me} holds rows [{}, {}) + halo {}",
            spec.shape,
            spec.dtype.name(),
            spec.partition.name(),
            spec.space.name(),
            starts[me],
            starts[me] + rows[me],
            spec.halo
        );
        Ok(DArray {
            comm: comm.clone(),
            wire,
            dtype: spec.dtype,
            space: spec.space,
            partition: spec.partition,
            shape: spec.shape,
            row,
            rows,
            starts,
            halo: spec.halo,
            storage: Arc::new(storage),
            scratch: Mutex::new(None),
        })
    }

    // ---- queries ------------------------------------------------------------------------

    pub fn comm(&self) -> &Arc<Communicator> {
        &self.comm
    }
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }
    pub fn space(&self) -> Space {
        self.space
    }
    pub fn partition(&self) -> Partition {
        self.partition
    }
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// Ghost rows allocated above and below the owned block.
    pub fn halo(&self) -> usize {
        self.halo
    }
    /// Elements per row along axis 0.
    pub fn row_len(&self) -> usize {
        self.row
    }
    pub fn global_len(&self) -> usize {
        self.shape[0] * self.row
    }
    fn me(&self) -> usize {
        self.comm.rank() as usize
    }
    /// Rows this rank holds (all of them for BROADCAST).
    pub fn local_rows(&self) -> usize {
        self.rows[self.me()]
    }
    /// Elements this rank holds.
    pub fn local_len(&self) -> usize {
        self.local_rows() * self.row
    }
    /// Global index of this rank's first element (0 for BROADCAST).
    pub fn global_offset(&self) -> usize {
        self.starts[self.me()] * self.row
    }
    /// Elements held by each rank, in rank order.
    pub fn local_lens(&self) -> Vec<usize> {
        self.rows.iter().map(|r| r * self.row).collect()
    }
    /// This rank's local shape: the global shape with axis 0 replaced by its row count.
    pub fn local_shape(&self) -> Vec<usize> {
        let mut s = self.shape.clone();
        s[0] = self.local_rows();
        s
    }
    fn scattered(&self) -> bool {
        self.partition == Partition::GPUWIRE_PARTITION_SCATTER
    }
    fn is_host(&self) -> bool {
        self.storage.is_host()
    }

    /// Storage rows [first, first + n) as a buffer (a view that keeps the storage alive).
    fn view_rows(&self, first: usize, n: usize) -> Result<Buffer> {
        Buffer::view(&self.storage, (first * self.row) as i64, (n * self.row) as i64)
    }
    /// The owned elements (without halo) as a buffer.
    pub fn local(&self) -> Result<Buffer> {
        self.view_rows(self.halo, self.local_rows())
    }
    /// Halo rows above, owned rows, halo rows below, as one buffer.
    pub fn local_with_halo(&self) -> Result<Buffer> {
        self.view_rows(0, self.local_rows() + 2 * self.halo)
    }
    /// Address of the first owned element (NULL when the storage is empty).
    pub fn data_ptr(&self) -> usize {
        if self.storage.ptr() == 0 { 0 } else { self.storage.ptr() + self.halo * self.row * self.dtype.size() }
    }
    /// Storage rows of global rows `g` (which must lie within this rank's storage).
    fn storage_view(&self, g: Rows) -> Result<Buffer> {
        if g.is_empty() {
            return self.view_rows(0, 0);
        }
        let first = self.halo + g.lo - self.starts[self.me()];
        self.view_rows(first, g.len())
    }
    fn owned_rows(&self, r: usize) -> Rows {
        Rows { lo: self.starts[r], hi: self.starts[r] + self.rows[r] }
    }

    // ---- argument checks ------------------------------------------------------------------

    /// A hash of what every rank's part of one distributed array has alike: the shape, the
    /// partition, the split over the ranks, the halo and the kind of memory (the datatype is
    /// agreed on its own).
    fn layout(&self) -> i64 {
        let mut words: Vec<usize> = vec![self.shape.len(), self.partition as usize, self.halo, self.is_host() as usize];
        words.extend(&self.shape);
        words.extend(&self.rows);
        shape_hash(&words)
    }

    /// In checking mode, agrees a collective's local outcome across ranks on the array's
    /// communicator: which call it is, every rank's argument errors, the datatype and `sig`
    /// (root) as the plain collectives do ([`Communicator::agree`]); then that every rank passed
    /// arrays of the same layout (this one, and `other` where the call takes two) and the same
    /// `values` (named: a halo width, a norm kind). A mismatch is the same error on every rank,
    /// and nothing moves. With checking off, returns `local`. Every rank of a collective darray
    /// call passes here exactly once.
    fn agree<T>(&self, what: &str, sig: Sig, other: Option<&DArray>, values: &[(&str, i64)], local: Result<T>) -> Result<T> {
        let name = format!("gpuwire_darray_{what}");
        let _call = self.comm.enter(what, true)?;
        let local = self.comm.agree(&name, Sig { dtype: Some(self.dtype), ..sig }, local)?;
        if !self.comm.config().check {
            return Ok(local);
        }
        // Every rank got here (the agreement above returns the same outcome on every rank).
        let mine: Vec<i64> = [self.layout(), other.map_or(-1, |o| o.layout())].into_iter().chain(values.iter().map(|(_, v)| *v)).collect();
        let mut v: Vec<i64> = mine.iter().flat_map(|x| [*x, -*x]).collect();
        self.comm.allreduce_max_i64(&mut v, &name)?;
        let differs = |i: usize| v[2 * i] != -v[2 * i + 1];
        if differs(0) || differs(1) {
            return Err(Error::CountMismatch(format!(
                "{name}: the ranks passed distributed arrays of different shapes, splits, halos or kinds of memory{}; every rank must pass its part of the same array; nothing was done on any rank",
                if differs(0) { "" } else { " (the second array)" }
            )));
        }
        for (i, (what, _)) in values.iter().enumerate() {
            if differs(i + 2) {
                return Err(Error::InvalidArgument(format!(
                    "{name}: ranks passed different {what}s (from {} to {}; this rank {}); nothing was done on any rank",
                    -v[2 * (i + 2) + 1],
                    v[2 * (i + 2)],
                    mine[i + 2]
                )));
            }
        }
        Ok(local)
    }

    /// `x` and `y` can be combined elementwise.
    fn compatible(&self, what: &str, other: &DArray) -> Result<()> {
        if !Arc::ptr_eq(&self.comm, &other.comm) {
            return Err(Error::InvalidArgument(format!(
                "{what}: the distributed arrays live on different communicators (create both on the same gpuwire_comm)"
            )));
        }
        if self.dtype != other.dtype {
            return Err(Error::DtypeMismatch(format!("{what}: one array holds {} and the other {}", self.dtype.name(), other.dtype.name())));
        }
        if self.shape != other.shape {
            return Err(Error::CountMismatch(format!("{what}: the global shapes differ ({:?} and {:?})", self.shape, other.shape)));
        }
        if self.partition != other.partition {
            return Err(Error::InvalidArgument(format!(
                "{what}: one array is {} and the other {}; redistribute one of them first",
                self.partition.name(),
                other.partition.name()
            )));
        }
        if self.rows != other.rows {
            return Err(Error::CountMismatch(format!(
                "{what}: the arrays are split differently (local lengths {:?} and {:?}); redistribute one of them first",
                self.local_lens(),
                other.local_lens()
            )));
        }
        if self.is_host() != other.is_host() || (!self.is_host() && self.storage.device() != other.storage.device()) {
            return Err(Error::InvalidArgument(format!(
                "{what}: one array is in {} memory and the other in {} memory; both must be host-accessible, or both on the same device",
                self.space.name(),
                other.space.name()
            )));
        }
        Ok(())
    }

    fn check_value(&self, what: &str, name: &str, bytes: &[u8]) -> Result<()> {
        if bytes.len() != self.dtype.size() {
            return Err(Error::Internal(format!("{what}: {name} has {} bytes, not one {}", bytes.len(), self.dtype.name())));
        }
        Ok(())
    }

    fn check_arithmetic(&self, what: &str) -> Result<()> {
        if ak::arithmetic(self.dtype) {
            return Ok(());
        }
        Err(Error::UnsupportedDtype(format!(
            "{what} is defined on float32, float64, complex64 and complex128 arrays, not on {}",
            self.dtype.name()
        )))
    }

    /// For a BROADCAST array, rank 0's `bytes` on every rank (one broadcast): what keeps the
    /// copies identical. For SCATTER, `bytes` itself.
    fn root_value(&self, bytes: &[u8]) -> Result<Vec<u8>> {
        let mut v = bytes.to_vec();
        if !self.scattered() && self.comm.size() > 1 && !v.is_empty() {
            let b = Buffer::wrap(v.as_mut_ptr() as usize, v.len() as i64, Dtype::GPUWIRE_UINT8, Space::GPUWIRE_SPACE_HOST)?;
            self.wire.bcast(&b, 0, Stream(0))?;
        }
        Ok(v)
    }

    // ---- elementwise ----------------------------------------------------------------------

    /// Sets every owned element to `value` (one element's bytes; an argument error of the caller
    /// is agreed across ranks in checking mode). Local for SCATTER; collective for BROADCAST
    /// (rank 0's value).
    pub fn fill(&self, value: Result<Vec<u8>>, stream: Stream) -> Result<()> {
        let what = "fill";
        let value = value.and_then(|v| self.check_value(what, "the value", &v).map(|()| v));
        let value = if self.scattered() { value? } else { self.root_value(&self.agree(what, Sig::default(), None, &[], value)?)? };
        let n = self.local_len();
        if n == 0 {
            return Ok(());
        }
        if self.is_host() {
            // SAFETY: the owned elements are valid host memory of this dtype.
            unsafe { host::fill(self.data_ptr(), n, &value) };
            Ok(())
        } else {
            ak::fill(self.storage.device(), self.dtype, self.data_ptr(), n, &value, stream)
        }
    }

    /// y = alpha x + y on the owned elements (`alpha`: one element). Local for SCATTER;
    /// collective for BROADCAST (rank 0's alpha).
    pub fn axpy(alpha: Result<Vec<u8>>, x: &DArray, y: &DArray, stream: Stream) -> Result<()> {
        let what = "axpy";
        let local = alpha.and_then(|a| {
            y.check_value(what, "alpha", &a)?;
            y.check_arithmetic(what)?;
            y.compatible(what, x)?;
            Ok(a)
        });
        let alpha = if y.scattered() { local? } else { y.root_value(&y.agree(what, Sig::default(), Some(x), &[], local)?)? };
        let n = y.local_len();
        if n == 0 {
            return Ok(());
        }
        if y.is_host() {
            // SAFETY: both arrays hold n owned elements of this dtype (checked compatible).
            unsafe { host::axpy(y.dtype, y.data_ptr(), x.data_ptr(), n, &alpha) };
            Ok(())
        } else {
            ak::axpy(y.storage.device(), y.dtype, y.data_ptr(), x.data_ptr(), n, &alpha, stream)
        }
    }

    /// x = alpha x on the owned elements. Local for SCATTER; collective for BROADCAST.
    pub fn scale(&self, alpha: Result<Vec<u8>>, stream: Stream) -> Result<()> {
        let what = "scale";
        let local = alpha.and_then(|a| {
            self.check_value(what, "alpha", &a)?;
            self.check_arithmetic(what)?;
            Ok(a)
        });
        let alpha = if self.scattered() { local? } else { self.root_value(&self.agree(what, Sig::default(), None, &[], local)?)? };
        let n = self.local_len();
        if n == 0 {
            return Ok(());
        }
        if self.is_host() {
            // SAFETY: the owned elements are valid host memory of this dtype.
            unsafe { host::scale(self.dtype, self.data_ptr(), n, &alpha) };
            Ok(())
        } else {
            ak::scale(self.storage.device(), self.dtype, self.data_ptr(), n, &alpha, stream)
        }
    }

    // ---- reductions -----------------------------------------------------------------------

    fn supported(&self, what: &str, red: Red) -> Result<(Acc, Comb)> {
        ak::plan(red, self.dtype).ok_or_else(|| {
            let which = match red {
                Red::Dot | Red::Norm1 | Red::Norm2Squared | Red::NormInf => "float32, float64, complex64 and complex128 arrays",
                Red::Sum => "float32, float64, complex64, complex128 and integer arrays",
                Red::Min | Red::Max => "float32, float64 and integer arrays (complex numbers are not ordered)",
            };
            Error::UnsupportedDtype(format!("{what} is defined on {which}, not on {}", self.dtype.name()))
        })
    }

    /// This rank's partial result of `red` over its owned elements.
    fn local_reduce(&self, red: Red, other: Option<&DArray>, stream: Stream) -> Result<Acc> {
        let n = self.local_len();
        let x = self.data_ptr();
        let y = other.map_or(x, |o| o.data_ptr());
        if self.is_host() || n == 0 {
            if n == 0 {
                return Ok(ak::plan(red, self.dtype).expect("checked").0);
            }
            // SAFETY: n owned elements of this dtype at x (and y, checked compatible).
            return Ok(unsafe { host::reduce(red, self.dtype, x, y, n) });
        }
        let device = self.storage.device();
        let mut guard = self.scratch.lock().unwrap_or_else(|p| p.into_inner());
        let scratch = guard.get_or_insert_with(|| Scratch::new(Space::GPUWIRE_SPACE_DEVICE, device));
        let s = scratch.get(ak::SCRATCH_BYTES)?;
        ak::reduce(device, red, self.dtype, x, y, n, s, stream)
    }

    /// Reduces over every rank's owned elements: a local partial result, then (SCATTER) one
    /// allreduce that also carries whether each rank's local part succeeded, so a rank whose
    /// GPU work failed does not leave the others waiting.
    fn reduce(&self, what: &str, red: Red, other: Option<&DArray>, pre: Result<()>, stream: Stream) -> Result<Acc> {
        // The whole operation is one collective of the communicator (`Communicator::enter`).
        let _call = self.comm.enter(what, true)?;
        let local = pre.and_then(|()| self.supported(what, red)).and_then(|plan| {
            if let Some(o) = other {
                self.compatible(what, o)?;
            }
            if matches!(red, Red::Min | Red::Max) && self.global_len() == 0 {
                return Err(Error::InvalidArgument(format!("{what} of an empty array (global length 0) is undefined")));
            }
            Ok(plan)
        });
        if !self.scattered() {
            local?;
            return self.local_reduce(red, other, stream);
        }
        // The norm's kind as its GPUWIRE_NORM_* value (the other reductions differ by `what`).
        let kind = match red {
            Red::NormInf => 0,
            Red::Norm1 => 1,
            Red::Norm2Squared => 2,
            _ => -1,
        };
        let (ident, comb) = self.agree(what, Sig::default(), other, &[("norm kind", kind)], local)?;
        let part = self.local_reduce(red, other, stream);
        let failed = part.is_err();
        let acc = *part.as_ref().unwrap_or(&ident);
        let combined = if self.comm.size() == 1 { Ok((acc, false)) } else { self.allreduce_acc(acc, comb, failed) };
        match (part, combined) {
            (Err(e), _) => Err(e),
            (Ok(_), Err(e)) => Err(e),
            (Ok(_), Ok((_, true))) => Err(Error::RemoteArgument(format!(
                "gpuwire_darray_{what}: another rank failed to compute its part (its own error says why); no result"
            ))),
            (Ok(_), Ok((v, false))) => Ok(v),
        }
    }

    /// One allreduce of this rank's accumulator and its failure flag; returns the combined
    /// accumulator and whether any rank failed.
    fn allreduce_acc(&self, acc: Acc, comb: Comb, failed: bool) -> Result<(Acc, bool)> {
        let op = match comb {
            Comb::Add => ReduceOp::GPUWIRE_SUM,
            Comb::Min => ReduceOp::GPUWIRE_MIN,
            Comb::Max => ReduceOp::GPUWIRE_MAX,
        };
        let run = |ptr: usize, n: usize, d: Dtype| -> Result<()> {
            let b = Buffer::wrap(ptr, n as i64, d, Space::GPUWIRE_SPACE_HOST)?;
            self.wire.allreduce(&b, &b, op, Stream(0))
        };
        // The failure flag combines with the same op: SUM and MAX of "failed", MIN of "ok".
        let f = failed as u8 as f64;
        match acc {
            Acc::F(v) => {
                // NaN must not enter an MPI MIN/MAX (its result is unspecified): it travels as a flag.
                let (val, nan) = match comb {
                    Comb::Add => (v, 0.0),
                    Comb::Max => (if v.is_nan() { f64::NEG_INFINITY } else { v }, v.is_nan() as u8 as f64),
                    Comb::Min => (if v.is_nan() { f64::INFINITY } else { v }, -(v.is_nan() as u8 as f64)),
                };
                let flag = if comb == Comb::Min { 1.0 - f } else { f };
                let mut a = [val, nan, flag];
                run(a.as_mut_ptr() as usize, 3, Dtype::GPUWIRE_FLOAT64)?;
                let any_failed = if comb == Comb::Min { a[2] == 0.0 } else { a[2] != 0.0 };
                let v = if a[1] != 0.0 { f64::NAN } else { a[0] };
                Ok((Acc::F(v), any_failed))
            }
            Acc::C(re, im) => {
                let mut a = [re, im, f];
                run(a.as_mut_ptr() as usize, 3, Dtype::GPUWIRE_FLOAT64)?;
                Ok((Acc::C(a[0], a[1]), a[2] != 0.0))
            }
            Acc::U(v) if comb != Comb::Add => {
                // MPICH 4.0.2 compares MPI_UINT64_T as signed in MPI_MIN/MPI_MAX
                // (pmodels/mpich#6083): reduce the order-preserving signed image instead.
                const TOP: u64 = 1 << 63;
                match self.allreduce_acc(Acc::I((v ^ TOP) as i64), comb, failed)? {
                    (Acc::I(i), any) => Ok((Acc::U(i as u64 ^ TOP), any)),
                    (other, _) => Err(Error::Internal(format!("uint64 {comb:?} came back as {other:?}"))),
                }
            }
            Acc::U(v) => {
                let flag = failed as u64;
                let mut a = [v, flag];
                run(a.as_mut_ptr() as usize, 2, Dtype::GPUWIRE_UINT64)?;
                Ok((Acc::U(a[0]), a[1] != 0))
            }
            Acc::I(v) => {
                let flag = if comb == Comb::Min { !failed as i64 } else { failed as i64 };
                let mut a = [v, flag];
                run(a.as_mut_ptr() as usize, 2, Dtype::GPUWIRE_INT64)?;
                Ok((Acc::I(a[0]), if comb == Comb::Min { a[1] == 0 } else { a[1] != 0 }))
            }
        }
    }

    /// The accumulator as one element of this array's datatype.
    fn element(&self, acc: Acc) -> Vec<u8> {
        use Dtype::*;
        match (acc, self.dtype) {
            (Acc::F(v), GPUWIRE_FLOAT32) => (v as f32).to_ne_bytes().to_vec(),
            (Acc::F(v), _) => v.to_ne_bytes().to_vec(),
            (Acc::C(re, im), GPUWIRE_COMPLEX64) => [(re as f32).to_ne_bytes(), (im as f32).to_ne_bytes()].concat(),
            (Acc::C(re, im), _) => [re.to_ne_bytes(), im.to_ne_bytes()].concat(),
            // Integers: the low bytes of the 64-bit (wrapping) result.
            (Acc::U(v), d) => v.to_ne_bytes()[..d.size()].to_vec(),
            (Acc::I(v), d) => v.to_ne_bytes()[..d.size()].to_vec(),
        }
    }

    /// sum over i of x_i y_i (complex: conj(x_i) y_i, as BLAS dotc), as one element of the
    /// datatype. Collective for SCATTER.
    /// `pre`: the caller's own argument check (agreed across ranks in checking mode).
    pub fn dot(x: &DArray, y: &DArray, pre: Result<()>, stream: Stream) -> Result<Vec<u8>> {
        let acc = x.reduce("dot", Red::Dot, Some(y), pre, stream)?;
        Ok(x.element(acc))
    }

    /// The sum of the elements, as one element of the datatype (integers wrap).
    pub fn sum(&self, pre: Result<()>, stream: Stream) -> Result<Vec<u8>> {
        let acc = self.reduce("sum", Red::Sum, None, pre, stream)?;
        Ok(self.element(acc))
    }

    /// The smallest (or largest) element; NaN if any element is NaN.
    pub fn min_max(&self, max: bool, pre: Result<()>, stream: Stream) -> Result<Vec<u8>> {
        let (what, red) = if max { ("max", Red::Max) } else { ("min", Red::Min) };
        let acc = self.reduce(what, red, None, pre, stream)?;
        Ok(self.element(acc))
    }

    /// The 1-, 2- or infinity norm, in float64 whatever the datatype.
    pub fn norm(&self, kind: Result<NormKind>, pre: Result<()>, stream: Stream) -> Result<f64> {
        let red = match kind {
            Ok(NormKind::GPUWIRE_NORM_1) => Red::Norm1,
            Ok(NormKind::GPUWIRE_NORM_2) | Err(_) => Red::Norm2Squared,
            Ok(NormKind::GPUWIRE_NORM_INF) => Red::NormInf,
        };
        let pre = pre.and(kind.map(|_| ()));
        match self.reduce("norm", red, None, pre, stream)? {
            Acc::F(v) if red == Red::Norm2Squared => Ok(v.sqrt()),
            Acc::F(v) => Ok(v),
            other => Err(Error::Internal(format!("norm accumulator {other:?}"))),
        }
    }

    // ---- data movement --------------------------------------------------------------------

    /// Copies `bytes` from `src` to `dst` buffers (any spaces), on `stream` when a device is
    /// involved.
    fn copy(&self, dst: &Buffer, src: &Buffer, stream: Stream) -> Result<()> {
        let bytes = src.bytes().min(dst.bytes());
        if bytes == 0 || dst.ptr() == src.ptr() {
            return Ok(());
        }
        if dst.is_host() && src.is_host() {
            // SAFETY: both are valid for `bytes`; ptr::copy tolerates overlap.
            unsafe { std::ptr::copy(src.ptr() as *const u8, dst.ptr() as *mut u8, bytes) };
            return Ok(());
        }
        let dev = if dst.is_host() { src.device() } else { dst.device() };
        let _g = CtxGuard::enter(dev)?;
        device::copy_async(dst.ptr(), src.ptr(), bytes, stream)
    }

    /// Each rank copies its part of the global host array `src` (global_len elements) into its
    /// owned elements. SCATTER: local. BROADCAST: collective; rank 0's `src` is broadcast (the
    /// others' is not read and may be 0).
    pub fn set_global(&self, src: usize, stream: Stream) -> Result<()> {
        let _call = self.comm.enter("gpuwire_darray_set_global", true)?;
        let what = "set_global";
        let needs = if self.scattered() { self.local_len() > 0 } else { self.me() == 0 && self.global_len() > 0 };
        let local = if needs && src == 0 {
            Err(Error::NullArgument(format!("{what}: `src` is NULL but this rank reads {} elements from it", self.local_len())))
        } else {
            Ok(())
        };
        let mine = self.local()?;
        if self.scattered() {
            local?;
            let at = src.checked_add(self.global_offset() * self.dtype.size()).ok_or_else(|| {
                Error::InvalidArgument(format!("{what}: `src` {src:#x} + this rank's offset runs past the end of the address space"))
            })?;
            // SAFETY: the caller promises global_len elements at src.
            return unsafe { mine.copy_from_host(at, stream) };
        }
        self.agree(what, Sig::default(), None, &[], local)?;
        if self.me() == 0 {
            // SAFETY: as above (rank 0 holds everything).
            unsafe { mine.copy_from_host(src, stream)? };
        }
        if self.comm.size() > 1 {
            self.wire.bcast(&mine, 0, stream)?;
        }
        Ok(())
    }

    /// The whole array into every rank's host array `dst` (global_len elements): allgatherv,
    /// exact (no padding). Collective for SCATTER; a local copy for BROADCAST.
    pub fn allgather(&self, dst: usize, stream: Stream) -> Result<()> {
        let _call = self.comm.enter("gpuwire_darray_allgather", true)?;
        let what = "allgather";
        let n = self.global_len();
        let out = Buffer::wrap(dst, n as i64, self.dtype, Space::GPUWIRE_SPACE_HOST).map_err(|e| prefix(what, "dst", e));
        let mine = self.local()?;
        if !self.scattered() {
            return self.copy_to_host_sync(&mine, &out?, stream);
        }
        let out = self.agree(what, Sig::default(), None, &[], out)?;
        let counts: Vec<i64> = self.local_lens().into_iter().map(|c| c as i64).collect();
        self.wire.allgatherv(&mine, &out, Some(&counts), stream)
    }

    fn copy_to_host_sync(&self, src: &Buffer, dst: &Buffer, stream: Stream) -> Result<()> {
        // SAFETY: dst holds at least src's bytes (the callers size it).
        unsafe { src.copy_to_host(dst.ptr(), stream) }
    }

    /// The whole array into `root`'s host array `dst` (global_len elements; other ranks' `dst`
    /// is not read). Collective for SCATTER (point-to-point to the root); for BROADCAST only
    /// the root copies.
    pub fn gather(&self, dst: usize, root: i32, stream: Stream) -> Result<()> {
        let _call = self.comm.enter("gpuwire_darray_gather", true)?;
        let what = "gather";
        let p = self.comm.size();
        let n = self.global_len();
        let is_root = self.comm.rank() == root;
        let local = if !(0..p).contains(&root) {
            Err(Error::InvalidArgument(format!("{what}: root {root} is not a rank of this communicator (ranks are 0..{})", p - 1)))
        } else if is_root {
            Buffer::wrap(dst, n as i64, self.dtype, Space::GPUWIRE_SPACE_HOST).map(Some).map_err(|e| prefix(what, "dst", e))
        } else {
            Ok(None)
        };
        let mine = self.local()?;
        if !self.scattered() {
            return match local? {
                Some(out) => self.copy_to_host_sync(&mine, &out, stream),
                None => Ok(()),
            };
        }
        let out = self.agree(what, Sig { root: Some(root), ..Sig::default() }, None, &[], local)?;
        let size = self.dtype.size();
        let Some(out) = out else {
            if mine.count() > 0 {
                self.wire.send(&mine, root, TAG_GATHER, stream)?;
            }
            return Ok(());
        };
        let out = Arc::new(out);
        let lens = self.local_lens();
        let offsets: Vec<usize> = self.starts.iter().map(|s| s * self.row).collect();
        // SAFETY: out holds n elements; this rank's block is at its offset.
        unsafe { mine.copy_to_host(out.ptr() + offsets[self.me()] * size, stream)? };
        // Device data arrives in device memory (the message must take the same path on both
        // sides), then moves to the root's host array.
        let most = (0..p as usize).filter(|s| *s != self.me()).map(|s| lens[s]).max().unwrap_or(0);
        let temp = if self.is_host() || most == 0 {
            None
        } else {
            Some(Arc::new(Buffer::alloc(most as i64, self.dtype, self.space, self.storage.device())?))
        };
        for s in 0..p as usize {
            if s == self.me() || lens[s] == 0 {
                continue;
            }
            match &temp {
                None => {
                    let into = Buffer::view(&out, offsets[s] as i64, lens[s] as i64)?;
                    self.wire.recv(&into, s as i32, TAG_GATHER, stream)?;
                }
                Some(t) => {
                    let into = Buffer::view(t, 0, lens[s] as i64)?;
                    self.wire.recv(&into, s as i32, TAG_GATHER, stream)?;
                    // SAFETY: out holds n elements.
                    unsafe { into.copy_to_host(out.ptr() + offsets[s] * size, stream)? };
                }
            }
        }
        Ok(())
    }

    /// Copies `src` into `dst` (same communicator, shape and datatype; any partitions): a
    /// local copy when they are split alike, else an allgatherv (to BROADCAST) or point-to-point
    /// exchanges of the overlapping blocks (SCATTER to SCATTER). Collective unless both are
    /// BROADCAST or `src` is BROADCAST.
    pub fn redistribute(src: &DArray, dst: &DArray, stream: Stream) -> Result<()> {
        let what = "redistribute";
        let _call = src.comm.enter("gpuwire_darray_redistribute", true)?;
        let local = (|| {
            if !Arc::ptr_eq(&src.comm, &dst.comm) {
                return Err(Error::InvalidArgument(format!("{what}: the distributed arrays live on different communicators")));
            }
            if src.dtype != dst.dtype {
                return Err(Error::DtypeMismatch(format!("{what}: the source holds {} and the destination {}", src.dtype.name(), dst.dtype.name())));
            }
            if src.shape != dst.shape {
                return Err(Error::CountMismatch(format!("{what}: the global shapes differ ({:?} and {:?})", src.shape, dst.shape)));
            }
            if src.is_host() != dst.is_host() || (!src.is_host() && src.storage.device() != dst.storage.device()) {
                return Err(Error::InvalidArgument(format!(
                    "{what}: the source is in {} memory and the destination in {} memory; both must be host-accessible, or both on the same device (move data between host and device with allgather and set_global)",
                    src.space.name(),
                    dst.space.name()
                )));
            }
            Ok(())
        })();
        let collective = src.scattered();
        if collective {
            src.agree(what, Sig::default(), Some(dst), &[], local)?;
        } else {
            local?;
        }
        if std::ptr::eq(src, dst) {
            return Ok(());
        }
        let me = src.me();
        match (src.scattered(), dst.scattered()) {
            (false, _) => {
                // The source holds everything: copy this rank's rows of the destination.
                let rows = dst.owned_rows(me);
                let from = src.view_rows(src.halo + rows.lo, rows.len())?;
                src.copy(&dst.local()?, &from, stream)
            }
            (true, false) => {
                let counts: Vec<i64> = src.local_lens().into_iter().map(|c| c as i64).collect();
                src.wire.allgatherv(&src.local()?, &dst.local()?, Some(&counts), stream)
            }
            (true, true) => {
                let p = src.comm.size() as usize;
                // Shift k: rank r sends to r+k what of its old block r+k's new block needs.
                for k in 0..p {
                    let piece = |r: usize| src.owned_rows(r).and(dst.owned_rows((r + k) % p));
                    if (0..p).all(|r| piece(r).is_empty()) {
                        continue;
                    }
                    let to = (me + k) % p;
                    let from = (me + p - k) % p;
                    let send = piece(me);
                    let recv = piece(from);
                    if k == 0 {
                        src.copy(&dst.storage_view(recv)?, &src.storage_view(send)?, stream)?;
                        continue;
                    }
                    if send.is_empty() && recv.is_empty() {
                        continue;
                    }
                    let dest = if send.is_empty() { PROC_NULL } else { to as i32 };
                    let source = if recv.is_empty() { PROC_NULL } else { from as i32 };
                    src.wire.sendrecv(&src.storage_view(send)?, dest, TAG_REDISTRIBUTE, &dst.storage_view(recv)?, source, TAG_REDISTRIBUTE, stream)?;
                }
                Ok(())
            }
        }
    }

    /// BROADCAST arrays: makes every rank's copy equal to `root`'s (after you wrote to one
    /// rank's elements yourself). Collective.
    pub fn bcast(&self, root: i32, stream: Stream) -> Result<()> {
        let _call = self.comm.enter("gpuwire_darray_bcast", true)?;
        let p = self.comm.size();
        let local = if self.scattered() {
            Err(Error::InvalidArgument("bcast: the array is SCATTER, each rank owns different elements (bcast is for BROADCAST arrays)".into()))
        } else if !(0..p).contains(&root) {
            Err(Error::InvalidArgument(format!("bcast: root {root} is not a rank of this communicator (ranks are 0..{})", p - 1)))
        } else {
            Ok(())
        };
        self.agree("bcast", Sig { root: Some(root), ..Sig::default() }, None, &[], local)?;
        self.wire.bcast(&self.local()?, root, stream)
    }

    /// Fills `width` ghost rows above and below every rank's block with the rows of the
    /// neighbouring blocks (non-periodic: rows beyond the global edges are not touched).
    /// Collective; SCATTER only; `width` <= the halo given at creation (an error in `width`
    /// is agreed across ranks in checking mode).
    pub fn halo_exchange(&self, width: Result<usize>, stream: Stream) -> Result<()> {
        let _call = self.comm.enter("gpuwire_darray_halo_exchange", true)?;
        let what = "halo_exchange";
        let local = width.and_then(|width| {
            if !self.scattered() {
                Err(Error::InvalidArgument(format!("{what}: a BROADCAST array has no halo (every rank holds every row)")))
            } else if width > self.halo {
                Err(Error::InvalidArgument(format!("{what}: width {width} is more than the {} halo rows the array was created with", self.halo)))
            } else {
                Ok(width)
            }
        });
        let w = local.as_ref().map_or(-1, |w| *w as i64);
        let width = self.agree(what, Sig::default(), None, &[("halo width", w)], local)?;
        let p = self.comm.size() as usize;
        if width == 0 || p == 1 {
            return Ok(());
        }
        let n = self.shape[0];
        let me = self.me();
        let above = |r: usize| Rows { lo: self.starts[r].saturating_sub(width), hi: self.starts[r] };
        let below = |r: usize| {
            let end = self.starts[r] + self.rows[r];
            Rows { lo: end, hi: (end + width).min(n) }
        };
        // Downward (to the ghost rows above higher ranks), then upward, each by rank distance
        // k = 1, 2, ...: with blocks of at least `width` rows only k = 1 moves data.
        for (tag, down) in [(TAG_HALO_DOWN, true), (TAG_HALO_UP, false)] {
            for k in 1..p {
                // piece(r): what rank r sends at this step.
                let piece = |r: usize| -> Rows {
                    if down {
                        if r + k < p { self.owned_rows(r).and(above(r + k)) } else { Rows { lo: 0, hi: 0 } }
                    } else if r >= k {
                        self.owned_rows(r).and(below(r - k))
                    } else {
                        Rows { lo: 0, hi: 0 }
                    }
                };
                if (0..p).all(|r| piece(r).is_empty()) {
                    continue;
                }
                let (to, from) = if down { (me.checked_add(k).filter(|t| *t < p), me.checked_sub(k)) } else { (me.checked_sub(k), Some(me + k).filter(|f| *f < p)) };
                let send = piece(me);
                let recv = from.map_or(Rows { lo: 0, hi: 0 }, piece);
                if send.is_empty() && recv.is_empty() {
                    continue;
                }
                let dest = to.filter(|_| !send.is_empty()).map_or(PROC_NULL, |t| t as i32);
                let source = from.filter(|_| !recv.is_empty()).map_or(PROC_NULL, |f| f as i32);
                self.wire.sendrecv(&self.storage_view(send)?, dest, tag, &self.storage_view(recv)?, source, tag, stream)?;
            }
        }
        Ok(())
    }
}

/// Puts the argument's name in front of a wrapped pointer's error.
fn prefix(what: &str, arg: &str, e: Error) -> Error {
    let msg = e.to_string();
    let detail = msg.split_once(": ").map(|(_, d)| d.to_string()).unwrap_or(msg);
    Error::from_status(e.status(), format!("{what}: `{arg}`: {detail}"))
}

/// Host computations on raw element pointers (the owned elements of host-accessible arrays).
mod host {
    use super::*;

    fn real<T: Copy>(b: &[u8]) -> T {
        // SAFETY: b holds one T (checked by the callers: one element of the datatype).
        unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<T>()) }
    }

    /// # Safety
    /// `x` must hold `n` elements of `value.len()` bytes each.
    pub unsafe fn fill(x: usize, n: usize, value: &[u8]) {
        unsafe fn put<T: Copy>(x: usize, n: usize, v: T) {
            let p = x as *mut T;
            for i in 0..n {
                // SAFETY: i < n elements.
                unsafe { p.add(i).write(v) };
            }
        }
        // SAFETY: forwarded.
        unsafe {
            match value.len() {
                1 => put::<u8>(x, n, real(value)),
                2 => put::<u16>(x, n, real(value)),
                4 => put::<u32>(x, n, real(value)),
                8 => put::<u64>(x, n, real(value)),
                _ => put::<[u64; 2]>(x, n, real(value)),
            }
        }
    }

    fn cmul<T: Copy + std::ops::Mul<Output = T> + std::ops::Sub<Output = T> + std::ops::Add<Output = T>>(a: [T; 2], b: [T; 2]) -> [T; 2] {
        [a[0] * b[0] - a[1] * b[1], a[0] * b[1] + a[1] * b[0]]
    }

    /// y[i] = a x[i] + y[i]; the same two roundings as the GPU kernel (no fused multiply-add).
    ///
    /// # Safety
    /// `y` and `x` must hold `n` elements of `d` (they may be the same memory).
    pub unsafe fn axpy(d: Dtype, y: usize, x: usize, n: usize, alpha: &[u8]) {
        macro_rules! run {
            ($t:ty, $f:expr) => {{
                let a: $t = real(alpha);
                let (yp, xp) = (y as *mut $t, x as *const $t);
                for i in 0..n {
                    // SAFETY: i < n; element-wise reads before the write allow y == x.
                    unsafe {
                        let (xv, yv) = (xp.add(i).read(), yp.add(i).read());
                        yp.add(i).write($f(a, xv, yv));
                    }
                }
            }};
        }
        match d {
            Dtype::GPUWIRE_FLOAT32 => run!(f32, |a: f32, x: f32, y: f32| a * x + y),
            Dtype::GPUWIRE_FLOAT64 => run!(f64, |a: f64, x: f64, y: f64| a * x + y),
            Dtype::GPUWIRE_COMPLEX64 => run!([f32; 2], |a, x, y: [f32; 2]| {
                let m = cmul(a, x);
                [m[0] + y[0], m[1] + y[1]]
            }),
            Dtype::GPUWIRE_COMPLEX128 => run!([f64; 2], |a, x, y: [f64; 2]| {
                let m = cmul(a, x);
                [m[0] + y[0], m[1] + y[1]]
            }),
            _ => unreachable!("axpy on {} passed the datatype check", d.name()),
        }
    }

    /// x[i] = a x[i].
    ///
    /// # Safety
    /// `x` must hold `n` elements of `d`.
    pub unsafe fn scale(d: Dtype, x: usize, n: usize, alpha: &[u8]) {
        macro_rules! run {
            ($t:ty, $f:expr) => {{
                let a: $t = real(alpha);
                let xp = x as *mut $t;
                for i in 0..n {
                    // SAFETY: i < n.
                    unsafe { xp.add(i).write($f(a, xp.add(i).read())) };
                }
            }};
        }
        match d {
            Dtype::GPUWIRE_FLOAT32 => run!(f32, |a: f32, x: f32| a * x),
            Dtype::GPUWIRE_FLOAT64 => run!(f64, |a: f64, x: f64| a * x),
            Dtype::GPUWIRE_COMPLEX64 => run!([f32; 2], cmul),
            Dtype::GPUWIRE_COMPLEX128 => run!([f64; 2], cmul),
            _ => unreachable!("scale on {} passed the datatype check", d.name()),
        }
    }

    /// |re + i im| by the same operations as the device kernels' `gw_hypot` (max · sqrt(1 + r²),
    /// r = min/max; each step correctly rounded, no fused multiply-add), so a complex norm gives
    /// the same bits on host and device. Not `f64::hypot`: libm's and CUDA's differ in the last bit.
    fn cabs(re: f64, im: f64) -> f64 {
        let (a, b) = (re.abs(), im.abs());
        if a.is_infinite() || b.is_infinite() {
            return f64::INFINITY;
        }
        if a.is_nan() || b.is_nan() {
            return f64::NAN;
        }
        let (m, n) = if a > b { (a, b) } else { (b, a) };
        if m == 0.0 {
            return 0.0;
        }
        let r = n / m;
        m * (1.0 + r * r).sqrt()
    }

    fn maxf(a: f64, b: f64) -> f64 {
        if a.is_nan() || b.is_nan() {
            if a.is_nan() { a } else { b }
        } else if a > b {
            a
        } else {
            b
        }
    }
    fn minf(a: f64, b: f64) -> f64 {
        if a.is_nan() || b.is_nan() {
            if a.is_nan() { a } else { b }
        } else if a < b {
            a
        } else {
            b
        }
    }

    /// This rank's accumulator of `red` over `n` elements, in element order (the accumulator
    /// types and NaN rules of the GPU kernels).
    ///
    /// # Safety
    /// `x` (and `y` for Dot) must hold `n` elements of `d`.
    pub unsafe fn reduce(red: Red, d: Dtype, x: usize, y: usize, n: usize) -> Acc {
        macro_rules! realk {
            ($t:ty) => {{
                // SAFETY: n elements each (x and y may alias: both are shared).
                let (xs, ys) = unsafe { (std::slice::from_raw_parts(x as *const $t, n), std::slice::from_raw_parts(y as *const $t, n)) };
                let v = |i: usize| xs[i] as f64;
                match red {
                    Red::Dot => Acc::F((0..n).fold(0.0, |s, i| s + v(i) * ys[i] as f64)),
                    Red::Sum => Acc::F((0..n).fold(0.0, |s, i| s + v(i))),
                    Red::Norm1 => Acc::F((0..n).fold(0.0, |s, i| s + v(i).abs())),
                    Red::Norm2Squared => Acc::F((0..n).fold(0.0, |s, i| s + v(i) * v(i))),
                    Red::NormInf => Acc::F((0..n).fold(0.0, |s, i| maxf(s, v(i).abs()))),
                    Red::Min => Acc::F((0..n).fold(f64::INFINITY, |s, i| minf(s, v(i)))),
                    Red::Max => Acc::F((0..n).fold(f64::NEG_INFINITY, |s, i| maxf(s, v(i)))),
                }
            }};
        }
        macro_rules! cplx {
            ($t:ty) => {{
                // SAFETY: as above; a complex is two reals.
                let (xs, ys) = unsafe { (std::slice::from_raw_parts(x as *const [$t; 2], n), std::slice::from_raw_parts(y as *const [$t; 2], n)) };
                let v = |i: usize| (xs[i][0] as f64, xs[i][1] as f64);
                match red {
                    Red::Dot => {
                        let (mut re, mut im) = (0.0, 0.0);
                        for i in 0..n {
                            let ((xr, xi), (yr, yi)) = (v(i), (ys[i][0] as f64, ys[i][1] as f64));
                            re += xr * yr + xi * yi;
                            im += xr * yi - xi * yr;
                        }
                        Acc::C(re, im)
                    }
                    Red::Sum => {
                        let (mut re, mut im) = (0.0, 0.0);
                        for i in 0..n {
                            re += v(i).0;
                            im += v(i).1;
                        }
                        Acc::C(re, im)
                    }
                    Red::Norm1 => Acc::F((0..n).fold(0.0, |s, i| s + cabs(v(i).0, v(i).1))),
                    Red::Norm2Squared => Acc::F((0..n).fold(0.0, |s, i| s + (v(i).0 * v(i).0 + v(i).1 * v(i).1))),
                    Red::NormInf => Acc::F((0..n).fold(0.0, |s, i| maxf(s, cabs(v(i).0, v(i).1)))),
                    Red::Min | Red::Max => unreachable!("min/max on complex passed the datatype check"),
                }
            }};
        }
        macro_rules! int {
            ($t:ty, $signed:expr) => {{
                // SAFETY: n elements.
                let xs = unsafe { std::slice::from_raw_parts(x as *const $t, n) };
                match (red, $signed) {
                    (Red::Sum, _) => Acc::U(xs.iter().fold(0u64, |s, v| s.wrapping_add(*v as i64 as u64))),
                    (Red::Min, true) => Acc::I(xs.iter().map(|v| *v as i64).min().unwrap_or(i64::MAX)),
                    (Red::Max, true) => Acc::I(xs.iter().map(|v| *v as i64).max().unwrap_or(i64::MIN)),
                    (Red::Min, false) => Acc::U(xs.iter().map(|v| *v as u64).min().unwrap_or(u64::MAX)),
                    (Red::Max, false) => Acc::U(xs.iter().map(|v| *v as u64).max().unwrap_or(0)),
                    _ => unreachable!("{:?} on integers passed the datatype check", red),
                }
            }};
        }
        use Dtype::*;
        match d {
            GPUWIRE_FLOAT32 => realk!(f32),
            GPUWIRE_FLOAT64 => realk!(f64),
            GPUWIRE_COMPLEX64 => cplx!(f32),
            GPUWIRE_COMPLEX128 => cplx!(f64),
            GPUWIRE_INT8 => int!(i8, true),
            GPUWIRE_UINT8 => int!(u8, false),
            GPUWIRE_INT32 => int!(i32, true),
            GPUWIRE_UINT32 => int!(u32, false),
            GPUWIRE_INT64 => int!(i64, true),
            GPUWIRE_UINT64 => int!(u64, false),
            GPUWIRE_FLOAT16 | GPUWIRE_BFLOAT16 | GPUWIRE_FLOAT32_INT32 | GPUWIRE_FLOAT64_INT32 | GPUWIRE_INT32_INT32 => unreachable!("reduction on {} passed the datatype check", d.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_intersect() {
        let a = Rows { lo: 2, hi: 6 };
        assert_eq!(a.and(Rows { lo: 4, hi: 9 }), Rows { lo: 4, hi: 6 });
        assert!(a.and(Rows { lo: 7, hi: 9 }).is_empty());
        assert!(a.and(Rows { lo: 0, hi: 1 }).is_empty());
    }

    #[test]
    fn host_kernels_match_a_direct_computation() {
        let x = [1.0f64, -2.0, 3.5, f64::NAN];
        let y = [2.0f64, 0.5, -1.0, 0.0];
        let p = |v: &[f64]| v.as_ptr() as usize;
        // SAFETY: 3 or 4 elements of float64.
        unsafe {
            assert_eq!(host::reduce(Red::Dot, Dtype::GPUWIRE_FLOAT64, p(&x), p(&y), 3), Acc::F(2.0 - 1.0 - 3.5));
            assert_eq!(host::reduce(Red::Norm1, Dtype::GPUWIRE_FLOAT64, p(&x), p(&x), 3), Acc::F(6.5));
            assert_eq!(host::reduce(Red::Min, Dtype::GPUWIRE_FLOAT64, p(&x), p(&x), 3), Acc::F(-2.0));
            assert!(matches!(host::reduce(Red::Max, Dtype::GPUWIRE_FLOAT64, p(&x), p(&x), 4), Acc::F(v) if v.is_nan()));
            assert!(matches!(host::reduce(Red::NormInf, Dtype::GPUWIRE_FLOAT64, p(&x), p(&x), 4), Acc::F(v) if v.is_nan()));
        }
        // dotc: conj(1+2i) (3-1i) = (1-2i)(3-i) = 3 - i - 6i + 2i^2 = 1 - 7i
        let a = [1.0f64, 2.0];
        let b = [3.0f64, -1.0];
        // SAFETY: one complex128 each.
        unsafe {
            assert_eq!(host::reduce(Red::Dot, Dtype::GPUWIRE_COMPLEX128, p(&a), p(&b), 1), Acc::C(1.0, -7.0));
        }
        let ints = [-3i8, 100, 100];
        // SAFETY: three int8.
        unsafe {
            let s = host::reduce(Red::Sum, Dtype::GPUWIRE_INT8, ints.as_ptr() as usize, 0, 3);
            assert_eq!(s, Acc::U(197));
            assert_eq!(host::reduce(Red::Min, Dtype::GPUWIRE_INT8, ints.as_ptr() as usize, 0, 3), Acc::I(-3));
        }
        let mut z = [1.0f32, 2.0, 3.0];
        // SAFETY: three float32; y and x alias.
        unsafe {
            host::axpy(Dtype::GPUWIRE_FLOAT32, z.as_mut_ptr() as usize, z.as_ptr() as usize, 3, &2.0f32.to_ne_bytes());
            host::scale(Dtype::GPUWIRE_FLOAT32, z.as_mut_ptr() as usize, 3, &0.5f32.to_ne_bytes());
            host::fill(z.as_mut_ptr() as usize, 1, &7.0f32.to_ne_bytes());
        }
        assert_eq!(z, [7.0, 3.0, 4.5]);
    }

    #[test]
    fn shape_hash_tells_shapes_apart() {
        assert_ne!(shape_hash(&[4, 6]), shape_hash(&[6, 4]));
        assert_ne!(shape_hash(&[24]), shape_hash(&[4, 6]));
        assert!(shape_hash(&[3, 5, 7]) >= 0);
    }
}
