//! Every operation x every datatype x every reduction, through the C ABI, on 1, 2 and 3 ranks
//! (and once more on 3 ranks with checking mode on, which must not change any valid call).
//!
//! Data that is only moved (send/recv, bcast, gathers, alltoall) is pseudo-random bytes, so every
//! bit pattern must arrive unchanged. Data that is reduced is chosen per datatype so that each
//! result is exact; the expected result is computed here (`common::reference`, in i128/f64),
//! never by gpuwire.

mod common;

use std::time::{Duration, Instant};

use common::*;
use gpuwire::Status;
use gpuwire::ffi::comm::*;
use gpuwire::ffi::ops::*;
use gpuwire::ffi::{GPUWIRE_PROC_NULL, GPUWIRE_REQUEST_NULL};
use gpuwire::types::{Dtype, ReduceOp};

/// Elements per rank (and per block of the block-wise collectives).
const N: usize = 5;

fn main() {
    if !is_child() {
        parent_main(
            "mpi_ops",
            vec![
                Job::new("np1", 1, "plain"),
                Job::new("np2", 2, "plain"),
                Job::new("np3", 3, "plain"),
                Job::new("np3_checking", 3, "checking").with_env("GPUWIRE_CHECK", "1"),
                Job::new("np4_vcoll", 4, "vcoll"),
                // With a timeout the MPI collectives run in their nonblocking form (libnbc on
                // Open MPI, which reads a send buffer equal to the receive buffer as in place).
                Job::new("np4_vcoll_timeout", 4, "vcoll").with_env("GPUWIRE_TIMEOUT", "60"),
                Job::new("np2_vcoll_checking", 2, "vcoll_checking").with_env("GPUWIRE_CHECK", "1"),
            ],
        );
    }
    let (mode, np) = child_args();
    let ctx = Ctx::init(np);
    if mode.starts_with("vcoll") {
        // The v-collectives alone (4 ranks; 2 with checking mode).
        vcollectives(&ctx, mode == "vcoll_checking");
        ctx.finish();
    }
    checking_mode_is(&ctx, mode == "checking");
    describe_lists_the_routing(&ctx);
    point_to_point(&ctx);
    nonblocking(&ctx);
    sendrecv(&ctx);
    barrier(&ctx);
    bcast(&ctx);
    reduce(&ctx);
    allreduce(&ctx);
    allgather(&ctx);
    allgatherv(&ctx);
    reduce_scatter(&ctx);
    alltoall(&ctx);
    gather(&ctx);
    scatter(&ctx);
    vcollectives(&ctx, mode == "checking");
    unsupported_ops(&ctx);
    unsigned_extremes(&ctx);
    ctx.finish();
}

fn st() -> *mut std::ffi::c_void {
    no_stream()
}

fn checking_mode_is(ctx: &Ctx, on: bool) {
    ctx.section("configuration");
    let mut buf = vec![0 as std::ffi::c_char; 1024];
    ctx.ok(gpuwire_comm_describe(ctx.world, buf.as_mut_ptr(), buf.len()), "gpuwire_comm_describe");
    // SAFETY: NUL-terminated by gpuwire_comm_describe.
    let text = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned();
    let want = if on { "check=on" } else { "check=off" };
    ctx.check(text.contains(want), || format!("describe should say {want}: {text:?}"));
}

/// gpuwire_comm_describe ends with the routing table of the communicator's backend (on a
/// machine without CUDA, AUTO's HOST: every call by plain MPI).
fn describe_lists_the_routing(ctx: &Ctx) {
    ctx.section("describe: routing table");
    let mut buf = vec![0 as std::ffi::c_char; 4096];
    ctx.ok(gpuwire_comm_describe(ctx.world, buf.as_mut_ptr(), buf.len()), "gpuwire_comm_describe");
    // SAFETY: NUL-terminated by gpuwire_comm_describe.
    let text = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned();
    let mut backend = 0;
    ctx.ok(gpuwire_comm_backend(ctx.world, &mut backend), "gpuwire_comm_backend");
    let table = text.split_once("; routing: ").map(|(_, t)| t).unwrap_or("");
    ctx.check(!table.is_empty() && !table.contains("; routing: "), || format!("describe should end with one routing table: {text:?}"));
    let name = gpuwire::types::BackendKind::from_c(backend).map(|k| k.name()).unwrap_or("?");
    let want = if name == "HOST" { "every call by HOST (plain MPI; device buffers are refused)".to_string() } else { format!("{name} does send, recv, isend, irecv, sendrecv, bcast, reduce, allreduce") };
    ctx.check(table.starts_with(&want), || format!("the routing table should start with {want:?}: {table:?}"));
}

/// Bytes of rank `from`'s data for `to` (or for everyone) in test `what`.
fn data(what: usize, d: Dtype, from: usize, to: usize, count: usize) -> Vec<u8> {
    pattern(seed(&[what, d as usize, from, to]), count * d.size())
}

fn point_to_point(ctx: &Ctx) {
    ctx.section("send/recv");
    let (r, p) = (ctx.rank, ctx.size);
    let next = ((r + 1) % p) as i32;
    let prev = ((r + p - 1) % p) as i32;
    for d in Dtype::ALL {
        let tag = 100 + d as i32;
        let send = Buf::from_bytes(d, &data(1, d, r, 0, N));
        let recv = Buf::from_bytes(d, &sentinel(N * d.size()));
        if p == 1 {
            // A blocking send to oneself may wait for its receive: post the receive first.
            let mut req = GPUWIRE_REQUEST_NULL;
            ctx.ok(gpuwire_irecv(ctx.world, recv.h, prev, tag, st(), &mut req), "irecv from self");
            ctx.ok(gpuwire_send(ctx.world, send.h, next, tag, st()), "send to self");
            ctx.ok(gpuwire_wait(&mut req), "wait");
        } else if r % 2 == 0 {
            ctx.ok(gpuwire_send(ctx.world, send.h, next, tag, st()), "send");
            ctx.ok(gpuwire_recv(ctx.world, recv.h, prev, tag, st()), "recv");
        } else {
            ctx.ok(gpuwire_recv(ctx.world, recv.h, prev, tag, st()), "recv");
            ctx.ok(gpuwire_send(ctx.world, send.h, next, tag, st()), "send");
        }
        check_bytes(ctx, d, &recv.read(), &data(1, d, prev as usize, 0, N), "received from the previous rank");
        check_bytes(ctx, d, &send.read(), &data(1, d, r, 0, N), "send buffer after send");

        // GPUWIRE_PROC_NULL: nothing happens, the buffer stays as it was.
        ctx.ok(gpuwire_send(ctx.world, send.h, GPUWIRE_PROC_NULL, tag, st()), "send to PROC_NULL");
        let untouched = Buf::from_bytes(d, &sentinel(N * d.size()));
        ctx.ok(gpuwire_recv(ctx.world, untouched.h, GPUWIRE_PROC_NULL, tag, st()), "recv from PROC_NULL");
        check_bytes(ctx, d, &untouched.read(), &sentinel(N * d.size()), "buffer of a recv from PROC_NULL");
    }
    // Local argument errors: nothing is sent, so no rank waits for anything.
    let b = Buf::new(Dtype::GPUWIRE_INT32, 1);
    ctx.error(gpuwire_send(ctx.world, b.h, p as i32, 0, st()), Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["destination", "rank"], "send to rank = size");
    ctx.error(gpuwire_recv(ctx.world, b.h, -7, 0, st()), Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["source", "-7"], "recv from rank -7");
    ctx.error(gpuwire_send(ctx.world, b.h, next, -1, st()), Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["tag -1"], "send with tag -1");
}

fn nonblocking(ctx: &Ctx) {
    ctx.section("isend/irecv");
    let (r, p) = (ctx.rank, ctx.size);
    for d in Dtype::ALL {
        // Every rank sends a message to every rank (itself too), completed three ways.
        for (k, how) in ["waitall", "wait", "test"].into_iter().enumerate() {
            let what = 2000 + k;
            let recvs: Vec<Buf> = (0..p).map(|_| Buf::from_bytes(d, &sentinel(N * d.size()))).collect();
            let sends: Vec<Buf> = (0..p).map(|t| Buf::from_bytes(d, &data(what, d, r, t, N))).collect();
            let mut reqs = vec![GPUWIRE_REQUEST_NULL; 2 * p];
            for s in 0..p {
                ctx.ok(gpuwire_irecv(ctx.world, recvs[s].h, s as i32, 10 + s as i32, st(), &mut reqs[s]), "irecv");
            }
            for t in 0..p {
                ctx.ok(gpuwire_isend(ctx.world, sends[t].h, t as i32, 10 + r as i32, st(), &mut reqs[p + t]), "isend");
            }
            let stale = reqs[0];
            match how {
                "waitall" => {
                    ctx.ok(gpuwire_waitall(reqs.len() as i32, reqs.as_mut_ptr()), "waitall");
                }
                "wait" => {
                    for q in reqs.iter_mut() {
                        ctx.ok(gpuwire_wait(q), "wait");
                    }
                }
                _ => {
                    let deadline = Instant::now() + Duration::from_secs(30);
                    let mut done = vec![false; reqs.len()];
                    while done.iter().any(|x| !x) && Instant::now() < deadline {
                        for (q, dn) in reqs.iter_mut().zip(done.iter_mut()) {
                            if !*dn {
                                let mut flag = -1;
                                ctx.ok(gpuwire_test(q, &mut flag), "test");
                                ctx.check(flag == 0 || flag == 1, || format!("test flag is {flag}"));
                                *dn = flag == 1;
                            }
                        }
                    }
                    ctx.check(done.iter().all(|x| *x), || "requests not complete after 30 s of gpuwire_test".into());
                }
            }
            ctx.check(reqs.iter().all(|q| *q == GPUWIRE_REQUEST_NULL), || format!("{how}: completed requests must be set to NULL: {reqs:x?}"));
            for (s, rb) in recvs.iter().enumerate() {
                check_bytes(ctx, d, &rb.read(), &data(what, d, s, r, N), &format!("{how}: message from rank {s}"));
            }
            // The completed request's handle is gone: a stale copy is refused.
            let mut copy = stale;
            ctx.error(gpuwire_wait(&mut copy), Status::GPUWIRE_ERROR_INVALID_HANDLE, &["freed"], "wait on a completed request's stale handle");
        }
    }
    // NULL requests.
    let mut null = GPUWIRE_REQUEST_NULL;
    ctx.ok(gpuwire_wait(&mut null), "wait on GPUWIRE_REQUEST_NULL");
    let mut flag = 0;
    ctx.ok(gpuwire_test(&mut null, &mut flag), "test on GPUWIRE_REQUEST_NULL");
    ctx.check_eq(flag, 1, "test on GPUWIRE_REQUEST_NULL reports completion");
    ctx.ok(gpuwire_waitall(0, std::ptr::null_mut()), "waitall of 0 requests, NULL array");
    ctx.error(gpuwire_waitall(-1, &mut null), Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["negative"], "waitall with count -1");

    // PROC_NULL requests complete at once; NULL entries of waitall are skipped.
    let d = Dtype::GPUWIRE_FLOAT64;
    let b = Buf::from_bytes(d, &sentinel(8));
    let mut reqs = [GPUWIRE_REQUEST_NULL; 3];
    ctx.ok(gpuwire_isend(ctx.world, b.h, GPUWIRE_PROC_NULL, 0, st(), &mut reqs[0]), "isend to PROC_NULL");
    ctx.ok(gpuwire_irecv(ctx.world, b.h, GPUWIRE_PROC_NULL, 0, st(), &mut reqs[2]), "irecv from PROC_NULL");
    ctx.check(reqs[0] != 0 && reqs[2] != 0, || "isend/irecv must write a request handle".into());
    ctx.ok(gpuwire_waitall(3, reqs.as_mut_ptr()), "waitall with a NULL entry");
    check_bytes(ctx, d, &b.read(), &sentinel(8), "buffer of an irecv from PROC_NULL");

    // A request keeps its buffer alive: receive into a view whose handle is freed before the wait.
    let (r, p) = (ctx.rank, ctx.size);
    let d = Dtype::GPUWIRE_INT32;
    let whole = Buf::from_bytes(d, &sentinel(2 * N * d.size()));
    let part = whole.view(N, N);
    let src = Buf::from_bytes(d, &data(9, d, r, 0, N));
    let prev = ((r + p - 1) % p) as i32;
    let next = ((r + 1) % p) as i32;
    let (mut rq, mut sq) = (0, 0);
    ctx.ok(gpuwire_irecv(ctx.world, part.h, prev, 5, st(), &mut rq), "irecv into a view");
    ctx.ok(part.free(), "free the view's handle while its irecv is pending");
    ctx.ok(gpuwire_isend(ctx.world, src.h, next, 5, st(), &mut sq), "isend");
    ctx.ok(gpuwire_wait(&mut rq), "wait for the irecv of a freed view");
    ctx.ok(gpuwire_wait(&mut sq), "wait for the isend");
    let mut expect = sentinel(N * d.size());
    expect.extend(data(9, d, prev as usize, 0, N));
    check_bytes(ctx, d, &whole.read(), &expect, "parent of a freed view after its irecv completed");
}

fn sendrecv(ctx: &Ctx) {
    ctx.section("sendrecv");
    let (r, p) = (ctx.rank, ctx.size);
    for d in Dtype::ALL {
        // Periodic ring: every rank sends to the next and receives from the previous.
        let send = Buf::from_bytes(d, &data(20, d, r, 0, N));
        let recv = Buf::from_bytes(d, &sentinel(N * d.size()));
        let (next, prev) = ((r + 1) % p, (r + p - 1) % p);
        ctx.ok(gpuwire_sendrecv(ctx.world, send.h, next as i32, 3, recv.h, prev as i32, 3, st()), "periodic sendrecv");
        check_bytes(ctx, d, &recv.read(), &data(20, d, prev, 0, N), "periodic ring: from the previous rank");
        check_bytes(ctx, d, &send.read(), &data(20, d, r, 0, N), "periodic ring: send buffer unchanged");

        // Non-periodic (a halo exchange's edge): the last rank sends to PROC_NULL, the first
        // receives from PROC_NULL and keeps its buffer.
        let recv = Buf::from_bytes(d, &sentinel(N * d.size()));
        let dest = if r + 1 < p { (r + 1) as i32 } else { GPUWIRE_PROC_NULL };
        let source = if r > 0 { (r - 1) as i32 } else { GPUWIRE_PROC_NULL };
        ctx.ok(gpuwire_sendrecv(ctx.world, send.h, dest, 4, recv.h, source, 4, st()), "non-periodic sendrecv");
        let expect = if r > 0 { data(20, d, r - 1, 0, N) } else { sentinel(N * d.size()) };
        check_bytes(ctx, d, &recv.read(), &expect, "non-periodic: from the previous rank (rank 0: untouched)");
    }
    let b = Buf::new(Dtype::GPUWIRE_UINT8, 4);
    let v = b.view(1, 2);
    ctx.error(gpuwire_sendrecv(ctx.world, b.h, 0, 0, v.h, 0, 0, st()), Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["overlap"], "sendrecv with overlapping buffers");
}

fn barrier(ctx: &Ctx) {
    ctx.section("barrier");
    for _ in 0..3 {
        ctx.ok(gpuwire_barrier(ctx.world, st()), "barrier");
    }
}

fn bcast(ctx: &Ctx) {
    ctx.section("bcast");
    let (r, p) = (ctx.rank, ctx.size);
    for d in Dtype::ALL {
        for root in 0..p {
            for n in [N, 1000] {
                let mine = if r == root { data(30, d, root, n, n) } else { sentinel(n * d.size()) };
                let b = Buf::from_bytes(d, &mine);
                ctx.ok(gpuwire_bcast(ctx.world, b.h, root as i32, st()), &format!("bcast of {n} {} from root {root}", d.name()));
                check_bytes(ctx, d, &b.read(), &data(30, d, root, n, n), &format!("bcast of {n} from root {root}"));
            }
        }
    }
}

fn supported_pairs() -> Vec<(Dtype, ReduceOp)> {
    Dtype::ALL.iter().flat_map(|d| ReduceOp::ALL.iter().map(move |o| (*d, *o))).filter(|(d, o)| supported(*d, *o)).collect()
}

fn expected(d: Dtype, op: ReduceOp, range: std::ops::Range<usize>, p: usize, salt: usize) -> Vec<u8> {
    range.flat_map(|i| encode(d, expected_elem(d, op, i, p, salt))).collect()
}

fn reduce(ctx: &Ctx) {
    ctx.section("reduce");
    let (r, p) = (ctx.rank, ctx.size);
    for (d, op) in supported_pairs() {
        let salt = 40;
        let mine = encode_all(d, &inputs(d, op, r, N, p, salt));
        let want = expected(d, op, 0..N, p, salt);
        for root in 0..p {
            let what = |v: &str| format!("reduce {} {} root {root} ({v})", d.name(), op.name());
            // Non-roots pass GPUWIRE_BUFFER_NULL as the receive buffer.
            let send = Buf::from_bytes(d, &mine);
            let recv = Buf::from_bytes(d, &sentinel(N * d.size()));
            let rh = if r == root { recv.h } else { 0 };
            ctx.ok(gpuwire_reduce(ctx.world, send.h, rh, op as i32, root as i32, st()), &what("NULL recv on non-roots"));
            if r == root {
                check_bytes(ctx, d, &recv.read(), &want, &what("NULL recv on non-roots"));
            }
            check_bytes(ctx, d, &send.read(), &mine, &what("send buffer unchanged"));

            // Every rank passes a receive buffer (only the root's is significant).
            let recv = Buf::from_bytes(d, &sentinel(N * d.size()));
            ctx.ok(gpuwire_reduce(ctx.world, send.h, recv.h, op as i32, root as i32, st()), &what("recv on every rank"));
            if r == root {
                check_bytes(ctx, d, &recv.read(), &want, &what("recv on every rank"));
            }

            // In place at the root: sendbuf == recvbuf there.
            let inout = Buf::from_bytes(d, &mine);
            let rh = if r == root { inout.h } else { 0 };
            ctx.ok(gpuwire_reduce(ctx.world, inout.h, rh, op as i32, root as i32, st()), &what("in place at the root"));
            if r == root {
                check_bytes(ctx, d, &inout.read(), &want, &what("in place at the root"));
            }
        }
    }
}

fn allreduce(ctx: &Ctx) {
    ctx.section("allreduce");
    let (r, p) = (ctx.rank, ctx.size);
    for (d, op) in supported_pairs() {
        let salt = 50;
        let mine = encode_all(d, &inputs(d, op, r, N, p, salt));
        let want = expected(d, op, 0..N, p, salt);
        let what = |v: &str| format!("allreduce {} {} ({v})", d.name(), op.name());

        let send = Buf::from_bytes(d, &mine);
        let recv = Buf::from_bytes(d, &sentinel(N * d.size()));
        ctx.ok(gpuwire_allreduce(ctx.world, send.h, recv.h, op as i32, st()), &what("separate buffers"));
        check_bytes(ctx, d, &recv.read(), &want, &what("separate buffers"));
        check_bytes(ctx, d, &send.read(), &mine, &what("send buffer unchanged"));

        let inout = Buf::from_bytes(d, &mine);
        ctx.ok(gpuwire_allreduce(ctx.world, inout.h, inout.h, op as i32, st()), &what("in place, same handle"));
        check_bytes(ctx, d, &inout.read(), &want, &what("in place, same handle"));

        // The same memory through a second handle is in place too.
        let inout = Buf::from_bytes(d, &mine);
        let alias = inout.view(0, N);
        ctx.ok(gpuwire_allreduce(ctx.world, inout.h, alias.h, op as i32, st()), &what("in place, two handles of one memory"));
        check_bytes(ctx, d, &inout.read(), &want, &what("in place, two handles of one memory"));
    }
}

fn allgather(ctx: &Ctx) {
    ctx.section("allgather");
    let (r, p) = (ctx.rank, ctx.size);
    for d in Dtype::ALL {
        let want: Vec<u8> = (0..p).flat_map(|s| data(60, d, s, 0, N)).collect();
        let send = Buf::from_bytes(d, &data(60, d, r, 0, N));
        let recv = Buf::from_bytes(d, &sentinel(p * N * d.size()));
        ctx.ok(gpuwire_allgather(ctx.world, send.h, recv.h, st()), "allgather");
        check_bytes(ctx, d, &recv.read(), &want, "allgather");
        check_bytes(ctx, d, &send.read(), &data(60, d, r, 0, N), "allgather: send buffer unchanged");

        // In place: the send buffer is a view of this rank's block of the receive buffer.
        let mut init = sentinel(p * N * d.size());
        init[r * N * d.size()..(r + 1) * N * d.size()].copy_from_slice(&data(60, d, r, 0, N));
        let recv = Buf::from_bytes(d, &init);
        let block = recv.view(r * N, N);
        ctx.ok(gpuwire_allgather(ctx.world, block.h, recv.h, st()), "allgather in place");
        check_bytes(ctx, d, &recv.read(), &want, "allgather in place");
    }
    let (s, rb) = (Buf::new(Dtype::GPUWIRE_INT8, 2), Buf::new(Dtype::GPUWIRE_INT8, 2 * p + 1));
    ctx.error(gpuwire_allgather(ctx.world, s.h, rb.h, st()), Status::GPUWIRE_ERROR_COUNT_MISMATCH, &["receive buffer"], "allgather into a wrong-sized buffer");
}

/// The default partition of `total` elements over `p` ranks: the first total mod p ranks get
/// one element more.
fn partition(total: usize, p: usize) -> Vec<usize> {
    (0..p).map(|r| total / p + usize::from(r < total % p)).collect()
}

fn allgatherv(ctx: &Ctx) {
    ctx.section("allgatherv");
    let (r, p) = (ctx.rank, ctx.size);
    let layouts: Vec<(&str, Vec<usize>)> = vec![
        ("uneven (3p+1 split)", partition(3 * p + 1, p)),
        ("rank 1 (or the only rank) has 0", (0..p).map(|s| if s == 1.min(p - 1) { 0 } else { s + 2 }).collect()),
        ("all 0", vec![0; p]),
    ];
    for d in Dtype::ALL {
        for (name, counts) in &layouts {
            let total: usize = counts.iter().sum();
            let counts_i64: Vec<i64> = counts.iter().map(|c| *c as i64).collect();
            let want: Vec<u8> = (0..p).flat_map(|s| data(70, d, s, 0, counts[s])).collect();
            let mine = data(70, d, r, 0, counts[r]);
            for given in [true, false] {
                let cp = if given { counts_i64.as_ptr() } else { std::ptr::null() };
                let what = format!("allgatherv {name}, counts {}", if given { "given" } else { "NULL (exchanged)" });
                let send = Buf::from_bytes(d, &mine);
                let recv = Buf::from_bytes(d, &sentinel(total * d.size()));
                ctx.ok(gpuwire_allgatherv(ctx.world, send.h, recv.h, cp, st()), &what);
                check_bytes(ctx, d, &recv.read(), &want, &what);

                // In place: a view of this rank's block.
                let off: usize = counts[..r].iter().sum();
                let mut init = sentinel(total * d.size());
                init[off * d.size()..(off + counts[r]) * d.size()].copy_from_slice(&mine);
                let recv = Buf::from_bytes(d, &init);
                let block = recv.view(off, counts[r]);
                ctx.ok(gpuwire_allgatherv(ctx.world, block.h, recv.h, cp, st()), &format!("{what}, in place"));
                check_bytes(ctx, d, &recv.read(), &want, &format!("{what}, in place"));
            }
        }
    }
}

fn reduce_scatter(ctx: &Ctx) {
    ctx.section("reduce_scatter");
    let (r, p) = (ctx.rank, ctx.size);
    for (d, op) in supported_pairs() {
        let salt = 80;
        let mine = encode_all(d, &inputs(d, op, r, p * N, p, salt));
        let want = expected(d, op, r * N..(r + 1) * N, p, salt);
        let send = Buf::from_bytes(d, &mine);
        let recv = Buf::from_bytes(d, &sentinel(N * d.size()));
        let what = format!("reduce_scatter {} {}", d.name(), op.name());
        ctx.ok(gpuwire_reduce_scatter(ctx.world, send.h, recv.h, op as i32, st()), &what);
        check_bytes(ctx, d, &recv.read(), &want, &what);
        check_bytes(ctx, d, &send.read(), &mine, &format!("{what}: send buffer unchanged"));
    }
}

fn alltoall(ctx: &Ctx) {
    ctx.section("alltoall");
    let (r, p) = (ctx.rank, ctx.size);
    for d in Dtype::ALL {
        let mine: Vec<u8> = (0..p).flat_map(|t| data(90, d, r, t, N)).collect();
        let want: Vec<u8> = (0..p).flat_map(|s| data(90, d, s, r, N)).collect();
        let send = Buf::from_bytes(d, &mine);
        let recv = Buf::from_bytes(d, &sentinel(p * N * d.size()));
        ctx.ok(gpuwire_alltoall(ctx.world, send.h, recv.h, st()), "alltoall");
        check_bytes(ctx, d, &recv.read(), &want, "alltoall");
        check_bytes(ctx, d, &send.read(), &mine, "alltoall: send buffer unchanged");

        let inout = Buf::from_bytes(d, &mine);
        ctx.ok(gpuwire_alltoall(ctx.world, inout.h, inout.h, st()), "alltoall in place");
        check_bytes(ctx, d, &inout.read(), &want, "alltoall in place");
    }
}

fn gather(ctx: &Ctx) {
    ctx.section("gather");
    let (r, p) = (ctx.rank, ctx.size);
    for d in Dtype::ALL {
        let want: Vec<u8> = (0..p).flat_map(|s| data(100, d, s, 0, N)).collect();
        let mine = data(100, d, r, 0, N);
        for root in 0..p {
            let send = Buf::from_bytes(d, &mine);
            let recv = Buf::from_bytes(d, &sentinel(p * N * d.size()));
            let rh = if r == root { recv.h } else { 0 };
            ctx.ok(gpuwire_gather(ctx.world, send.h, rh, root as i32, st()), &format!("gather to root {root}"));
            if r == root {
                check_bytes(ctx, d, &recv.read(), &want, &format!("gather to root {root}"));
            }
            check_bytes(ctx, d, &send.read(), &mine, "gather: send buffer unchanged");

            // In place at the root: its send buffer is a view of its block of the receive buffer.
            let mut init = sentinel(p * N * d.size());
            init[r * N * d.size()..(r + 1) * N * d.size()].copy_from_slice(&mine);
            let recv = Buf::from_bytes(d, &init);
            let block = recv.view(r * N, N);
            let rh = if r == root { recv.h } else { 0 };
            ctx.ok(gpuwire_gather(ctx.world, block.h, rh, root as i32, st()), &format!("gather to root {root} in place"));
            if r == root {
                check_bytes(ctx, d, &recv.read(), &want, &format!("gather to root {root} in place"));
            }
        }
    }
}

fn scatter(ctx: &Ctx) {
    ctx.section("scatter");
    let (r, p) = (ctx.rank, ctx.size);
    for d in Dtype::ALL {
        for root in 0..p {
            let all: Vec<u8> = (0..p).flat_map(|t| data(110, d, root, t, N)).collect();
            let send = Buf::from_bytes(d, &all);
            let recv = Buf::from_bytes(d, &sentinel(N * d.size()));
            let sh = if r == root { send.h } else { 0 };
            ctx.ok(gpuwire_scatter(ctx.world, sh, recv.h, root as i32, st()), &format!("scatter from root {root}"));
            check_bytes(ctx, d, &recv.read(), &data(110, d, root, r, N), &format!("scatter from root {root}"));
            check_bytes(ctx, d, &send.read(), &all, "scatter: send buffer unchanged");

            // In place at the root: its receive buffer is a view of its block of the send buffer.
            let block = send.view(r * N, N);
            let recv = Buf::from_bytes(d, &sentinel(N * d.size()));
            let (sh, rh) = if r == root { (send.h, block.h) } else { (0, recv.h) };
            ctx.ok(gpuwire_scatter(ctx.world, sh, rh, root as i32, st()), &format!("scatter from root {root} in place"));
            if r == root {
                check_bytes(ctx, d, &send.read(), &all, "scatter in place: the root's buffer unchanged");
            } else {
                check_bytes(ctx, d, &recv.read(), &data(110, d, root, r, N), &format!("scatter from root {root} in place"));
            }
        }
    }
}

fn unsupported_ops(ctx: &Ctx) {
    ctx.section("unsupported ops");
    let (r, p) = (ctx.rank, ctx.size);
    let pairs: Vec<(Dtype, ReduceOp)> =
        Dtype::ALL.iter().flat_map(|d| ReduceOp::ALL.iter().map(move |o| (*d, *o))).filter(|(d, o)| !supported(*d, *o)).collect();
    // MIN/MAX on 2 complex types; 3 bitwise and 3 logical ops on 6 non-integer, non-pair types;
    // MINLOC/MAXLOC on the 12 other types; the 11 other ops on the 3 pair types.
    ctx.check_eq(pairs.len(), 2 * 2 + 6 * 3 + 6 * 3 + 12 * 2 + 3 * 11, "number of unsupported (datatype, op) pairs");
    let code = Status::GPUWIRE_ERROR_UNSUPPORTED_OP;
    // Every pair of the first 8 ops and 12 datatypes; of the 75 that the logical ops, MINLOC/
    // MAXLOC and the pair datatypes add, one in four (each call is an agreement in checking mode).
    let pairs = pairs.into_iter().filter(|(d, o)| (*o as i32) < 8 && (*d as i32) < 12 || (*d as usize + *o as usize) % 4 == 0);
    for (d, op) in pairs {
        let needles = [op.name(), d.name()];
        let what = |c: &str| format!("{c} {} {}", d.name(), op.name());
        let mine = pattern(seed(&[120, r]), N * d.size());
        let send = Buf::from_bytes(d, &mine);
        let recv = Buf::from_bytes(d, &sentinel(N * d.size()));
        ctx.error(gpuwire_allreduce(ctx.world, send.h, recv.h, op as i32, st()), code, &needles, &what("allreduce"));
        check_bytes(ctx, d, &recv.read(), &sentinel(N * d.size()), &what("allreduce: receive buffer untouched"));
        ctx.error(gpuwire_allreduce(ctx.world, send.h, send.h, op as i32, st()), code, &needles, &what("allreduce in place"));
        check_bytes(ctx, d, &send.read(), &mine, &what("allreduce in place: buffer untouched"));
        for root in 0..p {
            let rh = if r == root { recv.h } else { 0 };
            ctx.error(gpuwire_reduce(ctx.world, send.h, rh, op as i32, root as i32, st()), code, &needles, &what("reduce"));
        }
        check_bytes(ctx, d, &recv.read(), &sentinel(N * d.size()), &what("reduce: receive buffer untouched"));
        let big = Buf::from_bytes(d, &pattern(seed(&[121, r]), p * N * d.size()));
        ctx.error(gpuwire_reduce_scatter(ctx.world, big.h, recv.h, op as i32, st()), code, &needles, &what("reduce_scatter"));
        ctx.error(gpuwire_scan(ctx.world, send.h, recv.h, op as i32, st()), code, &needles, &what("scan"));
        ctx.error(gpuwire_exscan(ctx.world, send.h, send.h, op as i32, st()), code, &needles, &what("exscan in place"));
        check_bytes(ctx, d, &recv.read(), &sentinel(N * d.size()), &what("reduce_scatter: receive buffer untouched"));
    }
    // Op codes that are not a gpuwire_op.
    let b = Buf::from_bytes(Dtype::GPUWIRE_INT32, &sentinel(4));
    for bad in [13, -1, 1000] {
        ctx.error(gpuwire_allreduce(ctx.world, b.h, b.h, bad, st()), Status::GPUWIRE_ERROR_INVALID_ARGUMENT, &["reduction code"], &format!("allreduce with op code {bad}"));
    }
    check_bytes(ctx, Dtype::GPUWIRE_INT32, &b.read(), &sentinel(4), "buffer of a refused allreduce");
    // Nothing of the refused calls is left in flight: a valid allreduce is right.
    let one = Buf::from_bytes(Dtype::GPUWIRE_INT64, &encode(Dtype::GPUWIRE_INT64, V::I(r as i128 + 1)));
    ctx.ok(gpuwire_allreduce(ctx.world, one.h, one.h, ReduceOp::GPUWIRE_SUM as i32, st()), "allreduce after refused calls");
    ctx.check_eq(decode(Dtype::GPUWIRE_INT64, &one.read()), V::I((p * (p + 1) / 2) as i128), "allreduce after refused calls");
}

/// MIN/MAX over the whole range of the unsigned and signed 64/32-bit types: values above 2^63
/// must compare as unsigned (MPICH 4.0 compares MPI_UINT64_T as signed, pmodels/mpich#6083).
fn unsigned_extremes(ctx: &Ctx) {
    ctx.section("unsigned extremes");
    let r = ctx.rank as u64;
    let big = [u64::MAX - r, (1u64 << 63) + r, r];
    let want_max = u64::MAX;
    let want_min: u64 = 0;
    for (op, want) in [(ReduceOp::GPUWIRE_MAX, want_max), (ReduceOp::GPUWIRE_MIN, want_min)] {
        // Element 0: near u64::MAX on every rank; element 1: just above 2^63; element 2: the rank.
        let bytes: Vec<u8> = big.iter().flat_map(|v| v.to_le_bytes()).collect();
        let b = Buf::from_bytes(Dtype::GPUWIRE_UINT64, &bytes);
        ctx.ok(gpuwire_allreduce(ctx.world, b.h, b.h, op as i32, st()), &format!("allreduce uint64 {}", op.name()));
        let got: Vec<u64> = b.read().chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
        let p = ctx.size as u64;
        let expect: Vec<u64> = match op {
            ReduceOp::GPUWIRE_MAX => vec![want, (1u64 << 63) + p - 1, p - 1],
            _ => vec![u64::MAX - (p - 1), 1u64 << 63, want],
        };
        ctx.check_eq(got, expect, &format!("allreduce uint64 {} over values above 2^63", op.name()));
        let _ = b.free();
    }
}

// ---- v-collectives: alltoallv, gatherv, scatterv, reduce_scatterv ---------------------------

/// A small pseudo-random number in 0..m from `parts` (fixed seed).
fn rnd(parts: &[usize], m: usize) -> usize {
    (seed(parts) % m as u64) as usize
}

/// Displacements for `counts`: blocks in reverse rank order with gaps of 0..2 elements before
/// each (`salt` varies them), and the buffer length.
fn gappy(counts: &[usize], salt: usize) -> (Vec<i64>, usize) {
    let mut d = vec![0i64; counts.len()];
    let mut at = 0;
    for j in (0..counts.len()).rev() {
        at += rnd(&[salt, j], 3);
        d[j] = at as i64;
        at += counts[j];
    }
    (d, at + 1)
}

fn i64s(v: &[usize]) -> Vec<i64> {
    v.iter().map(|x| *x as i64).collect()
}

/// `buf` (sentinel elsewhere) with `blocks[j]` written at `displs[j]`.
fn place(d: Dtype, len: usize, displs: &[i64], blocks: &[Vec<u8>]) -> Vec<u8> {
    let mut out = sentinel(len * d.size());
    for (b, &o) in blocks.iter().zip(displs).filter(|(b, _)| !b.is_empty()) {
        let o = o as usize * d.size();
        out[o..o + b.len()].copy_from_slice(b);
    }
    out
}

fn vcollectives(ctx: &Ctx, checking: bool) {
    alltoallv(ctx);
    gatherv_scatterv(ctx);
    empty_root_in_place(ctx);
    reduce_scatterv(ctx);
    v_nonblocking(ctx);
    v_bad_inputs(ctx, checking);
}

/// One alltoallv with count matrix `cnt(from, to)`, gappy displacements on both sides; checks
/// the received blocks, the gaps (left as they were) and the send buffer (unchanged). With
/// `far`, every empty block's displacement lies past its buffer's end (MPI reads and writes
/// nothing of an empty block, wherever it is).
fn alltoallv_case(ctx: &Ctx, d: Dtype, name: &str, cnt: &dyn Fn(usize, usize) -> usize, far: bool) {
    let (r, p) = (ctx.rank, ctx.size);
    let scounts: Vec<usize> = (0..p).map(|j| cnt(r, j)).collect();
    let rcounts: Vec<usize> = (0..p).map(|j| cnt(j, r)).collect();
    let (mut sd, slen) = gappy(&scounts, 7 + r);
    let (mut rd, rlen) = gappy(&rcounts, 11 + r);
    if far {
        let past = |displs: &mut Vec<i64>, counts: &[usize], len: usize| {
            for j in (0..p).filter(|j| counts[*j] == 0) {
                displs[j] = (len + 1000 + j) as i64;
            }
        };
        past(&mut sd, &scounts, slen);
        past(&mut rd, &rcounts, rlen);
    }
    let sblocks: Vec<Vec<u8>> = (0..p).map(|j| data(120, d, r, j, scounts[j])).collect();
    let rblocks: Vec<Vec<u8>> = (0..p).map(|j| data(120, d, j, r, rcounts[j])).collect();
    let mine = place(d, slen, &sd, &sblocks);
    let want = place(d, rlen, &rd, &rblocks);
    let send = Buf::from_bytes(d, &mine);
    let recv = Buf::from_bytes(d, &sentinel(rlen * d.size()));
    let (sc, rc) = (i64s(&scounts), i64s(&rcounts));
    let what = format!("alltoallv {} {name}", d.name());
    ctx.ok(gpuwire_alltoallv(ctx.world, send.h, sc.as_ptr(), sd.as_ptr(), recv.h, rc.as_ptr(), rd.as_ptr(), st()), &what);
    check_bytes(ctx, d, &recv.read(), &want, &what);
    check_bytes(ctx, d, &send.read(), &mine, &format!("{what}: send buffer unchanged"));
    // NULL displacements: contiguous in rank order.
    let want: Vec<u8> = rblocks.concat();
    let send = Buf::from_bytes(d, &sblocks.concat());
    let recv = Buf::from_bytes(d, &sentinel(want.len().max(d.size())));
    let recv = recv.view(0, want.len() / d.size());
    ctx.ok(gpuwire_alltoallv(ctx.world, send.h, sc.as_ptr(), std::ptr::null(), recv.h, rc.as_ptr(), std::ptr::null(), st()), &format!("{what}, NULL displacements"));
    check_bytes(ctx, d, &recv.read(), &want, &format!("{what}, NULL displacements"));
}

fn alltoallv(ctx: &Ctx) {
    ctx.section("alltoallv");
    let (r, p) = (ctx.rank, ctx.size);
    for d in [Dtype::GPUWIRE_INT32, Dtype::GPUWIRE_FLOAT64, Dtype::GPUWIRE_UINT8] {
        // Rank 0 sends nothing (a zero row), nobody sends to the last rank (a zero column).
        alltoallv_case(ctx, d, "zero row and column", &|i, j| if i == 0 || j == p - 1 { 0 } else { 1 + (i + 2 * j) % 3 }, false);
        alltoallv_case(ctx, d, "zero row and column, empty blocks past the buffers' ends", &|i, j| if i == 0 || j == p - 1 { 0 } else { 1 + (i + 2 * j) % 3 }, true);
        alltoallv_case(ctx, d, "random counts (seed 5)", &|i, j| rnd(&[5, i, j], 5), false);
        alltoallv_case(ctx, d, "all zero", &|_, _| 0, false);

        // In place (sendbuf = recvbuf, send arrays NULL): symmetric counts, rank r's block j
        // holds its data for j and is replaced by j's data for r.
        let cnt = |i: usize, j: usize| rnd(&[6, i.min(j), i.max(j)], 4);
        let rcounts: Vec<usize> = (0..p).map(|j| cnt(j, r)).collect();
        let (rd, rlen) = gappy(&rcounts, 13 + r);
        let outgoing: Vec<Vec<u8>> = (0..p).map(|j| data(121, d, r, j, rcounts[j])).collect();
        let incoming: Vec<Vec<u8>> = (0..p).map(|j| data(121, d, j, r, rcounts[j])).collect();
        let inout = Buf::from_bytes(d, &place(d, rlen, &rd, &outgoing));
        let rc = i64s(&rcounts);
        let what = format!("alltoallv {} in place", d.name());
        ctx.ok(gpuwire_alltoallv(ctx.world, inout.h, std::ptr::null(), std::ptr::null(), inout.h, rc.as_ptr(), rd.as_ptr(), st()), &what);
        check_bytes(ctx, d, &inout.read(), &place(d, rlen, &rd, &incoming), &what);
        // In place with nothing to exchange, on an empty buffer (the same handle: still in place).
        let empty = Buf::new(d, 0);
        let zeros = vec![0i64; p];
        ctx.ok(gpuwire_alltoallv(ctx.world, empty.h, std::ptr::null(), std::ptr::null(), empty.h, zeros.as_ptr(), std::ptr::null(), st()), &format!("{what}, empty"));
    }
}

fn gatherv_scatterv(ctx: &Ctx) {
    ctx.section("gatherv / scatterv");
    let (r, p) = (ctx.rank, ctx.size);
    let root = if p > 1 { p - 2 } else { 0 }; // not rank 0 where there are 3 ranks or more
    let counts: Vec<usize> = (0..p).map(|j| (2 * j + 1) % 4).collect(); // rank 3 (if any) none
    let (displs, len) = gappy(&counts, 17);
    let c = i64s(&counts);
    for d in [Dtype::GPUWIRE_INT32, Dtype::GPUWIRE_FLOAT64] {
        let mine = data(130, d, r, root, counts[r]);
        let blocks: Vec<Vec<u8>> = (0..p).map(|j| data(130, d, j, root, counts[j])).collect();
        let want = place(d, len, &displs, &blocks);
        let send = Buf::from_bytes(d, &mine);
        let recv = Buf::from_bytes(d, &sentinel(len * d.size()));
        // Non-roots pass no receive buffer and NULL arrays.
        let (rh, cp, dp) = if r == root { (recv.h, c.as_ptr(), displs.as_ptr()) } else { (0, std::ptr::null(), std::ptr::null()) };
        let what = format!("gatherv {} to root {root}", d.name());
        ctx.ok(gpuwire_gatherv(ctx.world, send.h, rh, cp, dp, root as i32, st()), &what);
        if r == root {
            check_bytes(ctx, d, &recv.read(), &want, &what);
        }
        // In place at the root: its send buffer is a view of its own block.
        let mut init = sentinel(len * d.size());
        let o = displs[r] as usize * d.size();
        init[o..o + mine.len()].copy_from_slice(&mine);
        let recv = Buf::from_bytes(d, &init);
        let block = recv.view(displs[r] as usize, counts[r]);
        let sh = if r == root { block.h } else { send.h };
        ctx.ok(gpuwire_gatherv(ctx.world, sh, rh.min(1) * recv.h, cp, dp, root as i32, st()), &format!("{what}, in place"));
        if r == root {
            check_bytes(ctx, d, &recv.read(), &want, &format!("{what}, in place"));
        }

        // scatterv from the same root, the same layout.
        let blocks: Vec<Vec<u8>> = (0..p).map(|j| data(131, d, root, j, counts[j])).collect();
        let all = place(d, len, &displs, &blocks);
        let send = Buf::from_bytes(d, &all);
        let recv = Buf::from_bytes(d, &sentinel(counts[r] * d.size()));
        let (sh, cp, dp) = if r == root { (send.h, c.as_ptr(), displs.as_ptr()) } else { (0, std::ptr::null(), std::ptr::null()) };
        let what = format!("scatterv {} from root {root}", d.name());
        ctx.ok(gpuwire_scatterv(ctx.world, sh, cp, dp, recv.h, root as i32, st()), &what);
        check_bytes(ctx, d, &recv.read(), &blocks[r], &what);
        check_bytes(ctx, d, &send.read(), &all, &format!("{what}: send buffer unchanged"));
        let block = send.view(displs[r] as usize, counts[r]);
        let recv = Buf::from_bytes(d, &sentinel(counts[r] * d.size()));
        let rh = if r == root { block.h } else { recv.h };
        ctx.ok(gpuwire_scatterv(ctx.world, sh, cp, dp, rh, root as i32, st()), &format!("{what}, in place"));
        if r != root {
            check_bytes(ctx, d, &recv.read(), &blocks[r], &format!("{what}, in place"));
        } else {
            check_bytes(ctx, d, &send.read(), &all, &format!("{what}, in place: the root's buffer unchanged"));
        }
    }
}

/// gatherv and scatterv in place at a root whose own block is empty and lies where the buffer
/// starts (ranks 0 and 1 send or receive nothing, the root is rank 1): the root's receive (or
/// send) buffer is then at the same address as the whole buffer. Under a timeout rank 2 waited
/// for its block until the timeout (Open MPI's nonblocking MPI_Ialltoallw took the root's call
/// for an in-place one and sent nothing).
fn empty_root_in_place(ctx: &Ctx) {
    ctx.section("gatherv / scatterv in place at an empty root");
    let (r, p) = (ctx.rank, ctx.size);
    let root = 1.min(p - 1);
    let counts: Vec<usize> = (0..p).map(|j| if j <= 1 { 0 } else { 3 }).collect();
    let displs: Vec<i64> = (0..p).map(|j| 3 * j.saturating_sub(2) as i64).collect();
    let (c, len, d) = (i64s(&counts), 3 * p.saturating_sub(2), Dtype::GPUWIRE_INT32);
    let blocks: Vec<Vec<u8>> = (0..p).map(|j| data(140, d, root, j, counts[j])).collect();
    let all = place(d, len, &displs, &blocks);
    let send = Buf::from_bytes(d, &all);
    let recv = Buf::from_bytes(d, &sentinel(counts[r] * d.size()));
    let own = send.view(0, 0);
    let (sh, rh, cp, dp) = if r == root { (send.h, own.h, c.as_ptr(), displs.as_ptr()) } else { (0, recv.h, std::ptr::null(), std::ptr::null()) };
    ctx.ok(gpuwire_scatterv(ctx.world, sh, cp, dp, rh, root as i32, st()), "scatterv in place at an empty root");
    check_bytes(ctx, d, &recv.read(), &blocks[r], "scatterv in place at an empty root");
    let gathered = Buf::from_bytes(d, &sentinel(len * d.size()));
    let mine = Buf::from_bytes(d, &blocks[r]);
    let first = gathered.view(0, 0);
    let (sh, rh) = if r == root { (first.h, gathered.h) } else { (mine.h, 0) };
    ctx.ok(gpuwire_gatherv(ctx.world, sh, rh, cp, dp, root as i32, st()), "gatherv in place at an empty root");
    if r == root {
        check_bytes(ctx, d, &gathered.read(), &all, "gatherv in place at an empty root");
    }
}

fn reduce_scatterv(ctx: &Ctx) {
    ctx.section("reduce_scatterv");
    let (r, p) = (ctx.rank, ctx.size);
    let counts: Vec<usize> = (0..p).map(|j| [3, 0, 1, 4][j % 4]).collect(); // rank 1 gets none
    let c = i64s(&counts);
    let total: usize = counts.iter().sum();
    let off: usize = counts[..r].iter().sum();
    let pairs = [
        (Dtype::GPUWIRE_INT32, ReduceOp::GPUWIRE_SUM),
        (Dtype::GPUWIRE_FLOAT64, ReduceOp::GPUWIRE_MAX),
        (Dtype::GPUWIRE_FLOAT32, ReduceOp::GPUWIRE_AVG),
        (Dtype::GPUWIRE_FLOAT16, ReduceOp::GPUWIRE_SUM),
        // A pair: MPI reduces it as MPI_DOUBLE_INT (its moves carry the padding as 16 bytes).
        (Dtype::GPUWIRE_FLOAT64_INT32, ReduceOp::GPUWIRE_MINLOC),
    ];
    for (d, op) in pairs {
        let salt = 140;
        let mine = encode_all(d, &inputs(d, op, r, total, p, salt));
        let want = expected(d, op, off..off + counts[r], p, salt);
        let send = Buf::from_bytes(d, &mine);
        let recv = Buf::from_bytes(d, &sentinel(counts[r].max(1) * d.size()));
        let recv = recv.view(0, counts[r]);
        let what = format!("reduce_scatterv {} {}", d.name(), op.name());
        ctx.ok(gpuwire_reduce_scatterv(ctx.world, send.h, recv.h, c.as_ptr(), op as i32, st()), &what);
        check_bytes(ctx, d, &recv.read(), &want, &what);
        check_bytes(ctx, d, &send.read(), &mine, &format!("{what}: send buffer unchanged"));
        let inout = Buf::from_bytes(d, &mine);
        ctx.ok(gpuwire_reduce_scatterv(ctx.world, inout.h, inout.h, c.as_ptr(), op as i32, st()), &format!("{what}, in place"));
        check_bytes(ctx, d, &inout.read()[..want.len()], &want, &format!("{what}, in place"));
    }
    // The block form under its new name, and the deprecated one.
    let d = Dtype::GPUWIRE_INT64;
    let op = ReduceOp::GPUWIRE_SUM;
    let mine = encode_all(d, &inputs(d, op, r, p * N, p, 141));
    let want = expected(d, op, r * N..(r + 1) * N, p, 141);
    let send = Buf::from_bytes(d, &mine);
    for (name, f) in [("reduce_scatter_block", gpuwire_reduce_scatter_block as extern "C" fn(_, _, _, _, _) -> _), ("reduce_scatter (deprecated)", gpuwire_reduce_scatter)] {
        let recv = Buf::from_bytes(d, &sentinel(N * d.size()));
        ctx.ok(f(ctx.world, send.h, recv.h, op as i32, st()), name);
        check_bytes(ctx, d, &recv.read(), &want, name);
    }
}

/// The nonblocking forms, all outstanding together inside one group, completed by waitall.
fn v_nonblocking(ctx: &Ctx) {
    ctx.section("v-collectives: nonblocking, in a group");
    let (r, p) = (ctx.rank, ctx.size);
    let d = Dtype::GPUWIRE_INT32;
    let root = p - 1;
    let cnt = |i: usize, j: usize| rnd(&[8, i, j], 4);
    let scounts: Vec<usize> = (0..p).map(|j| cnt(r, j)).collect();
    let rcounts: Vec<usize> = (0..p).map(|j| cnt(j, r)).collect();
    let (mut sc, mut rc) = (i64s(&scounts), i64s(&rcounts));
    let sblocks: Vec<Vec<u8>> = (0..p).map(|j| data(150, d, r, j, scounts[j])).collect();
    let want_a: Vec<u8> = (0..p).flat_map(|j| data(150, d, j, r, rcounts[j])).collect();
    let a_send = Buf::from_bytes(d, &sblocks.concat());
    let a_recv = Buf::from_bytes(d, &sentinel(want_a.len().max(1) * d.size()));
    let a_recv = a_recv.view(0, want_a.len() / d.size());
    let gcounts: Vec<usize> = (0..p).map(|j| j % 3).collect();
    let mut gc = i64s(&gcounts);
    let gtotal: usize = gcounts.iter().sum();
    let want_g: Vec<u8> = (0..p).flat_map(|j| data(151, d, j, root, gcounts[j])).collect();
    let g_send = Buf::from_bytes(d, &data(151, d, r, root, gcounts[r]));
    let g_recv = Buf::from_bytes(d, &sentinel(gtotal.max(1) * d.size()));
    let g_recv = g_recv.view(0, gtotal);
    let s_all: Vec<u8> = (0..p).flat_map(|j| data(152, d, root, j, gcounts[j])).collect();
    let s_send = Buf::from_bytes(d, &s_all);
    let s_recv = Buf::from_bytes(d, &sentinel(gcounts[r].max(1) * d.size()));
    let s_recv = s_recv.view(0, gcounts[r]);
    let op = ReduceOp::GPUWIRE_SUM;
    let mut rsc = gc.clone();
    let rs_send = Buf::from_bytes(d, &encode_all(d, &inputs(d, op, r, gtotal, p, 153)));
    let off: usize = gcounts[..r].iter().sum();
    let want_rs = expected(d, op, off..off + gcounts[r], p, 153);
    let rs_recv = Buf::from_bytes(d, &sentinel(gcounts[r].max(1) * d.size()));
    let rs_recv = rs_recv.view(0, gcounts[r]);
    let b_send = Buf::from_bytes(d, &encode_all(d, &inputs(d, op, r, p * N, p, 154)));
    let want_b = expected(d, op, r * N..(r + 1) * N, p, 154);
    let b_recv = Buf::from_bytes(d, &sentinel(N * d.size()));
    let mut reqs = vec![GPUWIRE_REQUEST_NULL; 5];
    let is_root = r == root;
    let null = std::ptr::null();
    ctx.ok(gpuwire_group_start(), "group_start");
    ctx.ok(gpuwire_ialltoallv(ctx.world, a_send.h, sc.as_ptr(), null, a_recv.h, rc.as_ptr(), null, st(), &mut reqs[0]), "ialltoallv");
    ctx.ok(gpuwire_igatherv(ctx.world, g_send.h, if is_root { g_recv.h } else { 0 }, gc.as_ptr(), null, root as i32, st(), &mut reqs[1]), "igatherv");
    ctx.ok(gpuwire_iscatterv(ctx.world, if is_root { s_send.h } else { 0 }, gc.as_ptr(), null, s_recv.h, root as i32, st(), &mut reqs[2]), "iscatterv");
    ctx.ok(gpuwire_ireduce_scatterv(ctx.world, rs_send.h, rs_recv.h, rsc.as_ptr(), op as i32, st(), &mut reqs[3]), "ireduce_scatterv");
    ctx.ok(gpuwire_ireduce_scatter_block(ctx.world, b_send.h, b_recv.h, op as i32, st(), &mut reqs[4]), "ireduce_scatter_block");
    // The arrays are copied at the call.
    for v in [&mut sc, &mut rc, &mut gc, &mut rsc] {
        v.iter_mut().for_each(|x| *x = -7);
    }
    ctx.ok(gpuwire_group_end(), "group_end");
    ctx.ok(gpuwire_waitall(reqs.len() as i32, reqs.as_mut_ptr()), "waitall");
    check_bytes(ctx, d, &a_recv.read(), &want_a, "ialltoallv");
    if is_root {
        check_bytes(ctx, d, &g_recv.read(), &want_g, "igatherv");
    }
    check_bytes(ctx, d, &s_recv.read(), &data(152, d, root, r, gcounts[r]), "iscatterv");
    check_bytes(ctx, d, &rs_recv.read(), &want_rs, "ireduce_scatterv");
    check_bytes(ctx, d, &b_recv.read(), &want_b, "ireduce_scatter_block");
    // Outside a group too.
    let (sc, rc) = (i64s(&scounts), i64s(&rcounts));
    let a_recv2 = Buf::from_bytes(d, &sentinel(want_a.len().max(1) * d.size()));
    let a_recv2 = a_recv2.view(0, want_a.len() / d.size());
    let mut rq = GPUWIRE_REQUEST_NULL;
    ctx.ok(gpuwire_ialltoallv(ctx.world, a_send.h, sc.as_ptr(), null, a_recv2.h, rc.as_ptr(), null, st(), &mut rq), "ialltoallv outside a group");
    ctx.ok(gpuwire_wait(&mut rq), "wait ialltoallv");
    check_bytes(ctx, d, &a_recv2.read(), &want_a, "ialltoallv outside a group");
}

/// Bad counts and displacements: INVALID_ARGUMENT with nothing sent, on every rank (all ranks
/// pass them; in checking mode one rank alone, the others then get REMOTE_ARGUMENT); in
/// checking mode a count matrix that does not match is COUNT_MISMATCH on every rank.
fn v_bad_inputs(ctx: &Ctx, checking: bool) {
    ctx.section("v-collectives: bad inputs");
    let (r, p) = (ctx.rank, ctx.size);
    let d = Dtype::GPUWIRE_INT32;
    let ones = vec![1i64; p];
    let send = Buf::from_bytes(d, &data(160, d, r, 0, p));
    let recv = Buf::from_bytes(d, &sentinel(p * d.size()));
    let null = std::ptr::null();
    let invalid = Status::GPUWIRE_ERROR_INVALID_ARGUMENT;
    let mut neg = ones.clone();
    neg[0] = -1;
    let past: Vec<i64> = (0..p as i64).map(|j| j + 1).collect(); // the last block ends at p + 1
    let big = vec![i64::MAX; p];
    let mut overlap: Vec<i64> = (0..p as i64).collect();
    overlap[p - 1] = 0;
    let cases: Vec<(&str, &[i64], &[i64], &str)> = vec![
        ("a negative count", &neg, &ones, "negative"),
        ("a displacement past the buffer", &ones, &past, "past"),
        ("a count past the buffer", &big, &ones, "past"),
        ("overlapping receive blocks", &ones, &overlap, "overlap"),
    ];
    for (name, counts, displs, needle) in cases {
        if name.contains("overlapping") && p == 1 {
            continue;
        }
        let bad = !checking || r == 0;
        let (c, dp) = if bad { (counts.as_ptr(), displs.as_ptr()) } else { (ones.as_ptr(), null) };
        let mine: Vec<u8> = sentinel(p * d.size());
        recv.write(&mine);
        let st_ = gpuwire_alltoallv(ctx.world, send.h, ones.as_ptr(), null, recv.h, c, dp, st());
        if bad {
            ctx.error(st_, invalid, &[needle], &format!("alltoallv with {name}"));
        } else {
            ctx.status(st_, Status::GPUWIRE_ERROR_REMOTE_ARGUMENT, &format!("alltoallv with {name} on rank 0"));
        }
        check_bytes(ctx, d, &recv.read(), &mine, &format!("alltoallv with {name}: nothing received"));
    }
    // gatherv with a bad layout at the root: only the root can know (checking mode tells all).
    if checking || p == 1 {
        let total = Buf::from_bytes(d, &sentinel(p * d.size()));
        let g = gpuwire_gatherv(ctx.world, send.view(0, 1).h, total.h, neg.as_ptr(), null, 0, st());
        if r == 0 {
            ctx.error(g, invalid, &["negative"], "gatherv with a negative count at the root");
        } else {
            ctx.status(g, Status::GPUWIRE_ERROR_REMOTE_ARGUMENT, "gatherv with a negative count at the root");
        }
    }
    let rs = gpuwire_reduce_scatterv(ctx.world, send.h, recv.view(0, 1).h, neg.as_ptr(), ReduceOp::GPUWIRE_SUM as i32, st());
    ctx.error(rs, invalid, &["negative"], "reduce_scatterv with a negative count");
    // Counts whose sum overflows int64 (from 3 ranks on, the usize sum too): the buffer cannot
    // hold them, a count mismatch naming the send buffer (it was an invalid argument about a
    // "recv buffer of 18446744073709551615 elements").
    let huge = vec![i64::MAX; p];
    let rs = gpuwire_reduce_scatterv(ctx.world, send.h, recv.view(0, 1).h, huge.as_ptr(), ReduceOp::GPUWIRE_SUM as i32, st());
    ctx.error(rs, Status::GPUWIRE_ERROR_COUNT_MISMATCH, &["recvcounts add up to", "send buffer holds"], "reduce_scatterv with counts that overflow int64");
    if checking && p > 1 {
        // Rank 0 expects one element more from rank 1 than rank 1 sends: every rank is told.
        let mut rc = ones.clone();
        if r == 0 {
            rc[1] = 2;
        }
        let recv = Buf::from_bytes(d, &sentinel((p + 1) * d.size()));
        let st_ = gpuwire_alltoallv(ctx.world, send.h, ones.as_ptr(), null, recv.h, rc.as_ptr(), null, st());
        ctx.error(st_, Status::GPUWIRE_ERROR_COUNT_MISMATCH, &["rank 0 expects 2 elements from rank 1"], "alltoallv with a count matrix that does not match");
        // gatherv: the root expects another count than rank 1 sends.
        let mut gc = ones.clone();
        gc[1] = 0;
        let g_recv = Buf::from_bytes(d, &sentinel(p * d.size()));
        let st_ = gpuwire_gatherv(ctx.world, send.view(0, 1).h, g_recv.h, gc.as_ptr(), null, 0, st());
        ctx.error(st_, Status::GPUWIRE_ERROR_COUNT_MISMATCH, &["expects 0 elements from rank 1"], "gatherv with a count the sender does not send");
        // reduce_scatterv with counts that differ between ranks.
        let mut c = ones.clone();
        if r == 1 {
            c[0] = 0;
            c[1] = 2;
        }
        let rbuf = Buf::from_bytes(d, &sentinel(2 * d.size()));
        let st_ = gpuwire_reduce_scatterv(ctx.world, send.h, rbuf.view(0, c[r] as usize).h, c.as_ptr(), ReduceOp::GPUWIRE_SUM as i32, st());
        ctx.error(st_, Status::GPUWIRE_ERROR_COUNT_MISMATCH, &["different recvcounts"], "reduce_scatterv with counts that differ between ranks");
        // allgatherv with the same counts, which add up alike on every rank (each rank sends its
        // own entry): only the comparison of the counts themselves finds it.
        let all = Buf::from_bytes(d, &sentinel(p * d.size()));
        let st_ = gpuwire_allgatherv(ctx.world, send.view(0, c[r] as usize).h, all.h, c.as_ptr(), st());
        ctx.error(st_, Status::GPUWIRE_ERROR_COUNT_MISMATCH, &["different recvcounts"], "allgatherv with counts that differ between ranks");
        check_bytes(ctx, d, &all.read(), &sentinel(p * d.size()), "allgatherv with counts that differ between ranks: nothing received");
    }
    // The communicator is in step afterwards.
    let recv = Buf::from_bytes(d, &sentinel(p * d.size()));
    ctx.ok(gpuwire_alltoallv(ctx.world, send.h, ones.as_ptr(), null, recv.h, ones.as_ptr(), null, st()), "alltoallv after the errors");
    let want: Vec<u8> = (0..p).flat_map(|j| data(160, d, j, 0, p)[r * d.size()..(r + 1) * d.size()].to_vec()).collect();
    check_bytes(ctx, d, &recv.read(), &want, "alltoallv after the errors");
}
