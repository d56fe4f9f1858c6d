//! The C side of opening a device: `LcCreateEx`, the fixed-size strings of
//! `LC_CONFIG`, and LeechCore's error info.

use std::ffi::c_char;
use std::ptr;

use leechcore_sys::{self as sys, Library, HANDLE, LC_CONFIG};

use crate::Error;

/// Opens the device `config` describes; on failure, LeechCore's message
/// if it gave one.
pub(super) fn create(lib: &Library, config: &mut LC_CONFIG) -> Result<HANDLE, Option<String>> {
    let mut error_info: *mut sys::LC_CONFIG_ERRORINFO = ptr::null_mut();
    // SAFETY: `config` is a valid, versioned LC_CONFIG with NUL-terminated
    // strings; LeechCore writes only into it and `error_info`.
    let raw = unsafe { (lib.LcCreateEx)(config, &mut error_info) };
    let message = take_error_info(lib, error_info);
    if raw.is_null() {
        Err(message)
    } else {
        Ok(raw)
    }
}

/// Copies `value` into a fixed NUL-terminated field, refusing what does not
/// fit rather than cutting it.
pub(super) fn copy_c_string(
    field: &mut [c_char; sys::MAX_PATH],
    value: &str,
    what: &str,
) -> Result<(), Error> {
    if value.as_bytes().contains(&0) {
        return Err(Error::InvalidConfig(format!(
            "the {what} contains a NUL byte"
        )));
    }
    if value.len() >= sys::MAX_PATH {
        return Err(Error::InvalidConfig(format!(
            "the {what} is {} bytes long; LeechCore takes at most {}",
            value.len(),
            sys::MAX_PATH - 1
        )));
    }
    for (dst, &src) in field.iter_mut().zip(value.as_bytes()) {
        *dst = src as c_char;
    }
    field[value.len()] = 0;
    Ok(())
}

pub(super) fn c_string(field: &[c_char; sys::MAX_PATH]) -> String {
    let bytes: Vec<u8> = field
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The user text of LeechCore's error info, which is then freed.
fn take_error_info(lib: &Library, info: *mut sys::LC_CONFIG_ERRORINFO) -> Option<String> {
    if info.is_null() {
        return None;
    }
    // SAFETY: LeechCore allocated `info` with `cbStruct` bytes: the fixed
    // part, then `cwszUserText` UTF-16 units. The count is capped by the size.
    let text = unsafe {
        let fixed = std::mem::offset_of!(sys::LC_CONFIG_ERRORINFO, wszUserText);
        let units = ((*info).cbStruct as usize).saturating_sub(fixed) / 2;
        let units = units.min((*info).cwszUserText as usize);
        let valid = (*info).dwVersion == sys::LC_CONFIG_ERRORINFO_VERSION && units > 0;
        valid.then(|| {
            String::from_utf16_lossy(std::slice::from_raw_parts(
                (*info).wszUserText.as_ptr(),
                units,
            ))
        })
    };
    // SAFETY: allocated by LeechCore, freed once.
    unsafe { (lib.LcMemFree)(info.cast()) };
    text.map(|t| t.trim_end_matches('\0').trim().to_string())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_strings_that_do_not_fit_are_refused_not_cut() {
        let mut field = [0 as c_char; sys::MAX_PATH];
        assert!(copy_c_string(&mut field, &"x".repeat(259), "device string").is_ok());
        assert_eq!(field[259], 0);
        let err = copy_c_string(&mut field, &"x".repeat(260), "device string").unwrap_err();
        assert!(err.to_string().contains("260 bytes long"), "{err}");
        assert!(copy_c_string(&mut field, "a\0b", "device string").is_err());
    }
}
