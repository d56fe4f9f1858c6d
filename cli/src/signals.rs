//! Signals that would end `leechio` while it has something to finish first
//! (a bench's pointer chains to take out of target memory, a dump's
//! headers to write). While [`catch_termination`]'s guard lives they are
//! caught, and the command's own flow sees them ([`arrived`]) between
//! steps, finishes, and ends as the signal asked ([`exit_code`]). Nothing
//! but recording the signal happens in a signal handler: signal-hook's
//! handler only writes to a pipe, read by a thread of this module.
//!
//! Caught: every signal whose default action ends the process and that a
//! program can catch, except those that report a fault of the program
//! itself (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS),
//! after which nothing can be finished: SIGHUP, SIGINT, SIGQUIT, SIGTERM,
//! SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGIO, SIGPWR,
//! SIGSTKFLT, SIGXCPU and the real-time signals. SIGXFSZ is ignored for
//! the whole program (see `main`), and SIGPIPE too (Rust's default): a
//! write to a closed pipe, which `output` ends the program for, counts as
//! SIGPIPE arriving instead. SIGKILL and SIGSTOP cannot be caught.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use libc::c_int;
use signal_hook::iterator::Signals;
use signal_hook::low_level::{emulate_default_handler, signal_name};

/// The first signal caught while catching (0: none yet).
static ARRIVED: AtomicI32 = AtomicI32::new(0);
/// Whether a guard of [`catch_termination`] is alive.
static CATCHING: AtomicBool = AtomicBool::new(false);

/// The signals caught (see the module documentation).
fn termination_signals() -> Vec<c_int> {
    let mut signals = vec![
        libc::SIGHUP,
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGTERM,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGALRM,
        libc::SIGVTALRM,
        libc::SIGPROF,
        libc::SIGIO,
        libc::SIGPWR,
        libc::SIGSTKFLT,
        libc::SIGXCPU,
    ];
    signals.extend(libc::SIGRTMIN()..=libc::SIGRTMAX());
    signals
}

/// While alive, termination signals are caught; dropped, a signal ends the
/// process as its default action would.
pub struct Catching(());

impl Drop for Catching {
    fn drop(&mut self) {
        CATCHING.store(false, Ordering::SeqCst);
    }
}

/// Catches termination signals until the guard is dropped. The first one is
/// kept for [`arrived`]; a second one ends the process at once with exit
/// status 128 + its number, after printing `on_second` when given, and is
/// ignored when `on_second` is `None`.
pub fn catch_termination(on_second: Option<String>) -> std::io::Result<Catching> {
    static STARTED: AtomicBool = AtomicBool::new(false);
    CATCHING.store(true, Ordering::SeqCst);
    if !STARTED.swap(true, Ordering::SeqCst) {
        let mut signals = Signals::new(termination_signals())?;
        std::thread::spawn(move || {
            for sig in signals.forever() {
                if !CATCHING.load(Ordering::SeqCst) {
                    // The work is finished: the signal's own default action.
                    let _ = emulate_default_handler(sig);
                    std::process::exit(128 + sig);
                }
                let first = ARRIVED
                    .compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok();
                if let (false, Some(message)) = (first, &on_second) {
                    errln!("leechio: {message}");
                    std::process::exit(128 + sig);
                }
            }
        });
    }
    Ok(Catching(()))
}

/// The first termination signal caught, if one was.
pub fn arrived() -> Option<c_int> {
    Some(ARRIVED.load(Ordering::SeqCst)).filter(|&s| s != 0)
}

/// While catching, records a write to a closed pipe as SIGPIPE arriving
/// and says so: the caller then carries on, and the command ends quietly
/// once it has finished. `false` when not catching.
pub fn defer_closed_pipe() -> bool {
    if !CATCHING.load(Ordering::SeqCst) {
        return false;
    }
    let _ = ARRIVED.compare_exchange(0, libc::SIGPIPE, Ordering::SeqCst, Ordering::SeqCst);
    true
}

/// The signal's name, `SIGTERM`, or `signal 40` for one without a name.
pub fn name(sig: c_int) -> String {
    signal_name(sig).map_or_else(|| format!("signal {sig}"), str::to_string)
}

/// The exit status of a command that finished what `sig` interrupted:
/// 128 + its number, as a shell reports a process the signal ended. A
/// closed output pipe ends the program here, quietly, as SIGPIPE does.
pub fn exit_code(sig: c_int) -> ExitCode {
    if sig == libc::SIGPIPE {
        crate::output::end_on_closed_pipe();
    }
    ExitCode::from(u8::try_from(128 + sig).unwrap_or(u8::MAX))
}
