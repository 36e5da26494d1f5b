//! One error type for the whole library, and the C status code each error maps to.
//!
//! Every fallible function of the safe core returns [`Result<T>`]; the FFI layer turns an
//! [`Error`] into a [`Status`] code for the caller and stores the error's message as the calling
//! thread's last error (see `ffi::status`).

/// Result of the safe core.
pub type Result<T> = std::result::Result<T, Error>;

/// Status code returned by every C function of gpuwire.
///
/// `GPUWIRE_SUCCESS` (0) means success. The codes are explicit numbers and are never reused.
/// `gpuwire_status_string` gives a static description of each; `gpuwire_last_error` gives the
/// detailed message of the calling thread's last failure.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum gpuwire_status {
    /// The call succeeded.
    GPUWIRE_SUCCESS = 0,
    /// A pointer argument that must not be NULL was NULL.
    GPUWIRE_ERROR_NULL_ARGUMENT = 1,
    /// An argument has a value outside its domain (a negative count, an unknown enum value, an
    /// out-of-range rank or an overlapping buffer pair, among others).
    GPUWIRE_ERROR_INVALID_ARGUMENT = 2,
    /// A handle is NULL, was freed, belongs to another kind of object, or was never issued.
    GPUWIRE_ERROR_INVALID_HANDLE = 3,
    /// The element counts given to a collective do not agree (locally, or across ranks when
    /// argument checking is on).
    GPUWIRE_ERROR_COUNT_MISMATCH = 4,
    /// The datatypes given to a call do not agree (locally, or across ranks when checking).
    GPUWIRE_ERROR_DTYPE_MISMATCH = 5,
    /// The reduction operations given to a collective differ across ranks (checking mode).
    GPUWIRE_ERROR_OP_MISMATCH = 6,
    /// The root given to a rooted collective differs across ranks (checking mode).
    GPUWIRE_ERROR_ROOT_MISMATCH = 7,
    /// The datatype is not supported by this operation.
    GPUWIRE_ERROR_UNSUPPORTED_DTYPE = 8,
    /// The reduction operation is not defined for this datatype (MIN/MAX on complex, bitwise
    /// operations on floating point).
    GPUWIRE_ERROR_UNSUPPORTED_OP = 9,
    /// The requested backend cannot be used here; the message says why.
    GPUWIRE_ERROR_BACKEND_UNAVAILABLE = 10,
    /// MPI returned an error; the message carries MPI's own error string.
    GPUWIRE_ERROR_MPI = 11,
    /// The CUDA driver returned an error.
    GPUWIRE_ERROR_CUDA = 12,
    /// NCCL returned an error.
    GPUWIRE_ERROR_NCCL = 13,
    /// An operation did not complete within the communicator's timeout.
    GPUWIRE_ERROR_TIMEOUT = 14,
    /// `gpuwire_init` has not been called.
    GPUWIRE_ERROR_NOT_INITIALIZED = 15,
    /// `gpuwire_finalize` was already called (no handle is valid any more), or the program
    /// finalized MPI itself.
    GPUWIRE_ERROR_ALREADY_FINALIZED = 16,
    /// A bug in gpuwire (a caught panic or a broken invariant). Please report it.
    GPUWIRE_ERROR_INTERNAL = 17,
    /// Another rank of the same collective rejected its arguments (checking mode): this rank's
    /// arguments were fine, but the call was not performed on any rank.
    GPUWIRE_ERROR_REMOTE_ARGUMENT = 18,
    /// The communicator can no longer be used (an earlier timeout or abort broke it).
    GPUWIRE_ERROR_COMM_BROKEN = 19,
    /// A message is longer than the receive buffer of a receive that takes up to its buffer's
    /// count (gpuwire_recv_status, gpuwire_irecv_status; as MPI_ERR_TRUNCATE): the message was
    /// consumed and the buffer not written.
    GPUWIRE_ERROR_TRUNCATE = 20,
}

pub use gpuwire_status as Status;

impl Status {
    /// All codes, in numeric order.
    pub const ALL: [Status; 21] = [
        Status::GPUWIRE_SUCCESS,
        Status::GPUWIRE_ERROR_NULL_ARGUMENT,
        Status::GPUWIRE_ERROR_INVALID_ARGUMENT,
        Status::GPUWIRE_ERROR_INVALID_HANDLE,
        Status::GPUWIRE_ERROR_COUNT_MISMATCH,
        Status::GPUWIRE_ERROR_DTYPE_MISMATCH,
        Status::GPUWIRE_ERROR_OP_MISMATCH,
        Status::GPUWIRE_ERROR_ROOT_MISMATCH,
        Status::GPUWIRE_ERROR_UNSUPPORTED_DTYPE,
        Status::GPUWIRE_ERROR_UNSUPPORTED_OP,
        Status::GPUWIRE_ERROR_BACKEND_UNAVAILABLE,
        Status::GPUWIRE_ERROR_MPI,
        Status::GPUWIRE_ERROR_CUDA,
        Status::GPUWIRE_ERROR_NCCL,
        Status::GPUWIRE_ERROR_TIMEOUT,
        Status::GPUWIRE_ERROR_NOT_INITIALIZED,
        Status::GPUWIRE_ERROR_ALREADY_FINALIZED,
        Status::GPUWIRE_ERROR_INTERNAL,
        Status::GPUWIRE_ERROR_REMOTE_ARGUMENT,
        Status::GPUWIRE_ERROR_COMM_BROKEN,
        Status::GPUWIRE_ERROR_TRUNCATE,
    ];

    /// The code for a raw integer, if it is one.
    pub fn from_i32(v: i32) -> Option<Status> {
        Self::ALL.get(usize::try_from(v).ok()?).copied()
    }

    /// Static, NUL-terminated description of the code.
    pub fn description(self) -> &'static std::ffi::CStr {
        use Status::*;
        match self {
            GPUWIRE_SUCCESS => c"success",
            GPUWIRE_ERROR_NULL_ARGUMENT => c"a required pointer argument is NULL",
            GPUWIRE_ERROR_INVALID_ARGUMENT => c"invalid argument",
            GPUWIRE_ERROR_INVALID_HANDLE => c"invalid handle (NULL, freed, or of another kind)",
            GPUWIRE_ERROR_COUNT_MISMATCH => c"element counts do not match",
            GPUWIRE_ERROR_DTYPE_MISMATCH => c"datatypes do not match",
            GPUWIRE_ERROR_OP_MISMATCH => c"reduction operations differ across ranks",
            GPUWIRE_ERROR_ROOT_MISMATCH => c"root differs across ranks",
            GPUWIRE_ERROR_UNSUPPORTED_DTYPE => c"unsupported datatype",
            GPUWIRE_ERROR_UNSUPPORTED_OP => c"unsupported reduction operation for this datatype",
            GPUWIRE_ERROR_BACKEND_UNAVAILABLE => c"backend unavailable",
            GPUWIRE_ERROR_MPI => c"MPI error",
            GPUWIRE_ERROR_CUDA => c"CUDA error",
            GPUWIRE_ERROR_NCCL => c"NCCL error",
            GPUWIRE_ERROR_TIMEOUT => c"operation timed out",
            GPUWIRE_ERROR_NOT_INITIALIZED => c"gpuwire_init has not been called",
            GPUWIRE_ERROR_ALREADY_FINALIZED => c"gpuwire_finalize (or the program's MPI_Finalize) was already called",
            GPUWIRE_ERROR_INTERNAL => c"internal error in gpuwire",
            GPUWIRE_ERROR_REMOTE_ARGUMENT => c"another rank rejected its arguments to this collective",
            GPUWIRE_ERROR_COMM_BROKEN => c"communicator is broken by an earlier failure",
            GPUWIRE_ERROR_TRUNCATE => c"message longer than the receive buffer (truncated)",
        }
    }
}

/// Every failure of gpuwire. The variant decides the status code; the text is the detailed
/// message a caller reads with `gpuwire_last_error`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("NULL argument: {0}")]
    NullArgument(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("invalid handle: {0}")]
    InvalidHandle(String),
    #[error("count mismatch: {0}")]
    CountMismatch(String),
    #[error("datatype mismatch: {0}")]
    DtypeMismatch(String),
    #[error("op mismatch: {0}")]
    OpMismatch(String),
    #[error("root mismatch: {0}")]
    RootMismatch(String),
    #[error("unsupported datatype: {0}")]
    UnsupportedDtype(String),
    #[error("unsupported operation: {0}")]
    UnsupportedOp(String),
    #[error("backend unavailable: {0}")]
    BackendUnavailable(String),
    #[error("MPI error: {0}")]
    Mpi(String),
    #[error("CUDA error: {0}")]
    Cuda(String),
    #[error("NCCL error: {0}")]
    Nccl(String),
    #[error("timeout: {0}")]
    Timeout(String),
    #[error("not initialized: {0}")]
    NotInitialized(String),
    #[error("already finalized: {0}")]
    AlreadyFinalized(String),
    #[error("internal error: {0}")]
    Internal(String),
    #[error("remote argument error: {0}")]
    RemoteArgument(String),
    #[error("communicator broken: {0}")]
    CommBroken(String),
    #[error("message truncated: {0}")]
    Truncate(String),
}

/// `text`, an error's message as `Display` writes it ("count mismatch: ..."), without its kind:
/// for a message that came as text (another rank's, or shared memory's) and is given again in
/// an error that adds its own kind.
pub fn without_kind(text: &str) -> &str {
    text.split_once(": ").map_or(text, |(_, d)| d)
}

impl Error {
    /// The message without its kind ("count mismatch: " and the like), for a message of the
    /// caller's own around it ([`Error::reworded`]).
    pub fn detail(&self) -> &str {
        match self {
            Error::NullArgument(m)
            | Error::InvalidArgument(m)
            | Error::InvalidHandle(m)
            | Error::CountMismatch(m)
            | Error::DtypeMismatch(m)
            | Error::OpMismatch(m)
            | Error::RootMismatch(m)
            | Error::UnsupportedDtype(m)
            | Error::UnsupportedOp(m)
            | Error::BackendUnavailable(m)
            | Error::Mpi(m)
            | Error::Cuda(m)
            | Error::Nccl(m)
            | Error::Timeout(m)
            | Error::NotInitialized(m)
            | Error::AlreadyFinalized(m)
            | Error::Internal(m)
            | Error::RemoteArgument(m)
            | Error::CommBroken(m)
            | Error::Truncate(m) => m,
        }
    }

    /// An error of the same kind with the message `msg` (which usually quotes [`Error::detail`]).
    pub fn reworded(&self, msg: String) -> Error {
        Error::from_status(self.status(), msg)
    }

    /// Whether an operation that failed with this error may have left an MPI request behind
    /// (abandoned at a timeout, or given up on a broken communicator): MPI may still read and
    /// write its buffers, which must then never be freed.
    pub fn abandons(&self) -> bool {
        matches!(self, Error::Timeout(_) | Error::CommBroken(_))
    }

    /// The C status code of this error.
    pub fn status(&self) -> Status {
        use Status::*;
        match self {
            Error::NullArgument(_) => GPUWIRE_ERROR_NULL_ARGUMENT,
            Error::InvalidArgument(_) => GPUWIRE_ERROR_INVALID_ARGUMENT,
            Error::InvalidHandle(_) => GPUWIRE_ERROR_INVALID_HANDLE,
            Error::CountMismatch(_) => GPUWIRE_ERROR_COUNT_MISMATCH,
            Error::DtypeMismatch(_) => GPUWIRE_ERROR_DTYPE_MISMATCH,
            Error::OpMismatch(_) => GPUWIRE_ERROR_OP_MISMATCH,
            Error::RootMismatch(_) => GPUWIRE_ERROR_ROOT_MISMATCH,
            Error::UnsupportedDtype(_) => GPUWIRE_ERROR_UNSUPPORTED_DTYPE,
            Error::UnsupportedOp(_) => GPUWIRE_ERROR_UNSUPPORTED_OP,
            Error::BackendUnavailable(_) => GPUWIRE_ERROR_BACKEND_UNAVAILABLE,
            Error::Mpi(_) => GPUWIRE_ERROR_MPI,
            Error::Cuda(_) => GPUWIRE_ERROR_CUDA,
            Error::Nccl(_) => GPUWIRE_ERROR_NCCL,
            Error::Timeout(_) => GPUWIRE_ERROR_TIMEOUT,
            Error::NotInitialized(_) => GPUWIRE_ERROR_NOT_INITIALIZED,
            Error::AlreadyFinalized(_) => GPUWIRE_ERROR_ALREADY_FINALIZED,
            Error::Internal(_) => GPUWIRE_ERROR_INTERNAL,
            Error::RemoteArgument(_) => GPUWIRE_ERROR_REMOTE_ARGUMENT,
            Error::CommBroken(_) => GPUWIRE_ERROR_COMM_BROKEN,
            Error::Truncate(_) => GPUWIRE_ERROR_TRUNCATE,
        }
    }

    /// Rebuilds an error of the kind `status` names, with `msg` (used to give every rank the
    /// same error after an agreement exchange).
    pub fn from_status(status: Status, msg: String) -> Error {
        use Status::*;
        match status {
            GPUWIRE_ERROR_NULL_ARGUMENT => Error::NullArgument(msg),
            GPUWIRE_ERROR_INVALID_ARGUMENT => Error::InvalidArgument(msg),
            GPUWIRE_ERROR_INVALID_HANDLE => Error::InvalidHandle(msg),
            GPUWIRE_ERROR_COUNT_MISMATCH => Error::CountMismatch(msg),
            GPUWIRE_ERROR_DTYPE_MISMATCH => Error::DtypeMismatch(msg),
            GPUWIRE_ERROR_OP_MISMATCH => Error::OpMismatch(msg),
            GPUWIRE_ERROR_ROOT_MISMATCH => Error::RootMismatch(msg),
            GPUWIRE_ERROR_UNSUPPORTED_DTYPE => Error::UnsupportedDtype(msg),
            GPUWIRE_ERROR_UNSUPPORTED_OP => Error::UnsupportedOp(msg),
            GPUWIRE_ERROR_BACKEND_UNAVAILABLE => Error::BackendUnavailable(msg),
            GPUWIRE_ERROR_MPI => Error::Mpi(msg),
            GPUWIRE_ERROR_CUDA => Error::Cuda(msg),
            GPUWIRE_ERROR_NCCL => Error::Nccl(msg),
            GPUWIRE_ERROR_TIMEOUT => Error::Timeout(msg),
            GPUWIRE_ERROR_NOT_INITIALIZED => Error::NotInitialized(msg),
            GPUWIRE_ERROR_ALREADY_FINALIZED => Error::AlreadyFinalized(msg),
            GPUWIRE_ERROR_REMOTE_ARGUMENT => Error::RemoteArgument(msg),
            GPUWIRE_ERROR_COMM_BROKEN => Error::CommBroken(msg),
            GPUWIRE_ERROR_TRUNCATE => Error::Truncate(msg),
            GPUWIRE_SUCCESS | GPUWIRE_ERROR_INTERNAL => Error::Internal(msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_dense_and_roundtrip() {
        for (i, s) in Status::ALL.iter().enumerate() {
            assert_eq!(*s as i32, i as i32);
            assert_eq!(Status::from_i32(i as i32), Some(*s));
            assert!(!s.description().to_bytes().is_empty());
            if *s != Status::GPUWIRE_SUCCESS && *s != Status::GPUWIRE_ERROR_INTERNAL {
                assert_eq!(Error::from_status(*s, "x".into()).status(), *s);
            }
        }
        assert_eq!(Status::from_i32(-1), None);
        assert_eq!(Status::from_i32(21), None);
    }

    #[test]
    fn detail_is_the_message_without_its_kind() {
        for s in Status::ALL.iter().skip(1) {
            let e = Error::from_status(*s, "rank 1: the message: with colons".into());
            assert_eq!(e.detail(), "rank 1: the message: with colons");
            assert_eq!(without_kind(&e.to_string()), e.detail());
            let r = e.reworded(format!("gather: {}", e.detail()));
            assert_eq!((r.status(), r.detail()), (e.status(), "gather: rank 1: the message: with colons"));
        }
        assert_eq!(without_kind("no kind"), "no kind");
    }
}
