//! A Linux process as memflow's `Process`: its memory through its own page
//! tables on the engine, its state from its task, its memory maps and the
//! ELF files mapped in them.

use std::sync::Arc;

use memflow::architecture::ArchitectureIdent;
use memflow::cglue::tuple::CTup3;
use memflow::error::{ErrorKind, Result};
use memflow::mem::{
    MemoryRangeCallback, MemoryView, MemoryViewMetadata, ReadRawMemOps, WriteRawMemOps,
};
use memflow::os::{
    ExportCallback, ImportCallback, ModuleAddressCallback, ModuleAddressInfo, ModuleInfo,
    ModuleInfoCallback, Process, ProcessInfo, ProcessState, SectionCallback,
};
use memflow::types::{gap_remover::GapRemover, imem, umem, Address, PageType};

use super::{elf, guard, os_error, space, Shared, SpaceView};
use crate::join_all;
use crate::linux::{exit_status, Vma};

/// Bytes of an ELF header read to tell an ELF file and its class.
const ELF_IDENT: usize = 16;

/// A process of a [`super::LinuxOs`]. Clones share the engine.
#[derive(Clone)]
pub struct LinuxProcess {
    shared: Arc<Shared>,
    info: ProcessInfo,
    /// Its `mm_struct` (none for kernel threads and zombies).
    mm: Option<u64>,
    view: SpaceView,
}

impl std::fmt::Debug for LinuxProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinuxProcess")
            .field("pid", &self.info.pid)
            .field("task", &self.info.address)
            .finish_non_exhaustive()
    }
}

/// The pointer width of `arch`.
fn bits(arch: ArchitectureIdent) -> u8 {
    match arch {
        ArchitectureIdent::X86(32, _) => 32,
        _ => 64,
    }
}

/// A module: one mapped ELF file.
#[derive(Debug, Clone)]
struct Mapped {
    info: ModuleInfo,
}

impl LinuxProcess {
    /// Opens the process `info` describes, once its task is checked to
    /// hold it still: a process that exited since it was listed, its task
    /// freed or reused, is an error that says so.
    pub(super) fn open(shared: Arc<Shared>, info: ProcessInfo) -> Result<LinuxProcess> {
        let gone = |why: String| {
            os_error(
                ErrorKind::ProcessNotFound,
                format!(
                    "linux_btf: process {} ({}) is gone: {why}",
                    info.pid, info.name
                ),
            )
        };
        let listed = shared
            .listed(info.address)
            .ok_or_else(|| gone(format!("no listed task is at {:x}", info.address)))?;
        let task = info.address.to_umem();
        let state = shared
            .kernel
            .task_state(task)
            .map_err(|why| gone(format!("its task cannot be read: {why}")))?;
        if state.pid != info.pid || listed.info.pid != info.pid {
            return Err(gone(format!(
                "its task at {task:#x} now holds pid {}",
                state.pid
            )));
        }
        let view = SpaceView::new(space(&shared, info.dtb1.to_umem()), bits(info.proc_arch));
        Ok(LinuxProcess {
            shared,
            mm: listed.mm,
            info,
            view,
        })
    }

    /// The process's VMAs, or why there are none to read.
    fn vmas(&self) -> Result<Vec<Vma>> {
        let Some(mm) = self.mm else {
            return Ok(Vec::new());
        };
        let vmas = self.shared.kernel.vmas(mm);
        for failure in &vmas.failed {
            log::info!(
                "linux_btf: memory maps of process {}: {failure}",
                self.info.pid
            );
        }
        if vmas.vmas.is_empty() && !vmas.failed.is_empty() {
            return Err(os_error(
                ErrorKind::UnableToReadMemory,
                format!(
                    "linux_btf: the memory maps of process {} cannot be read: {}",
                    self.info.pid, vmas.failed[0]
                ),
            ));
        }
        Ok(vmas.vmas)
    }

    /// One module per mapped ELF file, in address order: from its lowest
    /// mapping to the end of its highest, named by its path. A file counts
    /// as ELF when its lowest mapping starts with the ELF magic.
    fn modules(&self) -> Result<Vec<Mapped>> {
        let vmas = self.vmas()?;
        // The VMAs of each file, by path, in address order.
        let mut files: Vec<(String, u64, u64, u64, u64)> = Vec::new();
        for v in &vmas {
            let Some(path) = &v.file else { continue };
            match files.iter_mut().find(|f| &f.0 == path) {
                Some(f) => f.2 = f.2.max(v.end),
                None => files.push((path.clone(), v.start, v.end, v.file_address, v.pgoff)),
            }
        }
        let space = self.view.space();
        let mut idents = vec![[0u8; ELF_IDENT]; files.len()];
        let reads = space.memory().block_on(join_all(
            files
                .iter()
                .zip(idents.iter_mut())
                .map(|(f, ident)| space.read(f.1, ident)),
        ));
        let mut modules = Vec::new();
        for ((path, base, end, file, pgoff), (ident, read)) in
            files.into_iter().zip(idents.iter().zip(reads))
        {
            if read.is_err() || pgoff != 0 || ident[..4] != *b"\x7fELF" {
                continue;
            }
            let arch = match ident[4] {
                1 => ArchitectureIdent::X86(32, false),
                _ => self.info.sys_arch,
            };
            let name = path.rsplit('/').next().unwrap_or(&path).to_string();
            modules.push(Mapped {
                info: ModuleInfo {
                    address: Address::from(file),
                    parent_process: self.info.address,
                    base: Address::from(base),
                    size: (end - base) as umem,
                    name: name.as_str().into(),
                    path: path.as_str().into(),
                    arch,
                },
            });
        }
        Ok(modules)
    }

    /// Whether a module of `arch` is asked for by `target` (all if none).
    fn wanted(target: Option<&ArchitectureIdent>, arch: ArchitectureIdent) -> bool {
        target.is_none_or(|t| *t == arch)
    }
}

impl Process for LinuxProcess {
    /// Alive until the task says it exited (or no longer holds the pid).
    fn state(&mut self) -> ProcessState {
        let state = guard("a process's state", || {
            Ok(self.shared.kernel.task_state(self.info.address.to_umem()))
        });
        match state.unwrap_or_else(|e| Err(e.to_string())) {
            Ok(s) if s.pid != self.info.pid => ProcessState::Unknown,
            Ok(s) if s.exited() => ProcessState::Dead(exit_status(s.exit_code)),
            Ok(_) => ProcessState::Alive,
            Err(why) => {
                log::info!("linux_btf: the state of process {}: {why}", self.info.pid);
                ProcessState::Unknown
            }
        }
    }

    fn set_dtb(&mut self, dtb1: Address, _dtb2: Address) -> Result<()> {
        guard("setting a process's DTB", || {
            self.info.dtb1 = dtb1;
            self.view = SpaceView::new(
                space(&self.shared, dtb1.to_umem()),
                bits(self.info.proc_arch),
            );
            Ok(())
        })
    }

    fn module_address_list_callback(
        &mut self,
        target_arch: Option<&ArchitectureIdent>,
        mut callback: ModuleAddressCallback,
    ) -> Result<()> {
        let modules = guard("a process's modules", || self.modules())?;
        for m in modules {
            if Self::wanted(target_arch, m.info.arch)
                && !callback.call(ModuleAddressInfo {
                    address: m.info.address,
                    arch: m.info.arch,
                })
            {
                break;
            }
        }
        Ok(())
    }

    /// One walk of the memory maps for the whole list.
    fn module_list_callback(
        &mut self,
        target_arch: Option<&ArchitectureIdent>,
        mut callback: ModuleInfoCallback,
    ) -> Result<()> {
        let modules = guard("a process's modules", || self.modules())?;
        for m in modules {
            if Self::wanted(target_arch, m.info.arch) && !callback.call(m.info) {
                break;
            }
        }
        Ok(())
    }

    fn module_by_address(
        &mut self,
        address: Address,
        architecture: ArchitectureIdent,
    ) -> Result<ModuleInfo> {
        guard("a process's modules", || self.modules())?
            .into_iter()
            .find(|m| m.info.address == address && m.info.arch == architecture)
            .map(|m| m.info)
            .ok_or_else(|| {
                os_error(
                    ErrorKind::ModuleNotFound,
                    format!(
                        "linux_btf: process {} maps no ELF file at {address:x}",
                        self.info.pid
                    ),
                )
            })
    }

    /// The module of the executable (`/proc/PID/exe`).
    fn primary_module_address(&mut self) -> Result<Address> {
        let exe = self.info.path.to_string();
        guard("a process's modules", || self.modules())?
            .into_iter()
            .find(|m| !exe.is_empty() && m.info.path.as_ref() == exe)
            .map(|m| m.info.address)
            .ok_or_else(|| {
                os_error(
                    ErrorKind::ModuleNotFound,
                    format!(
                        "linux_btf: process {} maps no executable{}",
                        self.info.pid,
                        match exe.is_empty() {
                            true => String::new(),
                            false => format!(" ({exe} is not mapped)"),
                        }
                    ),
                )
            })
    }

    fn module_import_list_callback(
        &mut self,
        info: &ModuleInfo,
        callback: ImportCallback,
    ) -> Result<()> {
        guard("a module's imports", || {
            elf::imports(self.view.space(), info, callback)
        })
    }

    fn module_export_list_callback(
        &mut self,
        info: &ModuleInfo,
        callback: ExportCallback,
    ) -> Result<()> {
        guard("a module's exports", || {
            elf::exports(self.view.space(), info, callback)
        })
    }

    fn module_section_list_callback(
        &mut self,
        info: &ModuleInfo,
        callback: SectionCallback,
    ) -> Result<()> {
        guard("a module's sections", || {
            elf::sections(self.view.space(), info, callback)
        })
    }

    fn info(&self) -> &ProcessInfo {
        &self.info
    }

    /// The VMAs in `start..end`, with their permissions as page types
    /// (writeable or read-only, executable or not); gaps of at most
    /// `gap_size` between VMAs of the same type are closed.
    fn mapped_mem_range(
        &mut self,
        gap_size: imem,
        start: Address,
        end: Address,
        out: MemoryRangeCallback,
    ) {
        let vmas = match guard("a process's memory maps", || self.vmas()) {
            Ok(vmas) => vmas,
            Err(_) => return,
        };
        let (start, end) = (start.to_umem(), end.to_umem());
        let mut ranges = GapRemover::new(out, gap_size, Address::from(start), Address::from(end));
        for v in vmas {
            let (a, b) = (v.start.max(start), v.end.min(end));
            if a >= b {
                continue;
            }
            let mut kind = match v.flags.write() {
                true => PageType::WRITEABLE,
                false => PageType::READ_ONLY,
            };
            if !v.flags.exec() {
                kind |= PageType::NOEXEC;
            }
            ranges.push_range(CTup3(Address::from(a), (b - a) as umem, kind));
        }
    }
}

impl MemoryView for LinuxProcess {
    fn read_raw_iter(&mut self, data: ReadRawMemOps) -> Result<()> {
        guard("a process read", || self.view.read_raw_iter(data))
    }

    fn write_raw_iter(&mut self, data: WriteRawMemOps) -> Result<()> {
        guard("a process write", || self.view.write_raw_iter(data))
    }

    fn metadata(&self) -> MemoryViewMetadata {
        self.view.metadata()
    }
}
