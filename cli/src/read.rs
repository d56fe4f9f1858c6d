//! `leechio read`: a hex dump of physical or virtual memory, the bytes that
//! could not be read shown as `??`, and each failed range named with why.

use std::io::Write;
use std::process::ExitCode;

use leechio::vm::LEVEL_NAMES;
use leechio::{join_all, AddressSpace, Memory, PageError};
use serde_json::json;

use crate::device::open;
use crate::numbers::hex;
use crate::{output, paging, Cli, Failure};

/// Reads `len` bytes at `addr`, physical or (with `dtb`) virtual, and
/// prints them; exit 1 when some could not be read.
pub fn read(cli: &Cli, addr: u64, len: u64, dtb: Option<u64>) -> Result<ExitCode, Failure> {
    let len = usize::try_from(len)
        .ok()
        .filter(|&n| n <= 1 << 30)
        .ok_or_else(|| Failure(format!("length {len:#x} is over 1 GiB")))?;
    let mem = open(cli)?;
    let mut buf = vec![0u8; len];
    let space = dtb.map(|dtb| paging::space(&mem, dtb)).transpose()?;
    // In a scope, the device fills `buf` in place.
    let result = mem.scope(|s| match &space {
        Some(space) => mem.block_on(space.read_scoped(s, addr, &mut buf)),
        None => mem.block_on(s.read(addr, &mut buf)),
    });
    let failed: Vec<leechio::Failure> = result
        .as_ref()
        .err()
        .map(|e| e.failed.clone())
        .unwrap_or_default();
    // Failed byte ranges, sorted: a byte is looked up by binary search, as
    // a read of scattered pages fails in thousands of ranges.
    let mut spans: Vec<(usize, usize)> = failed
        .iter()
        .map(|f| (f.offset, f.offset + f.len))
        .collect();
    spans.sort_unstable();
    let is_failed = |i: usize| {
        let next = spans.partition_point(|&(_, end)| end <= i);
        spans.get(next).is_some_and(|&(start, _)| start <= i)
    };
    let mut out = std::io::stdout().lock();
    if cli.json {
        let data: String = (0..len)
            .map(|i| {
                if is_failed(i) {
                    "??".into()
                } else {
                    format!("{:02x}", buf[i])
                }
            })
            .collect();
        let failures: Vec<_> = failed
            .iter()
            .map(|f| json!({"address": hex(past(addr, f.offset)), "length": f.len, "reason": f.reason.to_string()}))
            .collect();
        output::checked_stdout(writeln!(
            out,
            "{}",
            json!({"address": hex(addr), "length": len, "data": data, "failed": failures})
        ));
    } else {
        for (line, chunk) in buf.chunks(16).enumerate() {
            let base = line * 16;
            let hexes: Vec<String> = (0..chunk.len())
                .map(|i| {
                    if is_failed(base + i) {
                        "??".into()
                    } else {
                        format!("{:02x}", chunk[i])
                    }
                })
                .collect();
            let text: String = (0..chunk.len())
                .map(|i| match chunk[i] {
                    _ if is_failed(base + i) => '?',
                    b @ 0x20..=0x7e => b as char,
                    _ => '.',
                })
                .collect();
            output::checked_stdout(writeln!(
                out,
                "{:016x}  {:<47}  |{text}|",
                past(addr, base),
                hexes.join(" ")
            ));
        }
    }
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            let why = match &space {
                Some(space) => virtual_failure_reasons(&mem, space, addr, &e.failed),
                None => e.failed.iter().map(|f| f.reason.to_string()).collect(),
            };
            for (f, why) in e.failed.iter().zip(why) {
                errln!(
                    "leechio: {:#x}..{:#x} unreadable: {why}",
                    past(addr, f.offset),
                    past(addr, f.offset + f.len),
                );
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Why each failed range of a virtual read failed: a failure's reason
/// alone cannot tell a page table that could not be read from data that
/// could not be read (both say, e.g., "past the end of the device's
/// memory"), so the first address of each range is translated again (all
/// in one batch; the walks come from the space's cache) to say which, and
/// where.
fn virtual_failure_reasons(
    mem: &Memory,
    space: &AddressSpace,
    addr: u64,
    failed: &[leechio::Failure],
) -> Vec<String> {
    let starts = failed
        .iter()
        .map(|f| space.translate(addr.wrapping_add(f.offset as u64)));
    let walks = mem.block_on(join_all(starts));
    failed
        .iter()
        .zip(walks)
        .map(|(f, walk)| match walk {
            // An overflowing range never reached a walk.
            _ if f.reason == PageError::AddressOverflow => f.reason.to_string(),
            Ok(t) => format!("{} (physical {:#x})", f.reason, t.pa),
            Err(e) => {
                let level = e.level.map(|l| LEVEL_NAMES[l]);
                match (level, e.entry_address(space.dtb())) {
                    (Some(level), Some(at)) if e.reason == PageError::NotMapped => {
                        format!("not translated: {} (the {level} at physical {at:#x} is not present)", e.reason)
                    }
                    (Some(level), Some(at)) => format!(
                        "not translated: the page-table entry {level} at physical {at:#x} is unreadable: {}",
                        e.reason
                    ),
                    _ => format!("not translated: {}", e.reason),
                }
            }
        })
        .collect()
}

/// The address `offset` bytes past `addr`, as the number it is: a read
/// that runs off the end of the address space shows addresses from 2^64
/// (`0x10000000000000000`) on, not from 0 again, which was not asked for.
fn past(addr: u64, offset: usize) -> u128 {
    u128::from(addr) + offset as u128
}
