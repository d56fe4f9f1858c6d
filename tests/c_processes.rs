//! The C API's process list (`leechio_kernel_find`,
//! `leechio_kernel_processes`, `leechio_space_new_for_pid`), as a C
//! program uses it against the installed release library: on a memory
//! image of the test guest, checked against what the guest's /proc said
//! (its user processes and `/proc/modules`) and the bytes of its pattern
//! process (`ffi/tests/c/processes_test.c`), and as a C++ program uses it
//! through `leechio.hpp` (`ffi/tests/cpp/processes_test.cpp`).

#[path = "../ffi/tests/c_build/mod.rs"]
mod c_build;
mod common;

use std::fmt::Write as _;
use std::process::Command;

use common::qemu::shared_guest;

/// Read calls of a list of the guest (as `tests/linux_processes.rs`
/// counts them).
const LIST_CALLS: u64 = 11;

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn c_program_lists_the_processes_of_a_guest_image() {
    let guest = shared_guest();
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("guest.raw");
    {
        let _paused = guest.pause();
        std::fs::write(&image, guest.pmemsave(0, guest.memory().bytes())).unwrap();
    }
    let not_linux = dir.path().join("zeros.raw");
    std::fs::File::create(&not_linux)
        .and_then(|f| f.set_len(16 << 20))
        .unwrap();
    let pattern = guest.pattern();
    let mut params = format!(
        "image {}\nnotlinux {}\nlevels {}\ncalls {LIST_CALLS}\npattern {} {:x}\n",
        image.display(),
        not_linux.display(),
        guest.paging().levels(),
        pattern.pid,
        pattern.start
    );
    for task in guest.processes().iter().filter(|t| !t.kernel_thread) {
        writeln!(
            params,
            "user {} {} {} {} {}",
            task.pid,
            task.ppid,
            task.state,
            c_build::hex(task.comm.as_bytes()),
            c_build::hex(&task.cmdline_bytes)
        )
        .unwrap();
    }
    let modules = &guest.oracle().modules;
    assert!(modules.len() >= 2, "the guest loads modules: {modules:?}");
    for m in modules {
        writeln!(
            params,
            "module {} {} {:x} {}",
            m.name, m.size, m.address, m.state
        )
        .unwrap();
    }
    let params_path = dir.path().join("params.txt");
    std::fs::write(&params_path, params).unwrap();

    let prefix = dir.path().join("prefix");
    c_build::install(&prefix);
    let sources =
        ["processes_test.c", "common.c"].map(|name| c_build::repo().join("ffi/tests/c").join(name));
    let exe = c_build::compile(&prefix, dir.path(), "cc", "-std=c11", &sources, false);
    let out = c_build::run(c_build::installed_only(
        Command::new(&exe).arg(&params_path),
    ));
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprint!("processes_test: {stdout}");
    assert!(stdout.contains("checks passed"), "{stdout}");

    // The same through the C++ wrapper (leechio.hpp).
    let source = c_build::repo().join("ffi/tests/cpp/processes_test.cpp");
    let exe = c_build::compile(&prefix, dir.path(), "c++", "-std=c++17", &[source], false);
    let out = c_build::run(c_build::installed_only(
        Command::new(&exe).arg(&params_path),
    ));
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprint!("processes_test.cpp: {stdout}");
    assert!(stdout.contains("checks passed"), "{stdout}");
}
