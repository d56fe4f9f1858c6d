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
//! finished request through the slot's atomic state (see `request::queue`).

mod driver;
mod flush;
mod join;
mod outcome;
mod request;
mod scope;

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::lock::LockRecovering;
use bytemuck::Pod;

pub use driver::{Driven, Driver};
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
use request::lent::LentBuffer;
use request::queue::{self, Kind, NewRequest, Queue};
use request::slot::SlotRef;
use request::staging::Staging;

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

#[cfg(test)]
pub(crate) mod tests;
