//! Kernel memory a target can hold to make the Linux walks explode, lie or
//! write on the analyst's terminal: an image of the test guest changed
//! where the project's own API finds the structures (offsets from the
//! kernel's BTF), with hostile shapes built in the guest's free RAM.
//! `ps`, `maps`, `spaces`, `dump`, `modules`, `system`, `dmesg`, `check`, `sockets`, `interfaces` and `cache` must end within a deadline and a
//! memory cap, with a result that names what was cut or a one-line error,
//! show no value that failed a check as fact, and escape every string of
//! the target, as docs/linux.md states.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use common::bounded::{self, Run};
use common::crafted::{
    direct, move_btf_member, offset, physical, Clean, Crafted, MapleNodes, XaNodes,
};
use common::elf_tools::notes;
use common::linux::{engine, no_cache};
use common::qemu::shared_guest;
use leechio::linux::{Kernel, ProcessList, Protocol, Vma, TCP_LISTEN};
use serde_json::Value;

/// Time and memory every run must stay within (a debug build on a loaded
/// 2-core machine; the clean image's `ps` peaks near 75 MiB).
const DEADLINE: Duration = Duration::from_secs(60);
const MEMORY_CAP_KIB: i64 = 256 << 10;
/// `PID_MAX_LIMIT` of 64-bit kernels.
const PID_MAX_LIMIT: u64 = 4 << 20;
/// `vm.max_map_count` unless raised: the guest leaves it.
const MAX_MAP_COUNT: usize = 65_530;

/// The guest's image on disk, its kernel, and what the walks find in it.
struct Target {
    clean: Clean,
    kernel: Kernel,
    list: ProcessList,
    /// The pids of `sleep 100001` and of the shell whose child sleeps.
    sleep: u32,
    shell: u32,
    pattern: u32,
    /// The oracle's command line of pid 1.
    init_cmdline: Vec<String>,
    /// The names of the guest's own modules, sorted.
    modules: Vec<String>,
}

/// The target, made once for all tests of this file.
fn target() -> &'static Target {
    static TARGET: OnceLock<Target> = OnceLock::new();
    TARGET.get_or_init(|| {
        let guest = shared_guest();
        let clean = Clean::save(&guest);
        let (mem, _) = engine(common::qemu::open_device(&clean.device()));
        let kernel = Kernel::find(&mem, &no_cache()).unwrap();
        let list = kernel.processes();
        assert!(list.failed.is_empty(), "{:?}", list.failed);
        let by_cmdline = |first: &str| {
            list.processes
                .iter()
                .find(|p| p.cmdline.first().map(String::as_str) == Some(first))
                .map(|p| p.pid)
                .unwrap()
        };
        let sleep = list
            .processes
            .iter()
            .find(|p| p.cmdline == ["sleep", "100001"])
            .unwrap()
            .pid;
        Target {
            sleep,
            shell: by_cmdline("sh"),
            pattern: guest.pattern().pid,
            init_cmdline: guest.oracle().task(1).unwrap().cmdline.clone(),
            modules: {
                let mut names: Vec<String> =
                    guest.modules().iter().map(|m| m.name.clone()).collect();
                names.sort();
                names
            },
            clean,
            kernel,
            list,
        }
    })
}

impl Target {
    /// The task of process `pid`.
    fn task(&self, pid: u32) -> u64 {
        self.list.get(pid).unwrap().task
    }

    /// The physical address of member `path` of the task of `pid`.
    fn task_field(&self, pid: u32, path: &str) -> u64 {
        physical(
            &self.kernel,
            self.task(pid) + offset(&self.kernel, "task_struct", path),
        )
    }

    /// The VMAs of process `pid` in the clean image.
    fn vmas(&self, pid: u32) -> Vec<Vma> {
        let vmas = self.kernel.vmas(self.list.get(pid).unwrap().mm.unwrap());
        assert!(vmas.failed.is_empty(), "{:?}", vmas.failed);
        vmas.vmas
    }

    /// Where the maple tree's root of process `pid` is.
    fn maple_root(&self, pid: u32) -> u64 {
        let k = &self.kernel;
        let mm = self.list.get(pid).unwrap().mm.unwrap();
        physical(
            k,
            mm + offset(k, "mm_struct", "mm_mt") + offset(k, "maple_tree", "ma_root"),
        )
    }
}

/// One test at a time: crafting and runs of 256 MiB images side by side
/// gain nothing on two cores, and a program's peak memory is measured
/// best while the test process stays small (see `run_bounded`).
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// A test's turn, the target, and a copy of its image to change.
fn start() -> (MutexGuard<'static, ()>, &'static Target, Crafted) {
    let turn = one_at_a_time();
    let t = target();
    (turn, t, t.clean.craft())
}

/// Runs `leechio -d DEVICE ARGS`, bounded, with a kernel cache of its own.
fn leechio(device: &str, args: &[&str]) -> Run {
    let mut all = vec!["-d", device];
    all.extend(args);
    let run = bounded::run_bounded(Path::new(env!("CARGO_BIN_EXE_leechio")), &all, DEADLINE);
    bounded::assert_clean(&run, &args.join(" "), MEMORY_CAP_KIB);
    run
}

fn json_lines(run: &Run) -> Vec<Value> {
    run.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Little-endian bytes of a word.
fn le(value: u64) -> [u8; 8] {
    value.to_le_bytes()
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)]
fn a_pid_table_of_millions_of_entries_is_read_within_what_the_target_holds() {
    let (_turn, t, mut image) = start();
    let k = &t.kernel;
    // An xarray of four levels (shifts 18, 12, 6, 0): 1 + 16 + 1,024 +
    // 65,536 nodes (38 MB), whose 4 Mi leaves all name pid 1's struct
    // pid, but index 0.
    let array = k.init_pid_ns() + offset(k, "pid_namespace", "idr.idr_rt");
    let pid1 = image.peek_u64(t.task_field(1, "thread_pid"));
    let nodes = XaNodes::of(k);
    let head = nodes.build(k, &mut image, array, 4, 16, |index| match index {
        0 => 0,
        _ => pid1,
    });
    let head_at = physical(
        k,
        k.init_pid_ns() + offset(k, "pid_namespace", "idr.idr_rt.xa_head"),
    );
    image.poke(head_at, &le(head));
    let run = leechio(&image.device(), &["ps", "--json"]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    // Pid 1, its struct pid read once.
    let listed = json_lines(&run);
    assert_eq!(listed.len(), 1, "{}", run.stdout);
    assert_eq!(listed[0]["pid"], 1);
    assert_eq!(listed[0]["ppid"], 0);
    assert_eq!(listed[0]["args"], serde_json::json!(t.init_cmdline));
    // Three pids for each task_struct the image's memory could hold.
    let tasks = (256u64 << 20) / k.btf().size_of("task_struct").unwrap();
    let most = (3 * tasks).min(PID_MAX_LIMIT);
    let cut = format!(
        "more pids than {most}, 3 for each of the {tasks} task_structs {} bytes of memory hold: the first {most} read",
        256u64 << 20
    );
    assert!(run.stderr.contains(&cut), "{cut}\n{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "the array holds more than {most} entries: the walk stopped"
        )),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!(
            "struct pid filed under {} more indices than its own (1): read once",
            most - 1
        )),
        "{}",
        run.stderr
    );
    assert_eq!(run.stderr.lines().count(), 4, "{}", run.stderr);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)]
fn a_parent_that_is_no_task_and_a_thread_of_another_kind_are_not_shown_as_fact() {
    let (_turn, t, mut image) = start();
    let k = &t.kernel;
    // The shell's parent: a page of zeros.
    let zeros = direct(k, image.alloc(0x1000, 0x1000));
    image.poke(t.task_field(t.shell, "real_parent"), &le(zeros));
    // `sleep 100001` claims to be a thread of kthreadd, whose task it names
    // as its group leader.
    let kthreadd = t.task(2);
    let tgid_at = t.task_field(t.sleep, "tgid");
    let mut tgid = image.peek(tgid_at, 4);
    tgid.copy_from_slice(&2u32.to_le_bytes());
    image.poke(tgid_at, &tgid);
    image.poke(t.task_field(t.sleep, "group_leader"), &le(kthreadd));

    let run = leechio(&image.device(), &["ps", "--json"]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    let listed = json_lines(&run);
    let line = |pid: u32| {
        listed
            .iter()
            .find(|p| p["pid"] == pid)
            .unwrap_or_else(|| panic!("pid {pid} not listed: {}", run.stdout))
    };
    assert_eq!(line(t.shell)["ppid"], Value::Null);
    assert_eq!(line(t.sleep)["tgid"], 2);
    assert_eq!(
        line(t.sleep)["args"],
        serde_json::json!(["sleep", "100001"])
    );
    assert_eq!(line(2)["threads"], serde_json::json!([]));
    // Every other process as in the clean image.
    assert_eq!(listed.len(), t.list.processes.len());
    let expected = [
        format!(
            "leechio: parent of pid {} at {zeros:#x}: its real_parent is not a task of the pid table: ppid unknown",
            t.shell
        ),
        format!(
            "leechio: task of pid {} at {:#x}: its tgid says a thread of process 2, but it is a user task and that process a kernel thread: listed as a process of its own",
            t.sleep,
            t.task(t.sleep)
        ),
    ];
    for line in expected {
        assert!(run.stderr.contains(&line), "{line}\n{}", run.stderr);
    }
    // The table shows the parent it does not know as such.
    let run = leechio(&image.device(), &["ps"]);
    let shell = run
        .stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&t.shell.to_string()))
        .unwrap();
    assert_eq!(shell.split_whitespace().nth(1), Some("?"), "{shell}");
}

/// The owners of the notes in the ELF file at `path`.
fn note_owners(path: &Path) -> Vec<String> {
    notes(&std::fs::read(path).unwrap())
        .into_iter()
        .map(|(owner, ..)| owner)
        .collect()
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)]
fn a_vmcoreinfo_that_contradicts_the_kernel_found_is_left_out_of_a_dump() {
    let (_turn, t, image) = start();
    let k = &t.kernel;
    let dir = tempfile::tempdir().unwrap();
    let dump = |image: &Crafted, name: &str| {
        let out = dir.path().join(name);
        let run = leechio(
            &image.device(),
            &["dump", "--range", "0-0x100000", "-o", out.to_str().unwrap()],
        );
        (run, note_owners(&out))
    };
    // The clean image's dump carries the kernel's own note.
    let (run, owners) = dump(&image, "clean.elf");
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(owners, ["VMCOREINFO"]);
    // KERNELOFFSET's last digit changed: an offset that puts the
    // link-time _text off any 2 MiB boundary.
    let data = image.peek_u64(physical(k, k.symbol("vmcoreinfo_data").unwrap()));
    let text_at = physical(k, data);
    let text = image.peek(text_at, 4096);
    let key = b"\nKERNELOFFSET=";
    let line = text.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    let end = line + text[line..].iter().position(|&b| b == b'\n').unwrap();
    let digit = if text[end - 1] == b'9' { b'8' } else { b'9' };
    image.poke(text_at + end as u64 - 1, &[digit]);
    let mut value = text[line..end].to_vec();
    *value.last_mut().unwrap() = digit;
    let value = String::from_utf8(value).unwrap();
    let (run, owners) = dump(&image, "crafted.elf");
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(owners, Vec::<String>::new());
    let says = format!(
        "leechio: no VMCOREINFO note in the dump (crash and drgn need it): VMCOREINFO at {data:#x} contradicts the kernel found: it says KERNELOFFSET={value}, which puts the link-time _text at"
    );
    assert!(run.stderr.contains(&says), "{says}\n{}", run.stderr);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)]
fn maple_nodes_that_all_name_one_vma_read_it_once() {
    let (_turn, t, mut image) = start();
    let k = &t.kernel;
    // 69,905 nodes (18 MB) whose 1 Mi leaf slots all name the process's
    // first VMA; the first slot covers it.
    let first = &t.vmas(t.sleep)[0];
    let step = (u64::MAX - first.end) >> 20;
    let root = MapleNodes::of(k).build(k, &mut image, 1 << 20, |i| {
        (first.address, first.end - 1 + i * step)
    });
    image.poke(t.maple_root(t.sleep), &le(root));
    let run = leechio(&image.device(), &["maps", &t.sleep.to_string()]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    let clean = leechio(&t.clean.device(), &["maps", &t.sleep.to_string()]);
    assert_eq!(
        run.stdout.lines().collect::<Vec<_>>(),
        clean.stdout.lines().take(1).collect::<Vec<_>>()
    );
    for says in [
        format!(
            "named by {MAX_MAP_COUNT} more slot(s) of the maple tree than its own"
        ),
        format!(
            "more VMAs than the target's vm.max_map_count ({MAX_MAP_COUNT}) allows: the first {} read",
            MAX_MAP_COUNT + 1
        ),
    ] {
        assert!(run.stderr.contains(&says), "{says}\n{}", run.stderr);
    }
}

/// `NT_FILE`: the note of the files a core's process maps.
const NT_FILE: u32 = 0x4649_4c45;
/// `vm_flags` bits.
const VM_READ: u64 = 0x1;
const VM_WRITE: u64 = 0x2;
const VM_EXEC: u64 = 0x4;
const VM_MAYREAD: u64 = 0x10;
const VM_MAYWRITE: u64 = 0x20;
const VM_MAYEXEC: u64 = 0x40;

/// Anonymous VMAs of process `pid` made in free RAM, a page each from
/// 4 GiB up with a page between them, with `file(i)` mapped in each
/// (0 for none): their addresses and ranges.
fn made_vmas(
    t: &Target,
    image: &mut Crafted,
    pid: u32,
    count: u64,
    flags: u64,
    file: impl Fn(u64) -> u64,
) -> Vec<(u64, u64, u64)> {
    let k = &t.kernel;
    let size = k
        .btf()
        .size_of("vm_area_struct")
        .unwrap()
        .next_multiple_of(8);
    let at = |m| offset(k, "vm_area_struct", m) as usize;
    let mm = t.list.get(pid).unwrap().mm.unwrap();
    let base = image.alloc(count * size, 64);
    let mut made = Vec::new();
    for i in 0..count {
        let mut vma = vec![0u8; size as usize];
        let start = (1 << 32) + i * 0x2000;
        for (member, value) in [
            ("vm_start", start),
            ("vm_end", start + 0x1000),
            ("vm_mm", mm),
            ("vm_flags", flags),
            ("vm_pgoff", start >> 12),
            ("vm_file", file(i)),
        ] {
            vma[at(member)..][..8].copy_from_slice(&le(value));
        }
        image.poke(base + i * size, &vma);
        made.push((direct(k, base + i * size), start, start + 0x1000));
    }
    made
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)]
fn a_process_with_more_vmas_than_the_kernel_allows_is_cut_there() {
    let (_turn, t, mut image) = start();
    let k = &t.kernel;
    // 300,000 VMAs (46 MB), a maple tree over them.
    let flags = VM_READ | VM_WRITE | VM_MAYREAD | VM_MAYWRITE;
    let made = made_vmas(t, &mut image, t.sleep, 300_000, flags, |_| 0);
    let root = MapleNodes::of(k).build(k, &mut image, made.len() as u64, |i| {
        let (at, _, end) = made[i as usize];
        (at, end - 1)
    });
    image.poke(t.maple_root(t.sleep), &le(root));
    let run = leechio(&image.device(), &["maps", &t.sleep.to_string()]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    // The first vm.max_map_count + 1 by address, as /proc would show
    // them, and why no more.
    let expected: Vec<String> = made[..MAX_MAP_COUNT + 1]
        .iter()
        .map(|&(_, start, end)| format!("{start:08x}-{end:08x} rw-p 00000000 00:00 0 "))
        .collect();
    assert!(run.stdout.lines().eq(expected.iter().map(String::as_str)));
    let says = format!(
        "more VMAs than the target's vm.max_map_count ({MAX_MAP_COUNT}) allows: the first {} read",
        MAX_MAP_COUNT + 1
    );
    assert!(run.stderr.contains(&says), "{says}\n{}", run.stderr);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)]
fn a_maple_node_layout_with_no_pivots_is_an_error() {
    let (_turn, t, image) = start();
    let k = &t.kernel;
    // BTF whose maple_range_64 has its pivots where its slots are: no
    // room for one before them.
    let slots = offset(k, "maple_range_64", "slot");
    move_btf_member(k, &image, "maple_range_64", "pivot", slots);
    let run = leechio(&image.device(), &["maps", &t.sleep.to_string()]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert_eq!(run.stdout, "");
    let says = format!("BTF gives maple_range_64 15 pivots at {slots} and 16 slots at {slots}");
    assert!(run.stderr.contains(&says), "{says}\n{}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
}

/// The paths of the NT_FILE note of the ELF core at `path`: after the
/// count, the page size and three words per file.
fn mapped_files(path: &Path) -> Vec<String> {
    let notes = notes(&std::fs::read(path).unwrap());
    let (.., desc) = notes
        .iter()
        .find(|(owner, kind, _)| owner == "CORE" && *kind == NT_FILE)
        .expect("an NT_FILE note");
    let files = u64::from_le_bytes(desc[..8].try_into().unwrap()) as usize;
    desc[16 + files * 24..]
        .split(|&b| b == 0)
        .take(files)
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect()
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)]
fn files_under_one_path_thousands_of_levels_deep_are_cut_at_path_max() {
    let (_turn, t, mut image) = start();
    let k = &t.kernel;
    // A chain of 2,047 dentries of 255-byte names, from the top (its own
    // parent) down.
    let dentry_size = k.btf().size_of("dentry").unwrap();
    let d_name = offset(k, "dentry", "d_name");
    let name_of = |level: u64| format!("{level:04}{}", "n".repeat(251));
    let mut parent = 0;
    for level in 0..2047 {
        let at = image.alloc(dentry_size, 64);
        let name = image.alloc(256, 8);
        image.poke(name, name_of(level).as_bytes());
        let va = direct(k, at);
        for (field, value) in [
            (
                offset(k, "dentry", "d_parent"),
                if level == 0 { va } else { parent },
            ),
            (d_name + offset(k, "qstr", "name"), direct(k, name)),
            (
                offset(k, "dentry", "d_hash") + offset(k, "hlist_bl_node", "pprev"),
                va,
            ),
        ] {
            image.poke(at + field, &le(value));
        }
        image.poke(
            d_name + offset(k, "qstr", "len") + at,
            &255u32.to_le_bytes(),
        );
        parent = va;
    }
    // 3,000 files there, copies of the process's first file, each mapped
    // by a VMA of its own beside the process's own.
    let real = t.vmas(t.sleep);
    let file = real
        .iter()
        .find(|v| v.file_address != 0)
        .unwrap()
        .file_address;
    let file_size = k.btf().size_of("file").unwrap();
    let original = image.peek(physical(k, file), file_size as usize);
    let dentry_at = offset(k, "file", "f_path") + offset(k, "path", "dentry");
    let mut files = Vec::new();
    for _ in 0..3000 {
        let mut copy = original.clone();
        copy[dentry_at as usize..][..8].copy_from_slice(&le(parent));
        let at = image.alloc(file_size, 64);
        image.poke(at, &copy);
        files.push(direct(k, at));
    }
    let flags = VM_READ | VM_EXEC | VM_MAYREAD | VM_MAYEXEC;
    let made = made_vmas(t, &mut image, t.sleep, 3000, flags, |i| files[i as usize]);
    let mut all: Vec<(u64, u64, u64)> = real
        .iter()
        .map(|v| (v.address, v.start, v.end))
        .chain(made)
        .collect();
    all.sort_by_key(|&(_, start, _)| start);
    let root = MapleNodes::of(k).build(k, &mut image, all.len() as u64, |i| {
        let (at, _, end) = all[i as usize];
        (at, end - 1)
    });
    image.poke(t.maple_root(t.sleep), &le(root));

    // What fits in PATH_MAX after the mark: the 15 names nearest the file.
    let cut: String = std::iter::once("(cut)".to_string())
        .chain((2032..2047).map(|level| format!("/{}", name_of(level))))
        .collect();
    let run = leechio(&image.device(), &["maps", &t.sleep.to_string()]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    let with_cut = run
        .stdout
        .lines()
        .filter(|l| l.ends_with(&format!(" {cut}")))
        .count();
    assert_eq!(with_cut, 3000);
    assert_eq!(run.stdout.lines().count(), 3000 + real.len());
    assert_eq!(
        run.stderr
            .matches("is longer than PATH_MAX (4096 bytes)")
            .count(),
        3000
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sleep.core");
    let pid = t.sleep.to_string();
    let run = leechio(
        &image.device(),
        &["dump", "--pid", &pid, "-o", out.to_str().unwrap()],
    );
    let paths = mapped_files(&out);
    assert_eq!(
        paths.iter().filter(|p| **p == cut).count(),
        3000,
        "{}",
        run.stderr
    );
}

/// Text with no character that moves, erases or reorders what a terminal
/// shows (newlines between lines apart).
fn assert_terminal_safe(text: &str, what: &str) {
    let bidi = |c: char| matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    let bad: Vec<char> = text
        .chars()
        .filter(|&c| (c.is_control() && c != '\n') || bidi(c))
        .collect();
    assert!(bad.is_empty(), "{what}: {bad:?} in {text}");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)]
fn names_and_paths_from_the_target_are_escaped_for_the_terminal() {
    let (_turn, t, image) = start();
    let k = &t.kernel;
    let comm = |pid: u32, name: &[u8]| {
        let mut bytes = [0u8; 16];
        bytes[..name.len()].copy_from_slice(name);
        image.poke(t.task_field(pid, "comm"), &bytes);
    };
    // A line moved up and erased, then a forged one.
    comm(t.sleep, b"\x1b[1A\x1b[2K\n31337");
    // C1's CSI, a right-to-left override, a carriage return, bytes that
    // are not UTF-8, a bell.
    comm(t.pattern, b"\xc2\x9b2J\xe2\x80\xae\r\xff\x07");
    // A terminal title set, on a kernel thread.
    comm(2, b"k\x1b]0;pwn\x07");
    // The name of the file the sleeping process maps first: NEL, an
    // isolate, a colour, a line feed.
    let real = t.vmas(t.sleep);
    let file = real.iter().find(|v| v.file_address != 0).unwrap();
    let dentry = image.peek_u64(physical(
        k,
        file.file_address + offset(k, "file", "f_path") + offset(k, "path", "dentry"),
    ));
    let d_name = offset(k, "dentry", "d_name");
    let inline = physical(k, dentry + offset(k, "dentry", "d_iname"));
    let name = b"bb\xc2\x85\xe2\x81\xa7\x1b[31m\nx";
    image.poke(inline, &[name.as_slice(), &[0]].concat());
    image.poke(
        physical(k, dentry + d_name + offset(k, "qstr", "len")),
        &(name.len() as u32).to_le_bytes(),
    );
    image.poke(
        physical(k, dentry + d_name + offset(k, "qstr", "name")),
        &le(dentry + offset(k, "dentry", "d_iname")),
    );

    let ps = leechio(&image.device(), &["ps"]);
    assert!(ps.status.success(), "{}", ps.stderr);
    assert_terminal_safe(&ps.stdout, "ps");
    for shown in [
        "\\u{1b}[1A\\u{1b}[2K\\n31337",
        "\\u{9b}2J\\u{202e}\\r\u{fffd}\\u{7}",
        "[k\\u{1b}]0;pwn\\u{7}]",
    ] {
        assert!(ps.stdout.contains(shown), "{shown}\n{}", ps.stdout);
    }
    let maps = leechio(&image.device(), &["maps", &t.sleep.to_string()]);
    assert!(maps.status.success(), "{}", maps.stderr);
    assert_terminal_safe(&maps.stdout, "maps");
    let path = "bb\\u{85}\\u{2067}\\u{1b}[31m\\nx";
    assert!(maps.stdout.contains(path), "{path}\n{}", maps.stdout);
    // An error that names the process.
    let error = leechio(&image.device(), &["maps", "2"]);
    assert_eq!(error.status.code(), Some(1));
    assert_terminal_safe(&error.stderr, "maps 2");
    assert_eq!(
        error.stderr,
        "leechio: pid 2 (k\\u{1b}]0;pwn\\u{7}) is a kernel thread: it has no memory maps\n"
    );
    // Address spaces named by their processes.
    let spaces = leechio(&image.device(), &["spaces"]);
    assert!(spaces.status.success(), "{}", spaces.stderr);
    assert_terminal_safe(&spaces.stdout, "spaces");
    assert!(
        spaces
            .stdout
            .contains(&format!("{} \\u{{1b}}[1A\\u{{1b}}[2K\\n31337", t.sleep)),
        "{}",
        spaces.stdout
    );
}

/// `/proc/modules`' word for each `enum module_state` enumerator.
const MODULE_STATES: [(&str, &str); 3] = [
    ("MODULE_STATE_LIVE", "Live"),
    ("MODULE_STATE_COMING", "Loading"),
    ("MODULE_STATE_GOING", "Unloading"),
];

/// Modules made in free RAM, one per `(name, state, base)` (a state of
/// [`MODULE_STATES`]), each with sizes of its own, linked both ways into
/// the kernel's `modules` list in place of the guest's own. Every
/// offset from the kernel's BTF, by member path, for the layout the
/// kernel has: `mem[]` from 6.4, `core_layout` and `init_layout` before.
/// Their addresses, and the JSON lines `modules --json` must print.
fn craft_modules(
    k: &Kernel,
    image: &mut Crafted,
    made: &[(&str, &str, u64)],
) -> (Vec<u64>, Vec<Value>) {
    let btf = k.btf();
    let at = |path: &str| offset(k, "module", path);
    let head = k.symbol("modules").expect("kallsyms' modules");
    let (next, prev) = (
        offset(k, "list_head", "next"),
        offset(k, "list_head", "prev"),
    );
    let size = btf.size_of("module").unwrap();
    let (mut modules, mut expected) = (Vec::new(), Vec::new());
    for (i, &(name, state, base)) in made.iter().enumerate() {
        let pa = image.alloc(size, 64);
        let value = btf.enum_value(state).unwrap() as u32;
        image.poke(pa + at("state"), &value.to_le_bytes());
        image.poke(pa + at("name"), name.as_bytes());
        let put_size = |image: &Crafted, path: &str, size: u32| {
            image.poke(pa + at(path), &size.to_le_bytes());
            u64::from(size)
        };
        let total = match k.offset_of("module", "mem") {
            Ok(_) => {
                let kinds = btf.member_size("module", "mem").unwrap()
                    / btf.size_of("module_memory").unwrap();
                let text = btf.enum_value("MOD_TEXT").unwrap();
                image.poke(pa + at(&format!("mem[{text}].base")), &le(base));
                (0..kinds)
                    .map(|kind| {
                        let size = 0x1000 * (kind as u32 + 1) + i as u32;
                        put_size(image, &format!("mem[{kind}].size"), size)
                    })
                    .sum()
            }
            Err(_) => {
                image.poke(pa + at("core_layout.base"), &le(base));
                image.poke(pa + at("init_layout.base"), &le(base + 0x10_0000));
                put_size(image, "core_layout.size", 0x5000 + i as u32)
                    + put_size(image, "init_layout.size", 0x2000)
            }
        };
        let word = MODULE_STATES.iter().find(|s| s.0 == state).unwrap().1;
        let module = direct(k, pa);
        modules.push(module);
        expected.push(serde_json::json!({
            "name": name, "size": total, "base": format!("{base:#x}"),
            "state": word, "module": format!("{module:#x}"), "hidden": false,
        }));
    }
    let nodes: Vec<u64> = std::iter::once(head)
        .chain(modules.iter().map(|m| m + at("list")))
        .collect();
    for (i, &node) in nodes.iter().enumerate() {
        let n = nodes.len();
        image.poke(physical(k, node + next), &le(nodes[(i + 1) % n]));
        image.poke(physical(k, node + prev), &le(nodes[(i + n - 1) % n]));
    }
    (modules, expected)
}

/// The lines `modules --json` printed for the list, after checking the
/// rest: the guest's own modules, which a crafted list left out but the
/// module address tree still holds, each hidden and said so on stderr.
fn listed_and_guests_own_hidden(t: &Target, run: &Run) -> Vec<Value> {
    let mut lines = json_lines(run);
    // The summary last; of each module, what `craft_modules` says (the
    // taint, parameters and views are checked on the live guests).
    let summary = lines.pop().unwrap();
    assert_eq!(summary["hidden"], t.modules.len(), "{summary}");
    for line in &mut lines {
        let keys = ["name", "size", "base", "state", "module", "hidden"];
        line.as_object_mut()
            .unwrap()
            .retain(|k, _| keys.contains(&k.as_str()));
    }
    let (hidden, listed): (Vec<Value>, Vec<Value>) =
        lines.into_iter().partition(|l| l["hidden"] == true);
    let mut names: Vec<String> = hidden
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    assert_eq!(names, t.modules, "{}", run.stderr);
    for name in &t.modules {
        let said = format!("leechio: module {name} (struct module at ");
        assert!(run.stderr.contains(&said), "{}", run.stderr);
    }
    listed
}

/// `run`'s stderr without the lines of the other views of the modules
/// (hidden modules, listed ones a view lacks).
fn without_tree_lines(run: &Run) -> String {
    run.stderr
        .lines()
        .filter(|l| !l.starts_with("leechio: module ") || !l.contains("missing from: "))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)]
fn modules_crafted_into_the_list_are_shown_as_lsmod_shows_them() {
    let (_turn, t, mut image) = start();
    let k = &t.kernel;
    let made = [
        ("ext4", "MODULE_STATE_LIVE", 0xffff_ffff_c0a0_0000),
        ("virtio_net", "MODULE_STATE_COMING", 0xffff_ffff_c0b4_0000),
        (
            "ev\u{1b}]0;pwn\u{7}il",
            "MODULE_STATE_GOING",
            0xffff_ffff_c0c8_0000,
        ),
    ];
    let (_, expected) = craft_modules(k, &mut image, &made);
    let json = leechio(&image.device(), &["modules", "--json"]);
    // The guest's own modules hide now, and the live crafted one is in
    // no module address tree: said, exit 1.
    assert_eq!(json.status.code(), Some(1), "{}", json.stderr);
    assert_eq!(listed_and_guests_own_hidden(t, &json), expected);
    assert_eq!(without_tree_lines(&json), "");
    assert!(
        json.stderr.contains("module ext4 (struct module at ")
            && json.stderr.contains(
                "is live on the module list but missing from: address tree, sysfs, kset list"
            ),
        "{}",
        json.stderr
    );
    // The table, its strings escaped.
    let table = leechio(&image.device(), &["modules"]);
    assert_eq!(table.status.code(), Some(1), "{}", table.stderr);
    assert_terminal_safe(&table.stdout, "modules");
    // (A hidden guest module's parameters are indented under it.)
    let lines: Vec<&str> = table
        .stdout
        .lines()
        .filter(|l| !l.starts_with(' '))
        .collect();
    assert_eq!(lines.len(), 5 + t.modules.len(), "{}", table.stdout);
    assert!(
        lines[4..lines.len() - 1]
            .iter()
            .all(|l| l.ends_with("  HIDDEN")),
        "{}",
        table.stdout
    );
    assert!(
        lines
            .last()
            .unwrap()
            .starts_with(&format!("3 modules, {} hidden, ", t.modules.len())),
        "{}",
        table.stdout
    );
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["Module", "Size", "State", "Base", "Taint"]
    );
    for (line, want) in lines[1..].iter().zip(&expected) {
        let name = want["name"].as_str().unwrap().replace('\u{1b}', "\\u{1b}");
        let name = name.replace('\u{7}', "\\u{7}");
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            words,
            [
                name.as_str(),
                &want["size"].to_string(),
                want["state"].as_str().unwrap(),
                want["base"].as_str().unwrap()
            ],
            "{line}"
        );
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)]
fn a_module_list_that_loops_or_tears_stops_there_with_what_it_read() {
    let (_turn, t, mut image) = start();
    let k = &t.kernel;
    let made = [
        ("first", "MODULE_STATE_LIVE", 0xffff_ffff_c000_0000),
        ("second", "MODULE_STATE_LIVE", 0xffff_ffff_c010_0000),
    ];
    let (modules, expected) = craft_modules(k, &mut image, &made);
    let list = offset(k, "module", "list") + offset(k, "list_head", "next");
    // The second leads back to the first: the end from the tail finds
    // that its link is not the head's, the end from the head reads it
    // (its prev is the first) and then meets the first again, a loop.
    let node = |m: u64| m + offset(k, "module", "list");
    image.poke(physical(k, modules[1] + list), &le(node(modules[0])));
    let run = leechio(&image.device(), &["modules", "--json"]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert_eq!(listed_and_guests_own_hidden(t, &run), expected);
    let head = k.symbol("modules").unwrap();
    assert_eq!(
        without_tree_lines(&run),
        format!(
            "leechio: modules: {:#x}: the module's list node points back at {:#x}, not at {head:#x} that leads to it (a list changing while read): the walk stopped there\n\
             leechio: modules: {:#x}: module reached twice in the list (a loop, or a list changing while read): the walk stopped there\n\
             leechio: 2 item(s) could not be read; 2 modules listed\n",
            modules[1],
            node(modules[0]),
            modules[0]
        )
    );
    image.poke(physical(k, modules[1] + list), &le(head));
    // The first leads to memory past the end of RAM: that end stops
    // there, the other reads the second and meets the first.
    let outside = direct(k, 1 << 40);
    image.poke(physical(k, modules[0] + list), &le(outside));
    let run = leechio(&image.device(), &["modules", "--json"]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert_eq!(listed_and_guests_own_hidden(t, &run), expected);
    let unreadable = outside - offset(k, "module", "list");
    let stderr = without_tree_lines(&run);
    assert!(
        stderr.starts_with(&format!("leechio: modules: {unreadable:#x}: module: ")),
        "{}",
        run.stderr
    );
    assert!(
        stderr.ends_with("leechio: 1 item(s) could not be read; 2 modules listed\n"),
        "{}",
        run.stderr
    );
}

/// Where the text of the log record that starts with `start` lies in the
/// image (its block's id is the 8 bytes before), found in the ring's text.
fn log_text(k: &Kernel, image: &Crafted, start: &[u8]) -> u64 {
    let prb = image.peek_u64(physical(k, k.symbol("prb").unwrap()));
    let ring = |path: &str| physical(k, prb + offset(k, "printk_ringbuffer", path));
    let data = physical(k, image.peek_u64(ring("text_data_ring.data")));
    let bits = image.peek(ring("text_data_ring.size_bits"), 4)[0];
    let text = image.peek(data, 1 << bits);
    let at = text
        .windows(start.len())
        .position(|w| w == start)
        .unwrap_or_else(|| panic!("no log record starts {start:?}"));
    data + at as u64
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)]
fn the_kernels_names_and_log_are_escaped_and_torn_records_named_not_shown() {
    let (_turn, t, image) = start();
    let k = &t.kernel;
    let uts = physical(k, k.symbol("init_uts_ns").unwrap()) + offset(k, "uts_namespace", "name");
    let field = |name: &str| uts + offset(k, "new_utsname", name);
    // A host name that sets the terminal's title; a domain name with no
    // NUL in its 65 bytes.
    image.poke(field("nodename"), b"h\x1b]0;pwn\x07\0");
    image.poke(field("domainname"), &[b'x'; 65]);
    // A writer caught updating the timekeeper: its count odd (the
    // anonymous struct of 6.1, its count first).
    let tk = physical(k, k.symbol("tk_core").unwrap());
    let sequence = image.peek(tk, 4);
    image.poke(tk, &[sequence[0] | 1]);
    let run = leechio(&image.device(), &["system", "--no-cache"]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert_terminal_safe(&run.stdout, "system");
    assert!(
        run.stdout.contains("Nodename     h\\u{1b}]0;pwn\\u{7}\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("Domainname   unknown\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("Boot time    unknown\n"),
        "{}",
        run.stdout
    );
    let why = "the timekeeper was being updated while read (sequence";
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 4, "{}", run.stderr);
    assert_eq!(
        lines[0],
        "leechio: system: domainname: new_utsname.domainname has no NUL in its 65 bytes: not a name"
    );
    for (line, key) in lines[1..].iter().zip(["boot_time", "uptime", "clock"]) {
        assert!(
            line.starts_with(&format!("leechio: system: {key}: {why}")),
            "{line}"
        );
    }

    // The log: a record whose text clears the screen, one whose text block
    // holds another record's id (overwritten while read).
    let banner = log_text(k, &image, b"Linux version ");
    image.poke(banner, b"\x1b[2J\x07");
    let command_line = log_text(k, &image, b"Command line: ");
    let id = image.peek_u64(command_line - 8);
    image.poke_u64(command_line - 8, id + 1);
    let run = leechio(&image.device(), &["dmesg", "--no-cache"]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    // Tabs stay, as dmesg prints them (the kernel indents with them).
    assert_terminal_safe(&run.stdout.replace('\t', " "), "dmesg");
    let first = run.stdout.lines().next().unwrap();
    assert!(
        first.starts_with("[    0.000000] \\u{1b}[2J\\u{7} version "),
        "{first}"
    );
    assert!(!run.stdout.contains("Command line: "), "{}", run.stdout);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{}", run.stderr);
    assert!(
        lines[0].ends_with(&format!(
            "its text block belongs to record {}: overwritten while read, or garbage",
            id + 1
        )),
        "{}",
        lines[0]
    );
    assert!(lines[1].starts_with("leechio: 1 record(s) or structure(s) could not be read;"));
}

/// `leechio check` on views a rootkit or a torn target leaves: a process
/// taken out of the pid table is named with the views that still have it;
/// a task list that loops, a thread group with a wild link and garbage
/// for the count of CPUs are cut and named, and no absence from them is
/// claimed; every run ends within the deadline and the memory cap.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)]
fn check_names_a_task_out_of_the_pid_table_and_cuts_views_that_loop_or_hold_garbage() {
    let (_turn, t, image) = start();
    let k = &t.kernel;
    let sleep = t.task(t.sleep);
    // `sleep 100001`'s pid names no task.
    let thread_pid = image.peek_u64(t.task_field(t.sleep, "thread_pid"));
    let first = physical(k, thread_pid + offset(k, "pid", "tasks[0].first"));
    image.poke_u64(first, 0);
    let run = leechio(&image.device(), &["check"]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert_eq!(run.stderr, "");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        lines[0],
        format!(
            "pid {}  sleep  task {sleep:#x}  in: task list, thread group; missing from: pid table",
            t.sleep
        )
    );
    assert!(lines[1].starts_with("1 task hides: "), "{}", run.stdout);
    assert_eq!(lines.len(), 2);
    image.poke_u64(first, sleep + offset(k, "task_struct", "pid_links[0]"));

    // The task list's third process leads back to its first (init_task's
    // own links stay: the kernel is found by them): the end from the head
    // meets the first again, the end from the tail the third (read by the
    // other end: done). The pattern process's group head leads nowhere;
    // nr_cpu_ids is all ones.
    let head = k.init_task() + offset(k, "task_struct", "tasks");
    let first = image.peek_u64(physical(k, head));
    let third = image.peek_u64(physical(k, image.peek_u64(physical(k, first))));
    image.poke_u64(physical(k, third), first);
    let signal = image.peek_u64(t.task_field(t.pattern, "signal"));
    let group = signal + offset(k, "signal_struct", "thread_head");
    image.poke_u64(physical(k, group), 0x40);
    let cpus = k.symbol("nr_cpu_ids").unwrap();
    image.poke(physical(k, cpus), &[0xff; 4]);
    let run = leechio(&image.device(), &["check", "--json"]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    let lines = json_lines(&run);
    assert_eq!(lines.len(), 1, "{}", run.stdout);
    assert_eq!(lines[0]["hidden"], 0);
    assert_eq!(lines[0]["failed"], 3, "{}", run.stderr);
    assert_eq!(lines[0]["run_queues"], 0);
    let task_of = |node: u64| node - offset(k, "task_struct", "tasks");
    let expected = [
        format!("leechio: thread group at {group:#x}: the list's next link is 0x40, no kernel address: the walk stopped there"),
        format!("leechio: run queue at {cpus:#x}: nr_cpu_ids is 4294967295, not a count of CPUs this kernel is built for (1 to 8192): no run queue read"),
        format!("leechio: task list at {:#x}: task reached twice in the list (a loop, or a list changing while read): the walk stopped there", task_of(first)),
    ];
    let mut got: Vec<&str> = run.stderr.lines().collect();
    got.sort_unstable();
    let mut want: Vec<&str> = expected.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(got, want, "{}", run.stderr);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)]
fn impossible_sockets_and_looping_address_lists_are_failures_not_rows() {
    let (_turn, t, image) = start();
    let k = &t.kernel;
    let clean = k.sockets();
    assert!(clean.failed.is_empty(), "{:?}", clean.failed);
    let listed = clean.sockets.iter().filter(|s| s.is_listed()).count();
    let at_port = |port: u16, protocol: Protocol| {
        clean
            .sockets
            .iter()
            .find(|s| s.local.port() == port && s.protocol == protocol && s.is_listed())
            .unwrap()
    };
    // The IPv4 listener in a state TCP has not; the UDP socket on 7003 of
    // a family the kernel has not.
    let common = offset(k, "sock", "__sk_common");
    let listener = at_port(7001, Protocol::Tcp);
    let udp = at_port(7003, Protocol::Udp);
    assert_eq!(listener.state, TCP_LISTEN);
    let state = listener.sock + common + offset(k, "sock_common", "skc_state");
    image.poke(physical(k, state), &[99]);
    let family = udp.sock + common + offset(k, "sock_common", "skc_family");
    image.poke(physical(k, family), &45u16.to_le_bytes());
    let run = leechio(&image.device(), &["sockets", "--json"]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert_eq!(json_lines(&run).len(), listed - 2, "{}", run.stdout);
    let mut errors: Vec<&str> = run.stderr.lines().collect();
    errors.sort_unstable();
    let mut want = [
        format!(
            "leechio: sockets: {:#x}: a tcp socket in state 99, which tcp has not",
            listener.sock
        ),
        format!(
            "leechio: sockets: {:#x}: a udp socket of family 45, not 2 as its protocol has",
            udp.sock
        ),
        "leechio: sockets: 2 item(s) could not be read".to_string(),
    ];
    want.sort_unstable();
    assert_eq!(errors, want);

    // lo's first IPv4 address leads back to itself; dummy0 named to set
    // the terminal's title.
    let devices = k.interfaces();
    assert!(devices.failed.is_empty(), "{:?}", devices.failed);
    let device = |name: &str| devices.interfaces.iter().find(|i| i.name == name).unwrap();
    let lo = device("lo").device;
    let in_device = image.peek_u64(physical(k, lo + offset(k, "net_device", "ip_ptr")));
    let first = image.peek_u64(physical(k, in_device + offset(k, "in_device", "ifa_list")));
    image.poke_u64(
        physical(k, first + offset(k, "in_ifaddr", "ifa_next")),
        first,
    );
    let dummy = device("dummy0").device;
    image.poke(
        physical(k, dummy + offset(k, "net_device", "name")),
        b"\x1b]0;owned\x07\0",
    );
    let run = leechio(&image.device(), &["interfaces"]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert_terminal_safe(&run.stdout, "interfaces");
    assert!(
        run.stdout.contains(": \\u{1b}]0;owned\\u{7}: <"),
        "{}",
        run.stdout
    );
    assert_eq!(
        run.stdout
            .matches("    inet 127.0.0.1/8 scope host lo\n")
            .count(),
        1,
        "{}",
        run.stdout
    );
    assert_eq!(
        run.stderr,
        format!(
            "leechio: interfaces: {first:#x}: IPv4 address reached twice (a loop, or a list changing while read): the walk stopped there\n\
             leechio: interfaces: 1 item(s) could not be read\n"
        )
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)] // Miri: runs the binary on a guest's image
fn a_cached_file_of_absurd_size_whose_page_array_turns_back_is_cut_and_named() {
    let (_turn, t, image) = start();
    let k = &t.kernel;
    let listed = k.cached_files();
    let file = listed
        .files
        .iter()
        .find(|f| f.path.as_deref() == Ok("/leechio-cache/pages.txt"))
        .expect("the guest's pages.txt");
    // A size of 1 TiB; the page array's node (its 8 pages) made one of
    // shift 6 whose slot 0 names the node itself (a loop) and whose slot
    // 1 names a folio of 64 pages at an odd frame (which no folio of 64
    // pages has), the rest emptied.
    const SIZE: u64 = 1 << 40;
    image.poke_u64(
        physical(k, file.address + offset(k, "inode", "i_size")),
        SIZE,
    );
    let head_at =
        file.mapping + offset(k, "address_space", "i_pages") + offset(k, "xarray", "xa_head");
    let head = image.peek_u64(physical(k, head_at));
    assert_eq!(head & 3, 2, "pages.txt's page array is no node");
    let node = head - 2;
    let slots = node + offset(k, "xa_node", "slots");
    let vmemmap = image.peek_u64(physical(k, k.symbol("vmemmap_base").unwrap()));
    let page = k.btf().size_of("page").unwrap();
    let first = image.peek_u64(physical(k, slots));
    let odd = vmemmap + (((first - vmemmap) / page) | 1) * page;
    image.poke(physical(k, node + offset(k, "xa_node", "shift")), &[6]);
    image.poke_u64(physical(k, slots), head);
    image.poke_u64(physical(k, slots + 8), odd);
    for slot in 2..8 {
        image.poke_u64(physical(k, slots + slot * 8), 0);
    }
    let device = image.device();
    let run = leechio(&device, &["cache", "ls", "--json", "--no-cache"]);
    let lines = json_lines(&run);
    let line = lines
        .iter()
        .find(|l| l["path"] == "/leechio-cache/pages.txt")
        .unwrap_or_else(|| panic!("{}", run.stdout));
    assert_eq!(line["size"], SIZE);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pages.txt");
    let run = leechio(
        &device,
        &[
            "cache",
            "cat",
            "/leechio-cache/pages.txt",
            "-o",
            out.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(run.status.code(), Some(3), "{}", run.stderr);
    let [summary] = &json_lines(&run)[..] else {
        panic!("{}", run.stdout)
    };
    assert_eq!(summary["complete"], false);
    assert_eq!(summary["pages_read"], 0);
    assert_eq!(
        summary["missing_pages"],
        serde_json::json!([[0, SIZE / 4096]])
    );
    let failed: Vec<&str> = summary["failed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(failed.len(), 2, "{failed:?}");
    assert!(
        failed[0].contains("xa_node reached again from slot 0"),
        "{failed:?}"
    );
    let folio = "of a folio of 64 pages lies past the end of memory or out of its alignment";
    assert!(failed[1].contains(folio), "{failed:?}");
    // The file is that size, all of it a hole.
    let meta = std::fs::metadata(&out).unwrap();
    assert_eq!(meta.len(), SIZE);
    assert_eq!(std::os::unix::fs::MetadataExt::blocks(&meta), 0);
}

/// A system-call table entry rewritten to garbage, and the ftrace list
/// led through a callback in free RAM that links to itself: both
/// pointers reported (the callback once), the loop cut and said, exit 1,
/// within the deadline and memory cap.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)]
fn hooks_name_a_rewritten_system_call_and_cut_an_ftrace_list_that_loops() {
    let (_turn, t, mut image) = start();
    let k = &t.kernel;
    let symbols = k.kallsyms().unwrap();
    let address = |name: &str| symbols.iter().find(|(n, _)| n == name).unwrap().1;
    let clean = leechio(&image.device(), &["hooks"]);
    assert_eq!(clean.status.code(), Some(0), "{}", clean.stderr);
    let checked = clean
        .stdout
        .trim_start_matches("0 pointing outside; checked: ");
    let slot = address("sys_call_table") + 8 * 3;
    image.poke_u64(physical(k, slot), 0x4141_4141_4141_4141);
    let pa = image.alloc(256, 64);
    let ops = direct(k, pa);
    let func = direct(k, 0x1000);
    image.poke_u64(pa + offset(k, "ftrace_ops", "func"), func);
    image.poke_u64(pa + offset(k, "ftrace_ops", "next"), ops);
    image.poke_u64(physical(k, address("ftrace_ops_list")), ops);
    let run = leechio(&image.device(), &["hooks"]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    let tail = ": outside the kernel's text and every module's";
    assert_eq!(
        run.stdout,
        format!(
            "sys_call_table[3] at {slot:#x} points to 0x4141414141414141 (unknown){tail}\n\
             ftrace_ops_list[0] at {ops:#x} points to {func:#x} (unknown){tail}\n\
             2 pointing outside; checked: {}",
            checked.replace("ftrace_ops_list 0", "ftrace_ops_list 1")
        )
    );
    assert!(
        run.stderr.contains(&format!(
            "leechio: hooks: {ops:#x}: the ftrace list loops back here; cut\n"
        )),
        "{}",
        run.stderr
    );
}
