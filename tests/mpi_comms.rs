//! Sub-communicators through the C ABI: gpuwire_comm_split (including GPUWIRE_UNDEFINED, which
//! gives the NULL handle), gpuwire_comm_dup, gpuwire_comm_create over the program's own MPI
//! communicator, collectives on each of them, and freeing them. On 1, 2 and 3 ranks.

mod common;

use common::*;
use gpuwire::Status;
use gpuwire::ffi::comm::*;
use gpuwire::ffi::ops::*;
use gpuwire::ffi::{GPUWIRE_COMM_NULL, GPUWIRE_UNDEFINED};
use gpuwire::types::{Dtype, ReduceOp};

const I64: Dtype = Dtype::GPUWIRE_INT64;

fn main() {
    if !is_child() {
        parent_main("mpi_comms", vec![Job::new("np1", 1, "all"), Job::new("np2", 2, "all"), Job::new("np3", 3, "all")]);
    }
    let (_, np) = child_args();
    let ctx = Ctx::init(np);
    split_by_parity(&ctx);
    split_with_undefined(&ctx);
    split_of_a_split(&ctx);
    bad_colors(&ctx);
    dup(&ctx);
    create_from_mpi_comm(&ctx);
    threads_on_separate_communicators(&ctx);
    ipc_without_cuda(&ctx);
    checked_with_timeout(&ctx);
    ctx.finish();
}

fn st() -> *mut std::ffi::c_void {
    no_stream()
}

fn rank_size(ctx: &Ctx, c: u64, what: &str) -> (i32, i32) {
    let (mut r, mut s) = (-1, -1);
    ctx.ok(gpuwire_comm_rank(c, &mut r), &format!("{what}: gpuwire_comm_rank"));
    ctx.ok(gpuwire_comm_size(c, &mut s), &format!("{what}: gpuwire_comm_size"));
    (r, s)
}

fn int64(v: i128) -> Buf {
    Buf::from_bytes(I64, &encode(I64, V::I(v)))
}

fn get(b: &Buf) -> V {
    decode(I64, &b.read())
}

/// Allreduce SUM and MAX of the world rank, bcast from sub-rank 0 and allgather of the world
/// ranks on `c`, whose members are `members` (world ranks in sub-rank order).
fn collectives_on(ctx: &Ctx, c: u64, members: &[usize], what: &str) {
    let me = ctx.rank as i128;
    let sum: i128 = members.iter().map(|m| *m as i128).sum();
    let b = int64(me);
    ctx.ok(gpuwire_allreduce(c, b.h, b.h, ReduceOp::GPUWIRE_SUM as i32, st()), &format!("{what}: allreduce SUM"));
    ctx.check_eq(get(&b), V::I(sum), &format!("{what}: allreduce SUM of the world ranks"));
    let b = int64(me);
    ctx.ok(gpuwire_allreduce(c, b.h, b.h, ReduceOp::GPUWIRE_MAX as i32, st()), &format!("{what}: allreduce MAX"));
    ctx.check_eq(get(&b), V::I(*members.iter().max().unwrap() as i128), &format!("{what}: allreduce MAX of the world ranks"));
    let b = int64(me * 100 + 7);
    ctx.ok(gpuwire_bcast(c, b.h, 0, st()), &format!("{what}: bcast from 0"));
    ctx.check_eq(get(&b), V::I(members[0] as i128 * 100 + 7), &format!("{what}: bcast from sub-rank 0"));
    let send = int64(me);
    let recv = Buf::new(I64, members.len());
    ctx.ok(gpuwire_allgather(c, send.h, recv.h, st()), &format!("{what}: allgather"));
    let want: Vec<V> = members.iter().map(|m| V::I(*m as i128)).collect();
    ctx.check_eq(decode_all(I64, &recv.read()), want, &format!("{what}: allgather of the world ranks in sub-rank order"));
    ctx.ok(gpuwire_barrier(c, st()), &format!("{what}: barrier"));
}

fn split_by_parity(ctx: &Ctx) {
    ctx.section("split by parity, reversed keys");
    let (r, p) = (ctx.rank, ctx.size);
    let color = (r % 2) as i32;
    let key = (p - r) as i32; // descending world rank
    let mut sub = 0u64;
    ctx.ok(gpuwire_comm_split(ctx.world, color, key, &mut sub), "split");
    // Members: same parity, ordered by key (= descending world rank).
    let mut members: Vec<usize> = (0..p).filter(|m| m % 2 == r % 2).collect();
    members.reverse();
    let (sr, ss) = rank_size(ctx, sub, "parity split");
    ctx.check_eq(ss as usize, members.len(), "size of the parity communicator");
    ctx.check_eq(sr as usize, members.iter().position(|m| *m == r).unwrap(), "rank in the parity communicator");
    collectives_on(ctx, sub, &members, "parity split");
    // The world communicator is unaffected.
    collectives_on(ctx, ctx.world, &(0..p).collect::<Vec<_>>(), "world after split");
    ctx.ok(gpuwire_comm_free(sub), "free the parity communicator");
    ctx.error(gpuwire_comm_free(sub), Status::GPUWIRE_ERROR_INVALID_HANDLE, &["freed"], "free it twice");
}

fn split_with_undefined(ctx: &Ctx) {
    ctx.section("split with GPUWIRE_UNDEFINED");
    let (r, p) = (ctx.rank, ctx.size);
    // Rank 0 takes no part; the others form one communicator.
    let color = if r == 0 { GPUWIRE_UNDEFINED } else { 3 };
    let mut sub = 12345u64;
    ctx.ok(gpuwire_comm_split(ctx.world, color, 0, &mut sub), "split");
    if r == 0 {
        ctx.check_eq(sub, GPUWIRE_COMM_NULL, "GPUWIRE_UNDEFINED gives the NULL handle");
        let mut s = -1;
        ctx.error(gpuwire_comm_size(sub, &mut s), Status::GPUWIRE_ERROR_INVALID_HANDLE, &["NULL"], "size of the NULL communicator");
        let b = int64(1);
        ctx.error(
            gpuwire_allreduce(sub, b.h, b.h, ReduceOp::GPUWIRE_SUM as i32, st()),
            Status::GPUWIRE_ERROR_INVALID_HANDLE,
            &["NULL"],
            "allreduce on the NULL communicator",
        );
    } else {
        let members: Vec<usize> = (1..p).collect();
        let (sr, ss) = rank_size(ctx, sub, "split without rank 0");
        ctx.check_eq((sr as usize, ss as usize), (r - 1, p - 1), "rank and size without rank 0");
        collectives_on(ctx, sub, &members, "split without rank 0");
        ctx.ok(gpuwire_comm_free(sub), "free");
    }
    // Every rank undefined: everyone gets the NULL handle.
    let mut none = 1u64;
    ctx.ok(gpuwire_comm_split(ctx.world, GPUWIRE_UNDEFINED, 0, &mut none), "split with every rank undefined");
    ctx.check_eq(none, GPUWIRE_COMM_NULL, "every rank undefined: NULL handle");
}

fn split_of_a_split(ctx: &Ctx) {
    ctx.section("split of a split");
    let (r, p) = (ctx.rank, ctx.size);
    // Level 1: everyone, keys reversed. Level 2: split that by (sub-rank < 2).
    let mut a = 0u64;
    ctx.ok(gpuwire_comm_split(ctx.world, 0, -(r as i32), &mut a), "split level 1");
    let (ar, _) = rank_size(ctx, a, "level 1");
    ctx.check_eq(ar as usize, p - 1 - r, "level 1 rank (reversed)");
    let mut b = 0u64;
    let color = i32::from(ar >= 2);
    ctx.ok(gpuwire_comm_split(a, color, ar, &mut b), "split level 2");
    // Members of b in level-1 order, as world ranks.
    let level1: Vec<usize> = (0..p).rev().collect();
    let members: Vec<usize> = level1.iter().enumerate().filter(|(i, _)| i32::from(*i >= 2) == color).map(|(_, w)| *w).collect();
    let (_, bs) = rank_size(ctx, b, "level 2");
    ctx.check_eq(bs as usize, members.len(), "level 2 size");
    collectives_on(ctx, b, &members, "split of a split");
    // Freeing the parent first leaves the child usable.
    ctx.ok(gpuwire_comm_free(a), "free level 1 before level 2");
    collectives_on(ctx, b, &members, "split of a split after its parent was freed");
    ctx.ok(gpuwire_comm_free(b), "free level 2");
}

fn bad_colors(ctx: &Ctx) {
    ctx.section("split with an invalid color");
    let mut out = 77u64;
    // Every rank passes the bad color: the error is local and no rank calls MPI_Comm_split.
    ctx.error(gpuwire_comm_split(ctx.world, -5, 0, &mut out), Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["color -5"], "color -5");
    ctx.check_eq(out, 77, "the out-parameter is not written on failure");
    ctx.error(
        gpuwire_comm_split(ctx.world, 0, 0, std::ptr::null_mut()),
        Status::GPUWIRE_ERROR_NULL_ARGUMENT,
        &["out"],
        "split with a NULL out-parameter",
    );
    ctx.error(gpuwire_comm_dup(0xC0FF_EE00, &mut out), Status::GPUWIRE_ERROR_INVALID_HANDLE, &["handle"], "dup of a garbage handle");
}

fn dup(ctx: &Ctx) {
    ctx.section("dup");
    let (r, p) = (ctx.rank, ctx.size);
    let mut d = 0u64;
    ctx.ok(gpuwire_comm_dup(ctx.world, &mut d), "dup");
    ctx.check(d != ctx.world && d != 0, || format!("dup returned handle {d:#x}"));
    let (dr, ds) = rank_size(ctx, d, "dup");
    ctx.check_eq((dr as usize, ds as usize), (r, p), "dup keeps rank and size");
    collectives_on(ctx, d, &(0..p).collect::<Vec<_>>(), "dup");

    // Separate message spaces: the same (source, tag) on the two communicators never match.
    // Every rank receives from the previous rank on both, posting the dup's receive first; the
    // sender sends on world first.
    let (prev, next) = ((r + p - 1) % p, (r + 1) % p);
    let (on_world, on_dup) = (int64(-1), int64(-1));
    let (mut q1, mut q2, mut q3, mut q4) = (0, 0, 0, 0);
    ctx.ok(gpuwire_irecv(d, on_dup.h, prev as i32, 7, st(), &mut q1), "irecv on dup");
    ctx.ok(gpuwire_irecv(ctx.world, on_world.h, prev as i32, 7, st(), &mut q2), "irecv on world");
    let (sw, sd) = (int64(1000 + r as i128), int64(2000 + r as i128));
    ctx.ok(gpuwire_isend(ctx.world, sw.h, next as i32, 7, st(), &mut q3), "isend on world");
    ctx.ok(gpuwire_isend(d, sd.h, next as i32, 7, st(), &mut q4), "isend on dup");
    let mut qs = [q1, q2, q3, q4];
    ctx.ok(gpuwire_waitall(4, qs.as_mut_ptr()), "waitall");
    ctx.check_eq(get(&on_world), V::I(1000 + prev as i128), "message on world came from world");
    ctx.check_eq(get(&on_dup), V::I(2000 + prev as i128), "message on dup came from dup");

    // Its Fortran MPI handle is gpuwire's own duplicate, not the world's.
    let (mut fw, mut fd) = (0, 0);
    ctx.ok(gpuwire_comm_mpi(ctx.world, &mut fw), "gpuwire_comm_mpi(world)");
    ctx.ok(gpuwire_comm_mpi(d, &mut fd), "gpuwire_comm_mpi(dup)");
    // SAFETY: converts a predefined handle.
    let world_f = unsafe { mpi::ffi::RSMPI_Comm_c2f(mpi::ffi::RSMPI_COMM_WORLD) };
    ctx.check(fw != fd && fw != world_f && fd != world_f, || format!("MPI handles: world {world_f}, gpuwire world {fw}, gpuwire dup {fd}"));

    // A request keeps its communicator alive after the handle is freed (MPI_Comm_free semantics).
    let mut d2 = 0u64;
    ctx.ok(gpuwire_comm_dup(ctx.world, &mut d2), "second dup");
    let got = int64(-1);
    let mine = int64(3000 + r as i128);
    let (mut rq, mut sq) = (0, 0);
    ctx.ok(gpuwire_irecv(d2, got.h, prev as i32, 1, st(), &mut rq), "irecv on the second dup");
    ctx.ok(gpuwire_isend(d2, mine.h, next as i32, 1, st(), &mut sq), "isend on the second dup");
    ctx.ok(gpuwire_comm_free(d2), "free the second dup with requests pending");
    ctx.ok(gpuwire_wait(&mut rq), "wait for the irecv of a freed communicator");
    ctx.ok(gpuwire_wait(&mut sq), "wait for the isend of a freed communicator");
    ctx.check_eq(get(&got), V::I(3000 + prev as i128), "message on a communicator freed while in flight");
    let b = int64(1);
    ctx.error(
        gpuwire_allreduce(d2, b.h, b.h, ReduceOp::GPUWIRE_SUM as i32, st()),
        Status::GPUWIRE_ERROR_INVALID_HANDLE,
        &["freed"],
        "allreduce on a freed communicator",
    );

    ctx.ok(gpuwire_comm_free(d), "free the dup");
    let mut s = 0;
    ctx.error(gpuwire_comm_size(d, &mut s), Status::GPUWIRE_ERROR_INVALID_HANDLE, &["freed"], "size of a freed dup");
    collectives_on(ctx, ctx.world, &(0..p).collect::<Vec<_>>(), "world after freeing the dups");
}

fn create_from_mpi_comm(ctx: &Ctx) {
    ctx.section("create from an MPI communicator");
    let (r, p) = (ctx.rank, ctx.size);
    // SAFETY: converts predefined handles.
    let (world_f, null_f) = unsafe { (mpi::ffi::RSMPI_Comm_c2f(mpi::ffi::RSMPI_COMM_WORLD), mpi::ffi::RSMPI_Comm_c2f(mpi::ffi::RSMPI_COMM_NULL)) };
    let mut c = 0u64;
    ctx.ok(gpuwire_comm_create(world_f, std::ptr::null(), &mut c), "create over MPI_COMM_WORLD's Fortran handle");
    let (cr, cs) = rank_size(ctx, c, "created");
    ctx.check_eq((cr as usize, cs as usize), (r, p), "rank and size over MPI_COMM_WORLD");
    collectives_on(ctx, c, &(0..p).collect::<Vec<_>>(), "created over MPI_COMM_WORLD");
    ctx.ok(gpuwire_comm_free(c), "free");
    let mut bad = 5u64;
    ctx.error(gpuwire_comm_create(null_f, std::ptr::null(), &mut bad), Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["MPI_COMM_NULL"], "create over MPI_COMM_NULL");
    ctx.check_eq(bad, 5, "the out-parameter is not written on failure");
}

/// MPI_THREAD_MULTIPLE: two threads of every rank run collectives at the same time, each on its
/// own communicator (a dup of world), and every result is right.
fn threads_on_separate_communicators(ctx: &Ctx) {
    ctx.section("two threads, two communicators");
    let (r, p) = (ctx.rank, ctx.size);
    let mut comms = [0u64; 2];
    for c in comms.iter_mut() {
        ctx.ok(gpuwire_comm_dup(ctx.world, c), "dup");
    }
    const ROUNDS: i128 = 200;
    let results: Vec<Vec<String>> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .iter()
            .enumerate()
            .map(|(t, &c)| {
                s.spawn(move || {
                    let mut errors = Vec::new();
                    for k in 0..ROUNDS {
                        let mine = (t as i128 + 1) * 1000 + k + r as i128;
                        let b = Buf::from_bytes(I64, &encode(I64, V::I(mine)));
                        let st = gpuwire_allreduce(c, b.h, b.h, ReduceOp::GPUWIRE_SUM as i32, no_stream());
                        let want: i128 = (0..p as i128).map(|q| (t as i128 + 1) * 1000 + k + q).sum();
                        let got = decode(I64, &b.read());
                        if st != Status::GPUWIRE_SUCCESS || got != V::I(want) {
                            errors.push(format!("thread {t} round {k}: status {st:?}, expected {want}, got {got:?} ({})", last_error()));
                        }
                    }
                    errors
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| vec!["thread panicked".into()])).collect()
    });
    for errors in results {
        ctx.check(errors.is_empty(), || errors.join("; "));
    }
    for c in comms {
        ctx.ok(gpuwire_comm_free(c), "free");
    }
}

/// The IPC backend requested where there is no CUDA (CI): BACKEND_UNAVAILABLE on every rank, the
/// same message naming IPC and why, by the config field and by GPUWIRE_BACKEND=ipc; AUTO still
/// works (HOST).
fn ipc_without_cuda(ctx: &Ctx) {
    ctx.section("IPC requested without CUDA");
    if gpuwire::device::cuda_with_devices().is_ok() {
        println!("(skipped: this machine has CUDA; the GPU tests cover IPC)");
        return;
    }
    let mut cfg: gpuwire_config = unsafe { std::mem::zeroed() };
    ctx.ok(gpuwire_config_init(&mut cfg), "config_init");
    cfg.backend = gpuwire::types::BackendKind::GPUWIRE_BACKEND_IPC as i32;
    let mut c = 77u64;
    ctx.error(gpuwire_comm_world(&cfg, &mut c), Status::GPUWIRE_ERROR_BACKEND_UNAVAILABLE, &["IPC was requested", "CUDA"], "IPC requested by the config");
    ctx.check_eq(c, 77, "the out-parameter is not written on failure");
    // The same message on every rank: compare with rank 0's.
    let mut msg = last_error().into_bytes();
    msg.resize(1024, 0);
    let b = Buf::from_bytes(gpuwire::types::Dtype::GPUWIRE_UINT8, &msg);
    ctx.ok(gpuwire_bcast(ctx.world, b.h, 0, st()), "bcast of rank 0's message");
    ctx.check_eq(String::from_utf8_lossy(&b.read()).into_owned(), String::from_utf8_lossy(&msg).into_owned(), "every rank got rank 0's message");
    // GPUWIRE_BACKEND=ipc (read at communicator creation without a config).
    // SAFETY: no other thread of this test reads the environment now.
    unsafe { std::env::set_var("GPUWIRE_BACKEND", "ipc") };
    ctx.error(gpuwire_comm_world(std::ptr::null(), &mut c), Status::GPUWIRE_ERROR_BACKEND_UNAVAILABLE, &["IPC was requested"], "GPUWIRE_BACKEND=ipc");
    // SAFETY: as above.
    unsafe { std::env::remove_var("GPUWIRE_BACKEND") };
    // AUTO: HOST, and the world communicator is unaffected.
    ctx.ok(gpuwire_comm_world(std::ptr::null(), &mut c), "AUTO after the refusals");
    let mut backend = -1;
    ctx.ok(gpuwire_comm_backend(c, &mut backend), "comm_backend");
    ctx.check_eq(backend, gpuwire::types::BackendKind::GPUWIRE_BACKEND_HOST as i32, "AUTO without CUDA is HOST");
    ctx.ok(gpuwire_comm_free(c), "free");
}

/// A communicator with checking mode and a timeout: every agreement exchange then runs as a
/// nonblocking allreduce waited for up to the deadline (on a buffer of its own, which MPI may
/// keep at a timeout); with every rank calling, the collectives give the right results, and a
/// mismatch is still reported on every rank without breaking the communicator.
fn checked_with_timeout(ctx: &Ctx) {
    ctx.section("checking mode with a timeout");
    let p = ctx.size;
    let mut cfg: gpuwire_config = unsafe { std::mem::zeroed() };
    ctx.ok(gpuwire_config_init(&mut cfg), "config_init");
    cfg.check = 1;
    cfg.timeout_seconds = 30.0;
    let mut c = 0u64;
    ctx.ok(gpuwire_comm_world(&cfg, &mut c), "comm_world with check = 1, timeout 30 s");
    collectives_on(ctx, c, &(0..p).collect::<Vec<_>>(), "checked, timeout 30 s");
    // Counts that differ on rank 0 (when there are other ranks): COUNT_MISMATCH everywhere.
    let n = if ctx.rank == 0 && p > 1 { 2 } else { 1 };
    let b = Buf::new(I64, n);
    let st_ = gpuwire_allreduce(c, b.h, b.h, ReduceOp::GPUWIRE_SUM as i32, st());
    if p > 1 {
        ctx.error(st_, Status::GPUWIRE_ERROR_COUNT_MISMATCH, &["count"], "allreduce with different counts, checked, timeout 30 s");
    } else {
        ctx.ok(st_, "allreduce on one rank, checked, timeout 30 s");
    }
    collectives_on(ctx, c, &(0..p).collect::<Vec<_>>(), "checked, timeout 30 s, after the mismatch");
    ctx.ok(gpuwire_comm_free(c), "free");
}
