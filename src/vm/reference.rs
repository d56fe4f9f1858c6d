//! A plain page-table walker to check [`AddressSpace::mappings`] and
//! [`AddressSpace::translate`] against, for the unit tests and the fuzz
//! target `page_walk` (built with `--cfg fuzzing`); not part of the API.
//!
//! It follows every path (nothing shared, nothing remembered) and decodes
//! entries from the bit layout of the Intel SDM, written apart from
//! `paging::step`, so its cost is the number of paths: keep the present
//! entries of the tables it walks few.

use std::ops::RangeInclusive;

use super::mappings::push_mapping;
use super::{Access, AddressSpace, FailedRange, Mapping, Mappings, PageSize, Paging};
use crate::{MemBackend, PageError};

/// What a plain walk of every path through the tables finds.
pub struct Reference<'a> {
    backend: &'a MemBackend,
    memory_end: u64,
    physical_bits: u8,
    paging: Paging,
    lo: u64,
    hi: u64,
    /// Every page reached (virtual address, physical address, size, what
    /// the path allows), one per path, in address order.
    pub pages: Vec<(u64, u64, PageSize, Access)>,
    failed: Vec<FailedRange>,
}

/// An entry as a CPU reads it at one level.
enum Decoded {
    NotPresent,
    Reserved,
    Page(u64, PageSize),
    Table(u64),
}

/// Decodes `e` at `level` (0 = PML5, 1 = PML4, 4 = PT) where physical
/// addresses have `physical_bits` bits.
fn decode(e: u64, level: usize, physical_bits: u8) -> Decoded {
    if e & 1 == 0 {
        return Decoded::NotPresent;
    }
    let address = e & 0x000f_ffff_ffff_f000;
    let too_high = physical_bits < 52 && address >> physical_bits != 0;
    let large = e & 0x80 != 0;
    let (reserved, leaf) = match level {
        0 | 1 => (too_high || large, None),
        2 if large => (
            too_high || (e >> 13) & 0x1_ffff != 0,
            Some(PageSize::Size1G),
        ),
        3 if large => (too_high || (e >> 13) & 0xff != 0, Some(PageSize::Size2M)),
        4 => (too_high, Some(PageSize::Size4K)),
        _ => (too_high, None),
    };
    match leaf {
        _ if reserved => Decoded::Reserved,
        Some(size) => Decoded::Page(address & !(size.bytes() - 1), size),
        None => Decoded::Table(address),
    }
}

impl<'a> Reference<'a> {
    /// Walks every path from the table at `dtb`, read in `paging` mode, in
    /// the first `memory_end` bytes of `backend` (where physical addresses
    /// have `physical_bits` bits), within `range`.
    pub fn walk(
        backend: &'a MemBackend,
        memory_end: u64,
        physical_bits: u8,
        paging: Paging,
        dtb: u64,
        range: RangeInclusive<u64>,
    ) -> Self {
        let mut reference = Reference {
            backend,
            memory_end,
            physical_bits,
            paging,
            lo: *range.start(),
            hi: *range.end(),
            pages: Vec::new(),
            failed: Vec::new(),
        };
        let top = 5 - usize::from(paging.levels());
        reference.table(dtb, top, 0, Access::ALL);
        reference.pages.sort_unstable_by_key(|p| p.0);
        reference
    }

    /// The mappings (merged as `mappings` merges them) and the failed
    /// ranges, in the form of [`normalized`].
    pub fn mappings(&self) -> (Vec<Mapping>, Vec<FailedRange>) {
        let mut pages = Vec::new();
        for &(va, pa, size, access) in &self.pages {
            push_mapping(&mut pages, va, pa, size, access, &(self.lo..=self.hi));
        }
        normalized(pages, self.failed.clone())
    }

    /// The bytes mapped in the lower and in the upper half, counted once
    /// per path (the walk should cover the whole address space).
    pub fn mapped_bytes(&self) -> (u64, u64) {
        let half = |upper: bool| {
            self.pages
                .iter()
                .filter(|p| (p.0 >> 63 == 1) == upper)
                .map(|p| p.2.bytes())
                .sum::<u64>()
        };
        (half(false), half(true))
    }

    /// What a CPU makes of `va` through the tables at `dtb`: its physical
    /// address and page size, or why not and at which level.
    pub fn translate(
        &self,
        dtb: u64,
        va: u64,
    ) -> Result<(u64, PageSize), (PageError, Option<usize>)> {
        let bits = u32::from(self.paging.levels()) * 9 + 12;
        let top = va >> (bits - 1);
        if top != 0 && top != (1 << (65 - bits)) - 1 {
            return Err((PageError::NonCanonical, None));
        }
        let mut table = dtb;
        for level in 5 - usize::from(self.paging.levels())..5 {
            let fail = |reason| Err((reason, Some(level)));
            if table + 0x1000 > self.memory_end {
                return fail(PageError::OutOfRange);
            }
            let at = table + ((va >> (48 - 9 * level)) & 0x1ff) * 8;
            let e = u64::from_le_bytes(self.backend.bytes(at, 8).try_into().expect("8 bytes"));
            match decode(e, level, self.physical_bits) {
                Decoded::NotPresent => return fail(PageError::NotMapped),
                Decoded::Reserved => return fail(PageError::ReservedBits),
                Decoded::Page(pa, size) => return Ok((pa + (va & (size.bytes() - 1)), size)),
                Decoded::Table(pa) => table = pa,
            }
        }
        unreachable!("a level-4 entry is a page or not")
    }

    fn fail(&mut self, first: u64, last: u64, reason: PageError) {
        let (first, last) = (first.max(self.lo), last.min(self.hi));
        if first <= last {
            self.failed.push(FailedRange {
                va: first,
                size: last - first + 1,
                reason,
            });
        }
    }

    fn table(&mut self, pa: u64, level: usize, first: u64, above: Access) {
        let shift = 48 - 9 * level as u32;
        let top = level == 5 - usize::from(self.paging.levels());
        // The upper half starts where the top table's second half does.
        let upper = u64::MAX << (shift + 8);
        if pa + 0x1000 > self.memory_end {
            if top {
                self.fail(0, !upper, PageError::OutOfRange);
                self.fail(upper, u64::MAX, PageError::OutOfRange);
            } else {
                self.fail(
                    first,
                    first + ((1u64 << (shift + 9)) - 1),
                    PageError::OutOfRange,
                );
            }
            return;
        }
        let bytes = self.backend.bytes(pa, 0x1000);
        for i in 0..512u64 {
            let e = u64::from_le_bytes(bytes[i as usize * 8..][..8].try_into().unwrap());
            let va = match top {
                true if i >= 256 => upper | (i - 256) << shift,
                true => i << shift,
                false => first + (i << shift),
            };
            let last = va + ((1u64 << shift) - 1);
            if last < self.lo || va > self.hi {
                continue;
            }
            // R/W (bit 1) and U/S (bit 2) must be set at every level; XD
            // (bit 63) at any level forbids fetches.
            let access = Access {
                write: above.write && e & 2 != 0,
                execute: above.execute && e >> 63 == 0,
                user: above.user && e & 4 != 0,
            };
            match decode(e, level, self.physical_bits) {
                Decoded::NotPresent => {}
                Decoded::Reserved => self.fail(va, last, PageError::ReservedBits),
                Decoded::Page(pa, size) => self.pages.push((va, pa, size, access)),
                Decoded::Table(pa) => self.table(pa, level + 1, va, access),
            }
        }
    }
}

/// Every mapping and failure of `found` with its aliases written out in
/// full, as a plain walk would list them.
pub fn expand(found: &Mappings) -> (Vec<Mapping>, Vec<FailedRange>) {
    fn within(found: &Mappings, first: u64, last: u64, shift: u64, out: &mut Mappings) {
        for m in &found.mappings {
            let (a, b) = (m.va.max(first), (m.va + (m.size - 1)).min(last));
            if a <= b {
                out.mappings.push(Mapping {
                    va: a.wrapping_add(shift),
                    pa: m.pa + (a - m.va),
                    size: b - a + 1,
                    page_size: m.page_size,
                    access: m.access,
                });
            }
        }
        for f in &found.failed {
            let (a, b) = (f.va.max(first), (f.va + (f.size - 1)).min(last));
            if a <= b {
                out.failed.push(FailedRange {
                    va: a.wrapping_add(shift),
                    size: b - a + 1,
                    reason: f.reason,
                });
            }
        }
        for alias in &found.aliases {
            if first <= alias.va && alias.va + (alias.size - 1) <= last {
                let from = alias.same_as;
                let to = alias.va.wrapping_add(shift);
                within(
                    found,
                    from,
                    from + (alias.size - 1),
                    to.wrapping_sub(from),
                    out,
                );
            }
        }
    }
    let mut out = Mappings::default();
    within(found, 0, u64::MAX, 0, &mut out);
    normalized(out.mappings, out.failed)
}

/// Mappings and failures sorted, with neighbours that continue each other
/// merged: one form for two lists of the same memory.
pub fn normalized(
    mut mappings: Vec<Mapping>,
    mut failed: Vec<FailedRange>,
) -> (Vec<Mapping>, Vec<FailedRange>) {
    mappings.sort_unstable_by_key(|m| m.va);
    let mut merged: Vec<Mapping> = Vec::new();
    for m in mappings {
        match merged.last_mut() {
            Some(l)
                if l.page_size == m.page_size
                    && l.access == m.access
                    && l.va + l.size == m.va
                    && l.pa + l.size == m.pa =>
            {
                l.size += m.size
            }
            _ => merged.push(m),
        }
    }
    failed.sort_unstable_by_key(|f| f.va);
    let mut failures: Vec<FailedRange> = Vec::new();
    for f in failed {
        match failures.last_mut() {
            Some(l) if l.reason == f.reason && l.va.wrapping_add(l.size) == f.va => {
                l.size += f.size
            }
            _ => failures.push(f),
        }
    }
    (merged, failures)
}

/// The first alias that does not name a range walked before it, or whose
/// range an alias of its size or larger holds (so that writing the aliases
/// out might not end).
pub fn misplaced_alias(found: &Mappings) -> Option<super::Alias> {
    found.aliases.iter().copied().find(|a| {
        a.same_as >= a.va
            || found
                .aliases
                .iter()
                .any(|b| b.size >= a.size && b.va <= a.same_as && a.same_as - b.va < b.size)
    })
}

/// The first of `vas` that `space` translates otherwise than `reference`
/// (walking from `dtb`) does, as a message saying both answers.
pub async fn mistranslated(
    space: &AddressSpace,
    reference: &Reference<'_>,
    dtb: u64,
    vas: impl IntoIterator<Item = u64>,
) -> Option<String> {
    for va in vas {
        let got = space
            .translate(va)
            .await
            .map(|t| (t.pa, t.page_size))
            .map_err(|e| (e.reason, e.level));
        let want = reference.translate(dtb, va);
        if got != want {
            return Some(format!("{va:#x}: translated to {got:x?}, not {want:x?}"));
        }
    }
    None
}

/// The bytes each of `roots` maps in its lower and upper half, as the
/// crate counts them for `spaces` (see `mappings::mapped_bytes`).
pub async fn mapped_bytes(space: &AddressSpace, roots: &[(u64, Paging)]) -> Vec<(u64, u64)> {
    super::mappings::mapped_bytes(space, roots).await
}
