//! `leechio maps PID`: a Linux process's memory maps, as /proc/PID/maps
//! shows them, read from kernel memory with no profile.

use std::process::ExitCode;

use leechio::linux::{Kernel, Process, ProcessList, Vma, Vmas};
use serde_json::json;

use crate::device::open;
use crate::numbers::hex;
use crate::output::escape;
use crate::processes::KernelArgs;
use crate::{Cli, Failure};

/// `leechio maps`.
#[derive(clap::Args, Debug)]
pub struct MapsArgs {
    /// The process (its pid)
    pid: u32,
    #[command(flatten)]
    kernel: KernelArgs,
}

/// Which process: by pid, or by name (`comm`, or the command line's first
/// word's file name).
pub enum Wanted<'a> {
    Pid(u32),
    Name(&'a str),
}

/// The one user process `wanted` names in `list`, or why there is none.
pub fn process<'l>(list: &'l ProcessList, wanted: &Wanted) -> Result<&'l Process, Failure> {
    let process = match wanted {
        Wanted::Pid(pid) => list
            .get(*pid)
            .ok_or_else(|| Failure(format!("no process with pid {pid}")))?,
        Wanted::Name(name) => {
            let program = |p: &Process| {
                p.cmdline
                    .first()
                    .map(|a| a.rsplit('/').next().unwrap_or(a) == *name)
                    .unwrap_or(false)
            };
            let found: Vec<&Process> = list
                .processes
                .iter()
                .filter(|p| p.mm.is_some() && !p.kernel_thread)
                .filter(|p| p.name == *name || program(p))
                .collect();
            match found[..] {
                [one] => one,
                [] => return Err(Failure(format!("no user process named {name:?}"))),
                _ => {
                    let pids: Vec<String> = found.iter().map(|p| p.pid.to_string()).collect();
                    return Err(Failure(format!(
                        "{} processes are named {name:?} (pids {}): give --pid",
                        found.len(),
                        pids.join(", ")
                    )));
                }
            }
        }
    };
    match process.mm {
        Some(_) if !process.kernel_thread => Ok(process),
        _ => Err(Failure(format!(
            "pid {} ({}) is a kernel thread: it has no memory maps",
            process.pid, process.name
        ))),
    }
}

/// The VMAs of `process`, its failures reported on stderr.
pub fn vmas_of(kernel: &Kernel, process: &Process) -> Vmas {
    let vmas = kernel.vmas(process.mm.unwrap_or_default());
    for f in &vmas.failed {
        errln!(
            "leechio: maps of pid {}: {}",
            process.pid,
            escape(&f.to_string())
        );
    }
    vmas
}

/// Prints the maps: /proc's lines, or one JSON object a line. What could
/// not be read goes to stderr, and the exit code is then 1.
pub fn maps(cli: &Cli, args: &MapsArgs) -> Result<ExitCode, Failure> {
    let mem = open(cli)?;
    let kernel = args.kernel.find(&mem)?;
    let list = kernel.processes();
    let process = process(&list, &Wanted::Pid(args.pid))?;
    let vmas = vmas_of(&kernel, process);
    for vma in &vmas.vmas {
        match cli.json {
            true => outln!("{}", vma_json(vma)),
            false => outln!("{}", proc_line(vma)),
        }
    }
    Ok(match vmas.failed.is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}

/// A line as /proc/PID/maps writes it (the path padded to column 73).
fn proc_line(vma: &Vma) -> String {
    let head = format!(
        "{:08x}-{:08x} {} {:08x} {:02x}:{:02x} {} ",
        vma.start,
        vma.end,
        vma.flags.perms(),
        vma.offset(),
        vma.major(),
        vma.minor(),
        vma.inode
    );
    match vma.path() {
        "" => head,
        path => format!("{head:<72} {}", escape(path)),
    }
}

fn vma_json(vma: &Vma) -> serde_json::Value {
    json!({
        "start": hex(vma.start), "end": hex(vma.end), "perms": vma.flags.perms(),
        "offset": hex(vma.offset()), "device": format!("{:02x}:{:02x}", vma.major(), vma.minor()),
        "inode": vma.inode, "path": vma.path(), "file": vma.file, "vm_flags": hex(vma.flags.0),
    })
}
