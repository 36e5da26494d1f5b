//! The C ABI: the only place with `extern "C"`. Each function checks its arguments, resolves
//! handles and calls the safe core inside `boundary::call`, which maps errors to status codes and
//! never lets a panic cross into C.

#![allow(non_camel_case_types)]
// The exported functions take C pointers and dereference them after a NULL check; marking them
// `unsafe fn` would change nothing for their C callers, who own the pointers' validity.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod boundary;
pub mod buffer;
pub mod comm;
pub mod darray;
pub mod lifecycle;
pub mod ops;
pub mod status;

// Handles. In C and C++ each kind of handle is its own struct of one uint64_t (`h`, 0 = NULL),
// passed by value: giving a buffer where a communicator is expected does not compile (as
// Vulkan's non-dispatchable handles). Such a struct is passed, returned and laid out in arrays
// exactly as a uint64_t on every ABI gpuwire supports (x86-64 System V and Windows, AArch64
// AAPCS64: an 8-byte aggregate of one integer travels in one general register or 8 bytes of
// stack), so Fortran's integer(c_int64_t) handles, Python's c_uint64 and the Rust code here,
// which takes the value as a u64, all call the same functions. cbindgen sees the structs (the
// `#[cfg(cbindgen)]` items, never compiled) and not the u64 aliases (`cbindgen:ignore`); the
// NULL constants, which need C and C++ spellings, are written in cbindgen.toml.

/// A gpuwire communicator (GPUWIRE_COMM_NULL, `h` = 0, is the NULL handle).
///
/// Lifecycle: 1. `gpuwire_comm_create` / `gpuwire_comm_world` / `gpuwire_comm_split` /
/// `gpuwire_comm_dup` make one (collective); 2. operations use it; 3. `gpuwire_comm_free`
/// releases it (collective, as MPI_Comm_free). Handles are plain values: copy them freely;
/// a copy of a freed handle is reported as GPUWIRE_ERROR_INVALID_HANDLE.
#[cfg(cbindgen)]
#[repr(C)]
pub struct gpuwire_comm {
    /// The handle's value: 0 is the NULL handle.
    pub h: u64,
}

/// cbindgen:ignore
///
/// In Rust the handle's value, `h` of the C struct (see the module's doc on handles).
pub type gpuwire_comm = u64;

/// A gpuwire buffer: pointer, element count, datatype, memory space, device and owner
/// (GPUWIRE_BUFFER_NULL, `h` = 0, is the NULL handle).
///
/// Lifecycle: 1. `gpuwire_buffer_alloc` (owned, zeroed), `gpuwire_buffer_wrap` (borrows the
/// caller's memory) or `gpuwire_buffer_view` (a slice of another buffer, which it keeps alive);
/// 2. operations use it; 3. `gpuwire_buffer_free` releases the handle, and the memory once no
/// view and no pending request uses it. Borrowed memory is never freed by gpuwire.
#[cfg(cbindgen)]
#[repr(C)]
pub struct gpuwire_buffer {
    /// The handle's value: 0 is the NULL handle.
    pub h: u64,
}

/// cbindgen:ignore
///
/// In Rust the handle's value, `h` of the C struct (see the module's doc on handles).
pub type gpuwire_buffer = u64;

/// A distributed array: a global array (1-D, or an N-D shape split along axis 0 into whole
/// rows) over the ranks of a communicator, on host or device memory (`h` = 0: GPUWIRE_DARRAY_NULL).
/// The object that PyLops-MPI's DistributedArray is, for C, C++ and Fortran.
///
/// Partitions: GPUWIRE_PARTITION_SCATTER (rank r owns a block of rows: by default the first
/// N mod P ranks get one row more, or each rank gives its own count) and
/// GPUWIRE_PARTITION_BROADCAST (every rank holds everything; user data enters through a
/// broadcast from rank 0, so the copies stay identical).
///
/// Local storage: `halo` ghost rows, this rank's owned rows, `halo` ghost rows, contiguous and
/// row-major (see gpuwire_darray_create_nd). Operations work on the owned elements.
///
/// Datatypes: fill, set_global, allgather, gather, redistribute, bcast and halo_exchange take
/// every datatype; axpy, scale, dot and norm take float32, float64, complex64 and complex128;
/// sum those and the integer types; min and max float32, float64 and the integer types.
/// Others return GPUWIRE_ERROR_UNSUPPORTED_DTYPE.
///
/// Lifecycle: 1. gpuwire_darray_create or gpuwire_darray_create_nd (collective); 2. set its
/// values (gpuwire_darray_set_global, gpuwire_darray_fill, or directly through
/// gpuwire_darray_data), compute (axpy, scale, dot, norm, sum, min, max) and move data
/// (allgather, gather, redistribute, halo_exchange, bcast); 3. gpuwire_darray_free (local).
/// The array keeps its communicator alive; gpuwire_finalize invalidates every array.
#[cfg(cbindgen)]
#[repr(C)]
pub struct gpuwire_darray {
    /// The handle's value: 0 is the NULL handle.
    pub h: u64,
}

/// cbindgen:ignore
///
/// In Rust the handle's value, `h` of the C struct (see the module's doc on handles).
pub type gpuwire_darray = u64;

/// The NULL distributed array handle (C and C++: cbindgen.toml).
pub const GPUWIRE_DARRAY_NULL: gpuwire_darray = 0;

/// Local length "let gpuwire decide" for gpuwire_darray_create and gpuwire_darray_create_nd
/// (the default split: the first N mod P ranks get one more).
pub const GPUWIRE_DECIDE: i64 = -1;

/// A nonblocking operation in flight (`h` = 0: GPUWIRE_REQUEST_NULL).
///
/// Lifecycle: 1. `gpuwire_isend` / `gpuwire_irecv` (and the other nonblocking calls) make one;
/// 2. a wait (`gpuwire_wait`, `gpuwire_waitall`, `gpuwire_waitany`, `gpuwire_waitsome`, their
/// `_status` forms) or a test that reports completion (`gpuwire_test`, `gpuwire_testany`,
/// `gpuwire_testall`, `gpuwire_testsome`) finishes it and sets the caller's handle to
/// GPUWIRE_REQUEST_NULL, also after `gpuwire_cancel` (which only withdraws); or
/// `gpuwire_request_free` releases it while its operation goes on.
#[cfg(cbindgen)]
#[repr(C)]
pub struct gpuwire_request {
    /// The handle's value: 0 is the NULL handle.
    pub h: u64,
}

/// cbindgen:ignore
///
/// In Rust the handle's value, `h` of the C struct (see the module's doc on handles).
pub type gpuwire_request = u64;

/// The NULL request: waiting on it returns at once (as MPI_REQUEST_NULL; C and C++:
/// cbindgen.toml).
pub const GPUWIRE_REQUEST_NULL: gpuwire_request = 0;

/// The NULL communicator handle (what `gpuwire_comm_split` returns for an undefined color;
/// C and C++: cbindgen.toml).
pub const GPUWIRE_COMM_NULL: gpuwire_comm = 0;

/// The NULL buffer handle (accepted where a buffer is not significant, e.g. a non-root's
/// receive buffer of gpuwire_gather; C and C++: cbindgen.toml).
pub const GPUWIRE_BUFFER_NULL: gpuwire_buffer = 0;

/// The rank that sends and receives nothing, and the color of no new communicator (their doc
/// comments, the header's, are in `types`, under everything that compares with them).
pub use crate::types::{GPUWIRE_PROC_NULL, GPUWIRE_UNDEFINED};
