//! The mapped ranges of an address space, as C records, with what their
//! page tables allow.

use std::ffi::c_void;

use super::leechio_space;
use crate::error::{guard, Fail};
use crate::handle::Handle;
use crate::leechio_status::{self, *};

/// A mapped range, a range that maps what an earlier one maps, or a range
/// that maps nothing a CPU could use.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct leechio_mapping {
    /// First virtual address.
    pub va: u64,
    /// Physical address of `va` (0 unless `status` is `LEECHIO_OK`).
    pub pa: u64,
    /// Bytes: `va..va+size` maps to `pa..pa+size`.
    pub size: u64,
    /// Size of the pages of this range (0 unless `status` is `LEECHIO_OK`).
    pub page_size: u64,
    /// For `LEECHIO_ALIAS`: the first virtual address of the earlier range
    /// that this one maps as (`same_as..same_as+size`); otherwise 0.
    pub same_as: u64,
    /// `LEECHIO_OK` for a mapping; `LEECHIO_ALIAS` for a range whose page
    /// table was already walked for `same_as`; otherwise the range maps
    /// nothing usable, and why: its tables could not be read, or an entry
    /// has reserved bits set (`LEECHIO_RESERVED_BITS`).
    pub status: leechio_status,
    /// For `LEECHIO_OK`: what the page tables allow, `LEECHIO_ACCESS_*`
    /// bits (reading is always allowed); otherwise 0.
    pub access: u32,
}

/// `leechio_mapping::access`: every level of the walk allows writes (R/W).
pub const LEECHIO_ACCESS_WRITE: u32 = 1;
/// `leechio_mapping::access`: no level of the walk forbids instruction
/// fetches (NX).
pub const LEECHIO_ACCESS_EXECUTE: u32 = 2;
/// `leechio_mapping::access`: every level of the walk allows user-mode
/// accesses (U/S).
pub const LEECHIO_ACCESS_USER: u32 = 4;

/// Called once per mapping (sorted by address), then once per range that
/// maps nothing usable, then once per alias, after the whole walk is done. `mapping` is valid only during the
/// call.
///
/// It runs on the thread that made the call, before the call returns, and
/// may call any function of this library, on the same handles too, except
/// closing or freeing the handle the running call was given. When the
/// running call fails, its message replaces any that calls made from the
/// callback left for `leechio_last_error_message`.
pub type leechio_mapping_fn =
    Option<unsafe extern "C" fn(context: *mut c_void, mapping: *const leechio_mapping)>;

/// `access` as `LEECHIO_ACCESS_*` bits.
fn access_bits(access: leechio_rs::Access) -> u32 {
    (if access.write {
        LEECHIO_ACCESS_WRITE
    } else {
        0
    }) | (if access.execute {
        LEECHIO_ACCESS_EXECUTE
    } else {
        0
    }) | (if access.user { LEECHIO_ACCESS_USER } else { 0 })
}

/// Finds the mapped ranges from `start` to `last`, both included (so
/// `0, UINT64_MAX` is the whole address space, its last byte too), by
/// walking every present table entry, one device call per level, and
/// calls `on_mapping` for each (merged where virtually and physically
/// contiguous with one page size), then for each range whose tables could
/// not be read or hold reserved bits, then for each alias. Each table page
/// is walked once a level: a range whose table was already walked for an
/// earlier range is reported as `LEECHIO_ALIAS` of it (a table whose
/// entries point at itself costs four reads, not 512^4). Returns
/// `LEECHIO_OK`, `LEECHIO_INCOMPLETE` when some ranges map nothing usable,
/// or `LEECHIO_INVALID_ARGUMENT` when `start` is past `last`.
///
/// NULL: `context` may be NULL (it is only passed on); `space` and
/// `on_mapping` may not (`LEECHIO_NULL_ARGUMENT`).
///
/// # Safety
/// `space` must be a live handle; `on_mapping` safe to call with
/// `context`.
#[no_mangle]
pub unsafe extern "C" fn leechio_space_mappings(
    space: *const leechio_space,
    start: u64,
    last: u64,
    on_mapping: leechio_mapping_fn,
    context: *mut c_void,
) -> leechio_status {
    guard("leechio_space_mappings", || {
        // SAFETY: the caller's contract.
        let s = unsafe { leechio_space::lend(space)? };
        let Some(callback) = on_mapping else {
            return Err(Fail::new(LEECHIO_NULL_ARGUMENT, "`on_mapping` is NULL"));
        };
        // A reversed range is a caller's mistake (swapped arguments, an
        // overflowed end), not a request for nothing.
        if start > last {
            return Err(Fail::new(
                LEECHIO_INVALID_ARGUMENT,
                format!("`start` {start:#x} is past `last` {last:#x}"),
            ));
        }
        let found = s.space.memory().block_on(s.space.mappings(start..=last));
        let records = found.mappings.iter().map(|m| leechio_mapping {
            va: m.va,
            pa: m.pa,
            size: m.size,
            page_size: m.page_size.bytes(),
            same_as: 0,
            status: LEECHIO_OK,
            access: access_bits(m.access),
        });
        let failed = found.failed.iter().map(|f| leechio_mapping {
            va: f.va,
            pa: 0,
            size: f.size,
            page_size: 0,
            same_as: 0,
            status: leechio_status::from_page_error(f.reason),
            access: 0,
        });
        let aliases = found.aliases.iter().map(|a| leechio_mapping {
            va: a.va,
            pa: 0,
            size: a.size,
            page_size: 0,
            same_as: a.same_as,
            status: LEECHIO_ALIAS,
            access: 0,
        });
        for mapping in records.chain(failed).chain(aliases) {
            // SAFETY: the caller vouches for the callback.
            unsafe { callback(context, &mapping) };
        }
        match found.failed.first() {
            None => Ok(()),
            Some(first) => Err(Fail::new(
                LEECHIO_INCOMPLETE,
                format!(
                    "{} range(s) map nothing usable; first {:#x}, {:#x} bytes: {}",
                    found.failed.len(),
                    first.va,
                    first.size,
                    first.reason
                ),
            )),
        }
    })
}
