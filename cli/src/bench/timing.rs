//! Timing a run: device calls counted by LeechCore, medians, and runs
//! aligned so that an emulated board's delays are whole.

use super::*;

/// The median time of `runs` (the mean of the middle two for an even
/// count) and the device calls of the middle run.
pub(super) fn median(mut runs: Vec<(Duration, u64)>) -> (Duration, u64) {
    runs.sort();
    let n = runs.len();
    let time = if n % 2 == 0 {
        (runs[n / 2 - 1].0 + runs[n / 2].0) / 2
    } else {
        runs[n / 2].0
    };
    (time, runs[(n - 1) / 2].1)
}

/// Whether runs start just after a whole second (see [`wait_for_whole_second`]).
pub(super) static ALIGN_RUNS: AtomicBool = AtomicBool::new(false);
/// How long the last run of the current row took, in ns (`u64::MAX`: no
/// run yet).
pub(super) static LAST_RUN_NS: AtomicU64 = AtomicU64::new(u64::MAX);

/// Whether the device string asks LeechCore's qemu device for FPGA
/// emulation (`delay-latency-ns`, `delay-readpage-ns`).
pub(super) fn emulates_delays(device: &str) -> bool {
    device.contains("delay-latency-ns=") || device.contains("delay-readpage-ns=")
}

/// Makes sure the next run ends within the current second of
/// `CLOCK_MONOTONIC`, sleeping until just after the next whole second when
/// it might not.
///
/// LeechCore 2.23.3's qemu device emulates an FPGA board by busy-waiting
/// after each call, and its wait compares only the nanoseconds part of
/// `CLOCK_MONOTONIC`: a delay that crosses a whole second ends there. A
/// batch of 4096 pages (86 ms of emulated delay) would be cut short about
/// one run in twelve, the 64 MiB dump (344 ms) one in three, flattering
/// exactly the batched rows. A run under a second that starts just after a
/// whole second never crosses one. The first run of a row always waits;
/// later runs wait only when twice the previous one does not fit in what is
/// left of the second.
pub(super) fn wait_for_whole_second() {
    let last = LAST_RUN_NS.load(Ordering::Relaxed);
    let needed = if last == u64::MAX {
        // Unknown length: start at the next whole second.
        Duration::from_millis(999)
    } else {
        Duration::from_nanos(last.saturating_mul(2).saturating_add(10_000_000))
    };
    leechio::targets::fit_emulated_delay(needed);
}

/// Says on a terminal's stderr, in one line rewritten each time, what is
/// being measured (a run on an emulated FPGA board takes minutes).
pub(super) fn progress(workload: &str, method: &str) {
    LAST_RUN_NS.store(u64::MAX, Ordering::Relaxed);
    if std::io::stderr().is_terminal() {
        err!("\r\x1b[2Kmeasuring: {workload} / {method}");
    }
}

/// Clears the line [`progress`] wrote.
pub(super) fn progress_done() {
    if std::io::stderr().is_terminal() {
        err!("\r\x1b[2K");
    }
}

/// Times `f` and counts the scatter calls it makes on `counter`.
pub(super) fn timed(counter: &LeechCore, f: impl FnOnce()) -> (Duration, u64) {
    if ALIGN_RUNS.load(Ordering::Relaxed) {
        wait_for_whole_second();
    }
    let before = counter.call_count(Call::ReadScatter);
    let start = Instant::now();
    f();
    let elapsed = start.elapsed();
    LAST_RUN_NS.store(
        u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX - 1),
        Ordering::Relaxed,
    );
    (elapsed, counter.call_count(Call::ReadScatter) - before)
}
