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

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use leechio::memflow::MemflowPhysical;
use leechio::{DeviceConfig, LeechCore, Memory, MemoryMap, MemoryRange, PageError, ScatterEntry};
use serde_json::{json, Value};

const GIB: u64 = 1 << 30;

/// `info mtree -f` of a 4 GiB pc guest, as QEMU prints it (CRLF lines):
/// 3 GiB below the PCI hole, the fourth from 4 GiB on, at 3 GiB in the
/// RAM file.
const MTREE: &str = "FlatView #0\r
 AS \"memory\", root: system\r
 AS \"cpu-memory-0\", root: system\r
 Root memory region: system\r
  0000000000000000-000000000009ffff (prio 0, ram): qemu-ram\r
  00000000000a0000-00000000000bffff (prio 1, i/o): vga-lowmem\r
  00000000000c0000-00000000000dffff (prio 1, rom): pc.rom\r
  0000000000100000-00000000bfffffff (prio 0, ram): qemu-ram @0000000000100000\r
  00000000fffc0000-00000000ffffffff (prio 0, rom): pc.bios\r
  0000000100000000-000000013fffffff (prio 0, ram): qemu-ram @00000000c0000000\r
\r
FlatView #1\r
 AS \"I/O\", root: io\r
 Root memory region: io\r
  0000000000000000-0000000000000007 (prio 0, i/o): dma-chan\r
";

/// The first bytes of LeechCore 2.23.3's request for the map; our own
/// client sends compact JSON.
const LEECHCORE_REQUEST: &str = "{\"execute\": \"human-monitor-command\"";

/// What the stand-in monitor has served.
#[derive(Default)]
struct Served {
    /// Errors to answer the first requests for the whole map with (a QEMU
    /// that could not answer in time, say).
    errors_first: usize,
    errors: AtomicUsize,
    cut_short: AtomicUsize,
    whole: AtomicUsize,
}

/// Serves QMP on `listener`, one client at a time as QEMU does, until the
/// test ends.
fn monitor(listener: UnixListener, served: Arc<Served>) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { return };
        // A client may hang up at any point (the device's liveness probe
        // connects and leaves): errors end its session only.
        let _ = session(stream, &served);
    }
}

fn session(stream: UnixStream, served: &Served) -> std::io::Result<()> {
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    writeln!(
        writer,
        "{}",
        json!({"QMP": {"version": {"qemu": {"major": 7, "minor": 2, "micro": 0}}, "capabilities": []}})
    )?;
    let mut line = String::new();
    while reader.read_line(&mut line)? > 0 {
        let command: Value = serde_json::from_str(&line).expect("a JSON command a line");
        let whole = json!({"return": MTREE}).to_string();
        match command["execute"].as_str() {
            Some("qmp_capabilities") => writeln!(writer, "{}", json!({"return": {}}))?,
            Some("human-monitor-command") if line.starts_with(LEECHCORE_REQUEST) => {
                // Everything up to the range above 4 GiB, and no more
                // within LeechCore's second: the line before it is whole.
                let cut = whole.find("0000000100000000-").unwrap();
                // Counted before the answer goes out: the client may act on
                // it, and the test check the count, before this thread runs
                // again.
                served.cut_short.fetch_add(1, Ordering::SeqCst);
                writer.write_all(&whole.as_bytes()[..cut])?;
                // LeechCore reads once and hangs up.
                while reader.read_line(&mut String::new())? > 0 {}
                return Ok(());
            }
            Some("human-monitor-command")
                if served.errors.load(Ordering::SeqCst) < served.errors_first =>
            {
                let error = json!({"error": {"class": "GenericError", "desc": "busy"}});
                served.errors.fetch_add(1, Ordering::SeqCst);
                writeln!(writer, "{error}")?;
            }
            Some("human-monitor-command") => {
                served.whole.fetch_add(1, Ordering::SeqCst);
                writeln!(writer, "{whole}")?;
            }
            other => panic!("unexpected QMP command {other:?}"),
        }
        line.clear();
    }
    Ok(())
}

/// A sparse RAM file in /dev/shm, removed on drop.
struct RamFile {
    name: String,
    path: PathBuf,
}

impl RamFile {
    fn new(size: u64) -> RamFile {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let name = format!("leechio-test-map-{}-{n}", std::process::id());
        let path = PathBuf::from("/dev/shm").join(&name);
        File::create(&path).unwrap().set_len(size).unwrap();
        RamFile { name, path }
    }
}

impl Drop for RamFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Bytes at 3 GiB in the RAM file: guest-physical 4 GiB.
const MARKER: [u8; 33] = *b"above 4 GiB, at 3 GiB in the file";

/// A 4 GiB guest's RAM file behind the stand-in monitor.
struct Guest {
    ram: RamFile,
    _dir: tempfile::TempDir,
    served: Arc<Served>,
    /// Its `qemu://` device string.
    device: String,
}

fn guest(served: Served) -> Guest {
    let ram = RamFile::new(4 * GIB);
    OpenOptions::new()
        .write(true)
        .open(&ram.path)
        .unwrap()
        .write_all_at(&MARKER, 3 * GIB + 0x1230)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("qmp.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let served = Arc::new(served);
    std::thread::spawn({
        let served = served.clone();
        move || monitor(listener, served)
    });
    let device = format!("qemu://shm={},qmp={}", ram.name, socket.display());
    Guest {
        ram,
        _dir: dir,
        served,
        device,
    }
}

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
fn a_memory_map_leechcore_got_cut_short_is_replaced_by_qemus_whole_map() {
    let served = open_behind_a_monitor(Served::default());
    // Asked once, before LeechCore connected.
    assert_eq!(served.whole.load(Ordering::SeqCst), 1);
}

#[test]
fn qemus_map_is_asked_again_after_opening_when_the_first_question_fails() {
    let served = open_behind_a_monitor(Served {
        errors_first: 1,
        ..Served::default()
    });
    assert_eq!(served.errors.load(Ordering::SeqCst), 1);
    assert_eq!(served.whole.load(Ordering::SeqCst), 1);
}

#[test]
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
fn the_command_line_shows_the_librarys_warnings_and_with_v_its_notes() {
    let guest = guest(Served::default());
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_leechio"))
            .args(["-d", &guest.device])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // No QEMU process serves the RAM file here, only the stand-in monitor:
    // the library warns that a dying guest would go unnoticed.
    let quiet = run(&["info"]);
    assert!(
        quiet.contains("leechio: warning: no QEMU visible for /dev/shm/"),
        "{quiet}"
    );
    assert!(!quiet.contains("using QEMU's"), "{quiet}");
    // LeechCore got the map cut short, which is put right: a note, with -v.
    let verbose = run(&["-v", "info"]);
    assert!(verbose.contains("is not QEMU's; using QEMU's"), "{verbose}");
}

#[test]
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
