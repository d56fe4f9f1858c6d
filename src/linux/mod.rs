//! A Linux kernel in physical memory, found with no configuration: its page
//! tables, its image, its type information (BTF) and the symbols a walk of
//! its processes starts from, under KASLR.
//!
//! What [`Kernel::find`] reads, and what it costs:
//! 1. the first MiB of RAM, for the copy of the kernel's top table that the
//!    real-mode trampoline keeps there (one batch; skipped with a DTB hint);
//! 2. three levels of the kernel image's page tables (four with 5-level
//!    paging; both readings are tried, and the mode settled by the tables
//!    and by the kernel's own `__pgtable_l5_enabled`), which give its
//!    virtual and physical base and its segments by permission;
//! 3. the image's read-only data (`.rodata`: 9.5 MiB on Debian 12's
//!    kernel), in one batch, where the kallsyms tables, the banner and BTF
//!    lie;
//! 4. `init_task` and the few words it is checked by.
//!
//! None of it grows with the target's RAM. A cached kernel (see
//! [`CacheLocation`]) is checked in one batch instead (`warm`): its
//! banner, build ID, top table entry, `page_offset_base`, `init_task` and
//! `init_struct_pid`, each where the entry says; and the walks' questions
//! to BTF are answered from the entry, so no byte of BTF is read. When the
//! entry lacks something, it is checked as before: its tables, its BTF
//! and `init_task` read again.

mod btf;
#[cfg(test)]
mod btf_builder;
mod cache;
#[cfg(test)]
mod fake_memory;
mod image;
mod init_task;
mod kallsyms;
mod kmem;
mod maple;
mod maps;
mod modules;
mod paths;
mod processes;
mod symbols;
mod task_details;
mod vma_rbtree;
mod vmcoreinfo;
mod xarray;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

pub use btf::{Answer, Btf, BtfError, Header as BtfHeader, Query, MAX_ANSWER, MAX_BTF};
pub use cache::CacheLocation;
pub use image::{Segment, KERNEL_MAP, KERNEL_MAP_SIZE};
pub use maps::{MapsFailure, VmFlags, Vma, Vmas};
pub use modules::{KernelModule, ModuleFailure, ModuleList, ModuleState};
pub use processes::{split_command_line, Process, ProcessList, Stage, Thread, WalkFailure};
pub use task_details::{exit_status, TaskDetails, TaskState};
pub use vmcoreinfo::VmcoreinfoError;

use crate::vm::{detect_paging, Paging};
use crate::{AddressSpace, Memory};
use image::Image;
use init_task::{InitTask, TaskLayout};
use kmem::Fields;

/// Symbols looked up in kallsyms, checked, and kept in the cache.
const SYMBOLS: &[&str] = &[
    "init_task",
    "init_pid_ns",
    "init_top_pgt",
    "page_offset_base",
    "linux_banner",
    "__start_BTF",
    "__stop_BTF",
    // The ELF notes, where the build ID is: the cache's key.
    "__start_notes",
    "__stop_notes",
    // What names special mappings such as [vdso], and vm.max_map_count,
    // which bounds the VMAs read (see `maps`).
    "special_mapping_name",
    "sysctl_max_map_count",
    // The kernel's VMCOREINFO text (see `vmcoreinfo`).
    vmcoreinfo::DATA_SYMBOL,
    vmcoreinfo::SIZE_SYMBOL,
    // Whether the kernel runs with 5-level paging (kernels built with
    // CONFIG_X86_5LEVEL, up to 6.16).
    L5_SYMBOL,
    // The list of loaded modules (see `modules`).
    modules::LIST_SYMBOL,
];
/// The kernel's own word on its paging mode: 1 with 5 levels.
const L5_SYMBOL: &str = "__pgtable_l5_enabled";
/// The direct map's base without memory randomisation, by paging mode.
fn default_direct_map(paging: Paging) -> u64 {
    match paging {
        Paging::FourLevel => 0xffff_8880_0000_0000,
        Paging::FiveLevel => 0xff11_0000_0000_0000,
    }
}
/// The direct map's base is 1 GiB aligned (KASLR moves it in PUD steps).
const GIB: u64 = 1 << 30;
/// What a banner starts with.
const BANNER_PREFIX: &[u8] = b"Linux version ";
/// Longest banner read.
const BANNER_MAX: usize = 512;
/// Candidate top tables whose images are looked for at once.
const ROOTS_AT_ONCE: usize = 8;

/// What a caller knows already; each hint skips a step of the search.
#[derive(Debug, Clone, Default)]
pub struct Hints {
    /// A page-table root with the kernel's half mapped: the kernel's own
    /// (`init_top_pgt`) or any process's CR3. Skips reading low memory.
    pub dtb: Option<u64>,
    /// The kernel's virtual base (`_text`, 2 MiB aligned, in the gigabyte
    /// from [`KERNEL_MAP`]).
    pub kernel_base: Option<u64>,
    /// The paging mode of the kernel's tables, where the tables cannot
    /// tell (both readings find a kernel image). Found otherwise.
    pub paging: Option<Paging>,
    /// A BTF file of the same kernel (its `/sys/kernel/btf/vmlinux`),
    /// used when the kernel holds no BTF in memory.
    pub btf_file: Option<PathBuf>,
    /// Where learned kernels are remembered.
    pub cache: CacheLocation,
}

/// Why no kernel was found. Each says what was missing in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FindError {
    /// Nothing that looks like an x86-64 Linux kernel.
    #[error("no Linux kernel found: {0}")]
    NotLinux(String),
    /// A kernel, but no BTF in its read-only data and no usable file.
    #[error("the kernel holds no BTF ({0}); it was built without CONFIG_DEBUG_INFO_BTF: give its /sys/kernel/btf/vmlinux, copied off the target, as the BTF file")]
    NoBtf(String),
    /// A kernel whose BTF is there (named by its symbols, or a header
    /// found) but fails the checks: damaged, or made to hurt.
    #[error("the kernel's BTF cannot be used ({0}); give its /sys/kernel/btf/vmlinux, copied off the target, as the BTF file")]
    BadBtf(String),
    /// The BTF given or found does not parse, or lacks a type the walk needs.
    #[error("{0}")]
    Btf(#[from] BtfError),
    /// A kernel whose symbol table was not found in its read-only data.
    #[error("no kallsyms tables in the kernel's read-only data at {0:#x}: symbols such as init_task cannot be located")]
    NoSymbols(u64),
    /// Memory that looks like a kernel but whose structures disagree.
    #[error("memory looks like a Linux kernel, but {0}")]
    Inconsistent(String),
    /// A kernel image in both readings of its tables, and nothing to tell
    /// which mode they are in.
    #[error("a kernel image is found in both 4-level and 5-level readings of the top table at {dtb:#x}, and {why}: name the paging mode (4 or 5 levels)")]
    AmbiguousPaging {
        /// The top table.
        dtb: u64,
        /// Why its tables do not tell.
        why: String,
    },
    /// A hint that cannot be right.
    #[error("{0}")]
    BadHint(String),
}

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
    space: AddressSpace,
    image: Image,
    direct_map_base: u64,
    btf: Btf,
    btf_location: Option<(u64, u64)>,
    symbols: BTreeMap<String, u64>,
    banner: String,
    init_task: InitTask,
    source: Source,
    /// The offsets memory maps are read by, from BTF on first use.
    maps_layout: OnceLock<Result<maps::MapsLayout, BtfError>>,
    /// The build-ID note (address, bytes), when the kernel has one.
    build_id: Option<(u64, Vec<u8>)>,
    /// `init_task.thread_pid`.
    init_thread_pid: u64,
}

impl Kernel {
    /// Finds the kernel in `mem` (blocking; see [`Kernel::find_async`]).
    pub fn find(mem: &Memory, hints: &Hints) -> Result<Kernel, FindError> {
        mem.block_on(Kernel::find_async(mem, hints))
    }

    /// Finds the kernel in `mem`: from the cache when a kernel there is
    /// still the one in memory, else by searching.
    pub async fn find_async(mem: &Memory, hints: &Hints) -> Result<Kernel, FindError> {
        let file = hints.cache.file();
        if let Some(file) = &file {
            let mut entries = cache::load(file);
            entries.retain(|e| e.searched == SYMBOLS);
            if let Some((kernel, warm)) = from_cache(mem, hints, &entries).await {
                // An entry checked the slow way is written again, with
                // what the next start needs to be warm.
                if !warm {
                    kernel.save(file);
                }
                return Ok(kernel);
            }
        }
        let kernel = search(mem, hints).await?;
        if let Some(file) = &file {
            kernel.save(file);
        }
        Ok(kernel)
    }

    fn save(&self, file: &std::path::Path) {
        if let Err(e) = cache::save(file, &self.cache_entry()) {
            log::warn!("cannot write the kernel cache {}: {e}", file.display());
        }
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
    /// `sysctl_max_map_count`, `vmcoreinfo_data`, `vmcoreinfo_size`), when
    /// the kernel has it.
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

    /// Kernel virtual memory of `mem` as this kernel maps it.
    fn kernel_memory<'a>(&'a self, mem: &'a Memory) -> kmem::KernelMemory<'a> {
        kmem::KernelMemory {
            mem,
            segments: &self.image.segments,
            direct_map_base: self.direct_map_base,
            limit: mem.backend().max_address(),
            space: &self.space,
        }
    }

    /// The offsets memory maps are read by.
    fn maps_layout(&self) -> Result<&maps::MapsLayout, &BtfError> {
        self.maps_layout
            .get_or_init(|| maps::MapsLayout::from_btf(&self.btf))
            .as_ref()
    }

    fn cache_entry(&self) -> cache::Entry {
        // Every question the walks ask, asked now, so that the answers
        // are kept.
        ask_walk_questions(&self.btf);
        let warm = match (
            &self.build_id,
            self.btf_location,
            self.symbol("page_offset_base"),
        ) {
            (Some(build_id), Some(_), Some(_)) => Some(cache::Warm {
                build_id: build_id.clone(),
                top_entry: self.image.top_entry,
                direct_map_base: self.direct_map_base,
                segments: self.image.segments.clone(),
                init_thread_pid: self.init_thread_pid,
                type_count: self.btf.type_count(),
                answers: self.btf.answers(),
            }),
            _ => None,
        };
        cache::Entry {
            banner: self.banner.clone(),
            dtb: self.dtb(),
            paging: self.paging(),
            virtual_base: self.virtual_base(),
            physical_base: self.physical_base(),
            btf: self.btf_location,
            symbols: self.symbols.clone(),
            searched: SYMBOLS.iter().map(|s| s.to_string()).collect(),
            warm,
        }
    }
}

/// Asks `btf` every question the walks ask (the kernel's check, the
/// process list, memory maps): the answers a warm start must have, and
/// what the fuzz target asks of random BTF. The first error of each walk,
/// if any.
pub fn ask_walk_questions(btf: &Btf) -> Vec<BtfError> {
    [
        TaskLayout::from_btf(btf).map(drop),
        processes::ask_layout(btf),
        maps::MapsLayout::from_btf(btf).map(drop),
        task_details::ask_layout(btf),
        modules::ask_layout(btf),
    ]
    .into_iter()
    .filter_map(Result::err)
    .collect()
}

/// The banner at the start of `bytes`: "Linux version ", printable text,
/// a newline and its NUL.
fn banner_at(bytes: &[u8]) -> Option<String> {
    let text = bytes.get(..BANNER_MAX.min(bytes.len()))?;
    let end = text.iter().position(|&c| c == 0)?;
    let line = text[..end].strip_suffix(b"\n")?;
    let printable = line.iter().all(|c| c.is_ascii_graphic() || *c == b' ');
    (line.starts_with(BANNER_PREFIX) && printable)
        .then(|| String::from_utf8_lossy(line).into_owned())
}

/// The first banner in `bytes`.
fn find_banner(bytes: &[u8]) -> Option<(usize, String)> {
    let mut at = 0;
    while let Some(i) = find_bytes(&bytes[at..], BANNER_PREFIX) {
        if let Some(banner) = banner_at(&bytes[at + i..]) {
            return Some((at + i, banner));
        }
        at += i + 1;
    }
    None
}

fn find_bytes(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A search: top table, image, read-only data, symbols, BTF, checks.
async fn search(mem: &Memory, hints: &Hints) -> Result<Kernel, FindError> {
    let limit = mem.backend().max_address();
    if let Some(va) = hints.kernel_base.filter(|&va| !image::is_image_base(va)) {
        return Err(FindError::BadHint(format!(
            "kernel base {va:#x} is not a 2 MiB aligned address in {KERNEL_MAP:#x}..{:#x}",
            KERNEL_MAP + KERNEL_MAP_SIZE
        )));
    }
    let roots = match hints.dtb {
        Some(dtb) => vec![dtb & 0x000f_ffff_ffff_f000],
        None => image::low_memory_roots(mem, limit).await,
    };
    if roots.is_empty() {
        return Err(FindError::NotLinux(
            "no kernel top-level page table in the first MiB of RAM (the trampoline's copy); give the DTB".into(),
        ));
    }
    // A few candidates at a time, in order, each read in both modes:
    // memory where many pages look like top tables costs more calls, not
    // more memory.
    let modes = match hints.paging {
        Some(paging) => vec![paging],
        None => Paging::ALL.to_vec(),
    };
    let mut found = None;
    let mut ambiguous = None;
    for group in roots.chunks(ROOTS_AT_ONCE) {
        let candidates = futures::future::join_all(group.iter().flat_map(|&root| {
            modes
                .iter()
                .map(move |&paging| image::image_of(mem, root, hints.kernel_base, limit, paging))
        }))
        .await;
        // Where both readings lead to an image, the tables must say which:
        // those roots' evidence in one go.
        let both: Vec<u64> = group
            .iter()
            .zip(candidates.chunks(modes.len()))
            .filter(|(_, images)| images.iter().flatten().count() > 1)
            .map(|(&root, _)| root)
            .collect();
        let evidence = futures::future::join_all(both.iter().map(|&r| detect_paging(mem, r))).await;
        for (&root, images) in group.iter().zip(candidates.chunks(modes.len())) {
            let mut images: Vec<Image> = images.iter().flatten().cloned().collect();
            if images.len() > 1 {
                let at = both.iter().position(|&r| r == root).expect("looked at");
                match evidence[at].paging() {
                    Ok(paging) => images.retain(|i| i.paging == paging),
                    Err(why) => {
                        ambiguous.get_or_insert(FindError::AmbiguousPaging { dtb: root, why });
                        continue;
                    }
                }
            }
            if let Some(image) = images.pop() {
                found = Some(image);
                break;
            }
        }
        if found.is_some() {
            break;
        }
    }
    if let (None, Some(ambiguous)) = (&found, ambiguous) {
        return Err(ambiguous);
    }
    let Some(image) = found else {
        return Err(FindError::NotLinux(format!(
            "{} candidate top-level table(s) ({}), none maps a kernel image at {KERNEL_MAP:#x} and up",
            roots.len(),
            roots.iter().map(|r| format!("{r:#x}")).collect::<Vec<_>>().join(", ")
        )));
    };
    let rodata = image.rodata().ok_or_else(|| {
        FindError::NotLinux(format!(
            "the image at {:#x} has no read-only data after its text",
            image.virtual_base
        ))
    })?;
    // Read through the image's own physical layout: it is contiguous, and
    // a read by physical address needs no page walk.
    let mut bytes = vec![0u8; rodata.len as usize];
    if let Err(e) = mem.read(rodata.pa, &mut bytes).await {
        e.zero_fill(&mut bytes);
    }
    let in_rodata = |va: u64, len: u64| {
        let start = va.checked_sub(rodata.va)? as usize;
        bytes.get(start..start.checked_add(len as usize)?)
    };
    let found = kallsyms::find(&bytes, image.virtual_base, SYMBOLS)
        .ok_or(FindError::NoSymbols(rodata.va))?;
    let symbols: BTreeMap<String, u64> = found.addresses.into_iter().collect();
    let banner = symbols
        .get("linux_banner")
        .and_then(|&va| banner_at(bytes.get(va.checked_sub(rodata.va)? as usize..)?))
        .or_else(|| find_banner(&bytes).map(|(_, b)| b))
        .ok_or_else(|| {
            FindError::NotLinux("no \"Linux version\" banner in the read-only data".into())
        })?;
    let build_id = match (symbols.get("__start_notes"), symbols.get("__stop_notes")) {
        (Some(&start), Some(&stop)) if stop > start => {
            in_rodata(start, stop - start).and_then(|notes| build_id_note(notes, start))
        }
        _ => None,
    };
    let (btf, btf_location) = rodata_btf(&bytes, rodata.va, &symbols, hints)?;
    drop(bytes);
    let mut kernel = finish(
        mem,
        image,
        btf,
        btf_location,
        symbols,
        banner,
        Source::Search,
    )
    .await?;
    kernel.build_id = build_id;
    Ok(kernel)
}

/// The kernel's BTF: between `__start_BTF` and `__stop_BTF`, else wherever
/// a header is found in `rodata` (at `rodata_va`), else the user's file.
/// A kernel with neither symbols nor header has none; one whose BTF fails
/// the checks says so, naming each place tried once.
fn rodata_btf(
    rodata: &[u8],
    rodata_va: u64,
    symbols: &BTreeMap<String, u64>,
    hints: &Hints,
) -> Result<(Btf, Option<(u64, u64)>), FindError> {
    let in_rodata = |va: u64, len: u64| {
        let start = usize::try_from(va.checked_sub(rodata_va)?).ok()?;
        rodata.get(start..start.checked_add(usize::try_from(len).ok()?)?)
    };
    let named = match (symbols.get("__start_BTF"), symbols.get("__stop_BTF")) {
        (Some(&start), Some(&stop)) if stop > start => Some(start),
        _ => None,
    };
    // The named place (whatever it holds), then headers found elsewhere.
    let mut places: Vec<u64> = named.into_iter().collect();
    for (at, _) in btf::find_headers(rodata) {
        let va = rodata_va + at as u64;
        if places.len() >= 4 {
            break;
        }
        if !places.contains(&va) {
            places.push(va);
        }
    }
    let mut tried = Vec::new();
    for &va in &places {
        let blob = match (Some(va) == named, named) {
            (true, _) => in_rodata(va, symbols["__stop_BTF"] - va),
            _ => in_rodata(va, rodata.len() as u64 - (va - rodata_va)),
        };
        let Some(blob) = blob else {
            tried.push(format!("{va:#x}: outside the read-only data"));
            continue;
        };
        match Btf::parse(blob) {
            Ok(btf) => {
                let len = btf.len() as u64;
                return Ok((btf, Some((va, len))));
            }
            Err(e) => tried.push(format!("{va:#x}: {e}")),
        }
    }
    if let Some(file) = &hints.btf_file {
        return Ok((Btf::from_file(file)?, None));
    }
    match tried.is_empty() {
        true => Err(FindError::NoBtf(format!(
            "no __start_BTF symbol and no BTF header in its {} bytes of read-only data",
            rodata.len()
        ))),
        false => Err(FindError::BadBtf(tried.join("; "))),
    }
}

/// NT_GNU_BUILD_ID.
const NOTE_BUILD_ID: u32 = 3;

/// The GNU build-ID note among the ELF notes `notes` (at `va`): its
/// address and bytes.
fn build_id_note(notes: &[u8], va: u64) -> Option<(u64, Vec<u8>)> {
    let mut at = 0usize;
    let word = |at: usize| Some(u32::from_le_bytes(notes.get(at..at + 4)?.try_into().ok()?));
    while at + 12 <= notes.len() {
        let (name_len, desc_len, kind) = (word(at)?, word(at + 4)?, word(at + 8)?);
        let name_end = (at + 12).checked_add(name_len as usize)?;
        let end = name_end
            .next_multiple_of(4)
            .checked_add(desc_len as usize)?
            .next_multiple_of(4);
        let note = notes.get(at..end)?;
        if kind == NOTE_BUILD_ID && notes.get(at + 12..name_end)? == b"GNU\0" {
            return (note.len() <= cache::MAX_NOTE && desc_len > 0)
                .then(|| (va + at as u64, note.to_vec()));
        }
        at = end;
    }
    None
}

/// The banner of `entry`, read where its image puts it, if it is still
/// the same.
async fn cached_banner(mem: &Memory, entry: &cache::Entry) -> Option<()> {
    let va = *entry.symbols.get("linux_banner")?;
    let pa = va
        .checked_sub(entry.virtual_base)?
        .checked_add(entry.physical_base)?;
    let mut buf = vec![0u8; BANNER_MAX];
    if let Err(err) = mem.read(pa, &mut buf).await {
        err.zero_fill(&mut buf);
    }
    (banner_at(&buf)? == entry.banner).then_some(())
}

/// A kernel from the cache, if one entry's banner is in memory where it
/// says and everything else checks out, and whether it was warm (checked
/// in one batch, with no BTF read). The newest entry is tried warm; then
/// its banner, tables and BTF are read together (the usual case: the same
/// kernel as last time); the others' banners then in one batch.
async fn from_cache(
    mem: &Memory,
    hints: &Hints,
    entries: &[cache::Entry],
) -> Option<(Kernel, bool)> {
    let first = entries.first()?;
    if let Some(kernel) = warm_kernel(mem, hints, first).await {
        return Some((kernel, true));
    }
    if let Some(kernel) = cached_kernel(mem, hints, first, true).await {
        return Some((kernel, false));
    }
    let rest = &entries[1..];
    let banners = futures::future::join_all(rest.iter().map(|e| cached_banner(mem, e))).await;
    let entry = rest.iter().zip(banners).find(|(_, b)| b.is_some())?.0;
    cached_kernel(mem, hints, entry, false)
        .await
        .map(|k| (k, false))
}

/// The image an entry describes, if its mapping is one a kernel could
/// have: from `_text`, contiguous, linear, below `limit`, within the image
/// map.
fn cached_image(entry: &cache::Entry, warm: &cache::Warm, limit: u64) -> Option<Image> {
    let first = warm.segments.first()?;
    let mut va = entry.virtual_base;
    for s in &warm.segments {
        let fits = s.va == va
            && s.len > 0
            && s.len % 0x1000 == 0
            && s.pa.checked_sub(entry.physical_base)? == s.va - entry.virtual_base
            && s.pa.checked_add(s.len)? <= limit;
        if !fits {
            return None;
        }
        va = va.checked_add(s.len)?;
    }
    let sane = first.pa == entry.physical_base
        && entry.virtual_base >= KERNEL_MAP
        && va - entry.virtual_base <= GIB
        && entry.dtb < limit;
    sane.then(|| Image {
        root: entry.dtb,
        paging: entry.paging,
        top_entry: warm.top_entry,
        virtual_base: entry.virtual_base,
        physical_base: entry.physical_base,
        segments: warm.segments.clone(),
    })
}

/// Reads `len` bytes at physical `pa`, failed bytes zero.
async fn read_zeroed(mem: &Memory, pa: Option<u64>, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    if let Some(pa) = pa {
        if let Err(e) = mem.read(pa, &mut buf).await {
            e.zero_fill(&mut buf);
        }
    }
    buf
}

/// The kernel `entry` describes, checked in one batch of reads and with
/// the walks' BTF answers from the entry: `None` when the entry lacks
/// anything that takes (then it is checked the slow way), or memory does
/// not hold that kernel as the entry says. Read, each where the entry
/// puts it: the banner and the build-ID note (the same build), the top
/// table's image entry (the same tables), `init_task` (its comm, pid 0,
/// `real_parent` itself: the same virtual base, which KASLR moves apart
/// from the physical one), `page_offset_base` (the same direct map) and
/// `init_struct_pid`'s namespace (`init_pid_ns`, as kallsyms said).
async fn warm_kernel(mem: &Memory, hints: &Hints, entry: &cache::Entry) -> Option<Kernel> {
    let warm = entry.warm.as_ref()?;
    let limit = mem.backend().max_address();
    if hints.kernel_base.is_some_and(|b| b != entry.virtual_base)
        || hints.paging.is_some_and(|p| p != entry.paging)
    {
        return None;
    }
    let image = cached_image(entry, warm, limit)?;
    let (btf_va, btf_len) = entry.btf?;
    let btf = Btf::recorded(
        warm.answers.clone(),
        usize::try_from(btf_len).ok()?,
        warm.type_count,
    )?;
    // Every question the walks ask must have its answer kept.
    if ask_walk_questions(&btf)
        .iter()
        .any(|e| matches!(e, BtfError::NotKept(..)))
    {
        log::info!(
            "cached kernel {:?}: its BTF answers are incomplete",
            entry.banner
        );
        return None;
    }
    let layout = TaskLayout::from_btf(&btf).ok()?;
    let real_parent = btf.member_offset("task_struct", "real_parent").ok()?;
    let symbol = |name: &str| entry.symbols.get(name).copied();
    let (init_task, banner_va, offset_base, ns) = (
        symbol("init_task")?,
        symbol("linux_banner")?,
        symbol("page_offset_base")?,
        symbol("init_pid_ns")?,
    );
    let task_size = usize::try_from(layout.size)
        .ok()
        .filter(|s| (64..=1 << 16).contains(s))?;
    let (note_va, note) = &warm.build_id;
    let tops: Vec<u64> = [
        Some(entry.dtb),
        hints.dtb.map(|d| d & 0x000f_ffff_ffff_f000),
    ]
    .into_iter()
    .flatten()
    .collect();
    let pid_ns_at = warm.init_thread_pid.checked_add(layout.pid_ns)?;
    // The same kernel may run in either mode (a CPU without LA57, or
    // `no5lvl`): its own word on the mode, where it keeps one.
    let l5 = symbol(L5_SYMBOL).and_then(|va| image.physical(va));
    let (banner, build_id, task, offset_base, pid_ns, top_entries, l5) = futures::join!(
        read_zeroed(mem, image.physical(banner_va), BANNER_MAX),
        read_zeroed(mem, image.physical(*note_va), note.len()),
        read_zeroed(mem, image.physical(init_task), task_size),
        read_zeroed(mem, image.physical(offset_base), 8),
        read_zeroed(mem, image.physical(pid_ns_at), 8),
        futures::future::join_all(tops.iter().map(|&t| read_zeroed(mem, Some(t + 511 * 8), 8))),
        async {
            match l5 {
                Some(pa) => Some(mem.read_val::<u32>(pa).await.ok()),
                None => None,
            }
        },
    );
    let word = |b: &[u8], at: u64| b.u64_at(at);
    let comm = task.as_slice().bytes_at(layout.comm, 16)?;
    let comm = &comm[..comm.iter().position(|&c| c == 0).unwrap_or(16)];
    let checks = [
        (
            "banner",
            banner_at(&banner).as_deref() == Some(entry.banner.as_str()),
        ),
        ("build ID", build_id == *note),
        (
            "top table",
            top_entries
                .iter()
                .all(|e| word(e, 0) == Some(warm.top_entry)),
        ),
        ("init_task comm", comm == b"swapper/0" || comm == b"swapper"),
        (
            "init_task pid",
            task.as_slice().u32_at(layout.pid) == Some(0),
        ),
        (
            "init_task real_parent",
            word(&task, real_parent) == Some(init_task),
        ),
        (
            "init_task thread_pid",
            word(&task, layout.thread_pid) == Some(warm.init_thread_pid),
        ),
        (
            "page_offset_base",
            word(&offset_base, 0) == Some(warm.direct_map_base),
        ),
        ("init_pid_ns", word(&pid_ns, 0) == Some(ns)),
        (
            "paging mode",
            l5.is_none_or(|l5| l5 == Some(u32::from(entry.paging == Paging::FiveLevel))),
        ),
    ];
    if let Some((what, _)) = checks.iter().find(|(_, ok)| !ok) {
        log::info!(
            "cached kernel {:?}: its {what} differs in memory",
            entry.banner
        );
        return None;
    }
    let btf_pa = image.physical(btf_va)?;
    let loader_mem = mem.clone();
    let btf = btf.with_loader(move || {
        let mut blob = vec![0u8; btf_len as usize];
        loader_mem
            .block_on(loader_mem.read(btf_pa, &mut blob))
            .map_err(|e| BtfError::Parse(format!("BTF at {btf_va:#x} cannot be read: {e}")))?;
        Btf::parse(&blob)
    });
    Some(Kernel {
        space: AddressSpace::new(mem.clone(), entry.dtb, entry.paging),
        image,
        direct_map_base: warm.direct_map_base,
        btf,
        btf_location: entry.btf,
        symbols: entry.symbols.clone(),
        banner: entry.banner.clone(),
        init_task: InitTask {
            address: init_task,
            comm: String::from_utf8_lossy(comm).into_owned(),
            pid_ns: ns,
        },
        source: Source::Cache,
        maps_layout: OnceLock::new(),
        build_id: Some(warm.build_id.clone()),
        init_thread_pid: warm.init_thread_pid,
    })
}

/// The kernel `entry` describes, checked against memory: its banner
/// (unless already checked), its tables, its BTF and its build ID
/// together, then as a search's.
async fn cached_kernel(
    mem: &Memory,
    hints: &Hints,
    entry: &cache::Entry,
    check_banner: bool,
) -> Option<Kernel> {
    let limit = mem.backend().max_address();
    let dtb = hints.dtb.unwrap_or(entry.dtb);
    let in_image = |va: u64| {
        va.checked_sub(entry.virtual_base)?
            .checked_add(entry.physical_base)
    };
    let btf_blob = async {
        match entry.btf {
            Some((va, len)) if len <= btf::MAX_BTF as u64 => {
                let mut blob = vec![0u8; len as usize];
                mem.read(in_image(va)?, &mut blob).await.ok()?;
                Some(blob)
            }
            _ => None,
        }
    };
    let notes = async {
        let start = *entry.symbols.get("__start_notes")?;
        let len = entry.symbols.get("__stop_notes")?.checked_sub(start)?;
        let notes = read_zeroed(
            mem,
            in_image(start),
            usize::try_from(len.min(1 << 16)).ok()?,
        )
        .await;
        build_id_note(&notes, start)
    };
    let banner = async {
        match check_banner {
            true => cached_banner(mem, entry).await,
            false => Some(()),
        }
    };
    if hints.paging.is_some_and(|p| p != entry.paging) {
        return None;
    }
    let (banner, image, blob, build_id) = futures::join!(
        banner,
        image::image_of(mem, dtb, Some(entry.virtual_base), limit, entry.paging),
        btf_blob,
        notes
    );
    banner?;
    // Another build under the same banner: not the kernel the entry knew.
    if entry
        .warm
        .as_ref()
        .is_some_and(|w| build_id.as_ref() != Some(&w.build_id))
    {
        log::info!("cached kernel {:?}: its build ID differs", entry.banner);
        return None;
    }
    let Some(image) = image.filter(|i| i.physical_base == entry.physical_base) else {
        log::info!(
            "cached kernel {:?}: its tables no longer match",
            entry.banner
        );
        return None;
    };
    let (btf, btf_location) = match (blob, entry.btf) {
        (Some(blob), location) => (Btf::parse(&blob).ok()?, location),
        (None, None) => (Btf::from_file(hints.btf_file.as_deref()?).ok()?, None),
        (None, Some(_)) => return None,
    };
    let result = finish(
        mem,
        image,
        btf,
        btf_location,
        entry.symbols.clone(),
        entry.banner.clone(),
        Source::Cache,
    )
    .await;
    match result {
        Ok(mut kernel) => {
            kernel.build_id = build_id;
            Some(kernel)
        }
        Err(e) => {
            log::info!("cached kernel {:?} no longer checks out: {e}", entry.banner);
            None
        }
    }
}

/// Checks `init_task` and what it leads to, and settles the kernel's own
/// top table and the direct map: two batches of reads, as every address
/// read is in the image (read by its physical address) or in the direct
/// map (whose candidate bases are checked by the pointers read through
/// them).
async fn finish(
    mem: &Memory,
    image: Image,
    btf: Btf,
    btf_location: Option<(u64, u64)>,
    mut symbols: BTreeMap<String, u64>,
    banner: String,
    source: Source,
) -> Result<Kernel, FindError> {
    let layout = TaskLayout::from_btf(&btf)?;
    let inconsistent = FindError::Inconsistent;
    let init_task = *symbols
        .get("init_task")
        .ok_or_else(|| inconsistent("kallsyms has no init_task".into()))?;
    let in_image = |name: &str| symbols.get(name).and_then(|&va| image.physical(va));
    // The kernel's own top table (`init_top_pgt`), which must map the image
    // as the table it was found through does; without the symbol, that
    // table (which shares the kernel half).
    let top = in_image("init_top_pgt");
    let offset_base = in_image("page_offset_base");
    let l5 = in_image(L5_SYMBOL);
    let (task, top_entry, offset_base, l5) = futures::join!(
        init_task::read(mem, &image, &layout, init_task),
        async {
            match top {
                Some(pa) => mem.read_val::<u64>(pa + 511 * 8).await.ok(),
                None => None,
            }
        },
        async {
            match offset_base {
                Some(pa) => mem.read_val::<u64>(pa).await.ok(),
                None => None,
            }
        },
        async {
            match l5 {
                Some(pa) => Some(mem.read_val::<u32>(pa).await),
                None => None,
            }
        }
    );
    // The kernel's own word on its mode, where it keeps one: the tables
    // were read in a mode it must agree with.
    match l5 {
        Some(Ok(l5)) if (l5 == 1) != (image.paging == Paging::FiveLevel) || l5 > 1 => {
            return Err(inconsistent(format!(
                "its tables read as {} paging, and {L5_SYMBOL} is {l5}",
                image.paging
            )))
        }
        Some(Err(e)) => {
            return Err(inconsistent(format!("{L5_SYMBOL} is unreadable: {e}")));
        }
        _ => {}
    }
    let dtb = match top {
        Some(pa) if top_entry == Some(image.top_entry) => pa,
        Some(pa) => {
            return Err(inconsistent(format!(
                "init_top_pgt at {pa:#x} does not map the kernel image as the table at {:#x} does",
                image.root
            )))
        }
        None => image.root,
    };
    let paging = image.paging;
    let bases: Vec<u64> = [offset_base, Some(default_direct_map(paging))]
        .into_iter()
        .flatten()
        .filter(|base| base % GIB == 0 && *base >= paging.upper_half())
        .collect();
    let task = task.map_err(inconsistent)?;
    let init_thread_pid = task.as_slice().u64_at(layout.thread_pid).unwrap_or(0);
    let (task, direct_map_base) =
        init_task::check(mem, &image, &layout, (init_task, &task), &bases)
            .await
            .map_err(inconsistent)?;
    if let Some(&ns) = symbols.get("init_pid_ns") {
        if ns != task.pid_ns {
            return Err(inconsistent(format!(
                "init_task's pid namespace is {:#x}, kallsyms' init_pid_ns {ns:#x}",
                task.pid_ns
            )));
        }
    }
    symbols.insert("init_pid_ns".into(), task.pid_ns);
    Ok(Kernel {
        space: AddressSpace::new(mem.clone(), dtb, paging),
        image: Image { root: dtb, ..image },
        direct_map_base,
        btf,
        btf_location,
        symbols,
        banner,
        init_task: task,
        source,
        maps_layout: OnceLock::new(),
        build_id: None,
        init_thread_pid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test guest's BTF cut down to what the walks ask about
    /// (`scripts/btf-seed.py`; the fuzz target's seed).
    const GUEST_BTF: &[u8] = include_bytes!("../../fuzz/seeds/btf/debian12-6.1-walks.btf");

    #[test]
    fn a_real_kernels_types_pass_the_checks_and_answer_every_walk() {
        let btf = Btf::parse(GUEST_BTF).unwrap();
        assert_eq!(ask_walk_questions(&btf), vec![]);
        // What the guest's kernel checks init_task by.
        assert_eq!(btf.member_size("task_struct", "comm"), Ok(16));
        assert_eq!(btf.enum_value("PIDTYPE_PID"), Some(0));
    }

    #[test]
    fn banners_need_their_newline_and_nul() {
        let good = b"xxLinux version 6.1.0-56-amd64 (debian) #1 SMP\n\0yy";
        assert_eq!(
            find_banner(good),
            Some((
                2,
                "Linux version 6.1.0-56-amd64 (debian) #1 SMP".to_string()
            ))
        );
        assert_eq!(
            find_banner(b"Linux version %s (%s)\0Linux version 1\n\0").map(|b| b.0),
            Some(22)
        );
        assert_eq!(find_banner(b"Linux version 6.1\x01\n\0"), None);
    }
}
