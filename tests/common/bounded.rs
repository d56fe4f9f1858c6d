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
    /// Peak resident memory, KiB (see [`run_bounded`]).
    pub max_rss_kib: i64,
}

/// The peak resident memory (`VmHWM`) of process `pid` so far, KiB; `None`
/// once it has exited.
fn peak_kib(pid: &str) -> Option<i64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs `program ARGS`, killing it and failing the test when it has not
/// ended within `deadline`; reports its peak memory. Linux counts in a
/// program's `ru_maxrss` the resident memory of the process that started
/// it (`exec` keeps it), so when that is not above this process's own
/// peak, the program's peak is the largest `VmHWM` seen while it ran
/// (sampled every 20 ms; its own address space's). This process's peak is
/// read before the start as well as after: the kernel updates a peak
/// lazily, so memory freed in between (another thread's) can leave the
/// later reading below what the program inherited. Output that is not
/// UTF-8 is kept lossily (U+FFFD), as a check for raw bytes needs only
/// to see that they are gone.
// The child is reaped with wait4, which std's `wait` does not offer, for
// its peak memory.
#[allow(clippy::zombie_processes)]
pub fn run_bounded(program: &Path, args: &[&str], deadline: Duration) -> Run {
    // A cache of its own, empty: the user's is neither read nor written.
    let cache = tempfile::tempdir().unwrap();
    let own_before = peak_kib("self").unwrap_or(i64::MAX);
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
    let own = own_before.max(peak_kib("self").unwrap_or(i64::MAX));
    let mut seen = 0;
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
        seen = seen.max(peak_kib(&pid.to_string()).unwrap_or(0));
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
    let peak = match usage.ru_maxrss > own {
        true => usage.ru_maxrss,
        false => seen,
    };
    eprintln!(
        "{} {args:?}: {:.1} s, peak {} MiB",
        program.display(),
        start.elapsed().as_secs_f64(),
        peak >> 10
    );
    Run {
        status: ExitStatus::from_raw(status),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        max_rss_kib: peak,
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
