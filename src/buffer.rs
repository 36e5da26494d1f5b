//! Buffers: a pointer, an element count, a datatype, a memory space, a device and an owner.
//!
//! A buffer either owns its memory (allocated by gpuwire, zeroed, freed when the last reference
//! goes), borrows a caller's pointer (never freed by gpuwire), or is a view (offset, count) into
//! another buffer, which it keeps alive.

use std::alloc::Layout;
use std::sync::Arc;

use crate::device::{self, CudaAlloc, Stream};
use crate::error::{Error, Result};
use crate::handles::{Kind, Registry};
use crate::types::{Dtype, Space};

/// All live buffers, by handle.
pub static BUFFERS: Registry<Buffer> = Registry::new(Kind::Buffer);

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

/// A typed span of memory.
#[derive(Debug)]
pub struct Buffer {
    ptr: usize,
    count: usize,
    dtype: Dtype,
    space: Space,
    device: i32,
    storage: Storage,
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
                    return Ok(Buffer { ptr: 0, count: 0, dtype, space, device: -1, storage: Storage::Empty });
                }
                let a = HostAlloc::new(bytes)?;
                Ok(Buffer { ptr: a.ptr as usize, count, dtype, space, device: -1, storage: Storage::Host(a) })
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
                    return Ok(Buffer { ptr: 0, count: 0, dtype, space, device, storage: Storage::Empty });
                }
                let a = CudaAlloc::new(space, device, bytes)?;
                Ok(Buffer { ptr: a.ptr, count, dtype, space, device, storage: Storage::Cuda(a) })
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
        if ptr % dtype.size().min(8) != 0 && dtype.size() > 1 {
            return Err(Error::InvalidArgument(format!(
                "pointer {ptr:#x} is not aligned for {} ({}-byte elements)",
                dtype.name(),
                dtype.size()
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
        Ok(Buffer { ptr, count, dtype, space, device, storage: Storage::Borrowed })
    }

    /// gpuwire_buffer_view: `count` elements starting at element `offset` of `parent`; shares
    /// (and keeps alive) the parent's memory.
    pub fn view(parent: &Arc<Buffer>, offset: i64, count: i64) -> Result<Buffer> {
        let off = usize::try_from(offset)
            .map_err(|_| Error::InvalidArgument(format!("offset {offset} is negative")))?;
        let count = count_from_c(count)?;
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
        })
    }

    /// Page-locked memory of gpuwire's own (staging), borrowed: `count` elements at `ptr` on
    /// `device`'s context. No checks: `ptr` is a staging block of at least that size.
    pub(crate) fn staging(ptr: usize, count: usize, dtype: Dtype, device: i32) -> Buffer {
        Buffer { ptr, count, dtype, space: Space::GPUWIRE_SPACE_PINNED, device, storage: Storage::Borrowed }
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

    /// Address range [start, end) in bytes.
    pub fn range(&self) -> (usize, usize) {
        (self.ptr, self.ptr + self.bytes())
    }

    /// Whether the two buffers' memory overlaps (empty buffers overlap nothing).
    pub fn overlaps(&self, other: &Buffer) -> bool {
        if self.bytes() == 0 || other.bytes() == 0 {
            return false; // an empty range inside another one still shares no byte with it
        }
        let (a0, a1) = self.range();
        let (b0, b1) = other.range();
        a0 < b1 && b0 < a1
    }

    /// Copies `self.count()` elements from host memory at `src` into this buffer, after the work
    /// enqueued on `stream`; returns when done.
    ///
    /// # Safety
    /// `src` must be readable for `self.bytes()` bytes.
    pub unsafe fn copy_from_host(&self, src: usize, stream: Stream) -> Result<()> {
        self.copy_checked(src, "the source")?;
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
