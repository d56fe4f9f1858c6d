//! End to end on a live Linux guest: LeechCore's `qemu://` device (directly
//! and through the engine) against QEMU's own monitor (`xp`, `pmemsave`).
//!
//! The guest is live and its memory changes, so every comparison runs with
//! its CPU paused (QMP `stop`, resumed on drop of the guard). Tests that can
//! share one 256 MiB guest take turns on it ([`shared_guest`]); the 4 GiB
//! guest, the killed guest and the cleanup checks boot their own.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::qemu::{process_alive, shared_guest, wait_until_removed, Guest, GuestMemory};
use common::read_words;
use futures::future::join_all;
use leechio::{Call, EngineConfig, Error, LeechCore, Memory, MemoryMap, ScatterEntry, WriteEntry};

const PAGE: u64 = 0x1000;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// Bytes compared per `pmemsave` and per LeechCore call in the whole-map
/// comparison.
const CHUNK: u64 = 16 * MIB;

/// Runs `f` on a thread and fails the test if it takes longer than `limit`:
/// a hung device call must fail the test, not stall the suite.
fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(value) => value,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what} took more than {limit:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what} panicked"),
    }
}

/// Panics at the first byte where `got` differs from `want`.
fn assert_same_bytes(addr: u64, got: &[u8], want: &[u8]) {
    assert_eq!(got.len(), want.len(), "lengths at {addr:#x}");
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "byte at {:#x} differs: LeechCore {:#04x}, monitor {:#04x}",
            addr + i as u64,
            got[i],
            want[i]
        );
    }
}

/// `len` bytes at `addr` from the monitor's `xp` (which reads whole qwords).
fn xp_bytes(guest: &Guest, addr: u64, len: usize) -> Vec<u8> {
    let first = addr & !7;
    let end = (addr + len as u64 + 7) & !7;
    let words = guest.xp(first, ((end - first) / 8) as usize);
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let at = (addr - first) as usize;
    bytes[at..at + len].to_vec()
}

/// Reads `len` bytes at `addr` page by page, in one LeechCore call.
fn read_pages(device: &LeechCore, addr: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0xa5u8; len];
    let mut entries: Vec<ScatterEntry> = buf
        .chunks_mut(PAGE as usize)
        .enumerate()
        .map(|(i, b)| ScatterEntry::new(addr + i as u64 * PAGE, b))
        .collect();
    device.read_scatter(&mut entries);
    for e in &entries {
        assert_eq!(e.result, Ok(()), "page at {:#x}", e.addr);
    }
    drop(entries);
    buf
}

/// A random page of the map, chosen in proportion to the ranges' sizes.
fn random_page(rng: &mut fastrand::Rng, map: &MemoryMap) -> u64 {
    let mut pick = rng.u64(0..map.total_size() / PAGE) * PAGE;
    for r in map.ranges() {
        if pick < r.size {
            return r.start + pick;
        }
        pick -= r.size;
    }
    unreachable!()
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn every_page_of_the_memory_map_equals_pmemsave() {
    let guest = shared_guest();
    let device = guest.open();
    let map = device.memory_map().unwrap();
    // The map is the guest's RAM as QEMU lays it out (the device checks
    // LeechCore's reading of it against QEMU's), which here ends at the RAM
    // size, and the only holes are ROM below 1 MiB.
    assert_eq!(map, guest.ram_map());
    let ram = guest.memory().bytes();
    assert_eq!(map.end(), ram, "memory map {map:?}");
    assert!(map.total_size() > ram - MIB, "memory map {map:?}");
    assert_eq!(device.max_address(), ram);

    let _paused = guest.pause();
    let calls = device.call_count(Call::ReadScatter);
    let mut chunks = 0;
    for range in map.ranges() {
        let mut at = range.start;
        while at < range.end() {
            let len = CHUNK.min(range.end() - at);
            let want = guest.pmemsave(at, len);
            let got = read_pages(&device, at, len as usize);
            assert_same_bytes(at, &got, &want);
            chunks += 1;
            at += len;
        }
    }
    assert_eq!(device.call_count(Call::ReadScatter) - calls, chunks);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn random_sub_page_entries_equal_xp() {
    let guest = shared_guest();
    let device = guest.open();
    let map = device.memory_map().unwrap();
    let mut rng = fastrand::Rng::with_seed(0x9e57);
    // Legal entries: 8..=0x1000 bytes, 4-aligned, inside one page.
    let specs: Vec<(u64, usize)> = (0..300)
        .map(|_| {
            let page = random_page(&mut rng, &map);
            let len = rng.u64(2..=PAGE / 4) * 4;
            let offset = rng.u64(0..=(PAGE - len) / 4) * 4;
            (page + offset, len as usize)
        })
        .collect();
    let _paused = guest.pause();
    let mut bufs: Vec<Vec<u8>> = specs.iter().map(|&(_, len)| vec![0xa5; len]).collect();
    let mut entries: Vec<ScatterEntry> = specs
        .iter()
        .zip(bufs.iter_mut())
        .map(|(&(addr, _), buf)| ScatterEntry::new(addr, buf))
        .collect();
    let calls = device.call_count(Call::ReadScatter);
    device.read_scatter(&mut entries);
    assert_eq!(device.call_count(Call::ReadScatter) - calls, 1);
    for e in &entries {
        assert_eq!(
            e.result,
            Ok(()),
            "entry at {:#x}+{:#x}",
            e.addr,
            e.buf.len()
        );
        assert_same_bytes(e.addr, e.buf, &xp_bytes(&guest, e.addr, e.buf.len()));
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn engine_reads_at_any_address_and_length_equal_pmemsave_in_one_call() {
    let guest = shared_guest();
    let device = Arc::new(guest.open());
    let map = device.memory_map().unwrap();
    let mem = Memory::with_config(device.clone(), EngineConfig::default());
    let mut rng = fastrand::Rng::with_seed(0x51ab);
    // Unaligned starts, 1 byte to 3 pages, crossing pages, inside one range.
    let specs: Vec<(u64, usize)> = (0..100)
        .map(|_| loop {
            let addr = random_page(&mut rng, &map) + rng.u64(0..PAGE);
            let len = rng.usize(1..=3 * PAGE as usize);
            let range = map.find(addr).unwrap();
            if addr + len as u64 <= range.end() {
                break (addr, len);
            }
        })
        .collect();
    let _paused = guest.pause();
    let mut bufs: Vec<Vec<u8>> = specs.iter().map(|&(_, len)| vec![0xa5; len]).collect();
    let calls = device.call_count(Call::ReadScatter);
    let results = mem.block_on(join_all(
        specs
            .iter()
            .zip(bufs.iter_mut())
            .map(|(&(addr, _), buf)| mem.read(addr, buf)),
    ));
    // Everything waiting at once goes in one call.
    assert_eq!(device.call_count(Call::ReadScatter) - calls, 1);
    for ((&(addr, len), buf), result) in specs.iter().zip(&bufs).zip(results) {
        assert_eq!(result, Ok(()), "read at {addr:#x}+{len:#x}");
        assert_same_bytes(addr, buf, &guest.pmemsave(addr, len as u64));
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn reads_outside_the_memory_map_fail_alone_and_leave_buffers_untouched() {
    let guest = shared_guest();
    let device = guest.open();
    let ram = guest.memory().bytes();
    let outside = [
        ram,
        ram + 0x10,
        0xfee0_0000,
        0xffff_f000,
        4 * GIB,
        0xfd00_0000,
    ];
    let inside = [0x0, 0x10_0000, ram - 8, 0x100_0000 + 0x44];
    let addrs: Vec<u64> = outside.iter().chain(&inside).copied().collect();
    let _paused = guest.pause();
    for e in &read_words(&device, &addrs, 0xa5) {
        if outside.contains(&e.addr) {
            assert!(
                e.result.is_err(),
                "read at {:#x} outside the map succeeded",
                e.addr
            );
            assert_eq!(
                e.bytes, [0xa5; 8],
                "failed entry at {:#x} was written",
                e.addr
            );
        } else {
            assert_eq!(e.result, Ok(()), "read at {:#x}", e.addr);
            assert_same_bytes(e.addr, &e.bytes, &xp_bytes(&guest, e.addr, 8));
        }
    }
}

/// Writes the saved bytes back on drop (pages, guest paused): the guest
/// never sees what a test wrote.
struct Restore<'d> {
    device: &'d LeechCore,
    addr: u64,
    bytes: Vec<u8>,
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        let mut entries: Vec<WriteEntry> = self
            .bytes
            .chunks(PAGE as usize)
            .enumerate()
            .map(|(i, b)| WriteEntry::new(self.addr + i as u64 * PAGE, b))
            .collect();
        self.device.write_scatter(&mut entries);
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn scatter_writes_are_visible_to_the_monitor_and_leave_neighbours_alone() {
    let guest = shared_guest();
    let device = Arc::new(guest.open());
    assert!(!device.info().read_only);
    // Four pages in the middle of RAM: the writes go to the two inner ones.
    // The guest is paused until everything is restored, so it never sees
    // them, whatever the pages hold.
    let base = 0x0800_0000 - PAGE;
    let paused = guest.pause();
    let before = guest.pmemsave(base, 4 * PAGE);
    let restore = Restore {
        device: &device,
        addr: base,
        bytes: before.clone(),
    };
    let inverted = |at: u64, len: usize| -> Vec<u8> {
        let o = (at - base) as usize;
        before[o..o + len].iter().map(|b| !b).collect()
    };
    let (p1, p2) = (base + PAGE, base + 2 * PAGE);
    let writes = [
        (p1 + 0x10, inverted(p1 + 0x10, 8)),
        (p1 + 0x804, inverted(p1 + 0x804, 0x100)),
        (p1 + 0xff4, inverted(p1 + 0xff4, 12)),
        (p2, inverted(p2, PAGE as usize)),
    ];
    let mut entries: Vec<WriteEntry> = writes.iter().map(|(a, d)| WriteEntry::new(*a, d)).collect();
    let calls = device.call_count(Call::WriteScatter);
    device.write_scatter(&mut entries);
    assert_eq!(device.call_count(Call::WriteScatter) - calls, 1);
    for e in &entries {
        assert_eq!(e.result, Ok(()), "write at {:#x}", e.addr);
    }
    let mut want = before.clone();
    for (addr, data) in &writes {
        let o = (addr - base) as usize;
        want[o..o + data.len()].copy_from_slice(data);
    }
    // Every written byte changed, every other byte of the four pages did not.
    assert_same_bytes(base, &guest.pmemsave(base, 4 * PAGE), &want);
    assert_eq!(xp_bytes(&guest, p1 + 0x10, 8), writes[0].1);

    // Through the engine: 7 unaligned bytes across the p1/p2 boundary (the
    // engine patches them into legal entries; neighbours must survive).
    let mem = Memory::with_config(device.clone(), EngineConfig::default());
    let at = p2 - 3;
    let data = [0x11u8, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77];
    mem.block_on(mem.write(at, &data)).unwrap();
    let o = (at - base) as usize;
    want[o..o + data.len()].copy_from_slice(&data);
    assert_same_bytes(base, &guest.pmemsave(base, 4 * PAGE), &want);

    drop(restore);
    assert_same_bytes(base, &guest.pmemsave(base, 4 * PAGE), &before);
    drop(paused);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn fpga_emulation_delays_every_call() {
    let guest = shared_guest();
    const LATENCY_NS: u64 = 3_000_000;
    const READPAGE_NS: u64 = 250_000;
    const PAGES: u64 = 24;

    // delay-latency-ns: at least that long per call, even for 8 bytes.
    let device = guest.open_with(&guest.device_string_with_delays(LATENCY_NS, 0));
    for _ in 0..5 {
        let took = time_8_byte_read(&device);
        assert!(
            took >= Duration::from_nanos(LATENCY_NS),
            "a call took {took:?}"
        );
    }
    drop(device);

    // delay-readpage-ns: at least that long per page read.
    let device = guest.open_with(&guest.device_string_with_delays(0, READPAGE_NS));
    for _ in 0..3 {
        let t = Instant::now();
        read_pages(&device, 0x100_0000, (PAGES * PAGE) as usize);
        let took = t.elapsed();
        assert!(
            took >= Duration::from_nanos(PAGES * READPAGE_NS),
            "{PAGES} pages took {took:?}"
        );
    }
    drop(device);

    // Both, through the engine: one read of PAGES pages is one call.
    let device =
        Arc::new(guest.open_with(&guest.device_string_with_delays(LATENCY_NS, READPAGE_NS)));
    let mem = Memory::with_config(device.clone(), EngineConfig::default());
    let mut buf = vec![0u8; (PAGES * PAGE) as usize];
    let calls = device.call_count(Call::ReadScatter);
    let t = Instant::now();
    mem.block_on(mem.read(0x100_0000, &mut buf)).unwrap();
    let took = t.elapsed();
    assert_eq!(device.call_count(Call::ReadScatter) - calls, 1);
    assert!(
        took >= Duration::from_nanos(LATENCY_NS + PAGES * READPAGE_NS),
        "{PAGES} pages took {took:?}"
    );
    drop((mem, device));

    // LeechCore's wait compares only the nanoseconds of CLOCK_MONOTONIC, so
    // on its own a delay that crosses a whole second ends there; the device
    // waits out the rest. Each call starts with 50 ms of the second left.
    const ACROSS_NS: u64 = 200_000_000;
    let device = guest.open_with(&guest.device_string_with_delays(ACROSS_NS, 0));
    for _ in 0..2 {
        wait_until_the_second_has_left(Duration::from_millis(50));
        let took = time_8_byte_read(&device);
        assert!(
            took >= Duration::from_nanos(ACROSS_NS),
            "a call across a whole second took {took:?}"
        );
    }
}

/// How long one scatter call reading 8 bytes takes (and that it reads
/// them).
fn time_8_byte_read(device: &LeechCore) -> Duration {
    let mut buf = [0u8; 8];
    let mut entries = [ScatterEntry::new(0x100_0000, &mut buf)];
    let t = Instant::now();
    device.read_scatter(&mut entries);
    let took = t.elapsed();
    assert_eq!(entries[0].result, Ok(()));
    took
}

/// Sleeps until the current second of CLOCK_MONOTONIC has at most `left`
/// to run.
fn wait_until_the_second_has_left(left: Duration) {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes only into `now`.
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) },
        0
    );
    let second = Duration::from_secs(1);
    let into = Duration::from_nanos(now.tv_nsec as u64);
    let target = second - left;
    std::thread::sleep(if into < target {
        target - into
    } else {
        second - into + target
    });
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_4_gib_guest_has_ram_above_4_gib_and_every_sampled_page_equals_pmemsave() {
    let guest = Guest::start(GuestMemory::Gib4);
    // Sparse: only what the guest touched takes memory.
    let file = std::fs::metadata(guest.shm_path()).unwrap();
    assert_eq!(file.len(), 4 * GIB);
    let used = std::os::unix::fs::MetadataExt::blocks(&file) * 512;
    assert!(used < GIB, "the 4 GiB RAM file takes {} MiB", used / MIB);

    let device = guest.open();
    let map = device.memory_map().unwrap();
    assert_eq!(map, guest.ram_map());
    // QEMU's pc machine: 3 GiB below the PCI hole, the rest from 4 GiB,
    // which is at 3 GiB in the RAM file.
    let high = *map.ranges().last().unwrap();
    assert_eq!(
        (high.start, high.end()),
        (4 * GIB, 5 * GIB),
        "memory map {map:?}"
    );
    assert_eq!(high.remap, 3 * GIB);
    assert!(map
        .ranges()
        .iter()
        .all(|r| r.end() <= 3 * GIB || r.start >= 4 * GIB));
    assert!(
        map.total_size() <= 4 * GIB && map.total_size() > 4 * GIB - MIB,
        "memory map {map:?}"
    );

    // First and last page of every range, random pages everywhere, random
    // pages above 4 GiB, and the top 2 MiB (where the kernel's early
    // allocations go, so the bytes compared there are not all zero).
    let mut rng = fastrand::Rng::with_seed(0x4619);
    let mut pages: Vec<u64> = map
        .ranges()
        .iter()
        .flat_map(|r| [r.start, r.end() - PAGE])
        .collect();
    pages.extend((0..96).map(|_| random_page(&mut rng, &map)));
    pages.extend((0..96).map(|_| high.start + rng.u64(0..high.size / PAGE) * PAGE));
    pages.extend((0..512).map(|i| high.end() - (i + 1) * PAGE));
    pages.sort_unstable();
    pages.dedup();

    let _paused = guest.pause();
    let mut bufs = vec![vec![0xa5u8; PAGE as usize]; pages.len()];
    let mut entries: Vec<ScatterEntry> = pages
        .iter()
        .zip(bufs.iter_mut())
        .map(|(&a, b)| ScatterEntry::new(a, b))
        .collect();
    device.read_scatter(&mut entries);
    let mut nonzero_high = 0;
    for e in &entries {
        assert_eq!(e.result, Ok(()), "page at {:#x}", e.addr);
        assert_same_bytes(e.addr, e.buf, &guest.pmemsave(e.addr, PAGE));
        if e.addr >= 4 * GIB && e.buf.iter().any(|&b| b != 0) {
            nonzero_high += 1;
        }
    }
    assert!(
        nonzero_high >= 16,
        "only {nonzero_high} pages above 4 GiB hold data: a weak check"
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_killed_guest_never_hangs_reads_and_cannot_be_reopened() {
    let guest = Guest::start(GuestMemory::Mib256);
    let device = Arc::new(guest.open());
    let mem = Memory::with_config(device.clone(), EngineConfig::default());
    let shm = guest.shm_path().to_path_buf();

    let pages = [0x100_0000u64, 0x100_1000, guest.kernel_dtb(), 0x0400_0000];
    guest.kill();
    // QEMU's main thread is a zombie now; the process counts as exited when
    // its last thread is gone, a moment later.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut probe = [0u8; 8];
        let mut entries = [ScatterEntry::new(0x1000, &mut probe)];
        device.read_scatter(&mut entries);
        if entries[0].result == Err(leechio::PageError::TargetGone) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "reads still succeed 5 s after the kill"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!guest.is_alive());

    // LeechCore's qemu device only maps the RAM file after opening and would
    // go on "reading" it; the device watches QEMU and fails every entry
    // with a clear reason instead, at once, without touching the buffers.
    let reads = {
        let device = device.clone();
        within(Duration::from_secs(10), "reads after the kill", move || {
            pages
                .iter()
                .map(|&p| {
                    let mut buf = vec![0xa5u8; PAGE as usize];
                    let mut entries = [ScatterEntry::new(p, &mut buf)];
                    device.read_scatter(&mut entries);
                    let result = entries[0].result;
                    (result, buf)
                })
                .collect::<Vec<_>>()
        })
    };
    for (&page, (result, buf)) in pages.iter().zip(&reads) {
        assert_eq!(
            *result,
            Err(leechio::PageError::TargetGone),
            "read at {page:#x}"
        );
        assert!(
            buf.iter().all(|&b| b == 0xa5),
            "failed read at {page:#x} wrote"
        );
    }
    let calls = device.call_count(leechio::Call::ReadScatter);
    let engine_read = within(
        Duration::from_secs(10),
        "an engine read after the kill",
        move || {
            let mut buf = vec![0xa5u8; 2 * PAGE as usize];
            let result = mem.block_on(mem.read(0x100_0000, &mut buf));
            (result, buf)
        },
    );
    match engine_read {
        (Err(e), buf) => {
            assert_eq!(e.failed.len(), 1, "{e}");
            assert_eq!(e.failed[0].reason, leechio::PageError::TargetGone);
            assert_eq!(e.failed_bytes(), 2 * PAGE as usize);
            assert!(buf.iter().all(|&b| b == 0xa5));
        }
        (Ok(()), _) => panic!("a read of a dead guest succeeded"),
    }
    assert_eq!(
        device.call_count(leechio::Call::ReadScatter),
        calls,
        "a dead guest was still asked"
    );

    // The guest script saw QEMU die and removed its RAM file; opening the
    // device again fails at once with a reason that names the file.
    wait_until_removed(&shm);
    let device_string = guest.device_string();
    let reopened = within(Duration::from_secs(20), "reopening", move || {
        LeechCore::open(&leechio::DeviceConfig::new(device_string)).map(|_| ())
    });
    match reopened {
        Err(Error::Open { reason, .. }) => {
            assert!(
                reason.contains(&shm.display().to_string()),
                "reason: {reason}"
            )
        }
        other => panic!("reopening a dead guest gave {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// TRANSLATION TEST GOES HERE (issue 6, with `leechio::AddressSpace`).
//
// 1000 random kernel virtual addresses, from the kernel text (from
// `guest.kernel_text()`), the direct map (`common::qemu::DIRECT_MAP` + a
// physical address of the memory map) and vmalloc, translated through the
// kernel's page table (`guest.kernel_dtb()`, the physical address of
// `init_top_pgt`) must equal `guest.gva2gpa(va)` (`None` where unmapped), and
// read equal to `guest.x(va, n)`. The monitor translates through the CPU's
// CR3, which after boot belongs to a user process; with `pti=off` its kernel
// half is the kernel's own. Hold `let _paused = guest.pause();` meanwhile.
// ---------------------------------------------------------------------------

/// Where the guest stops when a test panics, and when the test process is
/// killed outright (the helper below, run as a child process).
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_guest_is_cleaned_up_after_a_panic_and_after_its_process_is_killed() {
    // A panic while the guest runs: unwinding drops it.
    let (tx, rx) = mpsc::channel();
    let panicked = std::thread::spawn(move || {
        let guest = Guest::start(GuestMemory::Mib256);
        tx.send((guest.qemu_pid(), guest.shm_path().to_path_buf()))
            .unwrap();
        panic!("a test fails with its guest running");
    })
    .join();
    assert!(panicked.is_err());
    let (pid, shm) = rx.recv().unwrap();
    assert!(!process_alive(pid), "QEMU {pid} survived the panic");
    assert!(!shm.exists(), "{} survived the panic", shm.display());

    // The test process SIGKILLed: nothing of it runs any more, so the guest
    // script must notice (its input closes) and clean up.
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_hold_a_guest_until_killed",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("LEECHIO_TEST_HOLD_GUEST", "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let info = within(
        Duration::from_secs(150),
        "the helper's guest start",
        move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                // The harness prints "test NAME ... " first, on the same line.
                .find_map(|l| {
                    l.split_once("held-guest ")
                        .map(|(_, info)| info.to_string())
                })
        },
    );
    let info = info.expect("the helper printed no guest");
    let (pid, shm) = info.split_once(' ').unwrap();
    let pid: u32 = pid.parse().unwrap();
    assert!(process_alive(pid));
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while process_alive(pid) || std::path::Path::new(shm).exists() {
        assert!(
            Instant::now() < deadline,
            "QEMU {pid} or {shm} outlived the killed test process"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Not a test: run by the test above as a child process, which it kills.
#[test]
#[ignore = "helper of a_guest_is_cleaned_up_after_a_panic_and_after_its_process_is_killed"]
fn helper_hold_a_guest_until_killed() {
    if std::env::var_os("LEECHIO_TEST_HOLD_GUEST").is_none() {
        return;
    }
    let guest = Guest::start(GuestMemory::Mib256);
    println!(
        "held-guest {} {}",
        guest.qemu_pid(),
        guest.shm_path().display()
    );
    // Killed long before this ends.
    std::thread::sleep(Duration::from_secs(120));
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn guest_sh_refuses_a_folder_that_exists_and_leaves_it_be() {
    // guest.sh removes its folder when the guest stops: given one that
    // holds something, it must not take it.
    let dir = tempfile::tempdir().unwrap();
    let kept = dir.path().join("notes.txt");
    std::fs::write(&kept, "important").unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/guest.sh");
    let name = format!("leechio-test-dir-{}", std::process::id());
    let out = Command::new("bash")
        .arg(&script)
        .args(["--name", &name, "--dir"])
        .arg(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), "important");
    assert!(!std::path::Path::new("/dev/shm").join(&name).exists());
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn guest_lib_cleans_up_when_its_messages_cannot_be_written() {
    // What demo.sh and bench.sh do, killed once the guest runs, with a
    // standard error that fails every write, as a terminal does after a
    // hang-up (an SSH session dropped): the clean-up must still run to the
    // end, and the exit code be the signal's.
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let script = r#"
        set -euo pipefail
        die() { printf 'test: %s\n' "$*" >&2; exit 1; }
        . scripts/guest-lib.sh
        guest_session test
        echo "work $work"
        echo "shm /dev/shm/$name"
        echo kept >"$work/dump.elf"
        boot_guest
        echo booted
        sleep 120 & wait $!
    "#;
    let mut child = Command::new("bash")
        .args(["-c", script])
        .current_dir(repo)
        .env("TMPDIR", tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(
            std::fs::File::options()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        )
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines = within(Duration::from_secs(150), "the guest's start", move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .take_while(|l| !l.ends_with("booted"))
            .collect::<Vec<_>>()
    });
    let field = |key: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key:?} in {lines:?}"))
            .to_string()
    };
    let (work, shm) = (field("work "), field("shm "));
    assert!(
        std::path::Path::new(&shm).exists(),
        "the guest did not start"
    );
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = within(Duration::from_secs(60), "the clean-up", move || {
        child.wait().unwrap()
    });
    assert_eq!(status.code(), Some(143), "exit code");
    assert!(
        !std::path::Path::new(&work).exists(),
        "{work} outlived the session"
    );
    wait_until_removed(std::path::Path::new(&shm));
}
