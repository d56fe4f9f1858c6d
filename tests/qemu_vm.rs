//! Virtual memory end to end on a live Linux guest: `AddressSpace` through
//! LeechCore's `qemu://` device, against QEMU's monitor (`gva2gpa`, `x`,
//! `xp`), which walks the guest's page tables itself.
//!
//! The monitor translates through the CPU's CR3, which after boot belongs
//! to a process (or is the kernel's own `init_top_pgt`); with `pti=off`
//! every process shares the kernel's top-level kernel-half entries, so for
//! kernel addresses it walks the very tables `guest.kernel_dtb()` leads to.
//! Each test checks that first. Everything is compared with the guest's CPU
//! paused.
//!
//! Each test runs on the 4-level guest (`nokaslr`) and on a guest whose CPU
//! has 5-level paging turned on (CR4.LA57), with KASLR; the address space's
//! mode is the one `detect_paging` finds in the tables, checked against
//! the CPU's CR4.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::qemu::{shared_guest, shared_la57_guest, Guest, SharedGuest, KERNEL_MAP};
use futures::future::join_all;
use leechio::vm::{detect_paging, CacheConfig};
use leechio::{
    Access, AddressSpace, Alias, Call, EngineConfig, LeechCore, Mapping, Memory, MemoryMap,
    PageError, PageSize, Paging, VmConfig,
};

const PAGE: u64 = 0x1000;
/// One past the kernel text mapping (`MODULES_VADDR` with a 1 GiB image
/// space): modules, fixmap and the like follow.
const KERNEL_MAP_END: u64 = 0xffff_ffff_c000_0000;
/// Mapped kernel addresses to check.
const MAPPED: usize = 1000;
/// Unmapped kernel-half addresses to check (besides non-canonical ones).
const UNMAPPED: usize = 48;
/// Reads of 8..=64 bytes to compare with the monitor's `x`.
const READS: usize = 160;

/// Caches trusted long enough that a "warm" repeat is warm on a loaded
/// machine too.
const LONG_CACHES: VmConfig = VmConfig {
    translations: CacheConfig {
        enabled: true,
        validity: Duration::from_secs(600),
        capacity: 1 << 16,
    },
    page_tables: CacheConfig {
        enabled: true,
        validity: Duration::from_secs(600),
        capacity: 1 << 14,
    },
    physical_address_bits: leechio::vm::MAX_PHYSICAL_ADDRESS_BITS,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Region {
    Text,
    DirectMap,
    Vmalloc,
    Other,
}

/// Where a guest's kernel keeps what: its paging mode (per the CPU) and
/// the bases of its direct map and vmalloc area (per the kernel's own
/// variables, read through the monitor: KASLR moves them).
struct Layout {
    paging: Paging,
    direct_map: std::ops::Range<u64>,
    vmalloc: std::ops::Range<u64>,
}

impl Layout {
    fn of(guest: &Guest) -> Layout {
        let paging = guest.paging();
        let direct_map = guest.page_offset_base();
        let vmalloc = guest
            .x(guest.symbol("vmalloc_base"), 1)
            .expect("vmalloc_base is readable")[0];
        // The areas' sizes (Documentation/arch/x86/x86_64/mm.rst): 64 TiB
        // and 32 TiB with 4 levels, 32 PiB and 12.5 PiB with 5.
        let (direct_size, vmalloc_size) = match paging {
            Paging::FourLevel => (64u64 << 40, 32u64 << 40),
            Paging::FiveLevel => (32 << 50, 12800 << 40),
        };
        Layout {
            paging,
            direct_map: direct_map..direct_map + direct_size,
            vmalloc: vmalloc..vmalloc + vmalloc_size,
        }
    }

    fn region(&self, va: u64) -> Region {
        match va {
            _ if (KERNEL_MAP..KERNEL_MAP_END).contains(&va) => Region::Text,
            // Before the direct map, whose area KASLR may end early.
            _ if self.vmalloc.contains(&va) => Region::Vmalloc,
            _ if self.direct_map.contains(&va) => Region::DirectMap,
            _ => Region::Other,
        }
    }

    /// First address of the kernel half.
    fn kernel_half(&self) -> u64 {
        self.paging.upper_half()
    }
}

/// The kernel's address space as the code under test reads it: in the mode
/// its tables show, which must be the CPU's.
fn kernel_space(mem: &Memory, guest: &Guest, config: VmConfig) -> AddressSpace {
    let evidence = mem.block_on(detect_paging(mem, guest.kernel_dtb()));
    let paging = evidence
        .paging()
        .unwrap_or_else(|e| panic!("{e}: {evidence:?}"));
    assert_eq!(paging, guest.paging(), "{evidence:?}");
    AddressSpace::with_config(mem.clone(), guest.kernel_dtb(), paging, config)
}

/// The engine over a freshly opened device, and the device (for its call
/// counters).
fn open(guest: &Guest) -> (Memory, Arc<LeechCore>) {
    let device = Arc::new(guest.open());
    let mem = Memory::with_config(device.clone(), EngineConfig::default());
    (mem, device)
}

/// The monitor translates through CR3: check that CR3's top table holds the
/// same kernel half as the kernel's own table (per the monitor's `xp`), so
/// `gva2gpa` of a kernel address is a translation through `kernel_dtb`.
fn assert_monitor_walks_the_kernel_tables(guest: &Guest) {
    let cr3 = guest.cr3() & 0x000f_ffff_ffff_f000;
    let kernel = guest.xp(guest.kernel_dtb() + 0x800, 256);
    assert!(
        kernel.iter().filter(|&&e| e & 1 != 0).count() >= 4,
        "the kernel's top table at {:#x} has almost no kernel half: {kernel:x?}",
        guest.kernel_dtb()
    );
    assert_eq!(
        guest.xp(cr3 + 0x800, 256),
        kernel,
        "CR3 {cr3:#x} does not share the kernel half of init_top_pgt at {:#x}",
        guest.kernel_dtb()
    );
}

/// Whether `pa..pa+len` lies inside one range of the RAM map.
fn in_ram(map: &MemoryMap, pa: u64, len: u64) -> bool {
    map.find(pa).is_some_and(|r| pa + len <= r.end())
}

/// The kernel half's mapped ranges, grouped for sampling: by 512 GiB
/// (a PML4 entry's span, in both modes), with the text mapping apart from what follows it (modules,
/// fixmap), so that a region of many small mappings (the espfix area maps
/// one page every 64 KiB) does not crowd out the others.
fn groups(mappings: &[Mapping]) -> Vec<Vec<Mapping>> {
    let mut by: BTreeMap<(u64, bool), Vec<Mapping>> = BTreeMap::new();
    for m in mappings {
        by.entry((m.va >> 39, m.va >= KERNEL_MAP_END))
            .or_default()
            .push(*m);
    }
    by.into_values().collect()
}

/// A random kernel address inside the mappings: a random group, a random
/// mapping of it, a random byte of it (or its first or last byte).
fn random_mapped(rng: &mut fastrand::Rng, groups: &[Vec<Mapping>]) -> (u64, Mapping) {
    let group = &groups[rng.usize(..groups.len())];
    let m = group[rng.usize(..group.len())];
    let va = match rng.u8(..10) {
        0 => m.va,
        1 => m.va + m.size - 1,
        _ => m.va + rng.u64(..m.size),
    };
    (va, m)
}

/// Random kernel-half addresses in the holes between mappings (as the
/// mappings say; the monitor decides), and non-canonical ones.
fn unmapped(rng: &mut fastrand::Rng, layout: &Layout, mappings: &[Mapping], n: usize) -> Vec<u64> {
    let mut holes: Vec<(u64, u64)> = Vec::new();
    let mut at = layout.kernel_half();
    for m in mappings {
        if m.va > at {
            holes.push((at, m.va));
        }
        at = m.va + m.size;
    }
    // Mostly small holes (next to mappings, where off-by-one errors show),
    // some large ones.
    holes.sort_by_key(|&(a, b)| b - a);
    let mut vas: Vec<u64> = (0..n)
        .map(|i| {
            let (a, b) = if i % 3 == 0 {
                holes[holes.len() - 1 - rng.usize(..holes.len().min(8))]
            } else {
                holes[rng.usize(..holes.len())]
            };
            match rng.u8(..4) {
                0 => a,
                1 => b - 1,
                _ => a + rng.u64(..b - a),
            }
        })
        .collect();
    // Non-canonical: just past each half, and far from both.
    let paging = layout.paging;
    vas.extend([
        paging.lower_half_end(),
        0x1234_5678_9abc_def0,
        paging.upper_half() - PAGE,
        0x8000_0000_0000_0000,
    ]);
    vas
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_thousand_kernel_addresses_translate_and_read_as_the_monitor_says_in_five_calls() {
    translate_and_read_a_thousand_kernel_addresses(shared_guest());
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn with_5_level_paging_a_thousand_kernel_addresses_translate_and_read_in_six_calls() {
    translate_and_read_a_thousand_kernel_addresses(shared_la57_guest());
}

fn translate_and_read_a_thousand_kernel_addresses(guest: SharedGuest) {
    let (mem, device) = open(&guest);
    let layout = Layout::of(&guest);
    let ram = guest.ram_map();
    let _paused = guest.pause();
    assert_monitor_walks_the_kernel_tables(&guest);

    // The kernel's mappings, listed by the code under test (a separate
    // address space, so the batch below starts cold); the monitor judges
    // every address drawn from them.
    let listing = kernel_space(&mem, &guest, VmConfig::default());
    let listed = mem.block_on(listing.mappings(layout.kernel_half()..));
    assert!(listed.failed.is_empty(), "{:x?}", listed.failed);
    let mappings = listed.mappings;
    let groups = groups(&mappings);
    assert_aliases_map_as_the_monitor_says(&guest, &listed.aliases);
    assert!(groups.len() >= 4, "only {} kernel regions", groups.len());

    let mut rng = fastrand::Rng::with_seed(0x6b65_726e);
    let drawn: Vec<(u64, Mapping)> = (0..MAPPED)
        .map(|_| random_mapped(&mut rng, &groups))
        .collect();
    let mut vas: Vec<u64> = drawn.iter().map(|&(va, _)| va).collect();
    // Holes: between the mappings and the aliases (which map what their
    // `same_as` ranges map).
    let mut covered = mappings.clone();
    covered.extend(listed.aliases.iter().map(|a| Mapping {
        va: a.va,
        pa: 0,
        size: a.size,
        page_size: PageSize::Size4K,
        access: Access::default(),
    }));
    covered.sort_by_key(|m| m.va);
    vas.extend(unmapped(&mut rng, &layout, &covered, UNMAPPED));
    // Reads of 8..=64 bytes at mapped addresses whose bytes are RAM (the
    // device reads RAM only), some unaligned, some across a page boundary
    // where the mapping goes on; and a few at unmapped addresses.
    let mut reads: Vec<(u64, usize)> = Vec::new();
    while reads.len() < READS {
        let (_, m) = drawn[rng.usize(..drawn.len())];
        let len = 8 * rng.u64(1..=8);
        if m.size < len {
            continue;
        }
        let offset = match rng.u8(..8) {
            0 => (PAGE - (m.va & 0xfff)) % PAGE + PAGE - 8,
            1 => rng.u64(..=m.size - len),
            _ => rng.u64(..=(m.size - len) / 8) * 8,
        }
        .min(m.size - len);
        if in_ram(&ram, m.pa + offset, len) {
            reads.push((m.va + offset, len as usize));
        }
    }
    // Inside one unmapped page: nothing of them can be read.
    reads.extend(
        vas[MAPPED..MAPPED + 8]
            .iter()
            .map(|&va| ((va & !0xfff) + 0x40, 32)),
    );

    // One batch: every translation and every read, cold.
    let space = kernel_space(&mem, &guest, LONG_CACHES);
    let batch = || {
        let mut bufs: Vec<Vec<u8>> = reads.iter().map(|&(_, n)| vec![0xa5; n]).collect();
        let (translations, results) = mem.block_on(futures::future::join(
            join_all(vas.iter().map(|&va| space.translate(va))),
            join_all(
                reads
                    .iter()
                    .zip(bufs.iter_mut())
                    .map(|(&(va, _), buf)| space.read(va, buf)),
            ),
        ));
        (translations, results, bufs)
    };
    let calls = device.call_count(Call::ReadScatter);
    let (translations, results, bufs) = batch();
    let cold = device.call_count(Call::ReadScatter) - calls;
    // Warm: translations cached, table pages cached for the unmapped ones;
    // only the data is read, in one call.
    let calls = device.call_count(Call::ReadScatter);
    let (warm_translations, warm_results, warm_bufs) = batch();
    let warm = device.call_count(Call::ReadScatter) - calls;
    let calls = device.call_count(Call::ReadScatter);
    let again = mem.block_on(join_all(vas.iter().map(|&va| space.translate(va))));
    let translations_only = device.call_count(Call::ReadScatter) - calls;
    eprintln!("device calls: cold {cold}, warm {warm}, warm translations {translations_only}");
    // One call a level, and one for the data.
    let levels = u64::from(layout.paging.levels());
    assert!(
        cold <= levels + 1,
        "the cold batch took {cold} device calls"
    );
    assert_eq!(warm, 1, "the warm batch took {warm} device calls");
    assert_eq!(
        translations_only, 0,
        "warm translations alone took {translations_only} device calls"
    );
    assert_eq!(warm_translations, translations);
    assert_eq!(again, translations);
    assert_eq!(warm_results, results);
    assert_eq!(warm_bufs, bufs);

    // Every translation against the monitor's.
    let mut regions: BTreeMap<Region, usize> = BTreeMap::new();
    let mut sizes: BTreeMap<PageSize, usize> = BTreeMap::new();
    let mut not_mapped = 0;
    for (&va, t) in vas.iter().zip(&translations) {
        let want = guest.gva2gpa(va);
        match t {
            Ok(t) => {
                assert_eq!(Some(t.pa), want, "translation of {va:#x}: {t:x?}");
                assert_eq!(t.va, va);
                *regions.entry(layout.region(va)).or_default() += 1;
                *sizes.entry(t.page_size).or_default() += 1;
            }
            Err(e) => {
                assert_eq!(want, None, "{va:#x} is mapped per the monitor: {e}");
                assert!(
                    matches!(e.reason, PageError::NotMapped | PageError::NonCanonical),
                    "{va:#x}: {e}"
                );
                not_mapped += 1;
            }
        }
    }
    eprintln!("checked translations: {regions:?}, page sizes {sizes:?}, {not_mapped} unmapped");
    // What was drawn from the mappings is mapped, and the rest is not.
    assert_eq!(translations.iter().filter(|t| t.is_ok()).count(), MAPPED);
    assert_eq!(not_mapped, vas.len() - MAPPED);
    // The regions the test is about, each well represented.
    for r in [
        Region::Text,
        Region::DirectMap,
        Region::Vmalloc,
        Region::Other,
    ] {
        let n = regions.get(&r).copied().unwrap_or(0);
        assert!(n >= 50, "only {n} addresses in {r:?}: {regions:?}");
    }
    // Large pages and small pages are both among them.
    let large = sizes.get(&PageSize::Size2M).copied().unwrap_or(0)
        + sizes.get(&PageSize::Size1G).copied().unwrap_or(0);
    let small = sizes.get(&PageSize::Size4K).copied().unwrap_or(0);
    assert!(large >= 50 && small >= 50, "page sizes {sizes:?}");

    // Every read against the monitor's `x` (qword by qword).
    let mut compared = 0;
    for ((&(va, len), result), buf) in reads.iter().zip(&results).zip(&bufs) {
        match guest.x(va, len / 8) {
            Some(words) => {
                assert_eq!(*result, Ok(()), "read at {va:#x}+{len}");
                let got: Vec<u64> = buf
                    .chunks_exact(8)
                    .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
                    .collect();
                assert_eq!(got, words, "{len} bytes at {va:#x}");
                compared += 1;
            }
            None => {
                assert_eq!(guest.gva2gpa(va), None, "x failed at mapped {va:#x}");
                let e = result.as_ref().expect_err("read of an unmapped address");
                assert_eq!(e.failed.len(), 1, "{e:?}");
                assert_eq!((e.failed[0].offset, e.failed[0].len), (0, len), "{e:?}");
                assert!(
                    buf.iter().all(|&b| b == 0xa5),
                    "failed read at {va:#x} wrote"
                );
            }
        }
    }
    assert_eq!(compared, READS);
}

/// The kernel's aliases (the espfix area: one page table behind many
/// entries) are there, and each maps as the range it names, per the
/// monitor: at its first and last page and a page inside (of every alias,
/// or of two dozen spread over them).
fn assert_aliases_map_as_the_monitor_says(guest: &Guest, aliases: &[Alias]) {
    assert!(
        !aliases.is_empty(),
        "no shared page tables in the kernel half"
    );
    let last = aliases.last().into_iter();
    for a in aliases
        .iter()
        .step_by(aliases.len().div_ceil(24))
        .chain(last)
    {
        for offset in [0, (a.size / 2) & !0xfff, a.size - 0x1000] {
            for inside in [0, 0x10, 0xff8] {
                let at = offset + inside;
                assert_eq!(
                    guest.gva2gpa(a.va + at),
                    guest.gva2gpa(a.same_as + at),
                    "{:#x} in {a:x?}",
                    a.va + at
                );
            }
        }
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn large_and_small_pages_translate_with_the_entries_the_tables_hold() {
    translate_pages_of_each_size(shared_guest());
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn with_5_level_paging_pages_translate_with_the_entries_the_tables_hold() {
    translate_pages_of_each_size(shared_la57_guest());
}

fn translate_pages_of_each_size(guest: SharedGuest) {
    let (mem, _device) = open(&guest);
    let layout = Layout::of(&guest);
    let _paused = guest.pause();
    assert_monitor_walks_the_kernel_tables(&guest);
    let space = kernel_space(&mem, &guest, VmConfig::default());
    let mappings = mem
        .block_on(space.mappings(layout.kernel_half()..))
        .mappings;

    // Up to four pages of each size, from different regions where there
    // are; and the first and last byte of each page and a byte inside.
    let mut rng = fastrand::Rng::with_seed(0x1a29e);
    let mut picked: BTreeMap<PageSize, Vec<(Region, u64)>> = BTreeMap::new();
    for m in &mappings {
        let size = m.page_size.bytes();
        let list = picked.entry(m.page_size).or_default();
        let r = layout.region(m.va);
        if list.len() < 4 && !list.iter().any(|&(pr, _)| pr == r) && m.size >= size {
            // A whole page of the mapping.
            let first = m.va.next_multiple_of(size);
            if first + size <= m.va + m.size {
                list.push((r, first));
            }
        }
    }
    // The kernel text is mapped with 2 MiB pages, its first page included.
    picked
        .entry(PageSize::Size2M)
        .or_default()
        .push((Region::Text, guest.kernel_text()));
    let sizes: Vec<PageSize> = picked.keys().copied().collect();
    assert!(
        sizes.contains(&PageSize::Size4K) && sizes.contains(&PageSize::Size2M),
        "page sizes found: {sizes:?}"
    );

    for (&size, pages) in &picked {
        for &(_, page) in pages {
            let bytes = size.bytes();
            let vas = [page, page + bytes - 1, page + 8 * rng.u64(..bytes / 8)];
            let got = mem.block_on(join_all(vas.iter().map(|&va| space.translate(va))));
            for (&va, t) in vas.iter().zip(got) {
                let t = t.unwrap_or_else(|e| panic!("{va:#x} ({size:?} page): {e}"));
                let (entries, found) = guest.xp_walk(guest.kernel_dtb(), va);
                assert_eq!(t.entries, entries, "entries for {va:#x}");
                assert_eq!(Some((t.pa, t.page_size)), found, "walk of {va:#x}");
                assert_eq!(t.page_size, size, "{va:#x}");
                assert_eq!(Some(t.pa), guest.gva2gpa(va), "{va:#x}");
            }
        }
    }
}
