//! The engine: every read and write is a future; everything waiting at the
//! same moment goes to the device in one scatter call.
//!
//! Requests queue without touching the device. When the future being
//! driven returns `Pending` (nothing more can happen without data), the
//! driver — [`Memory::block_on`], [`Memory::drive`] or [`Memory::driver`] —
//! flushes: it takes the whole queue, makes the fewest backend calls that
//! keep program order, completes every piece and wakes the waiters whose
//! requests completed. The flush runs on the polling thread: no thread hop.
//!
//! The queue lock is not taken per request where it can be avoided: a
//! future polled by a driver on the driver's own thread queues its request
//! in the driver's staging (slots reserved in advance), which joins the
//! queue, in order, before the driver flushes; and a future collects its
//! finished request through the slot's atomic state (see `queue`).

mod flush;
mod join;
mod lent;
mod outcome;
mod queue;
mod request;
mod scope;

use crate::lock::LockRecovering;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::mem::ManuallyDrop;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;

use bytemuck::Pod;

pub use flush::FlushStats;
pub use join::{join_all, JoinAll};

pub(crate) use outcome::merged;
pub use outcome::{Failure, Fragment, PartialError};
pub use request::{
    Fragments, Read, ReadOwned, ReadVal, ScopedRead, ScopedWrite, Write, WriteOwned,
};
pub use scope::Scope;

use crate::backend::Backend;
use flush::Flusher;
use lent::LentBuffer;
use queue::{Kind, NewRequest, Queue, SlotRef, Staging};

/// What a synchronous batch ([`Memory::read_now`], [`Memory::write_now`])
/// did: the failed byte ranges of each operation, and the calls it made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    /// Failed runs as (operation index, failure), by index then offset.
    failed: Vec<(u32, Failure)>,
    /// Requests and backend calls of the batch.
    pub stats: FlushStats,
}

impl BatchOutcome {
    /// Whether every byte of every operation succeeded.
    pub fn is_ok(&self) -> bool {
        self.failed.is_empty()
    }

    /// The failed ranges of operation `op`, in order.
    pub fn failures(&self, op: usize) -> impl Iterator<Item = &Failure> {
        let start = self.failed.partition_point(|(i, _)| (*i as usize) < op);
        self.failed[start..]
            .iter()
            .take_while(move |(i, _)| *i as usize == op)
            .map(|(_, f)| f)
    }

    /// Calls `f` with each run (start, end) of operation `op`, of `len`
    /// bytes, that was read or written, in order.
    pub fn for_each_success(&self, op: usize, len: usize, f: impl FnMut(usize, usize)) {
        outcome::for_each_success(len, self.failures(op), f);
    }

    /// The result of operation `op` of `len` bytes, as a queued request
    /// would report it.
    pub fn result(&self, op: usize, len: usize) -> Result<(), PartialError> {
        let failed: Vec<Failure> = self.failures(op).copied().collect();
        if failed.is_empty() {
            Ok(())
        } else {
            Err(PartialError { failed, len })
        }
    }
}

/// Settings of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// Most scatter entries per backend call (the backend's own limit
    /// applies too). A flush with more entries makes more calls.
    pub max_entries_per_call: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_entries_per_call: usize::MAX,
        }
    }
}

struct Shared {
    backend: Arc<dyn Backend>,
    config: EngineConfig,
    queue: Mutex<Queue>,
    /// One flush at a time, so requests of two flushes never reorder.
    flusher: Mutex<Flusher>,
    /// Tells engines apart in a thread's cached staging (an address could
    /// be reused by a later engine).
    id: u64,
}

/// The next engine's `Shared::id`.
static NEXT_ENGINE_ID: AtomicU64 = AtomicU64::new(0);

/// Physical memory behind a [`Backend`], read and written through futures
/// that are batched automatically. Cheap to clone; clones share one queue.
///
/// ```
/// use leechio::{MemBackend, Memory};
/// let mem = Memory::new(MemBackend::with_address_pattern(1 << 20));
/// let (a, b) = mem.block_on(async {
///     futures::join!(mem.read_val::<u64>(0x1000), mem.read_val::<u64>(0x2008))
/// });
/// assert_eq!((a.unwrap(), b.unwrap()), (0x1000, 0x2008)); // one backend call
/// ```
#[derive(Clone)]
pub struct Memory {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl Memory {
    /// An engine over `backend` with the default settings.
    pub fn new(backend: impl Backend + 'static) -> Memory {
        Memory::with_config(Arc::new(backend), EngineConfig::default())
    }

    /// An engine over a shared backend.
    pub fn with_config(backend: Arc<dyn Backend>, config: EngineConfig) -> Memory {
        Memory {
            shared: Arc::new(Shared {
                backend,
                config,
                queue: Mutex::default(),
                flusher: Mutex::default(),
                id: NEXT_ENGINE_ID.fetch_add(1, Ordering::Relaxed),
            }),
        }
    }

    /// The backend underneath.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.shared.backend
    }

    /// Reads `buf.len()` bytes at `addr` into `buf`. On partial failure,
    /// the bytes read are in `buf`, the failed ones untouched and listed.
    pub fn read<'m, 'b>(&'m self, addr: u64, buf: &'b mut [u8]) -> Read<'m, 'b> {
        Read::new(self, addr, buf)
    }

    /// Reads one plain-old-data value at `addr`.
    pub fn read_val<T: Pod>(&self, addr: u64) -> ReadVal<'_, T> {
        ReadVal::new(self, addr)
    }

    /// Reads `buf.len()` bytes at `addr`; the buffer moves into the engine
    /// (the device fills it directly, no copy) and comes back with the
    /// result.
    pub fn read_into_owned(&self, addr: u64, buf: Vec<u8>) -> ReadOwned<'_> {
        ReadOwned::new(self, addr, buf)
    }

    /// Reads like [`Memory::read`], yielding each page piece with its own
    /// result as it completes (the bytes past the device's end, if any, as
    /// one piece).
    pub fn read_fragments<'m, 'b>(&'m self, addr: u64, buf: &'b mut [u8]) -> Fragments<'m, 'b> {
        Fragments::read(self, addr, buf)
    }

    /// Writes `data` at `addr` (copied into the engine when first polled).
    /// Pieces the device cannot write as they are (unaligned, short) are
    /// read, patched and written back whole, in the same flush.
    pub fn write<'m, 'b>(&'m self, addr: u64, data: &'b [u8]) -> Write<'m, 'b> {
        Write::new(self, addr, data)
    }

    /// Writes one plain-old-data value at `addr`.
    pub fn write_val<'m, 'b, T: Pod>(&'m self, addr: u64, value: &'b T) -> Write<'m, 'b> {
        Write::new(self, addr, bytemuck::bytes_of(value))
    }

    /// Writes `data` at `addr` without copying it; the buffer comes back
    /// with the result.
    pub fn write_from_owned(&self, addr: u64, data: Vec<u8>) -> WriteOwned<'_> {
        WriteOwned::new(self, addr, data)
    }

    /// Writes like [`Memory::write`], yielding each page piece with its
    /// own result (past the device's end, one piece).
    pub fn write_fragments<'m, 'b>(&'m self, addr: u64, data: &'b [u8]) -> Fragments<'m, 'b> {
        Fragments::write(self, addr, data)
    }

    /// Reads every `(address, buffer)` now, in one flush of its own, straight
    /// into the buffers (no copy where the device's entry rules allow),
    /// with the same batching, windows and failure ranges as queued reads.
    /// This is the synchronous path (memflow, C); queued requests are left
    /// for their own flush.
    pub fn read_now<'a>(&self, ops: impl IntoIterator<Item = (u64, &'a mut [u8])>) -> BatchOutcome {
        self.run_now(
            ops.into_iter()
                .map(|(addr, buf)| (Kind::Read, addr, LentBuffer::of_mut(buf))),
        )
    }

    /// Writes every `(address, data)` now, in one flush of its own; only
    /// the given bytes change (partial pieces are read, patched, written).
    pub fn write_now<'a>(&self, ops: impl IntoIterator<Item = (u64, &'a [u8])>) -> BatchOutcome {
        // The flush only reads from a write's buffer.
        self.run_now(
            ops.into_iter()
                .map(|(addr, data)| (Kind::Write, addr, LentBuffer::of(data))),
        )
    }

    fn run_now(&self, ops: impl Iterator<Item = (Kind, u64, LentBuffer)>) -> BatchOutcome {
        let mut flusher = self.shared.flusher.lock_recovering();
        flusher.begin_batch();
        for (kind, addr, buf) in ops {
            // SAFETY: the buffers are slices borrowed by the public callers
            // for the whole of this call.
            unsafe { flusher.lend(kind, addr, buf) };
        }
        let stats = flusher.run(
            &*self.shared.backend,
            self.shared.config.max_entries_per_call,
        );
        BatchOutcome {
            failed: flusher.take_failed(),
            stats,
        }
    }

    /// Sends everything queued now and completes it; `None` when nothing
    /// was queued. Drivers call this; call it yourself only when driving
    /// futures by hand.
    pub fn flush(&self) -> Option<FlushStats> {
        self.flush_staged(&mut Staging::default())
    }

    /// Runs `future` to completion on this thread, flushing whenever it
    /// waits.
    ///
    /// Requests the future queues on other engines (other devices) are
    /// flushed as well, each engine in a call of its own, so one future
    /// may join reads of several devices.
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        let mut future = pin!(future);
        let mut lease = self.lease_staging();
        THREAD_WAKER.with(|(notify, waker)| {
            // Every block_on of this thread shares the flag, so a nested one
            // may take a wake meant for the future of an outer one (whose
            // request the nested flush, or another thread's, completed):
            // leaving, it sets the flag, and the outer one polls again.
            struct Rewake<'a>(&'a ThreadNotify);
            impl Drop for Rewake<'_> {
                fn drop(&mut self) {
                    self.0.woken.store(true, Ordering::Release);
                }
            }
            let _rewake = Rewake(notify);
            let mut cx = Context::from_waker(waker);
            let mut repolls = 0;
            loop {
                notify.woken.store(false, Ordering::Release);
                if let Poll::Ready(out) = lease.run(|| future.as_mut().poll(&mut cx)) {
                    return out;
                }
                // Woken while being polled: it can still make progress (a
                // join that yields midway, a shared future just completed),
                // so more requests may come before anything is sent.
                // (A load, not a swap, which is a locked instruction: the
                // flag is cleared before the next poll anyway.)
                if notify.woken.load(Ordering::Acquire) && repolls < MAX_REPOLLS {
                    repolls += 1;
                    continue;
                }
                repolls = 0;
                if lease.flush() {
                    continue;
                }
                // Nothing queued: the future waits on another thread's
                // flush or on something outside the engine.
                while !notify.woken.swap(false, Ordering::Acquire) {
                    std::thread::park();
                }
            }
        })
    }

    /// Wraps `future` so that any executor (tokio, `futures::executor`)
    /// drives the engine with it: each time it waits, the queue is
    /// flushed in the executor's thread (with other engines it queued
    /// requests on, as in [`Memory::block_on`]). The device call blocks
    /// that thread for its duration.
    pub fn drive<F: Future>(&self, future: F) -> Driven<'_, F> {
        Driven {
            mem: self,
            waker: None,
            staging: None,
            future,
        }
    }

    /// A background task that flushes whenever requests are queued, for
    /// code that spawns many tasks instead of joining futures. It yields
    /// once before each flush so other ready tasks can queue theirs first;
    /// on a single-threaded executor that batches exactly, on a
    /// multi-threaded one as well as the timing allows. It never finishes:
    /// drop or abort it when done.
    pub fn driver(&self) -> Driver {
        let id = {
            let mut queue = self.queue();
            queue.next_driver += 1;
            queue.next_driver
        };
        Driver {
            mem: self.clone(),
            id,
            yielded: false,
        }
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        queue::lock(&self.shared.queue)
    }

    /// Queues a request: into the staging of the driver polling on this
    /// thread, if it drives this engine, else straight into the queue.
    // Inlined into every future's poll, as is `Request::send`: through a
    // call, the request was stored field by field and loaded back whole,
    // which stalls store forwarding; profiles of large batches showed it
    // as the costliest instruction of queueing.
    #[inline(always)]
    fn submit(&self, req: NewRequest<'_>, fill: impl FnOnce(&mut [u8])) -> SlotRef {
        match self.driving_staging() {
            Some(staging) => staging.submit(&self.shared.queue, req, fill),
            None => {
                let slot = self.queue().submit(req, fill);
                self.note_other_engine();
                slot
            }
        }
    }

    /// Under a driver of another engine, remembers this engine for that
    /// driver to flush as well: a future that joins reads of two devices
    /// then needs no second driver.
    #[inline(never)] // off the path of a driver's own requests
    fn note_other_engine(&self) {
        let (shared, staging) = STAGING.get();
        if shared.is_null() {
            return;
        }
        // SAFETY: as in `driving_staging`.
        let others = &mut unsafe { &mut *staging }.others;
        if !others.iter().any(|m| Arc::ptr_eq(&m.shared, &self.shared)) {
            others.push(self.clone());
        }
    }

    /// The staging of the driver polling on this thread, if it drives this
    /// engine. Use it at once: it is the driver's again when the poll
    /// returns.
    #[allow(clippy::mut_from_ref)]
    #[inline]
    fn driving_staging(&self) -> Option<&mut Staging> {
        let (shared, staging) = STAGING.get();
        // SAFETY: the context is set only while its driver polls on this
        // thread, up the stack, and the driver does not touch the staging
        // then.
        std::ptr::eq(shared, Arc::as_ptr(&self.shared)).then(|| unsafe { &mut *staging })
    }

    /// A staging for a driver of this engine: the one this thread keeps
    /// (with the slots it reserved), or one from the queue.
    fn lease_staging(&self) -> StagingLease<'_> {
        let cached = KEPT_STAGING.with(|kept| {
            let mut kept = kept.borrow_mut();
            match &mut *kept {
                Some(k) if k.id == self.shared.id => k.staging.take(),
                _ => None,
            }
        });
        StagingLease {
            mem: self,
            staging: ManuallyDrop::new(cached.unwrap_or_else(|| self.queue().lend_staging())),
        }
    }

    /// Like [`Memory::flush`], sending `staging`'s requests first.
    fn flush_staged(&self, staging: &mut Staging) -> Option<FlushStats> {
        let mut flusher = self.shared.flusher.lock_recovering();
        {
            let mut queue = self.queue();
            if !flusher.take(&mut queue, staging) {
                return None;
            }
        }
        let max_entries = self.shared.config.max_entries_per_call;
        let run = catch_unwind(AssertUnwindSafe(|| {
            flusher.run(&*self.shared.backend, max_entries)
        }));
        if run.is_err() {
            // Every waiter still gets its request back, failed, so nothing
            // hangs and no unread byte passes for read.
            flusher.fail_all(crate::PageError::NotIssued);
        }
        flusher.finish(&mut self.queue());
        match run {
            Ok(stats) => Some(stats),
            Err(panic) => resume_unwind(panic),
        }
    }
}

thread_local! {
    /// The engine whose driver is polling on this thread, and its staging.
    static STAGING: Cell<(*const Shared, *mut Staging)> =
        const { Cell::new((std::ptr::null(), std::ptr::null_mut())) };
}

/// A driver's staging, returned to the queue (with anything still staged)
/// when the driver is done or unwinds. Boxed, so that handing it between
/// the thread's cache and a driver moves a pointer (which also stays valid
/// for the thread's context while it is polled).
struct StagingLease<'m> {
    mem: &'m Memory,
    /// Taken only by `drop`.
    staging: ManuallyDrop<Box<Staging>>,
}

impl StagingLease<'_> {
    /// Runs `poll` with this staging as the thread's context. An outer
    /// context's staged requests join their queue first: whatever the
    /// inner driver flushes comes after them in program order.
    fn run<R>(&mut self, poll: impl FnOnce() -> R) -> R {
        let outer = STAGING.get();
        if !outer.0.is_null() {
            // SAFETY: the outer context's driver is up the stack, inside
            // its own `run`, so both pointers are alive.
            let (shared, staging) = unsafe { (&*outer.0, &mut *outer.1) };
            queue::lock(&shared.queue).publish(staging);
        }
        struct Restore((*const Shared, *mut Staging));
        impl Drop for Restore {
            fn drop(&mut self) {
                STAGING.set(self.0);
            }
        }
        let _restore = Restore(outer);
        STAGING.set((Arc::as_ptr(&self.mem.shared), &mut **self.staging));
        poll()
    }

    /// Flushes the queue with this staging's requests, then the other
    /// engines its futures queued requests on; returns whether anything
    /// was sent.
    fn flush(&mut self) -> bool {
        self.staging.end_batch();
        let mut sent = self.mem.flush_staged(&mut self.staging).is_some();
        if !self.staging.others.is_empty() {
            for other in std::mem::take(&mut self.staging.others) {
                sent |= other.flush().is_some();
            }
        }
        sent
    }
}

impl Drop for StagingLease<'_> {
    fn drop(&mut self) {
        // SAFETY: `staging` is not used again.
        let mut staging = unsafe { ManuallyDrop::take(&mut self.staging) };
        // Their requests are in their own queues; holding the engines
        // would keep their devices open.
        staging.others.clear();
        if staging.has_staged() {
            self.mem.queue().publish(&mut staging);
        }
        let shared = &self.mem.shared;
        let mut staging = Some(staging);
        // Kept for this thread's next driver, unless the thread is exiting
        // or keeps another staging of this engine (a nested driver's).
        let _ = KEPT_STAGING.try_with(|kept| {
            let mut kept = kept.borrow_mut();
            match &mut *kept {
                Some(k) if k.id == shared.id => {
                    if k.staging.is_none() {
                        k.staging = staging.take();
                    }
                }
                _ => {
                    // Another engine's staging goes back to its queue.
                    *kept = Some(KeptStaging {
                        id: shared.id,
                        engine: Arc::downgrade(shared),
                        staging: staging.take(),
                    });
                }
            }
        });
        if let Some(staging) = staging.filter(|s| s.has_slots()) {
            self.mem.queue().return_staging(staging);
        }
    }
}

/// A thread's staging between drivers, so that a driver needs no queue
/// lock to start and keeps its reserved slots.
struct KeptStaging {
    id: u64,
    engine: Weak<Shared>,
    /// `None` while a driver of the engine runs with it.
    staging: Option<Box<Staging>>,
}

impl Drop for KeptStaging {
    fn drop(&mut self) {
        // Its slots go back to the engine, if the engine is still there.
        if let (Some(staging), Some(engine)) = (self.staging.take(), self.engine.upgrade()) {
            queue::lock(&engine.queue).return_staging(staging);
        }
    }
}

thread_local! {
    static KEPT_STAGING: RefCell<Option<KeptStaging>> = const { RefCell::new(None) };
}

#[cfg(test)]
pub(crate) mod tests;

/// Polls in a row a future may ask for (by waking itself) before the queue
/// is flushed anyway, so a future that always wakes itself cannot keep the
/// others from their data.
const MAX_REPOLLS: u32 = 1024;

pin_project_lite::pin_project! {
    /// A future driven together with the engine; see [`Memory::drive`].
    #[must_use = "futures do nothing unless polled"]
    pub struct Driven<'m, F> {
        mem: &'m Memory,
        // Made once: a waker per poll would cost two atomic counts.
        waker: Option<(Arc<RecordingWaker>, Waker)>,
        staging: Option<StagingLease<'m>>,
        #[pin]
        future: F,
    }
}

/// Passes wakes on to the executor's waker and remembers that one came, so
/// the driver can tell a future that woke itself from one that waits.
struct RecordingWaker {
    woken: AtomicBool,
    inner: Mutex<Waker>,
}

impl Wake for RecordingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.inner.lock_recovering().wake_by_ref();
    }
}

impl<F: Future> Future for Driven<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        let (recorder, waker) = this.waker.get_or_insert_with(|| {
            let recorder = Arc::new(RecordingWaker {
                woken: AtomicBool::new(false),
                inner: Mutex::new(cx.waker().clone()),
            });
            (recorder.clone(), Waker::from(recorder))
        });
        recorder.inner.lock_recovering().clone_from(cx.waker());
        let mut inner_cx = Context::from_waker(waker);
        let lease = this.staging.get_or_insert_with(|| this.mem.lease_staging());
        let mut repolls = 0;
        loop {
            recorder.woken.store(false, Ordering::Release);
            let poll = lease.run(|| this.future.as_mut().poll(&mut inner_cx));
            if let Poll::Ready(out) = poll {
                // Requests of futures it left behind join the queue now.
                *this.staging = None;
                return Poll::Ready(out);
            }
            // As in `block_on`: a future that woke itself goes on first.
            // (A load, not a swap: the flag is cleared before the next
            // poll anyway.)
            if recorder.woken.load(Ordering::Acquire) && repolls < MAX_REPOLLS {
                repolls += 1;
                continue;
            }
            repolls = 0;
            if !lease.flush() {
                return Poll::Pending;
            }
        }
    }
}

/// The background flusher; see [`Memory::driver`]. Several may run on one
/// engine (each is woken when requests are queued; one flush takes them
/// all).
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct Driver {
    mem: Memory,
    /// Its key among the queue's driver wakers.
    id: u64,
    yielded: bool,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // A waker left behind would keep a dead task's executor woken for
        // nothing.
        self.mem.queue().drivers.retain(|(id, _)| *id != self.id);
    }
}

impl Future for Driver {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        {
            let mut queue = this.mem.queue();
            match queue.drivers.iter_mut().find(|(id, _)| *id == this.id) {
                Some((_, w)) => w.clone_from(cx.waker()),
                None => queue.drivers.push((this.id, cx.waker().clone())),
            }
            if queue.pending.is_empty() {
                this.yielded = false;
                return Poll::Pending;
            }
        }
        if !this.yielded {
            this.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        this.yielded = false;
        this.mem.flush();
        Poll::Pending
    }
}

/// Wakes a thread parked in [`Memory::block_on`].
struct ThreadNotify {
    thread: Thread,
    woken: AtomicBool,
}

impl Wake for ThreadNotify {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Woken by its own thread (a flush in `block_on`): it is not
        // parked, so no unpark is needed.
        if std::ptr::eq(Arc::as_ptr(self), OWN_NOTIFY.get()) {
            self.woken.store(true, Ordering::Release);
        } else if !self.woken.swap(true, Ordering::AcqRel) {
            self.thread.unpark();
        }
    }
}

thread_local! {
    static THREAD_WAKER: (Arc<ThreadNotify>, Waker) = {
        let notify = Arc::new(ThreadNotify {
            thread: std::thread::current(),
            woken: AtomicBool::new(false),
        });
        OWN_NOTIFY.set(Arc::as_ptr(&notify));
        (notify.clone(), Waker::from(notify))
    };
    /// This thread's `ThreadNotify`, once it has one.
    static OWN_NOTIFY: Cell<*const ThreadNotify> = const { Cell::new(std::ptr::null()) };
}
