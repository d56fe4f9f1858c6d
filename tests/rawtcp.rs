//! The remote path for real: LeechCore's `rawtcp://` device against a
//! stand-in server that serves an image file (`tests/common/rawtcp_server.py`),
//! and the time limit of devices that talk over sockets: servers that never
//! answer, stop answering or trickle. (The command line's side, a server
//! killed mid-dump among it, is in `cli/tests/rawtcp.rs`.)

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::rawtcp::{assert_about, RawTcpServer};
use common::Image;
use leechio::{
    Backend, DeviceConfig, Error, LeechCore, Memory, PageError, ScatterEntry, WriteEntry,
};

const MIB: u64 = 1 << 20;

/// The server's device, with `max_address` at the end of the image (so
/// LeechCore does not probe for it) and the time limit `timeout`.
fn config(server: &RawTcpServer, image: &Image, timeout: Duration) -> DeviceConfig {
    DeviceConfig {
        max_address: Some(image.size),
        timeout: Some(timeout),
        ..DeviceConfig::new(server.device())
    }
}

/// `f`'s result, run on a thread of its own; a panic if it has not
/// returned within `within` (a hang fails the test instead of hanging it).
fn within<T: Send + 'static>(within: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(within)
        .unwrap_or_else(|_| panic!("still running after {within:?}"))
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn reads_over_tcp_equal_the_image() {
    let image = Image::new(16 * MIB);
    let server = RawTcpServer::start(&image.path, &[]);
    let device = LeechCore::open(&config(&server, &image, Duration::from_secs(5))).unwrap();
    assert_eq!(device.info().name, "rawtcp");
    let mem = Memory::with_config(Arc::new(device), Default::default());
    // LeechCore maps a rawtcp device like live memory: 0xa0000..0x100000
    // is left out. Pages, pieces inside a page at any offset, and pieces
    // across pages, all in one batch.
    let mut rng = fastrand::Rng::with_seed(7);
    let specs: Vec<(u64, usize)> = (0..300)
        .map(|i| match i % 3 {
            0 => (rng.u64(0x100..image.size / 0x1000) * 0x1000, 0x1000),
            1 => (rng.u64(0x100000..image.size - 0x1000), rng.usize(1..0x100)),
            _ => (rng.u64(0..0x9e000), rng.usize(1..0x2000)),
        })
        .collect();
    let mut bufs: Vec<Vec<u8>> = specs.iter().map(|&(_, n)| vec![0; n]).collect();
    let outcome = mem.read_now(
        specs
            .iter()
            .zip(bufs.iter_mut())
            .map(|(&(a, _), b)| (a, &mut b[..])),
    );
    assert!(
        outcome.is_ok(),
        "{:?}",
        (0..specs.len()).flat_map(|i| outcome.failures(i)).next()
    );
    for (&(addr, len), buf) in specs.iter().zip(&bufs) {
        assert!(*buf == image.bytes(addr, len), "{addr:#x}+{len:#x}");
    }
    // The hole of the map fails, untouched.
    let mut hole = [0xeeu8; 8];
    let outcome = mem.read_now([(0xa0000, &mut hole[..])]);
    assert!(!outcome.is_ok());
    assert_eq!(hole, [0xee; 8]);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_server_that_never_answers_fails_the_open_at_the_limit() {
    let image = Image::new(16 * MIB);
    let limit = Duration::from_secs(1);
    // Accepted and silent; and a connection never accepted (its SYN dropped).
    for mode in ["--silent", "--no-accept"] {
        let server = RawTcpServer::start(&image.path, &[mode]);
        let config = config(&server, &image, limit);
        let start = Instant::now();
        let result = within(Duration::from_secs(10), move || LeechCore::open(&config));
        assert_about(start.elapsed(), limit);
        match result {
            Err(Error::Open { device, reason }) => {
                assert_eq!(device, server.device());
                assert_eq!(
                    reason,
                    "no answer for 1 s (the time limit: timeout= or --timeout); the connection was cut",
                    "{mode}"
                );
            }
            other => panic!("{mode}: {other:?}"),
        }
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_server_that_stops_answering_fails_that_call_at_the_limit_and_every_later_one_at_once() {
    let image = Image::new(16 * MIB);
    let server = RawTcpServer::start(&image.path, &["--stall-at", "0x800000"]);
    let limit = Duration::from_millis(1500);
    let device = Arc::new(LeechCore::open(&config(&server, &image, limit)).unwrap());
    let read = |addr: u64, len: usize| {
        let device = device.clone();
        within(Duration::from_secs(10), move || {
            let mut buf = vec![0u8; len];
            let mut entries: Vec<ScatterEntry> = buf
                .chunks_mut(0x1000)
                .enumerate()
                .map(|(i, page)| ScatterEntry::new(addr + i as u64 * 0x1000, page))
                .collect();
            device.read_scatter(&mut entries);
            let results: Vec<_> = entries.iter().map(|e| e.result).collect();
            drop(entries);
            (results, buf)
        })
    };
    let (results, bytes) = read(0x7fe000, 0x2000);
    assert_eq!(results, [Ok(()); 2]);
    assert_eq!(bytes, image.bytes(0x7fe000, 0x2000));
    assert_eq!(device.lost(), None);

    // One call of two pages, which the server takes as one read and never
    // answers.
    let start = Instant::now();
    let (results, _) = read(0x7ff000, 0x2000);
    assert_about(start.elapsed(), limit);
    server.wait_for("stalled 0x800000", Duration::from_secs(5));
    assert_eq!(results, [Err(PageError::TimedOut); 2]);
    assert_eq!(
        device.lost().unwrap(),
        format!(
            "device `{}` stopped answering: nothing came for 1.5 s (its time limit: timeout= or \
             --timeout); its connection is cut and every further read and write fails",
            server.device()
        )
    );

    // From now on every access fails at once, without a call: pages the
    // server would serve, and writes.
    let start = Instant::now();
    let (results, _) = read(0x1000, 0x1000);
    assert_eq!(results, [Err(PageError::TimedOut)]);
    let mut writes = [WriteEntry::new(0x1000, &[0u8; 0x1000])];
    device.write_scatter(&mut writes);
    assert_eq!(writes[0].result, Err(PageError::TimedOut));
    // What LeechCore knows locally still answers.
    assert_eq!(device.max_address(), image.size);
    assert!(device.memory_map().is_ok());
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_slow_transfer_is_not_silence() {
    let image = Image::new(16 * MIB);
    // Each read's answer takes 2.5 s, sent in 16 pieces: never silent for
    // the 1 s limit, though the call lasts longer.
    let server = RawTcpServer::start(&image.path, &["--slow", "2.5"]);
    let limit = Duration::from_secs(1);
    let device = LeechCore::open(&config(&server, &image, limit)).unwrap();
    let mut buf = vec![0u8; 0x10000];
    let mut entries: Vec<ScatterEntry> = buf
        .chunks_mut(0x1000)
        .enumerate()
        .map(|(i, page)| ScatterEntry::new(0x200000 + i as u64 * 0x1000, page))
        .collect();
    let start = Instant::now();
    device.read_scatter(&mut entries);
    let took = start.elapsed();
    assert!(
        entries.iter().all(|e| e.result.is_ok()),
        "{:?}",
        entries[0].result
    );
    drop(entries);
    // (Cut at the limit, the call would have failed after 1 s.)
    assert!(
        took > Duration::from_secs(2),
        "{took:?}: the server was not slow"
    );
    assert_eq!(buf, image.bytes(0x200000, 0x10000));
    assert_eq!(device.lost(), None);
}

#[test]
fn a_timeout_of_zero_is_refused() {
    let mut config = DeviceConfig::new("rawtcp://127.0.0.1:1");
    config.timeout = Some(Duration::ZERO);
    match LeechCore::open(&config) {
        Err(Error::InvalidConfig(m)) => {
            assert!(m.contains("a timeout of 0 would fail every call"), "{m}")
        }
        other => panic!("{other:?}"),
    }
}
