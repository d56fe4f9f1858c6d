//! Any memflow physical memory (a connector, a file, memflow's own dummy
//! memory) as a [`Backend`] of the engine: each engine call is one
//! `phys_read_raw_iter` (or `phys_write_raw_iter`) call, so what the
//! engine batches stays one batch on any connector; on leechio's own
//! `leechcore` connector that call is one LeechCore scatter call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use memflow::cglue::tuple::{CTup2, CTup3};
use memflow::mem::{MemOps, PhysicalMemory, PhysicalMemoryMetadata};
use memflow::types::{umem, Address, PhysicalAddress};

use crate::{Backend, Limits, MemoryMap, MemoryRange, PageError, ScatterEntry, WriteEntry};

/// The entry rules the engine plans by: a page at most, any alignment.
/// memflow takes entries of any shape, so these only keep the engine's
/// own page-bounded planning.
const LIMITS: Limits = Limits {
    max_len: 0x1000,
    min_len: 1,
    align: 1,
    page_size: 0x1000,
    max_entries: usize::MAX,
};

/// memflow physical memory `P` as an engine backend. The connector is
/// used behind a lock (memflow's calls take `&mut self`); its metadata is
/// read once, when the backend is made.
pub struct PhysicalMemoryBackend<P> {
    phys: Mutex<P>,
    metadata: PhysicalMemoryMetadata,
    read_calls: AtomicU64,
    write_calls: AtomicU64,
}

impl<P> std::fmt::Debug for PhysicalMemoryBackend<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PhysicalMemoryBackend")
            .field("max_address", &self.metadata.max_address)
            .field("readonly", &self.metadata.readonly)
            .finish_non_exhaustive()
    }
}

impl<P: PhysicalMemory> PhysicalMemoryBackend<P> {
    /// The engine's backend over `phys`.
    pub fn new(phys: P) -> Self {
        PhysicalMemoryBackend {
            metadata: phys.metadata(),
            phys: Mutex::new(phys),
            read_calls: AtomicU64::new(0),
            write_calls: AtomicU64::new(0),
        }
    }

    /// `phys_read_raw_iter` calls made so far.
    pub fn read_calls(&self) -> u64 {
        self.read_calls.load(Ordering::Relaxed)
    }

    /// `phys_write_raw_iter` calls made so far.
    pub fn write_calls(&self) -> u64 {
        self.write_calls.load(Ordering::Relaxed)
    }

    fn phys(&self) -> std::sync::MutexGuard<'_, P> {
        // A panic in another caller leaves the connector as it was.
        self.phys.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Which entry each byte run belongs to: entry `i` covers offsets
/// `starts[i]..starts[i] + len_i` of one flat numbering of all entries'
/// bytes, which is what the meta addresses given to memflow count.
struct Runs {
    starts: Vec<usize>,
    total: usize,
}

impl Runs {
    fn new(lens: impl Iterator<Item = usize>) -> Runs {
        let mut starts = Vec::new();
        let mut total = 0usize;
        for len in lens {
            starts.push(total);
            total += len;
        }
        Runs { starts, total }
    }

    /// Calls `f(entry, bytes)` for each entry that bytes `at..at + len`
    /// of the numbering touch, with how many of its bytes they hold. A
    /// run outside the numbering (a connector that reports a meta address
    /// it was not given) touches nothing.
    fn each(&self, at: umem, len: usize, mut f: impl FnMut(usize, usize)) {
        let (Ok(mut at), true) = (usize::try_from(at), len > 0) else {
            return;
        };
        let end = at.saturating_add(len).min(self.total);
        while at < end {
            // The last entry starting at or before `at` (empty entries
            // share a start with the next one).
            let i = self.starts.partition_point(|&s| s <= at) - 1;
            let entry_end = self.starts.get(i + 1).copied().unwrap_or(self.total);
            let stop = end.min(entry_end);
            f(i, stop - at);
            at = stop;
        }
    }
}

/// What memflow said of each entry: bytes reported read, and whether any
/// byte was reported failed.
#[derive(Clone, Copy, Default)]
struct Tally {
    done: usize,
    failed: bool,
}

/// Each entry's result from its tally: `Ok` only when memflow reported
/// every byte read and none failed; bytes it said nothing about fail too.
fn results(tallies: &[Tally], lens: impl Iterator<Item = usize>) -> Vec<Result<(), PageError>> {
    tallies
        .iter()
        .zip(lens)
        .map(|(t, len)| match t.failed || t.done < len {
            true => Err(PageError::Unspecified),
            false => Ok(()),
        })
        .collect()
}

impl<P: PhysicalMemory> Backend for PhysicalMemoryBackend<P> {
    fn read_scatter(&self, entries: &mut [ScatterEntry<'_>]) {
        self.read_calls.fetch_add(1, Ordering::Relaxed);
        let runs = Runs::new(entries.iter().map(|e| e.buf.len()));
        // Read into one staging buffer, so an entry that fails in part
        // leaves the caller's buffer as it was (memflow may have filled
        // some of it).
        let mut staging = vec![0u8; runs.total];
        let mut tallies = vec![Tally::default(); entries.len()];
        let outcome = {
            let mut rest = staging.as_mut_slice();
            let mut items = Vec::with_capacity(entries.len());
            for (e, &start) in entries.iter().zip(&runs.starts) {
                let (part, tail) = std::mem::take(&mut rest).split_at_mut(e.buf.len());
                rest = tail;
                items.push(CTup3(
                    PhysicalAddress::from(e.addr),
                    Address::from(start as umem),
                    part.into(),
                ));
            }
            let tallies = std::cell::RefCell::new(&mut tallies);
            let mut ok = |CTup2(meta, data): CTup2<Address, memflow::cglue::CSliceMut<u8>>| {
                runs.each(meta.to_umem(), data.len(), |i, n| {
                    tallies.borrow_mut()[i].done += n
                });
                true
            };
            let mut fail = |CTup2(meta, data): CTup2<Address, memflow::cglue::CSliceMut<u8>>| {
                runs.each(meta.to_umem(), data.len(), |i, _| {
                    tallies.borrow_mut()[i].failed = true
                });
                true
            };
            MemOps::with_raw(
                items.into_iter(),
                Some(&mut (&mut ok).into()),
                Some(&mut (&mut fail).into()),
                |ops| self.phys().phys_read_raw_iter(ops),
            )
        };
        if let Err(e) = outcome {
            log::debug!("a physical read of {} entries failed: {e}", entries.len());
            for e in entries.iter_mut() {
                e.result = Err(PageError::Unspecified);
            }
            return;
        }
        let results = results(&tallies, entries.iter().map(|e| e.buf.len()));
        for ((e, result), &start) in entries.iter_mut().zip(results).zip(&runs.starts) {
            if result.is_ok() {
                e.buf.copy_from_slice(&staging[start..start + e.buf.len()]);
            }
            e.result = result;
        }
    }

    fn write_scatter(&self, entries: &mut [WriteEntry<'_>]) {
        self.write_calls.fetch_add(1, Ordering::Relaxed);
        if self.metadata.readonly {
            for e in entries.iter_mut() {
                e.result = Err(PageError::ReadOnly);
            }
            return;
        }
        let runs = Runs::new(entries.iter().map(|e| e.data.len()));
        let mut tallies = vec![Tally::default(); entries.len()];
        let outcome = {
            let items = entries.iter().zip(&runs.starts).map(|(e, &start)| {
                CTup3(
                    PhysicalAddress::from(e.addr),
                    Address::from(start as umem),
                    e.data.into(),
                )
            });
            let tallies = std::cell::RefCell::new(&mut tallies);
            let mut ok = |CTup2(meta, data): CTup2<Address, memflow::cglue::CSliceRef<u8>>| {
                runs.each(meta.to_umem(), data.len(), |i, n| {
                    tallies.borrow_mut()[i].done += n
                });
                true
            };
            let mut fail = |CTup2(meta, data): CTup2<Address, memflow::cglue::CSliceRef<u8>>| {
                runs.each(meta.to_umem(), data.len(), |i, _| {
                    tallies.borrow_mut()[i].failed = true
                });
                true
            };
            MemOps::with_raw(
                items,
                Some(&mut (&mut ok).into()),
                Some(&mut (&mut fail).into()),
                |ops| self.phys().phys_write_raw_iter(ops),
            )
        };
        let results = match outcome {
            Ok(()) => results(&tallies, entries.iter().map(|e| e.data.len())),
            Err(_) => vec![Err(PageError::WriteFailed); entries.len()],
        };
        for (e, result) in entries.iter_mut().zip(results) {
            e.result = result.map_err(|_| PageError::WriteFailed);
        }
    }

    fn limits(&self) -> Limits {
        LIMITS
    }

    fn max_address(&self) -> u64 {
        // memflow's max_address is the last valid address.
        self.metadata.max_address.to_umem().saturating_add(1)
    }

    fn memory_map(&self) -> MemoryMap {
        // memflow shows no map of its own: one range up to the end.
        let size = self.max_address() & !(LIMITS.page_size - 1);
        MemoryMap::new(vec![MemoryRange::new(0, size)]).unwrap_or_default()
    }

    fn read_only(&self) -> bool {
        self.metadata.readonly
    }
}

#[cfg(test)]
mod tests;
