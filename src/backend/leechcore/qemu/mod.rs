//! What leechio adds to LeechCore's `qemu` device: a guest is checked
//! before LeechCore connects (a QEMU serves its RAM file, its QMP socket
//! answers), its memory map is taken from QEMU itself, and once open, a
//! guest that is gone fails every read and write instead of serving stale
//! or vanished memory. FPGA emulation delays are made exact (`delay`).
//! [`guests`] lists the running guests such a device can open.

mod delay;
pub mod guests;
mod params;
mod process;
mod qmp;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

// (For device_string's tests, which compare the delays it reads.)
#[cfg(test)]
pub(crate) use delay::EmulatedDelay;
pub(crate) use params::QemuParams;
use process::ProcessWatch;
use qmp::{qemu_ram_map, QmpError};

use crate::{MemoryMap, PageError};

/// How long QEMU gets to answer a QMP command when the memory map is
/// checked.
const QMP_TIMEOUT: Duration = Duration::from_secs(5);

/// A QEMU guest as found before LeechCore connects to it.
pub(super) struct Found {
    /// The device string's parameters.
    params: QemuParams,
    /// QEMU's process, when this process can see it.
    process: Option<ProcessWatch>,
    /// QEMU's own map of the guest's RAM, when a QMP socket is given.
    map: Option<Result<MemoryMap, QmpError>>,
}

impl Found {
    /// Checks the guest of `params` (with a RAM file named), and asks
    /// QEMU for its memory map; `Err` says why the device is refused.
    ///
    /// The map is asked before LeechCore connects: QMP serves one client
    /// at a time, and after LeechCore's hurried read QEMU may still be
    /// answering it (see `check_qemu_memory_map` in `memory_map.rs`).
    pub(super) fn look(params: &QemuParams) -> Result<Option<Found>, String> {
        let Some(shm) = &params.shm else {
            return Ok(None);
        };
        let process = watch(shm, params.qmp.as_deref())?;
        let map = ram_map_of(params, QMP_TIMEOUT);
        // LeechCore reads QMP with no time limit: it would wait forever.
        if let Some(Err(silent @ QmpError::Silent)) = &map {
            return Err(format!(
                "{silent} (waited {} s; LeechCore would wait without end)",
                QMP_TIMEOUT.as_secs()
            ));
        }
        Ok(Some(Found {
            params: params.clone(),
            process,
            map,
        }))
    }

    /// QEMU's own map of the guest's RAM, to check LeechCore's against:
    /// the one asked before LeechCore connected, or, if that failed, asked
    /// again now. `None` without a QMP socket, or (with a warning) when
    /// QEMU did not give it either time.
    pub(super) fn ram_map(self) -> Option<MemoryMap> {
        match self.map? {
            Ok(map) => Some(map),
            Err(first) => match ram_map_of(&self.params, 2 * QMP_TIMEOUT) {
                Some(Ok(map)) => Some(map),
                Some(Err(e)) => {
                    log::warn!(
                        "could not check LeechCore's memory map of the guest with QEMU \
                         (before opening: {first}; after: {e}); it may miss RAM ranges"
                    );
                    None
                }
                None => None,
            },
        }
    }
}

/// What is watched of an open guest.
#[derive(Debug)]
pub(super) struct Guest {
    /// The QEMU process. LeechCore only maps the RAM file after opening,
    /// so without this a killed guest would go on "reading" the memory it
    /// had when it died.
    process: Option<ProcessWatch>,
    /// The RAM file and the size it had when opened. LeechCore maps the
    /// file at that size; a read of a part the file no longer holds would
    /// kill the process with SIGBUS.
    ram_file: Option<(std::fs::File, u64)>,
    /// The death of the guest was logged (once).
    gone_logged: AtomicBool,
}

impl Guest {
    /// Watches the guest `found` once LeechCore has opened it.
    pub(super) fn opened(found: &mut Found) -> Guest {
        let ram_file = found.params.ram_file().and_then(|path| {
            let file = std::fs::File::open(path).ok()?;
            let size = file.metadata().ok()?.len();
            Some((file, size))
        });
        Guest {
            process: found.process.take(),
            ram_file,
            gone_logged: AtomicBool::new(false),
        }
    }

    /// Fails every entry, without a call, when the guest is known to be
    /// gone.
    pub(super) fn gone<'e>(
        &self,
        results: impl Iterator<Item = &'e mut Result<(), PageError>>,
    ) -> bool {
        let why = if let Some(process) = self.process.as_ref().filter(|p| !p.is_alive()) {
            format!("the QEMU guest (pid {}) is gone", process.pid())
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
        if !self.gone_logged.swap(true, Ordering::Relaxed) {
            log::error!("{why}: reads and writes fail");
        }
        for r in results {
            *r = Err(PageError::TargetGone);
        }
        true
    }
}

/// QEMU's own map of the guest's RAM, for a `qemu://` device with a QMP
/// socket.
fn ram_map_of(params: &QemuParams, timeout: Duration) -> Option<Result<MemoryMap, QmpError>> {
    let qmp = params.qmp.as_ref()?;
    Some(qemu_ram_map(qmp, "qemu-ram", timeout))
}

/// A watch on the QEMU process serving the RAM file `/dev/shm/<shm>`.
///
/// A RAM file can outlive its guest (QEMU never deletes it), and LeechCore
/// then "opens" it with a guessed memory map and serves stale memory; such
/// a device is refused: no QEMU serves the file and its QMP socket does not
/// answer.
fn watch(shm: &str, qmp: Option<&Path>) -> Result<Option<ProcessWatch>, String> {
    if let Some(guest) = guests::qemu_guests().into_iter().find(|g| g.shm == shm) {
        return Ok(ProcessWatch::new(guest.pid));
    }
    // No file at all is a wrong name (or a guest not started yet), not a
    // guest that went away.
    let ram = Path::new("/dev/shm").join(shm);
    if std::fs::symlink_metadata(&ram).is_err() {
        return Err(missing_ram_file(&ram));
    }
    // Perhaps a QEMU this process cannot see (another pid namespace).
    let answers = qmp.is_some_and(|q| std::os::unix::net::UnixStream::connect(q).is_ok());
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
    let running: Vec<String> = guests::qemu_guests()
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

/// Why opening a `qemu` device likely failed, when LeechCore gave no
/// reason; `generic` ends the message when nothing more is known.
pub(super) fn diagnose_open_failure(params: &QemuParams, generic: &str) -> String {
    match (params.ram_file(), &params.qmp) {
        (None, _) | (_, None) => "the qemu device needs `shm=NAME,qmp=SOCKET`".into(),
        (Some(shm), _) if !shm.exists() => {
            format!("guest RAM file {} does not exist", shm.display())
        }
        (_, Some(qmp)) if !qmp.exists() => {
            format!("QMP socket {} does not exist", qmp.display())
        }
        _ => format!(
            "the guest did not answer on its QMP socket (QMP serves one client at a time; \
             is another tool connected?) or its RAM is not the backend `qemu-ram`; {generic}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: /dev/shm and /proc
    fn a_missing_ram_file_is_not_called_a_gone_guest() {
        // `qemu://shm=leechio-none-such-guest,qmp=/tmp/leechio-none-such.qmp`
        let params = QemuParams {
            shm: Some("leechio-none-such-guest".into()),
            qmp: Some("/tmp/leechio-none-such.qmp".into()),
            delay: None,
        };
        let err = Found::look(&params).err().unwrap();
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
