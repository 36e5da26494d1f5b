//! gpuwire_init, gpuwire_finalize and their queries.

use crate::error::gpuwire_status;
use crate::ffi::boundary::{call, non_null, write};
use crate::runtime;
use crate::types::ThreadLevel;

/// Initializes gpuwire. If MPI is not initialized yet, gpuwire initializes it asking for
/// MPI_THREAD_MULTIPLE (see gpuwire_query_thread for what was provided) and will finalize it in
/// gpuwire_finalize; if the program already initialized MPI, gpuwire adopts it and never
/// finalizes it. Calling it again while initialized does nothing.
///
/// Collective over MPI_COMM_WORLD when it initializes MPI (as MPI_Init_thread); call it from one
/// thread. Under MPI_THREAD_FUNNELED or MPI_THREAD_SINGLE only MPI's main thread may call
/// gpuwire (calls from other threads return GPUWIRE_ERROR_INVALID_ARGUMENT); under
/// MPI_THREAD_SERIALIZED gpuwire serializes its own MPI calls. Errors:
/// GPUWIRE_ERROR_ALREADY_FINALIZED after gpuwire_finalize or after the program finalized MPI;
/// GPUWIRE_ERROR_MPI if MPI fails to initialize; GPUWIRE_ERROR_INVALID_ARGUMENT when called from
/// a thread other than MPI's main thread under FUNNELED or SINGLE.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_init() -> gpuwire_status {
    call("gpuwire_init", || {
        runtime::init(at_mpi_finalize)?;
        // The progress engine runs only where MPI allows calls from its thread.
        crate::engine::set_thread_multiple(runtime::ensure_ready()?.thread_level == ThreadLevel::GPUWIRE_THREAD_MULTIPLE);
        Ok(())
    })
}

/// Finalizes gpuwire: every handle becomes invalid (communicators are freed, buffers and
/// completed requests released), then MPI is finalized if and only if gpuwire initialized it.
/// gpuwire cannot be initialized again in the same process.
///
/// Every request should be completed (a wait or test) or freed first, as MPI_Finalize requires.
/// A request still in flight is given up: a receive whose message has not come is posted to MPI
/// as a plain receive (as a plain MPI program's receive left pending, it may still take its
/// sender's message, so that a sender blocked on it completes), and the buffers of every
/// operation that MPI or a peer may still read or write are kept, never freed, for the rest of
/// the process (also where the program freed their handles; a receive of checking mode is
/// withdrawn); gpuwire (and MPI, where gpuwire initialized it) is finalized all the same, and the
/// call returns GPUWIRE_ERROR_INVALID_ARGUMENT saying how many there were. So it does where the
/// calling thread's group is still open (gpuwire_group_start without its gpuwire_group_end): the
/// group's operations never start (on NCCL, those issued at their calls are launched), their
/// requests fail, and the message says how many there were.
///
/// Collective over MPI_COMM_WORLD (as MPI_Finalize); call it from one thread once no other thread
/// uses gpuwire. Errors: GPUWIRE_ERROR_NOT_INITIALIZED, GPUWIRE_ERROR_ALREADY_FINALIZED,
/// GPUWIRE_ERROR_MPI, GPUWIRE_ERROR_INVALID_ARGUMENT (requests in flight, a group left open,
/// above).
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_finalize() -> gpuwire_status {
    call("gpuwire_finalize", || {
        // The operations of a group the calling thread left open never start (`group::abandon_at_finalize`).
        let abandoned = std::cell::Cell::new(0);
        let drain_first = || {
            abandoned.set(crate::group::abandon_at_finalize());
            drain();
        };
        runtime::finalize(drain_first, || release_all(abandoned.get()))
    })
}

/// Operations still queued on progress engines finish first (they need MPI and the handles).
fn drain() {
    crate::engine::drain_all();
}

/// MPI_Finalize began (the program's, without gpuwire_finalize, or gpuwire_finalize's own, with
/// nothing left), while MPI still works: the engines' queued operations run and the progress
/// thread stops, so that neither is inside MPI while MPI_Finalize tears it down.
fn at_mpi_finalize() {
    // The progress thread first: the engines' waits progress their own receives.
    crate::progress::shutdown();
    drain();
}

/// gpuwire_finalize, once every handle is invalid: releases every object of gpuwire. A request
/// still in flight, or `abandoned` operations of a group left open, are an error, returned once
/// MPI is finalized (`runtime::finalize`).
fn release_all(abandoned: usize) -> crate::error::Result<()> {
    // The progress thread makes MPI calls: joined before anything is released.
    crate::progress::shutdown();
    // Dropping a request in flight would free its buffers under MPI (a send read from freed
    // memory: a segfault, or another allocation's data sent).
    // A receive still deferred is posted to MPI rather than withdrawn: its sender may be
    // waiting for it (both ranks hung in MPI_Finalize).
    let (in_flight, posted) = crate::request::settle_at_finalize(crate::request::REQUESTS.drain(), crate::backend::p2p::post_deferred_at_finalize);
    drop(crate::darray::DARRAYS.drain());
    drop(crate::buffer::BUFFERS.drain());
    drop(crate::comm::COMMS.drain());
    // Objects freed while another thread was inside a call (`crate::pin`): dropped now, unless
    // a thread is still inside one.
    crate::pin::reclaim();
    // IPC mappings are shared by communicators; whatever the last free left open closes here.
    crate::backend::ipc::close_all_mappings();
    if in_flight == 0 && abandoned == 0 {
        return Ok(());
    }
    let owns_mpi = runtime::owns_mpi();
    let group = match abandoned {
        0 => String::new(),
        1 => "1 operation of a group left open (gpuwire_group_start without its gpuwire_group_end) never started; ".into(),
        k => format!("{k} operations of a group left open (gpuwire_group_start without its gpuwire_group_end) never started; "),
    };
    let requests = match in_flight {
        0 => String::new(),
        k => format!(
            "{k} request{} still in flight (neither completed by a wait or test nor freed): given up, the buffers that MPI or a peer may still use kept for the rest of the process{}. ",
            if k == 1 { " was" } else { "s were" },
            match posted {
                0 => String::new(),
                1 => "; 1 receive still waiting for its message (of these, or of a freed request) was posted to MPI as a plain receive".into(),
                k => format!("; {k} receives still waiting for their messages (of these, or of freed requests) were posted to MPI as plain receives"),
            },
        ),
    };
    Err(crate::error::Error::InvalidArgument(format!(
        "{group}{requests}gpuwire{} finalized all the same; end every group and complete or free every request first, as MPI_Finalize requires",
        if owns_mpi { " and MPI were" } else { " was" }
    )))
}

/// Writes 1 to `*flag` if gpuwire is initialized and not finalized, else 0. Works at any time.
///
/// Errors: GPUWIRE_ERROR_NULL_ARGUMENT.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_initialized(flag: *mut i32) -> gpuwire_status {
    call("gpuwire_initialized", || {
        non_null(flag, "flag")?;
        write(flag, runtime::is_ready() as i32);
        Ok(())
    })
}

/// Writes the MPI thread level in effect (a gpuwire_thread_level) to `*provided`: what
/// MPI_Init_thread provided when gpuwire initialized MPI, else what MPI_Query_thread reports.
///
/// Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_NOT_INITIALIZED,
/// GPUWIRE_ERROR_ALREADY_FINALIZED.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_query_thread(provided: *mut i32) -> gpuwire_status {
    call("gpuwire_query_thread", || {
        non_null(provided, "provided")?;
        let info = runtime::ensure_ready()?;
        write(provided, info.thread_level as i32);
        Ok(())
    })
}

/// Writes 1 to `*flag` if gpuwire initialized MPI itself (and will finalize it), 0 if it
/// adopted an MPI the program initialized.
///
/// Errors: GPUWIRE_ERROR_NULL_ARGUMENT, GPUWIRE_ERROR_NOT_INITIALIZED,
/// GPUWIRE_ERROR_ALREADY_FINALIZED.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwire_owns_mpi(flag: *mut i32) -> gpuwire_status {
    call("gpuwire_owns_mpi", || {
        non_null(flag, "flag")?;
        let info = runtime::ensure_ready()?;
        write(flag, info.owns_mpi as i32);
        Ok(())
    })
}
