use super::*;

use std::ops::Range;
use std::sync::Arc;

use memflow::cglue::CSliceMut;
use memflow::mem::mem_data::opt_call;
use memflow::mem::{PhysicalReadMemOps, PhysicalWriteMemOps};

use crate::{join_all, Memory};

/// What the scripted connector says of the bytes it is asked for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Answer {
    /// Reads them and reports each item through `out`, or `out_fail` where
    /// a failing range lies, as memflow's connectors do.
    Honest,
    /// Reads them and reports nothing at all.
    Silent,
    /// Fails the whole call.
    Refuse,
}

/// A memflow connector over a byte vector: it counts its calls and the
/// items of each, fails reads that touch `failing` (reporting exactly the
/// failed bytes through `out_fail`, after writing garbage into them, as a
/// connector reading a file may), and answers as `answer` says.
struct Scripted {
    data: Vec<u8>,
    failing: Vec<Range<u64>>,
    answer: Answer,
    calls: Arc<std::sync::Mutex<Vec<usize>>>,
}

impl Scripted {
    fn new(len: usize) -> Scripted {
        Scripted {
            data: (0..len).map(|i| (i * 7 % 251) as u8).collect(),
            failing: Vec::new(),
            answer: Answer::Honest,
            calls: Arc::default(),
        }
    }
}

impl PhysicalMemory for Scripted {
    fn phys_read_raw_iter(
        &mut self,
        MemOps {
            inp,
            mut out,
            mut out_fail,
        }: PhysicalReadMemOps,
    ) -> memflow::error::Result<()> {
        let items: Vec<_> = inp.collect();
        self.calls.lock().unwrap().push(items.len());
        if self.answer == Answer::Refuse {
            return Err(memflow::error::Error(
                memflow::error::ErrorOrigin::Connector,
                memflow::error::ErrorKind::UnableToReadMemory,
            ));
        }
        for CTup3(pa, meta, mut buf) in items {
            let at = pa.address().to_umem();
            let len = buf.len();
            // Byte by byte: the run of failed bytes, then the run of read
            // ones, each reported as one piece.
            let mut i = 0;
            while i < len {
                let bad = |i: usize| {
                    let a = at + i as u64;
                    a >= self.data.len() as u64 || self.failing.iter().any(|r| r.contains(&a))
                };
                let kind = bad(i);
                let mut j = i;
                while j < len && bad(j) == kind {
                    if kind {
                        buf[j] = 0xee;
                    } else {
                        buf[j] = self.data[(at as usize) + j];
                    }
                    j += 1;
                }
                // SAFETY: `i..j` lies in `buf`, which this call borrows
                // exclusively; the piece is handed out once.
                let piece: CSliceMut<u8> =
                    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().add(i), j - i) }
                        .into();
                if self.answer == Answer::Honest {
                    let cb = if kind {
                        out_fail.as_deref_mut()
                    } else {
                        out.as_deref_mut()
                    };
                    opt_call(cb, CTup2(meta + i, piece));
                }
                i = j;
            }
        }
        Ok(())
    }

    fn phys_write_raw_iter(
        &mut self,
        MemOps {
            inp,
            mut out,
            mut out_fail,
        }: PhysicalWriteMemOps,
    ) -> memflow::error::Result<()> {
        self.calls.lock().unwrap().push(0);
        for CTup3(pa, meta, data) in inp {
            let at = pa.address().to_umem() as usize;
            let bad = self
                .failing
                .iter()
                .any(|r| r.start < (at + data.len()) as u64 && r.end > at as u64);
            if bad {
                opt_call(out_fail.as_deref_mut(), CTup2(meta, data));
            } else {
                self.data[at..at + data.len()].copy_from_slice(&data);
                opt_call(out.as_deref_mut(), CTup2(meta, data));
            }
        }
        Ok(())
    }

    fn metadata(&self) -> PhysicalMemoryMetadata {
        PhysicalMemoryMetadata {
            max_address: Address::from(self.data.len() as u64 - 1),
            real_size: self.data.len() as umem,
            readonly: false,
            ideal_batch_size: 64,
        }
    }
}

fn expected(at: u64, len: usize) -> Vec<u8> {
    (at as usize..at as usize + len)
        .map(|i| (i * 7 % 251) as u8)
        .collect()
}

#[test]
fn a_batch_of_the_engine_is_one_connector_call() {
    let phys = Scripted::new(1 << 20);
    let calls = phys.calls.clone();
    let mem = Memory::new(PhysicalMemoryBackend::new(phys));
    // 300 reads of 24 bytes anywhere, some across a page boundary.
    let addrs: Vec<u64> = (0..300u64).map(|i| i * 0x0d_3f1 % 0xf_ff00).collect();
    let mut bufs = vec![[0u8; 24]; addrs.len()];
    let mem = &mem;
    let results = mem.block_on(join_all(
        addrs
            .iter()
            .zip(bufs.iter_mut())
            .map(|(&a, buf)| mem.read(a, buf)),
    ));
    assert!(results.iter().all(|r| r.is_ok()));
    for (a, buf) in addrs.iter().zip(&bufs) {
        assert_eq!(buf[..], expected(*a, 24)[..], "{a:#x}");
    }
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1, "{calls:?}");
    // The engine sends one entry per page touched.
    let pages: std::collections::BTreeSet<u64> = addrs
        .iter()
        .flat_map(|a| [a >> 12, (a + 23) >> 12])
        .collect();
    assert_eq!(calls[0], pages.len());
}

#[test]
fn chained_reads_cost_one_connector_call_per_level() {
    // Five chains of pointers, each four deep and on pages of its own,
    // read together: four calls of five entries.
    let mut phys = Scripted::new(1 << 20);
    for chain in 0..5u64 {
        for level in 0..4u64 {
            let here = 0x1000 * (level + 1) + chain * 0x10_0000 / 8;
            let next = here + 0x1000;
            phys.data[here as usize..here as usize + 8].copy_from_slice(&next.to_le_bytes());
        }
    }
    let calls = phys.calls.clone();
    let mem = Memory::new(PhysicalMemoryBackend::new(phys));
    let ends = mem.block_on(join_all((0..5u64).map(|chain| {
        let mem = &mem;
        async move {
            let mut at = 0x1000 + chain * 0x10_0000 / 8;
            for _ in 0..4 {
                at = mem.read_val::<u64>(at).await.unwrap();
            }
            at
        }
    })));
    let last = |c: u64| 0x5000 + c * 0x10_0000 / 8;
    assert_eq!(ends, (0..5).map(last).collect::<Vec<_>>());
    assert_eq!(calls.lock().unwrap().clone(), vec![5, 5, 5, 5]);
}

#[test]
fn bytes_memflow_reports_failed_fail_alone_and_are_not_written() {
    let mut phys = Scripted::new(1 << 16);
    // Failed: the 16 bytes 0x2ff8..0x3008, which span a page boundary.
    phys.failing.push(0x2ff8..0x3008);
    let calls = phys.calls.clone();
    let mem = Memory::new(PhysicalMemoryBackend::new(phys));
    let mut buf = vec![0x5au8; 0x2000];
    let mut other = [0u8; 8];
    let (whole, apart) = mem.block_on(async {
        futures::join!(mem.read(0x2000, &mut buf), mem.read(0x5000, &mut other))
    });
    assert_eq!(apart, Ok(()));
    assert_eq!(other[..], expected(0x5000, 8)[..]);
    let err = whole.unwrap_err();
    // The engine's fragments are pages: the two pages the failure
    // touches fail whole, the rest of the request is read.
    let failed: Vec<(usize, usize)> = err.failed.iter().map(|f| (f.offset, f.len)).collect();
    assert_eq!(failed, vec![(0, 0x2000)]);
    assert!(
        buf.iter().all(|&b| b == 0x5a),
        "bytes of a failed fragment were written"
    );
    assert_eq!(calls.lock().unwrap().len(), 1);

    // Read apart from the failure, its neighbours are fine.
    let mut near = [0u8; 8];
    mem.block_on(mem.read(0x2ff0, &mut near)).unwrap();
    assert_eq!(near[..], expected(0x2ff0, 8)[..]);
    let mut inside = [0x11u8; 8];
    let err = mem.block_on(mem.read(0x3000, &mut inside)).unwrap_err();
    assert_eq!((err.failed[0].offset, err.failed[0].len), (0, 8));
    assert_eq!(err.failed[0].reason, PageError::Unspecified);
    assert_eq!(inside, [0x11; 8]);
}

#[test]
fn a_connector_that_reports_nothing_or_refuses_the_call_reads_nothing() {
    for answer in [Answer::Silent, Answer::Refuse] {
        let mut phys = Scripted::new(1 << 16);
        phys.answer = answer;
        let mem = Memory::new(PhysicalMemoryBackend::new(phys));
        let mut buf = [0x33u8; 64];
        let err = mem.block_on(mem.read(0x100, &mut buf)).unwrap_err();
        assert_eq!(err.failed.len(), 1, "{answer:?}");
        assert_eq!((err.failed[0].offset, err.failed[0].len), (0, 64));
        assert_eq!(buf, [0x33; 64], "{answer:?}");
    }
}

#[test]
fn reads_past_the_end_fail_and_the_end_is_memflows_last_address_plus_one() {
    let backend = PhysicalMemoryBackend::new(Scripted::new(0x3000));
    assert_eq!(backend.max_address(), 0x3000);
    assert_eq!(
        backend.memory_map().ranges(),
        &[MemoryRange::new(0, 0x3000)]
    );
    let mem = Memory::new(backend);
    let mut buf = [0u8; 0x20];
    let err = mem.block_on(mem.read(0x2ff0, &mut buf)).unwrap_err();
    let failed: Vec<(usize, usize)> = err.failed.iter().map(|f| (f.offset, f.len)).collect();
    assert_eq!(failed, vec![(0x10, 0x10)]);
    assert_eq!(buf[..0x10], expected(0x2ff0, 0x10)[..]);
}

#[test]
fn writes_are_one_call_and_failures_come_back_per_entry() {
    let mut phys = Scripted::new(1 << 16);
    phys.failing.push(0x4000..0x4001);
    let calls = phys.calls.clone();
    let backend = Arc::new(PhysicalMemoryBackend::new(phys));
    let mem = Memory::with_config(backend.clone(), crate::EngineConfig::default());
    let (a, b) = mem.block_on(async {
        futures::join!(
            mem.write(0x1000, &[1, 2, 3, 4]),
            mem.write(0x4000, &[5, 6, 7, 8])
        )
    });
    assert_eq!(a, Ok(()));
    let err = b.unwrap_err();
    assert_eq!((err.failed[0].offset, err.failed[0].len), (0, 4));
    assert_eq!(err.failed[0].reason, PageError::WriteFailed);
    assert_eq!(backend.write_calls(), 1);
    assert_eq!(calls.lock().unwrap().clone(), vec![0]);
    let mut back = [0u8; 4];
    mem.block_on(mem.read(0x1000, &mut back)).unwrap();
    assert_eq!(back, [1, 2, 3, 4]);
}
