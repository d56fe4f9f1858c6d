//! Finding the kernel of a live Linux guest, and of a memory image of it,
//! with no configuration, against what the guest and QEMU's monitor say:
//! the guest prints `_text` and `init_top_pgt` from its /proc/kallsyms, and
//! the monitor translates through the CPU's own page tables.

mod common;

use std::path::Path;

use common::btf;
use common::linux::{engine, no_cache};
use common::qemu::{shared_guest, Guest, GuestKernel, GuestMemory, GuestOptions};
use leechio::linux::{
    BtfError, CacheLocation, FindError, Hints, Kernel, Source, KERNEL_MAP, MAX_ANSWER,
};
use leechio::{Call, DeviceConfig, LeechCore, Memory};

/// Read calls of a search: low memory, four levels of the image's tables
/// (top entry, level 3, level 2, its split entries' tables), the read-only
/// data, then init_task with the kernel's top table and
/// `page_offset_base`, and the neighbours that check it.
const SEARCH_CALLS: u64 = 8;
/// Read calls from the cache: one batch that checks the kernel is the one
/// the entry knows (tests/linux_warm.rs shows that no BTF is read).
const CACHE_CALLS: u64 = 1;

/// Finds the kernel, and the read calls it took.
fn find(mem: &Memory, device: &LeechCore, hints: &Hints) -> (Result<Kernel, FindError>, u64) {
    let before = device.call_count(Call::ReadScatter);
    let kernel = Kernel::find(mem, hints);
    (kernel, device.call_count(Call::ReadScatter) - before)
}

/// Bytes at a guest virtual address, through the monitor.
fn monitor_bytes(guest: &Guest, va: u64, len: usize) -> Vec<u8> {
    let words = guest
        .x(va, len.div_ceil(8))
        .expect("monitor reads the address");
    let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    bytes.truncate(len);
    bytes
}

/// Every value the kernel gives, against the guest's and the monitor's.
fn check_against_guest(kernel: &Kernel, guest: &Guest) {
    // The mode the CPU runs in (CR4.LA57), as the tables were read.
    assert_eq!(kernel.paging(), guest.paging());
    assert_eq!(kernel.virtual_base(), guest.kernel_text());
    assert_eq!(kernel.symbol("init_top_pgt"), Some(guest.init_top_pgt()));
    assert_eq!(kernel.dtb(), guest.kernel_dtb());
    // The symbols the walk starts from, as the guest's /proc/kallsyms
    // lists them.
    assert_eq!(kernel.init_task(), guest.symbol("init_task"));
    assert_eq!(kernel.init_pid_ns(), guest.symbol("init_pid_ns"));
    assert_eq!(
        guest.gva2gpa(guest.kernel_text()),
        Some(kernel.physical_base())
    );
    // The direct map: the monitor sees physical P at base + P.
    let p = kernel.physical_base();
    assert_eq!(guest.gva2gpa(kernel.direct_map_base() + p), Some(p));
    assert_eq!(guest.gva2gpa(kernel.direct_map_base()), Some(0));
    // init_task's comm, read by the monitor at BTF's offset.
    let comm = kernel.offset_of("task_struct", "comm").unwrap();
    assert_eq!(
        &monitor_bytes(guest, kernel.init_task() + comm, 10),
        b"swapper/0\0"
    );
    // init_pid_ns: init_task.thread_pid->numbers[0].ns, by the monitor.
    let thread_pid = kernel.offset_of("task_struct", "thread_pid").unwrap();
    let pid = guest.x(kernel.init_task() + thread_pid, 1).unwrap()[0];
    let ns = kernel.offset_of("pid", "numbers").unwrap() + kernel.offset_of("upid", "ns").unwrap();
    assert_eq!(guest.x(pid + ns, 1).unwrap()[0], kernel.init_pid_ns());
    // The BTF header where the kernel says, and its banner.
    let (btf, len) = kernel.btf_location().expect("BTF from memory");
    let header = monitor_bytes(guest, btf, 24);
    assert_eq!(&header[..4], &[0x9f, 0xeb, 1, 0]);
    assert_eq!(len as usize, kernel.btf().len());
    assert_eq!(Some(btf), kernel.symbol("__start_BTF"));
    let banner = kernel.banner().as_bytes();
    assert_eq!(
        monitor_bytes(guest, kernel.symbol("linux_banner").unwrap(), banner.len()),
        banner
    );
    assert!(
        kernel.banner().starts_with("Linux version "),
        "{}",
        kernel.banner()
    );
    assert!(
        guest.serial_log().contains(kernel.release()),
        "release {}",
        kernel.release()
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn finds_the_kernel_of_a_live_guest() {
    let guest = shared_guest();
    let (mem, device) = engine(guest.open());
    let _paused = guest.pause();
    let (kernel, calls) = find(&mem, &device, &no_cache());
    let kernel = kernel.unwrap();
    eprintln!("found {} in {calls} read calls", kernel.banner());
    check_against_guest(&kernel, &guest);
    assert_eq!(kernel.source(), Source::Search);
    assert_eq!(calls, SEARCH_CALLS);
}

/// Boots a guest with `options`, finds its kernel and checks it.
fn find_in_a_guest_booted_with(options: GuestOptions) -> (Guest, Kernel) {
    let guest = Guest::start_with(options);
    let kernel = {
        let (mem, device) = engine(guest.open());
        let _paused = guest.pause();
        let (kernel, calls) = find(&mem, &device, &no_cache());
        let kernel = kernel.unwrap_or_else(|e| panic!("{options:?}: {e}"));
        check_against_guest(&kernel, &guest);
        // 5-level paging: one more level of tables above the image.
        let extra = u64::from(guest.paging().levels() - 4);
        assert_eq!(calls, SEARCH_CALLS + extra, "{options:?}");
        kernel
    };
    (guest, kernel)
}

/// A CPU with 5-level paging on (`-cpu max`), KASLR on: the tables are
/// read in 5 levels, which the kernel's own `__pgtable_l5_enabled` and
/// the CPU's CR4 agree with. (4-level with KASLR: the other build's test
/// below.)
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn finds_the_kernel_with_5_level_paging_and_kaslr_on() {
    let (_guest, kernel) = find_in_a_guest_booted_with(GuestOptions {
        memory: GuestMemory::Mib256,
        kaslr: true,
        kernel: GuestKernel::Default,
        la57: true,
    });
    assert_eq!(kernel.paging(), leechio::Paging::FiveLevel);
    assert!(kernel.symbol("__pgtable_l5_enabled").is_some());
    // The guest's own symbols said where it went (checked above); that is
    // not where it goes without KASLR, in all but about 1 boot in 500.
    eprintln!(
        "KASLR: text {:#x} at physical {:#x}, direct map {:#x}",
        kernel.virtual_base(),
        kernel.physical_base(),
        kernel.direct_map_base()
    );
}

/// The guest's BTF (`__start_BTF` to `__stop_BTF` of its /proc/kallsyms),
/// read by the monitor.
fn guest_btf(guest: &Guest) -> Vec<u8> {
    let start = guest.symbol("__start_BTF");
    let len = guest.symbol("__stop_BTF") - start;
    assert_eq!(
        Some(len),
        guest.oracle().btf_size,
        "/sys/kernel/btf/vmlinux"
    );
    let pa = guest.gva2gpa(start).expect("BTF is mapped");
    guest.pmemsave(pa, len)
}

/// Checks a size or offset BTF answered against the layout read from the
/// guest's own BTF: the same where a walk could use it, and refused as too
/// large past [`MAX_ANSWER`] (6.12's `lsm_static_calls_table` is 94 KiB).
fn assert_answer(answer: Result<u64, BtfError>, expected: Option<u64>, what: &str) {
    match expected {
        Some(value) if value > MAX_ANSWER => assert!(
            matches!(answer, Err(BtfError::TooLarge { value: v, .. }) if v == value),
            "{what}: {answer:?}, not refused as over {MAX_ANSWER} bytes"
        ),
        _ => assert_eq!(answer.ok(), expected, "{what}"),
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn finds_the_kernel_of_another_build_with_other_struct_layouts() {
    let (cloud_guest, cloud) = find_in_a_guest_booted_with(GuestOptions {
        memory: GuestMemory::Mib256,
        kaslr: true,
        kernel: GuestKernel::Cloud,
        ..GuestOptions::default()
    });
    // Another configuration of the same version: each is read with its own
    // BTF. Which structs the two lay out differently depends on the
    // version (6.1's cloud build has a smaller task_struct, 6.12's the
    // same one but a smaller `device`): they are found here, from the
    // BTF each guest holds, and every member of each such struct must be
    // where its own build puts it. With the other build's BTF, the sizes
    // at least would be wrong.
    let default_guest = shared_guest();
    let (mem, device) = engine(default_guest.open());
    let default = find(&mem, &device, &no_cache()).0.unwrap();
    assert_ne!(cloud.banner(), default.banner());
    let builds = [(&cloud, &cloud_guest), (&default, &*default_guest)]
        .map(|(kernel, guest)| (kernel, btf::layouts(&guest_btf(guest))));
    let [(_, cloud_layouts), (_, default_layouts)] = &builds;
    let differ: Vec<&String> = cloud_layouts
        .iter()
        .filter(|(name, layout)| default_layouts.get(*name).is_some_and(|d| d != *layout))
        .map(|(name, _)| name)
        .collect();
    eprintln!(
        "{} of {} structs and unions laid out differently: {differ:?}",
        differ.len(),
        cloud_layouts.len()
    );
    assert!(
        !differ.is_empty(),
        "the two builds lay out every struct alike: nothing tells their BTF apart"
    );
    for (kernel, layouts) in &builds {
        for &name in &differ {
            let layout = &layouts[name];
            let what = format!("{}: {name}", kernel.release());
            assert_answer(
                kernel.btf().size_of(name),
                Some(u64::from(layout.size)),
                &what,
            );
            let members = cloud_layouts[name]
                .members
                .iter()
                .chain(&default_layouts[name].members);
            for (member, _) in members {
                assert_answer(
                    kernel.offset_of(name, member),
                    layout.offset(member),
                    &format!("{what}.{member}"),
                );
            }
        }
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn finds_the_kernel_in_a_memory_image_of_the_guest() {
    let guest = shared_guest();
    let dir = tempfile::tempdir().unwrap();
    let _paused = guest.pause();
    let bytes = guest.pmemsave(0, guest.memory().bytes());
    let (mem, device) = engine(image_device(dir.path(), "guest.raw", &bytes));
    let (kernel, calls) = find(&mem, &device, &no_cache());
    let kernel = kernel.unwrap();
    check_against_guest(&kernel, &guest);
    assert_eq!(calls, SEARCH_CALLS);
}

/// Writes `bytes` as an image file in `dir` and opens it.
fn image_device(dir: &Path, name: &str, bytes: &[u8]) -> LeechCore {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    LeechCore::open(&DeviceConfig::new(format!("file://{}", path.display()))).unwrap()
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_process_dtb_as_hint_skips_low_memory() {
    let guest = shared_guest();
    let (mem, device) = engine(guest.open());
    let _paused = guest.pause();
    let (_, search_calls) = find(&mem, &device, &no_cache());
    let hints = Hints {
        dtb: Some(guest.cr3()),
        ..no_cache()
    };
    let (kernel, calls) = find(&mem, &device, &hints);
    let kernel = kernel.unwrap();
    // The kernel's own table, not the process's it was found through.
    assert_eq!(kernel.dtb(), guest.kernel_dtb());
    // The symbols the walk starts from, as the guest's /proc/kallsyms
    // lists them.
    assert_eq!(kernel.init_task(), guest.symbol("init_task"));
    assert_eq!(kernel.init_pid_ns(), guest.symbol("init_pid_ns"));
    assert_eq!(calls, search_calls - 1);
    // A hint that is no page table at all: a one-line error naming it.
    let hints = Hints {
        dtb: Some(0x10_0000),
        ..no_cache()
    };
    let err = Kernel::find(&mem, &hints).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("no Linux kernel found: 1 candidate top-level table(s) (0x100000), none maps a kernel image at {KERNEL_MAP:#x} and up")
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn the_cache_skips_the_search_and_is_checked_against_memory() {
    let guest = shared_guest();
    let (mem, device) = engine(guest.open());
    let _paused = guest.pause();
    let dir = tempfile::tempdir().unwrap();
    let hints = Hints {
        cache: CacheLocation::Folder(dir.path().to_path_buf()),
        ..Hints::default()
    };
    let (first, search_calls) = find(&mem, &device, &hints);
    let first = first.unwrap();
    assert_eq!(first.source(), Source::Search);
    let file = hints.cache.file().unwrap();
    assert!(std::fs::read_to_string(&file)
        .unwrap()
        .contains(first.banner()));
    let (cached, calls) = find(&mem, &device, &hints);
    let cached = cached.unwrap();
    assert_eq!(cached.source(), Source::Cache);
    check_against_guest(&cached, &guest);
    assert_eq!(cached.init_task(), first.init_task());
    assert_eq!((calls, search_calls), (CACHE_CALLS, SEARCH_CALLS));
    // A cache whose kernel is not the one in memory (another DTB, another
    // banner) is not trusted: the search runs and finds the truth.
    let text = std::fs::read_to_string(&file).unwrap();
    for (from, to) in [
        (format!("{:#x}", first.dtb()), "0x9000".to_string()),
        ("Linux version".to_string(), "Linux versioN".to_string()),
        // An entry made before the symbols wanted now were searched for
        // (without the list of names searched).
        ("\"searched\"".to_string(), "\"unknown\"".to_string()),
    ] {
        std::fs::write(&file, text.replace(&from, &to)).unwrap();
        let kernel = Kernel::find(&mem, &hints).unwrap();
        assert_eq!(kernel.source(), Source::Search, "after {from} -> {to}");
        check_against_guest(&kernel, &guest);
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_kernel_without_btf_names_the_cause_and_takes_a_btf_file() {
    let guest = shared_guest();
    let dir = tempfile::tempdir().unwrap();
    let _paused = guest.pause();
    let mut bytes = guest.pmemsave(0, guest.memory().bytes());
    let (mem, _) = engine(image_device(dir.path(), "guest.raw", &bytes));
    let kernel = Kernel::find(&mem, &no_cache()).unwrap();
    let (btf_va, btf_len) = kernel.btf_location().unwrap();
    let btf_pa = (btf_va - kernel.virtual_base() + kernel.physical_base()) as usize;
    let btf_file = dir.path().join("vmlinux.btf");
    std::fs::write(&btf_file, &bytes[btf_pa..btf_pa + btf_len as usize]).unwrap();
    // Without its BTF (zeros where its symbols say it is), the kernel is
    // refused by name: BTF that cannot be used, not a kernel built
    // without it.
    bytes[btf_pa..btf_pa + btf_len as usize].fill(0);
    let (mem, _) = engine(image_device(dir.path(), "no-btf.raw", &bytes));
    let err = Kernel::find(&mem, &no_cache()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("the kernel's BTF cannot be used ({btf_va:#x}: not BTF: no valid header (magic 0xeb9f, version 1, 24-byte header, sections in bounds, at most 64 MiB)); give its /sys/kernel/btf/vmlinux, copied off the target, as the BTF file")
    );
    // With the file it was saved to, it is found as before.
    let hints = Hints {
        btf_file: Some(btf_file),
        ..no_cache()
    };
    let from_file = Kernel::find(&mem, &hints).unwrap();
    assert_eq!(from_file.btf_location(), None);
    assert_eq!(from_file.init_task(), kernel.init_task());
    assert_eq!(from_file.init_pid_ns(), kernel.init_pid_ns());
    assert_eq!(from_file.btf().type_count(), kernel.btf().type_count());
    // A file that is not BTF.
    let mut hints_small = hints.clone();
    let junk = dir.path().join("junk");
    std::fs::write(&junk, b"not btf").unwrap();
    hints_small.btf_file = Some(junk);
    assert_eq!(
        Kernel::find(&mem, &hints_small).unwrap_err().to_string(),
        "not BTF: no valid header (magic 0xeb9f, version 1, 24-byte header, sections in bounds, at most 64 MiB)"
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn memory_that_only_looks_like_a_kernel_is_refused() {
    let guest = shared_guest();
    let dir = tempfile::tempdir().unwrap();
    let _paused = guest.pause();
    let bytes = guest.pmemsave(0, guest.memory().bytes());
    let (mem, _) = engine(image_device(dir.path(), "guest.raw", &bytes));
    let kernel = Kernel::find(&mem, &no_cache()).unwrap();
    let pa = |va: u64| (va - kernel.virtual_base() + kernel.physical_base()) as usize;
    // No RAM content at all.
    let zeros = vec![0u8; 32 << 20];
    let (mem, _) = engine(image_device(dir.path(), "zeros.raw", &zeros));
    assert_eq!(
        Kernel::find(&mem, &no_cache()).unwrap_err().to_string(),
        "no Linux kernel found: no kernel top-level page table in the first MiB of RAM (the trampoline's copy); give the DTB"
    );
    // Page tables and an image, but no symbol table in its read-only data.
    let rodata = kernel
        .segments()
        .iter()
        .find(|s| !s.executable && !s.writable)
        .unwrap();
    let mut no_symbols = bytes.clone();
    no_symbols[rodata.pa as usize..(rodata.pa + rodata.len) as usize].fill(0);
    let (mem, _) = engine(image_device(dir.path(), "no-kallsyms.raw", &no_symbols));
    assert_eq!(
        Kernel::find(&mem, &no_cache()).unwrap_err(),
        FindError::NoSymbols(rodata.va)
    );
    // An init_task whose comm is another's.
    let comm = kernel.offset_of("task_struct", "comm").unwrap();
    let mut renamed = bytes.clone();
    renamed[pa(kernel.init_task() + comm)..][..9].copy_from_slice(b"swapper/1");
    let (mem, _) = engine(image_device(dir.path(), "renamed.raw", &renamed));
    assert_eq!(
        Kernel::find(&mem, &no_cache()).unwrap_err().to_string(),
        format!("memory looks like a Linux kernel, but init_task at {:#x} has comm \"swapper/1\", not \"swapper/0\"", kernel.init_task())
    );
    // Its task list cut: next points at itself.
    let tasks = kernel.offset_of("task_struct", "tasks").unwrap();
    let mut cut = bytes;
    let own = kernel.init_task() + tasks;
    cut[pa(own)..][..8].copy_from_slice(&(own + 0x40).to_le_bytes());
    let (mem, _) = engine(image_device(dir.path(), "cut.raw", &cut));
    let err = Kernel::find(&mem, &no_cache()).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!(
            "memory looks like a Linux kernel, but init_task at {:#x}: its tasks list (next {:#x}",
            kernel.init_task(),
            own + 0x40
        )),
        "{err}"
    );
}
