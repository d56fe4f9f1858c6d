//! `make install`'s result: memflow's `Inventory::scan()` finds the plugin in
//! ~/.local/lib/memflow (the connector `leechcore` and the OS `linux_btf`,
//! from one library), and the plugin loads the leechcore.so beside it.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::Image;
use memflow::prelude::v1::*;

const CHILD: &str = "LEECHIO_SCAN_CHILD_DEVICE";

#[test]
fn an_installed_plugin_is_scanned_and_loads_leechcore_beside_itself() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let home = tempfile::tempdir().unwrap();
    let dest = home.path().join(".local/lib/memflow");
    let status = Command::new(root.join("scripts/install-plugin.sh"))
        .arg(&dest)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "install-plugin.sh failed (is the plugin built? `make plugin`)"
    );
    for file in [
        "libmemflow_leechcore.so",
        "leechcore.so",
        "leechcore_device_qemu.so",
    ] {
        assert!(dest.join(file).exists(), "{file} not installed");
    }

    let image = Image::new(16 << 20);
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "scan_in_a_fresh_home",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("HOME", home.path())
        .env_remove("LEECHCORE_LIB")
        .env(CHILD, image.device())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let beside = format!("from {}", dest.join("leechcore.so").display());
    assert!(
        stdout.contains(&beside),
        "the plugin did not load LeechCore beside itself:\n{stdout}"
    );
    assert!(stdout.contains("first page matches the image"), "{stdout}");
    assert!(stdout.contains("OS plugins: [\"linux_btf\"]"), "{stdout}");
}

/// Logs to stdout, for the parent to read.
struct Print;

impl log::Log for Print {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, record: &log::Record) {
        println!("{} {}", record.level(), record.args());
    }
    fn flush(&self) {}
}

#[test]
#[ignore = "run by the install test, in a child process with its own HOME"]
fn scan_in_a_fresh_home() {
    let device = std::env::var(CHILD)
        .expect("run by an_installed_plugin_is_scanned_and_loads_leechcore_beside_itself");
    log::set_logger(&Print).unwrap();
    log::set_max_level(log::LevelFilter::Info);
    let mut inventory = Inventory::scan();
    println!("OS plugins: {:?}", inventory.available_os());
    let args: ConnectorArgs = format!("\"{device}\"").parse().unwrap();
    let mut conn = inventory
        .instantiate_connector("leechcore", None, Some(&args))
        .unwrap();
    let mut page = vec![0u8; 0x1000];
    conn.phys_view()
        .read_raw_into(Address::null(), &mut page)
        .unwrap();
    let path = device.strip_prefix("file://").unwrap();
    assert_eq!(
        page,
        common::read_file_at(std::path::Path::new(path), 0, 0x1000)
    );
    println!("first page matches the image");
}
