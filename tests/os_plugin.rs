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

use common::plugin::{connect_with_cache, inventory, logged};
use common::qemu::oracle::ZOMBIE_EXIT_STATUS;
use common::qemu::{shared_guest, Guest};
use leechio::{Call, DeviceConfig, LeechCore};
use memflow::prelude::v1::*;

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
        assert_eq!((p.sys_arch, p.proc_arch), (arch, arch), "pid {}", t.pid);
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
