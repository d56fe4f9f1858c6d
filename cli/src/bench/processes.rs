//! The processes of a Linux target with their command lines: the engine's
//! walk (`Kernel::find`, then `Kernel::processes`) against the same list
//! read hop by hop, one read at a time, the way an OS layer over memflow's
//! synchronous API reads it: along `init_task.tasks` through `VirtualDma`,
//! with offsets a profile would give (taken from the kernel's BTF once,
//! outside the timed runs); and as a memflow tool gets it from the OS
//! plugin `linux_btf` over the connector `leechcore`.

use std::collections::{BTreeMap, HashSet};

use leechio::linux::{split_command_line, CacheLocation, Hints, Kernel, ProcessList};

use memflow::plugins::OsArgs;
use memflow::prelude::v1::{Os, OsInstanceArcBox, ProcessInfo};

use super::*;

pub(super) const FIND: &str = "Linux kernel found with no profile, no cache";
pub(super) const LIST: &str = "process list with command lines";

/// User addresses lie below this (47-bit canonical lower half).
const USER_END: u64 = 0x0000_8000_0000_0000;
/// Most bytes of a command line read (as the engine's walk).
const MAX_COMMAND_LINE: u64 = 1 << 20;
/// `PF_KTHREAD` in `task_struct.flags`: `/proc` shows no command line.
const PF_KTHREAD: u32 = 0x0020_0000;
/// Most tasks followed: Linux's largest pid space (`PID_MAX_LIMIT`).
const MAX_TASKS: usize = 1 << 22;

/// The workload's name, with the number of processes the engine listed.
fn list_workload(processes: usize) -> String {
    format!("{LIST}, {processes} processes")
}

/// How two process lists compare, by pid: pid, parent, name, command line
/// and DTB.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct ListCheck {
    /// Processes the row listed.
    pub processes: usize,
    /// Pids where the lists differ, the target's memory not having changed.
    pub differing: Vec<u32>,
    /// Pids left out: the engine read them differently before and after
    /// (a live target at work), and the row matches neither.
    pub changing: Vec<u32>,
    /// What the keys are: pids, or places of other items.
    pub keys: Keys,
}

/// What a list's keys are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum Keys {
    /// Pids of processes.
    #[default]
    Pids,
    /// Places of the items named, e.g. "sockets".
    Items(&'static str),
}

/// What the comparison looks at for each process.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listed {
    ppid: Option<u32>,
    name: String,
    cmdline: Vec<String>,
    dtb: Option<u64>,
}

type Listing = BTreeMap<u32, Listed>;

fn listing(list: &ProcessList) -> Listing {
    list.processes
        .iter()
        .map(|p| {
            let listed = Listed {
                ppid: p.ppid,
                name: p.name.clone(),
                cmdline: p.cmdline.clone(),
                dtb: p.dtb,
            };
            (p.pid, listed)
        })
        .collect()
}

/// Compares `got` with the engine's lists read `before` and `after` it:
/// a process (or task) that differs from `before` is right if it is as
/// `after` has it, and left out if the two engine lists disagree on it.
pub(super) fn compare<T: PartialEq>(
    got: &BTreeMap<u32, T>,
    before: &BTreeMap<u32, T>,
    after: Option<&BTreeMap<u32, T>>,
) -> ListCheck {
    let pids: std::collections::BTreeSet<u32> = got.keys().chain(before.keys()).copied().collect();
    let mut check = ListCheck {
        processes: got.len(),
        ..ListCheck::default()
    };
    for pid in pids {
        let (mine, then) = (got.get(&pid), before.get(&pid));
        if mine == then {
            continue;
        }
        match after.map(|a| a.get(&pid)) {
            Some(now) if now == mine => {}
            Some(now) if now != then => check.changing.push(pid),
            _ => check.differing.push(pid),
        }
    }
    check
}

/// What an OS layer learns once from a profile: where the task list
/// starts, the direct map, and the members it reads.
#[derive(Debug, Clone)]
struct Profile {
    kernel_dtb: u64,
    kernel_base: u64,
    direct_map_base: u64,
    init_task: u64,
    tasks: u64,
    pid: u64,
    tgid: u64,
    flags: u64,
    comm: u64,
    comm_len: usize,
    real_parent: u64,
    mm: u64,
    mm_pgd: u64,
    mm_arg_start: u64,
    mm_arg_end: u64,
}

impl Profile {
    fn of(kernel: &Kernel) -> Result<Profile, Failure> {
        let task = |m: &str| kernel.offset_of("task_struct", m);
        let mm = |m: &str| kernel.offset_of("mm_struct", m);
        let layout = || -> Result<Profile, leechio::linux::BtfError> {
            Ok(Profile {
                kernel_dtb: kernel.dtb(),
                kernel_base: kernel.virtual_base(),
                direct_map_base: kernel.direct_map_base(),
                init_task: kernel.init_task(),
                tasks: task("tasks")?,
                pid: task("pid")?,
                tgid: task("tgid")?,
                flags: task("flags")?,
                comm: task("comm")?,
                comm_len: kernel.btf().member_size("task_struct", "comm")?.min(64) as usize,
                real_parent: task("real_parent")?,
                mm: task("mm")?,
                mm_pgd: mm("pgd")?,
                mm_arg_start: mm("arg_start")?,
                mm_arg_end: mm("arg_end")?,
            })
        };
        layout().map_err(|e| Failure(format!("the kernel's BTF: {e}")))
    }
}

/// The process-list rows: the kernel found from nothing, the engine's
/// list with the kernel known, and memflow's hop-by-hop list. A target
/// with no Linux kernel gets none, and a line on stderr that says why.
pub(super) fn processes(bench: &mut Bench) -> Result<(), Failure> {
    let hints = uncached();
    // The engine, on the plugin's context as in the first phase; closed
    // before memflow's instances open theirs.
    let (profile, before, workload, engine_row) = {
        let (_plugin, device, mem) = engine_on_plugin(bench)?;
        let kernel = match Kernel::find(&mem, &hints) {
            Ok(kernel) => kernel,
            Err(e) => {
                errln!("leechio: bench: no process-list rows: {e}");
                return Ok(());
            }
        };
        bench.row(FIND, "engine: Kernel::find", 0, || {
            let mut found = Ok(());
            let t = timed(&device, || {
                found = Kernel::find(&mem, &hints).map(drop);
            });
            found.map_err(|e| Failure(format!("the kernel was found once, then not: {e}")))?;
            Ok(t)
        })?;
        let profile = Profile::of(&kernel)?;
        let mut list = ProcessList::default();
        bench.row(LIST, "engine: Kernel::processes, kernel known", 0, || {
            Ok(timed(&device, || list = kernel.processes()))
        })?;
        // Named by what it found.
        let workload = list_workload(list.processes.len());
        let engine_row = bench.rows.len() - 1;
        bench.rows[engine_row].workload = workload.clone();
        (profile, listing(&list), workload, engine_row)
    };
    let method = "memflow VirtualDma: hop by hop, read by read";
    let hints = Hints {
        dtb: Some(profile.kernel_dtb),
        kernel_base: Some(profile.kernel_base),
        ..hints
    };
    let rows = (&workload[..], method, engine_row);
    let read = |p: &Plugin| hop_by_hop(p, &profile);
    let after = memflow_rows(bench, rows, &before, read, &hints, |k| {
        listing(&k.processes())
    })?;
    // The same list through the OS plugin, as a memflow tool gets it: the
    // OS started first (outside the timed run; the kernel named to it),
    // its process_info_list timed, on memflow's uncached connector.
    let method = "OS plugin linux_btf: memflow process_info_list, kernel known";
    progress(&workload, method);
    let mut runs = Vec::new();
    let mut got = Listing::new();
    for _ in 0..bench.runs {
        stop_requested()?;
        let p = bench.plugin(false)?;
        let mut os = os_plugin(bench, &p, &profile)?;
        let mut list = Ok(Vec::new());
        runs.push(timed(&p.counter, || list = os.process_info_list()));
        let list = list.map_err(|e| Failure(format!("the OS plugin listed no processes: {e}")))?;
        got = os_listing(&list, &before);
    }
    push_median(bench, &workload, method, 0, runs);
    let check = compare(&got, &before, after.as_ref());
    if let Some(row) = bench.rows.last_mut() {
        row.lists = Some(check);
    }
    Ok(())
}

/// Hints that neither read nor write the kernel cache.
pub(super) fn uncached() -> Hints {
    Hints {
        cache: CacheLocation::Off,
        ..Hints::default()
    }
}

/// A plugin instance, and the engine on its context (LeechCore's
/// `existing`) with the device, whose counter it shares.
pub(super) fn engine_on_plugin(bench: &Bench) -> Result<(Plugin, Arc<LeechCore>, Memory), Failure> {
    let plugin = bench.plugin(false)?;
    let device = Arc::new(LeechCore::open(&bench.existing())?);
    let mem = Memory::with_config(device.clone(), Default::default());
    Ok((plugin, device, mem))
}

/// The row of `method` reading `workload` through memflow (`read`, on a
/// new instance each run), compared with the engine's row at
/// `engine_row`, which read `before`: the engine reads again (`again`,
/// the kernel found by `hints`) on the last instance's context, so an
/// item the live target changed meanwhile is told from one read wrong;
/// both rows say how they compare. What the engine read after, when it
/// could.
pub(super) fn memflow_rows<T: PartialEq>(
    bench: &mut Bench,
    (workload, method, engine_row): (&str, &'static str, usize),
    before: &BTreeMap<u32, T>,
    read: impl Fn(&Plugin) -> BTreeMap<u32, T>,
    hints: &Hints,
    again: impl FnOnce(&Kernel) -> BTreeMap<u32, T>,
) -> Result<Option<BTreeMap<u32, T>>, Failure> {
    progress(workload, method);
    let mut runs = Vec::new();
    let mut got = BTreeMap::new();
    let mut last = None;
    for _ in 0..bench.runs {
        stop_requested()?;
        let p = bench.plugin(true)?;
        runs.push(timed(&p.counter, || got = read(&p)));
        last = Some(p);
    }
    push_median(bench, workload, method, 0, runs);
    let after = last.and_then(|_plugin| {
        let device = Arc::new(LeechCore::open(&bench.existing()).ok()?);
        let mem = Memory::with_config(device, Default::default());
        Some(again(&Kernel::find(&mem, hints).ok()?))
    });
    let check = compare(&got, before, after.as_ref());
    if let Some(row) = bench.rows.last_mut() {
        row.lists = Some(check.clone());
    }
    bench.rows[engine_row].lists = Some(ListCheck {
        processes: before.len(),
        ..check
    });
    Ok(after)
}

/// The OS plugin `linux_btf` over `p`'s connector, told where the kernel
/// is (so it checks it rather than searching) and using no kernel cache.
fn os_plugin(
    bench: &Bench,
    p: &Plugin,
    profile: &Profile,
) -> Result<OsInstanceArcBox<'static>, Failure> {
    let mut inventory = Inventory::empty();
    inventory.add_dir(&bench.plugin_dir).map_err(|e| {
        Failure(format!(
            "loading plugins from {}: {e}",
            bench.plugin_dir.display()
        ))
    })?;
    let args: OsArgs = format!(
        "kernel_cache=off,dtb={:#x},kernel_base={:#x}",
        profile.kernel_dtb, profile.kernel_base
    )
    .parse()
    .map_err(|e| Failure(format!("the OS plugin's arguments: {e}")))?;
    inventory
        .instantiate_os("linux_btf", Some(p.conn.clone()), Some(&args))
        .map_err(|e| Failure(format!("the OS plugin linux_btf did not start: {e}")))
}

/// memflow's process list as the comparison reads it: pid, name, command
/// line and DTB (kernel threads have none: memflow gets the kernel's
/// table); memflow has no parent pid, so the engine's is taken.
fn os_listing(list: &[ProcessInfo], engine: &Listing) -> Listing {
    list.iter()
        .map(|p| {
            let cmdline: Vec<String> = match p.command_line.is_empty() {
                true => Vec::new(),
                false => p.command_line.split(' ').map(str::to_string).collect(),
            };
            let same = engine.get(&p.pid);
            // The engine's arguments joined as memflow joins them.
            let args = match same {
                Some(e) if e.cmdline.join(" ") == p.command_line.as_ref() => e.cmdline.clone(),
                _ => cmdline,
            };
            let listed = Listed {
                ppid: same.and_then(|e| e.ppid),
                name: p.name.to_string(),
                cmdline: args,
                dtb: same.and_then(|e| e.dtb.map(|_| p.dtb1.to_umem())),
            };
            (p.pid, listed)
        })
        .collect()
}

/// The processes along `init_task.tasks`, which links thread-group
/// leaders: every member one `VirtualDma` read on the kernel's table, each
/// command line one read per page through the process's own table (the
/// same `VirtualDma`, so memflow's page cache is shared, as an OS layer
/// shares its connector).
fn hop_by_hop(p: &Plugin, pr: &Profile) -> Listing {
    let mut kernel = virtual_dma(p, pr.kernel_dtb);
    let u32_at = |v: &mut Virtual, at: u64| v.read::<u32>(Address::from(at)).ok();
    let u64_at = |v: &mut Virtual, at: u64| v.read::<u64>(Address::from(at)).ok();
    let head = pr.init_task + pr.tasks;
    let mut seen = HashSet::new();
    let mut list = Listing::new();
    let mut link = u64_at(&mut kernel, head);
    while let Some(at) = link.filter(|&at| at != head && seen.len() < MAX_TASKS) {
        if !seen.insert(at) {
            break;
        }
        let task = at.wrapping_sub(pr.tasks);
        link = u64_at(&mut kernel, at);
        let (Some(pid), Some(tgid)) = (
            u32_at(&mut kernel, task.wrapping_add(pr.pid)),
            u32_at(&mut kernel, task.wrapping_add(pr.tgid)),
        ) else {
            continue;
        };
        if pid != tgid {
            continue;
        }
        let mut comm = vec![0u8; pr.comm_len];
        let _ = kernel.read_raw_into(Address::from(task.wrapping_add(pr.comm)), &mut comm);
        let end = comm.iter().position(|&c| c == 0).unwrap_or(comm.len());
        let flags = u32_at(&mut kernel, task.wrapping_add(pr.flags)).unwrap_or(0);
        let parent = u64_at(&mut kernel, task.wrapping_add(pr.real_parent)).unwrap_or(0);
        let ppid = u32_at(&mut kernel, parent.wrapping_add(pr.tgid)).unwrap_or(0);
        let mm = u64_at(&mut kernel, task.wrapping_add(pr.mm)).unwrap_or(0);
        let mut listed = Listed {
            ppid: Some(ppid),
            name: String::from_utf8_lossy(&comm[..end]).into_owned(),
            cmdline: Vec::new(),
            dtb: None,
        };
        if mm != 0 && flags & PF_KTHREAD == 0 {
            let pgd = u64_at(&mut kernel, mm.wrapping_add(pr.mm_pgd)).unwrap_or(0);
            let start = u64_at(&mut kernel, mm.wrapping_add(pr.mm_arg_start)).unwrap_or(0);
            let end = u64_at(&mut kernel, mm.wrapping_add(pr.mm_arg_end)).unwrap_or(0);
            if let Some(dtb) = pgd.checked_sub(pr.direct_map_base) {
                listed.dtb = Some(dtb);
                listed.cmdline = command_line(&mut kernel, dtb, start, end);
            }
        }
        list.insert(pid, listed);
    }
    list
}

/// The arguments from `start` to `end` through the table at `dtb`, a page
/// a read; none when any page is unreadable (as the engine leaves them).
/// `v` reads with the kernel's table again afterwards.
fn command_line(v: &mut Virtual, dtb: u64, start: u64, end: u64) -> Vec<String> {
    if start >= end || end > USER_END || end - start > MAX_COMMAND_LINE {
        return Vec::new();
    }
    let kernel = v.set_translator(x64::new_translator(Address::from(dtb)));
    let mut bytes = vec![0u8; (end - start) as usize];
    let mut at = start;
    let mut read = true;
    while read && at < end {
        let stop = ((at | 0xfff) + 1).min(end);
        let buf = &mut bytes[(at - start) as usize..(stop - start) as usize];
        read = v.read_raw_into(Address::from(at), buf).is_ok();
        at = stop;
    }
    v.set_translator(kernel);
    match read {
        true => split_command_line(&bytes),
        false => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(name: &str) -> Listed {
        Listed {
            ppid: Some(1),
            name: name.into(),
            cmdline: vec![name.into()],
            dtb: Some(0x1000),
        }
    }

    #[test]
    fn a_process_differs_only_if_the_engine_read_it_the_same_both_times() {
        let list = |entries: &[(u32, &str)]| -> Listing {
            entries.iter().map(|&(pid, n)| (pid, listed(n))).collect()
        };
        let before = list(&[(1, "init"), (2, "a"), (3, "b"), (4, "c"), (5, "d")]);
        let after = list(&[(1, "init"), (2, "a2"), (3, "b2"), (4, "c"), (6, "e")]);
        // 2: as the engine reads it now; 3: the engine's two reads differ;
        // 4: wrong; 5: gone since, and missing; 6: new since, and missing;
        // 7: listed by neither engine read.
        let got = list(&[(1, "init"), (2, "a2"), (3, "x"), (4, "wrong"), (7, "f")]);
        let check = compare(&got, &before, Some(&after));
        assert_eq!(
            check,
            ListCheck {
                processes: 5,
                differing: vec![4, 7],
                changing: vec![3],
                keys: Keys::Pids,
            }
        );
        // Without a second engine read, every difference counts.
        let check = compare(&got, &before, None);
        assert_eq!(check.differing, [2, 3, 4, 5, 7]);
        assert!(check.changing.is_empty());
        assert_eq!(
            compare(&before, &before, None),
            ListCheck {
                processes: 5,
                ..ListCheck::default()
            }
        );
    }
}
