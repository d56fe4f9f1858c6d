//! The processes of a live Linux guest, and of a memory image of it, read
//! from its pid table with no profile, against what the guest's own /proc
//! said at boot (its oracle, printed by its /init) and the bytes its
//! pattern process holds.
//!
//! How the walk is matched with the oracle: by pid. Every user task the
//! oracle lists must be found with the same tgid, ppid, comm, state,
//! kernel-thread flag and command line, and no user task may be found that
//! it does not list (the guest starts none after it). Kernel threads are
//! matched the same way where both sides have them, but a few may come or
//! go between the boot and the walk (workqueue workers), and one that ran
//! since may be caught in another state: at most [`KERNEL_THREAD_CHANGES`]
//! of each, all named in the output.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

use common::linux::{engine, no_cache, red_black_height_fits, sleeper, Unlinked};
use common::qemu::{shared_guest, Guest, GuestKernel, GuestOptions};
use leechio::linux::{
    module_taint_letters, CacheError, DetailsAsked, FileContents, FileKind, FileQuery, HookTable,
    Kernel, KernelLog, ModuleView, ProcessList, ProcessViews, Stage, System, TaskDetails, View,
};
use leechio::{AddressSpace, Call, DeviceConfig, LeechCore, Memory};

/// Read calls of a list once the kernel is known, on a guest whose pids
/// stay under 4,096: the pid table's head, its two levels, the pids, the
/// tasks, the `mm`s, then four page-table levels and the command lines.
const LIST_CALLS: u64 = 11;
/// The same with pids from 5,000 up: a third level.
const LIST_CALLS_THREE_LEVELS: u64 = 12;
/// Read calls of the open files of every process with the kernel known,
/// read beside the list (which they need for the processes' names).
const FILES_CALLS: u64 = 12;
/// Read calls of `Kernel::find` with no cache (as `tests/linux_find.rs`
/// counts them).
const FIND_CALLS: u64 = 8;
/// Kernel threads that may appear, disappear or change state between the
/// oracle and the walk.
const KERNEL_THREAD_CHANGES: usize = 4;
/// How many more processes the big guest starts.
const EXTRA_PROCESSES: u32 = 300;
/// Read calls of `Kernel::system` once the kernel is known: the names,
/// the timekeeper and the command line's pointer and length, then the
/// command line.
const SYSTEM_CALLS: u64 = 2;
/// Read calls of `Kernel::dmesg` once the kernel is known: `prb` and the
/// kernel's two static rings, then the ring's descriptors, infos and text.
const DMESG_CALLS: u64 = 2;

/// Read calls of the page cache's walk with the kernel known, on top of
/// the links of the dentry hash table's longest chain: the symbols, the
/// table, then the inodes and super blocks of the last link, and the
/// mount the paths start from (the directories above each file are in
/// the table: read already).
const CACHE_HASH_CALLS: u64 = 4;
/// Read calls the open files' side adds to the open files' walk: the
/// inodes of the files.
const CACHE_OPEN_CALLS: u64 = 1;

/// Lists the processes, and the read calls the list took.
fn list(device: &LeechCore, kernel: &Kernel) -> (ProcessList, u64) {
    let before = device.call_count(Call::ReadScatter);
    let list = kernel.processes();
    (list, device.call_count(Call::ReadScatter) - before)
}

/// One task as the walk gives it, in the oracle's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    tgid: u32,
    ppid: Option<u32>,
    comm: String,
    state: char,
    kernel_thread: bool,
    cmdline: Vec<String>,
}

/// Every task of `list` (threads with their group's ppid, flags and
/// command line), by pid.
fn seen(list: &ProcessList) -> BTreeMap<u32, Seen> {
    let mut tasks = BTreeMap::new();
    for p in &list.processes {
        let task = |pid, comm: &str, state| {
            (
                pid,
                Seen {
                    tgid: p.pid,
                    ppid: p.ppid,
                    comm: comm.to_string(),
                    state,
                    kernel_thread: p.kernel_thread,
                    cmdline: p.cmdline.clone(),
                },
            )
        };
        assert!(tasks
            .insert(p.pid, task(p.pid, &p.name, p.state).1)
            .is_none());
        for t in &p.threads {
            let (pid, seen) = task(t.pid, &t.name, t.state);
            assert!(tasks.insert(pid, seen).is_none(), "pid {pid} twice");
        }
    }
    tasks
}

/// The walk against the guest's oracle (see the file's documentation).
fn check_against_oracle(list: &ProcessList, guest: &Guest) {
    assert!(list.failed.is_empty(), "{:#?}", list.failed);
    let found = seen(list);
    let mut came = Vec::new();
    let mut went = Vec::new();
    let mut changed = Vec::new();
    for task in guest.tasks() {
        let expected = Seen {
            tgid: task.tgid,
            ppid: Some(task.ppid),
            comm: task.comm.clone(),
            state: task.state,
            kernel_thread: task.kernel_thread,
            cmdline: task.cmdline.clone(),
        };
        match found.get(&task.pid) {
            None if task.kernel_thread => went.push(task.pid),
            None => panic!("user task {} not found: {task:?}", task.pid),
            Some(seen) if seen.kernel_thread && seen.state != expected.state => {
                assert_eq!(
                    Seen {
                        state: expected.state,
                        ..seen.clone()
                    },
                    expected,
                    "pid {}",
                    task.pid
                );
                changed.push((task.pid, expected.state, seen.state));
            }
            Some(seen) => assert_eq!(seen, &expected, "pid {}", task.pid),
        }
    }
    for (pid, seen) in &found {
        if guest.oracle().task(*pid).is_none() {
            assert!(
                seen.kernel_thread,
                "a user task the guest did not list: {pid} {seen:?}"
            );
            came.push(*pid);
        }
    }
    eprintln!(
        "{} tasks; kernel threads since the oracle: new {came:?}, gone {went:?}, in another state {changed:?}",
        found.len()
    );
    for changes in [came.len(), went.len(), changed.len()] {
        assert!(
            changes <= KERNEL_THREAD_CHANGES,
            "{came:?} {went:?} {changed:?}"
        );
    }
}

/// The pattern process's memory, read through the DTB the walk gives it,
/// byte for byte as the guest wrote it; its threads; every user process
/// with a DTB of its own.
fn check_address_spaces(list: &ProcessList, guest: &Guest, mem: &Memory) {
    let pattern = guest.pattern();
    let process = list.get(pattern.pid).expect("the pattern process");
    let threads: Vec<&str> = process.threads.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(threads, ["leechio-thr-1", "leechio-thr-2"]);
    let dtb = process.dtb.expect("the pattern process's DTB");
    // In the mode the guest's CPU runs in.
    let space = AddressSpace::new(mem.clone(), dtb, guest.paging());
    for half in pattern.halves() {
        let len = 0x3000;
        let mut bytes = vec![0u8; len];
        mem.block_on(space.read(half.start, &mut bytes))
            .unwrap_or_else(|e| panic!("{half:x?} through {dtb:#x}: {e}"));
        assert!(bytes == pattern.bytes(half.start, len), "{half:x?}");
    }
    let mut dtbs = Vec::new();
    for p in &list.processes {
        assert_eq!(p.dtb.is_some(), p.mm.is_some(), "{p:?}");
        if p.kernel_thread || p.state == 'Z' {
            assert_eq!((p.dtb, p.mm), (None, None), "{p:?}");
        } else {
            dtbs.push(p.dtb.expect("a user process's DTB"));
        }
    }
    let count = dtbs.len();
    dtbs.sort_unstable();
    dtbs.dedup();
    assert_eq!(dtbs.len(), count, "user processes share a DTB");
    assert_eq!(list.by_dtb(dtb).map(|p| p.pid), Some(pattern.pid));
}

/// Nanoseconds a clock tick of `/proc/PID/stat` counts (USER_HZ is 100).
const NS_PER_TICK: u64 = 10_000_000;

/// Every task's credentials and start time and every process's
/// environment, as the guest's /proc said (kernel threads too, those
/// still there); the guest's user process (uid 1001) and its process with
/// an ambient capability and an environment of its own among them.
fn check_details(list: &ProcessList, details: &HashMap<u64, TaskDetails>, guest: &Guest) {
    let mut checked = 0;
    for p in &list.processes {
        let tasks =
            std::iter::once((p.pid, p.task)).chain(p.threads.iter().map(|t| (t.pid, t.task)));
        for (pid, task) in tasks {
            let Some(want) = guest.oracle().task(pid) else {
                continue; // a kernel thread since the oracle
            };
            let d = &details[&task];
            assert!(d.failed.is_empty(), "pid {pid}: {:?}", d.failed);
            let c = d.credentials.clone().expect("credentials").unwrap();
            let k = c.capabilities;
            let caps = [
                k.inheritable,
                k.permitted,
                k.effective,
                k.bounding,
                k.ambient.unwrap(),
            ];
            assert_eq!(
                (c.uid, c.gid, caps),
                (want.uid, want.gid, want.caps),
                "pid {pid}"
            );
            assert_eq!(
                d.start_time.unwrap() / NS_PER_TICK,
                want.start_ticks,
                "pid {pid}"
            );
            let environment = d
                .environment
                .clone()
                .map(Result::unwrap)
                .unwrap_or_default();
            let want_env = want.environment();
            assert_eq!(environment, want_env, "pid {pid}");
            checked += 1;
        }
    }
    assert!(checked > 20, "{checked} tasks checked");
    let by_cmdline = |cmdline: &str| {
        let p = list
            .processes
            .iter()
            .find(|p| p.cmdline.join(" ") == cmdline);
        &details[&p.unwrap_or_else(|| panic!("no {cmdline}")).task]
    };
    let user = by_cmdline("sleep 100003")
        .credentials
        .clone()
        .unwrap()
        .unwrap();
    assert_eq!((user.uid, user.gid), ([1001; 4], [1002; 4]));
    let ambient = by_cmdline("/bin/sleep 100004");
    let caps = ambient.credentials.clone().unwrap().unwrap().capabilities;
    assert_eq!(caps.ambient, Some(1 << 13), "CAP_NET_RAW");
    let environment = ambient.environment.clone().unwrap().unwrap();
    assert_eq!(environment, ["LEECHIO_ENV=one", "LEECHIO_SPACE=two words"]);
}

/// Every task the views found, by pid (threads too), with the views that
/// have it; the views' read calls.
fn read_views(device: &LeechCore, kernel: &Kernel) -> (ProcessViews, u64) {
    let before = device.call_count(Call::ReadScatter);
    let views = kernel.process_views();
    (views, device.call_count(Call::ReadScatter) - before)
}

/// The views of a clean guest agree, with the oracle too: every task of
/// the pid table in its thread group, every process on the task list, and
/// each run queue read (the guest has one CPU); nothing hides.
fn check_views_agree(views: &ProcessViews, list: &ProcessList, guest: &Guest) {
    assert_eq!(views.failed, []);
    assert_eq!(views.unread, []);
    assert_eq!(
        views.hidden().count(),
        0,
        "{:#?}",
        views.hidden().collect::<Vec<_>>()
    );
    // One CPU, idle or not, whose idle task is init_task.
    let queues: Vec<(u32, u64)> = views.run_queues.iter().map(|q| (q.cpu, q.idle)).collect();
    assert_eq!(queues, [(0, guest.symbol("init_task"))]);
    let on_queue: Vec<(u32, &str, Option<u32>)> = views
        .tasks
        .iter()
        .filter(|t| t.seen_in.contains(&View::RunQueue))
        .map(|t| (t.pid, t.name.as_str(), t.cpu))
        .collect();
    eprintln!(
        "views: {} tasks, {} thread groups, on the run queue {on_queue:?}",
        views.tasks.len(),
        views.thread_groups
    );
    let mut listed = 0;
    for p in &list.processes {
        let tasks =
            std::iter::once((p.pid, p.task)).chain(p.threads.iter().map(|t| (t.pid, t.task)));
        for (pid, task) in tasks {
            let t = views.tasks.iter().find(|t| t.task == task).unwrap();
            assert_eq!(t.pid, pid);
            let mut want = vec![View::PidTable];
            if pid == p.pid {
                want.push(View::TaskList);
            }
            want.push(View::ThreadGroup);
            let seen: Vec<View> = t
                .seen_in
                .iter()
                .copied()
                .filter(|&v| v != View::RunQueue)
                .collect();
            assert_eq!(seen, want, "{t:?}");
            listed += 1;
        }
    }
    assert_eq!(views.tasks.len(), listed);
    assert_eq!(
        views.thread_groups,
        list.processes.len() + 1,
        "and init_task's"
    );
    // Every user task of the oracle.
    for task in guest.tasks().iter().filter(|t| !t.kernel_thread) {
        assert!(views.tasks.iter().any(|t| t.pid == task.pid), "{task:?}");
    }
}

/// Read calls of the modules' views on the test guests (three modules:
/// crc7, crc-itu-t, dummy; some sixty built-in ones in /sys/module on
/// 6.1, 92 on 6.12), with 4 or 5 levels of paging, beside the levels of
/// /sys/module's red-black tree: the deepest view is /sys/module (the
/// kset's pointer, the kset, its directory, the tree of its entries in
/// the direct map a level a call, then each entry's module), beside the
/// list (its head and a call per two modules, then their parameters and
/// kset nodes, read through the kernel's tables), the address tree and
/// the taint mask.
const MODULE_VIEWS_CALLS: u64 = 4;

/// The modules of every view as the guest's /proc/modules said, none
/// hidden, in [`MODULE_VIEWS_CALLS`] and a call a level of /sys/module's
/// tree, whose levels are a red-black tree's of its entries; each
/// module's taint as its /sys/module/NAME/taint, its parameters as its
/// file declares them, with the values sysfs (or insmod's command line)
/// gave; the kernel's taint as /proc/sys/kernel/tainted; as many entries
/// in /sys/module.
fn check_module_views(kernel: &Kernel, device: &LeechCore, guest: &Guest) {
    let before = device.call_count(Call::ReadScatter);
    let views = kernel.module_views();
    let calls = device.call_count(Call::ReadScatter) - before;
    let names: Vec<&str> = views.list.modules.iter().map(|m| m.name.as_str()).collect();
    let want: Vec<&str> = guest.modules().iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, want);
    assert!(
        views.hidden.is_empty() && views.partly_seen.is_empty(),
        "{views:#?}"
    );
    assert!(
        views.failed.is_empty() && views.list.failed.is_empty() && views.notes.is_empty(),
        "{views:#?}"
    );
    let every = [
        ModuleView::List,
        ModuleView::AddressTree,
        ModuleView::Sysfs,
        ModuleView::KsetList,
    ];
    assert_eq!(views.read, every);
    let oracle = &guest.oracle().integrity;
    assert_eq!(views.kernel_taint, Ok(oracle.tainted));
    assert_eq!(
        views.built_in + views.list.modules.len(),
        oracle.sysfs_entries
    );
    for m in &views.list.modules {
        assert_eq!(views.seen_in[&m.address], every, "{}", m.name);
        let letters = module_taint_letters(m.taints.unwrap());
        assert_eq!(letters, oracle.module_taint[&m.name], "{}", m.name);
        let params = m.params.as_ref().unwrap();
        let got: Vec<(String, String)> = params
            .iter()
            .map(|p| (p.name.clone().unwrap(), p.kind.unwrap().to_string()))
            .collect();
        let declared: Vec<(String, String)> = oracle
            .parmtypes
            .iter()
            .filter(|((module, _), _)| *module == m.name)
            .map(|((_, name), kind)| (name.clone(), kind.clone()))
            .collect();
        assert_eq!(got, declared, "{}", m.name);
        for p in params {
            let key = (m.name.clone(), p.name.clone().unwrap());
            let shown = oracle.params.get(&key).or(oracle.given.get(&key));
            assert_eq!(p.value.as_ref().ok(), shown, "{key:?}");
        }
    }
    // Something to compare: an unsigned module, and a parameter.
    assert!(oracle.tainted != 0 && !oracle.given.is_empty());
    eprintln!(
        "module views: {calls} read calls, /sys/module's tree {} levels deep",
        views.sysfs_levels
    );
    let entries = (views.built_in + views.list.modules.len() + views.sysfs_files) as u64;
    assert!(
        red_black_height_fits(entries, entries, views.sysfs_levels as u64),
        "{entries} entries, {} levels",
        views.sysfs_levels
    );
    assert_eq!(calls, MODULE_VIEWS_CALLS + views.sysfs_levels as u64);
}

/// Read calls of the hooks on the test guests beside the module address
/// tree's: the system-call table (its length from BTF) and the ftrace
/// list's head (the list is empty) beside the modules' list (its head and
/// a call per two of the three modules) and the address tree (its root,
/// then a call a level: 2 levels on 6.1, whose modules have a node or
/// two; 4 on 6.12, a node for each of up to seven kinds of memory); no
/// read of the kernel's symbol table.
const HOOKS_LIST_CALLS: u64 = 3;

/// No system-call entry nor ftrace callback points outside the kernel's
/// text and its modules' code; the native table has its entries; in the
/// calls of the module list or of the address tree, whose levels are a
/// red-black tree's of its nodes.
fn check_hooks(kernel: &Kernel, device: &LeechCore) {
    let (hooks, calls) = counted(device, || kernel.hooks());
    assert_eq!(hooks.outside, [], "{hooks:#?}");
    assert!(hooks.failed.is_empty(), "{hooks:#?}");
    let native = hooks
        .checked
        .iter()
        .find(|(t, _)| *t == HookTable::Syscalls);
    assert!(native.is_some_and(|&(_, n)| n > 300), "{hooks:#?}");
    let (nodes, levels) = (hooks.module_tree_nodes, hooks.module_tree_levels);
    eprintln!("hooks: {calls} read calls, the module tree {nodes} nodes in {levels} levels");
    assert!(nodes >= 3, "a node at least for each module: {nodes}");
    assert!(
        red_black_height_fits(nodes as u64, nodes as u64, levels as u64),
        "{nodes} nodes, {levels} levels"
    );
    assert_eq!(calls, HOOKS_LIST_CALLS.max(1 + levels as u64));
}

/// Every open fd of every process, read beside the process list, against
/// what the guest's /proc said (every process but `--processes`' extra
/// ones): the same fds, each with the name `readlink` gave, `fdinfo`'s
/// flags, position and inode; the pattern process's fds of every kind,
/// which its stopped child shares, and the same read for it alone in as
/// many calls. The read calls it took.
fn check_open_files(device: &LeechCore, kernel: &Kernel, guest: &Guest) -> u64 {
    let before = device.call_count(Call::ReadScatter);
    let found = kernel.open_files(None);
    let calls = device.call_count(Call::ReadScatter) - before;
    assert!(found.failed.is_empty(), "{:#?}", found.failed);
    let oracle = guest.oracle();
    let extra = oracle.kernel_cmdline.contains("leechio.processes=");
    let mut compared = 0;
    for p in &found.processes {
        if oracle.task(p.pid).is_none() || (extra && p.pid >= 5000) {
            continue;
        }
        let got: Vec<(u32, String, u32, i64)> = p
            .fds
            .iter()
            .map(|f| (f.fd, f.name.clone().unwrap(), f.flags.unwrap(), f.pos))
            .collect();
        let want: Vec<(u32, String, u32, i64)> = oracle
            .fds_of(p.pid)
            .map(|g| (g.fd, g.name.clone(), g.flags, g.pos))
            .collect();
        assert_eq!(got, want, "pid {} ({})", p.pid, p.name);
        for (f, g) in p.fds.iter().zip(oracle.fds_of(p.pid)) {
            if let Some(inode) = g.inode {
                assert_eq!(f.inode, inode, "{f:?}");
            }
        }
        compared += got.len();
    }
    assert_eq!(
        compared,
        oracle.fds.len(),
        "an fd /proc listed was not found"
    );
    // The pattern process holds one of every kind, at the fds it opened
    // them.
    let pattern = found
        .processes
        .iter()
        .find(|p| p.pid == guest.pattern().pid)
        .unwrap();
    let kinds: Vec<(u32, FileKind, bool)> = pattern
        .fds
        .iter()
        .map(|f| (f.fd, f.kind, f.socket.is_some()))
        .collect();
    use FileKind::*;
    assert_eq!(
        kinds,
        [
            (0, CharDevice, false),
            (2, CharDevice, false),
            (3, Regular, false),
            (4, Regular, false),
            (5, Directory, false),
            (6, Regular, false),
            (7, Regular, false),
            (8, Fifo, false),
            (9, Fifo, false),
            (10, Socket, true),
            (11, Socket, true),
            (12, Socket, true),
            (13, AnonInode, false),
            (14, Regular, false),
            (15, Regular, false),
            // The TCP and UDP sockets (see check_network).
            (16, Socket, true),
            (17, Socket, true),
            (18, Socket, true),
            (19, Socket, true),
            (20, Socket, true),
            (21, Socket, true),
            (22, Socket, true),
            (23, Socket, true),
            (24, Socket, true),
            (25, Socket, true),
            (100, Regular, false),
        ]
    );
    let file = |fd: u32| pattern.fds.iter().find(|f| f.fd == fd).unwrap().file;
    assert_eq!(file(3), file(100), "dup2 shares the file");
    // One process alone: the same fds, in as many calls (the same depth).
    let before = device.call_count(Call::ReadScatter);
    let one = kernel.open_files(Some(pattern.pid));
    assert_eq!(device.call_count(Call::ReadScatter) - before, calls);
    assert_eq!(one.processes, std::slice::from_ref(pattern));
    // Its stopped child inherited them: the same struct files.
    let child = guest
        .processes()
        .into_iter()
        .find(|t| t.ppid == pattern.pid && t.state == 'T')
        .unwrap();
    let child = found.processes.iter().find(|p| p.pid == child.pid).unwrap();
    for f in pattern.fds.iter().filter(|f| f.fd >= 3) {
        let same = child.fds.iter().find(|c| c.fd == f.fd).unwrap();
        assert_eq!((same.file, &same.name), (f.file, &f.name));
    }
    calls
}

/// Read calls of `Kernel::sockets` with the kernel known: the open files'
/// (the namespaces read beside them), then every socket's `struct sock`.
const SOCKETS_CALLS: u64 = FILES_CALLS + 1;
/// Read calls of `Kernel::interfaces` with the kernel known: the
/// namespaces' list head, the namespace, the devices (both ends of each
/// list at once: lo and dummy0 in one), their hardware addresses and
/// address lists' heads, then the addresses a node of each list at a
/// time: one, as no list is longer than two (dummy0's IPv6 addresses,
/// global and link-local, both ends of its list at once).
const INTERFACES_CALLS: u64 = 5;

/// The TCP and UDP sockets against `/proc/net/{tcp,tcp6,udp,udp6}` (every
/// socket a file holds: protocol, addresses, ports, state and inode), and
/// who holds each against the fds `/proc` lists; the network devices
/// against `/sys/class/net`, `ip -o -4 addr` and `/proc/net/if_inet6`.
/// Returns the read calls of each.
fn check_network(device: &LeechCore, kernel: &Kernel, guest: &Guest) -> (u64, u64) {
    let oracle = guest.oracle();
    let (found, socket_calls) = counted(device, || kernel.sockets());
    assert!(found.failed.is_empty(), "{:#?}", found.failed);
    type Row = (String, SocketAddr, SocketAddr, u8, u64);
    let got: BTreeSet<Row> = found
        .sockets
        .iter()
        .filter(|s| s.is_listed())
        .map(|s| (s.protocol.to_string(), s.local, s.peer, s.state, s.inode))
        .collect();
    let want: BTreeSet<Row> = oracle
        .network
        .sockets
        .iter()
        .filter(|s| s.inode != 0)
        .map(|s| (s.protocol.clone(), s.local, s.peer, s.state, s.inode))
        .collect();
    assert_eq!(got, want);
    // The pattern process's: two listeners, three connections (both
    // ends), two bound UDP sockets; and its unbound UDP socket, which no
    // table lists.
    assert_eq!(got.len(), 10, "{got:#?}");
    let unlisted: Vec<_> = found.sockets.iter().filter(|s| !s.is_listed()).collect();
    assert_eq!(unlisted.len(), 1, "{unlisted:#?}");
    let init_net = found.sockets[0].netns;
    assert!(init_net.is_some());
    for s in &found.sockets {
        let owners: BTreeSet<(u32, u32)> = s.owners.iter().map(|o| (o.pid, o.fd)).collect();
        let name = format!("socket:[{}]", s.inode);
        let want: BTreeSet<(u32, u32)> = oracle
            .fds
            .iter()
            .filter(|f| f.name == name)
            .map(|f| (f.pid, f.fd))
            .collect();
        assert_eq!(owners, want, "{s:?}");
        assert_eq!(s.netns, init_net, "one namespace: {s:?}");
    }
    // (Unix sockets: the pattern's pair.)
    assert!(found.others >= 2, "{}", found.others);

    let (found, interface_calls) = counted(device, || kernel.interfaces());
    assert!(found.failed.is_empty(), "{:#?}", found.failed);
    type Device = (i32, String, String, u32, u32, u16);
    type Addresses = (
        BTreeSet<(Ipv4Addr, u8, String)>,
        BTreeSet<(Ipv6Addr, u32, u32)>,
    );
    let got: Vec<(Device, Addresses)> = found
        .interfaces
        .iter()
        .map(|i| {
            let hardware = i.hardware.as_ref().unwrap();
            let hex: Vec<String> = hardware.iter().map(|b| format!("{b:02x}")).collect();
            let device = (
                i.index,
                i.name.clone(),
                hex.join(":"),
                i.mtu,
                i.flags,
                i.link_type,
            );
            let v4 = i
                .ipv4
                .iter()
                .map(|a| (a.address, a.prefix, a.label.clone()));
            let v6 = i.ipv6.iter().map(|a| (a.address, a.prefix, a.scope));
            (device, (v4.collect(), v6.collect()))
        })
        .collect();
    let want: Vec<_> = oracle
        .network
        .interfaces
        .iter()
        .map(|i| {
            let device = (
                i.index,
                i.name.clone(),
                i.address.clone(),
                i.mtu,
                i.flags,
                i.link_type,
            );
            let v4 = i.ipv4.iter().cloned().collect();
            let v6 = i.ipv6.iter().cloned().collect();
            (device, (v4, v6))
        })
        .collect();
    assert_eq!(got, want);
    assert!(found.interfaces.iter().all(|i| Some(i.netns) == init_net));
    (socket_calls, interface_calls)
}

/// The bytes of a file as `cat` gives them: the pages read, zeros for
/// the pages not cached.
fn cached_bytes(contents: &FileContents) -> Vec<u8> {
    let mut bytes = vec![0u8; contents.file.size as usize];
    for (index, page) in &contents.pages {
        let at = *index as usize * 4096;
        bytes[at..at + page.len()].copy_from_slice(page);
    }
    bytes
}

/// The files `/init` left in the page cache: listed with the inode, size,
/// links and pages the guest's `stat` gave (tmpfs counts 8 blocks a page
/// it holds), each read by path (the deleted log by its ` (deleted)`
/// path and by inode) to the bytes whose SHA-256 the guest printed, the
/// pages of the hole named not cached. Each in its exact calls, the open
/// files' walk taking `files_calls`: the list in the longer of its two
/// sides (the hash table's, the open files'); a file found in the hash
/// table in that side's calls, one level of its page array (none for a
/// file of a page) and its pages; the deleted log in the open files'
/// side and the same.
fn check_page_cache(device: &LeechCore, kernel: &Kernel, guest: &Guest, files_calls: u64) {
    let want = &guest.oracle().cached_files;
    assert_eq!(want.len(), 4, "{want:?}");
    let (list, list_calls) = counted(device, || kernel.cached_files());
    assert_eq!(list.failed, vec![], "{:#?}", list.failed);
    let chain = list.chain_links as u64;
    let hash_side = CACHE_HASH_CALLS + chain;
    let open_side = files_calls + CACHE_OPEN_CALLS;
    eprintln!("the page cache's files in {list_calls} read calls, chains of {chain} links");
    assert_eq!(list_calls, hash_side.max(open_side));
    for f in want {
        let got = list
            .files
            .iter()
            .find(|c| c.path.as_deref() == Ok(f.path.as_str()))
            .unwrap_or_else(|| panic!("{} not listed: {:#?}", f.path, list.files));
        let pages = f.blocks / 8;
        assert_eq!(
            (got.inode, got.device, got.size, got.links, got.cached_pages),
            (f.inode, f.device, f.size, f.links, pages),
            "{got:?}"
        );
        assert_eq!(got.file_system.as_deref(), Some("rootfs"), "{got:?}");
        let (contents, calls) = counted(device, || {
            kernel.cached_file(&FileQuery::Path(f.path.clone()))
        });
        let contents = contents.unwrap();
        eprintln!(
            "{}: {} pages in {calls} read calls",
            f.path,
            contents.pages.len()
        );
        let array_levels = u64::from(f.size > 4096);
        let side = match f.links {
            0 => hash_side.max(open_side),
            _ => CACHE_HASH_CALLS + contents.chain_links as u64,
        };
        assert_eq!(calls, side + array_levels + 1, "{}", f.path);
        assert_eq!(contents.failed, vec![]);
        assert_eq!(contents.file, *got);
        assert_eq!(
            common::qemu::oracle::cache::sha256_hex(&cached_bytes(&contents)),
            f.sha256
        );
        let missing: u64 = contents.missing.iter().map(|r| r.end - r.start).sum();
        assert_eq!(
            missing,
            f.size.div_ceil(4096) - pages,
            "{:?}",
            contents.missing
        );
        assert_eq!(contents.complete(), missing == 0);
    }
    let deleted = want.iter().find(|f| f.links == 0).expect("the deleted log");
    assert!(deleted.path.ends_with(" (deleted)"), "{deleted:?}");
    // Its inode number is another file's on another file system too.
    let by_inode = |device| {
        kernel.cached_file(&FileQuery::Inode {
            number: deleted.inode,
            device,
        })
    };
    if let Err(e) = by_inode(None) {
        assert!(matches!(e, CacheError::Ambiguous(..)), "{e}");
    }
    let by_inode = by_inode(Some(deleted.device)).unwrap();
    assert_eq!(by_inode.file.path.as_deref(), Ok(deleted.path.as_str()));
    assert_eq!(by_inode.file.open_by.len(), 1, "{:?}", by_inode.file);
    assert_eq!(
        common::qemu::oracle::cache::sha256_hex(&cached_bytes(&by_inode)),
        deleted.sha256
    );
    // Without " (deleted)", the path names no file the cache holds.
    let gone = deleted.path.trim_end_matches(" (deleted)").to_string();
    assert!(matches!(
        kernel.cached_file(&FileQuery::Path(gone)),
        Err(CacheError::NotFound(_))
    ));
}

/// Runs `f`, and counts its read calls.
fn counted<T>(device: &LeechCore, f: impl FnOnce() -> T) -> (T, u64) {
    let before = device.call_count(Call::ReadScatter);
    let out = f();
    (out, device.call_count(Call::ReadScatter) - before)
}

/// The kernel's names, clocks and command line against what the guest
/// said at boot: names and command line equal, the boot time to the
/// second (`btime` is truncated, ours as read), the uptime no less than
/// the guest's then, and the wall clock as far past the guest's `date`
/// as the uptime is past its uptime then (both clocks run together).
fn check_system(s: &System, guest: &Guest) {
    let oracle = &guest.oracle().system;
    let u = &s.uname;
    let names = [
        &u.sysname,
        &u.nodename,
        &u.release,
        &u.version,
        &u.machine,
        &u.domainname,
    ];
    for (key, name) in common::qemu::oracle::system::UNAME_KEYS.iter().zip(names) {
        assert_eq!(name.as_deref(), Ok(oracle.uname(key)), "{key}");
    }
    assert_eq!(oracle.uname("nodename"), "leechio-guest");
    assert_eq!(oracle.uname("domainname"), "leechio.test");
    assert_eq!(
        s.command_line.as_deref(),
        Ok(guest.oracle().kernel_cmdline.as_str())
    );
    let boot = s.boot_time.clone().unwrap();
    let uptime = s.uptime.clone().unwrap();
    let clock = s.clock.clone().unwrap();
    assert!(
        boot.as_secs().abs_diff(oracle.btime) <= 1,
        "boot time {boot:?}, btime {}",
        oracle.btime
    );
    assert_eq!(clock - uptime, boot);
    let then = std::time::Duration::from_millis(oracle.uptime_centis * 10);
    assert!(uptime >= then, "uptime {uptime:?}, at boot {then:?}");
    let clock_since = clock.as_secs_f64() - oracle.now as f64;
    let uptime_since = (uptime - then).as_secs_f64();
    assert!(
        (clock_since - uptime_since).abs() <= 2.0,
        "the clock moved {clock_since} s since the guest's date, the uptime {uptime_since} s"
    );
}

/// The kernel log against busybox `dmesg` at boot: every line it printed
/// is among ours, in its order (the kernel may have logged more since),
/// each record's lines after its time stamp.
fn check_dmesg(log: &KernelLog, guest: &Guest) {
    assert!(log.failed.is_empty(), "{:#?}", log.failed);
    let seqs: Vec<u64> = log.records.iter().map(|r| r.seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let ours: Vec<Vec<u8>> = log
        .records
        .iter()
        .flat_map(|r| {
            let stamp = r.time_stamp();
            r.lines()
                .map(move |line| [stamp.as_bytes(), b" ", line].concat())
        })
        .collect();
    let theirs = &guest.oracle().system.dmesg;
    let mut at = 0;
    for line in theirs {
        match ours[at..].iter().position(|l| l == line) {
            Some(i) => at += i + 1,
            None => panic!(
                "dmesg line {:?} not found in order; ours from there: {:#?}",
                String::from_utf8_lossy(line),
                ours[at..]
                    .iter()
                    .take(5)
                    .map(|l| String::from_utf8_lossy(l))
                    .collect::<Vec<_>>()
            ),
        }
    }
    eprintln!(
        "dmesg: {} records, {} lines; the guest's {} lines all found in order",
        log.records.len(),
        ours.len(),
        theirs.len()
    );
}

/// The symbols the names, clocks and log are found by, each once in the
/// guest's /proc/kallsyms, where we found it (`saved_command_line_len`
/// where the kernel has it).
fn check_system_symbols(kernel: &Kernel, guest: &Guest) {
    let names = [
        "init_uts_ns",
        "tk_core",
        "saved_command_line",
        "saved_command_line_len",
        "prb",
        "printk_rb_static",
        "printk_rb_dynamic",
        "log_buf",
        "log_buf_len",
    ];
    for name in names {
        let listed: Vec<u64> = guest
            .oracle()
            .symbols
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.address)
            .collect();
        match listed[..] {
            [] if name == "saved_command_line_len" => assert_eq!(kernel.symbol(name), None),
            [address] => assert_eq!(kernel.symbol(name), Some(address), "{name}"),
            _ => panic!("{name}: /proc/kallsyms lists {listed:x?}"),
        }
    }
}

/// What the kernel says of itself and its log, each in its exact calls.
fn check_system_and_dmesg(device: &LeechCore, kernel: &Kernel, guest: &Guest) {
    check_system_symbols(kernel, guest);
    let (system, calls) = counted(device, || kernel.system());
    check_system(&system, guest);
    assert_eq!(calls, SYSTEM_CALLS);
    let (log, calls) = counted(device, || kernel.dmesg());
    check_dmesg(&log, guest);
    assert_eq!(calls, DMESG_CALLS);
}

/// Finds the kernel of `guest` (paused), lists its processes and checks
/// them, then lists them again with every task's details (which share
/// the list's batches: no call more), its modules both ways, every view
/// of its tasks (in the list's calls: no call more), and their open
/// files; returns the read calls of the list, and of the open files
/// (with the list they are read beside).
fn check_guest(guest: &Guest) -> (u64, u64) {
    let (mem, device) = engine(guest.open());
    let _paused = guest.pause();
    let kernel = Kernel::find(&mem, &no_cache()).unwrap();
    let (list, calls) = list(&device, &kernel);
    check_against_oracle(&list, guest);
    check_address_spaces(&list, guest, &mem);
    let before = device.call_count(Call::ReadScatter);
    let (again, details) = kernel.processes_with(DetailsAsked { environment: true });
    assert_eq!(device.call_count(Call::ReadScatter) - before, calls);
    assert_eq!(kernel.details_unknown(), Vec::<String>::new());
    check_details(&again, &details, guest);
    check_module_views(&kernel, &device, guest);
    check_hooks(&kernel, &device);
    check_system_and_dmesg(&device, &kernel, guest);
    let (views, view_calls) = read_views(&device, &kernel);
    check_views_agree(&views, &again, guest);
    assert_eq!(view_calls, calls);
    eprintln!(
        "{}: {} processes, {} tasks in {calls} read calls",
        kernel.release(),
        list.processes.len(),
        list.task_count()
    );
    let files = check_open_files(&device, &kernel, guest);
    eprintln!("their open files in {files} read calls");
    let (sockets, interfaces) = check_network(&device, &kernel, guest);
    assert_eq!((sockets, interfaces), (files + 1, INTERFACES_CALLS));
    check_page_cache(&device, &kernel, guest, files);
    (calls, files)
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn lists_the_processes_of_a_live_guest() {
    let guest = shared_guest();
    assert_eq!(check_guest(&guest), (LIST_CALLS, FILES_CALLS));
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn lists_the_processes_from_nothing_in_under_forty_calls() {
    let guest = shared_guest();
    let (mem, device) = engine(guest.open());
    let _paused = guest.pause();
    let before = device.call_count(Call::ReadScatter);
    let kernel = Kernel::find(&mem, &no_cache()).unwrap();
    let list = kernel.processes();
    let calls = device.call_count(Call::ReadScatter) - before;
    check_against_oracle(&list, &guest);
    assert_eq!(calls, FIND_CALLS + LIST_CALLS);
    // Listed again: the process's page tables are cached for a second
    // and its command line is read again with the rest.
    let (again, _) = self::list(&device, &kernel);
    assert_eq!(again, list);
}

/// With KASLR, on a CPU with 5-level paging on: the command lines are read
/// through each process's 5-level tables, one level more.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn lists_the_processes_with_5_level_paging_and_kaslr_on() {
    let guest = common::qemu::shared_la57_guest();
    assert_eq!(check_guest(&guest), (LIST_CALLS + 1, FILES_CALLS));
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn lists_the_processes_of_another_kernel_build() {
    let guest = Guest::start_with(GuestOptions {
        kaslr: true,
        kernel: GuestKernel::Cloud,
        ..GuestOptions::default()
    });
    assert_eq!(check_guest(&guest), (LIST_CALLS, FILES_CALLS));
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn lists_a_few_hundred_processes_in_twelve_calls() {
    let guest = Guest::start_with_processes(GuestOptions::default(), EXTRA_PROCESSES);
    let sleepers = guest
        .processes()
        .iter()
        .filter(|p| p.pid >= 5000 && p.cmdline.first().map(String::as_str) == Some("sleep"))
        .count();
    assert_eq!(sleepers, EXTRA_PROCESSES as usize);
    assert_eq!(
        check_guest(&guest),
        (LIST_CALLS_THREE_LEVELS, FILES_CALLS + 1)
    );
}

/// Writes `bytes` as an image file in `dir` and opens it.
fn image_device(dir: &Path, name: &str, bytes: &[u8]) -> LeechCore {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    LeechCore::open(&DeviceConfig::new(format!("file://{}", path.display()))).unwrap()
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn lists_the_processes_in_a_memory_image_of_the_guest() {
    list_the_processes_in_an_image_of(&shared_guest());
}

/// An image of a guest whose CPU ran with 5-level paging (and KASLR): the
/// mode is found in the image's tables alone, with no CPU to ask.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn lists_the_processes_in_a_memory_image_of_a_5_level_guest() {
    let guest = common::qemu::shared_la57_guest();
    list_the_processes_in_an_image_of(&guest);
}

fn list_the_processes_in_an_image_of(guest: &Guest) {
    let dir = tempfile::tempdir().unwrap();
    let bytes = {
        let _paused = guest.pause();
        guest.pmemsave(0, guest.memory().bytes())
    };
    let (mem, device) = engine(image_device(dir.path(), "guest.raw", &bytes));
    let kernel = Kernel::find(&mem, &no_cache()).unwrap();
    assert_eq!(kernel.paging(), guest.paging());
    let (list, calls) = list(&device, &kernel);
    check_against_oracle(&list, guest);
    check_address_spaces(&list, guest, &mem);
    check_system_and_dmesg(&device, &kernel, guest);
    check_module_views(&kernel, &device, guest);
    check_hooks(&kernel, &device);
    // One more level of each process's tables with 5 levels.
    assert_eq!(calls, LIST_CALLS + u64::from(guest.paging().levels() - 4));
    let (again, details) = kernel.processes_with(DetailsAsked { environment: true });
    check_details(&again, &details, guest);
    // The open files' walk reads the direct map alone: no more levels;
    // nor does the page cache's.
    assert_eq!(check_open_files(&device, &kernel, guest), FILES_CALLS);
    assert_eq!(
        check_network(&device, &kernel, guest),
        (SOCKETS_CALLS, INTERFACES_CALLS)
    );
    check_page_cache(&device, &kernel, guest, FILES_CALLS);
    let (views, view_calls) = read_views(&device, &kernel);
    check_views_agree(&views, &list, guest);
    assert_eq!(view_calls, calls);
}

/// Little-endian word `value` at physical `pa` of an image.
fn poke(image: &mut [u8], pa: u64, value: u64) {
    let at = pa as usize;
    image[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

fn peek(image: &[u8], pa: u64) -> u64 {
    let at = pa as usize;
    u64::from_le_bytes(image[at..at + 8].try_into().unwrap())
}

/// An image changed as a target that changes while it is read would look:
/// a node of the pid table that leads back to the root (a loop), a thread
/// whose pid no longer matches the table (it exited and its memory was
/// reused), a process whose `mm` points at a page table that is not
/// one, and an fd whose file pointer is no kernel address. Each is cut and
/// reported; the rest is listed as before.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn loops_and_torn_structures_are_cut_and_reported() {
    let guest = shared_guest();
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = {
        let _paused = guest.pause();
        guest.pmemsave(0, guest.memory().bytes())
    };
    let (mem, _) = engine(image_device(dir.path(), "clean.raw", &bytes));
    let kernel = Kernel::find(&mem, &no_cache()).unwrap();
    let clean = kernel.processes();
    assert!(clean.failed.is_empty(), "{:#?}", clean.failed);
    let pa = |va: u64| va - kernel.direct_map_base();
    let offset = |ty: &str, path: &str| kernel.offset_of(ty, path).unwrap();

    // The root's last slot (empty: pids stay far below 4032) gets the
    // root itself.
    let head_va = kernel.init_pid_ns() + offset("pid_namespace", "idr.idr_rt.xa_head");
    let head_pa = head_va - kernel.virtual_base() + kernel.physical_base();
    let head = peek(&bytes, head_pa);
    let root = pa(head - 2);
    let last_slot = root + offset("xa_node", "slots") + 63 * 8;
    assert_eq!(peek(&bytes, last_slot), 0);
    poke(&mut bytes, last_slot, head);
    // A thread of the pattern process whose pid is another's.
    let pattern = clean.get(guest.pattern().pid).unwrap();
    let thread = &pattern.threads[1];
    let pid_at = pa(thread.task + offset("task_struct", "pid"));
    let pid_word = peek(&bytes, pid_at);
    poke(&mut bytes, pid_at, (pid_word & !0xffff_ffff) | 4_000_000);
    // `sleep 100001`'s page table, a page of zeros instead.
    let sleep = clean
        .processes
        .iter()
        .find(|p| p.cmdline == ["sleep", "100001"])
        .unwrap();
    let pgd_at = pa(sleep.mm.unwrap() + offset("mm_struct", "pgd"));
    let zeros = (1 << 20..bytes.len())
        .step_by(0x1000)
        .find(|&at| bytes[at..at + 0x1000].iter().all(|&b| b == 0))
        .expect("a page of zeros");
    poke(&mut bytes, pgd_at, kernel.direct_map_base() + zeros as u64);

    // The pattern process's fd 5, a pointer that is no kernel address.
    let files = kernel.open_files(Some(pattern.pid));
    let table = files.processes[0].files.unwrap() + offset("files_struct", "fdt");
    let table = peek(
        &bytes,
        pa(peek(&bytes, pa(table))) + offset("fdtable", "fd"),
    );
    let fd5 = pa(table) + 5 * 8;
    let file5 = peek(&bytes, fd5);
    poke(&mut bytes, fd5, 0x7fff_0000_1000);

    let (mem, _) = engine(image_device(dir.path(), "torn.raw", &bytes));
    let kernel = Kernel::find(&mem, &no_cache()).unwrap();
    let torn_files = kernel.open_files(Some(pattern.pid));
    let failed: Vec<String> = torn_files.failed.iter().map(|f| f.to_string()).collect();
    assert_eq!(
        failed,
        [format!(
            "pid {} fd 5 at {:#x}: its file pointer 0x7fff00001000 is no kernel address",
            pattern.pid,
            table + 5 * 8
        )]
    );
    let mut expected = files.processes[0].fds.clone();
    assert_eq!(expected.iter().find(|f| f.fd == 5).unwrap().file, file5);
    expected.retain(|f| f.fd != 5);
    assert_eq!(torn_files.processes[0].fds, expected);
    let torn = kernel.processes();
    let failed: Vec<(Stage, Option<u32>)> = torn.failed.iter().map(|f| (f.stage, f.pid)).collect();
    eprintln!("{:#?}", torn.failed);
    assert_eq!(
        failed,
        [
            (Stage::PidTable, None),
            (Stage::Task, Some(thread.pid)),
            (Stage::Mm, Some(sleep.pid)),
            (Stage::CommandLine, Some(sleep.pid)),
        ]
    );
    assert!(
        torn.failed[0].reason.contains("reached again"),
        "{}",
        torn.failed[0]
    );
    assert!(
        torn.failed[1].reason.contains("4000000"),
        "{}",
        torn.failed[1]
    );
    assert!(
        torn.failed[2].reason.contains("does not map the kernel"),
        "{}",
        torn.failed[2]
    );
    // Everything else as before.
    let mut expected = clean.clone();
    let at = expected
        .processes
        .iter()
        .position(|p| p.pid == pattern.pid)
        .unwrap();
    expected.processes[at].threads.remove(1);
    let at = expected
        .processes
        .iter()
        .position(|p| p.pid == sleep.pid)
        .unwrap();
    expected.processes[at].dtb = None;
    expected.processes[at].cmdline.clear();
    assert_eq!(torn.processes, expected.processes);

    // The views: the pid table, cut at its loop, claims no absence; the
    // thread it did not believe is still filed in it; nothing hides.
    let views = kernel.process_views();
    assert_eq!(views.hidden().count(), 0, "{views:#?}");
    let failed: Vec<(View, u64)> = views.failed.iter().map(|f| (f.view, f.address)).collect();
    assert_eq!(
        failed,
        [
            (View::PidTable, torn.failed[0].address),
            (View::PidTable, thread.task)
        ]
    );
    let t = views.tasks.iter().find(|t| t.task == thread.task).unwrap();
    assert_eq!(t.seen_in, [View::PidTable, View::ThreadGroup]);
}

/// A running guest changes under the walk: it still ends, and every user
/// process is there.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn lists_the_processes_of_a_running_guest() {
    let guest = shared_guest();
    let (mem, _) = engine(guest.open());
    let kernel = Kernel::find(&mem, &no_cache()).unwrap();
    for _ in 0..3 {
        let list = kernel.processes();
        for task in guest.processes().iter().filter(|t| !t.kernel_thread) {
            let p = list.get(task.pid).unwrap_or_else(|| panic!("{task:?}"));
            assert_eq!(p.cmdline, task.cmdline);
        }
    }
}

/// A task that hides: pid, task, name, the views that have it and those
/// that lack it.
type Hidden<'a> = (u32, u64, &'a str, &'a [View], &'a [View]);

/// The views read again, in `calls` read calls, nothing failing, and
/// what hides as `want` says.
fn views_hiding(device: &LeechCore, kernel: &Kernel, calls: u64, want: &[Hidden]) -> ProcessViews {
    let (views, read_calls) = read_views(device, kernel);
    assert_eq!(read_calls, calls);
    assert_eq!(views.failed, []);
    let hidden: Vec<Hidden> = views
        .hidden()
        .map(|t| {
            (
                t.pid,
                t.task,
                t.name.as_str(),
                &t.seen_in[..],
                &t.missing_from[..],
            )
        })
        .collect();
    assert_eq!(hidden, want);
    views
}

/// As a rootkit hides a process: `sleep 100001` unlinked from the task
/// list and the pattern process's first thread from its thread group,
/// through the device's own writes (the guest paused; the words put back
/// after). The views report those two, each missing from the one list and
/// still in the others, in as many calls as before; once put back,
/// nothing hides. Then `sleep 100001` hidden from the pid table alone.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_process_unlinked_from_the_task_list_and_a_thread_from_its_group_are_found() {
    let guest = shared_guest();
    let (mem, device) = engine(guest.open());
    let _paused = guest.pause();
    let kernel = Kernel::find(&mem, &no_cache()).unwrap();
    let list = kernel.processes();
    let (clean, calls) = read_views(&device, &kernel);
    check_views_agree(&clean, &list, &guest);
    let sleep = list.get(sleeper(&guest)).unwrap();
    let pattern = list.get(guest.pattern().pid).unwrap();
    let thread = &pattern.threads[0];
    assert_eq!(thread.name, "leechio-thr-1");
    let offset = |member: &str| kernel.offset_of("task_struct", member).unwrap();
    let group_node = offset("thread_node");
    let mut unlinked = Unlinked::new(&mem);
    unlinked.unlink(&kernel, sleep.task + offset("tasks"));
    unlinked.unlink(&kernel, thread.task + group_node);

    let views = views_hiding(
        &device,
        &kernel,
        calls,
        &[
            (
                sleep.pid,
                sleep.task,
                "sleep",
                &[View::PidTable, View::ThreadGroup][..],
                &[View::TaskList][..],
            ),
            (
                thread.pid,
                thread.task,
                "leechio-thr-1",
                &[View::PidTable][..],
                &[View::ThreadGroup][..],
            ),
        ],
    );
    // Every other task as before.
    let others = |v: &ProcessViews| -> Vec<_> {
        v.tasks
            .iter()
            .filter(|t| t.missing_from.is_empty())
            .map(|t| (t.task, t.seen_in.clone()))
            .collect()
    };
    let mut before = others(&clean);
    before.retain(|(task, _)| *task != sleep.task && *task != thread.task);
    assert_eq!(others(&views), before);

    drop(unlinked);
    let (again, _) = read_views(&device, &kernel);
    assert_eq!(again, clean);

    // Taken out of the pid table instead (its pid names no task): found
    // on the task list and in its group, read there, its group walked
    // after (one call more).
    let thread_pid = Unlinked::read(&kernel, sleep.task + offset("thread_pid"));
    let first = kernel.offset_of("pid", "tasks[0].first").unwrap();
    let mut unlinked = Unlinked::new(&mem);
    unlinked.write(&kernel, thread_pid + first, 0);
    views_hiding(
        &device,
        &kernel,
        calls + 1,
        &[(
            sleep.pid,
            sleep.task,
            "sleep",
            &[View::TaskList, View::ThreadGroup][..],
            &[View::PidTable][..],
        )],
    );
    drop(unlinked);
    assert_eq!(read_views(&device, &kernel).0, clean);
}
