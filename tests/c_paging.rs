//! The paging mode through the C and C++ APIs on live guests, one in
//! 4-level paging and one in 5-level (CR4.LA57, `-cpu max`, KASLR on), as
//! programs use the installed release library (`ffi/tests/c/paging_test.c`,
//! `ffi/tests/cpp/paging_test.cpp`) through LeechCore's `qemu://` device,
//! with the guest paused. QEMU's monitor is the oracle: its `xp` walks of
//! kernel text, data and direct-map addresses from the kernel's root
//! (checked against its own `gva2gpa`) go to the programs, which check the
//! mode found from the tables, every entry of every translation and the
//! process list; the C program's walk of the pattern process's memory comes
//! back and is checked against `xp` walks from that process's root.

#[path = "../ffi/tests/c_build/mod.rs"]
mod c_build;
mod common;

use std::fmt::Write as _;
use std::process::Command;

use common::pattern_word;
use common::qemu::{shared_guest, shared_la57_guest, Guest, SharedGuest};
use leechio::vm::LEVELS;
use leechio::Paging;

/// Bits 51..12 of an entry: the next table or the page.
const ADDRESS: u64 = 0x000f_ffff_ffff_f000;

/// The monitor's walk of `va` from `root` in `paging` mode, by `xp` of one
/// entry a level: the entry read at each level, and the physical address
/// it ends at (`None` at an entry not present).
fn monitor_walk(
    guest: &Guest,
    root: u64,
    paging: Paging,
    va: u64,
) -> ([Option<u64>; LEVELS], Option<u64>) {
    let mut entries = [None; LEVELS];
    let mut table = root & ADDRESS;
    for (level, slot) in entries.iter_mut().enumerate().skip(paging.top_level()) {
        let shift = 12 + 9 * (LEVELS - 1 - level);
        let entry = guest.xp(table + ((va >> shift) & 0x1ff) * 8, 1)[0];
        *slot = Some(entry);
        if entry & 1 == 0 {
            return (entries, None);
        }
        // PS in a PDPTE or PDE maps a 1 GiB or 2 MiB page; a PTE, 4 KiB.
        if level == LEVELS - 1 || (level >= 2 && entry & 0x80 != 0) {
            let offset = (1u64 << shift) - 1;
            return (entries, Some((entry & ADDRESS & !offset) | (va & offset)));
        }
        table = entry & ADDRESS;
    }
    unreachable!("a walk ends at the page tables at the latest")
}

/// Entries as the parameter file writes them: hex, `-` where none.
fn entry_words(entries: &[Option<u64>; LEVELS]) -> String {
    entries
        .iter()
        .map(|e| e.map_or("-".into(), |e| format!("{e:#x}")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The parameter file of the test programs for `guest` (paused).
fn parameters(guest: &Guest) -> String {
    let paging = guest.paging();
    let dtb = guest.kernel_dtb();
    let (text, direct) = (guest.kernel_text(), guest.page_offset_base());
    let mut params = format!(
        "device {}\nlevels {}\ndtb {dtb:#x}\n",
        guest.device_string(),
        paging.levels()
    );
    // Kernel text (in 2 MiB pages), kernel data, the direct map: the
    // kernel's root and its text through it; then the user half of the
    // kernel's tables, empty; an address past 47 bits (canonical in
    // 5-level paging only) and one past 57.
    let text_pa = guest.gva2gpa(text).expect("kernel text is mapped");
    let mapped = [
        text,
        text + 0x12_3458,
        guest.init_top_pgt(),
        direct + dtb + 0x10,
        direct + text_pa + 0x1238,
    ];
    let unmapped = [0x1000, 0x0000_8000_0000_0000, 0x0100_0000_0000_0000];
    for va in mapped.into_iter().chain(unmapped) {
        let (kind, pa, entries) = match paging.is_canonical(va) {
            false => ("noncanonical", 0, [None; LEVELS]),
            true => match monitor_walk(guest, dtb, paging, va) {
                (entries, Some(pa)) => ("ok", pa, entries),
                (entries, None) => ("unmapped", 0, entries),
            },
        };
        if mapped.contains(&va) {
            // The monitor's own translation (through CR3, whose kernel
            // half is the kernel's) agrees with its walk.
            assert_eq!(kind, "ok", "{va:#x} is not mapped: {entries:x?}");
            assert_eq!(guest.gva2gpa(va), Some(pa), "{va:#x}");
        } else {
            assert_ne!(kind, "ok", "{va:#x} is mapped");
        }
        writeln!(
            params,
            "walk {va:#x} {kind} {pa:#x} {}",
            entry_words(&entries)
        )
        .unwrap();
    }
    for task in guest.processes().iter().filter(|t| !t.kernel_thread) {
        writeln!(
            params,
            "user {} {}",
            task.pid,
            c_build::hex(&task.cmdline_bytes)
        )
        .unwrap();
    }
    let pattern = guest.pattern();
    writeln!(params, "pattern {} {:x}", pattern.pid, pattern.start).unwrap();
    params
}

/// Runs both programs on `guest`, paused, and checks the C program's walk
/// of the pattern process against the monitor.
fn programs_find_the_paging_mode(guest: SharedGuest, expected: Paging) {
    // The guest's own mode, per CR4.
    assert_eq!(guest.paging(), expected, "CR4.LA57");
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    c_build::install(&prefix);
    let c = c_build::compile(
        &prefix,
        dir.path(),
        "cc",
        "-std=c11",
        &["paging_test.c", "common.c"].map(|name| c_build::repo().join("ffi/tests/c").join(name)),
        false,
    );
    // Its own folder: a program is named after its first source.
    let cpp_dir = dir.path().join("cpp");
    std::fs::create_dir(&cpp_dir).unwrap();
    let cpp = c_build::compile(
        &prefix,
        &cpp_dir,
        "c++",
        "-std=c++17",
        &[c_build::repo().join("ffi/tests/cpp/paging_test.cpp")],
        false,
    );

    let _paused = guest.pause();
    let params = dir.path().join("params.txt");
    std::fs::write(&params, parameters(&guest)).unwrap();
    let out = c_build::run(c_build::installed_only(Command::new(&c).arg(&params)));
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprint!("paging_test: {stdout}");
    assert!(stdout.contains("checks passed"), "{stdout}");

    // The library's walk of the pattern's first address, from the root it
    // listed for the process: the monitor reads the same entries down that
    // root, and the pattern at its end.
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("pattern-walk "))
        .expect("the C program's pattern-walk line");
    let words: Vec<&str> = line.split_whitespace().collect();
    let number = |w: &str| u64::from_str_radix(w.trim_start_matches("0x"), 16).unwrap();
    let (root, va, pa) = (number(words[0]), number(words[1]), number(words[2]));
    assert_eq!(va, guest.pattern().start);
    let (entries, end) = monitor_walk(&guest, root, expected, va);
    assert_eq!(
        words[3..].join(" "),
        entry_words(&entries),
        "walk of {va:#x}"
    );
    assert_eq!(end, Some(pa), "walk of {va:#x} from {root:#x}");
    assert_eq!(guest.xp(pa, 2), [pattern_word(va), pattern_word(va + 8)]);

    let out = c_build::run(c_build::installed_only(Command::new(&cpp).arg(&params)));
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprint!("paging_test.cpp: {stdout}");
    assert!(stdout.contains("checks passed"), "{stdout}");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)]
fn c_and_cpp_programs_find_4_level_paging_on_the_4_level_guest() {
    programs_find_the_paging_mode(shared_guest(), Paging::FourLevel);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)]
fn c_and_cpp_programs_find_5_level_paging_on_a_la57_guest() {
    programs_find_the_paging_mode(shared_la57_guest(), Paging::FiveLevel);
}
