//! A flush's device calls: whole requests straight into their buffers,
//! grouped windows through scratch, writes, each in as few calls as the
//! device's entry limit allows.

use super::*;
use crate::engine::request::lent::LentBuffer;

impl Flusher {
    /// The usual flush, planned in one pass: reads only, each a legal entry
    /// of its own (one page, below the device's end, aligned) on a page no
    /// other request reads, so each goes to the device as it is, straight
    /// into its buffer. Returns the calls made, or `None`, having sent
    /// nothing, when some request needs pieces, windows or shared entries.
    pub(super) fn read_direct(
        &mut self,
        backend: &dyn Backend,
        shape: &Shape,
        max_address: u64,
        max_entries: usize,
    ) -> Option<usize> {
        if self.records {
            return None;
        }
        // Few requests: a scan beats even an empty index.
        let small = self.reqs.len() <= SMALL_FLUSH;
        if !small {
            self.page_groups.begin(self.reqs.len());
        }
        let mut entries = std::mem::take(&mut self.read_entries);
        for (ri, req) in self.reqs.iter().enumerate() {
            let len = req.len as u64;
            let page = shape.page(req.addr);
            let legal = req.kind == Kind::Read
                && req.len >= shape.min_len.max(1)
                && (req.addr | len) & shape.align_mask == 0
                && len <= shape.to_page_end(req.addr)
                && req
                    .addr
                    .checked_add(len)
                    .is_some_and(|end| end <= max_address);
            let alone = legal
                && if small {
                    !self.reqs[..ri].iter().any(|r| shape.page(r.addr) == page)
                } else {
                    self.page_groups.get_or_insert(page, 0).is_none()
                };
            if !alone {
                entries.clear();
                self.read_entries = entries;
                return None;
            }
            // SAFETY: as in `read_groups`; the entry is exactly the
            // request's (lent) buffer, which no other entry overlaps.
            let buf = unsafe { req.buf.whole_mut() };
            entries.push(ScatterEntry::new(req.addr, buf));
        }
        let calls = self.read(backend, &mut entries, max_entries);
        for (ri, e) in entries.iter().enumerate() {
            if let Err(reason) = e.result {
                self.fail_whole(ri, reason);
            }
        }
        entries.clear();
        self.read_entries = entries;
        Some(calls)
    }

    /// Runs the reads of `round` (the only round when the flush has no
    /// `writes`) not already sent with the windows: pieces on the same
    /// page share an entry.
    pub(super) fn run_reads(
        &mut self,
        backend: &dyn Backend,
        shape: &Shape,
        max_entries: usize,
        round: u32,
        writes: bool,
    ) -> usize {
        // Without writes every piece still to issue is in the one round.
        let in_round = move |p: &Piece, reqs: &[Req]| {
            p.result == Err(PageError::NotIssued)
                && (!writes || {
                    let req = &reqs[p.req as usize];
                    req.kind == Kind::Read && req.round == round
                })
        };
        self.groups.clear();
        let any_scratch = self.plan_reads(shape, in_round);
        if self.groups.is_empty() {
            return 0;
        }
        if any_scratch {
            self.place_in_scratch();
        }
        let (calls, failed) = self.read_groups(backend, max_entries);
        self.any_failed |= failed;
        if !(any_scratch || self.any_failed || self.records) {
            // Every piece was read in place, whole, and no result will be
            // collected (see `run`): nothing to hand back.
            return calls;
        }
        self.hand_reads(in_round);
        calls
    }

    /// Reads `entries` in calls of at most `max_entries`; returns the
    /// calls. A device that prefers address order gets them sorted by
    /// address (entries of one flush never overlap, so their order is
    /// free); each result stays with its entry.
    pub(super) fn read(
        &mut self,
        backend: &dyn Backend,
        entries: &mut [ScatterEntry<'static>],
        max_entries: usize,
    ) -> usize {
        let in_order = self.geometry.is_some_and(|g| g.address_order);
        if !in_order || entries.windows(2).all(|w| w[0].addr <= w[1].addr) {
            return read_in_calls(backend, entries, max_entries);
        }
        self.order_keys.clear();
        let keys = entries.iter().enumerate().map(|(i, e)| (e.addr, i as u32));
        self.order_keys.extend(keys);
        self.order_keys.sort_unstable();
        let mut sorted = std::mem::take(&mut self.sorted_entries);
        for &(addr, i) in &self.order_keys {
            let buf = LentBuffer::of_mut(entries[i as usize].buf);
            // SAFETY: the entry's buffer, lent to `sorted`, which nothing
            // else touches until `sorted` is cleared below (the unsorted
            // entry only gets its result back).
            let buf = unsafe { buf.whole_mut() };
            sorted.push(ScatterEntry::new(addr, buf));
        }
        let calls = read_in_calls(backend, &mut sorted, max_entries);
        for (e, &(_, i)) in sorted.iter().zip(&self.order_keys) {
            entries[i as usize].result = e.result;
        }
        sorted.clear();
        self.sorted_entries = sorted;
        calls
    }

    /// Reads every group, at most `max_entries` per call; returns the
    /// number of calls and whether any group failed.
    pub(super) fn read_groups(
        &mut self,
        backend: &dyn Backend,
        max_entries: usize,
    ) -> (usize, bool) {
        let mut entries = std::mem::take(&mut self.read_entries);
        // Scratch lent once for every window: indexing it per group would
        // reborrow all of it mutably and invalidate the windows already
        // handed to entries (Miri, Stacked Borrows).
        let scratch_len = self.scratch.len();
        let scratch = LentBuffer::of_vec(&mut self.scratch, scratch_len);
        for g in &self.groups {
            let (buf, offset) = match g.scratch {
                Some(at) => (scratch, at),
                None => {
                    // A direct group is exactly its piece.
                    let p = &self.pieces[g.piece as usize];
                    (self.reqs[p.req as usize].buf, p.offset)
                }
            };
            // SAFETY: each group's window lies inside its buffer (scratch
            // was sized to hold every window; a direct window is exactly
            // its piece, in its request's lent buffer), windows never
            // overlap, and neither scratch nor any request buffer is
            // touched or moved until `entries` is cleared below. The
            // `'static` never escapes this function.
            let buf = unsafe { buf.bytes_mut(offset, g.len) };
            entries.push(ScatterEntry::new(g.addr, buf));
        }
        let calls = self.read(backend, &mut entries, max_entries);
        let mut failed = false;
        for (g, e) in self.groups.iter_mut().zip(&entries) {
            g.result = e.result;
            failed |= e.result.is_err();
        }
        entries.clear();
        self.read_entries = entries;
        (calls, failed)
    }

    /// Runs the writes of `round`. Pieces the device cannot take as they
    /// are first read their legal window, are patched, and are written
    /// whole.
    pub(super) fn run_writes(
        &mut self,
        backend: &dyn Backend,
        shape: &Shape,
        max_entries: usize,
        round: u32,
        read_only: bool,
        stats: &mut FlushStats,
    ) -> usize {
        self.order.clear();
        for (i, p) in self.pieces.iter_mut().enumerate() {
            let req = &self.reqs[p.req as usize];
            if req.kind == Kind::Write
                && req.round == round
                && p.result == Err(PageError::NotIssued)
            {
                if read_only {
                    p.result = Err(PageError::ReadOnly);
                } else {
                    self.order.push(i as u32);
                }
            }
        }
        if self.order.is_empty() {
            return 0;
        }
        // Windows of partial writes, read first (in one call).
        self.groups.clear();
        for &pi in &self.order {
            let p = &mut self.pieces[pi as usize];
            let (start, len) = window(shape, p.addr, p.len);
            if start != p.addr || len != p.len {
                p.group = self.groups.len() as u32;
                self.groups.push(Group {
                    addr: start,
                    len,
                    scratch: Some(0),
                    piece: pi,
                    result: Err(PageError::NotIssued),
                });
            } else {
                p.group = NO_GROUP;
            }
        }
        let windows = self.groups.len();
        // Round 0's reads that no write of the flush touches need not
        // wait for its writes: they share the windows' call, where a
        // call after the writes would be one more.
        let unseeing = |p: &Piece, reqs: &[Req]| {
            let req = &reqs[p.req as usize];
            p.result == Err(PageError::NotIssued)
                && req.kind == Kind::Read
                && req.round == 0
                && !req.sees_writes
        };
        let early = round == 0 && windows > 0;
        if early {
            self.plan_reads(shape, unseeing);
        }
        if !self.groups.is_empty() {
            self.place_in_scratch();
            let (calls, failed) = self.read_groups(backend, max_entries);
            stats.read_calls += calls;
            self.any_failed |= failed;
        }
        if early {
            self.hand_reads(unseeing);
        }
        for g in &self.groups[..windows] {
            let p = &self.pieces[g.piece as usize];
            if g.result.is_ok() {
                let at = g.scratch.unwrap_or(0) + (p.addr - g.addr) as usize;
                // SAFETY: the piece lies in its request.
                let src = unsafe { self.reqs[p.req as usize].bytes(p.offset, p.len) };
                self.scratch[at..at + p.len].copy_from_slice(src);
            }
        }
        // The writes: whole pieces from the request, patched windows from
        // scratch.
        let mut entries = std::mem::take(&mut self.write_entries);
        let mut sent = std::mem::take(&mut self.order);
        sent.retain(|&pi| {
            let p = &mut self.pieces[pi as usize];
            if p.group != NO_GROUP {
                let g = &self.groups[p.group as usize];
                if let Err(e) = g.result {
                    p.result = Err(e);
                    return false;
                }
            }
            true
        });
        for &pi in &sent {
            let p = &self.pieces[pi as usize];
            let (addr, buf, offset, len) = if p.group == NO_GROUP {
                let req = &self.reqs[p.req as usize];
                (p.addr, req.buf, p.offset, p.len)
            } else {
                let g = &self.groups[p.group as usize];
                let scratch = LentBuffer::of(&self.scratch);
                (g.addr, scratch, g.scratch.unwrap_or(0), g.len)
            };
            // SAFETY: the range lies in its buffer (the piece in its
            // request's lent buffer, the window in scratch), and as in
            // `read_groups` neither is written nor moved until `entries` is
            // cleared below.
            let data = unsafe { buf.bytes(offset, len) };
            entries.push(WriteEntry::new(addr, data));
        }
        let mut calls = 0;
        for chunk in entries.chunks_mut(max_entries) {
            backend.write_scatter_checked(chunk);
            calls += 1;
        }
        for (&pi, e) in sent.iter().zip(&entries) {
            self.pieces[pi as usize].result = e.result;
        }
        entries.clear();
        self.write_entries = entries;
        self.order = sent;
        calls
    }
}

/// Reads `entries` in calls of at most `max_entries`; returns the calls.
pub(super) fn read_in_calls(
    backend: &dyn Backend,
    entries: &mut [ScatterEntry],
    max_entries: usize,
) -> usize {
    let mut calls = 0;
    for chunk in entries.chunks_mut(max_entries) {
        backend.read_scatter_checked(chunk);
        calls += 1;
    }
    calls
}
