//! Why a PCILeech FPGA board did not open, from what the machine shows:
//! LeechCore says nothing, and a DMA user's first hour is spent here. The
//! boards speak USB through an FTDI FT601 (vendor 0403, product 601f),
//! which LeechCore drives with `leechcore_ft601_driver_linux.so` over
//! libusb; the kernel lists each USB device under `/sys/bus/usb/devices`
//! (its ids, bus, address and link speed) and gives it a node
//! `/dev/bus/usb/BUS/ADDRESS` that the user must be able to open.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The FT601's USB vendor and product ids, as sysfs writes them.
const FT601: (&str, &str) = ("0403", "601f");
/// LeechCore's FT601 driver, which it loads from beside itself.
pub(super) const DRIVER: &str = "leechcore_ft601_driver_linux.so";
/// A udev rule that lets every user open FT601 boards.
const UDEV_RULE: &str =
    r#"SUBSYSTEM=="usb", ATTRS{idVendor}=="0403", ATTRS{idProduct}=="601f", MODE="0666""#;

/// Where the USB devices are looked at, and who looks.
#[derive(Debug, Clone)]
pub(super) struct UsbView {
    /// `/sys/bus/usb/devices`.
    pub sysfs: PathBuf,
    /// `/dev/bus/usb`.
    pub nodes: PathBuf,
    /// The user's effective uid and groups.
    pub uid: u32,
    pub groups: Vec<u32>,
}

impl UsbView {
    /// This machine's, as this process sees it.
    pub(super) fn this_machine() -> UsbView {
        // SAFETY: geteuid and getegid cannot fail and touch no memory.
        let (uid, mut groups) = unsafe { (libc::geteuid(), vec![libc::getegid()]) };
        // SAFETY: with a size of 0, getgroups only counts the groups.
        let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
        if let Ok(len) = usize::try_from(n) {
            let mut more = vec![0; len];
            // SAFETY: getgroups writes at most `n` ids, and `more` holds `n`.
            let got = unsafe { libc::getgroups(n, more.as_mut_ptr()) };
            more.truncate(usize::try_from(got).unwrap_or(0));
            groups.extend(more);
        }
        UsbView {
            sysfs: "/sys/bus/usb/devices".into(),
            nodes: "/dev/bus/usb".into(),
            uid,
            groups,
        }
    }
}

/// One FT601 on the bus.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Board {
    bus: u32,
    address: u32,
    /// The link's speed in Mb/s (480: USB 2; 5000 and up: USB 3).
    speed: Option<u32>,
}

/// The FT601s sysfs lists; why not, when the folder cannot be read.
fn boards(sysfs: &Path) -> Result<Vec<Board>, String> {
    let entries = fs::read_dir(sysfs).map_err(|e| format!("{}: {e}", sysfs.display()))?;
    let read = |dir: &Path, name: &str| {
        fs::read_to_string(dir.join(name))
            .ok()
            .map(|s| s.trim().to_string())
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let dir = entry.path();
        let ids = (read(&dir, "idVendor"), read(&dir, "idProduct"));
        if ids != (Some(FT601.0.into()), Some(FT601.1.into())) {
            continue;
        }
        let number = |name: &str| read(&dir, name).and_then(|s| s.parse().ok());
        let (Some(bus), Some(address)) = (number("busnum"), number("devnum")) else {
            continue;
        };
        found.push(Board {
            bus,
            address,
            speed: number("speed"),
        });
    }
    found.sort_by_key(|b| (b.bus, b.address));
    Ok(found)
}

/// Whether `view`'s user may read and write the file at `path`, by its
/// mode (root may); why not, when it cannot be looked at.
fn may_open(view: &UsbView, path: &Path) -> Result<bool, String> {
    let meta = fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mode = meta.mode();
    let rw = |shift: u32| (mode >> shift) & 0o6 == 0o6;
    Ok(view.uid == 0
        || (meta.uid() == view.uid && rw(6))
        || (view.groups.contains(&meta.gid()) && rw(3))
        || rw(0))
}

/// Why the FPGA device did not open, as far as `view` shows it: the
/// driver library missing beside `library`, no FT601 on the bus, a board
/// this user may not open, a board on a USB 2 link; else `generic`.
pub(super) fn diagnose(view: &UsbView, library: &Path, generic: &str) -> String {
    let dir = library.parent().unwrap_or(Path::new("."));
    let driver = dir.join(DRIVER);
    if !driver.exists() {
        return format!(
            "LeechCore's FT601 driver {} is missing (LeechCore loads it from beside leechcore.so): \
             install LeechCore again, with its driver (`make install`)",
            driver.display()
        );
    }
    let boards = match boards(&view.sysfs) {
        Ok(boards) => boards,
        Err(why) => return format!("cannot list the USB devices ({why}); {generic}"),
    };
    let Some(board) = boards.first() else {
        return format!(
            "no FPGA board on the USB bus: no FT601 (USB id {}:{}) under {}; check that the \
             board is powered and its USB cable plugged in (its data port, not a power-only one)",
            FT601.0,
            FT601.1,
            view.sysfs.display()
        );
    };
    let node = view
        .nodes
        .join(format!("{:03}", board.bus))
        .join(format!("{:03}", board.address));
    let on = format!(
        "the FT601 board on USB bus {} device {}",
        board.bus, board.address
    );
    match may_open(view, &node) {
        Err(why) => return format!("{on} has no device node to open ({why}); {generic}"),
        Ok(false) => {
            return format!(
                "{on} may not be opened by this user: {} is not readable and writable by uid {}; \
                 run as root, or add the udev rule `{UDEV_RULE}` (e.g. in \
                 /etc/udev/rules.d/99-pcileech.rules), then `udevadm control --reload` and plug \
                 the board in again",
                node.display(),
                view.uid
            )
        }
        Ok(true) => {}
    }
    let slow = match board.speed {
        Some(speed) if speed < 5000 => format!(
            "; it is on a USB 2 link ({speed} Mb/s): about 30 MB/s instead of about 200, \
             plug it into a USB 3 port with a USB 3 cable"
        ),
        _ => String::new(),
    };
    format!(
        "{on} is present and may be opened, but LeechCore could not connect to it (is the FPGA \
         flashed with a PCILeech bitstream, and the target powered with its PCIe link up?){slow}; \
         {generic}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const GENERIC: &str = "LeechCore gave no reason";

    /// A crafted machine: a sysfs folder of USB devices, their nodes, a
    /// LeechCore folder with its driver, and a user (uid 1000, group 46).
    struct Machine {
        root: tempfile::TempDir,
    }

    impl Machine {
        fn new() -> Machine {
            let root = tempfile::tempdir().unwrap();
            for dir in ["sys", "dev", "lib"] {
                fs::create_dir(root.path().join(dir)).unwrap();
            }
            fs::write(root.path().join("lib").join(DRIVER), b"").unwrap();
            Machine { root }
        }

        fn path(&self, rel: &str) -> PathBuf {
            self.root.path().join(rel)
        }

        /// A USB device `name` with ids, bus, address and speed, and its
        /// node of mode `mode`.
        fn device(&self, name: &str, ids: (&str, &str), at: (u32, u32), speed: u32, mode: u32) {
            let dir = self.path("sys").join(name);
            fs::create_dir(&dir).unwrap();
            for (file, value) in [
                ("idVendor", ids.0.to_string()),
                ("idProduct", ids.1.to_string()),
                ("busnum", at.0.to_string()),
                ("devnum", at.1.to_string()),
                ("speed", speed.to_string()),
            ] {
                fs::write(dir.join(file), format!("{value}\n")).unwrap();
            }
            let bus = self.path("dev").join(format!("{:03}", at.0));
            fs::create_dir_all(&bus).unwrap();
            let node = bus.join(format!("{:03}", at.1));
            fs::write(&node, b"").unwrap();
            fs::set_permissions(&node, fs::Permissions::from_mode(mode)).unwrap();
        }

        fn diagnose(&self, uid: u32) -> String {
            let view = UsbView {
                sysfs: self.path("sys"),
                nodes: self.path("dev"),
                uid,
                groups: vec![46],
            };
            diagnose(&view, &self.path("lib").join("leechcore.so"), GENERIC)
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: the file system
    fn no_board_on_the_bus_is_said() {
        let m = Machine::new();
        // A keyboard and an FT600 (another FTDI chip) are no FT601.
        m.device("1-1", ("046d", "c31c"), (1, 2), 12, 0o664);
        m.device("2-1", ("0403", "601e"), (2, 3), 5000, 0o666);
        let said = m.diagnose(1000);
        assert!(
            said.starts_with("no FPGA board on the USB bus: no FT601 (USB id 0403:601f)"),
            "{said}"
        );
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: the file system
    fn a_board_this_user_may_not_open_gets_the_udev_rule() {
        let m = Machine::new();
        m.device("2-1", FT601, (2, 5), 5000, 0o664);
        let said = m.diagnose(1000);
        let node = m.path("dev/002/005");
        assert!(
            said.starts_with(&format!(
                "the FT601 board on USB bus 2 device 5 may not be opened by this user: {} is not readable and writable by uid 1000",
                node.display()
            )),
            "{said}"
        );
        assert!(said.contains(UDEV_RULE), "{said}");
        // Root may; so may a user the node's mode lets.
        assert!(m.diagnose(0).contains("is present and may be opened"));
        fs::set_permissions(&node, fs::Permissions::from_mode(0o666)).unwrap();
        assert!(m.diagnose(1000).contains("is present and may be opened"));
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: the file system
    fn a_board_on_a_usb_2_link_is_said_to_be_slow() {
        let m = Machine::new();
        m.device("3-2", FT601, (3, 7), 480, 0o666);
        let said = m.diagnose(1000);
        assert!(
            said.contains("USB 2 link (480 Mb/s): about 30 MB/s instead of about 200"),
            "{said}"
        );
        assert!(said.ends_with(GENERIC), "{said}");
        // On USB 3, nothing of speed.
        let m = Machine::new();
        m.device("3-2", FT601, (3, 7), 5000, 0o666);
        assert!(!m.diagnose(1000).contains("USB 2"));
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: the file system
    fn a_missing_driver_library_is_named_first() {
        let m = Machine::new();
        m.device("2-1", FT601, (2, 5), 5000, 0o666);
        fs::remove_file(m.path("lib").join(DRIVER)).unwrap();
        let said = m.diagnose(1000);
        let driver = m.path("lib").join(DRIVER);
        assert!(
            said.starts_with(&format!(
                "LeechCore's FT601 driver {} is missing",
                driver.display()
            )),
            "{said}"
        );
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: the file system
    fn a_sysfs_that_cannot_be_read_is_said() {
        let m = Machine::new();
        fs::remove_dir(m.path("sys")).unwrap();
        let said = m.diagnose(1000);
        assert!(said.starts_with("cannot list the USB devices ("), "{said}");
    }
}
