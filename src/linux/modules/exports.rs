//! What a loaded module exports (`syms`, `num_syms`: its `EXPORT_SYMBOL`s)
//! and where its sections are (`sect_attrs`, what
//! `/sys/module/NAME/sections` shows), each name read where the kernel
//! keeps it. Every offset comes from BTF.

use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::{SectionLayout, SymbolForm};
use crate::linux::Kernel;

use super::{c_string, Module};

/// Longest name of a symbol read (`KSYM_NAME_LEN`).
const KSYM_NAME_LEN: usize = 512;
/// Most exported symbols of one module read (the largest modules export
/// a few thousand): with a name buffer each, 32 MiB at most.
const MAX_SYMS: u64 = 1 << 16;
/// Most sections of one module read.
const MAX_SECTIONS: u64 = 1 << 12;

impl Kernel {
    /// The symbols `module` exports, each with its address, or why they
    /// cannot be read (blocking; see [`Kernel::module_exports_async`]).
    pub fn module_exports(&self, module: &Module) -> Result<Vec<(String, u64)>, String> {
        self.memory().block_on(self.module_exports_async(module))
    }

    /// The symbols `module` exports (its `syms`), each with its address:
    /// the table in one read, then every name in one batch.
    pub async fn module_exports_async(
        &self,
        module: &Module,
    ) -> Result<Vec<(String, u64)>, String> {
        let layout = self.offsets.modules.as_ref().map_err(|e| e.to_string())?;
        let form = layout
            .symbol_form
            .ok_or("the kernel's BTF has no struct kernel_symbol")?;
        exports(&self.kernel_memory(), form, module).await
    }

    /// The sections of `module` (`/sys/module/NAME/sections`), each with
    /// its address, or why they cannot be read (blocking; see
    /// [`Kernel::module_sections_async`]). The kernel keeps no section
    /// sizes.
    pub fn module_sections(&self, module: &Module) -> Result<Vec<(String, u64)>, String> {
        self.memory().block_on(self.module_sections_async(module))
    }

    /// The sections of `module`: their count, the table, then every name
    /// in one batch.
    pub async fn module_sections_async(
        &self,
        module: &Module,
    ) -> Result<Vec<(String, u64)>, String> {
        let layout = self.offsets.modules.as_ref().map_err(|e| e.to_string())?;
        let (_, sections) = layout
            .sections
            .ok_or("the kernel's BTF has no module sections (module_sect_attrs)")?;
        sections_of(&self.kernel_memory(), &sections, module).await
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
    module: &Module,
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
    // The table lies in the module's own memory.
    if count * size > module.size {
        return Err(format!(
            "{count} exported symbols of {size} bytes: more than the module's {} bytes",
            module.size
        ));
    }
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
pub(super) async fn sections_of(
    kmem: &KernelMemory<'_>,
    layout: &SectionLayout,
    module: &Module,
) -> Result<Vec<(String, u64)>, String> {
    if module.sections == 0 {
        return Ok(Vec::new());
    }
    let SectionLayout {
        count: count_at,
        attrs,
        size,
        address,
        name,
    } = *layout;
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
