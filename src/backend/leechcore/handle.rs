//! The state of a device's LeechCore handle, kept under its lock: the raw
//! handle and the arrays of a scatter call, reused from call to call, and
//! the entries as a call takes them.

use leechcore_sys::{HANDLE, MEM_SCATTER};

use crate::backend::{Limits, PageError, ScatterEntry, WriteEntry};

/// The raw handle and the scratch arrays of one scatter call, reused so a
/// call allocates nothing once they have grown.
pub(super) struct Handle {
    /// Null only when reopening failed; no call is made then.
    pub(super) raw: HANDLE,
    /// LeechCore's file device holds each write in the stdio buffer of one
    /// of its several handles on the file until it is closed: its other
    /// handles read the old bytes, two writes of the same bytes reach the
    /// file in handle order, not in write order, and no other reader of
    /// the file sees them. So right after a write the device is closed
    /// (which writes the bytes out) and opened again.
    pub(super) unflushed: bool,
    /// Call counts of the handles closed by reopening, by statistics id.
    pub(super) retired_calls: [u64; 8],
    /// The memory map set by the caller (`LC_MEMMAP_ENTRY`s), set again
    /// after reopening.
    pub(super) map: Option<Vec<u8>>,
    pub(super) mems: Vec<MEM_SCATTER>,
    pub(super) ptrs: Vec<*mut MEM_SCATTER>,
    pub(super) codes: Vec<u32>,
    /// For each entry of `mems`, the index of the caller's entry.
    pub(super) owners: Vec<usize>,
}

// SAFETY: a LeechCore handle is not tied to the thread that opened it, and
// the raw pointers in the scratch arrays are only dereferenced by LeechCore
// during a call made under the lock, after being rewritten for that call.
unsafe impl Send for Handle {}

impl Handle {
    /// The state of a device just opened as `raw`.
    pub(super) fn new(raw: HANDLE) -> Handle {
        Handle {
            raw,
            unflushed: false,
            retired_calls: [0; 8],
            map: None,
            mems: Vec::new(),
            ptrs: Vec::new(),
            codes: Vec::new(),
            owners: Vec::new(),
        }
    }

    /// Fills the scratch arrays with the legal entries below `limit`;
    /// the others get their error at once.
    pub(super) fn prepare<E: Entry>(&mut self, limit: u64, rules: Limits, entries: &mut [E]) {
        self.mems.clear();
        self.owners.clear();
        for (i, entry) in entries.iter_mut().enumerate() {
            let (addr, pb, len) = entry.raw();
            // A legal entry stays inside one page and the limit is a page
            // boundary, so an entry is wholly below it or wholly past it.
            let checked = match rules.check(addr, len) {
                Ok(()) if addr >= limit => Err(PageError::OutOfRange),
                other => other,
            };
            match checked {
                Ok(()) => {
                    *entry.result() = Err(PageError::NotIssued);
                    self.mems.push(MEM_SCATTER::new(addr, pb, len as u32));
                    self.owners.push(i);
                }
                Err(e) => *entry.result() = Err(e),
            }
        }
        // Taken after all pushes: `mems` does not move again until the call.
        self.ptrs.clear();
        self.ptrs
            .extend(self.mems.iter_mut().map(|m| m as *mut MEM_SCATTER));
    }
}

/// Who looked at the target's liveness (a QEMU guest's process and RAM
/// file, two system calls) for a scatter call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Checked {
    /// The caller, just before ([`crate::Backend::check_target`]).
    Before,
    /// Nobody yet: the call does.
    Here,
}

/// A read or a write entry, as a scatter call takes it.
pub(super) trait Entry {
    /// Address, buffer and length for `MEM_SCATTER`.
    fn raw(&mut self) -> (u64, *mut u8, usize);
    /// Where the entry's result goes.
    fn result(&mut self) -> &mut Result<(), PageError>;
}

impl Entry for ScatterEntry<'_> {
    fn raw(&mut self) -> (u64, *mut u8, usize) {
        (self.addr, self.buf.as_mut_ptr(), self.buf.len())
    }

    fn result(&mut self) -> &mut Result<(), PageError> {
        &mut self.result
    }
}

impl Entry for WriteEntry<'_> {
    /// LeechCore's write path only reads from `pb`.
    fn raw(&mut self) -> (u64, *mut u8, usize) {
        (self.addr, self.data.as_ptr() as *mut u8, self.data.len())
    }

    fn result(&mut self) -> &mut Result<(), PageError> {
        &mut self.result
    }
}
