//! The C API of leechio: `libleechio.so` / `libleechio.a`, declared in
//! `ffi/include/leechio.h` (generated from this crate by cbindgen) and
//! wrapped for C++ by `ffi/include/leechio.hpp`.
//!
//! Conventions, for every exported function:
//! - handles are opaque and come in pairs: `leechio_device_open` /
//!   `leechio_device_close`, `leechio_space_new` / `leechio_space_free`,
//!   `leechio_queue_new` / `leechio_queue_free`, `leechio_kernel_find` /
//!   `leechio_kernel_free`;
//! - functions return a `leechio_status`; on failure the thread's last
//!   error message (`leechio_last_error_message`) says what went wrong;
//! - each function says which pointer arguments may be NULL (and what NULL
//!   means there); any other one that is NULL gives
//!   `LEECHIO_NULL_ARGUMENT`, never a crash (dangling pointers cannot be
//!   checked and are the caller's to avoid);
//! - callbacks run on the calling thread, before the call returns, and may
//!   call any function of the library, on the same handles too, except
//!   closing or freeing the handle the running call was given (and a
//!   queue's own rules, see `leechio_completion_fn`); when the running call
//!   fails, its message replaces any their calls left;
//! - no panic unwinds into C: one becomes `LEECHIO_PANIC`;
//! - partial results are results: a read of which some bytes failed
//!   returns `LEECHIO_INCOMPLETE` and reports every fragment, read or
//!   failed, with its reason, exactly as the Rust engine does.
//!
//! Type names follow C (`leechio_device`, `LEECHIO_OK`) because they are
//! the names C sees.
#![allow(non_camel_case_types)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![deny(missing_docs)]

mod device;
mod error;
mod handle;
mod modules;
mod ops;
mod physical;
mod processes;
mod queue;
mod space;

pub use device::{leechio_call, leechio_device, leechio_device_info, leechio_memory_range};
pub use error::leechio_status;
pub use modules::{leechio_module, leechio_module_fn};
pub use ops::{leechio_fragment, leechio_fragment_fn, leechio_read_op, leechio_write_op};
pub use processes::{leechio_kernel, leechio_kernel_hints, leechio_process, leechio_process_fn};
pub use queue::{leechio_completion, leechio_completion_fn, leechio_queue};
pub use space::mappings::{leechio_mapping, leechio_mapping_fn};
pub use space::translate::{
    leechio_translation, LEECHIO_LEVELS, LEECHIO_LEVEL_PDE, LEECHIO_LEVEL_PDPTE,
    LEECHIO_LEVEL_PML4E, LEECHIO_LEVEL_PML5E, LEECHIO_LEVEL_PTE,
};
pub use space::{leechio_cache_options, leechio_space, LEECHIO_PAGING_DETECT};

#[cfg(test)]
mod tests {
    use super::*;

    /// Asserts that the fields of `$t`, all of which must be listed (the
    /// destructuring fails to compile otherwise), fill its every byte: no
    /// padding whose bytes C would see undefined.
    macro_rules! assert_no_padding {
        ($t:ident { $($field:ident),* $(,)? }) => {{
            // SAFETY: all zero bytes are a valid value of every field type
            // of the C API's structs (integers, bools, raw pointers, NULL
            // function pointers, and LEECHIO_OK = 0).
            let value: $t = unsafe { std::mem::zeroed() };
            let $t { $($field),* } = value;
            let fields = 0 $(+ std::mem::size_of_val(&$field))*;
            assert_eq!(
                std::mem::size_of::<$t>(),
                fields,
                "{} has {} bytes of padding",
                stringify!($t),
                std::mem::size_of::<$t>() - fields
            );
        }};
    }

    #[test]
    fn every_struct_of_the_api_is_its_fields_alone() {
        assert_no_padding!(leechio_device_info {
            max_address,
            leechcore_major,
            leechcore_minor,
            leechcore_revision,
            read_only,
            is_volatile,
            remote,
            padding,
        });
        assert_no_padding!(leechio_memory_range { start, size, remap });
        assert_no_padding!(leechio_read_op {
            address,
            buffer,
            length
        });
        assert_no_padding!(leechio_write_op {
            address,
            data,
            length
        });
        assert_no_padding!(leechio_fragment {
            op,
            offset,
            length,
            status,
            padding,
        });
        assert_no_padding!(leechio_completion {
            address,
            buffer,
            length,
            status,
            padding,
            fragments,
            fragment_count,
        });
        assert_no_padding!(leechio_cache_options {
            translation_ms,
            page_table_ms
        });
        assert_no_padding!(leechio_translation {
            va,
            status,
            paging_levels,
            pa,
            page_size,
            entries,
            entry_count,
            failed_level,
        });
        assert_no_padding!(leechio_kernel_hints {
            dtb,
            kernel_base,
            btf_file,
            levels,
            no_cache,
            padding,
        });
        assert_no_padding!(leechio_process {
            pid,
            ppid,
            tgid,
            thread_count,
            dtb,
            task,
            mm,
            name,
            cmdline,
            args,
            args_length,
            state,
            kernel_thread,
            padding,
        });
        assert_no_padding!(leechio_mapping {
            va,
            pa,
            size,
            page_size,
            same_as,
            status,
            access,
        });
    }
}
