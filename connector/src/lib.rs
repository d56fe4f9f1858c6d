//! The memflow connector plugin `leechcore`: LeechCore devices (FPGA boards,
//! memory images, live QEMU guests, remote agents) as memflow physical
//! memory, read through leechio's batched engine.
//!
//! This crate only turns memflow's arguments into a device and wires it to
//! memflow; everything else lives in `leechio`. No panic leaves the plugin.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

#[cfg(not(fuzzing))]
mod args;
/// The argument parser, for the fuzz target `plugin_args` only.
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod args;
mod descriptors;
mod os_args;
pub mod os_plugin;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use leechio::memflow::{read_memory_map_file, MemflowPhysical};
use leechio::{EngineConfig, LeechCore, Memory};
use memflow::cglue;
use memflow::prelude::v1::*;

/// The plugin's physical memory. Clones share the device, which closes
/// with the last clone.
#[derive(Clone)]
pub struct LeechCoreConnector {
    phys: MemflowPhysical,
    /// Held for its drop, with the last clone.
    _closing: Arc<Closing>,
}

/// Says, when the last clone of a connector goes, how many calls its
/// device served: what a memflow tool cost, in LeechCore's own count
/// (memflow's log at level info, `-vv` in its examples).
struct Closing {
    device: Arc<LeechCore>,
    name: String,
}

impl Drop for Closing {
    fn drop(&mut self) {
        log::info!(
            "leechcore: closing device `{}` after {} read calls and {} write calls",
            self.name,
            self.device.call_count(leechio::Call::ReadScatter),
            self.device.call_count(leechio::Call::WriteScatter)
        );
    }
}

cglue_impl_group!(LeechCoreConnector, ConnectorInstance, {});

/// Runs `f`, turning a panic into a memflow error of `origin` that names
/// the plugin and what it was doing.
fn guarded<T>(
    origin: ErrorOrigin,
    plugin: &str,
    what: &str,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(Error(origin, ErrorKind::Unknown)
            .log_error(format!("{plugin}: internal error in {what}")))
    })
}

/// [`guarded`] for the connector.
fn guarded_connector<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    guarded(ErrorOrigin::Connector, "leechcore", what, f)
}

impl PhysicalMemory for LeechCoreConnector {
    fn phys_read_raw_iter(&mut self, data: PhysicalReadMemOps) -> Result<()> {
        guarded_connector("a read", || self.phys.phys_read_raw_iter(data))
    }

    fn phys_write_raw_iter(&mut self, data: PhysicalWriteMemOps) -> Result<()> {
        guarded_connector("a write", || self.phys.phys_write_raw_iter(data))
    }

    fn metadata(&self) -> PhysicalMemoryMetadata {
        self.phys.metadata()
    }

    fn set_mem_map(&mut self, mem_map: &[PhysicalMemoryMapping]) {
        let _ = guarded_connector("set_mem_map", || {
            self.phys.set_mem_map(mem_map);
            Ok(())
        });
    }
}

/// Opens the device the arguments name (memflow's `create` for
/// `leechcore` calls it; see `descriptors.rs`).
pub fn create_connector(args: &ConnectorArgs) -> Result<LeechCoreConnector> {
    guarded_connector("create_connector", || open(args))
}

fn open(args: &ConnectorArgs) -> Result<LeechCoreConnector> {
    let config = |msg: String| {
        Error(ErrorOrigin::Connector, ErrorKind::Configuration)
            .log_error(format!("leechcore: {msg}"))
    };
    let settings = args::parse(args).map_err(config)?;
    let memmap = settings
        .memmap
        .as_deref()
        .map(read_memory_map_file)
        .transpose()
        .map_err(|e| config(e.to_string()))?;
    let device = LeechCore::open(&settings.device).map_err(|e| {
        let kind = match e {
            leechio::Error::Load(_) => ErrorKind::UnableToLoadLibrary,
            leechio::Error::InvalidConfig(_) => ErrorKind::Configuration,
            _ => ErrorKind::TargetNotFound,
        };
        Error(ErrorOrigin::Connector, kind).log_error(format!("leechcore: {e}"))
    })?;
    if let Some(map) = &memmap {
        device
            .set_memory_map(map)
            .map_err(|e| config(e.to_string()))?;
    }
    let info = device.info();
    log::info!(
        "leechcore: opened {} device `{}` with LeechCore {} from {} ({}, max address {:#x})",
        info.name,
        settings.device.device,
        info.version,
        info.library.display(),
        if info.read_only {
            "read-only"
        } else {
            "writable"
        },
        device.max_address()
    );
    let engine = EngineConfig {
        max_entries_per_call: settings.max_entries.unwrap_or(usize::MAX),
    };
    let device = Arc::new(device);
    let closing = Closing {
        device: device.clone(),
        name: settings.device.device.clone(),
    };
    let mem = Memory::with_config(device, engine);
    Ok(LeechCoreConnector {
        phys: MemflowPhysical::new(mem, memmap.is_some()),
        _closing: Arc::new(closing),
    })
}

/// The help text memflow shows for `leechcore`.
pub fn help() -> String {
    let mut text = String::from(
        "leechcore: physical memory through LeechCore (PCILeech FPGA boards, memory images, QEMU guests, remote agents)\n\n\
         usage: leechcore:DEVICE[:key=value,...]  or  leechcore::device=DEVICE[,key=value,...]\n\
         quote a device string that holds ':' or ',' — leechcore:\"file:///mem.raw\"\n\narguments:\n",
    );
    for (key, about) in args::KEYS {
        text.push_str(&format!("  {key:<12} {about}\n"));
    }
    text.push_str(
        "\nexamples:\n  leechcore:fpga\n  leechcore:\"file:///tmp/memory.raw\"\n  \
         leechcore:\"qemu://shm=guest-ram,qmp=/tmp/qmp.sock\":memmap=/tmp/guest.memmap\n  \
         leechcore::device=fpga,remote=\"rpc://insecure:10.0.0.2\",verbosity=1\n",
    );
    text
}

/// What can be opened without hardware: running QEMU guests with their RAM
/// in /dev/shm and a QMP socket.
pub fn target_list() -> Result<Vec<TargetInfo>> {
    guarded_connector("target_list", || {
        Ok(leechio::backend::leechcore::qemu::guests::qemu_guests()
            .iter()
            .flat_map(|g| g.device_strings())
            .map(|name| TargetInfo { name: name.into() })
            .collect())
    })
}
