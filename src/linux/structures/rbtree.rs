//! A red-black tree (`struct rb_root`) whose nodes (`struct rb_node`)
//! sit inside the objects it orders, walked level by level, each level's
//! objects read whole in one batch: the walk costs the tree's depth, at
//! most twice the logarithm of its size. (The VMAs of a kernel before 6.1
//! hang off `mm->mm_rb` so; a list through the same objects costs a read
//! per object.)

use std::collections::HashSet;

use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::RbLayout;
use crate::linux::structures::StructureFailure;

/// Levels followed at most: a red-black tree of 2^20 nodes is at most 40
/// deep.
const MAX_DEPTH: usize = 64;

/// The objects a tree orders: where their node lies in them, how many
/// bytes of each to read, and what they are called in failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Objects {
    /// Offset of the `rb_node` member in an object.
    pub node: u64,
    /// Bytes read of each object (at least to its node's links).
    pub size: usize,
    /// Their name, e.g. "VMA".
    pub what: &'static str,
}

/// What a walk of a tree read.
#[derive(Debug, Default)]
pub(crate) struct Walked {
    /// Each object read (its address and bytes), level by level.
    pub objects: Vec<(u64, Vec<u8>)>,
    /// What could not be read or was not followed, and why.
    pub failed: Vec<StructureFailure>,
    /// The tree held more than the walk's limit.
    pub more: bool,
    /// Levels read, a batch each: what the walk cost in device calls
    /// (the tree's height, where nothing was cut).
    pub levels: usize,
}

/// Every object of the tree whose root node is `root` (an `rb_node`
/// address), with its bytes, and what was cut: no more than `max`.
pub(crate) async fn objects(
    kmem: &KernelMemory<'_>,
    layout: &RbLayout,
    objects: Objects,
    root: u64,
    max: usize,
) -> Walked {
    let mut walked = Walked::default();
    let Walked {
        objects: found,
        failed,
        more: at_limit,
        levels,
    } = &mut walked;
    let object_of = |node: u64| node.wrapping_sub(objects.node);
    let mut level = match root {
        0 => Vec::new(),
        node => vec![object_of(node)],
    };
    let mut seen: HashSet<u64> = level.iter().copied().collect();
    for depth in 0.. {
        if level.is_empty() {
            break;
        }
        if depth == MAX_DEPTH {
            failed.push(StructureFailure::new(
                level[0],
                format!(
                    "the {} tree is deeper than {MAX_DEPTH} levels; cut there",
                    objects.what
                ),
            ));
            break;
        }
        *levels += 1;
        let read = futures::future::join_all(
            level
                .iter()
                .map(|&object| kmem.read_vec(object, objects.size)),
        )
        .await;
        let mut next = Vec::new();
        for (&object, bytes) in level.iter().zip(read) {
            let bytes = match bytes {
                Ok(bytes) => bytes,
                Err(why) => {
                    failed.push(StructureFailure::new(
                        object,
                        format!("{}: {why}", objects.what),
                    ));
                    continue;
                }
            };
            for link in [layout.left, layout.right] {
                let child = bytes.u64_at(objects.node + link).unwrap_or(0);
                if child == 0 {
                    continue;
                }
                let child = object_of(child);
                if seen.len() >= max {
                    if !*at_limit {
                        failed.push(StructureFailure::new(
                            child,
                            format!(
                                "more than {max} {}s in the tree: this one and those after it not read",
                                objects.what
                            ),
                        ));
                    }
                    *at_limit = true;
                    break;
                }
                if seen.insert(child) {
                    next.push(child);
                } else {
                    failed.push(StructureFailure::new(
                        child,
                        format!(
                            "{} reached twice in the tree (a loop, or a tree changing while read); not followed again",
                            objects.what
                        ),
                    ));
                }
            }
            found.push((object, bytes));
        }
        level = next;
    }
    walked
}
