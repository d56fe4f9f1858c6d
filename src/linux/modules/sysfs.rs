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
    /// Entries that are files, not a kobject's directory (6.12's
    /// `compression`).
    pub files: usize,
    /// Levels of the directory's red-black tree read, a device call each.
    pub levels: usize,
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
    let walked = rbtree::objects(kmem, &layout.rb, objects, root, max).await;
    found.failed = walked.failed;
    found.levels = walked.levels;
    let mut kobjects = Vec::new();
    for (node, bytes) in &walked.objects {
        if layout.kind.and_then(|k| k.is_dir(bytes)) == Some(false) {
            found.files += 1;
            continue;
        }
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
            Err(why) => found.failed.push(StructureFailure::new(
                kobj,
                format!("a /sys/module kobject: {why}"),
            )),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::fake_memory::FakeMemory;
    use crate::linux::offsets::{NodeKind, RbLayout};

    /// `kset`, `kernfs_node` and `module_kobject` as 6.1 lays them.
    const LAYOUT: SysfsLayout = SysfsLayout {
        kset_dir: 72,
        children: 72,
        node: 24,
        private: 96,
        rb: RbLayout { left: 16, right: 8 },
        module_of_kobj: 64,
        module_kobj: 80,
        kind: Some(NodeKind {
            flags: 112,
            size: 2,
            mask: 0xf,
            dir: 1,
        }),
    };
    /// `KERNFS_FILE`.
    const FILE: u16 = 2;
    const LINKS: ListLayout = ListLayout { next: 0, prev: 8 };

    /// A kset pointer (its address returned) whose kset's directory has
    /// the entry `root` at the root of its children.
    fn sysfs(f: &mut FakeMemory, root: u64) -> u64 {
        let dir = f.alloc(128);
        f.put(dir + LAYOUT.children, root + LAYOUT.node);
        let kset = f.alloc(128);
        f.put(kset + LAYOUT.kset_dir, dir);
        let pointer = f.alloc(8);
        f.put(pointer, kset);
        pointer
    }

    #[test]
    fn modules_built_ins_and_strays_told_apart_and_a_loop_cut() {
        let mut f = FakeMemory::new(1 << 16);
        let nodes: Vec<u64> = (0..4).map(|_| f.alloc(128)).collect();
        let rb = |n: u64| n + LAYOUT.node;
        // Root 0: left 1, right 2; 2's right leads back to 0 (a loop);
        // 1's left is 3.
        f.put(rb(nodes[0]) + 16, rb(nodes[1]));
        f.put(rb(nodes[0]) + 8, rb(nodes[2]));
        f.put(rb(nodes[2]) + 8, rb(nodes[0]));
        f.put(rb(nodes[1]) + 16, rb(nodes[3]));
        // 0: a module's kobject (in its struct module); 1: a built-in's;
        // 2: one naming a module that does not hold it; 3: no kobject.
        let module = f.alloc(256);
        let kobj = module + LAYOUT.module_kobj;
        f.put(kobj + LAYOUT.module_of_kobj, module);
        f.put(nodes[0] + LAYOUT.private, kobj);
        let built_in = f.alloc(128);
        f.put(nodes[1] + LAYOUT.private, built_in);
        let stray = f.alloc(128);
        f.put(stray + LAYOUT.module_of_kobj, module);
        f.put(nodes[2] + LAYOUT.private, stray);
        f.put(nodes[3] + LAYOUT.private, 0x40);
        for &n in &nodes {
            f.put_bytes(n + 112, &1u16.to_le_bytes());
        }
        // 3's right: a file (6.12's `compression`), whose `priv` is its
        // attribute: neither a module nor a failure.
        let file = f.alloc(128);
        f.put(rb(nodes[3]) + 8, rb(file));
        f.put_bytes(file + 112, &FILE.to_le_bytes());
        f.put(file + LAYOUT.private, stray);
        let kset = sysfs(&mut f, nodes[0]);
        let (found, calls) = f.read(async |kmem| walk(kmem, &LAYOUT, kset, 100).await);
        assert_eq!(found.modules.into_iter().collect::<Vec<_>>(), [module]);
        assert_eq!((found.built_in, found.files), (1, 1));
        let reasons: Vec<&str> = found.failed.iter().map(|f| f.reason.as_str()).collect();
        assert_eq!(found.failed.len(), 3, "{reasons:?}");
        assert!(
            reasons.iter().any(|r| r.contains("no kernel address")),
            "{reasons:?}"
        );
        assert!(
            reasons.iter().any(|r| r.contains("does not hold it")),
            "{reasons:?}"
        );
        // The pointer, the kset, the directory, four levels, the owners.
        assert_eq!(found.levels, 4);
        assert_eq!(calls, 3 + found.levels as u64 + 1);
        // A kset pointer that is garbage: said, nothing found.
        f.put(kset, 0x1234);
        let (found, _) = f.read(async |kmem| walk(kmem, &LAYOUT, kset, 100).await);
        assert!(found.modules.is_empty() && found.built_in == 0);
        assert!(
            found.failed[0].reason.contains("module_kset is 0x1234"),
            "{:?}",
            found.failed
        );
    }

    #[test]
    fn a_node_is_on_its_list_only_when_both_neighbours_point_back() {
        let mut f = FakeMemory::new(1 << 16);
        let [head, a, b, c] = [0; 4].map(|_| f.alloc(16));
        // head <-> a <-> b <-> head; c was taken out (its neighbours skip
        // it) but keeps its links.
        for (node, next, prev) in [(head, a, b), (a, b, head), (b, head, a)] {
            f.put(node + LINKS.next, next);
            f.put(node + LINKS.prev, prev);
        }
        let poison = 0xdead_0000_0000_0100;
        let nodes = [
            (a, b, head),
            (c, b, a),
            (c, c, c),
            (c, poison, poison + 0x22),
            (0, 0, 0),
        ];
        let (linked, calls) = f.read(async |kmem| linked(kmem, &LINKS, &nodes).await);
        assert_eq!(linked, [true, false, false, false, false]);
        assert_eq!(calls, 1);
    }
}
