//! A stand-in for QEMU's QMP monitor in front of a 4 GiB guest's RAM file
//! in /dev/shm, for the real `leechcore.so` and its qemu plugin: it answers
//! LeechCore (known by the exact bytes of its request) with the memory map
//! cut short, as a QEMU too busy to answer in LeechCore's one second does,
//! and anyone else with all of it.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

const GIB: u64 = 1 << 30;

/// `info mtree -f` of a 4 GiB pc guest, as QEMU prints it (CRLF lines):
/// 3 GiB below the PCI hole, the fourth from 4 GiB on, at 3 GiB in the
/// RAM file.
pub const MTREE: &str = "FlatView #0\r
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
pub struct Served {
    /// Errors to answer the first requests for the whole map with (a QEMU
    /// that could not answer in time, say).
    pub errors_first: usize,
    pub errors: AtomicUsize,
    pub cut_short: AtomicUsize,
    pub whole: AtomicUsize,
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
pub struct RamFile {
    pub name: String,
    pub path: PathBuf,
}

impl RamFile {
    pub fn new(size: u64) -> RamFile {
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
pub const MARKER: [u8; 33] = *b"above 4 GiB, at 3 GiB in the file";

/// A 4 GiB guest's RAM file behind the stand-in monitor.
pub struct Guest {
    pub ram: RamFile,
    _dir: tempfile::TempDir,
    pub served: Arc<Served>,
    /// Its `qemu://` device string.
    pub device: String,
}

pub fn guest(served: Served) -> Guest {
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
