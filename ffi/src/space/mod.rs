//! Virtual address spaces: translation, virtual reads and writes, mappings.
//!
//! Every batch runs all its operations as futures joined in one
//! `block_on`, so all page walks advance together: a batch of cold reads
//! costs one device call per table level plus one for the data, however
//! many reads it holds.
//!
//! This file makes, frees and configures a space; `translate` translates,
//! `read_write` reads and writes through it, `mappings` lists what it maps.

// Declared apart, so rustfmt keeps this order: cbindgen writes the header
// in the order it parses (this file's items, then each module's as
// declared), the order the header had when this was one file.
pub mod translate;

mod read_write;

pub mod mappings;

use crate::handle::Handle;
use std::time::Duration;

use leechio_rs::vm::{detect_paging, CacheConfig};
use leechio_rs::{AddressSpace, Memory, Paging, VmConfig};

use crate::device::leechio_device;
use crate::error::{guard, guard_value, non_null, Fail};
use crate::leechio_status::{self, *};

/// The virtual address space of one page-table root (x86-64, 4-level or
/// 5-level paging: `leechio_space_levels`), with caches of translations
/// and page-table pages. Free it with `leechio_space_free`. Safe to use
/// from several threads at once.
pub struct leechio_space {
    pub(crate) space: AddressSpace,
}

/// How long an address space trusts what it cached (see `leechio_space_new`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct leechio_cache_options {
    /// Milliseconds a translation of a virtual page is reused; 0 turns the
    /// cache off, `UINT64_MAX` keeps entries until `leechio_space_invalidate`
    /// (or until a write through the space changes a page table it read).
    pub translation_ms: u64,
    /// Milliseconds a page-table page is reused, with the same meaning.
    pub page_table_ms: u64,
}

/// `levels` of `leechio_space_new`: find the paging mode from the tables
/// themselves.
pub const LEECHIO_PAGING_DETECT: u32 = 0;

impl Handle for leechio_space {
    const NAME: &'static str = "space";
}

fn cache(ms: u64, capacity: usize) -> CacheConfig {
    match ms {
        0 => CacheConfig::DISABLED,
        ms => CacheConfig::valid_for(Duration::from_millis(ms), capacity),
    }
}

/// The settings `options` (NULL: the defaults) ask for.
///
/// # Safety
/// `options` must be NULL or readable.
pub(crate) unsafe fn vm_config(options: *const leechio_cache_options) -> VmConfig {
    if options.is_null() {
        return VmConfig::default();
    }
    // SAFETY: non-NULL; the caller passes valid options.
    let o = unsafe { *options };
    let defaults = VmConfig::default();
    VmConfig {
        translations: cache(o.translation_ms, defaults.translations.capacity),
        page_tables: cache(o.page_table_ms, defaults.page_tables.capacity),
        ..defaults
    }
}

/// The paging mode `levels` names: 4 or 5, or `None` for
/// `LEECHIO_PAGING_DETECT`.
pub(crate) fn named_paging(levels: u32) -> Result<Option<Paging>, Fail> {
    if levels == LEECHIO_PAGING_DETECT {
        return Ok(None);
    }
    match u8::try_from(levels).ok().and_then(Paging::from_levels) {
        Some(paging) => Ok(Some(paging)),
        None => Err(Fail::new(
            LEECHIO_INVALID_ARGUMENT,
            format!(
                "`levels` is {levels}: give 4 or 5 (levels of page tables), or 0 to find the \
                 mode from the tables"
            ),
        )),
    }
}

/// The paging mode `levels` names, or for `LEECHIO_PAGING_DETECT` the one
/// the tables at `dtb` show.
fn paging_of(mem: &Memory, dtb: u64, levels: u32) -> Result<Paging, Fail> {
    if let Some(paging) = named_paging(levels)? {
        return Ok(paging);
    }
    let evidence = mem.block_on(detect_paging(mem, dtb));
    evidence.paging().map_err(|why| match evidence.unreadable {
        Some(reason) => Fail::new(leechio_status::from_page_error(reason), why),
        None => Fail::new(
            LEECHIO_PAGING_UNKNOWN,
            format!("{why}; pass `levels` 4 or 5"),
        ),
    })
}

/// Creates the address space whose top table is at `dtb` (a CR3 value; its
/// low flag bits are ignored), on `device`'s engine, in the paging mode
/// `levels` names: 4 or 5 (levels of page tables, as CR4.LA57 says on the
/// target), or `LEECHIO_PAGING_DETECT` (0) to find it from the tables
/// themselves (five device calls). Reading tables in the wrong mode gives
/// wrong translations that look right, so detection never guesses: where
/// the tables fit both modes (or neither) it fails with
/// `LEECHIO_PAGING_UNKNOWN`, and the message says why; where the root
/// cannot be read it fails with that read's reason (e.g.
/// `LEECHIO_OUT_OF_RANGE`). Any other `levels` is
/// `LEECHIO_INVALID_ARGUMENT`.
///
/// `options` NULL keeps both caches for one second. The space keeps the
/// device open until it is freed, even if the device handle is closed
/// first.
///
/// NULL: `options` may be NULL; `device` and `out` may not
/// (`LEECHIO_NULL_ARGUMENT`).
///
/// # Safety
/// `device` must be a live handle; a non-NULL `options` readable; `out`
/// writable.
#[no_mangle]
pub unsafe extern "C" fn leechio_space_new(
    device: *const leechio_device,
    dtb: u64,
    levels: u32,
    options: *const leechio_cache_options,
    out: *mut *mut leechio_space,
) -> leechio_status {
    guard("leechio_space_new", || {
        non_null(out, "out")?;
        // SAFETY: checked non-NULL; NULL on every failure below.
        unsafe { *out = std::ptr::null_mut() };
        // SAFETY: the caller's contract.
        let d = unsafe { leechio_device::lend(device)? };
        // SAFETY: the caller's contract.
        let config = unsafe { vm_config(options) };
        let paging = paging_of(&d.mem, dtb, levels)?;
        let space = AddressSpace::with_config(d.mem.clone(), dtb, paging, config);
        // SAFETY: checked non-NULL above.
        unsafe { leechio_space { space }.give(out) };
        Ok(())
    })
}

/// The paging mode of `space`: 4 or 5 (levels of page tables); 0 for a
/// NULL `space` (then the last error says so).
///
/// # Safety
/// `space` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn leechio_space_levels(space: *const leechio_space) -> u32 {
    guard_value("leechio_space_levels", 0, || {
        // SAFETY: the caller's contract.
        let s = unsafe { leechio_space::lend(space)? };
        Ok(u32::from(s.space.paging().levels()))
    })
}

/// Frees an address space. NULL is ignored.
///
/// # Safety
/// `space` must be NULL or a handle from `leechio_space_new`, not used
/// again afterwards (nor freed from a callback of a call on it).
#[no_mangle]
pub unsafe extern "C" fn leechio_space_free(space: *mut leechio_space) {
    guard("leechio_space_free", || {
        // SAFETY: NULL or a handle freed once (the caller's contract).
        unsafe { leechio_space::free(space) };
        Ok(())
    });
}

/// Forgets every cached translation and page-table page, so the next
/// access sees the target's tables as they are now.
///
/// NULL: `space` may not be NULL (`LEECHIO_NULL_ARGUMENT`).
///
/// # Safety
/// `space` must be a live handle.
#[no_mangle]
pub unsafe extern "C" fn leechio_space_invalidate(space: *const leechio_space) -> leechio_status {
    guard("leechio_space_invalidate", || {
        // SAFETY: the caller's contract.
        unsafe { leechio_space::lend(space)? }.space.invalidate();
        Ok(())
    })
}

#[cfg(test)]
mod tests;
