//! Time limits for devices that talk over sockets.
//!
//! LeechCore reads and writes its sockets with no time limit: a remote end
//! that accepts the connection and then says nothing (a `rawtcp://` server,
//! a LeechAgent, a hung QEMU monitor) blocks the call, and its caller, for
//! ever. A `Watchdog` thread per device cuts the device's sockets
//! (`shutdown(2)`) once a call has heard nothing for the limit: the `recv`
//! or `connect` blocked inside LeechCore returns, LeechCore fails the call,
//! and the device refuses every later read and write, as its stream may
//! now hold the late answer to a request given up on.
//!
//! The device's sockets are those that appeared in `/proc/self/fd` while it
//! was being opened; for `rawtcp://HOST:PORT` only those connected (or
//! connecting) to that address, so that a socket another thread opened
//! meanwhile is left alone. A device that opened none (an image file, a
//! board on USB, a QEMU guest's shared memory) has no watchdog after
//! opening, and its calls cost nothing more. On a socket device a call
//! costs a clock read and two atomic stores, plus the blocking of SIGPIPE
//! (below); the watchdog wakes only at deadlines, and sleeps while no call
//! is under way.
//!
//! A TCP socket that is still moving data is not silent: at the deadline
//! the kernel's record of the last data sent and received (`TCP_INFO`) can
//! move the deadline on, so a large read over a slow link is not cut.
//!
//! LeechCore sends with `send(…, 0)`: on a socket whose other end is gone
//! (or that was cut) that raises SIGPIPE, whose default action kills the
//! process, as in a C host. Calls on a socket device run with SIGPIPE
//! blocked on the calling thread, and a SIGPIPE raised meanwhile is taken
//! back before it is unblocked.

mod sockets;

use crate::lock::LockRecovering;
use std::collections::HashSet;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::device_string::DeviceString;
use crate::backend::PageError;
use sockets::{open_sockets, SigpipeBlocked, Socket};

/// The time limit of a device when none is given: how long a call may hear
/// nothing from the device's sockets.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads a time limit: seconds, with a fraction (`2.5`) and an optional
/// unit (`5s`, `500ms`). Zero is refused: it would fail every call.
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (number, scale) = if let Some(ms) = t.strip_suffix("ms") {
        (ms, 1e-3)
    } else {
        (t.strip_suffix('s').unwrap_or(t), 1.0)
    };
    let bad = || {
        format!(
            "timeout `{text}`: give seconds, e.g. 5, 2.5 or 500ms (the default is {} s)",
            DEFAULT_TIMEOUT.as_secs()
        )
    };
    // (`f64::from_str` alone would take signs, `inf` and exponents.)
    let plain = !number.is_empty()
        && number.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && number.bytes().filter(|&b| b == b'.').count() <= 1
        && number != ".";
    if !plain {
        return Err(bad());
    }
    let seconds = number.parse::<f64>().map_err(|_| bad())? * scale;
    let limit = Duration::try_from_secs_f64(seconds).map_err(|_| bad())?;
    if limit < Duration::from_millis(1) {
        return Err(format!(
            "timeout `{text}` is too short: a device gets at least 1 ms to answer"
        ));
    }
    Ok(limit)
}

/// Why a device with a time limit serves no more reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lost {
    /// A call heard nothing for the limit; its sockets were cut.
    TimedOut,
    /// The other end closed the connection.
    Disconnected,
}

impl Lost {
    /// The reason each entry of a read or write gets.
    pub(crate) fn page_error(self) -> PageError {
        match self {
            Lost::TimedOut => PageError::TimedOut,
            Lost::Disconnected => PageError::Disconnected,
        }
    }
}

const NOT_LOST: u8 = 0;
const TIMED_OUT: u8 = 1;
const DISCONNECTED: u8 = 2;

/// No call under way.
const IDLE: u64 = 0;
/// The call under way was cut.
const CUT: u64 = u64::MAX;

/// Which sockets are the device's.
enum Watched {
    /// While opening: those that appear, except the ones open before, and
    /// for a `rawtcp` device only those to its address.
    Opening {
        before: HashSet<u64>,
        peer: Option<SocketAddrV4>,
    },
    /// Once open: the ones found then.
    Device(Vec<Socket>),
}

struct Shared {
    /// The device string, for messages.
    device: String,
    limit: Duration,
    epoch: Instant,
    /// The deadline of the call under way, in ns since `epoch`; [`IDLE`]
    /// or [`CUT`].
    deadline: AtomicU64,
    /// The watchdog sleeps until a call starts: the caller wakes it.
    parked: AtomicBool,
    stop: AtomicBool,
    lost: AtomicU8,
    watched: Mutex<Watched>,
}

/// The time limit of one device: a thread that cuts its sockets when a call
/// overruns. Stopped on drop.
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Watchdog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watchdog")
            .field("device", &self.shared.device)
            .field("limit", &self.shared.limit)
            .finish_non_exhaustive()
    }
}

impl Watchdog {
    /// Starts watching the opening of `device`, which begins now. Without
    /// a thread (the system refused one) nothing is ever cut.
    pub(crate) fn opening(device: &DeviceString, limit: Duration) -> Watchdog {
        let shared = Arc::new(Shared {
            device: device.text().to_string(),
            limit,
            epoch: Instant::now(),
            deadline: AtomicU64::new(IDLE),
            parked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            lost: AtomicU8::new(NOT_LOST),
            watched: Mutex::new(Watched::Opening {
                before: open_sockets().iter().map(|s| s.inode).collect(),
                peer: device.rawtcp_address(),
            }),
        });
        let thread = {
            let shared = shared.clone();
            thread::Builder::new()
                .name("leechio-watchdog".into())
                .spawn(move || watch(&shared))
        };
        let thread = thread
            .map_err(|e| log::warn!("{}: no time limit ({e}: no watchdog thread)", device.text()))
            .ok();
        let watchdog = Watchdog { shared, thread };
        watchdog.arm();
        watchdog
    }

    /// Ends the opening: `Err` if it was cut; else whether the device
    /// opened sockets, which are watched from now on (without any, the
    /// watchdog has nothing to do and may be dropped).
    pub(crate) fn opened(&self) -> Result<bool, Lost> {
        self.disarm();
        if let Some(lost) = self.lost() {
            return Err(lost);
        }
        let sockets = self.shared.sockets();
        if sockets.is_empty() {
            return Ok(false);
        }
        log::debug!(
            "{}: time limit {:?} on sockets {sockets:?}",
            self.shared.device,
            self.shared.limit
        );
        *self.shared.lock() = Watched::Device(sockets);
        Ok(true)
    }

    /// The reason an opening that was cut failed: names the limit.
    pub(crate) fn open_message(&self) -> String {
        format!(
            "no answer for {} (the time limit: timeout= or --timeout); the connection was cut",
            seconds(self.shared.limit)
        )
    }

    /// Runs one call into LeechCore under the time limit, with SIGPIPE
    /// blocked.
    pub(crate) fn call<R>(&self, f: impl FnOnce() -> R) -> R {
        let _sigpipe = SigpipeBlocked::new();
        self.arm();
        let result = f();
        self.disarm();
        result
    }

    /// Why the device serves no more reads and writes, if it does not.
    pub(crate) fn lost(&self) -> Option<Lost> {
        match self.shared.lost.load(SeqCst) {
            TIMED_OUT => Some(Lost::TimedOut),
            DISCONNECTED => Some(Lost::Disconnected),
            _ => None,
        }
    }

    /// Fails every result, when the device is lost: no call is to be made,
    /// as its stream may hold the late answer to a request given up on,
    /// and a send on it fails anyway.
    pub(crate) fn refuse<'e>(
        &self,
        results: impl Iterator<Item = &'e mut Result<(), PageError>>,
    ) -> bool {
        let Some(lost) = self.lost() else {
            return false;
        };
        for r in results {
            *r = Err(lost.page_error());
        }
        true
    }

    /// After a call: whether the device was lost during it. Looked for
    /// only when something failed (`all_ok` false), also as the other end
    /// closing a socket (a server that exited).
    pub(crate) fn lost_after(&self, all_ok: bool) -> Option<Lost> {
        if all_ok {
            None
        } else {
            self.check_connection()
        }
    }

    /// Whether the device is lost, now also when the other end closed a
    /// socket.
    pub(crate) fn check_connection(&self) -> Option<Lost> {
        if self.lost().is_none() && self.shared.sockets().iter().any(|s| s.hung_up()) {
            self.shared.mark(DISCONNECTED);
        }
        self.lost()
    }

    /// The message for a lost device: names it and the limit.
    pub(crate) fn message(&self, lost: Lost) -> String {
        self.shared.message(lost)
    }

    fn arm(&self) {
        let limit = u64::try_from(self.shared.limit.as_nanos()).unwrap_or(u64::MAX);
        let deadline = self.shared.now().saturating_add(limit).clamp(1, CUT - 1);
        self.shared.deadline.store(deadline, SeqCst);
        if self.shared.parked.load(SeqCst) {
            if let Some(t) = &self.thread {
                t.thread().unpark();
            }
        }
    }

    fn disarm(&self) {
        self.shared.deadline.store(IDLE, SeqCst);
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.shared.stop.store(true, SeqCst);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Shared {
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(CUT - 1)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Watched> {
        self.watched.lock_recovering()
    }

    /// The device's sockets as they are now.
    fn sockets(&self) -> Vec<Socket> {
        match &*self.lock() {
            Watched::Opening { before, peer } => open_sockets()
                .into_iter()
                .filter(|s| !before.contains(&s.inode))
                .filter(|s| peer.is_none_or(|p| s.may_be_connected_to(&p)))
                .collect(),
            Watched::Device(sockets) => sockets.clone(),
        }
    }

    /// Marks the device lost (the first reason stays) and says so once.
    fn mark(&self, why: u8) {
        if self
            .lost
            .compare_exchange(NOT_LOST, why, SeqCst, SeqCst)
            .is_ok()
        {
            let lost = if why == TIMED_OUT {
                Lost::TimedOut
            } else {
                Lost::Disconnected
            };
            // (An opening that fails says why in its error.)
            if matches!(*self.lock(), Watched::Device(_)) {
                log::error!("{}", self.message(lost));
            }
        }
    }

    fn message(&self, lost: Lost) -> String {
        let limit = seconds(self.limit);
        match lost {
            Lost::TimedOut => format!(
                "device `{}` stopped answering: nothing came for {limit} (its time limit: \
                 timeout= or --timeout); its connection is cut and every further read and write fails",
                self.device
            ),
            Lost::Disconnected => format!(
                "device `{}` closed its connection (its server exited?); every further read and write fails",
                self.device
            ),
        }
    }
}

/// `5 s`, `2.5 s`, `250 ms`.
fn seconds(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{} s", d.as_secs_f64())
    }
}

/// The watchdog's loop: sleeps until the deadline of the call under way,
/// and cuts the device's sockets if that call is still under way then and
/// they were silent for the whole limit.
fn watch(shared: &Shared) {
    while !shared.stop.load(SeqCst) {
        let deadline = shared.deadline.load(SeqCst);
        if deadline == IDLE || deadline == CUT {
            // Set before looking again, so a call that starts meanwhile
            // either is seen here or sees `parked` and wakes this thread.
            shared.parked.store(true, SeqCst);
            let now = shared.deadline.load(SeqCst);
            if (now == IDLE || now == CUT) && !shared.stop.load(SeqCst) {
                thread::park();
            }
            shared.parked.store(false, SeqCst);
            continue;
        }
        let now = shared.now();
        if now < deadline {
            thread::park_timeout(Duration::from_nanos(deadline - now));
            continue;
        }
        let sockets = shared.sockets();
        let quiet = sockets.iter().filter_map(|s| s.quiet_for()).min();
        let later = match quiet {
            // Data moved within the limit: slow, not stuck.
            Some(quiet) if quiet < shared.limit => Some(shared.limit - quiet),
            // Nothing to cut yet (an opening that has made no socket).
            _ if sockets.is_empty() => Some(shared.limit),
            _ => None,
        };
        if let Some(wait) = later {
            let wait = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
            let next = now.saturating_add(wait.max(1_000_000)).min(CUT - 1);
            let _ = shared
                .deadline
                .compare_exchange(deadline, next, SeqCst, SeqCst);
            continue;
        }
        // Only if that call is still under way.
        if shared
            .deadline
            .compare_exchange(deadline, CUT, SeqCst, SeqCst)
            .is_ok()
        {
            shared.mark(TIMED_OUT);
            for s in &sockets {
                s.shut_down();
            }
        }
    }
}

#[cfg(test)]
mod tests;
