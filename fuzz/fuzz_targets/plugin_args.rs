//! The plugin's argument parser, fed what a host hands it: strings through
//! memflow's own parser (`ConnectorArgs::from_str`, as the memflow CLI and
//! most hosts do), or entries listed one by one (memflow's serde form,
//! which keeps what the string parser drops, such as a repeated key).
//! Never a panic; every error is one non-empty line.

#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use memflow::plugins::{Args, ConnectorArgs};
use memflow_leechcore::args::parse;

/// A host's arguments.
#[derive(Arbitrary, Debug)]
enum Input<'a> {
    /// `target:key=value,…[:middleware]`, as a user writes it.
    Text(&'a str),
    /// The target and the entries, as a host that builds them lists them.
    Listed(Option<&'a str>, Vec<(&'a str, &'a str)>),
}

fuzz_target!(|input: Input| {
    let args = match input {
        Input::Text(text) => match memflow_parse(text) {
            Some(args) => args,
            None => return,
        },
        Input::Listed(target, entries) => {
            let entries: Vec<_> = entries
                .iter()
                .map(|(key, value)| serde_json::json!({ "key": key, "value": value }))
                .collect();
            let Ok(args) = serde_json::from_value::<Args>(serde_json::json!({ "args": entries }))
            else {
                return;
            };
            ConnectorArgs::new(target, args, None)
        }
    };
    if let Err(e) = parse(&args) {
        assert!(
            !e.is_empty() && !e.contains(['\n', '\r']),
            "not one line: {e:?}"
        );
    }
});

/// memflow's parse of `text`, if it gives one. memflow 0.2.4 itself
/// overflows on a large `cache_size=` (a panic with overflow checks, a
/// wrapped size without), in the host, before a plugin is called: such
/// strings are skipped here, with libFuzzer's abort-on-panic hook set
/// aside meanwhile.
fn memflow_parse(text: &str) -> Option<ConnectorArgs> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let parsed = std::panic::catch_unwind(|| text.parse::<ConnectorArgs>());
    std::panic::set_hook(hook);
    parsed.ok()?.ok()
}
