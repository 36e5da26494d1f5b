//! cg_poisson on device memory: the main job of `examples-c/cg_poisson.c` with every vector on
//! the GPU. The stencil, the vector updates and the local dot products are CUDA kernels
//! (compiled with NVRTC through cudarc); halo rows move with `gpuwire_sendrecv` on device views,
//! dot products are `gpuwire_allreduce` on a one-element device buffer, all on one CUDA stream.
//!
//! Same problem, same start vector, same checks as the C version: −Δu = f on the unit square,
//! u = sin πx sin πy, 5-point Laplacian on an N×N interior grid split by rows (the first N mod P
//! ranks get one more row), CG from a hashed pseudo-random x0 until ‖r‖/‖b‖ < 1e-9; then
//! ‖b − Ax‖/‖b‖ < 1e-8, error·(N+1)² < 1, and the error equals the scheme's closed-form error
//! to 1 %.
//!
//! Usage: `mpirun -np P cg_poisson_device [N [EXPECTED_RANKS]]` (default N = 768). Needs a GPU.

use std::ffi::{CString, c_char, c_void};
use std::time::Instant;

use cudarc::driver::sys as cu;
use gpuwire::error::Status;
use gpuwire::ffi::buffer::*;
use gpuwire::ffi::comm::*;
use gpuwire::ffi::lifecycle::*;
use gpuwire::ffi::ops::*;
use gpuwire::ffi::status::*;
use gpuwire::ffi::{GPUWIRE_PROC_NULL, gpuwire_buffer, gpuwire_comm};
use gpuwire::types::{Dtype, ReduceOp, Space};

const CG_TOL: f64 = 1e-9;
const RESIDUAL_MAX: f64 = 1e-8;
const MAX_ITERS: usize = 100_000;
const BLOCKS: u32 = 256;

const KERNELS: &str = r#"
extern "C" __global__ void apply_a(const double *v, double *out, int nloc, int n) {
  long long total = (long long)nloc * n;
  for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < total; k += (long long)blockDim.x * gridDim.x) {
    int i = (int)(k / n) + 1, j = (int)(k % n);
    const double *me = v + (long long)i * n;
    double s = 4.0 * me[j] - me[j - n] - me[j + n];
    if (j > 0) s -= me[j - 1];
    if (j < n - 1) s -= me[j + 1];
    out[(long long)i * n + j] = s;
  }
}
extern "C" __global__ void update_xr(double *x, double *r, const double *p, const double *ap, double alpha, long long lo, long long hi) {
  for (long long k = lo + blockIdx.x * (long long)blockDim.x + threadIdx.x; k < hi; k += (long long)blockDim.x * gridDim.x) {
    x[k] += alpha * p[k];
    r[k] -= alpha * ap[k];
  }
}
extern "C" __global__ void update_p(double *p, const double *r, double beta, long long lo, long long hi) {
  for (long long k = lo + blockIdx.x * (long long)blockDim.x + threadIdx.x; k < hi; k += (long long)blockDim.x * gridDim.x)
    p[k] = r[k] + beta * p[k];
}
extern "C" __global__ void residual(double *r, const double *b, const double *ap, long long lo, long long hi) {
  for (long long k = lo + blockIdx.x * (long long)blockDim.x + threadIdx.x; k < hi; k += (long long)blockDim.x * gridDim.x)
    r[k] = b[k] - ap[k];
}
// Deterministic dot product: fixed grid, per-block tree sums, then one block sums the partials.
extern "C" __global__ void dot_partial(const double *a, const double *b, long long lo, long long hi, double *partial) {
  __shared__ double s[256];
  double acc = 0.0;
  for (long long k = lo + blockIdx.x * (long long)blockDim.x + threadIdx.x; k < hi; k += (long long)blockDim.x * gridDim.x)
    acc += a[k] * b[k];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}
extern "C" __global__ void sum_partials(const double *partial, int n, double *out) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += partial[i];
    *out = s;
  }
}
"#;

fn last_error() -> String {
    let mut buf = vec![0 as c_char; 1024];
    gpuwire_last_error(buf.as_mut_ptr(), buf.len());
    let bytes: Vec<u8> = buf.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn ok(s: Status, what: &str) {
    if s != Status::GPUWIRE_SUCCESS {
        eprintln!("cg_poisson_device: {what} failed: {:?}: {}", s, last_error());
        std::process::exit(1);
    }
}

fn cuok(r: cu::CUresult, what: &str) {
    if r != cu::CUresult::CUDA_SUCCESS {
        eprintln!("cg_poisson_device: {what} failed: {r:?}");
        std::process::exit(1);
    }
}

struct Gpu {
    stream: cu::CUstream,
    apply_a: cu::CUfunction,
    update_xr: cu::CUfunction,
    update_p: cu::CUfunction,
    residual: cu::CUfunction,
    dot_partial: cu::CUfunction,
    sum_partials: cu::CUfunction,
}

impl Gpu {
    fn launch(&self, f: cu::CUfunction, grid: u32, block: u32, params: &mut [*mut c_void]) {
        cuok(
            unsafe { cu::cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, self.stream, params.as_mut_ptr(), std::ptr::null_mut()) },
            "cuLaunchKernel",
        );
    }
}

macro_rules! args {
    ($($v:expr),*) => { &mut [$((&mut $v as *mut _) as *mut c_void),*] };
}

/// A distributed grid vector on the device: nloc rows of N values plus one halo row above and
/// one below, with gpuwire views of the rows that cross ranks.
struct Field {
    buf: gpuwire_buffer,
    first: gpuwire_buffer,
    last: gpuwire_buffer,
    halo_top: gpuwire_buffer,
    halo_bottom: gpuwire_buffer,
    ptr: u64,
}

fn view(b: gpuwire_buffer, off: usize, n: usize) -> gpuwire_buffer {
    let mut v = 0;
    ok(gpuwire_buffer_view(b, off as i64, n as i64, &mut v), "gpuwire_buffer_view");
    v
}

fn device_buffer(n: usize) -> (gpuwire_buffer, u64) {
    let mut b = 0;
    ok(gpuwire_buffer_alloc(n as i64, Dtype::GPUWIRE_FLOAT64 as i32, Space::GPUWIRE_SPACE_DEVICE as i32, -1, &mut b), "gpuwire_buffer_alloc");
    let mut p: *mut c_void = std::ptr::null_mut();
    ok(gpuwire_buffer_pointer(b, &mut p), "gpuwire_buffer_pointer");
    (b, p as u64)
}

impl Field {
    fn new(nloc: usize, n: usize) -> Field {
        let (buf, ptr) = device_buffer((nloc + 2) * n);
        Field { buf, halo_top: view(buf, 0, n), first: view(buf, n, n), last: view(buf, nloc * n, n), halo_bottom: view(buf, (nloc + 1) * n, n), ptr }
    }
    fn free(self) {
        for b in [self.halo_bottom, self.last, self.first, self.halo_top, self.buf] {
            ok(gpuwire_buffer_free(b), "gpuwire_buffer_free");
        }
    }
}

fn hash01(k: u64) -> f64 {
    let mut z = k.wrapping_add(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
    z ^= z >> 31;
    (z >> 11) as f64 * (1.0 / 9007199254740992.0)
}

struct Solver {
    comm: gpuwire_comm,
    gpu: Gpu,
    n: usize,
    nloc: usize,
    prev: i32,
    next: i32,
    scalar: gpuwire_buffer,
    scalar_ptr: u64,
    partial: u64,
}

impl Solver {
    fn s(&self) -> *mut c_void {
        self.gpu.stream as *mut c_void
    }
    fn halo_exchange(&self, f: &Field) {
        ok(gpuwire_sendrecv(self.comm, f.first, self.prev, 1, f.halo_bottom, self.next, 1, self.s()), "gpuwire_sendrecv");
        ok(gpuwire_sendrecv(self.comm, f.last, self.next, 2, f.halo_top, self.prev, 2, self.s()), "gpuwire_sendrecv");
    }
    fn apply_a(&self, f: &Field, out: u64) {
        self.halo_exchange(f);
        let (mut v, mut o, mut nl, mut n) = (f.ptr, out, self.nloc as i32, self.n as i32);
        self.gpu.launch(self.gpu.apply_a, 1024, 256, args!(v, o, nl, n));
    }
    fn range(&self) -> (i64, i64) {
        (self.n as i64, ((self.nloc + 1) * self.n) as i64)
    }
    /// Reduces the device scalar across ranks with `op` and returns it.
    fn all(&self, op: ReduceOp) -> f64 {
        ok(gpuwire_allreduce(self.comm, self.scalar, self.scalar, op as i32, self.s()), "gpuwire_allreduce");
        let mut v = 0.0f64;
        cuok(unsafe { cu::cuMemcpyDtoHAsync_v2((&mut v as *mut f64).cast(), self.scalar_ptr, 8, self.gpu.stream) }, "DtoH");
        cuok(unsafe { cu::cuStreamSynchronize(self.gpu.stream) }, "sync");
        v
    }
    fn dot(&self, a: u64, b: u64) -> f64 {
        let (mut lo, mut hi) = self.range();
        let (mut a, mut b, mut part) = (a, b, self.partial);
        self.gpu.launch(self.gpu.dot_partial, BLOCKS, 256, args!(a, b, lo, hi, part));
        let (mut nb, mut out) = (BLOCKS as i32, self.scalar_ptr);
        self.gpu.launch(self.gpu.sum_partials, 1, 32, args!(part, nb, out));
        let _ = (&mut lo, &mut hi);
        self.all(ReduceOp::GPUWIRE_SUM)
    }
}

fn main() {
    ok(gpuwire_init(), "gpuwire_init");
    let mut comm = 0;
    ok(gpuwire_comm_world(std::ptr::null(), &mut comm), "gpuwire_comm_world");
    let (mut rank, mut size) = (0, 0);
    ok(gpuwire_comm_rank(comm, &mut rank), "gpuwire_comm_rank");
    ok(gpuwire_comm_size(comm, &mut size), "gpuwire_comm_size");
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(768);
    if let Some(want) = args.get(2) {
        if want.parse::<i32>().ok() != Some(size) {
            eprintln!("cg_poisson_device: launched on {size} ranks, expected {want} (wrong launcher?)");
            std::process::exit(1);
        }
    }
    let p = size as usize;
    if n < p {
        eprintln!("cg_poisson_device: need N >= number of ranks");
        std::process::exit(1);
    }
    let (base, rem) = (n / p, n % p);
    let r = rank as usize;
    let nloc = base + (r < rem) as usize;
    let row0 = r * base + r.min(rem);
    let h = 1.0 / (n + 1) as f64;

    // Kernels and a stream in the primary context of the communicator's device.
    let mut dev = 0;
    ok(gpuwire_comm_device(comm, &mut dev), "gpuwire_comm_device");
    if dev < 0 {
        eprintln!("cg_poisson_device: this communicator has no CUDA device (no GPU, or backend HOST)");
        std::process::exit(1);
    }
    let cudev = cudarc::driver::result::device::get(dev).expect("cuDeviceGet");
    let ctx = unsafe { cudarc::driver::result::primary_ctx::retain(cudev) }.expect("cuDevicePrimaryCtxRetain");
    unsafe { cudarc::driver::result::ctx::set_current(ctx) }.expect("cuCtxSetCurrent");
    let ptx = cudarc::nvrtc::compile_ptx(KERNELS).expect("NVRTC compiles the kernels");
    let image = CString::new(ptx.to_src()).unwrap();
    let module = unsafe { cudarc::driver::result::module::load_data(image.as_ptr().cast()) }.expect("cuModuleLoadData");
    let f = |name: &str| unsafe { cudarc::driver::result::module::get_function(module, CString::new(name).unwrap()) }.expect(name);
    let mut stream: cu::CUstream = std::ptr::null_mut();
    cuok(unsafe { cu::cuStreamCreate(&mut stream, 1) }, "cuStreamCreate");
    let gpu = Gpu {
        stream,
        apply_a: f("apply_a"),
        update_xr: f("update_xr"),
        update_p: f("update_p"),
        residual: f("residual"),
        dot_partial: f("dot_partial"),
        sum_partials: f("sum_partials"),
    };
    let (scalar, scalar_ptr) = device_buffer(1);
    let (partial_buf, partial) = device_buffer(BLOCKS as usize);
    let sv = Solver {
        comm,
        gpu,
        n,
        nloc,
        prev: if r > 0 { rank - 1 } else { GPUWIRE_PROC_NULL },
        next: if r + 1 < p { rank + 1 } else { GPUWIRE_PROC_NULL },
        scalar,
        scalar_ptr,
        partial,
    };

    let len = (nloc + 2) * n;
    let x = Field::new(nloc, n);
    let pf = Field::new(nloc, n);
    let (rb, rp) = device_buffer(len);
    let (apb, app) = device_buffer(len);
    let (bb_, bp) = device_buffer(len);
    let mut bh = vec![0.0f64; len];
    let mut xh = vec![0.0f64; len];
    for i in 1..=nloc {
        let g = row0 + i - 1;
        for j in 0..n {
            bh[i * n + j] = h * h * 2.0 * std::f64::consts::PI.powi(2) * (std::f64::consts::PI * (j + 1) as f64 * h).sin() * (std::f64::consts::PI * (g + 1) as f64 * h).sin();
            xh[i * n + j] = hash01(g as u64 * n as u64 + j as u64);
        }
    }
    ok(gpuwire_buffer_copy_from_host(bb_, bh.as_ptr().cast(), sv.s()), "copy b");
    ok(gpuwire_buffer_copy_from_host(x.buf, xh.as_ptr().cast(), sv.s()), "copy x0");

    ok(gpuwire_barrier(comm, sv.s()), "gpuwire_barrier");
    let t0 = Instant::now();
    let (mut lo, mut hi) = sv.range();
    // r = b - A x0; p = r.
    sv.apply_a(&x, app);
    let (mut r_, mut b_, mut ap_) = (rp, bp, app);
    sv.gpu.launch(sv.gpu.residual, 1024, 256, args!(r_, b_, ap_, lo, hi));
    cuok(unsafe { cu::cuMemcpyDtoDAsync_v2(pf.ptr, rp, len * 8, stream) }, "DtoD");
    let bb = sv.dot(bp, bp);
    let mut rr = sv.dot(rp, rp);
    let mut iters = 0;
    while iters < MAX_ITERS && (rr / bb).sqrt() >= CG_TOL {
        sv.apply_a(&pf, app);
        let mut alpha = rr / sv.dot(pf.ptr, app);
        let (mut xp, mut rpp, mut ppp, mut apq) = (x.ptr, rp, pf.ptr, app);
        sv.gpu.launch(sv.gpu.update_xr, 1024, 256, args!(xp, rpp, ppp, apq, alpha, lo, hi));
        let rr_new = sv.dot(rp, rp);
        let mut beta = rr_new / rr;
        let (mut ppp, mut rpp) = (pf.ptr, rp);
        sv.gpu.launch(sv.gpu.update_p, 1024, 256, args!(ppp, rpp, beta, lo, hi));
        let _ = (&mut alpha, &mut beta);
        rr = rr_new;
        iters += 1;
    }
    ok(gpuwire_barrier(comm, sv.s()), "gpuwire_barrier");
    let secs = t0.elapsed().as_secs_f64();

    // The true residual and the error, as in the C version.
    sv.apply_a(&x, app);
    let (mut r_, mut b_, mut ap_) = (rp, bp, app);
    sv.gpu.launch(sv.gpu.residual, 1024, 256, args!(r_, b_, ap_, lo, hi));
    let resid = (sv.dot(rp, rp) / bb).sqrt();
    let _ = (&mut lo, &mut hi);
    ok(gpuwire_buffer_copy_to_host(x.buf, xh.as_mut_ptr().cast(), sv.s()), "copy x");
    let (mut err, mut maxs) = (0.0f64, 0.0f64);
    for i in 1..=nloc {
        let g = row0 + i - 1;
        for j in 0..n {
            let s = (std::f64::consts::PI * (j + 1) as f64 * h).sin() * (std::f64::consts::PI * (g + 1) as f64 * h).sin();
            err = err.max((xh[i * n + j] - s).abs());
            maxs = maxs.max(s);
        }
    }
    let reduce_max = |v: f64| {
        cuok(unsafe { cu::cuMemcpyHtoD_v2(scalar_ptr, (&v as *const f64).cast(), 8) }, "HtoD");
        cuok(unsafe { cu::cuCtxSynchronize() }, "sync");
        sv.all(ReduceOp::GPUWIRE_MAX)
    };
    let err = reduce_max(err);
    let maxs = reduce_max(maxs);
    let q = (std::f64::consts::PI * h / 2.0).sin();
    let pred = ((std::f64::consts::PI * h / 2.0).powi(2) / (q * q) - 1.0) * maxs;
    let scaled = err * ((n + 1) * (n + 1)) as f64;
    let mut pass = true;
    if rank == 0 {
        let mut d = vec![0 as c_char; 1024];
        ok(gpuwire_comm_describe(comm, d.as_mut_ptr(), d.len()), "gpuwire_comm_describe");
        let desc: String = d.iter().take_while(|c| **c != 0).map(|c| *c as u8 as char).collect();
        println!("cg_poisson_device: -Laplace(u) = f on the unit square, 5-point stencil, vectors on the GPU");
        println!("grid: {n} x {n} interior points ({} unknowns), h = 1/{}", n * n, n + 1);
        println!("ranks: {size} (rows per rank: {}..{})", base, base + (rem > 0) as usize);
        println!("iterations: {iters}");
        println!("relative residual: {resid:.3e} (true ||b - A x|| / ||b||; CG stopped at {CG_TOL:.0e})");
        println!("max error: {err:.15e}");
        println!("error * (N+1)^2: {scaled:.6} (the scheme's own error on this f: {:.6})", pred * ((n + 1) * (n + 1)) as f64);
        println!("wall time: {secs:.3} s (CG iterations only)");
        println!("backend: {desc}");
        if iters >= MAX_ITERS {
            println!("cg_poisson_device: FAIL: CG did not converge");
            pass = false;
        }
        if !(resid < RESIDUAL_MAX) {
            println!("cg_poisson_device: FAIL: relative residual {resid:.3e} is not below {RESIDUAL_MAX:.0e}");
            pass = false;
        }
        if !(scaled < 1.0) {
            println!("cg_poisson_device: FAIL: error is not O(h^2)");
            pass = false;
        }
        if !((err - pred).abs() <= 0.01 * pred) {
            println!("cg_poisson_device: FAIL: error {err:.6e} differs from the scheme's {pred:.6e} by more than 1%");
            pass = false;
        }
        if pass {
            println!("cg_poisson_device: PASS");
        }
    }
    for b in [rb, apb, bb_, scalar, partial_buf] {
        ok(gpuwire_buffer_free(b), "gpuwire_buffer_free");
    }
    x.free();
    pf.free();
    ok(gpuwire_comm_free(comm), "gpuwire_comm_free");
    ok(gpuwire_finalize(), "gpuwire_finalize");
    std::process::exit(if pass { 0 } else { 1 });
}
