//! Printing when stdout or stderr may be a pipe whose reader has gone
//! (`leechio read 0 1g | head`).
//!
//! Rust ignores SIGPIPE, so such a write fails with `EPIPE`, and `println!`
//! and `eprintln!` panic on it; a panic message written to a closed stderr
//! panics again, which aborts. The macros here end the program the way
//! SIGPIPE ends other Unix tools instead: quietly. SIGPIPE is not restored
//! for the whole program because LeechCore's sockets (QMP, rawtcp, remote
//! agents) must keep seeing `EPIPE` as an error rather than be killed.

use std::io::{self, Write};

/// Ends the program as SIGPIPE's default action would: killed by the
/// signal, nothing printed (a shell then treats it like `yes | head`).
pub fn end_on_closed_pipe() -> ! {
    // SAFETY: restoring the default action of one signal and raising it in
    // this thread; nothing else runs after.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    // Not reached: the default action of SIGPIPE terminates.
    std::process::exit(1)
}

/// The outcome of writing to stdout: a closed pipe ends the program
/// quietly (once a command that catches signals has finished its work,
/// see `signals`), another error (a full disk behind `> file`) ends it
/// with a message.
pub fn checked_stdout(result: io::Result<()>) {
    match result {
        Ok(()) => {}
        // Not yet while the command has something to finish first.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe && crate::signals::defer_closed_pipe() => {}
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => end_on_closed_pipe(),
        Err(e) => {
            let _ = writeln!(io::stderr(), "leechio: writing to stdout: {e}");
            std::process::exit(1)
        }
    }
}

/// The outcome of writing to stderr: a closed pipe ends the program
/// quietly (as for stdout); any other error is dropped, as there is
/// nowhere to report it.
pub fn checked_stderr(result: io::Result<()>) {
    if let Err(e) = result {
        if e.kind() == io::ErrorKind::BrokenPipe && !crate::signals::defer_closed_pipe() {
            end_on_closed_pipe()
        }
    }
}

/// `println!` that never panics (see the module documentation).
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::checked_stdout({
            use std::io::Write as _;
            writeln!(std::io::stdout(), $($arg)*)
        })
    };
}

/// `eprintln!` that never panics (see the module documentation).
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::checked_stderr({
            use std::io::Write as _;
            writeln!(std::io::stderr(), $($arg)*)
        })
    };
}

/// `eprint!` that never panics (see the module documentation).
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::output::checked_stderr({
            use std::io::Write as _;
            write!(std::io::stderr(), $($arg)*)
        })
    };
}

/// The library's log records, on stderr: warnings and errors always (an
/// open that could not check QEMU's memory map, say), notes with `-v`.
struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        // This project's records only: `bench` loads memflow's inventory,
        // which warns about every file of the plugin folder it skips.
        let ours = ["leechio", "memflow_leechcore"]
            .iter()
            .any(|c| metadata.target().starts_with(c));
        ours && metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let kind = match record.level() {
            log::Level::Error => "error: ",
            log::Level::Warn => "warning: ",
            _ => "",
        };
        errln!("leechio: {kind}{}", record.args());
    }

    fn flush(&self) {}
}

/// Sends the library's log to stderr; `verbose` is the count of `-v`.
pub fn log_to_stderr(verbose: u8) {
    static LOG: StderrLog = StderrLog;
    if log::set_logger(&LOG).is_ok() {
        log::set_max_level(match verbose {
            0 => log::LevelFilter::Warn,
            1 => log::LevelFilter::Info,
            _ => log::LevelFilter::Debug,
        });
    }
}
