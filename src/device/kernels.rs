//! Elementwise reduction kernels on the GPU, compiled once per process with NVRTC.
//!
//! One CUDA C source defines, for every supported (datatype, op), a kernel
//! `gw_<dtype>_<op>(T *inout, const T *in, u64 n)` computing `inout[i] = in[i] op inout[i]`
//! with exactly the semantics of `crate::reduce::combine` (integers wrap, float16/bfloat16
//! compute in float32 and round to nearest even, complex PROD is the complex product), and
//! `gw_<dtype>_div(T *x, u64 n, i64 d)` for AVG (not for the pair datatypes, which take
//! MINLOC/MAXLOC only: the smaller/larger value, of equal values the lower index). The source is compiled for the device's compute
//! capability the first time a device reduction runs on that device; without NVRTC the
//! backends reduce on the host instead and `gpuwire_comm_describe` says so.
//!
//! The same source holds the pack kernels of strided and subarray views (`crate::view`):
//! `gw_pack_<bytes>(E *packed, E *view, u64 n, u64 l1, u64 l2, u64 l3, u64 s0, u64 s1, u64 s2,
//! u64 s3, u32 unpack)` for element sizes 1, 2, 4, 8, 16 copies the n elements of a view of up to
//! four dimensions (lengths l0 = n / (l1 l2 l3), l1, l2, l3; strides s0..s3 in elements) to or
//! from contiguous memory: one launch per view, one thread per element.
//!
//! And for the IPC collectives (through the peers' mappings), for SUM on the real datatypes
//! ([`fused`]): `gw_<dtype>_sum_all(gw_ptrs a,
//! u32 p, u32 q, u64 n)` reduces element i of the p inputs `a.in[0..p]` in rank order (the
//! accumulator starts as `in[0][i]`, then `acc = in[r][i] op acc`, as `combine` applied rank by
//! rank) and writes the result to the q outputs `a.out[0..q]` (p, q <= [`ALL_MAX`]): one pass
//! over memory, each input read once and each output written once (in place is safe: a thread
//! reads every input of its element before it writes). The loops are unrolled to the eight
//! pointers, so that the pointers stay in the parameter space: indexed at run time they were
//! copied to each thread's local memory (20 `.local` accesses in the PTX), and the kernel ran 4x
//! slower than the rank-by-rank reduction on the H200. `..._sum_all_v` does the same on 16-byte
//! words (vector loads and stores, every pointer 16-byte aligned), the scalar form the tail.

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys;

use super::{CtxGuard, Stream, check};
use crate::error::{Error, Result};
use crate::types::{Dtype, ReduceOp};

const PRELUDE: &str = r#"
typedef signed char i8; typedef unsigned char u8;
typedef int i32; typedef unsigned int u32;
typedef long long i64; typedef unsigned long long u64;
typedef unsigned short f16; typedef unsigned short bf16;
struct c64 { float re, im; };
struct c128 { double re, im; };
struct fi { float v; int i; };
struct di { double v; int i; };
struct ii { int v; int i; };
__device__ __forceinline__ float f16_load(f16 h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ f16 f16_store(float f) { f16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float bf16_load(bf16 b) { return __uint_as_float(((unsigned)b) << 16); }
__device__ __forceinline__ bf16 bf16_store(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (bf16)(u >> 16);
}
template <typename T> __device__ __forceinline__ T gw_max(T y, T x) { return (y > x || x != x) ? y : x; }
template <typename T> __device__ __forceinline__ T gw_min(T y, T x) { return (y < x || x != x) ? y : x; }
template <typename T> __device__ __forceinline__ T gw_imax(T y, T x) { return y > x ? y : x; }
template <typename T> __device__ __forceinline__ T gw_imin(T y, T x) { return y < x ? y : x; }
#define GRID_LOOP for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)blockDim.x * gridDim.x)
"#;

fn c_type(d: Dtype) -> &'static str {
    use Dtype::*;
    match d {
        GPUWIRE_INT8 => "i8",
        GPUWIRE_UINT8 => "u8",
        GPUWIRE_INT32 => "i32",
        GPUWIRE_UINT32 => "u32",
        GPUWIRE_INT64 => "i64",
        GPUWIRE_UINT64 => "u64",
        GPUWIRE_FLOAT16 => "f16",
        GPUWIRE_BFLOAT16 => "bf16",
        GPUWIRE_FLOAT32 => "float",
        GPUWIRE_FLOAT64 => "double",
        GPUWIRE_COMPLEX64 => "c64",
        GPUWIRE_COMPLEX128 => "c128",
        GPUWIRE_FLOAT32_INT32 => "fi",
        GPUWIRE_FLOAT64_INT32 => "di",
        GPUWIRE_INT32_INT32 => "ii",
    }
}

/// Unsigned type of the same width (integer arithmetic wraps there without UB).
fn unsigned_of(d: Dtype) -> &'static str {
    use Dtype::*;
    match d {
        GPUWIRE_INT8 | GPUWIRE_UINT8 => "u8",
        GPUWIRE_INT32 | GPUWIRE_UINT32 => "u32",
        _ => "u64",
    }
}

fn kernel_name(d: Dtype, op: ReduceOp) -> String {
    let op = if op == ReduceOp::GPUWIRE_AVG { ReduceOp::GPUWIRE_SUM } else { op };
    format!("gw_{}_{}", d.name(), op.name().to_ascii_lowercase())
}

fn div_name(d: Dtype) -> String {
    format!("gw_{}_div", d.name())
}

/// Expression for `y op x` on values of `d` (y = in[i], x = inout[i]).
fn combine_expr(d: Dtype, op: ReduceOp) -> Option<String> {
    use ReduceOp::*;
    if op.check_supported(d).is_err() || op == GPUWIRE_AVG {
        return None;
    }
    let t = c_type(d);
    Some(if d.is_integer() {
        let u = unsigned_of(d);
        match op {
            GPUWIRE_SUM => format!("({t})(({u})y + ({u})x)"),
            GPUWIRE_PROD => format!("({t})(({u})y * ({u})x)"),
            GPUWIRE_MAX => "gw_imax(y, x)".into(),
            GPUWIRE_MIN => "gw_imin(y, x)".into(),
            GPUWIRE_BAND => format!("({t})(y & x)"),
            GPUWIRE_BOR => format!("({t})(y | x)"),
            GPUWIRE_BXOR => format!("({t})(y ^ x)"),
            GPUWIRE_LAND => format!("({t})(y != 0 && x != 0)"),
            GPUWIRE_LOR => format!("({t})(y != 0 || x != 0)"),
            GPUWIRE_LXOR => format!("({t})((y != 0) != (x != 0))"),
            GPUWIRE_AVG | GPUWIRE_MINLOC | GPUWIRE_MAXLOC => unreachable!(),
        }
    } else if d.is_pair() {
        match op {
            GPUWIRE_MINLOC => "(y.v < x.v || (y.v == x.v && y.i < x.i)) ? y : x".into(),
            GPUWIRE_MAXLOC => "(y.v > x.v || (y.v == x.v && y.i < x.i)) ? y : x".into(),
            _ => unreachable!(),
        }
    } else if d.is_half() {
        let (ld, st) = if d == Dtype::GPUWIRE_FLOAT16 { ("f16_load", "f16_store") } else { ("bf16_load", "bf16_store") };
        let (a, b) = (format!("{ld}(y)"), format!("{ld}(x)"));
        let e = match op {
            GPUWIRE_SUM => format!("{a} + {b}"),
            GPUWIRE_PROD => format!("{a} * {b}"),
            GPUWIRE_MAX => format!("gw_max({a}, {b})"),
            GPUWIRE_MIN => format!("gw_min({a}, {b})"),
            _ => unreachable!(),
        };
        format!("{st}({e})")
    } else if d.is_complex() {
        match op {
            GPUWIRE_SUM => format!("{t}{{y.re + x.re, y.im + x.im}}"),
            GPUWIRE_PROD => format!("{t}{{y.re * x.re - y.im * x.im, y.re * x.im + y.im * x.re}}"),
            _ => unreachable!(),
        }
    } else {
        match op {
            GPUWIRE_SUM => "y + x".into(),
            GPUWIRE_PROD => "y * x".into(),
            GPUWIRE_MAX => "gw_max(y, x)".into(),
            GPUWIRE_MIN => "gw_min(y, x)".into(),
            _ => unreachable!(),
        }
    })
}

fn div_expr(d: Dtype) -> String {
    use Dtype::*;
    match d {
        GPUWIRE_INT8 | GPUWIRE_INT32 | GPUWIRE_INT64 => format!("({})((i64)v / dd)", c_type(d)),
        GPUWIRE_UINT8 | GPUWIRE_UINT32 | GPUWIRE_UINT64 => format!("({})((u64)v / (u64)dd)", c_type(d)),
        GPUWIRE_FLOAT16 => "f16_store(f16_load(v) / (float)dd)".into(),
        GPUWIRE_BFLOAT16 => "bf16_store(bf16_load(v) / (float)dd)".into(),
        GPUWIRE_FLOAT32 => "v / (float)dd".into(),
        GPUWIRE_FLOAT64 => "v / (double)dd".into(),
        GPUWIRE_COMPLEX64 => "c64{v.re / (float)dd, v.im / (float)dd}".into(),
        GPUWIRE_COMPLEX128 => "c128{v.re / (double)dd, v.im / (double)dd}".into(),
        GPUWIRE_FLOAT32_INT32 | GPUWIRE_FLOAT64_INT32 | GPUWIRE_INT32_INT32 => unreachable!("pairs have no AVG"),
    }
}

/// Most inputs and outputs of one fused reduction (`reduce_all`): its pointers are passed by value.
pub(crate) const ALL_MAX: usize = 8;

const ALL: &str = r#"
struct gw_ptrs { u64 in[8]; u64 out[8]; };
"#;

/// Whether (d, op) has a fused reduction kernel: SUM on the real datatypes (the common large
/// reduction; each kernel adds to the NVRTC compile every process makes: all of them would add
/// about 2 s); the others reduce rank by rank (`combine`).
pub fn fused(d: Dtype, op: ReduceOp) -> bool {
    op == ReduceOp::GPUWIRE_SUM && !d.is_pair() && !d.is_complex() && op.check_supported(d).is_ok()
}

fn all_name(d: Dtype, op: ReduceOp) -> String {
    format!("{}_all", kernel_name(d, op))
}

/// Element sizes of the pack kernels.
const PACK_WIDTHS: [usize; 5] = [1, 2, 4, 8, 16];

const PACK: &str = r#"
struct w16 { u64 a, b; };
template <typename E> __device__ __forceinline__ void gw_pack_t(E *packed, E *view, u64 n, u64 l1, u64 l2, u64 l3, u64 s0, u64 s1, u64 s2, u64 s3, u32 unpack) {
  GRID_LOOP {
    u64 t = i; u64 c3 = t % l3; t /= l3; u64 c2 = t % l2; t /= l2; u64 c1 = t % l1; u64 c0 = t / l1;
    u64 off = c0 * s0 + c1 * s1 + c2 * s2 + c3 * s3;
    if (unpack) view[off] = packed[i]; else packed[i] = view[off];
  }
}
"#;

fn pack_name(width: usize) -> String {
    format!("gw_pack_{width}")
}

fn pack_type(width: usize) -> &'static str {
    match width {
        1 => "u8",
        2 => "unsigned short",
        4 => "u32",
        8 => "u64",
        _ => "w16",
    }
}

/// The full CUDA C source of every kernel.
pub fn source() -> String {
    let mut s = String::from(PRELUDE);
    s += PACK;
    s += ALL;
    for w in PACK_WIDTHS {
        let e = pack_type(w);
        s += &format!(
            "extern \"C\" __global__ void {}({e} *p, {e} *v, u64 n, u64 l1, u64 l2, u64 l3, u64 s0, u64 s1, u64 s2, u64 s3, u32 u) {{ gw_pack_t(p, v, n, l1, l2, l3, s0, s1, s2, s3, u); }}\n",
            pack_name(w)
        );
    }
    for d in Dtype::ALL {
        let t = c_type(d);
        for op in ReduceOp::ALL {
            if let Some(e) = combine_expr(d, op) {
                s += &format!(
                    "extern \"C\" __global__ void {}({t} *io, const {t} *in, u64 n) {{ GRID_LOOP {{ {t} y = in[i]; {t} x = io[i]; io[i] = {e}; }} }}\n",
                    kernel_name(d, op)
                );
                if fused(d, op) {
                    // 16 bytes per thread and pointer: vector loads and stores.
                    let k = 16 / d.size();
                    s += &format!(
                        "struct __align__(16) gw_v_{name} {{ {t} e[{k}]; }};\nextern \"C\" __global__ void {name}_v(gw_ptrs a, u32 p, u32 q, u64 n) {{ GRID_LOOP {{ gw_v_{name} x = ((const gw_v_{name} *)a.in[0])[i];\n#pragma unroll\nfor (u32 r = 1; r < 8; r++) if (r < p) {{ gw_v_{name} w = ((const gw_v_{name} *)a.in[r])[i];\n#pragma unroll\nfor (int j = 0; j < {k}; j++) {{ {t} y = w.e[j]; {t} x1 = x.e[j]; {{ {t} x = x1; x1 = {e}; }} x.e[j] = x1; }} }}\n#pragma unroll\nfor (u32 r = 0; r < 8; r++) if (r < q) ((gw_v_{name} *)a.out[r])[i] = x; }} }}\n",
                        name = all_name(d, op)
                    );
                    s += &format!(
                        "extern \"C\" __global__ void {}(gw_ptrs a, u32 p, u32 q, u64 n) {{ GRID_LOOP {{ {t} x = ((const {t} *)a.in[0])[i];\n#pragma unroll\nfor (u32 r = 1; r < 8; r++) if (r < p) {{ {t} y = ((const {t} *)a.in[r])[i]; x = {e}; }}\n#pragma unroll\nfor (u32 r = 0; r < 8; r++) if (r < q) (({t} *)a.out[r])[i] = x; }} }}\n",
                        all_name(d, op)
                    );
                }
            }
        }
        if !d.is_pair() {
            s += &format!(
                "extern \"C\" __global__ void {}({t} *io, u64 n, i64 dd) {{ GRID_LOOP {{ {t} v = io[i]; io[i] = {}; }} }}\n",
                div_name(d),
                div_expr(d)
            );
        }
    }
    s
}

struct Module {
    functions: HashMap<String, usize>,
}

static NVRTC: OnceLock<std::result::Result<(), String>> = OnceLock::new();
static MODULES: Mutex<Vec<Option<std::result::Result<Module, String>>>> = Mutex::new(Vec::new());

/// Whether NVRTC can be loaded (device reductions run on the GPU), or why not.
pub fn nvrtc_available() -> std::result::Result<(), String> {
    NVRTC
        .get_or_init(|| {
            // SAFETY: only tries to open the library.
            if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
                Ok(())
            } else {
                Err("NVRTC (libnvrtc.so) could not be loaded".into())
            }
        })
        .clone()
}

fn compile(device: i32) -> std::result::Result<Module, String> {
    nvrtc_available()?;
    let dev = cudarc::driver::result::device::get(device).map_err(|e| format!("cuDeviceGet: {e:?}"))?;
    let attr = |a| {
        // SAFETY: dev is valid.
        unsafe { cudarc::driver::result::device::get_attribute(dev, a) }.map_err(|e| format!("cuDeviceGetAttribute: {e:?}"))
    };
    let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let src = CString::new(source()).expect("no NUL in kernel source");
    let prog = cudarc::nvrtc::result::create_program(&src, Some(c"gpuwire_kernels.cu")).map_err(|e| format!("nvrtcCreateProgram: {e:?}"))?;
    let opts = [format!("--gpu-architecture=compute_{major}{minor}"), "--std=c++14".to_string()];
    // SAFETY: prog is a valid program.
    let compiled = unsafe { cudarc::nvrtc::result::compile_program(prog, &opts) };
    if let Err(e) = compiled {
        // SAFETY: as above.
        let log = unsafe { cudarc::nvrtc::result::get_program_log(prog) }
            .map(|l| String::from_utf8_lossy(&l.iter().map(|c| *c as u8).collect::<Vec<_>>()).into_owned())
            .unwrap_or_default();
        unsafe { cudarc::nvrtc::result::destroy_program(prog).ok() };
        return Err(format!("NVRTC compile failed: {e:?}: {log}"));
    }
    // SAFETY: compiled successfully.
    let ptx = unsafe { cudarc::nvrtc::result::get_ptx(prog) }.map_err(|e| format!("nvrtcGetPTX: {e:?}"))?;
    unsafe { cudarc::nvrtc::result::destroy_program(prog).ok() };
    let _g = CtxGuard::enter(device).map_err(|e| e.to_string())?;
    // SAFETY: ptx is a NUL-terminated PTX image.
    let module = unsafe { cudarc::driver::result::module::load_data(ptx.as_ptr().cast()) }.map_err(|e| format!("cuModuleLoadData: {e:?}"))?;
    let mut functions = HashMap::new();
    for d in Dtype::ALL {
        let mut names: Vec<String> = ReduceOp::ALL.iter().filter(|op| combine_expr(d, **op).is_some()).map(|op| kernel_name(d, *op)).collect();
        names.extend(ReduceOp::ALL.iter().filter(|op| fused(d, **op)).flat_map(|op| [all_name(d, *op), format!("{}_v", all_name(d, *op))]));
        if !d.is_pair() {
            names.push(div_name(d));
        }
        if d == Dtype::GPUWIRE_UINT8 {
            names.extend(PACK_WIDTHS.iter().map(|w| pack_name(*w)));
        }
        for n in names {
            let cn = CString::new(n.clone()).expect("no NUL");
            // SAFETY: module is loaded; the name exists in the source.
            let f = unsafe { cudarc::driver::result::module::get_function(module, cn) }.map_err(|e| format!("cuModuleGetFunction({n}): {e:?}"))?;
            functions.insert(n, f as usize);
        }
    }
    Ok(Module { functions })
}

fn function(device: i32, name: &str) -> Result<sys::CUfunction> {
    let mut mods = MODULES.lock().unwrap_or_else(|p| p.into_inner());
    let idx = device as usize;
    if mods.len() <= idx {
        mods.resize_with(idx + 1, || None);
    }
    let m = mods[idx].get_or_insert_with(|| compile(device));
    match m {
        Ok(m) => m.functions.get(name).map(|f| *f as sys::CUfunction).ok_or_else(|| Error::Internal(format!("kernel {name} missing"))),
        Err(e) => Err(Error::BackendUnavailable(format!("GPU reduction kernels unavailable: {e}"))),
    }
}

/// Whether device reductions can run on `device` (compiles the kernels on first use).
pub fn available(device: i32) -> std::result::Result<(), String> {
    function(device, &div_name(Dtype::GPUWIRE_FLOAT32)).map(|_| ()).map_err(|e| e.to_string())
}

fn launch(device: i32, name: &str, n: usize, stream: Stream, params: &mut [*mut c_void]) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let f = function(device, name)?;
    let _g = CtxGuard::enter(device)?;
    let block = 256u32;
    let grid = n.div_ceil(block as usize).min(65535 * 8) as u32;
    // SAFETY: f takes exactly these parameters; the pointers are device memory of n elements.
    check(
        unsafe { sys::cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, stream.raw(), params.as_mut_ptr(), std::ptr::null_mut()) },
        name,
    )
}

/// Enqueues `inout[i] = input[i] op inout[i]` for `n` elements on `stream` (AVG: the SUM step).
pub fn combine(device: i32, dtype: Dtype, op: ReduceOp, inout: usize, input: usize, n: usize, stream: Stream) -> Result<()> {
    op.check_supported(dtype)?;
    let (mut io, mut inp, mut nn) = (inout as u64, input as u64, n as u64);
    let mut params = [(&mut io as *mut u64).cast(), (&mut inp as *mut u64).cast(), (&mut nn as *mut u64).cast()];
    launch(device, &kernel_name(dtype, op), n, stream, &mut params)
}

/// The pointers of a fused reduction, as the kernels' `gw_ptrs`.
#[repr(C)]
struct Ptrs {
    ins: [u64; ALL_MAX],
    outs: [u64; ALL_MAX],
}

/// Enqueues on `stream` one kernel computing, for each of `n` elements, the reduction of the
/// inputs `ins` in their order (as [`combine`] applied input by input: `acc = ins[r] op acc`)
/// and writing it to every one of `outs` (module comment). At most [`ALL_MAX`] of each, one
/// input at least; only where [`fused`] (AVG: SUM, then [`divide`]).
pub fn reduce_all(device: i32, dtype: Dtype, op: ReduceOp, ins: &[usize], outs: &[usize], n: usize, stream: Stream) -> Result<()> {
    op.check_supported(dtype)?;
    if ins.is_empty() || ins.len() > ALL_MAX || outs.len() > ALL_MAX || !fused(dtype, op) {
        return Err(Error::Internal(format!("reduce_all of {} inputs and {} outputs with {}", ins.len(), outs.len(), op.name())));
    }
    // Whole 16-byte words by the vector form where every pointer is 16-byte aligned, the rest
    // (fewer than 16 bytes' worth of elements) by the scalar form.
    let k = 16 / dtype.size();
    let aligned = ins.iter().chain(outs).all(|p| p % 16 == 0);
    let words = if aligned { n / k } else { 0 };
    let run = |name: &str, skip: usize, n: usize| -> Result<()> {
        let mut a = Ptrs { ins: [0; ALL_MAX], outs: [0; ALL_MAX] };
        for (j, p) in ins.iter().enumerate() {
            a.ins[j] = (*p + skip) as u64;
        }
        for (j, p) in outs.iter().enumerate() {
            a.outs[j] = (*p + skip) as u64;
        }
        let (mut p, mut q, mut nn) = (ins.len() as u32, outs.len() as u32, n as u64);
        let mut params = [(&mut a as *mut Ptrs).cast(), (&mut p as *mut u32).cast(), (&mut q as *mut u32).cast(), (&mut nn as *mut u64).cast()];
        launch(device, name, n, stream, &mut params)
    };
    let name = all_name(dtype, op);
    if words > 0 {
        run(&format!("{name}_v"), 0, words)?;
    }
    run(&name, words * 16, n - words * k)
}

/// Enqueues `x[i] /= d` for `n` elements on `stream` (the second step of AVG).
pub fn divide(device: i32, dtype: Dtype, x: usize, n: usize, d: i64, stream: Stream) -> Result<()> {
    if d == 1 {
        return Ok(());
    }
    let (mut io, mut nn, mut dd) = (x as u64, n as u64, d);
    let mut params = [(&mut io as *mut u64).cast(), (&mut nn as *mut u64).cast(), (&mut dd as *mut i64).cast()];
    launch(device, &div_name(dtype), n, stream, &mut params)
}

/// Enqueues on `stream` one kernel that copies the elements of the device view `view` (a
/// strided or subarray view, or contiguous) to contiguous device memory at `packed`, or back
/// (`unpack`).
pub fn pack(view: PackView, packed: usize, unpack: bool, stream: Stream) -> Result<()> {
    let n = view.count;
    let dims: Vec<(usize, usize)> = match view.dims {
        Some(d) => d.to_vec(),
        None => vec![(n, 1)],
    };
    if dims.len() > 4 {
        return Err(Error::Internal(format!("a view of {} dimensions", dims.len())));
    }
    let mut d4 = vec![(1usize, 0usize); 4 - dims.len()];
    d4.extend(dims);
    let (mut p, mut v, mut nn) = (packed as u64, view.ptr as u64, n as u64);
    let (mut l1, mut l2, mut l3) = (d4[1].0 as u64, d4[2].0 as u64, d4[3].0 as u64);
    let (mut s0, mut s1, mut s2, mut s3) = (d4[0].1 as u64, d4[1].1 as u64, d4[2].1 as u64, d4[3].1 as u64);
    let mut u = unpack as u32;
    let mut params: [*mut c_void; 11] = [
        (&mut p as *mut u64).cast(),
        (&mut v as *mut u64).cast(),
        (&mut nn as *mut u64).cast(),
        (&mut l1 as *mut u64).cast(),
        (&mut l2 as *mut u64).cast(),
        (&mut l3 as *mut u64).cast(),
        (&mut s0 as *mut u64).cast(),
        (&mut s1 as *mut u64).cast(),
        (&mut s2 as *mut u64).cast(),
        (&mut s3 as *mut u64).cast(),
        (&mut u as *mut u32).cast(),
    ];
    launch(view.device, &pack_name(view.elem), n, stream, &mut params)
}

/// What [`pack`] needs of a view (a buffer's fields, so that this module knows no buffer):
/// `count` elements of `elem` bytes at `ptr` on `device`, laid out as `dims` ((length, stride
/// in elements) per dimension, the slowest first; `None`: contiguous).
#[derive(Clone, Copy)]
pub struct PackView<'a> {
    pub ptr: usize,
    pub count: usize,
    pub elem: usize,
    pub device: i32,
    pub dims: Option<&'a [(usize, usize)]>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_has_the_pack_kernels() {
        let s = source();
        for w in PACK_WIDTHS {
            assert!(s.contains(&format!("void {}(", pack_name(w))), "{w}");
        }
    }

    #[test]
    fn source_has_every_supported_kernel() {
        let s = source();
        let mut n = 0;
        for d in Dtype::ALL {
            for op in ReduceOp::ALL {
                let present = s.contains(&format!("void {}(", kernel_name(d, op)));
                assert_eq!(present, op.check_supported(d).is_ok(), "{} {}", d.name(), op.name());
                n += present as usize;
            }
            assert_eq!(s.contains(&format!("void {}(", div_name(d))), !d.is_pair());
            for op in ReduceOp::ALL.into_iter().filter(|op| *op != ReduceOp::GPUWIRE_AVG) {
                assert_eq!(s.contains(&format!("void {}(", all_name(d, op))), fused(d, op), "{} {} fused", d.name(), op.name());
            }
        }
        assert!(n > 40);
    }
}

/// Compiles the kernel source to PTX for `arch` (e.g. "compute_90") without a GPU: NVRTC needs
/// none. Used by the tests to check the source on machines without a GPU.
pub fn compile_ptx_for(arch: &str) -> std::result::Result<usize, String> {
    ptx_for(arch).map(|p| p.len())
}

/// The names of the IPC collectives' fused reduction kernels.
pub fn ipc_kernel_names() -> Vec<String> {
    let mut v = Vec::new();
    for d in Dtype::ALL {
        v.extend(ReduceOp::ALL.iter().filter(|op| fused(d, **op)).flat_map(|op| [all_name(d, *op), format!("{}_v", all_name(d, *op))]));
    }
    v
}

/// The names of the pack kernels of strided and subarray views.
pub fn pack_kernel_names() -> Vec<String> {
    PACK_WIDTHS.iter().map(|w| pack_name(*w)).collect()
}

/// The PTX text of the kernel source for `arch`, compiled without a GPU.
pub fn ptx_for(arch: &str) -> std::result::Result<String, String> {
    nvrtc_available()?;
    let src = CString::new(source()).expect("no NUL in kernel source");
    let prog = cudarc::nvrtc::result::create_program(&src, Some(c"gpuwire_kernels.cu")).map_err(|e| format!("{e:?}"))?;
    let opts = [format!("--gpu-architecture={arch}"), "--std=c++14".to_string()];
    // SAFETY: prog is valid.
    let r = unsafe { cudarc::nvrtc::result::compile_program(prog, &opts) };
    let log = unsafe { cudarc::nvrtc::result::get_program_log(prog) }
        .map(|l| String::from_utf8_lossy(&l.iter().map(|c| *c as u8).collect::<Vec<_>>()).into_owned())
        .unwrap_or_default();
    let out = match r {
        Ok(()) => unsafe { cudarc::nvrtc::result::get_ptx(prog) }
            .map(|p| String::from_utf8_lossy(&p.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect::<Vec<_>>()).into_owned())
            .map_err(|e| format!("{e:?}")),
        Err(e) => Err(format!("{e:?}: {log}")),
    };
    unsafe { cudarc::nvrtc::result::destroy_program(prog).ok() };
    out
}
