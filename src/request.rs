//! Requests of nonblocking point-to-point operations (isend/irecv), as MPI_Request.
//!
//! A request keeps its communicator and buffer alive until it completes, so freeing either
//! handle while a transfer is in flight is safe. Completing a request (wait, or a test that
//! reports completion) frees its handle, as MPI sets a completed request to MPI_REQUEST_NULL.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::error::{Error, Result};
use crate::handles::{Kind, Registry};

/// All live requests, by handle.
pub static REQUESTS: Registry<Request> = Registry::new(Kind::Request);

/// The backend's half of a nonblocking operation.
pub trait Pending: Send {
    /// Blocks until the operation is complete (its data is in place).
    fn wait(&mut self) -> Result<()>;
    /// Whether the operation is complete, without blocking; true finishes it as `wait` does.
    fn test(&mut self) -> Result<bool>;
}

/// A nonblocking operation in flight.
pub struct Request {
    pending: Mutex<Option<Box<dyn Pending>>>,
    _comm: Arc<Communicator>,
    _buf: Arc<Buffer>,
}

impl Request {
    pub fn new(pending: Box<dyn Pending>, comm: Arc<Communicator>, buf: Arc<Buffer>) -> Request {
        Request { pending: Mutex::new(Some(pending)), _comm: comm, _buf: buf }
    }

    /// Blocks until complete. A second call returns at once. With a timeout configured on the
    /// communicator, the wait is a test loop that gives up at the timeout: the communicator is
    /// then broken, TIMEOUT returned, and the operation abandoned: its buffer is never freed
    /// (MPI may still write it when the peer arrives).
    pub fn wait(&self) -> Result<()> {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let Some(mut op) = p.take() else { return Ok(()) };
        let Some(t) = self._comm.config().timeout else { return op.wait() };
        let deadline = Instant::now() + t;
        let mut spins = 0u32;
        while !op.test()? {
            if Instant::now() >= deadline {
                std::mem::forget(op);
                std::mem::forget(self._buf.clone());
                let msg = format!(
                    "wait: the request did not complete within the communicator's timeout of {:.3} s (no matching call on the other rank?); the communicator is now broken",
                    t.as_secs_f64()
                );
                self._comm.mark_broken(msg.clone());
                return Err(Error::Timeout(msg));
            }
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
        Ok(())
    }

    /// Whether complete; completes it when it is.
    pub fn test(&self) -> Result<bool> {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        match p.as_mut() {
            None => Ok(true),
            Some(op) => {
                let done = op.test()?;
                if done {
                    *p = None;
                }
                Ok(done)
            }
        }
    }
}
