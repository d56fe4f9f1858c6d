//! The guest's network as its own /proc and /sys show it: the oracle's
//! `socket`, `iface`, `inet`, `inet6` and `net-end` lines (format in
//! `scripts/guest.sh`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// A line of `/proc/net/{tcp,tcp6,udp,udp6}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestSocket {
    /// `tcp` or `udp`.
    pub protocol: String,
    pub local: SocketAddr,
    pub peer: SocketAddr,
    /// `st`: `TCP_*`.
    pub state: u8,
    /// 0 for a socket no file holds.
    pub inode: u64,
}

/// A device of `/sys/class/net`, with its addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestInterface {
    pub name: String,
    pub index: i32,
    /// As `address` shows it: hex bytes by colons.
    pub address: String,
    pub mtu: u32,
    pub flags: u32,
    pub link_type: u16,
    /// `ip -o -4 addr`'s addresses of the device: (address, prefix,
    /// label).
    pub ipv4: Vec<(Ipv4Addr, u8, String)>,
    /// `/proc/net/if_inet6`'s: (address, prefix, scope).
    pub ipv6: Vec<(Ipv6Addr, u32, u32)>,
}

/// The guest's network.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuestNetwork {
    pub sockets: Vec<GuestSocket>,
    /// By index.
    pub interfaces: Vec<GuestInterface>,
}

/// The lines as they are read.
#[derive(Default)]
pub struct NetworkItems {
    network: GuestNetwork,
    inet: Vec<(i32, Ipv4Addr, u8, String)>,
    inet6: Vec<(i32, Ipv6Addr, u32, u32)>,
    end: Option<[usize; 4]>,
}

impl NetworkItems {
    /// One line of `kind` (`socket`, `iface`, `inet`, `inet6`,
    /// `net-end`), without its kind.
    pub fn add(&mut self, kind: &str, rest: &str) -> Result<(), String> {
        if self.end.is_some() {
            return Err("after the net-end line".into());
        }
        let words: Vec<&str> = rest.split_whitespace().collect();
        match kind {
            "socket" => {
                let [protocol, _sl, local, peer, state, _queues, _timer, _retransmits, _uid, _timeout, inode, ..] =
                    words[..]
                else {
                    return Err("socket: too few fields".into());
                };
                let (protocol, v6) = match protocol {
                    "tcp" => ("tcp", false),
                    "tcp6" => ("tcp", true),
                    "udp" => ("udp", false),
                    "udp6" => ("udp", true),
                    other => return Err(format!("socket: protocol {other:?}")),
                };
                self.network.sockets.push(GuestSocket {
                    protocol: protocol.into(),
                    local: endpoint(local, v6)?,
                    peer: endpoint(peer, v6)?,
                    state: u8::from_str_radix(state, 16).map_err(|_| "socket state")?,
                    inode: inode.parse().map_err(|_| "socket inode")?,
                });
                Ok(())
            }
            "iface" => {
                let [name, index, address, mtu, flags, link_type] = words[..] else {
                    return Err("iface: not NAME INDEX ADDRESS MTU FLAGS TYPE".into());
                };
                self.network.interfaces.push(GuestInterface {
                    name: name.into(),
                    index: index.parse().map_err(|_| "iface index")?,
                    address: address.into(),
                    mtu: mtu.parse().map_err(|_| "iface mtu")?,
                    flags: u32::from_str_radix(flags.trim_start_matches("0x"), 16)
                        .map_err(|_| "iface flags")?,
                    link_type: link_type.parse().map_err(|_| "iface type")?,
                    ipv4: Vec::new(),
                    ipv6: Vec::new(),
                });
                Ok(())
            }
            "inet" => {
                // `1: lo    inet 127.0.0.1/8 scope host lo\       valid_lft ...`
                let index = words.first().and_then(|w| w.strip_suffix(':'));
                let at = words.iter().position(|w| *w == "inet");
                let label = words.iter().position(|w| *w == "scope").map(|s| s + 2);
                let (Some(index), Some(at), Some(label)) = (index, at, label) else {
                    return Err("inet: not ip -o -4 addr's line".into());
                };
                let (address, prefix) = words[at + 1].split_once('/').ok_or("inet: no /")?;
                let label = words.get(label).ok_or("inet: no label")?;
                self.inet.push((
                    index.parse().map_err(|_| "inet index")?,
                    address.parse().map_err(|_| "inet address")?,
                    prefix.parse().map_err(|_| "inet prefix")?,
                    label.trim_end_matches('\\').into(),
                ));
                Ok(())
            }
            "inet6" => {
                let [address, index, prefix, scope, _flags, _name] = words[..] else {
                    return Err("inet6: not if_inet6's line".into());
                };
                let hex = |s: &str| u32::from_str_radix(s, 16).map_err(|_| "inet6: not hex");
                let address = u128::from_str_radix(address, 16).map_err(|_| "inet6 address")?;
                self.inet6.push((
                    hex(index)? as i32,
                    Ipv6Addr::from(address),
                    hex(prefix)?,
                    hex(scope)?,
                ));
                Ok(())
            }
            "net-end" => {
                let mut counts = [0; 4];
                for (count, key) in
                    counts
                        .iter_mut()
                        .zip(["sockets", "interfaces", "inet", "inet6"])
                {
                    let value = words
                        .iter()
                        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
                        .ok_or(format!("net-end: no {key}="))?;
                    *count = value.parse().map_err(|_| format!("net-end {key}"))?;
                }
                self.end = Some(counts);
                Ok(())
            }
            other => Err(format!("not a network line: {other}")),
        }
    }

    /// The network, once the counts agree with the end line.
    pub fn finish(mut self) -> Result<GuestNetwork, String> {
        let end = self.end.ok_or("no net-end line in the serial log")?;
        let counted = [
            self.network.sockets.len(),
            self.network.interfaces.len(),
            self.inet.len(),
            self.inet6.len(),
        ];
        if counted != end {
            return Err(format!(
                "the guest printed {end:?} sockets, devices, IPv4 and IPv6 addresses; {counted:?} read"
            ));
        }
        let interfaces = &mut self.network.interfaces;
        for (index, address, prefix, label) in self.inet {
            let device = interfaces.iter_mut().find(|i| i.index == index);
            device
                .ok_or(format!("inet: no device {index}"))?
                .ipv4
                .push((address, prefix, label));
        }
        for (index, address, prefix, scope) in self.inet6 {
            let device = interfaces.iter_mut().find(|i| i.index == index);
            device
                .ok_or(format!("inet6: no device {index}"))?
                .ipv6
                .push((address, prefix, scope));
        }
        interfaces.sort_by_key(|i| i.index);
        Ok(self.network)
    }
}

/// `/proc/net/tcp`'s `HEX:PORT`: an IPv4 address as the u32 the kernel
/// holds (network order, printed as a host-order number: bytes reversed),
/// IPv6 as four such words.
fn endpoint(text: &str, v6: bool) -> Result<SocketAddr, String> {
    let (address, port) = text.split_once(':').ok_or("endpoint: no port")?;
    let port = u16::from_str_radix(port, 16).map_err(|_| "endpoint port")?;
    let words = address
        .as_bytes()
        .chunks(8)
        .map(|w| {
            let w = std::str::from_utf8(w).map_err(|_| "endpoint")?;
            u32::from_str_radix(w, 16)
                .map(u32::to_le_bytes)
                .map_err(|_| "endpoint address")
        })
        .collect::<Result<Vec<_>, _>>()?;
    let ip = match (v6, &words[..]) {
        (false, [w]) => IpAddr::from(*w),
        (true, [a, b, c, d]) => {
            let mut bytes = [0; 16];
            for (chunk, w) in bytes.chunks_mut(4).zip([a, b, c, d]) {
                chunk.copy_from_slice(w);
            }
            IpAddr::from(bytes)
        }
        _ => return Err(format!("endpoint {text:?}")),
    };
    Ok(SocketAddr::new(ip, port))
}
