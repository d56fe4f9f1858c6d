//! A process's memory maps (its VMAs), as `/proc/PID/maps` shows them,
//! read from kernel memory with no profile: every offset from BTF.
//!
//! What [`Kernel::vmas`] reads, each step one batch of reads:
//! 1. the `mm_struct`'s fields;
//! 2. the VMA tree level by level: the maple tree (`mm->mm_mt`, 6.1 and
//!    later), or before it the red-black tree of `mm->mm_rb`, whose nodes
//!    are the VMAs themselves (checked against the `mm->mmap` list);
//! 3. every VMA found in the maple tree, together;
//! 4. the names: every mapped `struct file` together, then the dentries,
//!    mounts and inodes one level per batch (see `paths`), with the names
//!    of special mappings (`[vdso]`) and named anonymous memory beside
//!    them.
//!
//! So the cost is the depth of the structures, not their length: a process
//! with up to 16 VMAs mapped from files two directories deep takes 6 read
//! calls (7 with a maple tree of two levels), however many it maps.

use std::fmt;

use crate::linux::structures::StructureFailure;
use crate::linux::Kernel;
use read::read;

mod names;
mod read;

#[cfg(test)]
mod bounds_tests;
#[cfg(test)]
mod tests;

/// A VMA as read: its address, its bytes, and the indices its tree slot
/// covers (both ends included) when the tree says.
type RawVma = (u64, Vec<u8>, Option<(u64, u64)>);

/// `vm_flags` bits (`include/linux/mm.h`).
const VM_READ: u64 = 0x1;
const VM_WRITE: u64 = 0x2;
const VM_EXEC: u64 = 0x4;
const VM_SHARED: u64 = 0x8;
const VM_MAYSHARE: u64 = 0x80;
/// Bytes of a page (`vm_pgoff` counts them).
const PAGE: u64 = 0x1000;
/// The end of the user half of the address space (5-level paging's).
const USER_END: u64 = 1 << 56;
/// Longest name of a special mapping or of named anonymous memory read
/// (`ANON_VMA_NAME_MAX_LEN` is 80).
const NAME_MAX: usize = 80;
/// VMAs read in one batch: one device call for a process of up to 16,384
/// VMAs (a busy browser or JVM has a few thousand), four at the default
/// `vm.max_map_count`; the reads in flight stay bounded (tens of MB).
const VMAS_PER_BATCH: usize = 16_384;

/// The kernel symbols the maps are read with, when kallsyms has them.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Symbols {
    /// `special_mapping_name`, which names `[vdso]` and the like.
    pub special: Option<u64>,
    /// `sysctl_max_map_count`: `vm.max_map_count`, the most VMAs the
    /// kernel lets a process have.
    pub max_map_count: Option<u64>,
    /// The `d_dname` functions, which name files that have no path.
    pub dnames: crate::linux::paths::Dnames,
}

/// Something of a process's maps that could not be read or did not make
/// sense (a loop, a structure changing while read): where, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapsFailure {
    /// The kernel address of the structure.
    pub address: u64,
    /// What was wrong, in one line.
    pub reason: String,
}

impl MapsFailure {
    pub(crate) fn new(address: u64, reason: impl Into<String>) -> MapsFailure {
        MapsFailure {
            address,
            reason: reason.into(),
        }
    }
}

impl From<StructureFailure> for MapsFailure {
    fn from(f: StructureFailure) -> MapsFailure {
        MapsFailure {
            address: f.address,
            reason: f.reason,
        }
    }
}

impl fmt::Display for MapsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}: {}", self.address, self.reason)
    }
}

/// A VMA's `vm_flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VmFlags(pub u64);

impl VmFlags {
    /// `VM_READ`.
    pub fn read(self) -> bool {
        self.0 & VM_READ != 0
    }
    /// `VM_WRITE`.
    pub fn write(self) -> bool {
        self.0 & VM_WRITE != 0
    }
    /// `VM_EXEC`.
    pub fn exec(self) -> bool {
        self.0 & VM_EXEC != 0
    }
    /// `VM_SHARED`: writes reach the file (or other processes).
    pub fn shared(self) -> bool {
        self.0 & VM_SHARED != 0
    }
    /// `VM_MAYSHARE`: mapped `MAP_SHARED`, even read-only; the `s` of
    /// `/proc/PID/maps`.
    pub fn may_share(self) -> bool {
        self.0 & VM_MAYSHARE != 0
    }
    /// `rwxp` as `/proc/PID/maps` writes them.
    pub fn perms(self) -> String {
        [
            if self.read() { 'r' } else { '-' },
            if self.write() { 'w' } else { '-' },
            if self.exec() { 'x' } else { '-' },
            if self.may_share() { 's' } else { 'p' },
        ]
        .iter()
        .collect()
    }
}

/// One VMA: a range of a process's address space and what backs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vma {
    /// The `vm_area_struct`'s kernel address.
    pub address: u64,
    /// First address.
    pub start: u64,
    /// Address past the last.
    pub end: u64,
    /// Permissions and kind.
    pub flags: VmFlags,
    /// `vm_pgoff`: the offset in the mapped file, in pages (for anonymous
    /// memory, the start's page number).
    pub pgoff: u64,
    /// The `struct file` mapped (`vm_file`), 0 for anonymous memory.
    pub file_address: u64,
    /// The mapped file's path, from its dentries up to the root, across
    /// mounts; `None` for anonymous memory and for a path that could not
    /// be read (then listed in [`Vmas::failed`]).
    pub file: Option<String>,
    /// What `/proc` names a VMA without a file: `[heap]`, `[stack]`,
    /// `[vdso]`, `[vvar]`, `[anon:NAME]`.
    pub name: Option<String>,
    /// The file's inode number (0 without a file).
    pub inode: u64,
    /// The file's device (`s_dev`, the kernel's `dev_t`: major in the
    /// bits from 20, minor below; 0 without a file).
    pub device: u32,
}

impl Vma {
    /// The offset in the file, in bytes; 0 for anonymous memory (as
    /// `/proc/PID/maps` shows it).
    pub fn offset(&self) -> u64 {
        match self.file_address {
            0 => 0,
            _ => self.pgoff.wrapping_mul(PAGE),
        }
    }

    /// The path column of `/proc/PID/maps`: the file, else the name, else
    /// empty.
    pub fn path(&self) -> &str {
        self.file.as_deref().or(self.name.as_deref()).unwrap_or("")
    }

    /// The device's major number.
    pub fn major(&self) -> u32 {
        self.device >> 20
    }

    /// The device's minor number.
    pub fn minor(&self) -> u32 {
        self.device & 0xf_ffff
    }
}

/// A process's VMAs in address order, and what could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vmas {
    /// The VMAs read and checked.
    pub vmas: Vec<Vma>,
    /// What was cut or could not be read.
    pub failed: Vec<MapsFailure>,
}

impl Kernel {
    /// The VMAs of the `mm_struct` at `mm` (blocking; see
    /// [`Kernel::vmas_async`]).
    pub fn vmas(&self, mm: u64) -> Vmas {
        self.memory().block_on(self.vmas_async(mm))
    }

    /// The VMAs of the `mm_struct` at `mm`, in address order, with the
    /// paths of their files. Independent of other reads: several processes'
    /// maps read together share their batches.
    pub async fn vmas_async(&self, mm: u64) -> Vmas {
        let layout = match &self.offsets.maps {
            Ok(layout) => layout,
            Err(e) => {
                return Vmas {
                    vmas: Vec::new(),
                    failed: vec![MapsFailure::new(
                        mm,
                        format!("memory maps cannot be read: {e}"),
                    )],
                }
            }
        };
        let kmem = self.kernel_memory();
        let symbols = Symbols {
            special: self.symbol("special_mapping_name"),
            max_map_count: self.symbol("sysctl_max_map_count"),
            dnames: self.dnames(),
        };
        read(&kmem, layout, mm, symbols).await
    }
}
