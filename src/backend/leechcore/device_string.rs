//! LeechCore device strings, read once and the way LeechCore reads them:
//! the device type, the image of the `file` device, a `qemu` guest's RAM
//! file, QMP socket and emulated delays, a `rawtcp` device's address.
//!
//! LeechCore takes the type before `://` (or, without `://`, the first word
//! up to a `:`) and the parameters after `://` as `key=value` separated by
//! `,` or `;`, keys in any case; a string whose first word is no device
//! type it opens as an image file.

use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};

use super::qemu::QemuParams;

/// Device types compiled into LeechCore; any other type is looked up as a
/// `leechcore_device_<type>.so` plugin beside `leechcore.so`.
const BUILT_IN_DEVICES: &[&str] = &[
    "file",
    "fpga",
    "usb3380",
    "existing",
    "pmem",
    "totalmeltdown",
    "vmware",
    "hvsavedstate",
    "livekd",
    "hibr",
    "vmm",
    "rawudp",
];

/// A LeechCore device string and what leechio needs to know of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeviceString {
    text: String,
    /// The device type in lower case: the part before `://`, or for a
    /// string without `://` its first word up to a `:`.
    kind: String,
    /// Whether the type came before `://` (parameters may follow). Without
    /// it the string is a device type (`fpga`, `pmem:…`) or a path, which
    /// only the devices beside the library tell apart ([`Self::image_path`]).
    scheme: bool,
    /// `file://PATH` or `file://file=PATH,…`: the image, as given.
    file_image: Option<String>,
    /// `qemu://…`: its parameters.
    qemu: Option<QemuParams>,
    /// `rawtcp://A.B.C.D[:PORT]`: the address its plugin connects to.
    rawtcp: Option<SocketAddrV4>,
}

impl DeviceString {
    /// Reads `text`. Every string is a device string to LeechCore (one it
    /// cannot open fails when opened), so this cannot fail.
    pub(crate) fn parse(text: &str) -> DeviceString {
        let (kind, rest) = match text.split_once("://") {
            Some((kind, rest)) => (kind, Some(rest)),
            None => (text.split(':').next().unwrap_or(text), None),
        };
        let kind = kind.to_ascii_lowercase();
        let params = rest.unwrap_or("");
        let param = |key: &str| {
            params
                .split([',', ';'])
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v)
        };
        let is = |name: &str| rest.is_some() && kind == name;
        let qemu = is("qemu").then(|| QemuParams::read(param));
        DeviceString {
            file_image: is("file").then(|| param("file").unwrap_or(params).to_string()),
            rawtcp: is("rawtcp").then(|| rawtcp_address(params)).flatten(),
            qemu,
            kind,
            scheme: rest.is_some(),
            text: text.to_string(),
        }
    }

    /// The string as given.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The device type in lower case (see [`DeviceString`]).
    pub(crate) fn kind(&self) -> &str {
        &self.kind
    }

    /// The parameters of a `qemu://` string.
    pub(crate) fn qemu(&self) -> Option<&QemuParams> {
        self.qemu.as_ref()
    }

    /// The address a `rawtcp://` device connects to.
    pub(crate) fn rawtcp_address(&self) -> Option<SocketAddrV4> {
        self.rawtcp
    }

    /// The image the string opens with LeechCore's `file` device: the path
    /// of a `file://` string, or a string without `://` whose first word
    /// is no device type, built in or a plugin beside `library`: LeechCore
    /// opens it as a path.
    pub(crate) fn image_path(&self, library: &Path) -> Option<&str> {
        if self.scheme {
            return self.file_image.as_deref();
        }
        (!is_device_type(&self.kind, library)).then_some(self.text.as_str())
    }

    /// See [`device_file`].
    fn device_file(&self) -> Option<PathBuf> {
        if let Some(ram) = self.qemu.as_ref().and_then(QemuParams::ram_file) {
            return Some(ram);
        }
        if let Some(path) = &self.file_image {
            return Some(PathBuf::from(path));
        }
        // LeechCore opens a string that names no device type as an image file.
        let bare = !self.scheme && Path::new(&self.text).is_file();
        bare.then(|| PathBuf::from(&self.text))
    }
}

/// Whether LeechCore opens `kind` as a device: built in, or a plugin
/// beside `library`.
pub(super) fn is_device_type(kind: &str, library: &Path) -> bool {
    let dir = library.parent().unwrap_or(Path::new("."));
    BUILT_IN_DEVICES.contains(&kind) || dir.join(format!("leechcore_device_{kind}.so")).exists()
}

/// The address after `rawtcp://`, read as LeechCore's rawtcp plugin reads
/// it (IPv4 only; port 8888 when none).
fn rawtcp_address(rest: &str) -> Option<SocketAddrV4> {
    let (host, port) = rest.split_once(':').unwrap_or((rest, ""));
    let port = match port.parse::<u16>() {
        Ok(p) if p != 0 => p,
        _ => 8888,
    };
    Some(SocketAddrV4::new(host.parse().ok()?, port))
}

/// The file on this machine a device string reads memory from, if it names
/// one: the image of LeechCore's `file` device (`file:///mem.raw`,
/// `file://file=/mem.raw,write=1`, or a bare path, which LeechCore also
/// opens as an image) or the guest RAM file `/dev/shm/NAME` of a
/// `qemu://shm=NAME,…` device. Relative paths are left relative: LeechCore
/// opens them from the current directory. For callers that must not write
/// over the memory they read (a dump into its own source).
pub fn device_file(device: &str) -> Option<PathBuf> {
    DeviceString::parse(device).device_file()
}

#[cfg(test)]
mod tests {
    use super::super::qemu::EmulatedDelay;
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: files
    fn device_file_names_the_image_or_guest_ram_a_device_reads() {
        let file = |d: &str| device_file(d).map(|p| p.display().to_string());
        assert_eq!(file("file:///tmp/a.raw").as_deref(), Some("/tmp/a.raw"));
        assert_eq!(
            file("file://file=/tmp/a.raw,write=1").as_deref(),
            Some("/tmp/a.raw")
        );
        assert_eq!(
            file("File://write=1,FILE=rel.raw").as_deref(),
            Some("rel.raw")
        );
        assert_eq!(
            file("qemu://shm=guest,qmp=/tmp/q.sock").as_deref(),
            Some("/dev/shm/guest")
        );
        assert_eq!(file("fpga"), None);
        assert_eq!(file("rawtcp://127.0.0.1:9999"), None);
        // A bare path is an image only when it is a file (LeechCore's
        // fallback); a device type name is not.
        let dir = std::env::temp_dir();
        assert_eq!(file(dir.to_str().unwrap()), None);
        let bare = dir.join(format!("leechio-device-file-{}", std::process::id()));
        std::fs::write(&bare, b"x").unwrap();
        assert_eq!(
            file(bare.to_str().unwrap()),
            Some(bare.display().to_string())
        );
        std::fs::remove_file(&bare).unwrap();
    }

    #[test]
    fn rawtcp_addresses_are_read_as_leechcore_reads_them() {
        let at = |d| {
            DeviceString::parse(d)
                .rawtcp_address()
                .map(|a| a.to_string())
        };
        assert_eq!(
            at("rawtcp://10.0.0.1:4444").as_deref(),
            Some("10.0.0.1:4444")
        );
        assert_eq!(at("RAWTCP://10.0.0.1").as_deref(), Some("10.0.0.1:8888"));
        assert_eq!(at("rawtcp://host.example:1"), None);
        assert_eq!(at("file:///mem.raw"), None);
    }

    #[test]
    fn qemu_parameters_are_read_as_leechcore_reads_them() {
        let q = DeviceString::parse(
            "qemu://SHM=guest;qmp=q.sock,delay-latency-ns=0x100,Delay-ReadPage-NS=21000ns",
        );
        let q = q.qemu().unwrap();
        assert_eq!(q.shm.as_deref(), Some("guest"));
        assert_eq!(q.ram_file(), Some(PathBuf::from("/dev/shm/guest")));
        // A socket named without '/' is in /tmp.
        assert_eq!(q.qmp, Some(PathBuf::from("/tmp/q.sock")));
        assert_eq!(q.delay, EmulatedDelay::new(0x100, 21_000));
        let q = DeviceString::parse("qemu://shm=g,qmp=/run/q.sock");
        let q = q.qemu().unwrap();
        assert_eq!(q.qmp, Some(PathBuf::from("/run/q.sock")));
        assert_eq!(q.delay, None, "no delays, nothing to emulate");
        // Without `://` there are no parameters.
        let bare = DeviceString::parse("qemu:shm=g");
        assert_eq!((bare.kind(), bare.qemu()), ("qemu", None));
    }
}
