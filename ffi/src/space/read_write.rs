//! Virtual reads and writes: every op of a call in one batch, reported in
//! fragments as physical ones are.

use std::ffi::c_void;

use leechio_rs::join_all;

use super::leechio_space;
use crate::error::guard;
use crate::handle::Handle;
use crate::leechio_status;
use crate::ops::{
    failures, leechio_fragment_fn, leechio_read_op, leechio_write_op, op_array, read_buffers,
    report, write_data,
};

/// Reads every op of `ops` from virtual memory in one batch, reporting
/// fragments like `leechio_read`: pages that are unmapped, non-canonical,
/// or whose tables or data cannot be read fail; the rest is read.
///
/// NULL: as for `leechio_read`, with `space` for `device`.
///
/// # Safety
/// As for `leechio_read`, with `space` instead of `device`.
#[no_mangle]
pub unsafe extern "C" fn leechio_space_read(
    space: *const leechio_space,
    ops: *const leechio_read_op,
    count: usize,
    on_fragment: leechio_fragment_fn,
    context: *mut c_void,
) -> leechio_status {
    guard("leechio_space_read", || {
        // SAFETY: the caller's contract on every pointer.
        let (s, ops) = unsafe { (leechio_space::lend(space)?, op_array(ops, count, "ops")?) };
        // SAFETY: as above; the buffers are used only during this call.
        let buffers = unsafe { read_buffers(ops)? };
        let (space, mem) = (&s.space, s.space.memory());
        // In a scope, the device fills the caller's buffers in place.
        let results = mem.scope(|scope| {
            let reads = buffers.into_iter();
            mem.block_on(join_all(
                reads.map(|(va, buf)| space.read_scoped(scope, va, buf)),
            ))
        });
        // SAFETY: the caller vouches for the callback.
        unsafe {
            report(
                ops.iter().map(|op| op.length),
                |i| failures(&results[i]).to_vec(),
                on_fragment,
                context,
            )
        }
    })
}

/// Writes every op of `ops` to virtual memory in one batch, reporting
/// fragments like `leechio_write`.
///
/// Ops may overlap, as for `leechio_write`: they land in the order given.
///
/// NULL: as for `leechio_write`, with `space` for `device`.
///
/// # Safety
/// As for `leechio_write`, with `space` instead of `device`.
#[no_mangle]
pub unsafe extern "C" fn leechio_space_write(
    space: *const leechio_space,
    ops: *const leechio_write_op,
    count: usize,
    on_fragment: leechio_fragment_fn,
    context: *mut c_void,
) -> leechio_status {
    guard("leechio_space_write", || {
        // SAFETY: the caller's contract on every pointer.
        let (s, ops) = unsafe { (leechio_space::lend(space)?, op_array(ops, count, "ops")?) };
        // SAFETY: as above.
        let data = unsafe { write_data(ops)? };
        let (space, mem) = (&s.space, s.space.memory());
        // In a scope, the device takes the caller's bytes in place.
        // (Translated first, then written in op order: two ops that write
        // the same bytes land in the order given.)
        let results = mem.scope(|scope| mem.block_on(space.write_all_scoped(scope, &data)));
        // SAFETY: the caller vouches for the callback.
        unsafe {
            report(
                ops.iter().map(|op| op.length),
                |i| failures(&results[i]).to_vec(),
                on_fragment,
                context,
            )
        }
    })
}
