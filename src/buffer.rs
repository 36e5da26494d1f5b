//! Buffers: a pointer, an element count, a datatype, a memory space, a device and an owner.
//!
//! A buffer either owns its memory (allocated by gpuwire, zeroed, freed when the last reference
//! goes), borrows a caller's pointer (never freed by gpuwire), or is a view into another buffer,
//! which it keeps alive: contiguous (offset, count), or with a [`Shape`] (strided, subarray),
//! whose elements the operations pack into contiguous scratch and unpack (`crate::view`).

use std::alloc::Layout;
use std::sync::Arc;

use crate::device::{self, CudaAlloc, Stream};
use crate::error::{Error, Result};
use crate::handles::{Kind, Registry};
use crate::types::{Dtype, Space};

/// What an operation does with one of its buffers, on this rank (`crate::op::Op::roles`: the one
/// table, which the views' packing and the stream-ordered staging both read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Read (a send buffer).
    In,
    /// Written (a receive buffer).
    Out,
    /// Read and written (in place; or a receive whose untouched elements must stay as they were).
    InOut,
    /// Not significant on this rank (a non-root's receive buffer of reduce, ...).
    Unused,
}

impl Role {
    pub fn reads(self) -> bool {
        matches!(self, Role::In | Role::InOut)
    }
    pub fn writes(self) -> bool {
        matches!(self, Role::Out | Role::InOut)
    }
    /// The role of a buffer that holds both (an in-place block inside another part).
    pub fn join(self, o: Role) -> Role {
        match (self.reads() || o.reads(), self.writes() || o.writes()) {
            (true, true) => Role::InOut,
            (true, false) => Role::In,
            (false, true) => Role::Out,
            (false, false) => Role::Unused,
        }
    }
}

/// All live buffers, by handle.
pub static BUFFERS: Registry<Buffer> = Registry::pinnable();

impl crate::handles::Pinnable for Buffer {
    const KIND: Kind = Kind::Buffer;
    fn registry() -> &'static Registry<Self> {
        &BUFFERS
    }
}

const HOST_ALIGN: usize = 64;

/// Host memory gpuwire allocated (aligned to 64 bytes, zeroed).
#[derive(Debug)]
pub struct HostAlloc {
    ptr: *mut u8,
    layout: Layout,
}
// SAFETY: plain memory owned by this value.
unsafe impl Send for HostAlloc {}
unsafe impl Sync for HostAlloc {}

impl HostAlloc {
    fn new(bytes: usize) -> Result<HostAlloc> {
        let layout = Layout::from_size_align(bytes, HOST_ALIGN)
            .map_err(|_| Error::InvalidArgument(format!("{bytes} bytes is too large an allocation")))?;
        // SAFETY: bytes > 0 (callers never allocate 0 bytes).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::InvalidArgument(format!("out of host memory allocating {bytes} bytes")));
        }
        Ok(HostAlloc { ptr, layout })
    }
}

impl Drop for HostAlloc {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

#[derive(Debug)]
enum Storage {
    Host(#[allow(dead_code)] HostAlloc),
    Cuda(#[allow(dead_code)] CudaAlloc),
    Borrowed,
    View(#[allow(dead_code)] Arc<Buffer>),
    Empty,
}

/// The elements of a non-contiguous view, in order: an index over `dims` (outermost first, the
/// last varying fastest), each a (length, stride in elements) pair, from the view's pointer.
/// Normalized: no dimension of length 1 or 0, adjacent dimensions that are one are merged, never
/// a single dimension of stride 1 (that view is contiguous and has no shape).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    pub dims: Vec<(usize, usize)>,
    /// Elements from the first to one past the last one the view touches.
    pub extent: usize,
    /// Whether two of the view's elements may be the same memory: such a view can be sent,
    /// never received into. True unless each dimension, by increasing stride, steps past all
    /// that the smaller ones span (a sufficient test, not an exact one: a layout such as lengths
    /// {3, 2} with strides {2, 3} has distinct elements and is taken as coinciding all the same).
    pub self_overlapping: bool,
}

impl Shape {
    /// What a refusal of a [`Shape::self_overlapping`] view says of it, after "the buffer ".
    pub const MAY_COINCIDE: &'static str = "is a strided view whose elements may coincide (a stride below what the dimensions of smaller strides span, e.g. blocks that overlap or a stride 0): received elements could overwrite each other";

    /// The normalized shape of `dims` (lengths > 0, strides >= 0, the extent checked by the
    /// caller), `None` when contiguous.
    fn of(dims: &[(usize, usize)]) -> Option<Shape> {
        let mut d: Vec<(usize, usize)> = Vec::with_capacity(dims.len());
        for &(len, stride) in dims.iter().filter(|x| x.0 != 1) {
            d.push((len, stride));
        }
        // Merge from the innermost outward: outer (l0, s0) over inner (l1, s1) with s0 = l1 s1.
        let mut i = d.len();
        while i >= 2 {
            let (l0, s0) = d[i - 2];
            let (l1, s1) = d[i - 1];
            if l1.checked_mul(s1) == Some(s0) {
                d[i - 2] = (l0 * l1, s1);
                d.remove(i - 1);
            }
            i -= 1;
        }
        if d.is_empty() || (d.len() == 1 && d[0].1 == 1) {
            return None;
        }
        let extent = d.iter().map(|(l, s)| (l - 1) * s).sum::<usize>() + 1;
        // No two elements alike when each dimension, by increasing stride, steps past all the
        // smaller ones span (otherwise taken as overlapping: never received into).
        let mut by_stride = d.clone();
        by_stride.sort_by_key(|x| x.1);
        let mut span = 1usize;
        let mut self_overlapping = false;
        for (l, st) in by_stride {
            self_overlapping |= st < span;
            span = span.max((l - 1) * st + span);
        }
        Some(Shape { dims: d, extent, self_overlapping })
    }

    /// Calls `f(element offset, elements)` for every contiguous run of the view, in order.
    pub fn each_run(&self, mut f: impl FnMut(usize, usize)) {
        self.each_piece(|off, run, stride, runs| {
            for j in 0..runs {
                f(off + j * stride, run);
            }
        });
    }

    /// Calls `f(element offset, run elements, stride, runs)` for each series of the view's
    /// contiguous runs that its innermost strided dimension steps through (`runs` runs of `run`
    /// elements, `stride` elements apart), in order: the runs of `each_run`, grouped.
    pub fn each_piece(&self, mut f: impl FnMut(usize, usize, usize, usize)) {
        let (run, stepped) = self.stepped();
        let (runs, stride) = self.dims[stepped];
        let outer = &self.dims[..stepped];
        let n_outer: usize = outer.iter().map(|x| x.0).product();
        let mut idx = [0usize; 8];
        for _ in 0..n_outer {
            let base: usize = outer.iter().zip(idx.iter()).map(|((_, s), i)| s * i).sum();
            f(base, run, stride, runs);
            for k in (0..outer.len()).rev() {
                idx[k] += 1;
                if idx[k] < outer[k].0 {
                    break;
                }
                idx[k] = 0;
            }
        }
    }

    /// The elements of a run, and the index in `dims` of the dimension that steps from run to
    /// run (the innermost one of stride other than 1; a normalized shape has one).
    fn stepped(&self) -> (usize, usize) {
        match self.dims[..] {
            [.., (l, 1)] if self.dims.len() >= 2 => (l, self.dims.len() - 2),
            _ => (1, self.dims.len() - 1),
        }
    }

    /// The number of `each_piece` series.
    fn pieces(&self) -> usize {
        self.dims[..self.stepped().1].iter().map(|x| x.0).product()
    }
}

/// Bytes in `count` runs of `len` bytes, the first at `lo`, each `stride` bytes after the
/// previous one: a buffer's contiguous range (`count` 1, `stride` 0), or a series of a view's
/// runs (`Shape::each_piece`). Whether two meet is arithmetic: O(1) for one stride.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    pub lo: usize,
    pub len: usize,
    pub stride: usize,
    pub count: usize,
}

impl Piece {
    /// Runs that touch or overlap one another (`stride <= len`) are one range. The values come
    /// from a buffer's checked shape: the last run ends inside the buffer's range.
    pub fn new(lo: usize, len: usize, stride: usize, count: usize) -> Piece {
        if count <= 1 || stride <= len {
            return Piece::range(lo, lo + (count.max(1) - 1) * stride + len);
        }
        Piece { lo, len, stride, count }
    }

    pub fn range(lo: usize, hi: usize) -> Piece {
        Piece { lo, len: hi - lo, stride: 0, count: 1 }
    }

    /// One past the last byte.
    pub fn hi(&self) -> usize {
        self.lo + (self.count - 1) * self.stride + self.len
    }

    /// The first run that ends after byte `a` (`count` when none does).
    fn first_ending_after(&self, a: usize) -> usize {
        match a.checked_sub(self.lo + self.len) {
            None => 0,
            Some(_) if self.count == 1 => 1,
            Some(past) => (past / self.stride + 1).min(self.count),
        }
    }

    /// Whether a run shares a byte with `a..b`.
    pub fn meets_range(&self, a: usize, b: usize) -> bool {
        let i = self.first_ending_after(a);
        a < b && self.len > 0 && i < self.count && self.lo + i * self.stride < b
    }

    /// Whether a run of one shares a byte with a run of the other.
    pub fn meets(&self, o: &Piece) -> bool {
        if self.count == 1 {
            return o.meets_range(self.lo, self.lo + self.len);
        }
        if o.count == 1 {
            return self.meets_range(o.lo, o.lo + o.len);
        }
        if self.lo >= o.hi() || o.lo >= self.hi() {
            return false;
        }
        if self.stride == o.stride {
            // Run i (at lo + i s) and run j (at o.lo + j s) meet iff -len < d + k s < o.len, with
            // d = lo - o.lo and k = i - j in -(o.count - 1)..=count - 1; d + k s grows with k, so
            // the least k above -len - d (or the range's least) decides.
            let (s, d) = (self.stride as i128, self.lo as i128 - o.lo as i128);
            let k = ((-(self.len as i128) - d).div_euclid(s) + 1).max(1 - o.count as i128);
            return k < self.count as i128 && d + k * s < o.len as i128;
        }
        // Strides that differ: each run of the series with fewer runs, within the other's range.
        let (x, y) = if self.count <= o.count { (self, o) } else { (o, self) };
        let hi = y.hi();
        for i in x.first_ending_after(y.lo)..x.count {
            let a = x.lo + i * x.stride;
            if a >= hi {
                break;
            }
            if y.meets_range(a, a + x.len) {
                return true;
            }
        }
        false
    }

    /// Calls `f(lo, hi)` for each run, in order.
    pub fn each_run(&self, mut f: impl FnMut(usize, usize)) {
        for i in 0..self.count {
            let a = self.lo + i * self.stride;
            f(a, a + self.len);
        }
    }
}

/// A typed span of memory.
#[derive(Debug)]
///
/// Laid out in order and aligned to a cache line: what every call reads first, in one line
/// (`crate::hot`'s reason; unaligned, an `Arc`'s allocation puts them across two about half
/// the time), `storage` last.
#[repr(C, align(64))]
pub struct Buffer {
    ptr: usize,
    count: usize,
    shape: Option<Box<Shape>>,
    dtype: Dtype,
    space: Space,
    device: i32,
    storage: Storage,
}

/// Subarray element order (`gpuwire_buffer_view_subarray`), as MPI_ORDER_C / MPI_ORDER_FORTRAN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    C,
    Fortran,
}

fn count_from_c(count: i64) -> Result<usize> {
    usize::try_from(count).map_err(|_| Error::InvalidArgument(format!("count {count} is negative")))
}

fn bytes_of(count: usize, dtype: Dtype) -> Result<usize> {
    count
        .checked_mul(dtype.size())
        .filter(|b| *b <= isize::MAX as usize)
        .ok_or_else(|| Error::InvalidArgument(format!("{count} elements of {} overflow the address space", dtype.name())))
}

impl Buffer {
    /// gpuwire_buffer_alloc: `count` zeroed elements of `dtype` in `space` on `device` (-1 = the
    /// device of the calling thread's current CUDA context, else device 0; ignored for HOST).
    pub fn alloc(count: i64, dtype: Dtype, space: Space, device: i32) -> Result<Buffer> {
        let count = count_from_c(count)?;
        let bytes = bytes_of(count, dtype)?;
        match space {
            Space::GPUWIRE_SPACE_AUTO => Err(Error::InvalidArgument(
                "GPUWIRE_SPACE_AUTO is only for gpuwire_buffer_wrap; an allocation needs a concrete space".into(),
            )),
            Space::GPUWIRE_SPACE_HOST => {
                if bytes == 0 {
                    return Ok(Buffer { ptr: 0, count: 0, dtype, space, device: -1, storage: Storage::Empty, shape: None });
                }
                let a = HostAlloc::new(bytes)?;
                Ok(Buffer { ptr: a.ptr as usize, count, dtype, space, device: -1, storage: Storage::Host(a), shape: None })
            }
            _ => {
                if device < -1 {
                    return Err(Error::InvalidArgument(format!("device {device}: expected an ordinal >= 0, or -1")));
                }
                device::cuda_with_devices().map_err(|e| match e {
                    Error::BackendUnavailable(m) => {
                        Error::BackendUnavailable(format!("cannot allocate {} memory: {m}", space.name()))
                    }
                    other => other,
                })?;
                let device = if device >= 0 { device } else { device::current_device()?.unwrap_or(0) };
                if bytes == 0 {
                    device::primary_context(device)?; // validates the ordinal
                    return Ok(Buffer { ptr: 0, count: 0, dtype, space, device, storage: Storage::Empty, shape: None });
                }
                let a = CudaAlloc::new(space, device, bytes)?;
                Ok(Buffer { ptr: a.ptr, count, dtype, space, device, storage: Storage::Cuda(a), shape: None })
            }
        }
    }

    /// gpuwire_buffer_wrap: borrows `ptr` (never freed by gpuwire). `space` AUTO asks CUDA
    /// where the pointer lives (host when CUDA is absent or does not know it).
    pub fn wrap(ptr: usize, count: i64, dtype: Dtype, space: Space) -> Result<Buffer> {
        let count = count_from_c(count)?;
        let bytes = bytes_of(count, dtype)?;
        if ptr.checked_add(bytes).is_none() {
            return Err(Error::InvalidArgument(format!("{bytes} bytes at {ptr:#x} run past the end of the address space")));
        }
        if space != Space::GPUWIRE_SPACE_AUTO && !space.is_host_accessible() {
            // Declared device memory needs a CUDA driver to be of any use (and to check it).
            device::cuda_with_devices()?;
        }
        if ptr == 0 && count > 0 {
            return Err(Error::NullArgument(format!("the pointer is NULL but count is {count} (NULL is only allowed with count 0)")));
        }
        if ptr % dtype.align() != 0 {
            return Err(Error::InvalidArgument(format!(
                "pointer {ptr:#x} is not aligned for {} ({}-byte elements, aligned to {} bytes)",
                dtype.name(),
                dtype.size(),
                dtype.align()
            )));
        }
        let (detected, device) = device::detect_space(ptr)?;
        let space = match space {
            Space::GPUWIRE_SPACE_AUTO => detected,
            Space::GPUWIRE_SPACE_HOST if ptr == 0 || detected.is_host_accessible() => space,
            s if s == detected || ptr == 0 => s,
            s => {
                return Err(Error::InvalidArgument(format!(
                    "pointer {ptr:#x} was declared {} memory but CUDA reports {} memory",
                    s.name(),
                    detected.name()
                )));
            }
        };
        if space != Space::GPUWIRE_SPACE_HOST && ptr == 0 {
            device::cuda_with_devices()?;
        }
        let device = if space == Space::GPUWIRE_SPACE_HOST { -1 } else { device.max(0) };
        Ok(Buffer { ptr, count, dtype, space, device, storage: Storage::Borrowed, shape: None })
    }

    /// gpuwire_buffer_view: `count` elements starting at element `offset` of `parent`; shares
    /// (and keeps alive) the parent's memory.
    pub fn view(parent: &Arc<Buffer>, offset: i64, count: i64) -> Result<Buffer> {
        let off = usize::try_from(offset)
            .map_err(|_| Error::InvalidArgument(format!("offset {offset} is negative")))?;
        let count = count_from_c(count)?;
        parent.unshaped("gpuwire_buffer_view")?;
        if off.checked_add(count).is_none_or(|end| end > parent.count) {
            return Err(Error::InvalidArgument(format!(
                "elements [{off}, {off}+{count}) lie outside the parent's {} elements",
                parent.count
            )));
        }
        let root = match &parent.storage {
            Storage::View(p) => p.clone(),
            _ => parent.clone(),
        };
        let ptr = if parent.ptr == 0 { 0 } else { parent.ptr + off * parent.dtype.size() };
        Ok(Buffer {
            ptr,
            count,
            dtype: parent.dtype,
            space: parent.space,
            device: parent.device,
            storage: Storage::View(root),
            shape: None,
        })
    }

    /// Page-locked memory of gpuwire's own (staging), borrowed: `count` elements at `ptr` on
    /// `device`'s context. No checks: `ptr` is a staging block of at least that size.
    pub(crate) fn staging(ptr: usize, count: usize, dtype: Dtype, device: i32) -> Buffer {
        Buffer { ptr, count, dtype, space: Space::GPUWIRE_SPACE_PINNED, device, storage: Storage::Borrowed, shape: None }
    }

    fn unshaped(&self, what: &str) -> Result<()> {
        if self.shape.is_some() {
            return Err(Error::InvalidArgument(format!(
                "{what}: the buffer is a strided or subarray view; make the view from the original (contiguous) buffer"
            )));
        }
        Ok(())
    }

    /// A view of `parent` whose element `e` of `count` x `blocklen` lies at element
    /// `offset + (e / blocklen) * stride + e % blocklen` of `parent`.
    fn shaped(parent: &Arc<Buffer>, offset: usize, count: usize, shape: Option<Shape>) -> Buffer {
        let root = match &parent.storage {
            Storage::View(p) => p.clone(),
            _ => parent.clone(),
        };
        let ptr = if parent.ptr == 0 { 0 } else { parent.ptr + offset * parent.dtype.size() };
        let shape = if count == 0 { None } else { shape.map(Box::new) };
        Buffer { ptr, count, dtype: parent.dtype, space: parent.space, device: parent.device, storage: Storage::View(root), shape }
    }

    /// gpuwire_buffer_view_strided: `count` blocks of `blocklen` elements, the first at element
    /// `offset` of `parent`, each `stride` elements after the previous one (as MPI_Type_vector).
    pub fn view_strided(parent: &Arc<Buffer>, offset: i64, count: i64, blocklen: i64, stride: i64) -> Result<Buffer> {
        let what = "view_strided";
        parent.unshaped(what)?;
        let nonneg = |v: i64, name: &str| {
            usize::try_from(v).map_err(|_| Error::InvalidArgument(format!("{what}: {name} {v} is negative{}", if name == "stride" { " (negative strides are not supported: view the blocks in increasing order)" } else { "" })))
        };
        let (off, n, bl, st) = (nonneg(offset, "offset")?, nonneg(count, "count")?, nonneg(blocklen, "blocklen")?, nonneg(stride, "stride")?);
        let elems = n.checked_mul(bl).ok_or_else(|| Error::InvalidArgument(format!("{what}: {n} blocks of {bl} elements overflow")))?;
        bytes_of(elems, parent.dtype)?;
        let extent = if elems == 0 {
            0
        } else {
            (n - 1).checked_mul(st).and_then(|x| x.checked_add(bl)).ok_or_else(|| Error::InvalidArgument(format!("{what}: {n} blocks {st} elements apart overflow")))?
        };
        if off.checked_add(extent).is_none_or(|end| end > parent.count) {
            return Err(Error::InvalidArgument(format!(
                "{what}: {n} blocks of {bl} elements, {st} apart, from element {off} reach element {} but the buffer holds {} elements",
                off as u128 + extent as u128,
                parent.count
            )));
        }
        let shape = if elems == 0 { None } else { Shape::of(&[(n, st), (bl, 1)]) };
        Ok(Buffer::shaped(parent, off, elems, shape))
    }

    /// gpuwire_buffer_view_subarray: the `subsizes` block starting at `starts` of an `ndim`-d array
    /// of `sizes` elements laid out from `parent`'s first element in `order` (as
    /// MPI_Type_create_subarray).
    pub fn view_subarray(parent: &Arc<Buffer>, sizes: &[i64], subsizes: &[i64], starts: &[i64], order: Order) -> Result<Buffer> {
        let what = "view_subarray";
        parent.unshaped(what)?;
        let nd = sizes.len();
        if !(1..=4).contains(&nd) {
            return Err(Error::InvalidArgument(format!("{what}: ndim {nd}: expected 1 to 4")));
        }
        let mut dims = Vec::with_capacity(nd);
        for i in 0..nd {
            let (n, sub, st) = (sizes[i], subsizes[i], starts[i]);
            if n < 1 || sub < 0 || st < 0 || st.checked_add(sub).is_none_or(|e| e > n) {
                return Err(Error::InvalidArgument(format!(
                    "{what}: dimension {i}: size {n}, subsize {sub}, start {st}: expected size >= 1, subsize >= 0, start >= 0 and start + subsize <= size"
                )));
            }
            dims.push((n as usize, sub as usize, st as usize));
        }
        if order == Order::Fortran {
            dims.reverse(); // outermost first
        }
        let overflow = || Error::InvalidArgument(format!("{what}: the array's sizes {sizes:?} overflow"));
        let mut stride = vec![0usize; nd];
        let mut total = 1usize;
        for i in (0..nd).rev() {
            stride[i] = total;
            total = total.checked_mul(dims[i].0).ok_or_else(overflow)?;
        }
        bytes_of(total, parent.dtype)?;
        if total > parent.count {
            return Err(Error::InvalidArgument(format!(
                "{what}: an array of sizes {sizes:?} holds {total} elements but the buffer holds {}",
                parent.count
            )));
        }
        let elems: usize = dims.iter().map(|d| d.1).product();
        let off: usize = dims.iter().zip(&stride).map(|(d, s)| d.2 * s).sum();
        let shape_dims: Vec<(usize, usize)> = dims.iter().zip(&stride).map(|(d, s)| (d.1, *s)).collect();
        let shape = if elems == 0 { None } else { Shape::of(&shape_dims) };
        Ok(Buffer::shaped(parent, if elems == 0 { 0 } else { off }, elems, shape))
    }

    /// gpuwire_buffer_wrap_strided: borrows the caller's elements (i_0, ..., i_{n-1}),
    /// 0 <= i_k < lens[k], at element offset sum i_k strides[k] from `ptr`, in that order with the
    /// first index varying fastest (Fortran's array element order: an array section's).
    pub fn wrap_strided(ptr: usize, lens: &[i64], strides: &[i64], dtype: Dtype, space: Space) -> Result<Buffer> {
        let what = "wrap_strided";
        if !(1..=15).contains(&lens.len()) {
            return Err(Error::InvalidArgument(format!("{what}: ndim {}: expected 1 to 15", lens.len())));
        }
        let mut dims = Vec::with_capacity(lens.len());
        let (mut count, mut extent) = (1usize, 1usize);
        let overflow = || Error::InvalidArgument(format!("{what}: lengths {lens:?} with strides {strides:?} overflow"));
        for (k, (&l, &st)) in lens.iter().zip(strides).enumerate() {
            let l = usize::try_from(l).map_err(|_| Error::InvalidArgument(format!("{what}: lens[{k}] = {l} is negative")))?;
            let st = usize::try_from(st).map_err(|_| {
                Error::InvalidArgument(format!("{what}: strides[{k}] = {st} is negative (negative strides, as a reversed section, are not supported)"))
            })?;
            count = count.checked_mul(l).ok_or_else(overflow)?;
            if l > 0 {
                extent = (l - 1).checked_mul(st).and_then(|x| x.checked_add(extent)).ok_or_else(overflow)?;
            }
            dims.push((l, st));
        }
        if count == 0 {
            return Buffer::wrap(ptr, 0, dtype, space);
        }
        // The elements' bytes, packed, must be addressable too (a stride of 0 repeats one element
        // any number of times within a small extent).
        bytes_of(count, dtype).map_err(|e| match e {
            Error::InvalidArgument(m) => Error::InvalidArgument(format!("{what}: lengths {lens:?}: {m}")),
            e => e,
        })?;
        let root = Arc::new(Buffer::wrap(ptr, i64::try_from(extent).map_err(|_| overflow())?, dtype, space)?);
        dims.reverse(); // outermost first
        let shape = Shape::of(&dims);
        if shape.as_ref().is_some_and(|s| s.dims.len() > 4) {
            return Err(Error::InvalidArgument(format!(
                "{what}: lengths {lens:?} with strides {strides:?} have more than 4 dimensions that cannot be merged (at most 4 are supported)"
            )));
        }
        Ok(Buffer::shaped(&root, 0, count, shape))
    }

    /// The view's shape; `None` for contiguous memory.
    pub fn shape(&self) -> Option<&Shape> {
        self.shape.as_deref()
    }

    /// A contiguous buffer of `count` elements of `dtype` over the start of `root`'s memory
    /// (scratch reuse: `crate::view`).
    pub(crate) fn over(root: &Arc<Buffer>, count: usize, dtype: Dtype) -> Buffer {
        debug_assert!(count * dtype.size() <= root.bytes());
        Buffer { ptr: root.ptr, count, dtype, space: root.space, device: root.device, storage: Storage::View(root.clone()), shape: None }
    }

    /// Elements [`offset`, `offset + count`) of this contiguous buffer, borrowed (valid while
    /// `self` is): the parts of a buffer that the hierarchical path hands to its communicators.
    pub(crate) fn part(&self, offset: usize, count: usize) -> Buffer {
        debug_assert!(self.shape.is_none() && offset.checked_add(count).is_some_and(|e| e <= self.count));
        let ptr = if self.ptr == 0 { 0 } else { self.ptr + offset * self.dtype.size() };
        Buffer { ptr, count, dtype: self.dtype, space: self.space, device: self.device, storage: Storage::Borrowed, shape: None }
    }

    /// Copies the view's elements (in order) to contiguous host memory at `dst`; host-accessible
    /// memory only.
    ///
    /// # Safety
    /// `dst` must be writable for `self.bytes()` bytes.
    pub(crate) unsafe fn pack_host(&self, dst: usize) {
        let es = self.dtype.size();
        let mut at = dst;
        match &self.shape {
            None => unsafe { std::ptr::copy(self.ptr as *const u8, dst as *mut u8, self.bytes()) },
            Some(s) => s.each_run(|off, n| {
                // SAFETY: the run lies inside the view's extent (checked at its creation).
                unsafe { std::ptr::copy((self.ptr + off * es) as *const u8, at as *mut u8, n * es) };
                at += n * es;
            }),
        }
    }

    /// Copies contiguous host memory at `src` into the view's elements (in order).
    ///
    /// # Safety
    /// `src` must be readable for `self.bytes()` bytes.
    pub(crate) unsafe fn unpack_host(&self, src: usize) {
        let es = self.dtype.size();
        let mut at = src;
        match &self.shape {
            None => unsafe { std::ptr::copy(src as *const u8, self.ptr as *mut u8, self.bytes()) },
            Some(s) => s.each_run(|off, n| {
                // SAFETY: as in pack_host.
                unsafe { std::ptr::copy(at as *const u8, (self.ptr + off * es) as *mut u8, n * es) };
                at += n * es;
            }),
        }
    }

    /// The buffer's bytes as [`Piece`]s: one range for a contiguous buffer, a view's series of
    /// runs (`Shape::each_piece`) in its order.
    pub(crate) fn each_piece(&self, mut f: impl FnMut(Piece)) {
        let es = self.dtype.size();
        match &self.shape {
            None => {
                let (lo, hi) = self.range();
                f(Piece::range(lo, hi))
            }
            Some(s) => s.each_piece(|off, run, stride, runs| f(Piece::new(self.ptr + off * es, run * es, stride * es, runs))),
        }
    }

    /// The buffer's bytes as one [`Piece`], where they are one (contiguous, or a view whose runs
    /// one dimension steps through).
    fn piece(&self) -> Option<Piece> {
        let mut one = None;
        if self.shape.as_ref().is_none_or(|s| s.pieces() == 1) {
            self.each_piece(|p| one = Some(p));
        }
        one
    }

    /// The sorted byte ranges of the view's runs (contiguous: one).
    fn runs(&self) -> Vec<(usize, usize)> {
        let es = self.dtype.size();
        let mut v = Vec::new();
        match &self.shape {
            None => v.push(self.range()),
            Some(s) => s.each_run(|off, n| v.push((self.ptr + off * es, self.ptr + (off + n) * es))),
        }
        v.sort_unstable();
        v
    }

    /// This buffer as the pack kernels see it (`device::kernels::pack`).
    pub fn pack_view(&self) -> crate::device::kernels::PackView<'_> {
        crate::device::kernels::PackView { ptr: self.ptr, count: self.count, elem: self.dtype.size(), device: self.device, dims: self.shape.as_ref().map(|s| s.dims.as_slice()) }
    }

    pub fn ptr(&self) -> usize {
        self.ptr
    }
    pub fn count(&self) -> usize {
        self.count
    }
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }
    pub fn space(&self) -> Space {
        self.space
    }
    pub fn device(&self) -> i32 {
        self.device
    }
    pub fn bytes(&self) -> usize {
        self.count * self.dtype.size()
    }
    /// Whether gpuwire allocated this memory (views report their root's ownership).
    pub fn owned(&self) -> bool {
        match &self.storage {
            Storage::Host(_) | Storage::Cuda(_) | Storage::Empty => true,
            Storage::Borrowed => false,
            Storage::View(p) => p.owned(),
        }
    }
    /// Host-accessible memory that MPI can read directly.
    pub fn is_host(&self) -> bool {
        self.space.is_host_accessible()
    }

    /// Address range [start, end) in bytes (a shaped view's: from its first element to one past
    /// its last).
    pub fn range(&self) -> (usize, usize) {
        match &self.shape {
            None => (self.ptr, self.ptr + self.bytes()),
            Some(s) => (self.ptr, self.ptr + s.extent * self.dtype.size()),
        }
    }

    /// Whether the two buffers' memory overlaps (empty buffers overlap nothing); of shaped views,
    /// whether an element of one shares a byte with an element of the other.
    #[inline]
    pub fn overlaps(&self, other: &Buffer) -> bool {
        if self.shape.is_none() && other.shape.is_none() {
            // Contiguous: their byte ranges (an empty one shares no byte, as below).
            let (a, b) = (self.bytes(), other.bytes());
            return a != 0 && b != 0 && self.ptr < other.ptr + b && other.ptr < self.ptr + a;
        }
        self.overlaps_shaped(other)
    }

    /// `overlaps` where a buffer is a shaped view.
    #[inline(never)]
    fn overlaps_shaped(&self, other: &Buffer) -> bool {
        if self.bytes() == 0 || other.bytes() == 0 {
            return false; // an empty range inside another one still shares no byte with it
        }
        let (a0, a1) = self.range();
        let (b0, b1) = other.range();
        if !(a0 < b1 && b0 < a1) {
            return false;
        }
        // Series against series where one buffer is a single one (`Piece::meets`); else run by run.
        for (one, many) in [(self, other), (other, self)] {
            if let Some(p) = one.piece() {
                let mut meets = false;
                many.each_piece(|q| meets = meets || p.meets(&q));
                return meets;
            }
        }
        let (x, y) = (self.runs(), other.runs());
        let (mut i, mut j) = (0, 0);
        while i < x.len() && j < y.len() {
            if x[i].0 < y[j].1 && y[j].0 < x[i].1 {
                return true;
            }
            if x[i].1 <= y[j].1 { i += 1 } else { j += 1 }
        }
        false
    }

    /// Copies `self.count()` elements from host memory at `src` into this buffer, after the work
    /// enqueued on `stream`; returns when done.
    ///
    /// # Safety
    /// `src` must be readable for `self.bytes()` bytes.
    pub unsafe fn copy_from_host(&self, src: usize, stream: Stream) -> Result<()> {
        self.copy_checked(src, "the source")?;
        if self.shape.as_ref().is_some_and(|s| s.self_overlapping) {
            // As every operation that receives into it: which value would land is undefined
            // (the last on the host, any of them on a device).
            return Err(Error::InvalidArgument(format!("the buffer {}; nothing was copied", Shape::MAY_COINCIDE)));
        }
        if self.shape.is_some() {
            if self.is_host() {
                // SAFETY: caller guarantees src.
                unsafe { self.unpack_host(src) };
                return Ok(());
            }
            let tmp = CudaAlloc::new(Space::GPUWIRE_SPACE_DEVICE, self.device, self.bytes())?;
            device::copy_sync(self.device, tmp.ptr, src, self.bytes(), stream)?;
            crate::device::kernels::pack(self.pack_view(), tmp.ptr, true, stream)?;
            let _g = device::CtxGuard::enter(self.device)?;
            return device::sync(stream);
        }
        if self.is_host() {
            // SAFETY: caller guarantees src; self is valid for bytes(). ptr::copy tolerates overlap.
            unsafe { std::ptr::copy(src as *const u8, self.ptr as *mut u8, self.bytes()) };
            return Ok(());
        }
        device::copy_sync(self.device, self.ptr, src, self.bytes(), stream)
    }

    /// Copies this buffer's elements to host memory at `dst`, after the work enqueued on
    /// `stream`; returns when done.
    ///
    /// # Safety
    /// `dst` must be writable for `self.bytes()` bytes.
    pub unsafe fn copy_to_host(&self, dst: usize, stream: Stream) -> Result<()> {
        self.copy_checked(dst, "the destination")?;
        if self.shape.is_some() {
            if self.is_host() {
                // SAFETY: caller guarantees dst.
                unsafe { self.pack_host(dst) };
                return Ok(());
            }
            let tmp = CudaAlloc::new(Space::GPUWIRE_SPACE_DEVICE, self.device, self.bytes())?;
            crate::device::kernels::pack(self.pack_view(), tmp.ptr, false, stream)?;
            return device::copy_sync(self.device, dst, tmp.ptr, self.bytes(), stream);
        }
        if self.is_host() {
            // SAFETY: as above.
            unsafe { std::ptr::copy(self.ptr as *const u8, dst as *mut u8, self.bytes()) };
            return Ok(());
        }
        device::copy_sync(self.device, dst, self.ptr, self.bytes(), stream)
    }

    fn copy_checked(&self, host: usize, what: &str) -> Result<()> {
        if host == 0 && self.count > 0 {
            return Err(Error::NullArgument(format!("{what} is NULL but the buffer has {} elements", self.count)));
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A deterministic generator for randomized comparisons (xorshift64*).
    pub(crate) struct Rng(pub u64);

    impl Rng {
        /// A value in 0..n (n > 0).
        pub fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
        }

        /// A series of runs inside bytes 0..room: a range, or runs of one of `strides` (0: any).
        pub fn piece(&mut self, room: usize, strides: &[usize]) -> Piece {
            let len = 1 + self.below(24);
            let stride = match strides[self.below(strides.len())] {
                0 => 1 + self.below(64),
                s => s,
            };
            let count = 1 + self.below(12);
            let lo = self.below(room - (count - 1) * stride - len);
            Piece::new(lo, len, stride, count)
        }
    }

    pub(crate) fn byte_set(p: &Piece) -> std::collections::BTreeSet<usize> {
        let mut s = std::collections::BTreeSet::new();
        p.each_run(|a, b| s.extend(a..b));
        s
    }

    /// `Piece::meets` and `meets_range` against the byte sets, same and different strides.
    #[test]
    fn piece_meets_is_the_byte_sets_meeting() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut met, mut apart) = (0, 0);
        for t in 0..40_000 {
            let strides: &[usize] = if t % 2 == 0 { &[0] } else { &[8 + t % 29] };
            let (a, b) = (rng.piece(1200, strides), rng.piece(1200, strides));
            let want = !byte_set(&a).is_disjoint(&byte_set(&b));
            assert_eq!(a.meets(&b), want, "{a:?} {b:?}");
            assert_eq!(b.meets(&a), want, "{b:?} {a:?}");
            if want { met += 1 } else { apart += 1 }
            let (lo, hi) = (rng.below(1200), rng.below(1200));
            let r = Piece::range(lo.min(hi), lo.max(hi));
            assert_eq!(a.meets_range(r.lo, r.hi()), !byte_set(&a).is_disjoint(&byte_set(&r)), "{a:?} {lo}..{hi}");
        }
        assert!(met > 4_000 && apart > 4_000, "both answers are tested: {met} {apart}");
    }

    /// `Buffer::overlaps` of strided and subarray views (one or several series of runs) against
    /// their elements' byte sets, computed from the views' definitions.
    #[test]
    fn overlaps_is_the_elements_meeting() {
        let parent = Arc::new(Buffer::alloc(4096, Dtype::GPUWIRE_INT32, Space::GPUWIRE_SPACE_HOST, -1).unwrap());
        let mut rng = Rng(7);
        let view = |rng: &mut Rng| -> (Buffer, std::collections::BTreeSet<usize>) {
            let mut set = std::collections::BTreeSet::new();
            let mut add = |e: usize| set.extend(parent.ptr() + 4 * e..parent.ptr() + 4 * e + 4);
            match rng.below(3) {
                0 => {
                    let (n, bl) = (1 + rng.below(40), 1 + rng.below(6));
                    let st = rng.below(50);
                    let off = rng.below(4096 - (n - 1) * st - bl);
                    for e in 0..n * bl {
                        add(off + e / bl * st + e % bl);
                    }
                    (Buffer::view_strided(&parent, off as i64, n as i64, bl as i64, st as i64).unwrap(), set)
                }
                1 => {
                    let (r, c) = (1 + rng.below(64), 1 + rng.below(64));
                    let (sr, sc) = (1 + rng.below(r), 1 + rng.below(c));
                    let (a, b) = (rng.below(r - sr + 1), rng.below(c - sc + 1));
                    for i in a..a + sr {
                        for j in b..b + sc {
                            add(i * c + j);
                        }
                    }
                    let v = Buffer::view_subarray(&parent, &[r as i64, c as i64], &[sr as i64, sc as i64], &[a as i64, b as i64], Order::C);
                    (v.unwrap(), set)
                }
                _ => {
                    let d = [1 + rng.below(16), 1 + rng.below(16), 1 + rng.below(16)];
                    let s = [1 + rng.below(d[0]), 1 + rng.below(d[1]), 1 + rng.below(d[2])];
                    let a = [rng.below(d[0] - s[0] + 1), rng.below(d[1] - s[1] + 1), rng.below(d[2] - s[2] + 1)];
                    for i in a[0]..a[0] + s[0] {
                        for j in a[1]..a[1] + s[1] {
                            for k in a[2]..a[2] + s[2] {
                                add((i * d[1] + j) * d[2] + k);
                            }
                        }
                    }
                    let i64s = |x: [usize; 3]| x.map(|v| v as i64);
                    (Buffer::view_subarray(&parent, &i64s(d), &i64s(s), &i64s(a), Order::C).unwrap(), set)
                }
            }
        };
        let (mut met, mut apart) = (0, 0);
        for _ in 0..4_000 {
            let ((x, xs), (y, ys)) = (view(&mut rng), view(&mut rng));
            let want = !xs.is_disjoint(&ys);
            assert_eq!(x.overlaps(&y), want, "{:?} {:?} / {:?} {:?}", x.ptr(), x.shape(), y.ptr(), y.shape());
            assert_eq!(y.overlaps(&x), want);
            if want { met += 1 } else { apart += 1 }
        }
        assert!(met > 400 && apart > 400, "both answers are tested: {met} {apart}");
    }
}
