//! A Linux target's loadable modules, found with no profile: `leechio
//! modules`, as `lsmod` and `/proc/modules` show them, with their taint
//! and parameters, and each module only another view of them has
//! (hidden).

use std::process::ExitCode;

use leechio::linux::{
    kernel_taint_letters, module_taint_letters, Module, ModuleParam, ModuleView, ModuleViews,
};
use serde_json::json;

use crate::device::open;
use crate::numbers::hex;
use crate::output::escape;
use crate::processes::KernelArgs;
use crate::{Cli, Failure};

/// `leechio modules`.
#[derive(clap::Args, Debug)]
pub struct ModulesArgs {
    #[command(flatten)]
    kernel: KernelArgs,
}

/// Lists the modules: a table as `lsmod`'s (name, size, state, base,
/// taint letters as `/proc/modules` shows them), each parameter on a line
/// under its module (`name=value` as `/sys/module/NAME/parameters/`
/// shows it), then the modules another view (the address tree, sysfs)
/// holds that the list lacks, marked HIDDEN, and a last line with the
/// kernel's taint; with `--json` one object a module and one for that
/// summary. Each hidden module, and each listed one a view lacks, is said
/// on stderr with the views that have it. What could not be read goes to
/// stderr too; the exit code is then 1.
pub fn modules(cli: &Cli, args: &ModulesArgs) -> Result<ExitCode, Failure> {
    let mem = open(cli)?;
    let kernel = args.kernel.find(&mem)?;
    let views = kernel.module_views();
    let list = &views.list;
    if !cli.json {
        outln!(
            "{:<19} {:>8}  {:<9}  {:<18}  Taint",
            "Module",
            "Size",
            "State",
            "Base"
        );
    }
    let rows = list.modules.iter().map(|m| (m, false));
    for (m, hidden) in rows.chain(views.hidden.iter().map(|m| (m, true))) {
        match cli.json {
            true => outln!("{}", module_json(m, hidden, &views)),
            false => {
                outln!(
                    "{:<19} {:>8}  {:<9}  {:<18}  {}{}",
                    escape(&m.name),
                    m.size,
                    m.state.to_string(),
                    hex(m.base),
                    m.taints.map(module_taint_letters).unwrap_or_default(),
                    if hidden { "  HIDDEN" } else { "" }
                );
                for p in m.params.iter().flatten() {
                    outln!("    {}", param_line(p));
                }
            }
        }
    }
    for note in &views.notes {
        errln!("leechio: {}", escape(note));
    }
    for m in &views.hidden {
        errln!(
            "leechio: module {} (struct module at {}) is in: {}; missing from: {}: hidden",
            escape(&m.name),
            hex(m.address),
            names(views.seen_in.get(&m.address).map_or(&[][..], Vec::as_slice)),
            names(&views.missing_from(m.address))
        );
    }
    for m in &views.partly_seen {
        errln!(
            "leechio: module {} (struct module at {}) is live on the module list but missing from: {}",
            escape(&m.name),
            hex(m.address),
            names(&views.missing_from(m.address))
        );
    }
    for f in &views.failed {
        errln!("leechio: modules: {}", escape(&f.to_string()));
    }
    report_failures(&views);
    match cli.json {
        true => outln!("{}", summary_json(&views)),
        false => outln!("{}", summary(&views)),
    }
    let clean = list.failed.is_empty() && views.hidden.is_empty() && views.partly_seen.is_empty();
    Ok(match clean && views.failed.is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}

/// A parameter as `name=value (kind, perm 0444)`; `unknown` for a value
/// that cannot be read or shown.
fn param_line(p: &ModuleParam) -> String {
    let name = p.name.as_deref().unwrap_or("?");
    let value = p.value.as_deref().unwrap_or("unknown");
    let kind = p.kind.map_or("other".to_string(), |k| k.to_string());
    format!(
        "{}={}  ({kind}, perm {:04o})",
        escape(name),
        escape(value),
        p.perm
    )
}

/// The views' names, joined.
fn names(views: &[ModuleView]) -> String {
    let names: Vec<String> = views.iter().map(ToString::to_string).collect();
    names.join(", ")
}

/// The JSON line of a module.
fn module_json(m: &Module, hidden: bool, views: &ModuleViews) -> serde_json::Value {
    let params: Option<Vec<serde_json::Value>> = m.params.as_ref().map(|params| {
        params
            .iter()
            .map(|p| {
                json!({
                    "name": p.name.as_ref().ok(), "value": p.value.as_ref().ok(),
                    "kind": p.kind.map(|k| k.to_string()), "perm": format!("{:04o}", p.perm),
                    "unknown": p.value.as_ref().err().or(p.name.as_ref().err()),
                })
            })
            .collect()
    });
    let seen = views.seen_in.get(&m.address).map_or(&[][..], Vec::as_slice);
    let words = |v: &[ModuleView]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
    json!({
        "name": m.name, "size": m.size, "base": hex(m.base),
        "state": m.state.to_string(), "module": hex(m.address),
        "hidden": hidden,
        "taints": m.taints, "taint": m.taints.map(module_taint_letters),
        "params": params,
        "in": words(seen), "missing_from": words(&views.missing_from(m.address)),
    })
}

/// The last line: how many modules, hidden and built in, and the
/// kernel's taint as `/proc/sys/kernel/tainted` (and its letters).
fn summary(views: &ModuleViews) -> String {
    let taint = match &views.kernel_taint {
        Ok(0) => "kernel not tainted (0)".to_string(),
        Ok(mask) => format!("kernel tainted: {mask} ({})", kernel_taint_letters(*mask)),
        Err(why) => format!("kernel taint unknown: {}", escape(why)),
    };
    format!(
        "{} modules, {} hidden, {} built-in in /sys/module; {taint}",
        views.list.modules.len(),
        views.hidden.len(),
        views.built_in
    )
}

/// The summary as JSON.
fn summary_json(views: &ModuleViews) -> serde_json::Value {
    json!({
        "modules": views.list.modules.len(), "hidden": views.hidden.len(),
        "built_in": views.built_in,
        "views": views.read.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "kernel_tainted": views.kernel_taint.as_ref().ok(),
        "kernel_taint": views.kernel_taint.as_ref().ok().map(|m| kernel_taint_letters(*m)),
    })
}

fn report_failures(views: &ModuleViews) {
    let list = &views.list;
    for f in &list.failed {
        errln!("leechio: modules: {}", escape(&f.to_string()));
    }
    if !list.failed.is_empty() {
        errln!(
            "leechio: {} item(s) could not be read; {} modules listed",
            list.failed.len(),
            list.modules.len()
        );
    }
}
