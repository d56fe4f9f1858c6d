//! Translation: the walk of each virtual address as a C record, one
//! address or many in one batch.

use leechio_rs::join_all;
use leechio_rs::{Paging, WalkError};

use super::leechio_space;
use crate::error::{guard, non_null, Fail};
use crate::handle::Handle;
use crate::leechio_status::{self, *};
use crate::ops::op_array;

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

/// The C record of the walk of `va` in `paging` mode.
pub(super) fn translation(
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
