//! The kernel's xarray (the radix tree under every `struct idr`), read
//! level by level: every node of a level in one batch, so a whole tree
//! costs as many device calls as it has levels, whatever its size.
//!
//! Encoding (`include/linux/xarray.h`): an entry whose low two bits are
//! `10` is internal; an internal entry above 4096 is a node (`struct
//! xa_node *` plus 2), the smaller ones are sibling, retry and zero
//! entries; an entry with bit 0 set is a value; anything else is a pointer
//! the array stores. A node holds `shift` (0 on the last level), its
//! `offset` in its parent, `parent`, `array` and its slots.
//!
//! Nothing read is trusted: a node whose shift, parent, offset or array
//! disagree with the way it was reached is cut with its subtree and
//! reported, and so is a node met twice (a loop). The caller bounds the
//! walk by what its user allows ([`Limits`]): indices past the largest
//! one, and entries past the most the target can hold, are cut and named.
//! A level is read [`NODES_PER_BATCH`] nodes at a time, so the memory a
//! walk holds stays bounded however many nodes crafted memory offers, and
//! a walk that reaches its entry limit stops reading.

use rustc_hash::FxHashSet;

use crate::join_all;
use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::XaLayout;
use crate::linux::structures::StructureFailure;

/// Most nodes read: a full pid space (`PID_MAX_LIMIT`, 4 Mi pids) needs
/// 65,536 leaves and 1,041 nodes above them.
const MAX_NODES: usize = 70_000;
/// Nodes read in one batch: a level of up to 8,192 nodes (half a million
/// entries of 64-slot nodes) costs one device call, a larger one more.
const NODES_PER_BATCH: usize = 8192;
/// Internal entries up to this value are not nodes.
const LAST_SPECIAL: u64 = 4096;

/// What the user of an array allows it to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// The largest index an entry may have.
    pub max_index: u64,
    /// The most entries the walk gives.
    pub max_entries: usize,
    /// Whether an entry may cover many indices (the page cache's large
    /// folios): stored in a node above the last level, or followed by
    /// sibling entries that point back at its slot. Otherwise an entry
    /// above the last level is a failure.
    pub multi_index: bool,
}

/// What a walk found: the stored pointers by index, and what was cut.
#[derive(Debug, Default)]
pub(crate) struct Entries {
    /// `(index, pointer)`, in index order within each node.
    pub entries: Vec<(u64, u64)>,
    /// How many indices each entry covers, in the same order: 1 but for
    /// a multi-index entry.
    pub spans: Vec<u64>,
    /// The nodes cut, and why.
    pub failed: Vec<StructureFailure>,
    /// Levels read (one batch each).
    pub levels: usize,
    /// The array held more entries than the limit: the walk stopped.
    pub at_limit: bool,
}

/// A node to read, and how it was reached.
#[derive(Debug, Clone, Copy)]
struct Reached {
    address: u64,
    parent: u64,
    offset: u64,
    /// `None` for the root, whose shift says how deep the tree is.
    shift: Option<u64>,
    first_index: u64,
}

fn is_internal(entry: u64) -> bool {
    entry & 3 == 2
}

fn is_node(entry: u64) -> bool {
    is_internal(entry) && entry > LAST_SPECIAL
}

/// Every pointer stored in the xarray at `array` whose head entry is
/// `head`, within `limits`. Value entries and the special internal entries
/// (a slot being filled or freed) hold no pointer and are skipped.
pub(crate) async fn entries(
    kmem: &KernelMemory<'_>,
    layout: &XaLayout,
    array: u64,
    head: u64,
    limits: Limits,
) -> Entries {
    let mut found = Entries::default();
    if head == 0 || (head & 1 == 1) || (is_internal(head) && !is_node(head)) {
        return found;
    }
    if !is_node(head) {
        // A single pointer at index 0.
        if limits.max_entries > 0 {
            found.entries.push((0, head));
            found.spans.push(1);
        }
        return found;
    }
    let mut level = vec![Reached {
        address: head - 2,
        parent: 0,
        offset: 0,
        shift: None,
        first_index: 0,
    }];
    let mut seen = FxHashSet::default();
    seen.insert(head - 2);
    let mut walk = Walk {
        layout,
        array,
        limits,
        seen,
        found,
        overflow: false,
    };
    while !level.is_empty() {
        walk.found.levels += 1;
        let mut next = Vec::new();
        for (at, batch) in level.chunks(NODES_PER_BATCH).enumerate() {
            let len = layout.node_len();
            let nodes = join_all(batch.iter().map(|n| kmem.read_vec(n.address, len))).await;
            for (reached, node) in batch.iter().zip(nodes) {
                match node.and_then(|node| walk.visit(reached, &node, &mut next)) {
                    Ok(()) => {}
                    Err(why) => walk
                        .found
                        .failed
                        .push(StructureFailure::new(reached.address, why)),
                }
            }
            if walk.overflow {
                let read = ((at + 1) * NODES_PER_BATCH).min(level.len());
                walk.found.failed.push(StructureFailure::new(
                    head - 2,
                    format!(
                        "the array holds more than {} entries: the walk stopped, {} node(s) unread",
                        limits.max_entries,
                        level.len() - read + next.len()
                    ),
                ));
                walk.found.at_limit = true;
                return walk.found;
            }
        }
        level = next;
    }
    walk.found
}

/// A walk in progress: what bounds it, and what it found so far.
struct Walk<'a> {
    layout: &'a XaLayout,
    array: u64,
    limits: Limits,
    /// Every node met, so that none is read twice.
    seen: FxHashSet<u64>,
    found: Entries,
    /// An entry was left out for the entry limit.
    overflow: bool,
}

impl Walk<'_> {
    /// Takes one node read as `node`: its entries, or its children into
    /// `next`; why it is not believed.
    fn visit(
        &mut self,
        reached: &Reached,
        node: &[u8],
        next: &mut Vec<Reached>,
    ) -> Result<(), String> {
        let layout = self.layout;
        let shift = check_node(layout, self.array, reached, node)?;
        let chunk_shift = u64::from(layout.chunk_shift());
        // The slot of the last entry taken of this node, for its siblings.
        let mut last: Option<u64> = None;
        for slot in 0..layout.slot_count {
            let entry = node.u64_at(layout.slots + slot * 8).unwrap_or(0);
            if entry == 0 || entry & 1 == 1 {
                last = None;
                continue;
            }
            if self.limits.multi_index && is_internal(entry) && !is_node(entry) {
                // A sibling names the slot of its entry: one just taken.
                match last {
                    Some(of) if entry >> 2 == of => {
                        if let Some(span) = self.found.spans.last_mut() {
                            *span += 1 << shift;
                        }
                    }
                    _ => last = None,
                }
                continue;
            }
            last = None;
            // `check_node` keeps `slot << shift` within 64 bits.
            let index = reached.first_index + (slot << shift);
            if index > self.limits.max_index {
                self.found.failed.push(StructureFailure::new(
                    reached.address,
                    format!(
                        "slot {slot} at shift {shift} is index {index}, past the largest allowed ({}): cut",
                        self.limits.max_index
                    ),
                ));
                break;
            }
            let stored = !is_internal(entry) && (shift == 0 || self.limits.multi_index);
            if stored {
                if self.found.entries.len() >= self.limits.max_entries {
                    self.overflow = true;
                    break;
                }
                self.found.entries.push((index, entry));
                self.found.spans.push(1 << shift);
                last = Some(slot);
            } else if shift > 0 && is_node(entry) {
                let child = entry - 2;
                if self.seen.len() >= MAX_NODES {
                    self.found.failed.push(StructureFailure::new(
                        child,
                        format!(
                            "past {MAX_NODES} nodes, from slot {slot} of {:#x}: cut",
                            reached.address
                        ),
                    ));
                    continue;
                }
                if !self.seen.insert(child) {
                    self.found.failed.push(StructureFailure::new(
                        child,
                        format!(
                            "xa_node reached again from slot {slot} of {:#x}: cut",
                            reached.address
                        ),
                    ));
                    continue;
                }
                next.push(Reached {
                    address: child,
                    parent: reached.address,
                    offset: slot,
                    shift: Some(shift - chunk_shift),
                    first_index: index,
                });
            } else if shift > 0 && !is_internal(entry) {
                self.found.failed.push(StructureFailure::new(
                    reached.address,
                    format!("slot {slot} of a node at shift {shift} holds {entry:#x}, not a node"),
                ));
            }
        }
        Ok(())
    }
}

/// The node's shift, once its header agrees with how it was reached.
fn check_node(
    layout: &XaLayout,
    array: u64,
    reached: &Reached,
    node: &[u8],
) -> Result<u64, String> {
    let chunk_shift = u64::from(layout.chunk_shift());
    let byte = |at: u64| node.bytes_at(at, 1).map(|b| u64::from(b[0])).unwrap_or(0);
    let shift = byte(layout.shift);
    let parent = node.u64_at(layout.parent).unwrap_or(0);
    let owner = node.u64_at(layout.array).unwrap_or(0);
    if shift % chunk_shift != 0 || shift + chunk_shift > 64 {
        return Err(format!("xa_node shift {shift} is not a level's"));
    }
    if let Some(expected) = reached.shift {
        if shift != expected {
            return Err(format!(
                "xa_node shift {shift} where its parent's says {expected}"
            ));
        }
    }
    if parent != reached.parent {
        return Err(format!(
            "xa_node's parent is {parent:#x}, but it was reached from {:#x}",
            reached.parent
        ));
    }
    if reached.shift.is_some() && byte(layout.offset) != reached.offset {
        return Err(format!(
            "xa_node's offset is {}, but it sits in slot {}",
            byte(layout.offset),
            reached.offset
        ));
    }
    if owner != array {
        return Err(format!(
            "xa_node belongs to the array at {owner:#x}, not {array:#x}"
        ));
    }
    Ok(shift)
}

#[cfg(test)]
mod tests;
