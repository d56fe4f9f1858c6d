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

use crate::handle::Handle;
use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use leechio_rs::{Memory, PartialError};

use crate::device::leechio_device;
use crate::error::{guard, guard_value, non_null, Fail};
use crate::leechio_status::{self, *};
use crate::ops::{failures, fragments, leechio_fragment};
use crate::space::leechio_space;

/// A queue of reads on one device, flushed by the caller. Use it from one
/// thread at a time. Free it with `leechio_queue_free`.
pub struct leechio_queue {
    mem: Memory,
    /// Reads queued since the current or last flush started.
    fresh: RefCell<Vec<Pending>>,
    /// Reads sent and not yet complete (virtual reads between walk levels).
    active: RefCell<Vec<Pending>>,
    /// A flush is running: callbacks may queue, not flush or free.
    flushing: Cell<bool>,
    /// `leechio_queue_free` is cancelling the reads: nothing may be queued.
    freeing: Cell<bool>,
    /// Completed reads of the running flush whose callbacks have not run.
    completing: Cell<usize>,
    /// Sequence number of the next queued read, so that callbacks run in
    /// the order reads were queued, whichever poll finished them.
    next_seq: Cell<u64>,
}

/// A completed queued read, as its callback sees it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct leechio_completion {
    /// The address that was read (physical, or virtual for
    /// `leechio_queue_read_virtual`).
    pub address: u64,
    /// The caller's buffer: the bytes that were read are in it, failed
    /// bytes are untouched.
    pub buffer: *mut u8,
    /// Number of bytes asked for.
    pub length: usize,
    /// `LEECHIO_OK` when every byte was read, else `LEECHIO_INCOMPLETE`
    /// (or `LEECHIO_NOT_ISSUED` for a read cancelled by `leechio_queue_free`).
    pub status: leechio_status,
    /// Always 0: explicit padding, so that every byte of the struct is
    /// defined (it may be compared with `memcmp` or hashed).
    pub padding: u32,
    /// The fragments of the read, covering it in order (`op` is 0).
    pub fragments: *const leechio_fragment,
    /// Number of fragments.
    pub fragment_count: usize,
}

/// Called once for each queued read, when it completes. `queue` is the
/// queue, on which the callback may queue more reads (they go in the next
/// flush); it is NULL when the read is cancelled because the queue is being
/// freed. `completion` and its fragments are valid only during the call.
///
/// It runs on the thread that flushes (or frees) the queue, and may call
/// any function of this library, on the same device and spaces too (a
/// synchronous read, a translation, closing a handle: the queue keeps what
/// it uses), except flushing, running or freeing its own queue
/// (`LEECHIO_BUSY`; nothing happens).
pub type leechio_completion_fn = Option<
    unsafe extern "C" fn(
        context: *mut c_void,
        queue: *mut leechio_queue,
        completion: *const leechio_completion,
    ),
>;

type ReadFuture = Pin<Box<dyn Future<Output = (Vec<u8>, Result<(), PartialError>)>>>;

/// A queued read: the engine future, and whom to tell.
struct Pending {
    seq: u64,
    future: ReadFuture,
    target: Target,
}

/// Where a read's bytes go and whose callback hears of it.
struct Target {
    address: u64,
    buffer: *mut u8,
    length: usize,
    callback: unsafe extern "C" fn(*mut c_void, *mut leechio_queue, *const leechio_completion),
    context: *mut c_void,
}

/// A finished read, waiting for its callback.
struct Done {
    read: Pending,
    data: Vec<u8>,
    result: Result<(), PartialError>,
}

impl Handle for leechio_queue {
    const NAME: &'static str = "queue";
}

/// A zeroed buffer of `len` bytes, or `LEECHIO_NO_MEMORY` instead of an
/// abort when C asks for more than can be had.
fn zeroed(len: usize) -> Result<Vec<u8>, Fail> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| {
        Fail::new(
            LEECHIO_NO_MEMORY,
            format!("cannot allocate {len:#x} bytes for the read"),
        )
    })?;
    v.resize(len, 0);
    Ok(v)
}

impl leechio_queue {
    fn push(
        &self,
        address: u64,
        buffer: *mut u8,
        length: usize,
        callback: leechio_completion_fn,
        context: *mut c_void,
        future: impl FnOnce(Vec<u8>) -> ReadFuture,
    ) -> Result<(), Fail> {
        let Some(callback) = callback else {
            return Err(Fail::new(LEECHIO_NULL_ARGUMENT, "`callback` is NULL"));
        };
        if self.freeing.get() {
            return Err(Fail::new(LEECHIO_BUSY, "the queue is being freed"));
        }
        if buffer.is_null() && length > 0 {
            return Err(Fail::new(LEECHIO_NULL_ARGUMENT, "`buffer` is NULL"));
        }
        if length > isize::MAX as usize {
            return Err(Fail::new(LEECHIO_INVALID_ARGUMENT, "`length` is too large"));
        }
        let future = future(zeroed(length)?);
        let seq = self.next_seq.get();
        self.next_seq.set(seq + 1);
        self.fresh.borrow_mut().push(Pending {
            seq,
            future,
            target: Target {
                address,
                buffer,
                length,
                callback,
                context,
            },
        });
        Ok(())
    }

    /// One flush: see `leechio_queue_flush`. Returns the number of
    /// callbacks called.
    fn flush(&self, handle: *mut leechio_queue) -> Result<usize, Fail> {
        if self.flushing.replace(true) {
            return Err(flushing());
        }
        // Cleared however this returns, panics included.
        struct Reset<'a>(&'a leechio_queue);
        impl Drop for Reset<'_> {
            fn drop(&mut self) {
                self.0.flushing.set(false);
                self.0.completing.set(0);
            }
        }
        let _reset = Reset(self);

        let mut reads = std::mem::take(&mut *self.active.borrow_mut());
        reads.append(&mut self.fresh.borrow_mut());
        let mut done = Vec::new();
        // Polling queues each new read's request in the engine; reads still
        // waiting after it are sent by the engine flush, then polled again.
        let mut reads = poll_all(reads, &mut done);
        if !reads.is_empty() {
            self.mem.flush();
            reads = poll_all(reads, &mut done);
        }
        *self.active.borrow_mut() = reads;

        done.sort_unstable_by_key(|d| d.read.seq);
        let completed = done.len();
        self.completing.set(completed);
        for Done { read, data, result } in done {
            self.completing.set(self.completing.get() - 1);
            let read = read.target;
            let failed = failures(&result);
            copy_read(&read, &data, failed);
            let status = if failed.is_empty() {
                LEECHIO_OK
            } else {
                LEECHIO_INCOMPLETE
            };
            // SAFETY: the callback and its context come from the caller of
            // `leechio_queue_read`, who vouched for them.
            unsafe { complete(&read, handle, status, &fragments(0, read.length, failed)) };
        }
        Ok(completed)
    }

    fn pending(&self) -> usize {
        self.fresh.borrow().len() + self.active.borrow().len() + self.completing.get()
    }
}

/// The error of a flush asked for from a completion callback.
fn flushing() -> Fail {
    Fail::new(
        LEECHIO_BUSY,
        "the queue is flushing: a completion callback may queue reads, not flush",
    )
}

/// Polls each read once; finished ones go to `done`, the rest come back.
fn poll_all(reads: Vec<Pending>, done: &mut Vec<Done>) -> Vec<Pending> {
    // The queue re-polls every waiting read on each flush, so nothing needs
    // to be woken.
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    let mut waiting = Vec::with_capacity(reads.len());
    for mut read in reads {
        match read.future.as_mut().poll(&mut cx) {
            Poll::Ready((data, result)) => done.push(Done { read, data, result }),
            Poll::Pending => waiting.push(read),
        }
    }
    waiting
}

/// Copies the bytes that were read from the engine's buffer into the
/// caller's, leaving failed bytes untouched.
fn copy_read(read: &Target, data: &[u8], failed: &[leechio_rs::Failure]) {
    for f in fragments(0, read.length, failed) {
        if f.status == LEECHIO_OK {
            // SAFETY: `buffer` holds `length` bytes (the caller's contract)
            // and the fragment lies inside both buffers. Raw copies make no
            // Rust reference to the caller's memory, so buffers shared by
            // several queued reads are no aliasing hazard.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    data.as_ptr().add(f.offset),
                    read.buffer.add(f.offset),
                    f.length,
                )
            };
        }
    }
}

/// Calls a read's callback.
///
/// # Safety
/// The read's callback must be safe to call with its context.
unsafe fn complete(
    read: &Target,
    queue: *mut leechio_queue,
    status: leechio_status,
    fragments: &[leechio_fragment],
) {
    let completion = leechio_completion {
        address: read.address,
        buffer: read.buffer,
        length: read.length,
        status,
        padding: 0,
        fragments: fragments.as_ptr(),
        fragment_count: fragments.len(),
    };
    // SAFETY: the caller's contract; `completion` lives across the call.
    unsafe { (read.callback)(read.context, queue, &completion) };
}

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
        let queue = leechio_queue {
            mem: d.mem.clone(),
            fresh: RefCell::default(),
            active: RefCell::default(),
            flushing: Cell::new(false),
            completing: Cell::new(0),
            freeing: Cell::new(false),
            next_seq: Cell::new(0),
        };
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
        if unsafe { leechio_queue::lend(queue)? }.flushing.get() {
            return Err(Fail::new(
                LEECHIO_BUSY,
                "a queue cannot be freed from its own completion callback",
            ));
        }
        // SAFETY: the caller's contract.
        let q = unsafe { leechio_queue::lend(queue)? };
        // Busy while cancelling: the callbacks may not flush, free or queue.
        q.flushing.set(true);
        q.freeing.set(true);
        let mut reads = q.active.take();
        reads.append(&mut q.fresh.take());
        reads.sort_unstable_by_key(|r| r.seq);
        for Pending { future, target, .. } in reads {
            // The engine request (if any) is withdrawn before C hears of it.
            drop(future);
            let cancelled = [leechio_fragment {
                op: 0,
                offset: 0,
                length: target.length,
                status: LEECHIO_NOT_ISSUED,
                padding: 0,
            }];
            let fragments = if target.length == 0 {
                &[][..]
            } else {
                &cancelled[..]
            };
            // SAFETY: the callback's contract from `leechio_queue_read`.
            unsafe { complete(&target, std::ptr::null_mut(), LEECHIO_NOT_ISSUED, fragments) };
        }
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
        let mem = q.mem.clone();
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
            == Arc::as_ptr(q.mem.backend()).cast::<()>();
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
        if q.flushing.get() {
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
