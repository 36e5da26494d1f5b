//! Distributed arrays (gpuwire_darray_*) through the C ABI, on 1, 2 and 3 ranks (and 3 ranks in
//! checking mode): partitions (default, user-given, a rank with no elements, wrong sums),
//! set_global / allgather / gather for every datatype, fill, axpy, scale, dot (complex: dotc),
//! norms, sum, min, max, redistribution, halo exchange of N-D arrays, split communicators, bad
//! input, and handles after gpuwire_finalize. Host memory (the device versions are in
//! tests/gpu_darray.rs).
//!
//! Every expected value is computed here, serially, from the global data; values are chosen so
//! that sums and products are exact in every datatype, so results compare exactly (the 2-norm,
//! a square root, to a relative 1e-15).

mod common;

use std::ffi::c_void;

use common::*;
use gpuwire::Status;
use gpuwire::ffi::buffer::*;
use gpuwire::ffi::comm::*;
use gpuwire::ffi::darray::*;
use gpuwire::ffi::lifecycle::*;
use gpuwire::ffi::{GPUWIRE_DECIDE, GPUWIRE_UNDEFINED};
use gpuwire::types::{Dtype, NormKind, Partition, Space};

const SCATTER: i32 = Partition::GPUWIRE_PARTITION_SCATTER as i32;
const BROADCAST: i32 = Partition::GPUWIRE_PARTITION_BROADCAST as i32;
const HOST: i32 = Space::GPUWIRE_SPACE_HOST as i32;
const F64: Dtype = Dtype::GPUWIRE_FLOAT64;

fn main() {
    if !is_child() {
        parent_main(
            "mpi_darray",
            vec![
                Job::new("np1", 1, "plain"),
                Job::new("np2", 2, "plain"),
                Job::new("np3", 3, "plain"),
                Job::new("np3_checking", 3, "checking").with_env("GPUWIRE_CHECK", "1"),
            ],
        );
    }
    let (mode, np) = child_args();
    let ctx = Ctx::init(np);
    partitions(&ctx);
    creation_errors(&ctx);
    queries_and_views(&ctx);
    set_and_gather(&ctx);
    fill(&ctx);
    arithmetic(&ctx);
    reductions(&ctx);
    redistribute(&ctx);
    halo(&ctx);
    split_communicators(&ctx);
    bad_input(&ctx);
    if mode == "checking" {
        checking_mode(&ctx);
    }
    after_finalize(ctx);
}

fn st() -> *mut c_void {
    no_stream()
}

// ---- helpers -------------------------------------------------------------------------------

/// The default split of n over p: (offset, length) per rank.
fn split(n: usize, p: usize) -> Vec<(usize, usize)> {
    let (q, rem) = (n / p, n % p);
    let mut off = 0;
    (0..p)
        .map(|r| {
            let len = q + (r < rem) as usize;
            off += len;
            (off - len, len)
        })
        .collect()
}

/// A user-given split with a rank of no elements for p = 3: rank 0 gets 1, the last rank the
/// rest, the others 0 (p = 1: everything).
fn custom(n: usize, p: usize, r: usize) -> usize {
    if p == 1 {
        n
    } else if r == 0 {
        1.min(n)
    } else if r == p - 1 {
        n - 1.min(n)
    } else {
        0
    }
}

fn create(comm: u64, n: usize, local: i64, d: Dtype, part: i32) -> (Status, u64) {
    let mut h = 0u64;
    let s = gpuwire_darray_create(comm, n as i64, local, d as i32, HOST, part, &mut h);
    (s, h)
}

fn make(ctx: &Ctx, comm: u64, n: usize, local: i64, d: Dtype, part: i32, what: &str) -> u64 {
    let (s, h) = create(comm, n, local, d, part);
    if !ctx.ok(s, &format!("create {what}")) {
        die(Some(ctx.rank), &format!("cannot create {what}"));
    }
    h
}

fn make_nd(ctx: &Ctx, comm: u64, shape: &[i64], local_rows: i64, halo: i64, d: Dtype, part: i32, what: &str) -> u64 {
    let mut h = 0u64;
    let s = gpuwire_darray_create_nd(comm, shape.len() as i32, shape.as_ptr(), local_rows, halo, d as i32, HOST, part, &mut h);
    if !ctx.ok(s, &format!("create_nd {what}")) {
        die(Some(ctx.rank), &format!("cannot create {what}"));
    }
    h
}

fn free(ctx: &Ctx, h: u64) {
    ctx.ok(gpuwire_darray_free(h), "gpuwire_darray_free");
}

fn i64_of(f: impl FnOnce(&mut i64) -> Status, ctx: &Ctx, what: &str) -> i64 {
    let mut v = -99;
    ctx.ok(f(&mut v), what);
    v
}

/// Global element i of test data `salt` for datatype d: small values, exact in every type.
fn val(d: Dtype, i: usize, salt: usize) -> V {
    let k = i * 7 + salt * 3;
    if d.is_integer() {
        let v = (k % 23) as i128 - 11;
        return V::I(if is_signed(d) { v } else { v + 11 });
    }
    let re = (k % 13) as f64 - 6.0 + 0.5 * ((i + salt) % 2) as f64;
    if d.is_complex() { V::C(re, ((k + 5) % 9) as f64 - 4.0) } else { V::F(re) }
}

fn global(d: Dtype, n: usize, salt: usize) -> Vec<V> {
    (0..n).map(|i| val(d, i, salt)).collect()
}

fn set(ctx: &Ctx, h: u64, d: Dtype, vals: &[V]) {
    let bytes = encode_all(d, vals);
    let p = if bytes.is_empty() { std::ptr::null() } else { bytes.as_ptr().cast() };
    ctx.ok(gpuwire_darray_set_global(h, p, st()), "set_global");
}

fn gather_all(ctx: &Ctx, h: u64, d: Dtype, n: usize) -> Vec<V> {
    let mut out = vec![SENTINEL; n * d.size()];
    let p = if out.is_empty() { std::ptr::null_mut() } else { out.as_mut_ptr().cast() };
    ctx.ok(gpuwire_darray_allgather(h, p, st()), "allgather");
    decode_all(d, &out)
}

fn f64_elem(v: V) -> f64 {
    match v {
        V::F(x) => x,
        V::I(x) => x as f64,
        V::C(..) | V::P(..) => panic!("test bug: complex or pair where a real is expected"),
    }
}

// ---- partitions ----------------------------------------------------------------------------

fn partitions(ctx: &Ctx) {
    ctx.section("partitions: default, user-given, zero-length ranks");
    let (r, p) = (ctx.rank, ctx.size);
    for n in [0usize, 1, 2, 7, 10] {
        let h = make(ctx, ctx.world, n, GPUWIRE_DECIDE, F64, SCATTER, &format!("default n={n}"));
        let want = split(n, p);
        ctx.check_eq(i64_of(|v| gpuwire_darray_global_len(h, v), ctx, "global_len"), n as i64, "global length");
        ctx.check_eq(i64_of(|v| gpuwire_darray_local_len(h, v), ctx, "local_len"), want[r].1 as i64, &format!("local length of n={n}"));
        ctx.check_eq(i64_of(|v| gpuwire_darray_global_offset(h, v), ctx, "offset"), want[r].0 as i64, &format!("global offset of n={n}"));
        let mut lens = vec![-1i64; p];
        ctx.ok(gpuwire_darray_local_lens(h, lens.as_mut_ptr()), "local_lens");
        ctx.check_eq(lens, want.iter().map(|w| w.1 as i64).collect::<Vec<_>>(), &format!("all local lengths of n={n} (first n mod P ranks one more)"));
        free(ctx, h);

        let mine = custom(n, p, r);
        let h = make(ctx, ctx.world, n, mine as i64, F64, SCATTER, &format!("custom n={n}"));
        let lens_want: Vec<i64> = (0..p).map(|q| custom(n, p, q) as i64).collect();
        let mut lens = vec![-1i64; p];
        ctx.ok(gpuwire_darray_local_lens(h, lens.as_mut_ptr()), "local_lens");
        ctx.check_eq(lens, lens_want.clone(), &format!("user-given local lengths of n={n}"));
        ctx.check_eq(i64_of(|v| gpuwire_darray_local_len(h, v), ctx, "local_len"), mine as i64, "user-given local length");
        ctx.check_eq(
            i64_of(|v| gpuwire_darray_global_offset(h, v), ctx, "offset"),
            lens_want[..r].iter().sum::<i64>(),
            "offset of a user-given split",
        );
        free(ctx, h);

        let h = make(ctx, ctx.world, n, GPUWIRE_DECIDE, F64, BROADCAST, &format!("broadcast n={n}"));
        ctx.check_eq(i64_of(|v| gpuwire_darray_local_len(h, v), ctx, "local_len"), n as i64, "BROADCAST: every rank holds everything");
        ctx.check_eq(i64_of(|v| gpuwire_darray_global_offset(h, v), ctx, "offset"), 0, "BROADCAST offset");
        let mut lens = vec![-1i64; p];
        ctx.ok(gpuwire_darray_local_lens(h, lens.as_mut_ptr()), "local_lens");
        ctx.check_eq(lens, vec![n as i64; p], "BROADCAST local lengths");
        free(ctx, h);
    }
}

fn creation_errors(ctx: &Ctx) {
    ctx.section("creation errors are returned on every rank");
    let (r, p) = (ctx.rank, ctx.size);
    let mut h = 77u64;
    // Lengths that do not add up: every rank says 4 of 10.
    let s = gpuwire_darray_create(ctx.world, 10, 4, F64 as i32, HOST, SCATTER, &mut h);
    ctx.error(s, Status::GPUWIRE_ERROR_COUNT_MISMATCH, &["add up to", "10"], "local lengths that do not add up to the global length");
    ctx.check_eq(h, 77, "out untouched on failure");
    if p > 1 {
        let local = if r == 0 { GPUWIRE_DECIDE } else { 5 };
        let s = gpuwire_darray_create(ctx.world, 10, local, F64 as i32, HOST, SCATTER, &mut h);
        ctx.error(s, Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["GPUWIRE_DECIDE"], "GPUWIRE_DECIDE on rank 0 only");
        let n = if r == 0 { 10 } else { 11 };
        let s = gpuwire_darray_create(ctx.world, n, GPUWIRE_DECIDE, F64 as i32, HOST, SCATTER, &mut h);
        ctx.error(s, Status::GPUWIRE_ERROR_COUNT_MISMATCH, &["shape"], "ranks with different global lengths");
        let d = if r == 0 { F64 } else { Dtype::GPUWIRE_FLOAT32 };
        let s = gpuwire_darray_create(ctx.world, 10, GPUWIRE_DECIDE, d as i32, HOST, SCATTER, &mut h);
        ctx.error(s, Status::GPUWIRE_ERROR_DTYPE_MISMATCH, &["float"], "ranks with different datatypes");
        let part = if r == 0 { SCATTER } else { BROADCAST };
        let s = gpuwire_darray_create(ctx.world, 10, GPUWIRE_DECIDE, F64 as i32, HOST, part, &mut h);
        ctx.error(s, Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["partition"], "ranks with different partitions");
    }
    // One rank's bad argument: every rank returns that error.
    let n = if r == 0 { -3 } else { 10 };
    let s = gpuwire_darray_create(ctx.world, n, GPUWIRE_DECIDE, F64 as i32, HOST, SCATTER, &mut h);
    ctx.error(s, Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["negative"], "a negative global length on rank 0");
    let dt = if r == p - 1 { 99 } else { F64 as i32 };
    let s = gpuwire_darray_create(ctx.world, 10, GPUWIRE_DECIDE, dt, HOST, SCATTER, &mut h);
    ctx.error(s, Status::GPUWIRE_ERROR_UNSUPPORTED_DTYPE, &["99"], "datatype code 99 on the last rank");
    let s = gpuwire_darray_create(ctx.world, 10, GPUWIRE_DECIDE, F64 as i32, HOST, 7, &mut h);
    ctx.error(s, Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["partition code 7"], "partition code 7");
    let s = gpuwire_darray_create(ctx.world, 10, -2, F64 as i32, HOST, SCATTER, &mut h);
    ctx.error(s, Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["negative"], "local length -2");
    let s = gpuwire_darray_create(ctx.world, 10, GPUWIRE_DECIDE, F64 as i32, Space::GPUWIRE_SPACE_AUTO as i32, SCATTER, &mut h);
    ctx.error(s, Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["AUTO"], "space AUTO");
    let s = gpuwire_darray_create(ctx.world, 10, GPUWIRE_DECIDE, F64 as i32, Space::GPUWIRE_SPACE_DEVICE as i32, SCATTER, &mut h);
    ctx.error(s, Status::GPUWIRE_ERROR_BACKEND_UNAVAILABLE, &["HOST"], "device memory on a communicator whose backend is HOST (no GPU here)");
    let s = gpuwire_darray_create(ctx.world, 10, 3, F64 as i32, HOST, BROADCAST, &mut h);
    ctx.error(s, Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["BROADCAST"], "a local length on a BROADCAST array");
    let out: *mut u64 = if r == 0 { std::ptr::null_mut() } else { &mut h };
    let s = gpuwire_darray_create(ctx.world, 10, GPUWIRE_DECIDE, F64 as i32, HOST, SCATTER, out);
    ctx.error(s, Status::GPUWIRE_ERROR_NULL_ARGUMENT, &["out"], "out NULL on rank 0");
    let shape = [4i64, 3];
    let s = gpuwire_darray_create_nd(ctx.world, 2, shape.as_ptr(), GPUWIRE_DECIDE, 1, F64 as i32, HOST, BROADCAST, &mut h);
    ctx.error(s, Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["halo"], "a halo on a BROADCAST array");
    let s = gpuwire_darray_create_nd(ctx.world, 0, shape.as_ptr(), GPUWIRE_DECIDE, 0, F64 as i32, HOST, SCATTER, &mut h);
    ctx.error(s, Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["ndim"], "ndim 0");
    let s = gpuwire_darray_create_nd(ctx.world, 2, std::ptr::null(), GPUWIRE_DECIDE, 0, F64 as i32, HOST, SCATTER, &mut h);
    ctx.error(s, Status::GPUWIRE_ERROR_NULL_ARGUMENT, &["shape"], "shape NULL");
    let bad = [4i64, -3];
    let s = gpuwire_darray_create_nd(ctx.world, 2, bad.as_ptr(), GPUWIRE_DECIDE, 0, F64 as i32, HOST, SCATTER, &mut h);
    ctx.error(s, Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["shape[1]"], "a negative dimension");
    if p > 1 {
        let other = [4i64, 3 + (r % 2) as i64];
        let s = gpuwire_darray_create_nd(ctx.world, 2, other.as_ptr(), GPUWIRE_DECIDE, 0, F64 as i32, HOST, SCATTER, &mut h);
        ctx.error(s, Status::GPUWIRE_ERROR_COUNT_MISMATCH, &["shape"], "ranks with different row lengths");
    }
    ctx.error(
        gpuwire_darray_create(0, 10, GPUWIRE_DECIDE, F64 as i32, HOST, SCATTER, &mut h),
        Status::GPUWIRE_ERROR_INVALID_HANDLE,
        &["NULL"],
        "the NULL communicator",
    );
    ctx.check_eq(h, 77, "out untouched after every failed create");
    // The communicator still works after all that.
    let h = make(ctx, ctx.world, 5, GPUWIRE_DECIDE, F64, SCATTER, "after the errors");
    free(ctx, h);
}

fn queries_and_views(ctx: &Ctx) {
    ctx.section("queries, data pointer, views");
    let (r, p) = (ctx.rank, ctx.size);
    let shape = [7i64, 3, 2];
    let h = make_nd(ctx, ctx.world, &shape, GPUWIRE_DECIDE, 2, F64, SCATTER, "7x3x2 halo 2");
    let rows = split(7, p)[r].1;
    let mut nd = 0;
    ctx.ok(gpuwire_darray_ndim(h, &mut nd), "ndim");
    ctx.check_eq(nd, 3, "ndim");
    let mut sh = [0i64; 3];
    ctx.ok(gpuwire_darray_shape(h, sh.as_mut_ptr()), "shape");
    ctx.check_eq(sh, shape, "global shape");
    ctx.ok(gpuwire_darray_local_shape(h, sh.as_mut_ptr()), "local_shape");
    ctx.check_eq(sh, [rows as i64, 3, 2], "local shape");
    ctx.check_eq(i64_of(|v| gpuwire_darray_halo(h, v), ctx, "halo"), 2, "halo rows");
    ctx.check_eq(i64_of(|v| gpuwire_darray_local_len(h, v), ctx, "local_len"), rows as i64 * 6, "local length in elements");
    ctx.check_eq(i64_of(|v| gpuwire_darray_global_offset(h, v), ctx, "offset"), split(7, p)[r].0 as i64 * 6, "offset in elements");
    let (mut dt, mut sp, mut pa) = (-1, -1, -1);
    ctx.ok(gpuwire_darray_dtype(h, &mut dt), "dtype");
    ctx.ok(gpuwire_darray_space(h, &mut sp), "space");
    ctx.ok(gpuwire_darray_partition(h, &mut pa), "partition");
    ctx.check_eq((dt, sp, pa), (F64 as i32, HOST, SCATTER), "dtype, space, partition");

    // Views: the owned elements, and the storage with its ghost rows.
    let (mut local, mut whole) = (0u64, 0u64);
    ctx.ok(gpuwire_darray_local(h, &mut local), "local view");
    ctx.ok(gpuwire_darray_local_with_halo(h, &mut whole), "view with halo");
    let mut count = 0;
    ctx.ok(gpuwire_buffer_count(local, &mut count), "count of the local view");
    ctx.check_eq(count, rows as i64 * 6, "the local view holds the owned elements");
    ctx.ok(gpuwire_buffer_count(whole, &mut count), "count of the whole view");
    ctx.check_eq(count, (rows as i64 + 4) * 6, "the whole view holds 2 ghost rows above and below");
    let (mut pl, mut pw, mut pd) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    ctx.ok(gpuwire_buffer_pointer(local, &mut pl), "pointer");
    ctx.ok(gpuwire_buffer_pointer(whole, &mut pw), "pointer");
    ctx.ok(gpuwire_darray_data(h, &mut pd), "data");
    ctx.check(pd == pl && pd as usize == pw as usize + 2 * 6 * 8, || format!("data {pd:?}, local view {pl:?}, whole view {pw:?}: data = whole + 2 rows"));
    // Writing through the data pointer is what allgather sees.
    let data = pd.cast::<f64>();
    for i in 0..rows * 6 {
        // SAFETY: rows x 6 owned float64 elements.
        unsafe { *data.add(i) = (split(7, p)[r].0 * 6 + i) as f64 };
    }
    let all = gather_all(ctx, h, F64, 42);
    ctx.check_eq(all, (0..42).map(|i| V::F(i as f64)).collect::<Vec<_>>(), "values written through gpuwire_darray_data, allgathered");
    ctx.ok(gpuwire_buffer_free(local), "free view");
    // The view keeps the memory alive after the array is freed.
    free(ctx, h);
    let mut c = 0;
    ctx.ok(gpuwire_buffer_count(whole, &mut c), "a view outlives its array");
    ctx.ok(gpuwire_buffer_free(whole), "free view");
    ctx.error(gpuwire_darray_free(h), Status::GPUWIRE_ERROR_INVALID_HANDLE, &["freed"], "free twice");
    let mut v = 0;
    ctx.error(gpuwire_darray_local_len(h, &mut v), Status::GPUWIRE_ERROR_INVALID_HANDLE, &["freed"], "query a freed array");
    ctx.error(gpuwire_darray_local_len(0, &mut v), Status::GPUWIRE_ERROR_INVALID_HANDLE, &["NULL"], "the NULL array");
    ctx.error(gpuwire_darray_local_len(ctx.world, &mut v), Status::GPUWIRE_ERROR_INVALID_HANDLE, &["communicator handle"], "a communicator handle");
    let h = make(ctx, ctx.world, 4, GPUWIRE_DECIDE, F64, SCATTER, "for NULL out-parameters");
    ctx.error(gpuwire_darray_local_len(h, std::ptr::null_mut()), Status::GPUWIRE_ERROR_NULL_ARGUMENT, &["len"], "NULL out-parameter");
    ctx.error(gpuwire_darray_local_lens(h, std::ptr::null_mut()), Status::GPUWIRE_ERROR_NULL_ARGUMENT, &["lens"], "NULL lens");
    free(ctx, h);
}

// ---- data movement -------------------------------------------------------------------------

fn set_and_gather(ctx: &Ctx) {
    ctx.section("set_global, allgather, gather: every datatype, even and uneven splits");
    let (r, p) = (ctx.rank, ctx.size);
    for d in Dtype::ALL {
        for n in [10usize, 2] {
            for (how, local) in [("default", GPUWIRE_DECIDE), ("custom", custom(n, p, r) as i64)] {
                let what = format!("{} n={n} {how}", d.name());
                let h = make(ctx, ctx.world, n, local, d, SCATTER, &what);
                let bytes = pattern(seed(&[d as usize, n, 1]), n * d.size());
                ctx.ok(gpuwire_darray_set_global(h, bytes.as_ptr().cast(), st()), "set_global");
                let mut out = vec![SENTINEL; bytes.len()];
                ctx.ok(gpuwire_darray_allgather(h, out.as_mut_ptr().cast(), st()), "allgather");
                check_bytes(ctx, d, &out, &bytes, &format!("{what}: allgather after set_global"));
                let root = (p - 1) as i32;
                let mut out = vec![SENTINEL; bytes.len()];
                let dst = if r as i32 == root { out.as_mut_ptr().cast() } else { std::ptr::null_mut() };
                ctx.ok(gpuwire_darray_gather(h, dst, root, st()), "gather");
                let want = if r as i32 == root { bytes.clone() } else { sentinel(bytes.len()) };
                check_bytes(ctx, d, &out, &want, &format!("{what}: gather to rank {root}"));
                free(ctx, h);
            }
        }
        // BROADCAST: every rank passes other data; rank 0's arrives everywhere.
        let n = 6;
        let h = make(ctx, ctx.world, n, GPUWIRE_DECIDE, d, BROADCAST, "broadcast");
        let mine = pattern(seed(&[d as usize, r, 2]), n * d.size());
        let rank0 = pattern(seed(&[d as usize, 0, 2]), n * d.size());
        let src = if r == 0 { mine.as_ptr().cast() } else if r == 1 { std::ptr::null() } else { mine.as_ptr().cast() };
        ctx.ok(gpuwire_darray_set_global(h, src, st()), "set_global BROADCAST (rank 1 passes NULL)");
        let mut out = vec![SENTINEL; n * d.size()];
        ctx.ok(gpuwire_darray_allgather(h, out.as_mut_ptr().cast(), st()), "allgather BROADCAST");
        check_bytes(ctx, d, &out, &rank0, &format!("{}: BROADCAST holds rank 0's data on every rank", d.name()));
        let mut out = vec![SENTINEL; n * d.size()];
        ctx.ok(gpuwire_darray_gather(h, if r == 0 { out.as_mut_ptr().cast() } else { std::ptr::null_mut() }, 0, st()), "gather BROADCAST");
        if r == 0 {
            check_bytes(ctx, d, &out, &rank0, "gather of a BROADCAST array");
        }
        free(ctx, h);
    }
    // An empty array.
    let h = make(ctx, ctx.world, 0, GPUWIRE_DECIDE, F64, SCATTER, "empty");
    ctx.ok(gpuwire_darray_set_global(h, std::ptr::null(), st()), "set_global of an empty array with NULL");
    ctx.ok(gpuwire_darray_allgather(h, std::ptr::null_mut(), st()), "allgather of an empty array into NULL");
    free(ctx, h);
    // NULL where data is needed.
    let h = make(ctx, ctx.world, 5, GPUWIRE_DECIDE, F64, SCATTER, "for NULL");
    ctx.error(gpuwire_darray_set_global(h, std::ptr::null(), st()), Status::GPUWIRE_ERROR_NULL_ARGUMENT, &["src"], "set_global from NULL");
    // A rank that owns nothing reads nothing.
    let z = make(ctx, ctx.world, 5, if r == p - 1 { 5 } else { 0 }, F64, SCATTER, "all on the last rank");
    let five = [1.0f64; 5];
    let src = if r == p - 1 { five.as_ptr().cast() } else { std::ptr::null() };
    ctx.ok(gpuwire_darray_set_global(z, src, st()), "set_global with NULL on ranks that own nothing");
    free(ctx, z);
    ctx.error(gpuwire_darray_allgather(h, std::ptr::null_mut(), st()), Status::GPUWIRE_ERROR_NULL_ARGUMENT, &["dst"], "allgather into NULL");
    let mut out = [0f64; 5];
    ctx.error(gpuwire_darray_gather(h, out.as_mut_ptr().cast(), p as i32, st()), Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["root"], "gather to root = size");
    free(ctx, h);
}

fn fill(ctx: &Ctx) {
    ctx.section("fill: every datatype; BROADCAST takes rank 0's value");
    let (r, p) = (ctx.rank, ctx.size);
    for d in Dtype::ALL {
        let n = 8;
        let h = make(ctx, ctx.world, n, custom(n, p, r) as i64, d, SCATTER, "fill");
        let v = pattern(seed(&[d as usize, 3]), d.size());
        ctx.ok(gpuwire_darray_fill(h, v.as_ptr().cast(), st()), "fill");
        let mut out = vec![SENTINEL; n * d.size()];
        ctx.ok(gpuwire_darray_allgather(h, out.as_mut_ptr().cast(), st()), "allgather");
        check_bytes(ctx, d, &out, &v.repeat(n), &format!("{}: every element is the fill value", d.name()));
        free(ctx, h);
        let h = make(ctx, ctx.world, n, GPUWIRE_DECIDE, d, BROADCAST, "fill BROADCAST");
        let mine = pattern(seed(&[d as usize, 4, r]), d.size());
        let rank0 = pattern(seed(&[d as usize, 4, 0]), d.size());
        ctx.ok(gpuwire_darray_fill(h, mine.as_ptr().cast(), st()), "fill BROADCAST");
        let mut out = vec![SENTINEL; n * d.size()];
        ctx.ok(gpuwire_darray_allgather(h, out.as_mut_ptr().cast(), st()), "allgather");
        check_bytes(ctx, d, &out, &rank0.repeat(n), &format!("{}: BROADCAST fill is rank 0's value", d.name()));
        free(ctx, h);
    }
    let h = make(ctx, ctx.world, 3, GPUWIRE_DECIDE, F64, SCATTER, "fill NULL");
    ctx.error(gpuwire_darray_fill(h, std::ptr::null(), st()), Status::GPUWIRE_ERROR_NULL_ARGUMENT, &["value"], "fill with a NULL value");
    free(ctx, h);
}

const ARITH: [Dtype; 4] = [Dtype::GPUWIRE_FLOAT32, Dtype::GPUWIRE_FLOAT64, Dtype::GPUWIRE_COMPLEX64, Dtype::GPUWIRE_COMPLEX128];

fn mul(a: V, b: V) -> V {
    match (a, b) {
        (V::F(x), V::F(y)) => V::F(x * y),
        (V::C(a, b), V::C(c, d)) => V::C(a * c - b * d, a * d + b * c),
        _ => panic!("test bug"),
    }
}
fn add(a: V, b: V) -> V {
    match (a, b) {
        (V::F(x), V::F(y)) => V::F(x + y),
        (V::C(a, b), V::C(c, d)) => V::C(a + c, b + d),
        _ => panic!("test bug"),
    }
}
fn scalar(d: Dtype, re: f64, im: f64) -> V {
    if d.is_complex() { V::C(re, im) } else { V::F(re) }
}

fn arithmetic(ctx: &Ctx) {
    ctx.section("axpy and scale against a serial computation");
    let (r, p) = (ctx.rank, ctx.size);
    for d in ARITH {
        for n in [11usize, 2] {
            for (how, local) in [("default", GPUWIRE_DECIDE), ("custom", custom(n, p, r) as i64)] {
                let what = format!("{} n={n} {how}", d.name());
                let x = make(ctx, ctx.world, n, local, d, SCATTER, &what);
                let y = make(ctx, ctx.world, n, local, d, SCATTER, &what);
                let (gx, gy) = (global(d, n, 1), global(d, n, 2));
                set(ctx, x, d, &gx);
                set(ctx, y, d, &gy);
                let alpha = scalar(d, 2.0, -1.0);
                ctx.ok(gpuwire_darray_axpy(encode(d, alpha).as_ptr().cast(), x, y, st()), "axpy");
                let want: Vec<V> = (0..n).map(|i| add(mul(alpha, gx[i]), gy[i])).collect();
                ctx.check_eq(gather_all(ctx, y, d, n), want.clone(), &format!("{what}: y = alpha x + y"));
                let beta = scalar(d, -0.5, 0.25);
                ctx.ok(gpuwire_darray_scale(y, encode(d, beta).as_ptr().cast(), st()), "scale");
                let want2: Vec<V> = want.iter().map(|v| mul(beta, *v)).collect();
                ctx.check_eq(gather_all(ctx, y, d, n), want2, &format!("{what}: y = beta y"));
                // x and y the same array: x = 3 x + x.
                ctx.ok(gpuwire_darray_axpy(encode(d, scalar(d, 3.0, 0.0)).as_ptr().cast(), x, x, st()), "axpy in place");
                let want3: Vec<V> = gx.iter().map(|v| add(mul(scalar(d, 3.0, 0.0), *v), *v)).collect();
                ctx.check_eq(gather_all(ctx, x, d, n), want3, &format!("{what}: x = 3 x + x"));
                free(ctx, x);
                free(ctx, y);
            }
        }
        // BROADCAST: rank 0's alpha.
        let n = 5;
        let x = make(ctx, ctx.world, n, GPUWIRE_DECIDE, d, BROADCAST, "axpy BROADCAST");
        let y = make(ctx, ctx.world, n, GPUWIRE_DECIDE, d, BROADCAST, "axpy BROADCAST");
        set(ctx, x, d, &global(d, n, 1));
        set(ctx, y, d, &global(d, n, 2));
        let alpha = scalar(d, 1.0 + r as f64, 0.0);
        ctx.ok(gpuwire_darray_axpy(encode(d, alpha).as_ptr().cast(), x, y, st()), "axpy BROADCAST");
        ctx.ok(gpuwire_darray_scale(y, encode(d, scalar(d, 2.0 + r as f64, 0.0)).as_ptr().cast(), st()), "scale BROADCAST");
        let want: Vec<V> = (0..n).map(|i| mul(scalar(d, 2.0, 0.0), add(global(d, n, 1)[i], global(d, n, 2)[i]))).collect();
        ctx.check_eq(gather_all(ctx, y, d, n), want, &format!("{}: BROADCAST axpy and scale use rank 0's alpha", d.name()));
        free(ctx, x);
        free(ctx, y);
    }
}

fn reductions(ctx: &Ctx) {
    ctx.section("dot (dotc), norms, sum, min, max against a serial computation");
    let (r, p) = (ctx.rank, ctx.size);
    let mut res = [0u8; 16];
    let rp = |b: &mut [u8; 16]| b.as_mut_ptr().cast::<c_void>();
    for d in ARITH {
        for n in [13usize, 2, 0] {
            for (how, local, part) in [("default", GPUWIRE_DECIDE, SCATTER), ("custom", custom(n, p, r) as i64, SCATTER), ("broadcast", GPUWIRE_DECIDE, BROADCAST)] {
                let what = format!("{} n={n} {how}", d.name());
                let x = make(ctx, ctx.world, n, local, d, part, &what);
                let y = make(ctx, ctx.world, n, local, d, part, &what);
                let (gx, gy) = (global(d, n, 1), global(d, n, 2));
                set(ctx, x, d, &gx);
                set(ctx, y, d, &gy);
                // dot: conj(x) . y for complex.
                ctx.ok(gpuwire_darray_dot(x, y, rp(&mut res), st()), "dot");
                let want = (0..n).fold(scalar(d, 0.0, 0.0), |s, i| {
                    let xc = match gx[i] {
                        V::C(a, b) => V::C(a, -b),
                        v => v,
                    };
                    add(s, mul(xc, gy[i]))
                });
                ctx.check_eq(decode(d, &res[..d.size()]), want, &format!("{what}: dot (conjugating x)"));
                ctx.ok(gpuwire_darray_dot(x, x, rp(&mut res), st()), "dot(x, x)");
                let sq: f64 = gx.iter().map(|v| match v {
                    V::F(a) => a * a,
                    V::C(a, b) => a * a + b * b,
                    _ => unreachable!(),
                }).sum();
                ctx.check_eq(decode(d, &res[..d.size()]), scalar(d, sq, 0.0), &format!("{what}: dot(x, x) = ||x||^2, real"));
                ctx.ok(gpuwire_darray_sum(x, rp(&mut res), st()), "sum");
                let s = gx.iter().fold(scalar(d, 0.0, 0.0), |s, v| add(s, *v));
                ctx.check_eq(decode(d, &res[..d.size()]), s, &format!("{what}: sum"));
                let abs: Vec<f64> = gx.iter().map(|v| match v {
                    V::F(a) => a.abs(),
                    V::C(a, b) => a.hypot(*b),
                    _ => unreachable!(),
                }).collect();
                let mut nv = -1.0;
                ctx.ok(gpuwire_darray_norm(x, NormKind::GPUWIRE_NORM_1 as i32, &mut nv, st()), "norm 1");
                let n1: f64 = abs.iter().sum();
                ctx.check((nv - n1).abs() <= 1e-14 * n1, || format!("{what}: norm 1 = {nv}, expected {n1}"));
                ctx.ok(gpuwire_darray_norm(x, NormKind::GPUWIRE_NORM_2 as i32, &mut nv, st()), "norm 2");
                ctx.check((nv - sq.sqrt()).abs() <= 1e-15 * sq.sqrt(), || format!("{what}: norm 2 = {nv}, expected {}", sq.sqrt()));
                ctx.ok(gpuwire_darray_norm(x, NormKind::GPUWIRE_NORM_INF as i32, &mut nv, st()), "norm inf");
                let ninf = abs.iter().cloned().fold(0.0, f64::max);
                ctx.check_eq(nv, ninf, &format!("{what}: norm inf"));
                if !d.is_complex() {
                    if n == 0 {
                        ctx.error(gpuwire_darray_min(x, rp(&mut res), st()), Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["empty"], "min of an empty array");
                    } else {
                        ctx.ok(gpuwire_darray_min(x, rp(&mut res), st()), "min");
                        let mn = gx.iter().map(|v| f64_elem(*v)).fold(f64::INFINITY, f64::min);
                        ctx.check_eq(decode(d, &res[..d.size()]), V::F(mn), &format!("{what}: min"));
                        ctx.ok(gpuwire_darray_max(x, rp(&mut res), st()), "max");
                        let mx = gx.iter().map(|v| f64_elem(*v)).fold(f64::NEG_INFINITY, f64::max);
                        ctx.check_eq(decode(d, &res[..d.size()]), V::F(mx), &format!("{what}: max"));
                    }
                }
                free(ctx, x);
                free(ctx, y);
            }
        }
    }
    // NaN on the last element (on the last rank with elements): min, max and norm inf are NaN.
    for d in [Dtype::GPUWIRE_FLOAT32, F64] {
        let n = 7;
        let x = make(ctx, ctx.world, n, GPUWIRE_DECIDE, d, SCATTER, "nan");
        let mut g = global(d, n, 1);
        g[n - 1] = V::F(f64::NAN);
        set(ctx, x, d, &g);
        for (name, f) in [("min", gpuwire_darray_min as extern "C" fn(u64, *mut c_void, *mut c_void) -> Status), ("max", gpuwire_darray_max)] {
            ctx.ok(f(x, rp(&mut res), st()), name);
            ctx.check(matches!(decode(d, &res[..d.size()]), V::F(v) if v.is_nan()), || format!("{}: {name} with a NaN is NaN", d.name()));
        }
        let mut nv = 0.0;
        ctx.ok(gpuwire_darray_norm(x, NormKind::GPUWIRE_NORM_INF as i32, &mut nv, st()), "norm inf");
        ctx.check(nv.is_nan(), || format!("{}: norm inf with a NaN is NaN, got {nv}", d.name()));
        free(ctx, x);
    }
    // Integers: sum (wrapping), min, max.
    for d in [Dtype::GPUWIRE_INT8, Dtype::GPUWIRE_UINT8, Dtype::GPUWIRE_INT32, Dtype::GPUWIRE_UINT32, Dtype::GPUWIRE_INT64, Dtype::GPUWIRE_UINT64] {
        let n = 40; // int8 sums wrap
        let x = make(ctx, ctx.world, n, custom(n, p, r) as i64, d, SCATTER, "integers");
        let g = global(d, n, 5);
        set(ctx, x, d, &g);
        let ints: Vec<i128> = g.iter().map(|v| if let V::I(i) = v { *i } else { unreachable!() }).collect();
        let bits = int_bits(d);
        let modulus = 1i128 << bits;
        let wrap = |v: i128| {
            let m = v.rem_euclid(modulus);
            if is_signed(d) && m >= modulus / 2 { m - modulus } else { m }
        };
        ctx.ok(gpuwire_darray_sum(x, rp(&mut res), st()), "sum");
        ctx.check_eq(decode(d, &res[..d.size()]), V::I(wrap(ints.iter().sum())), &format!("{}: sum (wrapping)", d.name()));
        ctx.ok(gpuwire_darray_min(x, rp(&mut res), st()), "min");
        ctx.check_eq(decode(d, &res[..d.size()]), V::I(*ints.iter().min().unwrap()), &format!("{}: min", d.name()));
        ctx.ok(gpuwire_darray_max(x, rp(&mut res), st()), "max");
        ctx.check_eq(decode(d, &res[..d.size()]), V::I(*ints.iter().max().unwrap()), &format!("{}: max", d.name()));
        free(ctx, x);
    }
    // Large unsigned values: min/max compare as unsigned.
    let d = Dtype::GPUWIRE_UINT64;
    let x = make(ctx, ctx.world, 3, GPUWIRE_DECIDE, d, SCATTER, "uint64");
    set(ctx, x, d, &[V::I(u64::MAX as i128), V::I(5), V::I(1 << 63)]);
    ctx.ok(gpuwire_darray_max(x, rp(&mut res), st()), "max");
    ctx.check_eq(decode(d, &res[..8]), V::I(u64::MAX as i128), "uint64 max");
    ctx.ok(gpuwire_darray_min(x, rp(&mut res), st()), "min");
    ctx.check_eq(decode(d, &res[..8]), V::I(5), "uint64 min");
    free(ctx, x);
}

fn redistribute(ctx: &Ctx) {
    ctx.section("redistribute: default -> custom -> BROADCAST -> default, and back");
    let (r, p) = (ctx.rank, ctx.size);
    for d in [F64, Dtype::GPUWIRE_COMPLEX64, Dtype::GPUWIRE_INT8] {
        for n in [10usize, 2, 0] {
            let g = global(d, n, 7);
            let a = make(ctx, ctx.world, n, GPUWIRE_DECIDE, d, SCATTER, "a");
            // The reverse of the default split, so blocks move across several ranks.
            let rev = split(n, p)[p - 1 - r].1 as i64;
            let b = make(ctx, ctx.world, n, rev, d, SCATTER, "b");
            let c = make(ctx, ctx.world, n, custom(n, p, r) as i64, d, SCATTER, "c");
            let bc = make(ctx, ctx.world, n, GPUWIRE_DECIDE, d, BROADCAST, "bc");
            let e = make(ctx, ctx.world, n, GPUWIRE_DECIDE, d, SCATTER, "e");
            set(ctx, a, d, &g);
            let what = format!("{} n={n}", d.name());
            for (src, dst, step) in [(a, b, "default -> reversed"), (b, c, "reversed -> custom"), (c, bc, "custom -> BROADCAST"), (bc, e, "BROADCAST -> default"), (e, e, "onto itself")] {
                ctx.ok(gpuwire_darray_redistribute(src, dst, st()), step);
                ctx.check_eq(gather_all(ctx, dst, d, n), g.clone(), &format!("{what}: {step}"));
            }
            // The BROADCAST array holds everything locally, on every rank.
            let mut ptr = std::ptr::null_mut();
            ctx.ok(gpuwire_darray_data(bc, &mut ptr), "data");
            if n > 0 {
                // SAFETY: n elements of d.
                let local = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), n * d.size()) };
                ctx.check_eq(decode_all(d, local), g.clone(), &format!("{what}: BROADCAST local copy"));
            }
            for h in [a, b, c, bc, e] {
                free(ctx, h);
            }
        }
    }
    let a = make(ctx, ctx.world, 6, GPUWIRE_DECIDE, F64, SCATTER, "a");
    let b = make(ctx, ctx.world, 7, GPUWIRE_DECIDE, F64, SCATTER, "b");
    let c = make(ctx, ctx.world, 6, GPUWIRE_DECIDE, Dtype::GPUWIRE_FLOAT32, SCATTER, "c");
    ctx.error(gpuwire_darray_redistribute(a, b, st()), Status::GPUWIRE_ERROR_COUNT_MISMATCH, &["shape"], "redistribute to another length");
    ctx.error(gpuwire_darray_redistribute(a, c, st()), Status::GPUWIRE_ERROR_DTYPE_MISMATCH, &["float32"], "redistribute to another datatype");
    for h in [a, b, c] {
        free(ctx, h);
    }
}

/// Halo exchange of an n x 3 float64 array (value of (row, col) = 10 row + col + 1) with
/// `halo` ghost rows, exchanging `width`, on the split `local` (rows per rank).
fn halo_case(ctx: &Ctx, n: usize, local: i64, halo: usize, width: usize, what: &str) {
    let (r, p) = (ctx.rank, ctx.size);
    let cols = 3;
    let h = make_nd(ctx, ctx.world, &[n as i64, cols as i64], local, halo as i64, F64, SCATTER, what);
    let value = |g: usize, c: usize| (10 * g + c + 1) as f64;
    let g: Vec<V> = (0..n * cols).map(|k| V::F(value(k / cols, k % cols))).collect();
    set(ctx, h, F64, &g);
    let mut lens = vec![0i64; p];
    ctx.ok(gpuwire_darray_local_lens(h, lens.as_mut_ptr()), "local_lens");
    let rows: Vec<usize> = lens.iter().map(|l| *l as usize / cols).collect();
    let start: usize = rows[..r].iter().sum();
    let mut whole = 0u64;
    ctx.ok(gpuwire_darray_local_with_halo(h, &mut whole), "view with halo");
    let mut wp = std::ptr::null_mut();
    ctx.ok(gpuwire_buffer_pointer(whole, &mut wp), "pointer");
    let total = (rows[r] + 2 * halo) * cols;
    // SAFETY: the view holds `total` float64 elements.
    let all = if total == 0 { &mut [][..] } else { unsafe { std::slice::from_raw_parts_mut(wp.cast::<f64>(), total) } };
    // Ghost rows to a sentinel first.
    for s in (0..halo).chain(halo + rows[r]..rows[r] + 2 * halo) {
        for c in 0..cols {
            all[s * cols + c] = -1.0;
        }
    }
    ctx.ok(gpuwire_darray_halo_exchange(h, width as i64, st()), &format!("{what}: halo_exchange width {width}"));
    let mut bad = Vec::new();
    for s in 0..rows[r] + 2 * halo {
        // Storage row s holds global row start - halo + s.
        let gr = start as i64 - halo as i64 + s as i64;
        let owned = s >= halo && s < halo + rows[r];
        let filled = !owned && gr >= 0 && (gr as usize) < n && (gr >= start as i64 - width as i64 && gr < (start + rows[r] + width) as i64);
        for c in 0..cols {
            let want = if owned || filled { value(gr as usize, c) } else { -1.0 };
            if all[s * cols + c] != want {
                bad.push(format!("storage row {s} (global row {gr}) col {c}: {} != {want}", all[s * cols + c]));
            }
        }
    }
    ctx.check(bad.is_empty(), || format!("{what}, width {width}: {}", bad.iter().take(4).cloned().collect::<Vec<_>>().join("; ")));
    ctx.ok(gpuwire_buffer_free(whole), "free view");
    free(ctx, h);
}

fn halo(ctx: &Ctx) {
    ctx.section("halo exchange of N-D arrays");
    let (r, p) = (ctx.rank, ctx.size);
    for (n, halo_rows, width) in [(7usize, 1usize, 1usize), (7, 2, 2), (7, 2, 1), (9, 3, 3), (2, 1, 1)] {
        halo_case(ctx, n, GPUWIRE_DECIDE, halo_rows, width, &format!("n={n} default split, halo {halo_rows}"));
        halo_case(ctx, n, custom(n, p, r) as i64, halo_rows, width, &format!("n={n} custom split (a rank of 0 rows), halo {halo_rows}"));
        // Blocks of 1 row with a halo of 2: ghost rows come from two ranks away.
        let ones = if r + 1 < p { 1 } else { n - (p - 1) };
        halo_case(ctx, n, ones as i64, halo_rows, width, &format!("n={n} blocks of 1 row, halo {halo_rows}"));
    }
    let h = make_nd(ctx, ctx.world, &[5, 2], GPUWIRE_DECIDE, 0, F64, SCATTER, "no halo");
    ctx.ok(gpuwire_darray_halo_exchange(h, 0, st()), "width 0 without a halo");
    free(ctx, h);
    let h = make_nd(ctx, ctx.world, &[5, 2], GPUWIRE_DECIDE, 2, F64, SCATTER, "halo 2");
    ctx.error(gpuwire_darray_halo_exchange(h, 3, st()), Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["width 3", "2 halo"], "width above the halo");
    ctx.error(gpuwire_darray_halo_exchange(h, -1, st()), Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["negative"], "negative width");
    free(ctx, h);
    let b = make(ctx, ctx.world, 5, GPUWIRE_DECIDE, F64, BROADCAST, "broadcast");
    ctx.error(gpuwire_darray_halo_exchange(b, 0, st()), Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["BROADCAST"], "halo exchange of a BROADCAST array");
    free(ctx, b);
}

fn split_communicators(ctx: &Ctx) {
    ctx.section("distributed arrays on split communicators");
    let (r, p) = (ctx.rank, ctx.size);
    let mut sub = 0u64;
    ctx.ok(gpuwire_comm_split(ctx.world, (r % 2) as i32, 0, &mut sub), "split by parity");
    let members: Vec<usize> = (0..p).filter(|m| m % 2 == r % 2).collect();
    let q = members.len();
    let me = members.iter().position(|m| *m == r).unwrap();
    let n = 9;
    let x = make(ctx, sub, n, GPUWIRE_DECIDE, F64, SCATTER, "on the parity communicator");
    let mut lens = vec![0i64; q];
    ctx.ok(gpuwire_darray_local_lens(x, lens.as_mut_ptr()), "local_lens");
    ctx.check_eq(lens, split(n, q).iter().map(|s| s.1 as i64).collect::<Vec<_>>(), "split over the sub-communicator's ranks");
    ctx.check_eq(i64_of(|v| gpuwire_darray_global_offset(x, v), ctx, "offset"), split(n, q)[me].0 as i64, "offset in the sub-communicator");
    // Each parity class holds other data: the reductions stay within the class.
    let g = global(F64, n, 10 + r % 2);
    set(ctx, x, F64, &g);
    let mut res = 0f64;
    ctx.ok(gpuwire_darray_dot(x, x, (&mut res as *mut f64).cast(), st()), "dot");
    ctx.check_eq(res, g.iter().map(|v| f64_elem(*v).powi(2)).sum::<f64>(), "dot within the parity class");
    ctx.check_eq(gather_all(ctx, x, F64, n), g, "allgather within the parity class");
    // An array of the world and one of the sub-communicator do not mix.
    let w = make(ctx, ctx.world, n, GPUWIRE_DECIDE, F64, SCATTER, "on the world");
    if q == p {
        // Same ranks, other communicator: still refused.
        ctx.error(gpuwire_darray_dot(x, w, (&mut res as *mut f64).cast(), st()), Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["different communicators"], "dot of arrays on different communicators");
    } else {
        ctx.error(gpuwire_darray_axpy((&1.0f64 as *const f64).cast(), x, w, st()), Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["different communicators"], "axpy of arrays on different communicators");
    }
    free(ctx, w);
    free(ctx, x);
    // The array keeps its communicator alive after the communicator handle is freed.
    let y = make(ctx, sub, 4, GPUWIRE_DECIDE, F64, SCATTER, "outliving its communicator handle");
    ctx.ok(gpuwire_comm_free(sub), "free the sub-communicator handle");
    set(ctx, y, F64, &global(F64, 4, 1));
    ctx.ok(gpuwire_darray_sum(y, (&mut res as *mut f64).cast(), st()), "sum after the communicator handle is freed");
    ctx.check_eq(res, global(F64, 4, 1).iter().map(|v| f64_elem(*v)).sum::<f64>(), "sum on a freed communicator handle");
    free(ctx, y);
    // A rank outside any sub-communicator gets the NULL handle: creating on it fails.
    let mut none = 1u64;
    ctx.ok(gpuwire_comm_split(ctx.world, GPUWIRE_UNDEFINED, 0, &mut none), "split undefined");
    let (s, _) = create(none, 4, GPUWIRE_DECIDE, F64, SCATTER);
    ctx.error(s, Status::GPUWIRE_ERROR_INVALID_HANDLE, &["NULL"], "create on GPUWIRE_COMM_NULL");
}

fn bad_input(ctx: &Ctx) {
    ctx.section("bad input: datatypes, mismatched arrays, NULL results");
    let (r, p) = (ctx.rank, ctx.size);
    let mut res = [0u8; 16];
    let rp = res.as_mut_ptr().cast::<c_void>();
    let one = 1.0f64;
    let one_p = (&one as *const f64).cast::<c_void>();
    let i = make(ctx, ctx.world, 6, GPUWIRE_DECIDE, Dtype::GPUWIRE_INT32, SCATTER, "int32");
    ctx.error(gpuwire_darray_dot(i, i, rp, st()), Status::GPUWIRE_ERROR_UNSUPPORTED_DTYPE, &["int32", "float32"], "dot of int32");
    ctx.error(gpuwire_darray_norm(i, 2, &mut 0.0, st()), Status::GPUWIRE_ERROR_UNSUPPORTED_DTYPE, &["int32"], "norm of int32");
    ctx.error(gpuwire_darray_scale(i, one_p, st()), Status::GPUWIRE_ERROR_UNSUPPORTED_DTYPE, &["int32"], "scale of int32");
    free(ctx, i);
    let c = make(ctx, ctx.world, 6, GPUWIRE_DECIDE, Dtype::GPUWIRE_COMPLEX64, SCATTER, "complex64");
    ctx.error(gpuwire_darray_min(c, rp, st()), Status::GPUWIRE_ERROR_UNSUPPORTED_DTYPE, &["complex64", "not ordered"], "min of complex64");
    ctx.error(gpuwire_darray_max(c, rp, st()), Status::GPUWIRE_ERROR_UNSUPPORTED_DTYPE, &["complex64"], "max of complex64");
    free(ctx, c);
    let hf = make(ctx, ctx.world, 6, GPUWIRE_DECIDE, Dtype::GPUWIRE_FLOAT16, SCATTER, "float16");
    ctx.error(gpuwire_darray_axpy(one_p, hf, hf, st()), Status::GPUWIRE_ERROR_UNSUPPORTED_DTYPE, &["float16"], "axpy of float16");
    ctx.error(gpuwire_darray_sum(hf, rp, st()), Status::GPUWIRE_ERROR_UNSUPPORTED_DTYPE, &["float16"], "sum of float16");
    free(ctx, hf);

    let x = make(ctx, ctx.world, 6, GPUWIRE_DECIDE, F64, SCATTER, "x");
    let f32a = make(ctx, ctx.world, 6, GPUWIRE_DECIDE, Dtype::GPUWIRE_FLOAT32, SCATTER, "float32");
    let longer = make(ctx, ctx.world, 7, GPUWIRE_DECIDE, F64, SCATTER, "longer");
    let bc = make(ctx, ctx.world, 6, GPUWIRE_DECIDE, F64, BROADCAST, "broadcast");
    ctx.error(gpuwire_darray_axpy(one_p, f32a, x, st()), Status::GPUWIRE_ERROR_DTYPE_MISMATCH, &["float32", "float64"], "axpy float32 into float64");
    ctx.error(gpuwire_darray_dot(x, longer, rp, st()), Status::GPUWIRE_ERROR_COUNT_MISMATCH, &["shape"], "dot of different lengths");
    ctx.error(gpuwire_darray_axpy(one_p, bc, x, st()), Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["BROADCAST", "SCATTER"], "axpy of a BROADCAST into a SCATTER array");
    if p > 1 {
        let other = make(ctx, ctx.world, 6, custom(6, p, r) as i64, F64, SCATTER, "split otherwise");
        ctx.error(gpuwire_darray_dot(x, other, rp, st()), Status::GPUWIRE_ERROR_COUNT_MISMATCH, &["split differently", "redistribute"], "dot of differently split arrays");
        ctx.error(gpuwire_darray_axpy(one_p, other, x, st()), Status::GPUWIRE_ERROR_COUNT_MISMATCH, &["split differently"], "axpy of differently split arrays");
        free(ctx, other);
    }
    ctx.error(gpuwire_darray_dot(x, x, std::ptr::null_mut(), st()), Status::GPUWIRE_ERROR_NULL_ARGUMENT, &["result"], "dot into NULL");
    ctx.error(gpuwire_darray_sum(x, std::ptr::null_mut(), st()), Status::GPUWIRE_ERROR_NULL_ARGUMENT, &["result"], "sum into NULL");
    ctx.error(gpuwire_darray_norm(x, 2, std::ptr::null_mut(), st()), Status::GPUWIRE_ERROR_NULL_ARGUMENT, &["result"], "norm into NULL");
    ctx.error(gpuwire_darray_norm(x, 5, &mut 0.0, st()), Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["norm code 5"], "norm kind 5");
    ctx.error(gpuwire_darray_axpy(std::ptr::null(), x, x, st()), Status::GPUWIRE_ERROR_NULL_ARGUMENT, &["alpha"], "axpy with a NULL alpha");
    ctx.error(gpuwire_darray_scale(x, std::ptr::null(), st()), Status::GPUWIRE_ERROR_NULL_ARGUMENT, &["alpha"], "scale with a NULL alpha");
    ctx.error(gpuwire_darray_bcast(x, 0, st()), Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["SCATTER"], "bcast of a SCATTER array");
    ctx.error(gpuwire_darray_dot(x, ctx.world, rp, st()), Status::GPUWIRE_ERROR_INVALID_HANDLE, &["communicator handle"], "dot with a communicator handle");
    let mut before = [7u8; 16];
    let _ = gpuwire_darray_dot(x, longer, before.as_mut_ptr().cast(), st());
    ctx.check_eq(before, [7u8; 16], "result untouched on failure");
    // bcast of a BROADCAST array after a local write.
    let mut ptr = std::ptr::null_mut();
    ctx.ok(gpuwire_darray_data(bc, &mut ptr), "data");
    for k in 0..6 {
        // SAFETY: 6 float64.
        unsafe { *ptr.cast::<f64>().add(k) = (100 * r + k) as f64 };
    }
    let root = (p - 1) as i32;
    ctx.ok(gpuwire_darray_bcast(bc, root, st()), "bcast from the last rank");
    let want: Vec<V> = (0..6).map(|k| V::F((100 * (p - 1) + k) as f64)).collect();
    ctx.check_eq(gather_all(ctx, bc, F64, 6), want, "BROADCAST copies equal the root's after bcast");
    for h in [x, f32a, longer, bc] {
        free(ctx, h);
    }
}

fn checking_mode(ctx: &Ctx) {
    ctx.section("checking mode: one rank's bad argument is an error on every rank");
    let r = ctx.rank;
    let x = make(ctx, ctx.world, 6, GPUWIRE_DECIDE, F64, SCATTER, "x");
    let mut res = 0f64;
    let out: *mut c_void = if r == 1 { std::ptr::null_mut() } else { (&mut res as *mut f64).cast() };
    let s = gpuwire_darray_dot(x, x, out, st());
    if r == 1 {
        ctx.error(s, Status::GPUWIRE_ERROR_NULL_ARGUMENT, &["result"], "dot into NULL on rank 1");
    } else {
        ctx.error(s, Status::GPUWIRE_ERROR_REMOTE_ARGUMENT, &["rank 1"], "dot when rank 1 passed NULL");
    }
    let s = gpuwire_darray_halo_exchange(x, if r == 0 { -1 } else { 0 }, st());
    if r == 0 {
        ctx.error(s, Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["negative"], "negative width on rank 0");
    } else {
        ctx.error(s, Status::GPUWIRE_ERROR_REMOTE_ARGUMENT, &["rank 0"], "halo exchange when rank 0 passed a negative width");
    }
    let b = make(ctx, ctx.world, 6, GPUWIRE_DECIDE, F64, BROADCAST, "b");
    let one = 1.0f64;
    let v: *const c_void = if r == 2 { std::ptr::null() } else { (&one as *const f64).cast() };
    let s = gpuwire_darray_fill(b, v, st());
    if r == 2 {
        ctx.error(s, Status::GPUWIRE_ERROR_NULL_ARGUMENT, &["value"], "BROADCAST fill with NULL on rank 2");
    } else {
        ctx.error(s, Status::GPUWIRE_ERROR_REMOTE_ARGUMENT, &["rank 2"], "BROADCAST fill when rank 2 passed NULL");
    }
    // Everything still works afterwards.
    ctx.ok(gpuwire_darray_dot(x, x, (&mut res as *mut f64).cast(), st()), "dot after the errors");
    free(ctx, x);
    free(ctx, b);
}

fn after_finalize(ctx: Ctx) -> ! {
    ctx.section("handles after gpuwire_finalize");
    let h = make(&ctx, ctx.world, 4, GPUWIRE_DECIDE, F64, SCATTER, "left for finalize");
    ctx.ok(gpuwire_comm_free(ctx.world), "free world");
    ctx.ok(gpuwire_finalize(), "finalize with a live distributed array");
    let mut v = 0;
    ctx.error(gpuwire_darray_local_len(h, &mut v), Status::GPUWIRE_ERROR_ALREADY_FINALIZED, &["finalize"], "query after finalize");
    ctx.error(gpuwire_darray_free(h), Status::GPUWIRE_ERROR_ALREADY_FINALIZED, &["finalize"], "free after finalize");
    ctx.exit()
}
