//! Steps 1 to 4 of the walk: the pid table, the `struct pid`s it files,
//! and their tasks, each read once and checked against the way it was
//! reached.

use rustc_hash::FxHashMap;

use super::{failure, ProcessList, Stage, WalkFailure};
use crate::join_all;
use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::ProcessLayout;
use crate::linux::structures::xarray;

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
/// `PID_MAX_LIMIT` on 64-bit kernels: `pid_max` can be raised to it, not
/// past it, so no pid is this large.
const PID_MAX_LIMIT: u64 = 4 * 1024 * 1024;
/// Pids a task keeps in the table at most: its own, and its process's
/// group and session, which outlive their leaders (a pid leaves the table
/// once no task uses it, `free_pid`).
const PIDS_PER_TASK: u64 = 3;

/// The smallest run of bytes that holds every `(offset, len)`: read
/// whole, it is one scatter entry or two instead of one per member.
pub(crate) fn span(members: &[(u64, u64)]) -> (u64, usize) {
    let start = members.iter().map(|m| m.0).min().unwrap_or(0);
    let end = members.iter().map(|m| m.0 + m.1).max().unwrap_or(0);
    (start, (end - start) as usize)
}

/// A task as read, before it is believed.
#[derive(Debug, Clone)]
pub(super) struct TaskFields {
    pub(super) address: u64,
    pub(super) pid: u32,
    pub(super) tgid: u32,
    pub(super) real_parent: u64,
    pub(super) group_leader: u64,
    pub(super) mm: u64,
    pub(super) kernel_thread: bool,
    pub(super) state: char,
    pub(super) name: String,
}

/// `/proc`'s letter for `__state` and `exit_state` (`task_state_index`).
pub(super) fn state_letter(state: u32, exit_state: u32) -> char {
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

/// A pid filed in the table, and the task it leads to.
#[derive(Debug, Clone, Copy)]
struct Filed {
    nr: u32,
    pid: u64,
    task: u64,
}

/// A walk of the processes: the kernel memory it reads, and what it reads
/// by.
pub(super) struct Walk<'a> {
    pub(super) kmem: KernelMemory<'a>,
    pub(super) layout: &'a ProcessLayout,
    pub(super) init_task: u64,
    /// The kernel's top-table entry 511, which every process's table
    /// copies.
    pub(super) top_entry: u64,
}

impl Walk<'_> {
    /// The processes of the pid namespace at `ns`: every step of the
    /// walk, and what each could not read.
    pub(super) async fn run<F: std::future::Future>(
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
            multi_index: false,
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
                .map(|f| failure(Stage::PidTable, None, f.address, f.reason)),
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
}
