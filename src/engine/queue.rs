//! The request queue: slots for requests, the order they were queued in,
//! and spare buffers. Slots and buffers are reused, so a request allocates
//! nothing once the queue has grown to the working size.
//!
//! A slot is handed between the engine and its future through an atomic
//! state, so that a future collects its finished request without taking
//! the queue lock: while a request is unfinished its slot belongs to the
//! engine (touched only under the queue lock, or by the flush that took
//! it); `Done` hands it to the future, which reads it alone; `Collected`
//! hands it back. Slots live in boxed chunks that never move or go away
//! before the queue, so a future may keep a pointer to its slot.

use crate::lock::LockRecovering;
use std::cell::UnsafeCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::task::Waker;

use super::lent::LentBuffer;
use super::outcome::{Failure, Fragment};

/// Whether a request reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Read,
    Write,
}

/// Where a request is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum State {
    /// Not in use.
    Free,
    /// Waiting for the next flush, or taken by a flush (its buffer is
    /// then with the flush): only the holder of the flush knows which, so
    /// taking a request costs no store.
    Queued,
    /// Its future was dropped before it completed: the flush that takes
    /// it (before it is sent) or completes it frees it.
    Cancelled,
    /// Completed; the slot belongs to its future until collected.
    Done,
    /// The future took its result (or went away); the engine may reuse
    /// the slot.
    Collected,
}

impl State {
    #[inline]
    fn from_u8(v: u8) -> State {
        debug_assert!(v <= State::Collected as u8);
        // SAFETY: slot states are only ever stored from a `State` (see
        // `Slot::set_state` and `Slot::empty`), so `v` is one of its values.
        // (A checked table lookup here showed up in every poll.)
        unsafe { std::mem::transmute::<u8, State>(v) }
    }
}

/// What became of a request, and the buffers it uses. What every request
/// touches comes first: with the slot's state, one cache line.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Body {
    /// The request's bytes are in `inline` (a short engine buffer), not
    /// `data`.
    pub in_inline: bool,
    /// `failures` holds something (checked without reaching for it).
    pub failed: bool,
    /// `fragments` holds something.
    pub has_fragments: bool,
    /// `data` may hold a buffer larger than `LARGE_BUFFER` (set when one
    /// is put there; taking the slot back clears it): checked without
    /// reaching for `data`.
    pub large: bool,
    pub len: usize,
    /// Engine buffer of short requests: no vector to size or look after.
    pub inline: [u8; INLINE],
    pub waker: Option<Waker>,
    /// The scope whose buffer the request uses in place, or 0.
    pub scope: u64,
    pub failures: Vec<Failure>,
    /// Read destination or write source of longer requests: engine-owned,
    /// or the caller's moved-in buffer. While in flight, the flush writes
    /// or reads it in place (through a pointer taken at submission).
    pub data: Vec<u8>,
    pub fragments: Vec<Fragment>,
}

/// Requests of at most this many bytes in an engine buffer use the slot's
/// own `inline` bytes.
pub(crate) const INLINE: usize = 16;

impl Body {
    /// The engine buffer's bytes of a done request (not a lent one).
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        if self.in_inline {
            &self.inline[..self.len]
        } else {
            &self.data[..self.len]
        }
    }
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

/// One request's place in the queue, on cache lines of its own.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct Slot {
    state: AtomicU8,
    body: UnsafeCell<Body>,
}

impl Slot {
    fn empty() -> Slot {
        Slot {
            state: AtomicU8::new(State::Free as u8),
            body: UnsafeCell::new(Body {
                in_inline: false,
                failed: false,
                has_fragments: false,
                large: false,
                len: 0,
                inline: [0; INLINE],
                waker: None,
                scope: 0,
                failures: Vec::new(),
                data: Vec::new(),
                fragments: Vec::new(),
            }),
        }
    }

    #[inline]
    fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::Acquire))
    }

    #[inline]
    fn set_state(&self, state: State) {
        self.state.store(state as u8, Ordering::Release);
    }
}

/// A handle on a slot: the future's, and the queue's own in its lists.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlotRef {
    slot: NonNull<Slot>,
}

// SAFETY: a `SlotRef` is only dereferenced as the state protocol above
// allows; the slot itself is shared through an atomic and an `UnsafeCell`
// whose contents are `Send`.
unsafe impl Send for SlotRef {}
// SAFETY: as above: shared use goes through the atomic state.
unsafe impl Sync for SlotRef {}

impl SlotRef {
    #[inline]
    fn slot(&self) -> &Slot {
        // SAFETY: the slot outlives every future of its queue (chunks are
        // freed only with the queue, which the future's `Memory` keeps).
        unsafe { self.slot.as_ref() }
    }

    /// Whether the request is done (its result may be collected).
    #[inline]
    pub fn is_done(&self) -> bool {
        self.slot().state() == State::Done
    }

    /// The finished request, for its future alone.
    ///
    /// SAFETY: `is_done()` returned true, the caller is the request's
    /// future and has not called `collected` yet.
    #[allow(clippy::mut_from_ref)]
    #[inline]
    pub unsafe fn done_body(&self) -> &mut Body {
        // SAFETY: the caller's contract: the slot is done and belongs to
        // this future alone, until `collected`.
        unsafe { &mut *self.slot().body.get() }
    }

    /// Hands a done slot back to the engine; the future must not touch it
    /// again.
    #[inline]
    pub fn collected(&self) {
        self.slot().set_state(State::Collected);
    }

    /// Makes a free slot hold `req`, queued, and returns it in the form
    /// the flush takes; `fill` initialises an engine buffer. Replaced
    /// engine buffers go to `spare`, and come from it when the slot's own
    /// is too small.
    ///
    /// SAFETY: the slot is free and the caller holds it alone (under the
    /// queue lock, or reserved for the caller's staging).
    // Always inline, into the poll that queues the request (see
    // `Memory::submit`): through a call, the request is passed in memory
    // and the poll costs a third more.
    #[inline(always)]
    unsafe fn prepare(
        self,
        req: NewRequest<'_>,
        spare: &mut SpareBuffers,
        fill: impl FnOnce(&mut [u8]),
    ) -> Req {
        let slot = self.slot();
        let raw = slot.body.get();
        // SAFETY: the caller's contract: the slot is free and held alone.
        let body = unsafe { &mut *raw };
        let NewRequest { sub, buffer, waker } = req;
        body.scope = 0;
        body.in_inline = false;
        let buf = match buffer {
            // The slot's own buffer is neither used nor resized.
            Buffer::Lent(lent) => {
                body.scope = lent.scope;
                lent.buf
            }
            Buffer::Owned(data) => {
                let old = std::mem::replace(&mut body.data, data);
                // (An owned read took the slot's last buffer: nothing to keep.)
                if old.capacity() != 0 {
                    spare.put(old);
                }
                body.large = body.data.capacity() > LARGE_BUFFER;
                LentBuffer::of_vec(&mut body.data, sub.len)
            }
            Buffer::Engine if sub.len <= INLINE => {
                body.in_inline = true;
                fill(&mut body.inline[..sub.len]);
                // From the cell's pointer, not from `body`: a reference to
                // the whole body made later (a pending poll's new waker)
                // would end a pointer derived from this one (Miri, Stacked
                // Borrows).
                // SAFETY: `raw` is the slot's body, which the caller holds
                // alone; no reference is made.
                let inline = unsafe { std::ptr::addr_of_mut!((*raw).inline) };
                LentBuffer::of_raw(inline.cast::<u8>(), sub.len)
            }
            Buffer::Engine => {
                let cap = body.data.capacity();
                // A buffer goes to the request it fits: one too small is
                // swapped for the smallest spare that fits, and a large one
                // is not left under a small request, where it would be
                // missed by the next large one (which would allocate, zero
                // and fault in a new buffer).
                let oversized = cap > LARGE_BUFFER && cap / 4 > sub.len;
                if cap < sub.len || oversized {
                    match spare.take_fit(sub.len) {
                        Some(fit) => spare.put(std::mem::replace(&mut body.data, fit)),
                        None if oversized => spare.put(std::mem::take(&mut body.data)),
                        None => {}
                    }
                }
                // Stale bytes are harmless: only bytes the device filled
                // are ever handed out. So the buffer keeps its length (the
                // request's is `len`) and only bytes never used are zeroed.
                if body.data.len() < sub.len {
                    body.data.resize(sub.len, 0);
                }
                fill(&mut body.data[..sub.len]);
                body.large = body.data.capacity() > LARGE_BUFFER;
                LentBuffer::of_vec(&mut body.data, sub.len)
            }
        };
        body.len = sub.len;
        if body.failed {
            body.failed = false;
            body.failures.clear();
        }
        if body.has_fragments {
            body.has_fragments = false;
            body.fragments.clear();
        }
        match &mut body.waker {
            Some(w) => w.clone_from(waker),
            None => body.waker = Some(waker.clone()),
        }
        slot.set_state(State::Queued);
        Req {
            slot: Some(self),
            kind: sub.kind,
            addr: sub.addr,
            len: sub.len,
            buf,
            record: sub.record,
            round: 0,
            sees_writes: false,
        }
    }
}

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
    fn needs_large_buffer(&self, spare: &SpareBuffers) -> bool {
        self.sub.len > LARGE_BUFFER
            && matches!(self.buffer, Buffer::Engine)
            && !spare.has_fit(self.sub.len)
    }
}

/// Requests queued by the futures a driver polls on its own thread,
/// without the queue lock: they go into slots reserved in advance and
/// join the queue, in order, before the driver flushes (or hands control
/// back). A driver's flush needs them only then, and nobody else can see
/// them earlier, so the lock is taken once per batch instead of once per
/// request. A future dropped meanwhile cancels its slot under the queue
/// lock as usual (the slot is already `Queued`).
#[derive(Debug, Default)]
pub(crate) struct Staging {
    /// Free slots reserved for this staging.
    reserved: Vec<SlotRef>,
    /// Queued requests not yet in `Queue::pending`, in program order.
    staged: Vec<Req>,
    /// Buffers replaced by moved-in ones or by better-fitting ones.
    spare: SpareBuffers,
    /// Requests submitted since its driver last flushed, and in the batch
    /// before: a driver's batches tend to repeat their size, so slots are
    /// reserved for a whole batch at once.
    batch: usize,
    last_batch: usize,
    /// Other engines its driver's futures queued requests on since the
    /// last flush (see `Memory::note_other_engine`).
    pub others: Vec<super::Memory>,
}

/// Slots a staging reserves at least at a time. Few, so that a driver of
/// single requests keeps reusing the same slots (and their buffers stay
/// in the cache); larger batches reserve as many as they have staged.
const RESERVE: usize = 8;

impl Staging {
    /// Whether requests wait in it.
    pub fn has_staged(&self) -> bool {
        !self.staged.is_empty()
    }

    /// Whether it holds anything of its queue's (requests, slots).
    pub fn has_slots(&self) -> bool {
        !self.staged.is_empty() || !self.reserved.is_empty()
    }

    /// Queues a request in a reserved slot (reserving more under the
    /// queue lock, rarely).
    #[inline(always)] // see `prepare`
    pub fn submit(
        &mut self,
        queue: &Mutex<Queue>,
        req: NewRequest<'_>,
        fill: impl FnOnce(&mut [u8]),
    ) -> SlotRef {
        if self.reserved.is_empty() || req.needs_large_buffer(&self.spare) {
            self.stock(queue, &req);
        }
        let slot = self.reserved.pop().expect("reserved slots");
        // SAFETY: reserved slots are free and this staging's alone.
        let queued = unsafe { slot.prepare(req, &mut self.spare, fill) };
        self.staged.push(queued);
        self.batch += 1;
        slot
    }

    /// Takes from the queue what `req` needs and the staging lacks: free
    /// slots, a large buffer.
    #[inline(never)] // once per batch at most, usually
    fn stock(&mut self, queue: &Mutex<Queue>, req: &NewRequest<'_>) {
        let mut queue = lock(queue);
        if self.reserved.is_empty() {
            // The rest of a batch like the last one, or as many again as
            // this batch has so far.
            let n = RESERVE
                .max(self.last_batch.saturating_sub(self.batch))
                .max(self.batch);
            queue.refill(self, n);
        }
        if req.needs_large_buffer(&self.spare) {
            // Large buffers are kept by the queue (see `Queue::reclaim`).
            queue.reclaim();
            if let Some(buf) = queue.spare.take_fit(req.sub.len) {
                self.spare.put(buf);
            }
        }
    }

    /// Its driver flushes: a new batch begins.
    pub fn end_batch(&mut self) {
        self.last_batch = self.batch;
        self.batch = 0;
    }
}

/// The waker of an unfinished request whose future is still there.
fn waker<'a>(slot: SlotRef) -> &'a Waker {
    // SAFETY: an unfinished slot whose future is still there belongs to the
    // engine, which changes it only through `&mut Queue`; the caller holds
    // it, and lets go of the waker before handing the slot over.
    // (Only the waker is borrowed: the flush may still hold a pointer to
    // the slot's inline bytes.)
    let waker = unsafe { &*std::ptr::addr_of!((*slot.slot().body.get()).waker) };
    waker.as_ref().expect("a queued request has a waker")
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
    spare: SpareBuffers,
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

/// A buffer above this size is not left under a request of a quarter of
/// its size.
const LARGE_BUFFER: usize = 64 << 10;

/// Most spare buffers kept; more are freed.
const MAX_SPARE: usize = 4096;

/// Spare engine buffers by size class (a buffer of capacity `c` is in
/// class `log2(c)`), so that finding one that fits costs a few steps
/// however many are kept.
#[derive(Debug, Default)]
pub(crate) struct SpareBuffers {
    classes: Vec<Vec<Vec<u8>>>,
    count: usize,
}

impl SpareBuffers {
    /// Keeps `buf` (unless it is empty or enough are kept already).
    fn put(&mut self, buf: Vec<u8>) {
        if buf.capacity() == 0 || self.count >= MAX_SPARE {
            return;
        }
        let class = buf.capacity().ilog2() as usize;
        if self.classes.len() <= class {
            self.classes.resize_with(class + 1, Vec::new);
        }
        self.classes[class].push(buf);
        self.count += 1;
    }

    /// A buffer of at least `len` bytes' capacity, from the smallest class
    /// whose every buffer is large enough.
    fn take_fit(&mut self, len: usize) -> Option<Vec<u8>> {
        let buf = self
            .classes
            .get_mut(fit_class(len)..)?
            .iter_mut()
            .find_map(Vec::pop)?;
        self.count -= 1;
        Some(buf)
    }

    /// Whether a buffer of `len` bytes' capacity would be found.
    fn has_fit(&self, len: usize) -> bool {
        self.classes
            .get(fit_class(len)..)
            .is_some_and(|c| c.iter().any(|class| !class.is_empty()))
    }

    /// Moves `other`'s buffers here.
    fn take_all(&mut self, other: &mut SpareBuffers) {
        for class in &mut other.classes {
            for buf in class.drain(..) {
                self.put(buf);
            }
        }
        other.count = 0;
    }
}

/// The first size class whose every buffer holds `len` bytes.
fn fit_class(len: usize) -> usize {
    len.max(1).next_power_of_two().ilog2() as usize
}

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
    fn reclaim(&mut self) {
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
    fn refill(&mut self, staging: &mut Staging, n: usize) {
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
