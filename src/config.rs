//! Communicator configuration: defaults, then environment variables, then what the caller sets.
//!
//! | variable | values | default |
//! | --- | --- | --- |
//! | `GPUWIRE_BACKEND` | auto, host, mpi_staged (staged), mpi_cuda_aware (cuda_aware), nccl, ipc, hier (hierarchical) | auto |
//! | `GPUWIRE_DEVICE` | CUDA device ordinal, or -1 = node-local rank modulo the device count | -1 |
//! | `GPUWIRE_CHECK` | 0 or 1: agree counts/datatypes/ops/roots across ranks before collectives | 0 |
//! | `GPUWIRE_TIMEOUT` | seconds (decimal), 0.001 to 1e9; 0 = no timeout | 0 |
//! | `GPUWIRE_STAGING` | pinned or pageable | pinned |
//! | `GPUWIRE_CHUNK_BYTES` | staging chunk size in bytes (4096 to 2^63 - 1) | 4194304 |
//! | `GPUWIRE_CUDA_AWARE` | 0 or 1: override the MPI's answer to "does it accept device pointers?" | unset |
//! | `GPUWIRE_P2P_MATCHING` | backend or mpi: how device point-to-point messages are matched (`P2pMatching`) | backend |
//! | `GPUWIRE_HIER_MIN_BYTES` | bytes: HIER's device calls below it take the flat staged path (0 = none) | 65536 |
//! | `GPUWIRE_IPC_STAGED_MAX` | bytes: between ranks sharing a GPU, IPC device sends above 1 KiB up to it are staged through host memory (0 = none) | 262144 |

use std::time::Duration;

use crate::error::{Error, Result};
use crate::types::{BackendKind, P2pMatching, Staging};

/// Default staging chunk (bytes).
pub(crate) const DEFAULT_CHUNK_BYTES: usize = 4 << 20;

/// HIER's default `GPUWIRE_HIER_MIN_BYTES`: device calls below it take the flat staged path,
/// where three steps (node, leaders, node) cost more than one flat exchange.
pub(crate) const DEFAULT_HIER_MIN_BYTES: usize = 64 << 10;

/// The same where ranks share a GPU: HIER's steps inside a node are then time-sliced on its
/// compute engine (~270 µs each), while the flat staged path reduces on a host copy up to 2 MiB
/// (`devstate::SHARED_SMALL_BYTES`). Measured on the H200, 2 simulated hosts x 2 ranks
/// (docs/PERFORMANCE.md, "Hierarchical"): HIER 649 µs against flat staged 140 µs at 64 KiB,
/// 1.22 against 1.00 ms at 1 MiB, 1.62 against 1.85 ms at 2 MiB.
pub(crate) const DEFAULT_HIER_MIN_BYTES_SHARED_GPU: usize = 2 << 20;

/// A number of bytes >= 0 (`GPUWIRE_HIER_MIN_BYTES`, `GPUWIRE_IPC_STAGED_MAX`).
fn parse_byte_count(v: &str) -> Option<usize> {
    v.trim().parse::<usize>().ok()
}

/// `GPUWIRE_HIER_MIN_BYTES` of this process, else (unset or empty, as every variable) the
/// default. Read when a HIER communicator is made, so a value set after `gpuwire_config_init` is
/// checked here too (it was the default, silently, when not a number).
pub(crate) fn hier_min_bytes(shared_gpu: bool) -> Result<usize> {
    let default = if shared_gpu { DEFAULT_HIER_MIN_BYTES_SHARED_GPU } else { DEFAULT_HIER_MIN_BYTES };
    match env("GPUWIRE_HIER_MIN_BYTES") {
        Some(v) => parse_byte_count(&v).ok_or_else(|| bad_env("GPUWIRE_HIER_MIN_BYTES", &v, "a number of bytes >= 0")),
        None => Ok(default),
    }
}

/// `GPUWIRE_IPC_STAGED_MAX`'s default: between ranks sharing a GPU, IPC sends of device memory
/// from 1 KiB + 1 up to this many bytes go as MPI messages staged through pinned host memory
/// (`backend::ipc::p2p`). Measured on an H100 (18th session, `GPUWIRE_BENCH_STEPS=p2pstaged
/// bash scripts/gpu-bench.sh`, docs/PERFORMANCE.md): send/recv one way 21–73 µs staged against
/// 150 µs through the mapping from 2 KiB to 256 KiB; at 512 KiB 116 against 151 µs for one
/// message but 2.3 ms against 0.32 ms for a halo group's two, and from 1 MiB 2.8 ms and more.
pub(crate) const DEFAULT_IPC_STAGED_MAX: usize = 256 << 10;

/// `GPUWIRE_IPC_STAGED_MAX` of this process (read once; a bad value fails the configuration
/// first, see `Config::from_lookup`), else the default.
pub(crate) fn ipc_staged_max() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| std::env::var("GPUWIRE_IPC_STAGED_MAX").ok().and_then(|v| parse_byte_count(&v)).unwrap_or(DEFAULT_IPC_STAGED_MAX))
}

/// A validated configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub backend: BackendKind,
    /// Device ordinal; -1 = node-local rank modulo the number of visible devices.
    pub device: i32,
    pub check: bool,
    pub timeout: Option<Duration>,
    pub staging: Staging,
    pub chunk_bytes: usize,
    /// How device point-to-point messages are matched (NCCL: by peer and order, or MPI's).
    pub p2p_matching: P2pMatching,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            backend: BackendKind::GPUWIRE_BACKEND_AUTO,
            device: -1,
            check: false,
            timeout: None,
            staging: Staging::GPUWIRE_STAGING_PINNED,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            p2p_matching: P2pMatching::GPUWIRE_P2P_MATCHING_BACKEND,
        }
    }
}

/// Variable `name`, `None` when unset or empty (every variable's rule).
pub(crate) fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn bad_env(name: &str, value: &str, expected: &str) -> Error {
    // Quote at most 64 characters of the value: messages stay within 1024 bytes.
    let shown: String = value.chars().take(64).collect();
    let more = if shown.len() < value.len() { "..." } else { "" };
    Error::InvalidArgument(format!("environment variable {name}={shown:?}{more} is not valid: expected {expected}"))
}

impl Config {
    /// Defaults overridden by the GPUWIRE_* environment variables.
    pub fn from_env() -> Result<Config> {
        Self::from_lookup(env)
    }

    /// As `from_env`, reading variables through `lookup` (tests use a map).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let mut c = Config::default();
        if let Some(v) = lookup("GPUWIRE_BACKEND") {
            c.backend = BackendKind::parse(&v)
                .ok_or_else(|| bad_env("GPUWIRE_BACKEND", &v, "auto, host, mpi_staged, mpi_cuda_aware, nccl, ipc or hier"))?;
        }
        if let Some(v) = lookup("GPUWIRE_DEVICE") {
            c.device = v
                .trim()
                .parse::<i32>()
                .ok()
                .filter(|d| *d >= -1)
                .ok_or_else(|| bad_env("GPUWIRE_DEVICE", &v, "a device ordinal >= 0, or -1"))?;
        }
        if let Some(v) = lookup("GPUWIRE_DEBUG") {
            // Read by `debug_enabled`; checked here so that a value it would ignore is an error.
            parse_bool(&v).ok_or_else(|| bad_env("GPUWIRE_DEBUG", &v, BOOL_FORMS))?;
        }
        for name in ["GPUWIRE_PROGRESS_THREAD", "GPUWIRE_IPC_PROGRESS_THREAD", "GPUWIRE_IPC_KERNELS", "GPUWIRE_IPC_COPY_ROWS", "GPUWIRE_IPC_STREAM_ORDERED"] {
            if let Some(v) = lookup(name) {
                // Read by `progress::thread_allowed`, `ipc_stream_ordered` and the IPC backend;
                // checked here so that a value they would ignore is an error.
                parse_bool(&v).ok_or_else(|| bad_env(name, &v, BOOL_FORMS))?;
            }
        }
        // Process-wide switches read by `env_flag`; checked here so that a value it would take
        // for off is an error.
        for name in ENV_FLAGS {
            if let Some(v) = lookup(name) {
                parse_bool(&v).ok_or_else(|| bad_env(name, &v, BOOL_FORMS))?;
            }
        }
        if let Some(v) = lookup("GPUWIRE_CHECK") {
            c.check = parse_bool(&v).ok_or_else(|| bad_env("GPUWIRE_CHECK", &v, BOOL_FORMS))?;
        }
        if let Some(v) = lookup("GPUWIRE_TIMEOUT") {
            c.timeout = seconds(&v)
                .and_then(timeout_in_range)
                .ok_or_else(|| bad_env("GPUWIRE_TIMEOUT", &v, TIMEOUT_FORMS))?;
        }
        if let Some(v) = lookup("GPUWIRE_STAGING") {
            c.staging = match v.trim().to_ascii_lowercase().as_str() {
                "pinned" => Staging::GPUWIRE_STAGING_PINNED,
                "pageable" => Staging::GPUWIRE_STAGING_PAGEABLE,
                _ => return Err(bad_env("GPUWIRE_STAGING", &v, "pinned or pageable")),
            };
        }
        if let Some(v) = lookup("GPUWIRE_P2P_MATCHING") {
            c.p2p_matching = match v.trim().to_ascii_lowercase().as_str() {
                "backend" => P2pMatching::GPUWIRE_P2P_MATCHING_BACKEND,
                "mpi" => P2pMatching::GPUWIRE_P2P_MATCHING_MPI,
                _ => return Err(bad_env("GPUWIRE_P2P_MATCHING", &v, "backend or mpi")),
            };
        }
        if let Some(v) = lookup("GPUWIRE_CUDA_AWARE") {
            // Read where the backend is chosen (mpisys::cuda_support); checked here so that a bad
            // value is an error also on machines without a GPU.
            // Exactly 0 or 1, as mpisys::cuda_support reads it.
            if !matches!(v.trim(), "0" | "1") {
                return Err(bad_env("GPUWIRE_CUDA_AWARE", &v, "0 or 1"));
            }
        }
        if let Some(v) = lookup("GPUWIRE_HIER_MIN_BYTES") {
            // Read by the HIER backend (`hier_min_bytes`); checked here so that a bad value is an
            // error also where HIER is not used.
            parse_byte_count(&v).ok_or_else(|| bad_env("GPUWIRE_HIER_MIN_BYTES", &v, "a number of bytes >= 0"))?;
        }
        if let Some(v) = lookup("GPUWIRE_NCCL_INIT_TIMEOUT") {
            // Read by the NCCL backend when it makes a communicator; checked here so that a bad
            // value is an error also where NCCL is not used.
            nccl_init_timeout(&v)?;
        }
        if let Some(v) = lookup("GPUWIRE_IPC_STAGED_MAX") {
            // Read by the IPC backend (`ipc_staged_max`); checked here so that a bad value is an
            // error, not the default.
            parse_byte_count(&v).ok_or_else(|| bad_env("GPUWIRE_IPC_STAGED_MAX", &v, "a number of bytes >= 0"))?;
        }
        if let Some(v) = lookup("GPUWIRE_CHUNK_BYTES") {
            c.chunk_bytes = v
                .trim()
                .parse::<usize>()
                .ok()
                // At most i64::MAX: the C configuration's int64_t field, and the agreement's value.
                .filter(|n| (4096..=i64::MAX as usize).contains(n))
                .ok_or_else(|| bad_env("GPUWIRE_CHUNK_BYTES", &v, "a number of bytes from 4096 to 2^63 - 1"))?;
        }
        Ok(c)
    }
}

/// What the on/off variables accept (for messages).
const BOOL_FORMS: &str = "0 or 1 (also off/on, no/yes, false/true)";

/// The process-wide on/off variables read with [`env_flag`] (README, Environment variables).
const ENV_FLAGS: [&str; 3] = ["GPUWIRE_TRACE", "GPUWIRE_HOST_SYNC", "GPUWIRE_NCCL_NONBLOCKING"];

/// Whether the process-wide switch `name` (one of [`ENV_FLAGS`]) is on. Unset is off; a value
/// that is not an on/off form makes every communicator's creation fail naming it
/// (`Config::from_lookup`), so reading it as off here never goes unnoticed.
pub(crate) fn env_flag(name: &str) -> bool {
    debug_assert!(ENV_FLAGS.contains(&name));
    env(name).and_then(|v| parse_bool(&v)).unwrap_or(false)
}

/// `env_flag(name)`, read once per process and kept in `word` (`hot::read_once`): a per-call
/// flag's word in `hot::PROCESS`.
#[inline]
pub(crate) fn env_flag_once(word: &std::sync::atomic::AtomicI32, name: &str) -> bool {
    crate::hot::read_once(word, || env_flag(name) as i32) != 0
}

/// `GPUWIRE_IPC_STREAM_ORDERED` of this process: whether IPC collectives may be stream-ordered.
/// Unset or empty is on; a value that is not an on/off form makes every communicator's creation
/// fail naming it (`Config::from_lookup`), so reading it as on here never goes unnoticed.
pub(crate) fn ipc_stream_ordered() -> bool {
    env("GPUWIRE_IPC_STREAM_ORDERED").and_then(|v| parse_bool(&v)) != Some(false)
}

/// An on/off value of a GPUWIRE_* variable: 1/on/yes/true or 0/off/no/false, any case.
pub(crate) fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "on" | "yes" | "true" => Some(true),
        "0" | "off" | "no" | "false" => Some(false),
        _ => None,
    }
}

/// The shortest timeout (seconds): a shorter one cannot be kept by polling MPI, and would fail
/// communicator creation itself.
pub(crate) const MIN_TIMEOUT_SECONDS: f64 = 0.001;
/// The longest timeout (seconds, about 31.7 years): every deadline stays representable.
pub(crate) const MAX_TIMEOUT_SECONDS: f64 = 1e9;
/// What a timeout may be (for messages).
pub(crate) const TIMEOUT_FORMS: &str = "0 (no timeout) or a number of seconds from 0.001 (1 ms) to 1e9 (about 31.7 years)";

/// The decimal number of seconds `v`; `None` where it is no number, or a number other than 0 that
/// underflows to 0 (1e-400 is a timeout too short to keep, not "no timeout").
fn seconds(v: &str) -> Option<f64> {
    let v = v.trim();
    let s = v.parse::<f64>().ok()?;
    let mantissa = v.split(['e', 'E']).next().unwrap_or("");
    if s == 0.0 && mantissa.contains(|c: char| ('1'..='9').contains(&c)) {
        return None;
    }
    Some(s)
}

/// Seconds to an optional timeout: 0 = none, else MIN_TIMEOUT_SECONDS..=MAX_TIMEOUT_SECONDS;
/// `None` for any other value (negative, NaN, infinite, too short or too long).
fn timeout_in_range(s: f64) -> Option<Option<Duration>> {
    if s == 0.0 {
        Some(None)
    } else if (MIN_TIMEOUT_SECONDS..=MAX_TIMEOUT_SECONDS).contains(&s) {
        Some(Some(Duration::from_secs_f64(s)))
    } else {
        None
    }
}

/// `GPUWIRE_NCCL_INIT_TIMEOUT`'s value `v`: 0 = no limit, else seconds as a timeout (0.001 to
/// 1e9).
pub(crate) fn nccl_init_timeout(v: &str) -> Result<Option<Duration>> {
    seconds(v).and_then(timeout_in_range).ok_or_else(|| bad_env("GPUWIRE_NCCL_INIT_TIMEOUT", v, TIMEOUT_FORMS))
}

/// As `timeout_in_range`, an invalid value an error that names `field`.
pub fn timeout_from_seconds(s: f64, field: &str) -> Result<Option<Duration>> {
    timeout_in_range(s).ok_or_else(|| Error::InvalidArgument(format!("{field} = {s}: expected {TIMEOUT_FORMS}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(pairs: &[(&str, &str)]) -> Result<Config> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn env_overrides_defaults() {
        assert_eq!(with(&[]).unwrap(), Config::default());
        let c = with(&[("GPUWIRE_BACKEND", "Staged"), ("GPUWIRE_CHECK", "1"), ("GPUWIRE_TIMEOUT", "2.5"), ("GPUWIRE_DEVICE", "3")]).unwrap();
        assert_eq!(c.backend, BackendKind::GPUWIRE_BACKEND_MPI_STAGED);
        assert!(c.check);
        assert_eq!(c.timeout, Some(Duration::from_millis(2500)));
        assert_eq!(c.device, 3);
        assert_eq!(with(&[("GPUWIRE_BACKEND", "ipc")]).unwrap().backend, BackendKind::GPUWIRE_BACKEND_IPC);
        assert_eq!(with(&[("GPUWIRE_BACKEND", "IPC")]).unwrap().backend, BackendKind::GPUWIRE_BACKEND_IPC);
    }

    #[test]
    fn bad_env_values_name_the_variable() {
        let e = with(&[("GPUWIRE_BACKEND", "gpu")]).unwrap_err();
        assert!(e.to_string().contains("GPUWIRE_BACKEND"));
        let e = with(&[("GPUWIRE_CHECK", "maybe")]).unwrap_err().to_string();
        assert!(e.contains("GPUWIRE_CHECK") && e.contains("no/yes"), "{e}");
        let e = with(&[("GPUWIRE_DEBUG", "banana")]).unwrap_err().to_string();
        assert!(e.contains("GPUWIRE_DEBUG"), "{e}");
        for name in super::ENV_FLAGS {
            let e = with(&[(name, "2")]).unwrap_err().to_string();
            assert!(e.contains(name) && e.contains("0 or 1"), "{e}");
            assert!(with(&[(name, "off")]).is_ok() && with(&[(name, "1")]).is_ok());
        }
        // Read outside the configuration; a value they would ignore is an error at creation.
        for name in ["GPUWIRE_PROGRESS_THREAD", "GPUWIRE_IPC_PROGRESS_THREAD", "GPUWIRE_IPC_KERNELS", "GPUWIRE_IPC_COPY_ROWS", "GPUWIRE_IPC_STREAM_ORDERED"] {
            let e = with(&[(name, "fused")]).unwrap_err();
            assert_eq!(e.status(), crate::error::gpuwire_status::GPUWIRE_ERROR_INVALID_ARGUMENT, "{name}");
            assert!(e.to_string().contains(name), "{e}");
            assert!(with(&[(name, "0")]).is_ok() && with(&[(name, "yes")]).is_ok());
        }
        // GPUWIRE_IPC_STREAM_ORDERED: any value but "0" was on ("off", "false", "no" too).
        for bad in ["2", "-1", "disabled", "0 0"] {
            let e = with(&[("GPUWIRE_IPC_STREAM_ORDERED", bad)]).unwrap_err();
            assert_eq!(e.status(), crate::error::gpuwire_status::GPUWIRE_ERROR_INVALID_ARGUMENT, "{bad}");
            let m = e.to_string();
            assert!(m.contains("GPUWIRE_IPC_STREAM_ORDERED") && m.contains(BOOL_FORMS), "{bad}: {m}");
        }
        for good in ["0", "1", "off", "ON", " no ", "Yes", "false", "TRUE"] {
            assert!(with(&[("GPUWIRE_IPC_STREAM_ORDERED", good)]).is_ok(), "{good}");
        }
        assert!(with(&[("GPUWIRE_DEBUG", "yes")]).is_ok() && with(&[("GPUWIRE_CHECK", "On")]).unwrap().check);
        // GPUWIRE_CUDA_AWARE is 0 or 1 only (its reader, mpisys::cuda_support, takes no other form).
        let e = with(&[("GPUWIRE_CUDA_AWARE", "yes")]).unwrap_err().to_string();
        assert!(e.contains("GPUWIRE_CUDA_AWARE") && e.contains("0 or 1"), "{e}");
        assert!(with(&[("GPUWIRE_TIMEOUT", "-1")]).is_err());
        // A number that underflows to 0 is not "no timeout": too short, refused (it was taken as
        // 0). Zero written otherwise is 0.
        for bad in ["1e-400", "0.5e-330", "2E-999"] {
            let e = with(&[("GPUWIRE_TIMEOUT", bad)]).unwrap_err().to_string();
            assert!(e.contains("GPUWIRE_TIMEOUT") && e.contains("0.001 (1 ms)"), "{bad}: {e}");
            assert!(nccl_init_timeout(bad).is_err(), "{bad}");
        }
        for zero in ["0", "0.0", "0e5", "-0", " 0.000 "] {
            assert_eq!(with(&[("GPUWIRE_TIMEOUT", zero)]).unwrap().timeout, None, "{zero}");
        }
        assert!(with(&[("GPUWIRE_DEVICE", "-2")]).is_err());
        assert!(with(&[("GPUWIRE_CHUNK_BYTES", "12")]).is_err());
        // Beyond int64_t (the C field, the agreement across ranks): refused, not wrapped negative.
        assert!(with(&[("GPUWIRE_CHUNK_BYTES", "9223372036854775808")]).is_err());
        assert!(with(&[("GPUWIRE_CHUNK_BYTES", "9223372036854775807")]).is_ok());
        assert!(with(&[("GPUWIRE_HIER_MIN_BYTES", "-1")]).is_err());
        assert!(with(&[("GPUWIRE_HIER_MIN_BYTES", "0")]).is_ok());
        assert!(with(&[("GPUWIRE_IPC_STAGED_MAX", "256K")]).unwrap_err().to_string().contains("GPUWIRE_IPC_STAGED_MAX"));
        assert!(with(&[("GPUWIRE_IPC_STAGED_MAX", "0")]).is_ok() && with(&[("GPUWIRE_IPC_STAGED_MAX", "1048576")]).is_ok());
        assert!(with(&[("GPUWIRE_STAGING", "mapped")]).is_err());
        // Read by the NCCL backend only; refused here also where NCCL is not used.
        for bad in ["-1", "abc", "nan", "inf", "0.0001", "2e9"] {
            let e = with(&[("GPUWIRE_NCCL_INIT_TIMEOUT", bad)]).unwrap_err().to_string();
            assert!(e.contains("GPUWIRE_NCCL_INIT_TIMEOUT") && e.contains("0.001 (1 ms) to 1e9"), "{bad}: {e}");
            assert!(nccl_init_timeout(bad).is_err(), "{bad}");
        }
        assert!(nccl_init_timeout("").is_err());
        assert!(with(&[("GPUWIRE_NCCL_INIT_TIMEOUT", "0")]).is_ok() && with(&[("GPUWIRE_NCCL_INIT_TIMEOUT", "120")]).is_ok());
        assert_eq!(nccl_init_timeout("0").unwrap(), None);
        assert_eq!(nccl_init_timeout(" 2.5 ").unwrap(), Some(Duration::from_millis(2500)));
        assert_eq!(with(&[("GPUWIRE_P2P_MATCHING", " MPI ")]).unwrap().p2p_matching, P2pMatching::GPUWIRE_P2P_MATCHING_MPI);
        assert_eq!(with(&[("GPUWIRE_P2P_MATCHING", "backend")]).unwrap().p2p_matching, P2pMatching::GPUWIRE_P2P_MATCHING_BACKEND);
        let e = with(&[("GPUWIRE_P2P_MATCHING", "nccl")]).unwrap_err().to_string();
        assert!(e.contains("GPUWIRE_P2P_MATCHING") && e.contains("backend or mpi"), "{e}");
        assert!(with(&[("GPUWIRE_CUDA_AWARE", "2")]).unwrap_err().to_string().contains("GPUWIRE_CUDA_AWARE"));
        // Timeouts: 0, or 1 ms to 1e9 s; below, above, NaN and infinities are refused with a
        // message (1e300 and 1.8447e19 once reached a panic in Duration::from_secs_f64).
        for bad in ["1e300", "1.8447e19", "18446744073709551616", "1e10", "1000000000.5", "1e-9", "0.0009", "-0", "-1e-9", "nan", "inf", "-inf", "5s"] {
            let e = with(&[("GPUWIRE_TIMEOUT", bad)]);
            if bad == "-0" {
                assert_eq!(e.unwrap().timeout, None); // -0 == 0: no timeout
                continue;
            }
            let e = e.unwrap_err();
            assert_eq!(e.status(), crate::error::gpuwire_status::GPUWIRE_ERROR_INVALID_ARGUMENT, "{bad}");
            let m = e.to_string();
            assert!(m.contains("GPUWIRE_TIMEOUT") && m.contains("0.001 (1 ms) to 1e9"), "{bad}: {m}");
        }
        assert_eq!(with(&[("GPUWIRE_TIMEOUT", "0.001")]).unwrap().timeout, Some(Duration::from_millis(1)));
        assert_eq!(with(&[("GPUWIRE_TIMEOUT", "1e9")]).unwrap().timeout, Some(Duration::from_secs(1_000_000_000)));
        assert_eq!(with(&[("GPUWIRE_TIMEOUT", "0")]).unwrap().timeout, None);
        for bad in [1e300, 1.8446744073709552e19, f64::MAX, 1e9 * (1.0 + f64::EPSILON), 1e-9, 0.000999, -1.0, f64::NAN, f64::INFINITY, f64::MIN_POSITIVE] {
            let m = timeout_from_seconds(bad, "config.timeout_seconds").unwrap_err().to_string();
            assert!(m.contains("config.timeout_seconds") && m.contains("1 ms"), "{bad}: {m}");
        }
        assert_eq!(timeout_from_seconds(2.5, "t").unwrap(), Some(Duration::from_millis(2500)));
        let long = "x".repeat(3000);
        assert!(with(&[("GPUWIRE_BACKEND", long.as_str())]).unwrap_err().to_string().len() < 300);
    }
}
