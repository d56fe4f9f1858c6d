//! The engine against a byte-level model: random batches of reads and
//! writes of any size and alignment, across pages, holes and the end of
//! memory, in every form (borrowed, owned, fragment streams, scoped,
//! synchronous batches), must leave and see exactly what running them one by one would.
//! Then the same from several threads sharing one engine, with some reads
//! abandoned midway.

use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use fastrand::Rng;
use futures::StreamExt;
use leechio::engine::Fragments;
use leechio::{EngineConfig, Failure, MemBackend, Memory, PageError, PartialError, Scope};

const PAGE: u64 = 0x1000;
/// The model's memory: eight pages, the sixth one a hole.
const MEMORY: u64 = 8 * PAGE;
const HOLE: Range<u64> = 5 * PAGE..6 * PAGE;
const HOLE_REASON: PageError = PageError::UnsupportedRequest;
/// What a read buffer holds before the read: failed bytes must keep it.
const UNTOUCHED: u8 = 0x5a;

/// What running requests one by one does, byte by byte.
struct Model {
    bytes: Vec<u8>,
    hole: Option<Range<u64>>,
}

impl Model {
    fn new(bytes: Vec<u8>, hole: Option<Range<u64>>) -> Self {
        Model { bytes, hole }
    }

    /// Why the byte at `addr` cannot be read or written, if it cannot.
    fn failure_at(&self, addr: u64) -> Option<PageError> {
        if addr >= self.bytes.len() as u64 {
            Some(PageError::OutOfRange)
        } else if self.hole.as_ref().is_some_and(|h| h.contains(&addr)) {
            Some(HOLE_REASON)
        } else {
            None
        }
    }

    /// The failed runs of `len` bytes at `addr`.
    fn failures(&self, addr: u64, len: usize) -> Vec<Failure> {
        runs((addr..addr + len as u64).map(|a| self.failure_at(a)))
    }

    fn result(&self, addr: u64, len: usize) -> Result<(), PartialError> {
        let failed = self.failures(addr, len);
        if failed.is_empty() {
            Ok(())
        } else {
            Err(PartialError { failed, len })
        }
    }

    /// What a read of `len` bytes at `addr` leaves in a fresh buffer.
    fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        (addr..addr + len as u64)
            .map(|a| match self.failure_at(a) {
                Some(_) => UNTOUCHED,
                None => self.bytes[a as usize],
            })
            .collect()
    }

    fn write(&mut self, addr: u64, data: &[u8]) {
        for (a, &b) in (addr..).zip(data) {
            if self.failure_at(a).is_none() {
                self.bytes[a as usize] = b;
            }
        }
    }
}

/// The failed runs of a request from the fate of each of its bytes,
/// merged as the engine reports them (a new run where the reason changes).
fn runs(reasons: impl IntoIterator<Item = Option<PageError>>) -> Vec<Failure> {
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
enum Op {
    Read { addr: u64, len: usize, via: Via },
    Write { addr: u64, data: Vec<u8>, via: Via },
}

/// Which form of the request the engine gets.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Via {
    /// `read` / `write`, with the caller's buffer.
    Borrowed,
    /// `read_into_owned` / `write_from_owned`.
    Owned,
    /// `read_fragments` / `write_fragments`, a stream of page pieces.
    Fragments,
    /// A scope's `read` / `write`, straight on the caller's buffer.
    Scoped,
}

/// Short enough to list a whole batch in a failure message.
impl std::fmt::Debug for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (addr, len) = self.span();
        let (kind, via) = match self {
            Op::Read { via, .. } => ("read", via),
            Op::Write { via, .. } => ("write", via),
        };
        write!(f, "{kind} ({via:?}) {len:#x} at {addr:#x}")
    }
}

impl Op {
    /// Its address and length.
    fn span(&self) -> (u64, usize) {
        match self {
            Op::Read { addr, len, .. } => (*addr, *len),
            Op::Write { addr, data, .. } => (*addr, data.len()),
        }
    }

    /// The same request `by` bytes higher.
    fn shifted(&self, by: u64) -> Op {
        let mut op = self.clone();
        match &mut op {
            Op::Read { addr, .. } | Op::Write { addr, .. } => *addr += by,
        }
        op
    }
}

/// What a request gave back.
#[derive(Debug, PartialEq)]
enum Outcome {
    Read(Vec<u8>, Result<(), PartialError>),
    Write(Result<(), PartialError>),
}

/// An address near a page edge or anywhere, up to a page past the end.
fn address(rng: &mut Rng) -> u64 {
    let page = rng.u64(0..=MEMORY / PAGE) * PAGE;
    match rng.u8(0..3) {
        0 => page + rng.u64(0..16),
        1 => (page + PAGE).saturating_sub(rng.u64(1..=16)),
        _ => page + rng.u64(0..PAGE),
    }
}

/// Mostly small requests, some spanning pages.
fn length(rng: &mut Rng) -> usize {
    match rng.u8(0..4) {
        0..=1 => rng.usize(1..=16),
        2 => rng.usize(1..=PAGE as usize),
        _ => rng.usize(1..=2 * PAGE as usize + 0x100),
    }
}

fn random_op(rng: &mut Rng) -> Op {
    let (addr, len) = (address(rng), length(rng));
    let via = [Via::Borrowed, Via::Owned, Via::Fragments, Via::Scoped][rng.usize(0..4)];
    if rng.bool() {
        Op::Read { addr, len, via }
    } else {
        let data = std::iter::repeat_with(|| rng.u8(..)).take(len).collect();
        Op::Write { addr, data, via }
    }
}

type Boxed<'a> = Pin<Box<dyn Future<Output = Outcome> + Send + 'a>>;

/// Polls every future in the order given (the order requests are queued
/// in, which is program order) until all are done.
async fn in_order(mut futures: Vec<Boxed<'_>>) -> Vec<Outcome> {
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
/// back an empty one, for `with_scoped_buffers` to fill in.
fn start<'a>(
    mem: &'a Memory,
    scope: &'a Scope<'a, '_>,
    op: &'a Op,
    buf: &'a mut Vec<u8>,
) -> Boxed<'a> {
    match *op {
        Op::Read {
            addr,
            via: Via::Scoped,
            ..
        } => {
            let read = scope.read(addr, buf);
            Box::pin(async move { Outcome::Read(Vec::new(), read.await) })
        }
        Op::Read { addr, len, via } => Box::pin(async move {
            let result = match via {
                Via::Owned => {
                    let owned = mem.read_into_owned(addr, vec![UNTOUCHED; len]);
                    let (filled, result) = owned.await;
                    *buf = filled;
                    result
                }
                Via::Borrowed => mem.read(addr, buf).await,
                Via::Fragments => joined(addr, mem.read_fragments(addr, buf)).await,
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
                Via::Fragments => joined(addr, mem.write_fragments(addr, data)).await,
                Via::Scoped => scope.write(addr, data).await,
            })
        }),
    }
}

/// Runs the futures of `ops` in one scope, in order, and gives scoped
/// reads their buffers back once it has ended.
fn run_futures(
    mem: &Memory,
    ops: &[Op],
    mut bufs: Vec<Vec<u8>>,
    abandon: impl Fn(usize) -> bool,
) -> Vec<Outcome> {
    let mut got = mem.scope(|s| {
        let futures = ops
            .iter()
            .zip(bufs.iter_mut())
            .enumerate()
            .map(|(i, (op, buf))| match op {
                &Op::Read { addr, via, .. } if abandon(i) => abandoned(mem, s, addr, via, buf),
                op => start(mem, s, op, buf),
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
/// its fragments, which must come in order, each inside one page (or, past
/// the end of memory, all in one).
async fn joined(addr: u64, mut fragments: Fragments<'_, '_>) -> Result<(), PartialError> {
    let mut reasons = Vec::new();
    while let Some(f) = fragments.next().await {
        assert_eq!(f.offset, reasons.len(), "a fragment out of order: {f:?}");
        let (first, last) = (addr + f.offset as u64, addr + (f.offset + f.len) as u64 - 1);
        let past_end = first >= MEMORY && f.result == Err(PageError::OutOfRange);
        assert!(
            f.len > 0 && (first / PAGE == last / PAGE || past_end),
            "a fragment across pages: {f:?}"
        );
        if past_end {
            assert!(fragments.next().await.is_none(), "a fragment after the end");
            reasons.resize(reasons.len() + f.len, f.result.err());
            break;
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
fn check(got: &Outcome, want: &Outcome, context: impl Fn() -> String) {
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
fn run_now(mem: &Memory, ops: &[Op]) -> Vec<Outcome> {
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
fn expected(model: &mut Model, ops: &[Op]) -> Vec<Outcome> {
    ops.iter()
        .map(|op| match op {
            &Op::Read { addr, len, .. } => {
                Outcome::Read(model.read(addr, len), model.result(addr, len))
            }
            Op::Write { addr, data, .. } => {
                let result = model.result(*addr, data.len());
                model.write(*addr, data);
                Outcome::Write(result)
            }
        })
        .collect()
}

fn read_buffers(ops: &[Op]) -> Vec<Vec<u8>> {
    ops.iter()
        .map(|op| match op {
            Op::Read { len, .. } => vec![UNTOUCHED; *len],
            Op::Write { .. } => Vec::new(),
        })
        .collect()
}

fn backend() -> Arc<MemBackend> {
    let backend = MemBackend::with_address_pattern(MEMORY as usize);
    backend.add_hole(HOLE, HOLE_REASON);
    Arc::new(backend)
}

#[test]
fn random_batches_see_and_leave_what_running_them_in_order_would() {
    for seed in 0..400 {
        let mut rng = Rng::with_seed(seed);
        let backend = backend();
        let max_entries = [1, 3, 64, usize::MAX][rng.usize(0..4)];
        let config = EngineConfig {
            max_entries_per_call: max_entries,
        };
        let mem = Memory::with_config(backend.clone(), config);
        let mut model = Model::new(backend.bytes(0, MEMORY as usize), Some(HOLE));
        // Batches of futures (each one flush, of one or more rounds), then
        // a synchronous batch of writes and one of reads.
        for batch in 0..5 {
            let kind = |op: &Op| match batch {
                3 => matches!(op, Op::Write { .. }),
                4 => matches!(op, Op::Read { .. }),
                _ => true,
            };
            let ops: Vec<Op> = (0..rng.usize(1..=24))
                .map(|_| {
                    std::iter::repeat_with(|| random_op(&mut rng))
                        .find(kind)
                        .unwrap()
                })
                .collect();
            let got = if batch < 3 {
                run_futures(&mem, &ops, read_buffers(&ops), |_| false)
            } else {
                run_now(&mem, &ops)
            };
            let want = expected(&mut model, &ops);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                check(g, w, || {
                    format!("seed {seed}, batch {batch}, op {i} of {ops:?}")
                });
            }
            assert!(
                backend.bytes(0, MEMORY as usize) == model.bytes,
                "seed {seed}, batch {batch}: memory differs from the model after {ops:?}"
            );
        }
    }
}

/// A read that is queued and then dropped before its flush: nothing may
/// reach its buffer.
fn abandoned<'a>(
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
async fn queue_and_drop<F: Future + Unpin>(mut read: F) {
    futures::future::poll_fn(|cx| {
        assert!(Pin::new(&mut read).poll(cx).is_pending());
        Poll::Ready(())
    })
    .await;
}

#[test]
fn threads_sharing_an_engine_each_keep_their_program_order() {
    const THREADS: u64 = 4;
    // Each thread owns the model's memory shifted to its own region, so
    // the model holds per thread; flushes serve every thread's requests.
    let backend = Arc::new(MemBackend::with_address_pattern(
        (THREADS * MEMORY) as usize,
    ));
    let mem = Memory::with_config(backend.clone(), EngineConfig::default());
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (mem, backend) = (mem.clone(), &backend);
            s.spawn(move || {
                let base = t * MEMORY;
                let mut rng = Rng::with_seed(1000 + t);
                let mut model = Model::new(backend.bytes(base, MEMORY as usize), None);
                for batch in 0..150 {
                    // Inside memory and without holes: the other threads'
                    // regions follow this one.
                    let ops: Vec<Op> = (0..rng.usize(1..=40))
                        .map(|_| loop {
                            let op = random_op(&mut rng);
                            let (addr, len) = op.span();
                            if addr + len as u64 <= MEMORY {
                                break op;
                            }
                        })
                        .collect();
                    let dropped: Vec<bool> = ops
                        .iter()
                        .map(|op| {
                            matches!(
                                op,
                                Op::Read {
                                    via: Via::Borrowed | Via::Scoped,
                                    ..
                                }
                            ) && rng.u8(0..4) == 0
                        })
                        .collect();
                    let shifted: Vec<Op> = ops.iter().map(|op| op.shifted(base)).collect();
                    let got = run_futures(&mem, &shifted, read_buffers(&ops), |i| dropped[i]);
                    let kept: Vec<Op> = ops
                        .iter()
                        .zip(&dropped)
                        .filter(|(_, &d)| !d)
                        .map(|(op, _)| op.clone())
                        .collect();
                    let mut want = expected(&mut model, &kept).into_iter();
                    for (i, (g, &d)) in got.iter().zip(&dropped).enumerate() {
                        if d {
                            let Outcome::Read(buf, _) = g else {
                                unreachable!()
                            };
                            assert!(
                                buf.iter().all(|&b| b == UNTOUCHED),
                                "thread {t}, batch {batch}: abandoned read {i} was written"
                            );
                        } else {
                            let w = want.next().unwrap();
                            check(g, &w, || format!("thread {t}, batch {batch}, op {i}"));
                        }
                    }
                }
                assert!(
                    backend.bytes(base, MEMORY as usize) == model.bytes,
                    "thread {t}: its memory differs from its model"
                );
            });
        }
    });
}
