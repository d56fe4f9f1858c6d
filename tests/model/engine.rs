//! The engine's byte model, shared by tests/engine_model.rs and the fuzz
//! target `engine_ops` (fuzz/): devices with any entry rules, holes and
//! sizes; requests of every form the engine takes; what running them one
//! by one does, byte by byte; and the comparison of the two. Its
//! generators draw every choice through [`Choices`], so a seeded `Rng`
//! and the fuzzer's input drive the same code.

use std::future::Future;
use std::ops::RangeBounds;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use fastrand::Rng;
use futures::StreamExt;
use leechio::engine::Fragments;
use leechio::{Failure, Limits, MemBackend, Memory, PageError, PartialError, Scope};

/// Where the generators take their choices from, each within a range:
/// a seeded [`Rng`] for the tests, the fuzzer's bytes for the fuzz target.
pub trait Choices {
    /// A `u8` in `range`.
    fn u8(&mut self, range: impl RangeBounds<u8>) -> u8;
    /// A `u64` in `range`.
    fn u64(&mut self, range: impl RangeBounds<u64>) -> u64;
    /// A `usize` in `range`.
    fn usize(&mut self, range: impl RangeBounds<usize>) -> usize;
    /// Yes or no.
    fn bool(&mut self) -> bool;
}

/// The `Rng`'s own draws, so a seed gives the cases it always gave.
impl Choices for Rng {
    fn u8(&mut self, range: impl RangeBounds<u8>) -> u8 {
        Rng::u8(self, range)
    }
    fn u64(&mut self, range: impl RangeBounds<u64>) -> u64 {
        Rng::u64(self, range)
    }
    fn usize(&mut self, range: impl RangeBounds<usize>) -> usize {
        Rng::usize(self, range)
    }
    fn bool(&mut self) -> bool {
        Rng::bool(self)
    }
}

pub const PAGE: u64 = 0x1000;
/// What a read buffer holds before the read: failed bytes must keep it.
pub const UNTOUCHED: u8 = 0x5a;

/// What a batch runs on.
#[derive(Debug, Clone)]
pub struct Device {
    pub limits: Limits,
    pub size: u64,
    /// Pages (of `limits.page_size`) that fail, and why.
    pub holes: Vec<(u64, PageError)>,
    pub read_only: bool,
    /// Entries reach it sorted by address (as LeechCore's do).
    pub address_order: bool,
}

impl Device {
    /// LeechCore's rules, `size` bytes, nothing unreadable.
    pub fn plain(size: u64) -> Device {
        Device {
            limits: Limits::LEECHCORE,
            size,
            holes: Vec::new(),
            read_only: false,
            address_order: false,
        }
    }

    /// LeechCore's rules or others (entries shorter than a page, coarser
    /// alignment, small pages, few entries per call), a size that may end
    /// inside a page, up to three holes.
    pub fn random(rng: &mut impl Choices) -> Device {
        let rules = |max_len, min_len, align, page_size, max_entries| Limits {
            max_len,
            min_len,
            align,
            page_size,
            max_entries,
        };
        let limits = match rng.u8(0..8) {
            0 => rules(PAGE as usize, 1, 1, PAGE, usize::MAX),
            1 => rules(0x400, 16, 8, PAGE, 5),
            2 => rules(0x300, 8, 4, PAGE, 2),
            3 => rules(0x200, 8, 4, 0x200, usize::MAX),
            _ => Limits::LEECHCORE,
        };
        let pages = rng.u64(2..=8);
        // (Whole multiples of every alignment above.)
        let tail = [0, 0, 0, 8, 16, 24, 96][rng.usize(0..7)];
        let reasons = [
            PageError::UnsupportedRequest,
            PageError::CompleterAbort,
            PageError::Unspecified,
        ];
        let holes = (0..rng.usize(0..=3))
            .map(|_| (rng.u64(0..pages), reasons[rng.usize(0..3)]))
            .collect();
        Device {
            limits,
            size: pages * limits.page_size + tail,
            holes,
            read_only: rng.u8(0..10) == 0,
            address_order: rng.bool(),
        }
    }

    pub fn backend(&self) -> Arc<MemBackend> {
        let mut backend =
            MemBackend::with_address_pattern(self.size as usize).with_limits(self.limits);
        if self.read_only {
            backend = backend.read_only();
        }
        if self.address_order {
            backend = backend.in_address_order();
        }
        let page = self.limits.page_size;
        for &(p, reason) in &self.holes {
            backend.add_hole(p * page..(p + 1) * page, reason);
        }
        Arc::new(backend)
    }

    /// Why byte `offset` of a request at `addr` fails, if it does.
    pub fn failure(&self, addr: u64, offset: usize, write: bool) -> Option<PageError> {
        let page = self.limits.page_size;
        let Some(a) = addr.checked_add(offset as u64) else {
            return Some(PageError::AddressOverflow);
        };
        // No legal entry reaches bytes of a last page shorter than the
        // shortest entry, without running past the device's end: the
        // device fails them.
        let align = self.limits.align as usize;
        let shortest = self.limits.min_len.div_ceil(align) * align;
        let short_tail = self.size % page != 0 && ((self.size % page) as usize) < shortest;
        if a >= self.size {
            Some(PageError::OutOfRange)
        } else if write && self.read_only {
            Some(PageError::ReadOnly)
        } else if short_tail && a / page == self.size / page {
            Some(PageError::Unspecified)
        } else {
            let hole = self.holes.iter().find(|(p, _)| *p == a / page);
            hole.map(|&(_, reason)| reason)
        }
    }
}

/// What running requests one by one does, byte by byte.
pub struct Model {
    pub bytes: Vec<u8>,
    pub device: Device,
}

impl Model {
    pub fn new(bytes: Vec<u8>, device: Device) -> Self {
        Model { bytes, device }
    }

    /// Per byte of `len` at `addr`, why it fails, if it does.
    pub fn failures(&self, addr: u64, len: usize, write: bool) -> Vec<Option<PageError>> {
        (0..len)
            .map(|i| self.device.failure(addr, i, write))
            .collect()
    }

    pub fn result(&self, addr: u64, len: usize, write: bool) -> Result<(), PartialError> {
        let failed = runs(self.failures(addr, len, write));
        if failed.is_empty() {
            Ok(())
        } else {
            Err(PartialError { failed, len })
        }
    }

    /// What a read of `len` bytes at `addr` leaves in a fresh buffer (or
    /// zeroed, where bytes failed, if `zero_failed`).
    pub fn read(&self, addr: u64, len: usize, zero_failed: bool) -> Vec<u8> {
        let failures = self.failures(addr, len, false);
        (0..len)
            .zip(failures)
            .map(|(i, failure)| match failure {
                Some(_) if zero_failed => 0,
                Some(_) => UNTOUCHED,
                None => self.bytes[(addr + i as u64) as usize],
            })
            .collect()
    }

    pub fn write(&mut self, addr: u64, data: &[u8]) {
        let failures = self.failures(addr, data.len(), true);
        for (i, (&b, failure)) in data.iter().zip(failures).enumerate() {
            if failure.is_none() {
                self.bytes[(addr + i as u64) as usize] = b;
            }
        }
    }
}

/// The failed runs of a request from the fate of each of its bytes,
/// merged as the engine reports them (a new run where the reason changes).
pub fn runs(reasons: impl IntoIterator<Item = Option<PageError>>) -> Vec<Failure> {
    let mut runs: Vec<Failure> = Vec::new();
    for (offset, reason) in reasons.into_iter().enumerate() {
        let Some(reason) = reason else { continue };
        match runs.last_mut() {
            Some(last) if last.reason == reason && last.offset + last.len == offset => {
                last.len += 1
            }
            _ => runs.push(Failure {
                offset,
                len: 1,
                reason,
            }),
        }
    }
    runs
}

/// One request of a batch.
#[derive(Clone)]
pub enum Op {
    Read {
        addr: u64,
        len: usize,
        via: Via,
        /// Asks for failed bytes to be zeroed (borrowed and scoped reads).
        zero_failed: bool,
    },
    Write {
        addr: u64,
        data: Vec<u8>,
        via: Via,
    },
}

/// Which form of the request the engine gets.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Via {
    /// `read` / `write`, with the caller's buffer.
    Borrowed,
    /// `read_into_owned` / `write_from_owned`.
    Owned,
    /// `read_fragments` / `write_fragments`, a stream of page pieces.
    Fragments,
    /// A scope's `read` / `write`, straight on the caller's buffer.
    Scoped,
    /// `read_val::<u64>` (reads only).
    Value,
}

/// Short enough to list a whole batch in a failure message.
impl std::fmt::Debug for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (addr, len) = self.span();
        let (kind, via) = match self {
            Op::Read {
                via,
                zero_failed: true,
                ..
            } => ("read, zero-filled,", via),
            Op::Read { via, .. } => ("read", via),
            Op::Write { via, .. } => ("write", via),
        };
        write!(f, "{kind} ({via:?}) {len:#x} at {addr:#x}")
    }
}

impl Op {
    /// Its address and length.
    pub fn span(&self) -> (u64, usize) {
        match self {
            Op::Read { addr, len, .. } => (*addr, *len),
            Op::Write { addr, data, .. } => (*addr, data.len()),
        }
    }

    /// The same request `by` bytes higher.
    pub fn shifted(&self, by: u64) -> Op {
        let mut op = self.clone();
        match &mut op {
            Op::Read { addr, .. } | Op::Write { addr, .. } => *addr += by,
        }
        op
    }

    /// The same request as a synchronous batch takes it: into a buffer,
    /// with failed bytes left as they were.
    pub fn plain(&self) -> Op {
        let mut op = self.clone();
        match &mut op {
            Op::Read {
                via, zero_failed, ..
            } => (*via, *zero_failed) = (Via::Borrowed, false),
            Op::Write { via, .. } => *via = Via::Borrowed,
        }
        op
    }
}

/// What a request gave back.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Read(Vec<u8>, Result<(), PartialError>),
    Write(Result<(), PartialError>),
}

/// An address near a page edge or anywhere, up to a page past the end of
/// `device`, or (rarely) at the end of the address space.
pub fn address(rng: &mut impl Choices, device: &Device) -> u64 {
    let size = device.limits.page_size;
    if rng.u8(0..32) == 0 {
        return u64::MAX - rng.u64(0..size);
    }
    let page = rng.u64(0..=device.size / size) * size;
    match rng.u8(0..3) {
        0 => page + rng.u64(0..16),
        1 => (page + size).saturating_sub(rng.u64(1..=16)),
        _ => page + rng.u64(0..size),
    }
}

/// Mostly small requests, some spanning pages.
pub fn length(rng: &mut impl Choices, device: &Device) -> usize {
    let page = device.limits.page_size as usize;
    match rng.u8(0..4) {
        0..=1 => rng.usize(1..=16),
        2 => rng.usize(1..=page),
        _ => rng.usize(1..=2 * page + 0x100),
    }
}

/// A read or a write of any form, at [`address`], of [`length`] bytes.
pub fn random_op(rng: &mut impl Choices, device: &Device) -> Op {
    let (addr, len) = (address(rng, device), length(rng, device));
    let vias = [Via::Borrowed, Via::Owned, Via::Fragments, Via::Scoped];
    if rng.bool() {
        let (via, len) = match rng.usize(0..5) {
            4 => (Via::Value, 8),
            i => (vias[i], len),
        };
        let zero_failed = matches!(via, Via::Borrowed | Via::Scoped) && rng.bool();
        Op::Read {
            addr,
            len,
            via,
            zero_failed,
        }
    } else {
        let via = vias[rng.usize(0..4)];
        let data = std::iter::repeat_with(|| rng.u8(..)).take(len).collect();
        Op::Write { addr, data, via }
    }
}

/// The future of one op.
pub type Boxed<'a> = Pin<Box<dyn Future<Output = Outcome> + Send + 'a>>;

/// Polls every future in the order given (the order requests are queued
/// in, which is program order) until all are done.
pub async fn in_order(mut futures: Vec<Boxed<'_>>) -> Vec<Outcome> {
    let mut out: Vec<Option<Outcome>> = futures.iter().map(|_| None).collect();
    futures::future::poll_fn(|cx| {
        for (f, o) in futures.iter_mut().zip(&mut out) {
            if o.is_none() {
                if let Poll::Ready(v) = f.as_mut().poll(cx) {
                    *o = Some(v);
                }
            }
        }
        if out.iter().all(Option::is_some) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    out.into_iter().map(Option::unwrap).collect()
}

/// The future of one op; borrowed reads fill their buffer in `bufs`.
/// A scoped read's buffer stays borrowed until its scope ends: it gives
/// back an empty one, for `run_futures` to fill in. `page` is the device's.
pub fn start<'a>(
    mem: &'a Memory,
    scope: &'a Scope<'a, '_>,
    op: &'a Op,
    buf: &'a mut Vec<u8>,
    page: u64,
) -> Boxed<'a> {
    match *op {
        Op::Read {
            addr,
            via: Via::Scoped,
            zero_failed,
            ..
        } => {
            let read = scope.read(addr, buf);
            let read = if zero_failed {
                read.zero_failed()
            } else {
                read
            };
            Box::pin(async move { Outcome::Read(Vec::new(), read.await) })
        }
        Op::Read {
            addr,
            len,
            via,
            zero_failed,
        } => Box::pin(async move {
            let result = match via {
                Via::Owned => {
                    let owned = mem.read_into_owned(addr, vec![UNTOUCHED; len]);
                    let (filled, result) = owned.await;
                    *buf = filled;
                    result
                }
                Via::Borrowed if zero_failed => mem.read(addr, buf).zero_failed().await,
                Via::Borrowed => mem.read(addr, buf).await,
                Via::Fragments => joined(addr, page, mem.read_fragments(addr, buf)).await,
                Via::Value => match mem.read_val::<u64>(addr).await {
                    Ok(value) => {
                        *buf = value.to_le_bytes().to_vec();
                        Ok(())
                    }
                    Err(e) => Err(e),
                },
                Via::Scoped => unreachable!("started above"),
            };
            Outcome::Read(std::mem::take(buf), result)
        }),
        Op::Write {
            addr,
            ref data,
            via,
        } => Box::pin(async move {
            Outcome::Write(match via {
                Via::Owned => {
                    let (back, result) = mem.write_from_owned(addr, data.clone()).await;
                    assert_eq!(&back, data, "an owned write's buffer came back changed");
                    result
                }
                Via::Borrowed => mem.write(addr, data).await,
                Via::Fragments => joined(addr, page, mem.write_fragments(addr, data)).await,
                Via::Scoped => scope.write(addr, data).await,
                Via::Value => unreachable!("values are read"),
            })
        }),
    }
}

/// Runs the futures of `ops` in one scope, in order, and gives scoped
/// reads their buffers back once it has ended.
pub fn run_futures(
    mem: &Memory,
    ops: &[Op],
    mut bufs: Vec<Vec<u8>>,
    page: u64,
    abandon: impl Fn(usize) -> bool,
) -> Vec<Outcome> {
    let mut got = mem.scope(|s| {
        let futures = ops
            .iter()
            .zip(bufs.iter_mut())
            .enumerate()
            .map(|(i, (op, buf))| match op {
                &Op::Read { addr, via, .. } if abandon(i) => abandoned(mem, s, addr, via, buf),
                op => start(mem, s, op, buf, page),
            })
            .collect();
        mem.block_on(in_order(futures))
    });
    for ((op, out), buf) in ops.iter().zip(&mut got).zip(bufs) {
        if let (
            Op::Read {
                via: Via::Scoped, ..
            },
            Outcome::Read(bytes, _),
        ) = (op, out)
        {
            *bytes = buf;
        }
    }
    got
}

/// The result of a request of `fragments` at `addr`, put together from
/// its fragments, which must come in order, each inside one page of
/// `page` bytes (or, past the end of memory or of the address space, all
/// in one).
pub async fn joined(
    addr: u64,
    page: u64,
    mut fragments: Fragments<'_, '_>,
) -> Result<(), PartialError> {
    let mut reasons = Vec::new();
    while let Some(f) = fragments.next().await {
        assert_eq!(f.offset, reasons.len(), "a fragment out of order: {f:?}");
        let first = addr.wrapping_add(f.offset as u64);
        let last = first.wrapping_add(f.len as u64 - 1);
        let past_end = matches!(
            f.result,
            Err(PageError::OutOfRange | PageError::AddressOverflow)
        );
        assert!(
            f.len > 0 && (first / page == last / page || past_end),
            "a fragment across pages: {f:?}"
        );
        // Past the end of memory, one piece up to the end of the address
        // space, and one beyond it.
        match reasons.last().copied().flatten() {
            Some(PageError::AddressOverflow) => panic!("a fragment after the end: {f:?}"),
            Some(PageError::OutOfRange) => assert_eq!(
                f.result,
                Err(PageError::AddressOverflow),
                "a fragment after the end: {f:?}"
            ),
            _ => {}
        }
        reasons.resize(reasons.len() + f.len, f.result.err());
    }
    let len = reasons.len();
    let failed = runs(reasons);
    if failed.is_empty() {
        Ok(())
    } else {
        Err(PartialError { failed, len })
    }
}

/// Asserts that a request gave back what the model says, naming the
/// first wrong byte rather than printing whole buffers.
pub fn check(got: &Outcome, want: &Outcome, context: impl Fn() -> String) {
    match (got, want) {
        (Outcome::Read(g, gr), Outcome::Read(w, wr)) => {
            assert_eq!(gr, wr, "{}: result", context());
            if let Some(at) = g.iter().zip(w).position(|(a, b)| a != b) {
                panic!(
                    "{}: byte {at:#x} is {:#x}, not {:#x}",
                    context(),
                    g[at],
                    w[at]
                );
            }
            assert_eq!(g.len(), w.len(), "{}: length", context());
        }
        (Outcome::Write(gr), Outcome::Write(wr)) => assert_eq!(gr, wr, "{}", context()),
        _ => panic!("{}: a read and a write mixed up", context()),
    }
}

/// `ops`, all reads or all writes, as one synchronous batch.
pub fn run_now(mem: &Memory, ops: &[Op]) -> Vec<Outcome> {
    let mut bufs = read_buffers(ops);
    if let Some(Op::Read { .. }) = ops.first() {
        let reads = ops
            .iter()
            .zip(bufs.iter_mut())
            .map(|(op, buf)| (op.span().0, &mut buf[..]));
        let outcome = mem.read_now(reads);
        bufs.into_iter()
            .enumerate()
            .map(|(i, buf)| {
                let len = buf.len();
                Outcome::Read(buf, outcome.result(i, len))
            })
            .collect()
    } else {
        let writes = ops.iter().map(|op| match op {
            Op::Write { addr, data, .. } => (*addr, &data[..]),
            Op::Read { .. } => unreachable!("a read in a batch of writes"),
        });
        let outcome = mem.write_now(writes);
        (0..ops.len())
            .map(|i| Outcome::Write(outcome.result(i, ops[i].span().1)))
            .collect()
    }
}

/// What `ops` run one by one give back, updating `model`.
pub fn expected(model: &mut Model, ops: &[Op]) -> Vec<Outcome> {
    ops.iter()
        .map(|op| match op {
            &Op::Read {
                addr,
                len,
                via,
                zero_failed,
            } => {
                let result = model.result(addr, len, false);
                let bytes = match via {
                    // A value is read whole or not at all.
                    Via::Value if result.is_err() => vec![UNTOUCHED; len],
                    _ => model.read(addr, len, zero_failed),
                };
                Outcome::Read(bytes, result)
            }
            Op::Write { addr, data, .. } => {
                let result = model.result(*addr, data.len(), true);
                model.write(*addr, data);
                Outcome::Write(result)
            }
        })
        .collect()
}

/// A fresh buffer for each read of `ops` (and an empty one for each write).
pub fn read_buffers(ops: &[Op]) -> Vec<Vec<u8>> {
    ops.iter()
        .map(|op| match op {
            Op::Read { len, .. } => vec![UNTOUCHED; *len],
            Op::Write { .. } => Vec::new(),
        })
        .collect()
}

/// Runs `ops` as joined futures (one flush) or as a synchronous batch,
/// and compares each result, and then all of memory, with the model's.
pub fn run_and_compare(
    mem: &Memory,
    backend: &MemBackend,
    model: &mut Model,
    ops: &[Op],
    as_futures: bool,
    what: impl Fn() -> String,
) {
    let page = model.device.limits.page_size;
    let got = if as_futures {
        run_futures(mem, ops, read_buffers(ops), page, |_| false)
    } else {
        run_now(mem, ops)
    };
    let want = expected(model, ops);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        check(g, w, || format!("{}, op {i} of {ops:?}", what()));
    }
    let size = model.bytes.len();
    assert!(
        backend.bytes(0, size) == model.bytes,
        "{}: memory differs from the model after {ops:?}",
        what()
    );
}

/// A read that is queued and then dropped before its flush: nothing may
/// reach its buffer.
pub fn abandoned<'a>(
    mem: &'a Memory,
    scope: &'a Scope<'a, '_>,
    addr: u64,
    via: Via,
    buf: &'a mut Vec<u8>,
) -> Boxed<'a> {
    if via == Via::Scoped {
        let read = scope.read(addr, buf);
        return Box::pin(async move {
            queue_and_drop(read).await;
            Outcome::Read(Vec::new(), Ok(()))
        });
    }
    Box::pin(async move {
        queue_and_drop(mem.read(addr, &mut buf[..])).await;
        Outcome::Read(std::mem::take(buf), Ok(()))
    })
}

/// Polls `read` once (it queues its request) and drops it.
pub async fn queue_and_drop<F: Future + Unpin>(mut read: F) {
    futures::future::poll_fn(|cx| {
        assert!(Pin::new(&mut read).poll(cx).is_pending());
        Poll::Ready(())
    })
    .await;
}
