//! The request queue: slots for requests, the order they were queued in,
//! and spare buffers. Slots and buffers are reused, so a request allocates
//! nothing once the queue has grown to the working size.

use std::task::Waker;

use super::outcome::{Failure, Fragment};

/// Whether a request reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Read,
    Write,
}

/// Where a request is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Not in use.
    Free,
    /// Waiting for the next flush.
    Queued,
    /// Its future was dropped while queued; the next flush frees it.
    Cancelled,
    /// Taken by a flush; its buffer is with the flush.
    InFlight,
    /// Its future was dropped while in flight; completion frees it.
    Abandoned,
    /// Completed; waiting for its future to collect the result.
    Done,
}

/// One request.
#[derive(Debug)]
pub(crate) struct Slot {
    pub state: State,
    pub kind: Kind,
    pub addr: u64,
    pub len: usize,
    /// Read destination or write source: engine-owned, or the caller's
    /// moved-in buffer. Away with the flush while in flight.
    pub data: Vec<u8>,
    pub failures: Vec<Failure>,
    pub fragments: Vec<Fragment>,
    /// Record `fragments` (only streams need them).
    pub record: bool,
    pub waker: Option<Waker>,
}

impl Slot {
    fn empty() -> Slot {
        Slot {
            state: State::Free,
            kind: Kind::Read,
            addr: 0,
            len: 0,
            data: Vec::new(),
            failures: Vec::new(),
            fragments: Vec::new(),
            record: false,
            waker: None,
        }
    }
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

/// The queue itself, always used under the engine's queue lock.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Queued requests, in program order.
    pub pending: Vec<u32>,
    /// Buffers left by finished requests, for the next ones.
    spare: Vec<Vec<u8>>,
    /// Woken when a request is queued (the background driver).
    pub driver: Option<Waker>,
}

/// Most spare buffers kept; more are freed.
const MAX_SPARE: usize = 4096;

impl Queue {
    /// Queues a request whose buffer is `data` (or, when `None`, a spare
    /// engine buffer of `len` bytes) and returns its key.
    pub fn submit(&mut self, sub: Submission, data: Option<Vec<u8>>, waker: &Waker) -> u32 {
        let key = match self.free.pop() {
            Some(k) => k,
            None => {
                self.slots.push(Slot::empty());
                (self.slots.len() - 1) as u32
            }
        };
        let spare = &mut self.spare;
        let slot = &mut self.slots[key as usize];
        match data {
            Some(data) => {
                let old = std::mem::replace(&mut slot.data, data);
                if old.capacity() > 0 && spare.len() < MAX_SPARE {
                    spare.push(old);
                }
            }
            None => {
                // A spare big enough beats growing (and zeroing) this one.
                if slot.data.capacity() < sub.len {
                    if let Some(i) = spare.iter().position(|b| b.capacity() >= sub.len) {
                        let old = std::mem::replace(&mut slot.data, spare.swap_remove(i));
                        if old.capacity() > 0 && spare.len() < MAX_SPARE {
                            spare.push(old);
                        }
                    }
                }
                // Stale bytes are harmless: only bytes the device filled
                // are ever handed out. Zeroing happens only when growing.
                if slot.data.len() < sub.len {
                    slot.data.resize(sub.len, 0);
                } else {
                    slot.data.truncate(sub.len);
                }
            }
        }
        slot.state = State::Queued;
        slot.kind = sub.kind;
        slot.addr = sub.addr;
        slot.len = sub.len;
        slot.record = sub.record;
        slot.failures.clear();
        slot.fragments.clear();
        match &mut slot.waker {
            Some(w) => w.clone_from(waker),
            None => slot.waker = Some(waker.clone()),
        }
        self.pending.push(key);
        if let Some(driver) = &self.driver {
            driver.wake_by_ref();
        }
        key
    }

    /// The slot of `key`.
    pub fn slot(&mut self, key: u32) -> &mut Slot {
        &mut self.slots[key as usize]
    }

    /// Whether `key` is done; if not, remembers `waker` to wake it.
    pub fn poll_done(&mut self, key: u32, waker: &Waker) -> bool {
        let slot = &mut self.slots[key as usize];
        if slot.state == State::Done {
            return true;
        }
        match &mut slot.waker {
            Some(w) => w.clone_from(waker),
            None => slot.waker = Some(waker.clone()),
        }
        false
    }

    /// Takes the caller's buffer back out of a done request, leaving a
    /// spare one in its place.
    pub fn take_data(&mut self, key: u32) -> Vec<u8> {
        let replacement = self.spare.pop().unwrap_or_default();
        std::mem::replace(&mut self.slots[key as usize].data, replacement)
    }

    /// Frees a done (or cancelled, or abandoned) request's slot. Its waker
    /// stays, so the next request from the same task need not clone one.
    pub fn release(&mut self, key: u32) {
        self.slots[key as usize].state = State::Free;
        self.free.push(key);
    }

    /// The request's future is gone: free what can be freed now, and mark
    /// the rest for the flush that holds it.
    pub fn forget(&mut self, key: u32) {
        let slot = &mut self.slots[key as usize];
        match slot.state {
            State::Queued => slot.state = State::Cancelled,
            State::InFlight => slot.state = State::Abandoned,
            State::Done => self.release(key),
            State::Free | State::Cancelled | State::Abandoned => {}
        }
    }
}
