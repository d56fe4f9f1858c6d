//! Time limits as the user writes them, and on real sockets: a silent peer
//! cut at the limit, a closed one seen, SIGPIPE taken back, no watchdog
//! without a socket.

use super::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;

#[test]
fn timeouts_are_seconds_with_a_fraction_or_a_unit() {
    assert_eq!(parse_timeout("5"), Ok(Duration::from_secs(5)));
    assert_eq!(parse_timeout("2.5"), Ok(Duration::from_millis(2500)));
    assert_eq!(parse_timeout("3s"), Ok(Duration::from_secs(3)));
    assert_eq!(parse_timeout("250ms"), Ok(Duration::from_millis(250)));
    for bad in ["", "-1", "1e3", "inf", "NaN", "5 min", ".", "1.2.3", "0x10"] {
        let e = parse_timeout(bad).unwrap_err();
        assert!(
            e.contains("give seconds, e.g. 5, 2.5 or 500ms"),
            "{bad}: {e}"
        );
    }
    for zero in ["0", "0.0", "0ms", "0.0001"] {
        let e = parse_timeout(zero).unwrap_err();
        assert!(e.contains("too short"), "{zero}: {e}");
    }
}

/// A socket that blocks in `recv` until the watchdog cuts it; the
/// blocked call returns within the limit, and the device is lost.
#[test]
#[cfg_attr(miri, ignore)] // Miri: sockets
fn a_silent_socket_is_cut_at_the_limit_and_only_then() {
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let device = format!("rawtcp://{}", server.local_addr().unwrap());
    let limit = Duration::from_millis(300);
    let dog = Watchdog::opening(&DeviceString::parse(&device), limit);
    let mut client = TcpStream::connect(server.local_addr().unwrap()).unwrap();
    let (mut peer, _) = server.accept().unwrap();
    // A socket opened to another address meanwhile is not the device's.
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let bystander = TcpStream::connect(other.local_addr().unwrap()).unwrap();
    assert_eq!(dog.opened(), Ok(true), "the client socket is watched");
    match &*dog.shared.lock() {
        Watched::Device(s) => assert_eq!(
            s.iter().map(|s| s.fd).collect::<Vec<_>>(),
            [client.as_raw_fd()]
        ),
        Watched::Opening { .. } => unreachable!(),
    }
    // A call that gets its answer is not cut.
    peer.write_all(b"x").unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(dog.call(|| client.read(&mut byte).unwrap()), 1);
    let start = Instant::now();
    let n = dog.call(|| client.read(&mut byte).unwrap_or(0));
    let took = start.elapsed();
    assert_eq!(n, 0, "the cut socket reads as closed");
    assert!(
        took >= limit && took < limit + Duration::from_secs(2),
        "{took:?}"
    );
    assert_eq!(dog.lost(), Some(Lost::TimedOut));
    assert!(dog.message(Lost::TimedOut).contains(&format!(
        "device `{device}` stopped answering: nothing came for 300 ms"
    )));
    drop((peer, bystander));
}

#[test]
#[cfg_attr(miri, ignore)] // Miri: sockets
fn a_peer_that_closes_marks_the_device_disconnected() {
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let dog = Watchdog::opening(&DeviceString::parse("socket test"), Duration::from_secs(60));
    let client = TcpStream::connect(server.local_addr().unwrap()).unwrap();
    let (peer, _) = server.accept().unwrap();
    assert_eq!(dog.opened(), Ok(true));
    assert_eq!(dog.check_connection(), None);
    drop(peer);
    let deadline = Instant::now() + Duration::from_secs(5);
    while dog.check_connection().is_none() {
        assert!(Instant::now() < deadline, "the close was never seen");
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(dog.lost(), Some(Lost::Disconnected));
    drop(client);
}

/// SIGPIPE, raised by a send on a socket whose other end is gone, kills
/// a process that has not set it aside (a C host); inside a call it is
/// taken back. Shown in a child process with SIGPIPE's default action.
#[test]
#[cfg_attr(miri, ignore)] // Miri: sockets and a process
fn a_sigpipe_inside_a_call_is_taken_back() {
    const CHILD: &str = "LEECHIO_SIGPIPE_CHILD";
    if let Some(how) = std::env::var_os(CHILD) {
        // SAFETY: restoring the default action, in a child of its own.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        drop(b);
        // As LeechCore sends: no MSG_NOSIGNAL.
        // SAFETY: a live socket and a 1-byte buffer.
        let write = || unsafe { libc::send(a.as_raw_fd(), b"x".as_ptr().cast(), 1, 0) };
        let write = || (write() == -1).then(|| std::io::Error::last_os_error().raw_os_error());
        let err = if how == "guarded" {
            let dog = Watchdog::opening(
                &DeviceString::parse("sigpipe test"),
                Duration::from_secs(60),
            );
            dog.call(write)
        } else {
            write()
        };
        assert_eq!(err, Some(Some(libc::EPIPE)));
        return;
    }
    let name = "backend::leechcore::time_limit::tests::a_sigpipe_inside_a_call_is_taken_back";
    let run = |how: &str| {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--test-threads=1"])
            .env(CHILD, how)
            .output()
            .unwrap()
            .status
    };
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(run("bare").signal(), Some(libc::SIGPIPE));
    let guarded = run("guarded");
    assert!(guarded.success(), "{guarded:?}");
}

/// Run in a child process of its own: the opening counts every socket
/// the process makes meanwhile, and other tests' threads make some.
#[test]
#[cfg_attr(miri, ignore)] // Miri: files and a process
fn an_opening_that_makes_no_socket_needs_no_watchdog() {
    const CHILD: &str = "LEECHIO_NO_SOCKET_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let dog = Watchdog::opening(&DeviceString::parse("file:///x"), Duration::from_secs(1));
        let _file = std::fs::File::open("/proc/self/status").unwrap();
        assert_eq!(dog.opened(), Ok(false));
        return;
    }
    let name =
        "backend::leechcore::time_limit::tests::an_opening_that_makes_no_socket_needs_no_watchdog";
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    assert!(
        child.status.success() && String::from_utf8_lossy(&child.stdout).contains("1 passed"),
        "{child:?}"
    );
}
