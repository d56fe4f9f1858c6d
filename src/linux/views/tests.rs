//! The views read from made-up kernel memory whose layout (given by
//! made-up BTF) is no kernel's: a clean system, and the lies and damage a
//! responder meets (a task unlinked or only on one list, a loop, a wild
//! link, garbage where the CPU count is), with the read calls each costs.

use super::*;
use crate::linux::fake_memory::{FakeMemory as Fake, DIRECT};
use crate::linux::find::btf::builder::{BtfBuilder, KIND_INT, KIND_STRUCT};
use crate::linux::find::btf::Btf;
use crate::linux::Process;

const MEMORY: usize = 1 << 20;

// The made-up `task_struct`.
const TASK_SIZE: u64 = 0x400;
const SE: u64 = 0x40;
const TASKS: u64 = 0x100;
const PID: u64 = 0x110;
const TGID: u64 = 0x114;
const GROUP_LEADER: u64 = 0x118;
const THREAD_GROUP: u64 = 0x120;
const THREAD_NODE: u64 = 0x130;
const COMM: u64 = 0x140;
const SIGNAL: u64 = 0x160;
// `sched_entity`, `signal_struct`, `cfs_rq`, `rq`.
const RUN_NODE: u64 = 0x10;
const MY_Q: u64 = 0x50;
const THREAD_HEAD: u64 = 0x20;
const TIMELINE: u64 = 0x10;
const CFS: u64 = 0x40;
const CURR: u64 = 0x100;
const IDLE: u64 = 0x108;
/// `rb_node`'s links.
const RIGHT: u64 = 8;
const LEFT: u64 = 16;
/// The per-CPU "address" of `runqueues` (an offset into each CPU's area).
const RUNQUEUES: u64 = 0x2_f1c0;

/// How the made-up kernel links a thread group.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Groups {
    /// `signal->thread_head` through `thread_node`.
    Signal,
    /// The `thread_group` ring through the leader.
    Leader,
}

fn btf(groups: Groups) -> Btf {
    let mut b = BtfBuilder::new();
    let long = b.long();
    let name = b.string("int");
    let int = b.push(&[name, KIND_INT << 24, 4, 32]);
    let name = b.string("char");
    let char_ty = b.push(&[name, KIND_INT << 24, 1, 8]);
    let comm = b.array_of(char_ty, 16);
    let list = b.composite(
        KIND_STRUCT,
        "list_head",
        16,
        &[("next", long, 0), ("prev", long, 8)],
    );
    let node = b.composite(
        KIND_STRUCT,
        "rb_node",
        24,
        &[
            ("__rb_parent_color", long, 0),
            ("rb_right", long, RIGHT),
            ("rb_left", long, LEFT),
        ],
    );
    let root = b.composite(KIND_STRUCT, "rb_root", 8, &[("rb_node", long, 0)]);
    let cached = b.composite(
        KIND_STRUCT,
        "rb_root_cached",
        16,
        &[("rb_root", root, 0), ("rb_leftmost", long, 8)],
    );
    let cfs = b.composite(
        KIND_STRUCT,
        "cfs_rq",
        0x40,
        &[("tasks_timeline", cached, TIMELINE)],
    );
    let se = b.composite(
        KIND_STRUCT,
        "sched_entity",
        0x80,
        &[("run_node", node, RUN_NODE), ("my_q", long, MY_Q)],
    );
    b.composite(
        KIND_STRUCT,
        "rq",
        0x200,
        &[
            ("cfs", cfs, CFS),
            ("curr", long, CURR),
            ("idle", long, IDLE),
        ],
    );
    let bits = b.array(8);
    b.composite(KIND_STRUCT, "cpumask", 64, &[("bits", bits, 0)]);
    let mut task = vec![
        ("se", se, SE),
        ("tasks", list, TASKS),
        ("pid", int, PID),
        ("tgid", int, TGID),
        ("group_leader", long, GROUP_LEADER),
        ("comm", comm, COMM),
    ];
    match groups {
        Groups::Signal => {
            task.extend([("thread_node", list, THREAD_NODE), ("signal", long, SIGNAL)]);
            b.composite(
                KIND_STRUCT,
                "signal_struct",
                0x40,
                &[("thread_head", list, THREAD_HEAD)],
            );
        }
        Groups::Leader => task.push(("thread_group", list, THREAD_GROUP)),
    }
    b.composite(KIND_STRUCT, "task_struct", TASK_SIZE as u32, &task);
    Btf::parse(&b.finish()).unwrap()
}

/// A made-up system: `init_task`, processes A (pid 1), B (10) and C (20,
/// with threads 21 and 22) on the task list in that order, each group
/// linked; two CPUs, the first idle in `init_task` with A runnable and,
/// through a group's queue, thread 21; the second running B.
struct System {
    f: Fake,
    groups: Groups,
    init_task: u64,
    /// A, B, C, 21, 22, by name.
    a: u64,
    b: u64,
    c: u64,
    t21: u64,
    t22: u64,
    idle1: u64,
    rqs: [u64; 2],
    /// The group entity on CPU 0 and its queue.
    group_queue: u64,
    nr_cpu_ids: u64,
    per_cpu_offset: u64,
    list: ProcessList,
}

/// Links the `list_head`s at `nodes` into a ring, in order.
fn ring(f: &mut Fake, nodes: &[u64]) {
    for (i, &node) in nodes.iter().enumerate() {
        f.put(node, nodes[(i + 1) % nodes.len()]);
        f.put(node + 8, nodes[(i + nodes.len() - 1) % nodes.len()]);
    }
}

impl System {
    fn new(groups: Groups) -> System {
        let mut f = Fake::new(MEMORY);
        let task = |f: &mut Fake, pid: u32, tgid: u32, name: &str, leader: Option<u64>| {
            let t = f.alloc(TASK_SIZE);
            f.put_u32(t + PID, pid);
            f.put_u32(t + TGID, tgid);
            f.put(t + GROUP_LEADER, leader.unwrap_or(t));
            f.put_bytes(t + COMM, name.as_bytes());
            t
        };
        let init_task = task(&mut f, 0, 0, "swapper/0", None);
        let idle1 = task(&mut f, 0, 0, "swapper/1", None);
        let a = task(&mut f, 1, 1, "init", None);
        let b = task(&mut f, 10, 10, "sleep", None);
        let c = task(&mut f, 20, 20, "pattern", None);
        let t21 = task(&mut f, 21, 20, "thr-1", Some(c));
        let t22 = task(&mut f, 22, 20, "thr-2", Some(c));
        ring(
            &mut f,
            &[init_task + TASKS, a + TASKS, b + TASKS, c + TASKS],
        );
        let mut sys = System {
            f,
            groups,
            init_task,
            a,
            b,
            c,
            t21,
            t22,
            idle1,
            rqs: [0; 2],
            group_queue: 0,
            nr_cpu_ids: 0,
            per_cpu_offset: 0,
            list: ProcessList::default(),
        };
        for group in [vec![init_task], vec![a], vec![b], vec![c, t21, t22]] {
            sys.group(&group);
        }
        sys.queues();
        let process = |pid: u32, name: &str, task: u64, threads: Vec<Thread>| Process {
            pid,
            tgid: pid,
            ppid: Some(0),
            name: name.into(),
            cmdline: Vec::new(),
            state: 'S',
            kernel_thread: false,
            dtb: None,
            task,
            mm: None,
            threads,
        };
        let thread = |pid: u32, name: &str, task: u64| Thread {
            pid,
            name: name.into(),
            state: 'S',
            task,
        };
        sys.list.processes = vec![
            process(1, "init", a, Vec::new()),
            process(10, "sleep", b, Vec::new()),
            process(
                20,
                "pattern",
                c,
                vec![thread(21, "thr-1", t21), thread(22, "thr-2", t22)],
            ),
        ];
        sys
    }

    /// Links `tasks` (the leader first) into a thread group.
    fn group(&mut self, tasks: &[u64]) {
        let f = &mut self.f;
        match self.groups {
            Groups::Signal => {
                let signal = f.alloc(0x40);
                let mut nodes = vec![signal + THREAD_HEAD];
                for &t in tasks {
                    f.put(t + SIGNAL, signal);
                    nodes.push(t + THREAD_NODE);
                }
                ring(f, &nodes);
            }
            Groups::Leader => {
                let nodes: Vec<u64> = tasks.iter().map(|t| t + THREAD_GROUP).collect();
                ring(f, &nodes);
            }
        }
    }

    /// Two run queues: CPU 0 idle with A runnable and, in a group's
    /// queue, thread 21; CPU 1 running B.
    fn queues(&mut self) {
        let f = &mut self.f;
        let rqs = [f.alloc(0x200), f.alloc(0x200)];
        self.nr_cpu_ids = f.alloc(4);
        f.put_u32(self.nr_cpu_ids, 2);
        self.per_cpu_offset = f.alloc(16);
        for (cpu, rq) in rqs.iter().enumerate() {
            f.put(
                self.per_cpu_offset + 8 * cpu as u64,
                rq.wrapping_sub(RUNQUEUES),
            );
        }
        f.put(rqs[0] + CURR, self.init_task);
        f.put(rqs[0] + IDLE, self.init_task);
        f.put(rqs[1] + CURR, self.b);
        f.put(rqs[1] + IDLE, self.idle1);
        // CPU 0's tree: A at the root, the group's entity on its right,
        // and thread 21 alone in the group's queue.
        let group = f.alloc(0x80);
        let queue = f.alloc(0x40);
        f.put(rqs[0] + CFS + TIMELINE, self.a + SE + RUN_NODE);
        f.put(self.a + SE + RUN_NODE + RIGHT, group + RUN_NODE);
        f.put(group + MY_Q, queue);
        f.put(queue + TIMELINE, self.t21 + SE + RUN_NODE);
        self.rqs = rqs;
        self.group_queue = queue;
    }

    /// Every view, and the read calls they took: the pid table as
    /// `self.list` says (read by no call), the rest from memory.
    fn views(&self) -> (ProcessViews, u64) {
        let layout = ViewsLayout::from_btf(&btf(self.groups)).unwrap();
        let symbols = [
            Some(RUNQUEUES),
            Some(self.nr_cpu_ids),
            Some(self.per_cpu_offset),
        ];
        let list = self.list.clone();
        self.f.read(async |kmem| {
            let budget = lists::budget(kmem, &layout);
            let walk = |beside| pid_table(list, beside);
            read(kmem, &layout, &budget, self.init_task, symbols, walk).await
        })
    }

    /// Takes `node` out of its list as a rootkit does (its own links left).
    fn unlink(&mut self, node: u64) {
        let read = |at: u64| {
            let at = (at - DIRECT) as usize;
            u64::from_le_bytes(self.f.bytes[at..at + 8].try_into().unwrap())
        };
        let (next, prev) = (read(node), read(node + 8));
        self.f.put(prev, next);
        self.f.put(next + 8, prev);
    }
}

use super::super::Thread;

/// The pid table `list` as a walk gives it: every task of it handed to
/// `beside`, read by no call.
async fn pid_table(list: ProcessList, beside: Beside<'_>) -> (ProcessList, Option<Lists>) {
    let tasks = list
        .processes
        .iter()
        .flat_map(|p| std::iter::once(p.task).chain(p.threads.iter().map(|t| t.task)))
        .map(|t| (t, None))
        .collect();
    let lists = beside(tasks).await;
    (list, Some(lists))
}

/// A task's pid with the views that have it and lack it, and its CPU.
type Seen = (u32, Vec<View>, Vec<View>, Option<u32>);

/// Each task as [`Seen`].
fn seen(views: &ProcessViews) -> Vec<Seen> {
    views
        .tasks
        .iter()
        .map(|t| (t.pid, t.seen_in.clone(), t.missing_from.clone(), t.cpu))
        .collect()
}

use View::{PidTable as P, RunQueue as R, TaskList as L, ThreadGroup as G};

/// What the clean system's views say of each task.
fn clean_views() -> Vec<Seen> {
    vec![
        (1, vec![P, L, G, R], vec![], Some(0)),
        (10, vec![P, L, G, R], vec![], Some(1)),
        (20, vec![P, L, G], vec![], None),
        (21, vec![P, G, R], vec![], Some(0)),
        (22, vec![P, G], vec![], None),
    ]
}

/// Read calls of the clean system: the run queues' chain (`nr_cpu_ids`,
/// the offsets, the queues, the tree's two levels, the group's queue, its
/// tree, the tasks found), which the lists' two (the tasks' links, the
/// groups' heads) share.
const CLEAN_CALLS: u64 = 8;

#[test]
fn a_clean_system_shows_every_task_in_every_view_it_must_be_in() {
    for groups in [Groups::Signal, Groups::Leader] {
        let sys = System::new(groups);
        let (views, calls) = sys.views();
        assert_eq!(seen(&views), clean_views());
        assert_eq!(views.failed, []);
        assert_eq!(views.unread, []);
        assert_eq!(views.hidden().count(), 0);
        assert_eq!(views.thread_groups, 4, "init_task's, A's, B's, C's");
        let queues: Vec<RunQueue> = vec![
            RunQueue {
                cpu: 0,
                address: sys.rqs[0],
                running: sys.init_task,
                idle: sys.init_task,
            },
            RunQueue {
                cpu: 1,
                address: sys.rqs[1],
                running: sys.b,
                idle: sys.idle1,
            },
        ];
        assert_eq!(views.run_queues, queues);
        assert_eq!(calls, CLEAN_CALLS);
        assert_eq!(views.count_in(L), 3);
    }
}

#[test]
fn a_process_unlinked_from_the_task_list_hides_from_it_alone() {
    let mut sys = System::new(Groups::Signal);
    sys.unlink(sys.b + TASKS);
    let (views, calls) = sys.views();
    let mut want = clean_views();
    want[1] = (10, vec![P, G, R], vec![L], Some(1));
    assert_eq!(seen(&views), want);
    assert_eq!(views.failed, []);
    let hidden: Vec<u64> = views.hidden().map(|t| t.task).collect();
    assert_eq!(hidden, [sys.b]);
    assert_eq!(calls, CLEAN_CALLS);
}

#[test]
fn a_thread_unlinked_from_its_group_hides_from_it_on_either_kind_of_kernel() {
    for (groups, node) in [
        (Groups::Signal, THREAD_NODE),
        (Groups::Leader, THREAD_GROUP),
    ] {
        let mut sys = System::new(groups);
        sys.unlink(sys.t22 + node);
        let (views, calls) = sys.views();
        let mut want = clean_views();
        want[4] = (22, vec![P], vec![G], None);
        assert_eq!(seen(&views), want);
        assert_eq!(views.failed, []);
        assert_eq!(calls, CLEAN_CALLS);
    }
}

#[test]
fn a_task_only_on_the_task_list_hides_from_the_pid_table() {
    let mut sys = System::new(Groups::Signal);
    let h = sys.f.alloc(TASK_SIZE);
    sys.f.put_u32(h + PID, 30);
    sys.f.put_u32(h + TGID, 30);
    sys.f.put(h + GROUP_LEADER, h);
    sys.f.put_bytes(h + COMM, b"hidden");
    ring(
        &mut sys.f,
        &[
            sys.init_task + TASKS,
            sys.a + TASKS,
            sys.b + TASKS,
            h + TASKS,
            sys.c + TASKS,
        ],
    );
    sys.group(&[h]);
    let (views, calls) = sys.views();
    let mut want = clean_views();
    want.push((30, vec![L, G], vec![P], None));
    assert_eq!(seen(&views), want);
    assert_eq!(views.tasks[5].name, "hidden");
    assert_eq!(views.failed, []);
    // Its node read as the list reaches it (beside the run queues), and
    // its group's head after: one call more.
    assert_eq!(calls, CLEAN_CALLS + 1);
}

#[test]
fn a_process_hidden_from_the_pid_table_brings_its_threads() {
    // H (pid 30) on the task list, its thread 31 only in H's group.
    let mut sys = System::new(Groups::Signal);
    let task = |f: &mut Fake, pid: u32, leader: u64, name: &str| {
        let t = f.alloc(TASK_SIZE);
        f.put_u32(t + PID, pid);
        f.put_u32(t + TGID, 30);
        f.put(t + GROUP_LEADER, if leader == 0 { t } else { leader });
        f.put_bytes(t + COMM, name.as_bytes());
        t
    };
    let h = task(&mut sys.f, 30, 0, "hidden");
    let t31 = task(&mut sys.f, 31, h, "hidden-thr");
    ring(
        &mut sys.f,
        &[
            sys.init_task + TASKS,
            sys.a + TASKS,
            sys.b + TASKS,
            sys.c + TASKS,
            h + TASKS,
        ],
    );
    sys.group(&[h, t31]);
    let (views, calls) = sys.views();
    let mut want = clean_views();
    want.push((30, vec![L, G], vec![P], None));
    want.push((31, vec![G], vec![P], None));
    assert_eq!(seen(&views), want);
    assert_eq!(views.failed, []);
    assert_eq!(views.thread_groups, 5);
    // H read as the list reaches it; its group's head, then its thread,
    // after.
    assert_eq!(calls, CLEAN_CALLS + 2);
}

#[test]
fn a_runnable_task_no_list_has_hides_from_both() {
    let mut sys = System::new(Groups::Signal);
    let r = sys.f.alloc(TASK_SIZE);
    sys.f.put_u32(r + PID, 40);
    sys.f.put_u32(r + TGID, 40);
    sys.f.put(r + GROUP_LEADER, r);
    sys.f.put_bytes(r + COMM, b"miner");
    sys.group(&[r]);
    // In the group's queue, left of thread 21.
    sys.f.put(sys.t21 + SE + RUN_NODE + LEFT, r + SE + RUN_NODE);
    let (views, calls) = sys.views();
    let mut want = clean_views();
    want.push((40, vec![G, R], vec![P, L], Some(0)));
    assert_eq!(seen(&views), want);
    assert_eq!(views.failed, []);
    // The group queue's tree has a level more, and the task's group is
    // walked after: its head read.
    assert_eq!(calls, CLEAN_CALLS + 2);
}

#[test]
fn a_loop_in_the_task_list_is_cut_and_no_absence_is_claimed() {
    let mut sys = System::new(Groups::Signal);
    // C leads back to A, not to init_task.
    sys.f.put(sys.c + TASKS, sys.a + TASKS);
    let (views, calls) = sys.views();
    assert_eq!(seen(&views), clean_views());
    let failed: Vec<(View, u64)> = views.failed.iter().map(|f| (f.view, f.address)).collect();
    assert_eq!(failed, [(L, sys.c), (L, sys.a)]);
    // From the tail, C does not lead back to init_task; from the head, A
    // comes round again.
    assert!(
        views.failed[0].reason.contains("points back"),
        "{:?}",
        views.failed
    );
    assert!(
        views.failed[1].reason.contains("reached twice"),
        "{:?}",
        views.failed
    );
    assert_eq!(calls, CLEAN_CALLS);

    // A list that loops through nodes no view knows: each read once.
    let mut sys = System::new(Groups::Signal);
    let x = sys.f.alloc(TASK_SIZE);
    let y = sys.f.alloc(TASK_SIZE);
    ring(
        &mut sys.f,
        &[sys.init_task + TASKS, sys.a + TASKS, x + TASKS, y + TASKS],
    );
    // y leads back to x, x back to y: a ring of its own.
    sys.f.put(y + TASKS, x + TASKS);
    sys.f.put(x + TASKS + 8, y + TASKS);
    let (views, calls) = sys.views();
    // From the tail, y does not point back at init_task; from the head, x
    // not at A: each read once, neither taken. B and C are on no list
    // read whole: not reported.
    let failed: Vec<(View, u64)> = views.failed.iter().map(|f| (f.view, f.address)).collect();
    assert_eq!(failed, [(L, y), (L, x)]);
    let mut want = clean_views();
    want[1].1.retain(|&v| v != L);
    want[2].1.retain(|&v| v != L);
    assert_eq!(seen(&views), want);
    assert_eq!(calls, CLEAN_CALLS);
}

#[test]
fn a_wild_link_stops_its_end_and_the_other_reads_on() {
    let mut sys = System::new(Groups::Signal);
    sys.f.put(sys.b + TASKS, 0x40);
    let (views, calls) = sys.views();
    assert_eq!(seen(&views), clean_views());
    assert!(
        views.failed.iter().any(|f| f.view == L
            && f.address == sys.b
            && f.reason.contains("next link is 0x40, no kernel address")),
        "{:?}",
        views.failed
    );
    assert_eq!(calls, CLEAN_CALLS);
}

#[test]
fn garbage_for_the_count_of_cpus_reads_no_run_queue() {
    for garbage in [0, 513, u32::MAX] {
        let mut sys = System::new(Groups::Signal);
        sys.f.put_u32(sys.nr_cpu_ids, garbage);
        let (views, calls) = sys.views();
        let mut want = clean_views();
        for t in &mut want {
            t.1.retain(|&v| v != R);
            t.3 = None;
        }
        assert_eq!(seen(&views), want);
        assert_eq!(views.run_queues, []);
        assert_eq!(
            views.failed,
            [ViewFailure {
                view: R,
                address: sys.nr_cpu_ids,
                reason: format!("nr_cpu_ids is {garbage}, not a count of CPUs this kernel is built for (1 to 512): no run queue read"),
            }]
        );
        // `nr_cpu_ids` beside the tasks' links, then the groups' heads.
        assert_eq!(calls, 2);
    }
}

#[test]
fn a_wild_signal_leaves_its_group_unchecked_and_says_so() {
    let mut sys = System::new(Groups::Signal);
    sys.f.put(sys.t22 + SIGNAL, 0x1234);
    let (views, _) = sys.views();
    let mut want = clean_views();
    want[4] = (22, vec![P], vec![], None);
    assert_eq!(seen(&views), want);
    assert_eq!(
        views.failed,
        [ViewFailure {
            view: G,
            address: sys.t22,
            reason: "the task's signal is 0x1234, no kernel address: its thread group not read"
                .into(),
        }]
    );
}

#[test]
fn a_kernel_without_the_members_reads_the_other_views() {
    // No `rq` type: the run queues are not read, and why is said once.
    let sys = System::new(Groups::Signal);
    let mut layout = ViewsLayout::from_btf(&btf(Groups::Signal)).unwrap();
    layout.sched = Err(crate::linux::BtfError::NoType("struct rq".into()));
    let list = sys.list.clone();
    let (views, _) = sys.f.read(async |kmem| {
        let budget = lists::budget(kmem, &layout);
        let walk = |beside| pid_table(list, beside);
        read(kmem, &layout, &budget, sys.init_task, [None; 3], walk).await
    });
    assert_eq!(views.unread.len(), 1);
    assert_eq!(views.unread[0].0, R);
    assert_eq!(views.failed, []);
    assert_eq!(views.hidden().count(), 0);
    let _ = sys.group_queue;
}
