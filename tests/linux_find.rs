//! Finding the kernel of a live Linux guest, and of a memory image of it,
//! with no configuration, against what the guest and QEMU's monitor say:
//! the guest prints `_text` and `init_top_pgt` from its /proc/kallsyms, and
//! the monitor translates through the CPU's own page tables.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::qemu::{shared_guest, Guest};
use leechio::linux::{CacheLocation, FindError, Hints, Kernel, Source};
use leechio::{Call, DeviceConfig, EngineConfig, LeechCore, Memory};

/// Device calls a search may take (it takes 10 on the test guest: low
/// memory, three levels of tables, the read-only data, init_task and the
/// checks it leads to).
const SEARCH_CALLS: u64 = 14;

fn engine(device: LeechCore) -> (Memory, Arc<LeechCore>) {
    let device = Arc::new(device);
    (
        Memory::with_config(device.clone(), EngineConfig::default()),
        device,
    )
}

fn no_cache() -> Hints {
    Hints {
        cache: CacheLocation::Off,
        ..Hints::default()
    }
}

/// Finds the kernel, and the read calls it took.
fn find(mem: &Memory, device: &LeechCore, hints: &Hints) -> (Result<Kernel, FindError>, u64) {
    let before = device.call_count(Call::ReadScatter);
    let kernel = Kernel::find(mem, hints);
    (kernel, device.call_count(Call::ReadScatter) - before)
}

/// Bytes at a guest virtual address, through the monitor.
fn monitor_bytes(guest: &Guest, va: u64, len: usize) -> Vec<u8> {
    let words = guest.x(va, len.div_ceil(8)).expect("monitor reads the address");
    let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    bytes.truncate(len);
    bytes
}

/// Every value the kernel gives, against the guest's and the monitor's.
fn check_against_guest(kernel: &Kernel, guest: &Guest) {
    assert_eq!(kernel.virtual_base(), guest.kernel_text());
    assert_eq!(kernel.symbol("init_top_pgt"), Some(guest.init_top_pgt()));
    assert_eq!(kernel.dtb(), guest.kernel_dtb());
    assert_eq!(guest.gva2gpa(guest.kernel_text()), Some(kernel.physical_base()));
    // The direct map: the monitor sees physical P at base + P.
    let p = kernel.physical_base();
    assert_eq!(guest.gva2gpa(kernel.direct_map_base() + p), Some(p));
    assert_eq!(guest.gva2gpa(kernel.direct_map_base()), Some(0));
    // init_task's comm, read by the monitor at BTF's offset.
    let comm = kernel.offset_of("task_struct", "comm").unwrap();
    assert_eq!(&monitor_bytes(guest, kernel.init_task() + comm, 10), b"swapper/0\0");
    // init_pid_ns: init_task.thread_pid->numbers[0].ns, by the monitor.
    let thread_pid = kernel.offset_of("task_struct", "thread_pid").unwrap();
    let pid = guest.x(kernel.init_task() + thread_pid, 1).unwrap()[0];
    let ns = kernel.offset_of("pid", "numbers").unwrap() + kernel.offset_of("upid", "ns").unwrap();
    assert_eq!(guest.x(pid + ns, 1).unwrap()[0], kernel.init_pid_ns());
    // The BTF header where the kernel says, and its banner.
    let (btf, len) = kernel.btf_location().expect("BTF from memory");
    let header = monitor_bytes(guest, btf, 24);
    assert_eq!(&header[..4], &[0x9f, 0xeb, 1, 0]);
    assert_eq!(len as usize, kernel.btf().len());
    assert_eq!(Some(btf), kernel.symbol("__start_BTF"));
    let banner = kernel.banner().as_bytes();
    assert_eq!(monitor_bytes(guest, kernel.symbol("linux_banner").unwrap(), banner.len()), banner);
    assert!(kernel.banner().starts_with("Linux version "), "{}", kernel.banner());
    assert!(guest.serial_log().contains(kernel.release()), "release {}", kernel.release());
}

#[test]
fn finds_the_kernel_of_a_live_guest() {
    let guest = shared_guest();
    let (mem, device) = engine(guest.open());
    let _paused = guest.pause();
    let (kernel, calls) = find(&mem, &device, &no_cache());
    let kernel = kernel.unwrap();
    eprintln!("found {} in {calls} read calls", kernel.banner());
    check_against_guest(&kernel, &guest);
    assert_eq!(kernel.source(), Source::Search);
    assert!(calls <= SEARCH_CALLS, "{calls} read calls");
}

#[test]
fn finds_the_kernel_in_a_memory_image_of_the_guest() {
    let guest = shared_guest();
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("guest.raw");
    let _paused = guest.pause();
    std::fs::write(&image, guest.pmemsave(0, guest.memory().bytes())).unwrap();
    let (mem, device) = engine(open_image(&image));
    let (kernel, calls) = find(&mem, &device, &no_cache());
    let kernel = kernel.unwrap();
    check_against_guest(&kernel, &guest);
    assert!(calls <= SEARCH_CALLS, "{calls} read calls");
}

fn open_image(path: &Path) -> LeechCore {
    LeechCore::open(&DeviceConfig::new(&format!("file://{}", path.display()))).unwrap()
}
