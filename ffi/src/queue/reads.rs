//! A queue and its reads: the handle, what each queued read holds, and how
//! a flush polls them and calls their callbacks in order.

use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use leechio_rs::{Memory, PartialError};

use crate::error::Fail;
use crate::handle::Handle;
use crate::leechio_status::{self, *};
use crate::ops::{failures, fragments, leechio_fragment};

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
    /// An empty queue on `mem`.
    pub(super) fn new(mem: Memory) -> leechio_queue {
        leechio_queue {
            mem,
            fresh: RefCell::default(),
            active: RefCell::default(),
            flushing: Cell::new(false),
            completing: Cell::new(0),
            freeing: Cell::new(false),
            next_seq: Cell::new(0),
        }
    }

    /// The engine the queue's reads go to.
    pub(super) fn memory(&self) -> &Memory {
        &self.mem
    }

    /// Whether a flush is running (or the queue is being freed).
    pub(super) fn is_flushing(&self) -> bool {
        self.flushing.get()
    }

    /// Cancels every read still queued, for `leechio_queue_free`: each
    /// callback is called once with `queue` NULL and `LEECHIO_NOT_ISSUED`.
    ///
    /// # Safety
    /// Every read's callback must be safe to call with its context.
    pub(super) unsafe fn cancel_all(&self) {
        // Busy while cancelling: the callbacks may not flush, free or queue.
        self.flushing.set(true);
        self.freeing.set(true);
        let mut reads = self.active.take();
        reads.append(&mut self.fresh.take());
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
    }

    pub(super) fn push(
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
    pub(super) fn flush(&self, handle: *mut leechio_queue) -> Result<usize, Fail> {
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

    pub(super) fn pending(&self) -> usize {
        self.fresh.borrow().len() + self.active.borrow().len() + self.completing.get()
    }
}

/// The error of a flush asked for from a completion callback.
pub(super) fn flushing() -> Fail {
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
