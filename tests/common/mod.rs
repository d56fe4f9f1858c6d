//! Test support: memory images on disk whose every byte can be checked,
//! runs bounded in time and memory ([`bounded`]), live QEMU guests
//! ([`qemu`]), the memflow plugin ([`plugin`]), a
//! stand-in rawtcp server ([`rawtcp`]) and a stand-in QMP monitor
//! ([`qmp_monitor`]).
//!
//! # Tests that need the set-up
//!
//! `cargo test` passes in a fresh clone. A test that needs anything
//! `make setup` installs (LeechCore, a guest kernel, QEMU, gdb, valgrind,
//! drgn, a C compiler), itself or through these helpers, says so where it
//! is declared:
//!
//! ```text
//! #[test]
//! #[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
//! ```
//!
//! The build script of each package with such tests (`build/lab.rs`) sets
//! `leechio_lab` when all of the set-up is there; without it, `cargo test`
//! counts those tests as ignored and says once what is missing. `make unit`
//! and `make test` (CI) set `LEECHIO_REQUIRE_LAB=1`, which turns a missing
//! set-up into a failed build: there, every test runs. A test whose
//! assertions would also hold when LeechCore cannot be loaded (an error it
//! expects, a file left unchanged) needs the set-up as much as the others.
//! A test that loads a release build (the plugin, libleechio) builds it
//! itself ([`release`]), so it needs no `make plugin` or `make ffi` first.
#![allow(dead_code)]

pub mod bounded;
pub mod btf;
pub mod crafted;
pub mod elf_tools;
pub mod linux;
pub mod plugin;
pub mod qemu;
pub mod qmp_monitor;
pub mod rawtcp;
pub mod release;

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use leechio::{Backend, DeviceConfig, LeechCore, PageError, ScatterEntry};

/// The repository's root folder (the workspace's, which holds
/// `Cargo.lock`), for the tests of every package that includes this
/// module.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").exists())
        .expect("the workspace root")
        .to_path_buf()
}

/// Runs `program ARGS` with `LEECHIO_DEVICE` unset, as
/// [`output_within`] does.
pub fn run_within(program: &str, args: &[&str], limit: Duration) -> Output {
    output_within(
        Command::new(program)
            .args(args)
            .env_remove("LEECHIO_DEVICE"),
        limit,
    )
}

/// Runs `command` with its output captured; fails the test if it has
/// not ended within `limit` (it is then killed).
pub fn output_within(command: &mut Command, limit: Duration) -> Output {
    let what = format!("{command:?}");
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    std::thread::spawn(move || {
        child.stdout = stdout;
        child.stderr = stderr;
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(output) => output.expect("the command's output"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("{what} ran past {limit:?}");
        }
    }
}

/// One 8-byte entry of a [`read_words`] call.
pub struct Word {
    pub addr: u64,
    pub bytes: [u8; 8],
    pub result: Result<(), PageError>,
}

/// Reads 8 bytes at each of `addrs` in one `read_scatter` call, into
/// buffers that start as `fill` (so a failed entry's untouched bytes show).
pub fn read_words(device: &dyn Backend, addrs: &[u64], fill: u8) -> Vec<Word> {
    let mut bufs = vec![[fill; 8]; addrs.len()];
    let mut entries: Vec<ScatterEntry> = addrs
        .iter()
        .zip(bufs.iter_mut())
        .map(|(&a, b)| ScatterEntry::new(a, b))
        .collect();
    device.read_scatter(&mut entries);
    let results: Vec<_> = entries.iter().map(|e| e.result).collect();
    addrs
        .iter()
        .zip(bufs)
        .zip(results)
        .map(|((&addr, bytes), result)| Word {
            addr,
            bytes,
            result,
        })
        .collect()
}

/// A raw memory image in a temporary folder, removed on drop.
pub struct Image {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
    pub size: u64,
}

/// The 8 bytes the generated image holds at the 8-aligned address `addr`:
/// a hash of the address, so a byte read from the wrong place shows.
pub fn pattern_word(addr: u64) -> u64 {
    let mut z = addr.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Image {
    /// A new image of `size` bytes filled with [`pattern_word`].
    pub fn new(size: u64) -> Image {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("memory.raw");
        let mut out = std::io::BufWriter::new(File::create(&path).expect("create image"));
        for addr in (0..size).step_by(8) {
            out.write_all(&pattern_word(addr).to_le_bytes())
                .expect("write image");
        }
        out.flush().expect("flush image");
        Image {
            _dir: dir,
            path,
            size,
        }
    }

    /// `file://` device string of the image.
    pub fn device(&self) -> String {
        format!("file://{}", self.path.display())
    }

    /// The image's bytes at `offset`, read from the file itself.
    pub fn bytes(&self, offset: u64, len: usize) -> Vec<u8> {
        read_file_at(&self.path, offset, len)
    }

    /// Overwrites bytes of the image file (before it is opened).
    pub fn poke(&self, offset: u64, bytes: &[u8]) {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.path)
            .unwrap();
        file.write_all_at(bytes, offset).unwrap();
    }

    /// Opens the image with LeechCore's file device.
    pub fn open(&self) -> LeechCore {
        LeechCore::open(&DeviceConfig::new(self.device())).expect("open image with LeechCore")
    }
}

/// `len` bytes of `path` at `offset`.
pub fn read_file_at(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0; len];
    File::open(path)
        .unwrap()
        .read_exact_at(&mut buf, offset)
        .unwrap();
    buf
}

/// Makes a named pipe (FIFO) at `path`.
pub fn make_fifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string; mkfifo only reads it.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
        0,
        "mkfifo {}",
        path.display()
    );
}
