//! The lean paths (issue 19) of a blocking allreduce on host memory or on device memory that
//! NCCL does, of point-to-point calls on host memory (sendrecv, send, recv, isend, irecv), and
//! of blocking point-to-point calls on device memory that NCCL does (sendrecv, send, recv):
//! what the general path comes down to in the common case, taken only where a few cheap tests
//! show that the general path would do exactly that; otherwise the call takes the general path,
//! unchanged.
//!
//! The general path of `gpuwire_allreduce`, once its handles and op resolved, and why the lean
//! path may leave each step out (or does it too):
//!
//! | general path (`group::submit` → `op::issue` → `Op::run` → `Communicator::allreduce` →
//! `HostPath::allreduce` / `NcclPath::allreduce`) | lean path ([`allreduce`]) |
//! |---|---|
//! | `group::traced`: a `GPUWIRE_TRACE` line | tested per call: not tracing (`op::tracing`, read once per process, at its first operation: not at the communicator's creation, so that a program may still set the variable after creating its communicators, as before the lean paths) |
//! | `group::submit_now`: inside a group the operation is recorded, issued at the end (on NCCL: into the group's NCCL group) | tested per call: no group open on this thread (`group::is_open`) |
//! | `op::issue`: `engine::free_dropped` | done too |
//! | `op::issue`: an asynchronous error is returned, nothing done | tested: none (`Engine::has_async_error`); else the general path |
//! | `issue_now`: another thread's collective on the communicator refused (`collective_elsewhere`) | tested: none (the same call); else the general path. One that begins after the test is refused by `enter`'s claim of the collective slot, as in the general path, whose own claim comes after its test too |
//! | `issue_now`: device memory not done by NCCL → stream-ordered MPI paths (`issue_ordered`: flags, staging, the two-phase reductions), `refuse_capture` | tested: both buffers host-accessible (`Buffer::is_host`), or NCCL does it (`Op::nccl_native`'s tests: `nccl::reduces` of the send datatype and op, `op::nccl_takes`: backend NCCL, both buffers device memory); a mixed call, or another backend's device call, takes the general path |
//! | `issue_now`: engine busy → queued behind its work and waited for | tested: engine idle (`Engine::idle`); work another thread queues after the test is drained by `enter`, as in the general path, which tests at the same point |
//! | `Op::run`: strided or subarray views packed and unpacked (on device: kernels on the stream) | tested: neither buffer has a shape (contiguous) |
//! | `enter`: broken communicator, finalized MPI, collective slot, deadline of a timeout (which NCCL's `finish` waits by) | the same call |
//! | `plan_allreduce`: datatype, op on that datatype, counts, overlap, in-place | the same checks (`ops::allreduce_args`), made before `enter`: they read only the buffers, which never change. A failure takes the general path, which returns the same error after what comes before it there (an asynchronous error, a broken communicator, a busy slot) |
//! | `plan_allreduce`: route → `HostPath` | host buffers route to `HostPath` unless the backend does allreduce on host memory itself (MPI_STAGED, MPI_CUDA_AWARE, HIER, IPC): `Communicator::lean` is false there |
//! | `plan_allreduce`: route → `NcclPath` | device buffers (both) on NCCL with a reduction NCCL does route to the backend itself (`backend::decide`: allreduce is in NCCL's operations, `nccl::reduces`, memory `Device`; the test below checks this for every datatype and op) |
//! | `agree`: `ensure_usable` again; checking mode's exchange | `enter` just checked usability; `Communicator::lean` is false in checking mode |
//! | `HostPath::allreduce` → `host::allreduce(.., divide: true)` (chunks past 2^30 elements, AVG, timeouts by `collective!`) | the same call |
//! | `NcclPath::allreduce`: NCCL's op (AVG: SUM, then a division kernel), `nccl::enter` (each buffer on the communicator's device, `check_device`; the device's context; posted isend/irecv launched first, `close_group`), the turn and lock of the NCCL communicator, an aborted one refused, ncclAllReduce, its result (a nonblocking communicator's ncclInProgress settled), `finish` (under a timeout: the wait for the stream, NCCL's asynchronous errors polled, the abort at the deadline) | the same call |
//! | `keep_if_abandoned`: buffers kept alive after a timeout | the same (`keep_slots_if_abandoned`) |
//! | `issue_now`, device memory: `GPUWIRE_HOST_SYNC=1`'s wait for the stream | the same (`op::host_sync_after`) |
//! | `op::issue`: a COMM_BROKEN error replaced by the asynchronous failure that broke it | the same (`issued_error`) |
//!
//! What the lean path leaves out is the building and dropping of the `Op`, the dispatch on it,
//! the per-call routing, the checking-mode signature and the second usability check.
//!
//! Point-to-point on host memory is shorter still: where the general path runs a blocking
//! sendrecv, send or receive, or starts an isend or irecv, at once ([`host_p2p_now`]), it comes
//! down to `Communicator::sendrecv` (the call's own checks, its path and the receive that takes
//! exactly its buffer), `send`, `recv`, `isend` or `irecv`, which the lean path calls too
//! ([`sendrecv`], [`send`], [`recv`], [`isend`], [`irecv`]; the table below is sendrecv's, the
//! same for send and recv; for the nonblocking two, read `Op::start` for `Op::run`: they keep
//! no buffers after a failure, as `Op::start` keeps none).
//!
//! | general path (`group::submit` → `op::issue` → `Op::run` → `Communicator::sendrecv`) | lean path ([`sendrecv`]) |
//! |---|---|
//! | `group::traced`: a `GPUWIRE_TRACE` line | tested per call: not tracing (`op::tracing`, read once per process) |
//! | `group::submit_now`: inside a group the operation is recorded, issued at the end | tested: no group open on this thread |
//! | `op::issue`: `engine::free_dropped`; an asynchronous error returned, nothing done | done too; tested: none |
//! | `issue_now`: device or managed memory → stream-ordered or NCCL paths | tested: both buffers host-accessible |
//! | `issue_now`: another point-to-point operation of the communicator still queued on its engine → queued behind it | tested: none (`Engine::no_p2p`, the general path's own test for host point-to-point) |
//! | `Op::run`: strided or subarray views packed and unpacked | tested: neither buffer has a shape |
//! | `Op::run` → `Communicator::sendrecv`: `enter` (broken communicator, deadline), ranks, tags, wildcards, overlap, path, checking mode's header exchange | the same call |
//! | `keep_if_abandoned`, and the asynchronous failure that broke the communicator reported instead of COMM_BROKEN | the same (`keep_slots_if_abandoned`, `issued_error`) |
//!
//! A blocking sendrecv, send or receive on device memory that NCCL does comes down to the same
//! `Communicator` call (whose path is `NcclPath`), then `GPUWIRE_HOST_SYNC=1`'s wait:
//!
//! | general path (`group::submit` → `op::issue` → `issue_now` → `Op::run` → `Communicator::sendrecv`) | lean path ([`sendrecv`], [`send`], [`recv`] on device buffers) |
//! |---|---|
//! | `group::traced`; `group::submit_now` inside a group | tested: not tracing, no group open on this thread |
//! | `op::issue`: `engine::free_dropped`; an asynchronous error returned, nothing done | done too; tested: none |
//! | `issue_now`: `Op::nccl_native` (not GPUWIRE_P2P_MATCHING=mpi: `backend::mpi_matched_p2p`; `op::nccl_takes`: backend NCCL, every buffer device memory), else the stream-ordered MPI paths | tested: every buffer device memory, `nccl_takes`, not `mpi_matched_p2p`; a mixed call takes the general path |
//! | `issue_now`: engine busy (`nothing_before`: `Engine::idle` for device memory) → queued behind its work and waited for | tested: engine idle |
//! | `Op::run`: strided or subarray views packed and unpacked | tested: no buffer has a shape |
//! | `Op::run` → `Communicator::sendrecv`: its checks, its path (`backend::route`), NCCL's launch | the same checks and launch (`Communicator::sendrecv_on`), on `NcclPath`: what routing gives every buffer device memory on NCCL without GPUWIRE_P2P_MATCHING=mpi (checked by the test below) |
//! | `keep_if_abandoned`; `host_sync_after`; `issued_error` | the same |

use std::sync::Arc;

use crate::backend::host::{self, Src};
use crate::backend::nccl::{self, NcclPath};
use crate::backend::path::{Input, Path};
use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::device::Stream;
use crate::error::Result;
use crate::request::Request;
use crate::types::ReduceOp;

/// Whether `c`'s blocking allreduce may take the lean path at all (the communicator's part of
/// the tests above): not checking mode, and its backend leaves allreduce on host memory to
/// plain MPI (`HostPath`; NCCL does: its device calls are tested per call). Read once, when `c`
/// is created (`Communicator::adopt`, after its backend is set up): neither changes afterwards.
/// Tracing is tested per call instead ([`allreduce`]): reading `GPUWIRE_TRACE` here fixed it for
/// the process at the first communicator's creation, and a program that set it afterwards (but
/// before its first operation, which read it until then) got no trace lines at all.
pub(crate) fn applies(c: &Communicator) -> bool {
    !c.config().check && !crate::backend::native_on_host(c, crate::backend::path::Operation::Allreduce)
}

/// What [`allreduce`] notes of its pin's handles once its tests of the arguments passed
/// (`Pin::set_checked`): [`NOTED`], the op's code (below 32), and whether the call is in place
/// and on host memory.
const NOTED: u8 = 0x80;
const ON_HOST: u8 = 0x40;
const IN_PLACE: u8 = 0x20;
const OP_BITS: u8 = 0x1F;
const _: () = assert!(ReduceOp::GPUWIRE_MAXLOC as i32 <= OP_BITS as i32 && ReduceOp::GPUWIRE_MINLOC as i32 <= OP_BITS as i32);

/// A blocking allreduce of `send` into `recv` with `op` on `c` (device work on `stream`), on
/// the lean path: `None` where one of the tests above fails (the caller then takes the general
/// path), else the call's result, as the general path's. `pin` is the call's, naming `c`,
/// `send` and `recv`'s handles.
///
/// The tests of the arguments themselves (no views, NCCL's datatype, op and memory, the
/// datatypes, counts and overlap of `ops::allreduce_args`) depend on nothing but the three
/// objects' fixed properties and `op`; a handle names the same object as long as it lives. So
/// once they passed, the call notes it of its pin's handles (`Pin::set_checked`), and the
/// thread's next allreduce with the same handles and op takes the note instead (`Pin::checked`:
/// forgotten as soon as a pin names another handle in any place).
#[inline]
pub fn allreduce(pin: &crate::pin::Pin, c: &Arc<Communicator>, send: &Arc<Buffer>, recv: &Arc<Buffer>, op: ReduceOp, stream: Stream) -> Option<Result<()>> {
    if !c.lean || crate::op::tracing() || crate::group::is_open() {
        return None;
    }
    let noted = pin.checked();
    let (on_host, in_place) = if noted & (NOTED | OP_BITS) == NOTED | op as i32 as u8 {
        (noted & ON_HOST != 0, noted & IN_PLACE != 0)
    } else {
        if send.shape().is_some() || recv.shape().is_some() {
            return None;
        }
        let on_host = send.is_host() && recv.is_host();
        if !on_host && !(nccl::reduces(send.dtype(), op) && crate::op::nccl_takes(c, [Some(send), Some(recv)])) {
            return None;
        }
        let in_place = matches!(crate::ops::allreduce_args(send, recv, op).ok()?, Input::InPlace);
        pin.set_checked(NOTED | if on_host { ON_HOST } else { 0 } | if in_place { IN_PLACE } else { 0 } | op as i32 as u8);
        (on_host, in_place)
    };
    let eng = c.engine();
    if !eng.idle() || eng.has_async_error() || c.collective_elsewhere(|| "allreduce").is_err() {
        return None;
    }
    let input = if in_place { Input::InPlace } else { Input::Buf(send) };
    crate::engine::free_dropped();
    // A block, not a closure, and `if let` for the failure: no frame or call of their own, whose
    // stack lines a call reads again after an NCCL launch (`crate::hot`).
    let r = match c.enter("allreduce", true) {
        Ok(_call) if on_host => host::allreduce(c, Src::of(input), recv.ptr(), recv.count(), recv.dtype(), op, true),
        Ok(_call) => NcclPath.allreduce(c, input, recv, op, stream),
        Err(e) => Err(e),
    };
    if let Err(e) = &r {
        crate::op::keep_slots_if_abandoned([Some(send), Some(recv)], e);
    }
    let r = if on_host { r } else { r.and_then(|()| crate::op::host_sync_after(c, stream)) };
    Some(r.map_err(|e| crate::op::issued_error(c, e)))
}

#[cfg(test)]
mod tests {
    use crate::backend::path::Operation;
    use crate::backend::{BACKENDS, Memory, Route, decide, nccl};
    use crate::types::{BackendKind, Dtype, ReduceOp};

    /// What the lean path sends to `NcclPath` (device buffers on NCCL, a reduction NCCL does;
    /// a blocking sendrecv, send or receive), the registry routes to the NCCL backend itself,
    /// for every datatype and op.
    #[test]
    fn nccl_routes_what_the_lean_path_takes() {
        let b = BACKENDS.iter().find(|b| b.kind == BackendKind::GPUWIRE_BACKEND_NCCL).expect("NCCL's entry");
        let mut n = 0;
        for d in Dtype::ALL {
            for op in ReduceOp::ALL {
                if nccl::reduces(d, op) {
                    assert_eq!(decide(b, Operation::Allreduce, Some((d, op)), Memory::Device), Route::Native, "{d:?} {op:?}");
                    n += 1;
                }
            }
        }
        assert!(n > 0);
        // Its blocking point-to-point calls on device buffers (`p2p_blocking`; routing
        // sends GPUWIRE_P2P_MATCHING=mpi elsewhere first, which the lean path tests).
        for op in [Operation::Sendrecv, Operation::Send, Operation::Recv] {
            assert_eq!(decide(b, op, None, Memory::Device), Route::Native, "{op:?}");
        }
    }
}

/// Whether a point-to-point operation on the host buffers `bufs` runs at once on the general
/// path, which the lean one then may replace (see the second table above): not tracing, no
/// group open on this thread, and [`host_p2p_ready`].
#[inline]
pub fn host_p2p_now(c: &Communicator, bufs: &[&Arc<Buffer>]) -> bool {
    !crate::op::tracing() && !crate::group::is_open() && host_p2p_ready(c, bufs.iter().copied())
}

/// `host_p2p_now`'s tests after tracing and the group (`p2p_blocking`'s on host buffers): every buffer host-accessible and
/// contiguous, no point-to-point operation of `c` queued on its engine, no asynchronous error
/// waiting.
#[inline]
fn host_p2p_ready<'a>(c: &Communicator, mut bufs: impl Iterator<Item = &'a Arc<Buffer>>) -> bool {
    if bufs.any(|b| !b.is_host() || b.shape().is_some()) {
        return false;
    }
    let eng = c.engine();
    eng.no_p2p() && !eng.has_async_error()
}

/// `p2p_blocking`'s tests on device buffers (the third table above) after tracing and the group: every
/// buffer device memory and contiguous, `nccl_takes`, not `mpi_matched_p2p`, the engine idle,
/// no asynchronous error waiting.
#[inline]
fn nccl_p2p_ready(c: &Communicator, slots: [Option<&Arc<Buffer>>; 2]) -> bool {
    if slots.iter().flatten().any(|b| b.is_host() || b.shape().is_some()) {
        return false;
    }
    if !crate::op::nccl_takes(c, slots) || crate::backend::mpi_matched_p2p(c) {
        return false;
    }
    let eng = c.engine();
    eng.idle() && !eng.has_async_error()
}

/// A blocking point-to-point call on the buffers `slots` (`Op::slots`) on the lean path: on host
/// buffers where [`host_p2p_ready`] holds (the second table above), on device buffers that NCCL
/// does where [`nccl_p2p_ready`] holds (the third); `run` (the `Communicator` call that `Op::run`
/// makes, on the path given, or routed where `None`), else `None` (the caller then takes the
/// general path). Its error as the general path's.
#[inline]
fn p2p_blocking(c: &Arc<Communicator>, slots: [Option<&Arc<Buffer>>; 2], stream: Stream, run: impl FnOnce(Option<&'static dyn Path>) -> Result<()>) -> Option<Result<()>> {
    // Inside a group (a halo exchange's sends and receives) the general path records the call:
    // the first test, before anything else is read.
    if crate::group::is_open() || crate::op::tracing() {
        return None;
    }
    let on_host = slots[0].is_some_and(|b| b.is_host());
    let ready = if on_host { host_p2p_ready(c, slots.iter().flatten().copied()) } else { nccl_p2p_ready(c, slots) };
    if !ready {
        return None;
    }
    crate::engine::free_dropped();
    // On host memory routed as the general path routes it (a backend may do host point-to-point
    // itself); on device memory NCCL's own path, which routing gives device buffers on NCCL
    // without GPUWIRE_P2P_MATCHING=mpi (`backend::route`; the test
    // `nccl_routes_what_the_lean_path_takes` checks the table). One call of `run`: its code is
    // inlined here, no frame of its own.
    let r = run(if on_host { None } else { Some(&NcclPath) });
    if let Err(e) = &r {
        crate::op::keep_slots_if_abandoned(slots, e);
    }
    let r = if on_host { r } else { r.and_then(|()| crate::op::host_sync_after(c, stream)) };
    Some(r.map_err(|e| crate::op::issued_error(c, e)))
}

/// A blocking sendrecv of `send` to `dest` and into `recv` from `source` on `c`, on the lean
/// path (see the second and third tables above): `None` where one of its tests fails (the
/// caller then takes the general path), else the call's result, as the general path's.
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn sendrecv(c: &Arc<Communicator>, send: &Arc<Buffer>, dest: i32, sendtag: i32, recv: &Arc<Buffer>, source: i32, recvtag: i32, stream: Stream) -> Option<Result<()>> {
    p2p_blocking(c, [Some(send), Some(recv)], stream, |p| c.sendrecv_on(p, send, dest, sendtag, recv, source, recvtag, stream))
}

/// A blocking send of `buf` to `dest` on the lean path, as [`sendrecv`] (`Communicator::send`).
#[inline]
pub fn send(c: &Arc<Communicator>, buf: &Arc<Buffer>, dest: i32, tag: i32, stream: Stream) -> Option<Result<()>> {
    p2p_blocking(c, [Some(buf), None], stream, |p| c.send_on(p, buf, dest, tag, stream))
}

/// A blocking receive into `buf` from `source` on the lean path, as [`sendrecv`]
/// (`Communicator::recv`).
#[inline]
pub fn recv(c: &Arc<Communicator>, buf: &Arc<Buffer>, source: i32, tag: i32, stream: Stream) -> Option<Result<()>> {
    p2p_blocking(c, [Some(buf), None], stream, |p| c.recv_on(p, buf, source, tag, stream))
}

/// An isend of `buf` on the lean path, where `host_p2p_now(&c, &[&buf])` holds: started now, as
/// the general path's `Op::start` starts it (`Communicator::isend`). The request takes `c`.
#[inline]
pub fn isend(c: Arc<Communicator>, buf: Arc<Buffer>, dest: i32, tag: i32, stream: Stream) -> Result<Request> {
    crate::engine::free_dropped();
    let pending = c.start_isend(&buf, dest, tag, stream).map_err(|e| crate::op::issued_error(&c, e))?;
    Ok(Request::of_one(pending, c, buf))
}

/// An irecv of exactly `buf`'s count on the lean path, where `host_p2p_now(&c, &[&buf])` holds:
/// posted now, as the general path's `Op::start` posts it (`Communicator::irecv`). The request
/// takes `c`.
#[inline]
pub fn irecv(c: Arc<Communicator>, buf: Arc<Buffer>, source: i32, tag: i32, stream: Stream) -> Result<Request> {
    crate::engine::free_dropped();
    let (pending, s) = c.start_irecv(&buf, source, tag, false, stream).map_err(|e| crate::op::issued_error(&c, e))?;
    Ok(Request::of_one(pending, c, buf).with_status(s))
}
