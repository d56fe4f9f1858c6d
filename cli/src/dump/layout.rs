//! Where a dump puts what: the segments a reader sees (address, physical
//! address, permissions, file offset), the extents of the file that are
//! read from the target to fill them, and, after reading, the segments cut
//! to the bytes that were read.
//!
//! In an ELF dump, memory mapped at several virtual addresses is read and
//! written once: a later segment over physical memory already placed
//! points at the same file bytes (segments may share file offsets). So a
//! dump of an address space or a process holds each physical byte at most
//! once, however many times the tables map it: its data is no larger than
//! the distinct memory it maps, and only its headers grow with the count
//! of mappings.

use std::collections::BTreeMap;

use super::elf::{ELF_HEADER_LEN, PROGRAM_HEADER_LEN, SECTION_HEADER_LEN};
use super::PAGE;

/// A range to dump: `len` bytes at `addr` (the address a reader looks
/// them up at), physically contiguous from `pa` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Piece {
    pub addr: u64,
    /// Physical address of `addr`.
    pub pa: u64,
    pub len: u64,
    /// The segment's `p_flags`.
    pub flags: u32,
    /// The VMA (its index) of a process this piece is a part of, or `None`
    /// for linear memory (RAM, an address space's runs). A VMA's pieces
    /// read for the first time lie one after another in the file, so the
    /// VMA is one segment however its pages are scattered in RAM; its
    /// segments then show no physical address.
    pub vma: Option<u32>,
}

/// A segment of the file: `len` bytes a reader finds at `addr`, stored at
/// file offset `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Segment {
    pub addr: u64,
    /// Physical address of `addr`; of the whole segment only when it is
    /// linear (`vma` is `None`).
    pub pa: u64,
    pub len: u64,
    pub flags: u32,
    pub offset: u64,
    /// See [`Piece::vma`].
    pub vma: Option<u32>,
}

impl Segment {
    /// The physical address a reader may take the segment at (`p_paddr`):
    /// linear memory's; `None` for a process's, which is not linear.
    pub fn paddr(&self) -> Option<u64> {
        self.vma.is_none().then_some(self.pa)
    }
}

/// `len` bytes of the file at `offset`, read from physical memory at
/// `pa`: each byte of the file is read once, whatever number of segments
/// show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Extent {
    pub offset: u64,
    pub len: u64,
    pub pa: u64,
}

/// The file of a dump, before anything is read.
#[derive(Debug)]
pub(super) struct Layout {
    pub segments: Vec<Segment>,
    /// In file order.
    pub extents: Vec<Extent>,
    /// Program headers the space after the file header holds; a dump
    /// whose failed ranges cut its segments into more puts them at its end.
    pub header_slots: usize,
    /// Where the notes go (after the headers' room).
    pub note_offset: u64,
    /// The file's length when everything was read.
    pub size: u64,
    /// Segments that show bytes an earlier segment placed (memory mapped
    /// more than once), and how many bytes of address space they show.
    pub shared_segments: usize,
    pub shared_bytes: u64,
}

impl Layout {
    /// Bytes of memory the file holds (each read once).
    pub fn data_bytes(&self) -> u64 {
        self.extents.iter().map(|e| e.len).sum()
    }
}

/// Program headers reserved beyond the planned ones, for segments cut
/// by failed ranges: at least this many, or an eighth of those planned.
const SPARE_SLOTS: usize = 4096;

/// The ELF layout of `pieces` (in address order) with notes of `note_len`
/// bytes: the file header, room for the program headers, the notes, then
/// each piece's bytes at an offset congruent to its address modulo a page
/// (as `p_align` 0x1000 requires). Physical memory placed once is shared
/// by every later piece over it. `None` when the file would pass 2^64.
pub(super) fn elf(pieces: Vec<Piece>, note_len: u64) -> Option<Layout> {
    // (pa start) -> (pa end, offset from the data's start): the physical
    // memory placed.
    let mut placed: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    // Segments first, in address order, with whether each is new: a piece
    // over placed memory becomes segments at the placed offsets, and the
    // rest new segments to read.
    let mut parts: Vec<Segment> = Vec::with_capacity(pieces.len());
    let mut new: Vec<bool> = Vec::with_capacity(pieces.len());
    for p in pieces {
        let end = p.pa.checked_add(p.len)?;
        let mut at = p.pa;
        while at < end {
            // Placed memory holding `at`, or where the next placed begins.
            let holder_end = placed
                .range(..=at)
                .next_back()
                .map(|(_, &(e, _))| e)
                .filter(|&e| e > at);
            let (upto, is_new) = match holder_end {
                Some(e) => (e.min(end), false),
                None => {
                    let next = placed.range(at..).next().map_or(end, |(&s, _)| s);
                    (next.min(end), true)
                }
            };
            parts.push(Segment {
                addr: p.addr + (at - p.pa),
                pa: at,
                len: upto - at,
                flags: p.flags,
                offset: 0,
                vma: p.vma,
            });
            new.push(is_new);
            if is_new {
                // Placed now; its offset is given below.
                placed.insert(at, (upto, 0));
            }
            at = upto;
        }
    }
    // New memory placed in address order from the data's start (a page
    // boundary, so congruence holds wherever the data begins).
    let mut at = 0u64;
    let mut extents: Vec<Extent> = Vec::new();
    for (s, _) in parts.iter_mut().zip(&new).filter(|(_, &n)| n) {
        // The first place from `at` with offset ≡ address (mod a page).
        let o = (at - at % PAGE).checked_add(s.addr % PAGE)?;
        s.offset = if o < at { o.checked_add(PAGE)? } else { o };
        at = s.offset.checked_add(s.len)?;
        match extents.last_mut() {
            Some(e) if e.offset + e.len == s.offset && e.pa.checked_add(e.len) == Some(s.pa) => {
                e.len += s.len
            }
            _ => extents.push(Extent {
                offset: s.offset,
                len: s.len,
                pa: s.pa,
            }),
        }
        placed.insert(s.pa, (s.pa + s.len, s.offset));
    }
    // Shared segments learn the offsets of what they share.
    let mut shared_bytes = 0u64;
    for (s, _) in parts.iter_mut().zip(&new).filter(|(_, &n)| !n) {
        let (&start, &(_, offset)) = placed.range(..=s.pa).next_back()?;
        s.offset = offset + (s.pa - start);
        shared_bytes = shared_bytes.saturating_add(s.len);
    }
    drop(placed);
    let shared_segments = merge_continuing(&mut parts, &new);
    drop(new);
    let segments = parts;
    let header_slots = segments.len() + (segments.len() / 8).max(SPARE_SLOTS);
    let note_offset = (ELF_HEADER_LEN as u64)
        .checked_add((header_slots as u64).checked_mul(PROGRAM_HEADER_LEN as u64)?)?
        .checked_add(SECTION_HEADER_LEN as u64)?;
    let base = note_offset
        .checked_add(note_len)?
        .checked_next_multiple_of(PAGE)?;
    let mut segments = segments;
    for s in &mut segments {
        s.offset = s.offset.checked_add(base)?;
    }
    for e in &mut extents {
        e.offset = e.offset.checked_add(base)?;
    }
    Some(Layout {
        segments,
        extents,
        header_slots,
        note_offset,
        size: base.checked_add(at)?,
        shared_segments,
        shared_bytes,
    })
}

/// The raw layout of `pieces`: each at its distance from `base`, holes
/// (and failed bytes) zeros; `end` is the file's length.
pub(super) fn raw(pieces: &[Piece], base: u64, end: u64) -> Layout {
    let segments: Vec<Segment> = pieces
        .iter()
        .map(|p| Segment {
            addr: p.addr,
            pa: p.pa,
            len: p.len,
            flags: p.flags,
            offset: p.addr - base,
            vma: p.vma,
        })
        .collect();
    let extents = segments
        .iter()
        .map(|s| Extent {
            offset: s.offset,
            len: s.len,
            pa: s.pa,
        })
        .collect();
    Layout {
        segments,
        extents,
        header_slots: 0,
        note_offset: 0,
        size: end,
        shared_segments: 0,
        shared_bytes: 0,
    }
}

/// Merges, in place, each segment into the one before when it continues
/// it in address and file with the same permissions, and in physical
/// address too (linear memory) or within one VMA (a process's pieces);
/// `new` says which segments hold bytes of their own. Returns how many
/// of the merged segments show bytes placed for an earlier one.
fn merge_continuing(segments: &mut Vec<Segment>, new: &[bool]) -> usize {
    let mut kept = 0usize;
    let mut shared = 0;
    for (i, &is_new) in new.iter().enumerate().take(segments.len()) {
        let s = segments[i];
        if let Some(last) = kept.checked_sub(1).map(|k| &mut segments[k]) {
            let continues = last.addr.checked_add(last.len) == Some(s.addr)
                && last.offset + last.len == s.offset
                && last.flags == s.flags
                && match (last.vma, s.vma) {
                    (None, None) => last.pa + last.len == s.pa,
                    (Some(a), Some(b)) => a == b,
                    _ => false,
                };
            if continues {
                last.len += s.len;
                continue;
            }
        }
        segments[kept] = s;
        kept += 1;
        shared += usize::from(!is_new);
    }
    segments.truncate(kept);
    shared
}

/// `segments` cut to the file bytes in `read` (sorted, disjoint `(offset,
/// len)`): no segment shows a byte that was not read.
pub(super) fn cut_to_read(segments: &[Segment], read: &[(u64, u64)]) -> Vec<Segment> {
    let mut out = Vec::with_capacity(segments.len());
    for s in segments {
        for (from, len) in overlaps(s.offset, s.len, read) {
            out.push(Segment {
                addr: s.addr + from,
                pa: s.pa + from,
                len,
                offset: s.offset + from,
                ..*s
            });
        }
    }
    out
}

/// The parts of `offset..offset+len` inside `ranges` (sorted, disjoint
/// `(offset, len)`), as (distance from `offset`, length).
pub(super) fn overlaps(offset: u64, len: u64, ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let end = offset + len;
    // The first range that ends after `offset`.
    let first = ranges.partition_point(|&(o, l)| o + l <= offset);
    ranges[first..]
        .iter()
        .take_while(|&&(o, _)| o < end)
        .map(|&(o, l)| {
            let (a, b) = (o.max(offset), (o + l).min(end));
            (a - offset, b - a)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(addr: u64, pa: u64, len: u64, flags: u32) -> Piece {
        Piece {
            addr,
            pa,
            len,
            flags,
            vma: None,
        }
    }

    fn of_vma(vma: u32, addr: u64, pa: u64, len: u64) -> Piece {
        Piece {
            vma: Some(vma),
            ..piece(addr, pa, len, 6)
        }
    }

    fn segment(addr: u64, pa: u64, len: u64, flags: u32, offset: u64) -> Segment {
        Segment {
            addr,
            pa,
            len,
            flags,
            offset,
            vma: None,
        }
    }

    #[test]
    fn memory_mapped_twice_is_placed_once_and_shared() {
        // The direct map of 0x10000 bytes, then a text mapping of a part of
        // it, then memory of its own partly over the direct map's end.
        let direct = 0xffff_8880_0000_0000;
        let text = 0xffff_ffff_8100_0000;
        let pieces = vec![
            piece(direct, 0, 0x10000, 6),
            piece(text, 0x2000, 0x3000, 5),
            piece(text + 0x10_0000, 0xe000, 0x4000, 4),
        ];
        let l = elf(pieces, 0).unwrap();
        let base = l.segments[0].offset;
        assert_eq!(base % PAGE, 0);
        assert_eq!(l.segments[0].len, 0x10000);
        // Text points into the direct map's bytes; so do the third piece's
        // first 0x2000, and its other 0x2000 are new, placed right after
        // them: one segment.
        assert_eq!(
            l.segments[1..],
            [
                segment(text, 0x2000, 0x3000, 5, base + 0x2000),
                segment(text + 0x10_0000, 0xe000, 0x4000, 4, base + 0xe000),
            ]
        );
        assert_eq!(l.data_bytes(), 0x12000, "each physical byte read once");
        assert_eq!(
            l.extents,
            [Extent {
                offset: base,
                len: 0x12000,
                pa: 0
            }],
            "one read: the new bytes continue the first ones in RAM and file"
        );
        assert_eq!(l.size, base + 0x12000);
        assert_eq!((l.shared_segments, l.shared_bytes), (2, 0x5000));
    }

    #[test]
    fn offsets_are_congruent_to_addresses_and_headers_have_room() {
        let pieces = vec![
            piece(0x9c001, 0x9c001, 0x2002, 4),
            piece(0xa0ff8, 0xa0ff8, 0x10, 4),
            of_vma(0, 0x7f00_0000_0123, 0x5123, 0x10),
        ];
        let l = elf(pieces, 0x30).unwrap();
        assert_eq!(l.header_slots, 3 + SPARE_SLOTS);
        assert_eq!(
            l.note_offset,
            (64 + 56 * (3 + SPARE_SLOTS) + 64) as u64,
            "file header, program headers, a section header"
        );
        for s in &l.segments {
            assert_eq!(s.offset % PAGE, s.addr % PAGE, "{s:x?}");
            assert!(s.offset >= l.note_offset + 0x30);
        }
        assert_eq!(l.extents[2].pa, 0x5123);
        assert_eq!(l.segments[2].paddr(), None, "a process's memory");
        assert_eq!(l.segments[1].paddr(), Some(0xa0ff8));
    }

    #[test]
    fn segments_that_continue_each_other_merge_only_with_equal_permissions() {
        let pieces = vec![
            piece(0x1000, 0x5000, 0x1000, 6),
            piece(0x2000, 0x6000, 0x1000, 6),
            piece(0x3000, 0x7000, 0x1000, 4),
            piece(0x4000, 0x9000, 0x1000, 4),
        ];
        let l = elf(pieces, 0).unwrap();
        let shape: Vec<(u64, u64)> = l.segments.iter().map(|s| (s.addr, s.len)).collect();
        assert_eq!(
            shape,
            [(0x1000, 0x2000), (0x3000, 0x1000), (0x4000, 0x1000)]
        );
    }

    #[test]
    fn a_vma_scattered_in_ram_is_one_segment_and_a_page_mapped_again_points_back() {
        // VMA 0: three pages scattered in RAM, then an unmapped page, then
        // its first page's frame again. VMA 1 right after it, with the
        // same permissions: the second page's frame twice, then a page of
        // its own.
        let pieces = vec![
            of_vma(0, 0x10000, 0x9000, 0x1000),
            of_vma(0, 0x11000, 0x3000, 0x1000),
            of_vma(0, 0x12000, 0x7000, 0x1000),
            of_vma(0, 0x14000, 0x9000, 0x1000),
            of_vma(1, 0x15000, 0x3000, 0x1000),
            of_vma(1, 0x16000, 0x3000, 0x1000),
            of_vma(1, 0x17000, 0x4000, 0x1000),
        ];
        let l = elf(pieces, 0).unwrap();
        let base = l.segments[0].offset;
        let shape: Vec<(u64, u64, u64, Option<u32>)> = l
            .segments
            .iter()
            .map(|s| (s.addr, s.len, s.offset - base, s.vma))
            .collect();
        assert_eq!(
            shape,
            [
                (0x10000, 0x3000, 0, Some(0)),
                (0x14000, 0x1000, 0, Some(0)),
                (0x15000, 0x1000, 0x1000, Some(1)),
                (0x16000, 0x1000, 0x1000, Some(1)),
                (0x17000, 0x1000, 0x3000, Some(1)),
            ]
        );
        assert!(l.segments.iter().all(|s| s.paddr().is_none()));
        // Four frames, each read once, in four reads (none continues
        // another in RAM).
        assert_eq!(l.data_bytes(), 0x4000);
        let reads: Vec<(u64, u64)> = l.extents.iter().map(|e| (e.offset - base, e.pa)).collect();
        assert_eq!(
            reads,
            [
                (0, 0x9000),
                (0x1000, 0x3000),
                (0x2000, 0x7000),
                (0x3000, 0x4000)
            ]
        );
        assert_eq!((l.shared_segments, l.shared_bytes), (3, 0x3000));
        assert_eq!(l.size, base + 0x4000);
    }

    #[test]
    fn a_frame_mapped_a_million_times_is_one_page_of_data() {
        let n = 1u64 << 20;
        let pieces: Vec<Piece> = (0..n).map(|i| of_vma(0, i << 12, 0x5000, 0x1000)).collect();
        let l = elf(pieces, 0).unwrap();
        assert_eq!(l.segments.len() as u64, n);
        assert_eq!(l.data_bytes(), 0x1000);
        let first = l.segments[0].offset;
        assert!(l.segments.iter().all(|s| s.offset == first));
        // The file: its headers' room, then the one page.
        assert_eq!(l.size, first + 0x1000);
        assert!(l.size <= l.note_offset + PAGE + 0x1000);
        assert_eq!(l.header_slots as u64, n + n / 8);
    }

    #[test]
    fn cut_segments_show_only_bytes_read() {
        let s = segment(0x1000, 0x8000, 0x5000, 4, 0x3000);
        // Read: the first page, the third and half the fifth.
        let read = [(0x3000, 0x1000), (0x5000, 0x1000), (0x7000, 0x800)];
        let cut = cut_to_read(&[s], &read);
        let shape: Vec<(u64, Option<u64>, u64, u64)> = cut
            .iter()
            .map(|c| (c.addr, c.paddr(), c.len, c.offset))
            .collect();
        assert_eq!(
            shape,
            [
                (0x1000, Some(0x8000), 0x1000, 0x3000),
                (0x3000, Some(0xa000), 0x1000, 0x5000),
                (0x5000, Some(0xc000), 0x800, 0x7000),
            ]
        );
        assert!(cut_to_read(&[s], &[(0, 0x3000), (0x8000, 0x1000)]).is_empty());
    }
}
