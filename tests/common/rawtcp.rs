//! A stand-in for a LeechCore `rawtcp://` server over an image file
//! (`rawtcp_server.py` beside this file), run as a child process of the
//! test: killed on drop, and gone with the test process too (it exits when
//! its input closes).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// A running server.
pub struct RawTcpServer {
    child: Child,
    /// The port it listens on, on 127.0.0.1.
    pub port: u16,
    lines: Receiver<String>,
}

impl RawTcpServer {
    /// Serves `image`; `mode` are the script's options (`--silent`,
    /// `--stall-at ADDR`, `--no-accept`, `--slow S`, `--writable`).
    pub fn start(image: &Path, mode: &[&str]) -> RawTcpServer {
        let script = super::repo_root().join("tests/common/rawtcp_server.py");
        let mut child = Command::new("python3")
            .arg(&script)
            .arg(image)
            .args(mode)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the stand-in rawtcp server (make setup installs python3)");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let first = lines
            .recv_timeout(Duration::from_secs(20))
            .expect("the rawtcp server did not start");
        let port = first
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the rawtcp server said `{first}`"));
        RawTcpServer { child, port, lines }
    }

    /// Its device string.
    pub fn device(&self) -> String {
        format!("rawtcp://127.0.0.1:{}", self.port)
    }

    /// Waits until the server prints `line` (e.g. `stalled 0x800000`).
    pub fn wait_for(&self, line: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l == line => return,
                Ok(_) => {}
                Err(_) => panic!("the rawtcp server did not print `{line}` within {within:?}"),
            }
        }
    }

    /// Kills the server with SIGKILL, as a crash would, and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RawTcpServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Asserts `took` is at least `limit` (the limit was waited for, not
/// skipped) and at most `limit` plus a margin for a loaded machine.
pub fn assert_about(took: Duration, limit: Duration) {
    assert!(
        took >= limit && took < limit + Duration::from_millis(2500),
        "took {took:?} for a limit of {limit:?}"
    );
}

/// Runs `cmd` to its end; kills it and panics if it runs past `within`.
pub fn output_within(cmd: &mut Command, within: Duration) -> std::process::Output {
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + within;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("still running after {within:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}
