//! Build script of every package with tests that need the test set-up
//! (`make setup`): LeechCore in `target/leechcore/`, the guest kernels in
//! `target/guest/`, drgn in `target/drgn/`, and the programs the tests run
//! (QEMU, busybox, gdb, valgrind, binutils, a C and a C++ compiler).
//!
//! With all of it there, the package is built with `--cfg leechio_lab`. A
//! test that needs any of it is declared with
//! `#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]`, so in a
//! fresh clone `cargo test` passes and counts those tests as ignored.
//!
//! When something is missing, the debug build of `leechcore-sys` (which
//! every package depends on, so each `cargo test` says it once; a release
//! build of the product has no tests to ignore) warns in one line naming
//! what is missing and what to run; with `LEECHIO_REQUIRE_LAB`
//! set (`make unit`, which `make test` and CI run), every build fails
//! instead, so no test can be ignored there.
//!
//! Cargo runs this again when a file it found changes or goes, or when
//! `LEECHIO_REQUIRE_LAB` changes while something is missing. It cannot
//! watch for a missing file to appear (a missing watched file would
//! rebuild everything at every run), so `make setup` touches this script
//! when it is done.

use std::path::{Path, PathBuf};

/// The cfg a test that needs the set-up is ignored without.
const CFG: &str = "leechio_lab";
/// Set by `make unit`: a missing set-up fails the build.
const REQUIRE: &str = "LEECHIO_REQUIRE_LAB";
/// The one package whose build warns.
const WARNS: &str = "leechcore-sys";

/// The files the set-up installs (in the workspace unless absolute).
const FILES: &[&str] = &[
    // LeechCore and the device plugins the tests open.
    "target/leechcore/leechcore.so",
    "target/leechcore/leechcore_device_qemu.so",
    "target/leechcore/leechcore_device_rawtcp.so",
    // The guest kernels and the modules their guests load.
    "target/guest/vmlinuz",
    "target/guest/vmlinuz-cloud",
    "target/guest/modules",
    // drgn's virtual environment.
    "target/drgn/bin/python",
    // scripts/guest.sh copies it into the guest as is.
    "/bin/busybox",
];

/// The programs the tests and scripts/guest.sh run, looked up on `PATH`.
const PROGRAMS: &[&str] = &[
    "qemu-system-x86_64",
    "cpio",
    "gdb",
    "valgrind",
    "readelf",
    "nm",
    "cc",
    "c++",
    "python3",
];

fn main() {
    println!("cargo::rustc-check-cfg=cfg({CFG})");
    let root = workspace_root();
    println!(
        "cargo::rerun-if-changed={}",
        root.join("build/lab.rs").display()
    );
    let mut missing = Vec::new();
    for file in FILES {
        let path = root.join(file);
        match path.exists() {
            true => println!("cargo::rerun-if-changed={}", path.display()),
            false => missing.push(file.to_string()),
        }
    }
    for program in PROGRAMS {
        match on_path(program) {
            Some(path) => println!("cargo::rerun-if-changed={}", path.display()),
            None => missing.push(program.to_string()),
        }
    }
    if missing.is_empty() {
        println!("cargo::rustc-cfg={CFG}");
        return;
    }
    println!("cargo::rerun-if-env-changed={REQUIRE}");
    // The first missing file of each folder of target/ is enough to name
    // what to install.
    let mut named: Vec<String> = Vec::new();
    for item in missing {
        let first = target_folder(&item)
            .is_none_or(|folder| named.iter().all(|n| target_folder(n) != Some(folder)));
        if first {
            named.push(item);
        }
    }
    let what = format!("the test set-up is missing ({})", named.join(", "));
    if std::env::var_os(REQUIRE).is_some_and(|v| !v.is_empty()) {
        eprintln!(
            "{what}: run `make setup` (as root); {REQUIRE} is set, so no test may be ignored"
        );
        std::process::exit(1);
    }
    if std::env::var("CARGO_PKG_NAME").as_deref() == Ok(WARNS)
        && std::env::var("PROFILE").as_deref() == Ok("debug")
    {
        println!(
            "cargo::warning={what}: the tests that need it are ignored; `make setup` (as root) installs it"
        );
    }
}

/// `leechcore` for `target/leechcore/leechcore.so`; `None` outside
/// `target/`.
fn target_folder(path: &str) -> Option<&str> {
    path.strip_prefix("target/")?.split('/').next()
}

/// The folder holding `build/` (this script) and `target/`: the package's
/// own for the root package, its parent for the others.
fn workspace_root() -> PathBuf {
    let manifest =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|dir| dir.join("build/lab.rs").is_file())
        .unwrap_or(&manifest)
        .to_path_buf()
}

/// `program` as the tests' `Command::new` finds it: the first executable
/// file of that name in a folder of `PATH`.
fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|file| executable(file))
}

fn executable(file: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(file).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
