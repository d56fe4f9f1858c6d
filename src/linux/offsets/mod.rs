//! One set of offsets: every member offset, size and enumerator the walks
//! read the kernel by is asked of its BTF here, once, when the kernel is
//! found, and kept with the [`Kernel`](crate::linux::Kernel). A warm start
//! answers the same questions from the cache, so this is also the list of
//! what the cache must keep.
//!
//! Each walk's offsets stand or fall alone: a kernel whose BTF lacks a
//! member of the memory maps still lists its processes, and only
//! `init_task`'s are needed to find the kernel at all.

mod details;
mod files;
mod integrity;
mod log;
mod maps;
mod modules;
mod net;
mod page_cache;
mod structures;
mod system;
mod tasks;
mod views;

pub(crate) use details::{CompatFlag, CredLayout, DetailsLayout};
pub(crate) use files::{span, FilesLayout};
#[cfg(test)]
pub(crate) use integrity::NodeKind;
pub(crate) use integrity::{HooksLayout, ParamLayout, SysfsLayout};
pub(crate) use log::{Int, LegacyLayout, LogLayout, RecordLayout, RingLayout};
pub(crate) use maps::{MapsLayout, PathLayout, Tree};
pub(crate) use modules::{ModTreeLayout, ModuleLayout, SectionLayout, SymbolForm};
#[cfg(test)]
pub(crate) use net::{DeviceLayout, Ipv4Layout};
pub(crate) use net::{InterfaceLayout, Ipv6Layout, SockLayout};
pub(crate) use page_cache::CacheLayout;
pub(crate) use structures::{
    ListLayout, MapleLayout, NodeLayout, RbLayout, XaLayout, MAPLE_NODE_SIZE,
};
pub(crate) use system::{ClockLayout, UtsLayout, UTS_FIELDS};
pub(crate) use tasks::{InitTaskLayout, ProcessLayout};
pub(crate) use views::{GroupLinks, SchedLayout, ViewsLayout};

use crate::linux::find::btf::{Btf, BtfError};

/// The offsets of every walk, from one kernel's BTF.
#[derive(Debug, Clone)]
pub(crate) struct Offsets {
    /// What `init_task` is checked by when the kernel is found.
    pub init_task: InitTaskLayout,
    /// The process list's (pid table, `struct pid`, tasks, `mm`s).
    pub processes: Result<ProcessLayout, BtfError>,
    /// The memory maps' (VMA tree, VMAs, file paths).
    pub maps: Result<MapsLayout, BtfError>,
    /// The module list's (`struct module`).
    pub modules: Result<ModuleLayout, BtfError>,
    /// The module address tree's (`mod_tree`), a second view of the
    /// modules.
    pub module_tree: Result<ModTreeLayout, BtfError>,
    /// The modules' parameters (`struct kernel_param`).
    pub params: Result<ParamLayout, BtfError>,
    /// The modules' sysfs view (`/sys/module`), a third view of them.
    pub sysfs: Result<SysfsLayout, BtfError>,
    /// The hooks' (ftrace callbacks, the system-call table's length).
    pub hooks: HooksLayout,
    /// Each task's details (executable, exit code, 32-bit or not,
    /// credentials, start time, environment).
    pub details: Result<DetailsLayout, BtfError>,
    /// The open files' (fd tables, `struct file`, sockets).
    pub files: Result<FilesLayout, BtfError>,
    /// The first UTS namespace's name (`uname`).
    pub uts: Result<UtsLayout, BtfError>,
    /// The timekeeper's clocks in `tk_core` (boot time, uptime).
    pub clock: Result<ClockLayout, BtfError>,
    /// The kernel log's buffer.
    pub log: Result<LogLayout, BtfError>,
    /// The other views of the tasks (the task list, thread groups, run
    /// queues), each standing alone.
    pub views: Result<ViewsLayout, BtfError>,
    /// Each socket's `struct sock`.
    pub sockets: Result<SockLayout, BtfError>,
    /// The network namespaces, their devices and addresses.
    pub interfaces: Result<InterfaceLayout, BtfError>,
    /// The page cache's (dentry hash chains, inodes, mappings, pages).
    pub page_cache: Result<CacheLayout, BtfError>,
}

impl Offsets {
    /// The offsets in `btf`; an error when even `init_task`'s are
    /// missing (then no kernel can be found with it).
    pub fn from_btf(btf: &Btf) -> Result<Offsets, BtfError> {
        Ok(Offsets {
            init_task: InitTaskLayout::from_btf(btf)?,
            processes: ProcessLayout::from_btf(btf),
            maps: MapsLayout::from_btf(btf),
            modules: ModuleLayout::from_btf(btf),
            module_tree: ModTreeLayout::from_btf(btf),
            params: ParamLayout::from_btf(btf),
            sysfs: SysfsLayout::from_btf(btf),
            hooks: HooksLayout::from_btf(btf),
            details: DetailsLayout::from_btf(btf),
            files: FilesLayout::from_btf(btf),
            uts: UtsLayout::from_btf(btf),
            clock: ClockLayout::from_btf(btf),
            log: LogLayout::from_btf(btf),
            views: ViewsLayout::from_btf(btf),
            sockets: SockLayout::from_btf(btf),
            interfaces: InterfaceLayout::from_btf(btf),
            page_cache: CacheLayout::from_btf(btf),
        })
    }
}

/// Asks `btf` every question the walks ask (the kernel's check, the
/// process list, memory maps, the module list, each task's details, the
/// open files, the system's names and clocks, the kernel log, the network,
/// the tasks' other views, the page cache): the answers a warm start must
/// have, and what the fuzz
/// target asks of random BTF. The first error of each walk, if any, and
/// each answer of the views not kept. (The module address tree, the
/// modules' parameters and sysfs view, and the hooks' offsets are asked
/// too, but a kernel may lack them: their errors are not one.)
pub fn ask_walk_questions(btf: &Btf) -> Vec<BtfError> {
    let _ = ModTreeLayout::from_btf(btf);
    let _ = ParamLayout::from_btf(btf);
    // (But an answer of the sysfs view a warm start did not keep is.)
    let sysfs = SysfsLayout::from_btf(btf)
        .err()
        .filter(|e| matches!(e, BtfError::NotKept(..)));
    let _ = HooksLayout::from_btf(btf);
    let views = ViewsLayout::from_btf(btf);
    // A view the BTF lacks is no error of the walks; an answer a warm
    // start did not keep is.
    let view_errors = views
        .iter()
        .flat_map(ViewsLayout::errors)
        .filter(|e| matches!(e, BtfError::NotKept(..)))
        .cloned();
    [
        InitTaskLayout::from_btf(btf).map(drop),
        ProcessLayout::from_btf(btf).map(drop),
        MapsLayout::from_btf(btf).map(drop),
        ModuleLayout::from_btf(btf).map(drop),
        DetailsLayout::from_btf(btf).map(drop),
        FilesLayout::from_btf(btf).map(drop),
        UtsLayout::from_btf(btf).map(drop),
        ClockLayout::from_btf(btf).map(drop),
        LogLayout::from_btf(btf).map(drop),
        SockLayout::from_btf(btf).map(drop),
        InterfaceLayout::from_btf(btf).map(drop),
        views.as_ref().map(drop).map_err(Clone::clone),
        CacheLayout::from_btf(btf).map(drop),
    ]
    .into_iter()
    .filter_map(Result::err)
    .chain(view_errors)
    .chain(sysfs)
    .collect()
}
