//! Batches of reads and writes as C passes them, and results as C gets
//! them: per-fragment callbacks covering every byte of every operation.

use std::ffi::c_void;

use leechio_rs::{Failure, PartialError};

use crate::error::{non_null, Fail};
use crate::leechio_status::{self, *};

/// One read of a batch: `length` bytes at `address` into `buffer`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct leechio_read_op {
    /// Physical or virtual address, depending on the call.
    pub address: u64,
    /// Where the bytes go. Bytes that fail are left untouched. May be NULL
    /// only when `length` is 0.
    pub buffer: *mut u8,
    /// Number of bytes.
    pub length: usize,
}

/// One write of a batch: `length` bytes from `data` to `address`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct leechio_write_op {
    /// Physical or virtual address, depending on the call.
    pub address: u64,
    /// The bytes to write. May be NULL only when `length` is 0.
    pub data: *const u8,
    /// Number of bytes.
    pub length: usize,
}

/// A run of bytes of one operation that succeeded or failed as a whole.
///
/// The fragments of an operation are reported in order of `offset`; they
/// are disjoint and together cover the operation exactly. A successful run
/// is as long as possible; two adjacent failed runs have different reasons.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct leechio_fragment {
    /// Index of the operation in the batch (0 for a queued read).
    pub op: usize,
    /// Offset of the run in the operation.
    pub offset: usize,
    /// Length of the run.
    pub length: usize,
    /// `LEECHIO_OK`, or why these bytes failed (a code from 100 on).
    pub status: leechio_status,
    /// Always 0: explicit padding, so that every byte of the struct is
    /// defined (it may be compared with `memcmp` or hashed).
    pub padding: u32,
}

/// Called once per fragment of a batch, after the whole batch is done, in
/// order of operation then offset. `fragment` is valid only during the call.
///
/// It runs on the thread that made the call, before the call returns, and
/// may call any function of this library, on the same handles too, except
/// closing or freeing the handle the running call was given. When the
/// running call fails, its message replaces any that calls made from the
/// callback left for `leechio_last_error_message`.
pub type leechio_fragment_fn =
    Option<unsafe extern "C" fn(context: *mut c_void, fragment: *const leechio_fragment)>;

/// Largest length of a Rust slice; longer C lengths are refused.
const MAX_LEN: usize = isize::MAX as usize;

/// The C array `ops` of `count` elements as a slice (empty when `count` is 0,
/// whatever `ops` is); `name` is the parameter's name, for the message.
///
/// # Safety
/// `ops` must be NULL or valid for `count` elements.
pub(crate) unsafe fn op_array<'a, T>(
    ops: *const T,
    count: usize,
    name: &str,
) -> Result<&'a [T], Fail> {
    if count == 0 {
        return Ok(&[]);
    }
    non_null(ops, name)?;
    // SAFETY: non-NULL, valid for `count` elements (the caller's contract).
    Ok(unsafe { std::slice::from_raw_parts(ops, count) })
}

fn check_op(i: usize, ptr_null: bool, length: usize, what: &str) -> Result<(), Fail> {
    if length > MAX_LEN {
        return Err(Fail::new(
            LEECHIO_INVALID_ARGUMENT,
            format!("op {i}: length {length:#x} is too large"),
        ));
    }
    if ptr_null && length > 0 {
        return Err(Fail::new(
            LEECHIO_NULL_ARGUMENT,
            format!("op {i}: `{what}` is NULL with length {length}"),
        ));
    }
    Ok(())
}

/// The destination buffers of read ops as disjoint mutable slices. Buffers
/// that overlap are refused: one byte cannot receive two reads, and Rust
/// may not hold two mutable views of it.
///
/// # Safety
/// Each op's buffer must be valid for writes of `length` bytes, and stay
/// unused by anything else for the returned lifetime.
pub(crate) unsafe fn read_buffers<'a>(
    ops: &[leechio_read_op],
) -> Result<Vec<(u64, &'a mut [u8])>, Fail> {
    let mut spans: Vec<(usize, usize, usize)> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        check_op(i, op.buffer.is_null(), op.length, "buffer")?;
        if op.length > 0 {
            let start = op.buffer as usize;
            spans.push((start, start.saturating_add(op.length), i));
        }
    }
    spans.sort_unstable();
    for pair in spans.windows(2) {
        if pair[1].0 < pair[0].1 {
            return Err(Fail::new(
                LEECHIO_INVALID_ARGUMENT,
                format!(
                    "the buffers of ops {} and {} overlap",
                    pair[0].2.min(pair[1].2),
                    pair[0].2.max(pair[1].2)
                ),
            ));
        }
    }
    Ok(ops
        .iter()
        .map(|op| {
            let buf: &mut [u8] = if op.length == 0 {
                &mut []
            } else {
                // SAFETY: non-NULL (checked), valid for `length` bytes and
                // disjoint from every other op's buffer (checked above).
                unsafe { std::slice::from_raw_parts_mut(op.buffer, op.length) }
            };
            (op.address, buf)
        })
        .collect())
}

/// The source data of write ops as slices (overlap is harmless: they are
/// only read).
///
/// # Safety
/// Each op's data must be valid for reads of `length` bytes.
pub(crate) unsafe fn write_data<'a>(
    ops: &[leechio_write_op],
) -> Result<Vec<(u64, &'a [u8])>, Fail> {
    for (i, op) in ops.iter().enumerate() {
        check_op(i, op.data.is_null(), op.length, "data")?;
    }
    Ok(ops
        .iter()
        .map(|op| {
            let data: &[u8] = if op.length == 0 {
                &[]
            } else {
                // SAFETY: non-NULL (checked), valid for `length` bytes.
                unsafe { std::slice::from_raw_parts(op.data, op.length) }
            };
            (op.address, data)
        })
        .collect())
}

/// The fragments of operation `op` of `len` bytes whose failed runs are
/// `failed` (sorted, disjoint): the failures, with the gaps between them
/// as successes.
pub(crate) fn fragments(op: usize, len: usize, failed: &[Failure]) -> Vec<leechio_fragment> {
    let mut out = Vec::with_capacity(2 * failed.len() + 1);
    let mut at = 0;
    let piece = |offset, length, status| leechio_fragment {
        op,
        offset,
        length,
        status,
        padding: 0,
    };
    for f in failed {
        if f.offset > at {
            out.push(piece(at, f.offset - at, LEECHIO_OK));
        }
        out.push(piece(
            f.offset,
            f.len,
            leechio_status::from_page_error(f.reason),
        ));
        at = f.offset + f.len;
    }
    if at < len {
        out.push(piece(at, len - at, LEECHIO_OK));
    }
    out
}

/// The failed runs of a result (none when it succeeded).
pub(crate) fn failures(result: &Result<(), PartialError>) -> &[Failure] {
    match result {
        Ok(()) => &[],
        Err(e) => &e.failed,
    }
}

/// Hands the fragments of every operation to the callback, and says
/// whether all succeeded: `Ok` or a `LEECHIO_INCOMPLETE` failure naming
/// the first failed range.
///
/// # Safety
/// `callback` must be safe to call with `context`.
pub(crate) unsafe fn report(
    lengths: impl Iterator<Item = usize>,
    failed_of: impl Fn(usize) -> Vec<Failure>,
    callback: leechio_fragment_fn,
    context: *mut c_void,
) -> Result<(), Fail> {
    let mut first_failure: Option<(usize, Failure)> = None;
    let mut failed_ops = 0usize;
    for (i, len) in lengths.enumerate() {
        let failed = failed_of(i);
        if let Some(f) = failed.first() {
            failed_ops += 1;
            first_failure.get_or_insert((i, *f));
        }
        if let Some(cb) = callback {
            for fragment in fragments(i, len, &failed) {
                // SAFETY: the caller vouches for the callback and context;
                // `fragment` lives across the call.
                unsafe { cb(context, &fragment) };
            }
        }
    }
    match first_failure {
        None => Ok(()),
        Some((op, f)) => Err(Fail::new(
            LEECHIO_INCOMPLETE,
            format!(
                "{failed_ops} operation(s) failed in part or whole; first: op {op} +{:#x}..+{:#x}: {}",
                f.offset,
                f.offset + f.len,
                f.reason
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leechio_rs::PageError;

    #[test]
    fn fragments_cover_the_operation_in_order() {
        let f = |offset, len, reason| Failure {
            offset,
            len,
            reason,
        };
        let failed = [
            f(8, 8, PageError::Unspecified),
            f(16, 8, PageError::OutOfRange),
            f(40, 8, PageError::OutOfRange),
        ];
        let got: Vec<_> = fragments(3, 64, &failed)
            .iter()
            .map(|f| (f.op, f.offset, f.length, f.status))
            .collect();
        assert_eq!(
            got,
            vec![
                (3, 0, 8, LEECHIO_OK),
                (3, 8, 8, LEECHIO_UNSPECIFIED),
                (3, 16, 8, LEECHIO_OUT_OF_RANGE),
                (3, 24, 16, LEECHIO_OK),
                (3, 40, 8, LEECHIO_OUT_OF_RANGE),
                (3, 48, 16, LEECHIO_OK),
            ]
        );
        assert!(fragments(0, 0, &[]).is_empty());
        assert_eq!(fragments(0, 5, &[]).len(), 1);
    }

    #[test]
    fn overlapping_read_buffers_are_refused() {
        let mut buf = [0u8; 32];
        let p = buf.as_mut_ptr();
        let op = |address, buffer, length| leechio_read_op {
            address,
            buffer,
            length,
        };
        // SAFETY: every pointer is inside `buf`.
        unsafe {
            let ok = [
                op(0, p, 16),
                op(0, p.add(16), 16),
                op(0, std::ptr::null_mut(), 0),
            ];
            assert_eq!(read_buffers(&ok).unwrap().len(), 3);
            let bad = [op(0, p, 16), op(0, p.add(15), 8)];
            let e = read_buffers(&bad).unwrap_err();
            assert_eq!(e.status, LEECHIO_INVALID_ARGUMENT);
            assert!(e.message.contains("ops 0 and 1 overlap"), "{}", e.message);
            let null = [op(0, std::ptr::null_mut(), 4)];
            assert_eq!(
                read_buffers(&null).unwrap_err().status,
                LEECHIO_NULL_ARGUMENT
            );
        }
    }
}
