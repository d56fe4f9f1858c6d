//! The kernel's modules as memflow's: the kernel image first (the primary
//! module, whose exports are kallsyms), then every loaded module of the
//! kernel's list, with the symbols it exports and its sections where the
//! kernel keeps them.

use memflow::error::{ErrorKind, Result};
use memflow::os::{
    AddressCallback, ExportCallback, ExportInfo, ImportCallback, ModuleInfo, ModuleInfoCallback,
    SectionCallback, SectionInfo,
};
use memflow::types::{umem, Address};

use super::{os_error, x86_64, Shared};
use crate::linux::Module;

/// The kernel image's name (it has no path the kernel knows).
const KERNEL_NAME: &str = "vmlinux";
/// The kernel image's sections, as the symbols around them name them.
const KERNEL_SECTIONS: [(&str, &str, &str); 5] = [
    (".text", "_stext", "_etext"),
    (".rodata", "__start_rodata", "__end_rodata"),
    (".data", "_sdata", "_edata"),
    (".init", "__init_begin", "__init_end"),
    (".bss", "__bss_start", "__bss_stop"),
];

/// The kernel image as a module: `_text` to the end of its mapping.
pub(super) fn kernel_image(shared: &Shared) -> ModuleInfo {
    let kernel = &shared.kernel;
    let base = kernel.virtual_base();
    let end = kernel.segments().last().map_or(base, |s| s.va + s.len);
    ModuleInfo {
        address: Address::from(base),
        parent_process: Address::invalid(),
        base: Address::from(base),
        size: (end - base) as umem,
        name: KERNEL_NAME.into(),
        path: "".into(),
        arch: x86_64(kernel.paging()),
    }
}

/// A loaded module as memflow's: its `struct module` is its address.
fn module_info(shared: &Shared, m: &Module) -> ModuleInfo {
    ModuleInfo {
        address: Address::from(m.address),
        parent_process: Address::invalid(),
        base: Address::from(m.base),
        size: m.size as umem,
        name: m.name.as_str().into(),
        // The kernel keeps no file name of a module.
        path: "".into(),
        arch: x86_64(shared.kernel.paging()),
    }
}

/// The loaded modules, each failure of the walk logged.
fn loaded(shared: &Shared) -> Vec<Module> {
    let list = shared.kernel.modules();
    for failure in &list.failed {
        log::info!("linux_btf: module list: {failure}");
    }
    list.modules
}

pub(super) fn address_list(shared: &Shared, mut callback: AddressCallback) -> Result<()> {
    if !callback.call(kernel_image(shared).address) {
        return Ok(());
    }
    for m in loaded(shared) {
        if !callback.call(Address::from(m.address)) {
            break;
        }
    }
    Ok(())
}

pub(super) fn list(shared: &Shared, mut callback: ModuleInfoCallback) -> Result<()> {
    if !callback.call(kernel_image(shared)) {
        return Ok(());
    }
    for m in loaded(shared) {
        if !callback.call(module_info(shared, &m)) {
            break;
        }
    }
    Ok(())
}

/// The loaded module whose `struct module` is at `address`.
fn module_at(shared: &Shared, address: Address) -> Result<Module> {
    loaded(shared)
        .into_iter()
        .find(|m| Address::from(m.address) == address)
        .ok_or_else(|| {
            os_error(
                ErrorKind::ModuleNotFound,
                format!("linux_btf: no loaded module is at {address:x}"),
            )
        })
}

pub(super) fn by_address(shared: &Shared, address: Address) -> Result<ModuleInfo> {
    let image = kernel_image(shared);
    if address == image.address {
        return Ok(image);
    }
    module_at(shared, address).map(|m| module_info(shared, &m))
}

/// Neither the kernel nor a module keeps what it imported: a module's
/// undefined symbols are resolved when it loads and not kept.
pub(super) fn imports(
    _shared: &Shared,
    _info: &ModuleInfo,
    _callback: ImportCallback,
) -> Result<()> {
    Ok(())
}

/// The kernel's own symbol table (kallsyms), read once and kept.
fn kallsyms(shared: &Shared) -> Result<&[(String, u64)]> {
    shared
        .kallsyms
        .get_or_init(|| shared.kernel.kallsyms())
        .as_deref()
        .map_err(|why| {
            os_error(
                ErrorKind::ExportNotFound,
                format!("linux_btf: kallsyms cannot be read: {why}"),
            )
        })
}

/// The kernel's: every symbol of kallsyms; a module's: the symbols it
/// exports (`EXPORT_SYMBOL`). Offsets count from the module's base
/// (wrapping below it: per-CPU symbols of the kernel sit at small
/// addresses).
pub(super) fn exports(
    shared: &Shared,
    info: &ModuleInfo,
    mut callback: ExportCallback,
) -> Result<()> {
    let base = info.base.to_umem();
    let mut give = |name: &str, address: u64| {
        callback.call(ExportInfo {
            name: name.into(),
            offset: address.wrapping_sub(base) as umem,
        })
    };
    if info.address == kernel_image(shared).address {
        for (name, address) in kallsyms(shared)? {
            if !give(name, *address) {
                break;
            }
        }
        return Ok(());
    }
    let module = module_at(shared, info.address)?;
    let exports = shared.kernel.module_exports(&module).map_err(|why| {
        os_error(
            ErrorKind::ExportNotFound,
            format!("linux_btf: exports of module {}: {why}", module.name),
        )
    })?;
    for (name, address) in exports {
        if !give(&name, address) {
            break;
        }
    }
    Ok(())
}

/// The kernel's sections from the symbols that bound them; a module's
/// from `/sys/module/NAME/sections` (the kernel keeps no sizes: 0).
pub(super) fn sections(
    shared: &Shared,
    info: &ModuleInfo,
    mut callback: SectionCallback,
) -> Result<()> {
    if info.address == kernel_image(shared).address {
        let symbols = kallsyms(shared)?;
        let find = |name: &str| symbols.iter().find(|(n, _)| n == name).map(|s| s.1);
        for (section, start, end) in KERNEL_SECTIONS {
            let (Some(start), Some(end)) = (find(start), find(end)) else {
                continue;
            };
            if end >= start
                && !callback.call(SectionInfo {
                    name: section.into(),
                    base: Address::from(start),
                    size: (end - start) as umem,
                })
            {
                break;
            }
        }
        return Ok(());
    }
    let module = module_at(shared, info.address)?;
    let sections = shared.kernel.module_sections(&module).map_err(|why| {
        os_error(
            ErrorKind::SectionNotFound,
            format!("linux_btf: sections of module {}: {why}", module.name),
        )
    })?;
    for (name, address) in sections {
        if !callback.call(SectionInfo {
            name: name.as_str().into(),
            base: Address::from(address),
            size: 0,
        }) {
            break;
        }
    }
    Ok(())
}
