//! The offsets of the kernel's generic structures: `struct xa_node`, the
//! maple tree's nodes, `struct rb_node`.

use crate::linux::find::btf::{Btf, BtfError};

/// Bytes of a maple node, and its alignment (`MAPLE_NODE_MASK + 1`).
pub(crate) const MAPLE_NODE_SIZE: u64 = 256;

/// Byte offsets of `struct xa_node`'s members, from BTF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct XaLayout {
    pub(crate) shift: u64,
    pub(crate) offset: u64,
    pub(crate) parent: u64,
    pub(crate) array: u64,
    pub(crate) slots: u64,
    /// Slots per node (`XA_CHUNK_SIZE`: 64, or 16 with `BASE_SMALL`).
    pub(crate) slot_count: u64,
}

impl XaLayout {
    /// The offsets in `btf`.
    pub fn from_btf(btf: &Btf) -> Result<XaLayout, BtfError> {
        let node = |m: &str| btf.member_offset("xa_node", m);
        let slot_count = btf.member_size("xa_node", "slots")? / 8;
        if !slot_count.is_power_of_two() || !(4..=256).contains(&slot_count) {
            return Err(BtfError::Parse(format!(
                "xa_node has {slot_count} slots, not a power of two from 4 to 256"
            )));
        }
        Ok(XaLayout {
            shift: node("shift")?,
            offset: node("offset")?,
            parent: node("parent")?,
            array: node("array")?,
            slots: node("slots")?,
            slot_count,
        })
    }

    /// Bits of index each level takes.
    pub(crate) fn chunk_shift(&self) -> u32 {
        self.slot_count.trailing_zeros()
    }

    /// Bytes read of each node: its header and slots.
    pub(crate) fn node_len(&self) -> usize {
        let header = self.shift.max(self.offset).max(self.parent + 8);
        (header
            .max(self.array + 8)
            .max(self.slots + 8 * self.slot_count)) as usize
    }
}

/// Where pivots, slots and the data end lie in one kind of node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeLayout {
    pub(crate) pivots: u64,
    pub(crate) pivot_count: usize,
    pub(crate) slots: u64,
    pub(crate) slot_count: usize,
    /// `meta.end`: the last slot in use when the pivots do not say.
    pub(crate) meta_end: u64,
}

impl NodeLayout {
    /// The layout of `ty` (`maple_range_64` or `maple_arange_64`), whose
    /// slot array ends where `after_slots` (a member, or the struct's end)
    /// begins.
    fn from_btf(btf: &Btf, ty: &str) -> Result<NodeLayout, BtfError> {
        let pivots = btf.member_offset(ty, "pivot")?;
        let slots = btf.member_offset(ty, "slot")?;
        let pivot_count = btf.member_size(ty, "pivot")? / 8;
        let slot_count = btf.member_size(ty, "slot")? / 8;
        let meta_end =
            btf.member_offset(ty, "meta")? + btf.member_offset("maple_metadata", "end")?;
        // A node has one pivot fewer than slots (the last slot ends at
        // the node's maximum), pivots and slots apart, all within its 256
        // bytes.
        let end = |at: u64, count: u64| count.checked_mul(8).and_then(|len| at.checked_add(len));
        let (pivots_end, slots_end) = (end(pivots, pivot_count), end(slots, slot_count));
        let fits = pivot_count >= 1
            && slot_count == pivot_count + 1
            && pivots_end.is_some_and(|e| {
                e <= MAPLE_NODE_SIZE && (e <= slots || pivots >= slots_end.unwrap_or(u64::MAX))
            })
            && slots_end.is_some_and(|e| e <= MAPLE_NODE_SIZE)
            && meta_end < MAPLE_NODE_SIZE;
        match fits {
            true => Ok(NodeLayout {
                pivots,
                pivot_count: pivot_count as usize,
                slots,
                slot_count: slot_count as usize,
                meta_end,
            }),
            false => Err(BtfError::Parse(format!(
                "BTF gives {ty} {pivot_count} pivots at {pivots} and {slot_count} slots at {slots}, metadata at {meta_end}: no maple node of {MAPLE_NODE_SIZE} bytes"
            ))),
        }
    }
}

/// The maple tree's node layouts and type numbers, from BTF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MapleLayout {
    /// `maple_range_64.parent` (the same place in every kind).
    pub(crate) parent: u64,
    pub(crate) range: NodeLayout,
    pub(crate) arange: NodeLayout,
    /// `enum maple_type`: `maple_leaf_64`, `maple_range_64`,
    /// `maple_arange_64`.
    pub(crate) leaf_type: u64,
    pub(crate) range_type: u64,
    pub(crate) arange_type: u64,
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
            range: NodeLayout::from_btf(btf, "maple_range_64")?,
            arange: NodeLayout::from_btf(btf, "maple_arange_64")?,
            leaf_type: kind("maple_leaf_64")?,
            range_type: kind("maple_range_64")?,
            arange_type: kind("maple_arange_64")?,
        })
    }
}

/// Offsets, from BTF, of a node's links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RbLayout {
    /// `rb_node.rb_left`, `rb_node.rb_right`.
    pub(crate) left: u64,
    pub(crate) right: u64,
}

impl RbLayout {
    /// The offsets in `btf`.
    pub fn from_btf(btf: &Btf) -> Result<RbLayout, BtfError> {
        Ok(RbLayout {
            left: btf.member_offset("rb_node", "rb_left")?,
            right: btf.member_offset("rb_node", "rb_right")?,
        })
    }
}

/// Offsets of `struct list_head`'s links, from BTF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ListLayout {
    /// `list_head.next`.
    pub(crate) next: u64,
    /// `list_head.prev`.
    pub(crate) prev: u64,
}

impl ListLayout {
    /// The offsets in `btf`.
    pub fn from_btf(btf: &Btf) -> Result<ListLayout, BtfError> {
        Ok(ListLayout {
            next: btf.member_offset("list_head", "next")?,
            prev: btf.member_offset("list_head", "prev")?,
        })
    }

    /// Bytes of a `list_head` read: both links.
    pub(crate) fn len(&self) -> u64 {
        self.next.max(self.prev) + 8
    }
}
