//! Targets that can be opened without hardware: running QEMU guests whose
//! RAM is a file in `/dev/shm`, found from their command lines. (What the
//! `qemu` device checks and watches of a guest once opened is the rest of
//! [`qemu`](super).)

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
