//! Where the kernel's image lies, from its page tables.
//!
//! x86-64 Linux maps its image at `__START_KERNEL_map` + offset through
//! tables inside the image itself: the top table's last entry (511) points
//! at `level3_kernel_pgt` (with 5-level paging, at `level4_kernel_pgt`,
//! whose entry 511 points at `level3_kernel_pgt`), whose entry 510 points
//! at `level2_kernel_pgt`, whose entries map the image in 2 MiB steps (some
//! split into 4 KiB pages where permissions change). Entries below `_text`
//! are cleared at boot (`cleanup_highmap`), so the first present one is the
//! kernel's virtual base, and what it maps is the physical base, both
//! randomised by KASLR.
//!
//! A top table to start from: the one given, or the copy of the kernel's
//! top table that every x86-64 kernel keeps below 1 MiB for starting
//! other CPUs (the real-mode trampoline's `trampoline_pgd`, whose kernel
//! half `setup_real_mode` copies from `init_top_pgt`): reading the first
//! MiB of RAM (256 pages, one batch) finds it, whatever the RAM's size.

use futures::future::join_all;

use crate::vm::paging::{table_index, ADDR_MASK, NO_EXECUTE, PAGE_SIZE_BIT, PRESENT, WRITABLE};
use crate::vm::Paging;
use crate::Memory;

/// First address of the kernel image's mapping (`__START_KERNEL_map`).
pub const KERNEL_MAP: u64 = 0xffff_ffff_8000_0000;
/// Size of the image mapping (`KERNEL_IMAGE_SIZE` with KASLR): one
/// `level2_kernel_pgt`.
pub const KERNEL_MAP_SIZE: u64 = 1 << 30;
/// Level of the entries of `level2_kernel_pgt` (page directory entries).
const PDE_LEVEL: usize = 3;
/// Where the trampoline's top table is looked for.
pub const LOW_MEMORY: u64 = 1 << 20;
const PAGE: u64 = 0x1000;
const LARGE: u64 = 0x20_0000;

/// A run of the image's mapping with one set of permissions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// First virtual address.
    pub va: u64,
    /// Physical address of `va`.
    pub pa: u64,
    /// Bytes.
    pub len: u64,
    /// Writable.
    pub writable: bool,
    /// Executable.
    pub executable: bool,
}

/// The kernel image as its page tables map it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// The top table it was found through.
    pub root: u64,
    /// The paging mode its tables were read in.
    pub paging: Paging,
    /// The top table's entry 511 (shared by every page table of the
    /// kernel: how another root is recognised as the same kernel's).
    pub top_entry: u64,
    /// Virtual address of `_text`.
    pub virtual_base: u64,
    /// Physical address of `_text`.
    pub physical_base: u64,
    /// The mapping from `_text` on, merged by permissions.
    pub segments: Vec<Segment>,
}

impl Image {
    /// The read-only, non-executable data after the text (`.rodata`, where
    /// BTF, kallsyms and the banner lie).
    pub fn rodata(&self) -> Option<Segment> {
        let text_end = self.segments.iter().position(|s| s.executable)?;
        self.segments[text_end..]
            .iter()
            .find(|s| !s.executable && !s.writable)
            .copied()
    }

    /// The physical address of `va` inside the image, or `None`.
    pub fn physical(&self, va: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| (s.va..s.va + s.len).contains(&va))
            .map(|s| s.pa + (va - s.va))
    }
}

/// Whether `page` reads as a kernel top-level table: entry 511 present,
/// several kernel-half entries, and no present entry a CPU would fault on
/// (a large-page bit, or an address at or above `limit`).
pub fn looks_like_top_table(page: &[u8], limit: u64) -> bool {
    let entries = page
        .chunks_exact(8)
        .map(|e| u64::from_le_bytes(e.try_into().unwrap()));
    let mut kernel_half = 0;
    for (i, e) in entries.enumerate() {
        if e & PRESENT == 0 {
            continue;
        }
        if e & PAGE_SIZE_BIT != 0 || e & ADDR_MASK >= limit || e & 0x7ff0_0000_0000_0000 != 0 {
            return false;
        }
        if i >= 256 {
            kernel_half += 1;
        }
        if i == 511 {
            return kernel_half >= 2;
        }
    }
    false
}

/// Reads the first MiB of physical memory in one batch and returns the
/// pages that look like a kernel top table, lowest first.
pub async fn low_memory_roots(mem: &Memory, limit: u64) -> Vec<u64> {
    let mut low = vec![0u8; LOW_MEMORY.min(limit) as usize];
    if let Err(e) = mem.read(0, &mut low).await {
        e.zero_fill(&mut low);
    }
    low.chunks_exact(PAGE as usize)
        .enumerate()
        .filter(|(_, page)| looks_like_top_table(page, limit))
        .map(|(i, _)| i as u64 * PAGE)
        .collect()
}

/// One present leaf of `level2_kernel_pgt` or below.
fn leaf(va: u64, entry: u64, size: u64) -> Segment {
    let mask = !(size - 1) & ADDR_MASK;
    Segment {
        va,
        pa: entry & mask,
        len: size,
        writable: entry & WRITABLE != 0,
        executable: entry & NO_EXECUTE == 0,
    }
}

fn entries(page: &[u8]) -> impl Iterator<Item = u64> + '_ {
    page.chunks_exact(8)
        .map(|e| u64::from_le_bytes(e.try_into().unwrap()))
}

async fn read_page(mem: &Memory, pa: u64) -> Option<Vec<u8>> {
    let mut page = vec![0u8; PAGE as usize];
    mem.read(pa, &mut page).await.ok()?;
    Some(page)
}

/// Whether `va` can be the kernel's virtual base: 2 MiB aligned, in the
/// gigabyte `level2_kernel_pgt` maps.
pub fn is_image_base(va: u64) -> bool {
    va >= KERNEL_MAP && va - KERNEL_MAP < KERNEL_MAP_SIZE && va % LARGE == 0
}

/// Follows `root`'s entry 511, read in `paging` mode, down to the image's
/// 2 MiB table and reads its split entries' page tables (one batch): the
/// image's base and mapping. `base_hint`, a virtual address of `_text`, is
/// taken instead of the first present entry. `None` when the tables are
/// not those of a kernel image below `limit`.
pub async fn image_of(
    mem: &Memory,
    root: u64,
    base_hint: Option<u64>,
    limit: u64,
    paging: Paging,
) -> Option<Image> {
    let table = |e: u64| {
        (e & PRESENT != 0 && e & PAGE_SIZE_BIT == 0 && e & ADDR_MASK < limit)
            .then_some(e & ADDR_MASK)
    };
    let first = match base_hint {
        Some(va) if is_image_base(va) => Some(((va - KERNEL_MAP) / LARGE) as usize),
        Some(_) => return None,
        None => None,
    };
    let top_entry = mem.read_val::<u64>(root + 511 * 8).await.ok()?;
    // Down to the page directory that maps the image's gigabyte.
    let mut level2 = table(top_entry)?;
    for level in paging.top_level() + 1..PDE_LEVEL {
        let at = level2 + table_index(KERNEL_MAP, level) * 8;
        level2 = table(mem.read_val::<u64>(at).await.ok()?)?;
    }
    let pmds: Vec<u64> = entries(&read_page(mem, level2).await?).collect();
    let first = match first {
        Some(first) => first,
        None => pmds.iter().position(|e| e & PRESENT != 0)?,
    };
    // The image's entries, up to the first hole.
    let present: Vec<(u64, u64)> = pmds[first..]
        .iter()
        .take_while(|e| *e & PRESENT != 0)
        .enumerate()
        .map(|(i, &e)| (KERNEL_MAP + (first + i) as u64 * LARGE, e))
        .collect();
    if present.is_empty() {
        return None;
    }
    let tables = join_all(present.iter().map(|&(_, e)| async move {
        match table(e) {
            Some(pt) if e & PAGE_SIZE_BIT == 0 => read_page(mem, pt).await.map(Some),
            _ => Some(None),
        }
    }))
    .await;
    // The image is contiguous in physical memory too: a leaf elsewhere is
    // not the kernel's, and ends the search of this root at once (tables
    // that only look like a kernel's would give 512 leaves an entry).
    let mut leaves: Vec<Segment> = Vec::new();
    let mut add = |l: Segment| {
        let fits = match leaves.first() {
            None => l.va == present[0].0 && l.pa % LARGE == 0,
            Some(base) => l.pa.wrapping_sub(base.pa) == l.va - base.va,
        };
        fits.then(|| leaves.push(l))
    };
    for (&(va, e), pt) in present.iter().zip(tables) {
        match pt? {
            None if e & PAGE_SIZE_BIT != 0 && e & ADDR_MASK < limit => add(leaf(va, e, LARGE))?,
            None => return None,
            // Decoded as they are added: tables that only look like a
            // kernel's end at their first entry, not after 512 pages.
            Some(page) => {
                for (i, pte) in entries(&page).enumerate() {
                    if pte & PRESENT != 0 && pte & ADDR_MASK < limit {
                        add(leaf(va + i as u64 * PAGE, pte, PAGE))?;
                    }
                }
            }
        }
    }
    let base = *leaves.first()?;
    let (virtual_base, physical_base) = (base.va, base.pa);
    if virtual_base + KERNEL_MAP_SIZE < leaves.last()?.va {
        return None;
    }
    Some(Image {
        root,
        paging,
        top_entry,
        virtual_base,
        physical_base,
        segments: merge(leaves),
    })
}

/// Merges adjacent leaves of the same permissions.
fn merge(leaves: Vec<Segment>) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::new();
    for l in leaves {
        match out.last_mut() {
            Some(s)
                if s.va + s.len == l.va
                    && s.writable == l.writable
                    && s.executable == l.executable =>
            {
                s.len += l.len
            }
            _ => out.push(l),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemBackend;

    fn put(mem: &mut [u8], pa: u64, value: u64) {
        mem[pa as usize..pa as usize + 8].copy_from_slice(&value.to_le_bytes());
    }

    /// 16 MiB with a kernel at physical 8 MiB mapped at
    /// 0xffffffff81000000: text 2 MiB, rodata 4 KiB pages then data.
    fn kernel_memory() -> Vec<u8> {
        let mut m = vec![0u8; 16 << 20];
        let (root, l3, l2, pt) = (0x9c000, 0x10_0000, 0x10_1000, 0x10_2000);
        put(&mut m, root, 0x40_1067); // identity entry 0
        put(&mut m, root + 273 * 8, 0x20_0067);
        put(&mut m, root + 511 * 8, l3 | 0x67);
        put(&mut m, l3 + 510 * 8, l2 | 0x63);
        put(&mut m, l2 + 8 * 8, 0x80_0000 | 0x1e1); // text: RO, executable
        put(&mut m, l2 + 9 * 8, pt | 0x63);
        for i in 0..512u64 {
            let flags = if i < 100 { 0x161 } else { 0x163 }; // rodata, then data
            put(
                &mut m,
                pt + i * 8,
                (0xa0_0000 + i * PAGE) | flags | NO_EXECUTE,
            );
        }
        m
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: minutes (linux has no unsafe code)
    fn finds_the_trampoline_copy_and_the_image() {
        let mem = Memory::new(MemBackend::new(kernel_memory()));
        let roots = mem.block_on(low_memory_roots(&mem, 16 << 20));
        assert_eq!(roots, vec![0x9c000]);
        let image = mem
            .block_on(image_of(&mem, 0x9c000, None, 16 << 20, Paging::FourLevel))
            .unwrap();
        assert_eq!(image.virtual_base, 0xffff_ffff_8100_0000);
        assert_eq!(image.physical_base, 0x80_0000);
        let rodata = image.rodata().unwrap();
        assert_eq!(
            (rodata.va, rodata.pa, rodata.len),
            (0xffff_ffff_8120_0000, 0xa0_0000, 100 * PAGE)
        );
        assert_eq!(image.segments.len(), 3);
        assert_eq!(image.physical(0xffff_ffff_8120_1008), Some(0xa0_1008));
    }

    /// The same kernel under 5-level paging: a PML5 at the trampoline's
    /// place whose entry 511 leads to a PML4 whose entry 511 leads to the
    /// same `level3_kernel_pgt`.
    fn kernel_memory_5_level() -> Vec<u8> {
        let mut m = kernel_memory();
        let (root, l4) = (0x9c000, 0x10_3000);
        let l3 = 0x10_0000;
        put(&mut m, root + 511 * 8, l4 | 0x67);
        put(&mut m, l4 + 511 * 8, l3 | 0x67);
        m
    }

    #[test]
    fn finds_the_image_under_5_level_paging_only_in_that_mode() {
        let mem = Memory::new(MemBackend::new(kernel_memory_5_level()));
        let five = mem
            .block_on(image_of(&mem, 0x9c000, None, 16 << 20, Paging::FiveLevel))
            .unwrap();
        assert_eq!(five.paging, Paging::FiveLevel);
        assert_eq!(five.virtual_base, 0xffff_ffff_8100_0000);
        assert_eq!(five.physical_base, 0x80_0000);
        assert_eq!(five.top_entry, 0x10_3067);
        // Read as 4-level, entry 510 of the PML4 is no table.
        let four = image_of(&mem, 0x9c000, None, 16 << 20, Paging::FourLevel);
        assert_eq!(mem.block_on(four), None);
        // And the 4-level kernel is not found as 5-level.
        let mem = Memory::new(MemBackend::new(kernel_memory()));
        let five = image_of(&mem, 0x9c000, None, 16 << 20, Paging::FiveLevel);
        assert_eq!(mem.block_on(five), None);
    }

    #[test]
    fn a_base_hint_outside_the_image_gigabyte_is_refused_not_a_panic() {
        let mem = Memory::new(MemBackend::new(kernel_memory()));
        for hint in [
            0xffff_ffff_c000_0000,
            0xffff_ffff_ffe0_0000,
            KERNEL_MAP - LARGE,
            0xffff_ffff_8100_1000,
        ] {
            let found = image_of(&mem, 0x9c000, Some(hint), 16 << 20, Paging::FourLevel);
            assert_eq!(mem.block_on(found), None, "{hint:#x}");
            assert!(!is_image_base(hint), "{hint:#x}");
        }
        assert!(is_image_base(0xffff_ffff_bfe0_0000));
    }

    #[test]
    fn tables_that_are_not_a_kernel_are_refused() {
        let mut m = kernel_memory();
        // The rodata page table maps one page elsewhere: not contiguous.
        put(&mut m, 0x10_2000 + 5 * 8, 0x30_0000 | 0x161);
        let mem = Memory::new(MemBackend::new(m));
        assert_eq!(
            mem.block_on(image_of(&mem, 0x9c000, None, 16 << 20, Paging::FourLevel)),
            None
        );
        // A top table whose entry points past the end of memory.
        let mut m = kernel_memory();
        put(&mut m, 0x9c000 + 300 * 8, (1 << 40) | 0x67);
        assert!(!looks_like_top_table(&m[0x9c000..0x9d000], 16 << 20));
        // A hint that is not where the image is.
        let mem = Memory::new(MemBackend::new(kernel_memory()));
        let hint = Some(0xffff_ffff_8200_0000);
        assert_eq!(
            mem.block_on(image_of(&mem, 0x9c000, hint, 16 << 20, Paging::FourLevel)),
            None
        );
    }
}
