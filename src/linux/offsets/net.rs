//! The offsets the network is read by: each `struct sock` an fd holds
//! (its `sock_common`: addresses, ports, family, state, protocol), and the
//! network namespaces with their devices and addresses.

use crate::linux::find::btf::{Btf, BtfError};
use crate::linux::offsets::ListLayout;
use crate::linux::processes::span;

/// Offsets of a `struct sock`, from BTF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SockLayout {
    /// `sock_common`'s `skc_daddr` and `skc_rcv_saddr` (IPv4, network
    /// order), `skc_dport` (network order), `skc_num` (host order),
    /// `skc_family`, `skc_state` and `skc_prot`, in the `sock`.
    pub(crate) daddr: u64,
    pub(crate) rcv_saddr: u64,
    pub(crate) dport: u64,
    pub(crate) num: u64,
    pub(crate) family: u64,
    pub(crate) state: u64,
    pub(crate) prot: u64,
    /// `skc_v6_daddr` and `skc_v6_rcv_saddr`: a kernel built without
    /// IPv6 has neither.
    pub(crate) v6: Option<(u64, u64)>,
    /// `skc_net.net`: a kernel built without namespaces has none.
    pub(crate) net: Option<u64>,
    /// `sock.sk_socket`, which points back at the socket.
    pub(crate) socket: u64,
}

impl SockLayout {
    /// The offsets in `btf`.
    pub fn from_btf(btf: &Btf) -> Result<SockLayout, BtfError> {
        let common = btf.member_offset("sock", "__sk_common")?;
        let skc = |m: &str| btf.member_offset("sock_common", m).map(|at| common + at);
        let v6 = match (skc("skc_v6_daddr"), skc("skc_v6_rcv_saddr")) {
            (Ok(d), Ok(s)) => Some((d, s)),
            _ => None,
        };
        Ok(SockLayout {
            daddr: skc("skc_daddr")?,
            rcv_saddr: skc("skc_rcv_saddr")?,
            dport: skc("skc_dport")?,
            num: skc("skc_num")?,
            family: skc("skc_family")?,
            state: skc("skc_state")?,
            prot: skc("skc_prot")?,
            v6,
            net: skc("skc_net.net").ok(),
            socket: btf.member_offset("sock", "sk_socket")?,
        })
    }

    /// The bytes of a `sock` read: from its start to its last member
    /// read.
    pub(crate) fn span(&self) -> (u64, usize) {
        let mut members = vec![
            (self.daddr, 4),
            (self.rcv_saddr, 4),
            (self.dport, 2),
            (self.num, 2),
            (self.family, 2),
            (self.state, 1),
            (self.prot, 8),
            (self.socket, 8),
        ];
        if let Some((d, s)) = self.v6 {
            members.extend([(d, 16), (s, 16)]);
        }
        members.extend(self.net.map(|at| (at, 8)));
        span(&members)
    }
}

/// Offsets of the network namespaces, their devices and the devices'
/// addresses, from BTF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InterfaceLayout {
    pub(crate) list: ListLayout,
    /// `net.list` (on `net_namespace_list`), `net.dev_base_head`,
    /// `net.ns.inum` (the namespace's inode, as `/proc/PID/ns/net` names
    /// it).
    pub(crate) net_list: u64,
    pub(crate) net_devices: u64,
    pub(crate) net_inum: u64,
    pub(crate) net_size: u64,
    pub(crate) device: DeviceLayout,
    pub(crate) ipv4: Ipv4Layout,
    /// A kernel built without IPv6 has none.
    pub(crate) ipv6: Option<Ipv6Layout>,
}

/// Offsets of a `struct net_device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeviceLayout {
    /// `name` and its length (`IFNAMSIZ`).
    pub(crate) name: u64,
    pub(crate) name_len: u64,
    /// `dev_list`, `ifindex`, `flags`, `mtu`, `type`, `addr_len`,
    /// `dev_addr` (a pointer), `ip_ptr`, `ip6_ptr` (none without IPv6).
    pub(crate) list: u64,
    pub(crate) index: u64,
    pub(crate) flags: u64,
    pub(crate) mtu: u64,
    pub(crate) link_type: u64,
    pub(crate) addr_len: u64,
    pub(crate) dev_addr: u64,
    pub(crate) ip: u64,
    pub(crate) ip6: Option<u64>,
    pub(crate) size: u64,
}

/// Offsets of `struct in_device` and `struct in_ifaddr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ipv4Layout {
    /// `in_device.ifa_list`.
    pub(crate) list: u64,
    /// `in_ifaddr`'s `ifa_next`, `ifa_local`, `ifa_prefixlen`,
    /// `ifa_scope`, `ifa_label` and its length.
    pub(crate) next: u64,
    pub(crate) local: u64,
    pub(crate) prefix: u64,
    pub(crate) scope: u64,
    pub(crate) label: u64,
    pub(crate) label_len: u64,
    pub(crate) size: u64,
}

/// Offsets of `struct inet6_dev` and `struct inet6_ifaddr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ipv6Layout {
    /// `inet6_dev.addr_list`.
    pub(crate) list: u64,
    /// `inet6_ifaddr`'s `addr`, `prefix_len`, `scope`, `flags`,
    /// `if_list`.
    pub(crate) addr: u64,
    pub(crate) prefix: u64,
    pub(crate) scope: u64,
    pub(crate) flags: u64,
    pub(crate) node: u64,
    pub(crate) size: u64,
}

impl InterfaceLayout {
    /// The offsets in `btf`.
    pub fn from_btf(btf: &Btf) -> Result<InterfaceLayout, BtfError> {
        let net = |m: &str| btf.member_offset("net", m);
        let dev = |m: &str| btf.member_offset("net_device", m);
        let ifa = |m: &str| btf.member_offset("in_ifaddr", m);
        let ipv6 = match btf.member_offset("inet6_dev", "addr_list") {
            Ok(list) => {
                let ifa6 = |m: &str| btf.member_offset("inet6_ifaddr", m);
                Some(Ipv6Layout {
                    list,
                    addr: ifa6("addr")?,
                    prefix: ifa6("prefix_len")?,
                    scope: ifa6("scope")?,
                    flags: ifa6("flags")?,
                    node: ifa6("if_list")?,
                    size: btf.size_of("inet6_ifaddr")?,
                })
            }
            Err(_) => None,
        };
        Ok(InterfaceLayout {
            list: ListLayout::from_btf(btf)?,
            net_list: net("list")?,
            net_devices: net("dev_base_head")?,
            net_inum: net("ns.inum")?,
            net_size: btf.size_of("net")?,
            device: DeviceLayout {
                name: dev("name")?,
                name_len: btf.member_size("net_device", "name")?.min(64),
                list: dev("dev_list")?,
                index: dev("ifindex")?,
                flags: dev("flags")?,
                mtu: dev("mtu")?,
                link_type: dev("type")?,
                addr_len: dev("addr_len")?,
                dev_addr: dev("dev_addr")?,
                ip: dev("ip_ptr")?,
                ip6: ipv6.and(dev("ip6_ptr").ok()),
                size: btf.size_of("net_device")?,
            },
            ipv4: Ipv4Layout {
                list: btf.member_offset("in_device", "ifa_list")?,
                next: ifa("ifa_next")?,
                local: ifa("ifa_local")?,
                prefix: ifa("ifa_prefixlen")?,
                scope: ifa("ifa_scope")?,
                label: ifa("ifa_label")?,
                label_len: btf.member_size("in_ifaddr", "ifa_label")?.min(64),
                size: btf.size_of("in_ifaddr")?,
            },
            ipv6: ipv6.filter(|_| dev("ip6_ptr").is_ok()),
        })
    }

    /// The bytes of a `struct net` read.
    pub(crate) fn net_span(&self) -> (u64, usize) {
        let list = self.list.len();
        span(&[
            (self.net_list, list),
            (self.net_devices, list),
            (self.net_inum, 4),
        ])
    }

    /// The bytes of a `struct net_device` read.
    pub(crate) fn device_span(&self) -> (u64, usize) {
        let d = &self.device;
        let mut members = vec![
            (d.name, d.name_len),
            (d.list, self.list.len()),
            (d.index, 4),
            (d.flags, 4),
            (d.mtu, 4),
            (d.link_type, 2),
            (d.addr_len, 1),
            (d.dev_addr, 8),
            (d.ip, 8),
        ];
        members.extend(d.ip6.map(|at| (at, 8)));
        span(&members)
    }

    /// The bytes of a `struct in_ifaddr` read.
    pub(crate) fn ipv4_span(&self) -> (u64, usize) {
        let a = &self.ipv4;
        span(&[
            (a.next, 8),
            (a.local, 4),
            (a.prefix, 1),
            (a.scope, 1),
            (a.label, a.label_len),
        ])
    }

    /// The bytes of a `struct inet6_ifaddr` read.
    pub(crate) fn ipv6_span(ipv6: &Ipv6Layout, list: &ListLayout) -> (u64, usize) {
        span(&[
            (ipv6.addr, 16),
            (ipv6.prefix, 4),
            (ipv6.scope, 4),
            (ipv6.flags, 4),
            (ipv6.node, list.len()),
        ])
    }
}
