//! What a dump says about the ranges it could not walk or left out.

use super::*;

/// `n` bytes as people read them: `16.0 EiB`, `2.0 MiB`, `4096 bytes`.
pub(super) fn human_size(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    match (1..=UNITS.len()).rev().find(|&i| n >> (10 * i) > 0) {
        Some(i) => format!(
            "{:.1} {}",
            n as f64 / (1u64 << (10 * i)) as f64,
            UNITS[i - 1]
        ),
        None => format!("{n} bytes"),
    }
}

/// Says which parts of the address space could not be walked: the first
/// few ranges, then how many more and how much they cover (a wrong `--dtb`
/// makes hundreds, which would bury the message that matters).
pub(super) fn report_failed(failed: &[FailedRange]) {
    const SHOWN: usize = 3;
    for r in failed.iter().take(SHOWN) {
        let what = match r.reason {
            PageError::ReservedBits => "map nothing",
            _ => "unreadable",
        };
        errln!(
            "leechio: page tables for {:#x}..{:#x} {what}: {}",
            r.va,
            u128::from(r.va) + u128::from(r.size),
            r.reason
        );
    }
    if let Some(rest) = failed.get(SHOWN..).filter(|rest| !rest.is_empty()) {
        let bytes = rest.iter().fold(0u64, |sum, r| sum.saturating_add(r.size));
        errln!(
            "leechio: page tables for {} more ranges ({} of address space) unreadable or mapping nothing too",
            rest.len(),
            human_size(bytes)
        );
    }
}

/// Says which ranges were left out because their page tables are ones
/// already dumped for an earlier range (they map the same memory).
pub(super) fn report_aliases(aliases: &[Alias]) {
    let Some(first) = aliases.first() else {
        return;
    };
    let bytes = aliases
        .iter()
        .fold(0u64, |sum, a| sum.saturating_add(a.size));
    errln!(
        "leechio: {} ranges ({} of address space) left out: their page tables are ones \
         already dumped for an earlier range, so they map the same memory (first: {:#x}..{:#x} \
         as {:#x}..)",
        aliases.len(),
        human_size(bytes),
        first.va,
        u128::from(first.va) + u128::from(first.size),
        first.same_as
    );
}

/// The summary's line of what a dump left out (a process's, by reason:
/// `left_out`) and of the segments that show memory another segment
/// placed; the list of what was left out is in `listed_in`. `None` when
/// there is neither.
pub(super) fn left_out_and_shared(
    left_out: Option<&process::LeftOutBytes>,
    layout: &layout::Layout,
    listed_in: Option<&Path>,
) -> Option<String> {
    let mut said = Vec::new();
    let left = left_out.map(|l| l.phrases()).unwrap_or_default();
    if !left.is_empty() {
        said.push(format!(
            "left out {}{}",
            left.join(", "),
            listed_in.map_or(String::new(), |p| format!(" (listed in {})", p.display()))
        ));
    }
    if layout.shared_segments > 0 {
        said.push(format!(
            "{} {} {} of memory mapped more than once, whose bytes are in the file once",
            layout.shared_segments,
            if layout.shared_segments == 1 {
                "segment shows"
            } else {
                "segments show"
            },
            human_size(layout.shared_bytes)
        ));
    }
    (!said.is_empty()).then(|| said.join("; "))
}
