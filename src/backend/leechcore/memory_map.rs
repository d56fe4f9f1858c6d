//! The device's memory map: read and set as LeechCore's structs, cut at
//! the user's max address, fitted to an image that is not whole pages and
//! put right from QEMU's own for a guest; and `LcCommand`, which carries
//! them.

use std::path::Path;
use std::ptr;

use leechcore_sys::{self as sys, HANDLE};

use super::qemu::Found;
use super::LeechCore;
use crate::{Error, MemoryMap};

impl LeechCore {
    /// The device's memory map, as LeechCore holds it now, cut at the
    /// user's [`DeviceConfig::max_address`](crate::DeviceConfig::max_address).
    pub fn memory_map(&self) -> Result<MemoryMap, Error> {
        let map = self.leechcore_memory_map()?;
        let Some(limit) = self.limit else {
            return Ok(map);
        };
        let cut = map.cut_at(limit, |r| r.start);
        // Cutting page-aligned, sorted, disjoint ranges at a page-aligned
        // limit keeps them so.
        Ok(MemoryMap::new(cut)?)
    }

    /// LeechCore's own memory map, uncut.
    pub(super) fn leechcore_memory_map(&self) -> Result<MemoryMap, Error> {
        let state = self.lock();
        let name = "LC_CMD_MEMMAP_GET_STRUCT";
        let raw = self.command_on(state.raw, sys::LC_CMD_MEMMAP_GET_STRUCT, &mut [], name)?;
        let entry = std::mem::size_of::<sys::LC_MEMMAP_ENTRY>();
        if raw.len() % entry != 0 {
            return Err(Error::Command { name });
        }
        let ranges = raw
            .chunks_exact(entry)
            .map(|e| {
                let word =
                    |i: usize| u64::from_ne_bytes(e[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
                crate::MemoryRange {
                    start: word(0),
                    size: word(1),
                    remap: word(2),
                }
            })
            .collect();
        Ok(MemoryMap::new(ranges)?)
    }

    /// Replaces the device's memory map: reads outside it then fail, and
    /// `max_address` follows it.
    pub fn set_memory_map(&self, map: &MemoryMap) -> Result<(), Error> {
        // LeechCore accepts a map with no ranges, then crashes the process
        // when next asked for its map.
        if map.is_empty() {
            return Err(Error::InvalidConfig(
                "a memory map needs at least one range".into(),
            ));
        }
        // The struct form: LeechCore's text parser crashes on what it does
        // not expect and misreads index columns past 0xff. Every remap is
        // forced: LeechCore takes a remap of 0 for "no remap" otherwise.
        let mut entries: Vec<u8> = map
            .ranges()
            .iter()
            .flat_map(|r| {
                [r.start, r.size, r.remap | sys::LC_MEMMAP_FORCE_OFFSET]
                    .into_iter()
                    .flat_map(u64::to_ne_bytes)
            })
            .collect();
        let mut state = self.lock();
        let raw = state.raw;
        let name = "LC_CMD_MEMMAP_SET_STRUCT";
        self.command_on(raw, sys::LC_CMD_MEMMAP_SET_STRUCT, &mut entries, name)?;
        if self.reopen.is_some() {
            state.map = Some(entries);
        }
        self.map_changed();
        Ok(())
    }

    /// Runs `LcCommand` and copies its output (freed with `LcMemFree`).
    ///
    /// # Safety
    /// LeechCore trusts a command's input: some crash the process on input
    /// they do not expect (`LC_CMD_MEMMAP_SET` with text it cannot parse
    /// empties the map, and the next map query writes out of bounds), and
    /// device commands may take pointers. Use [`LeechCore::set_memory_map`]
    /// and the other methods where they exist.
    pub unsafe fn command(
        &self,
        command: u64,
        input: &mut [u8],
        name: &'static str,
    ) -> Result<Vec<u8>, Error> {
        let state = self.lock();
        self.command_on(state.raw, command, input, name)
    }

    /// `command` on `raw`, which the caller holds under the lock.
    pub(super) fn command_on(
        &self,
        raw: HANDLE,
        command: u64,
        input: &mut [u8],
        name: &'static str,
    ) -> Result<Vec<u8>, Error> {
        if raw.is_null() {
            return Err(Error::Command { name });
        }
        let mut out: *mut u8 = ptr::null_mut();
        let mut out_len = 0u32;
        let input_ptr = if input.is_empty() {
            ptr::null_mut()
        } else {
            input.as_mut_ptr()
        };
        let input_len = u32::try_from(input.len()).map_err(|_| Error::Command { name })?;
        // SAFETY: valid handle under the lock; `input` is live for the call;
        // LeechCore allocates `out`, which is freed below.
        let ok = self.guarded(|| unsafe {
            (self.lib.LcCommand)(raw, command, input_len, input_ptr, &mut out, &mut out_len)
        });
        let output = if out.is_null() {
            Vec::new()
        } else {
            // SAFETY: LeechCore returned `out_len` bytes at `out`.
            let bytes = unsafe { std::slice::from_raw_parts(out, out_len as usize) }.to_vec();
            // SAFETY: `out` was allocated by LeechCore for us to free once.
            unsafe { (self.lib.LcMemFree)(out.cast()) };
            bytes
        };
        if ok == 0 {
            return Err(Error::Command { name });
        }
        Ok(output)
    }

    /// Cuts the map at the last whole page of the image file. LeechCore
    /// maps an image whose size is not whole pages as 4 GiB, and its read
    /// of a page that runs past the end fails after filling the bytes that
    /// are there: no range may reach into that last partial page.
    pub(super) fn fit_map_to_image(&self, path: &Path) {
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        let whole = meta.len() & !(sys::PAGE_SIZE - 1);
        if !meta.is_file() || whole == meta.len() {
            return;
        }
        let Ok(map) = self.leechcore_memory_map() else {
            return;
        };
        let fitted = map.cut_at(whole, |r| r.remap);
        if fitted == map.ranges() {
            return;
        }
        log::info!(
            "{}: {} bytes, not whole pages; its memory ends at its last whole page, {whole:#x}",
            path.display(),
            meta.len()
        );
        let result = MemoryMap::new(fitted)
            .map_err(Error::from)
            .and_then(|fitted| self.set_memory_map(&fitted));
        if let Err(e) = result {
            log::warn!(
                "could not cut the memory map at the end of {}: {e}",
                path.display()
            );
        }
    }

    /// LeechCore reads a QEMU guest's memory map with a race (one read of
    /// QEMU's answer after a 1 s wait, which a busy QEMU has not finished
    /// by then: the map then ends early, silently) and drops a RAM range
    /// when QEMU lists its views in another order. QEMU's own map, asked
    /// before LeechCore connected (or now, if that failed), replaces it
    /// when they differ.
    pub(super) fn check_qemu_memory_map(&self, found: Found) {
        let Some(theirs) = found.ram_map() else {
            return;
        };
        match self.leechcore_memory_map() {
            Ok(ours) if ours == theirs => {}
            ours => {
                // Put right at once: a note, not a warning.
                log::info!("LeechCore's memory map of the guest ({ours:?}) is not QEMU's; using QEMU's ({theirs:?})");
                if let Err(e) = self.set_memory_map(&theirs) {
                    log::warn!("could not set QEMU's memory map: {e}");
                }
            }
        }
    }
}
