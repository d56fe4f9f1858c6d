//! `leechio`: look at a target behind LeechCore, translate addresses, dump
//! memory. Every command prints plain text, or JSON lines with `--json`.
//! This file holds the command line's definitions and sends each command
//! to its module.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

#[macro_use]
mod output;
mod bench;
mod cache;
mod check;
mod device;
mod dmesg;
mod dump;
mod environment;
mod files;
mod hooks;
mod info;
mod manual;
mod maps;
mod modules;
mod network;
mod numbers;
mod paging;
mod processes;
mod read;
mod signals;
mod spaces;
mod system;
mod translate;
mod undo;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use leechio::backend::leechcore::time_limit::parse_timeout;
use numbers::{parse_number, parse_size};

/// Memory of a target behind LeechCore: PCILeech FPGA boards, memory
/// images, live QEMU guests, remote agents.
#[derive(Parser)]
#[command(name = "leechio", version, about, long_about = None, after_help = EXAMPLES)]
struct Cli {
    /// LeechCore device string: fpga, file:///mem.raw, qemu://shm=NAME,qmp=SOCKET, …
    #[arg(long, short, global = true, env = "LEECHIO_DEVICE")]
    device: Option<String>,
    /// LeechCore remote string (rpc://…, smb://…) for a device behind a LeechAgent
    #[arg(long, global = true)]
    remote: Option<String>,
    /// Path of leechcore.so (default: LEECHCORE_LIB, beside this program, ../lib for an installed program, the system, make setup's folder)
    #[arg(long, global = true)]
    lib: Option<PathBuf>,
    /// How long a device that talks over sockets (rawtcp://, a remote agent) may send nothing in a call before it is cut off: seconds, e.g. 2.5 or 500ms [default: 5]
    #[arg(long, global = true, value_name = "SECONDS", value_parser = parse_timeout)]
    timeout: Option<std::time::Duration>,
    /// LeechCore's own messages and leechio's notes (repeat for more); warnings always show
    #[arg(long, short, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Print JSON lines instead of text
    #[arg(long, global = true)]
    json: bool,
    /// Levels of page tables, 4 or 5 (5-level paging, LA57), where a page-table root's tables read both ways; found from the tables otherwise
    #[arg(long, global = true, value_name = "LEVELS", value_parser = paging::parse)]
    paging: Option<leechio::Paging>,
    #[command(subcommand)]
    command: Command,
}

const EXAMPLES: &str = "examples:
  leechio -d file:///tmp/mem.raw info
  leechio -d fpga read 0x1000 0x100
  leechio -d qemu://shm=guest,qmp=/tmp/qmp.sock translate --dtb 0x2a10000 0xffffffff81000000
  leechio -d fpga dump -o mem.elf
  leechio -d fpga dump --dtb 0x2a10000 --range 0xffffffff81000000-0xffffffff82000000 -o kernel.elf
  leechio -d fpga ps --json
  leechio -d fpga sockets
  leechio -d file:///tmp/mem.raw dmesg";

#[derive(Subcommand)]
enum Command {
    /// Device name, LeechCore version, max address, flags, memory map
    Info,
    /// Hex dump of LEN bytes at ADDR (physical, or virtual with --dtb); unreadable bytes show as ??
    Read {
        /// Address (hex 0x… or decimal)
        #[arg(value_parser = parse_number)]
        addr: u64,
        /// Length (decimal, hex, or with k/m/g)
        #[arg(value_parser = parse_size)]
        len: u64,
        /// Page-table root (CR3) of the address space to read
        #[arg(long, value_parser = parse_number)]
        dtb: Option<u64>,
    },
    /// Physical address, page size and the entry of each level, per address
    Translate {
        /// Virtual addresses
        #[arg(required = true, value_parser = parse_number)]
        va: Vec<u64>,
        /// Page-table root (CR3)
        #[arg(long, value_parser = parse_number)]
        dtb: u64,
    },
    /// All RAM (per the memory map), or every mapped range of an address space, to a file
    Dump(dump::DumpArgs),
    /// Page-table roots found in physical memory: candidate address spaces, named by process on a Linux target
    Spaces,
    /// Processes of a Linux target, found with no profile (the kernel's BTF): pid, parent, user, state, DTB, name, command line; --tree, --threads, --creds
    Ps(processes::PsArgs),
    /// Memory maps of a Linux process, as /proc/PID/maps shows them: range, permissions, offset, device, inode, path
    Maps(maps::MapsArgs),
    /// Loadable modules of a Linux target, as lsmod shows them: name, size, state, base, taint, parameters; a module only another view (the address tree, sysfs) has is marked HIDDEN. Exit 1 when one hides
    Modules(modules::ModulesArgs),
    /// Hooks on a Linux target: system-call table entries and ftrace callbacks that point outside the kernel's text and every module's. Exit 1 when one does
    Hooks(hooks::HooksArgs),
    /// Environment of a Linux target's processes, as /proc/PID/environ holds it
    Env(environment::EnvArgs),
    /// Open files of a Linux target's processes (or of one), as ls -l /proc/PID/fd and lsof show them: pid, command, fd, type, flags, position, name
    Files(files::FilesArgs),
    /// TCP and UDP sockets of a Linux target's processes, IPv4 and IPv6, as ss -tuanp shows them: protocol, state, local and peer address, the processes and fds holding each
    Sockets(network::SocketsArgs),
    /// Network devices of every namespace of a Linux target, as ip addr shows them: index, name, flags, MTU, hardware address, IPv4 and IPv6 addresses
    Interfaces(network::InterfacesArgs),
    /// What a Linux target's kernel says of itself: its names (as uname), boot time, uptime, clock, command line
    System(system::SystemArgs),
    /// The kernel log of a Linux target, as dmesg prints it
    Dmesg(dmesg::DmesgArgs),
    /// What hides on a Linux target: each task through the pid table, the task list, its thread group and the run queues; a line for each task missing from a view that must have it. Exit 1 when a task hides (or a view could not be read whole), 0 when the views agree
    Check(check::CheckArgs),
    /// Files in a Linux target's page cache: `ls` lists the files it holds pages of (deleted ones still open too), `cat` writes one's cached bytes, the pages not cached named
    Cache(cache::CacheArgs),
    /// Device calls and time of the same workloads through LeechCore, the engine, the memflow plugin and memflow's own stack
    Bench(bench::BenchArgs),
    /// Writes the man pages (leechio.1, leechio-COMMAND.1) into DIR, made from these definitions; for `make install`
    #[command(hide = true)]
    Man {
        /// Folder for the pages (created if missing)
        dir: PathBuf,
    },
    /// Puts back target memory saved in an undo file (which a `bench --chains-at` that could not restore it leaves), on the device it names (or --device)
    Restore {
        /// The undo file
        file: PathBuf,
    },
}

/// An error for the user: printed as is, exit code 1.
struct Failure(String);

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure(e.to_string())
    }
}

fn main() -> ExitCode {
    // A bug should still read as a message, not a trace. The message
    // itself must not panic (a closed stderr would make that an abort).
    std::panic::set_hook(Box::new(|info| {
        let _ = writeln!(std::io::stderr(), "leechio: internal error: {info}");
    }));
    // Past a file-size limit (`ulimit -f`) a write then fails with EFBIG,
    // which a dump reports and cleans up after, instead of the signal
    // killing the process halfway through a file.
    // SAFETY: setting a signal to be ignored, before any thread starts.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // A number, size or range that does not parse: its message names
        // it on one line; clap's pointer to --help would add two more.
        Err(e) if e.kind() == clap::error::ErrorKind::ValueValidation => {
            let text = e.to_string();
            let line = text.lines().next().unwrap_or_default();
            errln!("leechio: {}", line.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
        Err(e) => e.exit(),
    };
    output::log_to_stderr(cli.verbose);
    paging::set(cli.paging);
    match run(&cli) {
        Ok(code) => code,
        // An error may quote the target (a process's name, a path).
        Err(Failure(message)) => {
            errln!("leechio: {}", output::escape(&message));
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<ExitCode, Failure> {
    match &cli.command {
        Command::Info => info::info(cli),
        Command::Read { addr, len, dtb } => read::read(cli, *addr, *len, *dtb),
        Command::Translate { va, dtb } => translate::translate(cli, va, *dtb),
        Command::Dump(args) => dump::dump(cli, args),
        Command::Spaces => spaces::spaces(cli),
        Command::Ps(args) => processes::ps(cli, args),
        Command::Maps(args) => maps::maps(cli, args),
        Command::Modules(args) => modules::modules(cli, args),
        Command::Hooks(args) => hooks::hooks(cli, args),
        Command::Env(args) => environment::env(cli, args),
        Command::Files(args) => files::files(cli, args),
        Command::Sockets(args) => network::sockets(cli, args),
        Command::Interfaces(args) => network::interfaces(cli, args),
        Command::System(args) => system::system(cli, args),
        Command::Dmesg(args) => dmesg::dmesg(cli, args),
        Command::Check(args) => check::check(cli, args),
        Command::Cache(args) => cache::cache(cli, args),
        Command::Bench(args) => bench::run(cli, args),
        Command::Restore { file } => undo::run(cli, file),
        Command::Man { dir } => manual::write(dir),
    }
}
