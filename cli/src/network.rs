//! `leechio sockets` and `leechio interfaces`: a Linux target's TCP and UDP
//! sockets (as `ss -tuanp`) and network devices with their addresses (as
//! `ip addr`), read from kernel memory with no profile.

use std::net::SocketAddr;
use std::process::ExitCode;

use leechio::linux::{state_name, InetSocket, Interface, NetFailure};
use serde_json::json;

use crate::device::open;
use crate::numbers::hex;
use crate::output::escape;
use crate::processes::KernelArgs;
use crate::{Cli, Failure};

/// `leechio sockets`.
#[derive(clap::Args, Debug)]
pub struct SocketsArgs {
    /// Also the sockets `ss -a` leaves out: created but never bound (a
    /// TCP socket closed, a UDP socket with no port)
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    kernel: KernelArgs,
}

/// `leechio interfaces`.
#[derive(clap::Args, Debug)]
pub struct InterfacesArgs {
    #[command(flatten)]
    kernel: KernelArgs,
}

/// Lists the TCP and UDP sockets: a table (protocol, state, local and
/// peer address, the processes and fds holding it), or one JSON object a
/// line. What could not be read goes to stderr, and the exit code is
/// then 1.
pub fn sockets(cli: &Cli, args: &SocketsArgs) -> Result<ExitCode, Failure> {
    let mem = open(cli)?;
    let kernel = args.kernel.find(&mem)?;
    let found = kernel.sockets();
    let shown = found.sockets.iter().filter(|s| args.all || s.is_listed());
    if !cli.json {
        outln!(
            "{:<5} {:<10} {:<40} {:<40} PROCESS",
            "NETID",
            "STATE",
            "LOCAL ADDRESS:PORT",
            "PEER ADDRESS:PORT"
        );
    }
    for s in shown {
        match cli.json {
            true => outln!("{}", socket_json(s)),
            false => outln!(
                "{:<5} {:<10} {:<40} {:<40} {}",
                s.protocol.to_string(),
                state_name(s.state),
                endpoint(&s.local),
                endpoint(&s.peer),
                owners(s)
            ),
        }
    }
    Ok(report("sockets", &found.failed))
}

/// An address and port as `ss -n` shows them: `*` for no port.
fn endpoint(address: &SocketAddr) -> String {
    let ip = match address {
        SocketAddr::V4(a) => a.ip().to_string(),
        SocketAddr::V6(a) => format!("[{}]", a.ip()),
    };
    match address.port() {
        0 => format!("{ip}:*"),
        port => format!("{ip}:{port}"),
    }
}

/// `ss -p`'s process column: `users:(("NAME",pid=N,fd=N),...)`.
fn owners(s: &InetSocket) -> String {
    let each: Vec<String> = s
        .owners
        .iter()
        .map(|o| format!("(\"{}\",pid={},fd={})", escape(&o.name), o.pid, o.fd))
        .collect();
    format!("users:({})", each.join(","))
}

fn socket_json(s: &InetSocket) -> serde_json::Value {
    let owners: Vec<_> = s
        .owners
        .iter()
        .map(|o| json!({"pid": o.pid, "command": o.name, "fd": o.fd}))
        .collect();
    json!({
        "protocol": s.protocol.to_string(),
        "family": if s.local.is_ipv6() { "inet6" } else { "inet" },
        "state": state_name(s.state), "state_number": s.state,
        "local_address": s.local.ip().to_string(), "local_port": s.local.port(),
        "peer_address": s.peer.ip().to_string(), "peer_port": s.peer.port(),
        "inode": s.inode, "netns": s.netns, "sock": hex(s.sock), "owners": owners,
    })
}

/// Lists the network devices of every namespace with their addresses, as
/// `ip addr` prints them, or one JSON object a device.
pub fn interfaces(cli: &Cli, args: &InterfacesArgs) -> Result<ExitCode, Failure> {
    let mem = open(cli)?;
    let kernel = args.kernel.find(&mem)?;
    let found = kernel.interfaces();
    for i in &found.interfaces {
        match cli.json {
            true => outln!("{}", interface_json(i)),
            false => print_interface(i),
        }
    }
    Ok(report("interfaces", &found.failed))
}

/// `IFF_*`, by bit.
const FLAG_NAMES: [&str; 16] = [
    "UP",
    "BROADCAST",
    "DEBUG",
    "LOOPBACK",
    "POINTOPOINT",
    "NOTRAILERS",
    "RUNNING",
    "NOARP",
    "PROMISC",
    "ALLMULTI",
    "MASTER",
    "SLAVE",
    "MULTICAST",
    "PORTSEL",
    "AUTOMEDIA",
    "DYNAMIC",
];

/// A device's flags by name; a bit with no name as hex.
fn flag_names(flags: u32) -> Vec<String> {
    (0..32)
        .filter(|bit| flags & (1 << bit) != 0)
        .map(|bit| match FLAG_NAMES.get(bit) {
            Some(name) => name.to_string(),
            None => format!("{:#x}", 1u32 << bit),
        })
        .collect()
}

/// The hardware address as `ip` shows it: bytes in hex, by colons.
fn hardware(i: &Interface) -> Option<String> {
    let bytes = i.hardware.as_ref().ok()?;
    Some(
        bytes
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":"),
    )
}

/// `ip`'s name of an `ARPHRD_*` link type.
fn link_name(link_type: u16) -> String {
    match link_type {
        1 => "ether".into(),
        772 => "loopback".into(),
        776 => "sit".into(),
        65534 => "none".into(),
        other => format!("type-{other}"),
    }
}

/// An IPv4 address's scope (`RT_SCOPE_*`) as `ip` names it.
fn scope_v4(scope: u8) -> String {
    match scope {
        0 => "global".into(),
        200 => "site".into(),
        253 => "link".into(),
        254 => "host".into(),
        255 => "nowhere".into(),
        other => other.to_string(),
    }
}

/// An IPv6 address's scope (`IPV6_ADDR_*` scope bits) as `ip` names it.
fn scope_v6(scope: u32) -> String {
    match scope {
        0 => "global".into(),
        0x10 => "host".into(),
        0x20 => "link".into(),
        0x40 => "site".into(),
        other => format!("{other:#x}"),
    }
}

fn print_interface(i: &Interface) {
    outln!(
        "{}: {}: <{}> mtu {} netns {}",
        i.index,
        escape(&i.name),
        flag_names(i.flags).join(","),
        i.mtu,
        i.netns
    );
    let address = hardware(i).unwrap_or_else(|| "?".into());
    outln!("    link/{} {address}", link_name(i.link_type));
    for a in &i.ipv4 {
        outln!(
            "    inet {}/{} scope {} {}",
            a.address,
            a.prefix,
            scope_v4(a.scope),
            escape(&a.label)
        );
    }
    for a in &i.ipv6 {
        outln!(
            "    inet6 {}/{} scope {}",
            a.address,
            a.prefix,
            scope_v6(a.scope)
        );
    }
    if let Err(why) = &i.hardware {
        errln!(
            "leechio: interfaces: {}: hardware address: {}",
            escape(&i.name),
            escape(why)
        );
    }
}

fn interface_json(i: &Interface) -> serde_json::Value {
    let ipv4: Vec<_> = i
        .ipv4
        .iter()
        .map(|a| json!({"address": a.address.to_string(), "prefix": a.prefix, "scope": scope_v4(a.scope), "label": a.label}))
        .collect();
    let ipv6: Vec<_> = i
        .ipv6
        .iter()
        .map(|a| json!({"address": a.address.to_string(), "prefix": a.prefix, "scope": scope_v6(a.scope), "flags": a.flags}))
        .collect();
    json!({
        "index": i.index, "name": i.name, "netns": i.netns, "flags": flag_names(i.flags),
        "flags_number": i.flags, "mtu": i.mtu, "link_type": link_name(i.link_type),
        "address": hardware(i), "error": i.hardware.as_ref().err(),
        "device": hex(i.device), "ipv4": ipv4, "ipv6": ipv6,
    })
}

/// Says on stderr what could not be read; the exit code: 1 when anything
/// could not.
fn report(what: &str, failed: &[NetFailure]) -> ExitCode {
    for f in failed {
        errln!("leechio: {what}: {}", escape(&f.to_string()));
    }
    match failed.is_empty() {
        true => ExitCode::SUCCESS,
        false => {
            errln!(
                "leechio: {what}: {} item(s) could not be read",
                failed.len()
            );
            ExitCode::FAILURE
        }
    }
}
