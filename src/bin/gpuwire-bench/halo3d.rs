//! `gpuwire-bench halo3d` (issue 15's benchmark): the halo exchange of the six faces of an
//! n³ float64 local grid (default n = 256, one ghost layer on every side; C order, so the faces
//! normal to axis 2 are strided element by element, those normal to axis 0 are whole rows
//! n·(n+2) elements apart, stride nx·ny), per iteration on a non-default stream, three ways in
//! the same run on the same memory, in interleaved blocks (the order rotates every repetition):
//!
//! - `gpuwire`: gpuwire_darray_halo_exchange_axes on a gpuwire_darray_create_cart array
//!   (global (2n) x n x n on 2 ranks, procs {2, 1, 1}, every axis periodic: the two axis-0 faces
//!   go to the other rank, the four others to the rank itself), then a stream synchronization;
//! - `kit-datatypes`: the same twelve messages as MPI_Irecv / MPI_Isend of
//!   MPI_Type_create_subarray datatypes on the device storage (a CUDA-aware MPI's derived
//!   datatypes), MPI_Waitall;
//! - `by-hand`: each face packed by a GPU kernel (gpuwire's pack kernel, launched directly) into
//!   contiguous device memory, a stream synchronization, contiguous MPI_Irecv / MPI_Isend of
//!   device memory, MPI_Waitall, each ghost face unpacked by a kernel, a synchronization.
//!
//! Before timing, each way runs once on marked data and its ghosts are checked (the other rank's
//! value in the axis-0 ghosts, this rank's own in the others). Prints `BENCH <label> halo3d
//! <bytes of the six faces> <median_us> <min_us> <reps> 0 <ranks>` per way and one
//! `HALO3D n=<n> gpuwire <us> kit-datatypes <us> by-hand <us> speedup-vs-datatypes <x>
//! vs-by-hand <ratio> target <PASS|FAIL>` line (target: at least 10x the derived datatypes,
//! within 10 % of by hand). Needs a CUDA-aware MPI (the kit) and 2 ranks (they may share a GPU).

use super::*;
use gpuwire::device::kernels::{PackView, pack};
use gpuwire::device::{CtxGuard, Stream};
use gpuwire::ffi::darray::*;

struct Face {
    /// Element offset in the storage, and (length, stride) of its two dimensions.
    send_off: usize,
    recv_off: usize,
    dims: [(usize, usize); 2],
    /// MPI subarray datatypes of the face sent and of the ghost face received.
    send_t: msys::MPI_Datatype,
    recv_t: msys::MPI_Datatype,
    dest: i32,
    source: i32,
    tag: i32,
}

fn usage() -> ! {
    fatal("usage: mpirun -np 2 gpuwire-bench halo3d [--n N] [--reps R] [--target-ms T] [--backend cuda_aware|staged|ipc] [--tag T]");
}

pub fn run(args: &[String]) {
    let (mut n, mut reps, mut target_ms, mut tag, mut backend) = (256usize, 11usize, 50.0f64, None::<String>, BackendKind::GPUWIRE_BACKEND_AUTO);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().unwrap_or_else(|| usage());
        match a.as_str() {
            "--n" => n = val().parse().unwrap_or_else(|_| usage()),
            "--reps" => reps = val().parse().unwrap_or_else(|_| usage()),
            "--target-ms" => target_ms = val().parse().unwrap_or_else(|_| usage()),
            "--tag" => tag = Some(val()),
            "--backend" => {
                backend = match val().as_str() {
                    "cuda_aware" => BackendKind::GPUWIRE_BACKEND_MPI_CUDA_AWARE,
                    "staged" => BackendKind::GPUWIRE_BACKEND_MPI_STAGED,
                    "ipc" => BackendKind::GPUWIRE_BACKEND_IPC,
                    "auto" => BackendKind::GPUWIRE_BACKEND_AUTO,
                    _ => usage(),
                }
            }
            "-h" | "--help" => usage(),
            _ => usage(),
        }
    }
    if let Err(e) = gpuwire::device::cuda_with_devices() {
        eprintln!("gpuwire-bench halo3d: needs an NVIDIA GPU and its driver: {e}");
        std::process::exit(2);
    }
    ok(gpuwire_init(), "gpuwire_init");
    MPI_UP.store(true, Ordering::Relaxed);
    let m = Mpi::new();
    RANK.store(m.rank, Ordering::Relaxed);
    if m.size != 2 {
        fatal("halo3d runs on 2 ranks (mpirun -np 2; they may share the GPU)");
    }
    let (aware, source) = gpuwire::mpisys::cuda_support().unwrap_or_else(|e| (None, e.to_string()));
    if aware != Some(true) {
        give_up(m, &format!("halo3d compares against the MPI's own derived datatypes on device memory, but this MPI is not known to be CUDA-aware ({source}); run it under the CUDA-aware kit"));
    }
    let mut cfg = std::mem::MaybeUninit::<gpuwire_config>::uninit();
    ok(gpuwire_config_init(cfg.as_mut_ptr()), "gpuwire_config_init");
    // SAFETY: filled by gpuwire_config_init.
    let mut cfg = unsafe { cfg.assume_init() };
    cfg.backend = backend as i32;
    let mut comm: gpuwire_comm = 0;
    ok(gpuwire_comm_world(&cfg, &mut comm), "gpuwire_comm_world");
    let mut device = 0;
    ok(gpuwire_comm_device(comm, &mut device), "gpuwire_comm_device");
    if m.rank == 0 {
        out(&format!("# gpuwire: {}", describe(comm)));
    }
    let dev = cudarc::driver::result::device::get(device).unwrap_or_else(|e| fatal(&format!("cuDeviceGet({device}): {e:?}")));
    let ctx = unsafe { cudarc::driver::result::primary_ctx::retain(dev) }.unwrap_or_else(|e| fatal(&format!("cuDevicePrimaryCtxRetain: {e:?}")));
    unsafe { cudarc::driver::result::ctx::set_current(ctx) }.unwrap_or_else(|e| fatal(&format!("cuCtxSetCurrent: {e:?}")));
    let mut stream: cu::CUstream = std::ptr::null_mut();
    cuok(unsafe { cu::cuStreamCreate(&mut stream, 1) }, "cuStreamCreate");

    // The array: local n³ with one ghost layer on every side.
    let p = n + 2;
    let shape = [2 * n as i64, n as i64, n as i64];
    let (procs, halo, periodic) = ([2i64, 1, 1], [1i64, 1, 1], [1i32, 1, 1]);
    let mut d = 0u64;
    ok(
        gpuwire_darray_create_cart(comm, 3, shape.as_ptr(), procs.as_ptr(), halo.as_ptr(), periodic.as_ptr(), Dtype::GPUWIRE_FLOAT64 as i32, Space::GPUWIRE_SPACE_DEVICE as i32, &mut d),
        "gpuwire_darray_create_cart",
    );
    let mut whole: gpuwire_buffer = 0;
    ok(gpuwire_darray_local_with_halo(d, &mut whole), "gpuwire_darray_local_with_halo");
    let base = ptr_of(whole);
    let other = 1 - m.rank;
    let strides = [p * p, p, 1];
    let face_elems = n * n;
    // Faces in gpuwire's order: per axis, the ghosts below (from the previous block's last
    // plane: sent to the next), then above.
    let mut faces = Vec::new();
    for a in 0..3 {
        let (b, c) = match a {
            0 => (1, 2),
            1 => (0, 2),
            _ => (0, 1),
        };
        let peer = if a == 0 { other } else { m.rank };
        for (dir, send_at, recv_at) in [(0, n, 0), (1, 1, n + 1)] {
            let off = |at: usize| at * strides[a] + strides[b] + strides[c];
            let subarray = |at: usize| {
                let sizes = [p as c_int; 3];
                let mut sub = [n as c_int; 3];
                let mut starts = [1 as c_int; 3];
                sub[a] = 1;
                starts[a] = at as c_int;
                let mut t = unsafe { msys::RSMPI_DATATYPE_NULL };
                // SAFETY: valid arrays of 3; a committed type freed at the end.
                unsafe {
                    mok(msys::MPI_Type_create_subarray(3, sizes.as_ptr(), sub.as_ptr(), starts.as_ptr(), msys::MPI_ORDER_C as c_int, msys::RSMPI_DOUBLE, &mut t), "MPI_Type_create_subarray");
                    mok(msys::MPI_Type_commit(&mut t), "MPI_Type_commit");
                }
                t
            };
            faces.push(Face {
                send_off: off(send_at),
                recv_off: off(recv_at),
                dims: [(n, strides[b]), (n, strides[c])],
                send_t: subarray(send_at),
                recv_t: subarray(recv_at),
                dest: peer,
                source: peer,
                tag: 100 + 2 * a as i32 + dir,
            });
        }
    }
    let bytes = faces.len() * face_elems * 8;
    // Contiguous device buffers of the by-hand way.
    let packed: Vec<(gpuwire_buffer, gpuwire_buffer)> =
        (0..faces.len()).map(|_| (alloc(2 * face_elems, Space::GPUWIRE_SPACE_DEVICE, device), alloc(2 * face_elems, Space::GPUWIRE_SPACE_DEVICE, device))).collect();
    let sync = |s: cu::CUstream| cuok(unsafe { cu::cuStreamSynchronize(s) }, "cuStreamSynchronize");
    let waitall = |reqs: &mut Vec<msys::MPI_Request>| {
        // SAFETY: requests started just before.
        mok(unsafe { msys::MPI_Waitall(reqs.len() as c_int, reqs.as_mut_ptr(), msys::RSMPI_STATUSES_IGNORE) }, "MPI_Waitall");
        reqs.clear();
    };
    let mcomm = m.comm;
    let s = Stream(stream as usize);
    let view = |off: usize, dims: &'static [(usize, usize)]| PackView { ptr: base + off * 8, count: face_elems, elem: 8, device, dims: Some(dims) };
    let dims_of: Vec<&'static [(usize, usize)]> = faces.iter().map(|f| &*Box::leak(Box::new(f.dims))).map(|d| &d[..]).collect();

    let mut reqs: Vec<msys::MPI_Request> = Vec::with_capacity(2 * faces.len());
    let mut gw = |iters: usize| {
        for _ in 0..iters {
            ok(gpuwire_darray_halo_exchange_axes(d, std::ptr::null(), 0, stream.cast()), "gpuwire_darray_halo_exchange_axes");
            sync(stream);
        }
    };
    let mut reqs2 = reqs.clone();
    let mut kit = |iters: usize| {
        for _ in 0..iters {
            sync(stream);
            for f in &faces {
                let mut r = unsafe { msys::RSMPI_REQUEST_NULL };
                // SAFETY: device storage (CUDA-aware MPI), one element of the subarray type.
                mok(unsafe { msys::MPI_Irecv(base as *mut c_void, 1, f.recv_t, f.source, f.tag, mcomm, &mut r) }, "MPI_Irecv");
                reqs2.push(r);
            }
            for f in &faces {
                let mut r = unsafe { msys::RSMPI_REQUEST_NULL };
                // SAFETY: as above.
                mok(unsafe { msys::MPI_Isend(base as *const c_void, 1, f.send_t, f.dest, f.tag, mcomm, &mut r) }, "MPI_Isend");
                reqs2.push(r);
            }
            waitall(&mut reqs2);
        }
    };
    let mut hand = |iters: usize| {
        let _g = CtxGuard::enter(device).unwrap_or_else(|e| fatal(&format!("context: {e}")));
        for _ in 0..iters {
            for (i, f) in faces.iter().enumerate() {
                pack(view(f.send_off, dims_of[i]), ptr_of(packed[i].0), false, s).unwrap_or_else(|e| fatal(&format!("pack: {e}")));
            }
            sync(stream);
            for (i, f) in faces.iter().enumerate() {
                let mut r = unsafe { msys::RSMPI_REQUEST_NULL };
                // SAFETY: contiguous device memory of face_elems doubles (CUDA-aware MPI).
                mok(unsafe { msys::MPI_Irecv(ptr_of(packed[i].1) as *mut c_void, face_elems as c_int, msys::RSMPI_DOUBLE, f.source, f.tag, mcomm, &mut r) }, "MPI_Irecv");
                reqs.push(r);
            }
            for (i, f) in faces.iter().enumerate() {
                let mut r = unsafe { msys::RSMPI_REQUEST_NULL };
                // SAFETY: as above.
                mok(unsafe { msys::MPI_Isend(ptr_of(packed[i].0) as *const c_void, face_elems as c_int, msys::RSMPI_DOUBLE, f.dest, f.tag, mcomm, &mut r) }, "MPI_Isend");
                reqs.push(r);
            }
            waitall(&mut reqs);
            for (i, f) in faces.iter().enumerate() {
                pack(view(f.recv_off, dims_of[i]), ptr_of(packed[i].1), true, s).unwrap_or_else(|e| fatal(&format!("unpack: {e}")));
            }
            sync(stream);
        }
    };

    // Check each way once: owned elements rank + 1, ghosts 0; afterwards the axis-0 ghosts hold
    // the other rank's value, the others this rank's.
    let names = ["gpuwire", "kit-datatypes", "by-hand"];
    let mut ways: [&mut dyn FnMut(usize); 3] = [&mut gw, &mut kit, &mut hand];
    let mut checked = [0f64; 3];
    for (w, f) in ways.iter_mut().enumerate() {
        cuok(unsafe { cu::cuMemsetD8_v2(base as cu::CUdeviceptr, 0, p * p * p * 8) }, "cuMemsetD8");
        let mine = (m.rank + 1) as f64;
        ok(gpuwire_darray_fill(d, (&mine as *const f64).cast(), stream.cast()), "gpuwire_darray_fill");
        sync(stream);
        m.barrier();
        let t0 = Instant::now();
        f(1);
        checked[w] = t0.elapsed().as_secs_f64();
        let mut good = true;
        for (i, face) in faces.iter().enumerate() {
            let mut v = 0f64;
            let at = base + (face.recv_off + (n / 2) * face.dims[0].1 + (n / 3) * face.dims[1].1) * 8;
            cuok(unsafe { cu::cuMemcpyDtoH_v2((&mut v as *mut f64).cast(), at as cu::CUdeviceptr, 8) }, "cuMemcpyDtoH");
            let want = if i < 2 { (other + 1) as f64 } else { mine };
            good &= v == want;
        }
        if !m.all(good) {
            fatal(&format!("{}: the ghost faces do not hold the neighbours' values", names[w]));
        }
        if m.rank == 0 {
            out(&format!("# halo3d: {} checked", names[w]));
        }
    }
    // Calibrate each way on its own (the derived datatypes can be 1000x slower than the others:
    // one count for all would make their blocks last minutes), then interleaved repetitions.
    // A way whose checked run alone took the target (rank 0 decides) runs one iteration per block.
    let iters: Vec<usize> = ways
        .iter_mut()
        .enumerate()
        .map(|(w, f)| if m.bcast_u64(u64::from(m.rank == 0 && checked[w] >= target_ms / 1e3)) == 1 { 1 } else { calibrate(&m, target_ms / 1e3, 1000, *f) })
        .collect();
    if m.rank == 0 {
        out(&format!("# halo3d: {iters:?} iterations per block (gpuwire, kit-datatypes, by-hand)"));
    }
    let mut t = vec![vec![0f64; reps]; 3];
    for r in 0..reps {
        for k in 0..3 {
            let w = (r + k) % 3;
            t[w][r] = block(&m, iters[w], ways[w]);
        }
    }
    for w in 0..3 {
        m.max_f64(&mut t[w]);
    }
    let label = |b: &str| match &tag {
        Some(x) => format!("{b}-{x}"),
        None => b.to_string(),
    };
    let med: Vec<f64> = t.iter().map(|v| median(v)).collect();
    if m.rank == 0 {
        for w in 0..3 {
            out(&format!("BENCH {} halo3d {bytes} {:.3} {:.3} {} 0 2", label(names[w]), med[w] * 1e6, min(&t[w]) * 1e6, reps));
        }
        let speedup = med[1] / med[0];
        let vs_hand = med[0] / med[2];
        let pass = speedup >= 10.0 && vs_hand <= 1.10;
        out(&format!(
            "HALO3D n={n} gpuwire {:.1} kit-datatypes {:.1} by-hand {:.1} speedup-vs-datatypes {speedup:.2} vs-by-hand {vs_hand:.3} target {} (>= 10x the derived datatypes, within 10 % of by hand; {iters:?} iterations (gpuwire, kit-datatypes, by-hand) x {reps} repetitions, median us per exchange)",
            med[0] * 1e6,
            med[1] * 1e6,
            med[2] * 1e6,
            if pass { "PASS" } else { "FAIL" }
        ));
    }
    for f in &mut faces {
        // SAFETY: committed above.
        unsafe {
            msys::MPI_Type_free(&mut f.send_t);
            msys::MPI_Type_free(&mut f.recv_t);
        }
    }
    for (a, b) in packed {
        ok(gpuwire_buffer_free(a), "free");
        ok(gpuwire_buffer_free(b), "free");
    }
    ok(gpuwire_buffer_free(whole), "free");
    ok(gpuwire_darray_free(d), "gpuwire_darray_free");
    ok(gpuwire_comm_free(comm), "gpuwire_comm_free");
    m.free();
    ok(gpuwire_finalize(), "gpuwire_finalize");
}
