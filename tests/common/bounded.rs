//! Runs of the `leechio` binary bounded in time and memory, for tests of
//! hostile inputs: a run that hangs is killed and fails its test, and its
//! peak memory is reported.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What a bounded run of `leechio` did.
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// Peak resident memory, KiB.
    pub max_rss_kib: i64,
}

/// Runs `leechio ARGS`, killing it and failing the test when it has not
/// ended within `deadline`; reports its peak memory.
// The child is reaped with wait4, which std's `wait` does not offer, for
// its peak memory.
#[allow(clippy::zombie_processes)]
pub fn run_bounded(leechio: &str, args: &[&str], deadline: Duration) -> Run {
    let mut child = Command::new(leechio)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run leechio");
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
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
            panic!("leechio {args:?} still ran after {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    use std::os::unix::process::ExitStatusExt;
    eprintln!(
        "leechio {args:?}: {:.1} s, peak {} MiB",
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

/// Time and memory every run here must stay within (a debug build on a
/// loaded 2-core machine; the README's figures are a release build's).
pub const DEADLINE: Duration = Duration::from_secs(30);
pub const MEMORY_CAP_KIB: i64 = 256 << 10;

/// A clean end: success, or a failure with a one-line message; no abort,
/// no panic, within the memory cap.
pub fn assert_clean(run: &Run, what: &str) {
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
        run.max_rss_kib < MEMORY_CAP_KIB,
        "{what}: peak memory {} MiB",
        run.max_rss_kib >> 10
    );
}
