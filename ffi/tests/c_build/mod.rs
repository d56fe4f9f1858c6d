//! Building C and C++ test programs against an installed libleechio:
//! the release build (built as `make ffi` builds it, refused when older
//! than its sources),
//! installed into a prefix by `scripts/install-c.sh`, and programs
//! compiled against that prefix with `-Wall -Wextra -Werror`. Shared by
//! the tests of the C API (`ffi/tests/`) and the C test of the Linux
//! process list (`tests/c_processes.rs`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

// The tests of tests/ that include this module include tests/common too,
// and with it this file again.
#[allow(clippy::duplicate_mod)]
#[path = "../../../tests/common/release.rs"]
mod release;

/// The repository's root (the workspace's, which holds `Cargo.lock`),
/// from the tests of any package.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").exists())
        .expect("the workspace root")
        .to_path_buf()
}

/// The release build of `libleechio.so` and `.a` (built here as `make
/// ffi` builds it). Not this test run's own build: inside
/// `cargo test --workspace` the library would get memflow with the
/// `dummy_mem` feature from the dev-dependencies, and export its plugins.
pub fn build_dir() -> PathBuf {
    let dir = release::release_dir(&repo(), "leechio-ffi");
    assert!(
        dir.join("libleechio.so").exists() && dir.join("libleechio.a").exists(),
        "libleechio.so/.a not found in {}: run `make ffi`",
        dir.display()
    );
    assert_built_from_current_sources(&dir);
    dir
}

/// Fails unless the library in `dir` is at least as new as every source
/// file cargo built it from (its dep-info, `libleechio.d`). `cargo test`
/// rebuilds only the debug library: a release build left from before an
/// edit would have every C and C++ test here pass, or fail, for old code.
fn assert_built_from_current_sources(dir: &Path) {
    let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified());
    let built = ["libleechio.so", "libleechio.a"]
        .iter()
        .map(|lib| modified(&dir.join(lib)).expect("libleechio's time"))
        .min()
        .unwrap();
    let depinfo = dir.join("libleechio.d");
    let depinfo = std::fs::read_to_string(&depinfo)
        .unwrap_or_else(|e| panic!("{}: {e}: run `make ffi`", depinfo.display()));
    for line in depinfo.lines() {
        let Some((_, sources)) = line.split_once(": ") else {
            continue;
        };
        for source in dep_info_paths(sources) {
            match modified(Path::new(&source)) {
                Ok(time) => assert!(
                    time <= built,
                    "{source} changed after libleechio in {} was built: run `make ffi`",
                    dir.display()
                ),
                Err(e) => panic!(
                    "{source}, which libleechio in {} was built from: {e}: run `make ffi`",
                    dir.display()
                ),
            }
        }
    }
}

/// The paths of a dep-info line's right side: separated by spaces, with
/// spaces inside a path escaped by a backslash.
fn dep_info_paths(text: &str) -> Vec<String> {
    let mut paths = vec![String::new()];
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => paths.last_mut().unwrap().extend(chars.next()),
            ' ' => paths.push(String::new()),
            c => paths.last_mut().unwrap().push(c),
        }
    }
    paths.retain(|p| !p.is_empty());
    paths
}

/// Bytes as the test programs' parameter files give them (`unhex` in
/// `tests/c/common.c` reads them back): two hex digits a byte, `-` for none.
pub fn hex(bytes: &[u8]) -> String {
    match bytes.is_empty() {
        true => "-".into(),
        false => bytes.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

/// Runs `cmd`; fails the test unless it exits with success.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Installs the header and the release build of the library into
/// `prefix`.
pub fn install(prefix: &Path) {
    run(Command::new(repo().join("scripts/install-c.sh"))
        .arg(prefix)
        .arg(build_dir()));
}

/// Makes a test program use only what was installed: the `libleechio.so`
/// its rpath names (cargo's `LD_LIBRARY_PATH`, which holds
/// `target/debug`, would win over that rpath and load whatever debug
/// build lies there) and the `leechcore.so` beside it.
pub fn installed_only(cmd: &mut Command) -> &mut Command {
    cmd.env_remove("LD_LIBRARY_PATH")
        .env_remove("LEECHCORE_LIB")
}

/// Compiles `sources` with the warnings that must not appear, against
/// the header and library installed in `prefix` (shared unless
/// `static_lib`), into a program in `dir`.
pub fn compile(
    prefix: &Path,
    dir: &Path,
    compiler: &str,
    std: &str,
    sources: &[PathBuf],
    static_lib: bool,
) -> PathBuf {
    let exe = dir
        .join(sources[0].file_stem().unwrap())
        .with_extension(if static_lib { "static" } else { "shared" });
    let mut cmd = Command::new(compiler);
    cmd.args([std, "-Wall", "-Wextra", "-Werror", "-g", "-O1"])
        .arg("-I")
        .arg(prefix.join("include"))
        .args(sources)
        .arg("-o")
        .arg(&exe);
    let lib = prefix.join("lib");
    if static_lib {
        // What the staticlib needs from the system (rustc's
        // --print native-static-libs for this target).
        cmd.arg(lib.join("libleechio.a"))
            .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil"]);
    } else {
        cmd.arg("-L").arg(&lib).arg("-lleechio");
    }
    // The shared library is found through the rpath; so is LeechCore,
    // which libleechio loads by name through the dynamic linker (with
    // the static library, nothing else would find it there: no path
    // of the build is kept in libleechio).
    cmd.arg(format!("-Wl,-rpath,{}", lib.display()));
    run(&mut cmd);
    exe
}
