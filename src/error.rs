//! The crate's error type.

use crate::MemoryMapError;
use leechcore_sys::LoadError;

/// Errors of opening and configuring a device. Failures of single reads
/// and writes are not errors of this kind: they are per-entry results.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `leechcore.so` could not be found or is not LeechCore.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A setting cannot be passed to LeechCore as given.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// LeechCore refused to open the device.
    #[error("LeechCore could not open device `{device}`: {reason}")]
    Open {
        /// The device string.
        device: String,
        /// LeechCore's message, or the likely cause.
        reason: String,
    },
    /// An `LcCommand` call failed.
    #[error("LeechCore refused command {name}")]
    Command {
        /// The command's name.
        name: &'static str,
    },
    /// The device cannot do this.
    #[error("the device does not support {0}")]
    Unsupported(&'static str),
    /// A memory map was malformed.
    #[error("memory map: {0}")]
    MemoryMap(#[from] MemoryMapError),
}

/// `text` with its control characters escaped (`\r`, `\u{1b}`): for
/// quoting what a user gave in an error, which then stays one line and
/// cannot drive a terminal.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}
