//! Opening the device the options name, for every command alike, and
//! telling a device that is gone from one that failed a read.

use std::sync::Arc;

use leechio::{DeviceConfig, LeechCore, Memory, PageError, Verbosity};

use crate::{Cli, Failure};

/// How to open the device the options name: `--device`, `--remote`,
/// `--lib` and `-v`, for every command alike.
pub fn device_config(cli: &Cli) -> Result<DeviceConfig, Failure> {
    let device = cli.device.clone().ok_or_else(|| {
        Failure(
            "no device: give --device or set LEECHIO_DEVICE (e.g. --device fpga, --device file:///mem.raw)"
                .into(),
        )
    })?;
    Ok(config_of(cli, device, cli.remote.clone()))
}

/// `device` (and `remote`) opened with the other settings of `cli`.
pub fn config_of(cli: &Cli, device: String, remote: Option<String>) -> DeviceConfig {
    DeviceConfig {
        device,
        remote,
        library: cli.lib.clone(),
        verbosity: Verbosity::from_level(cli.verbose),
        max_address: None,
        timeout: cli.timeout,
    }
}

/// The engine over the device the options name.
pub fn open(cli: &Cli) -> Result<Memory, Failure> {
    let device = LeechCore::open(&device_config(cli)?)?;
    Ok(Memory::with_config(Arc::new(device), Default::default()))
}

/// Why the whole device is gone, if it is (a QEMU guest whose process
/// exited, a remote end that stopped answering or closed the connection):
/// a read of its first page says so.
pub fn device_lost(mem: &Memory) -> Option<String> {
    let map = mem.backend().memory_map();
    let start = map.ranges().first().map_or(0, |r| r.start);
    let mut probe = [0u8; 8];
    let outcome = mem.read_now([(start, &mut probe[..])]);
    let reason = outcome.failures(0).next().map(|f| f.reason)?;
    if !reason.is_device_lost() {
        return None;
    }
    Some(mem.backend().lost().unwrap_or_else(|| {
        if reason == PageError::TargetGone {
            "the target went away during the scan (its QEMU exited?)".to_string()
        } else {
            reason.to_string()
        }
    }))
}
