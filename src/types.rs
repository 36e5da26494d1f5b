//! Datatypes, reduction operations, memory spaces and backends: the enums of the C API, their
//! checked conversions from C integers, and their MPI mappings.
//!
//! The numeric values of `gpuwire_dtype` and `gpuwire_op` follow NCCL's `ncclDataType_t` and
//! `ncclRedOp_t` where NCCL has the same item, so a value means the same thing in both APIs.

#![allow(non_camel_case_types)]

use crate::error::{Error, Result};

/// A rank that sends and receives nothing: point-to-point calls with it return at once (as
/// MPI_PROC_NULL). Its value, -1000, is no MPI's constant (Open MPI's MPI_ANY_SOURCE is -1 and
/// MPI_PROC_NULL -2, MPICH's the other way round); the MPI_PROC_NULL of the MPI gpuwire was
/// built with is accepted as well and means the same. Other negative ranks are refused with
/// GPUWIRE_ERROR_INVALID_ARGUMENT.
pub const GPUWIRE_PROC_NULL: i32 = -1000;

/// The source of a receive or probe that matches a message from any rank (as MPI_ANY_SOURCE).
/// Its value, -1001, is no MPI's constant; the MPI_ANY_SOURCE of the MPI gpuwire was built with
/// is accepted as well and means the same. Receives only (a send to it is
/// GPUWIRE_ERROR_INVALID_ARGUMENT). The source that matched is reported in gpuwire_status_t.
pub const GPUWIRE_ANY_SOURCE: i32 = -1001;

/// The tag of a receive or probe that matches a message with any tag (as MPI_ANY_TAG). Its
/// value, -1002, is no MPI's constant; the MPI_ANY_TAG of the MPI gpuwire was built with is
/// accepted as well. Receives only; the tag that matched is reported in gpuwire_status_t.
pub const GPUWIRE_ANY_TAG: i32 = -1002;

/// Color for `gpuwire_comm_split` meaning "not in any new communicator" (as MPI_UNDEFINED); the
/// index gpuwire_waitany and gpuwire_testany write when no request of the array is active.
pub const GPUWIRE_UNDEFINED: i32 = -1;

/// Subarray order of `gpuwire_buffer_view_subarray`: the last dimension varies fastest (row
/// major, as MPI_ORDER_C).
pub const GPUWIRE_ORDER_C: i32 = 0;

/// Subarray order of `gpuwire_buffer_view_subarray`: the first dimension varies fastest (column
/// major, as MPI_ORDER_FORTRAN).
pub const GPUWIRE_ORDER_FORTRAN: i32 = 1;

/// `GPUWIRE_PROC_NULL`, the name the operations and every path compare peers with.
pub(crate) const PROC_NULL: i32 = GPUWIRE_PROC_NULL;
/// `GPUWIRE_ANY_SOURCE` and `GPUWIRE_ANY_TAG`, as the operations and paths compare with.
pub(crate) const ANY_SOURCE: i32 = GPUWIRE_ANY_SOURCE;
pub(crate) const ANY_TAG: i32 = GPUWIRE_ANY_TAG;

/// Element datatype of a buffer (values as NCCL's `ncclDataType_t` where NCCL has the type).
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum gpuwire_dtype {
    /// 8-bit signed integer.
    GPUWIRE_INT8 = 0,
    /// 8-bit unsigned integer.
    GPUWIRE_UINT8 = 1,
    /// 32-bit signed integer.
    GPUWIRE_INT32 = 2,
    /// 32-bit unsigned integer.
    GPUWIRE_UINT32 = 3,
    /// 64-bit signed integer.
    GPUWIRE_INT64 = 4,
    /// 64-bit unsigned integer.
    GPUWIRE_UINT64 = 5,
    /// IEEE 754 binary16. MPI has no such type: reductions go through a user-defined MPI
    /// operation that computes each step in float32 and rounds the result to float16.
    GPUWIRE_FLOAT16 = 6,
    /// IEEE 754 binary32.
    GPUWIRE_FLOAT32 = 7,
    /// IEEE 754 binary64.
    GPUWIRE_FLOAT64 = 8,
    /// bfloat16 (8-bit exponent, 7-bit mantissa); reduced like GPUWIRE_FLOAT16.
    GPUWIRE_BFLOAT16 = 9,
    /// Complex of two float32 (real, imaginary), as C `float _Complex` and MPI_C_FLOAT_COMPLEX.
    GPUWIRE_COMPLEX64 = 10,
    /// Complex of two float64, as C `double _Complex` and MPI_C_DOUBLE_COMPLEX.
    GPUWIRE_COMPLEX128 = 11,
    /// A (value, index) pair: a float32 value then an int32 index, laid out as the C struct of
    /// a `float` and an `int32_t` (8 bytes), as MPI_FLOAT_INT. Reduced only by GPUWIRE_MINLOC
    /// and GPUWIRE_MAXLOC; moved by every other operation.
    GPUWIRE_FLOAT32_INT32 = 12,
    /// A (value, index) pair: a float64 value then an int32 index, laid out as the C struct of
    /// a `double` and an `int32_t` (16 bytes: 4 bytes of padding after the index, 8-byte
    /// alignment), as MPI_DOUBLE_INT. Reduced only by GPUWIRE_MINLOC and GPUWIRE_MAXLOC. Moved
    /// as 16 bytes (the padding too) by every path.
    GPUWIRE_FLOAT64_INT32 = 13,
    /// A (value, index) pair of two int32 (value then index; 8 bytes), as MPI_2INT. Reduced only
    /// by GPUWIRE_MINLOC and GPUWIRE_MAXLOC.
    GPUWIRE_INT32_INT32 = 14,
}

/// Reduction operation (values as NCCL's `ncclRedOp_t` for SUM..AVG).
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum gpuwire_op {
    /// Sum.
    GPUWIRE_SUM = 0,
    /// Product (complex multiplication on complex types).
    GPUWIRE_PROD = 1,
    /// Maximum (not defined on complex types).
    GPUWIRE_MAX = 2,
    /// Minimum (not defined on complex types).
    GPUWIRE_MIN = 3,
    /// Average: the sum divided by the number of ranks, in the datatype's arithmetic (integer
    /// types divide with truncation toward zero), as ncclAvg. For integer types the sum is
    /// formed in the datatype and wraps on overflow (two's complement) before the division, on
    /// every backend: int8 100 and 100 on 2 ranks average to -28 ((200 - 256) / 2), not 100.
    /// Use a wider datatype (or floating point) when the sum may not fit.
    GPUWIRE_AVG = 4,
    /// Bitwise AND (integer types only).
    GPUWIRE_BAND = 5,
    /// Bitwise OR (integer types only).
    GPUWIRE_BOR = 6,
    /// Bitwise XOR (integer types only).
    GPUWIRE_BXOR = 7,
    /// Logical AND (integer types only), as MPI_LAND: a nonzero element is true; each result
    /// element is 1 (true) or 0 (false). As in MPI, the data of a single rank (a communicator
    /// of one rank, scan's rank 0, exscan's rank 1) is passed through as it is.
    GPUWIRE_LAND = 8,
    /// Logical OR (integer types only), as MPI_LOR; results 1 or 0.
    GPUWIRE_LOR = 9,
    /// Logical exclusive OR (integer types only), as MPI_LXOR; results 1 or 0.
    GPUWIRE_LXOR = 10,
    /// Minimum value and its index, on the pair datatypes only (GPUWIRE_FLOAT32_INT32,
    /// GPUWIRE_FLOAT64_INT32, GPUWIRE_INT32_INT32), as MPI_MINLOC: the smaller value wins; of
    /// equal values the lower index wins.
    GPUWIRE_MINLOC = 11,
    /// Maximum value and its index, on the pair datatypes only, as MPI_MAXLOC: the larger value
    /// wins; of equal values the lower index wins.
    GPUWIRE_MAXLOC = 12,
}

/// Where a buffer's memory lives.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum gpuwire_space {
    /// Detect the space of a wrapped pointer (gpuwire_buffer_wrap only).
    GPUWIRE_SPACE_AUTO = 0,
    /// Ordinary (pageable) host memory.
    GPUWIRE_SPACE_HOST = 1,
    /// CUDA device memory (cuMemAlloc).
    GPUWIRE_SPACE_DEVICE = 2,
    /// Page-locked host memory (cuMemAllocHost), reachable by the device.
    GPUWIRE_SPACE_PINNED = 3,
    /// CUDA managed (unified) memory (cuMemAllocManaged).
    GPUWIRE_SPACE_MANAGED = 4,
}

/// Data path of a communicator for device buffers (host buffers always use GPUWIRE_BACKEND_HOST).
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum gpuwire_backend {
    /// Choose the fastest usable path (see the README's backend table).
    GPUWIRE_BACKEND_AUTO = 0,
    /// Plain MPI on host memory; device buffers are refused.
    GPUWIRE_BACKEND_HOST = 1,
    /// Device data staged through pinned host memory around a (not CUDA-aware) MPI.
    GPUWIRE_BACKEND_MPI_STAGED = 2,
    /// Device pointers handed to a CUDA-aware MPI.
    GPUWIRE_BACKEND_MPI_CUDA_AWARE = 3,
    /// NCCL, bootstrapped over MPI; every rank needs its own GPU.
    GPUWIRE_BACKEND_NCCL = 4,
    /// CUDA IPC between the ranks of one node (MPI carries only control messages); every rank
    /// on one node and every pair of devices the same GPU or peers (cuDeviceCanAccessPeer).
    GPUWIRE_BACKEND_IPC = 5,
    /// Hierarchical, for a communicator whose ranks span nodes: the ranks of each node combine
    /// on their node (CUDA IPC between them), one leader per node exchanges over MPI (staged or
    /// CUDA-aware), the result spreads back on each node; bcast, reduce, allreduce, allgather,
    /// allgatherv and reduce_scatter_block (the other calls: MPI_STAGED). At least two nodes, one
    /// with two ranks or more, each node's ranks consecutive in rank order. Forced, it also takes
    /// host memory without CUDA (plain MPI on each level).
    GPUWIRE_BACKEND_HIER = 6,
}

/// How the staged backend holds host copies of device data.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum gpuwire_staging {
    /// Page-locked staging buffers, allocated once and reused (default; fastest copies).
    GPUWIRE_STAGING_PINNED = 0,
    /// Ordinary pageable staging buffers.
    GPUWIRE_STAGING_PAGEABLE = 1,
}

/// How point-to-point messages of device memory are matched (`gpuwire_config.p2p_matching`,
/// GPUWIRE_P2P_MATCHING; the same on every rank).
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum gpuwire_p2p_matching {
    /// As the backend matches them (default): MPI's matching (tags, wildcards, probe, shorter
    /// messages) on every backend but NCCL, whose device messages are matched by peer and order
    /// only (tags ignored; GPUWIRE_ANY_SOURCE and GPUWIRE_ANY_TAG refused, naming this setting).
    GPUWIRE_P2P_MATCHING_BACKEND = 0,
    /// MPI's matching on every backend: on NCCL, device point-to-point (send, recv, isend,
    /// irecv, sendrecv and their status forms) goes through the staged MPI path of the same
    /// communicator (gpuwire's MPI control path; host-staged bandwidth), so that tags,
    /// wildcards, statuses, probe, shorter messages and GPUWIRE_ERROR_TRUNCATE behave as on
    /// host memory; NCCL's collectives are not affected. Elsewhere the same as BACKEND.
    GPUWIRE_P2P_MATCHING_MPI = 1,
}

/// MPI thread support level, as MPI_THREAD_SINGLE .. MPI_THREAD_MULTIPLE.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum gpuwire_thread_level {
    /// MPI_THREAD_SINGLE.
    GPUWIRE_THREAD_SINGLE = 0,
    /// MPI_THREAD_FUNNELED.
    GPUWIRE_THREAD_FUNNELED = 1,
    /// MPI_THREAD_SERIALIZED.
    GPUWIRE_THREAD_SERIALIZED = 2,
    /// MPI_THREAD_MULTIPLE.
    GPUWIRE_THREAD_MULTIPLE = 3,
}

/// How a distributed array (gpuwire_darray) is laid out over the ranks of its communicator.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum gpuwire_partition {
    /// Each rank owns one contiguous block of the global array (of rows, for an N-D shape
    /// split along axis 0), in rank order.
    GPUWIRE_PARTITION_SCATTER = 0,
    /// Every rank holds the whole array; gpuwire keeps the copies identical (user data enters
    /// through a broadcast from rank 0).
    GPUWIRE_PARTITION_BROADCAST = 1,
}

/// Which vector norm gpuwire_darray_norm computes.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum gpuwire_norm {
    /// max |x_i| (the infinity norm).
    GPUWIRE_NORM_INF = 0,
    /// sum |x_i|.
    GPUWIRE_NORM_1 = 1,
    /// sqrt(sum |x_i|^2).
    GPUWIRE_NORM_2 = 2,
}

pub use gpuwire_backend as BackendKind;
pub use gpuwire_dtype as Dtype;
pub use gpuwire_norm as NormKind;
pub use gpuwire_op as ReduceOp;
pub use gpuwire_p2p_matching as P2pMatching;
pub use gpuwire_partition as Partition;
pub use gpuwire_space as Space;
pub use gpuwire_staging as Staging;
pub use gpuwire_thread_level as ThreadLevel;

impl Dtype {
    pub const ALL: [Dtype; 15] = [
        Dtype::GPUWIRE_INT8,
        Dtype::GPUWIRE_UINT8,
        Dtype::GPUWIRE_INT32,
        Dtype::GPUWIRE_UINT32,
        Dtype::GPUWIRE_INT64,
        Dtype::GPUWIRE_UINT64,
        Dtype::GPUWIRE_FLOAT16,
        Dtype::GPUWIRE_FLOAT32,
        Dtype::GPUWIRE_FLOAT64,
        Dtype::GPUWIRE_BFLOAT16,
        Dtype::GPUWIRE_COMPLEX64,
        Dtype::GPUWIRE_COMPLEX128,
        Dtype::GPUWIRE_FLOAT32_INT32,
        Dtype::GPUWIRE_FLOAT64_INT32,
        Dtype::GPUWIRE_INT32_INT32,
    ];

    /// Checked conversion from the C integer.
    pub fn from_c(v: i32) -> Result<Dtype> {
        Self::ALL.get(usize::try_from(v).unwrap_or(usize::MAX)).copied().ok_or_else(|| {
            Error::UnsupportedDtype(format!(
                "datatype code {v} is not a gpuwire_dtype (valid codes are 0..=14)"
            ))
        })
    }

    /// Size of one element in bytes.
    #[inline]
    pub fn size(self) -> usize {
        // From a constant, not the table in memory that `size_by_match` compiles to (a cache
        // line per call: `crate::hot`): 4 bits of log2 per datatype code, code 0 lowest.
        const LOG2: u64 = {
            let (mut v, mut i) = (0u64, 0);
            while i < Dtype::ALL.len() {
                assert!(Dtype::ALL[i] as usize == i && Dtype::ALL[i].size_by_match().is_power_of_two());
                v |= (Dtype::ALL[i].size_by_match().trailing_zeros() as u64) << (4 * i);
                i += 1;
            }
            v
        };
        1 << ((LOG2 >> (4 * self as u32)) & 15)
    }

    /// Size of one element in bytes: the definition ([`Dtype::size`] reads it from a constant).
    const fn size_by_match(self) -> usize {
        use Dtype::*;
        match self {
            GPUWIRE_INT8 | GPUWIRE_UINT8 => 1,
            GPUWIRE_FLOAT16 | GPUWIRE_BFLOAT16 => 2,
            GPUWIRE_INT32 | GPUWIRE_UINT32 | GPUWIRE_FLOAT32 => 4,
            GPUWIRE_INT64 | GPUWIRE_UINT64 | GPUWIRE_FLOAT64 | GPUWIRE_COMPLEX64 | GPUWIRE_FLOAT32_INT32 | GPUWIRE_INT32_INT32 => 8,
            GPUWIRE_COMPLEX128 | GPUWIRE_FLOAT64_INT32 => 16,
        }
    }

    /// The alignment of an element in C, C++ and Fortran: its component's (a complex's real
    /// part's; a pair's wider member's), so 4 for complex64 and the float32 and int32 pairs,
    /// whose elements are 8 bytes.
    pub fn align(self) -> usize {
        use Dtype::*;
        match self {
            GPUWIRE_COMPLEX64 | GPUWIRE_FLOAT32_INT32 | GPUWIRE_INT32_INT32 => 4,
            GPUWIRE_COMPLEX128 | GPUWIRE_FLOAT64_INT32 => 8,
            d => d.size(),
        }
    }

    pub fn is_integer(self) -> bool {
        (self as i32) <= Dtype::GPUWIRE_UINT64 as i32
    }

    pub fn is_complex(self) -> bool {
        matches!(self, Dtype::GPUWIRE_COMPLEX64 | Dtype::GPUWIRE_COMPLEX128)
    }

    /// The (value, int32 index) pair datatypes of MINLOC and MAXLOC.
    pub fn is_pair(self) -> bool {
        matches!(self, Dtype::GPUWIRE_FLOAT32_INT32 | Dtype::GPUWIRE_FLOAT64_INT32 | Dtype::GPUWIRE_INT32_INT32)
    }

    /// float16 and bfloat16: no MPI type, reduced through gpuwire's own MPI operations.
    pub fn is_half(self) -> bool {
        matches!(self, Dtype::GPUWIRE_FLOAT16 | Dtype::GPUWIRE_BFLOAT16)
    }

    /// Short lower-case name ("float32").
    pub fn name(self) -> &'static str {
        use Dtype::*;
        match self {
            GPUWIRE_INT8 => "int8",
            GPUWIRE_UINT8 => "uint8",
            GPUWIRE_INT32 => "int32",
            GPUWIRE_UINT32 => "uint32",
            GPUWIRE_INT64 => "int64",
            GPUWIRE_UINT64 => "uint64",
            GPUWIRE_FLOAT16 => "float16",
            GPUWIRE_FLOAT32 => "float32",
            GPUWIRE_FLOAT64 => "float64",
            GPUWIRE_BFLOAT16 => "bfloat16",
            GPUWIRE_COMPLEX64 => "complex64",
            GPUWIRE_COMPLEX128 => "complex128",
            GPUWIRE_FLOAT32_INT32 => "float32_int32",
            GPUWIRE_FLOAT64_INT32 => "float64_int32",
            GPUWIRE_INT32_INT32 => "int32_int32",
        }
    }
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 13] = [
        ReduceOp::GPUWIRE_SUM,
        ReduceOp::GPUWIRE_PROD,
        ReduceOp::GPUWIRE_MAX,
        ReduceOp::GPUWIRE_MIN,
        ReduceOp::GPUWIRE_AVG,
        ReduceOp::GPUWIRE_BAND,
        ReduceOp::GPUWIRE_BOR,
        ReduceOp::GPUWIRE_BXOR,
        ReduceOp::GPUWIRE_LAND,
        ReduceOp::GPUWIRE_LOR,
        ReduceOp::GPUWIRE_LXOR,
        ReduceOp::GPUWIRE_MINLOC,
        ReduceOp::GPUWIRE_MAXLOC,
    ];

    /// Checked conversion from the C integer.
    #[inline]
    pub fn from_c(v: i32) -> Result<ReduceOp> {
        // A match, not an index into `ALL` (a table in memory, a cache line per call:
        // `crate::hot`): the compiler turns it into a range check.
        use ReduceOp::*;
        Ok(match v {
            0 => GPUWIRE_SUM,
            1 => GPUWIRE_PROD,
            2 => GPUWIRE_MAX,
            3 => GPUWIRE_MIN,
            4 => GPUWIRE_AVG,
            5 => GPUWIRE_BAND,
            6 => GPUWIRE_BOR,
            7 => GPUWIRE_BXOR,
            8 => GPUWIRE_LAND,
            9 => GPUWIRE_LOR,
            10 => GPUWIRE_LXOR,
            11 => GPUWIRE_MINLOC,
            12 => GPUWIRE_MAXLOC,
            _ => return Err(Error::InvalidArgument(format!("reduction code {v} is not a gpuwire_op (valid codes are 0..=12)"))),
        })
    }

    pub fn name(self) -> &'static str {
        use ReduceOp::*;
        match self {
            GPUWIRE_SUM => "SUM",
            GPUWIRE_PROD => "PROD",
            GPUWIRE_MAX => "MAX",
            GPUWIRE_MIN => "MIN",
            GPUWIRE_AVG => "AVG",
            GPUWIRE_BAND => "BAND",
            GPUWIRE_BOR => "BOR",
            GPUWIRE_BXOR => "BXOR",
            GPUWIRE_LAND => "LAND",
            GPUWIRE_LOR => "LOR",
            GPUWIRE_LXOR => "LXOR",
            GPUWIRE_MINLOC => "MINLOC",
            GPUWIRE_MAXLOC => "MAXLOC",
        }
    }

    pub fn is_bitwise(self) -> bool {
        matches!(self, ReduceOp::GPUWIRE_BAND | ReduceOp::GPUWIRE_BOR | ReduceOp::GPUWIRE_BXOR)
    }

    pub fn is_logical(self) -> bool {
        matches!(self, ReduceOp::GPUWIRE_LAND | ReduceOp::GPUWIRE_LOR | ReduceOp::GPUWIRE_LXOR)
    }

    /// MINLOC and MAXLOC, the operations of the pair datatypes.
    pub fn is_loc(self) -> bool {
        matches!(self, ReduceOp::GPUWIRE_MINLOC | ReduceOp::GPUWIRE_MAXLOC)
    }

    /// Whether this operation is defined on `dtype`. The same answer on every backend: MIN/MAX
    /// have no meaning on complex numbers, bitwise and logical operations none on floating
    /// point; MINLOC/MAXLOC are the pair datatypes' only operations, and theirs only.
    #[inline]
    pub fn check_supported(self, dtype: Dtype) -> Result<()> {
        let complex_order = dtype.is_complex() && matches!(self, ReduceOp::GPUWIRE_MIN | ReduceOp::GPUWIRE_MAX);
        if dtype.is_pair() != self.is_loc() || complex_order || ((self.is_bitwise() || self.is_logical()) && !dtype.is_integer()) {
            return Err(self.unsupported(dtype));
        }
        Ok(())
    }

    /// Why `check_supported` refused this operation on `dtype`.
    #[cold]
    #[inline(never)]
    fn unsupported(self, dtype: Dtype) -> Error {
        if dtype.is_pair() != self.is_loc() {
            return Error::UnsupportedOp(if self.is_loc() {
                format!(
                    "{} is defined on the (value, index) pair datatypes only (GPUWIRE_FLOAT32_INT32, GPUWIRE_FLOAT64_INT32, GPUWIRE_INT32_INT32, as MPI_FLOAT_INT, MPI_DOUBLE_INT, MPI_2INT), not on {}",
                    self.name(),
                    dtype.name()
                )
            } else {
                format!("{} is not defined on the pair datatype {} (its reductions are MINLOC and MAXLOC)", self.name(), dtype.name())
            });
        }
        if dtype.is_complex() && matches!(self, ReduceOp::GPUWIRE_MIN | ReduceOp::GPUWIRE_MAX) {
            return Error::UnsupportedOp(format!(
                "{} is not defined on {} (complex numbers are not ordered)",
                self.name(),
                dtype.name()
            ));
        }
        // A bitwise or logical operation on a datatype that is not an integer.
        Error::UnsupportedOp(format!(
            "{} is defined on integer datatypes only, not on {}",
            self.name(),
            dtype.name()
        ))
    }
}

impl Space {
    pub fn from_c(v: i32) -> Result<Space> {
        use Space::*;
        Ok(match v {
            0 => GPUWIRE_SPACE_AUTO,
            1 => GPUWIRE_SPACE_HOST,
            2 => GPUWIRE_SPACE_DEVICE,
            3 => GPUWIRE_SPACE_PINNED,
            4 => GPUWIRE_SPACE_MANAGED,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "memory space code {v} is not a gpuwire_space (valid codes are 0..=4)"
                )));
            }
        })
    }

    /// Memory the CPU can read directly (MPI can take it on every backend).
    pub fn is_host_accessible(self) -> bool {
        matches!(self, Space::GPUWIRE_SPACE_HOST | Space::GPUWIRE_SPACE_PINNED)
    }

    pub fn name(self) -> &'static str {
        use Space::*;
        match self {
            GPUWIRE_SPACE_AUTO => "auto",
            GPUWIRE_SPACE_HOST => "host",
            GPUWIRE_SPACE_DEVICE => "device",
            GPUWIRE_SPACE_PINNED => "pinned",
            GPUWIRE_SPACE_MANAGED => "managed",
        }
    }
}

impl BackendKind {
    pub fn from_c(v: i32) -> Result<BackendKind> {
        use BackendKind::*;
        Ok(match v {
            0 => GPUWIRE_BACKEND_AUTO,
            1 => GPUWIRE_BACKEND_HOST,
            2 => GPUWIRE_BACKEND_MPI_STAGED,
            3 => GPUWIRE_BACKEND_MPI_CUDA_AWARE,
            4 => GPUWIRE_BACKEND_NCCL,
            5 => GPUWIRE_BACKEND_IPC,
            6 => GPUWIRE_BACKEND_HIER,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "backend code {v} is not a gpuwire_backend (valid codes are 0..=6)"
                )));
            }
        })
    }

    /// Parses the value of GPUWIRE_BACKEND (case-insensitive; "auto", "host", "mpi_staged" or
    /// "staged", "mpi_cuda_aware" or "cuda_aware", "nccl", "ipc", "hier" or "hierarchical").
    pub fn parse(s: &str) -> Option<BackendKind> {
        use BackendKind::*;
        Some(match s.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "auto" => GPUWIRE_BACKEND_AUTO,
            "host" => GPUWIRE_BACKEND_HOST,
            "mpi_staged" | "staged" => GPUWIRE_BACKEND_MPI_STAGED,
            "mpi_cuda_aware" | "cuda_aware" => GPUWIRE_BACKEND_MPI_CUDA_AWARE,
            "nccl" => GPUWIRE_BACKEND_NCCL,
            "ipc" => GPUWIRE_BACKEND_IPC,
            "hier" | "hierarchical" => GPUWIRE_BACKEND_HIER,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        use BackendKind::*;
        match self {
            GPUWIRE_BACKEND_AUTO => "AUTO",
            GPUWIRE_BACKEND_HOST => "HOST",
            GPUWIRE_BACKEND_MPI_STAGED => "MPI_STAGED",
            GPUWIRE_BACKEND_MPI_CUDA_AWARE => "MPI_CUDA_AWARE",
            GPUWIRE_BACKEND_NCCL => "NCCL",
            GPUWIRE_BACKEND_IPC => "IPC",
            GPUWIRE_BACKEND_HIER => "HIER",
        }
    }
}

impl Partition {
    pub fn from_c(v: i32) -> Result<Partition> {
        match v {
            0 => Ok(Partition::GPUWIRE_PARTITION_SCATTER),
            1 => Ok(Partition::GPUWIRE_PARTITION_BROADCAST),
            _ => Err(Error::InvalidArgument(format!(
                "partition code {v} is not a gpuwire_partition (0 = SCATTER, 1 = BROADCAST)"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Partition::GPUWIRE_PARTITION_SCATTER => "SCATTER",
            Partition::GPUWIRE_PARTITION_BROADCAST => "BROADCAST",
        }
    }
}

impl NormKind {
    pub fn from_c(v: i32) -> Result<NormKind> {
        match v {
            0 => Ok(NormKind::GPUWIRE_NORM_INF),
            1 => Ok(NormKind::GPUWIRE_NORM_1),
            2 => Ok(NormKind::GPUWIRE_NORM_2),
            _ => Err(Error::InvalidArgument(format!(
                "norm code {v} is not a gpuwire_norm (0 = GPUWIRE_NORM_INF, 1 = GPUWIRE_NORM_1, 2 = GPUWIRE_NORM_2)"
            ))),
        }
    }
}

impl Staging {
    pub fn from_c(v: i32) -> Result<Staging> {
        match v {
            0 => Ok(Staging::GPUWIRE_STAGING_PINNED),
            1 => Ok(Staging::GPUWIRE_STAGING_PAGEABLE),
            _ => Err(Error::InvalidArgument(format!(
                "staging code {v} is not a gpuwire_staging (0 = pinned, 1 = pageable)"
            ))),
        }
    }
}

impl P2pMatching {
    pub fn from_c(v: i32) -> Result<P2pMatching> {
        match v {
            0 => Ok(P2pMatching::GPUWIRE_P2P_MATCHING_BACKEND),
            1 => Ok(P2pMatching::GPUWIRE_P2P_MATCHING_MPI),
            _ => Err(Error::InvalidArgument(format!(
                "config.p2p_matching = {v}: expected a gpuwire_p2p_matching (0 = backend, 1 = mpi)"
            ))),
        }
    }
}

impl ThreadLevel {
    pub fn name(self) -> &'static str {
        match self {
            ThreadLevel::GPUWIRE_THREAD_SINGLE => "MPI_THREAD_SINGLE",
            ThreadLevel::GPUWIRE_THREAD_FUNNELED => "MPI_THREAD_FUNNELED",
            ThreadLevel::GPUWIRE_THREAD_SERIALIZED => "MPI_THREAD_SERIALIZED",
            ThreadLevel::GPUWIRE_THREAD_MULTIPLE => "MPI_THREAD_MULTIPLE",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_codes_roundtrip_and_sizes() {
        for (i, d) in Dtype::ALL.iter().enumerate() {
            assert_eq!(*d as i32, i as i32);
            assert_eq!(Dtype::from_c(i as i32).unwrap(), *d);
        }
        assert!(Dtype::from_c(999).is_err());
        assert!(Dtype::from_c(-1).is_err());
        assert_eq!(Dtype::GPUWIRE_COMPLEX128.size(), 16);
        assert_eq!(Dtype::GPUWIRE_BFLOAT16.size(), 2);
        assert!(Dtype::GPUWIRE_UINT64.is_integer());
        assert!(!Dtype::GPUWIRE_FLOAT16.is_integer());
        // Every size (read from a constant), written out in `ALL`'s order.
        let sizes = [1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 8, 16, 8, 16, 8];
        for (d, want) in Dtype::ALL.iter().zip(sizes) {
            assert_eq!(d.size(), want, "{d:?}");
        }
    }

    #[test]
    fn op_codes_roundtrip() {
        for (i, op) in ReduceOp::ALL.iter().enumerate() {
            assert_eq!(*op as i32, i as i32);
            assert_eq!(ReduceOp::from_c(i as i32).unwrap(), *op);
        }
        for bad in [-1, 13, i32::MAX, i32::MIN] {
            assert!(ReduceOp::from_c(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn op_support_matrix() {
        use ReduceOp::*;
        assert!(GPUWIRE_MAX.check_supported(Dtype::GPUWIRE_COMPLEX64).is_err());
        assert!(GPUWIRE_PROD.check_supported(Dtype::GPUWIRE_COMPLEX64).is_ok());
        assert!(GPUWIRE_BXOR.check_supported(Dtype::GPUWIRE_FLOAT32).is_err());
        assert!(GPUWIRE_BXOR.check_supported(Dtype::GPUWIRE_INT8).is_ok());
        assert!(GPUWIRE_LAND.check_supported(Dtype::GPUWIRE_FLOAT32).is_err());
        assert!(GPUWIRE_LXOR.check_supported(Dtype::GPUWIRE_UINT64).is_ok());
        assert!(GPUWIRE_MINLOC.check_supported(Dtype::GPUWIRE_FLOAT64_INT32).is_ok());
        assert!(GPUWIRE_MINLOC.check_supported(Dtype::GPUWIRE_INT32).is_err());
        assert!(GPUWIRE_SUM.check_supported(Dtype::GPUWIRE_INT32_INT32).is_err());
        assert_eq!(Dtype::GPUWIRE_FLOAT64_INT32.size(), 16);
        assert!(ReduceOp::from_c(13).is_err());
    }

    #[test]
    fn backend_names_parse() {
        for b in 0..=6 {
            let k = BackendKind::from_c(b).unwrap();
            assert_eq!(BackendKind::parse(k.name()), Some(k));
        }
        assert_eq!(BackendKind::parse("Staged"), Some(BackendKind::GPUWIRE_BACKEND_MPI_STAGED));
        assert_eq!(BackendKind::parse("gpu"), None);
        assert_eq!(BackendKind::parse(" IPC "), Some(BackendKind::GPUWIRE_BACKEND_IPC));
        assert_eq!(BackendKind::parse("Hierarchical"), Some(BackendKind::GPUWIRE_BACKEND_HIER));
        assert!(BackendKind::from_c(7).is_err());
    }
}
