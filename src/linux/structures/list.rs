//! A circular doubly linked list (`struct list_head`) through the objects
//! it links, followed a node at a time: each object read whole (the span
//! its user asks for) in one batch, its next link taken from what was
//! read. A list costs one device call per object, plus one for its head;
//! what it links is trusted no more than a tree's nodes are: each node
//! must point back at the one it was reached from (`prev`), must be a
//! kernel address, and is met once (a loop is cut); past the most objects
//! the user allows the walk stops and says so.

use rustc_hash::FxHashSet;

use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::ListLayout;
use crate::linux::structures::StructureFailure;

/// The objects a list links: where their `list_head` lies in them, which
/// bytes of each to read, and what they are called in failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Objects {
    /// Offset of the `list_head` member in an object.
    pub node: u64,
    /// The bytes read of each object: from this offset, so many (they
    /// must hold the node's links).
    pub span: (u64, usize),
    /// Their name, e.g. "module".
    pub what: &'static str,
}

/// What a walk found: each object's address and the bytes of its span,
/// in list order; what was cut; whether the list held more than allowed.
#[derive(Debug, Default)]
pub(crate) struct Linked {
    /// `(object address, bytes of its span)`.
    pub objects: Vec<(u64, Vec<u8>)>,
    /// Why the walk stopped early, if it did.
    pub failed: Vec<StructureFailure>,
    /// The list held more than `max` objects.
    pub at_limit: bool,
}

/// Every object of the list whose head (a `list_head` of its own, not in
/// an object) is at `head`, at most `max`.
pub(crate) async fn objects(
    kmem: &KernelMemory<'_>,
    layout: &ListLayout,
    head: u64,
    objects: Objects,
    max: usize,
) -> Linked {
    let mut found = Linked::default();
    let cut = |at: u64, why: String| StructureFailure::new(at, why);
    let (start, len) = objects.span;
    let links_fit = objects.node >= start && objects.node + layout.len() <= start + len as u64;
    if !links_fit {
        found.failed.push(cut(
            head,
            format!(
                "the {}s' list links lie outside what is read of them",
                objects.what
            ),
        ));
        return found;
    }
    let head_bytes = match kmem.read_vec(head, layout.len() as usize).await {
        Ok(bytes) => bytes,
        Err(why) => {
            found.failed.push(cut(head, format!("list head: {why}")));
            return found;
        }
    };
    let kernel_half = kmem.kernel_half();
    let mut seen = FxHashSet::default();
    let (mut prev, mut node) = (head, head_bytes.u64_at(layout.next).unwrap_or(0));
    while node != head {
        if node < kernel_half {
            found.failed.push(cut(
                prev,
                format!("the list's next link is {node:#x}, no kernel address: the walk stopped"),
            ));
            break;
        }
        let object = node.wrapping_sub(objects.node);
        if !seen.insert(node) {
            found.failed.push(cut(
                object,
                format!(
                    "{} reached twice in the list (a loop, or a list changing while read): the walk stopped",
                    objects.what
                ),
            ));
            break;
        }
        if found.objects.len() >= max {
            found.at_limit = true;
            found.failed.push(cut(
                object,
                format!(
                    "more than {max} {}s in the list: this one and those after it not read",
                    objects.what
                ),
            ));
            break;
        }
        let bytes = match kmem.read_vec(object.wrapping_add(start), len).await {
            Ok(bytes) => bytes,
            Err(why) => {
                found
                    .failed
                    .push(cut(object, format!("{}: {why}", objects.what)));
                break;
            }
        };
        let link = |at: u64| bytes.u64_at(objects.node - start + at).unwrap_or(0);
        let back = link(layout.prev);
        if back != prev {
            found.failed.push(cut(
                object,
                format!(
                    "the {}'s list node points back at {back:#x}, not at {prev:#x} that leads to it (a list changing while read): the walk stopped",
                    objects.what
                ),
            ));
            break;
        }
        (prev, node) = (node, link(layout.next));
        found.objects.push((object, bytes));
    }
    found
}
