//! Reductions whose results must not depend on the MPI: every datatype x every operation on host
//! memory, on 2 and 3 ranks, with values that overflow and values that differ between a signed
//! and an unsigned comparison, in vectors long enough for the MPIs' vectorized (AVX) loops.
//! Integer SUM, PROD and AVG wrap (two's complement, as `reduce::combine` and the device
//! kernels); unsigned MIN/MAX compare as unsigned. Open MPI 4.1 saturates 8-bit SUM in its AVX
//! loops; MPICH 4.0 compares MPI_UINT8_T/MPI_UINT32_T/MPI_UINT64_T as signed in MIN/MAX.
//!
//! Also: in-place reduce at a non-zero root of 1000 and more float32 (and other) elements, which
//! crashes MPICH 4.0 (pmodels/mpich#6540), a job of its own so that a crash names it.
//!
//! Every expected value is computed here, with wrapping arithmetic in u128, never by gpuwire.

mod common;

use common::*;
use gpuwire::ffi::ops::*;
use gpuwire::types::{Dtype, ReduceOp};

/// Elements per rank: more than an AVX-512 vector of every type, and not a multiple of one (the
/// MPIs' loops have a vector part and a tail).
const N: usize = 131;

fn main() {
    if !is_child() {
        parent_main(
            "mpi_reduce",
            vec![
                Job::new("every_dtype_op_np2", 2, "ops"),
                Job::new("every_dtype_op_np3", 3, "ops"),
                Job::new("in_place_root_np2", 2, "in_place_root"),
                Job::new("in_place_root_np3", 3, "in_place_root"),
            ],
        );
    }
    let (mode, np) = child_args();
    let ctx = Ctx::init(np);
    match mode.as_str() {
        "ops" => {
            allreduce(&ctx);
            reduce(&ctx);
            reduce_scatter(&ctx);
        }
        "in_place_root" => in_place_root(&ctx),
        m => die(Some(ctx.rank), &format!("unknown mode {m}")),
    }
    ctx.finish();
}

fn st() -> *mut std::ffi::c_void {
    no_stream()
}

fn pairs() -> Vec<(Dtype, ReduceOp)> {
    Dtype::ALL.iter().flat_map(|d| ReduceOp::ALL.iter().map(move |o| (*d, *o))).filter(|(d, o)| supported(*d, *o)).collect()
}

fn mask(d: Dtype) -> u128 {
    (1u128 << int_bits(d)) - 1
}

/// The raw bits (masked to the width) as the datatype's value.
fn as_value(d: Dtype, bits: u128) -> i128 {
    let b = int_bits(d);
    let bits = bits & mask(d);
    if is_signed(d) && (bits >> (b - 1)) & 1 == 1 { bits as i128 - (1i128 << b) } else { bits as i128 }
}

/// A width-filling pattern of byte `byte` (0xF0 -> 0xF0F0...).
fn repeat(d: Dtype, byte: u8) -> u128 {
    (0..d.size()).fold(0u128, |a, _| (a << 8) | byte as u128)
}

/// Rank `r`'s element `i` of integer type `d` (as raw bits): kinds that overflow SUM and PROD
/// (200 on every rank for uint8, 100 for int8, just above half the range for wider types),
/// 0xF0../0x0F.. patterns that order differently signed and unsigned, and pseudo-random values.
fn int_input(d: Dtype, r: usize, i: usize, salt: usize) -> u128 {
    let top = 1u128 << (int_bits(d) - 1);
    let v = match i % 8 {
        0 => match d {
            Dtype::GPUWIRE_UINT8 => 200,
            Dtype::GPUWIRE_INT8 => 100,
            _ => top / 2 + 100 + r as u128,
        },
        1 => repeat(d, 0xF0) ^ r as u128,
        2 => repeat(d, 0x0F) ^ r as u128,
        // Even ranks above the signed range's top, odd ranks below it.
        3 => if r % 2 == 0 { repeat(d, 0xF0) } else { repeat(d, 0x0F) },
        4 => if r % 2 == 0 { repeat(d, 0x0F) } else { repeat(d, 0xF0) },
        5 => top + r as u128, // the most negative signed value, and just above
        6 => top - 1 - r as u128,
        _ => u64::from_ne_bytes(pattern(seed(&[salt, d as usize, r, i]), 8).try_into().unwrap()) as u128,
    };
    v & mask(d)
}

/// The reduction of the ranks' raw values as the device kernels and `reduce::combine` compute
/// it, as the datatype's value.
fn int_reference(d: Dtype, op: ReduceOp, vals: &[u128]) -> i128 {
    let p = vals.len();
    let m = mask(d);
    let sum = vals.iter().fold(0u128, |a, v| a.wrapping_add(*v)) & m;
    match op {
        ReduceOp::GPUWIRE_SUM => as_value(d, sum),
        ReduceOp::GPUWIRE_PROD => as_value(d, vals.iter().fold(1u128, |a, v| a.wrapping_mul(*v) & m)),
        // The wrapped sum, divided in the datatype's signedness, truncated toward zero.
        ReduceOp::GPUWIRE_AVG => as_value(d, sum) / p as i128,
        ReduceOp::GPUWIRE_MAX => vals.iter().map(|v| as_value(d, *v)).max().unwrap(),
        ReduceOp::GPUWIRE_MIN => vals.iter().map(|v| as_value(d, *v)).min().unwrap(),
        ReduceOp::GPUWIRE_BAND => as_value(d, vals.iter().fold(m, |a, v| a & v)),
        ReduceOp::GPUWIRE_BOR => as_value(d, vals.iter().fold(0, |a, v| a | v)),
        ReduceOp::GPUWIRE_BXOR => as_value(d, vals.iter().fold(0, |a, v| a ^ v)),
    }
}

/// Rank `r`'s `n` elements starting at element `first`, as bytes.
fn mine(d: Dtype, op: ReduceOp, r: usize, first: usize, n: usize, p: usize, salt: usize) -> Vec<u8> {
    if d.is_integer() {
        (first..first + n).flat_map(|i| encode(d, V::I(as_value(d, int_input(d, r, i, salt))))).collect()
    } else {
        (first..first + n).flat_map(|i| encode(d, input(d, op, r, i, p, salt))).collect()
    }
}

/// The expected result for elements `first..first + n`.
fn want(d: Dtype, op: ReduceOp, first: usize, n: usize, p: usize, salt: usize) -> Vec<u8> {
    (first..first + n)
        .flat_map(|i| {
            if d.is_integer() {
                let vals: Vec<u128> = (0..p).map(|r| int_input(d, r, i, salt)).collect();
                encode(d, V::I(int_reference(d, op, &vals)))
            } else {
                encode(d, expected_elem(d, op, i, p, salt))
            }
        })
        .collect()
}

fn allreduce(ctx: &Ctx) {
    ctx.section("allreduce, every datatype x op");
    let (r, p) = (ctx.rank, ctx.size);
    for (d, op) in pairs() {
        let salt = 1;
        let what = |v: &str| format!("allreduce {} {} of {N} on {p} ranks ({v})", d.name(), op.name());
        let send = Buf::from_bytes(d, &mine(d, op, r, 0, N, p, salt));
        let recv = Buf::from_bytes(d, &sentinel(N * d.size()));
        ctx.ok(gpuwire_allreduce(ctx.world, send.h, recv.h, op as i32, st()), &what("separate buffers"));
        check_bytes(ctx, d, &recv.read(), &want(d, op, 0, N, p, salt), &what("separate buffers"));
        ctx.ok(gpuwire_allreduce(ctx.world, send.h, send.h, op as i32, st()), &what("in place"));
        check_bytes(ctx, d, &send.read(), &want(d, op, 0, N, p, salt), &what("in place"));
    }
}

fn reduce(ctx: &Ctx) {
    ctx.section("reduce, every datatype x op, roots 0 and last");
    let (r, p) = (ctx.rank, ctx.size);
    for (d, op) in pairs() {
        let salt = 2;
        for root in [0, p - 1] {
            let what = |v: &str| format!("reduce {} {} of {N} on {p} ranks at root {root} ({v})", d.name(), op.name());
            let send = Buf::from_bytes(d, &mine(d, op, r, 0, N, p, salt));
            let recv = Buf::from_bytes(d, &sentinel(N * d.size()));
            ctx.ok(gpuwire_reduce(ctx.world, send.h, recv.h, op as i32, root as i32, st()), &what("separate buffers"));
            if r == root {
                check_bytes(ctx, d, &recv.read(), &want(d, op, 0, N, p, salt), &what("separate buffers"));
            }
            let rh = if r == root { send.h } else { 0 };
            ctx.ok(gpuwire_reduce(ctx.world, send.h, rh, op as i32, root as i32, st()), &what("in place at the root"));
            if r == root {
                check_bytes(ctx, d, &send.read(), &want(d, op, 0, N, p, salt), &what("in place at the root"));
            }
        }
    }
}

fn reduce_scatter(ctx: &Ctx) {
    ctx.section("reduce_scatter, every datatype x op");
    let (r, p) = (ctx.rank, ctx.size);
    for (d, op) in pairs() {
        let salt = 3;
        let what = format!("reduce_scatter {} {} of {N} per rank on {p} ranks", d.name(), op.name());
        let send = Buf::from_bytes(d, &mine(d, op, r, 0, p * N, p, salt));
        let recv = Buf::from_bytes(d, &sentinel(N * d.size()));
        ctx.ok(gpuwire_reduce_scatter(ctx.world, send.h, recv.h, op as i32, st()), &what);
        check_bytes(ctx, d, &recv.read(), &want(d, op, r * N, N, p, salt), &what);
    }
}

/// In-place reduce at every non-zero root, float32 of 1000 and more elements (the sizes that
/// crash MPICH 4.0) and a few other types and sizes.
fn in_place_root(ctx: &Ctx) {
    ctx.section("in-place reduce at non-zero roots");
    let (r, p) = (ctx.rank, ctx.size);
    let cases = [
        (Dtype::GPUWIRE_FLOAT32, 1000),
        (Dtype::GPUWIRE_FLOAT32, 1024),
        (Dtype::GPUWIRE_FLOAT32, 4099),
        (Dtype::GPUWIRE_FLOAT32, 100_000),
        (Dtype::GPUWIRE_FLOAT64, 1000),
        (Dtype::GPUWIRE_INT32, 5000),
        (Dtype::GPUWIRE_UINT8, 70_000),
        (Dtype::GPUWIRE_FLOAT16, 3000),
        (Dtype::GPUWIRE_FLOAT32, 7),
    ];
    for (d, n) in cases {
        for op in [ReduceOp::GPUWIRE_SUM, ReduceOp::GPUWIRE_MAX, ReduceOp::GPUWIRE_AVG] {
            for root in 1..p {
                let salt = 4 + root;
                let what = format!("in-place reduce {} {} of {n} at root {root} on {p} ranks", d.name(), op.name());
                let b = Buf::from_bytes(d, &mine(d, op, r, 0, n, p, salt));
                let rh = if r == root { b.h } else { 0 };
                ctx.ok(gpuwire_reduce(ctx.world, b.h, rh, op as i32, root as i32, st()), &what);
                if r == root {
                    check_bytes(ctx, d, &b.read(), &want(d, op, 0, n, p, salt), &what);
                } else {
                    check_bytes(ctx, d, &b.read(), &mine(d, op, r, 0, n, p, salt), &format!("{what}: a non-root's send buffer unchanged"));
                }
            }
        }
    }
}
