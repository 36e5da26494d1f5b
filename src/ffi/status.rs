//! Status strings, the thread's last error, and the version.

use std::ffi::c_char;

use crate::error::{Status, gpuwire_status};
use crate::ffi::boundary::{self, call, non_null, write};

/// Static, NUL-terminated description of a status code ("unknown status code" for a value that
/// is not one). Never NULL; the string must not be freed. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_status_string(status: i32) -> *const c_char {
    match Status::from_i32(status) {
        Some(s) => s.description().as_ptr(),
        None => c"unknown status code".as_ptr(),
    }
}

/// Copies the detailed message of the calling thread's most recent failed gpuwire call into
/// `buf` (`buflen` bytes, truncated, always NUL-terminated; "" if no call failed on this thread).
/// Messages are per thread: another thread's failures never overwrite yours. 1024 bytes hold
/// every message gpuwire writes. A successful call does not clear the message.
///
/// Errors: GPUWIRE_ERROR_NULL_ARGUMENT if `buf` is NULL; GPUWIRE_ERROR_INVALID_ARGUMENT if
/// `buflen` is 0. Works before gpuwire_init and after gpuwire_finalize.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_last_error(buf: *mut c_char, buflen: usize) -> gpuwire_status {
    // Not through `call`: a failure here must not replace the message being read.
    if buf.is_null() {
        return Status::GPUWIRE_ERROR_NULL_ARGUMENT;
    }
    if buflen == 0 {
        return Status::GPUWIRE_ERROR_INVALID_ARGUMENT;
    }
    boundary::copy_str(&boundary::last_error(), buf, buflen);
    Status::GPUWIRE_SUCCESS
}

/// The library's version at run time (compare with GPUWIRE_VERSION_MAJOR/MINOR/PATCH of the
/// header you compiled against). Works before gpuwire_init.
///
/// Errors: GPUWIRE_ERROR_NULL_ARGUMENT if any pointer is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_get_version(major: *mut i32, minor: *mut i32, patch: *mut i32) -> gpuwire_status {
    call("gpuwire_get_version", || {
        non_null(major, "major")?;
        non_null(minor, "minor")?;
        non_null(patch, "patch")?;
        let p = |s: &str| s.parse::<i32>().unwrap_or(0);
        write(major, p(env!("CARGO_PKG_VERSION_MAJOR")));
        write(minor, p(env!("CARGO_PKG_VERSION_MINOR")));
        write(patch, p(env!("CARGO_PKG_VERSION_PATCH")));
        Ok(())
    })
}
