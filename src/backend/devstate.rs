//! Per-communicator state of the device backends (MPI_STAGED and MPI_CUDA_AWARE): the device,
//! a private MPI communicator for gpuwire's own point-to-point traffic inside collectives,
//! reusable staging and scratch memory, and a pool of pinned buffers for nonblocking requests.

use std::sync::{Mutex, MutexGuard};

use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::device::{self, CtxGuard, CudaAlloc, Event, Scratch, Stream};
use crate::error::{Error, Result};
use crate::mpisys::{self, RawComm, sys};
use crate::types::{Space, Staging};

/// Messages at or below this size (bytes) reduce through one MPI collective on a host copy: it
/// is latency-bound, and one MPI call beats 2(P-1) ring exchanges there.
pub(crate) const SMALL_BYTES: usize = 64 << 10;

/// The same limit when ranks of the communicator share a GPU. Their kernels and small copies
/// are time-sliced on its compute engine (~270 µs each when two ranks issue one at once, on the
/// H200), and the ring issues several per step, while the host path needs only copy-engine
/// copies: measured there, the ring took 634 µs at 128 KiB and 770 µs at 512 KiB against 61 µs
/// for the host path at 64 KiB, and only overtakes it at 2–4 MiB.
pub(crate) const SHARED_SMALL_BYTES: usize = 2 << 20;

/// The device state of `c` (device backends only).
pub fn dev(c: &Communicator) -> Result<MutexGuard<'_, DevState>> {
    match c.backend_state.get::<Mutex<DevState>>() {
        Some(m) => Ok(m.lock().unwrap_or_else(|p| p.into_inner())),
        None => Err(Error::Internal("device path used on a communicator without device state".into())),
    }
}

/// The host buffers of `c`'s staged nonblocking requests (set up with every communicator).
pub fn pool(c: &Communicator) -> Result<&Pool> {
    c.backend_state.get::<Pool>().ok_or_else(|| Error::Internal("staged request on a communicator without its pool".into()))
}

/// Device state of one communicator.
#[derive(Debug)]
pub struct DevState {
    pub device: i32,
    /// Private duplicate for ring exchanges: never matches the caller's messages.
    pub coll: RawComm,
    /// Host staging: [0] outgoing, [1] incoming (pinned or pageable per config).
    pub host: [Scratch; 2],
    /// Device temporaries: [0] incoming chunks before reduction, [1] a working copy.
    pub dev: [Scratch; 2],
    /// Staging chunk size in bytes (agreed across ranks at creation).
    pub chunk: usize,
    /// Whether GPU reduction kernels work here, or why not.
    pub kernels: std::result::Result<(), String>,
    pub staging: Staging,
    /// Whether two ranks of the communicator use one GPU (then their work on its compute engine
    /// is time-sliced, and deliveries below 32 KiB avoid it: see `device::htod_shared`).
    pub gpu_shared: bool,
    events: Vec<Event>,
}

impl DevState {
    /// Collective over `c`: sets up the device state for a device backend.
    pub fn new(c: &Communicator, device: i32) -> Result<DevState> {
        crate::trace!("device state: entering device {device}");
        let ctx = CtxGuard::enter(device);
        let _g = c.agree_on_result(ctx, "entering the CUDA device")?;
        let cfg = c.config();
        // The chunk size must be the same everywhere: take the smallest asked for.
        let mut chunk = [-(cfg.chunk_bytes as i64)];
        c.allreduce_max_i64(&mut chunk, "agreeing on the staging chunk size")?;
        let chunk = (-chunk[0]) as usize;
        let gpu_shared = crate::backend::topology::shared_gpus(c, Some(device))?.is_some();
        let mut coll = mpisys::comm_null();
        // SAFETY: c.raw() is valid; every rank calls.
        mpisys::check(unsafe { sys::MPI_Comm_dup(c.raw(), &mut coll) }, "MPI_Comm_dup")?;
        let host_space = match cfg.staging {
            Staging::GPUWIRE_STAGING_PINNED => Space::GPUWIRE_SPACE_PINNED,
            Staging::GPUWIRE_STAGING_PAGEABLE => Space::GPUWIRE_SPACE_HOST,
        };
        crate::trace!("device state: chunk {chunk} bytes; compiling GPU kernels");
        let kernels = device::kernels::available(device);
        crate::trace!("device state: kernels {:?}", kernels);
        // Every rank must take the same algorithm: kernels usable everywhere or nowhere.
        let mut k = [kernels.is_err() as i64];
        c.allreduce_max_i64(&mut k, "agreeing on GPU reductions")?;
        let kernels = match (kernels, k[0]) {
            (Err(e), _) => Err(e),
            (Ok(()), 0) => Ok(()),
            (Ok(()), _) => Err("another rank cannot run the GPU reduction kernels".into()),
        };
        Ok(DevState {
            device,
            coll: RawComm(coll),
            host: [Scratch::new(host_space, device), Scratch::new(host_space, device)],
            dev: [Scratch::new(Space::GPUWIRE_SPACE_DEVICE, device), Scratch::new(Space::GPUWIRE_SPACE_DEVICE, device)],
            chunk,
            kernels,
            staging: cfg.staging,
            gpu_shared,
            events: Vec::new(),
        })
    }

    /// Event `i` (created on first use).
    pub fn event(&mut self, i: usize) -> Result<&Event> {
        while self.events.len() <= i {
            self.events.push(Event::new()?);
        }
        Ok(&self.events[i])
    }

    /// Up to how many bytes reductions take one MPI call on a host copy (above: the ring with
    /// GPU reductions).
    pub fn small_bytes(&self) -> usize {
        if self.gpu_shared { SHARED_SMALL_BYTES } else { SMALL_BYTES }
    }

    /// Whether host staging is page-locked.
    pub fn pinned(&self) -> bool {
        self.staging == Staging::GPUWIRE_STAGING_PINNED
    }

    /// Frees the private communicator (before MPI is finalized).
    pub fn free_comm(&mut self) {
        // SAFETY: created in `new`, freed only here.
        unsafe { sys::MPI_Comm_free(&mut self.coll.0) };
    }
}

/// A staging buffer for one nonblocking request, returned to the pool when done.
pub struct PoolBuf {
    pub ptr: usize,
    pub bytes: usize,
    inner: PoolMem,
}

enum PoolMem {
    Pinned(#[allow(dead_code)] CudaAlloc),
    Pageable(#[allow(dead_code)] Vec<u64>),
}

/// Most buffers a [`Pool`] keeps.
const POOL_KEPT: usize = 8;

/// A pool of host staging buffers for isend/irecv.
#[derive(Default)]
pub struct Pool {
    free: Mutex<Vec<PoolBuf>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pool")
    }
}

impl Pool {
    /// A host buffer of at least `bytes`, pinned if `pinned`: the smallest kept one that fits
    /// (a small message leaves the large buffers to the large ones), else a new one.
    pub fn take(&self, bytes: usize, pinned: bool, device: i32) -> Result<PoolBuf> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let fits = |b: &PoolBuf| b.bytes >= bytes && matches!(b.inner, PoolMem::Pinned(_)) == pinned;
        if let Some(i) = free.iter().enumerate().filter(|(_, b)| fits(b)).min_by_key(|(_, b)| b.bytes).map(|(i, _)| i) {
            return Ok(free.swap_remove(i));
        }
        drop(free);
        let size = bytes.max(4096).next_power_of_two();
        if pinned {
            let a = CudaAlloc::new(Space::GPUWIRE_SPACE_PINNED, device, size)?;
            Ok(PoolBuf { ptr: a.ptr, bytes: size, inner: PoolMem::Pinned(a) })
        } else {
            let mut v = vec![0u64; size / 8];
            let ptr = v.as_mut_ptr() as usize;
            Ok(PoolBuf { ptr, bytes: size, inner: PoolMem::Pageable(v) })
        }
    }

    /// Returns a buffer for reuse. At most [`POOL_KEPT`] are kept, the largest: a full pool
    /// gives up its smallest for a larger one. (It kept the first ones given before: after eight
    /// smaller messages, every larger one allocated and freed pinned memory, about 1 ms a MiB,
    /// and an IPC send/recv of 1 MiB staged through host memory took 2.8 ms on an H100.)
    pub fn give(&self, b: PoolBuf) {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() < POOL_KEPT {
            free.push(b);
            return;
        }
        let smallest = free.iter().enumerate().min_by_key(|(_, k)| k.bytes).filter(|(_, k)| k.bytes < b.bytes).map(|(i, _)| i);
        if let Some(i) = smallest {
            let smaller = std::mem::replace(&mut free[i], b);
            drop(free);
            drop(smaller);
        }
    }
}

/// Checks that a device-resident buffer lives on the communicator's device.
pub fn check_device(c: &Communicator, b: &Buffer) -> Result<()> {
    check_device_of(c.device(), b)
}

/// `check_device` on a communicator whose device is `device`.
#[inline]
pub fn check_device_of(device: i32, b: &Buffer) -> Result<()> {
    if !b.is_host() && b.device() != device {
        return Err(Error::InvalidArgument(format!("the buffer lives on CUDA device {} but this communicator uses device {device}", b.device())));
    }
    Ok(())
}

/// Copies `bytes` from `src` to `dst` (any spaces) after `stream`'s earlier work and waits.
pub fn copy_wait(src: usize, dst: usize, bytes: usize, stream: Stream) -> Result<()> {
    if bytes == 0 || src == dst {
        return Ok(());
    }
    device::copy_async(dst, src, bytes, stream)?;
    device::sync(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full pool keeps the largest buffers, and a take gets the smallest that fits.
    #[test]
    fn pool_keeps_the_largest_and_takes_the_best_fit() {
        let pool = Pool::default();
        // Eight small messages' buffers (4 KiB .. 512 KiB), all given back.
        let small: Vec<PoolBuf> = (12..20).map(|k| pool.take(1 << k, false, 0).unwrap()).collect();
        small.into_iter().for_each(|b| pool.give(b));
        // A larger one is kept (in place of the 4 KiB one) and reused by the next take of its size.
        let big = pool.take(1 << 20, false, 0).unwrap();
        let at = big.ptr;
        pool.give(big);
        let again = pool.take(1 << 20, false, 0).unwrap();
        assert_eq!(again.ptr, at, "the 1 MiB buffer was not kept");
        pool.give(again);
        let sizes = |p: &Pool| {
            let mut v: Vec<usize> = p.free.lock().unwrap().iter().map(|b| b.bytes).collect();
            v.sort();
            v
        };
        assert_eq!(sizes(&pool), (13..21).map(|k| 1usize << k).collect::<Vec<_>>());
        // A smaller one than all kept is dropped; a 5 KiB take gets the 8 KiB buffer, not a larger.
        pool.give(pool_buf(4096));
        assert_eq!(sizes(&pool).len(), POOL_KEPT);
        assert_eq!(pool.take(5000, false, 0).unwrap().bytes, 8192);
        // Only pageable buffers were made and kept here (a pinned take never gets one).
        assert!(pool.free.lock().unwrap().iter().all(|b| matches!(b.inner, PoolMem::Pageable(_))));
    }

    fn pool_buf(bytes: usize) -> PoolBuf {
        let mut v = vec![0u64; bytes / 8];
        let ptr = v.as_mut_ptr() as usize;
        PoolBuf { ptr, bytes, inner: PoolMem::Pageable(v) }
    }
}
