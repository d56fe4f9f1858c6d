//! `leechio files [PID]`: the open files of a Linux target's processes, as
//! `ls -l /proc/PID/fd` and `lsof` show them, read from kernel memory with
//! no profile.

use std::process::ExitCode;

use leechio::linux::{OpenFile, OpenFiles, ProcessFiles};
use serde_json::json;

use crate::device::open;
use crate::numbers::hex;
use crate::output::escape;
use crate::processes::KernelArgs;
use crate::{Cli, Failure};

/// `leechio files`.
#[derive(clap::Args, Debug)]
pub struct FilesArgs {
    /// The process (its pid); every process when left out
    pid: Option<u32>,
    #[command(flatten)]
    kernel: KernelArgs,
}

/// Lists the open fds: a table (pid, command, fd, type, flags, position,
/// name), or one JSON object a line. What could not be read goes to
/// stderr, and the exit code is then 1.
pub fn files(cli: &Cli, args: &FilesArgs) -> Result<ExitCode, Failure> {
    let mem = open(cli)?;
    let kernel = args.kernel.find(&mem)?;
    let found = kernel.open_files(args.pid);
    if let Some(pid) = args.pid {
        if found.list.get(pid).is_none() {
            report_failures(&found);
            return Err(Failure(format!("no process with pid {pid}")));
        }
    }
    if !cli.json {
        outln!(
            "{:>7} {:<15} {:>5} {:<7} {:>8} {:>10}  NAME",
            "PID",
            "COMMAND",
            "FD",
            "TYPE",
            "FLAGS",
            "POS"
        );
    }
    for p in &found.processes {
        for f in &p.fds {
            match cli.json {
                true => outln!("{}", fd_json(p, f)),
                false => outln!("{}", fd_line(p, f)),
            }
        }
    }
    report_failures(&found);
    Ok(
        match found.failed.is_empty() && found.list.failed.is_empty() {
            true => ExitCode::SUCCESS,
            false => ExitCode::FAILURE,
        },
    )
}

/// `fdinfo`'s flags: octal with a leading 0.
fn flags(f: &OpenFile) -> Option<String> {
    f.flags.map(|flags| format!("0{flags:o}"))
}

/// A row of the table; `?` where a value could not be read (stderr says
/// why).
fn fd_line(p: &ProcessFiles, f: &OpenFile) -> String {
    let name = match &f.name {
        Ok(name) => escape(name).into_owned(),
        Err(_) => "?".into(),
    };
    format!(
        "{:>7} {:<15} {:>5} {:<7} {:>8} {:>10}  {}",
        p.pid,
        escape(&p.name),
        f.fd,
        f.kind.to_string(),
        flags(f).unwrap_or_else(|| "?".into()),
        f.pos,
        name
    )
}

/// The JSON line of an fd.
fn fd_json(p: &ProcessFiles, f: &OpenFile) -> serde_json::Value {
    json!({
        "pid": p.pid, "command": p.name, "fd": f.fd, "type": f.kind.to_string(),
        "flags": flags(f), "pos": f.pos, "name": f.name.as_ref().ok(),
        "error": f.name.as_ref().err(), "inode": f.inode,
        "device": format!("{:02x}:{:02x}", f.device >> 20, f.device & 0xf_ffff),
        "mode": hex(u64::from(f.mode)), "file": hex(f.file),
        "socket": f.socket.map(|s| hex(s.address)), "sock": f.socket.map(|s| hex(s.sock)),
    })
}

fn report_failures(found: &OpenFiles) {
    for f in &found.list.failed {
        errln!("leechio: {}", escape(&f.to_string()));
    }
    for f in &found.failed {
        errln!("leechio: files: {}", escape(&f.to_string()));
    }
    let failed = found.list.failed.len() + found.failed.len();
    if failed > 0 {
        let fds: usize = found.processes.iter().map(|p| p.fds.len()).sum();
        errln!(
            "leechio: {failed} item(s) could not be read; {fds} fds of {} processes listed",
            found.processes.len()
        );
    }
}
