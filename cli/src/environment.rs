//! `leechio env`: the environment of a Linux target's processes, as
//! `/proc/PID/environ` holds it, read from each process's own memory.

use std::process::ExitCode;

use leechio::linux::DetailsAsked;
use serde_json::json;

use crate::device::open;
use crate::output::escape;
use crate::processes::KernelArgs;
use crate::{Cli, Failure};

/// `leechio env`.
#[derive(clap::Args, Debug)]
pub struct EnvArgs {
    /// Pids of the processes (every process with memory when none is given)
    pids: Vec<u32>,
    #[command(flatten)]
    kernel: KernelArgs,
}

/// Prints each process's variables, a line each (`PID VAR=VALUE`), or one
/// JSON object a process. A pid not listed, or an environment that could
/// not be read, goes to stderr, and the exit code is then 1.
pub fn env(cli: &Cli, args: &EnvArgs) -> Result<ExitCode, Failure> {
    let mem = open(cli)?;
    let kernel = args.kernel.find(&mem)?;
    let (list, details) = kernel.processes_with(DetailsAsked { environment: true });
    for why in kernel.details_unknown() {
        errln!("leechio: not on this kernel: {}", escape(&why));
    }
    let mut failed = list.failed.len();
    for f in &list.failed {
        errln!("leechio: {}", escape(&f.to_string()));
    }
    let mut chosen = Vec::new();
    for &pid in &args.pids {
        match list.get(pid) {
            Some(p) => chosen.push(p),
            None => {
                errln!("leechio: no process with pid {pid} in the target's pid table");
                failed += 1;
            }
        }
    }
    if args.pids.is_empty() {
        chosen = list.processes.iter().filter(|p| p.mm.is_some()).collect();
    }
    if !cli.json {
        outln!("{:>7}  VARIABLE", "PID");
    }
    for p in chosen {
        let environment = details.get(&p.task).and_then(|d| d.environment.as_ref());
        let variables = match environment {
            Some(Ok(variables)) => variables,
            Some(Err(why)) => {
                errln!("leechio: pid {}: environment: {}", p.pid, escape(why));
                failed += 1;
                continue;
            }
            // A kernel thread or a zombie: no memory, no environment.
            None => &Vec::new(),
        };
        match cli.json {
            true => outln!(
                "{}",
                json!({"pid": p.pid, "name": p.name, "environment": variables})
            ),
            false => {
                for v in variables {
                    outln!("{:>7}  {}", p.pid, escape(v));
                }
            }
        }
    }
    Ok(match failed {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    })
}
