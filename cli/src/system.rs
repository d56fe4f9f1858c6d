//! What a Linux target's kernel says of itself, found with no profile:
//! `leechio system`, its names as `uname -a` shows them, its boot time
//! and uptime, its clock and its command line.

use std::process::ExitCode;
use std::time::Duration;

use leechio::linux::System;
use serde_json::{json, Map, Value};

use crate::device::open;
use crate::output::escape;
use crate::processes::KernelArgs;
use crate::{Cli, Failure};

/// `leechio system`.
#[derive(clap::Args, Debug)]
pub struct SystemArgs {
    #[command(flatten)]
    kernel: KernelArgs,
}

/// A field: its name in the table and in JSON, its value as text and as
/// JSON, or why it is unknown.
struct Field {
    label: &'static str,
    key: &'static str,
    value: Result<(String, Value), String>,
}

/// Prints the fields as `Key  value` lines, or one JSON object; an
/// unknown field says "unknown" there (null in JSON, its reason under
/// `errors`), and its reason goes to stderr, with exit code 1.
pub fn system(cli: &Cli, args: &SystemArgs) -> Result<ExitCode, Failure> {
    let mem = open(cli)?;
    let kernel = args.kernel.find(&mem)?;
    let fields = fields(&kernel.system());
    match cli.json {
        true => {
            let mut object = Map::new();
            let mut errors = Map::new();
            for f in &fields {
                match &f.value {
                    Ok((_, v)) => object.insert(f.key.into(), v.clone()),
                    Err(why) => {
                        errors.insert(f.key.into(), Value::from(why.as_str()));
                        object.insert(f.key.into(), Value::Null)
                    }
                };
            }
            object.insert("errors".into(), Value::Object(errors));
            outln!("{}", Value::Object(object));
        }
        false => {
            for f in &fields {
                let value = match &f.value {
                    Ok((text, _)) => escape(text).into_owned(),
                    Err(_) => "unknown".into(),
                };
                outln!("{:<12} {value}", f.label);
            }
        }
    }
    let mut failed = false;
    for f in &fields {
        if let Err(why) = &f.value {
            errln!("leechio: system: {}: {}", f.key, escape(why));
            failed = true;
        }
    }
    Ok(match failed {
        false => ExitCode::SUCCESS,
        true => ExitCode::FAILURE,
    })
}

/// Every field, in the table's order.
fn fields(s: &System) -> Vec<Field> {
    let name = |label, key, value: &Result<String, String>| Field {
        label,
        key,
        value: value.clone().map(|v| (v.clone(), Value::from(v))),
    };
    let u = &s.uname;
    vec![
        name("Sysname", "sysname", &u.sysname),
        name("Nodename", "nodename", &u.nodename),
        name("Release", "release", &u.release),
        name("Version", "version", &u.version),
        name("Machine", "machine", &u.machine),
        name("Domainname", "domainname", &u.domainname),
        Field {
            label: "Boot time",
            key: "boot_time",
            value: s.boot_time.clone().map(|t| {
                let secs = t.as_secs();
                (format!("{secs} ({})", utc(t)), json!(secs))
            }),
        },
        Field {
            label: "Uptime",
            key: "uptime",
            value: s.uptime.clone().map(|t| {
                (
                    format!("{:.2} s ({})", t.as_secs_f64(), span(t)),
                    json!(t.as_secs_f64()),
                )
            }),
        },
        Field {
            label: "Clock",
            key: "clock",
            value: s.clock.clone().map(|t| {
                (
                    format!(
                        "{:.2} ({}), at the kernel's last timer tick",
                        t.as_secs_f64(),
                        utc(t)
                    ),
                    json!(t.as_secs_f64()),
                )
            }),
        },
        name("Cmdline", "command_line", &s.command_line),
    ]
}

/// `t` since the epoch as a UTC date and time.
fn utc(t: Duration) -> String {
    i64::try_from(t.as_secs())
        .ok()
        .and_then(|secs| chrono::DateTime::from_timestamp(secs, 0))
        .map_or_else(
            || "a date past the calendar".into(),
            |d| d.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        )
}

/// `t` as days, hours, minutes and seconds.
fn span(t: Duration) -> String {
    let s = t.as_secs();
    format!(
        "{}d {:02}:{:02}:{:02}",
        s / 86_400,
        s / 3600 % 24,
        s / 60 % 60,
        s % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_dates_and_spans() {
        assert_eq!(
            utc(Duration::from_secs(1_700_000_000)),
            "2023-11-14 22:13:20 UTC"
        );
        assert_eq!(span(Duration::from_secs(90_061)), "1d 01:01:01");
    }
}
