//! Files a user names by path, such as a memory map: only a regular file is
//! read, and only up to a size, so a pipe named by mistake gives an error
//! at once instead of waiting for a writer for ever, and `/dev/zero` one
//! instead of gigabytes read.

use std::fs::{File, FileType};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// What a file that is not a regular file is, in words for a message
/// (`"a pipe"`); `None` for a regular file.
pub fn non_regular_kind(t: FileType) -> Option<&'static str> {
    Some(if t.is_file() {
        return None;
    } else if t.is_dir() {
        "a folder"
    } else if t.is_fifo() {
        "a pipe"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    })
}

/// The regular file at `path` (symbolic links followed), opened for
/// reading. The error says why in words, without the path, which the
/// caller puts in front.
pub fn open_regular_file(path: &Path) -> Result<File, String> {
    // Opened without blocking: opening a pipe for reading otherwise waits
    // for a writer. The type is then asked of the file opened, not of the
    // path, which could be swapped between the two.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    match non_regular_kind(meta.file_type()) {
        Some(kind) => Err(format!("it is {kind}, not a regular file")),
        None => Ok(file),
    }
}

/// The text of the regular file at `path` (see [`open_regular_file`]),
/// which may be at most `max` bytes long.
pub fn read_regular_file(path: &Path, max: u64) -> Result<String, String> {
    let file = open_regular_file(path)?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    let too_long = |len: u64| format!("it is {len} bytes long, more than the {max} bytes allowed");
    if meta.len() > max {
        return Err(too_long(meta.len()));
    }
    // A file that grows while it is read stops at the limit too.
    let mut text = String::new();
    file.take(max + 1)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > max {
        return Err(too_long(text.len() as u64));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// `read_regular_file(path, max)` on another thread, given 5 s: a
    /// hang fails the test instead of stopping it.
    fn read_within_5_s(path: &Path, max: u64) -> Result<String, String> {
        let (tx, rx) = mpsc::channel();
        let path = path.to_path_buf();
        std::thread::spawn(move || tx.send(read_regular_file(&path, max)));
        rx.recv_timeout(Duration::from_secs(5))
            .expect("no answer within 5 s")
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: files
    fn a_pipe_a_device_and_a_folder_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("map.fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string naming a path in this test's folder.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(
            read_within_5_s(&fifo, 100),
            Err("it is a pipe, not a regular file".into())
        );
        assert_eq!(
            read_within_5_s(Path::new("/dev/zero"), 100),
            Err("it is a character device, not a regular file".into())
        );
        assert_eq!(
            read_within_5_s(dir.path(), 100),
            Err("it is a folder, not a regular file".into())
        );
        // A link is followed to what it names.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        assert_eq!(
            read_within_5_s(&link, 100),
            Err("it is a pipe, not a regular file".into())
        );
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: files
    fn a_file_is_read_up_to_the_limit_and_refused_past_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("map.txt");
        std::fs::write(&path, "0 1000\n").unwrap();
        assert_eq!(read_regular_file(&path, 7), Ok("0 1000\n".into()));
        assert_eq!(
            read_regular_file(&path, 6),
            Err("it is 7 bytes long, more than the 6 bytes allowed".into())
        );
        let missing = read_regular_file(&dir.path().join("none"), 7).unwrap_err();
        assert!(missing.contains("No such file"), "{missing}");
    }
}
