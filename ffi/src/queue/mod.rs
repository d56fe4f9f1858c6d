//! Queued reads: add many, each with its own completion callback, and send
//! them all with one flush. A callback may queue follow-up reads; they go
//! in the next flush, so C code chasing N pointer chains of depth D costs
//! D flushes, not N x D.
//!
//! Each queued read is an engine future, so the engine's own queue,
//! batching and ordering do the work: a flush polls every new future (which
//! queues its request), makes one engine flush (one device call), and
//! polls again to collect what completed. A virtual read is a future too:
//! its page walk advances one level per flush and its callback runs when
//! the data is in.
//!
//! This file is the C API of a queue; `reads` is the queue and its reads.

mod reads;

use std::ffi::c_void;
use std::sync::Arc;

pub use reads::{leechio_completion, leechio_completion_fn, leechio_queue};

use crate::device::leechio_device;
use crate::error::{guard, guard_value, non_null, Fail};
use crate::handle::Handle;
use crate::leechio_status::{self, *};
use crate::space::leechio_space;
use reads::flushing;

/// Creates an empty queue of reads on `device`'s engine. The queue keeps
/// the device open until it is freed.
///
/// NULL: neither `device` nor `out` may be NULL (`LEECHIO_NULL_ARGUMENT`).
///
/// # Safety
/// `device` must be a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn leechio_queue_new(
    device: *const leechio_device,
    out: *mut *mut leechio_queue,
) -> leechio_status {
    guard("leechio_queue_new", || {
        non_null(out, "out")?;
        // SAFETY: checked non-NULL; NULL on failure.
        unsafe { *out = std::ptr::null_mut() };
        // SAFETY: the caller's contract.
        let d = unsafe { leechio_device::lend(device)? };
        let queue = leechio_queue::new(d.mem.clone());
        // SAFETY: checked non-NULL.
        unsafe { queue.give(out) };
        Ok(())
    })
}

/// Frees a queue. Reads still queued are cancelled: each callback is
/// called once with `queue` NULL and status `LEECHIO_NOT_ISSUED`, so every
/// context can be released; those callbacks may not queue, flush or free
/// (`leechio_queue_read` returns `LEECHIO_BUSY`), and the queue is gone
/// when this returns. NULL is ignored. Calling this from one of the
/// queue's own callbacks is refused (nothing is freed; the last error says
/// so).
///
/// # Safety
/// `queue` must be NULL or a handle from `leechio_queue_new`, not used
/// again after it is freed.
#[no_mangle]
pub unsafe extern "C" fn leechio_queue_free(queue: *mut leechio_queue) {
    guard("leechio_queue_free", || {
        if queue.is_null() {
            return Ok(());
        }
        // SAFETY: the caller's contract.
        if unsafe { leechio_queue::lend(queue)? }.is_flushing() {
            return Err(Fail::new(
                LEECHIO_BUSY,
                "a queue cannot be freed from its own completion callback",
            ));
        }
        // SAFETY: the caller's contract.
        let q = unsafe { leechio_queue::lend(queue)? };
        // SAFETY: the callbacks' contract from `leechio_queue_read`.
        unsafe { q.cancel_all() };
        // SAFETY: a handle freed once, after its last use.
        unsafe { leechio_queue::free(queue) };
        Ok(())
    });
}

/// Queues a read of `length` bytes of physical memory at `address` into
/// `buffer`. Nothing is sent until `leechio_queue_flush` or
/// `leechio_queue_run`; then `callback` is called once with `context`
/// when the read completes. `buffer` must stay valid until then; several
/// queued reads may share or overlap buffers (bytes are copied in just
/// before each callback).
///
/// NULL: `buffer` may be NULL when `length` is 0, and `context` always (it
/// is only passed on); `queue` and `callback` may not
/// (`LEECHIO_NULL_ARGUMENT`).
///
/// # Safety
/// `queue` must be a live handle; a non-NULL `buffer` writable for
/// `length` bytes until the callback; `callback` safe to call with
/// `context`.
#[no_mangle]
pub unsafe extern "C" fn leechio_queue_read(
    queue: *mut leechio_queue,
    address: u64,
    buffer: *mut u8,
    length: usize,
    callback: leechio_completion_fn,
    context: *mut c_void,
) -> leechio_status {
    guard("leechio_queue_read", || {
        // SAFETY: the caller's contract.
        let q = unsafe { leechio_queue::lend(queue)? };
        let mem = q.memory().clone();
        q.push(address, buffer, length, callback, context, |buf| {
            Box::pin(async move { mem.read_into_owned(address, buf).await })
        })
    })
}

/// Queues a read of `length` bytes of virtual memory at `address` in
/// `space`, like `leechio_queue_read`. Its page walk advances one table
/// level per flush (together with every other walk in flight), so a cold
/// read completes after up to five flushes, a cached one after one.
/// `space` must come from the same device handle as the queue.
///
/// NULL: as for `leechio_queue_read`; `space` may not be NULL either.
///
/// # Safety
/// As for `leechio_queue_read`; `space` must be a live handle.
#[no_mangle]
pub unsafe extern "C" fn leechio_queue_read_virtual(
    queue: *mut leechio_queue,
    space: *const leechio_space,
    address: u64,
    buffer: *mut u8,
    length: usize,
    callback: leechio_completion_fn,
    context: *mut c_void,
) -> leechio_status {
    guard("leechio_queue_read_virtual", || {
        // SAFETY: the caller's contract.
        let (q, s) = unsafe { (leechio_queue::lend(queue)?, leechio_space::lend(space)?) };
        // A space on another engine would queue its requests where this
        // queue's flush never looks: its reads would never complete.
        let same = Arc::as_ptr(s.space.memory().backend()).cast::<()>()
            == Arc::as_ptr(q.memory().backend()).cast::<()>();
        if !same {
            return Err(Fail::new(
                LEECHIO_INVALID_ARGUMENT,
                "the space and the queue come from different device handles",
            ));
        }
        let space = s.space.clone();
        q.push(address, buffer, length, callback, context, |mut buf| {
            Box::pin(async move {
                let result = space.read(address, &mut buf).await;
                (buf, result)
            })
        })
    })
}

/// Sends every queued read in one engine flush (one device call), then
/// calls the callback of each read that completed, in the order they were
/// queued. Reads queued by those callbacks wait for the next flush.
/// `*completed` (if not NULL) gets the number of callbacks called. Calling
/// this from a callback of the same queue returns `LEECHIO_BUSY`.
///
/// NULL: `completed` may be NULL; `queue` may not (`LEECHIO_NULL_ARGUMENT`).
///
/// # Safety
/// `queue` must be a live handle; a non-NULL `completed` writable.
#[no_mangle]
pub unsafe extern "C" fn leechio_queue_flush(
    queue: *mut leechio_queue,
    completed: *mut usize,
) -> leechio_status {
    guard("leechio_queue_flush", || {
        // SAFETY: the caller's contract.
        let n = unsafe { leechio_queue::lend(queue)? }.flush(queue)?;
        if !completed.is_null() {
            // SAFETY: non-NULL; the caller passes a valid pointer.
            unsafe { *completed = n };
        }
        Ok(())
    })
}

/// Flushes until no read is left (callbacks that keep queuing keep it
/// running). `*flushes` (if not NULL) gets the number of flushes made,
/// which is the number of device calls when only reads are queued.
/// Calling this from a callback of the same queue returns `LEECHIO_BUSY`.
///
/// NULL: `flushes` may be NULL; `queue` may not (`LEECHIO_NULL_ARGUMENT`).
///
/// # Safety
/// `queue` must be a live handle; a non-NULL `flushes` writable.
#[no_mangle]
pub unsafe extern "C" fn leechio_queue_run(
    queue: *mut leechio_queue,
    flushes: *mut usize,
) -> leechio_status {
    guard("leechio_queue_run", || {
        // SAFETY: the caller's contract.
        let q = unsafe { leechio_queue::lend(queue)? };
        // (Checked first: from the last callback of a flush, nothing may
        // be pending, and that is no reason to say OK.)
        if q.is_flushing() {
            return Err(flushing());
        }
        let mut n = 0usize;
        while q.pending() > 0 {
            q.flush(queue)?;
            n += 1;
        }
        if !flushes.is_null() {
            // SAFETY: non-NULL; the caller passes a valid pointer.
            unsafe { *flushes = n };
        }
        Ok(())
    })
}

/// The number of queued reads whose callbacks have not run yet (0 for a
/// NULL queue). In a callback, the reads of the same flush whose callbacks
/// come later count, the one being called does not.
///
/// # Safety
/// `queue` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn leechio_queue_pending(queue: *const leechio_queue) -> usize {
    guard_value("leechio_queue_pending", 0, || {
        // SAFETY: the caller's contract.
        Ok(unsafe { leechio_queue::lend(queue)? }.pending())
    })
}
