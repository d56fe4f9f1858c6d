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

use std::collections::HashMap;
use std::fmt;

use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::{MapsLayout, Tree};
use crate::linux::paths;
use crate::linux::structures::maple;
use crate::linux::structures::rbtree;
use crate::linux::structures::StructureFailure;
use crate::linux::Kernel;

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
        let layout = match self.maps_layout() {
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
        };
        read(&kmem, layout, mm, symbols).await
    }
}

/// Reads the maps of `mm`, with the kernel's `symbols`. No more VMAs are
/// read than the kernel allows a process (`vm.max_map_count`, read from
/// the target, plus one: its check lets the count reach that) and than
/// the target's memory holds (`vm_area_struct`s); past that the walk is
/// cut and says so.
pub(crate) async fn read(
    kmem: &KernelMemory<'_>,
    layout: &MapsLayout,
    mm: u64,
    symbols: Symbols,
) -> Vmas {
    let mut failed = Vec::new();
    let (first, len) = layout.mm_span();
    let (fields, sysctl) =
        futures::join!(kmem.read_vec(mm.wrapping_add(first), len as usize), async {
            match symbols.max_map_count {
                Some(at) => kmem.read_vec(at, 4).await.ok()?.u32_at(0),
                None => None,
            }
        });
    let max_vmas = max_vmas(kmem.limit, layout.vma_size, sysctl.map(|v| v as i32));
    let fields = match fields {
        Ok(bytes) => bytes,
        Err(why) => {
            failed.push(MapsFailure::new(mm, format!("mm_struct: {why}")));
            return Vmas {
                vmas: Vec::new(),
                failed,
            };
        }
    };
    let field = |at: u64| fields.u64_at(at - first).unwrap_or(0);
    let vma_size = layout.vma_size as usize;
    // (address, bytes, the indices the tree says it covers)
    let mut raw: Vec<RawVma> = Vec::new();
    match &layout.tree {
        Tree::Maple {
            root,
            layout: maple,
        } => {
            let (entries, cut, at_limit) =
                maple::entries(kmem, maple, field(*root), max_vmas.count).await;
            if at_limit {
                failed.push(MapsFailure::new(mm, max_vmas.why()));
            }
            failed.extend(cut.into_iter().map(MapsFailure::from));
            for batch in entries.chunks(VMAS_PER_BATCH) {
                let reads = batch.iter().map(|e| kmem.read_vec(e.value, vma_size));
                let read = futures::future::join_all(reads).await;
                for (e, bytes) in batch.iter().zip(read) {
                    match bytes {
                        Ok(bytes) => raw.push((e.value, bytes, Some((e.first, e.last)))),
                        Err(why) => failed.push(MapsFailure::new(e.value, format!("VMA: {why}"))),
                    }
                }
            }
        }
        Tree::RedBlack {
            root,
            vm_rb,
            layout: rb,
            ..
        } => {
            let objects = rbtree::Objects {
                node: *vm_rb,
                size: vma_size,
                what: "VMA",
            };
            let (found, cut, at_limit) =
                rbtree::objects(kmem, rb, objects, field(*root), max_vmas.count).await;
            if at_limit {
                failed.push(MapsFailure::new(mm, max_vmas.why()));
            }
            failed.extend(cut.into_iter().map(MapsFailure::from));
            raw.extend(found.into_iter().map(|(at, bytes)| (at, bytes, None)));
        }
    }
    let mut vmas = checked_vmas(layout, mm, &raw, &mut failed);
    if let Tree::RedBlack { list, next, .. } = layout.tree {
        check_list(&vmas, &raw, field(list), next, &mut failed);
    }
    let count = field(layout.map_count) as u32 as usize;
    if count != vmas.len() && failed.is_empty() {
        failed.push(MapsFailure::new(
            mm,
            format!("mm_struct counts {count} VMAs, {} were found", vmas.len()),
        ));
    }
    let bytes_of: HashMap<u64, &Vec<u8>> = raw.iter().map(|(at, b, _)| (*at, b)).collect();
    name_vmas(
        kmem,
        layout,
        &mut vmas,
        &bytes_of,
        symbols.special,
        &mut failed,
    )
    .await;
    let (brk, start_brk, stack) = (
        field(layout.brk),
        field(layout.start_brk),
        field(layout.start_stack),
    );
    for vma in vmas
        .iter_mut()
        .filter(|v| v.file.is_none() && v.name.is_none())
    {
        if vma.start <= brk && vma.end >= start_brk {
            vma.name = Some("[heap]".into());
        } else if vma.start <= stack && vma.end >= stack {
            vma.name = Some("[stack]".into());
        }
    }
    Vmas { vmas, failed }
}

/// The most VMAs a process of the target can have, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MaxVmas {
    count: usize,
    /// `vm.max_map_count` as read, when it was.
    sysctl: Option<i32>,
    /// The bound by memory: `vm_area_struct`s that fit in it.
    by_memory: u64,
}

impl MaxVmas {
    fn why(&self) -> String {
        match self.sysctl {
            Some(n) if (self.count as u64) < self.by_memory => format!(
                "more VMAs than the target's vm.max_map_count ({n}) allows: the first {} read",
                self.count
            ),
            _ => format!(
                "more VMAs than the {} vm_area_structs the target's memory holds: the first {} read",
                self.by_memory, self.count
            ),
        }
    }
}

/// The most VMAs read: `sysctl` (`vm.max_map_count`, when read) plus one,
/// and no more `vm_area_struct`s of `vma_size` bytes than `memory` bytes
/// hold.
fn max_vmas(memory: u64, vma_size: u64, sysctl: Option<i32>) -> MaxVmas {
    let by_memory = (memory / vma_size.max(1)).max(1);
    let by_sysctl = sysctl.map_or(u64::MAX, |n| n.max(0) as u64 + 1);
    MaxVmas {
        count: usize::try_from(by_memory.min(by_sysctl)).unwrap_or(usize::MAX),
        sysctl,
        by_memory,
    }
}

/// The VMAs in `raw` that make sense, in address order: their own range,
/// page aligned, in the user half, inside what the tree says they cover,
/// belonging to `mm`, and not overlapping one another.
fn checked_vmas(
    layout: &MapsLayout,
    mm: u64,
    raw: &[RawVma],
    failed: &mut Vec<MapsFailure>,
) -> Vec<Vma> {
    let mut vmas: Vec<Vma> = Vec::with_capacity(raw.len());
    for (address, bytes, covers) in raw {
        let at = |offset: u64| bytes.u64_at(offset).unwrap_or(0);
        let vma = Vma {
            address: *address,
            start: at(layout.vm_start),
            end: at(layout.vm_end),
            flags: VmFlags(at(layout.vm_flags)),
            pgoff: at(layout.vm_pgoff),
            file_address: at(layout.vm_file),
            file: None,
            name: None,
            inode: 0,
            device: 0,
        };
        let owner = at(layout.vm_mm);
        let why = if owner != mm {
            Some(format!("belongs to mm {owner:#x}, not {mm:#x}"))
        } else if vma.start >= vma.end || vma.end > USER_END || (vma.start | vma.end) % PAGE != 0 {
            Some(format!("range {:#x}-{:#x} is no VMA's", vma.start, vma.end))
        } else if covers.is_some_and(|(first, last)| vma.start < first || vma.end - 1 > last) {
            let (first, last) = covers.unwrap_or_default();
            Some(format!(
                "range {:#x}-{:#x} lies outside its tree slot {first:#x}-{last:#x}",
                vma.start, vma.end
            ))
        } else {
            None
        };
        match why {
            Some(why) => failed.push(MapsFailure::new(*address, format!("VMA {why}"))),
            None => vmas.push(vma),
        }
    }
    vmas.sort_by_key(|v| v.start);
    let mut kept: Vec<Vma> = Vec::with_capacity(vmas.len());
    for vma in vmas {
        match kept.last() {
            Some(prev) if vma.start < prev.end => failed.push(MapsFailure::new(
                vma.address,
                format!(
                    "VMA {:#x}-{:#x} overlaps the one before ({:#x}-{:#x}); left out",
                    vma.start, vma.end, prev.start, prev.end
                ),
            )),
            _ => kept.push(vma),
        }
    }
    kept
}

/// Checks the tree's VMAs against the `mm->mmap` list: each VMA's
/// `vm_next` must be the next one found, the first must be `head`.
fn check_list(vmas: &[Vma], raw: &[RawVma], head: u64, next: u64, failed: &mut Vec<MapsFailure>) {
    let next_of: HashMap<u64, u64> = raw
        .iter()
        .map(|(at, bytes, _)| (*at, bytes.u64_at(next).unwrap_or(0)))
        .collect();
    let mut expected = head;
    for (i, vma) in vmas.iter().enumerate() {
        if vma.address != expected {
            failed.push(MapsFailure::new(
                vma.address,
                format!(
                    "the mmap list leads to {expected:#x} where the tree has VMA {:#x}-{:#x}",
                    vma.start, vma.end
                ),
            ));
            return;
        }
        expected = next_of[&vma.address];
        if i + 1 == vmas.len() && expected != 0 {
            failed.push(MapsFailure::new(
                vma.address,
                format!("the mmap list goes on past the last VMA of the tree, to {expected:#x}"),
            ));
        }
    }
}

/// Fills in what backs each VMA: the paths, inodes and devices of the
/// files, the names of special mappings and of named anonymous memory.
async fn name_vmas(
    kmem: &KernelMemory<'_>,
    layout: &MapsLayout,
    vmas: &mut [Vma],
    bytes_of: &HashMap<u64, &Vec<u8>>,
    special: Option<u64>,
    failed: &mut Vec<MapsFailure>,
) {
    let field = |vma: &Vma, at: u64| bytes_of[&vma.address].u64_at(at).unwrap_or(0);
    let files: Vec<u64> = vmas.iter().map(|v| v.file_address).collect();
    let mut unique: Vec<u64> = files.iter().copied().filter(|&f| f != 0).collect();
    unique.sort_unstable();
    unique.dedup();
    // Without a file: a special mapping names itself through its
    // operations (`special_mapping_name` gives `vm_special_mapping.name`).
    let specials: Vec<(usize, u64, u64)> = vmas
        .iter()
        .enumerate()
        .filter(|(i, v)| files[*i] == 0 && field(v, layout.vm_ops) != 0)
        .map(|(i, v)| (i, field(v, layout.vm_ops), field(v, layout.vm_private_data)))
        .collect();
    let anon: Vec<(usize, u64)> = match layout.anon_name {
        Some((at, name)) => vmas
            .iter()
            .enumerate()
            .filter(|(i, v)| files[*i] == 0 && field(v, at) != 0)
            .map(|(i, v)| (i, field(v, at) + name))
            .collect(),
        None => Vec::new(),
    };
    let (mut found, special_names, anon_names) = futures::join!(
        paths::files(kmem, &layout.paths, &unique),
        special_names(kmem, layout, &specials, special),
        futures::future::join_all(anon.iter().map(|&(_, at)| kmem.read_vec(at, NAME_MAX)))
    );
    for (vma, file) in vmas.iter_mut().zip(&files) {
        let Some(info) = found.get_mut(file) else {
            continue;
        };
        vma.inode = info.inode;
        vma.device = info.device;
        match &info.path {
            Ok(path) => vma.file = Some(path.clone()),
            Err(why) => failed.push(MapsFailure::new(
                *file,
                format!("the file of VMA {:#x}-{:#x}: {why}", vma.start, vma.end),
            )),
        }
        if info.cut {
            failed.push(MapsFailure::new(
                *file,
                format!(
                    "the path of the file of VMA {:#x}-{:#x} is longer than PATH_MAX (4096 bytes): only its last components are shown, after \"{}\"",
                    vma.start,
                    vma.end,
                    paths::CUT_MARK
                ),
            ));
        }
    }
    for ((i, ..), name) in specials.iter().zip(special_names) {
        vmas[*i].name = name;
    }
    for ((i, _), name) in anon.iter().zip(anon_names) {
        if vmas[*i].name.is_none() {
            vmas[*i].name = name
                .ok()
                .and_then(|b| c_string(&b))
                .map(|n| format!("[anon:{n}]"));
        }
    }
}

/// The names of the special mappings in `specials` (index, `vm_ops`,
/// `vm_private_data`): `vm_ops->name` and the mapping's name pointer are
/// read together, then the names whose `vm_ops->name` is
/// `special_mapping_name`.
async fn special_names(
    kmem: &KernelMemory<'_>,
    layout: &MapsLayout,
    specials: &[(usize, u64, u64)],
    special: Option<u64>,
) -> Vec<Option<String>> {
    let Some(special) = special else {
        return vec![None; specials.len()];
    };
    let first = specials.iter().map(|&(_, ops, private)| async move {
        let (name_fn, name) = futures::join!(
            kmem.read_vec(ops + layout.ops_name, 8),
            kmem.read_vec(private + layout.special_name, 8)
        );
        let name_fn = name_fn.ok()?.u64_at(0)?;
        (name_fn == special && private != 0).then_some(())?;
        let name = name.ok()?.u64_at(0)?;
        c_string(&kmem.read_vec(name, 32).await.ok()?)
    });
    futures::future::join_all(first).await
}

/// The NUL-terminated string at the start of `bytes` (all of it without a
/// NUL), if it is UTF-8 without control characters.
fn c_string(bytes: &[u8]) -> Option<String> {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let text = std::str::from_utf8(&bytes[..end]).ok()?;
    (!text.chars().any(char::is_control)).then(|| text.to_string())
}
