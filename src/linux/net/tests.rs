//! The network's walks on made-up memory whose layout is no kernel's: a
//! namespace with devices and addresses, and the garbage, loops and
//! impossible sockets a walk must name and leave out.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use super::interfaces::walk;
use super::sockets::{Found, Sock};
use super::*;
use crate::linux::fake_memory::FakeMemory;
use crate::linux::offsets::{
    DeviceLayout, InterfaceLayout, Ipv4Layout, Ipv6Layout, ListLayout, SockLayout,
};

const LIST: ListLayout = ListLayout { next: 0, prev: 8 };

/// A made-up `net` (list at 16, devices at 48, inum at 96), device,
/// `in_ifaddr` and `inet6_ifaddr`.
const LAYOUT: InterfaceLayout = InterfaceLayout {
    list: LIST,
    net_list: 16,
    net_devices: 48,
    net_inum: 96,
    net_size: 128,
    device: DeviceLayout {
        name: 0,
        name_len: 16,
        list: 32,
        index: 48,
        flags: 52,
        mtu: 56,
        link_type: 60,
        addr_len: 62,
        dev_addr: 64,
        ip: 72,
        ip6: Some(80),
        size: 128,
    },
    ipv4: Ipv4Layout {
        list: 8,
        next: 0,
        local: 8,
        prefix: 12,
        scope: 13,
        label: 16,
        label_len: 16,
        size: 64,
    },
    ipv6: Some(Ipv6Layout {
        list: 16,
        addr: 0,
        prefix: 16,
        scope: 20,
        flags: 24,
        node: 32,
        size: 64,
    }),
};

/// A namespace list with one namespace (inum 4026531840) and the devices
/// `devices` made by `device`: its head, and the memory.
struct Net {
    mem: FakeMemory,
    head: u64,
    net: u64,
}

impl Net {
    fn new() -> Net {
        let mut mem = FakeMemory::new(1 << 20);
        let head = mem.alloc(16);
        let net = mem.alloc(128);
        mem.put(head, net + 16);
        mem.put(head + 8, net + 16);
        mem.put(net + 16, head);
        mem.put(net + 24, head);
        mem.put(net + 48, net + 48);
        mem.put(net + 56, net + 48);
        mem.put_u32(net + 96, 4_026_531_840);
        Net { mem, head, net }
    }

    /// A device named `name` at the end of the namespace's list, with
    /// index `index` and a 6-byte hardware address: its address.
    fn device(&mut self, name: &[u8], index: u32) -> u64 {
        let dev = self.mem.alloc(128);
        self.mem.put_bytes(dev, name);
        self.mem.put_u32(dev + 48, index);
        self.mem.put_u32(dev + 52, 0x1003);
        self.mem.put_u32(dev + 56, 1500);
        self.mem.put_bytes(dev + 60, &[1, 0, 6]);
        let hw = self.mem.alloc(8);
        self.mem.put_bytes(hw, &[2, 0, 0x5e, 0x10, 0, index as u8]);
        self.mem.put(dev + 64, hw);
        // Linked last: the head's prev, the old last's next.
        let head = self.net + 48;
        let last = u64::from_le_bytes(self.bytes(head + 8));
        self.mem.put(last, dev + 32);
        self.mem.put(dev + 32, head);
        self.mem.put(dev + 40, last);
        self.mem.put(head + 8, dev + 32);
        dev
    }

    /// IPv4 addresses 10.0.0.N/24 for each N in `last`, linked in that
    /// order on `dev`: their addresses.
    fn ipv4(&mut self, dev: u64, last: &[u8]) -> Vec<u64> {
        let in_device = self.mem.alloc(16);
        self.mem.put(dev + 72, in_device);
        let nodes: Vec<u64> = last.iter().map(|_| self.mem.alloc(64)).collect();
        self.mem
            .put(in_device + 8, nodes.first().copied().unwrap_or(0));
        for (i, (&node, &n)) in nodes.iter().zip(last).enumerate() {
            self.mem.put(node, nodes.get(i + 1).copied().unwrap_or(0));
            self.mem.put_bytes(node + 8, &[10, 0, 0, n, 24, 0]);
            self.mem.put_bytes(node + 16, b"eth0\0");
        }
        nodes
    }

    fn bytes(&self, va: u64) -> [u8; 8] {
        let pa = (va - crate::linux::fake_memory::DIRECT) as usize;
        self.mem.bytes[pa..pa + 8].try_into().unwrap()
    }

    fn walk(&self) -> (Interfaces, u64) {
        self.mem
            .read(async |kmem| walk(kmem, &LAYOUT, Some(self.head)).await)
    }
}

#[test]
fn devices_and_their_addresses_are_read_a_level_of_every_list_at_a_time() {
    let mut net = Net::new();
    let lo = net.device(b"lo\0", 1);
    let eth = net.device(b"eth0\0", 2);
    net.ipv4(eth, &[5, 6, 7]);
    // One IPv6 address on lo.
    let inet6 = net.mem.alloc(32);
    net.mem.put(lo + 80, inet6);
    let a6 = net.mem.alloc(64);
    net.mem.put_bytes(a6, &Ipv6Addr::LOCALHOST.octets());
    net.mem.put_u32(a6 + 16, 128);
    net.mem.put_u32(a6 + 20, 0x10);
    net.mem.put_u32(a6 + 24, 0x80);
    net.mem.put(inet6 + 16, a6 + 32);
    net.mem.put(inet6 + 24, a6 + 32);
    net.mem.put(a6 + 32, inet6 + 16);
    net.mem.put(a6 + 40, inet6 + 16);
    let (found, calls) = net.walk();
    assert_eq!(found.failed, vec![]);
    let names: Vec<_> = found
        .interfaces
        .iter()
        .map(|i| (i.index, i.name.as_str()))
        .collect();
    assert_eq!(names, [(1, "lo"), (2, "eth0")]);
    let eth0 = &found.interfaces[1];
    assert_eq!(eth0.hardware, Ok(vec![2, 0, 0x5e, 0x10, 0, 2]));
    assert_eq!(
        (eth0.mtu, eth0.flags, eth0.link_type, eth0.netns),
        (1500, 0x1003, 1, 4_026_531_840)
    );
    let v4: Vec<_> = eth0.ipv4.iter().map(|a| (a.address, a.prefix)).collect();
    assert_eq!(v4, [5, 6, 7].map(|n| (Ipv4Addr::new(10, 0, 0, n), 24)));
    assert_eq!(
        found.interfaces[0].ipv6,
        [Ipv6Address {
            address: Ipv6Addr::LOCALHOST,
            prefix: 128,
            scope: 0x10,
            flags: 0x80
        }]
    );
    // Head; namespace; both devices (the list's two ends); hardware
    // addresses and list heads; then eth0's three IPv4 addresses a node a
    // batch (lo's IPv6 address beside the first).
    assert_eq!(calls, 4 + 3);
}

#[test]
fn an_address_list_that_loops_is_cut_and_each_address_shown_once() {
    let mut net = Net::new();
    let eth = net.device(b"eth0\0", 2);
    let nodes = net.ipv4(eth, &[5, 6]);
    // The second links back to the first.
    net.mem.put(nodes[1], nodes[0]);
    let (found, calls) = net.walk();
    assert_eq!(found.interfaces[0].ipv4.len(), 2);
    assert_eq!(found.failed.len(), 1, "{:?}", found.failed);
    assert_eq!(found.failed[0].address, nodes[0]);
    assert!(
        found.failed[0].reason.contains("reached twice"),
        "{}",
        found.failed[0]
    );
    assert_eq!(calls, 4 + 2);
}

#[test]
fn devices_that_make_no_sense_are_failures_not_rows() {
    let mut net = Net::new();
    let nameless = net.device(&[b'x'; 16], 3);
    let zero = net.device(b"zero\0", 0);
    let wide = net.device(b"wide\0", 4);
    net.mem.put_bytes(wide + 62, &[33]);
    let good = net.device(b"good\0", 5);
    // An address with an impossible prefix, and a label with no NUL.
    let nodes = net.ipv4(good, &[1, 2]);
    net.mem.put_bytes(nodes[0] + 12, &[33]);
    net.mem.put_bytes(nodes[1] + 16, &[b'y'; 16]);
    let (found, _) = net.walk();
    let names: Vec<_> = found.interfaces.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["good"]);
    assert_eq!(found.interfaces[0].ipv4, []);
    let failed: Vec<_> = found.failed.iter().map(|f| f.address).collect();
    assert_eq!(failed, [nameless, zero, wide, nodes[0], nodes[1]]);
}

#[test]
fn no_namespace_list_in_kallsyms_is_said() {
    let net = Net::new();
    let (found, calls) = net.mem.read(async |kmem| walk(kmem, &LAYOUT, None).await);
    assert_eq!(found.interfaces, []);
    assert!(found.failed[0].reason.contains("net_namespace_list"));
    assert_eq!(calls, 0);
}

/// A made-up `struct sock`: sock_common's fields, then `sk_socket`.
const SOCK: SockLayout = SockLayout {
    daddr: 0,
    rcv_saddr: 4,
    dport: 8,
    num: 10,
    family: 12,
    state: 14,
    prot: 16,
    v6: Some((24, 40)),
    net: Some(56),
    socket: 64,
};
const TCP_PROT: u64 = 0xffff_ffff_8200_0000;
const UDP6_PROT: u64 = 0xffff_ffff_8200_1000;
const SOCKET: u64 = 0xffff_8880_0001_0000;
const PROTOCOLS: [(u64, Protocol, u16); 2] =
    [(TCP_PROT, Protocol::Tcp, 2), (UDP6_PROT, Protocol::Udp, 10)];

/// A sock of `prot`, family, state, IPv4 addresses and ports.
fn sock(prot: u64, family: u16, state: u8) -> Vec<u8> {
    let mut b = vec![0u8; 72];
    b[0..4].copy_from_slice(&[10, 0, 0, 9]);
    b[4..8].copy_from_slice(&[127, 0, 0, 1]);
    b[8..10].copy_from_slice(&443u16.to_be_bytes());
    b[10..12].copy_from_slice(&7001u16.to_le_bytes());
    b[12..14].copy_from_slice(&family.to_le_bytes());
    b[14] = state;
    b[16..24].copy_from_slice(&prot.to_le_bytes());
    b[40..56].copy_from_slice(&"::ffff:127.0.0.1".parse::<Ipv6Addr>().unwrap().octets());
    b[56..64].copy_from_slice(&0xffff_8880_0002_0000u64.to_le_bytes());
    b[64..72].copy_from_slice(&SOCKET.to_le_bytes());
    b
}

fn decode(bytes: &[u8]) -> Result<Option<Found>, String> {
    let sock = Sock {
        layout: &SOCK,
        start: 0,
        bytes,
    };
    sock.socket(SOCKET, &PROTOCOLS)
}

#[test]
fn sockets_are_told_by_their_protocol_and_read_in_network_order() {
    let (protocol, state, local, peer, net) = decode(&sock(TCP_PROT, 2, 1)).unwrap().unwrap();
    assert_eq!((protocol, state), (Protocol::Tcp, 1));
    assert_eq!(local, "127.0.0.1:7001".parse::<SocketAddr>().unwrap());
    assert_eq!(peer, "10.0.0.9:443".parse::<SocketAddr>().unwrap());
    assert_eq!(net, Some(0xffff_8880_0002_0000));
    // IPv6, with an IPv4-mapped local address; a UDP socket not connected.
    let (_, state, local, _, _) = decode(&sock(UDP6_PROT, 10, TCP_CLOSE)).unwrap().unwrap();
    assert_eq!(state, TCP_CLOSE);
    assert_eq!(
        local,
        "[::ffff:127.0.0.1]:7001".parse::<SocketAddr>().unwrap()
    );
    // Another protocol (a Unix socket's, say): not a row, not a failure.
    assert_eq!(decode(&sock(0xffff_ffff_8200_2000, 1, 1)), Ok(None));
}

#[test]
fn impossible_sockets_are_failures() {
    // A state TCP has not, one UDP has not, a family the protocol has
    // not, and a sock that does not point back at its socket.
    for (bytes, why) in [
        (sock(TCP_PROT, 2, 0), "state 0"),
        (sock(TCP_PROT, 2, 13), "state 13"),
        (sock(UDP6_PROT, 10, TCP_LISTEN), "state 10"),
        (sock(TCP_PROT, 10, 1), "family 10"),
        (sock(UDP6_PROT, 45, 7), "family 45"),
    ] {
        let error = decode(&bytes).unwrap_err();
        assert!(error.contains(why), "{error}");
    }
    let mut stray = sock(TCP_PROT, 2, 1);
    stray[64..72].copy_from_slice(&(SOCKET + 64).to_le_bytes());
    assert!(decode(&stray).unwrap_err().contains("sk_socket"));
}

#[test]
fn only_sockets_in_a_table_are_listed() {
    let socket = |protocol, state, port| InetSocket {
        sock: 0,
        protocol,
        state,
        local: SocketAddr::from(([0, 0, 0, 0], port)),
        peer: SocketAddr::from(([0, 0, 0, 0], 0)),
        inode: 1,
        netns: None,
        owners: Vec::new(),
    };
    assert!(socket(Protocol::Tcp, TCP_LISTEN, 80).is_listed());
    assert!(!socket(Protocol::Tcp, TCP_CLOSE, 80).is_listed());
    assert!(socket(Protocol::Udp, TCP_CLOSE, 53).is_listed());
    assert!(!socket(Protocol::Udp, TCP_CLOSE, 0).is_listed());
}
