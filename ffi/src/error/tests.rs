//! Statuses and messages: a panic becomes a status and a message, strings
//! are cut and terminated, every reason of the engine and every status has
//! its own status and description.

use super::*;

fn last_message() -> String {
    let mut buf = [0 as c_char; 256];
    // SAFETY: a local buffer of the given size.
    let status = unsafe { leechio_last_error_message(buf.as_mut_ptr(), 256, std::ptr::null_mut()) };
    assert_eq!(status, LEECHIO_OK);
    // SAFETY: copy_string NUL-terminates.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn panics_become_a_status_and_a_message() {
    let status = guard("leechio_test", || panic!("boom {}", 7));
    assert_eq!(status, LEECHIO_PANIC);
    assert_eq!(last_message(), "leechio_test: panicked: boom 7");
    // A success leaves the last message as it was.
    assert_eq!(guard("leechio_other", || Ok(())), LEECHIO_OK);
    assert_eq!(last_message(), "leechio_test: panicked: boom 7");
}

#[test]
fn strings_are_truncated_terminated_and_measured() {
    let mut buf = [0x7f as c_char; 4];
    let mut len = 0usize;
    // SAFETY: a local buffer of the given size.
    let r = unsafe { copy_string(b"hello", buf.as_mut_ptr(), 4, &mut len) };
    assert_eq!(r.unwrap_err().status, LEECHIO_BUFFER_TOO_SMALL);
    assert_eq!(len, 5);
    assert_eq!(buf.map(|c| c as u8), *b"hel\0");
    // SAFETY: a length query with no buffer.
    let r = unsafe { copy_string(b"hello!", std::ptr::null_mut(), 0, &mut len) };
    assert!(r.is_ok());
    assert_eq!(len, 6);
    // SAFETY: as above; NULL with a length is refused before any write.
    let r = unsafe { copy_string(b"x", std::ptr::null_mut(), 3, &mut len) };
    assert_eq!(r.unwrap_err().status, LEECHIO_NULL_ARGUMENT);
    let mut buf = [0 as c_char; 6];
    // SAFETY: a local buffer of the given size.
    unsafe { copy_string(b"hello", buf.as_mut_ptr(), 6, std::ptr::null_mut()) }.unwrap();
    assert_eq!(buf.map(|c| c as u8), *b"hello\0");
}

#[test]
fn every_reason_of_the_engine_has_a_status_of_its_own() {
    use leechio_rs::EntryRule;
    let reasons = [
        PageError::UnsupportedRequest,
        PageError::CompleterAbort,
        PageError::NoCompletion,
        PageError::Partial,
        PageError::TransportError,
        PageError::ProtocolError,
        PageError::Unspecified,
        PageError::NotIssued,
        PageError::WriteFailed,
        PageError::ReadOnly,
        PageError::InvalidEntry(EntryRule::TooLong),
        PageError::OutOfRange,
        PageError::AddressOverflow,
        PageError::TargetGone,
        PageError::TimedOut,
        PageError::Disconnected,
        PageError::NotMapped,
        PageError::NonCanonical,
        PageError::ReservedBits,
    ];
    let statuses: std::collections::HashSet<_> = reasons
        .iter()
        .map(|&r| leechio_status::from_page_error(r) as u32)
        .collect();
    assert_eq!(statuses.len(), reasons.len());
    assert!(!statuses.contains(&(LEECHIO_UNKNOWN_REASON as u32)));
}

#[test]
fn every_status_has_its_own_description() {
    let mut seen = std::collections::HashSet::new();
    for s in ALL_STATUSES {
        // SAFETY: the function returns static NUL-terminated strings.
        let text = unsafe { CStr::from_ptr(leechio_status_message(s as u32)) };
        assert!(
            seen.insert(text.to_bytes().to_vec()),
            "{s:?} repeats a description"
        );
    }
    // SAFETY: as above.
    let unknown = unsafe { CStr::from_ptr(leechio_status_message(12345)) };
    assert_eq!(unknown.to_bytes(), b"unknown status");
}
