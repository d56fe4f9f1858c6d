//! A Linux target's processes, found with no profile: `leechio ps`, and the
//! names `leechio spaces` gives the address spaces it finds.

use std::path::PathBuf;
use std::process::ExitCode;

use leechio::linux::{CacheLocation, Hints, Kernel, Process, ProcessList};
use leechio::Memory;
use serde_json::json;

use crate::numbers::parse_number;
use crate::output::escape;
use crate::{hex, open, Cli, Failure};

/// How to find the kernel: hints that skip steps of the search.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct KernelArgs {
    /// A page-table root with the kernel mapped (any process's CR3): skips the search of low memory
    #[arg(long, value_parser = parse_number)]
    pub dtb: Option<u64>,
    /// The kernel's virtual base (_text)
    #[arg(long, value_parser = parse_number)]
    pub kernel_base: Option<u64>,
    /// BTF of the target's kernel (its /sys/kernel/btf/vmlinux, copied off it), for a kernel built without BTF
    #[arg(long, value_name = "FILE")]
    pub btf: Option<PathBuf>,
    /// Neither read nor write the cache of kernels found (in ~/.cache/leechio/)
    #[arg(long)]
    pub no_cache: bool,
}

impl KernelArgs {
    fn hints(&self) -> Hints {
        Hints {
            dtb: self.dtb,
            kernel_base: self.kernel_base,
            paging: crate::paging::given(),
            btf_file: self.btf.clone(),
            cache: match self.no_cache {
                true => CacheLocation::Off,
                false => CacheLocation::User,
            },
        }
    }

    /// The kernel in `mem`, or why there is none.
    pub fn find(&self, mem: &Memory) -> Result<Kernel, Failure> {
        let kernel = Kernel::find(mem, &self.hints())?;
        log::info!(
            "{} ({:?}): text at {:#x}, physical {:#x}, DTB {:#x}",
            kernel.banner(),
            kernel.source(),
            kernel.virtual_base(),
            kernel.physical_base(),
            kernel.dtb()
        );
        Ok(kernel)
    }
}

/// `leechio ps`.
#[derive(clap::Args, Debug)]
pub struct PsArgs {
    #[command(flatten)]
    kernel: KernelArgs,
}

/// Lists the processes: a table, or one JSON object a line. What could
/// not be read goes to stderr, and the exit code is then 1.
pub fn ps(cli: &Cli, args: &PsArgs) -> Result<ExitCode, Failure> {
    let mem = open(cli)?;
    let kernel = args.kernel.find(&mem)?;
    let list = kernel.processes();
    if !cli.json {
        outln!(
            "{:>7} {:>7} S {:>4} {:>12}  {:<15}  COMMAND",
            "PID",
            "PPID",
            "THR",
            "DTB",
            "NAME"
        );
    }
    for p in &list.processes {
        if cli.json {
            outln!("{}", process_json(p));
        } else {
            let command = match p.kernel_thread {
                true => format!("[{}]", p.name),
                false => p.cmdline.join(" "),
            };
            outln!(
                "{:>7} {:>7} {} {:>4} {:>12}  {:<15}  {}",
                p.pid,
                p.ppid.map_or_else(|| "?".into(), |ppid| ppid.to_string()),
                p.state,
                1 + p.threads.len(),
                p.dtb.map(hex).unwrap_or_else(|| "-".into()),
                escape(&p.name),
                escape(&command)
            );
        }
    }
    report_failures(&list);
    Ok(match list.failed.is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}

/// The JSON line of a process.
fn process_json(p: &Process) -> serde_json::Value {
    let threads: Vec<_> = p
        .threads
        .iter()
        .map(|t| json!({"pid": t.pid, "name": t.name, "state": t.state.to_string()}))
        .collect();
    json!({
        "pid": p.pid, "ppid": p.ppid, "tgid": p.tgid, "name": p.name,
        "cmdline": p.cmdline.join(" "), "args": p.cmdline,
        "state": p.state.to_string(), "kernel_thread": p.kernel_thread,
        "dtb": p.dtb.map(hex), "task": hex(p.task), "mm": p.mm.map(hex),
        "threads": threads,
    })
}

fn report_failures(list: &ProcessList) {
    for f in &list.failed {
        errln!("leechio: {}", escape(&f.to_string()));
    }
    if !list.failed.is_empty() {
        errln!(
            "leechio: {} item(s) could not be read; {} processes listed",
            list.failed.len(),
            list.processes.len()
        );
    }
}

/// Who an address space belongs to, as `spaces` names it.
pub enum Owner<'a> {
    /// The kernel's own table (`init_top_pgt`).
    Kernel,
    /// A process's `mm->pgd`.
    Process(&'a Process),
    /// The user copy of a process's table (the page after `mm->pgd`, when
    /// the kernel isolates its page tables: PTI).
    UserCopy(&'a Process),
}

/// The kernel of `mem` and its processes, when it is a Linux target whose
/// kernel can be found; `None` (with a note at `-v`) otherwise.
pub fn owners(mem: &Memory) -> Option<(u64, ProcessList)> {
    match KernelArgs::default().find(mem) {
        Ok(kernel) => Some((kernel.dtb(), kernel.processes())),
        Err(Failure(why)) => {
            log::info!("address spaces not named by process: {why}");
            None
        }
    }
}

/// The owner of `dtb` among `owners`.
pub fn owner(owners: &(u64, ProcessList), dtb: u64) -> Option<Owner<'_>> {
    let (kernel, list) = owners;
    if dtb == *kernel {
        return Some(Owner::Kernel);
    }
    if let Some(p) = list.by_dtb(dtb) {
        return Some(Owner::Process(p));
    }
    list.by_dtb(dtb.checked_sub(0x1000)?).map(Owner::UserCopy)
}

impl Owner<'_> {
    /// `(pid, name)` for JSON: the kernel has no pid.
    pub fn json(&self) -> (Option<u32>, String) {
        match self {
            Owner::Kernel => (None, "kernel".into()),
            Owner::Process(p) => (Some(p.pid), p.name.clone()),
            Owner::UserCopy(p) => (Some(p.pid), format!("{} (user copy)", p.name)),
        }
    }

    /// The table's text, the process's name escaped for a terminal.
    pub fn text(&self) -> String {
        match self {
            Owner::Kernel => "kernel (init_top_pgt)".into(),
            Owner::Process(p) => format!("{} {}", p.pid, escape(&p.name)),
            Owner::UserCopy(p) => format!("{} {} (user copy)", p.pid, escape(&p.name)),
        }
    }
}
