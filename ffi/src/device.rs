//! Opening and closing a device, and what it tells about itself.

use crate::handle::Handle;
use std::ffi::{c_char, CStr};
use std::path::PathBuf;
use std::sync::Arc;

use leechio_rs::{Call, DeviceConfig, EngineConfig, LeechCore, Memory};

use crate::error::{copy_string, guard, non_null, Fail};
use crate::leechio_status::{self, *};

/// An open LeechCore device with its batching engine. Safe to use from
/// several threads at once. Close it with `leechio_device_close`.
pub struct leechio_device {
    pub(crate) device: Arc<LeechCore>,
    pub(crate) mem: Memory,
}

/// What a device reports about itself (see `leechio_device_get_info`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct leechio_device_info {
    /// One past the highest physical address the device serves, now.
    pub max_address: u64,
    /// Major version of the loaded LeechCore.
    pub leechcore_major: u64,
    /// Minor version of the loaded LeechCore.
    pub leechcore_minor: u64,
    /// Revision of the loaded LeechCore.
    pub leechcore_revision: u64,
    /// Writes are refused (e.g. a file opened without `write=1`).
    pub read_only: bool,
    /// The target's memory changes while it is read (a live system).
    pub is_volatile: bool,
    /// The device is reached through a remote agent.
    pub remote: bool,
    /// Always 0: explicit padding, so that every byte of the struct is
    /// defined (it may be compared with `memcmp` or hashed).
    pub padding: [u8; 5],
}

/// One range of the physical memory map.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct leechio_memory_range {
    /// First physical address of the range.
    pub start: u64,
    /// Size in bytes.
    pub size: u64,
    /// Where `start` is found in the device (for a file: its offset).
    pub remap: u64,
}

/// The kinds of call LeechCore counts, for `leechio_device_call_count`.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum leechio_call {
    /// Device opens.
    LEECHIO_CALL_OPEN = 0,
    /// `LcRead`.
    LEECHIO_CALL_READ = 1,
    /// `LcReadScatter`: one per device round trip of reads.
    LEECHIO_CALL_READ_SCATTER = 2,
    /// `LcWrite`.
    LEECHIO_CALL_WRITE = 3,
    /// `LcWriteScatter`: one per device round trip of writes.
    LEECHIO_CALL_WRITE_SCATTER = 4,
    /// `LcGetOption`.
    LEECHIO_CALL_GET_OPTION = 5,
    /// `LcSetOption`.
    LEECHIO_CALL_SET_OPTION = 6,
    /// `LcCommand`.
    LEECHIO_CALL_COMMAND = 7,
}

/// The library's own version, e.g. "0.1.0". The string is static: never
/// free it.
#[no_mangle]
pub extern "C" fn leechio_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Reads an optional C string argument.
///
/// # Safety
/// `p` must be NULL or a valid NUL-terminated string.
unsafe fn optional_str<'a>(p: *const c_char, name: &str) -> Result<Option<&'a str>, Fail> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map(Some).map_err(|_| {
        Fail::new(
            LEECHIO_INVALID_ARGUMENT,
            format!("`{name}` is not valid UTF-8"),
        )
    })
}

impl Handle for leechio_device {
    const NAME: &'static str = "device";
}

/// Opens a LeechCore device and its engine.
///
/// - `device`: a LeechCore device string, e.g. `"file:///tmp/mem.raw"`,
///   `"file://file=/tmp/mem.raw,write=1"`, `"fpga"`,
///   `"qemu://shm=NAME,qmp=SOCKET"`.
/// - `remote`: a LeechCore remote string (`"rpc://..."`), or NULL.
/// - `library`: the path of the `leechcore.so` file to load (the only one
///   tried then), or NULL to search: the file the environment variable
///   `LEECHCORE_LIB` names (a file path, not a folder; when it is set and
///   not empty, nothing else is tried), else `leechcore.so` beside libleechio.so
///   (beside the program, for the static library), the dynamic linker's
///   `leechcore.so` and `libleechcore.so`, and the build tree's
///   `target/leechcore/`. Keep `leechcore.so` beside its
///   `leechcore_device_*.so` plugins.
/// - `out`: receives the handle, or NULL on failure.
///
/// Returns `LEECHIO_OK`, `LEECHIO_NULL_ARGUMENT`, `LEECHIO_INVALID_ARGUMENT`,
/// `LEECHIO_LOAD_FAILED` or `LEECHIO_OPEN_FAILED` (the message says why).
///
/// NULL: `remote` and `library` may be NULL; `device` and `out` may not
/// (`LEECHIO_NULL_ARGUMENT`).
///
/// # Safety
/// Non-NULL strings must be NUL-terminated; `out` must be writable.
#[no_mangle]
pub unsafe extern "C" fn leechio_device_open(
    device: *const c_char,
    remote: *const c_char,
    library: *const c_char,
    out: *mut *mut leechio_device,
) -> leechio_status {
    guard("leechio_device_open", || {
        non_null(out, "out")?;
        // SAFETY: checked non-NULL; NULL on every failure below.
        unsafe { *out = std::ptr::null_mut() };
        non_null(device, "device")?;
        // SAFETY: the caller's strings are NULL or NUL-terminated.
        let (name, remote, library) = unsafe {
            (
                optional_str(device, "device")?.unwrap_or_default(),
                optional_str(remote, "remote")?,
                optional_str(library, "library")?,
            )
        };
        let config = DeviceConfig {
            remote: remote.map(str::to_owned),
            library: library.map(PathBuf::from),
            ..DeviceConfig::new(name)
        };
        let device = Arc::new(LeechCore::open(&config)?);
        let mem = Memory::with_config(device.clone(), EngineConfig::default());
        // SAFETY: checked non-NULL above.
        unsafe { leechio_device { device, mem }.give(out) };
        Ok(())
    })
}

/// Closes a device handle. LeechCore closes the device once no address
/// space or queue made from it is left either. NULL is ignored.
///
/// # Safety
/// `device` must be NULL or a handle from `leechio_device_open`, not used
/// again afterwards (nor closed from a callback of a call on it).
#[no_mangle]
pub unsafe extern "C" fn leechio_device_close(device: *mut leechio_device) {
    guard("leechio_device_close", || {
        // SAFETY: NULL or a handle closed once (the caller's contract).
        unsafe { leechio_device::free(device) };
        Ok(())
    });
}

/// Fills `*out` with what the device reports: max address (read now),
/// LeechCore's version, read-only, volatile and remote flags.
///
/// NULL: neither `device` nor `out` may be NULL (`LEECHIO_NULL_ARGUMENT`).
///
/// # Safety
/// `device` must be a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn leechio_device_get_info(
    device: *const leechio_device,
    out: *mut leechio_device_info,
) -> leechio_status {
    guard("leechio_device_get_info", || {
        // SAFETY: the caller's contract.
        let d = unsafe { leechio_device::lend(device)? };
        non_null(out, "out")?;
        let info = d.device.info();
        let filled = leechio_device_info {
            max_address: d.device.max_address(),
            leechcore_major: info.version.major,
            leechcore_minor: info.version.minor,
            leechcore_revision: info.version.revision,
            read_only: info.read_only,
            is_volatile: info.volatile,
            remote: info.remote,
            padding: [0; 5],
        };
        // SAFETY: checked non-NULL; the caller passes a valid pointer.
        unsafe { *out = filled };
        Ok(())
    })
}

/// Copies a text property of the device out, string-style.
///
/// # Safety
/// As for the exported functions that call it.
unsafe fn device_text(
    function: &str,
    device: *const leechio_device,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
    text: impl FnOnce(&leechio_device) -> String,
) -> leechio_status {
    guard(function, || {
        // SAFETY: the caller's contract.
        let d = unsafe { leechio_device::lend(device)? };
        let s = text(d);
        // SAFETY: the caller's contract.
        unsafe { copy_string(s.as_bytes(), buf, len, out_len) }
    })
}

/// Copies the device type name (e.g. "file", "fpga", "qemu") into `buf` as
/// a NUL-terminated string (truncated if `len` is too small, then
/// `LEECHIO_BUFFER_TOO_SMALL`); `*out_len` (if not NULL) gets its length.
/// `buf` may be NULL when `len` is 0, to ask for the length: that query
/// returns `LEECHIO_OK` and is no failure (the last error stays).
///
/// NULL: `out_len` may be NULL, and `buf` when `len` is 0; `device` may
/// not (`LEECHIO_NULL_ARGUMENT`).
///
/// # Safety
/// `device` must be a live handle; a non-NULL `buf` writable for `len`
/// bytes; a non-NULL `out_len` writable.
#[no_mangle]
pub unsafe extern "C" fn leechio_device_name(
    device: *const leechio_device,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> leechio_status {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        device_text("leechio_device_name", device, buf, len, out_len, |d| {
            d.device.info().name.clone()
        })
    }
}

/// Copies the version of the LeechCore the device was opened with, e.g.
/// "2.23.3", like `leechio_device_name`.
///
/// # Safety
/// As for `leechio_device_name`.
#[no_mangle]
pub unsafe extern "C" fn leechio_device_leechcore_version(
    device: *const leechio_device,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> leechio_status {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        device_text(
            "leechio_device_leechcore_version",
            device,
            buf,
            len,
            out_len,
            |d| d.device.info().version.to_string(),
        )
    }
}

/// Copies the path of the `leechcore.so` in use, like `leechio_device_name`.
///
/// # Safety
/// As for `leechio_device_name`.
#[no_mangle]
pub unsafe extern "C" fn leechio_device_library_path(
    device: *const leechio_device,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> leechio_status {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        device_text(
            "leechio_device_library_path",
            device,
            buf,
            len,
            out_len,
            |d| d.device.info().library.display().to_string(),
        )
    }
}

/// Copies the device's physical memory map, as LeechCore holds it now:
/// `*count` (if `count` is not NULL) gets the number of ranges, and the
/// first `capacity` of them go to `ranges`. Returns
/// `LEECHIO_BUFFER_TOO_SMALL` when `capacity` is less than that number,
/// except for a query of the count alone (`ranges` NULL and `capacity` 0),
/// which returns `LEECHIO_OK`; `LEECHIO_DEVICE_ERROR` when LeechCore's map
/// is unreadable. No range has size 0, so with `count` NULL a zeroed
/// `ranges` array ends at its first range of size 0 (or at `capacity`).
///
/// NULL: `count` may be NULL, and `ranges` when `capacity` is 0; `device`
/// may not (`LEECHIO_NULL_ARGUMENT`).
///
/// # Safety
/// `device` must be a live handle; a non-NULL `ranges` writable for
/// `capacity` elements; a non-NULL `count` writable.
#[no_mangle]
pub unsafe extern "C" fn leechio_device_memory_map(
    device: *const leechio_device,
    ranges: *mut leechio_memory_range,
    capacity: usize,
    count: *mut usize,
) -> leechio_status {
    guard("leechio_device_memory_map", || {
        // SAFETY: the caller's contract.
        let d = unsafe { leechio_device::lend(device)? };
        if ranges.is_null() && capacity > 0 {
            return Err(Fail::new(
                LEECHIO_NULL_ARGUMENT,
                "`ranges` is NULL but `capacity` is not 0",
            ));
        }
        let map = d.device.memory_map()?;
        let all = map.ranges();
        if !count.is_null() {
            // SAFETY: non-NULL; the caller passes a valid pointer.
            unsafe { *count = all.len() };
        }
        for (i, r) in all.iter().take(capacity).enumerate() {
            let range = leechio_memory_range {
                start: r.start,
                size: r.size,
                remap: r.remap,
            };
            // SAFETY: i < capacity, and `ranges` holds `capacity` elements.
            unsafe { ranges.add(i).write(range) };
        }
        if all.len() > capacity && !ranges.is_null() {
            return Err(Fail::new(
                LEECHIO_BUFFER_TOO_SMALL,
                format!(
                    "the map has {} ranges; room was given for {capacity}",
                    all.len()
                ),
            ));
        }
        Ok(())
    })
}

/// Stores in `*out` how many calls of `kind` (a `leechio_call` value)
/// LeechCore has counted on this device. `LEECHIO_CALL_READ_SCATTER` is
/// the number of device round trips made for reads.
///
/// NULL: neither `device` nor `out` may be NULL (`LEECHIO_NULL_ARGUMENT`).
///
/// # Safety
/// `device` must be a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn leechio_device_call_count(
    device: *const leechio_device,
    kind: u32,
    out: *mut u64,
) -> leechio_status {
    guard("leechio_device_call_count", || {
        // SAFETY: the caller's contract.
        let d = unsafe { leechio_device::lend(device)? };
        non_null(out, "out")?;
        // `kind` comes from C as a plain number: matched, never transmuted.
        let call = match kind {
            0 => Call::Open,
            1 => Call::Read,
            2 => Call::ReadScatter,
            3 => Call::Write,
            4 => Call::WriteScatter,
            5 => Call::GetOption,
            6 => Call::SetOption,
            7 => Call::Command,
            _ => {
                return Err(Fail::new(
                    LEECHIO_INVALID_ARGUMENT,
                    format!("{kind} is not a leechio_call"),
                ))
            }
        };
        let n = d.device.call_count(call);
        // SAFETY: checked non-NULL.
        unsafe { *out = n };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_kinds_match_the_enum() {
        for (kind, value) in [
            (leechio_call::LEECHIO_CALL_OPEN, 0),
            (leechio_call::LEECHIO_CALL_READ_SCATTER, 2),
            (leechio_call::LEECHIO_CALL_COMMAND, 7),
        ] {
            assert_eq!(kind as u32, value);
        }
    }

    #[test]
    fn null_arguments_are_refused_not_dereferenced() {
        let mut out = std::ptr::dangling_mut::<leechio_device>();
        // SAFETY: NULL strings and a valid out pointer.
        let s = unsafe {
            leechio_device_open(
                std::ptr::null(),
                std::ptr::null(),
                std::ptr::null(),
                &mut out,
            )
        };
        assert_eq!(s, LEECHIO_NULL_ARGUMENT);
        assert!(out.is_null(), "out is cleared on failure");
        // SAFETY: NULL handles are checked before use.
        unsafe {
            assert_eq!(
                leechio_device_get_info(std::ptr::null(), std::ptr::null_mut()),
                LEECHIO_NULL_ARGUMENT
            );
            let mut n = 0;
            assert_eq!(
                leechio_device_call_count(std::ptr::null(), 2, &mut n),
                LEECHIO_NULL_ARGUMENT
            );
            leechio_device_close(std::ptr::null_mut());
        }
        // SAFETY: static NUL-terminated string.
        let v = unsafe { CStr::from_ptr(leechio_version()) };
        assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }
}
