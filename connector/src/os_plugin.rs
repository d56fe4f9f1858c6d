//! The memflow OS plugin `linux_btf`: a Linux kernel found in any
//! connector's physical memory with no profile (its own BTF and kallsyms
//! tell the layouts), as memflow's `Os` ([`leechio::memflow::linux`]).
//! This file only reads the arguments and wires the OS to memflow.

use leechio::memflow::linux::LinuxOs;
use memflow::prelude::v1::*;

use crate::{guarded, os_args};

/// The plugin's name, as memflow's chains give it (`-o linux_btf`).
pub const NAME: &str = "linux_btf";

/// Finds the kernel in the connector's memory (memflow's `create` for
/// `linux_btf` calls it; see `descriptors.rs`).
pub fn create_os(
    args: &OsArgs,
    connector: Option<ConnectorInstanceArcBox<'static>>,
    lib: LibArc,
) -> Result<OsInstanceArcBox<'static>> {
    guarded(ErrorOrigin::OsLayer, NAME, "create_os", move || {
        open(args, connector, lib)
    })
}

fn open(
    args: &OsArgs,
    connector: Option<ConnectorInstanceArcBox<'static>>,
    lib: LibArc,
) -> Result<OsInstanceArcBox<'static>> {
    let hints = os_args::parse(args).map_err(|msg| {
        Error(ErrorOrigin::OsLayer, ErrorKind::Configuration).log_error(format!("{NAME}: {msg}"))
    })?;
    let connector = connector.ok_or_else(|| {
        Error(ErrorOrigin::OsLayer, ErrorKind::Configuration).log_error(format!(
            "{NAME}: no connector to read the kernel from: chain it after one, e.g. -c leechcore:\"file:///mem.raw\" -o {NAME}"
        ))
    })?;
    let os = LinuxOs::new(connector, &hints).map_err(|e| {
        Error(ErrorOrigin::OsLayer, ErrorKind::NotFound).log_error(format!("{NAME}: {e}"))
    })?;
    let kernel = os.kernel();
    log::info!(
        "{NAME}: {} at {:#x} ({} paging), from {}",
        kernel.banner(),
        kernel.virtual_base(),
        kernel.paging(),
        match kernel.source() {
            leechio::linux::Source::Cache => "the kernel cache, checked",
            leechio::linux::Source::Search => "a search of memory",
        }
    );
    Ok(memflow::plugins::os::create_instance(os, lib, args))
}

/// The help text memflow shows for `linux_btf`.
pub fn help() -> String {
    let mut text = format!(
        "{NAME}: a Linux x86-64 kernel found with no profile (its BTF and kallsyms, read from \
         memory, give every layout), over any connector\n\n\
         usage: -c CONNECTOR -o {NAME}[:key=value,...]\n\
         processes (pid, name, command line, executable, state), their memory, maps and \
         mapped ELF files; the kernel image and its loaded modules, kallsyms as the kernel's \
         exports\n\narguments:\n"
    );
    for (key, about) in os_args::KEYS {
        text.push_str(&format!("  {key:<13} {about}\n"));
    }
    text.push_str(&format!(
        "\nexamples:\n  -c leechcore:\"file:///tmp/memory.raw\"::cache=false -o {NAME}\n  \
         -c leechcore:fpga -o {NAME}:kernel_cache=off\n  \
         -c qemu:guest -o {NAME}:dtb=0x2a10000\n"
    ));
    text
}
