//! Steps 1 to 3 of reading a process's maps: the `mm_struct`, its VMA
//! tree and its VMAs, each VMA checked against the way it was reached,
//! within the most VMAs the target allows.

use std::collections::HashMap;

use super::names::name_vmas;
use super::{MapsFailure, RawVma, Symbols, VmFlags, Vma, Vmas, PAGE, USER_END, VMAS_PER_BATCH};
use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::{MapsLayout, Tree};
use crate::linux::structures::{maple, rbtree};

/// Reads the maps of `mm`, with the kernel's `symbols`. No more VMAs are
/// read than the kernel allows a process (`vm.max_map_count`, read from
/// the target, plus one: its check lets the count reach that) and than
/// the target's memory holds (`vm_area_struct`s); past that the walk is
/// cut and says so.
pub(crate) async fn read(
    kmem: &KernelMemory<'_>,
    layout: &MapsLayout,
    mm: u64,
    symbols: Symbols,
) -> Vmas {
    let mut failed = Vec::new();
    let (first, len) = layout.mm_span();
    let (fields, sysctl) =
        futures::join!(kmem.read_vec(mm.wrapping_add(first), len as usize), async {
            match symbols.max_map_count {
                Some(at) => kmem.read_vec(at, 4).await.ok()?.u32_at(0),
                None => None,
            }
        });
    let max_vmas = max_vmas(kmem.limit, layout.vma_size, sysctl.map(|v| v as i32));
    let fields = match fields {
        Ok(bytes) => bytes,
        Err(why) => {
            failed.push(MapsFailure::new(mm, format!("mm_struct: {why}")));
            return Vmas {
                vmas: Vec::new(),
                failed,
            };
        }
    };
    let field = |at: u64| fields.u64_at(at - first).unwrap_or(0);
    let vma_size = layout.vma_size as usize;
    // (address, bytes, the indices the tree says it covers)
    let mut raw: Vec<RawVma> = Vec::new();
    match &layout.tree {
        Tree::Maple {
            root,
            layout: maple,
        } => {
            let (entries, cut, at_limit) =
                maple::entries(kmem, maple, field(*root), max_vmas.count).await;
            if at_limit {
                failed.push(MapsFailure::new(mm, max_vmas.why()));
            }
            failed.extend(cut.into_iter().map(MapsFailure::from));
            for batch in entries.chunks(VMAS_PER_BATCH) {
                let reads = batch.iter().map(|e| kmem.read_vec(e.value, vma_size));
                let read = futures::future::join_all(reads).await;
                for (e, bytes) in batch.iter().zip(read) {
                    match bytes {
                        Ok(bytes) => raw.push((e.value, bytes, Some((e.first, e.last)))),
                        Err(why) => failed.push(MapsFailure::new(e.value, format!("VMA: {why}"))),
                    }
                }
            }
        }
        Tree::RedBlack {
            root,
            vm_rb,
            layout: rb,
            ..
        } => {
            let objects = rbtree::Objects {
                node: *vm_rb,
                size: vma_size,
                what: "VMA",
            };
            let rbtree::Walked {
                objects: found,
                failed: cut,
                more: at_limit,
                ..
            } = rbtree::objects(kmem, rb, objects, field(*root), max_vmas.count).await;
            if at_limit {
                failed.push(MapsFailure::new(mm, max_vmas.why()));
            }
            failed.extend(cut.into_iter().map(MapsFailure::from));
            raw.extend(found.into_iter().map(|(at, bytes)| (at, bytes, None)));
        }
    }
    let mut vmas = checked_vmas(layout, mm, &raw, &mut failed);
    if let Tree::RedBlack { list, next, .. } = layout.tree {
        check_list(&vmas, &raw, field(list), next, &mut failed);
    }
    let count = field(layout.map_count) as u32 as usize;
    if count != vmas.len() && failed.is_empty() {
        failed.push(MapsFailure::new(
            mm,
            format!("mm_struct counts {count} VMAs, {} were found", vmas.len()),
        ));
    }
    let bytes_of: HashMap<u64, &Vec<u8>> = raw.iter().map(|(at, b, _)| (*at, b)).collect();
    name_vmas(kmem, layout, &mut vmas, &bytes_of, &symbols, &mut failed).await;
    let (brk, start_brk, stack) = (
        field(layout.brk),
        field(layout.start_brk),
        field(layout.start_stack),
    );
    for vma in vmas
        .iter_mut()
        .filter(|v| v.file.is_none() && v.name.is_none())
    {
        if vma.start <= brk && vma.end >= start_brk {
            vma.name = Some("[heap]".into());
        } else if vma.start <= stack && vma.end >= stack {
            vma.name = Some("[stack]".into());
        }
    }
    Vmas { vmas, failed }
}

/// The most VMAs a process of the target can have, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MaxVmas {
    count: usize,
    /// `vm.max_map_count` as read, when it was.
    sysctl: Option<i32>,
    /// The bound by memory: `vm_area_struct`s that fit in it.
    by_memory: u64,
}

impl MaxVmas {
    fn why(&self) -> String {
        match self.sysctl {
            Some(n) if (self.count as u64) < self.by_memory => format!(
                "more VMAs than the target's vm.max_map_count ({n}) allows: the first {} read",
                self.count
            ),
            _ => format!(
                "more VMAs than the {} vm_area_structs the target's memory holds: the first {} read",
                self.by_memory, self.count
            ),
        }
    }
}

/// The most VMAs read: `sysctl` (`vm.max_map_count`, when read) plus one,
/// and no more `vm_area_struct`s of `vma_size` bytes than `memory` bytes
/// hold.
fn max_vmas(memory: u64, vma_size: u64, sysctl: Option<i32>) -> MaxVmas {
    let by_memory = (memory / vma_size.max(1)).max(1);
    let by_sysctl = sysctl.map_or(u64::MAX, |n| n.max(0) as u64 + 1);
    MaxVmas {
        count: usize::try_from(by_memory.min(by_sysctl)).unwrap_or(usize::MAX),
        sysctl,
        by_memory,
    }
}

/// The VMAs in `raw` that make sense, in address order: their own range,
/// page aligned, in the user half, inside what the tree says they cover,
/// belonging to `mm`, and not overlapping one another.
fn checked_vmas(
    layout: &MapsLayout,
    mm: u64,
    raw: &[RawVma],
    failed: &mut Vec<MapsFailure>,
) -> Vec<Vma> {
    let mut vmas: Vec<Vma> = Vec::with_capacity(raw.len());
    for (address, bytes, covers) in raw {
        let at = |offset: u64| bytes.u64_at(offset).unwrap_or(0);
        let vma = Vma {
            address: *address,
            start: at(layout.vm_start),
            end: at(layout.vm_end),
            flags: VmFlags(at(layout.vm_flags)),
            pgoff: at(layout.vm_pgoff),
            file_address: at(layout.vm_file),
            file: None,
            name: None,
            inode: 0,
            device: 0,
        };
        let owner = at(layout.vm_mm);
        let why = if owner != mm {
            Some(format!("belongs to mm {owner:#x}, not {mm:#x}"))
        } else if vma.start >= vma.end || vma.end > USER_END || (vma.start | vma.end) % PAGE != 0 {
            Some(format!("range {:#x}-{:#x} is no VMA's", vma.start, vma.end))
        } else if covers.is_some_and(|(first, last)| vma.start < first || vma.end - 1 > last) {
            let (first, last) = covers.unwrap_or_default();
            Some(format!(
                "range {:#x}-{:#x} lies outside its tree slot {first:#x}-{last:#x}",
                vma.start, vma.end
            ))
        } else {
            None
        };
        match why {
            Some(why) => failed.push(MapsFailure::new(*address, format!("VMA {why}"))),
            None => vmas.push(vma),
        }
    }
    vmas.sort_by_key(|v| v.start);
    let mut kept: Vec<Vma> = Vec::with_capacity(vmas.len());
    for vma in vmas {
        match kept.last() {
            Some(prev) if vma.start < prev.end => failed.push(MapsFailure::new(
                vma.address,
                format!(
                    "VMA {:#x}-{:#x} overlaps the one before ({:#x}-{:#x}); left out",
                    vma.start, vma.end, prev.start, prev.end
                ),
            )),
            _ => kept.push(vma),
        }
    }
    kept
}

/// Checks the tree's VMAs against the `mm->mmap` list: each VMA's
/// `vm_next` must be the next one found, the first must be `head`.
fn check_list(vmas: &[Vma], raw: &[RawVma], head: u64, next: u64, failed: &mut Vec<MapsFailure>) {
    let next_of: HashMap<u64, u64> = raw
        .iter()
        .map(|(at, bytes, _)| (*at, bytes.u64_at(next).unwrap_or(0)))
        .collect();
    let mut expected = head;
    for (i, vma) in vmas.iter().enumerate() {
        if vma.address != expected {
            failed.push(MapsFailure::new(
                vma.address,
                format!(
                    "the mmap list leads to {expected:#x} where the tree has VMA {:#x}-{:#x}",
                    vma.start, vma.end
                ),
            ));
            return;
        }
        expected = next_of[&vma.address];
        if i + 1 == vmas.len() && expected != 0 {
            failed.push(MapsFailure::new(
                vma.address,
                format!("the mmap list goes on past the last VMA of the tree, to {expected:#x}"),
            ));
        }
    }
}
