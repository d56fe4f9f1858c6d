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

pub(crate) mod btf;
mod cache;
pub(crate) mod image;
pub(crate) mod init_task;
pub(crate) mod kallsyms;
mod search;
pub(crate) mod vmcoreinfo;
mod warm;

use std::path::PathBuf;

pub use cache::CacheLocation;

use super::offsets::ask_walk_questions;
use super::Kernel;
use crate::vm::Paging;
use crate::Memory;
use btf::BtfError;

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
    // The head of the loadable modules' list, and their address tree (see
    // `modules`).
    crate::linux::modules::SYMBOL,
    crate::linux::modules::TREE_SYMBOL,
    // Whether the kernel runs with 5-level paging (kernels built with
    // CONFIG_X86_5LEVEL, up to 6.16).
    L5_SYMBOL,
    // fs.nr_open, which bounds a process's fd table, and the d_dname
    // functions that name sockets, pipes and anonymous inodes (see
    // `files` and `paths`).
    crate::linux::files::NR_OPEN_SYMBOL,
    DNAMES[0],
    DNAMES[1],
    DNAMES[2],
    DNAMES[3],
    DNAMES[4],
    DNAMES[5],
    DNAMES[6],
    // What the kernel says of itself (see `system`): its names, its
    // timekeeper, its command line (and the line's length, from 6.x).
    crate::linux::system::UTS_SYMBOL,
    crate::linux::system::CLOCK_SYMBOL,
    crate::linux::system::CMDLINE_SYMBOL,
    crate::linux::system::CMDLINE_LEN_SYMBOL,
    // The kernel log (see `log`): the ring's pointer and the kernel's
    // two rings (5.10 on), or the old buffer's variables.
    crate::linux::log::RING_SYMBOL,
    crate::linux::log::STATIC_RINGS[0],
    crate::linux::log::STATIC_RINGS[1],
    crate::linux::log::LEGACY_SYMBOLS[0],
    crate::linux::log::LEGACY_SYMBOLS[1],
    crate::linux::log::LEGACY_SYMBOLS[2],
    crate::linux::log::LEGACY_SYMBOLS[3],
    crate::linux::log::LEGACY_SYMBOLS[4],
    crate::linux::log::LEGACY_SYMBOLS[5],
    // Each CPU's run queue: a per-CPU variable, the CPUs, their offsets
    // (see `views`).
    crate::linux::views::SYMBOLS[0],
    crate::linux::views::SYMBOLS[1],
    crate::linux::views::SYMBOLS[2],
    // The network namespaces, and the protocols that tell TCP and UDP
    // sockets (see `net`).
    crate::linux::net::SYMBOLS[0],
    crate::linux::net::SYMBOLS[1],
    crate::linux::net::SYMBOLS[2],
    crate::linux::net::SYMBOLS[3],
    crate::linux::net::SYMBOLS[4],
    // The dentry cache's hash table and its size, and where struct pages
    // start (see `page_cache`).
    crate::linux::page_cache::SYMBOLS[0],
    crate::linux::page_cache::SYMBOLS[1],
    crate::linux::page_cache::SYMBOLS[2],
    // The modules' sysfs kset and the kernel's taint (see `modules`), and
    // the parameter kinds whose values a module's parameters show.
    crate::linux::modules::KSET_SYMBOL,
    crate::linux::modules::TAINT_SYMBOL,
    PARAM_OPS[0].0,
    PARAM_OPS[1].0,
    PARAM_OPS[2].0,
    PARAM_OPS[3].0,
    PARAM_OPS[4].0,
    PARAM_OPS[5].0,
    PARAM_OPS[6].0,
    PARAM_OPS[7].0,
    PARAM_OPS[8].0,
    PARAM_OPS[9].0,
    PARAM_OPS[10].0,
    PARAM_OPS[11].0,
    PARAM_OPS[12].0,
    PARAM_OPS[13].0,
    // What the hooks are checked against (see `hooks`): the kernel's
    // text, the system-call tables and switches, the ftrace list.
    HOOKS[0],
    HOOKS[1],
    HOOKS[2],
    HOOKS[3],
    HOOKS[4],
    HOOKS[5],
    HOOKS[6],
    HOOKS[7],
    HOOKS[8],
];
const HOOKS: [&str; 9] = crate::linux::hooks::SYMBOLS;
const PARAM_OPS: [(&str, crate::linux::modules::ParamKind); 14] = crate::linux::modules::PARAM_OPS;
const DNAMES: [&str; 7] = crate::linux::paths::DNAME_SYMBOLS;
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
    /// from [`KERNEL_MAP`](crate::linux::KERNEL_MAP)).
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

impl Kernel {
    /// Finds the kernel in `mem` (blocking; see [`Kernel::find_async`]).
    /// The kernel keeps a handle on `mem`: its walks read it.
    pub fn find(mem: &Memory, hints: &Hints) -> Result<Kernel, FindError> {
        mem.block_on(Kernel::find_async(mem, hints))
    }

    /// Finds the kernel in `mem`: from the cache when a kernel there is
    /// still the one in memory, else by searching. The kernel keeps a
    /// handle on `mem` ([`Kernel::memory`]), which its walks read.
    pub async fn find_async(mem: &Memory, hints: &Hints) -> Result<Kernel, FindError> {
        let file = hints.cache.file();
        if let Some(file) = &file {
            let mut entries = cache::load(file);
            entries.retain(|e| e.searched == SYMBOLS);
            if let Some((kernel, warm)) = warm::from_cache(mem, hints, &entries).await {
                // An entry checked the slow way is written again, with
                // what the next start needs to be warm.
                if !warm {
                    kernel.save(file);
                }
                return Ok(kernel);
            }
        }
        let kernel = search::search(mem, hints).await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use btf::Btf;

    /// The test guest's BTF cut down to what the walks ask about
    /// (`scripts/btf-seed.py`; the fuzz target's seed).
    const GUEST_BTF: &[u8] = include_bytes!("../../../fuzz/seeds/btf/debian12-6.1-walks.btf");

    #[test]
    fn a_real_kernels_types_pass_the_checks_and_answer_every_walk() {
        let btf = Btf::parse(GUEST_BTF).unwrap();
        assert_eq!(ask_walk_questions(&btf), vec![]);
        // The views of what hides may each be missing on some kernel, but
        // not on this one: the seed must hold the run queues' types too.
        let views = crate::linux::offsets::ViewsLayout::from_btf(&btf).unwrap();
        assert_eq!(views.errors().collect::<Vec<_>>(), Vec::<&BtfError>::new());
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
