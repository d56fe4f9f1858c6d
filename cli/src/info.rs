//! `leechio info`: what LeechCore says of the device: its name, version,
//! max address, flags and memory map.

use std::process::ExitCode;

use leechio::LeechCore;
use serde_json::json;

use crate::device::device_config;
use crate::numbers::hex;
use crate::{Cli, Failure};

/// The device, as LeechCore reports it once opened.
pub fn info(cli: &Cli) -> Result<ExitCode, Failure> {
    let device = LeechCore::open(&device_config(cli)?)?;
    let info = device.info();
    let map = device.memory_map()?;
    if cli.json {
        let ranges: Vec<_> = map
            .ranges()
            .iter()
            .map(|r| json!({"start": hex(r.start), "end": hex(r.end()), "remap": hex(r.remap)}))
            .collect();
        outln!(
            "{}",
            json!({
                "device": info.name, "leechcore_version": info.version.to_string(),
                "max_address": hex(device.max_address()), "read_only": info.read_only,
                "volatile": info.volatile, "remote": info.remote,
                "library": info.library.display().to_string(), "memory_map": ranges,
                "memory_size": map.total_size(),
            })
        );
    } else {
        outln!("device        {}", info.name);
        outln!(
            "LeechCore     {} ({})",
            info.version,
            info.library.display()
        );
        outln!("max address   {:#x}", device.max_address());
        outln!("read-only     {}", yes_no(info.read_only));
        outln!("volatile      {}", yes_no(info.volatile));
        outln!(
            "memory map    {} ranges, {} MiB",
            map.ranges().len(),
            map.total_size() >> 20
        );
        for r in map.ranges() {
            outln!(
                "  {:#014x}-{:#014x}  remap {:#x}",
                r.start,
                r.end(),
                r.remap
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}
