//! What a loaded module exports (`syms`, `num_syms`: its `EXPORT_SYMBOL`s)
//! and where its sections are (`sect_attrs`, what
//! `/sys/module/NAME/sections` shows), each name read where the kernel
//! keeps it. Every offset comes from BTF.

use crate::linux::btf::{Btf, BtfError};
use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::Kernel;
use crate::Memory;

use super::{c_string, KernelModule};

/// Longest name of a symbol read (`KSYM_NAME_LEN`).
const KSYM_NAME_LEN: usize = 512;
/// Most exported symbols of one module read.
const MAX_SYMS: u64 = 1 << 20;
/// Most sections of one module read.
const MAX_SECTIONS: u64 = 1 << 12;

/// How an exported symbol is kept (`struct kernel_symbol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SymbolForm {
    /// `value_offset` and `name_offset`, each relative to itself
    /// (`CONFIG_HAVE_ARCH_PREL32_RELOCATIONS`).
    Relative { value: u64, name: u64, size: u64 },
    /// `value` and `name` pointers.
    Absolute { value: u64, name: u64, size: u64 },
}

impl Kernel {
    /// The symbols `module` exports, each with its address, or why they
    /// cannot be read (blocking).
    pub fn module_exports(
        &self,
        mem: &Memory,
        module: &KernelModule,
    ) -> Result<Vec<(String, u64)>, String> {
        let form = symbol_form(self.btf())?;
        let kmem = self.kernel_memory(mem);
        mem.block_on(exports(&kmem, form, module))
    }

    /// The sections of `module` (`/sys/module/NAME/sections`), each with
    /// its address, or why they cannot be read (blocking). The kernel
    /// keeps no section sizes.
    pub fn module_sections(
        &self,
        mem: &Memory,
        module: &KernelModule,
    ) -> Result<Vec<(String, u64)>, String> {
        let kmem = self.kernel_memory(mem);
        mem.block_on(sections(&kmem, self.btf(), module))
    }
}

/// How `btf`'s kernel keeps exported symbols.
pub(super) fn symbol_form(btf: &Btf) -> Result<SymbolForm, String> {
    let k = |m: &str| btf.member_offset("kernel_symbol", m);
    let size = btf.size_of("kernel_symbol").map_err(|e| e.to_string())?;
    match (k("value_offset"), k("name_offset"), k("value"), k("name")) {
        (Ok(value), Ok(name), _, _) => Ok(SymbolForm::Relative { value, name, size }),
        (_, _, Ok(value), Ok(name)) => Ok(SymbolForm::Absolute { value, name, size }),
        _ => Err("struct kernel_symbol has neither value_offset nor value".into()),
    }
}

/// `KSYM_NAME_LEN` bytes at each of `addresses`, as C strings: what is
/// readable of each (a name may end near an unmapped page).
async fn names(kmem: &KernelMemory<'_>, addresses: &[u64]) -> Vec<Option<String>> {
    futures::future::join_all(addresses.iter().map(|&at| async move {
        let mut buf = vec![0u8; KSYM_NAME_LEN];
        let read = match kmem.physical(at) {
            Some(pa) => kmem.mem.read(pa, &mut buf).await,
            None => kmem.space.read(at, &mut buf).await,
        };
        if let Err(e) = read {
            e.zero_fill(&mut buf);
            // Bytes after the first failure are not the name's.
            let first = e.failed.first().map_or(buf.len(), |f| f.offset);
            buf.truncate(first);
            buf.push(0);
        }
        c_string(&buf)
    }))
    .await
}

/// The symbols `module` exports.
pub(super) async fn exports(
    kmem: &KernelMemory<'_>,
    form: SymbolForm,
    module: &KernelModule,
) -> Result<Vec<(String, u64)>, String> {
    let (syms, count) = module.syms;
    if count == 0 {
        return Ok(Vec::new());
    }
    if count > MAX_SYMS {
        return Err(format!("{count} exported symbols: more than {MAX_SYMS}"));
    }
    let (value, name, size) = match form {
        SymbolForm::Relative { value, name, size } | SymbolForm::Absolute { value, name, size } => {
            (value, name, size)
        }
    };
    let bytes = kmem
        .read_vec(syms, (count * size) as usize)
        .await
        .map_err(|why| format!("its symbol table: {why}"))?;
    let mut entries = Vec::new();
    for i in 0..count {
        let at = i * size;
        let entry = syms + at;
        let (v, n) = match form {
            SymbolForm::Relative { .. } => {
                let rel = |o: u64| bytes.u32_at(at + o).map(|r| r as i32 as i64 as u64);
                (
                    (entry + value).wrapping_add(rel(value).unwrap_or(0)),
                    (entry + name).wrapping_add(rel(name).unwrap_or(0)),
                )
            }
            SymbolForm::Absolute { .. } => (
                bytes.u64_at(at + value).unwrap_or(0),
                bytes.u64_at(at + name).unwrap_or(0),
            ),
        };
        entries.push((v, n));
    }
    let names = names(kmem, &entries.iter().map(|e| e.1).collect::<Vec<_>>()).await;
    Ok(entries
        .into_iter()
        .zip(names)
        .filter_map(|((value, _), name)| Some((name?, value)))
        .collect())
}

/// The sections of `module` from its `sect_attrs`.
pub(super) async fn sections(
    kmem: &KernelMemory<'_>,
    btf: &Btf,
    module: &KernelModule,
) -> Result<Vec<(String, u64)>, String> {
    if module.sections == 0 {
        return Ok(Vec::new());
    }
    let e = |r: Result<u64, BtfError>| r.map_err(|e| e.to_string());
    let count_at = e(btf.member_offset("module_sect_attrs", "nsections"))?;
    let attrs = e(btf.member_offset("module_sect_attrs", "attrs"))?;
    let size = e(btf.size_of("module_sect_attr"))?;
    let address = e(btf.member_offset("module_sect_attr", "address"))?;
    let name = e(btf
        .member_offset("module_sect_attr", "battr.attr.name")
        .or_else(|_| btf.member_offset("module_sect_attr", "name")))?;
    let count = kmem
        .read_vec(module.sections + count_at, 4)
        .await?
        .u32_at(0)
        .unwrap_or(0);
    let count = u64::from(count);
    if count > MAX_SECTIONS {
        return Err(format!("{count} sections: more than {MAX_SECTIONS}"));
    }
    let table = kmem
        .read_vec(module.sections + attrs, (count * size) as usize)
        .await?;
    let entries: Vec<(u64, u64)> = (0..count)
        .map(|i| {
            let at = i * size;
            (
                table.u64_at(at + address).unwrap_or(0),
                table.u64_at(at + name).unwrap_or(0),
            )
        })
        .collect();
    let names = names(kmem, &entries.iter().map(|e| e.1).collect::<Vec<_>>()).await;
    Ok(entries
        .into_iter()
        .zip(names)
        .filter_map(|((address, _), name)| Some((name?, address)))
        .collect())
}
