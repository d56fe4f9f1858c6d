//! A virtual range as physical runs: every 4 KiB page of it translated in
//! one batch of walks, physically contiguous pages merged into runs, and
//! each run accessed with its part of the caller's buffer.

use std::future::Future;

use super::paging::{PageSize, Translation, WalkError};
use super::AddressSpace;
use crate::engine::{merged, Failure, PartialError};
use crate::{join_all, PageError};

impl AddressSpace {
    /// Translates `va..va + buf.len()` and runs `access` on each physical
    /// run with its part of `buf`, all in one batch.
    pub(super) async fn access<B, A, F>(
        &self,
        va: u64,
        buf: B,
        access: A,
    ) -> Result<(), PartialError>
    where
        B: Split,
        A: Fn(u64, B) -> F,
        F: Future<Output = Result<(), PartialError>>,
    {
        let len = buf.len();
        if in_one_page(va, len) {
            return match self.translate(va).await {
                Ok(t) => access(t.pa, buf).await,
                Err(e) => Err(wholly_failed(len, e.reason)),
            };
        }
        let (runs, failures) = self.plan(va, len).await;
        access_runs(buf, &runs, failures, access).await
    }

    /// The physical runs of `va..va + len` and the bytes that cannot be
    /// translated, as `access` finds them.
    pub(super) async fn plan(&self, va: u64, len: usize) -> (Vec<Run>, Vec<Failure>) {
        if in_one_page(va, len) {
            return match self.translate(va).await {
                Ok(t) => (
                    vec![Run {
                        offset: 0,
                        len,
                        pa: t.pa,
                    }],
                    Vec::new(),
                ),
                Err(e) => (Vec::new(), wholly_failed(len, e.reason).failed),
            };
        }
        let mut failures = Vec::new();
        let runs = self.resolve(va, len, &mut failures).await;
        (runs, failures)
    }

    /// Translates every 4 KiB virtual page of `va..va+len` at once (one
    /// walk level per flush) and returns the physical runs to access,
    /// merging pages that are contiguous in physical memory. Bytes that
    /// cannot be translated go to `failures`.
    async fn resolve(&self, va: u64, len: usize, failures: &mut Vec<Failure>) -> Vec<Run> {
        let mut pieces = Vec::new();
        let mut offset = 0usize;
        while offset < len {
            let Some(at) = va.checked_add(offset as u64) else {
                failures.push(Failure {
                    offset,
                    len: len - offset,
                    reason: PageError::AddressOverflow,
                });
                break;
            };
            if !self.inner.paging.is_canonical(at) {
                // The whole non-canonical hole fails at once, not page by
                // page (a mistaken length could span exabytes of it).
                let upper_half = self.inner.paging.upper_half();
                let to_upper_half = usize::try_from(upper_half - at).unwrap_or(usize::MAX);
                let n = (len - offset).min(to_upper_half);
                failures.push(Failure {
                    offset,
                    len: n,
                    reason: PageError::NonCanonical,
                });
                offset += n;
                continue;
            }
            let n = (len - offset).min((0x1000 - (at & 0xfff)) as usize);
            pieces.push((offset, n, at));
            offset += n;
        }
        // The first page of each 2 MiB region first: where a large page maps
        // it, the rest of that page needs no walk of its own, and the other
        // pages' walks find their tables cached. Without the table cache a
        // second round would walk every level again: all pages go at once.
        let mut translations: Vec<Option<Result<Translation, WalkError>>> =
            vec![None; pieces.len()];
        let cached = self.inner.tables.enabled();
        let firsts: Vec<usize> = (0..pieces.len())
            .filter(|&i| !cached || i == 0 || pieces[i].2 >> 21 != pieces[i - 1].2 >> 21)
            .collect();
        let found = join_all(firsts.iter().map(|&i| self.translate(pieces[i].2))).await;
        for (&i, t) in firsts.iter().zip(found) {
            if let Ok(t) = &t {
                let base_va = t.va & !(t.page_size.bytes() - 1);
                for (slot, &(_, _, at)) in translations.iter_mut().zip(&pieces).skip(i + 1) {
                    if t.page_size == PageSize::Size4K || at - base_va >= t.page_size.bytes() {
                        break;
                    }
                    *slot = Some(Ok(Translation {
                        va: at,
                        pa: t.pa + (at - t.va),
                        ..*t
                    }));
                }
            }
            translations[i] = Some(t);
        }
        // The rest from the page table the first of their region found
        // (read just now), not again from the top.
        let rest: Vec<(usize, Option<Translation>)> = (0..pieces.len())
            .filter(|&i| translations[i].is_none())
            .map(|i| {
                let first = firsts.iter().rev().find(|&&f| f < i);
                let near = first.and_then(|&f| translations[f]?.ok());
                (i, near)
            })
            .collect();
        let found = join_all(rest.iter().map(|(i, near)| {
            let va = pieces[*i].2;
            async move {
                match near {
                    Some(near) => self.translate_beside(va, near).await,
                    None => self.translate(va).await,
                }
            }
        }))
        .await;
        let rest: Vec<usize> = rest.iter().map(|r| r.0).collect();
        for (&i, t) in rest.iter().zip(found) {
            translations[i] = Some(t);
        }
        let translations = translations
            .into_iter()
            .map(|t| t.expect("every piece translated"));
        let mut runs: Vec<Run> = Vec::with_capacity(pieces.len());
        for (&(offset, len, _), t) in pieces.iter().zip(translations) {
            match t {
                Ok(t) => match runs.last_mut() {
                    Some(r) if r.offset + r.len == offset && r.pa + r.len as u64 == t.pa => {
                        r.len += len
                    }
                    _ => runs.push(Run {
                        offset,
                        len,
                        pa: t.pa,
                    }),
                },
                Err(e) => failures.push(Failure {
                    offset,
                    len,
                    reason: e.reason,
                }),
            }
        }
        runs
    }
}

/// Runs `access` on each of `runs` with its part of `buf`, all in one
/// batch; the result has their failures and `failures` (bytes that could
/// not be translated).
pub(super) async fn access_runs<B, A, F>(
    buf: B,
    runs: &[Run],
    failures: Vec<Failure>,
    access: A,
) -> Result<(), PartialError>
where
    B: Split,
    A: Fn(u64, B) -> F,
    F: Future<Output = Result<(), PartialError>>,
{
    let len = buf.len();
    let parts = buf.split_runs(runs).map(|(run, part)| {
        let done = access(run.pa, part);
        async move { (run.offset, done.await) }
    });
    collect(len, failures, join_all(parts).await)
}

/// A virtually and physically contiguous part of a request.
#[derive(Debug, Clone, Copy)]
pub(super) struct Run {
    offset: usize,
    len: usize,
    pa: u64,
}

/// A buffer that splits into the disjoint parts physical runs cover: a
/// read's `&mut [u8]` or a write's `&[u8]`.
pub(super) trait Split: Sized + Default {
    fn len(&self) -> usize;
    fn split_at(self, mid: usize) -> (Self, Self);

    /// The parts of `self` the runs cover, each with its run.
    fn split_runs(self, runs: &[Run]) -> impl Iterator<Item = (&Run, Self)> {
        let mut rest = self;
        let mut consumed = 0;
        runs.iter().map(move |run| {
            let (_, tail) = std::mem::take(&mut rest).split_at(run.offset - consumed);
            let (part, tail) = tail.split_at(run.len);
            rest = tail;
            consumed = run.offset + run.len;
            (run, part)
        })
    }
}

impl Split for &mut [u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }

    fn split_at(self, mid: usize) -> (Self, Self) {
        self.split_at_mut(mid)
    }
}

impl Split for &[u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }

    fn split_at(self, mid: usize) -> (Self, Self) {
        <[u8]>::split_at(self, mid)
    }
}

/// Whether `va..va+len` is inside one 4 KiB page: the common access (a
/// value, a pointer), which needs one translation and one engine request
/// and none of `resolve`'s planning (whose vectors and joins cost a
/// cached read several times its engine request).
fn in_one_page(va: u64, len: usize) -> bool {
    len > 0 && (va & 0xfff) + len as u64 <= 0x1000
}

/// All `len` bytes failed for `reason`.
fn wholly_failed(len: usize, reason: PageError) -> PartialError {
    PartialError {
        failed: vec![Failure {
            offset: 0,
            len,
            reason,
        }],
        len,
    }
}

/// Merges translation failures and the failures of each physical run
/// (shifted to the request's offsets) into one sorted result.
fn collect(
    len: usize,
    mut failures: Vec<Failure>,
    results: Vec<(usize, Result<(), PartialError>)>,
) -> Result<(), PartialError> {
    for (offset, result) in results {
        if let Err(e) = result {
            failures.extend(e.failed.into_iter().map(|f| Failure {
                offset: f.offset + offset,
                ..f
            }));
        }
    }
    if failures.is_empty() {
        return Ok(());
    }
    Err(PartialError {
        failed: merged(failures),
        len,
    })
}
