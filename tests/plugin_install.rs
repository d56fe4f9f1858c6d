//! `make install`'s result (scripts/install.sh): memflow's
//! `Inventory::scan()` finds the plugin in ~/.local/lib/memflow (the
//! connector `leechcore` and the OS `linux_btf`, from one library), and the
//! plugin loads the leechcore.so beside it; under the prefix, the command
//! line finds LeechCore in the prefix's lib folder, every command has its
//! man page, and nothing of the test set-up is installed.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::Image;
use memflow::prelude::v1::*;

const CHILD: &str = "LEECHIO_SCAN_CHILD_DEVICE";

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn an_installed_plugin_is_scanned_and_loads_leechcore_beside_itself() {
    let home = tempfile::tempdir().unwrap();
    let dest = home.path().join(".local/lib/memflow");
    install(&dest, &home.path().join("prefix"));
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

/// Runs scripts/install.sh, what `make install` runs after its builds, with
/// the plugin into `plugins` and the rest under `prefix`.
fn install(plugins: &Path, prefix: &Path) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // The release builds the script installs.
    for package in ["memflow-leechcore", "leechio-ffi", "leechio-cli"] {
        common::release::release_dir(&root, package);
    }
    let run = Command::new(root.join("scripts/install.sh"))
        .arg(plugins)
        .arg(prefix)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "install.sh failed (are the release builds there? `make plugin ffi cli`): {}",
        String::from_utf8_lossy(&run.stderr)
    );
}

/// Every file under `dir`, as paths relative to it.
fn files_under(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap();
                out.insert(rel.to_string_lossy().into_owned());
            }
        }
    }
    out
}

/// The commands `leechio --help` lists (but `help`).
fn listed_commands(leechio: &Path) -> Vec<String> {
    let help = Command::new(leechio).arg("--help").output().unwrap();
    assert!(help.status.success());
    let text = String::from_utf8(help.stdout).unwrap();
    text.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)] // Miri: runs scripts and programs
fn the_prefix_gets_the_command_line_its_man_pages_and_the_c_library_and_nothing_else() {
    let home = tempfile::tempdir().unwrap();
    let prefix = home.path().join("prefix");
    install(&home.path().join("plugins"), &prefix);

    // What the prefix holds: the product, and LeechCore's own files (as
    // target/leechcore has them: leechcore.so, its device plugins and
    // their libraries), nothing of the test set-up.
    let leechcore: BTreeSet<String> =
        std::fs::read_dir(common::repo_root().join("target/leechcore"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".so"))
            .map(|n| format!("lib/{n}"))
            .collect();
    let leechio = prefix.join("bin/leechio");
    let commands = listed_commands(&leechio);
    assert!(
        ["ps", "maps", "dump", "sockets", "check", "cache"]
            .iter()
            .all(|c| commands.iter().any(|l| l == c)),
        "--help lists {commands:?}"
    );
    let mut want: BTreeSet<String> = [
        "bin/leechio",
        "include/leechio.h",
        "include/leechio.hpp",
        "lib/libleechio.so",
        "lib/libleechio.a",
        "share/leechio/leechio.supp",
        "share/man/man1/leechio.1",
    ]
    .into_iter()
    .map(str::to_string)
    .chain(leechcore)
    .chain(
        commands
            .iter()
            .map(|c| format!("share/man/man1/leechio-{c}.1")),
    )
    .collect();
    // `cache` has commands of its own, each with its page.
    want.insert("share/man/man1/leechio-cache-ls.1".into());
    want.insert("share/man/man1/leechio-cache-cat.1".into());
    assert_eq!(files_under(&prefix), want);

    // Each page is the command's, and says what its --help says (roff's
    // escapes of `-` and `'` undone).
    for c in &commands {
        let page =
            std::fs::read_to_string(prefix.join(format!("share/man/man1/leechio-{c}.1"))).unwrap();
        assert!(
            page.contains(&format!(".TH leechio-{c} 1")),
            "leechio-{c}.1"
        );
        let text = page.replace("\\-", "-").replace("\\*(Aq", "'");
        let help = Command::new(&leechio).args([c, "--help"]).output().unwrap();
        let about = String::from_utf8(help.stdout).unwrap();
        let first = about.lines().next().unwrap();
        assert!(text.contains(first), "leechio-{c}.1 lacks {first:?}");
    }

    // The installed command line finds LeechCore in the prefix's lib
    // folder, with no variable pointing at it.
    let image = common::Image::new(16 << 20);
    let run = Command::new(&leechio)
        .args(["-d", &image.device(), "info", "--json"])
        .env_remove("LEECHCORE_LIB")
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let info: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(
        info["library"].as_str().map(PathBuf::from),
        Some(prefix.join("lib/leechcore.so").canonicalize().unwrap()),
        "{info}"
    );
    assert_eq!(info["memory_size"], 16 << 20, "{info}");
}
