//! The scheduler's view: each CPU's run queue (`runqueues` at the CPU's
//! `__per_cpu_offset`, for the `nr_cpu_ids` CPUs the kernel may have),
//! the task it runs and its idle task, and the red-black tree of its
//! runnable fair-class tasks, into the queue of each group entity (task
//! groups, autogroups), a level of every tree at once. Then each task
//! found is read as the lists read theirs.

use rustc_hash::FxHashSet;

use super::lists::{read_spans, Spans};
use super::{RunQueue, View, ViewFailure};
use crate::join_all;
use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::{SchedLayout, ViewsLayout};
use crate::linux::processes::span;
use crate::linux::structures::rbtree::{self, Objects};

/// What the run queues hold.
#[derive(Debug, Default)]
pub(super) struct RunQueues {
    /// The run queues read.
    pub(super) queues: Vec<RunQueue>,
    /// Each task running (but the idle ones) or runnable, with its CPU.
    pub(super) tasks: Vec<(u64, u32)>,
    /// Those tasks' spans.
    pub(super) spans: Spans,
    pub(super) failed: Vec<ViewFailure>,
    /// Why the run queues were not read, if they were not.
    pub(super) unread: Option<String>,
}

impl RunQueues {
    fn fail(&mut self, address: u64, reason: String) {
        self.failed.push(ViewFailure {
            view: View::RunQueue,
            address,
            reason,
        });
    }
}

/// Reads every CPU's run queue, from the symbols `runqueues`,
/// `nr_cpu_ids` and `__per_cpu_offset` (in that order; `None` when the
/// kernel lacks one).
pub(super) async fn read(
    kmem: &KernelMemory<'_>,
    layout: &ViewsLayout,
    symbols: [Option<u64>; 3],
) -> RunQueues {
    let mut out = RunQueues::default();
    let sched = match &layout.sched {
        Ok(sched) => sched,
        Err(e) => {
            out.unread = Some(e.to_string());
            return out;
        }
    };
    let [Some(runqueues), Some(nr_cpu_ids), Some(offsets)] = symbols else {
        let missing: Vec<&str> = super::SYMBOLS
            .iter()
            .zip(symbols)
            .filter(|(_, s)| s.is_none())
            .map(|(name, _)| *name)
            .collect();
        out.unread = Some(format!(
            "kallsyms has no {} (a kernel without CONFIG_SMP, or without CONFIG_KALLSYMS_ALL)",
            missing.join(", ")
        ));
        return out;
    };
    let cpus = match kmem.read_vec(nr_cpu_ids, 4).await {
        Ok(bytes) => u64::from(bytes.u32_at(0).unwrap_or(0)),
        Err(why) => {
            out.fail(nr_cpu_ids, format!("nr_cpu_ids: {why}"));
            return out;
        }
    };
    if !(1..=sched.max_cpus).contains(&cpus) {
        let max = sched.max_cpus;
        let why = format!("nr_cpu_ids is {cpus}, not a count of CPUs this kernel is built for (1 to {max}): no run queue read");
        out.fail(nr_cpu_ids, why);
        return out;
    }
    let offsets = match kmem.read_vec(offsets, cpus as usize * 8).await {
        Ok(bytes) => bytes,
        Err(why) => {
            out.fail(offsets, format!("__per_cpu_offset: {why}"));
            return out;
        }
    };
    let (start, len) = span(&[(sched.curr, 8), (sched.idle, 8), (sched.rq_root, 8)]);
    let queues: Vec<u64> = (0..cpus)
        .map(|cpu| runqueues.wrapping_add(offsets.u64_at(cpu * 8).unwrap_or(0)))
        .collect();
    let reads = join_all(
        queues
            .iter()
            .map(|&rq| kmem.read_vec(rq.wrapping_add(start), len)),
    )
    .await;
    let kernel_half = kmem.kernel_half();
    let mut roots = Vec::new();
    for ((cpu, &rq), read) in (0u32..).zip(&queues).zip(reads) {
        let bytes = match read {
            Ok(bytes) => bytes,
            Err(why) => {
                out.fail(rq, format!("CPU {cpu}'s run queue: {why}"));
                continue;
            }
        };
        let at = |m: u64| bytes.u64_at(m - start).unwrap_or(0);
        let (curr, idle, root) = (at(sched.curr), at(sched.idle), at(sched.rq_root));
        if curr < kernel_half || idle < kernel_half {
            let why = format!("CPU {cpu}'s run queue runs {curr:#x}, idles in {idle:#x}: no tasks");
            out.fail(rq, why);
            continue;
        }
        out.queues.push(RunQueue {
            cpu,
            address: rq,
            running: curr,
            idle,
        });
        if curr != idle {
            out.tasks.push((curr, cpu));
        }
        if root != 0 {
            roots.push((cpu, root));
        }
    }
    let max = super::max_tasks(kmem, layout);
    runnable(kmem, sched, roots, max, &mut out).await;
    let tasks = out.tasks.iter().map(|t| t.0).collect();
    let (spans, unreadable) = read_spans(kmem, layout, tasks).await;
    out.spans = spans;
    for (task, why) in unreadable {
        out.fail(task, format!("a task of a run queue: {why}"));
    }
    out
}

/// The runnable tasks of the trees whose roots are `roots` (each with its
/// CPU), a level of every tree at once, into the queue of each group
/// entity; no more entities than `max` in all, each queue once.
async fn runnable(
    kmem: &KernelMemory<'_>,
    sched: &SchedLayout,
    mut roots: Vec<(u32, u64)>,
    max: usize,
    out: &mut RunQueues,
) {
    let objects = Objects {
        node: sched.run_node,
        size: sched.entity_len(),
        what: "sched entity",
    };
    let mut left = max;
    let mut queues = FxHashSet::default();
    while !roots.is_empty() && left > 0 {
        // Each tree its share of what is left.
        let share = left.div_ceil(roots.len());
        let trees = join_all(
            roots
                .iter()
                .map(|&(_, root)| rbtree::objects(kmem, &sched.rb, objects, root, share)),
        )
        .await;
        let mut groups = Vec::new();
        for (
            &(cpu, _),
            rbtree::Walked {
                objects: found,
                failed,
                ..
            },
        ) in roots.iter().zip(trees)
        {
            left = left.saturating_sub(found.len());
            for f in failed {
                out.fail(
                    f.address,
                    format!("CPU {cpu}'s runnable tasks: {}", f.reason),
                );
            }
            for (entity, bytes) in found {
                let my_q = sched.my_q.and_then(|q| bytes.u64_at(q)).unwrap_or(0);
                match my_q {
                    0 => out.tasks.push((entity.wrapping_sub(sched.task_se), cpu)),
                    // Each group entity counts against `left`: so many
                    // queues at most.
                    queue if queues.insert(queue) => groups.push((cpu, queue)),
                    // Its queue is walked already (a loop of groups).
                    _ => {}
                }
            }
        }
        let reads = join_all(
            groups
                .iter()
                .map(|&(_, q)| kmem.read_vec(q.wrapping_add(sched.cfs_root), 8)),
        )
        .await;
        roots.clear();
        for (&(cpu, queue), read) in groups.iter().zip(reads) {
            match read.map(|b| b.u64_at(0).unwrap_or(0)) {
                Ok(0) => {}
                Ok(root) => roots.push((cpu, root)),
                Err(why) => out.fail(queue, format!("CPU {cpu}'s group queue: {why}")),
            }
        }
    }
}
