//! The release builds some tests load or install: the memflow plugin,
//! libleechio, the command line. A test that needs one builds it itself,
//! with the command `make plugin`, `make ffi` or `make cli` runs, so it
//! never tests a build older than the sources (after `make unit` built
//! them, cargo finds nothing to do). Included by `tests/common` and by
//! `ffi/tests/c_build`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// `ROOT/target/release/`, after `cargo build --release -p PACKAGE` ran
/// in this test process: on its own, as `make plugin` (PACKAGE
/// `memflow-leechcore`), `make ffi` (`leechio-ffi`) and `make cli`
/// (`leechio-cli`) build it, so no feature of the tests' dependencies
/// (memflow's `dummy_mem`) reaches it. Tests that ask at once wait for
/// the one build.
pub fn release_dir(root: &Path, package: &str) -> PathBuf {
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let target = root.join("target");
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if !built.iter().any(|p| p == package) {
        let out = Command::new(env!("CARGO"))
            .args(["build", "--release", "-p", package, "--manifest-path"])
            .arg(root.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&target)
            .output()
            .unwrap_or_else(|e| panic!("cannot run cargo to build {package}: {e}"));
        assert!(
            out.status.success(),
            "`cargo build --release -p {package}` failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        built.push(package.to_string());
    }
    target.join("release")
}
