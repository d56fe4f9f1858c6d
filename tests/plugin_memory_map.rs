//! Memory maps through memflow's `Inventory` and the `leechcore` plugin
//! (built by `make plugin`): the user's `memmap=`, and the maps OS layers
//! set with `set_mem_map`, which belong to the instance they are set on.

mod common;

use common::plugin::{connect, connect_with_cache, read_split, with_map};
use common::{pattern_word, read_file_at, Image};
use memflow::prelude::v1::*;

const MIB: u64 = 1 << 20;

/// An OS layer's mapping: `size` bytes at its `base`, found at the
/// connector's `real_base`.
fn mapping(base: u64, size: u64, real_base: u64) -> PhysicalMemoryMapping {
    PhysicalMemoryMapping {
        base: Address::from(base),
        size,
        real_base: Address::from(real_base),
    }
}

/// (last valid address, size) of a connector's metadata.
fn extent(conn: &ConnectorInstanceArcBox<'static>) -> (u64, u64) {
    let meta = conn.metadata();
    (meta.max_address.to_umem(), meta.real_size)
}

/// `len` bytes read at `addr`, or `None` if any of them failed.
fn read(conn: &mut ConnectorInstanceArcBox<'static>, addr: u64, len: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0; len];
    conn.phys_view()
        .read_raw_into(Address::from(addr), &mut buf)
        .ok()
        .map(|()| buf)
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn an_os_layers_map_narrows_only_the_instance_it_is_set_on() {
    let image = Image::new(16 * MIB);
    let (lo, hi) = (2 * MIB, 4 * MIB);
    for cache in [false, true] {
        let mut whole = connect_with_cache(&format!("leechcore:\"{}\"", image.device()), cache);
        // memflow-linux narrows a throw-away clone to a 2 MiB window while
        // it looks for the kernel, and goes on with the connector it has.
        let mut narrow = whole.clone();
        narrow.set_mem_map(&[mapping(lo, hi - lo, lo)]);

        assert_eq!(extent(&narrow), (hi - 1, hi - lo), "cache {cache}");
        // Across the window's start, then across its end: exactly the
        // bytes outside it fail, and they are left as they were.
        let mut buf = vec![0xa5u8; 0x3000];
        let (ok, failed) = read_split(&mut narrow, lo - 0x1800, &mut buf);
        assert_eq!(ok, vec![(0x5000_1800, 0x1800)], "cache {cache}");
        assert_eq!(failed, vec![(0x5000_0000, 0x1800)], "cache {cache}");
        assert!(buf[..0x1800].iter().all(|&b| b == 0xa5));
        assert_eq!(buf[0x1800..], image.bytes(lo, 0x1800)[..]);
        let mut buf = vec![0xa5u8; 0x3000];
        let (ok, failed) = read_split(&mut narrow, hi - 0x800, &mut buf);
        assert_eq!(ok, vec![(0x5000_0000, 0x800)], "cache {cache}");
        assert_eq!(failed, vec![(0x5000_0800, 0x2800)], "cache {cache}");
        assert_eq!(buf[..0x800], image.bytes(hi - 0x800, 0x800)[..]);
        assert!(buf[0x800..].iter().all(|&b| b == 0xa5));
        let window = read(&mut narrow, lo, (hi - lo) as usize).unwrap();
        assert!(
            window == image.bytes(lo, (hi - lo) as usize),
            "cache {cache}"
        );

        // The instance it was cloned from still has all of memory.
        assert_eq!(extent(&whole), (16 * MIB - 1, 16 * MIB), "cache {cache}");
        let all = read(&mut whole, 0, image.size as usize).unwrap();
        let file = read_file_at(&image.path, 0, image.size as usize);
        assert_eq!(
            all.iter().zip(&file).position(|(a, b)| a != b),
            None,
            "cache {cache}"
        );

        // A clone made afterwards takes the map of the instance it copies.
        let mut later = narrow.clone();
        assert_eq!(extent(&later), (hi - 1, hi - lo), "cache {cache}");
        assert!(read(&mut later, lo - 0x1000, 0x10).is_none());
        let mut later_whole = whole.clone();
        assert_eq!(
            read(&mut later_whole, 0x10, 0x10).unwrap(),
            image.bytes(0x10, 0x10)
        );
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn an_os_layers_map_moves_reads_and_writes_of_its_instance_only() {
    let image = Image::new(16 * MIB);
    let mut conn = connect(&format!(
        "leechcore:\"file://file={},write=1\"",
        image.path.display()
    ))
    .unwrap();
    let mut other = conn.clone();
    // Physical 0x1000 is at the connector's 0x5000: the page moves.
    conn.set_mem_map(&[mapping(0x1000, 0x1000, 0x5000)]);
    assert_eq!(extent(&conn), (0x1fff, 0x1000));
    assert_eq!(
        read(&mut conn, 0x1010, 16).unwrap(),
        image.bytes(0x5010, 16)
    );
    assert!(read(&mut conn, 0x10, 16).is_none());
    assert_eq!(extent(&other), (16 * MIB - 1, 16 * MIB));
    assert_eq!(
        read(&mut other, 0x1010, 16).unwrap(),
        image.bytes(0x1010, 16)
    );

    conn.phys_view()
        .write_raw(Address::from(0x1ff8u64), &[7; 8])
        .unwrap();
    assert!(conn
        .phys_view()
        .write_raw(Address::from(0x2000u64), &[9; 8])
        .is_err());
    other
        .phys_view()
        .write_raw(Address::from(0x1ff8u64), &[3; 8])
        .unwrap();
    drop((conn, other)); // the file device flushes on close
    assert_eq!(image.bytes(0x5ff8, 8), [7; 8]);
    assert_eq!(image.bytes(0x1ff8, 8), [3; 8]);
    assert_eq!(image.bytes(0x2000, 8), pattern_word(0x2000).to_le_bytes());
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn the_users_memory_map_wins_over_the_os_layers_on_every_clone() {
    let image = Image::new(16 * MIB);
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("map.toml");
    std::fs::write(
        &toml,
        "[[range]]\nbase=0x100000\nlength=0x100000\nreal_base=0x200000\n",
    )
    .unwrap();
    let mut fixed = connect(&with_map(&image, &toml)).unwrap();
    let mut clone = fixed.clone();
    let os_map = [mapping(0, 0x1000, 0)];
    fixed.set_mem_map(&os_map);
    for (name, c) in [("set on", &mut fixed), ("clone", &mut clone)] {
        assert_eq!(extent(c), (0x1f_ffff, 0x10_0000), "{name}");
        assert_eq!(
            read(c, 0x10_0010, 16).unwrap(),
            image.bytes(0x20_0010, 16),
            "{name}: the file's remap applies"
        );
        assert!(read(c, 0x10, 16).is_none(), "{name}");
    }

    // Without a user map the OS layer's map is applied.
    let mut free = connect(&format!(
        "leechcore:\"file://file={},\"",
        image.path.display()
    ))
    .unwrap();
    free.set_mem_map(&os_map);
    assert_eq!(extent(&free), (0xfff, 0x1000));
    assert!(read(&mut free, 0x2000, 16).is_none());
    assert_eq!(read(&mut free, 0x10, 16).unwrap(), image.bytes(0x10, 16));
}
