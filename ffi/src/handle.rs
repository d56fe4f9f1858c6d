//! Handles: Rust values C holds as opaque pointers.

use crate::error::{non_null, Fail};

/// A value handed to C as an opaque pointer: boxed when made, lent back
/// from each call as a shared reference, and freed once.
pub(crate) trait Handle: Sized {
    /// The argument's name in messages (`` `device` is NULL ``).
    const NAME: &'static str;

    /// Hands `self` to C: `*out` becomes its handle.
    ///
    /// # Safety
    /// `out` must be valid for a write (checked non-NULL by the caller).
    unsafe fn give(self, out: *mut *mut Self) {
        // SAFETY: the caller's contract on `out`.
        unsafe { *out = Box::into_raw(Box::new(self)) };
    }

    /// The value behind the handle `p`, or `LEECHIO_NULL_ARGUMENT`. Only
    /// shared references are made, so a callback that comes back with the
    /// same handle aliases nothing mutable.
    ///
    /// # Safety
    /// `p` must be NULL or a live handle from [`Handle::give`].
    unsafe fn lend<'a>(p: *const Self) -> Result<&'a Self, Fail> {
        non_null(p, Self::NAME)?;
        // SAFETY: non-NULL; the caller passes a live handle.
        Ok(unsafe { &*p })
    }

    /// Frees the handle `p`; NULL is ignored.
    ///
    /// # Safety
    /// `p` must be NULL or a handle from [`Handle::give`], not used again.
    unsafe fn free(p: *mut Self) {
        if !p.is_null() {
            // SAFETY: a handle from `give` (Box::into_raw), freed once.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}
