//! The mapped ranges of an address space, found by walking every present
//! entry level by level.
//!
//! The walk is bounded by the distinct table pages it reaches, not by the
//! paths through them: a table page reached again at the same level (a
//! table shared by two entries, or one whose entries point back at
//! itself) is not walked again but reported once as an [`Alias`] of the
//! range it was first found under with the same access (a table reached
//! through a read-only entry and again through a writable one is walked
//! twice, as the two map with different permissions). So every table page is read and
//! decoded at most eight times per level (once per [`Access`]), and a walk records at most 512 items
//! (mappings, aliases, failed ranges) per table page it reads.

use std::collections::hash_map::Entry;
use std::ops::{Bound, RangeBounds, RangeInclusive};

use rustc_hash::FxHashMap;

use super::paging::{entry_span, step, Access, PageSize, Paging, Step, ENTRIES, LEVELS};
use super::AddressSpace;
use crate::{join_all, PageError};

/// Table pages read in one batch: bounds the memory a level's reads hold
/// (16 MiB), while a real process's tables still take one call a level.
const BATCH: usize = 4096;

/// A mapped range of virtual memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mapping {
    /// First virtual address.
    pub va: u64,
    /// Physical address of `va`.
    pub pa: u64,
    /// Bytes mapped; `va..va+size` maps to `pa..pa+size`.
    pub size: u64,
    /// Size of the pages of this range.
    pub page_size: PageSize,
    /// What the entries down the walk allow.
    pub access: Access,
}

/// A range of virtual memory mapped through a table page that the walk
/// already went through for an earlier range at the same level, with the
/// same access: it maps exactly what `same_as..same_as + size` maps, with
/// the same permissions, so its mappings are not
/// listed again. Linux's espfix area (one table page behind hundreds of
/// entries) is such a case; so is a table whose entries point at itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Alias {
    /// First virtual address.
    pub va: u64,
    /// Bytes of address space, from `va`.
    pub size: u64,
    /// First virtual address of the earlier range. That range was walked:
    /// no alias as large as this one holds it (a smaller one may, where a
    /// table inside it is shared too).
    pub same_as: u64,
    /// Physical address of the table page both ranges go through.
    pub table: u64,
}

/// A range of virtual memory that maps nothing a CPU could use: its page
/// tables could not be read, so what it maps is unknown
/// ([`FailedRange::reason`] is the read's), or an entry on the way has
/// reserved bits set, so a CPU would fault ([`PageError::ReservedBits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FailedRange {
    /// First virtual address.
    pub va: u64,
    /// Bytes of address space, from `va`.
    pub size: u64,
    /// Why.
    pub reason: PageError,
}

/// The mapped ranges of a part of an address space.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mappings {
    /// Mapped ranges, sorted; adjacent pages contiguous in both virtual and
    /// physical memory, of one page size, are merged. Ranges inside an
    /// alias are not listed.
    pub mappings: Vec<Mapping>,
    /// Ranges that map what an earlier range maps, sorted.
    pub aliases: Vec<Alias>,
    /// Ranges whose tables could not be read or hold reserved bits, sorted.
    pub failed: Vec<FailedRange>,
}

/// A table page to walk and the virtual range (first and last byte) it
/// maps.
struct TableRef {
    pa: u64,
    first: u64,
    last: u64,
    /// What the entries above it allow.
    access: Access,
}

impl AddressSpace {
    /// The mapped ranges within `range`, found by walking every present
    /// entry level by level: each level is one batch of table reads (per
    /// 4096 table pages). `..` is the whole address space, its last byte
    /// included.
    ///
    /// Each table page is walked at most once per level: a range whose
    /// table was already walked for an earlier range is an [`Alias`].
    pub async fn mappings(&self, range: impl RangeBounds<u64>) -> Mappings {
        let mut out = Mappings::default();
        // First and last byte: an exclusive end cannot name the last byte
        // of the address space.
        let Some(range) = inclusive(range) else {
            return out;
        };
        let (lo, hi) = (*range.start(), *range.end());
        let clip = |first: u64, last: u64| {
            let (first, last) = (first.max(lo), last.min(hi));
            (first <= last).then(|| (first, last - first + 1))
        };
        let mut pages: Vec<(u64, u64, PageSize, Access)> = Vec::new();
        // The first range each (table page, level) was walked for. Only
        // tables whose whole range is wanted are entered: the two at the
        // ends of a clipped range are walked for their part only.
        let mut walked: FxHashMap<(u64, usize, Access), u64> = FxHashMap::default();
        let mut tables = vec![TableRef {
            pa: self.dtb(),
            first: 0,
            last: u64::MAX,
            access: Access::ALL,
        }];
        let paging = self.paging();
        let top = paging.top_level();
        for level in top..LEVELS {
            let span = entry_span(level);
            let mut to_read = Vec::with_capacity(tables.len());
            for table in tables {
                if level > top && lo <= table.first && table.last <= hi {
                    match walked.entry((table.pa, level, table.access)) {
                        Entry::Occupied(first) => {
                            out.aliases.push(Alias {
                                va: table.first,
                                size: table.last - table.first + 1,
                                same_as: *first.get(),
                                table: table.pa,
                            });
                            continue;
                        }
                        Entry::Vacant(slot) => {
                            slot.insert(table.first);
                        }
                    }
                }
                to_read.push(table);
            }
            let mut next = Vec::new();
            for batch in to_read.chunks(BATCH) {
                let read = join_all(batch.iter().map(|t| self.table_page(t.pa))).await;
                for (table, page) in batch.iter().zip(read) {
                    let page = match page {
                        Ok(page) => page,
                        Err(reason) => {
                            // The top table maps both canonical halves.
                            let covered = if level == top {
                                paging.halves().to_vec()
                            } else {
                                vec![(table.first, table.last)]
                            };
                            for (first, last) in covered {
                                if let Some((va, size)) = clip(first, last) {
                                    out.failed.push(FailedRange { va, size, reason });
                                }
                            }
                            continue;
                        }
                    };
                    for (i, bytes) in page.chunks_exact(8).enumerate().take(ENTRIES) {
                        let entry = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
                        let va = if level == top {
                            paging.sign_extend(i as u64 * span)
                        } else {
                            table.first + i as u64 * span
                        };
                        let last = va + (span - 1);
                        if last < lo || va > hi {
                            continue;
                        }
                        match step(entry, level, self.inner.reserved) {
                            Step::NotPresent => {}
                            Step::Reserved => {
                                if let Some((va, size)) = clip(va, last) {
                                    out.failed.push(FailedRange {
                                        va,
                                        size,
                                        reason: PageError::ReservedBits,
                                    });
                                }
                            }
                            Step::Table(pa) => next.push(TableRef {
                                pa,
                                first: va,
                                last,
                                access: table.access.through(entry),
                            }),
                            Step::Page(pa, page_size) => {
                                pages.push((va, pa, page_size, table.access.through(entry)))
                            }
                        }
                    }
                }
            }
            tables = next;
        }
        // Large pages were found on upper levels first: sort, then merge.
        pages.sort_unstable_by_key(|&(va, ..)| va);
        for (va, pa, page_size, access) in pages {
            push_mapping(&mut out.mappings, va, pa, page_size, access, &range);
        }
        out.aliases.sort_unstable_by_key(|a| a.va);
        out.failed.sort_unstable_by_key(|f| f.va);
        out
    }
}

/// The bytes each of `roots` maps in its lower and its upper half, as a
/// CPU sees them (aliases counted as often as they are mapped), with each
/// distinct table page of a level read once for all roots: the cost is
/// the distinct table pages, however many paths lead to them. Each root
/// is read in its own mode; `space` only lends its reads (its own root and
/// mode are not used).
pub(crate) async fn mapped_bytes(space: &AddressSpace, roots: &[(u64, Paging)]) -> Vec<(u64, u64)> {
    /// A table page below the top level: the bytes its entries map
    /// themselves, and the tables they lead to (once per entry).
    struct Node {
        pa: u64,
        pages: u64,
        tables: Vec<u32>,
    }
    let mut nodes: Vec<Node> = Vec::new();
    let mut index: FxHashMap<(u64, usize), u32> = FxHashMap::default();
    let mut node_of = |nodes: &mut Vec<Node>, pa: u64, level: usize| -> u32 {
        *index.entry((pa, level)).or_insert_with(|| {
            nodes.push(Node {
                pa,
                pages: 0,
                tables: Vec::new(),
            });
            nodes.len() as u32 - 1
        })
    };
    let reserved = space.inner.reserved;
    // The top tables: the tables each half's entries lead to (a PML5 or
    // PML4 entry never maps a page). Nodes are numbered level by level
    // (a 5-level root's PML4s first), so that each level is one batch.
    let mut halves: Vec<[Vec<u32>; 2]> = vec![Default::default(); roots.len()];
    let mut level_start = 0;
    for level in 0..LEVELS {
        let level_end = nodes.len();
        let tops: Vec<usize> = (0..roots.len())
            .filter(|&r| roots[r].1.top_level() == level)
            .collect();
        for batch in tops.chunks(BATCH) {
            let read = join_all(batch.iter().map(|&r| space.table_page(roots[r].0))).await;
            for (&r, page) in batch.iter().zip(read) {
                let Ok(page) = page else { continue };
                for (i, bytes) in page.chunks_exact(8).enumerate().take(ENTRIES) {
                    let entry = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
                    if let Step::Table(pa) = step(entry, level, reserved) {
                        let child = node_of(&mut nodes, pa, level + 1);
                        halves[r][i / (ENTRIES / 2)].push(child);
                    }
                }
            }
        }
        for first in (level_start..level_end).step_by(BATCH) {
            let batch = first..level_end.min(first + BATCH);
            let read = join_all(nodes[batch.clone()].iter().map(|n| space.table_page(n.pa))).await;
            for (n, page) in batch.zip(read) {
                let Ok(page) = page else { continue };
                for bytes in page.chunks_exact(8).take(ENTRIES) {
                    let entry = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
                    match step(entry, level, reserved) {
                        Step::Page(_, size) => nodes[n].pages += size.bytes(),
                        Step::Table(pa) => {
                            let child = node_of(&mut nodes, pa, level + 1);
                            nodes[n].tables.push(child);
                        }
                        Step::NotPresent | Step::Reserved => {}
                    }
                }
            }
        }
        level_start = level_end;
    }
    // Tables below a node were added after it: add up from the last.
    let mut bytes = vec![0u64; nodes.len()];
    for n in (0..nodes.len()).rev() {
        bytes[n] = nodes[n].tables.iter().fold(nodes[n].pages, |sum, &c| {
            sum.saturating_add(bytes[c as usize])
        });
    }
    let total = |tables: &[u32]| {
        tables
            .iter()
            .fold(0u64, |sum, &c| sum.saturating_add(bytes[c as usize]))
    };
    halves
        .iter()
        .map(|[lower, upper]| (total(lower), total(upper)))
        .collect()
}

/// `range` as its first and last value; `None` when it is empty.
fn inclusive(range: impl RangeBounds<u64>) -> Option<RangeInclusive<u64>> {
    let first = match range.start_bound() {
        Bound::Included(&a) => a,
        Bound::Excluded(&a) => a.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let last = match range.end_bound() {
        Bound::Included(&b) => b,
        Bound::Excluded(&b) => b.checked_sub(1)?,
        Bound::Unbounded => u64::MAX,
    };
    (first <= last).then_some(first..=last)
}

/// Adds a page to the mappings, clipped to `range`, merging it with the
/// previous one when both are contiguous with the same page size and
/// access.
pub(super) fn push_mapping(
    mappings: &mut Vec<Mapping>,
    va: u64,
    pa: u64,
    page_size: PageSize,
    access: Access,
    range: &RangeInclusive<u64>,
) {
    let start = va.max(*range.start());
    let end = (va + (page_size.bytes() - 1)).min(*range.end());
    let (va, pa, size) = (start, pa + (start - va), end - start + 1);
    if let Some(last) = mappings.last_mut() {
        if last.page_size == page_size
            && last.access == access
            && last.va + last.size == va
            && last.pa + last.size == pa
        {
            last.size += size;
            return;
        }
    }
    mappings.push(Mapping {
        va,
        pa,
        size,
        page_size,
        access,
    });
}

#[cfg(test)]
mod tests;
