//! Devices that read and write physical memory in scatter calls.
//!
//! Everything above this module talks to the [`Backend`] trait; only
//! [`leechcore`] talks to LeechCore.

pub mod leechcore;
pub mod memory;

use leechcore_sys as sys;

use crate::MemoryMap;

/// A device that reads and writes physical memory in scatter calls of
/// page-bounded entries, with a result per entry.
///
/// One call of [`Backend::read_scatter`] is one round trip to the device:
/// the engine above makes as few as it can.
pub trait Backend: Send + Sync {
    /// Reads every entry in one device call (entries that break
    /// [`Backend::limits`] fail with [`PageError::InvalidEntry`]).
    fn read_scatter(&self, entries: &mut [ScatterEntry<'_>]);
    /// Writes every entry in one device call.
    fn write_scatter(&self, entries: &mut [WriteEntry<'_>]);
    /// The shape of a legal entry and the most entries per call.
    fn limits(&self) -> Limits;
    /// One past the highest physical address the device serves.
    fn max_address(&self) -> u64;
    /// The device's memory map.
    fn memory_map(&self) -> MemoryMap;
    /// Whether writes are refused.
    fn read_only(&self) -> bool;
    /// Whether the device serves a call's entries faster in address order
    /// than as they come, by more than sorting them costs: a memory image
    /// or mapped guest memory, whose pages are then touched in order (6–16 %
    /// faster on LeechCore's file device for 4096 random reads). The
    /// engine then sends each read call's entries sorted by address. No by
    /// default: a memory copy gains less than the sort costs.
    fn prefers_address_order(&self) -> bool {
        false
    }
    /// Counts the changes of what the engine keeps of the device between
    /// flushes ([`Backend::limits`], [`Backend::max_address`],
    /// [`Backend::read_only`], [`Backend::prefers_address_order`]), so that
    /// it asks for them once, not once per flush (for LeechCore each is a
    /// call into the library). A device whose answers can change after it
    /// is opened (a memory map set, a reopen) increments it with each
    /// change; the default, 0 for ever, is for devices whose answers never
    /// change.
    fn geometry_epoch(&self) -> u64 {
        0
    }
    /// Whether the target can still be served, checked once per flush
    /// before its calls, which then go through
    /// [`Backend::read_scatter_checked`] and
    /// [`Backend::write_scatter_checked`]; `Err` fails the whole flush with
    /// that reason, without a call. For a device whose every call would
    /// otherwise check the same thing with system calls (a QEMU guest's
    /// process and RAM file).
    fn check_target(&self) -> Result<(), PageError> {
        Ok(())
    }
    /// [`Backend::read_scatter`], for a caller that just had
    /// [`Backend::check_target`] succeed: the device may skip that check.
    fn read_scatter_checked(&self, entries: &mut [ScatterEntry<'_>]) {
        self.read_scatter(entries)
    }
    /// [`Backend::write_scatter`], after [`Backend::check_target`].
    fn write_scatter_checked(&self, entries: &mut [WriteEntry<'_>]) {
        self.write_scatter(entries)
    }
    /// Why every read and write now fails, when the whole device is lost
    /// (it stopped answering, its connection closed): a message that names
    /// the device. `None` while it serves.
    fn lost(&self) -> Option<String> {
        None
    }
    /// Replaces the device's memory map, if the device has one to set.
    fn set_memory_map(&self, map: &MemoryMap) -> Result<(), crate::Error> {
        let _ = map;
        Err(crate::Error::Unsupported("setting the memory map"))
    }
}

/// One page-bounded piece of a scatter read: `buf.len()` bytes at `addr`.
#[derive(Debug)]
pub struct ScatterEntry<'a> {
    /// Physical address.
    pub addr: u64,
    /// Where the bytes go; untouched when the entry fails.
    pub buf: &'a mut [u8],
    /// Set by the device: `Ok` when every byte of `buf` was read.
    pub result: Result<(), PageError>,
}

impl<'a> ScatterEntry<'a> {
    /// An entry not yet issued.
    pub fn new(addr: u64, buf: &'a mut [u8]) -> Self {
        ScatterEntry {
            addr,
            buf,
            result: Err(PageError::NotIssued),
        }
    }
}

/// One page-bounded piece of a scatter write: `data` goes to `addr`.
#[derive(Debug)]
pub struct WriteEntry<'a> {
    /// Physical address.
    pub addr: u64,
    /// The bytes to write.
    pub data: &'a [u8],
    /// Set by the device: `Ok` when every byte was written.
    pub result: Result<(), PageError>,
}

impl<'a> WriteEntry<'a> {
    /// An entry not yet issued.
    pub fn new(addr: u64, data: &'a [u8]) -> Self {
        WriteEntry {
            addr,
            data,
            result: Err(PageError::NotIssued),
        }
    }
}

/// Why one scatter entry (one page or part of one) was not read or written.
///
/// The first variants are LeechCore's per-page result codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum PageError {
    /// Nothing answered at the address (PCIe unsupported request).
    #[error("unsupported request: nothing answers at this address")]
    UnsupportedRequest,
    /// The target aborted the request (PCIe completer abort).
    #[error("completer abort")]
    CompleterAbort,
    /// No answer came in time.
    #[error("no completion")]
    NoCompletion,
    /// Only part of the entry was completed; none of it is trusted.
    #[error("partial completion")]
    Partial,
    /// The link to the device failed.
    #[error("transport error")]
    TransportError,
    /// The device's answer was malformed.
    #[error("protocol error")]
    ProtocolError,
    /// The device failed without saying why (e.g. outside its memory map).
    #[error("device gave no reason (e.g. address outside the memory map)")]
    Unspecified,
    /// The entry never reached the device.
    #[error("not issued to the device")]
    NotIssued,
    /// The device refused to write this entry.
    #[error("write failed")]
    WriteFailed,
    /// The device is read-only.
    #[error("device is read-only")]
    ReadOnly,
    /// The entry breaks the device's scatter rules and was not sent.
    #[error("invalid scatter entry: {0}")]
    InvalidEntry(EntryRule),
    /// The address is at or past the device's max address.
    #[error("address past the end of the device's memory")]
    OutOfRange,
    /// The range runs past the end of the 64-bit address space.
    #[error("range wraps past the end of the address space")]
    AddressOverflow,
    /// The target is gone: the QEMU process behind a `qemu` device exited,
    /// so its memory can no longer change or be trusted as live.
    #[error("the target is gone (its QEMU process exited)")]
    TargetGone,
    /// The device stopped answering: a call heard nothing from it for its
    /// time limit ([`DeviceConfig::timeout`](crate::DeviceConfig::timeout)),
    /// so its connection was cut, and every later access fails too.
    #[error("the device stopped answering (nothing within its time limit); its connection is cut")]
    TimedOut,
    /// The device's connection was closed by the other end (its server
    /// exited or was killed); every later access fails too.
    #[error("the device's connection was closed by the other end (its server exited?)")]
    Disconnected,
    /// The virtual address is not mapped (a table entry is not present).
    #[error("virtual address not mapped")]
    NotMapped,
    /// The virtual address is not canonical (bits 63..47 differ).
    #[error("virtual address not canonical")]
    NonCanonical,
    /// A page-table entry on the way has a reserved bit set, so a CPU
    /// would fault on it: an address bit at or above MAXPHYADDR, PS in a
    /// PML4 entry, or a large page's bits between PAT and its alignment.
    #[error("page-table entry with reserved bits set (a CPU would fault)")]
    ReservedBits,
}

impl PageError {
    /// Whether the whole device is gone rather than this entry: its target
    /// exited, it stopped answering or its connection closed. Every later
    /// access fails the same way, so a long task can stop at once.
    pub fn is_device_lost(self) -> bool {
        matches!(
            self,
            PageError::TargetGone | PageError::TimedOut | PageError::Disconnected
        )
    }

    /// The error for a LeechCore per-page result code of a failed entry.
    pub fn from_leechcore_code(code: u32) -> Self {
        match code {
            sys::LC_READ_PAGE_RESULT_UNSUPPORTED_REQUEST => PageError::UnsupportedRequest,
            sys::LC_READ_PAGE_RESULT_COMPLETER_ABORT => PageError::CompleterAbort,
            sys::LC_READ_PAGE_RESULT_NO_COMPLETION => PageError::NoCompletion,
            sys::LC_READ_PAGE_RESULT_PARTIAL => PageError::Partial,
            sys::LC_READ_PAGE_RESULT_TRANSPORT_ERROR => PageError::TransportError,
            sys::LC_READ_PAGE_RESULT_PROTOCOL_ERROR => PageError::ProtocolError,
            sys::LC_READ_PAGE_RESULT_NOT_ISSUED => PageError::NotIssued,
            _ => PageError::Unspecified,
        }
    }
}

/// The rule of [`Limits`] a scatter entry breaks. (A small enum rather
/// than a message keeps every per-entry result two bytes long.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum EntryRule {
    /// More bytes than [`Limits::max_len`].
    #[error("longer than the largest entry")]
    TooLong,
    /// Fewer bytes than [`Limits::min_len`].
    #[error("shorter than the smallest entry")]
    TooShort,
    /// Address or length not a multiple of [`Limits::align`].
    #[error("address or length not aligned")]
    Unaligned,
    /// Runs past the end of its page.
    #[error("crosses a page boundary")]
    CrossesPage,
    /// The device's own rules admit no entry the engine can plan: its page
    /// size or alignment is not a power of two, or its shortest entry
    /// (rounded up to the alignment) or its alignment is longer than the
    /// largest power of two within its longest entry (the engine cuts
    /// requests at such powers of two).
    #[error("the device's entry rules admit no entry the engine can plan (page size or alignment not a power of two, or shortest entry longer than the largest power of two within the longest)")]
    BadDeviceShape,
}

/// The shape every scatter entry must have (LeechCore's rules come from DMA
/// hardware), and how many entries one call may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest byte count of one entry.
    pub max_len: usize,
    /// Smallest byte count of one entry.
    pub min_len: usize,
    /// Alignment of address and byte count (a power of two).
    pub align: u64,
    /// No entry may cross a multiple of this (a power of two).
    pub page_size: u64,
    /// Most entries in one call.
    pub max_entries: usize,
}

impl Limits {
    /// LeechCore's rules; it takes any number of entries per call (its
    /// count is a `u32`).
    pub const LEECHCORE: Limits = Limits {
        max_len: sys::MEM_SCATTER_MAX as usize,
        min_len: sys::MEM_SCATTER_MIN as usize,
        align: sys::MEM_SCATTER_ALIGN as u64,
        page_size: sys::PAGE_SIZE,
        max_entries: u32::MAX as usize,
    };

    /// Which rule an entry of `len` bytes at `addr` breaks, if any.
    pub fn check(&self, addr: u64, len: usize) -> Result<(), PageError> {
        let broken = if len > self.max_len {
            EntryRule::TooLong
        } else if len < self.min_len {
            EntryRule::TooShort
        } else if addr % self.align != 0 || len as u64 % self.align != 0 {
            EntryRule::Unaligned
        } else if (addr % self.page_size) + len as u64 > self.page_size {
            EntryRule::CrossesPage
        } else {
            return Ok(());
        };
        Err(PageError::InvalidEntry(broken))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leechcore_rules_accept_legal_entries_and_name_the_broken_rule() {
        let r = Limits::LEECHCORE;
        assert_eq!(r.check(0x1000, 0x1000), Ok(()));
        assert_eq!(r.check(0x1ff8, 8), Ok(()));
        assert_eq!(r.check(0x1004, 12), Ok(()));
        let broken = |addr, len| match r.check(addr, len) {
            Err(PageError::InvalidEntry(why)) => why,
            other => panic!("{addr:#x}+{len:#x} gave {other:?}"),
        };
        assert_eq!(broken(0x1000, 0x1004), EntryRule::TooLong);
        assert_eq!(broken(0x1000, 4), EntryRule::TooShort);
        assert_eq!(broken(0x1002, 8), EntryRule::Unaligned);
        assert_eq!(broken(0x1000, 10), EntryRule::Unaligned);
        assert_eq!(broken(0x1ffc, 8), EntryRule::CrossesPage);
        assert_eq!(broken(u64::MAX - 3, 8), EntryRule::CrossesPage);
        // The message names the rule.
        assert_eq!(
            PageError::InvalidEntry(EntryRule::CrossesPage).to_string(),
            "invalid scatter entry: crosses a page boundary"
        );
    }
}
