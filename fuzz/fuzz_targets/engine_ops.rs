//! The engine against its byte model (tests/model/engine.rs, shared with
//! tests/engine_model.rs): a device, then batches of reads and writes in
//! every form the engine takes, all chosen by the input, must see and
//! leave exactly what running them one by one would.

#![no_main]

#[allow(dead_code)]
#[path = "../../tests/model/engine.rs"]
mod engine;

use std::ops::{Bound, RangeBounds};

use engine::{random_op, run_and_compare, Choices, Device, Model, Op};
use leechio::{EngineConfig, Memory};
use libfuzzer_sys::arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;

/// The first and last value of `range` within `min..=max`.
fn ends<T: Copy>(
    range: impl RangeBounds<T>,
    min: T,
    max: T,
    prev: impl Fn(T) -> T,
    next: impl Fn(T) -> T,
) -> (T, T) {
    let first = match range.start_bound() {
        Bound::Included(&a) => a,
        Bound::Excluded(&a) => next(a),
        Bound::Unbounded => min,
    };
    let last = match range.end_bound() {
        Bound::Included(&b) => b,
        Bound::Excluded(&b) => prev(b),
        Bound::Unbounded => max,
    };
    (first, last)
}

/// The input's bytes as choices; once they run out, every choice is the
/// lowest of its range.
impl Choices for Unstructured<'_> {
    fn u8(&mut self, range: impl RangeBounds<u8>) -> u8 {
        let (a, b) = ends(range, u8::MIN, u8::MAX, |v| v - 1, |v| v + 1);
        self.int_in_range(a..=b).unwrap_or(a)
    }
    fn u64(&mut self, range: impl RangeBounds<u64>) -> u64 {
        let (a, b) = ends(range, u64::MIN, u64::MAX, |v| v - 1, |v| v + 1);
        self.int_in_range(a..=b).unwrap_or(a)
    }
    fn usize(&mut self, range: impl RangeBounds<usize>) -> usize {
        let (a, b) = ends(range, usize::MIN, usize::MAX, |v| v - 1, |v| v + 1);
        self.int_in_range(a..=b).unwrap_or(a)
    }
    fn bool(&mut self) -> bool {
        self.arbitrary().unwrap_or(false)
    }
}

fuzz_target!(|data: &[u8]| {
    let u = &mut Unstructured::new(data);
    let device = Device::random(u);
    let backend = device.backend();
    let config = EngineConfig {
        max_entries_per_call: [1, 3, 64, usize::MAX][u.usize(0..4)],
    };
    let mem = Memory::with_config(backend.clone(), config);
    let mut model = Model::new(backend.bytes(0, device.size as usize), device.clone());
    for batch in 0..u.usize(1..=6) {
        let ops: Vec<Op> = (0..u.usize(1..=24))
            .map(|_| random_op(u, &device))
            .collect();
        // As futures (one flush), or as a synchronous batch of the reads
        // or of the writes.
        let (ops, as_futures) = match u.u8(0..3) {
            0 => (ops, true),
            kind => {
                let reads = kind == 1;
                let ops: Vec<Op> = ops
                    .iter()
                    .filter(|op| matches!(op, Op::Read { .. }) == reads)
                    .map(Op::plain)
                    .collect();
                (ops, false)
            }
        };
        if ops.is_empty() {
            continue;
        }
        run_and_compare(&mem, &backend, &mut model, &ops, as_futures, || {
            format!("{device:?}, batch {batch}")
        });
    }
});
