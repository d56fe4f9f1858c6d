//! The plugin's arguments as hosts give them: every key read, repeated,
//! split, misquoted or misplaced arguments refused with what to write.

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
            format!("`{key}` is given twice (`{first}` and `{second}`); give each argument once")
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
