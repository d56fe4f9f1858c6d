//! What to open and what LeechCore reports: the public configuration and
//! information types of a [`LeechCore`](super::LeechCore) device.

use std::path::PathBuf;

use leechcore_sys as sys;

use crate::Error;

/// How much LeechCore prints to stdout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    /// Nothing (errors come back as values instead).
    #[default]
    Quiet,
    /// LeechCore's normal messages.
    Normal,
    /// `-v`.
    Verbose,
    /// `-vv`.
    Debug,
    /// `-vvv`: every transfer.
    Trace,
}

impl Verbosity {
    /// LeechCore's `dwPrintfVerbosity` bits for this level.
    pub fn printf_flags(self) -> u32 {
        match self {
            Verbosity::Quiet => 0,
            Verbosity::Normal => sys::LC_CONFIG_PRINTF_ENABLED,
            Verbosity::Verbose => sys::LC_CONFIG_PRINTF_ENABLED | sys::LC_CONFIG_PRINTF_V,
            Verbosity::Debug => Verbosity::Verbose.printf_flags() | sys::LC_CONFIG_PRINTF_VV,
            Verbosity::Trace => Verbosity::Debug.printf_flags() | sys::LC_CONFIG_PRINTF_VVV,
        }
    }

    /// The level for a count from 0 (quiet) to 4 (trace); higher counts
    /// saturate.
    pub fn from_level(level: u8) -> Self {
        match level {
            0 => Verbosity::Quiet,
            1 => Verbosity::Normal,
            2 => Verbosity::Verbose,
            3 => Verbosity::Debug,
            _ => Verbosity::Trace,
        }
    }
}

/// What to open: a LeechCore device string and how to reach LeechCore.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceConfig {
    /// LeechCore device string, e.g. `fpga`, `file:///tmp/mem.raw`,
    /// `qemu://shm=NAME,qmp=SOCKET`.
    pub device: String,
    /// LeechCore remote string (`rpc://…`, `smb://…`), if the device is
    /// reached through a remote agent.
    pub remote: Option<String>,
    /// The `leechcore.so` to load; `None` searches (see
    /// [`leechcore_sys::Library::load`]).
    pub library: Option<PathBuf>,
    /// How much LeechCore prints.
    pub verbosity: Verbosity,
    /// End of the physical memory to use: addresses at and above it are
    /// neither read nor written, whatever the device serves (LeechCore's
    /// own `paMax` is ignored by some devices, e.g. `file`, so leechio
    /// enforces it). A nonzero multiple of 0x1000; `None` lets the device
    /// decide.
    pub max_address: Option<u64>,
    /// How long a call (and the opening) may hear nothing from a device
    /// that talks over sockets (`rawtcp://`, a remote agent, QEMU's QMP)
    /// before its connection is cut and the call fails; the device then
    /// fails every later read and write. `None`:
    /// [`DEFAULT_TIMEOUT`](crate::backend::leechcore::time_limit::DEFAULT_TIMEOUT), 5 s.
    /// Devices without sockets (files, boards on USB) have no limit.
    pub timeout: Option<std::time::Duration>,
}

impl DeviceConfig {
    /// A config for `device` with every other setting at its default.
    pub fn new(device: impl Into<String>) -> Self {
        DeviceConfig {
            device: device.into(),
            ..Default::default()
        }
    }
}

/// A LeechCore version number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Major version.
    pub major: u64,
    /// Minor version.
    pub minor: u64,
    /// Revision.
    pub revision: u64,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.revision)
    }
}

/// The kinds of call LeechCore counts in its statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Call {
    /// Device opens.
    Open,
    /// `LcRead`.
    Read,
    /// `LcReadScatter` / `LcReadScatterEx`.
    ReadScatter,
    /// `LcWrite`.
    Write,
    /// `LcWriteScatter`.
    WriteScatter,
    /// `LcGetOption`.
    GetOption,
    /// `LcSetOption`.
    SetOption,
    /// `LcCommand`.
    Command,
}

impl Call {
    pub(super) fn statistics_id(self) -> u64 {
        match self {
            Call::Open => sys::LC_STATISTICS_ID_OPEN,
            Call::Read => sys::LC_STATISTICS_ID_READ,
            Call::ReadScatter => sys::LC_STATISTICS_ID_READSCATTER,
            Call::Write => sys::LC_STATISTICS_ID_WRITE,
            Call::WriteScatter => sys::LC_STATISTICS_ID_WRITESCATTER,
            Call::GetOption => sys::LC_STATISTICS_ID_GETOPTION,
            Call::SetOption => sys::LC_STATISTICS_ID_SETOPTION,
            Call::Command => sys::LC_STATISTICS_ID_COMMAND,
        }
    }
}

/// What LeechCore reported about a device when it was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device type name, e.g. `file`, `qemu`, `fpga`.
    pub name: String,
    /// Version of the loaded LeechCore.
    pub version: Version,
    /// The target's memory changes while it is read (a live system).
    pub volatile: bool,
    /// The device cannot be written.
    pub read_only: bool,
    /// The device is reached through a remote agent.
    pub remote: bool,
    /// The `leechcore.so` in use.
    pub library: PathBuf,
}

/// Refuses a max address that leaves nothing to read or is not a page
/// boundary (LeechCore's memory map is made of whole pages).
pub(super) fn check_max_address(max_address: Option<u64>) -> Result<(), Error> {
    match max_address {
        Some(0) => Err(Error::InvalidConfig(
            "max_address 0 leaves no memory to use; give the end of the physical memory \
             to use (addresses at and above it are not used), e.g. 0x1_0000_0000, or leave it out"
                .into(),
        )),
        Some(a) if a % sys::PAGE_SIZE != 0 => Err(Error::InvalidConfig(format!(
            "max_address {a:#x} is not a multiple of 0x1000; give the end of the physical memory \
             to use, e.g. {:#x}",
            a.next_multiple_of(sys::PAGE_SIZE)
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbosity_levels_map_to_leechcore_bits() {
        assert_eq!(Verbosity::Quiet.printf_flags(), 0);
        assert_eq!(Verbosity::Normal.printf_flags(), 0x1);
        assert_eq!(Verbosity::Trace.printf_flags(), 0xf);
        assert_eq!(Verbosity::from_level(9), Verbosity::Trace);
    }

    #[test]
    fn a_max_address_of_zero_or_inside_a_page_is_refused() {
        let zero = check_max_address(Some(0)).unwrap_err().to_string();
        assert!(zero.contains("max_address 0 leaves no memory"), "{zero}");
        let odd = check_max_address(Some(0x10_0123)).unwrap_err().to_string();
        assert!(
            odd.contains("0x100123 is not a multiple of 0x1000") && odd.contains("e.g. 0x101000"),
            "{odd}"
        );
        assert!(check_max_address(Some(0x10_0000)).is_ok());
        assert!(check_max_address(None).is_ok());
    }
}
