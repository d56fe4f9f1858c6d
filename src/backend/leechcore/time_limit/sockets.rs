//! The system's side of a time limit: which sockets a device has, how
//! silent they are, cutting them, and SIGPIPE.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

/// TCP states (`tcpi_state`), from the kernel's `include/net/tcp_states.h`.
const TCP_ESTABLISHED: u8 = 1;
const TCP_SYN_SENT: u8 = 2;
const TCP_CLOSE: u8 = 7;

/// One socket of the device. The inode tells a descriptor that LeechCore
/// closed and the process reused for something else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Socket {
    pub(super) fd: i32,
    pub(super) inode: u64,
}

impl Socket {
    /// Whether `fd` is still this socket.
    fn is_current(&self) -> bool {
        // SAFETY: `stat` is plain data; fstat only writes into it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat on any descriptor number is harmless: at worst EBADF.
        let ok = unsafe { libc::fstat(self.fd, &mut st) } == 0;
        ok && st.st_ino == self.inode && st.st_mode & libc::S_IFMT == libc::S_IFSOCK
    }

    /// Ends both directions: a blocked `recv` returns 0, a blocked
    /// `connect` or `send` an error.
    pub(super) fn shut_down(&self) {
        if self.is_current() {
            // SAFETY: `fd` is the device's socket (checked above); shutdown
            // does not close it, so LeechCore's descriptor stays valid.
            unsafe { libc::shutdown(self.fd, libc::SHUT_RDWR) };
        }
    }

    /// Whether the other end closed the connection or it failed.
    pub(super) fn hung_up(&self) -> bool {
        if !self.is_current() {
            return false;
        }
        let mut poll = libc::pollfd {
            fd: self.fd,
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one valid pollfd; a timeout of 0 does not block.
        let ready = unsafe { libc::poll(&mut poll, 1, 0) };
        ready > 0 && poll.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
    }

    /// For a TCP socket: how long it has neither sent nor received data.
    pub(super) fn quiet_for(&self) -> Option<Duration> {
        // A connection still being made has moved no data: silent.
        let info = self
            .tcp_info()
            .filter(|i| i.tcpi_state == TCP_ESTABLISHED)?;
        let ms = info.tcpi_last_data_recv.min(info.tcpi_last_data_sent);
        Some(Duration::from_millis(ms.into()))
    }

    /// The kernel's record of a TCP socket; `None` for other sockets.
    fn tcp_info(&self) -> Option<libc::tcp_info> {
        if !self.is_current() {
            return None;
        }
        // SAFETY: `tcp_info` is plain data.
        let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        // SAFETY: `info` has room for `len` bytes; the kernel writes at
        // most that many. Fails (ENOPROTOOPT) on sockets that are not TCP.
        let ok = unsafe {
            libc::getsockopt(
                self.fd,
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&mut info as *mut libc::tcp_info).cast(),
                &mut len,
            )
        } == 0;
        ok.then_some(info)
    }

    /// Whether the socket is connected to `peer`, or not connected yet (a
    /// `connect` under way).
    pub(super) fn may_be_connected_to(&self, peer: &SocketAddrV4) -> bool {
        // SAFETY: plain data, filled by getpeername up to `len`.
        let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: `addr` has room for `len` bytes.
        let ok = unsafe {
            libc::getpeername(
                self.fd,
                (&mut addr as *mut libc::sockaddr_in).cast(),
                &mut len,
            )
        } == 0;
        if !ok {
            // Not connected: a socket about to connect or connecting is
            // the device's; a listening one is not.
            let not_connected =
                std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOTCONN);
            return not_connected
                && matches!(
                    self.tcp_info().map(|i| i.tcpi_state),
                    Some(TCP_SYN_SENT | TCP_CLOSE)
                );
        }
        let at = SocketAddrV4::new(
            Ipv4Addr::from(u32::from_be(addr.sin_addr.s_addr)),
            u16::from_be(addr.sin_port),
        );
        addr.sin_family == libc::AF_INET as libc::sa_family_t && at == *peer
    }
}

/// The sockets this process has open now.
pub(super) fn open_sockets() -> Vec<Socket> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let fd = e.file_name().to_str()?.parse().ok()?;
        let target = std::fs::read_link(e.path()).ok()?;
        let inode = target
            .to_str()?
            .strip_prefix("socket:[")?
            .strip_suffix(']')?
            .parse()
            .ok()?;
        Some(Socket { fd, inode })
    })
    .collect()
}

/// SIGPIPE blocked on this thread until dropped; a SIGPIPE raised
/// meanwhile is taken back first. (Nothing happens if it was blocked
/// already: the caller's own choice.)
pub(super) struct SigpipeBlocked {
    old: libc::sigset_t,
    was_blocked: bool,
}

fn sigpipe_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set; SIGPIPE is a valid signal.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        set
    }
}

impl SigpipeBlocked {
    pub(super) fn new() -> Self {
        let set = sigpipe_set();
        // SAFETY: plain data, filled by pthread_sigmask.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid sets; changes only this thread's mask.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) };
        // SAFETY: `old` was filled above.
        let was_blocked = unsafe { libc::sigismember(&old, libc::SIGPIPE) } == 1;
        SigpipeBlocked { old, was_blocked }
    }
}

impl Drop for SigpipeBlocked {
    fn drop(&mut self) {
        if self.was_blocked {
            return;
        }
        let set = sigpipe_set();
        // SAFETY: plain data, filled by sigpending.
        let mut pending: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid set pointers; a zero timeout never blocks.
        unsafe {
            libc::sigpending(&mut pending);
            if libc::sigismember(&pending, libc::SIGPIPE) == 1 {
                let zero = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                libc::sigtimedwait(&set, std::ptr::null_mut(), &zero);
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
        }
    }
}
