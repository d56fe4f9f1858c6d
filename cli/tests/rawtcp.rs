//! The command line over LeechCore's `rawtcp://` device and the stand-in
//! server (`tests/common/rawtcp_server.py`): a dump byte-exact over TCP,
//! and servers that stop answering or are killed mid-dump.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::rawtcp::{assert_about, output_within, RawTcpServer};
use common::Image;

const MIB: u64 = 1 << 20;

fn leechio() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leechio"));
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

/// `leechio dump` of the image's RAM from 1 MiB on (LeechCore's map of a
/// rawtcp device leaves out 0xa0000..0x100000) into a raw file.
fn dump(server: &RawTcpServer, timeout: &str, out: &std::path::Path) -> Command {
    let mut cmd = leechio();
    cmd.args([
        "--timeout",
        timeout,
        "-d",
        &server.device(),
        "dump",
        "--format",
        "raw",
    ])
    .args(["--range", "0x100000-0x1000000", "-o"])
    .arg(out);
    cmd
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_dump_over_tcp_is_byte_exact() {
    let image = Image::new(16 * MIB);
    let server = RawTcpServer::start(&image.path, &[]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("dump.raw");
    let o = output_within(&mut dump(&server, "5", &out), Duration::from_secs(60));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read(&out).unwrap() == image.bytes(MIB, 15 * MIB as usize));
}

/// Runs a dump against a server that stalls at 8 MiB, does `then` once it
/// has, and returns how long the dump took from there, its exit code, its
/// error output and the file.
fn dump_that_stalls(
    image: &Image,
    timeout: &str,
    then: impl FnOnce(&mut RawTcpServer),
) -> (Duration, Option<i32>, String, Vec<u8>) {
    let mut server = RawTcpServer::start(&image.path, &["--stall-at", "0x800000"]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("dump.raw");
    let mut cmd = dump(&server, timeout, &out);
    let dumping = std::thread::spawn(move || output_within(&mut cmd, Duration::from_secs(30)));
    server.wait_for("stalled 0x800000", Duration::from_secs(20));
    let start = Instant::now();
    then(&mut server);
    // The dump must end by itself: a deadline, not a sleep.
    let o = dumping.join().unwrap();
    let took = start.elapsed();
    let file = std::fs::read(&out).unwrap();
    (
        took,
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        file,
    )
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_server_killed_mid_dump_ends_the_dump_with_an_error_within_5_s() {
    let image = Image::new(16 * MIB);
    let mut device = String::new();
    // A limit far away: what ends the dump is the closed connection.
    let (took, code, err, file) = dump_that_stalls(&image, "60", |server| {
        device = server.device();
        server.kill();
    });
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "leechio: device `{device}` closed its connection (its server exited?); every further \
             read and write fails; the dump stopped there, and the file holds what was read until then"
        )),
        "{err}"
    );
    // The first 4 MiB (one call) was read before the stall, and kept.
    assert!(file.len() >= 4 * MIB as usize, "{}", file.len());
    assert!(file[..4 * MIB as usize] == image.bytes(MIB, 4 * MIB as usize));
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_server_that_stops_answering_mid_dump_ends_it_at_the_limit() {
    let image = Image::new(16 * MIB);
    let (took, code, err, file) = dump_that_stalls(&image, "1", |_| {});
    // The limit runs from the call's start, a little before the server
    // says it stalled.
    assert!(took < Duration::from_millis(3500), "{took:?}");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(
            "stopped answering: nothing came for 1 s (its time limit: timeout= or --timeout)"
        ) && err.contains("the dump stopped there"),
        "{err}"
    );
    assert!(file[..4 * MIB as usize] == image.bytes(MIB, 4 * MIB as usize));
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_silent_server_fails_a_cli_command_at_the_limit() {
    let image = Image::new(16 * MIB);
    let server = RawTcpServer::start(&image.path, &["--silent"]);
    let start = Instant::now();
    let o = output_within(
        leechio().args(["--timeout", "500ms", "-d", &server.device(), "info"]),
        Duration::from_secs(10),
    );
    assert_about(start.elapsed(), Duration::from_millis(500));
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        format!(
            "leechio: LeechCore could not open device `{}`: no answer for 500 ms (the time limit: \
             timeout= or --timeout); the connection was cut\n",
            server.device()
        )
    );
}

#[test]
fn a_bad_timeout_is_refused_in_one_line() {
    for (value, says) in [
        ("0", "too short"),
        ("5min", "give seconds, e.g. 5, 2.5 or 500ms"),
    ] {
        let o = leechio()
            .args(["--timeout", value, "-d", "fpga", "info"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(says) && err.contains("--timeout"), "{err}");
    }
}
