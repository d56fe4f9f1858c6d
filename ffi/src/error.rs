//! The one error type of the C API: a status code, and a message per thread.
//!
//! Every exported function runs inside [`guard`], which catches panics (none
//! may unwind into C) and records the message of a failure in a
//! thread-local slot that [`leechio_last_error_message`] copies out, the way
//! `errno` and `strerror` work together, but with the details of the call
//! that failed (the device string, LeechCore's reason, the failed ranges).

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use leechio_rs::PageError;

/// The status of a call, and the reason of each failed byte range.
///
/// `LEECHIO_OK` is 0. Codes below 100 describe a whole call; codes from 100
/// on are the reasons a byte range of a read or write failed (they mirror
/// the engine's `PageError`), and appear in `leechio_fragment.status`, in
/// `leechio_translation.status` and as the return value of calls about a
/// single address (a translation; `leechio_space_new` finding the paging
/// mode of a root it cannot read).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum leechio_status {
    /// Success: every byte was read or written.
    LEECHIO_OK = 0,
    /// A required pointer argument was NULL.
    LEECHIO_NULL_ARGUMENT = 1,
    /// An argument was malformed: a string that is not UTF-8 or too long, an
    /// unknown enum value, read buffers that overlap, a length too large.
    LEECHIO_INVALID_ARGUMENT = 2,
    /// An output buffer was too small; the needed size was reported.
    LEECHIO_BUFFER_TOO_SMALL = 3,
    /// `leechcore.so` could not be found or is not LeechCore.
    LEECHIO_LOAD_FAILED = 4,
    /// LeechCore could not open the device.
    LEECHIO_OPEN_FAILED = 5,
    /// The device refused a command or cannot do what was asked.
    LEECHIO_DEVICE_ERROR = 6,
    /// Part of the work failed, and the call's results say which part and
    /// why: for reads and writes, the fragments; for
    /// `leechio_space_translate_many`, each translation's `status`; for
    /// `leechio_space_mappings`, the unreadable ranges it reports; for a
    /// queued read, its fragments.
    LEECHIO_INCOMPLETE = 7,
    /// The call is not allowed here, e.g. flushing a queue from one of its
    /// own completion callbacks.
    LEECHIO_BUSY = 8,
    /// Memory for the request could not be allocated.
    LEECHIO_NO_MEMORY = 9,
    /// A bug in leechio: it panicked. The message says where.
    LEECHIO_PANIC = 10,
    /// Not a failure, and only in `leechio_mapping.status`: the range goes
    /// through a page table already walked for an earlier range, so it
    /// maps exactly what that range (`leechio_mapping.same_as`) maps, and
    /// its mappings are not reported again.
    LEECHIO_ALIAS = 11,
    /// What was looked for is not there: no Linux kernel (or none with
    /// BTF) in the target's memory, or no process with that pid; the
    /// message says which.
    LEECHIO_NOT_FOUND = 12,
    /// The page tables do not show whether they are in 4-level or 5-level
    /// paging (both readings fit, or neither does), so the paging mode
    /// must be given (`levels` 4 or 5); the message says what was read.
    LEECHIO_PAGING_UNKNOWN = 13,
    /// Nothing answered at the address (PCIe unsupported request).
    LEECHIO_UNSUPPORTED_REQUEST = 100,
    /// The target aborted the request (PCIe completer abort).
    LEECHIO_COMPLETER_ABORT = 101,
    /// No answer came in time.
    LEECHIO_NO_COMPLETION = 102,
    /// Only part of a device entry completed; none of it is trusted.
    LEECHIO_PARTIAL_COMPLETION = 103,
    /// The link to the device failed.
    LEECHIO_TRANSPORT_ERROR = 104,
    /// The device's answer was malformed.
    LEECHIO_PROTOCOL_ERROR = 105,
    /// The device failed without saying why (e.g. outside its memory map).
    LEECHIO_UNSPECIFIED = 106,
    /// The range never reached the device (or its request was cancelled).
    LEECHIO_NOT_ISSUED = 107,
    /// The device refused to write the range.
    LEECHIO_WRITE_FAILED = 108,
    /// The device is read-only.
    LEECHIO_READ_ONLY = 109,
    /// The range breaks the device's scatter rules and was not sent.
    LEECHIO_INVALID_ENTRY = 110,
    /// The range is at or past the device's max address.
    LEECHIO_OUT_OF_RANGE = 111,
    /// The range runs past the end of the 64-bit address space.
    LEECHIO_ADDRESS_OVERFLOW = 112,
    /// The virtual address is not mapped (a table entry is not present).
    LEECHIO_NOT_MAPPED = 113,
    /// The virtual address is not canonical (bits 63..47 differ).
    LEECHIO_NON_CANONICAL = 114,
    /// A page-table entry on the way has reserved bits set, so a CPU would
    /// fault: an address bit at or above MAXPHYADDR, PS in a PML4 entry,
    /// or a large page's bits between PAT and its alignment.
    LEECHIO_RESERVED_BITS = 115,
    /// The target is gone (the QEMU process behind a `qemu` device
    /// exited); every later access fails too.
    LEECHIO_TARGET_GONE = 116,
    /// The device heard nothing for its time limit, so its connection was
    /// cut; every later access fails too.
    LEECHIO_TIMED_OUT = 117,
    /// The device's connection was closed by the other end (its server
    /// exited?); every later access fails too.
    LEECHIO_DISCONNECTED = 118,
    /// A reason this version of the C API does not know yet.
    LEECHIO_UNKNOWN_REASON = 199,
}

use leechio_status::*;

/// Every status, for the message table and the tests.
pub(crate) const ALL_STATUSES: [leechio_status; 34] = [
    LEECHIO_OK,
    LEECHIO_NULL_ARGUMENT,
    LEECHIO_INVALID_ARGUMENT,
    LEECHIO_BUFFER_TOO_SMALL,
    LEECHIO_LOAD_FAILED,
    LEECHIO_OPEN_FAILED,
    LEECHIO_DEVICE_ERROR,
    LEECHIO_INCOMPLETE,
    LEECHIO_BUSY,
    LEECHIO_NO_MEMORY,
    LEECHIO_PANIC,
    LEECHIO_ALIAS,
    LEECHIO_NOT_FOUND,
    LEECHIO_PAGING_UNKNOWN,
    LEECHIO_UNSUPPORTED_REQUEST,
    LEECHIO_COMPLETER_ABORT,
    LEECHIO_NO_COMPLETION,
    LEECHIO_PARTIAL_COMPLETION,
    LEECHIO_TRANSPORT_ERROR,
    LEECHIO_PROTOCOL_ERROR,
    LEECHIO_UNSPECIFIED,
    LEECHIO_NOT_ISSUED,
    LEECHIO_WRITE_FAILED,
    LEECHIO_READ_ONLY,
    LEECHIO_INVALID_ENTRY,
    LEECHIO_OUT_OF_RANGE,
    LEECHIO_ADDRESS_OVERFLOW,
    LEECHIO_NOT_MAPPED,
    LEECHIO_NON_CANONICAL,
    LEECHIO_RESERVED_BITS,
    LEECHIO_TARGET_GONE,
    LEECHIO_TIMED_OUT,
    LEECHIO_DISCONNECTED,
    LEECHIO_UNKNOWN_REASON,
];

impl leechio_status {
    /// The status of a failed byte range.
    pub(crate) fn from_page_error(e: PageError) -> Self {
        match e {
            PageError::UnsupportedRequest => LEECHIO_UNSUPPORTED_REQUEST,
            PageError::CompleterAbort => LEECHIO_COMPLETER_ABORT,
            PageError::NoCompletion => LEECHIO_NO_COMPLETION,
            PageError::Partial => LEECHIO_PARTIAL_COMPLETION,
            PageError::TransportError => LEECHIO_TRANSPORT_ERROR,
            PageError::ProtocolError => LEECHIO_PROTOCOL_ERROR,
            PageError::Unspecified => LEECHIO_UNSPECIFIED,
            PageError::NotIssued => LEECHIO_NOT_ISSUED,
            PageError::WriteFailed => LEECHIO_WRITE_FAILED,
            PageError::ReadOnly => LEECHIO_READ_ONLY,
            PageError::InvalidEntry(_) => LEECHIO_INVALID_ENTRY,
            PageError::OutOfRange => LEECHIO_OUT_OF_RANGE,
            PageError::AddressOverflow => LEECHIO_ADDRESS_OVERFLOW,
            PageError::NotMapped => LEECHIO_NOT_MAPPED,
            PageError::NonCanonical => LEECHIO_NON_CANONICAL,
            PageError::ReservedBits => LEECHIO_RESERVED_BITS,
            PageError::TargetGone => LEECHIO_TARGET_GONE,
            PageError::TimedOut => LEECHIO_TIMED_OUT,
            PageError::Disconnected => LEECHIO_DISCONNECTED,
            // PageError is non-exhaustive: a reason added later still
            // reaches C as a failure, never as success.
            _ => LEECHIO_UNKNOWN_REASON,
        }
    }

    /// A fixed English description, NUL-terminated.
    fn description(self) -> &'static CStr {
        match self {
            LEECHIO_OK => c"success",
            LEECHIO_NULL_ARGUMENT => c"a required pointer argument was NULL",
            LEECHIO_INVALID_ARGUMENT => c"an argument was malformed",
            LEECHIO_BUFFER_TOO_SMALL => c"the output buffer is too small",
            LEECHIO_LOAD_FAILED => c"leechcore.so could not be loaded",
            LEECHIO_OPEN_FAILED => c"LeechCore could not open the device",
            LEECHIO_DEVICE_ERROR => c"the device refused the request",
            LEECHIO_INCOMPLETE => {
                c"partly failed: the fragments, translations or mappings reported say which part and why"
            }
            LEECHIO_BUSY => c"not allowed while the object is busy (from its own callback)",
            LEECHIO_NO_MEMORY => c"out of memory",
            LEECHIO_PANIC => c"internal error (leechio panicked)",
            LEECHIO_ALIAS => c"maps what an earlier range maps (a shared page table)",
            LEECHIO_NOT_FOUND => c"not found (no Linux kernel, or no such process)",
            LEECHIO_PAGING_UNKNOWN => {
                c"the page tables do not show whether they are 4-level or 5-level: give the paging mode"
            }
            LEECHIO_UNSUPPORTED_REQUEST => c"unsupported request: nothing answers at this address",
            LEECHIO_COMPLETER_ABORT => c"completer abort",
            LEECHIO_NO_COMPLETION => c"no completion",
            LEECHIO_PARTIAL_COMPLETION => c"partial completion",
            LEECHIO_TRANSPORT_ERROR => c"transport error",
            LEECHIO_PROTOCOL_ERROR => c"protocol error",
            LEECHIO_UNSPECIFIED => c"device gave no reason (e.g. address outside the memory map)",
            LEECHIO_NOT_ISSUED => c"not issued to the device",
            LEECHIO_WRITE_FAILED => c"write failed",
            LEECHIO_READ_ONLY => c"device is read-only",
            LEECHIO_INVALID_ENTRY => c"invalid scatter entry",
            LEECHIO_OUT_OF_RANGE => c"address past the end of the device's memory",
            LEECHIO_ADDRESS_OVERFLOW => c"range wraps past the end of the address space",
            LEECHIO_NOT_MAPPED => c"virtual address not mapped",
            LEECHIO_NON_CANONICAL => c"virtual address not canonical",
            LEECHIO_RESERVED_BITS => {
                c"page-table entry with reserved bits set (a CPU would fault)"
            }
            LEECHIO_TARGET_GONE => c"the target is gone (its QEMU process exited)",
            LEECHIO_TIMED_OUT => {
                c"the device stopped answering (nothing within its time limit); its connection is cut"
            }
            LEECHIO_DISCONNECTED => {
                c"the device's connection was closed by the other end (its server exited?)"
            }
            LEECHIO_UNKNOWN_REASON => c"failed for a reason this leechio does not know",
        }
    }
}

/// A failed call: its status and what to tell the caller.
#[derive(Debug)]
pub(crate) struct Fail {
    pub status: leechio_status,
    pub message: String,
}

impl Fail {
    pub fn new(status: leechio_status, message: impl Into<String>) -> Self {
        Fail {
            status,
            message: message.into(),
        }
    }
}

/// How a C program gets LeechCore and chooses the `leechcore.so` to load,
/// ending a load failure's message.
const C_LOAD_HINT: &str = "`make install-c` puts LeechCore's leechcore.so and its \
leechcore_device_*.so plugins beside libleechio.so, where libleechio finds it (get them with \
`make setup`); to load another, pass the path of its leechcore.so file (not of its folder) as \
the `library` argument of leechio_device_open, or set the environment variable LEECHCORE_LIB to \
that path";

impl From<leechio_rs::Error> for Fail {
    fn from(e: leechio_rs::Error) -> Self {
        if let leechio_rs::Error::Load(load) = &e {
            return Fail::new(LEECHIO_LOAD_FAILED, load.message_with_hint(C_LOAD_HINT));
        }
        let status = match &e {
            leechio_rs::Error::InvalidConfig(_) => LEECHIO_INVALID_ARGUMENT,
            leechio_rs::Error::Open { .. } => LEECHIO_OPEN_FAILED,
            _ => LEECHIO_DEVICE_ERROR,
        };
        Fail::new(status, e.to_string())
    }
}

/// What exported functions return inside [`guard`].
pub(crate) type CallResult = Result<(), Fail>;

thread_local! {
    /// The message of the last failed call on this thread.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn record(message: &str) {
    // A NUL inside a message would cut it short in C; drop such bytes.
    let bytes: Vec<u8> = message.bytes().filter(|&b| b != 0).collect();
    let text = CString::new(bytes).unwrap_or_default();
    // Ignore a thread being torn down: there is no one left to read it.
    let _ = LAST_ERROR.try_with(|last| *last.borrow_mut() = text);
}

/// Runs the body of an exported function: a failure's message is recorded
/// for [`leechio_last_error_message`], a panic becomes `LEECHIO_PANIC`.
pub(crate) fn guard(function: &str, body: impl FnOnce() -> CallResult) -> leechio_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => LEECHIO_OK,
        Ok(Err(fail)) => {
            record(&format!("{function}: {}", fail.message));
            fail.status
        }
        Err(panic) => {
            record(&format!("{function}: panicked: {}", panic_text(&*panic)));
            LEECHIO_PANIC
        }
    }
}

/// [`guard`] for functions that return a value rather than a status:
/// `fallback` on failure or panic (the message is still recorded).
pub(crate) fn guard_value<T>(
    function: &str,
    fallback: T,
    body: impl FnOnce() -> Result<T, Fail>,
) -> T {
    let mut out = None;
    guard(function, || {
        out = Some(body()?);
        Ok(())
    });
    out.unwrap_or(fallback)
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

/// A NULL check that names the argument.
pub(crate) fn non_null<T>(p: *const T, name: &str) -> Result<(), Fail> {
    if p.is_null() {
        Err(Fail::new(
            LEECHIO_NULL_ARGUMENT,
            format!("`{name}` is NULL"),
        ))
    } else {
        Ok(())
    }
}

/// Copies `text` into `buf` (`len` bytes) as a NUL-terminated string,
/// truncated if it does not fit, and stores its full length (without the
/// NUL) in `*out_len` when `out_len` is not NULL. `buf` may be NULL only
/// when `len` is 0, to ask for the length: a query, which succeeds (as
/// `snprintf(NULL, 0, …)` does) and so leaves the last error alone.
///
/// # Safety
/// `buf` must be NULL or valid for `len` bytes; `out_len` NULL or valid.
pub(crate) unsafe fn copy_string(
    text: &[u8],
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> Result<(), Fail> {
    if buf.is_null() && len > 0 {
        return Err(Fail::new(
            LEECHIO_NULL_ARGUMENT,
            "`buf` is NULL but `len` is not 0",
        ));
    }
    if !out_len.is_null() {
        // SAFETY: checked non-NULL; the caller passes a valid pointer.
        unsafe { *out_len = text.len() };
    }
    if len > 0 {
        let n = text.len().min(len - 1);
        // SAFETY: `buf` holds `len` > n bytes; `text` is ours, so the two
        // cannot overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    if text.len() >= len && !buf.is_null() {
        return Err(Fail::new(
            LEECHIO_BUFFER_TOO_SMALL,
            format!(
                "the text needs {} bytes with its NUL; the buffer has {len}",
                text.len() + 1
            ),
        ));
    }
    Ok(())
}

/// A fixed English description of `status` (any value; unknown ones get
/// "unknown status"). The string is static: never free it.
#[no_mangle]
pub extern "C" fn leechio_status_message(status: u32) -> *const c_char {
    ALL_STATUSES
        .iter()
        .find(|s| **s as u32 == status)
        .map_or(c"unknown status", |s| s.description())
        .as_ptr()
}

/// Copies the message of the most recent failed call on this thread into
/// `buf` (`len` bytes, NUL-terminated, truncated if needed) and stores its
/// full length in `*out_len` (if `out_len` is not NULL). The message is
/// empty when no call has failed on this thread yet; a successful call does
/// not clear it. This function never changes the recorded message itself.
///
/// Returns `LEECHIO_OK` (also for a length query: `buf` NULL, `len` 0),
/// `LEECHIO_BUFFER_TOO_SMALL` (the truncated text is still written) or
/// `LEECHIO_NULL_ARGUMENT` (`buf` NULL with `len` > 0).
///
/// NULL: `out_len` may be NULL, and `buf` when `len` is 0.
///
/// # Safety
/// A non-NULL `buf` must be writable for `len` bytes; a non-NULL
/// `out_len` writable.
#[no_mangle]
pub unsafe extern "C" fn leechio_last_error_message(
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> leechio_status {
    let copied = catch_unwind(AssertUnwindSafe(|| {
        LAST_ERROR.with(|last| {
            // SAFETY: the caller's contract, passed on.
            unsafe { copy_string(last.borrow().as_bytes(), buf, len, out_len) }
        })
    }));
    match copied {
        Ok(Ok(())) => LEECHIO_OK,
        Ok(Err(fail)) => fail.status,
        Err(_) => LEECHIO_PANIC,
    }
}

#[cfg(test)]
mod tests;
