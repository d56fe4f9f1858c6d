//! Address translation on the in-memory backend, with page tables built
//! here; the independent oracles (memflow's, QEMU's) are in `tests/`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{join_all, FutureExt};

use super::*;
use crate::{EngineConfig, Failure, MemBackend};

pub(super) const MIB: u64 = 1 << 20;
/// The end of 4-level paging's lower half, and the start of its upper.
const LOWER_HALF_END: u64 = 1 << 47;
const UPPER_HALF: u64 = 0xffff_8000_0000_0000;
pub(super) const PRESENT_RW: u64 = 0x3;
pub(super) const PS: u64 = 1 << 7;

/// Page tables written into a [`MemBackend`], tables taken from a bump
/// allocator at `tables_at`.
pub(super) struct Tables {
    pub(super) backend: Arc<MemBackend>,
    pub(super) dtb: u64,
    pub(super) paging: Paging,
    pub(super) next_table: u64,
}

impl Tables {
    /// 4-level tables.
    pub(super) fn new(backend: Arc<MemBackend>, tables_at: u64) -> Self {
        Self::in_mode(backend, tables_at, Paging::FourLevel)
    }

    /// Tables of `paging` mode.
    pub(super) fn in_mode(backend: Arc<MemBackend>, tables_at: u64, paging: Paging) -> Self {
        Tables {
            backend,
            dtb: tables_at,
            paging,
            next_table: tables_at + 0x1000,
        }
    }

    pub(super) fn entry(&self, addr: u64) -> u64 {
        u64::from_le_bytes(self.backend.bytes(addr, 8).try_into().unwrap())
    }

    /// Maps `va` to `pa` with a page of `size`, creating tables as needed.
    pub(super) fn map(&mut self, va: u64, pa: u64, size: PageSize) {
        let leaf_level = match size {
            PageSize::Size1G => 2,
            PageSize::Size2M => 3,
            PageSize::Size4K => 4,
        };
        let mut table = self.dtb;
        for level in self.paging.top_level()..leaf_level {
            let at = table + paging::table_index(va, level) * 8;
            let mut entry = self.entry(at);
            if entry & 1 == 0 {
                entry = self.next_table | PRESENT_RW;
                self.next_table += 0x1000;
                self.backend.poke(at, &entry.to_le_bytes());
            }
            table = entry & ADDR_MASK;
        }
        let flags = if leaf_level == 4 {
            PRESENT_RW
        } else {
            PRESENT_RW | PS
        };
        self.backend.poke(
            table + paging::table_index(va, leaf_level) * 8,
            &(pa | flags).to_le_bytes(),
        );
    }
}

/// 64 MiB of address-pattern memory with tables at 48 MiB; the engine, the
/// backend's counters, and the tables.
pub(super) fn setup() -> (Memory, Arc<MemBackend>, Tables) {
    let backend = Arc::new(MemBackend::with_address_pattern(64 * MIB as usize));
    let mem = Memory::with_config(backend.clone(), EngineConfig::default());
    let tables = Tables::new(backend.clone(), 48 * MIB);
    (mem, backend, tables)
}

/// The index of `va` in the 4-level table of `level` (0 = PML4), as the
/// 4-level tests here count levels.
pub(super) fn index4(va: u64, level: usize) -> u64 {
    paging::table_index(va, level + 1)
}

pub(super) const KERNEL: u64 = 0xffff_ffff_8000_0000;
pub(super) const USER: u64 = 0x0000_7f00_0000_0000;

#[test]
fn translates_4k_2m_and_1g_pages_with_the_entries_of_each_level() {
    let (mem, _, mut t) = setup();
    t.map(USER + 0x5000, 0x12_3000, PageSize::Size4K);
    t.map(KERNEL + 0x20_0000, 0x40_0000, PageSize::Size2M);
    t.map(0xffff_8880_0000_0000, 0, PageSize::Size1G);
    let space = AddressSpace::new(mem.clone(), t.dtb | 0x18, Paging::FourLevel); // CR3 flag bits ignored
    let t4k = mem.block_on(space.translate(USER + 0x5abc)).unwrap();
    assert_eq!((t4k.pa, t4k.page_size), (0x12_3abc, PageSize::Size4K));
    // A 4-level walk: no PML5E.
    assert_eq!(t4k.entries[0], None);
    assert!(t4k.entries[1..].iter().all(Option::is_some));
    assert_eq!(t4k.entries[4], Some(0x12_3000 | PRESENT_RW));
    let t2m = mem.block_on(space.translate(KERNEL + 0x2f_fff8)).unwrap();
    assert_eq!((t2m.pa, t2m.page_size), (0x4f_fff8, PageSize::Size2M));
    assert_eq!(t2m.entries[4], None);
    assert_eq!(t2m.entries[3], Some(0x40_0000 | PRESENT_RW | PS));
    let t1g = mem
        .block_on(space.translate(0xffff_8880_0123_4567))
        .unwrap();
    assert_eq!((t1g.pa, t1g.page_size), (0x123_4567, PageSize::Size1G));
    assert_eq!(t1g.entries[3..], [None, None]);
    // Reads through each page size return the physical bytes there.
    for (va, pa) in [
        (USER + 0x5ab8, 0x12_3ab8u64),
        (KERNEL + 0x2f_fff8, 0x4f_fff8),
        (0xffff_8880_0123_4560, 0x123_4560),
    ] {
        assert_eq!(mem.block_on(space.read_val::<u64>(va)), Ok(pa), "{va:#x}");
    }
}

#[test]
fn unmapped_and_non_canonical_addresses_are_failed_ranges_not_errors() {
    let (mem, backend, mut t) = setup();
    t.map(USER, 0x10_0000, PageSize::Size4K);
    t.map(USER + 0x2000, 0x20_0000, PageSize::Size4K);
    let space = AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel);
    let mut buf = vec![0xa5u8; 0x2800];
    let err = mem
        .block_on(space.read(USER + 0x800, &mut buf))
        .unwrap_err();
    assert_eq!(
        err.failed,
        vec![Failure {
            offset: 0x800,
            len: 0x1000,
            reason: PageError::NotMapped
        }]
    );
    assert_eq!(buf[..0x800], backend.bytes(0x10_0800, 0x800)[..]);
    assert_eq!(buf[0x1800..], backend.bytes(0x20_0000, 0x1000)[..]);
    assert!(buf[0x800..0x1800].iter().all(|&b| b == 0xa5));

    let e = mem
        .block_on(space.translate(0x0000_8000_0000_0000))
        .unwrap_err();
    assert_eq!((e.reason, e.level), (PageError::NonCanonical, None));
    let e = mem.block_on(space.translate(USER + 0x1000)).unwrap_err();
    assert_eq!((e.reason, e.level), (PageError::NotMapped, Some(4)));
    // A read running from the top of the lower half into the hole.
    let mut buf = [0u8; 16];
    let err = mem
        .block_on(space.read(0x0000_7fff_ffff_fff8, &mut buf))
        .unwrap_err();
    assert_eq!(
        err.failed
            .iter()
            .map(|f| (f.offset, f.len))
            .collect::<Vec<_>>(),
        vec![(0, 8), (8, 8)]
    );
    assert_eq!(err.failed[1].reason, PageError::NonCanonical);
}

#[test]
fn an_access_inside_one_page_fails_whole_or_touches_only_its_bytes() {
    let (mem, backend, mut t) = setup();
    t.map(USER, 0x10_0000, PageSize::Size4K);
    let space = AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel);
    let whole = |len, reason| {
        Err(PartialError {
            failed: vec![Failure {
                offset: 0,
                len,
                reason,
            }],
            len,
        })
    };
    // Unmapped, non-canonical: every byte failed, nothing written.
    let mut buf = [0xa5u8; 12];
    let unmapped = mem.block_on(space.read(USER + 0x1ff0, &mut buf));
    assert_eq!(unmapped, whole(12, PageError::NotMapped));
    assert_eq!(buf, [0xa5; 12]);
    let non_canonical = mem.block_on(space.read_val::<u32>(0x0000_8000_0000_0000));
    assert_eq!(non_canonical, whole(4, PageError::NonCanonical).map(|()| 0));
    let written = mem.block_on(space.write(USER + 0x1000, &[1, 2, 3]));
    assert_eq!(written, whole(3, PageError::NotMapped));
    // Mapped: the bytes of the page, and a write of exactly its bytes, up
    // to the page's last byte.
    let before = backend.bytes(0x10_0ff8, 16);
    mem.block_on(space.write(USER + 0xffb, &[9, 8, 7, 6, 5]))
        .unwrap();
    let mut expected = before.clone();
    expected[3..8].copy_from_slice(&[9, 8, 7, 6, 5]);
    assert_eq!(backend.bytes(0x10_0ff8, 16), expected);
    let mut buf = [0u8; 5];
    mem.block_on(space.read(USER + 0xffb, &mut buf)).unwrap();
    assert_eq!(buf, [9, 8, 7, 6, 5]);
}

/// 1000 random 8-byte-aligned addresses over `pages` mapped 4K pages.
fn mapped_pages(t: &mut Tables, pages: u64) -> Vec<u64> {
    let mut rng = fastrand::Rng::with_seed(5);
    for i in 0..pages {
        // Scattered over the PML4 and PDPT too, physically shuffled.
        let va = KERNEL - (i % 4) * (1 << 39) - (i % 7) * (1 << 30) + i * 0x1000;
        let pa = (rng.u64(0..(40 * MIB) / 0x1000)) * 0x1000;
        t.map(va, pa, PageSize::Size4K);
    }
    (0..1000)
        .map(|_| {
            let i = rng.u64(0..pages);
            KERNEL - (i % 4) * (1 << 39) - (i % 7) * (1 << 30) + i * 0x1000 + rng.u64(0..512) * 8
        })
        .collect()
}

#[test]
#[cfg_attr(miri, ignore)] // Miri: its 1 s cache lifetime runs out on Miri's slow clock
fn a_thousand_cold_reads_cost_five_calls_and_warm_ones_one() {
    let (mem, backend, mut t) = setup();
    let addrs = mapped_pages(&mut t, 600);
    let space = AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel);
    let expected: Vec<u64> = addrs
        .iter()
        .map(|&va| mem.block_on(space.translate(va)).unwrap().pa)
        .collect();
    space.invalidate();
    let calls = backend.read_calls();
    let got = mem.block_on(join_all(addrs.iter().map(|&va| space.read_val::<u64>(va))));
    assert_eq!(got, expected.iter().map(|&pa| Ok(pa)).collect::<Vec<_>>());
    assert_eq!(backend.read_calls() - calls, 5);
    // The first level is one entry: every walk shares the top table.
    let sizes = backend.read_call_sizes();
    assert_eq!(sizes[sizes.len() - 5], 1);

    let got = mem.block_on(join_all(addrs.iter().map(|&va| space.read_val::<u64>(va))));
    assert_eq!(got.len(), 1000);
    assert_eq!(backend.read_calls() - calls, 6, "warm reads are one call");

    // Without any cache every walk reads its own entries, still 5 calls.
    let uncached =
        AddressSpace::with_config(mem.clone(), t.dtb, Paging::FourLevel, VmConfig::UNCACHED);
    let got = mem.block_on(join_all(
        addrs.iter().map(|&va| uncached.read_val::<u64>(va)),
    ));
    assert_eq!(got, expected.iter().map(|&pa| Ok(pa)).collect::<Vec<_>>());
    assert_eq!(backend.read_calls() - calls, 11);
}

#[test]
fn without_caches_a_read_across_pages_walks_them_all_at_once() {
    let (mem, backend, mut t) = setup();
    t.map(USER, 0x30_0000, PageSize::Size4K);
    t.map(USER + 0x1000, 0x10_0000, PageSize::Size4K);
    let uncached =
        AddressSpace::with_config(mem.clone(), t.dtb, Paging::FourLevel, VmConfig::UNCACHED);
    let calls = backend.read_calls();
    let mut buf = [0u8; 16];
    assert_eq!(mem.block_on(uncached.read(USER + 0xff8, &mut buf)), Ok(()));
    // Four levels, then the data; not a second walk for the second page.
    assert_eq!(backend.read_calls() - calls, 5);
    assert_eq!(buf[..8], backend.bytes(0x30_0ff8, 8)[..]);
    assert_eq!(buf[8..], backend.bytes(0x10_0000, 8)[..]);
}

#[test]
fn an_abandoned_table_read_is_finished_by_the_next_walk_and_frees_its_space() {
    let (mem, backend, mut t) = setup();
    t.map(USER, 0x10_0000, PageSize::Size4K);
    let space = AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel);
    // A walk queues its top table's read and is dropped before any flush.
    assert!(space.translate(USER).now_or_never().is_none());
    assert_eq!(backend.read_calls(), 0);
    // The next walk takes the queued read over: four levels, four calls.
    let got = mem.block_on(space.translate(USER)).map(|t| t.pa);
    assert_eq!(got, Ok(0x10_0000));
    assert_eq!(backend.read_calls(), 4);

    // A read in flight holds its address space only weakly.
    let other = AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel);
    assert!(other.translate(USER).now_or_never().is_none());
    let inner = Arc::downgrade(&other.inner);
    drop(other);
    assert!(
        inner.upgrade().is_none(),
        "the address space was kept alive"
    );
}

/// A walk of `va` polled once per level, with a flush after each: its last
/// table read is done in the engine, not yet collected by the walk.
fn walk_through_its_reads<'s>(
    mem: &Memory,
    space: &'s AddressSpace,
    va: u64,
) -> Pin<Box<dyn Future<Output = Result<Translation, WalkError>> + 's>> {
    let mut walk = Box::pin(space.translate(va));
    for _ in 0..4 {
        assert!(walk.as_mut().poll(&mut noop_context()).is_pending());
        mem.flush().expect("a table read was queued");
    }
    walk
}

/// Finishes a walk of USER that read its tables while they mapped
/// 0x10_0000, before they were changed to map 0x20_0000: it returns what
/// it read, but no cache keeps it.
fn finish_walk_of_old_tables(
    mem: &Memory,
    space: &AddressSpace,
    mut walk: Pin<Box<dyn Future<Output = Result<Translation, WalkError>> + '_>>,
) {
    let old = walk.as_mut().poll(&mut noop_context());
    assert!(matches!(old, std::task::Poll::Ready(Ok(ref t)) if t.pa == 0x10_0000));
    assert_eq!(
        mem.block_on(space.translate(USER)).map(|t| t.pa),
        Ok(0x20_0000)
    );
}

fn noop_context() -> std::task::Context<'static> {
    std::task::Context::from_waker(futures::task::noop_waker_ref())
}

/// An address space whose caches trust nothing they hold.
fn never_trusting(mem: &Memory, dtb: u64) -> AddressSpace {
    let zero = CacheConfig::valid_for(Duration::ZERO, 1024);
    let config = VmConfig {
        translations: zero,
        page_tables: zero,
        ..VmConfig::default()
    };
    AddressSpace::with_config(mem.clone(), dtb, Paging::FourLevel, config)
}

/// Drops a walk whose last table read is done but not collected.
fn abandon_a_walk_after_its_reads(mem: &Memory, space: &AddressSpace, va: u64) {
    drop(walk_through_its_reads(mem, space, va));
}

#[test]
fn a_table_read_nobody_collected_is_not_served_later() {
    let (mem, _backend, mut t) = setup();
    t.map(USER, 0x10_0000, PageSize::Size4K);
    let space = AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel);
    abandon_a_walk_after_its_reads(&mem, &space, USER);
    // The target remaps the page; the caller asks for the tables as they
    // are now.
    t.map(USER, 0x20_0000, PageSize::Size4K);
    space.invalidate();
    assert_eq!(
        mem.block_on(space.translate(USER)).map(|t| t.pa),
        Ok(0x20_0000)
    );

    // Nor to a space whose caches trust nothing, with no invalidation.
    let live = never_trusting(&mem, t.dtb);
    abandon_a_walk_after_its_reads(&mem, &live, USER);
    t.map(USER, 0x30_0000, PageSize::Size4K);
    assert_eq!(mem.block_on(live.read_val::<u64>(USER + 8)), Ok(0x30_0008));
}

#[test]
fn a_walk_dropped_by_try_join_leaves_no_old_table_behind() {
    let (mem, _backend, mut t) = setup();
    t.map(USER, 0x10_0000, PageSize::Size4K);
    t.map(KERNEL, 0x40_0000, PageSize::Size2M);
    let space = AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel);
    // Unmapped at the PDPT, in the poll after the flush that read USER's
    // PDPT too: try_join drops the USER read before it sees that page.
    let unmapped = 0xffff_ff80_0000_0000u64;
    let r = mem.block_on(async {
        futures::try_join!(space.read_val::<u64>(unmapped), space.read_val::<u64>(USER))
    });
    assert!(r.is_err());
    t.map(USER + (1 << 30), 0x30_0000, PageSize::Size4K); // USER's PDPT changes
    space.invalidate();
    let got = mem.block_on(space.read_val::<u64>(USER + (1 << 30) + 8));
    assert_eq!(got, Ok(0x30_0008));
}

#[test]
fn a_walk_across_an_invalidation_does_not_cache_what_it_read_before() {
    let (mem, _backend, mut t) = setup();
    t.map(USER, 0x10_0000, PageSize::Size4K);
    let space = AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel);
    let walk = walk_through_its_reads(&mem, &space, USER);
    // Every table is read; the tables change and the caller invalidates
    // before the walk sees its last page.
    t.map(USER, 0x20_0000, PageSize::Size4K);
    space.invalidate();
    finish_walk_of_old_tables(&mem, &space, walk);
}

#[test]
fn physically_contiguous_pages_are_adjacent_entries_of_one_call() {
    let (mem, backend, mut t) = setup();
    for i in 0..4 {
        t.map(USER + i * 0x1000, 0x30_0000 + i * 0x1000, PageSize::Size4K);
    }
    t.map(USER + 0x4000, 0x10_0000, PageSize::Size4K);
    let space = AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel);
    mem.block_on(space.translate(USER)).unwrap(); // warm the tables
    let mut buf = vec![0u8; 0x5000];
    let before = backend.read_call_sizes().len();
    mem.block_on(space.read(USER, &mut buf)).unwrap();
    let sizes = &backend.read_call_sizes()[before..];
    // Walks of pages 1..4 come from the cached tables: one call, five
    // page entries, the four contiguous pages one run.
    assert_eq!(sizes, &[5]);
    assert_eq!(buf[..0x4000], backend.bytes(0x30_0000, 0x4000)[..]);
    assert_eq!(buf[0x4000..], backend.bytes(0x10_0000, 0x1000)[..]);
}

/// Scoped reads and writes give the device the caller's own buffer, each
/// physical run its part of it, across contiguous and scattered pages and
/// an unmapped one, as the entries' addresses show.
#[test]
fn scoped_virtual_reads_and_writes_use_the_callers_buffers_in_place() {
    use crate::engine::tests::EntryBuffers;
    let inner = Arc::new(MemBackend::with_address_pattern(64 * MIB as usize));
    let backend = Arc::new(EntryBuffers::new(inner.clone()));
    let mem = Memory::with_config(backend.clone(), EngineConfig::default());
    let mut t = Tables::new(inner.clone(), 48 * MIB);
    for i in 0..4 {
        t.map(USER + i * 0x1000, 0x30_0000 + i * 0x1000, PageSize::Size4K);
    }
    t.map(USER + 0x4000, 0x10_0000, PageSize::Size4K);
    // USER + 0x5000 is not mapped.
    t.map(USER + 0x6000, 0x12_0000, PageSize::Size4K);
    let space =
        AddressSpace::with_config(mem.clone(), t.dtb, Paging::FourLevel, VmConfig::UNCACHED);
    let mut buf = vec![UNTOUCHED; 0x6000];
    let result = mem.scope(|s| mem.block_on(space.read_scoped(s, USER + 0x800, &mut buf)));
    assert_eq!(
        result.unwrap_err().failed,
        vec![Failure {
            offset: 0x4800,
            len: 0x1000,
            reason: PageError::NotMapped
        }]
    );
    // The data came last, in one call (the walks came before it).
    let last_call = *inner.read_call_sizes().last().unwrap();
    let reads = backend.reads.lock().unwrap().clone();
    let mut got = reads[reads.len() - last_call..].to_vec();
    got.sort();
    let at = |offset: usize| buf.as_ptr() as usize + offset;
    let want = vec![
        (0x10_0000, at(0x3800)),
        (0x12_0000, at(0x5800)),
        (0x30_0800, at(0)),
        (0x30_1000, at(0x800)),
        (0x30_2000, at(0x1800)),
        (0x30_3000, at(0x2800)),
    ];
    assert_eq!(got, want);
    assert_eq!(buf[..0x3800], inner.bytes(0x30_0800, 0x3800)[..]);
    assert_eq!(buf[0x3800..0x4800], inner.bytes(0x10_0000, 0x1000)[..]);
    assert_eq!(buf[0x4800..0x5800], [UNTOUCHED; 0x1000]);
    assert_eq!(buf[0x5800..], inner.bytes(0x12_0000, 0x800)[..]);

    // A write across the end of page 3 into page 4: each half from its
    // place in `data`, and nothing around it touched.
    let data: Vec<u8> = (1..=0x20).collect();
    let before = inner.bytes(0x30_3fe0, 0x40);
    let after = inner.bytes(0x10_0000, 0x40);
    mem.scope(|s| mem.block_on(space.write_scoped(s, USER + 0x3ff0, &data)))
        .unwrap();
    let mut writes = backend.writes.lock().unwrap().clone();
    writes.sort();
    let from = |offset: usize| data.as_ptr() as usize + offset;
    assert_eq!(writes, vec![(0x10_0000, from(0x10)), (0x30_3ff0, from(0))]);
    assert_eq!(inner.bytes(0x30_3fe0, 0x10), before[..0x10]);
    assert_eq!(inner.bytes(0x30_3ff0, 0x10), data[..0x10]);
    assert_eq!(inner.bytes(0x10_0000, 0x10), data[0x10..]);
    assert_eq!(inner.bytes(0x10_0010, 0x30), after[0x10..]);
}

#[test]
fn caches_show_a_changed_page_table_after_invalidation_or_expiry() {
    let (mem, backend, mut t) = setup();
    t.map(USER, 0x10_0000, PageSize::Size4K);
    let space = AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel);
    assert_eq!(mem.block_on(space.read_val::<u64>(USER + 8)), Ok(0x10_0008));
    // The target remaps the page.
    t.map(USER, 0x20_0000, PageSize::Size4K);
    assert_eq!(
        mem.block_on(space.read_val::<u64>(USER + 8)),
        Ok(0x10_0008),
        "cached (1 s)"
    );
    space.invalidate_translations();
    assert_eq!(
        mem.block_on(space.read_val::<u64>(USER + 8)),
        Ok(0x10_0008),
        "the table page is still cached"
    );
    space.invalidate();
    assert_eq!(mem.block_on(space.read_val::<u64>(USER + 8)), Ok(0x20_0008));

    // Entries that are never valid: every access sees the tables as they are.
    let live = never_trusting(&mem, t.dtb);
    assert_eq!(mem.block_on(live.read_val::<u64>(USER + 8)), Ok(0x20_0008));
    t.map(USER, 0x30_0000, PageSize::Size4K);
    assert_eq!(mem.block_on(live.read_val::<u64>(USER + 8)), Ok(0x30_0008));
    drop(backend);
}

/// USER mapped to 0x10_0000, and its last-level table page mapped into
/// the space too, as kernels map their tables: the engine, the backend,
/// the tables, the space, and USER's entry's physical and virtual address.
fn space_mapping_its_own_table() -> (Memory, Arc<MemBackend>, Tables, AddressSpace, u64, u64) {
    let (mem, backend, mut t) = setup();
    t.map(USER, 0x10_0000, PageSize::Size4K);
    let mut table = t.dtb;
    for level in 0..3 {
        table = t.entry(table + index4(USER, level) * 8) & ADDR_MASK;
    }
    let pte = table + index4(USER, 3) * 8;
    let tables_va = KERNEL + 0x40_0000;
    t.map(tables_va, table, PageSize::Size4K);
    let space = AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel);
    (mem, backend, t, space, pte, tables_va + (pte & 0xfff))
}

#[test]
fn a_write_through_the_space_to_a_page_table_it_read_is_seen_at_once() {
    let (mem, backend, t, space, pte, pte_va) = space_mapping_its_own_table();
    assert_eq!(mem.block_on(space.read_val::<u64>(USER + 8)), Ok(0x10_0008));
    let remap = (0x20_0000 | PRESENT_RW).to_le_bytes();
    mem.block_on(space.write(pte_va, &remap)).unwrap();
    assert_eq!(t.entry(pte), 0x20_0000 | PRESENT_RW);
    assert_eq!(mem.block_on(space.read_val::<u64>(USER + 8)), Ok(0x20_0008));
    // The same from a scope.
    let remap = (0x30_0000 | PRESENT_RW).to_le_bytes();
    mem.scope(|s| mem.block_on(space.write_scoped(s, pte_va, &remap)))
        .unwrap();
    assert_eq!(mem.block_on(space.read_val::<u64>(USER + 8)), Ok(0x30_0008));

    // A write to a data page keeps both caches: the next read is one call.
    mem.block_on(space.write(USER, &[0xee; 16])).unwrap();
    assert_eq!(backend.bytes(0x30_0000, 16), [0xee; 16]);
    let calls = backend.read_calls();
    assert_eq!(
        mem.block_on(space.read_val::<u64>(USER + 8)),
        Ok(u64::from_le_bytes([0xee; 8]))
    );
    assert_eq!(backend.read_calls() - calls, 1, "cached translation");
}

#[test]
fn a_write_to_a_table_while_a_walk_reads_it_leaves_nothing_old_cached() {
    let (mem, _backend, _t, space, _pte, pte_va) = space_mapping_its_own_table();
    let walk = walk_through_its_reads(&mem, &space, USER);
    let remap = (0x20_0000 | PRESENT_RW).to_le_bytes();
    mem.block_on(space.write(pte_va, &remap)).unwrap();
    finish_walk_of_old_tables(&mem, &space, walk);
}

#[test]
fn an_invalidation_racing_walks_on_other_threads_leaves_nothing_old_cached() {
    let (mem, _backend, _t, space, _pte, pte_va) = space_mapping_its_own_table();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        // Walks on other threads: after each invalidation they miss the
        // translations and walk the tables, cached or not.
        for _ in 0..3 {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = mem.block_on(space.translate(USER));
                }
            });
        }
        let mut stale = None;
        // (Miri runs threads one step at a time; its schedules still vary.)
        let writes = if cfg!(miri) { 20 } else { 20_000u64 };
        for i in 0..writes {
            let pa = 0x10_0000 + (i % 2) * 0x10_0000;
            let remap = (pa | PRESENT_RW).to_le_bytes();
            mem.block_on(space.write(pte_va, &remap)).unwrap();
            // The write has landed and emptied the caches: any walk that
            // began after it read the new entry.
            let got = mem.block_on(space.translate(USER)).map(|t| t.pa);
            if got != Ok(pa) {
                stale = Some((i, got, pa));
                break;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(stale, None, "(iteration, translation, entry written)");
    });
}

#[test]
fn a_table_write_dropped_by_try_join_after_it_landed_leaves_nothing_old_cached() {
    let (mem, _backend, mut t, space, pte, pte_va) = space_mapping_its_own_table();
    // Another 512 GiB whose tables the space has not read yet.
    let elsewhere = KERNEL - (1 << 39);
    t.map(elsewhere, 0x40_0000, PageSize::Size4K);
    assert_eq!(mem.block_on(space.read_val::<u64>(USER + 8)), Ok(0x10_0008));
    mem.block_on(space.translate(pte_va)).unwrap();
    // Unmapped at the PDPT, whose read goes in the same flush as the
    // write: try_join sees that failure first and drops the write, done.
    let unmapped = elsewhere + (1 << 30);
    let remap = (0x20_0000 | PRESENT_RW).to_le_bytes();
    let r = mem.block_on(async {
        futures::try_join!(space.read_val::<u64>(unmapped), space.write(pte_va, &remap))
    });
    assert!(r.is_err());
    assert_eq!(t.entry(pte), 0x20_0000 | PRESENT_RW, "the write landed");
    assert_eq!(mem.block_on(space.read_val::<u64>(USER + 8)), Ok(0x20_0008));
}

#[test]
fn virtual_writes_change_exactly_the_requested_bytes() {
    let (mem, backend, mut t) = setup();
    t.map(USER, 0x50_0000, PageSize::Size4K);
    t.map(USER + 0x1000, 0x10_0000, PageSize::Size4K);
    let space = AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel);
    let before_a = backend.bytes(0x50_0000, 0x1000);
    let before_b = backend.bytes(0x10_0000, 0x1000);
    let data: Vec<u8> = (1..=10).collect();
    mem.block_on(space.write(USER + 0xffb, &data)).unwrap();
    let mut a = before_a.clone();
    a[0xffb..].copy_from_slice(&data[..5]);
    let mut b = before_b.clone();
    b[..5].copy_from_slice(&data[5..]);
    assert_eq!(backend.bytes(0x50_0000, 0x1000), a);
    assert_eq!(backend.bytes(0x10_0000, 0x1000), b);
    let err = mem
        .block_on(space.write(USER + 0x1ffc, &[9; 8]))
        .unwrap_err();
    assert_eq!(
        err.failed,
        vec![Failure {
            offset: 4,
            len: 4,
            reason: PageError::NotMapped
        }]
    );
    assert_eq!(backend.bytes(0x10_0ffc, 4), vec![9; 4]);
}

/// The model test's physical memory, small enough to compare whole after
/// every round: what mappings point to lies below `DATA_END` (writes go
/// nowhere else), page tables follow, and the device ends at `MEMORY_END`.
const DATA_END: u64 = 12 * MIB;
const MEMORY_END: u64 = 16 * MIB;
const GIB: u64 = 1 << 30;
/// What a read buffer holds before the read: failed bytes must keep it.
const UNTOUCHED: u8 = 0x5a;

/// Virtual memory as the model test's tables map it, byte by byte, with
/// its own idea of canonical addresses and of the device.
#[derive(Default)]
struct VirtualModel {
    /// First virtual address of each page mapped: its size and physical
    /// address.
    pages: std::collections::BTreeMap<u64, (u64, u64)>,
    /// Physical 4 KiB pages that fail, and why.
    holes: Vec<(u64, PageError)>,
    /// Physical memory.
    bytes: Vec<u8>,
}

impl VirtualModel {
    fn map(&mut self, t: &mut Tables, va: u64, pa: u64, size: PageSize) {
        t.map(va, pa, size);
        self.pages.insert(va, (size.bytes(), pa));
    }

    /// The physical address of the 4 KiB virtual page at `vpage`, or why
    /// its bytes fail.
    fn page(&self, vpage: u64) -> Result<u64, PageError> {
        if (0x0000_8000_0000_0000..0xffff_8000_0000_0000).contains(&vpage) {
            return Err(PageError::NonCanonical);
        }
        let (va, &(_, pa)) = self
            .pages
            .range(..=vpage)
            .next_back()
            .filter(|&(va, &(size, _))| vpage - va < size)
            .ok_or(PageError::NotMapped)?;
        let pa = pa + (vpage - va);
        if pa >= MEMORY_END {
            return Err(PageError::OutOfRange);
        }
        match self.holes.iter().find(|&&(hole, _)| hole == pa) {
            Some(&(_, reason)) => Err(reason),
            None => Ok(pa),
        }
    }

    /// The physical address of each byte of `len` at `va`, or why it fails.
    fn fates(&self, va: u64, len: usize) -> Vec<Result<u64, PageError>> {
        let mut page = (1, Err(PageError::Unspecified)); // no page starts at 1
        (0..len as u64)
            .map(|i| {
                let at = va.checked_add(i).ok_or(PageError::AddressOverflow)?;
                if page.0 != at & !0xfff {
                    page = (at & !0xfff, self.page(at & !0xfff));
                }
                page.1.map(|pa| pa + (at & 0xfff))
            })
            .collect()
    }

    /// What a request with these fates gives back: each failed run, a new
    /// one where the reason changes.
    fn result(fates: &[Result<u64, PageError>]) -> Result<(), PartialError> {
        let mut failed = Vec::new();
        let mut offset = 0;
        for run in fates.chunk_by(|a, b| a.err() == b.err()) {
            if let Err(reason) = run[0] {
                failed.push(Failure {
                    offset,
                    len: run.len(),
                    reason,
                });
            }
            offset += run.len();
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(PartialError {
                failed,
                len: fates.len(),
            })
        }
    }

    /// What a read with these fates leaves in its buffer.
    fn read(&self, fates: &[Result<u64, PageError>]) -> Vec<u8> {
        fates
            .iter()
            .map(|fate| fate.map_or(UNTOUCHED, |pa| self.bytes[pa as usize]))
            .collect()
    }

    fn write(&mut self, fates: &[Result<u64, PageError>], data: &[u8]) {
        for (fate, &b) in fates.iter().zip(data) {
            if let Ok(pa) = fate {
                self.bytes[*pa as usize] = b;
            }
        }
    }
}

/// A random 4 KiB physical page below `DATA_END`, with `spare` pages
/// after it also below.
fn data_page(rng: &mut fastrand::Rng, spare: u64) -> u64 {
    rng.u64(0..DATA_END / 0x1000 - spare) * 0x1000
}

/// Maps 1 GiB regions of both halves (always the last below the
/// non-canonical gap and the first above it, sometimes the neighbours of
/// those and the top of the address space): each a 1 GiB page at 0, or
/// up to three 2 MiB slots, each a 2 MiB page or runs of 4 KiB pages.
fn map_random_regions(rng: &mut fastrand::Rng, t: &mut Tables, model: &mut VirtualModel) {
    let mut regions = vec![LOWER_HALF_END - GIB, UPPER_HALF];
    for _ in 0..rng.usize(2..=5) {
        regions.push(match rng.u8(0..6) {
            0 => LOWER_HALF_END - 2 * GIB,
            1 => UPPER_HALF + GIB,
            2 => 0u64.wrapping_sub(GIB),
            3 => rng.u64(0..1 << 17) * GIB,
            _ => UPPER_HALF + rng.u64(0..1 << 17) * GIB,
        });
    }
    regions.sort_unstable();
    regions.dedup();
    for region in regions {
        if rng.u8(0..4) == 0 {
            model.map(t, region, 0, PageSize::Size1G);
            continue;
        }
        let mut slots = Vec::new();
        for _ in 0..rng.usize(1..=3) {
            let slot = [0, 511, rng.u64(0..512), rng.u64(0..512)][rng.usize(0..4)];
            slots.push(slot);
            if slot < 511 && rng.u8(0..3) == 0 {
                slots.push(slot + 1);
            }
        }
        slots.sort_unstable();
        slots.dedup();
        for slot in slots {
            let window = region + slot * (2 * MIB);
            if rng.bool() {
                let pa = rng.u64(0..DATA_END / (2 * MIB)) * (2 * MIB);
                model.map(t, window, pa, PageSize::Size2M);
                continue;
            }
            // Runs of pages, some gapped, mostly physically contiguous.
            for _ in 0..rng.usize(1..=4) {
                let n = rng.u64(1..=6);
                let first = [0, 512 - n, rng.u64(0..=512 - n)][rng.usize(0..3)];
                let mut pa = data_page(rng, n);
                for page in first..first + n {
                    let va = window + page * 0x1000;
                    if rng.u8(0..6) != 0 && !model.pages.contains_key(&va) {
                        model.map(t, va, pa, PageSize::Size4K);
                    }
                    pa = match rng.u8(0..4) {
                        0 => data_page(rng, n),
                        _ => pa + 0x1000,
                    };
                }
            }
        }
    }
}

/// Up to three holes, each a 4 KiB page below `DATA_END` that a mapping
/// points to (never a page table: those are above).
fn add_random_holes(rng: &mut fastrand::Rng, backend: &MemBackend, model: &mut VirtualModel) {
    let pages: Vec<(u64, u64)> = model.pages.values().copied().collect();
    for _ in 0..rng.usize(0..=3) {
        let (size, pa) = pages[rng.usize(0..pages.len())];
        let page = pa + rng.u64(0..size.min(DATA_END - pa) / 0x1000) * 0x1000;
        let reason = [PageError::UnsupportedRequest, PageError::CompleterAbort][rng.usize(0..2)];
        backend.add_hole(page..page + 0x1000, reason);
        model.holes.push((page, reason));
    }
}

/// An address near an edge of a mapped page, of what a 1 GiB page has of
/// memory, of a hole as mapped, or of the canonical halves and the
/// address space; inside a mapped page; or anywhere in a region.
fn virtual_address(rng: &mut fastrand::Rng, model: &VirtualModel) -> u64 {
    let i = rng.usize(0..model.pages.len());
    let (&va, &(size, pa)) = model.pages.iter().nth(i).expect("a page");
    // Up to 16 bytes either side of an edge `offset` bytes into the page
    // (whose end may be the end of the address space).
    let jitter = rng.u64(0..32).wrapping_sub(16);
    let near = |offset: u64| va.wrapping_add(offset).wrapping_add(jitter);
    match rng.u8(0..10) {
        0..=2 => near([0, size][rng.usize(0..2)]),
        3 if size == GIB => near(MEMORY_END),
        3 | 4 => match model.holes.get(rng.usize(0..3)) {
            Some(&(hole, _)) if (pa..pa + size).contains(&hole) => {
                near(hole - pa + [0, 0x1000][rng.usize(0..2)])
            }
            _ => va + rng.u64(0..size),
        },
        5 => [LOWER_HALF_END, UPPER_HALF, 0][rng.usize(0..3)].wrapping_add(jitter),
        6 | 7 => va + rng.u64(0..size),
        _ => (va & !(GIB - 1)) + rng.u64(0..GIB),
    }
}

/// Mostly 1 to 16 bytes, some up to three pages.
fn request_length(rng: &mut fastrand::Rng) -> usize {
    match rng.u8(0..8) {
        0..=4 => rng.usize(1..=16),
        5 | 6 => rng.usize(1..=0x1000),
        _ => rng.usize(1..=0x3000),
    }
}

/// Asserts that a read gave back what the model says, naming the first
/// wrong byte rather than printing whole buffers.
fn check_read(
    got: &(Vec<u8>, Result<(), PartialError>),
    want: &(Vec<u8>, Result<(), PartialError>),
    fates: &[Result<u64, PageError>],
    context: impl Fn() -> String,
) {
    assert_eq!(got.1, want.1, "{}: result", context());
    assert_eq!(got.0.len(), want.0.len(), "{}: length", context());
    if got.0 != want.0 {
        let at = got.0.iter().zip(&want.0).position(|(g, w)| g != w);
        let at = at.expect("a byte differs");
        let model = match fates[at] {
            Ok(pa) => format!("physical {pa:#x}"),
            Err(reason) => format!("failed, {reason:?}"),
        };
        panic!(
            "{}: byte {at:#x} is {:#x}, not {:#x} (the model: {model})",
            context(),
            got.0[at],
            want.0[at],
        );
    }
}

/// The first physical address where the device differs from `model`,
/// compared a piece at a time (a copy of all of it at once costs more
/// than the rest of a round).
fn first_difference(backend: &MemBackend, model: &[u8]) -> Option<u64> {
    const PIECE: usize = 64 << 10;
    model.chunks(PIECE).enumerate().find_map(|(i, want)| {
        let got = backend.bytes((i * PIECE) as u64, want.len());
        if got == want {
            return None;
        }
        let at = got.iter().zip(want).position(|(g, w)| g != w)?;
        Some((i * PIECE + at) as u64)
    })
}

/// The ways the model test reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadForm {
    /// `read_val::<u64>`.
    Value,
    /// `read` into a borrowed buffer.
    Borrowed,
    /// `read_scoped` into a buffer lent for a scope.
    Scoped,
}

/// Random 4 KiB, 2 MiB and 1 GiB pages in both canonical halves, holes
/// in some of the memory they map, and rounds of batched reads and single
/// writes near every edge (of pages, holes, memory, the canonical halves,
/// the address space), with and without caches, each in a borrowed buffer
/// or one lent for a scope: every byte, failed range and write as
/// `VirtualModel` says.
#[test]
#[cfg_attr(miri, ignore)] // Miri: hours (vm has no unsafe code)
fn random_virtual_reads_and_writes_match_a_model_of_the_tables() {
    let pattern = MemBackend::with_address_pattern(MEMORY_END as usize);
    let pattern = pattern.bytes(0, MEMORY_END as usize);
    for seed in 0..150 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let backend = Arc::new(MemBackend::new(pattern.clone()));
        let mem = Memory::with_config(backend.clone(), EngineConfig::default());
        let mut t = Tables::new(backend.clone(), DATA_END);
        let mut model = VirtualModel::default();
        map_random_regions(&mut rng, &mut t, &mut model);
        add_random_holes(&mut rng, &backend, &mut model);
        model.bytes = backend.bytes(0, MEMORY_END as usize);
        let cached = rng.bool();
        let space = if cached {
            AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel)
        } else {
            AddressSpace::with_config(mem.clone(), t.dtb, Paging::FourLevel, VmConfig::UNCACHED)
        };
        let caches = if cached { "cached" } else { "uncached" };
        for round in 0..6 {
            if rng.u8(0..3) == 0 {
                space.invalidate();
            }
            // A batch of reads: of values, into borrowed buffers, and into
            // buffers lent for a scope.
            let reads: Vec<(u64, usize, ReadForm)> = (0..rng.usize(1..=30))
                .map(|_| {
                    let va = virtual_address(&mut rng, &model);
                    match rng.u8(0..6) {
                        0 | 1 => (va, 8, ReadForm::Value),
                        2 => (va, request_length(&mut rng), ReadForm::Scoped),
                        _ => (va, request_length(&mut rng), ReadForm::Borrowed),
                    }
                })
                .collect();
            let mut bufs: Vec<Vec<u8>> = reads
                .iter()
                .map(|&(_, len, _)| vec![UNTOUCHED; len])
                .collect();
            let results = mem.scope(|s| {
                let reads = reads.iter().zip(bufs.iter_mut());
                mem.block_on(crate::join_all(reads.map(|(&(va, _, form), buf)| {
                    let space = &space;
                    async move {
                        match form {
                            ReadForm::Value => space
                                .read_val::<u64>(va)
                                .await
                                .map(|v| buf.copy_from_slice(&v.to_le_bytes())),
                            ReadForm::Borrowed => space.read(va, buf).await,
                            ReadForm::Scoped => space.read_scoped(s, va, buf).await,
                        }
                    }
                })))
            });
            let got: Vec<_> = bufs.into_iter().zip(results).collect();
            for (i, (&(va, len, form), got)) in reads.iter().zip(&got).enumerate() {
                let fates = model.fates(va, len);
                let result = VirtualModel::result(&fates);
                let bytes = if form == ReadForm::Value && result.is_err() {
                    vec![UNTOUCHED; 8] // a value is read whole or not at all
                } else {
                    model.read(&fates)
                };
                check_read(got, &(bytes, result), &fates, || {
                    format!(
                        "seed {seed} ({caches}), round {round}, op {i}: {form:?} read {len:#x} at {va:#x}"
                    )
                });
            }
            // Writes one at a time, where every byte written lands below
            // `DATA_END`.
            for i in 0..rng.usize(1..=4) {
                let (va, fates) = loop {
                    let va = virtual_address(&mut rng, &model);
                    let fates = model.fates(va, request_length(&mut rng));
                    if fates
                        .iter()
                        .all(|fate| fate.map_or(true, |pa| pa < DATA_END))
                    {
                        break (va, fates);
                    }
                };
                let data: Vec<u8> = std::iter::repeat_with(|| rng.u8(..))
                    .take(fates.len())
                    .collect();
                let scoped = rng.bool();
                let got = if scoped {
                    mem.scope(|s| mem.block_on(space.write_scoped(s, va, &data)))
                } else {
                    mem.block_on(space.write(va, &data))
                };
                let len = data.len();
                assert_eq!(
                    got,
                    VirtualModel::result(&fates),
                    "seed {seed} ({caches}), round {round}, write {i} (scoped: {scoped}): {len:#x} at {va:#x}"
                );
                model.write(&fates, &data);
            }
            if let Some(at) = first_difference(&backend, &model.bytes) {
                panic!(
                    "seed {seed} ({caches}), round {round}: physical byte {at:#x} is {:#x}, not {:#x}",
                    backend.bytes(at, 1)[0],
                    model.bytes[at as usize]
                );
            }
        }
    }
}

/// A batch of virtual writes, as `leechio_space_write` makes one: two
/// writes of the same bytes must land in the order given, even when the
/// later one's page is translated from the cache and the earlier one
/// needs a table read first.
#[test]
fn a_batch_of_virtual_writes_lands_in_the_order_given() {
    let (mem, backend, mut t) = setup();
    // A (the last page of a 2 MiB region) and B (the first of the next)
    // have page tables of their own.
    let (a, b) = (USER + 0x1f_f000, USER + 0x20_0000);
    t.map(a, 0x10_0000, PageSize::Size4K);
    t.map(b, 0x20_0000, PageSize::Size4K);
    let space = AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel);
    // B's translation is cached; A's table is not.
    mem.block_on(space.read_val::<u64>(b)).unwrap();
    let (first, second) = ([0xaau8; 16], [0xbbu8; 8]);
    let ops: [(u64, &[u8]); 2] = [(b - 8, &first), (b, &second)];
    let results = mem.scope(|s| mem.block_on(space.write_all_scoped(s, &ops)));
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(backend.bytes(0x10_0ff8, 8), [0xaa; 8]);
    assert_eq!(
        backend.bytes(0x20_0000, 8),
        [0xbb; 8],
        "the first write landed last"
    );
}

/// A read across two pages of one 2 MiB region walks the first page's
/// tables, then finds the second's page table from it: the levels above
/// are not read again however old they are by then (here, trusted for no
/// time at all: a loaded machine's walk can outlast a cache's second).
#[test]
fn the_second_page_of_a_read_is_found_from_the_first_ones_table_whatever_its_age() {
    let (mem, backend, mut t) = setup();
    let va = 0x7f00_0020_0000 + 0x3000;
    t.map(va, 0x10_0000, PageSize::Size4K);
    t.map(va + 0x1000, 0x20_0000, PageSize::Size4K);
    let space = never_trusting(&mem, t.dtb);
    let calls = backend.read_calls();
    let mut buf = [0u8; 16];
    mem.block_on(space.read(va + 0xff8, &mut buf)).unwrap();
    // Four levels, then both pages' bytes.
    assert_eq!(backend.read_calls() - calls, 5);
    let mut want = [0u8; 16];
    mem.block_on(mem.read(0x10_0ff8, &mut want[..8])).unwrap();
    mem.block_on(mem.read(0x20_0000, &mut want[8..])).unwrap();
    assert_eq!(buf, want);
}
