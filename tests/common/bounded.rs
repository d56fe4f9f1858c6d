//! Runs of a program that hostile input could make hang or grow: each
//! killed, failing the test, past a deadline, and measured for its peak
//! memory; a clean end is a result or a one-line error, no abort, no
//! panic, under a memory cap.

use std::io::Read;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What a bounded run did.
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// Peak resident memory, KiB.
    pub max_rss_kib: i64,
}

/// Runs `program ARGS`, killing it and failing the test when it has not
/// ended within `deadline`; reports its peak memory (which, after `exec`,
/// counts the peak of the process that started it: keep that one small). Output that is not
/// UTF-8 is kept lossily (U+FFFD), as a check for raw bytes needs only
/// to see that they are gone.
// The child is reaped with wait4, which std's `wait` does not offer, for
// its peak memory.
#[allow(clippy::zombie_processes)]
pub fn run_bounded(program: &Path, args: &[&str], deadline: Duration) -> Run {
    // A cache of its own, empty: the user's is neither read nor written.
    let cache = tempfile::tempdir().unwrap();
    let mut child = Command::new(program)
        .args(args)
        .env_remove("LEECHIO_DEVICE")
        .env("XDG_CACHE_HOME", cache.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the program");
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let pid = child.id() as libc::pid_t;
    let start = Instant::now();
    let (status, usage) = loop {
        let mut status = 0;
        // SAFETY: plain out-parameters for wait4.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `pid` is our child, not yet reaped; valid pointers.
        let done = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if done == pid {
            break (status, usage);
        }
        assert_eq!(done, 0, "wait4: {}", std::io::Error::last_os_error());
        if start.elapsed() > deadline {
            let _ = child.kill();
            panic!(
                "{} {args:?} still ran after {deadline:?}",
                program.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    use std::os::unix::process::ExitStatusExt;
    eprintln!(
        "{} {args:?}: {:.1} s, peak {} MiB",
        program.display(),
        start.elapsed().as_secs_f64(),
        usage.ru_maxrss >> 10
    );
    Run {
        status: ExitStatus::from_raw(status),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        max_rss_kib: usage.ru_maxrss,
    }
}

/// A clean end: success, or a failure with one-line messages; no abort,
/// no panic, peak memory under `cap_kib`.
pub fn assert_clean(run: &Run, what: &str, cap_kib: i64) {
    assert!(
        run.status.code().is_some(),
        "{what}: killed by a signal ({:?}): {}",
        run.status,
        run.stderr
    );
    assert!(
        !run.stderr.contains("panicked")
            && !run.stderr.contains("internal error")
            && !run.stderr.contains("memory allocation"),
        "{what}: {}",
        run.stderr
    );
    assert!(
        run.max_rss_kib < cap_kib,
        "{what}: peak memory {} MiB",
        run.max_rss_kib >> 10
    );
}
