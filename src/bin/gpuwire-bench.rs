//! gpuwire-bench: OSU-style latency and bandwidth of gpuwire against the raw MPI and NCCL calls
//! it wraps.
//!
//! ```text
//! mpirun -np 2 gpuwire-bench host   [--op sendrecv|allreduce|bw|split|all] [--max-bytes N] [--min-bytes N]
//!                                   [--iters-scale F] [--reps R] [--dtype float32,float64]
//! mpirun -np 2 gpuwire-bench device --backend staged|cuda_aware|ipc|hier|raw-cuda-aware
//!                                   [--op allreduce,allgather,reduce_scatter,sendrecv,exchange|all]
//!                                   [--max-bytes N] [--min-bytes N] [--target-ms T] [--reps R]
//!                                   [--sync each|end] [--label L | --tag T]
//! mpirun -np 2 gpuwire-bench halo3d [--n 256] [--reps R] [--target-ms T] [--backend B] [--tag T]
//! mpirun -np N gpuwire-bench device --backend nccl      (N = 1 on one GPU; one rank per GPU)
//!                                   [--op allreduce,allgather,reduce_scatter,sendrecv|all]
//!                                   [--max-bytes N] [--min-bytes N] [--target-ms T] [--reps R]
//!                                   [--sync end|each] [--tag T]
//! ```
//!
//! **host**: host float32 buffers; for every size, gpuwire's call (through its C ABI) and the
//! same raw MPI call (through `mpi::ffi`, on the same memory, on a duplicate of
//! MPI_COMM_WORLD) are timed in the same run, in alternating blocks of iterations (the order
//! flips every repetition, so drift hits both alike). Each block starts at a barrier; its time
//! per iteration is the maximum over the ranks; the table shows the median over repetitions.
//! Send/recv is a ping-pong (one-way time = half the round trip); `bw` streams a window of
//! isends (OSU's osu_bw) and waits for an acknowledgement. `split` (by name, not in `all`):
//! `gpuwire::backend::split::allreduce_host`, what an MPI_STAGED communicator makes of a
//! host-memory allreduce from 2 MiB, on gpuwire's communicator, against MPI_Allreduce, SUM, out
//! of place, in each datatype of `--dtype` (float32 and/or float64; BENCH op `split-<dtype>`).
//!
//! **device**: device float32 buffers on the GPU machine. `staged`, `cuda_aware`, `ipc` and `hier` (ranks on several nodes, e.g. under scripts/multihost.sh) force
//! gpuwire's backend in `gpuwire_config.backend`; `raw-cuda-aware` calls MPI_Allreduce,
//! MPI_Allgather, MPI_Reduce_scatter_block, MPI_Sendrecv, MPI_Send/MPI_Recv on the device
//! pointers (valid only under a CUDA-aware MPI). One variant per run; every call is followed by
//! a synchronization of the stream it ran on (`--sync each`), so the result is complete when
//! the clock stops.
//!
//! **device --backend nccl**: gpuwire with `gpuwire_config.backend = NCCL` *and* raw NCCL in the
//! same run: the benchmark loads libnccl itself, bootstraps its own NCCL communicator over MPI on
//! the device of gpuwire's communicator (`gpuwire_comm_device`), and times gpuwire's call and
//! the raw NCCL call on the same buffers and stream in interleaved blocks, as host mode does
//! (per-repetition pairs give the median ratio and added µs). A block enqueues its calls back
//! to back and synchronizes the stream once at the end (`--sync end`, how nccl-tests measures).
//! NCCL needs a GPU per rank: on one GPU run 1 rank.
//!
//! Device ops, with bytes as nccl-tests counts them: `allreduce` (one rank's buffer, sum),
//! `allgather` (the gathered buffer; each rank sends bytes / ranks), `reduce_scatter` (the whole
//! input; each rank receives bytes / ranks), `exchange` (ring: every rank sends to rank + 1 and
//! receives from rank - 1 at once; gpuwire_sendrecv, grouped ncclSend/ncclRecv, MPI_Sendrecv;
//! `--op sendrecv` means this for NCCL), `sendrecv` (MPI backends: ping-pong between ranks 0 and
//! 1, one-way time), and by name only (not in `all`): `halo`, and `alltoallv` (issue 13: uneven,
//! rank r sends (r + 1) k elements to each rank, k = bytes / 4 / ranks, so bytes = what rank 0
//! sends; gpuwire_alltoallv, grouped ncclSend/ncclRecv of every block, MPI_Alltoallv).
//!
//! Both modes print one machine-readable line per measurement (rank 0 only):
//! `BENCH <label> <op> <bytes> <median_us> <min_us> <samples>`; device mode appends
//! `<busbw_GBps> <ranks>` (nccl-tests' bus bandwidth of the median time: allreduce
//! bytes/t x 2(n-1)/n, allgather and reduce_scatter bytes/t x (n-1)/n, point-to-point bytes/t).
//! NCCL mode also prints `PAIR <gw_label> <raw_label> <op> <bytes> <ranks> <ratio> <added_us>
//! <reps>` (medians of the per-repetition pairs). Lines starting with `#` are comments; host
//! mode and NCCL mode also print human-readable tables.

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
  mpirun -np 2 gpuwire-bench host [--op sendrecv|allreduce|bw|split|all] [--max-bytes N] [--min-bytes N]
                                  [--iters-scale F] [--reps R] [--dtype float32,float64]
  mpirun -np 2 gpuwire-bench device --backend staged|cuda_aware|ipc|hier|raw-cuda-aware
                                  [--op allreduce,allgather,reduce_scatter,sendrecv,exchange,halo,bw|all]
                                  [--max-bytes N] [--min-bytes N] [--target-ms T] [--reps R]
                                  [--sync each|end] [--label L | --tag T]
  mpirun -np N gpuwire-bench device --backend nccl   (gpuwire-nccl and raw-nccl in one run;
                                  one rank per GPU: -np 1 on a machine with one GPU)
                                  [--op allreduce,allgather,reduce_scatter,sendrecv,halo|all]
                                  [--max-bytes N] [--min-bytes N] [--target-ms T] [--reps R]
                                  [--sync end|each] [--tag T]
  mpirun -np 2 gpuwire-bench halo3d [--n 256] [--reps R] [--target-ms T]   (CUDA-aware MPI:
                                  the six faces of an n^3 float64 grid: gpuwire_darray_halo_exchange_axes
                                  against MPI subarray datatypes and against packing kernels + MPI)
`split` (host, not in `all`): the two-phase allreduce of MPI_STAGED's large host-memory calls
(split::allreduce_host) against MPI_Allreduce, in each --dtype (float32, float64; default float32).
`halo` (not in `all`): two rows each way in one gpuwire group (raw: one NCCL group of two
ncclSend and two ncclRecv; raw-cuda-aware: two MPI_Sendrecv); sizes are one row's bytes.
`bw` (device, not in `all`; host: in `all`): streaming bandwidth as OSU osu_bw, rank 0 sending
a window of isends (up to 64 messages, on the device at most 1 GiB of them, each in its own
slice) that rank 1 receives and acknowledges; the time printed is per message.
Sizes are bytes of float32 data, powers of two from --min-bytes (default 8) to --max-bytes
(default 64 MiB on the host, 256 MiB on the device; 1G is fine on the GPU machine); N takes
K, M, G suffixes (powers of 1024). --tag T appends -T to the labels (e.g. --tag 2gpu).
For NCCL, sendrecv is the grouped ring exchange (reported as op exchange).";

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
    /// gpuwire on CUDA IPC (ranks of one node).
    Ipc,
    /// gpuwire's hierarchical path (ranks on several nodes: IPC inside each, MPI between).
    Hier,
    RawCudaAware,
    /// gpuwire on NCCL, always beside raw NCCL in the same run.
    Nccl,
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
    /// Appended to the labels ("-TAG"), e.g. the GPU count of the run.
    tag: Option<String>,
    /// Device mode: synchronize the stream after every call (true) or once per block (false);
    /// None = the backend's default (NCCL: once per block; the MPI backends: every call).
    sync_each: Option<bool>,
    /// Host mode `split`: the datatypes (float32, float64).
    dtypes: Vec<Dtype>,
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
        tag: None,
        sync_each: None,
        dtypes: vec![Dtype::GPUWIRE_FLOAT32],
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
            "--dtype" if device.is_none() => {
                let v = val()?;
                o.dtypes = v
                    .split(',')
                    .map(|d| match d.trim() {
                        "float32" | "f32" => Ok(Dtype::GPUWIRE_FLOAT32),
                        "float64" | "f64" => Ok(Dtype::GPUWIRE_FLOAT64),
                        x => Err(format!("--dtype {x:?}: expected float32 or float64")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--tag" if device.is_some() => {
                let v = val()?;
                if v.is_empty() || v.contains(char::is_whitespace) {
                    return Err(format!("--tag {v:?}: expected a word without spaces"));
                }
                o.tag = Some(v)
            }
            "--sync" if device.is_some() => {
                let v = val()?;
                o.sync_each = Some(match v.as_str() {
                    "each" => true,
                    "end" | "block" => false,
                    _ => return Err(format!("--sync {v:?}: expected each or end")),
                })
            }
            "--backend" if device.is_some() => {
                let v = val()?;
                backend = Some(match v.to_ascii_lowercase().replace('-', "_").as_str() {
                    "staged" | "mpi_staged" => DevBackend::Staged,
                    "cuda_aware" | "mpi_cuda_aware" => DevBackend::CudaAware,
                    "ipc" => DevBackend::Ipc,
                    "hier" | "hierarchical" => DevBackend::Hier,
                    "raw_cuda_aware" | "raw" => DevBackend::RawCudaAware,
                    "nccl" => DevBackend::Nccl,
                    _ => return Err(format!("--backend {v:?}: expected staged, cuda_aware, ipc, hier, raw-cuda-aware or nccl")),
                })
            }
            other => return Err(format!("unknown option {other:?} for mode {mode}")),
        }
    }
    if device.is_some() {
        o.device = Some(backend.ok_or("device mode needs --backend staged|cuda_aware|ipc|hier|raw-cuda-aware|nccl")?);
    }
    let nccl = o.device == Some(DevBackend::Nccl);
    if nccl && o.label.is_some() {
        return Err("--label does not apply to --backend nccl (it prints two labels, gpuwire-nccl and raw-nccl): use --tag".into());
    }
    let valid: &[&'static str] = match o.device {
        None => &["sendrecv", "allreduce", "bw", "split"],
        // NCCL's send/recv is the grouped ring exchange (nccl-tests' sendrecv): op `exchange`.
        Some(DevBackend::Nccl) => &["allreduce", "allgather", "reduce_scatter", "exchange", "halo", "alltoallv"],
        Some(_) => &["allreduce", "allgather", "reduce_scatter", "sendrecv", "exchange", "halo", "alltoallv", "bw"],
    };
    o.ops = vec![];
    if op == "all" {
        // `halo` (issue 18's group benchmark), `alltoallv` (issue 13's), `split` and, on the
        // device, `bw` (issue 19's streaming bandwidth) are asked for by name.
        o.ops = valid.iter().copied().filter(|v| !matches!(*v, "halo" | "alltoallv" | "split") && !(*v == "bw" && o.device.is_some())).collect();
    } else {
        for x in op.split(',') {
            let mut x = x.trim().replace('-', "_");
            if nccl && x == "sendrecv" {
                x = "exchange".into();
            }
            let v = valid.iter().copied().find(|v| *v == x).ok_or(format!("--op {x:?}: expected one of {} or all", valid.join(", ")))?;
            if !o.ops.contains(&v) {
                o.ops.push(v);
            }
        }
    }
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
    let mut d = vec![0 as c_char; 4096];
    ok(gpuwire_comm_describe(c, d.as_mut_ptr(), d.len()), "gpuwire_comm_describe");
    let bytes: Vec<u8> = d.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

const SUM: i32 = ReduceOp::GPUWIRE_SUM as i32;
const TAG: i32 = 7;
const ACK_TAG: i32 = 8;
/// The halo exchange's second row (to rank - 1).
const HALO_TAG: i32 = 17;

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

/// One window of OSU osu_bw with raw MPI (host mode's `bw`, and device mode's raw CUDA-aware
/// one): rank 0 isends `reqs.len()` messages of `n` elements from consecutive slices of `sp`,
/// `bytes` apart (`at` = (sp, rp, bytes)), and waits for one element back; rank 1 receives them
/// into the same slices of `rp` and sends that element.
///
/// # Safety
/// `sp` and `rp` hold `reqs.len()` slices of `bytes` (memory MPI may use: host memory, or device
/// memory under a CUDA-aware MPI); `comm` is a valid communicator of 2 or more ranks.
unsafe fn raw_bw_window(rank: i32, reqs: &mut [msys::MPI_Request], at: (usize, usize, usize), n: c_int, dt: msys::MPI_Datatype, comm: msys::MPI_Comm) {
    let (sp, rp, bytes) = at;
    let window = reqs.len() as c_int;
    // SAFETY: as the caller promises.
    unsafe {
        if rank == 0 {
            for (i, q) in reqs.iter_mut().enumerate() {
                mok(msys::MPI_Isend((sp + i * bytes) as *const c_void, n, dt, 1, TAG, comm, q), "MPI_Isend");
            }
            mok(msys::MPI_Waitall(window, reqs.as_mut_ptr(), msys::RSMPI_STATUSES_IGNORE), "MPI_Waitall");
            mok(msys::MPI_Recv(rp as *mut c_void, 1, dt, 1, ACK_TAG, comm, msys::RSMPI_STATUS_IGNORE), "MPI_Recv(ack)");
        } else if rank == 1 {
            for (i, q) in reqs.iter_mut().enumerate() {
                mok(msys::MPI_Irecv((rp + i * bytes) as *mut c_void, n, dt, 0, TAG, comm, q), "MPI_Irecv");
            }
            mok(msys::MPI_Waitall(window, reqs.as_mut_ptr(), msys::RSMPI_STATUSES_IGNORE), "MPI_Waitall");
            mok(msys::MPI_Send(sp as *const c_void, 1, dt, 0, ACK_TAG, comm), "MPI_Send(ack)");
        }
    }
}

/// Device mode's `bw`: the bytes of one window of messages (at most 64 of them, at least one),
/// each message in its own slice of the send and receive buffers.
const DEV_BW_WINDOW_BYTES: usize = 1 << 30;

/// Messages in one window of device mode's `bw` for messages of `bytes`.
fn dev_bw_window(bytes: usize) -> usize {
    (DEV_BW_WINDOW_BYTES / bytes.max(1)).clamp(1, 64)
}

/// Float32 elements that device mode's `bw` needs in each buffer for messages of these `sizes`
/// (bytes): the largest window of them, not the largest size's, which may be smaller (sizes
/// from a --min-bytes that is not a power of two: 40 MiB takes 25 messages, 1000 MiB; 80 MiB 12,
/// 960 MiB).
fn dev_bw_elems(sizes: &[usize]) -> usize {
    sizes.iter().map(|&b| dev_bw_window(b) * (b / 4)).max().unwrap_or(0)
}
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
    // `split` once per datatype.
    let runs: Vec<(&str, Dtype)> =
        o.ops.iter().flat_map(|&op| if op == "split" { o.dtypes.clone() } else { vec![Dtype::GPUWIRE_FLOAT32] }.into_iter().map(move |d| (op, d))).collect();
    for &(op, dtype) in &runs {
        let mut rows = vec![];
        if dtype == Dtype::GPUWIRE_FLOAT64 {
            // SAFETY: a host buffer of n_max float32, 8-byte aligned (gpuwire's host buffers are).
            unsafe { std::slice::from_raw_parts_mut(sp as *mut f64, n_max / 2).fill((m.rank + 1) as f64) };
        } else {
            fill_host(sb, n_max, (m.rank + 1) as f32);
        }
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
                "split" => {
                    use gpuwire::backend::{host::Src, split};
                    let (es, f64s) = (dtype.size(), dtype == Dtype::GPUWIRE_FLOAT64);
                    let n = bytes / es;
                    // SAFETY: reading a constant.
                    let mdt = if f64s { unsafe { msys::RSMPI_DOUBLE } } else { dt };
                    let c = gpuwire::comm::COMMS.get(comm).unwrap_or_else(|e| fatal(&format!("the communicator: {e}")));
                    let mut g = |k: usize| {
                        for _ in 0..k {
                            if let Err(e) = split::allreduce_host(&c, Src::Ptr(sp), rp, n, dtype, ReduceOp::GPUWIRE_SUM) {
                                fatal(&format!("split::allreduce_host: {e}"));
                            }
                        }
                    };
                    let mut w = |k: usize| {
                        for _ in 0..k {
                            // SAFETY: host buffers of n elements; a valid communicator.
                            mok(unsafe { msys::MPI_Allreduce(sp as *const c_void, rp as *mut c_void, n as c_int, mdt, msys::RSMPI_SUM, rc) }, "MPI_Allreduce");
                        }
                    };
                    let iters = calibrate(&m, target_s, 100_000, &mut w);
                    // SAFETY: a host buffer of at least n elements of dtype.
                    let value = |i: usize| unsafe { if f64s { *(rp as *const f64).add(i) } else { f64::from(*(rp as *const f32).add(i)) } };
                    // Poisoned first, so the check sees what the two-phase form wrote.
                    // SAFETY: as above.
                    unsafe { std::ptr::write_bytes(rp as *mut u8, 0xff, bytes) };
                    block(&m, iters.div_ceil(4), &mut g);
                    let want = f64::from(m.size * (m.size + 1) / 2);
                    if (0..n).step_by((n / 97).max(1)).chain([n - 1]).any(|i| value(i) != want) {
                        bad += 1;
                        eprintln!("gpuwire-bench: rank {rank}: split {} {bytes} B: got {} .. {} expected {want}", dtype.name(), value(0), value(n - 1));
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
                            unsafe { raw_bw_window(rank, &mut reqs, (sp, rp, bytes), n as c_int, dt, rc) };
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
            let bop = if op == "split" { format!("split-{}", dtype.name()) } else { op.to_string() };
            bench_line(&m, "host-raw", &bop, bytes, &raw);
            bench_line(&m, "host-gpuwire", &bop, bytes, &gw);
            rows.push(HostRow { bytes, extra, raw, gw });
            ok(gpuwire_buffer_free(s), "gpuwire_buffer_free");
            ok(gpuwire_buffer_free(r), "gpuwire_buffer_free");
        }
        let (a, b) = match op {
            "sendrecv" => host_table(&m, "send/recv ping-pong latency", "one way = round trip / 2", &rows, "", true),
            "allreduce" => host_table(&m, "allreduce latency", "MPI_SUM, out of place", &rows, "", false),
            "split" => host_table(
                &m,
                &format!("two-phase allreduce (split::allreduce_host, MPI_STAGED's host-memory form) against MPI_Allreduce, {}", dtype.name()),
                "MPI_SUM, out of place",
                &rows,
                "",
                false,
            ),
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

/// Element counts of one measurement and the bytes it reports: (send count, receive count,
/// bytes). As nccl-tests: allreduce, sendrecv and exchange report one rank's message; allgather
/// the whole gathered buffer (each rank sends bytes / ranks); reduce_scatter the whole input
/// (each rank receives bytes / ranks). Those two round down to whole float32 per rank, at least
/// one, so with ranks that do not divide the size the reported bytes differ from the nominal.
fn layout(op: &str, bytes: usize, ranks: usize) -> (usize, usize, usize) {
    let c = bytes / 4;
    match op {
        "allgather" => {
            let k = (c / ranks).max(1);
            (k, k * ranks, k * ranks * 4)
        }
        "reduce_scatter" => {
            let k = (c / ranks).max(1);
            (k * ranks, k, k * ranks * 4)
        }
        // Two rows of `bytes` each way (bytes = one row, as the issue counts halo sizes).
        "halo" => (2 * c, 2 * c, bytes),
        // Uneven (issue 13): rank r sends (r + 1) k to each rank, k = bytes / 4 / ranks (bytes =
        // what rank 0 sends in all); the send view holds the largest rank's ranks^2 k.
        "alltoallv" => {
            let k = (c / ranks).max(1);
            (k * ranks * ranks, k * ranks * (ranks + 1) / 2, k * ranks * 4)
        }
        _ => (c, c, bytes),
    }
}

/// nccl-tests' bus bandwidth factor: allreduce 2(n-1)/n, allgather and reduce_scatter (n-1)/n,
/// point-to-point 1.
fn busbw_factor(op: &str, ranks: usize) -> f64 {
    let n = ranks as f64;
    match op {
        "allreduce" => 2.0 * (n - 1.0) / n,
        "allgather" | "reduce_scatter" | "alltoallv" => (n - 1.0) / n,
        _ => 1.0,
    }
}

/// Bus bandwidth in GB/s (10^9 bytes per second) of `bytes` (as `layout` reports them) moved in
/// `seconds`.
fn busbw(op: &str, bytes: usize, ranks: usize, seconds: f64) -> f64 {
    bytes as f64 / seconds / 1e9 * busbw_factor(op, ranks)
}

/// What element `i` of the receive buffer (`recv` elements) holds after `op` on rank `rank` of
/// `ranks` when every rank sends (rank + 1.0); None where this rank receives nothing (the
/// ping-pong involves ranks 0 and 1 only).
fn expected(op: &str, rank: usize, ranks: usize, recv: usize, i: usize) -> Option<f32> {
    let all = (ranks * (ranks + 1) / 2) as f32;
    match op {
        "allreduce" | "reduce_scatter" => Some(all),
        "allgather" => Some((i / (recv / ranks)) as f32 + 1.0),
        // Rank q's block (q + 1) k from offset k q (q + 1) / 2 holds q + 1.0.
        "alltoallv" => {
            let k = recv * 2 / (ranks * (ranks + 1));
            (0..ranks).find(|q| i < k * (q + 1) * (q + 2) / 2).map(|q| q as f32 + 1.0)
        }
        // Ring exchange: rank r receives from r - 1.
        "exchange" => Some(((rank + ranks - 1) % ranks) as f32 + 1.0),
        // Halo: the first row comes from rank - 1, the second from rank + 1.
        "halo" if i < recv / 2 => Some(((rank + ranks - 1) % ranks) as f32 + 1.0),
        "halo" => Some(((rank + 1) % ranks) as f32 + 1.0),
        "sendrecv" if rank <= 1 => Some(1.0),
        // Streaming from rank 0 to rank 1 (the first message's slice is checked).
        "bw" if rank == 1 => Some(1.0),
        _ => None,
    }
}

/// The receive-buffer elements the data check reads: the first and the last, and for allgather
/// the first and last of every rank's block.
fn check_points(op: &str, ranks: usize, recv: usize) -> Vec<usize> {
    let mut v = if op == "allgather" {
        let k = recv / ranks;
        (0..ranks).flat_map(|q| [q * k, q * k + k - 1]).collect()
    } else if op == "halo" {
        vec![0, recv / 2 - 1, recv / 2, recv - 1]
    } else if op == "alltoallv" {
        let k = recv * 2 / (ranks * (ranks + 1));
        (0..ranks).flat_map(|q| [k * q * (q + 1) / 2, k * (q + 1) * (q + 2) / 2 - 1]).collect()
    } else {
        vec![0, recv - 1]
    };
    v.dedup();
    v
}

/// Counts and displacements (elements, contiguous in rank order) of the uneven alltoallv on
/// `rank` of `ranks` with base block `k`: (sendcounts, sdispls, recvcounts, rdispls).
fn alltoallv_counts(rank: usize, ranks: usize, k: usize) -> (Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>) {
    let sc = vec![((rank + 1) * k) as i64; ranks];
    let sd = (0..ranks).map(|q| (q * (rank + 1) * k) as i64).collect();
    let rc: Vec<i64> = (0..ranks).map(|q| ((q + 1) * k) as i64).collect();
    let rd = (0..ranks).map(|q| (k * q * (q + 1) / 2) as i64).collect();
    (sc, sd, rc, rd)
}

/// NCCL mode's targets for one row of the gpuwire-nccl / raw-nccl comparison. One rank (issue
/// 4): at 8 B less than 1 us added, at >= 1 MiB less than 1 % slower. Several ranks (issue 8):
/// at 8 B less than 1 us added, at >= 64 MiB within 2 % (time ratio <= 1.02). `nominal` is the
/// size asked for (allgather and reduce_scatter may report more: one float per rank at least).
#[cfg(test)]
fn nccl_target(ranks: usize, nominal: usize, ratio: f64, added_us: f64) -> Option<(bool, &'static str)> {
    nccl_target_of("", ranks, nominal, ratio, added_us)
}

/// [`nccl_target`] for `op`; the halo exchange in one group (issue 18): at 1 KiB at most 0.5 us
/// added per group, from 64 KiB within 1 % of raw NCCL.
fn nccl_target_of(op: &str, ranks: usize, nominal: usize, ratio: f64, added_us: f64) -> Option<(bool, &'static str)> {
    if op == "halo" {
        if nominal == 1 << 10 {
            return Some(if added_us <= 0.5 { (true, "ok (<= 0.5 us added)") } else { (false, "MISSED (> 0.5 us added)") });
        }
        if nominal >= 64 << 10 {
            return Some(if ratio <= 1.01 { (true, "ok (within 1 %)") } else { (false, "MISSED (> 1 % slower)") });
        }
        return None;
    }
    if nominal == 8 {
        return Some(if added_us < 1.0 { (true, "ok (< 1 us added)") } else { (false, "MISSED (>= 1 us added)") });
    }
    if ranks == 1 && nominal >= 1 << 20 {
        return Some(if ratio < 1.01 { (true, "ok (< 1 % slower)") } else { (false, "MISSED (>= 1 % slower)") });
    }
    if ranks > 1 && nominal >= 64 << 20 {
        return Some(if ratio <= 1.02 { (true, "ok (within 2 %)") } else { (false, "MISSED (> 2 % slower)") });
    }
    None
}

/// `BENCH <label> <op> <bytes> <median_us> <min_us> <samples> <busbw_GBps> <ranks>` (rank 0;
/// the bus bandwidth of the median time).
fn dev_line(m: &Mpi, label: &str, op: &str, bytes: usize, samples_s: &[f64]) {
    if m.rank == 0 {
        let med = median(samples_s);
        out(&format!(
            "BENCH {label} {op} {bytes} {:.3} {:.3} {} {:.3} {}",
            med * 1e6,
            min(samples_s) * 1e6,
            samples_s.len(),
            busbw(op, bytes, m.size as usize, med),
            m.size
        ));
    }
}

fn op_title(op: &str) -> &'static str {
    match op {
        "allreduce" => "allreduce (float32 sum, out of place)",
        "allgather" => "allgather (bytes = the gathered buffer)",
        "reduce_scatter" => "reduce_scatter (float32 sum; bytes = the whole input)",
        "exchange" => "send/recv exchange (ring: send to rank+1, receive from rank-1, grouped)",
        "halo" => "halo exchange in one group (a row to rank+1 and one to rank-1, a row from each; bytes = one row)",
        "alltoallv" => "alltoallv, uneven (rank r sends (r+1) k to each rank; bytes = what rank 0 sends)",
        _ => "send/recv ping-pong (one way = round trip / 2)",
    }
}

/// Raw NCCL, loaded by the benchmark itself (the same library gpuwire loads).
mod raw_nccl {
    use std::ffi::{CStr, c_char, c_int, c_void};

    pub type Comm = *mut c_void;

    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct UniqueId {
        pub internal: [c_char; 128],
    }

    pub const FLOAT32: c_int = 7; // ncclFloat32
    pub const SUM: c_int = 0; // ncclSum

    pub struct Nccl {
        _lib: libloading::Library,
        pub name: String,
        pub version: c_int,
        pub get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> c_int,
        pub comm_init_rank: unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int) -> c_int,
        pub comm_destroy: unsafe extern "C" fn(Comm) -> c_int,
        get_error_string: unsafe extern "C" fn(c_int) -> *const c_char,
        pub all_reduce: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, *mut c_void) -> c_int,
        pub all_gather: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, *mut c_void) -> c_int,
        pub reduce_scatter: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, *mut c_void) -> c_int,
        pub send: unsafe extern "C" fn(*const c_void, usize, c_int, c_int, Comm, *mut c_void) -> c_int,
        pub recv: unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, Comm, *mut c_void) -> c_int,
        pub group_start: unsafe extern "C" fn() -> c_int,
        pub group_end: unsafe extern "C" fn() -> c_int,
    }

    impl Nccl {
        /// `libnccl.so`, else `libnccl.so.2`.
        pub fn load() -> Result<Nccl, String> {
            let mut why = Vec::new();
            for name in ["libnccl.so", "libnccl.so.2"] {
                // SAFETY: loading NCCL runs its initializers.
                match unsafe { libloading::Library::new(name) } {
                    Ok(lib) => return Nccl::resolve(lib, name).map_err(|e| format!("{name}: {e}")),
                    Err(e) => why.push(format!("{name}: {e}")),
                }
            }
            Err(format!("libnccl could not be loaded ({})", why.join("; ")))
        }

        fn resolve(lib: libloading::Library, name: &str) -> Result<Nccl, String> {
            macro_rules! sym {
                ($s:literal) => {
                    // SAFETY: the symbol has the signature of the field it is stored in (nccl.h).
                    *unsafe { lib.get(concat!($s, "\0").as_bytes()) }.map_err(|e| format!("missing {}: {e}", $s))?
                };
            }
            let get_version: unsafe extern "C" fn(*mut c_int) -> c_int = sym!("ncclGetVersion");
            let mut version = 0;
            // SAFETY: writes one int.
            unsafe { get_version(&mut version) };
            Ok(Nccl {
                name: name.to_string(),
                version,
                get_unique_id: sym!("ncclGetUniqueId"),
                comm_init_rank: sym!("ncclCommInitRank"),
                comm_destroy: sym!("ncclCommDestroy"),
                get_error_string: sym!("ncclGetErrorString"),
                all_reduce: sym!("ncclAllReduce"),
                all_gather: sym!("ncclAllGather"),
                reduce_scatter: sym!("ncclReduceScatter"),
                send: sym!("ncclSend"),
                recv: sym!("ncclRecv"),
                group_start: sym!("ncclGroupStart"),
                group_end: sym!("ncclGroupEnd"),
                _lib: lib,
            })
        }

        pub fn version_string(&self) -> String {
            format!("{}.{}.{}", self.version / 10000, (self.version / 100) % 100, self.version % 100)
        }

        /// Ends the job on an NCCL error.
        pub fn ok(&self, r: c_int, what: &str) {
            if r != 0 {
                // SAFETY: NCCL returns static strings.
                let text = unsafe { CStr::from_ptr((self.get_error_string)(r)) }.to_string_lossy().into_owned();
                super::fatal(&format!("{what} failed: {text} (ncclResult {r})"));
            }
        }
    }
}

/// The raw NCCL communicator of the benchmark: rank 0's unique id broadcast over MPI, then
/// ncclCommInitRank on the device whose context is current (the one gpuwire's communicator
/// uses). Collective.
fn raw_nccl_comm(m: &Mpi, nccl: &raw_nccl::Nccl) -> raw_nccl::Comm {
    let mut id = raw_nccl::UniqueId { internal: [0; 128] };
    if m.rank == 0 {
        // SAFETY: writes the id.
        nccl.ok(unsafe { (nccl.get_unique_id)(&mut id) }, "ncclGetUniqueId");
    }
    // SAFETY: 128 bytes from rank 0 to every rank.
    mok(unsafe { msys::MPI_Bcast(id.internal.as_mut_ptr().cast(), 128, msys::RSMPI_UINT8_T, 0, m.comm) }, "MPI_Bcast(ncclUniqueId)");
    let mut comm: raw_nccl::Comm = std::ptr::null_mut();
    // SAFETY: every rank calls with the same id; collective.
    nccl.ok(unsafe { (nccl.comm_init_rank)(&mut comm, m.size, id, m.rank) }, "ncclCommInitRank");
    comm
}

/// Wraps one call into the block function `block` times: `k` calls, with a stream
/// synchronization after each (`sync_each`) or once after the last (as nccl-tests).
fn timed(mut one: Box<dyn FnMut()>, sync_each: bool, stream: cu::CUstream) -> Box<dyn FnMut(usize)> {
    let sync = move || cuok(unsafe { cu::cuStreamSynchronize(stream) }, "cuStreamSynchronize");
    Box::new(move |k| {
        for _ in 0..k {
            one();
            if sync_each {
                sync();
            }
        }
        if !sync_each {
            sync();
        }
    })
}

struct NcclRow {
    nominal: usize,
    bytes: usize,
    raw: Vec<f64>,
    gw: Vec<f64>,
}

/// The human-readable table of one op in NCCL mode; returns (met, missed) target rows.
fn nccl_table(m: &Mpi, op: &str, labels: (&str, &str), note: &str, rows: &[NcclRow]) -> (usize, usize) {
    let (mut met, mut missed) = (0, 0);
    if m.rank != 0 {
        return (0, 0);
    }
    let n = m.size as usize;
    out("");
    out(&format!("# {}; {} vs {}, {n} rank(s); {note}", op_title(op), labels.0, labels.1));
    out("# raw us, gpuwire us: medians; ratio, added us: medians of the per-repetition pairs (gpuwire/raw, gpuwire-raw); busbw in GB/s (nccl-tests)");
    out(&format!("{:>10} {:>12} {:>12} {:>8} {:>10} {:>11} {:>11}  target", "size", "raw us", "gpuwire us", "ratio", "added us", "raw busbw", "gw busbw"));
    for r in rows {
        let (raw, gw) = (median(&r.raw), median(&r.gw));
        let (ratio, added) = paired(&r.raw, &r.gw);
        let added = added * 1e6;
        let target = match nccl_target_of(op, n, r.nominal, ratio, added) {
            Some((true, t)) => {
                met += 1;
                t
            }
            Some((false, t)) => {
                missed += 1;
                t
            }
            None => "",
        };
        out(&format!(
            "{:>10} {:>12.3} {:>12.3} {ratio:>8.4} {added:>10.3} {:>11.2} {:>11.2}  {target}",
            human(r.bytes),
            raw * 1e6,
            gw * 1e6,
            busbw(op, r.bytes, n, raw),
            busbw(op, r.bytes, n, gw)
        ));
    }
    (met, missed)
}

/// Clears `count` float32 at `p` to NaN on `stream` and waits, so a data check sees only what
/// the next call writes.
fn poison(p: usize, count: usize, stream: cu::CUstream) {
    cuok(unsafe { cu::cuMemsetD32Async(p as cu::CUdeviceptr, f32::NAN.to_bits(), count, stream) }, "cuMemsetD32Async");
    cuok(unsafe { cu::cuStreamSynchronize(stream) }, "cuStreamSynchronize");
}

/// Reads the check points of the receive buffer and compares them; false (and a message) on a
/// mismatch.
fn data_ok(m: &Mpi, label: &str, op: &str, bytes: usize, rp: usize, recv: usize) -> bool {
    let (rank, n) = (m.rank as usize, m.size as usize);
    let mut good = true;
    for i in check_points(op, n, recv) {
        let Some(want) = expected(op, rank, n, recv, i) else { continue };
        let mut v = 0f32;
        cuok(unsafe { cu::cuMemcpyDtoH_v2((&mut v as *mut f32).cast(), (rp + i * 4) as cu::CUdeviceptr, 4) }, "cuMemcpyDtoH");
        if v != want {
            eprintln!("gpuwire-bench: rank {rank}: {label} {op} {bytes} B: element {i} of {recv} is {v}, expected {want}");
            good = false;
        }
    }
    good
}

/// Leaves device mode without a result (status 2) on every rank, after a message from rank 0.
fn give_up(m: Mpi, msg: &str) -> ! {
    if m.rank == 0 {
        eprintln!("gpuwire-bench device: {msg}");
    }
    let _ = std::io::stdout().flush();
    m.free();
    let _ = gpuwire_finalize();
    std::process::exit(2);
}

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
    let nccl_mode = backend == DevBackend::Nccl;
    if m.size < 2 && !nccl_mode {
        fatal("needs at least 2 ranks (mpirun -np 2); only --backend nccl runs on 1 rank");
    }
    if m.size < 2 && o.ops.contains(&"sendrecv") {
        fatal("the sendrecv ping-pong needs at least 2 ranks");
    }
    let tagged = |base: &str| match &o.tag {
        Some(t) => format!("{base}-{t}"),
        None => base.to_string(),
    };
    let (label, comm, device) = match backend {
        DevBackend::RawCudaAware => {
            let (aware, source) = gpuwire::mpisys::cuda_support().unwrap_or_else(|e| (None, e.to_string()));
            if aware != Some(true) {
                give_up(
                    m,
                    &format!("--backend raw-cuda-aware passes device pointers to MPI, but this MPI is not known to be CUDA-aware ({source}); run it under a CUDA-aware MPI (the kit), or set GPUWIRE_CUDA_AWARE=1 if you know better"),
                );
            }
            // Same device choice as gpuwire's: node-local rank modulo the device count.
            let count = gpuwire::device::cuda_with_devices().map(|c| c.device_count).unwrap_or(1);
            (tagged("raw-cuda-aware"), 0, local_rank(&m) % count.max(1))
        }
        b => {
            let mut cfg = std::mem::MaybeUninit::<gpuwire_config>::uninit();
            ok(gpuwire_config_init(cfg.as_mut_ptr()), "gpuwire_config_init");
            // SAFETY: filled by gpuwire_config_init.
            let mut cfg = unsafe { cfg.assume_init() };
            let (kind, name) = match b {
                DevBackend::Staged => (BackendKind::GPUWIRE_BACKEND_MPI_STAGED, "gpuwire-staged"),
                DevBackend::CudaAware => (BackendKind::GPUWIRE_BACKEND_MPI_CUDA_AWARE, "gpuwire-cuda_aware"),
                DevBackend::Ipc => (BackendKind::GPUWIRE_BACKEND_IPC, "gpuwire-ipc"),
                DevBackend::Hier => (BackendKind::GPUWIRE_BACKEND_HIER, "gpuwire-hier"),
                _ => (BackendKind::GPUWIRE_BACKEND_NCCL, "gpuwire-nccl"),
            };
            cfg.backend = kind as i32;
            let mut c: gpuwire_comm = 0;
            // Creation agrees its outcome over the ranks: all fail alike (e.g. NCCL with two
            // ranks on one GPU, or without libnccl).
            if gpuwire_comm_world(&cfg, &mut c) != Status::GPUWIRE_SUCCESS {
                let hint = if nccl_mode {
                    "\ngpuwire-bench device: NCCL needs one GPU per rank: on a machine with one GPU run `mpirun -np 1 gpuwire-bench device --backend nccl`; with N GPUs, `mpirun -np N` with CUDA_VISIBLE_DEVICES naming all of them"
                } else {
                    ""
                };
                give_up(m, &format!("gpuwire_comm_world ({name}): {}{hint}", last_error()));
            }
            let mut d = 0;
            ok(gpuwire_comm_device(c, &mut d), "gpuwire_comm_device");
            if m.rank == 0 {
                out(&format!("# gpuwire: {}", describe(c)));
            }
            (o.label.clone().unwrap_or_else(|| tagged(name)), c, d)
        }
    };
    // This program's own stream, in the device's primary context (gpuwire uses the same one).
    let dev = cudarc::driver::result::device::get(device).unwrap_or_else(|e| fatal(&format!("cuDeviceGet({device}): {e:?}")));
    let ctx = unsafe { cudarc::driver::result::primary_ctx::retain(dev) }.unwrap_or_else(|e| fatal(&format!("cuDevicePrimaryCtxRetain: {e:?}")));
    unsafe { cudarc::driver::result::ctx::set_current(ctx) }.unwrap_or_else(|e| fatal(&format!("cuCtxSetCurrent: {e:?}")));
    let mut stream: cu::CUstream = std::ptr::null_mut();
    // CU_STREAM_NON_BLOCKING = 1, as an application's own stream usually is.
    cuok(unsafe { cu::cuStreamCreate(&mut stream, 1) }, "cuStreamCreate");
    // NCCL mode: the raw NCCL communicator on the same device, after gpuwire's (which set
    // NCCL_RUNTIME_CONNECT=0 unless the environment chose: both communicators connect alike).
    let raw: Option<(&'static raw_nccl::Nccl, raw_nccl::Comm)> = if nccl_mode {
        let loaded = raw_nccl::Nccl::load();
        if !m.all(loaded.is_ok()) {
            let why = loaded.err().unwrap_or_else(|| "another rank could not load it".into());
            let _ = gpuwire_comm_free(comm);
            give_up(m, &format!("raw NCCL: {why}"));
        }
        let nccl: &'static raw_nccl::Nccl = Box::leak(Box::new(loaded.unwrap_or_else(|e| fatal(&e))));
        let rc = raw_nccl_comm(&m, nccl);
        Some((nccl, rc))
    } else {
        None
    };
    let raw_label = tagged("raw-nccl");
    let sync_each = o.sync_each.unwrap_or(!nccl_mode);
    let sizes = sizes(o);
    let max = *sizes.last().unwrap_or(&8);
    let ranks = m.size as usize;
    // Room for every op's layout (allgather and reduce_scatter take at least one float per rank).
    let n_max = (max / 4).max(ranks) * if o.ops.contains(&"alltoallv") { ranks } else { 1 };
    // `bw`: a window of messages, each in its own slice.
    let n_max = if o.ops.contains(&"bw") { n_max.max(dev_bw_elems(&sizes)) } else { n_max };
    let target_s = o.target_ms * 1e-3;
    if m.rank == 0 {
        let what = match raw {
            Some((nccl, _)) => format!("{label} against {raw_label} (raw NCCL {} from {}, same device, buffers and stream)", nccl.version_string(), nccl.name),
            None => label.clone(),
        };
        out(&format!(
            "# gpuwire-bench device {what}: {ranks} rank(s), device {device}, float32 device buffers, {} .. {}, blocks of about {} ms, {}",
            human(o.min_bytes),
            human(max),
            o.target_ms,
            if sync_each { "each call followed by a stream synchronization" } else { "calls enqueued back to back, one stream synchronization per block (as nccl-tests)" }
        ));
    }
    let sb = alloc(n_max, Space::GPUWIRE_SPACE_DEVICE, device);
    let rb = alloc(n_max, Space::GPUWIRE_SPACE_DEVICE, device);
    let (sp, rp) = (ptr_of(sb), ptr_of(rb));
    // Every rank sends (rank + 1.0) everywhere: see `expected`.
    cuok(unsafe { cu::cuMemsetD32_v2(sp as cu::CUdeviceptr, ((m.rank + 1) as f32).to_bits(), n_max) }, "cuMemsetD32");
    cuok(unsafe { cu::cuCtxSynchronize() }, "cuCtxSynchronize");
    let rank = m.rank;
    let (next, prev) = ((rank + 1) % m.size, (rank + m.size - 1) % m.size);
    let s_void = stream as *mut c_void;
    let mut bad = 0usize;
    let (mut met, mut missed) = (0, 0);
    let t_start = Instant::now();
    for &op in &o.ops {
        let mut rows = vec![];
        let mut last_bytes = 0;
        let mut iters_seen = (usize::MAX, 0usize);
        for &nominal in &sizes {
            let (sc, rcount, bytes) = layout(op, nominal, ranks);
            if bytes == last_bytes || sc > n_max || rcount > n_max {
                continue; // rounded onto the previous size
            }
            last_bytes = bytes;
            let s = if comm != 0 { view(sb, 0, sc) } else { 0 };
            let r = if comm != 0 { view(rb, 0, rcount) } else { 0 };
            let mc = m.comm;
            let dt = float();
            // The row views of a halo exchange, freed after the size.
            let mut halo_views: Vec<gpuwire_buffer> = Vec::new();
            // One call of the measured variant (gpuwire, or raw MPI for raw-cuda-aware).
            let one: Box<dyn FnMut()> = match (op, backend) {
                ("allreduce", DevBackend::RawCudaAware) => Box::new(move || {
                    // SAFETY: device buffers of sc float32 under a CUDA-aware MPI.
                    mok(unsafe { msys::MPI_Allreduce(sp as *const c_void, rp as *mut c_void, sc as c_int, dt, msys::RSMPI_SUM, mc) }, "MPI_Allreduce")
                }),
                ("allgather", DevBackend::RawCudaAware) => Box::new(move || {
                    // SAFETY: as above; rcount = ranks x sc.
                    mok(unsafe { msys::MPI_Allgather(sp as *const c_void, sc as c_int, dt, rp as *mut c_void, sc as c_int, dt, mc) }, "MPI_Allgather")
                }),
                ("reduce_scatter", DevBackend::RawCudaAware) => Box::new(move || {
                    // SAFETY: as above; sc = ranks x rcount.
                    mok(
                        unsafe { msys::MPI_Reduce_scatter_block(sp as *const c_void, rp as *mut c_void, rcount as c_int, dt, msys::RSMPI_SUM, mc) },
                        "MPI_Reduce_scatter_block",
                    )
                }),
                ("exchange", DevBackend::RawCudaAware) => Box::new(move || {
                    // SAFETY: as above.
                    mok(
                        unsafe {
                            msys::MPI_Sendrecv(sp as *const c_void, sc as c_int, dt, next, TAG, rp as *mut c_void, rcount as c_int, dt, prev, TAG, mc, msys::RSMPI_STATUS_IGNORE)
                        },
                        "MPI_Sendrecv",
                    )
                }),
                ("halo", DevBackend::RawCudaAware) => Box::new(move || {
                    let h = sc / 2;
                    // SAFETY: as above: rows of h float32 at offsets 0 and h.
                    unsafe {
                        mok(
                            msys::MPI_Sendrecv(sp as *const c_void, h as c_int, dt, next, TAG, rp as *mut c_void, h as c_int, dt, prev, TAG, mc, msys::RSMPI_STATUS_IGNORE),
                            "MPI_Sendrecv",
                        );
                        mok(
                            msys::MPI_Sendrecv((sp + 4 * h) as *const c_void, h as c_int, dt, prev, HALO_TAG, (rp + 4 * h) as *mut c_void, h as c_int, dt, next, HALO_TAG, mc, msys::RSMPI_STATUS_IGNORE),
                            "MPI_Sendrecv",
                        );
                    }
                }),
                ("sendrecv", DevBackend::RawCudaAware) => Box::new(move || {
                    // SAFETY: as above.
                    unsafe {
                        if rank == 0 {
                            mok(msys::MPI_Send(sp as *const c_void, sc as c_int, dt, 1, TAG, mc), "MPI_Send");
                            mok(msys::MPI_Recv(rp as *mut c_void, rcount as c_int, dt, 1, TAG, mc, msys::RSMPI_STATUS_IGNORE), "MPI_Recv");
                        } else if rank == 1 {
                            mok(msys::MPI_Recv(rp as *mut c_void, rcount as c_int, dt, 0, TAG, mc, msys::RSMPI_STATUS_IGNORE), "MPI_Recv");
                            mok(msys::MPI_Send(rp as *const c_void, rcount as c_int, dt, 0, TAG, mc), "MPI_Send");
                        }
                    }
                }),
                ("bw", DevBackend::RawCudaAware) => {
                    let window = dev_bw_window(bytes);
                    let mut reqs = vec![unsafe { msys::RSMPI_REQUEST_NULL }; window];
                    // SAFETY: distinct slices of device buffers under a CUDA-aware MPI.
                    Box::new(move || unsafe { raw_bw_window(rank, &mut reqs, (sp, rp, bytes), sc as c_int, dt, mc) })
                }
                ("alltoallv", DevBackend::RawCudaAware) => {
                    let k = rcount * 2 / (ranks * (ranks + 1));
                    let (sc, sd, rc, rd) = alltoallv_counts(rank as usize, ranks, k);
                    let int = |v: &[i64]| v.iter().map(|x| *x as c_int).collect::<Vec<c_int>>();
                    let (sc, sd, rc, rd) = (int(&sc), int(&sd), int(&rc), int(&rd));
                    Box::new(move || {
                        // SAFETY: device buffers holding every block under a CUDA-aware MPI.
                        mok(
                            unsafe { msys::MPI_Alltoallv(sp as *const c_void, sc.as_ptr(), sd.as_ptr(), dt, rp as *mut c_void, rc.as_ptr(), rd.as_ptr(), dt, mc) },
                            "MPI_Alltoallv",
                        )
                    })
                }
                ("alltoallv", _) => {
                    let k = rcount * 2 / (ranks * (ranks + 1));
                    let (sc, sd, rc, rd) = alltoallv_counts(rank as usize, ranks, k);
                    Box::new(move || ok(gpuwire_alltoallv(comm, s, sc.as_ptr(), sd.as_ptr(), r, rc.as_ptr(), rd.as_ptr(), s_void), "gpuwire_alltoallv"))
                }
                ("allreduce", _) => Box::new(move || ok(gpuwire_allreduce(comm, s, r, SUM, s_void), "gpuwire_allreduce")),
                ("allgather", _) => Box::new(move || ok(gpuwire_allgather(comm, s, r, s_void), "gpuwire_allgather")),
                ("reduce_scatter", _) => Box::new(move || ok(gpuwire_reduce_scatter(comm, s, r, SUM, s_void), "gpuwire_reduce_scatter")),
                ("exchange", _) => Box::new(move || ok(gpuwire_sendrecv(comm, s, next, TAG, r, prev, TAG, s_void), "gpuwire_sendrecv")),
                ("halo", _) => {
                    let h = sc / 2;
                    let rows = [view(sb, 0, h), view(sb, h, h), view(rb, 0, h), view(rb, h, h)];
                    halo_views.extend(rows);
                    Box::new(move || {
                        ok(gpuwire_group_start(), "gpuwire_group_start");
                        ok(gpuwire_send(comm, rows[0], next, TAG, s_void), "gpuwire_send");
                        ok(gpuwire_send(comm, rows[1], prev, HALO_TAG, s_void), "gpuwire_send");
                        ok(gpuwire_recv(comm, rows[2], prev, TAG, s_void), "gpuwire_recv");
                        ok(gpuwire_recv(comm, rows[3], next, HALO_TAG, s_void), "gpuwire_recv");
                        ok(gpuwire_group_end(), "gpuwire_group_end");
                    })
                }
                ("bw", _) => {
                    // OSU osu_bw on the device: rank 0 streams a window of isends (each from its
                    // own slice), rank 1 receives them (each into its own slice) and acknowledges
                    // the window with one element; the time per message is the block's / window.
                    let window = dev_bw_window(bytes);
                    let (sv, rv): (Vec<gpuwire_buffer>, Vec<gpuwire_buffer>) = (0..window).map(|i| (view(sb, i * sc, sc), view(rb, i * rcount, rcount))).unzip();
                    let (ack, ackr) = (view(sb, 0, 1), view(rb, 0, 1));
                    halo_views.extend(sv.iter().chain(&rv).copied().chain([ack, ackr]));
                    let mut reqs: Vec<gpuwire_request> = vec![0; window];
                    Box::new(move || {
                        if rank == 0 {
                            for (i, q) in reqs.iter_mut().enumerate() {
                                ok(gpuwire_isend(comm, sv[i], 1, TAG, s_void, q), "gpuwire_isend");
                            }
                            ok(gpuwire_waitall(window as i32, reqs.as_mut_ptr()), "gpuwire_waitall");
                            ok(gpuwire_recv(comm, ackr, 1, ACK_TAG, s_void), "gpuwire_recv(ack)");
                        } else if rank == 1 {
                            for (i, q) in reqs.iter_mut().enumerate() {
                                ok(gpuwire_irecv(comm, rv[i], 0, TAG, s_void, q), "gpuwire_irecv");
                            }
                            ok(gpuwire_waitall(window as i32, reqs.as_mut_ptr()), "gpuwire_waitall");
                            ok(gpuwire_send(comm, ack, 0, ACK_TAG, s_void), "gpuwire_send(ack)");
                        }
                    })
                }
                ("sendrecv", _) => Box::new(move || {
                    if rank == 0 {
                        ok(gpuwire_send(comm, s, 1, TAG, s_void), "gpuwire_send");
                        ok(gpuwire_recv(comm, r, 1, TAG, s_void), "gpuwire_recv");
                    } else if rank == 1 {
                        ok(gpuwire_recv(comm, r, 0, TAG, s_void), "gpuwire_recv");
                        ok(gpuwire_send(comm, r, 0, TAG, s_void), "gpuwire_send");
                    }
                }),
                _ => unreachable!(),
            };
            let mut f = timed(one, sync_each, stream);
            if let Some((nccl, rc)) = raw {
                // The same op through raw NCCL, on the same buffers and stream.
                let one_raw: Box<dyn FnMut()> = match op {
                    // SAFETY (every arm): device buffers of sc / rcount float32 on the
                    // communicator's device; a valid NCCL communicator.
                    "allreduce" => Box::new(move || {
                        nccl.ok(unsafe { (nccl.all_reduce)(sp as *const c_void, rp as *mut c_void, sc, raw_nccl::FLOAT32, raw_nccl::SUM, rc, s_void) }, "ncclAllReduce")
                    }),
                    "allgather" => Box::new(move || {
                        nccl.ok(unsafe { (nccl.all_gather)(sp as *const c_void, rp as *mut c_void, sc, raw_nccl::FLOAT32, rc, s_void) }, "ncclAllGather")
                    }),
                    "reduce_scatter" => Box::new(move || {
                        nccl.ok(
                            unsafe { (nccl.reduce_scatter)(sp as *const c_void, rp as *mut c_void, rcount, raw_nccl::FLOAT32, raw_nccl::SUM, rc, s_void) },
                            "ncclReduceScatter",
                        )
                    }),
                    "halo" => Box::new(move || unsafe {
                        let h = sc / 2;
                        nccl.ok((nccl.group_start)(), "ncclGroupStart");
                        nccl.ok((nccl.send)(sp as *const c_void, h, raw_nccl::FLOAT32, next, rc, s_void), "ncclSend");
                        nccl.ok((nccl.send)((sp + 4 * h) as *const c_void, h, raw_nccl::FLOAT32, prev, rc, s_void), "ncclSend");
                        nccl.ok((nccl.recv)(rp as *mut c_void, h, raw_nccl::FLOAT32, prev, rc, s_void), "ncclRecv");
                        nccl.ok((nccl.recv)((rp + 4 * h) as *mut c_void, h, raw_nccl::FLOAT32, next, rc, s_void), "ncclRecv");
                        nccl.ok((nccl.group_end)(), "ncclGroupEnd");
                    }),
                    "alltoallv" => {
                        // Grouped ncclSend/ncclRecv of every block (as Horovod's and vLLM's).
                        let k = rcount * 2 / (ranks * (ranks + 1));
                        let (a_sc, a_sd, a_rc, a_rd) = alltoallv_counts(rank as usize, ranks, k);
                        Box::new(move || unsafe {
                            nccl.ok((nccl.group_start)(), "ncclGroupStart");
                            for q in 0..ranks {
                                nccl.ok((nccl.send)((sp + 4 * a_sd[q] as usize) as *const c_void, a_sc[q] as usize, raw_nccl::FLOAT32, q as c_int, rc, s_void), "ncclSend");
                                nccl.ok((nccl.recv)((rp + 4 * a_rd[q] as usize) as *mut c_void, a_rc[q] as usize, raw_nccl::FLOAT32, q as c_int, rc, s_void), "ncclRecv");
                            }
                            nccl.ok((nccl.group_end)(), "ncclGroupEnd");
                        })
                    }
                    "exchange" => Box::new(move || unsafe {
                        nccl.ok((nccl.group_start)(), "ncclGroupStart");
                        nccl.ok((nccl.send)(sp as *const c_void, sc, raw_nccl::FLOAT32, next, rc, s_void), "ncclSend");
                        nccl.ok((nccl.recv)(rp as *mut c_void, rcount, raw_nccl::FLOAT32, prev, rc, s_void), "ncclRecv");
                        nccl.ok((nccl.group_end)(), "ncclGroupEnd");
                    }),
                    _ => unreachable!(),
                };
                let mut g = timed(one_raw, sync_each, stream);
                // Warm-up, then a data check of each variant on its own.
                block(&m, 5, &mut f);
                block(&m, 5, &mut g);
                for (l, v) in [(&label, &mut f), (&raw_label, &mut g)] {
                    poison(rp, rcount, stream);
                    block(&m, 1, v);
                    if !data_ok(&m, l, op, bytes, rp, rcount) {
                        bad += 1;
                    }
                }
                let iters = calibrate(&m, target_s, 20_000, &mut g);
                iters_seen = (iters_seen.0.min(iters), iters_seen.1.max(iters));
                let reps = m.bcast_u64(o.reps.unwrap_or(11) as u64) as usize;
                let (tg, tr) = interleaved(&m, reps, iters, &mut f, &mut g);
                dev_line(&m, &raw_label, op, bytes, &tr);
                dev_line(&m, &label, op, bytes, &tg);
                if m.rank == 0 {
                    let (ratio, added) = paired(&tr, &tg);
                    out(&format!("PAIR {label} {raw_label} {op} {bytes} {ranks} {ratio:.5} {:.3} {reps}", added * 1e6));
                }
                rows.push(NcclRow { nominal, bytes, raw: tr, gw: tg });
            } else {
                // Warm-up (staging buffers grow, IPC handles get cached), then check the result.
                let t1 = block(&m, 1, &mut f);
                let slow = m.bcast_u64(u64::from(t1 > 0.05)) == 1;
                if !slow {
                    block(&m, 1, &mut f);
                }
                poison(rp, rcount, stream);
                block(&m, 1, &mut f);
                if !data_ok(&m, &label, op, bytes, rp, rcount) {
                    bad += 1;
                }
                // Iterations per block from one timed call (rank 0 decides).
                let t = block(&m, 1, &mut f);
                let iters = m.bcast_u64(if rank == 0 { (target_s / t).round().clamp(1.0, 1000.0) as u64 } else { 0 }) as usize;
                let reps = o.reps.unwrap_or(if t > 0.05 { 3 } else { 7 });
                let reps = m.bcast_u64(reps as u64) as usize;
                let times = repeated(&m, reps, iters, &mut f);
                let times: Vec<f64> = match op {
                    "sendrecv" => times.iter().map(|t| t / 2.0).collect(),
                    "bw" => times.iter().map(|t| t / dev_bw_window(bytes) as f64).collect(),
                    _ => times,
                };
                dev_line(&m, &label, op, bytes, &times);
            }
            drop(f);
            for v in halo_views.drain(..) {
                ok(gpuwire_buffer_free(v), "gpuwire_buffer_free");
            }
            if comm != 0 {
                ok(gpuwire_buffer_free(s), "gpuwire_buffer_free");
                ok(gpuwire_buffer_free(r), "gpuwire_buffer_free");
            }
        }
        if raw.is_some() {
            let reps = rows.first().map_or(0, |r| r.raw.len());
            let note = format!(
                "{reps} interleaved repetitions of blocks of {}..{} calls, {}",
                iters_seen.0,
                iters_seen.1,
                if sync_each { "a stream synchronization after each call" } else { "one stream synchronization per block" }
            );
            let (a, b) = nccl_table(&m, op, (&label, &raw_label), &note, &rows);
            met += a;
            missed += b;
        }
    }
    let all_good = m.all(bad == 0);
    if m.rank == 0 {
        let targets = if raw.is_some() { format!("; {met} target rows met, {missed} missed") } else { String::new() };
        out(&format!("# {label}: data checks {}{targets}; {:.1} s", if all_good { "passed" } else { "FAILED" }, t_start.elapsed().as_secs_f64()));
    }
    ok(gpuwire_buffer_free(sb), "gpuwire_buffer_free");
    ok(gpuwire_buffer_free(rb), "gpuwire_buffer_free");
    if let Some((nccl, rc)) = raw {
        // SAFETY: every operation on it has completed (the last block synchronized the stream).
        nccl.ok(unsafe { (nccl.comm_destroy)(rc) }, "ncclCommDestroy");
    }
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

#[path = "gpuwire-bench/halo3d.rs"]
mod halo3d;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("halo3d") {
        return halo3d::run(&args[1..]);
    }
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
        assert_eq!(parse(&args("device --backend ipc")).unwrap().device, Some(DevBackend::Ipc));
        assert_eq!(parse(&args("device --backend hier")).unwrap().device, Some(DevBackend::Hier));
        let o = parse(&args("device --backend raw-cuda-aware --op=sendrecv")).unwrap();
        assert_eq!(o.device, Some(DevBackend::RawCudaAware));
        assert_eq!(o.ops, vec!["sendrecv"]);
        assert_eq!(*sizes(&o).last().unwrap(), 256 << 20);
        assert!(parse(&args("device")).is_err(), "device mode needs --backend");
        assert!(parse(&args("host --op bcast")).is_err());
        assert!(parse(&args("host --backend staged")).is_err(), "--backend is for device mode");
        assert!(parse(&args("host --min-bytes 6")).is_err());
        let o = parse(&args("host --op split --dtype float32,f64 --min-bytes 2M")).unwrap();
        assert_eq!((o.ops, o.dtypes), (vec!["split"], vec![Dtype::GPUWIRE_FLOAT32, Dtype::GPUWIRE_FLOAT64]));
        assert_eq!(parse(&args("host --op split")).unwrap().dtypes, vec![Dtype::GPUWIRE_FLOAT32]);
        assert!(parse(&args("host --dtype int32")).is_err());
        assert!(parse(&args("device --backend staged --dtype float64")).is_err(), "--dtype is for host mode");
    }

    #[test]
    fn device_options() {
        let o = parse(&args("device --backend nccl")).unwrap();
        assert_eq!(o.device, Some(DevBackend::Nccl));
        assert_eq!(o.ops, vec!["allreduce", "allgather", "reduce_scatter", "exchange"]);
        assert_eq!(o.sync_each, None);
        let o = parse(&args("device --backend nccl --op sendrecv,allreduce,reduce-scatter,exchange --max-bytes 1G --tag 2gpu --sync each")).unwrap();
        assert_eq!(o.ops, vec!["exchange", "allreduce", "reduce_scatter"], "NCCL's sendrecv is the exchange");
        assert_eq!(*sizes(&o).last().unwrap(), 1 << 30);
        assert_eq!(sizes(&o).len(), 28);
        assert_eq!(o.tag.as_deref(), Some("2gpu"));
        assert_eq!(o.sync_each, Some(true));
        assert!(parse(&args("device --backend nccl --label x")).is_err(), "two labels: --tag instead");
        assert!(parse(&args("device --backend nccl --op bw")).is_err());
        assert!(parse(&args("device --backend nccl --sync sometimes")).is_err());
        let o = parse(&args("device --backend staged --op allgather,sendrecv --tag 4gpu")).unwrap();
        assert_eq!(o.ops, vec!["allgather", "sendrecv"]);
        let o = parse(&args("device --backend cuda_aware")).unwrap();
        assert_eq!(o.ops, vec!["allreduce", "allgather", "reduce_scatter", "sendrecv", "exchange"]);
        let o = parse(&args("device --backend ipc --op bw,sendrecv")).unwrap();
        assert_eq!(o.ops, vec!["bw", "sendrecv"], "bw on the device is asked for by name");
        assert_eq!((dev_bw_window(8), dev_bw_window(16 << 20), dev_bw_window(256 << 20), dev_bw_window(2 << 30)), (64, 64, 4, 1));
        // Every size's window fits the buffers, also where the largest size's window is not the
        // largest (sizes of 20 MiB * 2^k: 20 MiB is 51 messages, 1020 MiB; 80 MiB 12, 960 MiB).
        for a in ["device --backend ipc --op bw", "device --backend ipc --op bw --min-bytes 20M --max-bytes 80M", "device --backend ipc --op bw --min-bytes 12 --max-bytes 1G"] {
            let s = sizes(&parse(&args(a)).unwrap());
            let need = dev_bw_elems(&s);
            for &b in &s {
                let (sc, rc, _) = layout("bw", b, 2);
                assert!(dev_bw_window(b) * sc.max(rc) <= need, "{a}: {b} bytes: {} messages of {sc} elements, buffers of {need}", dev_bw_window(b));
            }
        }
        assert!(parse(&args("host --tag x")).is_err(), "--tag is for device mode");
        assert!(parse(&args("host --op exchange")).is_err());
    }

    #[test]
    fn layouts_and_bus_bandwidth() {
        assert_eq!(layout("allreduce", 8, 4), (2, 2, 8));
        assert_eq!(layout("exchange", 1 << 20, 8), (1 << 18, 1 << 18, 1 << 20));
        // allgather: bytes = the gathered buffer; at least one float per rank.
        assert_eq!(layout("allgather", 1 << 20, 4), (1 << 16, 1 << 18, 1 << 20));
        assert_eq!(layout("allgather", 8, 2), (1, 2, 8));
        assert_eq!(layout("allgather", 8, 8), (1, 8, 32));
        assert_eq!(layout("allgather", 64, 3), (5, 15, 60));
        // reduce_scatter: bytes = the whole input.
        assert_eq!(layout("reduce_scatter", 1 << 20, 4), (1 << 18, 1 << 16, 1 << 20));
        assert_eq!(layout("reduce_scatter", 8, 1), (2, 2, 8));
        // nccl-tests: 1 GB in 1 s on 2 ranks is 1 GB/s for allreduce (2(n-1)/n = 1).
        assert!((busbw("allreduce", 1_000_000_000, 2, 1.0) - 1.0).abs() < 1e-12);
        assert!((busbw("allreduce", 1_000_000_000, 8, 1.0) - 1.75).abs() < 1e-12);
        assert!((busbw("allgather", 1_000_000_000, 4, 0.5) - 1.5).abs() < 1e-12);
        assert!((busbw("reduce_scatter", 1_000_000_000, 2, 1.0) - 0.5).abs() < 1e-12);
        assert!((busbw("exchange", 1_000_000_000, 8, 2.0) - 0.5).abs() < 1e-12);
        assert_eq!(busbw("allreduce", 1 << 20, 1, 1e-3), 0.0, "one rank moves nothing over a bus");
    }

    #[test]
    fn expected_results() {
        // 4 ranks send 1, 2, 3, 4.
        assert_eq!(expected("allreduce", 2, 4, 16, 15), Some(10.0));
        assert_eq!(expected("reduce_scatter", 0, 4, 4, 3), Some(10.0));
        assert_eq!(expected("allgather", 3, 4, 16, 0), Some(1.0));
        assert_eq!(expected("allgather", 3, 4, 16, 7), Some(2.0));
        assert_eq!(expected("allgather", 3, 4, 16, 15), Some(4.0));
        assert_eq!(expected("exchange", 0, 4, 8, 0), Some(4.0), "rank 0 receives from rank 3");
        assert_eq!(expected("exchange", 2, 4, 8, 0), Some(2.0));
        assert_eq!(expected("exchange", 0, 1, 8, 0), Some(1.0), "one rank exchanges with itself");
        assert_eq!(layout("halo", 1 << 10, 2), (512, 512, 1 << 10), "two rows of 256 float32 each way");
        assert_eq!(expected("halo", 0, 4, 8, 3), Some(4.0), "rank 0's first row comes from rank 3");
        assert_eq!(expected("halo", 0, 4, 8, 4), Some(2.0), "its second row from rank 1");
        assert_eq!(check_points("halo", 2, 8), vec![0, 3, 4, 7]);
        assert_eq!(expected("allreduce", 0, 1, 2, 0), Some(1.0));
        assert_eq!(expected("sendrecv", 1, 4, 2, 0), Some(1.0));
        assert_eq!(expected("sendrecv", 2, 4, 2, 0), None, "the ping-pong involves ranks 0 and 1");
        assert_eq!(check_points("allgather", 4, 8), vec![0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(check_points("allgather", 2, 2), vec![0, 1]);
        assert_eq!(check_points("allgather", 2, 8), vec![0, 3, 4, 7]);
        assert_eq!(check_points("allreduce", 2, 1), vec![0]);
        assert_eq!(check_points("exchange", 2, 100), vec![0, 99]);
    }

    #[test]
    fn nccl_targets() {
        // One rank (issue 4): < 1 us added at 8 B, < 1 % at >= 1 MiB.
        assert_eq!(nccl_target(1, 8, 1.5, 0.4).map(|t| t.0), Some(true));
        assert_eq!(nccl_target(1, 8, 1.0, 1.2).map(|t| t.0), Some(false));
        assert_eq!(nccl_target(1, 1 << 19, 1.5, 9.0), None);
        assert_eq!(nccl_target(1, 1 << 20, 1.009, 9.0).map(|t| t.0), Some(true));
        assert_eq!(nccl_target(1, 1 << 20, 1.011, 9.0).map(|t| t.0), Some(false));
        // Several ranks (issue 8): < 1 us at 8 B, within 2 % at >= 64 MiB.
        assert_eq!(nccl_target(2, 8, 1.2, 0.9).map(|t| t.0), Some(true));
        assert_eq!(nccl_target(8, 1 << 20, 1.5, 9.0), None);
        assert_eq!(nccl_target(8, 32 << 20, 1.5, 9.0), None);
        assert_eq!(nccl_target_of("halo", 1, 1 << 10, 2.0, 0.4).map(|t| t.0), Some(true));
        assert_eq!(nccl_target_of("halo", 1, 1 << 10, 1.0, 0.6).map(|t| t.0), Some(false));
        assert_eq!(nccl_target_of("halo", 1, 32 << 10, 1.5, 9.0), None);
        assert_eq!(nccl_target_of("halo", 1, 64 << 10, 1.009, 9.0).map(|t| t.0), Some(true));
        assert_eq!(nccl_target_of("halo", 2, 64 << 20, 1.02, 9.0).map(|t| t.0), Some(false));
        assert_eq!(nccl_target(2, 64 << 20, 1.019, 9.0).map(|t| t.0), Some(true));
        assert_eq!(nccl_target(2, 1 << 30, 1.021, 9.0).map(|t| t.0), Some(false));
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
