//! A Linux kernel in physical memory, found with no configuration, and
//! what it holds, read a level of each structure at a time.
//!
//! In layers, after drgn's Linux helpers:
//! - `find`: finding the kernel (its image and page tables, kallsyms, BTF,
//!   `init_task`, the cache of kernels found, VMCOREINFO): [`Kernel::find`];
//! - `structures`: the kernel's generic data structures (xarray, maple
//!   tree, red-black tree, list), walked level by level, knowing nothing
//!   of what they hold, and failing one way ([`StructureFailure`]);
//! - `offsets`: every offset the walks read by, asked of BTF once;
//! - the walks, named for what they give: [`Kernel::processes`] (tasks
//!   from the pid table), [`Kernel::task_details`] (executables, exit
//!   statuses, 32-bit or not), [`Kernel::vmas`] (memory maps, with the
//!   paths of their files), [`Kernel::modules`] (loadable modules, with
//!   [`Kernel::module_exports`] and [`Kernel::module_sections`]),
//!   [`Kernel::kallsyms`] (every symbol of the kernel's table),
//!   [`Kernel::open_files`] (each process's fds, as `/proc/PID/fd`
//!   names them),
//!   [`Kernel::system`] (its names, boot time, uptime and command line),
//!   [`Kernel::dmesg`] (its log buffer),
//!   [`Kernel::sockets`] and [`Kernel::interfaces`] (the network, as
//!   `ss -tuanp` and `ip addr` show it),
//!   [`Kernel::process_views`] (each task through the pid table, the task
//!   list, its thread group and the run queues: what hides),
//!   [`Kernel::cached_files`] and [`Kernel::cached_file`] (files in the
//!   page cache, and their cached bytes, deleted ones still open too).
//!   [`Kernel::module_views`] (the modules through their list, address
//!   tree and sysfs, with taint and parameters) and [`Kernel::hooks`]
//!   (system-call tables and ftrace callbacks pointing outside the
//!   kernel's and modules' code).
//!
//! A [`Kernel`] keeps the memory it was found in: every walk reads that
//! memory, so none can be handed another target's.

#[cfg(test)]
mod fake_memory;
mod files;
mod find;
mod hooks;
mod kernel;
mod kmem;
mod log;
mod maps;
mod modules;
mod net;
mod offsets;
mod page_cache;
mod paths;
mod processes;
mod structures;
mod symbols;
mod system;
mod task_details;
mod user_memory;
mod views;

pub use files::{FileKind, FilesFailure, OpenFile, OpenFiles, ProcessFiles, Socket, TaskFiles};
pub use find::btf::{Answer, Btf, BtfError, Header as BtfHeader, Query, MAX_ANSWER, MAX_BTF};
pub use find::image::{Segment, KERNEL_MAP, KERNEL_MAP_SIZE};
pub use find::vmcoreinfo::VmcoreinfoError;
pub use find::{CacheLocation, FindError, Hints};
pub use hooks::{Hook, HookTable, Hooks};
pub use kernel::{Kernel, Source};
pub use log::{Caller, KernelLog, LogRecord};
pub use maps::{MapsFailure, VmFlags, Vma, Vmas};
pub use modules::{
    kernel_taint_letters, module_taint_letters, Module, ModuleList, ModuleParam, ModuleState,
    ModuleView, ModuleViews, ParamKind,
};
pub use page_cache::{CacheError, CacheFailure, CachedFile, CachedFiles, FileContents, FileQuery};
pub use processes::{split_command_line, Process, ProcessList, Stage, Thread, WalkFailure};
pub use structures::StructureFailure;
pub use system::{System, Uname};
pub use task_details::{
    exit_status, Capabilities, Credentials, DetailsAsked, TaskDetails, TaskState,
};
pub use views::{ProcessViews, RunQueue, TaskViews, View, ViewFailure};

pub use net::{
    state_name, InetSocket, Interface, Interfaces, Ipv4Address, Ipv6Address, NetFailure, Protocol,
    SocketOwner, Sockets, TCP_CLOSE, TCP_ESTABLISHED, TCP_LISTEN,
};
pub use offsets::ask_walk_questions;
