//! The kernel's loadable modules, as `/proc/modules` (and `lsmod`) shows
//! them: the `modules` list followed from both ends (see
//! `structures::list`), each `struct module` read whole (the members used)
//! in one batch per step; every offset from BTF, both for the layouts
//! before 6.4 (`core_layout` and `init_layout`) and after
//! (`mem[MOD_MEM_NUM_TYPES]`). What each module exports and its sections
//! are in `exports`.
//!
//! A list costs a device call per two modules (and one for its head),
//! unlike the trees the other walks follow; each module is checked by the
//! link that led to it and by its name (a string that ends in its field),
//! and the walk stops at a loop, at a link that is no kernel address, and
//! past the most modules the target can hold.

use std::fmt;

use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::ModuleLayout;
use crate::linux::structures::list;
use crate::linux::structures::StructureFailure;
use crate::linux::Kernel;

mod exports;
mod params;
mod sysfs;
mod taint;
#[cfg(test)]
mod tests;
mod tree;
mod views;

pub(crate) use params::PARAM_OPS;
pub use params::{ModuleParam, ParamKind};
pub(crate) use sysfs::KSET_SYMBOL;
pub(crate) use taint::TAINT_SYMBOL;
pub use taint::{kernel_taint_letters, module_taint_letters};
pub(crate) use tree::read_modules as read_hidden;
pub(crate) use tree::ModuleTree;
pub use views::{ModuleView, ModuleViews};

/// The kernel symbol of the list's head (`kernel/module/main.c`).
pub(crate) const SYMBOL: &str = "modules";
/// The kernel symbol of the module address tree (`kernel/module/main.c`).
pub(crate) const TREE_SYMBOL: &str = "mod_tree";
/// Bytes of the module area on x86-64 (`MODULES_VADDR` to `MODULES_END`,
/// at most 1.5 GiB): every module takes at least a page of it.
const MODULE_AREA: u64 = 0xffff_ffff_ff00_0000 - 0xffff_ffff_a000_0000;
const PAGE: u64 = 0x1000;

/// What the kernel says of a module's life (`enum module_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleState {
    /// Loaded and initialised.
    Live,
    /// Being loaded: its init function runs.
    Coming,
    /// Being unloaded.
    Going,
    /// Still being set up (`/proc/modules` leaves it out).
    Unformed,
    /// A value the kernel's enum does not have.
    Unknown(u32),
}

impl fmt::Display for ModuleState {
    /// `/proc/modules`'s words (Live, Loading, Unloading), and Unformed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModuleState::Live => f.write_str("Live"),
            ModuleState::Coming => f.write_str("Loading"),
            ModuleState::Going => f.write_str("Unloading"),
            ModuleState::Unformed => f.write_str("Unformed"),
            ModuleState::Unknown(v) => write!(f, "unknown ({v})"),
        }
    }
}

/// A loadable module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    /// Address of its `struct module`.
    pub address: u64,
    /// Its name, up to its NUL, decoded lossily.
    pub name: String,
    /// Bytes of its memory, as `/proc/modules` adds them up: every kind
    /// of it (6.4 on), or its core and init layouts (before).
    pub size: u64,
    /// Where its core text starts (`/proc/modules`' address).
    pub base: u64,
    /// Its state.
    pub state: ModuleState,
    /// Its taint bits (`module->taints`; see [`module_taint_letters`]),
    /// `None` when BTF lacks the member.
    pub taints: Option<u64>,
    /// Its code: each range's start and length (core, then init).
    pub text: Vec<(u64, u64)>,
    /// Its parameters: read by [`Kernel::module_views`] (`None` from
    /// [`Kernel::modules`], or when they cannot be read).
    pub params: Option<Vec<ModuleParam>>,
    /// Its `kp` and `num_kp`: where its parameters are.
    pub(crate) kp: (u64, u64),
    /// Its kobject's node in `module_kset`'s list: its address, `next`
    /// and `prev` (all 0 when BTF does not say where it is).
    pub(crate) kset_node: (u64, u64, u64),
    /// Its exported symbols: `syms` and `num_syms`.
    pub(crate) syms: (u64, u64),
    /// Its `sect_attrs` (0 when the kernel keeps none).
    pub(crate) sections: u64,
}

/// The modules in list order (the newest first, as the kernel adds them
/// at the head), and what could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModuleList {
    /// The modules read.
    pub modules: Vec<Module>,
    /// What was cut or could not be read; the modules before it stand.
    pub failed: Vec<StructureFailure>,
}

impl Kernel {
    /// The loadable modules (blocking; see [`Kernel::modules_async`]).
    pub fn modules(&self) -> ModuleList {
        self.memory().block_on(self.modules_async())
    }

    /// The loadable modules, from the `modules` list: the module's
    /// documentation says what is read.
    pub async fn modules_async(&self) -> ModuleList {
        let failed = |address, why: String| ModuleList {
            modules: Vec::new(),
            failed: vec![StructureFailure::new(address, why)],
        };
        let layout = match &self.offsets.modules {
            Ok(layout) => layout,
            Err(e) => return failed(0, format!("the module list cannot be read: {e}")),
        };
        let Some(head) = self.symbol(SYMBOL) else {
            return failed(
                0,
                format!("kallsyms has no {SYMBOL} symbol (a kernel without CONFIG_MODULES, or without CONFIG_KALLSYMS_ALL): the module list cannot be found"),
            );
        };
        read(&self.kernel_memory(), layout, head).await
    }
}

/// The modules of the list whose head is at `head`, no more than the
/// target's memory and module area can hold.
pub(crate) async fn read(kmem: &KernelMemory<'_>, layout: &ModuleLayout, head: u64) -> ModuleList {
    let objects = list::Objects {
        node: layout.list,
        span: layout.span(),
        what: "module",
    };
    let max = max_modules(kmem.limit, layout.size);
    let linked = list::objects(kmem, &layout.list_links, head, objects, max).await;
    let mut failed = linked.failed;
    let mut modules = Vec::with_capacity(linked.objects.len());
    for (address, bytes) in &linked.objects {
        match module(layout, *address, bytes) {
            Some(module) => modules.push(module),
            None => failed.push(StructureFailure::new(
                *address,
                "in the module list, but its name is empty or has no end (no NUL in its field): not a module",
            )),
        }
    }
    ModuleList { modules, failed }
}

/// The most modules a target of `memory` bytes can hold: each takes its
/// `struct module` of `size` bytes, and a page of the module area.
fn max_modules(memory: u64, size: u64) -> usize {
    let most = (memory / size.max(1)).clamp(1, MODULE_AREA / PAGE);
    usize::try_from(most).unwrap_or(usize::MAX)
}

/// `bytes` up to the first NUL, when there is one and every byte before
/// it is printable (a symbol's name).
pub(crate) fn c_string(bytes: &[u8]) -> Option<String> {
    let end = bytes.iter().position(|&c| c == 0)?;
    let text = &bytes[..end];
    text.iter()
        .all(|c| c.is_ascii_graphic())
        .then(|| String::from_utf8_lossy(text).into_owned())
}

/// The module whose span (`layout.span()`) `bytes` holds, read at
/// `address`; `None` when its name is empty or has no end in its field.
/// (Other bytes are kept, decoded lossily, for the front ends to escape: a
/// module is never dropped for what its name holds.)
fn module(layout: &ModuleLayout, address: u64, bytes: &[u8]) -> Option<Module> {
    let start = layout.span().0;
    let at = |offset: u64| offset - start;
    let field = bytes.bytes_at(at(layout.name), layout.name_len)?;
    let name = &field[..field.iter().position(|&c| c == 0)?];
    if name.is_empty() {
        return None;
    }
    let name = String::from_utf8_lossy(name).into_owned();
    let size = layout
        .memory
        .sizes()
        .into_iter()
        .map(|offset| u64::from(bytes.u32_at(at(offset)).unwrap_or(0)))
        .sum();
    let state = bytes.u32_at(at(layout.state)).unwrap_or(0);
    let s = &layout.states;
    let state = match i64::from(state) {
        v if v == s.live => ModuleState::Live,
        v if v == s.coming => ModuleState::Coming,
        v if v == s.going => ModuleState::Going,
        v if v == s.unformed => ModuleState::Unformed,
        _ => ModuleState::Unknown(state),
    };
    let word = |offset: u64| bytes.u64_at(at(offset)).unwrap_or(0);
    let half = |offset: u64| u64::from(bytes.u32_at(at(offset)).unwrap_or(0));
    let text = layout.memory.text().into_iter();
    let kset_node = layout.kset_entry.map_or((0, 0, 0), |entry| {
        let links = &layout.list_links;
        (
            address.wrapping_add(entry),
            word(entry + links.next),
            word(entry + links.prev),
        )
    });
    Some(Module {
        address,
        name,
        size,
        base: bytes.u64_at(at(layout.memory.text_base())).unwrap_or(0),
        state,
        taints: layout.taints.map(word),
        text: text
            .map(|(base, len)| (word(base), half(len)))
            .filter(|&(base, len)| base != 0 && len != 0)
            .collect(),
        params: None,
        kp: layout.params.map_or((0, 0), |(kp, n)| (word(kp), half(n))),
        kset_node,
        syms: (
            bytes.u64_at(at(layout.syms)).unwrap_or(0),
            u64::from(bytes.u32_at(at(layout.num_syms)).unwrap_or(0)),
        ),
        sections: layout
            .sections
            .and_then(|(offset, _)| bytes.u64_at(at(offset)))
            .unwrap_or(0),
    })
}
