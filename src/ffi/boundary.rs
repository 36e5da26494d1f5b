//! The FFI boundary: panics caught, errors turned into status codes and the thread's last error,
//! NULL pointers checked, handles resolved.

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use crate::buffer::{BUFFERS, Buffer};
use crate::comm::{COMMS, Communicator};
use crate::error::{Error, Result, Status};
use crate::handles::Recent;
use crate::pin::{Borrowed, Pin};
use crate::runtime;

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
    /// The communicators and buffers this thread looked up recently (`Registry::get_in`), in
    /// one thread-local: a call that resolves a communicator and its buffers reaches it once
    /// (each reach from the shared library calls __tls_get_addr, and checks its state).
    static RECENT: Recents = const { Recents { comms: Recent::new(), buffers: Recent::new() } };
}

struct Recents {
    comms: Recent<Communicator>,
    buffers: Recent<Buffer>,
}

/// `f` of this thread's recent handles (`None` once its thread-locals are destroyed).
#[inline]
fn with_recent<R>(f: impl FnOnce(Option<&Recents>) -> R) -> R {
    let mut f = Some(f);
    match RECENT.try_with(|r| f.take().map(|f| f(Some(r)))) {
        Ok(Some(v)) => v,
        _ => (f.take().expect("not run"))(None),
    }
}

/// Records `msg` as this thread's last error. Once the thread's thread-locals are destroyed (a
/// call from a C++ static destructor or an atexit handler, after main returned) the message is
/// dropped: `with` would panic there, and abort the process.
pub fn set_last_error(msg: String) {
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = msg);
}

/// This thread's last error message ("" when none, and once its thread-locals are destroyed).
pub fn last_error() -> String {
    LAST_ERROR.try_with(|e| e.borrow().clone()).unwrap_or_default()
}

/// Runs an exported function's body: `Ok` is GPUWIRE_SUCCESS; an error becomes its code and the
/// thread's last error "function: message"; a panic becomes GPUWIRE_ERROR_INTERNAL.
/// The error and panic cases are out of line: their locals would otherwise widen every
/// exported function's frame, whose lines a call reads again after an NCCL launch (`crate::hot`).
#[inline]
pub fn call(name: &'static str, f: impl FnOnce() -> Result<()>) -> Status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => Status::GPUWIRE_SUCCESS,
        Ok(Err(e)) => failed(name, e),
        Err(panic) => panicked(name, panic),
    }
}

#[cold]
#[inline(never)]
fn failed(name: &'static str, e: Error) -> Status {
    set_last_error(format!("{name}: {e}"));
    e.status()
}

#[cold]
#[inline(never)]
fn panicked(name: &'static str, panic: Box<dyn std::any::Any + Send>) -> Status {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    set_last_error(format!("{name}: internal error (a bug in gpuwire, please report it): {what}"));
    Status::GPUWIRE_ERROR_INTERNAL
}

/// Fails with GPUWIRE_ERROR_NULL_ARGUMENT naming `arg` when `p` is NULL.
pub fn non_null<T>(p: *const T, arg: &str) -> Result<()> {
    if p.is_null() {
        return Err(Error::NullArgument(format!("`{arg}` must not be NULL")));
    }
    Ok(())
}

/// Writes an out-parameter already checked by `non_null`.
pub fn write<T>(p: *mut T, v: T) {
    // SAFETY: callers check `p` with `non_null` before doing any work; the C caller promises it
    // points to writable storage for a T.
    unsafe { p.write(v) }
}

/// The communicator behind a handle.
pub fn comm(h: u64) -> Result<Arc<Communicator>> {
    runtime::check_ready()?;
    with_recent(|r| COMMS.get_in(r.map(|r| &r.comms), h))
}

/// The buffer behind a handle.
pub fn buffer(h: u64) -> Result<Arc<Buffer>> {
    runtime::check_ready()?;
    with_recent(|r| BUFFERS.get_in(r.map(|r| &r.buffers), h))
}

/// `comm(c)`, then `buffer(b)` (not looked up when the communicator fails), in one reach of the
/// thread's recent handles: an isend's or irecv's two lookups.
#[inline]
pub fn comm_and_buffer(c: u64, b: u64) -> Result<(Arc<Communicator>, Arc<Buffer>)> {
    runtime::check_ready()?;
    with_recent(|r| Ok((COMMS.get_in(r.map(|r| &r.comms), c)?, BUFFERS.get_in(r.map(|r| &r.buffers), b)?)))
}

/// `comm(c)`, then `buffer(a)` and `buffer(b)` for the caller to report (a collective's
/// `prepare`), in one reach of the thread's recent handles; the buffers are not looked up when
/// the communicator fails.
pub fn comm_and_buffers(c: u64, a: u64, b: u64) -> Result<(Arc<Communicator>, Result<Arc<Buffer>>, Result<Arc<Buffer>>)> {
    runtime::check_ready()?;
    with_recent(|r| {
        let comm = COMMS.get_in(r.map(|r| &r.comms), c)?;
        let buffers = r.map(|r| &r.buffers);
        Ok((comm, BUFFERS.get_in(buffers, a), BUFFERS.get_in(buffers, b)))
    })
}

/// `buffer(b)`, then `comm(c)` (the order of a send's or receive's errors), in one reach of
/// the thread's recent handles.
pub fn buffer_and_comm(b: u64, c: u64) -> Result<(Arc<Buffer>, Arc<Communicator>)> {
    runtime::check_ready()?;
    with_recent(|r| {
        let buf = BUFFERS.get_in(r.map(|r| &r.buffers), b)?;
        Ok((buf, COMMS.get_in(r.map(|r| &r.comms), c)?))
    })
}

/// `comm_and_buffers` borrowed through `pin` (no reference counted: `crate::pin`), for the
/// calls whose common case keeps none of them past the call; `pin` names the three handles.
#[inline]
pub fn comm_and_buffers_pinned<'p>(pin: &'p Pin, c: u64, a: u64, b: u64) -> Result<(Borrowed<'p, Communicator>, Result<Borrowed<'p, Buffer>>, Result<Borrowed<'p, Buffer>>)> {
    runtime::check_ready()?;
    let comm = COMMS.get_pinned(pin, c)?;
    Ok((comm, BUFFERS.get_pinned(pin, a), BUFFERS.get_pinned(pin, b)))
}

/// `buffer_and_comm` borrowed through `pin`, as `comm_and_buffers_pinned`.
#[inline]
pub fn buffer_and_comm_pinned(pin: &Pin, b: u64, c: u64) -> Result<(Borrowed<'_, Buffer>, Borrowed<'_, Communicator>)> {
    runtime::check_ready()?;
    let buf = BUFFERS.get_pinned(pin, b)?;
    Ok((buf, COMMS.get_pinned(pin, c)?))
}

/// The buffer behind a handle, or `None` for the NULL handle (arguments that are not
/// significant on this rank, such as a non-root's receive buffer of gather).
pub fn buffer_opt(h: u64) -> Result<Option<Arc<Buffer>>> {
    if h == 0 {
        runtime::check_ready()?;
        return Ok(None);
    }
    buffer(h).map(Some)
}

/// Copies `s` into a caller's `buf` of `len` bytes, truncated and always NUL-terminated.
pub fn copy_str(s: &str, buf: *mut std::ffi::c_char, len: usize) {
    if buf.is_null() || len == 0 {
        return;
    }
    let n = s.len().min(len - 1);
    // SAFETY: the caller promises `buf` holds `len` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
}

/// A collective call: `prepare` resolves handles and enum values on this rank; if it fails,
/// the communicator's checking mode still tells the other ranks (so none of them hangs) and
/// every rank returns an error.
pub fn collective<T>(
    c: &Arc<Communicator>,
    what: &str,
    prepare: impl FnOnce() -> Result<T>,
    run: impl FnOnce(T) -> Result<()>,
) -> Result<()> {
    match prepare() {
        Ok(args) => run(args),
        Err(e) => Err(crate::group::fail_collective(c, what, e)),
    }
}
