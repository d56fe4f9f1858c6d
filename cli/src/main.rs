//! `leechio`: look at a target behind LeechCore, translate addresses, dump
//! memory. Every command prints plain text, or JSON lines with `--json`.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

#[macro_use]
mod output;
mod bench;
mod cache;
mod check;
mod dmesg;
mod dump;
mod environment;
mod files;
mod hooks;
mod manual;
mod maps;
mod modules;
mod network;
mod numbers;
mod paging;
mod processes;
mod signals;
mod spaces;
mod system;
mod undo;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use leechio::join_all;
use serde_json::json;

use leechio::backend::leechcore::time_limit::parse_timeout;
use leechio::vm::LEVEL_NAMES;
use leechio::{AddressSpace, DeviceConfig, LeechCore, Memory, PageError, Verbosity};
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

/// How to open the device the options name: `--device`, `--remote`,
/// `--lib` and `-v`, for every command alike.
fn device_config(cli: &Cli) -> Result<DeviceConfig, Failure> {
    let device = cli.device.clone().ok_or_else(|| {
        Failure(
            "no device: give --device or set LEECHIO_DEVICE (e.g. --device fpga, --device file:///mem.raw)"
                .into(),
        )
    })?;
    Ok(config_of(cli, device, cli.remote.clone()))
}

/// `device` (and `remote`) opened with the other settings of `cli`.
fn config_of(cli: &Cli, device: String, remote: Option<String>) -> DeviceConfig {
    DeviceConfig {
        device,
        remote,
        library: cli.lib.clone(),
        verbosity: Verbosity::from_level(cli.verbose),
        max_address: None,
        timeout: cli.timeout,
    }
}

fn open(cli: &Cli) -> Result<Memory, Failure> {
    let device = LeechCore::open(&device_config(cli)?)?;
    Ok(Memory::with_config(Arc::new(device), Default::default()))
}

fn run(cli: &Cli) -> Result<ExitCode, Failure> {
    match &cli.command {
        Command::Info => info(cli),
        Command::Read { addr, len, dtb } => read(cli, *addr, *len, *dtb),
        Command::Translate { va, dtb } => translate(cli, va, *dtb),
        Command::Dump(args) => {
            // The files LeechCore holds open are the device's own (its
            // image, whatever the device string's syntax): the dump must
            // not write over them.
            let before = dump::open_files();
            let mem = open(cli)?;
            let mut sources = dump::open_files();
            sources.retain(|f| !before.contains(f));
            let device = cli.device.as_deref().unwrap_or_default();
            dump::run(&mem, device, &sources, args, cli.json)
        }
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

fn info(cli: &Cli) -> Result<ExitCode, Failure> {
    let device = LeechCore::open(&device_config(cli)?)?;
    let info = device.info();
    let map = device.memory_map()?;
    if cli.json {
        let ranges: Vec<_> = map
            .ranges()
            .iter()
            .map(|r| json!({"start": hex(r.start), "end": hex(r.end()), "remap": hex(r.remap)}))
            .collect();
        outln!(
            "{}",
            json!({
                "device": info.name, "leechcore_version": info.version.to_string(),
                "max_address": hex(device.max_address()), "read_only": info.read_only,
                "volatile": info.volatile, "remote": info.remote,
                "library": info.library.display().to_string(), "memory_map": ranges,
                "memory_size": map.total_size(),
            })
        );
    } else {
        outln!("device        {}", info.name);
        outln!(
            "LeechCore     {} ({})",
            info.version,
            info.library.display()
        );
        outln!("max address   {:#x}", device.max_address());
        outln!("read-only     {}", yes_no(info.read_only));
        outln!("volatile      {}", yes_no(info.volatile));
        outln!(
            "memory map    {} ranges, {} MiB",
            map.ranges().len(),
            map.total_size() >> 20
        );
        for r in map.ranges() {
            outln!(
                "  {:#014x}-{:#014x}  remap {:#x}",
                r.start,
                r.end(),
                r.remap
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn read(cli: &Cli, addr: u64, len: u64, dtb: Option<u64>) -> Result<ExitCode, Failure> {
    let len = usize::try_from(len)
        .ok()
        .filter(|&n| n <= 1 << 30)
        .ok_or_else(|| Failure(format!("length {len:#x} is over 1 GiB")))?;
    let mem = open(cli)?;
    let mut buf = vec![0u8; len];
    let space = dtb.map(|dtb| paging::space(&mem, dtb)).transpose()?;
    // In a scope, the device fills `buf` in place.
    let result = mem.scope(|s| match &space {
        Some(space) => mem.block_on(space.read_scoped(s, addr, &mut buf)),
        None => mem.block_on(s.read(addr, &mut buf)),
    });
    let failed: Vec<leechio::Failure> = result
        .as_ref()
        .err()
        .map(|e| e.failed.clone())
        .unwrap_or_default();
    // Failed byte ranges, sorted: a byte is looked up by binary search, as
    // a read of scattered pages fails in thousands of ranges.
    let mut spans: Vec<(usize, usize)> = failed
        .iter()
        .map(|f| (f.offset, f.offset + f.len))
        .collect();
    spans.sort_unstable();
    let is_failed = |i: usize| {
        let next = spans.partition_point(|&(_, end)| end <= i);
        spans.get(next).is_some_and(|&(start, _)| start <= i)
    };
    let mut out = std::io::stdout().lock();
    if cli.json {
        let data: String = (0..len)
            .map(|i| {
                if is_failed(i) {
                    "??".into()
                } else {
                    format!("{:02x}", buf[i])
                }
            })
            .collect();
        let failures: Vec<_> = failed
            .iter()
            .map(|f| json!({"address": hex(past(addr, f.offset)), "length": f.len, "reason": f.reason.to_string()}))
            .collect();
        output::checked_stdout(writeln!(
            out,
            "{}",
            json!({"address": hex(addr), "length": len, "data": data, "failed": failures})
        ));
    } else {
        for (line, chunk) in buf.chunks(16).enumerate() {
            let base = line * 16;
            let hexes: Vec<String> = (0..chunk.len())
                .map(|i| {
                    if is_failed(base + i) {
                        "??".into()
                    } else {
                        format!("{:02x}", chunk[i])
                    }
                })
                .collect();
            let text: String = (0..chunk.len())
                .map(|i| match chunk[i] {
                    _ if is_failed(base + i) => '?',
                    b @ 0x20..=0x7e => b as char,
                    _ => '.',
                })
                .collect();
            output::checked_stdout(writeln!(
                out,
                "{:016x}  {:<47}  |{text}|",
                past(addr, base),
                hexes.join(" ")
            ));
        }
    }
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            let why = match &space {
                Some(space) => virtual_failure_reasons(&mem, space, addr, &e.failed),
                None => e.failed.iter().map(|f| f.reason.to_string()).collect(),
            };
            for (f, why) in e.failed.iter().zip(why) {
                errln!(
                    "leechio: {:#x}..{:#x} unreadable: {why}",
                    past(addr, f.offset),
                    past(addr, f.offset + f.len),
                );
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Why each failed range of a virtual read failed: a failure's reason
/// alone cannot tell a page table that could not be read from data that
/// could not be read (both say, e.g., "past the end of the device's
/// memory"), so the first address of each range is translated again (all
/// in one batch; the walks come from the space's cache) to say which, and
/// where.
fn virtual_failure_reasons(
    mem: &Memory,
    space: &AddressSpace,
    addr: u64,
    failed: &[leechio::Failure],
) -> Vec<String> {
    let starts = failed
        .iter()
        .map(|f| space.translate(addr.wrapping_add(f.offset as u64)));
    let walks = mem.block_on(join_all(starts));
    failed
        .iter()
        .zip(walks)
        .map(|(f, walk)| match walk {
            // An overflowing range never reached a walk.
            _ if f.reason == PageError::AddressOverflow => f.reason.to_string(),
            Ok(t) => format!("{} (physical {:#x})", f.reason, t.pa),
            Err(e) => {
                let level = e.level.map(|l| LEVEL_NAMES[l]);
                match (level, e.entry_address(space.dtb())) {
                    (Some(level), Some(at)) if e.reason == PageError::NotMapped => {
                        format!("not translated: {} (the {level} at physical {at:#x} is not present)", e.reason)
                    }
                    (Some(level), Some(at)) => format!(
                        "not translated: the page-table entry {level} at physical {at:#x} is unreadable: {}",
                        e.reason
                    ),
                    _ => format!("not translated: {}", e.reason),
                }
            }
        })
        .collect()
}

fn translate(cli: &Cli, vas: &[u64], dtb: u64) -> Result<ExitCode, Failure> {
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

/// Why the whole device is gone, if it is (a QEMU guest whose process
/// exited, a remote end that stopped answering or closed the connection):
/// a read of its first page says so.
fn device_lost(mem: &Memory) -> Option<String> {
    let map = mem.backend().memory_map();
    let start = map.ranges().first().map_or(0, |r| r.start);
    let mut probe = [0u8; 8];
    let outcome = mem.read_now([(start, &mut probe[..])]);
    let reason = outcome.failures(0).next().map(|f| f.reason)?;
    if !reason.is_device_lost() {
        return None;
    }
    Some(mem.backend().lost().unwrap_or_else(|| {
        if reason == PageError::TargetGone {
            "the target went away during the scan (its QEMU exited?)".to_string()
        } else {
            reason.to_string()
        }
    }))
}

/// The address `offset` bytes past `addr`, as the number it is: a read
/// that runs off the end of the address space shows addresses from 2^64
/// (`0x10000000000000000`) on, not from 0 again, which was not asked for.
fn past(addr: u64, offset: usize) -> u128 {
    u128::from(addr) + offset as u128
}

fn hex(v: impl std::fmt::LowerHex) -> String {
    format!("{v:#x}")
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}
