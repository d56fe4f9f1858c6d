//! What a dump of physical memory or of an address space (`--dtb`) holds:
//! the ranges of the memory map, or every mapped range with the
//! permissions its page tables give (the walk a process dump makes too).

use leechio::{Access, Memory};

use super::elf::{PF_R, PF_W, PF_X};
use super::layout::Piece;
use super::report::{report_aliases, report_failed};
use super::DumpArgs;
use crate::numbers::show_range;
use crate::Failure;

/// The ranges to dump, in address order.
pub(super) fn plan(mem: &Memory, args: &DumpArgs) -> Result<Vec<Piece>, Failure> {
    let within = |start: u64, end: u64| -> Option<(u64, u64)> {
        let (s, e) = match &args.range {
            // (A physical range's end is below 2^64.)
            Some(r) => (start.max(*r.start()), end.min(r.end().saturating_add(1))),
            None => (start, end),
        };
        (s < e).then_some((s, e))
    };
    match args.dtb {
        None => {
            let map = mem.backend().memory_map();
            if let Some(r) = &args.range {
                if *r.start() >= map.end() {
                    return Err(Failure(format!(
                        "range {} starts past the end of memory ({:#x})",
                        show_range(r),
                        map.end()
                    )));
                }
            }
            Ok(map
                .ranges()
                .iter()
                .filter_map(|r| within(r.start, r.end()))
                // Physical memory has no permissions: all of them, as kdump's
                // and /proc/kcore's segments say.
                .map(|(s, e)| Piece {
                    addr: s,
                    pa: s,
                    len: e - s,
                    flags: PF_R | PF_W | PF_X,
                    vma: None,
                })
                .collect())
        }
        Some(dtb) => {
            let dtb = dtb & !0xfff;
            check_root(mem, dtb, "(--dtb)")?;
            let space = crate::paging::space(mem, dtb)?;
            let range = args.range.clone().unwrap_or(0..=u64::MAX);
            let found = mem.block_on(space.mappings(range));
            report_failed(&found.failed);
            report_aliases(&found.aliases);
            Ok(found
                .mappings
                .iter()
                .map(|m| Piece {
                    addr: m.va,
                    pa: m.pa,
                    len: m.size,
                    flags: segment_flags(m.access),
                    vma: None,
                })
                .collect())
        }
    }
}

/// Checks that the page-table root at `dtb` can be read before its
/// tables are walked: a root that cannot be read makes every range
/// unreadable, and that is the one thing to say (`whose` names the root
/// in it), not "no memory in that range".
pub(super) fn check_root(mem: &Memory, dtb: u64, whose: &str) -> Result<(), Failure> {
    let mut entry = [0u8; 8];
    let Err(e) = mem.block_on(mem.read(dtb, &mut entry)) else {
        return Ok(());
    };
    let why = e.failed.first().map(|f| f.reason.to_string());
    let end = mem.backend().memory_map().end();
    Err(Failure(format!(
        "the page-table root {dtb:#x} {whose} is unreadable: {}{}; nothing to dump",
        why.as_deref().unwrap_or("read failed"),
        if dtb >= end {
            format!(" (memory ends at {end:#x})")
        } else {
            String::new()
        }
    )))
}

/// A segment's `p_flags` for memory with `access`: readable, and writable
/// or executable as the page tables allow.
fn segment_flags(access: Access) -> u32 {
    PF_R | if access.write { PF_W } else { 0 } | if access.execute { PF_X } else { 0 }
}
