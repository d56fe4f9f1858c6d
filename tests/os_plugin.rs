//! The OS plugin `linux_btf` as memflow's tools load it: from the release
//! build folder through memflow's own `Inventory`, chained on the
//! `leechcore` connector, against a memory image of the test guest and
//! the live guest; checked against what the guest's own `/proc` said (its
//! oracle), the bytes its pattern process holds, and LeechCore's count of
//! read calls.
//!
//! The plugin is built separately (`make plugin`). Tests run one at a
//! time: LeechCore's call counters are the process's.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};

use common::plugin::{
    check_kernel_symbols, connect_with_cache, inventory, logged, mapped_files, page_ranges,
    view_read_split,
};
use common::qemu::oracle::{MODULE_SYMBOLS, ZOMBIE_EXIT_STATUS};
use common::qemu::{shared_guest, Guest};
use leechio::{Call, DeviceConfig, LeechCore};
use memflow::cglue::CTup2;
use memflow::prelude::v1::*;

/// The guest's 32-bit process (`scripts/guest-32bit.S`).
const COMPAT_COMM: &str = "leechio-32bit";

/// One test at a time (LeechCore's counters are shared).
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A memory image of the shared guest, made once.
struct GuestImage {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

fn image() -> &'static GuestImage {
    static IMAGE: OnceLock<GuestImage> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let guest = shared_guest();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("guest.raw");
        let bytes = {
            let _paused = guest.pause();
            guest.pmemsave(0, guest.memory().bytes())
        };
        std::fs::write(&path, bytes).unwrap();
        GuestImage { _dir: dir, path }
    })
}

/// `leechcore` over `device` with memflow's page cache off, so each batch
/// the OS sends is one LeechCore call.
fn connector(device: &str) -> ConnectorInstanceArcBox<'static> {
    connect_with_cache(&format!("leechcore:\"{device}\""), false)
}

/// The OS plugin over `conn` with `args` (what follows `linux_btf:`).
fn os(conn: ConnectorInstanceArcBox<'static>, args: &str) -> Result<OsInstanceArcBox<'static>> {
    let args: OsArgs = args.parse()?;
    inventory().instantiate_os("linux_btf", Some(conn), Some(&args))
}

/// The error of an OS that must not start.
fn refused(result: Result<OsInstanceArcBox<'static>>) -> Error {
    match result {
        Ok(_) => panic!("the OS started"),
        Err(e) => e,
    }
}

/// LeechCore's read calls, through its `existing` device (which shares the
/// counters of the device the plugin opened).
struct Calls(LeechCore);

impl Calls {
    fn new() -> Calls {
        Calls(LeechCore::open(&DeviceConfig::new("existing")).unwrap())
    }

    fn now(&self) -> u64 {
        self.0.call_count(Call::ReadScatter)
    }
}

/// Checks a process list against the guest's oracle: every user process
/// it lists is there with its name, command line, state and executable;
/// no user process it does not list is; kernel threads may differ by a
/// few (they come and go).
fn check_processes(list: &[ProcessInfo], guest: &Guest, arch: ArchitectureIdent) {
    let oracle = guest.oracle();
    let by_pid: BTreeMap<u32, &ProcessInfo> = list.iter().map(|p| (p.pid, p)).collect();
    assert_eq!(by_pid.len(), list.len(), "a pid listed twice");
    let mut kernel_threads_missing = Vec::new();
    for t in oracle.processes() {
        let Some(p) = by_pid.get(&t.pid) else {
            assert!(
                t.kernel_thread,
                "user process {} ({}) not listed",
                t.pid, t.comm
            );
            kernel_threads_missing.push(t.pid);
            continue;
        };
        assert_eq!(p.name.as_ref(), t.comm, "pid {}", t.pid);
        if !t.kernel_thread {
            assert_eq!(
                p.command_line.as_ref(),
                t.cmdline.join(" "),
                "pid {}",
                t.pid
            );
        }
        let state = match t.state {
            'Z' => ProcessState::Dead(ZOMBIE_EXIT_STATUS),
            _ => ProcessState::Alive,
        };
        assert_eq!(p.state, state, "pid {} ({})", t.pid, t.comm);
        let proc_arch = match t.comm == COMPAT_COMM {
            true => ArchitectureIdent::X86(32, false),
            false => arch,
        };
        assert_eq!(
            (p.sys_arch, p.proc_arch),
            (arch, proc_arch),
            "pid {}",
            t.pid
        );
        assert_eq!(p.dtb2, Address::invalid());
        // The executable: what /proc/PID/maps maps first, where the guest
        // printed the maps.
        if let Some(first) = oracle
            .maps
            .get(&t.pid)
            .and_then(|maps| maps.iter().find(|m| m.path.starts_with('/')))
        {
            assert_eq!(p.path.as_ref(), first.path, "pid {}", t.pid);
        }
    }
    let extra: Vec<&ProcessInfo> = list
        .iter()
        .filter(|p| oracle.task(p.pid).is_none())
        .collect();
    assert!(
        extra
            .iter()
            .all(|p| p.command_line.is_empty() && p.path.is_empty()),
        "user processes the guest did not list: {extra:?}"
    );
    assert!(
        extra.len() <= 4 && kernel_threads_missing.len() <= 4,
        "kernel threads listed but not in the oracle: {extra:?}; in the oracle but not listed: {kernel_threads_missing:?}"
    );
}

#[test]
#[cfg_attr(miri, ignore)] // Miri: processes and files
fn the_connectors_library_holds_the_os_plugin_and_its_help_lists_its_arguments() {
    let _one = one_at_a_time();
    let mut inv = inventory();
    assert_eq!(inv.available_os(), vec!["linux_btf".to_string()]);
    let help = inv.os_help("linux_btf").unwrap();
    for key in ["dtb", "kernel_base", "paging", "btf", "kernel_cache"] {
        assert!(
            help.contains(&format!("  {key} ")),
            "{key} missing from {help}"
        );
    }
    assert!(help.contains("no profile"), "{help}");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)] // Miri: processes and files
fn bad_arguments_no_connector_and_no_kernel_are_one_clear_error() {
    let _one = one_at_a_time();
    let image = common::Image::new(16 << 20);
    let err = refused(os(connector(&image.device()), "colour=red"));
    assert_eq!(err.1, ErrorKind::Configuration);
    assert!(logged(
        "linux_btf: unknown argument `colour`; valid arguments: dtb, kernel_base, paging, btf, kernel_cache"
    ));
    let args: OsArgs = "".parse().unwrap();
    let err = refused(inventory().instantiate_os("linux_btf", None, Some(&args)));
    assert_eq!(err.1, ErrorKind::Configuration);
    assert!(logged("linux_btf: no connector to read the kernel from"));
    // Memory of random words holds no kernel.
    let err = refused(os(connector(&image.device()), "kernel_cache=off"));
    assert_eq!(err.1, ErrorKind::NotFound);
    assert!(logged("linux_btf: no Linux kernel found: "));
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)] // Miri: processes and files
fn lists_the_processes_of_an_image_of_the_guest_in_few_calls() {
    let image = image();
    let guest = shared_guest();
    let _one = one_at_a_time();
    let device = format!("file://{}", image.path.display());
    let cache = tempfile::tempdir().unwrap();
    let args = format!("kernel_cache=\"{}\"", cache.path().display());
    let arch = ArchitectureIdent::X86(64, false);
    let mut costs = Vec::new();
    // From nothing (an empty cache), then with the kernel known (from the
    // cache the first run wrote).
    for _ in 0..2 {
        let conn = connector(&device);
        let calls = Calls::new();
        let before = calls.now();
        let mut os = os(conn, &args).unwrap();
        let found = calls.now() - before;
        let list = os.process_info_list().unwrap();
        costs.push((found, calls.now() - before));
        check_processes(&list, &guest, arch);
    }
    eprintln!("process list: (find, total) calls from nothing and warm: {costs:?}");
    assert!(costs[0].1 <= 25, "{costs:?}");
    assert!(costs[1].1 <= 12, "{costs:?}");
}

/// The OS over the guest's image, with no kernel cache.
fn image_os() -> OsInstanceArcBox<'static> {
    os(
        connector(&format!("file://{}", image().path.display())),
        "kernel_cache=off",
    )
    .unwrap()
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)] // Miri: processes and files
fn a_process_reads_through_its_own_page_tables_a_batch_a_level() {
    let image = image();
    let guest = shared_guest();
    let _one = one_at_a_time();
    let pattern = guest.pattern();
    let os = os(
        connector(&format!("file://{}", image.path.display())),
        "kernel_cache=off",
    )
    .unwrap();
    let mut process = os.into_process_by_pid(pattern.pid).unwrap();
    assert_eq!(process.info().name.as_ref(), "leech (pat) x");
    assert_eq!(process.state(), ProcessState::Alive);
    // 1000 cold reads of 8 bytes anywhere in the pattern, in one batch:
    // one call per page-table level and one for the data.
    let mut rng = fastrand::Rng::with_seed(7);
    let words: Vec<u64> = (0..1000)
        .map(|_| rng.u64(pattern.start / 8..pattern.end / 8) * 8)
        .collect();
    let mut bufs = vec![[0u8; 8]; words.len()];
    let mut list: Vec<ReadData> = words
        .iter()
        .zip(bufs.iter_mut())
        .map(|(&va, b)| CTup2(Address::from(va), b.as_mut_slice().into()))
        .collect();
    let calls = Calls::new();
    let before = calls.now();
    process.read_raw_list(&mut list).unwrap();
    assert_eq!(calls.now() - before, 4 + 1);
    for (&va, b) in words.iter().zip(&bufs) {
        assert_eq!(b[..], pattern.bytes(va, 8)[..], "{va:#x}");
    }
    // A read across the pattern's end into its guard page (not mapped):
    // the first half read, the second reported failed.
    let mut buf = [0x55u8; 16];
    let (ok, failed) = view_read_split(&mut process, pattern.end - 8, &mut buf);
    assert_eq!((ok, failed), (vec![(0, 8)], vec![(8, 8)]));
    assert_eq!(buf[..8], pattern.bytes(pattern.end - 8, 8)[..]);
    assert_eq!(buf[8..], [0x55; 8]);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)] // Miri: processes and files
fn maps_and_mapped_files_of_processes_match_their_proc_maps() {
    let _image = image();
    let guest = shared_guest();
    let _one = one_at_a_time();
    let mut os = image_os();
    let pids: Vec<u32> = guest.oracle().maps.keys().copied().collect();
    assert_eq!(pids.len(), 4);
    for pid in pids {
        let mut process = os.process_by_pid(pid).unwrap();
        let calls = Calls::new();
        let before = calls.now();
        let ranges = process.mapped_mem_vec(0);
        let cost = calls.now() - before;
        eprintln!("maps of pid {pid}: {cost} calls");
        assert!(cost <= 10, "pid {pid}: {cost} calls");
        let got: Vec<(u64, u64, PageType)> = ranges
            .iter()
            .map(|CTup3(a, s, t)| (a.to_umem(), a.to_umem() + s, *t))
            .collect();
        assert_eq!(got, page_ranges(guest.maps(pid)), "pid {pid}");
        // One module per mapped file: its lowest mapping to its highest.
        let modules = process.module_list().unwrap();
        let got: BTreeMap<String, (u64, u64)> = modules
            .iter()
            .map(|m| {
                let base = m.base.to_umem();
                (m.path.to_string(), (base, base + m.size))
            })
            .collect();
        let want: BTreeMap<String, (u64, u64)> = mapped_files(guest.maps(pid))
            .into_iter()
            .map(|(path, start, end)| (path, (start, end)))
            .collect();
        assert_eq!(got, want, "pid {pid}");
        let primary = process.primary_module().unwrap();
        assert_eq!(primary.path.as_ref(), process.info().path.as_ref());
        assert_eq!(
            primary.name.as_ref(),
            primary.path.rsplit('/').next().unwrap()
        );
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)] // Miri: processes and files
fn the_kernel_and_its_modules_match_proc_modules_and_kallsyms() {
    let _image = image();
    let guest = shared_guest();
    let _one = one_at_a_time();
    let mut os = image_os();
    let text = guest.symbol("_text");
    let calls = Calls::new();
    let before = calls.now();
    let modules = os.module_list().unwrap();
    let cost = calls.now() - before;
    eprintln!("module list: {cost} calls");
    assert!(cost <= 10, "module list: {cost} calls");
    let loaded = guest.modules();
    assert!(loaded.len() >= 2, "the guest loaded {loaded:?}");
    let got: Vec<(String, u64, u64)> = modules
        .iter()
        .map(|m| (m.name.to_string(), m.base.to_umem(), m.size))
        .collect();
    let mut want = vec![("vmlinux".to_string(), text, os.info().size)];
    want.extend(loaded.iter().map(|m| (m.name.clone(), m.address, m.size)));
    assert_eq!(got, want);
    assert_eq!(os.info().base.to_umem(), text);
    let kernel = os.primary_module().unwrap();
    assert_eq!(kernel.base.to_umem(), text);
    // The OS's memory view is the kernel's virtual memory: the banner at
    // linux_banner is what /proc/version said.
    let version = &guest.oracle().version;
    let mut banner = vec![0u8; version.len()];
    os.as_mut_impl_memoryview()
        .expect("the OS is a memory view")
        .read_raw_into(Address::from(guest.symbol("linux_banner")), &mut banner)
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&banner), *version);

    // The kernel's exports are kallsyms: every symbol the guest printed of
    // the kernel image (not of a module) at its offset from _text.
    let exports = os.module_export_list(&kernel).unwrap();
    let by_name: BTreeMap<&str, u64> = exports
        .iter()
        .rev()
        .map(|e| (e.name.as_ref(), e.offset))
        .collect();
    assert!(exports.len() > 50_000, "{} symbols", exports.len());
    check_kernel_symbols(&guest, |name| by_name.get(name).copied());
    let sections = os.module_section_list(&kernel).unwrap();
    let text_section = sections
        .iter()
        .find(|s| s.name.as_ref() == ".text")
        .unwrap();
    assert_eq!(text_section.base.to_umem(), guest.symbol("_stext"));

    // A module's exports: what it exports, at the address kallsyms gives.
    let mut found = 0;
    for m in modules.iter().skip(1) {
        let exports = os.module_export_list(m).unwrap();
        for s in guest
            .oracle()
            .symbols
            .iter()
            .filter(|s| MODULE_SYMBOLS.contains(&s.name.as_str()))
        {
            if let Some(e) = exports.iter().find(|e| e.name.as_ref() == s.name) {
                assert_eq!(m.base.to_umem() + e.offset, s.address, "{}", s.name);
                found += 1;
            }
        }
        let sections = os.module_section_list(m).unwrap();
        let text = sections.iter().find(|s| s.name.as_ref() == ".text");
        assert_eq!(text.map(|s| s.base), Some(m.base), "{}", m.name);
    }
    // Each symbol of MODULE_SYMBOLS kallsyms listed (crc7's and
    // crc-itu-t's; dummy exports none).
    let printed = guest
        .oracle()
        .symbols
        .iter()
        .filter(|s| MODULE_SYMBOLS.contains(&s.name.as_str()))
        .count();
    assert!(
        printed >= 1,
        "the guest's modules export none of {MODULE_SYMBOLS:?}"
    );
    assert_eq!(found, printed, "module exports found");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)] // Miri: processes and files
fn a_process_that_exits_between_the_list_and_the_open_is_a_clean_error() {
    let image = image();
    let guest = shared_guest();
    let _one = one_at_a_time();
    // A writable copy of the image, whose tasks the test changes as the
    // kernel would when a process exits and its task is reused.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("guest.raw");
    std::fs::copy(&image.path, &copy).unwrap();
    let device = format!("file://file={},write=1", copy.display());
    let mut os = os(connector(&device), "kernel_cache=off").unwrap();
    // The offset of task_struct.pid, from the kernel's BTF.
    let kernel = {
        let mem = leechio::Memory::new(
            LeechCore::open(&DeviceConfig::new(format!(
                "file://{}",
                image.path.display()
            )))
            .unwrap(),
        );
        leechio::linux::Kernel::find(&mem, &common::linux::no_cache()).unwrap()
    };
    let pid_offset = kernel.offset_of("task_struct", "pid").unwrap();
    let list = os.process_info_list().unwrap();
    let sleeper = guest
        .oracle()
        .processes()
        .find(|t| t.cmdline == ["sleep", "100001"])
        .unwrap()
        .pid;
    let info = list.iter().find(|p| p.pid == sleeper).unwrap().clone();
    // Found by its task's address too.
    let by_address = os.process_info_by_address(info.address).unwrap();
    assert_eq!(
        (by_address.pid, by_address.name.as_ref()),
        (sleeper, "sleep")
    );
    let mut open = os.clone().into_process_by_info(info.clone()).unwrap();
    assert_eq!(open.state(), ProcessState::Alive);
    // The task now holds another pid: the open process says its state is
    // unknown, and opening it again fails.
    let task = info.address.to_umem();
    os.as_mut_impl_memoryview()
        .expect("the OS is a memory view")
        .write(Address::from(task + pid_offset), &(sleeper + 7000))
        .unwrap();
    assert_eq!(open.state(), ProcessState::Unknown);
    let err = match os.process_by_info(info.clone()) {
        Ok(_) => panic!("a process whose task holds another pid was opened"),
        Err(e) => e,
    };
    assert_eq!(err.1, ErrorKind::ProcessNotFound);
    assert!(logged(&format!(
        "linux_btf: process {sleeper} (sleep) is gone: its task at {task:#x} now holds pid {}",
        sleeper + 7000
    )));
    // A new list no longer has it.
    let list = os.process_info_list().unwrap();
    assert!(list.iter().all(|p| p.pid != sleeper));
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)] // Miri: processes and files
fn a_32_bit_process_is_x86_32_and_so_is_its_executable() {
    let _image = image();
    let guest = shared_guest();
    let _one = one_at_a_time();
    let task = guest
        .oracle()
        .processes()
        .find(|t| t.comm == COMPAT_COMM)
        .expect("the default guest kernel runs the 32-bit process");
    let os = image_os();
    let mut process = os.into_process_by_pid(task.pid).unwrap();
    let x86_32 = ArchitectureIdent::X86(32, false);
    assert_eq!(process.info().proc_arch, x86_32);
    assert_eq!(process.info().path.as_ref(), "/bin/leechio-32bit");
    let modules = process.module_list().unwrap();
    assert_eq!(modules.len(), 1, "{modules:?}");
    assert_eq!(
        (modules[0].path.as_ref(), modules[0].arch),
        ("/bin/leechio-32bit", x86_32)
    );
    // The module's base holds the file's first bytes: an ELF32 header.
    let mut header = [0u8; 20];
    process.read_raw_into(modules[0].base, &mut header).unwrap();
    assert_eq!(header[..5], *b"\x7fELF\x01");
    assert_eq!(
        u16::from_le_bytes([header[18], header[19]]),
        3,
        "e_machine EM_386"
    );
    assert_eq!(process.primary_module().unwrap().base, modules[0].base);
}
