//! `leechio dump --pid PID` (or `--process NAME`): a Linux process's
//! memory as an ELF core, one PT_LOAD per VMA with its permissions, and the
//! core's standard note of the mapped files (NT_FILE), which gdb and other
//! tools read.
//!
//! What is dumped is what the process's own page tables map inside its
//! VMAs, found by one walk of its tables (the walk `--dtb` dumps use):
//! unmapped memory costs nothing, however large the VMA, and a frame
//! mapped many times is read and written once (see `layout`). The parts
//! of its VMAs left out are said, each with its reason.

use std::fmt;

use super::*;
use crate::maps::{self, Wanted};
use crate::processes::KernelArgs;
use leechio::linux::Vma;
use leechio::{Mappings, MemoryMap};

/// `NT_FILE`: the note of the files a core's process maps.
const NT_FILE: u32 = 0x4649_4c45;
/// A core's notes are the kernel's: owner "CORE".
const CORE: &[u8] = b"CORE\0";

/// What to dump of a process.
pub(super) struct ProcessPlan {
    /// What its page tables map inside its VMAs (within `--range`), in
    /// address order, each in RAM.
    pub pieces: Vec<Piece>,
    /// The parts of its VMAs (within `--range`) not in `pieces`, in
    /// address order.
    pub left_out: Vec<LeftOut>,
    /// How many of its VMAs lie within `--range`, and their bytes there.
    pub vma_count: usize,
    pub vma_bytes: u64,
    /// The NT_FILE note.
    pub note: Vec<u8>,
    /// Who it is, for messages.
    pub name: String,
}

/// A part of a process's VMA that its dump does not hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LeftOut {
    pub addr: u64,
    pub len: u64,
    pub why: Why,
}

/// Why a part of a VMA is not in the dump.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Why {
    /// No page-table entry maps it: never touched, swapped out, or
    /// dropped by the kernel; there is nothing to read.
    NotMapped,
    /// Its page tables could not be read (or an entry has reserved bits
    /// set, which a CPU faults on): what it maps is unknown.
    Tables(PageError),
    /// It goes through a table page the walk went through already for the
    /// range at `same_as`: it maps what that range maps, which the walk
    /// does not list twice.
    SharedTables { same_as: u64 },
    /// Its pages are at physical `pa` on, outside the device's memory
    /// (device memory, or an entry pointing nowhere): not read.
    NotRam { pa: u64 },
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::NotMapped => write!(f, "{}", PageError::NotMapped),
            Why::Tables(PageError::ReservedBits) => write!(f, "page tables map nothing: {}", PageError::ReservedBits),
            Why::Tables(e) => write!(f, "page tables unreadable: {e}"),
            Why::SharedTables { same_as } => write!(
                f,
                "page tables shared with the range at {same_as:#x}: maps what it maps, not listed twice"
            ),
            Why::NotRam { pa } => write!(
                f,
                "mapped at physical {pa:#x}, outside the device's memory (not RAM): not read"
            ),
        }
    }
}

impl ProcessPlan {
    /// The error for a process whose VMAs (within `--range`, when
    /// `in_range`) hold nothing to dump.
    pub fn nothing_in(&self, in_range: bool) -> Failure {
        let within = if in_range { " in that range" } else { "" };
        if self.vma_count == 0 {
            return Failure(format!(
                "nothing to dump: {} maps no memory{within}",
                self.name
            ));
        }
        Failure(format!(
            "nothing to dump: the {} VMA{} of {}{within} ({}) hold no page in RAM: {}",
            self.vma_count,
            if self.vma_count == 1 { "" } else { "s" },
            self.name,
            human_size(self.vma_bytes),
            LeftOutBytes::of(&self.left_out).phrases().join(", ")
        ))
    }
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
    let list = kernel.processes();
    let process = maps::process(&list, &wanted)?;
    let name = format!("pid {} ({})", process.pid, process.name);
    let dtb = process
        .dtb
        .ok_or_else(|| Failure(format!("{name}: its page-table root could not be read")))?;
    let vmas = maps::vmas_of(&kernel, process);
    let range = args.range.clone().unwrap_or(0..=u64::MAX);
    // The VMAs clipped to the range: (start, end, p_flags).
    let spans: Vec<(u64, u64, u32)> = vmas
        .vmas
        .iter()
        .filter_map(|vma| {
            let start = vma.start.max(*range.start());
            let end = vma.end.min(range.end().saturating_add(1));
            (start < end).then(|| (start, end, segment_flags(vma)))
        })
        .collect();
    let note = file_note(&vmas.vmas);
    let vma_bytes = spans.iter().map(|&(s, e, _)| e - s).sum();
    let (pieces, left_out) = match (spans.first(), spans.last()) {
        (Some(first), Some(last)) => {
            // One walk over all of them: a table is walked once however
            // many VMAs it serves.
            plan::check_root(mem, dtb, &format!("of {name}"))?;
            let space = AddressSpace::new(mem.clone(), dtb, kernel.paging());
            let found = mem.block_on(space.mappings(first.0..=last.1 - 1));
            drop(space);
            pieces_of(&spans, found, &mem.backend().memory_map())
        }
        _ => (Vec::new(), Vec::new()),
    };
    Ok(Some(ProcessPlan {
        pieces,
        left_out,
        vma_count: spans.len(),
        vma_bytes,
        note,
        name,
    }))
}

/// The pieces to dump of the VMAs `spans` (sorted, disjoint `(start,
/// end, p_flags)`): what `found` maps inside them in RAM, and what of
/// them it does not, and why.
fn pieces_of(
    spans: &[(u64, u64, u32)],
    found: Mappings,
    ram: &MemoryMap,
) -> (Vec<Piece>, Vec<LeftOut>) {
    let mut pieces = Vec::with_capacity(found.mappings.len());
    let mut left_out: Vec<LeftOut> = Vec::new();
    let mut leave = |addr: u64, len: u64, why: Why| match left_out.last_mut() {
        Some(l) if l.addr + l.len == addr && l.why == why && why == Why::NotMapped => l.len += len,
        _ if len > 0 => left_out.push(LeftOut { addr, len, why }),
        _ => {}
    };
    let Mappings {
        mappings,
        aliases,
        failed,
    } = found;
    let end_of = |va: u64, size: u64| va.saturating_add(size);
    for (index, &(start, end, flags)) in spans.iter().enumerate() {
        // What the walk found over this VMA, from the first item that
        // ends after its start: mappings, shared tables, failed tables
        // (disjoint, each sorted).
        let mut m = mappings.partition_point(|x| end_of(x.va, x.size) <= start);
        let mut a = aliases.partition_point(|x| end_of(x.va, x.size) <= start);
        let mut f = failed.partition_point(|x| end_of(x.va, x.size) <= start);
        let mut at = start;
        loop {
            let next_m = mappings.get(m).filter(|x| x.va < end).map(|x| x.va);
            let next_a = aliases.get(a).filter(|x| x.va < end).map(|x| x.va);
            let next_f = failed.get(f).filter(|x| x.va < end).map(|x| x.va);
            let Some(next) = [next_m, next_a, next_f].into_iter().flatten().min() else {
                break;
            };
            let from = next.max(at);
            leave(at, from - at, Why::NotMapped);
            let upto;
            if next_m == Some(next) {
                let x = &mappings[m];
                upto = end_of(x.va, x.size).min(end);
                let pa = x.pa + (from - x.va);
                in_ram(ram, from, pa, upto - from, |addr, pa, len, is_ram| {
                    if is_ram {
                        pieces.push(Piece {
                            addr,
                            pa,
                            len,
                            flags,
                            vma: Some(index as u32),
                        })
                    } else {
                        leave(addr, len, Why::NotRam { pa })
                    }
                });
                m += 1;
            } else if next_a == Some(next) {
                let x = &aliases[a];
                upto = end_of(x.va, x.size).min(end);
                let same_as = x.same_as + (from - x.va);
                leave(from, upto - from, Why::SharedTables { same_as });
                a += 1;
            } else {
                let x = &failed[f];
                upto = end_of(x.va, x.size).min(end);
                leave(from, upto - from, Why::Tables(x.reason));
                f += 1;
            }
            at = upto;
            if at == end {
                break;
            }
        }
        // An item running on into the next VMA is met again there (the
        // search starts anew per VMA).
        leave(at, end - at, Why::NotMapped);
    }
    drop(mappings);
    (pieces, left_out)
}

/// Calls `each(addr, pa, len, in_ram)` for the parts of the `len` bytes at
/// virtual `va`, physical `pa` on, inside and outside `ram`'s ranges, in
/// order.
fn in_ram(ram: &MemoryMap, va: u64, pa: u64, len: u64, mut each: impl FnMut(u64, u64, u64, bool)) {
    let end = pa.saturating_add(len);
    let ranges = ram.ranges();
    let mut at = pa;
    for r in &ranges[ranges.partition_point(|r| r.end() <= pa)..] {
        if r.start >= end {
            break;
        }
        if r.start > at {
            each(va + (at - pa), at, r.start - at, false);
            at = r.start;
        }
        let upto = r.end().min(end);
        each(va + (at - pa), at, upto - at, true);
        at = upto;
    }
    if at < end {
        each(va + (at - pa), at, end - at, false);
    }
}

/// The bytes a process dump leaves out, by reason, for the summary.
pub(super) struct LeftOutBytes {
    /// [`Why::NotMapped`].
    pub not_mapped: u64,
    /// [`Why::Tables`].
    pub unreadable_tables: u64,
    /// [`Why::SharedTables`].
    pub shared_tables: u64,
    /// [`Why::NotRam`].
    pub not_ram: u64,
}

impl LeftOutBytes {
    /// The sums of `left_out`.
    pub fn of(left_out: &[LeftOut]) -> LeftOutBytes {
        let mut sums = LeftOutBytes {
            not_mapped: 0,
            unreadable_tables: 0,
            shared_tables: 0,
            not_ram: 0,
        };
        for l in left_out {
            let sum = match l.why {
                Why::NotMapped => &mut sums.not_mapped,
                Why::Tables(_) => &mut sums.unreadable_tables,
                Why::SharedTables { .. } => &mut sums.shared_tables,
                Why::NotRam { .. } => &mut sums.not_ram,
            };
            *sum = sum.saturating_add(l.len);
        }
        sums
    }

    /// Its parts that are not zero, as words: "1.0 GiB of VMAs no page
    /// maps", ….
    pub fn phrases(&self) -> Vec<String> {
        [
            (self.not_mapped, "of VMAs no page maps"),
            (self.unreadable_tables, "whose page tables are unreadable"),
            (
                self.shared_tables,
                "mapped through page tables shared with another range",
            ),
            (self.not_ram, "mapped outside RAM"),
        ]
        .into_iter()
        .filter(|&(n, _)| n > 0)
        .map(|(n, what)| format!("{} {what}", human_size(n)))
        .collect()
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use leechio::{Access, Alias, Mapping, MemoryRange, PageSize};

    fn mapping(va: u64, pa: u64, size: u64) -> Mapping {
        Mapping {
            va,
            pa,
            size,
            page_size: PageSize::Size4K,
            access: Access::ALL,
        }
    }

    #[test]
    fn each_vma_holds_what_the_tables_map_in_ram_and_says_what_it_leaves_out() {
        // VMA 0: 0x10000..0x20000; VMA 1: 0x20000..0x40000; VMA 2 far
        // above, all holes: 1 TiB.
        let spans = [
            (0x10000, 0x20000, PF_R),
            (0x20000, 0x40000, PF_R | PF_W),
            (0x100_0000_0000, 0x200_0000_0000, PF_R),
        ];
        let found = Mappings {
            mappings: vec![
                // Before the first VMA: not in the dump.
                mapping(0x8000, 0x1000, 0x1000),
                mapping(0x11000, 0x5000, 0x2000),
                // Runs on into VMA 1, and its last page is past RAM.
                mapping(0x1e000, 0x9000, 0x4000),
                mapping(0x30000, 0x10_0000, 0x1000),
            ],
            aliases: vec![Alias {
                va: 0x24000,
                size: 0x2000,
                same_as: 0x11000,
                table: 0x7000,
            }],
            failed: vec![FailedRange {
                va: 0x3e000,
                size: 0x4000,
                reason: PageError::OutOfRange,
            }],
        };
        let ram = MemoryMap::new(vec![MemoryRange::new(0, 0xc000)]).unwrap();
        let (pieces, left_out) = pieces_of(&spans, found, &ram);
        let p = |addr, pa, len, flags, vma| Piece {
            addr,
            pa,
            len,
            flags,
            vma: Some(vma),
        };
        assert_eq!(
            pieces,
            [
                p(0x11000, 0x5000, 0x2000, PF_R, 0),
                p(0x1e000, 0x9000, 0x2000, PF_R, 0),
                p(0x20000, 0xb000, 0x1000, PF_R | PF_W, 1),
            ]
        );
        let l = |addr, len, why| LeftOut { addr, len, why };
        assert_eq!(
            left_out,
            [
                l(0x10000, 0x1000, Why::NotMapped),
                l(0x13000, 0xb000, Why::NotMapped),
                l(0x21000, 0x1000, Why::NotRam { pa: 0xc000 }),
                l(0x22000, 0x2000, Why::NotMapped),
                l(0x24000, 0x2000, Why::SharedTables { same_as: 0x11000 }),
                l(0x26000, 0xa000, Why::NotMapped),
                l(0x30000, 0x1000, Why::NotRam { pa: 0x10_0000 }),
                l(0x31000, 0xd000, Why::NotMapped),
                l(0x3e000, 0x2000, Why::Tables(PageError::OutOfRange)),
                l(0x100_0000_0000, 0x100_0000_0000, Why::NotMapped),
            ]
        );
        let sums = LeftOutBytes::of(&left_out);
        assert_eq!(
            (
                sums.not_mapped,
                sums.shared_tables,
                sums.not_ram,
                sums.unreadable_tables
            ),
            (
                0x1000 + 0xb000 + 0x2000 + 0xa000 + 0xd000 + (1 << 40),
                0x2000,
                0x2000,
                0x2000
            )
        );
        // Every byte of every VMA is in a piece or left out, once.
        let mut tiles: Vec<(u64, u64)> = pieces
            .iter()
            .map(|p| (p.addr, p.len))
            .chain(left_out.iter().map(|l| (l.addr, l.len)))
            .collect();
        tiles.sort_unstable();
        let total: u64 = spans.iter().map(|&(s, e, _)| e - s).sum();
        assert_eq!(tiles.iter().map(|t| t.1).sum::<u64>(), total);
        assert!(tiles.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0));
    }
}
