//! Virtual memory: x86-64 address translation on the engine.
//!
//! Every page-table read of a walk is an ordinary engine read, so all walks
//! in flight advance one level per flush, and a table page needed by many
//! walks in one flush is read once. N independent cold reads cost at most
//! five round trips (four levels and the data), warm ones one.

mod cache;
mod mappings;
mod paging;
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub mod reference;
mod scan;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytemuck::Pod;
use futures::future::{BoxFuture, FutureExt, Shared, WeakShared};
use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::Mutex;

pub use cache::CacheConfig;
pub use mappings::{Alias, FailedRange, Mapping, Mappings};
pub use paging::{PageSize, Translation, WalkError, LEVEL_NAMES, MAX_PHYSICAL_ADDRESS_BITS};
pub use scan::{find_address_spaces, SpaceCandidate};

use crate::engine::{join_all, Failure, PartialError, Scope};
use crate::{Memory, PageError};
use cache::{TablePage, TimedCache};
use paging::{
    is_canonical, reserved_address_bits, step, table_index, Step, ADDR_MASK, TABLE_SIZE, UPPER_HALF,
};

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
    entries: [Option<u64>; 4],
}

/// A read of a table page.
type PageReadFuture = BoxFuture<'static, Result<TablePage, PageError>>;

/// A table page being read, shared by the walks that wait for it.
type PageRead = Shared<PageReadFuture>;

/// The table reads in flight, by address, with the table cache's
/// generation they began in. Weak: when every walk waiting for a read is
/// dropped, the read is dropped (its request withdrawn) rather than kept
/// and served, however old, to a later walk.
type Inflight = FxHashMap<u64, (u64, WeakShared<PageReadFuture>)>;

struct Inner {
    mem: Memory,
    dtb: u64,
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
/// reads, writes and translations through x86-64 4-level paging. Cheap to
/// clone; clones share caches.
#[derive(Clone)]
pub struct AddressSpace {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for AddressSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressSpace")
            .field("dtb", &format_args!("{:#x}", self.inner.dtb))
            .finish_non_exhaustive()
    }
}

impl AddressSpace {
    /// The address space whose top table is at `dtb` (a CR3 value; its
    /// low flag bits are ignored), with default caches.
    pub fn new(mem: Memory, dtb: u64) -> Self {
        Self::with_config(mem, dtb, VmConfig::default())
    }

    /// The same with chosen cache settings.
    pub fn with_config(mem: Memory, dtb: u64, config: VmConfig) -> Self {
        AddressSpace {
            inner: Arc::new(Inner {
                mem,
                dtb: dtb & ADDR_MASK,
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

    fn tables_read(&self) -> std::sync::MutexGuard<'_, FxHashSet<u64>> {
        self.inner
            .tables_read
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Notes the table page of `addr`, about to be read, when anything
    /// could be cached from it. Before the read, so that a write that ends
    /// while it is under way finds it.
    fn note_tables_read(&self, addr: u64) {
        if self.inner.translations.enabled() || self.inner.tables.enabled() {
            self.tables_read().insert(addr & !(TABLE_SIZE - 1));
        }
    }

    /// After a write of `len` bytes at physical `pa` (done, or partly):
    /// empties the caches if it touched a page table they were read from.
    fn forget_written_tables(&self, pa: u64, len: usize) {
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
        let t = self.walk(va).await?;
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
        let mut entries = [None; 4];
        let fail = |reason, level, entries| WalkError {
            va,
            reason,
            level,
            entries,
        };
        if !is_canonical(va) {
            return Err(fail(PageError::NonCanonical, None, entries));
        }
        let mut table = self.inner.dtb;
        for level in 0..4 {
            let entry = self
                .table_entry(table + table_index(va, level) * 8)
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
        unreachable!("level 3 entries always end the walk")
    }

    /// One table entry, from the page-table cache or the device.
    async fn table_entry(&self, addr: u64) -> Result<u64, PageError> {
        if !self.inner.tables.enabled() {
            self.note_tables_read(addr);
            return self
                .inner
                .mem
                .read_val::<u64>(addr)
                .await
                .map_err(first_reason);
        }
        let page = self.table_page(addr & !(TABLE_SIZE - 1)).await?;
        let at = (addr & (TABLE_SIZE - 1)) as usize;
        Ok(u64::from_le_bytes(
            page[at..at + 8].try_into().expect("8 bytes"),
        ))
    }

    /// A whole page-table page, from the cache when it is on, else from the
    /// device. Walks that miss the same page at the same time share one read
    /// of it (the engine would send it once anyway, but each would copy it),
    /// and that read alone fills the cache.
    async fn table_page(&self, addr: u64) -> Result<TablePage, PageError> {
        if let Some(page) = self.inner.tables.get(addr) {
            return Ok(page);
        }
        // A read begun before an invalidation is not joined: it may have
        // been sent before.
        let generation = self.inner.tables.generation();
        let read = {
            let mut inflight = self
                .inner
                .inflight
                .lock()
                .unwrap_or_else(|e| e.into_inner());
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
    fn read_table_page(&self, addr: u64, generation: u64) -> PageRead {
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
                let mut inflight = inner.inflight.lock().unwrap_or_else(|e| e.into_inner());
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
    /// # let space = AddressSpace::new(mem.clone(), 0x1000);
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

    /// Translates `va..va + buf.len()` and runs `access` on each physical
    /// run with its part of `buf`, all in one batch.
    async fn access<B, A, F>(&self, va: u64, buf: B, access: A) -> Result<(), PartialError>
    where
        B: Split,
        A: Fn(u64, B) -> F,
        F: Future<Output = Result<(), PartialError>>,
    {
        let len = buf.len();
        if in_one_page(va, len) {
            return match self.translate(va).await {
                Ok(t) => access(t.pa, buf).await,
                Err(e) => Err(wholly_failed(len, e.reason)),
            };
        }
        let (runs, failures) = self.plan(va, len).await;
        access_runs(buf, &runs, failures, access).await
    }

    /// The physical runs of `va..va + len` and the bytes that cannot be
    /// translated, as `access` finds them.
    async fn plan(&self, va: u64, len: usize) -> (Vec<Run>, Vec<Failure>) {
        if in_one_page(va, len) {
            return match self.translate(va).await {
                Ok(t) => (
                    vec![Run {
                        offset: 0,
                        len,
                        pa: t.pa,
                    }],
                    Vec::new(),
                ),
                Err(e) => (Vec::new(), wholly_failed(len, e.reason).failed),
            };
        }
        let mut failures = Vec::new();
        let runs = self.resolve(va, len, &mut failures).await;
        (runs, failures)
    }

    /// Translates every 4 KiB virtual page of `va..va+len` at once (one
    /// walk level per flush) and returns the physical runs to access,
    /// merging pages that are contiguous in physical memory. Bytes that
    /// cannot be translated go to `failures`.
    async fn resolve(&self, va: u64, len: usize, failures: &mut Vec<Failure>) -> Vec<Run> {
        let mut pieces = Vec::new();
        let mut offset = 0usize;
        while offset < len {
            let Some(at) = va.checked_add(offset as u64) else {
                failures.push(Failure {
                    offset,
                    len: len - offset,
                    reason: PageError::AddressOverflow,
                });
                break;
            };
            if !is_canonical(at) {
                // The whole non-canonical hole fails at once, not page by
                // page (a mistaken length could span exabytes of it).
                let to_upper_half = usize::try_from(UPPER_HALF - at).unwrap_or(usize::MAX);
                let n = (len - offset).min(to_upper_half);
                failures.push(Failure {
                    offset,
                    len: n,
                    reason: PageError::NonCanonical,
                });
                offset += n;
                continue;
            }
            let n = (len - offset).min((0x1000 - (at & 0xfff)) as usize);
            pieces.push((offset, n, at));
            offset += n;
        }
        // The first page of each 2 MiB region first: where a large page maps
        // it, the rest of that page needs no walk of its own, and the other
        // pages' walks find their tables cached. Without the table cache a
        // second round would walk every level again: all pages go at once.
        let mut translations: Vec<Option<Result<Translation, WalkError>>> =
            vec![None; pieces.len()];
        let cached = self.inner.tables.enabled();
        let firsts: Vec<usize> = (0..pieces.len())
            .filter(|&i| !cached || i == 0 || pieces[i].2 >> 21 != pieces[i - 1].2 >> 21)
            .collect();
        let found = join_all(firsts.iter().map(|&i| self.translate(pieces[i].2))).await;
        for (&i, t) in firsts.iter().zip(found) {
            if let Ok(t) = &t {
                let base_va = t.va & !(t.page_size.bytes() - 1);
                for (slot, &(_, _, at)) in translations.iter_mut().zip(&pieces).skip(i + 1) {
                    if t.page_size == PageSize::Size4K || at - base_va >= t.page_size.bytes() {
                        break;
                    }
                    *slot = Some(Ok(Translation {
                        va: at,
                        pa: t.pa + (at - t.va),
                        ..*t
                    }));
                }
            }
            translations[i] = Some(t);
        }
        let rest: Vec<usize> = (0..pieces.len())
            .filter(|&i| translations[i].is_none())
            .collect();
        let found = join_all(rest.iter().map(|&i| self.translate(pieces[i].2))).await;
        for (&i, t) in rest.iter().zip(found) {
            translations[i] = Some(t);
        }
        let translations = translations
            .into_iter()
            .map(|t| t.expect("every piece translated"));
        let mut runs: Vec<Run> = Vec::with_capacity(pieces.len());
        for (&(offset, len, _), t) in pieces.iter().zip(translations) {
            match t {
                Ok(t) => match runs.last_mut() {
                    Some(r) if r.offset + r.len == offset && r.pa + r.len as u64 == t.pa => {
                        r.len += len
                    }
                    _ => runs.push(Run {
                        offset,
                        len,
                        pa: t.pa,
                    }),
                },
                Err(e) => failures.push(Failure {
                    offset,
                    len,
                    reason: e.reason,
                }),
            }
        }
        runs
    }
}

/// Runs `access` on each of `runs` with its part of `buf`, all in one
/// batch; the result has their failures and `failures` (bytes that could
/// not be translated).
async fn access_runs<B, A, F>(
    buf: B,
    runs: &[Run],
    failures: Vec<Failure>,
    access: A,
) -> Result<(), PartialError>
where
    B: Split,
    A: Fn(u64, B) -> F,
    F: Future<Output = Result<(), PartialError>>,
{
    let len = buf.len();
    let parts = buf.split_runs(runs).map(|(run, part)| {
        let done = access(run.pa, part);
        async move { (run.offset, done.await) }
    });
    collect(len, failures, join_all(parts).await)
}

/// A virtually and physically contiguous part of a request.
#[derive(Debug, Clone, Copy)]
struct Run {
    offset: usize,
    len: usize,
    pa: u64,
}

/// A buffer that splits into the disjoint parts physical runs cover: a
/// read's `&mut [u8]` or a write's `&[u8]`.
trait Split: Sized + Default {
    fn len(&self) -> usize;
    fn split_at(self, mid: usize) -> (Self, Self);

    /// The parts of `self` the runs cover, each with its run.
    fn split_runs(self, runs: &[Run]) -> impl Iterator<Item = (&Run, Self)> {
        let mut rest = self;
        let mut consumed = 0;
        runs.iter().map(move |run| {
            let (_, tail) = std::mem::take(&mut rest).split_at(run.offset - consumed);
            let (part, tail) = tail.split_at(run.len);
            rest = tail;
            consumed = run.offset + run.len;
            (run, part)
        })
    }
}

impl Split for &mut [u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }

    fn split_at(self, mid: usize) -> (Self, Self) {
        self.split_at_mut(mid)
    }
}

impl Split for &[u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }

    fn split_at(self, mid: usize) -> (Self, Self) {
        <[u8]>::split_at(self, mid)
    }
}

/// Whether `va..va+len` is inside one 4 KiB page: the common access (a
/// value, a pointer), which needs one translation and one engine request
/// and none of `resolve`'s planning (whose vectors and joins cost a
/// cached read several times its engine request).
fn in_one_page(va: u64, len: usize) -> bool {
    len > 0 && (va & 0xfff) + len as u64 <= 0x1000
}

/// All `len` bytes failed for `reason`.
fn wholly_failed(len: usize, reason: PageError) -> PartialError {
    PartialError {
        failed: vec![Failure {
            offset: 0,
            len,
            reason,
        }],
        len,
    }
}

/// Merges translation failures and the failures of each physical run
/// (shifted to the request's offsets) into one sorted result.
fn collect(
    len: usize,
    mut failures: Vec<Failure>,
    results: Vec<(usize, Result<(), PartialError>)>,
) -> Result<(), PartialError> {
    for (offset, result) in results {
        if let Err(e) = result {
            failures.extend(e.failed.into_iter().map(|f| Failure {
                offset: f.offset + offset,
                ..f
            }));
        }
    }
    if failures.is_empty() {
        return Ok(());
    }
    failures.sort_unstable_by_key(|f| f.offset);
    let mut merged: Vec<Failure> = Vec::with_capacity(failures.len());
    for f in failures {
        match merged.last_mut() {
            Some(last) if last.reason == f.reason && last.offset + last.len == f.offset => {
                last.len += f.len
            }
            _ => merged.push(f),
        }
    }
    Err(PartialError {
        failed: merged,
        len,
    })
}

/// The reason of a failed table read (it is read whole or not at all).
fn first_reason(e: PartialError) -> PageError {
    e.failed
        .first()
        .map_or(PageError::Unspecified, |f| f.reason)
}

#[cfg(test)]
mod tests;
