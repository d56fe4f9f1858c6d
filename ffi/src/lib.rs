//! The C API of leechio: `libleechio.so` / `libleechio.a`, declared in
//! `ffi/include/leechio.h` (generated from this crate by cbindgen) and
//! wrapped for C++ by `ffi/include/leechio.hpp`.
//!
//! Conventions, for every exported function:
//! - handles are opaque and come in pairs: `leechio_device_open` /
//!   `leechio_device_close`, `leechio_space_new` / `leechio_space_free`,
//!   `leechio_queue_new` / `leechio_queue_free`;
//! - functions return a `leechio_status`; on failure the thread's last
//!   error message (`leechio_last_error_message`) says what went wrong;
//! - every pointer argument is checked: NULL gives
//!   `LEECHIO_NULL_ARGUMENT`, never a crash (dangling pointers cannot be
//!   checked and are the caller's to avoid);
//! - no panic unwinds into C: one becomes `LEECHIO_PANIC`;
//! - partial results are results: a read of which some bytes failed
//!   returns `LEECHIO_INCOMPLETE` and reports every fragment, read or
//!   failed, with its reason, exactly as the Rust engine does.
//!
//! Type names follow C (`leechio_device`, `LEECHIO_OK`) because they are
//! the names C sees.
#![allow(non_camel_case_types)]
#![deny(missing_docs)]

mod device;
mod error;
mod ops;
mod physical;
mod queue;
mod space;

pub use device::{leechio_call, leechio_device, leechio_device_info, leechio_memory_range};
pub use error::leechio_status;
pub use ops::{leechio_fragment, leechio_fragment_fn, leechio_read_op, leechio_write_op};
pub use queue::{leechio_completion, leechio_completion_fn, leechio_queue};
pub use space::{
    leechio_cache_options, leechio_mapping, leechio_mapping_fn, leechio_space, leechio_translation,
};
