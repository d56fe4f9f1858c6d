//! The offsets the module list is read by: `struct module`'s state, list
//! node and name, and where its memory is, which 6.4 laid out anew.

use crate::linux::find::btf::{Btf, BtfError};
use crate::linux::offsets::{ListLayout, RbLayout};

/// The most kinds of module memory read (6.4 has 7, `MOD_MEM_NUM_TYPES`).
const MAX_MEMORY_TYPES: u64 = 16;
/// Longest module name read (`MODULE_NAME_LEN` is 56 on 64-bit kernels).
const MAX_NAME: u64 = 64;

/// Where a module's memory and its size are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ModuleMemory {
    /// From 6.4: `mem[MOD_MEM_NUM_TYPES]`, a `struct module_memory` per
    /// kind (text, data, read-only data, ..., the init kinds).
    Typed {
        /// `module.mem`.
        mem: u64,
        /// Its elements, and the bytes between them.
        count: u64,
        stride: u64,
        /// `MOD_TEXT`: the kind whose base `/proc/modules` shows.
        text: u64,
        /// `MOD_INIT_TEXT`, when BTF names it: code too, until init ends.
        init_text: Option<u64>,
        /// `module_memory.base`, `module_memory.size`.
        base: u64,
        size: u64,
    },
    /// Before 6.4: `core_layout` and `init_layout` (and `data_layout`
    /// where the architecture keeps data apart), each a `struct
    /// module_layout`.
    Layouts {
        core: u64,
        init: u64,
        data: Option<u64>,
        /// `module_layout.base`, `module_layout.size`, and
        /// `module_layout.text_size` (its code, from its base).
        base: u64,
        size: u64,
        text_size: u64,
    },
}

impl ModuleMemory {
    /// Where the base `/proc/modules` shows is (the core text's).
    pub(crate) fn text_base(&self) -> u64 {
        match *self {
            ModuleMemory::Typed {
                mem,
                stride,
                text,
                base,
                ..
            } => mem + text * stride + base,
            ModuleMemory::Layouts { core, base, .. } => core + base,
        }
    }

    /// Where each size `/proc/modules` adds up is (each a `u32`).
    pub(crate) fn sizes(&self) -> Vec<u64> {
        match *self {
            ModuleMemory::Typed {
                mem,
                count,
                stride,
                size,
                ..
            } => (0..count).map(|i| mem + i * stride + size).collect(),
            ModuleMemory::Layouts {
                core,
                init,
                data,
                size,
                ..
            } => [Some(core), Some(init), data]
                .into_iter()
                .flatten()
                .map(|at| at + size)
                .collect(),
        }
    }

    /// Where each range of code is: the offsets of its base (a pointer)
    /// and its length (a `u32`), core first.
    pub(crate) fn text(&self) -> Vec<(u64, u64)> {
        match *self {
            ModuleMemory::Typed {
                mem,
                stride,
                text,
                init_text,
                base,
                size,
                ..
            } => [Some(text), init_text]
                .into_iter()
                .flatten()
                .map(|kind| (mem + kind * stride + base, mem + kind * stride + size))
                .collect(),
            ModuleMemory::Layouts {
                core,
                init,
                base,
                text_size,
                ..
            } => vec![
                (core + base, core + text_size),
                (init + base, init + text_size),
            ],
        }
    }
}

/// How the kernel keeps an exported symbol (`struct kernel_symbol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SymbolForm {
    /// `value_offset` and `name_offset`, each relative to itself
    /// (`CONFIG_HAVE_ARCH_PREL32_RELOCATIONS`, x86-64's default).
    Relative { value: u64, name: u64, size: u64 },
    /// `value` and `name` pointers.
    Absolute { value: u64, name: u64, size: u64 },
}

impl SymbolForm {
    fn from_btf(btf: &Btf) -> Result<SymbolForm, BtfError> {
        let k = |m: &str| btf.member_offset("kernel_symbol", m);
        let size = btf.size_of("kernel_symbol")?;
        match (k("value_offset"), k("name_offset")) {
            (Ok(value), Ok(name)) => Ok(SymbolForm::Relative { value, name, size }),
            _ => Ok(SymbolForm::Absolute {
                value: k("value")?,
                name: k("name")?,
                size,
            }),
        }
    }
}

/// Offsets of a module's section list (`struct module_sect_attrs`, what
/// `/sys/module/NAME/sections` shows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SectionLayout {
    /// `module_sect_attrs.nsections` (a `u32`).
    pub(crate) count: u64,
    /// `module_sect_attrs.attrs`, an array of `module_sect_attr`.
    pub(crate) attrs: u64,
    /// `sizeof(struct module_sect_attr)`.
    pub(crate) size: u64,
    /// `module_sect_attr.address`.
    pub(crate) address: u64,
    /// Its name pointer: `battr.attr.name` (5.8 on) or `name` (before).
    pub(crate) name: u64,
}

impl SectionLayout {
    fn from_btf(btf: &Btf) -> Result<SectionLayout, BtfError> {
        let attr = |m: &str| btf.member_offset("module_sect_attr", m);
        Ok(SectionLayout {
            count: btf.member_offset("module_sect_attrs", "nsections")?,
            attrs: btf.member_offset("module_sect_attrs", "attrs")?,
            size: btf.size_of("module_sect_attr")?,
            address: attr("address")?,
            name: attr("battr.attr.name").or_else(|_| attr("name"))?,
        })
    }
}

/// `enum module_state`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ModuleStates {
    pub(crate) live: i64,
    pub(crate) coming: i64,
    pub(crate) going: i64,
    pub(crate) unformed: i64,
}

/// Byte offsets, from BTF, of everything the module list is read by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ModuleLayout {
    /// `list_head`'s links.
    pub(crate) list_links: ListLayout,
    /// `sizeof(struct module)`.
    pub(crate) size: u64,
    /// `module.state` (an enum: 4 bytes).
    pub(crate) state: u64,
    /// `module.list`, its node in the `modules` list.
    pub(crate) list: u64,
    /// `module.name`, and the bytes of it read.
    pub(crate) name: u64,
    pub(crate) name_len: u64,
    pub(crate) memory: ModuleMemory,
    pub(crate) states: ModuleStates,
    /// `module.syms` and `module.num_syms` (a `u32`): what it exports.
    pub(crate) syms: u64,
    pub(crate) num_syms: u64,
    /// `module.sect_attrs`, with the layout it points at; `None` in a
    /// kernel built without `CONFIG_KALLSYMS` or `CONFIG_SYSFS`.
    pub(crate) sections: Option<(u64, SectionLayout)>,
    /// How exported symbols are kept; `None` when BTF does not say.
    pub(crate) symbol_form: Option<SymbolForm>,
    /// `module.taints` (an `unsigned long`); `None` when BTF lacks it.
    pub(crate) taints: Option<u64>,
    /// `module.kp` and `module.num_kp` (a `u32`): its parameters.
    pub(crate) params: Option<(u64, u64)>,
    /// `module.mkobj.kobj.entry`: its node in `module_kset`'s list.
    pub(crate) kset_entry: Option<u64>,
}

impl ModuleLayout {
    /// The offsets in `btf`; an error names the first type, member or
    /// enumerator missing.
    pub fn from_btf(btf: &Btf) -> Result<ModuleLayout, BtfError> {
        let module = |m: &str| btf.member_offset("module", m);
        let value = |name: &str| {
            btf.enum_value(name)
                .ok_or_else(|| BtfError::NoEnumerator(format!("{name} (enum module_state)")))
        };
        let memory = match module("mem") {
            Ok(mem) => {
                let stride = btf.size_of("module_memory")?;
                let count = btf.member_size("module", "mem")? / stride.max(1);
                if stride == 0 || !(1..=MAX_MEMORY_TYPES).contains(&count) {
                    return Err(BtfError::Parse(format!(
                        "BTF gives module.mem {count} elements of {stride} bytes, not 1 to {MAX_MEMORY_TYPES} module_memory"
                    )));
                }
                let text = btf
                    .enum_value("MOD_TEXT")
                    .and_then(|v| u64::try_from(v).ok())
                    .filter(|&v| v < count)
                    .ok_or_else(|| {
                        BtfError::NoEnumerator(
                            "MOD_TEXT (enum mod_mem_type) below MOD_MEM_NUM_TYPES".into(),
                        )
                    })?;
                let init_text = btf
                    .enum_value("MOD_INIT_TEXT")
                    .and_then(|v| u64::try_from(v).ok())
                    .filter(|&v| v < count);
                ModuleMemory::Typed {
                    mem,
                    count,
                    stride,
                    text,
                    init_text,
                    base: btf.member_offset("module_memory", "base")?,
                    size: btf.member_offset("module_memory", "size")?,
                }
            }
            Err(_) => ModuleMemory::Layouts {
                core: module("core_layout")?,
                init: module("init_layout")?,
                data: module("data_layout").ok(),
                base: btf.member_offset("module_layout", "base")?,
                size: btf.member_offset("module_layout", "size")?,
                text_size: btf.member_offset("module_layout", "text_size")?,
            },
        };
        Ok(ModuleLayout {
            list_links: ListLayout::from_btf(btf)?,
            size: btf.size_of("module")?,
            state: module("state")?,
            list: module("list")?,
            name: module("name")?,
            name_len: btf.member_size("module", "name")?.min(MAX_NAME),
            memory,
            states: ModuleStates {
                live: value("MODULE_STATE_LIVE")?,
                coming: value("MODULE_STATE_COMING")?,
                going: value("MODULE_STATE_GOING")?,
                unformed: value("MODULE_STATE_UNFORMED")?,
            },
            syms: module("syms")?,
            num_syms: module("num_syms")?,
            sections: module("sect_attrs")
                .ok()
                .zip(SectionLayout::from_btf(btf).ok()),
            symbol_form: SymbolForm::from_btf(btf).ok(),
            taints: module("taints").ok(),
            params: module("kp").ok().zip(module("num_kp").ok()),
            kset_entry: module("mkobj.kobj.entry").ok(),
        })
    }

    /// The span of a module read: every member the walk uses.
    pub(crate) fn span(&self) -> (u64, usize) {
        let mut members = vec![
            (self.state, 4),
            (self.list, self.list_links.len()),
            (self.name, self.name_len),
            (self.memory.text_base(), 8),
            (self.syms, 8),
            (self.num_syms, 4),
        ];
        members.extend(self.sections.map(|(at, _)| (at, 8)));
        members.extend(self.taints.map(|at| (at, 8)));
        members.extend(
            self.params
                .into_iter()
                .flat_map(|(kp, n)| [(kp, 8), (n, 4)]),
        );
        members.extend(self.kset_entry.map(|at| (at, self.list_links.len())));
        members.extend(self.memory.sizes().into_iter().map(|at| (at, 4)));
        let text = self.memory.text().into_iter();
        members.extend(text.flat_map(|(base, len)| [(base, 8), (len, 4)]));
        let start = members.iter().map(|m| m.0).min().unwrap_or(0);
        let end = members.iter().map(|m| m.0 + m.1).max().unwrap_or(0);
        (start, (end - start) as usize)
    }
}

/// Offsets of the module address tree (`mod_tree`, which
/// `__module_address` searches: a latched red-black tree of every module's
/// memory, kept apart from the `modules` list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ModTreeLayout {
    /// `mod_tree_root.root.tree[0].rb_node`: the first copy's root.
    pub(crate) root: u64,
    /// `mod_tree_node.node.node[0]`: the first copy's `rb_node` in a
    /// `mod_tree_node`.
    pub(crate) node: u64,
    /// `mod_tree_node.mod`.
    pub(crate) module: u64,
    pub(crate) rb: RbLayout,
}

impl ModTreeLayout {
    /// The offsets in `btf` (a kernel without `CONFIG_MODULES_TREE_LOOKUP`
    /// has no such tree).
    pub fn from_btf(btf: &Btf) -> Result<ModTreeLayout, BtfError> {
        Ok(ModTreeLayout {
            root: btf.member_offset("mod_tree_root", "root.tree[0].rb_node")?,
            node: btf.member_offset("mod_tree_node", "node.node[0]")?,
            module: btf.member_offset("mod_tree_node", "mod")?,
            rb: RbLayout::from_btf(btf)?,
        })
    }

    /// Bytes read of a `mod_tree_node`: its module pointer and the first
    /// copy's links.
    pub(crate) fn span(&self) -> usize {
        let links = self.node + self.rb.left.max(self.rb.right) + 8;
        (self.module + 8).max(links) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test guest's BTF cut down to what the walks ask about.
    const GUEST_BTF: &[u8] = include_bytes!("../../../fuzz/seeds/btf/debian12-6.1-walks.btf");

    #[test]
    fn a_6_1_kernel_keeps_its_modules_memory_in_core_and_init_layouts() {
        let btf = Btf::parse(GUEST_BTF).unwrap();
        let layout = ModuleLayout::from_btf(&btf).unwrap();
        let at = |path: &str| btf.member_offset("module", path).unwrap();
        assert_eq!(
            layout.memory,
            ModuleMemory::Layouts {
                core: at("core_layout"),
                init: at("init_layout"),
                data: None,
                base: 0,
                size: 8,
                text_size: at("core_layout.text_size") - at("core_layout"),
            }
        );
        assert_eq!(layout.memory.text_base(), at("core_layout.base"));
        assert_eq!(
            layout.memory.sizes(),
            [at("core_layout.size"), at("init_layout.size")]
        );
        // `MODULE_NAME_LEN`, 64 less a long.
        assert_eq!(layout.name_len, 56);
        let (start, len) = layout.span();
        assert!(start <= layout.state && layout.list + 16 <= start + len as u64);
    }
}
