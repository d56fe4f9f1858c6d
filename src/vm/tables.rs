//! Page-table pages for walks: read once for every walk waiting on one,
//! cached, and noted, so that a write to one of them empties the caches
//! derived from it.

use std::sync::{Arc, MutexGuard};

use futures::future::{BoxFuture, FutureExt, Shared, WeakShared};
use rustc_hash::{FxHashMap, FxHashSet};

use super::cache::TablePage;
use super::paging::TABLE_SIZE;
use super::AddressSpace;
use crate::lock::LockRecovering;
use crate::{PageError, PartialError};

/// A read of a table page.
type PageReadFuture = BoxFuture<'static, Result<TablePage, PageError>>;

/// A table page being read, shared by the walks that wait for it.
type PageRead = Shared<PageReadFuture>;

/// The table reads in flight, by address, with the table cache's
/// generation they began in. Weak: when every walk waiting for a read is
/// dropped, the read is dropped (its request withdrawn) rather than kept
/// and served, however old, to a later walk.
pub(super) type Inflight = FxHashMap<u64, (u64, WeakShared<PageReadFuture>)>;

impl AddressSpace {
    pub(super) fn tables_read(&self) -> MutexGuard<'_, FxHashSet<u64>> {
        self.inner.tables_read.lock_recovering()
    }

    /// Notes the table page of `addr`, about to be read, when anything
    /// could be cached from it. Before the read, so that a write that ends
    /// while it is under way finds it.
    pub(super) fn note_tables_read(&self, addr: u64) {
        if self.inner.translations.enabled() || self.inner.tables.enabled() {
            self.tables_read().insert(addr & !(TABLE_SIZE - 1));
        }
    }

    /// After a write of `len` bytes at physical `pa` (done, or partly):
    /// empties the caches if it touched a page table they were read from.
    pub(super) fn forget_written_tables(&self, pa: u64, len: usize) {
        if len == 0 {
            return;
        }
        let first = pa & !(TABLE_SIZE - 1);
        let last = pa.saturating_add(len as u64 - 1) & !(TABLE_SIZE - 1);
        let hit = {
            let read = self.tables_read();
            let pages = (last - first) / TABLE_SIZE + 1;
            if pages <= read.len() as u64 {
                (0..pages).any(|i| read.contains(&(first + i * TABLE_SIZE)))
            } else {
                read.iter().any(|&page| (first..=last).contains(&page))
            }
        };
        if hit {
            self.invalidate();
        }
    }

    /// One table entry, from the page-table cache or the device.
    /// With `any_age`, a cached page is taken however old (one a walk in
    /// progress found moments ago).
    pub(super) async fn table_entry(&self, addr: u64, any_age: bool) -> Result<u64, PageError> {
        if !self.inner.tables.enabled() {
            self.note_tables_read(addr);
            return self
                .inner
                .mem
                .read_val::<u64>(addr)
                .await
                .map_err(first_reason);
        }
        let base = addr & !(TABLE_SIZE - 1);
        let page = match any_age
            .then(|| self.inner.tables.get_any_age(base))
            .flatten()
        {
            Some(page) => page,
            None => self.table_page(base).await?,
        };
        let at = (addr & (TABLE_SIZE - 1)) as usize;
        Ok(u64::from_le_bytes(
            page[at..at + 8].try_into().expect("8 bytes"),
        ))
    }

    /// A whole page-table page, from the cache when it is on, else from the
    /// device. Walks that miss the same page at the same time share one read
    /// of it (the engine would send it once anyway, but each would copy it),
    /// and that read alone fills the cache.
    pub(super) async fn table_page(&self, addr: u64) -> Result<TablePage, PageError> {
        if let Some(page) = self.inner.tables.get(addr) {
            return Ok(page);
        }
        // A read begun before an invalidation is not joined: it may have
        // been sent before.
        let generation = self.inner.tables.generation();
        let read = {
            let mut inflight = self.inner.inflight.lock_recovering();
            let joined = inflight
                .get(&addr)
                .filter(|(g, _)| *g == generation)
                .and_then(|(_, read)| read.upgrade());
            match joined {
                Some(read) => read,
                None => {
                    // Noted after the generation was taken: if the notes
                    // are emptied in between, the read caches nothing. So
                    // a cached page, and a read joined, is always noted.
                    self.note_tables_read(addr);
                    let read = self.read_table_page(addr, generation);
                    if let Some(weak) = read.downgrade() {
                        inflight.insert(addr, (generation, weak));
                    }
                    read
                }
            }
        };
        read.await
    }

    /// A shareable read of the table page at `addr` that fills the cache
    /// (unless it was invalidated since `generation`) and then leaves the
    /// map of reads in flight.
    pub(super) fn read_table_page(&self, addr: u64, generation: u64) -> PageRead {
        let mem = self.inner.mem.clone();
        // Weak: an address space dropped meanwhile must still be freed.
        let inner = Arc::downgrade(&self.inner);
        async move {
            let (buf, result) = mem
                .read_into_owned(addr, vec![0; TABLE_SIZE as usize])
                .await;
            let page = result.map(|()| TablePage::from(buf));
            if let Some(inner) = inner.upgrade() {
                // Cache first: a walk that missed the cache still finds
                // this (finished) read in the map.
                if let Ok(page) = &page {
                    inner.tables.insert(generation, addr, page.clone());
                }
                let mut inflight = inner.inflight.lock_recovering();
                // (Not a read begun after an invalidation.)
                if inflight.get(&addr).is_some_and(|(g, _)| *g == generation) {
                    inflight.remove(&addr);
                }
            }
            page.map_err(first_reason)
        }
        .boxed()
        .shared()
    }
}

/// The reason of a failed table read (it is read whole or not at all).
pub(super) fn first_reason(e: PartialError) -> PageError {
    e.failed
        .first()
        .map_or(PageError::Unspecified, |f| f.reason)
}
