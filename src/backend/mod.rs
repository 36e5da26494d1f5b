//! The data paths, and the one place that chooses among them.
//!
//! Host-accessible buffers (HOST, PINNED) always go through plain MPI ([`host`]). Device buffers
//! go through the communicator's chosen backend. The choice is made once, collectively, when the
//! communicator is created, and recorded with its reason for `gpuwire_comm_describe`.

pub mod devstate;
pub mod host;
pub mod ipc;
pub mod mpi_cuda_aware;
pub mod mpi_staged;
pub mod nccl;
pub mod ordered;
pub mod p2p;
pub mod path;
pub mod ring;
pub mod topology;

pub use path::{Blocks, Input, Path};

use std::sync::Mutex;


use crate::buffer::Buffer;
use crate::comm::{Choice, Communicator};
use crate::device;
use crate::mpisys;
use crate::error::{Error, Result};
use crate::types::BackendKind;

/// The backends' progress sources, in the order every wait runs them (`crate::progress`).
static PROGRESS: [&crate::progress::Source; 2] = [&p2p::PROGRESS, &ipc::PROGRESS];

/// Hands the backends' progress sources to `crate::progress` (at every communicator creation;
/// the first counts).
pub fn register_progress() {
    crate::progress::register(&PROGRESS);
}

/// gpuwire_comm_abort's part in the backends (`Communicator::abort`): NCCL aborts its
/// communicator; the MPI paths have nothing to abort (the communicator is broken: gpuwire's
/// waits end).
pub fn abort(c: &Communicator, why: String) {
    match c.backend() {
        BackendKind::GPUWIRE_BACKEND_NCCL => nccl::abort_comm(c, why),
        BackendKind::GPUWIRE_BACKEND_IPC => ipc::abort(c, why),
        _ => c.mark_broken(why),
    }
}

/// At communicator creation (local; the caller agrees the outcome across ranks): picks the
/// backend for device buffers and this rank's device.
pub fn choose(c: &Communicator) -> Result<Choice> {
    let cfg = c.config();
    let requested = cfg.backend;
    if requested == BackendKind::GPUWIRE_BACKEND_HOST {
        return Ok(Choice { kind: BackendKind::GPUWIRE_BACKEND_HOST, reason: "requested; device buffers are refused".into(), device: -1 });
    }
    let cuda = device::cuda_with_devices();
    // A bad device is reported after the collective exchanges below, which every rank must
    // make whatever its own state (the caller agrees the outcome).
    let mut bad_device = None;
    let device = match &cuda {
        Ok(cuda) if cfg.device >= cuda.device_count => {
            bad_device = Some(Error::InvalidArgument(format!(
                "device {} was requested but this process sees {} CUDA device(s)",
                cfg.device, cuda.device_count
            )));
            None
        }
        Ok(_) if cfg.device >= 0 => Some(cfg.device),
        Ok(cuda) => Some(c.local_rank() % cuda.device_count),
        Err(_) => None,
    };
    // Who shares a GPU, and whether IPC can be used: collective, so every rank asks, whatever
    // its own state (also without CUDA), whenever the (agreed) configuration may need the answer.
    let shared = if matches!(requested, BackendKind::GPUWIRE_BACKEND_AUTO | BackendKind::GPUWIRE_BACKEND_NCCL) {
        topology::shared_gpus(c, device)?
    } else {
        None
    };
    let ipc_ok = if matches!(requested, BackendKind::GPUWIRE_BACKEND_AUTO | BackendKind::GPUWIRE_BACKEND_IPC) {
        ipc::eligible(c, device)?
    } else {
        Err("not considered".into())
    };
    if let Some(e) = bad_device {
        return Err(e);
    }
    let cuda = match cuda {
        Ok(cuda) => cuda,
        Err(e) if requested == BackendKind::GPUWIRE_BACKEND_AUTO => {
            return Ok(Choice { kind: BackendKind::GPUWIRE_BACKEND_HOST, reason: format!("auto: {}", strip_kind(&e)), device: -1 });
        }
        Err(e) => {
            return Err(Error::BackendUnavailable(format!("{} was requested but cannot be used: {}", requested.name(), strip_kind(&e))));
        }
    };
    let _ = cuda;
    let device = device.unwrap_or(0);
    let nccl_ok = match (&shared, nccl::available()) {
        (Some(s), _) => Err(s.clone()),
        (None, Err(e)) => Err(e),
        (None, Ok(v)) => Ok(v),
    };
    let (aware, source) = mpisys::cuda_support()?;
    let (kind, reason) = match requested {
        BackendKind::GPUWIRE_BACKEND_NCCL => match nccl_ok {
            Ok(v) => (requested, format!("requested; NCCL {v}")),
            Err(e) => return Err(Error::BackendUnavailable(format!("NCCL was requested but cannot be used: {e}"))),
        },
        BackendKind::GPUWIRE_BACKEND_AUTO => match (nccl_ok, ipc_ok) {
            (Ok(v), _) => (BackendKind::GPUWIRE_BACKEND_NCCL, format!("auto: every rank has its own GPU and NCCL {v} loads")),
            (Err(why), Ok(ipc)) => (BackendKind::GPUWIRE_BACKEND_IPC, format!("auto: NCCL not used ({why}); {ipc}: CUDA IPC")),
            (Err(why), Err(no_ipc)) if aware == Some(true) => (
                BackendKind::GPUWIRE_BACKEND_MPI_CUDA_AWARE,
                format!("auto: NCCL not used ({why}); IPC not used ({no_ipc}); the MPI is CUDA-aware ({source})"),
            ),
            (Err(why), Err(no_ipc)) => (
                BackendKind::GPUWIRE_BACKEND_MPI_STAGED,
                format!("auto: NCCL not used ({why}); IPC not used ({no_ipc}); the MPI is not known to be CUDA-aware ({source}), so device data is staged through host memory"),
            ),
        },
        BackendKind::GPUWIRE_BACKEND_IPC => match ipc_ok {
            Ok(v) => (requested, format!("requested; {v}")),
            Err(e) => return Err(Error::BackendUnavailable(format!("IPC was requested but cannot be used: {e}"))),
        },
        BackendKind::GPUWIRE_BACKEND_MPI_STAGED => (requested, "requested".into()),
        BackendKind::GPUWIRE_BACKEND_MPI_CUDA_AWARE if aware == Some(true) => (requested, format!("requested; {source}")),
        BackendKind::GPUWIRE_BACKEND_MPI_CUDA_AWARE => {
            return Err(Error::BackendUnavailable(format!(
                "MPI_CUDA_AWARE was requested but the MPI is not known to be CUDA-aware ({source}); gpuwire never gives a device pointer to such an MPI (use MPI_STAGED, or set GPUWIRE_CUDA_AWARE=1 if you know better)"
            )));
        }
        BackendKind::GPUWIRE_BACKEND_HOST => unreachable!(),
    };
    Ok(Choice { kind, reason: device_reason(&reason, device, cfg.device >= 0), device })
}

/// The reason of a device backend's choice, with how its device was chosen.
fn device_reason(reason: &str, device: i32, configured: bool) -> String {
    let how = if configured { "as configured (GPUWIRE_DEVICE or config.device)" } else { "the node-local rank modulo the device count" };
    format!("{reason}; device {device}, {how}")
}

fn strip_kind(e: &Error) -> String {
    let s = e.to_string();
    s.split_once(": ").map(|(_, d)| d.to_string()).unwrap_or(s)
}

/// Collective: sets up the chosen backend's state once every rank agreed on the choice.
pub fn setup(c: &mut Communicator) -> Result<()> {
    // Host buffers of staged nonblocking requests (`devstate::pool`).
    c.backend_state.set(devstate::Pool::default());
    if c.config().check {
        let check = p2p::check_comms(c)?;
        c.backend_state.set(check);
    }
    if c.backend() == BackendKind::GPUWIRE_BACKEND_NCCL {
        setup_nccl(c)?;
    }
    let kind = c.backend();
    if kind != BackendKind::GPUWIRE_BACKEND_HOST {
        let st = devstate::DevState::new(c, c.device())?;
        let note = match &st.kernels {
            Ok(()) if st.gpu_shared && kind != BackendKind::GPUWIRE_BACKEND_IPC => format!(
                "; large reductions run on the GPU; ranks share a GPU, so reductions up to {} KiB run on a host copy (its compute engine is time-sliced between them)",
                st.small_bytes() >> 10
            ),
            Ok(()) => "; large reductions run on the GPU".to_string(),
            Err(e) => format!("; reductions run on the host ({e})"),
        };
        c.append_reason(&note);
        c.backend_state.set(Mutex::new(st));
    }
    if kind == BackendKind::GPUWIRE_BACKEND_IPC {
        let st = ipc::IpcState::new(c, c.device())?;
        c.backend_state.set(st);
    }
    Ok(())
}

/// Collective: creates the NCCL communicator, and every rank learns whether any rank could not
/// (an NCCL error, or its initialization deadline: `nccl::NcclState::new`). NCCL requested: that
/// error on every rank. AUTO: every rank falls back together to what AUTO takes without NCCL
/// (`without_nccl`), with the reason in the choice; a bad GPUWIRE_NCCL_INIT_TIMEOUT stays an
/// error.
fn setup_nccl(c: &mut Communicator) -> Result<()> {
    let made = nccl::NcclState::new(c, c.device());
    let agreed = c.agree_on_result(made.as_ref().map(|_| ()).map_err(Clone::clone), "creating the NCCL communicator");
    let e = match (made, agreed) {
        (Ok(st), Ok(())) => {
            c.backend_state.set(st);
            return Ok(());
        }
        (Ok(mut st), Err(e)) => {
            st.destroy(true); // made here, but not on another rank
            e
        }
        (Err(_), Err(e)) | (Err(e), Ok(())) => e,
    };
    if c.config().backend != BackendKind::GPUWIRE_BACKEND_AUTO || e.status() == crate::error::Status::GPUWIRE_ERROR_INVALID_ARGUMENT {
        return Err(e);
    }
    let (kind, reason) = without_nccl(c, &strip_kind(&e))?;
    let reason = device_reason(&reason, c.device(), c.config().device >= 0);
    crate::trace!("NCCL could not be set up on every rank; auto falls back to {}", kind.name());
    c.fall_back(kind, reason);
    Ok(())
}

/// Collective, under AUTO once every rank knows that NCCL cannot be used (`why`): the backend
/// AUTO takes without it, as `choose` would — IPC if eligible, else CUDA-aware MPI if the MPI
/// is so on every rank, else staged — and the reason.
fn without_nccl(c: &Communicator, why: &str) -> Result<(BackendKind, String)> {
    let ipc = ipc::eligible(c, Some(c.device()))?;
    let (aware, source) = mpisys::cuda_support()?;
    // MAX of the negation: -1 only if every rank's MPI is CUDA-aware.
    let mut v = [-((aware == Some(true)) as i64)];
    c.allreduce_max_i64(&mut v, "agreeing on CUDA-aware MPI")?;
    let why = format!("auto: NCCL not used (creating its communicator failed: {why})");
    Ok(match ipc {
        Ok(ipc) => (BackendKind::GPUWIRE_BACKEND_IPC, format!("{why}; {ipc}: CUDA IPC")),
        Err(no_ipc) if v[0] == -1 => (BackendKind::GPUWIRE_BACKEND_MPI_CUDA_AWARE, format!("{why}; IPC not used ({no_ipc}); the MPI is CUDA-aware ({source})")),
        Err(no_ipc) => (
            BackendKind::GPUWIRE_BACKEND_MPI_STAGED,
            format!("{why}; IPC not used ({no_ipc}); the MPI is not known to be CUDA-aware on every rank ({source}), so device data is staged through host memory"),
        ),
    })
}

/// Releases backend state before the MPI communicators are freed.
pub fn teardown(c: &mut Communicator) {
    if let Some(mut k) = c.backend_state.take::<p2p::Check>() {
        k.free();
    }
    if let Some(mut n) = c.backend_state.take::<nccl::NcclState>() {
        n.destroy(c.is_broken());
    }
    if let Some(mut s) = c.backend_state.take::<ipc::IpcState>() {
        s.destroy(c);
    }
    if let Some(m) = c.backend_state.take::<Mutex<devstate::DevState>>() {
        let mut st = m.into_inner().unwrap_or_else(|p| p.into_inner());
        if c.is_broken() {
            // A timeout may have abandoned MPI requests on the private communicator and its
            // staging memory, which MPI still progresses: both stay allocated.
            std::mem::forget(st);
        } else {
            st.free_comm();
        }
    }
}

/// The path of a point-to-point call: on IPC communicators always the IPC path, host buffers
/// included, because the two sides of a message must use the same protocol and neither knows
/// the other's memory (the IPC path moves host memory by MPI messages of its own); elsewhere as
/// [`path_for`].
pub fn path_for_p2p(c: &Communicator, bufs: &[Option<&Buffer>]) -> Result<&'static dyn Path> {
    if c.backend() == BackendKind::GPUWIRE_BACKEND_IPC {
        return Ok(&ipc::IpcPath);
    }
    path_for(c, bufs)
}

/// The path that moves these buffers on this communicator: plain MPI when every buffer is
/// host-accessible, else the communicator's device backend.
pub fn path_for(c: &Communicator, bufs: &[Option<&Buffer>]) -> Result<&'static dyn Path> {
    // IPC's barrier synchronises on the shared segment's counters, not with MPI.
    if bufs.is_empty() && c.backend() == BackendKind::GPUWIRE_BACKEND_IPC {
        return Ok(&ipc::IpcPath);
    }
    let Some(b) = bufs.iter().flatten().find(|b| !b.is_host()) else {
        return Ok(&host::HostPath);
    };
    match c.backend() {
        // NCCL needs every buffer of the call in device memory; a call that mixes in host memory
        // takes the staged MPI path of the same communicator.
        BackendKind::GPUWIRE_BACKEND_NCCL if bufs.iter().flatten().all(|b| !b.is_host()) => Ok(&nccl::NcclPath),
        BackendKind::GPUWIRE_BACKEND_NCCL => Ok(&mpi_staged::StagedPath),
        BackendKind::GPUWIRE_BACKEND_MPI_STAGED => Ok(&mpi_staged::StagedPath),
        BackendKind::GPUWIRE_BACKEND_MPI_CUDA_AWARE => Ok(&mpi_cuda_aware::CudaAwarePath),
        // Every call with a device (or managed) buffer; memory that cannot be exported is routed
        // to the staged path inside, by all ranks together.
        BackendKind::GPUWIRE_BACKEND_IPC => Ok(&ipc::IpcPath),
        other => Err(Error::BackendUnavailable(format!(
            "a {} buffer was given, but this communicator's backend is {} ({})",
            b.space().name(),
            other.name(),
            c.choice().reason
        ))),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn device_reason_reads_as_a_sentence() {
        assert_eq!(super::device_reason("requested", 0, true), "requested; device 0, as configured (GPUWIRE_DEVICE or config.device)");
        assert_eq!(super::device_reason("auto: x", 3, false), "auto: x; device 3, the node-local rank modulo the device count");
    }
}
