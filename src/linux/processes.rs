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

use rustc_hash::FxHashMap;

use crate::join_all;
use crate::linux::btf::{Btf, BtfError};
use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::xarray::{self, XaLayout};
use crate::linux::Kernel;
use crate::{AddressSpace, Memory};

/// `PF_KTHREAD` in `task_struct.flags` (`include/linux/sched.h`).
const PF_KTHREAD: u32 = 0x0020_0000;
/// The state bits `/proc` reports (`TASK_REPORT`): running (0),
/// interruptible, uninterruptible, stopped, traced, dead, zombie, parked.
const TASK_REPORT: u32 = 0x7f;
/// `TASK_IDLE`: uninterruptible and not counted in the load.
const TASK_IDLE: u32 = 0x402;
/// `TASK_RTLOCK_WAIT`, which `/proc` shows as uninterruptible.
const TASK_RTLOCK_WAIT: u32 = 0x1000;
/// `/proc`'s letters, by the highest reported state bit (`fls`).
const STATE_LETTERS: &[u8; 9] = b"RSDTtXZPI";
/// Most bytes of a command line read; a longer one is cut and reported.
const MAX_COMMAND_LINE: u64 = 1 << 20;
/// `PID_MAX_LIMIT` on 64-bit kernels: `pid_max` can be raised to it, not
/// past it, so no pid is this large.
const PID_MAX_LIMIT: u64 = 4 * 1024 * 1024;
/// Pids a task keeps in the table at most: its own, and its process's
/// group and session, which outlive their leaders (a pid leaves the table
/// once no task uses it, `free_pid`).
const PIDS_PER_TASK: u64 = 3;
/// User addresses lie below this (47-bit canonical lower half).
const USER_END: u64 = 0x0000_8000_0000_0000;
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
    pub fn processes(&self, mem: &Memory) -> ProcessList {
        mem.block_on(self.processes_async(mem))
    }

    /// Lists the kernel's processes from its pid table, with their
    /// threads and command lines: the module's documentation says what is
    /// read in which batch.
    pub async fn processes_async(&self, mem: &Memory) -> ProcessList {
        self.processes_beside(mem, |_| async {}).await.0
    }

    /// Lists the processes as [`Kernel::processes_async`] does, and runs
    /// `beside` on every task the walk checked (its address, and its `mm`
    /// unless it is a kernel thread) while the walk reads the processes'
    /// `mm`s and command lines: what `beside` reads shares those batches.
    /// `None` from `beside` when the walk stopped before it had tasks.
    pub(crate) async fn processes_beside<F: std::future::Future>(
        &self,
        mem: &Memory,
        beside: impl FnOnce(Vec<(u64, Option<u64>)>) -> F,
    ) -> (ProcessList, Option<F::Output>) {
        let layout = match Layout::from_btf(&self.btf) {
            Ok(layout) => layout,
            Err(e) => {
                let list = ProcessList {
                    processes: Vec::new(),
                    failed: vec![failure(Stage::Layout, None, 0, e.to_string())],
                };
                return (list, None);
            }
        };
        let kmem = self.kernel_memory(mem);
        let walk = Walk {
            kmem,
            layout: &layout,
            init_task: self.init_task(),
            top_entry: self.image.top_entry,
        };
        let (list, other) = walk.run(self.init_pid_ns(), beside).await;
        (list, Some(other))
    }
}

fn failure(stage: Stage, pid: Option<u32>, address: u64, reason: String) -> WalkFailure {
    WalkFailure {
        stage,
        pid,
        address,
        reason,
    }
}

/// Byte offsets (and a few sizes) of everything the walk reads, from BTF.
#[derive(Debug, Clone)]
struct Layout {
    xa: XaLayout,
    /// `pid_namespace.idr.idr_rt`, the xarray.
    ns_array: u64,
    /// `pid_namespace.idr.idr_rt.xa_head`.
    ns_head: u64,
    /// `pid_namespace.idr.idr_base`: the first pid's index.
    ns_base: u64,
    /// `pid.tasks[PIDTYPE_PID].first`.
    pid_first: u64,
    /// `pid.numbers[0].nr` (`numbers` is a flexible array).
    pid_nr: u64,
    task: TaskLayout,
    /// `mm_struct.pgd`, `arg_start`, `arg_end`.
    mm_pgd: u64,
    mm_arg_start: u64,
    mm_arg_end: u64,
}

/// `task_struct`'s members.
#[derive(Debug, Clone, Copy)]
struct TaskLayout {
    /// `__state` (from 5.14), else `state`; its low 32 bits are read.
    state: u64,
    exit_state: u64,
    flags: u64,
    pid: u64,
    tgid: u64,
    real_parent: u64,
    comm: u64,
    comm_len: u64,
    mm: u64,
    /// `pid_links[PIDTYPE_PID]`, the `hlist_node` its pid's list holds.
    pid_link: u64,
    thread_pid: u64,
    group_leader: u64,
    /// `sizeof(struct task_struct)`, at least the span read of it.
    size: u64,
}

/// Asks `btf` every question the walk asks (what a warm start must have
/// the answers to).
pub(super) fn ask_layout(btf: &Btf) -> Result<(), BtfError> {
    Layout::from_btf(btf).map(drop)
}

impl Layout {
    fn from_btf(btf: &Btf) -> Result<Layout, BtfError> {
        let pid_type = btf.enum_value("PIDTYPE_PID").ok_or_else(|| {
            BtfError::Parse("BTF has no enumerator PIDTYPE_PID (enum pid_type)".into())
        })?;
        let task = |m: &str| btf.member_offset("task_struct", m);
        let mm = |m: &str| btf.member_offset("mm_struct", m);
        let comm_len = btf.member_size("task_struct", "comm")?;
        Ok(Layout {
            xa: XaLayout::from_btf(btf)?,
            ns_array: btf.member_offset("pid_namespace", "idr.idr_rt")?,
            ns_head: btf.member_offset("pid_namespace", "idr.idr_rt.xa_head")?,
            ns_base: btf.member_offset("pid_namespace", "idr.idr_base")?,
            pid_first: btf.member_offset("pid", &format!("tasks[{pid_type}].first"))?,
            pid_nr: btf.member_offset("pid", "numbers")? + btf.member_offset("upid", "nr")?,
            task: TaskLayout {
                state: task("__state").or_else(|_| task("state"))?,
                exit_state: task("exit_state")?,
                flags: task("flags")?,
                pid: task("pid")?,
                tgid: task("tgid")?,
                real_parent: task("real_parent")?,
                comm: task("comm")?,
                comm_len: comm_len.min(64),
                mm: task("mm")?,
                pid_link: task(&format!("pid_links[{pid_type}]"))?,
                thread_pid: task("thread_pid")?,
                group_leader: task("group_leader")?,
                size: btf.size_of("task_struct")?,
            },
            mm_pgd: mm("pgd")?,
            mm_arg_start: mm("arg_start")?,
            mm_arg_end: mm("arg_end")?,
        })
    }
}

/// The smallest run of bytes that holds every `(offset, len)`: read
/// whole, it is one scatter entry or two instead of one per member.
fn span(members: &[(u64, u64)]) -> (u64, usize) {
    let start = members.iter().map(|m| m.0).min().unwrap_or(0);
    let end = members.iter().map(|m| m.0 + m.1).max().unwrap_or(0);
    (start, (end - start) as usize)
}

/// A task as read, before it is believed.
#[derive(Debug, Clone)]
struct TaskFields {
    address: u64,
    pid: u32,
    tgid: u32,
    real_parent: u64,
    group_leader: u64,
    mm: u64,
    kernel_thread: bool,
    state: char,
    name: String,
}

/// `/proc`'s letter for `__state` and `exit_state` (`task_state_index`).
fn state_letter(state: u32, exit_state: u32) -> char {
    let mut bits = (state | exit_state) & TASK_REPORT;
    if state & TASK_IDLE == TASK_IDLE {
        bits = TASK_REPORT + 1;
    } else if state == TASK_RTLOCK_WAIT {
        bits = 2;
    }
    let highest = (u32::BITS - bits.leading_zeros()) as usize;
    STATE_LETTERS[highest] as char
}

/// `comm` up to its NUL.
fn comm_text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
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

/// Whether `t` is a thread of the process whose task is `leader`: its
/// `group_leader` is that task, both are kernel threads or neither, and
/// they share their `mm` while both have one (a leader that exited before
/// its threads has none).
fn thread_of(t: &TaskFields, leader: &TaskFields) -> Result<(), String> {
    if t.group_leader != leader.address {
        return Err(format!(
            "its group_leader is {:#x}, not that process's task {:#x}",
            t.group_leader, leader.address
        ));
    }
    if t.kernel_thread != leader.kernel_thread {
        let kind = |k: bool| if k { "a kernel thread" } else { "a user task" };
        return Err(format!(
            "it is {} and that process {}",
            kind(t.kernel_thread),
            kind(leader.kernel_thread)
        ));
    }
    if t.mm != 0 && leader.mm != 0 && t.mm != leader.mm {
        return Err(format!(
            "its mm is {:#x}, that process's {:#x}",
            t.mm, leader.mm
        ));
    }
    Ok(())
}

/// A pid filed in the table, and the task it leads to.
#[derive(Debug, Clone, Copy)]
struct Filed {
    nr: u32,
    pid: u64,
    task: u64,
}

/// What a process's `mm` says.
#[derive(Debug, Clone, Copy)]
struct MmFields {
    dtb: u64,
    args: (u64, u64),
}

struct Walk<'a> {
    kmem: KernelMemory<'a>,
    layout: &'a Layout,
    init_task: u64,
    /// The kernel's top-table entry 511, which every process's table
    /// copies.
    top_entry: u64,
}

impl Walk<'_> {
    async fn run<F: std::future::Future>(
        &self,
        ns: u64,
        beside: impl FnOnce(Vec<(u64, Option<u64>)>) -> F,
    ) -> (ProcessList, F::Output) {
        let mut failed = Vec::new();
        let filed = self.pid_table(ns, &mut failed).await;
        let tasks = self.tasks(&filed, &mut failed).await;
        let found = tasks
            .iter()
            .map(|t| (t.address, (t.mm != 0 && !t.kernel_thread).then_some(t.mm)))
            .collect();
        let (mut list, other) = futures::join!(self.processes(tasks, &mut failed), beside(found));
        list.failed = failed;
        (list, other)
    }

    /// The most tasks the target's memory can hold: one `task_struct`
    /// each.
    fn max_tasks(&self) -> u64 {
        let (start, len) = self.task_span();
        let size = self.layout.task.size.max(start + len as u64).max(1);
        (self.kmem.limit / size).max(1)
    }

    /// Steps 1 to 3: the pids in the table, each with its task. The table
    /// is read within what the kernel allows: indices below
    /// `PID_MAX_LIMIT`, and at most [`PIDS_PER_TASK`] pids for each task
    /// the target's memory can hold; each `struct pid` once.
    async fn pid_table(&self, ns: u64, failed: &mut Vec<WalkFailure>) -> Vec<Filed> {
        let l = self.layout;
        let (start, len) = span(&[(l.ns_head, 8), (l.ns_base, 4)]);
        let idr = match self.kmem.read_vec(ns + start, len).await {
            Ok(idr) => idr,
            Err(why) => {
                failed.push(failure(Stage::PidTable, None, ns, why));
                return Vec::new();
            }
        };
        let head = idr.u64_at(l.ns_head - start).unwrap_or(0);
        let base = idr.u32_at(l.ns_base - start).unwrap_or(0);
        let max_pids = (PIDS_PER_TASK * self.max_tasks()).min(PID_MAX_LIMIT);
        let limits = xarray::Limits {
            max_index: (PID_MAX_LIMIT - 1).saturating_sub(u64::from(base)),
            max_entries: max_pids as usize,
        };
        let tree = xarray::entries(&self.kmem, &l.xa, ns + l.ns_array, head, limits).await;
        if tree.at_limit {
            failed.push(failure(
                Stage::PidTable,
                None,
                ns,
                format!(
                    "more pids than {max_pids}, {PIDS_PER_TASK} for each of the {} task_structs {} bytes of memory hold: the first {max_pids} read",
                    self.max_tasks(),
                    self.kmem.limit
                ),
            ));
        }
        failed.extend(
            tree.failed
                .into_iter()
                .map(|(node, why)| failure(Stage::PidTable, None, node, why)),
        );
        // A `struct pid` has one number: filed under several, it is read
        // once, for the first, and said once.
        let mut filed_at: FxHashMap<u64, (u64, usize)> = FxHashMap::default();
        let mut entries = Vec::with_capacity(tree.entries.len());
        for (index, pid) in tree.entries {
            match filed_at.get_mut(&pid) {
                None => {
                    filed_at.insert(pid, (index, 0));
                    entries.push((index, pid));
                }
                Some((_, more)) => *more += 1,
            }
        }
        let mut twice: Vec<(u64, u64, usize)> = filed_at
            .into_iter()
            .filter(|(_, (_, more))| *more > 0)
            .map(|(pid, (first, more))| (first, pid, more))
            .collect();
        twice.sort_unstable();
        for (first, pid, more) in twice {
            failed.push(failure(
                Stage::PidTable,
                None,
                pid,
                format!(
                    "struct pid filed under {more} more indices than its own ({first}): read once"
                ),
            ));
        }
        let (start, len) = span(&[(l.pid_first, 8), (l.pid_nr, 4)]);
        let pids = join_all(
            entries
                .iter()
                .map(|&(_, pid)| self.kmem.read_vec(pid.wrapping_add(start), len)),
        )
        .await;
        let mut filed = Vec::new();
        for (&(index, pid), bytes) in entries.iter().zip(pids) {
            // `max_index` keeps the sum below PID_MAX_LIMIT.
            let nr = (index + u64::from(base)) as u32;
            let bytes = match bytes {
                Ok(bytes) => bytes,
                Err(why) => {
                    failed.push(failure(Stage::Pid, Some(nr), pid, why));
                    continue;
                }
            };
            let number = bytes.u32_at(l.pid_nr - start).unwrap_or(0);
            if number != nr {
                failed.push(failure(
                    Stage::Pid,
                    Some(nr),
                    pid,
                    format!("struct pid holds number {number}, but the table files it as {nr}"),
                ));
                continue;
            }
            // No task: a process group or session id that outlives its
            // leader.
            let first = bytes.u64_at(l.pid_first - start).unwrap_or(0);
            if first != 0 {
                let task = first.wrapping_sub(l.task.pid_link);
                filed.push(Filed { nr, pid, task });
            }
        }
        filed
    }

    /// The span of a task read: every member the walk uses.
    fn task_span(&self) -> (u64, usize) {
        let t = &self.layout.task;
        span(&[
            (t.state, 4),
            (t.exit_state, 4),
            (t.flags, 4),
            (t.pid, 4),
            (t.tgid, 4),
            (t.real_parent, 8),
            (t.group_leader, 8),
            (t.comm, t.comm_len),
            (t.mm, 8),
            (t.pid_link, 16),
            (t.thread_pid, 8),
        ])
    }

    /// Step 4: every task's fields, each task read once and checked
    /// against the pid it was reached from; no more tasks than the
    /// target's memory holds.
    async fn tasks(&self, filed: &[Filed], failed: &mut Vec<WalkFailure>) -> Vec<TaskFields> {
        let t = &self.layout.task;
        let (start, len) = self.task_span();
        let mut first_pid: FxHashMap<u64, u32> = FxHashMap::default();
        let mut distinct = Vec::with_capacity(filed.len());
        for f in filed {
            match first_pid.get(&f.task) {
                Some(&other) => failed.push(failure(
                    Stage::Task,
                    Some(f.nr),
                    f.task,
                    format!("the same task as pid {other}"),
                )),
                None => {
                    first_pid.insert(f.task, f.nr);
                    distinct.push(*f);
                }
            }
        }
        let max_tasks = self.max_tasks() as usize;
        if distinct.len() > max_tasks {
            failed.push(failure(
                Stage::Task,
                Some(distinct[max_tasks].nr),
                distinct[max_tasks].task,
                format!(
                    "{} tasks, more than the {max_tasks} task_structs of {} bytes that {} bytes of memory hold: those from this pid on not read",
                    distinct.len(),
                    t.size,
                    self.kmem.limit
                ),
            ));
            distinct.truncate(max_tasks);
        }
        let reads = join_all(
            distinct
                .iter()
                .map(|f| self.kmem.read_vec(f.task.wrapping_add(start), len)),
        )
        .await;
        let mut tasks: Vec<TaskFields> = Vec::new();
        for (f, bytes) in distinct.iter().zip(reads) {
            let fail = |why| failure(Stage::Task, Some(f.nr), f.task, why);
            let bytes = match bytes {
                Ok(bytes) => bytes,
                Err(why) => {
                    failed.push(fail(why));
                    continue;
                }
            };
            let u32_at = |at: u64| bytes.u32_at(at - start).unwrap_or(0);
            let u64_at = |at: u64| bytes.u64_at(at - start).unwrap_or(0);
            let pid = u32_at(t.pid);
            let thread_pid = u64_at(t.thread_pid);
            let pprev = u64_at(t.pid_link + 8);
            let expected_pprev = f.pid + self.layout.pid_first;
            let why = if pid != f.nr {
                Some(format!(
                    "the task's pid is {pid}, its struct pid's {}",
                    f.nr
                ))
            } else if thread_pid != f.pid {
                Some(format!(
                    "the task's thread_pid is {thread_pid:#x}, not the struct pid {:#x} that lists it",
                    f.pid
                ))
            } else if pprev != expected_pprev {
                Some(format!(
                    "the task's pid link points back at {pprev:#x}, not at {expected_pprev:#x}"
                ))
            } else {
                None
            };
            if let Some(why) = why {
                failed.push(fail(why));
                continue;
            }
            let flags = u32_at(t.flags);
            let comm = bytes.bytes_at(t.comm - start, t.comm_len).unwrap_or(&[]);
            tasks.push(TaskFields {
                address: f.task,
                pid,
                tgid: u32_at(t.tgid),
                real_parent: u64_at(t.real_parent),
                group_leader: u64_at(t.group_leader),
                mm: u64_at(t.mm),
                kernel_thread: flags & PF_KTHREAD != 0,
                state: state_letter(u32_at(t.state), u32_at(t.exit_state)),
                name: comm_text(comm),
            });
        }
        tasks
    }

    /// Steps 5 and 6: the processes with their threads, their parents,
    /// `mm`s and command lines. A task is a thread of the process its
    /// `tgid` names only when that process's task is its `group_leader`
    /// and both are alike (kernel thread or not, the same `mm`); else it
    /// is listed as a process of its own and the failures say why.
    async fn processes(
        &self,
        tasks: Vec<TaskFields>,
        failed: &mut Vec<WalkFailure>,
    ) -> ProcessList {
        let (mut leaders, others): (Vec<TaskFields>, Vec<TaskFields>) =
            tasks.into_iter().partition(|t| t.pid == t.tgid);
        leaders.sort_unstable_by_key(|t| t.pid);
        let leader_at: FxHashMap<u32, usize> = leaders
            .iter()
            .enumerate()
            .map(|(i, t)| (t.pid, i))
            .collect();
        let mut threads: Vec<Vec<Thread>> = vec![Vec::new(); leaders.len()];
        let mut alone = Vec::new();
        for t in others {
            let group = match leader_at.get(&t.tgid) {
                Some(&at) => thread_of(&t, &leaders[at]).map(|()| at),
                None => Err(format!("no task of the table has pid {}", t.tgid)),
            };
            match group {
                Ok(at) => threads[at].push(Thread {
                    pid: t.pid,
                    name: t.name,
                    state: t.state,
                    task: t.address,
                }),
                Err(why) => {
                    failed.push(failure(
                        Stage::Task,
                        Some(t.pid),
                        t.address,
                        format!(
                            "its tgid says a thread of process {}, but {why}: listed as a process of its own",
                            t.tgid
                        ),
                    ));
                    alone.push(t);
                }
            }
        }
        for t in &leaders {
            if t.group_leader != t.address {
                failed.push(failure(
                    Stage::Task,
                    Some(t.pid),
                    t.address,
                    format!(
                        "its pid is its tgid, but its group_leader is {:#x}, not itself",
                        t.group_leader
                    ),
                ));
            }
        }
        // The process each checked task is listed under, by address: its
        // parent's ppid.
        let mut listed_under: FxHashMap<u64, u32> = FxHashMap::default();
        listed_under.insert(self.init_task, 0);
        for (t, threads) in leaders.iter().zip(&threads) {
            listed_under.insert(t.address, t.pid);
            for thread in threads {
                listed_under.insert(thread.task, t.pid);
            }
        }
        for t in &alone {
            listed_under.insert(t.address, t.pid);
        }
        let all: Vec<(TaskFields, Vec<Thread>)> = leaders
            .into_iter()
            .zip(threads)
            .chain(alone.into_iter().map(|t| (t, Vec::new())))
            .collect();
        let mms = join_all(all.iter().map(|(t, _)| async move {
            match t.mm {
                0 => None,
                _ if t.kernel_thread => None,
                mm => Some(self.mm(mm).await),
            }
        }))
        .await;
        let mut processes = Vec::with_capacity(all.len());
        let mut mm_fields = Vec::with_capacity(all.len());
        for ((t, mut threads), mm) in all.into_iter().zip(mms) {
            let mm = match mm {
                None => None,
                Some(Ok(fields)) => Some(fields),
                Some(Err(why)) => {
                    failed.push(failure(Stage::Mm, Some(t.pid), t.mm, why));
                    None
                }
            };
            let ppid = listed_under.get(&t.real_parent).copied();
            if ppid.is_none() {
                failed.push(failure(
                    Stage::Parent,
                    Some(t.pid),
                    t.real_parent,
                    "its real_parent is not a task of the pid table: ppid unknown".into(),
                ));
            }
            threads.sort_unstable_by_key(|t| t.pid);
            let mm_address = (t.mm != 0 && !t.kernel_thread).then_some(t.mm);
            mm_fields.push(mm);
            processes.push(Process {
                pid: t.pid,
                tgid: t.tgid,
                ppid,
                name: t.name,
                cmdline: Vec::new(),
                state: t.state,
                kernel_thread: t.kernel_thread,
                dtb: None,
                task: t.address,
                mm: mm_address,
                threads,
            });
        }
        let lines = join_all(processes.iter().zip(&mm_fields).map(|(p, mm)| async move {
            match mm {
                Some(mm) => Some(self.command_line(p, mm).await),
                None => None,
            }
        }))
        .await;
        for (p, (line, mm)) in processes.iter_mut().zip(lines.into_iter().zip(mm_fields)) {
            let (Some((checked, line)), Some(mm)) = (line, mm) else {
                continue;
            };
            match checked {
                Ok(()) => p.dtb = Some(mm.dtb),
                Err(why) => failed.push(failure(Stage::Mm, Some(p.pid), p.mm.unwrap_or(0), why)),
            }
            match line {
                Ok(args) => p.cmdline = args,
                Err(why) => failed.push(failure(Stage::CommandLine, Some(p.pid), mm.args.0, why)),
            }
        }
        processes.sort_unstable_by_key(|p| p.pid);
        ProcessList {
            processes,
            failed: Vec::new(),
        }
    }

    /// The `mm_struct` at `mm`: its top table by physical address, and its
    /// argument area.
    async fn mm(&self, mm: u64) -> Result<MmFields, String> {
        let l = self.layout;
        let (start, len) = span(&[(l.mm_pgd, 8), (l.mm_arg_start, 8), (l.mm_arg_end, 8)]);
        let bytes = self.kmem.read_vec(mm.wrapping_add(start), len).await?;
        let at = |m: u64| bytes.u64_at(m - start).unwrap_or(0);
        let pgd = at(l.mm_pgd);
        let dtb = self
            .kmem
            .physical(pgd)
            .filter(|pa| pa % 0x1000 == 0)
            .ok_or_else(|| format!("its pgd {pgd:#x} is no page of the direct map"))?;
        Ok(MmFields {
            dtb,
            args: (at(l.mm_arg_start), at(l.mm_arg_end)),
        })
    }

    /// The command line of `p` through its own page tables, and whether
    /// its top table maps the kernel as the kernel's does (read in the
    /// same batch as the walk's first level).
    async fn command_line(
        &self,
        p: &Process,
        mm: &MmFields,
    ) -> (Result<(), String>, Result<Vec<String>, String>) {
        let mem = self.kmem.mem;
        let space = AddressSpace::new(mem.clone(), mm.dtb, self.kmem.space.paging());
        let (start, end) = mm.args;
        let top = async {
            let entry = mem
                .read_val::<u64>(mm.dtb + 511 * 8)
                .await
                .map_err(|e| format!("its top table at {:#x} is unreadable: {e}", mm.dtb))?;
            let same = entry & 1 == 1 && entry & ENTRY_ADDRESS == self.top_entry & ENTRY_ADDRESS;
            match same {
                true => Ok(()),
                false => Err(format!(
                    "its top table at {:#x} does not map the kernel (entry 511 is {entry:#x})",
                    mm.dtb
                )),
            }
        };
        let line = async {
            if start >= end {
                return Ok(Vec::new());
            }
            if end > USER_END {
                return Err(format!(
                    "arguments at {start:#x}..{end:#x} are not in user memory"
                ));
            }
            let len = (end - start).min(MAX_COMMAND_LINE);
            let mut bytes = vec![0u8; len as usize];
            space.read(start, &mut bytes).await.map_err(|e| {
                format!(
                    "{} of the {len} bytes at {start:#x} unreadable ({})",
                    e.failed_bytes(),
                    e.failed
                        .first()
                        .map(|f| f.reason.to_string())
                        .unwrap_or_default()
                )
            })?;
            if len < end - start {
                return Err(format!(
                    "{} bytes of arguments for pid {}, more than the {MAX_COMMAND_LINE} read",
                    end - start,
                    p.pid
                ));
            }
            Ok(split_command_line(&bytes))
        };
        futures::join!(top, line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_letters_follow_proc() {
        assert_eq!(state_letter(0, 0), 'R');
        assert_eq!(state_letter(1, 0), 'S');
        assert_eq!(state_letter(2, 0), 'D');
        assert_eq!(state_letter(4, 0), 'T');
        assert_eq!(state_letter(8, 0), 't');
        assert_eq!(state_letter(0, 0x20), 'Z');
        assert_eq!(state_letter(0, 0x10), 'X');
        assert_eq!(state_letter(0x40, 0), 'P');
        assert_eq!(state_letter(0x402, 0), 'I');
        assert_eq!(state_letter(0x1000, 0), 'D');
        // Bits /proc does not report (TASK_WAKEKILL with stopped: T).
        assert_eq!(state_letter(0x100 | 4, 0), 'T');
    }

    #[test]
    fn command_lines_split_as_proc_does() {
        assert_eq!(split_command_line(b""), Vec::<String>::new());
        assert_eq!(
            split_command_line(b"sh\0-c\0\0x y\0"),
            ["sh", "-c", "", "x y"]
        );
        // Rewritten in place: one title up to its first NUL.
        assert_eq!(split_command_line(b"title: x\0 junk"), ["title: x"]);
        assert_eq!(split_command_line(b"\xff\0"), ["\u{fffd}"]);
    }

    fn task(address: u64, pid: u32, tgid: u32, mm: u64, kernel_thread: bool) -> TaskFields {
        TaskFields {
            address,
            pid,
            tgid,
            real_parent: 0,
            group_leader: address,
            mm,
            kernel_thread,
            state: 'S',
            name: String::new(),
        }
    }

    #[test]
    fn a_thread_belongs_to_a_group_only_when_its_leader_checks_out() {
        let leader = task(0x1000, 10, 10, 0x9000, false);
        let thread = TaskFields {
            group_leader: 0x1000,
            ..task(0x2000, 11, 10, 0x9000, false)
        };
        assert_eq!(thread_of(&thread, &leader), Ok(()));
        // A leader that exited first has no mm left.
        assert_eq!(thread_of(&thread, &task(0x1000, 10, 10, 0, false)), Ok(()));
        let cases = [
            (
                TaskFields {
                    group_leader: 0x2000,
                    ..thread.clone()
                },
                "its group_leader is 0x2000, not that process's task 0x1000",
            ),
            (
                TaskFields {
                    mm: 0x8000,
                    ..thread.clone()
                },
                "its mm is 0x8000, that process's 0x9000",
            ),
            (
                TaskFields {
                    kernel_thread: true,
                    ..thread.clone()
                },
                "it is a kernel thread and that process a user task",
            ),
        ];
        for (t, why) in cases {
            assert_eq!(thread_of(&t, &leader), Err(why.to_string()));
        }
    }

    #[test]
    fn spans_cover_every_member() {
        assert_eq!(span(&[(0x40, 8), (0x10, 4), (0x30, 16)]), (0x10, 0x38));
    }
}
