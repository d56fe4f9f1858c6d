//! x86-64 4-level paging: what an entry says and what a walk finds.

use std::fmt;

use crate::PageError;

/// Bits 51..12 of an entry: the physical address of the next table or of
/// a 4 KiB page. Also the part of CR3 that holds the top table.
pub(crate) const ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;
/// Bits 51..21: the physical address of a 2 MiB page (bit 12 is PAT).
const ADDR_MASK_2M: u64 = 0x000f_ffff_ffe0_0000;
/// Bits 51..30: the physical address of a 1 GiB page.
const ADDR_MASK_1G: u64 = 0x000f_ffff_c000_0000;
/// Entry bit 0: present.
pub(crate) const PRESENT: u64 = 1 << 0;
/// Entry bit 7 in a PDPT or PD entry: maps a 1 GiB or 2 MiB page.
const PAGE_SIZE_BIT: u64 = 1 << 7;
/// Entries in a table.
pub(crate) const ENTRIES: usize = 512;
/// Size of a table.
pub(crate) const TABLE_SIZE: u64 = 0x1000;

/// The size of a page a translation ends in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PageSize {
    /// 4 KiB, mapped by a page table entry.
    Size4K,
    /// 2 MiB, mapped by a page directory entry.
    Size2M,
    /// 1 GiB, mapped by a page directory pointer table entry.
    Size1G,
}

impl PageSize {
    /// The size in bytes.
    pub fn bytes(self) -> u64 {
        match self {
            PageSize::Size4K => 1 << 12,
            PageSize::Size2M => 1 << 21,
            PageSize::Size1G => 1 << 30,
        }
    }
}

impl fmt::Display for PageSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PageSize::Size4K => "4K",
            PageSize::Size2M => "2M",
            PageSize::Size1G => "1G",
        })
    }
}

/// The four table levels, top first.
pub const LEVEL_NAMES: [&str; 4] = ["PML4E", "PDPTE", "PDE", "PTE"];

/// A virtual address translated: where it is and what mapped it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Translation {
    /// The virtual address.
    pub va: u64,
    /// The physical address it maps to.
    pub pa: u64,
    /// Size of the page it lies in.
    pub page_size: PageSize,
    /// The entry read at each level (PML4E, PDPTE, PDE, PTE); levels below
    /// a large page are `None`.
    pub entries: [Option<u64>; 4],
}

/// Why a virtual address has no translation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[error("{va:#x}: {reason}{}", level.map(|l| format!(" (at {})", LEVEL_NAMES[l])).unwrap_or_default())]
pub struct WalkError {
    /// The virtual address.
    pub va: u64,
    /// Why: [`PageError::NotMapped`], [`PageError::NonCanonical`], or the
    /// failure of reading a table.
    pub reason: PageError,
    /// The level where the walk stopped (0 = PML4), if it started.
    pub level: Option<usize>,
    /// The entries read before it stopped.
    pub entries: [Option<u64>; 4],
}

impl WalkError {
    /// Physical address of the entry the walk stopped at, for a walk from
    /// the root `dtb`: the entry that could not be read, or the one found
    /// not present. `None` when the walk did not start (a non-canonical
    /// address). Says where a failed translation failed.
    pub fn entry_address(&self, dtb: u64) -> Option<u64> {
        let level = self.level?;
        let table = match level {
            0 => dtb,
            _ => self.entries[level - 1]?,
        } & ADDR_MASK;
        Some(table + table_index(self.va, level) * 8)
    }
}

/// The first address of the upper canonical half (4-level paging); the
/// lower half ends at `LOWER_HALF_END`.
pub(crate) const UPPER_HALF: u64 = 0xffff_8000_0000_0000;
/// The end (exclusive) of the lower canonical half.
pub(crate) const LOWER_HALF_END: u64 = 0x0000_8000_0000_0000;

/// Whether bits 63..47 of `va` are all equal (4-level paging).
pub(crate) fn is_canonical(va: u64) -> bool {
    let top = (va as i64) >> 47;
    top == 0 || top == -1
}

/// The index of `va` in the table of `level` (0 = PML4).
pub(crate) fn table_index(va: u64, level: usize) -> u64 {
    (va >> (39 - 9 * level)) & 0x1ff
}

/// Bytes of virtual space one entry of `level` covers.
pub(crate) fn entry_span(level: usize) -> u64 {
    1 << (39 - 9 * level)
}

/// Makes a 48-bit address canonical (copies bit 47 upwards).
pub(crate) fn sign_extend(va: u64) -> u64 {
    (((va << 16) as i64) >> 16) as u64
}

/// What an entry of `level` leads to.
pub(crate) enum Step {
    /// The walk ends: not present.
    NotPresent,
    /// The next table, at this physical address.
    Table(u64),
    /// A page of this size at this physical address.
    Page(u64, PageSize),
}

/// Decodes `entry` found at `level`.
pub(crate) fn step(entry: u64, level: usize) -> Step {
    if entry & PRESENT == 0 {
        return Step::NotPresent;
    }
    match level {
        1 if entry & PAGE_SIZE_BIT != 0 => Step::Page(entry & ADDR_MASK_1G, PageSize::Size1G),
        2 if entry & PAGE_SIZE_BIT != 0 => Step::Page(entry & ADDR_MASK_2M, PageSize::Size2M),
        3 => Step::Page(entry & ADDR_MASK, PageSize::Size4K),
        _ => Step::Table(entry & ADDR_MASK),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_addresses_and_indices() {
        assert!(is_canonical(0x0000_7fff_ffff_ffff));
        assert!(is_canonical(0xffff_8000_0000_0000));
        assert!(!is_canonical(0x0000_8000_0000_0000));
        assert!(!is_canonical(0xfff7_8000_0000_0000));
        assert_eq!(sign_extend(0x0000_8000_0000_0000), 0xffff_8000_0000_0000);
        let va = 0xffff_ffff_8100_0000u64;
        assert_eq!([0, 1, 2, 3].map(|l| table_index(va, l)), [511, 510, 8, 0]);
    }

    #[test]
    fn a_walk_error_says_which_entry_it_stopped_at() {
        let va = 0xffff_ffff_8100_0000u64;
        let at_root = WalkError {
            va,
            reason: PageError::OutOfRange,
            level: Some(0),
            entries: [None; 4],
        };
        assert_eq!(
            at_root.entry_address(0x500_0fff),
            Some(0x500_0000 + 511 * 8)
        );
        let at_pde = WalkError {
            level: Some(2),
            entries: [Some(0x1003), Some(0x8000_0000_0000_2063), None, None],
            ..at_root
        };
        assert_eq!(at_pde.entry_address(0x500_0000), Some(0x2000 + 8 * 8));
        let unstarted = WalkError {
            level: None,
            ..at_root
        };
        assert_eq!(unstarted.entry_address(0x500_0000), None);
    }

    #[test]
    fn entries_decode_by_level() {
        let e = 0x8000_0000_1234_5067u64; // NX, present, address 0x12345000
        assert!(matches!(
            step(e, 3),
            Step::Page(0x1234_5000, PageSize::Size4K)
        ));
        assert!(matches!(step(e, 0), Step::Table(0x1234_5000)));
        let large = 0x0000_0000_4060_10e3u64; // PS, PAT bit 12 set
        assert!(matches!(
            step(large, 2),
            Step::Page(0x4060_0000, PageSize::Size2M)
        ));
        assert!(matches!(
            step(large, 1),
            Step::Page(0x4000_0000, PageSize::Size1G)
        ));
        assert!(matches!(step(large & !PRESENT, 2), Step::NotPresent));
    }
}
