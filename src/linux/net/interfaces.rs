//! The network namespaces, their devices and the devices' addresses, a
//! level of every list in one batch: the namespaces' list, then each
//! namespace's devices, then each device's hardware address and address
//! lists, then their addresses a node of each list at a time.

use rustc_hash::{FxHashMap, FxHashSet};

use super::{c_name, kernel_pointer, Interface, Interfaces, Ipv4Address, Ipv6Address, NetFailure};
use crate::join_all;
use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::{InterfaceLayout, Ipv6Layout};
use crate::linux::structures::list::{self, Budget, Linked, Objects};
use crate::linux::Kernel;

/// `MAX_ADDR_LEN`: the longest hardware address a device has.
const MAX_ADDR_LEN: u8 = 32;

/// A network namespace as read: its `struct net` and its inode.
#[derive(Debug, Clone)]
pub(super) struct Namespace {
    pub(super) address: u64,
    pub(super) inum: u32,
    /// The bytes of its span (`InterfaceLayout::net_span`).
    bytes: Vec<u8>,
}

/// Where the member at offset `member` lies in the bytes of an object
/// read from offset `start`.
fn at(start: u64, member: u64) -> u64 {
    member.wrapping_sub(start)
}

/// As many objects of `size` bytes as the target's memory holds.
fn holds(kmem: &KernelMemory<'_>, size: u64) -> usize {
    usize::try_from((kmem.limit / size.max(1)).max(1)).unwrap_or(usize::MAX)
}

/// The failures of a list's walk.
fn failures(linked: &mut Linked) -> impl Iterator<Item = NetFailure> + '_ {
    linked
        .failed
        .drain(..)
        .map(|f| NetFailure::new(f.address, f.reason))
}

/// Every network namespace on `net_namespace_list` at `head`.
pub(super) async fn namespaces(
    kmem: &KernelMemory<'_>,
    layout: &InterfaceLayout,
    head: Option<u64>,
) -> (Vec<Namespace>, Vec<NetFailure>) {
    let Some(head) = head else {
        let why = "net_namespace_list is not in kallsyms: no network namespace can be read";
        return (Vec::new(), vec![NetFailure::new(0, why)]);
    };
    let span = layout.net_span();
    let objects = Objects {
        node: layout.net_list,
        span,
        what: "network namespace",
    };
    let max = holds(kmem, layout.net_size);
    let mut linked = list::objects(kmem, &layout.list, head, objects, max).await;
    let failed = failures(&mut linked).collect();
    let found = linked
        .objects
        .into_iter()
        .map(|(address, bytes)| Namespace {
            address,
            inum: bytes.u32_at(at(span.0, layout.net_inum)).unwrap_or(0),
            bytes,
        })
        .collect();
    (found, failed)
}

/// A device as read, before its addresses.
struct Device {
    interface: Interface,
    /// Its `in_device` and `inet6_dev` (0 for none), and its hardware
    /// address and length.
    ip: u64,
    ip6: u64,
    dev_addr: u64,
    addr_len: u8,
    /// The first of its IPv4 addresses (0 for none), and the links of
    /// its IPv6 addresses' list, once read.
    first_ipv4: u64,
    ipv6_links: Option<(u64, u64)>,
}

/// Every device of every namespace, with its addresses.
pub(super) async fn read(kernel: &Kernel) -> Interfaces {
    let layout = match &kernel.offsets.interfaces {
        Ok(layout) => layout,
        Err(e) => {
            let why = format!("network devices cannot be read: {e}");
            return Interfaces {
                failed: vec![NetFailure::new(0, why)],
                ..Interfaces::default()
            };
        }
    };
    let kmem = kernel.kernel_memory();
    walk(&kmem, layout, kernel.symbol(super::SYMBOLS[0])).await
}

/// Every device of every namespace on the list at `head`, with its
/// addresses.
pub(super) async fn walk(
    kmem: &KernelMemory<'_>,
    layout: &InterfaceLayout,
    head: Option<u64>,
) -> Interfaces {
    let (namespaces, mut failed) = namespaces(kmem, layout, head).await;
    let mut devices = devices(kmem, layout, &namespaces, &mut failed).await;
    heads(kmem, layout, &mut devices, &mut failed).await;
    addresses(kmem, layout, &mut devices, &mut failed).await;
    let mut interfaces: Vec<Interface> = devices.into_iter().map(|d| d.interface).collect();
    let order: FxHashMap<u32, usize> = namespaces
        .iter()
        .enumerate()
        .map(|(i, n)| (n.inum, i))
        .collect();
    interfaces.sort_by_key(|i| (order.get(&i.netns).copied(), i.index));
    Interfaces { interfaces, failed }
}

/// The devices of each namespace: its `dev_base_head` list, every
/// namespace's at once.
async fn devices(
    kmem: &KernelMemory<'_>,
    layout: &InterfaceLayout,
    namespaces: &[Namespace],
    failed: &mut Vec<NetFailure>,
) -> Vec<Device> {
    let net_start = layout.net_span().0;
    let span = layout.device_span();
    let objects = Objects {
        node: layout.device.list,
        span,
        what: "network device",
    };
    let budget = Budget::new(
        holds(kmem, layout.device.size),
        "in all namespaces (as many net_devices as the target's memory holds)",
    );
    let known = FxHashMap::default();
    let walks = namespaces.iter().map(|ns| {
        let head = at(net_start, layout.net_devices);
        let link = |member: u64| ns.bytes.u64_at(head + member).unwrap_or(0);
        let links = (link(layout.list.next), link(layout.list.prev));
        let head = ns.address + layout.net_devices;
        list::follow(kmem, &layout.list, head, links, objects, &known, &budget)
    });
    let lists = join_all(walks).await;
    let half = kmem.kernel_half();
    let mut devices = Vec::new();
    for (ns, mut linked) in namespaces.iter().zip(lists) {
        failed.extend(failures(&mut linked));
        for (address, bytes) in &linked.objects {
            match device(layout, span.0, bytes, ns.inum, half) {
                Ok(mut device) => {
                    device.interface.device = *address;
                    devices.push(device);
                }
                Err(why) => failed.push(NetFailure::new(*address, why)),
            }
        }
    }
    devices
}

/// A device from the bytes of its span (from offset `start`); why not,
/// when they do not make one.
fn device(
    layout: &InterfaceLayout,
    start: u64,
    bytes: &[u8],
    netns: u32,
    half: u64,
) -> Result<Device, String> {
    let d = &layout.device;
    let field = |member: u64, len: u64| bytes.bytes_at(at(start, member), len);
    let u32_at = |member: u64| bytes.u32_at(at(start, member)).unwrap_or(0);
    let name = field(d.name, d.name_len)
        .and_then(c_name)
        .ok_or("a network device whose name has no NUL")?;
    let index = u32_at(d.index) as i32;
    if index <= 0 {
        return Err(format!("network device {name:?} has index {index}"));
    }
    let addr_len = field(d.addr_len, 1).map_or(0, |b| b[0]);
    if addr_len > MAX_ADDR_LEN {
        return Err(format!(
            "network device {name:?} has a hardware address of {addr_len} bytes (at most {MAX_ADDR_LEN})"
        ));
    }
    let pointer = |member: u64| kernel_pointer(bytes.u64_at(at(start, member)), half).unwrap_or(0);
    let link_type = field(d.link_type, 2).map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
    Ok(Device {
        interface: Interface {
            device: 0,
            netns,
            index,
            name,
            flags: u32_at(d.flags),
            mtu: u32_at(d.mtu),
            link_type,
            hardware: Ok(Vec::new()),
            ipv4: Vec::new(),
            ipv6: Vec::new(),
        },
        ip: pointer(d.ip),
        ip6: d.ip6.map_or(0, pointer),
        dev_addr: pointer(d.dev_addr),
        addr_len,
        first_ipv4: 0,
        ipv6_links: None,
    })
}

/// Each device's hardware address and the heads of its address lists, in
/// one batch.
async fn heads(
    kmem: &KernelMemory<'_>,
    layout: &InterfaceLayout,
    devices: &mut [Device],
    failed: &mut Vec<NetFailure>,
) {
    let list_len = layout.list.len() as usize;
    // The three reads of a device at once: all in one batch.
    let reads = devices.iter().map(|d| async move {
        let hardware = async {
            match (d.dev_addr, d.addr_len) {
                (_, 0) => Ok(Vec::new()),
                (0, _) => Err("its hardware address is at no kernel address".to_string()),
                (va, len) => kmem.read_vec(va, usize::from(len)).await,
            }
        };
        let ip = async {
            match d.ip {
                0 => None,
                va => Some(kmem.read_vec(va + layout.ipv4.list, 8).await),
            }
        };
        let ip6 = async {
            match (d.ip6, layout.ipv6) {
                (0, _) | (_, None) => None,
                (va, Some(v6)) => Some(kmem.read_vec(va + v6.list, list_len).await),
            }
        };
        futures::join!(hardware, ip, ip6)
    });
    let read = join_all(reads).await;
    let half = kmem.kernel_half();
    for (d, (hardware, ip, ip6)) in devices.iter_mut().zip(read) {
        d.interface.hardware = hardware;
        match ip {
            Some(Ok(bytes)) => d.first_ipv4 = kernel_pointer(bytes.u64_at(0), half).unwrap_or(0),
            Some(Err(why)) => failed.push(NetFailure::new(d.ip, format!("in_device: {why}"))),
            None => {}
        }
        match ip6 {
            Some(Ok(bytes)) => {
                let link = |at: u64| bytes.u64_at(at).unwrap_or(0);
                d.ipv6_links = Some((link(layout.list.next), link(layout.list.prev)));
            }
            Some(Err(why)) => failed.push(NetFailure::new(d.ip6, format!("inet6_dev: {why}"))),
            None => {}
        }
    }
}

/// Every device's addresses: the IPv4 lists (each `ifa_next` a node at a
/// time) beside the IPv6 lists, a node of each list in each batch.
async fn addresses(
    kmem: &KernelMemory<'_>,
    layout: &InterfaceLayout,
    devices: &mut [Device],
    failed: &mut Vec<NetFailure>,
) {
    let ipv4 = ipv4_lists(kmem, layout, devices);
    let ipv6 = ipv6_lists(kmem, layout, devices);
    let ((v4, mut v4_failed), (v6, mut v6_failed)) = futures::join!(ipv4, ipv6);
    failed.append(&mut v4_failed);
    failed.append(&mut v6_failed);
    for (d, (v4, v6)) in devices.iter_mut().zip(v4.into_iter().zip(v6)) {
        d.interface.ipv4 = v4;
        d.interface.ipv6 = v6;
    }
}

/// The IPv4 addresses of each device, its singly linked `ifa_list` read a
/// node of every device's at a time; as many nodes in all as the target's
/// memory holds, each once.
async fn ipv4_lists(
    kmem: &KernelMemory<'_>,
    layout: &InterfaceLayout,
    devices: &[Device],
) -> (Vec<Vec<Ipv4Address>>, Vec<NetFailure>) {
    let (start, len) = layout.ipv4_span();
    let a = &layout.ipv4;
    let half = kmem.kernel_half();
    let max = holds(kmem, a.size);
    let mut found = vec![Vec::new(); devices.len()];
    let mut failed = Vec::new();
    let mut seen = FxHashSet::default();
    let mut next: Vec<u64> = devices.iter().map(|d| d.first_ipv4).collect();
    while next.iter().any(|&n| n != 0) {
        for n in next.iter_mut().filter(|n| **n != 0) {
            if !seen.insert(*n) {
                let why = "IPv4 address reached twice (a loop, or a list changing while read): the walk stopped there";
                failed.push(NetFailure::new(*n, why));
                *n = 0;
            } else if seen.len() > max {
                let why = format!("more than {max} IPv4 addresses (as many as the target's memory holds): the rest not read");
                failed.push(NetFailure::new(*n, why));
                *n = 0;
            }
        }
        let reads = next.iter().map(|&n| async move {
            match n {
                0 => None,
                va => Some(kmem.read_vec(va.wrapping_add(start), len).await),
            }
        });
        let read = join_all(reads).await;
        for ((n, read), (d, out)) in next
            .iter_mut()
            .zip(read)
            .zip(devices.iter().zip(&mut found))
        {
            let Some(read) = read else { continue };
            let address = *n;
            *n = 0;
            let bytes = match read {
                Ok(bytes) => bytes,
                Err(why) => {
                    failed.push(NetFailure::new(address, format!("IPv4 address: {why}")));
                    continue;
                }
            };
            let field = |member: u64, len: u64| bytes.bytes_at(at(start, member), len);
            let prefix = field(a.prefix, 1).map_or(0, |b| b[0]);
            let label = field(a.label, a.label_len).and_then(c_name);
            match (label, prefix) {
                (Some(label), 0..=32) => out.push(Ipv4Address {
                    address: field(a.local, 4)
                        .map_or([0; 4], |b| [b[0], b[1], b[2], b[3]])
                        .into(),
                    prefix,
                    scope: field(a.scope, 1).map_or(0, |b| b[0]),
                    label,
                }),
                (None, _) => failed.push(NetFailure::new(
                    address,
                    format!(
                        "an IPv4 address of {} whose label has no NUL",
                        d.interface.name
                    ),
                )),
                (_, prefix) => failed.push(NetFailure::new(
                    address,
                    format!(
                        "an IPv4 address of {} with prefix /{prefix}",
                        d.interface.name
                    ),
                )),
            }
            *n = kernel_pointer(bytes.u64_at(at(start, a.next)), half).unwrap_or(0);
        }
    }
    (found, failed)
}

/// The IPv6 addresses of each device: its `inet6_dev.addr_list`, every
/// device's at once.
async fn ipv6_lists(
    kmem: &KernelMemory<'_>,
    layout: &InterfaceLayout,
    devices: &[Device],
) -> (Vec<Vec<Ipv6Address>>, Vec<NetFailure>) {
    let mut failed = Vec::new();
    let Some(v6) = layout.ipv6 else {
        return (vec![Vec::new(); devices.len()], failed);
    };
    let span = InterfaceLayout::ipv6_span(&v6, &layout.list);
    let objects = Objects {
        node: v6.node,
        span,
        what: "IPv6 address",
    };
    let budget = Budget::new(
        holds(kmem, v6.size),
        "in all devices (as many inet6_ifaddrs as the target's memory holds)",
    );
    let known = FxHashMap::default();
    let walks = devices.iter().map(|d| async {
        match d.ipv6_links {
            None => Linked::default(),
            Some(links) => {
                let head = d.ip6 + v6.list;
                list::follow(kmem, &layout.list, head, links, objects, &known, &budget).await
            }
        }
    });
    let lists = join_all(walks).await;
    let mut found = Vec::new();
    for (d, mut linked) in devices.iter().zip(lists) {
        failed.extend(failures(&mut linked));
        let mut addresses = Vec::new();
        for (address, bytes) in &linked.objects {
            match ipv6_address(&v6, span.0, bytes) {
                Some(a) => addresses.push(a),
                None => failed.push(NetFailure::new(
                    *address,
                    format!(
                        "an IPv6 address of {} with a prefix past /128",
                        d.interface.name
                    ),
                )),
            }
        }
        found.push(addresses);
    }
    (found, failed)
}

/// An IPv6 address from the bytes of its span; `None` when its prefix
/// cannot be one.
fn ipv6_address(v6: &Ipv6Layout, start: u64, bytes: &[u8]) -> Option<Ipv6Address> {
    let u32_at = |member: u64| bytes.u32_at(at(start, member));
    let raw: [u8; 16] = bytes.bytes_at(at(start, v6.addr), 16)?.try_into().ok()?;
    let prefix = u32_at(v6.prefix)?;
    (prefix <= 128).then(|| Ipv6Address {
        address: raw.into(),
        prefix,
        scope: u32_at(v6.scope).unwrap_or(0),
        flags: u32_at(v6.flags).unwrap_or(0),
    })
}
