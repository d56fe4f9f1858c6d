//! `leechio spaces`: the page-table roots found in physical memory, each
//! named by its process on a Linux target.

use std::process::ExitCode;

use serde_json::json;

use crate::device::{device_lost, open};
use crate::numbers::hex;
use crate::{dump, paging, processes, Cli, Failure};

/// Lists the candidate address spaces: a table, or one JSON object a
/// line.
pub fn spaces(cli: &Cli) -> Result<ExitCode, Failure> {
    let mem = open(cli)?;
    let total = mem.backend().memory_map().total_size();
    let bar = dump::progress_bar(total, !cli.json);
    let found =
        leechio::vm::find_address_spaces(&mem, paging::given(), |done, _| bar.set_position(done));
    bar.finish_and_clear();
    // On a Linux target, each table's process.
    let owners = match found.is_empty() {
        true => None,
        false => processes::owners(&mem),
    };
    let owner = |dtb| owners.as_ref().and_then(|o| processes::owner(o, dtb));
    if !cli.json {
        outln!(
            "{:>18}  {:>6}  {:>12}  {:>12}  {:>7}  {:>7}  process",
            "DTB",
            "paging",
            "user mapped",
            "kernel mapped",
            "entries",
            "sharing"
        );
    }
    let kib = |bytes: Option<u64>| bytes.map_or("? K".to_string(), |b| format!("{} K", b >> 10));
    for c in &found {
        let owner = owner(c.dtb);
        let levels = c.paging.as_ref().ok().map(|p| p.levels());
        if cli.json {
            let (pid, name) = owner.map(|o| o.json()).unzip();
            outln!(
                "{}",
                json!({"dtb": hex(c.dtb), "paging": levels, "paging_unknown": c.paging.as_ref().err(),
                    "user_mapped": c.user_mapped, "kernel_mapped": c.kernel_mapped,
                    "user_entries": c.user_entries, "kernel_entries": c.kernel_entries,
                    "sharing_kernel_half": c.sharing_kernel_half, "pid": pid.flatten(), "process": name})
            );
        } else {
            outln!(
                "{:#18x}  {:>6}  {:>12}  {:>12}  {:>3}+{:<3}  {:>7}  {}",
                c.dtb,
                levels.map_or("?".to_string(), |l| l.to_string()),
                kib(c.user_mapped),
                kib(c.kernel_mapped),
                c.user_entries,
                c.kernel_entries,
                c.sharing_kernel_half,
                owner.map(|o| o.text()).unwrap_or_default()
            );
        }
    }
    // Candidates whose tables read both ways: why, once per reason.
    let mut unknown: Vec<&String> = found
        .iter()
        .filter_map(|c| c.paging.as_ref().err())
        .collect();
    unknown.dedup();
    for why in unknown {
        errln!("leechio: paging mode unknown, sizes not counted: {why}; give --paging 4 or 5");
    }
    // A scan that lost its target found nothing past that point: not a
    // result.
    if let Some(why) = device_lost(&mem) {
        errln!("leechio: {why}; the list is incomplete");
        return Ok(ExitCode::FAILURE);
    }
    if found.is_empty() {
        errln!("leechio: no page-table roots found");
    }
    Ok(ExitCode::SUCCESS)
}
