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
    fn gpuwire_shim_comm_f2c(f: c_int, out: *mut MPI_Comm) -> c_int;
    fn gpuwire_shim_op_minloc() -> sys::MPI_Op;
    fn gpuwire_shim_op_maxloc() -> sys::MPI_Op;
    fn gpuwire_shim_float_int() -> MPI_Datatype;
    fn gpuwire_shim_double_int() -> MPI_Datatype;
    fn gpuwire_shim_2int() -> MPI_Datatype;
}

/// MPI_IN_PLACE of the MPI we are linked against.
pub fn in_place() -> *mut c_void {
    // SAFETY: returns a constant.
    unsafe { gpuwire_shim_in_place() }
}

/// Turns an MPI return code into a `Result`, with MPI's own error string.
#[inline]
pub fn check(rc: c_int, what: &str) -> Result<()> {
    if rc == 0 {
        return Ok(());
    }
    Err(failed(rc, what))
}

/// The error of a failed MPI call (`check`).
#[cold]
#[inline(never)]
fn failed(rc: c_int, what: &str) -> Error {
    Error::Mpi(format!("{what} failed: {} (MPI error code {rc})", error_string(rc)))
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

/// `read()` kept in `hot::PROCESS.mpi_constants[i]` once read (`hot::read_once`): every
/// point-to-point call compares its ranks and tags with these, which then lie in the line of the
/// process's other per-call words (`crate::hot`) instead of the MPI shim's data.
#[inline]
fn constant(i: usize, read: fn() -> c_int) -> c_int {
    crate::hot::read_once(&crate::hot::PROCESS.mpi_constants[i], read)
}

#[inline]
pub fn proc_null() -> c_int {
    // SAFETY: as above.
    constant(0, || unsafe { sys::RSMPI_PROC_NULL })
}

#[inline]
pub fn any_source() -> c_int {
    // SAFETY: as above.
    constant(1, || unsafe { sys::RSMPI_ANY_SOURCE })
}

#[inline]
pub fn any_tag() -> c_int {
    // SAFETY: as above.
    constant(2, || unsafe { sys::RSMPI_ANY_TAG })
}

pub fn undefined() -> c_int {
    // SAFETY: as above.
    unsafe { sys::RSMPI_UNDEFINED }
}

pub fn status_ignore() -> *mut sys::MPI_Status {
    // SAFETY: as above.
    unsafe { sys::RSMPI_STATUS_IGNORE }
}

/// MPI_Comm_f2c of a caller's Fortran handle; an error (never an MPI abort) for one that names
/// no communicator in use (src/shim.c says how each MPI is checked).
pub fn comm_f2c(f: i32) -> Result<MPI_Comm> {
    let mut c = comm_null();
    // SAFETY: the shim accepts any integer and writes a handle only when MPI may be given it.
    match unsafe { gpuwire_shim_comm_f2c(f, &mut c) } {
        0 => Ok(c),
        1 => Err(Error::InvalidArgument(format!("the Fortran handle {f} is not a communicator of this MPI (pass MPI_Comm_c2f(comm) from C, comm%MPI_VAL from Fortran)"))),
        _ => Err(Error::InvalidArgument(format!("the Fortran handle {f} names no communicator in use (freed, or never created)"))),
    }
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
            GPUWIRE_FLOAT32_INT32 => gpuwire_shim_float_int(),
            GPUWIRE_INT32_INT32 => gpuwire_shim_2int(),
            // 16 bytes moved as they are, the padding after the index too (MPI_DOUBLE_INT has
            // extent 16 but size 12: MPI would not carry the padding, NCCL and the copies of the
            // device paths do), so every path moves the same bytes. Reduced as MPI_DOUBLE_INT
            // (`reduce_datatype`).
            GPUWIRE_FLOAT64_INT32 => sys::RSMPI_DOUBLE_COMPLEX,
        }
    }
}

/// The MPI datatype that MPI reductions take for `d`: `datatype(d)`, but MPI_DOUBLE_INT for
/// GPUWIRE_FLOAT64_INT32 (MPI_MINLOC/MPI_MAXLOC are defined on it).
pub fn reduce_datatype(d: Dtype) -> MPI_Datatype {
    if d == Dtype::GPUWIRE_FLOAT64_INT32 {
        // SAFETY: the shim returns the MPI's constant.
        return unsafe { gpuwire_shim_double_int() };
    }
    datatype(d)
}

/// MPI_MINLOC (`max` false) or MPI_MAXLOC.
pub fn loc_op(max: bool) -> sys::MPI_Op {
    // SAFETY: the shim returns the MPI's constants.
    unsafe { if max { gpuwire_shim_op_maxloc() } else { gpuwire_shim_op_minloc() } }
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

/// `count` elements of a datatype as MPI takes them: the count itself and the predefined
/// datatype when the count fits MPI's `int`, else count 1 of a committed derived datatype that
/// holds all `count` elements (blocks of 2^30 elements and a rest; extent `count` elements, so
/// the blocks of gather-like collectives sit where they would with the plain count). The derived
/// type is freed on drop (MPI keeps it for operations still pending on it).
pub struct Count {
    pub n: c_int,
    pub dt: MPI_Datatype,
    owned: bool,
}

// SAFETY: an MPI datatype handle; MPI_THREAD_MULTIPLE allows its use from any thread.
unsafe impl Send for Count {}

/// Elements per block of a large-count derived datatype.
const BIG_BLOCK: usize = 1 << 30;

impl Count {
    #[inline]
    pub fn new(d: Dtype, count: usize) -> Result<Count> {
        Self::of(datatype(d), d.size(), count)
    }

    /// As `new`, for `count` elements of `size` bytes of the predefined datatype `base`.
    #[inline]
    pub fn of(base: MPI_Datatype, size: usize, count: usize) -> Result<Count> {
        if let Ok(n) = c_int::try_from(count) {
            return Ok(Count { n, dt: base, owned: false });
        }
        Self::large(base, size, count)
    }

    /// `of` past MPI's int count: one element of a derived datatype.
    #[cold]
    #[inline(never)]
    fn large(base: MPI_Datatype, size: usize, count: usize) -> Result<Count> {
        let bytes = count.checked_mul(size).and_then(|b| sys::MPI_Aint::try_from(b).ok()).ok_or_else(|| {
            Error::InvalidArgument(format!("{count} elements of {size} bytes exceed the address space"))
        })?;
        let (q, r) = (count / BIG_BLOCK, count % BIG_BLOCK);
        let q = count_i32(q, "large-count datatype")?;
        let mut block = base;
        let mut blocks = base;
        let mut rest = base;
        let mut joined = base;
        let mut out = base;
        // SAFETY: valid predefined/derived datatypes and out-pointers; every intermediate type is
        // freed here (a derived type keeps what it is built from alive), the result on drop.
        unsafe {
            check(sys::MPI_Type_contiguous(BIG_BLOCK as c_int, base, &mut block), "MPI_Type_contiguous")?;
            let rc = sys::MPI_Type_contiguous(q, block, &mut blocks);
            sys::MPI_Type_free(&mut block);
            check(rc, "MPI_Type_contiguous")?;
            if r == 0 {
                joined = blocks;
            } else {
                let rc = sys::MPI_Type_contiguous(r as c_int, base, &mut rest);
                if rc != 0 {
                    sys::MPI_Type_free(&mut blocks);
                    return Err(check(rc, "MPI_Type_contiguous").unwrap_err());
                }
                let lens: [c_int; 2] = [1, 1];
                let displs: [sys::MPI_Aint; 2] = [0, bytes - (r * size) as sys::MPI_Aint];
                let types = [blocks, rest];
                let rc = sys::MPI_Type_create_struct(2, lens.as_ptr(), displs.as_ptr(), types.as_ptr(), &mut joined);
                sys::MPI_Type_free(&mut blocks);
                sys::MPI_Type_free(&mut rest);
                check(rc, "MPI_Type_create_struct")?;
            }
            let rc = sys::MPI_Type_create_resized(joined, 0, bytes, &mut out);
            sys::MPI_Type_free(&mut joined);
            check(rc, "MPI_Type_create_resized")?;
            if let Err(e) = check(sys::MPI_Type_commit(&mut out), "MPI_Type_commit") {
                sys::MPI_Type_free(&mut out);
                return Err(e);
            }
        }
        Ok(Count { n: 1, dt: out, owned: true })
    }

    /// `count` elements placed `displ` elements into the buffer, as one element of a derived
    /// datatype (for calls whose displacements are MPI ints, such as MPI_Alltoallw).
    pub fn at(d: Dtype, count: usize, displ: usize) -> Result<Count> {
        let inner = Count::new(d, count)?;
        let off = displ.checked_mul(d.size()).and_then(|b| sys::MPI_Aint::try_from(b).ok()).ok_or_else(|| {
            Error::InvalidArgument(format!("displacement of {displ} elements exceeds the address space"))
        })?;
        let mut out = inner.dt;
        let lens: [c_int; 1] = [inner.n];
        let displs: [sys::MPI_Aint; 1] = [off];
        let types = [inner.dt];
        // SAFETY: as in `of`; `inner` is freed when it drops, the new type keeps what it needs.
        unsafe {
            check(sys::MPI_Type_create_struct(1, lens.as_ptr(), displs.as_ptr(), types.as_ptr(), &mut out), "MPI_Type_create_struct")?;
            if let Err(e) = check(sys::MPI_Type_commit(&mut out), "MPI_Type_commit") {
                sys::MPI_Type_free(&mut out);
                return Err(e);
            }
        }
        Ok(Count { n: 1, dt: out, owned: true })
    }
}

impl Drop for Count {
    fn drop(&mut self) {
        if self.owned && !finalized() {
            // SAFETY: a derived datatype created by `of` or `at` and freed only here.
            unsafe { sys::MPI_Type_free(&mut self.dt) };
        }
    }
}

/// MPI_Wtime.
pub fn wtime() -> f64 {
    // SAFETY: no arguments.
    unsafe { sys::RSMPI_Wtime() }
}

/// Whether this MPI accepts CUDA device pointers: `Some(yes)` when known, `None` when
/// unknown, with where the answer came from. `GPUWIRE_CUDA_AWARE=0/1` overrides the library's
/// own query (`MPIX_Query_cuda_support` of Open MPI, `MPIX_GPU_query_support` of MPICH, looked up
/// at run time since not every MPI has them).
pub fn cuda_support() -> Result<(Option<bool>, String)> {
    match std::env::var("GPUWIRE_CUDA_AWARE").ok().as_deref().map(str::trim) {
        Some("1") => return Ok((Some(true), "GPUWIRE_CUDA_AWARE=1".into())),
        Some("0") => return Ok((Some(false), "GPUWIRE_CUDA_AWARE=0".into())),
        None | Some("") => {}
        Some(v) => {
            let shown: String = v.chars().take(64).collect();
            return Err(Error::InvalidArgument(format!("environment variable GPUWIRE_CUDA_AWARE={shown:?} is not valid: expected 0 or 1")));
        }
    }
    type QueryCuda = unsafe extern "C" fn() -> c_int;
    type QueryGpu = unsafe extern "C" fn(c_int, *mut c_int) -> c_int;
    if let Some(f) = mpi_symbol(c"MPIX_Query_cuda_support") {
        // SAFETY: Open MPI's int MPIX_Query_cuda_support(void).
        let v = unsafe { std::mem::transmute::<*mut c_void, QueryCuda>(f)() };
        return Ok((Some(v == 1), format!("MPIX_Query_cuda_support() = {v}")));
    }
    if let Some(f) = mpi_symbol(c"MPIX_GPU_query_support") {
        let mut v: c_int = 0;
        // SAFETY: MPICH's int MPIX_GPU_query_support(int gpu_type, int *is_supported);
        // MPIX_GPU_SUPPORT_CUDA is 0.
        let rc = unsafe { std::mem::transmute::<*mut c_void, QueryGpu>(f)(0, &mut v) };
        if rc == 0 {
            return Ok((Some(v != 0), format!("MPIX_GPU_query_support(CUDA) = {v}")));
        }
    }
    Ok((None, "the MPI offers no CUDA-support query and GPUWIRE_CUDA_AWARE is not set".into()))
}

/// Looks a symbol up in the loaded MPI library (found through MPI_Init's address, so it works
/// also when libmpi was loaded with RTLD_LOCAL, as by Python's ctypes).
fn mpi_symbol(name: &std::ffi::CStr) -> Option<*mut c_void> {
    // SAFETY: dladdr/dlopen/dlsym with valid arguments; RTLD_NOLOAD never loads anything new.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let anchor = sys::MPI_Init as *const c_void;
        if libc::dladdr(anchor, &mut info) != 0 && !info.dli_fname.is_null() {
            let h = libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD);
            if !h.is_null() {
                let f = libc::dlsym(h, name.as_ptr());
                libc::dlclose(h);
                if !f.is_null() {
                    return Some(f);
                }
            }
        }
        let f = libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr());
        if f.is_null() { None } else { Some(f) }
    }
}

/// Whether MPI is finalized (MPI_Finalized may be called at any time): what owns an MPI handle
/// checks this before freeing it in `Drop`.
pub fn finalized() -> bool {
    let mut finalized: c_int = 0;
    // SAFETY: may be called at any time.
    unsafe { sys::MPI_Finalized(&mut finalized) };
    finalized != 0
}

/// Whether this MPI raises the error of a nonblocking collective's request on MPI_COMM_WORLD's
/// (Open MPI 4: `ompi_errhandler_request_invoke` sends a collective request to its default
/// case) or MPI_COMM_SELF's error handler (Open MPI 5, open-mpi/ompi#10460), not on the request's
/// communicator: Open MPI.
fn collective_errors_elsewhere() -> bool {
    static OPEN_MPI: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OPEN_MPI.get_or_init(|| {
        let mut buf = vec![0u8; 8192];
        let mut len: c_int = 0;
        // SAFETY: MPI_MAX_LIBRARY_VERSION_STRING is 256 (Open MPI) or 8192 (MPICH); callable
        // at any time.
        let rc = unsafe { sys::MPI_Get_library_version(buf.as_mut_ptr().cast(), &mut len) };
        rc == 0 && buf.starts_with(b"Open MPI")
    })
}

/// Serialises the swaps of MPI_COMM_WORLD's and MPI_COMM_SELF's error handlers by
/// [`test_collective`] (two interleaved swaps could leave MPI_ERRORS_RETURN behind).
static HANDLER_SWAP: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// MPI_Test of a nonblocking collective's request on one of gpuwire's communicators (which
/// return errors: MPI_ERRORS_RETURN): its return code and `flag` as MPI_Test's (no status).
///
/// Open MPI invokes the error of a collective request (a message truncated because ranks passed
/// different counts, a peer gone) on MPI_COMM_WORLD's or MPI_COMM_SELF's error handler, fatal by
/// default ([`collective_errors_elsewhere`]): MPI_Test would kill the whole job where the
/// blocking form of the same call returns the error. There the request is polled with
/// MPI_Request_get_status, which invokes no handler, and completed by MPI_Test with both
/// handlers set to MPI_ERRORS_RETURN for that one call (the program's handlers are restored at
/// once; another thread's error on those communicators in that instant returns instead).
pub fn test_collective(req: &mut MPI_Request, flag: &mut c_int) -> c_int {
    let status = status_ignore();
    // SAFETY: an active request of the caller's (or MPI_REQUEST_NULL); plain out-parameters.
    unsafe {
        if !collective_errors_elsewhere() {
            return sys::MPI_Test(req, flag, status);
        }
        let rc = sys::MPI_Request_get_status(*req, flag, status_ignore());
        if rc != 0 || *flag == 0 {
            return rc;
        }
        let _swap = HANDLER_SWAP.lock().unwrap_or_else(|p| p.into_inner());
        let comms = [sys::RSMPI_COMM_WORLD, sys::RSMPI_COMM_SELF];
        let mut saved: [sys::MPI_Errhandler; 2] = [sys::RSMPI_ERRORS_RETURN; 2];
        for (c, h) in comms.iter().zip(saved.iter_mut()) {
            sys::MPI_Comm_get_errhandler(*c, h);
            sys::MPI_Comm_set_errhandler(*c, sys::RSMPI_ERRORS_RETURN);
        }
        let rc = sys::MPI_Test(req, flag, status);
        for (c, h) in comms.iter().zip(saved.iter_mut()) {
            sys::MPI_Comm_set_errhandler(*c, *h);
            sys::MPI_Errhandler_free(h);
        }
        rc
    }
}
