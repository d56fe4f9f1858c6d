//! Buffers lent to a flush: the one type through which the engine makes a
//! pointer to bytes it does not own and turns it back into bytes.
//!
//! A request's bytes live in a slot's engine buffer, a buffer moved in
//! with the request, a caller's slice lent for a [`Memory::scope`], or a
//! synchronous caller's slice lent for one call; a flush also lends its
//! own scratch and its entries' buffers to the device calls it makes. In
//! every case the bytes are read or written in place after the borrow
//! that lent them is out of the type system's sight: what keeps that
//! sound is a protocol (a slot's state, a scope's end, the length of a
//! call), not a lifetime. A [`LentBuffer`] stands for such bytes. Making
//! one is safe; reaching its bytes is `unsafe`, and each caller says which
//! part of the protocol makes it sound.
//!
//! [`Memory::scope`]: crate::engine::Memory::scope

use std::ptr::NonNull;

/// `len` bytes lent to the engine for as long as the protocol that lent
/// them says; written through only when they are a read's destination.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LentBuffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a `LentBuffer` gives no access by itself: its bytes are reached
// only through its `unsafe` methods, whose callers hold the protocol that
// lets one thread at a time touch them. The bytes are plain `u8`, `Send`
// and `Sync`.
unsafe impl Send for LentBuffer {}
// SAFETY: as above.
unsafe impl Sync for LentBuffer {}

impl LentBuffer {
    /// Stands for `buf`, which a read fills.
    #[inline]
    pub fn of_mut(buf: &mut [u8]) -> LentBuffer {
        LentBuffer {
            // (A slice's pointer is never null, even when it is empty.)
            ptr: NonNull::new(buf.as_mut_ptr()).expect("a slice's pointer"),
            len: buf.len(),
        }
    }

    /// Stands for `data`, which a write only reads.
    #[inline]
    pub fn of(data: &[u8]) -> LentBuffer {
        LentBuffer {
            ptr: NonNull::new(data.as_ptr().cast_mut()).expect("a slice's pointer"),
            len: data.len(),
        }
    }

    /// Stands for the first `len` bytes of `vec`'s allocation, made without
    /// a reference to the whole vector's bytes (which a later reference
    /// would end under Stacked Borrows).
    #[inline]
    pub fn of_vec(vec: &mut Vec<u8>, len: usize) -> LentBuffer {
        debug_assert!(len <= vec.len());
        LentBuffer {
            ptr: NonNull::new(vec.as_mut_ptr()).expect("a vector's pointer"),
            len,
        }
    }

    /// Stands for the `len` bytes at `ptr`, a pointer taken without a
    /// reference (`addr_of_mut!` of a field in a cell).
    #[inline]
    pub fn of_raw(ptr: *mut u8, len: usize) -> LentBuffer {
        LentBuffer {
            ptr: NonNull::new(ptr).expect("a field's pointer"),
            len,
        }
    }

    /// How many bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes `offset..offset + len`, for reading.
    ///
    /// # Safety
    /// The range lies in the buffer, the buffer is still lent (its lender
    /// neither touches nor frees it until the protocol gives it back), and
    /// no mutable reference to the range is alive while this one is.
    #[inline]
    pub unsafe fn bytes<'a>(&self, offset: usize, len: usize) -> &'a [u8] {
        debug_assert!(offset + len <= self.len);
        // SAFETY: the caller's contract: in bounds, lent, not written
        // meanwhile.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(offset), len) }
    }

    /// Bytes `offset..offset + len`, for writing (a read's destination).
    ///
    /// # Safety
    /// As [`LentBuffer::bytes`], and no other reference to the range is
    /// alive while this one is; the buffer was lent mutably
    /// ([`LentBuffer::of_mut`], [`LentBuffer::of_vec`],
    /// [`LentBuffer::of_raw`]).
    #[allow(clippy::mut_from_ref)]
    #[inline]
    pub unsafe fn bytes_mut<'a>(&self, offset: usize, len: usize) -> &'a mut [u8] {
        debug_assert!(offset + len <= self.len);
        // SAFETY: the caller's contract: in bounds, lent mutably, and
        // referenced by nothing else meanwhile.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(offset), len) }
    }

    /// All of the bytes, for writing: [`LentBuffer::bytes_mut`] of the
    /// whole buffer.
    ///
    /// # Safety
    /// As [`LentBuffer::bytes_mut`].
    #[allow(clippy::mut_from_ref)]
    #[inline]
    pub unsafe fn whole_mut<'a>(&self) -> &'a mut [u8] {
        // SAFETY: the caller's contract.
        unsafe { self.bytes_mut(0, self.len) }
    }
}
