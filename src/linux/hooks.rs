//! Hooks: the kernel's function pointers a rootkit rewrites to run its
//! own code, checked against where code may be. Each entry of the
//! system-call tables (`sys_call_table`, and `ia32_sys_call_table` where
//! the kernel runs 32-bit processes; from 6.9 the dispatcher is a switch
//! and the table is kept for tracing, so a rewritten entry there says
//! less) and each callback on the ftrace list (`ftrace_ops_list`, its
//! `func`s, up to the `ftrace_ops_list_end` sentinel) must point into
//! the kernel's text (`_stext` to `_etext`) or a listed module's code;
//! one that does not is reported, with the symbol or module it points
//! into where one is known.
//!
//! What is read, all at once: the tables (`NR_syscalls` entries, from
//! BTF where the kernel says it; else up to the next symbol, which takes
//! a read of the kernel's whole symbol table first), the ftrace list (a
//! call per callback), and the module list and address tree (a hidden
//! module's code is named so). The symbol table is read to name a pointer
//! only when one points elsewhere into the kernel's image.

use std::collections::BTreeSet;
use std::fmt;

use futures::join;

use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::modules::ModuleTree;
use crate::linux::structures::StructureFailure;
use crate::linux::{Kernel, Module};

#[cfg(test)]
mod tests;

/// The system-call tables, native first.
const TABLES: [&str; 2] = ["sys_call_table", "ia32_sys_call_table"];
/// The ftrace list's head (a pointer) and its sentinel (`ftrace_list_end`;
/// the other name is looked for too).
const FTRACE_LIST: &str = "ftrace_ops_list";
const FTRACE_ENDS: [&str; 2] = ["ftrace_list_end", "ftrace_ops_list_end"];
/// The switches that dispatch system calls from 6.9 (and in stable
/// kernels they were brought back to): the tables are then only read by
/// tracing.
const SWITCHES: [&str; 2] = ["x64_sys_call", "ia32_sys_call"];
/// Where the kernel's text starts and ends.
const TEXT: [&str; 2] = ["_stext", "_etext"];
/// Every symbol the hooks look up (see `find`'s `SYMBOLS`).
pub(crate) const SYMBOLS: [&str; 9] = [
    TEXT[0],
    TEXT[1],
    TABLES[0],
    TABLES[1],
    SWITCHES[0],
    SWITCHES[1],
    FTRACE_LIST,
    FTRACE_ENDS[0],
    FTRACE_ENDS[1],
];
/// The most entries read of a table (x86-64 has under 500 system calls).
const MAX_SYSCALLS: u64 = 2048;
/// The most ftrace callbacks followed.
const MAX_OPS: usize = 4096;

/// Where a hook was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum HookTable {
    /// `sys_call_table`: an entry a system call.
    Syscalls,
    /// `ia32_sys_call_table`: the 32-bit system calls.
    Ia32Syscalls,
    /// `ftrace_ops_list`: a callback of function tracing.
    Ftrace,
}

impl fmt::Display for HookTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HookTable::Syscalls => TABLES[0],
            HookTable::Ia32Syscalls => TABLES[1],
            HookTable::Ftrace => FTRACE_LIST,
        })
    }
}

/// A pointer that points outside the kernel's text and every listed
/// module's code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    pub table: HookTable,
    /// The system call's number, or the callback's place on the list.
    pub index: usize,
    /// Where the pointer is (the table's entry, or the `ftrace_ops`).
    pub slot: u64,
    /// Where it points.
    pub target: u64,
    /// What lies there: `symbol+0xoffset` in the kernel image, a hidden
    /// module, a module outside its code; `None` when nothing known does.
    pub points_into: Option<String>,
}

/// The hooks checked, and those that point outside.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hooks {
    /// Each table read, and its entries checked.
    pub checked: Vec<(HookTable, usize)>,
    /// The pointers outside the kernel's text and the listed modules' code.
    pub outside: Vec<Hook>,
    /// Why a table was not read (the kernel has none), each once.
    pub notes: Vec<String>,
    /// What could not be read.
    pub failed: Vec<StructureFailure>,
    /// Nodes of the module address tree read (a module has one for each
    /// kind of its memory: one or two before 6.4, up to seven after).
    pub module_tree_nodes: usize,
    /// Levels of that tree read, a device call each: the hooks cost the
    /// deeper of these and one more (the tree's root), and the module
    /// list's calls (its head and one per two modules).
    pub module_tree_levels: usize,
}

impl Kernel {
    /// The system-call tables and ftrace callbacks checked (blocking; see
    /// [`Kernel::hooks_async`]).
    pub fn hooks(&self) -> Hooks {
        self.memory().block_on(self.hooks_async())
    }

    /// The system-call tables and ftrace callbacks checked: see the
    /// module's documentation.
    pub async fn hooks_async(&self) -> Hooks {
        let mut hooks = Hooks::default();
        let (Some(stext), Some(etext)) = (self.symbol(TEXT[0]), self.symbol(TEXT[1])) else {
            let why = "kallsyms has no _stext or _etext: the kernel's text is not known";
            hooks.failed.push(StructureFailure::new(0, why));
            return hooks;
        };
        let kmem = self.kernel_memory();
        let tables = async {
            let at = [HookTable::Syscalls, HookTable::Ia32Syscalls]
                .map(|t| (t, self.symbol(TABLES[t as usize])));
            let nr = self.offsets.hooks.nr_syscalls;
            let from_btf = |t: HookTable| (t == HookTable::Syscalls).then_some(nr).flatten();
            // A length BTF does not give is up to the next symbol.
            let symbols = match at
                .iter()
                .any(|&(t, a)| a.is_some() && from_btf(t).is_none())
            {
                true => Some(self.sorted_symbols().await),
                false => None,
            };
            let counts = at.map(|(t, a)| {
                let a = a?;
                let count = match (from_btf(t), &symbols) {
                    (Some(n), _) => Ok((n, false)),
                    (None, Some(Ok(symbols))) => {
                        let next = symbols.partition_point(|&(s, _)| s <= a);
                        let end = symbols.get(next).map_or(a, |&(s, _)| s);
                        Ok(((end - a) / 8, true))
                    }
                    (None, Some(Err(why))) => Err(why.clone()),
                    (None, None) => Err("no length".to_string()),
                };
                Some((t, a, count.map(|(n, trim)| (n.min(MAX_SYSCALLS), trim))))
            });
            let reads = counts.iter().map(|c| async {
                let (t, a, count) = c.clone()?;
                let read = match count {
                    Ok((n, trim)) => kmem.read_vec(a, (n * 8) as usize).await.map(|b| (b, trim)),
                    Err(why) => Err(format!(
                        "its length is not known: the kernel's symbols: {why}"
                    )),
                };
                Some((t, a, read))
            });
            let read = futures::future::join_all(reads).await;
            (read, symbols.and_then(Result::ok))
        };
        let ftrace = async {
            let end = FTRACE_ENDS.iter().find_map(|name| self.symbol(name));
            match (self.offsets.hooks.ftrace, self.symbol(FTRACE_LIST), end) {
                (Some(layout), Some(head), Some(end)) => {
                    Some(ftrace_callbacks(&kmem, layout, head, end).await)
                }
                _ => None,
            }
        };
        let ((tables, symbols), (listed, hidden, failed, tree), ftrace) =
            join!(tables, self.known_modules(), ftrace);
        hooks.failed = failed;
        hooks.module_tree_nodes = tree.nodes;
        hooks.module_tree_levels = tree.levels;
        let inside = |target: u64| {
            (stext..etext).contains(&target)
                || listed
                    .iter()
                    .flat_map(|m| &m.text)
                    .any(|&(base, len)| (base..base.saturating_add(len)).contains(&target))
        };
        let unnamed = |_: u64| None;
        for (i, read) in tables.into_iter().enumerate() {
            let table = [HookTable::Syscalls, HookTable::Ia32Syscalls][i];
            let switch = SWITCHES[i];
            let Some((_, at, read)) = read else {
                let why = match self.symbol(switch).is_some() {
                    true => format!("no {table} in kallsyms: the kernel dispatches those system calls by a switch ({switch}), which holds no pointer to check"),
                    false => format!("no {table} in kallsyms: those system calls are not checked (a kernel without them)"),
                };
                hooks.notes.push(why);
                continue;
            };
            let (bytes, trim) = match read {
                Ok(read) => read,
                Err(why) => {
                    let why = format!("{table}: {why}");
                    hooks.failed.push(StructureFailure::new(at, why));
                    continue;
                }
            };
            let entries = table_entries(&bytes, trim);
            hooks.checked.push((table, entries.len()));
            if self.symbol(switch).is_some() {
                hooks.notes.push(format!(
                    "the kernel dispatches by {switch}: {table} is kept for tracing, and a pointer rewritten there runs only where it is read"
                ));
            }
            let slots = entries
                .iter()
                .enumerate()
                .map(|(i, &t)| (i, at + 8 * i as u64, t));
            hooks
                .outside
                .extend(outside(table, slots, &inside, &unnamed));
        }
        match ftrace {
            Some((callbacks, failed)) => {
                hooks.checked.push((HookTable::Ftrace, callbacks.len()));
                hooks.failed.extend(failed);
                let slots = callbacks
                    .into_iter()
                    .enumerate()
                    .map(|(i, (slot, t))| (i, slot, t));
                hooks.outside.extend(outside(HookTable::Ftrace, slots, &inside, &unnamed));
            }
            None => hooks.notes.push(
                "no ftrace_ops_list and ftrace_list_end in kallsyms (or BTF has no ftrace_ops): a kernel without function tracing; no ftrace callback is checked".into(),
            ),
        }
        self.name_hooks(&mut hooks.outside, symbols, &listed, &hidden)
            .await;
        hooks
    }

    /// Every symbol of the kernel's table by address.
    async fn sorted_symbols(&self) -> Result<Vec<(u64, String)>, String> {
        let symbols = self.kallsyms_async().await?;
        let mut sorted: Vec<(u64, String)> = symbols.into_iter().map(|(n, a)| (a, n)).collect();
        sorted.sort_unstable();
        Ok(sorted)
    }

    /// Names what each hook points into; the kernel's symbols (`symbols`,
    /// or read now) only when one points into its image.
    async fn name_hooks(
        &self,
        hooks: &mut [Hook],
        symbols: Option<Vec<(u64, String)>>,
        listed: &[Module],
        hidden: &[Module],
    ) {
        let in_image = |target: u64| {
            self.segments()
                .iter()
                .any(|s| (s.va..s.va + s.len).contains(&target))
        };
        let symbols = match symbols {
            Some(symbols) => symbols,
            None if hooks.iter().any(|h| in_image(h.target)) => {
                self.sorted_symbols().await.unwrap_or_default()
            }
            None => Vec::new(),
        };
        for hook in hooks {
            hook.points_into = self.points_into(hook.target, &symbols, listed, hidden);
        }
    }

    /// The modules on the list, and those only the address tree has
    /// (hidden), with what failed.
    async fn known_modules(&self) -> (Vec<Module>, Vec<Module>, Vec<StructureFailure>, ModuleTree) {
        let (list, tree) = join!(self.modules_async(), self.module_tree());
        let mut failed = list.failed;
        let listed: BTreeSet<u64> = list.modules.iter().map(|m| m.address).collect();
        let tree = tree.unwrap_or_default();
        let unlisted: Vec<u64> = tree.modules.difference(&listed).copied().collect();
        let hidden = match (&self.offsets.modules, unlisted.is_empty()) {
            (Ok(layout), false) => {
                let kmem = self.kernel_memory();
                let (hidden, why) =
                    crate::linux::modules::read_hidden(&kmem, layout, &unlisted).await;
                failed.extend(why);
                hidden
            }
            _ => Vec::new(),
        };
        (list.modules, hidden, failed, tree)
    }

    /// What lies at `target`, when something known does: `symbols` by
    /// address.
    fn points_into(
        &self,
        target: u64,
        symbols: &[(u64, String)],
        listed: &[Module],
        hidden: &[Module],
    ) -> Option<String> {
        let holds = |m: &Module| {
            m.text
                .iter()
                .chain(std::iter::once(&(m.base, m.size)))
                .any(|&(base, len)| (base..base.saturating_add(len)).contains(&target))
        };
        if let Some(m) = hidden.iter().find(|m| holds(m)) {
            return Some(format!("hidden module {}", m.name));
        }
        if let Some(m) = listed.iter().find(|m| holds(m)) {
            return Some(format!("module {}, outside its code", m.name));
        }
        let in_image = self
            .segments()
            .iter()
            .any(|s| (s.va..s.va + s.len).contains(&target));
        if !in_image {
            return None;
        }
        let below = symbols.partition_point(|(at, _)| *at <= target);
        let (at, name) = symbols.get(below.checked_sub(1)?)?;
        Some(format!("{name}+{:#x}", target - at))
    }
}

/// The entries of a system-call table read whole; when its length was
/// taken up to the next symbol, the zeros that pad it after its last
/// entry are left out.
fn table_entries(bytes: &[u8], trim: bool) -> Vec<u64> {
    let mut entries: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|w| w.u64_at(0).unwrap_or(0))
        .collect();
    while trim && entries.last() == Some(&0) {
        entries.pop();
    }
    entries
}

/// The pointers of `table` (each its index, where it is and where it
/// points) that `inside` does not hold, each named by `name`.
fn outside(
    table: HookTable,
    pointers: impl Iterator<Item = (usize, u64, u64)>,
    inside: &impl Fn(u64) -> bool,
    name: &impl Fn(u64) -> Option<String>,
) -> Vec<Hook> {
    pointers
        .filter(|&(_, _, target)| !inside(target))
        .map(|(index, slot, target)| Hook {
            table,
            index,
            slot,
            target,
            points_into: name(target),
        })
        .collect()
}

/// Each callback on the ftrace list whose head pointer is at `head`, up to
/// the sentinel at `end`: where its `ftrace_ops` is and its `func`; what
/// cut the list.
pub(crate) async fn ftrace_callbacks(
    kmem: &KernelMemory<'_>,
    (func, next): (u64, u64),
    head: u64,
    end: u64,
) -> (Vec<(u64, u64)>, Vec<StructureFailure>) {
    let mut found = Vec::new();
    let mut failed = Vec::new();
    let span = (func.max(next) + 8) as usize;
    let mut at = match kmem.read_vec(head, 8).await {
        Ok(bytes) => bytes.u64_at(0).unwrap_or(0),
        Err(why) => {
            return (
                found,
                vec![StructureFailure::new(head, format!("{FTRACE_LIST}: {why}"))],
            )
        }
    };
    let mut seen = BTreeSet::new();
    while at != end {
        let why = if at < kmem.kernel_half() {
            Some(format!(
                "an ftrace callback's link is {at:#x}, no kernel address; the list is cut there"
            ))
        } else if !seen.insert(at) {
            Some("the ftrace list loops back here; cut".to_string())
        } else if found.len() == MAX_OPS {
            Some(format!("more than {MAX_OPS} ftrace callbacks; cut"))
        } else {
            None
        };
        if let Some(why) = why {
            failed.push(StructureFailure::new(at, why));
            break;
        }
        match kmem.read_vec(at, span).await {
            Ok(bytes) => {
                found.push((at, bytes.u64_at(func).unwrap_or(0)));
                at = bytes.u64_at(next).unwrap_or(0);
            }
            Err(why) => {
                failed.push(StructureFailure::new(
                    at,
                    format!("an ftrace callback: {why}"),
                ));
                break;
            }
        }
    }
    (found, failed)
}
