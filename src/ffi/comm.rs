//! Configuration and communicators.

use std::ffi::c_char;
use std::sync::Arc;

use crate::comm::{COMMS, Communicator};
use crate::config::{self, Config};
use crate::error::{Error, Result, gpuwire_status};
use crate::ffi::boundary::{self, call, non_null, write};
use crate::ffi::gpuwire_comm;
use crate::mpisys;
use crate::runtime;
use crate::types::{BackendKind, Staging};

/// Configuration of a communicator. Fill it with gpuwire_config_init (defaults, then the
/// GPUWIRE_* environment variables), then change fields as needed; fields you set win over the
/// environment. Plain data: copy it freely.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpuwire_config {
    /// Requested backend for device buffers (a gpuwire_backend; GPUWIRE_BACKEND).
    pub backend: i32,
    /// CUDA device ordinal of this rank, or -1 = node-local rank modulo the number of visible
    /// devices (GPUWIRE_DEVICE).
    pub device: i32,
    /// 1 = before every collective, agree count, datatype, op and root across ranks and return
    /// a mismatch error on every rank instead of hanging (GPUWIRE_CHECK). Costs one small
    /// MPI_Allreduce per collective (a second one for the counts of allgatherv and
    /// reduce_scatterv when they are given).
    pub check: i32,
    /// How the staged backend holds host copies (a gpuwire_staging; GPUWIRE_STAGING).
    pub staging: i32,
    /// Seconds that one call on the communicator may block (GPUWIRE_TIMEOUT; 0 = wait forever).
    /// With a timeout, no collective, point-to-point call or wait on the communicator blocks
    /// longer, on any backend, checking mode on or off: past it the call returns
    /// GPUWIRE_ERROR_TIMEOUT and the communicator is broken (later calls return
    /// GPUWIRE_ERROR_COMM_BROKEN); gpuwire_waitany over requests of several communicators may
    /// take the shortest of their timeouts plus the chosen request's own (see there).
    /// Communicator creation (comm_world, comm_create, split, dup,
    /// the first darray_create on a communicator) is not bounded, on any rank (MPI has no
    /// nonblocking MPI_Comm_split). 0, or at least 0.001 (1 ms) and at
    /// most 1e9 (about 31.7 years): other values (negative, NaN, infinite, shorter, longer) are
    /// GPUWIRE_ERROR_INVALID_ARGUMENT.
    pub timeout_seconds: f64,
    /// Staging chunk size in bytes (>= 4096; GPUWIRE_CHUNK_BYTES). Large messages move in chunks
    /// of this size so device copies overlap MPI transfers.
    pub chunk_bytes: i64,
    /// How point-to-point messages of device memory are matched (a gpuwire_p2p_matching;
    /// GPUWIRE_P2P_MATCHING=backend|mpi). GPUWIRE_P2P_MATCHING_MPI gives device receives on
    /// NCCL MPI's matching (tags, GPUWIRE_ANY_SOURCE, GPUWIRE_ANY_TAG, statuses, probe, shorter
    /// messages) by moving NCCL's device point-to-point through the staged MPI path; the other
    /// backends match as MPI either way. Must be the same on every rank.
    pub p2p_matching: i32,
}

impl gpuwire_config {
    fn from_core(c: &Config) -> gpuwire_config {
        gpuwire_config {
            backend: c.backend as i32,
            device: c.device,
            check: c.check as i32,
            staging: c.staging as i32,
            timeout_seconds: c.timeout.map(|t| t.as_secs_f64()).unwrap_or(0.0),
            chunk_bytes: c.chunk_bytes as i64,
            p2p_matching: c.p2p_matching as i32,
        }
    }

    fn to_core(&self) -> Result<Config> {
        use crate::error::Error;
        if self.device < -1 {
            return Err(Error::InvalidArgument(format!("config.device = {}: expected an ordinal >= 0, or -1", self.device)));
        }
        if self.check != 0 && self.check != 1 {
            return Err(Error::InvalidArgument(format!("config.check = {}: expected 0 or 1", self.check)));
        }
        if self.chunk_bytes < 4096 {
            return Err(Error::InvalidArgument(format!("config.chunk_bytes = {}: expected at least 4096", self.chunk_bytes)));
        }
        Ok(Config {
            backend: BackendKind::from_c(self.backend)?,
            device: self.device,
            check: self.check == 1,
            timeout: config::timeout_from_seconds(self.timeout_seconds, "config.timeout_seconds")?,
            staging: Staging::from_c(self.staging)?,
            chunk_bytes: self.chunk_bytes as usize,
            p2p_matching: crate::types::P2pMatching::from_c(self.p2p_matching)?,
        })
    }
}

fn resolve_config(cfg: *const gpuwire_config) -> Result<Config> {
    if cfg.is_null() {
        return Config::from_env();
    }
    // SAFETY: the caller promises a readable gpuwire_config.
    unsafe { &*cfg }.to_core()
}

/// Fills `*cfg` with the defaults (AUTO backend, device -1, checking off, pinned staging, no
/// timeout, 4 MiB chunks, the backend's point-to-point matching), overridden by the GPUWIRE_* environment variables. Local; works
/// before gpuwire_init.
///
/// Errors: GPUWIRE_ERROR_NULL_ARGUMENT; GPUWIRE_ERROR_INVALID_ARGUMENT when an environment
/// variable has an invalid value (the message names it; `*cfg` is then untouched).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_config_init(cfg: *mut gpuwire_config) -> gpuwire_status {
    call("gpuwire_config_init", || {
        non_null(cfg, "cfg")?;
        write(cfg, gpuwire_config::from_core(&Config::from_env()?));
        Ok(())
    })
}

fn register(c: Communicator, out: *mut gpuwire_comm) -> Result<()> {
    write(out, Communicator::new_handle(Arc::new(c), true)?);
    Ok(())
}

/// Creates a communicator over the MPI communicator `mpi_comm` (its Fortran handle: pass
/// `MPI_Comm_c2f(comm)` from C, `comm%MPI_VAL` or an `integer` handle from Fortran). gpuwire
/// duplicates it (MPI_Comm_dup) and sets MPI_ERRORS_RETURN on its duplicate only; the caller's
/// communicator is not changed and may be freed at any time. `cfg` may be NULL (=
/// gpuwire_config_init). Chooses the backend for device buffers (all ranks agree).
///
/// Collective over `mpi_comm`. Errors: GPUWIRE_ERROR_NULL_ARGUMENT (`out`);
/// GPUWIRE_ERROR_INVALID_ARGUMENT (MPI_COMM_NULL; an intercommunicator; an integer that names no communicator in use —
/// garbage, another object's handle, a freed communicator — on Open MPI and MPICH alike, never an
/// MPI abort; a bad config field or environment variable on
/// any rank, or configurations — backend, check, timeout, staging, chunk size, p2p_matching — that differ
/// between ranks: every rank gets the error, none hangs);
/// GPUWIRE_ERROR_BACKEND_UNAVAILABLE when the requested backend cannot be used on some rank
/// (the same error and message on every rank); GPUWIRE_ERROR_MPI;
/// GPUWIRE_ERROR_NOT_INITIALIZED.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_comm_create(mpi_comm: i32, cfg: *const gpuwire_config, out: *mut gpuwire_comm) -> gpuwire_status {
    call("gpuwire_comm_create", || {
        non_null(out, "out")?;
        runtime::check_ready()?;
        // A bad configuration is reported on every rank by the creation itself (no hang).
        register(Communicator::create(mpisys::comm_f2c(mpi_comm)?, resolve_config(cfg))?, out)?;
        Ok(())
    })
}

/// gpuwire_comm_create over MPI_COMM_WORLD. Collective over MPI_COMM_WORLD; errors as
/// gpuwire_comm_create.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_comm_world(cfg: *const gpuwire_config, out: *mut gpuwire_comm) -> gpuwire_status {
    call("gpuwire_comm_world", || {
        non_null(out, "out")?;
        runtime::check_ready()?;
        register(Communicator::create(mpisys::comm_world(), resolve_config(cfg))?, out)?;
        Ok(())
    })
}

/// Frees a communicator. Collective, as MPI_Comm_free: every rank of the communicator must call
/// it (the NCCL backend destroys its NCCL communicator, the IPC backend waits until every rank
/// reached its free before releasing the shared segment; a rank that never frees makes the
/// others wait, up to the communicator's timeout on IPC). Pending requests on it still complete;
/// operations still queued on its progress engine (a nonblocking collective, say) run first, so
/// the free waits for them, and a nonblocking collective then waits for the other ranks' matching
/// calls (as MPI_Comm_free may synchronize). Where something else still holds the communicator (a
/// distributed array created on it, a pending request, another thread's call), it is released
/// with the last of them (gpuwire_darray_free, the request's completion: local calls), which
/// then waits for no other rank: what needs the other ranks is settled by this free (on IPC the
/// shared segment is then left to MPI_Finalize). The handle, and every copy of it, becomes invalid.
/// A handle that gpuwire_darray_comm made is released by its free alone (local); the
/// communicator's own handle's free is the collective one. A communicator broken by a timeout is
/// freed locally; its MPI communicators are left to MPI_Finalize (MPI may still progress the
/// operations the timeout abandoned).
///
/// Errors: GPUWIRE_ERROR_INVALID_HANDLE (NULL, already freed, or not a communicator; nothing
/// is touched), GPUWIRE_ERROR_INVALID_ARGUMENT (another thread is inside a collective on it;
/// nothing is touched), GPUWIRE_ERROR_NOT_INITIALIZED, GPUWIRE_ERROR_ALREADY_FINALIZED (after
/// gpuwire_finalize; MPI is not called).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_comm_free(comm: gpuwire_comm) -> gpuwire_status {
    call("gpuwire_comm_free", || {
        runtime::check_ready()?;
        if let Ok(c) = boundary::comm(comm) {
            // A handle of gpuwire_darray_comm's: only it is released, a local call, as documented
            // there; the free of the communicator's own handle is the collective one. (Every free
            // was taken as the collective one, and on IPC the first of two, the communicator held
            // by the other, left the shared segment to MPI_Finalize: a leak per communicator; a
            // helper's hunt. Deciding by which free is a rank's last made a local call decide
            // which free is collective: ranks could disagree, and IPC's teardown then waited.)
            if !c.is_primary(comm) {
                return COMMS.remove(comm).map(drop);
            }
            // Operations still queued on its progress engine run first (the requests keep the
            // communicator alive; a collective of the engine is not another thread's).
            c.engine().drain()?;
            // Not while another thread is inside a collective on it (a broken one may be freed).
            let call = c.enter("gpuwire_comm_free", true);
            if let Err(e @ Error::InvalidArgument(_)) = call {
                return Err(e);
            }
            drop(COMMS.remove(comm)?);
            drop(call);
            c.freed();
            // The last reference, unless a call of another thread still holds one: freed here.
            drop(c);
            return Ok(());
        }
        drop(COMMS.remove(comm)?);
        Ok(())
    })
}

/// Aborts the communicator, as ncclCommAbort. On this rank every later operation on `comm`
/// fails at once with GPUWIRE_ERROR_COMM_BROKEN (the message says it was aborted, and on which
/// rank), and so do the pending ones that gpuwire waits for in a loop of its own, in any thread:
/// gpuwire_wait, gpuwire_test and the other completions of point-to-point requests
/// (gpuwire_isend, gpuwire_irecv), the waits of IPC device operations, and, on a communicator
/// with a timeout, every call (each MPI step is then nonblocking and tested), all within
/// milliseconds, not at the timeout. Without a timeout, a call that is inside a blocking
/// MPI call when the abort comes is not woken: a blocking gpuwire_recv or gpuwire_recv_status
/// waiting for its message, gpuwire_probe, a gpuwire_send or gpuwire_sendrecv that MPI does not
/// complete at once (a large message, not buffered), a blocking collective on the MPI paths,
/// and gpuwire_wait on a nonblocking collective (the engine runs it as the blocking form): each
/// returns only when MPI returns, if ever. Set a timeout on a communicator that another thread
/// may need to abort. Aborted requests are abandoned as at a timeout (their buffers kept, since a peer or MPI may still use them). What reaches the
/// other ranks depends on the path: NCCL (device memory) aborts the NCCL communicator
/// (ncclCommAbort: this rank's kernels end; peers blocked in a collective with this rank end at
/// their own timeout or abort; where an open group of any thread, this one's too, has issued
/// operations on it, NCCL's communicator is aborted at that group's gpuwire_group_end, after
/// its launch, since the abort frees what the launch uses (that group's operations on it fail
/// with GPUWIRE_ERROR_COMM_BROKEN, its others keep their own outcome); another thread's NCCL
/// call on it is waited for); IPC sets the shared segment's broken flag, so a peer waiting in
/// an IPC device operation on the communicator fails with GPUWIRE_ERROR_COMM_BROKEN within a
/// second; on the MPI paths (HOST, MPI_STAGED, MPI_CUDA_AWARE) nothing is aborted in MPI: a
/// peer blocked in a gpuwire wait ends at its communicator's timeout (a peer blocked in a plain
/// MPI call, or in a gpuwire call on a communicator without a timeout, cannot be woken by
/// MPI). Free the communicator afterwards with gpuwire_comm_free. Not collective; thread-safe
/// (another thread's gpuwire call on `comm` may be the one it ends). A communicator broken
/// earlier (a timeout) is aborted as well, keeping its first reason: on NCCL this ends this
/// rank's kernels still waiting for a peer, so call it after a TIMEOUT before reusing the
/// stream.
///
/// Errors: GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_comm_abort(comm: gpuwire_comm) -> gpuwire_status {
    call("gpuwire_comm_abort", || {
        runtime::check_ready()?;
        boundary::comm(comm)?.abort()
    })
}

/// Splits a communicator as MPI_Comm_split: ranks with the same `color` (>= 0) form a new
/// communicator, ordered by `key` then by old rank; it inherits `comm`'s configuration. Ranks
/// passing GPUWIRE_UNDEFINED (or the MPI_UNDEFINED of the MPI gpuwire was built with) get
/// GPUWIRE_COMM_NULL in `*out`.
///
/// Collective over `comm`. Errors: GPUWIRE_ERROR_NULL_ARGUMENT (`out` NULL on any rank: the
/// ranks agree on it, so it is the error of every rank), GPUWIRE_ERROR_INVALID_HANDLE,
/// GPUWIRE_ERROR_INVALID_ARGUMENT (a negative color other than those two),
/// GPUWIRE_ERROR_MPI, and the errors of gpuwire_comm_create.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_comm_split(comm: gpuwire_comm, color: i32, key: i32, out: *mut gpuwire_comm) -> gpuwire_status {
    call("gpuwire_comm_split", || {
        let c = boundary::comm(comm)?;
        // A NULL `out` fails on every rank (the ranks agree on it: none waits in MPI).
        match c.split(color, key, non_null(out, "out"))? {
            Some(n) => register(n, out)?,
            None => write(out, 0),
        }
        Ok(())
    })
}

/// Duplicates a communicator (same ranks and configuration, separate message space), as
/// MPI_Comm_dup. Collective over `comm`. Errors as gpuwire_comm_split.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_comm_dup(comm: gpuwire_comm, out: *mut gpuwire_comm) -> gpuwire_status {
    call("gpuwire_comm_dup", || {
        let c = boundary::comm(comm)?;
        // A NULL `out` fails on every rank (the ranks agree on it: none waits in MPI).
        register(c.dup(non_null(out, "out"))?, out)?;
        Ok(())
    })
}

/// This process's rank in the communicator (as MPI_Comm_rank).
///
/// Local. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_comm_rank(comm: gpuwire_comm, rank: *mut i32) -> gpuwire_status {
    call("gpuwire_comm_rank", || {
        non_null(rank, "rank")?;
        let c = boundary::comm(comm)?;
        write(rank, c.rank());
        Ok(())
    })
}
/// Number of ranks (as MPI_Comm_size).
///
/// Local. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_comm_size(comm: gpuwire_comm, size: *mut i32) -> gpuwire_status {
    call("gpuwire_comm_size", || {
        non_null(size, "size")?;
        let c = boundary::comm(comm)?;
        write(size, c.size());
        Ok(())
    })
}
/// This process's rank among the communicator's ranks on the same node
/// (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED).
///
/// Local. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_comm_local_rank(comm: gpuwire_comm, local_rank: *mut i32) -> gpuwire_status {
    call("gpuwire_comm_local_rank", || {
        non_null(local_rank, "local_rank")?;
        let c = boundary::comm(comm)?;
        write(local_rank, c.local_rank());
        Ok(())
    })
}
/// Number of the communicator's ranks on this node (MPI_COMM_TYPE_SHARED).
///
/// Local. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_comm_local_size(comm: gpuwire_comm, local_size: *mut i32) -> gpuwire_status {
    call("gpuwire_comm_local_size", || {
        non_null(local_size, "local_size")?;
        let c = boundary::comm(comm)?;
        write(local_size, c.local_size());
        Ok(())
    })
}
/// The backend this communicator uses for device buffers (a gpuwire_backend; host buffers
/// always go through plain MPI). Never GPUWIRE_BACKEND_AUTO.
///
/// Local. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_comm_backend(comm: gpuwire_comm, backend: *mut i32) -> gpuwire_status {
    call("gpuwire_comm_backend", || {
        non_null(backend, "backend")?;
        let c = boundary::comm(comm)?;
        write(backend, c.backend() as i32);
        Ok(())
    })
}
/// The CUDA device ordinal this rank uses, or -1 when the communicator has none.
///
/// Local. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_comm_device(comm: gpuwire_comm, device: *mut i32) -> gpuwire_status {
    call("gpuwire_comm_device", || {
        non_null(device, "device")?;
        let c = boundary::comm(comm)?;
        write(device, c.device());
        Ok(())
    })
}
/// The Fortran handle (MPI_Fint) of gpuwire's own duplicate of the MPI communicator, for
/// MPI calls that must not interfere with the caller's traffic. Owned by gpuwire: do not
/// free it.
///
/// Local. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_comm_mpi(comm: gpuwire_comm, mpi_comm: *mut i32) -> gpuwire_status {
    call("gpuwire_comm_mpi", || {
        non_null(mpi_comm, "mpi_comm")?;
        let c = boundary::comm(comm)?;
        write(mpi_comm, mpisys::comm_c2f(c.raw()));
        Ok(())
    })
}

/// Writes a one-line, human-readable description of the communicator into `buf` (`buflen`
/// bytes, truncated, always NUL-terminated; 4096 bytes hold it): the backend chosen for device
/// buffers and why, the device, ranks (and node-local ranks), this rank's host name and the
/// number of nodes the ranks are on, the MPI library and version, the MPI thread level,
/// checking mode and timeout, how operations progress, and last the routing table ("routing:
/// ..."): which operations the backend does natively, which go to its fallback and which to
/// plain MPI.
///
/// Local. Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_ARGUMENT (`buflen` 0),
/// GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_comm_describe(comm: gpuwire_comm, buf: *mut c_char, buflen: usize) -> gpuwire_status {
    call("gpuwire_comm_describe", || {
        non_null(buf, "buf")?;
        if buflen == 0 {
            return Err(crate::error::Error::InvalidArgument("buflen is 0".into()));
        }
        let c = boundary::comm(comm)?;
        boundary::copy_str(&c.describe(), buf, buflen);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_roundtrip_and_validation() {
        let core = Config::default();
        let c = gpuwire_config::from_core(&core);
        assert_eq!(c.to_core().unwrap(), core);
        let mut bad = c;
        bad.backend = 42;
        assert!(bad.to_core().is_err());
        let mut bad = c;
        bad.timeout_seconds = f64::NAN;
        assert!(bad.to_core().is_err());
        // Through the exported function: an argument error with a message, not a caught panic.
        for t in [1e300, 1.8447e19, 1e-9] {
            let mut bad = c;
            bad.timeout_seconds = t;
            assert_eq!(bad.to_core().unwrap_err().status(), crate::error::Status::GPUWIRE_ERROR_INVALID_ARGUMENT, "{t}");
        }
        let mut bad = c;
        bad.check = 2;
        assert!(bad.to_core().is_err());
    }
}
