//! Elementwise and reduction kernels of distributed arrays on the GPU, compiled once per process
//! and device with NVRTC (as [`super::kernels`]).
//!
//! One CUDA C++ source defines, per datatype:
//! - `gwa_fill_<bytes>(E *x, u64 n, E v)`: x[i] = v, for element sizes 1, 2, 4, 8, 16 (every
//!   datatype: fill copies the element's bytes);
//! - `gwa_axpy_<dtype>(T *y, const T *x, u64 n, T a)`: y[i] = a x[i] + y[i], and
//!   `gwa_scale_<dtype>(T *x, u64 n, T a)`: x[i] = a x[i] (float32, float64, complex64,
//!   complex128);
//! - `gwa_<reduction>_<dtype>(const T *x, const T *y, u64 n, A ident, A *partial)`: one partial
//!   result per block, and `gwa_final_<op>_<acc>(const A *partial, u32 np, A ident, A *out)`,
//!   which one block runs over the partials.
//!
//! Reductions are deterministic: a fixed grid of [`GRID`] blocks of [`BLOCK`] threads; thread t
//! of block b accumulates elements b·BLOCK + t, + GRID·BLOCK, ... in order; each block combines
//! its threads in a fixed tree; one block then combines the GRID partials in a fixed tree. The
//! same input gives the same bits, whatever the launch timing. Accumulators: float64 for real
//! data (float32 is widened), complex128 for complex data, uint64 (wrapping) for integer sums,
//! int64/uint64 for integer MIN/MAX. MAX/MIN of floats propagate NaN.
//!
//! Compiled with `--fmad=false`: a x + y is two correctly rounded operations, as on the host, so
//! fill, axpy and scale give the host path's bits exactly.

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::Mutex;

use cudarc::driver::sys;

use super::{CtxGuard, Stream, check};
use crate::error::{Error, Result};
use crate::types::Dtype;

/// Blocks of a reduction's first pass (fixed: the summation order depends only on n).
pub(crate) const GRID: u32 = 256;
/// Threads per block (a power of two: the in-block tree halves it).
pub(crate) const BLOCK: u32 = 256;
/// Bytes of device scratch one reduction needs: GRID partials and the final value, 16 bytes each.
pub(crate) const SCRATCH_BYTES: usize = (GRID as usize + 1) * 16;

/// A reduction over the local elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Red {
    /// sum x_i y_i (complex: sum conj(x_i) y_i).
    Dot,
    Sum,
    Norm1,
    /// sum |x_i|^2 (the square root is taken after the allreduce).
    Norm2Squared,
    NormInf,
    Min,
    Max,
}

impl Red {
    pub fn name(self) -> &'static str {
        match self {
            Red::Dot => "dot",
            Red::Sum => "sum",
            Red::Norm1 => "norm1",
            Red::Norm2Squared => "norm2sq",
            Red::NormInf => "norminf",
            Red::Min => "min",
            Red::Max => "max",
        }
    }

    pub const ALL: [Red; 7] = [Red::Dot, Red::Sum, Red::Norm1, Red::Norm2Squared, Red::NormInf, Red::Min, Red::Max];
}

/// The accumulator of a reduction: what a rank contributes to the allreduce.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Acc {
    F(f64),
    C(f64, f64),
    U(u64),
    I(i64),
}

/// How partial results combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comb {
    Add,
    Min,
    Max,
}

impl Comb {
    fn name(self) -> &'static str {
        match self {
            Comb::Add => "add",
            Comb::Min => "min",
            Comb::Max => "max",
        }
    }
}

fn is_signed_int(d: Dtype) -> bool {
    matches!(d, Dtype::GPUWIRE_INT8 | Dtype::GPUWIRE_INT32 | Dtype::GPUWIRE_INT64)
}

/// Whether `red` is defined on `d` (the same answer for host and device arrays), and if so its
/// accumulator's identity and how partials combine.
pub fn plan(red: Red, d: Dtype) -> Option<(Acc, Comb)> {
    let float = matches!(d, Dtype::GPUWIRE_FLOAT32 | Dtype::GPUWIRE_FLOAT64);
    let complex = d.is_complex();
    let int = d.is_integer();
    match red {
        Red::Dot | Red::Sum if complex => Some((Acc::C(0.0, 0.0), Comb::Add)),
        Red::Dot if float => Some((Acc::F(0.0), Comb::Add)),
        Red::Sum if float => Some((Acc::F(0.0), Comb::Add)),
        Red::Sum if int => Some((Acc::U(0), Comb::Add)),
        Red::Norm1 | Red::Norm2Squared if float || complex => Some((Acc::F(0.0), Comb::Add)),
        Red::NormInf if float || complex => Some((Acc::F(0.0), Comb::Max)),
        Red::Min if float => Some((Acc::F(f64::INFINITY), Comb::Min)),
        Red::Max if float => Some((Acc::F(f64::NEG_INFINITY), Comb::Max)),
        Red::Min if is_signed_int(d) => Some((Acc::I(i64::MAX), Comb::Min)),
        Red::Max if is_signed_int(d) => Some((Acc::I(i64::MIN), Comb::Max)),
        Red::Min if int => Some((Acc::U(u64::MAX), Comb::Min)),
        Red::Max if int => Some((Acc::U(0), Comb::Max)),
        _ => None,
    }
}

/// Whether axpy and scale are defined on `d` (float32, float64, complex64, complex128).
pub fn arithmetic(d: Dtype) -> bool {
    matches!(d, Dtype::GPUWIRE_FLOAT32 | Dtype::GPUWIRE_FLOAT64) || d.is_complex()
}

fn c_type(d: Dtype) -> &'static str {
    use Dtype::*;
    match d {
        GPUWIRE_INT8 => "i8",
        GPUWIRE_UINT8 => "u8",
        GPUWIRE_INT32 => "i32",
        GPUWIRE_UINT32 => "u32",
        GPUWIRE_INT64 => "i64",
        GPUWIRE_UINT64 => "u64",
        GPUWIRE_FLOAT16 | GPUWIRE_BFLOAT16 => "u16",
        GPUWIRE_FLOAT32 => "float",
        GPUWIRE_FLOAT64 => "double",
        GPUWIRE_COMPLEX64 => "c64",
        GPUWIRE_COMPLEX128 => "c128",
        // No array arithmetic or reduction is defined on the pair datatypes (`plan`, `arithmetic`).
        GPUWIRE_FLOAT32_INT32 | GPUWIRE_INT32_INT32 => "u64",
        GPUWIRE_FLOAT64_INT32 => "e16",
    }
}

fn acc_type(a: Acc) -> &'static str {
    match a {
        Acc::F(_) => "double",
        Acc::C(..) => "c128",
        Acc::U(_) => "u64",
        Acc::I(_) => "i64",
    }
}

fn acc_name(a: Acc) -> &'static str {
    match a {
        Acc::F(_) => "f64",
        Acc::C(..) => "c128",
        Acc::U(_) => "u64",
        Acc::I(_) => "i64",
    }
}

const PRELUDE: &str = r#"
typedef signed char i8; typedef unsigned char u8; typedef unsigned short u16;
typedef int i32; typedef unsigned int u32;
typedef long long i64; typedef unsigned long long u64;
struct c64 { float re, im; };
struct c128 { double re, im; };
struct e16 { u64 lo, hi; };
#define GWA_BLOCK 256
#define GRID_LOOP for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)blockDim.x * gridDim.x)

__device__ __forceinline__ float gw_add(float a, float b) { return a + b; }
__device__ __forceinline__ double gw_add(double a, double b) { return a + b; }
__device__ __forceinline__ u64 gw_add(u64 a, u64 b) { return a + b; }
__device__ __forceinline__ c64 gw_add(c64 a, c64 b) { return c64{a.re + b.re, a.im + b.im}; }
__device__ __forceinline__ c128 gw_add(c128 a, c128 b) { return c128{a.re + b.re, a.im + b.im}; }
__device__ __forceinline__ float gw_mul(float a, float b) { return a * b; }
__device__ __forceinline__ double gw_mul(double a, double b) { return a * b; }
__device__ __forceinline__ c64 gw_mul(c64 a, c64 b) { return c64{a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}; }
__device__ __forceinline__ c128 gw_mul(c128 a, c128 b) { return c128{a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}; }

// Accumulator views of one element.
__device__ __forceinline__ double gw_real(float v) { return (double)v; }
__device__ __forceinline__ double gw_real(double v) { return v; }
__device__ __forceinline__ c128 gw_cplx(c64 v) { return c128{(double)v.re, (double)v.im}; }
__device__ __forceinline__ c128 gw_cplx(c128 v) { return v; }
__device__ __forceinline__ double gw_abs(float v) { return fabs((double)v); }
__device__ __forceinline__ double gw_abs(double v) { return fabs(v); }
// |re + i im| as the host's darray::cabs computes it (CUDA's hypot differs from libm's in the last
// bit): max * sqrt(1 + r*r), r = min/max, each step correctly rounded (--fmad=false).
__device__ __forceinline__ double gw_hypot(double re, double im) {
  double a = fabs(re), b = fabs(im);
  if (isinf(a) || isinf(b)) return __longlong_as_double(0x7ff0000000000000LL);
  if (isnan(a) || isnan(b)) return __longlong_as_double(0x7ff8000000000000LL);
  double m = a > b ? a : b, n = a > b ? b : a;
  if (m == 0.0) return 0.0;
  double r = n / m;
  return m * sqrt(1.0 + r * r);
}
__device__ __forceinline__ double gw_abs(c64 v) { return gw_hypot((double)v.re, (double)v.im); }
__device__ __forceinline__ double gw_abs(c128 v) { return gw_hypot(v.re, v.im); }
__device__ __forceinline__ double gw_abs2(float v) { double d = v; return d * d; }
__device__ __forceinline__ double gw_abs2(double v) { return v * v; }
__device__ __forceinline__ double gw_abs2(c64 v) { double r = v.re, i = v.im; return r * r + i * i; }
__device__ __forceinline__ double gw_abs2(c128 v) { return v.re * v.re + v.im * v.im; }
// x . y for reals; conj(x) y for complex (BLAS dotc).
__device__ __forceinline__ double gw_dot(float x, float y) { return (double)x * (double)y; }
__device__ __forceinline__ double gw_dot(double x, double y) { return x * y; }
__device__ __forceinline__ c128 gw_dot(c128 x, c128 y) { return c128{x.re * y.re + x.im * y.im, x.re * y.im - x.im * y.re}; }
__device__ __forceinline__ c128 gw_dot(c64 x, c64 y) { return gw_dot(gw_cplx(x), gw_cplx(y)); }

struct OpAdd { template <class A> __device__ __forceinline__ A operator()(A a, A b) const { return gw_add(a, b); } };
struct OpMaxF { __device__ __forceinline__ double operator()(double a, double b) const { return (isnan(a) || isnan(b)) ? (isnan(a) ? a : b) : (a > b ? a : b); } };
struct OpMinF { __device__ __forceinline__ double operator()(double a, double b) const { return (isnan(a) || isnan(b)) ? (isnan(a) ? a : b) : (a < b ? a : b); } };
struct OpMaxI { template <class A> __device__ __forceinline__ A operator()(A a, A b) const { return a > b ? a : b; } };
struct OpMinI { template <class A> __device__ __forceinline__ A operator()(A a, A b) const { return a < b ? a : b; } };

// Combines the block's values in a fixed tree; every thread of the block must call it.
template <typename A, typename Op>
__device__ __forceinline__ A gw_block_reduce(A v, Op op) {
  __shared__ A sm[GWA_BLOCK];
  sm[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = GWA_BLOCK / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sm[threadIdx.x] = op(sm[threadIdx.x], sm[threadIdx.x + s]);
    __syncthreads();
  }
  return sm[0];
}

template <typename A, typename Op, typename F>
__device__ __forceinline__ void gw_partial(u64 n, A ident, A *partial, Op op, F f) {
  A acc = ident;
  GRID_LOOP { acc = op(acc, f(i)); }
  A r = gw_block_reduce(acc, op);
  if (threadIdx.x == 0) partial[blockIdx.x] = r;
}

template <typename A, typename Op>
__device__ __forceinline__ void gw_final(const A *partial, u32 np, A ident, A *out, Op op) {
  A acc = ident;
  for (u32 i = threadIdx.x; i < np; i += blockDim.x) acc = op(acc, partial[i]);
  A r = gw_block_reduce(acc, op);
  if (threadIdx.x == 0) *out = r;
}
"#;

fn fill_name(size: usize) -> String {
    format!("gwa_fill_{size}")
}
fn axpy_name(d: Dtype) -> String {
    format!("gwa_axpy_{}", d.name())
}
fn scale_name(d: Dtype) -> String {
    format!("gwa_scale_{}", d.name())
}
fn red_name(red: Red, d: Dtype) -> String {
    format!("gwa_{}_{}", red.name(), d.name())
}
fn final_name(acc: Acc, comb: Comb) -> String {
    format!("gwa_final_{}_{}", comb.name(), acc_name(acc))
}

/// The value one element contributes to `red` (a C++ expression of `x[i]`, `y[i]`).
fn map_expr(red: Red, d: Dtype) -> String {
    let int_acc = if is_signed_int(d) { "(i64)x[i]" } else { "(u64)x[i]" };
    match red {
        Red::Dot => "gw_dot(x[i], y[i])".into(),
        Red::Sum if d.is_complex() => "gw_cplx(x[i])".into(),
        Red::Sum if d.is_integer() => "(u64)(i64)x[i]".replace("(i64)", if is_signed_int(d) { "(i64)" } else { "" }),
        Red::Sum => "gw_real(x[i])".into(),
        Red::Norm1 | Red::NormInf => "gw_abs(x[i])".into(),
        Red::Norm2Squared => "gw_abs2(x[i])".into(),
        Red::Min | Red::Max if d.is_integer() => int_acc.into(),
        Red::Min | Red::Max => "gw_real(x[i])".into(),
    }
}

fn op_struct(acc: Acc, comb: Comb) -> &'static str {
    match (acc, comb) {
        (_, Comb::Add) => "OpAdd()",
        (Acc::F(_), Comb::Max) => "OpMaxF()",
        (Acc::F(_), Comb::Min) => "OpMinF()",
        (_, Comb::Max) => "OpMaxI()",
        (_, Comb::Min) => "OpMinI()",
    }
}

/// Every (accumulator, combination) pair some reduction uses.
fn finals() -> Vec<(Acc, Comb)> {
    let mut v: Vec<(Acc, Comb)> = Vec::new();
    for d in Dtype::ALL {
        for red in Red::ALL {
            if let Some((a, c)) = plan(red, d) {
                if !v.iter().any(|(a2, c2)| std::mem::discriminant(a2) == std::mem::discriminant(&a) && *c2 == c) {
                    v.push((a, c));
                }
            }
        }
    }
    v
}

/// The full CUDA C++ source of the distributed-array kernels.
pub fn source() -> String {
    let mut s = String::from(PRELUDE);
    for (size, t) in [(1, "u8"), (2, "u16"), (4, "u32"), (8, "u64"), (16, "e16")] {
        s += &format!("extern \"C\" __global__ void {}({t} *x, u64 n, {t} v) {{ GRID_LOOP {{ x[i] = v; }} }}\n", fill_name(size));
    }
    for d in Dtype::ALL {
        let t = c_type(d);
        if arithmetic(d) {
            s += &format!(
                "extern \"C\" __global__ void {}({t} *y, const {t} *x, u64 n, {t} a) {{ GRID_LOOP {{ y[i] = gw_add(gw_mul(a, x[i]), y[i]); }} }}\n",
                axpy_name(d)
            );
            s += &format!(
                "extern \"C\" __global__ void {}({t} *x, u64 n, {t} a) {{ GRID_LOOP {{ x[i] = gw_mul(a, x[i]); }} }}\n",
                scale_name(d)
            );
        }
        for red in Red::ALL {
            let Some((acc, comb)) = plan(red, d) else { continue };
            let a = acc_type(acc);
            s += &format!(
                "extern \"C\" __global__ void {}(const {t} *x, const {t} *y, u64 n, {a} ident, {a} *partial) {{ (void)y; gw_partial(n, ident, partial, {}, [&](u64 i) {{ return {}; }}); }}\n",
                red_name(red, d),
                op_struct(acc, comb),
                map_expr(red, d)
            );
        }
    }
    for (acc, comb) in finals() {
        let a = acc_type(acc);
        s += &format!(
            "extern \"C\" __global__ void {}(const {a} *partial, u32 np, {a} ident, {a} *out) {{ gw_final(partial, np, ident, out, {}); }}\n",
            final_name(acc, comb),
            op_struct(acc, comb)
        );
    }
    s
}

/// Every kernel name the source defines.
pub fn names() -> Vec<String> {
    let mut v: Vec<String> = [1, 2, 4, 8, 16].iter().map(|s| fill_name(*s)).collect();
    for d in Dtype::ALL {
        if arithmetic(d) {
            v.push(axpy_name(d));
            v.push(scale_name(d));
        }
        for red in Red::ALL {
            if plan(red, d).is_some() {
                v.push(red_name(red, d));
            }
        }
    }
    v.extend(finals().into_iter().map(|(a, c)| final_name(a, c)));
    v
}

fn options(arch: &str) -> Vec<String> {
    vec![format!("--gpu-architecture={arch}"), "--std=c++14".to_string(), "--fmad=false".to_string()]
}

fn nvrtc_compile(arch: &str) -> std::result::Result<Vec<std::ffi::c_char>, String> {
    super::kernels::nvrtc_available()?;
    let src = CString::new(source()).expect("no NUL in kernel source");
    let prog = cudarc::nvrtc::result::create_program(&src, Some(c"gpuwire_array_kernels.cu")).map_err(|e| format!("nvrtcCreateProgram: {e:?}"))?;
    // SAFETY: prog is a valid program; it is destroyed before returning.
    unsafe {
        let r = cudarc::nvrtc::result::compile_program(prog, &options(arch));
        let out = match r {
            Ok(()) => cudarc::nvrtc::result::get_ptx(prog).map_err(|e| format!("nvrtcGetPTX: {e:?}")),
            Err(e) => {
                let log = cudarc::nvrtc::result::get_program_log(prog)
                    .map(|l| String::from_utf8_lossy(&l.iter().map(|c| *c as u8).collect::<Vec<_>>()).into_owned())
                    .unwrap_or_default();
                Err(format!("NVRTC compile failed: {e:?}: {log}"))
            }
        };
        cudarc::nvrtc::result::destroy_program(prog).ok();
        out
    }
}

/// Compiles the source to PTX for `arch` (e.g. "compute_90") without a GPU and returns the PTX
/// text. Used by the tests to check the source on machines without a GPU.
pub fn compile_ptx_for(arch: &str) -> std::result::Result<String, String> {
    nvrtc_compile(arch).map(|p| String::from_utf8_lossy(&p.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect::<Vec<_>>()).into_owned())
}

struct Module {
    functions: HashMap<String, usize>,
}

static MODULES: Mutex<Vec<Option<std::result::Result<Module, String>>>> = Mutex::new(Vec::new());

fn compile(device: i32) -> std::result::Result<Module, String> {
    let dev = cudarc::driver::result::device::get(device).map_err(|e| format!("cuDeviceGet: {e:?}"))?;
    let attr = |a| {
        // SAFETY: dev is valid.
        unsafe { cudarc::driver::result::device::get_attribute(dev, a) }.map_err(|e| format!("cuDeviceGetAttribute: {e:?}"))
    };
    let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let ptx = nvrtc_compile(&format!("compute_{major}{minor}"))?;
    let _g = CtxGuard::enter(device).map_err(|e| e.to_string())?;
    // SAFETY: ptx is a NUL-terminated PTX image.
    let module = unsafe { cudarc::driver::result::module::load_data(ptx.as_ptr().cast()) }.map_err(|e| format!("cuModuleLoadData: {e:?}"))?;
    let mut functions = HashMap::new();
    for n in names() {
        let cn = CString::new(n.clone()).expect("no NUL");
        // SAFETY: module is loaded; the name exists in the source.
        let f = unsafe { cudarc::driver::result::module::get_function(module, cn) }.map_err(|e| format!("cuModuleGetFunction({n}): {e:?}"))?;
        functions.insert(n, f as usize);
    }
    Ok(Module { functions })
}

fn function(device: i32, name: &str) -> Result<sys::CUfunction> {
    let mut mods = MODULES.lock().unwrap_or_else(|p| p.into_inner());
    let idx = usize::try_from(device).map_err(|_| Error::Internal(format!("array kernel on device {device}")))?;
    if mods.len() <= idx {
        mods.resize_with(idx + 1, || None);
    }
    match mods[idx].get_or_insert_with(|| compile(device)) {
        Ok(m) => m.functions.get(name).map(|f| *f as sys::CUfunction).ok_or_else(|| Error::Internal(format!("kernel {name} missing"))),
        Err(e) => Err(Error::BackendUnavailable(format!("the GPU kernels of distributed arrays are unavailable: {e}"))),
    }
}

fn launch(device: i32, name: &str, grid: u32, stream: Stream, params: &mut [*mut c_void]) -> Result<()> {
    let f = function(device, name)?;
    let _g = CtxGuard::enter(device)?;
    // SAFETY: f takes exactly these parameters (generated together with the source above).
    check(
        unsafe { sys::cuLaunchKernel(f, grid, 1, 1, BLOCK, 1, 1, 0, stream.raw(), params.as_mut_ptr(), std::ptr::null_mut()) },
        name,
    )
}

fn elementwise_grid(n: usize) -> u32 {
    n.div_ceil(BLOCK as usize).clamp(1, 65535 * 8) as u32
}

/// A kernel parameter of up to 16 bytes, 16-byte aligned (the driver copies the kernel's
/// declared size from it).
#[repr(C, align(16))]
struct Param([u8; 16]);

impl Param {
    fn from(bytes: &[u8]) -> Param {
        let mut p = [0u8; 16];
        p[..bytes.len()].copy_from_slice(bytes);
        Param(p)
    }
}

/// Enqueues x[i] = value (one element's bytes) for `n` elements on `stream`.
pub fn fill(device: i32, dtype: Dtype, x: usize, n: usize, value: &[u8], stream: Stream) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let (mut p, mut nn, mut v) = (x as u64, n as u64, Param::from(value));
    let mut params = [(&mut p as *mut u64).cast(), (&mut nn as *mut u64).cast(), (&mut v as *mut Param).cast()];
    launch(device, &fill_name(dtype.size()), elementwise_grid(n), stream, &mut params)
}

/// Enqueues y[i] = alpha x[i] + y[i] for `n` elements on `stream` (`alpha`: one element's bytes).
pub fn axpy(device: i32, dtype: Dtype, y: usize, x: usize, n: usize, alpha: &[u8], stream: Stream) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let (mut py, mut px, mut nn, mut a) = (y as u64, x as u64, n as u64, Param::from(alpha));
    let mut params = [(&mut py as *mut u64).cast(), (&mut px as *mut u64).cast(), (&mut nn as *mut u64).cast(), (&mut a as *mut Param).cast()];
    launch(device, &axpy_name(dtype), elementwise_grid(n), stream, &mut params)
}

/// Enqueues x[i] = alpha x[i] for `n` elements on `stream`.
pub fn scale(device: i32, dtype: Dtype, x: usize, n: usize, alpha: &[u8], stream: Stream) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let (mut px, mut nn, mut a) = (x as u64, n as u64, Param::from(alpha));
    let mut params = [(&mut px as *mut u64).cast(), (&mut nn as *mut u64).cast(), (&mut a as *mut Param).cast()];
    launch(device, &scale_name(dtype), elementwise_grid(n), stream, &mut params)
}

fn acc_bytes(a: Acc) -> Vec<u8> {
    match a {
        Acc::F(v) => v.to_ne_bytes().to_vec(),
        Acc::C(re, im) => [re.to_ne_bytes(), im.to_ne_bytes()].concat(),
        Acc::U(v) => v.to_ne_bytes().to_vec(),
        Acc::I(v) => v.to_ne_bytes().to_vec(),
    }
}

fn acc_from(shape: Acc, b: &[u8; 16]) -> Acc {
    let f = |i: usize| f64::from_ne_bytes(b[i..i + 8].try_into().unwrap());
    match shape {
        Acc::F(_) => Acc::F(f(0)),
        Acc::C(..) => Acc::C(f(0), f(8)),
        Acc::U(_) => Acc::U(u64::from_ne_bytes(b[..8].try_into().unwrap())),
        Acc::I(_) => Acc::I(i64::from_ne_bytes(b[..8].try_into().unwrap())),
    }
}

/// Runs `red` over `n` elements at `x` (and `y` for Dot) on `stream`, using `scratch`
/// ([`SCRATCH_BYTES`] of device memory), and returns this rank's accumulator once the stream
/// reached it (blocks the host).
#[allow(clippy::too_many_arguments)]
pub fn reduce(device: i32, red: Red, dtype: Dtype, x: usize, y: usize, n: usize, scratch: usize, stream: Stream) -> Result<Acc> {
    let (ident, comb) = plan(red, dtype).ok_or_else(|| Error::Internal(format!("{} on {} reached the GPU", red.name(), dtype.name())))?;
    if n == 0 {
        return Ok(ident);
    }
    let (mut px, mut py, mut nn, mut id, mut part) = (x as u64, y as u64, n as u64, Param::from(&acc_bytes(ident)), scratch as u64);
    let mut params = [
        (&mut px as *mut u64).cast(),
        (&mut py as *mut u64).cast(),
        (&mut nn as *mut u64).cast(),
        (&mut id as *mut Param).cast(),
        (&mut part as *mut u64).cast(),
    ];
    launch(device, &red_name(red, dtype), GRID, stream, &mut params)?;
    let out = scratch + GRID as usize * 16;
    let (mut pp, mut np, mut id2, mut po) = (scratch as u64, GRID, Param::from(&acc_bytes(ident)), out as u64);
    let mut params = [(&mut pp as *mut u64).cast(), (&mut np as *mut u32).cast(), (&mut id2 as *mut Param).cast(), (&mut po as *mut u64).cast()];
    launch(device, &final_name(ident, comb), 1, stream, &mut params)?;
    let mut host = [0u8; 16];
    let _g = CtxGuard::enter(device)?;
    super::copy_async(host.as_mut_ptr() as usize, out, 16, stream)?;
    super::sync(stream)?;
    Ok(acc_from(ident, &host))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_defines_every_kernel_named() {
        let s = source();
        for n in names() {
            assert!(s.contains(&format!("void {n}(")), "{n} missing from the source");
        }
        // The support matrix the C API documents.
        use Dtype::*;
        for d in [GPUWIRE_FLOAT32, GPUWIRE_FLOAT64, GPUWIRE_COMPLEX64, GPUWIRE_COMPLEX128] {
            assert!(arithmetic(d));
            for r in [Red::Dot, Red::Sum, Red::Norm1, Red::Norm2Squared, Red::NormInf] {
                assert!(plan(r, d).is_some(), "{r:?} {d:?}");
            }
        }
        for d in [GPUWIRE_INT8, GPUWIRE_UINT8, GPUWIRE_INT32, GPUWIRE_UINT32, GPUWIRE_INT64, GPUWIRE_UINT64] {
            assert!(!arithmetic(d));
            assert!(plan(Red::Dot, d).is_none() && plan(Red::Norm2Squared, d).is_none());
            assert!(plan(Red::Sum, d).is_some() && plan(Red::Min, d).is_some() && plan(Red::Max, d).is_some());
        }
        for d in [GPUWIRE_COMPLEX64, GPUWIRE_COMPLEX128] {
            assert!(plan(Red::Min, d).is_none() && plan(Red::Max, d).is_none());
        }
        for d in [GPUWIRE_FLOAT16, GPUWIRE_BFLOAT16] {
            assert!(!arithmetic(d));
            assert!(Red::ALL.iter().all(|r| plan(*r, d).is_none()));
        }
        assert_eq!(map_expr(Red::Sum, GPUWIRE_INT8), "(u64)(i64)x[i]");
        assert_eq!(map_expr(Red::Sum, GPUWIRE_UINT32), "(u64)x[i]");
    }
}
