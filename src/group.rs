//! Groups (`gpuwire_group_start` / `gpuwire_group_end`, as `ncclGroupStart` / `ncclGroupEnd`):
//! the operations a thread issues between them are recorded and started together at the
//! outermost end.
//!
//! At the end, for each communicator in call order: NCCL device operations are issued inside
//! one NCCL group (one launch; point-to-point operations on NCCL are issued into it at their
//! calls, as NCCL's own inside ncclGroupStart/End, so the group costs NCCL's own); every other point-to-point operation is started as a
//! nonblocking MPI (or IPC) operation — receives first, then sends — then the collectives run
//! in call order, then every started operation is completed. So a halo exchange with any number
//! of neighbours cannot deadlock on the order of its sends and receives. The end returns once
//! the data of host-memory and MPI-path operations is in place (NCCL's are stream-ordered).
//! Groups are per thread; a communicator's operations queued on its progress engine before
//! the group run first.
//!
//! On a stream-ordered MPI path (MPI_STAGED), a communicator's part of a group that is only
//! blocking point-to-point forms on device memory, all on one stream (a halo exchange), is one
//! stream-ordered operation (`crate::backend::ordered`): its sends' data staged at the group's
//! place in the stream, the receives then sends started together by the progress engine, the
//! received data copied back on the stream; the end returns before the data moves, as NCCL's.
//!
//! On IPC with stream-ordered point-to-point (`crate::backend::ipc::p2p_stream_ordered`), such a
//! part is started as one batch: receives, then sends, each stream-ordered where it can be (more
//! than 1 KiB of exportable device memory), the sends' waits for their receivers enqueued after
//! every receive's copy; the end returns once the headers have met, before the data moves.
//!
//! Wildcard receives (GPUWIRE_ANY_SOURCE, GPUWIRE_ANY_TAG) in a group are posted at its end, in
//! the group's call order before any send, and match as receives posted then would; the
//! status of a gpuwire_irecv_status is its request's once the group ended. A blocking
//! gpuwire_recv_status is refused inside a group (its status would be known only at the end).

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::comm::Communicator;
use crate::device::Stream;
use crate::engine::Done;
use crate::error::{Error, Result};
use crate::op::Op;
use crate::request::{Pending, Request, Status};
use std::sync::Mutex;

mod overlap;

/// Deepest nesting accepted (a program that never ends its groups fails instead of growing).
const MAX_DEPTH: u32 = 1 << 16;

struct Entry {
    c: Arc<Communicator>,
    op: Op,
    stream: Stream,
    /// The completion of a nonblocking form's request.
    done: Option<Arc<Done>>,
    /// What a receive matched, for its request's status (nonblocking forms only).
    matched: Option<Arc<Mutex<Option<Status>>>>,
    /// A point-to-point or NCCL operation's views packed at the group's end (`op` then runs on
    /// the scratch), unpacked once it completed.
    packed: Option<Box<crate::view::Packed<Op>>>,
    /// Issued at its call into the group's NCCL group (`direct`): the end only launches it.
    issued: bool,
    /// The memory it touches, compared with each later operation's (`overlap`).
    touch: overlap::Touch,
    /// Made by gpuwire disjoint from the others it made (`submit_disjoint`): not compared with
    /// those.
    made: bool,
    /// A collective whose arguments did not resolve at its call (`fail_collective`): its name
    /// and error, told to the other ranks in the group's call order (`op` is a placeholder).
    failed: Option<Box<(String, Error)>>,
}

#[derive(Default)]
struct Open {
    depth: u32,
    entries: Vec<Entry>,
    /// What `entries` touch, indexed for large groups.
    memory: overlap::Memory,
    /// Set when the group has been started (its requests may then be waited for).
    ended: Arc<AtomicBool>,
}

impl Open {
    /// Closes a group that will never end (`why`: its thread exits, or gpuwire is finalized):
    /// it never starts, its nonblocking operations' requests fail with `why` (another thread's
    /// wait or free of them returns instead of being refused for good). The number of its
    /// operations.
    fn abandon(&mut self, why: &str) -> usize {
        set_open(false);
        if self.depth == 0 {
            return 0;
        }
        self.depth = 0;
        self.memory = overlap::Memory::default();
        let entries = std::mem::take(&mut self.entries);
        let e = Err(Error::InvalidArgument(why.into()));
        for x in &entries {
            finish(x, &e);
        }
        self.ended.store(true, Ordering::Release);
        let comms: Vec<&Communicator> = entries.iter().map(|x| &*x.c).collect();
        crate::backend::nccl::thread_exits_in_group(&comms);
        entries.len()
    }
}

impl Drop for Open {
    /// A group its thread left open when it exited never starts.
    fn drop(&mut self) {
        self.abandon("the group's thread exited before its gpuwire_group_end: its operations did not run as a group (on NCCL, those issued at their calls were launched at the thread's exit; the others never started)");
    }
}

/// gpuwire_finalize on a thread whose group is open: the group is abandoned as at its thread's
/// exit (`Open::abandon`); the number of its operations, which finalize reports.
pub fn abandon_at_finalize() -> usize {
    if !is_open() {
        return 0;
    }
    GROUP.with(|g| {
        g.borrow_mut().abandon(
            "gpuwire_finalize was called inside the group, before its gpuwire_group_end: its operations did not run as a group (on NCCL, those issued at their calls were launched at the finalize; the others never started)",
        )
    })
}

thread_local! {
    // The turns' record first (`turn::touch`): destroyed after this one at the thread's exit.
    static GROUP: RefCell<Open> = {
        crate::backend::turn::touch();
        RefCell::new(Open::default())
    };
}

/// Sets whether [`GROUP`]'s depth is above 0 (`hot::Thread::group_open`): read by every
/// operation (a thread-local without a destructor costs the least to reach).
fn set_open(open: bool) {
    crate::hot::with_thread(|t| t.group_open.set(open));
}

/// Whether this thread is inside a group.
#[inline]
pub fn is_open() -> bool {
    crate::hot::with_thread(|t| t.group_open.get())
}

/// How deep this thread's groups are nested (0: none is open).
pub fn depth() -> u32 {
    if !is_open() {
        return 0;
    }
    GROUP.with(|g| g.borrow().depth)
}

/// gpuwire_group_start.
pub fn start() -> Result<()> {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth >= MAX_DEPTH {
            return Err(Error::InvalidArgument(format!("gpuwire_group_start: groups nested {MAX_DEPTH} deep (a missing gpuwire_group_end?)")));
        }
        if g.depth == 0 {
            // A new flag unless no request of an earlier group holds the last one.
            if Arc::strong_count(&g.ended) == 1 {
                g.ended.store(false, Ordering::Relaxed);
            } else {
                g.ended = Arc::new(AtomicBool::new(false));
            }
            crate::backend::nccl::defer_direct(false);
        }
        g.depth += 1;
        set_open(true);
        Ok(())
    })
}

/// The entry of every exported operation: inside a group, `op` is validated and recorded
/// (started at the outermost end); outside, issued now (`op::issue`).
pub fn submit(c: &Arc<Communicator>, op: Op, stream: Stream, nonblocking: bool) -> Result<Option<Request>> {
    traced(c, op, nonblocking, None, |op| submit_now(c, op, stream, nonblocking, true))
}

/// `submit` of a blocking operation gpuwire built whose buffers are disjoint by construction
/// from the others it so built (a distributed array's faces and ghosts: strided views, whose
/// comparison would cost more than their exchange): compared only with the group's other
/// operations (the program's own, in a group the exchange joined).
pub(crate) fn submit_disjoint(c: &Arc<Communicator>, op: Op, stream: Stream) -> Result<()> {
    traced(c, op, false, None, |op| submit_now(c, op, stream, false, false)).map(|_| ())
}

/// A blocking call made of the nonblocking form of `op` and its wait (`gpuwire_recv_status`):
/// outside a group, with one `GPUWIRE_TRACE` line named `name` for the whole call. What the
/// completed request tells (`then`).
pub fn submit_and_wait<T>(c: &Arc<Communicator>, op: Op, stream: Stream, name: &str, then: impl FnOnce(&Request) -> T) -> Result<T> {
    traced(c, op, false, Some(name), |op| {
        let r = submit_now(c, op, stream, true, true)?.ok_or_else(|| Error::Internal(format!("{name}: a nonblocking operation gave no request")))?;
        r.wait()?;
        Ok(then(&r))
    })
}

/// `run(op)`, with its `GPUWIRE_TRACE` line when tracing (`name` in place of the operation's).
#[inline]
fn traced<T>(c: &Arc<Communicator>, op: Op, nonblocking: bool, name: Option<&str>, run: impl FnOnce(Op) -> Result<T>) -> Result<T> {
    if !crate::op::tracing() {
        return run(op);
    }
    let route = crate::op::route(c, &op, nonblocking, is_open());
    let t = std::time::Instant::now();
    let traced = op.clone();
    let r = run(op);
    crate::op::trace_line(c, &traced, name, &route, nonblocking, t.elapsed(), r.as_ref().map(|_| ()));
    r
}

#[inline]
fn submit_now(c: &Arc<Communicator>, op: Op, stream: Stream, nonblocking: bool, compare: bool) -> Result<Option<Request>> {
    if !is_open() {
        return crate::op::issue(c, op, stream, nonblocking);
    }
    c.ensure_usable()?;
    op.check_at_call(c)?;
    let touch = overlap::touch(&op, c.rank());
    // One reach of the thread's group for the comparison and the record; no borrow of it held
    // while the operation is issued or an error reported (`fail_collective` records one).
    GROUP.with(|g| {
        let overlap = {
            let g = g.borrow();
            g.memory.check(&g.entries, c, &op, &touch, !compare)
        };
        if let Err(e) = overlap {
            return Err(if op.is_p2p() { e } else { fail_collective(c, op.name(), e) });
        }
        let issued = direct(c, &op, stream)?;
        Ok(add(&mut g.borrow_mut(), c, op, stream, nonblocking, issued, touch, !compare))
    })
}

/// A point-to-point operation on NCCL is issued at its call into the NCCL group of this
/// thread's gpuwire group, as NCCL's own calls inside ncclGroupStart/End are
/// (`nccl::issue_direct`); the end only launches it, so a halo exchange costs NCCL's own
/// group. Not in checking mode, with views, or with GPUWIRE_P2P_MATCHING=mpi (`nccl_native`),
/// nor for a receive of up to its count: those are issued at the end. Whether it was issued.
fn direct(c: &Arc<Communicator>, op: &Op, stream: Stream) -> Result<bool> {
    use crate::ops::peer;
    use crate::types::PROC_NULL;
    let fits = matches!(op, Op::Send { .. } | Op::Isend { .. } | Op::Recv { .. } | Op::Sendrecv { .. } | Op::Irecv { upto: false, .. });
    if !fits || c.config().check || !op.nccl_native(c) || crate::view::has_views(op) || !crate::backend::nccl::direct_possible(c)? {
        return Ok(false);
    }
    // Every buffer is checked before anything is issued: a sendrecv whose receive is refused
    // must not leave its send in the NCCL group (launched at the end, its buffer no longer kept).
    for b in op.slots().into_iter().flatten() {
        crate::backend::nccl::check_direct(c, b)?;
    }
    c.engine().drain()?;
    let issue = |b: &crate::buffer::Buffer, r: i32, send: bool| if peer(r) == PROC_NULL { Ok(()) } else { crate::backend::nccl::issue_direct(c, b, r, send, stream) };
    match op {
        Op::Send { buf, dest, .. } | Op::Isend { buf, dest, .. } => issue(buf, *dest, true)?,
        Op::Recv { buf, source, .. } | Op::Irecv { buf, source, .. } => issue(buf, *source, false)?,
        Op::Sendrecv { send, dest, recv, source, .. } => {
            issue(send, *dest, true)?;
            issue(recv, *source, false)?;
        }
        _ => {}
    }
    Ok(true)
}

/// A collective whose arguments did not resolve on this rank (an invalid handle or enum value):
/// `Communicator::fail_collective`, except inside a group in checking mode, where the error is
/// returned at once and the agreement that tells the other ranks is made at the end, in the
/// group's call order: made at the call, it would meet another rank's earlier collective of
/// the group (which then fails instead, and the rest of the group runs one collective apart).
pub fn fail_collective(c: &Arc<Communicator>, what: &str, e: Error) -> Error {
    if !is_open() || !c.config().check {
        return c.fail_collective(what, e);
    }
    GROUP.with(|g| {
        let failed = Some(Box::new((what.to_string(), e.clone())));
        g.borrow_mut().entries.push(Entry { c: c.clone(), op: Op::Barrier, stream: Stream(0), done: None, matched: None, packed: None, issued: false, touch: [None; 2], made: false, failed });
    });
    e
}

/// Records `op` in this thread's open group; the request of a nonblocking form.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn add(g: &mut Open, c: &Arc<Communicator>, op: Op, stream: Stream, nonblocking: bool, issued: bool, touch: overlap::Touch, made: bool) -> Option<Request> {
    if !issued && op.is_p2p() {
        // Its later point-to-point operations are recorded too, in call order.
        crate::backend::nccl::defer_direct(true);
    }
    if !nonblocking {
        // No request: nothing else to make (a group's per-operation cost).
        g.entries.push(Entry { c: c.clone(), op, stream, done: None, matched: None, packed: None, issued, touch, made, failed: None });
        g.memory.added(&g.entries);
        return None;
    }
    let bufs = op.buffers();
    let done = Arc::new(Done::default());
    let ended = g.ended.clone();
    let matched = Arc::new(Mutex::new(None));
    let known = op.known_status();
    g.entries.push(Entry { c: c.clone(), op, stream, done: Some(done.clone()), matched: Some(matched.clone()), packed: None, issued, touch, made, failed: None });
    g.memory.added(&g.entries);
    Some(done).map(|d| {
        let r = Request::new(Box::new(Grouped { done: d, ended, matched }), c.clone(), bufs);
        match known {
            Some(st) => r.with_status(st),
            None => r,
        }
    })
}

/// gpuwire_group_end: at the outermost end, starts and completes the group's operations.
pub fn end() -> Result<()> {
    let entries = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(Error::InvalidArgument("gpuwire_group_end without a matching gpuwire_group_start".into()));
        }
        g.depth -= 1;
        set_open(g.depth > 0);
        if g.depth > 0 {
            return Ok(None);
        }
        g.ended.store(true, Ordering::Release);
        g.memory = overlap::Memory::default();
        Ok(Some(std::mem::take(&mut g.entries)))
    })?;
    let Some(mut entries) = entries else { return Ok(()) };
    if entries.is_empty() || !entries.iter().all(|e| e.issued) {
        // The next group records into an allocation of this one's size (`run` consumes it).
        let room = entries.capacity();
        GROUP.with(|g| {
            let mut g = g.borrow_mut();
            if g.entries.capacity() == 0 {
                g.entries = Vec::with_capacity(room);
            }
        });
        return run(entries);
    }
    // Only NCCL operations issued at their calls (`direct`): launch them (one communicator's,
    // as a halo exchange's, without collecting the communicators).
    let one = &*entries[0].c;
    let r = if entries.iter().all(|e| std::ptr::eq(&*e.c, one)) {
        crate::backend::nccl::with_group(&[one], || Ok(()))
    } else {
        let mut comms: Vec<&Communicator> = Vec::new();
        for e in &entries {
            if !comms.iter().any(|c| std::ptr::eq(*c, &*e.c)) {
                comms.push(&e.c);
            }
        }
        crate::backend::nccl::with_group(&comms, || Ok(()))
    };
    let r = if r.is_ok() && entries.iter().any(|e| e.c.is_broken()) {
        // A communicator broken while the group was open (`after_launch`): its operations'
        // error, the first of them the group's.
        let mut first = None;
        for e in &entries {
            let x = after_launch(e, &r);
            finish(e, &x);
            if let (Err(x), None) = (x, &first) {
                first = Some(x);
            }
        }
        first.map_or(Ok(()), Err)
    } else {
        for e in &entries {
            finish(e, &r);
        }
        r
    };
    // The next group records into the same allocation.
    entries.clear();
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.entries.capacity() == 0 {
            g.entries = entries;
        }
    });
    r
}

/// Runs a group's operations (module comment), each communicator's in call order.
fn run(entries: Vec<Entry>) -> Result<()> {
    let mut first: Option<Error> = None;
    let note = |r: &Result<()>, first: &mut Option<Error>| {
        if let (Err(e), None) = (r, &*first) {
            *first = Some(e.clone());
        }
    };
    // Earlier queued operations of these communicators come first: for the NCCL group's, now.
    // Where that work waits for an NCCL turn whose holder waits for one this group keeps
    // (`Engine::drain`), the communicator's operations of the group fail with that refusal
    // (its NCCL ones as taking its turn in the NCCL group would; none of them was issued at its
    // call: this thread would have its turn). The other communicators are drained after the
    // NCCL group has given its turns back (`drain_each`, below): those drains are never refused.
    let refused = drain_each(entries.iter().filter(|e| e.issued || is_nccl(e)));
    // Views of the operations started here (collectives off NCCL pack their own, in `run`).
    let entries: Vec<Entry> = entries
        .into_iter()
        .filter_map(|mut e| {
            if let Some((_, x)) = refused.iter().find(|(r, _)| std::ptr::eq(*r, &*e.c)) {
                let r = Err(x.clone());
                finish(&e, &r);
                note(&r, &mut first);
                return None;
            }
            if (e.op.is_p2p() || is_nccl(&e)) && crate::view::has_views(&e.op) {
                match crate::view::pack(&e.op, &e.c, e.stream) {
                    Ok(p) => {
                        e.op = p.op.clone();
                        e.packed = Some(Box::new(p));
                    }
                    Err(x) => {
                        let r = Err(x);
                        finish(&e, &r);
                        note(&r, &mut first);
                        return None;
                    }
                }
            }
            Some(e)
        })
        .collect();
    // NCCL device operations: one NCCL group (opened by the first operation issued at its call,
    // if any: `direct`).
    let (nccl, rest): (Vec<&Entry>, Vec<&Entry>) = entries.iter().partition(|e| e.issued || is_nccl(e));
    if !nccl.is_empty() || crate::backend::nccl::direct_open() {
        let mut comms: Vec<&Communicator> = Vec::new();
        for e in &nccl {
            if !comms.iter().any(|c| std::ptr::eq(*c, &*e.c)) {
                comms.push(&e.c);
            }
        }
        // Checking mode: the sends' and receives' agreements, made together before any runs.
        let agreed = agree_together(&nccl);
        let mut ran: Vec<Result<()>> = Vec::new();
        let launched = crate::backend::nccl::with_group(&comms, || {
            crate::backend::p2p::agreed_together(|| {
                for (e, a) in nccl.iter().zip(&agreed).filter(|(e, _)| !e.issued) {
                    ran.push(a.clone().and_then(|()| e.op.run(&e.c, e.stream)));
                }
            });
            Ok(())
        });
        // Each operation's outcome: its own error, else the launch's (an operation issued at its
        // call, or one that ran, is not failed by another operation of the group).
        let mut ran = ran.into_iter();
        let mut results = Vec::with_capacity(nccl.len());
        for e in &nccl {
            let own = if e.issued { None } else { ran.next() };
            let r = match own {
                Some(Err(x)) => Err(x),
                _ => after_launch(e, &launched),
            };
            finish(e, &r);
            note(&r, &mut first);
            results.push(r.is_ok());
        }
        // Unpacked on each stream after the NCCL group's launch (what failed moved nothing).
        for (e, _) in nccl.iter().zip(results).filter(|(_, ok)| *ok) {
            if let Some(p) = &e.packed {
                note(&p.unpack(e.stream), &mut first);
            }
        }
    }
    // The other operations' communicators, drained (this thread keeps no turns now).
    let refused = drain_each(rest.iter().copied());
    let rest: Vec<&Entry> = rest
        .into_iter()
        .filter(|e| match refused.iter().find(|(r, _)| std::ptr::eq(*r, &*e.c)) {
            Some((_, x)) => {
                let r = Err(x.clone());
                finish(e, &r);
                note(&r, &mut first);
                false
            }
            None => true,
        })
        .collect();
    // Stream-ordered batches (module comment): issued now, each as one operation.
    let (batched, rest): (Vec<&Entry>, Vec<&Entry>) = rest.into_iter().partition(|e| batchable(e, &entries));
    for es in by_comm(&batched) {
        let c = &es[0].c;
        let (r, failed) = issue_batch(c, &es);
        note(&r, &mut first);
        // The entries that did not fail are unpacked also where another failed (their data is
        // in their scratch: a review found the views' messages lost).
        for (e, failed) in es.iter().zip(failed) {
            if let (false, Some(p)) = (failed, &e.packed) {
                note(&p.unpack(e.stream), &mut first);
            }
        }
    }
    // Stream-ordered IPC batches (module comment): each communicator's part at once.
    let (ipc, rest): (Vec<&Entry>, Vec<&Entry>) = rest.into_iter().partition(|e| ipc_batchable(e, &entries));
    for es in by_comm(&ipc) {
        let c = &es[0].c;
        let (mut sends, mut recvs) = (Vec::new(), Vec::new());
        // Each entry's send and receive (their indices in `sends` and `recvs`).
        let mut at: Vec<(Option<usize>, Option<usize>)> = Vec::new();
        for e in &es {
            let (s, r) = (sends.len(), recvs.len());
            match &e.op {
                Op::Send { buf, dest, tag } => sends.push((&**buf, *dest, *tag)),
                Op::Recv { buf, source, tag } => recvs.push((&**buf, *source, *tag)),
                Op::Sendrecv { send, dest, sendtag, recv, source, recvtag } => {
                    sends.push((&**send, *dest, *sendtag));
                    recvs.push((&**recv, *source, *recvtag));
                }
                _ => {}
            }
            at.push(((sends.len() > s).then_some(s), (recvs.len() > r).then_some(r)));
        }
        let (r, sfailed, rfailed) = crate::backend::ipc::group_p2p(c, &sends, &recvs, es[0].stream);
        note(&r, &mut first);
        // The entries that did not fail are unpacked also where another failed (their data is
        // in their scratch: a strided receive's data was lost when another receive of the batch
        // refused its message, a helper's bug hunt), as for the MPI_STAGED batches above.
        for (e, (s, rv)) in es.iter().zip(at) {
            let failed = s.is_some_and(|i| sfailed[i]) || rv.is_some_and(|i| rfailed[i]);
            if let (false, Some(p)) = (failed, &e.packed) {
                note(&p.unpack(e.stream), &mut first);
            }
        }
    }
    // Point-to-point: receives, then sends, started now. Each operation's parts (a sendrecv has
    // two) and the first error starting one.
    let p2p: Vec<&Entry> = rest.iter().copied().filter(|e| e.op.is_p2p()).collect();
    let mut parts: Vec<(Vec<Request>, Option<Error>)> = p2p.iter().map(|_| (Vec::new(), None)).collect();
    for pass in [true, false] {
        for (e, (reqs, failed)) in p2p.iter().zip(parts.iter_mut()) {
            let Some(r) = start_part(&e.c, &e.op, e.stream, pass) else { continue };
            match r {
                Ok(q) => reqs.push(q),
                Err(x) => {
                    failed.get_or_insert(x);
                }
            }
        }
    }
    // Collectives, in call order.
    for e in rest.iter().filter(|e| !e.op.is_p2p()) {
        let r = match e.failed.as_deref() {
            Some((what, x)) => Err(e.c.fail_collective(what, x.clone())),
            None => e.op.run(&e.c, e.stream),
        };
        finish(e, &r);
        note(&r, &mut first);
    }
    // Complete what was started (every part, also of an operation whose other part failed); an
    // operation's result is its first failing part.
    for (e, (reqs, failed)) in p2p.iter().zip(parts) {
        let mut r = failed.map_or(Ok(()), Err);
        for (i, q) in reqs.into_iter().enumerate() {
            let w = q.wait();
            if i == 0 && matches!(e.op, Op::Irecv { .. }) {
                if let Some(m) = &e.matched {
                    *m.lock().unwrap_or_else(|p| p.into_inner()) = Some(q.status());
                }
            }
            if r.is_ok() {
                r = w;
            }
        }
        if let (Ok(()), Some(p)) = (&r, &e.packed) {
            r = p.unpack(e.stream).and_then(|()| p.sync_device(e.stream));
        }
        finish(e, &r);
        note(&r, &mut first);
    }
    first.map_or(Ok(()), Err)
}

/// `es` split by communicator, in the order of each communicator's first entry.
fn by_comm<'a>(es: &[&'a Entry]) -> Vec<Vec<&'a Entry>> {
    let mut out: Vec<Vec<&Entry>> = Vec::new();
    for e in es {
        match out.iter_mut().find(|g| Arc::ptr_eq(&g[0].c, &e.c)) {
            Some(g) => g.push(e),
            None => out.push(vec![e]),
        }
    }
    out
}

/// Starts `op`'s receive (`receives`) or its send, if it has one, as a nonblocking operation.
fn start_part(c: &Arc<Communicator>, op: &Op, stream: Stream, receives: bool) -> Option<Result<Request>> {
    Some(match (op, receives) {
        (Op::Recv { buf, source, tag }, true) => c.irecv(buf.clone(), *source, *tag, false, stream),
        (Op::Irecv { buf, source, tag, upto }, true) => c.irecv(buf.clone(), *source, *tag, *upto, stream),
        (Op::Sendrecv { recv, source, recvtag, .. }, true) => c.irecv(recv.clone(), *source, *recvtag, false, stream),
        (Op::Send { buf, dest, tag } | Op::Isend { buf, dest, tag }, false) => c.isend(buf.clone(), *dest, *tag, stream),
        (Op::Sendrecv { send, dest, sendtag, .. }, false) => c.isend(send.clone(), *dest, *sendtag, stream),
        _ => return None,
    })
}

/// Whether `e` joins its communicator's stream-ordered batch (module comment): every entry of
/// that communicator is a blocking point-to-point form on device memory of a stream-ordered MPI
/// path, on `e`'s stream, its views (if any) unpacked on the device.
fn batchable(e: &Entry, all: &[Entry]) -> bool {
    let fits = |x: &Entry| {
        x.op.is_p2p()
            && x.done.is_none()
            && x.stream == e.stream
            && x.c.device() >= 0
            && x.c.backend() == crate::types::BackendKind::GPUWIRE_BACKEND_MPI_STAGED
            && x.op.on_device(&x.c)
            && x.packed.as_ref().is_none_or(|p| !p.unpacks_on_host())
    };
    all.iter().filter(|x| Arc::ptr_eq(&x.c, &e.c)).all(fits)
}

/// Whether `e` joins its communicator's stream-ordered IPC batch (module comment): every entry
/// of that communicator is a blocking send, receive or sendrecv on `e`'s stream, on an IPC
/// communicator whose point-to-point is stream-ordered, its views (if any) unpacked on the
/// device; and no other IPC communicator's point-to-point operation of the group is on that
/// stream. (Two batches on one stream put one communicator's sends' waits before the other's
/// receive copies: a rank sending on X and receiving on Y, its peer the mirror, each waited on
/// its stream for a copy queued behind the other's wait. Such a group takes the path of
/// nonblocking operations started together, whose end waits for the data.)
fn ipc_batchable(e: &Entry, all: &[Entry]) -> bool {
    let ipc = crate::types::BackendKind::GPUWIRE_BACKEND_IPC;
    if all.iter().any(|x| x.stream == e.stream && x.op.is_p2p() && x.c.backend() == ipc && !Arc::ptr_eq(&x.c, &e.c)) {
        return false;
    }
    let fits = |x: &Entry| {
        matches!(x.op, Op::Send { .. } | Op::Recv { .. } | Op::Sendrecv { .. })
            && x.done.is_none()
            && x.stream == e.stream
            && x.c.device() >= 0
            && x.op.on_device(&x.c)
            && x.packed.as_ref().is_none_or(|p| !p.unpacks_on_host())
    };
    e.c.backend() == crate::types::BackendKind::GPUWIRE_BACKEND_IPC && crate::backend::ipc::p2p_stream_ordered(&e.c) && all.iter().filter(|x| Arc::ptr_eq(&x.c, &e.c)).all(fits)
}

/// Issues a communicator's batch: one stream-ordered operation whose host side starts the
/// receives, then the sends, on the staging, and completes them all. Its outcome, and for each
/// entry whether it failed (all of them where the batch failed before its host side ran).
fn issue_batch(c: &Arc<Communicator>, es: &[&Entry]) -> (Result<()>, Vec<bool>) {
    use crate::backend::ordered::{self, HostSide};
    let ops: Vec<Op> = es.iter().map(|e| e.op.clone()).collect();
    let (mut parts, mut counts) = (Vec::new(), Vec::new());
    for op in &ops {
        let p = op.parts(c);
        counts.push(p.len());
        parts.extend(p);
    }
    let (c2, entry_counts) = (c.clone(), counts.clone());
    // A failed operation's parts are named, so that the others' results are still delivered
    // where the host side runs on this thread (a refused receive lost the group's other
    // receives there: a helper's bug hunt, 2026-12-06); `ordered::issue` returns them.
    let side = HostSide::Parts(Box::new(move |subs| {
        let mut k = 0;
        let ops: Vec<(Op, std::ops::Range<usize>)> = ops
            .iter()
            .zip(&counts)
            .map(|(op, n)| {
                let o = (op.rebind(&subs[k..k + n]), k..k + n);
                k += n;
                o
            })
            .collect();
        let (mut reqs, mut first, mut failed) = (Vec::new(), None, Vec::new());
        let mut fail = |x: Error, parts: &std::ops::Range<usize>, failed: &mut Vec<usize>| {
            first.get_or_insert(x);
            failed.extend(parts.clone());
        };
        for pass in [true, false] {
            for (op, parts) in &ops {
                match start_part(&c2, op, Stream(0), pass) {
                    Some(Ok(q)) => reqs.push((q, parts)),
                    Some(Err(x)) => fail(x, parts, &mut failed),
                    None => {}
                }
            }
        }
        for (q, parts) in reqs {
            if let Err(x) = q.wait() {
                fail(x, parts, &mut failed);
            }
        }
        match first {
            None => Ok(()),
            Some(x) => Err((x, failed)),
        }
    }));
    let r = ordered::issue(c, es[0].stream, parts, false, side).map(|_| ());
    let failed = match &r {
        Ok(()) => vec![false; es.len()],
        Err(ordered::Failed { parts: None, .. }) => vec![true; es.len()],
        Err(ordered::Failed { parts: Some(parts), .. }) => {
            let mut k = 0;
            entry_counts
                .into_iter()
                .map(|n| {
                    let hit = (k..k + n).any(|i| parts.contains(&i));
                    k += n;
                    hit
                })
                .collect()
        }
    };
    (r.map_err(Error::from), failed)
}


/// Checking mode on NCCL (`p2p::agree_peer`): the agreements of the NCCL entries' sends,
/// receives and sendrecvs, blocking and nonblocking alike (as the peer's forms, in a group or
/// not, each take part: `p2p::agree_later`), every communicator's posted before any is waited
/// for, in call order; a mismatched operation is not run. One at a time, a send's
/// would wait for its receiver's, which the peer's group may issue only after its own send.
/// Each entry's outcome (Ok for those not agreed).
fn agree_together(nccl: &[&Entry]) -> Vec<Result<()>> {
    use crate::backend::p2p::{Agreement, Side};
    use crate::ops::peer;
    use crate::types::PROC_NULL;
    let sides = |op: &Op| -> Vec<Side> {
        let side = |send: bool, b: &crate::buffer::Buffer, r: i32| (peer(r) != PROC_NULL).then(|| (send, r, b.dtype(), b.count()));
        match op {
            Op::Send { buf, dest, .. } | Op::Isend { buf, dest, .. } => side(true, buf, *dest).into_iter().collect(),
            Op::Recv { buf, source, .. } | Op::Irecv { buf, source, .. } => side(false, buf, *source).into_iter().collect(),
            Op::Sendrecv { send, dest, recv, source, .. } => [side(true, send, *dest), side(false, recv, *source)].into_iter().flatten().collect(),
            _ => Vec::new(),
        }
    };
    let mut out: Vec<Result<()>> = nccl.iter().map(|_| Ok(())).collect();
    if !nccl.iter().any(|e| e.c.config().check) {
        return out;
    }
    // Per communicator: its entries' indices and the number of sides of each.
    let mut posted: Vec<(Vec<(usize, usize)>, Result<Agreement>)> = Vec::new();
    for es in by_comm(nccl) {
        let c = &es[0].c;
        let mut of = Vec::new();
        let mut all = Vec::new();
        for e in es.iter().filter(|e| !e.issued) {
            let i = nccl.iter().position(|x| std::ptr::eq(*x, *e)).unwrap_or(0);
            let s = sides(&e.op);
            of.push((i, s.len()));
            all.extend(s);
        }
        if c.config().check && !all.is_empty() {
            // The communicator's isend/irecv posted before the group are launched first (as a
            // blocking send's agreement does: `nccl::launch_posted`): the peer may answer this
            // group's agreements only once one of them completed (a review found the hang).
            let posted_first = crate::backend::nccl::launch_posted(c);
            posted.push((of, posted_first.and_then(|()| Agreement::post(c, all))));
        }
    }
    for (of, a) in posted {
        let c = &nccl[of[0].0].c;
        match a.and_then(|a| a.finish(c)) {
            Ok(each) => {
                for ((i, _), r) in of.iter().zip(per_entry(each, of.iter().map(|(_, n)| *n))) {
                    out[*i] = r;
                }
            }
            Err(x) => {
                for (i, _) in of {
                    out[i] = Err(x.clone());
                }
            }
        }
    }
    out
}

/// The outcomes of entries of `sides` sides each, from the outcomes of all their sides in order:
/// an entry's is its first failing side's. (Collecting each entry's sides straight into a
/// `Result` stopped at the first error, and the next entry took the rest: a review found it.)
fn per_entry(each: Vec<Result<()>>, sides: impl Iterator<Item = usize>) -> Vec<Result<()>> {
    let mut each = each.into_iter();
    sides
        .map(|n| {
            let mine: Vec<Result<()>> = each.by_ref().take(n).collect();
            mine.into_iter().collect()
        })
        .collect()
}

/// Whether an entry goes to NCCL: device buffers only, on an NCCL communicator.
fn is_nccl(e: &Entry) -> bool {
    !matches!(e.op, Op::Barrier) && e.op.nccl_native(&e.c)
}

/// An NCCL operation's outcome after its group's launch (`launched`): its communicator broken
/// meanwhile (aborted while the group was open: `gpuwire_comm_abort` waits for the launch) is
/// its error, not the other communicators' operations'.
fn after_launch(e: &Entry, launched: &Result<()>) -> Result<()> {
    launched.clone()?;
    e.c.ensure_usable().map_err(|x| {
        Error::from_status(x.status(), format!("the operation was launched, then its communicator was broken (aborted or timed out while the group was open), and may not have completed: {x}"))
    })
}

/// Drains the engine of each entry's communicator (once each): the communicators whose drain
/// was refused (`Engine::drain`), with the refusal.
fn drain_each<'a>(entries: impl Iterator<Item = &'a Entry>) -> Vec<(*const Communicator, Error)> {
    let mut drained: Vec<*const Communicator> = Vec::new();
    let mut refused = Vec::new();
    for e in entries {
        let c: *const Communicator = &*e.c;
        if !drained.contains(&c) {
            drained.push(c);
            if let Err(x) = e.c.engine().drain() {
                refused.push((c, x));
            }
        }
    }
    refused
}

/// Completes an entry's request (nonblocking forms) with its result.
fn finish(e: &Entry, r: &Result<()>) {
    if let Some(d) = &e.done {
        if d.peek().is_none() {
            d.set(r.clone());
        }
    }
}

/// The request of a nonblocking operation issued inside a group.
struct Grouped {
    done: Arc<Done>,
    ended: Arc<AtomicBool>,
    matched: Arc<Mutex<Option<Status>>>,
}

impl Grouped {
    fn not_started(&self) -> Result<()> {
        if self.ended.load(Ordering::Acquire) {
            return Ok(());
        }
        Err(Error::InvalidArgument(
            "the request belongs to a group that has not ended: its operation starts at the outermost gpuwire_group_end (waiting for it inside the group would never return)".into(),
        ))
    }
}

impl Pending for Grouped {
    fn status(&self) -> Option<Status> {
        *self.matched.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn ready_to_wait(&self) -> Result<()> {
        self.not_started()
    }
    fn wait(&mut self) -> Result<()> {
        self.not_started()?;
        self.done.wait_until(None).unwrap_or(Ok(()))
    }
    fn test(&mut self) -> Result<bool> {
        self.not_started()?;
        match self.done.peek() {
            None => Ok(false),
            Some(r) => r.map(|()| true),
        }
    }
    fn test_settled(&mut self, until: std::time::Instant) -> Result<bool> {
        self.not_started()?;
        self.done.wait_until(Some(until));
        self.test()
    }
}

#[cfg(test)]
mod tests {
    use super::per_entry;
    use crate::error::Error;

    /// A sendrecv whose send failed and receive passed, then a send that passed: the send keeps
    /// its own outcome (it took the sendrecv's receive's).
    #[test]
    fn each_entry_gets_its_own_sides() {
        let bad = || Err(Error::CountMismatch("send".into()));
        let got = per_entry(vec![bad(), Ok(()), bad(), Ok(())], [2, 1, 1].into_iter());
        assert!(got[0].is_err() && got[1].is_err() && got[2].is_ok(), "{got:?}");
        let got = per_entry(vec![Ok(()), bad(), Ok(())], [2, 1].into_iter());
        assert!(got[0].is_err() && got[1].is_ok(), "{got:?}");
    }
}
