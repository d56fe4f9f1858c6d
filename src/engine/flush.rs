//! One flush: everything queued goes to the device in as few scatter calls
//! as program order allows.
//!
//! Requests are cut into page pieces. Pieces the device cannot take as
//! they are (too small, unaligned) read a legal window into a scratch
//! buffer. Read pieces on the same page share one entry, so a page needed
//! twice is read once. A write and a later access of the same page keep
//! their order through rounds: each round runs the reads that patch
//! partial writes, then the writes, then the reads, and a request goes in
//! the first round that keeps it after every conflicting earlier request.
//! Reads of the first round that no write touches go in the call that
//! reads the windows, when there is one. Without writes there is one round
//! and one read call (more only when the device's entry limit is
//! exceeded).

use rustc_hash::FxHashMap;

use super::outcome::{Failure, Fragment};
use super::queue::{Kind, Queue, Req, Staging, State};
use crate::backend::{Backend, EntryRule, Limits, PageError, ScatterEntry, WriteEntry};

// A request of this flush (`Req`, queued in the form the flush takes). Its
// buffer is lent for the flush: an engine slot's buffer (which stays in the
// slot: an in-flight slot's buffer is touched by nobody else), a scope's,
// or a synchronous caller's.
impl Req {
    /// The request's bytes `offset..offset + len`, for reading.
    ///
    /// SAFETY: the range lies in the request, whose buffer is lent.
    unsafe fn bytes(&self, offset: usize, len: usize) -> &[u8] {
        std::slice::from_raw_parts(self.ptr.add(offset), len)
    }

    /// The same, for writing (reads only).
    ///
    /// SAFETY: as `bytes`, and no other reference to the range is alive.
    #[allow(clippy::mut_from_ref)]
    unsafe fn bytes_mut(&self, offset: usize, len: usize) -> &mut [u8] {
        debug_assert_eq!(self.kind, Kind::Read);
        std::slice::from_raw_parts_mut(self.ptr.add(offset), len)
    }
}

/// A page-bounded piece of a request.
#[derive(Clone, Copy)]
struct Piece {
    req: u32,
    addr: u64,
    offset: usize,
    len: usize,
    /// Entry (group) that carries this piece, or `NO_GROUP`.
    group: u32,
    result: Result<(), PageError>,
}

const NO_GROUP: u32 = u32::MAX;

/// What earlier requests of a flush ask of later ones on one page.
#[derive(Clone, Copy)]
struct PageRounds {
    /// 1 + the last round with a read of this page: a write must come later.
    reads_until: u32,
    /// The newest write span on this page, or `NO_SPAN`.
    writes: u32,
}

/// Bytes `start..end` rewritten by a write in `round`; `next` is the older
/// span on the same page.
#[derive(Clone, Copy)]
struct WriteSpan {
    start: u64,
    end: u64,
    round: u32,
    next: u32,
}

const NO_SPAN: u32 = u32::MAX;

/// Up to this many read pieces, pages are matched by a linear scan.
const SMALL_FLUSH: usize = 16;

/// Page numbers mapped to an index (of a group, say) for one pass, emptied
/// in constant time: an open-addressed table whose slots count as empty
/// unless stamped with the current pass. Flushes look up a page once per
/// request or piece, and a general hash map's hashing, control bytes and
/// clearing showed in their profiles.
#[derive(Default)]
struct PageIndex {
    /// (page, pass that stored it, index); pass 0 is never current.
    slots: Vec<(u64, u32, u32)>,
    pass: u32,
    /// The table used in this pass: its first `1 << bits` slots.
    bits: u32,
}

impl PageIndex {
    /// Starts an empty index for up to `n` pages (kept at most half full;
    /// more than `n` would fill it, and `get_or_insert` would never
    /// return).
    fn begin(&mut self, n: usize) {
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
    fn get_or_insert(&mut self, page: u64, index: u32) -> Option<u32> {
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
struct Group {
    addr: u64,
    len: usize,
    /// Offset in `scratch`, or `None` for a direct entry into the single
    /// piece's request buffer.
    scratch: Option<usize>,
    /// The piece of a direct entry (or the first piece of the group).
    piece: u32,
    result: Result<(), PageError>,
}

/// The reusable state of flushes; held under the engine's flush lock.
#[derive(Default)]
pub(crate) struct Flusher {
    reqs: Vec<Req>,
    pieces: Vec<Piece>,
    order: Vec<u32>,
    groups: Vec<Group>,
    scratch: Vec<u8>,
    /// Per page touched by a flush with writes: what orders later requests.
    pages: FxHashMap<u64, PageRounds>,
    /// The windows written in this flush, linked per page.
    write_spans: Vec<WriteSpan>,
    /// Per page: the read entry (group) that covers it in this round (or
    /// 0 for every page, in the one-pass plan).
    page_groups: PageIndex,
    /// Failed runs of every request, in request order.
    failed: Vec<(u32, Failure)>,
    /// Fragments of the requests that record them, in request order.
    fragments: Vec<(u32, Fragment)>,
    read_entries: Vec<ScatterEntry<'static>>,
    /// A device that prefers address order gets read entries sorted: by
    /// these (address, index) keys, into these entries.
    order_keys: Vec<(u64, u32)>,
    sorted_entries: Vec<ScatterEntry<'static>>,
    write_entries: Vec<WriteEntry<'static>>,
    /// Some taken request records fragments.
    records: bool,
    /// Some piece of this flush failed: results must be collected.
    any_failed: bool,
}

// SAFETY: the raw pointers in `reqs` and the `'static` entries point into
// buffers lent for one flush; they are only dereferenced during `run`, by
// the thread running it, while the lenders wait. Between flushes they are
// stale and never used (`reqs` is refilled before each run).
unsafe impl Send for Flusher {}

/// Counts of what a flush sent, for callers that watch.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FlushStats {
    /// Requests taken from the queue.
    pub requests: usize,
    /// Backend read calls made.
    pub read_calls: usize,
    /// Backend write calls made.
    pub write_calls: usize,
}

impl Flusher {
    /// Takes everything queued, `staging`'s requests last; returns false
    /// when there was nothing.
    pub fn take(&mut self, queue: &mut Queue, staging: &mut Staging) -> bool {
        self.begin_batch();
        queue.take_all(staging, &mut self.reqs);
        let mut cancelled = false;
        for req in &self.reqs {
            let slot = req.slot.expect("queued requests have slots");
            cancelled |= queue.state(slot) == State::Cancelled;
            self.records |= req.record;
        }
        if cancelled {
            self.reqs.retain(|req| {
                let slot = req.slot.expect("queued requests have slots");
                let keep = queue.state(slot) != State::Cancelled;
                if !keep {
                    queue.release(slot);
                }
                keep
            });
        }
        !self.reqs.is_empty()
    }

    /// Starts a synchronous batch: requests lent by the caller, not queued.
    pub fn begin_batch(&mut self) {
        self.reqs.clear();
        self.records = false;
        self.failed.clear();
        self.fragments.clear();
    }

    /// Adds a request of a synchronous batch.
    ///
    /// SAFETY: `ptr` must be valid for `len` bytes (for writes when `kind`
    /// is a read) until `run` returns, and not otherwise accessed meanwhile.
    #[inline]
    pub unsafe fn lend(&mut self, kind: Kind, addr: u64, ptr: *mut u8, len: usize) {
        self.reqs.push(Req {
            slot: None,
            kind,
            addr,
            len,
            ptr,
            record: false,
            round: 0,
            sees_writes: false,
        });
    }

    /// The failed runs of a finished synchronous batch, by request index.
    pub fn take_failed(&mut self) -> Vec<(u32, Failure)> {
        let failed = if self.failed.is_empty() {
            Vec::new()
        } else {
            self.failed.clone()
        };
        self.failed.clear();
        self.reqs.clear();
        failed
    }

    /// Sends the taken requests to `backend`.
    pub fn run(&mut self, backend: &dyn Backend, max_entries: usize) -> FlushStats {
        let limits = backend.limits();
        let max_entries = max_entries.min(limits.max_entries).max(1);
        let mut stats = FlushStats {
            requests: self.reqs.len(),
            ..Default::default()
        };
        self.any_failed = false;
        // The last page of the 64-bit space is never served: a window on
        // it would end at 2^64. (No device has memory there.)
        let last_page = !(limits.page_size.max(1) - 1);
        let max_address = backend.max_address().min(last_page);
        let Some(shape) = Shape::new(&limits, max_address) else {
            self.fail_all(PageError::InvalidEntry(EntryRule::BadDeviceShape));
            return stats;
        };
        if let Some(calls) = self.read_direct(backend, &shape, max_address, max_entries) {
            stats.read_calls = calls;
            return stats;
        }
        self.cut_pieces(&shape, max_address);
        let writes = self.reqs.iter().any(|r| r.kind == Kind::Write);
        // (Writes fail in several ways; their results are always collected.)
        self.any_failed |= writes;
        let rounds = if writes {
            self.assign_rounds(&shape)
        } else {
            1
        };
        let read_only = backend.read_only();
        for round in 0..rounds {
            if writes {
                let write_calls =
                    self.run_writes(backend, &shape, max_entries, round, read_only, &mut stats);
                stats.write_calls += write_calls;
            }
            stats.read_calls += self.run_reads(backend, &shape, max_entries, round, writes);
        }
        // Without failures or streams there is nothing to collect.
        if self.any_failed || self.records {
            self.collect_results();
        }
        stats
    }

    /// The usual flush, planned in one pass: reads only, each a legal entry
    /// of its own (one page, below the device's end, aligned) on a page no
    /// other request reads, so each goes to the device as it is, straight
    /// into its buffer. Returns the calls made, or `None`, having sent
    /// nothing, when some request needs pieces, windows or shared entries.
    fn read_direct(
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
            // request's buffer, which no other entry overlaps.
            let buf = unsafe { std::slice::from_raw_parts_mut(req.ptr, req.len) };
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

    /// Marks every taken request as wholly failed with `reason` (the flush
    /// could not finish).
    pub fn fail_all(&mut self, reason: PageError) {
        self.failed.clear();
        self.fragments.clear();
        for ri in 0..self.reqs.len() {
            self.fail_whole(ri, reason);
        }
    }

    /// Records that request `ri` failed as a whole (and so its one
    /// fragment, if it records them).
    fn fail_whole(&mut self, ri: usize, reason: PageError) {
        let (offset, len) = (0, self.reqs[ri].len);
        self.failed.push((
            ri as u32,
            Failure {
                offset,
                len,
                reason,
            },
        ));
        if self.reqs[ri].record {
            let result = Err(reason);
            self.fragments.push((
                ri as u32,
                Fragment {
                    offset,
                    len,
                    result,
                },
            ));
        }
    }

    /// Gives every request back to its slot (or frees it if its future is
    /// gone) and wakes the waiters: a waker shared by adjacent requests
    /// (futures joined in one task) once for the run of them, so a task
    /// whose requests interleave with another's is woken once per run.
    pub fn finish(&mut self, queue: &mut Queue) {
        if !self.failed.is_empty() || !self.fragments.is_empty() {
            let (mut failed, mut fragments) = (
                self.failed.iter().peekable(),
                self.fragments.iter().peekable(),
            );
            for (ri, req) in self.reqs.iter().enumerate() {
                let ri = ri as u32;
                let body = queue.body(req.slot.expect("queued requests have slots"));
                while let Some((_, f)) = failed.next_if(|(r, _)| *r == ri) {
                    body.failures.push(*f);
                    body.failed = true;
                }
                while let Some((_, f)) = fragments.next_if(|(r, _)| *r == ri) {
                    body.fragments.push(*f);
                    body.has_fragments = true;
                }
            }
        }
        queue.complete_all(
            self.reqs
                .drain(..)
                .map(|req| req.slot.expect("queued requests have slots")),
        );
        self.failed.clear();
        self.fragments.clear();
    }

    /// Cuts every request into page pieces; bytes past the device's end (one
    /// piece) or past the end of the address space fail here, without an
    /// entry.
    fn cut_pieces(&mut self, shape: &Shape, max_address: u64) {
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
    fn assign_rounds(&mut self, shape: &Shape) -> u32 {
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

    /// Runs the reads of `round` (the only round when the flush has no
    /// `writes`) not already sent with the windows: pieces on the same
    /// page share an entry.
    fn run_reads(
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

    /// Adds an entry (group) for the read pieces `select` picks, pieces on
    /// the same page sharing one (not with groups already there: a round's
    /// windows are written back whole); returns whether any goes through
    /// scratch.
    fn plan_reads(&mut self, shape: &Shape, select: impl Fn(&Piece, &[Req]) -> bool) -> bool {
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
    fn place_in_scratch(&mut self) {
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
    fn hand_reads(&mut self, select: impl Fn(&Piece, &[Req]) -> bool) {
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

    /// Reads `entries` in calls of at most `max_entries`; returns the
    /// calls. A device that prefers address order gets them sorted by
    /// address (entries of one flush never overlap, so their order is
    /// free); each result stays with its entry.
    fn read(
        &mut self,
        backend: &dyn Backend,
        entries: &mut [ScatterEntry<'static>],
        max_entries: usize,
    ) -> usize {
        if !backend.prefers_address_order() || entries.windows(2).all(|w| w[0].addr <= w[1].addr) {
            return read_in_calls(backend, entries, max_entries);
        }
        self.order_keys.clear();
        let keys = entries.iter().enumerate().map(|(i, e)| (e.addr, i as u32));
        self.order_keys.extend(keys);
        self.order_keys.sort_unstable();
        let mut sorted = std::mem::take(&mut self.sorted_entries);
        for &(addr, i) in &self.order_keys {
            let buf = &mut entries[i as usize].buf;
            // SAFETY: a reborrow of the entry's buffer, which nothing else
            // touches until `sorted` is cleared below (the unsorted entry
            // only gets its result back).
            let buf = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr(), buf.len()) };
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
    fn read_groups(&mut self, backend: &dyn Backend, max_entries: usize) -> (usize, bool) {
        let mut entries = std::mem::take(&mut self.read_entries);
        // One pointer into scratch for every window: indexing it per group
        // would reborrow all of it mutably and invalidate the windows
        // already handed to entries (Miri, Stacked Borrows).
        let scratch = self.scratch.as_mut_ptr();
        for g in &self.groups {
            let buf: *mut u8 = match g.scratch {
                Some(at) => {
                    debug_assert!(at + g.len <= self.scratch.len());
                    // SAFETY: scratch was sized to hold every window.
                    unsafe { scratch.add(at) }
                }
                None => {
                    let p = &self.pieces[g.piece as usize];
                    // SAFETY: a direct group is exactly its piece, which
                    // lies in its request.
                    unsafe { self.reqs[p.req as usize].ptr.add(p.offset) }
                }
            };
            // SAFETY: each group's window lies inside its buffer (scratch
            // was sized to hold every window; a direct window is exactly
            // its piece), windows never overlap, and neither scratch nor
            // any request buffer is touched or moved until `entries` is
            // cleared below. The `'static` never escapes this function.
            let buf = unsafe { std::slice::from_raw_parts_mut(buf, g.len) };
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
    fn run_writes(
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
            let (addr, data): (u64, &[u8]) = if p.group == NO_GROUP {
                // SAFETY: the piece lies in its request.
                (p.addr, unsafe {
                    self.reqs[p.req as usize].bytes(p.offset, p.len)
                })
            } else {
                let g = &self.groups[p.group as usize];
                let at = g.scratch.unwrap_or(0);
                (g.addr, &self.scratch[at..at + g.len])
            };
            // SAFETY: as in `read_groups`: the buffers are neither written
            // nor moved until `entries` is cleared below.
            let data = unsafe { std::slice::from_raw_parts(data.as_ptr(), data.len()) };
            entries.push(WriteEntry::new(addr, data));
        }
        let mut calls = 0;
        for chunk in entries.chunks_mut(max_entries) {
            backend.write_scatter(chunk);
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

    /// Turns piece results into each request's failed runs (and
    /// fragments, for streams).
    fn collect_results(&mut self) {
        for p in &self.pieces {
            if let Err(reason) = p.result {
                let failure = Failure {
                    offset: p.offset,
                    len: p.len,
                    reason,
                };
                let last = self.failed.last_mut().filter(|(r, _)| *r == p.req);
                if let Some(failure) = last.map_or(Some(failure), |(_, l)| l.absorb(failure)) {
                    self.failed.push((p.req, failure));
                }
            }
            if self.reqs[p.req as usize].record {
                let fragment = Fragment {
                    offset: p.offset,
                    len: p.len,
                    result: p.result,
                };
                self.fragments.push((p.req, fragment));
            }
        }
    }
}

/// Reads `entries` in calls of at most `max_entries`; returns the calls.
fn read_in_calls(backend: &dyn Backend, entries: &mut [ScatterEntry], max_entries: usize) -> usize {
    let mut calls = 0;
    for chunk in entries.chunks_mut(max_entries) {
        backend.read_scatter(chunk);
        calls += 1;
    }
    calls
}

/// The smallest legal entry that covers `len` bytes at `addr` (which lie
/// inside one page), ending before the device's end where one can.
fn window(shape: &Shape, addr: u64, len: usize) -> (u64, usize) {
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
struct Shape {
    page_mask: u64,
    page_shift: u32,
    align_mask: u64,
    min_len: usize,
    /// The device's max address, aligned down: no legal entry that stays
    /// below the max address ends past it.
    end: u64,
}

impl Shape {
    /// `None` when no legal entry can be cut: a page size or alignment
    /// that is not a power of two, or a longest entry shorter than the
    /// shortest or than the alignment.
    fn new(limits: &Limits, max_address: u64) -> Option<Shape> {
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
    fn page(&self, addr: u64) -> u64 {
        addr >> self.page_shift
    }

    /// Bytes from `addr` to the end of its page.
    fn to_page_end(&self, addr: u64) -> u64 {
        self.page_mask + 1 - (addr & self.page_mask)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemBackend;

    /// Lends `bufs` at `addrs` to `flusher` as a synchronous batch of reads.
    fn lend_reads(flusher: &mut Flusher, addrs: &[u64], bufs: &mut [Vec<u8>]) {
        flusher.begin_batch();
        for (&addr, buf) in addrs.iter().zip(bufs.iter_mut()) {
            // SAFETY: the buffers outlive the flush and are not touched
            // until it returns.
            unsafe { flusher.lend(Kind::Read, addr, buf.as_mut_ptr(), buf.len()) };
        }
    }

    #[test]
    fn page_indexes_find_repeats_and_empty_between_passes() {
        let mut index = PageIndex::default();
        index.begin(100);
        // Pages that share their low bits still differ.
        let pages: Vec<u64> = (0..100).map(|i| i << 20 | 7).collect();
        for (i, &p) in pages.iter().enumerate() {
            assert_eq!(index.get_or_insert(p, i as u32), None);
        }
        for (i, &p) in pages.iter().enumerate() {
            assert_eq!(index.get_or_insert(p, 0), Some(i as u32));
        }
        // A new pass, smaller: nothing of the last one is left.
        index.begin(20);
        assert_eq!(index.get_or_insert(pages[3], 1), None);
        assert_eq!(index.get_or_insert(pages[3], 2), Some(1));
        let new = pages[..20]
            .iter()
            .filter(|&&p| index.get_or_insert(p, 3).is_none());
        assert_eq!(new.count(), 19);
        // Growing clears as well; and so does the pass counter's wrap.
        index.begin(5000);
        assert_eq!(index.get_or_insert(pages[0], 4), None);
        index.pass = u32::MAX;
        index.begin(10);
        assert_eq!(index.pass, 1);
        assert_eq!(index.get_or_insert(pages[0], 5), None);
        assert_eq!(index.get_or_insert(pages[0], 6), Some(5));
    }

    #[test]
    fn whole_entries_on_pages_of_their_own_go_to_the_device_as_they_are() {
        let backend = MemBackend::with_address_pattern(1 << 20);
        backend.add_hole(0x3000..0x4000, PageError::Unspecified);
        let addrs = [0x1000, 0x2ff8, 0x3010, 0xf_f000];
        let mut bufs = vec![vec![0u8; 8], vec![0; 8], vec![0; 8], vec![0; 0x1000]];
        let mut flusher = Flusher::default();
        lend_reads(&mut flusher, &addrs, &mut bufs);
        let stats = flusher.run(&backend, 3);
        // Planned in one pass, without cutting pieces; split by the limit.
        assert!(flusher.pieces.is_empty());
        assert_eq!((stats.requests, stats.read_calls), (4, 2));
        assert_eq!(backend.read_call_sizes(), [3, 1]);
        let failed = Failure {
            offset: 0,
            len: 8,
            reason: PageError::Unspecified,
        };
        assert_eq!(flusher.take_failed(), [(2, failed)]);
        for (i, (&addr, buf)) in addrs.iter().zip(&bufs).enumerate() {
            let expected = if i == 2 {
                vec![0; 8] // failed: untouched
            } else {
                backend.bytes(addr, buf.len())
            };
            assert_eq!(buf, &expected, "read {i} at {addr:#x}");
        }
    }

    #[test]
    fn a_page_read_twice_sends_the_flush_down_the_general_path() {
        let backend = MemBackend::with_address_pattern(1 << 20);
        // The third read shares the first one's page, after two whole
        // entries were already planned in one pass.
        let addrs = [0x1000, 0x2ff8, 0x1008];
        let mut bufs = vec![vec![0u8; 8]; 3];
        let mut flusher = Flusher::default();
        lend_reads(&mut flusher, &addrs, &mut bufs);
        let stats = flusher.run(&backend, usize::MAX);
        assert_eq!(flusher.pieces.len(), 3);
        // One call; the shared page is one entry.
        assert_eq!(stats.read_calls, 1);
        assert_eq!(backend.read_call_sizes(), [2]);
        assert!(flusher.take_failed().is_empty());
        for (&addr, buf) in addrs.iter().zip(&bufs) {
            assert_eq!(buf, &backend.bytes(addr, 8), "read at {addr:#x}");
        }
    }

    #[test]
    fn windows_are_legal_and_cover_the_piece() {
        let l = Limits::LEECHCORE;
        let shape = Shape::new(&l, u64::MAX).unwrap();
        assert_eq!(window(&shape, 0x1000, 0x1000), (0x1000, 0x1000));
        assert_eq!(window(&shape, 0x1001, 2), (0x1000, 8));
        assert_eq!(window(&shape, 0x1ffe, 2), (0x1ff8, 8));
        assert_eq!(window(&shape, 0x1ffd, 3), (0x1ff8, 8));
        assert_eq!(window(&shape, 0x1003, 9), (0x1000, 12));
        for addr in 0x1000..0x1010u64 {
            for len in 1..=(0x2000 - addr as usize).min(40) {
                let (s, n) = window(&shape, addr, len);
                assert_eq!(l.check(s, n), Ok(()), "{addr:#x}+{len}");
                assert!(s <= addr && s + n as u64 >= addr + len as u64);
            }
        }
    }

    #[test]
    fn windows_end_below_the_devices_end_where_one_fits() {
        let l = Limits::LEECHCORE;
        // Memory ends 8 bytes into the page at 0x2000.
        let shape = Shape::new(&l, 0x2008).unwrap();
        assert_eq!(window(&shape, 0x2004, 4), (0x2000, 8));
        assert_eq!(window(&shape, 0x2001, 2), (0x2000, 8));
        assert_eq!(window(&shape, 0x1ffc, 4), (0x1ff8, 8));
        // Only 6 bytes: no legal entry ends below the end.
        let shape = Shape::new(&l, 0x2006).unwrap();
        assert_eq!(window(&shape, 0x2000, 2), (0x2000, 8));
    }

    #[test]
    fn entries_shorter_than_a_page_cut_pages_of_their_length() {
        let l = Limits::LEECHCORE;
        let short = Limits {
            max_len: 0x300,
            ..l
        };
        let shape = Shape::new(&short, u64::MAX).unwrap();
        assert_eq!(shape.to_page_end(0x1100), 0x100);
        assert_eq!(window(&shape, 0x11fe, 2), (0x11f8, 8));
        // Rules that admit no entry.
        for rules in [
            Limits { max_len: 4, ..l },
            Limits { max_len: 0, ..l },
            Limits {
                min_len: 0x1001,
                ..l
            },
            Limits {
                page_size: 0x1800,
                ..l
            },
            Limits { align: 0x2000, ..l },
        ] {
            assert!(Shape::new(&rules, u64::MAX).is_none(), "{rules:?}");
        }
        // The shortest entry is rounded up to the alignment.
        let coarse = Limits {
            min_len: 12,
            align: 8,
            ..l
        };
        assert_eq!(
            window(&Shape::new(&coarse, u64::MAX).unwrap(), 0x1001, 1),
            (0x1000, 16)
        );
    }
}
