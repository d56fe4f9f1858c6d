//! Which paging mode a root's tables are in, found from the tables
//! themselves.
//!
//! A CPU knows its mode from CR4.LA57; a memory image does not say. The
//! two readings of one root follow the same pointers and differ in what
//! each level means, so they can be told apart by what each would have a
//! CPU do:
//!
//! - A 5-level reading of 4-level tables takes each table for the one a
//!   level above it: PDPT entries that map 1 GiB pages become PML4 entries
//!   with PS set, PD entries that map 2 MiB pages become 1 GiB pages at
//!   addresses that are not 1 GiB aligned, page tables become page
//!   directories whose entries point at data. A CPU would fault on those:
//!   real tables never hold them.
//! - A 4-level reading of 5-level tables never meets such an entry (each
//!   level's entries are read as the level below, where every real entry
//!   is legal), so the evidence for 5 levels is positive: the 5-level
//!   reading's page tables, which the 4-level reading would take for 4 KiB
//!   pages of data, read as page tables, their entries pointing into
//!   memory.
//!
//! Both readings are taken over a sample of the tables (at most
//! [`SAMPLE`] distinct table pages a level, spread over the address
//! space), reading each level of both in one batch: five batches. Where
//! neither reading stands out, or both fault, the evidence says so rather
//! than pick one.

use std::fmt;

use rustc_hash::FxHashSet;

use super::paging::{
    entry_span, reserved_address_bits, step, Paging, Step, ENTRIES, LEVELS,
    MAX_PHYSICAL_ADDRESS_BITS, PTE_LEVEL, TABLE_SIZE,
};
use crate::{join_all, Memory, PageError};

/// Most distinct table pages a reading looks at per level.
pub const SAMPLE: usize = 48;
/// Present entries the 5-level reading's page tables must hold, at least,
/// to count as evidence.
const MIN_BOTTOM_ENTRIES: u64 = 16;

/// An entry a reading meets that a CPU in that mode would fault on, or a
/// table pointer past the end of memory (tables live in RAM).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultingEntry {
    /// First virtual address the entry maps, in that reading.
    pub va: u64,
    /// Its level, by [`super::LEVEL_NAMES`].
    pub level: usize,
    /// Physical address of the entry.
    pub at: u64,
    /// The entry.
    pub entry: u64,
    /// Whether it points at a table past the end of memory (else a
    /// reserved bit is set).
    pub outside_memory: bool,
}

impl fmt::Display for FaultingEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:#x} at {:#x} (for {:#x}) {}",
            super::LEVEL_NAMES[self.level],
            self.entry,
            self.at,
            self.va,
            if self.outside_memory {
                "points at a table past the end of memory"
            } else {
                "has reserved bits set"
            }
        )
    }
}

/// What one reading of a root found in its sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// The mode read in.
    pub paging: Paging,
    /// The first entry a CPU would fault on, if any.
    pub fault: Option<FaultingEntry>,
    /// Distinct table pages read.
    pub tables: usize,
    /// Present entries of the page tables (the lowest level) read.
    pub bottom_entries: u64,
    /// Of those, the ones whose page lies in memory.
    pub bottom_in_memory: u64,
}

/// Both readings of a root, and what they settle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagingEvidence {
    /// The root.
    pub dtb: u64,
    /// Why the root itself could not be read, if it could not: then
    /// neither reading says anything.
    pub unreadable: Option<PageError>,
    /// The 4-level reading.
    pub four: Reading,
    /// The 5-level reading.
    pub five: Reading,
}

impl PagingEvidence {
    /// The mode the tables are in, or why that cannot be told.
    pub fn paging(&self) -> Result<Paging, String> {
        let dtb = self.dtb;
        if let Some(reason) = self.unreadable {
            return Err(format!(
                "the page-table root {dtb:#x} is unreadable: {reason}"
            ));
        }
        match (&self.four.fault, &self.five.fault) {
            (None, Some(_)) => Ok(Paging::FourLevel),
            (Some(_), None) => Ok(Paging::FiveLevel),
            (Some(four), Some(five)) => Err(format!(
                "the tables at {dtb:#x} fit neither mode: read as 4-level, {four}; as 5-level, {five}"
            )),
            (None, None) if self.five_level_page_tables() => Ok(Paging::FiveLevel),
            (None, None) => Err(format!(
                "the tables at {dtb:#x} read as well in 4-level as in 5-level paging \
                 ({} and {} table pages looked at)",
                self.four.tables, self.five.tables
            )),
        }
    }

    /// Whether the 5-level reading reached page tables that hold enough
    /// present entries, nearly all pointing into memory: real page tables,
    /// which a 4-level reading would take for pages of data.
    fn five_level_page_tables(&self) -> bool {
        let r = &self.five;
        r.bottom_entries >= MIN_BOTTOM_ENTRIES && r.bottom_in_memory * 8 >= r.bottom_entries * 7
    }
}

/// One table page a reading goes through.
#[derive(Clone, Copy)]
struct Table {
    pa: u64,
    /// First virtual address it maps.
    va: u64,
}

/// Reads the tables of the root `dtb` in both modes, a sample of each
/// level in one batch, and says what each reading meets.
pub async fn detect_paging(mem: &Memory, dtb: u64) -> PagingEvidence {
    let dtb = dtb & super::paging::ADDR_MASK;
    let end = mem.backend().max_address();
    let reserved = reserved_address_bits(MAX_PHYSICAL_ADDRESS_BITS);
    let mut readings = Paging::ALL.map(|paging| Reading {
        paging,
        fault: None,
        tables: 0,
        bottom_entries: 0,
        bottom_in_memory: 0,
    });
    let mut unreadable = None;
    let mut frontiers: [Vec<Table>; 2] = [
        vec![Table { pa: dtb, va: 0 }],
        vec![Table { pa: dtb, va: 0 }],
    ];
    // Depth 0 is the root; each depth is one batch for both readings.
    for depth in 0..LEVELS {
        let mut wanted: Vec<u64> = frontiers.iter().flatten().map(|t| t.pa).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let pages = join_all(wanted.iter().map(|&pa| async move {
            let mut page = vec![0u8; TABLE_SIZE as usize];
            mem.read(pa, &mut page).await.map(|()| page)
        }))
        .await;
        if depth == 0 {
            if let Err(e) = &pages[0] {
                unreadable = Some(
                    e.failed
                        .first()
                        .map_or(PageError::Unspecified, |f| f.reason),
                );
            }
        }
        let page_of = |pa: u64| {
            let i = wanted.binary_search(&pa).ok()?;
            pages[i].as_deref().ok()
        };
        for (reading, frontier) in readings.iter_mut().zip(frontiers.iter_mut()) {
            let top = reading.paging.top_level();
            let level = top + depth;
            if level >= LEVELS {
                frontier.clear();
                continue;
            }
            let mut next = Vec::new();
            for table in frontier.iter() {
                let Some(page) = page_of(table.pa) else {
                    continue;
                };
                reading.tables += 1;
                for (i, bytes) in page.chunks_exact(8).enumerate().take(ENTRIES) {
                    let entry = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
                    let offset = i as u64 * entry_span(level);
                    let va = if level == top {
                        reading.paging.sign_extend(offset)
                    } else {
                        table.va + offset
                    };
                    let mut fault = |outside_memory| {
                        reading.fault.get_or_insert(FaultingEntry {
                            va,
                            level,
                            at: table.pa + i as u64 * 8,
                            entry,
                            outside_memory,
                        });
                    };
                    match step(entry, level, reserved) {
                        Step::NotPresent => {}
                        Step::Reserved => fault(false),
                        Step::Table(pa) if pa.saturating_add(TABLE_SIZE) > end => fault(true),
                        Step::Table(pa) => next.push(Table { pa, va }),
                        Step::Page(pa, _) if level == PTE_LEVEL => {
                            reading.bottom_entries += 1;
                            reading.bottom_in_memory += u64::from(pa < end);
                        }
                        Step::Page(..) => {}
                    }
                }
            }
            *frontier = sample(next);
        }
    }
    let [four, five] = readings;
    PagingEvidence {
        dtb,
        unreadable,
        four,
        five,
    }
}

/// At most [`SAMPLE`] of `tables`, distinct, spread evenly over them (so
/// both halves of the address space are looked at).
fn sample(tables: Vec<Table>) -> Vec<Table> {
    let mut seen = FxHashSet::default();
    let distinct: Vec<Table> = tables.into_iter().filter(|t| seen.insert(t.pa)).collect();
    let stride = distinct.len().div_ceil(SAMPLE).max(1);
    distinct.into_iter().step_by(stride).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::tests::{setup, Tables, KERNEL, MIB, PRESENT_RW, PS, USER};
    use crate::vm::PageSize;

    /// What a kernel maps: text in 2 MiB pages (not 1 GiB aligned), a
    /// direct map in 1 GiB pages, data in 4 KiB pages; and a process's
    /// pages.
    fn map_like_linux(t: &mut Tables) {
        for i in 0..4 {
            t.map(
                KERNEL + 0x100_0000 + i * 0x20_0000,
                0x100_0000 + i * 0x20_0000,
                PageSize::Size2M,
            );
        }
        let direct = t.paging.sign_extend(0xff11_0000_0000_0000) | t.paging.upper_half();
        t.map(direct, 0, PageSize::Size1G);
        for i in 0..32 {
            t.map(
                KERNEL + 0x200_0000 + i * 0x1000,
                0x200_0000 + i * 0x1000,
                PageSize::Size4K,
            );
            t.map(USER + i * 0x1000, 0x40_0000 + i * 0x1000, PageSize::Size4K);
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: minutes of table reads (vm has no unsafe code)
    fn linux_like_tables_are_read_in_their_own_mode_in_five_batches() {
        for paging in Paging::ALL {
            let (mem, backend, _) = setup();
            let mut t = Tables::in_mode(backend.clone(), 48 * MIB, paging);
            map_like_linux(&mut t);
            let calls = backend.read_calls();
            let evidence = mem.block_on(detect_paging(&mem, t.dtb));
            assert_eq!(
                backend.read_calls() - calls,
                5,
                "{paging}: one batch a level"
            );
            assert_eq!(evidence.paging(), Ok(paging), "{evidence:#x?}");
            assert_eq!(evidence.unreadable, None);
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: minutes of table reads (vm has no unsafe code)
    fn a_4_level_reading_of_5_level_tables_never_faults_a_5_level_one_of_4_level_tables_does() {
        let (mem, backend, _) = setup();
        let mut five = Tables::in_mode(backend.clone(), 48 * MIB, Paging::FiveLevel);
        map_like_linux(&mut five);
        let e = mem.block_on(detect_paging(&mem, five.dtb));
        assert_eq!(e.four.fault, None);
        assert_eq!(e.five.fault, None);
        // Its page tables, read by the 4-level reading as pages of data.
        assert_eq!((e.five.bottom_entries, e.five.bottom_in_memory), (64, 64));
        let (mem, backend, _) = setup();
        let mut four = Tables::new(backend.clone(), 48 * MIB);
        map_like_linux(&mut four);
        let e = mem.block_on(detect_paging(&mem, four.dtb));
        assert_eq!(e.four.fault, None);
        let fault = e
            .five
            .fault
            .expect("a 5-level reading of 4-level tables faults");
        // The direct map's 1 GiB page, read as a PML4E with PS set.
        assert_eq!((fault.level, fault.entry & PS), (1, PS), "{fault}");
        assert!(fault.to_string().contains("reserved bits"), "{fault}");
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: minutes of table reads (vm has no unsafe code)
    fn tables_that_do_not_tell_are_said_not_to() {
        // 5-level tables of large pages only: no page table to show that
        // a 4-level reading would be wrong.
        let (mem, backend, _) = setup();
        let mut t = Tables::in_mode(backend.clone(), 48 * MIB, Paging::FiveLevel);
        t.map(KERNEL, 0x20_0000, PageSize::Size2M);
        let why = mem
            .block_on(detect_paging(&mem, t.dtb))
            .paging()
            .unwrap_err();
        assert!(
            why.contains("read as well in 4-level as in 5-level"),
            "{why}"
        );
        // Both readings fault: a PML5/PML4 entry with PS set at the top.
        backend.poke(t.dtb + 8, &(0x1000 | PRESENT_RW | PS).to_le_bytes());
        let why = mem
            .block_on(detect_paging(&mem, t.dtb))
            .paging()
            .unwrap_err();
        assert!(why.contains("fit neither mode"), "{why}");
        // A root past the end of memory.
        let e = mem.block_on(detect_paging(&mem, 100 * MIB));
        assert!(e.unreadable.is_some());
        assert!(e.paging().unwrap_err().contains("is unreadable"));
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: minutes of table reads (vm has no unsafe code)
    fn a_table_pointer_past_memory_is_a_fault() {
        let (mem, backend, _) = setup();
        let mut t = Tables::in_mode(backend.clone(), 48 * MIB, Paging::FiveLevel);
        map_like_linux(&mut t);
        // A PML4 entry of the 5-level tables pointing past memory: the
        // 4-level reading takes it for a PDPT entry leading to a table.
        let pml4 = t.entry(t.dtb) & 0x000f_ffff_ffff_f000;
        backend.poke(pml4 + 8 * 9, &((100 * MIB) | PRESENT_RW).to_le_bytes());
        let e = mem.block_on(detect_paging(&mem, t.dtb));
        let fault = e.five.fault.expect("a table past memory");
        assert!(fault.outside_memory && fault.level == 1, "{fault}");
        assert!(fault.to_string().contains("past the end of memory"));
    }
}
