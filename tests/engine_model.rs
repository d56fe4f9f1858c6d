//! The engine against a byte-level model: random batches of reads and
//! writes of any size and alignment, across pages, holes, the end of
//! memory and the end of the address space, in every form (borrowed,
//! owned, values, fragment streams, scoped, synchronous batches), on
//! devices with other entry rules than LeechCore's, must leave and see
//! exactly what running them one by one would. Then the same from several
//! threads sharing one engine, with some reads abandoned midway. The
//! model is in model/engine.rs, which the fuzz target `engine_ops` runs
//! on inputs of its own.

#[path = "model/engine.rs"]
mod engine;

use std::sync::Arc;

use engine::*;
use fastrand::Rng;
use leechio::{EngineConfig, MemBackend, Memory};

/// The threads' memory: eight pages each.
const MEMORY: u64 = 8 * PAGE;

#[test]
fn random_batches_see_and_leave_what_running_them_in_order_would() {
    for seed in 0..600 {
        let mut rng = Rng::with_seed(seed);
        let device = Device::random(&mut rng);
        let backend = device.backend();
        let max_entries = [1, 3, 64, usize::MAX][rng.usize(0..4)];
        let config = EngineConfig {
            max_entries_per_call: max_entries,
        };
        let mem = Memory::with_config(backend.clone(), config);
        let size = device.size as usize;
        let mut model = Model::new(backend.bytes(0, size), device.clone());
        // Batches of futures (each one flush, of one or more rounds), then
        // a synchronous batch of writes and one of reads.
        for batch in 0..5 {
            let kind = |op: &Op| match batch {
                3 => matches!(op, Op::Write { .. }),
                4 => matches!(op, Op::Read { .. }),
                _ => true,
            };
            let ops: Vec<Op> = (0..rng.usize(1..=24))
                .map(|_| {
                    let op = std::iter::repeat_with(|| random_op(&mut rng, &device))
                        .find(kind)
                        .unwrap();
                    if batch < 3 {
                        op
                    } else {
                        op.plain()
                    }
                })
                .collect();
            run_and_compare(&mem, &backend, &mut model, &ops, batch < 3, || {
                format!("seed {seed} on {device:?}, batch {batch}")
            });
        }
    }
}

#[test]
fn threads_sharing_an_engine_each_keep_their_program_order() {
    const THREADS: u64 = 4;
    // Each thread owns the model's memory shifted to its own region, so
    // the model holds per thread; flushes serve every thread's requests.
    let backend = Arc::new(MemBackend::with_address_pattern(
        (THREADS * MEMORY) as usize,
    ));
    let mem = Memory::with_config(backend.clone(), EngineConfig::default());
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (mem, backend) = (mem.clone(), &backend);
            s.spawn(move || {
                let base = t * MEMORY;
                let mut rng = Rng::with_seed(1000 + t);
                let device = Device::plain(MEMORY);
                let mut model = Model::new(backend.bytes(base, MEMORY as usize), device.clone());
                for batch in 0..150 {
                    // Inside memory and without holes: the other threads'
                    // regions follow this one.
                    let ops: Vec<Op> = (0..rng.usize(1..=40))
                        .map(|_| loop {
                            let op = random_op(&mut rng, &device);
                            let (addr, len) = op.span();
                            if addr
                                .checked_add(len as u64)
                                .is_some_and(|end| end <= MEMORY)
                            {
                                break op;
                            }
                        })
                        .collect();
                    let dropped: Vec<bool> = ops
                        .iter()
                        .map(|op| {
                            matches!(
                                op,
                                Op::Read {
                                    via: Via::Borrowed | Via::Scoped,
                                    ..
                                }
                            ) && rng.u8(0..4) == 0
                        })
                        .collect();
                    let shifted: Vec<Op> = ops.iter().map(|op| op.shifted(base)).collect();
                    let got = run_futures(&mem, &shifted, read_buffers(&ops), PAGE, |i| dropped[i]);
                    let kept: Vec<Op> = ops
                        .iter()
                        .zip(&dropped)
                        .filter(|(_, &d)| !d)
                        .map(|(op, _)| op.clone())
                        .collect();
                    let mut want = expected(&mut model, &kept).into_iter();
                    for (i, (g, &d)) in got.iter().zip(&dropped).enumerate() {
                        if d {
                            let Outcome::Read(buf, _) = g else {
                                unreachable!()
                            };
                            assert!(
                                buf.iter().all(|&b| b == UNTOUCHED),
                                "thread {t}, batch {batch}: abandoned read {i} was written"
                            );
                        } else {
                            let w = want.next().unwrap();
                            check(g, &w, || format!("thread {t}, batch {batch}, op {i}"));
                        }
                    }
                }
                assert!(
                    backend.bytes(base, MEMORY as usize) == model.bytes,
                    "thread {t}: its memory differs from its model"
                );
            });
        }
    });
}

/// Many small reads and writes (1 to 20 bytes) packed into a few dozen
/// bytes around a page edge, so that nearly every one overlaps or shares
/// an 8-byte (or 4-byte) unit with others of the same flush: program
/// order, read-patch-write of neighbours and the rounds between them.
#[test]
fn dense_overlapping_small_requests_keep_program_order() {
    for seed in 0..1500 {
        let mut rng = Rng::with_seed(0xd0_0000 + seed);
        let mut device = Device::random(&mut rng);
        // Mostly writable, with holes rarely: the point is ordering.
        device.read_only = rng.u8(0..20) == 0;
        if rng.u8(0..4) != 0 {
            device.holes.clear();
        }
        let backend = device.backend();
        let max_entries = [1, 2, 64, usize::MAX][rng.usize(0..4)];
        let config = EngineConfig {
            max_entries_per_call: max_entries,
        };
        let mem = Memory::with_config(backend.clone(), config);
        let size = device.size as usize;
        let mut model = Model::new(backend.bytes(0, size), device.clone());
        let page = device.limits.page_size;
        let edge = page * rng.u64(1..device.size / page);
        let vias = [Via::Borrowed, Via::Owned, Via::Fragments, Via::Scoped];
        for batch in 0..4 {
            let ops: Vec<Op> = (0..rng.usize(2..=24))
                .map(|_| {
                    let addr = edge - 24 + rng.u64(0..48);
                    let len = rng.usize(1..=20);
                    let via = vias[rng.usize(0..4)];
                    let writes_only = batch == 3;
                    if writes_only || rng.bool() {
                        let data = std::iter::repeat_with(|| rng.u8(..)).take(len).collect();
                        let via = if writes_only { Via::Borrowed } else { via };
                        Op::Write { addr, data, via }
                    } else {
                        Op::Read {
                            addr,
                            len,
                            via,
                            zero_failed: false,
                        }
                    }
                })
                .collect();
            run_and_compare(&mem, &backend, &mut model, &ops, batch < 3, || {
                format!("seed {seed} on {device:?}, batch {batch}")
            });
        }
    }
}
