//! Why a device did not open: LeechCore rarely says, so the usual causes
//! are found from the device string and the files it names, and what
//! LeechCore would open wrongly (a folder as an image) is refused first.

use std::path::Path;

use super::device_string::{is_device_type, DeviceString};
use super::{fpga, qemu};

/// Smallest image LeechCore's file device opens.
const FILE_DEVICE_MIN_SIZE: u64 = 16 << 20;

/// LeechCore rarely says why it failed; guess the usual causes from the
/// device string so the user gets more than "failed".
pub(super) fn diagnose_open_failure(device: &DeviceString, library: &Path) -> String {
    let generic = "LeechCore gave no reason; open with more verbosity to see its messages";
    // A bare `file` names no image: LeechCore looks for one named "".
    let image = match device.image_path(library) {
        Some(path) => Some(path),
        None => (device.kind() == "file").then_some(""),
    };
    if let Some(path) = image {
        return match std::fs::metadata(path) {
            Err(e) => format!("cannot open image file `{path}`: {e}"),
            Ok(m) if m.is_dir() => format!("`{path}` is a folder, not an image file"),
            Ok(m) if m.len() < FILE_DEVICE_MIN_SIZE => format!(
                "image file `{path}` is {} bytes; LeechCore's file device refuses files under 16 MiB",
                m.len()
            ),
            Ok(_) => format!("LeechCore did not recognise `{path}` as a memory image; {generic}"),
        };
    }
    match device.kind() {
        "qemu" => qemu::diagnose_open_failure(&device.qemu().cloned().unwrap_or_default(), generic),
        "fpga" => fpga::diagnose(&fpga::UsbView::this_machine(), library, generic),
        k if !is_device_type(k, library) => {
            let dir = library.parent().unwrap_or(Path::new("."));
            format!(
                "unknown device type `{k}`: not built into LeechCore, and no plugin {} exists",
                dir.join(format!("leechcore_device_{k}.so")).display()
            )
        }
        _ => generic.into(),
    }
}

/// LeechCore's file device "opens" a folder as a 4 GiB image whose every
/// read fails, and anything but a file or a block device is no image
/// either: refuse them before opening. A path that cannot be looked at is
/// left to LeechCore (and explained by [`diagnose_open_failure`]).
pub(super) fn check_image_file(device: &DeviceString, library: &Path) -> Result<(), String> {
    let Some(path) = device.image_path(library) else {
        return Ok(());
    };
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(());
    };
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    if kind.is_dir() {
        Err(format!("`{path}` is a folder, not an image file"))
    } else if !kind.is_file() && !kind.is_block_device() {
        Err(format!(
            "`{path}` is not an image file (neither a regular file nor a block device)"
        ))
    } else {
        Ok(())
    }
}

/// Why opening through the remote `remote` failed: LeechCore's message if
/// it gave one, always naming the remote string, the likely cause.
pub(super) fn remote_failure(remote: &str, message: Option<String>) -> String {
    let hint = format!(
        "the remote `{remote}` is the likely cause: check the remote string \
         (rpc://SPN:HOST or smb://…) and that a LeechAgent answers there; the device \
         string is opened by the agent, on its system"
    );
    match message {
        Some(m) => format!("{m} ({hint})"),
        None => hint,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: files
    fn diagnosis_names_the_likely_cause() {
        let lib = Path::new("/nowhere/leechcore.so");
        let diagnose_open_failure = |device: &str, lib: &Path| {
            super::diagnose_open_failure(&DeviceString::parse(device), lib)
        };
        assert!(diagnose_open_failure("file:///no/such.raw", lib).contains("No such file"));
        assert!(
            diagnose_open_failure("file://file=/no/such.raw,write=1", lib).contains("/no/such.raw")
        );
        assert!(
            diagnose_open_failure("FILE://WRITE=1,File=/no/such.raw", lib)
                .contains("`/no/such.raw`")
        );
        assert!(diagnose_open_failure("bogus://x", lib).contains("unknown device type `bogus`"));
        assert!(diagnose_open_failure("qemu://shm=none-such-xyz,qmp=q", lib)
            .contains("/dev/shm/none-such-xyz"));
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: files and a process
    fn folders_and_other_non_images_are_refused_before_opening() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        // Plugins are looked for beside the library.
        let lib = dir.path().join("leechcore.so");
        std::fs::write(dir.path().join("leechcore_device_qemu.so"), b"").unwrap();
        let check_image_file =
            |device: &str| super::check_image_file(&DeviceString::parse(device), &lib);
        let image_path = |device: &str, lib: &Path| {
            DeviceString::parse(device)
                .image_path(lib)
                .map(String::from)
        };
        // As `file://`, and as a bare path, which LeechCore also opens as
        // an image.
        for device in [
            format!("file://{d}"),
            format!("FILE://file={d},write=1"),
            d.to_string(),
        ] {
            assert_eq!(
                check_image_file(&device).unwrap_err(),
                format!("`{d}` is a folder, not an image file")
            );
        }
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        for device in [
            format!("file://{}", fifo.display()),
            fifo.display().to_string(),
        ] {
            let err = check_image_file(&device).unwrap_err();
            assert!(
                err.contains("neither a regular file nor a block device"),
                "{err}"
            );
        }
        let file = dir.path().join("mem.raw");
        std::fs::write(&file, b"x").unwrap();
        // Files (even too small ones: LeechCore's message says why) and
        // missing paths are LeechCore's to judge; other devices are not looked at.
        assert!(check_image_file(&format!("file://{}", file.display())).is_ok());
        assert!(check_image_file("file:///no/such.raw").is_ok());
        // Device types, built in or plugins, are not paths, even where a
        // folder of that name exists.
        for name in ["fpga", "qemu"] {
            assert_eq!(image_path(name, &lib), None);
            assert_eq!(image_path(&format!("{name}:x=1"), &lib), None);
        }
        assert_eq!(image_path("mem.raw", &lib).as_deref(), Some("mem.raw"));
        assert_eq!(image_path("rawtcp://h:1", &lib), None);
        assert!(check_image_file("fpga").is_ok());
    }

    #[test]
    fn a_failed_remote_is_named_as_the_cause() {
        let m = remote_failure("bogus://x", None);
        assert!(
            m.contains("the remote `bogus://x` is the likely cause") && m.contains("rpc://"),
            "{m}"
        );
        let m = remote_failure("rpc://a:b", Some("connection refused".into()));
        assert!(
            m.starts_with("connection refused (the remote `rpc://a:b`"),
            "{m}"
        );
    }
}
