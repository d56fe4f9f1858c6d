//! The memory maps of a live Linux guest's processes, and of a memory
//! image of it, read from kernel memory with no profile, against what the
//! guest's own /proc/PID/maps said at boot (its oracle): every VMA's
//! start, end, permissions, offset, device, inode and path.

mod common;

use common::linux::engine;
use common::qemu::oracle::GuestMap;
use common::qemu::{shared_guest, Guest, GuestKernel, GuestOptions};
use leechio::linux::{CacheLocation, Hints, Kernel, Vma};
use leechio::{Call, DeviceConfig, LeechCore, Memory};

/// Read calls of one process's maps besides its maple tree's levels: the
/// `mm_struct`, the VMAs, their files, then two levels of dentries (every
/// file the test processes map is /bin/NAME on the root file system; the
/// mount, inode, super block and special mappings' names are read beside
/// them).
const CALLS_BESIDE_THE_TREE: u64 = 5;
/// `MT_FLAGS_HEIGHT_MASK` of `maple_tree.ma_flags`: the tree's height,
/// from bit 2.
const HEIGHT_MASK: u64 = 0x7c;

fn find(mem: &Memory) -> Kernel {
    let hints = Hints {
        cache: CacheLocation::Off,
        ..Hints::default()
    };
    Kernel::find(mem, &hints).unwrap()
}

/// What /proc/PID/maps says of `vma`.
fn as_proc_says(vma: &Vma) -> GuestMap {
    GuestMap {
        start: vma.start,
        end: vma.end,
        perms: vma.flags.perms(),
        offset: vma.offset(),
        device: format!("{:02x}:{:02x}", vma.major(), vma.minor()),
        inode: vma.inode,
        path: vma.path().to_string(),
    }
}

/// The height of the maple tree of `mm`, as the guest's monitor reads it
/// from `ma_flags`.
fn tree_height(guest: &Guest, kernel: &Kernel, mm: u64) -> u64 {
    let at = kernel.offset_of("mm_struct", "mm_mt").unwrap()
        + kernel.offset_of("maple_tree", "ma_flags").unwrap();
    let flags = guest.x(mm + at, 1).expect("the monitor reads ma_flags")[0];
    (flags & HEIGHT_MASK) >> 2
}

/// The maps of every process the oracle lists, one by one and then all
/// together, against the oracle, with their exact read calls.
fn check_maps(guest: &Guest, mem: &Memory, device: &LeechCore, kernel: &Kernel) {
    let list = kernel.processes();
    let pids: Vec<u32> = guest.oracle().maps.keys().copied().collect();
    let mms: Vec<u64> = pids
        .iter()
        .map(|&pid| {
            let process = list.get(pid).unwrap_or_else(|| panic!("no process {pid}"));
            process.mm.expect("a user process has an mm")
        })
        .collect();
    let mut heights = Vec::new();
    for (&pid, &mm) in pids.iter().zip(&mms) {
        let before = device.call_count(Call::ReadScatter);
        let vmas = kernel.vmas(mm);
        let calls = device.call_count(Call::ReadScatter) - before;
        assert_eq!(vmas.failed, [], "pid {pid}");
        let found: Vec<GuestMap> = vmas.vmas.iter().map(as_proc_says).collect();
        assert_eq!(found, guest.maps(pid), "pid {pid}");
        let height = tree_height(guest, kernel, mm);
        eprintln!(
            "pid {pid}: {} VMAs, tree of {height} levels, {calls} read calls",
            found.len()
        );
        assert_eq!(calls, CALLS_BESIDE_THE_TREE + height, "pid {pid}");
        heights.push(height);
    }
    // Read together, the processes share every batch.
    let before = device.call_count(Call::ReadScatter);
    let all = mem.block_on(futures::future::join_all(
        mms.iter().map(|&mm| kernel.vmas_async(mm)),
    ));
    let calls = device.call_count(Call::ReadScatter) - before;
    for (pid, vmas) in pids.iter().zip(&all) {
        let found: Vec<GuestMap> = vmas.vmas.iter().map(as_proc_says).collect();
        assert_eq!(found, guest.maps(*pid), "pid {pid}");
    }
    let tallest = heights.iter().max().copied().unwrap_or(0);
    eprintln!("{} processes together: {calls} read calls", pids.len());
    assert_eq!(calls, CALLS_BESIDE_THE_TREE + tallest);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn maps_of_a_live_guest_as_its_proc_says() {
    let guest = shared_guest();
    let (mem, device) = engine(guest.open());
    let _paused = guest.pause();
    let kernel = find(&mem);
    check_maps(&guest, &mem, &device, &kernel);
    // The pattern process: a read-write half and a read-only half.
    let pattern = guest.pattern();
    let list = kernel.processes();
    let mm = list.get(pattern.pid).unwrap().mm.unwrap();
    let vmas = kernel.vmas(mm);
    let halves: Vec<(u64, u64, String)> = pattern
        .halves()
        .iter()
        .map(|half| {
            let vma = vmas
                .vmas
                .iter()
                .find(|v| v.start == half.start)
                .expect("a VMA per half");
            (vma.start, vma.end, vma.flags.perms())
        })
        .collect();
    let [rw, ro] = pattern.halves();
    assert_eq!(
        halves,
        [
            (rw.start, rw.end, "rw-p".to_string()),
            (ro.start, ro.end, "r--p".to_string())
        ]
    );
}

/// Checks the maps of a guest booted with `options`.
fn check_a_guest_booted_with(options: GuestOptions) {
    let guest = Guest::start_with(options);
    let (mem, device) = engine(guest.open());
    let _paused = guest.pause();
    let kernel = find(&mem);
    check_maps(&guest, &mem, &device, &kernel);
}

/// With KASLR, on a CPU with 5-level paging on (`-cpu max`).
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn maps_with_5_level_paging_and_kaslr_on() {
    check_a_guest_booted_with(GuestOptions {
        kaslr: true,
        la57: true,
        ..GuestOptions::default()
    });
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn maps_of_another_build_with_other_struct_layouts() {
    check_a_guest_booted_with(GuestOptions {
        kernel: GuestKernel::Cloud,
        ..GuestOptions::default()
    });
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn maps_of_a_memory_image_of_the_guest() {
    let guest = shared_guest();
    let dir = tempfile::tempdir().unwrap();
    let _paused = guest.pause();
    let path = dir.path().join("guest.raw");
    std::fs::write(&path, guest.pmemsave(0, guest.memory().bytes())).unwrap();
    let device = LeechCore::open(&DeviceConfig::new(format!("file://{}", path.display()))).unwrap();
    let (mem, device) = engine(device);
    let kernel = find(&mem);
    check_maps(&guest, &mem, &device, &kernel);
}
