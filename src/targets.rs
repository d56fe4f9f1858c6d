//! Targets that can be opened without hardware: running QEMU guests whose
//! RAM is a file in `/dev/shm`, found from their command lines.

use std::path::{Path, PathBuf};

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
            guest_from_args(pid, &args)
        })
        .collect();
    guests.sort_by_key(|g| g.pid);
    guests
}

/// Reads a guest from QEMU's arguments, if it is one LeechCore can open.
pub fn guest_from_args(pid: u32, args: &[String]) -> Option<QemuGuest> {
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
        let shm = path.strip_prefix("/dev/shm").ok()?.to_str()?.to_string();
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
    (!qmp.is_empty()).then_some(QemuGuest {
        pid,
        shm,
        backend_id,
        qmp,
    })
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
        let guest = guest_from_args(42, &args(line)).unwrap();
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
    fn ignores_guests_leechcore_cannot_open() {
        let no_shm = "qemu-system-x86_64 -m 1G -qmp unix:/tmp/q.sock,server,nowait";
        assert_eq!(guest_from_args(1, &args(no_shm)), None);
        let no_qmp =
            "qemu-system-x86_64 -object memory-backend-file,id=m,mem-path=/dev/shm/x,share=on";
        assert_eq!(guest_from_args(1, &args(no_qmp)), None);
        assert_eq!(
            guest_from_args(1, &args("bash -c qemu-system-x86_64")),
            None
        );
        assert_eq!(
            options("a,,b=c,d"),
            vec![("a,b".into(), "c".into()), ("d".into(), String::new())]
        );
    }
}
