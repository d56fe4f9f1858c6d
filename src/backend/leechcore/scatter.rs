//! The scatter calls: each entry checked once against the device's rules
//! and the user's max address, one `LcReadScatterEx` / `LcWriteScatter`
//! call with reused arrays, and the results judged per entry. A writable
//! file device is closed and opened again after each write (see
//! `Handle::unflushed`).

use std::ptr;
use std::sync::MutexGuard;
use std::time::Instant;

use leechcore_sys as sys;

use super::ffi::create;
use super::handle::{Checked, Entry, Handle};
use super::LeechCore;
use crate::backend::{PageError, ScatterEntry, WriteEntry};

impl LeechCore {
    /// Reads every entry in one LeechCore scatter call; each entry's
    /// `result` says whether its buffer was filled.
    ///
    /// Entries that break the device's [`Limits`](crate::Limits) fail with
    /// [`PageError::InvalidEntry`], and entries at or past the user's max
    /// address with [`PageError::OutOfRange`], without reaching the device.
    /// No call is made when no entry is left.
    pub fn read_scatter(&self, entries: &mut [ScatterEntry<'_>]) {
        self.read_scatter_after(entries, Checked::Here)
    }

    /// [`LeechCore::read_scatter`], checking the target here or not.
    pub(super) fn read_scatter_after(&self, entries: &mut [ScatterEntry<'_>], checked: Checked) {
        let Some(mut state) = self.begin(entries, checked) else {
            return;
        };
        let state = &mut *state;
        let count = state.mems.len() as u32;
        state.codes.clear();
        state
            .codes
            .resize(state.mems.len(), sys::LC_READ_PAGE_RESULT_NONE);
        let delay = self.device_string.qemu().and_then(|q| q.delay);
        let started = delay.is_some().then(Instant::now);
        self.guarded(|| match self.lib.LcReadScatterEx {
            // SAFETY: `ptrs` points at `count` initialised entries whose
            // buffers are the callers' live slices of at least `cb` bytes;
            // `codes` has room for `count` results.
            Some(read_ex) => unsafe {
                read_ex(
                    state.raw,
                    count,
                    state.ptrs.as_mut_ptr(),
                    state.codes.as_mut_ptr(),
                );
            },
            // SAFETY: as above, without the result array.
            None => unsafe { (self.lib.LcReadScatter)(state.raw, count, state.ptrs.as_mut_ptr()) },
        });
        if let (Some(delay), Some(started)) = (delay, started) {
            // Under the lock: the emulated board is busy until then.
            delay.finish(started, state.mems.len());
        }
        self.judge(state, entries, |k| {
            PageError::from_leechcore_code(state.codes[k])
        });
    }

    /// Writes every entry in one LeechCore scatter call; each entry's
    /// `result` says whether it was written. On a read-only device every
    /// entry fails with [`PageError::ReadOnly`] and no call is made.
    pub fn write_scatter(&self, entries: &mut [WriteEntry<'_>]) {
        self.write_scatter_after(entries, Checked::Here)
    }

    /// [`LeechCore::write_scatter`], checking the target here or not.
    pub(super) fn write_scatter_after(&self, entries: &mut [WriteEntry<'_>], checked: Checked) {
        if self.info.read_only {
            for e in entries.iter_mut() {
                e.result = Err(PageError::ReadOnly);
            }
            return;
        }
        let Some(mut state) = self.begin(entries, checked) else {
            return;
        };
        let state = &mut *state;
        // SAFETY: `ptrs` points at `mems.len()` initialised entries whose
        // buffers are the callers' live slices of `cb` bytes.
        self.guarded(|| unsafe {
            (self.lib.LcWriteScatter)(state.raw, state.mems.len() as u32, state.ptrs.as_mut_ptr())
        });
        state.unflushed = self.reopen.is_some();
        self.judge(state, entries, |_| PageError::WriteFailed);
        // The bytes are in the file when this returns, for every reader of
        // it. A failed reopen fails the calls after this one (`settle`).
        self.reopen_if_unflushed(state);
    }

    /// Takes the lock and fills the call's arrays with the legal entries;
    /// `None` when no call is to be made (every entry has its result then):
    /// the guest is gone, the device lost or unusable, or no entry legal.
    /// The guest's liveness is looked at unless the caller just did
    /// (`Checked::Before`: a flush's calls after `Backend::check_target`).
    fn begin<E: Entry>(
        &self,
        entries: &mut [E],
        checked: Checked,
    ) -> Option<MutexGuard<'_, Handle>> {
        let gone = checked == Checked::Here && self.target_gone(entries.iter_mut().map(E::result));
        if gone || self.cut_off(entries.iter_mut().map(E::result)) {
            return None;
        }
        let mut state = self.lock();
        if !self.settle(&mut state, entries.iter_mut().map(E::result)) {
            return None;
        }
        state.prepare(self.limit(), self.rules, entries);
        (!state.mems.is_empty()).then_some(state)
    }

    /// After the call: each issued entry succeeded where LeechCore set its
    /// `f`, else failed with `failed(k)` (`k` its index in the call) or,
    /// when the device was lost during the call, with that reason.
    fn judge<E: Entry>(
        &self,
        state: &Handle,
        entries: &mut [E],
        failed: impl Fn(usize) -> PageError,
    ) {
        let lost = self.lost_in_call(&state.mems);
        for (k, &owner) in state.owners.iter().enumerate() {
            *entries[owner].result() = match (state.mems[k].f, lost) {
                (0, Some(lost)) => Err(lost.page_error()),
                (0, None) => Err(failed(k)),
                _ => Ok(()),
            };
        }
    }

    /// Makes earlier writes visible (see `Handle::unflushed`). When the
    /// device could not be opened again, every call fails: the entries of
    /// this one get `NotIssued`, and false comes back.
    fn settle<'e>(
        &self,
        state: &mut Handle,
        results: impl Iterator<Item = &'e mut Result<(), PageError>>,
    ) -> bool {
        let usable = self.reopen_if_unflushed(state);
        if !usable {
            results.for_each(|r| *r = Err(PageError::NotIssued));
        }
        usable
    }

    fn reopen_if_unflushed(&self, state: &mut Handle) -> bool {
        let (true, Some(config)) = (state.unflushed, &self.reopen) else {
            return !state.raw.is_null();
        };
        state.unflushed = false;
        for id in 0..state.retired_calls.len() {
            let counter = sys::LC_OPT_CORE_STATISTICS_CALL_COUNT | id as u64;
            state.retired_calls[id] += self.option_locked(state, counter).unwrap_or(0);
        }
        // SAFETY: the handle came from LcCreateEx; it is replaced below and
        // never used again. Closing is what writes the buffered bytes out.
        unsafe { (self.lib.LcClose)(state.raw) };
        // Null until the reopen succeeds: a failed one must leave no
        // handle to use or to close again.
        state.raw = ptr::null_mut();
        let mut config = *config;
        state.raw = match create(&self.lib, &mut config) {
            Ok(raw) => raw,
            Err(message) => {
                log::error!(
                    "could not open {} again after writing to it ({}): every read and write now fails",
                    self.info.name,
                    message.unwrap_or_else(|| "LeechCore gave no reason".into())
                );
                return false;
            }
        };
        if let Some(map) = &mut state.map {
            let raw = state.raw;
            if let Err(e) = self.command_on(
                raw,
                sys::LC_CMD_MEMMAP_SET_STRUCT,
                map,
                "LC_CMD_MEMMAP_SET_STRUCT",
            ) {
                log::error!("could not set the memory map again after reopening: {e}");
            }
        }
        // A new handle: what it says of its memory is asked again.
        self.map_changed();
        true
    }

    /// Fails every entry, without a call, when the target behind the device
    /// is known to be gone.
    pub(super) fn target_gone<'e>(
        &self,
        results: impl Iterator<Item = &'e mut Result<(), PageError>>,
    ) -> bool {
        self.guest.as_ref().is_some_and(|g| g.gone(results))
    }
}
