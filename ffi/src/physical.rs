//! Synchronous batches of physical reads and writes: everything in one
//! flush of the engine, so one device call for the reads.

use crate::handle::Handle;
use std::ffi::c_void;

use crate::device::leechio_device;
use crate::error::guard;
use crate::leechio_status;
use crate::ops::{
    leechio_fragment_fn, leechio_read_op, leechio_write_op, op_array, read_buffers, report,
    write_data,
};

/// Reads every op of `ops` (`count` of them) from physical memory in one
/// batch: one device call, however many ops and pages (the device's own
/// per-call limit aside), straight into the ops' buffers. Ops may have any
/// address and length; their buffers must not overlap.
///
/// When the batch is done, `on_fragment` (if not NULL) is called for each
/// fragment of each op, in order: runs that were read (`LEECHIO_OK`) and
/// runs that failed, with the reason. Failed bytes are left untouched.
///
/// Returns `LEECHIO_OK` when every byte was read, `LEECHIO_INCOMPLETE` when
/// some failed (the fragments say which), or an argument error before any
/// I/O (`LEECHIO_NULL_ARGUMENT`, `LEECHIO_INVALID_ARGUMENT`).
///
/// NULL: `on_fragment` may be NULL (no fragments are reported), `ops`
/// when `count` is 0, an op's `buffer` when its `length` is 0, and
/// `context` always (it is only passed on); `device` may not
/// (`LEECHIO_NULL_ARGUMENT`).
///
/// # Safety
/// `device` must be a live handle; `ops` readable for `count` elements,
/// each non-NULL buffer writable for `length` bytes; `on_fragment` safe
/// to call with `context`.
#[no_mangle]
pub unsafe extern "C" fn leechio_read(
    device: *const leechio_device,
    ops: *const leechio_read_op,
    count: usize,
    on_fragment: leechio_fragment_fn,
    context: *mut c_void,
) -> leechio_status {
    guard("leechio_read", || {
        // SAFETY: the caller's contract on every pointer.
        let (d, ops) = unsafe { (leechio_device::lend(device)?, op_array(ops, count, "ops")?) };
        // SAFETY: as above; the buffers are used only during this call.
        let buffers = unsafe { read_buffers(ops)? };
        let outcome = d.mem.read_now(buffers);
        // SAFETY: the caller vouches for the callback.
        unsafe {
            report(
                ops.iter().map(|op| op.length),
                |i| outcome.failures(i).copied().collect(),
                on_fragment,
                context,
            )
        }
    })
}

/// Writes every op of `ops` to physical memory in one batch, reporting
/// fragments like `leechio_read`. Only the given bytes change: pieces the
/// device cannot write as they are (short or unaligned) are read, patched
/// and written back in the same batch. On a read-only device every byte
/// fails: with `LEECHIO_READ_ONLY`, or, past the device's end, with the
/// reason it could not be written anyway (`LEECHIO_OUT_OF_RANGE`,
/// `LEECHIO_ADDRESS_OVERFLOW`).
///
/// Ops may overlap: they land in the order given, so where two ops write
/// the same byte, memory holds the later op's byte afterwards (such a
/// batch may take more than one device call).
///
/// NULL: as for `leechio_read`, with `data` for `buffer`.
///
/// # Safety
/// As for `leechio_read`, with each non-NULL `data` readable for `length`
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn leechio_write(
    device: *const leechio_device,
    ops: *const leechio_write_op,
    count: usize,
    on_fragment: leechio_fragment_fn,
    context: *mut c_void,
) -> leechio_status {
    guard("leechio_write", || {
        // SAFETY: the caller's contract on every pointer.
        let (d, ops) = unsafe { (leechio_device::lend(device)?, op_array(ops, count, "ops")?) };
        // SAFETY: as above.
        let data = unsafe { write_data(ops)? };
        let outcome = d.mem.write_now(data);
        // SAFETY: the caller vouches for the callback.
        unsafe {
            report(
                ops.iter().map(|op| op.length),
                |i| outcome.failures(i).copied().collect(),
                on_fragment,
                context,
            )
        }
    })
}
