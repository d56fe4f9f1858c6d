//! Finding address spaces in physical memory: pages that look like x86-64
//! top-level page tables (PML4s or PML5s), checked one level down, grouped
//! by the kernel half they share, each group's paging mode found from its
//! tables (see [`super::detect_paging`]).

use std::collections::HashMap;

use super::detect::detect_paging;
use super::mappings::mapped_bytes;
use super::paging::{Paging, ADDR_MASK, ENTRIES, PRESENT};
use super::{AddressSpace, VmConfig};
use crate::{join_all, Memory};

/// Bytes read per device call while scanning.
const CHUNK: usize = 4 << 20;
/// Entry bit 7: a large page (never set in a PML4 entry).
const PAGE_SIZE_BIT: u64 = 1 << 7;
/// Bits 52..62: available to software or reserved; kept zero by the OSes
/// this looks for in top and middle tables.
const HIGH_BITS: u64 = 0x7ff0_0000_0000_0000;
/// Groups of candidates whose paging mode is found at once.
const GROUPS_AT_ONCE: usize = 8;
/// Groups whose paging mode is looked for at all, the most shared first:
/// an OS's processes share one kernel half, and memory where every page
/// looks like a table must not cost a detection per page.
const GROUPS_EXAMINED: usize = 8;

/// A page that looks like the top table of an address space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceCandidate {
    /// Physical address of the table: the DTB (CR3) of the space.
    pub dtb: u64,
    /// Present entries in the user half (0..256).
    pub user_entries: usize,
    /// Present entries in the kernel half (256..512).
    pub kernel_entries: usize,
    /// How many other candidates have exactly this kernel half (processes
    /// of one OS share it).
    pub sharing_kernel_half: usize,
    /// The paging mode of its tables (found once for the candidates that
    /// share a kernel half), or why it could not be told.
    pub paging: Result<Paging, String>,
    /// Bytes mapped in the user half; `None` when the mode is not known.
    pub user_mapped: Option<u64>,
    /// Bytes mapped in the kernel half; `None` when the mode is not known.
    pub kernel_mapped: Option<u64>,
}

/// Whether `page` could be a page table whose entries point below
/// `max_address`: every entry is zero or present and sane.
/// `top` forbids large pages (a PML4 has none).
fn looks_like_table(page: &[u8], max_address: u64, top: bool) -> bool {
    let mut present = 0;
    for e in page
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    {
        if e == 0 {
            continue;
        }
        if e & PRESENT == 0 || e & HIGH_BITS != 0 || (e & ADDR_MASK) >= max_address {
            return false;
        }
        if top && e & PAGE_SIZE_BIT != 0 {
            return false;
        }
        present += 1;
    }
    present > 0
}

fn entry(page: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(page[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
}

/// Scans all memory in the device's memory map for top-level page tables.
/// `progress(done, total)` is called after each chunk. Candidates must have
/// a present kernel-half entry and tables one level down; they come sorted
/// by how many others share their kernel half, then by DTB. Their paging
/// mode is `paging` when given, else found from their tables.
pub fn find_address_spaces(
    mem: &Memory,
    paging: Option<Paging>,
    mut progress: impl FnMut(u64, u64),
) -> Vec<SpaceCandidate> {
    let backend = mem.backend();
    let max_address = backend.max_address();
    let map = backend.memory_map();
    let total = map.total_size();
    let mut found: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut buf = vec![0u8; CHUNK];
    let mut done = 0;
    for range in map.ranges() {
        let mut at = range.start;
        while at < range.end() {
            let len = (range.end() - at).min(CHUNK as u64) as usize;
            let outcome = mem.read_now([(at, &mut buf[..len])]);
            let failed: Vec<_> = outcome.failures(0).copied().collect();
            for (i, page) in buf[..len].chunks_exact(0x1000).enumerate() {
                let offset = i * 0x1000;
                let unreadable = failed
                    .iter()
                    .any(|f| f.offset < offset + 0x1000 && offset < f.offset + f.len);
                let kernel = (ENTRIES / 2..ENTRIES).any(|k| entry(page, k) != 0);
                if !unreadable && kernel && looks_like_table(page, max_address, true) {
                    found.push((at + offset as u64, page.to_vec()));
                }
            }
            at += len as u64;
            done += len as u64;
            progress(done, total);
        }
    }

    // One level down: the kernel entries must lead to tables too (one
    // batch for every candidate).
    let mut next: Vec<u64> = found
        .iter()
        .flat_map(|(_, page)| {
            (ENTRIES / 2..ENTRIES)
                .map(|k| entry(page, k))
                .filter(|&e| e != 0)
        })
        .map(|e| e & ADDR_MASK)
        .collect();
    next.sort_unstable();
    next.dedup();
    let mut pages = vec![0u8; next.len() * 0x1000];
    let outcome = mem.read_now(next.iter().copied().zip(pages.chunks_exact_mut(0x1000)));
    let good: HashMap<u64, bool> = next
        .iter()
        .enumerate()
        .map(|(i, &pa)| {
            let page = &pages[i * 0x1000..(i + 1) * 0x1000];
            // An empty table below is normal (Linux preallocates the
            // vmalloc area's PDPTs).
            let ok = outcome.failures(i).next().is_none()
                && (page.iter().all(|&b| b == 0) || looks_like_table(page, max_address, false));
            (pa, ok)
        })
        .collect();
    found.retain(|(_, page)| {
        (ENTRIES / 2..ENTRIES)
            .map(|k| entry(page, k))
            .filter(|&e| e != 0)
            .all(|e| good.get(&(e & ADDR_MASK)).copied().unwrap_or(false))
    });

    // The candidates that share a kernel half are one OS's: one mode for
    // them all, found from the first of them.
    let mut halves: HashMap<&[u8], (usize, usize)> = HashMap::new();
    for (i, (_, page)) in found.iter().enumerate() {
        halves.entry(&page[0x800..]).or_insert((0, i)).0 += 1;
    }
    let mut firsts: Vec<(usize, usize)> = halves.values().copied().collect();
    firsts.sort_unstable_by_key(|&(members, first)| (std::cmp::Reverse(members), first));
    let mut firsts: Vec<usize> = firsts.into_iter().map(|(_, first)| first).collect();
    let mut modes: HashMap<usize, Result<Paging, String>> = HashMap::new();
    if let Some(paging) = paging {
        modes.extend(firsts.iter().map(|&i| (i, Ok(paging))));
        firsts.clear();
    }
    if firsts.len() > GROUPS_EXAMINED {
        let groups = firsts.len();
        let why = format!(
            "not examined: the paging mode is looked for in the {GROUPS_EXAMINED} most shared of \
             {groups} distinct kernel halves"
        );
        modes.extend(
            firsts
                .drain(GROUPS_EXAMINED..)
                .map(|i| (i, Err(why.clone()))),
        );
    }
    for group in firsts.chunks(GROUPS_AT_ONCE) {
        let evidence = mem.block_on(join_all(
            group.iter().map(|&i| detect_paging(mem, found[i].0)),
        ));
        for (&i, e) in group.iter().zip(evidence) {
            modes.insert(i, e.paging());
        }
    }
    let mut candidates: Vec<SpaceCandidate> = found
        .iter()
        .map(|(dtb, page)| SpaceCandidate {
            dtb: *dtb,
            user_entries: (0..ENTRIES / 2).filter(|&i| entry(page, i) != 0).count(),
            kernel_entries: (ENTRIES / 2..ENTRIES)
                .filter(|&i| entry(page, i) != 0)
                .count(),
            sharing_kernel_half: halves[&page[0x800..]].0 - 1,
            paging: modes[&halves[&page[0x800..]].1].clone(),
            user_mapped: None,
            kernel_mapped: None,
        })
        .collect();

    // Mapped sizes: the tables of every candidate walked together, each
    // distinct table page once (kernel halves are shared, and a garbage
    // candidate's tables cost what they hold, not their paths).
    let reader = AddressSpace::with_config(mem.clone(), 0, Paging::FourLevel, VmConfig::UNCACHED);
    let known: Vec<usize> = (0..candidates.len())
        .filter(|&i| candidates[i].paging.is_ok())
        .collect();
    let roots: Vec<(u64, Paging)> = known
        .iter()
        .filter_map(|&i| Some((candidates[i].dtb, candidates[i].paging.clone().ok()?)))
        .collect();
    let sizes = mem.block_on(mapped_bytes(&reader, &roots));
    for (&i, (user, kernel)) in known.iter().zip(sizes) {
        candidates[i].user_mapped = Some(user);
        candidates[i].kernel_mapped = Some(kernel);
    }
    candidates.sort_by(|a, b| {
        b.sharing_kernel_half
            .cmp(&a.sharing_kernel_half)
            .then(a.dtb.cmp(&b.dtb))
    });
    candidates
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(entries: &[(usize, u64)]) -> Vec<u8> {
        let mut p = vec![0u8; 0x1000];
        for &(i, e) in entries {
            p[i * 8..i * 8 + 8].copy_from_slice(&e.to_le_bytes());
        }
        p
    }

    #[test]
    fn table_shapes() {
        let max = 1 << 30;
        assert!(looks_like_table(
            &page(&[(0, 0x1000 | 0x67), (511, 0x2000 | 0x63)]),
            max,
            true
        ));
        assert!(!looks_like_table(&page(&[]), max, true), "empty");
        assert!(
            !looks_like_table(&page(&[(3, 0x1000)]), max, true),
            "not present but nonzero"
        );
        assert!(
            !looks_like_table(&page(&[(3, 0x4000_0000 | 1)]), max, true),
            "points past the end"
        );
        assert!(
            !looks_like_table(&page(&[(3, 0x1000 | 0x81)]), max, true),
            "large page in a PML4"
        );
        assert!(
            looks_like_table(&page(&[(3, 0x20_0000 | 0x81)]), max, false),
            "large page below"
        );
        assert!(
            !looks_like_table(&page(&[(3, 0x0010_0000_0000_1001)]), max, true),
            "high bits"
        );
        assert!(
            looks_like_table(&page(&[(3, 0x8000_0000_0000_1001)]), max, true),
            "NX is fine"
        );
    }
}
