//! A LeechCore device: the only code that calls into `leechcore.so`. This
//! file opens and closes the device and implements [`Backend`] for it; the
//! scatter calls, the memory map, the device string, the diagnosis of a
//! failed opening, the time limits of devices over sockets ([`time_limit`])
//! and what is particular to QEMU guests each have a file of their own.
//!
//! Two LeechCore bugs shape it: `LcRead` fails for reads that stay inside a
//! page without reaching its end, and `LcWrite` reports success when nothing
//! was written. So every read and write here is a scatter call, and success
//! is judged per entry from LeechCore's own `f` flag.

mod config;
mod device_string;
mod diagnosis;
mod ffi;
mod fpga;
mod handle;
mod memory_map;
pub mod qemu;
mod scatter;
pub mod time_limit;

use crate::lock::LockRecovering;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use leechcore_sys::{self as sys, Library, LC_CONFIG, MEM_SCATTER};

pub use config::{Call, DeviceConfig, DeviceInfo, Verbosity, Version};
pub use device_string::device_file;

use super::{Backend, Limits, PageError, ScatterEntry, WriteEntry};
use crate::{Error, MemoryMap};
use config::check_max_address;
use device_string::DeviceString;
use diagnosis::{check_image_file, diagnose_open_failure, remote_failure};
use ffi::{c_string, copy_c_string, create};
use handle::{Checked, Handle};
use time_limit::{Lost, Watchdog, DEFAULT_TIMEOUT};

/// An open LeechCore device. Closed (`LcClose`) on drop.
///
/// Every call into LeechCore holds one lock, which also guards the reused
/// scatter arrays: that lock is what makes the device `Sync`, without
/// relying on LeechCore's own locking.
pub struct LeechCore {
    lib: Arc<Library>,
    state: Mutex<Handle>,
    info: DeviceInfo,
    /// The device string, read once.
    device_string: DeviceString,
    /// For a `qemu` device opened here (not behind a remote): what is
    /// watched of the guest.
    guest: Option<qemu::Guest>,
    /// For a writable `file` device: the configuration to open it again
    /// with (see `Handle::unflushed`).
    reopen: Option<LC_CONFIG>,
    /// The user's [`DeviceConfig::max_address`], enforced here because
    /// LeechCore's devices do not all honour `paMax`.
    limit: Option<u64>,
    /// The shape of the entries the device takes.
    rules: Limits,
    /// For a device with sockets: its time limit ([`DeviceConfig::timeout`]).
    watchdog: Option<Watchdog>,
    /// Counts the changes of the memory map, and so of the max address
    /// (see [`Backend::geometry_epoch`]).
    geometry_epoch: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for LeechCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeechCore")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl LeechCore {
    /// Loads LeechCore (see [`DeviceConfig::library`]) and opens the device.
    pub fn open(config: &DeviceConfig) -> Result<LeechCore, Error> {
        check_max_address(config.max_address)?;
        let timeout = config.timeout.unwrap_or(DEFAULT_TIMEOUT);
        if timeout.is_zero() {
            return Err(Error::InvalidConfig(
                "a timeout of 0 would fail every call; give the time a device may stay silent, e.g. 5 s".into(),
            ));
        }
        if config.device.trim().is_empty() {
            return Err(Error::InvalidConfig(
                "the device string is empty; give one, e.g. fpga, file:///path/to/memory.raw \
                 or qemu://shm=NAME,qmp=SOCKET"
                    .into(),
            ));
        }
        let device_string = DeviceString::parse(&config.device);
        let mut lc = LC_CONFIG::new();
        copy_c_string(&mut lc.szDevice, &config.device, "device string")?;
        if let Some(remote) = &config.remote {
            copy_c_string(&mut lc.szRemote, remote, "remote string")?;
        }
        lc.dwPrintfVerbosity = config.verbosity.printf_flags();
        lc.paMax = config.max_address.unwrap_or(0);
        let lib = Library::load(config.library.as_deref())?;
        let refuse = |reason| Error::Open {
            device: config.device.clone(),
            reason,
        };
        // Behind a remote the device string names things on the agent's
        // system: nothing local can be checked or watched.
        let mut found_guest = None;
        if config.remote.is_none() {
            check_image_file(&device_string, lib.path()).map_err(refuse)?;
            if let Some(params) = device_string.qemu() {
                found_guest = qemu::Found::look(params).map_err(refuse)?;
            }
        }

        let pristine = lc;
        let watchdog = Watchdog::opening(&device_string, timeout);
        let created = watchdog.call(|| create(&lib, &mut lc));
        let has_sockets = match (watchdog.opened(), &created) {
            (Ok(has_sockets), _) => has_sockets,
            (Err(_), created) => {
                if let Ok(raw) = created {
                    // SAFETY: a handle just made, closed once, never used.
                    watchdog.call(|| unsafe { (lib.LcClose)(*raw) });
                }
                return Err(refuse(watchdog.open_message()));
            }
        };
        let raw = created.map_err(|message| {
            refuse(match &config.remote {
                // With a remote, the local checks of the device string say
                // nothing (it is opened on the agent's system), and a wrong
                // remote is the more common mistake.
                Some(remote) => remote_failure(remote, message),
                None => {
                    message.unwrap_or_else(|| diagnose_open_failure(&device_string, lib.path()))
                }
            })
        })?;
        let name = c_string(&lc.szDeviceName);
        let mut device = LeechCore {
            guest: found_guest.as_mut().map(qemu::Guest::opened),
            reopen: None,
            limit: config.max_address,
            rules: device_rules(&name),
            watchdog: has_sockets.then_some(watchdog),
            geometry_epoch: Default::default(),
            info: DeviceInfo {
                name,
                version: Version {
                    major: 0,
                    minor: 0,
                    revision: 0,
                },
                volatile: lc.fVolatile != 0,
                read_only: lc.fWritable == 0,
                remote: lc.fRemote != 0,
                library: lib.path().to_path_buf(),
            },
            lib,
            state: Mutex::new(Handle::new(raw)),
            device_string,
        };
        device.info.version = Version {
            major: device.option(sys::LC_OPT_CORE_VERSION_MAJOR).unwrap_or(0),
            minor: device.option(sys::LC_OPT_CORE_VERSION_MINOR).unwrap_or(0),
            revision: device
                .option(sys::LC_OPT_CORE_VERSION_REVISION)
                .unwrap_or(0),
        };
        if let Some(read_only) = device.option(sys::LC_OPT_CORE_READONLY) {
            device.info.read_only = read_only != 0;
        }
        if device.info.name == "file" && !device.info.read_only {
            device.reopen = Some(pristine);
        }
        // Also with a user's max address: it only cuts the map, which must
        // still be QEMU's below it (LeechCore's guess is wrong above 2 GiB).
        if let Some(found) = found_guest {
            device.check_qemu_memory_map(found);
        }
        if device.info.name == "file" && config.remote.is_none() {
            if let Some(path) = device.device_string.image_path(device.lib.path()) {
                device.fit_map_to_image(Path::new(path));
            }
        }
        log::debug!("opened LeechCore device {:?}", device.info);
        Ok(device)
    }

    /// What LeechCore reported when the device was opened.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The loaded LeechCore library.
    pub fn library(&self) -> &Arc<Library> {
        &self.lib
    }

    /// One past the highest physical address served: LeechCore's max
    /// address now (from its memory map), cut at the user's
    /// [`DeviceConfig::max_address`].
    pub fn max_address(&self) -> u64 {
        let device = self.option(sys::LC_OPT_CORE_ADDR_MAX).unwrap_or(0);
        self.limit.map_or(device, |limit| device.min(limit))
    }

    /// The address at and above which nothing is read or written.
    fn limit(&self) -> u64 {
        self.limit.unwrap_or(u64::MAX)
    }

    /// How many calls of `kind` LeechCore has counted on this device
    /// (across reopenings of a writable file device).
    pub fn call_count(&self, kind: Call) -> u64 {
        let state = self.lock();
        let id = kind.statistics_id();
        let now = self.option_locked(&state, sys::LC_OPT_CORE_STATISTICS_CALL_COUNT | id);
        now.unwrap_or(0) + state.retired_calls[id as usize]
    }

    /// Reads an option with `LcGetOption`; `None` when LeechCore refuses.
    pub fn option(&self, option: u64) -> Option<u64> {
        self.option_locked(&self.lock(), option)
    }

    fn option_locked(&self, state: &Handle, option: u64) -> Option<u64> {
        if state.raw.is_null() {
            return None;
        }
        let mut value = 0u64;
        // SAFETY: valid handle (held under the lock), valid out pointer.
        let ok = self.guarded(|| unsafe { (self.lib.LcGetOption)(state.raw, option, &mut value) });
        (ok != 0).then_some(value)
    }

    /// Runs a call into LeechCore, under the device's time limit if it
    /// has one.
    fn guarded<R>(&self, call: impl FnOnce() -> R) -> R {
        match &self.watchdog {
            Some(watchdog) => watchdog.call(call),
            None => call(),
        }
    }

    /// Fails every entry, without a call, when the device stopped
    /// answering or its connection closed.
    fn cut_off<'e>(&self, results: impl Iterator<Item = &'e mut Result<(), PageError>>) -> bool {
        self.watchdog.as_ref().is_some_and(|w| w.refuse(results))
    }

    /// After a call: whether the device was lost during it, the reason of
    /// every entry that failed then.
    fn lost_in_call(&self, mems: &[MEM_SCATTER]) -> Option<Lost> {
        let watchdog = self.watchdog.as_ref()?;
        watchdog.lost_after(mems.iter().all(|m| m.f != 0))
    }

    /// The memory map, and so the max address, may have changed: the
    /// engine asks for them again (see [`Backend::geometry_epoch`]).
    fn map_changed(&self) {
        (self.geometry_epoch).fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    fn lock(&self) -> MutexGuard<'_, Handle> {
        // No code under the lock panics between FFI calls; a poisoned lock
        // still holds a consistent handle.
        self.state.lock_recovering()
    }
}

impl Backend for LeechCore {
    fn read_scatter(&self, entries: &mut [ScatterEntry<'_>]) {
        LeechCore::read_scatter(self, entries)
    }

    fn write_scatter(&self, entries: &mut [WriteEntry<'_>]) {
        LeechCore::write_scatter(self, entries)
    }

    fn geometry_epoch(&self) -> u64 {
        self.geometry_epoch
            .load(std::sync::atomic::Ordering::Acquire)
    }

    fn check_target(&self) -> Result<(), PageError> {
        let mut verdict = Ok(());
        self.target_gone(std::iter::once(&mut verdict));
        verdict
    }

    fn read_scatter_checked(&self, entries: &mut [ScatterEntry<'_>]) {
        self.read_scatter_after(entries, Checked::Before)
    }

    fn write_scatter_checked(&self, entries: &mut [WriteEntry<'_>]) {
        self.write_scatter_after(entries, Checked::Before)
    }

    fn limits(&self) -> Limits {
        self.rules
    }

    fn max_address(&self) -> u64 {
        LeechCore::max_address(self)
    }

    fn memory_map(&self) -> MemoryMap {
        LeechCore::memory_map(self).unwrap_or_else(|e| {
            log::warn!("LeechCore's memory map is unreadable ({e}); assuming 0..max_address");
            let end = LeechCore::max_address(self) & !(sys::PAGE_SIZE - 1);
            MemoryMap::new(vec![crate::MemoryRange::new(0, end)]).unwrap_or_default()
        })
    }

    fn read_only(&self) -> bool {
        self.info.read_only
    }

    /// Images and QEMU's guest memory are files: their pages are read
    /// faster in order. (To a board, the order costs nothing.)
    fn prefers_address_order(&self) -> bool {
        true
    }

    fn set_memory_map(&self, map: &MemoryMap) -> Result<(), Error> {
        LeechCore::set_memory_map(self, map)
    }

    fn lost(&self) -> Option<String> {
        let watchdog = self.watchdog.as_ref()?;
        watchdog.lost().map(|lost| watchdog.message(lost))
    }
}

impl Drop for LeechCore {
    fn drop(&mut self) {
        let raw = self
            .state
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .raw;
        if !raw.is_null() {
            // SAFETY: the handle came from LcCreateEx and is closed exactly
            // once.
            self.guarded(|| unsafe { (self.lib.LcClose)(raw) });
        }
    }
}

/// The entries a device takes. LeechCore's rawtcp plugin reads only from
/// the start of a page, and whole pages once a read reaches 0x1000 bytes
/// (LeechCore joins adjacent entries into one read): it gets whole pages,
/// and the engine reads a smaller piece through the page that holds it.
fn device_rules(name: &str) -> Limits {
    if name.eq_ignore_ascii_case("rawtcp") {
        Limits {
            min_len: sys::PAGE_SIZE as usize,
            align: sys::PAGE_SIZE,
            ..Limits::LEECHCORE
        }
    } else {
        Limits::LEECHCORE
    }
}
