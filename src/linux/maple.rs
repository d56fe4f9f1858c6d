//! The maple tree (`lib/maple_tree.c`, 6.1 and later), which holds a
//! process's VMAs in `mm->mm_mt`, walked level by level: every node of a
//! level is read in one batch.
//!
//! A node pointer encodes the node's type in bits 3-6 and the node (256
//! bytes, 256-aligned) in the bits above 8. Range and leaf nodes hold
//! pivots and slots (`struct maple_range_64`), allocation-range nodes
//! fewer of both and gaps (`struct maple_arange_64`); a pivot is the last
//! index of its slot. Every offset and count comes from BTF.

use std::collections::HashSet;

use crate::linux::btf::{Btf, BtfError};
use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::maps::MapsFailure;

/// Bytes of a node, and its alignment (`MAPLE_NODE_MASK + 1`).
const NODE_SIZE: u64 = 256;
/// Levels a tree may have (`MAPLE_HEIGHT_MAX`).
const MAX_HEIGHT: usize = 31;
/// Nodes walked at most, so that crafted memory cannot make the walk
/// large (a million VMAs need under 100,000).
const MAX_NODES: usize = 1 << 17;

/// Where pivots, slots and the data end lie in one kind of node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NodeLayout {
    pivots: u64,
    pivot_count: usize,
    slots: u64,
    slot_count: usize,
    /// `meta.end`: the last slot in use when the pivots do not say.
    meta_end: u64,
}

impl NodeLayout {
    /// The layout of `ty` (`maple_range_64` or `maple_arange_64`), whose
    /// slot array ends where `after_slots` (a member, or the struct's end)
    /// begins.
    fn from_btf(btf: &Btf, ty: &str, after_slots: Option<&str>) -> Result<NodeLayout, BtfError> {
        let pivots = btf.member_offset(ty, "pivot")?;
        let slots = btf.member_offset(ty, "slot")?;
        let slots_end = match after_slots {
            Some(member) => btf.member_offset(ty, member)?,
            None => btf.size_of(ty)?,
        };
        let meta_end =
            btf.member_offset(ty, "meta")? + btf.member_offset("maple_metadata", "end")?;
        let layout = NodeLayout {
            pivots,
            pivot_count: (slots.saturating_sub(pivots) / 8) as usize,
            slots,
            slot_count: (slots_end.saturating_sub(slots) / 8) as usize,
            meta_end,
        };
        let fits = layout.slot_count > 0
            && layout.pivot_count < layout.slot_count
            && slots_end <= NODE_SIZE
            && meta_end < NODE_SIZE;
        match fits {
            true => Ok(layout),
            false => Err(BtfError::Parse(format!(
                "BTF gives {ty} {} pivots and {} slots in {slots_end} bytes",
                layout.pivot_count, layout.slot_count
            ))),
        }
    }

    /// The last slot in use (`ma_data_end`): the allocation-range kind and
    /// a node whose last pivot is zero keep it in their metadata; a node
    /// whose last pivot is its maximum ends there; else every slot is used.
    fn data_end(&self, node: &[u8], pivots: &[u64], max: u64, arange: bool) -> usize {
        let meta = || usize::from(node[self.meta_end as usize]);
        let last = pivots[self.pivot_count - 1];
        if arange || last == 0 {
            meta()
        } else if last == max {
            self.pivot_count - 1
        } else {
            self.pivot_count
        }
    }
}

/// The maple tree's node layouts and type numbers, from BTF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MapleLayout {
    /// `maple_range_64.parent` (the same place in every kind).
    parent: u64,
    range: NodeLayout,
    arange: NodeLayout,
    /// `enum maple_type`: `maple_leaf_64`, `maple_range_64`,
    /// `maple_arange_64`.
    leaf_type: u64,
    range_type: u64,
    arange_type: u64,
}

impl MapleLayout {
    /// The layout in `btf`.
    pub fn from_btf(btf: &Btf) -> Result<MapleLayout, BtfError> {
        let kind = |name: &str| {
            btf.enum_value(name)
                .and_then(|v| u64::try_from(v).ok())
                .ok_or_else(|| BtfError::NoType(format!("enum maple_type value {name}")))
        };
        Ok(MapleLayout {
            parent: btf.member_offset("maple_range_64", "parent")?,
            range: NodeLayout::from_btf(btf, "maple_range_64", None)?,
            arange: NodeLayout::from_btf(btf, "maple_arange_64", Some("gap"))?,
            leaf_type: kind("maple_leaf_64")?,
            range_type: kind("maple_range_64")?,
            arange_type: kind("maple_arange_64")?,
        })
    }
}

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
/// level; a node met twice, a dead node, pivots out of order or a node of
/// unknown kind is reported and not followed.
pub(crate) async fn entries(
    kmem: &KernelMemory<'_>,
    layout: &MapleLayout,
    root: u64,
) -> (Vec<Entry>, Vec<MapsFailure>) {
    let mut found = Vec::new();
    let mut failed = Vec::new();
    if root == 0 {
        return (found, failed);
    }
    // A root that is a node has bit 1 set (`xa_is_node`); anything else is
    // a single entry at index 0, which a process's tree never holds.
    if root & 3 != 2 || root < kmem.kernel_half() {
        failed.push(MapsFailure::new(
            root,
            "the maple tree's root is not a node pointer",
        ));
        return (found, failed);
    }
    let mut level = vec![Node {
        address: root & !(NODE_SIZE - 1),
        kind: (root >> 3) & 0xf,
        min: 0,
        max: u64::MAX,
    }];
    let mut seen: HashSet<u64> = level.iter().map(|n| n.address).collect();
    for depth in 0.. {
        if level.is_empty() {
            break;
        }
        if depth == MAX_HEIGHT {
            let deepest = level[0].address;
            failed.push(MapsFailure::new(
                deepest,
                format!("the maple tree is deeper than {MAX_HEIGHT} levels; cut there"),
            ));
            break;
        }
        let reads = level
            .iter()
            .map(|node| kmem.read_vec(node.address, NODE_SIZE as usize));
        let nodes = futures::future::join_all(reads).await;
        let mut next = Vec::new();
        for (node, bytes) in level.iter().zip(nodes) {
            let bytes = match bytes {
                Ok(bytes) => bytes,
                Err(why) => {
                    failed.push(MapsFailure::new(node.address, why));
                    continue;
                }
            };
            if let Err(why) = visit(
                layout,
                kmem.kernel_half(),
                node,
                &bytes,
                &mut next,
                &mut found,
            ) {
                failed.push(MapsFailure::new(node.address, why));
            }
        }
        level = Vec::new();
        for child in next {
            if seen.len() >= MAX_NODES {
                failed.push(MapsFailure::new(
                    child.address,
                    format!("more than {MAX_NODES} maple nodes; the walk stopped"),
                ));
                break;
            }
            if seen.insert(child.address) {
                level.push(child);
            } else {
                failed.push(MapsFailure::new(
                    child.address,
                    "maple node reached twice (a loop, or a tree changing while read); not followed again",
                ));
            }
        }
    }
    found.sort_by_key(|e| e.first);
    (found, failed)
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
    let end = nl.data_end(bytes, &pivots, node.max, arange);
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
