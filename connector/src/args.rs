//! The plugin's arguments: memflow's `target:extra_args` string turned into
//! a LeechCore device configuration.

use std::path::PathBuf;

use leechio::{DeviceConfig, Verbosity};
use memflow::plugins::{Args, ConnectorArgs};

/// Every key the plugin takes, with what it means, for help and errors.
pub const KEYS: [(&str, &str); 8] = [
    ("device", "LeechCore device string (or give it as the target): fpga, file:///mem.raw, qemu://shm=NAME,qmp=SOCKET, rawtcp://HOST:PORT, …"),
    ("remote", "LeechCore remote string, for a device behind a LeechAgent: remote=\"rpc://SPN:HOST\" (quoted), smb://…"),
    ("lib", "path of leechcore.so (default: LEECHCORE_LIB if set, else leechcore.so beside this plugin, then the system's, then target/leechcore/ when the plugin lies in a cargo target folder, as a build of the leechio repository does)"),
    ("memmap", "memory map file: memflow's TOML ([[range]] base/length/real_base) or LeechCore's text (start end [remap], hex); replaces the device's map and any OS layer's"),
    ("verbosity", "LeechCore's messages: 0 quiet (default), 1 normal, 2 -v, 3 -vv, 4 -vvv"),
    ("max_address", "end of the physical memory to use (hex, a multiple of 0x1000): reads and writes at and above it fail, like LeechCore's -max"),
    ("max_entries", "most scatter entries per device call (default: no limit)"),
    ("timeout", "how long a device that talks over sockets (rawtcp://, a remote agent) may send nothing in a call before it is cut off and fails every later read and write: seconds, e.g. 2.5 or 500ms (default: 5)"),
];

/// memflow's middleware arguments (its page cache, delay and metrics),
/// which go after the connector's own, behind a second `:`.
const MIDDLEWARE_KEYS: [&str; 6] = [
    "cache",
    "cache_size",
    "cache_time",
    "cache_page_size",
    "delay",
    "metrics",
];

/// LeechCore device types that are only ever written with `://` and
/// parameters, so a device string of the bare word is one memflow cut.
const URL_SCHEMES: [&str; 5] = ["file", "qemu", "rawtcp", "smb", "rpc"];

/// What the arguments ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// How to open the device.
    pub device: DeviceConfig,
    /// A memory map file to apply.
    pub memmap: Option<PathBuf>,
    /// Most entries per call.
    pub max_entries: Option<usize>,
}

/// Reads the arguments; the error says what is wrong and what is valid,
/// on one line.
pub fn parse(args: &ConnectorArgs) -> Result<Settings, String> {
    // The messages quote what was given, which may hold a line break.
    read_settings(args).map_err(|e| leechio::printable(&e))
}

fn read_settings(args: &ConnectorArgs) -> Result<Settings, String> {
    if let Some(hint) = comma_after_device_hint(args.target.as_deref()) {
        return Err(hint);
    }
    let target = args.target.as_deref().map(unquote);
    let pairs = pairs_of(&args.extra_args)?;
    if let Some(hint) = split_device_hint(target.as_deref(), &pairs) {
        return Err(hint);
    }
    if let Some(repeated) = repeated_key(&pairs) {
        return Err(repeated);
    }
    for (key, value) in &pairs {
        if key == "default" {
            continue;
        }
        let Some((_, about)) = KEYS.iter().find(|(k, _)| k == key) else {
            if MIDDLEWARE_KEYS.contains(&key.as_str()) {
                return Err(format!(
                    "`{key}` is one of memflow's own arguments, not the plugin's: memflow takes \
                     them after a second `:`, e.g. leechcore:\"file:///mem.raw\"::{key}=…"
                ));
            }
            return Err(format!(
                "unknown argument `{key}`; valid arguments: {}",
                valid_keys()
            ));
        };
        // An empty value would otherwise reach LeechCore as a path or
        // string and fail with a message that hides the cause.
        if value.is_empty() {
            return Err(format!("`{key}=` has no value; {key}: {about}"));
        }
    }
    let get = |key: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };

    let mut devices = Vec::new();
    if let Some(target) = target {
        // `leechcore:device=fpga` puts `device=fpga` in the target slot.
        if let Some(device) = target.strip_prefix("device=") {
            log::warn!("leechcore: target `{target}` read as device `{device}` (write `leechcore:{device}` or `leechcore::device={device}`)");
            devices.push(("target", unquote(device)));
        } else if !target.is_empty() {
            devices.push(("target", target));
        }
    }
    for key in ["device", "default"] {
        if let Some(v) = get(key) {
            devices.push((
                if key == "device" {
                    "device="
                } else {
                    "first argument"
                },
                v.to_string(),
            ));
        }
    }
    let device = match devices.as_slice() {
        [] => return Err("no device given: write `leechcore:DEVICE` or `leechcore::device=DEVICE` (see the plugin's help)".into()),
        [(_, d)] => d.clone(),
        [(a, x), (b, y), ..] => return Err(format!(
            "two devices given ({a} `{x}` and {b} `{y}`); give one (arguments after the device are key=value: {})",
            valid_keys()
        )),
    };

    if URL_SCHEMES.contains(&device.as_str()) {
        // `leechcore::device=file:///mem.raw` reaches the plugin as
        // `device=file`: memflow cut it at its first unquoted `:`.
        return Err(format!(
            "device `{device}` is only the start of a device string (memflow reads unquoted \
             `:` and `,` as separators): quote it, e.g. leechcore::device=\"{device}://…\""
        ));
    }
    let mut config = DeviceConfig::new(device);
    config.remote = get("remote").map(str::to_string);
    if let Some(remote) = config.remote.as_deref().filter(|r| !r.contains("://")) {
        // Every LeechCore remote string has a scheme (`rpc://`, `smb://`),
        // so this is one memflow cut at its first unquoted `:`.
        return Err(format!(
            "remote `{remote}` is not a LeechCore remote string (rpc://SPN:HOST, smb://…); \
             memflow splits unquoted values at `:` and `,`, so quote it: remote=\"rpc://SPN:HOST\""
        ));
    }
    config.library = get("lib").map(PathBuf::from);
    if let Some(v) = get("verbosity") {
        let level: u8 = v
            .parse()
            .ok()
            .filter(|l| *l <= 4)
            .ok_or_else(|| format!("verbosity `{v}`: give 0 to 4"))?;
        config.verbosity = Verbosity::from_level(level);
    }
    if let Some(v) = get("max_address") {
        config.max_address = Some(parse_hex(v).map_err(|e| format!("max_address `{v}`: {e}"))?);
    }
    if let Some(v) = get("timeout") {
        config.timeout = Some(leechio::backend::leechcore::time_limit::parse_timeout(v)?);
    }
    let max_entries = match get("max_entries") {
        Some(v) => Some(parse_count(v).map_err(|e| format!("max_entries `{v}`: {e}"))?),
        None => None,
    };
    Ok(Settings {
        device: config,
        memmap: get("memmap").map(PathBuf::from),
        max_entries,
    })
}

/// Every argument memflow handed over, as (key, value) in its order, the
/// default argument (memflow's bare first value) under `default`; the error
/// says why they could not be listed.
///
/// memflow's `Args` has no public way to list its entries (its `Display`
/// quotes only some values, so its text cannot be split back reliably);
/// its serde form lists each entry as it is, repeated keys included.
pub(crate) fn pairs_of(args: &Args) -> Result<Vec<(String, String)>, String> {
    let listed = serde_json::to_value(args).map_err(|e| format!("arguments unreadable: {e}"))?;
    let entries = listed
        .get("args")
        .and_then(|a| a.as_array())
        .ok_or("arguments unreadable: memflow's `Args` has no `args` list")?;
    let mut pairs = Vec::new();
    for entry in entries {
        let (Some(key), Some(value)) = (
            entry.get("key").and_then(|k| k.as_str()),
            entry.get("value").and_then(|v| v.as_str()),
        ) else {
            return Err(format!("arguments unreadable: entry {entry}"));
        };
        if key == "default" && value.is_empty() {
            continue;
        }
        pairs.push((key.to_string(), unquote(value)));
    }
    Ok(pairs)
}

/// The first key given twice, as an error naming it and both values.
pub(crate) fn repeated_key(pairs: &[(String, String)]) -> Option<String> {
    pairs.iter().enumerate().find_map(|(i, (key, second))| {
        let (_, first) = pairs[..i].iter().find(|(k, _)| k == key)?;
        Some(format!(
            "`{key}` is given twice (`{first}` and `{second}`); give each argument once"
        ))
    })
}

/// The valid keys, for error messages.
fn valid_keys() -> String {
    KEYS.map(|(k, _)| k).join(", ")
}

/// memflow splits its argument string at every unquoted `:`, so an
/// unquoted `file:///mem.raw` or `qemu://shm=…` arrives as a target `file`
/// (or `device=file`) and arguments starting with `//`. Says so, with the
/// quoted form, rather than reporting two devices or an unknown key.
fn split_device_hint(target: Option<&str>, pairs: &[(String, String)]) -> Option<String> {
    let scheme = target?;
    let scheme = scheme.strip_prefix("device=").unwrap_or(scheme);
    let rest = pairs.iter().find_map(|(k, v)| {
        if k == "default" {
            v.starts_with("//").then(|| v.clone())
        } else {
            // `qemu://shm=g,qmp=…` gives the key `//shm`; the other
            // pieces come back from memflow in no particular order.
            k.starts_with("//").then(|| format!("{k}={v},…"))
        }
    })?;
    let device = format!("{scheme}:{rest}");
    Some(format!(
        "the device string `{device}` was split at its `:` (memflow reads unquoted `:` and `,` as separators): \
         quote it, e.g. leechcore:\"{device}\" or leechcore::device=\"{device}\""
    ))
}

/// memflow reads `leechcore:"file:///m.raw",lib=…` (arguments after the
/// quoted device with a comma) as one target, which LeechCore would then
/// take for a device string. Says where the arguments go instead.
fn comma_after_device_hint(target: Option<&str>) -> Option<String> {
    let quoted = target?.trim().strip_prefix('"')?;
    let (device, after) = quoted.split_once('"')?;
    let rest = after.strip_prefix(',')?;
    Some(format!(
        "arguments after the quoted device string go behind a `:`, not a `,` (memflow reads \
         `\"{device}\",{rest}` as one device): write leechcore:\"{device}\":{rest}"
    ))
}

/// memflow keeps the quotes a user put around a value with `:` or `,`.
pub(crate) fn unquote(value: &str) -> String {
    let v = value.trim();
    v.strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(v)
        .to_string()
}

/// A hex number, with or without `0x`, `_` between digits allowed.
pub(crate) fn parse_hex(text: &str) -> Result<u64, &'static str> {
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text)
        .replace('_', "");
    // (`from_str_radix` alone would take a sign.)
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("give a hex address like 0x1_0000_0000");
    }
    u64::from_str_radix(&digits, 16).map_err(|_| "it does not fit in 64 bits")
}

/// A count of at least 1.
fn parse_count(text: &str) -> Result<usize, &'static str> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err("give a decimal count of at least 1");
    }
    match text.parse() {
        Ok(0) => Err("give a count of at least 1"),
        Ok(n) => Ok(n),
        Err(_) => Err("it is too large"),
    }
}

#[cfg(test)]
mod tests;
