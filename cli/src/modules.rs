//! A Linux target's loadable modules, found with no profile: `leechio
//! modules`, as `lsmod` shows them.

use std::process::ExitCode;

use leechio::linux::{Module, ModuleList};
use serde_json::json;

use crate::output::escape;
use crate::processes::KernelArgs;
use crate::{hex, open, Cli, Failure};

/// `leechio modules`.
#[derive(clap::Args, Debug)]
pub struct ModulesArgs {
    #[command(flatten)]
    kernel: KernelArgs,
}

/// Lists the modules: a table as `lsmod`'s (name, size, state, base), or
/// one JSON object a line; then the modules the kernel's module address
/// tree holds that its list lacks (hidden), each said on stderr. What
/// could not be read goes to stderr too; the exit code is then 1.
pub fn modules(cli: &Cli, args: &ModulesArgs) -> Result<ExitCode, Failure> {
    let mem = open(cli)?;
    let kernel = args.kernel.find(&mem)?;
    let views = kernel.module_views();
    let list = &views.list;
    if !cli.json {
        outln!("{:<19} {:>8}  {:<9}  Base", "Module", "Size", "State");
    }
    let rows = list.modules.iter().map(|m| (m, false));
    for (m, hidden) in rows.chain(views.hidden.iter().map(|m| (m, true))) {
        match cli.json {
            true => outln!("{}", module_json(m, hidden)),
            false => outln!(
                "{:<19} {:>8}  {:<9}  {}{}",
                escape(&m.name),
                m.size,
                m.state,
                hex(m.base),
                if hidden { "  HIDDEN" } else { "" }
            ),
        }
    }
    for m in &views.hidden {
        errln!(
            "leechio: module {} (struct module at {}) is in the kernel's module address tree but not in its module list: hidden",
            escape(&m.name),
            hex(m.address)
        );
    }
    for m in &views.not_in_tree {
        errln!(
            "leechio: module {} (struct module at {}) is live on the module list but not in the module address tree",
            escape(&m.name),
            hex(m.address)
        );
    }
    for f in &views.failed {
        errln!("leechio: module address tree: {}", escape(&f.to_string()));
    }
    report_failures(list);
    let clean = list.failed.is_empty() && views.hidden.is_empty() && views.not_in_tree.is_empty();
    Ok(match clean && views.failed.is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}

/// The JSON line of a module.
fn module_json(m: &Module, hidden: bool) -> serde_json::Value {
    json!({
        "name": m.name, "size": m.size, "base": hex(m.base),
        "state": m.state.to_string(), "module": hex(m.address),
        "hidden": hidden,
    })
}

fn report_failures(list: &ModuleList) {
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
