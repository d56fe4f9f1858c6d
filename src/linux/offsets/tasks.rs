//! The offsets the tasks are read by: `init_task`'s check when the kernel
//! is found, and the process list's (the pid table, `struct pid`,
//! `task_struct`, `mm_struct`).

use crate::linux::find::btf::{Btf, BtfError};
use crate::linux::offsets::XaLayout;

/// Byte offsets, from BTF, of the members `init_task` is checked by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InitTaskLayout {
    /// `sizeof(struct task_struct)`.
    pub size: u64,
    /// `task_struct.comm`.
    pub comm: u64,
    /// `task_struct.pid`.
    pub pid: u64,
    /// `task_struct.tasks` (a `list_head`: `next`, then `prev`).
    pub tasks: u64,
    /// `task_struct.thread_pid`.
    pub thread_pid: u64,
    /// `struct pid.numbers[0].ns` (`numbers` is a flexible array).
    pub pid_ns: u64,
    /// `task_struct.real_parent`, which a cached kernel's `init_task` is
    /// also checked by (the search does without it).
    pub real_parent: Option<u64>,
}

impl InitTaskLayout {
    /// The offsets in `btf`.
    pub fn from_btf(btf: &Btf) -> Result<InitTaskLayout, BtfError> {
        let task = |m: &str| btf.member_offset("task_struct", m);
        Ok(InitTaskLayout {
            size: btf.size_of("task_struct")?,
            comm: task("comm")?,
            pid: task("pid")?,
            tasks: task("tasks")?,
            thread_pid: task("thread_pid")?,
            // `numbers` is a flexible array: its first element's `ns`.
            pid_ns: btf.member_offset("pid", "numbers")? + btf.member_offset("upid", "ns")?,
            real_parent: task("real_parent").ok(),
        })
    }
}

/// Byte offsets (and a few sizes) of everything the process walk reads,
/// from BTF.
#[derive(Debug, Clone)]
pub(crate) struct ProcessLayout {
    pub(crate) xa: XaLayout,
    /// `pid_namespace.idr.idr_rt`, the xarray.
    pub(crate) ns_array: u64,
    /// `pid_namespace.idr.idr_rt.xa_head`.
    pub(crate) ns_head: u64,
    /// `pid_namespace.idr.idr_base`: the first pid's index.
    pub(crate) ns_base: u64,
    /// `pid.tasks[PIDTYPE_PID].first`.
    pub(crate) pid_first: u64,
    /// `pid.numbers[0].nr` (`numbers` is a flexible array).
    pub(crate) pid_nr: u64,
    pub(crate) task: TaskLayout,
    /// `mm_struct.pgd`, `arg_start`, `arg_end`.
    pub(crate) mm_pgd: u64,
    pub(crate) mm_arg_start: u64,
    pub(crate) mm_arg_end: u64,
}

/// `task_struct`'s members.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskLayout {
    /// `__state` (from 5.14), else `state`; its low 32 bits are read.
    pub(crate) state: u64,
    pub(crate) exit_state: u64,
    pub(crate) flags: u64,
    pub(crate) pid: u64,
    pub(crate) tgid: u64,
    pub(crate) real_parent: u64,
    pub(crate) comm: u64,
    pub(crate) comm_len: u64,
    pub(crate) mm: u64,
    /// `pid_links[PIDTYPE_PID]`, the `hlist_node` its pid's list holds.
    pub(crate) pid_link: u64,
    pub(crate) thread_pid: u64,
    pub(crate) group_leader: u64,
    /// `sizeof(struct task_struct)`, at least the span read of it.
    pub(crate) size: u64,
}

impl ProcessLayout {
    /// The offsets in `btf`; an error names the first type or member
    /// missing.
    pub fn from_btf(btf: &Btf) -> Result<ProcessLayout, BtfError> {
        let pid_type = btf.enum_value("PIDTYPE_PID").ok_or_else(|| {
            BtfError::Parse("BTF has no enumerator PIDTYPE_PID (enum pid_type)".into())
        })?;
        let task = |m: &str| btf.member_offset("task_struct", m);
        let mm = |m: &str| btf.member_offset("mm_struct", m);
        let comm_len = btf.member_size("task_struct", "comm")?;
        Ok(ProcessLayout {
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
