//! An in-memory backend: a byte vector with unreadable ranges and call
//! counters, for unit tests and examples.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use super::{Backend, Limits, PageError, ScatterEntry, WriteEntry};
use crate::{MemoryMap, MemoryRange};

/// Physical memory held in a `Vec<u8>`, following the same entry rules as
/// LeechCore, with ranges that fail and counts of every call.
#[derive(Debug)]
pub struct MemBackend {
    data: RwLock<Vec<u8>>,
    /// `data.len()`, which never changes: known without the lock.
    len: u64,
    holes: RwLock<Vec<(Range<u64>, PageError)>>,
    limits: Limits,
    read_only: bool,
    address_order: bool,
    read_calls: AtomicU64,
    write_calls: AtomicU64,
    read_entries: Mutex<Vec<usize>>,
    /// Under Miri, per `PATTERN_LINE` bytes of an address-pattern backend: whether
    /// the pattern is written yet. The interpreter takes minutes per MiB
    /// to write it eagerly, so each line gets it on first access instead.
    #[cfg(miri)]
    pattern_filled: Option<Mutex<Vec<bool>>>,
}

#[cfg(miri)]
const PATTERN_LINE: usize = 64;

impl MemBackend {
    /// `data` as physical memory from address 0, with LeechCore's limits.
    pub fn new(data: Vec<u8>) -> Self {
        MemBackend {
            len: data.len() as u64,
            data: RwLock::new(data),
            holes: RwLock::new(Vec::new()),
            limits: Limits::LEECHCORE,
            read_only: false,
            address_order: false,
            read_calls: AtomicU64::new(0),
            write_calls: AtomicU64::new(0),
            read_entries: Mutex::new(Vec::new()),
            #[cfg(miri)]
            pattern_filled: None,
        }
    }

    /// `len` bytes where the 8 bytes at each 8-aligned address `a` hold
    /// `a` itself (little endian): any byte shows where it came from.
    #[cfg(not(miri))]
    pub fn with_address_pattern(len: usize) -> Self {
        let data = (0..len as u64)
            .step_by(8)
            .flat_map(|a| a.to_le_bytes())
            .take(len)
            .collect();
        Self::new(data)
    }

    /// (Under Miri: the same, each line's pattern written on first access.)
    #[cfg(miri)]
    pub fn with_address_pattern(len: usize) -> Self {
        let mut backend = Self::new(vec![0; len]);
        backend.pattern_filled = Some(Mutex::new(vec![false; len.div_ceil(PATTERN_LINE)]));
        backend
    }

    /// Uses `limits` instead of LeechCore's.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Refuses every write.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// Asks for entries in address order, as a file-backed device does
    /// (see [`Backend::prefers_address_order`]).
    pub fn in_address_order(mut self) -> Self {
        self.address_order = true;
        self
    }

    /// Makes every entry touching `range` fail with `reason`.
    pub fn add_hole(&self, range: Range<u64>, reason: PageError) {
        self.holes.write().unwrap().push((range, reason));
    }

    /// Number of `read_scatter` calls that reached the device.
    pub fn read_calls(&self) -> u64 {
        self.read_calls.load(Ordering::Relaxed)
    }

    /// Number of `write_scatter` calls that reached the device.
    pub fn write_calls(&self) -> u64 {
        self.write_calls.load(Ordering::Relaxed)
    }

    /// The number of entries of each read call so far, in order.
    pub fn read_call_sizes(&self) -> Vec<usize> {
        self.read_entries.lock().unwrap().clone()
    }

    /// Under Miri: writes the address pattern into the lines of `ranges`
    /// that do not hold it yet (before any access to them).
    #[cfg(miri)]
    fn fill_pattern(&self, ranges: impl Iterator<Item = (u64, usize)>) {
        let Some(filled) = &self.pattern_filled else {
            return;
        };
        let mut filled = filled.lock().unwrap();
        // (Indexed as a slice: indexing the vector would reborrow all of it
        // for every line, which is slow under Miri.)
        let filled: &mut [bool] = &mut filled;
        let mut data = None;
        for (addr, len) in ranges {
            if len == 0 || filled.is_empty() {
                continue;
            }
            let first = usize::try_from(addr).unwrap_or(usize::MAX) / PATTERN_LINE;
            let end = usize::try_from(addr)
                .unwrap_or(usize::MAX)
                .saturating_add(len - 1);
            let last = (end / PATTERN_LINE).min(filled.len() - 1);
            for line in first..=last {
                if filled[line] {
                    continue;
                }
                let data = data.get_or_insert_with(|| self.data.write().unwrap());
                let start = line * PATTERN_LINE;
                let stop = (start + PATTERN_LINE).min(data.len());
                // (Word by word through a raw pointer: iterators and
                // indexing cost many interpreted steps per word.)
                let base = data.as_mut_ptr();
                let mut at = start;
                while at + 8 <= stop {
                    // SAFETY: `at..at + 8` lies in `data`, which the lock guards.
                    unsafe {
                        base.add(at)
                            .cast::<[u8; 8]>()
                            .write((at as u64).to_le_bytes())
                    };
                    at += 8;
                }
                // (A last partial word, when the length is not a multiple of 8.)
                if at < stop {
                    let tail = (at as u64).to_le_bytes();
                    data[at..stop].copy_from_slice(&tail[..stop - at]);
                }
                filled[line] = true;
            }
        }
    }

    #[cfg(not(miri))]
    #[inline(always)]
    fn fill_pattern(&self, _ranges: impl Iterator<Item = (u64, usize)>) {}

    /// A copy of `len` bytes at `addr`.
    pub fn bytes(&self, addr: u64, len: usize) -> Vec<u8> {
        self.fill_pattern(std::iter::once((addr, len)));
        self.data.read().unwrap()[addr as usize..addr as usize + len].to_vec()
    }

    /// Overwrites bytes directly, as the target itself would.
    pub fn poke(&self, addr: u64, bytes: &[u8]) {
        self.fill_pattern(std::iter::once((addr, bytes.len())));
        self.data.write().unwrap()[addr as usize..addr as usize + bytes.len()]
            .copy_from_slice(bytes);
    }

    /// Why an entry fails, checked in the order a device would.
    fn entry_error(
        &self,
        holes: &[(Range<u64>, PageError)],
        addr: u64,
        len: usize,
        size: usize,
    ) -> Option<PageError> {
        if let Err(e) = self.limits.check(addr, len) {
            return Some(e);
        }
        if addr.saturating_add(len as u64) > size as u64 {
            return Some(PageError::Unspecified);
        }
        let end = addr + len as u64;
        holes
            .iter()
            .find(|(r, _)| r.start < end && addr < r.end)
            .map(|&(_, reason)| reason)
    }
}

impl Backend for MemBackend {
    fn read_scatter(&self, entries: &mut [ScatterEntry<'_>]) {
        self.read_calls.fetch_add(1, Ordering::Relaxed);
        self.fill_pattern(entries.iter().map(|e| (e.addr, e.buf.len())));
        self.read_entries.lock().unwrap().push(entries.len());
        let data = self.data.read().unwrap();
        let holes = self.holes.read().unwrap();
        for e in entries {
            e.result = match self.entry_error(&holes, e.addr, e.buf.len(), data.len()) {
                Some(err) => Err(err),
                None => {
                    let at = e.addr as usize;
                    e.buf.copy_from_slice(&data[at..at + e.buf.len()]);
                    Ok(())
                }
            };
        }
    }

    fn write_scatter(&self, entries: &mut [WriteEntry<'_>]) {
        self.write_calls.fetch_add(1, Ordering::Relaxed);
        self.fill_pattern(entries.iter().map(|e| (e.addr, e.data.len())));
        let mut data = self.data.write().unwrap();
        let holes = self.holes.read().unwrap();
        for e in entries {
            let size = data.len();
            e.result = match self.entry_error(&holes, e.addr, e.data.len(), size) {
                _ if self.read_only => Err(PageError::ReadOnly),
                Some(err) => Err(err),
                None => {
                    let at = e.addr as usize;
                    data[at..at + e.data.len()].copy_from_slice(e.data);
                    Ok(())
                }
            };
        }
    }

    fn limits(&self) -> Limits {
        self.limits
    }

    fn max_address(&self) -> u64 {
        self.len
    }

    fn memory_map(&self) -> MemoryMap {
        let size = self.max_address() & !(self.limits.page_size - 1);
        MemoryMap::new(vec![MemoryRange::new(0, size)]).unwrap_or_default()
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn prefers_address_order(&self) -> bool {
        self.address_order
    }
}
