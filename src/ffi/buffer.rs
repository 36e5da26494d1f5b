//! Buffers.

use std::ffi::c_void;
use std::sync::Arc;

use crate::buffer::{BUFFERS, Buffer, Order};
use crate::device::Stream;
use crate::error::{Error, gpuwire_status};
use crate::ffi::boundary::{self, call, non_null, write};
use crate::ffi::gpuwire_buffer;
use crate::runtime;
use crate::types::{Dtype, GPUWIRE_ORDER_C, GPUWIRE_ORDER_FORTRAN, Space};

/// Allocates an owned buffer of `count` elements of `dtype` (a gpuwire_dtype) in `space` (a
/// gpuwire_space other than AUTO), zero-filled. `device` is the CUDA device for DEVICE, PINNED
/// and MANAGED memory (-1 = the device of the calling thread's current CUDA context, else device
/// 0; pass `gpuwire_comm_device`'s answer to match a communicator) and is ignored for HOST. Host memory is 64-byte aligned.
/// The memory is freed when the handle is freed and no view or pending request uses it.
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT (`out`),
/// GPUWIRE_ERROR_INVALID_ARGUMENT (negative count, bad space, out of memory),
/// GPUWIRE_ERROR_UNSUPPORTED_DTYPE (unknown datatype code), GPUWIRE_ERROR_BACKEND_UNAVAILABLE
/// (device memory without a CUDA driver), GPUWIRE_ERROR_CUDA, GPUWIRE_ERROR_NOT_INITIALIZED.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_buffer_alloc(count: i64, dtype: i32, space: i32, device: i32, out: *mut gpuwire_buffer) -> gpuwire_status {
    call("gpuwire_buffer_alloc", || {
        non_null(out, "out")?;
        runtime::check_ready()?;
        let b = Buffer::alloc(count, Dtype::from_c(dtype)?, Space::from_c(space)?, device)?;
        write(out, BUFFERS.insert(Arc::new(b))?);
        Ok(())
    })
}

/// Wraps `count` elements of `dtype` at the caller's pointer `ptr` without copying; gpuwire
/// never frees it, and the caller keeps it valid while the buffer (or a view or a pending
/// request) is in use. `space` GPUWIRE_SPACE_AUTO asks CUDA where the memory lives (a
/// cudaMalloc'ed pointer, a CuPy or PyTorch tensor's pointer, a host array all work); an
/// explicit space is checked against CUDA's answer. `ptr` may be NULL only when `count` is 0.
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT (`out`, or `ptr` NULL with
/// count > 0), GPUWIRE_ERROR_INVALID_ARGUMENT (negative count, a pointer not aligned as the
/// element is in C: complex64 and the 32-bit pairs to 4 bytes; space that contradicts CUDA), GPUWIRE_ERROR_BACKEND_UNAVAILABLE (GPUWIRE_SPACE_DEVICE without a
/// CUDA driver), GPUWIRE_ERROR_UNSUPPORTED_DTYPE, GPUWIRE_ERROR_NOT_INITIALIZED.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_buffer_wrap(ptr: *mut c_void, count: i64, dtype: i32, space: i32, out: *mut gpuwire_buffer) -> gpuwire_status {
    call("gpuwire_buffer_wrap", || {
        non_null(out, "out")?;
        runtime::check_ready()?;
        let b = Buffer::wrap(ptr as usize, count, Dtype::from_c(dtype)?, Space::from_c(space)?)?;
        write(out, BUFFERS.insert(Arc::new(b))?);
        Ok(())
    })
}

/// A buffer over elements [offset, offset + count) of `buf`, sharing its memory (no copy); it
/// keeps the memory alive even if `buf` is freed first. Views of views refer to the original.
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE,
/// GPUWIRE_ERROR_INVALID_ARGUMENT (negative or out-of-range offset/count; `buf` a view with a
/// shape, from gpuwire_buffer_view_strided, gpuwire_buffer_view_subarray or
/// gpuwire_buffer_wrap_strided: a view of it would not be contiguous).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_buffer_view(buf: gpuwire_buffer, offset: i64, count: i64, out: *mut gpuwire_buffer) -> gpuwire_status {
    call("gpuwire_buffer_view", || {
        non_null(out, "out")?;
        let parent = boundary::buffer(buf)?;
        let v = Buffer::view(&parent, offset, count)?;
        write(out, BUFFERS.insert(Arc::new(v))?);
        Ok(())
    })
}

/// A strided view of `buf`, as MPI_Type_vector: `count` blocks of `blocklen` elements, block i
/// starting at element `offset + i * stride` of `buf` (all in elements). Shares `buf`'s memory and
/// keeps it alive, as gpuwire_buffer_view. The view's element count is `count * blocklen`; every
/// operation takes it as any buffer, with counts in elements of the view, in order (block by
/// block). Operations pack a view's elements into contiguous scratch memory of the same kind
/// before the transfer and unpack the received ones after it: on device memory one GPU kernel
/// per view on the operation's stream, on host memory a loop; the scratch is reused across calls.
/// `stride` may be below `blocklen` (blocks overlap): such a view can be sent from, not received
/// or copied into (the operation returns GPUWIRE_ERROR_INVALID_ARGUMENT and sends nothing; a
/// bcast's receiving rank takes the root's message and then fails, its view not written). A view whose
/// elements turn out contiguous (stride == blocklen, or one block) is an ordinary view. `buf` must
/// be contiguous (not itself a strided or subarray view). Device views need NVRTC (the reduction
/// kernels' compiler) to be moved.
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE,
/// GPUWIRE_ERROR_INVALID_ARGUMENT (a negative offset, count, blocklen or stride; blocks past the
/// end of `buf`; sizes that overflow; `buf` a strided or subarray view).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_buffer_view_strided(buf: gpuwire_buffer, offset: i64, count: i64, blocklen: i64, stride: i64, out: *mut gpuwire_buffer) -> gpuwire_status {
    call("gpuwire_buffer_view_strided", || {
        non_null(out, "out")?;
        let parent = boundary::buffer(buf)?;
        let v = Buffer::view_strided(&parent, offset, count, blocklen, stride)?;
        write(out, BUFFERS.insert(Arc::new(v))?);
        Ok(())
    })
}

/// A subarray view of `buf`, as MPI_Type_create_subarray: `buf` holds an `ndim`-dimensional array
/// (1 <= ndim <= 4) of `sizes[0..ndim]` elements from its first element, in `order`
/// (GPUWIRE_ORDER_C: the last dimension varies fastest; GPUWIRE_ORDER_FORTRAN: the first); the
/// view is the block of `subsizes` elements starting at index `starts` (0-based), its elements in
/// the same order. Shares and keeps alive `buf`'s memory; operations take it as
/// gpuwire_buffer_view_strided's views (packed and unpacked around the transfer). The element
/// count is the product of `subsizes`. A subarray that is contiguous is an ordinary view.
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT (`out`, or an array NULL),
/// GPUWIRE_ERROR_INVALID_HANDLE, GPUWIRE_ERROR_INVALID_ARGUMENT (ndim outside 1..4, a size
/// below 1, a negative subsize or start, start + subsize past the size, an array larger than
/// `buf`, sizes that overflow, an unknown order, `buf` a strided or subarray view).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_buffer_view_subarray(
    buf: gpuwire_buffer,
    ndim: i32,
    sizes: *const i64,
    subsizes: *const i64,
    starts: *const i64,
    order: i32,
    out: *mut gpuwire_buffer,
) -> gpuwire_status {
    call("gpuwire_buffer_view_subarray", || {
        non_null(out, "out")?;
        non_null(sizes, "sizes")?;
        non_null(subsizes, "subsizes")?;
        non_null(starts, "starts")?;
        let parent = boundary::buffer(buf)?;
        if !(1..=4).contains(&ndim) {
            return Err(Error::InvalidArgument(format!("view_subarray: ndim {ndim}: expected 1 to 4")));
        }
        let order = match order {
            GPUWIRE_ORDER_C => Order::C,
            GPUWIRE_ORDER_FORTRAN => Order::Fortran,
            o => return Err(Error::InvalidArgument(format!("view_subarray: order {o}: expected GPUWIRE_ORDER_C (0) or GPUWIRE_ORDER_FORTRAN (1)"))),
        };
        let n = ndim as usize;
        // SAFETY: the caller passes ndim elements in each array (checked non-NULL).
        let (sz, sub, st) = unsafe { (std::slice::from_raw_parts(sizes, n), std::slice::from_raw_parts(subsizes, n), std::slice::from_raw_parts(starts, n)) };
        let v = Buffer::view_subarray(&parent, sz, sub, st, order)?;
        write(out, BUFFERS.insert(Arc::new(v))?);
        Ok(())
    })
}

/// Wraps the caller's non-contiguous elements without copying, as gpuwire_buffer_wrap (borrowed,
/// never freed, `space` as there): element (i_0, ..., i_{ndim-1}), 0 <= i_k < `lens[k]`, lies
/// `i_0 * strides[0] + ... + i_{ndim-1} * strides[ndim-1]` elements after `ptr` (strides in
/// elements, >= 0); the buffer's elements are in that order with i_0 varying fastest (Fortran's
/// array element order: an array section `A(2, :)` is lens {n}, strides {leading dimension}; a
/// NumPy array gives its shape and strides / itemsize reversed). Operations take it as a
/// gpuwire_buffer_view_strided view (packed and unpacked around the transfer; a layout whose
/// elements may coincide, as a stride 0, can be sent from but not received or copied into). A
/// layout is taken as one whose elements may coincide unless each dimension, by increasing
/// stride, steps past all that the dimensions of smaller strides span: a sufficient test, so a
/// few layouts of distinct elements are refused too (lens {3, 2} with strides {2, 3}: elements
/// 0 2 4 3 5 7). 1 <= ndim <= 15; dimensions that are contiguous together are merged, and at
/// most 4 may remain.
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT (`out`, `lens` or `strides`, `ptr`
/// NULL with elements), GPUWIRE_ERROR_INVALID_ARGUMENT (ndim outside 1..15, a negative length or
/// stride, sizes that overflow, more than 4 dimensions left, a misaligned pointer, a space that
/// contradicts CUDA), GPUWIRE_ERROR_UNSUPPORTED_DTYPE, GPUWIRE_ERROR_NOT_INITIALIZED.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_buffer_wrap_strided(
    ptr: *mut c_void,
    ndim: i32,
    lens: *const i64,
    strides: *const i64,
    dtype: i32,
    space: i32,
    out: *mut gpuwire_buffer,
) -> gpuwire_status {
    call("gpuwire_buffer_wrap_strided", || {
        non_null(out, "out")?;
        non_null(lens, "lens")?;
        non_null(strides, "strides")?;
        runtime::check_ready()?;
        if !(1..=15).contains(&ndim) {
            return Err(Error::InvalidArgument(format!("wrap_strided: ndim {ndim}: expected 1 to 15")));
        }
        // SAFETY: the caller passes ndim elements in each array (checked non-NULL).
        let (l, s) = unsafe { (std::slice::from_raw_parts(lens, ndim as usize), std::slice::from_raw_parts(strides, ndim as usize)) };
        let b = Buffer::wrap_strided(ptr as usize, l, s, Dtype::from_c(dtype)?, Space::from_c(space)?)?;
        write(out, BUFFERS.insert(Arc::new(b))?);
        Ok(())
    })
}

/// Frees a buffer handle; owned memory is released once no view, pending request or call of
/// another thread uses it (then at that call's return, or at the latest at the next free of a
/// buffer or communicator, or gpuwire_finalize). Freeing twice, or a copy of a freed handle,
/// returns GPUWIRE_ERROR_INVALID_HANDLE and touches nothing.
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_INVALID_HANDLE, GPUWIRE_ERROR_ALREADY_FINALIZED.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_buffer_free(buf: gpuwire_buffer) -> gpuwire_status {
    call("gpuwire_buffer_free", || {
        runtime::check_ready()?;
        drop(BUFFERS.remove(buf)?);
        Ok(())
    })
}

/// Copies all of the buffer's elements (count x element size bytes) from host memory `src`
/// into the buffer, after the work already enqueued on `stream` (a CUstream; NULL = the legacy
/// default stream; ignored for host buffers). Blocks until the copy is complete.
///
/// Local. Errors: GPUWIRE_ERROR_NULL_ARGUMENT (`src` NULL with count > 0),
/// GPUWIRE_ERROR_INVALID_HANDLE, GPUWIRE_ERROR_INVALID_ARGUMENT (a strided view whose elements
/// may coincide, as gpuwire_buffer_view_strided says; nothing copied), GPUWIRE_ERROR_CUDA.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_buffer_copy_from_host(buf: gpuwire_buffer, src: *const c_void, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_buffer_copy_from_host", || {
        let b = boundary::buffer(buf)?;
        // SAFETY: the caller promises `src` holds the buffer's bytes.
        unsafe { b.copy_from_host(src as usize, Stream(stream as usize)) }
    })
}

/// Copies all of the buffer's elements into host memory `dst`, after the work already enqueued
/// on `stream`. Blocks until the copy is complete.
///
/// Local. Errors: GPUWIRE_ERROR_NULL_ARGUMENT (`dst` NULL with count > 0),
/// GPUWIRE_ERROR_INVALID_HANDLE, GPUWIRE_ERROR_CUDA.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_buffer_copy_to_host(buf: gpuwire_buffer, dst: *mut c_void, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_buffer_copy_to_host", || {
        let b = boundary::buffer(buf)?;
        // SAFETY: the caller promises `dst` holds the buffer's bytes.
        unsafe { b.copy_to_host(dst as usize, Stream(stream as usize)) }
    })
}

/// The address of the buffer's first element (NULL for an empty owned buffer).
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_buffer_pointer(buf: gpuwire_buffer, ptr: *mut *mut c_void) -> gpuwire_status {
    call("gpuwire_buffer_pointer", || {
        non_null(ptr, "ptr")?;
        let b = boundary::buffer(buf)?;
        write(ptr, b.ptr() as *mut c_void);
        Ok(())
    })
}
/// The number of elements.
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_buffer_count(buf: gpuwire_buffer, count: *mut i64) -> gpuwire_status {
    call("gpuwire_buffer_count", || {
        non_null(count, "count")?;
        let b = boundary::buffer(buf)?;
        write(count, b.count() as i64);
        Ok(())
    })
}
/// The datatype (a gpuwire_dtype).
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_buffer_dtype(buf: gpuwire_buffer, dtype: *mut i32) -> gpuwire_status {
    call("gpuwire_buffer_dtype", || {
        non_null(dtype, "dtype")?;
        let b = boundary::buffer(buf)?;
        write(dtype, b.dtype() as i32);
        Ok(())
    })
}
/// The memory space (a gpuwire_space; never AUTO).
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_buffer_space(buf: gpuwire_buffer, space: *mut i32) -> gpuwire_status {
    call("gpuwire_buffer_space", || {
        non_null(space, "space")?;
        let b = boundary::buffer(buf)?;
        write(space, b.space() as i32);
        Ok(())
    })
}
/// The CUDA device of the memory, or -1 for host memory.
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_buffer_device(buf: gpuwire_buffer, device: *mut i32) -> gpuwire_status {
    call("gpuwire_buffer_device", || {
        non_null(device, "device")?;
        let b = boundary::buffer(buf)?;
        write(device, b.device());
        Ok(())
    })
}
/// 1 if gpuwire allocated the memory (a view reports its original's owner), 0 if borrowed.
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_buffer_owned(buf: gpuwire_buffer, owned: *mut i32) -> gpuwire_status {
    call("gpuwire_buffer_owned", || {
        non_null(owned, "owned")?;
        let b = boundary::buffer(buf)?;
        write(owned, b.owned() as i32);
        Ok(())
    })
}

/// 1 if the buffer's elements are count() consecutive ones at gpuwire_buffer_pointer (an
/// allocation, a wrap, a contiguous view), 0 for a strided or subarray view or a strided wrap,
/// whose elements lie apart (read them with gpuwire_buffer_copy_to_host).
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_buffer_contiguous(buf: gpuwire_buffer, contiguous: *mut i32) -> gpuwire_status {
    call("gpuwire_buffer_contiguous", || {
        non_null(contiguous, "contiguous")?;
        let b = boundary::buffer(buf)?;
        write(contiguous, b.shape().is_none() as i32);
        Ok(())
    })
}

/// The size of one element of `dtype` in bytes (float16 2, complex128 16, ...). Works before
/// gpuwire_init.
///
/// Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_UNSUPPORTED_DTYPE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_dtype_size(dtype: i32, bytes: *mut i64) -> gpuwire_status {
    call("gpuwire_dtype_size", || {
        non_null(bytes, "bytes")?;
        write(bytes, Dtype::from_c(dtype)?.size() as i64);
        Ok(())
    })
}
