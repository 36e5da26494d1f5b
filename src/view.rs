//! Strided and subarray views in operations: packed once, in the core, for every backend.
//!
//! An operation ([`crate::op::Op`]) whose buffers include a non-contiguous view ([`Shape`]) runs
//! on contiguous scratch buffers of the same memory kind instead: [`pack`] copies each view this
//! rank sends from into its scratch before the operation, [`Packed::unpack`] copies each scratch
//! this rank receives into back into its view after it. Device views are packed by one GPU kernel
//! per view on the operation's stream (`device::kernels::pack`), host memory by a plain loop.
//! Scratch comes from a process-wide cache (by memory space, device, stream and a power-of-two
//! size class), so repeated calls of the same size allocate nothing; it goes back to the cache
//! only when nothing else (a request MPI may still write through) holds it.
//!
//! The descriptor owns the scratch until the operation completes: the blocking form until it
//! returns, a nonblocking one until its request completes (`Unpacking`), a group's until the
//! group's end.

use std::sync::{Arc, Mutex};

use crate::buffer::{Buffer, Role, Shape};
use crate::comm::Communicator;
use crate::device::{self, CtxGuard, Stream};
use crate::error::{Error, Result};
use crate::request::{Pending, Request};
use crate::types::{Dtype, Space};

/// Cached scratch allocations kept at most (the oldest is freed beyond).
const CACHE_ENTRIES: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key {
    space: Space,
    device: i32,
    stream: usize,
    class: usize,
}

static CACHE: Mutex<Vec<(Key, Arc<Buffer>)>> = Mutex::new(Vec::new());

/// Contiguous scratch memory for one view, returned to the cache when dropped and unshared.
pub(crate) struct Scratch {
    key: Key,
    root: Option<Arc<Buffer>>,
    /// The view's count of its datatype over `root`.
    buf: Option<Arc<Buffer>>,
}

impl Scratch {
    /// Scratch for the elements of `view`: host memory for host-accessible views, else the
    /// view's own space on its device, ordered on `stream` (also HIER's scratch: `backend::hier`).
    pub(crate) fn for_view(view: &Buffer, stream: Stream) -> Result<Scratch> {
        let host = view.is_host();
        let space = if host { Space::GPUWIRE_SPACE_HOST } else { view.space() };
        let bytes = view.bytes();
        let class = bytes.max(256).checked_next_power_of_two().unwrap_or(bytes);
        let key = Key { space, device: if host { -1 } else { view.device() }, stream: if host { 0 } else { stream.0 }, class };
        let cached = {
            let mut c = CACHE.lock().unwrap_or_else(|p| p.into_inner());
            c.iter().position(|(k, _)| *k == key).map(|i| c.remove(i).1)
        };
        let root = match cached {
            Some(r) => r,
            None => Arc::new(Buffer::alloc(class as i64, Dtype::GPUWIRE_UINT8, space, key.device.max(0))?),
        };
        let buf = Arc::new(Buffer::over(&root, view.count(), view.dtype()));
        Ok(Scratch { key, root: Some(root), buf: Some(buf) })
    }

    pub fn buf(&self) -> &Arc<Buffer> {
        self.buf.as_ref().expect("scratch buffer present until dropped")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        drop(self.buf.take());
        let Some(root) = self.root.take() else { return };
        // Shared still (a request MPI may still write through was abandoned): never reused.
        if Arc::strong_count(&root) != 1 {
            return;
        }
        let mut c = CACHE.lock().unwrap_or_else(|p| p.into_inner());
        if c.len() >= CACHE_ENTRIES {
            // Freeing device memory waits for the device (cuMemFree), so for the streams that
            // may still use it.
            c.remove(0);
        }
        c.push((self.key, root));
    }
}

/// How many scratch allocations the cache holds (tests).
pub fn cached() -> usize {
    CACHE.lock().unwrap_or_else(|p| p.into_inner()).len()
}

/// An operation moved onto contiguous scratch: run `op`, then [`Packed::unpack`].
pub(crate) struct Packed<O> {
    pub op: O,
    /// Views this rank receives into, with their scratch; scratch of views only sent from.
    unpack: Vec<(Arc<Buffer>, Scratch)>,
    keep: Vec<Scratch>,
    /// A view this rank receives into that may not be received into, where another rank sends
    /// from the slot ([`Slotted::received_somewhere`]): the operation runs (the message is
    /// received into scratch and dropped, the view not written), then [`Packed::unpack`] fails.
    refused: Option<Error>,
}

impl<O> Packed<O> {
    /// Whether anything was packed (the operation's buffers were not all contiguous).
    pub fn any(&self) -> bool {
        !self.unpack.is_empty() || !self.keep.is_empty()
    }

    /// Whether any unpack writes host memory (a loop on this thread).
    pub fn unpacks_on_host(&self) -> bool {
        self.unpack.iter().any(|(v, _)| v.is_host())
    }

    /// Whether any unpack writes device memory (a blocking MPI path then waits for it).
    pub fn unpacks_on_device(&self) -> bool {
        self.unpack.iter().any(|(v, _)| !v.is_host())
    }


    /// Waits for `stream` when an unpack wrote device memory (the MPI paths return when the data
    /// is in place).
    pub fn sync_device(&self, stream: Stream) -> Result<()> {
        if let Some((v, _)) = self.unpack.iter().find(|(v, _)| !v.is_host()) {
            let _g = CtxGuard::enter(v.device())?;
            device::sync(stream)?;
        }
        Ok(())
    }

    /// Copies each received scratch into its view (device views: one kernel each on `stream`);
    /// then the refusal of a view that could not be received into, if any.
    pub fn unpack(&self, stream: Stream) -> Result<()> {
        for (view, s) in &self.unpack {
            unpack_one(view, s.buf(), stream)?;
        }
        self.refused.clone().map_or(Ok(()), Err)
    }
}

fn pack_one(view: &Buffer, scratch: &Buffer, stream: Stream) -> Result<()> {
    if view.is_host() {
        // SAFETY: the scratch holds the view's bytes.
        unsafe { view.pack_host(scratch.ptr()) };
        return Ok(());
    }
    let _g = CtxGuard::enter(view.device())?;
    device::kernels::pack(view.pack_view(), scratch.ptr(), false, stream)
}

fn unpack_one(view: &Buffer, scratch: &Buffer, stream: Stream) -> Result<()> {
    if view.is_host() {
        // SAFETY: as in pack_one.
        unsafe { view.unpack_host(scratch.ptr()) };
        return Ok(());
    }
    let _g = CtxGuard::enter(view.device())?;
    device::kernels::pack(view.pack_view(), scratch.ptr(), true, stream)
}

/// What this module needs of an operation (`crate::op::Op` implements it): its name, its two
/// buffer slots with this rank's role in each (send side first), and itself on other buffers.
pub(crate) trait Slotted: Clone {
    fn what(&self) -> &'static str;
    /// The two buffer slots, whatever this rank's role in them.
    fn slots(&self) -> [Option<&Arc<Buffer>>; 2];
    fn roles(&self, rank: i32) -> [(Option<&Arc<Buffer>>, Role); 2];
    /// The slots that some rank sends from and the others receive into: bcast's buffer (read at
    /// the root, written elsewhere). A receiving rank's view there that may not be received into
    /// is refused after the operation, not before it ([`pack`]): the root, which may send from
    /// any view, sends, and a receiver that refused before it left the root's message to its next
    /// bcast (old data as success; a helper's bug hunt, 2026-12-06).
    fn received_somewhere(&self) -> [bool; 2];
    /// The operation with its two buffer slots replaced (`None` keeps a slot).
    fn replace(&self, a: Option<Arc<Buffer>>, b: Option<Arc<Buffer>>) -> Self;
}

/// Whether `op` has a non-contiguous view among its buffers (cheap: no allocation).
pub(crate) fn has_views<O: Slotted>(op: &O) -> bool {
    op.slots().into_iter().flatten().any(|b| b.shape().is_some())
}

fn same_view(a: &Buffer, b: &Buffer) -> bool {
    a.ptr() == b.ptr() && a.count() == b.count() && a.dtype() == b.dtype() && a.shape() == b.shape()
}

/// The validation of an operation's views that the contiguous operation cannot do (it sees only
/// scratch): a view received into must not have overlapping elements; a view and the other
/// buffer must not share memory unless they are the same view (in-place).
pub(crate) fn check<O: Slotted>(op: &O, rank: i32) -> Result<()> {
    let what = op.what();
    let [(a, ra), (b, rb)] = op.roles(rank);
    for ((buf, role), somewhere) in [(a, ra), (b, rb)].into_iter().zip(op.received_somewhere()) {
        // (A slot that another rank sends from is refused after the operation: `pack`.)
        if let (Some(v), Role::Out | Role::InOut, false) = (buf, role, somewhere) {
            if v.shape().is_some_and(|s: &Shape| s.self_overlapping) {
                return Err(Error::InvalidArgument(format!("{what}: the receive buffer {}; nothing was sent", Shape::MAY_COINCIDE)));
            }
        }
    }
    if let (Some(x), Some(y)) = (a, b) {
        let significant = ra != Role::Unused && rb != Role::Unused;
        if significant && (x.shape().is_some() || y.shape().is_some()) && !same_view(x, y) && x.overlaps(y) {
            return Err(Error::InvalidArgument(format!(
                "{what}: the send and receive buffers share memory and one of them is a strided or subarray view; in-place with a view needs the same view as send and receive buffer (else pass disjoint buffers); nothing was sent"
            )));
        }
    }
    Ok(())
}

/// Packs `op`'s views for this rank (after [`check`]): the operation on scratch, with what to
/// unpack after it. An operation without views is returned as it is.
pub(crate) fn pack<O: Slotted>(op: &O, c: &Communicator, stream: Stream) -> Result<Packed<O>> {
    let rank = c.rank();
    check(op, rank)?;
    let [(a, ra), (b, rb)] = op.roles(rank);
    let mut out = Packed { op: op.clone(), unpack: Vec::new(), keep: Vec::new(), refused: None };
    let somewhere = op.received_somewhere();
    let in_place = ra != Role::Unused && rb != Role::Unused && matches!((a, b), (Some(x), Some(y)) if x.shape().is_some() && same_view(x, y));
    let mut subs: [Option<Arc<Buffer>>; 2] = [None, None];
    for (i, (buf, role)) in [(a, ra), (b, rb)].into_iter().enumerate() {
        let Some(v) = buf.filter(|v| v.shape().is_some()) else { continue };
        if role == Role::Unused {
            continue;
        }
        if in_place && i == 1 {
            subs[1] = subs[0].clone(); // the send side's scratch, packed and unpacked
            continue;
        }
        // float64_int32's 4 padding bytes: a reduction (MPI_DOUBLE_INT) writes the other 12 of
        // each element, so the scratch starts as the view's own elements, and unpacking it back
        // leaves the padding as it was (it unpacked a cached scratch's bytes of an earlier
        // operation there).
        let padded = v.dtype() == crate::types::Dtype::GPUWIRE_FLOAT64_INT32;
        let role = if in_place || (padded && role == Role::Out) { Role::InOut } else { role };
        let s = Scratch::for_view(v, stream)?;
        if matches!(role, Role::In | Role::InOut) {
            pack_one(v, s.buf(), stream)?;
        }
        subs[i] = Some(s.buf().clone());
        if somewhere[i] && matches!(role, Role::Out | Role::InOut) && v.shape().is_some_and(|s| s.self_overlapping) {
            out.refused = Some(Error::InvalidArgument(format!(
                "{}: the receive buffer {}; the message was received (every rank takes part in the operation) and dropped, the buffer not written",
                op.what(),
                Shape::MAY_COINCIDE
            )));
            out.keep.push(s);
        } else if matches!(role, Role::Out | Role::InOut) {
            out.unpack.push((v.clone(), s));
        } else {
            out.keep.push(s);
        }
    }
    if out.any() {
        let [x, y] = subs;
        out.op = op.replace(x, y);
    }
    Ok(out)
}

/// The stream that unpacks completed nonblocking operations' views on `device` (one per device
/// for the process; non-blocking: never waits for the legacy stream).
fn private_stream(device: i32) -> Result<Stream> {
    static STREAMS: Mutex<Vec<(i32, usize)>> = Mutex::new(Vec::new());
    let mut g = STREAMS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, s)) = g.iter().find(|(d, _)| *d == device) {
        return Ok(Stream(*s));
    }
    let s = device::private_stream(device)?;
    g.push((device, s.0));
    Ok(s)
}

/// The request of a nonblocking operation started on scratch: when the inner
/// request completes, the scratch is unpacked into the view (point-to-point operations started
/// now, stream-ordered operations of the MPI paths).
pub(crate) struct Unpacking<O> {
    pub inner: Option<Request>,
    pub packed: Option<Packed<O>>,
    pub stream: Stream,
    /// The inner request's status, kept when it is dropped (a receive's source, tag, count:
    /// the packed scratch holds as many elements as the view).
    pub matched: Option<crate::request::Status>,
}

impl<O> Unpacking<O> {
    fn finish(&mut self) -> Result<()> {
        // The completed inner request first: its hold on the scratch ends, which can then be
        // reused. What its receive matched is kept (`status`).
        if let Some(r) = self.inner.take() {
            self.matched = Some(r.status());
        }
        if let Some(p) = self.packed.take() {
            // Device views on a stream of gpuwire's (the caller's may hold later work), waited for.
            let s = match p.unpack.iter().find(|(v, _)| !v.is_host()) {
                Some((v, _)) => private_stream(v.device())?,
                None => self.stream,
            };
            p.unpack(s)?;
            p.sync_device(s)?;
        }
        Ok(())
    }
}

impl<O: Send> Pending for Unpacking<O> {
    fn status(&self) -> Option<crate::request::Status> {
        self.matched.or_else(|| self.inner.as_ref().map(|r| r.status()))
    }
    fn wait(&mut self) -> Result<()> {
        if let Some(r) = &self.inner {
            r.wait()?;
        }
        self.finish()
    }
    fn test(&mut self) -> Result<bool> {
        if let Some(r) = &self.inner {
            if !r.test()? {
                return Ok(false);
            }
        }
        self.finish().map(|()| true)
    }
    /// The inner receive withdrawn: the views are not unpacked (nothing was received).
    fn cancel(&mut self) -> bool {
        let done = self.inner.as_ref().is_some_and(|r| r.cancel().unwrap_or(false));
        if done {
            self.packed = None;
        }
        done
    }
    fn abandon(mut self: Box<Self>) -> bool {
        // The inner operation is given up with it (a receive withdrawn or cancelled where its
        // path can: it then takes no later message). Otherwise it may still read or write the
        // scratch, which the inner request then keeps for ever; the views are not unpacked.
        let done = self.inner.take().is_none_or(|r| r.abandon());
        if !done {
            std::mem::forget(self.packed.take());
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Repeated same-size calls reuse one allocation; a scratch still shared is never reused.
    #[test]
    fn scratch_is_reused_and_never_while_shared() {
        let parent = Arc::new(Buffer::alloc(64, Dtype::GPUWIRE_FLOAT64, Space::GPUWIRE_SPACE_HOST, -1).unwrap());
        let view = Buffer::view_strided(&parent, 1, 8, 2, 7).unwrap();
        let first = Scratch::for_view(&view, Stream(0)).unwrap();
        let p = first.buf().ptr();
        drop(first);
        let again = Scratch::for_view(&view, Stream(0)).unwrap();
        assert_eq!(again.buf().ptr(), p, "the same size class reuses the cached scratch");
        let held = again.buf().clone(); // as a request abandoned to MPI holds it
        drop(again);
        let other = Scratch::for_view(&view, Stream(0)).unwrap();
        assert_ne!(other.buf().ptr(), p, "a scratch still held is not handed out again");
        drop(held);
    }

    /// Host pack and unpack of a subarray, against the index arithmetic.
    #[test]
    fn subarray_pack_round_trip() {
        let parent = Arc::new(Buffer::alloc(60, Dtype::GPUWIRE_INT32, Space::GPUWIRE_SPACE_HOST, -1).unwrap());
        // SAFETY: 60 int32 of host memory.
        let a = unsafe { std::slice::from_raw_parts_mut(parent.ptr() as *mut i32, 60) };
        for (k, x) in a.iter_mut().enumerate() {
            *x = k as i32;
        }
        let v = Buffer::view_subarray(&parent, &[3, 4, 5], &[2, 2, 3], &[1, 1, 2], crate::buffer::Order::C).unwrap();
        assert_eq!(v.count(), 12);
        let mut out = vec![0i32; 12];
        // SAFETY: out holds the view's 12 elements.
        unsafe { v.pack_host(out.as_mut_ptr() as usize) };
        let want: Vec<i32> = (1..3).flat_map(|i| (1..3).flat_map(move |j| (2..5).map(move |k| i * 20 + j * 5 + k))).collect();
        assert_eq!(out, want);
        let back: Vec<i32> = (0..12).map(|x| -x).collect();
        // SAFETY: as above.
        unsafe { v.unpack_host(back.as_ptr() as usize) };
        assert_eq!(a[20 + 5 + 2], 0);
        assert_eq!(a[2 * 20 + 2 * 5 + 4], -11);
        assert_eq!(a[0], 0);
        assert_eq!(a[59], 59);
    }
}
