//! The engine's exact call counts, on the real LeechCore file device,
//! counted by LeechCore itself.

mod common;

use std::sync::Arc;

use common::{pattern_word, Image};
use futures::future::join_all;
use futures::join;
use leechio::{
    Call, DeviceConfig, EngineConfig, Failure, LeechCore, Memory, MemoryMap, MemoryRange,
    PageError, PartialError,
};

const MIB: u64 = 1 << 20;

/// The engine over the image, and the device for LeechCore's counters.
fn engine(image: &Image) -> (Memory, Arc<LeechCore>) {
    let device = Arc::new(image.open());
    (
        Memory::with_config(device.clone(), EngineConfig::default()),
        device,
    )
}

/// Writes a pointer chain into the image: `depth` hops `stride` apart.
fn chain(image: &Image, start: u64, depth: usize, stride: u64) -> u64 {
    let mut at = start;
    for _ in 0..depth {
        image.poke(at, &(at + stride).to_le_bytes());
        at += stride;
    }
    at
}

async fn follow(mem: &Memory, start: u64, depth: usize) -> Result<u64, PartialError> {
    let mut p = start;
    for _ in 0..depth {
        p = mem.read_val::<u64>(p).await?;
    }
    Ok(p)
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn the_design_example_is_five_leechcore_calls() {
    let image = Image::new(32 * MIB);
    image.poke(0x2000, &0x3008u64.to_le_bytes());
    let z_end = chain(&image, 0x10_0000, 5, 0x10_0000);
    let (mem, device) = engine(&image);
    let (a, b, c) = mem.block_on(async {
        join!(
            mem.read_val::<u64>(0x1000),
            async {
                let p = mem.read_val::<u64>(0x2000).await?;
                mem.read_val::<u64>(p).await
            },
            follow(&mem, 0x10_0000, 5),
        )
    });
    assert_eq!(a, Ok(pattern_word(0x1000)));
    assert_eq!(b, Ok(pattern_word(0x3008)));
    assert_eq!(c, Ok(z_end));
    assert_eq!(device.call_count(Call::ReadScatter), 5);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_thousand_joined_reads_are_one_leechcore_call() {
    let image = Image::new(32 * MIB);
    let (mem, device) = engine(&image);
    let mut rng = fastrand::Rng::with_seed(99);
    let addrs: Vec<u64> = (0..1000).map(|_| rng.u64(0..image.size / 8) * 8).collect();
    let values = mem.block_on(join_all(addrs.iter().map(|&a| mem.read_val::<u64>(a))));
    for (&a, v) in addrs.iter().zip(values) {
        assert_eq!(v, Ok(pattern_word(a)), "at {a:#x}");
    }
    assert_eq!(device.call_count(Call::ReadScatter), 1);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_hundred_chains_of_depth_eight_are_eight_leechcore_calls() {
    let image = Image::new(32 * MIB);
    let starts: Vec<u64> = (0..100u64).map(|i| i * 0x1008).collect();
    let ends: Vec<u64> = starts
        .iter()
        .map(|&s| chain(&image, s, 8, 0x30_0000))
        .collect();
    let (mem, device) = engine(&image);
    let got = mem.block_on(join_all(starts.iter().map(|&s| follow(&mem, s, 8))));
    assert_eq!(got, ends.into_iter().map(Ok).collect::<Vec<_>>());
    assert_eq!(device.call_count(Call::ReadScatter), 8);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_read_of_seventeen_pages_is_one_leechcore_call() {
    let image = Image::new(32 * MIB);
    let (mem, device) = engine(&image);
    let mut buf = vec![0u8; 64 * 1024];
    mem.block_on(mem.read(0x12_3800, &mut buf)).unwrap();
    assert!(buf == image.bytes(0x12_3800, buf.len()));
    assert_eq!(device.call_count(Call::ReadScatter), 1);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_read_across_a_hole_in_the_memory_map_fails_exactly_there() {
    let image = Image::new(32 * MIB);
    let (mem, device) = engine(&image);
    let map = MemoryMap::new(vec![
        MemoryRange::new(0, 0x10_0000),
        MemoryRange::new(0x10_3000, 0x1F0_0000),
    ])
    .unwrap();
    device.set_memory_map(&map).unwrap();
    let mut buf = vec![0xa5u8; 0x6000];
    let err = mem.block_on(mem.read(0xF_F800, &mut buf)).unwrap_err();
    assert_eq!(
        err.failed,
        vec![Failure {
            offset: 0x800,
            len: 0x3000,
            reason: PageError::Unspecified
        }]
    );
    assert_eq!(buf[..0x800], image.bytes(0xF_F800, 0x800)[..]);
    assert_eq!(buf[0x800..0x3800], vec![0xa5; 0x3000][..]);
    assert_eq!(buf[0x3800..], image.bytes(0x10_3000, 0x2800)[..]);
    assert_eq!(device.call_count(Call::ReadScatter), 1);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn scoped_reads_and_writes_use_the_callers_buffers_in_one_leechcore_call_each() {
    let image = Image::new(32 * MIB);
    let writable = DeviceConfig::new(format!("file://file={},write=1", image.path.display()));
    let device = Arc::new(LeechCore::open(&writable).unwrap());
    let mem = Memory::with_config(device.clone(), EngineConfig::default());
    // 64 pages, two reads sharing one, and a small unaligned read.
    let addrs: Vec<u64> = (0..64u64).map(|i| 0x40_0000 + i * 0x3_1000).collect();
    let mut pages = vec![vec![0u8; 0x1000]; addrs.len()];
    let (mut shared, mut small) = ([0u8; 24], [0u8; 5]);
    let (reads, shared_result, small_result) = mem.scope(|s| {
        let reads = join_all(
            addrs
                .iter()
                .zip(pages.iter_mut())
                .map(|(&a, p)| s.read(a, p)),
        );
        mem.block_on(async {
            join!(
                reads,
                s.read(addrs[3] + 0x100, &mut shared),
                s.read(0x1_0003, &mut small)
            )
        })
    });
    assert!(reads.iter().all(Result::is_ok) && shared_result.is_ok() && small_result.is_ok());
    for (&a, page) in addrs.iter().zip(&pages) {
        assert!(*page == image.bytes(a, 0x1000), "page {a:#x}");
    }
    assert_eq!(shared[..], image.bytes(addrs[3] + 0x100, 24)[..]);
    assert_eq!(small[..], image.bytes(0x1_0003, 5)[..]);
    assert_eq!(device.call_count(Call::ReadScatter), 1);

    // A scoped write: exactly its bytes change in the image file.
    let before = image.bytes(0x20_0000, 0x3000);
    let data = [0x5au8; 0x1006];
    let written = mem.scope(|s| mem.block_on(s.write(0x20_0ffd, &data)));
    written.unwrap();
    assert_eq!(device.call_count(Call::WriteScatter), 1);
    drop((mem, device)); // LeechCore's file device flushes writes on close.
    let mut want = before;
    want[0xffd..0xffd + data.len()].copy_from_slice(&data);
    assert!(image.bytes(0x20_0000, 0x3000) == want);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn flushes_ask_the_device_nothing_but_their_reads_until_its_map_changes() {
    let image = Image::new(32 * MIB);
    let (mem, device) = engine(&image);
    let reads = |at: u64| {
        mem.block_on(join_all(
            (0..8u64).map(|i| mem.read_val::<u64>(at + i * 0x1000)),
        ))
    };
    reads(0);
    let scatters = device.call_count(Call::ReadScatter);
    let options = device.call_count(Call::GetOption);
    for round in 0..20u64 {
        let got = reads(round * 0x10_0000);
        for (i, v) in got.into_iter().enumerate() {
            assert_eq!(v, Ok(pattern_word(round * 0x10_0000 + i as u64 * 0x1000)));
        }
    }
    // Not one option asked by 20 flushes: the one counted is the reading
    // of the counter itself (an LcGetOption too).
    assert_eq!(device.call_count(Call::GetOption) - options, 1);
    // One scatter call a flush.
    assert_eq!(device.call_count(Call::ReadScatter) - scatters, 20);
    // A new map is seen at the next flush: its end is the device's end.
    let map = MemoryMap::new(vec![MemoryRange::new(0, 16 * MIB)]).unwrap();
    device.set_memory_map(&map).unwrap();
    let past = mem.block_on(mem.read_val::<u64>(16 * MIB + 0x1000));
    assert_eq!(past.unwrap_err().failed[0].reason, PageError::OutOfRange);
    assert_eq!(
        mem.block_on(mem.read_val::<u64>(16 * MIB - 8)),
        Ok(pattern_word(16 * MIB - 8))
    );
}
