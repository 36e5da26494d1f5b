//! The process's mappings of its peers' buffers (importing), shared by every IPC communicator:
//! opened once per (exporter process, importing device) and buffer id, at most
//! `shm::MAPPINGS_PER_PEER` per peer process, closed under one lock (`MAPS`) that every use holds.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use cudarc::driver::sys as cu;

use super::shm::{self, lock, BufRecord, Lru, REC_HANDLE, REC_NONE};
use crate::device::{self, CtxGuard};
use crate::error::{Error, Result};

/// An open mapping of a peer's allocation.
#[derive(Clone, Copy, Debug)]
struct Mapping {
    ptr: u64,
    /// The exporter's allocation range [base, base + size) in its own address space.
    base: u64,
    size: u64,
}

/// The process's mappings of its peers' allocations, shared by every IPC communicator: one
/// cache per (exporter process, importing device), by buffer id. One lock covers every use: a
/// call holds it from the lookup until the device work that reads or writes through the
/// mappings is complete (its stream synchronised) or, stream-ordered, enqueued with an event
/// after it ([`Maps::in_flight`]); mappings are only closed under it, after those events, so
/// none is closed while in use.
pub(super) struct Maps {
    lrus: BTreeMap<(u64, i32), Lru<u64, Mapping>>,
    /// Live IPC communicators of this process; the last one's free closes every mapping.
    pub(super) states: usize,
    /// Events recorded after stream-ordered device work through mappings (`coll.rs`), which
    /// returns before that work is done: no mapping is closed before every one has passed
    /// ([`Maps::quiesce`]).
    pending: Vec<std::sync::Arc<device::Event>>,
}

pub(super) static MAPS: Mutex<Maps> = Mutex::new(Maps { lrus: BTreeMap::new(), states: 0, pending: Vec::new() });

impl Maps {
    /// Notes device work through mappings that is still in flight (its event, recorded after
    /// it); forgets the events that have passed.
    pub(super) fn in_flight(&mut self, e: std::sync::Arc<device::Event>) {
        self.pending.retain(|x| !x.query().unwrap_or(true));
        self.pending.push(e);
    }

    /// Waits until the device work of every [`Maps::in_flight`] event is done (before a mapping
    /// may be closed). The work waits only for the peers' streams, never for a host thread of
    /// this process, so this ends.
    pub(super) fn quiesce(&mut self) {
        for e in self.pending.drain(..) {
            if let Err(err) = e.wait_host() {
                crate::trace!("ipc: waiting for device work through mappings before closing one: {err}");
            }
        }
    }
}

pub(super) fn maps() -> MutexGuard<'static, Maps> {
    lock(&MAPS)
}

fn close_mapping(device: i32, m: Mapping) {
    // Closed in the context that opened it (the importing device's primary context).
    let _g = CtxGuard::enter(device);
    // SAFETY: a mapping opened by gpuwire, removed from the cache: closed once.
    let r = unsafe { cu::cuIpcCloseMemHandle(m.ptr) };
    crate::trace!("ipc: closed the mapping of {:#x} ({} bytes) at {:#x}: {r:?}", m.base, m.size, m.ptr);
}

/// Closes every mapping (the last IPC communicator's free; gpuwire_finalize).
pub(super) fn close_all(m: &mut Maps) {
    m.quiesce();
    for (&(_, device), l) in m.lrus.iter_mut() {
        l.drain(|x| close_mapping(device, x));
    }
    m.lrus.clear();
}

/// The address, in this process, of the memory `rec` of rank `peer` (of a communicator on
/// which this process is rank `me`, using `device`) describes (0 for none). The caller holds
/// `maps` for as long as it uses the address.
pub(super) fn import(maps: &mut Maps, device: i32, me: usize, peer: usize, rec: &BufRecord) -> Result<usize> {
    if rec.kind == REC_NONE {
        return Ok(0);
    }
    if rec.kind != REC_HANDLE {
        return Err(Error::Internal(format!("rank {peer}'s buffer has no IPC handle")));
    }
    if peer == me || rec.proc_id == shm::proc_id() {
        return Ok((rec.base + rec.offset) as usize);
    }
    let key = (rec.proc_id, device);
    // A cached mapping whose range overlaps this allocation's in the exporter's address space is
    // of an allocation the exporter has freed (two live allocations never overlap), and the
    // driver refuses to open the new one beside it (CUDA_ERROR_ALREADY_MAPPED): close it, in
    // every device's cache of that process, whichever communicator opened it. No call uses it:
    // uses hold `maps` until their device work is complete.
    if !maps.lrus.get(&key).is_some_and(|l| l.contains(&rec.id)) {
        // Opening one may close others (below, and the cache's eviction): after the device work
        // still in flight through them.
        let (b, e) = (rec.base, rec.base + rec.size);
        let full = maps.lrus.get(&key).is_some_and(|l| l.len() >= shm::MAPPINGS_PER_PEER);
        let stale = maps.lrus.iter().filter(|((p, _), _)| *p == rec.proc_id).any(|(_, l)| l.any(|m| m.base < e && b < m.base + m.size));
        if full || stale {
            maps.quiesce();
        }
        for (&(_, dev), l) in maps.lrus.iter_mut().filter(|((p, _), _)| *p == rec.proc_id) {
            l.evict_if(|_, m| m.base < e && b < m.base + m.size, |m| {
                crate::trace!("ipc: closing rank {peer}'s freed allocation at {:#x} (mapped at {:#x})", m.base, m.ptr);
                close_mapping(dev, m)
            });
        }
    }
    let pid = rec.proc_id >> 32;
    let m = maps.lrus.entry(key).or_insert_with(|| Lru::new(shm::MAPPINGS_PER_PEER)).get_or_open(
        rec.id,
        || {
            // SAFETY: a handle record written by the peer (64 bytes).
            let mut h: cu::CUipcMemHandle = unsafe { std::mem::zeroed() };
            for (i, b) in rec.handle.iter().enumerate() {
                h.reserved[i] = *b as _;
            }
            let mut d: cu::CUdeviceptr = 0;
            // SAFETY: opens the peer's allocation in the current (primary) context.
            let r = unsafe { cu::cuIpcOpenMemHandle_v2(&mut d, h, cu::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32) };
            if r == cu::CUresult::CUDA_ERROR_ALREADY_MAPPED {
                return Err(Error::Cuda(format!(
                    "cuIpcOpenMemHandle: rank {peer}'s allocation at {:#x} ({} bytes, buffer id {}, process {pid}) is already mapped in this process, though gpuwire closed its own mappings overlapping it (is it mapped by other code in this process, or by a context of another device?)",
                    rec.base, rec.size, rec.id
                )));
            }
            device::check(r, "cuIpcOpenMemHandle").map_err(|e| {
                Error::Cuda(format!("opening rank {peer}'s allocation at {:#x} ({} bytes, process {pid}): {e}", rec.base, rec.size))
            })?;
            crate::trace!("ipc: opened rank {peer}'s buffer {} ({} bytes, process {pid}) at {d:#x}", rec.id, rec.size);
            Ok(Mapping { ptr: d, base: rec.base, size: rec.size })
        },
        |m| close_mapping(device, m),
    )?;
    Ok((m.ptr + rec.offset) as usize)
}

/// At gpuwire_finalize, after every communicator was released: closes the mappings that are
/// still open (a communicator still held by another thread's call keeps nothing open after).
pub fn close_all_mappings() {
    close_all(&mut maps());
}
