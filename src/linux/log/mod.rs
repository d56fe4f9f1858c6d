//! The kernel's log buffer, as `dmesg` prints it: the lockless ring
//! buffer of 5.10 on (`ring`) or the one buffer of records before it
//! (`legacy`), whichever BTF describes; every offset from BTF.
//!
//! The whole buffer is read in one batch, after the few words that say
//! where it is: two device calls with the kernel known (three when the
//! ring is neither of the kernel's two static ones). Its size is taken
//! from the kernel, and believed up to [`MAX_TEXT`] of text and
//! [`MAX_RECORDS`] records (the kernel's own largest build-time log,
//! `CONFIG_LOG_BUF_SHIFT=25`, has 32 MiB of text and 2^20 records; a
//! `log_buf_len=` at boot may ask for more, which is then refused, and
//! said) and no more bytes than the target's memory holds.
//!
//! A record is shown only as the kernel's own reader would show it: whole
//! and committed, and where its descriptor, its text block and its
//! sequence number agree on which record it is. Any other, torn by a
//! live target or garbage, is left out and named in
//! [`KernelLog::failed`] with its reason; never shown as text.

use crate::linux::offsets::{LogLayout, RecordLayout};
use crate::linux::structures::StructureFailure;
use crate::linux::Kernel;

mod legacy;
mod ring;
#[cfg(test)]
mod tests;

pub(crate) use legacy::Symbols as LegacySymbols;

/// Most bytes of text believed.
pub const MAX_TEXT: u64 = 32 << 20;
/// Most records believed.
pub const MAX_RECORDS: u64 = 1 << 20;

/// The kernel symbols read: the ring's pointer and its two static rings
/// (5.10 on), the old buffer's variables (before).
pub(crate) const RING_SYMBOL: &str = "prb";
pub(crate) const STATIC_RINGS: [&str; 2] = ["printk_rb_static", "printk_rb_dynamic"];
pub(crate) const LEGACY_SYMBOLS: [&str; 6] = [
    "log_buf",
    "log_buf_len",
    "log_first_idx",
    "log_next_idx",
    "log_first_seq",
    "log_next_seq",
];

/// Who logged a record (`CONFIG_PRINTK_CALLER`'s `[T123]` or `[C1]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// A task, by pid.
    Task(u32),
    /// A CPU, outside any task (an interrupt).
    Cpu(u32),
}

impl std::fmt::Display for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Caller::Task(pid) => write!(f, "T{pid}"),
            Caller::Cpu(cpu) => write!(f, "C{cpu}"),
        }
    }
}

/// One record of the kernel log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// Its sequence number.
    pub seq: u64,
    /// When it was logged: nanoseconds of the kernel's local clock
    /// (`dmesg`'s time stamps), from boot.
    pub timestamp: u64,
    /// Its level (0 emergency to 7 debug).
    pub level: u8,
    /// Its syslog facility (0 for the kernel's own).
    pub facility: u8,
    /// The raw `caller_id`, when the kernel keeps one.
    pub caller_id: Option<u32>,
    /// Its text, as the kernel keeps it (no trailing newline; lines within
    /// it end in one).
    pub text: Vec<u8>,
}

impl LogRecord {
    /// Who logged it, when the kernel says.
    pub fn caller(&self) -> Option<Caller> {
        self.caller_id.map(|id| match id & 0x8000_0000 {
            0 => Caller::Task(id),
            _ => Caller::Cpu(id & 0x7fff_ffff),
        })
    }

    /// Its lines, as `dmesg` prints each with the time stamp before it.
    pub fn lines(&self) -> impl Iterator<Item = &[u8]> {
        self.text.split(|&c| c == b'\n')
    }

    /// `dmesg`'s time stamp, `[    1.234567]`.
    pub fn time_stamp(&self) -> String {
        let secs = self.timestamp / 1_000_000_000;
        let micros = self.timestamp % 1_000_000_000 / 1000;
        format!("[{secs:5}.{micros:06}]")
    }
}

/// The kernel log: its records in sequence order, and what was left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelLog {
    /// The records shown.
    pub records: Vec<LogRecord>,
    /// Each record left out (being written, torn, garbage), and what
    /// could not be read at all, with the address it concerns and why.
    pub failed: Vec<StructureFailure>,
}

impl KernelLog {
    /// A log that could not be read at all.
    fn failed(address: u64, why: impl Into<String>) -> KernelLog {
        KernelLog {
            records: Vec::new(),
            failed: vec![StructureFailure::new(address, why)],
        }
    }
}

impl Kernel {
    /// The kernel log (blocking; see [`Kernel::dmesg_async`]).
    pub fn dmesg(&self) -> KernelLog {
        self.memory().block_on(self.dmesg_async())
    }

    /// The kernel log: see the module's documentation.
    pub async fn dmesg_async(&self) -> KernelLog {
        let layout = match &self.offsets.log {
            Ok(layout) => layout,
            Err(e) => return KernelLog::failed(0, format!("the kernel log cannot be read: {e}")),
        };
        let missing = |name: &str| {
            KernelLog::failed(
                0,
                format!("kallsyms has no {name} symbol (a kernel without CONFIG_PRINTK or CONFIG_KALLSYMS_ALL?): the kernel log cannot be found"),
            )
        };
        let kmem = self.kernel_memory();
        match layout {
            LogLayout::Ring(layout) => {
                let Some(prb) = self.symbol(RING_SYMBOL) else {
                    return missing(RING_SYMBOL);
                };
                let statics: Vec<u64> = STATIC_RINGS
                    .iter()
                    .filter_map(|name| self.symbol(name))
                    .collect();
                ring::read(&kmem, layout, prb, &statics).await
            }
            LogLayout::Legacy(layout) => {
                let mut at = [0; 6];
                for (slot, name) in at.iter_mut().zip(LEGACY_SYMBOLS) {
                    match self.symbol(name) {
                        Some(address) => *slot = address,
                        None => return missing(name),
                    }
                }
                legacy::read(&kmem, layout, &LegacySymbols::from(at)).await
            }
        }
    }
}

/// A record's header fields from its bytes; `None` when they do not hold
/// them all.
fn header(layout: &RecordLayout, bytes: &[u8]) -> Option<LogRecord> {
    Some(LogRecord {
        seq: match layout.seq {
            Some(seq) => seq.read(bytes)?,
            None => 0,
        },
        timestamp: layout.ts_nsec.read(bytes)?,
        level: layout.level.read(bytes)?,
        facility: layout.facility.read(bytes)? as u8,
        caller_id: match layout.caller_id {
            Some(id) => Some(id.read(bytes)? as u32),
            None => None,
        },
        text: Vec::new(),
    })
}
