//! The kernel's loaded modules, as `/proc/modules` lists them: the list
//! `modules` threads through every `struct module`, with each module's
//! name, state, base and size (from `mem[]` since 6.4, `core_layout` and
//! `init_layout` before), its exported symbols (`syms`) and its sections
//! (`sect_attrs`). Every offset comes from BTF.
//!
//! A list is read one node at a time: it is walked from both ends at once
//! (`next` from the head, `prev` from its tail), each step of both one
//! batch, so `n` modules cost about `n / 2` reads, plus the page-table
//! levels of the module area on the first. Each node is checked by the
//! link back to where it was reached from, read once, and the walk is
//! bounded by what the target holds: a list that loops or breaks is cut
//! and the cut reported in [`ModuleList::failed`].

use std::collections::{HashMap, HashSet};
use std::fmt;

use crate::linux::btf::{Btf, BtfError};
use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::Kernel;
use crate::Memory;

/// The symbol of the list's head.
pub(crate) const LIST_SYMBOL: &str = "modules";
/// Most modules read: far more than a kernel loads (a few hundred).
const MAX_MODULES: usize = 1 << 16;
/// A module's state (`enum module_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleState {
    /// Running normally.
    Live,
    /// Being loaded (its init runs).
    Coming,
    /// Being unloaded.
    Going,
    /// Still being set up.
    Unformed,
    /// A value the kernel does not define.
    Other(u32),
}

impl fmt::Display for ModuleState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModuleState::Live => f.write_str("Live"),
            ModuleState::Coming => f.write_str("Loading"),
            ModuleState::Going => f.write_str("Unloading"),
            ModuleState::Unformed => f.write_str("Unformed"),
            ModuleState::Other(v) => write!(f, "state {v}"),
        }
    }
}

/// A loaded module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelModule {
    /// The `struct module`'s address.
    pub address: u64,
    /// Its name, decoded lossily.
    pub name: String,
    /// Where its code starts, as `/proc/modules` shows it.
    pub base: u64,
    /// Bytes of all its memory, as `/proc/modules` counts them.
    pub size: u64,
    /// Its state.
    pub state: ModuleState,
    /// Its exported symbols (`syms`, `num_syms`).
    syms: (u64, u64),
    /// Its `sect_attrs`.
    sections: u64,
}

/// Something of the module list that could not be read or believed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleFailure {
    /// The kernel address of the structure concerned.
    pub address: u64,
    /// Why, in one line.
    pub reason: String,
}

impl fmt::Display for ModuleFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}: {}", self.address, self.reason)
    }
}

/// The modules in list order, and what was cut.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModuleList {
    /// The modules read and checked.
    pub modules: Vec<KernelModule>,
    /// What could not be read; the rest of the list stands.
    pub failed: Vec<ModuleFailure>,
}

/// Where a module's memory is described.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Memories {
    /// 6.4 and later: `mem[type].base`, `.size` for every type; the base
    /// is that of `MOD_TEXT`.
    Typed { text_base: u64, sizes: Vec<u64> },
    /// Before: `core_layout.base`, `core_layout.size`, `init_layout.size`.
    Layouts {
        base: u64,
        core_size: u64,
        init_size: u64,
    },
}

/// Offsets, from BTF, of what the list is read by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ModulesLayout {
    list: u64,
    list_next: u64,
    list_prev: u64,
    name: u64,
    name_len: u64,
    state: u64,
    memories: Memories,
    syms: u64,
    num_syms: u64,
    sect_attrs: u64,
    states: [Option<i64>; 4],
}

impl ModulesLayout {
    /// The offsets in `btf`; an error names the first member missing.
    pub fn from_btf(btf: &Btf) -> Result<ModulesLayout, BtfError> {
        let m = |path: &str| btf.member_offset("module", path);
        let memories = match btf.enum_value("MOD_MEM_NUM_TYPES") {
            Some(types) => {
                let text = btf.enum_value("MOD_TEXT").unwrap_or(0);
                let sizes = (0..types.clamp(0, 16))
                    .map(|i| m(&format!("mem[{i}].size")))
                    .collect::<Result<Vec<u64>, BtfError>>()?;
                Memories::Typed {
                    text_base: m(&format!("mem[{text}].base"))?,
                    sizes,
                }
            }
            None => Memories::Layouts {
                base: m("core_layout.base")?,
                core_size: m("core_layout.size")?,
                init_size: m("init_layout.size")?,
            },
        };
        let list = m("list")?;
        Ok(ModulesLayout {
            list,
            list_next: list + btf.member_offset("list_head", "next")?,
            list_prev: list + btf.member_offset("list_head", "prev")?,
            name: m("name")?,
            name_len: btf.member_size("module", "name")?.min(256),
            state: m("state")?,
            memories,
            syms: m("syms")?,
            num_syms: m("num_syms")?,
            sect_attrs: m("sect_attrs")?,
            states: [
                "MODULE_STATE_LIVE",
                "MODULE_STATE_COMING",
                "MODULE_STATE_GOING",
                "MODULE_STATE_UNFORMED",
            ]
            .map(|s| btf.enum_value(s)),
        })
    }

    /// The span of a module read: every member used.
    fn span(&self) -> (u64, usize) {
        let mut fields = vec![
            (self.list_next, 8),
            (self.list_prev, 8),
            (self.name, self.name_len),
            (self.state, 4),
            (self.syms, 8),
            (self.num_syms, 4),
            (self.sect_attrs, 8),
        ];
        match &self.memories {
            Memories::Typed { text_base, sizes } => {
                fields.push((*text_base, 8));
                fields.extend(sizes.iter().map(|&s| (s, 4)));
            }
            Memories::Layouts {
                base,
                core_size,
                init_size,
            } => fields.extend([(*base, 8), (*core_size, 4), (*init_size, 4)]),
        }
        let first = fields.iter().map(|f| f.0).min().unwrap_or(0);
        let end = fields.iter().map(|f| f.0 + f.1).max().unwrap_or(0);
        (first, (end - first) as usize)
    }

    fn state_of(&self, value: u32) -> ModuleState {
        let states = [
            ModuleState::Live,
            ModuleState::Coming,
            ModuleState::Going,
            ModuleState::Unformed,
        ];
        self.states
            .iter()
            .zip(states)
            .find(|(v, _)| **v == Some(i64::from(value)))
            .map_or(ModuleState::Other(value), |(_, s)| s)
    }
}

/// Asks `btf` every question the list asks (what a warm start must have
/// the answers to).
pub(super) fn ask_layout(btf: &Btf) -> Result<(), BtfError> {
    ModulesLayout::from_btf(btf).map(drop)
}

/// `bytes` up to the first NUL, decoded lossily; `None` when there is no
/// NUL or a byte is not printable.
fn c_string(bytes: &[u8]) -> Option<String> {
    let end = bytes.iter().position(|&c| c == 0)?;
    let text = &bytes[..end];
    text.iter()
        .all(|c| c.is_ascii_graphic())
        .then(|| String::from_utf8_lossy(text).into_owned())
}

impl Kernel {
    /// The loaded modules (blocking; see [`Kernel::modules_async`]).
    pub fn modules(&self, mem: &Memory) -> ModuleList {
        mem.block_on(self.modules_async(mem))
    }

    /// The loaded modules, in the order of the kernel's list: the module's
    /// documentation says how they are read.
    pub async fn modules_async(&self, mem: &Memory) -> ModuleList {
        let fail = |address, reason: String| ModuleList {
            modules: Vec::new(),
            failed: vec![ModuleFailure { address, reason }],
        };
        let Some(head) = self.symbol(LIST_SYMBOL) else {
            return fail(
                0,
                "kallsyms has no `modules`: a kernel without loadable modules".into(),
            );
        };
        match ModulesLayout::from_btf(self.btf()) {
            Ok(layout) => read(&self.kernel_memory(mem), &layout, head).await,
            Err(e) => fail(head, format!("modules cannot be read: {e}")),
        }
    }
}

/// One module as read, checked, with the links it was reached by.
struct Node {
    module: KernelModule,
    next: u64,
    prev: u64,
}

/// Reads the module at list node `node`.
async fn node(kmem: &KernelMemory<'_>, layout: &ModulesLayout, node: u64) -> Result<Node, String> {
    let (first, len) = layout.span();
    let address = node.wrapping_sub(layout.list);
    let bytes = kmem.read_vec(address.wrapping_add(first), len).await?;
    let u64_at = |o: u64| bytes.u64_at(o - first).unwrap_or(0);
    let u32_at = |o: u64| u64::from(bytes.u32_at(o - first).unwrap_or(0));
    let name = bytes
        .bytes_at(layout.name - first, layout.name_len)
        .and_then(c_string)
        .filter(|n| !n.is_empty())
        .ok_or("its name is not a printable string: not a module")?;
    let (base, size) = match &layout.memories {
        Memories::Typed { text_base, sizes } => {
            (u64_at(*text_base), sizes.iter().map(|&s| u32_at(s)).sum())
        }
        Memories::Layouts {
            base,
            core_size,
            init_size,
        } => (u64_at(*base), u32_at(*core_size) + u32_at(*init_size)),
    };
    Ok(Node {
        module: KernelModule {
            address,
            name,
            base,
            size,
            state: layout.state_of(u32_at(layout.state) as u32),
            syms: (u64_at(layout.syms), u32_at(layout.num_syms)),
            sections: u64_at(layout.sect_attrs),
        },
        next: u64_at(layout.list_next),
        prev: u64_at(layout.list_prev),
    })
}

/// One end of the walk: where it is, and the node it came from.
struct Cursor {
    at: u64,
    from: u64,
    forward: bool,
    done: bool,
    found: Vec<KernelModule>,
}

/// Walks the list whose head is at `head` from both ends.
pub(crate) async fn read(kmem: &KernelMemory<'_>, layout: &ModulesLayout, head: u64) -> ModuleList {
    let mut failed = Vec::new();
    let links = match kmem.read_vec(head, 16).await {
        Ok(bytes) => bytes,
        Err(why) => {
            return ModuleList {
                modules: Vec::new(),
                failed: vec![ModuleFailure {
                    address: head,
                    reason: format!("the list head: {why}"),
                }],
            }
        }
    };
    let (first, last) = (links.u64_at(0).unwrap_or(0), links.u64_at(8).unwrap_or(0));
    let mut ends = [
        Cursor {
            at: first,
            from: head,
            forward: true,
            done: first == head,
            found: Vec::new(),
        },
        Cursor {
            at: last,
            from: head,
            forward: false,
            done: last == head,
            found: Vec::new(),
        },
    ];
    // Each node read, and whether the forward end read it.
    let mut seen: HashMap<u64, bool> = HashMap::new();
    let cut = |failed: &mut Vec<ModuleFailure>, address, reason: String| {
        failed.push(ModuleFailure { address, reason })
    };
    while ends.iter().any(|c| !c.done) {
        if seen.len() >= MAX_MODULES {
            cut(
                &mut failed,
                head,
                format!("more than {MAX_MODULES} modules: the rest not read"),
            );
            break;
        }
        // A node the other end has read is where the two meet; one this
        // end has read is a loop.
        for c in ends.iter_mut().filter(|c| !c.done) {
            match seen.insert(c.at, c.forward) {
                None => {}
                Some(by) => {
                    c.done = true;
                    if by == c.forward {
                        cut(
                            &mut failed,
                            c.at,
                            "the list leads back to this module (a loop); cut here".into(),
                        );
                    }
                }
            }
        }
        let nodes = futures::future::join_all(ends.iter().map(|c| async move {
            match c.done {
                true => None,
                false => Some(node(kmem, layout, c.at).await),
            }
        }))
        .await;
        for (c, n) in ends.iter_mut().zip(nodes) {
            let Some(n) = n else { continue };
            let n = match n {
                Ok(n) => n,
                Err(why) => {
                    cut(
                        &mut failed,
                        c.at,
                        format!("module list node: {why}; cut here"),
                    );
                    c.done = true;
                    continue;
                }
            };
            let back = if c.forward { n.prev } else { n.next };
            if back != c.from {
                cut(
                    &mut failed,
                    c.at,
                    format!(
                        "its link back is {back:#x}, not {:#x} that leads to it (the list changed, or is not one); cut here",
                        c.from
                    ),
                );
                c.done = true;
                continue;
            }
            c.found.push(n.module);
            c.from = c.at;
            c.at = if c.forward { n.next } else { n.prev };
            if c.at == head {
                c.done = true;
            }
        }
    }
    let [forward, backward] = ends;
    let mut modules = forward.found;
    let known: HashSet<u64> = modules.iter().map(|m| m.address).collect();
    modules.extend(
        backward
            .found
            .into_iter()
            .rev()
            .filter(|m| !known.contains(&m.address)),
    );
    ModuleList { modules, failed }
}

mod exports;
#[cfg(test)]
mod tests;
