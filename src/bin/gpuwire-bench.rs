//! gpuwire-bench: OSU-style latency and bandwidth of gpuwire against the raw MPI calls it wraps.
//!
//! ```text
//! mpirun -np 2 gpuwire-bench host   [--op sendrecv|allreduce|bw|all] [--max-bytes N] [--min-bytes N]
//!                                   [--iters-scale F] [--reps R]
//! mpirun -np 2 gpuwire-bench device --backend staged|cuda_aware|raw-cuda-aware
//!                                   [--op allreduce|sendrecv|all] [--max-bytes N] [--min-bytes N]
//!                                   [--target-ms T] [--reps R] [--label L]
//! ```
//!
//! **host**: host float32 buffers; for every size, gpuwire's call (through its C ABI) and the
//! same raw MPI call (through `mpi::ffi`, on the same memory, on a duplicate of
//! MPI_COMM_WORLD) are timed in the same run, in alternating blocks of iterations (the order
//! flips every repetition, so drift hits both alike). Each block starts at a barrier; its time
//! per iteration is the maximum over the ranks; the table shows the median over repetitions.
//! Send/recv is a ping-pong (one-way time = half the round trip); `bw` streams a window of
//! isends (OSU's osu_bw) and waits for an acknowledgement.
//!
//! **device**: device float32 buffers on the GPU machine; one backend per run (`staged` and
//! `cuda_aware` force gpuwire's backend in `gpuwire_config.backend`; `raw-cuda-aware` calls
//! MPI_Allreduce / MPI_Send / MPI_Recv on the device pointers, valid only under a CUDA-aware
//! MPI). Every timed call is followed by a synchronization of the stream it ran on, so the
//! result is complete when the clock stops.
//!
//! Both modes print one machine-readable line per measurement (rank 0 only):
//! `BENCH <label> <op> <bytes> <median_us> <min_us> <samples>`, where `op` is `allreduce`,
//! `sendrecv` (one-way time) or `bw` (time per message of the window). Lines starting with `#`
//! are comments; the host mode also prints human-readable tables.

use std::ffi::{c_char, c_int, c_void};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Instant;

use cudarc::driver::sys as cu;
use gpuwire::error::Status;
use gpuwire::ffi::buffer::*;
use gpuwire::ffi::comm::*;
use gpuwire::ffi::lifecycle::*;
use gpuwire::ffi::ops::*;
use gpuwire::ffi::status::*;
use gpuwire::ffi::{gpuwire_buffer, gpuwire_comm, gpuwire_request};
use gpuwire::types::{BackendKind, Dtype, ReduceOp, Space};
use mpi::ffi as msys;

const USAGE: &str = "usage:
  mpirun -np 2 gpuwire-bench host [--op sendrecv|allreduce|bw|all] [--max-bytes N] [--min-bytes N]
                                  [--iters-scale F] [--reps R]
  mpirun -np 2 gpuwire-bench device --backend staged|cuda_aware|raw-cuda-aware
                                  [--op allreduce|sendrecv|all] [--max-bytes N] [--min-bytes N]
                                  [--target-ms T] [--reps R] [--label L]
Sizes are bytes of float32 data, powers of two from --min-bytes (default 8) to --max-bytes
(default 64 MiB on the host, 256 MiB on the device); N takes K, M, G suffixes (powers of 1024).";

// ---- errors and MPI helpers ----------------------------------------------------------------

static RANK: AtomicI32 = AtomicI32::new(-1);
static MPI_UP: AtomicBool = AtomicBool::new(false);

/// Ends the whole job: a failure on one rank must not leave the other waiting in a collective.
fn fatal(msg: &str) -> ! {
    eprintln!("gpuwire-bench: rank {}: {msg}", RANK.load(Ordering::Relaxed));
    let _ = std::io::stdout().flush();
    if MPI_UP.load(Ordering::Relaxed) {
        // SAFETY: MPI is initialized; MPI_Abort does not return.
        unsafe { msys::MPI_Abort(msys::RSMPI_COMM_WORLD, 1) };
    }
    std::process::exit(2);
}

fn last_error() -> String {
    let mut buf = vec![0 as c_char; 1024];
    gpuwire_last_error(buf.as_mut_ptr(), buf.len());
    let bytes: Vec<u8> = buf.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn ok(s: Status, what: &str) {
    if s != Status::GPUWIRE_SUCCESS {
        fatal(&format!("{what} failed: {s:?}: {}", last_error()));
    }
}

fn mok(rc: c_int, what: &str) {
    if rc != 0 {
        fatal(&format!("{what} failed (MPI error code {rc})"));
    }
}

fn cuok(r: cu::CUresult, what: &str) {
    if r != cu::CUresult::CUDA_SUCCESS {
        fatal(&format!("{what} failed: {r:?}"));
    }
}

/// The raw MPI side: a private duplicate of MPI_COMM_WORLD for the raw calls and for the
/// benchmark's own barriers and reductions.
struct Mpi {
    comm: msys::MPI_Comm,
    rank: i32,
    size: i32,
}

impl Mpi {
    fn new() -> Mpi {
        let mut comm = unsafe { msys::RSMPI_COMM_NULL };
        // SAFETY: MPI is initialized (by gpuwire_init); every rank calls.
        mok(unsafe { msys::MPI_Comm_dup(msys::RSMPI_COMM_WORLD, &mut comm) }, "MPI_Comm_dup");
        let (mut rank, mut size) = (0, 0);
        // SAFETY: a valid communicator.
        unsafe {
            mok(msys::MPI_Comm_rank(comm, &mut rank), "MPI_Comm_rank");
            mok(msys::MPI_Comm_size(comm, &mut size), "MPI_Comm_size");
        }
        Mpi { comm, rank, size }
    }

    fn barrier(&self) {
        // SAFETY: a valid communicator.
        mok(unsafe { msys::MPI_Barrier(self.comm) }, "MPI_Barrier");
    }

    /// Rank 0's value, everywhere.
    fn bcast_u64(&self, v: u64) -> u64 {
        let mut x = v;
        // SAFETY: one u64 on every rank.
        mok(unsafe { msys::MPI_Bcast((&mut x as *mut u64).cast(), 1, msys::RSMPI_UINT64_T, 0, self.comm) }, "MPI_Bcast");
        x
    }

    /// Element-wise maximum over the ranks, in place.
    fn max_f64(&self, v: &mut [f64]) {
        let send = v.to_vec();
        // SAFETY: v.len() doubles on every rank (same length everywhere by construction).
        mok(
            unsafe {
                msys::MPI_Allreduce(send.as_ptr().cast(), v.as_mut_ptr().cast(), v.len() as c_int, msys::RSMPI_DOUBLE, msys::RSMPI_MAX, self.comm)
            },
            "MPI_Allreduce(MAX)",
        );
    }

    /// Logical AND of a flag over the ranks.
    fn all(&self, flag: bool) -> bool {
        let mut v = [if flag { 0.0 } else { 1.0 }];
        self.max_f64(&mut v);
        v[0] == 0.0
    }

    fn free(mut self) {
        // SAFETY: created in `new`.
        unsafe { msys::MPI_Comm_free(&mut self.comm) };
    }
}

// ---- statistics and output -----------------------------------------------------------------

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 { s[n / 2] } else { 0.5 * (s[n / 2 - 1] + s[n / 2]) }
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

fn out(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

/// `BENCH <label> <op> <bytes> <median_us> <min_us> <samples>` (rank 0 only).
fn bench_line(m: &Mpi, label: &str, op: &str, bytes: usize, samples_s: &[f64]) {
    if m.rank == 0 {
        out(&format!("BENCH {label} {op} {bytes} {:.3} {:.3} {}", median(samples_s) * 1e6, min(samples_s) * 1e6, samples_s.len()));
    }
}

fn human(bytes: usize) -> String {
    if bytes >= 1 << 30 && bytes % (1 << 30) == 0 {
        format!("{} GiB", bytes >> 30)
    } else if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes % (1 << 10) == 0 {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}

// ---- arguments -----------------------------------------------------------------------------

fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim().trim_end_matches(['B', 'b']).trim_end_matches(['i', 'I']);
    let (num, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1usize << 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 1 << 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.trim().parse::<usize>().ok().and_then(|n| n.checked_mul(mult)).ok_or_else(|| format!("{s:?} is not a byte count"))
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum DevBackend {
    Staged,
    CudaAware,
    RawCudaAware,
}

#[derive(Debug)]
struct Opts {
    device: Option<DevBackend>,
    ops: Vec<&'static str>,
    min_bytes: usize,
    max_bytes: usize,
    iters_scale: f64,
    reps: Option<usize>,
    target_ms: f64,
    label: Option<String>,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mode = args.first().map(String::as_str).ok_or("a mode is needed: host or device")?;
    let device = match mode {
        "host" => None,
        "device" => Some(()),
        "-h" | "--help" | "help" => return Err(String::new()),
        other => return Err(format!("unknown mode {other:?}: expected host or device")),
    };
    let mut o = Opts {
        device: None,
        ops: vec![],
        min_bytes: 8,
        max_bytes: if device.is_some() { 256 << 20 } else { 64 << 20 },
        iters_scale: 1.0,
        reps: None,
        target_ms: 20.0,
        label: None,
    };
    let mut op = "all".to_string();
    let mut backend: Option<DevBackend> = None;
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        let (key, inline) = match a.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        if key == "-h" || key == "--help" {
            return Err(String::new());
        }
        let mut val = || inline.clone().or_else(|| it.next().cloned()).ok_or(format!("{key} needs a value"));
        match key.as_str() {
            "--op" => op = val()?,
            "--max-bytes" => o.max_bytes = parse_bytes(&val()?)?,
            "--min-bytes" => o.min_bytes = parse_bytes(&val()?)?,
            "--iters-scale" => {
                let v = val()?;
                o.iters_scale = v.parse::<f64>().ok().filter(|f| f.is_finite() && *f > 0.0).ok_or(format!("--iters-scale {v:?}: expected a number > 0"))?
            }
            "--reps" => {
                let v = val()?;
                o.reps = Some(v.parse::<usize>().ok().filter(|r| *r >= 1).ok_or(format!("--reps {v:?}: expected an integer >= 1"))?)
            }
            "--target-ms" if device.is_some() => {
                let v = val()?;
                o.target_ms = v.parse::<f64>().ok().filter(|f| f.is_finite() && *f > 0.0).ok_or(format!("--target-ms {v:?}: expected a number > 0"))?
            }
            "--label" if device.is_some() => o.label = Some(val()?),
            "--backend" if device.is_some() => {
                let v = val()?;
                backend = Some(match v.to_ascii_lowercase().replace('-', "_").as_str() {
                    "staged" | "mpi_staged" => DevBackend::Staged,
                    "cuda_aware" | "mpi_cuda_aware" => DevBackend::CudaAware,
                    "raw_cuda_aware" | "raw" => DevBackend::RawCudaAware,
                    _ => return Err(format!("--backend {v:?}: expected staged, cuda_aware or raw-cuda-aware")),
                })
            }
            other => return Err(format!("unknown option {other:?} for mode {mode}")),
        }
    }
    if device.is_some() {
        o.device = Some(backend.ok_or("device mode needs --backend staged|cuda_aware|raw-cuda-aware")?);
    }
    let valid: &[&'static str] = if device.is_some() { &["allreduce", "sendrecv"] } else { &["sendrecv", "allreduce", "bw"] };
    o.ops = if op == "all" {
        valid.to_vec()
    } else {
        op.split(',')
            .map(|x| valid.iter().copied().find(|v| *v == x.trim()).ok_or(format!("--op {x:?}: expected one of {} or all", valid.join(", "))))
            .collect::<Result<_, _>>()?
    };
    if o.min_bytes < 8 || o.min_bytes % 4 != 0 || o.min_bytes > o.max_bytes {
        return Err(format!("--min-bytes {} / --max-bytes {}: need 8 <= min <= max, multiples of 4", o.min_bytes, o.max_bytes));
    }
    Ok(o)
}

fn sizes(o: &Opts) -> Vec<usize> {
    let mut v = vec![];
    let mut s = o.min_bytes;
    while s <= o.max_bytes {
        v.push(s);
        s *= 2;
    }
    v
}

// ---- gpuwire helpers -----------------------------------------------------------------------

fn alloc(count: usize, space: Space, device: i32) -> gpuwire_buffer {
    let mut b = 0;
    ok(gpuwire_buffer_alloc(count as i64, Dtype::GPUWIRE_FLOAT32 as i32, space as i32, device, &mut b), "gpuwire_buffer_alloc");
    b
}

fn view(b: gpuwire_buffer, offset: usize, count: usize) -> gpuwire_buffer {
    let mut v = 0;
    ok(gpuwire_buffer_view(b, offset as i64, count as i64, &mut v), "gpuwire_buffer_view");
    v
}

fn ptr_of(b: gpuwire_buffer) -> usize {
    let mut p: *mut c_void = std::ptr::null_mut();
    ok(gpuwire_buffer_pointer(b, &mut p), "gpuwire_buffer_pointer");
    p as usize
}

fn describe(c: gpuwire_comm) -> String {
    let mut d = vec![0 as c_char; 1024];
    ok(gpuwire_comm_describe(c, d.as_mut_ptr(), d.len()), "gpuwire_comm_describe");
    let bytes: Vec<u8> = d.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

const SUM: i32 = ReduceOp::GPUWIRE_SUM as i32;
const TAG: i32 = 7;
const ACK_TAG: i32 = 8;

fn float() -> msys::MPI_Datatype {
    // SAFETY: reading a constant.
    unsafe { msys::RSMPI_FLOAT }
}

// ---- timing --------------------------------------------------------------------------------

/// Seconds per iteration of `iters` iterations of `f`, started together at a barrier.
fn block(m: &Mpi, iters: usize, f: &mut dyn FnMut(usize)) -> f64 {
    m.barrier();
    let t0 = Instant::now();
    f(iters);
    t0.elapsed().as_secs_f64() / iters as f64
}

/// How many iterations make a block of about `target_s` seconds (decided by rank 0, so every
/// rank runs the same count). Doubles a trial block from 1 iteration until it takes 1/8 of the
/// target; warms `f` up on the way.
fn calibrate(m: &Mpi, target_s: f64, max_iters: usize, f: &mut dyn FnMut(usize)) -> usize {
    let mut n = 1usize;
    loop {
        let t = block(m, n, f) * n as f64;
        let more = m.bcast_u64(u64::from(m.rank == 0 && t < target_s / 8.0 && n < max_iters)) == 1;
        if !more {
            let want = if m.rank == 0 { (target_s / (t / n as f64)).round().clamp(1.0, max_iters as f64) as u64 } else { 0 };
            return m.bcast_u64(want) as usize;
        }
        n *= 2;
    }
}

/// Interleaved repetitions of two variants: the per-iteration time of each block (maximum over
/// the ranks), for `a` and for `b`. Even repetitions run a then b, odd ones b then a.
fn interleaved(m: &Mpi, reps: usize, iters: usize, a: &mut dyn FnMut(usize), b: &mut dyn FnMut(usize)) -> (Vec<f64>, Vec<f64>) {
    let mut ta = vec![0.0; reps];
    let mut tb = vec![0.0; reps];
    for r in 0..reps {
        if r % 2 == 0 {
            ta[r] = block(m, iters, a);
            tb[r] = block(m, iters, b);
        } else {
            tb[r] = block(m, iters, b);
            ta[r] = block(m, iters, a);
        }
    }
    m.max_f64(&mut ta);
    m.max_f64(&mut tb);
    (ta, tb)
}

/// One variant, `reps` blocks of `iters` (maximum over the ranks per block).
fn repeated(m: &Mpi, reps: usize, iters: usize, f: &mut dyn FnMut(usize)) -> Vec<f64> {
    let mut t: Vec<f64> = (0..reps).map(|_| block(m, iters, f)).collect();
    m.max_f64(&mut t);
    t
}

// ---- host mode -----------------------------------------------------------------------------

/// Host float32 buffers of `n` elements filled with `v`.
fn fill_host(b: gpuwire_buffer, n: usize, v: f32) {
    let p = ptr_of(b) as *mut f32;
    // SAFETY: a host buffer of at least n float32.
    unsafe { std::slice::from_raw_parts_mut(p, n).fill(v) };
}

fn host_value(b: gpuwire_buffer, i: usize) -> f32 {
    // SAFETY: a host buffer with more than i float32.
    unsafe { *(ptr_of(b) as *const f32).add(i) }
}

struct HostRow {
    bytes: usize,
    extra: String,
    raw: Vec<f64>,
    gw: Vec<f64>,
}

const SMALL_TARGET: usize = 8;
/// Bytes in flight in one window of the bw test (at most 64 messages).
const BW_WINDOW_BYTES: usize = 16 << 20;
const LARGE_TARGET: usize = 64 << 10;

/// Paired statistics of interleaved blocks: (median of gw_i / raw_i, median of gw_i - raw_i).
/// Blocks i of both variants ran back to back, so slow drift of the machine cancels in each pair.
fn paired(raw: &[f64], gw: &[f64]) -> (f64, f64) {
    let ratios: Vec<f64> = raw.iter().zip(gw).map(|(r, g)| g / r).collect();
    let diffs: Vec<f64> = raw.iter().zip(gw).map(|(r, g)| g - r).collect();
    (median(&ratios), median(&diffs))
}

fn host_table(m: &Mpi, title: &str, unit_note: &str, rows: &[HostRow], extra_head: &str, bw: bool) -> (usize, usize) {
    let (mut met, mut missed) = (0, 0);
    if m.rank != 0 {
        return (0, 0);
    }
    out("");
    out(&format!("# {title} ({unit_note}); {} interleaved repetitions", rows.first().map_or(0, |r| r.raw.len())));
    out("# raw us, gpuwire us: medians; ratio, added us: medians of the per-repetition pairs (gpuwire/raw, gpuwire-raw)");
    let bwh = if bw { "   raw MB/s    gw MB/s" } else { "" };
    out(&format!("{:>10} {extra_head}{:>12} {:>12} {:>8} {:>10}{bwh}  target", "size", "raw us", "gpuwire us", "ratio", "added us"));
    for r in rows {
        let (raw, gw) = (median(&r.raw) * 1e6, median(&r.gw) * 1e6);
        let (ratio, added) = paired(&r.raw, &r.gw);
        let added = added * 1e6;
        let target = if r.bytes == SMALL_TARGET {
            if added <= 0.5 { met += 1; "ok (<= 0.5 us added)" } else { missed += 1; "MISSED (> 0.5 us added)" }
        } else if r.bytes >= LARGE_TARGET {
            if ratio <= 1.03 { met += 1; "ok (within 3 %)" } else { missed += 1; "MISSED (> 3 % slower)" }
        } else {
            ""
        };
        let bwc = if bw { format!(" {:>10.1} {:>10.1}", r.bytes as f64 / raw, r.bytes as f64 / gw) } else { String::new() };
        out(&format!("{:>10} {}{raw:>12.3} {gw:>12.3} {ratio:>8.4} {added:>10.3}{bwc}  {target}", human(r.bytes), r.extra));
    }
    (met, missed)
}

fn host_mode(o: &Opts) {
    ok(gpuwire_init(), "gpuwire_init");
    MPI_UP.store(true, Ordering::Relaxed);
    let m = Mpi::new();
    RANK.store(m.rank, Ordering::Relaxed);
    let mut comm: gpuwire_comm = 0;
    let mut cfg = std::mem::MaybeUninit::<gpuwire_config>::uninit();
    ok(gpuwire_config_init(cfg.as_mut_ptr()), "gpuwire_config_init");
    // SAFETY: filled by gpuwire_config_init.
    let mut cfg = unsafe { cfg.assume_init() };
    // Host buffers always take plain MPI; HOST also skips any device set-up at creation.
    cfg.backend = BackendKind::GPUWIRE_BACKEND_HOST as i32;
    ok(gpuwire_comm_world(&cfg, &mut comm), "gpuwire_comm_world");
    if m.size < 2 {
        fatal("needs at least 2 ranks (mpirun -np 2)");
    }
    let sizes = sizes(o);
    let max = *sizes.last().unwrap_or(&8);
    let target_s = 0.002 * o.iters_scale;
    let reps = o.reps.unwrap_or(21);
    if m.rank == 0 {
        out(&format!("# gpuwire-bench host: {} ranks, float32 host buffers, {} .. {}", m.size, human(o.min_bytes), human(max)));
        out(&format!("# gpuwire: {}", describe(comm)));
        out(&format!("# each block about {:.1} ms of iterations ({:.1} ms for bw; --iters-scale {}), {reps} repetitions per variant", target_s * 1e3, 3.0 * target_s * 1e3, o.iters_scale));
        out("# targets: at >= 64 KiB gpuwire within 3 % of raw MPI (ratio <= 1.03); at 8 B at most 0.5 us added");
    }
    // bw's window of messages takes up to 16 MiB (or one message of the largest size).
    let n_max = if o.ops.contains(&"bw") { max.max(BW_WINDOW_BYTES) / 4 } else { max / 4 };
    let sb = alloc(n_max, Space::GPUWIRE_SPACE_HOST, -1);
    let rb = alloc(n_max, Space::GPUWIRE_SPACE_HOST, -1);
    fill_host(sb, n_max, (m.rank + 1) as f32);
    let (sp, rp) = (ptr_of(sb), ptr_of(rb));
    let (rank, peer_ok) = (m.rank, m.rank <= 1);
    let mut bad = 0usize;
    let (mut met, mut missed) = (0, 0);
    let t_start = Instant::now();
    for &op in &o.ops {
        let mut rows = vec![];
        for &bytes in &sizes {
            let n = bytes / 4;
            let s = view(sb, 0, n);
            let r = view(rb, 0, n);
            let rc = m.comm;
            let dt = float();
            let mut extra = String::new();
            let (raw, gw) = match op {
                "sendrecv" => {
                    let mut g = |k: usize| {
                        for _ in 0..k {
                            if rank == 0 {
                                ok(gpuwire_send(comm, s, 1, TAG, std::ptr::null_mut()), "gpuwire_send");
                                ok(gpuwire_recv(comm, r, 1, TAG, std::ptr::null_mut()), "gpuwire_recv");
                            } else if rank == 1 {
                                ok(gpuwire_recv(comm, r, 0, TAG, std::ptr::null_mut()), "gpuwire_recv");
                                ok(gpuwire_send(comm, r, 0, TAG, std::ptr::null_mut()), "gpuwire_send");
                            }
                        }
                    };
                    let mut w = |k: usize| {
                        for _ in 0..k {
                            // SAFETY: host buffers of n float32; a valid communicator.
                            unsafe {
                                if rank == 0 {
                                    mok(msys::MPI_Send(sp as *const c_void, n as c_int, dt, 1, TAG, rc), "MPI_Send");
                                    mok(msys::MPI_Recv(rp as *mut c_void, n as c_int, dt, 1, TAG, rc, msys::RSMPI_STATUS_IGNORE), "MPI_Recv");
                                } else if rank == 1 {
                                    mok(msys::MPI_Recv(rp as *mut c_void, n as c_int, dt, 0, TAG, rc, msys::RSMPI_STATUS_IGNORE), "MPI_Recv");
                                    mok(msys::MPI_Send(rp as *const c_void, n as c_int, dt, 0, TAG, rc), "MPI_Send");
                                }
                            }
                        }
                    };
                    let iters = calibrate(&m, target_s, 100_000, &mut w);
                    block(&m, iters.div_ceil(4), &mut g);
                    if peer_ok && (host_value(r, 0) != 1.0 || host_value(r, n - 1) != 1.0) {
                        bad += 1;
                        eprintln!("gpuwire-bench: rank {rank}: sendrecv {bytes} B: wrong data received");
                    }
                    let (a, b) = interleaved(&m, reps, iters, &mut w, &mut g);
                    // One-way time: half the round trip.
                    (a.iter().map(|t| t / 2.0).collect::<Vec<_>>(), b.iter().map(|t| t / 2.0).collect::<Vec<_>>())
                }
                "allreduce" => {
                    let mut g = |k: usize| {
                        for _ in 0..k {
                            ok(gpuwire_allreduce(comm, s, r, SUM, std::ptr::null_mut()), "gpuwire_allreduce");
                        }
                    };
                    let mut w = |k: usize| {
                        for _ in 0..k {
                            // SAFETY: host buffers of n float32; a valid communicator.
                            mok(
                                unsafe { msys::MPI_Allreduce(sp as *const c_void, rp as *mut c_void, n as c_int, dt, msys::RSMPI_SUM, rc) },
                                "MPI_Allreduce",
                            );
                        }
                    };
                    let iters = calibrate(&m, target_s, 100_000, &mut w);
                    block(&m, iters.div_ceil(4), &mut g);
                    let want = (m.size * (m.size + 1) / 2) as f32;
                    if host_value(r, 0) != want || host_value(r, n - 1) != want {
                        bad += 1;
                        eprintln!("gpuwire-bench: rank {rank}: allreduce {bytes} B: got {} expected {want}", host_value(r, 0));
                    }
                    interleaved(&m, reps, iters, &mut w, &mut g)
                }
                "bw" => {
                    // OSU osu_bw: rank 0 streams a window of messages (distinct slices of one
                    // buffer), rank 1 acknowledges the window with one small message.
                    let window = (BW_WINDOW_BYTES / bytes).clamp(1, 64);
                    extra = format!("{window:>6} ");
                    let (sv, rv): (Vec<gpuwire_buffer>, Vec<gpuwire_buffer>) = (0..window).map(|i| (view(sb, i * n, n), view(rb, i * n, n))).unzip();
                    let ack = view(sb, 0, 1);
                    let ackr = view(rb, 0, 1);
                    let mut g = |k: usize| {
                        let mut reqs: Vec<gpuwire_request> = vec![0; window];
                        for _ in 0..k {
                            if rank == 0 {
                                for (i, q) in reqs.iter_mut().enumerate() {
                                    ok(gpuwire_isend(comm, sv[i], 1, TAG, std::ptr::null_mut(), q), "gpuwire_isend");
                                }
                                ok(gpuwire_waitall(window as i32, reqs.as_mut_ptr()), "gpuwire_waitall");
                                ok(gpuwire_recv(comm, ackr, 1, ACK_TAG, std::ptr::null_mut()), "gpuwire_recv(ack)");
                            } else if rank == 1 {
                                for (i, q) in reqs.iter_mut().enumerate() {
                                    ok(gpuwire_irecv(comm, rv[i], 0, TAG, std::ptr::null_mut(), q), "gpuwire_irecv");
                                }
                                ok(gpuwire_waitall(window as i32, reqs.as_mut_ptr()), "gpuwire_waitall");
                                ok(gpuwire_send(comm, ack, 0, ACK_TAG, std::ptr::null_mut()), "gpuwire_send(ack)");
                            }
                        }
                    };
                    let mut w = |k: usize| {
                        let mut reqs = vec![unsafe { msys::RSMPI_REQUEST_NULL }; window];
                        for _ in 0..k {
                            // SAFETY: distinct slices of host buffers; a valid communicator.
                            unsafe {
                                if rank == 0 {
                                    for (i, q) in reqs.iter_mut().enumerate() {
                                        mok(msys::MPI_Isend((sp + i * bytes) as *const c_void, n as c_int, dt, 1, TAG, rc, q), "MPI_Isend");
                                    }
                                    mok(msys::MPI_Waitall(window as c_int, reqs.as_mut_ptr(), msys::RSMPI_STATUSES_IGNORE), "MPI_Waitall");
                                    mok(msys::MPI_Recv(rp as *mut c_void, 1, dt, 1, ACK_TAG, rc, msys::RSMPI_STATUS_IGNORE), "MPI_Recv(ack)");
                                } else if rank == 1 {
                                    for (i, q) in reqs.iter_mut().enumerate() {
                                        mok(msys::MPI_Irecv((rp + i * bytes) as *mut c_void, n as c_int, dt, 0, TAG, rc, q), "MPI_Irecv");
                                    }
                                    mok(msys::MPI_Waitall(window as c_int, reqs.as_mut_ptr(), msys::RSMPI_STATUSES_IGNORE), "MPI_Waitall");
                                    mok(msys::MPI_Send(sp as *const c_void, 1, dt, 0, ACK_TAG, rc), "MPI_Send(ack)");
                                }
                            }
                        }
                    };
                    // Longer blocks: a window is one long burst, fewer of them fit in a block.
                    let iters = calibrate(&m, 3.0 * target_s, 100_000, &mut w);
                    block(&m, iters.div_ceil(4), &mut g);
                    if rank == 1 && (host_value(rv[window - 1], 0) != 1.0 || host_value(rv[window - 1], n - 1) != 1.0) {
                        bad += 1;
                        eprintln!("gpuwire-bench: rank {rank}: bw {bytes} B: wrong data received");
                    }
                    let (a, b) = interleaved(&m, reps, iters, &mut w, &mut g);
                    for h in sv.into_iter().chain(rv).chain([ack, ackr]) {
                        ok(gpuwire_buffer_free(h), "gpuwire_buffer_free");
                    }
                    // Time per message of the window.
                    let per = |v: Vec<f64>| v.into_iter().map(|t| t / window as f64).collect::<Vec<_>>();
                    (per(a), per(b))
                }
                _ => unreachable!(),
            };
            bench_line(&m, "host-raw", op, bytes, &raw);
            bench_line(&m, "host-gpuwire", op, bytes, &gw);
            rows.push(HostRow { bytes, extra, raw, gw });
            ok(gpuwire_buffer_free(s), "gpuwire_buffer_free");
            ok(gpuwire_buffer_free(r), "gpuwire_buffer_free");
        }
        let (a, b) = match op {
            "sendrecv" => host_table(&m, "send/recv ping-pong latency", "one way = round trip / 2", &rows, "", true),
            "allreduce" => host_table(&m, "allreduce latency", "MPI_SUM, out of place", &rows, "", false),
            _ => host_table(&m, "bandwidth, OSU osu_bw style", "time per message of a window of isends, then an ack", &rows, "window ", true),
        };
        met += a;
        missed += b;
    }
    let all_good = m.all(bad == 0);
    if m.rank == 0 {
        out("");
        out(&format!(
            "# summary: {met} target rows met, {missed} missed; data checks {}; {:.1} s",
            if all_good { "passed" } else { "FAILED" },
            t_start.elapsed().as_secs_f64()
        ));
    }
    ok(gpuwire_buffer_free(sb), "gpuwire_buffer_free");
    ok(gpuwire_buffer_free(rb), "gpuwire_buffer_free");
    ok(gpuwire_comm_free(comm), "gpuwire_comm_free");
    m.free();
    ok(gpuwire_finalize(), "gpuwire_finalize");
    if !all_good {
        std::process::exit(1);
    }
}

// ---- device mode ---------------------------------------------------------------------------

fn device_mode(o: &Opts, backend: DevBackend) {
    // Before MPI: without a driver, say so plainly (cudarc would panic on the first call).
    if let Err(e) = gpuwire::device::cuda_with_devices() {
        let msg = match e {
            gpuwire::Error::BackendUnavailable(m) => m,
            other => other.to_string(),
        };
        eprintln!("gpuwire-bench device: {msg}");
        eprintln!("gpuwire-bench device: device mode needs an NVIDIA GPU and its driver (libcuda); run `gpuwire-bench host` on a machine without one");
        std::process::exit(2);
    }
    ok(gpuwire_init(), "gpuwire_init");
    MPI_UP.store(true, Ordering::Relaxed);
    let m = Mpi::new();
    RANK.store(m.rank, Ordering::Relaxed);
    if m.size < 2 {
        fatal("needs at least 2 ranks (mpirun -np 2)");
    }
    let (label, comm, device) = match backend {
        DevBackend::RawCudaAware => {
            let (aware, source) = gpuwire::mpisys::cuda_support();
            if aware != Some(true) {
                if m.rank == 0 {
                    eprintln!(
                        "gpuwire-bench device: --backend raw-cuda-aware passes device pointers to MPI, but this MPI is not known to be CUDA-aware ({source}); run it under a CUDA-aware MPI (the kit), or set GPUWIRE_CUDA_AWARE=1 if you know better"
                    );
                }
                m.free();
                let _ = gpuwire_finalize();
                std::process::exit(2);
            }
            // Same device choice as gpuwire's: node-local rank modulo the device count.
            let count = gpuwire::device::cuda_with_devices().map(|c| c.device_count).unwrap_or(1);
            ("raw-cuda-aware".to_string(), 0, local_rank(&m) % count.max(1))
        }
        b => {
            let mut cfg = std::mem::MaybeUninit::<gpuwire_config>::uninit();
            ok(gpuwire_config_init(cfg.as_mut_ptr()), "gpuwire_config_init");
            // SAFETY: filled by gpuwire_config_init.
            let mut cfg = unsafe { cfg.assume_init() };
            let (kind, name) = if b == DevBackend::Staged {
                (BackendKind::GPUWIRE_BACKEND_MPI_STAGED, "gpuwire-staged")
            } else {
                (BackendKind::GPUWIRE_BACKEND_MPI_CUDA_AWARE, "gpuwire-cuda_aware")
            };
            cfg.backend = kind as i32;
            let mut c: gpuwire_comm = 0;
            ok(gpuwire_comm_world(&cfg, &mut c), "gpuwire_comm_world");
            let mut d = 0;
            ok(gpuwire_comm_device(c, &mut d), "gpuwire_comm_device");
            if m.rank == 0 {
                out(&format!("# gpuwire: {}", describe(c)));
            }
            (name.to_string(), c, d)
        }
    };
    let label = o.label.clone().unwrap_or(label);
    // This program's own stream, in the device's primary context (gpuwire uses the same one).
    let dev = cudarc::driver::result::device::get(device).unwrap_or_else(|e| fatal(&format!("cuDeviceGet({device}): {e:?}")));
    let ctx = unsafe { cudarc::driver::result::primary_ctx::retain(dev) }.unwrap_or_else(|e| fatal(&format!("cuDevicePrimaryCtxRetain: {e:?}")));
    unsafe { cudarc::driver::result::ctx::set_current(ctx) }.unwrap_or_else(|e| fatal(&format!("cuCtxSetCurrent: {e:?}")));
    let mut stream: cu::CUstream = std::ptr::null_mut();
    // CU_STREAM_NON_BLOCKING = 1, as an application's own stream usually is.
    cuok(unsafe { cu::cuStreamCreate(&mut stream, 1) }, "cuStreamCreate");
    let sizes = sizes(o);
    let max = *sizes.last().unwrap_or(&8);
    let n_max = max / 4;
    if m.rank == 0 {
        out(&format!(
            "# gpuwire-bench device {label}: {} ranks, device {device}, float32 device buffers, {} .. {}, blocks of about {} ms",
            m.size,
            human(o.min_bytes),
            human(max),
            o.target_ms
        ));
    }
    let sb = alloc(n_max, Space::GPUWIRE_SPACE_DEVICE, device);
    let rb = alloc(n_max, Space::GPUWIRE_SPACE_DEVICE, device);
    let (sp, rp) = (ptr_of(sb), ptr_of(rb));
    // Every rank sends (rank + 1.0): allreduce gives size(size+1)/2, the ping-pong returns 1.0.
    cuok(unsafe { cu::cuMemsetD32_v2(sp as cu::CUdeviceptr, ((m.rank + 1) as f32).to_bits(), n_max) }, "cuMemsetD32");
    cuok(unsafe { cu::cuCtxSynchronize() }, "cuCtxSynchronize");
    let rank = m.rank;
    let s_void = stream as *mut c_void;
    let sync = move || cuok(unsafe { cu::cuStreamSynchronize(stream) }, "cuStreamSynchronize");
    let read = |p: usize| -> f32 {
        let mut v = 0f32;
        cuok(unsafe { cu::cuMemcpyDtoH_v2((&mut v as *mut f32).cast(), p as cu::CUdeviceptr, 4) }, "cuMemcpyDtoH");
        v
    };
    let mut bad = 0usize;
    let t_start = Instant::now();
    for &op in &o.ops {
        for &bytes in &sizes {
            let n = bytes / 4;
            let s = if comm != 0 { view(sb, 0, n) } else { 0 };
            let r = if comm != 0 { view(rb, 0, n) } else { 0 };
            let rc = m.comm;
            let dt = float();
            let mut f: Box<dyn FnMut(usize)> = match (op, backend) {
                ("allreduce", DevBackend::RawCudaAware) => Box::new(move |k| {
                    for _ in 0..k {
                        // SAFETY: device buffers of n float32 under a CUDA-aware MPI.
                        mok(unsafe { msys::MPI_Allreduce(sp as *const c_void, rp as *mut c_void, n as c_int, dt, msys::RSMPI_SUM, rc) }, "MPI_Allreduce");
                        sync();
                    }
                }),
                ("allreduce", _) => Box::new(move |k| {
                    for _ in 0..k {
                        ok(gpuwire_allreduce(comm, s, r, SUM, s_void), "gpuwire_allreduce");
                        sync();
                    }
                }),
                ("sendrecv", DevBackend::RawCudaAware) => Box::new(move |k| {
                    for _ in 0..k {
                        // SAFETY: as above.
                        unsafe {
                            if rank == 0 {
                                mok(msys::MPI_Send(sp as *const c_void, n as c_int, dt, 1, TAG, rc), "MPI_Send");
                                mok(msys::MPI_Recv(rp as *mut c_void, n as c_int, dt, 1, TAG, rc, msys::RSMPI_STATUS_IGNORE), "MPI_Recv");
                            } else if rank == 1 {
                                mok(msys::MPI_Recv(rp as *mut c_void, n as c_int, dt, 0, TAG, rc, msys::RSMPI_STATUS_IGNORE), "MPI_Recv");
                                mok(msys::MPI_Send(rp as *const c_void, n as c_int, dt, 0, TAG, rc), "MPI_Send");
                            }
                        }
                        sync();
                    }
                }),
                ("sendrecv", _) => Box::new(move |k| {
                    for _ in 0..k {
                        if rank == 0 {
                            ok(gpuwire_send(comm, s, 1, TAG, s_void), "gpuwire_send");
                            ok(gpuwire_recv(comm, r, 1, TAG, s_void), "gpuwire_recv");
                        } else if rank == 1 {
                            ok(gpuwire_recv(comm, r, 0, TAG, s_void), "gpuwire_recv");
                            ok(gpuwire_send(comm, r, 0, TAG, s_void), "gpuwire_send");
                        }
                        sync();
                    }
                }),
                _ => unreachable!(),
            };
            // Warm-up (staging buffers grow, IPC handles get cached), then check the result.
            let t1 = block(&m, 1, &mut f);
            let slow = m.bcast_u64(u64::from(t1 > 0.05)) == 1;
            if !slow {
                block(&m, 1, &mut f);
            }
            let want = if op == "allreduce" { (m.size * (m.size + 1) / 2) as f32 } else { 1.0 };
            if rank <= 1 || op == "allreduce" {
                let (a, z) = (read(rp), read(rp + (n - 1) * 4));
                if a != want || z != want {
                    bad += 1;
                    eprintln!("gpuwire-bench: rank {rank}: {label} {op} {bytes} B: result {a} .. {z}, expected {want}");
                }
            }
            // Iterations per block from one timed call (rank 0 decides).
            let t = block(&m, 1, &mut f);
            let iters = m.bcast_u64(if rank == 0 { ((o.target_ms * 1e-3 / t).round().clamp(1.0, 1000.0)) as u64 } else { 0 }) as usize;
            let reps = o.reps.unwrap_or(if t > 0.05 { 3 } else { 7 });
            let reps = m.bcast_u64(reps as u64) as usize;
            let times = repeated(&m, reps, iters, &mut f);
            let times: Vec<f64> = if op == "sendrecv" { times.iter().map(|t| t / 2.0).collect() } else { times };
            bench_line(&m, &label, op, bytes, &times);
            drop(f);
            if comm != 0 {
                ok(gpuwire_buffer_free(s), "gpuwire_buffer_free");
                ok(gpuwire_buffer_free(r), "gpuwire_buffer_free");
            }
        }
    }
    let all_good = m.all(bad == 0);
    if m.rank == 0 {
        out(&format!("# {label}: data checks {}; {:.1} s", if all_good { "passed" } else { "FAILED" }, t_start.elapsed().as_secs_f64()));
    }
    ok(gpuwire_buffer_free(sb), "gpuwire_buffer_free");
    ok(gpuwire_buffer_free(rb), "gpuwire_buffer_free");
    cuok(unsafe { cu::cuStreamDestroy_v2(stream) }, "cuStreamDestroy");
    if comm != 0 {
        ok(gpuwire_comm_free(comm), "gpuwire_comm_free");
    }
    m.free();
    ok(gpuwire_finalize(), "gpuwire_finalize");
    if !all_good {
        std::process::exit(1);
    }
}

/// This rank's index among the ranks on its node.
fn local_rank(m: &Mpi) -> i32 {
    let mut node = unsafe { msys::RSMPI_COMM_NULL };
    let mut r = 0;
    // SAFETY: a valid communicator; MPI_COMM_TYPE_SHARED through rsmpi's constant.
    unsafe {
        mok(msys::MPI_Comm_split_type(m.comm, msys::RSMPI_COMM_TYPE_SHARED, 0, msys::RSMPI_INFO_NULL, &mut node), "MPI_Comm_split_type");
        mok(msys::MPI_Comm_rank(node, &mut r), "MPI_Comm_rank");
        msys::MPI_Comm_free(&mut node);
    }
    r
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(&args) {
        Ok(o) => o,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return;
        }
        Err(e) => {
            eprintln!("gpuwire-bench: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    match o.device {
        None => host_mode(&o),
        Some(b) => device_mode(&o, b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn byte_counts_take_suffixes() {
        assert_eq!(parse_bytes("8").unwrap(), 8);
        assert_eq!(parse_bytes("64K").unwrap(), 64 << 10);
        assert_eq!(parse_bytes("256M").unwrap(), 256 << 20);
        assert_eq!(parse_bytes("1MiB").unwrap(), 1 << 20);
        assert_eq!(parse_bytes("2g").unwrap(), 2 << 30);
        assert!(parse_bytes("lots").is_err());
    }

    #[test]
    fn options_and_sizes() {
        let o = parse(&args("host --op allreduce --max-bytes 64 --iters-scale 0.5")).unwrap();
        assert_eq!(o.ops, vec!["allreduce"]);
        assert_eq!(sizes(&o), vec![8, 16, 32, 64]);
        assert_eq!(o.iters_scale, 0.5);
        let o = parse(&args("host")).unwrap();
        assert_eq!(o.ops, vec!["sendrecv", "allreduce", "bw"]);
        assert_eq!(*sizes(&o).last().unwrap(), 64 << 20);
        let o = parse(&args("device --backend raw-cuda-aware --op=sendrecv")).unwrap();
        assert_eq!(o.device, Some(DevBackend::RawCudaAware));
        assert_eq!(o.ops, vec!["sendrecv"]);
        assert_eq!(*sizes(&o).last().unwrap(), 256 << 20);
        assert!(parse(&args("device")).is_err(), "device mode needs --backend");
        assert!(parse(&args("host --op bcast")).is_err());
        assert!(parse(&args("host --backend staged")).is_err(), "--backend is for device mode");
        assert!(parse(&args("host --min-bytes 6")).is_err());
    }

    #[test]
    fn medians_and_pairs() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        let (ratio, added) = paired(&[1.0, 2.0, 4.0], &[1.1, 2.2, 4.4]);
        assert!((ratio - 1.1).abs() < 1e-12);
        assert!((added - 0.2).abs() < 1e-12);
    }
}
