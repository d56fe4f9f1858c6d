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

mod execute;
mod plan;

use rustc_hash::FxHashMap;

use super::outcome::{Failure, Fragment};
use super::request::lent::LentBuffer;
use super::request::queue::{Kind, Queue, Req};
use super::request::slot::State;
use super::request::staging::Staging;
use crate::backend::{Backend, EntryRule, Limits, PageError, ScatterEntry, WriteEntry};
use plan::*;

// A request of this flush (`Req`, queued in the form the flush takes). Its
// buffer is lent for the flush: an engine slot's buffer (which stays in the
// slot: an in-flight slot's buffer is touched by nobody else), a scope's,
// or a synchronous caller's.
impl Req {
    /// The request's bytes `offset..offset + len`, for reading.
    ///
    /// # Safety
    /// The range lies in the request, whose buffer is lent (the flush is
    /// under way).
    unsafe fn bytes(&self, offset: usize, len: usize) -> &[u8] {
        // SAFETY: the caller's contract; a flush only writes into reads.
        unsafe { self.buf.bytes(offset, len) }
    }

    /// The same, for writing (reads only).
    ///
    /// # Safety
    /// As `bytes`, and no other reference to the range is alive.
    #[allow(clippy::mut_from_ref)]
    unsafe fn bytes_mut(&self, offset: usize, len: usize) -> &mut [u8] {
        debug_assert_eq!(self.kind, Kind::Read);
        // SAFETY: the caller's contract; a read's buffer was lent mutably.
        unsafe { self.buf.bytes_mut(offset, len) }
    }
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
    /// What was last asked of the device, kept until its epoch changes.
    geometry: Option<Geometry>,
}

/// What a flush needs to know of the device, asked once per
/// [`Backend::geometry_epoch`] rather than once per flush.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    epoch: u64,
    limits: Limits,
    max_address: u64,
    read_only: bool,
    address_order: bool,
}

impl Geometry {
    /// The device's answers now, or the kept ones if its epoch has not
    /// moved. The epoch is read first: answers that change meanwhile are
    /// kept under the old epoch and asked again next time.
    fn of(kept: Option<Geometry>, backend: &dyn Backend) -> Geometry {
        let epoch = backend.geometry_epoch();
        match kept {
            Some(g) if g.epoch == epoch => g,
            _ => Geometry {
                epoch,
                limits: backend.limits(),
                max_address: backend.max_address(),
                read_only: backend.read_only(),
                address_order: backend.prefers_address_order(),
            },
        }
    }
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
    /// # Safety
    /// `buf` must stay lent (valid, and written only by the flush for a
    /// read) until `run` returns.
    #[inline]
    pub unsafe fn lend(&mut self, kind: Kind, addr: u64, buf: LentBuffer) {
        self.reqs.push(Req {
            slot: None,
            kind,
            addr,
            len: buf.len(),
            buf,
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
        let geometry = Geometry::of(self.geometry, backend);
        self.geometry = Some(geometry);
        let limits = geometry.limits;
        let max_entries = max_entries.min(limits.max_entries).max(1);
        let mut stats = FlushStats {
            requests: self.reqs.len(),
            ..Default::default()
        };
        self.any_failed = false;
        // Once for the whole flush: its calls then skip the check.
        if let Err(reason) = backend.check_target() {
            self.fail_all(reason);
            return stats;
        }
        // The last page of the 64-bit space is never served: a window on
        // it would end at 2^64. (No device has memory there.)
        let last_page = !(limits.page_size.max(1) - 1);
        let max_address = geometry.max_address.min(last_page);
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
        let read_only = geometry.read_only;
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

#[cfg(test)]
mod tests;
