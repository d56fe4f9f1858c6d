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
mod tests {
    use super::*;

    fn settings(text: &str) -> Result<Settings, String> {
        parse(&text.parse::<ConnectorArgs>().map_err(|e| e.to_string())?)
    }

    /// The arguments as a host that builds them entry by entry hands them
    /// over (memflow's serde form, read from the host's own settings, say):
    /// unlike memflow's string parser, this keeps a repeated key.
    fn listed(target: Option<&str>, entries: &[(&str, &str)]) -> Result<Settings, String> {
        let entries: Vec<_> = entries
            .iter()
            .map(|(key, value)| serde_json::json!({ "key": key, "value": value }))
            .collect();
        let args: Args = serde_json::from_value(serde_json::json!({ "args": entries })).unwrap();
        parse(&ConnectorArgs::new(target, args, None))
    }

    #[test]
    fn a_repeated_key_is_refused_by_name() {
        for (key, first, second) in [
            ("verbosity", "0", "4"),
            ("memmap", "/tmp/a.toml", "/tmp/b.toml"),
            ("max_entries", "8", "8"),
        ] {
            let err = listed(
                Some("fpga"),
                &[(key, first), ("lib", "/x.so"), (key, second)],
            )
            .unwrap_err();
            assert_eq!(
                err,
                format!(
                    "`{key}` is given twice (`{first}` and `{second}`); give each argument once"
                )
            );
        }
        let err = listed(None, &[("device", "fpga"), ("device", "file:///tmp/a.raw")]).unwrap_err();
        assert_eq!(
            err,
            "`device` is given twice (`fpga` and `file:///tmp/a.raw`); give each argument once"
        );
        // A device as the target and as `device=` stays its own error.
        let err = listed(Some("fpga"), &[("device", "fpga")]).unwrap_err();
        assert!(
            err.starts_with("two devices given (target `fpga` and device= `fpga`)"),
            "{err}"
        );
        // memflow's string parser keeps only the last of a repeated key
        // before the plugin is called (as docs/plugin.md says).
        assert_eq!(
            settings("fpga:verbosity=0,verbosity=4")
                .unwrap()
                .device
                .verbosity,
            Verbosity::from_level(4)
        );
        // Each key once, listed the same way, is read.
        let s = listed(
            Some("fpga"),
            &[("verbosity", "4"), ("memmap", "/tmp/a.toml")],
        )
        .unwrap();
        assert_eq!(s.device.verbosity, Verbosity::from_level(4));
        assert_eq!(s.memmap, Some(PathBuf::from("/tmp/a.toml")));
    }

    #[test]
    fn what_is_quoted_in_an_error_stays_on_its_line() {
        // Found by the fuzz target plugin_args: a line break in a key or
        // value reached the message as it was.
        let err = listed(Some("fpga"), &[("col\nour", "red")]).unwrap_err();
        assert!(
            err.starts_with("unknown argument `col\\nour`; valid"),
            "{err}"
        );
        let err = settings("fpga:verbosity=\"1\r\u{1b}[2J\"").unwrap_err();
        assert_eq!(err, "verbosity `1\\r\\u{1b}[2J`: give 0 to 4");
    }

    #[test]
    fn the_device_comes_from_the_target_or_device_key() {
        assert_eq!(settings("fpga").unwrap().device.device, "fpga");
        assert_eq!(
            settings("\"file:///tmp/a.raw\"").unwrap().device.device,
            "file:///tmp/a.raw"
        );
        assert_eq!(
            settings(":device=\"qemu://shm=g,qmp=/tmp/q\"")
                .unwrap()
                .device
                .device,
            "qemu://shm=g,qmp=/tmp/q"
        );
        assert_eq!(settings(":fpga").unwrap().device.device, "fpga");
        // The trap: `device=` in the target slot.
        assert_eq!(settings("device=fpga").unwrap().device.device, "fpga");
    }

    #[test]
    fn every_key_is_read() {
        let s = settings("fpga:remote=\"rpc://x:host\",lib=/opt/lc/leechcore.so,memmap=/tmp/m.txt,verbosity=2,max_address=0x2_0000_0000,max_entries=512,timeout=2.5").unwrap();
        assert_eq!(s.device.remote.as_deref(), Some("rpc://x:host"));
        assert_eq!(
            s.device.library,
            Some(PathBuf::from("/opt/lc/leechcore.so"))
        );
        assert_eq!(s.memmap, Some(PathBuf::from("/tmp/m.txt")));
        assert_eq!(s.device.verbosity, Verbosity::Verbose);
        assert_eq!(s.device.max_address, Some(0x2_0000_0000));
        assert_eq!(s.max_entries, Some(512));
        assert_eq!(
            s.device.timeout,
            Some(std::time::Duration::from_millis(2500))
        );
        assert_eq!(settings("fpga").unwrap().device.timeout, None);
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        let unknown = settings("fpga:colour=red").unwrap_err();
        assert!(
            unknown.contains("unknown argument `colour`")
                && unknown.contains("device, remote, lib, memmap"),
            "{unknown}"
        );
        assert!(settings("fpga:device=file")
            .unwrap_err()
            .contains("two devices"));
        assert!(settings("").unwrap_err().contains("no device given"));
        assert!(settings("fpga:verbosity=9").unwrap_err().contains("0 to 4"));
        assert!(settings("fpga:max_address=xyz")
            .unwrap_err()
            .contains("hex address"));
        assert!(settings("fpga:max_entries=0")
            .unwrap_err()
            .contains("at least 1"));
        // Numbers are taken as written, or refused.
        for bad in ["0x0x1000", "+1000", "0x-10", "0x"] {
            let err = settings(&format!("fpga:max_address={bad}")).unwrap_err();
            assert!(err.contains("hex address"), "{bad}: {err}");
        }
        assert_eq!(
            settings("fpga:max_address=1_0000")
                .unwrap()
                .device
                .max_address,
            Some(0x1_0000)
        );
        assert!(settings("fpga:max_address=0x1_0000_0000_0000_0000")
            .unwrap_err()
            .contains("does not fit in 64 bits"));
        for bad in ["+5", "0x100", "-1"] {
            let err = settings(&format!("fpga:max_entries={bad}")).unwrap_err();
            assert!(err.contains("decimal count of at least 1"), "{bad}: {err}");
        }
        assert!(settings("fpga:max_entries=99999999999999999999999")
            .unwrap_err()
            .contains("too large"));
        let err = settings("fpga:timeout=5min").unwrap_err();
        assert!(err.starts_with("timeout `5min`: give seconds"), "{err}");
        let err = settings("fpga:timeout=0").unwrap_err();
        assert!(err.contains("too short"), "{err}");
    }

    #[test]
    fn an_unquoted_device_string_is_reported_as_split() {
        let err = settings("bogus://x").unwrap_err();
        assert!(
            err.contains("the device string `bogus://x` was split at its `:`")
                && err.contains("leechcore:\"bogus://x\""),
            "{err}"
        );
        let err = settings("device=file:///tmp/a.raw").unwrap_err();
        assert!(
            err.contains("`file:///tmp/a.raw` was split") && !err.contains("two devices"),
            "{err}"
        );
        let err = settings("qemu://shm=g,qmp=/tmp/q").unwrap_err();
        assert!(
            err.contains("`qemu://shm=g,…` was split") && !err.contains("unknown argument"),
            "{err}"
        );
        // `leechcore::device=file:///tmp/a.raw`: the plugin sees `device=file`.
        let err = settings(":device=file:///tmp/a.raw").unwrap_err();
        assert!(
            err.contains("device `file` is only the start of a device string")
                && err.contains("leechcore::device=\"file://…\""),
            "{err}"
        );
    }

    #[test]
    fn arguments_after_the_quoted_device_with_a_comma_are_pointed_to_the_colon() {
        let err = settings("\"file:///m.raw\",lib=/x/leechcore.so").unwrap_err();
        assert_eq!(
            err,
            "arguments after the quoted device string go behind a `:`, not a `,` (memflow reads \
             `\"file:///m.raw\",lib=/x/leechcore.so` as one device): write \
             leechcore:\"file:///m.raw\":lib=/x/leechcore.so"
        );
        let err = settings("\"qemu://shm=g,qmp=/tmp/q\",verbosity=2,lib=/l.so").unwrap_err();
        assert!(
            err.ends_with("write leechcore:\"qemu://shm=g,qmp=/tmp/q\":verbosity=2,lib=/l.so"),
            "{err}"
        );
        // The form it names works.
        let s = settings("\"file:///m.raw\":lib=/x/leechcore.so").unwrap();
        assert_eq!(s.device.device, "file:///m.raw");
        assert_eq!(s.device.library, Some(PathBuf::from("/x/leechcore.so")));
    }

    #[test]
    fn memflows_own_arguments_are_pointed_to_their_place() {
        let err = settings("\"file:///tmp/a.raw\":cache=false").unwrap_err();
        assert!(
            err.contains("`cache` is one of memflow's own arguments") && err.contains("::cache=…"),
            "{err}"
        );
        // Behind the second `:` memflow takes it, and the plugin never sees it.
        let s = settings("\"file:///tmp/a.raw\"::cache=false").unwrap();
        assert_eq!(s.device.device, "file:///tmp/a.raw");
        let s = settings("\"file:///tmp/a.raw\":max_entries=512:cache=false").unwrap();
        assert_eq!(s.max_entries, Some(512));
    }

    #[test]
    fn a_value_with_an_apostrophe_keeps_the_arguments_after_it() {
        // memflow lists these with `memmap` first: `memmap=/tmp/o'brien…,max_entries=5`.
        let s = settings("fpga:memmap=\"/tmp/o'brien.toml\",max_entries=5").unwrap();
        assert_eq!(s.memmap, Some(PathBuf::from("/tmp/o'brien.toml")));
        assert_eq!(s.max_entries, Some(5));
        let s = settings("fpga:lib=\"/tmp/o'brien/leechcore.so\",remote=\"rpc://a:b\"").unwrap();
        assert_eq!(
            s.device.library,
            Some(PathBuf::from("/tmp/o'brien/leechcore.so"))
        );
        assert_eq!(s.device.remote.as_deref(), Some("rpc://a:b"));
        let err = settings("fpga:lib=\"/tmp/o'brien\",colour=red").unwrap_err();
        assert!(err.contains("unknown argument `colour`"), "{err}");
    }

    #[test]
    fn an_unquoted_remote_string_is_reported_as_split() {
        let err = settings("fpga:remote=rpc://x:host").unwrap_err();
        assert!(
            err.contains("remote `rpc` is not a LeechCore remote string")
                && err.contains("remote=\"rpc://SPN:HOST\""),
            "{err}"
        );
    }

    #[test]
    fn empty_values_and_a_bare_word_after_the_device_are_refused() {
        for key in ["lib", "remote", "memmap", "device"] {
            let err = settings(&format!("fpga:{key}=")).unwrap_err();
            assert!(
                err.starts_with(&format!("`{key}=` has no value; {key}: ")),
                "{err}"
            );
        }
        assert!(settings("fpga:lib=\"\"")
            .unwrap_err()
            .contains("`lib=` has no value"));
        // memflow itself keeps a bare first item (as the default argument)
        // and drops bare items after it.
        let err = settings("\"file:///tmp/a.raw\":bogusflag,verbosity=2").unwrap_err();
        assert!(
            err.contains("first argument `bogusflag`") && err.contains("device, remote, lib"),
            "{err}"
        );
    }
}
