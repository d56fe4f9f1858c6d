//! The TCP and UDP sockets the processes hold: the open files (with the
//! namespaces beside them), then every socket's `struct sock` in one
//! batch.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::interfaces::namespaces;
use super::{
    InetSocket, NetFailure, Protocol, SocketOwner, Sockets, TCP_CLOSE, TCP_ESTABLISHED,
    TCP_MAX_STATE,
};
use crate::join_all;
use crate::linux::kmem::Fields;
use crate::linux::offsets::SockLayout;
use crate::linux::Kernel;

/// `AF_INET`, `AF_INET6`.
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

/// A socket an fd holds, before its `sock` is read.
struct Held {
    socket: u64,
    inode: u64,
    owners: Vec<SocketOwner>,
}

/// What a `sock`'s `sk_prot` says it is: the protocol and the family it
/// must have.
fn protocols(kernel: &Kernel) -> Vec<(u64, Protocol, u16)> {
    let [_, tcp, udp, tcp6, udp6] = super::SYMBOLS;
    [
        (tcp, Protocol::Tcp, AF_INET),
        (udp, Protocol::Udp, AF_INET),
        (tcp6, Protocol::Tcp, AF_INET6),
        (udp6, Protocol::Udp, AF_INET6),
    ]
    .into_iter()
    .filter_map(|(name, p, family)| Some((kernel.symbol(name)?, p, family)))
    .collect()
}

/// Every TCP and UDP socket the processes hold.
pub(super) async fn read(kernel: &Kernel) -> Sockets {
    let (layout, interfaces) = match (&kernel.offsets.sockets, &kernel.offsets.interfaces) {
        (Ok(layout), interfaces) => (layout, interfaces.as_ref().ok()),
        (Err(e), _) => {
            let why = format!("sockets cannot be read: {e}");
            return Sockets {
                failed: vec![NetFailure::new(0, why)],
                ..Sockets::default()
            };
        }
    };
    let kmem = kernel.kernel_memory();
    let head = kernel.symbol(super::SYMBOLS[0]);
    let namespaces = async {
        match interfaces {
            Some(layout) => namespaces(&kmem, layout, head).await,
            None => Default::default(),
        }
    };
    let (files, (namespaces, mut failed)) =
        futures::join!(kernel.open_files_async(None), namespaces);
    failed.extend(
        files
            .list
            .failed
            .iter()
            .map(|f| NetFailure::new(f.address, format!("process list: {}", f.reason)))
            .chain(
                files
                    .failed
                    .iter()
                    .map(|f| NetFailure::new(0, f.to_string())),
            ),
    );
    let mut held: BTreeMap<u64, Held> = BTreeMap::new();
    for process in &files.processes {
        for fd in &process.fds {
            let Some(socket) = fd.socket.filter(|s| s.sock != 0) else {
                continue;
            };
            let entry = held.entry(socket.sock).or_insert_with(|| Held {
                socket: socket.address,
                inode: fd.inode,
                owners: Vec::new(),
            });
            if entry.socket != socket.address {
                failed.push(NetFailure::new(
                    socket.sock,
                    format!(
                        "a sock held by the sockets at {:#x} and {:#x}: left with the first",
                        entry.socket, socket.address
                    ),
                ));
                continue;
            }
            entry.owners.push(SocketOwner {
                pid: process.pid,
                name: process.name.clone(),
                fd: fd.fd,
            });
        }
    }
    let (start, len) = layout.span();
    let reads = held
        .keys()
        .map(|&sock| kmem.read_vec(sock.wrapping_add(start), len));
    let read = join_all(reads).await;
    let protocols = protocols(kernel);
    let netns: BTreeMap<u64, u32> = namespaces.iter().map(|n| (n.address, n.inum)).collect();
    let mut sockets = Sockets {
        failed,
        ..Sockets::default()
    };
    for ((sock, held), bytes) in held.into_iter().zip(read) {
        let found = bytes.and_then(|bytes| {
            let fields = Sock {
                layout,
                start,
                bytes: &bytes,
            };
            fields.socket(held.socket, &protocols)
        });
        match found {
            Ok(Some((protocol, state, local, peer, net))) => sockets.sockets.push(InetSocket {
                sock,
                protocol,
                state,
                local,
                peer,
                inode: held.inode,
                netns: net.and_then(|n| netns.get(&n).copied()),
                owners: held.owners,
            }),
            Ok(None) => sockets.others += 1,
            Err(why) => sockets.failed.push(NetFailure::new(sock, why)),
        }
    }
    sockets
        .sockets
        .sort_by_key(|s| (s.protocol, s.local.is_ipv6(), s.local, s.peer, s.sock));
    sockets
}

/// A `sock`'s span as read.
pub(super) struct Sock<'a> {
    pub(super) layout: &'a SockLayout,
    pub(super) start: u64,
    pub(super) bytes: &'a [u8],
}

/// A TCP or UDP socket's protocol, state, addresses and namespace.
pub(super) type Found = (Protocol, u8, SocketAddr, SocketAddr, Option<u64>);

impl Sock<'_> {
    fn field(&self, member: u64, len: u64) -> Option<&[u8]> {
        self.bytes.bytes_at(member.wrapping_sub(self.start), len)
    }

    fn u16_at(&self, member: u64) -> u16 {
        self.field(member, 2)
            .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]))
    }

    fn u64_at(&self, member: u64) -> u64 {
        self.bytes
            .u64_at(member.wrapping_sub(self.start))
            .unwrap_or(0)
    }

    fn ip(&self, family: u16, v4: u64, v6: Option<u64>) -> Result<IpAddr, String> {
        let bytes = match family {
            AF_INET => self
                .field(v4, 4)
                .map(|b| IpAddr::from(Ipv4Addr::new(b[0], b[1], b[2], b[3]))),
            _ => v6
                .and_then(|at| self.field(at, 16))
                .and_then(|b| <[u8; 16]>::try_from(b).ok())
                .map(|b| IpAddr::from(Ipv6Addr::from(b))),
        };
        bytes.ok_or_else(|| "an IPv6 socket on a kernel whose BTF has no IPv6 addresses".into())
    }

    /// The socket, when it is TCP or UDP (`None` for another kind); why
    /// not, when it does not point back at `socket` or its protocol,
    /// family and state disagree.
    pub(super) fn socket(
        &self,
        socket: u64,
        protocols: &[(u64, Protocol, u16)],
    ) -> Result<Option<Found>, String> {
        let l = self.layout;
        let back = self.u64_at(l.socket);
        if back != socket {
            return Err(format!(
                "its sk_socket is {back:#x}, not the socket {socket:#x} that holds it"
            ));
        }
        let prot = self.u64_at(l.prot);
        let Some(&(_, protocol, family)) = protocols.iter().find(|p| p.0 == prot) else {
            return Ok(None);
        };
        let claimed = self.u16_at(l.family);
        if claimed != family {
            return Err(format!(
                "a {protocol} socket of family {claimed}, not {family} as its protocol has"
            ));
        }
        let state = self.field(l.state, 1).map_or(0, |b| b[0]);
        let possible = match protocol {
            Protocol::Tcp => (1..=TCP_MAX_STATE).contains(&state),
            Protocol::Udp => state == TCP_CLOSE || state == TCP_ESTABLISHED,
        };
        if !possible {
            return Err(format!(
                "a {protocol} socket in state {state}, which {protocol} has not"
            ));
        }
        let v6 = l.v6;
        let local = self.ip(family, l.rcv_saddr, v6.map(|v| v.1))?;
        let peer = self.ip(family, l.daddr, v6.map(|v| v.0))?;
        let local_port = self.u16_at(l.num);
        let peer_port = self
            .field(l.dport, 2)
            .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
        let net = l.net.map(|at| self.u64_at(at));
        Ok(Some((
            protocol,
            state,
            SocketAddr::new(local, local_port),
            SocketAddr::new(peer, peer_port),
            net,
        )))
    }
}
