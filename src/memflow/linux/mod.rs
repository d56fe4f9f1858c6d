//! memflow's `Os` for a Linux kernel found with no profile
//! ([`Kernel::find`]): its processes, its modules and its symbols, read
//! through the engine over any memflow physical memory, so a walk costs a
//! connector call per level of what it reads, not one per pointer.
//!
//! - The process list is one walk of the kernel's pid table for the whole
//!   list, with each process's details (executable, exit status, 32-bit
//!   or not) read beside it.
//! - A process's memory is read through its own page tables on the engine
//!   ([`LinuxProcess`]); the OS's own memory view is the kernel's virtual
//!   memory, and its physical memory is the connector's.

mod elf;
mod kernel_modules;
mod process;
mod view;

use std::sync::{Arc, Mutex, OnceLock};

use memflow::architecture::ArchitectureIdent;
use memflow::error::{Error, ErrorKind, ErrorOrigin, Result};
use memflow::mem::{
    MemoryView, MemoryViewMetadata, PhysicalMemory, PhysicalMemoryMapping, PhysicalMemoryMetadata,
    PhysicalReadMemOps, PhysicalWriteMemOps, ReadRawMemOps, WriteRawMemOps,
};
use memflow::os::{
    AddressCallback, ExportCallback, ImportCallback, ModuleInfo, ModuleInfoCallback, Os, OsInfo,
    ProcessInfo, ProcessInfoCallback, ProcessState, SectionCallback,
};
use memflow::types::{umem, Address};

use crate::linux::{FindError, Hints, Kernel, Process as Task, TaskDetails};
use crate::memflow::PhysicalMemoryBackend;
use crate::vm::Paging;
use crate::{AddressSpace, Memory};

pub use process::LinuxProcess;
pub use view::SpaceView;

/// An OS error, logged as memflow logs its own: one line naming the cause.
pub(crate) fn os_error(kind: ErrorKind, why: impl std::fmt::Display) -> Error {
    Error(ErrorOrigin::OsLayer, kind).log_error(why)
}

/// Runs `f`, turning a panic into an error that names what was being
/// done: no panic leaves the OS for memflow's host (across a plugin's C
/// boundary it would abort the host).
pub(crate) fn guard<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(os_error(
            ErrorKind::Unknown,
            format!("linux_btf: internal error in {what}"),
        ))
    })
}

/// memflow's architecture for `paging` (64-bit x86; the flag says 5-level
/// paging).
fn x86_64(paging: Paging) -> ArchitectureIdent {
    ArchitectureIdent::X86(64, paging == Paging::FiveLevel)
}

/// What every clone of an OS shares: the engine, the kernel, and the
/// processes of the last list (so that opening one listed costs no list).
struct Shared {
    /// The kernel, which holds the engine it was found through.
    kernel: Kernel,
    listed: Mutex<Vec<Listed>>,
    /// The kernel's symbol table, read on first use.
    kallsyms: OnceLock<std::result::Result<Vec<(String, u64)>, String>>,
    /// The connector's read and write calls so far.
    calls: Box<dyn Fn() -> (u64, u64) + Send + Sync>,
}

impl Drop for Shared {
    /// Says what the OS cost in the connector's calls, once every clone
    /// of it (and every process opened) is gone: each call is one
    /// `phys_read_raw_iter` (or write), however many reads it carried.
    fn drop(&mut self) {
        let (reads, writes) = (self.calls)();
        log::info!(
            "linux_btf: closing after {reads} read calls and {writes} write calls to the connector"
        );
    }
}

/// A process as the last list gave it.
#[derive(Clone, Debug)]
struct Listed {
    info: ProcessInfo,
    /// Its `mm_struct`, where its memory maps hang.
    mm: Option<u64>,
}

/// A Linux kernel in memflow physical memory `P`, as memflow's `Os`.
/// Clones share the engine and the kernel.
#[derive(Clone)]
pub struct LinuxOs<P> {
    shared: Arc<Shared>,
    phys: P,
    kernel_view: SpaceView,
    info: OsInfo,
}

impl<P> std::fmt::Debug for LinuxOs<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinuxOs")
            .field("kernel", &self.shared.kernel.banner())
            .finish_non_exhaustive()
    }
}

impl<P: PhysicalMemory + Clone + 'static> LinuxOs<P> {
    /// Finds the Linux kernel in `phys`, as [`Kernel::find`] does with
    /// `hints`, reading through the engine over a clone of `phys`.
    pub fn new(phys: P, hints: &Hints) -> std::result::Result<LinuxOs<P>, FindError> {
        let backend = Arc::new(PhysicalMemoryBackend::new(phys.clone()));
        let mem = Memory::with_config(backend.clone(), crate::EngineConfig::default());
        let kernel = Kernel::find(&mem, hints)?;
        let image_end = kernel
            .segments()
            .last()
            .map_or(kernel.virtual_base(), |s| s.va + s.len);
        let info = OsInfo {
            base: Address::from(kernel.virtual_base()),
            size: (image_end - kernel.virtual_base()) as umem,
            arch: x86_64(kernel.paging()),
        };
        let kernel_view = SpaceView::new(kernel.space().clone(), 64);
        Ok(LinuxOs {
            shared: Arc::new(Shared {
                kernel,
                listed: Mutex::default(),
                kallsyms: OnceLock::new(),
                calls: Box::new(move || (backend.read_calls(), backend.write_calls())),
            }),
            phys,
            kernel_view,
            info,
        })
    }

    /// The kernel found.
    pub fn kernel(&self) -> &Kernel {
        &self.shared.kernel
    }

    /// The engine the OS reads through.
    pub fn memory(&self) -> &Memory {
        self.shared.kernel.memory()
    }
}

impl Shared {
    /// Lists the processes (one walk of the pid table, the details read
    /// beside it), keeping what opening one needs.
    fn list(&self) -> Vec<Listed> {
        let (list, details) = self.kernel.processes_with_details();
        for failure in &list.failed {
            log::info!("linux_btf: process list: {failure}");
        }
        let none = TaskDetails::default();
        let listed: Vec<Listed> = list
            .processes
            .iter()
            .map(|p| {
                let d = details.get(&p.task).unwrap_or(&none);
                for why in &d.failed {
                    log::info!("linux_btf: process {}: {why}", p.pid);
                }
                Listed {
                    info: self.process_info(p, d),
                    mm: p.mm,
                }
            })
            .collect();
        *self.listed.lock().unwrap_or_else(|e| e.into_inner()) = listed.clone();
        listed
    }

    /// memflow's information on a listed process.
    fn process_info(&self, p: &Task, d: &TaskDetails) -> ProcessInfo {
        let sys_arch = x86_64(self.kernel.paging());
        let state = match p.state {
            'Z' | 'X' => d
                .exit_status()
                .map_or(ProcessState::Unknown, ProcessState::Dead),
            _ => ProcessState::Alive,
        };
        let path = match &d.executable {
            Some(Ok(path)) => path.as_str(),
            _ => "",
        };
        ProcessInfo {
            address: Address::from(p.task),
            pid: p.pid,
            state,
            name: p.name.as_str().into(),
            path: path.into(),
            command_line: p.cmdline.join(" ").as_str().into(),
            sys_arch,
            proc_arch: match d.compat {
                Some(true) => ArchitectureIdent::X86(32, false),
                _ => sys_arch,
            },
            // A kernel thread runs in the kernel's own address space.
            dtb1: Address::from(p.dtb.unwrap_or(self.kernel.dtb())),
            dtb2: Address::invalid(),
        }
    }

    /// The listed process whose task is at `address`, from the last list
    /// or, when it is not in it, from a new one.
    fn listed(&self, address: Address) -> Option<Listed> {
        let last = self
            .listed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let find = |list: &[Listed]| list.iter().find(|l| l.info.address == address).cloned();
        find(&last).or_else(|| find(&self.list()))
    }
}

impl<P: PhysicalMemory + Clone + 'static> Os for LinuxOs<P> {
    type ProcessType<'a> = LinuxProcess;
    type IntoProcessType = LinuxProcess;

    fn process_address_list_callback(&mut self, mut callback: AddressCallback) -> Result<()> {
        guard("the process list", || {
            for l in self.shared.list() {
                if !callback.call(l.info.address) {
                    break;
                }
            }
            Ok(())
        })
    }

    /// One walk for the whole list (memflow's default would read each
    /// process again by its address).
    fn process_info_list_callback(&mut self, mut callback: ProcessInfoCallback) -> Result<()> {
        guard("the process list", || {
            for l in self.shared.list() {
                if !callback.call(l.info) {
                    break;
                }
            }
            Ok(())
        })
    }

    fn process_info_by_address(&mut self, address: Address) -> Result<ProcessInfo> {
        guard("a process by address", || {
            self.shared
                .list()
                .into_iter()
                .find(|l| l.info.address == address)
                .map(|l| l.info)
                .ok_or_else(|| {
                    os_error(
                        ErrorKind::ProcessNotFound,
                        format!("linux_btf: no process has its task at {address:x}"),
                    )
                })
        })
    }

    fn process_by_info(&mut self, info: ProcessInfo) -> Result<Self::ProcessType<'_>> {
        guard("opening a process", || {
            LinuxProcess::open(self.shared.clone(), info)
        })
    }

    fn into_process_by_info(self, info: ProcessInfo) -> Result<Self::IntoProcessType> {
        guard("opening a process", || {
            LinuxProcess::open(self.shared.clone(), info)
        })
    }

    fn module_address_list_callback(&mut self, callback: AddressCallback) -> Result<()> {
        guard("the module list", || {
            kernel_modules::address_list(&self.shared, callback)
        })
    }

    /// One walk for the whole list.
    fn module_list_callback(&mut self, callback: ModuleInfoCallback) -> Result<()> {
        guard("the module list", || {
            kernel_modules::list(&self.shared, callback)
        })
    }

    fn module_by_address(&mut self, address: Address) -> Result<ModuleInfo> {
        guard("a module by address", || {
            kernel_modules::by_address(&self.shared, address)
        })
    }

    fn primary_module_address(&mut self) -> Result<Address> {
        guard("the kernel image", || {
            Ok(kernel_modules::kernel_image(&self.shared).address)
        })
    }

    fn module_import_list_callback(
        &mut self,
        info: &ModuleInfo,
        callback: ImportCallback,
    ) -> Result<()> {
        guard("a module's imports", || {
            kernel_modules::imports(&self.shared, info, callback)
        })
    }

    fn module_export_list_callback(
        &mut self,
        info: &ModuleInfo,
        callback: ExportCallback,
    ) -> Result<()> {
        guard("a module's exports", || {
            kernel_modules::exports(&self.shared, info, callback)
        })
    }

    fn module_section_list_callback(
        &mut self,
        info: &ModuleInfo,
        callback: SectionCallback,
    ) -> Result<()> {
        guard("a module's sections", || {
            kernel_modules::sections(&self.shared, info, callback)
        })
    }

    fn info(&self) -> &OsInfo {
        &self.info
    }
}

/// The OS's physical memory is the connector's.
impl<P: PhysicalMemory + Clone + 'static> PhysicalMemory for LinuxOs<P> {
    fn phys_read_raw_iter(&mut self, data: PhysicalReadMemOps) -> Result<()> {
        self.phys.phys_read_raw_iter(data)
    }

    fn phys_write_raw_iter(&mut self, data: PhysicalWriteMemOps) -> Result<()> {
        self.phys.phys_write_raw_iter(data)
    }

    fn metadata(&self) -> PhysicalMemoryMetadata {
        self.phys.metadata()
    }

    fn set_mem_map(&mut self, mem_map: &[PhysicalMemoryMapping]) {
        self.phys.set_mem_map(mem_map)
    }
}

/// The OS's memory view is the kernel's virtual memory.
impl<P: PhysicalMemory + Clone + 'static> MemoryView for LinuxOs<P> {
    fn read_raw_iter(&mut self, data: ReadRawMemOps) -> Result<()> {
        guard("a kernel read", || self.kernel_view.read_raw_iter(data))
    }

    fn write_raw_iter(&mut self, data: WriteRawMemOps) -> Result<()> {
        guard("a kernel write", || self.kernel_view.write_raw_iter(data))
    }

    fn metadata(&self) -> MemoryViewMetadata {
        self.kernel_view.metadata()
    }
}

/// memflow's plugin groups the OS and its processes belong to (the macro
/// names the groups' parts, which memflow's prelude brings in).
mod groups {
    use super::{LinuxOs, LinuxProcess};
    use memflow::cglue;
    use memflow::mem::memory_view::*;
    use memflow::mem::phys_mem::*;
    use memflow::prelude::v1::*;

    cglue_impl_group!(LinuxOs<P>, OsInstance, { PhysicalMemory, MemoryView });
    cglue_impl_group!(LinuxProcess, ProcessInstance, {});
    cglue_impl_group!(LinuxProcess, IntoProcessInstance, {});
}

/// An address space of the engine on the kernel's paging mode.
fn space(shared: &Shared, dtb: u64) -> AddressSpace {
    AddressSpace::new(shared.kernel.memory().clone(), dtb, shared.kernel.paging())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_an_error_that_names_what_was_being_done() {
        let err = guard("a test's walk", || -> Result<()> { panic!("a walk's bug") }).unwrap_err();
        assert_eq!(err, Error(ErrorOrigin::OsLayer, ErrorKind::Unknown));
        assert_eq!(guard("a test's walk", || Ok(7)), Ok(7));
    }
}
