//! The request queue: requests in the form the flush takes them, in the
//! order they were queued, in slots (`slot`) that are reused with their
//! buffers (`buffers`), so a request allocates nothing once the queue has
//! grown to the working size. A future collects its finished request
//! through its slot's atomic state, without the queue lock.

use std::sync::{Mutex, MutexGuard};
use std::task::Waker;

use std::ptr::NonNull;

use super::buffers::{SpareBuffers, LARGE_BUFFER};
use super::lent::LentBuffer;
use super::slot::{waker, Body, Slot, SlotRef, State};
use super::staging::Staging;
use crate::lock::LockRecovering;

/// Whether a request reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Read,
    Write,
}

/// A request as the flush takes it: queued in this form, so taking the
/// queue moves a list and copies nothing per request.
#[derive(Debug)]
pub(crate) struct Req {
    /// The request's slot (queued requests; synchronous batches have none).
    pub slot: Option<SlotRef>,
    pub kind: Kind,
    pub addr: u64,
    pub len: usize,
    /// Its `len` bytes, lent until the flush that takes it ends; written
    /// only for reads.
    pub buf: LentBuffer,
    /// Record fragments (only streams need them).
    pub record: bool,
    /// The flush's own: the round it goes in.
    pub round: u32,
    /// The flush's own: a read that overlaps an earlier write of the
    /// flush, so it goes after its round's writes; other reads of round 0
    /// may go before.
    pub sees_writes: bool,
}

/// A caller's buffer lent to the engine for the life of a scope (see
/// `Memory::scope`): the flush reads or writes it in place, so it is
/// never copied. The scope's end cancels what is still queued and waits
/// for a flush in progress, so no flush touches it afterwards.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lent {
    pub buf: LentBuffer,
    pub scope: u64,
}

// SAFETY: a `SlotRef` is only dereferenced as the state protocol above
// allows; the slot itself is shared through an atomic and an `UnsafeCell`
// whose contents are `Send`.
unsafe impl Send for SlotRef {}
// SAFETY: as above: shared use goes through the atomic state.
unsafe impl Sync for SlotRef {}

/// A request to queue: what it is, its buffer, and the waker of its future.
pub(crate) struct NewRequest<'w> {
    pub sub: Submission,
    pub buffer: Buffer,
    pub waker: &'w Waker,
}

/// Where a request's bytes are.
pub(crate) enum Buffer {
    /// In an engine buffer (the slot's own, or a spare one).
    Engine,
    /// In the caller's buffer, moved in.
    Owned(Vec<u8>),
    /// In the caller's buffer, lent for a scope.
    Lent(Lent),
}

impl NewRequest<'_> {
    /// Whether it needs a large engine buffer that `spare` does not have.
    #[inline]
    pub(in crate::engine) fn needs_large_buffer(&self, spare: &SpareBuffers) -> bool {
        self.sub.len > LARGE_BUFFER
            && matches!(self.buffer, Buffer::Engine)
            && !spare.has_fit(self.sub.len)
    }
}

/// Locks the queue. Queue operations do not panic midway, so a poisoned
/// lock holds a consistent queue.
pub(crate) fn lock(queue: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    queue.lock_recovering()
}

/// A request as submitted.
pub(crate) struct Submission {
    pub kind: Kind,
    pub addr: u64,
    pub len: usize,
    pub record: bool,
}

impl Submission {
    /// A request that does not record fragments.
    pub fn new(kind: Kind, addr: u64, len: usize) -> Self {
        Submission {
            kind,
            addr,
            len,
            record: false,
        }
    }
}

/// Slots per chunk.
const CHUNK: usize = 64;

/// The queue itself, always used under the engine's queue lock. Its lists
/// hold slot pointers rather than indices: the hot paths touch a slot
/// without finding its chunk.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    chunks: Vec<Box<[Slot]>>,
    free: Vec<SlotRef>,
    /// Slots handed to their futures, to take back once collected.
    done: Vec<SlotRef>,
    /// Queued requests, in program order.
    pub pending: Vec<Req>,
    /// Buffers left by finished requests, for the next ones.
    pub(in crate::engine) spare: SpareBuffers,
    /// The background drivers' wakers, by driver id: each is woken when a
    /// request is queued.
    pub drivers: Vec<(u64, Waker)>,
    /// The next background driver's id.
    pub next_driver: u64,
    /// Stagings of drivers that finished, kept for their buffers.
    #[allow(clippy::vec_box)] // moved whole between here and threads' caches
    stagings: Vec<Box<Staging>>,
}

// SAFETY: the queue owns its slots; the `UnsafeCell`s are shared with
// futures only as the state protocol allows.
unsafe impl Send for Queue {}

impl Queue {
    /// The state of `slot` (one of this queue's).
    pub fn state(&self, slot: SlotRef) -> State {
        slot.slot().state()
    }

    /// Moves `slot` to `state`.
    pub fn set_state(&mut self, slot: SlotRef, state: State) {
        slot.slot().set_state(state);
    }

    /// The body of a slot the engine holds (any state but `Done`).
    #[allow(clippy::mut_from_ref)]
    pub fn body(&mut self, slot: SlotRef) -> &mut Body {
        let slot = slot.slot();
        debug_assert_ne!(slot.state(), State::Done);
        // SAFETY: a slot that is not done belongs to the engine, and the
        // engine touches it only through `&mut Queue` (under the lock).
        unsafe { &mut *slot.body.get() }
    }

    /// A free slot: a reused one, one collected since, or a new chunk's.
    fn free_slot(&mut self) -> SlotRef {
        self.ensure_free(1);
        self.free.pop().expect("a free slot")
    }

    /// Makes at least `n` slots free: collected ones, else new chunks.
    fn ensure_free(&mut self, n: usize) {
        if self.free.len() < n {
            self.reclaim();
        }
        while self.free.len() < n {
            // Grow by a quarter at least, so long-uncollected slots are
            // rescanned rarely.
            let chunks = (self.chunks.len() / 4).max(1);
            for _ in 0..chunks {
                // Pointers to the slots are taken once the box is in
                // place: moving a `Box` asserts that it is the only way to
                // its contents, which ends pointers taken before (Miri).
                self.chunks
                    .push((0..CHUNK).map(|_| Slot::empty()).collect());
                let chunk = self.chunks.last().expect("a chunk was just pushed");
                self.free.extend(chunk.iter().rev().map(|slot| SlotRef {
                    slot: NonNull::from(slot),
                }));
            }
            // Room for every slot, so taking slots back never allocates.
            let total = self.chunks.len() * CHUNK;
            self.free.reserve(total - self.free.len());
            self.done.reserve(total - self.done.len());
        }
    }

    /// Takes back the slots whose futures collected them.
    pub(in crate::engine) fn reclaim(&mut self) {
        let mut done = std::mem::take(&mut self.done);
        done.retain(|&slot| {
            if self.state(slot) != State::Collected {
                return true;
            }
            // A large buffer goes where the next large request of any slot
            // will look for it.
            let body = self.body(slot);
            if body.large {
                body.large = false;
                if body.data.capacity() > LARGE_BUFFER {
                    let data = std::mem::take(&mut body.data);
                    self.spare.put(data);
                }
            }
            self.release(slot);
            false
        });
        self.done = done;
    }

    /// Queues a request whose buffer is `data` (or, when `None`, a spare
    /// engine buffer of `len` bytes), lets `fill` initialise it, and
    /// returns its slot.
    pub fn submit(&mut self, req: NewRequest<'_>, fill: impl FnOnce(&mut [u8])) -> SlotRef {
        if req.needs_large_buffer(&self.spare) {
            self.reclaim();
        }
        let slot = self.free_slot();
        // SAFETY: a free slot belongs to the engine; we hold `&mut self`.
        let queued = unsafe { slot.prepare(req, &mut self.spare, fill) };
        self.pending.push(queued);
        self.wake_drivers();
        slot
    }

    /// Moves `staging`'s requests to the end of the queue, in their order.
    pub fn publish(&mut self, staging: &mut Staging) {
        if staging.staged.is_empty() {
            return;
        }
        if self.pending.is_empty() {
            // The usual case: the lists trade places (and capacities), and
            // nothing is copied.
            std::mem::swap(&mut self.pending, &mut staging.staged);
        } else {
            self.pending.append(&mut staging.staged);
        }
        self.wake_drivers();
    }

    /// Swaps everything queued, with `staging`'s requests after the rest,
    /// into the empty list `into`: the lists trade places (and
    /// capacities), and nothing is copied. A driver's lists then settle
    /// into two that trade places every flush, so warm batches allocate
    /// nothing.
    pub fn take_all(&mut self, staging: &mut Staging, into: &mut Vec<Req>) {
        debug_assert!(into.is_empty());
        if self.pending.is_empty() {
            std::mem::swap(into, &mut staging.staged);
        } else {
            self.publish(staging);
            std::mem::swap(into, &mut self.pending);
        }
    }

    /// Tells the background drivers that requests are queued.
    fn wake_drivers(&self) {
        for (_, waker) in &self.drivers {
            waker.wake_by_ref();
        }
    }

    /// Publishes `staging` and reserves it `n` more free slots.
    pub(in crate::engine) fn refill(&mut self, staging: &mut Staging, n: usize) {
        self.publish(staging);
        // Collected slots first: the most recent ones, whose buffers are
        // still in the cache, end up at the tail taken below.
        self.reclaim();
        self.ensure_free(n);
        let from = self.free.len() - n;
        staging.reserved.extend(self.free.drain(from..));
    }

    /// A staging for a driver, with the buffers of an earlier one.
    pub fn lend_staging(&mut self) -> Box<Staging> {
        self.stagings.pop().unwrap_or_default()
    }

    /// Takes a driver's staging back: its requests join the queue, its
    /// unused slots and spare buffers return.
    pub fn return_staging(&mut self, mut staging: Box<Staging>) {
        self.publish(&mut staging);
        self.free.append(&mut staging.reserved);
        self.spare.take_all(&mut staging.spare);
        self.stagings.push(staging);
    }

    /// Whether `slot` is done; if not, remembers `waker` to wake it.
    pub fn poll_done(&mut self, slot: SlotRef, waker: &Waker) -> bool {
        if self.state(slot) == State::Done {
            return true;
        }
        // SAFETY: an unfinished slot belongs to the engine, which changes it
        // only under the queue lock, held here (`&mut self`). Only the
        // waker is borrowed: the request's own pointer to its inline bytes,
        // which a flush may use, stays valid (Miri, Stacked Borrows).
        let slot_waker = unsafe { &mut *std::ptr::addr_of_mut!((*slot.slot().body.get()).waker) };
        match slot_waker {
            Some(w) => w.clone_from(waker),
            None => *slot_waker = Some(waker.clone()),
        }
        false
    }

    /// Completes the requests a flush took: each future may collect its
    /// request, or, if the future is gone, the slot is free again. Wakes
    /// the waiters, a waker shared by adjacent requests (futures joined in
    /// one task) once for the run of them, so a task whose requests
    /// interleave with another's is woken once per run.
    pub fn complete_all(&mut self, slots: impl Iterator<Item = SlotRef>) {
        // A slot is handed to its future one step late: until then its
        // waker is still the engine's, to compare the next one with (no
        // clone needed). A woken future that polls before its slot is done
        // waits for the queue lock, held here, so no wake is lost.
        let mut prev: Option<SlotRef> = None;
        for slot in slots {
            if self.state(slot) == State::Cancelled {
                self.release(slot);
                continue;
            }
            let waker = waker(slot);
            if !prev.is_some_and(|p| waker.will_wake(self::waker(p))) {
                waker.wake_by_ref();
            }
            if let Some(p) = prev.replace(slot) {
                self.hand_over(p);
            }
        }
        if let Some(p) = prev {
            self.hand_over(p);
        }
    }

    /// Hands a completed request's slot to its future.
    fn hand_over(&mut self, slot: SlotRef) {
        self.set_state(slot, State::Done);
        self.done.push(slot);
    }

    /// Frees a slot. Its waker stays, so the next request from the same
    /// task need not clone one.
    pub fn release(&mut self, slot: SlotRef) {
        self.set_state(slot, State::Free);
        self.free.push(slot);
    }

    /// Cancels the requests of `scope` still queued (their futures were
    /// leaked: dropped ones are cancelled already), so that no flush uses
    /// their lent buffers once the scope is over. The caller holds the
    /// flush lock, so none is in flight, and has published the staging of
    /// the driver polling on its thread: see `ScopeEnd` for why no other
    /// staging can hold a request of the scope.
    pub fn cancel_scope(&mut self, scope: u64) {
        let of_scope = |slot: &Slot| {
            // The state first: a slot that is not queued may be written
            // at this moment without the queue lock (prepared by another
            // thread's staging, or read by its future once done), so its
            // body must not be read (Miri found that race).
            slot.state() == State::Queued && {
                // SAFETY: a queued slot belongs to the engine, which
                // changes it only under the queue lock, held here
                // (`&mut self`); the `Acquire` load of the state saw what
                // `prepare` wrote.
                unsafe { (*slot.body.get()).scope == scope }
            }
        };
        for slot in self.pending.iter().filter_map(|req| req.slot) {
            if of_scope(slot.slot()) {
                slot.slot().set_state(State::Cancelled);
            }
        }
        // (A request of the scope may also sit in the staging of a driver
        // that was leaked mid-poll: never published, never flushed.)
    }

    /// The request's future is gone: free what can be freed now, and mark
    /// the rest for the flush that holds it.
    pub fn forget(&mut self, slot: SlotRef) {
        match self.state(slot) {
            State::Queued => self.set_state(slot, State::Cancelled),
            State::Done => self.set_state(slot, State::Collected),
            State::Free | State::Cancelled | State::Collected => {}
        }
    }
}
