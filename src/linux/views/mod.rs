//! What hides: each task found through the kernel's independent views of
//! its tasks, and a task missing from a view that must hold it reported
//! with the views that have it, as a rootkit that unlinks a process from
//! one of them leaves it.
//!
//! The views, read beside each other so they share their batches:
//! - the pid table: the process walk ([`Kernel::processes`]), every task
//!   with a pid;
//! - the task list (`init_task.tasks`, every thread-group leader): each
//!   known task's links are read in one batch beside the walk's `mm`s,
//!   the chain followed from `init_task` in memory, and only nodes no
//!   other view knows are read, a batch per step of such a run;
//! - each thread group (`signal->thread_head` through `thread_node`, or
//!   the `thread_group` ring of older kernels): every group's head in one
//!   batch, its chain followed the same way;
//! - the scheduler: each CPU's run queue (`runqueues` at each CPU's
//!   offset, `nr_cpu_ids` of them): the task it runs and the red-black
//!   tree of its runnable fair-class tasks (into each group's own queue),
//!   read from the walk's first batch on.
//!
//! On the test guest this costs the process walk's calls and none more.
//! Tasks found only outside the pid table have their own groups walked
//! after (a batch a step). A list is followed by `structures::list`'s
//! rules (back links checked, loops cut, a wild link stops that end), and
//! all of them together read no more tasks than the target's memory
//! holds. A view cut somewhere is listed in [`ProcessViews::failed`], and
//! a task's absence from it is then not reported: only a view read whole
//! says what it lacks. Idle tasks (pid 0, one a CPU) are in no pid table
//! and on no task list: they are left out. A task sleeping is on no run
//! queue, which is no finding: the run queues only add tasks.
//!
//! A running target changes while it is read: a task that starts or exits
//! meanwhile may show in one view and not another. Read a paused target
//! or an image for one moment's answer.

use std::fmt;

use futures::future::BoxFuture;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::ViewsLayout;
use crate::linux::structures::list::Budget;
use crate::linux::{Kernel, ProcessList, Stage};

mod lists;
mod scheduler;
#[cfg(test)]
mod tests;

use lists::Lists;
use scheduler::RunQueues;

/// The symbols the run queues are found by.
pub(crate) const SYMBOLS: [&str; 3] = ["runqueues", "nr_cpu_ids", "__per_cpu_offset"];
/// No pid is this large (`PID_MAX_LIMIT` on 64-bit kernels).
const PID_MAX_LIMIT: u32 = 4 * 1024 * 1024;

/// A view of the kernel's tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum View {
    /// The pid table (`init_pid_ns.idr`): every task with a pid.
    PidTable,
    /// The task list (`init_task.tasks`): every thread-group leader.
    TaskList,
    /// Its thread group's list: every task of the group.
    ThreadGroup,
    /// A CPU's run queue: the task it runs, and those waiting to.
    RunQueue,
}

impl fmt::Display for View {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            View::PidTable => "pid table",
            View::TaskList => "task list",
            View::ThreadGroup => "thread group",
            View::RunQueue => "run queue",
        })
    }
}

/// A task, and the views that have it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskViews {
    /// Address of its `task_struct`.
    pub task: u64,
    /// Its pid and thread group: as the pid table checked them, else as
    /// the task says (its pid the table's when the table files it but
    /// the walk did not believe it; its tgid 0 when it could not be read).
    pub pid: u32,
    pub tgid: u32,
    /// Its `comm`, decoded lossily.
    pub name: String,
    /// The views that have it, in [`View`]'s order.
    pub seen_in: Vec<View>,
    /// The views it must be in, read whole, that lack it: the pid table
    /// (every task), the task list (a thread-group leader), its thread
    /// group (every task).
    pub missing_from: Vec<View>,
    /// The CPU whose run queue has it, running or runnable.
    pub cpu: Option<u32>,
}

/// What a view could not read, or read and did not believe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewFailure {
    /// The view.
    pub view: View,
    /// The address concerned (0 for none).
    pub address: u64,
    /// Why, in one line.
    pub reason: String,
}

impl fmt::Display for ViewFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.address {
            0 => write!(f, "{}: {}", self.view, self.reason),
            at => write!(f, "{} at {at:#x}: {}", self.view, self.reason),
        }
    }
}

/// Every task the views found, and what they could not read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessViews {
    /// Every task found (idle tasks left out), by pid and address.
    pub tasks: Vec<TaskViews>,
    /// What each view could not read: its absences from there on are not
    /// reported.
    pub failed: Vec<ViewFailure>,
    /// The views not read at all, each with why (a member the kernel's
    /// BTF lacks, a symbol it does not have).
    pub unread: Vec<(View, String)>,
    /// The thread groups walked.
    pub thread_groups: usize,
    /// The run queues read, one a CPU.
    pub run_queues: Vec<RunQueue>,
}

/// A CPU's run queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunQueue {
    /// The CPU.
    pub cpu: u32,
    /// Address of its `struct rq`.
    pub address: u64,
    /// The task it runs (`curr`): its idle task when it has nothing to
    /// run.
    pub running: u64,
    /// Its idle task (pid 0; the first CPU's is `init_task`).
    pub idle: u64,
}

impl ProcessViews {
    /// The tasks missing from a view that must have them.
    pub fn hidden(&self) -> impl Iterator<Item = &TaskViews> {
        self.tasks.iter().filter(|t| !t.missing_from.is_empty())
    }

    /// How many tasks `view` has.
    pub fn count_in(&self, view: View) -> usize {
        self.tasks
            .iter()
            .filter(|t| t.seen_in.contains(&view))
            .count()
    }
}

impl Kernel {
    /// Each task through every view (blocking; see
    /// [`Kernel::process_views_async`]).
    pub fn process_views(&self) -> ProcessViews {
        self.memory().block_on(self.process_views_async())
    }

    /// Each task through every view, and the tasks missing from a view
    /// that must have them: the module's documentation says what is read.
    pub async fn process_views_async(&self) -> ProcessViews {
        let layout = match &self.offsets.views {
            Ok(layout) => layout,
            Err(e) => {
                let list = self.processes_async().await;
                let unread =
                    [View::TaskList, View::ThreadGroup, View::RunQueue].map(|v| (v, e.to_string()));
                let (lists, queues) = (Lists::default(), RunQueues::default());
                return assemble(&list, &lists, &queues, unread.into(), None);
            }
        };
        let kmem = self.kernel_memory();
        let budget = lists::budget(&kmem, layout);
        let symbols = SYMBOLS.map(|s| self.symbol(s));
        let walk = |beside| self.processes_beside(beside);
        read(&kmem, layout, &budget, self.init_task(), symbols, walk).await
    }
}

/// What reads the other views beside the pid table's walk, given the
/// tasks the walk checked (with their `mm`s, unused).
type Beside<'a> = Box<dyn FnOnce(Vec<(u64, Option<u64>)>) -> BoxFuture<'a, Lists> + Send + 'a>;

/// The views of the tasks, the pid table from `walk`, which runs the
/// function it is given on the tasks it found while it reads on (`None`
/// when it found none); the run queues from the symbols (`runqueues`,
/// `nr_cpu_ids`, `__per_cpu_offset`).
async fn read<'b, W, F>(
    kmem: &'b KernelMemory<'b>,
    layout: &'b ViewsLayout,
    budget: &'b Budget,
    init_task: u64,
    symbols: [Option<u64>; 3],
    walk: W,
) -> ProcessViews
where
    W: FnOnce(Beside<'b>) -> F,
    F: std::future::Future<Output = (ProcessList, Option<Lists>)>,
{
    let beside: Beside<'b> = Box::new(move |tasks: Vec<(u64, Option<u64>)>| {
        let tasks = tasks.into_iter().map(|t| t.0).collect();
        Box::pin(lists::read(kmem, layout, init_task, tasks, budget))
    });
    let (walked, queues) = futures::join!(walk(beside), scheduler::read(kmem, layout, symbols));
    let (list, lists) = walked;
    let mut unread = Vec::new();
    let mut lists = match lists {
        Some(lists) => lists,
        None => {
            let why =
                "the pid table could not be read, and the other views are read by what it holds";
            unread.extend([View::TaskList, View::ThreadGroup].map(|v| (v, why.to_string())));
            Lists::default()
        }
    };
    if let Err(e) = &layout.tasks {
        unread.push((View::TaskList, e.to_string()));
    }
    if let Err(e) = &layout.groups {
        unread.push((View::ThreadGroup, e.to_string()));
    }
    if let Some(why) = &queues.unread {
        unread.push((View::RunQueue, why.clone()));
    }
    // The groups of tasks only the other views found.
    lists.more_groups(kmem, layout, &queues.spans, budget).await;
    unread.sort();
    unread.dedup_by(|a, b| a.0 == b.0);
    assemble(&list, &lists, &queues, unread, Some(layout))
}

/// Who a task says it is, from its span.
fn identity(layout: &ViewsLayout, bytes: &[u8]) -> Option<(u32, u32, String)> {
    let start = layout.task_span().0;
    let pid = bytes.u32_at(layout.pid - start)?;
    let tgid = bytes.u32_at(layout.tgid - start)?;
    let comm = bytes.bytes_at(layout.comm - start, layout.comm_len)?;
    let end = comm.iter().position(|&c| c == 0).unwrap_or(comm.len());
    Some((
        pid,
        tgid,
        String::from_utf8_lossy(&comm[..end]).into_owned(),
    ))
}

/// A task the pid table files.
enum Filed {
    /// Checked by the walk: its pid, tgid and name.
    Checked(u32, u32, String),
    /// Filed under this pid, but not believed (the walk says why).
    Doubted(u32),
}

/// The pid table's tasks, and whether the table was read whole.
fn pid_table(list: &ProcessList) -> (FxHashMap<u64, Filed>, bool) {
    let mut tasks = FxHashMap::default();
    for p in &list.processes {
        tasks.insert(p.task, Filed::Checked(p.pid, p.tgid, p.name.clone()));
        for t in &p.threads {
            tasks.insert(t.task, Filed::Checked(t.pid, p.tgid, t.name.clone()));
        }
    }
    let mut whole = true;
    for f in &list.failed {
        match f.stage {
            Stage::Layout | Stage::PidTable | Stage::Pid => whole = false,
            Stage::Task => {
                let pid = f.pid.unwrap_or(0);
                tasks.entry(f.address).or_insert(Filed::Doubted(pid));
            }
            _ => {}
        }
    }
    (tasks, whole)
}

/// Every task found, with its views and what it is missing from.
fn assemble(
    list: &ProcessList,
    lists: &Lists,
    queues: &RunQueues,
    unread: Vec<(View, String)>,
    layout: Option<&ViewsLayout>,
) -> ProcessViews {
    let (table, table_whole) = pid_table(list);
    let mut failed: Vec<ViewFailure> = list
        .failed
        .iter()
        .filter(|f| {
            matches!(
                f.stage,
                Stage::Layout | Stage::PidTable | Stage::Pid | Stage::Task
            )
        })
        .map(|f| ViewFailure {
            view: View::PidTable,
            address: f.address,
            reason: f.to_string(),
        })
        .collect();
    failed.extend(lists.failed.iter().cloned());
    failed.extend(queues.failed.iter().cloned());
    let idle: FxHashSet<u64> = queues
        .queues
        .iter()
        .map(|q| q.idle)
        .chain(lists.init_task)
        .collect();
    let on_queue: FxHashMap<u64, u32> = queues.tasks.iter().copied().collect();
    let mut all: Vec<u64> = table.keys().copied().collect();
    all.extend(
        lists
            .task_list
            .iter()
            .flat_map(|l| l.members.iter().copied()),
    );
    all.extend(
        lists
            .groups
            .values()
            .flat_map(|g| g.members.iter().copied()),
    );
    all.extend(on_queue.keys().copied());
    all.sort_unstable();
    all.dedup();
    let mut tasks = Vec::new();
    for task in all.into_iter().filter(|t| !idle.contains(t)) {
        let span = lists.spans.get(&task).or_else(|| queues.spans.get(&task));
        let said = span.zip(layout).and_then(|(bytes, l)| identity(l, bytes));
        let in_table = table.contains_key(&task);
        let on_list = lists.task_list.as_ref().map(|l| l.members.contains(&task));
        let group = lists.group_of(task);
        let in_group = group.map(|g| g.members.contains(&task));
        // Who it is, and whether it leads its group (unknown: no).
        let (pid, tgid, name, leader) = match (table.get(&task), said) {
            (Some(Filed::Checked(pid, tgid, name)), _) => (*pid, *tgid, name.clone(), pid == tgid),
            // The rest as the task says, its tgid unknown (0) unread.
            (Some(Filed::Doubted(pid)), Some((_, tgid, name))) => (*pid, tgid, name, false),
            (Some(Filed::Doubted(pid)), None) => (*pid, 0, String::new(), false),
            (None, Some((pid, tgid, name))) if pid < PID_MAX_LIMIT && tgid < PID_MAX_LIMIT => {
                (pid, tgid, name, pid == tgid)
            }
            // Read, but no task: its pid says so.
            (None, Some((pid, ..))) => {
                let view = match (on_list, in_group) {
                    (Some(true), _) => View::TaskList,
                    (_, Some(true)) => View::ThreadGroup,
                    _ => View::RunQueue,
                };
                failed.push(ViewFailure {
                    view,
                    address: task,
                    reason: format!("linked as a task, but its pid is {pid}: no task"),
                });
                continue;
            }
            // Its failure is listed already.
            (None, None) => continue,
        };

        let mut seen_in = Vec::new();
        let mut missing_from = Vec::new();
        let mut note = |view: View, present: bool, must: bool, whole: bool| {
            if present {
                seen_in.push(view);
            } else if must && whole {
                missing_from.push(view);
            }
        };
        note(View::PidTable, in_table, true, table_whole);
        if let Some(on_list) = on_list {
            let whole = lists.task_list.as_ref().is_some_and(|l| l.whole);
            note(View::TaskList, on_list, leader, whole);
        }
        if let (Some(in_group), Some(g)) = (in_group, group) {
            note(View::ThreadGroup, in_group, true, g.whole);
        }
        note(View::RunQueue, on_queue.contains_key(&task), false, false);
        tasks.push(TaskViews {
            task,
            pid,
            tgid,
            name,
            seen_in,
            missing_from,
            cpu: on_queue.get(&task).copied(),
        });
    }
    tasks.sort_unstable_by_key(|t| (t.pid, t.task));
    ProcessViews {
        tasks,
        failed,
        unread,
        thread_groups: lists.groups.len(),
        run_queues: queues.queues.clone(),
    }
}

/// The tasks the target's memory can hold, one `task_struct` each: what
/// all the lists together read at most.
fn max_tasks(kmem: &KernelMemory<'_>, layout: &ViewsLayout) -> usize {
    let size = layout.task_size.max(1);
    usize::try_from((kmem.limit / size).max(1)).unwrap_or(usize::MAX)
}
