//! Counts past 2^31: every operation on 2^31 + 16 int8 on host memory, 2 ranks, one operation
//! per job (so that one job's memory is freed before the next starts; the largest, allgather
//! with 2^31 + 16 elements per rank, holds 8.6 GB over both ranks).
//!
//! Not part of `cargo test` (`test = false`): `make test-large` runs it, with a long timeout.
//!
//! Every block is filled with its own byte (memset) and unique values at sampled positions
//! (both ends of each block and one in every 16 MiB); a block is checked byte for byte (memcmp
//! of the runs between samples) and at every sample. Reductions (int8 SUM, which wraps) expect
//! the wrapping sum of the ranks' bytes, computed here.

mod common;

use std::ffi::c_void;

use common::*;
use gpuwire::Status;
use gpuwire::ffi::darray::*;
use gpuwire::ffi::ops::*;
use gpuwire::ffi::buffer::gpuwire_buffer_pointer;
use gpuwire::ffi::{GPUWIRE_PROC_NULL, GPUWIRE_REQUEST_NULL};
use gpuwire::types::{Dtype, Partition, ReduceOp};

/// Elements of every operation's message (int8).
const N: usize = (1 << 31) + 16;
const I8: Dtype = Dtype::GPUWIRE_INT8;
const STRIDE: usize = 16 << 20;

const OPS: [&str; 17] = [
    "p2p", "bcast", "reduce", "allreduce", "allgather", "allgatherv", "reduce_scatter", "alltoall", "gather", "scatter", "darray", "alltoallv", "gatherv", "scatterv",
    "reduce_scatterv", "reduce_scatter_big", "alltoall_big",
];

fn main() {
    if !is_child() {
        // The *_big jobs need twice the memory of the others (alltoall_big ~17 GB): only with
        // GPUWIRE_TEST_LARGE_ALL=1.
        let all = std::env::var("GPUWIRE_TEST_LARGE_ALL").as_deref() == Ok("1");
        let jobs = OPS.iter().filter(|o| all || !o.ends_with("_big")).map(|o| Job::new(*o, 2, *o)).collect();
        parent_main("mpi_large", jobs);
    }
    let (mode, np) = child_args();
    let ctx = Ctx::init(np);
    ctx.section(&format!("{mode}: {N} int8"));
    match mode.as_str() {
        "p2p" => p2p(&ctx),
        "bcast" => bcast(&ctx),
        "reduce" => reduce(&ctx),
        "allreduce" => allreduce(&ctx),
        "allgather" => allgather(&ctx, N),
        "allgatherv" => allgatherv(&ctx),
        "reduce_scatter" => reduce_scatter(&ctx, N / 2),
        "reduce_scatter_big" => reduce_scatter(&ctx, N),
        "alltoall" => alltoall(&ctx, N / 2),
        "alltoall_big" => alltoall(&ctx, N),
        "gather" => gather(&ctx),
        "scatter" => scatter(&ctx),
        "darray" => darray(&ctx),
        "alltoallv" => alltoallv(&ctx),
        "gatherv" => gatherv(&ctx),
        "scatterv" => scatterv(&ctx),
        "reduce_scatterv" => reduce_scatterv(&ctx),
        m => die(Some(ctx.rank), &format!("unknown mode {m}")),
    }
    ctx.finish();
}

fn st() -> *mut c_void {
    no_stream()
}

fn ptr(b: &Buf) -> *mut u8 {
    let mut p: *mut c_void = std::ptr::null_mut();
    assert_eq!(gpuwire_buffer_pointer(b.h, &mut p), Status::GPUWIRE_SUCCESS);
    p.cast()
}

/// The fill byte of block `k` (a rank's block, or a (from, to) pair's).
fn fill_of(k: usize) -> u8 {
    0x70u8.wrapping_add((k as u8).wrapping_mul(0x21))
}

/// The value of block `k` at sampled position `i`.
fn val(k: usize, i: usize) -> u8 {
    let x = (i as u64 ^ ((k as u64 + 1) << 40)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 56) as u8
}

/// Sampled positions of a block of `len`: both ends, one in every STRIDE, sorted.
fn samples(len: usize) -> Vec<usize> {
    let mut s: Vec<usize> = (0..len.min(64)).chain(len.saturating_sub(64)..len).collect();
    s.extend((1..len / STRIDE).map(|j| j * STRIDE + (j * 7919) % 4096).filter(|x| *x < len));
    s.sort_unstable();
    s.dedup();
    s
}

/// Writes block `k` (its fill byte, its samples) over `len` bytes at `p`.
fn fill(p: *mut u8, len: usize, k: usize) {
    // SAFETY: p holds len bytes (the callers' buffers).
    unsafe {
        std::ptr::write_bytes(p, fill_of(k), len);
        for i in samples(len) {
            *p.add(i) = val(k, i);
        }
    }
}

/// Checks `len` bytes at `p` against the expected fill byte and sample values.
fn check(ctx: &Ctx, p: *const u8, len: usize, fill: u8, sample: impl Fn(usize) -> u8, what: &str) {
    let ref_run = vec![fill; STRIDE + 8192];
    let mut bad: Vec<String> = Vec::new();
    let mut from = 0usize;
    let s = samples(len);
    for &i in s.iter().chain(std::iter::once(&len)) {
        // The run [from, i) holds the fill byte only.
        let mut a = from;
        while a < i && bad.len() < 4 {
            let n = (i - a).min(ref_run.len());
            // SAFETY: within the buffer.
            if unsafe { libc::memcmp(p.add(a).cast(), ref_run.as_ptr().cast(), n) } != 0 {
                let off = (a..a + n).find(|x| unsafe { *p.add(*x) } != fill).unwrap_or(a);
                bad.push(format!("byte {off} is {:#04x}, expected the fill {fill:#04x}", unsafe { *p.add(off) }));
            }
            a += n;
        }
        if i < len {
            // SAFETY: as above.
            let got = unsafe { *p.add(i) };
            if got != sample(i) && bad.len() < 4 {
                bad.push(format!("sample at byte {i} is {got:#04x}, expected {:#04x}", sample(i)));
            }
        }
        from = i + 1;
    }
    ctx.check(bad.is_empty(), || format!("{what} ({len} bytes): {}", bad.join("; ")));
}

/// Checks block `k` as `fill` wrote it.
fn check_block(ctx: &Ctx, p: *const u8, len: usize, k: usize, what: &str) {
    check(ctx, p, len, fill_of(k), |i| val(k, i), what);
}

/// Checks the wrapping sum over the ranks of block `k(r)` of each rank.
fn check_sum(ctx: &Ctx, p: *const u8, len: usize, ks: &[usize], what: &str) {
    let f = ks.iter().fold(0u8, |a, k| a.wrapping_add(fill_of(*k)));
    check(ctx, p, len, f, |i| ks.iter().fold(0u8, |a, k| a.wrapping_add(val(*k, i))), what);
}

fn p2p(ctx: &Ctx) {
    let r = ctx.rank;
    let b = Buf::new(I8, N);
    // send/recv 0 -> 1.
    if r == 0 {
        fill(ptr(&b), N, 0);
        ctx.ok(gpuwire_send(ctx.world, b.h, 1, 5, st()), "send of 2^31+16 int8");
    } else {
        ctx.ok(gpuwire_recv(ctx.world, b.h, 0, 5, st()), "recv of 2^31+16 int8");
        check_block(ctx, ptr(&b), N, 0, "recv");
    }
    // isend/irecv 1 -> 0.
    let mut req = GPUWIRE_REQUEST_NULL;
    if r == 1 {
        fill(ptr(&b), N, 1);
        ctx.ok(gpuwire_isend(ctx.world, b.h, 0, 6, st(), &mut req), "isend");
    } else {
        fill(ptr(&b), N, 7);
        ctx.ok(gpuwire_irecv(ctx.world, b.h, 1, 6, st(), &mut req), "irecv");
    }
    ctx.ok(gpuwire_wait(&mut req), "wait");
    if r == 0 {
        check_block(ctx, ptr(&b), N, 1, "irecv");
    }
    // sendrecv 0 -> 1 (the other side GPUWIRE_PROC_NULL).
    let tiny = Buf::new(I8, 16);
    if r == 0 {
        fill(ptr(&b), N, 2);
        ctx.ok(gpuwire_sendrecv(ctx.world, b.h, 1, 7, tiny.h, GPUWIRE_PROC_NULL, 7, st()), "sendrecv (send side)");
    } else {
        fill(ptr(&b), N, 7);
        ctx.ok(gpuwire_sendrecv(ctx.world, tiny.h, GPUWIRE_PROC_NULL, 7, b.h, 0, 7, st()), "sendrecv (receive side)");
        check_block(ctx, ptr(&b), N, 2, "sendrecv");
    }
}

fn bcast(ctx: &Ctx) {
    let b = Buf::new(I8, N);
    fill(ptr(&b), N, if ctx.rank == 1 { 1 } else { 5 });
    ctx.ok(gpuwire_bcast(ctx.world, b.h, 1, st()), "bcast from root 1");
    check_block(ctx, ptr(&b), N, 1, "bcast");
}

fn reduce(ctx: &Ctx) {
    // In place at root 1: MPICH before 4.1 takes the scratch path there, in many pieces.
    let b = Buf::new(I8, N);
    fill(ptr(&b), N, ctx.rank);
    let rh = if ctx.rank == 1 { b.h } else { 0 };
    ctx.ok(gpuwire_reduce(ctx.world, b.h, rh, ReduceOp::GPUWIRE_SUM as i32, 1, st()), "reduce SUM in place at root 1");
    if ctx.rank == 1 {
        check_sum(ctx, ptr(&b), N, &[0, 1], "reduce");
    } else {
        check_block(ctx, ptr(&b), N, 0, "reduce: the non-root's send buffer unchanged");
    }
}

fn allreduce(ctx: &Ctx) {
    let b = Buf::new(I8, N);
    fill(ptr(&b), N, ctx.rank);
    ctx.ok(gpuwire_allreduce(ctx.world, b.h, b.h, ReduceOp::GPUWIRE_SUM as i32, st()), "allreduce SUM in place");
    check_sum(ctx, ptr(&b), N, &[0, 1], "allreduce");
}

/// `n` elements per rank, in place (the send buffer is this rank's block of the receive buffer).
fn allgather(ctx: &Ctx, n: usize) {
    let all = Buf::new(I8, 2 * n);
    let mine = all.view(ctx.rank * n, n);
    fill(ptr(&mine), n, ctx.rank);
    ctx.ok(gpuwire_allgather(ctx.world, mine.h, all.h, st()), "allgather in place");
    for k in 0..2 {
        // SAFETY: block k of `all`.
        check_block(ctx, unsafe { ptr(&all).add(k * n) }, n, k, &format!("allgather block {k}"));
    }
}

/// Counts [2^31, 16]: rank 0's count and rank 1's displacement pass MPI's int. Once with a
/// separate send buffer, once in place.
fn allgatherv(ctx: &Ctx) {
    let counts: [i64; 2] = [1 << 31, 16];
    let displ = [0usize, 1 << 31];
    let all = Buf::new(I8, N);
    let me = ctx.rank;
    {
        let send = Buf::new(I8, counts[me] as usize);
        fill(ptr(&send), counts[me] as usize, me);
        ctx.ok(gpuwire_allgatherv(ctx.world, send.h, all.h, counts.as_ptr(), st()), "allgatherv [2^31, 16]");
    }
    for k in 0..2 {
        check_block(ctx, unsafe { ptr(&all).add(displ[k]) }, counts[k] as usize, k, &format!("allgatherv block {k}"));
    }
    fill(ptr(&all), N, 7);
    let mine = all.view(displ[me], counts[me] as usize);
    fill(ptr(&mine), counts[me] as usize, me + 2);
    ctx.ok(gpuwire_allgatherv(ctx.world, mine.h, all.h, counts.as_ptr(), st()), "allgatherv [2^31, 16] in place");
    for k in 0..2 {
        check_block(ctx, unsafe { ptr(&all).add(displ[k]) }, counts[k] as usize, k + 2, &format!("allgatherv in place, block {k}"));
    }
}

/// `n` result elements per rank (the input is 2n per rank).
fn reduce_scatter(ctx: &Ctx, n: usize) {
    let send = Buf::new(I8, 2 * n);
    let recv = Buf::new(I8, n);
    // Rank r's block j is block 2r + j.
    for j in 0..2 {
        fill(unsafe { ptr(&send).add(j * n) }, n, 2 * ctx.rank + j);
    }
    ctx.ok(gpuwire_reduce_scatter(ctx.world, send.h, recv.h, ReduceOp::GPUWIRE_SUM as i32, st()), "reduce_scatter SUM");
    let j = ctx.rank;
    check_sum(ctx, ptr(&recv), n, &[j, 2 + j], "reduce_scatter");
}

/// `n` elements per pair of ranks, in place.
fn alltoall(ctx: &Ctx, n: usize) {
    let b = Buf::new(I8, 2 * n);
    // Block for rank t from rank r: 2r + t.
    for t in 0..2 {
        fill(unsafe { ptr(&b).add(t * n) }, n, 2 * ctx.rank + t);
    }
    ctx.ok(gpuwire_alltoall(ctx.world, b.h, b.h, st()), "alltoall in place");
    for s in 0..2 {
        check_block(ctx, unsafe { ptr(&b).add(s * n) }, n, 2 * s + ctx.rank, &format!("alltoall block from rank {s}"));
    }
}

/// N elements per rank to root 1, in place at the root.
fn gather(ctx: &Ctx) {
    if ctx.rank == 1 {
        let all = Buf::new(I8, 2 * N);
        fill(unsafe { ptr(&all).add(N) }, N, 1);
        let mine = all.view(N, N);
        ctx.ok(gpuwire_gather(ctx.world, mine.h, all.h, 1, st()), "gather in place at root 1");
        for k in 0..2 {
            check_block(ctx, unsafe { ptr(&all).add(k * N) }, N, k, &format!("gather block {k}"));
        }
    } else {
        let mine = Buf::new(I8, N);
        fill(ptr(&mine), N, 0);
        ctx.ok(gpuwire_gather(ctx.world, mine.h, 0, 1, st()), "gather (non-root)");
    }
}

/// N elements per rank from root 1, in place at the root.
fn scatter(ctx: &Ctx) {
    if ctx.rank == 1 {
        let all = Buf::new(I8, 2 * N);
        for k in 0..2 {
            fill(unsafe { ptr(&all).add(k * N) }, N, k);
        }
        let mine = all.view(N, N);
        ctx.ok(gpuwire_scatter(ctx.world, all.h, mine.h, 1, st()), "scatter in place at root 1");
        check_block(ctx, ptr(&mine), N, 1, "scatter: the root's block");
        check_block(ctx, ptr(&all), N, 0, "scatter: the root's send buffer unchanged");
    } else {
        let mine = Buf::new(I8, N);
        fill(ptr(&mine), N, 7);
        ctx.ok(gpuwire_scatter(ctx.world, 0, mine.h, 1, st()), "scatter (non-root)");
        check_block(ctx, ptr(&mine), N, 0, "scatter");
    }
}

/// A SCATTER distributed array of N int8 split [2^31, 16] (rank 1's block starts past MPI's
/// int): allgather to every rank, gather to root 1.
fn darray(ctx: &Ctx) {
    let lens = [1usize << 31, 16];
    let starts = [0usize, 1 << 31];
    let mut d = 0u64;
    ctx.ok(
        gpuwire_darray_create(ctx.world, N as i64, lens[ctx.rank] as i64, I8 as i32, SPACE_HOST, Partition::GPUWIRE_PARTITION_SCATTER as i32, &mut d),
        "darray_create of 2^31+16 int8 split [2^31, 16]",
    );
    let mut local: *mut c_void = std::ptr::null_mut();
    ctx.ok(gpuwire_darray_data(d, &mut local), "darray_data");
    fill(local.cast(), lens[ctx.rank], ctx.rank);
    let mut dst: Vec<u8> = Vec::with_capacity(N);
    let p = dst.as_mut_ptr();
    fill(p, N, 7);
    ctx.ok(gpuwire_darray_allgather(d, p.cast(), st()), "darray_allgather");
    for k in 0..2 {
        check_block(ctx, unsafe { p.add(starts[k]) }, lens[k], k, &format!("darray_allgather block {k}"));
    }
    fill(p, N, 7);
    ctx.ok(gpuwire_darray_gather(d, p.cast(), 1, st()), "darray_gather to root 1");
    if ctx.rank == 1 {
        for k in 0..2 {
            check_block(ctx, unsafe { p.add(starts[k]) }, lens[k], k, &format!("darray_gather block {k}"));
        }
    }
    ctx.ok(gpuwire_darray_free(d), "darray_free");
}

/// Rank 0 sends 2^31 elements (from displacement 16) to rank 1 and 16 to itself; rank 1 sends
/// 16 to each. Rank 1 receives rank 0's block at displacement 0 and its own at 2^31 + 16 (past
/// MPI's int); rank 0 receives at 0 and 16. Then in place on rank 1's side too.
fn alltoallv(ctx: &Ctx) {
    let big = 1usize << 31;
    let me = ctx.rank;
    // (count, displacement) of block j sent by rank `from`, and received by `to`.
    let sent = |from: usize, j: usize| -> (usize, usize) { if from == 0 { if j == 1 { (big, 16) } else { (16, 0) } } else { (16, 16 * j) } };
    let got = |to: usize, j: usize| -> usize { if to == 0 { 16 * j } else if j == 0 { 0 } else { big + 16 } };
    let slen = if me == 0 { big + 16 } else { 32 };
    let rlen = if me == 0 { 32 } else { big + 32 };
    let send = Buf::new(I8, slen);
    for j in 0..2 {
        let (n, d) = sent(me, j);
        fill(unsafe { ptr(&send).add(d) }, n, 2 * me + j);
    }
    let recv = Buf::new(I8, rlen);
    let sc: Vec<i64> = (0..2).map(|j| sent(me, j).0 as i64).collect();
    let sd: Vec<i64> = (0..2).map(|j| sent(me, j).1 as i64).collect();
    let rc: Vec<i64> = (0..2).map(|j| sent(j, me).0 as i64).collect();
    let rd: Vec<i64> = (0..2).map(|j| got(me, j) as i64).collect();
    ctx.ok(gpuwire_alltoallv(ctx.world, send.h, sc.as_ptr(), sd.as_ptr(), recv.h, rc.as_ptr(), rd.as_ptr(), st()), "alltoallv [2^31, 16]");
    for j in 0..2 {
        check_block(ctx, unsafe { ptr(&recv).add(got(me, j)) }, sent(j, me).0, 2 * j + me, &format!("alltoallv block from rank {j}"));
    }
}

/// Root 1 gathers rank 0's 2^31 elements at displacement 16 and its own 16 at 0 (in place).
fn gatherv(ctx: &Ctx) {
    let big = 1usize << 31;
    let counts: [i64; 2] = [big as i64, 16];
    let displs: [i64; 2] = [16, 0];
    if ctx.rank == 1 {
        let all = Buf::new(I8, big + 16);
        fill(ptr(&all), 16, 1);
        let mine = all.view(0, 16);
        ctx.ok(gpuwire_gatherv(ctx.world, mine.h, all.h, counts.as_ptr(), displs.as_ptr(), 1, st()), "gatherv in place at root 1");
        check_block(ctx, unsafe { ptr(&all).add(16) }, big, 0, "gatherv block 0");
        check_block(ctx, ptr(&all), 16, 1, "gatherv block 1");
    } else {
        let mine = Buf::new(I8, big);
        fill(ptr(&mine), big, 0);
        ctx.ok(gpuwire_gatherv(ctx.world, mine.h, 0, std::ptr::null(), std::ptr::null(), 1, st()), "gatherv (non-root)");
    }
}

/// Root 1 scatters 2^31 elements from displacement 16 to rank 0 and keeps its own 16 at 0.
fn scatterv(ctx: &Ctx) {
    let big = 1usize << 31;
    let counts: [i64; 2] = [big as i64, 16];
    let displs: [i64; 2] = [16, 0];
    if ctx.rank == 1 {
        let all = Buf::new(I8, big + 16);
        fill(ptr(&all), 16, 1);
        fill(unsafe { ptr(&all).add(16) }, big, 0);
        let mine = Buf::new(I8, 16);
        ctx.ok(gpuwire_scatterv(ctx.world, all.h, counts.as_ptr(), displs.as_ptr(), mine.h, 1, st()), "scatterv from root 1");
        check_block(ctx, ptr(&mine), 16, 1, "scatterv: the root's block");
    } else {
        let mine = Buf::new(I8, big);
        fill(ptr(&mine), big, 7);
        ctx.ok(gpuwire_scatterv(ctx.world, 0, std::ptr::null(), std::ptr::null(), mine.h, 1, st()), "scatterv (non-root)");
        check_block(ctx, ptr(&mine), big, 0, "scatterv");
    }
}

/// Counts [2^31, 16] (the sum passes MPI's int: one reduce per block), in place.
fn reduce_scatterv(ctx: &Ctx) {
    let big = 1usize << 31;
    let counts: [i64; 2] = [big as i64, 16];
    let b = Buf::new(I8, N);
    fill(ptr(&b), big, 2 * ctx.rank);
    fill(unsafe { ptr(&b).add(big) }, 16, 2 * ctx.rank + 1);
    ctx.ok(gpuwire_reduce_scatterv(ctx.world, b.h, b.h, counts.as_ptr(), ReduceOp::GPUWIRE_SUM as i32, st()), "reduce_scatterv [2^31, 16] in place");
    let j = ctx.rank;
    check_sum(ctx, ptr(&b), counts[j] as usize, &[j, 2 + j], "reduce_scatterv");
}
