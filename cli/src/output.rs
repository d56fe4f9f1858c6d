//! Printing when stdout or stderr may be a pipe whose reader has gone
//! (`leechio read 0 1g | head`), and text from the target made safe for a
//! terminal ([`escape`]).
//!
//! Rust ignores SIGPIPE, so such a write fails with `EPIPE`, and `println!`
//! and `eprintln!` panic on it; a panic message written to a closed stderr
//! panics again, which aborts. The macros here end the program the way
//! SIGPIPE ends other Unix tools instead: quietly. SIGPIPE is not restored
//! for the whole program because LeechCore's sockets (QMP, rawtcp, remote
//! agents) must keep seeing `EPIPE` as an error rather than be killed.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{self, Write};

/// Whether `c` may change what a terminal or viewer shows beyond itself:
/// a control character (C0, DEL, C1: cursor moves, erases, line breaks),
/// a bidirectional formatting character (which reorders the text around
/// it), or a line or paragraph separator.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{2028}'
                | '\u{2029}'
        )
}

/// Text from the target (a process's name, arguments, a path, a message
/// that quotes them) as it may reach a terminal: `\t`, `\n` and `\r` as
/// those two characters, every other unsafe character as `\u{HEX}`, and
/// a backslash doubled, so that an escape cannot be forged either. The
/// one place the command line escapes such text; JSON output escapes by
/// itself.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c == '\\' || is_unsafe(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if is_unsafe(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

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
        let message = record.args().to_string();
        errln!("leechio: {kind}{}", escape(&message));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_that_could_move_or_reorder_a_terminal_is_escaped() {
        assert!(matches!(escape("sleep 1 ünï ✓"), Cow::Borrowed(_)));
        assert_eq!(
            escape("\u{1b}[1A\u{1b}[2K\n31337"),
            "\\u{1b}[1A\\u{1b}[2K\\n31337"
        );
        assert_eq!(escape("a\tb\rc\0d\u{7f}"), "a\\tb\\rc\\u{0}d\\u{7f}");
        // C1: a CSI on its own, and NEL.
        assert_eq!(escape("x\u{9b}2Jy\u{85}"), "x\\u{9b}2Jy\\u{85}");
        // Right-to-left override and isolate, a line separator.
        assert_eq!(
            escape("exe.\u{202e}gpj\u{2067}\u{2028}"),
            "exe.\\u{202e}gpj\\u{2067}\\u{2028}"
        );
        // A backslash is doubled: no name can pass for an escape.
        assert_eq!(escape("a\\u{1b}"), "a\\\\u{1b}");
        // What was not UTF-8 arrives as U+FFFD, shown as it is.
        assert_eq!(escape(&String::from_utf8_lossy(b"a\xff")), "a\u{fffd}");
    }
}
