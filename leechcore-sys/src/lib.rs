//! LeechCore's C ABI (x86-64 Linux) and a run-time loader for `leechcore.so`.
//!
//! This crate only declares: the types, constants and function signatures of
//! LeechCore 2.x, plus [`Library`], which finds and loads the shared library
//! and resolves every function once. It makes no call into LeechCore itself;
//! the safe wrapper lives in the `leechio` crate.
//!
//! Names follow LeechCore's C header so that its documentation applies as is.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![allow(non_camel_case_types, non_snake_case)]

mod library;

pub use library::{Library, LoadError, Tried, SETUP_HINT};

use std::ffi::{c_char, c_int, c_void};
use std::mem::{offset_of, size_of};

/// Windows-style 32-bit boolean used throughout LeechCore's ABI.
pub type BOOL = u32;
/// An opened LeechCore device; NULL means "no device".
pub type HANDLE = *mut c_void;

/// Length of LeechCore's fixed-size string fields, NUL included.
pub const MAX_PATH: usize = 260;

/// Required value of [`LC_CONFIG::dwVersion`].
pub const LC_CONFIG_VERSION: u32 = 0xc0fd_0002;
/// Expected value of [`LC_CONFIG_ERRORINFO::dwVersion`].
pub const LC_CONFIG_ERRORINFO_VERSION: u32 = 0xc0fe_0002;
/// Required value of [`MEM_SCATTER::version`].
pub const MEM_SCATTER_VERSION: u32 = 0xc0fe_0002;

/// `dwPrintfVerbosity` bit: printing enabled.
pub const LC_CONFIG_PRINTF_ENABLED: u32 = 0x01;
/// `dwPrintfVerbosity` bit: verbose (`-v`).
pub const LC_CONFIG_PRINTF_V: u32 = 0x02;
/// `dwPrintfVerbosity` bit: more verbose (`-vv`).
pub const LC_CONFIG_PRINTF_VV: u32 = 0x04;
/// `dwPrintfVerbosity` bit: most verbose (`-vvv`).
pub const LC_CONFIG_PRINTF_VVV: u32 = 0x08;

/// Largest byte count of one scatter entry (one page).
pub const MEM_SCATTER_MAX: u32 = 0x1000;
/// Smallest byte count of one scatter entry.
pub const MEM_SCATTER_MIN: u32 = 8;
/// Alignment of a scatter entry's address and byte count.
pub const MEM_SCATTER_ALIGN: u32 = 4;
/// Page size; no scatter entry may cross a multiple of it.
pub const PAGE_SIZE: u64 = 0x1000;
/// Address value that marks a scatter entry as invalid (skipped by LeechCore).
pub const MEM_SCATTER_ADDR_INVALID: u64 = u64::MAX;

/// Options for `LcGetOption` / `LcSetOption`.
pub const LC_OPT_CORE_VERSION_MAJOR: u64 = 0x4000_0005_0000_0000;
/// Minor version of the loaded LeechCore.
pub const LC_OPT_CORE_VERSION_MINOR: u64 = 0x4000_0006_0000_0000;
/// Revision of the loaded LeechCore.
pub const LC_OPT_CORE_VERSION_REVISION: u64 = 0x4000_0007_0000_0000;
/// Highest physical address of the device (from its memory map).
pub const LC_OPT_CORE_ADDR_MAX: u64 = 0x1000_0008_0000_0000;
/// Nonzero when the target's memory changes while it is read.
pub const LC_OPT_CORE_VOLATILE: u64 = 0x1000_000b_0000_0000;
/// Nonzero when the device cannot be written.
pub const LC_OPT_CORE_READONLY: u64 = 0x1000_000c_0000_0000;
/// Number of calls of one kind; OR the option with an `LC_STATISTICS_ID_*`.
pub const LC_OPT_CORE_STATISTICS_CALL_COUNT: u64 = 0x4000_0009_0000_0000;

/// Call id for [`LC_OPT_CORE_STATISTICS_CALL_COUNT`]: device opens.
pub const LC_STATISTICS_ID_OPEN: u64 = 0;
/// Call id: `LcRead`.
pub const LC_STATISTICS_ID_READ: u64 = 1;
/// Call id: `LcReadScatter` and `LcReadScatterEx`.
pub const LC_STATISTICS_ID_READSCATTER: u64 = 2;
/// Call id: `LcWrite`.
pub const LC_STATISTICS_ID_WRITE: u64 = 3;
/// Call id: `LcWriteScatter`.
pub const LC_STATISTICS_ID_WRITESCATTER: u64 = 4;
/// Call id: `LcGetOption`.
pub const LC_STATISTICS_ID_GETOPTION: u64 = 5;
/// Call id: `LcSetOption`.
pub const LC_STATISTICS_ID_SETOPTION: u64 = 6;
/// Call id: `LcCommand`.
pub const LC_STATISTICS_ID_COMMAND: u64 = 7;

/// Command: the memory map as text, one range a line:
/// `index start - end_inclusive -> remap` (hex).
pub const LC_CMD_MEMMAP_GET: u64 = 0x4000_0200_0000_0000;
/// Command: replace the memory map from text, one range a line:
/// `start end_inclusive [remap]` (hex). LeechCore crashes on malformed
/// text, so only send text this project formatted itself.
pub const LC_CMD_MEMMAP_SET: u64 = 0x4000_0300_0000_0000;
/// Command: the memory map as an array of [`LC_MEMMAP_ENTRY`].
pub const LC_CMD_MEMMAP_GET_STRUCT: u64 = 0x4000_0400_0000_0000;
/// Command: replace the memory map from an array of [`LC_MEMMAP_ENTRY`].
pub const LC_CMD_MEMMAP_SET_STRUCT: u64 = 0x4000_0500_0000_0000;
/// Flag of [`LC_MEMMAP_ENTRY::paRemap`] when setting a map: take the remap
/// as given, even 0 (which LeechCore otherwise reads as "the range's own
/// address").
pub const LC_MEMMAP_FORCE_OFFSET: u64 = 0x8000_0000_0000_0000;

/// Per-entry result code of `LcReadScatterEx`: not yet set.
pub const LC_READ_PAGE_RESULT_NONE: u32 = 0;
/// The entry was read.
pub const LC_READ_PAGE_RESULT_SUCCESS: u32 = 1;
/// The entry was read after one or more retries.
pub const LC_READ_PAGE_RESULT_SUCCESS_AFTER_RETRY: u32 = 2;
/// PCIe "unsupported request": nothing answers at this address.
pub const LC_READ_PAGE_RESULT_UNSUPPORTED_REQUEST: u32 = 3;
/// PCIe "completer abort".
pub const LC_READ_PAGE_RESULT_COMPLETER_ABORT: u32 = 4;
/// No completion arrived in time.
pub const LC_READ_PAGE_RESULT_NO_COMPLETION: u32 = 5;
/// Only part of the entry was completed.
pub const LC_READ_PAGE_RESULT_PARTIAL: u32 = 6;
/// The transport to the device failed.
pub const LC_READ_PAGE_RESULT_TRANSPORT_ERROR: u32 = 7;
/// The device answered with a malformed reply.
pub const LC_READ_PAGE_RESULT_PROTOCOL_ERROR: u32 = 8;
/// Failed for an unspecified reason (e.g. outside the memory map).
pub const LC_READ_PAGE_RESULT_UNSPECIFIED_ERROR: u32 = 9;
/// The entry was not issued to the device.
pub const LC_READ_PAGE_RESULT_NOT_ISSUED: u32 = 10;

/// Optional replacement for LeechCore's `printf`.
pub type PfnPrintf = Option<unsafe extern "C" fn(format: *const c_char, ...) -> c_int>;

/// Configuration passed to `LcCreate` / `LcCreateEx`; some fields are
/// written back by LeechCore.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LC_CONFIG {
    /// Must be [`LC_CONFIG_VERSION`].
    pub dwVersion: u32,
    /// `LC_CONFIG_PRINTF_*` bits.
    pub dwPrintfVerbosity: u32,
    /// NUL-terminated device string.
    pub szDevice: [c_char; MAX_PATH],
    /// NUL-terminated remote string, or empty.
    pub szRemote: [c_char; MAX_PATH],
    /// Optional printf replacement.
    pub pfn_printf_opt: PfnPrintf,
    /// In: highest physical address (0 = auto). Out: as detected.
    pub paMax: u64,
    /// Out: memory changes while read.
    pub fVolatile: BOOL,
    /// Out: device can be written.
    pub fWritable: BOOL,
    /// Out: device is remote.
    pub fRemote: BOOL,
    /// In: disable compression of remote traffic.
    pub fRemoteDisableCompress: BOOL,
    /// Out: device type name, e.g. `file`, `qemu`, `fpga`.
    pub szDeviceName: [c_char; MAX_PATH],
}

impl LC_CONFIG {
    /// A zeroed config with the version field set.
    pub fn new() -> Self {
        LC_CONFIG {
            dwVersion: LC_CONFIG_VERSION,
            dwPrintfVerbosity: 0,
            szDevice: [0; MAX_PATH],
            szRemote: [0; MAX_PATH],
            pfn_printf_opt: None,
            paMax: 0,
            fVolatile: 0,
            fWritable: 0,
            fRemote: 0,
            fRemoteDisableCompress: 0,
            szDeviceName: [0; MAX_PATH],
        }
    }
}

impl Default for LC_CONFIG {
    fn default() -> Self {
        Self::new()
    }
}

/// Error information `LcCreateEx` may return; freed with `LcMemFree`.
/// `cwszUserText` UTF-16 code units follow the fixed part.
#[repr(C)]
pub struct LC_CONFIG_ERRORINFO {
    /// Should be [`LC_CONFIG_ERRORINFO_VERSION`].
    pub dwVersion: u32,
    /// Size of the whole allocation, text included.
    pub cbStruct: u32,
    /// Reserved.
    pub _FutureUse: [u32; 16],
    /// The device asks the user for input.
    pub fUserInputRequest: BOOL,
    /// Number of UTF-16 code units in `wszUserText`.
    pub cwszUserText: u32,
    /// Start of the UTF-16 user text (flexible array member).
    pub wszUserText: [u16; 0],
}

/// One page-bounded piece of a scatter read or write.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MEM_SCATTER {
    /// Must be [`MEM_SCATTER_VERSION`].
    pub version: u32,
    /// Out: nonzero when this entry succeeded.
    pub f: BOOL,
    /// Physical address; [`MEM_SCATTER_ADDR_INVALID`] = skipped.
    pub qwA: u64,
    /// Data buffer of `cb` bytes.
    pub pb: *mut u8,
    /// Byte count.
    pub cb: u32,
    /// LeechCore internal.
    pub iStack: u32,
    /// LeechCore internal.
    pub vStack: [u64; 12],
}

impl MEM_SCATTER {
    /// An entry for `cb` bytes at `qwA` into `pb`, not yet completed.
    pub fn new(qwA: u64, pb: *mut u8, cb: u32) -> Self {
        MEM_SCATTER {
            version: MEM_SCATTER_VERSION,
            f: 0,
            qwA,
            pb,
            cb,
            iStack: 0,
            vStack: [0; 12],
        }
    }
}

/// One range of the memory map in the `*_STRUCT` memory map commands.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LC_MEMMAP_ENTRY {
    /// Physical start address.
    pub pa: u64,
    /// Size in bytes.
    pub cb: u64,
    /// Where the range is found in the device (e.g. its offset in a file).
    pub paRemap: u64,
}

/// `LcCreate`.
pub type FnLcCreate = unsafe extern "C" fn(pLcCreateConfig: *mut LC_CONFIG) -> HANDLE;
/// `LcCreateEx`.
pub type FnLcCreateEx = unsafe extern "C" fn(
    pLcCreateConfig: *mut LC_CONFIG,
    ppLcCreateErrorInfo: *mut *mut LC_CONFIG_ERRORINFO,
) -> HANDLE;
/// `LcClose`.
pub type FnLcClose = unsafe extern "C" fn(hLC: HANDLE);
/// `LcMemFree`.
pub type FnLcMemFree = unsafe extern "C" fn(pv: *mut c_void);
/// `LcAllocScatter1`.
pub type FnLcAllocScatter1 =
    unsafe extern "C" fn(cMEMs: u32, pppMEMs: *mut *mut *mut MEM_SCATTER) -> BOOL;
/// `LcAllocScatter2`.
pub type FnLcAllocScatter2 = unsafe extern "C" fn(
    cbData: u32,
    pbData: *mut u8,
    cMEMs: u32,
    pppMEMs: *mut *mut *mut MEM_SCATTER,
) -> BOOL;
/// `LcAllocScatter3`.
pub type FnLcAllocScatter3 = unsafe extern "C" fn(
    pbDataFirstPage: *mut u8,
    pbDataLastPage: *mut u8,
    cbData: u32,
    pbData: *mut u8,
    cMEMs: u32,
    pppMEMs: *mut *mut *mut MEM_SCATTER,
) -> BOOL;
/// `LcRead` (buggy for small reads; see the crate docs of `leechio`).
pub type FnLcRead = unsafe extern "C" fn(hLC: HANDLE, pa: u64, cb: u32, pb: *mut u8) -> BOOL;
/// `LcReadScatter`.
pub type FnLcReadScatter =
    unsafe extern "C" fn(hLC: HANDLE, cMEMs: u32, ppMEMs: *mut *mut MEM_SCATTER);
/// `LcReadScatterEx`.
pub type FnLcReadScatterEx = unsafe extern "C" fn(
    hLC: HANDLE,
    cMEMs: u32,
    ppMEMs: *mut *mut MEM_SCATTER,
    pResults: *mut u32,
) -> BOOL;
/// `LcWrite` (reports success even when nothing was written).
pub type FnLcWrite = unsafe extern "C" fn(hLC: HANDLE, pa: u64, cb: u32, pb: *mut u8) -> BOOL;
/// `LcWriteScatter`.
pub type FnLcWriteScatter =
    unsafe extern "C" fn(hLC: HANDLE, cMEMs: u32, ppMEMs: *mut *mut MEM_SCATTER);
/// `LcGetOption`.
pub type FnLcGetOption =
    unsafe extern "C" fn(hLC: HANDLE, fOption: u64, pqwValue: *mut u64) -> BOOL;
/// `LcSetOption`.
pub type FnLcSetOption = unsafe extern "C" fn(hLC: HANDLE, fOption: u64, qwValue: u64) -> BOOL;
/// `LcCommand`.
pub type FnLcCommand = unsafe extern "C" fn(
    hLC: HANDLE,
    fCommand: u64,
    cbDataIn: u32,
    pbDataIn: *mut u8,
    ppbDataOut: *mut *mut u8,
    pcbDataOut: *mut u32,
) -> BOOL;

// The layouts LeechCore 2.23 was checked to use on x86-64 Linux.
const _: () = {
    assert!(size_of::<LC_CONFIG>() == 824);
    assert!(offset_of!(LC_CONFIG, dwVersion) == 0);
    assert!(offset_of!(LC_CONFIG, dwPrintfVerbosity) == 4);
    assert!(offset_of!(LC_CONFIG, szDevice) == 8);
    assert!(offset_of!(LC_CONFIG, szRemote) == 268);
    assert!(offset_of!(LC_CONFIG, pfn_printf_opt) == 528);
    assert!(offset_of!(LC_CONFIG, paMax) == 536);
    assert!(offset_of!(LC_CONFIG, fVolatile) == 544);
    assert!(offset_of!(LC_CONFIG, fWritable) == 548);
    assert!(offset_of!(LC_CONFIG, fRemote) == 552);
    assert!(offset_of!(LC_CONFIG, fRemoteDisableCompress) == 556);
    assert!(offset_of!(LC_CONFIG, szDeviceName) == 560);

    assert!(size_of::<MEM_SCATTER>() == 128);
    assert!(offset_of!(MEM_SCATTER, version) == 0);
    assert!(offset_of!(MEM_SCATTER, f) == 4);
    assert!(offset_of!(MEM_SCATTER, qwA) == 8);
    assert!(offset_of!(MEM_SCATTER, pb) == 16);
    assert!(offset_of!(MEM_SCATTER, cb) == 24);
    assert!(offset_of!(MEM_SCATTER, iStack) == 28);
    assert!(offset_of!(MEM_SCATTER, vStack) == 32);

    assert!(size_of::<LC_MEMMAP_ENTRY>() == 24);
    assert!(offset_of!(LC_MEMMAP_ENTRY, cb) == 8);
    assert!(offset_of!(LC_MEMMAP_ENTRY, paRemap) == 16);

    assert!(offset_of!(LC_CONFIG_ERRORINFO, fUserInputRequest) == 72);
    assert!(offset_of!(LC_CONFIG_ERRORINFO, cwszUserText) == 76);
    assert!(offset_of!(LC_CONFIG_ERRORINFO, wszUserText) == 80);
};
