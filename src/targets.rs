//! Targets that can be opened without hardware: running QEMU guests whose
//! RAM is a file in `/dev/shm`, found from their command lines.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::{MemoryMap, MemoryRange};

/// A running QEMU guest LeechCore's `qemu` device can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QemuGuest {
    /// QEMU's process id.
    pub pid: u32,
    /// Name of the RAM file in `/dev/shm`.
    pub shm: String,
    /// The id of the memory backend; LeechCore only reads the guest's
    /// memory map when it is `qemu-ram`.
    pub backend_id: String,
    /// QMP sockets of the guest (each serves one client at a time).
    pub qmp: Vec<PathBuf>,
}

impl QemuGuest {
    /// Ready-to-use LeechCore device strings, one per QMP socket.
    pub fn device_strings(&self) -> Vec<String> {
        self.qmp
            .iter()
            .map(|q| format!("qemu://shm={},qmp={}", self.shm, q.display()))
            .collect()
    }
}

/// A watch on a running process that tells, cheaply, when it has exited:
/// a pidfd, which no later process can take over the way a pid can.
#[derive(Debug)]
pub struct ProcessWatch {
    pid: u32,
    pidfd: std::os::fd::OwnedFd,
}

impl ProcessWatch {
    /// Watches process `pid`; `None` if it is gone or cannot be watched.
    pub fn new(pid: u32) -> Option<Self> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        let fd = i32::try_from(fd).ok().filter(|&fd| fd >= 0)?;
        // SAFETY: `fd` was just opened for us and is owned by nobody else.
        let pidfd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        Some(ProcessWatch { pid, pidfd })
    }

    /// The watched process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the process is still running (a pidfd turns readable when
    /// it exits).
    pub fn is_alive(&self) -> bool {
        use std::os::fd::AsRawFd;
        let mut poll = libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no waiting.
        let ready = unsafe { libc::poll(&mut poll, 1, 0) };
        ready == 0
    }
}

/// Sleeps, when needed, until the current second of `CLOCK_MONOTONIC` has
/// `needed` left.
///
/// LeechCore 2.23.3's qemu device emulates an FPGA board's delays
/// (`delay-latency-ns`, `delay-readpage-ns`) by busy-waiting on the
/// nanoseconds part of `CLOCK_MONOTONIC` alone, so a delay that crosses a
/// whole second ends there. Timings of emulated delays shorter than a
/// second are exact when they start after this.
pub fn fit_emulated_delay(needed: Duration) {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes only into `now`; cannot fail for CLOCK_MONOTONIC.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) } != 0 {
        return;
    }
    let left = Duration::from_nanos(1_000_000_000 - now.tv_nsec.clamp(0, 999_999_999) as u64);
    if left < needed {
        std::thread::sleep(left + Duration::from_millis(1));
    }
}

/// The running QEMU whose guest RAM is `/dev/shm/<shm>`, if any.
pub fn qemu_serving(shm: &str) -> Option<QemuGuest> {
    qemu_guests().into_iter().find(|g| g.shm == shm)
}

/// Every running QEMU guest with its RAM in `/dev/shm` and a QMP socket.
pub fn qemu_guests() -> Vec<QemuGuest> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut guests: Vec<QemuGuest> = procs
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let args: Vec<String> = cmdline
                .split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let cwd = std::fs::read_link(entry.path().join("cwd")).ok();
            guest_from_args(pid, &args, cwd.as_deref())
        })
        .collect();
    guests.sort_by_key(|g| g.pid);
    guests
}

/// Reads a guest from QEMU's arguments, if it is one LeechCore can open;
/// `cwd` is QEMU's working directory, against which relative socket paths
/// are taken (without it, such sockets are left out).
pub fn guest_from_args(pid: u32, args: &[String], cwd: Option<&Path>) -> Option<QemuGuest> {
    let program = Path::new(args.first()?).file_name()?.to_str()?;
    if !program.starts_with("qemu-system") {
        return None;
    }
    // QEMU takes `-flag` and `--flag`.
    let values = |flag: &'static str| {
        args.windows(2)
            .filter(move |w| w[0].strip_prefix('-') == Some(flag) || w[0] == flag)
            .map(|w| options(&w[1]))
    };
    let (backend_id, shm) = values("-object").find_map(|o| {
        let kind = o
            .first()
            .map(|(k, v)| if v.is_empty() { k.as_str() } else { v.as_str() })?;
        if kind != "memory-backend-file" {
            return None;
        }
        let get = |key: &str| o.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
        let path = PathBuf::from(get("mem-path")?);
        // A file right in /dev/shm: LeechCore opens it by name with
        // shm_open, which takes no folders.
        let name = path.strip_prefix("/dev/shm").ok()?;
        let mut parts = name.components();
        let (Some(std::path::Component::Normal(file)), None) = (parts.next(), parts.next()) else {
            return None;
        };
        let shm = file.to_str()?.to_string();
        Some((get("id").unwrap_or_default(), shm))
    })?;
    let mut qmp: Vec<PathBuf> = values("-qmp")
        .filter_map(|o| o.first()?.0.strip_prefix("unix:").map(PathBuf::from))
        .collect();
    // `-chardev socket,id=X,path=P` used by `-mon chardev=X,mode=control`.
    let control: Vec<String> = values("-mon")
        .filter(|o| o.iter().any(|(k, v)| k == "mode" && v == "control"))
        .filter_map(|o| {
            o.iter()
                .find(|(k, _)| k == "chardev")
                .map(|(_, v)| v.clone())
        })
        .collect();
    for o in values("-chardev") {
        let id = o.iter().find(|(k, _)| k == "id").map(|(_, v)| v.as_str());
        let path = o
            .iter()
            .find(|(k, _)| k == "path")
            .map(|(_, v)| PathBuf::from(v));
        if let (Some(id), Some(path)) = (id, path) {
            if control.iter().any(|c| c == id) {
                qmp.push(path);
            }
        }
    }
    // LeechCore takes a socket path without '/' to be in /tmp: relative
    // ones are made absolute from QEMU's own folder.
    let qmp: Vec<PathBuf> = qmp
        .into_iter()
        .filter_map(|p| match p.is_absolute() {
            true => Some(p),
            false => cwd.map(|c| c.join(p)),
        })
        .collect();
    (!qmp.is_empty()).then_some(QemuGuest {
        pid,
        shm,
        backend_id,
        qmp,
    })
}

/// Why QEMU's map could not be had over QMP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QmpError {
    /// Connected, but QEMU did not greet within the time: another client
    /// holds the monitor (QMP serves one at a time), or QEMU is stopped.
    Silent,
    /// Anything else, as said.
    Failed(String),
}

impl std::fmt::Display for QmpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QmpError::Silent => f.write_str(
                "QEMU did not greet on its QMP socket: another client is connected \
                 (QMP serves one at a time) or QEMU is stopped",
            ),
            QmpError::Failed(why) => f.write_str(why),
        }
    }
}

impl From<String> for QmpError {
    fn from(why: String) -> Self {
        QmpError::Failed(why)
    }
}

/// QEMU's own map of a guest's RAM, asked over the QMP socket `qmp`: the
/// ranges of the system address space backed by the memory backend
/// `backend_id`, with their offsets in it (which is what LeechCore's `qemu`
/// device calls the remap address).
pub fn qemu_ram_map(
    qmp: &Path,
    backend_id: &str,
    timeout: Duration,
) -> Result<MemoryMap, QmpError> {
    let stream = UnixStream::connect(qmp).map_err(|e| format!("{}: {e}", qmp.display()))?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
    let mut writer = stream;
    // The greeting first: a monitor busy with another client (or a
    // stopped QEMU) accepts the connection and says nothing.
    let mut greeting = String::new();
    match reader.read_line(&mut greeting) {
        Ok(0) => return Err("QMP closed the connection".to_string().into()),
        Ok(_) => {}
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            return Err(QmpError::Silent)
        }
        Err(e) => return Err(format!("QMP: {e}").into()),
    }
    // One JSON object a line; events may come between answers.
    let mut answer = |command: serde_json::Value| -> Result<serde_json::Value, String> {
        writeln!(writer, "{command}").map_err(|e| format!("QMP: {e}"))?;
        loop {
            let mut line = String::new();
            if reader
                .read_line(&mut line)
                .map_err(|e| format!("QMP: {e}"))?
                == 0
            {
                return Err("QMP closed the connection".into());
            }
            let v: serde_json::Value =
                serde_json::from_str(&line).map_err(|e| format!("QMP: {e}"))?;
            if let Some(r) = v.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = v.get("error") {
                return Err(format!("QMP: {e}"));
            }
        }
    };
    answer(serde_json::json!({"execute": "qmp_capabilities"}))?;
    let text = answer(serde_json::json!({
        "execute": "human-monitor-command",
        "arguments": {"command-line": "info mtree -f"}
    }))?;
    let text = text
        .as_str()
        .ok_or_else(|| "QMP: `info mtree -f` gave no text".to_string())?;
    ram_map_from_mtree(text, backend_id)
        .ok_or_else(|| format!("no RAM of `{backend_id}` in QEMU's system memory view").into())
}

/// Reads the RAM ranges of `backend_id` from the system FlatView of QEMU's
/// `info mtree -f` (lines like `0000000000100000-000000000fffffff (prio 0,
/// ram): qemu-ram @0000000000100000`, with ` KVM` after them under KVM),
/// whatever order the views come in.
pub fn ram_map_from_mtree(text: &str, backend_id: &str) -> Option<MemoryMap> {
    let system = text.split("FlatView #").find(|view| {
        view.lines()
            .any(|l| l.trim() == "Root memory region: system")
    })?;
    let mut ranges = Vec::new();
    for line in system.lines() {
        let Some((span, rest)) = line.trim().split_once(' ') else {
            continue;
        };
        let Some((_, region)) = rest.split_once(", ram): ") else {
            continue;
        };
        let mut words = region.split_whitespace();
        if words.next() != Some(backend_id) {
            continue;
        }
        let (first, last) = span.split_once('-')?;
        let start = u64::from_str_radix(first, 16).ok()?;
        let end = u64::from_str_radix(last, 16).ok()?.checked_add(1)?;
        // `@offset` in the RAM block when it is not 0; then, under KVM,
        // the accelerator's name.
        let remap = match words.next().and_then(|w| w.strip_prefix('@')) {
            Some(at) => u64::from_str_radix(at, 16).ok()?,
            None => 0,
        };
        ranges.push(MemoryRange {
            start,
            size: end - start,
            remap,
        });
    }
    ranges.sort_by_key(|r| r.start);
    MemoryMap::new(ranges).ok().filter(|m| !m.is_empty())
}

/// Splits a QEMU option string (`a,b=c,d=e`, with `,,` for a literal
/// comma) into key/value pairs; a bare first word is a key with no value.
fn options(text: &str) -> Vec<(String, String)> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ',' {
            if chars.peek() == Some(&',') {
                chars.next();
                current.push(',');
            } else {
                parts.push(std::mem::take(&mut current));
            }
        } else {
            current.push(c);
        }
    }
    parts.push(current);
    parts
        .into_iter()
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (p, String::new()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split(' ').map(String::from).collect()
    }

    #[test]
    fn finds_shm_ram_and_every_qmp_socket() {
        let line = "/usr/bin/qemu-system-x86_64 -m 256M \
            -object memory-backend-file,id=qemu-ram,size=256M,mem-path=/dev/shm/guest-1,share=on \
            -machine pc,memory-backend=qemu-ram -qmp unix:/tmp/lc.sock,server=on,wait=off \
            -chardev socket,id=mon0,path=/tmp/tests.sock,server=on,wait=off -mon chardev=mon0,mode=control \
            -chardev socket,id=ser0,path=/tmp/serial.sock,server=on";
        let guest = guest_from_args(42, &args(line), None).unwrap();
        assert_eq!(guest.shm, "guest-1");
        assert_eq!(guest.backend_id, "qemu-ram");
        assert_eq!(
            guest.device_strings(),
            vec![
                "qemu://shm=guest-1,qmp=/tmp/lc.sock",
                "qemu://shm=guest-1,qmp=/tmp/tests.sock"
            ]
        );
    }

    /// The shape of `info mtree -f` of a 4 GiB guest (RAM above the PCI
    /// hole), with the system view last, as QEMU sometimes orders it.
    const MTREE: &str = "FlatView #0
 AS \"cpu-smm-0\", root: memory
 Root memory region: memory
  0000000000000000-000000000009ffff (prio 0, ram): qemu-ram
  00000000000a0000-00000000000bffff (prio 1, i/o): smram
FlatView #1
 AS \"I/O\", root: io
 Root memory region: io
  0000000000000000-0000000000000007 (prio 0, i/o): dma-chan
FlatView #2
 AS \"memory\", root: system
 AS \"cpu-memory-0\", root: system
 Root memory region: system
  0000000000000000-00000000000c2fff (prio 0, ram): qemu-ram
  00000000000c3000-00000000000e7fff (prio 0, rom): qemu-ram @00000000000c3000
  00000000000e8000-00000000000effff (prio 0, ram): qemu-ram @00000000000e8000
  0000000000100000-00000000bfffffff (prio 0, ram): qemu-ram @0000000000100000
  00000000fec00000-00000000fec00fff (prio 0, i/o): ioapic
  00000000fffc0000-00000000ffffffff (prio 0, rom): pc.bios
  0000000100000000-000000013fffffff (prio 0, ram): qemu-ram @00000000c0000000
";

    #[test]
    fn qemu_ram_map_comes_from_the_system_view_in_any_order() {
        let map = ram_map_from_mtree(MTREE, "qemu-ram").unwrap();
        let r = |start, end: u64, remap| MemoryRange {
            start,
            size: end - start,
            remap,
        };
        assert_eq!(
            map.ranges(),
            &[
                r(0, 0xc3000, 0),
                r(0xe8000, 0xf0000, 0xe8000),
                r(0x10_0000, 0xc000_0000, 0x10_0000),
                r(0x1_0000_0000, 0x1_4000_0000, 0xc000_0000),
            ]
        );
        assert!(ram_map_from_mtree(MTREE, "other-ram").is_none());
        assert!(ram_map_from_mtree("FlatView #0\n Root memory region: io\n", "qemu-ram").is_none());
    }

    #[test]
    fn kvm_guests_lines_and_ram_not_at_address_0_are_read() {
        // Under KVM each line ends with the accelerator's name; a range with
        // no `@` is at the start of the RAM block, wherever it is mapped.
        let kvm = "FlatView #0
 Root memory region: system
  0000000000000000-000000000009ffff (prio 0, ram): qemu-ram KVM
  0000000000100000-000000000fffffff (prio 0, ram): qemu-ram @0000000000100000 KVM
";
        let r = |start, end: u64, remap| MemoryRange {
            start,
            size: end + 1 - start,
            remap,
        };
        assert_eq!(
            ram_map_from_mtree(kvm, "qemu-ram").unwrap().ranges(),
            [r(0, 0x9_ffff, 0), r(0x10_0000, 0xfff_ffff, 0x10_0000)]
        );
        let virt = "FlatView #0
 Root memory region: system
  0000000040000000-000000007fffffff (prio 0, ram): mach-virt.ram
";
        assert_eq!(
            ram_map_from_mtree(virt, "mach-virt.ram").unwrap().ranges(),
            [r(0x4000_0000, 0x7fff_ffff, 0)]
        );
    }

    #[test]
    fn a_process_watch_sees_its_process_exit() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let watch = ProcessWatch::new(child.id()).unwrap();
        assert!(watch.is_alive());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!watch.is_alive());
        assert!(ProcessWatch::new(u32::MAX / 2).is_none(), "no such process");
    }

    #[test]
    fn relative_sockets_are_taken_from_qemus_folder_and_ram_must_be_right_in_dev_shm() {
        let line = "qemu-system-x86_64 \
            -object memory-backend-file,id=qemu-ram,mem-path=/dev/shm/g,share=on \
            -qmp unix:rel.qmp,server=on,wait=off -qmp unix:/tmp/abs.qmp,server=on";
        let cwd = Path::new("/srv/vm");
        let guest = guest_from_args(7, &args(line), Some(cwd)).unwrap();
        assert_eq!(
            guest.device_strings(),
            vec![
                "qemu://shm=g,qmp=/srv/vm/rel.qmp",
                "qemu://shm=g,qmp=/tmp/abs.qmp"
            ]
        );
        // QEMU's folder unknown: the relative socket is left out.
        let guest = guest_from_args(7, &args(line), None).unwrap();
        assert_eq!(
            guest.device_strings(),
            vec!["qemu://shm=g,qmp=/tmp/abs.qmp"]
        );
        for mem_path in ["/dev/shm/sub/ram", "/dev/shm", "/dev/shm/"] {
            let line = format!(
                "qemu-system-x86_64 -object memory-backend-file,id=m,mem-path={mem_path} \
                 -qmp unix:/tmp/q.sock,server"
            );
            assert_eq!(guest_from_args(1, &args(&line), None), None, "{mem_path}");
        }
    }

    #[test]
    fn ignores_guests_leechcore_cannot_open() {
        let no_shm = "qemu-system-x86_64 -m 1G -qmp unix:/tmp/q.sock,server,nowait";
        assert_eq!(guest_from_args(1, &args(no_shm), None), None);
        let no_qmp =
            "qemu-system-x86_64 -object memory-backend-file,id=m,mem-path=/dev/shm/x,share=on";
        assert_eq!(guest_from_args(1, &args(no_qmp), None), None);
        assert_eq!(
            guest_from_args(1, &args("bash -c qemu-system-x86_64"), None),
            None
        );
        assert_eq!(
            options("a,,b=c,d"),
            vec![("a,b".into(), "c".into()), ("d".into(), String::new())]
        );
    }
}
