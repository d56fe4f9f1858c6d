//! The processes of a found kernel, read level by level so the walk costs
//! its depth, not its length:
//!
//! 1. `init_pid_ns.idr`'s head entry and base (one batch);
//! 2. the pid table, an xarray, one batch per level (two levels hold 4,096
//!    pids; three, 262,144);
//! 3. every `struct pid` found (its number and its task), one batch;
//! 4. every task's fields, one batch;
//! 5. every process's `mm` fields, one batch;
//! 6. every command line through its process's own page tables, each
//!    process's top table checked at once: four table levels and the data.
//!
//! Eleven device calls on a system whose pids stay under 4,096, twelve
//! above. Every offset comes from the kernel's BTF. Each structure is
//! checked by the links that led to it (a pid's task points back at that
//! pid; a task's pid is the number the table filed it under; a thread's
//! group leader is the task of the process it names), so a task that
//! exits while it is read, or memory that only looks like a task, is
//! reported in [`ProcessList::failed`] instead of listed as fact. The walk
//! is bounded by what the target can hold: pids below `PID_MAX_LIMIT`, no
//! more tasks than its memory has room for `task_struct`s, three pids per
//! task, each node, pid and task read once.

use std::fmt;

use crate::linux::Kernel;
pub(crate) use walk::span;
use walk::Walk;

mod groups;
mod walk;

#[cfg(test)]
mod tests;

/// The address bits of a page-table entry.
const ENTRY_ADDRESS: u64 = 0x000f_ffff_ffff_f000;

/// A process: a thread-group leader (`pid == tgid`), as `/proc/PID` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    /// Its pid (in the first pid namespace).
    pub pid: u32,
    /// Its thread group: its own pid, unless the task is a thread whose
    /// group leader did not check out, listed as a process of its own (then
    /// in the failures).
    pub tgid: u32,
    /// Its parent's thread group (`real_parent->tgid`); 0 for the tasks
    /// the kernel starts itself (pids 1 and 2); `None` when its
    /// `real_parent` is not a task of the pid table (then in the
    /// failures, with the address).
    pub ppid: Option<u32>,
    /// `comm`, at most 15 bytes, decoded lossily.
    pub name: String,
    /// The arguments, read from the process's own memory between
    /// `mm->arg_start` and `arg_end`, as `/proc/PID/cmdline` splits them.
    /// Empty for kernel threads and for processes without memory
    /// (zombies); empty too when unreadable (then in the failures).
    pub cmdline: Vec<String>,
    /// `/proc`'s state letter (R, S, D, T, t, X, Z, P, I).
    pub state: char,
    /// `PF_KTHREAD` is set.
    pub kernel_thread: bool,
    /// Physical address of its top-level page table (`mm->pgd`), checked
    /// to map the kernel; `None` without `mm`.
    pub dtb: Option<u64>,
    /// Address of its `task_struct`.
    pub task: u64,
    /// Address of its `mm_struct`; `None` for kernel threads (whatever
    /// `mm` they borrow) and processes that released theirs.
    pub mm: Option<u64>,
    /// Its other threads, by pid.
    pub threads: Vec<Thread>,
}

/// A thread of a process other than its leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thread {
    /// Its own pid.
    pub pid: u32,
    /// Its own `comm`.
    pub name: String,
    /// Its own state letter.
    pub state: char,
    /// Address of its `task_struct`.
    pub task: u64,
}

/// Which step of the walk a failure belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The kernel's BTF lacks a member the walk reads.
    Layout,
    /// The pid table (`init_pid_ns.idr`) or one of its nodes.
    PidTable,
    /// A `struct pid`.
    Pid,
    /// A `task_struct`.
    Task,
    /// A task's parent.
    Parent,
    /// A process's `mm_struct` or its page table.
    Mm,
    /// A process's command line.
    CommandLine,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Layout => "layout",
            Stage::PidTable => "pid table",
            Stage::Pid => "struct pid",
            Stage::Task => "task",
            Stage::Parent => "parent",
            Stage::Mm => "mm",
            Stage::CommandLine => "command line",
        })
    }
}

/// Something the walk could not read, or read and did not believe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkFailure {
    /// The step.
    pub stage: Stage,
    /// The pid concerned, when known.
    pub pid: Option<u32>,
    /// Kernel virtual address of the structure concerned (0 for layout).
    pub address: u64,
    /// Why.
    pub reason: String,
}

impl fmt::Display for WalkFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.stage)?;
        if let Some(pid) = self.pid {
            write!(f, " of pid {pid}")?;
        }
        if self.address != 0 {
            write!(f, " at {:#x}", self.address)?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// The processes found, by pid, and what could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessList {
    /// Thread-group leaders, by pid.
    pub processes: Vec<Process>,
    /// What was cut, and why; the rest of the list stands.
    pub failed: Vec<WalkFailure>,
}

impl ProcessList {
    /// The process with pid `pid`.
    pub fn get(&self, pid: u32) -> Option<&Process> {
        self.processes
            .binary_search_by_key(&pid, |p| p.pid)
            .ok()
            .map(|at| &self.processes[at])
    }

    /// The process whose top-level page table is `dtb` (flag bits ignored).
    pub fn by_dtb(&self, dtb: u64) -> Option<&Process> {
        let dtb = dtb & ENTRY_ADDRESS;
        self.processes.iter().find(|p| p.dtb == Some(dtb))
    }

    /// Every task: processes and their threads.
    pub fn task_count(&self) -> usize {
        self.processes.iter().map(|p| 1 + p.threads.len()).sum()
    }
}

impl Kernel {
    /// Lists the kernel's processes (blocking; see
    /// [`Kernel::processes_async`]).
    pub fn processes(&self) -> ProcessList {
        self.memory().block_on(self.processes_async())
    }

    /// Lists the kernel's processes from its pid table, with their
    /// threads and command lines: the module's documentation says what is
    /// read in which batch.
    pub async fn processes_async(&self) -> ProcessList {
        self.processes_beside(|_| async {}).await.0
    }

    /// Lists the processes as [`Kernel::processes_async`] does, and runs
    /// `beside` on every task the walk checked (its address, and its `mm`
    /// unless it is a kernel thread) while the walk reads the processes'
    /// `mm`s and command lines: what `beside` reads shares those batches.
    /// `None` from `beside` when the walk stopped before it had tasks.
    pub(crate) async fn processes_beside<F: std::future::Future>(
        &self,
        beside: impl FnOnce(Vec<(u64, Option<u64>)>) -> F,
    ) -> (ProcessList, Option<F::Output>) {
        let layout = match &self.offsets.processes {
            Ok(layout) => layout,
            Err(e) => {
                let list = ProcessList {
                    processes: Vec::new(),
                    failed: vec![failure(Stage::Layout, None, 0, e.to_string())],
                };
                return (list, None);
            }
        };
        let kmem = self.kernel_memory();
        let walk = Walk {
            kmem,
            layout,
            init_task: self.init_task(),
            top_entry: self.image.top_entry,
        };
        let (list, other) = walk.run(self.init_pid_ns(), beside).await;
        (list, Some(other))
    }
}

/// A failure of the walk at `stage`.
fn failure(stage: Stage, pid: Option<u32>, address: u64, reason: String) -> WalkFailure {
    WalkFailure {
        stage,
        pid,
        address,
        reason,
    }
}

/// The arguments in the bytes from `arg_start` to `arg_end`, as
/// `/proc/PID/cmdline` gives them: NUL-separated; when the last byte is
/// not a NUL (the process rewrote its arguments, as `setproctitle` does),
/// one string up to the first NUL.
pub fn split_command_line(bytes: &[u8]) -> Vec<String> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    match bytes.split_last() {
        None => Vec::new(),
        Some((0, args)) => args.split(|&b| b == 0).map(text).collect(),
        Some(_) => {
            let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            vec![text(&bytes[..end])]
        }
    }
}
