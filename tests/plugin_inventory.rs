//! The `leechcore` plugin as memflow loads it: from the release build folder
//! through memflow's own `Inventory`, against image files.
//!
//! The plugin is built separately (`make plugin`, which `make test` runs):
//! a plugin built inside `cargo test --workspace` would get memflow's
//! `dummy_mem` feature from the dev-dependencies and export extra plugins.

mod common;

use common::plugin::{
    assert_refused, connect, connect_with_cache, inventory, logged, plugin_dir, read_split,
    refused, with_map, LOG,
};
use common::rawtcp::RawTcpServer;
use common::{read_file_at, Image};
use leechio::{Call, DeviceConfig, LeechCore};
use memflow::cglue::CTup2;
use memflow::dummy::{DummyMemory, DummyOs};
use memflow::prelude::v1::*;

const MIB: u64 = 1 << 20;

#[test]
fn the_plugin_exports_only_the_leechcore_connector() {
    let inv = inventory();
    assert_eq!(inv.available_connectors(), vec!["leechcore".to_string()]);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn random_pages_and_sub_page_reads_equal_the_image() {
    let image = Image::new(32 * MIB);
    for cache in [false, true] {
        let mut conn = connect_with_cache(&format!("leechcore:\"{}\"", image.device()), cache);
        let mut rng = fastrand::Rng::with_seed(cache as u64);
        let specs: Vec<(u64, usize)> = (0..400)
            .map(|i| {
                if i % 2 == 0 {
                    (rng.u64(0..image.size / 0x1000) * 0x1000, 0x1000)
                } else {
                    (rng.u64(0..image.size - 0x3000), rng.usize(1..0x2100))
                }
            })
            .collect();
        let mut bufs: Vec<Vec<u8>> = specs.iter().map(|&(_, n)| vec![0; n]).collect();
        let mut list: Vec<ReadData> = specs
            .iter()
            .zip(bufs.iter_mut())
            .map(|(&(a, _), b)| CTup2(Address::from(a), b.as_mut_slice().into()))
            .collect();
        conn.phys_view().read_raw_list(&mut list).unwrap();
        drop(list);
        for (&(addr, len), buf) in specs.iter().zip(&bufs) {
            assert!(
                *buf == image.bytes(addr, len),
                "{addr:#x}+{len:#x} (cache {cache})"
            );
        }
        let meta = conn.metadata();
        assert_eq!(meta.max_address.to_umem(), image.size - 1);
        assert_eq!(meta.real_size, image.size);
        assert!(meta.readonly);
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_batch_is_one_leechcore_call() {
    let image = Image::new(32 * MIB);
    // memflow's default page cache re-chunks batches itself; the plugin's
    // own promise is one device call per batch it is given.
    let mut conn = connect_with_cache(&format!("leechcore:\"{}\"", image.device()), false);
    // LeechCore's `existing` device attaches to the device already open,
    // sharing its call counters.
    let spy = LeechCore::open(&DeviceConfig::new("existing")).unwrap();
    let before = spy.call_count(Call::ReadScatter);
    let mut bufs = vec![[0u8; 24]; 500];
    let mut list: Vec<ReadData> = bufs
        .iter_mut()
        .enumerate()
        .map(|(i, b)| {
            CTup2(
                Address::from(i as u64 * 0x10_0ff0 % (image.size - 64)),
                b.as_mut_slice().into(),
            )
        })
        .collect();
    conn.phys_view().read_raw_list(&mut list).unwrap();
    assert_eq!(spy.call_count(Call::ReadScatter) - before, 1);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_read_past_the_end_reports_exact_byte_counts() {
    let image = Image::new(16 * MIB);
    let mut conn = connect(&format!("leechcore:\"{}\"", image.device())).unwrap();
    let mut buf = vec![0xa5u8; 0x2800];
    let (ok, failed) = read_split(&mut conn, image.size - 0x1800, &mut buf);
    assert_eq!(ok, vec![(0x5000_0000, 0x1800)]);
    assert_eq!(failed, vec![(0x5000_1800, 0x1000)]);
    assert_eq!(buf[..0x1800], image.bytes(image.size - 0x1800, 0x1800)[..]);
    assert!(
        buf[0x1800..].iter().all(|&b| b == 0xa5),
        "failed bytes were written"
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn writes_land_exactly_on_a_writable_image() {
    let image = Image::new(16 * MIB);
    let original = read_file_at(&image.path, 0, image.size as usize);
    let mut conn = connect(&format!(
        "leechcore:\"file://file={},write=1\"",
        image.path.display()
    ))
    .unwrap();
    assert!(!conn.metadata().readonly);
    let writes: Vec<(u64, Vec<u8>)> = vec![
        (0x1003, vec![1, 2, 3]),
        (0x2ffe, vec![9; 0x1005]),
        (0x8000, vec![7; 0x1000]),
    ];
    for (addr, data) in &writes {
        conn.phys_view()
            .write_raw(Address::from(*addr), data)
            .unwrap();
    }
    drop(conn); // the file device flushes on close
    let mut expected = original;
    for (addr, data) in &writes {
        expected[*addr as usize..*addr as usize + data.len()].copy_from_slice(data);
    }
    let after = read_file_at(&image.path, 0, image.size as usize);
    assert_eq!(after.iter().zip(&expected).position(|(a, b)| a != b), None);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn memflow_virtual_reads_over_the_plugin_match_dummy_os() {
    let mut os = DummyOs::with_seed(DummyMemory::new(32 << 20), 7);
    let mut rng = fastrand::Rng::with_seed(8);
    let content: Vec<u8> = std::iter::repeat_with(|| rng.u8(..))
        .take(0x20_0000)
        .collect();
    let pid = os.alloc_process(content.len(), &content);
    let info = os.process_info_by_pid(pid).unwrap();
    let mut image = vec![0u8; 32 << 20];
    os.phys_view()
        .read_raw_into(Address::null(), &mut image)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dummy.raw");
    std::fs::write(&path, &image).unwrap();

    for cache in [false, true] {
        let conn = connect_with_cache(&format!("leechcore:\"file://{}\"", path.display()), cache);
        let mut virt = VirtualDma::new(
            conn,
            memflow::architecture::x86::x64::ARCH,
            memflow::architecture::x86::x64::new_translator(info.dtb1),
        );
        let mut process = os.process_by_pid(pid).unwrap();
        for _ in 0..300 {
            let va = info.address + rng.usize(0..content.len() - 64);
            let (mut ours, mut theirs) = ([0u8; 64], [0u8; 64]);
            virt.read_raw_into(va, &mut ours).unwrap();
            process.read_raw_into(va, &mut theirs).unwrap();
            assert_eq!(ours, theirs, "{va:x} (cache {cache})");
        }
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn max_address_cuts_reads_and_the_metadata() {
    let image = Image::new(16 * MIB);
    let limit = 0x10_0000u64;
    for cache in [false, true] {
        let mut conn = connect_with_cache(
            &format!("leechcore:\"{}\":max_address={limit:#x}", image.device()),
            cache,
        );
        let meta = conn.metadata();
        assert_eq!(meta.max_address.to_umem(), limit - 1, "cache {cache}");
        assert_eq!(meta.real_size, limit, "cache {cache}");

        // Across the limit: the bytes below it, then exactly the rest failed.
        let mut buf = vec![0xa5u8; 0x1800];
        let (ok, failed) = read_split(&mut conn, limit - 0x800, &mut buf);
        assert_eq!(ok, vec![(0x5000_0000, 0x800)], "cache {cache}");
        assert_eq!(failed, vec![(0x5000_0800, 0x1000)], "cache {cache}");
        assert_eq!(buf[..0x800], image.bytes(limit - 0x800, 0x800)[..]);
        assert!(buf[0x800..].iter().all(|&b| b == 0xa5));

        // Far past it, though the image holds the bytes.
        let mut page = [0u8; 0x1000];
        let (ok, failed) = read_split(&mut conn, 0x20_0000, &mut page);
        assert_eq!((ok, failed), (vec![], vec![(0x5000_0000, 0x1000)]));
    }
    assert_refused(
        &format!("leechcore:\"{}\":max_address=0", image.device()),
        ErrorKind::Configuration,
        "max_address 0 leaves no memory to use",
    );
    assert_refused(
        &format!("leechcore:\"{}\":max_address=0x100800", image.device()),
        ErrorKind::Configuration,
        "max_address 0x100800 is not a multiple of 0x1000",
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_rawtcp_server_reads_through_the_inventory_and_a_silent_one_is_cut() {
    let image = Image::new(16 * MIB);
    let server = RawTcpServer::start(&image.path, &[]);
    let mut conn = connect_with_cache(
        &format!(
            "leechcore:\"{}\":max_address={:#x},timeout=2",
            server.device(),
            image.size
        ),
        false,
    );
    // Across pages, from the middle of one: rawtcp serves whole pages only.
    let mut buf = vec![0u8; 0x2345];
    conn.phys_view()
        .read_raw_into(Address::from(0x12_3456u64), &mut buf)
        .unwrap();
    assert!(buf == image.bytes(0x12_3456, 0x2345));

    let silent = RawTcpServer::start(&image.path, &["--silent"]);
    let start = std::time::Instant::now();
    assert_refused(
        &format!("leechcore:\"{}\":timeout=500ms", silent.device()),
        ErrorKind::TargetNotFound,
        "no answer for 500 ms (the time limit: timeout= or --timeout)",
    );
    let took = start.elapsed();
    assert!(
        took >= std::time::Duration::from_millis(500) && took < std::time::Duration::from_secs(3),
        "{took:?}"
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn wrong_devices_and_arguments_name_the_cause() {
    let image = Image::new(16 * MIB);
    let dev = image.device();

    // Unquoted device strings are split by memflow at their `:`.
    assert_refused(
        "leechcore:bogus://x",
        ErrorKind::Configuration,
        "the device string `bogus://x` was split at its `:`",
    );
    assert_refused(
        &format!("leechcore:device={dev}"),
        ErrorKind::Configuration,
        &format!("quote it, e.g. leechcore:\"{dev}\""),
    );
    assert_refused(
        "leechcore:qemu://shm=g,qmp=/tmp/q",
        ErrorKind::Configuration,
        "the device string `qemu://shm=g,…` was split",
    );

    // A bare word after the device (memflow keeps it only when first).
    assert_refused(
        &format!("leechcore:\"{dev}\":bogusflag,verbosity=2"),
        ErrorKind::Configuration,
        "first argument `bogusflag`); give one (arguments after the device are key=value: device, remote, lib",
    );
    assert_refused(
        &format!("leechcore:\"{dev}\":lib="),
        ErrorKind::Configuration,
        "`lib=` has no value; lib: path of leechcore.so",
    );

    // A wrong remote is named, not the image it was to open.
    assert_refused(
        &format!("leechcore:\"{dev}\":remote=\"bogus://x\""),
        ErrorKind::TargetNotFound,
        "the remote `bogus://x` is the likely cause",
    );

    let dir = tempfile::tempdir().unwrap();
    assert_refused(
        &format!("leechcore:\"file://{}\"", dir.path().display()),
        ErrorKind::TargetNotFound,
        &format!("`{}` is a folder, not an image file", dir.path().display()),
    );

    assert_refused(
        "leechcore:\"qemu://shm=leechio-plugin-no-such-guest,qmp=/tmp/leechio-no-such.qmp\"",
        ErrorKind::TargetNotFound,
        "guest RAM file /dev/shm/leechio-plugin-no-such-guest does not exist",
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn bad_arguments_and_a_missing_leechcore_give_errors_and_log_why() {
    let image = Image::new(16 * MIB);

    let err = refused(&format!("leechcore:\"{}\":colour=red", image.device()));
    assert_eq!(err.1, ErrorKind::Configuration);
    assert!(
        logged("unknown argument `colour`"),
        "{:?}",
        LOG.lock().unwrap_or_else(|e| e.into_inner())
    );

    let err = refused("leechcore::verbosity=1");
    assert_eq!(err.1, ErrorKind::Configuration);
    assert!(logged("no device given"));

    let err = refused(&format!(
        "leechcore:\"{}\":lib=/nonexistent/leechcore.so",
        image.device()
    ));
    assert_eq!(err.1, ErrorKind::UnableToLoadLibrary);
    assert!(logged("/nonexistent/leechcore.so") && logged("make setup"));

    let err = refused("leechcore:\"file:///nonexistent.raw\"");
    assert_eq!(err.1, ErrorKind::TargetNotFound);
    assert!(logged("No such file"));

    let err = refused(&format!(
        "leechcore:\"{}\":memmap=/nonexistent.toml",
        image.device()
    ));
    assert_eq!(err.1, ErrorKind::Configuration);
    let dir = tempfile::tempdir().unwrap();
    let overlapping = dir.path().join("bad.toml");
    std::fs::write(
        &overlapping,
        "[[range]]\nbase=0x0\nlength=0x2000\n[[range]]\nbase=0x1000\nlength=0x2000\n",
    )
    .unwrap();
    let err = refused(&with_map(&image, &overlapping));
    assert_eq!(err.1, ErrorKind::Configuration);
    assert!(logged("range at 0x1000 overlaps"));
    // Touching ranges, the higher first (which memflow's own parser takes
    // for overlapping): taken in address order.
    let descending = dir.path().join("descending.toml");
    std::fs::write(
        &descending,
        "[[range]]\nbase=0x2000\nlength=0x1000\nreal_base=0x5000\n\
         [[range]]\nbase=0x1000\nlength=0x1000\n",
    )
    .unwrap();
    let mut conn = connect(&with_map(&image, &descending)).unwrap();
    let mut buf = [0u8; 0x20];
    conn.phys_view()
        .read_raw_into(Address::from(0x1ff0u64), &mut buf)
        .unwrap();
    assert_eq!(buf[..0x10], image.bytes(0x1ff0, 0x10)[..]);
    assert_eq!(buf[0x10..], image.bytes(0x5000, 0x10)[..]);
    // A misspelt key is named, not ignored.
    let misspelt = dir.path().join("misspelt.toml");
    std::fs::write(&misspelt, "[[range]]\nbase=0x0\nlenght=0x1000\n").unwrap();
    let err = refused(&with_map(&image, &misspelt));
    assert_eq!(err.1, ErrorKind::Configuration);
    assert!(logged("unknown field `lenght`"));

    // A map with no ranges once crashed the process inside LeechCore.
    for (name, text) in [("empty.txt", ""), ("comments.txt", "# no memory\n\n")] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let err = refused(&with_map(&image, &path));
        assert_eq!(err.1, ErrorKind::Configuration, "{name}");
        assert!(logged(&format!("memory map {}: no ranges", path.display())));
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_repeated_key_reaches_the_host_as_an_error_naming_it() {
    // A host that keeps its connector settings in memflow's serde form:
    // the repeat reaches the plugin, as it does not through memflow's
    // string parser, which keeps only the last `verbosity`.
    let image = Image::new(16 * MIB);
    let once: ConnectorArgs = format!("\"{}\":verbosity=0", image.device())
        .parse()
        .unwrap();
    let mut settings = serde_json::to_value(&once).unwrap();
    settings["extra_args"]["args"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({ "key": "verbosity", "value": "4" }));
    let twice: ConnectorArgs = serde_json::from_value(settings).unwrap();
    let err = inventory()
        .instantiate_connector("leechcore", None, Some(&twice))
        .err()
        .expect("a repeated key was accepted");
    assert_eq!(err.1, ErrorKind::Configuration);
    assert!(
        logged("leechcore: `verbosity` is given twice (`0` and `4`); give each argument once"),
        "{:?}",
        LOG.lock().unwrap_or_else(|e| e.into_inner())
    );
    // The same arguments once each open the image.
    inventory()
        .instantiate_connector("leechcore", None, Some(&once))
        .unwrap();
}

#[test]
fn a_memory_map_that_is_a_pipe_or_a_device_is_refused_at_once() {
    let image = Image::new(16 * MIB);
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("map.fifo");
    common::make_fifo(&fifo);
    drop(inventory()); // The log capture.
    for (map, kind) in [
        (fifo.as_path(), "a pipe"),
        (std::path::Path::new("/dev/zero"), "a character device"),
    ] {
        let args: ConnectorArgs = with_map(&image, map)
            .strip_prefix("leechcore:")
            .unwrap()
            .parse()
            .unwrap();
        // On an inventory of its own, on another thread, given 10 s: a
        // hang fails this test and holds up no other.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut inventory = Inventory::empty();
            inventory.add_dir(plugin_dir()).unwrap();
            let outcome = inventory.instantiate_connector("leechcore", None, Some(&args));
            tx.send(outcome.err().map(|e| e.1))
        });
        let outcome = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("memmap={} still opening after 10 s", map.display()));
        assert_eq!(outcome, Some(ErrorKind::Configuration));
        let line = format!(
            "memory map {}: it is {kind}, not a regular file",
            map.display()
        );
        assert!(
            logged(&line),
            "no log line holds {line:?}: {:?}",
            LOG.lock().unwrap_or_else(|e| e.into_inner())
        );
    }
}

#[test]
fn help_and_target_list_come_through_the_inventory() {
    let mut inv = inventory();
    let help = inv.connector_help("leechcore").unwrap();
    for key in [
        "device",
        "remote",
        "lib",
        "memmap",
        "verbosity",
        "max_address",
        "max_entries",
        "leechcore:fpga",
        // The order Library::load follows (docs/leechcore.md, "Where leechcore.so is
        // looked for").
        "default: LEECHCORE_LIB if set, else leechcore.so beside this plugin, then the system's",
    ] {
        assert!(help.contains(key), "help lacks {key}:\n{help}");
    }
    // Every listed target is a qemu device string (the list may be empty).
    for target in inv.connector_target_list("leechcore").unwrap() {
        assert!(target.name.starts_with("qemu://shm="), "{}", &*target.name);
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_quoted_path_with_an_apostrophe_keeps_the_arguments_after_it() {
    // memflow parses `memmap="…o'brien…",max_entries=1` right; the plugin
    // must not read the `'` as the start of a quote and swallow the rest.
    let image = Image::new(16 * MIB);
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("o'brien");
    std::fs::create_dir(&home).unwrap();
    let map = home.join("map.toml");
    std::fs::write(
        &map,
        "[[range]]\nbase=0x0\nlength=0x10000\nreal_base=0x100000\n",
    )
    .unwrap();
    let mut conn = connect_with_cache(
        &format!(
            "leechcore:\"{}\":memmap=\"{}\",max_entries=1",
            image.device(),
            map.display()
        ),
        false,
    );
    let spy = LeechCore::open(&DeviceConfig::new("existing")).unwrap();
    let before = spy.call_count(Call::ReadScatter);
    let (mut a, mut b) = ([0u8; 16], [0u8; 16]);
    let mut list = [
        CTup2(Address::from(0x10u64), a.as_mut_slice().into()),
        CTup2(Address::from(0x2010u64), b.as_mut_slice().into()),
    ];
    conn.phys_view().read_raw_list(&mut list).unwrap();
    assert_eq!(
        spy.call_count(Call::ReadScatter) - before,
        2,
        "max_entries=1 was not applied"
    );
    assert_eq!(a[..], image.bytes(0x10_0010, 16)[..], "the map applies");
    assert_eq!(b[..], image.bytes(0x10_2010, 16)[..], "the map applies");
}

/// Set for the child process of
/// [`an_inventory_dropped_first_leaves_the_plugins_log_working`].
const LOG_CHILD: &str = "LEECHIO_TEST_LOG_CHILD";

/// Two inventories in one program load the plugin once. The first to
/// create a connector gave the plugin its logger, which that inventory
/// owns; after it goes, the plugin (still loaded for the other) must log
/// through nothing it freed: memory of that size is filled with garbage
/// before the other's connector logs. Run in a child process, whose
/// inventories come in this order and no other test's.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn an_inventory_dropped_first_leaves_the_plugins_log_working() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "--nocapture", "log_child"])
        .env(LOG_CHILD, "1")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}\n{text}", out.status);
    assert!(text.contains("1 passed"), "{text}");
}

#[test]
#[ignore = "run by an_inventory_dropped_first_leaves_the_plugins_log_working in a child process"]
fn log_child() {
    assert!(
        std::env::var_os(LOG_CHILD).is_some(),
        "run by its parent test"
    );
    let image = Image::new(16 * MIB);
    let args: ConnectorArgs = format!("\"{}\"", image.device()).parse().unwrap();
    drop(inventory()); // The log capture; its inventory is not used.
    let mut kept = Inventory::empty();
    kept.add_dir(plugin_dir()).unwrap();
    {
        let mut first = Inventory::empty();
        first.add_dir(plugin_dir()).unwrap();
        first
            .instantiate_connector("leechcore", None, Some(&args))
            .unwrap();
    }
    // The size of memflow's `PluginLogger` (a level, three function
    // pointers, an atomic pointer), and some beside it, all 0xff.
    let garbage: Vec<Box<[u8]>> = (0..4096)
        .map(|i| vec![0xff; 24 + i % 48].into_boxed_slice())
        .collect();
    LOG.lock().unwrap().clear();
    kept.instantiate_connector("leechcore", None, Some(&args))
        .unwrap();
    drop(garbage);
    assert!(
        logged("leechcore: opened"),
        "{:?}",
        LOG.lock().unwrap_or_else(|e| e.into_inner())
    );
}
