//! A walk's C record in both paging modes, and the modes `levels` names.

use super::translate::{translation, LEECHIO_LEVELS, LEECHIO_LEVEL_PDE};
use super::*;
use leechio_rs::{PageError, PageSize, WalkError};

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
