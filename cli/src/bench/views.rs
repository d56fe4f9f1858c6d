//! What hides: the engine's views of a Linux target's tasks
//! (`Kernel::process_views`, the kernel known) against the same views read
//! pointer by pointer, one read at a time, as an OS layer over memflow's
//! synchronous API reads them with `VirtualDma` on the kernel's table: the
//! pid table (each node's shift and slots, each `struct pid`'s number and
//! task), the task list from `init_task`, each task's thread group from its
//! `signal`, and each CPU's run queue (its running and idle task, its tree
//! of runnable entities into each group's queue); offsets from the
//! kernel's BTF, read once before the runs as a profile would give them.

use std::collections::{BTreeMap, HashSet};

use leechio::linux::{Hints, Kernel, ProcessViews, View};

use super::*;

/// Most nodes of any one structure followed: Linux's largest pid space.
const MAX_NODES: usize = 1 << 22;
/// Kernel addresses lie from here (4-level paging: the bench's virtual
/// rows need it).
const KERNEL_HALF: u64 = 0xffff_8000_0000_0000;

/// The views of each task, by pid (idle tasks left out).
type Seen = BTreeMap<u32, Vec<View>>;

fn seen(views: &ProcessViews) -> Seen {
    views
        .tasks
        .iter()
        .map(|t| (t.pid, t.seen_in.clone()))
        .collect()
}

/// What the pointer-by-pointer reading learns once from a profile.
struct Profile {
    kernel_dtb: u64,
    init_task: u64,
    ns: u64,
    /// `pid_namespace.idr`'s head and base; `xa_node`'s shift and slots.
    xa_head: u64,
    idr_base: u64,
    shift: u64,
    slots: u64,
    /// `pid`'s number and first task link; the task's link's offset.
    pid_nr: u64,
    pid_first: u64,
    pid_link: u64,
    /// `task_struct`'s `pid`, `tasks`, `signal`, `thread_node`, `se`.
    pid: u64,
    tasks: u64,
    signal: u64,
    thread_node: u64,
    task_se: u64,
    thread_head: u64,
    /// The run queues: the symbols, `rq`'s members, `sched_entity`'s.
    runqueues: u64,
    nr_cpu_ids: u64,
    per_cpu_offset: u64,
    curr: u64,
    idle: u64,
    rq_root: u64,
    cfs_root: u64,
    run_node: u64,
    left: u64,
    right: u64,
    my_q: u64,
}

impl Profile {
    fn of(kernel: &Kernel) -> Result<Profile, String> {
        let at = |ty: &str, m: &str| kernel.offset_of(ty, m).map_err(|e| e.to_string());
        let symbol = |name: &str| {
            kernel
                .symbol(name)
                .ok_or_else(|| format!("kallsyms has no {name}"))
        };
        let task = |m: &str| at("task_struct", m);
        Ok(Profile {
            kernel_dtb: kernel.dtb(),
            init_task: kernel.init_task(),
            ns: kernel.init_pid_ns(),
            xa_head: at("pid_namespace", "idr.idr_rt.xa_head")?,
            idr_base: at("pid_namespace", "idr.idr_base")?,
            shift: at("xa_node", "shift")?,
            slots: at("xa_node", "slots")?,
            pid_nr: at("pid", "numbers")? + at("upid", "nr")?,
            pid_first: at("pid", "tasks[0].first")?,
            pid_link: task("pid_links[0]")?,
            pid: task("pid")?,
            tasks: task("tasks")?,
            signal: task("signal")?,
            thread_node: task("thread_node")?,
            task_se: task("se")?,
            thread_head: at("signal_struct", "thread_head")?,
            runqueues: symbol("runqueues")?,
            nr_cpu_ids: symbol("nr_cpu_ids")?,
            per_cpu_offset: symbol("__per_cpu_offset")?,
            curr: at("rq", "curr")?,
            idle: at("rq", "idle")?,
            rq_root: at("rq", "cfs.tasks_timeline.rb_root.rb_node")?,
            cfs_root: at("cfs_rq", "tasks_timeline.rb_root.rb_node")?,
            run_node: at("sched_entity", "run_node")?,
            left: at("rb_node", "rb_left")?,
            right: at("rb_node", "rb_right")?,
            my_q: at("sched_entity", "my_q")?,
        })
    }
}

/// The views rows: the engine's, with the kernel known, and the same
/// views read pointer by pointer. A target whose kernel lacks what the
/// views read gets none, and a line on stderr that says why.
pub(super) fn views(bench: &mut Bench) -> Result<(), Failure> {
    let hints = uncached();
    let (profile, before, workload, engine_row) = {
        let (_plugin, device, mem) = engine_on_plugin(bench)?;
        let found = Kernel::find(&mem, &hints).map_err(|e| e.to_string());
        let kernel = match found.and_then(|k| Profile::of(&k).map(|p| (k, p))) {
            Ok(found) => found,
            Err(e) => {
                errln!("leechio: bench: no rows of what hides: {e}");
                return Ok(());
            }
        };
        let (kernel, profile) = kernel;
        let mut views = ProcessViews::default();
        let method = "engine: Kernel::process_views, kernel known";
        bench.row("what hides", method, 0, || {
            Ok(timed(&device, || views = kernel.process_views()))
        })?;
        let workload = format!(
            "what hides: {} tasks in the pid table, task list, thread groups, run queues",
            views.tasks.len()
        );
        let engine_row = bench.rows.len() - 1;
        bench.rows[engine_row].workload = workload.clone();
        (profile, seen(&views), workload, engine_row)
    };
    let method = "memflow VirtualDma: pointer by pointer, read by read";
    let hints = Hints {
        dtb: Some(profile.kernel_dtb),
        ..hints
    };
    let read = |p: &Plugin| pointer_by_pointer(p, &profile);
    let rows = (&workload[..], method, engine_row);
    memflow_rows(bench, rows, &before, read, &hints, |k| {
        seen(&k.process_views())
    })?;
    Ok(())
}

/// The word at `at` on the kernel's table (0 when unreadable).
fn word(v: &mut Virtual, at: u64) -> u64 {
    v.read::<u64>(Address::from(at)).unwrap_or(0)
}

/// The tasks of the list whose head is at `head`, through their member
/// at `node`, one `next` a read; a loop or a link that is no kernel
/// address ends it.
fn follow(v: &mut Virtual, head: u64, node: u64) -> Vec<u64> {
    let mut seen = HashSet::new();
    let mut tasks = Vec::new();
    let mut at = word(v, head);
    while at != head && at >= KERNEL_HALF && seen.len() < MAX_NODES && seen.insert(at) {
        tasks.push(at - node);
        at = word(v, at);
    }
    tasks
}

/// Adds `view` to the views of `task`.
fn note(views: &mut BTreeMap<u64, Vec<View>>, task: u64, view: View) {
    let seen = views.entry(task).or_default();
    if !seen.contains(&view) {
        seen.push(view);
    }
}

/// The views read one pointer at a time.
fn pointer_by_pointer(p: &Plugin, pr: &Profile) -> Seen {
    let v = &mut virtual_dma(p, pr.kernel_dtb);
    let mut views: BTreeMap<u64, Vec<View>> = BTreeMap::new();
    let mut pids: BTreeMap<u64, u32> = BTreeMap::new();
    // The pid table: a node's shift, then each of its slots.
    let base = word(v, pr.ns + pr.idr_base) as u32;
    let mut entries = vec![(word(v, pr.ns + pr.xa_head), 0u64)];
    let mut nodes = 0;
    while let Some((entry, index)) = entries.pop() {
        if entry & 3 == 2 && entry > 4096 {
            nodes += 1;
            if nodes > MAX_NODES {
                break;
            }
            let node = entry - 2;
            let shift = word(v, node + pr.shift) & 0xff;
            for slot in 0..64 {
                let e = word(v, node + pr.slots + 8 * slot);
                if e != 0 {
                    entries.push((e, index + (slot << shift)));
                }
            }
        } else if entry != 0 {
            let nr = word(v, entry + pr.pid_nr) as u32;
            let first = word(v, entry + pr.pid_first);
            if first != 0 && u64::from(nr) == index + u64::from(base) {
                let task = first - pr.pid_link;
                pids.insert(task, nr);
                note(&mut views, task, View::PidTable);
            }
        }
    }
    for task in follow(v, pr.init_task + pr.tasks, pr.tasks) {
        note(&mut views, task, View::TaskList);
    }
    let mut signals = HashSet::new();
    let known: Vec<u64> = views.keys().copied().collect();
    for task in known {
        let signal = word(v, task + pr.signal);
        if signal != 0 && signals.insert(signal) {
            for t in follow(v, signal + pr.thread_head, pr.thread_node) {
                note(&mut views, t, View::ThreadGroup);
            }
        }
    }
    // The run queues and their trees, into each group's queue.
    let cpus = (word(v, pr.nr_cpu_ids) & 0xffff_ffff).min(8192);
    let mut idle = vec![pr.init_task];
    for cpu in 0..cpus {
        let rq = pr
            .runqueues
            .wrapping_add(word(v, pr.per_cpu_offset + 8 * cpu));
        let (curr, idle_task) = (word(v, rq + pr.curr), word(v, rq + pr.idle));
        idle.push(idle_task);
        if curr != idle_task {
            note(&mut views, curr, View::RunQueue);
        }
        let mut nodes = vec![word(v, rq + pr.rq_root)];
        let mut seen = HashSet::new();
        while let Some(node) = nodes.pop() {
            if node < KERNEL_HALF || seen.len() >= MAX_NODES || !seen.insert(node) {
                continue;
            }
            nodes.push(word(v, node + pr.left));
            nodes.push(word(v, node + pr.right));
            let entity = node - pr.run_node;
            match word(v, entity + pr.my_q) {
                0 => note(&mut views, entity - pr.task_se, View::RunQueue),
                queue => nodes.push(word(v, queue + pr.cfs_root)),
            }
        }
    }
    let mut out = Seen::new();
    for (task, mut seen) in views {
        if idle.contains(&task) {
            continue;
        }
        let pid = match pids.get(&task) {
            Some(&pid) => pid,
            None => word(v, task + pr.pid) as u32,
        };
        seen.sort_unstable();
        out.insert(pid, seen);
    }
    out
}
