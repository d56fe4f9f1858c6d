//! The harness's own arithmetic and the plugin's arguments it builds.

use super::*;

#[test]
fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
    let ms = |t: u64, calls: u64| (Duration::from_millis(t), calls);
    assert_eq!(median(vec![ms(9, 3), ms(1, 1), ms(5, 2)]), ms(5, 2));
    assert_eq!(
        median(vec![ms(8, 4), ms(2, 1), ms(4, 2), ms(6, 3)]),
        ms(5, 2)
    );
}

#[test]
fn the_plugin_gets_lib_remote_verbosity_and_timeout() {
    let bench = Bench {
        device: DeviceConfig {
            device: "file:///tmp/m.raw".into(),
            remote: Some("rpc://host.example:10.0.0.1".into()),
            library: Some("/opt/lc,x/leechcore.so".into()),
            verbosity: leechio::Verbosity::from_level(2),
            max_address: None,
            timeout: Some(std::time::Duration::from_millis(2500)),
        },
        plugin_dir: PathBuf::new(),
        runs: 1,
        rows: Vec::new(),
        differing: Vec::new(),
    };
    // The plugin reads its arguments back from their string form.
    let args = bench.plugin_args().ok().expect("UTF-8 arguments");
    let args: PluginArgs = args.to_string().parse().unwrap();
    assert_eq!(args.get("lib"), Some("/opt/lc,x/leechcore.so"));
    assert_eq!(args.get("remote"), Some("rpc://host.example:10.0.0.1"));
    assert_eq!(args.get("verbosity"), Some("2"));
    assert_eq!(args.get("timeout"), Some("2.5"));
    // Attaching keeps the library, and drops the remote string, with
    // which LeechCore would not attach.
    let existing = bench.existing();
    assert_eq!(existing.device, "existing");
    assert_eq!(existing.remote, None);
    assert_eq!(existing.library, bench.device.library);
    assert_eq!(existing.verbosity, bench.device.verbosity);
}
