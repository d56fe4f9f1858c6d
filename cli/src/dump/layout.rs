//! Where a dump puts what: the segments a reader sees (address, physical
//! address, permissions, file offset), the extents of the file that are
//! read from the target to fill them, and, after reading, the segments cut
//! to the bytes that were read.
//!
//! In an ELF dump, memory mapped at several virtual addresses is read and
//! written once: a later segment over physical memory already placed
//! points at the same file bytes (segments may share file offsets). So a
//! dump of an address space is no larger than the distinct memory it
//! maps, however many times the tables map it.

use std::collections::BTreeMap;

use super::elf::{ELF_HEADER_LEN, PROGRAM_HEADER_LEN, SECTION_HEADER_LEN};
use super::PAGE;

/// A range to dump: `len` bytes at `addr` (the address a reader looks
/// them up at), found at physical address `pa` where that is linear.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Piece {
    pub addr: u64,
    /// Physical address of `addr`, the range being physically contiguous;
    /// `None` when it is not known to be (a process's memory).
    pub pa: Option<u64>,
    pub len: u64,
    /// The segment's `p_flags`.
    pub flags: u32,
}

/// A segment of the file: `len` bytes a reader finds at `addr`, stored at
/// file offset `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Segment {
    pub addr: u64,
    pub pa: Option<u64>,
    pub len: u64,
    pub flags: u32,
    pub offset: u64,
}

/// Where an extent's bytes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Source {
    /// Physical memory from this address on.
    Physical(u64),
    /// The dumped address space (a process's) from this address on.
    Virtual(u64),
}

/// `len` bytes of the file at `offset`, read from `source`: each byte of
/// the file is read once, whatever number of segments show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Extent {
    pub offset: u64,
    pub len: u64,
    pub source: Source,
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
}

impl Layout {
    /// Bytes of memory the file holds (each read once).
    pub fn data_bytes(&self) -> u64 {
        self.extents.iter().map(|e| e.len).sum()
    }
}

/// Program headers reserved beyond the planned ones, for segments cut
/// by failed ranges: at least this many, or as many as planned.
const SPARE_SLOTS: usize = 4096;

/// The ELF layout of `pieces` (in address order) with notes of `note_len`
/// bytes: the file header, room for the program headers, the notes, then
/// each piece's bytes at an offset congruent to its address modulo a page
/// (as `p_align` 0x1000 requires). Physical memory placed once is shared
/// by every later piece over it. `None` when the file would pass 2^64.
pub(super) fn elf(pieces: &[Piece], note_len: u64) -> Option<Layout> {
    // (pa start) -> (pa end, file offset): the physical memory placed.
    let mut placed: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    // Segments first, offsets of new data filled in below: a piece over
    // placed memory becomes segments at the placed offsets, and the rest
    // new segments to read.
    let mut parts: Vec<(Segment, bool)> = Vec::new();
    for p in pieces {
        let Some(pa) = p.pa else {
            parts.push((segment(p, 0, p.len, 0), true));
            continue;
        };
        let end = pa.checked_add(p.len)?;
        let mut at = pa;
        while at < end {
            // Placed memory holding `at`, or where the next placed begins.
            let holder_end = placed
                .range(..=at)
                .next_back()
                .map(|(_, &(e, _))| e)
                .filter(|&e| e > at);
            let (upto, new) = match holder_end {
                Some(e) => (e.min(end), false),
                None => {
                    let next = placed.range(at..).next().map_or(end, |(&s, _)| s);
                    (next.min(end), true)
                }
            };
            parts.push((segment(p, at - pa, upto - at, 0), new));
            if new {
                // Placed now; its offset is given below.
                placed.insert(at, (upto, 0));
            }
            at = upto;
        }
    }
    let planned = parts.len();
    let header_slots = planned + planned.max(SPARE_SLOTS);
    let note_offset = (ELF_HEADER_LEN as u64)
        .checked_add((header_slots as u64).checked_mul(PROGRAM_HEADER_LEN as u64)?)?
        .checked_add(SECTION_HEADER_LEN as u64)?;
    let mut at = note_offset.checked_add(note_len)?;
    let mut extents = Vec::new();
    for (s, new) in &mut parts {
        if !*new {
            continue;
        }
        // The first place from `at` with offset ≡ address (mod a page).
        let o = (at - at % PAGE).checked_add(s.addr % PAGE)?;
        s.offset = if o < at { o.checked_add(PAGE)? } else { o };
        at = s.offset.checked_add(s.len)?;
        extents.push(Extent {
            offset: s.offset,
            len: s.len,
            source: match s.pa {
                Some(pa) => Source::Physical(pa),
                None => Source::Virtual(s.addr),
            },
        });
        if let Some(pa) = s.pa {
            placed.insert(pa, (pa + s.len, s.offset));
        }
    }
    // Shared segments learn the offsets of what they share.
    let mut segments = Vec::with_capacity(parts.len());
    for (mut s, new) in parts {
        if !new {
            let pa = s.pa?;
            let (&start, &(_, offset)) = placed.range(..=pa).next_back()?;
            s.offset = offset + (pa - start);
        }
        segments.push(s);
    }
    merge_continuing(&mut segments);
    Some(Layout {
        segments,
        extents,
        header_slots,
        note_offset,
        size: at,
    })
}

/// The raw layout of `pieces`: each at its distance from `base`, holes
/// (and failed bytes) zeros; `end` is the file's length.
pub(super) fn raw(pieces: &[Piece], base: u64, end: u64) -> Layout {
    let segments: Vec<Segment> = pieces
        .iter()
        .map(|p| segment(p, 0, p.len, p.addr - base))
        .collect();
    let extents = segments
        .iter()
        .map(|s| Extent {
            offset: s.offset,
            len: s.len,
            source: match s.pa {
                Some(pa) => Source::Physical(pa),
                None => Source::Virtual(s.addr),
            },
        })
        .collect();
    Layout {
        segments,
        extents,
        header_slots: 0,
        note_offset: 0,
        size: end,
    }
}

/// The part of `p` from `from`, `len` bytes long, at file offset `offset`.
fn segment(p: &Piece, from: u64, len: u64, offset: u64) -> Segment {
    Segment {
        addr: p.addr + from,
        pa: p.pa.map(|pa| pa + from),
        len,
        flags: p.flags,
        offset,
    }
}

/// Merges each segment into the one before when it continues it in
/// address, physical address and file, with the same permissions. Pieces
/// with no physical address (a process's VMAs) stay apart: each is one
/// VMA.
fn merge_continuing(segments: &mut Vec<Segment>) {
    let mut merged: Vec<Segment> = Vec::with_capacity(segments.len());
    for s in segments.drain(..) {
        if let Some(last) = merged.last_mut() {
            let continues = last.addr.checked_add(last.len) == Some(s.addr)
                && last.offset + last.len == s.offset
                && last.flags == s.flags
                && matches!((last.pa, s.pa), (Some(a), Some(b)) if a + last.len == b);
            if continues {
                last.len += s.len;
                continue;
            }
        }
        merged.push(s);
    }
    *segments = merged;
}

/// `segments` cut to the file bytes in `read` (sorted, disjoint `(offset,
/// len)`): no segment shows a byte that was not read.
pub(super) fn cut_to_read(segments: &[Segment], read: &[(u64, u64)]) -> Vec<Segment> {
    let mut out = Vec::new();
    for s in segments {
        for (from, len) in overlaps(s.offset, s.len, read) {
            out.push(Segment {
                addr: s.addr + from,
                pa: s.pa.map(|pa| pa + from),
                len,
                flags: s.flags,
                offset: s.offset + from,
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
            pa: Some(pa),
            len,
            flags,
        }
    }

    #[test]
    fn memory_mapped_twice_is_placed_once_and_shared() {
        // The direct map of 0x10000 bytes, then a text mapping of a part of
        // it, then memory of its own partly over the direct map's end.
        let direct = 0xffff_8880_0000_0000;
        let text = 0xffff_ffff_8100_0000;
        let pieces = [
            piece(direct, 0, 0x10000, 6),
            piece(text, 0x2000, 0x3000, 5),
            piece(text + 0x10_0000, 0xe000, 0x4000, 4),
        ];
        let l = elf(&pieces, 0).unwrap();
        let base = l.segments[0].offset;
        assert_eq!(l.segments[0].len, 0x10000);
        // Text points into the direct map's bytes; so do the third piece's
        // first 0x2000, and its other 0x2000 are new, placed right after
        // them: one segment.
        assert_eq!(
            l.segments[1..],
            [
                Segment {
                    addr: text,
                    pa: Some(0x2000),
                    len: 0x3000,
                    flags: 5,
                    offset: base + 0x2000
                },
                Segment {
                    addr: text + 0x10_0000,
                    pa: Some(0xe000),
                    len: 0x4000,
                    flags: 4,
                    offset: base + 0xe000
                },
            ]
        );
        assert_eq!(l.data_bytes(), 0x12000, "each physical byte read once");
        assert_eq!(
            l.extents.iter().map(|e| e.source).collect::<Vec<_>>(),
            [Source::Physical(0), Source::Physical(0x10000)]
        );
        assert_eq!(l.size, base + 0x12000);
    }

    #[test]
    fn offsets_are_congruent_to_addresses_and_headers_have_room() {
        let pieces = [
            piece(0x9c001, 0x9c001, 0x2002, 4),
            piece(0xa0ff8, 0xa0ff8, 0x10, 4),
            Piece {
                addr: 0x7f00_0000_0123,
                pa: None,
                len: 0x10,
                flags: 4,
            },
        ];
        let l = elf(&pieces, 0x30).unwrap();
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
        assert_eq!(l.extents[2].source, Source::Virtual(0x7f00_0000_0123));
        assert_eq!(l.segments[2].pa, None);
    }

    #[test]
    fn segments_that_continue_each_other_merge_only_with_equal_permissions() {
        let pieces = [
            piece(0x1000, 0x5000, 0x1000, 6),
            piece(0x2000, 0x6000, 0x1000, 6),
            piece(0x3000, 0x7000, 0x1000, 4),
            piece(0x4000, 0x9000, 0x1000, 4),
        ];
        let l = elf(&pieces, 0).unwrap();
        let shape: Vec<(u64, u64)> = l.segments.iter().map(|s| (s.addr, s.len)).collect();
        assert_eq!(
            shape,
            [(0x1000, 0x2000), (0x3000, 0x1000), (0x4000, 0x1000)]
        );
    }

    #[test]
    fn cut_segments_show_only_bytes_read() {
        let s = Segment {
            addr: 0x1000,
            pa: Some(0x8000),
            len: 0x5000,
            flags: 4,
            offset: 0x3000,
        };
        // Read: the first page, the third and half the fifth.
        let read = [(0x3000, 0x1000), (0x5000, 0x1000), (0x7000, 0x800)];
        let cut = cut_to_read(&[s], &read);
        let shape: Vec<(u64, Option<u64>, u64, u64)> = cut
            .iter()
            .map(|c| (c.addr, c.pa, c.len, c.offset))
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
