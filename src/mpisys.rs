//! Thin, checked helpers over the raw MPI C API (rsmpi's `mpi::ffi`).
//!
//! gpuwire calls MPI through the raw bindings rather than rsmpi's safe layer because it must see
//! every MPI return code (its communicators use MPI_ERRORS_RETURN), pass MPI_IN_PLACE, create
//! user-defined operations and convert `MPI_Fint` handles.

use std::ffi::{c_int, c_void};

pub use mpi::ffi as sys;
pub use sys::{MPI_Comm, MPI_Datatype, MPI_Op, MPI_Request};

use crate::error::{Error, Result};
use crate::types::Dtype;

unsafe extern "C" {
    fn gpuwire_shim_in_place() -> *mut c_void;
    fn gpuwire_shim_tag_ub_key() -> c_int;
}

/// MPI_IN_PLACE of the MPI we are linked against.
pub fn in_place() -> *mut c_void {
    // SAFETY: returns a constant.
    unsafe { gpuwire_shim_in_place() }
}

/// Turns an MPI return code into a `Result`, with MPI's own error string.
pub fn check(rc: c_int, what: &str) -> Result<()> {
    if rc == 0 {
        return Ok(());
    }
    Err(Error::Mpi(format!("{what} failed: {} (MPI error code {rc})", error_string(rc))))
}

/// MPI's description of an error code.
pub fn error_string(rc: c_int) -> String {
    let mut buf = vec![0u8; 1024];
    let mut len: c_int = 0;
    // SAFETY: buf is MPI_MAX_ERROR_STRING (<= 1024 in Open MPI and MPICH) bytes long.
    let ok = unsafe { sys::MPI_Error_string(rc, buf.as_mut_ptr().cast(), &mut len) };
    if ok != 0 || len <= 0 {
        return format!("unknown MPI error {rc}");
    }
    buf.truncate(len as usize);
    String::from_utf8_lossy(&buf).into_owned()
}

/// An MPI communicator handle that may be shared across threads (MPI_THREAD_MULTIPLE).
#[derive(Clone, Copy, Debug)]
pub struct RawComm(pub MPI_Comm);
// SAFETY: an MPI_Comm is an opaque handle; MPI itself arbitrates concurrent use.
unsafe impl Send for RawComm {}
unsafe impl Sync for RawComm {}

/// An MPI operation handle shared across threads.
#[derive(Clone, Copy, Debug)]
pub struct RawOp(pub MPI_Op);
// SAFETY: as RawComm.
unsafe impl Send for RawOp {}
unsafe impl Sync for RawOp {}

/// An MPI request handle shared across threads.
#[derive(Clone, Copy, Debug)]
pub struct RawRequest(pub MPI_Request);
// SAFETY: as RawComm.
unsafe impl Send for RawRequest {}
unsafe impl Sync for RawRequest {}

pub fn comm_world() -> MPI_Comm {
    // SAFETY: reading a constant exported by rsmpi's shim.
    unsafe { sys::RSMPI_COMM_WORLD }
}

pub fn comm_null() -> MPI_Comm {
    // SAFETY: as above.
    unsafe { sys::RSMPI_COMM_NULL }
}

pub fn request_null() -> MPI_Request {
    // SAFETY: as above.
    unsafe { sys::RSMPI_REQUEST_NULL }
}

pub fn proc_null() -> c_int {
    // SAFETY: as above.
    unsafe { sys::RSMPI_PROC_NULL }
}

pub fn undefined() -> c_int {
    // SAFETY: as above.
    unsafe { sys::RSMPI_UNDEFINED }
}

pub fn status_ignore() -> *mut sys::MPI_Status {
    // SAFETY: as above.
    unsafe { sys::RSMPI_STATUS_IGNORE }
}

/// MPI_Comm_f2c; MPI_COMM_NULL for a Fortran handle that names no communicator.
pub fn comm_f2c(f: i32) -> MPI_Comm {
    // SAFETY: MPI_Comm_f2c accepts any integer and returns MPI_COMM_NULL or a handle.
    let c = unsafe { sys::RSMPI_Comm_f2c(f) };
    // Open MPI returns a NULL pointer, not MPI_COMM_NULL, for an out-of-range or freed Fortran
    // handle; passing that on to MPI_Comm_dup aborts the process. An all-zero handle is never
    // a communicator (a NULL pointer in Open MPI, the "invalid" handle kind in MPICH).
    // SAFETY: reads the bytes of a plain handle value (a pointer or an integer).
    let bytes = unsafe { std::slice::from_raw_parts((&c as *const MPI_Comm).cast::<u8>(), std::mem::size_of::<MPI_Comm>()) };
    if bytes.iter().all(|b| *b == 0) { comm_null() } else { c }
}

/// MPI_Comm_c2f.
pub fn comm_c2f(c: MPI_Comm) -> i32 {
    // SAFETY: converts a valid handle.
    unsafe { sys::RSMPI_Comm_c2f(c) }
}

/// The MPI datatype that carries `d` on the wire. float16 and bfloat16 travel as MPI_UINT16_T
/// and are only ever reduced with gpuwire's own operations (see `runtime::half_op`).
pub fn datatype(d: Dtype) -> MPI_Datatype {
    use Dtype::*;
    // SAFETY: reading constants exported by rsmpi's shim.
    unsafe {
        match d {
            GPUWIRE_INT8 => sys::RSMPI_INT8_T,
            GPUWIRE_UINT8 => sys::RSMPI_UINT8_T,
            GPUWIRE_INT32 => sys::RSMPI_INT32_T,
            GPUWIRE_UINT32 => sys::RSMPI_UINT32_T,
            GPUWIRE_INT64 => sys::RSMPI_INT64_T,
            GPUWIRE_UINT64 => sys::RSMPI_UINT64_T,
            GPUWIRE_FLOAT16 | GPUWIRE_BFLOAT16 => sys::RSMPI_UINT16_T,
            GPUWIRE_FLOAT32 => sys::RSMPI_FLOAT,
            GPUWIRE_FLOAT64 => sys::RSMPI_DOUBLE,
            GPUWIRE_COMPLEX64 => sys::RSMPI_FLOAT_COMPLEX,
            GPUWIRE_COMPLEX128 => sys::RSMPI_DOUBLE_COMPLEX,
        }
    }
}

/// The largest tag this MPI accepts (MPI_TAG_UB attribute of MPI_COMM_WORLD; at least 32767).
pub fn tag_ub() -> i32 {
    let mut val: *mut c_int = std::ptr::null_mut();
    let mut flag: c_int = 0;
    // SAFETY: MPI_TAG_UB is a predefined attribute of MPI_COMM_WORLD whose value is an int*.
    let rc = unsafe {
        sys::MPI_Comm_get_attr(
            comm_world(),
            gpuwire_shim_tag_ub_key(),
            (&mut val as *mut *mut c_int).cast(),
            &mut flag,
        )
    };
    if rc != 0 || flag == 0 || val.is_null() {
        return 32767;
    }
    // SAFETY: MPI returned a valid pointer to the attribute value.
    unsafe { *val }
}

/// An element count as MPI's `int`, or an error naming the call when it does not fit.
pub fn count_i32(n: usize, what: &str) -> Result<c_int> {
    c_int::try_from(n).map_err(|_| {
        Error::InvalidArgument(format!(
            "{what}: {n} elements exceed MPI's count limit of 2^31-1 elements per call for this operation"
        ))
    })
}

/// MPI_Wtime.
pub fn wtime() -> f64 {
    // SAFETY: no arguments.
    unsafe { sys::RSMPI_Wtime() }
}
