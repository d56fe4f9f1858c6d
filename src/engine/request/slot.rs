//! A request's slot, and the state protocol that hands it between the
//! engine and the request's future: while a request is unfinished its slot
//! belongs to the engine (touched only under the queue lock, or by the
//! flush that took it); `Done` hands it to the future, which reads it
//! alone; `Collected` hands it back. Slots live in boxed chunks that never
//! move or go away before the queue, so a future may keep a pointer to its
//! slot.

use std::cell::UnsafeCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::Waker;

use super::buffers::{SpareBuffers, LARGE_BUFFER};
use super::lent::LentBuffer;
use super::queue::{Buffer, NewRequest, Req};
use crate::engine::outcome::{Failure, Fragment};

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
    pub(in crate::engine) fn from_u8(v: u8) -> State {
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

/// One request's place in the queue, on cache lines of its own.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct Slot {
    pub(in crate::engine) state: AtomicU8,
    pub(in crate::engine) body: UnsafeCell<Body>,
}

impl Slot {
    pub(in crate::engine) fn empty() -> Slot {
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
    pub(in crate::engine) fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::Acquire))
    }

    #[inline]
    pub(in crate::engine) fn set_state(&self, state: State) {
        self.state.store(state as u8, Ordering::Release);
    }
}

/// A handle on a slot: the future's, and the queue's own in its lists.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlotRef {
    pub(in crate::engine) slot: NonNull<Slot>,
}

impl SlotRef {
    #[inline]
    pub(in crate::engine) fn slot(&self) -> &Slot {
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
    pub(in crate::engine) unsafe fn prepare(
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

/// The waker of an unfinished request whose future is still there.
pub(in crate::engine) fn waker<'a>(slot: SlotRef) -> &'a Waker {
    // SAFETY: an unfinished slot whose future is still there belongs to the
    // engine, which changes it only through `&mut Queue`; the caller holds
    // it, and lets go of the waker before handing the slot over.
    // (Only the waker is borrowed: the flush may still hold a pointer to
    // the slot's inline bytes.)
    let waker = unsafe { &*std::ptr::addr_of!((*slot.slot().body.get()).waker) };
    waker.as_ref().expect("a queued request has a waker")
}
