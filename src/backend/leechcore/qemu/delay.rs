//! The qemu device's FPGA emulation, made exact.
//!
//! With `delay-latency-ns=N` and `delay-readpage-ns=M`, LeechCore 2.23.3's
//! qemu device makes each read call take N ns plus M ns per entry, like a
//! PCILeech board. It waits by comparing only the nanoseconds part of
//! `CLOCK_MONOTONIC`, so a delay that crosses a whole second ends there: a
//! call of 4096 pages (86 ms at 21 µs a page) would be cut short about one
//! time in twelve, flattering exactly the batched reads a benchmark
//! compares. The device finishes such a delay itself, after the call.

use std::time::{Duration, Instant};

/// The delays a qemu device string asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EmulatedDelay {
    latency_ns: u64,
    readpage_ns: u64,
}

impl EmulatedDelay {
    /// The delays of `delay-latency-ns` and `delay-readpage-ns`; `None`
    /// when both are 0, as LeechCore then adds none (and the device need
    /// not look at the clock).
    pub(crate) fn new(latency_ns: u64, readpage_ns: u64) -> Option<Self> {
        (latency_ns > 0 || readpage_ns > 0).then_some(EmulatedDelay {
            latency_ns,
            readpage_ns,
        })
    }

    /// How long LeechCore makes a read call of `entries` entries take.
    pub(crate) fn of_call(&self, entries: usize) -> Duration {
        let per_entry = self
            .readpage_ns
            .saturating_mul(u64::try_from(entries).unwrap_or(u64::MAX));
        Duration::from_nanos(self.latency_ns.saturating_add(per_entry))
    }

    /// Waits out what LeechCore left of the delay of a read call of
    /// `entries` entries that began at `started` (nothing when it was not
    /// cut short).
    pub(crate) fn finish(&self, started: Instant, entries: usize) {
        let Some(end) = started.checked_add(self.of_call(entries)) else {
            return;
        };
        let left = end.saturating_duration_since(Instant::now());
        if !left.is_zero() {
            std::thread::sleep(left);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_takes_its_latency_and_a_delay_per_entry() {
        assert_eq!(EmulatedDelay::new(0, 0), None);
        let board = EmulatedDelay::new(150_000, 21_000).unwrap();
        assert_eq!(board.of_call(0), Duration::from_nanos(150_000));
        assert_eq!(
            board.of_call(4096),
            Duration::from_nanos(150_000 + 4096 * 21_000)
        );
        let huge = EmulatedDelay::new(u64::MAX - 1, u64::MAX).unwrap();
        assert_eq!(huge.of_call(2), Duration::from_nanos(u64::MAX));
        assert_eq!(
            EmulatedDelay::new(0, 1).unwrap().of_call(3),
            Duration::from_nanos(3)
        );
    }

    #[test]
    fn a_delay_cut_short_is_waited_out_and_a_whole_one_is_not_lengthened() {
        let delay = EmulatedDelay::new(20_000_000, 5_000_000).unwrap();
        // The call "returned" at once: the whole 20 + 2 x 5 ms is left.
        let started = Instant::now();
        delay.finish(started, 2);
        assert!(started.elapsed() >= Duration::from_millis(30));
        // A call that took its whole delay (the same one, now over): no
        // more wait.
        let before = Instant::now();
        delay.finish(started, 2);
        assert!(before.elapsed() < Duration::from_millis(30));
    }
}
