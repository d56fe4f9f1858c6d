//! The flush's plan on made-up requests: page indexes, whole entries sent
//! as they are, pages read twice, legal windows, short entries.

use super::*;
use crate::backend::memory::MemBackend;

/// Lends `bufs` at `addrs` to `flusher` as a synchronous batch of reads.
fn lend_reads(flusher: &mut Flusher, addrs: &[u64], bufs: &mut [Vec<u8>]) {
    flusher.begin_batch();
    for (&addr, buf) in addrs.iter().zip(bufs.iter_mut()) {
        // SAFETY: the buffers outlive the flush and are not touched
        // until it returns.
        unsafe { flusher.lend(Kind::Read, addr, LentBuffer::of_mut(buf)) };
    }
}

#[test]
fn page_indexes_find_repeats_and_empty_between_passes() {
    let mut index = PageIndex::default();
    index.begin(100);
    // Pages that share their low bits still differ.
    let pages: Vec<u64> = (0..100).map(|i| i << 20 | 7).collect();
    for (i, &p) in pages.iter().enumerate() {
        assert_eq!(index.get_or_insert(p, i as u32), None);
    }
    for (i, &p) in pages.iter().enumerate() {
        assert_eq!(index.get_or_insert(p, 0), Some(i as u32));
    }
    // A new pass, smaller: nothing of the last one is left.
    index.begin(20);
    assert_eq!(index.get_or_insert(pages[3], 1), None);
    assert_eq!(index.get_or_insert(pages[3], 2), Some(1));
    let new = pages[..20]
        .iter()
        .filter(|&&p| index.get_or_insert(p, 3).is_none());
    assert_eq!(new.count(), 19);
    // Growing clears as well; and so does the pass counter's wrap.
    index.begin(5000);
    assert_eq!(index.get_or_insert(pages[0], 4), None);
    index.pass = u32::MAX;
    index.begin(10);
    assert_eq!(index.pass, 1);
    assert_eq!(index.get_or_insert(pages[0], 5), None);
    assert_eq!(index.get_or_insert(pages[0], 6), Some(5));
}

#[test]
fn whole_entries_on_pages_of_their_own_go_to_the_device_as_they_are() {
    let backend = MemBackend::with_address_pattern(1 << 20);
    backend.add_hole(0x3000..0x4000, PageError::Unspecified);
    let addrs = [0x1000, 0x2ff8, 0x3010, 0xf_f000];
    let mut bufs = vec![vec![0u8; 8], vec![0; 8], vec![0; 8], vec![0; 0x1000]];
    let mut flusher = Flusher::default();
    lend_reads(&mut flusher, &addrs, &mut bufs);
    let stats = flusher.run(&backend, 3);
    // Planned in one pass, without cutting pieces; split by the limit.
    assert!(flusher.pieces.is_empty());
    assert_eq!((stats.requests, stats.read_calls), (4, 2));
    assert_eq!(backend.read_call_sizes(), [3, 1]);
    let failed = Failure {
        offset: 0,
        len: 8,
        reason: PageError::Unspecified,
    };
    assert_eq!(flusher.take_failed(), [(2, failed)]);
    for (i, (&addr, buf)) in addrs.iter().zip(&bufs).enumerate() {
        let expected = if i == 2 {
            vec![0; 8] // failed: untouched
        } else {
            backend.bytes(addr, buf.len())
        };
        assert_eq!(buf, &expected, "read {i} at {addr:#x}");
    }
}

#[test]
fn a_page_read_twice_sends_the_flush_down_the_general_path() {
    let backend = MemBackend::with_address_pattern(1 << 20);
    // The third read shares the first one's page, after two whole
    // entries were already planned in one pass.
    let addrs = [0x1000, 0x2ff8, 0x1008];
    let mut bufs = vec![vec![0u8; 8]; 3];
    let mut flusher = Flusher::default();
    lend_reads(&mut flusher, &addrs, &mut bufs);
    let stats = flusher.run(&backend, usize::MAX);
    assert_eq!(flusher.pieces.len(), 3);
    // One call; the shared page is one entry.
    assert_eq!(stats.read_calls, 1);
    assert_eq!(backend.read_call_sizes(), [2]);
    assert!(flusher.take_failed().is_empty());
    for (&addr, buf) in addrs.iter().zip(&bufs) {
        assert_eq!(buf, &backend.bytes(addr, 8), "read at {addr:#x}");
    }
}

#[test]
fn windows_are_legal_and_cover_the_piece() {
    let l = Limits::LEECHCORE;
    let shape = Shape::new(&l, u64::MAX).unwrap();
    assert_eq!(window(&shape, 0x1000, 0x1000), (0x1000, 0x1000));
    assert_eq!(window(&shape, 0x1001, 2), (0x1000, 8));
    assert_eq!(window(&shape, 0x1ffe, 2), (0x1ff8, 8));
    assert_eq!(window(&shape, 0x1ffd, 3), (0x1ff8, 8));
    assert_eq!(window(&shape, 0x1003, 9), (0x1000, 12));
    for addr in 0x1000..0x1010u64 {
        for len in 1..=(0x2000 - addr as usize).min(40) {
            let (s, n) = window(&shape, addr, len);
            assert_eq!(l.check(s, n), Ok(()), "{addr:#x}+{len}");
            assert!(s <= addr && s + n as u64 >= addr + len as u64);
        }
    }
}

#[test]
fn windows_end_below_the_devices_end_where_one_fits() {
    let l = Limits::LEECHCORE;
    // Memory ends 8 bytes into the page at 0x2000.
    let shape = Shape::new(&l, 0x2008).unwrap();
    assert_eq!(window(&shape, 0x2004, 4), (0x2000, 8));
    assert_eq!(window(&shape, 0x2001, 2), (0x2000, 8));
    assert_eq!(window(&shape, 0x1ffc, 4), (0x1ff8, 8));
    // Only 6 bytes: no legal entry ends below the end.
    let shape = Shape::new(&l, 0x2006).unwrap();
    assert_eq!(window(&shape, 0x2000, 2), (0x2000, 8));
}

#[test]
fn entries_shorter_than_a_page_cut_pages_of_their_length() {
    let l = Limits::LEECHCORE;
    let short = Limits {
        max_len: 0x300,
        ..l
    };
    let shape = Shape::new(&short, u64::MAX).unwrap();
    assert_eq!(shape.to_page_end(0x1100), 0x100);
    assert_eq!(window(&shape, 0x11fe, 2), (0x11f8, 8));
    // Rules that admit no entry.
    for rules in [
        Limits { max_len: 4, ..l },
        Limits { max_len: 0, ..l },
        Limits {
            min_len: 0x1001,
            ..l
        },
        Limits {
            page_size: 0x1800,
            ..l
        },
        Limits { align: 0x2000, ..l },
    ] {
        assert!(Shape::new(&rules, u64::MAX).is_none(), "{rules:?}");
    }
    // The shortest entry is rounded up to the alignment.
    let coarse = Limits {
        min_len: 12,
        align: 8,
        ..l
    };
    assert_eq!(
        window(&Shape::new(&coarse, u64::MAX).unwrap(), 0x1001, 1),
        (0x1000, 16)
    );
}
