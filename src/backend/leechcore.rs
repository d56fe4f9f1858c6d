//! A LeechCore device: the only code that calls into `leechcore.so`.
//!
//! Two LeechCore bugs shape it: `LcRead` fails for reads that stay inside a
//! page without reaching its end, and `LcWrite` reports success when nothing
//! was written. So every read and write here is a scatter call, and success
//! is judged per entry from LeechCore's own `f` flag.

use crate::lock::LockRecovering;
use std::ffi::c_char;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use leechcore_sys::{self as sys, Library, HANDLE, LC_CONFIG, MEM_SCATTER};

use super::time_limit::{Lost, Watchdog, DEFAULT_TIMEOUT};
use super::{Backend, Limits, PageError, ScatterEntry, WriteEntry};
use crate::{Error, MemoryMap};

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
    /// fails every later read and write. `None`: [`DEFAULT_TIMEOUT`], 5 s.
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
    fn statistics_id(self) -> u64 {
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

/// An open LeechCore device. Closed (`LcClose`) on drop.
///
/// Every call into LeechCore holds one lock, which also guards the reused
/// scatter arrays: that lock is what makes the device `Sync`, without
/// relying on LeechCore's own locking.
pub struct LeechCore {
    lib: Arc<Library>,
    state: Mutex<Handle>,
    info: DeviceInfo,
    /// For a `qemu` device: the QEMU process. LeechCore only maps the RAM
    /// file after opening, so without this a killed guest would go on
    /// "reading" the memory it had when it died.
    guest: Option<crate::targets::ProcessWatch>,
    /// For a `qemu` device: its RAM file and the size it had when opened.
    /// LeechCore maps the file at that size; a read of a part the file no
    /// longer holds would kill the process with SIGBUS.
    ram_file: Option<(std::fs::File, u64)>,
    /// The death of the guest was logged (once).
    gone_logged: std::sync::atomic::AtomicBool,
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
}

/// The raw handle and the scratch arrays of one scatter call, reused so a
/// call allocates nothing once they have grown.
struct Handle {
    /// Null only when reopening failed; no call is made then.
    raw: HANDLE,
    /// LeechCore's file device holds each write in the stdio buffer of one
    /// of its several handles on the file until it is closed: its other
    /// handles read the old bytes, two writes of the same bytes reach the
    /// file in handle order, not in write order, and no other reader of
    /// the file sees them. So right after a write the device is closed
    /// (which writes the bytes out) and opened again.
    unflushed: bool,
    /// Call counts of the handles closed by reopening, by statistics id.
    retired_calls: [u64; 8],
    /// The memory map set by the caller (`LC_MEMMAP_ENTRY`s), set again
    /// after reopening.
    map: Option<Vec<u8>>,
    mems: Vec<MEM_SCATTER>,
    ptrs: Vec<*mut MEM_SCATTER>,
    codes: Vec<u32>,
    /// For each entry of `mems`, the index of the caller's entry.
    owners: Vec<usize>,
}

// SAFETY: a LeechCore handle is not tied to the thread that opened it, and
// the raw pointers in the scratch arrays are only dereferenced by LeechCore
// during a call made under the lock, after being rewritten for that call.
unsafe impl Send for Handle {}

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
        let (guest, qemu_map) = if config.remote.is_none() {
            check_image_file(&config.device, lib.path()).map_err(refuse)?;
            let guest = qemu_watch(&config.device).map_err(refuse)?;
            // Asked before LeechCore connects: QMP serves one client at a
            // time, and after LeechCore's hurried read QEMU may still be
            // answering it (see `check_qemu_memory_map`).
            (guest, qemu_ram_map_of(&config.device, QMP_TIMEOUT))
        } else {
            (None, None)
        };
        // LeechCore reads QMP with no time limit: it would wait forever.
        if let Some(Err(silent @ crate::targets::QmpError::Silent)) = &qemu_map {
            return Err(refuse(format!(
                "{silent} (waited {} s; LeechCore would wait without end)",
                QMP_TIMEOUT.as_secs()
            )));
        }

        let pristine = lc;
        let watchdog = Watchdog::opening(&config.device, timeout);
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
                    message.unwrap_or_else(|| diagnose_open_failure(&config.device, lib.path()))
                }
            })
        })?;
        let name = c_string(&lc.szDeviceName);
        let mut device = LeechCore {
            guest,
            ram_file: if config.remote.is_none() {
                qemu_params(&config.device).and_then(|(shm, _)| {
                    let file = std::fs::File::open(Path::new("/dev/shm").join(shm)).ok()?;
                    let size = file.metadata().ok()?.len();
                    Some((file, size))
                })
            } else {
                None
            },
            gone_logged: Default::default(),
            reopen: None,
            limit: config.max_address,
            rules: device_rules(&name),
            watchdog: has_sockets.then_some(watchdog),
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
            state: Mutex::new(Handle {
                raw,
                unflushed: false,
                retired_calls: [0; 8],
                map: None,
                mems: Vec::new(),
                ptrs: Vec::new(),
                codes: Vec::new(),
                owners: Vec::new(),
            }),
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
        if let Some(qemu_map) = qemu_map {
            device.check_qemu_memory_map(&config.device, qemu_map);
        }
        if device.info.name == "file" && config.remote.is_none() {
            if let Some(path) = image_path(&config.device, device.lib.path()) {
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

    /// Makes earlier writes visible (see `Handle::unflushed`). When the
    /// device could not be opened again, every call fails: the entries of
    /// this one get `NotIssued`, and false comes back.
    fn settle<'e>(
        &self,
        state: &mut Handle,
        results: impl Iterator<Item = &'e mut Result<(), PageError>>,
    ) -> bool {
        let usable = self.reopen_if_unflushed(state);
        if !usable {
            results.for_each(|r| *r = Err(PageError::NotIssued));
        }
        usable
    }

    fn reopen_if_unflushed(&self, state: &mut Handle) -> bool {
        let (true, Some(config)) = (state.unflushed, &self.reopen) else {
            return !state.raw.is_null();
        };
        state.unflushed = false;
        for id in 0..state.retired_calls.len() {
            let counter = sys::LC_OPT_CORE_STATISTICS_CALL_COUNT | id as u64;
            state.retired_calls[id] += self.option_locked(state, counter).unwrap_or(0);
        }
        // SAFETY: the handle came from LcCreateEx; it is replaced below and
        // never used again. Closing is what writes the buffered bytes out.
        unsafe { (self.lib.LcClose)(state.raw) };
        // Null until the reopen succeeds: a failed one must leave no
        // handle to use or to close again.
        state.raw = ptr::null_mut();
        let mut config = *config;
        state.raw = match create(&self.lib, &mut config) {
            Ok(raw) => raw,
            Err(message) => {
                log::error!(
                    "could not open {} again after writing to it ({}): every read and write now fails",
                    self.info.name,
                    message.unwrap_or_else(|| "LeechCore gave no reason".into())
                );
                return false;
            }
        };
        if let Some(map) = &mut state.map {
            let raw = state.raw;
            if let Err(e) = self.command_on(
                raw,
                sys::LC_CMD_MEMMAP_SET_STRUCT,
                map,
                "LC_CMD_MEMMAP_SET_STRUCT",
            ) {
                log::error!("could not set the memory map again after reopening: {e}");
            }
        }
        true
    }

    /// Reads every entry in one LeechCore scatter call; each entry's
    /// `result` says whether its buffer was filled.
    ///
    /// Entries that break the device's [`Limits`] fail with
    /// [`PageError::InvalidEntry`], and entries at or past the user's max
    /// address with [`PageError::OutOfRange`], without reaching the device.
    /// No call is made when no entry is left.
    pub fn read_scatter(&self, entries: &mut [ScatterEntry<'_>]) {
        if self.target_gone(entries.iter_mut().map(|e| &mut e.result))
            || self.cut_off(entries.iter_mut().map(|e| &mut e.result))
        {
            return;
        }
        let mut state = self.lock();
        let state = &mut *state;
        if !self.settle(state, entries.iter_mut().map(|e| &mut e.result)) {
            return;
        }
        state.prepare(
            self.limit(),
            self.rules,
            entries
                .iter_mut()
                .map(|e| (e.addr, e.buf.as_mut_ptr(), e.buf.len(), &mut e.result)),
        );
        if state.mems.is_empty() {
            return;
        }
        let count = state.mems.len() as u32;
        state.codes.clear();
        state
            .codes
            .resize(state.mems.len(), sys::LC_READ_PAGE_RESULT_NONE);
        self.guarded(|| match self.lib.LcReadScatterEx {
            // SAFETY: `ptrs` points at `count` initialised entries whose
            // buffers are the callers' live slices of at least `cb` bytes;
            // `codes` has room for `count` results.
            Some(read_ex) => unsafe {
                read_ex(
                    state.raw,
                    count,
                    state.ptrs.as_mut_ptr(),
                    state.codes.as_mut_ptr(),
                );
            },
            // SAFETY: as above, without the result array.
            None => unsafe { (self.lib.LcReadScatter)(state.raw, count, state.ptrs.as_mut_ptr()) },
        });
        let lost = self.lost_in_call(&state.mems);
        for (k, &owner) in state.owners.iter().enumerate() {
            entries[owner].result = match (state.mems[k].f, lost) {
                (0, Some(lost)) => Err(lost.page_error()),
                (0, None) => Err(PageError::from_leechcore_code(state.codes[k])),
                _ => Ok(()),
            };
        }
    }

    /// Writes every entry in one LeechCore scatter call; each entry's
    /// `result` says whether it was written. On a read-only device every
    /// entry fails with [`PageError::ReadOnly`] and no call is made.
    pub fn write_scatter(&self, entries: &mut [WriteEntry<'_>]) {
        if self.info.read_only {
            for e in entries.iter_mut() {
                e.result = Err(PageError::ReadOnly);
            }
            return;
        }
        if self.target_gone(entries.iter_mut().map(|e| &mut e.result))
            || self.cut_off(entries.iter_mut().map(|e| &mut e.result))
        {
            return;
        }
        let mut state = self.lock();
        let state = &mut *state;
        if !self.settle(state, entries.iter_mut().map(|e| &mut e.result)) {
            return;
        }
        // LeechCore's write path only reads from `pb`.
        state.prepare(
            self.limit(),
            self.rules,
            entries.iter_mut().map(|e| {
                (
                    e.addr,
                    e.data.as_ptr() as *mut u8,
                    e.data.len(),
                    &mut e.result,
                )
            }),
        );
        if state.mems.is_empty() {
            return;
        }
        // SAFETY: `ptrs` points at `mems.len()` initialised entries whose
        // buffers are the callers' live slices of `cb` bytes.
        self.guarded(|| unsafe {
            (self.lib.LcWriteScatter)(state.raw, state.mems.len() as u32, state.ptrs.as_mut_ptr())
        });
        state.unflushed = self.reopen.is_some();
        let lost = self.lost_in_call(&state.mems);
        for (k, &owner) in state.owners.iter().enumerate() {
            entries[owner].result = match (state.mems[k].f, lost) {
                (0, Some(lost)) => Err(lost.page_error()),
                (0, None) => Err(PageError::WriteFailed),
                _ => Ok(()),
            };
        }
        // The bytes are in the file when this returns, for every reader of
        // it. A failed reopen fails the calls after this one (`settle`).
        self.reopen_if_unflushed(state);
    }

    /// The device's memory map, as LeechCore holds it now, cut at the
    /// user's [`DeviceConfig::max_address`].
    pub fn memory_map(&self) -> Result<MemoryMap, Error> {
        let map = self.leechcore_memory_map()?;
        let Some(limit) = self.limit else {
            return Ok(map);
        };
        let cut = map.cut_at(limit, |r| r.start);
        // Cutting page-aligned, sorted, disjoint ranges at a page-aligned
        // limit keeps them so.
        Ok(MemoryMap::new(cut)?)
    }

    /// LeechCore's own memory map, uncut.
    fn leechcore_memory_map(&self) -> Result<MemoryMap, Error> {
        let state = self.lock();
        let name = "LC_CMD_MEMMAP_GET_STRUCT";
        let raw = self.command_on(state.raw, sys::LC_CMD_MEMMAP_GET_STRUCT, &mut [], name)?;
        let entry = std::mem::size_of::<sys::LC_MEMMAP_ENTRY>();
        if raw.len() % entry != 0 {
            return Err(Error::Command { name });
        }
        let ranges = raw
            .chunks_exact(entry)
            .map(|e| {
                let word =
                    |i: usize| u64::from_ne_bytes(e[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
                crate::MemoryRange {
                    start: word(0),
                    size: word(1),
                    remap: word(2),
                }
            })
            .collect();
        Ok(MemoryMap::new(ranges)?)
    }

    /// Replaces the device's memory map: reads outside it then fail, and
    /// `max_address` follows it.
    pub fn set_memory_map(&self, map: &MemoryMap) -> Result<(), Error> {
        // LeechCore accepts a map with no ranges, then crashes the process
        // when next asked for its map.
        if map.is_empty() {
            return Err(Error::InvalidConfig(
                "a memory map needs at least one range".into(),
            ));
        }
        // The struct form: LeechCore's text parser crashes on what it does
        // not expect and misreads index columns past 0xff. Every remap is
        // forced: LeechCore takes a remap of 0 for "no remap" otherwise.
        let mut entries: Vec<u8> = map
            .ranges()
            .iter()
            .flat_map(|r| {
                [r.start, r.size, r.remap | sys::LC_MEMMAP_FORCE_OFFSET]
                    .into_iter()
                    .flat_map(u64::to_ne_bytes)
            })
            .collect();
        let mut state = self.lock();
        let raw = state.raw;
        let name = "LC_CMD_MEMMAP_SET_STRUCT";
        self.command_on(raw, sys::LC_CMD_MEMMAP_SET_STRUCT, &mut entries, name)?;
        if self.reopen.is_some() {
            state.map = Some(entries);
        }
        Ok(())
    }

    /// Runs `LcCommand` and copies its output (freed with `LcMemFree`).
    ///
    /// # Safety
    /// LeechCore trusts a command's input: some crash the process on input
    /// they do not expect (`LC_CMD_MEMMAP_SET` with text it cannot parse
    /// empties the map, and the next map query writes out of bounds), and
    /// device commands may take pointers. Use [`LeechCore::set_memory_map`]
    /// and the other methods where they exist.
    pub unsafe fn command(
        &self,
        command: u64,
        input: &mut [u8],
        name: &'static str,
    ) -> Result<Vec<u8>, Error> {
        let state = self.lock();
        self.command_on(state.raw, command, input, name)
    }

    /// `command` on `raw`, which the caller holds under the lock.
    fn command_on(
        &self,
        raw: HANDLE,
        command: u64,
        input: &mut [u8],
        name: &'static str,
    ) -> Result<Vec<u8>, Error> {
        if raw.is_null() {
            return Err(Error::Command { name });
        }
        let mut out: *mut u8 = ptr::null_mut();
        let mut out_len = 0u32;
        let input_ptr = if input.is_empty() {
            ptr::null_mut()
        } else {
            input.as_mut_ptr()
        };
        let input_len = u32::try_from(input.len()).map_err(|_| Error::Command { name })?;
        // SAFETY: valid handle under the lock; `input` is live for the call;
        // LeechCore allocates `out`, which is freed below.
        let ok = self.guarded(|| unsafe {
            (self.lib.LcCommand)(raw, command, input_len, input_ptr, &mut out, &mut out_len)
        });
        let output = if out.is_null() {
            Vec::new()
        } else {
            // SAFETY: LeechCore returned `out_len` bytes at `out`.
            let bytes = unsafe { std::slice::from_raw_parts(out, out_len as usize) }.to_vec();
            // SAFETY: `out` was allocated by LeechCore for us to free once.
            unsafe { (self.lib.LcMemFree)(out.cast()) };
            bytes
        };
        if ok == 0 {
            return Err(Error::Command { name });
        }
        Ok(output)
    }

    /// LeechCore reads a QEMU guest's memory map with a race (one read of
    /// QEMU's answer after a 1 s wait, which a busy QEMU has not finished
    /// by then: the map then ends early, silently) and drops a RAM range
    /// when QEMU lists its views in another order. QEMU's own map, asked
    /// before LeechCore connected (or now, if that failed), replaces it
    /// when they differ.
    /// Cuts the map at the last whole page of the image file. LeechCore
    /// maps an image whose size is not whole pages as 4 GiB, and its read
    /// of a page that runs past the end fails after filling the bytes that
    /// are there: no range may reach into that last partial page.
    fn fit_map_to_image(&self, path: &Path) {
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        let whole = meta.len() & !(sys::PAGE_SIZE - 1);
        if !meta.is_file() || whole == meta.len() {
            return;
        }
        let Ok(map) = self.leechcore_memory_map() else {
            return;
        };
        let fitted = map.cut_at(whole, |r| r.remap);
        if fitted == map.ranges() {
            return;
        }
        log::info!(
            "{}: {} bytes, not whole pages; its memory ends at its last whole page, {whole:#x}",
            path.display(),
            meta.len()
        );
        let result = MemoryMap::new(fitted)
            .map_err(Error::from)
            .and_then(|fitted| self.set_memory_map(&fitted));
        if let Err(e) = result {
            log::warn!(
                "could not cut the memory map at the end of {}: {e}",
                path.display()
            );
        }
    }

    fn check_qemu_memory_map(
        &self,
        device: &str,
        before: Result<MemoryMap, crate::targets::QmpError>,
    ) {
        let theirs = match before {
            Ok(map) => map,
            Err(first) => match qemu_ram_map_of(device, 2 * QMP_TIMEOUT) {
                Some(Ok(map)) => map,
                Some(Err(e)) => {
                    log::warn!(
                        "could not check LeechCore's memory map of the guest with QEMU \
                         (before opening: {first}; after: {e}); it may miss RAM ranges"
                    );
                    return;
                }
                None => return,
            },
        };
        match self.leechcore_memory_map() {
            Ok(ours) if ours == theirs => {}
            ours => {
                // Put right at once: a note, not a warning.
                log::info!("LeechCore's memory map of the guest ({ours:?}) is not QEMU's; using QEMU's ({theirs:?})");
                if let Err(e) = self.set_memory_map(&theirs) {
                    log::warn!("could not set QEMU's memory map: {e}");
                }
            }
        }
    }

    /// Fails every entry, without a call, when the target behind the device
    /// is known to be gone.
    fn target_gone<'e>(
        &self,
        results: impl Iterator<Item = &'e mut Result<(), PageError>>,
    ) -> bool {
        let why = if let Some(guest) = self.guest.as_ref().filter(|g| !g.is_alive()) {
            format!("the QEMU guest (pid {}) is gone", guest.pid())
        } else if let Some((file, size)) = &self.ram_file {
            // (A file cut between this check and the call still can.)
            match file.metadata().map(|m| m.len()) {
                Ok(now) if now < *size => {
                    format!("the guest's RAM file shrank from {size:#x} to {now:#x} bytes")
                }
                _ => return false,
            }
        } else {
            return false;
        };
        if !self
            .gone_logged
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            log::error!("{why}: reads and writes fail");
        }
        for r in results {
            *r = Err(PageError::TargetGone);
        }
        true
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

impl Handle {
    /// Fills the scratch arrays with the legal entries below `limit`;
    /// the others get their error at once.
    fn prepare<'e>(
        &mut self,
        limit: u64,
        rules: Limits,
        entries: impl Iterator<Item = (u64, *mut u8, usize, &'e mut Result<(), PageError>)>,
    ) {
        self.mems.clear();
        self.owners.clear();
        for (i, (addr, pb, len, result)) in entries.enumerate() {
            // A legal entry stays inside one page and the limit is a page
            // boundary, so an entry is wholly below it or wholly past it.
            let checked = match rules.check(addr, len) {
                Ok(()) if addr >= limit => Err(PageError::OutOfRange),
                other => other,
            };
            match checked {
                Ok(()) => {
                    *result = Err(PageError::NotIssued);
                    self.mems.push(MEM_SCATTER::new(addr, pb, len as u32));
                    self.owners.push(i);
                }
                Err(e) => *result = Err(e),
            }
        }
        // Taken after all pushes: `mems` does not move again until the call.
        self.ptrs.clear();
        self.ptrs
            .extend(self.mems.iter_mut().map(|m| m as *mut MEM_SCATTER));
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

/// Opens the device `config` describes; on failure, LeechCore's message
/// if it gave one.
fn create(lib: &Library, config: &mut LC_CONFIG) -> Result<HANDLE, Option<String>> {
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
fn copy_c_string(
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

fn c_string(field: &[c_char; sys::MAX_PATH]) -> String {
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

/// Refuses a max address that leaves nothing to read or is not a page
/// boundary (LeechCore's memory map is made of whole pages).
fn check_max_address(max_address: Option<u64>) -> Result<(), Error> {
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

/// LeechCore's file device "opens" a folder as a 4 GiB image whose every
/// read fails, and anything but a file or a block device is no image
/// either: refuse them before opening. A path that cannot be looked at is
/// left to LeechCore (and explained by [`diagnose_open_failure`]).
fn check_image_file(device: &str, library: &Path) -> Result<(), String> {
    let Some(path) = image_path(device, library) else {
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
fn remote_failure(remote: &str, message: Option<String>) -> String {
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

/// The `shm=` and `qmp=` parameters of a `qemu://` device string, the
/// socket as LeechCore resolves it (a name without '/' is under /tmp/).
fn qemu_params(device: &str) -> Option<(&str, Option<PathBuf>)> {
    let params = device.strip_prefix("qemu://")?;
    let shm = params.split(',').find_map(|p| p.strip_prefix("shm="))?;
    let qmp = params
        .split(',')
        .find_map(|p| p.strip_prefix("qmp="))
        .map(|q| {
            if q.starts_with('/') {
                PathBuf::from(q)
            } else {
                Path::new("/tmp").join(q)
            }
        });
    Some((shm, qmp))
}

/// How long QEMU gets to answer a QMP command when the memory map is
/// checked.
const QMP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// QEMU's own map of the guest's RAM, for a `qemu://` device with a QMP
/// socket.
fn qemu_ram_map_of(
    device: &str,
    timeout: std::time::Duration,
) -> Option<Result<MemoryMap, crate::targets::QmpError>> {
    let (_, Some(qmp)) = qemu_params(device)? else {
        return None;
    };
    Some(crate::targets::qemu_ram_map(&qmp, "qemu-ram", timeout))
}

/// A watch on the QEMU process serving a `qemu://shm=NAME,…` device.
///
/// A RAM file can outlive its guest (QEMU never deletes it), and LeechCore
/// then "opens" it with a guessed memory map and serves stale memory; such
/// a device is refused: no QEMU serves the file and its QMP socket does not
/// answer.
fn qemu_watch(device: &str) -> Result<Option<crate::targets::ProcessWatch>, String> {
    let Some((shm, qmp)) = qemu_params(device) else {
        return Ok(None);
    };
    if let Some(guest) = crate::targets::qemu_serving(shm) {
        return Ok(crate::targets::ProcessWatch::new(guest.pid));
    }
    // No file at all is a wrong name (or a guest not started yet), not a
    // guest that went away.
    let ram = Path::new("/dev/shm").join(shm);
    if std::fs::symlink_metadata(&ram).is_err() {
        return Err(missing_ram_file(&ram));
    }
    // Perhaps a QEMU this process cannot see (another pid namespace).
    let answers = qmp
        .as_ref()
        .is_some_and(|q| std::os::unix::net::UnixStream::connect(q).is_ok());
    if answers {
        log::warn!("no QEMU visible for /dev/shm/{shm}: a guest that dies will not be noticed");
        Ok(None)
    } else {
        Err(format!(
            "the guest is gone: no running QEMU serves /dev/shm/{shm} and its QMP socket {} does not answer \
             (the RAM file was left behind by a QEMU that exited)",
            qmp.map_or("(none given)".into(), |q| q.display().to_string())
        ))
    }
}

/// The message for a `shm=` name with no file in /dev/shm, with the guests
/// that can be opened instead.
fn missing_ram_file(ram: &Path) -> String {
    let running: Vec<String> = crate::targets::qemu_guests()
        .iter()
        .flat_map(|g| g.device_strings())
        .collect();
    let others = if running.is_empty() {
        "no QEMU guest with its RAM in /dev/shm and a QMP socket is running".to_string()
    } else {
        format!("running guests: {}", running.join(" "))
    };
    format!(
        "guest RAM file {} does not exist (check `shm=`; {others})",
        ram.display()
    )
}

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

/// The file on this machine a device string reads memory from, if it names
/// one: the image of LeechCore's `file` device (`file:///mem.raw`,
/// `file://file=/mem.raw,write=1`, or a bare path, which LeechCore also
/// opens as an image) or the guest RAM file `/dev/shm/NAME` of a
/// `qemu://shm=NAME,…` device. Relative paths are left relative: LeechCore
/// opens them from the current directory. For callers that must not write
/// over the memory they read (a dump into its own source).
pub fn device_file(device: &str) -> Option<PathBuf> {
    if let Some((shm, _)) = qemu_params(device) {
        return Some(Path::new("/dev/shm").join(shm));
    }
    if let Some(path) = file_device_image(device) {
        return Some(PathBuf::from(path));
    }
    // LeechCore opens a string that names no device type as an image file.
    let bare = !device.contains("://") && Path::new(device).is_file();
    bare.then(|| PathBuf::from(device))
}

/// The image path of a `file://` device string: its `file=` parameter, or
/// everything after `file://` (as LeechCore reads it; the type and the key
/// in any case).
fn file_device_image(device: &str) -> Option<&str> {
    let (kind, params) = device.split_once("://")?;
    if !kind.eq_ignore_ascii_case("file") {
        return None;
    }
    let param = params.split(',').find_map(|p| {
        p.split_once('=')
            .filter(|(k, _)| k.eq_ignore_ascii_case("file"))
            .map(|(_, v)| v)
    });
    Some(param.unwrap_or(params))
}

/// The image a device string opens with LeechCore's `file` device: the
/// path of a `file://` string, or a string without `://` whose first word
/// (up to a `:`) is no device type, built in or a plugin beside `library`:
/// LeechCore opens it as a path.
fn image_path<'a>(device: &'a str, library: &Path) -> Option<&'a str> {
    if device.contains("://") {
        return file_device_image(device);
    }
    let word = device
        .split(':')
        .next()
        .unwrap_or(device)
        .to_ascii_lowercase();
    let plugin = |w: &str| {
        let dir = library.parent().unwrap_or(Path::new("."));
        dir.join(format!("leechcore_device_{w}.so")).exists()
    };
    let device_type = BUILT_IN_DEVICES.contains(&word.as_str()) || plugin(&word);
    (!device_type).then_some(device)
}

/// Smallest image LeechCore's file device opens.
const FILE_DEVICE_MIN_SIZE: u64 = 16 << 20;

/// LeechCore rarely says why it failed; guess the usual causes from the
/// device string so the user gets more than "failed".
fn diagnose_open_failure(device: &str, library: &Path) -> String {
    let (kind, params) = match device.split_once("://") {
        Some((kind, rest)) => (kind.to_ascii_lowercase(), rest),
        None => (
            device
                .split(':')
                .next()
                .unwrap_or(device)
                .to_ascii_lowercase(),
            "",
        ),
    };
    let param = |key: &str| {
        params
            .split(',')
            .find_map(|p| p.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
    };
    let lib_dir = library.parent().unwrap_or(Path::new("."));
    let plugin = lib_dir.join(format!("leechcore_device_{kind}.so"));
    // A path, opened by the file device.
    let (kind, params) = match image_path(device, library) {
        Some(path) if !device.contains("://") => ("file".to_string(), path),
        _ => (kind, params),
    };
    let generic = "LeechCore gave no reason; open with more verbosity to see its messages";
    match kind.as_str() {
        "file" => {
            let path = file_device_image(device).unwrap_or(params);
            match std::fs::metadata(path) {
                Err(e) => format!("cannot open image file `{path}`: {e}"),
                Ok(m) if m.is_dir() => format!("`{path}` is a folder, not an image file"),
                Ok(m) if m.len() < FILE_DEVICE_MIN_SIZE => format!(
                    "image file `{path}` is {} bytes; LeechCore's file device refuses files under 16 MiB",
                    m.len()
                ),
                Ok(_) => format!("LeechCore did not recognise `{path}` as a memory image; {generic}"),
            }
        }
        "qemu" => {
            let shm = param("shm").map(|s| Path::new("/dev/shm").join(s));
            let qmp = param("qmp").map(|s| {
                if s.starts_with('/') {
                    s.into()
                } else {
                    Path::new("/tmp").join(s)
                }
            });
            match (shm, qmp) {
                (None, _) | (_, None) => "the qemu device needs `shm=NAME,qmp=SOCKET`".into(),
                (Some(shm), _) if !shm.exists() => format!("guest RAM file {} does not exist", shm.display()),
                (_, Some(qmp)) if !qmp.exists() => format!("QMP socket {} does not exist", qmp.display()),
                _ => format!(
                    "the guest did not answer on its QMP socket (QMP serves one client at a time; \
                     is another tool connected?) or its RAM is not the backend `qemu-ram`; {generic}"
                ),
            }
        }
        k if !BUILT_IN_DEVICES.contains(&k) && !plugin.exists() => format!(
            "unknown device type `{k}`: not built into LeechCore, and no plugin {} exists",
            plugin.display()
        ),
        _ => generic.into(),
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
    fn device_strings_that_do_not_fit_are_refused_not_cut() {
        let mut field = [0 as c_char; sys::MAX_PATH];
        assert!(copy_c_string(&mut field, &"x".repeat(259), "device string").is_ok());
        assert_eq!(field[259], 0);
        let err = copy_c_string(&mut field, &"x".repeat(260), "device string").unwrap_err();
        assert!(err.to_string().contains("260 bytes long"), "{err}");
        assert!(copy_c_string(&mut field, "a\0b", "device string").is_err());
    }

    #[test]
    fn diagnosis_names_the_likely_cause() {
        let lib = Path::new("/nowhere/leechcore.so");
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

    #[test]
    fn folders_and_other_non_images_are_refused_before_opening() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        // Plugins are looked for beside the library.
        let lib = dir.path().join("leechcore.so");
        std::fs::write(dir.path().join("leechcore_device_qemu.so"), b"").unwrap();
        let check_image_file = |device: &str| super::check_image_file(device, &lib);
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
        assert_eq!(image_path("mem.raw", &lib), Some("mem.raw"));
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

    #[test]
    fn a_missing_ram_file_is_not_called_a_gone_guest() {
        let err = qemu_watch("qemu://shm=leechio-none-such-guest,qmp=/tmp/leechio-none-such.qmp")
            .unwrap_err();
        assert!(
            err.starts_with("guest RAM file /dev/shm/leechio-none-such-guest does not exist")
                && !err.contains("gone"),
            "{err}"
        );
        assert!(
            err.contains("running guests: qemu://shm=")
                || err.contains("no QEMU guest with its RAM in /dev/shm"),
            "{err}"
        );
    }
}
