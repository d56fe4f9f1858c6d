//! Virtual memory: x86-64 address translation on the engine.
//!
//! Every page-table read of a walk is an ordinary engine read, so all walks
//! in flight advance one level per flush, and a table page needed by many
//! walks in one flush is read once. N independent cold reads cost at most
//! six round trips (five levels of 5-level paging and the data; five with
//! 4-level paging), warm ones one.
//!
//! An address space reads its tables in one [`Paging`] mode, given when it
//! is made: the same table page means different things in the two, so a
//! root whose mode is not known is first put to [`detect_paging`].

mod cache;
mod detect;
mod mappings;
pub(crate) mod paging;
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub mod reference;
mod runs;
mod scan;
mod tables;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytemuck::Pod;
use rustc_hash::FxHashSet;

pub use cache::CacheConfig;
pub use detect::{detect_paging, FaultingEntry, PagingEvidence, Reading};
pub use mappings::{Alias, FailedRange, Mapping, Mappings};
pub use paging::{
    Access, PageSize, Paging, Translation, WalkError, LEVELS, LEVEL_NAMES,
    MAX_PHYSICAL_ADDRESS_BITS,
};
pub use scan::{find_address_spaces, SpaceCandidate};

use crate::engine::{join_all, PartialError, Scope};
use crate::{Memory, PageError};
use cache::{TablePage, TimedCache};
use paging::{reserved_address_bits, step, table_index, Step, ADDR_MASK, PTE_LEVEL};
use runs::access_runs;
use tables::Inflight;

/// Settings of an address space's caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmConfig {
    /// Translations of virtual pages.
    pub translations: CacheConfig,
    /// Page-table pages. When disabled, walks read single 8-byte entries.
    pub page_tables: CacheConfig,
    /// The target CPU's physical-address width (MAXPHYADDR, from CPUID
    /// 0x80000008): entry address bits at and above it are reserved, and a
    /// walk that meets one fails with [`PageError::ReservedBits`], as the
    /// CPU would fault. 52 (the architecture's ceiling) unless the target
    /// is known to have fewer; 12 to 52.
    pub physical_address_bits: u8,
}

impl Default for VmConfig {
    /// Both caches on, trusted for one second (as memflow does).
    fn default() -> Self {
        VmConfig {
            translations: CacheConfig::valid_for(Duration::from_secs(1), 1 << 16),
            page_tables: CacheConfig::valid_for(Duration::from_secs(1), 4096),
            physical_address_bits: MAX_PHYSICAL_ADDRESS_BITS,
        }
    }
}

impl VmConfig {
    /// No caching at all: every access walks the tables afresh.
    pub const UNCACHED: VmConfig = VmConfig {
        translations: CacheConfig::DISABLED,
        page_tables: CacheConfig::DISABLED,
        physical_address_bits: MAX_PHYSICAL_ADDRESS_BITS,
    };
}

/// A cached translation of one 4 KiB virtual page.
#[derive(Debug, Clone, Copy)]
struct CachedPage {
    /// Physical address of the 4 KiB virtual page's first byte.
    pa: u64,
    page_size: PageSize,
    entries: [Option<u64>; LEVELS],
}

struct Inner {
    mem: Memory,
    dtb: u64,
    paging: Paging,
    translations: TimedCache<CachedPage>,
    tables: TimedCache<TablePage>,
    inflight: Mutex<Inflight>,
    /// Entry bits that are reserved for the target's MAXPHYADDR.
    reserved: u64,
    /// Page-table pages read since the caches were last emptied: what
    /// either cache holds was derived from these, so a write through this
    /// space to one of them empties both.
    tables_read: Mutex<FxHashSet<u64>>,
}

/// The virtual address space of a page-table root (DTB, the CR3 value):
/// reads, writes and translations through x86-64 4-level or 5-level
/// paging. Cheap to clone; clones share caches.
#[derive(Clone)]
pub struct AddressSpace {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for AddressSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressSpace")
            .field("dtb", &format_args!("{:#x}", self.inner.dtb))
            .field("paging", &self.inner.paging)
            .finish_non_exhaustive()
    }
}

impl AddressSpace {
    /// The address space whose top table is at `dtb` (a CR3 value; its
    /// low flag bits are ignored), read in `paging` mode, with default
    /// caches.
    pub fn new(mem: Memory, dtb: u64, paging: Paging) -> Self {
        Self::with_config(mem, dtb, paging, VmConfig::default())
    }

    /// The same with chosen cache settings.
    pub fn with_config(mem: Memory, dtb: u64, paging: Paging, config: VmConfig) -> Self {
        AddressSpace {
            inner: Arc::new(Inner {
                mem,
                dtb: dtb & ADDR_MASK,
                paging,
                translations: TimedCache::new(config.translations),
                tables: TimedCache::new(config.page_tables),
                inflight: Mutex::default(),
                reserved: reserved_address_bits(config.physical_address_bits),
                tables_read: Mutex::default(),
            }),
        }
    }

    /// The physical memory underneath.
    pub fn memory(&self) -> &Memory {
        &self.inner.mem
    }

    /// Physical address of the top table.
    pub fn dtb(&self) -> u64 {
        self.inner.dtb
    }

    /// The paging mode its tables are read in.
    pub fn paging(&self) -> Paging {
        self.inner.paging
    }

    /// Forgets every cached translation and page-table page, so the next
    /// access sees the target's tables as they are now.
    ///
    /// Writes through this space call it themselves when they change a
    /// page table it has read; a change made by the target, or through
    /// [`Memory`] directly, is seen once the caches' validity runs out or
    /// after this call.
    pub fn invalidate(&self) {
        // Emptied before the generations move on: a walk that records a
        // table after this either began after the invalidation (and its
        // record stays) or stores nothing.
        self.tables_read().clear();
        // Tables before translations: a walk that found an old table page
        // took the translations' generation before this, so what it found
        // is refused.
        self.invalidate_page_tables();
        self.invalidate_translations();
    }

    /// Forgets cached translations.
    pub fn invalidate_translations(&self) {
        self.inner.translations.invalidate();
    }

    /// Forgets cached page-table pages.
    pub fn invalidate_page_tables(&self) {
        self.inner.tables.invalidate();
    }

    /// Translates `va`, reporting the entry found at each level.
    pub async fn translate(&self, va: u64) -> Result<Translation, WalkError> {
        self.translate_by(va, self.walk(va)).await
    }

    /// Translates `va` in the 2 MiB region of `near`, a 4 KiB page just
    /// translated: the walk starts at the page table `near`'s directory
    /// entry names, whatever the age of the levels above (which a cache's
    /// validity could have run out on while `near` was read, costing a
    /// read call for nothing).
    pub(super) async fn translate_beside(
        &self,
        va: u64,
        near: &Translation,
    ) -> Result<Translation, WalkError> {
        let pd = PTE_LEVEL - 1;
        let table = match near.entries[pd].map(|e| step(e, pd, self.inner.reserved)) {
            Some(Step::Table(table))
                if near.page_size == PageSize::Size4K && near.va >> 21 == va >> 21 =>
            {
                table
            }
            _ => return self.translate(va).await,
        };
        let mut entries = near.entries;
        entries[PTE_LEVEL] = None;
        let walk = self.walk_from(va, PTE_LEVEL, table, entries, true);
        self.translate_by(va, walk).await
    }

    /// `va`'s translation from the cache, else by `walk`, which is then
    /// cached.
    async fn translate_by(
        &self,
        va: u64,
        walk: impl std::future::Future<Output = Result<Translation, WalkError>>,
    ) -> Result<Translation, WalkError> {
        let vpage = va & !0xfff;
        if let Some(c) = self.inner.translations.get(vpage >> 12) {
            return Ok(Translation {
                va,
                pa: c.pa + (va & 0xfff),
                page_size: c.page_size,
                entries: c.entries,
            });
        }
        let generation = self.inner.translations.generation();
        let t = walk.await?;
        let page_pa = t.pa - (va & 0xfff);
        let cached = CachedPage {
            pa: page_pa,
            page_size: t.page_size,
            entries: t.entries,
        };
        self.inner
            .translations
            .insert(generation, vpage >> 12, cached);
        Ok(t)
    }

    /// Walks the tables for `va`, one engine read per level.
    async fn walk(&self, va: u64) -> Result<Translation, WalkError> {
        let entries = [None; LEVELS];
        let paging = self.inner.paging;
        if !paging.is_canonical(va) {
            return Err(WalkError {
                va,
                reason: PageError::NonCanonical,
                level: None,
                entries,
            });
        }
        self.walk_from(va, paging.top_level(), self.inner.dtb, entries, false)
            .await
    }

    /// The rest of `va`'s walk: from the table of `level` at `table`,
    /// the entries above it in `entries`; with `found_now`, that table
    /// was found moments ago and is taken from the cache however old.
    async fn walk_from(
        &self,
        va: u64,
        start: usize,
        mut table: u64,
        mut entries: [Option<u64>; LEVELS],
        found_now: bool,
    ) -> Result<Translation, WalkError> {
        let fail = |reason, level, entries| WalkError {
            va,
            reason,
            level,
            entries,
        };
        for level in start..LEVELS {
            let addr = table + table_index(va, level) * 8;
            let entry = self
                .table_entry(addr, found_now && level == start)
                .await
                .map_err(|reason| fail(reason, Some(level), entries))?;
            entries[level] = Some(entry);
            match step(entry, level, self.inner.reserved) {
                Step::NotPresent => return Err(fail(PageError::NotMapped, Some(level), entries)),
                Step::Reserved => return Err(fail(PageError::ReservedBits, Some(level), entries)),
                Step::Table(next) => table = next,
                Step::Page(base, page_size) => {
                    let pa = base + (va & (page_size.bytes() - 1));
                    return Ok(Translation {
                        va,
                        pa,
                        page_size,
                        entries,
                    });
                }
            }
        }
        unreachable!("page table entries always end the walk")
    }

    /// Reads `buf.len()` bytes at `va`. Unmapped or non-canonical pages,
    /// and pages whose tables or data cannot be read, are failed ranges;
    /// the rest is read.
    pub async fn read(&self, va: u64, buf: &mut [u8]) -> Result<(), PartialError> {
        self.access(va, buf, |pa, part| self.inner.mem.read(pa, part))
            .await
    }

    /// Like [`AddressSpace::read`], into a buffer lent for `scope`: the
    /// device fills `buf` in place, with no copy through the engine (see
    /// [`Memory::scope`]). Worth it for large reads.
    ///
    /// ```
    /// # use leechio::{AddressSpace, MemBackend, Memory};
    /// # let mem = Memory::new(MemBackend::with_address_pattern(1 << 20));
    /// # let space = AddressSpace::new(mem.clone(), 0x1000, leechio::Paging::FourLevel);
    /// let mut buf = vec![0u8; 1 << 16];
    /// let result = mem.scope(|s| mem.block_on(space.read_scoped(s, 0x40_0000, &mut buf)));
    /// # assert!(result.is_err()); // (no page tables in this memory)
    /// ```
    pub async fn read_scoped<'s>(
        &self,
        scope: &Scope<'s, '_>,
        va: u64,
        buf: &'s mut [u8],
    ) -> Result<(), PartialError> {
        self.access(va, buf, |pa, part| scope.read(pa, part)).await
    }

    /// Reads one plain-old-data value at `va`.
    pub async fn read_val<T: Pod>(&self, va: u64) -> Result<T, PartialError> {
        let mut value = T::zeroed();
        self.read(va, bytemuck::bytes_of_mut(&mut value)).await?;
        Ok(value)
    }

    /// Writes `data` at `va`; only the requested bytes change. Failed
    /// ranges as for [`AddressSpace::read`]. A write to a page table this
    /// space has read empties its caches, so later accesses see the change.
    pub async fn write(&self, va: u64, data: &[u8]) -> Result<(), PartialError> {
        self.access(va, data, |pa, part| {
            let len = part.len();
            self.written(pa, len, self.inner.mem.write(pa, part))
        })
        .await
    }

    /// Like [`AddressSpace::write`], from data lent for `scope`: the
    /// device reads `data` in place, with no copy into the engine.
    pub async fn write_scoped<'s>(
        &self,
        scope: &Scope<'s, '_>,
        va: u64,
        data: &'s [u8],
    ) -> Result<(), PartialError> {
        self.access(va, data, |pa, part| {
            let len = part.len();
            self.written(pa, len, scope.write(pa, part))
        })
        .await
    }

    /// Writes every `(va, data)` of `ops`, from data lent for `scope`, as
    /// one batch whose writes land in the order given: every op is
    /// translated first, then all the physical writes are queued together,
    /// in op order. (Joined [`AddressSpace::write_scoped`]s would each
    /// queue their writes as soon as their own translation is done, so a
    /// later write of the same bytes whose page is cached would land
    /// before an earlier one that waits for a table read.)
    pub async fn write_all_scoped<'s>(
        &self,
        scope: &Scope<'s, '_>,
        ops: &[(u64, &'s [u8])],
    ) -> Vec<Result<(), PartialError>> {
        let plans = join_all(ops.iter().map(|&(va, data)| self.plan(va, data.len()))).await;
        // Each op's writes are queued when it is first polled, and
        // `join_all` polls the ops in order.
        let writes = ops
            .iter()
            .zip(plans)
            .map(|(&(_, data), (runs, failures))| async move {
                access_runs(data, &runs, failures, |pa, part| {
                    self.written(pa, part.len(), scope.write(pa, part))
                })
                .await
            });
        join_all(writes).await
    }

    /// Runs `write` of `len` bytes at physical `pa`, then keeps the caches
    /// true to what it wrote: also when dropped before it finishes, as the
    /// write may have landed (a flush sent it; the caller gave up on it
    /// before collecting the result, as `try_join` does).
    async fn written<F: Future<Output = Result<(), PartialError>>>(
        &self,
        pa: u64,
        len: usize,
        write: F,
    ) -> Result<(), PartialError> {
        struct Forget<'a> {
            space: &'a AddressSpace,
            pa: u64,
            len: usize,
        }
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                self.space.forget_written_tables(self.pa, self.len);
            }
        }
        let _forget = Forget {
            space: self,
            pa,
            len,
        };
        write.await
    }
}

#[cfg(test)]
mod tests;
