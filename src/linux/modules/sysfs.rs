//! A third view of the loadable modules: sysfs. `/sys/module` is the
//! directory of `module_kset`; each entry a kernfs node pointing at its
//! kobject, the `kobj` of a `struct module_kobject` whose `mod` is the
//! module (NULL for a built-in one, which has parameters or a version but
//! no `struct module`). A module's kobject also sits on the kset's own
//! list (`kset->list` through `kobject.entry`); a rootkit that unlinks it
//! from there (`list_del`) or takes its directory away (`kobject_del`)
//! leaves the other.
//!
//! The directory's children are a red-black tree, walked a level a batch
//! (a list of every built-in's kobject would cost a call per two); the
//! kset list is checked where each module's node is: its neighbours must
//! point back at it (one batch for every module).

use std::collections::BTreeSet;

use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::{ListLayout, SysfsLayout};
use crate::linux::structures::{rbtree, StructureFailure};

/// The kernel symbol of the modules' kset (`struct kset *module_kset`).
pub(crate) const KSET_SYMBOL: &str = "module_kset";

/// The modules `/sys/module` has.
#[derive(Debug, Default)]
pub(crate) struct SysfsModules {
    /// Their `struct module` addresses.
    pub modules: BTreeSet<u64>,
    /// Entries of built-in modules (no `struct module`).
    pub built_in: usize,
    pub failed: Vec<StructureFailure>,
}

/// The modules of the directory of the kset whose pointer is at
/// `kset_at`: no more than `max` entries.
pub(crate) async fn walk(
    kmem: &KernelMemory<'_>,
    layout: &SysfsLayout,
    kset_at: u64,
    max: usize,
) -> SysfsModules {
    let mut found = SysfsModules::default();
    let word = async |at: u64, what: &str| {
        let bytes = kmem.read_vec(at, 8).await;
        match bytes.map(|b| b.u64_at(0).unwrap_or(0)) {
            Ok(v) if v >= kmem.kernel_half() => Ok(v),
            Ok(v) => Err(StructureFailure::new(
                at,
                format!("{what} is {v:#x}, no kernel address"),
            )),
            Err(why) => Err(StructureFailure::new(at, format!("{what}: {why}"))),
        }
    };
    let root = async {
        let kset = word(kset_at, "module_kset").await?;
        let dir = word(kset.wrapping_add(layout.kset_dir), "the kset's directory").await?;
        let at = dir.wrapping_add(layout.children);
        let bytes = kmem.read_vec(at, 8).await;
        bytes
            .map(|b| b.u64_at(0).unwrap_or(0))
            .map_err(|why| StructureFailure::new(at, format!("/sys/module's entries: {why}")))
    };
    let root = match root.await {
        Ok(root) => root,
        Err(failure) => {
            found.failed.push(failure);
            return found;
        }
    };
    let objects = rbtree::Objects {
        node: layout.node,
        size: layout.node_span(),
        what: "/sys/module entry",
    };
    let (nodes, failed, _) = rbtree::objects(kmem, &layout.rb, objects, root, max).await;
    found.failed = failed;
    let mut kobjects = Vec::new();
    for (node, bytes) in &nodes {
        match bytes.u64_at(layout.private).unwrap_or(0) {
            k if k >= kmem.kernel_half() => kobjects.push(k),
            k => found.failed.push(StructureFailure::new(
                *node,
                format!("a /sys/module entry whose kobject is {k:#x}, no kernel address"),
            )),
        }
    }
    let owners = futures::future::join_all(
        kobjects
            .iter()
            .map(|&k| kmem.read_vec(k.wrapping_add(layout.module_of_kobj), 8)),
    )
    .await;
    for (&kobj, owner) in kobjects.iter().zip(owners) {
        match owner.map(|b| b.u64_at(0).unwrap_or(0)) {
            Ok(0) => found.built_in += 1,
            Ok(m) if m.wrapping_add(layout.module_kobj) == kobj => {
                found.modules.insert(m);
            }
            Ok(m) => found.failed.push(StructureFailure::new(
                kobj,
                format!("a /sys/module kobject whose module ({m:#x}) does not hold it"),
            )),
            Err(why) => found
                .failed
                .push(StructureFailure::new(kobj, format!("a /sys/module kobject: {why}"))),
        }
    }
    found
}

/// Whether each node (its address, `next` and `prev`) is linked in its
/// list: its `next`'s `prev` and its `prev`'s `next` are it. A node
/// unreadable, self-linked or poisoned is not; one batch for all.
pub(crate) async fn linked(
    kmem: &KernelMemory<'_>,
    links: &ListLayout,
    nodes: &[(u64, u64, u64)],
) -> Vec<bool> {
    let half = kmem.kernel_half();
    let back = |at: u64, offset: u64| async move {
        if at < half {
            return None;
        }
        let bytes = kmem.read_vec(at.wrapping_add(offset), 8).await.ok()?;
        bytes.u64_at(0)
    };
    let checks = nodes.iter().map(|&(node, next, prev)| async move {
        if node == 0 || next == node || prev == node {
            return false;
        }
        let (a, b) = futures::join!(back(next, links.prev), back(prev, links.next));
        a == Some(node) && b == Some(node)
    });
    futures::future::join_all(checks).await
}
