//! Steps 5 and 6 of the walk: the tasks gathered into processes with
//! their threads and parents, then every process's `mm` and command line.

use rustc_hash::FxHashMap;

use super::walk::{span, TaskFields, Walk};
use super::{
    failure, split_command_line, Process, ProcessList, Stage, Thread, WalkFailure, ENTRY_ADDRESS,
};
use crate::join_all;
use crate::linux::kmem::Fields;
use crate::linux::user_memory;

/// Most bytes of a command line read; a longer one is cut and reported.
const MAX_COMMAND_LINE: u64 = 1 << 20;

/// Whether `t` is a thread of the process whose task is `leader`: its
/// `group_leader` is that task, both are kernel threads or neither, and
/// they share their `mm` while both have one (a leader that exited before
/// its threads has none).
pub(super) fn thread_of(t: &TaskFields, leader: &TaskFields) -> Result<(), String> {
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

/// What a process's `mm` says.
#[derive(Debug, Clone, Copy)]
struct MmFields {
    dtb: u64,
    args: (u64, u64),
}

impl Walk<'_> {
    /// Steps 5 and 6: the processes with their threads, their parents,
    /// `mm`s and command lines. A task is a thread of the process its
    /// `tgid` names only when that process's task is its `group_leader`
    /// and both are alike (kernel thread or not, the same `mm`); else it
    /// is listed as a process of its own and the failures say why.
    pub(super) async fn processes(
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
        let lines = join_all(mm_fields.iter().map(|mm| async move {
            match mm {
                Some(mm) => Some(self.command_line(mm).await),
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
        let dtb = user_memory::top_table(&self.kmem, at(l.mm_pgd))?;
        Ok(MmFields {
            dtb,
            args: (at(l.mm_arg_start), at(l.mm_arg_end)),
        })
    }

    /// The command line of a process through its own page tables, and whether
    /// its top table maps the kernel as the kernel's does (read in the
    /// same batch as the walk's first level).
    async fn command_line(
        &self,
        mm: &MmFields,
    ) -> (Result<(), String>, Result<Vec<String>, String>) {
        let mem = self.kmem.mem;
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
            let range = mm.args;
            let bytes =
                user_memory::read_range(&self.kmem, mm.dtb, range, MAX_COMMAND_LINE, "arguments");
            Ok(split_command_line(&bytes.await?))
        };
        futures::join!(top, line)
    }
}
