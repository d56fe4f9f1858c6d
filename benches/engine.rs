//! CPU cost per read: the engine against a direct `Backend::read_scatter`
//! call on the in-memory backend, and against the least a design with a
//! future per read can cost (`Floor`), for batches of 1 to 4096 reads; and
//! the engine's synchronous batch (`read_now`), which plans the same way
//! without futures. The engine is measured reading into borrowed, scoped
//! and owned buffers, and, for 8 bytes, reading values (`read_val`).
//!
//! The same on LeechCore's file device (`file device, read …` groups): the
//! engine against a direct `LeechCore` scatter call on the same device, so
//! that what a call into LeechCore costs the engine shows, which the
//! in-memory backend hides.
//!
//! `cargo bench --bench engine` (criterion; add `-- --quick` for a short run).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use leechio::{Backend, MemBackend, Memory, ScatterEntry};

const MEMORY: usize = 64 << 20;
const BATCHES: [usize; 4] = [1, 16, 256, 4096];
const SIZES: [usize; 2] = [8, 4096];

/// Polls every unfinished future on each wake-up, in place, and checks
/// and drops their outputs: the least a join can cost, so that what is
/// measured is the engine. (`leechio::join_all` works the same way but also collects
/// the outputs, one more allocation per batch; futures' `join_all` gives
/// each of more than 30 futures a task of its own.)
struct JoinSlice<'a, F: Future> {
    futures: &'a mut [(bool, F)],
    left: usize,
}

/// An output that says whether its read succeeded.
trait Succeeded {
    fn succeeded(&self) -> bool;
}

impl Succeeded for () {
    fn succeeded(&self) -> bool {
        true
    }
}

impl<E> Succeeded for Result<(), E> {
    fn succeeded(&self) -> bool {
        self.is_ok()
    }
}

impl<F: Future + Unpin> Future for JoinSlice<'_, F>
where
    F::Output: Succeeded,
{
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        for (done, f) in this.futures.iter_mut() {
            if *done {
                continue;
            }
            if let Poll::Ready(out) = Pin::new(f).poll(cx) {
                assert!(out.succeeded(), "a read failed");
                *done = true;
                this.left -= 1;
            }
        }
        if this.left == 0 {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// A `read_val::<u64>` that checks the value it read against the address
/// pattern (the value at `a` is `a`), as the other rows' bytes are checked
/// after them.
struct CheckVal<'m>(leechio::engine::ReadVal<'m, u64>, u64);

impl Future for CheckVal<'_> {
    type Output = ();

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let addr = self.1;
        Pin::new(&mut self.0).poll(cx).map(|value| match value {
            Ok(v) if v == addr => {}
            other => wrong_value(addr, other),
        })
    }
}

#[cold]
fn wrong_value(addr: u64, value: Result<u64, leechio::PartialError>) -> ! {
    panic!("the value read at {addr:#x}: {value:?}")
}

/// Keeps the buffer a `read_into_owned` returns, so the join can drop
/// finished futures and the next iteration reuses the buffers.
struct CollectOwned<'m>(leechio::engine::ReadOwned<'m>, Option<Vec<u8>>);

impl Future for CollectOwned<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match Pin::new(&mut self.0).poll(cx) {
            Poll::Ready((buf, result)) => {
                assert!(result.is_ok());
                self.1 = Some(buf);
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The least a design with a future per read can cost, measured beside
/// the engine to show how much of its overhead any such design pays: each
/// future queues its address and buffer on its first poll, a flush makes
/// one `read_scatter` call straight into the buffers and wakes each task
/// once, and the second poll returns. Nothing else: one thread, no lock,
/// no page read once for two reads, no failure ranges, no device limits,
/// and unsound if a future is leaked (it keeps a raw pointer to a
/// borrowed buffer).
#[derive(Default)]
struct Floor {
    queue: RefCell<Vec<ScatterEntry<'static>>>,
    wakers: RefCell<Vec<Waker>>,
    queued: Cell<u64>,
    completed: Cell<u64>,
}

struct FloorRead<'f, 'b> {
    floor: &'f Floor,
    addr: u64,
    buf: &'b mut [u8],
    /// Its place in the order of queued reads, once queued.
    ticket: Option<u64>,
}

impl Future for FloorRead<'_, '_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let floor = self.floor;
        match self.ticket {
            Some(t) if t < floor.completed.get() => Poll::Ready(()),
            Some(_) => Poll::Pending,
            None => {
                let t = floor.queued.get();
                floor.queued.set(t + 1);
                self.ticket = Some(t);
                let (addr, buf) = (self.addr, &mut *self.buf);
                // SAFETY (of the bench only): the buffer outlives the
                // flush, since every future is polled to completion.
                let buf = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr(), buf.len()) };
                floor.queue.borrow_mut().push(ScatterEntry::new(addr, buf));
                let mut wakers = floor.wakers.borrow_mut();
                if !wakers.last().is_some_and(|w| w.will_wake(cx.waker())) {
                    wakers.push(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

impl Floor {
    /// Reads everything queued in one call and wakes the waiters.
    fn flush(&self, backend: &dyn Backend) {
        let mut queue = self.queue.borrow_mut();
        backend.read_scatter(&mut queue);
        assert!(queue.iter().all(|e| e.result.is_ok()));
        queue.clear();
        self.completed.set(self.queued.get());
        for waker in self.wakers.borrow_mut().drain(..) {
            waker.wake();
        }
    }

    /// Drives `future`, flushing whenever it waits.
    fn block_on<F: Future>(&self, backend: &dyn Backend, future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        loop {
            if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                return out;
            }
            self.flush(backend);
        }
    }
}

/// Checks that every buffer holds the pattern of its address (what
/// `MemBackend::with_address_pattern` has there), then overwrites them, so
/// the next row cannot pass on bytes this one read.
fn check_and_poison<B: AsMut<[u8]>>(bufs: &mut [B], addrs: &[u64]) {
    for (buf, &addr) in bufs.iter_mut().zip(addrs) {
        let buf = buf.as_mut();
        assert_eq!(buf[..8], addr.to_le_bytes(), "the bytes read at {addr:#x}");
        buf.fill(0xa5);
    }
}

/// Distinct random page-aligned addresses (no page shared, so the engine
/// gains nothing from reading a page once).
fn addresses(n: usize) -> Vec<u64> {
    let mut rng = fastrand::Rng::with_seed(42);
    let mut pages: Vec<u64> = (0..(MEMORY / 4096) as u64).collect();
    rng.shuffle(&mut pages);
    pages.truncate(n);
    pages.into_iter().map(|p| p * 4096).collect()
}

fn per_read(c: &mut Criterion) {
    let backend = std::sync::Arc::new(MemBackend::with_address_pattern(MEMORY));
    let mem = Memory::with_config(backend.clone(), Default::default());
    // Called through the trait object, as the engine calls it, so that
    // inlining into the bench loop does not decide the baseline.
    let direct: &dyn Backend = &*backend;
    for size in SIZES {
        let mut group = c.benchmark_group(format!("read {size} B"));
        for batch in BATCHES {
            let addrs = addresses(batch);
            let mut bufs = vec![vec![0u8; size]; batch];
            // Whether the row just defined ran (a filter may skip it).
            let mut ran = false;
            group.throughput(Throughput::Elements(batch as u64));
            group.bench_with_input(
                BenchmarkId::new("direct read_scatter", batch),
                &batch,
                |b, _| {
                    ran = true;
                    b.iter(|| {
                        let mut entries: Vec<ScatterEntry> = addrs
                            .iter()
                            .zip(bufs.iter_mut())
                            .map(|(&a, buf)| ScatterEntry::new(a, buf))
                            .collect();
                        direct.read_scatter(&mut entries);
                        assert!(entries.iter().all(|e| e.result.is_ok()));
                    })
                },
            );
            if std::mem::take(&mut ran) {
                check_and_poison(&mut bufs, &addrs);
            }
            let floor = Floor::default();
            group.bench_with_input(
                BenchmarkId::new("floor of futures", batch),
                &batch,
                |b, _| {
                    ran = true;
                    b.iter(|| {
                        let mut futures: Vec<_> = addrs
                            .iter()
                            .zip(bufs.iter_mut())
                            .map(|(&addr, buf)| {
                                let read = FloorRead {
                                    floor: &floor,
                                    addr,
                                    buf,
                                    ticket: None,
                                };
                                (false, read)
                            })
                            .collect();
                        floor.block_on(
                            &*backend,
                            JoinSlice {
                                left: futures.len(),
                                futures: &mut futures,
                            },
                        );
                    })
                },
            );
            if std::mem::take(&mut ran) {
                check_and_poison(&mut bufs, &addrs);
            }
            // The synchronous batch, the path of the memflow plugin and the
            // C API: the engine's planning and failure ranges, no futures.
            group.bench_with_input(
                BenchmarkId::new("engine read_now", batch),
                &batch,
                |b, _| {
                    ran = true;
                    b.iter(|| {
                        let ops = addrs.iter().zip(bufs.iter_mut());
                        let outcome = mem.read_now(ops.map(|(&a, buf)| (a, &mut buf[..])));
                        assert!(outcome.is_ok());
                    })
                },
            );
            if std::mem::take(&mut ran) {
                check_and_poison(&mut bufs, &addrs);
            }
            // Like the direct path, one vector per batch.
            group.bench_with_input(BenchmarkId::new("engine read", batch), &batch, |b, _| {
                ran = true;
                b.iter(|| {
                    let mut futures: Vec<_> = addrs
                        .iter()
                        .zip(bufs.iter_mut())
                        .map(|(&a, buf)| (false, mem.read(a, buf)))
                        .collect();
                    mem.block_on(JoinSlice {
                        left: futures.len(),
                        futures: &mut futures,
                    });
                })
            });
            if std::mem::take(&mut ran) {
                check_and_poison(&mut bufs, &addrs);
            }
            // One value a read, the natural way to read 8 bytes: no buffer
            // to lend, the value comes back in the output.
            if size == 8 {
                group.bench_with_input(
                    BenchmarkId::new("engine read_val", batch),
                    &batch,
                    |b, _| {
                        b.iter(|| {
                            let mut futures: Vec<_> = addrs
                                .iter()
                                .map(|&a| (false, CheckVal(mem.read_val::<u64>(a), a)))
                                .collect();
                            mem.block_on(JoinSlice {
                                left: futures.len(),
                                futures: &mut futures,
                            });
                        })
                    },
                );
            }
            // The caller's buffers lent for a scope: no copy either.
            group.bench_with_input(
                BenchmarkId::new("engine scoped read", batch),
                &batch,
                |b, _| {
                    ran = true;
                    b.iter(|| {
                        mem.scope(|s| {
                            let mut futures: Vec<_> = addrs
                                .iter()
                                .zip(bufs.iter_mut())
                                .map(|(&a, buf)| (false, s.read(a, buf)))
                                .collect();
                            mem.block_on(JoinSlice {
                                left: futures.len(),
                                futures: &mut futures,
                            });
                        })
                    })
                },
            );
            if std::mem::take(&mut ran) {
                check_and_poison(&mut bufs, &addrs);
            }
            // Owned buffers move in and out: no copy through the engine.
            let mut owned: Vec<Vec<u8>> = vec![vec![0u8; size]; batch];
            group.bench_with_input(
                BenchmarkId::new("engine read_into_owned", batch),
                &batch,
                |b, _| {
                    ran = true;
                    b.iter(|| {
                        let mut futures: Vec<_> = addrs
                            .iter()
                            .zip(owned.drain(..))
                            .map(|(&a, buf)| {
                                (false, CollectOwned(mem.read_into_owned(a, buf), None))
                            })
                            .collect();
                        mem.block_on(JoinSlice {
                            left: futures.len(),
                            futures: &mut futures,
                        });
                        owned.extend(futures.into_iter().map(|(_, f)| f.1.unwrap_or_default()));
                    })
                },
            );
            if std::mem::take(&mut ran) {
                check_and_poison(&mut owned, &addrs);
            }
        }
        group.finish();
    }
}

/// The file device's image: the address pattern of `MemBackend` (each
/// 8-byte word holds its own address), in a temporary file.
fn pattern_image() -> tempfile::TempPath {
    use std::io::Write;
    let file = tempfile::NamedTempFile::new().expect("a temporary image");
    let mut out = std::io::BufWriter::new(file.as_file());
    for addr in (0..MEMORY as u64).step_by(8) {
        out.write_all(&addr.to_le_bytes()).expect("write the image");
    }
    out.flush().expect("write the image");
    drop(out);
    file.into_temp_path()
}

fn per_read_on_leechcore(c: &mut Criterion) {
    let image = pattern_image();
    let config = leechio::DeviceConfig::new(format!("file://{}", image.display()));
    let device =
        std::sync::Arc::new(leechio::LeechCore::open(&config).expect("LeechCore (make setup)"));
    let mem = Memory::with_config(device.clone(), Default::default());
    let direct: &dyn Backend = &*device;
    for size in SIZES {
        let mut group = c.benchmark_group(format!("file device, read {size} B"));
        for batch in [1, 16, 256] {
            let addrs = addresses(batch);
            let mut bufs = vec![vec![0u8; size]; batch];
            let mut ran = false;
            group.throughput(Throughput::Elements(batch as u64));
            group.bench_with_input(
                BenchmarkId::new("direct read_scatter", batch),
                &batch,
                |b, _| {
                    ran = true;
                    b.iter(|| {
                        let mut entries: Vec<ScatterEntry> = addrs
                            .iter()
                            .zip(bufs.iter_mut())
                            .map(|(&a, buf)| ScatterEntry::new(a, buf))
                            .collect();
                        direct.read_scatter(&mut entries);
                        assert!(entries.iter().all(|e| e.result.is_ok()));
                    })
                },
            );
            if std::mem::take(&mut ran) {
                check_and_poison(&mut bufs, &addrs);
            }
            group.bench_with_input(
                BenchmarkId::new("engine read_now", batch),
                &batch,
                |b, _| {
                    ran = true;
                    b.iter(|| {
                        let ops = addrs.iter().zip(bufs.iter_mut());
                        let outcome = mem.read_now(ops.map(|(&a, buf)| (a, &mut buf[..])));
                        assert!(outcome.is_ok());
                    })
                },
            );
            if std::mem::take(&mut ran) {
                check_and_poison(&mut bufs, &addrs);
            }
            group.bench_with_input(BenchmarkId::new("engine read", batch), &batch, |b, _| {
                ran = true;
                b.iter(|| {
                    let reads = addrs
                        .iter()
                        .zip(bufs.iter_mut())
                        .map(|(&addr, buf)| mem.read(addr, buf));
                    let results = mem.block_on(leechio::join_all(reads));
                    assert!(results.iter().all(Result::is_ok));
                })
            });
            if std::mem::take(&mut ran) {
                check_and_poison(&mut bufs, &addrs);
            }
        }
        group.finish();
    }
}

criterion_group!(benches, per_read, per_read_on_leechcore);
criterion_main!(benches);
