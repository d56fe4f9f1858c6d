//! A Linux target's kernel log, found with no profile: `leechio dmesg`,
//! as `dmesg` prints it.

use std::process::ExitCode;

use leechio::linux::{KernelLog, LogRecord};
use serde_json::json;

use crate::device::open;
use crate::output::escape;
use crate::processes::KernelArgs;
use crate::{Cli, Failure};

/// `leechio dmesg`.
#[derive(clap::Args, Debug)]
pub struct DmesgArgs {
    #[command(flatten)]
    kernel: KernelArgs,
}

/// Prints the log: each line of each record after the record's time
/// stamp, `[%5u.%06u] text`, as `dmesg` does; or one JSON object a
/// record. Records left out go to stderr, and the exit code is then 1.
pub fn dmesg(cli: &Cli, args: &DmesgArgs) -> Result<ExitCode, Failure> {
    let mem = open(cli)?;
    let kernel = args.kernel.find(&mem)?;
    let log = kernel.dmesg();
    for r in &log.records {
        match cli.json {
            true => outln!("{}", record_json(r)),
            false => {
                let stamp = r.time_stamp();
                for line in r.lines() {
                    outln!(
                        "{stamp} {}",
                        escape_but_tabs(&String::from_utf8_lossy(line))
                    );
                }
            }
        }
    }
    report_failures(&log);
    Ok(match log.failed.is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}

/// A line of the log made safe for a terminal as `escape` does, its
/// tabs kept: the kernel indents lines with them, and `dmesg` prints them
/// (a tab moves to the next stop, and can hide or forge nothing).
fn escape_but_tabs(line: &str) -> String {
    line.split('\t')
        .map(|part| escape(part))
        .collect::<Vec<_>>()
        .join("\t")
}

/// The JSON line of a record: its text whole, lines and all.
fn record_json(r: &LogRecord) -> serde_json::Value {
    json!({
        "seq": r.seq,
        "time": r.timestamp as f64 / 1e9,
        "time_ns": r.timestamp,
        "level": r.level,
        "facility": r.facility,
        "caller": r.caller().map(|c| c.to_string()),
        "text": String::from_utf8_lossy(&r.text),
    })
}

fn report_failures(log: &KernelLog) {
    for f in &log.failed {
        errln!("leechio: dmesg: {}", escape(&f.to_string()));
    }
    if !log.failed.is_empty() {
        errln!(
            "leechio: {} record(s) or structure(s) could not be read; {} records shown",
            log.failed.len(),
            log.records.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tabs_stay_and_other_controls_are_escaped() {
        assert_eq!(escape_but_tabs("rcu: \tRCU x"), "rcu: \tRCU x");
        assert_eq!(escape_but_tabs("a\t\u{1b}[2J\\"), "a\t\\u{1b}[2J\\\\");
    }
}
