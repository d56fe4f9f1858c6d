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
//!
//! A user that has read some of the objects already (the tasks of the pid
//! table, say) gives their bytes: the walk follows their links in memory,
//! by the same rules, and reads only the nodes it does not know, a batch
//! per step of such a run; the objects it takes may share one bound with
//! other walks'.

use std::sync::atomic::{AtomicUsize, Ordering};

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

/// How many objects walks may still take (read, or known already), shared
/// by the walks given it: past it they stop and say so.
#[derive(Debug)]
pub(crate) struct Budget {
    left: AtomicUsize,
    max: AtomicUsize,
    /// Where the objects are counted, for the failure, e.g. "in the list".
    of: &'static str,
}

impl Budget {
    /// `max` objects, counted `of` somewhere.
    pub(crate) fn new(max: usize, of: &'static str) -> Budget {
        Budget {
            left: AtomicUsize::new(max),
            max: AtomicUsize::new(max),
            of,
        }
    }

    /// Allows `more` objects.
    // `fetch_update` is `try_update` from Rust 1.96 on, which the crate's
    // oldest Rust (rust-version) lacks.
    #[allow(deprecated)]
    pub(crate) fn allow(&self, more: usize) {
        let add = |n: usize| Some(n.saturating_add(more));
        let _ = self
            .left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, add);
        let _ = self
            .max
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, add);
    }

    /// Takes one object, if one is left.
    #[allow(deprecated)] // (as in `allow`)
    fn take(&self) -> bool {
        self.left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }
}

/// Whether the objects' span holds their list links; else the failure.
fn links_fit(layout: &ListLayout, head: u64, objects: &Objects) -> Option<StructureFailure> {
    let (start, len) = objects.span;
    let fit = objects.node >= start && objects.node + layout.len() <= start + len as u64;
    (!fit).then(|| {
        StructureFailure::new(
            head,
            format!(
                "the {}s' list links lie outside what is read of them",
                objects.what
            ),
        )
    })
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
    if let Some(failure) = links_fit(layout, head, &objects) {
        return Linked {
            failed: vec![failure],
            ..Linked::default()
        };
    }
    let head_bytes = match kmem.read_vec(head, layout.len() as usize).await {
        Ok(bytes) => bytes,
        Err(why) => {
            return Linked {
                failed: vec![StructureFailure::new(head, format!("list head: {why}"))],
                ..Linked::default()
            }
        }
    };
    let link = |at: u64| head_bytes.u64_at(at).unwrap_or(0);
    let links = (link(layout.next), link(layout.prev));
    let budget = Budget::new(max, "in the list");
    follow(
        kmem,
        layout,
        head,
        links,
        objects,
        &FxHashMap::default(),
        &budget,
    )
    .await
}

/// Every object of the list whose head at `head` links to `links` (its
/// `next` and `prev`), in list order: the objects in `known` (by address,
/// the bytes of their span) are taken as they are, the others read; as
/// many in all as `budget` allows.
pub(crate) async fn follow(
    kmem: &KernelMemory<'_>,
    layout: &ListLayout,
    head: u64,
    links: (u64, u64),
    objects: Objects,
    known: &FxHashMap<u64, Vec<u8>>,
    budget: &Budget,
) -> Linked {
    let mut found = Linked::default();
    let cut = |at: u64, why: String| StructureFailure::new(at, why);
    if let Some(failure) = links_fit(layout, head, &objects) {
        found.failed.push(failure);
        return found;
    }
    let (start, len) = objects.span;
    let link = |bytes: &[u8], at: u64| bytes.u64_at(at).unwrap_or(0);
    let end = |at: u64, forward: bool| End {
        at,
        from: head,
        forward,
        done: at == head,
        found: Vec::new(),
    };
    let mut ends = [end(links.0, true), end(links.1, false)];
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
                None if !budget.take() => {
                    if !found.at_limit {
                        let max = budget.max.load(Ordering::Relaxed);
                        found.failed.push(cut(
                            object,
                            format!(
                                "more than {max} {}s {}: this one and those past it not read",
                                objects.what, budget.of
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
                        Some(match known.get(&object) {
                            Some(bytes) => Ok(bytes.clone()),
                            None => kmem.read_vec(object.wrapping_add(start), len).await,
                        })
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
