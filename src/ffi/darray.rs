//! Distributed arrays (gpuwire_darray): creation, queries, elementwise operations, reductions,
//! gathers, redistribution and halo exchange.
//!
//! Common to every function here: lengths and offsets are in elements of the array's datatype
//! (N-D arrays: elements, except where a name says rows); `stream` is a CUstream (NULL = the
//! legacy default stream) and is ignored for host-accessible arrays. On device arrays,
//! fill, scale and axpy are enqueued on `stream` and return at once; reductions, set_global,
//! allgather and gather return when their result is in host memory; halo_exchange,
//! redistribute and bcast behave as the communicator operations they use (after the work
//! enqueued earlier on `stream`; work enqueued later sees their result). "Collective" means
//! every rank of the array's communicator calls the function, in the same order as its other
//! collectives; argument errors that every rank sees alike (mismatched arrays, unsupported
//! datatypes) are returned by every rank before anything moves, and in checking mode
//! (GPUWIRE_CHECK=1) every collective call is agreed across ranks first, as the plain
//! collectives are: any rank's argument error, ranks in different calls, and a datatype, root,
//! halo width, norm kind or array (shape, split, halo, kind of memory) that differs between
//! ranks are then an error on every rank, before anything moves. A handle refused on one rank
//! (freed, never made) is that rank's argument error too where the call takes two arrays and
//! the other resolves (dot, axpy, redistribute's destination: the call's agreement runs on the
//! other's communicator); a call of one array, or a redistribute whose source is refused (its
//! partition decides whether the call is collective), cannot reach the agreement, and returns
//! GPUWIRE_ERROR_INVALID_HANDLE on that rank alone, as a missing call would be.
//!
//! The messages of distributed arrays travel on an internal duplicate of the array's
//! communicator, made when the first array on that communicator is created and freed with it:
//! no message of the program, whatever its tag, ever matches one of them.

use std::ffi::c_void;
use std::sync::Arc;

use crate::buffer::BUFFERS;
use crate::darray::{Cart, DARRAYS, DArray, Spec};
use crate::device::Stream;
use crate::error::{Error, Result, gpuwire_status};
use crate::ffi::boundary::{self, call, non_null, write};
use crate::ffi::{GPUWIRE_DECIDE, gpuwire_buffer, gpuwire_comm, gpuwire_darray};
use crate::runtime;
use crate::types::{Dtype, NormKind, Partition, Space};

fn st(stream: *mut c_void) -> Stream {
    Stream(stream as usize)
}

fn darray(h: gpuwire_darray) -> Result<Arc<DArray>> {
    runtime::check_ready()?;
    DARRAYS.get(h)
}

/// The two arrays of a call of two (dot, axpy, redistribute, named `what` as in their
/// agreement): where one handle is refused and the other resolves, the call's agreement runs on
/// the other's communicator with the error (`DArray::refused_other`: in checking mode no other
/// rank waits for this one).
fn two_darrays(a: gpuwire_darray, b: gpuwire_darray, what: &str) -> Result<(Arc<DArray>, Arc<DArray>)> {
    match (darray(a), darray(b)) {
        (Ok(x), Ok(y)) => Ok((x, y)),
        // Whether redistribute is collective is the source's partition, which the destination
        // cannot tell (their partitions may differ): a refused source agrees nothing (a review
        // found the rank alone in an agreement). dot's and axpy's arrays share a partition.
        (Err(e), Ok(_)) if what == "redistribute" => Err(e),
        (Err(e), Ok(other)) | (Ok(other), Err(e)) => Err(other.refused_other(what, e)),
        (Err(e), Err(_)) => Err(e),
    }
}

fn nonneg(v: i64, what: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| Error::InvalidArgument(format!("{what} = {v} is negative")))
}

fn local_rows(v: i64) -> Result<Option<usize>> {
    if v == GPUWIRE_DECIDE {
        return Ok(None);
    }
    usize::try_from(v).map(Some).map_err(|_| Error::InvalidArgument(format!("local length {v} is negative (pass GPUWIRE_DECIDE = -1 to let gpuwire decide)")))
}

fn make(comm: gpuwire_comm, out: *mut gpuwire_darray, spec: impl FnOnce() -> Result<Spec>) -> Result<()> {
    let c = boundary::comm(comm)?;
    let spec = non_null(out, "out").and_then(|()| spec());
    let d = DArray::create(&c, spec)?;
    write(out, DARRAYS.insert(Arc::new(d))?);
    Ok(())
}

/// Creates a 1-D distributed array of `global_len` elements of `dtype` (a gpuwire_dtype) in
/// `space` (HOST, DEVICE, PINNED or MANAGED; device memory is on the communicator's device),
/// split over the ranks of `comm` by `partition` (a gpuwire_partition), zero-filled.
///
/// SCATTER: `local_len` is this rank's number of elements, or GPUWIRE_DECIDE on every rank for
/// the default split (each rank global_len / size, the first global_len mod size ranks one
/// more); the ranks' lengths must add up to `global_len`. BROADCAST: every rank holds all
/// `global_len` elements; pass GPUWIRE_DECIDE.
///
/// Collective over `comm` (one agreement and one allgather; the first array on `comm` also
/// duplicates it for the arrays' own messages, which sets up its backend once more). Any
/// rank's argument error is returned on every rank. Errors: GPUWIRE_ERROR_NULL_ARGUMENT (`out`),
/// GPUWIRE_ERROR_INVALID_HANDLE (`comm`), GPUWIRE_ERROR_INVALID_ARGUMENT (negative lengths,
/// GPUWIRE_DECIDE on some ranks only, unknown partition or space, ranks that disagree on the
/// partition, sizes beyond the address space, not enough memory), GPUWIRE_ERROR_COUNT_MISMATCH (local lengths that do not add up to `global_len`,
/// ranks with different global lengths), GPUWIRE_ERROR_DTYPE_MISMATCH (ranks with different
/// datatypes), GPUWIRE_ERROR_UNSUPPORTED_DTYPE, GPUWIRE_ERROR_BACKEND_UNAVAILABLE (device
/// memory on a communicator whose backend is HOST), GPUWIRE_ERROR_CUDA, GPUWIRE_ERROR_MPI.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_create(
    comm: gpuwire_comm,
    global_len: i64,
    local_len: i64,
    dtype: i32,
    space: i32,
    partition: i32,
    out: *mut gpuwire_darray,
) -> gpuwire_status {
    call("gpuwire_darray_create", || {
        make(comm, out, || {
            Ok(Spec {
                shape: vec![nonneg(global_len, "global_len")?],
                local_rows: local_rows(local_len)?,
                halo: 0,
                dtype: Dtype::from_c(dtype)?,
                space: Space::from_c(space)?,
                partition: Partition::from_c(partition)?,
                cart: None,
                wrap: None,
            })
        })
    })
}

/// Creates an N-D distributed array of global shape `shape[0] x ... x shape[ndim-1]` (row-major,
/// C order), split along axis 0: rank r owns whole rows (a row is shape[1] x ... x
/// shape[ndim-1] elements). `local_rows` is this rank's number of rows (or GPUWIRE_DECIDE on
/// every rank for the default split); they must add up to shape[0]. `halo` is the number of
/// ghost rows allocated above and below each rank's block for gpuwire_darray_halo_exchange
/// (SCATTER only; 0 for none).
///
/// Local storage, per rank: `halo` ghost rows, the owned rows, `halo` ghost rows, contiguous
/// (gpuwire_darray_local_with_halo is all of it; gpuwire_darray_data points at the first owned
/// element, so the ghost rows above start `halo` x row elements before it). Ghost rows beyond
/// the global edges (above global row 0, below the last row) are never written by gpuwire: they
/// stay zero unless you store boundary values there.
///
/// Collective over `comm`. Errors as gpuwire_darray_create, plus GPUWIRE_ERROR_NULL_ARGUMENT
/// (`shape`), GPUWIRE_ERROR_INVALID_ARGUMENT (`ndim` < 1, a negative dimension or halo, a halo on
/// a BROADCAST array, a shape or halo whose storage, (local rows + 2 halo) x row elements,
/// does not fit in the address space) and GPUWIRE_ERROR_COUNT_MISMATCH (ranks with different
/// shapes).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn gpuwire_darray_create_nd(
    comm: gpuwire_comm,
    ndim: i32,
    shape: *const i64,
    local_rows: i64,
    halo: i64,
    dtype: i32,
    space: i32,
    partition: i32,
    out: *mut gpuwire_darray,
) -> gpuwire_status {
    call("gpuwire_darray_create_nd", || {
        make(comm, out, || {
            if ndim < 1 {
                return Err(Error::InvalidArgument(format!("ndim = {ndim}: an array has at least one dimension")));
            }
            non_null(shape, "shape")?;
            // SAFETY: the caller promises `ndim` entries.
            let dims = unsafe { std::slice::from_raw_parts(shape, ndim as usize) };
            let dims = dims.iter().enumerate().map(|(i, d)| nonneg(*d, &format!("shape[{i}]"))).collect::<Result<Vec<_>>>()?;
            Ok(Spec {
                shape: dims,
                local_rows: self::local_rows(local_rows)?,
                halo: nonneg(halo, "halo")?,
                dtype: Dtype::from_c(dtype)?,
                space: Space::from_c(space)?,
                partition: Partition::from_c(partition)?,
                cart: None,
                wrap: None,
            })
        })
    })
}

/// Reads `ndim` int64 entries of `p` named `what`, each >= 0; NULL: `ndim` zeros.
fn axis_values(p: *const i64, ndim: usize, what: &str) -> Result<Vec<usize>> {
    if p.is_null() {
        return Ok(vec![0; ndim]);
    }
    // SAFETY: the caller promises `ndim` entries.
    let v = unsafe { std::slice::from_raw_parts(p, ndim) };
    v.iter().enumerate().map(|(i, d)| nonneg(*d, &format!("{what}[{i}]"))).collect()
}

/// The specification of gpuwire_darray_create_cart and gpuwire_darray_wrap.
#[allow(clippy::too_many_arguments)]
fn cart_spec(ndim: i32, shape: *const i64, procs: *const i64, halo: *const i64, periodic: *const i32, dtype: i32, space: i32, wrap: Option<usize>) -> Result<Spec> {
    if ndim < 1 {
        return Err(Error::InvalidArgument(format!("ndim = {ndim}: an array has at least one dimension")));
    }
    non_null(shape, "shape")?;
    let nd = ndim as usize;
    let dims = axis_values(shape, nd, "shape")?;
    let periodic = if periodic.is_null() {
        vec![false; nd]
    } else {
        // SAFETY: the caller promises `ndim` entries.
        let v = unsafe { std::slice::from_raw_parts(periodic, nd) };
        v.iter()
            .enumerate()
            .map(|(i, p)| match p {
                0 => Ok(false),
                1 => Ok(true),
                x => Err(Error::InvalidArgument(format!("periodic[{i}] = {x}: expected 0 (not periodic) or 1 (periodic)"))),
            })
            .collect::<Result<Vec<_>>>()?
    };
    Ok(Spec {
        shape: dims,
        local_rows: None,
        halo: 0,
        dtype: Dtype::from_c(dtype)?,
        space: Space::from_c(space)?,
        partition: Partition::GPUWIRE_PARTITION_SCATTER,
        cart: Some(Cart { procs: axis_values(procs, nd, "procs")?, halo: axis_values(halo, nd, "halo")?, periodic }),
        wrap,
    })
}

/// Creates an N-D SCATTER distributed array of global shape `shape[0] x ... x shape[ndim-1]`
/// (C order), split over a Cartesian grid of the ranks of `comm`: `procs[a]` processes along
/// axis a, or 0 to let gpuwire choose (as MPI_Dims_create: as balanced as possible, in
/// non-increasing order; `procs` NULL: all chosen); their product must be the size of `comm`.
/// Rank r's coordinates in the grid are r's digits in C order (the last axis fastest), as
/// MPI_Cart_create without reordering; along each axis the blocks are split as
/// gpuwire_darray_create's default (the first shape[a] mod procs[a] one element longer).
/// `halo[a]` ghost elements (NULL: none) lie on each side of the block along axis a, on every
/// rank, and `periodic[a]` (0 or 1; NULL: none periodic) makes the halo exchange wrap around
/// axis a (the first block's lower ghosts get the last block's last elements and the other
/// way round; with one process along a periodic axis, its own).
///
/// Local storage, per rank: (n_0 + 2 halo[0]) x ... x (n_{ndim-1} + 2 halo[ndim-1]) elements in
/// C order, n_a being the block's length along axis a (gpuwire_darray_local_shape);
/// gpuwire_darray_data points at the first owned element (index halo[a] on every axis), and
/// gpuwire_darray_local is a subarray view of the owned elements. Ghosts beyond a non-periodic
/// global edge are never written by gpuwire. Every gpuwire_darray operation works on such an
/// array: elementwise operations and reductions on the owned elements (packed into contiguous
/// scratch first when there is a halo beyond axis 0: one kernel each way for device arrays),
/// set_global / allgather / gather place each block at its place in the global array, and
/// redistribute to or from an array of another split goes through a global host copy (the
/// source's allgather, then the destination's set_global). With ndim > 4, only axis 0 may be
/// split or have a halo (views have at most 4 dimensions); there gpuwire's choice (`procs` 0 or
/// NULL) splits axis 0 only.
///
/// Collective over `comm`. Errors as gpuwire_darray_create_nd, plus GPUWIRE_ERROR_INVALID_ARGUMENT
/// (`procs` whose product is not the size of `comm`, or with non-zero entries that do not
/// divide it; negative entries; `periodic` entries other than 0 and 1; ranks that passed
/// another grid, halo or periodicity; ndim > 4 with a split or halo beyond axis 0).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn gpuwire_darray_create_cart(
    comm: gpuwire_comm,
    ndim: i32,
    shape: *const i64,
    procs: *const i64,
    halo: *const i64,
    periodic: *const i32,
    dtype: i32,
    space: i32,
    out: *mut gpuwire_darray,
) -> gpuwire_status {
    call("gpuwire_darray_create_cart", || make(comm, out, || cart_spec(ndim, shape, procs, halo, periodic, dtype, space, None)))
}

/// Makes a SCATTER distributed array over the program's own memory: as
/// gpuwire_darray_create_cart, but this rank's storage is `ptr` (host or device memory; `space`
/// HOST, DEVICE, PINNED, MANAGED, or AUTO to ask CUDA), laid out as that function's: the block
/// with its ghosts on every axis, (n_0 + 2 halo[0]) x ... elements in C order, the first owned
/// element at index halo[a] on every axis (a stencil code's array with its ghost layers, e.g.
/// a 2-D grid split by rows: procs {0, 1}, halo {1, 0}, the rows of
/// gpuwire_darray_local_shape plus one ghost row above and below). Query n_a with
/// gpuwire_darray_local_shape on an array made by gpuwire_darray_create_cart with the same
/// arguments, or compute it: the first shape[a] mod procs[a] coordinates get shape[a] / procs[a]
/// + 1, the others shape[a] / procs[a].
///
/// Ownership: the program keeps the memory; gpuwire never frees it (gpuwire_darray_free frees
/// the handle only); it must stay valid, and hold that many elements, until the array and every
/// view of it are freed. Requirements checked: `ptr` is not NULL unless the storage has no
/// elements; it is aligned as its element is in C (complex64 and the 32-bit pairs to 4 bytes,
/// complex128 and float64_int32 to 8, the others to their size); a declared space matches what
/// CUDA reports; every rank passes the same kind of memory (host or device). The size cannot
/// be checked: a smaller allocation is the program's error. Nothing is written to the memory
/// at creation (it is not zeroed).
///
/// Collective over `comm`. Errors as gpuwire_darray_create_cart, plus
/// GPUWIRE_ERROR_NULL_ARGUMENT (`ptr`), GPUWIRE_ERROR_INVALID_ARGUMENT (misaligned `ptr`, a
/// declared space other than CUDA's, host memory on some ranks and device memory on others).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn gpuwire_darray_wrap(
    comm: gpuwire_comm,
    ptr: *mut c_void,
    ndim: i32,
    shape: *const i64,
    procs: *const i64,
    halo: *const i64,
    periodic: *const i32,
    dtype: i32,
    space: i32,
    out: *mut gpuwire_darray,
) -> gpuwire_status {
    call("gpuwire_darray_wrap", || make(comm, out, || cart_spec(ndim, shape, procs, halo, periodic, dtype, space, Some(ptr as usize))))
}

/// Writes the decomposition, one entry per axis into each array that is not NULL: `procs`
/// (processes along the axis; a row split: the size, then 1), `coords` (this rank's
/// coordinate), `starts` (the global index of this rank's first owned element along the axis),
/// `halo` (ghost width on each side) and `periodic` (1 or 0). Works for every array (a row
/// split: procs {size, 1, ...}, halo {halo, 0, ...}, never periodic; BROADCAST: procs all 1).
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_cart(d: gpuwire_darray, procs: *mut i64, coords: *mut i64, starts: *mut i64, halo: *mut i64, periodic: *mut i32) -> gpuwire_status {
    call("gpuwire_darray_cart", || {
        let a = darray(d)?;
        let (p, c, s, h, per) = a.cart();
        for (out, vals) in [(procs, p.to_vec()), (coords, c.to_vec()), (starts, s), (halo, h.to_vec())] {
            if !out.is_null() {
                write_array(out, vals);
            }
        }
        if !periodic.is_null() {
            for (i, v) in per.iter().enumerate() {
                // SAFETY: the caller promises ndim entries.
                unsafe { periodic.add(i).write(*v as i32) };
            }
        }
        Ok(())
    })
}

/// Frees a distributed array handle; its memory is released once no view
/// (gpuwire_darray_local) uses it. Freeing twice, or a copy of a freed handle, returns
/// GPUWIRE_ERROR_INVALID_HANDLE.
///
/// Local (not collective); thread-safe. Errors: GPUWIRE_ERROR_INVALID_HANDLE,
/// GPUWIRE_ERROR_ALREADY_FINALIZED.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_free(d: gpuwire_darray) -> gpuwire_status {
    call("gpuwire_darray_free", || {
        runtime::check_ready()?;
        drop(DARRAYS.remove(d)?);
        Ok(())
    })
}

/// Resolves `d` and writes `f(array)` to the checked out-parameter `p`.
fn query<T>(name: &'static str, d: gpuwire_darray, p: *mut T, arg: &str, f: impl FnOnce(&DArray) -> T) -> gpuwire_status {
    call(name, || {
        non_null(p, arg)?;
        let a = darray(d)?;
        write(p, f(&a));
        Ok(())
    })
}

/// The global number of elements (the product of the shape).
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_global_len(d: gpuwire_darray, len: *mut i64) -> gpuwire_status {
    query("gpuwire_darray_global_len", d, len, "len", |a| a.global_len() as i64)
}

/// The number of elements this rank owns (without ghost rows; the global length for
/// BROADCAST).
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_local_len(d: gpuwire_darray, len: *mut i64) -> gpuwire_status {
    query("gpuwire_darray_local_len", d, len, "len", |a| a.local_len() as i64)
}

/// The global index of this rank's first owned element (0 for BROADCAST).
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_global_offset(d: gpuwire_darray, offset: *mut i64) -> gpuwire_status {
    query("gpuwire_darray_global_offset", d, offset, "offset", |a| a.global_offset() as i64)
}

/// The number of dimensions.
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_ndim(d: gpuwire_darray, ndim: *mut i32) -> gpuwire_status {
    query("gpuwire_darray_ndim", d, ndim, "ndim", |a| a.shape().len() as i32)
}

/// The number of ghost rows allocated above and below each rank's block (0 for none); for an
/// array on a process grid, axis 0's halo (gpuwire_darray_cart gives every axis's).
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_halo(d: gpuwire_darray, halo: *mut i64) -> gpuwire_status {
    query("gpuwire_darray_halo", d, halo, "halo", |a| a.halo() as i64)
}

/// The datatype (a gpuwire_dtype).
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_dtype(d: gpuwire_darray, dtype: *mut i32) -> gpuwire_status {
    query("gpuwire_darray_dtype", d, dtype, "dtype", |a| a.dtype() as i32)
}

/// The memory space (a gpuwire_space).
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_space(d: gpuwire_darray, space: *mut i32) -> gpuwire_status {
    query("gpuwire_darray_space", d, space, "space", |a| a.space() as i32)
}

/// The partition (a gpuwire_partition).
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_partition(d: gpuwire_darray, partition: *mut i32) -> gpuwire_status {
    query("gpuwire_darray_partition", d, partition, "partition", |a| a.partition() as i32)
}

/// The address of this rank's first owned element, in the array's memory space (a device
/// pointer for DEVICE arrays; NULL when this rank holds no storage). Owned elements follow
/// contiguously, row-major; the `halo` x row ghost elements above lie just before it. (An
/// array of gpuwire_darray_create_cart or gpuwire_darray_wrap with a halo beyond axis 0: the
/// owned elements are a box of the padded storage, laid out as described there.)
/// Writing to a BROADCAST array through it is your business: gpuwire_darray_bcast makes the
/// ranks' copies equal again. Valid until the array is freed.
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_data(d: gpuwire_darray, ptr: *mut *mut c_void) -> gpuwire_status {
    query("gpuwire_darray_data", d, ptr, "ptr", |a| a.data_ptr() as *mut c_void)
}

fn write_array(out: *mut i64, vals: impl IntoIterator<Item = usize>) {
    for (i, v) in vals.into_iter().enumerate() {
        // SAFETY: the caller promises room for every entry (checked non-NULL before).
        unsafe { out.add(i).write(v as i64) };
    }
}

/// Writes a new handle to the array's communicator to `*comm` and its number of ranks to
/// `*size` (the entries of gpuwire_darray_local_lens): so an array's caller can size the
/// arrays it passes without knowing which communicator made it. The handle refers to the
/// communicator the array keeps alive; free it with gpuwire_comm_free, which releases that
/// handle only (a local call; the free of the communicator's own handle is the collective one).
/// Local; thread-safe.
///
/// Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_comm(d: gpuwire_darray, comm: *mut gpuwire_comm, size: *mut i32) -> gpuwire_status {
    call("gpuwire_darray_comm", || {
        non_null(comm, "comm")?;
        non_null(size, "size")?;
        let a = darray(d)?;
        let c = a.comm().clone();
        let n = c.size();
        write(comm, crate::comm::Communicator::new_handle(c, false)?);
        write(size, n);
        Ok(())
    })
}

/// Writes the number of elements each rank owns into `lens` (one entry per rank of the
/// communicator, in rank order: exactly what gpuwire_darray_allgather gathers from each).
/// Size `lens` by gpuwire_darray_comm's `size`.
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_local_lens(d: gpuwire_darray, lens: *mut i64) -> gpuwire_status {
    call("gpuwire_darray_local_lens", || {
        non_null(lens, "lens")?;
        write_array(lens, darray(d)?.local_lens());
        Ok(())
    })
}

/// Writes the global shape into `shape` (ndim entries).
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_shape(d: gpuwire_darray, shape: *mut i64) -> gpuwire_status {
    call("gpuwire_darray_shape", || {
        non_null(shape, "shape")?;
        write_array(shape, darray(d)?.shape().to_vec());
        Ok(())
    })
}

/// Writes this rank's local shape into `shape` (ndim entries): the global shape with axis 0
/// replaced by the number of rows this rank owns (on a process grid: this rank's block length
/// along every axis).
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_local_shape(d: gpuwire_darray, shape: *mut i64) -> gpuwire_status {
    call("gpuwire_darray_local_shape", || {
        non_null(shape, "shape")?;
        write_array(shape, darray(d)?.local_shape());
        Ok(())
    })
}

/// A new buffer handle viewing this rank's owned elements (no ghost rows), for use with every
/// gpuwire_buffer function and operation (e.g. gpuwire_allreduce of a BROADCAST array's
/// elements). The view keeps the memory alive; free it with gpuwire_buffer_free.
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_local(d: gpuwire_darray, out: *mut gpuwire_buffer) -> gpuwire_status {
    call("gpuwire_darray_local", || {
        non_null(out, "out")?;
        let v = darray(d)?.local()?;
        write(out, BUFFERS.insert(Arc::new(v))?);
        Ok(())
    })
}

/// A new buffer handle viewing this rank's whole storage: `halo` ghost rows, the owned rows,
/// `halo` ghost rows ((local rows + 2 halo) x row elements; on a process grid, the block padded
/// on every axis, as gpuwire_darray_create_cart describes). Free it with gpuwire_buffer_free.
///
/// Local; thread-safe. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_local_with_halo(d: gpuwire_darray, out: *mut gpuwire_buffer) -> gpuwire_status {
    call("gpuwire_darray_local_with_halo", || {
        non_null(out, "out")?;
        let v = darray(d)?.local_with_halo()?;
        write(out, BUFFERS.insert(Arc::new(v))?);
        Ok(())
    })
}

/// Reads one element of `d`'s datatype at `p`.
fn element(p: *const c_void, d: &DArray, arg: &str) -> Result<Vec<u8>> {
    non_null(p, arg)?;
    let mut v = vec![0u8; d.dtype().size()];
    // SAFETY: the caller promises one element of the array's datatype at `p`.
    unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), v.as_mut_ptr(), v.len()) };
    Ok(v)
}

fn write_bytes(out: *mut c_void, bytes: &[u8]) {
    // SAFETY: checked non-NULL; the caller promises room for one element.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.cast::<u8>(), bytes.len()) };
}

/// Sets every owned element to `*value` (one element of the array's datatype, in host memory;
/// complex: real then imaginary part). Ghost rows are not touched. Every datatype.
///
/// Local for SCATTER. Collective for BROADCAST: rank 0's value is broadcast, so the copies
/// stay identical; every rank must still pass a value (unlike gpuwire_darray_set_global's
/// `src`, a NULL `value` is an error on any rank, and without checking mode a rank that fails
/// leaves the others' broadcast unmatched, as any argument error of one rank in a collective).
/// Errors: GPUWIRE_ERROR_NULL_ARGUMENT (`value`), GPUWIRE_ERROR_INVALID_HANDLE,
/// GPUWIRE_ERROR_CUDA, GPUWIRE_ERROR_BACKEND_UNAVAILABLE (device arrays without NVRTC).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_fill(d: gpuwire_darray, value: *const c_void, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_darray_fill", || {
        let a = darray(d)?;
        a.fill(element(value, &a, "value"), st(stream))
    })
}

/// Copies this rank's part of the global array `src` (host memory, global_len elements in
/// global row-major order) into its owned elements: rank r copies elements [offset_r, offset_r
/// + local_len_r) (on a process grid split beyond axis 0: its block of the global array).
/// Blocks until done.
///
/// Local for SCATTER (a rank that owns no element does not read `src`, which may then be
/// NULL). Collective for BROADCAST: rank 0's `src` is broadcast (the others' `src` is not read
/// and may be NULL). Errors: GPUWIRE_ERROR_NULL_ARGUMENT (`src` NULL on a rank that reads it), GPUWIRE_ERROR_INVALID_HANDLE, GPUWIRE_ERROR_CUDA,
/// GPUWIRE_ERROR_MPI.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_set_global(d: gpuwire_darray, src: *const c_void, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_darray_set_global", || darray(d)?.set_global(src as usize, st(stream)))
}

/// Gathers the whole array into every rank's host array `dst` (global_len elements, global
/// order): exact, no padding (as MPI_Allgatherv with the local lengths as counts).
///
/// Collective for SCATTER; for BROADCAST a local copy. Errors: GPUWIRE_ERROR_NULL_ARGUMENT
/// (`dst` NULL and the array not empty), GPUWIRE_ERROR_INVALID_ARGUMENT (`dst` is device
/// memory, or misaligned), GPUWIRE_ERROR_INVALID_HANDLE, GPUWIRE_ERROR_MPI, GPUWIRE_ERROR_CUDA.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_allgather(d: gpuwire_darray, dst: *mut c_void, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_darray_allgather", || darray(d)?.allgather(dst as usize, st(stream)))
}

/// Gathers the whole array into `root`'s host array `dst` (global_len elements, global order);
/// the other ranks' `dst` is not read and may be NULL (as MPI_Gatherv with the local lengths
/// as counts).
///
/// Collective for SCATTER (each rank sends its block to the root, on the arrays' internal
/// communicator); for BROADCAST only the root copies. Errors: as gpuwire_darray_allgather, plus
/// GPUWIRE_ERROR_INVALID_ARGUMENT (root out of range), GPUWIRE_ERROR_ROOT_MISMATCH (checking
/// mode: ranks passed different roots).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_gather(d: gpuwire_darray, dst: *mut c_void, root: i32, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_darray_gather", || darray(d)?.gather(dst as usize, root, st(stream)))
}

/// Copies the values of `src` into `dst`, two arrays on the same communicator with the same
/// shape and datatype that may be split differently: other local lengths, SCATTER to
/// BROADCAST (an allgatherv), BROADCAST to SCATTER (each rank copies its part), or the same
/// split (a local copy). SCATTER to SCATTER moves each overlapping block with a sendrecv on
/// the arrays' internal communicator. Ghost rows are not copied. Both arrays must be
/// host-accessible, or both on the same device. Passing the same array twice does nothing.
///
/// Collective when `src` is SCATTER; local when `src` is BROADCAST. Errors:
/// GPUWIRE_ERROR_INVALID_HANDLE, GPUWIRE_ERROR_INVALID_ARGUMENT (different communicators, host
/// and device arrays), GPUWIRE_ERROR_DTYPE_MISMATCH, GPUWIRE_ERROR_COUNT_MISMATCH (different
/// shapes), GPUWIRE_ERROR_MPI, GPUWIRE_ERROR_CUDA.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_redistribute(src: gpuwire_darray, dst: gpuwire_darray, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_darray_redistribute", || {
        let (s, d) = two_darrays(src, dst, "redistribute")?;
        DArray::redistribute(&s, &d, st(stream))
    })
}

/// Makes every rank's copy of a BROADCAST array equal to `root`'s (as MPI_Bcast of the
/// elements), after you wrote to it through gpuwire_darray_data or a view.
///
/// Collective. Errors: GPUWIRE_ERROR_INVALID_HANDLE, GPUWIRE_ERROR_INVALID_ARGUMENT (a SCATTER
/// array, root out of range), GPUWIRE_ERROR_ROOT_MISMATCH (checking mode: ranks passed
/// different roots), GPUWIRE_ERROR_MPI, GPUWIRE_ERROR_CUDA.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_bcast(d: gpuwire_darray, root: i32, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_darray_bcast", || darray(d)?.bcast(root, st(stream)))
}

/// y = alpha x + y, elementwise on the owned elements (`*alpha`: one element of the datatype in
/// host memory). `x` and `y` must be split alike; they may be the same array. float32, float64,
/// complex64 and complex128 (as BLAS axpy; no fused multiply-add, so host and device give the
/// same bits).
///
/// Local for SCATTER. Collective for BROADCAST (rank 0's alpha; every rank passes one, as for
/// gpuwire_darray_fill's value). Errors: GPUWIRE_ERROR_NULL_ARGUMENT (`alpha`), GPUWIRE_ERROR_INVALID_HANDLE,
/// GPUWIRE_ERROR_UNSUPPORTED_DTYPE (another datatype), GPUWIRE_ERROR_DTYPE_MISMATCH,
/// GPUWIRE_ERROR_COUNT_MISMATCH (other shapes or local lengths), GPUWIRE_ERROR_INVALID_ARGUMENT
/// (different communicators or partitions, host and device arrays), GPUWIRE_ERROR_CUDA.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_axpy(alpha: *const c_void, x: gpuwire_darray, y: gpuwire_darray, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_darray_axpy", || {
        let (xa, ya) = two_darrays(x, y, "axpy")?;
        DArray::axpy(element(alpha, &ya, "alpha"), &xa, &ya, st(stream))
    })
}

/// x = alpha x, elementwise on the owned elements. float32, float64, complex64, complex128.
///
/// Local for SCATTER. Collective for BROADCAST (rank 0's alpha; every rank passes one, as for
/// gpuwire_darray_fill's value). Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE, GPUWIRE_ERROR_UNSUPPORTED_DTYPE,
/// GPUWIRE_ERROR_CUDA.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_scale(d: gpuwire_darray, alpha: *const c_void, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_darray_scale", || {
        let a = darray(d)?;
        a.scale(element(alpha, &a, "alpha"), st(stream))
    })
}

fn result_ptr(p: *const c_void, arg: &str) -> Result<()> {
    non_null(p, arg)
}

/// The dot product sum_i x_i y_i into `*result` (one element of the datatype, host memory) on
/// every rank. Complex arrays: sum_i conj(x_i) y_i, the first argument conjugated as in BLAS
/// dotc (so dot(x, x) = ||x||^2). float32, float64, complex64, complex128. Each rank sums its
/// elements in order in float64 (complex: complex128) — on the GPU with a deterministic
/// two-pass reduction — then one allreduce combines the ranks; the result is rounded to the
/// datatype. The same input on the same ranks gives the same bits.
///
/// Collective for SCATTER; local for BROADCAST. Errors: GPUWIRE_ERROR_NULL_ARGUMENT
/// (`result`), GPUWIRE_ERROR_INVALID_HANDLE, GPUWIRE_ERROR_UNSUPPORTED_DTYPE,
/// GPUWIRE_ERROR_DTYPE_MISMATCH, GPUWIRE_ERROR_COUNT_MISMATCH, GPUWIRE_ERROR_INVALID_ARGUMENT
/// (as gpuwire_darray_axpy), GPUWIRE_ERROR_MPI, GPUWIRE_ERROR_CUDA,
/// GPUWIRE_ERROR_REMOTE_ARGUMENT (another rank's local part failed).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_dot(x: gpuwire_darray, y: gpuwire_darray, result: *mut c_void, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_darray_dot", || {
        let (xa, ya) = two_darrays(x, y, "dot")?;
        let v = DArray::dot(&xa, &ya, result_ptr(result, "result"), st(stream))?;
        write_bytes(result, &v);
        Ok(())
    })
}

/// A vector norm of the whole array into `*result` (float64 for every datatype): `kind`
/// GPUWIRE_NORM_1 (sum |x_i|), GPUWIRE_NORM_2 (sqrt of sum |x_i|^2, without scaling: the sum
/// of squares overflows beyond about 1e154) or GPUWIRE_NORM_INF (max |x_i|; NaN if any
/// element is NaN). |x| of a complex is its modulus. float32, float64, complex64, complex128;
/// accumulated in float64.
///
/// Collective for SCATTER; local for BROADCAST. Errors: as gpuwire_darray_dot, plus
/// GPUWIRE_ERROR_INVALID_ARGUMENT (unknown `kind`).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_norm(d: gpuwire_darray, kind: i32, result: *mut f64, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_darray_norm", || {
        let a = darray(d)?;
        let v = a.norm(NormKind::from_c(kind), result_ptr(result.cast(), "result"), st(stream))?;
        write(result, v);
        Ok(())
    })
}

/// The sum of all elements into `*result` (one element of the datatype). float32, float64
/// (accumulated in float64), complex64, complex128 (in complex128), and the integer types
/// (wrapping, as unsigned 64-bit arithmetic truncated to the type).
///
/// Collective for SCATTER; local for BROADCAST. Errors: as gpuwire_darray_dot.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_sum(d: gpuwire_darray, result: *mut c_void, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_darray_sum", || {
        let a = darray(d)?;
        let v = a.sum(result_ptr(result, "result"), st(stream))?;
        write_bytes(result, &v);
        Ok(())
    })
}

/// The smallest element into `*result` (one element of the datatype); NaN if any element is
/// NaN. float32, float64 and the integer types (complex numbers are not ordered: they return
/// GPUWIRE_ERROR_UNSUPPORTED_DTYPE). A rank without elements takes no part.
///
/// Collective for SCATTER; local for BROADCAST. Errors: as gpuwire_darray_dot, plus
/// GPUWIRE_ERROR_INVALID_ARGUMENT (an empty array).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_min(d: gpuwire_darray, result: *mut c_void, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_darray_min", || {
        let a = darray(d)?;
        let v = a.min_max(false, result_ptr(result, "result"), st(stream))?;
        write_bytes(result, &v);
        Ok(())
    })
}

/// The largest element into `*result`; as gpuwire_darray_min otherwise.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_max(d: gpuwire_darray, result: *mut c_void, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_darray_max", || {
        let a = darray(d)?;
        let v = a.min_max(true, result_ptr(result, "result"), st(stream))?;
        write_bytes(result, &v);
        Ok(())
    })
}

/// Halo (ghost cell) exchange for stencil codes: fills the `width` ghost rows above each rank's
/// block with the `width` global rows just before it, and the `width` ghost rows below with
/// the rows just after it, from whichever ranks own them (sendrecv on the arrays' internal
/// communicator, so no message of the program interferes; with every block at least `width`
/// rows long, one gpuwire group with each neighbouring rank, GPUWIRE_PROC_NULL at the ends;
/// shorter blocks get each ghost row from whichever rank owns it). Arrays of
/// gpuwire_darray_create_nd are not periodic: ghost rows beyond the global edges are not
/// touched. Arrays of gpuwire_darray_create_cart and gpuwire_darray_wrap: `width` on every axis
/// that has a halo, faces only, periodic axes wrapping around (as
/// gpuwire_darray_halo_exchange_axes with every width `width`). `width` may be less than the
/// halo the array was created with (then the ghost rows nearest the block are filled). Every
/// datatype.
///
/// Collective; SCATTER arrays only; every rank passes the same `width` (checking mode makes a
/// width that differs between ranks an error on every rank). Errors:
/// GPUWIRE_ERROR_INVALID_HANDLE, GPUWIRE_ERROR_INVALID_ARGUMENT (a BROADCAST array, a negative
/// width or one above the array's halo, widths that differ between ranks),
/// GPUWIRE_ERROR_COUNT_MISMATCH (checking mode: ranks passed different arrays),
/// GPUWIRE_ERROR_MPI, GPUWIRE_ERROR_CUDA.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_halo_exchange(d: gpuwire_darray, width: i64, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_darray_halo_exchange", || {
        darray(d)?.halo_exchange(nonneg(width, "width"), st(stream))
    })
}

/// Exchange edges and corners too (gpuwire_darray_halo_exchange_axes' `flags`).
pub const GPUWIRE_HALO_CORNERS: i32 = 1;

/// Halo exchange of every axis: fills `widths[a]` ghost layers (NULL: the array's halo on every
/// axis) on each side of every rank's block along axis a with the neighbouring blocks' owned
/// elements, wrapping around periodic axes (gpuwire_darray_create_cart). Faces only by
/// default: all axes' sends and receives in one gpuwire group (one exchange with each
/// neighbour per axis and side, in any order; device faces are strided views packed and
/// unpacked by GPU kernels on `stream`). With `flags` GPUWIRE_HALO_CORNERS the edges and corners
/// are filled too, axis by axis: one group per axis, each axis's faces spanning the ghosts of
/// the axes exchanged before it (the usual way: the diagonal neighbours' values arrive in two
/// or three steps), so not inside a group the caller has open. Otherwise, called inside the
/// caller's open group, its messages join that group and move at its end.
///
/// Every block along an exchanged axis must hold at least the width there (a ghost is filled
/// from one neighbour), except for a row split along axis 0, not periodic (as
/// gpuwire_darray_halo_exchange). Ghosts past a non-periodic global edge are not touched.
/// Axes of width 0, non-periodic axes with one process, and arrays without elements (an axis
/// of length 0) move nothing.
///
/// Collective; SCATTER arrays only; every rank passes the same widths and flags (checking mode
/// makes a difference an error on every rank). Errors: GPUWIRE_ERROR_INVALID_HANDLE,
/// GPUWIRE_ERROR_INVALID_ARGUMENT (a BROADCAST array, a negative width, one above the axis's
/// halo, blocks shorter than the width, unknown flags, corners inside an open group),
/// GPUWIRE_ERROR_COUNT_MISMATCH (checking mode: ranks passed different arrays),
/// GPUWIRE_ERROR_MPI, GPUWIRE_ERROR_CUDA, GPUWIRE_ERROR_NCCL.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_darray_halo_exchange_axes(d: gpuwire_darray, widths: *const i64, flags: i32, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_darray_halo_exchange_axes", || {
        let a = darray(d)?;
        let nd = a.shape().len();
        let w = if widths.is_null() { Ok(None) } else { axis_values(widths, nd, "widths").map(Some) };
        let w = w.and_then(|w| {
            if flags & !GPUWIRE_HALO_CORNERS != 0 {
                return Err(Error::InvalidArgument(format!("flags = {flags}: expected 0 or GPUWIRE_HALO_CORNERS (1)")));
            }
            Ok(w)
        });
        a.halo_exchange_axes(w, flags & GPUWIRE_HALO_CORNERS != 0, st(stream))
    })
}
