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
/// Halo exchange of a grid: TAG_HALO_AXIS + 2 axis fills the ghosts below the blocks along
/// that axis, + 1 those above.
pub(crate) const TAG_HALO_AXIS: i32 = 32100;

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
    /// A Cartesian decomposition over a process grid (gpuwire_darray_create_cart,
    /// gpuwire_darray_wrap); `None`: split along axis 0 (`local_rows`, `halo`).
    pub cart: Option<Cart>,
    /// The program's memory to use as this rank's storage (gpuwire_darray_wrap); `None`:
    /// allocated by gpuwire.
    pub wrap: Option<usize>,
}

/// A Cartesian decomposition as asked for: per axis the number of processes (0 = chosen as
/// MPI_Dims_create does), the halo width and whether the axis is periodic.
#[derive(Clone, Debug)]
pub struct Cart {
    pub procs: Vec<usize>,
    pub halo: Vec<usize>,
    pub periodic: Vec<bool>,
}

impl Cart {
    /// The process grid over `size` ranks: `procs` with its zero entries chosen by
    /// [`dims_create`]; with more than 4 axes only axis 0 may be split, so there gpuwire's own
    /// choice for the other axes is 1.
    fn grid(&self, size: usize) -> Result<Vec<usize>> {
        let mut asked = self.procs.clone();
        if asked.len() > 4 {
            asked[1..].iter_mut().filter(|p| **p == 0).for_each(|p| *p = 1);
        }
        dims_create(size, &asked)
    }
}

/// The process grid of `size` ranks with `asked[a]` processes along axis a, the zero entries
/// filled as MPI_Dims_create does (as balanced as possible, in non-increasing order).
pub fn dims_create(size: usize, asked: &[usize]) -> Result<Vec<usize>> {
    let fixed = asked.iter().filter(|d| **d > 0).try_fold(1usize, |a, d| a.checked_mul(*d));
    let free = asked.iter().filter(|d| **d == 0).count();
    let bad = || Error::InvalidArgument(format!("process grid {} (0 = chosen by gpuwire): the numbers of processes per axis must multiply to the communicator's size, {size}", brief(asked)));
    let fixed = fixed.filter(|f| size % f == 0 && (free > 0 || *f == size)).ok_or_else(bad)?;
    let mut rest = size / fixed;
    let mut primes = Vec::new();
    let mut f = 2;
    while rest > 1 {
        while rest % f == 0 {
            primes.push(f);
            rest /= f;
        }
        f += 1;
    }
    let mut filled = vec![1usize; free];
    for q in primes.into_iter().rev() {
        if let Some(m) = filled.iter_mut().min() {
            *m *= q;
        }
    }
    filled.sort_unstable_by(|a, b| b.cmp(a));
    let mut it = filled.into_iter();
    Ok(asked.iter().map(|d| if *d > 0 { *d } else { it.next().unwrap_or(1) }).collect())
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
        if let Some(c) = &self.cart {
            let procs = c.grid(comm.size() as usize)?;
            // The padded block can be no larger than the global shape with its halos.
            let padded = self.shape.iter().zip(&c.halo).try_fold(1usize, |a, (n, h)| h.checked_mul(2).and_then(|h| h.checked_add(*n)).and_then(|d| a.checked_mul(d)));
            if padded.and_then(|e| e.checked_mul(self.dtype.size())).is_none_or(|b| b > isize::MAX as usize) {
                return Err(Error::InvalidArgument(format!(
                    "the shape {} with halo widths {} needs more memory than the address space holds",
                    brief(&self.shape),
                    brief(&c.halo)
                )));
            }
            let nd = self.shape.len();
            if nd > 4 && !(procs[1..].iter().all(|p| *p == 1) && c.halo[1..].iter().all(|h| *h == 0)) {
                return Err(Error::InvalidArgument(format!(
                    "ndim = {nd} with processes {} and halo widths {}: a decomposition or halo on an axis other than the first needs ndim <= 4 (strided views have at most 4 dimensions)",
                    brief(&procs),
                    brief(&c.halo)
                )));
            }
        }
        if self.wrap.is_some() && self.partition != Partition::GPUWIRE_PARTITION_SCATTER {
            return Err(Error::InvalidArgument("gpuwire_darray_wrap makes SCATTER arrays only".into()));
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
        if self.space == Space::GPUWIRE_SPACE_AUTO && self.wrap.is_none() {
            return Err(Error::InvalidArgument("GPUWIRE_SPACE_AUTO is not a memory space to allocate in: pass HOST, DEVICE, PINNED or MANAGED".into()));
        }
        if !self.space.is_host_accessible() && self.space != Space::GPUWIRE_SPACE_AUTO && comm.backend() == crate::types::BackendKind::GPUWIRE_BACKEND_HOST {
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
    Error::InvalidArgument(format!("the shape {} has more elements than the address space holds", brief(shape)))
}

/// A list (a shape, a process grid, halo widths, the ranks' lengths) for an error message:
/// whole up to 8 entries, else its first 4 and last 2 entries and how many it has. Such lists
/// grow with the number of dimensions or ranks; printed whole they pushed messages past the
/// 1024 bytes that hold every message (gpuwire_last_error), and the cross-rank agreement cut
/// them there, losing the message's end (what was wrong).
pub(crate) fn brief<T: std::fmt::Debug>(v: &[T]) -> String {
    if v.len() <= 8 {
        return format!("{v:?}");
    }
    let show = |xs: &[T]| xs.iter().map(|x| format!("{x:?}")).collect::<Vec<_>>().join(", ");
    format!("[{}, ..., {}] ({} entries)", show(&v[..4]), show(&v[v.len() - 2..]), v.len())
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
    /// Processes along each axis (the process grid; rank order is C order over it, as
    /// MPI_Cart_create without reordering), and this rank's coordinates in it.
    procs: Vec<usize>,
    coords: Vec<usize>,
    /// Per axis, each process coordinate's block length and first global index.
    counts: Vec<Vec<usize>>,
    offs: Vec<Vec<usize>>,
    /// Ghost width on each side of every axis, and which axes are periodic.
    halos: Vec<usize>,
    periodic: Vec<bool>,
    /// The storage's dimensions: this rank's block with its ghosts on every axis (C order).
    pad: Vec<usize>,
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
        let decomposition = spec.cart.as_ref().map_or(-1, |c| {
            let words: Vec<usize> = c.procs.iter().chain(&c.halo).copied().chain(c.periodic.iter().map(|b| *b as usize)).collect();
            shape_hash(&words)
        });
        const D: usize = 10;
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
            decomposition,
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
            if a[9] != b[9] {
                return Err(Error::InvalidArgument(format!(
                    "rank {r} passed another process grid, halo widths or periodicity than rank 0 (or another creation call); every rank must pass the same"
                )));
            }
            if a[8] != b[8] && spec.wrap.is_none() {
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
                        "ranks {} passed GPUWIRE_DECIDE and the others a local length ({}); pass GPUWIRE_DECIDE on every rank, or a length on every rank",
                        brief(&which),
                        brief(&asked)
                    )));
                } else {
                    let sum = asked.iter().try_fold(0usize, |s, v| s.checked_add(*v as usize));
                    if sum != Some(n) {
                        return Err(Error::CountMismatch(format!(
                            "the local lengths {} ({unit} per rank) add up to {} but the global length along axis 0 is {n}",
                            brief(&asked),
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
        let nd = spec.shape.len();
        let scatter = spec.partition == Partition::GPUWIRE_PARTITION_SCATTER;
        // The process grid, and each axis's split over it.
        let (procs, halos, periodic) = match &spec.cart {
            Some(c) => (c.grid(p)?, c.halo.clone(), c.periodic.clone()),
            None => {
                let mut procs = vec![1usize; nd];
                let mut halos = vec![0usize; nd];
                if scatter {
                    procs[0] = p;
                }
                halos[0] = spec.halo;
                (procs, halos, vec![false; nd])
            }
        };
        let mut coords = vec![0usize; nd];
        let mut rest = if scatter { me } else { 0 };
        for a in (0..nd).rev() {
            coords[a] = rest % procs[a];
            rest /= procs[a];
        }
        let mut counts = Vec::with_capacity(nd);
        let mut offs = Vec::with_capacity(nd);
        for a in 0..nd {
            let (o, c): (Vec<usize>, Vec<usize>) = if a == 0 && spec.cart.is_none() {
                (if scatter { starts.clone() } else { vec![0] }, if scatter { rows.clone() } else { vec![n] })
            } else {
                ring::partition(spec.shape[a], procs[a]).into_iter().unzip()
            };
            offs.push(o);
            counts.push(c);
        }
        // Legacy row split: rows[r] and starts[r] are rank r's; a grid: its axis-0 block's.
        let (rows, starts) = if spec.cart.is_some() {
            let stride0: usize = procs[1..].iter().product();
            ((0..p).map(|r| counts[0][r / stride0]).collect(), (0..p).map(|r| offs[0][r / stride0]).collect())
        } else {
            (rows, starts)
        };
        // validate() bounded the padded global shape's bytes, and a block is within it.
        let pad: Vec<usize> = (0..nd).map(|a| counts[a][coords[a]] + 2 * halos[a]).collect();
        let count = pad.iter().try_fold(1usize, |x, d| x.checked_mul(*d)).ok_or_else(|| overflow(&spec.shape))?;
        let count = i64::try_from(count).map_err(|_| overflow(&spec.shape))?;
        let device = if spec.space == Space::GPUWIRE_SPACE_HOST { -1 } else { comm.device() };
        let storage = match spec.wrap {
            Some(ptr) => Buffer::wrap(ptr, count, spec.dtype, spec.space).map_err(|e| prefix("gpuwire_darray_wrap", "ptr", e)),
            None => Buffer::alloc(count, spec.dtype, spec.space, device),
        };
        let storage = storage.and_then(|b| {
            if !b.is_host() && comm.backend() == crate::types::BackendKind::GPUWIRE_BACKEND_HOST {
                // Only wrapped memory declared AUTO gets here (validate() refused the others).
                return Err(Error::BackendUnavailable(format!(
                    "a distributed array on device memory needs a communicator that moves device memory, but this one's backend is HOST ({})",
                    comm.choice().reason
                )));
            }
            Ok(b)
        });
        let storage = wire.agree_on_result(storage, if spec.wrap.is_some() { "wrapping the program's memory" } else { "allocating the distributed array" })?;
        if spec.wrap.is_some() && p > 1 {
            // Wrapped memory of kind AUTO: the ranks' kinds (host or device) must agree.
            let h = storage.is_host() as i64;
            let mut v = [h, -h];
            wire.allreduce_max_i64(&mut v, "gpuwire_darray_wrap")?;
            if v[0] != -v[1] {
                return Err(Error::InvalidArgument(
                    "gpuwire_darray_wrap: some ranks passed host memory and others device memory; every rank must pass the same kind".into(),
                ));
            }
        }
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
        let space = storage.space();
        Ok(DArray {
            comm: comm.clone(),
            wire,
            dtype: spec.dtype,
            space,
            partition: spec.partition,
            shape: spec.shape,
            row,
            rows,
            starts,
            procs,
            coords,
            counts,
            offs,
            halos,
            periodic,
            pad,
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
    /// Ghost rows allocated above and below the owned block (axis 0's halo width).
    pub fn halo(&self) -> usize {
        self.halos[0]
    }
    /// Per axis: processes, this rank's coordinate, its block's first global index, the halo
    /// width and periodicity.
    pub fn cart(&self) -> (&[usize], &[usize], Vec<usize>, &[usize], &[bool]) {
        let starts = (0..self.shape.len()).map(|a| self.offs[a][self.coords[a]]).collect();
        (&self.procs, &self.coords, starts, &self.halos, &self.periodic)
    }
    /// Rank r's coordinates in the process grid.
    fn coords_of(&self, r: usize) -> Vec<usize> {
        let mut c = vec![0usize; self.shape.len()];
        let mut rest = if self.scattered() { r } else { 0 };
        for a in (0..c.len()).rev() {
            c[a] = rest % self.procs[a];
            rest /= self.procs[a];
        }
        c
    }
    /// Rank r's block: its dimensions and its first global index per axis.
    fn block_of(&self, r: usize) -> (Vec<usize>, Vec<usize>) {
        let c = self.coords_of(r);
        (0..c.len()).map(|a| (self.counts[a][c[a]], self.offs[a][c[a]])).unzip()
    }
    /// Whether every rank's block is a range of whole global rows (split along axis 0 only).
    fn rowwise(&self) -> bool {
        self.procs[1..].iter().all(|p| *p == 1)
    }
    /// Whether the owned elements are contiguous in the storage (no halo beyond axis 0).
    fn dense(&self) -> bool {
        self.halos[1..].iter().all(|h| *h == 0)
    }
    /// Whether the existing row-split code serves this array (rows contiguous locally and
    /// globally).
    fn rows_layout(&self) -> bool {
        self.rowwise() && self.dense()
    }
    /// The storage's element strides per axis (C order).
    fn pad_strides(&self) -> Vec<usize> {
        let mut st = vec![1usize; self.pad.len()];
        for a in (0..self.pad.len().saturating_sub(1)).rev() {
            st[a] = st[a + 1] * self.pad[a + 1];
        }
        st
    }
    /// The storage elements of the box `[lo[a], lo[a] + len[a])` on every axis, as a view
    /// (contiguous where it can be).
    fn storage_box(&self, lo: &[usize], len: &[usize]) -> Result<Buffer> {
        let total: usize = len.iter().product();
        if total == 0 {
            return Buffer::view(&self.storage, 0, 0);
        }
        let nd = self.pad.len();
        // Contiguous: full extents after the first axis that is not of length 1.
        let first = (0..nd).find(|a| len[*a] != 1).unwrap_or(nd - 1);
        if (first + 1..nd).all(|a| lo[a] == 0 && len[a] == self.pad[a]) {
            let st = self.pad_strides();
            let off: usize = (0..nd).map(|a| lo[a] * st[a]).sum();
            return Buffer::view(&self.storage, off as i64, total as i64);
        }
        let i = |v: &[usize]| v.iter().map(|x| *x as i64).collect::<Vec<_>>();
        Buffer::view_subarray(&self.storage, &i(&self.pad), &i(len), &i(lo), crate::buffer::Order::C)
    }
    /// Elements per row along axis 0.
    pub fn row_len(&self) -> usize {
        self.row
    }
    pub fn global_len(&self) -> usize {
        self.shape.iter().product()
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
        self.local_shape().iter().product()
    }
    /// Global (C-order) index of this rank's first element (0 for BROADCAST).
    pub fn global_offset(&self) -> usize {
        let (_, corner) = self.block_of(self.me());
        corner.iter().zip(&self.shape).fold(0usize, |x, (c, n)| x * n + c)
    }
    /// Elements held by each rank, in rank order.
    pub fn local_lens(&self) -> Vec<usize> {
        (0..self.rows.len()).map(|r| self.block_of(r).0.iter().product()).collect()
    }
    /// This rank's block's shape (a row split: the global shape with axis 0 replaced by its
    /// row count).
    pub fn local_shape(&self) -> Vec<usize> {
        (0..self.shape.len()).map(|a| self.counts[a][self.coords[a]]).collect()
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
    /// The owned elements (without halo) as a buffer (a subarray view when the array has a
    /// halo beyond axis 0).
    pub fn local(&self) -> Result<Buffer> {
        self.storage_box(&self.halos, &self.local_shape())
    }
    /// The whole storage: the block with its ghosts on every axis.
    pub fn local_with_halo(&self) -> Result<Buffer> {
        Buffer::view(&self.storage, 0, self.storage.count() as i64)
    }
    /// Address of the first owned element (NULL when the storage is empty).
    pub fn data_ptr(&self) -> usize {
        let off: usize = self.halos.iter().zip(self.pad_strides()).map(|(h, s)| h * s).sum();
        if self.storage.ptr() == 0 { 0 } else { self.storage.ptr() + off * self.dtype.size() }
    }
    /// Storage rows of global rows `g` (which must lie within this rank's storage).
    fn storage_view(&self, g: Rows) -> Result<Buffer> {
        if g.is_empty() {
            return self.view_rows(0, 0);
        }
        let first = self.halos[0] + g.lo - self.starts[self.me()];
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
        let mut words: Vec<usize> = vec![self.shape.len(), self.partition as usize, self.is_host() as usize];
        words.extend(&self.shape);
        words.extend(&self.rows);
        words.extend(&self.procs);
        words.extend(&self.halos);
        words.extend(self.periodic.iter().map(|b| *b as usize));
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

    /// A call of two arrays (dot, axpy, redistribute) whose other array's handle was refused
    /// on this rank (`e`), this one standing in for it: where the call is collective for arrays
    /// of this one's partition, its agreement runs with the error, so that in checking mode the
    /// other ranks return an error (GPUWIRE_ERROR_REMOTE_ARGUMENT) instead of waiting for this
    /// one; `e` is this rank's error. `what` is the call's own name in its agreement.
    pub fn refused_other(&self, what: &str, e: Error) -> Error {
        let collective = match what {
            // Collective for SCATTER arrays (a reduction of the parts; a move of blocks: this is
            // the source, whose partition decides).
            "dot" | "redistribute" => self.scattered(),
            // Collective for BROADCAST arrays (rank 0's alpha).
            "axpy" => !self.scattered(),
            _ => false,
        };
        if !collective {
            return e;
        }
        match self.agree(what, Sig::default(), None, &[], Err::<(), _>(e)) {
            Err(e) => e,
            Ok(()) => Error::Internal(format!("{what}: an agreement of an error succeeded")),
        }
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
            return Err(Error::CountMismatch(format!("{what}: the global shapes differ ({} and {})", brief(&self.shape), brief(&other.shape))));
        }
        if self.partition != other.partition {
            return Err(Error::InvalidArgument(format!(
                "{what}: one array is {} and the other {}; redistribute one of them first",
                self.partition.name(),
                other.partition.name()
            )));
        }
        if self.rows != other.rows || self.procs != other.procs || self.counts != other.counts {
            let (a, b) = (self.local_lens(), other.local_lens());
            let first = a.iter().zip(&b).position(|(x, y)| x != y).map_or(String::new(), |r| format!(", first on rank {r}: {} and {}", a[r], b[r]));
            return Err(Error::CountMismatch(format!(
                "{what}: the arrays are split differently (local lengths {} and {}{first}); redistribute one of them first",
                brief(&a),
                brief(&b)
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

    /// Runs `f` on the address of this rank's owned elements, contiguous: the storage itself
    /// when they are (no halo beyond axis 0), else contiguous scratch that their values are
    /// packed into first (`read`) and unpacked from after (`write`): one GPU kernel each on
    /// `stream` for device arrays.
    fn with_owned<R>(&self, read: bool, write: bool, stream: Stream, f: impl FnOnce(usize) -> Result<R>) -> Result<R> {
        if self.dense() || self.local_len() == 0 {
            return f(self.data_ptr());
        }
        let owned = self.local()?;
        if self.is_host() {
            // u64 words: aligned for every datatype (complex128's parts are 8 bytes).
            let mut tmp = vec![0u64; owned.bytes().div_ceil(8)];
            let at = tmp.as_mut_ptr() as usize;
            if read {
                // SAFETY: tmp holds the view's bytes.
                unsafe { owned.pack_host(at) };
            }
            let r = f(at)?;
            if write {
                // SAFETY: as above.
                unsafe { owned.unpack_host(at) };
            }
            return Ok(r);
        }
        let scratch = crate::view::Scratch::for_view(&owned, stream)?;
        let at = scratch.buf().ptr();
        let _g = CtxGuard::enter(owned.device())?;
        if read {
            device::kernels::pack(owned.pack_view(), at, false, stream)?;
        }
        let r = f(at)?;
        if write {
            device::kernels::pack(owned.pack_view(), at, true, stream)?;
        }
        Ok(r)
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
        self.with_owned(false, true, stream, |x| {
            if self.is_host() {
                // SAFETY: x holds the n owned elements of this dtype.
                unsafe { host::fill(x, n, &value) };
                Ok(())
            } else {
                ak::fill(self.storage.device(), self.dtype, x, n, &value, stream)
            }
        })
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
        if std::ptr::eq(x, y) {
            return y.with_owned(true, true, stream, |yp| {
                if y.is_host() {
                    // SAFETY: yp holds the n owned elements of this dtype.
                    unsafe { host::axpy(y.dtype, yp, yp, n, &alpha) };
                    Ok(())
                } else {
                    ak::axpy(y.storage.device(), y.dtype, yp, yp, n, &alpha, stream)
                }
            });
        }
        x.with_owned(true, false, stream, |xp| {
            y.with_owned(true, true, stream, |yp| {
                if y.is_host() {
                    // SAFETY: both hold n owned elements of this dtype (checked compatible).
                    unsafe { host::axpy(y.dtype, yp, xp, n, &alpha) };
                    Ok(())
                } else {
                    ak::axpy(y.storage.device(), y.dtype, yp, xp, n, &alpha, stream)
                }
            })
        })
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
        self.with_owned(true, true, stream, |x| {
            if self.is_host() {
                // SAFETY: x holds the n owned elements of this dtype.
                unsafe { host::scale(self.dtype, x, n, &alpha) };
                Ok(())
            } else {
                ak::scale(self.storage.device(), self.dtype, x, n, &alpha, stream)
            }
        })
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
        self.with_owned(true, false, stream, |x| match other {
            Some(o) if !std::ptr::eq(o, self) => o.with_owned(true, false, stream, |y| self.reduce_at(red, x, y, stream)),
            _ => self.reduce_at(red, x, x, stream),
        })
    }

    /// `red` over the n owned elements at `x` (and `y`), contiguous.
    fn reduce_at(&self, red: Red, x: usize, y: usize, stream: Stream) -> Result<Acc> {
        let n = self.local_len();
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

    /// Rank r's block within a global host array (`base`, C order) as a view.
    fn global_box(&self, base: &Arc<Buffer>, r: usize) -> Result<Buffer> {
        let (dims, corner) = self.block_of(r);
        if dims.iter().product::<usize>() == 0 {
            return Buffer::view(base, 0, 0);
        }
        let i = |v: &[usize]| v.iter().map(|x| *x as i64).collect::<Vec<_>>();
        Buffer::view_subarray(base, &i(&self.shape), &i(&dims), &i(&corner), crate::buffer::Order::C)
    }

    /// The owned elements at `ptr` (contiguous, from [`DArray::with_owned`]) as a buffer.
    fn owned_at(&self, ptr: usize) -> Result<Buffer> {
        Buffer::wrap(ptr, self.local_len() as i64, self.dtype, if self.is_host() { Space::GPUWIRE_SPACE_HOST } else { self.space })
    }

    /// set_global of an array whose blocks are not ranges of global rows (local).
    fn set_global_blocks(&self, src: usize, stream: Stream) -> Result<()> {
        if self.local_len() == 0 {
            return Ok(());
        }
        let g = Arc::new(Buffer::wrap(src, self.global_len() as i64, self.dtype, Space::GPUWIRE_SPACE_HOST).map_err(|e| prefix("set_global", "src", e))?);
        let part = self.global_box(&g, self.me())?;
        let mut tmp = vec![0u64; part.bytes().div_ceil(8)];
        // SAFETY: tmp holds the block's bytes; the local view reads as many.
        unsafe {
            part.pack_host(tmp.as_mut_ptr() as usize);
            self.local()?.copy_from_host(tmp.as_ptr() as usize, stream)
        }
    }

    /// Places the ranks' blocks, concatenated in rank order at `packed`, into the global host
    /// array `out`.
    fn unpack_blocks(&self, out: &Arc<Buffer>, packed: usize, ranks: impl Iterator<Item = usize>) -> Result<()> {
        let lens = self.local_lens();
        for r in ranks {
            let at = packed + lens[..r].iter().sum::<usize>() * self.dtype.size();
            // SAFETY: `packed` holds every rank's block in rank order.
            unsafe { self.global_box(out, r)?.unpack_host(at) };
        }
        Ok(())
    }

    /// allgather of an array whose blocks are not ranges of global rows: an allgatherv of the
    /// packed blocks into host scratch, then each placed.
    fn allgather_blocks(&self, out: Buffer, stream: Stream) -> Result<()> {
        let counts: Vec<i64> = self.local_lens().into_iter().map(|c| c as i64).collect();
        let mut tmp = vec![0u64; (self.global_len() * self.dtype.size()).div_ceil(8)];
        let t = Buffer::wrap(tmp.as_mut_ptr() as usize, self.global_len() as i64, self.dtype, Space::GPUWIRE_SPACE_HOST)?;
        self.with_owned(true, false, stream, |x| self.wire.allgatherv(&self.owned_at(x)?, &t, Some(&counts), stream))?;
        self.unpack_blocks(&Arc::new(out), tmp.as_ptr() as usize, 0..self.rows.len())
    }

    /// gather of an array whose blocks are not ranges of global rows (point-to-point to the
    /// root, as for rows).
    fn gather_blocks(&self, out: Option<Buffer>, root: i32, stream: Stream) -> Result<()> {
        let Some(out) = out else {
            if self.local_len() > 0 {
                self.with_owned(true, false, stream, |x| self.wire.send(&self.owned_at(x)?, root, TAG_GATHER, stream))?;
            }
            return Ok(());
        };
        let lens = self.local_lens();
        let mut tmp = vec![0u64; (self.global_len() * self.dtype.size()).div_ceil(8)];
        let base = tmp.as_mut_ptr() as usize;
        let size = self.dtype.size();
        let at = |r: usize| base + lens[..r].iter().sum::<usize>() * size;
        let me = self.me();
        // SAFETY: tmp holds every block; this rank's at its place.
        unsafe { self.local()?.copy_to_host(at(me), stream)? };
        let most = (0..lens.len()).filter(|s| *s != me).map(|s| lens[s]).max().unwrap_or(0);
        // Device data arrives in device memory (the message takes the same path on both sides).
        let temp = if self.is_host() || most == 0 { None } else { Some(Arc::new(Buffer::alloc(most as i64, self.dtype, self.space, self.storage.device())?)) };
        for s in (0..lens.len()).filter(|s| *s != me && lens[*s] > 0) {
            match &temp {
                None => self.wire.recv(&Buffer::wrap(at(s), lens[s] as i64, self.dtype, Space::GPUWIRE_SPACE_HOST)?, s as i32, TAG_GATHER, stream)?,
                Some(t) => {
                    let t = Buffer::view(t, 0, lens[s] as i64)?;
                    self.wire.recv(&t, s as i32, TAG_GATHER, stream)?;
                    // SAFETY: tmp holds block s at at(s).
                    unsafe { t.copy_to_host(at(s), stream)? };
                }
            }
        }
        self.unpack_blocks(&Arc::new(out), base, 0..lens.len())
    }

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
        if self.scattered() && !self.rows_layout() {
            local?;
            return self.set_global_blocks(src, stream);
        }
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
        if !self.rows_layout() {
            return self.allgather_blocks(out, stream);
        }
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
        if !self.rows_layout() {
            return self.gather_blocks(out, root, stream);
        }
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
                return Err(Error::CountMismatch(format!("{what}: the global shapes differ ({} and {})", brief(&src.shape), brief(&dst.shape))));
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
        if !src.rows_layout() || !dst.rows_layout() {
            // Blocks of a process grid: through a global host copy on every rank (the source's
            // allgather, then the destination's set_global).
            let mut tmp = vec![0u64; (src.global_len() * src.dtype.size()).div_ceil(8)];
            let at = tmp.as_mut_ptr() as usize;
            src.allgather(at, stream)?;
            return dst.set_global(at, stream);
        }
        let me = src.me();
        match (src.scattered(), dst.scattered()) {
            (false, _) => {
                // The source holds everything: copy this rank's rows of the destination.
                let rows = dst.owned_rows(me);
                let from = src.view_rows(src.halos[0] + rows.lo, rows.len())?;
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

    /// gpuwire_darray_halo_exchange: `width` on every axis that has a halo (at most the
    /// smallest of them).
    pub fn halo_exchange(&self, width: Result<usize>, stream: Stream) -> Result<()> {
        let nd = self.shape.len();
        let widths = width.and_then(|w| {
            let none = self.halos.iter().all(|h| *h == 0);
            if let Some(a) = (0..nd).find(|a| (self.halos[*a] > 0 || (none && *a == 0)) && w > self.halos[*a]) {
                return Err(Error::InvalidArgument(format!(
                    "halo_exchange: width {w} is more than the {} halo {} the array was created with{}",
                    self.halos[a],
                    if nd == 1 || self.dense() { "rows".to_string() } else { format!("elements of axis {a}") },
                    if self.rows_layout() { String::new() } else { " (gpuwire_darray_halo_exchange_axes takes a width per axis)".into() }
                )));
            }
            Ok(Some(self.halos.iter().map(|h| if *h > 0 { w } else { 0 }).collect()))
        });
        self.halo_exchange_axes(widths, false, stream)
    }

    /// Fills the ghosts of every axis: `widths[a]` (at most the array's halo there; `None`: the
    /// halo) next to each side of the block with the neighbouring blocks' elements, periodic
    /// axes wrapping around; faces only, or (`corners`) axis by axis, each axis's faces then
    /// spanning the ghosts of the axes before it (so edges and corners are filled too).
    /// Collective; SCATTER only.
    pub fn halo_exchange_axes(&self, widths: Result<Option<Vec<usize>>>, corners: bool, stream: Stream) -> Result<()> {
        let _call = self.comm.enter("gpuwire_darray_halo_exchange", true)?;
        let what = "halo_exchange";
        let nd = self.shape.len();
        let local = widths.and_then(|w| {
            let w = w.unwrap_or_else(|| self.halos.clone());
            if !self.scattered() {
                return Err(Error::InvalidArgument(format!("{what}: a BROADCAST array has no halo (every rank holds every row)")));
            }
            if w.len() != nd {
                return Err(Error::Internal(format!("{what}: {} widths for {nd} axes", w.len())));
            }
            if let Some(a) = (0..nd).find(|a| w[*a] > self.halos[*a]) {
                return Err(Error::InvalidArgument(format!(
                    "{what}: width {} on axis {a} is more than the {} halo {} the array was created with there",
                    w[a],
                    self.halos[a],
                    if self.halos[a] == 1 { "element" } else { "elements" }
                )));
            }
            if corners && crate::group::is_open() {
                return Err(Error::InvalidArgument(format!(
                    "{what}: corners are exchanged axis by axis, one group after another, which cannot happen inside the caller's open group (end it first, or exchange faces only)"
                )));
            }
            Ok(w)
        });
        let w = local.as_ref().map_or(-1, |w| shape_hash(&w.iter().copied().chain([corners as usize]).collect::<Vec<_>>()));
        let widths = self.agree(what, Sig::default(), None, &[("halo width", w)], local)?;
        let axes: Vec<usize> = (0..nd).filter(|a| widths[*a] > 0 && (self.procs[*a] > 1 || self.periodic[*a])).collect();
        // An array without elements (an axis of length 0) has no ghost to fill; its blocks, all
        // empty, would fail the width test below.
        if axes.is_empty() || self.shape.contains(&0) {
            return Ok(());
        }
        // Each ghost comes from one neighbouring block: every block along an exchanged axis
        // must hold at least the width (the split is known to every rank: the same error on all).
        for &a in &axes {
            if let Some((c, n)) = self.counts[a].iter().enumerate().find(|(_, n)| **n < widths[a]) {
                if self.rows_layout() && a == 0 && !self.periodic[0] && axes == [0] {
                    return self.halo_exchange_rows(widths[0], stream);
                }
                return Err(Error::InvalidArgument(format!(
                    "{what}: the blocks at process coordinate {c} of axis {a} hold {n} elements along it, fewer than the width {}; a ghost is filled from one neighbouring block only (make the blocks larger, or use fewer processes along axis {a})",
                    widths[a]
                )));
            }
        }
        let groups: Vec<Vec<usize>> = if corners { axes.iter().map(|a| vec![*a]).collect() } else { vec![axes] };
        let mut filled = vec![false; nd];
        for g in groups {
            crate::group::start()?;
            let posted = self.post_faces(&g, &widths, &filled, stream);
            let ended = crate::group::end();
            posted.and(ended)?;
            for a in g {
                filled[a] = true;
            }
        }
        Ok(())
    }

    /// The rank at this rank's coordinates moved by `step` (-1 or +1) along `axis`: `None` past
    /// a non-periodic edge.
    fn neighbour(&self, axis: usize, step: isize) -> Option<i32> {
        let p = self.procs[axis] as isize;
        let c = self.coords[axis] as isize + step;
        let c = if (0..p).contains(&c) {
            c
        } else if self.periodic[axis] {
            c.rem_euclid(p)
        } else {
            return None;
        };
        let mut coords = self.coords.clone();
        coords[axis] = c as usize;
        Some(coords.iter().zip(&self.procs).fold(0usize, |r, (c, p)| r * p + c) as i32)
    }

    /// Records in the open group the sends and receives of the faces of `axes` (module
    /// comment of gpuwire_darray_halo_exchange_axes): per axis, first what fills the ghosts
    /// below the blocks (each rank's last planes to the next rank), then above; in the same
    /// order on every rank, so paths that match by order (NCCL) pair them as tags do.
    fn post_faces(&self, axes: &[usize], widths: &[usize], filled: &[bool], stream: Stream) -> Result<()> {
        let nd = self.shape.len();
        let n = self.local_shape();
        let h = &self.halos;
        for &a in axes {
            let w = widths[a];
            // The extent along the other axes: the owned range, widened over the ghosts of the
            // axes already exchanged (corners) where a neighbour filled them.
            let mut lo = vec![0usize; nd];
            let mut len = vec![0usize; nd];
            for b in (0..nd).filter(|b| *b != a) {
                let (below, above) = if filled[b] { (self.neighbour(b, -1).is_some(), self.neighbour(b, 1).is_some()) } else { (false, false) };
                lo[b] = h[b] - if below { widths[b] } else { 0 };
                len[b] = n[b] + if below { widths[b] } else { 0 } + if above { widths[b] } else { 0 };
            }
            len[a] = w;
            if len.iter().product::<usize>() == 0 {
                continue;
            }
            for (tag, send_at, to, recv_at, from) in [
                // Ghosts below (lower indices): from the previous block's last planes.
                (TAG_HALO_AXIS + 2 * a as i32, h[a] + n[a] - w, self.neighbour(a, 1), h[a] - w, self.neighbour(a, -1)),
                // Ghosts above: from the next block's first planes.
                (TAG_HALO_AXIS + 2 * a as i32 + 1, h[a], self.neighbour(a, -1), h[a] + n[a], self.neighbour(a, 1)),
            ] {
                if let Some(dest) = to {
                    lo[a] = send_at;
                    let face = Arc::new(self.storage_box(&lo, &len)?);
                    crate::group::submit_disjoint(&self.wire, crate::op::Op::Send { buf: face, dest, tag }, stream)?;
                }
                if let Some(source) = from {
                    lo[a] = recv_at;
                    let ghost = Arc::new(self.storage_box(&lo, &len)?);
                    crate::group::submit_disjoint(&self.wire, crate::op::Op::Recv { buf: ghost, source, tag }, stream)?;
                }
            }
        }
        Ok(())
    }

    /// The row split's exchange (non-periodic, axis 0) for blocks shorter than the width: by
    /// rank distance k = 1, 2, ... (each ghost row from whichever rank owns it).
    fn halo_exchange_rows(&self, width: usize, stream: Stream) -> Result<()> {
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
    e.reworded(format!("{what}: `{arg}`: {}", e.detail()))
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
    fn dims_create_as_mpi() {
        assert_eq!(dims_create(12, &[0, 0]).unwrap(), [4, 3]);
        assert_eq!(dims_create(8, &[0, 0, 0]).unwrap(), [2, 2, 2]);
        assert_eq!(dims_create(6, &[0, 0, 0]).unwrap(), [3, 2, 1]);
        assert_eq!(dims_create(3, &[1, 0, 1]).unwrap(), [1, 3, 1]);
        assert_eq!(dims_create(1, &[0]).unwrap(), [1]);
        assert!(dims_create(4, &[3, 0]).is_err());
        assert!(dims_create(4, &[2, 1]).is_err());
    }

    #[test]
    fn shape_hash_tells_shapes_apart() {
        assert_ne!(shape_hash(&[4, 6]), shape_hash(&[6, 4]));
        assert_ne!(shape_hash(&[24]), shape_hash(&[4, 6]));
        assert!(shape_hash(&[3, 5, 7]) >= 0);
    }
}
