//! Parts of the C ABI that need no MPI job: the version (against Cargo and against the generated
//! header), the status codes and their strings, the last-error buffer, and calls made before
//! gpuwire_init. No test here initializes MPI.

use std::ffi::{CStr, c_char};

use gpuwire::Status;
use gpuwire::ffi::comm::*;
use gpuwire::ffi::lifecycle::*;
use gpuwire::ffi::status::*;

fn header() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/include/gpuwire.h");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

/// The value of `#define NAME value` in the header.
fn define(h: &str, name: &str) -> String {
    h.lines()
        .find_map(|l| l.trim().strip_prefix("#define ")?.strip_prefix(name)?.strip_prefix(' ').map(|v| v.trim().to_string()))
        .unwrap_or_else(|| panic!("include/gpuwire.h has no #define {name}"))
}

fn last_error() -> String {
    let mut buf = [0 as c_char; 1024];
    assert_eq!(gpuwire_last_error(buf.as_mut_ptr(), buf.len()), Status::GPUWIRE_SUCCESS);
    // SAFETY: NUL-terminated by gpuwire_last_error.
    unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
}

fn status_string(code: i32) -> String {
    let p = gpuwire_status_string(code);
    assert!(!p.is_null(), "gpuwire_status_string({code}) returned NULL");
    // SAFETY: a static NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_str().expect("UTF-8").to_string()
}

#[test]
fn version_matches_cargo_and_header() {
    let (mut major, mut minor, mut patch) = (-1, -1, -1);
    assert_eq!(gpuwire_get_version(&mut major, &mut minor, &mut patch), Status::GPUWIRE_SUCCESS);
    let cargo: Vec<i32> = env!("CARGO_PKG_VERSION").split(['.', '-', '+']).take(3).map(|p| p.parse().unwrap()).collect();
    assert_eq!(vec![major, minor, patch], cargo, "gpuwire_get_version vs CARGO_PKG_VERSION");

    let h = header();
    let from_header: Vec<i32> = ["GPUWIRE_VERSION_MAJOR", "GPUWIRE_VERSION_MINOR", "GPUWIRE_VERSION_PATCH"]
        .iter()
        .map(|n| define(&h, n).parse().unwrap_or_else(|e| panic!("{n}: {e}")))
        .collect();
    assert_eq!(from_header, cargo, "GPUWIRE_VERSION_* in include/gpuwire.h vs CARGO_PKG_VERSION");
    assert_eq!(define(&h, "GPUWIRE_VERSION_STRING"), format!("\"{}\"", env!("CARGO_PKG_VERSION")));
}

#[test]
fn version_refuses_null_pointers() {
    let (mut a, mut b) = (0, 0);
    let st = gpuwire_get_version(&mut a, &mut b, std::ptr::null_mut());
    assert_eq!(st, Status::GPUWIRE_ERROR_NULL_ARGUMENT);
    assert!(last_error().contains("patch"), "last error should name the NULL argument: {:?}", last_error());
}

#[test]
fn every_status_code_has_its_own_string() {
    let mut seen = std::collections::HashSet::new();
    for s in Status::ALL {
        let text = status_string(s as i32);
        assert!(!text.is_empty(), "{s:?} has an empty string");
        assert_ne!(text, "unknown status code", "{s:?} is described as unknown");
        assert!(seen.insert(text.clone()), "{s:?} shares its string {text:?} with another code");
    }
    assert_eq!(seen.len(), 21);
    for unknown in [21, 22, 100, -1, i32::MIN, i32::MAX] {
        assert_eq!(status_string(unknown), "unknown status code", "code {unknown}");
    }
}

#[test]
fn header_status_codes_match_the_library() {
    // Every `GPUWIRE_SUCCESS = 0,` / `GPUWIRE_ERROR_X = n,` line of the header's gpuwire_status.
    let h = header();
    let in_header: Vec<(String, i32)> = h
        .lines()
        .filter_map(|l| {
            let (name, value) = l.trim().strip_suffix(',')?.split_once(" = ")?;
            let ours = name == "GPUWIRE_SUCCESS" || name.starts_with("GPUWIRE_ERROR_");
            ours.then(|| (name.to_string(), value.parse::<i32>().unwrap_or_else(|e| panic!("{name} = {value}: {e}"))))
        })
        .collect();
    let in_rust: Vec<(String, i32)> = Status::ALL.iter().map(|s| (format!("{s:?}"), *s as i32)).collect();
    assert_eq!(in_header, in_rust);
}

#[test]
fn last_error_buffer_rules() {
    // A fresh thread has no message; a failure sets one; a success does not clear it.
    std::thread::spawn(|| {
        assert_eq!(last_error(), "");
        let mut flag = 0;
        assert_eq!(gpuwire_owns_mpi(&mut flag), Status::GPUWIRE_ERROR_NOT_INITIALIZED);
        let msg = last_error();
        assert!(msg.starts_with("gpuwire_owns_mpi: ") && msg.contains("gpuwire_init"), "{msg:?}");
        assert_eq!(gpuwire_initialized(&mut flag), Status::GPUWIRE_SUCCESS);
        assert_eq!(last_error(), msg, "a successful call cleared the message");
        // Truncated, always NUL-terminated.
        let mut small = [1 as c_char; 8];
        assert_eq!(gpuwire_last_error(small.as_mut_ptr(), small.len()), Status::GPUWIRE_SUCCESS);
        // SAFETY: NUL-terminated within 8 bytes.
        assert_eq!(unsafe { CStr::from_ptr(small.as_ptr()) }.to_str().unwrap(), &msg[..7]);
        assert_eq!(gpuwire_last_error(std::ptr::null_mut(), 10), Status::GPUWIRE_ERROR_NULL_ARGUMENT);
        assert_eq!(gpuwire_last_error(small.as_mut_ptr(), 0), Status::GPUWIRE_ERROR_INVALID_ARGUMENT);
        // Per thread: another thread's failure does not show here.
        std::thread::spawn(|| {
            let mut out = 0u64;
            assert_eq!(gpuwire_comm_world(std::ptr::null(), &mut out), Status::GPUWIRE_ERROR_NOT_INITIALIZED);
        })
        .join()
        .unwrap();
        assert_eq!(last_error(), msg);
    })
    .join()
    .unwrap();
}

#[test]
fn calls_before_init_are_refused_without_mpi() {
    let mut flag = -1;
    assert_eq!(gpuwire_initialized(&mut flag), Status::GPUWIRE_SUCCESS);
    assert_eq!(flag, 0);
    let mut out = 7u64;
    assert_eq!(gpuwire_comm_world(std::ptr::null(), &mut out), Status::GPUWIRE_ERROR_NOT_INITIALIZED);
    assert_eq!(out, 7, "out-parameter written on failure");
    assert_eq!(gpuwire_comm_free(out), Status::GPUWIRE_ERROR_NOT_INITIALIZED);
    assert_eq!(gpuwire_finalize(), Status::GPUWIRE_ERROR_NOT_INITIALIZED);
    let mut lvl = -1;
    assert_eq!(gpuwire_query_thread(&mut lvl), Status::GPUWIRE_ERROR_NOT_INITIALIZED);
    // Configuration works before init (defaults, no GPUWIRE_* variables are set by this test).
    let mut cfg = unsafe { std::mem::zeroed::<gpuwire_config>() };
    if std::env::vars().all(|(k, _)| !k.starts_with("GPUWIRE_") || k.starts_with("GPUWIRE_TEST") || k == "GPUWIRE_MPIEXEC") {
        assert_eq!(gpuwire_config_init(&mut cfg), Status::GPUWIRE_SUCCESS);
        assert_eq!((cfg.backend, cfg.device, cfg.check, cfg.staging), (0, -1, 0, 0));
        assert_eq!(cfg.timeout_seconds, 0.0);
        assert_eq!(cfg.chunk_bytes, 4 << 20);
        assert_eq!(cfg.p2p_matching, gpuwire::types::P2pMatching::GPUWIRE_P2P_MATCHING_BACKEND as i32);
    }
}
