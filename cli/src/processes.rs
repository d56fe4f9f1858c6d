//! A Linux target's processes, found with no profile: `leechio ps`, and the
//! names `leechio spaces` gives the address spaces it finds.

use std::path::PathBuf;
use std::process::ExitCode;

use leechio::linux::{CacheLocation, Hints, Kernel, Process, ProcessList, TaskDetails, Thread};
use leechio::Memory;
use serde_json::json;

use crate::device::open;
use crate::numbers::hex;
use crate::numbers::parse_number;
use crate::output::escape;
use crate::{Cli, Failure};

mod tree;

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
    /// Each process under its parent, indented (as ps -H)
    #[arg(long)]
    tree: bool,
    /// A row for each thread too, under its process (its pid in the TID column)
    #[arg(long)]
    threads: bool,
    /// User and group ids (real, effective, saved, file system) and capability sets, as /proc/PID/status shows them, instead of the command line
    #[arg(long)]
    creds: bool,
}

/// Lists the processes: a table, or one JSON object a line. What could
/// not be read goes to stderr, and the exit code is then 1.
pub fn ps(cli: &Cli, args: &PsArgs) -> Result<ExitCode, Failure> {
    let mem = open(cli)?;
    let kernel = args.kernel.find(&mem)?;
    let (list, details) = kernel.processes_with_details();
    for why in kernel.details_unknown() {
        errln!("leechio: not on this kernel: {}", escape(&why));
    }
    let none = TaskDetails::default();
    let rows = match args.tree {
        true => tree::order(&list.processes),
        false => list.processes.iter().map(|p| (p, 0)).collect(),
    };
    if !cli.json {
        outln!("{}", header(args));
    }
    let mut failures = 0;
    for (p, depth) in rows {
        let d = details.get(&p.task).unwrap_or(&none);
        for why in &d.failed {
            errln!("leechio: pid {}: {}", p.pid, escape(why));
            failures += 1;
        }
        if cli.json {
            let mut line = process_json(p, d);
            if args.tree {
                line["depth"] = depth.into();
            }
            outln!("{line}");
            continue;
        }
        outln!("{}", row(args, p, d, depth));
        if args.threads {
            for t in &p.threads {
                let d = details.get(&t.task).unwrap_or(&none);
                outln!("{}", thread_row(args, p, t, d, depth));
            }
        }
    }
    report_failures(&list);
    Ok(match list.failed.is_empty() && failures == 0 {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}

/// The table's first line.
fn header(args: &PsArgs) -> String {
    let tid = if args.threads { "    TID " } else { "" };
    match args.creds {
        true => format!(
            "{:>7} {tid}{:<15}  {:<23}  {:<23}  {:<16} {:<16} {:<16} {:<16} {:<16}",
            "PID", "NAME", "UID", "GID", "CAPINH", "CAPPRM", "CAPEFF", "CAPBND", "CAPAMB"
        ),
        false => format!(
            "{:>7} {tid}{:>7} {:>5} S {:>4} {:>12}  {:<15}  COMMAND",
            "PID", "PPID", "UID", "THR", "DTB", "NAME"
        ),
    }
}

/// A process's row.
fn row(args: &PsArgs, p: &Process, d: &TaskDetails, depth: usize) -> String {
    let tid = match args.threads {
        true => format!("{:>7} ", p.pid),
        false => String::new(),
    };
    if args.creds {
        return format!("{:>7} {tid}{:<15}  {}", p.pid, escape(&p.name), creds(d));
    }
    let command = match p.kernel_thread {
        true => format!("[{}]", p.name),
        false => p.cmdline.join(" "),
    };
    let command = match depth {
        0 => escape(&command).into_owned(),
        depth => format!("{}\\_ {}", "   ".repeat(depth - 1), escape(&command)),
    };
    format!(
        "{:>7} {tid}{:>7} {:>5} {} {:>4} {:>12}  {:<15}  {}",
        p.pid,
        p.ppid.map_or_else(|| "?".into(), |ppid| ppid.to_string()),
        euid(d),
        p.state,
        1 + p.threads.len(),
        p.dtb.map(hex).unwrap_or_else(|| "-".into()),
        escape(&p.name),
        command
    )
}

/// A thread's row, under its process's.
fn thread_row(args: &PsArgs, p: &Process, t: &Thread, d: &TaskDetails, depth: usize) -> String {
    if args.creds {
        return format!(
            "{:>7} {:>7} {:<15}  {}",
            p.pid,
            t.pid,
            escape(&t.name),
            creds(d)
        );
    }
    let indent = "   ".repeat(depth);
    format!(
        "{:>7} {:>7} {:>7} {:>5} {} {:>4} {:>12}  {:<15}  {indent}(thread)",
        p.pid,
        t.pid,
        p.ppid.map_or_else(|| "?".into(), |ppid| ppid.to_string()),
        euid(d),
        t.state,
        "",
        "",
        escape(&t.name),
    )
}

/// The effective user id, `?` when unknown.
fn euid(d: &TaskDetails) -> String {
    match &d.credentials {
        Some(Ok(c)) => c.uid[1].to_string(),
        _ => "?".into(),
    }
}

/// The ids and capability sets, or why they are not known.
fn creds(d: &TaskDetails) -> String {
    match &d.credentials {
        Some(Ok(c)) => {
            let ids = |v: [u32; 4]| v.map(|id| id.to_string()).join(",");
            let k = &c.capabilities;
            let ambient = k
                .ambient
                .map_or_else(|| "-".into(), |a| format!("{a:016x}"));
            format!(
                "{:<23}  {:<23}  {:016x} {:016x} {:016x} {:016x} {ambient}",
                ids(c.uid),
                ids(c.gid),
                k.inheritable,
                k.permitted,
                k.effective,
                k.bounding
            )
        }
        Some(Err(why)) => format!("unknown: {}", escape(why)),
        None => "unknown".into(),
    }
}

/// The JSON line of a process.
fn process_json(p: &Process, d: &TaskDetails) -> serde_json::Value {
    let threads: Vec<_> = p
        .threads
        .iter()
        .map(|t| json!({"pid": t.pid, "name": t.name, "state": t.state.to_string()}))
        .collect();
    let mut line = json!({
        "pid": p.pid, "ppid": p.ppid, "tgid": p.tgid, "name": p.name,
        "cmdline": p.cmdline.join(" "), "args": p.cmdline,
        "state": p.state.to_string(), "kernel_thread": p.kernel_thread,
        "dtb": p.dtb.map(hex), "task": hex(p.task), "mm": p.mm.map(hex),
        "threads": threads, "start_time_ns": d.start_time,
        "exe": d.executable.as_ref().and_then(|e| e.as_ref().ok()),
    });
    if let Some(Ok(c)) = &d.credentials {
        let k = &c.capabilities;
        let cap = |v: u64| format!("{v:016x}");
        line["uid"] = json!(c.uid);
        line["gid"] = json!(c.gid);
        line["capabilities"] = json!({
            "inheritable": cap(k.inheritable), "permitted": cap(k.permitted),
            "effective": cap(k.effective), "bounding": cap(k.bounding),
            "ambient": k.ambient.map(cap),
        });
    }
    line
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
