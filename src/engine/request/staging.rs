//! A driver's staging: requests queued by the futures it polls on its own
//! thread, in slots reserved in advance, without the queue lock.

use std::sync::Mutex;

use super::buffers::SpareBuffers;
use super::queue::{lock, NewRequest, Queue, Req};
use super::slot::SlotRef;

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
    pub(in crate::engine) reserved: Vec<SlotRef>,
    /// Queued requests not yet in `Queue::pending`, in program order.
    pub(in crate::engine) staged: Vec<Req>,
    /// Buffers replaced by moved-in ones or by better-fitting ones.
    pub(in crate::engine) spare: SpareBuffers,
    /// Requests submitted since its driver last flushed, and in the batch
    /// before: a driver's batches tend to repeat their size, so slots are
    /// reserved for a whole batch at once.
    pub(in crate::engine) batch: usize,
    pub(in crate::engine) last_batch: usize,
    /// Other engines its driver's futures queued requests on since the
    /// last flush (see `Memory::note_other_engine`).
    pub others: Vec<crate::engine::Memory>,
}

/// Slots a staging reserves at least at a time. Few, so that a driver of
/// single requests keeps reusing the same slots (and their buffers stay
/// in the cache); larger batches reserve as many as they have staged.
pub(in crate::engine) const RESERVE: usize = 8;

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
    pub(in crate::engine) fn stock(&mut self, queue: &Mutex<Queue>, req: &NewRequest<'_>) {
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
