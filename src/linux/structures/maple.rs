//! The maple tree (`lib/maple_tree.c`, 6.1 and later), which holds a
//! process's VMAs in `mm->mm_mt`, walked level by level: every node of a
//! level is read in one batch.
//!
//! A node pointer encodes the node's type in bits 3-6 and the node (256
//! bytes, 256-aligned) in the bits above 8. Range and leaf nodes hold
//! pivots and slots (`struct maple_range_64`), allocation-range nodes
//! fewer of both and gaps (`struct maple_arange_64`); a pivot is the last
//! index of its slot. Every offset and count comes from BTF, and a layout
//! that no maple tree could have is refused.
//!
//! The walk is bounded by what the caller allows: it stops once the leaves
//! have named more entries than that, and reads a level at most
//! [`NODES_PER_BATCH`] nodes at a time, so crafted memory cannot make it
//! hold more. An entry named by two slots is given once.

use rustc_hash::{FxHashMap, FxHashSet};

use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::{MapleLayout, NodeLayout, MAPLE_NODE_SIZE as NODE_SIZE};
use crate::linux::structures::StructureFailure;
/// Levels a tree may have (`MAPLE_HEIGHT_MAX`).
const MAX_HEIGHT: usize = 31;
/// Nodes walked at most, so that crafted memory cannot make the walk
/// large (a million VMAs need under 100,000).
const MAX_NODES: usize = 1 << 17;
/// Nodes read in one batch (2 MiB): a tree of up to 8,192 nodes on a
/// level (over 40,000 VMAs) costs one device call a level.
const NODES_PER_BATCH: usize = 8192;

/// An entry of a leaf: what the tree stores (a VMA's address) and the
/// indices its slot covers, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub value: u64,
    pub first: u64,
    pub last: u64,
}

/// A node to read: where, its kind, and the indices it covers.
#[derive(Debug, Clone, Copy)]
struct Node {
    address: u64,
    kind: u64,
    min: u64,
    max: u64,
}

/// Every entry of the tree whose root pointer (`ma_root`) is `root`, in
/// index order, and what could not be walked. One batch of reads per
/// level (more for a level past [`NODES_PER_BATCH`] nodes); a node met
/// twice, a dead node, pivots out of order or a node of unknown kind is
/// reported and not followed; an entry named by several slots is given
/// once; past `max_entries` slots of leaves the walk stops (and the last
/// value returned is `true`).
pub(crate) async fn entries(
    kmem: &KernelMemory<'_>,
    layout: &MapleLayout,
    root: u64,
    max_entries: usize,
) -> (Vec<Entry>, Vec<StructureFailure>, bool) {
    let mut found = Vec::new();
    let mut failed = Vec::new();
    let mut at_limit = false;
    if root == 0 {
        return (found, failed, at_limit);
    }
    // A root that is a node has bit 1 set (`xa_is_node`); anything else is
    // a single entry at index 0, which a process's tree never holds.
    let kernel_half = kmem.kernel_half();
    if root & 3 != 2 || root < kernel_half {
        failed.push(StructureFailure::new(
            root,
            "the maple tree's root is not a node pointer",
        ));
        return (found, failed, at_limit);
    }
    let mut level = vec![Node {
        address: root & !(NODE_SIZE - 1),
        kind: (root >> 3) & 0xf,
        min: 0,
        max: u64::MAX,
    }];
    let mut seen: FxHashSet<u64> = level.iter().map(|n| n.address).collect();
    // Slots of leaves met, and how many more times each entry was named.
    let mut slots = 0usize;
    let mut named: FxHashMap<u64, usize> = FxHashMap::default();
    'levels: for depth in 0.. {
        if level.is_empty() {
            break;
        }
        if depth == MAX_HEIGHT {
            let deepest = level[0].address;
            failed.push(StructureFailure::new(
                deepest,
                format!("the maple tree is deeper than {MAX_HEIGHT} levels; cut there"),
            ));
            break;
        }
        let mut next = Vec::new();
        for (at, batch) in level.chunks(NODES_PER_BATCH).enumerate() {
            let reads = batch
                .iter()
                .map(|node| kmem.read_vec(node.address, NODE_SIZE as usize));
            let nodes = futures::future::join_all(reads).await;
            let mut leaves = Vec::new();
            for (node, bytes) in batch.iter().zip(nodes) {
                let visited = bytes.and_then(|bytes| {
                    visit(layout, kernel_half, node, &bytes, &mut next, &mut leaves)
                });
                if let Err(why) = visited {
                    failed.push(StructureFailure::new(node.address, why));
                }
            }
            for entry in leaves {
                slots += 1;
                if slots > max_entries {
                    at_limit = true;
                    let unread = level.len() - ((at + 1) * NODES_PER_BATCH).min(level.len());
                    failed.push(StructureFailure::new(
                        root & !(NODE_SIZE - 1),
                        format!(
                            "the maple tree names more than {max_entries} entries: the walk stopped at index {:#x}, {unread} node(s) of its last level unread",
                            entry.first
                        ),
                    ));
                    break 'levels;
                }
                match named.get_mut(&entry.value) {
                    Some(more) => *more += 1,
                    None => {
                        named.insert(entry.value, 0);
                        found.push(entry);
                    }
                }
            }
        }
        level = Vec::new();
        for child in next {
            if seen.len() >= MAX_NODES {
                failed.push(StructureFailure::new(
                    child.address,
                    format!("more than {MAX_NODES} maple nodes; the walk stopped"),
                ));
                break;
            }
            if seen.insert(child.address) {
                level.push(child);
            } else {
                failed.push(StructureFailure::new(
                    child.address,
                    "maple node reached twice (a loop, or a tree changing while read); not followed again",
                ));
            }
        }
    }
    found.sort_by_key(|e| e.first);
    let mut twice: Vec<(u64, usize)> = named.into_iter().filter(|&(_, n)| n > 0).collect();
    twice.sort_unstable();
    for (value, more) in twice {
        failed.push(StructureFailure::new(
            value,
            format!("named by {more} more slot(s) of the maple tree than its own (a tree changing while read, or crafted): read once, for its first slot"),
        ));
    }
    (found, failed, at_limit)
}

/// The last slot in use (`ma_data_end`) of a node of layout `nl`: the
/// allocation-range kind and a node whose last pivot is zero keep it in
/// their metadata; a node whose last pivot is its maximum ends there; else
/// every slot is used.
fn data_end(nl: &NodeLayout, node: &[u8], pivots: &[u64], max: u64, arange: bool) -> usize {
    let meta = || usize::from(node[nl.meta_end as usize]);
    let last = pivots[nl.pivot_count - 1];
    if arange || last == 0 {
        meta()
    } else if last == max {
        nl.pivot_count - 1
    } else {
        nl.pivot_count
    }
}

/// Reads one node's slots: its children (kernel pointers, from
/// `kernel_half` up) into `next`, or its entries into `found`; why it
/// cannot be trusted otherwise.
fn visit(
    layout: &MapleLayout,
    kernel_half: u64,
    node: &Node,
    bytes: &[u8],
    next: &mut Vec<Node>,
    found: &mut Vec<Entry>,
) -> Result<(), String> {
    let parent = bytes.u64_at(layout.parent).ok_or("node too short")?;
    // A node taken out of the tree points at itself (`ma_dead_node`).
    if parent & !(NODE_SIZE - 1) == node.address {
        return Err("dead maple node (freed while the tree was read)".into());
    }
    let leaf = node.kind == layout.leaf_type;
    let (nl, arange) = match node.kind {
        k if k == layout.arange_type => (&layout.arange, true),
        k if k == layout.range_type || leaf => (&layout.range, false),
        k => return Err(format!("maple node of unknown type {k}")),
    };
    let pivots: Vec<u64> = (0..nl.pivot_count)
        .map(|i| bytes.u64_at(nl.pivots + 8 * i as u64).unwrap_or(0))
        .collect();
    let end = data_end(nl, bytes, &pivots, node.max, arange);
    if end >= nl.slot_count {
        return Err(format!(
            "maple node says its data ends at slot {end} of {}",
            nl.slot_count
        ));
    }
    let mut first = node.min;
    for i in 0..=end {
        let last = match pivots.get(i) {
            Some(&p) if p != 0 && i < end => p,
            Some(&p) if p != 0 => p.min(node.max),
            _ => node.max,
        };
        if last < first || last > node.max {
            return Err(format!(
                "maple pivots out of order at slot {i} ({last:#x} after {first:#x})"
            ));
        }
        let slot = bytes.u64_at(nl.slots + 8 * i as u64).unwrap_or(0);
        if slot != 0 {
            if leaf {
                found.push(Entry {
                    value: slot,
                    first,
                    last,
                });
            } else if slot >= kernel_half {
                next.push(Node {
                    address: slot & !(NODE_SIZE - 1),
                    kind: (slot >> 3) & 0xf,
                    min: first,
                    max: last,
                });
            } else {
                return Err(format!("maple slot {i} holds {slot:#x}, not a node"));
            }
        }
        if last == node.max {
            break;
        }
        first = last + 1;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::linux::find::btf::builder::BtfBuilder;
    use crate::linux::find::btf::{Btf, BtfError};

    /// The maple tree's types in made-up BTF, as the kernel's are but for
    /// `maple_range_64`'s pivots: `pivots` of them at `pivot_at` (its 16
    /// slots are at 128).
    pub(crate) fn maple_types(b: &mut BtfBuilder, pivot_at: u64, pivots: u32) {
        let (p, s16, p9, s10) = (b.array(pivots), b.array(16), b.array(9), b.array(10));
        b.structure_typed(
            "maple_range_64",
            256,
            &[
                ("parent", 0, 0),
                ("pivot", pivot_at, p),
                ("slot", 128, s16),
                ("meta", 248, 0),
            ],
        )
        .structure_typed(
            "maple_arange_64",
            248,
            &[
                ("parent", 0, 0),
                ("pivot", 8, p9),
                ("slot", 80, s10),
                ("gap", 160, s10),
                ("meta", 240, 0),
            ],
        )
        .structure("maple_metadata", 8, &[("end", 0)])
        .enumeration(
            "maple_type",
            &[
                ("maple_dense", 0),
                ("maple_leaf_64", 1),
                ("maple_range_64", 2),
                ("maple_arange_64", 3),
            ],
        );
    }

    /// The layout of made-up BTF whose `maple_range_64` has `pivots`
    /// pivots at `pivot_at`.
    fn layout(pivot_at: u64, pivots: u32) -> Result<MapleLayout, BtfError> {
        let mut b = BtfBuilder::new();
        maple_types(&mut b, pivot_at, pivots);
        MapleLayout::from_btf(&Btf::parse(&b.finish()).unwrap())
    }

    #[test]
    fn layouts_no_maple_node_could_have_are_refused() {
        let good = layout(8, 15).unwrap();
        assert_eq!((good.range.pivot_count, good.range.slot_count), (15, 16));
        assert_eq!((good.arange.pivot_count, good.arange.slot_count), (9, 10));
        let refused = [
            // No room for pivots before the slots: pivots where the slots
            // are (what made `data_end` index below zero).
            (layout(128, 15), "15 pivots at 128 and 16 slots at 128"),
            // No pivots at all.
            (layout(8, 0), "0 pivots at 8"),
            // As many pivots as slots, or past the node's 256 bytes.
            (layout(8, 16), "16 pivots at 8"),
            (layout(136, 15), "15 pivots at 136"),
        ];
        for (result, why) in refused {
            match result {
                Err(BtfError::Parse(e)) => assert!(e.contains(why), "{e}"),
                other => panic!("{why}: {other:?}"),
            }
        }
    }
}
