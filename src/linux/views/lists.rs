//! The task list and the thread groups: the known tasks' links read in one
//! batch, each list followed from its head through them in memory (see
//! `structures::list`), the nodes no view knows read as they come.

use rustc_hash::{FxHashMap, FxHashSet};

use super::{max_tasks, View, ViewFailure};
use crate::join_all;
use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::{GroupLinks, ViewsLayout};
use crate::linux::structures::list::{self, Budget, Linked, Objects};
use crate::linux::structures::StructureFailure;

/// Tasks' spans (`ViewsLayout::task_span`), by task address.
pub(super) type Spans = FxHashMap<u64, Vec<u8>>;

/// The tasks a list holds, and whether it was read whole.
#[derive(Debug, Default)]
pub(super) struct Reach {
    pub(super) members: FxHashSet<u64>,
    pub(super) whole: bool,
}

impl Reach {
    fn of(linked: &Linked) -> Reach {
        Reach {
            members: linked.objects.iter().map(|o| o.0).collect(),
            whole: linked.failed.is_empty() && !linked.at_limit,
        }
    }
}

/// What the task list and the thread groups hold.
#[derive(Debug, Default)]
pub(super) struct Lists {
    /// `init_task`, the task list's head.
    pub(super) init_task: Option<u64>,
    /// Every task read, known or found.
    pub(super) spans: Spans,
    /// The task list; `None` when not read.
    pub(super) task_list: Option<Reach>,
    /// Each thread group walked, by its key: its `signal_struct`, or its
    /// leader's task on kernels with no group head.
    pub(super) groups: FxHashMap<u64, Reach>,
    /// Each task's group key, as its span says.
    pub(super) key_of: FxHashMap<u64, u64>,
    pub(super) failed: Vec<ViewFailure>,
}

impl Lists {
    /// The group `task` belongs to, when it was walked.
    pub(super) fn group_of(&self, task: u64) -> Option<&Reach> {
        self.groups.get(self.key_of.get(&task)?)
    }

    /// Walks the groups of the tasks in `spans` and in `more` (tasks the
    /// run queues found) whose groups are not walked yet.
    pub(super) async fn more_groups(
        &mut self,
        kmem: &KernelMemory<'_>,
        layout: &ViewsLayout,
        more: &Spans,
        budget: &Budget,
    ) {
        let Ok(links) = layout.groups else { return };
        for (task, bytes) in more {
            self.spans.entry(*task).or_insert_with(|| bytes.clone());
        }
        let tasks: Vec<u64> = self
            .spans
            .keys()
            .filter(|t| !self.key_of.contains_key(t))
            .copied()
            .collect();
        if tasks.is_empty() {
            return;
        }
        budget.allow(tasks.len());
        let walked = groups(
            kmem,
            layout,
            links,
            &self.spans,
            &tasks,
            &self.groups,
            budget,
        )
        .await;
        self.take(walked);
    }

    /// Adds what a walk of groups gave.
    fn take(&mut self, walked: Groups) {
        self.key_of.extend(walked.key_of);
        self.failed.extend(walked.failed);
        for (key, linked) in walked.groups {
            self.groups.insert(key, Reach::of(&linked));
            // A task no view knew belongs to the group that found it.
            for (task, _) in &linked.objects {
                self.key_of.entry(*task).or_insert(key);
            }
            self.found(linked);
        }
    }

    /// Keeps the tasks a list found, and its failures.
    fn found(&mut self, linked: Linked) {
        let view = View::ThreadGroup;
        self.failed
            .extend(linked.failed.into_iter().map(|f| ViewFailure {
                view,
                address: f.address,
                reason: f.reason,
            }));
        for (task, bytes) in linked.objects {
            self.spans.entry(task).or_insert(bytes);
        }
    }
}

/// The budget of tasks all the lists take together: as many as the
/// target's memory holds, read, and twice each task known (on the task
/// list and in its group), allowed as they become known.
pub(super) fn budget(kmem: &KernelMemory<'_>, layout: &ViewsLayout) -> Budget {
    Budget::new(
        max_tasks(kmem, layout),
        "in all the lists (as many task_structs as the target's memory holds, and each known task twice)",
    )
}

/// The objects of a list of tasks through their member at `node`.
fn tasks_by(layout: &ViewsLayout, node: u64) -> Objects {
    Objects {
        node,
        span: layout.task_span(),
        what: "task",
    }
}

/// The spans of `tasks` (each once), read in one batch, and why each
/// that could not be read could not.
pub(super) async fn read_spans(
    kmem: &KernelMemory<'_>,
    layout: &ViewsLayout,
    mut tasks: Vec<u64>,
) -> (Spans, Vec<(u64, String)>) {
    tasks.sort_unstable();
    tasks.dedup();
    let (start, len) = layout.task_span();
    let reads = join_all(
        tasks
            .iter()
            .map(|&t| kmem.read_vec(t.wrapping_add(start), len)),
    )
    .await;
    let mut spans = Spans::default();
    let mut unreadable = Vec::new();
    for (task, read) in tasks.into_iter().zip(reads) {
        match read {
            Ok(bytes) => {
                spans.insert(task, bytes);
            }
            Err(why) => unreadable.push((task, why)),
        }
    }
    (spans, unreadable)
}

/// Reads the spans of `init_task` and of `tasks` (the pid table's) in one
/// batch, then follows the task list and every thread group of theirs.
pub(super) async fn read(
    kmem: &KernelMemory<'_>,
    layout: &ViewsLayout,
    init_task: u64,
    mut tasks: Vec<u64>,
    budget: &Budget,
) -> Lists {
    tasks.push(init_task);
    let (spans, unreadable) = read_spans(kmem, layout, tasks).await;
    budget.allow(2 * spans.len());
    let mut lists = Lists {
        init_task: Some(init_task),
        spans,
        ..Lists::default()
    };
    lists
        .failed
        .extend(unreadable.into_iter().map(|(task, why)| ViewFailure {
            view: View::ThreadGroup,
            address: task,
            reason: format!("task: {why}: its links not read"),
        }));
    let start = layout.task_span().0;
    let spans = &lists.spans;
    let task_list = async {
        let node = *layout.tasks.as_ref().ok()?;
        let head = init_task.wrapping_add(node);
        let Some(bytes) = spans.get(&init_task) else {
            let why = "init_task, the list's head, is unreadable: the task list not read";
            return Some(Linked {
                failed: vec![StructureFailure::new(head, why)],
                ..Linked::default()
            });
        };
        let link = |at: u64| bytes.u64_at(node - start + at).unwrap_or(0);
        let links = (link(layout.list.next), link(layout.list.prev));
        let objects = tasks_by(layout, node);
        Some(list::follow(kmem, &layout.list, head, links, objects, spans, budget).await)
    };
    let known: Vec<u64> = spans.keys().copied().collect();
    let groups = async {
        match layout.groups {
            Ok(links) => {
                let none = FxHashMap::default();
                Some(groups(kmem, layout, links, spans, &known, &none, budget).await)
            }
            Err(_) => None,
        }
    };
    let (task_list, groups) = futures::join!(task_list, groups);
    if let Some(linked) = task_list {
        lists.task_list = Some(Reach::of(&linked));
        lists
            .failed
            .extend(linked.failed.iter().map(|f| ViewFailure {
                view: View::TaskList,
                address: f.address,
                reason: f.reason.clone(),
            }));
        for (task, bytes) in linked.objects {
            lists.spans.entry(task).or_insert(bytes);
        }
    }
    if let Some(groups) = groups {
        lists.take(groups);
    }
    lists
}

/// What a walk of thread groups gave.
#[derive(Default)]
struct Groups {
    /// Each group's list, by key.
    groups: Vec<(u64, Linked)>,
    /// Each task's group key.
    key_of: Vec<(u64, u64)>,
    failed: Vec<ViewFailure>,
}

/// Follows the thread group of each of `tasks` (in `spans`) whose key is
/// not in `walked`: every head (or leader) read in one batch, then each
/// list.
async fn groups(
    kmem: &KernelMemory<'_>,
    layout: &ViewsLayout,
    links: GroupLinks,
    spans: &Spans,
    tasks: &[u64],
    walked: &FxHashMap<u64, Reach>,
    budget: &Budget,
) -> Groups {
    let start = layout.task_span().0;
    let kernel_half = kmem.kernel_half();
    let mut out = Groups::default();
    let mut keys = Vec::new();
    for &task in tasks {
        let Some(bytes) = spans.get(&task) else {
            continue;
        };
        let (what, at) = match links {
            GroupLinks::Signal { signal, .. } => ("signal", signal),
            GroupLinks::Leader { .. } => ("group_leader", layout.group_leader),
        };
        let key = bytes.u64_at(at - start).unwrap_or(0);
        if key < kernel_half {
            out.failed.push(ViewFailure {
                view: View::ThreadGroup,
                address: task,
                reason: format!(
                    "the task's {what} is {key:#x}, no kernel address: its thread group not read"
                ),
            });
            // Key 0 is no group's: asked once.
            out.key_of.push((task, 0));
            continue;
        }
        out.key_of.push((task, key));
        if !walked.contains_key(&key) {
            keys.push(key);
        }
    }
    keys.sort_unstable();
    keys.dedup();
    // Each group's head and its links: `signal->thread_head`, or the
    // leader's own node (its span read when no view knows it).
    let (start, len) = layout.task_span();
    let node = links.node();
    let heads = join_all(keys.iter().map(|&key| async move {
        match links {
            GroupLinks::Signal { head, .. } => {
                let head = key.wrapping_add(head);
                let bytes = kmem.read_vec(head, layout.list.len() as usize).await;
                (head, bytes.map(|b| (b, 0)), None)
            }
            GroupLinks::Leader { .. } => {
                let head = key.wrapping_add(node);
                let (bytes, read) = match spans.get(&key) {
                    Some(bytes) => (Ok(bytes.clone()), false),
                    None => (kmem.read_vec(key.wrapping_add(start), len).await, true),
                };
                let anchor = read.then(|| bytes.clone().ok()).flatten();
                (head, bytes.map(|b| (b, node - start)), anchor)
            }
        }
    }))
    .await;
    let mut lists = Vec::new();
    let mut anchors = FxHashMap::default();
    for (&key, (head, bytes, anchor)) in keys.iter().zip(heads) {
        if let Some(anchor) = anchor {
            anchors.insert(key, anchor);
        }
        match bytes {
            Ok((bytes, at)) => {
                let link = |l: u64| bytes.u64_at(at + l).unwrap_or(0);
                lists.push((key, head, (link(layout.list.next), link(layout.list.prev))));
            }
            Err(why) => out.failed.push(ViewFailure {
                view: View::ThreadGroup,
                address: head,
                reason: format!("thread group head: {why}"),
            }),
        }
    }
    let objects = tasks_by(layout, node);
    let linked = join_all(lists.iter().map(|&(_, head, links)| {
        list::follow(kmem, &layout.list, head, links, objects, spans, budget)
    }))
    .await;
    for (&(key, ..), mut linked) in lists.iter().zip(linked) {
        // A ring through its leader: the leader stands for the head.
        if let GroupLinks::Leader { .. } = links {
            let bytes = spans.get(&key).or_else(|| anchors.get(&key));
            linked
                .objects
                .push((key, bytes.cloned().unwrap_or_default()));
        }
        out.groups.push((key, linked));
    }
    out
}
