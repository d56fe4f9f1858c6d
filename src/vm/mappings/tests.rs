//! The walk of every mapping, on tables built here: against a plain
//! recursive walker that follows every path, and on tables whose paths
//! outnumber their pages by far (loops, shared tables, garbage).

use std::sync::Arc;

use super::*;

use crate::vm::reference::{expand, misplaced_alias, mistranslated, Reference};
use crate::vm::tests::{index4, setup, Tables, KERNEL, MIB, PRESENT_RW, PS, USER};
use crate::vm::VmConfig;
use crate::{EngineConfig, MemBackend, Memory};

/// What the tables of these tests allow: entries are present and
/// writable, not user (`PRESENT_RW`).
const KERNEL_RWX: Access = Access {
    write: true,
    execute: true,
    user: false,
};

fn m(va: u64, pa: u64, size: u64, page_size: PageSize) -> Mapping {
    Mapping {
        va,
        pa,
        size,
        page_size,
        access: KERNEL_RWX,
    }
}

#[test]
#[cfg_attr(miri, ignore)] // Miri: hours of table walks (vm has no unsafe code)
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
    // The last page of the address space, its last byte included.
    let top = u64::MAX - 0xfff;
    t.map(top, 0x20_0000, PageSize::Size4K);
    let space = AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel);
    let calls = backend.read_calls();
    let all = mem.block_on(space.mappings(..));
    assert!(backend.read_calls() - calls <= 4, "one batch per level");
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
            m(top, 0x20_0000, 0x1000, PageSize::Size4K),
        ]
    );
    assert!(all.failed.is_empty() && all.aliases.is_empty());
    let tail = mem.block_on(space.mappings(u64::MAX - 0x7ff..=u64::MAX));
    assert_eq!(
        tail.mappings,
        vec![m(u64::MAX - 0x7ff, 0x20_0800, 0x800, PageSize::Size4K)]
    );
    // An exclusive end stops before it, as it says.
    let short = mem.block_on(space.mappings(top..u64::MAX));
    assert_eq!(
        short.mappings,
        vec![m(top, 0x20_0000, 0xfff, PageSize::Size4K)]
    );
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
#[cfg_attr(miri, ignore)] // Miri: hours of table walks (vm has no unsafe code)
fn access_is_what_every_level_of_the_walk_allows() {
    let (mem, backend, mut t) = setup();
    for i in 0..5 {
        t.map(USER + i * 0x1000, 0x40_0000 + i * 0x1000, PageSize::Size4K);
    }
    // The entry of `level` on the way to `va`, with `set` bits set and
    // `clear` bits cleared.
    let change = |va: u64, level: usize, set: u64, clear: u64| {
        let table = (0..level).fold(t.dtb, |table, l| {
            t.entry(table + index4(va, l) * 8) & 0x000f_ffff_ffff_f000
        });
        let at = table + index4(va, level) * 8;
        backend.poke(at, &((t.entry(at) | set) & !clear).to_le_bytes());
    };
    const W: u64 = 1 << 1;
    const U: u64 = 1 << 2;
    const NX: u64 = 1 << 63;
    for level in 0..3 {
        change(USER, level, U, 0);
    }
    let page = |i: u64| USER + i * 0x1000;
    change(page(0), 3, U, 0);
    change(page(1), 3, U, 0);
    change(page(2), 3, U, W);
    change(page(3), 3, U | NX, 0);
    let access = |write, execute, user| Access {
        write,
        execute,
        user,
    };
    let at = |i: u64, pages: u64, a: Access| Mapping {
        access: a,
        ..m(
            page(i),
            0x40_0000 + i * 0x1000,
            pages * 0x1000,
            PageSize::Size4K,
        )
    };
    let space = AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel);
    // Pages that continue each other are merged only with the same access.
    assert_eq!(
        mem.block_on(space.mappings(..)).mappings,
        vec![
            at(0, 2, access(true, true, true)),
            at(2, 1, access(false, true, true)),
            at(3, 1, access(true, false, true)),
            at(4, 1, access(true, true, false)),
        ]
    );
    // A read-only directory entry takes writing from every page below it,
    // and NX in the top entry takes execution: the first three are alike.
    change(USER, 2, 0, W);
    change(USER, 0, NX, 0);
    let space = AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel);
    assert_eq!(
        mem.block_on(space.mappings(..)).mappings,
        vec![
            at(0, 4, access(false, false, true)),
            at(4, 1, access(false, false, false)),
        ]
    );
    assert_eq!(access(false, true, true).to_string(), "r-xu");
    assert_eq!(access(true, false, false).to_string(), "rw-k");
}

#[test]
#[cfg_attr(miri, ignore)] // Miri: hours of table walks (vm has no unsafe code)
fn a_table_reached_with_other_permissions_is_walked_again_not_an_alias() {
    let (mem, backend, mut t) = setup();
    t.map(USER, 0x40_0000, PageSize::Size4K);
    // A second PML4 entry to the same PDPT, read-only: the same pages,
    // but not writable through it.
    let pml4e = t.entry(t.dtb + index4(USER, 0) * 8);
    let second = USER + (1 << 39);
    backend.poke(
        t.dtb + index4(second, 0) * 8,
        &(pml4e & !(1 << 1)).to_le_bytes(),
    );
    let space = AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel);
    let found = mem.block_on(space.mappings(..));
    assert!(found.aliases.is_empty(), "{:x?}", found.aliases);
    let read_only = Access {
        write: false,
        ..KERNEL_RWX
    };
    assert_eq!(
        found.mappings,
        vec![
            m(USER, 0x40_0000, 0x1000, PageSize::Size4K),
            Mapping {
                access: read_only,
                ..m(second, 0x40_0000, 0x1000, PageSize::Size4K)
            },
        ]
    );
    // The same entry twice is an alias, as before.
    backend.poke(t.dtb + index4(second, 0) * 8, &pml4e.to_le_bytes());
    let space = AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel);
    let found = mem.block_on(space.mappings(..));
    assert_eq!(found.aliases.len(), 1, "{found:x?}");
}

#[test]
#[cfg_attr(miri, ignore)] // Miri: hours of table walks (vm has no unsafe code)
fn mappings_name_the_ranges_of_unreadable_tables_exactly() {
    let (mem, _backend, t) = setup();
    // A top table outside memory: both canonical halves, clipped.
    let lost = AddressSpace::new(mem.clone(), 100 * MIB, Paging::FourLevel);
    let all = mem.block_on(lost.mappings(..));
    assert!(all.mappings.is_empty());
    let lost_range = |va, size| FailedRange {
        va,
        size,
        reason: PageError::OutOfRange,
    };
    let half = 0x8000_0000_0000;
    assert_eq!(
        all.failed,
        vec![lost_range(0, half), lost_range(0xffff_8000_0000_0000, half)]
    );
    let part = mem.block_on(lost.mappings(KERNEL..KERNEL + 0x1000));
    assert_eq!(part.failed, vec![lost_range(KERNEL, 0x1000)]);
    // A top-table entry pointing outside memory: its 512 GiB, clipped.
    t.backend.poke(
        t.dtb + index4(USER, 0) * 8,
        &((100 * MIB) | PRESENT_RW).to_le_bytes(),
    );
    let space = AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel);
    let all = mem.block_on(space.mappings(..));
    assert_eq!(all.failed, vec![lost_range(0x7f00_0000_0000, 1 << 39)]);
    let part = mem.block_on(space.mappings(USER + 0x1000..USER + 0x3000));
    assert_eq!(part.failed, vec![lost_range(USER + 0x1000, 0x2000)]);
}

/// 16 MiB of memory whose page at `at` is a table with every entry `entry`.
fn filled_table(backend: &MemBackend, at: u64, entry: u64) {
    backend.poke(at, &entry.to_le_bytes().repeat(ENTRIES));
}

fn small_memory() -> (Memory, Arc<MemBackend>) {
    let backend = Arc::new(MemBackend::with_address_pattern(16 * MIB as usize));
    (
        Memory::with_config(backend.clone(), EngineConfig::default()),
        backend,
    )
}

/// The aliases the walk reports for a table reached by all 512 entries
/// of the table above it, one level below the top: entries 1..512 of
/// each level.
fn every_entry_aliased(table: u64, paging: Paging, levels: std::ops::Range<usize>) -> Vec<Alias> {
    let mut aliases: Vec<Alias> = levels
        .flat_map(|level| {
            let span = entry_span(level - 1);
            (1..ENTRIES as u64).map(move |i| Alias {
                va: if level == paging.top_level() + 1 {
                    paging.sign_extend(i * span)
                } else {
                    i * span
                },
                size: span,
                same_as: 0,
                table,
            })
        })
        .collect();
    aliases.sort_unstable_by_key(|a| a.va);
    aliases
}

#[test]
#[cfg_attr(miri, ignore)] // Miri: hours of table walks (vm has no unsafe code)
fn a_table_whose_entries_all_point_at_itself_is_walked_once_a_level() {
    let (mem, backend) = small_memory();
    let p = 8 * MIB;
    filled_table(&backend, p, p | PRESENT_RW);
    // 512^4 paths lead to a page; the walk reads one page a level, or
    // once with the table cache.
    let uncached = AddressSpace::with_config(mem.clone(), p, Paging::FourLevel, VmConfig::UNCACHED);
    let calls = backend.read_calls();
    let found = mem.block_on(uncached.mappings(..));
    assert_eq!(backend.read_calls() - calls, 4);
    let space = AddressSpace::new(mem.clone(), p, Paging::FourLevel);
    let calls = backend.read_calls();
    assert_eq!(mem.block_on(space.mappings(..)), found);
    assert_eq!(backend.read_calls() - calls, 1);
    // The table itself, as the 512 pages of the first 2 MiB: a CPU maps
    // them so too.
    let pages: Vec<Mapping> = (0..512)
        .map(|i| m(i * 0x1000, p, 0x1000, PageSize::Size4K))
        .collect();
    assert_eq!(found.mappings, pages);
    assert_eq!(
        found.aliases,
        every_entry_aliased(p, Paging::FourLevel, 2..5)
    );
    assert!(found.failed.is_empty());
    // Counted as a CPU sees it: both halves wholly mapped.
    let sizes = mem.block_on(mapped_bytes(&space, &[(p, Paging::FourLevel)]));
    assert_eq!(sizes, vec![(1 << 47, 1 << 47)]);
}

#[test]
#[cfg_attr(miri, ignore)] // Miri: hours of table walks (vm has no unsafe code)
fn two_tables_pointing_at_each_other_end_in_aliases_and_pages_of_each_other() {
    let (mem, backend) = small_memory();
    let (a, b) = (8 * MIB, 8 * MIB + 0x1000);
    filled_table(&backend, a, b | PRESENT_RW);
    filled_table(&backend, b, a | PRESENT_RW);
    let space = AddressSpace::new(mem.clone(), a, Paging::FourLevel);
    let found = mem.block_on(space.mappings(..));
    // Levels: a, b, a, b; the last maps a's page 512 times.
    let pages: Vec<Mapping> = (0..512)
        .map(|i| m(i * 0x1000, a, 0x1000, PageSize::Size4K))
        .collect();
    assert_eq!(found.mappings, pages);
    let four = Paging::FourLevel;
    let mut aliases = every_entry_aliased(b, four, 2..3);
    aliases.extend(every_entry_aliased(a, four, 3..4));
    aliases.extend(every_entry_aliased(b, four, 4..5));
    aliases.sort_unstable_by_key(|a| a.va);
    assert_eq!(found.aliases, aliases);
    // A clipped walk walks the tables at its ends for their part only.
    let part = mem.block_on(space.mappings(0x1800..0x20_0000 + 0x2800));
    assert_eq!(
        part.mappings,
        vec![
            m(0x1800, a + 0x800, 0x800, PageSize::Size4K),
            m(0x2000, a, 0x1000, PageSize::Size4K),
            m(0x3000, a, 0x1000, PageSize::Size4K),
        ]
        .into_iter()
        .chain((4..512).map(|i| m(i * 0x1000, a, 0x1000, PageSize::Size4K)))
        .chain([
            m(0x20_0000, a, 0x1000, PageSize::Size4K),
            m(0x20_1000, a, 0x1000, PageSize::Size4K),
            m(0x20_2000, a, 0x800, PageSize::Size4K),
        ])
        .collect::<Vec<_>>()
    );
    assert!(part.aliases.is_empty(), "{:x?}", part.aliases);
}

#[test]
#[cfg_attr(miri, ignore)] // Miri: hours of table walks (vm has no unsafe code)
fn shared_tables_like_linux_espfix_are_listed_once_and_counted_in_full() {
    // Linux's espfix area: 4 PDPT entries share a PD whose 512 entries
    // share a PT that maps one stack page in every 16th entry.
    let (mem, backend) = small_memory();
    let mut t = Tables::new(backend.clone(), 8 * MIB);
    let stack = 0x30_0000u64;
    let espfix = 0xffff_ff00_0000_0000u64;
    t.map(espfix, stack, PageSize::Size4K);
    let pdpt = t.entry(t.dtb + index4(espfix, 0) * 8) & !0xfff;
    let pd = t.entry(pdpt) & !0xfff;
    let pt = t.entry(pd) & !0xfff;
    for i in 1..4 {
        backend.poke(pdpt + i * 8, &(pd | PRESENT_RW).to_le_bytes());
    }
    filled_table(&backend, pd, pt | PRESENT_RW);
    backend.poke(pt, &[0; 0x1000]);
    for i in (0..512).step_by(16) {
        backend.poke(pt + i * 8, &(stack | PRESENT_RW).to_le_bytes());
    }
    let space = AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel);
    let found = mem.block_on(space.mappings(..));
    let pages: Vec<Mapping> = (0..512)
        .step_by(16)
        .map(|i| m(espfix + i * 0x1000, stack, 0x1000, PageSize::Size4K))
        .collect();
    assert_eq!(found.mappings, pages);
    assert_eq!(found.aliases.len(), 3 + 511);
    assert_eq!(
        found.aliases[0],
        Alias {
            va: espfix + 0x20_0000,
            size: 0x20_0000,
            same_as: espfix,
            table: pt
        }
    );
    assert_eq!(
        found.aliases[511],
        Alias {
            va: espfix + (1 << 30),
            size: 1 << 30,
            same_as: espfix,
            table: pd
        }
    );
    // 65536 pages mapped, as the CPU sees it.
    let sizes = mem.block_on(mapped_bytes(&space, &[(t.dtb, Paging::FourLevel)]));
    assert_eq!(sizes, vec![(0, 65536 * 0x1000)]);
}

#[test]
#[cfg_attr(miri, ignore)] // Miri: hours of table walks (vm has no unsafe code)
fn entries_a_cpu_faults_on_are_failed_ranges_and_failed_walks() {
    let (mem, backend, mut t) = setup();
    t.map(USER, 0x40_0000, PageSize::Size4K);
    t.map(KERNEL, 0x80_0000, PageSize::Size2M);
    // The table of `level` on the way to `va`.
    let table = |va: u64, level: usize| {
        (0..level).fold(t.dtb, |table, l| {
            t.entry(table + index4(va, l) * 8) & !0xfff
        })
    };
    let poke = |at: u64, entry: u64| backend.poke(at, &entry.to_le_bytes());
    // PS in a PML4 entry; a 1 GiB page with a bit below its alignment
    // (the example); a 2 MiB page with bit 13; a 4 KiB page at
    // bit 46, reserved where MAXPHYADDR is 46.
    poke(t.dtb + 8, 0x1234_5083);
    poke(table(USER, 1) + 8, 0x1234_5083);
    poke(table(KERNEL, 2) + 8, 0x20_0000 | 1 << 13 | PRESENT_RW | PS);
    poke(table(USER, 3) + 8, 1 << 46 | PRESENT_RW);
    let config = VmConfig {
        physical_address_bits: 46,
        ..VmConfig::default()
    };
    let space = AddressSpace::with_config(mem.clone(), t.dtb, Paging::FourLevel, config);
    let fail = |va: u64, size: u64| FailedRange {
        va,
        size,
        reason: PageError::ReservedBits,
    };
    let pdpt_base = USER & !((1 << 39) - 1);
    let found = mem.block_on(space.mappings(..));
    assert_eq!(
        found.failed,
        vec![
            fail(1 << 39, 1 << 39),
            fail(USER + 0x1000, 0x1000),
            fail(pdpt_base + (1 << 30), 1 << 30),
            fail(KERNEL + 0x20_0000, 0x20_0000),
        ]
    );
    assert_eq!(
        found.mappings,
        vec![
            m(USER, 0x40_0000, 0x1000, PageSize::Size4K),
            m(KERNEL, 0x80_0000, 0x20_0000, PageSize::Size2M),
        ]
    );
    for (va, level) in [
        (1 << 39, 0),
        (pdpt_base + (1 << 30) + 0x1234, 1),
        (KERNEL + 0x20_0008, 2),
        (USER + 0x1010, 3),
    ] {
        let e = mem.block_on(space.translate(va)).unwrap_err();
        assert_eq!(
            (e.reason, e.level),
            (PageError::ReservedBits, Some(level + 1))
        );
        let mut buf = [0u8; 16];
        let r = mem.block_on(space.read(va, &mut buf)).unwrap_err();
        assert_eq!(r.failed[0].reason, PageError::ReservedBits);
    }
    // With the architecture's 52 bits, bit 46 is an address bit.
    let wide = AddressSpace::new(mem.clone(), t.dtb, Paging::FourLevel);
    assert_eq!(
        mem.block_on(wide.translate(USER + 0x1010)).map(|t| t.pa),
        Ok((1 << 46) + 0x10)
    );
}

/// A random entry: tables (of `tables`), pages, garbage and the faulty,
/// with the permission bits (R/W, U/S, NX) at random.
fn random_entry(rng: &mut fastrand::Rng, tables: &[u64]) -> u64 {
    let table = tables[rng.usize(..tables.len())];
    let permissions = [0, 1 << 1, 1 << 2, 1 << 63][rng.usize(0..4)];
    let entry = match rng.u8(0..11) {
        0..=4 => table | PRESENT_RW,
        5 => table | PRESENT_RW | PS,
        6 => (rng.u64(0..64) << 21) | PRESENT_RW | PS | ((rng.u64(0..4)) << 13),
        7 => (rng.u64(0..8192) << 12) | PRESENT_RW,
        8 => table | 1 << rng.u64(38..52) | PRESENT_RW,
        9 => (64 * MIB) | PRESENT_RW,
        _ => rng.u64(..) | 1,
    };
    entry ^ permissions
}

#[test]
#[cfg_attr(miri, ignore)] // Miri: hours of table walks (vm has no unsafe code)
fn random_tables_map_what_a_plain_walk_of_every_path_maps() {
    let mut rng = fastrand::Rng::with_seed(0x7ab1e5);
    let (mem, backend) = small_memory();
    // Cases with mappings, aliases, reserved entries, unreadable tables:
    // the generator must make each often.
    let mut seen = [0; 4];
    for case in 0..300 {
        let tables: Vec<u64> = (0..6).map(|k| 8 * MIB + k * 0x1000).collect();
        for &t in &tables {
            backend.poke(t, &[0; 0x1000]);
            for _ in 0..rng.usize(1..=5) {
                let i = [0, 1, 255, 256, 511, rng.u64(0..512)][rng.usize(0..6)];
                backend.poke(t + i * 8, &random_entry(&mut rng, &tables).to_le_bytes());
            }
        }
        let physical_bits = [52, 46, 39][rng.usize(0..3)];
        let paging = Paging::ALL[rng.usize(0..2)];
        let (lo, hi) = if rng.bool() {
            (0, u64::MAX)
        } else {
            let mut ends = [rng.u64(..), rng.u64(..)].map(|a| paging.sign_extend(a & !0xfff));
            ends.sort_unstable();
            (ends[0] + rng.u64(0..0x1000), ends[1])
        };
        let config = VmConfig {
            physical_address_bits: physical_bits,
            ..[VmConfig::default(), VmConfig::UNCACHED][rng.usize(0..2)]
        };
        let space = AddressSpace::with_config(mem.clone(), tables[0], paging, config);
        let found = mem.block_on(space.mappings(lo..=hi));
        let reference = Reference::walk(
            &backend,
            16 * MIB,
            physical_bits,
            paging,
            tables[0],
            lo..=hi,
        );
        assert_eq!(
            expand(&found),
            reference.mappings(),
            "case {case}: {found:x?}"
        );
        // The ends of the range and a byte inside each page found.
        let inside = reference.pages.iter().take(16).map(|p| p.0 + 0x123);
        let vas: Vec<u64> = [lo, hi].into_iter().chain(inside).collect();
        let wrong = mem.block_on(mistranslated(&space, &reference, tables[0], vas));
        assert_eq!(wrong, None, "case {case}");
        for (n, shows) in [
            !found.mappings.is_empty(),
            !found.aliases.is_empty(),
            found
                .failed
                .iter()
                .any(|f| f.reason == PageError::ReservedBits),
            found
                .failed
                .iter()
                .any(|f| f.reason == PageError::OutOfRange),
        ]
        .into_iter()
        .enumerate()
        {
            seen[n] += usize::from(shows);
        }
        // Aliases name a range walked before, which no alias of its size
        // or larger holds (so writing them out ends).
        assert_eq!(misplaced_alias(&found), None, "case {case}");
        if (lo, hi) == (0, u64::MAX) {
            assert_eq!(
                mem.block_on(mapped_bytes(&space, &[(tables[0], paging)])),
                vec![reference.mapped_bytes()],
                "case {case}"
            );
        }
    }
    assert!(seen.iter().all(|&n| n >= 30), "{seen:?}");
}

#[test]
#[cfg_attr(miri, ignore)] // Miri: hours of table walks (vm has no unsafe code)
fn memory_full_of_table_like_pages_is_read_once_a_level_with_bounded_results() {
    // 4 MiB where every page is a table of present entries pointing at
    // pages of the same memory: 512^4 paths, 1024 pages.
    let pages = 1024u64;
    let backend = Arc::new(MemBackend::with_address_pattern((pages * 0x1000) as usize));
    let mem = Memory::with_config(backend.clone(), EngineConfig::default());
    let mut rng = fastrand::Rng::with_seed(11);
    for p in 0..pages {
        let table: Vec<u8> = (0..512)
            .flat_map(|_| (rng.u64(0..pages) << 12 | PRESENT_RW).to_le_bytes())
            .collect();
        backend.poke(p * 0x1000, &table);
    }
    let space = AddressSpace::with_config(mem.clone(), 0, Paging::FourLevel, VmConfig::UNCACHED);
    let found = mem.block_on(space.mappings(..));
    let read: usize = backend.read_call_sizes().iter().sum();
    // Each page at most once a level (the top table once).
    assert!(read as u64 <= 1 + 3 * pages, "{read} pages read");
    let records = found.mappings.len() + found.aliases.len() + found.failed.len();
    assert!(
        records <= 512 * read,
        "{records} records from {read} tables"
    );
    // Every level-3 table's 512 pages are listed; everything else is an
    // alias of a table walked once.
    assert_eq!(
        found.mappings.iter().map(|m| m.size).sum::<u64>() % 0x1000,
        0
    );
    let sizes = mem.block_on(mapped_bytes(&space, &[(0, Paging::FourLevel)]));
    assert_eq!(sizes, vec![(1 << 47, 1 << 47)]);
}
