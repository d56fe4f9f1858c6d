//! A circular doubly linked list (`struct list_head`) through the objects
//! it links, followed a node at a time from both ends at once: `next` from
//! the head and `prev` from its tail, each step of both ends one batch, so
//! `n` objects cost about `n / 2` device calls plus one for the head. Each
//! object is read whole (the span its user asks for), its links taken from
//! what was read. What a list links is trusted no more than a tree's
//! nodes are: each node must point back at the one it was reached from,
//! must be a kernel address, and is read once (an end that meets a node it
//! read itself has looped and is cut; one that meets a node the other end
//! read is done); past the most objects the user allows the walk stops and
//! says so. A list cut at one end is still read up to the cut from the
//! other, and a node that does not point back at the end that reached it
//! is left for the other end, whose side of it may hold.

use rustc_hash::FxHashMap;

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

/// One end of a walk: where it is, the node it came from, what it found.
struct End {
    at: u64,
    from: u64,
    /// Following `next` (from the head) or `prev` (from the tail).
    forward: bool,
    done: bool,
    found: Vec<(u64, Vec<u8>)>,
}

/// Every object of the list whose head (a `list_head` of its own, not in
/// an object) is at `head`, at most `max`, in list order.
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
    let link = |bytes: &[u8], at: u64| bytes.u64_at(at).unwrap_or(0);
    let end = |at: u64, forward: bool| End {
        at,
        from: head,
        forward,
        done: at == head,
        found: Vec::new(),
    };
    let mut ends = [
        end(link(&head_bytes, layout.next), true),
        end(link(&head_bytes, layout.prev), false),
    ];
    let kernel_half = kmem.kernel_half();
    // Each node read (and taken, or unreadable), and whether the forward
    // end read it.
    let mut seen: FxHashMap<u64, bool> = FxHashMap::default();
    while ends.iter().any(|e| !e.done) {
        // The node an end reads this round: the other end, there too,
        // waits for what it shows.
        let mut claimed = None;
        let mut reading = [false; 2];
        for (i, e) in ends.iter_mut().enumerate().filter(|(_, e)| !e.done) {
            let direction = if e.forward { "next" } else { "prev" };
            if e.at < kernel_half {
                let holder = match e.from == head {
                    true => head,
                    false => e.from.wrapping_sub(objects.node),
                };
                found.failed.push(cut(
                    holder,
                    format!(
                        "the list's {direction} link is {:#x}, no kernel address: the walk stopped there",
                        e.at
                    ),
                ));
                e.done = true;
                continue;
            }
            let object = e.at.wrapping_sub(objects.node);
            match seen.get(&e.at) {
                Some(&by) if by == e.forward => {
                    found.failed.push(cut(
                        object,
                        format!(
                            "{} reached twice in the list (a loop, or a list changing while read): the walk stopped there",
                            objects.what
                        ),
                    ));
                    e.done = true;
                }
                // The other end read it: the two have met.
                Some(_) => e.done = true,
                None if claimed == Some(e.at) => {}
                None if seen.len() + usize::from(claimed.is_some()) >= max => {
                    if !found.at_limit {
                        found.failed.push(cut(
                            object,
                            format!(
                                "more than {max} {}s in the list: this one and those past it not read",
                                objects.what
                            ),
                        ));
                    }
                    found.at_limit = true;
                    e.done = true;
                }
                None => {
                    claimed = Some(e.at);
                    reading[i] = true;
                }
            }
        }
        let reads =
            futures::future::join_all(ends.iter().zip(reading).map(|(e, reading)| async move {
                match reading {
                    false => None,
                    true => {
                        let object = e.at.wrapping_sub(objects.node);
                        Some(kmem.read_vec(object.wrapping_add(start), len).await)
                    }
                }
            }))
            .await;
        for (e, read) in ends.iter_mut().zip(reads) {
            let Some(read) = read else { continue };
            let object = e.at.wrapping_sub(objects.node);
            let bytes = match read {
                Ok(bytes) => bytes,
                Err(why) => {
                    // Unreadable from either side: the other end stops here too.
                    seen.insert(e.at, e.forward);
                    found
                        .failed
                        .push(cut(object, format!("{}: {why}", objects.what)));
                    e.done = true;
                    continue;
                }
            };
            let node = objects.node - start;
            let (next, prev) = (
                link(&bytes, node + layout.next),
                link(&bytes, node + layout.prev),
            );
            let (back, onward) = if e.forward {
                (prev, next)
            } else {
                (next, prev)
            };
            if back != e.from {
                // Left for the other end: from its side it may hold.
                found.failed.push(cut(
                    object,
                    format!(
                        "the {}'s list node points back at {back:#x}, not at {:#x} that leads to it (a list changing while read): the walk stopped there",
                        objects.what, e.from
                    ),
                ));
                e.done = true;
                continue;
            }
            seen.insert(e.at, e.forward);
            e.found.push((object, bytes));
            (e.from, e.at) = (e.at, onward);
            e.done = onward == head;
        }
    }
    let [forward, backward] = ends;
    found.objects = forward.found;
    found.objects.extend(backward.found.into_iter().rev());
    found
}
