//! What the process list leaves out: the path of each process's
//! executable (`mm->exe_file`, what `/proc/PID/exe` names), the status a
//! dead process left (`task->exit_code`), whether it runs 32-bit code
//! (what its `mm`'s context says, as the kernel's own `is_64bit_mm` reads
//! it), its credentials and start time (as `/proc/PID/status` and `stat`
//! show them), and, when asked, its environment (`/proc/PID/environ`).
//!
//! For any number of tasks: one batch for the tasks and their `mm`s, then
//! at once the executables' `struct file`s and one batch per level of
//! their paths (see `paths`), the credentials, and the environments
//! through each process's own page tables (a batch per table level and
//! one for the bytes). Every offset comes from BTF.

use std::collections::HashMap;

use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::{CompatFlag, DetailsLayout};
use crate::linux::paths;
use crate::linux::{Kernel, ProcessList};

mod credentials;
mod environment;

pub use credentials::{Capabilities, Credentials};

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
    /// Its credentials, or why they could not be read; `None` when the
    /// kernel's BTF lacks them (see [`Kernel::details_unknown`]).
    pub credentials: Option<Result<Credentials, String>>,
    /// When it started, in nanoseconds since boot; `None` when its task
    /// was unreadable or the kernel's BTF lacks the member.
    pub start_time: Option<u64>,
    /// Its environment, `/proc/PID/environ` split at its NULs, or why it
    /// could not be read; `None` when not asked for, for a task with no
    /// `mm`, or when the kernel's BTF lacks the members.
    pub environment: Option<Result<Vec<String>, String>>,
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

/// The details read only when asked for (the rest always are).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DetailsAsked {
    /// Each process's environment.
    pub environment: bool,
}

impl Kernel {
    /// The processes with the details of every task, by task address
    /// (blocking; see [`Kernel::processes_with_details_async`]).
    pub fn processes_with_details(&self) -> (ProcessList, HashMap<u64, TaskDetails>) {
        self.processes_with(DetailsAsked::default())
    }

    /// The processes with the details of every task, those in `asked`
    /// too (blocking; see [`Kernel::processes_with_async`]).
    pub fn processes_with(&self, asked: DetailsAsked) -> (ProcessList, HashMap<u64, TaskDetails>) {
        self.memory().block_on(self.processes_with_async(asked))
    }

    /// The processes ([`Kernel::processes_async`]) with the details of
    /// every task the walk checked, by task address: the details are read
    /// while the walk reads the processes' command lines, so on a system
    /// whose executables lie a few folders deep they cost no read call of
    /// their own.
    pub async fn processes_with_details_async(&self) -> (ProcessList, HashMap<u64, TaskDetails>) {
        self.processes_with_async(DetailsAsked::default()).await
    }

    /// The processes with the details of every task, those in `asked`
    /// too, as [`Kernel::processes_with_details_async`] reads them (an
    /// environment is read through its process's page tables beside the
    /// command lines, sharing their batches).
    pub async fn processes_with_async(
        &self,
        asked: DetailsAsked,
    ) -> (ProcessList, HashMap<u64, TaskDetails>) {
        let (list, details) = self
            .processes_beside(|tasks| async move {
                let details = self.task_details_with_async(&tasks, asked).await;
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

    /// The details of `tasks` but those read only when asked for.
    pub async fn task_details_async(&self, tasks: &[(u64, Option<u64>)]) -> Vec<TaskDetails> {
        self.task_details_with_async(tasks, DetailsAsked::default())
            .await
    }

    /// The details of `tasks`, those in `asked` too: the module's
    /// documentation says what is read in which batch. Independent of
    /// other reads: run beside another walk, the two share their batches.
    pub async fn task_details_with_async(
        &self,
        tasks: &[(u64, Option<u64>)],
        asked: DetailsAsked,
    ) -> Vec<TaskDetails> {
        match &self.offsets.details {
            Ok(layout) => {
                let kmem = self.kernel_memory();
                read(&kmem, layout, &self.dnames(), tasks, asked).await
            }
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

    /// The details this kernel's BTF cannot give, each with why (what a
    /// front end says once, leaving those columns empty).
    pub fn details_unknown(&self) -> Vec<String> {
        let layout = match &self.offsets.details {
            Ok(layout) => layout,
            Err(e) => return vec![format!("process details: {e}")],
        };
        let mut unknown = Vec::new();
        if let Err(e) = &layout.credentials {
            unknown.push(format!("credentials: {e}"));
        }
        if let Err(e) = &layout.start_time {
            unknown.push(format!("start time: {e}"));
        }
        if let Err(e) = &layout.environment {
            unknown.push(format!("environment: {e}"));
        }
        unknown
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
    asked: DetailsAsked,
) -> Vec<TaskDetails> {
    let environment = match asked.environment {
        true => layout.environment.as_ref().ok(),
        false => None,
    };
    let (task_first, task_len) = layout.task_span();
    let (mm_first, mm_len) = layout.mm_span(environment.is_some());
    let reads = futures::future::join_all(tasks.iter().map(|&(task, mm)| async move {
        let task = kmem.read_vec(task.wrapping_add(task_first), task_len);
        let mm = async {
            match mm {
                Some(mm) => Some(kmem.read_vec(mm.wrapping_add(mm_first), mm_len).await),
                None => None,
            }
        };
        futures::join!(task, mm)
    }))
    .await;
    let mut details = Vec::with_capacity(tasks.len());
    let mut files = Vec::new();
    let mut creds = Vec::new();
    let mut environments = Vec::new();
    for (&(task, mm), (task_bytes, mm_bytes)) in tasks.iter().zip(reads) {
        let mut d = TaskDetails::default();
        let mut exe = None;
        match task_bytes {
            Ok(bytes) => {
                let at = |o: u64| o - task_first;
                d.exit_code = bytes.u32_at(at(layout.exit_code)).map(|c| c as i32);
                if let Ok(&start) = layout.start_time.as_ref() {
                    d.start_time = bytes.u64_at(at(start));
                }
                if let Ok(c) = &layout.credentials {
                    creds.push((details.len(), bytes.u64_at(at(c.pointer)).unwrap_or(0)));
                }
            }
            Err(why) => d.failed.push(format!("task {task:#x}: {why}")),
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
                if let Some(env) = environment {
                    let area = (at(env.pgd), at(env.start), at(env.end));
                    environments.push((details.len(), area));
                }
            }
            _ => {}
        }
        details.push((d, exe));
    }
    files.sort_unstable();
    files.dedup();
    let cred_reads = async {
        match &layout.credentials {
            Ok(c) => {
                let read = |&(_, cred): &(usize, u64)| credentials::read(kmem, c, cred);
                futures::future::join_all(creds.iter().map(read)).await
            }
            Err(_) => Vec::new(),
        }
    };
    // Threads share their process's memory: each area read once.
    let mut areas: Vec<(u64, u64, u64)> = environments.iter().map(|e| e.1).collect();
    areas.sort_unstable();
    areas.dedup();
    let env_reads =
        futures::future::join_all(areas.iter().map(|&area| environment::read(kmem, area)));
    let (infos, cred_values, env_values) = futures::join!(
        paths::files(kmem, &layout.paths, dnames, &files),
        cred_reads,
        env_reads
    );
    let infos: HashMap<u64, paths::FileInfo> = infos;
    for ((at, _), value) in creds.into_iter().zip(cred_values) {
        details[at].0.credentials = Some(value);
    }
    for (at, area) in environments {
        let value = areas.binary_search(&area).map(|i| env_values[i].clone());
        details[at].0.environment = value.ok();
    }
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
