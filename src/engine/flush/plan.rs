//! A flush's plan: requests cut into page pieces, the legal window of
//! each entry, the rounds that keep program order, and which pieces share
//! an entry.

use super::*;

/// A page-bounded piece of a request.
#[derive(Clone, Copy)]
pub(super) struct Piece {
    pub(super) req: u32,
    pub(super) addr: u64,
    pub(super) offset: usize,
    pub(super) len: usize,
    /// Entry (group) that carries this piece, or `NO_GROUP`.
    pub(super) group: u32,
    pub(super) result: Result<(), PageError>,
}

pub(super) const NO_GROUP: u32 = u32::MAX;

/// What earlier requests of a flush ask of later ones on one page.
#[derive(Clone, Copy)]
pub(super) struct PageRounds {
    /// 1 + the last round with a read of this page: a write must come later.
    pub(super) reads_until: u32,
    /// The newest write span on this page, or `NO_SPAN`.
    pub(super) writes: u32,
}

/// Bytes `start..end` rewritten by a write in `round`; `next` is the older
/// span on the same page.
#[derive(Clone, Copy)]
pub(super) struct WriteSpan {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) round: u32,
    pub(super) next: u32,
}

pub(super) const NO_SPAN: u32 = u32::MAX;

/// Up to this many read pieces, pages are matched by a linear scan.
pub(super) const SMALL_FLUSH: usize = 16;

/// Page numbers mapped to an index (of a group, say) for one pass, emptied
/// in constant time: an open-addressed table whose slots count as empty
/// unless stamped with the current pass. Flushes look up a page once per
/// request or piece, and a general hash map's hashing, control bytes and
/// clearing showed in their profiles.
#[derive(Default)]
pub(super) struct PageIndex {
    /// (page, pass that stored it, index); pass 0 is never current.
    pub(super) slots: Vec<(u64, u32, u32)>,
    pub(super) pass: u32,
    /// The table used in this pass: its first `1 << bits` slots.
    pub(super) bits: u32,
}

impl PageIndex {
    /// Starts an empty index for up to `n` pages (kept at most half full;
    /// more than `n` would fill it, and `get_or_insert` would never
    /// return).
    pub(super) fn begin(&mut self, n: usize) {
        let want = (2 * n).next_power_of_two().max(16);
        if self.slots.len() < want {
            self.slots = vec![(0, 0, 0); want];
            self.pass = 0;
        }
        self.bits = want.trailing_zeros();
        self.pass = self.pass.wrapping_add(1);
        if self.pass == 0 {
            // Every stamp could be current again: unstamp them all.
            self.slots.fill((0, 0, 0));
            self.pass = 1;
        }
    }

    /// The index of `page` if it has one; else gives it `index`.
    #[inline]
    pub(super) fn get_or_insert(&mut self, page: u64, index: u32) -> Option<u32> {
        let mask = (1usize << self.bits) - 1;
        // Fibonacci hashing: the product's top bits mix every bit of the
        // page number.
        let mut i = (page.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - self.bits)) as usize;
        loop {
            let slot = &mut self.slots[i];
            if slot.1 != self.pass {
                *slot = (page, self.pass, index);
                return None;
            }
            if slot.0 == page {
                return Some(slot.2);
            }
            i = (i + 1) & mask;
        }
    }
}

/// One scatter entry: a legal window, read or written directly in a
/// request's buffer or through scratch.
#[derive(Clone, Copy)]
pub(super) struct Group {
    pub(super) addr: u64,
    pub(super) len: usize,
    /// Offset in `scratch`, or `None` for a direct entry into the single
    /// piece's request buffer.
    pub(super) scratch: Option<usize>,
    /// The piece of a direct entry (or the first piece of the group).
    pub(super) piece: u32,
    pub(super) result: Result<(), PageError>,
}

/// The smallest legal entry that covers `len` bytes at `addr` (which lie
/// inside one page), ending before the device's end where one can.
pub(super) fn window(shape: &Shape, addr: u64, len: usize) -> (u64, usize) {
    let mut start = addr & !shape.align_mask;
    let mut end = (addr + len as u64 + shape.align_mask) & !shape.align_mask;
    let min_len = shape.min_len as u64;
    if end - start < min_len {
        end = start + min_len;
        let page_start = addr & !shape.page_mask;
        let page_end = page_start + shape.page_mask + 1;
        // Padding past the device's end would fail bytes that a window
        // moved down reads: near the end of a memory whose size is not a
        // whole page.
        let limit = page_end.min(shape.end);
        if end > limit && addr + len as u64 <= limit && limit - page_start >= min_len {
            end = limit;
        } else if end > page_end {
            end = page_end;
        }
        start = start.min(end - min_len);
    }
    (start, (end - start) as usize)
}

/// A device's [`Limits`] with its page size and alignment as masks (both
/// are powers of two), since a flush divides by them for every piece.
pub(super) struct Shape {
    pub(super) page_mask: u64,
    pub(super) page_shift: u32,
    pub(super) align_mask: u64,
    pub(super) min_len: usize,
    /// The device's max address, aligned down: no legal entry that stays
    /// below the max address ends past it.
    pub(super) end: u64,
}

impl Shape {
    /// `None` when no legal entry can be cut: a page size or alignment
    /// that is not a power of two, or a longest entry shorter than the
    /// shortest or than the alignment.
    pub(super) fn new(limits: &Limits, max_address: u64) -> Option<Shape> {
        if !(limits.page_size.is_power_of_two() && limits.align.is_power_of_two()) {
            return None;
        }
        // Entries longer than `max_len` cannot be sent, so a device whose
        // longest entry is shorter than its page is cut as if its pages
        // were the largest power of two that fits in an entry: pieces,
        // windows and shared entries then never exceed it.
        let longest = u64::try_from(limits.max_len).ok()?.checked_ilog2()?;
        let page = limits.page_size.min(1 << longest);
        let align_mask = limits.align - 1;
        // The shortest entry the alignment allows.
        let min_len = (limits.min_len as u64).checked_add(align_mask)? & !align_mask;
        (min_len <= page && limits.align <= page).then(|| Shape {
            page_mask: page - 1,
            page_shift: page.trailing_zeros(),
            align_mask,
            min_len: min_len as usize,
            end: max_address & !align_mask,
        })
    }

    /// The number of the page holding `addr`.
    pub(super) fn page(&self, addr: u64) -> u64 {
        addr >> self.page_shift
    }

    /// Bytes from `addr` to the end of its page.
    pub(super) fn to_page_end(&self, addr: u64) -> u64 {
        self.page_mask + 1 - (addr & self.page_mask)
    }
}

impl Flusher {
    /// Cuts every request into page pieces; bytes past the device's end (one
    /// piece) or past the end of the address space fail here, without an
    /// entry.
    pub(super) fn cut_pieces(&mut self, shape: &Shape, max_address: u64) {
        self.pieces.clear();
        let mut failed = false;
        for (ri, req) in self.reqs.iter().enumerate() {
            let mut offset = 0usize;
            while offset < req.len {
                let piece = |addr, len, result| Piece {
                    req: ri as u32,
                    addr,
                    offset,
                    len,
                    group: NO_GROUP,
                    result,
                };
                let Some(addr) = req.addr.checked_add(offset as u64) else {
                    failed = true;
                    let rest = req.len - offset;
                    self.pieces
                        .push(piece(0, rest, Err(PageError::AddressOverflow)));
                    break;
                };
                let rest = req.len - offset;
                let to_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
                let (len, result) = if addr >= max_address {
                    // One piece up to the end of the address space, not one
                    // per page: a (mistaken) length of exabytes must not
                    // cost a piece per page before anything is read.
                    let to_wrap = to_usize((u64::MAX - addr).saturating_add(1));
                    failed = true;
                    (rest.min(to_wrap), Err(PageError::OutOfRange))
                } else {
                    let len = rest
                        .min(to_usize(shape.to_page_end(addr)))
                        .min(to_usize(max_address - addr));
                    (len, Err(PageError::NotIssued))
                };
                self.pieces.push(piece(addr, len, result));
                offset += len;
            }
        }
        self.any_failed |= failed;
    }

    /// Puts each request in the first round after every earlier request it
    /// conflicts with; returns the number of rounds.
    ///
    /// A write conflicts with an earlier write whose window (the bytes it
    /// rewrites, read-modify-write included) overlaps its own, and with any
    /// earlier read of its pages; a read conflicts with earlier writes whose
    /// windows overlap its bytes. Writes of a round run before its reads, so
    /// a read may share the round of the writes it must see.
    pub(super) fn assign_rounds(&mut self, shape: &Shape) -> u32 {
        self.pages.clear();
        self.write_spans.clear();
        let mut rounds = 1;
        let mut first_piece = 0;
        for (ri, req) in self.reqs.iter_mut().enumerate() {
            let end = self.pieces[first_piece..]
                .iter()
                .position(|p| p.req != ri as u32)
                .map_or(self.pieces.len(), |n| first_piece + n);
            let pieces = &self.pieces[first_piece..end];
            first_piece = end;
            let issued = || {
                pieces
                    .iter()
                    .filter(|p| p.result == Err(PageError::NotIssued))
            };
            let span = |p: &Piece| match req.kind {
                Kind::Write => {
                    let (start, len) = window(shape, p.addr, p.len);
                    (start, start + len as u64)
                }
                Kind::Read => (p.addr, p.addr + p.len as u64),
            };
            let mut round = 0;
            let mut sees_writes = false;
            for p in issued() {
                let (start, end) = span(p);
                let Some(page) = self.pages.get(&(shape.page(start))) else {
                    continue;
                };
                if req.kind == Kind::Write {
                    round = round.max(page.reads_until);
                }
                let mut at = page.writes;
                while let Some(w) = self.write_spans.get(at as usize) {
                    if w.start < end && start < w.end {
                        let after = if req.kind == Kind::Write {
                            w.round + 1
                        } else {
                            sees_writes = true;
                            w.round
                        };
                        round = round.max(after);
                    }
                    at = w.next;
                }
            }
            req.round = round;
            req.sees_writes = sees_writes;
            rounds = rounds.max(round + 1);
            for p in issued() {
                let (start, end) = span(p);
                let page = self.pages.entry(shape.page(start)).or_insert(PageRounds {
                    reads_until: 0,
                    writes: NO_SPAN,
                });
                match req.kind {
                    Kind::Read => page.reads_until = page.reads_until.max(round + 1),
                    Kind::Write => {
                        self.write_spans.push(WriteSpan {
                            start,
                            end,
                            round,
                            next: page.writes,
                        });
                        page.writes = (self.write_spans.len() - 1) as u32;
                    }
                }
            }
        }
        rounds
    }

    /// Adds an entry (group) for the read pieces `select` picks, pieces on
    /// the same page sharing one (not with groups already there: a round's
    /// windows are written back whole); returns whether any goes through
    /// scratch.
    pub(super) fn plan_reads(
        &mut self,
        shape: &Shape,
        select: impl Fn(&Piece, &[Req]) -> bool,
    ) -> bool {
        let first = self.groups.len();
        // Few pieces: a scan beats even an empty index.
        let small = self.pieces.len() <= SMALL_FLUSH;
        if !small {
            self.page_groups.begin(self.pieces.len());
        }
        let mut any_scratch = false;
        for (pi, p) in self.pieces.iter_mut().enumerate() {
            if !select(p, &self.reqs) {
                continue;
            }
            let pi = pi as u32;
            let (start, len) = window(shape, p.addr, p.len);
            let page = shape.page(start);
            // (Large flushes: one lookup, which maps a new page to the
            // group pushed below.)
            let shared = if small {
                self.groups[first..]
                    .iter()
                    .rposition(|g| shape.page(g.addr) == page)
                    .map(|i| (first + i) as u32)
            } else {
                self.page_groups
                    .get_or_insert(page, self.groups.len() as u32)
            };
            if let Some(gi) = shared {
                let g = &mut self.groups[gi as usize];
                let lo = g.addr.min(start);
                let hi = (g.addr + g.len as u64).max(start + len as u64);
                // Several pieces share this entry (it stays inside a page,
                // which no entry limit cuts): through scratch.
                g.scratch.get_or_insert(0);
                any_scratch = true;
                g.addr = lo;
                g.len = (hi - lo) as usize;
                p.group = gi;
                continue;
            }
            let gi = self.groups.len() as u32;
            let direct = start == p.addr && len == p.len;
            any_scratch |= !direct;
            self.groups.push(Group {
                addr: start,
                len,
                scratch: (!direct).then_some(0),
                piece: pi,
                result: Err(PageError::NotIssued),
            });
            p.group = gi;
        }
        any_scratch
    }

    /// Gives each group that goes through scratch its place there.
    pub(super) fn place_in_scratch(&mut self) {
        let mut scratch_len = 0usize;
        for g in &mut self.groups {
            if let Some(at) = &mut g.scratch {
                *at = scratch_len;
                scratch_len += g.len;
            }
        }
        if self.scratch.len() < scratch_len {
            self.scratch.resize(scratch_len, 0);
        }
    }

    /// Hands each read piece `select` picks its group's result and, from
    /// scratch, its bytes.
    pub(super) fn hand_reads(&mut self, select: impl Fn(&Piece, &[Req]) -> bool) {
        for p in &mut self.pieces {
            if !select(p, &self.reqs) {
                continue;
            }
            let g = &self.groups[p.group as usize];
            p.result = g.result;
            if let (Ok(()), Some(at)) = (g.result, g.scratch) {
                let from = at + (p.addr - g.addr) as usize;
                // SAFETY: the piece lies in its (read) request; nothing
                // else refers to it now.
                let dest = unsafe { self.reqs[p.req as usize].bytes_mut(p.offset, p.len) };
                dest.copy_from_slice(&self.scratch[from..from + p.len]);
            }
        }
    }
}
