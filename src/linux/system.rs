//! What the kernel says of itself: its names as `uname` shows them (the
//! first UTS namespace's, `init_uts_ns`), when it booted and how long it
//! has run (as `/proc/stat`'s `btime` and `/proc/uptime`, from the
//! timekeeper in `tk_core`), and its command line (`saved_command_line`,
//! as `/proc/cmdline`).
//!
//! Two device calls with the kernel known: the three structures and the
//! command line's pointer (and length, where the kernel keeps it) in one
//! batch, then the command line. Each field stands or falls alone.
//!
//! The clocks are the timekeeper's as of its last update (a tick, a few
//! milliseconds at most on a busy kernel; an idle one updates less
//! often): the kernel reads its clock source for the nanoseconds since,
//! which memory does not hold. They are believed only when they agree
//! with each other (the wall clock less CLOCK_MONOTONIC is exactly
//! `offs_real`, as the kernel keeps them) and with the calendar (no boot
//! before 2000, nor more than a century past the reader's clock).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::{ClockLayout, UtsLayout, UTS_FIELDS};
use crate::linux::Kernel;
use futures::join;

#[cfg(test)]
mod tests;

/// The kernel symbols read (each a kallsyms name).
pub(crate) const UTS_SYMBOL: &str = "init_uts_ns";
pub(crate) const CLOCK_SYMBOL: &str = "tk_core";
pub(crate) const CMDLINE_SYMBOL: &str = "saved_command_line";
/// Its length (an `unsigned int`), in kernels that keep it.
pub(crate) const CMDLINE_LEN_SYMBOL: &str = "saved_command_line_len";

/// Longest command line read: x86's `COMMAND_LINE_SIZE` is 2048, and a
/// boot configuration (`bootconfig`, at most 32 KiB) adds to it.
const MAX_COMMAND_LINE: u64 = 64 << 10;
/// Read when the kernel does not say the command line's length.
const COMMAND_LINE_SIZE: u64 = 2048;
const PAGE: u64 = 0x1000;
const NS: i128 = 1_000_000_000;
/// 2000-01-01 00:00:00 UTC: no kernel booted before.
const EARLIEST: i128 = 946_684_800 * NS;
/// A century, in nanoseconds (of 365.25 days).
const CENTURY: i128 = 3_155_760_000 * NS;
/// Reads of the timekeeper, when a writer is caught updating it.
const CLOCK_TRIES: usize = 3;

/// The kernel's names, as `uname` shows them: each a field of `struct
/// new_utsname`, up to its NUL (decoded lossily), or why it could not be
/// read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uname {
    /// `uname -s`: "Linux".
    pub sysname: Result<String, String>,
    /// `uname -n`: the host name.
    pub nodename: Result<String, String>,
    /// `uname -r`: the release, e.g. `6.1.0-56-amd64`.
    pub release: Result<String, String>,
    /// `uname -v`: the build's version string.
    pub version: Result<String, String>,
    /// `uname -m`: the machine, `x86_64`.
    pub machine: Result<String, String>,
    /// The NIS domain name (`/proc/sys/kernel/domainname`).
    pub domainname: Result<String, String>,
}

/// What the kernel says of itself. Each field is its own result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct System {
    /// Its names.
    pub uname: Uname,
    /// When it booted, since the Unix epoch (`/proc/stat`'s `btime` is
    /// its seconds): the wall clock less CLOCK_BOOTTIME.
    pub boot_time: Result<Duration, String>,
    /// CLOCK_BOOTTIME (what `/proc/uptime` shows first) at the
    /// timekeeper's last update.
    pub uptime: Result<Duration, String>,
    /// The wall clock at the timekeeper's last update, since the Unix
    /// epoch: when a memory image was taken, near enough.
    pub clock: Result<Duration, String>,
    /// Its command line (`/proc/cmdline`), decoded lossily.
    pub command_line: Result<String, String>,
}

impl Kernel {
    /// What the kernel says of itself (blocking; see
    /// [`Kernel::system_async`]).
    pub fn system(&self) -> System {
        self.memory().block_on(self.system_async())
    }

    /// What the kernel says of itself: see the module's documentation.
    pub async fn system_async(&self) -> System {
        let symbol = |name: &str| {
            self.symbol(name).ok_or_else(|| {
                format!("kallsyms has no {name} symbol (a kernel without CONFIG_KALLSYMS_ALL?)")
            })
        };
        let uts = match (&self.offsets.uts, symbol(UTS_SYMBOL)) {
            (Ok(layout), Ok(at)) => Ok((*layout, at)),
            (Err(e), _) => Err(format!("the kernel's names cannot be read: {e}")),
            (_, Err(e)) => Err(e),
        };
        let clock = match (&self.offsets.clock, symbol(CLOCK_SYMBOL)) {
            (Ok(layout), Ok(at)) => Ok((*layout, at)),
            (Err(e), _) => Err(format!("the timekeeper cannot be read: {e}")),
            (_, Err(e)) => Err(e),
        };
        let command_line = symbol(CMDLINE_SYMBOL).map(|at| (at, self.symbol(CMDLINE_LEN_SYMBOL)));
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        read(&self.kernel_memory(), uts, clock, command_line, now).await
    }
}

/// Reads the names at `uts`, the clocks at `clock` and the command line
/// whose pointer (and length) are at `command_line`, believing no time
/// past a century after `now` (nanoseconds since the epoch).
pub(crate) async fn read(
    kmem: &KernelMemory<'_>,
    uts: Result<(UtsLayout, u64), String>,
    clock: Result<(ClockLayout, u64), String>,
    command_line: Result<(u64, Option<u64>), String>,
    now: i128,
) -> System {
    let names = async {
        let (layout, at) = uts?;
        let (start, len) = layout.span();
        let bytes = kmem.read_vec(at.wrapping_add(start), len as usize).await?;
        Ok::<_, String>((layout, start, bytes))
    };
    let first_clock = async {
        let (layout, at) = clock.as_ref().map_err(Clone::clone)?;
        kmem.read_vec(*at, layout.len() as usize).await
    };
    let pointer = async {
        let (at, len_at) = command_line.as_ref().map_err(Clone::clone)?;
        let pointer = async { kmem.read_vec(*at, 8).await.map(|b| b.u64_at(0)) };
        let len = async {
            match len_at {
                Some(at) => kmem.read_vec(*at, 4).await.ok().and_then(|b| b.u32_at(0)),
                None => None,
            }
        };
        let (pointer, len) = join!(pointer, len);
        Ok::<_, String>((pointer?.unwrap_or(0), len))
    };
    let (names, first_clock, pointer) = join!(names, first_clock, pointer);
    let uname = uname(names);
    // The command line, and the timekeeper again should a writer have
    // been caught updating it: in the same batch.
    let line = async {
        let (pointer, len) = pointer?;
        command_line_at(kmem, pointer, len).await
    };
    let clocks = async {
        let (layout, at) = clock?;
        let mut bytes = first_clock?;
        let mut result = read_clocks(&layout, &bytes, now);
        for _ in 1..CLOCK_TRIES {
            if !matches!(result, Err(ClockFailure::Torn(_))) {
                break;
            }
            bytes = kmem.read_vec(at, layout.len() as usize).await?;
            result = read_clocks(&layout, &bytes, now);
        }
        result.map_err(|e| e.to_string())
    };
    let (command_line, clocks) = join!(line, clocks);
    let (boot_time, uptime, clock) = match clocks {
        Ok(c) => (c.boot_time, c.uptime, c.clock),
        Err(e) => (Err(e.clone()), Err(e.clone()), Err(e)),
    };
    System {
        uname,
        boot_time,
        uptime,
        clock,
        command_line,
    }
}

/// The names from `init_uts_ns`'s bytes (from `start` on).
fn uname(read: Result<(UtsLayout, u64, Vec<u8>), String>) -> Uname {
    let field = |i: usize| {
        let (layout, start, bytes) = read.as_ref().map_err(Clone::clone)?;
        let (at, len) = layout.fields[i];
        let field = bytes
            .bytes_at(at - start, len)
            .ok_or_else(|| format!("new_utsname.{} lies outside what was read", UTS_FIELDS[i]))?;
        let end = field.iter().position(|&c| c == 0).ok_or_else(|| {
            format!(
                "new_utsname.{} has no NUL in its {len} bytes: not a name",
                UTS_FIELDS[i]
            )
        })?;
        Ok(String::from_utf8_lossy(&field[..end]).into_owned())
    };
    Uname {
        sysname: field(0),
        nodename: field(1),
        release: field(2),
        version: field(3),
        machine: field(4),
        domainname: field(5),
    }
}

/// The command line at `pointer`, `len` bytes long if the kernel says:
/// up to its NUL, which must come within [`MAX_COMMAND_LINE`] bytes (or
/// `COMMAND_LINE_SIZE`, when the length is not known; read to the end
/// of its page first, so that no read runs past its memory for nothing).
async fn command_line_at(
    kmem: &KernelMemory<'_>,
    pointer: u64,
    len: Option<u32>,
) -> Result<String, String> {
    if pointer < kmem.kernel_half() {
        return Err(format!(
            "saved_command_line is {pointer:#x}, not a kernel address"
        ));
    }
    let (first, most) = match len {
        Some(len) if u64::from(len) < MAX_COMMAND_LINE => (u64::from(len) + 1, u64::from(len) + 1),
        Some(len) => {
            return Err(format!(
                "saved_command_line_len is {len}, over the {MAX_COMMAND_LINE} bytes a command line can have"
            ))
        }
        None => (
            (PAGE - pointer % PAGE).min(COMMAND_LINE_SIZE),
            COMMAND_LINE_SIZE,
        ),
    };
    let mut bytes = kmem.read_vec(pointer, first as usize).await?;
    if !bytes.contains(&0) && first < most {
        bytes.extend(
            kmem.read_vec(pointer + first, (most - first) as usize)
                .await?,
        );
    }
    let end = bytes.iter().position(|&c| c == 0).ok_or_else(|| {
        format!("the command line at {pointer:#x} has no end within {most} bytes")
    })?;
    Ok(String::from_utf8_lossy(&bytes[..end]).into_owned())
}

/// The clocks, each believed or not.
#[derive(Debug)]
struct Times {
    boot_time: Result<Duration, String>,
    uptime: Result<Duration, String>,
    clock: Result<Duration, String>,
}

/// Why the timekeeper as read is not believed at all.
#[derive(Debug)]
enum ClockFailure {
    /// Caught while a writer updated it: worth reading again.
    Torn(String),
    /// Not a timekeeper.
    Garbage(String),
}

impl std::fmt::Display for ClockFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClockFailure::Torn(why) | ClockFailure::Garbage(why) => f.write_str(why),
        }
    }
}

/// The clocks in `tk_core`'s bytes, checked (see the module's
/// documentation); `now` bounds the times believed.
fn read_clocks(layout: &ClockLayout, bytes: &[u8], now: i128) -> Result<Times, ClockFailure> {
    let short = || ClockFailure::Garbage("tk_core: fewer bytes than its members span".into());
    let u64_at = |at| bytes.u64_at(at).ok_or_else(short);
    let i64_at = |at| u64_at(at).map(|v| i128::from(v as i64));
    let sequence = bytes.u32_at(layout.sequence).ok_or_else(short)?;
    if sequence % 2 == 1 {
        return Err(ClockFailure::Torn(format!(
            "the timekeeper was being updated while read (sequence {sequence})"
        )));
    }
    let shift = bytes.u32_at(layout.shift).ok_or_else(short)?;
    if shift >= 64 {
        return Err(ClockFailure::Garbage(format!(
            "the timekeeper's shift is {shift}: not a timekeeper"
        )));
    }
    let nsec = i128::from(u64_at(layout.xtime_nsec)? >> shift);
    if nsec >= NS {
        return Err(ClockFailure::Garbage(format!(
            "the timekeeper holds {nsec} ns past its second: not a timekeeper"
        )));
    }
    let wall = i128::from(u64_at(layout.xtime_sec)?) * NS + nsec;
    let monotonic = i64_at(layout.mono_base)? + nsec;
    let offs_real = i64_at(layout.offs_real)?;
    let offs_boot = i64_at(layout.offs_boot)?;
    if wall - monotonic != offs_real {
        return Err(ClockFailure::Torn(format!(
            "the timekeeper's clocks disagree (the wall clock less CLOCK_MONOTONIC is {} ns, offs_real {offs_real} ns): torn while read, or not a timekeeper",
            wall - monotonic
        )));
    }
    let calendar = |what: &str, ns: i128| {
        if (EARLIEST..=now + CENTURY).contains(&ns) {
            Ok(Duration::from_nanos(ns as u64))
        } else {
            Err(format!(
                "the {what} would be {}s since 1970: before 2000 or over a century ahead, not believed",
                ns.div_euclid(NS)
            ))
        }
    };
    let boottime = monotonic + offs_boot;
    Ok(Times {
        boot_time: calendar("boot time", offs_real - offs_boot),
        uptime: match (0..CENTURY).contains(&boottime) {
            true => Ok(Duration::from_nanos(boottime as u64)),
            false => Err(format!(
                "CLOCK_BOOTTIME would be {boottime} ns: negative or over a century, not believed"
            )),
        },
        clock: calendar("wall clock", wall),
    })
}
