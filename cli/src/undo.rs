//! Undo files: target memory that `leechio` is about to overwrite (`bench
//! --chains-at`), saved to disk first, so that it can be put back when
//! `leechio` itself cannot (SIGKILL, a crash, a power cut): `leechio
//! restore FILE`.
//!
//! The format: one line of JSON, `{"leechio_undo":1,"device":"…",
//! "remote":null,"address":"0x…","length":N}`, then the `length` bytes
//! that were at `address` of that device.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use leechio::{DeviceConfig, LeechCore, Memory};
use serde_json::json;

use super::Failure;

/// The format's version, the value of `leechio_undo`.
const VERSION: u64 = 1;

/// The longest header line read: a device string and a remote string are
/// at most 259 bytes each in LeechCore.
const HEADER_MAX: u64 = 4096;

/// Saved target memory, and the file it is saved in.
pub struct Undo {
    /// The file, as an absolute path (what messages show).
    path: PathBuf,
    device: String,
    remote: Option<String>,
    address: u64,
    bytes: Vec<u8>,
}

impl Undo {
    /// Saves `bytes`, what `device` holds at `address`, in a new file at
    /// `path`, on disk before this returns. An existing file is never
    /// replaced: it may hold what an earlier run could not put back.
    pub fn save(
        path: &Path,
        device: &DeviceConfig,
        address: u64,
        bytes: Vec<u8>,
    ) -> Result<Undo, Failure> {
        let path = std::path::absolute(path)?;
        let undo = Undo {
            path,
            device: device.device.clone(),
            remote: device.remote.clone(),
            address,
            bytes,
        };
        let shown = undo.path.display();
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&undo.path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => Failure(format!(
                    "the undo file {shown} exists: a run that could not put target memory back \
                     left it; run `leechio restore {shown}` first (or remove it if that memory \
                     is as it was)"
                )),
                _ => Failure(format!(
                    "cannot create the undo file {shown}: {e}; choose another place with --undo-file"
                )),
            })?;
        let header = json!({
            "leechio_undo": VERSION, "device": undo.device, "remote": undo.remote,
            "address": format!("{address:#x}"), "length": undo.bytes.len(),
        });
        let written = writeln!(file, "{header}")
            .and_then(|()| file.write_all(&undo.bytes))
            .and_then(|()| file.sync_all());
        if let Err(e) = written {
            let _ = std::fs::remove_file(&undo.path);
            return Err(Failure(format!("writing the undo file {shown}: {e}")));
        }
        Ok(undo)
    }

    /// Reads the undo file at `path`.
    pub fn load(path: &Path) -> Result<Undo, Failure> {
        let path = std::path::absolute(path)?;
        let bad = |why: String| Failure(format!("{} is not an undo file: {why}", path.display()));
        let file = leechio::user_file::open_regular_file(&path)
            .map_err(|e| Failure(format!("cannot read {}: {e}", path.display())))?;
        let mut reader = BufReader::new(file);
        let mut line = String::new();
        (&mut reader)
            .take(HEADER_MAX)
            .read_line(&mut line)
            .map_err(|e| bad(e.to_string()))?;
        let header: serde_json::Value =
            serde_json::from_str(&line).map_err(|_| bad("no header line".into()))?;
        if header["leechio_undo"].as_u64() != Some(VERSION) {
            return Err(bad(format!("its header is not of version {VERSION}")));
        }
        let address = header["address"]
            .as_str()
            .and_then(|a| u64::from_str_radix(a.strip_prefix("0x")?, 16).ok())
            .ok_or_else(|| bad("no address in its header".into()))?;
        let (Some(device), Some(length)) = (header["device"].as_str(), header["length"].as_u64())
        else {
            return Err(bad("no device or length in its header".into()));
        };
        let mut bytes = Vec::new();
        reader
            .read_to_end(&mut bytes)
            .map_err(|e| bad(e.to_string()))?;
        if bytes.len() as u64 != length {
            return Err(bad(format!(
                "its header says {length} bytes, and {} follow",
                bytes.len()
            )));
        }
        Ok(Undo {
            path,
            device: device.to_string(),
            remote: header["remote"].as_str().map(str::to_string),
            address,
            bytes,
        })
    }

    /// The undo file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The saved bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Writes the saved bytes back through `mem`, reads them again to see
    /// that they landed, and then removes the file.
    pub fn put_back(&self, mem: &Memory) -> Result<(), Failure> {
        let kept = |why: &str| {
            Failure(format!(
                "{why} at {:#x}; what was there is saved in {}: `leechio restore {}` puts it back",
                self.address,
                self.path.display(),
                self.path.display()
            ))
        };
        if !mem.write_now([(self.address, &self.bytes[..])]).is_ok() {
            return Err(kept("could not write target memory back"));
        }
        let mut now = vec![0u8; self.bytes.len()];
        if !mem.read_now([(self.address, &mut now[..])]).is_ok() || now != self.bytes {
            return Err(kept("target memory does not read back as it was written"));
        }
        self.discard()
    }

    /// Removes the file, once what it saved is back in target memory (or
    /// was never changed).
    pub fn discard(&self) -> Result<(), Failure> {
        std::fs::remove_file(&self.path).map_err(|e| {
            Failure(format!(
                "target memory is as it was, but removing {} failed: {e}",
                self.path.display()
            ))
        })
    }
}

/// `leechio restore FILE`: puts the memory saved in `file` back on the
/// device the file names (or `--device`, with `--remote`, when given).
pub fn run(cli: &super::Cli, file: &Path) -> Result<ExitCode, Failure> {
    let undo = Undo::load(file)?;
    let (device, remote) = match &cli.device {
        Some(device) => (device.clone(), cli.remote.clone()),
        None => (undo.device.clone(), undo.remote.clone()),
    };
    let config = crate::device::config_of(cli, device, remote);
    let mem = Memory::new(LeechCore::open(&config)?);
    undo.put_back(&mem)?;
    outln!(
        "restored {} bytes at {:#x} on {}; removed {}",
        undo.bytes.len(),
        undo.address,
        config.device,
        undo.path.display()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_file_loads_as_it_was_saved_and_is_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chains.undo");
        let mut device = DeviceConfig::new("file://file=/tmp/a b.raw,write=1");
        device.remote = Some("rpc://spn:host".into());
        let bytes: Vec<u8> = (0..=255).cycle().take(0x3000).collect();
        let saved = Undo::save(&path, &device, 0xc00_0000, bytes.clone());
        assert!(saved.is_ok());
        let Ok(undo) = Undo::load(&path) else {
            panic!("not loaded")
        };
        assert_eq!(
            (undo.device.as_str(), undo.remote.as_deref(), undo.address),
            (device.device.as_str(), Some("rpc://spn:host"), 0xc00_0000)
        );
        assert!(undo.bytes == bytes);
        let again = Undo::save(&path, &device, 0, vec![1, 2, 3]).err().unwrap();
        assert!(
            again.0.starts_with(&format!(
                "the undo file {} exists: a run that could not put target memory back left it; run `leechio restore {}` first",
                path.display(),
                path.display()
            )),
            "{}",
            again.0
        );
        assert!(
            Undo::load(&path).is_ok_and(|u| u.bytes == bytes),
            "replaced"
        );
    }

    #[test]
    fn a_file_cut_short_or_of_another_kind_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chains.undo");
        assert!(Undo::save(&path, &DeviceConfig::new("fpga"), 0x1000, vec![7; 64]).is_ok());
        let full = std::fs::read(&path).unwrap();
        std::fs::write(&path, &full[..full.len() - 1]).unwrap();
        let shown = path.display();
        assert_eq!(
            Undo::load(&path).err().unwrap().0,
            format!("{shown} is not an undo file: its header says 64 bytes, and 63 follow")
        );
        std::fs::write(&path, b"\x7fELF\x02\x01\x01").unwrap();
        assert_eq!(
            Undo::load(&path).err().unwrap().0,
            format!("{shown} is not an undo file: no header line")
        );
    }
}
