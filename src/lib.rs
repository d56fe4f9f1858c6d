//! Physical and virtual memory I/O over LeechCore.
//!
//! - [`Memory`] is the engine: every read and write is a future, and
//!   everything waiting at the same moment goes to the device in one
//!   scatter call. Partial failures come back as exact byte ranges.
//! - [`Backend`] is what the engine talks to: [`LeechCore`] (a device
//!   opened from a LeechCore device string, loaded at run time) or
//!   [`MemBackend`] (a byte vector, for tests and examples).

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod backend;
pub mod engine;
mod error;
pub mod linux;
mod lock;
#[cfg(feature = "memflow")]
pub mod memflow;
mod memmap;
pub mod user_file;
pub mod vm;

pub use backend::leechcore::{Call, DeviceConfig, DeviceInfo, LeechCore, Verbosity, Version};
pub use backend::memory::MemBackend;
pub use backend::{Backend, EntryRule, Limits, PageError, ScatterEntry, WriteEntry};
pub use engine::{
    join_all, BatchOutcome, EngineConfig, Failure, Fragment, Memory, PartialError, Scope,
};
pub use error::{printable, Error};
pub use leechcore_sys;
pub use memmap::{MemoryMap, MemoryMapError, MemoryRange};
pub use vm::{
    Access, AddressSpace, Alias, FailedRange, Mapping, Mappings, PageSize, Paging, Translation,
    VmConfig, WalkError,
};

/// The README's examples, compiled as doctests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The examples of docs/rust.md (the engine from Rust), as doctests.
#[doc = include_str!("../docs/rust.md")]
#[cfg(doctest)]
pub struct RustDocDoctests;

/// The examples of docs/plugin.md (the memflow plugins), as doctests.
#[doc = include_str!("../docs/plugin.md")]
#[cfg(doctest)]
pub struct PluginDocDoctests;
