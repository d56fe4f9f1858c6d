//! The guest's QEMU monitor: a QMP client on a unix socket, and the
//! reading of the human monitor's memory dumps.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The longest one monitor command may take.
const MONITOR_TIMEOUT: Duration = Duration::from_secs(60);

/// Parses the monitor's `xp /Ngx` or `x /Ngx` dump: lines
/// `<address>: 0x<qword> 0x<qword>`, addresses from `start` on.
pub(super) fn parse_dump(text: &str, start: u64, n: usize) -> Option<Vec<u64>> {
    let mut words = Vec::with_capacity(n);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (addr, rest) = line.split_once(':')?;
        let addr = u64::from_str_radix(addr.trim(), 16).ok()?;
        if addr != start + 8 * words.len() as u64 {
            return None;
        }
        for word in rest.split_whitespace() {
            words.push(u64::from_str_radix(word.strip_prefix("0x")?, 16).ok()?);
        }
    }
    (words.len() == n).then_some(words)
}

/// A QMP client on a unix socket.
pub(super) struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Qmp {
    /// Connects (retrying until QEMU listens) and leaves negotiation mode.
    pub(super) fn connect(path: &Path, deadline: Instant) -> Qmp {
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => {
                    panic!("QMP socket {}: {e}", path.display())
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        stream.set_read_timeout(Some(MONITOR_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(MONITOR_TIMEOUT)).unwrap();
        let mut qmp = Qmp {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        };
        let greeting = qmp.message().expect("QMP greeting");
        assert!(
            greeting.get("QMP").is_some(),
            "not a QMP greeting: {greeting}"
        );
        qmp.execute("qmp_capabilities", json!({}))
            .expect("qmp_capabilities");
        qmp
    }

    /// The next message that is not an event.
    fn message(&mut self) -> Result<Value, String> {
        loop {
            let mut line = String::new();
            match self.reader.read_line(&mut line) {
                Ok(0) => return Err("QMP connection closed".into()),
                Ok(_) => {}
                Err(e) => return Err(format!("QMP read: {e}")),
            }
            let msg: Value =
                serde_json::from_str(&line).map_err(|e| format!("QMP sent {line:?}: {e}"))?;
            if msg.get("event").is_none() {
                return Ok(msg);
            }
        }
    }

    pub(super) fn execute(&mut self, command: &str, arguments: Value) -> Result<Value, String> {
        let request = json!({ "execute": command, "arguments": arguments });
        writeln!(self.writer, "{request}").map_err(|e| format!("QMP write: {e}"))?;
        let reply = self.message()?;
        match (reply.get("return"), reply.get("error")) {
            (Some(value), _) => Ok(value.clone()),
            (None, Some(error)) => Err(error.to_string()),
            _ => Err(format!("unexpected QMP reply {reply}")),
        }
    }
}
