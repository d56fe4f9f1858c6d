//! A second view of the loadable modules: the module address tree
//! (`mod_tree`), which the kernel searches to tell which module an
//! address belongs to. A module unlinked from the `modules` list (what
//! hides it from `/proc/modules` and `lsmod`) stays in this tree unless
//! the code that hid it knew of it too; one found here and not on the
//! list is hidden.
//!
//! The tree is walked a level a batch (its first copy: the latch keeps
//! two), each node's module pointer kept; every memory kind of a module
//! has its node, so a module is counted once by its address. (The views
//! are compared in `views`.)

use std::collections::BTreeSet;

use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::{ModTreeLayout, ModuleLayout};
use crate::linux::structures::rbtree;
use crate::linux::structures::StructureFailure;
use crate::linux::{Kernel, Module};

use super::{max_modules, module, TREE_SYMBOL};

/// The most nodes a module has in the tree: one per kind of memory
/// (`MOD_MEM_NUM_TYPES` is 7 in 6.4; two layouts before).
const NODES_PER_MODULE: usize = 16;

/// What the module address tree held.
#[derive(Debug, Default)]
pub(crate) struct ModuleTree {
    /// The distinct modules of its nodes.
    pub modules: BTreeSet<u64>,
    /// What of it could not be read.
    pub failed: Vec<StructureFailure>,
    /// Nodes read: a module has one for each kind of its memory.
    pub nodes: usize,
    /// Levels read, a device call each.
    pub levels: usize,
}

impl Kernel {
    /// The distinct modules the address tree holds, and what of it could
    /// not be read; an error when there is no tree to read.
    pub(crate) async fn module_tree(&self) -> Result<ModuleTree, String> {
        let layout = self
            .offsets
            .module_tree
            .as_ref()
            .map_err(|e| format!("the module address tree cannot be read: {e}"))?;
        let root = self.symbol(TREE_SYMBOL).ok_or_else(|| {
            format!("kallsyms has no {TREE_SYMBOL} symbol: the module address tree cannot be found")
        })?;
        let module_size = self.offsets.modules.as_ref().map_or(1, |l| l.size);
        let kmem = self.kernel_memory();
        let max = max_modules(kmem.limit, module_size).saturating_mul(NODES_PER_MODULE);
        Ok(walk(&kmem, layout, root, max).await)
    }
}

/// The modules of the tree whose `mod_tree_root` is at `root`: no more
/// than `max` nodes.
pub(crate) async fn walk(
    kmem: &KernelMemory<'_>,
    layout: &ModTreeLayout,
    root: u64,
    max: usize,
) -> ModuleTree {
    let top = match kmem.read_vec(root + layout.root, 8).await {
        Ok(bytes) => bytes.u64_at(0).unwrap_or(0),
        Err(why) => {
            let why = format!("the module address tree's root: {why}");
            return ModuleTree {
                failed: vec![StructureFailure::new(root, why)],
                ..ModuleTree::default()
            };
        }
    };
    let objects = rbtree::Objects {
        node: layout.node,
        size: layout.span(),
        what: "module tree node",
    };
    let walked = rbtree::objects(kmem, &layout.rb, objects, top, max).await;
    let modules = walked
        .objects
        .iter()
        .filter_map(|(_, bytes)| bytes.u64_at(layout.module))
        .filter(|&m| m >= kmem.kernel_half())
        .collect();
    ModuleTree {
        modules,
        failed: walked.failed,
        nodes: walked.objects.len(),
        levels: walked.levels,
    }
}

/// The modules at `addresses`, read in one batch; what is no module
/// (unreadable, or no name) is a failure.
pub(crate) async fn read_modules(
    kmem: &KernelMemory<'_>,
    layout: &ModuleLayout,
    addresses: &[u64],
) -> (Vec<Module>, Vec<StructureFailure>) {
    let (start, len) = layout.span();
    let reads = futures::future::join_all(
        addresses
            .iter()
            .map(|&a| kmem.read_vec(a.wrapping_add(start), len)),
    )
    .await;
    let mut modules = Vec::new();
    let mut failed = Vec::new();
    for (&address, bytes) in addresses.iter().zip(reads) {
        match bytes.map(|b| module(layout, address, &b)) {
            Ok(Some(m)) => modules.push(m),
            Ok(None) => failed.push(StructureFailure::new(
                address,
                "in another view of the modules, but its name is empty or has no end: not a module",
            )),
            Err(why) => failed.push(StructureFailure::new(
                address,
                format!("in another view of the modules: {why}"),
            )),
        }
    }
    (modules, failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::fake_memory::FakeMemory;
    use crate::linux::offsets::RbLayout;

    /// `mod_tree_node` as the kernel lays it out: the module pointer,
    /// then a latch node whose first `rb_node` is (parent, right, left).
    const LAYOUT: ModTreeLayout = ModTreeLayout {
        root: 8,
        node: 8,
        module: 0,
        rb: RbLayout { left: 16, right: 8 },
    };

    #[test]
    fn each_module_once_however_many_nodes_and_a_loop_cut() {
        let mut f = FakeMemory::new(1 << 16);
        let module = f.alloc(64);
        let nodes: Vec<u64> = (0..4).map(|_| f.alloc(64)).collect();
        let rb = |n: u64| n + LAYOUT.node;
        // Root 0: left 1, right 2; 2's left leads back to 0 (a loop);
        // 1's right to 3, whose module pointer is a user address.
        f.put(nodes[0] + LAYOUT.node + 16, rb(nodes[1]));
        f.put(nodes[0] + LAYOUT.node + 8, rb(nodes[2]));
        f.put(nodes[2] + LAYOUT.node + 16, rb(nodes[0]));
        f.put(nodes[1] + LAYOUT.node + 8, rb(nodes[3]));
        for &n in &nodes[..3] {
            f.put(n, module);
        }
        f.put(nodes[3], 0x40_0000);
        let root = f.alloc(64);
        f.put(root + LAYOUT.root, rb(nodes[0]));
        let (tree, calls) = f.read(async |kmem| walk(kmem, &LAYOUT, root, 100).await);
        assert_eq!(tree.modules.into_iter().collect::<Vec<_>>(), [module]);
        let failed = tree.failed;
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert_eq!(failed[0].address, nodes[0]);
        // The root's pointer, then three levels of the four nodes.
        assert_eq!((tree.nodes, tree.levels), (4, 3));
        assert_eq!(calls, 1 + tree.levels as u64);
        // At most 2 nodes: cut and said.
        let (tree, _) = f.read(async |kmem| walk(kmem, &LAYOUT, root, 2).await);
        let failed = tree.failed;
        assert!(
            failed.iter().any(|f| f.reason.contains("more than 2")),
            "{failed:?}"
        );
    }

    #[test]
    fn an_unreadable_root_is_a_failure_not_an_empty_tree() {
        let f = FakeMemory::new(1 << 16);
        let past = crate::linux::fake_memory::DIRECT + (1 << 20);
        let (tree, _) = f.read(async |kmem| walk(kmem, &LAYOUT, past, 100).await);
        let failed = tree.failed;
        assert!(tree.modules.is_empty() && tree.levels == 0);
        assert_eq!(failed.len(), 1);
        assert!(
            failed[0]
                .reason
                .starts_with("the module address tree's root"),
            "{failed:?}"
        );
    }
}
