//! Shared code of the MPI integration tests.
//!
//! Each MPI test file is a `harness = false` test. Run by `cargo test` (not under MPI), its
//! `main` is the *parent*: it re-executes the same binary under the MPI launcher once per job
//! (a rank count and a mode), each with a timeout, and fails when any job fails. Under the
//! launcher (env `GPUWIRE_TEST_CHILD=1`) `main` is a *child*: one rank of the job, which runs the
//! checks through gpuwire's C ABI (`gpuwire::ffi::*::gpuwire_*`) and exits non-zero after
//! printing every failed check with its rank, what failed, the expected and the actual value.
//!
//! Launcher: `$GPUWIRE_MPIEXEC` (default `mpirun`; it may carry extra arguments). Its flavour is
//! read once from `--version`: Open MPI gets `--oversubscribe --bind-to none` and the allow-root
//! variables, MPICH's Hydra gets `-n N` and `-genv`. The parent refuses to launch a binary that
//! is linked against another MPI than the launcher's (started that way, every process would be a
//! singleton of size 1); every child also checks that it got the rank count the parent asked for.
//!
//! Filters: `cargo test -- NAME` runs only the jobs whose name contains NAME; `--list` lists them.

#![allow(dead_code)]

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, c_void};
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use gpuwire::Status;
use gpuwire::ffi::buffer::*;
use gpuwire::ffi::comm::*;
use gpuwire::ffi::lifecycle::*;
use gpuwire::ffi::status::*;
use gpuwire::types::{Dtype, ReduceOp};
use half::{bf16, f16};

// ---- parent: launching jobs ----------------------------------------------------------------

/// Env var that marks a process as a child launched by the parent.
pub const CHILD_ENV: &str = "GPUWIRE_TEST_CHILD";
/// Env var with the rank count the parent asked for.
pub const NP_ENV: &str = "GPUWIRE_TEST_NP";
/// Env var with the job's mode (what the child runs).
pub const MODE_ENV: &str = "GPUWIRE_TEST_MODE";
/// Wall-clock limit of one launched job (GPUWIRE_TEST_TIMEOUT seconds overrides it).
pub const JOB_TIMEOUT: Duration = Duration::from_secs(120);

fn job_timeout() -> Duration {
    std::env::var("GPUWIRE_TEST_TIMEOUT").ok().and_then(|v| v.parse().ok()).map(Duration::from_secs).unwrap_or(JOB_TIMEOUT)
}

/// gpuwire configuration variables: cleared for launched jobs so that a developer's environment
/// cannot change what the tests see; a job sets the ones it needs.
const CONFIG_VARS: [&str; 7] =
    ["GPUWIRE_BACKEND", "GPUWIRE_DEVICE", "GPUWIRE_CHECK", "GPUWIRE_TIMEOUT", "GPUWIRE_STAGING", "GPUWIRE_CHUNK_BYTES", "GPUWIRE_P2P_MATCHING"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    OpenMpi,
    Mpich,
    Unknown,
}

impl Flavour {
    fn name(self) -> &'static str {
        match self {
            Flavour::OpenMpi => "Open MPI",
            Flavour::Mpich => "MPICH",
            Flavour::Unknown => "an unknown MPI",
        }
    }
}

/// The launcher command (program and its own arguments) and its flavour.
pub struct Launcher {
    pub argv: Vec<String>,
    pub flavour: Flavour,
}

/// Reads `$GPUWIRE_MPIEXEC` and runs `--version` once.
pub fn launcher() -> &'static Launcher {
    static L: OnceLock<Launcher> = OnceLock::new();
    L.get_or_init(|| {
        let cmd = std::env::var("GPUWIRE_MPIEXEC").ok().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| "mpirun".into());
        let argv: Vec<String> = cmd.split_whitespace().map(String::from).collect();
        let out = Command::new(&argv[0])
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run the MPI launcher `{} --version` (GPUWIRE_MPIEXEC={cmd:?}): {e}", argv[0]));
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let flavour = if text.contains("Open MPI") || text.contains("OpenRTE") {
            Flavour::OpenMpi
        } else if text.contains("HYDRA") || text.contains("MPICH") {
            Flavour::Mpich
        } else {
            Flavour::Unknown
        };
        Launcher { argv, flavour }
    })
}

/// The MPI library this binary is linked against (MPI_Get_library_version may be called before
/// MPI_Init; the parent never initializes MPI).
pub fn linked_mpi() -> (Flavour, String) {
    let mut buf = vec![0u8; 8192];
    let mut len: c_int = 0;
    // SAFETY: the buffer holds MPI_MAX_LIBRARY_VERSION_STRING bytes of Open MPI and MPICH.
    unsafe { mpi::ffi::MPI_Get_library_version(buf.as_mut_ptr().cast(), &mut len) };
    buf.truncate(len.max(0) as usize);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let first = text.replace('\0', "").lines().next().unwrap_or("").trim().to_string();
    let flavour = if text.contains("Open MPI") {
        Flavour::OpenMpi
    } else if text.contains("MPICH") {
        Flavour::Mpich
    } else {
        Flavour::Unknown
    };
    (flavour, first)
}

/// One launched job of a test file.
#[derive(Clone, Debug)]
pub struct Job {
    /// Shown in the log and matched by filters.
    pub name: String,
    pub np: usize,
    /// Passed to the child in GPUWIRE_TEST_MODE.
    pub mode: String,
    /// Extra environment for every rank.
    pub env: Vec<(String, String)>,
}

impl Job {
    pub fn new(name: impl Into<String>, np: usize, mode: impl Into<String>) -> Job {
        Job { name: name.into(), np, mode: mode.into(), env: Vec::new() }
    }
    pub fn with_env(mut self, k: &str, v: &str) -> Job {
        self.env.push((k.into(), v.into()));
        self
    }
}

struct Outcome {
    ok: bool,
    why: String,
    output: String,
    elapsed: Duration,
}

fn launch(job: &Job) -> Outcome {
    let l = launcher();
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut env: Vec<(String, String)> = vec![
        (CHILD_ENV.into(), "1".into()),
        (NP_ENV.into(), job.np.to_string()),
        (MODE_ENV.into(), job.mode.clone()),
        ("RUST_BACKTRACE".into(), "1".into()),
    ];
    env.extend(job.env.iter().cloned());
    let mut cmd = Command::new(&l.argv[0]);
    cmd.args(&l.argv[1..]);
    match l.flavour {
        Flavour::OpenMpi => {
            cmd.args(["-n", &job.np.to_string(), "--oversubscribe", "--bind-to", "none"]);
            cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
            for (k, _) in &env {
                cmd.args(["-x", k]);
            }
        }
        Flavour::Mpich => {
            cmd.args(["-n", &job.np.to_string()]);
            for (k, v) in &env {
                cmd.args(["-genv", k, v]);
            }
        }
        Flavour::Unknown => {
            cmd.args(["-n", &job.np.to_string()]);
        }
    }
    for v in CONFIG_VARS {
        cmd.env_remove(v);
    }
    // Both launchers also forward the launcher's own environment to local ranks.
    for (k, v) in &env {
        cmd.env(k, v);
    }
    cmd.arg(&exe).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0); // the job gets its own process group, killed as one on timeout
    }
    let start = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Outcome { ok: false, why: format!("cannot start {:?}: {e}", l.argv[0]), output: String::new(), elapsed: start.elapsed() };
        }
    };
    let pgid = child.id() as i32;
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out_pipe.read_to_end(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err_pipe.read_to_end(&mut s);
        s
    });
    let mut timed_out = false;
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        if start.elapsed() > job_timeout() {
            timed_out = true;
            // SAFETY: signals our own child's process group.
            unsafe { libc::killpg(pgid, libc::SIGTERM) };
            let grace = Instant::now();
            while grace.elapsed() < Duration::from_secs(3) {
                if child.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            // SAFETY: as above; ranks that ignored SIGTERM.
            unsafe { libc::killpg(pgid, libc::SIGKILL) };
            break child.wait().expect("wait");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = start.elapsed();
    // Orphaned ranks could keep the pipes open: do not wait for them forever.
    let output = join_pipe(out_t) + &join_pipe(err_t);
    let (ok, why) = if timed_out {
        (false, format!("timed out after {} s and was killed (a hang?)", job_timeout().as_secs()))
    } else if status.success() {
        (true, String::new())
    } else {
        (false, format!("the launcher exited with {status}"))
    };
    Outcome { ok, why, output, elapsed }
}

fn join_pipe(t: std::thread::JoinHandle<Vec<u8>>) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !t.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    if t.is_finished() { String::from_utf8_lossy(&t.join().unwrap_or_default()).into_owned() } else { "(output pipe still open)\n".into() }
}

/// Parent side of a test file: runs `jobs` (those matching the command-line filters) one after
/// another and exits non-zero if any fails.
pub fn parent_main(suite: &str, jobs: Vec<Job>) -> ! {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        for j in &jobs {
            println!("{suite}::{}: test", j.name);
        }
        std::process::exit(0);
    }
    // libtest-like: arguments that are not flags (nor a flag's value) filter the jobs by name;
    // `--skip NAME` leaves out the jobs whose name contains NAME.
    let (mut filters, mut skips) = (Vec::new(), Vec::new());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--skip" => skips.extend(it.next()),
            "--test-threads" | "--format" | "--color" | "--logfile" | "-Z" => {
                it.next();
            }
            f if !f.starts_with('-') => filters.push(f),
            _ => {}
        }
    }
    let full = |j: &Job| format!("{suite}::{}", j.name);
    let selected: Vec<&Job> = jobs
        .iter()
        .filter(|j| filters.is_empty() || filters.iter().any(|f| full(j).contains(*f)))
        .filter(|j| !skips.iter().any(|s| full(j).contains(s.as_str())))
        .collect();
    let l = launcher();
    let verbose = std::env::var("GPUWIRE_TEST_VERBOSE").is_ok_and(|v| v == "1");
    println!("\nrunning {} MPI jobs of {suite} with `{}` ({})", selected.len(), l.argv.join(" "), l.flavour.name());
    if selected.is_empty() {
        println!("test result: ok. 0 passed; 0 failed; {} filtered out\n", jobs.len());
        std::process::exit(0);
    }
    let (linked, linked_text) = linked_mpi();
    if linked != Flavour::Unknown && l.flavour != Flavour::Unknown && linked != l.flavour {
        eprintln!(
            "error: this test binary is linked against {} ({linked_text}) but the launcher `{}` is {}: every rank would start as a \
             singleton. Set GPUWIRE_MPIEXEC to the matching launcher (Open MPI: mpirun; MPICH: mpiexec.mpich) or rebuild \
             (MPICC=mpicc.mpich CARGO_TARGET_DIR=target/mpich for MPICH).",
            linked.name(),
            l.argv.join(" "),
            l.flavour.name()
        );
        std::process::exit(1);
    }
    let total = Instant::now();
    let mut failed = Vec::new();
    for job in &selected {
        let o = launch(job);
        let secs = o.elapsed.as_secs_f64();
        if o.ok {
            println!("test {suite}::{} (np={}) ... ok ({secs:.2} s)", job.name, job.np);
            if verbose {
                print!("{}", o.output);
            }
        } else {
            println!("test {suite}::{} (np={}) ... FAILED ({secs:.2} s): {}", job.name, job.np, o.why);
            println!("---- output of {suite}::{} ----\n{}---- end ----", job.name, o.output);
            failed.push(job.name.clone());
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed; {} filtered out; finished in {:.2}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        selected.len() - failed.len(),
        failed.len(),
        jobs.len() - selected.len(),
        total.elapsed().as_secs_f64()
    );
    if !failed.is_empty() {
        println!("failed jobs: {}", failed.join(", "));
        std::process::exit(1);
    }
    std::process::exit(0);
}

/// Whether this process is a launched rank.
pub fn is_child() -> bool {
    std::env::var(CHILD_ENV).is_ok_and(|v| v == "1")
}

/// The child's mode and expected rank count.
pub fn child_args() -> (String, usize) {
    let mode = std::env::var(MODE_ENV).unwrap_or_default();
    let np = std::env::var(NP_ENV).ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        eprintln!("child started without {NP_ENV}");
        std::process::exit(2)
    });
    (mode, np)
}

// ---- child: the checking context -----------------------------------------------------------

/// One rank's view of a job: its communicator over MPI_COMM_WORLD and the failures so far.
pub struct Ctx {
    pub rank: usize,
    pub size: usize,
    pub world: u64,
    failures: Cell<usize>,
    checks: Cell<usize>,
    section: RefCell<String>,
}

/// The calling thread's gpuwire_last_error message.
pub fn last_error() -> String {
    let mut buf = vec![0 as c_char; 1024];
    let st = gpuwire_last_error(buf.as_mut_ptr(), buf.len());
    assert_eq!(st, Status::GPUWIRE_SUCCESS, "gpuwire_last_error itself failed");
    // SAFETY: NUL-terminated by gpuwire_last_error.
    unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
}

/// Exits this rank at once after printing why (a failure that makes going on pointless).
pub fn die(rank: Option<usize>, what: &str) -> ! {
    let who = rank.map(|r| format!("rank {r}")).unwrap_or_else(|| "rank ?".into());
    eprintln!("[{who}] FATAL: {what} (last gpuwire error: {:?})", last_error());
    std::process::exit(1);
}

impl Ctx {
    /// gpuwire_init (which initializes MPI), a communicator over MPI_COMM_WORLD, and the check
    /// that the job has the rank count the parent asked for.
    pub fn init(expected_np: usize) -> Ctx {
        if gpuwire_init() != Status::GPUWIRE_SUCCESS {
            die(None, "gpuwire_init failed");
        }
        Self::after_init(expected_np)
    }

    /// As `init`, for a program that already initialized gpuwire (and maybe MPI) itself.
    pub fn after_init(expected_np: usize) -> Ctx {
        let mut world = 0u64;
        if gpuwire_comm_world(std::ptr::null(), &mut world) != Status::GPUWIRE_SUCCESS {
            die(None, "gpuwire_comm_world failed");
        }
        let (mut rank, mut size) = (-1i32, -1i32);
        if gpuwire_comm_rank(world, &mut rank) != Status::GPUWIRE_SUCCESS || gpuwire_comm_size(world, &mut size) != Status::GPUWIRE_SUCCESS {
            die(None, "gpuwire_comm_rank/size failed");
        }
        if size as usize != expected_np {
            die(
                Some(rank as usize),
                &format!(
                    "this job has {size} rank(s), the test asked for {expected_np}: is the launcher the MPI this binary is \
                     linked against? (a foreign launcher starts every process as a singleton)"
                ),
            );
        }
        Ctx {
            rank: rank as usize,
            size: size as usize,
            world,
            failures: Cell::new(0),
            checks: Cell::new(0),
            section: RefCell::new(String::new()),
        }
    }

    /// Names the part of the test that the following checks belong to (printed, so that the
    /// output of a job that hangs shows where each rank was).
    pub fn section(&self, name: &str) {
        println!("[rank {}/{}] {name}", self.rank, self.size);
        *self.section.borrow_mut() = name.to_string();
    }

    /// Records one check; prints a failure with rank, section, what, expected and actual.
    pub fn check(&self, ok: bool, what: impl FnOnce() -> String) -> bool {
        self.checks.set(self.checks.get() + 1);
        if !ok {
            self.failures.set(self.failures.get() + 1);
            // One write per line, so that the lines of different ranks do not interleave.
            let line = format!("[rank {}/{}] FAIL {}: {}\n", self.rank, self.size, self.section.borrow(), what());
            let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
        }
        ok
    }

    pub fn check_eq<T: PartialEq + std::fmt::Debug>(&self, got: T, expected: T, what: &str) -> bool {
        self.check(got == expected, || format!("{what}: expected {expected:?}, got {got:?}"))
    }

    /// Checks a status code; on a mismatch the failure also shows gpuwire_last_error.
    pub fn status(&self, got: Status, expected: Status, what: &str) -> bool {
        self.check(got == expected, || format!("{what}: expected {expected:?}, got {got:?} (last error: {:?})", last_error()))
    }

    /// `ok` for GPUWIRE_SUCCESS.
    pub fn ok(&self, got: Status, what: &str) -> bool {
        self.status(got, Status::GPUWIRE_SUCCESS, what)
    }

    /// Checks an error status and that gpuwire_last_error says something containing every one
    /// of `needles` (case-insensitive).
    pub fn error(&self, got: Status, expected: Status, needles: &[&str], what: &str) -> bool {
        if !self.status(got, expected, what) {
            return false;
        }
        let msg = last_error();
        let lower = msg.to_lowercase();
        let missing: Vec<&&str> = needles.iter().filter(|n| !lower.contains(&n.to_lowercase())).collect();
        self.check(!msg.is_empty() && missing.is_empty(), || {
            format!("{what}: the last error message should mention {needles:?} (missing {missing:?}), it is {msg:?}")
        })
    }

    pub fn failures(&self) -> usize {
        self.failures.get()
    }

    /// Frees the world communicator, finalizes gpuwire and exits: 0 if every check passed.
    pub fn finish(self) -> ! {
        let fin = gpuwire_comm_free(self.world);
        self.ok(fin, "gpuwire_comm_free(world)");
        let st = gpuwire_finalize();
        self.ok(st, "gpuwire_finalize");
        self.exit()
    }

    /// Exits without finalizing (the caller did): 0 if every check passed.
    pub fn exit(self) -> ! {
        let f = self.failures.get();
        if f > 0 {
            eprintln!("[rank {}/{}] {f} of {} checks FAILED", self.rank, self.size, self.checks.get());
            std::process::exit(1);
        }
        println!("[rank {}/{}] all {} checks passed", self.rank, self.size, self.checks.get());
        std::process::exit(0);
    }
}

// ---- buffers -------------------------------------------------------------------------------

pub const SPACE_HOST: i32 = gpuwire::types::Space::GPUWIRE_SPACE_HOST as i32;

/// An owned host buffer of gpuwire (gpuwire_buffer_alloc), read and written as bytes through
/// gpuwire_buffer_copy_from_host / _to_host. Freed on drop unless already freed.
pub struct Buf {
    pub h: u64,
    pub dtype: Dtype,
    pub count: usize,
    freed: Cell<bool>,
}

impl Buf {
    pub fn new(dtype: Dtype, count: usize) -> Buf {
        let mut h = 0u64;
        let st = gpuwire_buffer_alloc(count as i64, dtype as i32, SPACE_HOST, -1, &mut h);
        if st != Status::GPUWIRE_SUCCESS {
            die(None, &format!("gpuwire_buffer_alloc({count}, {}) returned {st:?}", dtype.name()));
        }
        Buf { h, dtype, count, freed: Cell::new(false) }
    }

    /// A buffer holding `bytes` (its length must be a multiple of the element size).
    pub fn from_bytes(dtype: Dtype, bytes: &[u8]) -> Buf {
        assert_eq!(bytes.len() % dtype.size(), 0, "test bug: {} bytes are not whole {} elements", bytes.len(), dtype.name());
        let b = Buf::new(dtype, bytes.len() / dtype.size());
        b.write(bytes);
        b
    }

    /// A view of elements [offset, offset + count).
    pub fn view(&self, offset: usize, count: usize) -> Buf {
        let mut h = 0u64;
        let st = gpuwire_buffer_view(self.h, offset as i64, count as i64, &mut h);
        if st != Status::GPUWIRE_SUCCESS {
            die(None, &format!("gpuwire_buffer_view({offset}, {count}) returned {st:?}"));
        }
        Buf { h, dtype: self.dtype, count, freed: Cell::new(false) }
    }

    pub fn bytes(&self) -> usize {
        self.count * self.dtype.size()
    }

    pub fn write(&self, bytes: &[u8]) {
        assert_eq!(bytes.len(), self.bytes(), "test bug: writing {} bytes into a buffer of {}", bytes.len(), self.bytes());
        let st = gpuwire_buffer_copy_from_host(self.h, bytes.as_ptr().cast(), std::ptr::null_mut());
        if st != Status::GPUWIRE_SUCCESS {
            die(None, &format!("gpuwire_buffer_copy_from_host returned {st:?}"));
        }
    }

    pub fn read(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.bytes()];
        let st = gpuwire_buffer_copy_to_host(self.h, v.as_mut_ptr().cast(), std::ptr::null_mut());
        if st != Status::GPUWIRE_SUCCESS {
            die(None, &format!("gpuwire_buffer_copy_to_host returned {st:?}"));
        }
        v
    }

    /// Frees the handle now and returns the status.
    pub fn free(&self) -> Status {
        self.freed.set(true);
        gpuwire_buffer_free(self.h)
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        if !self.freed.get() {
            let _ = gpuwire_buffer_free(self.h);
        }
    }
}

// ---- values --------------------------------------------------------------------------------

/// A logical element value: integers as i128, reals and complex numbers as f64 (every test value
/// is exactly representable in the datatype; `encode` refuses one that is not).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum V {
    I(i128),
    F(f64),
    C(f64, f64),
    /// A (value, index) pair (the value as f64, exact for every pair datatype's values here).
    P(f64, i32),
}

pub fn is_float(d: Dtype) -> bool {
    !d.is_integer() && !d.is_complex() && !is_pair(d)
}

/// The (value, int32 index) pair datatypes (as MPI_FLOAT_INT, MPI_DOUBLE_INT, MPI_2INT).
pub fn is_pair(d: Dtype) -> bool {
    matches!(d, Dtype::GPUWIRE_FLOAT32_INT32 | Dtype::GPUWIRE_FLOAT64_INT32 | Dtype::GPUWIRE_INT32_INT32)
}

pub fn is_signed(d: Dtype) -> bool {
    matches!(d, Dtype::GPUWIRE_INT8 | Dtype::GPUWIRE_INT32 | Dtype::GPUWIRE_INT64)
}

/// Bits of an integer datatype.
pub fn int_bits(d: Dtype) -> u32 {
    (d.size() * 8) as u32
}

fn exact_real(d: Dtype, x: f64) -> Vec<u8> {
    match d {
        Dtype::GPUWIRE_FLOAT16 => {
            let h = f16::from_f64(x);
            assert!(h.to_f64() == x || x.is_nan(), "test bug: {x} is not exact in float16");
            h.to_bits().to_ne_bytes().to_vec()
        }
        Dtype::GPUWIRE_BFLOAT16 => {
            let h = bf16::from_f64(x);
            assert!(h.to_f64() == x || x.is_nan(), "test bug: {x} is not exact in bfloat16");
            h.to_bits().to_ne_bytes().to_vec()
        }
        Dtype::GPUWIRE_FLOAT32 | Dtype::GPUWIRE_COMPLEX64 => {
            assert!((x as f32) as f64 == x || x.is_nan(), "test bug: {x} is not exact in float32");
            (x as f32).to_ne_bytes().to_vec()
        }
        _ => x.to_ne_bytes().to_vec(),
    }
}

/// Native-endian bytes of `v` as one element of `d`.
pub fn encode(d: Dtype, v: V) -> Vec<u8> {
    match (v, d) {
        (V::I(x), _) if d.is_integer() => {
            let bits = int_bits(d);
            let (lo, hi) = if is_signed(d) { (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1) } else { (0, (1i128 << bits) - 1) };
            assert!((lo..=hi).contains(&x), "test bug: {x} does not fit {}", d.name());
            (x as u128).to_ne_bytes()[..d.size()].to_vec()
        }
        (V::F(x), _) if is_float(d) => exact_real(d, x),
        (V::C(re, im), Dtype::GPUWIRE_COMPLEX64 | Dtype::GPUWIRE_COMPLEX128) => {
            let mut b = exact_real(d, re);
            b.extend(exact_real(d, im));
            b
        }
        (V::P(x, i), Dtype::GPUWIRE_FLOAT32_INT32) => [exact_real(Dtype::GPUWIRE_FLOAT32, x), i.to_ne_bytes().to_vec()].concat(),
        // C layout: double, int32, 4 bytes of padding (zero here).
        (V::P(x, i), Dtype::GPUWIRE_FLOAT64_INT32) => [x.to_ne_bytes().to_vec(), i.to_ne_bytes().to_vec(), vec![0; 4]].concat(),
        (V::P(x, i), Dtype::GPUWIRE_INT32_INT32) => {
            assert_eq!(x as i32 as f64, x, "test bug: {x} is no int32");
            [(x as i32).to_ne_bytes().to_vec(), i.to_ne_bytes().to_vec()].concat()
        }
        _ => panic!("test bug: value {v:?} for {}", d.name()),
    }
}

/// The element `bytes` (one element of `d`) as a logical value.
pub fn decode(d: Dtype, bytes: &[u8]) -> V {
    assert_eq!(bytes.len(), d.size());
    let u16v = || u16::from_ne_bytes([bytes[0], bytes[1]]);
    let f32v = |b: &[u8]| f32::from_ne_bytes(b.try_into().unwrap()) as f64;
    let f64v = |b: &[u8]| f64::from_ne_bytes(b.try_into().unwrap());
    match d {
        Dtype::GPUWIRE_INT8 => V::I(bytes[0] as i8 as i128),
        Dtype::GPUWIRE_UINT8 => V::I(bytes[0] as i128),
        Dtype::GPUWIRE_INT32 => V::I(i32::from_ne_bytes(bytes.try_into().unwrap()) as i128),
        Dtype::GPUWIRE_UINT32 => V::I(u32::from_ne_bytes(bytes.try_into().unwrap()) as i128),
        Dtype::GPUWIRE_INT64 => V::I(i64::from_ne_bytes(bytes.try_into().unwrap()) as i128),
        Dtype::GPUWIRE_UINT64 => V::I(u64::from_ne_bytes(bytes.try_into().unwrap()) as i128),
        Dtype::GPUWIRE_FLOAT16 => V::F(f16::from_bits(u16v()).to_f64()),
        Dtype::GPUWIRE_BFLOAT16 => V::F(bf16::from_bits(u16v()).to_f64()),
        Dtype::GPUWIRE_FLOAT32 => V::F(f32v(bytes)),
        Dtype::GPUWIRE_FLOAT64 => V::F(f64v(bytes)),
        Dtype::GPUWIRE_COMPLEX64 => V::C(f32v(&bytes[..4]), f32v(&bytes[4..])),
        Dtype::GPUWIRE_COMPLEX128 => V::C(f64v(&bytes[..8]), f64v(&bytes[8..])),
        Dtype::GPUWIRE_FLOAT32_INT32 => V::P(f32v(&bytes[..4]), i32::from_ne_bytes(bytes[4..8].try_into().unwrap())),
        Dtype::GPUWIRE_FLOAT64_INT32 => V::P(f64v(&bytes[..8]), i32::from_ne_bytes(bytes[8..12].try_into().unwrap())),
        Dtype::GPUWIRE_INT32_INT32 => V::P(i32::from_ne_bytes(bytes[..4].try_into().unwrap()) as f64, i32::from_ne_bytes(bytes[4..8].try_into().unwrap())),
    }
}

/// Encodes a vector of values.
pub fn encode_all(d: Dtype, vs: &[V]) -> Vec<u8> {
    vs.iter().flat_map(|v| encode(d, *v)).collect()
}

/// Decodes every element of `bytes`.
pub fn decode_all(d: Dtype, bytes: &[u8]) -> Vec<V> {
    bytes.chunks_exact(d.size()).map(|c| decode(d, c)).collect()
}

/// Deterministic pseudo-random bytes (splitmix64 of `seed`): data for operations that only move
/// bytes, so every bit pattern (NaN payloads, negative zero, subnormals) must arrive unchanged.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(0xD1B5_4A32_D192_ED03);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        out.extend_from_slice(&z.to_ne_bytes());
    }
    out.truncate(len);
    out
}

/// A fill byte for receive buffers that must stay untouched (or be overwritten entirely).
pub const SENTINEL: u8 = 0xA5;

pub fn sentinel(len: usize) -> Vec<u8> {
    vec![SENTINEL; len]
}

/// Compares two byte images element by element; reports the first few differing elements with
/// their decoded values.
pub fn check_bytes(ctx: &Ctx, d: Dtype, got: &[u8], expected: &[u8], what: &str) -> bool {
    // The padding after a float64_int32's index is no part of its value (MPI reductions do not
    // write it).
    let unpadded = |b: &[u8]| -> Vec<u8> {
        let mut b = b.to_vec();
        if d == Dtype::GPUWIRE_FLOAT64_INT32 {
            b.chunks_mut(16).for_each(|e| e.iter_mut().skip(12).for_each(|x| *x = 0));
        }
        b
    };
    let (got, expected) = (&unpadded(got)[..], &unpadded(expected)[..]);
    if got == expected {
        return ctx.check(true, String::new);
    }
    ctx.check(false, || {
        if got.len() != expected.len() {
            return format!("{what}: expected {} bytes, got {}", expected.len(), got.len());
        }
        let diffs: Vec<String> = got
            .chunks_exact(d.size())
            .zip(expected.chunks_exact(d.size()))
            .enumerate()
            .filter(|(_, (g, e))| g != e)
            .take(4)
            .map(|(i, (g, e))| format!("element {i}: expected {:?} ({e:02x?}), got {:?} ({g:02x?})", decode(d, e), decode(d, g)))
            .collect();
        format!("{what} ({}): {}", d.name(), diffs.join("; "))
    })
}

// ---- independent reference reductions ------------------------------------------------------

/// The result of reducing `vals` (one per rank, in rank order) with `op`, computed here in
/// i128/f64 (every test value is chosen so that this is exact in the datatype).
pub fn reference(op: ReduceOp, vals: &[V]) -> V {
    let p = vals.len();
    match vals[0] {
        V::I(_) => {
            let xs: Vec<i128> = vals.iter().map(|v| if let V::I(x) = v { *x } else { unreachable!() }).collect();
            let r = match op {
                ReduceOp::GPUWIRE_SUM => xs.iter().sum(),
                ReduceOp::GPUWIRE_PROD => xs.iter().product(),
                ReduceOp::GPUWIRE_MAX => *xs.iter().max().unwrap(),
                ReduceOp::GPUWIRE_MIN => *xs.iter().min().unwrap(),
                // Sum divided by the number of ranks, truncated toward zero (Rust's `/`).
                ReduceOp::GPUWIRE_AVG => xs.iter().sum::<i128>() / p as i128,
                ReduceOp::GPUWIRE_BAND => xs.iter().fold(-1i128, |a, x| a & x),
                ReduceOp::GPUWIRE_BOR => xs.iter().fold(0i128, |a, x| a | x),
                ReduceOp::GPUWIRE_BXOR => xs.iter().fold(0i128, |a, x| a ^ x),
                // One rank's value is passed through as it is (as MPI: no operation is applied).
                _ if xs.len() == 1 => xs[0],
                // Logical: 1 or 0.
                ReduceOp::GPUWIRE_LAND => xs.iter().all(|x| *x != 0) as i128,
                ReduceOp::GPUWIRE_LOR => xs.iter().any(|x| *x != 0) as i128,
                ReduceOp::GPUWIRE_LXOR => (xs.iter().filter(|x| **x != 0).count() % 2) as i128,
                _ => panic!("test bug: {} on integers", op.name()),
            };
            V::I(r)
        }
        V::P(..) => {
            // The smallest (MINLOC) or largest (MAXLOC) value; of equal values the lowest index.
            let mut best = vals[0];
            for v in &vals[1..] {
                let (V::P(bv, bi), V::P(x, i)) = (best, *v) else { unreachable!() };
                let better = match op {
                    ReduceOp::GPUWIRE_MINLOC => x < bv,
                    ReduceOp::GPUWIRE_MAXLOC => x > bv,
                    _ => panic!("test bug: {} on pairs", op.name()),
                };
                if better || (x == bv && i < bi) {
                    best = *v;
                }
            }
            best
        }
        V::F(_) => {
            let xs: Vec<f64> = vals.iter().map(|v| if let V::F(x) = v { *x } else { unreachable!() }).collect();
            V::F(match op {
                ReduceOp::GPUWIRE_SUM => xs.iter().sum(),
                ReduceOp::GPUWIRE_PROD => xs.iter().product(),
                ReduceOp::GPUWIRE_MAX => xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                ReduceOp::GPUWIRE_MIN => xs.iter().cloned().fold(f64::INFINITY, f64::min),
                ReduceOp::GPUWIRE_AVG => {
                    let s: f64 = xs.iter().sum();
                    assert_eq!((s / p as f64) * p as f64, s, "test bug: inexact average");
                    s / p as f64
                }
                _ => panic!("test bug: {} on reals", op.name()),
            })
        }
        V::C(..) => {
            let xs: Vec<(f64, f64)> = vals.iter().map(|v| if let V::C(a, b) = v { (*a, *b) } else { unreachable!() }).collect();
            let (re, im) = match op {
                ReduceOp::GPUWIRE_SUM | ReduceOp::GPUWIRE_AVG => {
                    let (a, b) = xs.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
                    if op == ReduceOp::GPUWIRE_AVG { (a / p as f64, b / p as f64) } else { (a, b) }
                }
                ReduceOp::GPUWIRE_PROD => xs.iter().fold((1.0, 0.0), |(a, b), (x, y)| (a * x - b * y, a * y + b * x)),
                _ => panic!("test bug: {} on complex", op.name()),
            };
            V::C(re, im)
        }
    }
}

// ---- test input values ---------------------------------------------------------------------

/// A real with at most two significant bits, magnitude 0.5..6 and either sign: sums and products
/// of three of them are exact even in bfloat16 (8 significant bits).
fn small_real(k: usize) -> f64 {
    let k = k % 16;
    let sign = if k & 1 == 1 { -1.0 } else { 1.0 };
    let m = if k & 2 == 2 { 1.5 } else { 1.0 };
    sign * m * 2f64.powi((k >> 2) as i32 - 1)
}

/// Rank `r`'s element `i` (of `p` ranks) for reducing `d` with `op`; `salt` varies the data
/// between calls. Values are chosen so that every result is exact and in range.
pub fn input(d: Dtype, op: ReduceOp, r: usize, i: usize, p: usize, salt: usize) -> V {
    let k = r * 5 + i * 3 + salt * 7;
    if is_pair(d) {
        // Three values only, so ranks tie often; indices in no rank order, so ties are decided
        // by the index both ways.
        let v = ((r + 2 * i + salt) % 3) as f64 - 1.0;
        let idx = ((i * 7 + r * 5 + salt) % 13) as i32 - 6;
        return V::P(if d == Dtype::GPUWIRE_INT32_INT32 { v * 1000.0 } else { v * 0.25 }, idx);
    }
    if d.is_integer() && matches!(op, ReduceOp::GPUWIRE_LAND | ReduceOp::GPUWIRE_LOR | ReduceOp::GPUWIRE_LXOR) {
        // Zeros and nonzeros mixed; 256 (wide types) has a zero low byte, -1/max all bits set.
        let bits = int_bits(d);
        let v: i128 = match (pattern((r * 1000 + i * 10 + salt) as u64, 1)[0] as usize + r) % 5 {
            0 | 1 => 0,
            2 => 1,
            3 => if bits == 8 { 2 } else { 256 },
            _ => if is_signed(d) { -1 } else { (1i128 << bits) - 1 },
        };
        return V::I(v);
    }
    if d.is_integer() {
        let bits = int_bits(d);
        if op.is_bitwise() {
            // Full-width bit patterns, as the datatype's value (two's complement for signed).
            let raw = u64::from_ne_bytes(pattern((r * 1000 + i * 10 + salt) as u64, 8).try_into().unwrap());
            let masked = if bits == 64 { raw as u128 } else { (raw & ((1u64 << bits) - 1)) as u128 };
            let v = if is_signed(d) && (masked >> (bits - 1)) & 1 == 1 { masked as i128 - (1i128 << bits) } else { masked as i128 };
            return V::I(v);
        }
        let base = ((k % 4) + 1) as i128; // 1..=4
        let sign = if is_signed(d) && (r + 2 * i + salt) % 3 == 0 { -1 } else { 1 };
        let v = if op == ReduceOp::GPUWIRE_PROD {
            // |product of 3| <= 64 * scale^3 stays below 2^(bits-1).
            let scale: i128 = match bits {
                8 => 1,
                32 => 1 << 8,
                _ => 1 << 18,
            };
            sign * base * scale
        } else {
            // Large offsets reach the upper bytes of wide types; sums of 3 stay in range.
            let offset: i128 = match bits {
                8 => 0,
                32 => 1 << 28,
                _ => 1 << 60,
            };
            sign * (base + offset)
        };
        return V::I(v);
    }
    let real = |k: usize, r: usize| -> f64 {
        if op == ReduceOp::GPUWIRE_AVG {
            // base + a per-rank deviation that sums to 0 over the ranks: the sum is p x base, and
            // the average is exactly base in every datatype.
            small_real(k - r * 5) + (r as f64 - (p as f64 - 1.0) / 2.0)
        } else {
            small_real(k)
        }
    };
    if d.is_complex() { V::C(real(k, r), real(k + 11, r)) } else { V::F(real(k, r)) }
}

/// Mixes the parts of a test-data seed.
pub fn seed(parts: &[usize]) -> u64 {
    parts.iter().fold(0x243F_6A88_85A3_08D3u64, |h, p| (h ^ *p as u64).wrapping_mul(0x100_0000_01B3).rotate_left(17))
}

/// Rank `r`'s `n` elements.
pub fn inputs(d: Dtype, op: ReduceOp, r: usize, n: usize, p: usize, salt: usize) -> Vec<V> {
    (0..n).map(|i| input(d, op, r, i, p, salt)).collect()
}

/// The reduction of element `i` over ranks 0..p.
pub fn expected_elem(d: Dtype, op: ReduceOp, i: usize, p: usize, salt: usize) -> V {
    let vals: Vec<V> = (0..p).map(|r| input(d, op, r, i, p, salt)).collect();
    reference(op, &vals)
}

/// Every (datatype, op) pair that gpuwire supports, and the unsupported ones, as the spec lists
/// them (MIN/MAX undefined on complex, bitwise and logical ops on integers only, MINLOC/MAXLOC
/// the pair datatypes' only ops and on them only).
pub fn supported(d: Dtype, op: ReduceOp) -> bool {
    let complex_order = d.is_complex() && matches!(op, ReduceOp::GPUWIRE_MIN | ReduceOp::GPUWIRE_MAX);
    let logical = matches!(op, ReduceOp::GPUWIRE_LAND | ReduceOp::GPUWIRE_LOR | ReduceOp::GPUWIRE_LXOR);
    let float_bits = !d.is_integer() && (op.is_bitwise() || logical);
    let loc = matches!(op, ReduceOp::GPUWIRE_MINLOC | ReduceOp::GPUWIRE_MAXLOC);
    !(complex_order || float_bits) && loc == is_pair(d)
}

// ---- raw MPI (the program's own MPI calls) ---------------------------------------------------

/// MPI_Comm_get_errhandler(MPI_COMM_WORLD) == MPI_ERRORS_ARE_FATAL.
pub fn world_errhandler_is_fatal() -> bool {
    use mpi::ffi::*;
    // SAFETY: MPI is initialized; the handle returned is freed as the standard asks.
    unsafe {
        let mut eh: MPI_Errhandler = std::mem::zeroed();
        let rc = MPI_Comm_get_errhandler(RSMPI_COMM_WORLD, &mut eh);
        assert_eq!(rc, 0, "MPI_Comm_get_errhandler failed");
        let fatal = eh == RSMPI_ERRORS_ARE_FATAL;
        MPI_Errhandler_free(&mut eh);
        fatal
    }
}

pub fn mpi_initialized() -> bool {
    let mut f: c_int = 0;
    // SAFETY: callable at any time.
    unsafe { mpi::ffi::MPI_Initialized(&mut f) };
    f != 0
}

pub fn mpi_finalized() -> bool {
    let mut f: c_int = 0;
    // SAFETY: callable at any time.
    unsafe { mpi::ffi::MPI_Finalized(&mut f) };
    f != 0
}

/// A NULL stream (host buffers ignore it).
pub fn no_stream() -> *mut c_void {
    std::ptr::null_mut()
}
