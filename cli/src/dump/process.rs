//! `leechio dump --pid PID` (or `--process NAME`): a Linux process's
//! memory as an ELF core, one PT_LOAD per VMA with its permissions, read
//! through the process's own page tables, and the core's standard note of
//! the mapped files (NT_FILE), which gdb and other tools read.

use super::*;
use crate::maps::{self, Wanted};
use crate::processes::KernelArgs;
use leechio::linux::Vma;

/// `NT_FILE`: the note of the files a core's process maps.
const NT_FILE: u32 = 0x4649_4c45;
/// A core's notes are the kernel's: owner "CORE".
const CORE: &[u8] = b"CORE\0";

/// What to dump of a process.
pub(super) struct ProcessPlan {
    /// Its address space (`mm->pgd`).
    pub space: AddressSpace,
    /// One piece per VMA (within `--range`).
    pub pieces: Vec<Piece>,
    /// The NT_FILE note.
    pub note: Vec<u8>,
    /// Who it is, for messages.
    pub name: String,
}

/// The process `args` names, if it names one (`--pid`, `--process`).
pub(super) fn plan(mem: &Memory, args: &DumpArgs) -> Result<Option<ProcessPlan>, Failure> {
    let wanted = match (args.pid, &args.process) {
        (Some(pid), _) => Wanted::Pid(pid),
        (None, Some(name)) => Wanted::Name(name),
        (None, None) => return Ok(None),
    };
    let kernel = KernelArgs {
        btf: args.btf.clone(),
        no_cache: args.no_cache,
        ..KernelArgs::default()
    }
    .find(mem)?;
    let list = kernel.processes(mem);
    let process = maps::process(&list, &wanted)?;
    let dtb = process.dtb.ok_or_else(|| {
        Failure(format!(
            "pid {} ({}): its page-table root could not be read",
            process.pid, process.name
        ))
    })?;
    let vmas = maps::vmas_of(&kernel, mem, process);
    let range = args.range.clone().unwrap_or(0..=u64::MAX);
    let pieces = vmas
        .vmas
        .iter()
        .filter_map(|vma| {
            let start = vma.start.max(*range.start());
            let end = vma.end.min(range.end().saturating_add(1));
            (start < end).then(|| Piece {
                addr: start,
                pa: None,
                len: end - start,
                flags: segment_flags(vma),
            })
        })
        .collect();
    Ok(Some(ProcessPlan {
        space: AddressSpace::new(mem.clone(), dtb, kernel.paging()),
        pieces,
        note: file_note(&vmas.vmas),
        name: format!("pid {} ({})", process.pid, process.name),
    }))
}

/// A segment's `p_flags`: the VMA's read, write and execute permissions.
fn segment_flags(vma: &Vma) -> u32 {
    let f = vma.flags;
    (if f.read() { PF_R } else { 0 })
        | (if f.write() { PF_W } else { 0 })
        | (if f.exec() { PF_X } else { 0 })
}

/// The NT_FILE note of the VMAs mapped from files: a count and the page
/// size, then each one's start, end and offset in pages, then their paths,
/// each ending in a NUL; the whole in an ELF note owned by "CORE".
fn file_note(vmas: &[Vma]) -> Vec<u8> {
    let files: Vec<&Vma> = vmas.iter().filter(|v| v.file.is_some()).collect();
    let mut desc = Vec::new();
    for word in [files.len() as u64, PAGE] {
        desc.extend(word.to_le_bytes());
    }
    for vma in &files {
        for word in [vma.start, vma.end, vma.pgoff] {
            desc.extend(word.to_le_bytes());
        }
    }
    for vma in &files {
        desc.extend(vma.file.as_deref().unwrap_or_default().as_bytes());
        desc.push(0);
    }
    super::vmcoreinfo::elf_note(CORE, NT_FILE, &desc)
}
