//! The LeechCore device against the real `leechcore.so` and image files.

mod common;

use std::path::Path;

use common::{read_file_at, read_words, Image};
use leechio::leechcore_sys as sys;
use leechio::{
    Call, DeviceConfig, Error, Failure, LeechCore, Memory, MemoryMap, MemoryRange, PageError,
    ScatterEntry, WriteEntry,
};

const MIB: u64 = 1 << 20;
const PAGE: u64 = 0x1000;

/// A random legal entry: a whole page or 8..=0x1000 bytes, 4-aligned,
/// inside one page.
fn random_entry(rng: &mut fastrand::Rng, size: u64) -> (u64, usize) {
    let page = rng.u64(0..size / PAGE) * PAGE;
    if rng.bool() {
        return (page, PAGE as usize);
    }
    let len = rng.u64(2..=PAGE / 4) * 4;
    let offset = rng.u64(0..=(PAGE - len) / 4) * 4;
    (page + offset, len as usize)
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn random_scatter_entries_equal_the_image_bytes() {
    let image = Image::new(48 * MIB);
    let device = image.open();
    let mut rng = fastrand::Rng::with_seed(0x1ec4);
    let calls_before = device.call_count(Call::ReadScatter);
    let mut checked = 0;
    for _ in 0..4 {
        let specs: Vec<(u64, usize)> = (0..1000)
            .map(|_| random_entry(&mut rng, image.size))
            .collect();
        let mut bufs: Vec<Vec<u8>> = specs.iter().map(|&(_, len)| vec![0xa5; len]).collect();
        let mut entries: Vec<ScatterEntry> = specs
            .iter()
            .zip(bufs.iter_mut())
            .map(|(&(addr, _), buf)| ScatterEntry::new(addr, buf))
            .collect();
        device.read_scatter(&mut entries);
        for e in &entries {
            assert_eq!(
                e.result,
                Ok(()),
                "entry at {:#x}+{:#x}",
                e.addr,
                e.buf.len()
            );
            assert!(
                e.buf[..] == image.bytes(e.addr, e.buf.len())[..],
                "bytes at {:#x}",
                e.addr
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 4000);
    assert_eq!(device.call_count(Call::ReadScatter) - calls_before, 4);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn entries_past_the_end_fail_alone_and_leave_their_buffers_untouched() {
    let image = Image::new(32 * MIB);
    let device = image.open();
    assert_eq!(device.max_address(), image.size);
    let addrs = [
        0,
        image.size,
        image.size - PAGE,
        image.size + 0x10,
        0x1234_5000,
        0x7fff_ffff_f000,
        image.size - 8,
        0x10_0000,
    ];
    let beyond = |a: u64| a >= image.size;
    let entries = read_words(&device, &addrs, 0xa5);
    let failed: Vec<u64> = entries
        .iter()
        .filter(|e| e.result.is_err())
        .map(|e| e.addr)
        .collect();
    let expected: Vec<u64> = addrs.iter().copied().filter(|&a| beyond(a)).collect();
    assert_eq!(failed, expected);
    for e in &entries {
        if beyond(e.addr) {
            assert_eq!(e.result, Err(PageError::Unspecified));
            assert_eq!(
                e.bytes, [0xa5; 8],
                "failed entry at {:#x} was written",
                e.addr
            );
        } else {
            assert_eq!(e.bytes[..], image.bytes(e.addr, 8)[..]);
        }
    }
    assert_eq!(device.call_count(Call::ReadScatter), 1);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn entries_that_break_the_scatter_rules_are_refused_without_a_call() {
    let image = Image::new(16 * MIB);
    let device = image.open();
    let mut small = [0u8; 4];
    let mut crossing = [0u8; 16];
    let mut big = vec![0u8; 0x1004];
    let mut entries = [
        ScatterEntry::new(0x1000, &mut small),
        ScatterEntry::new(0x1ff8, &mut crossing),
        ScatterEntry::new(0x2000, &mut big),
    ];
    device.read_scatter(&mut entries);
    assert!(entries
        .iter()
        .all(|e| matches!(e.result, Err(PageError::InvalidEntry(_)))));
    assert_eq!(device.call_count(Call::ReadScatter), 0);
}

/// Opens `device` with LeechCore directly, bypassing the wrapper.
fn raw_open(lib: &sys::Library, device: &str) -> sys::HANDLE {
    let mut config = sys::LC_CONFIG::new();
    for (dst, &src) in config.szDevice.iter_mut().zip(device.as_bytes()) {
        *dst = src as std::ffi::c_char;
    }
    // SAFETY: a valid, versioned config with a NUL-terminated device string.
    let handle = unsafe { (lib.LcCreate)(&mut config) };
    assert!(!handle.is_null());
    handle
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn small_reads_that_break_lc_read_succeed_through_scatter() {
    let image = Image::new(16 * MIB);
    let device = image.open();
    let lib = device.library().clone();
    let raw = raw_open(&lib, &format!("file://file={},", image.path.display()));
    // Reads inside one page that stop short of its end.
    for (addr, len) in [
        (0x1010u64, 16usize),
        (0x1000, 8),
        (0x5ff0, 8),
        (0x20_0100, 0x100),
        (0x3000, 0xff8),
    ] {
        let mut direct = vec![0u8; len];
        // SAFETY: valid handle, buffer of `len` bytes.
        let ok = unsafe { (lib.LcRead)(raw, addr, len as u32, direct.as_mut_ptr()) };
        assert_eq!(
            ok, 0,
            "LcRead at {addr:#x}+{len:#x} no longer fails: the workaround may be obsolete"
        );
        let mut buf = vec![0u8; len];
        let mut entries = [ScatterEntry::new(addr, &mut buf)];
        device.read_scatter(&mut entries);
        assert_eq!(entries[0].result, Ok(()));
        assert_eq!(buf, image.bytes(addr, len), "at {addr:#x}");
    }
    // SAFETY: opened above, closed once.
    unsafe { (lib.LcClose)(raw) };
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn memory_map_round_trips_remaps_and_limits_reads() {
    let image = Image::new(32 * MIB);
    let device = image.open();
    let initial = device.memory_map().unwrap();
    assert_eq!(initial.ranges(), &[MemoryRange::new(0, image.size)]);

    let map = MemoryMap::new(vec![
        MemoryRange::new(0x1000, 0x10_0000),
        MemoryRange {
            start: 0x1_0000_0000,
            size: 0x20_0000,
            remap: 0x40_0000,
        },
        MemoryRange {
            start: 0x1_8000_0000 - 0x1000,
            size: 0x1000,
            remap: 0x80_0000,
        },
    ])
    .unwrap();
    // LeechCore takes a map with no ranges, then crashes on the next
    // read of its map: refused before it gets there, the map unchanged.
    let refused = device.set_memory_map(&MemoryMap::default()).unwrap_err();
    assert!(
        refused.to_string().contains("at least one range"),
        "{refused}"
    );
    assert_eq!(device.memory_map().unwrap(), initial);

    device.set_memory_map(&map).unwrap();
    assert_eq!(device.memory_map().unwrap(), map);
    assert_eq!(device.max_address(), 0x1_8000_0000);

    // LeechCore's text form of the same map agrees with its struct form.
    // SAFETY: a query without input.
    let text = unsafe { device.command(sys::LC_CMD_MEMMAP_GET, &mut [], "GET") }.unwrap();
    let text: MemoryMap = String::from_utf8_lossy(&text).parse().unwrap();
    assert_eq!(text, map);
    // SAFETY: as above.
    let raw =
        unsafe { device.command(sys::LC_CMD_MEMMAP_GET_STRUCT, &mut [], "GET_STRUCT") }.unwrap();
    let entry_size = std::mem::size_of::<sys::LC_MEMMAP_ENTRY>();
    let structs: Vec<MemoryRange> = raw
        .chunks_exact(entry_size)
        .map(|c| {
            let word = |i: usize| u64::from_le_bytes(c[i * 8..i * 8 + 8].try_into().unwrap());
            MemoryRange {
                start: word(0),
                size: word(1),
                remap: word(2),
            }
        })
        .collect();
    assert_eq!(structs, map.ranges());

    let addrs = [
        0x0u64,
        0x1000,
        0x10_0ff8,
        0x10_1000,
        0x1_0000_0000,
        0x1_001f_fff8,
        0x1_0020_0000,
        0x1_7fff_f000,
    ];
    for e in &read_words(&device, &addrs, 0) {
        match map.find(e.addr) {
            Some(range) => {
                assert_eq!(e.result, Ok(()), "{:#x} is mapped", e.addr);
                let offset = e.addr - range.start + range.remap;
                assert_eq!(
                    e.bytes[..],
                    image.bytes(offset, 8)[..],
                    "{:#x} reads file offset {offset:#x}",
                    e.addr
                );
            }
            None => assert!(e.result.is_err(), "{:#x} is outside the map", e.addr),
        }
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn maps_of_hundreds_of_ranges_and_remaps_to_0_are_set_as_given() {
    let image = Image::new(16 * MIB);
    let device = image.open();
    // 300 one-page ranges, every other page, each read from the page
    // after it (LeechCore's text form loses ranges past the 256th).
    let map = MemoryMap::new(
        (0..300u64)
            .map(|i| MemoryRange {
                start: i * 2 * PAGE,
                size: PAGE,
                remap: (i * 2 + 1) * PAGE,
            })
            .collect(),
    )
    .unwrap();
    device.set_memory_map(&map).unwrap();
    assert_eq!(device.memory_map().unwrap(), map);
    let addrs = [280 * 2 * PAGE + 0x18, 299 * 2 * PAGE, 280 * 2 * PAGE + PAGE];
    let words = read_words(&device, &addrs, 0xa5);
    assert_eq!(
        words[0].bytes[..],
        image.bytes((280 * 2 + 1) * PAGE + 0x18, 8)[..]
    );
    assert_eq!(words[1].bytes[..], image.bytes(599 * PAGE, 8)[..]);
    assert!(words[2].result.is_err(), "a page between the ranges");

    // A remap of 0 is the start of the file, not "the range's own address".
    let low = MemoryMap::new(vec![MemoryRange {
        start: 0x10_0000,
        size: 0x10_0000,
        remap: 0,
    }])
    .unwrap();
    device.set_memory_map(&low).unwrap();
    assert_eq!(device.memory_map().unwrap(), low);
    let words = read_words(&device, &[0x10_0010], 0);
    assert_eq!(words[0].bytes[..], image.bytes(0x10, 8)[..]);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn an_image_of_part_pages_ends_at_its_last_whole_page() {
    let image = Image::new(16 * MIB + 0x800);
    let device = image.open();
    // (LeechCore itself would map it as 4 GiB.)
    assert_eq!(device.max_address(), 16 * MIB);
    assert_eq!(
        device.memory_map().unwrap(),
        MemoryMap::new(vec![MemoryRange::new(0, 16 * MIB)]).unwrap()
    );
    // The partial page fails whole, its buffer untouched.
    let mut page = vec![0xa5u8; PAGE as usize];
    let mut entries = [ScatterEntry::new(16 * MIB, &mut page)];
    device.read_scatter(&mut entries);
    assert!(entries[0].result.is_err());
    assert!(
        page.iter().all(|&b| b == 0xa5),
        "the failed page was written"
    );
    let words = read_words(&device, &[16 * MIB - 8], 0);
    assert_eq!(words[0].bytes[..], image.bytes(16 * MIB - 8, 8)[..]);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_failed_reopen_leaves_no_handle_to_use() {
    let image = Image::new(16 * MIB);
    let config = DeviceConfig::new(format!("file://file={},write=1", image.path.display()));
    let device = LeechCore::open(&config).unwrap();
    // The image goes: the write still reaches the open file, opening it
    // again right after the write fails, and every later access fails
    // without a handle (valgrind showed the closed one used, then closed
    // twice on drop).
    std::fs::remove_file(&image.path).unwrap();
    let mut writes = [WriteEntry::new(0x2000, &[0x11; 8])];
    device.write_scatter(&mut writes);
    assert_eq!(writes[0].result, Ok(()));
    for _ in 0..3 {
        let words = read_words(&device, &[0x3000], 0);
        assert_eq!(words[0].result, Err(PageError::NotIssued));
    }
    let mut writes = [WriteEntry::new(0x2000, &[0x22; 8])];
    device.write_scatter(&mut writes);
    assert_eq!(writes[0].result, Err(PageError::NotIssued));
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn info_reports_the_file_device() {
    let image = Image::new(16 * MIB);
    let device = image.open();
    let info = device.info();
    assert_eq!(info.name, "file");
    assert_eq!((info.version.major, info.version.minor), (2, 23));
    assert!(info.read_only);
    assert!(!info.volatile);
    assert!(info.library.ends_with("leechcore.so"));
    assert_eq!(device.call_count(Call::Open), 1);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn writes_land_exactly_and_read_only_devices_refuse_them() {
    let image = Image::new(16 * MIB);
    let original = read_file_at(&image.path, 0, image.size as usize);

    let read_only = image.open();
    let data = [0x11u8; 8];
    let mut entries = [WriteEntry::new(0x2000, &data)];
    read_only.write_scatter(&mut entries);
    assert_eq!(entries[0].result, Err(PageError::ReadOnly));
    assert_eq!(read_only.call_count(Call::WriteScatter), 0);
    drop(read_only);

    let config = DeviceConfig::new(format!("file://file={},write=1", image.path.display()));
    let device = LeechCore::open(&config).unwrap();
    assert!(!device.info().read_only);
    let page = vec![0x5au8; 0x1000];
    let small: Vec<u8> = (1..=12).collect();
    let mut entries = [
        WriteEntry::new(0x3000, &page),
        WriteEntry::new(0x5004, &small),
        WriteEntry::new(image.size, &small[..8]),
        WriteEntry::new(0x6002, &small[..8]),
    ];
    device.write_scatter(&mut entries);
    assert_eq!(entries[0].result, Ok(()));
    assert_eq!(entries[1].result, Ok(()));
    assert!(entries[2].result.is_err(), "write past the end must fail");
    assert!(matches!(entries[3].result, Err(PageError::InvalidEntry(_))));
    assert_eq!(device.call_count(Call::WriteScatter), 1);
    drop(device); // LeechCore's file device flushes writes on close.

    let after = read_file_at(&image.path, 0, image.size as usize);
    let mut expected = original;
    expected[0x3000..0x4000].copy_from_slice(&page);
    expected[0x5004..0x5010].copy_from_slice(&small);
    assert_eq!(after.len(), expected.len(), "the image grew or shrank");
    let first_difference = after.iter().zip(&expected).position(|(a, b)| a != b);
    assert_eq!(first_difference, None, "bytes differ from the exact write");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn bad_input_gives_clear_errors() {
    let open = |device: &str| {
        LeechCore::open(&DeviceConfig::new(device))
            .unwrap_err()
            .to_string()
    };

    let missing = open("file:///nonexistent/memory.raw");
    assert!(
        missing.contains("/nonexistent/memory.raw") && missing.contains("No such file"),
        "{missing}"
    );

    let image = Image::new(16 * MIB);
    let small_dir = tempfile::tempdir().unwrap();
    let small = small_dir.path().join("small.raw");
    std::fs::write(
        &small,
        read_file_at(&image.path, 0, (16 * MIB - PAGE) as usize),
    )
    .unwrap();
    let too_small = open(&format!("file://{}", small.display()));
    assert!(too_small.contains("under 16 MiB"), "{too_small}");
    // A bare path is opened as an image file too, and explained as one.
    let too_small = open(small.to_str().unwrap());
    assert!(too_small.contains("under 16 MiB"), "{too_small}");
    let folder = open(small_dir.path().to_str().unwrap());
    assert!(
        folder.contains("is a folder, not an image file"),
        "{folder}"
    );
    match LeechCore::open(&DeviceConfig::new(" ")) {
        Err(Error::InvalidConfig(text)) => {
            assert!(text.contains("the device string is empty"), "{text}")
        }
        other => panic!("{other:?}"),
    }

    let unknown = open("nosuchdevice://abc");
    assert!(
        unknown.contains("unknown device type `nosuchdevice`"),
        "{unknown}"
    );

    let long = format!("file:///{}", "a".repeat(300));
    match LeechCore::open(&DeviceConfig::new(long)) {
        Err(Error::InvalidConfig(text)) => assert!(text.contains("at most 259"), "{text}"),
        other => panic!("{other:?}"),
    }

    let mut config = DeviceConfig::new(image.device());
    config.library = Some("/nonexistent/dir/leechcore.so".into());
    let wrong_lib = LeechCore::open(&config).unwrap_err().to_string();
    assert!(
        wrong_lib.contains("/nonexistent/dir/leechcore.so") && wrong_lib.contains("make setup"),
        "{wrong_lib}"
    );

    // A real shared library that is not LeechCore: libusb, which LeechCore
    // itself needs (so it is on every machine that runs these tests).
    let libusb = [
        "/lib/x86_64-linux-gnu/libusb-1.0.so.0",
        "/usr/lib/x86_64-linux-gnu/libusb-1.0.so.0",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists())
    .expect("libusb-1.0.so.0 (make setup installs it)");
    config.library = Some(libusb.into());
    let not_leechcore = LeechCore::open(&config).unwrap_err().to_string();
    assert!(
        not_leechcore.contains("no function `LcCreate`"),
        "{not_leechcore}"
    );
}

/// LeechCore's file device buffers each write in one of its several stdio
/// handles until it is closed, so without the device's reopening a read
/// after a write sees the old bytes and overlapping writes land in handle
/// order. Writes of every shape, read back in the same session and then
/// from the file, must match a model of the memory.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn writes_to_a_file_device_are_read_back_at_once_and_land_in_order() {
    let image = Image::new(16 * MIB);
    let mut model = read_file_at(&image.path, 0, image.size as usize);
    let config = DeviceConfig::new(format!("file://file={},write=1", image.path.display()));
    let device = std::sync::Arc::new(LeechCore::open(&config).unwrap());
    let mem = leechio::Memory::with_config(device.clone(), Default::default());
    let mut rng = fastrand::Rng::with_seed(0x5a17);
    let base = 0x20000u64; // a few pages, so writes overlap often
    let mut write_calls = 0;
    for round in 0..60u8 {
        // One batch of 1 to 4 writes: aligned, unaligned, tiny, across a
        // page, overlapping one another.
        let ops: Vec<(u64, Vec<u8>)> = (0..rng.usize(1..=4))
            .map(|i| {
                let addr = base + rng.u64(0..3 * PAGE);
                let len = [1, 2, 3, 8, 13, 40, 0x1000][rng.usize(0..7)];
                (
                    addr,
                    vec![round.wrapping_mul(16).wrapping_add(i as u8); len],
                )
            })
            .collect();
        let outcome = mem.write_now(ops.iter().map(|(a, d)| (*a, &d[..])));
        assert!(outcome.is_ok(), "round {round}: {outcome:?}");
        write_calls += outcome.stats.write_calls as u64;
        for (addr, data) in &ops {
            model[*addr as usize..*addr as usize + data.len()].copy_from_slice(data);
        }
        // Read back now, through the same device.
        let mut seen = vec![0u8; 4 * PAGE as usize];
        let read = mem.read_now([(base, &mut seen[..])]);
        assert!(read.is_ok());
        let want = &model[base as usize..(base + 4 * PAGE) as usize];
        if let Some(at) = seen.iter().zip(want).position(|(a, b)| a != b) {
            panic!(
                "round {round}: byte {:#x} reads back wrong",
                base + at as u64
            );
        }
    }
    assert_eq!(device.call_count(Call::WriteScatter), write_calls);
    drop(mem);
    drop(device);
    let after = read_file_at(&image.path, 0, image.size as usize);
    assert_eq!(after.len(), model.len(), "the image grew or shrank");
    let first_difference = after.iter().zip(&model).position(|(a, b)| a != b);
    assert_eq!(
        first_difference, None,
        "the file differs from the writes made"
    );
}

/// A write that returned is in the file for every reader, with the device
/// still open and no call after it: another program reading the image
/// sees what was written.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_returned_write_is_in_the_file_for_other_readers() {
    let image = Image::new(16 * MIB);
    let config = DeviceConfig::new(format!("file://file={},write=1", image.path.display()));
    let device = LeechCore::open(&config).unwrap();
    let page = vec![0x3cu8; PAGE as usize];
    let small: Vec<u8> = (1..=12).collect();
    for (addr, data) in [
        (0x7000, &page[..]),
        (0x9004, &small[..]),
        (0x7000, &small[..8]),
    ] {
        let mut entries = [WriteEntry::new(addr, data)];
        device.write_scatter(&mut entries);
        assert_eq!(entries[0].result, Ok(()));
        let in_file = read_file_at(&image.path, addr, data.len());
        assert_eq!(
            in_file, data,
            "the write at {addr:#x} is not in the file yet"
        );
    }
    assert_eq!(device.call_count(Call::WriteScatter), 3);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_users_max_address_cuts_reads_writes_and_the_map() {
    let image = Image::new(32 * MIB);
    let original = read_file_at(&image.path, 0, image.size as usize);
    let limit = 0x10_0000;
    let mut config = DeviceConfig::new(format!("file://file={},write=1", image.path.display()));
    config.max_address = Some(limit);
    let device = std::sync::Arc::new(LeechCore::open(&config).unwrap());
    // LeechCore's file device ignores its own paMax: leechio enforces it.
    assert_eq!(device.max_address(), limit);
    assert_eq!(
        device.memory_map().unwrap(),
        MemoryMap::new(vec![MemoryRange::new(0, limit)]).unwrap()
    );

    // Straight to the device: entries past the limit never reach it.
    let addrs = [limit - PAGE, limit, 0x20_0000, limit - 8];
    let words = read_words(&*device, &addrs, 0xa5);
    let results: Vec<_> = words.iter().map(|w| w.result).collect();
    assert_eq!(
        results,
        [
            Ok(()),
            Err(PageError::OutOfRange),
            Err(PageError::OutOfRange),
            Ok(())
        ]
    );
    assert_eq!(words[1].bytes, [0xa5; 8], "a refused entry was written");

    // Through the engine: exact failed ranges, with the reason.
    let mem = Memory::with_config(device.clone(), Default::default());
    let mut buf = vec![0u8; 0x1800];
    let outcome = mem.read_now([(limit - 0x800, buf.as_mut_slice())]);
    let failures: Vec<Failure> = outcome.failures(0).copied().collect();
    assert_eq!(
        failures,
        [Failure {
            offset: 0x800,
            len: 0x1000,
            reason: PageError::OutOfRange
        }]
    );
    assert_eq!(buf[..0x800], image.bytes(limit - 0x800, 0x800)[..]);

    let outcome = mem.write_now([(limit - 4, &[1u8; 8][..])]);
    let failures: Vec<Failure> = outcome.failures(0).copied().collect();
    assert_eq!(
        failures,
        [Failure {
            offset: 4,
            len: 4,
            reason: PageError::OutOfRange
        }]
    );
    drop(mem);
    drop(device); // the file device flushes on close
    let mut expected = original;
    expected[limit as usize - 4..limit as usize].copy_from_slice(&[1; 4]);
    let after = read_file_at(&image.path, 0, image.size as usize);
    assert_eq!(
        after.iter().zip(&expected).position(|(a, b)| a != b),
        None,
        "only the bytes below the limit changed"
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn bad_settings_and_devices_are_named_as_the_cause() {
    let image = Image::new(16 * MIB);
    let mut config = DeviceConfig::new(image.device());
    config.max_address = Some(0);
    match LeechCore::open(&config) {
        Err(Error::InvalidConfig(text)) => {
            assert!(text.contains("max_address 0 leaves no memory"), "{text}")
        }
        other => panic!("{other:?}"),
    }

    config.max_address = None;
    config.remote = Some("bogus://x".into());
    let remote = LeechCore::open(&config).unwrap_err().to_string();
    assert!(
        remote.contains("the remote `bogus://x` is the likely cause")
            && !remote.contains("did not recognise"),
        "{remote}"
    );

    let dir = tempfile::tempdir().unwrap();
    let folder = LeechCore::open(&DeviceConfig::new(format!(
        "file://{}",
        dir.path().display()
    )))
    .unwrap_err()
    .to_string();
    assert!(
        folder.contains(&format!("`{}` is a folder", dir.path().display())),
        "{folder}"
    );

    let missing = LeechCore::open(&DeviceConfig::new(
        "qemu://shm=leechio-test-no-such-guest,qmp=/tmp/leechio-test-no-such.qmp",
    ))
    .unwrap_err()
    .to_string();
    assert!(
        missing.contains("guest RAM file /dev/shm/leechio-test-no-such-guest does not exist")
            && !missing.contains("gone"),
        "{missing}"
    );
}

/// Reads and writes of 1 to 20 bytes at any alignment, packed around a
/// page edge and queued as futures in one flush, on a writable file
/// device: each read sees exactly the writes queued before it, and the
/// file ends up holding the writes in program order.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn dense_queued_reads_and_writes_on_a_file_device_keep_program_order() {
    let image = Image::new(16 * MIB);
    let mut model = read_file_at(&image.path, 0, image.size as usize);
    let config = DeviceConfig::new(format!("file://file={},write=1", image.path.display()));
    let device = std::sync::Arc::new(LeechCore::open(&config).unwrap());
    let mut rng = fastrand::Rng::with_seed(0xde45e);
    for batch in 0..300 {
        let config = leechio::EngineConfig {
            max_entries_per_call: [1, 2, usize::MAX][rng.usize(0..3)],
        };
        let mem = Memory::with_config(device.clone(), config);
        let edge = PAGE * rng.u64(1..16);
        // (addr, Some(data)) writes, (addr, None) reads of `len`.
        let ops: Vec<(u64, usize, Option<Vec<u8>>)> = (0..rng.usize(2..=16))
            .map(|_| {
                let addr = edge - 24 + rng.u64(0..48);
                let len = if rng.u8(0..8) == 0 {
                    rng.usize(1..=0x1800)
                } else {
                    rng.usize(1..=20)
                };
                let data = rng
                    .bool()
                    .then(|| std::iter::repeat_with(|| rng.u8(..)).take(len).collect());
                (addr, len, data)
            })
            .collect();
        let mut bufs: Vec<Vec<u8>> = ops.iter().map(|(_, len, _)| vec![0; *len]).collect();
        let results = mem.block_on(leechio::join_all(ops.iter().zip(bufs.iter_mut()).map(
            |((addr, _, data), buf)| {
                let fut: std::pin::Pin<Box<dyn std::future::Future<Output = _>>> = match data {
                    Some(data) => Box::pin(mem.write(*addr, data)),
                    None => Box::pin(mem.read(*addr, buf)),
                };
                fut
            },
        )));
        for (i, ((addr, len, data), result)) in ops.iter().zip(&results).enumerate() {
            assert_eq!(result, &Ok(()), "batch {batch}, op {i}");
            let at = *addr as usize;
            match data {
                Some(data) => model[at..at + len].copy_from_slice(data),
                None => assert_eq!(
                    bufs[i],
                    model[at..at + len],
                    "batch {batch}, op {i}: read at {addr:#x} of {ops:x?}"
                ),
            }
        }
    }
    drop(device);
    let after = read_file_at(&image.path, 0, image.size as usize);
    let first_difference = after.iter().zip(&model).position(|(a, b)| a != b);
    assert_eq!(
        first_difference, None,
        "the file differs from the writes made"
    );
}
