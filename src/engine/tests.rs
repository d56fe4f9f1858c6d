//! The engine on the in-memory backend: exact call counts, exact failure
//! ranges, program order, soundness of dropped futures, executors.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::join_all;
use futures::{join, StreamExt};

use super::*;
use crate::backend::memory::MemBackend;
use crate::{Failure, Limits, PageError};

const MIB: usize = 1 << 20;

/// An engine over `backend`, keeping a handle on the backend's counters.
fn engine(backend: MemBackend) -> (Memory, Arc<MemBackend>) {
    let backend = Arc::new(backend);
    (
        Memory::with_config(backend.clone(), EngineConfig::default()),
        backend,
    )
}

/// Writes a chain of `depth` pointers starting at `start`: each hop is a
/// u64 holding the next address; the last holds `end`. Hops are on
/// distinct pages, `stride` apart.
fn write_chain(backend: &MemBackend, start: u64, depth: usize, stride: u64) -> u64 {
    let mut at = start;
    for _ in 0..depth {
        let next = at + stride;
        backend.poke(at, &next.to_le_bytes());
        at = next;
    }
    at
}

/// A fragment, in expected results.
fn f(offset: usize, len: usize, result: Result<(), PageError>) -> Fragment {
    Fragment {
        offset,
        len,
        result,
    }
}

async fn follow(mem: &Memory, start: u64, depth: usize) -> Result<u64, PartialError> {
    let mut p = start;
    for _ in 0..depth {
        p = mem.read_val::<u64>(p).await?;
    }
    Ok(p)
}

#[test]
fn the_design_example_costs_exactly_five_calls() {
    let (mem, backend) = engine(MemBackend::new(vec![0; 4 * MIB]));
    let x = 0x1000;
    backend.poke(x, &0xdead_beef_u64.to_le_bytes());
    let y = 0x2000;
    backend.poke(y, &0x3008u64.to_le_bytes());
    backend.poke(0x3008, &0x1234u64.to_le_bytes());
    let z = 0x10_0000;
    let z_end = write_chain(&backend, z, 5, 0x1_0000);

    let (a, b, c) = mem.block_on(async {
        join!(
            mem.read_val::<u64>(x),
            async {
                let p = mem.read_val::<u64>(y).await?;
                mem.read_val::<u64>(p).await
            },
            follow(&mem, z, 5),
        )
    });
    assert_eq!(a, Ok(0xdead_beef));
    assert_eq!(b, Ok(0x1234));
    assert_eq!(c, Ok(z_end));
    assert_eq!(backend.read_calls(), 5);
}

#[test]
fn a_thousand_joined_reads_cost_one_call() {
    let (mem, backend) = engine(MemBackend::with_address_pattern(64 * MIB));
    let mut rng = fastrand::Rng::with_seed(7);
    let addrs: Vec<u64> = (0..1000)
        .map(|_| rng.u64(0..(64 * MIB as u64) / 8) * 8)
        .collect();
    let values = mem.block_on(join_all(addrs.iter().map(|&a| mem.read_val::<u64>(a))));
    for (a, v) in addrs.iter().zip(values) {
        assert_eq!(v, Ok(*a));
    }
    assert_eq!(backend.read_calls(), 1);
}

#[test]
fn a_hundred_chains_of_depth_eight_cost_eight_calls() {
    let (mem, backend) = engine(MemBackend::new(vec![0; 64 * MIB]));
    let starts: Vec<u64> = (0..100u64).map(|i| i * 0x1000).collect();
    let ends: Vec<u64> = starts
        .iter()
        .map(|&s| write_chain(&backend, s, 8, 0x10_0000 * 7))
        .collect();
    let got = mem.block_on(join_all(starts.iter().map(|&s| follow(&mem, s, 8))));
    assert_eq!(got, ends.into_iter().map(Ok).collect::<Vec<_>>());
    assert_eq!(backend.read_calls(), 8);
}

#[test]
fn a_read_spanning_seventeen_pages_is_one_call_of_seventeen_entries() {
    let (mem, backend) = engine(MemBackend::with_address_pattern(4 * MIB));
    let mut buf = vec![0u8; 64 * 1024];
    mem.block_on(mem.read(0x10_0800, &mut buf)).unwrap();
    assert_eq!(buf, backend.bytes(0x10_0800, buf.len()));
    assert_eq!(backend.read_call_sizes(), vec![17]);
}

#[test]
fn a_read_across_holes_fills_the_rest_and_names_the_exact_failed_ranges() {
    let (mem, backend) = engine(MemBackend::with_address_pattern(4 * MIB));
    backend.add_hole(0x3000..0x5000, PageError::UnsupportedRequest);
    backend.add_hole(0x7000..0x8000, PageError::NoCompletion);
    let mut buf = vec![0xa5u8; 0x6000];
    let err = mem.block_on(mem.read(0x2800, &mut buf)).unwrap_err();
    assert_eq!(
        err.failed,
        vec![
            Failure {
                offset: 0x800,
                len: 0x2000,
                reason: PageError::UnsupportedRequest
            },
            Failure {
                offset: 0x4800,
                len: 0x1000,
                reason: PageError::NoCompletion
            },
        ]
    );
    assert_eq!(err.len, 0x6000);
    let expected = backend.bytes(0x2800, 0x6000);
    for (i, (&got, &want)) in buf.iter().zip(&expected).enumerate() {
        let failed = err
            .failed
            .iter()
            .any(|f| (f.offset..f.offset + f.len).contains(&i));
        assert_eq!(got, if failed { 0xa5 } else { want }, "byte {i:#x}");
    }
    // Zero-filling is the caller's explicit choice.
    let mut buf = vec![0xa5u8; 0x6000];
    let err2 = mem
        .block_on(mem.read(0x2800, &mut buf).zero_failed())
        .unwrap_err();
    assert_eq!(err2, err);
    assert!(buf[0x800..0x2800].iter().all(|&b| b == 0));
    assert_eq!(buf[..0x800], expected[..0x800]);
}

#[test]
fn a_page_needed_twice_in_one_flush_is_read_once() {
    let (mem, backend) = engine(MemBackend::with_address_pattern(MIB));
    let (a, b, c, d) = mem.block_on(async {
        join!(
            mem.read_val::<u64>(0x5008),
            mem.read_val::<u64>(0x5ff0),
            mem.read_val::<u32>(0x5ff8),
            mem.read_val::<u64>(0x6000),
        )
    });
    assert_eq!(
        (a, b, c, d),
        (Ok(0x5008), Ok(0x5ff0), Ok(0x5ff8), Ok(0x6000))
    );
    assert_eq!(backend.read_call_sizes(), vec![2]);
}

/// The same in a flush too large for a scan, where pages are matched by
/// the flush's page index.
#[test]
fn a_page_needed_twice_in_a_large_flush_is_read_once() {
    let (mem, backend) = engine(MemBackend::with_address_pattern(MIB));
    // 40 pages, two of them read again at other offsets, last.
    let addrs: Vec<u64> = (0..40u64)
        .map(|i| i * 0x3000)
        .chain([0x3010, 32 * 0x3000 + 0x800])
        .collect();
    let values = mem.block_on(crate::join_all(
        addrs.iter().map(|&a| mem.read_val::<u64>(a)),
    ));
    assert_eq!(values, addrs.iter().map(|&a| Ok(a)).collect::<Vec<_>>());
    assert_eq!(backend.read_call_sizes(), vec![40]);
}

#[test]
fn small_and_unaligned_reads_use_legal_windows() {
    let (mem, backend) = engine(MemBackend::with_address_pattern(MIB));
    for (addr, len) in [
        (0x1001u64, 1usize),
        (0x1ffd, 3),
        (0x2ffe, 5),
        (0x3003, 13),
        (0x4001, 0xfff),
    ] {
        let mut buf = vec![0; len];
        mem.block_on(mem.read(addr, &mut buf)).unwrap();
        assert_eq!(buf, backend.bytes(addr, len), "{addr:#x}+{len}");
    }
}

#[test]
fn reads_see_earlier_writes_and_writes_land_in_order() {
    let (mem, backend) = engine(MemBackend::with_address_pattern(MIB));
    let before = backend.bytes(0x8000, 16);
    let (old, w1, w2, new, w3, newer) = mem.block_on(async {
        join!(
            mem.read_val::<[u8; 16]>(0x8000),
            mem.write(0x8004, &[1, 2, 3]),
            mem.write(0x8005, &[9, 9]),
            mem.read_val::<[u8; 16]>(0x8000),
            mem.write_val(0x8000, &0x1122_3344u32),
            mem.read_val::<[u8; 16]>(0x8000),
        )
    });
    assert_eq!(old.unwrap()[..], before[..]);
    assert_eq!((w1, w2, w3), (Ok(()), Ok(()), Ok(())));
    let mut expected = before.clone();
    expected[4..7].copy_from_slice(&[1, 9, 9]);
    assert_eq!(new.unwrap()[..], expected[..]);
    expected[0..4].copy_from_slice(&0x1122_3344u32.to_le_bytes());
    assert_eq!(newer.unwrap()[..], expected[..]);
    assert_eq!(backend.bytes(0x8000, 16), expected);
    // Exactly the written bytes changed around the page.
    assert_eq!(
        backend.bytes(0x7ff0, 16),
        MemBackend::with_address_pattern(MIB).bytes(0x7ff0, 16)
    );
}

#[test]
fn writes_touch_exactly_the_requested_bytes() {
    let reference = MemBackend::with_address_pattern(MIB);
    let (mem, backend) = engine(MemBackend::with_address_pattern(MIB));
    let writes: Vec<(u64, Vec<u8>)> = vec![
        (0x0001, vec![0xaa]),
        (0x1ffe, vec![0xbb; 5]),
        (0x3003, vec![0xcc; 0x1003]),
        (0x5000, vec![0xdd; 0x1000]),
        (0x7ffc, vec![0xee; 4]),
    ];
    let results = mem.block_on(join_all(writes.iter().map(|(a, d)| mem.write(*a, d))));
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let mut expected = reference.bytes(0, MIB);
    for (a, d) in &writes {
        expected[*a as usize..*a as usize + d.len()].copy_from_slice(d);
    }
    assert!(
        backend.bytes(0, MIB) == expected,
        "bytes outside the writes changed"
    );
    // One read call for the partial pieces, one write call.
    assert_eq!((backend.read_calls(), backend.write_calls()), (1, 1));
}

#[test]
fn an_owned_buffer_is_filled_in_place_and_returned() {
    let (mem, backend) = engine(MemBackend::with_address_pattern(MIB));
    let buf = vec![0u8; 0x3000];
    let ptr = buf.as_ptr();
    let (buf, result) = mem.block_on(mem.read_into_owned(0x4000, buf));
    result.unwrap();
    assert_eq!(buf.as_ptr(), ptr, "the buffer was copied");
    assert_eq!(buf, backend.bytes(0x4000, 0x3000));
    let data = vec![0x77u8; 0x2000];
    let (data, result) = mem.block_on(mem.write_from_owned(0x9000, data));
    result.unwrap();
    assert_eq!(data.len(), 0x2000);
    assert_eq!(backend.bytes(0x9000, 0x2000), vec![0x77; 0x2000]);
}

#[test]
fn fragments_arrive_with_their_own_results() {
    let (mem, backend) = engine(MemBackend::with_address_pattern(MIB));
    backend.add_hole(0x2000..0x3000, PageError::CompleterAbort);
    let mut buf = vec![0u8; 0x2800];
    let fragments: Vec<Fragment> =
        mem.block_on(async { mem.read_fragments(0x1800, &mut buf).collect().await });
    assert_eq!(
        fragments,
        vec![
            f(0, 0x800, Ok(())),
            f(0x800, 0x1000, Err(PageError::CompleterAbort)),
            f(0x1800, 0x1000, Ok(())),
        ]
    );
    assert_eq!(buf[..0x800], backend.bytes(0x1800, 0x800)[..]);
    assert_eq!(buf[0x1800..], backend.bytes(0x3000, 0x1000)[..]);
    let writes: Vec<Fragment> =
        mem.block_on(async { mem.write_fragments(0x2ff8, &[1u8; 16]).collect().await });
    assert_eq!(
        writes,
        vec![f(0, 8, Err(PageError::CompleterAbort)), f(8, 8, Ok(()))]
    );
    assert_eq!(backend.bytes(0x3000, 8), vec![1; 8]);
}

#[test]
fn bad_input_fails_per_fragment_without_touching_anything_else() {
    let (mem, backend) = engine(MemBackend::with_address_pattern(MIB));
    let end = MIB as u64;
    // Past max_address: no device call for those bytes.
    let mut buf = [0xa5u8; 0x20];
    let err = mem.block_on(mem.read(end - 0x10, &mut buf)).unwrap_err();
    assert_eq!(
        err.failed,
        vec![Failure {
            offset: 0x10,
            len: 0x10,
            reason: PageError::OutOfRange
        }]
    );
    assert_eq!(buf[..0x10], backend.bytes(end - 0x10, 0x10)[..]);
    assert_eq!(buf[0x10..], [0xa5; 0x10]);
    // The part past the end is one piece, however many pages it spans.
    let mut buf = vec![0u8; 0x11000];
    let fragments: Vec<Fragment> =
        mem.block_on(async { mem.read_fragments(end - 0x1000, &mut buf).collect().await });
    assert_eq!(
        fragments,
        vec![
            f(0, 0x1000, Ok(())),
            f(0x1000, 0x10000, Err(PageError::OutOfRange))
        ]
    );
    let calls = backend.read_calls();
    assert!(mem.block_on(mem.read_val::<u64>(end)).is_err());
    assert_eq!(
        backend.read_calls(),
        calls,
        "a read wholly out of range reached the device"
    );
    // Zero length: done at once, no call.
    assert_eq!(mem.block_on(mem.read(0, &mut [])), Ok(()));
    assert_eq!(mem.block_on(mem.write(0, &[])), Ok(()));
    // Wrapping past u64::MAX.
    let mut buf = [0u8; 0x20];
    let err = mem
        .block_on(mem.read(u64::MAX - 0xf, &mut buf))
        .unwrap_err();
    assert_eq!(
        err.failed,
        vec![
            Failure {
                offset: 0,
                len: 0x10,
                reason: PageError::OutOfRange
            },
            Failure {
                offset: 0x10,
                len: 0x10,
                reason: PageError::AddressOverflow
            },
        ]
    );
    assert_eq!(backend.read_calls(), calls);
    // Writes on a read-only device.
    let (ro, ro_backend) = engine(MemBackend::with_address_pattern(MIB).read_only());
    let err = ro.block_on(ro.write(0x1001, &[1, 2, 3])).unwrap_err();
    assert_eq!(err.failed[0].reason, PageError::ReadOnly);
    assert_eq!((ro_backend.read_calls(), ro_backend.write_calls()), (0, 0));
    assert_eq!(ro_backend.bytes(0x1000, 8), backend.bytes(0x1000, 8));
}

#[test]
fn the_entry_limit_splits_a_flush_into_calls() {
    let backend = Arc::new(MemBackend::with_address_pattern(MIB));
    let mem = Memory::with_config(
        backend.clone(),
        EngineConfig {
            max_entries_per_call: 20,
        },
    );
    let values = mem.block_on(join_all(
        (0..200u64).map(|i| mem.read_val::<u64>(i * 0x1000)),
    ));
    assert!(values
        .iter()
        .enumerate()
        .all(|(i, v)| *v == Ok(i as u64 * 0x1000)));
    assert_eq!(backend.read_call_sizes(), vec![20; 10]);
    // The backend's own limit applies as well.
    let limits = Limits {
        max_entries: 60,
        ..Limits::LEECHCORE
    };
    let backend = Arc::new(MemBackend::with_address_pattern(MIB).with_limits(limits));
    let mem = Memory::with_config(backend.clone(), EngineConfig::default());
    mem.block_on(join_all(
        (0..200u64).map(|i| mem.read_val::<u64>(i * 0x1000)),
    ));
    assert_eq!(backend.read_call_sizes(), vec![60, 60, 60, 20]);
}

/// A waker that counts its wakes.
struct WakeCounter(std::sync::atomic::AtomicUsize);

impl futures::task::ArcWake for WakeCounter {
    fn wake_by_ref(me: &Arc<Self>) {
        me.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl WakeCounter {
    fn new() -> (std::task::Waker, Arc<WakeCounter>) {
        let counter = Arc::new(WakeCounter(Default::default()));
        (futures::task::waker(counter.clone()), counter)
    }

    fn wakes(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[test]
fn polling_a_pending_future_makes_no_call_and_only_completed_waiters_wake() {
    let (mem, backend) = engine(MemBackend::with_address_pattern(MIB));
    let ((waker_a, wa), (waker_b, wb)) = (WakeCounter::new(), WakeCounter::new());
    let mut a = pin!(mem.read_val::<u64>(0x1000));
    let mut b = pin!(mem.read_val::<u64>(0x2000));
    for _ in 0..10 {
        assert!(a
            .as_mut()
            .poll(&mut Context::from_waker(&waker_a))
            .is_pending());
    }
    assert_eq!(backend.read_calls(), 0);
    mem.flush().unwrap();
    assert_eq!(backend.read_calls(), 1);
    assert_eq!(wa.wakes(), 1);
    // `b` was never polled, so never queued: not woken, not read.
    assert_eq!(wb.wakes(), 0);
    assert_eq!(backend.read_call_sizes(), vec![1]);
    assert!(matches!(
        a.as_mut().poll(&mut Context::from_waker(&waker_a)),
        Poll::Ready(Ok(0x1000))
    ));
    assert!(b
        .as_mut()
        .poll(&mut Context::from_waker(&waker_b))
        .is_pending());
    assert!(mem.flush().is_some());
    assert_eq!(wb.wakes(), 1);
    assert_eq!(wa.wakes(), 1);
}

#[test]
fn join_all_polls_every_future_with_its_task_waker_and_keeps_the_order() {
    let (mem, backend) = engine(MemBackend::with_address_pattern(MIB));
    let (waker, counter) = WakeCounter::new();
    let mut cx = Context::from_waker(&waker);
    let chains = (0..100u64).map(|i| {
        let mem = &mem;
        async move {
            let first = mem.read_val::<u64>(i * 0x1000).await?;
            mem.read_val::<u64>(first + 0x800).await
        }
    });
    let mut joined = pin!(super::join_all(chains));
    assert!(joined.as_mut().poll(&mut cx).is_pending());
    assert_eq!(mem.flush().map(|s| s.requests), Some(100));
    // Every request holds the task's own waker: one flush, one wake.
    assert_eq!(counter.wakes(), 1);
    assert!(joined.as_mut().poll(&mut cx).is_pending());
    assert_eq!(mem.flush().map(|s| s.requests), Some(100));
    assert_eq!(counter.wakes(), 2);
    let Poll::Ready(values) = joined.as_mut().poll(&mut cx) else {
        panic!("all 100 chains were complete");
    };
    let expected: Vec<_> = (0..100u64).map(|i| Ok(i * 0x1000 + 0x800)).collect();
    assert_eq!(values, expected);
    assert_eq!(backend.read_call_sizes(), vec![100, 100]);
}

#[test]
fn join_all_waits_for_futures_woken_from_elsewhere_and_cancels_when_dropped() {
    let (mem, backend) = engine(MemBackend::with_address_pattern(MIB));
    let (tx, rx) = futures::channel::oneshot::channel::<u64>();
    let from_a_thread: Pin<Box<dyn Future<Output = u64> + Send>> =
        Box::pin(async { rx.await.unwrap() });
    let from_memory: Pin<Box<dyn Future<Output = u64> + Send>> =
        Box::pin(async { mem.read_val::<u64>(0x3000).await.unwrap() });
    let values = std::thread::scope(|s| {
        s.spawn(move || tx.send(7).unwrap());
        mem.block_on(super::join_all([from_a_thread, from_memory]))
    });
    assert_eq!(values, vec![7, 0x3000]);

    // Dropped while its requests are queued: they are cancelled.
    let noop = futures::task::noop_waker();
    let mut joined = Box::pin(super::join_all(
        (0..8u64).map(|i| mem.read_val::<u64>(i * 8)),
    ));
    assert!(joined
        .as_mut()
        .poll(&mut Context::from_waker(&noop))
        .is_pending());
    drop(joined);
    assert!(mem.flush().is_none());
    assert_eq!(backend.read_calls(), 1);
}

#[test]
fn dropped_and_leaked_futures_never_have_their_buffers_written() {
    let (mem, backend) = engine(MemBackend::with_address_pattern(MIB));
    let noop = futures::task::noop_waker();
    let mut cx = Context::from_waker(&noop);

    // Dropped while queued: the request is cancelled, nothing is read.
    let mut buf = [0xa5u8; 64];
    {
        let mut read = Box::pin(mem.read(0x1000, &mut buf));
        assert!(read.as_mut().poll(&mut cx).is_pending());
    }
    assert!(
        mem.flush().is_none(),
        "a cancelled request reached the device"
    );
    assert_eq!(buf, [0xa5; 64]);

    // Leaked while queued: the flush fills only the engine's buffer.
    let mut leaked = [0xa5u8; 64];
    let mut read = Box::pin(mem.read(0x2000, &mut leaked));
    assert!(read.as_mut().poll(&mut cx).is_pending());
    std::mem::forget(read);
    assert!(mem.flush().is_some());
    assert_eq!(leaked, [0xa5; 64]);

    // An owned buffer abandoned in flight is kept by the engine, and the
    // next requests still complete.
    let mut owned = Box::pin(mem.read_into_owned(0x3000, vec![0; 0x1000]));
    assert!(owned.as_mut().poll(&mut cx).is_pending());
    drop(owned);
    assert_eq!(mem.block_on(mem.read_val::<u64>(0x3000)), Ok(0x3000));
    assert_eq!(backend.read_calls(), 2);
}

/// A `MemBackend` that runs `before_read` on each read call's entries
/// before serving them: to note the calls, or to hold one in the device
/// while the test does something else.
struct Hooked<F> {
    inner: MemBackend,
    before_read: F,
}

impl<F: Fn(&[crate::ScatterEntry<'_>]) + Send + Sync> Backend for Hooked<F> {
    fn read_scatter(&self, entries: &mut [crate::ScatterEntry<'_>]) {
        (self.before_read)(entries);
        self.inner.read_scatter(entries)
    }
    fn write_scatter(&self, entries: &mut [crate::WriteEntry<'_>]) {
        self.inner.write_scatter(entries)
    }
    fn limits(&self) -> Limits {
        self.inner.limits()
    }
    fn max_address(&self) -> u64 {
        self.inner.max_address()
    }
    fn memory_map(&self) -> crate::MemoryMap {
        self.inner.memory_map()
    }
    fn read_only(&self) -> bool {
        Backend::read_only(&self.inner)
    }
    fn prefers_address_order(&self) -> bool {
        self.inner.prefers_address_order()
    }
}

#[test]
fn futures_dropped_while_their_flush_is_in_the_device_are_let_go() {
    let (entered, on_entry) = std::sync::mpsc::sync_channel(1);
    let (go, gate) = std::sync::mpsc::sync_channel(1);
    // Each read call, once in the device, waits for the test's go.
    let gate = std::sync::Mutex::new(gate);
    let mem = Memory::new(Hooked {
        inner: MemBackend::with_address_pattern(MIB),
        before_read: move |_: &[crate::ScatterEntry<'_>]| {
            entered.send(()).unwrap();
            gate.lock().unwrap().recv().unwrap();
        },
    });
    let noop = futures::task::noop_waker();
    let mut cx = Context::from_waker(&noop);
    let mut buf = [0xa5u8; 8];
    let mut borrowed = Box::pin(mem.read(0x1000, &mut buf));
    let mut owned = Box::pin(mem.read_into_owned(0x2000, vec![0; 0x1000]));
    let mut kept = Box::pin(mem.read_val::<u64>(0x3008));
    assert!(borrowed.as_mut().poll(&mut cx).is_pending());
    assert!(owned.as_mut().poll(&mut cx).is_pending());
    assert!(kept.as_mut().poll(&mut cx).is_pending());
    std::thread::scope(|s| {
        let flush = s.spawn(|| mem.flush());
        on_entry.recv().unwrap();
        // In the device now: the first two futures go away.
        drop(borrowed);
        drop(owned);
        go.send(()).unwrap();
        assert_eq!(flush.join().unwrap().map(|stats| stats.requests), Some(3));
    });
    assert_eq!(buf, [0xa5; 8], "a dropped read's buffer was written");
    assert_eq!(kept.as_mut().poll(&mut cx), Poll::Ready(Ok(0x3008)));
    // Their slots are the engine's again: more requests than the first
    // batch had complete, in one call.
    go.send(()).unwrap();
    let reads = join_all((0..8u64).map(|i| mem.read_val::<u64>(i * 0x1000)));
    let values = mem.block_on(reads);
    on_entry.recv().unwrap();
    assert!(values
        .iter()
        .enumerate()
        .all(|(i, v)| *v == Ok(i as u64 * 0x1000)));
}

#[test]
fn a_device_that_prefers_address_order_gets_sorted_entries_and_results_stay_put() {
    let inner = MemBackend::with_address_pattern(MIB)
        .with_limits(Limits {
            max_entries: 5,
            ..Limits::LEECHCORE
        })
        .in_address_order();
    inner.add_hole(0x7_0000..0x7_1000, PageError::Unspecified);
    // The addresses of each read call's entries, as they came.
    let calls: Arc<std::sync::Mutex<Vec<Vec<u64>>>> = Default::default();
    let noted = calls.clone();
    let backend = Arc::new(Hooked {
        inner,
        before_read: move |entries: &[crate::ScatterEntry<'_>]| {
            let addrs = entries.iter().map(|e| e.addr).collect();
            noted.lock().unwrap().push(addrs);
        },
    });
    let mem = Memory::with_config(backend.clone(), EngineConfig::default());
    // Pages in no order, one of them a hole; then the same with a second
    // read of a page and an unaligned one, which take the general plan.
    let pages = [
        0x9_0000u64,
        0x1_0000,
        0x7_0000,
        0x3_0000,
        0xc_0000,
        0x2_0000,
        0x8_0000,
    ];
    for extra in [None, Some((0x3_0100u64, 3usize)), Some((0x9_0008, 16))] {
        calls.lock().unwrap().clear();
        let mut ops: Vec<(u64, usize)> = pages.iter().map(|&p| (p + 0x10, 8)).collect();
        ops.extend(extra);
        let mem = &mem;
        let results = mem.block_on(join_all(ops.iter().map(|&(addr, len)| async move {
            let mut buf = vec![0xa5u8; len];
            (mem.read(addr, &mut buf).await, buf)
        })));
        for (&(addr, len), (result, buf)) in ops.iter().zip(&results) {
            if addr & !0xfff == 0x7_0000 {
                assert_eq!(
                    result.as_ref().unwrap_err().failed_bytes(),
                    len,
                    "{addr:#x}"
                );
                assert_eq!(buf, &vec![0xa5; len], "{addr:#x}");
            } else {
                assert_eq!(result, &Ok(()), "{addr:#x}");
                assert_eq!(buf, &backend.inner.bytes(addr, len), "{addr:#x}");
            }
        }
        let seen = calls.lock().unwrap().clone();
        let all: Vec<u64> = seen.concat();
        assert!(all.windows(2).all(|w| w[0] < w[1]), "{extra:?}: {seen:x?}");
        assert!(seen.iter().all(|c| c.len() <= 5), "{seen:x?}");
        assert_eq!(all.len(), pages.len(), "one entry a page: {seen:x?}");
    }
    // A device that does not ask gets the entries as they come.
    let (plain, plain_backend) = engine(MemBackend::with_address_pattern(MIB));
    let reads = pages.iter().map(|&p| plain.read_val::<u64>(p));
    assert!(plain.block_on(join_all(reads)).iter().all(Result::is_ok));
    assert_eq!(plain_backend.read_call_sizes(), [pages.len()]);
}

#[test]
fn drive_works_under_futures_and_tokio_executors() {
    let (mem, backend) = engine(MemBackend::with_address_pattern(16 * MIB));
    let chains = || join_all((0..16u64).map(|i| mem.read_val::<u64>(i * 0x8000)));
    let v = futures::executor::block_on(mem.drive(chains()));
    assert!(v
        .iter()
        .enumerate()
        .all(|(i, x)| *x == Ok(i as u64 * 0x8000)));
    assert_eq!(backend.read_calls(), 1);

    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(mem.drive(chains()));
    assert_eq!(backend.read_calls(), 2);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let tasks: Vec<_> = (0..8u64)
        .map(|t| {
            let mem = mem.clone();
            rt.spawn(async move {
                let m = &mem;
                m.drive(async move {
                    let base = t * 0x10_0000;
                    let got = join_all((0..64u64).map(|i| m.read_val::<u64>(base + i * 8))).await;
                    got.into_iter()
                        .enumerate()
                        .all(|(i, v)| v == Ok(base + i as u64 * 8))
                })
                .await
            })
        })
        .collect();
    for t in tasks {
        assert!(rt.block_on(t).unwrap());
    }
    // Each task's reads are one batch; tasks may share a flush.
    let calls = backend.read_calls() - 2;
    assert!((1..=8).contains(&calls), "{calls} calls for 8 tasks");
}

#[test]
fn the_background_driver_batches_spawned_tasks_on_a_current_thread_runtime() {
    let (mem, backend) = engine(MemBackend::with_address_pattern(16 * MIB));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let driver = tokio::spawn(mem.driver());
        let tasks: Vec<_> = (0..32u64)
            .map(|t| {
                let mem = mem.clone();
                tokio::spawn(async move { follow(&mem, t * 0x1000, 3).await })
            })
            .collect();
        for t in tasks {
            // The pattern backend holds each address at itself: a chain
            // stays in place, three dependent reads deep.
            assert!(t.await.unwrap().is_ok());
        }
        driver.abort();
    });
    assert_eq!(backend.read_calls(), 3);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(async {
        let driver = tokio::spawn(mem.driver());
        let tasks: Vec<_> = (0..32u64)
            .map(|t| {
                let mem = mem.clone();
                tokio::spawn(async move { mem.read_val::<u64>(t * 0x1000).await })
            })
            .collect();
        for (t, task) in tasks.into_iter().enumerate() {
            assert_eq!(task.await.unwrap(), Ok(t as u64 * 0x1000));
        }
        driver.abort();
    });
}

#[test]
fn every_background_driver_is_told_of_requests_until_it_is_dropped() {
    let (mem, backend) = engine(MemBackend::with_address_pattern(MIB));
    let ((waker_a, wa), (waker_b, wb)) = (WakeCounter::new(), WakeCounter::new());
    let (mut a, mut b) = (mem.driver(), mem.driver());
    assert!(Pin::new(&mut a)
        .poll(&mut Context::from_waker(&waker_a))
        .is_pending());
    assert!(Pin::new(&mut b)
        .poll(&mut Context::from_waker(&waker_b))
        .is_pending());
    let noop = futures::task::noop_waker();
    let mut cx = Context::from_waker(&noop);
    let mut first = pin!(mem.read_val::<u64>(0x100));
    assert!(first.as_mut().poll(&mut cx).is_pending());
    assert_eq!((wa.wakes(), wb.wakes()), (1, 1));
    // A dropped driver is forgotten; the other one still runs.
    drop(b);
    let mut second = pin!(mem.read_val::<u64>(0x208));
    assert!(second.as_mut().poll(&mut cx).is_pending());
    assert_eq!((wa.wakes(), wb.wakes()), (2, 1));
    let mut cx_a = Context::from_waker(&waker_a);
    // It yields once, then flushes both requests in one call.
    assert!(Pin::new(&mut a).poll(&mut cx_a).is_pending());
    assert_eq!(backend.read_calls(), 0);
    assert!(Pin::new(&mut a).poll(&mut cx_a).is_pending());
    assert_eq!(backend.read_calls(), 1);
    assert_eq!(first.poll(&mut cx), Poll::Ready(Ok(0x100)));
    assert_eq!(second.poll(&mut cx), Poll::Ready(Ok(0x208)));
}

#[test]
fn a_driver_also_flushes_the_other_engines_its_future_reads() {
    let (a, backend_a) = engine(MemBackend::with_address_pattern(MIB));
    let (b, backend_b) = engine(MemBackend::with_address_pattern(MIB));
    let (x, y) = b.block_on(async { join!(follow(&a, 0x1000, 3), b.read_val::<u64>(0x2000)) });
    assert_eq!((x, y), (Ok(0x1000), Ok(0x2000)));
    assert_eq!((backend_a.read_calls(), backend_b.read_calls()), (3, 1));
    // A scope's reads, under the other engine's `block_on` and `drive`.
    let (mut one, mut two) = ([0u8; 8], [0u8; 8]);
    a.scope(|s| {
        b.block_on(s.read(0x3000, &mut one)).unwrap();
        futures::executor::block_on(b.drive(s.read(0x4000, &mut two))).unwrap();
    });
    assert_eq!(
        (u64::from_le_bytes(one), u64::from_le_bytes(two)),
        (0x3000, 0x4000)
    );
    assert_eq!((backend_a.read_calls(), backend_b.read_calls()), (5, 1));
}

#[test]
fn a_panicking_backend_fails_the_flush_without_hanging_waiters() {
    struct Panics;
    impl Backend for Panics {
        fn read_scatter(&self, _: &mut [crate::ScatterEntry<'_>]) {
            panic!("device exploded");
        }
        fn write_scatter(&self, _: &mut [crate::WriteEntry<'_>]) {}
        fn limits(&self) -> Limits {
            Limits::LEECHCORE
        }
        fn max_address(&self) -> u64 {
            1 << 20
        }
        fn memory_map(&self) -> crate::MemoryMap {
            crate::MemoryMap::default()
        }
        fn read_only(&self) -> bool {
            true
        }
    }
    let mem = Memory::new(Panics);
    let noop = futures::task::noop_waker();
    let mut read = Box::pin(mem.read_val::<u64>(0x1000));
    assert!(read
        .as_mut()
        .poll(&mut Context::from_waker(&noop))
        .is_pending());
    let flushed = std::panic::catch_unwind(AssertUnwindSafe(|| mem.flush()));
    assert!(flushed.is_err());
    match read.as_mut().poll(&mut Context::from_waker(&noop)) {
        Poll::Ready(Err(e)) => assert_eq!(e.failed[0].reason, PageError::NotIssued),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_synchronous_batch_reads_into_the_callers_buffers_in_one_call() {
    let (mem, backend) = engine(MemBackend::with_address_pattern(4 * MIB));
    backend.add_hole(0x5000..0x6000, PageError::TransportError);
    let mut a = vec![0u8; 0x2000];
    let mut b = [0u8; 3];
    let mut c = vec![0xa5u8; 0x1800];
    let ptr = a.as_ptr();
    let outcome = mem.read_now([
        (0x1000u64, &mut a[..]),
        (0x3001, &mut b[..]),
        (0x4800, &mut c[..]),
    ]);
    assert_eq!(outcome.stats.read_calls, 1);
    assert_eq!(backend.read_call_sizes(), vec![2 + 1 + 2]);
    assert_eq!(a, backend.bytes(0x1000, 0x2000));
    assert_eq!(a.as_ptr(), ptr);
    assert_eq!(b[..], backend.bytes(0x3001, 3)[..]);
    assert_eq!(outcome.failures(0).count() + outcome.failures(1).count(), 0);
    assert_eq!(
        outcome.failures(2).copied().collect::<Vec<_>>(),
        vec![Failure {
            offset: 0x800,
            len: 0x1000,
            reason: PageError::TransportError
        }]
    );
    assert_eq!(c[..0x800], backend.bytes(0x4800, 0x800)[..]);
    assert!(c[0x800..].iter().all(|&x| x == 0xa5));
    assert!(outcome.result(2, c.len()).is_err() && outcome.result(0, a.len()).is_ok());

    let reference = MemBackend::with_address_pattern(4 * MIB);
    let outcome = mem.write_now([(0x7003u64, &[1u8, 2, 3][..]), (0x9000, &[7u8; 0x1000][..])]);
    assert!(outcome.is_ok());
    assert_eq!(
        (outcome.stats.read_calls, outcome.stats.write_calls),
        (1, 1)
    );
    let mut expected = reference.bytes(0x7000, 8);
    expected[3..6].copy_from_slice(&[1, 2, 3]);
    assert_eq!(backend.bytes(0x7000, 8), expected);
    assert_eq!(backend.bytes(0x9000, 0x1000), vec![7; 0x1000]);
}

#[test]
fn disjoint_small_writes_to_one_page_share_a_round() {
    let reference = MemBackend::with_address_pattern(MIB);
    let (mem, backend) = engine(MemBackend::with_address_pattern(MIB));
    // Eight fields of one struct, each in its own 8-byte window.
    let fields: Vec<(u64, [u8; 3])> = (0..8u64)
        .map(|i| (0x5001 + i * 16, [i as u8 + 1; 3]))
        .collect();
    let results = mem.block_on(join_all(fields.iter().map(|(a, d)| mem.write(*a, d))));
    assert!(results.iter().all(Result::is_ok));
    assert_eq!((backend.read_calls(), backend.write_calls()), (1, 1));
    let mut expected = reference.bytes(0x5000, 0x100);
    for (a, d) in &fields {
        let at = (*a - 0x5000) as usize;
        expected[at..at + 3].copy_from_slice(d);
    }
    assert_eq!(backend.bytes(0x5000, 0x100), expected);

    // Disjoint bytes in one window: the second write must see the first.
    let (a, b) =
        mem.block_on(async { join!(mem.write(0x6001, &[0xaa]), mem.write(0x6005, &[0xbb])) });
    assert_eq!((a, b), (Ok(()), Ok(())));
    let mut expected = reference.bytes(0x6000, 8);
    expected[1] = 0xaa;
    expected[5] = 0xbb;
    assert_eq!(backend.bytes(0x6000, 8), expected);
    assert_eq!(
        (backend.read_calls(), backend.write_calls()),
        (3, 3),
        "two rounds"
    );
}

#[test]
fn reads_no_write_touches_share_the_call_that_reads_the_windows() {
    let reference = MemBackend::with_address_pattern(MIB);
    let (mem, backend) = engine(MemBackend::with_address_pattern(MIB));
    // A partial write (its window read, patched, written) and reads of
    // other bytes, before and after it: one read call, one write call.
    let (before, w, after, small) = mem.block_on(async {
        join!(
            mem.read_val::<u64>(0x5000),
            mem.write(0x1001, &[1, 2, 3]),
            mem.read_val::<u64>(0x9008),
            mem.read_val::<u16>(0x1012),
        )
    });
    assert_eq!((before, after), (Ok(0x5000), Ok(0x9008)));
    assert_eq!(w, Ok(()));
    let want = u16::from_le_bytes(reference.bytes(0x1012, 2).try_into().unwrap());
    assert_eq!(small, Ok(want), "bytes on the write's page, unchanged");
    assert_eq!((backend.read_calls(), backend.write_calls()), (1, 1));

    // A read of the written bytes must see the write: it waits for it.
    let (w, seen) = mem.block_on(async {
        join!(
            mem.write(0x2001, &[7, 7, 7]),
            mem.read_val::<[u8; 4]>(0x2000)
        )
    });
    assert_eq!(w, Ok(()));
    assert_eq!(seen.unwrap()[1..], [7, 7, 7]);
    assert_eq!((backend.read_calls(), backend.write_calls()), (3, 2));
}

/// Polls `fut` once with `cx`.
fn poll_once<F: Future + Unpin>(fut: &mut F, cx: &mut Context<'_>) -> Poll<F::Output> {
    Pin::new(fut).poll(cx)
}

/// Polls `fut` once, from inside the caller's driver, expecting it to wait.
async fn queue_once<F: Future + Unpin>(fut: &mut F) {
    futures::future::poll_fn(|cx| {
        assert!(poll_once(fut, cx).is_pending());
        Poll::Ready(())
    })
    .await
}

#[test]
fn a_request_staged_by_a_driver_outlives_the_driver() {
    // Polled once inside `block_on`, which returns before the request is
    // sent: the request reaches the queue anyway and a later flush
    // completes it.
    let (mem, backend) = engine(MemBackend::with_address_pattern(MIB));
    let mut read = Box::pin(mem.read_val::<u64>(0x4008));
    mem.block_on(queue_once(&mut read));
    assert_eq!(backend.read_calls(), 0);
    assert_eq!(mem.flush().map(|s| s.requests), Some(1));
    let noop = futures::task::noop_waker();
    assert_eq!(
        poll_once(&mut read, &mut Context::from_waker(&noop)),
        Poll::Ready(Ok(0x4008))
    );

    // Dropped while staged (the losing branch of a select): cancelled, no
    // call, and the winner's batch holds only the winner.
    let before = backend.read_calls();
    let value = mem.block_on(async {
        let mut loser = Box::pin(mem.read_val::<u64>(0x5000));
        queue_once(&mut loser).await;
        drop(loser);
        mem.read_val::<u64>(0x6000).await
    });
    assert_eq!(value, Ok(0x6000));
    assert_eq!(backend.read_call_sizes().last(), Some(&1));
    assert_eq!(backend.read_calls(), before + 1);
}

#[test]
fn a_nested_driver_sees_what_its_outer_driver_staged() {
    // A write staged by the outer `block_on`, then a read of the same
    // bytes run to completion by an inner one: program order holds.
    let (mem, backend) = engine(MemBackend::new(vec![0; MIB]));
    let seen = mem.block_on(async {
        let value = 0x1122_3344_5566_7788u64;
        let mut write = Box::pin(mem.write_val(0x7000, &value));
        queue_once(&mut write).await;
        let seen = mem.block_on(mem.read_val::<u64>(0x7000));
        write.await.unwrap();
        seen
    });
    assert_eq!(seen, Ok(0x1122_3344_5566_7788));
    assert_eq!(
        backend.bytes(0x7000, 8),
        0x1122_3344_5566_7788u64.to_le_bytes()
    );
}

#[test]
fn a_future_dropped_on_another_thread_while_staged_is_cancelled() {
    let (mem, backend) = engine(MemBackend::with_address_pattern(MIB));
    let value = mem.block_on(async {
        let mut gone = Box::pin(mem.read_val::<u64>(0x8000));
        queue_once(&mut gone).await;
        std::thread::scope(|s| {
            s.spawn(move || drop(gone));
        });
        mem.read_val::<u64>(0x9000).await
    });
    assert_eq!(value, Ok(0x9000));
    assert_eq!(backend.read_call_sizes(), vec![1]);
}

#[test]
fn a_device_whose_page_size_is_not_a_power_of_two_fails_every_piece() {
    let limits = Limits {
        page_size: 3000,
        ..Limits::LEECHCORE
    };
    let (mem, backend) = engine(MemBackend::with_address_pattern(MIB).with_limits(limits));
    let mut buf = [0x5au8; 16];
    let err = mem.block_on(mem.read(0x1000, &mut buf)).unwrap_err();
    assert_eq!(err.failed_bytes(), 16);
    assert!(matches!(err.failed[0].reason, PageError::InvalidEntry(_)));
    assert_eq!(buf, [0x5a; 16]);
    assert_eq!(backend.read_calls(), 0);
}

/// A backend that notes where each entry's bytes live, to tell a copy
/// through the engine from the caller's own buffer.
pub(crate) struct EntryBuffers {
    pub inner: Arc<MemBackend>,
    pub reads: std::sync::Mutex<Vec<(u64, usize)>>,
    pub writes: std::sync::Mutex<Vec<(u64, usize)>>,
}

impl EntryBuffers {
    pub fn new(inner: Arc<MemBackend>) -> Self {
        EntryBuffers {
            inner,
            reads: Default::default(),
            writes: Default::default(),
        }
    }
}

impl Backend for EntryBuffers {
    fn read_scatter(&self, entries: &mut [crate::ScatterEntry<'_>]) {
        let mut reads = self.reads.lock().unwrap();
        reads.extend(entries.iter().map(|e| (e.addr, e.buf.as_ptr() as usize)));
        self.inner.read_scatter(entries)
    }
    fn write_scatter(&self, entries: &mut [crate::WriteEntry<'_>]) {
        let mut writes = self.writes.lock().unwrap();
        writes.extend(entries.iter().map(|e| (e.addr, e.data.as_ptr() as usize)));
        self.inner.write_scatter(entries)
    }
    fn limits(&self) -> Limits {
        self.inner.limits()
    }
    fn max_address(&self) -> u64 {
        self.inner.max_address()
    }
    fn memory_map(&self) -> crate::MemoryMap {
        self.inner.memory_map()
    }
    fn read_only(&self) -> bool {
        Backend::read_only(&*self.inner)
    }
}

#[test]
fn a_scope_reads_and_writes_the_callers_buffers_in_place() {
    let backend = Arc::new(EntryBuffers::new(Arc::new(
        MemBackend::with_address_pattern(MIB),
    )));
    backend
        .inner
        .add_hole(0x8000..0x9000, PageError::TransportError);
    let mem = Memory::with_config(backend.clone(), EngineConfig::default());
    let mut pages = vec![vec![0u8; 0x1000]; 4];
    let mut across = vec![0xa5u8; 0x1000];
    let data = [0x5au8; 0x20];
    let (reads, across_result, written) = mem.scope(|s| {
        mem.block_on(async {
            let reads = crate::join_all(
                pages
                    .iter_mut()
                    .enumerate()
                    .map(|(i, page)| s.read(0x10_000 + 0x2000 * i as u64, page)),
            );
            join!(
                reads,
                s.read(0x8800, &mut across).zero_failed(),
                s.write(0x20_000, &data)
            )
        })
    });
    assert!(reads.iter().all(Result::is_ok));
    for (i, page) in pages.iter().enumerate() {
        assert_eq!(
            *page,
            backend.inner.bytes(0x10_000 + 0x2000 * i as u64, 0x1000)
        );
    }
    // Every page went straight into its buffer (one call), and so did the
    // readable half of the read across the hole.
    let mut want: Vec<(u64, usize)> = pages
        .iter()
        .enumerate()
        .map(|(i, page)| (0x10_000 + 0x2000 * i as u64, page.as_ptr() as usize))
        .collect();
    want.extend([
        (0x8800, across.as_ptr() as usize),
        (0x9000, across.as_ptr() as usize + 0x800),
    ]);
    want.sort();
    let mut got = backend.reads.lock().unwrap().clone();
    got.sort();
    assert_eq!(got, want);
    assert_eq!(backend.inner.read_calls(), 1);
    assert_eq!(
        across_result.unwrap_err().failed,
        vec![Failure {
            offset: 0,
            len: 0x800,
            reason: PageError::TransportError
        }]
    );
    assert_eq!(across[..0x800], [0; 0x800]);
    assert_eq!(across[0x800..], backend.inner.bytes(0x9000, 0x800)[..]);
    // The write's bytes were not copied either.
    written.unwrap();
    assert_eq!(
        *backend.writes.lock().unwrap(),
        vec![(0x20_000, data.as_ptr() as usize)]
    );
    assert_eq!(backend.inner.bytes(0x1f_ff8, 0x30)[8..0x28], data);
}

#[test]
fn a_scope_ends_with_no_request_left_on_its_buffers() {
    let (mem, backend) = engine(MemBackend::with_address_pattern(MIB));
    let noop = futures::task::noop_waker();
    let mut cx = Context::from_waker(&noop);
    let (mut dropped, mut leaked, mut staged) = ([0xa5u8; 64], [0xa5u8; 64], [0xa5u8; 64]);
    let data = [0x11u8; 64];
    mem.scope(|s| {
        // Dropped while queued: cancelled at once.
        let mut read = Box::pin(s.read(0x1000, &mut dropped));
        assert!(read.as_mut().poll(&mut cx).is_pending());
        drop(read);
        // Leaked while queued, a read and a write: the scope's end cancels
        // them.
        let mut read = Box::pin(s.read(0x2000, &mut leaked));
        assert!(read.as_mut().poll(&mut cx).is_pending());
        std::mem::forget(read);
        let mut write = Box::pin(s.write(0x3000, &data));
        assert!(write.as_mut().poll(&mut cx).is_pending());
        std::mem::forget(write);
        // Leaked while staged by a driver that is still running when the
        // scope ends (its own future is the scope's caller).
    });
    let outer = mem.block_on(async {
        mem.scope(|s| {
            let mut read = Box::pin(s.read(0x4000, &mut staged));
            futures::executor::block_on(futures::future::poll_fn(|cx| {
                // Polled with this thread's driver context: staged.
                let _ = read.as_mut().poll(cx);
                Poll::Ready(())
            }));
            std::mem::forget(read);
        });
        mem.read_val::<u64>(0x5000).await
    });
    assert_eq!(outer, Ok(0x5000));
    assert!(
        mem.flush().is_none(),
        "a request of an ended scope was sent"
    );
    // Only the outer read reached the device.
    assert_eq!(backend.read_call_sizes(), vec![1]);
    assert_eq!(backend.write_calls(), 0);
    assert_eq!(
        (dropped, leaked, staged),
        ([0xa5; 64], [0xa5; 64], [0xa5; 64])
    );

    // A scope that panics still ends.
    let mut unwound = [0xa5u8; 64];
    let panicked = std::panic::catch_unwind(AssertUnwindSafe(|| {
        mem.scope(|s| {
            let mut read = Box::pin(s.read(0x6000, &mut unwound));
            assert!(read.as_mut().poll(&mut cx).is_pending());
            std::mem::forget(read);
            panic!("inside the scope");
        })
    }));
    assert!(panicked.is_err());
    assert!(mem.flush().is_none());
    assert_eq!(unwound, [0xa5; 64]);
}

/// A scope's end looks for its requests among the slots while another
/// thread's driver prepares its own without the queue lock: it must read
/// only slots that are queued (`make miri` checks for the race).
#[test]
fn a_scope_ends_on_one_thread_while_another_stages_requests() {
    let (mem, _backend) = engine(MemBackend::with_address_pattern(1 << 16));
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..50 {
                mem.scope(|_| {});
            }
        });
        mem.block_on(async {
            for i in 0..50u64 {
                assert_eq!(mem.read_val::<u64>(i * 8).await, Ok(i * 8));
            }
        });
    });
}

/// A device that says it serves every address up to 2^64 - 1 (the
/// `Backend` trait allows it); its memory is a `MemBackend`.
struct Unbounded(MemBackend);

impl Backend for Unbounded {
    fn read_scatter(&self, entries: &mut [crate::ScatterEntry<'_>]) {
        self.0.read_scatter(entries)
    }
    fn write_scatter(&self, entries: &mut [crate::WriteEntry<'_>]) {
        self.0.write_scatter(entries)
    }
    fn limits(&self) -> Limits {
        self.0.limits()
    }
    fn max_address(&self) -> u64 {
        u64::MAX
    }
    fn memory_map(&self) -> crate::MemoryMap {
        self.0.memory_map()
    }
    fn read_only(&self) -> bool {
        false
    }
}

#[test]
fn accesses_on_the_last_page_of_the_address_space_fail_cleanly() {
    let mem = Memory::new(Unbounded(MemBackend::with_address_pattern(MIB)));
    // Short and unaligned (a window), ending at 2^64, and sharing a page
    // with a write: each fails, none panics on its arithmetic.
    let (mut short, mut tail, mut shared) = ([0u8; 4], [0u8; 7], [0u8; 8]);
    let (a, b, c, d) = mem.block_on(async {
        join!(
            mem.read(u64::MAX - 0xf, &mut short),
            mem.read(u64::MAX - 6, &mut tail),
            mem.write(u64::MAX - 2, &[1, 2]),
            mem.read(u64::MAX - 0x17, &mut shared)
        )
    });
    assert_eq!(a.unwrap_err().failed_bytes(), 4);
    assert_eq!(b.unwrap_err().failed_bytes(), 7);
    assert_eq!(c.unwrap_err().failed_bytes(), 2);
    assert_eq!(d.unwrap_err().failed_bytes(), 8);
}

/// Runs `f` on a thread of its own and fails if it does not end within
/// ten seconds (a lost wake-up hangs for ever).
fn ends_in_time(f: impl FnOnce() + Send + 'static) {
    let (done, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = done.send(());
    });
    let ended = ended.recv_timeout(std::time::Duration::from_secs(10));
    assert!(
        ended.is_ok(),
        "still waiting after 10 s: a wake-up was lost"
    );
}

#[test]
fn a_nested_block_on_that_completes_the_outer_futures_request_wakes_it() {
    ends_in_time(|| {
        let (mem, _backend) = engine(MemBackend::with_address_pattern(MIB));
        let (a, b) = mem.block_on(async {
            join!(mem.read_val::<u64>(0x1000), async {
                mem.block_on(mem.read_val::<u64>(0x2000))
            })
        });
        assert_eq!((a, b), (Ok(0x1000), Ok(0x2000)));
    });
}

#[test]
fn a_nested_block_on_does_not_take_a_wake_another_thread_sent_the_outer_one() {
    ends_in_time(|| {
        let (outer, outer_backend) = engine(MemBackend::with_address_pattern(MIB));
        let (inner, _) = engine(MemBackend::with_address_pattern(MIB));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flusher = {
            let (outer, stop) = (outer.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    outer.flush();
                    std::thread::yield_now();
                }
            })
        };
        let (a, b) = outer.block_on(async {
            join!(outer.read_val::<u64>(0x1000), async {
                inner.block_on(async {
                    // Until the other thread has sent the outer read (and
                    // woken the outer future, through this thread's flag).
                    while outer_backend.read_calls() == 0 {
                        yield_once().await;
                    }
                    inner.read_val::<u64>(0x2000).await
                })
            })
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        flusher.join().unwrap();
        assert_eq!((a, b), (Ok(0x1000), Ok(0x2000)));
    });
}

/// Returns `Pending` once, waking its task at once.
async fn yield_once() {
    let mut yielded = false;
    futures::future::poll_fn(|cx| {
        if std::mem::replace(&mut yielded, true) {
            Poll::Ready(())
        } else {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await
}

/// A `MemBackend` that counts what the engine asks of it besides reads:
/// its geometry, its target's liveness, and the calls made after that.
#[derive(Default)]
struct Asked {
    geometry: std::sync::atomic::AtomicUsize,
    checks: std::sync::atomic::AtomicUsize,
    checked_reads: std::sync::atomic::AtomicUsize,
    epoch: std::sync::atomic::AtomicU64,
    gone: std::sync::atomic::AtomicBool,
}

struct Counting {
    inner: MemBackend,
    asked: Arc<Asked>,
}

impl Counting {
    fn note_geometry(&self) {
        self.asked.geometry.fetch_add(1, Ordering::Relaxed);
    }
}

impl Backend for Counting {
    fn read_scatter(&self, entries: &mut [crate::ScatterEntry<'_>]) {
        self.inner.read_scatter(entries)
    }
    fn write_scatter(&self, entries: &mut [crate::WriteEntry<'_>]) {
        self.inner.write_scatter(entries)
    }
    fn limits(&self) -> Limits {
        self.note_geometry();
        Limits {
            max_entries: 2,
            ..self.inner.limits()
        }
    }
    fn max_address(&self) -> u64 {
        self.note_geometry();
        self.inner.max_address()
    }
    fn memory_map(&self) -> crate::MemoryMap {
        self.inner.memory_map()
    }
    fn read_only(&self) -> bool {
        self.note_geometry();
        Backend::read_only(&self.inner)
    }
    fn prefers_address_order(&self) -> bool {
        self.note_geometry();
        false
    }
    fn geometry_epoch(&self) -> u64 {
        self.asked.epoch.load(Ordering::Relaxed)
    }
    fn check_target(&self) -> Result<(), PageError> {
        self.asked.checks.fetch_add(1, Ordering::Relaxed);
        match self.asked.gone.load(Ordering::Relaxed) {
            true => Err(PageError::TargetGone),
            false => Ok(()),
        }
    }
    fn read_scatter_checked(&self, entries: &mut [crate::ScatterEntry<'_>]) {
        self.asked.checked_reads.fetch_add(1, Ordering::Relaxed);
        self.inner.read_scatter(entries)
    }
}

#[test]
fn the_device_is_asked_its_geometry_once_and_its_target_once_a_flush() {
    let asked = Arc::new(Asked::default());
    let backend = Counting {
        inner: MemBackend::with_address_pattern(MIB),
        asked: asked.clone(),
    };
    let mem = Memory::new(backend);
    let load = |n: &std::sync::atomic::AtomicUsize| n.load(Ordering::Relaxed);
    // Five reads on pages of their own, two entries a call: three calls a
    // flush, one look at the target.
    let reads =
        |mem: &Memory| mem.block_on(join_all((0..5).map(|i| mem.read_val::<u64>(i * 0x1000))));
    for _ in 0..10 {
        assert!(reads(&mem).iter().all(Result::is_ok));
    }
    assert_eq!(load(&asked.geometry), 4, "asked once: four answers");
    assert_eq!(load(&asked.checks), 10);
    assert_eq!(load(&asked.checked_reads), 30);
    // A new epoch (a memory map set, say): asked again, once.
    asked.epoch.fetch_add(1, Ordering::Relaxed);
    reads(&mem);
    reads(&mem);
    assert_eq!(load(&asked.geometry), 8);
    // A target found gone fails the whole flush, with no call.
    asked.gone.store(true, Ordering::Relaxed);
    let calls = load(&asked.checked_reads);
    for r in reads(&mem) {
        assert_eq!(r.unwrap_err().failed[0].reason, PageError::TargetGone);
    }
    let mut buf = [0u8; 16];
    let outcome = mem.read_now([(0x10u64, &mut buf[..])]);
    assert_eq!(
        outcome.failures(0).map(|f| f.reason).collect::<Vec<_>>(),
        vec![PageError::TargetGone]
    );
    assert_eq!(load(&asked.checked_reads), calls);
}
