//! Physical and virtual memory I/O over LeechCore.
//!
//! The lowest layer is [`LeechCore`]: a device opened from a LeechCore
//! device string, read and written in scatter calls with a result per entry.
//! LeechCore itself is loaded at run time (see [`leechcore_sys::Library`]).

pub mod backend;
mod error;
mod memmap;

pub use backend::leechcore::{Call, DeviceConfig, DeviceInfo, LeechCore, Verbosity, Version};
pub use backend::{EntryRules, PageError, ScatterEntry, WriteEntry};
pub use error::Error;
pub use leechcore_sys;
pub use memmap::{MemoryMap, MemoryMapError, MemoryRange};

/// The README's examples, compiled as doctests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
