//! Address translation on the in-memory backend, with page tables built
//! here; the independent oracles (memflow's, QEMU's) are in `tests/`.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;

use super::*;
use crate::{EngineConfig, Failure, MemBackend};

const MIB: u64 = 1 << 20;
const PRESENT_RW: u64 = 0x3;
const PS: u64 = 1 << 7;

/// Page tables written into a [`MemBackend`], tables taken from a bump
/// allocator at `tables_at`.
struct Tables {
    backend: Arc<MemBackend>,
    dtb: u64,
    next_table: u64,
}

impl Tables {
    fn new(backend: Arc<MemBackend>, tables_at: u64) -> Self {
        Tables {
            backend,
            dtb: tables_at,
            next_table: tables_at + 0x1000,
        }
    }

    fn entry(&self, addr: u64) -> u64 {
        u64::from_le_bytes(self.backend.bytes(addr, 8).try_into().unwrap())
    }

    /// Maps `va` to `pa` with a page of `size`, creating tables as needed.
    fn map(&mut self, va: u64, pa: u64, size: PageSize) {
        let leaf_level = match size {
            PageSize::Size1G => 1,
            PageSize::Size2M => 2,
            PageSize::Size4K => 3,
        };
        let mut table = self.dtb;
        for level in 0..leaf_level {
            let at = table + table_index(va, level) * 8;
            let mut entry = self.entry(at);
            if entry & 1 == 0 {
                entry = self.next_table | PRESENT_RW;
                self.next_table += 0x1000;
                self.backend.poke(at, &entry.to_le_bytes());
            }
            table = entry & ADDR_MASK;
        }
        let flags = if leaf_level == 3 {
            PRESENT_RW
        } else {
            PRESENT_RW | PS
        };
        self.backend.poke(
            table + table_index(va, leaf_level) * 8,
            &(pa | flags).to_le_bytes(),
        );
    }
}

/// 64 MiB of address-pattern memory with tables at 48 MiB; the engine, the
/// backend's counters, and the tables.
fn setup() -> (Memory, Arc<MemBackend>, Tables) {
    let backend = Arc::new(MemBackend::with_address_pattern(64 * MIB as usize));
    let mem = Memory::with_config(backend.clone(), EngineConfig::default());
    let tables = Tables::new(backend.clone(), 48 * MIB);
    (mem, backend, tables)
}

const KERNEL: u64 = 0xffff_ffff_8000_0000;
const USER: u64 = 0x0000_7f00_0000_0000;

#[test]
fn translates_4k_2m_and_1g_pages_with_the_entries_of_each_level() {
    let (mem, _, mut t) = setup();
    t.map(USER + 0x5000, 0x12_3000, PageSize::Size4K);
    t.map(KERNEL + 0x20_0000, 0x40_0000, PageSize::Size2M);
    t.map(0xffff_8880_0000_0000, 0, PageSize::Size1G);
    let space = AddressSpace::new(mem.clone(), t.dtb | 0x18); // CR3 flag bits ignored
    let t4k = mem.block_on(space.translate(USER + 0x5abc)).unwrap();
    assert_eq!((t4k.pa, t4k.page_size), (0x12_3abc, PageSize::Size4K));
    assert!(t4k.entries.iter().all(Option::is_some));
    assert_eq!(t4k.entries[3], Some(0x12_3000 | PRESENT_RW));
    let t2m = mem.block_on(space.translate(KERNEL + 0x2f_fff8)).unwrap();
    assert_eq!((t2m.pa, t2m.page_size), (0x4f_fff8, PageSize::Size2M));
    assert_eq!(t2m.entries[3], None);
    assert_eq!(t2m.entries[2], Some(0x40_0000 | PRESENT_RW | PS));
    let t1g = mem
        .block_on(space.translate(0xffff_8880_0123_4567))
        .unwrap();
    assert_eq!((t1g.pa, t1g.page_size), (0x123_4567, PageSize::Size1G));
    assert_eq!(t1g.entries[2..], [None, None]);
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
    let space = AddressSpace::new(mem.clone(), t.dtb);
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
    assert_eq!((e.reason, e.level), (PageError::NotMapped, Some(3)));
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
    let space = AddressSpace::new(mem.clone(), t.dtb);
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
fn a_thousand_cold_reads_cost_five_calls_and_warm_ones_one() {
    let (mem, backend, mut t) = setup();
    let addrs = mapped_pages(&mut t, 600);
    let space = AddressSpace::new(mem.clone(), t.dtb);
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
    let uncached = AddressSpace::with_config(mem.clone(), t.dtb, VmConfig::UNCACHED);
    let got = mem.block_on(join_all(
        addrs.iter().map(|&va| uncached.read_val::<u64>(va)),
    ));
    assert_eq!(got, expected.iter().map(|&pa| Ok(pa)).collect::<Vec<_>>());
    assert_eq!(backend.read_calls() - calls, 11);
}

#[test]
fn an_abandoned_table_read_is_finished_by_the_next_walk_and_frees_its_space() {
    let (mem, backend, mut t) = setup();
    t.map(USER, 0x10_0000, PageSize::Size4K);
    let space = AddressSpace::new(mem.clone(), t.dtb);
    // A walk queues its top table's read and is dropped before any flush.
    assert!(space.translate(USER).now_or_never().is_none());
    assert_eq!(backend.read_calls(), 0);
    // The next walk takes the queued read over: four levels, four calls.
    let got = mem.block_on(space.translate(USER)).map(|t| t.pa);
    assert_eq!(got, Ok(0x10_0000));
    assert_eq!(backend.read_calls(), 4);

    // A read in flight holds its address space only weakly.
    let other = AddressSpace::new(mem.clone(), t.dtb);
    assert!(other.translate(USER).now_or_never().is_none());
    let inner = Arc::downgrade(&other.inner);
    drop(other);
    assert!(
        inner.upgrade().is_none(),
        "the address space was kept alive"
    );
}

#[test]
fn physically_contiguous_pages_are_adjacent_entries_of_one_call() {
    let (mem, backend, mut t) = setup();
    for i in 0..4 {
        t.map(USER + i * 0x1000, 0x30_0000 + i * 0x1000, PageSize::Size4K);
    }
    t.map(USER + 0x4000, 0x10_0000, PageSize::Size4K);
    let space = AddressSpace::new(mem.clone(), t.dtb);
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

#[test]
fn caches_show_a_changed_page_table_after_invalidation_or_expiry() {
    let (mem, backend, mut t) = setup();
    t.map(USER, 0x10_0000, PageSize::Size4K);
    let space = AddressSpace::new(mem.clone(), t.dtb);
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
    let zero = CacheConfig::valid_for(Duration::ZERO, 1024);
    let live = AddressSpace::with_config(
        mem.clone(),
        t.dtb,
        VmConfig {
            translations: zero,
            page_tables: zero,
        },
    );
    assert_eq!(mem.block_on(live.read_val::<u64>(USER + 8)), Ok(0x20_0008));
    t.map(USER, 0x30_0000, PageSize::Size4K);
    assert_eq!(mem.block_on(live.read_val::<u64>(USER + 8)), Ok(0x30_0008));
    drop(backend);
}

#[test]
fn mappings_lists_every_mapped_range_merged_and_clipped() {
    let (mem, backend, mut t) = setup();
    for i in 0..3 {
        t.map(USER + i * 0x1000, 0x40_0000 + i * 0x1000, PageSize::Size4K);
    }
    t.map(USER + 0x5000, 0x10_0000, PageSize::Size4K);
    t.map(USER + 0x20_0000, 0x60_0000, PageSize::Size2M);
    t.map(0xffff_8880_0000_0000, 0x4000_0000, PageSize::Size1G);
    t.map(KERNEL, 0x80_0000, PageSize::Size2M);
    t.map(KERNEL + 0x20_0000, 0xa0_0000, PageSize::Size2M);
    let space = AddressSpace::new(mem.clone(), t.dtb);
    let calls = backend.read_calls();
    let all = mem.block_on(space.mappings(0..u64::MAX));
    assert!(backend.read_calls() - calls <= 4, "one batch per level");
    let m = |va, pa, size, page_size| Mapping {
        va,
        pa,
        size,
        page_size,
    };
    assert_eq!(
        all.mappings,
        vec![
            m(USER, 0x40_0000, 0x3000, PageSize::Size4K),
            m(USER + 0x5000, 0x10_0000, 0x1000, PageSize::Size4K),
            m(USER + 0x20_0000, 0x60_0000, 0x20_0000, PageSize::Size2M),
            m(
                0xffff_8880_0000_0000,
                0x4000_0000,
                1 << 30,
                PageSize::Size1G
            ),
            m(KERNEL, 0x80_0000, 0x40_0000, PageSize::Size2M),
        ]
    );
    assert!(all.unreadable.is_empty());
    let clipped = mem.block_on(space.mappings(USER + 0x1800..USER + 0x20_1000));
    assert_eq!(
        clipped.mappings,
        vec![
            m(USER + 0x1800, 0x40_1800, 0x1800, PageSize::Size4K),
            m(USER + 0x5000, 0x10_0000, 0x1000, PageSize::Size4K),
            m(USER + 0x20_0000, 0x60_0000, 0x1000, PageSize::Size2M),
        ]
    );
}

#[test]
fn mappings_name_the_ranges_of_unreadable_tables_exactly() {
    let (mem, _backend, t) = setup();
    // A top table outside memory: both canonical halves, clipped.
    let lost = AddressSpace::new(mem.clone(), 100 * MIB);
    let all = mem.block_on(lost.mappings(0..u64::MAX));
    assert!(all.mappings.is_empty());
    assert_eq!(
        all.unreadable,
        vec![
            (0..0x0000_8000_0000_0000, PageError::OutOfRange),
            (0xffff_8000_0000_0000..u64::MAX, PageError::OutOfRange),
        ]
    );
    let part = mem.block_on(lost.mappings(KERNEL..KERNEL + 0x1000));
    assert_eq!(
        part.unreadable,
        vec![(KERNEL..KERNEL + 0x1000, PageError::OutOfRange)]
    );
    // A top-table entry pointing outside memory: its 512 GiB, clipped.
    t.backend.poke(
        t.dtb + table_index(USER, 0) * 8,
        &((100 * MIB) | PRESENT_RW).to_le_bytes(),
    );
    let space = AddressSpace::new(mem.clone(), t.dtb);
    let all = mem.block_on(space.mappings(0..u64::MAX));
    assert_eq!(
        all.unreadable,
        vec![(0x7f00_0000_0000..0x7f80_0000_0000, PageError::OutOfRange)]
    );
    let part = mem.block_on(space.mappings(USER + 0x1000..USER + 0x3000));
    assert_eq!(
        part.unreadable,
        vec![(USER + 0x1000..USER + 0x3000, PageError::OutOfRange)]
    );
}

#[test]
fn virtual_writes_change_exactly_the_requested_bytes() {
    let (mem, backend, mut t) = setup();
    t.map(USER, 0x50_0000, PageSize::Size4K);
    t.map(USER + 0x1000, 0x10_0000, PageSize::Size4K);
    let space = AddressSpace::new(mem.clone(), t.dtb);
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
