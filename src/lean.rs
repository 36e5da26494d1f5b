//! The lean path of a blocking allreduce on host memory (issue 19): what the general path comes
//! down to in the common case, taken only where a few cheap tests show that the general path
//! would do exactly that; otherwise the call takes the general path, unchanged.
//!
//! The general path of `gpuwire_allreduce`, once its handles and op resolved, and why the lean
//! path may leave each step out (or does it too):
//!
//! | general path (`group::submit` → `op::issue` → `Op::run` → `Communicator::allreduce` →
//! `HostPath::allreduce`) | lean path ([`allreduce`]) |
//! |---|---|
//! | `group::traced`: a `GPUWIRE_TRACE` line | `Communicator::lean` is false when tracing (fixed for the process at its first read, at the latest when the communicator was created) |
//! | `group::submit_now`: inside a group the operation is recorded, issued at the end | tested per call: no group open on this thread (`group::is_open`) |
//! | `op::issue`: `engine::free_dropped` | done too |
//! | `op::issue`: an asynchronous error is returned, nothing done | tested: none (`Engine::has_async_error`); else the general path |
//! | `issue_now`: another thread's collective on the communicator refused (`collective_elsewhere`) | refused by `enter`'s claim of the collective slot: the same error, with the same words ("allreduce: ...") |
//! | `issue_now`: device or managed memory → stream-ordered, NCCL, device syncs | tested: both buffers host-accessible (`Buffer::is_host`) |
//! | `issue_now`: engine busy → queued behind its work and waited for | tested: engine idle (`Engine::idle`); work another thread queues after the test is drained by `enter`, as in the general path, which tests at the same point |
//! | `Op::run`: strided or subarray views packed and unpacked | tested: neither buffer has a shape (contiguous) |
//! | `enter`: broken communicator, finalized MPI, collective slot, deadline of a timeout | the same call |
//! | `plan_allreduce`: datatype, op on that datatype, counts, overlap, in-place | the same checks (`ops::allreduce_args`), made before `enter`: they read only the buffers, which never change. A failure takes the general path, which returns the same error after what comes before it there (an asynchronous error, a broken communicator, a busy slot) |
//! | `plan_allreduce`: route → `HostPath` | host buffers route to `HostPath` unless the backend does allreduce on host memory itself (MPI_STAGED, MPI_CUDA_AWARE, HIER, IPC): `Communicator::lean` is false there |
//! | `agree`: `ensure_usable` again; checking mode's exchange | `enter` just checked usability; `Communicator::lean` is false in checking mode |
//! | `HostPath::allreduce` → `host::allreduce(.., divide: true)` (chunks past 2^30 elements, AVG, timeouts by `collective!`) | the same call |
//! | `keep_if_abandoned`: buffers kept alive after a timeout | the same (`keep_slots_if_abandoned`) |
//! | `op::issue`: a COMM_BROKEN error replaced by the asynchronous failure that broke it | the same (`issued_error`) |
//!
//! What the lean path leaves out is the building and dropping of the `Op`, the dispatch on it,
//! the per-call routing, the checking-mode signature and the second usability check.
//!
//! A blocking sendrecv on host memory ([`sendrecv`]) is shorter still: where the general path
//! runs it at once, it comes down to `Communicator::sendrecv` (the call's own checks, its path
//! and the receive that takes exactly its buffer), which the lean path calls too.
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

use std::sync::Arc;

use crate::backend::host::{self, Src};
use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::device::Stream;
use crate::error::Result;
use crate::types::ReduceOp;

/// Whether `c`'s blocking allreduce on host memory may take the lean path at all (the
/// communicator's part of the tests above): not checking mode, not tracing, and its backend
/// leaves allreduce on host memory to plain MPI (`HostPath`). Read once, when `c` is created
/// (`Communicator::adopt`, after its backend is set up): none of these changes afterwards.
pub(crate) fn applies(c: &Communicator) -> bool {
    !c.config().check && !crate::op::tracing() && !crate::backend::native_on_host(c, crate::backend::path::Operation::Allreduce)
}

/// A blocking allreduce of `send` into `recv` with `op` on `c`, on the lean path: `None` where
/// one of the tests above fails (the caller then takes the general path), else the call's
/// result, as the general path's.
#[inline]
pub fn allreduce(c: &Arc<Communicator>, send: &Arc<Buffer>, recv: &Arc<Buffer>, op: ReduceOp) -> Option<Result<()>> {
    if !c.lean || crate::group::is_open() {
        return None;
    }
    if !send.is_host() || !recv.is_host() || send.shape().is_some() || recv.shape().is_some() {
        return None;
    }
    let eng = c.engine();
    if !eng.idle() || eng.has_async_error() {
        return None;
    }
    let input = crate::ops::allreduce_args(send, recv, op).ok()?;
    crate::engine::free_dropped();
    let r = (|| {
        let _call = c.enter("allreduce", true)?;
        host::allreduce(c, Src::of(input), recv.ptr(), recv.count(), recv.dtype(), op, true)
    })();
    Some(r.map_err(|e| {
        crate::op::keep_slots_if_abandoned([Some(send), Some(recv)], &e);
        crate::op::issued_error(c, e)
    }))
}

/// A blocking sendrecv of `send` to `dest` and into `recv` from `source` on `c`, on the lean
/// path (see the second table above): `None` where one of its tests fails (the caller then
/// takes the general path), else the call's result, as the general path's.
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn sendrecv(c: &Arc<Communicator>, send: &Arc<Buffer>, dest: i32, sendtag: i32, recv: &Arc<Buffer>, source: i32, recvtag: i32, stream: Stream) -> Option<Result<()>> {
    if crate::op::tracing() || crate::group::is_open() {
        return None;
    }
    if !send.is_host() || !recv.is_host() || send.shape().is_some() || recv.shape().is_some() {
        return None;
    }
    let eng = c.engine();
    if !eng.no_p2p() || eng.has_async_error() {
        return None;
    }
    crate::engine::free_dropped();
    let r = c.sendrecv(send, dest, sendtag, recv, source, recvtag, stream);
    Some(r.map_err(|e| {
        crate::op::keep_slots_if_abandoned([Some(send), Some(recv)], &e);
        crate::op::issued_error(c, e)
    }))
}
