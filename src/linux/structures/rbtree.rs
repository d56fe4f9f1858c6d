//! The VMAs of a kernel before 6.1: a red-black tree (`mm->mm_rb`) whose
//! nodes (`vm_rb`) sit inside the VMAs, walked level by level, each level's
//! VMAs read whole in one batch. (The `mm->mmap` list through `vm_next`
//! holds the same VMAs, but following it costs a read per VMA; the tree
//! costs its depth, at most twice the logarithm of the count.)

use std::collections::HashSet;

use crate::linux::find::btf::{Btf, BtfError};
use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::maps::MapsFailure;

/// Levels followed at most: a red-black tree of 2^20 nodes is at most 40
/// deep.
const MAX_DEPTH: usize = 64;

/// Offsets, from BTF, of the tree's links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RbLayout {
    /// `vm_area_struct.vm_rb`.
    vm_rb: u64,
    /// `rb_node.rb_left`, `rb_node.rb_right`.
    left: u64,
    right: u64,
}

impl RbLayout {
    /// The offsets in `btf`.
    pub fn from_btf(btf: &Btf) -> Result<RbLayout, BtfError> {
        Ok(RbLayout {
            vm_rb: btf.member_offset("vm_area_struct", "vm_rb")?,
            left: btf.member_offset("rb_node", "rb_left")?,
            right: btf.member_offset("rb_node", "rb_right")?,
        })
    }
}

/// Every VMA of the tree whose root node is `root` (an `rb_node` address),
/// with its bytes (`vma_size` of them), and what was cut: no more than
/// `max_vmas` (the last value returned is `true` when the tree held more).
pub(crate) async fn vmas(
    kmem: &KernelMemory<'_>,
    layout: &RbLayout,
    vma_size: usize,
    root: u64,
    max_vmas: usize,
) -> (Vec<(u64, Vec<u8>)>, Vec<MapsFailure>, bool) {
    let mut found = Vec::new();
    let mut failed = Vec::new();
    let mut at_limit = false;
    let vma_of = |node: u64| node.wrapping_sub(layout.vm_rb);
    let mut level = match root {
        0 => Vec::new(),
        node => vec![vma_of(node)],
    };
    let mut seen: HashSet<u64> = level.iter().copied().collect();
    for depth in 0.. {
        if level.is_empty() {
            break;
        }
        if depth == MAX_DEPTH {
            failed.push(MapsFailure::new(
                level[0],
                format!("the VMA tree is deeper than {MAX_DEPTH} levels; cut there"),
            ));
            break;
        }
        let read =
            futures::future::join_all(level.iter().map(|&vma| kmem.read_vec(vma, vma_size))).await;
        let mut next = Vec::new();
        for (&vma, bytes) in level.iter().zip(read) {
            let bytes = match bytes {
                Ok(bytes) => bytes,
                Err(why) => {
                    failed.push(MapsFailure::new(vma, format!("VMA: {why}")));
                    continue;
                }
            };
            for link in [layout.left, layout.right] {
                let child = bytes.u64_at(layout.vm_rb + link).unwrap_or(0);
                if child == 0 {
                    continue;
                }
                let child = vma_of(child);
                if seen.len() >= max_vmas {
                    if !at_limit {
                        failed.push(MapsFailure::new(
                            child,
                            format!("more than {max_vmas} VMAs in the tree: this one and those after it not read"),
                        ));
                    }
                    at_limit = true;
                    break;
                }
                if seen.insert(child) {
                    next.push(child);
                } else {
                    failed.push(MapsFailure::new(
                        child,
                        "VMA reached twice in the tree (a loop, or a tree changing while read); not followed again",
                    ));
                }
            }
            found.push((vma, bytes));
        }
        level = next;
    }
    (found, failed, at_limit)
}
