//! The offsets the other views of the tasks are read by (see `views`):
//! the task list, each thread group and the scheduler's run queues. Each
//! view stands or falls alone: a kernel whose BTF lacks the run queue's
//! members still has its task list compared with the pid table.

use crate::linux::find::btf::{Btf, BtfError};
use crate::linux::offsets::{ListLayout, RbLayout};
use crate::linux::processes::span;

/// The most CPUs an x86-64 kernel is built for (`NR_CPUS` with
/// `CONFIG_MAXSMP`).
pub(crate) const MAX_CPUS: u64 = 8192;

/// How a kernel links the tasks of a thread group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupLinks {
    /// `signal->thread_head`, through each task's `thread_node` (3.14
    /// on; the only way from 6.7).
    Signal {
        /// `task_struct.signal`.
        signal: u64,
        /// `signal_struct.thread_head`.
        head: u64,
        /// `task_struct.thread_node`.
        node: u64,
    },
    /// A ring through each task's `thread_group`, with no head of its
    /// own: its leader's node stands for one (kernels before 3.14).
    Leader {
        /// `task_struct.thread_group`.
        node: u64,
    },
}

impl GroupLinks {
    /// The offset of a task's node in its group's list.
    pub(crate) fn node(&self) -> u64 {
        match *self {
            GroupLinks::Signal { node, .. } | GroupLinks::Leader { node } => node,
        }
    }
}

/// Offsets of the scheduler's run queues: each CPU's `struct rq` (a
/// per-CPU variable), its running task and the red-black tree of its
/// runnable fair-class tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SchedLayout {
    /// `rq.curr`, `rq.idle`.
    pub(crate) curr: u64,
    pub(crate) idle: u64,
    /// `rq.cfs.tasks_timeline.rb_root.rb_node`: the tree's root.
    pub(crate) rq_root: u64,
    /// `cfs_rq.tasks_timeline.rb_root.rb_node`, of a group's queue.
    pub(crate) cfs_root: u64,
    pub(crate) rb: RbLayout,
    /// `sched_entity.run_node`.
    pub(crate) run_node: u64,
    /// `sched_entity.my_q`: the queue of a group's entity
    /// (`CONFIG_FAIR_GROUP_SCHED`); a task's is NULL.
    pub(crate) my_q: Option<u64>,
    /// `sizeof(struct sched_entity)`.
    pub(crate) entity_size: u64,
    /// `task_struct.se`.
    pub(crate) task_se: u64,
    /// The most CPUs the kernel is built for: the bits of a `struct
    /// cpumask` (`NR_CPUS`, rounded up to a word), at most [`MAX_CPUS`].
    pub(crate) max_cpus: u64,
}

impl SchedLayout {
    fn from_btf(btf: &Btf) -> Result<SchedLayout, BtfError> {
        let rq = |m: &str| btf.member_offset("rq", m);
        let se = |m: &str| btf.member_offset("sched_entity", m);
        let root = "tasks_timeline.rb_root.rb_node";
        Ok(SchedLayout {
            curr: rq("curr")?,
            idle: rq("idle")?,
            rq_root: rq(&format!("cfs.{root}"))?,
            cfs_root: btf.member_offset("cfs_rq", root)?,
            rb: RbLayout::from_btf(btf)?,
            run_node: se("run_node")?,
            my_q: se("my_q").ok(),
            entity_size: btf.size_of("sched_entity")?,
            task_se: btf.member_offset("task_struct", "se")?,
            max_cpus: (btf.size_of("cpumask")? * 8).min(MAX_CPUS),
        })
    }

    /// The bytes of a `sched_entity` read: to its links and `my_q`.
    pub(crate) fn entity_len(&self) -> usize {
        let links = self.run_node + self.rb.left.max(self.rb.right) + 8;
        links.max(self.my_q.map_or(0, |q| q + 8)) as usize
    }
}

/// Offsets, from BTF, of what the views read of each task and of the
/// lists and queues that hold them.
#[derive(Debug, Clone)]
pub(crate) struct ViewsLayout {
    pub(crate) list: ListLayout,
    /// `task_struct.pid`, `tgid`, `comm` (and its length, at most 64),
    /// `group_leader`: who a task says it is.
    pub(crate) pid: u64,
    pub(crate) tgid: u64,
    pub(crate) comm: u64,
    pub(crate) comm_len: u64,
    pub(crate) group_leader: u64,
    /// `sizeof(struct task_struct)`.
    pub(crate) task_size: u64,
    /// `task_struct.tasks`, the task list's node.
    pub(crate) tasks: Result<u64, BtfError>,
    pub(crate) groups: Result<GroupLinks, BtfError>,
    pub(crate) sched: Result<SchedLayout, BtfError>,
}

impl ViewsLayout {
    /// The offsets in `btf`; an error when even a task's identity is
    /// missing (then no view can name what it finds).
    pub fn from_btf(btf: &Btf) -> Result<ViewsLayout, BtfError> {
        let task = |m: &str| btf.member_offset("task_struct", m);
        let groups = match (
            task("thread_node"),
            btf.member_offset("signal_struct", "thread_head"),
        ) {
            (Ok(node), Ok(head)) => {
                task("signal").map(|signal| GroupLinks::Signal { signal, head, node })
            }
            _ => task("thread_group").map(|node| GroupLinks::Leader { node }),
        };
        Ok(ViewsLayout {
            list: ListLayout::from_btf(btf)?,
            pid: task("pid")?,
            tgid: task("tgid")?,
            comm: task("comm")?,
            comm_len: btf.member_size("task_struct", "comm")?.min(64),
            group_leader: task("group_leader")?,
            task_size: btf.size_of("task_struct")?,
            tasks: task("tasks"),
            groups,
            sched: SchedLayout::from_btf(btf),
        })
    }

    /// The span of a task read: its identity and the nodes of the lists
    /// the kernel has.
    pub(crate) fn task_span(&self) -> (u64, usize) {
        let list = self.list.len();
        let mut members = vec![
            (self.pid, 4),
            (self.tgid, 4),
            (self.comm, self.comm_len),
            (self.group_leader, 8),
        ];
        members.extend(self.tasks.iter().map(|&at| (at, list)));
        match self.groups {
            Ok(GroupLinks::Signal { signal, node, .. }) => {
                members.extend([(signal, 8), (node, list)]);
            }
            Ok(GroupLinks::Leader { node }) => members.push((node, list)),
            Err(_) => {}
        }
        span(&members)
    }

    /// Every error of the layout's views, for the questions' list.
    pub(crate) fn errors(&self) -> impl Iterator<Item = &BtfError> {
        [
            self.tasks.as_ref().err(),
            self.groups.as_ref().err(),
            self.sched.as_ref().err(),
        ]
        .into_iter()
        .flatten()
    }
}
