//! Reductions whose results must not depend on the MPI: every datatype x every operation on host
//! memory, on 2 and 3 ranks, with values that overflow and values that differ between a signed
//! and an unsigned comparison, in vectors long enough for the MPIs' vectorized (AVX) loops.
//! Integer SUM, PROD and AVG wrap (two's complement, as `reduce::combine` and the device
//! kernels); unsigned MIN/MAX compare as unsigned. Open MPI 4.1 saturates 8-bit SUM in its AVX
//! loops; MPICH 4.0 compares MPI_UINT8_T/MPI_UINT32_T/MPI_UINT64_T as signed in MIN/MAX.
//!
//! Scan and exscan: every datatype x op against a serial loop over the ranks' inputs (AVG
//! divides by the number of ranks combined), in place too; exscan leaves rank 0's buffer
//! untouched; the nonblocking and grouped forms. On 1 to 4 ranks.
//!
//! Also: in-place reduce at a non-zero root of 1000 and more float32 (and other) elements, which
//! crashes MPICH 4.0 (pmodels/mpich#6540), a job of its own so that a crash names it.
//!
//! The two-phase allreduce of MPI_STAGED's large calls (`gpuwire::backend::split`: blocks
//! exchanged without reduction, each rank reducing its own, then an allgather), called directly
//! on host memory of a plain communicator (MPI_STAGED itself needs CUDA): every datatype x op, one
//! element fewer than ranks up to several segments, in place and not, on 2 to 4 ranks.
//!
//! Every expected value is computed here, with wrapping arithmetic in u128, never by gpuwire.

mod common;

use common::*;
use gpuwire::Status;
use gpuwire::ffi::GPUWIRE_REQUEST_NULL;
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
                Job::new("scan_np1", 1, "scan"),
                Job::new("scan_np4", 4, "scan"),
                Job::new("in_place_root_np2", 2, "in_place_root"),
                Job::new("in_place_root_np3", 3, "in_place_root"),
                Job::new("split_np2", 2, "split"),
                Job::new("split_np3", 3, "split"),
                Job::new("split_np4", 4, "split"),
                Job::new("noted_np2", 2, "noted"),
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
            scan(&ctx);
            scan_forms(&ctx);
        }
        "scan" => {
            scan(&ctx);
            scan_forms(&ctx);
        }
        "in_place_root" => in_place_root(&ctx),
        "split" => split(&ctx),
        "noted" => noted(&ctx),
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
        // One rank's value is passed through as it is (as MPI: no operation is applied).
        _ if p == 1 => as_value(d, vals[0]),
        ReduceOp::GPUWIRE_LAND => vals.iter().all(|v| v & m != 0) as i128,
        ReduceOp::GPUWIRE_LOR => vals.iter().any(|v| v & m != 0) as i128,
        ReduceOp::GPUWIRE_LXOR => (vals.iter().filter(|v| **v & m != 0).count() % 2) as i128,
        ReduceOp::GPUWIRE_MINLOC | ReduceOp::GPUWIRE_MAXLOC => unreachable!("no MINLOC/MAXLOC on integers"),
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

/// What the lean allreduce notes of its handles (`lean::allreduce`: the tests of its arguments
/// passed for these handles and op, taken again at the thread's next allreduce with the same
/// ones): repeated calls reduce right, and a call that names another handle in any place, or
/// another op, is tested again, also after another call named those handles in between.
fn noted(ctx: &Ctx) {
    ctx.section("allreduce: the same handles again, then another handle in each place");
    let (r, p) = (ctx.rank, ctx.size);
    let f = Dtype::GPUWIRE_FLOAT32;
    let floats = |v: Vec<f32>| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let read = |b: &Buf| -> Vec<f32> { b.read().chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect() };
    // Rank r holds r + i at i: the sum over the ranks is p (p - 1) / 2 + p i, the maximum p - 1 + i.
    let a = Buf::from_bytes(f, &floats((0..8).map(|i| (r + i) as f32).collect()));
    let sum: Vec<f32> = (0..8).map(|i| (p * (p - 1) / 2 + p * i) as f32).collect();
    let max: Vec<f32> = (0..8).map(|i| (p - 1 + i) as f32).collect();
    let b = Buf::new(f, 8);
    let other = Buf::new(f, 8);
    let short = Buf::new(f, 7);
    let ints = Buf::new(Dtype::GPUWIRE_INT32, 8);
    let sum_op = ReduceOp::GPUWIRE_SUM as i32;
    for k in 0..3 {
        ctx.ok(gpuwire_allreduce(ctx.world, a.h, b.h, sum_op, st()), &format!("allreduce SUM, call {k}"));
        ctx.check(read(&b) == sum, || format!("allreduce SUM, call {k}: {:?}, expected {sum:?}", read(&b)));
    }
    ctx.ok(gpuwire_allreduce(ctx.world, a.h, b.h, ReduceOp::GPUWIRE_MAX as i32, st()), "allreduce MAX, the same handles");
    ctx.check(read(&b) == max, || format!("allreduce MAX: {:?}, expected {max:?}", read(&b)));
    ctx.error(gpuwire_allreduce(ctx.world, a.h, short.h, sum_op, st()), Status::GPUWIRE_ERROR_COUNT_MISMATCH, &["8", "7"], "a receive buffer of 7 after one of 8");
    ctx.ok(gpuwire_allreduce(ctx.world, a.h, b.h, sum_op, st()), "allreduce SUM after the refused call");
    ctx.error(gpuwire_allreduce(ctx.world, a.h, ints.h, sum_op, st()), Status::GPUWIRE_ERROR_DTYPE_MISMATCH, &["int32"], "an int32 receive buffer after a float32 one");
    ctx.ok(gpuwire_allreduce(ctx.world, a.h, b.h, sum_op, st()), "allreduce SUM again");
    ctx.error(gpuwire_allreduce(ctx.world, a.h, b.h, ReduceOp::GPUWIRE_BAND as i32, st()), Status::GPUWIRE_ERROR_UNSUPPORTED_OP, &["float32"], "BAND on float32 after SUM with the same handles");
    ctx.ok(gpuwire_allreduce(ctx.world, other.h, b.h, sum_op, st()), "another send buffer (zeros)");
    ctx.check(read(&b) == vec![0.0; 8], || format!("allreduce of zeros: {:?}", read(&b)));
    // A sendrecv naming (a, short) in between: the allreduce with those handles is tested.
    ctx.ok(gpuwire_allreduce(ctx.world, a.h, b.h, sum_op, st()), "allreduce SUM before the sendrecv");
    ctx.error(gpuwire_sendrecv(ctx.world, a.h, r as i32, 3, short.h, r as i32, 3, st()), Status::GPUWIRE_ERROR_COUNT_MISMATCH, &["7"], "sendrecv of 8 into 7");
    ctx.error(gpuwire_allreduce(ctx.world, a.h, short.h, sum_op, st()), Status::GPUWIRE_ERROR_COUNT_MISMATCH, &["8", "7"], "allreduce with the sendrecv's handles");
    // In place after separate buffers, with one of the same handles.
    ctx.ok(gpuwire_allreduce(ctx.world, a.h, b.h, sum_op, st()), "allreduce SUM into b");
    ctx.ok(gpuwire_allreduce(ctx.world, b.h, b.h, sum_op, st()), "allreduce SUM in place");
    let twice: Vec<f32> = sum.iter().map(|x| x * p as f32).collect();
    ctx.check(read(&b) == twice, || format!("in place: {:?}, expected {twice:?}", read(&b)));
    // A freed handle is refused, and a new buffer of another count (a new handle) tested.
    ctx.ok(b.free(), "free b");
    ctx.error(gpuwire_allreduce(ctx.world, a.h, b.h, sum_op, st()), Status::GPUWIRE_ERROR_INVALID_HANDLE, &["freed"], "allreduce into a freed buffer");
    let nine = Buf::new(f, 9);
    ctx.error(gpuwire_allreduce(ctx.world, a.h, nine.h, sum_op, st()), Status::GPUWIRE_ERROR_COUNT_MISMATCH, &["8", "9"], "a new receive buffer of 9");
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

/// Rank `r`'s element `i` for a scan: as the reductions' inputs, but the same on every rank for
/// a non-integer AVG (whose inputs are made exact for the average over all ranks, not over a
/// prefix of them).
fn scan_input(d: Dtype, op: ReduceOp, r: usize, i: usize, p: usize, salt: usize) -> Vec<u8> {
    if d.is_integer() && !op.is_logical() {
        encode(d, V::I(as_value(d, int_input(d, r, i, salt))))
    } else if op == ReduceOp::GPUWIRE_AVG {
        encode(d, input(d, ReduceOp::GPUWIRE_SUM, 0, i, p, salt))
    } else {
        encode(d, input(d, op, r, i, p, salt))
    }
}

/// The scan's (or exscan's, `exclusive`) result on rank `r`, by a serial loop over ranks
/// 0..=r (0..r): `int_reference` and `reference` reduce the prefix (AVG divides by its length).
fn scan_want(d: Dtype, op: ReduceOp, r: usize, n: usize, p: usize, salt: usize, exclusive: bool) -> Vec<u8> {
    let upto = if exclusive { r } else { r + 1 };
    (0..n)
        .flat_map(|i| {
            if d.is_integer() && !op.is_logical() {
                let vals: Vec<u128> = (0..upto).map(|q| int_input(d, q, i, salt)).collect();
                encode(d, V::I(int_reference(d, op, &vals)))
            } else {
                let vals: Vec<V> = (0..upto).map(|q| decode(d, &scan_input(d, op, q, i, p, salt))).collect();
                encode(d, reference(op, &vals))
            }
        })
        .collect()
}

fn scan(ctx: &Ctx) {
    ctx.section("scan and exscan, every datatype x op");
    let (r, p) = (ctx.rank, ctx.size);
    const M: usize = 67;
    for (d, op) in pairs() {
        for exclusive in [false, true] {
            let salt = 5 + exclusive as usize;
            let name = if exclusive { "exscan" } else { "scan" };
            let f = if exclusive { gpuwire_exscan } else { gpuwire_scan };
            let what = |v: &str| format!("{name} {} {} of {M} on {p} ranks, rank {r} ({v})", d.name(), op.name());
            let mine: Vec<u8> = (0..M).flat_map(|i| scan_input(d, op, r, i, p, salt)).collect();
            let send = Buf::from_bytes(d, &mine);
            let recv = Buf::from_bytes(d, &sentinel(M * d.size()));
            ctx.ok(f(ctx.world, send.h, recv.h, op as i32, st()), &what("separate buffers"));
            let want = if exclusive && r == 0 { sentinel(M * d.size()) } else { scan_want(d, op, r, M, p, salt, exclusive) };
            check_bytes(ctx, d, &recv.read(), &want, &what("separate buffers; exscan's rank 0 untouched"));
            check_bytes(ctx, d, &send.read(), &mine, &what("send buffer unchanged"));
            ctx.ok(f(ctx.world, send.h, send.h, op as i32, st()), &what("in place"));
            let want = if exclusive && r == 0 { mine.clone() } else { scan_want(d, op, r, M, p, salt, exclusive) };
            check_bytes(ctx, d, &send.read(), &want, &what("in place; exscan's rank 0 untouched"));
        }
    }
}

/// The nonblocking forms, alone and in one group with an allreduce; then a refused scan.
fn scan_forms(ctx: &Ctx) {
    ctx.section("iscan, iexscan, grouped; LAND on float32 refused");
    let (r, p) = (ctx.rank, ctx.size);
    const M: usize = 9;
    let cases = [(Dtype::GPUWIRE_INT64, ReduceOp::GPUWIRE_SUM), (Dtype::GPUWIRE_FLOAT64_INT32, ReduceOp::GPUWIRE_MINLOC), (Dtype::GPUWIRE_UINT8, ReduceOp::GPUWIRE_LOR)];
    for (d, op) in cases {
        let what = |v: &str| format!("{v} {} {} on {p} ranks, rank {r}", d.name(), op.name());
        let mine: Vec<u8> = (0..M).flat_map(|i| scan_input(d, op, r, i, p, 11)).collect();
        let (s, a, b) = (Buf::from_bytes(d, &mine), Buf::from_bytes(d, &sentinel(M * d.size())), Buf::from_bytes(d, &sentinel(M * d.size())));
        let mut q = [GPUWIRE_REQUEST_NULL; 2];
        ctx.ok(gpuwire_iscan(ctx.world, s.h, a.h, op as i32, st(), &mut q[0]), &what("iscan"));
        ctx.ok(gpuwire_iexscan(ctx.world, s.h, b.h, op as i32, st(), &mut q[1]), &what("iexscan"));
        ctx.ok(gpuwire_wait(&mut q[0]), &what("wait iscan"));
        ctx.ok(gpuwire_wait(&mut q[1]), &what("wait iexscan"));
        check_bytes(ctx, d, &a.read(), &scan_want(d, op, r, M, p, 11, false), &what("iscan"));
        let ex = if r == 0 { sentinel(M * d.size()) } else { scan_want(d, op, r, M, p, 11, true) };
        check_bytes(ctx, d, &b.read(), &ex, &what("iexscan"));
        // Grouped: an iexscan in place, an iscan and an allreduce, started at the group's end.
        let (c, e) = (Buf::from_bytes(d, &mine), Buf::from_bytes(d, &sentinel(M * d.size())));
        let tot = Buf::from_bytes(d, &sentinel(M * d.size()));
        let mut q = [GPUWIRE_REQUEST_NULL; 3];
        ctx.ok(gpuwire_group_start(), "group_start");
        ctx.ok(gpuwire_iexscan(ctx.world, c.h, c.h, op as i32, st(), &mut q[0]), &what("grouped iexscan in place"));
        ctx.ok(gpuwire_iscan(ctx.world, s.h, e.h, op as i32, st(), &mut q[1]), &what("grouped iscan"));
        ctx.ok(gpuwire_iallreduce(ctx.world, s.h, tot.h, op as i32, st(), &mut q[2]), &what("grouped iallreduce"));
        ctx.ok(gpuwire_group_end(), "group_end");
        ctx.ok(gpuwire_waitall(3, q.as_mut_ptr()), &what("waitall of the group"));
        let ex = if r == 0 { mine.clone() } else { scan_want(d, op, r, M, p, 11, true) };
        check_bytes(ctx, d, &c.read(), &ex, &what("grouped iexscan in place"));
        check_bytes(ctx, d, &e.read(), &scan_want(d, op, r, M, p, 11, false), &what("grouped iscan"));
        check_bytes(ctx, d, &tot.read(), &scan_want(d, op, p - 1, M, p, 11, false), &what("grouped iallreduce (the last rank's scan)"));
    }
    // LAND on float32: refused on every rank, nothing written.
    let d = Dtype::GPUWIRE_FLOAT32;
    let s = Buf::from_bytes(d, &encode_all(d, &[V::F(1.0); 4]));
    let recv = Buf::from_bytes(d, &sentinel(16));
    let code = gpuwire::Status::GPUWIRE_ERROR_UNSUPPORTED_OP;
    for (name, f) in [("scan", gpuwire_scan as extern "C" fn(_, _, _, _, _) -> _), ("exscan", gpuwire_exscan)] {
        ctx.error(f(ctx.world, s.h, recv.h, ReduceOp::GPUWIRE_LAND as i32, st()), code, &["LAND", "float32"], &format!("{name} LAND on float32"));
        let mut q = GPUWIRE_REQUEST_NULL;
        let nb = if name == "scan" { gpuwire_iscan } else { gpuwire_iexscan };
        ctx.error(nb(ctx.world, s.h, recv.h, ReduceOp::GPUWIRE_LAND as i32, st(), &mut q), code, &["LAND", "float32"], &format!("i{name} LAND on float32"));
        ctx.check_eq(q, GPUWIRE_REQUEST_NULL, &format!("i{name} refused: no request"));
    }
    check_bytes(ctx, d, &recv.read(), &sentinel(16), "refused scans wrote nothing");
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

/// `gpuwire::backend::split::allreduce_host` (what an MPI_STAGED communicator makes of an
/// allreduce of 2 MiB and more on host memory, and its device ranks' host sides) against values
/// computed here. Sizes: fewer elements than ranks (empty blocks), one segment, and float32/int32
/// over several segments with a tail (segments of 4 MiB).
fn split(ctx: &Ctx) {
    use gpuwire::backend::host::Src;
    use gpuwire::backend::split;
    ctx.section("two-phase allreduce (MPI_STAGED's large allreduce), every datatype x op");
    let (r, p) = (ctx.rank, ctx.size);
    let comm = gpuwire::comm::COMMS.get(ctx.world).unwrap_or_else(|e| die(Some(r), &format!("the world communicator: {e}")));
    let run = |d: Dtype, op: ReduceOp, n: usize, salt: usize| {
        let what = |v: &str| format!("two-phase allreduce {} {} of {n} on {p} ranks ({v})", d.name(), op.name());
        let bytes = n * d.size();
        let expect = want(d, op, 0, n, p, salt);
        let input = mine(d, op, r, 0, n, p, salt);
        // 8-byte aligned buffers, as gpuwire's host buffers of every datatype may be.
        let aligned = |b: &[u8]| {
            let mut v = vec![0u64; bytes.div_ceil(8).max(1)];
            // SAFETY: v holds at least b.len() bytes.
            unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), v.as_mut_ptr().cast::<u8>(), b.len()) };
            v
        };
        let read = |v: &Vec<u64>| -> Vec<u8> {
            // SAFETY: v holds at least `bytes` bytes.
            unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), bytes) }.to_vec()
        };
        let send = aligned(&input);
        let mut recv = aligned(&sentinel(bytes));
        let rc = split::allreduce_host(&comm, Src::Ptr(send.as_ptr() as usize), recv.as_mut_ptr() as usize, n, d, op);
        ctx.check(rc.is_ok(), || format!("{}: {rc:?}", what("separate buffers")));
        check_bytes(ctx, d, &read(&recv), &expect, &what("separate buffers"));
        ctx.check(read(&send) == input, || what("the send buffer changed"));
        let mut inplace = aligned(&input);
        let rc = split::allreduce_host(&comm, Src::InPlace, inplace.as_mut_ptr() as usize, n, d, op);
        ctx.check(rc.is_ok(), || format!("{}: {rc:?}", what("in place")));
        check_bytes(ctx, d, &read(&inplace), &expect, &what("in place"));
    };
    for (d, op) in pairs() {
        run(d, op, p - 1, 3);
        run(d, op, N, 5);
    }
    // The segment size (`split::SEGMENT_BYTES`, internal).
    let seg = 4 << 20;
    for (d, op) in [(Dtype::GPUWIRE_FLOAT32, ReduceOp::GPUWIRE_SUM), (Dtype::GPUWIRE_INT32, ReduceOp::GPUWIRE_AVG), (Dtype::GPUWIRE_FLOAT64_INT32, ReduceOp::GPUWIRE_MINLOC)] {
        // Two whole segments and a tail that does not split evenly.
        run(d, op, 2 * seg / d.size() + 2 * p + 1, 7);
    }
}
