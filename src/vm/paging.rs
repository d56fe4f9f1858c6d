//! x86-64 paging, 4-level and 5-level (LA57): what an entry says and what
//! a walk finds.
//!
//! Levels are numbered the same in both modes, by what their entries are:
//! 0 PML5E, 1 PML4E, 2 PDPTE, 3 PDE, 4 PTE. A 4-level walk starts at level
//! 1, a 5-level one at level 0; below the top the two are the same, so an
//! entry decodes by its level alone.

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
/// Entry bit 7 in a PDPT or PD entry: maps a 1 GiB or 2 MiB page. In a
/// PML5 or PML4 entry it is reserved; in a PT entry it is PAT.
pub(crate) const PAGE_SIZE_BIT: u64 = 1 << 7;
/// Bits 20..13 of a 2 MiB page's entry: reserved (bit 12 is PAT).
const RESERVED_2M: u64 = 0x001f_e000;
/// Bits 29..13 of a 1 GiB page's entry: reserved (bit 12 is PAT).
const RESERVED_1G: u64 = 0x3fff_e000;
/// The most physical-address bits x86-64 defines (MAXPHYADDR's ceiling).
pub const MAX_PHYSICAL_ADDRESS_BITS: u8 = 52;
/// Entries in a table.
pub(crate) const ENTRIES: usize = 512;
/// Size of a table.
pub(crate) const TABLE_SIZE: u64 = 0x1000;

/// Entry bit 1: writes allowed (R/W).
pub(crate) const WRITABLE: u64 = 1 << 1;
/// Entry bit 2: user-mode accesses allowed (U/S).
const USER: u64 = 1 << 2;
/// Entry bit 63: instruction fetches not allowed (XD/NX, with EFER.NXE).
pub(crate) const NO_EXECUTE: u64 = 1 << 63;

/// What a CPU allows through a mapping, as its entries say: every level
/// must allow a write or a user access, and any level can forbid
/// execution. Reading is always allowed where something is mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access {
    /// Every entry down the walk has R/W set.
    pub write: bool,
    /// No entry down the walk has NX set.
    pub execute: bool,
    /// Every entry down the walk has U/S set: user mode may touch it.
    pub user: bool,
}

impl Access {
    /// What the top of a walk allows, before any entry narrows it.
    pub const ALL: Access = Access {
        write: true,
        execute: true,
        user: true,
    };

    /// What is left of `self` through `entry`.
    pub(crate) fn through(self, entry: u64) -> Access {
        Access {
            write: self.write && entry & WRITABLE != 0,
            execute: self.execute && entry & NO_EXECUTE == 0,
            user: self.user && entry & USER != 0,
        }
    }
}

impl fmt::Display for Access {
    /// As `/proc/PID/maps` shows permissions: `rwx`, `r-x`, `r--`, with
    /// `u` or `k` for user or kernel-only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "r{}{}{}",
            if self.write { 'w' } else { '-' },
            if self.execute { 'x' } else { '-' },
            if self.user { 'u' } else { 'k' }
        )
    }
}

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

/// The table levels, top first: `LEVEL_NAMES[level]`. A 4-level walk
/// has no PML5E.
pub const LEVEL_NAMES: [&str; LEVELS] = ["PML5E", "PML4E", "PDPTE", "PDE", "PTE"];
/// Levels of 5-level paging, the most there are: the length of a walk's
/// entries.
pub const LEVELS: usize = 5;
/// The level of page table entries (4 KiB pages).
pub(crate) const PTE_LEVEL: usize = LEVELS - 1;

/// How many levels of tables translate an address: what CR4.LA57 says on
/// the target's CPU. The same table page means different things in the two
/// modes, so every walk needs the right one (see [`super::detect_paging`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Paging {
    /// 4-level paging: 48-bit virtual addresses, the top table a PML4.
    FourLevel,
    /// 5-level paging (LA57): 57-bit virtual addresses, the top table a
    /// PML5 above the PML4s.
    FiveLevel,
}

impl Paging {
    /// Both modes, 4-level first.
    pub const ALL: [Paging; 2] = [Paging::FourLevel, Paging::FiveLevel];

    /// The mode with this many levels (4 or 5).
    pub fn from_levels(levels: u8) -> Option<Paging> {
        match levels {
            4 => Some(Paging::FourLevel),
            5 => Some(Paging::FiveLevel),
            _ => None,
        }
    }

    /// Levels of tables: 4 or 5.
    pub fn levels(self) -> u8 {
        match self {
            Paging::FourLevel => 4,
            Paging::FiveLevel => 5,
        }
    }

    /// The level of the top table's entries (see the module's numbering).
    pub fn top_level(self) -> usize {
        LEVELS - usize::from(self.levels())
    }

    /// Bits of a virtual address: 48 or 57.
    pub fn virtual_bits(self) -> u32 {
        match self {
            Paging::FourLevel => 48,
            Paging::FiveLevel => 57,
        }
    }

    /// Whether the bits above the top translated bit all equal it.
    pub fn is_canonical(self, va: u64) -> bool {
        let top = (va as i64) >> (self.virtual_bits() - 1);
        top == 0 || top == -1
    }

    /// `va` made canonical: the top translated bit copied upwards.
    pub fn sign_extend(self, va: u64) -> u64 {
        let unused = 64 - self.virtual_bits();
        (((va << unused) as i64) >> unused) as u64
    }

    /// The end (exclusive) of the lower canonical half.
    pub fn lower_half_end(self) -> u64 {
        1 << (self.virtual_bits() - 1)
    }

    /// The first address of the upper canonical half.
    pub fn upper_half(self) -> u64 {
        self.lower_half_end().wrapping_neg()
    }

    /// The two canonical halves, as first and last byte.
    pub fn halves(self) -> [(u64, u64); 2] {
        [
            (0, self.lower_half_end() - 1),
            (self.upper_half(), u64::MAX),
        ]
    }
}

impl fmt::Display for Paging {
    /// `4-level` or `5-level`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-level", self.levels())
    }
}

/// A virtual address translated: where it is and what mapped it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Translation {
    /// The virtual address.
    pub va: u64,
    /// The physical address it maps to.
    pub pa: u64,
    /// Size of the page it lies in.
    pub page_size: PageSize,
    /// The entry read at each level, by [`LEVEL_NAMES`] (PML5E, PML4E,
    /// PDPTE, PDE, PTE); `None` above the top of a 4-level walk and below
    /// a large page.
    pub entries: [Option<u64>; LEVELS],
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
    /// The level where the walk stopped (by [`LEVEL_NAMES`]), if it
    /// started.
    pub level: Option<usize>,
    /// The entries read before it stopped, by level.
    pub entries: [Option<u64>; LEVELS],
}

impl WalkError {
    /// Physical address of the entry the walk stopped at, for a walk from
    /// the root `dtb`: the entry that could not be read, or the one found
    /// not present. `None` when the walk did not start (a non-canonical
    /// address). Says where a failed translation failed.
    pub fn entry_address(&self, dtb: u64) -> Option<u64> {
        let level = self.level?;
        // The top level's table is the root; below it, the entry above
        // names the table (a walk records every entry it passes).
        let table = match level.checked_sub(1).and_then(|above| self.entries[above]) {
            Some(entry) => entry,
            None => dtb,
        } & ADDR_MASK;
        Some(table + table_index(self.va, level) * 8)
    }
}

/// The index of `va` in the table of `level`.
pub(crate) fn table_index(va: u64, level: usize) -> u64 {
    (va >> (12 + 9 * (PTE_LEVEL - level))) & 0x1ff
}

/// Bytes of virtual space one entry of `level` covers.
pub(crate) fn entry_span(level: usize) -> u64 {
    1 << (12 + 9 * (PTE_LEVEL - level))
}

/// What an entry of `level` leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The walk ends: not present.
    NotPresent,
    /// The walk ends: a CPU would fault on this entry (a reserved bit is
    /// set), so it maps nothing.
    Reserved,
    /// The next table, at this physical address.
    Table(u64),
    /// A page of this size at this physical address.
    Page(u64, PageSize),
}

/// The bits of an entry that must be zero for `physical_bits` of physical
/// address (MAXPHYADDR): bits MAXPHYADDR..51. Bits 52..62 are ignored by
/// the CPU (software's own, or protection keys) and bit 63 is NX, which
/// every 64-bit OS turns on (EFER.NXE), so neither is reserved.
pub(crate) fn reserved_address_bits(physical_bits: u8) -> u64 {
    let bits = physical_bits.clamp(12, MAX_PHYSICAL_ADDRESS_BITS);
    ADDR_MASK & !((1u64 << bits) - 1)
}

/// Decodes `entry` found at `level`, as a CPU with `reserved` (from
/// [`reserved_address_bits`]) would: an entry with a reserved bit set is
/// [`Step::Reserved`], not a mapping.
pub(crate) fn step(entry: u64, level: usize, reserved: u64) -> Step {
    if entry & PRESENT == 0 {
        return Step::NotPresent;
    }
    if entry & reserved != 0 {
        return Step::Reserved;
    }
    let large = entry & PAGE_SIZE_BIT != 0;
    match level {
        // PS is reserved in a PML5E and a PML4E.
        0 | 1 if large => Step::Reserved,
        2 if large && entry & RESERVED_1G != 0 => Step::Reserved,
        2 if large => Step::Page(entry & ADDR_MASK_1G, PageSize::Size1G),
        3 if large && entry & RESERVED_2M != 0 => Step::Reserved,
        3 if large => Step::Page(entry & ADDR_MASK_2M, PageSize::Size2M),
        PTE_LEVEL => Step::Page(entry & ADDR_MASK, PageSize::Size4K),
        _ => Step::Table(entry & ADDR_MASK),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_addresses_and_indices() {
        let four = Paging::FourLevel;
        assert!(four.is_canonical(0x0000_7fff_ffff_ffff));
        assert!(four.is_canonical(0xffff_8000_0000_0000));
        assert!(!four.is_canonical(0x0000_8000_0000_0000));
        assert!(!four.is_canonical(0xfff7_8000_0000_0000));
        assert_eq!(
            four.sign_extend(0x0000_8000_0000_0000),
            0xffff_8000_0000_0000
        );
        assert_eq!(four.halves()[1].0, 0xffff_8000_0000_0000);
        let five = Paging::FiveLevel;
        // 5-level's direct map and user space past 47 bits.
        assert!(five.is_canonical(0xff11_0000_0000_0000));
        assert!(!four.is_canonical(0xff11_0000_0000_0000));
        assert!(five.is_canonical(0x00ff_ffff_ffff_ffff));
        assert!(!five.is_canonical(0x0100_0000_0000_0000));
        assert!(!five.is_canonical(0xfe00_0000_0000_0000));
        assert_eq!(
            five.sign_extend(0x0100_0000_0000_0000),
            0xff00_0000_0000_0000
        );
        assert_eq!(
            five.halves(),
            [(0, (1 << 56) - 1), (0xff00_0000_0000_0000, u64::MAX)]
        );
        assert_eq!((four.top_level(), five.top_level()), (1, 0));
        let va = 0xffff_ffff_8100_0000u64;
        assert_eq!(
            [0, 1, 2, 3, 4].map(|l| table_index(va, l)),
            [511, 511, 510, 8, 0]
        );
        assert_eq!(table_index(0xff11_0000_0000_0000, 0), 0x111);
        assert_eq!(entry_span(0), 1 << 48);
        assert_eq!(entry_span(PTE_LEVEL), 0x1000);
        assert_eq!(Paging::from_levels(5), Some(five));
        assert_eq!(Paging::from_levels(3), None);
        assert_eq!(five.to_string(), "5-level");
    }

    #[test]
    fn a_walk_error_says_which_entry_it_stopped_at() {
        let va = 0xffff_ffff_8100_0000u64;
        // A 4-level walk stopped at its top: the entry is in the root.
        let at_root = WalkError {
            va,
            reason: PageError::OutOfRange,
            level: Some(1),
            entries: [None; LEVELS],
        };
        assert_eq!(
            at_root.entry_address(0x500_0fff),
            Some(0x500_0000 + 511 * 8)
        );
        let at_pde = WalkError {
            level: Some(3),
            entries: [None, Some(0x1003), Some(0x8000_0000_0000_2063), None, None],
            ..at_root
        };
        assert_eq!(at_pde.entry_address(0x500_0000), Some(0x2000 + 8 * 8));
        // A 5-level walk stopped at its PML4E: the table its PML5E names.
        let at_pml4e = WalkError {
            level: Some(1),
            entries: [Some(0x7003), None, None, None, None],
            ..at_root
        };
        assert_eq!(at_pml4e.entry_address(0x500_0000), Some(0x7000 + 511 * 8));
        let unstarted = WalkError {
            level: None,
            ..at_root
        };
        assert_eq!(unstarted.entry_address(0x500_0000), None);
    }

    const ALL: u64 = 0; // no reserved address bits: MAXPHYADDR 52

    #[test]
    fn entries_decode_by_level() {
        let e = 0x8000_0000_1234_5067u64; // NX, present, address 0x12345000
        assert_eq!(step(e, 4, ALL), Step::Page(0x1234_5000, PageSize::Size4K));
        assert_eq!(step(e, 0, ALL), Step::Table(0x1234_5000));
        assert_eq!(step(e, 1, ALL), Step::Table(0x1234_5000));
        let large = 0x0000_0000_4060_10e3u64; // PS, PAT bit 12 set
        assert_eq!(
            step(large, 3, ALL),
            Step::Page(0x4060_0000, PageSize::Size2M)
        );
        assert_eq!(
            step(0x4000_10e3, 2, ALL),
            Step::Page(0x4000_0000, PageSize::Size1G)
        );
        assert_eq!(step(large & !PRESENT, 3, ALL), Step::NotPresent);
        // Bits 52..62 are the software's: ignored, not reserved.
        assert_eq!(
            step(0x7ff0_0000_0000_2063, 4, ALL),
            Step::Page(0x2000, PageSize::Size4K)
        );
    }

    #[test]
    fn entries_a_cpu_faults_on_are_reserved_not_mappings() {
        // PS in a PML5 or PML4 entry is a reserved bit.
        assert_eq!(step(0x1083, 0, ALL), Step::Reserved);
        assert_eq!(step(0x1083, 1, ALL), Step::Reserved);
        // A 1 GiB page with bits between PAT and its alignment (the
        // issue's example: it mapped a 1 GiB page at 0).
        assert_eq!(step(0x1234_5083, 2, ALL), Step::Reserved);
        assert_eq!(step(u64::MAX, 2, ALL), Step::Reserved);
        // A 2 MiB page likewise, for each of bits 13..20.
        for bit in 13..=20 {
            assert_eq!(step(0x20_0083 | 1 << bit, 3, ALL), Step::Reserved, "{bit}");
        }
        assert_eq!(
            step(0x20_0083 | 1 << 22, 3, ALL),
            Step::Page(0x60_0000, PageSize::Size2M)
        );
        // Address bits at and above MAXPHYADDR, at every level.
        let reserved = reserved_address_bits(46);
        assert_eq!(reserved, 0x000f_c000_0000_0000);
        for level in 0..LEVELS {
            let e = 1u64 << 46 | 0x1003;
            assert_eq!(step(e, level, reserved), Step::Reserved, "{level}");
            assert_ne!(step(e, level, ALL), Step::Reserved, "{level}");
            assert_ne!(step(1 << 45 | 0x1003, level, reserved), Step::Reserved);
        }
        // An all-ones 4 KiB entry only faults where MAXPHYADDR is below 52.
        assert_eq!(
            step(u64::MAX, 4, ALL),
            Step::Page(ADDR_MASK, PageSize::Size4K)
        );
        assert_eq!(step(u64::MAX, 4, reserved_address_bits(39)), Step::Reserved);
        assert_eq!(reserved_address_bits(MAX_PHYSICAL_ADDRESS_BITS), 0);
    }
}
