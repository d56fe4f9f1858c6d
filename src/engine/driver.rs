//! Drivers: what runs futures together with the engine and flushes when
//! they wait ([`Memory::block_on`], [`Memory::drive`], [`Memory::driver`]),
//! the wakers that tell a future that woke itself from one that waits, and
//! the staging a driver lends the futures it polls on its own thread.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::mem::ManuallyDrop;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;

use super::request::queue;
use super::request::staging::Staging;
use super::{Memory, Shared};
use crate::lock::LockRecovering;

impl Memory {
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

    /// Under a driver of another engine, remembers this engine for that
    /// driver to flush as well: a future that joins reads of two devices
    /// then needs no second driver.
    #[inline(never)] // off the path of a driver's own requests
    pub(super) fn note_other_engine(&self) {
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
    pub(super) fn driving_staging(&self) -> Option<&mut Staging> {
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
