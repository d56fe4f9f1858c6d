//! QEMU's own map of a guest's RAM, asked over QMP: `info mtree -f`, read
//! for the ranges of the guest's memory backend.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::{MemoryMap, MemoryRange};

/// Why QEMU's map could not be had over QMP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum QmpError {
    /// Connected, but QEMU did not greet within the time: another client
    /// holds the monitor (QMP serves one at a time), or QEMU is stopped.
    Silent,
    /// Anything else, as said.
    Failed(String),
}

impl std::fmt::Display for QmpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QmpError::Silent => f.write_str(
                "QEMU did not greet on its QMP socket: another client is connected \
                 (QMP serves one at a time) or QEMU is stopped",
            ),
            QmpError::Failed(why) => f.write_str(why),
        }
    }
}

impl From<String> for QmpError {
    fn from(why: String) -> Self {
        QmpError::Failed(why)
    }
}

/// QEMU's own map of a guest's RAM, asked over the QMP socket `qmp`: the
/// ranges of the system address space backed by the memory backend
/// `backend_id`, with their offsets in it (which is what LeechCore's `qemu`
/// device calls the remap address).
pub(crate) fn qemu_ram_map(
    qmp: &Path,
    backend_id: &str,
    timeout: Duration,
) -> Result<MemoryMap, QmpError> {
    let stream = UnixStream::connect(qmp).map_err(|e| format!("{}: {e}", qmp.display()))?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
    let mut writer = stream;
    // The greeting first: a monitor busy with another client (or a
    // stopped QEMU) accepts the connection and says nothing.
    let mut greeting = String::new();
    match reader.read_line(&mut greeting) {
        Ok(0) => return Err("QMP closed the connection".to_string().into()),
        Ok(_) => {}
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            return Err(QmpError::Silent)
        }
        Err(e) => return Err(format!("QMP: {e}").into()),
    }
    // One JSON object a line; events may come between answers.
    let mut answer = |command: serde_json::Value| -> Result<serde_json::Value, String> {
        writeln!(writer, "{command}").map_err(|e| format!("QMP: {e}"))?;
        loop {
            let mut line = String::new();
            if reader
                .read_line(&mut line)
                .map_err(|e| format!("QMP: {e}"))?
                == 0
            {
                return Err("QMP closed the connection".into());
            }
            let v: serde_json::Value =
                serde_json::from_str(&line).map_err(|e| format!("QMP: {e}"))?;
            if let Some(r) = v.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = v.get("error") {
                return Err(format!("QMP: {e}"));
            }
        }
    };
    answer(serde_json::json!({"execute": "qmp_capabilities"}))?;
    let text = answer(serde_json::json!({
        "execute": "human-monitor-command",
        "arguments": {"command-line": "info mtree -f"}
    }))?;
    let text = text
        .as_str()
        .ok_or_else(|| "QMP: `info mtree -f` gave no text".to_string())?;
    ram_map_from_mtree(text, backend_id)
        .ok_or_else(|| format!("no RAM of `{backend_id}` in QEMU's system memory view").into())
}

/// Reads the RAM ranges of `backend_id` from the system FlatView of QEMU's
/// `info mtree -f` (lines like `0000000000100000-000000000fffffff (prio 0,
/// ram): qemu-ram @0000000000100000`, with ` KVM` after them under KVM),
/// whatever order the views come in.
fn ram_map_from_mtree(text: &str, backend_id: &str) -> Option<MemoryMap> {
    let system = text.split("FlatView #").find(|view| {
        view.lines()
            .any(|l| l.trim() == "Root memory region: system")
    })?;
    let mut ranges = Vec::new();
    for line in system.lines() {
        let Some((span, rest)) = line.trim().split_once(' ') else {
            continue;
        };
        let Some((_, region)) = rest.split_once(", ram): ") else {
            continue;
        };
        let mut words = region.split_whitespace();
        if words.next() != Some(backend_id) {
            continue;
        }
        let (first, last) = span.split_once('-')?;
        let start = u64::from_str_radix(first, 16).ok()?;
        let end = u64::from_str_radix(last, 16).ok()?.checked_add(1)?;
        // `@offset` in the RAM block when it is not 0; then, under KVM,
        // the accelerator's name.
        let remap = match words.next().and_then(|w| w.strip_prefix('@')) {
            Some(at) => u64::from_str_radix(at, 16).ok()?,
            None => 0,
        };
        ranges.push(MemoryRange {
            start,
            size: end - start,
            remap,
        });
    }
    ranges.sort_by_key(|r| r.start);
    MemoryMap::new(ranges).ok().filter(|m| !m.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of `info mtree -f` of a 4 GiB guest (RAM above the PCI
    /// hole), with the system view last, as QEMU sometimes orders it.
    const MTREE: &str = "FlatView #0
 AS \"cpu-smm-0\", root: memory
 Root memory region: memory
  0000000000000000-000000000009ffff (prio 0, ram): qemu-ram
  00000000000a0000-00000000000bffff (prio 1, i/o): smram
FlatView #1
 AS \"I/O\", root: io
 Root memory region: io
  0000000000000000-0000000000000007 (prio 0, i/o): dma-chan
FlatView #2
 AS \"memory\", root: system
 AS \"cpu-memory-0\", root: system
 Root memory region: system
  0000000000000000-00000000000c2fff (prio 0, ram): qemu-ram
  00000000000c3000-00000000000e7fff (prio 0, rom): qemu-ram @00000000000c3000
  00000000000e8000-00000000000effff (prio 0, ram): qemu-ram @00000000000e8000
  0000000000100000-00000000bfffffff (prio 0, ram): qemu-ram @0000000000100000
  00000000fec00000-00000000fec00fff (prio 0, i/o): ioapic
  00000000fffc0000-00000000ffffffff (prio 0, rom): pc.bios
  0000000100000000-000000013fffffff (prio 0, ram): qemu-ram @00000000c0000000
";

    #[test]
    fn qemu_ram_map_comes_from_the_system_view_in_any_order() {
        let map = ram_map_from_mtree(MTREE, "qemu-ram").unwrap();
        let r = |start, end: u64, remap| MemoryRange {
            start,
            size: end - start,
            remap,
        };
        assert_eq!(
            map.ranges(),
            &[
                r(0, 0xc3000, 0),
                r(0xe8000, 0xf0000, 0xe8000),
                r(0x10_0000, 0xc000_0000, 0x10_0000),
                r(0x1_0000_0000, 0x1_4000_0000, 0xc000_0000),
            ]
        );
        assert!(ram_map_from_mtree(MTREE, "other-ram").is_none());
        assert!(ram_map_from_mtree("FlatView #0\n Root memory region: io\n", "qemu-ram").is_none());
    }

    #[test]
    fn kvm_guests_lines_and_ram_not_at_address_0_are_read() {
        // Under KVM each line ends with the accelerator's name; a range with
        // no `@` is at the start of the RAM block, wherever it is mapped.
        let kvm = "FlatView #0
 Root memory region: system
  0000000000000000-000000000009ffff (prio 0, ram): qemu-ram KVM
  0000000000100000-000000000fffffff (prio 0, ram): qemu-ram @0000000000100000 KVM
";
        let r = |start, end: u64, remap| MemoryRange {
            start,
            size: end + 1 - start,
            remap,
        };
        assert_eq!(
            ram_map_from_mtree(kvm, "qemu-ram").unwrap().ranges(),
            [r(0, 0x9_ffff, 0), r(0x10_0000, 0xfff_ffff, 0x10_0000)]
        );
        let virt = "FlatView #0
 Root memory region: system
  0000000040000000-000000007fffffff (prio 0, ram): mach-virt.ram
";
        assert_eq!(
            ram_map_from_mtree(virt, "mach-virt.ram").unwrap().ranges(),
            [r(0x4000_0000, 0x7fff_ffff, 0)]
        );
    }
}
