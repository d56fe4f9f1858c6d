//! The kernel found: where its image, page tables and direct map lie,
//! its types and symbols, and the memory it was found in, which every
//! walk reads (so no walk can be handed another target's memory).

use std::collections::BTreeMap;

use super::find::btf::{Btf, BtfError};
use super::find::image::{Image, Segment};
use super::find::init_task::InitTask;
use super::kmem;
use super::offsets::Offsets;
use crate::vm::Paging;
use crate::{AddressSpace, Memory};

/// How the kernel was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// By searching memory.
    Search,
    /// From the cache file, checked against memory.
    Cache,
}

/// A Linux kernel found in physical memory, every value checked against
/// the kernel's own structures.
#[derive(Debug)]
pub struct Kernel {
    pub(super) space: AddressSpace,
    pub(super) image: Image,
    pub(super) direct_map_base: u64,
    pub(super) btf: Btf,
    pub(super) btf_location: Option<(u64, u64)>,
    pub(super) symbols: BTreeMap<String, u64>,
    pub(super) banner: String,
    pub(super) init_task: InitTask,
    pub(super) source: Source,
    /// What the walks read by, from BTF when the kernel was found.
    pub(super) offsets: Offsets,
    /// The build-ID note (address, bytes), when the kernel has one.
    pub(super) build_id: Option<(u64, Vec<u8>)>,
    /// `init_task.thread_pid`.
    pub(super) init_thread_pid: u64,
}

impl Kernel {
    /// The physical memory the kernel was found in, which every walk of
    /// it reads (a handle: clones share the engine).
    pub fn memory(&self) -> &Memory {
        self.space.memory()
    }

    /// The kernel's address space (its own top-level page table).
    pub fn space(&self) -> &AddressSpace {
        &self.space
    }

    /// Physical address of the kernel's top-level page table
    /// (`init_top_pgt`), the DTB of its address space.
    pub fn dtb(&self) -> u64 {
        self.space.dtb()
    }

    /// The paging mode of the kernel's tables, and of every process's.
    pub fn paging(&self) -> Paging {
        self.space.paging()
    }

    /// Virtual address of `_text`, the start of the kernel image.
    pub fn virtual_base(&self) -> u64 {
        self.image.virtual_base
    }

    /// Physical address of `_text`.
    pub fn physical_base(&self) -> u64 {
        self.image.physical_base
    }

    /// Where the direct map of all physical memory starts
    /// (`page_offset_base`): physical address `pa` is at `base + pa`.
    pub fn direct_map_base(&self) -> u64 {
        self.direct_map_base
    }

    /// The image's mapping from `_text`, merged by permissions.
    pub fn segments(&self) -> &[Segment] {
        &self.image.segments
    }

    /// The kernel's types.
    pub fn btf(&self) -> &Btf {
        &self.btf
    }

    /// Where the BTF was read (virtual address and length); `None` when it
    /// came from a file.
    pub fn btf_location(&self) -> Option<(u64, u64)> {
        self.btf_location
    }

    /// Byte offset of `path` (a member, or `a.b[0].c`) in struct `ty`.
    pub fn offset_of(&self, ty: &str, path: &str) -> Result<u64, BtfError> {
        self.btf.member_offset(ty, path)
    }

    /// Address of `init_task`, the first task (pid 0, "swapper/0").
    pub fn init_task(&self) -> u64 {
        self.init_task.address
    }

    /// Address of `init_pid_ns`, the first PID namespace (whose `idr`
    /// holds every pid).
    pub fn init_pid_ns(&self) -> u64 {
        self.init_task.pid_ns
    }

    /// Address of a symbol that was looked up (`init_task`,
    /// `init_pid_ns`, `init_top_pgt`, `page_offset_base`, `linux_banner`,
    /// `__start_BTF`, `__stop_BTF`, `special_mapping_name`,
    /// `sysctl_max_map_count`, `vmcoreinfo_data`, `vmcoreinfo_size`,
    /// `modules`, `__pgtable_l5_enabled`, `sysctl_nr_open`, the
    /// `d_dname` functions of sockets, pipes and anonymous inodes, those
    /// of [`Kernel::system`] and [`Kernel::dmesg`], `runqueues`,
    /// `nr_cpu_ids`, `__per_cpu_offset`, the page cache's
    /// `dentry_hashtable`, `d_hash_shift` and `vmemmap_base`, and
    /// `module_kset`, `tainted_mask` and the `param_ops_*` of
    /// [`Kernel::module_views`]), when the kernel has it.
    pub fn symbol(&self, name: &str) -> Option<u64> {
        self.symbols.get(name).copied()
    }

    /// The kernel's banner, as `/proc/version` shows it.
    pub fn banner(&self) -> &str {
        &self.banner
    }

    /// The kernel's release, e.g. `6.1.0-56-amd64`: the banner's third word.
    pub fn release(&self) -> &str {
        self.banner.split_whitespace().nth(2).unwrap_or("")
    }

    /// Whether this run searched memory or started from the cache.
    pub fn source(&self) -> Source {
        self.source
    }

    /// Where the kernel's `d_dname` functions are, which name files
    /// that have no path.
    pub(super) fn dnames(&self) -> crate::linux::paths::Dnames {
        crate::linux::paths::Dnames::new(|name| self.symbol(name))
    }

    /// The kernel's virtual memory as it maps it.
    pub(super) fn kernel_memory(&self) -> kmem::KernelMemory<'_> {
        let mem = self.memory();
        kmem::KernelMemory {
            mem,
            segments: &self.image.segments,
            direct_map_base: self.direct_map_base,
            limit: mem.backend().max_address(),
            space: &self.space,
        }
    }
}
