//! The network, as `ss -tuanp` and `ip addr` show it:
//!
//! - [`Kernel::sockets`]: every TCP and UDP socket, IPv4 and IPv6, that a
//!   process holds, with its addresses, ports, state and the processes and
//!   fds that hold it. Read from the open files (see `files`): each
//!   socket's `struct sock` in one more batch. Its protocol is told by its
//!   `sk_prot`, which must be the kernel's own `tcp_prot`, `udp_prot`,
//!   `tcpv6_prot` or `udpv6_prot` (a socket of another protocol, a Unix
//!   socket say, is not a row), and the family and state must be ones that
//!   protocol has; anything else is a failure, not a row.
//! - [`Kernel::interfaces`]: each network namespace (`net_namespace_list`),
//!   its devices (`dev_base_head`) with their hardware address, flags and
//!   MTU, and each device's IPv4 (`in_device.ifa_list`) and IPv6
//!   (`inet6_dev.addr_list`) addresses: a level of each list per batch,
//!   every namespace and device at once.
//!
//! The namespaces are read beside the open files, so each socket says
//! which namespace it lives in at no cost.

use std::fmt;
use std::net::SocketAddr;

use crate::linux::Kernel;

mod interfaces;
mod sockets;

#[cfg(test)]
mod tests;

/// The kernel symbols the network is read by: the namespaces' list, and
/// the protocols that tell TCP and UDP sockets, IPv4 and IPv6.
pub(crate) const SYMBOLS: [&str; 5] = [
    "net_namespace_list",
    "tcp_prot",
    "udp_prot",
    "tcpv6_prot",
    "udpv6_prot",
];

/// A transport protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        })
    }
}

/// `TCP_ESTABLISHED`, the state of a connected socket (UDP's too).
pub const TCP_ESTABLISHED: u8 = 1;
/// `TCP_CLOSE`, the state of a UDP socket not connected, or of a TCP
/// socket neither listening nor connected.
pub const TCP_CLOSE: u8 = 7;
/// `TCP_LISTEN`.
pub const TCP_LISTEN: u8 = 10;
/// The highest state a kernel has (`TCP_NEW_SYN_RECV`).
const TCP_MAX_STATE: u8 = 12;

/// A socket's state, as `ss` names it.
pub fn state_name(state: u8) -> &'static str {
    match state {
        1 => "ESTAB",
        2 => "SYN-SENT",
        3 => "SYN-RECV",
        4 => "FIN-WAIT-1",
        5 => "FIN-WAIT-2",
        6 => "TIME-WAIT",
        7 => "UNCONN",
        8 => "CLOSE-WAIT",
        9 => "LAST-ACK",
        10 => "LISTEN",
        11 => "CLOSING",
        12 => "NEW-SYN-RECV",
        _ => "unknown",
    }
}

/// A process's fd that holds a socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketOwner {
    /// The process's pid and name.
    pub pid: u32,
    pub name: String,
    /// The fd.
    pub fd: u32,
}

/// A TCP or UDP socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InetSocket {
    /// Address of its `struct sock`.
    pub sock: u64,
    pub protocol: Protocol,
    /// Its state (`TCP_*`: see [`state_name`]).
    pub state: u8,
    /// Its local and peer address and port (IPv4 or IPv6 as its family;
    /// the peer is unspecified, port 0, when it has none).
    pub local: SocketAddr,
    pub peer: SocketAddr,
    /// Its inode, as `socket:[INODE]` names it.
    pub inode: u64,
    /// The inode of its network namespace (as `/proc/PID/ns/net` names
    /// it); `None` when its namespace is not on the kernel's list of
    /// namespaces, or the kernel has none.
    pub netns: Option<u32>,
    /// The processes and fds that hold it, by pid and fd.
    pub owners: Vec<SocketOwner>,
}

impl InetSocket {
    /// Whether `ss -tuan` lists it: a TCP socket that is not closed, a
    /// UDP socket bound to a port. (A socket only created, with no
    /// address, is in none of the kernel's tables.)
    pub fn is_listed(&self) -> bool {
        match self.protocol {
            Protocol::Tcp => self.state != TCP_CLOSE,
            Protocol::Udp => self.local.port() != 0,
        }
    }
}

/// Something of the network that could not be read, or did not make
/// sense.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetFailure {
    /// Kernel virtual address of the structure concerned (0 for none).
    pub address: u64,
    /// Why.
    pub reason: String,
}

impl NetFailure {
    fn new(address: u64, reason: impl Into<String>) -> NetFailure {
        NetFailure {
            address,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for NetFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.address != 0 {
            write!(f, "{:#x}: ", self.address)?;
        }
        f.write_str(&self.reason)
    }
}

/// The TCP and UDP sockets the processes hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sockets {
    /// By protocol, local and peer address.
    pub sockets: Vec<InetSocket>,
    /// Sockets of other kinds held (Unix, netlink, ...): not read
    /// further.
    pub others: usize,
    /// What could not be read, and why (the open files' failures too);
    /// the rest stands.
    pub failed: Vec<NetFailure>,
}

/// An IPv4 address of a device, as `ip addr` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv4Address {
    pub address: std::net::Ipv4Addr,
    pub prefix: u8,
    /// `RT_SCOPE_*`: 0 global, 253 link, 254 host.
    pub scope: u8,
    /// Its label (the device's name, or `NAME:N`).
    pub label: String,
}

/// An IPv6 address of a device, as `ip addr` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv6Address {
    pub address: std::net::Ipv6Addr,
    pub prefix: u32,
    /// `IPV6_ADDR_*` scope bits (0 global, 0x10 host, 0x20 link).
    pub scope: u32,
    /// `IFA_F_*` flags (`0x40` tentative, `0x80` permanent, ...).
    pub flags: u32,
}

/// A network device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Address of its `struct net_device`.
    pub device: u64,
    /// The inode of its namespace.
    pub netns: u32,
    pub index: i32,
    pub name: String,
    /// `IFF_*` flags, as `/sys/class/net/NAME/flags`.
    pub flags: u32,
    pub mtu: u32,
    /// `ARPHRD_*` (1 Ethernet, 772 loopback), as
    /// `/sys/class/net/NAME/type`.
    pub link_type: u16,
    /// Its hardware address, or why it could not be read.
    pub hardware: Result<Vec<u8>, String>,
    pub ipv4: Vec<Ipv4Address>,
    pub ipv6: Vec<Ipv6Address>,
}

/// The network devices of every namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interfaces {
    /// By namespace (in the kernel's order) and index.
    pub interfaces: Vec<Interface>,
    /// What could not be read, and why.
    pub failed: Vec<NetFailure>,
}

impl Kernel {
    /// Every TCP and UDP socket the processes hold (blocking; see
    /// [`Kernel::sockets_async`]).
    pub fn sockets(&self) -> Sockets {
        self.memory().block_on(self.sockets_async())
    }

    /// Every TCP and UDP socket the processes hold: the open files, the
    /// namespaces beside them, and the sockets' `struct sock`s in one more
    /// batch.
    pub async fn sockets_async(&self) -> Sockets {
        sockets::read(self).await
    }

    /// The network devices of every namespace, with their addresses
    /// (blocking; see [`Kernel::interfaces_async`]).
    pub fn interfaces(&self) -> Interfaces {
        self.memory().block_on(self.interfaces_async())
    }

    /// The network devices of every namespace, with their addresses.
    pub async fn interfaces_async(&self) -> Interfaces {
        interfaces::read(self).await
    }
}

/// A kernel address of `what`, believed only in the kernel half.
fn kernel_pointer(value: Option<u64>, kernel_half: u64) -> Option<u64> {
    value.filter(|&v| v >= kernel_half)
}

/// The NUL-ended name in `bytes`; `None` when it has no NUL.
fn c_name(bytes: &[u8]) -> Option<String> {
    let end = bytes.iter().position(|&b| b == 0)?;
    Some(String::from_utf8_lossy(&bytes[..end]).into_owned())
}
