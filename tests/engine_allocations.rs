//! In steady state a batch of reads allocates nothing: slots, buffers,
//! wakers and the flush's working arrays are all reused.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use leechio::{Backend, Limits, Memory, MemoryMap, PageError, ScatterEntry, WriteEntry};

/// Counts the allocations of the current thread (other test threads do
/// not disturb the count).
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

/// Memory as a plain byte vector: unlike `MemBackend`, which logs every
/// call, it allocates nothing itself, so every allocation counted is the
/// engine's.
struct Plain(Vec<u8>);

impl Backend for Plain {
    fn read_scatter(&self, entries: &mut [ScatterEntry<'_>]) {
        for e in entries {
            let at = e.addr as usize;
            e.buf.copy_from_slice(&self.0[at..at + e.buf.len()]);
            e.result = Ok(());
        }
    }
    fn write_scatter(&self, entries: &mut [WriteEntry<'_>]) {
        for e in entries {
            e.result = Err(PageError::ReadOnly);
        }
    }
    fn limits(&self) -> Limits {
        Limits::LEECHCORE
    }
    fn max_address(&self) -> u64 {
        self.0.len() as u64
    }
    fn memory_map(&self) -> MemoryMap {
        MemoryMap::default()
    }
    fn read_only(&self) -> bool {
        true
    }
}

/// Polls every unfinished future on each wake: a join that allocates
/// nothing itself.
struct JoinSlice<'a, F>(&'a mut [(bool, F)]);

impl<F: Future + Unpin> Future for JoinSlice<'_, F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut pending = false;
        for (done, f) in self.0.iter_mut() {
            if !*done {
                *done = Pin::new(f).poll(cx).is_ready();
                pending |= !*done;
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }
}

#[test]
fn a_warm_batch_of_reads_allocates_nothing() {
    let pattern = (0..2u64 << 20).flat_map(|a| (a * 8).to_le_bytes());
    let mem = Memory::new(Plain(pattern.collect()));
    let addrs: Vec<u64> = (0..512u64)
        .map(|i| ((i * 0x7_3a18) % (16 << 20)) & !7)
        .collect();
    let mut bufs = vec![[0u8; 24]; addrs.len()];
    let batch = |bufs: &mut [[u8; 24]]| {
        let mut futures: Vec<_> = Vec::with_capacity(addrs.len());
        let before = allocations();
        futures.extend(
            addrs
                .iter()
                .zip(bufs.iter_mut())
                .map(|(&a, b)| (false, mem.read(a, b))),
        );
        mem.block_on(JoinSlice(&mut futures));
        let during = allocations() - before;
        drop(futures);
        during
    };
    let first = batch(&mut bufs);
    assert!(first > 0, "the first batch grows the pools");
    // The second batch reserves its slots all at once, having seen the
    // first one's size; from then on the pools fit.
    batch(&mut bufs);
    for _ in 0..8 {
        assert_eq!(batch(&mut bufs), 0, "a warm batch allocated");
    }
    for (&a, b) in addrs.iter().zip(&bufs) {
        assert_eq!(u64::from_le_bytes(b[..8].try_into().unwrap()), a);
    }
}

/// A large read finds the buffer an earlier large read used, whichever
/// slots the small reads around it took: a new one would be allocated,
/// zeroed and faulted in each time (a 64 MiB dump took 10x as long).
#[test]
fn a_warm_large_read_allocates_nothing() {
    let pattern = (0..2u64 << 20).flat_map(|a| (a * 8).to_le_bytes());
    let mem = Memory::new(Plain(pattern.collect()));
    let mut big = vec![0u8; 4 << 20];
    let round = |big: &mut [u8]| {
        let before = allocations();
        let (a, b, c) = mem.block_on(async {
            let small = futures::join!(
                mem.read_val::<u64>(0x1008),
                mem.read_val::<u64>(0x2010),
                mem.read_val::<u64>(0x3018)
            );
            let read = mem.read(0x40_0000, big).await;
            assert!(read.is_ok());
            small
        });
        assert_eq!(
            (a.unwrap(), b.unwrap(), c.unwrap()),
            (0x1008, 0x2010, 0x3018)
        );
        allocations() - before
    };
    assert!(round(&mut big) > 0, "the first large read gets a buffer");
    // The pools settle in the next rounds (buffer lists of a new size).
    round(&mut big);
    round(&mut big);
    for i in 0..6 {
        assert_eq!(round(&mut big), 0, "warm round {i} allocated");
    }
    assert_eq!(
        u64::from_le_bytes(big[8..16].try_into().unwrap()),
        0x40_0008
    );
}
