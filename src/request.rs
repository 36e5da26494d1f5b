//! Requests of nonblocking point-to-point operations (isend/irecv), as MPI_Request.
//!
//! A request keeps its communicator and buffer alive until it completes, so freeing either
//! handle while a transfer is in flight is safe. Completing a request (wait, or a test that
//! reports completion) frees its handle, as MPI sets a completed request to MPI_REQUEST_NULL.

use std::sync::{Arc, Mutex};

use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::error::Result;
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

    /// Blocks until complete. A second call returns at once.
    pub fn wait(&self) -> Result<()> {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut op) = p.take() {
            op.wait()?;
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
