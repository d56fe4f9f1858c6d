//! `leechio ps`, `modules`, `files`, `sockets`, `interfaces`, `system`, `dmesg`, `check`, `spaces`, `maps`, `cache` and `dump --pid` against a live Linux
//! guest, checked against what the guest's /proc said at boot (its oracle)
//! and the bytes of its pattern process. The guest is paused while the
//! binary reads.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::elf_tools::readelf_clean;
use common::linux::{engine, no_cache, red_black_height_fits, sleeper, Unlinked};
use common::qemu::{shared_guest, shared_la57_guest, Guest, SharedGuest};
use leechio::linux::Kernel;
use serde_json::Value;

/// How long one run may take (LeechCore opens the qemu device in ~1 s).
const RUN_LIMIT: Duration = Duration::from_secs(90);

/// Read calls of `Kernel::find` from nothing, and of the process list
/// once the kernel is known, on this guest (tests/linux_processes.rs).
const FIND_CALLS: u64 = 8;
const LIST_CALLS: u64 = 11;
/// Read calls of the open files of every process, with the list they are
/// read beside, once the kernel is known (tests/linux_processes.rs).
const FILES_CALLS: u64 = 12;

/// Runs the binary; fails the test if it has not ended by the deadline.
fn leechio(args: &[&str]) -> Output {
    leechio_with(Command::new(env!("CARGO_BIN_EXE_leechio")).args(args))
}

/// Runs `command` (the binary and its arguments) as [`leechio`] does.
fn leechio_with(command: &mut Command) -> Output {
    common::output_within(command.env_remove("LEECHIO_DEVICE"), RUN_LIMIT)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn json_lines(output: &Output) -> Vec<Value> {
    assert!(output.status.success(), "{}", text(&output.stderr));
    text(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect()
}

fn parse_hex(v: &Value) -> u64 {
    let s = v.as_str().unwrap_or_else(|| panic!("not a string: {v}"));
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("{s:?}"))
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn ps_lists_what_the_guests_proc_says() {
    check_ps_lists_what_the_guests_proc_says(shared_guest());
}

/// On a CPU with 5-level paging on, and KASLR.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn with_5_level_paging_ps_lists_what_the_guests_proc_says() {
    check_ps_lists_what_the_guests_proc_says(shared_la57_guest());
}

fn check_ps_lists_what_the_guests_proc_says(guest: SharedGuest) {
    let device = guest.device_string();
    let _paused = guest.pause();
    let lines = json_lines(&leechio(&["-d", &device, "ps", "--json", "--no-cache"]));
    let by_pid = |pid: u32| lines.iter().find(|l| l["pid"] == pid);
    for task in guest.processes() {
        let Some(line) = by_pid(task.pid) else {
            // Kernel threads come and go (tests/linux_processes.rs).
            assert!(task.kernel_thread, "{task:?} not listed");
            continue;
        };
        assert_eq!(line["ppid"], task.ppid, "{line}");
        assert_eq!(line["name"], task.comm, "{line}");
        assert_eq!(line["cmdline"], task.cmdline.join(" "), "{line}");
        assert_eq!(line["kernel_thread"], task.kernel_thread, "{line}");
        // A kernel thread may have run since the oracle (see
        // tests/linux_processes.rs, which bounds such changes).
        if !task.kernel_thread {
            assert_eq!(line["state"], task.state.to_string(), "{line}");
        }
        let threads = guest.tasks().iter().filter(|t| t.tgid == task.pid).count();
        assert_eq!(line["threads"].as_array().unwrap().len(), threads - 1);
        if task.kernel_thread || task.state == 'Z' {
            assert!(line["dtb"].is_null(), "{line}");
        } else {
            parse_hex(&line["dtb"]);
        }
    }
    for line in &lines {
        let pid = line["pid"].as_u64().unwrap() as u32;
        let listed = guest.oracle().task(pid).is_some();
        assert!(listed || line["kernel_thread"] == true, "{line}");
    }

    // The pattern process's DTB reads its pattern.
    let pattern = guest.pattern();
    let dtb = by_pid(pattern.pid).unwrap()["dtb"]
        .as_str()
        .unwrap()
        .to_string();
    let start = format!("{:#x}", pattern.start);
    let read = json_lines(&leechio(&[
        "-d", &device, "read", "--json", "--dtb", &dtb, &start, "64",
    ]));
    let want: String = pattern
        .bytes(pattern.start, 64)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(read[0]["data"], want);
}

/// On the clean guest the views agree (exit 0, one summary line, each
/// view holding what `ps` lists); with `sleep 100001` unlinked from the
/// task list through the device (put back after), `check` names it, in
/// text and JSON, and exits 1.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn check_finds_nothing_hiding_until_a_process_is_unlinked_from_the_task_list() {
    let guest = shared_guest();
    let device = guest.device_string();
    let _paused = guest.pause();
    let ps = json_lines(&leechio(&["-d", &device, "ps", "--json", "--no-cache"]));
    let tasks: usize = ps
        .iter()
        .map(|p| 1 + p["threads"].as_array().unwrap().len())
        .sum();
    let summary = json_lines(&leechio(&["-d", &device, "check", "--json", "--no-cache"]));
    assert_eq!(summary.len(), 1);
    assert_eq!(summary[0]["hidden"], 0);
    assert_eq!(summary[0]["in"]["task list"], ps.len());
    assert_eq!(summary[0]["in"]["pid table"], tasks);
    // Whatever ran or waited to when the guest was paused.
    let running = &summary[0]["in"]["run queue"];
    let clean = leechio(&["-d", &device, "check", "--no-cache"]);
    assert!(clean.status.success(), "{}", text(&clean.stderr));
    assert_eq!(text(&clean.stderr), "");
    assert_eq!(
        text(&clean.stdout),
        format!(
            "no task hides: {tasks} tasks; {tasks} in the pid table, {} on the task list, {tasks} in {} thread groups, {running} running or runnable on 1 CPU(s)\n",
            ps.len(),
            ps.len() + 1
        )
    );

    let sleep = sleeper(&guest);
    let line = ps.iter().find(|p| p["pid"] == sleep).unwrap();
    let task = parse_hex(&line["task"]);
    let (mem, _) = engine(guest.open());
    let kernel = Kernel::find(&mem, &no_cache()).unwrap();
    let mut unlinked = Unlinked::new(&mem);
    unlinked.unlink(
        &kernel,
        task + kernel.offset_of("task_struct", "tasks").unwrap(),
    );
    let out = leechio(&["-d", &device, "check", "--no-cache"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let lines: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    assert_eq!(
        lines[0],
        format!("pid {sleep}  sleep  task {task:#x}  in: pid table, thread group; missing from: task list")
    );
    assert!(
        lines[1].starts_with(&format!(
            "1 task hides: {tasks} tasks; {tasks} in the pid table, {} on the task list",
            ps.len() - 1
        )),
        "{}",
        lines[1]
    );
    assert_eq!(lines.len(), 2);
    let out = leechio(&["-d", &device, "check", "--json", "--no-cache"]);
    assert_eq!(out.status.code(), Some(1));
    let lines: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines[0],
        serde_json::json!({
            "pid": sleep, "tgid": sleep, "name": "sleep", "task": format!("{task:#x}"),
            "in": ["pid table", "thread group"], "missing_from": ["task list"], "cpu": null,
        })
    );
    assert_eq!(lines[1]["hidden"], 1);
    assert_eq!(lines.len(), 2);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn modules_lists_what_the_guests_proc_modules_says() {
    check_modules_lists_what_the_guests_proc_modules_says(shared_guest());
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn with_5_level_paging_modules_lists_what_the_guests_proc_modules_says() {
    check_modules_lists_what_the_guests_proc_modules_says(shared_la57_guest());
}

fn check_modules_lists_what_the_guests_proc_modules_says(guest: SharedGuest) {
    let device = guest.device_string();
    let _paused = guest.pause();
    let mut lines = json_lines(&leechio(&["-d", &device, "modules", "--json"]));
    let summary = lines.pop().unwrap();
    let got: Vec<(String, u64, u64, String)> = lines
        .iter()
        .map(|l| {
            (
                l["name"].as_str().unwrap().to_string(),
                l["size"].as_u64().unwrap(),
                parse_hex(&l["base"]),
                l["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(String, u64, u64, String)> = guest
        .oracle()
        .modules
        .iter()
        .map(|m| (m.name.clone(), m.size, m.address, m.state.clone()))
        .collect();
    assert!(want.len() >= 2, "the guest loads modules: {want:?}");
    assert_eq!(got, want);
    // Each module's taint as its /sys/module/NAME/taint, the kernel's as
    // /proc/sys/kernel/tainted; every view has every module.
    let integrity = &guest.oracle().integrity;
    for l in &lines {
        let name = l["name"].as_str().unwrap();
        assert_eq!(l["taint"], integrity.module_taint[name], "{l}");
        assert_eq!(l["missing_from"], serde_json::json!([]), "{l}");
        assert_eq!(l["in"].as_array().unwrap().len(), 4, "{l}");
    }
    let tainted = integrity.tainted;
    assert_eq!(summary["kernel_tainted"], tainted, "{summary}");
    assert_eq!(summary["hidden"], 0, "{summary}");
    assert_eq!(
        summary["built_in"].as_u64().unwrap() as usize + want.len(),
        integrity.sysfs_entries
    );
    // The table: a header, a line a module in the same order (its
    // parameters indented under it), then the summary.
    let table = leechio(&["-d", &device, "modules"]);
    assert!(table.status.success(), "{}", text(&table.stderr));
    let out = text(&table.stdout);
    let rows: Vec<&str> = out
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with(' '))
        .collect();
    let names: Vec<&str> = rows
        .iter()
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect();
    let want_names: Vec<&str> = want.iter().map(|m| m.0.as_str()).collect();
    assert_eq!(names[..names.len() - 1], want_names);
    // The parameter insmod was given, which sysfs does not show (its
    // permissions are 0).
    let given: Vec<String> = integrity
        .given
        .iter()
        .map(|(key, v)| {
            assert!(!integrity.params.contains_key(key), "{key:?}");
            format!(
                "    {}={v}  ({}, perm 0000)",
                key.1, integrity.parmtypes[key]
            )
        })
        .collect();
    let params: Vec<&str> = out.lines().filter(|l| l.starts_with(' ')).collect();
    assert_eq!(params, given);
    assert!(
        rows.last().unwrap().ends_with(&format!(
            "kernel tainted: {tainted} ({})",
            leechio::linux::kernel_taint_letters(tainted)
        )),
        "{out}"
    );
}

/// A rootkit's trick: a module unlinked from the `modules` list (so
/// `/proc/modules` and lsmod lose it) and its kobject from `module_kset`'s
/// list, through the device's own writes (put back after); `modules`
/// still finds it in the address tree and /sys/module, and says it hides
/// and which views have it.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_module_unlinked_from_the_module_list_and_its_kset_is_reported_hidden() {
    let guest = shared_guest();
    let _paused = guest.pause();
    let want = guest.oracle().modules.clone();
    assert!(want.len() >= 2, "{want:?}");
    let device = guest.device_string();
    let (mem, _device) = engine(guest.open());
    let kernel = Kernel::find(&mem, &no_cache()).unwrap();
    let list = kernel.modules();
    let victim = list
        .modules
        .iter()
        .find(|m| m.name == want[1].name)
        .unwrap();
    let mut unlinked = Unlinked::new(&mem);
    let at = |path: &str| victim.address + kernel.offset_of("module", path).unwrap();
    unlinked.unlink(&kernel, at("list"));
    unlinked.unlink(&kernel, at("mkobj.kobj.entry"));
    let out = leechio(&["-d", &device, "modules", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let mut lines: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let summary = lines.pop().unwrap();
    assert_eq!(summary["hidden"], 1, "{summary}");
    let shown: Vec<(&str, bool)> = lines
        .iter()
        .map(|l| (l["name"].as_str().unwrap(), l["hidden"].as_bool().unwrap()))
        .collect();
    let mut expected: Vec<(&str, bool)> = want.iter().map(|m| (m.name.as_str(), false)).collect();
    expected.remove(1);
    expected.push((want[1].name.as_str(), true));
    assert_eq!(shown, expected);
    let hidden = lines.last().unwrap();
    assert_eq!(hidden["in"], serde_json::json!(["address tree", "sysfs"]));
    assert_eq!(
        hidden["missing_from"],
        serde_json::json!(["module list", "kset list"])
    );
    assert_eq!(parse_hex(&hidden["module"]), victim.address);
    assert_eq!(
        text(&out.stderr),
        format!(
            "leechio: module {} (struct module at {:#x}) is in: address tree, sysfs; missing from: module list, kset list: hidden\n",
            want[1].name, victim.address
        )
    );
    drop(unlinked);
    // Put back: the lists are whole again, and nothing hides.
    let mut lines = json_lines(&leechio(&["-d", &device, "modules", "--json"]));
    assert_eq!(lines.pop().unwrap()["hidden"], 0);
    assert_eq!(lines.len(), want.len());
    assert!(lines.iter().all(|l| l["hidden"] == false));
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn hooks_finds_none_until_a_system_call_entry_is_rewritten() {
    check_hooks_finds_none_until_a_system_call_entry_is_rewritten(shared_guest());
}

/// On a CPU with 5-level paging on, and KASLR.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn with_5_level_paging_hooks_finds_none_until_a_system_call_entry_is_rewritten() {
    check_hooks_finds_none_until_a_system_call_entry_is_rewritten(shared_la57_guest());
}

/// `leechio hooks` on the clean guest: nothing points outside (exit 0, the
/// summary alone); with an entry of `sys_call_table` rewritten through the
/// device to point into the kernel's data (an unused system call's, one
/// of those holding `sys_ni_syscall`; put back after), that entry alone is
/// reported, named by the symbol there, in text and JSON, and the exit
/// is 1.
fn check_hooks_finds_none_until_a_system_call_entry_is_rewritten(guest: SharedGuest) {
    let device = guest.device_string();
    let _paused = guest.pause();
    let clean = json_lines(&leechio(&["-d", &device, "hooks", "--json", "--no-cache"]));
    assert_eq!(clean.len(), 1, "{clean:?}");
    assert_eq!(clean[0]["outside"], 0);
    let entries = clean[0]["checked"]["sys_call_table"].as_u64().unwrap();
    assert!(entries > 300, "{clean:?}");

    let (mem, _device) = engine(guest.open());
    let kernel = Kernel::find(&mem, &no_cache()).unwrap();
    let symbols = kernel.kallsyms().unwrap();
    let address = |name: &str| symbols.iter().find(|(n, _)| n == name).unwrap().1;
    let table = address("sys_call_table");
    let ni = address("__x64_sys_ni_syscall");
    let slots: Vec<u64> = (0..entries)
        .filter(|i| Unlinked::read(&kernel, table + 8 * i) == ni)
        .collect();
    let index = *slots.last().expect("an unused system call");
    let slot = table + 8 * index;
    // Into the kernel's data: named by the symbol there, as the guest's
    // own /proc/kallsyms placed it.
    let target = guest.oracle().symbol("init_task").unwrap() + 0x10;
    let mut rewritten = Unlinked::new(&mem);
    rewritten.write(&kernel, slot, target);
    let out = leechio(&["-d", &device, "hooks", "--no-cache"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!(
            "sys_call_table[{index}] at {slot:#x} points to {target:#x} (init_task+0x10): outside the kernel's text and every module's\n\
             1 pointing outside; checked: {}\n",
            checked(&clean[0])
        )
    );
    let lines = json_lines_failing(&leechio(&["-d", &device, "hooks", "--json", "--no-cache"]));
    assert_eq!(
        lines[0],
        serde_json::json!({
            "table": "sys_call_table", "index": index, "slot": format!("{slot:#x}"),
            "target": format!("{target:#x}"), "points_into": "init_task+0x10",
        })
    );
    assert_eq!(lines[1]["outside"], 1);
    assert_eq!(lines.len(), 2);
    drop(rewritten);
    let after = json_lines(&leechio(&["-d", &device, "hooks", "--json", "--no-cache"]));
    assert_eq!(after, clean);
}

/// The summary's `checked` words: `TABLE N`, in the summary's order.
fn checked(summary: &Value) -> String {
    let order = ["sys_call_table", "ia32_sys_call_table", "ftrace_ops_list"];
    let checked = summary["checked"].as_object().unwrap();
    let words: Vec<String> = order
        .iter()
        .filter_map(|t| Some(format!("{t} {}", checked.get(*t)?)))
        .collect();
    words.join(", ")
}

/// The JSON lines of a run that exits 1.
fn json_lines_failing(output: &Output) -> Vec<Value> {
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    text(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn files_lists_every_fd_as_the_guests_proc_says() {
    check_files_lists_every_fd_as_the_guests_proc_says(shared_guest());
}

/// On a CPU with 5-level paging on, and KASLR.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn with_5_level_paging_files_lists_every_fd_as_the_guests_proc_says() {
    check_files_lists_every_fd_as_the_guests_proc_says(shared_la57_guest());
}

/// `leechio files`: every fd of every process, as the guest's /proc said
/// (readlink's name, fdinfo's flags, position and inode); the table of one
/// process, its names escaped.
fn check_files_lists_every_fd_as_the_guests_proc_says(guest: SharedGuest) {
    let device = guest.device_string();
    let _paused = guest.pause();
    let lines = json_lines(&leechio(&["-d", &device, "files", "--json", "--no-cache"]));
    let oracle = guest.oracle();
    // Kernel threads that started since hold no fds: every line is of a
    // process /proc listed.
    let got: Vec<(u64, u64, &str, u64, i64)> = lines
        .iter()
        .map(|l| {
            let flags = l["flags"].as_str().unwrap();
            (
                l["pid"].as_u64().unwrap(),
                l["fd"].as_u64().unwrap(),
                l["name"].as_str().unwrap_or_else(|| panic!("{l}")),
                u64::from_str_radix(flags, 8).unwrap(),
                l["pos"].as_i64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(u64, u64, &str, u64, i64)> = oracle
        .fds
        .iter()
        .map(|f| {
            let (pid, fd) = (u64::from(f.pid), u64::from(f.fd));
            (pid, fd, f.name.as_str(), u64::from(f.flags), f.pos)
        })
        .collect();
    assert_eq!(got, want);
    for (line, fd) in lines.iter().zip(&oracle.fds) {
        if let Some(inode) = fd.inode {
            assert_eq!(line["inode"], inode, "{line}");
        }
        assert_eq!(line["command"], oracle.task(fd.pid).unwrap().comm, "{line}");
    }
    // One process: a header, then a row an fd, the name from column 60.
    let pattern = guest.pattern().pid;
    let output = leechio(&["-d", &device, "files", &pattern.to_string()]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let table = text(&output.stdout);
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(
        rows[0].split_whitespace().collect::<Vec<_>>(),
        ["PID", "COMMAND", "FD", "TYPE", "FLAGS", "POS", "NAME"]
    );
    let want: Vec<(String, String, String)> = oracle
        .fds_of(pattern)
        .map(|f| {
            let name = f.name.replace('\t', "\\t");
            (f.fd.to_string(), format!("0{:o}", f.flags), name)
        })
        .collect();
    let got: Vec<(String, String, String)> = rows[1..]
        .iter()
        .map(|row| {
            let (head, name) = row.split_at(59);
            assert!(
                head.starts_with(&format!("{pattern:>7} leech (pat) x ")),
                "{row:?}"
            );
            let words: Vec<&str> = head.split_whitespace().rev().take(4).collect();
            let [_pos, flags, _kind, fd] = words[..] else {
                panic!("{row:?}")
            };
            (
                fd.to_string(),
                flags.to_string(),
                name.trim_start().to_string(),
            )
        })
        .collect();
    assert_eq!(got, want);
    assert!(table.contains(" REG ") && table.contains(" sock ") && table.contains(" a_inode "));
    assert!(table.contains("/leechio-files/tab\\there"), "{table}");
    let output = leechio(&["-d", &device, "files", "99999", "--no-cache"]);
    assert!(!output.status.success());
    assert_eq!(text(&output.stderr), "leechio: no process with pid 99999\n");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn ps_prints_a_table_one_process_a_line() {
    let guest = shared_guest();
    let device = guest.device_string();
    let _paused = guest.pause();
    let output = leechio(&["-d", &device, "ps"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let table = text(&output.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["PID", "PPID", "UID", "S", "THR", "DTB", "NAME", "COMMAND"]
    );
    let users = guest
        .processes()
        .iter()
        .filter(|t| !t.kernel_thread)
        .count();
    let kernel_threads = lines.iter().filter(|l| l.ends_with(']')).count();
    assert_eq!(lines.len(), 1 + users + kernel_threads, "{table}");
    // kthreadd (its state left out: it may be running).
    let mut kthreadd: Vec<&str> = lines[2].split_whitespace().collect();
    kthreadd.remove(3);
    assert_eq!(
        kthreadd,
        ["2", "0", "0", "1", "-", "kthreadd", "[kthreadd]"]
    );
    // The pattern process: three threads, its comm with spaces.
    let pattern = guest.pattern().pid.to_string();
    let line = lines
        .iter()
        .find(|l| l.split_whitespace().next() == Some(&pattern))
        .unwrap();
    assert!(
        line.ends_with("  leech (pat) x    leechio-pattern"),
        "{line:?}"
    );
    assert_eq!(line.split_whitespace().nth(4), Some("3"), "{line:?}");
    // The long command line on one line, its tab escaped.
    let args = lines.iter().find(|l| l.contains("leechio-args")).unwrap();
    assert!(args.contains("tab\\tand 'quotes'"), "{args}");
    assert!(args.ends_with("1000600 last-argument"), "{args}");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn ps_tree_threads_creds_and_env_say_what_the_guests_proc_says() {
    check_ps_tree_threads_creds_and_env(shared_guest());
}

/// On a CPU with 5-level paging on, and KASLR.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn with_5_level_paging_ps_tree_threads_creds_and_env_say_what_the_guests_proc_says() {
    check_ps_tree_threads_creds_and_env(shared_la57_guest());
}

fn check_ps_tree_threads_creds_and_env(guest: SharedGuest) {
    let device = guest.device_string();
    let _paused = guest.pause();
    let oracle = guest.oracle();
    // Credentials and start times in the JSON, as /proc/PID/status and
    // stat said (user processes: kernel threads come and go).
    let ps = json_lines(&leechio(&["-d", &device, "ps", "--json"]));
    for task in guest.processes().iter().filter(|t| !t.kernel_thread) {
        let line = ps.iter().find(|l| l["pid"] == task.pid).unwrap();
        assert_eq!(line["uid"], serde_json::json!(task.uid), "{line}");
        assert_eq!(line["gid"], serde_json::json!(task.gid), "{line}");
        let caps = &line["capabilities"];
        let sets = [
            "inheritable",
            "permitted",
            "effective",
            "bounding",
            "ambient",
        ];
        let got: Vec<u64> = sets.iter().map(|s| parse_hex(&caps[*s])).collect();
        assert_eq!(got, task.caps, "{line}");
        let start = line["start_time_ns"].as_u64().unwrap();
        assert_eq!(start / 10_000_000, task.start_ticks, "{line}");
    }
    assert!(ps
        .iter()
        .any(|l| l["uid"] == serde_json::json!([1001, 1001, 1001, 1001])));

    // --tree: every process once, each under its parent.
    let tree = json_lines(&leechio(&["-d", &device, "ps", "--json", "--tree"]));
    assert_eq!(tree.len(), ps.len());
    let mut path: Vec<u64> = Vec::new();
    for line in &tree {
        let depth = line["depth"].as_u64().unwrap() as usize;
        assert!(depth <= path.len(), "{line}");
        path.truncate(depth);
        if depth > 0 {
            assert_eq!(line["ppid"].as_u64(), path.last().copied(), "{line}");
        }
        path.push(line["pid"].as_u64().unwrap());
    }
    let table = leechio(&["-d", &device, "ps", "--tree"]);
    assert!(table.status.success(), "{}", text(&table.stderr));
    let sleeper = text(&table.stdout)
        .lines()
        .find(|l| l.ends_with("sleep 100001"))
        .map(str::to_string)
        .unwrap();
    // A child of /init (pid 1, itself at depth 0).
    assert!(sleeper.ends_with("  \\_ sleep 100001"), "{sleeper:?}");

    // --threads: a row a task, processes and their threads.
    let threads = leechio(&["-d", &device, "ps", "--threads"]);
    assert!(threads.status.success(), "{}", text(&threads.stderr));
    let rows = text(&threads.stdout).lines().count() - 1;
    let tasks: usize = ps
        .iter()
        .map(|l| 1 + l["threads"].as_array().unwrap().len())
        .sum();
    assert_eq!(rows, tasks);
    let pattern = guest.pattern().pid.to_string();
    let pattern_threads: Vec<String> = text(&threads.stdout)
        .lines()
        .filter(|l| l.split_whitespace().next() == Some(&pattern))
        .map(|l| l.split_whitespace().nth(1).unwrap().to_string())
        .collect();
    let want: Vec<String> = guest
        .tasks()
        .iter()
        .filter(|t| t.tgid == guest.pattern().pid)
        .map(|t| t.pid.to_string())
        .collect();
    assert_eq!(pattern_threads, want);

    // --creds: /proc/PID/status' Uid and Gid lines, comma-separated.
    let creds = leechio(&["-d", &device, "ps", "--creds"]);
    assert!(creds.status.success(), "{}", text(&creds.stderr));
    let user = oracle
        .processes()
        .find(|t| t.cmdline == ["sleep", "100003"])
        .unwrap();
    let row = text(&creds.stdout)
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&user.pid.to_string()))
        .map(str::to_string)
        .unwrap();
    let fields: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        fields[2..4],
        ["1001,1001,1001,1001", "1002,1002,1002,1002"],
        "{row}"
    );

    // env: every user process's environment as /proc/PID/environ held it.
    let env = json_lines(&leechio(&["-d", &device, "env", "--json"]));
    let users: Vec<_> = oracle
        .processes()
        .filter(|t| !t.kernel_thread && t.state != 'Z')
        .collect();
    assert_eq!(env.len(), users.len());
    for task in users {
        let line = env.iter().find(|l| l["pid"] == task.pid).unwrap();
        let want = task.environment();
        assert_eq!(line["environment"], serde_json::json!(want), "{line}");
    }
    let one = leechio(&["-d", &device, "env", "1"]);
    assert!(one.status.success(), "{}", text(&one.stderr));
    assert!(text(&one.stdout)
        .lines()
        .skip(1)
        .all(|l| l.trim_start().starts_with("1  ")));
    let none = leechio(&["-d", &device, "env", "4999999"]);
    assert_eq!(none.status.code(), Some(1));
    assert!(
        text(&none.stderr).contains("no process with pid 4999999"),
        "{}",
        text(&none.stderr)
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn spaces_names_the_process_of_each_table() {
    check_spaces_names_the_process_of_each_table(shared_guest());
}

/// On a CPU with 5-level paging on, and KASLR.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn with_5_level_paging_spaces_names_the_process_of_each_table() {
    check_spaces_names_the_process_of_each_table(shared_la57_guest());
}

fn check_spaces_names_the_process_of_each_table(guest: SharedGuest) {
    let device = guest.device_string();
    let _paused = guest.pause();
    let ps = json_lines(&leechio(&["-d", &device, "ps", "--json", "--no-cache"]));
    let spaces = json_lines(&leechio(&["-d", &device, "spaces", "--json"]));
    let kernel = spaces
        .iter()
        .find(|s| parse_hex(&s["dtb"]) == guest.kernel_dtb())
        .expect("the kernel's table");
    assert_eq!(
        (&kernel["pid"], &kernel["process"]),
        (&Value::Null, &Value::from("kernel"))
    );
    // Read in the mode the CPU runs in.
    assert_eq!(kernel["paging"], guest.paging().levels(), "{kernel}");
    let mut named = 0;
    for p in ps.iter().filter(|p| !p["dtb"].is_null()) {
        let space = spaces
            .iter()
            .find(|s| s["dtb"] == p["dtb"])
            .unwrap_or_else(|| panic!("no space for {p}"));
        assert_eq!(
            (&space["pid"], &space["process"]),
            (&p["pid"], &p["name"]),
            "{space}"
        );
        assert_eq!(space["paging"], guest.paging().levels(), "{space}");
        named += 1;
    }
    let with_pid = spaces.iter().filter(|s| !s["pid"].is_null()).count();
    assert_eq!(with_pid, named);
    let user = guest
        .processes()
        .iter()
        .filter(|t| !t.kernel_thread && t.state != 'Z')
        .count();
    assert_eq!(named, user, "{ps:#?}");
}

/// The rows of one run of `leechio bench --json` on `device` with the
/// kernel's table `dtb`, memflow's rows from the plugin built as `make
/// plugin` builds it.
fn bench_rows(device: &str, dtb: &str) -> Vec<Value> {
    let output = leechio_with(
        Command::new(env!("CARGO_BIN_EXE_leechio"))
            .args(["-d", device, "bench", "--runs", "1", "--json", "--dtb", dtb])
            .env("LEECHIO_PLUGINS", common::plugin::plugin_dir()),
    );
    json_lines(&output)
}

/// The calls the modules' views cost, from their bench row's workload
/// ("3 modules, N built-in in /sys/module (its tree L levels deep)"):
/// the sysfs view, the deepest, reads /sys/module's red-black tree a
/// level a call and four more (the kset's pointer, the kset, its
/// directory, the entries' owners). The levels are those of a red-black
/// tree of the built-in modules and the three loaded ones (and at most
/// one file, 6.12's `compression`): between log2 of the entries and
/// twice that. On 6.1's sixty-odd built-ins, 7 levels; 6.12's 92, 8.
fn module_views_calls(row: &serde_json::Value) -> u64 {
    let workload = row["workload"].as_str().unwrap();
    let number_before = |word: &str| -> u64 {
        let before = workload.split(word).next().unwrap();
        let digits = before.trim_end().rsplit(' ').next().unwrap();
        digits
            .parse()
            .unwrap_or_else(|_| panic!("{word} in {workload}"))
    };
    let levels = number_before(" levels deep");
    let entries = number_before(" built-in in /sys/module") + 3;
    // At most one file beside the directories (6.12's `compression`).
    assert!(
        red_black_height_fits(entries, entries + 1, levels),
        "{workload}"
    );
    4 + levels
}

/// The calls the hooks cost, from their bench row's workload ("N system
/// calls (the module tree N nodes in L levels)"): those of the module
/// list (its head and one per two of the three modules) or, deeper, of
/// the module address tree (its root and a call a level, the levels a
/// red-black tree's of its nodes: 2 on 6.1, 4 on 6.12), beside the
/// system-call table and the ftrace list's head.
fn hooks_calls(row: &serde_json::Value) -> u64 {
    let workload = row["workload"].as_str().unwrap();
    let tree = workload.split("(the module tree ").nth(1).expect(workload);
    let numbers: Vec<u64> = tree
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    let [nodes, levels] = numbers[..] else {
        panic!("{workload}")
    };
    assert!(
        nodes >= 3 && red_black_height_fits(nodes, nodes, levels),
        "{workload}"
    );
    3.max(1 + levels)
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn bench_lists_the_processes_both_ways_alike_and_counts_their_calls() {
    let guest = shared_guest();
    let device = guest.device_string();
    let _paused = guest.pause();
    let dtb = format!("{:#x}", guest.kernel_dtb());
    let rows = bench_rows(&device, &dtb);
    let row = |workload: &str, method: &str| {
        rows.iter()
            .find(|r| {
                r["workload"].as_str().unwrap().starts_with(workload)
                    && r["method"].as_str().unwrap().starts_with(method)
            })
            .unwrap_or_else(|| panic!("no row {workload} / {method}: {rows:#?}"))
    };
    let find = row("Linux kernel found with no profile", "engine: Kernel::find");
    assert_eq!(find["calls"], FIND_CALLS, "{find}");
    let engine = row(
        "process list with command lines",
        "engine: Kernel::processes",
    );
    let hop = row(
        "process list with command lines",
        "memflow VirtualDma: hop by hop",
    );
    assert_eq!(engine["calls"], LIST_CALLS, "{engine}");
    // Every process the guest's /proc listed, and the kernel threads
    // started since.
    let processes = engine["processes"].as_u64().unwrap();
    let users = guest
        .processes()
        .iter()
        .filter(|t| !t.kernel_thread)
        .count() as u64;
    assert!(processes > users, "{engine}");
    assert_eq!(
        engine["workload"],
        format!("process list with command lines, {processes} processes")
    );
    // Hop by hop: the same list, at least one call a process.
    assert_eq!(hop["processes"], processes, "{hop}");
    assert!(hop["calls"].as_u64().unwrap() >= processes, "{hop}");
    // The OS plugin: the same list in the engine's calls, the executables
    // and exit codes it adds read beside them.
    let os = row(
        "process list with command lines",
        "OS plugin linux_btf: memflow process_info_list",
    );
    assert_eq!(os["processes"], processes, "{os}");
    assert_eq!(os["calls"], LIST_CALLS, "{os}");
    for r in [engine, hop, os] {
        assert_eq!(r["differing_pids"], serde_json::json!([]), "{r}");
        assert_eq!(r["changing_pids"], serde_json::json!([]), "{r}");
    }
    // The open files: every fd /proc listed, batched and a read a call,
    // the two alike.
    let files = row("open files of every process", "engine: Kernel::open_files");
    let fds = guest.oracle().fds.len();
    assert_eq!(
        files["workload"],
        format!(
            "open files of every process, {fds} fds of {} processes",
            files["processes"]
        )
    );
    assert_eq!(files["calls"], FILES_CALLS, "{files}");
    let single = row("open files of every process", "engine: the same walk");
    assert!(single["calls"].as_u64().unwrap() > fds as u64, "{single}");
    for r in [files, single] {
        assert_eq!(r["differing_pids"], serde_json::json!([]), "{r}");
    }
    // The other walks, each in its calls (tests/linux_processes.rs
    // counts them too), and a read a call in more; the two alike.
    let sockets = guest.oracle().network.sockets.len() as u64;
    for (workload, engine, calls, items) in [
        (
            "TCP and UDP sockets",
            "engine: Kernel::sockets",
            FILES_CALLS + 1,
            sockets,
        ),
        (
            "network devices and addresses",
            "engine: Kernel::interfaces",
            5,
            2,
        ),
        ("the kernel's names", "engine: Kernel::system", 2, 2),
        ("the kernel log", "engine: Kernel::dmesg", 2, 2),
        (
            "environments of every process",
            "engine: Kernel::processes_with",
            LIST_CALLS,
            processes,
        ),
        (
            "modules: list, address tree, sysfs, parameters",
            "engine: Kernel::module_views",
            module_views_calls(row(
                "modules: list, address tree, sysfs, parameters",
                "engine: Kernel::module_views",
            )),
            3,
        ),
        (
            "hooks: system-call table, ftrace callbacks",
            "engine: Kernel::hooks",
            hooks_calls(row(
                "hooks: system-call table, ftrace callbacks",
                "engine: Kernel::hooks",
            )),
            1,
        ),
    ] {
        let engine = row(workload, engine);
        let single = row(workload, "engine: the same walk");
        assert_eq!(engine["calls"], calls, "{engine}");
        assert!(engine["processes"].as_u64().unwrap() >= items, "{engine}");
        assert!(single["calls"].as_u64().unwrap() > calls, "{single}");
        for r in [engine, single] {
            assert_eq!(r["differing_pids"], serde_json::json!([]), "{r}");
        }
    }
    // What hides: the engine's views in the process list's calls, the
    // same views pointer by pointer in at least a call a task, alike.
    let engine = row("what hides", "engine: Kernel::process_views");
    let hop = row("what hides", "memflow VirtualDma: pointer by pointer");
    assert_eq!(engine["calls"], LIST_CALLS, "{engine}");
    let tasks = engine["processes"].as_u64().unwrap();
    assert!(tasks > processes, "{engine}");
    assert_eq!(hop["processes"], tasks, "{hop}");
    assert!(hop["calls"].as_u64().unwrap() >= tasks, "{hop}");
    for r in [engine, hop] {
        assert_eq!(r["differing_pids"], serde_json::json!([]), "{r}");
        assert_eq!(r["changing_pids"], serde_json::json!([]), "{r}");
    }
    // The page cache: the list and the largest file's bytes, alike both
    // ways, a read a call taking more calls than the batched walk.
    let engine = row("files from the page cache", "engine: Kernel::cached_files");
    let single = row("files from the page cache", "engine: the same walk");
    let files = engine["processes"].as_u64().unwrap();
    assert!(
        files >= guest.oracle().cached_files.len() as u64,
        "{engine}"
    );
    assert_eq!(single["processes"], files, "{single}");
    assert!(
        single["calls"].as_u64() > engine["calls"].as_u64(),
        "{single} {engine}"
    );
    for r in [engine, single] {
        assert_eq!(r["differing_pids"], serde_json::json!([]), "{r}");
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn bench_on_the_running_guest_calls_no_read_of_the_64_mib_dumps_wrong() {
    // The guest runs: its kernel rewrites pages while the rows read them,
    // some of them only for a moment (a list pointer on two pages of the
    // direct map holds another value for 8-330 ms every 4 s). The board's
    // delays of `make demo` make each dump row take about 0.35 s.
    let guest = shared_guest();
    let device = guest.device_string_with_delays(150_000, 21_000);
    let dtb = format!("{:#x}", guest.kernel_dtb());
    let rows = bench_rows(&device, &dtb);
    let dumps: Vec<&Value> = rows
        .iter()
        .filter(|r| r["workload"] == "dump of 64 MiB of an address space")
        .filter(|r| !r["checked_reads"].is_null())
        .collect();
    let methods: Vec<&str> = dumps
        .iter()
        .map(|r| r["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        [
            "engine: one AddressSpace::read, cold",
            "engine: one AddressSpace::read in a scope, cold",
            "memflow VirtualDma: one read_raw_into, cold"
        ]
    );
    for r in dumps {
        assert_eq!(r["wrong_reads"], 0, "{r}");
        // Every page judged, or left out as changing.
        let pages = r["checked_reads"].as_u64().unwrap() + r["changing_reads"].as_u64().unwrap();
        assert_eq!(pages, 64 << 20 >> 12, "{r}");
    }
    // Reads that are wrong are still called so: memflow's one
    // read_raw_list leaves some of the virtual reads failed, on this
    // guest as on an image of it.
    let list = rows
        .iter()
        .find(|r| {
            r["workload"] == "4096 random kernel virtual reads, cold"
                && r["method"] == "memflow VirtualDma: one read_raw_list"
        })
        .unwrap_or_else(|| panic!("no read_raw_list row: {rows:#?}"));
    assert!(list["wrong_reads"].as_u64().unwrap() > 0, "{list}");
}

/// The lines of /proc/PID/maps the guest printed at boot, as they were.
fn proc_maps_lines(guest: &Guest, pid: u32) -> Vec<String> {
    let prefix = format!("leechio-oracle: map {pid} ");
    guest
        .serial_log()
        .lines()
        .filter_map(|l| l.trim_end_matches('\r').strip_prefix(&prefix))
        .map(str::to_string)
        .collect()
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn maps_prints_what_the_guests_proc_said() {
    check_maps_prints_what_the_guests_proc_said(shared_guest());
}

/// On a CPU with 5-level paging on, and KASLR.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn with_5_level_paging_maps_prints_what_the_guests_proc_said() {
    check_maps_prints_what_the_guests_proc_said(shared_la57_guest());
}

fn check_maps_prints_what_the_guests_proc_said(guest: SharedGuest) {
    let device = guest.device_string();
    let _paused = guest.pause();
    for &pid in guest.oracle().maps.keys() {
        let output = leechio(&["-d", &device, "maps", &pid.to_string(), "--no-cache"]);
        assert!(output.status.success(), "{}", text(&output.stderr));
        let out = text(&output.stdout);
        assert_eq!(
            out.lines().collect::<Vec<_>>(),
            proc_maps_lines(&guest, pid)
        );
    }
    let pid = guest.pattern().pid;
    let lines = json_lines(&leechio(&[
        "-d",
        &device,
        "maps",
        "--json",
        "--no-cache",
        &pid.to_string(),
    ]));
    let maps = guest.maps(pid);
    assert_eq!(lines.len(), maps.len());
    for (line, map) in lines.iter().zip(maps) {
        let found = (
            parse_hex(&line["start"]),
            parse_hex(&line["end"]),
            line["perms"].as_str().unwrap(),
            parse_hex(&line["offset"]),
            line["device"].as_str().unwrap(),
            line["inode"].as_u64().unwrap(),
            line["path"].as_str().unwrap(),
        );
        let want = (
            map.start,
            map.end,
            map.perms.as_str(),
            map.offset,
            map.device.as_str(),
            map.inode,
            map.path.as_str(),
        );
        assert_eq!(found, want);
    }
    for (pid, message) in [
        (
            "2",
            "pid 2 (kthreadd) is a kernel thread: it has no memory maps",
        ),
        ("99999", "no process with pid 99999"),
    ] {
        let output = leechio(&["-d", &device, "maps", pid, "--no-cache"]);
        assert!(!output.status.success());
        assert_eq!(text(&output.stderr), format!("leechio: {message}\n"));
    }
}

/// Each program header of an ELF file: type, flags, offset, address and
/// size in the file.
fn program_headers(elf: &[u8]) -> Vec<(u32, u32, u64, u64, u64)> {
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap());
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap());
    let (phoff, count) = (u64_at(32) as usize, u16_at(56) as usize);
    (0..count)
        .map(|i| phoff + i * 56)
        .map(|h| {
            (
                u32_at(h),
                u32_at(h + 4),
                u64_at(h + 8),
                u64_at(h + 16),
                u64_at(h + 32),
            )
        })
        .collect()
}

/// `p_flags` of /proc's permissions: R 4, W 2, X 1.
fn segment_flags(perms: &str) -> u32 {
    let has = |i: usize, c: u8| perms.as_bytes()[i] == c;
    u32::from(has(0, b'r')) * 4 + u32::from(has(1, b'w')) * 2 + u32::from(has(2, b'x'))
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn dump_pid_writes_each_vma_with_its_permissions_and_a_note_of_its_files() {
    check_dump_pid_writes_each_vma_with_its_permissions_and_a_note_of_its_files(shared_guest());
}

/// On a CPU with 5-level paging on, and KASLR.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn with_5_level_paging_dump_pid_writes_each_vma_with_its_permissions_and_a_note_of_its_files() {
    check_dump_pid_writes_each_vma_with_its_permissions_and_a_note_of_its_files(shared_la57_guest());
}

fn check_dump_pid_writes_each_vma_with_its_permissions_and_a_note_of_its_files(guest: SharedGuest) {
    let device = guest.device_string();
    let _paused = guest.pause();
    let pattern = guest.pattern();
    let dir = tempfile::tempdir().unwrap();
    let core = dir.path().join("pattern.core");
    let core = core.to_str().unwrap();
    let output = leechio(&[
        "-d",
        &device,
        "dump",
        "--pid",
        &pattern.pid.to_string(),
        "-o",
        core,
        "--no-cache",
    ]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let elf = std::fs::read(core).unwrap();
    let headers = program_headers(&elf);
    // A PT_LOAD per VMA /proc listed, with its permissions, cut where its
    // pages could not be read (never touched: not present), which are
    // listed beside the file instead: no segment shows a byte not read.
    let maps = guest.maps(pattern.pid);
    let loads: Vec<(u64, u64, u32)> = headers
        .iter()
        .filter(|h| h.0 == 1)
        .map(|&(_, flags, _, va, len)| (va, va + len, flags))
        .collect();
    let failed: Vec<(u64, u64)> = std::fs::read_to_string(format!("{core}.failed"))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| {
            let w: Vec<u64> = l
                .split_whitespace()
                .take(2)
                .map(|n| u64::from_str_radix(n.trim_start_matches("0x"), 16).unwrap())
                .collect();
            (w[0], w[1])
        })
        .collect();
    assert!(!failed.is_empty(), "pages never touched fail");
    let mut tiles: Vec<(u64, u64, Option<u32>)> = loads
        .iter()
        .map(|&(s, e, f)| (s, e, Some(f)))
        .chain(failed.iter().map(|&(s, e)| (s, e, None)))
        .collect();
    tiles.sort_unstable();
    // (A failed range may run on into the next VMA: the list merges
    // neighbours.)
    let mut tiles = tiles.into_iter();
    let mut carried = None;
    for m in maps {
        let flags = segment_flags(&m.perms);
        let mut at = m.start;
        while at < m.end {
            let (s, e, f) = carried
                .take()
                .or_else(|| tiles.next())
                .unwrap_or_else(|| panic!("{:#x}..{:#x} not covered from {at:#x}", m.start, m.end));
            assert_eq!(s, at, "{m:x?}: a gap or an overlap at {at:#x}");
            assert!(
                f.is_none_or(|f| f == flags),
                "{s:#x}: flags {f:?}, not {flags}"
            );
            if e > m.end {
                assert!(f.is_none(), "{s:#x}..{e:#x} crosses the end of {m:x?}");
                carried = Some((m.end, e, None));
            }
            at = e.min(m.end);
        }
    }
    let rest: Vec<_> = carried.into_iter().chain(tiles).collect();
    assert!(rest.is_empty(), "past every VMA: {rest:x?}");
    readelf_clean(Path::new(core));
    // The pattern's two halves hold its bytes, read through its own
    // page tables.
    for half in pattern.halves() {
        let &(_, _, offset, _, len) = headers
            .iter()
            .find(|h| h.0 == 1 && h.3 == half.start)
            .expect("a PT_LOAD per half");
        assert_eq!(len, half.end - half.start);
        let bytes = &elf[offset as usize..(offset + len) as usize];
        assert!(
            bytes == pattern.bytes(half.start, len as usize),
            "the bytes of {half:x?}"
        );
    }
    // readelf finds the note: NT_FILE, owned by CORE. (Debian 12's readelf,
    // 2.40, does not decode a 64-bit one: binutils' own reader of core
    // notes gives its bytes, as `.note.linuxcore.file`.)
    let notes = tool("readelf", &["-n", "-W", core]);
    assert!(
        notes
            .lines()
            .any(|l| l.trim_start().starts_with("CORE") && l.contains("NT_FILE (mapped files)")),
        "{notes}"
    );
    let desc = section_bytes(&tool(
        "objdump",
        &["-s", "-j", ".note.linuxcore.file", core],
    ));
    let word = |i: usize| u64::from_le_bytes(desc[i * 8..i * 8 + 8].try_into().unwrap());
    let files: Vec<_> = maps.iter().filter(|m| m.path.starts_with('/')).collect();
    assert_eq!((word(0), word(1)), (files.len() as u64, 0x1000));
    let ranges: Vec<[u64; 3]> = (0..files.len())
        .map(|i| [word(2 + 3 * i), word(3 + 3 * i), word(4 + 3 * i)])
        .collect();
    let want: Vec<[u64; 3]> = files
        .iter()
        .map(|m| [m.start, m.end, m.offset / 0x1000])
        .collect();
    assert_eq!(ranges, want);
    let names = &desc[(2 + 3 * files.len()) * 8..];
    let names: Vec<String> = names
        .split(|&b| b == 0)
        .take(files.len())
        .map(text)
        .collect();
    assert_eq!(
        names,
        files.iter().map(|m| m.path.clone()).collect::<Vec<_>>()
    );

    // A process by name: one; two of that name (the pattern process and
    // its stopped child; the zombie has no memory); a kernel thread.
    let oracle = guest.oracle();
    let init = oracle.task(1).unwrap().comm.clone();
    let dump_of = |name: &str, args: &[&str]| {
        let path = dir.path().join(name);
        let path = path.to_str().unwrap().to_string();
        let all = [&["-d", &device, "dump", "--no-cache", "-o", &path], args].concat();
        (leechio(&all), path)
    };
    let ((by_pid, pid_file), (by_name, name_file)) = (
        dump_of("1.core", &["--pid", "1"]),
        dump_of("init.core", &["--process", &init]),
    );
    assert!(by_pid.status.success() && by_name.status.success());
    assert!(std::fs::read(pid_file).unwrap() == std::fs::read(name_file).unwrap());
    let mut twins: Vec<u32> = oracle
        .processes()
        .filter(|t| t.cmdline == ["leechio-pattern"] && t.state != 'Z')
        .map(|t| t.pid)
        .collect();
    twins.sort();
    assert_eq!(twins.len(), 2);
    let (output, _) = dump_of("twins.core", &["--process", "leechio-pattern"]);
    assert_eq!(
        text(&output.stderr),
        format!(
            "leechio: 2 processes are named \"leechio-pattern\" (pids {}, {}): give --pid\n",
            twins[0], twins[1]
        )
    );
    let (output, _) = dump_of("kthreadd.core", &["--pid", "2"]);
    assert_eq!(
        text(&output.stderr),
        "leechio: pid 2 (kthreadd) is a kernel thread: it has no memory maps\n"
    );
}

/// What `program ARGS` prints; it must complain of nothing.
fn tool(program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    let errors = text(&output.stderr);
    assert!(
        output.status.success() && errors.is_empty(),
        "{program}: {errors}"
    );
    text(&output.stdout)
}

/// The bytes of the one section `objdump -s` printed: after its offset,
/// each line holds up to four groups of hex digits, then two spaces and
/// the bytes as text.
fn section_bytes(dump: &str) -> Vec<u8> {
    let contents = dump
        .split_once("Contents of section")
        .unwrap_or_else(|| panic!("no section in {dump:?}"))
        .1;
    contents
        .lines()
        .skip(1)
        .filter_map(|l| l.strip_prefix(' '))
        .flat_map(|l| {
            let hex = l.split_once("  ").map_or(l, |(hex, _)| hex);
            let digits: String = hex.split_whitespace().skip(1).collect();
            (0..digits.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn system_says_what_the_guests_uname_and_proc_say() {
    check_system_says_what_the_guests_uname_and_proc_say(shared_guest());
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn with_5_level_paging_system_says_what_the_guests_uname_and_proc_say() {
    check_system_says_what_the_guests_uname_and_proc_say(shared_la57_guest());
}

/// `leechio system`: its JSON fields against the guest's oracle (names and
/// command line equal, boot time to the second, uptime no less than at
/// boot), and the table, a `Key value` line each, the same.
fn check_system_says_what_the_guests_uname_and_proc_say(guest: SharedGuest) {
    let device = guest.device_string();
    let _paused = guest.pause();
    let oracle = &guest.oracle().system;
    let lines = json_lines(&leechio(&["-d", &device, "system", "--json", "--no-cache"]));
    let [s] = &lines[..] else { panic!("{lines:?}") };
    for key in common::qemu::oracle::system::UNAME_KEYS {
        assert_eq!(s[key], oracle.uname(key), "{key}");
    }
    assert_eq!(s["command_line"], guest.oracle().kernel_cmdline);
    let boot = s["boot_time"].as_u64().unwrap();
    assert!(boot.abs_diff(oracle.btime) <= 1, "{s}");
    let uptime = s["uptime"].as_f64().unwrap();
    assert!(uptime * 100.0 >= oracle.uptime_centis as f64, "{s}");
    assert_eq!(s["errors"], serde_json::json!({}));
    let table = leechio(&["-d", &device, "system", "--no-cache"]);
    assert!(table.status.success(), "{}", text(&table.stderr));
    let table = text(&table.stdout);
    let rows: Vec<(&str, &str)> = table
        .lines()
        .map(|l| (l[..12].trim_end(), &l[13..]))
        .collect();
    let want = [
        ("Sysname", oracle.uname("sysname")),
        ("Nodename", "leechio-guest"),
        ("Release", oracle.uname("release")),
        ("Version", oracle.uname("version")),
        ("Machine", oracle.uname("machine")),
        ("Domainname", "leechio.test"),
    ];
    assert_eq!(rows[..6], want);
    assert!(
        rows[6].0 == "Boot time" && rows[6].1.starts_with(&boot.to_string()),
        "{table}"
    );
    assert_eq!(rows[9], ("Cmdline", guest.oracle().kernel_cmdline.as_str()));
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn dmesg_prints_what_the_guests_dmesg_printed() {
    check_dmesg_prints_what_the_guests_dmesg_printed(shared_guest());
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn with_5_level_paging_dmesg_prints_what_the_guests_dmesg_printed() {
    check_dmesg_prints_what_the_guests_dmesg_printed(shared_la57_guest());
}

/// `leechio dmesg`: every line busybox `dmesg` printed at boot is among
/// its lines, in order (the kernel may have logged more since), each as
/// `[%5u.%06u] text`; its JSON a record a line, in sequence order, whose
/// lines give the same text.
fn check_dmesg_prints_what_the_guests_dmesg_printed(guest: SharedGuest) {
    let device = guest.device_string();
    let _paused = guest.pause();
    let output = leechio(&["-d", &device, "dmesg", "--no-cache"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let printed = text(&output.stdout);
    let ours: Vec<&str> = printed.lines().collect();
    let theirs: Vec<String> = guest
        .oracle()
        .system
        .dmesg
        .iter()
        .map(|l| text(l))
        .collect();
    // The guest's lines are printable but for tabs, which the terminal's
    // escaping leaves as dmesg does: the lines are printed as they are.
    let odd: Vec<&String> = theirs
        .iter()
        .filter(|l| l.contains(|c: char| (c.is_control() && c != '\t') || c == '\\'))
        .collect();
    assert!(odd.is_empty(), "{odd:#?}");
    let mut at = 0;
    for line in &theirs {
        let found = ours[at..].iter().position(|l| l == line);
        at += found.unwrap_or_else(|| panic!("{line:?} not printed in order")) + 1;
    }
    assert!(
        theirs[0].starts_with("[    0.000000] Linux version "),
        "{}",
        theirs[0]
    );
    let records = json_lines(&leechio(&["-d", &device, "dmesg", "--json", "--no-cache"]));
    let seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let from_json: Vec<String> = records
        .iter()
        .flat_map(|r| {
            let ns = r["time_ns"].as_u64().unwrap();
            let stamp = format!(
                "[{:5}.{:06}]",
                ns / 1_000_000_000,
                ns % 1_000_000_000 / 1000
            );
            let text = r["text"].as_str().unwrap().to_string();
            text.split('\n')
                .map(|l| format!("{stamp} {l}"))
                .collect::<Vec<_>>()
        })
        .collect();
    // The same log read twice: the same lines, save what the kernel logged
    // in between (none, paused).
    assert_eq!(from_json, ours);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn sockets_and_interfaces_say_what_the_guests_proc_and_ip_say() {
    check_sockets_and_interfaces(shared_guest());
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn with_5_level_paging_sockets_and_interfaces_say_what_the_guests_proc_and_ip_say() {
    check_sockets_and_interfaces(shared_la57_guest());
}

/// `leechio sockets`: every TCP and UDP socket of `/proc/net/{tcp,tcp6,
/// udp,udp6}` that a file holds (protocol, addresses, ports, state,
/// inode), held by the pids and fds whose links name it; `--all` adds the
/// pattern's unbound UDP socket; the table's row of the pattern's IPv4
/// listener as `ss -tuanp` writes it. `leechio interfaces`: each device of
/// `/sys/class/net` with its addresses (`ip -o -4 addr`,
/// `/proc/net/if_inet6`), and dummy0's lines as `ip addr` writes them.
fn check_sockets_and_interfaces(guest: SharedGuest) {
    use std::collections::BTreeSet;
    let device = guest.device_string();
    let _paused = guest.pause();
    let oracle = guest.oracle();
    let lines = json_lines(&leechio(&[
        "-d",
        &device,
        "sockets",
        "--json",
        "--no-cache",
    ]));
    type Row = (String, String, u64, String, u64, u64, u64);
    let row = |l: &Value| -> Row {
        (
            l["protocol"].as_str().unwrap().to_string(),
            l["local_address"].as_str().unwrap().to_string(),
            l["local_port"].as_u64().unwrap(),
            l["peer_address"].as_str().unwrap().to_string(),
            l["peer_port"].as_u64().unwrap(),
            l["state_number"].as_u64().unwrap(),
            l["inode"].as_u64().unwrap(),
        )
    };
    let got: BTreeSet<Row> = lines.iter().map(row).collect();
    let want: BTreeSet<Row> = oracle
        .network
        .sockets
        .iter()
        .filter(|s| s.inode != 0)
        .map(|s| {
            let (local, peer) = (s.local, s.peer);
            (
                s.protocol.clone(),
                local.ip().to_string(),
                u64::from(local.port()),
                peer.ip().to_string(),
                u64::from(peer.port()),
                u64::from(s.state),
                s.inode,
            )
        })
        .collect();
    assert_eq!(got, want);
    for l in &lines {
        let owners: BTreeSet<(u64, u64)> = l["owners"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (o["pid"].as_u64().unwrap(), o["fd"].as_u64().unwrap()))
            .collect();
        let name = format!("socket:[{}]", l["inode"]);
        let holders: BTreeSet<(u64, u64)> = oracle
            .fds
            .iter()
            .filter(|f| f.name == name)
            .map(|f| (u64::from(f.pid), u64::from(f.fd)))
            .collect();
        assert_eq!(owners, holders, "{l}");
    }
    let all = json_lines(&leechio(&[
        "-d",
        &device,
        "sockets",
        "--all",
        "--json",
        "--no-cache",
    ]));
    assert_eq!(all.len(), lines.len() + 1, "the unbound UDP socket");
    // The table: the IPv4 listener's row, the pattern's and its stopped
    // child's fds.
    let table = leechio(&["-d", &device, "sockets", "--no-cache"]);
    assert!(table.status.success(), "{}", text(&table.stderr));
    let listener = lines
        .iter()
        .find(|l| l["state"] == "LISTEN" && l["local_port"] == 7001)
        .unwrap();
    let users: Vec<String> = listener["owners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let name = oracle
                .task(o["pid"].as_u64().unwrap() as u32)
                .unwrap()
                .comm
                .clone();
            format!("(\"{name}\",pid={},fd={})", o["pid"], o["fd"])
        })
        .collect();
    let want = format!(
        "{:<5} {:<10} {:<40} {:<40} users:({})",
        "tcp",
        "LISTEN",
        "127.0.0.1:7001",
        "0.0.0.0:*",
        users.join(",")
    );
    let out = text(&table.stdout);
    assert!(out.lines().any(|l| l == want), "{want}\n{out}");

    let lines = json_lines(&leechio(&[
        "-d",
        &device,
        "interfaces",
        "--json",
        "--no-cache",
    ]));
    /// Name, index, hardware address, MTU, flags; IPv4 and IPv6
    /// addresses.
    type Device = (
        String,
        u64,
        String,
        u64,
        u64,
        BTreeSet<String>,
        BTreeSet<String>,
    );
    let got: Vec<Device> = lines
        .iter()
        .map(|l| {
            let addresses = |key: &str| {
                l[key]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| format!("{}/{}", a["address"].as_str().unwrap(), a["prefix"]))
                    .collect()
            };
            (
                l["name"].as_str().unwrap().to_string(),
                l["index"].as_u64().unwrap(),
                l["address"].as_str().unwrap().to_string(),
                l["mtu"].as_u64().unwrap(),
                l["flags_number"].as_u64().unwrap(),
                addresses("ipv4"),
                addresses("ipv6"),
            )
        })
        .collect();
    let want: Vec<_> = oracle
        .network
        .interfaces
        .iter()
        .map(|i| {
            (
                i.name.clone(),
                i.index as u64,
                i.address.clone(),
                u64::from(i.mtu),
                u64::from(i.flags),
                i.ipv4.iter().map(|a| format!("{}/{}", a.0, a.1)).collect(),
                i.ipv6.iter().map(|a| format!("{}/{}", a.0, a.1)).collect(),
            )
        })
        .collect();
    assert_eq!(got, want);
    let table = leechio(&["-d", &device, "interfaces", "--no-cache"]);
    assert!(table.status.success(), "{}", text(&table.stderr));
    let out = text(&table.stdout);
    if let Some(dummy) = oracle
        .network
        .interfaces
        .iter()
        .find(|i| i.name == "dummy0")
    {
        for line in [
            format!("    link/ether {}", dummy.address),
            "    inet 192.0.2.1/24 scope global dummy0".to_string(),
            "    inet6 2001:db8::1/64 scope global".to_string(),
        ] {
            assert!(out.lines().any(|l| l == line), "{line}\n{out}");
        }
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn cache_lists_and_writes_the_files_the_guest_left_in_its_page_cache() {
    check_cache_lists_and_writes_the_files_the_guest_left_in_its_page_cache(shared_guest());
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn with_5_level_paging_cache_lists_and_writes_the_files_the_guest_left_in_its_page_cache() {
    check_cache_lists_and_writes_the_files_the_guest_left_in_its_page_cache(shared_la57_guest());
}

/// `leechio cache`: `ls --json` lists each file `/init` left with the
/// inode, device, size and links its `stat` gave and a page for each 8
/// blocks (tmpfs's count), the deleted log held open by `sleep 100005`;
/// the table has a row for it; `cat` writes each file's bytes to stdout
/// (the hole as zeros, named on stderr, exit 3) to the SHA-256 the guest
/// printed; `cat --inode --dev -o --json` the deleted log to a file; a
/// path the cache does not hold is one line and exit 1.
fn check_cache_lists_and_writes_the_files_the_guest_left_in_its_page_cache(guest: SharedGuest) {
    use common::qemu::oracle::cache::sha256_hex;
    let device = guest.device_string();
    let _paused = guest.pause();
    let want = &guest.oracle().cached_files;
    assert_eq!(want.len(), 4);
    let dev = |d: u32| format!("{}:{}", d >> 20, d & 0xf_ffff);
    let lines = json_lines(&leechio(&[
        "-d",
        &device,
        "cache",
        "ls",
        "--json",
        "--no-cache",
    ]));
    let holder = guest
        .processes()
        .iter()
        .find(|t| t.cmdline == ["sleep", "100005"])
        .expect("the guest's sleep 100005")
        .pid;
    for f in want {
        let line = lines
            .iter()
            .find(|l| l["path"] == f.path.as_str())
            .unwrap_or_else(|| panic!("{} not listed", f.path));
        assert_eq!(line["inode"], f.inode, "{line}");
        assert_eq!(line["device"], dev(f.device), "{line}");
        assert_eq!(line["size"], f.size, "{line}");
        assert_eq!(line["links"], f.links, "{line}");
        assert_eq!(line["cached_pages"], f.blocks / 8, "{line}");
        assert_eq!(line["deleted"], f.links == 0, "{line}");
        if f.links == 0 {
            assert_eq!(line["open_by"], serde_json::json!([holder]), "{line}");
        }
    }
    let table = leechio(&["-d", &device, "cache", "ls"]);
    assert!(table.status.success(), "{}", text(&table.stderr));
    let table = text(&table.stdout);
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(
        rows[0].split_whitespace().collect::<Vec<_>>(),
        ["DEVICE", "INODE", "SIZE", "CACHED", "LINKS", "FS", "PATH"]
    );
    let deleted = want.iter().find(|f| f.links == 0).unwrap();
    let row = format!(
        "{:<7} {:>10} {:>12} {:>8} {:>5} {:<10} {}",
        dev(deleted.device),
        deleted.inode,
        deleted.size,
        deleted.blocks / 8,
        0,
        "rootfs",
        deleted.path
    );
    assert!(rows.contains(&row.as_str()), "{row:?} not in {table}");
    for f in want {
        let out = leechio(&["-d", &device, "cache", "cat", &f.path]);
        assert_eq!(sha256_hex(&out.stdout), f.sha256, "{}", f.path);
        let missing = f.size.div_ceil(4096) - f.blocks / 8;
        match missing {
            0 => assert!(
                out.status.success() && out.stderr.is_empty(),
                "{}",
                text(&out.stderr)
            ),
            _ => {
                assert_eq!(out.status.code(), Some(3), "{}", f.path);
                assert_eq!(
                    text(&out.stderr),
                    format!(
                        "leechio: pages 0..{missing} (bytes 0..{}) of {} are not in the page cache: written as zeros\n",
                        missing * 4096,
                        f.path
                    )
                );
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("deleted.log");
    let out = leechio(&[
        "-d",
        &device,
        "cache",
        "cat",
        "--inode",
        &deleted.inode.to_string(),
        "--dev",
        &dev(deleted.device),
        "-o",
        file.to_str().unwrap(),
        "--json",
    ]);
    let [summary] = &json_lines(&out)[..] else {
        panic!("{}", text(&out.stdout))
    };
    assert_eq!(summary["path"], deleted.path.as_str());
    assert_eq!(summary["complete"], true);
    assert_eq!(summary["missing_pages"], serde_json::json!([]));
    assert_eq!(sha256_hex(&std::fs::read(&file).unwrap()), deleted.sha256);
    let out = leechio(&["-d", &device, "cache", "cat", "/leechio-cache/none"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "leechio: no file /leechio-cache/none in the page cache (the dentry cache and the open files were searched)\n"
    );
}
