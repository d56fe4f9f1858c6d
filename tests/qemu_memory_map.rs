//! LeechCore's `qemu` device reads the guest's memory map over QMP with
//! one read after a 1 s wait: from a QEMU too busy to finish its answer in
//! that second it takes a map that ends early, without a word. The device
//! must end up with QEMU's whole map all the same.
//!
//! A live guest shows this only when the machine is loaded, so here a QMP
//! monitor of the test's own stands in for QEMU's, in front of the real
//! `leechcore.so` and its qemu plugin: it answers LeechCore (known by the
//! exact bytes of its request) with the map cut short, and anyone else with
//! all of it. The RAM file is a sparse file in /dev/shm.

mod common;

use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::qmp_monitor::{guest, RamFile, Served, MARKER};

use leechio::memflow::MemflowPhysical;
use leechio::{DeviceConfig, LeechCore, Memory, MemoryMap, MemoryRange, PageError, ScatterEntry};

const GIB: u64 = 1 << 30;

/// Opens the qemu device on a 4 GiB RAM file behind the stand-in monitor
/// and checks that it holds QEMU's whole map and reads above 4 GiB.
fn open_behind_a_monitor(served: Served) -> Arc<Served> {
    let guest = guest(served);
    let served = guest.served.clone();
    let device = LeechCore::open(&DeviceConfig::new(&guest.device))
        .unwrap_or_else(|e| panic!("LeechCore cannot open {}: {e}", guest.device));

    // LeechCore was given the map cut short.
    assert_eq!(served.cut_short.load(Ordering::SeqCst), 1);
    let r = |start, end: u64, remap| MemoryRange {
        start,
        size: end - start,
        remap,
    };
    let whole = MemoryMap::new(vec![
        r(0, 0xa_0000, 0),
        r(0x10_0000, 3 * GIB, 0x10_0000),
        r(4 * GIB, 5 * GIB, 3 * GIB),
    ])
    .unwrap();
    assert_eq!(device.memory_map().unwrap(), whole);

    // Reads above 4 GiB come from 3 GiB in the file.
    let mut buf = [0u8; 36];
    let mut entries = [ScatterEntry::new(4 * GIB + 0x1230, &mut buf[..])];
    device.read_scatter(&mut entries);
    assert_eq!(entries[0].result, Ok(()));
    assert_eq!(&buf[..MARKER.len()], &MARKER);
    served
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_memory_map_leechcore_got_cut_short_is_replaced_by_qemus_whole_map() {
    let served = open_behind_a_monitor(Served::default());
    // Asked once, before LeechCore connected.
    assert_eq!(served.whole.load(Ordering::SeqCst), 1);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn qemus_map_is_asked_again_after_opening_when_the_first_question_fails() {
    let served = open_behind_a_monitor(Served {
        errors_first: 1,
        ..Served::default()
    });
    assert_eq!(served.errors.load(Ordering::SeqCst), 1);
    assert_eq!(served.whole.load(Ordering::SeqCst), 1);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn an_os_layers_map_is_laid_over_qemus_remapping() {
    use memflow::prelude::v1::{Address, MemoryView, PhysicalMemory, PhysicalMemoryMapping};
    let guest = guest(Served::default());
    let device = LeechCore::open(&DeviceConfig::new(&guest.device)).unwrap();
    let mut phys = MemflowPhysical::new(Memory::new(device), false);
    // What memflow-win32 passes: the guest's RAM, each range at its own
    // address (it knows nothing of the RAM file).
    let os_map = [
        (0, 0x9_f000),
        (0x10_0000, 3 * GIB - 0x10_0000),
        (4 * GIB, GIB),
    ]
    .map(|(base, size)| PhysicalMemoryMapping {
        base: Address::from(base),
        size,
        real_base: Address::from(base),
    });
    phys.set_mem_map(&os_map);
    let mut buf = [0u8; MARKER.len()];
    phys.phys_view()
        .read_raw_into(Address::from(4 * GIB + 0x1230), &mut buf)
        .unwrap();
    assert_eq!(
        buf, MARKER,
        "guest-physical 4 GiB is still at 3 GiB in the file"
    );
    assert_eq!(phys.metadata().max_address.to_umem(), 5 * GIB - 1);
    // The page the OS map leaves out of the first MiB is gone.
    assert!(phys
        .phys_view()
        .read_raw_into(Address::from(0x9_f000u64), &mut buf)
        .is_err());
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_monitor_that_does_not_greet_is_refused_not_waited_for() {
    // A QMP socket whose QEMU serves another client (or is stopped): the
    // connection is accepted and nothing is said. LeechCore would wait
    // for it without end.
    let ram = RamFile::new(256 << 20);
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("qmp.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    std::thread::spawn(move || {
        let held: Vec<UnixStream> = listener.incoming().map_while(Result::ok).collect();
        drop(held);
    });
    let device = format!("qemu://shm={},qmp={}", ram.name, socket.display());
    let (done, result) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(LeechCore::open(&DeviceConfig::new(&device)).map(|_| ()));
    });
    let refused = result
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("opening still waits after 60 s")
        .unwrap_err()
        .to_string();
    assert!(refused.contains("did not greet"), "{refused}");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_ram_file_cut_short_fails_reads_instead_of_killing_the_process() {
    let guest = guest(Served::default());
    let device = LeechCore::open(&DeviceConfig::new(&guest.device)).unwrap();
    // The page of the marker, at guest-physical 4 GiB + 0x1000.
    let read = |device: &LeechCore| {
        let mut page = vec![0u8; 0x1000];
        let mut entries = [ScatterEntry::new(4 * GIB + 0x1000, &mut page[..])];
        device.read_scatter(&mut entries);
        (entries[0].result, page)
    };
    let (result, page) = read(&device);
    assert_eq!(result, Ok(()));
    assert_eq!(page[0x230..0x230 + MARKER.len()], MARKER);
    // LeechCore maps the file at the size it had: a read past its new end
    // would be SIGBUS.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&guest.ram.path)
        .unwrap()
        .set_len(GIB)
        .unwrap();
    assert_eq!(read(&device).0, Err(PageError::TargetGone));
}
