//! CPU cost per read: the engine against a direct `Backend::read_scatter`
//! call on the in-memory backend, for batches of 1 to 4096 reads.
//!
//! `cargo bench --bench engine` (criterion; add `-- --quick` for a short run).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use leechio::{Backend, MemBackend, Memory, ScatterEntry};

const MEMORY: usize = 64 << 20;
const BATCHES: [usize; 4] = [1, 16, 256, 4096];
const SIZES: [usize; 2] = [8, 4096];

/// Polls every unfinished future on each wake-up, in place, and drops
/// their outputs: the least a join can cost, so that what is measured is
/// the engine. (`leechio::join_all` works the same way but also collects
/// the outputs, one more allocation per batch; futures' `join_all` gives
/// each of more than 30 futures a task of its own.)
struct JoinSlice<'a, F: Future> {
    futures: &'a mut [(bool, F)],
    left: usize,
}

impl<F: Future + Unpin> Future for JoinSlice<'_, F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        for (done, f) in this.futures.iter_mut() {
            if !*done && Pin::new(f).poll(cx).is_ready() {
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
    for size in SIZES {
        let mut group = c.benchmark_group(format!("read {size} B"));
        for batch in BATCHES {
            let addrs = addresses(batch);
            let mut bufs = vec![vec![0u8; size]; batch];
            group.throughput(Throughput::Elements(batch as u64));
            group.bench_with_input(
                BenchmarkId::new("direct read_scatter", batch),
                &batch,
                |b, _| {
                    b.iter(|| {
                        let mut entries: Vec<ScatterEntry> = addrs
                            .iter()
                            .zip(bufs.iter_mut())
                            .map(|(&a, buf)| ScatterEntry::new(a, buf))
                            .collect();
                        backend.read_scatter(&mut entries);
                        assert!(entries.iter().all(|e| e.result.is_ok()));
                    })
                },
            );
            // Like the direct path, one vector per batch.
            group.bench_with_input(BenchmarkId::new("engine read", batch), &batch, |b, _| {
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
            // The caller's buffers lent for a scope: no copy either.
            group.bench_with_input(
                BenchmarkId::new("engine scoped read", batch),
                &batch,
                |b, _| {
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
            // Owned buffers move in and out: no copy through the engine.
            let mut owned: Vec<Vec<u8>> = vec![vec![0u8; size]; batch];
            group.bench_with_input(
                BenchmarkId::new("engine read_into_owned", batch),
                &batch,
                |b, _| {
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
        }
        group.finish();
    }
}

criterion_group!(benches, per_read);
criterion_main!(benches);
