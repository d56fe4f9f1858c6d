//! What the process list leaves out and memflow's process information
//! asks for: the path of each process's executable (`mm->exe_file`, what
//! `/proc/PID/exe` names), the status a dead process left
//! (`task->exit_code`), and whether it runs 32-bit code (what its `mm`'s
//! context says, as the kernel's own `is_64bit_mm` reads it).
//!
//! For any number of tasks: one batch for the tasks and their `mm`s, one
//! for the executables' `struct file`s, then one per level of their paths
//! (see `paths`). Every offset comes from BTF.

use std::collections::HashMap;

use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::{CompatFlag, DetailsLayout};
use crate::linux::paths;
use crate::linux::{Kernel, ProcessList};

/// `MM_CONTEXT_UPROBE_IA32` in `mm->context.flags` (bit 0: the value 1
/// before 6.2, the bit number 0 since): the mm runs 32-bit code.
const UPROBE_IA32: u64 = 1;

/// A task's details, as read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskDetails {
    /// The executable's path, or why it could not be read; `None` for a
    /// task with no `mm` (a kernel thread, a zombie) or none mapped.
    pub executable: Option<Result<String, String>>,
    /// `exit_code` as the kernel keeps it: the wait status of a task that
    /// exited (see [`TaskDetails::exit_status`]); `None` when unreadable.
    pub exit_code: Option<i32>,
    /// Whether its `mm` runs 32-bit code; `None` without an `mm`, when
    /// unreadable, or when the kernel keeps no such flag.
    pub compat: Option<bool>,
    /// What could not be read, in one line each.
    pub failed: Vec<String>,
}

impl TaskDetails {
    /// The exit status as a shell reports it: the code given to `exit`,
    /// or 128 plus the number of the signal that ended the task. `None`
    /// when `exit_code` was not read.
    pub fn exit_status(&self) -> Option<i32> {
        self.exit_code.map(exit_status)
    }
}

/// The status a shell reports for wait status `code`.
pub fn exit_status(code: i32) -> i32 {
    match code & 0x7f {
        0 => (code >> 8) & 0xff,
        signal => 128 + signal,
    }
}

/// `EXIT_DEAD | EXIT_ZOMBIE` in `task_struct.exit_state`.
const EXITED: u32 = 0x30;

/// What a task says of itself now: whose it is, and whether it exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskState {
    /// `pid`: a task freed and reused holds another.
    pub pid: u32,
    /// `exit_state`.
    pub exit_state: u32,
    /// `exit_code` (the wait status once it exited).
    pub exit_code: i32,
}

impl TaskState {
    /// Whether the task has exited (a zombie, or dead).
    pub fn exited(&self) -> bool {
        self.exit_state & EXITED != 0
    }
}

impl Kernel {
    /// The processes with the details of every task, by task address
    /// (blocking; see [`Kernel::processes_with_details_async`]).
    pub fn processes_with_details(&self) -> (ProcessList, HashMap<u64, TaskDetails>) {
        self.memory().block_on(self.processes_with_details_async())
    }

    /// The processes ([`Kernel::processes_async`]) with the details of
    /// every task the walk checked, by task address: the details are read
    /// while the walk reads the processes' command lines, so on a system
    /// whose executables lie a few folders deep they cost no read call of
    /// their own.
    pub async fn processes_with_details_async(&self) -> (ProcessList, HashMap<u64, TaskDetails>) {
        let (list, details) = self
            .processes_beside(|tasks| async move {
                let details = self.task_details_async(&tasks).await;
                tasks.into_iter().map(|(t, _)| t).zip(details).collect()
            })
            .await;
        (list, details.unwrap_or_default())
    }

    /// The details of `tasks`, each a `task_struct` address with its `mm`
    /// (`None` for kernel threads and tasks that have none), in their
    /// order (blocking; see [`Kernel::task_details_async`]).
    pub fn task_details(&self, tasks: &[(u64, Option<u64>)]) -> Vec<TaskDetails> {
        self.memory().block_on(self.task_details_async(tasks))
    }

    /// The details of `tasks`: the module's documentation says what is
    /// read in which batch. Independent of other reads: run beside another
    /// walk, the two share their batches.
    pub async fn task_details_async(&self, tasks: &[(u64, Option<u64>)]) -> Vec<TaskDetails> {
        match &self.offsets.details {
            Ok(layout) => read(&self.kernel_memory(), layout, &self.dnames(), tasks).await,
            Err(e) => {
                let why = format!("process details cannot be read: {e}");
                tasks
                    .iter()
                    .map(|_| TaskDetails {
                        failed: vec![why.clone()],
                        ..TaskDetails::default()
                    })
                    .collect()
            }
        }
    }
}

impl Kernel {
    /// The state of the task at `task` now, in one read (blocking; see
    /// [`Kernel::task_state_async`]).
    pub fn task_state(&self, task: u64) -> Result<TaskState, String> {
        self.memory().block_on(self.task_state_async(task))
    }

    /// The state of the task at `task` now: its pid, `exit_state` and
    /// `exit_code`, read in one span; the reason when unreadable.
    pub async fn task_state_async(&self, task: u64) -> Result<TaskState, String> {
        let layout = self.offsets.details.as_ref().map_err(|e| e.to_string())?;
        let (pid, exit_state, exit_code) = (layout.pid, layout.exit_state, layout.exit_code);
        let first = pid.min(exit_state).min(exit_code);
        let len = (pid.max(exit_state).max(exit_code) + 4 - first) as usize;
        let bytes = self
            .kernel_memory()
            .read_vec(task.wrapping_add(first), len)
            .await?;
        let word = |o: u64| bytes.u32_at(o - first).unwrap_or(0);
        Ok(TaskState {
            pid: word(pid),
            exit_state: word(exit_state),
            exit_code: word(exit_code) as i32,
        })
    }
}

/// Reads the details of `tasks` (see [`Kernel::task_details`]).
pub(crate) async fn read(
    kmem: &KernelMemory<'_>,
    layout: &DetailsLayout,
    dnames: &paths::Dnames,
    tasks: &[(u64, Option<u64>)],
) -> Vec<TaskDetails> {
    let (mm_first, mm_len) = layout.mm_span();
    let reads = futures::future::join_all(tasks.iter().map(|&(task, mm)| async move {
        let exit_code = kmem.read_vec(task.wrapping_add(layout.exit_code), 4);
        let mm = async {
            match mm {
                Some(mm) => Some(kmem.read_vec(mm.wrapping_add(mm_first), mm_len).await),
                None => None,
            }
        };
        futures::join!(exit_code, mm)
    }))
    .await;
    let mut details = Vec::with_capacity(tasks.len());
    let mut files = Vec::new();
    for (&(task, mm), (exit_code, mm_bytes)) in tasks.iter().zip(reads) {
        let mut d = TaskDetails::default();
        let mut exe = None;
        match exit_code {
            Ok(bytes) => d.exit_code = bytes.u32_at(0).map(|c| c as i32),
            Err(why) => d.failed.push(format!("exit_code of task {task:#x}: {why}")),
        }
        match (mm, mm_bytes) {
            (Some(mm), Some(Err(why))) => d.failed.push(format!("mm {mm:#x}: {why}")),
            (_, Some(Ok(bytes))) => {
                let at = |o: u64| bytes.u64_at(o - mm_first).unwrap_or(0);
                d.compat = layout.compat.map(|flag| match flag {
                    CompatFlag::Flags(o) => at(o) & UPROBE_IA32 != 0,
                    CompatFlag::Ia32Compat(o) => bytes.u32_at(o - mm_first) != Some(0),
                });
                let file = at(layout.exe_file);
                if file != 0 {
                    files.push(file);
                    exe = Some(file);
                }
            }
            _ => {}
        }
        details.push((d, exe));
    }
    files.sort_unstable();
    files.dedup();
    let infos: HashMap<u64, paths::FileInfo> =
        paths::files(kmem, &layout.paths, dnames, &files).await;
    details
        .into_iter()
        .map(|(mut d, file)| {
            if let Some(file) = file {
                d.executable = Some(match infos.get(&file) {
                    Some(info) => info.path.clone(),
                    None => Err(format!("struct file {file:#x} not walked")),
                });
            }
            d
        })
        .collect()
}

#[cfg(test)]
mod tests;
