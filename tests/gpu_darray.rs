//! GPU tests of distributed arrays: the device versions of tests/mpi_darray.rs.
//!
//! Every device result is compared with the same operation on a host array of the same split
//! (which tests/mpi_darray.rs checks against serial computations), and with the expected values
//! directly where they are simple. Data are small integers and halves, so sums are exact in any
//! order: device and host reductions must agree bit for bit; fill, axpy and scale too (the
//! kernels are compiled without fused multiply-add). A reduction run twice on the same data must
//! give the same bits (the deterministic two-pass reduction), also on data where the order
//! matters.
//!
//! They need a GPU: without `GPUWIRE_GPU_TEST` this binary prints that it was NOT RUN.
//! `GPUWIRE_GPU_TEST_SPACE=host` runs the same checks on host arrays (a dry run of the test
//! itself where there is no GPU; it proves nothing about the device code). On the GPU
//! machine scripts/gpu-run.sh runs it under `mpirun -np 2` (and with NCCL on one rank) with
//! `GPUWIRE_GPU_TEST=dops,dmove,dhalo,dstream,dtags,dgrid,dfree` and reads its `RESULT` lines.

mod common;

use std::ffi::c_void;
use std::time::Instant;

use common::*;
use cudarc::driver::sys as cu;
use gpuwire::Status;
use gpuwire::ffi::buffer::*;
use gpuwire::ffi::comm::*;
use gpuwire::ffi::darray::*;
use gpuwire::ffi::ops::{gpuwire_allreduce, gpuwire_barrier, gpuwire_irecv, gpuwire_isend, gpuwire_recv, gpuwire_wait};
use gpuwire::ffi::GPUWIRE_DECIDE;
use gpuwire::types::{Dtype, NormKind, Partition, ReduceOp, Space};

const SCATTER: i32 = Partition::GPUWIRE_PARTITION_SCATTER as i32;
const BROADCAST: i32 = Partition::GPUWIRE_PARTITION_BROADCAST as i32;
const HOST: Space = Space::GPUWIRE_SPACE_HOST;

/// The space under test: DEVICE, or HOST with GPUWIRE_GPU_TEST_SPACE=host (a dry run of this test's
/// own logic on a machine without a GPU).
fn dev() -> Space {
    static S: std::sync::OnceLock<Space> = std::sync::OnceLock::new();
    *S.get_or_init(|| if std::env::var("GPUWIRE_GPU_TEST_SPACE").as_deref() == Ok("host") { HOST } else { Space::GPUWIRE_SPACE_DEVICE })
}
const ARITH: [Dtype; 4] = [Dtype::GPUWIRE_FLOAT32, Dtype::GPUWIRE_FLOAT64, Dtype::GPUWIRE_COMPLEX64, Dtype::GPUWIRE_COMPLEX128];
const INTS: [Dtype; 6] = [Dtype::GPUWIRE_INT8, Dtype::GPUWIRE_UINT8, Dtype::GPUWIRE_INT32, Dtype::GPUWIRE_UINT32, Dtype::GPUWIRE_INT64, Dtype::GPUWIRE_UINT64];

fn null() -> *mut c_void {
    std::ptr::null_mut()
}

fn create(ctx: &Ctx, n: usize, local: i64, d: Dtype, space: Space, part: i32) -> u64 {
    let mut h = 0;
    let s = gpuwire_darray_create(ctx.world, n as i64, local, d as i32, space as i32, part, &mut h);
    if !ctx.ok(s, &format!("create {} {} n={n} local={local}", space.name(), d.name())) {
        die(Some(ctx.rank), "cannot create a distributed array");
    }
    h
}

fn custom(n: usize, p: usize, r: usize) -> i64 {
    (if p == 1 {
        n
    } else if r == 0 {
        1.min(n)
    } else if r == p - 1 {
        n - 1.min(n)
    } else {
        0
    }) as i64
}

/// Exact test values: integers and halves (complex: two of them).
fn bytes(d: Dtype, n: usize, salt: usize) -> Vec<u8> {
    let vals: Vec<V> = (0..n)
        .map(|i| {
            let k = i * 7 + salt * 3;
            if d.is_integer() {
                let v = (k % 23) as i128 - 11;
                V::I(if is_signed(d) { v } else { v + 11 })
            } else {
                let re = (k % 13) as f64 - 6.0 + 0.5 * ((i + salt) % 2) as f64;
                if d.is_complex() { V::C(re, ((k + 5) % 9) as f64 - 4.0) } else { V::F(re) }
            }
        })
        .collect();
    encode_all(d, &vals)
}

/// Values whose sum depends on the order (for the determinism check).
fn rough(d: Dtype, n: usize) -> Vec<u8> {
    let raw = pattern(seed(&[d as usize, n]), n * 8);
    let vals: Vec<V> = raw
        .chunks_exact(8)
        .map(|c| {
            let u = u64::from_ne_bytes(c.try_into().unwrap());
            let x = (u >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
            let x = if d == Dtype::GPUWIRE_FLOAT32 || d == Dtype::GPUWIRE_COMPLEX64 { x as f32 as f64 } else { x };
            if d.is_complex() { V::C(x, -x * 0.5) } else { V::F(x) }
        })
        .collect();
    encode_all(d, &vals)
}

fn set(ctx: &Ctx, h: u64, b: &[u8]) {
    let p = if b.is_empty() { std::ptr::null() } else { b.as_ptr().cast() };
    ctx.ok(gpuwire_darray_set_global(h, p, null()), "set_global");
}

fn all(ctx: &Ctx, h: u64, nbytes: usize) -> Vec<u8> {
    let mut out = vec![SENTINEL; nbytes];
    let p = if out.is_empty() { null() } else { out.as_mut_ptr().cast() };
    ctx.ok(gpuwire_darray_allgather(h, p, null()), "allgather");
    out
}

type Red = extern "C" fn(u64, *mut c_void, *mut c_void) -> Status;

fn scalar(ctx: &Ctx, f: Red, h: u64, what: &str, stream: *mut c_void) -> [u8; 16] {
    let mut r = [0u8; 16];
    ctx.ok(f(h, r.as_mut_ptr().cast(), stream), what);
    r
}

fn dot(ctx: &Ctx, x: u64, y: u64, stream: *mut c_void) -> [u8; 16] {
    let mut r = [0u8; 16];
    ctx.ok(gpuwire_darray_dot(x, y, r.as_mut_ptr().cast(), stream), "dot");
    r
}

fn norm(ctx: &Ctx, h: u64, k: NormKind) -> f64 {
    let mut v = -1.0;
    ctx.ok(gpuwire_darray_norm(h, k as i32, &mut v, null()), "norm");
    v
}

/// dops: elementwise operations and reductions, device against host.
fn dops(ctx: &Ctx) {
    ctx.section("dops: fill, axpy, scale, dot, norms, sum, min, max on device vs host");
    let (r, p) = (ctx.rank, ctx.size);
    for d in ARITH {
        let sz = d.size();
        for n in [300_000usize, 1000, 3, 0] {
            for (how, local) in [("default", GPUWIRE_DECIDE), ("custom", custom(n, p, r))] {
                let what = format!("{} n={n} {how}", d.name());
                let (xh, yh) = (create(ctx, n, local, d, HOST, SCATTER), create(ctx, n, local, d, HOST, SCATTER));
                let (xd, yd) = (create(ctx, n, local, d, dev(), SCATTER), create(ctx, n, local, d, dev(), SCATTER));
                let (bx, by) = (bytes(d, n, 1), bytes(d, n, 2));
                for (h, b) in [(xh, &bx), (xd, &bx), (yh, &by), (yd, &by)] {
                    set(ctx, h, b);
                }
                check_bytes(ctx, d, &all(ctx, xd, n * sz), &bx, &format!("{what}: set_global + allgather on the device"));
                let dh = dot(ctx, xh, yh, null());
                let dd = dot(ctx, xd, yd, null());
                ctx.check_eq(&dd[..sz], &dh[..sz], &format!("{what}: dot"));
                ctx.check_eq(&scalar(ctx, gpuwire_darray_sum, xd, "sum", null())[..sz], &scalar(ctx, gpuwire_darray_sum, xh, "sum", null())[..sz], &format!("{what}: sum"));
                for k in [NormKind::GPUWIRE_NORM_1, NormKind::GPUWIRE_NORM_2, NormKind::GPUWIRE_NORM_INF] {
                    let (nd, nh) = (norm(ctx, xd, k), norm(ctx, xh, k));
                    if d.is_complex() && k == NormKind::GPUWIRE_NORM_1 {
                        // |z| of integer data is not an integer: the device's fixed tree and the
                        // host's left-to-right sum round differently. Each |z| is the same bits
                        // (NORM_INF below is exact), so the sums differ by less than the bound of
                        // recursive summation, n·eps relative.
                        ctx.check((nd - nh).abs() <= (n as f64) * f64::EPSILON * nh.max(1.0), || format!("{what}: norm {k:?}: device {nd} vs host {nh}"));
                    } else {
                        ctx.check_eq(nd, nh, &format!("{what}: norm {k:?}"));
                    }
                }
                if !d.is_complex() && n > 0 {
                    ctx.check_eq(&scalar(ctx, gpuwire_darray_min, xd, "min", null())[..sz], &scalar(ctx, gpuwire_darray_min, xh, "min", null())[..sz], &format!("{what}: min"));
                    ctx.check_eq(&scalar(ctx, gpuwire_darray_max, xd, "max", null())[..sz], &scalar(ctx, gpuwire_darray_max, xh, "max", null())[..sz], &format!("{what}: max"));
                }
                let alpha = if d.is_complex() { encode(d, V::C(1.5, -2.0)) } else { encode(d, V::F(1.5)) };
                let beta = if d.is_complex() { encode(d, V::C(-0.5, 0.25)) } else { encode(d, V::F(-0.5)) };
                for (x, y) in [(xh, yh), (xd, yd)] {
                    ctx.ok(gpuwire_darray_axpy(alpha.as_ptr().cast(), x, y, null()), "axpy");
                    ctx.ok(gpuwire_darray_scale(y, beta.as_ptr().cast(), null()), "scale");
                    ctx.ok(gpuwire_darray_axpy(alpha.as_ptr().cast(), x, x, null()), "axpy in place");
                }
                check_bytes(ctx, d, &all(ctx, yd, n * sz), &all(ctx, yh, n * sz), &format!("{what}: axpy then scale, bit for bit"));
                check_bytes(ctx, d, &all(ctx, xd, n * sz), &all(ctx, xh, n * sz), &format!("{what}: x = alpha x + x, bit for bit"));
                // Determinism: order-dependent data, the same bits twice; close to the host.
                let rb = rough(d, n);
                set(ctx, xd, &rb);
                set(ctx, xh, &rb);
                let (a1, a2) = (dot(ctx, xd, xd, null()), dot(ctx, xd, xd, null()));
                ctx.check_eq(a1, a2, &format!("{what}: the same dot twice gives the same bits"));
                let (n1, n2) = (norm(ctx, xd, NormKind::GPUWIRE_NORM_1), norm(ctx, xd, NormKind::GPUWIRE_NORM_1));
                ctx.check_eq(n1.to_bits(), n2.to_bits(), &format!("{what}: the same norm twice gives the same bits"));
                let nh = norm(ctx, xh, NormKind::GPUWIRE_NORM_1);
                ctx.check((n1 - nh).abs() <= 1e-12 * nh.max(1.0), || format!("{what}: device norm 1 {n1} vs host {nh}"));
                let fill = if d.is_complex() { encode(d, V::C(0.5, 2.0)) } else { encode(d, V::F(0.5)) };
                ctx.ok(gpuwire_darray_fill(xd, fill.as_ptr().cast(), null()), "fill");
                check_bytes(ctx, d, &all(ctx, xd, n * sz), &fill.repeat(n), &format!("{what}: fill"));
                for h in [xh, yh, xd, yd] {
                    ctx.ok(gpuwire_darray_free(h), "free");
                }
            }
        }
    }
    // Integers: sum (wrapping), min, max; every datatype: fill.
    for d in INTS {
        let n = 70_000;
        let (h, g) = (create(ctx, n, custom(n, p, r), d, HOST, SCATTER), create(ctx, n, custom(n, p, r), d, dev(), SCATTER));
        let b = bytes(d, n, 4);
        set(ctx, h, &b);
        set(ctx, g, &b);
        for (f, name) in [(gpuwire_darray_sum as Red, "sum"), (gpuwire_darray_min, "min"), (gpuwire_darray_max, "max")] {
            ctx.check_eq(scalar(ctx, f, g, name, null()), scalar(ctx, f, h, name, null()), &format!("{}: {name}", d.name()));
        }
        ctx.ok(gpuwire_darray_free(h), "free");
        ctx.ok(gpuwire_darray_free(g), "free");
    }
    for d in Dtype::ALL {
        let n = 1001;
        let g = create(ctx, n, GPUWIRE_DECIDE, d, dev(), SCATTER);
        let v = pattern(seed(&[d as usize, 9]), d.size());
        ctx.ok(gpuwire_darray_fill(g, v.as_ptr().cast(), null()), "fill");
        check_bytes(ctx, d, &all(ctx, g, n * d.size()), &v.repeat(n), &format!("{}: fill on the device", d.name()));
        ctx.ok(gpuwire_darray_free(g), "free");
    }
    // NaN propagates through min, max and the infinity norm.
    for d in [Dtype::GPUWIRE_FLOAT32, Dtype::GPUWIRE_FLOAT64] {
        let n = 5000;
        let g = create(ctx, n, GPUWIRE_DECIDE, d, dev(), SCATTER);
        let mut b = bytes(d, n, 5);
        let nan = encode(d, V::F(f64::NAN));
        let at = (n / 2) * d.size();
        b[at..at + d.size()].copy_from_slice(&nan);
        set(ctx, g, &b);
        for (f, name) in [(gpuwire_darray_min as Red, "min"), (gpuwire_darray_max, "max")] {
            let v = scalar(ctx, f, g, name, null());
            ctx.check(matches!(decode(d, &v[..d.size()]), V::F(x) if x.is_nan()), || format!("{}: {name} with a NaN", d.name()));
        }
        ctx.check(norm(ctx, g, NormKind::GPUWIRE_NORM_INF).is_nan(), || format!("{}: norm inf with a NaN", d.name()));
        ctx.ok(gpuwire_darray_free(g), "free");
    }
    // Host and device arrays do not mix in one operation.
    if dev() == HOST {
        return;
    }
    let (h, g) = (create(ctx, 10, GPUWIRE_DECIDE, Dtype::GPUWIRE_FLOAT64, HOST, SCATTER), create(ctx, 10, GPUWIRE_DECIDE, Dtype::GPUWIRE_FLOAT64, dev(), SCATTER));
    let mut res = 0f64;
    ctx.error(gpuwire_darray_dot(h, g, (&mut res as *mut f64).cast(), null()), Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["device"], "dot of a host and a device array");
    ctx.error(gpuwire_darray_redistribute(h, g, null()), Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["device"], "redistribute from host to device");
    ctx.ok(gpuwire_darray_free(h), "free");
    ctx.ok(gpuwire_darray_free(g), "free");
}

/// dmove: set_global, allgather, gather, redistribute and bcast of device arrays.
fn dmove(ctx: &Ctx) {
    ctx.section("dmove: set_global, allgather, gather, redistribute, bcast on the device");
    let (r, p) = (ctx.rank, ctx.size);
    for d in Dtype::ALL {
        let sz = d.size();
        for n in [100_003usize, 10, 2, 0] {
            let g = pattern(seed(&[d as usize, n, 11]), n * sz);
            let a = create(ctx, n, GPUWIRE_DECIDE, d, dev(), SCATTER);
            let rev = ((n / p) + ((p - 1 - r) < n % p) as usize) as i64;
            let b = create(ctx, n, rev, d, dev(), SCATTER);
            let c = create(ctx, n, custom(n, p, r), d, dev(), SCATTER);
            let bc = create(ctx, n, GPUWIRE_DECIDE, d, dev(), BROADCAST);
            let e = create(ctx, n, GPUWIRE_DECIDE, d, dev(), SCATTER);
            set(ctx, a, &g);
            let what = format!("{} n={n}", d.name());
            check_bytes(ctx, d, &all(ctx, a, n * sz), &g, &format!("{what}: allgather"));
            let root = (p - 1) as i32;
            let mut out = vec![SENTINEL; n * sz];
            let dst = if r as i32 == root && n > 0 { out.as_mut_ptr().cast() } else { null() };
            ctx.ok(gpuwire_darray_gather(a, dst, root, null()), "gather");
            if r as i32 == root {
                check_bytes(ctx, d, &out, &g, &format!("{what}: gather to the last rank"));
            }
            for (src, dstn, step) in [(a, b, "default -> reversed"), (b, c, "reversed -> custom"), (c, bc, "custom -> BROADCAST"), (bc, e, "BROADCAST -> default")] {
                ctx.ok(gpuwire_darray_redistribute(src, dstn, null()), step);
                check_bytes(ctx, d, &all(ctx, dstn, n * sz), &g, &format!("{what}: {step}"));
            }
            // BROADCAST: rank 0's data everywhere; bcast from the last rank after a local change.
            let mine = pattern(seed(&[d as usize, n, 12, r]), n * sz);
            set(ctx, bc, &mine);
            check_bytes(ctx, d, &all(ctx, bc, n * sz), &pattern(seed(&[d as usize, n, 12, 0]), n * sz), &format!("{what}: BROADCAST set_global is rank 0's"));
            if n > 0 {
                let mut lb = 0u64;
                ctx.ok(gpuwire_darray_local(bc, &mut lb), "local view");
                ctx.ok(gpuwire_buffer_copy_from_host(lb, mine.as_ptr().cast(), null()), "write one rank's copy");
                ctx.ok(gpuwire_darray_bcast(bc, root, null()), "bcast");
                check_bytes(ctx, d, &all(ctx, bc, n * sz), &pattern(seed(&[d as usize, n, 12, p - 1]), n * sz), &format!("{what}: bcast from the last rank"));
                ctx.ok(gpuwire_buffer_free(lb), "free view");
            }
            for h in [a, b, c, bc, e] {
                ctx.ok(gpuwire_darray_free(h), "free");
            }
        }
    }
}

/// dhalo: the halo exchange of device arrays, against the expected ghost rows.
fn dhalo(ctx: &Ctx) {
    ctx.section("dhalo: halo exchange of N-D device arrays");
    let (r, p) = (ctx.rank, ctx.size);
    let cols = 5usize;
    for (n, halo, width) in [(9usize, 1usize, 1usize), (9, 2, 2), (9, 2, 1), (3000, 3, 3), (2, 1, 1)] {
        let ones = if r + 1 < p { 1 } else { n - (p - 1) } as i64;
        for (how, local) in [("default", GPUWIRE_DECIDE), ("custom", custom(n, p, r)), ("ones", ones)] {
            let what = format!("n={n} x {cols} {how} split, halo {halo}, width {width}");
            let shape = [n as i64, cols as i64];
            let mut h = 0;
            let s = gpuwire_darray_create_nd(ctx.world, 2, shape.as_ptr(), local, halo as i64, Dtype::GPUWIRE_FLOAT64 as i32, dev() as i32, SCATTER, &mut h);
            if !ctx.ok(s, &format!("{what}: create_nd")) {
                continue;
            }
            let value = |g: usize, c: usize| (10 * g + c + 1) as f64;
            let mut lens = vec![0i64; p];
            ctx.ok(gpuwire_darray_local_lens(h, lens.as_mut_ptr()), "local_lens");
            let rows: Vec<usize> = lens.iter().map(|l| *l as usize / cols).collect();
            let start: usize = rows[..r].iter().sum();
            let total = (rows[r] + 2 * halo) * cols;
            let mut whole = 0u64;
            ctx.ok(gpuwire_darray_local_with_halo(h, &mut whole), "view with halo");
            // Ghost rows to a sentinel, then the owned rows.
            ctx.ok(gpuwire_buffer_copy_from_host(whole, vec![-1.0f64; total].as_ptr().cast(), null()), "sentinel");
            let g: Vec<f64> = (0..n * cols).map(|k| value(k / cols, k % cols)).collect();
            ctx.ok(gpuwire_darray_set_global(h, g.as_ptr().cast(), null()), "set_global");
            ctx.ok(gpuwire_darray_halo_exchange(h, width as i64, null()), "halo_exchange");
            let mut got = vec![0f64; total];
            ctx.ok(gpuwire_buffer_copy_to_host(whole, got.as_mut_ptr().cast(), null()), "read back");
            let mut bad = Vec::new();
            for srow in 0..rows[r] + 2 * halo {
                let gr = start as i64 - halo as i64 + srow as i64;
                let owned = srow >= halo && srow < halo + rows[r];
                let filled = !owned && gr >= 0 && (gr as usize) < n && gr >= start as i64 - width as i64 && gr < (start + rows[r] + width) as i64;
                for c in 0..cols {
                    let want = if owned || filled { value(gr as usize, c) } else { -1.0 };
                    if got[srow * cols + c] != want {
                        bad.push(format!("storage row {srow} (global {gr}) col {c}: {} != {want}", got[srow * cols + c]));
                    }
                }
            }
            ctx.check(bad.is_empty(), || format!("{what}: {}", bad.iter().take(4).cloned().collect::<Vec<_>>().join("; ")));
            ctx.ok(gpuwire_buffer_free(whole), "free view");
            ctx.ok(gpuwire_darray_free(h), "free");
        }
    }
}

/// The value of global element g of a grid test array.
fn grid_value(g: &[usize; 3]) -> f64 {
    1.0 + 10000.0 * g[0] as f64 + 100.0 * g[1] as f64 + g[2] as f64
}

/// A padded 3-D block (dims n + 2 h): owned elements their global value, ghosts -1.
fn grid_paint(start: &[usize; 3], n: &[usize; 3], h: &[usize; 3]) -> Vec<f64> {
    let pd = [n[0] + 2 * h[0], n[1] + 2 * h[1], n[2] + 2 * h[2]];
    let mut v = vec![-1.0; pd[0] * pd[1] * pd[2]];
    for i in 0..n[0] {
        for j in 0..n[1] {
            for k in 0..n[2] {
                v[((i + h[0]) * pd[1] + j + h[1]) * pd[2] + k + h[2]] = grid_value(&[start[0] + i, start[1] + j, start[2] + k]);
            }
        }
    }
    v
}

/// The mismatches of a padded block after an exchange of widths `w` (the rule of
/// tests/c/test_darray.c's check_ghosts): owned elements unchanged; a ghost within the width on
/// every axis where it lies outside, inside the global array or periodic there, and (faces
/// only) outside on one axis, holds its global element's value (wrapped); the others stay -1.
#[allow(clippy::too_many_arguments)]
fn grid_check(got: &[f64], shape: &[usize; 3], start: &[usize; 3], n: &[usize; 3], h: &[usize; 3], w: &[usize; 3], per: &[bool; 3], corners: bool) -> Vec<String> {
    let pd = [n[0] + 2 * h[0], n[1] + 2 * h[1], n[2] + 2 * h[2]];
    let mut bad = Vec::new();
    for l0 in 0..pd[0] {
        for l1 in 0..pd[1] {
            for l2 in 0..pd[2] {
                let l = [l0, l1, l2];
                let (mut outside, mut ok, mut g) = (0, true, [0usize; 3]);
                for a in 0..3 {
                    let mut ga = start[a] as i64 + l[a] as i64 - h[a] as i64;
                    if l[a] < h[a] || l[a] >= h[a] + n[a] {
                        outside += 1;
                        let dist = if l[a] < h[a] { h[a] - l[a] } else { l[a] + 1 - h[a] - n[a] };
                        ok &= dist <= w[a];
                        if ga < 0 || ga >= shape[a] as i64 {
                            if per[a] {
                                ga = ga.rem_euclid(shape[a] as i64);
                            } else {
                                ok = false;
                            }
                        }
                    }
                    g[a] = ga.max(0) as usize;
                }
                let want = if outside == 0 || (ok && (corners || outside == 1)) { grid_value(&g) } else { -1.0 };
                let v = got[(l0 * pd[1] + l1) * pd[2] + l2];
                if v != want && bad.len() < 4 {
                    bad.push(format!("element {l:?}: {v} != {want}"));
                }
            }
        }
    }
    bad
}

/// dgrid: 3-D device arrays on a process grid (gpuwire_darray_create_cart): the halo exchange
/// of the faces (one group: the x faces contiguous, the others strided views packed by kernels)
/// and of the corners (axis by axis), periodic and not, on the legacy and a non-blocking
/// stream, every ghost checked; operations on the owned box (not contiguous); then
/// gpuwire_darray_wrap over cuMemAlloc'd memory, a periodic row split (an NCCL Jacobi solver's
/// layout), the memory still the program's after gpuwire_darray_free.
fn dgrid(ctx: &Ctx, stream: cu::CUstream) {
    ctx.section("dgrid: halo exchange of 3-D device arrays on a process grid, and of wrapped device memory");
    let f64s = Dtype::GPUWIRE_FLOAT64 as i32;
    let cases: [([usize; 3], [i64; 3], [usize; 3], [bool; 3]); 3] = [
        ([6, 5, 4], [0, 1, 1], [1, 1, 1], [true, false, true]),
        ([4, 6, 5], [1, 0, 1], [1, 2, 1], [false, true, false]),
        ([5, 4, 6], [1, 1, 0], [2, 1, 1], [true, true, true]),
    ];
    for (shape, procs, h, per) in cases {
        for corners in [false, true] {
            for (sname, st) in [("legacy stream", null()), ("non-blocking stream", stream.cast::<c_void>())] {
                let what = format!("shape {shape:?} procs {procs:?} halo {h:?} periodic {per:?}{} on the {sname}", if corners { " with corners" } else { "" });
                let dims = shape.map(|d| d as i64);
                let hs = h.map(|d| d as i64);
                let ps = per.map(|b| b as i32);
                let mut d = 0;
                if !ctx.ok(gpuwire_darray_create_cart(ctx.world, 3, dims.as_ptr(), procs.as_ptr(), hs.as_ptr(), ps.as_ptr(), f64s, dev() as i32, &mut d), &format!("{what}: create_cart")) {
                    continue;
                }
                let (mut starts, mut ls) = ([0i64; 3], [0i64; 3]);
                ctx.ok(gpuwire_darray_cart(d, std::ptr::null_mut(), std::ptr::null_mut(), starts.as_mut_ptr(), std::ptr::null_mut(), std::ptr::null_mut()), "cart");
                ctx.ok(gpuwire_darray_local_shape(d, ls.as_mut_ptr()), "local_shape");
                let (start, n) = (starts.map(|v| v as usize), ls.map(|v| v as usize));
                let mut whole = 0u64;
                ctx.ok(gpuwire_darray_local_with_halo(d, &mut whole), "view with halo");
                ctx.ok(gpuwire_buffer_copy_from_host(whole, grid_paint(&start, &n, &h).as_ptr().cast(), null()), "paint");
                let flags = if corners { GPUWIRE_HALO_CORNERS } else { 0 };
                ctx.ok(gpuwire_darray_halo_exchange_axes(d, std::ptr::null(), flags, st), &format!("{what}: halo_exchange_axes"));
                let mut got = grid_paint(&start, &n, &h);
                ctx.ok(gpuwire_buffer_copy_to_host(whole, got.as_mut_ptr().cast(), st), "read back");
                let bad = grid_check(&got, &shape, &start, &n, &h, &h, &per, corners);
                ctx.check(bad.is_empty(), || format!("{what}: {}", bad.join("; ")));
                if !corners && st.is_null() {
                    // The owned box is not contiguous (a halo on every axis): ops pack it.
                    let total: usize = shape.iter().product();
                    let g: Vec<f64> = (0..total).map(|i| (i % 11) as f64 - 5.0).collect();
                    ctx.ok(gpuwire_darray_set_global(d, g.as_ptr().cast(), null()), "set_global");
                    let two = 2.0f64;
                    ctx.ok(gpuwire_darray_scale(d, (&two as *const f64).cast(), null()), "scale");
                    let mut back = vec![0f64; total];
                    ctx.ok(gpuwire_darray_allgather(d, back.as_mut_ptr().cast(), null()), "allgather");
                    ctx.check(back.iter().zip(&g).all(|(b, x)| *b == 2.0 * x), || format!("{what}: set_global, scale, allgather"));
                    let mut sum = 0f64;
                    ctx.ok(gpuwire_darray_sum(d, (&mut sum as *mut f64).cast(), null()), "sum");
                    ctx.check_eq(sum, 2.0 * g.iter().sum::<f64>(), &format!("{what}: sum"));
                    let mut after = vec![0f64; got.len()];
                    ctx.ok(gpuwire_buffer_copy_to_host(whole, after.as_mut_ptr().cast(), null()), "read back");
                    let pd = [n[0] + 2 * h[0], n[1] + 2 * h[1], n[2] + 2 * h[2]];
                    ctx.check(after[0] == got[0] && after[pd[0] * pd[1] * pd[2] - 1] == got[got.len() - 1], || format!("{what}: operations leave the ghosts alone"));
                }
                ctx.ok(gpuwire_buffer_free(whole), "free view");
                ctx.ok(gpuwire_darray_free(d), "free");
            }
        }
    }
    // A Jacobi solver's grid in its own device memory: rows split, periodic top and bottom.
    let (ny, nx) = (7usize, 5usize);
    let (r, p) = (ctx.rank, ctx.size);
    let rows = ny / p + usize::from(r < ny % p);
    let start = r * (ny / p) + r.min(ny % p);
    let count = (rows + 2) * nx;
    let mut host_mem = vec![0f64; count];
    let mut raw: cu::CUdeviceptr = 0;
    let ptr = if dev() == HOST {
        host_mem.as_mut_ptr() as usize
    } else {
        // SAFETY: a plain device allocation in the current context, freed below.
        assert_eq!(unsafe { cu::cuMemAlloc_v2(&mut raw, count * 8) }, cu::CUresult::CUDA_SUCCESS, "cuMemAlloc");
        raw as usize
    };
    let mut mem = 0u64;
    ctx.ok(gpuwire_buffer_wrap(ptr as *mut c_void, count as i64, f64s, Space::GPUWIRE_SPACE_AUTO as i32, &mut mem), "wrap the memory as a buffer");
    let (st3, n3, h3) = ([start, 0, 0], [rows, nx, 1], [1usize, 0, 0]);
    ctx.ok(gpuwire_buffer_copy_from_host(mem, grid_paint(&st3, &n3, &h3).as_ptr().cast(), null()), "paint");
    let (dims, procs, halo, per) = ([ny as i64, nx as i64], [0i64, 1], [1i64, 0], [1i32, 0]);
    let mut d = 0;
    if ctx.ok(gpuwire_darray_wrap(ctx.world, ptr as *mut c_void, 2, dims.as_ptr(), procs.as_ptr(), halo.as_ptr(), per.as_ptr(), f64s, Space::GPUWIRE_SPACE_AUTO as i32, &mut d), "darray_wrap") {
        let mut data = null();
        ctx.ok(gpuwire_darray_data(d, &mut data), "data");
        ctx.check_eq(data as usize, ptr + nx * 8, "the first owned element of wrapped memory");
        ctx.ok(gpuwire_darray_halo_exchange(d, 1, stream.cast()), "halo_exchange (wrapped, periodic)");
        ctx.ok(gpuwire_darray_free(d), "free");
        let mut got = vec![0f64; count];
        ctx.ok(gpuwire_buffer_copy_to_host(mem, got.as_mut_ptr().cast(), stream.cast()), "read back after free");
        let bad = grid_check(&got, &[ny, nx, 1], &st3, &n3, &h3, &[1, 0, 0], &[true, false, false], false);
        ctx.check(bad.is_empty(), || format!("wrapped device rows, periodic: {}", bad.join("; ")));
    }
    ctx.ok(gpuwire_buffer_free(mem), "free buffer");
    if raw != 0 {
        // SAFETY: allocated above; nothing uses it any more.
        assert_eq!(unsafe { cu::cuMemFree_v2(raw) }, cu::CUresult::CUDA_SUCCESS, "cuMemFree: the memory was still the program's");
    }
}

/// dtags: the program's own messages on device memory never meet a distributed array's. Before
/// a halo exchange (then a gather), each rank posts gpuwire_isend of a device row marked -777
/// to the peers the exchange sends to, with the tags the arrays once used on the program's
/// communicator (32001 down, 32002 up; 32004 to the gather's root). The ghost rows and the
/// gathered array must hold the neighbours' rows; the program's receives, its marked rows.
fn dtags(ctx: &Ctx) {
    ctx.section("dtags: program messages with the arrays' old tags around a device halo exchange and gather");
    let (r, p) = (ctx.rank, ctx.size);
    let (n, cols) = (8usize, 3usize);
    let shape = [n as i64, cols as i64];
    let mut h = 0;
    if !ctx.ok(gpuwire_darray_create_nd(ctx.world, 2, shape.as_ptr(), GPUWIRE_DECIDE, 1, Dtype::GPUWIRE_FLOAT64 as i32, dev() as i32, SCATTER, &mut h), "create_nd") {
        return;
    }
    let mut device = -1;
    ctx.ok(gpuwire_comm_device(ctx.world, &mut device), "device");
    let space = dev();
    let alloc = |count: usize, v: f64| {
        let mut b = 0u64;
        ctx.ok(gpuwire_buffer_alloc(count as i64, Dtype::GPUWIRE_FLOAT64 as i32, space as i32, device, &mut b), "buffer_alloc");
        ctx.ok(gpuwire_buffer_copy_from_host(b, vec![v; count].as_ptr().cast(), null()), "write buffer");
        b
    };
    let read = |b: u64, count: usize| {
        let mut v = vec![0f64; count];
        ctx.ok(gpuwire_buffer_copy_to_host(b, v.as_mut_ptr().cast(), null()), "read buffer");
        v
    };
    let value = |g: usize, c: usize| (10 * g + c + 1) as f64;
    let mut lens = vec![0i64; p];
    ctx.ok(gpuwire_darray_local_lens(h, lens.as_mut_ptr()), "local_lens");
    let rows: Vec<usize> = lens.iter().map(|l| *l as usize / cols).collect();
    let start: usize = rows[..r].iter().sum();
    let g: Vec<f64> = (0..n * cols).map(|k| value(k / cols, k % cols)).collect();
    ctx.ok(gpuwire_darray_set_global(h, g.as_ptr().cast(), null()), "set_global");
    let (down, up) = (alloc(cols, -777.0), alloc(cols, -777.0));
    let (mut rd, mut ru) = (0u64, 0u64);
    if r + 1 < p {
        ctx.ok(gpuwire_isend(ctx.world, down, (r + 1) as i32, 32001, null(), &mut rd), "isend tag 32001");
    }
    if r > 0 {
        ctx.ok(gpuwire_isend(ctx.world, up, (r - 1) as i32, 32002, null(), &mut ru), "isend tag 32002");
    }
    ctx.ok(gpuwire_darray_halo_exchange(h, 1, null()), "halo_exchange");
    let mut whole = 0u64;
    ctx.ok(gpuwire_darray_local_with_halo(h, &mut whole), "view with halo");
    let got = read(whole, (rows[r] + 2) * cols);
    for c in 0..cols {
        if r > 0 {
            ctx.check_eq(got[c], value(start - 1, c), &format!("ghost row above, column {c}"));
        }
        if r + 1 < p {
            ctx.check_eq(got[(rows[r] + 1) * cols + c], value(start + rows[r], c), &format!("ghost row below, column {c}"));
        }
    }
    for (peer, tag, cond) in [(r.wrapping_sub(1), 32001, r > 0), (r + 1, 32002, r + 1 < p)] {
        if cond {
            let b = alloc(cols, 0.0);
            ctx.ok(gpuwire_recv(ctx.world, b, peer as i32, tag, null()), &format!("recv tag {tag}"));
            ctx.check_eq(read(b, cols), vec![-777.0; cols], &format!("the program's message with tag {tag}"));
            ctx.ok(gpuwire_buffer_free(b), "free");
        }
    }
    ctx.ok(gpuwire_wait(&mut rd), "wait 32001");
    ctx.ok(gpuwire_wait(&mut ru), "wait 32002");
    // Gather at rank 0, every other rank's block announced by a program message with tag 32004.
    let mut rg = 0u64;
    let mine = alloc(rows[r] * cols, -777.0);
    if r > 0 && rows[r] > 0 {
        ctx.ok(gpuwire_isend(ctx.world, mine, 0, 32004, null(), &mut rg), "isend tag 32004");
    }
    let mut gathered = vec![0f64; n * cols];
    ctx.ok(gpuwire_darray_gather(h, gathered.as_mut_ptr().cast(), 0, null()), "gather");
    if r == 0 {
        ctx.check_eq(gathered, g.clone(), "the gathered array");
        for (s, rows_s) in rows.iter().enumerate().skip(1).filter(|(_, m)| **m > 0) {
            let b = alloc(rows_s * cols, 0.0);
            ctx.ok(gpuwire_recv(ctx.world, b, s as i32, 32004, null()), "recv tag 32004");
            ctx.check_eq(read(b, rows_s * cols), vec![-777.0; rows_s * cols], &format!("rank {s}'s program message with tag 32004"));
            ctx.ok(gpuwire_buffer_free(b), "free");
        }
    }
    ctx.ok(gpuwire_wait(&mut rg), "wait 32004");
    for b in [down, up, mine, whole] {
        ctx.ok(gpuwire_buffer_free(b), "free");
    }
    ctx.ok(gpuwire_darray_free(h), "free");
}

/// dstream: operations on a caller's non-blocking stream are ordered on it.
fn dstream(ctx: &Ctx, stream: cu::CUstream) {
    ctx.section("dstream: fill, axpy, halo exchange and dot ordered on one non-blocking stream");
    let s = stream as *mut c_void;
    let n = 1 << 20;
    let d = Dtype::GPUWIRE_FLOAT64;
    let shape = [n as i64, 1];
    let (mut x, mut y) = (0u64, 0u64);
    ctx.ok(gpuwire_darray_create_nd(ctx.world, 2, shape.as_ptr(), GPUWIRE_DECIDE, 1, d as i32, dev() as i32, SCATTER, &mut x), "create x");
    ctx.ok(gpuwire_darray_create_nd(ctx.world, 2, shape.as_ptr(), GPUWIRE_DECIDE, 1, d as i32, dev() as i32, SCATTER, &mut y), "create y");
    for round in 0..5 {
        let (two, three) = (2.0f64 + round as f64, 3.0f64);
        // All enqueued on `s` without waiting: each step must see the previous one.
        ctx.ok(gpuwire_darray_fill(x, (&two as *const f64).cast(), s), "fill x");
        ctx.ok(gpuwire_darray_fill(y, (&three as *const f64).cast(), s), "fill y");
        ctx.ok(gpuwire_darray_axpy((&two as *const f64).cast(), x, y, s), "y += a x");
        ctx.ok(gpuwire_darray_halo_exchange(y, 1, s), "halo exchange");
        let mut v = 0f64;
        ctx.ok(gpuwire_darray_dot(x, y, (&mut v as *mut f64).cast(), s), "dot");
        let want = two * (three + two * two) * n as f64;
        ctx.check_eq(v, want, &format!("round {round}: dot after fill, axpy and halo exchange on one stream"));
    }
    ctx.ok(gpuwire_darray_free(x), "free");
    ctx.ok(gpuwire_darray_free(y), "free");
}

/// gpuwire_darray_comm's handle freed (a local release: the communicator has another handle),
/// then the array, then the communicator, 30 times, each on a new communicator: the communicator
/// still works after the extra handle's free (an allreduce on it, checked), and nothing is left
/// behind. The extra handle's free was taken as the collective free of a communicator held
/// elsewhere, which on IPC leaves the shared segment to MPI_Finalize: two mappings and about
/// 75 KB per communicator for the rest of the process (a helper's bug hunt, 2026-12-06); here
/// the mappings of the process (/proc/self/maps) must not grow by 10 over 25 communicators.
fn dcomm(ctx: &Ctx) {
    ctx.section("dcomm: gpuwire_darray_comm's handle freed, then the array and the communicator");
    let maps = || std::fs::read_to_string("/proc/self/maps").map(|m| m.lines().count()).unwrap_or(0);
    let mut before = 0;
    for round in 0..30 {
        if round == 5 {
            before = maps();
        }
        let mut c = 0;
        if !ctx.ok(gpuwire_comm_world(std::ptr::null(), &mut c), "comm_world") {
            return;
        }
        let mut h = 0;
        ctx.ok(gpuwire_darray_create(c, 100, GPUWIRE_DECIDE, Dtype::GPUWIRE_FLOAT64 as i32, dev() as i32, SCATTER, &mut h), "create");
        let (mut extra, mut size) = (0u64, 0i32);
        ctx.ok(gpuwire_darray_comm(h, &mut extra, &mut size), "darray_comm");
        ctx.check(size == ctx.size as i32, || format!("darray_comm's size {size}"));
        ctx.ok(gpuwire_comm_free(extra), "comm_free of darray_comm's handle");
        let mut b = 0;
        ctx.ok(gpuwire_buffer_alloc(4, Dtype::GPUWIRE_INT32 as i32, HOST as i32, -1, &mut b), "buffer_alloc");
        let mut p: *mut c_void = null();
        ctx.ok(gpuwire_buffer_pointer(b, &mut p), "buffer_pointer");
        // SAFETY: 4 int32 of host memory.
        unsafe { std::slice::from_raw_parts_mut(p.cast::<i32>(), 4).fill(ctx.rank as i32 + 1) };
        ctx.ok(gpuwire_allreduce(c, b, b, ReduceOp::GPUWIRE_SUM as i32, null()), "allreduce on the communicator after the extra handle's free");
        // SAFETY: as above.
        let got = unsafe { *p.cast::<i32>() };
        let want = (ctx.size * (ctx.size + 1) / 2) as i32;
        ctx.check(got == want, || format!("allreduce after the extra handle's free gave {got}, expected {want}"));
        gpuwire_buffer_free(b);
        ctx.ok(gpuwire_darray_free(h), "darray_free");
        ctx.ok(gpuwire_comm_free(c), "comm_free");
    }
    let grown = maps() as i64 - before as i64;
    ctx.check(grown < 10, || format!("the process's mappings grew by {grown} over 25 communicators"));
    // Only rank 0 takes the extra handle, and frees it after the array and the communicator,
    // past a barrier: every rank's free of the communicator's own handle is the collective free
    // (a count of the handles made rank 0's the local one and the extra handle's, after the
    // barrier, the collective one, while the others' free waited for it there: on IPC, for ever).
    for _ in 0..3 {
        let mut c = 0;
        if !ctx.ok(gpuwire_comm_world(std::ptr::null(), &mut c), "comm_world") {
            return;
        }
        let mut h = 0;
        ctx.ok(gpuwire_darray_create(c, 100, GPUWIRE_DECIDE, Dtype::GPUWIRE_FLOAT64 as i32, dev() as i32, SCATTER, &mut h), "create");
        let (mut extra, mut size) = (0u64, 0i32);
        if ctx.rank == 0 {
            ctx.ok(gpuwire_darray_comm(h, &mut extra, &mut size), "darray_comm");
        }
        ctx.ok(gpuwire_darray_free(h), "darray_free");
        ctx.ok(gpuwire_comm_free(c), "comm_free of the communicator's own handle");
        ctx.ok(gpuwire_barrier(ctx.world, null()), "barrier");
        if extra != 0 {
            ctx.ok(gpuwire_comm_free(extra), "comm_free of darray_comm's handle, last");
        }
    }
}

/// gpuwire_darray_free is local, also when it releases a communicator that gpuwire_comm_free
/// (every rank) left to the array: rank 0 frees its array, then every rank enters a barrier on
/// the world communicator, then the other ranks free theirs. On IPC rank 0's free tore the
/// communicator down and waited there for the other ranks' teardown, which came only after the
/// barrier (for ever without a timeout; here, with 4 s, it took the 4 s). The same with a
/// pending request as the holder, waited for by one rank first. Each release must take well
/// under the communicator's timeout.
fn dfree(ctx: &Ctx) {
    ctx.section("dfree: the last release of a freed communicator, by a local call of one rank");
    let r = ctx.rank;
    let mut cfg: gpuwire_config = unsafe { std::mem::zeroed() };
    ctx.ok(gpuwire_config_init(&mut cfg), "config_init");
    cfg.timeout_seconds = 4.0;
    let quick = |what: &str, t: Instant| {
        let s = t.elapsed().as_secs_f64();
        ctx.check(s < 2.0, || format!("{what} took {s:.2} s: it waited for the other ranks (the communicator's timeout is 4 s)"));
    };
    for holder in ["array", "request"] {
        let mut c = 0;
        if !ctx.ok(gpuwire_comm_world(&cfg, &mut c), "comm_world") {
            return;
        }
        let (mut h, mut b, mut q) = (0u64, 0u64, 0u64);
        if holder == "array" {
            ctx.ok(gpuwire_darray_create(c, 100, GPUWIRE_DECIDE, Dtype::GPUWIRE_FLOAT64 as i32, dev() as i32, SCATTER, &mut h), "create");
        } else {
            let mut device = -1;
            ctx.ok(gpuwire_comm_device(c, &mut device), "device");
            ctx.ok(gpuwire_buffer_alloc(8, Dtype::GPUWIRE_FLOAT64 as i32, dev() as i32, device, &mut b), "buffer_alloc");
            // Rank 0 receives from the last rank, which sends; the others take no part.
            let last = ctx.size as i32 - 1;
            if r == 0 && last > 0 {
                ctx.ok(gpuwire_irecv(c, b, last, 5, null(), &mut q), "irecv");
            } else if r as i32 == last && last > 0 {
                ctx.ok(gpuwire_isend(c, b, 0, 5, null(), &mut q), "isend");
            }
        }
        ctx.ok(gpuwire_comm_free(c), &format!("comm_free while {holder}s hold it"));
        let mut release = |what: &str| {
            let t = Instant::now();
            if holder == "array" {
                ctx.ok(gpuwire_darray_free(h), what);
            } else if q != 0 {
                ctx.ok(gpuwire_wait(&mut q), what);
            }
            quick(what, t);
        };
        if r == 0 {
            release(&format!("rank 0's release of the {holder}, before the others"));
        }
        ctx.ok(gpuwire_barrier(ctx.world, null()), "barrier");
        if r != 0 {
            release(&format!("the {holder}'s release after rank 0's"));
        }
        if b != 0 {
            gpuwire_buffer_free(b);
        }
        ctx.ok(gpuwire_barrier(ctx.world, null()), "barrier");
    }
}

fn main() {
    let Ok(cases) = std::env::var("GPUWIRE_GPU_TEST") else {
        println!(
            "GPU darray tests NOT RUN here: they need a GPU. scripts/gpu-run.sh runs them on the GPU machine (GPUWIRE_GPU_TEST=dops,dmove,dhalo,dstream,dtags,dgrid,dfree under mpirun)."
        );
        return;
    };
    let np: usize = std::env::var("GPUWIRE_GPU_TEST_NP").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let ctx = Ctx::init(np);
    let mut desc = vec![0 as std::ffi::c_char; 1024];
    ctx.ok(gpuwire_comm_describe(ctx.world, desc.as_mut_ptr(), desc.len()), "describe");
    // SAFETY: NUL-terminated by gpuwire_comm_describe.
    println!("rank {}: {}", ctx.rank, unsafe { std::ffi::CStr::from_ptr(desc.as_ptr()) }.to_string_lossy());
    let mut stream: cu::CUstream = std::ptr::null_mut();
    if dev() != HOST {
        let mut d = 0;
        ctx.ok(gpuwire_comm_device(ctx.world, &mut d), "device");
        let cdev = cudarc::driver::result::device::get(d.max(0)).expect("cuDeviceGet");
        let cctx = unsafe { cudarc::driver::result::primary_ctx::retain(cdev) }.expect("retain");
        unsafe { cudarc::driver::result::ctx::set_current(cctx) }.expect("set_current");
        // SAFETY: creates one stream in the current context; CU_STREAM_NON_BLOCKING = 1.
        assert_eq!(unsafe { cu::cuStreamCreate(&mut stream, 1) }, cu::CUresult::CUDA_SUCCESS, "cuStreamCreate");
    }
    for case in cases.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        let t0 = Instant::now();
        let before = ctx.failures();
        match case {
            "dops" => dops(&ctx),
            "dmove" => dmove(&ctx),
            "dhalo" => dhalo(&ctx),
            "dstream" => dstream(&ctx, stream),
            "dtags" => dtags(&ctx),
            "dgrid" => dgrid(&ctx, stream),
            "dfree" => dfree(&ctx),
            "dcomm" => dcomm(&ctx),
            other => {
                ctx.check(false, || format!("unknown case {other}"));
            }
        }
        let ms = t0.elapsed().as_millis();
        let failed = ctx.failures() - before;
        if failed == 0 {
            println!("RESULT PASS {case} rank {} ({ms} ms)", ctx.rank);
        } else {
            println!("RESULT FAIL {case} rank {}: {failed} failed checks (see the FAIL lines above)", ctx.rank);
            // Other ranks may wait in a collective this rank will not call: end the job now.
            std::process::exit(1);
        }
    }
    ctx.finish();
}
