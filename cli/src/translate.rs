//! `leechio translate`: the physical address of virtual ones, with the page
//! size and the entry each level of the walk gave.

use std::process::ExitCode;

use leechio::join_all;
use leechio::vm::LEVEL_NAMES;
use serde_json::json;

use crate::device::open;
use crate::numbers::hex;
use crate::{paging, Cli, Failure};

/// Translates every address of `vas` through the tables at `dtb`, in one
/// batch; exit 1 when one does not translate.
pub fn translate(cli: &Cli, vas: &[u64], dtb: u64) -> Result<ExitCode, Failure> {
    let mem = open(cli)?;
    let space = paging::space(&mem, dtb)?;
    // Every address in one batch: the walks share their device calls.
    let results = mem.block_on(join_all(vas.iter().map(|&va| space.translate(va))));
    let levels = space.paging().levels();
    let top = space.paging().top_level();
    // The entries of the mode's levels, top first (PML5E or PML4E down to
    // PTE), `null` below a large page or where the walk stopped.
    let named_entries = |entries: &[Option<u64>]| -> Vec<Option<String>> {
        entries[top..].iter().map(|e| e.map(hex)).collect()
    };
    if !cli.json {
        outln!("{} paging, top table at {:#x}", space.paging(), space.dtb());
    }
    let mut all_ok = true;
    for (&va, result) in vas.iter().zip(&results) {
        all_ok &= result.is_ok();
        if cli.json {
            let line = match result {
                Ok(t) => {
                    json!({"va": hex(va), "pa": hex(t.pa), "page_size": t.page_size.bytes(), "error": null,
                    "paging": levels, "entries": named_entries(&t.entries)})
                }
                Err(e) => {
                    json!({"va": hex(va), "pa": null, "page_size": null, "error": e.to_string(),
                    "paging": levels, "entries": named_entries(&e.entries)})
                }
            };
            outln!("{line}");
            continue;
        }
        let (head, entries) = match result {
            Ok(t) => (
                format!("{va:#018x} -> {:#x}  ({} page)", t.pa, t.page_size),
                t.entries,
            ),
            Err(e) => (
                format!("{va:#018x} -> not translated: {}", e.reason),
                e.entries,
            ),
        };
        outln!("{head}");
        for (name, entry) in LEVEL_NAMES.iter().zip(entries) {
            if let Some(e) = entry {
                outln!("    {name:<5}  {e:#018x}");
            }
        }
    }
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
