//! Virtual address spaces: translation, virtual reads and writes, mappings.
//!
//! Every batch runs all its operations as futures joined in one
//! `block_on`, so all page walks advance together: a batch of cold reads
//! costs one device call per table level plus one for the data, however
//! many reads it holds.

use crate::handle::Handle;
use std::ffi::c_void;
use std::time::Duration;

use leechio_rs::join_all;
use leechio_rs::vm::{detect_paging, CacheConfig};
use leechio_rs::{AddressSpace, Memory, Paging, VmConfig, WalkError};

use crate::device::leechio_device;
use crate::error::{guard, guard_value, non_null, Fail};
use crate::leechio_status::{self, *};
use crate::ops::{
    failures, leechio_fragment_fn, leechio_read_op, leechio_write_op, op_array, read_buffers,
    report, write_data,
};

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

/// Levels of 5-level paging, the most there are: the length of
/// `leechio_translation::entries`.
pub const LEECHIO_LEVELS: usize = 5;
/// Level of a PML5 entry: the top of a 5-level walk (a 4-level walk has
/// none). Levels are numbered by what their entries are, the same in both
/// modes, so `entries[LEECHIO_LEVEL_PTE]` is a PTE either way.
pub const LEECHIO_LEVEL_PML5E: u32 = 0;
/// Level of a PML4 entry: the top of a 4-level walk.
pub const LEECHIO_LEVEL_PML4E: u32 = 1;
/// Level of a page-directory-pointer-table entry (may map a 1 GiB page).
pub const LEECHIO_LEVEL_PDPTE: u32 = 2;
/// Level of a page-directory entry (may map a 2 MiB page).
pub const LEECHIO_LEVEL_PDE: u32 = 3;
/// Level of a page-table entry (maps a 4 KiB page).
pub const LEECHIO_LEVEL_PTE: u32 = 4;

/// A translated (or untranslatable) virtual address.
///
/// Levels are numbered the same in 4-level and 5-level paging, by what
/// their entries are (`LEECHIO_LEVEL_PML5E` 0 to `LEECHIO_LEVEL_PTE` 4);
/// a walk starts at level `LEECHIO_LEVELS - paging_levels`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct leechio_translation {
    /// The virtual address.
    pub va: u64,
    /// `LEECHIO_OK`, or why there is no translation: `LEECHIO_NOT_MAPPED`,
    /// `LEECHIO_NON_CANONICAL`, `LEECHIO_RESERVED_BITS`, or the failure of
    /// reading a table.
    pub status: leechio_status,
    /// The paging mode of the walk (the space's): 4 or 5 levels. Its top
    /// level is `LEECHIO_LEVEL_PML4E` or `LEECHIO_LEVEL_PML5E`.
    pub paging_levels: u32,
    /// The physical address (0 when `status` is not `LEECHIO_OK`).
    pub pa: u64,
    /// Size of the page in bytes: 4096, 2 MiB or 1 GiB (0 on failure).
    pub page_size: u64,
    /// The entry read at each level, by level (`entries[LEECHIO_LEVEL_PDE]`
    /// is the PDE). Levels the walk did not read hold 0: the PML5E of a
    /// 4-level walk, and the levels below a large page or below where a
    /// walk stopped.
    pub entries: [u64; LEECHIO_LEVELS],
    /// How many entries the walk read, from its top level down: they are
    /// `entries[LEECHIO_LEVELS - paging_levels]` on (`paging_levels` for a
    /// 4 KiB page, fewer for a large page or a walk that stopped, 0 for a
    /// non-canonical address).
    pub entry_count: u32,
    /// The level (`LEECHIO_LEVEL_*`) where a failed walk stopped: that of
    /// the entry found not present or with reserved bits set, or of the
    /// table that could not be read; -1 on success and when the walk did
    /// not start (a non-canonical address).
    pub failed_level: i32,
}

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

impl Handle for leechio_space {
    const NAME: &'static str = "space";
}

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

/// The C record of the walk of `va` in `paging` mode.
fn translation(
    va: u64,
    paging: Paging,
    result: Result<leechio_rs::Translation, WalkError>,
) -> leechio_translation {
    let (entries_read, status, pa, page_size, failed_level) = match result {
        Ok(t) => (t.entries, LEECHIO_OK, t.pa, t.page_size.bytes(), -1),
        Err(e) => (
            e.entries,
            leechio_status::from_page_error(e.reason),
            0,
            0,
            // A level is below LEECHIO_LEVELS: it fits.
            e.level.map_or(-1, |l| l as i32),
        ),
    };
    // The engine numbers levels as the C API does (an array of another
    // length would not compile here).
    let entries: [u64; LEECHIO_LEVELS] = entries_read.map(|e| e.unwrap_or(0));
    let entry_count = entries_read.iter().flatten().count() as u32;
    leechio_translation {
        va,
        status,
        paging_levels: u32::from(paging.levels()),
        pa,
        page_size,
        entries,
        entry_count,
        failed_level,
    }
}

/// Translates `count` virtual addresses at once (their walks share each
/// level's device call) into `out[0..count]`. Returns `LEECHIO_OK` when
/// all translated, `LEECHIO_INCOMPLETE` when some did not (each
/// `out[i].status` says why).
///
/// NULL: `vas` and `out` may be NULL when `count` is 0; `space` may not
/// (`LEECHIO_NULL_ARGUMENT`).
///
/// # Safety
/// `space` must be a live handle; `vas` readable for `count` addresses;
/// `out` writable for `count` translations.
#[no_mangle]
pub unsafe extern "C" fn leechio_space_translate_many(
    space: *const leechio_space,
    vas: *const u64,
    count: usize,
    out: *mut leechio_translation,
) -> leechio_status {
    guard("leechio_space_translate_many", || {
        // SAFETY: the caller's contract.
        let (s, vas) = unsafe { (leechio_space::lend(space)?, op_array(vas, count, "vas")?) };
        if count > 0 {
            non_null(out, "out")?;
        }
        let space = &s.space;
        let results = space
            .memory()
            .block_on(join_all(vas.iter().map(|&va| space.translate(va))));
        let mut failed = 0;
        for (i, (&va, r)) in vas.iter().zip(results).enumerate() {
            let t = translation(va, space.paging(), r);
            failed += usize::from(t.status != LEECHIO_OK);
            // SAFETY: i < count; `out` holds `count` elements.
            unsafe { out.add(i).write(t) };
        }
        if failed > 0 {
            return Err(Fail::new(
                LEECHIO_INCOMPLETE,
                format!(
                    "{failed} of {count} addresses have no translation (see each one's status)"
                ),
            ));
        }
        Ok(())
    })
}

/// Translates one virtual address into `*out` and returns its status
/// (`LEECHIO_OK`, `LEECHIO_NOT_MAPPED`, `LEECHIO_NON_CANONICAL`, or why a
/// table could not be read); `*out` is filled either way.
///
/// NULL: neither `space` nor `out` may be NULL (`LEECHIO_NULL_ARGUMENT`).
///
/// # Safety
/// `space` must be a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn leechio_space_translate(
    space: *const leechio_space,
    va: u64,
    out: *mut leechio_translation,
) -> leechio_status {
    guard("leechio_space_translate", || {
        // SAFETY: the caller's contract.
        let s = unsafe { leechio_space::lend(space)? };
        non_null(out, "out")?;
        let result = s.space.memory().block_on(s.space.translate(va));
        let t = translation(va, s.space.paging(), result);
        // SAFETY: checked non-NULL.
        unsafe { out.write(t) };
        match t.status {
            LEECHIO_OK => Ok(()),
            status => Err(Fail::new(
                status,
                format!("{va:#x} has no translation: {:?}", status),
            )),
        }
    })
}

/// Reads every op of `ops` from virtual memory in one batch, reporting
/// fragments like `leechio_read`: pages that are unmapped, non-canonical,
/// or whose tables or data cannot be read fail; the rest is read.
///
/// NULL: as for `leechio_read`, with `space` for `device`.
///
/// # Safety
/// As for `leechio_read`, with `space` instead of `device`.
#[no_mangle]
pub unsafe extern "C" fn leechio_space_read(
    space: *const leechio_space,
    ops: *const leechio_read_op,
    count: usize,
    on_fragment: leechio_fragment_fn,
    context: *mut c_void,
) -> leechio_status {
    guard("leechio_space_read", || {
        // SAFETY: the caller's contract on every pointer.
        let (s, ops) = unsafe { (leechio_space::lend(space)?, op_array(ops, count, "ops")?) };
        // SAFETY: as above; the buffers are used only during this call.
        let buffers = unsafe { read_buffers(ops)? };
        let (space, mem) = (&s.space, s.space.memory());
        // In a scope, the device fills the caller's buffers in place.
        let results = mem.scope(|scope| {
            let reads = buffers.into_iter();
            mem.block_on(join_all(
                reads.map(|(va, buf)| space.read_scoped(scope, va, buf)),
            ))
        });
        // SAFETY: the caller vouches for the callback.
        unsafe {
            report(
                ops.iter().map(|op| op.length),
                |i| failures(&results[i]).to_vec(),
                on_fragment,
                context,
            )
        }
    })
}

/// Writes every op of `ops` to virtual memory in one batch, reporting
/// fragments like `leechio_write`.
///
/// Ops may overlap, as for `leechio_write`: they land in the order given.
///
/// NULL: as for `leechio_write`, with `space` for `device`.
///
/// # Safety
/// As for `leechio_write`, with `space` instead of `device`.
#[no_mangle]
pub unsafe extern "C" fn leechio_space_write(
    space: *const leechio_space,
    ops: *const leechio_write_op,
    count: usize,
    on_fragment: leechio_fragment_fn,
    context: *mut c_void,
) -> leechio_status {
    guard("leechio_space_write", || {
        // SAFETY: the caller's contract on every pointer.
        let (s, ops) = unsafe { (leechio_space::lend(space)?, op_array(ops, count, "ops")?) };
        // SAFETY: as above.
        let data = unsafe { write_data(ops)? };
        let (space, mem) = (&s.space, s.space.memory());
        // In a scope, the device takes the caller's bytes in place.
        // (Translated first, then written in op order: two ops that write
        // the same bytes land in the order given.)
        let results = mem.scope(|scope| mem.block_on(space.write_all_scoped(scope, &data)));
        // SAFETY: the caller vouches for the callback.
        unsafe {
            report(
                ops.iter().map(|op| op.length),
                |i| failures(&results[i]).to_vec(),
                on_fragment,
                context,
            )
        }
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use leechio_rs::{PageError, PageSize};

    #[test]
    fn entries_keep_their_level_in_both_modes() {
        // A 2 MiB page in a 4-level walk: PML4E, PDPTE, PDE read.
        let four = leechio_rs::Translation {
            va: 0xffff_ffff_8100_0000,
            pa: 0x100_0000,
            page_size: PageSize::Size2M,
            entries: [None, Some(0x11), Some(0x22), Some(0x1000_00e3), None],
        };
        let t = translation(four.va, Paging::FourLevel, Ok(four));
        assert_eq!(t.entries, [0, 0x11, 0x22, 0x1000_00e3, 0]);
        assert_eq!((t.paging_levels, t.entry_count, t.failed_level), (4, 3, -1));
        assert_eq!(
            (t.status, t.pa, t.page_size),
            (LEECHIO_OK, 0x100_0000, 2 << 20)
        );
        // A 5-level walk stopped at a PDE not present: five levels, the
        // PTE slot empty.
        let stopped = WalkError {
            va: 0xff11_0000_0000_0000,
            reason: PageError::NotMapped,
            level: Some(LEECHIO_LEVEL_PDE as usize),
            entries: [Some(0x5), Some(0x4), Some(0x3), Some(0), None],
        };
        let t = translation(stopped.va, Paging::FiveLevel, Err(stopped));
        assert_eq!(t.entries, [0x5, 0x4, 0x3, 0, 0]);
        assert_eq!((t.paging_levels, t.entry_count, t.failed_level), (5, 4, 3));
        assert_eq!((t.status, t.pa, t.page_size), (LEECHIO_NOT_MAPPED, 0, 0));
        // A walk that never started: the mode is still the space's.
        let unstarted = WalkError {
            va: 0x8000_0000_0000_0000,
            reason: PageError::NonCanonical,
            level: None,
            entries: [None; LEECHIO_LEVELS],
        };
        let t = translation(unstarted.va, Paging::FiveLevel, Err(unstarted));
        assert_eq!((t.paging_levels, t.entry_count, t.failed_level), (5, 0, -1));
        assert_eq!(t.status, LEECHIO_NON_CANONICAL);
    }

    #[test]
    fn levels_name_a_mode_or_ask_for_detection() {
        assert_eq!(named_paging(0).unwrap(), None);
        assert_eq!(named_paging(4).unwrap(), Some(Paging::FourLevel));
        assert_eq!(named_paging(5).unwrap(), Some(Paging::FiveLevel));
        for bad in [1, 3, 6, 257, 260, u32::MAX] {
            let e = named_paging(bad).unwrap_err();
            assert_eq!(e.status, LEECHIO_INVALID_ARGUMENT);
            assert!(e
                .message
                .contains(&format!("`levels` is {bad}: give 4 or 5")));
        }
    }
}
