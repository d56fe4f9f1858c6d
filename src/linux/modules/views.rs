//! The loadable modules through every view the kernel keeps of them, and
//! what one has that another lacks: the `modules` list (what
//! `/proc/modules` and `lsmod` show), the module address tree (`tree`),
//! `/sys/module` and `module_kset`'s list (`sysfs`). A module in another
//! view but not on the list is hidden; a live one on the list missing
//! from a view that was read is said too. Each module's parameters are
//! read beside, and the kernel's taint mask.
//!
//! The list (then its modules' parameters and kset nodes), the tree, the
//! sysfs directory and the taint mask are read at once; then any module
//! only another view has, and its parameters: the calls are the deepest
//! view's (the sysfs directory, with every built-in module's entry),
//! and when something hides, one for the hidden modules and up to three
//! for their parameters.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use futures::join;

use crate::linux::kmem::Fields;
use crate::linux::structures::StructureFailure;
use crate::linux::{Kernel, Module, ModuleList, ModuleState};

use super::params::{self, ParamArray, PARAM_OPS};
use super::sysfs::{self, SysfsModules, KSET_SYMBOL};
use super::tree::read_modules;
use super::{max_modules, TAINT_SYMBOL};

/// A view of the modules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ModuleView {
    /// The `modules` list.
    List,
    /// The module address tree (`mod_tree`).
    AddressTree,
    /// `/sys/module`: the kset's directory in sysfs.
    Sysfs,
    /// `module_kset`'s list of kobjects.
    KsetList,
}

impl fmt::Display for ModuleView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ModuleView::List => "module list",
            ModuleView::AddressTree => "address tree",
            ModuleView::Sysfs => "sysfs",
            ModuleView::KsetList => "kset list",
        })
    }
}

/// The modules of every view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleViews {
    /// The `modules` list ([`Kernel::modules`]), each module with its
    /// parameters.
    pub list: ModuleList,
    /// Modules another view has but the list lacks: hidden.
    pub hidden: Vec<Module>,
    /// The views each module (listed or hidden, by its `struct module`
    /// address) is in.
    pub seen_in: BTreeMap<u64, Vec<ModuleView>>,
    /// The views that could be read (a module can be missing only from
    /// these).
    pub read: Vec<ModuleView>,
    /// Live modules on the list that a view read lacks (that view was
    /// tampered with, or the list holds something that is no module).
    pub partly_seen: Vec<Module>,
    /// Entries of `/sys/module` that are built-in modules.
    pub built_in: usize,
    /// Entries of `/sys/module` that are files, not a module's directory
    /// (6.12's `compression`).
    pub sysfs_files: usize,
    /// Levels of `/sys/module`'s red-black tree read, a device call each:
    /// the sysfs view costs these and four more (the kset's pointer, the
    /// kset, its directory, the entries' owners), and is the deepest view
    /// where the kernel has some sixty built-in modules.
    pub sysfs_levels: usize,
    /// The kernel's taint mask (`/proc/sys/kernel/tainted`), or why it
    /// could not be read.
    pub kernel_taint: Result<u64, String>,
    /// Why a column is empty for every module (a member BTF lacks), once.
    pub notes: Vec<String>,
    /// What of a view, a hidden module or a module's parameters could not
    /// be read; a view that could not be read at all calls no module
    /// hidden nor missing.
    pub failed: Vec<StructureFailure>,
}

impl ModuleViews {
    /// The views module `m` (by address) is missing from.
    pub fn missing_from(&self, m: u64) -> Vec<ModuleView> {
        let seen = self.seen_in.get(&m).map_or(&[][..], Vec::as_slice);
        let missing = self.read.iter().filter(|v| !seen.contains(v));
        missing.copied().collect()
    }
}

impl Kernel {
    /// The modules of every view (blocking; see
    /// [`Kernel::module_views_async`]).
    pub fn module_views(&self) -> ModuleViews {
        self.memory().block_on(self.module_views_async())
    }

    /// The modules of every view, each with its parameters: see the
    /// module's documentation.
    pub async fn module_views_async(&self) -> ModuleViews {
        let listed = async {
            let mut list = self.modules_async().await;
            let (kset, failed) = self.module_extras(&mut list.modules).await;
            (list, kset, failed)
        };
        let ((list, kset, extra_failed), tree, sysfs, taint) = join!(
            listed,
            self.module_tree(),
            self.module_sysfs(),
            self.kernel_taint()
        );
        let mut views = ModuleViews {
            list: ModuleList::default(),
            hidden: Vec::new(),
            seen_in: BTreeMap::new(),
            read: vec![ModuleView::List],
            partly_seen: Vec::new(),
            built_in: 0,
            sysfs_files: 0,
            sysfs_levels: 0,
            kernel_taint: taint,
            notes: self.module_notes(),
            failed: extra_failed,
        };
        let tree = match tree {
            Ok(tree) => {
                views.read.push(ModuleView::AddressTree);
                views.failed.extend(tree.failed);
                Some(tree.modules)
            }
            Err(why) => {
                views.failed.push(StructureFailure::new(0, why));
                None
            }
        };
        let sysfs = match sysfs {
            Ok(found) => {
                views.read.push(ModuleView::Sysfs);
                views.built_in = found.built_in;
                views.sysfs_files = found.files;
                views.sysfs_levels = found.levels;
                views.failed.extend(found.failed.iter().cloned());
                Some(found.modules)
            }
            Err(why) => {
                views.failed.push(StructureFailure::new(0, why));
                None
            }
        };
        let kset_read = matches!(&self.offsets.modules, Ok(l) if l.kset_entry.is_some());
        if kset_read {
            views.read.push(ModuleView::KsetList);
        }
        let listed: BTreeSet<u64> = list.modules.iter().map(|m| m.address).collect();
        let elsewhere: BTreeSet<u64> = tree.iter().chain(&sysfs).flatten().copied().collect();
        let unlisted: Vec<u64> = elsewhere.difference(&listed).copied().collect();
        let (mut hidden, hidden_kset) = match (&self.offsets.modules, unlisted.is_empty()) {
            (Ok(layout), false) => {
                let kmem = self.kernel_memory();
                let (mut hidden, failed) = read_modules(&kmem, layout, &unlisted).await;
                views.failed.extend(failed);
                let (kset, failed) = self.module_extras(&mut hidden).await;
                views.failed.extend(failed);
                (hidden, kset)
            }
            _ => (Vec::new(), Vec::new()),
        };
        let every = list.modules.iter().zip(&kset);
        for (m, &in_kset) in every.chain(hidden.iter().zip(&hidden_kset)) {
            let mut seen = Vec::new();
            let has = |view: &Option<BTreeSet<u64>>| {
                view.as_ref().is_some_and(|v| v.contains(&m.address))
            };
            if listed.contains(&m.address) {
                seen.push(ModuleView::List);
            }
            if has(&tree) {
                seen.push(ModuleView::AddressTree);
            }
            if has(&sysfs) {
                seen.push(ModuleView::Sysfs);
            }
            if in_kset && kset_read {
                seen.push(ModuleView::KsetList);
            }
            views.seen_in.insert(m.address, seen);
        }
        views.partly_seen = list
            .modules
            .iter()
            .filter(|m| m.state == ModuleState::Live && !views.missing_from(m.address).is_empty())
            .cloned()
            .collect();
        hidden.sort_by_key(|m| m.address);
        views.hidden = hidden;
        views.list = list;
        views
    }

    /// Reads each module's parameters into it, and whether its kobject is
    /// on `module_kset`'s list (in the modules' order); what failed.
    async fn module_extras(&self, modules: &mut [Module]) -> (Vec<bool>, Vec<StructureFailure>) {
        let kmem = self.kernel_memory();
        let kinds: Vec<(u64, params::ParamKind)> = PARAM_OPS
            .iter()
            .filter_map(|(name, kind)| Some((self.symbol(name)?, *kind)))
            .collect();
        let arrays: Vec<ParamArray> = modules
            .iter()
            .map(|m| ParamArray {
                module: m.address,
                kp: m.kp.0,
                count: m.kp.1,
            })
            .collect();
        let nodes: Vec<(u64, u64, u64)> = modules.iter().map(|m| m.kset_node).collect();
        let params = async {
            match (&self.offsets.params, &self.offsets.modules) {
                (Ok(layout), Ok(m)) if m.params.is_some() => {
                    Some(params::read(&kmem, layout, &kinds, &arrays).await)
                }
                _ => None,
            }
        };
        let kset = async {
            match &self.offsets.modules {
                Ok(layout) if layout.kset_entry.is_some() => {
                    sysfs::linked(&kmem, &layout.list_links, &nodes).await
                }
                _ => vec![false; nodes.len()],
            }
        };
        let (params, kset) = join!(params, kset);
        let mut failed = Vec::new();
        if let Some((params, why)) = params {
            for (m, p) in modules.iter_mut().zip(params) {
                m.params = Some(p);
            }
            failed = why;
        }
        (kset, failed)
    }

    /// `/sys/module`'s modules, or why it cannot be read at all.
    async fn module_sysfs(&self) -> Result<SysfsModules, String> {
        let layout = self
            .offsets
            .sysfs
            .as_ref()
            .map_err(|e| format!("/sys/module cannot be read: {e}"))?;
        let kset = self.symbol(KSET_SYMBOL).ok_or_else(|| {
            format!("kallsyms has no {KSET_SYMBOL} symbol: /sys/module cannot be found")
        })?;
        let kmem = self.kernel_memory();
        let module_size = self.offsets.modules.as_ref().map_or(1, |l| l.size);
        // Every loadable module, and as many built-in ones.
        let max = max_modules(kmem.limit, module_size).saturating_mul(2);
        let found = sysfs::walk(&kmem, layout, kset, max).await;
        match found.failed.first() {
            Some(f) if found.modules.is_empty() && found.built_in == 0 => {
                Err(format!("/sys/module cannot be read: {f}"))
            }
            _ => Ok(found),
        }
    }

    /// The kernel's taint mask.
    async fn kernel_taint(&self) -> Result<u64, String> {
        let at = self.symbol(TAINT_SYMBOL).ok_or_else(|| {
            format!("kallsyms has no {TAINT_SYMBOL} symbol (a kernel without CONFIG_KALLSYMS_ALL?)")
        })?;
        let bytes = self.kernel_memory().read_vec(at, 8).await?;
        Ok(bytes.u64_at(0).unwrap_or(0))
    }

    /// Why a column is empty for every module, once each.
    fn module_notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if let Ok(layout) = &self.offsets.modules {
            if layout.taints.is_none() {
                notes.push("BTF has no module.taints: no module's taint is shown".into());
            }
            if layout.params.is_none() {
                notes.push("BTF has no module.kp: no module's parameters are shown".into());
            }
            if layout.kset_entry.is_none() {
                notes.push(
                    "BTF has no module.mkobj.kobj.entry: the kset list is not compared".into(),
                );
            }
        }
        if let Err(e) = &self.offsets.params {
            notes.push(format!("the modules' parameters cannot be read: {e}"));
        }
        notes
    }
}
