//! Point-to-point operations, requests and collectives.
//!
//! Common to every function here: counts come from the buffers, in elements (any count that
//! memory holds, also past MPI's `int`: split calls or derived datatypes); `stream` is a
//! CUstream (NULL = the legacy default stream). For device buffers the operation happens after
//! all work enqueued earlier on `stream`, and work enqueued later on `stream` sees its result.
//! For host buffers `stream` is ignored and the call is as its MPI counterpart. On the MPI paths
//! (HOST, MPI_STAGED, MPI_CUDA_AWARE) a blocking call returns when its data is in place.
//! Thread safety: as MPI_THREAD_MULTIPLE; calls on different communicators may run concurrently,
//! collectives on one communicator must be called in the same order on every rank.

use std::ffi::c_void;

use crate::device::Stream;
use crate::error::{Error, Result, gpuwire_status};
use crate::ffi::boundary::{self, call, collective, non_null, write};
use crate::ffi::{gpuwire_buffer, gpuwire_comm, gpuwire_request};
use crate::group::submit as issue;
use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::op::Op;
use crate::pin::Borrowed;
use crate::ops::Layout;
use crate::request::{REQUESTS, Request};
use crate::types::ReduceOp;
use std::sync::Arc;

fn st(stream: *mut c_void) -> Stream {
    Stream(stream as usize)
}

/// Sends all of `buf`'s elements (any count) to rank `dest` with `tag` (0..MPI_TAG_UB), as
/// MPI_Send.
/// `dest` GPUWIRE_PROC_NULL (or this MPI's MPI_PROC_NULL) does nothing. The receiver must post a
/// receive of the same count. In checking mode the receiver also compares datatype and count,
/// and the send completes once it answered (as MPI_Ssend): a mismatch fails on both sides.
///
/// Errors: GPUWIRE_ERROR_INVALID_HANDLE, GPUWIRE_ERROR_INVALID_ARGUMENT (rank or tag out of
/// range; a wildcard, GPUWIRE_ANY_SOURCE / GPUWIRE_ANY_TAG or this MPI's, which only receives
/// take; other negative values), GPUWIRE_ERROR_COUNT_MISMATCH / DTYPE_MISMATCH (checking mode: the receive differs),
/// GPUWIRE_ERROR_TIMEOUT, GPUWIRE_ERROR_BACKEND_UNAVAILABLE (a device buffer on a communicator
/// whose backend cannot move it), GPUWIRE_ERROR_MPI, GPUWIRE_ERROR_CUDA.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_send(comm: gpuwire_comm, buf: gpuwire_buffer, dest: i32, tag: i32, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_send", || {
        let pin = crate::pin::pin([comm, buf, 0]);
        let (b, c) = boundary::buffer_and_comm_pinned(&pin, buf, comm)?;
        // The common case's short path, where it is the same as the general one (`lean`).
        if let Some(done) = crate::lean::send(&c, &b, dest, tag, st(stream)) {
            return done;
        }
        issue(&c, Op::Send { buf: b.to_arc(), dest, tag }, st(stream), false).map(|_| ())
    })
}

/// Receives exactly `buf`'s element count from rank `source` with `tag`, as MPI_Recv. A shorter
/// or longer message is GPUWIRE_ERROR_COUNT_MISMATCH (the message names both sizes, in elements
/// and bytes): the message is consumed and the buffer is not written. In checking mode another
/// datatype or count than the sender's is GPUWIRE_ERROR_DTYPE_MISMATCH / COUNT_MISMATCH on both
/// sides. `source` GPUWIRE_PROC_NULL (or MPI_PROC_NULL) does nothing and leaves the buffer
/// untouched. `source` may be GPUWIRE_ANY_SOURCE and `tag` GPUWIRE_ANY_TAG (or this MPI's
/// MPI_ANY_SOURCE / MPI_ANY_TAG), matched in MPI's order (see gpuwire_recv_status, which also
/// reports what matched and takes shorter messages; wildcards on device memory as there).
/// Errors as gpuwire_send.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_recv(comm: gpuwire_comm, buf: gpuwire_buffer, source: i32, tag: i32, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_recv", || {
        let pin = crate::pin::pin([comm, buf, 0]);
        let (b, c) = boundary::buffer_and_comm_pinned(&pin, buf, comm)?;
        // The common case's short path, where it is the same as the general one (`lean`).
        if let Some(done) = crate::lean::recv(&c, &b, source, tag, st(stream)) {
            return done;
        }
        issue(&c, Op::Recv { buf: b.to_arc(), source, tag }, st(stream), false).map(|_| ())
    })
}

/// Starts a send, as MPI_Isend, and writes its request to `*request`. The buffer must not be
/// modified until the request completes (the request keeps the buffer and communicator handles'
/// objects alive even if they are freed meanwhile). Errors as gpuwire_send, plus
/// GPUWIRE_ERROR_NULL_ARGUMENT (`request`).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_isend(
    comm: gpuwire_comm,
    buf: gpuwire_buffer,
    dest: i32,
    tag: i32,
    stream: *mut c_void,
    request: *mut gpuwire_request,
) -> gpuwire_status {
    call("gpuwire_isend", || {
        non_null(request, "request")?;
        let (c, b) = boundary::comm_and_buffer(comm, buf)?;
        // The common case's short path, where it is the same as the general one (`lean`).
        let r = if crate::lean::host_p2p_now(&c, &[&b]) {
            crate::lean::isend(c, b, dest, tag, st(stream))?
        } else {
            issue(&c, Op::Isend { buf: b, dest, tag }, st(stream), true)?.ok_or_else(no_request)?
        };
        write(request, crate::request::register(r)?);
        Ok(())
    })
}

/// Starts a receive of exactly `buf`'s element count, as MPI_Irecv; the data is in place once
/// the request completes. A message of another size (or, in checking mode, datatype or count)
/// is reported by gpuwire_wait / gpuwire_test, as for gpuwire_recv. A receive whose message has
/// not arrived yet is matched (in posting order) by gpuwire's next point-to-point call, wait or
/// test. Errors as gpuwire_isend.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_irecv(
    comm: gpuwire_comm,
    buf: gpuwire_buffer,
    source: i32,
    tag: i32,
    stream: *mut c_void,
    request: *mut gpuwire_request,
) -> gpuwire_status {
    call("gpuwire_irecv", || {
        non_null(request, "request")?;
        let (c, b) = boundary::comm_and_buffer(comm, buf)?;
        // The common case's short path, where it is the same as the general one (`lean`).
        let r = if crate::lean::host_p2p_now(&c, &[&b]) {
            crate::lean::irecv(c, b, source, tag, st(stream))?
        } else {
            issue(&c, Op::Irecv { buf: b, source, tag, upto: false }, st(stream), true)?.ok_or_else(no_request)?
        };
        write(request, crate::request::register(r)?);
        Ok(())
    })
}

/// What a completed receive or a probe matched, as MPI_Status: `source` (the sender's rank;
/// GPUWIRE_PROC_NULL for a receive from GPUWIRE_PROC_NULL), `tag` (the message's tag),
/// `count` (the elements received, of the receive buffer's datatype, or a probe's datatype) and
/// `error` (a gpuwire_status code: GPUWIRE_SUCCESS, or in the arrays of gpuwire_testall, the
/// request's own error) and `cancelled` (1 for a receive that gpuwire_cancel withdrew, as
/// MPI_Test_cancelled; else 0). The status of an operation that is no receive, of
/// GPUWIRE_REQUEST_NULL, and of a receive that never matched, is MPI's empty status:
/// GPUWIRE_ANY_SOURCE, GPUWIRE_ANY_TAG, count 0 (and `cancelled` 1 where it was cancelled).
/// Written only by a call that succeeds (but for the arrays of gpuwire_testall, gpuwire_waitsome
/// and gpuwire_testsome, which say each request's error). Fortran: the bind(C) type
/// gpuwire_status_t, the same fields.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct gpuwire_status_t {
    /// The rank the message came from (MPI_SOURCE).
    pub source: i32,
    /// The message's tag (MPI_TAG).
    pub tag: i32,
    /// The elements received (as MPI_Get_count).
    pub count: i64,
    /// A gpuwire_status code (MPI_ERROR).
    pub error: i32,
    /// 1 where gpuwire_cancel withdrew the receive (MPI_Test_cancelled), else 0.
    pub cancelled: i32,
}

fn c_status(s: crate::request::Status, error: gpuwire_status) -> gpuwire_status_t {
    gpuwire_status_t { source: s.source, tag: s.tag, count: s.count, error: error as i32, cancelled: s.cancelled as i32 }
}

/// Receives a message of up to `buf`'s element count from `source` with `tag`, as MPI_Recv
/// with a status, and writes what it matched to `*status` (source, tag, elements received).
/// `source` may be GPUWIRE_ANY_SOURCE and `tag` GPUWIRE_ANY_TAG (or this MPI's MPI_ANY_SOURCE,
/// MPI_ANY_TAG). A shorter message (of whole elements) fills the buffer's start and leaves the
/// rest as it was; a longer one is GPUWIRE_ERROR_TRUNCATE (as MPI_ERR_TRUNCATE: the message is
/// consumed, the buffer not written). Messages are matched in MPI's order: with wildcards, a
/// receive posted earlier that could take the same message takes it first. `source`
/// GPUWIRE_PROC_NULL returns at once with GPUWIRE_PROC_NULL, GPUWIRE_ANY_TAG, count 0. Device
/// memory: on MPI_STAGED, MPI_CUDA_AWARE and IPC as host memory (IPC's control header, an MPI
/// message, is matched as MPI; its source, tag and size decide the rest). On NCCL, which
/// matches device messages by peer and order only: with config.p2p_matching =
/// GPUWIRE_P2P_MATCHING_MPI (GPUWIRE_P2P_MATCHING=mpi) as host memory, through the staged MPI
/// path; without it the receive takes exactly its buffer's count (NCCL's messages carry no
/// size) and wildcards are GPUWIRE_ERROR_BACKEND_UNAVAILABLE, naming the setting (or name the
/// source and tag, or receive into host memory). Not inside a group (GPUWIRE_ERROR_INVALID_ARGUMENT: the status is
/// known only at the group's end; use gpuwire_irecv_status there). In checking mode the sender
/// learns a truncation (GPUWIRE_ERROR_COUNT_MISMATCH on its side).
///
/// Errors as gpuwire_recv, plus GPUWIRE_ERROR_NULL_ARGUMENT (`status`), GPUWIRE_ERROR_TRUNCATE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_recv_status(comm: gpuwire_comm, buf: gpuwire_buffer, source: i32, tag: i32, stream: *mut c_void, status: *mut gpuwire_status_t) -> gpuwire_status {
    call("gpuwire_recv_status", || {
        non_null(status, "status")?;
        if crate::group::is_open() {
            return Err(Error::InvalidArgument(
                "gpuwire_recv_status inside a group: its status is known only at the group's end; use gpuwire_irecv_status and gpuwire_wait_status after gpuwire_group_end".into(),
            ));
        }
        let op = Op::Irecv { buf: boundary::buffer(buf)?, source, tag, upto: true };
        let s = crate::group::submit_and_wait(&boundary::comm(comm)?, op, st(stream), "recv_status", |r| r.status())?;
        write(status, c_status(s, gpuwire_status::GPUWIRE_SUCCESS));
        Ok(())
    })
}

/// Starts a receive of up to `buf`'s element count, as MPI_Irecv: gpuwire_recv_status's rules
/// (wildcards, shorter messages, GPUWIRE_ERROR_TRUNCATE reported by the wait), and
/// gpuwire_irecv's request. Its status comes with its completion: gpuwire_wait_status,
/// gpuwire_test_status, gpuwire_waitany, gpuwire_testany, gpuwire_testall. Inside a group the
/// receive is posted at the group's end (see gpuwire_group_start). Errors as gpuwire_irecv.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_irecv_status(
    comm: gpuwire_comm,
    buf: gpuwire_buffer,
    source: i32,
    tag: i32,
    stream: *mut c_void,
    request: *mut gpuwire_request,
) -> gpuwire_status {
    call("gpuwire_irecv_status", || {
        non_null(request, "request")?;
        let r = issue(&boundary::comm(comm)?, Op::Irecv { buf: boundary::buffer(buf)?, source, tag, upto: true }, st(stream), true)?.ok_or_else(no_request)?;
        write(request, crate::request::register(r)?);
        Ok(())
    })
}

/// A probe inside a group is refused: the group's receives are posted at its end, so a probe now
/// would report a message that one of them takes first, and a blocking one would wait for the
/// group's own sends.
fn not_in_group(what: &str) -> Result<()> {
    if crate::group::is_open() {
        return Err(Error::InvalidArgument(format!(
            "{what} inside a group: the group's receives are posted only at gpuwire_group_end, so a probe would see messages they take (a blocking one could wait for ever); probe before gpuwire_group_start or after gpuwire_group_end"
        )));
    }
    Ok(())
}

/// As MPI_Probe: blocks until a message from `source` with `tag` (wildcards allowed, as for
/// gpuwire_recv_status) can be received, and writes its source, tag and size in elements of
/// `dtype` (a gpuwire_dtype; a size that is no whole number of them is rounded down) to
/// `*status`, without receiving it: a gpuwire_recv_status from `status->source` with
/// `status->tag` into a buffer of `status->count` elements then receives it (from one thread:
/// another thread may receive it in between, as with MPI_Probe). A receive posted earlier
/// that matches the message takes it first. Sees the messages sent from host memory on every
/// backend and from device memory on MPI_STAGED, MPI_CUDA_AWARE, IPC (its control headers: a
/// header found is taken off MPI and kept for the receive that matches it) and on NCCL with
/// config.p2p_matching = GPUWIRE_P2P_MATCHING_MPI; NCCL's own device messages (the default)
/// are not MPI messages and are not seen. `source` GPUWIRE_PROC_NULL returns at once
/// (GPUWIRE_PROC_NULL, GPUWIRE_ANY_TAG, 0). Waits no longer than the communicator's timeout.
/// Local. Not inside a group (GPUWIRE_ERROR_INVALID_ARGUMENT: the group's receives are posted
/// only at its end, so a probe would report messages they take, and could wait for the
/// group's own sends for ever).
///
/// Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE,
/// GPUWIRE_ERROR_INVALID_ARGUMENT (source or tag; inside a group), GPUWIRE_ERROR_UNSUPPORTED_DTYPE (`dtype`), GPUWIRE_ERROR_TIMEOUT,
/// GPUWIRE_ERROR_COMM_BROKEN, GPUWIRE_ERROR_MPI.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_probe(comm: gpuwire_comm, source: i32, tag: i32, dtype: i32, status: *mut gpuwire_status_t) -> gpuwire_status {
    call("gpuwire_probe", || {
        non_null(status, "status")?;
        let c = boundary::comm(comm)?;
        let d = crate::types::Dtype::from_c(dtype)?;
        not_in_group("probe")?;
        let s = traced_probe(&c, source, tag, d, true)?.ok_or_else(|| Error::Internal("a blocking probe found nothing".into()))?;
        write(status, c_status(s, gpuwire_status::GPUWIRE_SUCCESS));
        Ok(())
    })
}

/// As MPI_Iprobe: gpuwire_probe without blocking. Writes 1 to `*flag` and the message's status
/// to `*status` when a message can be received now, else 0 to `*flag` (`*status` untouched).
/// Errors as gpuwire_probe.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_iprobe(comm: gpuwire_comm, source: i32, tag: i32, dtype: i32, flag: *mut i32, status: *mut gpuwire_status_t) -> gpuwire_status {
    call("gpuwire_iprobe", || {
        non_null(flag, "flag")?;
        non_null(status, "status")?;
        let c = boundary::comm(comm)?;
        let d = crate::types::Dtype::from_c(dtype)?;
        not_in_group("iprobe")?;
        match traced_probe(&c, source, tag, d, false)? {
            Some(s) => {
                write(status, c_status(s, gpuwire_status::GPUWIRE_SUCCESS));
                write(flag, 1);
            }
            None => write(flag, 0),
        }
        Ok(())
    })
}

/// `Communicator::probe`, with its `GPUWIRE_TRACE` line.
fn traced_probe(c: &Communicator, source: i32, tag: i32, d: crate::types::Dtype, block: bool) -> Result<Option<crate::request::Status>> {
    if !crate::op::tracing() {
        return c.probe(source, tag, d, block);
    }
    let t = std::time::Instant::now();
    let r = c.probe(source, tag, d, block);
    let name = if block { "probe" } else { "iprobe" };
    let found = match &r {
        Ok(Some(s)) => format!("found a message from rank {} with tag {}", s.source, s.tag),
        Ok(None) => "no message".to_string(),
        Err(_) => "failed".to_string(),
    };
    let route = format!("{}: {found}", crate::backend::probe_route(c));
    crate::op::trace_call(c, name, 0, &route, t.elapsed(), r.as_ref().map(|_| ()));
    r
}

fn finish(request: *mut gpuwire_request, wait: bool) -> Result<bool> {
    finish_by(request, wait, 0)
}

/// `finish` by a gpuwire_waitany, waitsome or waitall that holds the request (`me`: its
/// `Holding`'s thread; 0 for a call that holds none).
fn finish_by(request: *mut gpuwire_request, wait: bool, me: u64) -> Result<bool> {
    let mut ignored = crate::request::Status::EMPTY;
    finish_status(request, wait, &mut ignored, me)
}

/// `finish_by`, writing the request's status to `status` once it completed (or failed).
fn finish_status(request: *mut gpuwire_request, wait: bool, status: &mut crate::request::Status, me: u64) -> Result<bool> {
    // SAFETY: checked non-NULL by the caller.
    let h = unsafe { *request };
    if h == 0 {
        crate::runtime::check_ready()?;
        *status = crate::request::Status::EMPTY;
        return Ok(true);
    }
    crate::runtime::check_ready()?;
    // Borrowed, not cloned: this thread alone removes the request (below, once it completed).
    // A request of a group that has not ended: an error, and the request left as it was.
    let (done, s) = REQUESTS.with(h, |r| r.finish(wait, me))??;
    match done {
        Ok(true) | Err(_) => {
            *status = s;
            // A completed (or failed) request is gone, as MPI sets it to MPI_REQUEST_NULL.
            crate::request::release(h);
            write(request, 0);
        }
        Ok(false) => {}
    }
    done
}

/// Blocks until the request completes (as MPI_Wait), then sets `*request` to
/// GPUWIRE_REQUEST_NULL. Waiting on GPUWIRE_REQUEST_NULL returns at once. A request that
/// failed is also released. Thread-safe for different requests; a second thread's wait for the
/// same request blocks behind the first and then returns GPUWIRE_ERROR_INVALID_HANDLE (the first
/// reported the completion and released the request). With a timeout on the
/// request's communicator the wait gives up after it (GPUWIRE_ERROR_TIMEOUT; the communicator
/// is then broken and the operation abandoned: its buffer stays allocated until the process
/// ends, since MPI may still write it).
///
/// Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE (freed or foreign handle),
/// GPUWIRE_ERROR_INVALID_ARGUMENT (a request of a group that has not ended; `*request`
/// unchanged), GPUWIRE_ERROR_COMM_BROKEN (the communicator was broken by a timeout or
/// gpuwire_comm_abort before the request completed), GPUWIRE_ERROR_MPI,
/// GPUWIRE_ERROR_CUDA, GPUWIRE_ERROR_TIMEOUT, and the operation's own errors (a receive's
/// GPUWIRE_ERROR_COUNT_MISMATCH or GPUWIRE_ERROR_TRUNCATE, a checking-mode mismatch, ...).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_wait(request: *mut gpuwire_request) -> gpuwire_status {
    call("gpuwire_wait", || {
        non_null(request, "request")?;
        finish(request, true).map(|_| ())
    })
}

/// Frees a request without blocking, as MPI_Request_free, and sets `*request` to
/// GPUWIRE_REQUEST_NULL (also when it returns an error, but for the two argument errors below):
/// what destructors and finalizers call (gpuwire.hpp's `~request`, Python's `Request.__del__`).
/// A request whose operation is still in flight is released at once and its operation goes on,
/// as after MPI_Request_free: a send (the fire-and-forget idiom: learn of its completion
/// otherwise, e.g. from a reply) or a nonblocking collective (MPI forbids freeing a collective's
/// request; here the other ranks simply meet it) until its peers meet it, a receive until its
/// message comes, which it then takes in MPI's matching order. Its buffer is written some time
/// after the message came, as gpuwire progresses it (the progress thread, or this process's
/// later gpuwire calls; a receive into a view is unpacked by a later wait or test of this
/// process): as MPI warns, the program cannot tell when, so free a receive's request only where
/// its data is not needed (use gpuwire_cancel, then a wait, to end a receive). gpuwire keeps the
/// operation's buffers alive until it completes (the program may free the buffers' handles; wrapped memory must stay valid until
/// then), and releases them at a later wait, test or request free of this rank. As in MPI, a
/// failure of such an operation (a receive's message of another size, a checking-mode mismatch)
/// has no caller to go to: it is lost, but for a warning line on stderr. Nothing times a freed
/// send or receive out; a nonblocking collective keeps its deadline, which starts at its call:
/// on a communicator with a timeout, peers that do not meet it within the timeout break the
/// communicator (GPUWIRE_ERROR_COMM_BROKEN from its next call), as when it is waited for. At
/// gpuwire_finalize one still in flight is left to MPI (a receive still waiting
/// for its message is posted to MPI as a plain receive; a send whose receive never comes may then
/// block MPICH's MPI_Finalize). A request that has completed is released as by gpuwire_wait
/// (GPUWIRE_SUCCESS, or the operation's error). On a communicator already broken (a timeout,
/// gpuwire_comm_abort), which completes nothing more, a request not complete is abandoned: on the
/// HOST and MPI_CUDA_AWARE paths a receive not yet matched is cancelled and will not write its
/// buffer; a send the MPI cannot cancel, and operations of the other backends, are left as they
/// are and may still read or write the buffer, so keep that memory valid (a buffer from
/// gpuwire_buffer_alloc is then kept for ever); GPUWIRE_ERROR_COMM_BROKEN. Freeing
/// GPUWIRE_REQUEST_NULL returns at once. Local; thread-safe for different requests (a wait or
/// test of the same request that another thread begins during the free fails with
/// GPUWIRE_ERROR_INVALID_HANDLE).
///
/// Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE (freed or foreign handle,
/// or completed or freed meanwhile by another thread; `*request` unchanged), GPUWIRE_ERROR_INVALID_ARGUMENT (a request of a group that has not
/// ended, or one that another thread is waiting for or testing at that moment; `*request`
/// unchanged), GPUWIRE_ERROR_COMM_BROKEN (abandoned: the communicator was broken), and those of
/// gpuwire_wait for a request that completed with an error.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_request_free(request: *mut gpuwire_request) -> gpuwire_status {
    call("gpuwire_request_free", || {
        non_null(request, "request")?;
        // SAFETY: checked non-NULL above.
        let h = unsafe { *request };
        crate::runtime::check_ready()?;
        if h == 0 {
            return Ok(());
        }
        let r: Arc<Request> = REQUESTS.get(h)?;
        // A request of a group that has not ended is left as it was (as gpuwire_wait leaves it):
        // its operation starts at the group's end. So is one that another thread waits for.
        let op = r.claim_for_free()?;
        let _ = REQUESTS.remove(h);
        write(request, 0);
        op.map_or(Ok(()), |op| r.free_op(op))
    })
}

/// Cancels a receive, as MPI_Cancel: a receive whose message has not matched yet is withdrawn
/// (it will take no message, and its buffer is not written), and its request completes at once:
/// the request must still be completed (gpuwire_wait, gpuwire_test, ...) or freed, as in MPI;
/// its status (gpuwire_wait_status, ...) has `cancelled` 1, MPI's empty source, tag and count
/// otherwise. A receive whose message has matched, a send (MPI-4 deprecates cancelling sends), a
/// nonblocking collective, and a request already complete are not cancelled: the request
/// completes as it would have, its status `cancelled` 0. Withdrawn are the receives into host
/// memory (on every backend) and into device memory on the MPI_CUDA_AWARE path, contiguous or
/// views (a receive queued on gpuwire's engine behind earlier operations of its communicator
/// once the engine has started it); the device receives of the NCCL and IPC paths and of the
/// stream-ordered MPI_STAGED path are not (their data movement is already enqueued on a stream):
/// they complete when their messages come. A common use: receives posted ahead (e.g. from
/// GPUWIRE_ANY_SOURCE) that no message will come for, cancelled and waited for at the end (not
/// inside a group: a group's end waits for its receives, and cancel is refused until then).
/// Never blocks; local; `*request` is not changed. Thread-safe for different requests.
///
/// Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE (freed or foreign handle,
/// or completed meanwhile by another thread), GPUWIRE_ERROR_INVALID_ARGUMENT (a request of a
/// group that has not ended, or one that another thread is waiting for or testing at that
/// moment: the request left as it was). GPUWIRE_REQUEST_NULL: GPUWIRE_SUCCESS, nothing done.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_cancel(request: *mut gpuwire_request) -> gpuwire_status {
    call("gpuwire_cancel", || {
        non_null(request, "request")?;
        // SAFETY: checked non-NULL above.
        let h = unsafe { *request };
        crate::runtime::check_ready()?;
        if h == 0 {
            return Ok(());
        }
        REQUESTS.with(h, |r| r.cancel())?.map(|_| ())
    })
}

/// Writes 1 to `*flag` and sets `*request` to GPUWIRE_REQUEST_NULL if the request has
/// completed, else writes 0 (as MPI_Test). Never blocks: a request that another thread waits
/// for or tests meanwhile is GPUWIRE_ERROR_INVALID_ARGUMENT (erroneous in MPI), `*flag` and the
/// request left as they were. Errors as gpuwire_wait.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_test(request: *mut gpuwire_request, flag: *mut i32) -> gpuwire_status {
    call("gpuwire_test", || {
        non_null(request, "request")?;
        non_null(flag, "flag")?;
        let done = finish(request, false)?;
        write(flag, done as i32);
        Ok(())
    })
}

/// gpuwire_wait, writing the request's status to `*status` (see gpuwire_status_t: what a
/// receive matched; MPI's empty status for other requests and GPUWIRE_REQUEST_NULL), as
/// MPI_Wait with a status. Errors as gpuwire_wait (`*status` then untouched).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_wait_status(request: *mut gpuwire_request, status: *mut gpuwire_status_t) -> gpuwire_status {
    call("gpuwire_wait_status", || {
        non_null(request, "request")?;
        non_null(status, "status")?;
        let mut s = crate::request::Status::EMPTY;
        finish_status(request, true, &mut s, 0)?;
        write(status, c_status(s, gpuwire_status::GPUWIRE_SUCCESS));
        Ok(())
    })
}

/// gpuwire_test, writing the request's status to `*status` when it completed (`*flag` 1), as
/// MPI_Test with a status. Errors as gpuwire_test.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_test_status(request: *mut gpuwire_request, flag: *mut i32, status: *mut gpuwire_status_t) -> gpuwire_status {
    call("gpuwire_test_status", || {
        non_null(request, "request")?;
        non_null(flag, "flag")?;
        non_null(status, "status")?;
        let mut s = crate::request::Status::EMPTY;
        let done = finish_status(request, false, &mut s, 0)?;
        if done {
            write(status, c_status(s, gpuwire_status::GPUWIRE_SUCCESS));
        }
        write(flag, done as i32);
        Ok(())
    })
}

/// The requests of an array (`count` of them; NULL allowed for count 0), with a request that
/// appears twice refused before anything is done (as MPI: each request once).
fn request_array<'a>(count: i32, requests: *mut gpuwire_request) -> Result<&'a mut [gpuwire_request]> {
    crate::runtime::check_ready()?;
    if count < 0 {
        return Err(Error::InvalidArgument(format!("count {count} is negative")));
    }
    if count == 0 {
        return Ok(&mut []);
    }
    non_null(requests, "requests")?;
    // SAFETY: the caller promises `count` requests.
    let given = unsafe { std::slice::from_raw_parts_mut(requests, count as usize) };
    let mut sorted: Vec<(gpuwire_request, usize)> = given.iter().copied().zip(0..).filter(|(h, _)| *h != 0).collect();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(Error::InvalidArgument(format!(
            "requests[{}] and requests[{}] are the same request ({:#x}): each request may appear once; nothing was done",
            w[0].1, w[1].1, w[0].0
        )));
    }
    Ok(given)
}

/// One pass of gpuwire_testany / gpuwire_waitany: the index of the first request of the array
/// that completed (released, its status in `s`), `Ok(None)` when none did; an error names its
/// index in `index`. `me`: the `Holding` of gpuwire_waitany, 0 for gpuwire_testany.
fn test_any(reqs: &mut [gpuwire_request], s: &mut crate::request::Status, index: &mut i32, me: u64) -> Result<Option<usize>> {
    for i in 0..reqs.len() {
        if reqs[i] == 0 {
            continue;
        }
        *index = i as i32;
        if finish_status(&mut reqs[i], false, s, me)? {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

fn with_index(i: i32, e: Error) -> Error {
    e.reworded(format!("request {i}: {}", e.detail()))
}

/// Waits until one of the `count` requests completes, as MPI_Waitany: writes its index to
/// `*index`, sets it to GPUWIRE_REQUEST_NULL and writes its status to `*status` (may be NULL:
/// ignored). When every request is GPUWIRE_REQUEST_NULL (or `count` is 0) it returns at once
/// with `*index` GPUWIRE_UNDEFINED and MPI's empty status (as MPI). A request that fails is
/// the one that completed: its error is returned, `*index` names it and it is released.
/// Requests are tested in array order (the lowest completed index wins). With timeouts: once
/// the shortest timeout among the requests' communicators has passed with none complete, the
/// first request of a communicator with a timeout is waited for as by gpuwire_wait (up to its
/// own timeout: its TIMEOUT then names its index); requests of communicators without one do
/// not extend the wait.
///
/// Every request of the array is waited for during the whole call, as gpuwire_wait waits for its
/// one: another thread's cancel, free or test of one of them is refused meanwhile
/// (GPUWIRE_ERROR_INVALID_ARGUMENT, the request left as it was), and its wait of one blocks until
/// this call returns (then GPUWIRE_ERROR_INVALID_HANDLE where this call completed it).
///
/// Errors: GPUWIRE_ERROR_NULL_ARGUMENT (`requests` with count > 0, `index`),
/// GPUWIRE_ERROR_INVALID_ARGUMENT (negative count, a request twice, a request of a group that
/// has not ended), GPUWIRE_ERROR_TIMEOUT, and those of gpuwire_wait.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_waitany(count: i32, requests: *mut gpuwire_request, index: *mut i32, status: *mut gpuwire_status_t) -> gpuwire_status {
    call("gpuwire_waitany", || {
        non_null(index, "index")?;
        let reqs = request_array(count, requests)?;
        let mut s = crate::request::Status::EMPTY;
        let mut at = crate::types::GPUWIRE_UNDEFINED;
        let holding = Holding::new(requests, count);
        let (deadline, first_timed) = ready_to_block_any(reqs, &holding)?;
        let mut spins = 0u32;
        loop {
            if reqs.iter().all(|h| *h == 0) {
                write(index, crate::types::GPUWIRE_UNDEFINED);
                if !status.is_null() {
                    write(status, c_status(crate::request::Status::EMPTY, gpuwire_status::GPUWIRE_SUCCESS));
                }
                return Ok(());
            }
            match test_any(reqs, &mut s, &mut at, holding.me) {
                Ok(Some(i)) => {
                    write(index, i as i32);
                    if !status.is_null() {
                        write(status, c_status(s, gpuwire_status::GPUWIRE_SUCCESS));
                    }
                    return Ok(());
                }
                Ok(None) => {}
                Err(e) => {
                    write(index, at);
                    return Err(with_index(at, e));
                }
            }
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                // Each request's own wait gives up at its timeout (and breaks its communicator);
                // that one has one (none completed: it is still active). A request of a
                // communicator without a timeout waited for here blocked for ever.
                let first = first_timed;
                let r = finish_by(&mut reqs[first], true, holding.me);
                write(index, first as i32);
                return r.map(|_| ()).map_err(|e| with_index(first as i32, e));
            }
            backoff(&mut spins);
        }
    })
}

/// Before gpuwire_waitany or gpuwire_waitsome blocks: every active request resolved and ready
/// to be waited for (else the error, naming its index, and nothing done), and held for the call
/// (`holding`); the earliest deadline among their communicators' timeouts, and the first request
/// of a communicator with a timeout (the one waited for at that deadline, by gpuwire_wait's
/// rules).
fn ready_to_block_any(reqs: &[gpuwire_request], holding: &Holding) -> Result<(Option<std::time::Instant>, usize)> {
    let mut deadline: Option<std::time::Instant> = None;
    let mut first_timed = 0;
    for (i, h) in reqs.iter().enumerate().filter(|(_, h)| **h != 0) {
        let r = REQUESTS.get(*h).map_err(|e| with_index(i as i32, e))?;
        r.ready_to_block().map_err(|e| with_index(i as i32, e))?;
        holding.hold(&r);
        if let Some(t) = r.comm().config().timeout {
            let d = std::time::Instant::now() + t;
            first_timed = if deadline.is_none() { i } else { first_timed };
            deadline = Some(deadline.map_or(d, |x: std::time::Instant| x.min(d)));
        }
    }
    Ok((deadline, first_timed))
}

/// The hold of a gpuwire_waitany, gpuwire_waitsome or gpuwire_waitall on its requests for its
/// whole call (`Request::hold`), by the calling thread: when dropped (at every return, and
/// unwinding) it lets go of those still in the caller's array (the call did not complete them).
struct Holding {
    requests: *mut gpuwire_request,
    count: usize,
    me: u64,
}

impl Holding {
    /// For the caller's array of `count` requests (`request_array` accepted it).
    fn new(requests: *mut gpuwire_request, count: i32) -> Holding {
        Holding { requests, count: count.max(0) as usize, me: crate::comm::thread_id() }
    }

    fn hold(&self, r: &crate::request::Request) {
        r.hold(self.me);
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        for i in 0..self.count {
            // SAFETY: the caller's array of `count` requests, valid for the call.
            let h = unsafe { *self.requests.add(i) };
            if h != 0 {
                let _ = REQUESTS.with(h, |r| r.unhold(self.me));
            }
        }
    }
}

/// The pause between two passes of a waiting loop: a spin, then 20 µs sleeps.
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins > 1000 {
        std::thread::sleep(std::time::Duration::from_micros(20));
    } else {
        std::hint::spin_loop();
    }
}

/// As MPI_Testany, without blocking: when one of the `count` requests has completed, writes 1
/// to `*flag`, its index to `*index`, its status to `*status` (may be NULL) and releases it;
/// else 0 to `*flag` and GPUWIRE_UNDEFINED to `*index`. When every request is
/// GPUWIRE_REQUEST_NULL (or `count` is 0): `*flag` 1, `*index` GPUWIRE_UNDEFINED, MPI's empty
/// status (as MPI). A request that failed is released, `*index` names it and its error is
/// returned. An array with a freed or foreign handle, or a request of a group that has not
/// ended, is refused before anything is tested (`*index` and `*flag` unwritten). Errors as
/// gpuwire_waitany, plus GPUWIRE_ERROR_NULL_ARGUMENT (`flag`).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_testany(count: i32, requests: *mut gpuwire_request, index: *mut i32, flag: *mut i32, status: *mut gpuwire_status_t) -> gpuwire_status {
    call("gpuwire_testany", || {
        non_null(index, "index")?;
        non_null(flag, "flag")?;
        let reqs = request_array(count, requests)?;
        // Every handle resolved, and every request ready to test, before any is tested, as in
        // gpuwire_waitany: a freed or foreign handle refuses the array, `*index` unwritten,
        // wherever it stands.
        ready_to_test_all(reqs)?;
        let mut s = crate::request::Status::EMPTY;
        let mut at = crate::types::GPUWIRE_UNDEFINED;
        let all_null = reqs.iter().all(|h| *h == 0);
        let found = match test_any(reqs, &mut s, &mut at, 0) {
            Ok(f) => f,
            Err(e) => {
                write(index, at);
                return Err(with_index(at, e));
            }
        };
        write(index, found.map_or(crate::types::GPUWIRE_UNDEFINED, |i| i as i32));
        write(flag, (all_null || found.is_some()) as i32);
        if (all_null || found.is_some()) && !status.is_null() {
            write(status, c_status(s, gpuwire_status::GPUWIRE_SUCCESS));
        }
        Ok(())
    })
}

/// As MPI_Testall, without blocking: writes 1 to `*flag` when all `count` requests have
/// completed — they are then released (set to GPUWIRE_REQUEST_NULL) and, when `statuses` is
/// not NULL, `statuses[i]` holds request i's status with its own error in `error` — else 0,
/// leaving every request active (those that completed stay so: a later test or wait returns at
/// once with their status). GPUWIRE_REQUEST_NULL entries count as complete (empty status). A
/// request that failed is released at once (set to GPUWIRE_REQUEST_NULL; its status entry
/// says its error) and the first error is returned, naming its index. An array with a freed
/// or foreign handle, or a request of a group that has not ended, is refused before anything is
/// tested, and left as it was.
///
/// Errors as gpuwire_waitall, plus GPUWIRE_ERROR_NULL_ARGUMENT (`flag`),
/// GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_testall(count: i32, requests: *mut gpuwire_request, flag: *mut i32, statuses: *mut gpuwire_status_t) -> gpuwire_status {
    call("gpuwire_testall", || {
        non_null(flag, "flag")?;
        let reqs = request_array(count, requests)?;
        // Every handle resolved, and every request ready to test, before any is tested: a bad
        // entry refuses the array as it was (a failure tested before it is not released unseen).
        let mut resolved = Vec::with_capacity(reqs.len());
        for (i, h) in reqs.iter().enumerate() {
            if *h == 0 {
                resolved.push(None);
                continue;
            }
            let r = REQUESTS.get(*h).and_then(|r| r.ready_to_test().map(|()| r));
            resolved.push(Some(r.map_err(|e| with_index(i as i32, e))?));
        }
        let mut out = vec![c_status(crate::request::Status::EMPTY, gpuwire_status::GPUWIRE_SUCCESS); reqs.len()];
        let mut first: Option<Error> = None;
        let mut all = true;
        for (i, (h, r)) in reqs.iter_mut().zip(&resolved).enumerate() {
            let Some(r) = r else { continue };
            // Never blocks: a request another thread waits for or tests meanwhile refuses the
            // call (those completed before it stay active, as where not all completed).
            match r.try_test().map_err(|e| with_index(i as i32, e))? {
                Ok(true) => out[i] = c_status(r.status(), gpuwire_status::GPUWIRE_SUCCESS),
                Ok(false) => all = false,
                Err(e) => {
                    out[i] = c_status(r.status(), e.status());
                    r.mark_reported();
                    let _ = REQUESTS.remove(*h);
                    *h = 0;
                    first.get_or_insert(with_index(i as i32, e));
                }
            }
        }
        if all {
            for (h, r) in reqs.iter_mut().zip(&resolved).filter(|(h, _)| **h != 0) {
                if let Some(r) = r {
                    r.mark_reported();
                }
                let _ = REQUESTS.remove(*h);
                *h = 0;
            }
            if !statuses.is_null() {
                for (i, s) in out.iter().enumerate() {
                    // SAFETY: the caller promises `count` statuses when not NULL.
                    unsafe { statuses.add(i).write(*s) };
                }
            }
        } else if !statuses.is_null() {
            for (i, s) in out.iter().enumerate().filter(|(_, s)| s.error != 0) {
                // SAFETY: as above.
                unsafe { statuses.add(i).write(*s) };
            }
        }
        write(flag, all as i32);
        first.map_or(Ok(()), Err)
    })
}

/// One pass of gpuwire_testsome / gpuwire_waitsome: every active request tested once; each that
/// completed (or failed) is released, its index appended to `indices` and its status (with its
/// own error in `error`) to `statuses` (when not NULL), in array order. Returns how many, and
/// the first failure, naming its index (also of a request refused, which stays active and is not
/// listed). `me`: the `Holding` of gpuwire_waitsome, 0 for gpuwire_testsome.
fn test_some(reqs: &mut [gpuwire_request], indices: *mut i32, statuses: *mut gpuwire_status_t, me: u64) -> (usize, Option<Error>) {
    let (mut n, mut first) = (0, None);
    for i in 0..reqs.len() {
        if reqs[i] == 0 {
            continue;
        }
        let mut s = crate::request::Status::EMPTY;
        let code = match finish_status(&mut reqs[i], false, &mut s, me) {
            Ok(false) => continue,
            Ok(true) => gpuwire_status::GPUWIRE_SUCCESS,
            Err(e) => {
                let code = e.status();
                let released = reqs[i] == 0;
                first.get_or_insert(with_index(i as i32, e));
                if !released {
                    // Refused (another thread waits for it meanwhile): left as it was.
                    continue;
                }
                code
            }
        };
        // SAFETY: the caller promises `count` entries in `indices` (and `statuses` when not
        // NULL); n < count.
        unsafe {
            indices.add(n).write(i as i32);
            if !statuses.is_null() {
                statuses.add(n).write(c_status(s, code));
            }
        }
        n += 1;
    }
    (n, first)
}

/// The arrays of gpuwire_testsome / gpuwire_waitsome, checked: `None` when every request is
/// GPUWIRE_REQUEST_NULL (`*outcount` then GPUWIRE_UNDEFINED, as MPI).
fn some_array<'a>(count: i32, requests: *mut gpuwire_request, outcount: *mut i32, indices: *mut i32) -> Result<Option<&'a mut [gpuwire_request]>> {
    non_null(outcount, "outcount")?;
    let reqs = request_array(count, requests)?;
    if !reqs.is_empty() {
        non_null(indices, "indices")?;
    }
    if reqs.iter().all(|h| *h == 0) {
        write(outcount, crate::types::GPUWIRE_UNDEFINED);
        return Ok(None);
    }
    Ok(Some(reqs))
}

/// Every active request of the array ready to be tested (resolved, not of a group that has not
/// ended), before any is tested: else the error, naming its index, and nothing done.
fn ready_to_test_all(reqs: &[gpuwire_request]) -> Result<()> {
    for (i, h) in reqs.iter().enumerate().filter(|(_, h)| **h != 0) {
        REQUESTS.with(*h, |r| r.ready_to_test()).and_then(|r| r).map_err(|e| with_index(i as i32, e))?;
    }
    Ok(())
}

/// As MPI_Testsome, without blocking: tests every request of the array once and releases each
/// that has completed (sets it to GPUWIRE_REQUEST_NULL), writing how many to `*outcount`, their
/// indices, in array order, to `indices[0 .. *outcount]` and their statuses to
/// `statuses[0 .. *outcount]` (`statuses` may be NULL: ignored; each status's `error` is the
/// request's own). `*outcount` is 0 when none has completed, and GPUWIRE_UNDEFINED when every
/// request is GPUWIRE_REQUEST_NULL (or `count` is 0), as MPI. `indices` (and `statuses`) must
/// hold `count` entries. A request that failed is among those completed (released, its status
/// saying its error): the first failure is returned, naming its index, with every array written
/// as on success. An array with a freed or foreign handle, or a request of a group that has not
/// ended, is refused before anything is tested (nothing written). Local; never blocks.
///
/// Errors: GPUWIRE_ERROR_NULL_ARGUMENT (`requests` or `indices` with count > 0, `outcount`),
/// GPUWIRE_ERROR_INVALID_ARGUMENT (negative count, a request twice, a request of a group that
/// has not ended, one another thread waits for or tests), GPUWIRE_ERROR_INVALID_HANDLE, and
/// those of gpuwire_wait for a request that failed.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_testsome(count: i32, requests: *mut gpuwire_request, outcount: *mut i32, indices: *mut i32, statuses: *mut gpuwire_status_t) -> gpuwire_status {
    call("gpuwire_testsome", || {
        let Some(reqs) = some_array(count, requests, outcount, indices)? else { return Ok(()) };
        ready_to_test_all(reqs)?;
        let (n, first) = test_some(reqs, indices, statuses, 0);
        write(outcount, n as i32);
        first.map_or(Ok(()), Err)
    })
}

/// As MPI_Waitsome: waits until at least one of the requests completes, then releases every
/// one that has completed by then, writing `*outcount`, `indices` and `statuses` as
/// gpuwire_testsome (GPUWIRE_UNDEFINED at once when every request is GPUWIRE_REQUEST_NULL).
/// Timeouts as gpuwire_waitany: once the shortest timeout among the requests' communicators has
/// passed with none complete, the first request of a communicator with a timeout is waited for as
/// by gpuwire_wait (its TIMEOUT then names its index, `*outcount` 1). Every request of the
/// array is waited for during the whole call, as by gpuwire_waitany. Errors as
/// gpuwire_testsome, plus GPUWIRE_ERROR_TIMEOUT.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_waitsome(count: i32, requests: *mut gpuwire_request, outcount: *mut i32, indices: *mut i32, statuses: *mut gpuwire_status_t) -> gpuwire_status {
    call("gpuwire_waitsome", || {
        let Some(reqs) = some_array(count, requests, outcount, indices)? else { return Ok(()) };
        let holding = Holding::new(requests, count);
        let (deadline, first_timed) = ready_to_block_any(reqs, &holding)?;
        let mut spins = 0u32;
        loop {
            let (n, first) = test_some(reqs, indices, statuses, holding.me);
            if n > 0 || first.is_some() {
                write(outcount, n as i32);
                return first.map_or(Ok(()), Err);
            }
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                // As gpuwire_waitany: that request's own wait gives up at its timeout.
                let i = first_timed;
                let mut s = crate::request::Status::EMPTY;
                let r = finish_status(&mut reqs[i], true, &mut s, holding.me);
                let code = r.as_ref().map_or_else(|e| e.status(), |_| gpuwire_status::GPUWIRE_SUCCESS);
                // SAFETY: as in `test_some`.
                unsafe {
                    indices.write(i as i32);
                    if !statuses.is_null() {
                        statuses.write(c_status(s, code));
                    }
                }
                write(outcount, 1);
                return r.map(|_| ()).map_err(|e| with_index(i as i32, e));
            }
            backoff(&mut spins);
        }
    })
}

/// Waits for all `count` requests of the array `requests` (as MPI_Waitall), setting each to
/// GPUWIRE_REQUEST_NULL. Every request is waited for even when one fails; the first failure is
/// returned. NULL requests in the array are skipped. A request may appear only once (as in
/// MPI): an array that holds the same request twice is refused before anything is waited for,
/// and left as it was; so is an array with a freed or foreign handle, or with a request of a
/// group that has not ended (as gpuwire_wait refuses it). Every request of the array is waited
/// for during the whole call, as by gpuwire_waitany. A request of a communicator with a timeout
/// times out that long after the call began (not after the requests before it): the call blocks
/// at most the longest timeout of its requests' communicators.
///
/// Errors: GPUWIRE_ERROR_NULL_ARGUMENT (`requests` NULL with count > 0),
/// GPUWIRE_ERROR_INVALID_ARGUMENT (negative count, a request twice, a request of an open group),
/// GPUWIRE_ERROR_INVALID_HANDLE (a freed or foreign handle, naming its index), and those of
/// gpuwire_wait.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_waitall(count: i32, requests: *mut gpuwire_request) -> gpuwire_status {
    call("gpuwire_waitall", || {
        crate::runtime::check_ready()?;
        if count < 0 {
            return Err(Error::InvalidArgument(format!("count {count} is negative")));
        }
        if count == 0 {
            return Ok(());
        }
        non_null(requests, "requests")?;
        // SAFETY: the caller promises `count` requests.
        let given = unsafe { std::slice::from_raw_parts(requests, count as usize) };
        // The duplicate check sorts a copy: on the stack for up to 128 requests.
        let mut few = [(0 as gpuwire_request, 0usize); 128];
        let mut many = Vec::new();
        let sorted: &mut [(gpuwire_request, usize)] = if given.len() <= few.len() {
            let mut n = 0;
            for (i, h) in given.iter().enumerate().filter(|(_, h)| **h != 0) {
                few[n] = (*h, i);
                n += 1;
            }
            &mut few[..n]
        } else {
            many.extend(given.iter().copied().zip(0..).filter(|(h, _)| *h != 0));
            &mut many
        };
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(Error::InvalidArgument(format!(
                "requests[{}] and requests[{}] are the same request ({:#x}): each request may appear once; nothing was waited for",
                w[0].1, w[1].1, w[0].0
            )));
        }
        // A freed or foreign handle, or a request of a group that has not ended (or one queued
        // behind this thread's group), refuses the array before anything is waited for, as
        // gpuwire_waitany and gpuwire_testall do: waiting for the others first could block for
        // ever (their peers' operations may come after the group, or after this call), and
        // would complete some of them in a call that is refused. Each is held for the call.
        let holding = Holding::new(requests, count);
        for (i, h) in given.iter().enumerate().filter(|(_, h)| **h != 0) {
            REQUESTS.with(*h, |r| r.ready_to_block().map(|()| holding.hold(r))).and_then(|r| r).map_err(|e| {
                let e = with_index(i as i32, e);
                e.reworded(format!("{}; nothing was waited for", e.detail()))
            })?;
        }
        let mut first: Option<Error> = None;
        // Each request's timeout counts from here, not from its turn.
        let _since = crate::comm::Since::now();
        for i in 0..count as usize {
            // SAFETY: the caller promises `count` requests.
            let r = unsafe { requests.add(i) };
            if let Err(e) = finish_by(r, true, holding.me) {
                first.get_or_insert(with_index(i as i32, e));
            }
        }
        first.map_or(Ok(()), Err)
    })
}

/// Sends `sendbuf` to `dest` and receives `recvbuf` from `source` in one call, as MPI_Sendrecv
/// (deadlock-free exchange; either rank may be GPUWIRE_PROC_NULL, e.g. at the edge of a halo
/// exchange). The buffers must not overlap. The receive takes exactly `recvbuf`'s count, as
/// gpuwire_recv. Errors as gpuwire_send and gpuwire_recv.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn gpuwire_sendrecv(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    dest: i32,
    sendtag: i32,
    recvbuf: gpuwire_buffer,
    source: i32,
    recvtag: i32,
    stream: *mut c_void,
) -> gpuwire_status {
    call("gpuwire_sendrecv", || {
        let pin = crate::pin::pin([comm, sendbuf, recvbuf]);
        let (c, s, r) = boundary::comm_and_buffers_pinned(&pin, comm, sendbuf, recvbuf)?;
        let (s, r) = (s?, r?);
        // The common case's short path, where it is the same as the general one (`lean`).
        if let Some(done) = crate::lean::sendrecv(&c, &s, dest, sendtag, &r, source, recvtag, st(stream)) {
            return done;
        }
        issue(&c, Op::Sendrecv { send: s.to_arc(), dest, sendtag, recv: r.to_arc(), source, recvtag }, st(stream), false).map(|_| ())
    })
}

/// Blocks until every rank has called it, as MPI_Barrier. Collective.
///
/// Errors: GPUWIRE_ERROR_INVALID_HANDLE, GPUWIRE_ERROR_MPI, GPUWIRE_ERROR_TIMEOUT (with a
/// timeout on the communicator, checking mode on or off: another rank did not call it in time;
/// the communicator is then broken), GPUWIRE_ERROR_COMM_BROKEN.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_barrier(comm: gpuwire_comm, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_barrier", || issue(&boundary::comm(comm)?, Op::Barrier, st(stream), false).map(|_| ()))
}

/// Broadcasts all of `buf`'s elements from `root` to every rank, as MPI_Bcast. Collective; every
/// rank passes a buffer of the same count and datatype.
///
/// Errors: GPUWIRE_ERROR_INVALID_HANDLE, GPUWIRE_ERROR_INVALID_ARGUMENT (root out of range),
/// GPUWIRE_ERROR_COUNT_MISMATCH / DTYPE_MISMATCH / ROOT_MISMATCH / REMOTE_ARGUMENT (checking
/// mode, on every rank), GPUWIRE_ERROR_BACKEND_UNAVAILABLE, GPUWIRE_ERROR_MPI, GPUWIRE_ERROR_CUDA.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_bcast(comm: gpuwire_comm, buf: gpuwire_buffer, root: i32, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_bcast", || {
        let c = boundary::comm(comm)?;
        collective(&c, "bcast", || boundary::buffer(buf), |b| issue(&c, Op::Bcast { buf: b, root }, st(stream), false).map(|_| ()))
    })
}

/// Reduces every rank's `sendbuf` element-wise with `op` (a gpuwire_op) into the root's
/// `recvbuf`, as MPI_Reduce (AVG: the sum divided by the number of ranks). `recvbuf` is only
/// significant at the root (others may pass GPUWIRE_BUFFER_NULL; a handle they pass is still
/// checked: a freed one is GPUWIRE_ERROR_INVALID_HANDLE there); at the root, passing the
/// same buffer as `sendbuf` reduces in place. Both hold the same count and datatype.
///
/// Collective. Errors: those of gpuwire_bcast, plus GPUWIRE_ERROR_UNSUPPORTED_OP (MIN/MAX on
/// complex, bitwise and logical ops on anything but integers, MINLOC/MAXLOC on anything but
/// the pair datatypes, other ops on the pair datatypes: on every rank, nothing sent) and
/// GPUWIRE_ERROR_INVALID_ARGUMENT (unknown op code, overlapping buffers).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_reduce(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    op: i32,
    root: i32,
    stream: *mut c_void,
) -> gpuwire_status {
    call("gpuwire_reduce", || {
        let c = boundary::comm(comm)?;
        collective(
            &c,
            "reduce",
            || Ok((boundary::buffer(sendbuf)?, boundary::buffer_opt(recvbuf)?, ReduceOp::from_c(op)?)),
            |(s, r, op)| issue(&c, Op::Reduce { send: s, recv: r, op, root }, st(stream), false).map(|_| ()),
        )
    })
}

/// Reduces every rank's `sendbuf` element-wise with `op` and leaves the result in every rank's
/// `recvbuf`, as MPI_Allreduce / ncclAllReduce. In place when `sendbuf` and `recvbuf` are the
/// same buffer (or the same memory). Both hold the same count and datatype on every rank.
///
/// Collective. Errors as gpuwire_reduce.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_allreduce(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    op: i32,
    stream: *mut c_void,
) -> gpuwire_status {
    call("gpuwire_allreduce", || {
        let pin = crate::pin::pin([comm, sendbuf, recvbuf]);
        let (c, s, r) = boundary::comm_and_buffers_pinned(&pin, comm, sendbuf, recvbuf)?;
        match (s, r, ReduceOp::from_c(op)) {
            // The common case's short path, where it is the same as the general one (`lean`).
            (Ok(s), Ok(r), Ok(op)) => match crate::lean::allreduce(&pin, &c, &s, &r, op, st(stream)) {
                Some(done) => done,
                None => allreduce_general(&c, Ok(s), Ok(r), Ok(op), st(stream)),
            },
            (s, r, op) => allreduce_general(&c, s, r, op, st(stream)),
        }
    })
}

/// `gpuwire_allreduce`'s general path, out of line: its locals stay out of the frame that the
/// lean path's launch returns to (each of that frame's lines is read again after a launch).
#[inline(never)]
fn allreduce_general(c: &Arc<Communicator>, s: Result<Borrowed<'_, Buffer>>, r: Result<Borrowed<'_, Buffer>>, op: Result<ReduceOp>, stream: Stream) -> Result<()> {
    collective(
        c,
        "allreduce",
        || Ok((s?.to_arc(), r?.to_arc(), op?)),
        |(s, r, op)| issue(c, Op::Allreduce { send: s, recv: r, op }, stream, false).map(|_| ()),
    )
}

/// Gathers every rank's `sendbuf` (n elements, the same n on every rank) into every rank's
/// `recvbuf` (size x n elements, rank r's block at r x n), as MPI_Allgather / ncclAllGather.
/// In place when `sendbuf` is a view of exactly this rank's block of `recvbuf`.
///
/// Collective. Errors as gpuwire_bcast (GPUWIRE_ERROR_COUNT_MISMATCH when recvbuf's count is
/// not size x n).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_allgather(comm: gpuwire_comm, sendbuf: gpuwire_buffer, recvbuf: gpuwire_buffer, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_allgather", || {
        let (c, s, r) = boundary::comm_and_buffers(comm, sendbuf, recvbuf)?;
        collective(
            &c,
            "allgather",
            || Ok((s?, r?)),
            |(s, r)| issue(&c, Op::Allgather { send: s, recv: r }, st(stream), false).map(|_| ()),
        )
    })
}

/// Gathers blocks of different lengths into every rank's `recvbuf`, placed contiguously in rank
/// order with no padding, as MPI_Allgatherv with displacements = prefix sums of the counts.
/// `recvcounts` has one entry per rank (rank r sends recvcounts[r] elements, which must equal
/// its sendbuf's count); pass NULL to let gpuwire exchange the counts (one extra
/// MPI_Allgather). `recvbuf` holds the sum of the counts. In place when `sendbuf` is a view of
/// exactly this rank's block of `recvbuf`.
///
/// Collective. Errors as gpuwire_allgather, plus GPUWIRE_ERROR_INVALID_ARGUMENT (a negative
/// count); in checking mode, GPUWIRE_ERROR_COUNT_MISMATCH on every rank when ranks passed
/// different `recvcounts`.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_allgatherv(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    recvcounts: *const i64,
    stream: *mut c_void,
) -> gpuwire_status {
    call("gpuwire_allgatherv", || {
        let c = boundary::comm(comm)?;
        let counts = if recvcounts.is_null() {
            None
        } else {
            // SAFETY: the caller promises one entry per rank.
            Some(unsafe { std::slice::from_raw_parts(recvcounts, c.size() as usize) })
        };
        collective(
            &c,
            "allgatherv",
            || Ok((boundary::buffer(sendbuf)?, boundary::buffer(recvbuf)?)),
            |(s, r)| issue(&c, Op::Allgatherv { send: s, recv: r, counts: counts.map(|c| c.to_vec()) }, st(stream), false).map(|_| ()),
        )
    })
}

/// Reduces every rank's `sendbuf` (size x n elements) element-wise with `op` and leaves block r
/// of the result (n elements) in rank r's `recvbuf`, as MPI_Reduce_scatter_block /
/// ncclReduceScatter. The buffers must not overlap. (gpuwire_reduce_scatterv is the form with
/// one count per rank, as MPI_Reduce_scatter.)
///
/// Collective. Errors as gpuwire_reduce.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_reduce_scatter_block(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    op: i32,
    stream: *mut c_void,
) -> gpuwire_status {
    reduce_scatter_block("gpuwire_reduce_scatter_block", comm, sendbuf, recvbuf, op, stream)
}

/// Deprecated: the old name of gpuwire_reduce_scatter_block (MPI_Reduce_scatter_block), kept
/// for existing callers; it is not MPI_Reduce_scatter, which is gpuwire_reduce_scatterv.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_reduce_scatter(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    op: i32,
    stream: *mut c_void,
) -> gpuwire_status {
    reduce_scatter_block("gpuwire_reduce_scatter", comm, sendbuf, recvbuf, op, stream)
}

fn reduce_scatter_block(name: &'static str, comm: gpuwire_comm, sendbuf: gpuwire_buffer, recvbuf: gpuwire_buffer, op: i32, stream: *mut c_void) -> gpuwire_status {
    call(name, || {
        let (c, s, r) = boundary::comm_and_buffers(comm, sendbuf, recvbuf)?;
        collective(
            &c,
            "reduce_scatter",
            || Ok((s?, r?, ReduceOp::from_c(op)?)),
            |(s, r, op)| issue(&c, Op::ReduceScatter { send: s, recv: r, op }, st(stream), false).map(|_| ()),
        )
    })
}

/// Inclusive prefix reduction in rank order, as MPI_Scan: rank r's `recvbuf` receives the
/// element-wise reduction with `op` of the `sendbuf`s of ranks 0..=r. Both hold the same count
/// and datatype on every rank; in place when `sendbuf` and `recvbuf` are the same buffer (or
/// the same memory). Every datatype x op of gpuwire_allreduce, with its semantics (AVG: the sum
/// divided by the number of ranks combined, r + 1). NCCL has no scan: on NCCL communicators
/// device buffers take the communicator's staged MPI path (the stream's earlier work is waited
/// for); MPI_STAGED and MPI_CUDA_AWARE reduce a host copy with one MPI_Scan.
///
/// Collective. Errors as gpuwire_allreduce.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_scan(comm: gpuwire_comm, sendbuf: gpuwire_buffer, recvbuf: gpuwire_buffer, op: i32, stream: *mut c_void) -> gpuwire_status {
    scan("gpuwire_scan", comm, sendbuf, recvbuf, op, stream, false)
}

/// Exclusive prefix reduction in rank order, as MPI_Exscan: rank r > 0's `recvbuf` receives
/// the reduction with `op` of the `sendbuf`s of ranks 0..r-1 (rank 1: rank 0's data). Rank 0's
/// `recvbuf` is left untouched (MPI leaves it undefined); it is not significant there, as in
/// MPI, and may be GPUWIRE_BUFFER_NULL. AVG divides by r. Otherwise as gpuwire_scan (in place
/// when both are the same buffer).
///
/// Collective. Errors as gpuwire_allreduce.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_exscan(comm: gpuwire_comm, sendbuf: gpuwire_buffer, recvbuf: gpuwire_buffer, op: i32, stream: *mut c_void) -> gpuwire_status {
    scan("gpuwire_exscan", comm, sendbuf, recvbuf, op, stream, true)
}

fn scan(name: &'static str, comm: gpuwire_comm, sendbuf: gpuwire_buffer, recvbuf: gpuwire_buffer, op: i32, stream: *mut c_void, exclusive: bool) -> gpuwire_status {
    call(name, || {
        let c = boundary::comm(comm)?;
        collective(
            &c,
            name.trim_start_matches("gpuwire_"),
            || {
                let s = boundary::buffer(sendbuf)?;
                let r = scan_recv(&c, &s, recvbuf, exclusive)?;
                Ok((s, r, ReduceOp::from_c(op)?))
            },
            |(s, r, op)| issue(&c, Op::Scan { send: s, recv: r, op, exclusive }, st(stream), false).map(|_| ()),
        )
    })
}

/// A scan's receive buffer. An exscan's is not significant on rank 0 (MPI_Exscan): there
/// GPUWIRE_BUFFER_NULL stands for an allocation of the send buffer's size, which gpuwire leaves
/// as it is (not the send buffer in place: MPI_IN_PLACE must be on every rank or none, and a
/// send view may be one that cannot be received into).
fn scan_recv(c: &Communicator, send: &Arc<Buffer>, recvbuf: gpuwire_buffer, exclusive: bool) -> Result<Arc<Buffer>> {
    match boundary::buffer_opt(recvbuf)? {
        Some(r) => Ok(r),
        None if exclusive && c.rank() == 0 => Ok(Arc::new(Buffer::alloc(send.count() as i64, send.dtype(), send.space(), send.device())?)),
        None => boundary::buffer(recvbuf),
    }
}

/// One entry per rank of a caller's array (`None` for NULL, or where not `significant`).
fn per_rank(a: *const i64, n: i32, significant: bool) -> Option<Vec<i64>> {
    if a.is_null() || !significant {
        return None;
    }
    // SAFETY: the caller promises one entry per rank where the array is significant.
    Some(unsafe { std::slice::from_raw_parts(a, n as usize) }.to_vec())
}

/// Whether two buffers are one memory (an in-place call, as `ops` decides it).
fn same(a: &Arc<Buffer>, b: &Arc<Buffer>) -> bool {
    Arc::ptr_eq(a, b) || (a.ptr() == b.ptr() && a.count() == b.count() && a.dtype() == b.dtype() && a.count() > 0)
}

fn alltoallv_op(c: &Communicator, sendbuf: gpuwire_buffer, sendcounts: *const i64, sdispls: *const i64, recvbuf: gpuwire_buffer, recvcounts: *const i64, rdispls: *const i64) -> Result<Op> {
    let (s, r) = (boundary::buffer(sendbuf)?, boundary::buffer(recvbuf)?);
    let p = c.size();
    let sig = !same(&s, &r);
    let sendl = Layout { counts: per_rank(sendcounts, p, sig), displs: per_rank(sdispls, p, sig) };
    let recvl = Layout { counts: per_rank(recvcounts, p, true), displs: per_rank(rdispls, p, true) };
    Ok(Op::Alltoallv { send: s, sendl: Box::new(sendl), recv: r, recvl: Box::new(recvl) })
}

fn gatherv_op(c: &Communicator, sendbuf: gpuwire_buffer, recvbuf: gpuwire_buffer, recvcounts: *const i64, displs: *const i64, root: i32) -> Result<Op> {
    // Handles first: a wrapper that found an array too short passes a NULL handle, and no array
    // is then read.
    let (send, recv) = (boundary::buffer(sendbuf)?, boundary::buffer_opt(recvbuf)?);
    let at_root = c.rank() == root;
    let recvl = Layout { counts: per_rank(recvcounts, c.size(), at_root), displs: per_rank(displs, c.size(), at_root) };
    Ok(Op::Gatherv { send, recv, recvl: Box::new(recvl), root })
}

fn scatterv_op(c: &Communicator, sendbuf: gpuwire_buffer, sendcounts: *const i64, displs: *const i64, recvbuf: gpuwire_buffer, root: i32) -> Result<Op> {
    let (send, recv) = (boundary::buffer_opt(sendbuf)?, boundary::buffer(recvbuf)?);
    let at_root = c.rank() == root;
    let sendl = Layout { counts: per_rank(sendcounts, c.size(), at_root), displs: per_rank(displs, c.size(), at_root) };
    Ok(Op::Scatterv { send, sendl: Box::new(sendl), recv, root })
}

fn reduce_scatterv_op(c: &Communicator, sendbuf: gpuwire_buffer, recvbuf: gpuwire_buffer, recvcounts: *const i64, op: i32) -> Result<Op> {
    let (send, recv) = (boundary::buffer(sendbuf)?, boundary::buffer(recvbuf)?);
    Ok(Op::ReduceScatterv { send, recv, counts: per_rank(recvcounts, c.size(), true), op: ReduceOp::from_c(op)? })
}

/// Sends block j of `sendbuf` (`sendcounts[j]` elements at element `sdispls[j]`) to rank j and
/// receives rank j's block into `recvbuf` (`recvcounts[j]` elements at `rdispls[j]`), as
/// MPI_Alltoallv. Counts and displacements are in elements, one int64 per rank; a NULL
/// displacement array places the blocks contiguously in rank order. Zero blocks are allowed
/// anywhere; what lies between the receive blocks is left as it was. Rank j's `sendcounts[i]`
/// must equal rank i's `recvcounts[j]`. In place (as MPI_IN_PLACE) when `sendbuf` is `recvbuf`
/// (or the same memory): the data sent to rank j is `recvbuf`'s block j, replaced by what rank
/// j sends; `sendcounts` and `sdispls` are then ignored (may be NULL), and ranks may mix
/// in-place and not. On NCCL: grouped ncclSend/ncclRecv.
///
/// Collective. Errors: GPUWIRE_ERROR_INVALID_HANDLE; GPUWIRE_ERROR_INVALID_ARGUMENT (a NULL
/// count array where significant, a negative count or displacement, a non-empty block past
/// its buffer's end or past the address space, overlapping receive blocks, buffers that
/// overlap without being the same memory: nothing is sent); GPUWIRE_ERROR_DTYPE_MISMATCH; in
/// checking mode, on every rank, GPUWIRE_ERROR_COUNT_MISMATCH when a receive count differs from
/// its sender's send count (NCCL would hang or corrupt otherwise), REMOTE_ARGUMENT for another
/// rank's argument error; GPUWIRE_ERROR_BACKEND_UNAVAILABLE, GPUWIRE_ERROR_MPI,
/// GPUWIRE_ERROR_CUDA.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn gpuwire_alltoallv(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    sendcounts: *const i64,
    sdispls: *const i64,
    recvbuf: gpuwire_buffer,
    recvcounts: *const i64,
    rdispls: *const i64,
    stream: *mut c_void,
) -> gpuwire_status {
    call("gpuwire_alltoallv", || {
        let c = boundary::comm(comm)?;
        collective(&c, "alltoallv", || alltoallv_op(&c, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls), |op| issue(&c, op, st(stream), false).map(|_| ()))
    })
}

/// Gathers every rank's `sendbuf` into block r of the root's `recvbuf` (`recvcounts[r]`
/// elements at element `displs[r]`; NULL `displs`: contiguous in rank order), as MPI_Gatherv.
/// `recvbuf`, `recvcounts` and `displs` are significant at the root only (others may pass
/// GPUWIRE_BUFFER_NULL and NULL). Rank r's send count must equal the root's `recvcounts[r]`.
/// In place at the root when its `sendbuf` is a view of exactly its own block of `recvbuf`.
///
/// Collective. Errors as gpuwire_alltoallv, plus ROOT_MISMATCH (checking mode) and
/// GPUWIRE_ERROR_INVALID_ARGUMENT (root out of range).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_gatherv(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    recvcounts: *const i64,
    displs: *const i64,
    root: i32,
    stream: *mut c_void,
) -> gpuwire_status {
    call("gpuwire_gatherv", || {
        let c = boundary::comm(comm)?;
        collective(&c, "gatherv", || gatherv_op(&c, sendbuf, recvbuf, recvcounts, displs, root), |op| issue(&c, op, st(stream), false).map(|_| ()))
    })
}

/// Sends block r of the root's `sendbuf` (`sendcounts[r]` elements at element `displs[r]`;
/// NULL `displs`: contiguous in rank order) to rank r's `recvbuf`, as MPI_Scatterv. `sendbuf`,
/// `sendcounts` and `displs` are significant at the root only (others may pass
/// GPUWIRE_BUFFER_NULL and NULL). Rank r's receive count must equal the root's
/// `sendcounts[r]`. In place at the root when its `recvbuf` is a view of exactly its own block
/// of `sendbuf`.
///
/// Collective. Errors as gpuwire_gatherv.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_scatterv(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    sendcounts: *const i64,
    displs: *const i64,
    recvbuf: gpuwire_buffer,
    root: i32,
    stream: *mut c_void,
) -> gpuwire_status {
    call("gpuwire_scatterv", || {
        let c = boundary::comm(comm)?;
        collective(&c, "scatterv", || scatterv_op(&c, sendbuf, sendcounts, displs, recvbuf, root), |op| issue(&c, op, st(stream), false).map(|_| ()))
    })
}

/// Reduces every rank's `sendbuf` (the sum of `recvcounts` elements) element-wise with `op` and
/// leaves block r of the result (`recvcounts[r]` elements, blocks contiguous in rank order) in
/// rank r's `recvbuf`, as MPI_Reduce_scatter (gpuwire_reduce_scatter_block is the form with
/// equal blocks). `recvcounts` has one int64 per rank, the same on every rank; zeros are
/// allowed. In place (as MPI_IN_PLACE) when `sendbuf` is `recvbuf` (or the same memory): it
/// holds the input, and the result is written to its first `recvcounts[r]` elements. On NCCL:
/// one ncclReduce per block in one group.
///
/// Collective. Errors as gpuwire_reduce, plus GPUWIRE_ERROR_INVALID_ARGUMENT (NULL or negative
/// counts) and GPUWIRE_ERROR_COUNT_MISMATCH (a buffer of another size than the counts give; in
/// checking mode, on every rank, counts that differ between ranks).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_reduce_scatterv(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    recvcounts: *const i64,
    op: i32,
    stream: *mut c_void,
) -> gpuwire_status {
    call("gpuwire_reduce_scatterv", || {
        let c = boundary::comm(comm)?;
        collective(&c, "reduce_scatterv", || reduce_scatterv_op(&c, sendbuf, recvbuf, recvcounts, op), |op| issue(&c, op, st(stream), false).map(|_| ()))
    })
}

/// Sends block r of `sendbuf` to rank r and receives rank r's block into block r of `recvbuf`,
/// as MPI_Alltoall: both hold size x n elements. In place when both are the same buffer.
///
/// Collective. Errors as gpuwire_allgather.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_alltoall(comm: gpuwire_comm, sendbuf: gpuwire_buffer, recvbuf: gpuwire_buffer, stream: *mut c_void) -> gpuwire_status {
    call("gpuwire_alltoall", || {
        let (c, s, r) = boundary::comm_and_buffers(comm, sendbuf, recvbuf)?;
        collective(
            &c,
            "alltoall",
            || Ok((s?, r?)),
            |(s, r)| issue(&c, Op::Alltoall { send: s, recv: r }, st(stream), false).map(|_| ()),
        )
    })
}

/// Gathers every rank's `sendbuf` (n elements) into the root's `recvbuf` (size x n elements,
/// rank order), as MPI_Gather. `recvbuf` is only significant at the root (others may pass
/// GPUWIRE_BUFFER_NULL). In place at the root when `sendbuf` is a view of exactly the root's
/// block of `recvbuf`.
///
/// Collective. Errors as gpuwire_bcast.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_gather(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    root: i32,
    stream: *mut c_void,
) -> gpuwire_status {
    call("gpuwire_gather", || {
        let c = boundary::comm(comm)?;
        collective(
            &c,
            "gather",
            || Ok((boundary::buffer(sendbuf)?, boundary::buffer_opt(recvbuf)?)),
            |(s, r)| issue(&c, Op::Gather { send: s, recv: r, root }, st(stream), false).map(|_| ()),
        )
    })
}

/// Sends block r of the root's `sendbuf` (size x n elements) to rank r's `recvbuf` (n
/// elements), as MPI_Scatter. `sendbuf` is only significant at the root (others may pass
/// GPUWIRE_BUFFER_NULL). In place at the root when `recvbuf` is a view of exactly the root's
/// block of `sendbuf`.
///
/// Collective. Errors as gpuwire_bcast.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_scatter(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    root: i32,
    stream: *mut c_void,
) -> gpuwire_status {
    call("gpuwire_scatter", || {
        let c = boundary::comm(comm)?;
        collective(
            &c,
            "scatter",
            || Ok((boundary::buffer_opt(sendbuf)?, boundary::buffer(recvbuf)?)),
            |(s, r)| issue(&c, Op::Scatter { send: s, recv: r, root }, st(stream), false).map(|_| ()),
        )
    })
}

fn no_request() -> Error {
    Error::Internal("a nonblocking operation made no request".into())
}

/// Issues the nonblocking form of a collective and writes its request (`request` checked first;
/// on any error no request is made and `*request` is left as it was).
fn nonblocking(
    name: &'static str,
    comm: gpuwire_comm,
    request: *mut gpuwire_request,
    stream: *mut c_void,
    prepare: impl FnOnce() -> Result<Op>,
) -> gpuwire_status {
    call(name, || {
        non_null(request, "request")?;
        let c = boundary::comm(comm)?;
        let what = match name.trim_start_matches("gpuwire_i") {
            "reduce_scatter_block" => "reduce_scatter",
            w => w,
        };
        let op = match prepare() {
            Ok(op) => op,
            Err(e) if c.config().check && !crate::group::is_open() && crate::engine::available() => {
                // The other ranks learn of it on the engine, in this communicator's call order,
                // as of any nonblocking collective's error: made here, the agreement would hold
                // this call until every rank reached it (a rank waiting for a message that this
                // one sends after the call would never get there).
                let (c2, e2) = (c.clone(), e.clone());
                let _ = c.engine().submit(Box::new(move || Err(c2.fail_collective(what, e2))), false, false);
                return Err(e);
            }
            Err(e) => return Err(crate::group::fail_collective(&c, what, e)),
        };
        let r = issue(&c, op, st(stream), true)?.ok_or_else(no_request)?;
        write(request, crate::request::register(r)?);
        Ok(())
    })
}

/// Starts a barrier, as MPI_Ibarrier: the request completes once every rank has started it.
///
/// Common to every nonblocking collective (gpuwire_ibarrier ... gpuwire_iscatter): the
/// arguments, their meaning and their errors are the blocking form's, returned by this call
/// (which then made no request); plus GPUWIRE_ERROR_NULL_ARGUMENT (`request`). The request
/// keeps its communicator and buffers alive; the buffers must not be read or written until it
/// completes (gpuwire_wait, gpuwire_test, gpuwire_waitall, in any order). Several may be
/// outstanding on one communicator; they start in call order, and every rank must issue a
/// communicator's collectives in the same order (as MPI). Unlike MPI, a nonblocking collective
/// matches its blocking form on another rank. Under MPI_THREAD_MULTIPLE gpuwire's progress
/// thread runs it and the call returns at once (NCCL device operations are enqueued on
/// `stream`); below MULTIPLE it completes before the call returns (gpuwire_comm_describe says
/// which). Device buffers on MPI_STAGED, MPI_CUDA_AWARE and IPC: stream-ordered, as the
/// blocking forms (see gpuwire_comm_async_error); the request completes when the data is in
/// place. In checking mode a mismatch between ranks is reported by the wait on every rank.
/// Inside a group (gpuwire_group_start) the operation starts at the group's end.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_ibarrier(comm: gpuwire_comm, stream: *mut c_void, request: *mut gpuwire_request) -> gpuwire_status {
    nonblocking("gpuwire_ibarrier", comm, request, stream, || Ok(Op::Barrier))
}

/// Starts a broadcast, as MPI_Ibcast (arguments as gpuwire_bcast; see gpuwire_ibarrier).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_ibcast(comm: gpuwire_comm, buf: gpuwire_buffer, root: i32, stream: *mut c_void, request: *mut gpuwire_request) -> gpuwire_status {
    nonblocking("gpuwire_ibcast", comm, request, stream, || Ok(Op::Bcast { buf: boundary::buffer(buf)?, root }))
}

/// Starts a reduction to `root`, as MPI_Ireduce (arguments as gpuwire_reduce; see
/// gpuwire_ibarrier).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_ireduce(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    op: i32,
    root: i32,
    stream: *mut c_void,
    request: *mut gpuwire_request,
) -> gpuwire_status {
    nonblocking("gpuwire_ireduce", comm, request, stream, || {
        Ok(Op::Reduce { send: boundary::buffer(sendbuf)?, recv: boundary::buffer_opt(recvbuf)?, op: ReduceOp::from_c(op)?, root })
    })
}

/// Starts an allreduce, as MPI_Iallreduce (arguments as gpuwire_allreduce; see
/// gpuwire_ibarrier).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_iallreduce(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    op: i32,
    stream: *mut c_void,
    request: *mut gpuwire_request,
) -> gpuwire_status {
    nonblocking("gpuwire_iallreduce", comm, request, stream, || {
        Ok(Op::Allreduce { send: boundary::buffer(sendbuf)?, recv: boundary::buffer(recvbuf)?, op: ReduceOp::from_c(op)? })
    })
}

/// Starts an allgather, as MPI_Iallgather (arguments as gpuwire_allgather; see
/// gpuwire_ibarrier).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_iallgather(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    stream: *mut c_void,
    request: *mut gpuwire_request,
) -> gpuwire_status {
    nonblocking("gpuwire_iallgather", comm, request, stream, || Ok(Op::Allgather { send: boundary::buffer(sendbuf)?, recv: boundary::buffer(recvbuf)? }))
}

/// Starts an allgatherv, as MPI_Iallgatherv (arguments as gpuwire_allgatherv; `recvcounts` is
/// copied by the call; see gpuwire_ibarrier).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_iallgatherv(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    recvcounts: *const i64,
    stream: *mut c_void,
    request: *mut gpuwire_request,
) -> gpuwire_status {
    nonblocking("gpuwire_iallgatherv", comm, request, stream, || {
        let c = boundary::comm(comm)?;
        let counts = if recvcounts.is_null() {
            None
        } else {
            // SAFETY: the caller promises one entry per rank.
            Some(unsafe { std::slice::from_raw_parts(recvcounts, c.size() as usize) }.to_vec())
        };
        Ok(Op::Allgatherv { send: boundary::buffer(sendbuf)?, recv: boundary::buffer(recvbuf)?, counts })
    })
}

/// Starts a reduce-scatter with equal blocks, as MPI_Ireduce_scatter_block (arguments as
/// gpuwire_reduce_scatter_block; see gpuwire_ibarrier).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_ireduce_scatter_block(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    op: i32,
    stream: *mut c_void,
    request: *mut gpuwire_request,
) -> gpuwire_status {
    nonblocking("gpuwire_ireduce_scatter_block", comm, request, stream, || {
        Ok(Op::ReduceScatter { send: boundary::buffer(sendbuf)?, recv: boundary::buffer(recvbuf)?, op: ReduceOp::from_c(op)? })
    })
}

/// Deprecated: the old name of gpuwire_ireduce_scatter_block (MPI_Ireduce_scatter_block).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_ireduce_scatter(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    op: i32,
    stream: *mut c_void,
    request: *mut gpuwire_request,
) -> gpuwire_status {
    nonblocking("gpuwire_ireduce_scatter", comm, request, stream, || {
        Ok(Op::ReduceScatter { send: boundary::buffer(sendbuf)?, recv: boundary::buffer(recvbuf)?, op: ReduceOp::from_c(op)? })
    })
}

/// Starts an inclusive scan, as MPI_Iscan (arguments as gpuwire_scan; see gpuwire_ibarrier).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_iscan(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    op: i32,
    stream: *mut c_void,
    request: *mut gpuwire_request,
) -> gpuwire_status {
    nonblocking("gpuwire_iscan", comm, request, stream, || {
        Ok(Op::Scan { send: boundary::buffer(sendbuf)?, recv: boundary::buffer(recvbuf)?, op: ReduceOp::from_c(op)?, exclusive: false })
    })
}

/// Starts an exclusive scan, as MPI_Iexscan (arguments as gpuwire_exscan: rank 0's `recvbuf`
/// is left untouched and may be GPUWIRE_BUFFER_NULL; see gpuwire_ibarrier).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_iexscan(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    op: i32,
    stream: *mut c_void,
    request: *mut gpuwire_request,
) -> gpuwire_status {
    nonblocking("gpuwire_iexscan", comm, request, stream, || {
        let send = boundary::buffer(sendbuf)?;
        let recv = scan_recv(&*boundary::comm(comm)?, &send, recvbuf, true)?;
        Ok(Op::Scan { send, recv, op: ReduceOp::from_c(op)?, exclusive: true })
    })
}

/// Starts an all-to-all with per-rank counts, as MPI_Ialltoallv (arguments as
/// gpuwire_alltoallv; the arrays are copied by the call; see gpuwire_ibarrier).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn gpuwire_ialltoallv(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    sendcounts: *const i64,
    sdispls: *const i64,
    recvbuf: gpuwire_buffer,
    recvcounts: *const i64,
    rdispls: *const i64,
    stream: *mut c_void,
    request: *mut gpuwire_request,
) -> gpuwire_status {
    nonblocking("gpuwire_ialltoallv", comm, request, stream, || alltoallv_op(&*boundary::comm(comm)?, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls))
}

/// Starts a gather with per-rank counts, as MPI_Igatherv (arguments as gpuwire_gatherv; the
/// arrays are copied by the call; see gpuwire_ibarrier).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn gpuwire_igatherv(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    recvcounts: *const i64,
    displs: *const i64,
    root: i32,
    stream: *mut c_void,
    request: *mut gpuwire_request,
) -> gpuwire_status {
    nonblocking("gpuwire_igatherv", comm, request, stream, || gatherv_op(&*boundary::comm(comm)?, sendbuf, recvbuf, recvcounts, displs, root))
}

/// Starts a scatter with per-rank counts, as MPI_Iscatterv (arguments as gpuwire_scatterv; the
/// arrays are copied by the call; see gpuwire_ibarrier).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn gpuwire_iscatterv(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    sendcounts: *const i64,
    displs: *const i64,
    recvbuf: gpuwire_buffer,
    root: i32,
    stream: *mut c_void,
    request: *mut gpuwire_request,
) -> gpuwire_status {
    nonblocking("gpuwire_iscatterv", comm, request, stream, || scatterv_op(&*boundary::comm(comm)?, sendbuf, sendcounts, displs, recvbuf, root))
}

/// Starts a reduce-scatter with per-rank counts, as MPI_Ireduce_scatter (arguments as
/// gpuwire_reduce_scatterv; `recvcounts` is copied by the call; see gpuwire_ibarrier).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_ireduce_scatterv(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    recvcounts: *const i64,
    op: i32,
    stream: *mut c_void,
    request: *mut gpuwire_request,
) -> gpuwire_status {
    nonblocking("gpuwire_ireduce_scatterv", comm, request, stream, || reduce_scatterv_op(&*boundary::comm(comm)?, sendbuf, recvbuf, recvcounts, op))
}

/// Starts an all-to-all, as MPI_Ialltoall (arguments as gpuwire_alltoall; see
/// gpuwire_ibarrier).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_ialltoall(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    stream: *mut c_void,
    request: *mut gpuwire_request,
) -> gpuwire_status {
    nonblocking("gpuwire_ialltoall", comm, request, stream, || Ok(Op::Alltoall { send: boundary::buffer(sendbuf)?, recv: boundary::buffer(recvbuf)? }))
}

/// Starts a gather to `root`, as MPI_Igather (arguments as gpuwire_gather; see
/// gpuwire_ibarrier).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_igather(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    root: i32,
    stream: *mut c_void,
    request: *mut gpuwire_request,
) -> gpuwire_status {
    nonblocking("gpuwire_igather", comm, request, stream, || Ok(Op::Gather { send: boundary::buffer(sendbuf)?, recv: boundary::buffer_opt(recvbuf)?, root }))
}

/// Starts a scatter from `root`, as MPI_Iscatter (arguments as gpuwire_scatter; see
/// gpuwire_ibarrier).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_iscatter(
    comm: gpuwire_comm,
    sendbuf: gpuwire_buffer,
    recvbuf: gpuwire_buffer,
    root: i32,
    stream: *mut c_void,
    request: *mut gpuwire_request,
) -> gpuwire_status {
    nonblocking("gpuwire_iscatter", comm, request, stream, || Ok(Op::Scatter { send: boundary::buffer_opt(sendbuf)?, recv: boundary::buffer(recvbuf)?, root }))
}

/// Opens a group on the calling thread, as ncclGroupStart: the point-to-point operations and
/// collectives (blocking or nonblocking forms) this thread issues until the matching
/// gpuwire_group_end are validated at their call (an argument error is returned at once and
/// the operation not added) and started together at the outermost end. Groups nest; only the
/// outermost end starts anything. Inside a group a blocking form returns at once; a
/// nonblocking form returns a request that may be waited for only after the group ended
/// (earlier, gpuwire_wait / gpuwire_test / gpuwire_waitall return GPUWIRE_ERROR_INVALID_ARGUMENT
/// and leave the request as it was). The group's operations run together: one whose buffer
/// overlaps an earlier operation's of the group where either writes it (a receive into what a
/// send reads, two receives into the same bytes) is refused at its call with
/// GPUWIRE_ERROR_INVALID_ARGUMENT and not added.
///
/// Errors: GPUWIRE_ERROR_NOT_INITIALIZED, GPUWIRE_ERROR_INVALID_ARGUMENT (65536 levels deep).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_group_start() -> gpuwire_status {
    call("gpuwire_group_start", || {
        crate::runtime::check_ready()?;
        crate::group::start()
    })
}

/// Closes the calling thread's group (gpuwire_group_start). At the outermost end the group's
/// operations start: on NCCL communicators their device operations as one NCCL group (one
/// launch); elsewhere every send and receive as a nonblocking operation (receives first), then
/// the collectives in call order, then all are completed — so a halo exchange with any number
/// of neighbours in one group cannot deadlock on the order of its sends and receives. Returns
/// when the data of every operation on host memory and on the MPI and IPC paths is in place;
/// NCCL's are ordered on their streams. Each rank must issue its collectives in the same order.
///
/// Errors: GPUWIRE_ERROR_INVALID_ARGUMENT (no open group), and the first error of the group's
/// operations (their requests report their own).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_group_end() -> gpuwire_status {
    call("gpuwire_group_end", || {
        crate::runtime::check_ready()?;
        crate::group::end()
    })
}

/// Writes to `*depth` how deep the calling thread's groups are nested: 0 outside a group, 1
/// between a gpuwire_group_start and its gpuwire_group_end, 2 in a group nested in another, and
/// so on. Local; any thread. For code that must not defer an operation into an open group (its
/// buffers would have to outlive the call: the Fortran module's forms on plain variables check
/// it).
///
/// Errors: GPUWIRE_ERROR_NULL_ARGUMENT (`depth` NULL), GPUWIRE_ERROR_NOT_INITIALIZED.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_group_depth(depth: *mut i32) -> gpuwire_status {
    call("gpuwire_group_depth", || {
        non_null(depth, "depth")?;
        crate::runtime::check_ready()?;
        write(depth, crate::group::depth() as i32);
        Ok(())
    })
}

/// Writes the communicator's asynchronous error to `*async_error`, as ncclCommGetAsyncError:
/// the code of an operation on `comm` that failed after its call had returned (a
/// stream-ordered device operation: see gpuwire_ibarrier), reported once, with its message as
/// the thread's last error (gpuwire_last_error); else GPUWIRE_ERROR_COMM_BROKEN when the
/// communicator is broken (gpuwire_comm_abort, a timeout; its message as the last error; every
/// time, as NCCL's); else GPUWIRE_SUCCESS. Without this call, the next operation on the
/// communicator reports an asynchronous error (and does nothing). Local; thread-safe. (The
/// older gpuwire_comm_async_error returns the asynchronous error as its own status.)
///
/// Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_comm_get_async_error(comm: gpuwire_comm, async_error: *mut gpuwire_status) -> gpuwire_status {
    let mut code = gpuwire_status::GPUWIRE_SUCCESS;
    let r = call("gpuwire_comm_get_async_error", || {
        non_null(async_error, "async_error")?;
        let c = boundary::comm(comm)?;
        let e = c.engine().take_async_error().map(Err).unwrap_or_else(|| c.ensure_usable());
        if let Err(e) = e {
            code = e.status();
            // The message as the thread's last error, the call itself succeeding.
            boundary::set_last_error(format!("gpuwire_comm_get_async_error: {e}"));
        }
        Ok(())
    });
    if r == gpuwire_status::GPUWIRE_SUCCESS {
        write(async_error, code);
    }
    r
}

/// The older form of gpuwire_comm_get_async_error (kept): returns the asynchronous error as
/// its own status (GPUWIRE_SUCCESS when there is none; a broken communicator is not reported
/// here). Errors: GPUWIRE_ERROR_INVALID_HANDLE, and the asynchronous error.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_comm_async_error(comm: gpuwire_comm) -> gpuwire_status {
    call("gpuwire_comm_async_error", || match boundary::comm(comm)?.engine().take_async_error() {
        Some(e) => Err(e),
        None => Ok(()),
    })
}
