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
/// one JSON object a line. What could not be read goes to stderr, and the
/// exit code is then 1.
pub fn modules(cli: &Cli, args: &ModulesArgs) -> Result<ExitCode, Failure> {
    let mem = open(cli)?;
    let kernel = args.kernel.find(&mem)?;
    let list = kernel.modules();
    if !cli.json {
        outln!("{:<19} {:>8}  {:<9}  Base", "Module", "Size", "State");
    }
    for m in &list.modules {
        match cli.json {
            true => outln!("{}", module_json(m)),
            false => outln!(
                "{:<19} {:>8}  {:<9}  {}",
                escape(&m.name),
                m.size,
                m.state,
                hex(m.base)
            ),
        }
    }
    report_failures(&list);
    Ok(match list.failed.is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}

/// The JSON line of a module.
fn module_json(m: &Module) -> serde_json::Value {
    json!({
        "name": m.name, "size": m.size, "base": hex(m.base),
        "state": m.state.to_string(), "module": hex(m.address),
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
