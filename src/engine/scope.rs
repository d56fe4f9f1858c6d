//! Scopes: reads and writes that use the caller's buffers in place.
//!
//! A borrowed buffer cannot be handed to the engine by a future alone: a
//! future leaked with `mem::forget` ends its borrow without running any
//! code, and a later flush would write into memory that is no longer the
//! future's. A scope closes that gap the way `std::thread::scope` does:
//! its buffers are borrowed for the whole scope, and the scope's end, which
//! always runs, waits for a flush in progress and cancels its requests
//! still queued. So the device fills and reads the caller's buffers
//! directly, with no copy through the engine.

use crate::lock::LockRecovering;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

use super::request::{ScopedRead, ScopedWrite};
use super::Memory;

/// Requests that use buffers lent for the life of a scope, without
/// copying them; see [`Memory::scope`].
///
/// A buffer must outlive the scope, and stays lent until the scope ends:
///
/// ```compile_fail,E0597
/// # use leechio::{MemBackend, Memory};
/// # let mem = Memory::new(MemBackend::with_address_pattern(1 << 20));
/// mem.scope(|s| {
///     let mut buf = [0u8; 8]; // dies before the scope ends
///     let _ = mem.block_on(s.read(0, &mut buf));
/// });
/// ```
///
/// ```compile_fail,E0506
/// # use leechio::{MemBackend, Memory};
/// # let mem = Memory::new(MemBackend::with_address_pattern(1 << 20));
/// let mut buf = [0u8; 8];
/// mem.scope(|s| {
///     let _ = mem.block_on(s.read(0, &mut buf));
///     buf[0] = 1; // still lent
/// });
/// ```
pub struct Scope<'scope, 'env: 'scope> {
    mem: &'scope Memory,
    id: u64,
    /// Invariant in both lifetimes, like `std::thread::Scope`, so that a
    /// scope cannot be taken for a longer or shorter one.
    _lifetimes: PhantomData<(&'scope mut &'scope (), &'env mut &'env ())>,
}

impl std::fmt::Debug for Scope<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope").field("id", &self.id).finish()
    }
}

/// The next scope's id (0 is never used).
static NEXT_SCOPE_ID: AtomicU64 = AtomicU64::new(1);

impl<'scope> Scope<'scope, '_> {
    /// Reads `buf.len()` bytes at `addr` straight into `buf`, which stays
    /// borrowed until the scope ends. On partial failure, the bytes read
    /// are in `buf` and the failed ones are listed (and left as they were
    /// unless [`ScopedRead::zero_failed`]).
    #[inline]
    pub fn read(&self, addr: u64, buf: &'scope mut [u8]) -> ScopedRead<'scope> {
        ScopedRead::new(self.mem, self.id, addr, buf)
    }

    /// Writes `data` at `addr` straight from `data`, which stays borrowed
    /// until the scope ends.
    #[inline]
    pub fn write(&self, addr: u64, data: &'scope [u8]) -> ScopedWrite<'scope> {
        ScopedWrite::new(self.mem, self.id, addr, data)
    }
}

/// Ends a scope when dropped, so that it also ends when the scope's
/// closure panics.
struct ScopeEnd<'m> {
    mem: &'m Memory,
    id: u64,
}

impl Drop for ScopeEnd<'_> {
    /// Where a request of the scope can still be: in flight (the flush
    /// lock waits for it), in the queue, or staged by a driver that polled
    /// its future. Such a driver is either inside the scope, and has
    /// returned and published what it staged, or leaked with it (so it
    /// never flushes); or it is the driver this scope runs under, on this
    /// thread, whose staging is published here. No other driver can reach
    /// the scope's futures: their type carries the scope's lifetime, which
    /// began after any older thread or task was given its work.
    fn drop(&mut self) {
        // Holding the flush lock, no flush is in progress or can start.
        let _flusher = self.mem.shared.flusher.lock_recovering();
        let mut queue = self.mem.queue();
        if let Some(staging) = self.mem.driving_staging() {
            queue.publish(staging);
        }
        queue.cancel_scope(self.id);
    }
}

impl Memory {
    /// Runs `f` with a [`Scope`] whose reads and writes use the caller's
    /// buffers in place: the device fills a read's buffer directly, and a
    /// write's bytes are not copied. Buffers are borrowed until the scope
    /// ends, as with `std::thread::scope`. Futures of a scope that are
    /// dropped or leaked never reach their buffers after the scope: its
    /// end waits for a flush in progress and cancels what is still queued.
    ///
    /// ```
    /// use leechio::{join_all, MemBackend, Memory};
    /// let mem = Memory::new(MemBackend::with_address_pattern(1 << 20));
    /// let mut pages = vec![[0u8; 4096]; 16];
    /// mem.scope(|s| {
    ///     let reads = pages.iter_mut().enumerate().map(|(i, page)| {
    ///         s.read(i as u64 * 0x2000, page) // one backend call for all 16
    ///     });
    ///     for result in mem.block_on(join_all(reads)) {
    ///         result.unwrap();
    ///     }
    /// });
    /// assert_eq!(pages[3][..8], 0x6000u64.to_le_bytes());
    /// ```
    pub fn scope<'env, R>(
        &self,
        f: impl for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R,
    ) -> R {
        let scope = Scope {
            mem: self,
            id: NEXT_SCOPE_ID.fetch_add(1, Ordering::Relaxed),
            _lifetimes: PhantomData,
        };
        let _end = ScopeEnd {
            mem: self,
            id: scope.id,
        };
        f(&scope)
    }
}
