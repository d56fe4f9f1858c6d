//! A watch on the QEMU process behind a guest: after opening, LeechCore's
//! qemu device only reads the guest's RAM file, which outlives QEMU.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A watch on a running process that tells, cheaply, when it has exited:
/// a pidfd, which no later process can take over the way a pid can.
#[derive(Debug)]
pub(crate) struct ProcessWatch {
    pid: u32,
    pidfd: OwnedFd,
}

impl ProcessWatch {
    /// Watches process `pid`; `None` if it is gone or cannot be watched.
    pub(crate) fn new(pid: u32) -> Option<Self> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        let fd = i32::try_from(fd).ok().filter(|&fd| fd >= 0)?;
        // SAFETY: `fd` was just opened for us and is owned by nobody else.
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd) };
        Some(ProcessWatch { pid, pidfd })
    }

    /// The watched process id.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the process is still running (a pidfd turns readable when
    /// it exits).
    pub(crate) fn is_alive(&self) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: a process
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
}
