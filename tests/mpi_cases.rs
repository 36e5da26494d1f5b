//! The failure cases C01-C10 of `/work/shared/cases/README.md` (host memory, plain MPI), each as
//! its own launched job with the rank count the case names. Every expected value is computed
//! here, from the case's own numbers.

mod common;

use std::ffi::{c_int, c_void};
use std::time::{Duration, Instant};

use common::*;
use gpuwire::Status;
use gpuwire::ffi::buffer::*;
use gpuwire::ffi::comm::*;
use gpuwire::ffi::lifecycle::*;
use gpuwire::ffi::ops::*;
use gpuwire::ffi::status::*;
use gpuwire::types::{Dtype, ReduceOp, ThreadLevel};
use half::{bf16, f16};

const F64: Dtype = Dtype::GPUWIRE_FLOAT64;
const SUM: i32 = ReduceOp::GPUWIRE_SUM as i32;

const CASES: [(&str, usize); 14] = [
    ("c01_in_place_reductions", 3),
    ("c02_uneven_partition", 3),
    ("c03_zero_counts", 2),
    ("c04_half_precision", 2),
    ("c05_complex", 2),
    ("c06_reduction_set", 3),
    ("c07_bad_arguments_never_abort", 2),
    ("c08_mismatched_counts", 3),
    ("c09_many_communicators", 2),
    // C10: MPI can be initialized once per process, so each variant is its own job.
    ("c10a_program_owns_mpi", 2),
    ("c10b_handles_after_finalize", 2),
    ("c10c_gpuwire_owns_mpi", 2),
    ("c10d_program_finalizes_first", 2),
    // Mistakes only some ranks make, which must give an error on every rank and never a hang.
    ("one_rank_differs", 3),
];

fn main() {
    if !is_child() {
        parent_main("mpi_cases", CASES.iter().map(|(name, np)| Job::new(*name, *np, *name)).collect());
    }
    let (mode, np) = child_args();
    match mode.as_str() {
        "c07_bad_arguments_never_abort" => c07_bad_arguments_never_abort(np),
        "c10a_program_owns_mpi" => c10a_program_owns_mpi(np),
        "c10d_program_finalizes_first" => c10d_program_finalizes_first(np),
        "one_rank_differs" => one_rank_differs(np),
        "c10b_handles_after_finalize" => c10b_handles_after_finalize(np),
        "c10c_gpuwire_owns_mpi" => c10c_gpuwire_owns_mpi(np),
        _ => {}
    }
    let ctx = Ctx::init(np);
    ctx.section(&mode);
    match mode.as_str() {
        "c01_in_place_reductions" => c01_in_place_reductions(&ctx),
        "c02_uneven_partition" => c02_uneven_partition(&ctx),
        "c03_zero_counts" => c03_zero_counts(&ctx),
        "c04_half_precision" => c04_half_precision(&ctx),
        "c05_complex" => c05_complex(&ctx),
        "c06_reduction_set" => c06_reduction_set(&ctx),
        "c08_mismatched_counts" => c08_mismatched_counts(&ctx),
        "c09_many_communicators" => c09_many_communicators(&ctx),
        other => die(Some(ctx.rank), &format!("unknown mode {other:?}")),
    }
    ctx.finish();
}

fn st() -> *mut c_void {
    no_stream()
}

fn f64s(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn read_f64s(b: &Buf) -> Vec<f64> {
    b.read().chunks_exact(8).map(|c| f64::from_ne_bytes(c.try_into().unwrap())).collect()
}

/// A borrowed (gpuwire_buffer_wrap) handle over `count` elements at `ptr`.
fn wrap(ctx: &Ctx, ptr: *mut c_void, count: i64, d: Dtype, what: &str) -> u64 {
    let mut h = 0u64;
    ctx.ok(gpuwire_buffer_wrap(ptr, count, d as i32, SPACE_HOST, &mut h), what);
    h
}

// ---- C01 ------------------------------------------------------------------------------------

/// P=3, one value each: 10, -300, -150. In-place allreduce: MIN -300, MAX 10, SUM -440 on every
/// rank; and the same for every way of asking for in-place and for other numeric types.
fn c01_in_place_reductions(ctx: &Ctx) {
    let mine = [10.0, -300.0, -150.0][ctx.rank];
    let cases = [(ReduceOp::GPUWIRE_MIN, -300.0), (ReduceOp::GPUWIRE_MAX, 10.0), (ReduceOp::GPUWIRE_SUM, -440.0), (ReduceOp::GPUWIRE_PROD, 450_000.0)];
    for d in [F64, Dtype::GPUWIRE_FLOAT32, Dtype::GPUWIRE_INT32, Dtype::GPUWIRE_INT64] {
        let val = |x: f64| if d.is_integer() { V::I(x as i128) } else { V::F(x) };
        for (op, want) in cases {
            let what = |how: &str| format!("in-place allreduce {} {} ({how})", d.name(), op.name());
            // sendbuf == recvbuf: the same handle.
            let b = Buf::from_bytes(d, &encode(d, val(mine)));
            ctx.ok(gpuwire_allreduce(ctx.world, b.h, b.h, op as i32, st()), &what("same handle"));
            ctx.check_eq(decode(d, &b.read()), val(want), &what("same handle"));

            // Two handles that wrap the same memory.
            let mut mem = encode(d, val(mine));
            mem.resize(16, 0); // room, and alignment below comes from u64 storage
            let mut storage = [0u64; 2];
            // SAFETY: 16 bytes into 16 bytes of u64 storage.
            unsafe { std::ptr::copy_nonoverlapping(mem.as_ptr(), storage.as_mut_ptr().cast::<u8>(), 16) };
            let p = storage.as_mut_ptr().cast::<c_void>();
            let (h1, h2) = (wrap(ctx, p, 1, d, "wrap"), wrap(ctx, p, 1, d, "wrap again"));
            ctx.ok(gpuwire_allreduce(ctx.world, h1, h2, op as i32, st()), &what("two handles of one memory"));
            // SAFETY: reading back the bytes of the storage gpuwire wrote.
            let got = unsafe { std::slice::from_raw_parts(storage.as_ptr().cast::<u8>(), d.size()) }.to_vec();
            ctx.check_eq(decode(d, &got), val(want), &what("two handles of one memory"));
            ctx.ok(gpuwire_buffer_free(h1), "free");
            ctx.ok(gpuwire_buffer_free(h2), "free");

            // In-place reduce at every root.
            for root in 0..ctx.size {
                let b = Buf::from_bytes(d, &encode(d, val(mine)));
                let rh = if ctx.rank == root { b.h } else { 0 };
                ctx.ok(gpuwire_reduce(ctx.world, b.h, rh, op as i32, root as i32, st()), &what(&format!("reduce at root {root}")));
                if ctx.rank == root {
                    ctx.check_eq(decode(d, &b.read()), val(want), &what(&format!("reduce at root {root}")));
                } else {
                    ctx.check_eq(decode(d, &b.read()), val(mine), &what("a non-root's send buffer is unchanged"));
                }
            }
        }
    }
}

// ---- C02 ------------------------------------------------------------------------------------

/// Local lengths of the default split: the first total mod p ranks get one more element.
fn default_split(total: usize, p: usize) -> Vec<usize> {
    (0..p).map(|r| total / p + usize::from(r < total % p)).collect()
}

/// P=3, global float64 0..9 split [4,3,3]; allgatherv into 10 elements gives exactly 0..9 on
/// every rank: no padding, no reordering. Also for other global lengths (one with an empty rank).
fn c02_uneven_partition(ctx: &Ctx) {
    let p = ctx.size;
    ctx.check_eq(default_split(10, p), vec![4, 3, 3], "the case's split of 10 over 3 ranks");
    for total in [10usize, 11, 2, 3] {
        let counts = default_split(total, p);
        let off: usize = counts[..ctx.rank].iter().sum();
        let global: Vec<f64> = (0..total).map(|i| i as f64).collect();
        let local = &global[off..off + counts[ctx.rank]];
        let counts_i64: Vec<i64> = counts.iter().map(|c| *c as i64).collect();
        for given in [true, false] {
            let cp = if given { counts_i64.as_ptr() } else { std::ptr::null() };
            let what = format!("allgatherv of 0..{} split {counts:?}, counts {}", total - 1, if given { "given" } else { "NULL" });
            let send = Buf::from_bytes(F64, &f64s(local));
            let recv = Buf::from_bytes(F64, &f64s(&vec![f64::NAN; total]));
            ctx.ok(gpuwire_allgatherv(ctx.world, send.h, recv.h, cp, st()), &what);
            check_bytes(ctx, F64, &recv.read(), &f64s(&global), &what);

            // In place: this rank's block of the result already holds its part.
            let mut init = vec![-1.0; total];
            init[off..off + local.len()].copy_from_slice(local);
            let recv = Buf::from_bytes(F64, &f64s(&init));
            let block = recv.view(off, local.len());
            ctx.ok(gpuwire_allgatherv(ctx.world, block.h, recv.h, cp, st()), &format!("{what}, in place"));
            check_bytes(ctx, F64, &recv.read(), &f64s(&global), &format!("{what}, in place"));

            // A receive buffer with room for padding is refused on every rank, untouched.
            let big = Buf::from_bytes(F64, &f64s(&vec![-2.0; total + 1]));
            ctx.error(gpuwire_allgatherv(ctx.world, send.h, big.h, cp, st()), Status::GPUWIRE_ERROR_COUNT_MISMATCH, &["receive buffer"], &format!("{what}, recv too long"));
            ctx.check_eq(read_f64s(&big), vec![-2.0; total + 1], &format!("{what}, recv too long: untouched"));
        }
    }
}

// ---- C03 ------------------------------------------------------------------------------------

/// P=2. Every operation with count 0, with a NULL pointer and with a valid pointer (and an owned
/// empty buffer): each succeeds on every rank, nothing hangs, no memory is written, and no rank
/// skips a call the other makes (checked by a real message right after each point-to-point
/// pair: a skipped 0-element send would let the 0-element receive match it and fail).
fn c03_zero_counts(ctx: &Ctx) {
    let (r, peer) = (ctx.rank, 1 - ctx.rank);
    for d in Dtype::ALL {
        // Valid memory behind the count-0 handles; it must stay as it is.
        let mut guard = [0xA5A5_A5A5_A5A5_A5A5u64; 8];
        let gp = guard.as_mut_ptr().cast::<c_void>();
        let kinds: [(&str, u64, u64); 3] = {
            let null = |what: &str| wrap(ctx, std::ptr::null_mut(), 0, d, what);
            let valid = |what: &str| wrap(ctx, gp, 0, d, what);
            let owned = |_: &str| {
                let mut h = 0;
                ctx.ok(gpuwire_buffer_alloc(0, d as i32, SPACE_HOST, -1, &mut h), "alloc of 0 elements");
                h
            };
            [
                ("NULL pointer", null("wrap(NULL, 0)"), null("wrap(NULL, 0)")),
                ("valid pointer", valid("wrap(ptr, 0)"), valid("wrap(ptr, 0)")),
                ("owned, 0 elements", owned(""), owned("")),
            ]
        };
        for (kind, a, b) in kinds {
            let what = |op: &str| format!("{op} with count 0, {kind}, {}", d.name());
            let one = Buf::from_bytes(Dtype::GPUWIRE_INT32, &encode(Dtype::GPUWIRE_INT32, V::I(41 + r as i128)));
            let got = Buf::new(Dtype::GPUWIRE_INT32, 1);
            let follow_up = |tag: i32, what: &str| {
                // The real message right after: it must not be taken by a 0-element receive.
                if r == 0 {
                    ctx.ok(gpuwire_send(ctx.world, one.h, 1, tag, st()), what);
                } else {
                    ctx.ok(gpuwire_recv(ctx.world, got.h, 0, tag, st()), what);
                    ctx.check_eq(decode(Dtype::GPUWIRE_INT32, &got.read()), V::I(41), what);
                }
            };
            if r == 0 {
                ctx.ok(gpuwire_send(ctx.world, a, 1, 5, st()), &what("send"));
            } else {
                ctx.ok(gpuwire_recv(ctx.world, b, 0, 5, st()), &what("recv"));
            }
            follow_up(5, &what("the message after send/recv"));
            let (mut q1, mut q2) = (0, 0);
            ctx.ok(gpuwire_irecv(ctx.world, b, peer as i32, 6, st(), &mut q1), &what("irecv"));
            ctx.ok(gpuwire_isend(ctx.world, a, peer as i32, 6, st(), &mut q2), &what("isend"));
            let mut qs = [q1, q2];
            ctx.ok(gpuwire_waitall(2, qs.as_mut_ptr()), &what("waitall"));
            follow_up(6, &what("the message after isend/irecv"));
            ctx.ok(gpuwire_sendrecv(ctx.world, a, peer as i32, 7, b, peer as i32, 7, st()), &what("sendrecv"));
            follow_up(7, &what("the message after sendrecv"));
            // An op defined on the datatype (the pair datatypes take MINLOC/MAXLOC only).
            let op = if is_pair(d) { ReduceOp::GPUWIRE_MINLOC as i32 } else { SUM };
            ctx.ok(gpuwire_allreduce(ctx.world, a, b, op, st()), &what("allreduce"));
            ctx.ok(gpuwire_allreduce(ctx.world, a, a, op, st()), &what("allreduce in place"));
            for root in 0..2i32 {
                ctx.ok(gpuwire_bcast(ctx.world, a, root, st()), &what("bcast"));
                ctx.ok(gpuwire_reduce(ctx.world, a, b, op, root, st()), &what("reduce"));
                ctx.ok(gpuwire_gather(ctx.world, a, b, root, st()), &what("gather"));
                ctx.ok(gpuwire_scatter(ctx.world, a, b, root, st()), &what("scatter"));
            }
            ctx.ok(gpuwire_allgather(ctx.world, a, b, st()), &what("allgather"));
            let zeros = [0i64, 0];
            ctx.ok(gpuwire_allgatherv(ctx.world, a, b, zeros.as_ptr(), st()), &what("allgatherv, counts given"));
            ctx.ok(gpuwire_allgatherv(ctx.world, a, b, std::ptr::null(), st()), &what("allgatherv, counts NULL"));
            ctx.ok(gpuwire_reduce_scatter(ctx.world, a, b, op, st()), &what("reduce_scatter"));
            ctx.ok(gpuwire_scan(ctx.world, a, b, op, st()), &what("scan"));
            ctx.ok(gpuwire_exscan(ctx.world, a, a, op, st()), &what("exscan in place"));
            ctx.ok(gpuwire_alltoall(ctx.world, a, b, st()), &what("alltoall"));
            // After all collectives, one real allreduce agrees: nobody is a call behind.
            let x = Buf::from_bytes(Dtype::GPUWIRE_INT32, &encode(Dtype::GPUWIRE_INT32, V::I(1 + r as i128)));
            ctx.ok(gpuwire_allreduce(ctx.world, x.h, x.h, SUM, st()), &what("the allreduce after them"));
            ctx.check_eq(decode(Dtype::GPUWIRE_INT32, &x.read()), V::I(3), &what("the allreduce after them"));

            // allgatherv where rank 1 gives 0 elements (its count-0 handle of this kind) and
            // rank 0 three.
            let counts = [3i64, 0];
            let want = pattern(seed(&[3, d as usize]), 3 * d.size());
            let three = Buf::from_bytes(d, &want);
            let sh = if r == 0 { three.h } else { a };
            for (cp, how) in [(counts.as_ptr(), "counts given"), (std::ptr::null(), "counts NULL")] {
                let recv = Buf::from_bytes(d, &sentinel(3 * d.size()));
                ctx.ok(gpuwire_allgatherv(ctx.world, sh, recv.h, cp, st()), &what(&format!("allgatherv where rank 1 gives 0, {how}")));
                check_bytes(ctx, d, &recv.read(), &want, &what(&format!("allgatherv where rank 1 gives 0, {how}")));
            }
            for h in [a, b] {
                ctx.ok(gpuwire_buffer_free(h), "free");
            }
        }
        ctx.check(guard.iter().all(|g| *g == 0xA5A5_A5A5_A5A5_A5A5), || format!("memory behind count-0 handles was written: {guard:x?}"));
    }
}

// ---- C04 ------------------------------------------------------------------------------------

/// P=2, four elements of 1.5 per rank in float16 and bfloat16: allreduce SUM 3.0, MAX 1.5,
/// AVG 1.5 (a reduction of the raw 16-bit patterns would give other numbers); bcast and
/// allgather move special bit patterns unchanged.
fn c04_half_precision(ctx: &Ctx) {
    let r = ctx.rank;
    // (datatype, rounding of an f32 to its bits, special bit patterns)
    type Half = (Dtype, fn(f32) -> u16, [u16; 8]);
    let halves: [Half; 2] = [
        (Dtype::GPUWIRE_FLOAT16, |x| f16::from_f32(x).to_bits(), [0x7E01, 0x8000, 0x0001, 0x7C00, 0xFC00, 0x3C00, 0xFFFF, 0x7BFF]),
        (Dtype::GPUWIRE_BFLOAT16, |x| bf16::from_f32(x).to_bits(), [0x7FC1, 0x8000, 0x0001, 0x7F80, 0xFF80, 0x3F80, 0xFFFF, 0x7F7F]),
    ];
    let bits = |v: &[u16]| -> Vec<u8> { v.iter().flat_map(|x| x.to_ne_bytes()).collect() };
    for (d, to_bits, special) in halves {
        let one_and_half = bits(&[to_bits(1.5); 4]);
        for (op, want) in [
            (ReduceOp::GPUWIRE_SUM, 3.0),
            (ReduceOp::GPUWIRE_MAX, 1.5),
            (ReduceOp::GPUWIRE_AVG, 1.5),
            (ReduceOp::GPUWIRE_MIN, 1.5),
            (ReduceOp::GPUWIRE_PROD, 2.25),
        ] {
            let expect = bits(&[to_bits(want); 4]);
            let what = |how: &str| format!("{} {} of 4 x 1.5 ({how})", d.name(), op.name());
            let (s, rb) = (Buf::from_bytes(d, &one_and_half), Buf::from_bytes(d, &sentinel(8)));
            ctx.ok(gpuwire_allreduce(ctx.world, s.h, rb.h, op as i32, st()), &what("allreduce"));
            check_bytes(ctx, d, &rb.read(), &expect, &what("allreduce"));
            let inout = Buf::from_bytes(d, &one_and_half);
            ctx.ok(gpuwire_allreduce(ctx.world, inout.h, inout.h, op as i32, st()), &what("allreduce in place"));
            check_bytes(ctx, d, &inout.read(), &expect, &what("allreduce in place"));
            for root in 0..2usize {
                let rb = Buf::from_bytes(d, &sentinel(8));
                ctx.ok(gpuwire_reduce(ctx.world, s.h, if r == root { rb.h } else { 0 }, op as i32, root as i32, st()), &what("reduce"));
                if r == root {
                    check_bytes(ctx, d, &rb.read(), &expect, &what("reduce"));
                }
            }
            let rs = Buf::from_bytes(d, &sentinel(4));
            ctx.ok(gpuwire_reduce_scatter(ctx.world, s.h, rs.h, op as i32, st()), &what("reduce_scatter"));
            check_bytes(ctx, d, &rs.read(), &expect[..4], &what("reduce_scatter"));
        }
        // Rounding: each step is computed in float32 and rounded to the datatype. 2048 + 1 is
        // 2049 in float32, which float16 rounds (ties to even) to 2048; bfloat16 holds 2048 and
        // 1 but rounds 2049 to 2048 as well. 1 + 2^-11 in float16 rounds to 1, and so on.
        for (a, b) in [(2048.0f32, 1.0f32), (1.0, 1.0 / 2048.0), (0.1, 0.2), (-3.5, 1.25)] {
            let (ha, hb) = (to_bits(a), to_bits(b));
            let value = |h: u16| if d == Dtype::GPUWIRE_FLOAT16 { f16::from_bits(h).to_f32() } else { bf16::from_bits(h).to_f32() };
            let want = to_bits(value(ha) + value(hb)); // f32 sum of the two half values, rounded once
            let b1 = Buf::from_bytes(d, &bits(&[if r == 0 { ha } else { hb }]));
            ctx.ok(gpuwire_allreduce(ctx.world, b1.h, b1.h, SUM, st()), "allreduce SUM with rounding");
            check_bytes(ctx, d, &b1.read(), &bits(&[want]), &format!("{} SUM {a} + {b} rounded once", d.name()));
        }
        // Data movement is bit-exact: NaN payloads, -0, subnormals, infinities.
        for root in 0..2usize {
            let b = Buf::from_bytes(d, &if r == root { bits(&special) } else { sentinel(16) });
            ctx.ok(gpuwire_bcast(ctx.world, b.h, root as i32, st()), "bcast of special values");
            check_bytes(ctx, d, &b.read(), &bits(&special), &format!("{} bcast from {root} is bit-exact", d.name()));
        }
        let mine: Vec<u16> = special.iter().map(|x| x ^ (r as u16 * 0x0100)).collect();
        let send = Buf::from_bytes(d, &bits(&mine));
        let recv = Buf::from_bytes(d, &sentinel(32));
        ctx.ok(gpuwire_allgather(ctx.world, send.h, recv.h, st()), "allgather of special values");
        let want: Vec<u16> = (0..2).flat_map(|s| special.iter().map(move |x| x ^ (s as u16 * 0x0100))).collect();
        check_bytes(ctx, d, &recv.read(), &bits(&want), &format!("{} allgather is bit-exact", d.name()));
    }
}

// ---- C05 ------------------------------------------------------------------------------------

/// P=2, one complex each: 1+2i and 3+4i. SUM 4+6i, PROD -5+10i (not the component-wise 3+8i);
/// MAX/MIN are refused on every rank with nothing sent and nothing written.
fn c05_complex(ctx: &Ctx) {
    let r = ctx.rank;
    let mine = [V::C(1.0, 2.0), V::C(3.0, 4.0)][r];
    for d in [Dtype::GPUWIRE_COMPLEX64, Dtype::GPUWIRE_COMPLEX128] {
        for (op, want) in [(ReduceOp::GPUWIRE_SUM, V::C(4.0, 6.0)), (ReduceOp::GPUWIRE_PROD, V::C(-5.0, 10.0)), (ReduceOp::GPUWIRE_AVG, V::C(2.0, 3.0))] {
            let what = |how: &str| format!("{} {} ({how})", d.name(), op.name());
            let s = Buf::from_bytes(d, &encode(d, mine));
            let rb = Buf::from_bytes(d, &sentinel(d.size()));
            ctx.ok(gpuwire_allreduce(ctx.world, s.h, rb.h, op as i32, st()), &what("allreduce"));
            ctx.check_eq(decode(d, &rb.read()), want, &what("allreduce"));
            ctx.ok(gpuwire_allreduce(ctx.world, s.h, s.h, op as i32, st()), &what("allreduce in place"));
            ctx.check_eq(decode(d, &s.read()), want, &what("allreduce in place"));
            for root in 0..2usize {
                let s = Buf::from_bytes(d, &encode(d, mine));
                let rb = Buf::from_bytes(d, &sentinel(d.size()));
                ctx.ok(gpuwire_reduce(ctx.world, s.h, if r == root { rb.h } else { 0 }, op as i32, root as i32, st()), &what("reduce"));
                if r == root {
                    ctx.check_eq(decode(d, &rb.read()), want, &what("reduce"));
                }
            }
            // reduce_scatter: two elements each; element j of the result block is for rank j.
            let two = Buf::from_bytes(d, &[encode(d, mine), encode(d, mine)].concat());
            let rs = Buf::from_bytes(d, &sentinel(d.size()));
            ctx.ok(gpuwire_reduce_scatter(ctx.world, two.h, rs.h, op as i32, st()), &what("reduce_scatter"));
            ctx.check_eq(decode(d, &rs.read()), want, &what("reduce_scatter"));
        }
        for op in [ReduceOp::GPUWIRE_MAX, ReduceOp::GPUWIRE_MIN] {
            let what = |how: &str| format!("{} {} ({how})", d.name(), op.name());
            let s = Buf::from_bytes(d, &encode(d, mine));
            let rb = Buf::from_bytes(d, &sentinel(d.size()));
            let code = Status::GPUWIRE_ERROR_UNSUPPORTED_OP;
            ctx.error(gpuwire_allreduce(ctx.world, s.h, rb.h, op as i32, st()), code, &[op.name(), d.name()], &what("allreduce"));
            ctx.error(gpuwire_allreduce(ctx.world, s.h, s.h, op as i32, st()), code, &[op.name()], &what("allreduce in place"));
            ctx.error(gpuwire_reduce(ctx.world, s.h, if r == 0 { rb.h } else { 0 }, op as i32, 0, st()), code, &[op.name()], &what("reduce"));
            ctx.check_eq(rb.read(), sentinel(d.size()), &what("receive buffer untouched"));
            ctx.check_eq(decode(d, &s.read()), mine, &what("in-place buffer untouched"));
        }
        // Nothing was sent by the refused calls: the next message between the ranks is the real one.
        let x = Buf::from_bytes(d, &encode(d, mine));
        ctx.ok(gpuwire_allreduce(ctx.world, x.h, x.h, SUM, st()), "allreduce after the refused calls");
        ctx.check_eq(decode(d, &x.read()), V::C(4.0, 6.0), "allreduce after the refused calls");
    }
}

// ---- C06 ------------------------------------------------------------------------------------

/// P=3, 1001 elements equal to rank+1: AVG 2, PROD 6, MAX 3, MIN 1 (and SUM 6), for float32 and
/// the other real types, by allreduce and by reduce at every root.
fn c06_reduction_set(ctx: &Ctx) {
    const N: usize = 1001;
    let mine = (ctx.rank + 1) as f64;
    for d in [Dtype::GPUWIRE_FLOAT32, Dtype::GPUWIRE_FLOAT64, Dtype::GPUWIRE_FLOAT16, Dtype::GPUWIRE_BFLOAT16] {
        let input = encode_all(d, &vec![V::F(mine); N]);
        for (op, want) in [
            (ReduceOp::GPUWIRE_AVG, 2.0),
            (ReduceOp::GPUWIRE_PROD, 6.0),
            (ReduceOp::GPUWIRE_MAX, 3.0),
            (ReduceOp::GPUWIRE_MIN, 1.0),
            (ReduceOp::GPUWIRE_SUM, 6.0),
        ] {
            let expect = encode_all(d, &vec![V::F(want); N]);
            let what = |how: &str| format!("{} {} of 1001 x (rank+1) ({how})", d.name(), op.name());
            let s = Buf::from_bytes(d, &input);
            let rb = Buf::from_bytes(d, &sentinel(N * d.size()));
            ctx.ok(gpuwire_allreduce(ctx.world, s.h, rb.h, op as i32, st()), &what("allreduce"));
            check_bytes(ctx, d, &rb.read(), &expect, &what("allreduce"));
            for root in 0..ctx.size {
                let rb = Buf::from_bytes(d, &sentinel(N * d.size()));
                ctx.ok(gpuwire_reduce(ctx.world, s.h, if ctx.rank == root { rb.h } else { 0 }, op as i32, root as i32, st()), &what("reduce"));
                if ctx.rank == root {
                    check_bytes(ctx, d, &rb.read(), &expect, &what(&format!("reduce at root {root}")));
                }
            }
        }
    }
}

// ---- C07 ------------------------------------------------------------------------------------

/// P=2. Bad arguments, one at a time: each returns its own code on the calling rank with a
/// message that says what was wrong; the process goes on and the next allreduce SUM of 1.0 gives
/// 2.0; MPI_COMM_WORLD keeps its error handler (MPI_ERRORS_ARE_FATAL) throughout.
fn c07_bad_arguments_never_abort(np: usize) -> ! {
    if gpuwire_init() != Status::GPUWIRE_SUCCESS {
        die(None, "gpuwire_init failed");
    }
    let fatal_before = world_errhandler_is_fatal();
    let ctx = Ctx::after_init(np);
    ctx.section("c07_bad_arguments_never_abort");
    ctx.check(fatal_before, || "MPI_COMM_WORLD's error handler was not MPI_ERRORS_ARE_FATAL after gpuwire_init".into());
    ctx.check(world_errhandler_is_fatal(), || "MPI_COMM_WORLD's error handler changed when gpuwire created a communicator over it".into());
    let r = ctx.rank;
    let next_allreduce = |after: &str| {
        let b = Buf::from_bytes(F64, &f64s(&[1.0]));
        ctx.ok(gpuwire_allreduce(ctx.world, b.h, b.h, SUM, st()), &format!("allreduce after {after}"));
        ctx.check_eq(read_f64s(&b), vec![2.0], &format!("allreduce SUM of 1.0 after {after}"));
    };
    let inval = Status::GPUWIRE_ERROR_INVALID_ARGUMENT;

    // bcast with root 5 (of 2 ranks): on both ranks, then on rank 0 alone (no rank waits).
    let b = Buf::from_bytes(F64, &f64s(&[7.0, 8.0]));
    ctx.error(gpuwire_bcast(ctx.world, b.h, 5, st()), inval, &["root 5", "not a rank"], "bcast with root 5");
    if r == 0 {
        ctx.error(gpuwire_bcast(ctx.world, b.h, 5, st()), inval, &["root 5"], "bcast with root 5 on rank 0 alone");
    }
    ctx.check_eq(read_f64s(&b), vec![7.0, 8.0], "the buffer of the refused bcast");
    next_allreduce("bcast with root 5");

    // A negative count, wherever a count is taken.
    let mut out = 99u64;
    let mut store = [0f64; 4];
    let sp = store.as_mut_ptr().cast::<c_void>();
    ctx.error(gpuwire_buffer_alloc(-1, F64 as i32, SPACE_HOST, -1, &mut out), inval, &["count -1", "negative"], "alloc with count -1");
    ctx.error(gpuwire_buffer_wrap(sp, -3, F64 as i32, SPACE_HOST, &mut out), inval, &["count -3", "negative"], "wrap with count -3");
    ctx.error(gpuwire_buffer_view(b.h, 0, -1, &mut out), inval, &["negative"], "view with count -1");
    ctx.error(gpuwire_buffer_view(b.h, -1, 1, &mut out), inval, &["offset -1", "negative"], "view with offset -1");
    let mut q = 0u64;
    ctx.error(gpuwire_waitall(-2, &mut q), inval, &["count -2", "negative"], "waitall with count -2");
    ctx.check_eq(out, 99, "no handle written by the refused calls");
    next_allreduce("negative counts");

    // A NULL buffer with a count > 0.
    let null_arg = Status::GPUWIRE_ERROR_NULL_ARGUMENT;
    ctx.error(gpuwire_buffer_wrap(std::ptr::null_mut(), 4, F64 as i32, SPACE_HOST, &mut out), null_arg, &["NULL", "count is 4"], "wrap(NULL, 4)");
    ctx.error(gpuwire_buffer_copy_from_host(b.h, std::ptr::null(), st()), null_arg, &["NULL"], "copy_from_host from NULL");
    ctx.error(gpuwire_buffer_copy_to_host(b.h, std::ptr::null_mut(), st()), null_arg, &["NULL"], "copy_to_host to NULL");
    ctx.check_eq(out, 99, "no handle written by the refused calls");
    next_allreduce("NULL buffers");

    // Datatype code 999.
    let bad_dtype = Status::GPUWIRE_ERROR_UNSUPPORTED_DTYPE;
    ctx.error(gpuwire_buffer_alloc(4, 999, SPACE_HOST, -1, &mut out), bad_dtype, &["999"], "alloc with datatype 999");
    ctx.error(gpuwire_buffer_wrap(sp, 4, 999, SPACE_HOST, &mut out), bad_dtype, &["999"], "wrap with datatype 999");
    let mut size = 0i64;
    ctx.error(gpuwire_dtype_size(999, &mut size), bad_dtype, &["999"], "dtype_size(999)");
    ctx.check_eq(out, 99, "no handle written by the refused calls");
    next_allreduce("datatype code 999");

    // A communicator already freed (used by both ranks, and freed again).
    let bad_handle = Status::GPUWIRE_ERROR_INVALID_HANDLE;
    let mut dup = 0u64;
    ctx.ok(gpuwire_comm_dup(ctx.world, &mut dup), "dup");
    ctx.ok(gpuwire_comm_free(dup), "free the dup");
    let x = Buf::from_bytes(F64, &f64s(&[1.0]));
    ctx.error(gpuwire_allreduce(dup, x.h, x.h, SUM, st()), bad_handle, &["communicator", "freed"], "allreduce on a freed communicator");
    ctx.error(gpuwire_bcast(dup, x.h, 0, st()), bad_handle, &["freed"], "bcast on a freed communicator");
    ctx.error(gpuwire_send(dup, x.h, 1 - r as i32, 0, st()), bad_handle, &["freed"], "send on a freed communicator");
    let mut rk = -1;
    ctx.error(gpuwire_comm_rank(dup, &mut rk), bad_handle, &["freed"], "rank of a freed communicator");
    ctx.error(gpuwire_comm_free(dup), bad_handle, &["freed"], "free a communicator twice");
    ctx.error(gpuwire_comm_free(x.h), bad_handle, &["buffer handle", "not a communicator"], "free a buffer handle as a communicator");
    ctx.check_eq(read_f64s(&x), vec![1.0], "the buffer of the refused calls");
    next_allreduce("a freed communicator");

    // A buffer freed twice (and used after its free).
    let mut h = 0u64;
    ctx.ok(gpuwire_buffer_alloc(2, F64 as i32, SPACE_HOST, -1, &mut h), "alloc");
    ctx.ok(gpuwire_buffer_free(h), "free");
    ctx.error(gpuwire_buffer_free(h), bad_handle, &["buffer", "freed"], "free a buffer twice");
    ctx.error(gpuwire_allreduce(ctx.world, h, h, SUM, st()), bad_handle, &["freed"], "allreduce on a freed buffer");
    let mut n = 0i64;
    ctx.error(gpuwire_buffer_count(h, &mut n), bad_handle, &["freed"], "count of a freed buffer");
    next_allreduce("a buffer freed twice");

    // A message longer than the receive returns a count error naming both sizes, and leaves the
    // buffer as it was (gpuwire learns the size before receiving): rank 1 receives 2 elements of a
    // 4-element message.
    let four = Buf::from_bytes(F64, &f64s(&[1.0, 2.0, 3.0, 4.0]));
    let two = Buf::from_bytes(F64, &f64s(&[-1.0, -1.0]));
    if r == 0 {
        ctx.ok(gpuwire_send(ctx.world, four.h, 1, 9, st()), "send of 4 elements");
    } else {
        ctx.error(gpuwire_recv(ctx.world, two.h, 0, 9, st()), Status::GPUWIRE_ERROR_COUNT_MISMATCH, &["32 bytes", "2 float64 elements"], "recv of 2 elements of a 4-element message");
        ctx.check(two.read() == f64s(&[-1.0, -1.0]), || "a refused receive wrote its buffer".into());
    }
    next_allreduce("a message longer than the receive");

    ctx.check(world_errhandler_is_fatal(), || "MPI_COMM_WORLD's error handler changed during C07".into());
    ctx.finish();
}

// ---- C08 ------------------------------------------------------------------------------------

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let v = f();
    (v, t.elapsed())
}

/// P=3 with argument checking on: global N=10 split [4,3,3], each rank calls allreduce SUM with
/// its own local length: every rank gets GPUWIRE_ERROR_COUNT_MISMATCH within a second and
/// nothing is reduced. The same for the other mismatches checking mode agrees on.
fn c08_mismatched_counts(ctx: &Ctx) {
    let mut cfg = unsafe { std::mem::zeroed::<gpuwire_config>() };
    ctx.ok(gpuwire_config_init(&mut cfg), "config_init");
    cfg.check = 1;
    let mut c = 0u64;
    ctx.ok(gpuwire_comm_world(&cfg, &mut c), "comm_world with check = 1");
    let r = ctx.rank;
    let counts = default_split(10, ctx.size);
    ctx.check_eq(counts.clone(), vec![4, 3, 3], "split of 10 over 3 ranks");
    let n = counts[r];
    let local: Vec<f64> = (0..n).map(|i| (r * 10 + i) as f64).collect();
    let quick = Duration::from_secs(1);
    let expect_error = |what: &str, code: Status, needles: &[&str], call: &dyn Fn() -> Status| {
        ctx.ok(gpuwire_barrier(c, st()), "barrier before a timed call");
        let (got, took) = timed(call);
        ctx.error(got, code, needles, what);
        ctx.check(took < quick, || format!("{what}: took {took:?}, expected under {quick:?}"));
    };

    let send = Buf::from_bytes(F64, &f64s(&local));
    let recv = Buf::from_bytes(F64, &f64s(&vec![-1.0; n]));
    let mismatch = Status::GPUWIRE_ERROR_COUNT_MISMATCH;
    expect_error("allreduce SUM of the local lengths [4,3,3]", mismatch, &["count", "3", "4"], &|| {
        gpuwire_allreduce(c, send.h, recv.h, SUM, st())
    });
    ctx.check_eq(read_f64s(&recv), vec![-1.0; n], "allreduce: nothing reduced into the receive buffer");
    expect_error("in-place allreduce SUM of the local lengths", mismatch, &["count"], &|| gpuwire_allreduce(c, send.h, send.h, SUM, st()));
    ctx.check_eq(read_f64s(&send), local.clone(), "in-place allreduce: the buffer is untouched");
    expect_error("reduce to root 0 of the local lengths", mismatch, &["count"], &|| {
        gpuwire_reduce(c, send.h, if r == 0 { recv.h } else { 0 }, SUM, 0, st())
    });
    ctx.check_eq(read_f64s(&recv), vec![-1.0; n], "reduce: nothing reduced");
    expect_error("bcast of the local lengths", mismatch, &["count"], &|| gpuwire_bcast(c, send.h, 0, st()));
    ctx.check_eq(read_f64s(&send), local.clone(), "bcast: nothing moved");
    let gathered = Buf::from_bytes(F64, &f64s(&vec![-1.0; 3 * n]));
    expect_error("allgather of the local lengths", mismatch, &["count"], &|| gpuwire_allgather(c, send.h, gathered.h, st()));
    ctx.check_eq(read_f64s(&gathered), vec![-1.0; 3 * n], "allgather: nothing gathered");

    // Other disagreements, each named by its own code on every rank.
    let other_dtype = if r == 2 { Buf::from_bytes(Dtype::GPUWIRE_FLOAT32, &[0u8; 16]) } else { Buf::from_bytes(F64, &[0u8; 32]) };
    expect_error("allreduce with float32 on rank 2, float64 elsewhere", Status::GPUWIRE_ERROR_DTYPE_MISMATCH, &["float32", "float64"], &|| {
        gpuwire_allreduce(c, other_dtype.h, other_dtype.h, SUM, st())
    });
    // The same bytes as other elements: int32 x 8 on rank 1, float64 x 4 elsewhere (the datatypes
    // differ, whatever the counts).
    let same_bytes = if r == 1 { Buf::from_bytes(Dtype::GPUWIRE_INT32, &[0u8; 32]) } else { Buf::from_bytes(F64, &[0u8; 32]) };
    expect_error("allreduce with int32 x 8 on rank 1, float64 x 4 elsewhere", Status::GPUWIRE_ERROR_DTYPE_MISMATCH, &["int32", "float64"], &|| {
        gpuwire_allreduce(c, same_bytes.h, same_bytes.h, SUM, st())
    });
    let four = Buf::from_bytes(F64, &f64s(&[5.0; 4]));
    let op = if r == 0 { ReduceOp::GPUWIRE_MAX } else { ReduceOp::GPUWIRE_SUM } as i32;
    expect_error("allreduce with MAX on rank 0, SUM elsewhere", Status::GPUWIRE_ERROR_OP_MISMATCH, &["MAX", "SUM"], &|| {
        gpuwire_allreduce(c, four.h, four.h, op, st())
    });
    expect_error("bcast with root = own rank", Status::GPUWIRE_ERROR_ROOT_MISMATCH, &["root"], &|| gpuwire_bcast(c, four.h, r as i32, st()));
    ctx.check_eq(read_f64s(&four), vec![5.0; 4], "nothing changed by the refused calls");

    // One rank's own argument error: that rank says what, the others that a rank refused.
    let (code, needles): (Status, &[&str]) =
        if r == 1 { (Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["root 5"]) } else { (Status::GPUWIRE_ERROR_REMOTE_ARGUMENT, &["rank 1"]) };
    expect_error("bcast with root 5 on rank 1 only", code, needles, &|| gpuwire_bcast(c, four.h, if r == 1 { 5 } else { 0 }, st()));
    let mut freed = 0u64;
    ctx.ok(gpuwire_buffer_alloc(4, F64 as i32, SPACE_HOST, -1, &mut freed), "alloc");
    ctx.ok(gpuwire_buffer_free(freed), "free");
    let (code, needles): (Status, &[&str]) =
        if r == 2 { (Status::GPUWIRE_ERROR_INVALID_HANDLE, &["freed"]) } else { (Status::GPUWIRE_ERROR_REMOTE_ARGUMENT, &["rank 2"]) };
    expect_error("allreduce with a freed buffer on rank 2 only", code, needles, &|| {
        let h = if r == 2 { freed } else { four.h };
        gpuwire_allreduce(c, h, h, SUM, st())
    });

    // A root without the buffer only it needs.
    let (code, needles): (Status, &[&str]) =
        if r == 0 { (Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["root needs a receive buffer"]) } else { (Status::GPUWIRE_ERROR_REMOTE_ARGUMENT, &["rank 0"]) };
    expect_error("reduce where the root passes no receive buffer", code, needles, &|| gpuwire_reduce(c, four.h, 0, SUM, 0, st()));
    let (code, needles): (Status, &[&str]) =
        if r == 2 { (Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["root needs a send buffer"]) } else { (Status::GPUWIRE_ERROR_REMOTE_ARGUMENT, &["rank 2"]) };
    let one = Buf::from_bytes(F64, &f64s(&[-3.0]));
    expect_error("scatter where the root passes no send buffer", code, needles, &|| gpuwire_scatter(c, 0, one.h, 2, st()));
    ctx.check_eq(read_f64s(&one), vec![-3.0], "scatter: nothing received");

    // The same for allgatherv with NULL counts, which exchanges the counts first: the rank that
    // fails before the exchange must not leave the others in it.
    let all = Buf::from_bytes(F64, &f64s(&vec![-1.0; 12]));
    let (code, needles): (Status, &[&str]) =
        if r == 2 { (Status::GPUWIRE_ERROR_INVALID_HANDLE, &["freed"]) } else { (Status::GPUWIRE_ERROR_REMOTE_ARGUMENT, &["rank 2"]) };
    expect_error("allgatherv, NULL counts, with a freed buffer on rank 2 only", code, needles, &|| {
        gpuwire_allgatherv(c, if r == 2 { freed } else { four.h }, all.h, std::ptr::null(), st())
    });
    ctx.check_eq(read_f64s(&all), vec![-1.0; 12], "allgatherv: nothing gathered");
    let (code, needles): (Status, &[&str]) =
        if r == 0 { (Status::GPUWIRE_ERROR_DTYPE_MISMATCH, &["float32"]) } else { (Status::GPUWIRE_ERROR_REMOTE_ARGUMENT, &["rank 0"]) };
    let f32_recv = Buf::new(Dtype::GPUWIRE_FLOAT32, 12);
    expect_error("allgatherv, NULL counts, float32 receive buffer on rank 0 only", code, needles, &|| {
        gpuwire_allgatherv(c, four.h, if r == 0 { f32_recv.h } else { all.h }, std::ptr::null(), st())
    });
    ctx.check_eq(read_f64s(&all), vec![-1.0; 12], "allgatherv: nothing gathered");
    // Counts given, and a receive buffer of the wrong length on rank 1 only.
    let counts = [4i64, 4, 4];
    let short = Buf::new(F64, 11);
    let (code, needles): (Status, &[&str]) =
        if r == 1 { (mismatch, &["12", "11"]) } else { (Status::GPUWIRE_ERROR_REMOTE_ARGUMENT, &["rank 1"]) };
    expect_error("allgatherv, receive buffer too short on rank 1 only", code, needles, &|| {
        gpuwire_allgatherv(c, four.h, if r == 1 { short.h } else { all.h }, counts.as_ptr(), st())
    });
    ctx.check_eq(read_f64s(&all), vec![-1.0; 12], "allgatherv: nothing gathered");
    // And a valid allgatherv with NULL counts in checking mode.
    ctx.ok(gpuwire_allgatherv(c, four.h, all.h, std::ptr::null(), st()), "valid allgatherv, NULL counts, checking on");
    ctx.check_eq(read_f64s(&all), vec![5.0; 12], "valid allgatherv, NULL counts, checking on");

    // The ranks are still in step: a valid allreduce is right.
    let x = Buf::from_bytes(F64, &f64s(&[1.0 + r as f64]));
    ctx.ok(gpuwire_allreduce(c, x.h, x.h, SUM, st()), "valid allreduce after the mismatches");
    ctx.check_eq(read_f64s(&x), vec![6.0], "valid allreduce after the mismatches");
    ctx.ok(gpuwire_comm_free(c), "free");
}

// ---- C09 ------------------------------------------------------------------------------------

/// P=2: 40,000 iterations of split -> small allreduce -> free all succeed (a leak of MPI
/// communicators would exhaust Open MPI's and MPICH's context ids, ~2048 in MPICH, long before);
/// freeing a handle twice is GPUWIRE_ERROR_INVALID_HANDLE.
fn c09_many_communicators(ctx: &Ctx) {
    // The case's full count. Measured in a debug build on a 2-core machine: Open MPI 4.1
    // 1.2-7.5 s (21 s while other builds loaded the machine), MPICH 4.0 1.6 s; well under the
    // 30 s that would call for a smaller count.
    const ITERATIONS: usize = 40_000;
    let r = ctx.rank;
    let start = Instant::now();
    let mut failures = 0usize;
    let x = Buf::new(Dtype::GPUWIRE_INT32, 2);
    for i in 0..ITERATIONS {
        // Mostly both ranks together; every 7th iteration rank 1 stays out (GPUWIRE_UNDEFINED);
        // every 5th a dup of the new communicator too.
        let undefined = i % 7 == 3 && r == 1;
        let color = if undefined { gpuwire::ffi::GPUWIRE_UNDEFINED } else { 0 };
        let mut c = 0u64;
        let st1 = gpuwire_comm_split(ctx.world, color, (i % 3) as i32, &mut c);
        if st1 != Status::GPUWIRE_SUCCESS {
            ctx.ok(st1, &format!("split in iteration {i}"));
            failures += 1;
            break;
        }
        if undefined {
            ctx.check_eq(c, 0, "GPUWIRE_UNDEFINED gives the NULL handle");
            continue;
        }
        let members = if i % 7 == 3 { 1 } else { 2 };
        x.write(&[1i32.to_ne_bytes(), (i as i32).to_ne_bytes()].concat());
        let mut comms = vec![c];
        if i % 5 == 0 {
            let mut d = 0u64;
            if !ctx.ok(gpuwire_comm_dup(c, &mut d), &format!("dup in iteration {i}")) {
                failures += 1;
                break;
            }
            comms.push(d);
        }
        for &h in &comms {
            let s = gpuwire_allreduce(h, x.h, x.h, ReduceOp::GPUWIRE_MAX as i32, st());
            if s != Status::GPUWIRE_SUCCESS {
                ctx.ok(s, &format!("allreduce in iteration {i}"));
                failures += 1;
            }
        }
        let got: Vec<i32> = x.read().chunks_exact(4).map(|b| i32::from_ne_bytes(b.try_into().unwrap())).collect();
        if got != [1, i as i32] {
            ctx.check_eq(got, vec![1, i as i32], &format!("allreduce MAX in iteration {i} (members {members})"));
            failures += 1;
        }
        for &h in comms.iter().rev() {
            let s = gpuwire_comm_free(h);
            if s != Status::GPUWIRE_SUCCESS {
                ctx.ok(s, &format!("free in iteration {i}"));
                failures += 1;
            }
        }
        if failures > 0 {
            break;
        }
        if i == ITERATIONS - 1 {
            // Freeing the same handle twice: refused, nothing touched.
            ctx.error(gpuwire_comm_free(c), Status::GPUWIRE_ERROR_INVALID_HANDLE, &["freed"], "free the last communicator again");
        }
    }
    println!("[rank {r}] C09: {ITERATIONS} iterations of split -> allreduce -> free in {:.2} s", start.elapsed().as_secs_f64());
    ctx.check_eq(failures, 0, "failed iterations");
    // Only the world communicator of this test is left registered (an internal counter: the C ABI
    // has no such query).
    ctx.check_eq(gpuwire::comm::COMMS.live(), 1, "live communicators after the loop");
    // And the world communicator still works.
    let y = Buf::from_bytes(Dtype::GPUWIRE_INT32, &encode(Dtype::GPUWIRE_INT32, V::I(1)));
    ctx.ok(gpuwire_allreduce(ctx.world, y.h, y.h, SUM, st()), "allreduce on world after the loop");
    ctx.check_eq(decode(Dtype::GPUWIRE_INT32, &y.read()), V::I(2), "allreduce on world after the loop");
}

// ---- C10 ------------------------------------------------------------------------------------

fn thread_level_of_mpi(provided: c_int) -> i32 {
    use mpi::ffi::*;
    // SAFETY: reading constants.
    unsafe {
        if provided == RSMPI_THREAD_MULTIPLE {
            ThreadLevel::GPUWIRE_THREAD_MULTIPLE as i32
        } else if provided == RSMPI_THREAD_SERIALIZED {
            ThreadLevel::GPUWIRE_THREAD_SERIALIZED as i32
        } else if provided == RSMPI_THREAD_FUNNELED {
            ThreadLevel::GPUWIRE_THREAD_FUNNELED as i32
        } else {
            ThreadLevel::GPUWIRE_THREAD_SINGLE as i32
        }
    }
}

fn mpi_query_thread() -> c_int {
    let mut p: c_int = -1;
    // SAFETY: MPI is initialized.
    unsafe { mpi::ffi::MPI_Query_thread(&mut p) };
    p
}

/// The program's own MPI_Allreduce SUM of one int over MPI_COMM_WORLD.
fn raw_allreduce_sum(x: i32) -> (c_int, i32) {
    let mut y: i32 = 0;
    // SAFETY: one int each way on MPI_COMM_WORLD.
    let rc = unsafe {
        mpi::ffi::MPI_Allreduce(
            (&x as *const i32).cast(),
            (&mut y as *mut i32).cast(),
            1,
            mpi::ffi::RSMPI_INT32_T,
            mpi::ffi::RSMPI_SUM,
            mpi::ffi::RSMPI_COMM_WORLD,
        )
    };
    (rc, y)
}

/// C10 (a): the program calls MPI_Init_thread itself. gpuwire adopts MPI (owns_mpi 0), never
/// finalizes it, and the program's own MPI calls and MPI_Finalize afterwards succeed. Handles
/// used after gpuwire_finalize (before and after the program's MPI_Finalize) are refused
/// without calling MPI.
fn c10a_program_owns_mpi(np: usize) -> ! {
    let mut provided: c_int = -1;
    // SAFETY: MPI is not initialized yet in this process.
    let rc = unsafe { mpi::ffi::MPI_Init_thread(std::ptr::null_mut(), std::ptr::null_mut(), mpi::ffi::RSMPI_THREAD_MULTIPLE, &mut provided) };
    if rc != 0 {
        die(None, "the program's MPI_Init_thread failed");
    }
    if gpuwire_init() != Status::GPUWIRE_SUCCESS {
        die(None, "gpuwire_init after the program's MPI_Init_thread failed");
    }
    let ctx = Ctx::after_init(np);
    ctx.section("c10a_program_owns_mpi");
    let mut owns = -1;
    ctx.ok(gpuwire_owns_mpi(&mut owns), "gpuwire_owns_mpi");
    ctx.check_eq(owns, 0, "gpuwire_owns_mpi after the program initialized MPI");
    let mut level = -1;
    ctx.ok(gpuwire_query_thread(&mut level), "gpuwire_query_thread");
    ctx.check_eq(level, thread_level_of_mpi(mpi_query_thread()), "gpuwire_query_thread = MPI_Query_thread");
    ctx.check_eq(level, thread_level_of_mpi(provided), "gpuwire_query_thread = what MPI_Init_thread provided");
    let x = Buf::from_bytes(F64, &f64s(&[1.0]));
    ctx.ok(gpuwire_allreduce(ctx.world, x.h, x.h, SUM, st()), "allreduce");
    ctx.check_eq(read_f64s(&x), vec![np as f64], "allreduce SUM of 1.0");
    let (stale_comm, stale_buf) = (ctx.world, x.h);
    std::mem::forget(x); // its handle dies with gpuwire_finalize

    ctx.ok(gpuwire_finalize(), "gpuwire_finalize");
    ctx.check(mpi_initialized() && !mpi_finalized(), || "gpuwire_finalize finalized the program's MPI".into());
    let (rc, sum) = raw_allreduce_sum(2);
    ctx.check_eq((rc, sum), (0, 2 * np as i32), "the program's own MPI_Allreduce after gpuwire_finalize");
    let gone = Status::GPUWIRE_ERROR_ALREADY_FINALIZED;
    ctx.error(gpuwire_comm_free(stale_comm), gone, &["finalize"], "comm_free after gpuwire_finalize");
    ctx.error(gpuwire_buffer_free(stale_buf), gone, &["finalize"], "buffer_free after gpuwire_finalize");
    ctx.error(gpuwire_init(), gone, &["finalize"], "gpuwire_init after gpuwire_finalize");

    // SAFETY: the program's own MPI_Finalize; gpuwire holds no MPI object any more.
    let rc = unsafe { mpi::ffi::MPI_Finalize() };
    ctx.check_eq(rc, 0, "the program's MPI_Finalize after gpuwire_finalize");
    ctx.check(mpi_finalized(), || "MPI_Finalized is 0 after MPI_Finalize".into());
    // After MPI_Finalize any MPI call is an error (Open MPI aborts): gpuwire must not call MPI.
    ctx.error(gpuwire_comm_free(stale_comm), gone, &["finalize"], "comm_free after MPI_Finalize");
    ctx.error(gpuwire_buffer_free(stale_buf), gone, &["finalize"], "buffer_free after MPI_Finalize");
    ctx.error(gpuwire_init(), gone, &[], "gpuwire_init after MPI_Finalize");
    ctx.exit();
}

/// C10 (b): every kind of handle used after gpuwire_finalize (which finalized the MPI it
/// initialized) returns GPUWIRE_ERROR_ALREADY_FINALIZED without calling MPI (a call after
/// MPI_Finalize would abort the job).
fn c10b_handles_after_finalize(np: usize) -> ! {
    let ctx = Ctx::init(np);
    ctx.section("c10b_handles_after_finalize");
    let b = Buf::from_bytes(F64, &f64s(&[1.0, 2.0]));
    let v = b.view(1, 1);
    let mut sub = 0u64;
    ctx.ok(gpuwire_comm_split(ctx.world, 0, 0, &mut sub), "split");
    let mut req = 0u64;
    ctx.ok(gpuwire_isend(ctx.world, b.h, gpuwire::ffi::GPUWIRE_PROC_NULL, 0, st(), &mut req), "isend to PROC_NULL (not waited)");
    let (world, bh, vh) = (ctx.world, b.h, v.h);
    std::mem::forget(b);
    std::mem::forget(v);

    ctx.ok(gpuwire_finalize(), "gpuwire_finalize");
    ctx.check(mpi_finalized(), || "gpuwire initialized MPI, so gpuwire_finalize must finalize it".into());
    let gone = Status::GPUWIRE_ERROR_ALREADY_FINALIZED;
    let n = &["gpuwire_finalize"];
    ctx.error(gpuwire_comm_free(sub), gone, n, "comm_free");
    ctx.error(gpuwire_comm_free(world), gone, n, "comm_free of world");
    ctx.error(gpuwire_buffer_free(bh), gone, n, "buffer_free");
    ctx.error(gpuwire_buffer_free(vh), gone, n, "buffer_free of a view");
    let mut out = 0u64;
    ctx.error(gpuwire_comm_dup(world, &mut out), gone, n, "comm_dup");
    ctx.error(gpuwire_comm_split(world, 0, 0, &mut out), gone, n, "comm_split");
    ctx.error(gpuwire_buffer_view(bh, 0, 1, &mut out), gone, n, "buffer_view");
    ctx.error(gpuwire_buffer_alloc(1, F64 as i32, SPACE_HOST, -1, &mut out), gone, n, "buffer_alloc");
    ctx.error(gpuwire_comm_world(std::ptr::null(), &mut out), gone, n, "comm_world");
    ctx.error(gpuwire_allreduce(world, bh, bh, SUM, st()), gone, n, "allreduce");
    ctx.error(gpuwire_bcast(sub, bh, 0, st()), gone, n, "bcast");
    ctx.error(gpuwire_barrier(world, st()), gone, n, "barrier");
    ctx.error(gpuwire_send(world, bh, 0, 0, st()), gone, n, "send");
    let mut r = 0;
    ctx.error(gpuwire_comm_rank(world, &mut r), gone, n, "comm_rank");
    let mut q = req;
    ctx.error(gpuwire_wait(&mut q), gone, n, "wait on a request made before finalize");
    let mut null_req = 0u64;
    ctx.error(gpuwire_wait(&mut null_req), gone, n, "wait on GPUWIRE_REQUEST_NULL");
    let mut lvl = 0;
    ctx.error(gpuwire_query_thread(&mut lvl), gone, n, "query_thread");
    ctx.error(gpuwire_finalize(), gone, n, "gpuwire_finalize twice");
    ctx.error(gpuwire_init(), gone, n, "gpuwire_init after gpuwire_finalize");
    let mut flag = -1;
    ctx.ok(gpuwire_initialized(&mut flag), "gpuwire_initialized");
    ctx.check_eq(flag, 0, "gpuwire_initialized after finalize");
    // What needs no handle still works.
    let (mut a, mut b2, mut c) = (0, 0, 0);
    ctx.ok(gpuwire_get_version(&mut a, &mut b2, &mut c), "get_version after finalize");
    ctx.exit();
}

/// C10 (c): MPI not initialized by the program: gpuwire_init initializes it asking for
/// MPI_THREAD_MULTIPLE, owns it (owns_mpi 1), reports the level MPI provided, and
/// gpuwire_finalize finalizes it.
fn c10c_gpuwire_owns_mpi(np: usize) -> ! {
    let before = mpi_initialized();
    let mut flag = -1;
    let st0 = gpuwire_initialized(&mut flag);
    let mut lvl = -1;
    let early = gpuwire_query_thread(&mut lvl);
    let ctx = Ctx::init(np);
    ctx.section("c10c_gpuwire_owns_mpi");
    ctx.check(!before, || "MPI was initialized before gpuwire_init".into());
    ctx.ok(st0, "gpuwire_initialized before init");
    ctx.check_eq(flag, 0, "gpuwire_initialized before init");
    ctx.status(early, Status::GPUWIRE_ERROR_NOT_INITIALIZED, "gpuwire_query_thread before init");
    ctx.check(mpi_initialized(), || "gpuwire_init did not initialize MPI".into());
    let mut owns = -1;
    ctx.ok(gpuwire_owns_mpi(&mut owns), "gpuwire_owns_mpi");
    ctx.check_eq(owns, 1, "gpuwire_owns_mpi when gpuwire initialized MPI");
    let mut level = -1;
    ctx.ok(gpuwire_query_thread(&mut level), "gpuwire_query_thread");
    ctx.check_eq(level, thread_level_of_mpi(mpi_query_thread()), "gpuwire_query_thread = MPI_Query_thread");
    // Open MPI 4.1 and MPICH 4.0 both provide MPI_THREAD_MULTIPLE when asked.
    ctx.check_eq(level, ThreadLevel::GPUWIRE_THREAD_MULTIPLE as i32, "the thread level gpuwire asked for and got");
    let mut text = vec![0 as std::ffi::c_char; 1024];
    ctx.ok(gpuwire_comm_describe(ctx.world, text.as_mut_ptr(), text.len()), "describe");
    // SAFETY: NUL-terminated by gpuwire_comm_describe.
    let text = unsafe { std::ffi::CStr::from_ptr(text.as_ptr()) }.to_string_lossy().into_owned();
    ctx.check(text.contains("MPI_THREAD_MULTIPLE"), || format!("describe should name the thread level: {text:?}"));
    ctx.ok(gpuwire_comm_free(ctx.world), "free world");
    ctx.ok(gpuwire_finalize(), "gpuwire_finalize");
    ctx.check(mpi_finalized(), || "gpuwire initialized MPI, so gpuwire_finalize must finalize it".into());
    ctx.exit();
}

/// C10 (d): the program finalizes MPI itself while gpuwire still holds communicators: every later
/// gpuwire call returns GPUWIRE_ERROR_ALREADY_FINALIZED instead of calling MPI (which would abort).
fn c10d_program_finalizes_first(np: usize) -> ! {
    let mut provided: c_int = -1;
    // SAFETY: MPI is not initialized yet in this process.
    let rc = unsafe { mpi::ffi::MPI_Init_thread(std::ptr::null_mut(), std::ptr::null_mut(), mpi::ffi::RSMPI_THREAD_MULTIPLE, &mut provided) };
    if rc != 0 {
        die(None, "the program's MPI_Init_thread failed");
    }
    if gpuwire_init() != Status::GPUWIRE_SUCCESS {
        die(None, "gpuwire_init failed");
    }
    let ctx = Ctx::after_init(np);
    ctx.section("c10d_program_finalizes_first");
    let x = Buf::from_bytes(F64, &f64s(&[1.0]));
    ctx.ok(gpuwire_allreduce(ctx.world, x.h, x.h, SUM, st()), "allreduce before MPI_Finalize");
    let (world, xh) = (ctx.world, x.h);
    std::mem::forget(x);
    // SAFETY: the program's own MPI_Finalize, with gpuwire still initialized.
    let rc = unsafe { mpi::ffi::MPI_Finalize() };
    ctx.check_eq(rc, 0, "the program's MPI_Finalize");
    let gone = Status::GPUWIRE_ERROR_ALREADY_FINALIZED;
    ctx.error(gpuwire_allreduce(world, xh, xh, SUM, st()), gone, &["MPI_Finalize"], "allreduce after the program's MPI_Finalize");
    let mut d = 0u64;
    ctx.error(gpuwire_comm_dup(world, &mut d), gone, &["MPI_Finalize"], "comm_dup after MPI_Finalize");
    ctx.error(gpuwire_comm_world(std::ptr::null(), &mut d), gone, &["MPI_Finalize"], "comm_world after MPI_Finalize");
    ctx.error(gpuwire_barrier(world, st()), gone, &["MPI_Finalize"], "barrier after MPI_Finalize");
    ctx.error(gpuwire_finalize(), gone, &["MPI_Finalize"], "gpuwire_finalize after MPI_Finalize");
    ctx.exit();
}

/// One rank's configuration, color, collective or buffer differs from the others': every rank
/// returns an error (the faulty rank its own), nobody hangs, and the communicator still works.
fn one_rank_differs(np: usize) -> ! {
    let ctx = Ctx::init(np);
    ctx.section("one_rank_differs");
    let r = ctx.rank;
    let inv = Status::GPUWIRE_ERROR_INVALID_ARGUMENT;
    // A configuration that differs on rank 1.
    let mut cfg: gpuwire_config = unsafe { std::mem::zeroed() };
    ctx.ok(gpuwire_config_init(&mut cfg), "config_init");
    cfg.check = if r == 1 { 1 } else { 0 };
    let mut c = 0u64;
    ctx.error(gpuwire_comm_world(&cfg, &mut c), inv, &["different configurations", "check"], "checking on one rank only");
    // A timeout that differs on rank 1: the range is given in seconds.
    let mut cfgt: gpuwire_config = unsafe { std::mem::zeroed() };
    ctx.ok(gpuwire_config_init(&mut cfgt), "config_init");
    cfgt.timeout_seconds = if r == 1 { 2.5 } else { 0.25 };
    ctx.error(gpuwire_comm_world(&cfgt, &mut c), inv, &["different configurations", "timeout ranges from 0.25 s to 2.5 s"], "a timeout that differs on one rank");
    // Point-to-point matching (GPUWIRE_P2P_MATCHING) that differs on rank 1, and one valid
    // everywhere: a communicator whose host wildcards still match as MPI.
    let mut cfgm: gpuwire_config = unsafe { std::mem::zeroed() };
    ctx.ok(gpuwire_config_init(&mut cfgm), "config_init");
    cfgm.p2p_matching = if r == 1 { gpuwire::types::P2pMatching::GPUWIRE_P2P_MATCHING_MPI as i32 } else { 0 };
    ctx.error(gpuwire_comm_world(&cfgm, &mut c), inv, &["different configurations", "p2p_matching"], "point-to-point matching on one rank only");
    cfgm.p2p_matching = gpuwire::types::P2pMatching::GPUWIRE_P2P_MATCHING_MPI as i32;
    let mut cm = 0u64;
    ctx.ok(gpuwire_comm_world(&cfgm, &mut cm), "comm_world with p2p_matching = mpi");
    let mine = Buf::from_bytes(F64, &f64s(&[r as f64 + 0.5]));
    let got = Buf::from_bytes(F64, &f64s(&[0.0; 2]));
    let mut q = 0u64;
    ctx.ok(gpuwire_isend(cm, mine.h, ((r + 1) % np) as i32, 40 + r as i32, st(), &mut q), "isend (p2p_matching = mpi)");
    let mut rs = gpuwire_status_t { source: 55, tag: 55, count: 55, error: 55, cancelled: 55 };
    ctx.ok(gpuwire_recv_status(cm, got.h, gpuwire::types::GPUWIRE_ANY_SOURCE, gpuwire::types::GPUWIRE_ANY_TAG, st(), &mut rs), "wildcard recv_status (p2p_matching = mpi)");
    ctx.ok(gpuwire_wait(&mut q), "wait(isend)");
    let from = (r + np - 1) % np;
    ctx.check_eq((rs.source, rs.tag, rs.count), (from as i32, 40 + from as i32, 1), "wildcard status with p2p_matching = mpi");
    ctx.check_eq(read_f64s(&got), vec![from as f64 + 0.5, 0.0], "wildcard data with p2p_matching = mpi");
    ctx.ok(gpuwire_comm_free(cm), "comm_free");
    // An invalid configuration on rank 0 only.
    let mut cfg2: gpuwire_config = unsafe { std::mem::zeroed() };
    ctx.ok(gpuwire_config_init(&mut cfg2), "config_init");
    if r == 0 {
        cfg2.chunk_bytes = 1;
    }
    ctx.error(gpuwire_comm_world(&cfg2, &mut c), inv, &["chunk_bytes"], "an invalid chunk size on rank 0 only");
    // A bad split color on the last rank.
    let mut s = 0u64;
    let color = if r == np - 1 { -5 } else { 0 };
    ctx.error(gpuwire_comm_split(ctx.world, color, 0, &mut s), inv, &["color -5"], "a bad split color on one rank");
    // Checking mode: gather on rank 0, scatter elsewhere.
    let mut chk: gpuwire_config = unsafe { std::mem::zeroed() };
    ctx.ok(gpuwire_config_init(&mut chk), "config_init");
    chk.check = 1;
    let mut cc = 0u64;
    ctx.ok(gpuwire_comm_world(&chk, &mut cc), "comm_world with checking");
    let one = Buf::from_bytes(F64, &f64s(&[r as f64]));
    let all = Buf::from_bytes(F64, &vec![0u8; 8 * np]);
    let st_ = if r == 0 { gpuwire_gather(cc, one.h, all.h, 0, st()) } else { gpuwire_scatter(cc, 0, one.h, 0, st()) };
    ctx.error(st_, inv, &["different collectives"], "gather against scatter with checking on");
    ctx.check_eq(read_f64s(&all), vec![0.0; np], "nothing gathered");
    // Everything still works afterwards.
    let x = Buf::from_bytes(F64, &f64s(&[1.0]));
    ctx.ok(gpuwire_allreduce(cc, x.h, x.h, SUM, st()), "allreduce after the mismatches");
    ctx.check_eq(read_f64s(&x), vec![np as f64], "allreduce SUM of 1.0 after the mismatches");
    ctx.ok(gpuwire_comm_free(cc), "comm_free");
    // Buffers: a pointer range past the end of the address space, and device memory declared
    // where there is no CUDA driver.
    let mut b = 0u64;
    ctx.error(
        gpuwire_buffer_wrap(usize::MAX as *mut c_void, 4, F64 as i32, gpuwire::types::Space::GPUWIRE_SPACE_HOST as i32, &mut b),
        inv,
        &["address space"],
        "wrap of a range that wraps around",
    );
    if gpuwire::device::cuda_with_devices().is_err() {
        let mut h = [0.0f64; 4];
        ctx.error(
            gpuwire_buffer_wrap(h.as_mut_ptr().cast(), 4, F64 as i32, gpuwire::types::Space::GPUWIRE_SPACE_DEVICE as i32, &mut b),
            Status::GPUWIRE_ERROR_BACKEND_UNAVAILABLE,
            &["CUDA"],
            "wrap of declared device memory without a CUDA driver",
        );
    }
    ctx.finish();
}
