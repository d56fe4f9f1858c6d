//! Made-up arrays in made-up kernel memory: two levels, loops, torn and
//! foreign nodes, and the bounds a user sets.

use super::*;
use crate::{AddressSpace, MemBackend, Memory};

/// A layout like 6.1's: shift, offset at 0 and 1, parent at 8, array
/// at 16, slots at 40.
const LAYOUT: XaLayout = XaLayout {
    shift: 0,
    offset: 1,
    parent: 8,
    array: 16,
    slots: 40,
    slot_count: 64,
};
/// The direct map's base in these tests.
const BASE: u64 = 0xffff_8880_0000_0000;
const ARRAY: u64 = BASE + 0x100;

struct Tree {
    mem: Memory,
    space: AddressSpace,
}

impl Tree {
    fn new() -> Tree {
        let mem = Memory::new(MemBackend::new(vec![0; 1 << 20]));
        let space = AddressSpace::new(mem.clone(), 0, crate::vm::Paging::FourLevel);
        Tree { mem, space }
    }

    fn kmem(&self) -> KernelMemory<'_> {
        KernelMemory::direct_map_only(&self.space, BASE)
    }

    /// A node at physical `pa`; returns its entry.
    fn node(&self, pa: u64, shift: u8, offset: u8, parent: u64, slots: &[(u64, u64)]) -> u64 {
        let mut bytes = vec![0u8; LAYOUT.node_len()];
        bytes[0] = shift;
        bytes[1] = offset;
        bytes[8..16].copy_from_slice(&parent.to_le_bytes());
        bytes[16..24].copy_from_slice(&ARRAY.to_le_bytes());
        for &(slot, entry) in slots {
            let at = 40 + slot as usize * 8;
            bytes[at..at + 8].copy_from_slice(&entry.to_le_bytes());
        }
        self.mem.block_on(self.mem.write(pa, &bytes)).unwrap();
        BASE + pa + 2
    }

    fn walk(&self, head: u64) -> Entries {
        self.walk_within(
            head,
            Limits {
                max_index: u64::MAX,
                max_entries: usize::MAX,
                multi_index: false,
            },
        )
    }

    fn walk_within(&self, head: u64, limits: Limits) -> Entries {
        self.mem
            .block_on(entries(&self.kmem(), &LAYOUT, ARRAY, head, limits))
    }
}

#[test]
fn two_levels_give_every_pointer_by_index() {
    let tree = Tree::new();
    let leaf_a = tree.node(0x2000, 0, 0, BASE + 0x1000, &[(1, 0xaa0), (63, 0xab0)]);
    let leaf_b = tree.node(
        0x3000,
        0,
        5,
        BASE + 0x1000,
        &[(0, 0xbb0), (2, 0x406), (3, 0x5)],
    );
    let root = tree.node(0x1000, 6, 0, 0, &[(0, leaf_a), (5, leaf_b)]);
    let found = tree.walk(root);
    assert_eq!(found.entries, [(1, 0xaa0), (63, 0xab0), (320, 0xbb0)]);
    assert!(found.failed.is_empty(), "{:?}", found.failed);
    assert_eq!(found.levels, 2);
}

#[test]
fn a_single_pointer_needs_no_node() {
    let tree = Tree::new();
    assert_eq!(
        tree.walk(0xffff_8880_0000_1230).entries,
        [(0, 0xffff_8880_0000_1230)]
    );
    assert!(tree.walk(0).entries.is_empty());
}

#[test]
fn loops_and_torn_nodes_are_cut_and_reported() {
    let tree = Tree::new();
    // Slot 1 leads back to the root; slot 2 to a node that claims
    // another parent; slot 3 to one at the wrong depth.
    let root_entry = BASE + 0x1000 + 2;
    let stray = tree.node(0x2000, 0, 2, BASE + 0x9000, &[(0, 0xcc0)]);
    let deep = tree.node(0x3000, 6, 3, BASE + 0x1000, &[(0, 0xdd0)]);
    let good = tree.node(0x4000, 0, 4, BASE + 0x1000, &[(7, 0xee0)]);
    tree.node(
        0x1000,
        6,
        0,
        0,
        &[(1, root_entry), (2, stray), (3, deep), (4, good)],
    );
    let found = tree.walk(root_entry);
    assert_eq!(found.entries, [(4 * 64 + 7, 0xee0)]);
    let reasons: Vec<&str> = found.failed.iter().map(|f| f.reason.as_str()).collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(reasons[0].contains("reached again"), "{}", reasons[0]);
    assert!(
        reasons[1].contains("parent is 0xffff888000009000"),
        "{}",
        reasons[1]
    );
    assert!(
        reasons[2].contains("shift 6 where its parent's says 0"),
        "{}",
        reasons[2]
    );
    assert_eq!(found.levels, 2);
}

#[test]
fn unreadable_nodes_and_foreign_ones_are_reported() {
    let tree = Tree::new();
    // Past the end of memory.
    let gone = BASE + (2 << 20) + 2;
    let root = tree.node(0x1000, 6, 0, 0, &[(0, gone)]);
    let found = tree.walk(root);
    assert!(found.entries.is_empty());
    assert_eq!(found.failed.len(), 1);
    assert_eq!(found.failed[0].address, BASE + (2 << 20));
    // A node of another array.
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&(ARRAY + 8).to_le_bytes());
    tree.mem
        .block_on(tree.mem.write(0x1000 + 16, &bytes))
        .unwrap();
    let found = tree.walk(root);
    assert!(
        found.failed[0].reason.contains("belongs to the array"),
        "{:?}",
        found.failed
    );
}

/// Leaf nodes under a root, each with `per_leaf` entries; the root's
/// entry.
fn wide_tree(tree: &Tree, leaves: u64, per_leaf: u64) -> u64 {
    let root_pa = 0x1000;
    let children: Vec<(u64, u64)> = (0..leaves)
        .map(|i| {
            let pa = 0x10000 + i * 0x1000;
            let slots: Vec<(u64, u64)> = (0..per_leaf)
                .map(|s| (s, 0x10_0000 + (i * 64 + s) * 16))
                .collect();
            (i, tree.node(pa, 0, i as u8, BASE + root_pa, &slots))
        })
        .collect();
    tree.node(root_pa, 6, 0, 0, &children)
}

#[test]
fn entries_past_the_limit_are_cut_and_the_walk_stops() {
    let tree = Tree::new();
    let root = wide_tree(&tree, 10, 64);
    assert_eq!(tree.walk(root).entries.len(), 640);
    let found = tree.walk_within(
        root,
        Limits {
            max_index: u64::MAX,
            max_entries: 100,
            multi_index: false,
        },
    );
    assert_eq!(found.entries.len(), 100);
    assert_eq!(found.entries.last(), Some(&(99, 0x10_0000 + 99 * 16)));
    assert_eq!(found.failed.len(), 1, "{:?}", found.failed);
    assert!(found.at_limit);
    assert!(
        found.failed[0].reason.contains("more than 100 entries"),
        "{}",
        found.failed[0].reason
    );
    // Exactly the limit is no cut.
    let found = tree.walk_within(
        root,
        Limits {
            max_index: u64::MAX,
            max_entries: 640,
            multi_index: false,
        },
    );
    assert_eq!((found.entries.len(), found.failed.len()), (640, 0));
    assert!(!found.at_limit);
}

#[test]
fn indices_past_the_largest_allowed_are_cut() {
    let tree = Tree::new();
    let root = wide_tree(&tree, 3, 64);
    let found = tree.walk_within(
        root,
        Limits {
            max_index: 150,
            max_entries: usize::MAX,
            multi_index: false,
        },
    );
    assert_eq!(found.entries.len(), 151);
    assert_eq!(found.entries.last().map(|e| e.0), Some(150));
    assert_eq!(found.failed.len(), 1, "{:?}", found.failed);
    assert!(found.failed[0]
        .reason
        .contains("index 151, past the largest allowed (150)"));
}
