//! `leechio hooks`: the kernel's function pointers that point outside its
//! code and its modules' (a rootkit's hooks), found with no profile.

use std::process::ExitCode;

use leechio::linux::{Hook, Hooks};
use serde_json::json;

use crate::device::open;
use crate::numbers::hex;
use crate::output::escape;
use crate::processes::KernelArgs;
use crate::{Cli, Failure};

/// `leechio hooks`.
#[derive(clap::Args, Debug)]
pub struct HooksArgs {
    #[command(flatten)]
    kernel: KernelArgs,
}

/// Checks the system-call tables and the ftrace callbacks: a line for
/// each pointer outside the kernel's text and the listed modules' code
/// (where it is, where it points, what lies there), then a summary of what
/// was checked; with `--json`, an object a pointer and one for the
/// summary. Exit 1 when a pointer points outside or something could not
/// be read, 0 when every one points into code.
pub fn hooks(cli: &Cli, args: &HooksArgs) -> Result<ExitCode, Failure> {
    let mem = open(cli)?;
    let kernel = args.kernel.find(&mem)?;
    let hooks = kernel.hooks();
    for note in &hooks.notes {
        errln!("leechio: {}", escape(note));
    }
    for f in &hooks.failed {
        errln!("leechio: hooks: {}", escape(&f.to_string()));
    }
    for h in &hooks.outside {
        match cli.json {
            true => outln!("{}", hook_json(h)),
            false => outln!(
                "{}[{}] at {} points to {} ({}): outside the kernel's text and every module's",
                h.table,
                h.index,
                hex(h.slot),
                hex(h.target),
                escape(h.points_into.as_deref().unwrap_or("unknown"))
            ),
        }
    }
    match cli.json {
        true => outln!("{}", summary_json(&hooks)),
        false => outln!("{}", summary(&hooks)),
    }
    Ok(match hooks.outside.is_empty() && hooks.failed.is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}

fn hook_json(h: &Hook) -> serde_json::Value {
    json!({
        "table": h.table.to_string(), "index": h.index, "slot": hex(h.slot),
        "target": hex(h.target), "points_into": h.points_into,
    })
}

/// `N pointers outside: sys_call_table 451 entries, ...`.
fn summary(hooks: &Hooks) -> String {
    let checked: Vec<String> = hooks
        .checked
        .iter()
        .map(|(table, n)| format!("{table} {n}"))
        .collect();
    format!(
        "{} pointing outside; checked: {}",
        hooks.outside.len(),
        checked.join(", ")
    )
}

fn summary_json(hooks: &Hooks) -> serde_json::Value {
    let checked: serde_json::Map<String, serde_json::Value> = hooks
        .checked
        .iter()
        .map(|(table, n)| (table.to_string(), json!(n)))
        .collect();
    json!({ "outside": hooks.outside.len(), "checked": checked })
}
