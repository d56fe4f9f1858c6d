//! Timing a run: its time and the device calls LeechCore counted, the
//! median of several runs, and what is being measured.

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

/// Says on a terminal's stderr, in one line rewritten each time, what is
/// being measured (a run on an emulated FPGA board takes minutes).
pub(super) fn progress(workload: &str, method: &str) {
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
    let before = counter.call_count(Call::ReadScatter);
    let start = Instant::now();
    f();
    let elapsed = start.elapsed();
    (elapsed, counter.call_count(Call::ReadScatter) - before)
}

impl Bench {
    /// Measures the limit row of `workload` again with `run`, after the
    /// rows it bounds, and keeps the faster median. A limit is the best its
    /// baseline can do: a machine busier while it ran first (a sub-
    /// millisecond row on an image feels every other process) must not let
    /// a row of the same reads pass it.
    pub(super) fn limit_again(
        &mut self,
        workload: &str,
        mut run: impl FnMut() -> Result<(Duration, u64), Failure>,
    ) -> Result<(), Failure> {
        let Some(i) = self
            .rows
            .iter()
            .position(|r| r.workload == workload && r.method.starts_with("limit"))
        else {
            return Ok(());
        };
        progress(workload, self.rows[i].method);
        let mut results = Vec::new();
        for _ in 0..self.runs {
            stop_requested()?;
            results.push(run()?);
        }
        let (time, calls) = median(results);
        let row = &mut self.rows[i];
        if time < row.time {
            row.time = time;
            row.calls = calls;
        }
        Ok(())
    }
}
