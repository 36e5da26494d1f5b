//! gpuwire: communicators and distributed GPU buffers for C, C++ and Fortran MPI programs.
//!
//! One API moves host or device memory between MPI ranks (point-to-point and collectives) the
//! fastest way the machine allows: NCCL where every rank has its own GPU, CUDA-aware MPI where
//! the MPI supports it, staging through pinned host memory where it does not, and plain MPI for
//! host memory. The backend is chosen automatically, explained by `gpuwire_comm_describe`, and
//! can be forced by configuration or environment.
//!
//! Module tree:
//! - [`error`]: the one error enum and its C status codes
//! - [`types`]: datatypes, reduction ops, memory spaces, backends (the C enums)
//! - [`config`]: communicator configuration and the GPUWIRE_* environment variables
//! - [`runtime`]: init/finalize, who owns MPI, gpuwire's own MPI operations
//! - [`handles`]: generation-checked handle registries
//! - `hot`: the words every call reads, of the process and of the thread, packed in a cache line each
//! - [`pin`]: borrowed lookups of a call's communicator and buffers (no reference counted), and when a freed one is dropped
//! - [`comm`], [`buffer`], [`request`]: the objects behind the handles
//! - [`darray`]: distributed arrays (a global array split over the ranks, host or device)
//! - [`ops`]: validation, checking-mode agreement and dispatch of every operation
//! - [`lean`]: the short path of a blocking allreduce (host memory or NCCL) and of point-to-point calls (host; blocking ones on NCCL), where it is the same
//! - [`backend`]: one module per data path, and the choice among them
//! - [`device`]: CUDA through cudarc (dynamically loaded)
//! - [`reduce`]: host-side elementwise reductions
//! - [`mpisys`]: checked helpers over the raw MPI API
//! - [`ffi`]: the C ABI (the only `extern "C"` code)

/// Whether GPUWIRE_DEBUG=1: gpuwire then traces communicator setup and backend decisions to
/// stderr, one line each, prefixed "gpuwire[pid]".
pub fn debug_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GPUWIRE_DEBUG").ok().and_then(|v| config::parse_bool(&v)).unwrap_or(false))
}

/// Traces one line to stderr when GPUWIRE_DEBUG=1.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)*) => {
        if $crate::debug_enabled() {
            // One write per line, so that the lines of different ranks do not interleave.
            let line = format!("gpuwire[{}]: {}\n", std::process::id(), format_args!($($arg)*));
            let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
        }
    };
}

pub mod backend;
pub mod buffer;
pub mod comm;
pub mod config;
pub mod create;
pub mod darray;
pub mod device;
pub mod engine;
pub mod error;
pub mod group;
pub mod ffi;
pub mod handles;
pub(crate) mod hot;
pub mod lean;
pub mod mpisys;
pub mod op;
pub mod pin;
pub mod ops;
pub mod progress;
pub mod reduce;
pub mod request;
pub mod runtime;
pub mod types;
pub mod view;

pub use error::{Error, Result, Status};
