//! The Linux layer's walks with the kernel known, each way: the engine's
//! (each level of every item one batch) against the same walk with each
//! read a device call of its own (the engine told to put one scatter
//! entry in a call), which is what following the pointers one at a time
//! costs. The open files, the sockets, the network devices, the kernel's
//! names and log, the processes' environments, every view of the
//! modules, the hooks and the page cache's files; each row's result compared with the other's,
//! item by item.

use std::collections::{BTreeMap, BTreeSet};

use leechio::linux::{CacheLocation, DetailsAsked, FileQuery, Hints, Kernel};
use leechio::EngineConfig;

use super::*;

/// What a walk read, by key (a pid, or an item's place), each item as
/// text, and the words naming the keys and items.
struct Read {
    items: BTreeMap<u32, String>,
    workload: String,
}

/// A walk of the Linux layer: its workload's name, the engine's call,
/// what the keys are, and the walk.
struct Walk {
    name: &'static str,
    method: &'static str,
    keys: Keys,
    run: fn(&Kernel) -> Read,
}

/// Items as text, by their place in `items`.
fn by_place<T: std::fmt::Debug>(items: impl IntoIterator<Item = T>) -> BTreeMap<u32, String> {
    (0..)
        .zip(items)
        .map(|(i, t)| (i, format!("{t:?}")))
        .collect()
}

const WALKS: [Walk; 9] = [
    Walk {
        name: "open files of every process",
        method: "engine: Kernel::open_files, kernel known",
        keys: Keys::Pids,
        run: |kernel| {
            let files = kernel.open_files(None);
            let fds: usize = files.processes.iter().map(|p| p.fds.len()).sum();
            let items = files.processes.iter().map(|p| {
                let fds: Vec<_> = p.fds.iter().map(|f| (f.fd, &f.name, f.pos)).collect();
                (p.pid, format!("{fds:?}"))
            });
            Read {
                items: items.collect(),
                workload: format!("{fds} fds of {} processes", files.processes.len()),
            }
        },
    },
    Walk {
        name: "TCP and UDP sockets",
        method: "engine: Kernel::sockets, kernel known",
        keys: Keys::Items("sockets"),
        run: |kernel| {
            let found = kernel.sockets();
            let owners = |s: &leechio::linux::InetSocket| {
                let o: Vec<_> = s.owners.iter().map(|o| (o.pid, o.fd)).collect();
                o
            };
            let items = found
                .sockets
                .iter()
                .map(|s| (s.protocol, s.state, s.local, s.peer, s.inode, owners(s)));
            Read {
                items: by_place(items),
                workload: format!("{} sockets", found.sockets.len()),
            }
        },
    },
    Walk {
        name: "network devices and addresses",
        method: "engine: Kernel::interfaces, kernel known",
        keys: Keys::Items("devices"),
        run: |kernel| {
            let found = kernel.interfaces();
            let addresses: usize = found
                .interfaces
                .iter()
                .map(|i| i.ipv4.len() + i.ipv6.len())
                .sum();
            Read {
                workload: format!("{} devices, {addresses} addresses", found.interfaces.len()),
                items: by_place(found.interfaces),
            }
        },
    },
    Walk {
        name: "the kernel's names and command line",
        method: "engine: Kernel::system, kernel known",
        keys: Keys::Items("fields"),
        // The clocks run: the names and command line are compared.
        run: |kernel| {
            let s = kernel.system();
            Read {
                items: by_place([format!("{:?}", s.uname), format!("{:?}", s.command_line)]),
                workload: "uname, clocks, command line".into(),
            }
        },
    },
    Walk {
        name: "the kernel log",
        method: "engine: Kernel::dmesg, kernel known",
        keys: Keys::Items("records"),
        run: |kernel| {
            let log = kernel.dmesg();
            let text: usize = log.records.iter().map(|r| r.text.len()).sum();
            Read {
                workload: format!("{} records, {text} bytes", log.records.len()),
                items: by_place(log.records.iter().map(|r| (r.seq, &r.text))),
            }
        },
    },
    Walk {
        name: "environments of every process",
        method: "engine: Kernel::processes_with environment, kernel known",
        keys: Keys::Pids,
        run: |kernel| {
            let (list, details) = kernel.processes_with(DetailsAsked { environment: true });
            let items = list.processes.iter().map(|p| {
                let env = details.get(&p.task).and_then(|d| d.environment.clone());
                (p.pid, format!("{env:?}"))
            });
            Read {
                workload: format!("{} processes", list.processes.len()),
                items: items.collect(),
            }
        },
    },
    Walk {
        name: "modules: list, address tree, sysfs, parameters",
        method: "engine: Kernel::module_views, kernel known",
        keys: Keys::Items("modules"),
        run: |kernel| {
            let views = kernel.module_views();
            let hidden = views.hidden.iter().map(|m| (true, m));
            let listed = views.list.modules.iter().map(|m| (false, m));
            let items = listed.chain(hidden).map(|(hidden, m)| {
                let seen = &views.seen_in.get(&m.address);
                (hidden, &m.name, m.taints, &m.params, seen.cloned())
            });
            Read {
                workload: format!(
                    "{} modules, {} built-in in /sys/module (its tree {} levels deep)",
                    views.list.modules.len(),
                    views.built_in,
                    views.sysfs_levels
                ),
                items: by_place(items),
            }
        },
    },
    Walk {
        name: "hooks: system-call table, ftrace callbacks",
        method: "engine: Kernel::hooks, kernel known",
        keys: Keys::Items("tables"),
        run: |kernel| {
            let hooks = kernel.hooks();
            let checked = hooks.checked.iter().map(|(t, n)| format!("{t} {n}"));
            let outside = hooks.outside.iter().map(|h| format!("{h:?}"));
            Read {
                workload: format!(
                    "{} system calls (the module tree {} nodes in {} levels)",
                    hooks.checked.first().map_or(0, |c| c.1),
                    hooks.module_tree_nodes,
                    hooks.module_tree_levels
                ),
                items: by_place(checked.chain(outside)),
            }
        },
    },
    Walk {
        name: "files from the page cache",
        method: "engine: Kernel::cached_files and cached_file, kernel known",
        keys: Keys::Items("files"),
        // The list, then the pages of its largest file (by cached pages).
        run: |kernel| {
            let list = kernel.cached_files();
            let largest = list.files.iter().max_by_key(|f| f.cached_pages);
            let query = largest.map(|f| FileQuery::Inode {
                number: f.inode,
                device: Some(f.device),
            });
            let pages = query
                .and_then(|q| kernel.cached_file(&q).ok())
                .map(|c| c.pages)
                .unwrap_or_default();
            let bytes: usize = pages.iter().map(|p| p.1.len()).sum();
            let files = list
                .files
                .iter()
                .map(|f| format!("{:?}", (f.inode, f.device, &f.path, f.cached_pages)));
            Read {
                workload: format!(
                    "{} files listed, the largest's {bytes} bytes",
                    list.files.len()
                ),
                items: by_place(files.chain([format!("{pages:?}")])),
            }
        },
    },
];

/// The rows of every walk: the engine's with the kernel known, then the
/// same walk a read a call, each compared with the other by key. A
/// target with no Linux kernel gets none, and a line on stderr that says
/// why.
pub(super) fn walks(bench: &mut Bench) -> Result<(), Failure> {
    let _plugin = bench.plugin(false)?;
    let device = Arc::new(LeechCore::open(&bench.existing())?);
    let hints = Hints {
        cache: CacheLocation::Off,
        ..Hints::default()
    };
    let mem = Memory::with_config(device.clone(), Default::default());
    let batched = match Kernel::find(&mem, &hints) {
        Ok(kernel) => kernel,
        Err(e) => {
            errln!("leechio: bench: no rows of the Linux walks: {e}");
            return Ok(());
        }
    };
    // The same kernel on an engine that makes a call of every read.
    let one_by_one = Memory::with_config(
        device.clone(),
        EngineConfig {
            max_entries_per_call: 1,
        },
    );
    let known = Hints {
        dtb: Some(batched.dtb()),
        kernel_base: Some(batched.virtual_base()),
        ..hints
    };
    let single = Kernel::find(&one_by_one, &known)
        .map_err(|e| Failure(format!("the kernel was found once, then not: {e}")))?;
    for walk in &WALKS {
        let first = bench.rows.len();
        let mut before = None;
        bench.row(walk.name, walk.method, 0, || {
            Ok(timed(&device, || before = Some((walk.run)(&batched))))
        })?;
        let mut after = None;
        let method = "engine: the same walk, a device call a read";
        bench.row(walk.name, method, 0, || {
            Ok(timed(&device, || after = Some((walk.run)(&single))))
        })?;
        let (Some(before), Some(after)) = (before, after) else {
            continue;
        };
        let differing: Vec<u32> = before
            .items
            .keys()
            .chain(after.items.keys())
            .filter(|k| before.items.get(k) != after.items.get(k))
            .copied()
            .collect::<BTreeSet<u32>>()
            .into_iter()
            .collect();
        let workload = format!("{}, {}", walk.name, before.workload);
        for row in &mut bench.rows[first..] {
            row.workload = workload.clone();
            row.lists = Some(ListCheck {
                processes: before.items.len(),
                differing: differing.clone(),
                changing: Vec::new(),
                keys: walk.keys,
            });
        }
    }
    Ok(())
}
