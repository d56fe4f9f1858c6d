//! The `leechio` binary, run as a user runs it, against a live Linux guest
//! (LeechCore's `qemu://` device), with QEMU's monitor as the oracle:
//! `info registers` (CR3), `info mem` (every mapped range of CR3's address
//! space), `gva2gpa`, `x`, `xp` and `pmemsave`.
//!
//! The guest's memory changes while it runs, so it is paused while the
//! binary reads what is compared. Every run of the binary has a deadline:
//! a hang fails the test instead of stalling the suite.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::elf_tools::{gdb_reads, load_flags, readelf_clean};
use common::qemu::{shared_guest, wait_until_removed, Guest, GuestMemory, DIRECT_MAP};
use leechio::MemoryMap;
use serde_json::Value;

const MIB: u64 = 1 << 20;
const PT_NOTE: u32 = 4;
/// Bits 51..12 of CR3 and of table entries: the physical address.
const ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;
/// First address of the kernel half (4-level paging).
const KERNEL_HALF: u64 = 0xffff_8000_0000_0000;
/// One past the user half.
const USER_END: u64 = 0x0000_8000_0000_0000;
/// How long one run of the binary may take (opening the qemu device alone
/// takes LeechCore 1 s; a loaded machine is slower).
const RUN_LIMIT: Duration = Duration::from_secs(90);

/// What a finished run of the binary gave.
struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Run {
    fn lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
            .collect()
    }

    fn ok(self, what: &str) -> Run {
        assert!(
            self.status.success(),
            "{what}: {}\nstdout: {}\nstderr: {}",
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }
}

fn leechio_command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leechio"));
    command
        .args(args)
        .env_remove("LEECHIO_DEVICE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Waits for `child` until `limit`; kills it and fails the test on
/// timeout. Its output is read on threads, so a full pipe never blocks it.
fn wait_with_deadline(mut child: Child, limit: Duration, what: &str) -> Run {
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} still ran after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Run {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

/// Runs the binary with a deadline.
fn leechio(args: &[&str]) -> Run {
    let child = leechio_command(args).spawn().expect("run leechio");
    wait_with_deadline(child, RUN_LIMIT, &format!("leechio {}", args.join(" ")))
}

/// A clear failure: nonzero exit, a `leechio: ` message, no panic.
fn assert_refused(run: &Run, needles: &[&str]) {
    assert!(
        !run.status.success(),
        "succeeded: {}\n{}",
        run.stdout,
        run.stderr
    );
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    let err = &run.stderr;
    assert!(err.starts_with("leechio: "), "stderr: {err}");
    for needle in needles {
        assert!(err.contains(needle), "stderr lacks {needle:?}: {err}");
    }
    assert!(
        !err.contains("panicked") && !err.contains("internal error"),
        "{err}"
    );
}

fn hex(v: u64) -> String {
    format!("{v:#x}")
}

fn parse_hex(v: &Value) -> u64 {
    let s = v.as_str().unwrap_or_else(|| panic!("not a string: {v}"));
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("{s:?}"))
}

/// Every mapped range of CR3's address space per `info mem`, merged.
fn info_mem(guest: &Guest) -> Vec<(u64, u64)> {
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for (start, size, _) in info_mem_access(guest) {
        merge_into(&mut ranges, start, size);
    }
    ranges
}

/// `info mem` as it says it: (start, size, access) per line, the access
/// `u` or `-` (user), `r`, then `w` or `-` (write), as every level of the
/// walk allows.
fn info_mem_access(guest: &Guest) -> Vec<(u64, u64, String)> {
    let text = guest.hmp("info mem");
    let mut ranges = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        // "ffff888000000000-ffff888000098000 0000000000098000 -rw"
        let words: Vec<&str> = line.split_whitespace().collect();
        let [span, size, access] = words[..] else {
            panic!("info mem: {line:?}");
        };
        let start = u64::from_str_radix(span.split('-').next().unwrap(), 16)
            .unwrap_or_else(|_| panic!("info mem: {line:?}"));
        let size = u64::from_str_radix(size, 16).unwrap_or_else(|_| panic!("info mem: {line:?}"));
        ranges.push((start, size, access.to_string()));
    }
    assert!(!ranges.is_empty(), "info mem: {text}");
    ranges
}

/// `info tlb`: each mapped page's address and whether its last entry has
/// NX set (`X` first in its flags).
fn info_tlb_no_execute(guest: &Guest) -> Vec<(u64, bool)> {
    let text = guest.hmp("info tlb");
    let pages: Vec<(u64, bool)> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            // "ffffffff81000000: 0000000001000000 -GPDA----"
            let words: Vec<&str> = line.split_whitespace().collect();
            let [va, _, flags] = words[..] else {
                panic!("info tlb: {line:?}");
            };
            let va = u64::from_str_radix(va.trim_end_matches(':'), 16)
                .unwrap_or_else(|_| panic!("info tlb: {line:?}"));
            (va, flags.starts_with('X'))
        })
        .collect();
    assert!(!pages.is_empty(), "info tlb: {text}");
    pages
}

/// Appends `start..start+size` to sorted ranges, merging with the last.
fn merge_into(ranges: &mut Vec<(u64, u64)>, start: u64, size: u64) {
    if let Some(last) = ranges.last_mut() {
        assert!(
            start >= last.0 + last.1,
            "ranges out of order at {start:#x}"
        );
        if last.0 + last.1 == start {
            last.1 += size;
            return;
        }
    }
    ranges.push((start, size));
}

/// The parts of `ranges` inside `lo..hi`.
fn clip(ranges: &[(u64, u64)], lo: u64, hi: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &(start, size) in ranges {
        // `start + size` can be 2^64 for the last page.
        let end = start.saturating_add(size);
        let (s, e) = (start.max(lo), end.min(hi));
        if s < e {
            merge_into(&mut out, s, e - s);
        }
    }
    out
}

fn total(ranges: &[(u64, u64)]) -> u64 {
    ranges.iter().map(|r| r.1).sum()
}

/// The monitor translates through CR3: check that CR3's top table has the
/// same kernel half as the kernel's own table (per `xp`), so the monitor's
/// answers for kernel addresses are about `kernel_dtb`'s tables.
fn assert_monitor_walks_the_kernel_tables(guest: &Guest) {
    let cr3 = guest.cr3() & ADDR_MASK;
    assert_eq!(
        guest.xp(cr3 + 0x800, 256),
        guest.xp(guest.kernel_dtb() + 0x800, 256),
        "CR3 {cr3:#x} does not share the kernel half of init_top_pgt at {:#x}",
        guest.kernel_dtb()
    );
}

/// (type, offset, vaddr, paddr, filesz) of each program header but the
/// `PT_NOTE` (a dump of a Linux guest has its VMCOREINFO note).
fn program_headers(elf: &[u8]) -> Vec<(u32, u64, u64, u64, u64)> {
    assert!(elf.len() >= 64, "{} bytes are no ELF file", elf.len());
    assert_eq!(&elf[..4], b"\x7fELF");
    assert_eq!(elf[4], 2, "ELFCLASS64");
    assert_eq!(u16::from_le_bytes([elf[16], elf[17]]), 4, "ET_CORE");
    assert_eq!(u16::from_le_bytes([elf[18], elf[19]]), 62, "EM_X86_64");
    let phoff = u64::from_le_bytes(elf[32..40].try_into().unwrap()) as usize;
    assert_eq!(u16::from_le_bytes([elf[54], elf[55]]), 56, "e_phentsize");
    let phnum = u16::from_le_bytes([elf[56], elf[57]]) as usize;
    assert!(
        phoff + phnum * 56 <= elf.len(),
        "program headers past the end"
    );
    (0..phnum)
        .map(|i| &elf[phoff + i * 56..phoff + (i + 1) * 56])
        .filter(|h| u32::from_le_bytes(h[..4].try_into().unwrap()) != PT_NOTE)
        .map(|h| {
            let word = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().unwrap());
            assert_eq!(word(32), word(40), "filesz != memsz");
            let (offset, size) = (word(8), word(32));
            assert!(
                offset + size <= elf.len() as u64,
                "a PT_LOAD runs past the end of the file"
            );
            (
                u32::from_le_bytes(h[..4].try_into().unwrap()),
                offset,
                word(16),
                word(24),
                size,
            )
        })
        .collect()
}

/// Panics at the first byte where `got` differs from `want`.
fn assert_same_bytes(addr: u64, got: &[u8], want: &[u8]) {
    assert_eq!(got.len(), want.len(), "lengths at {addr:#x}");
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "byte at {:#x} differs: dump {:#04x}, monitor {:#04x}",
            addr + i as u64,
            got[i],
            want[i]
        );
    }
}

/// Checks a dump's segment of physical memory `pa..pa+data.len()`
/// against the monitor, where it is RAM per QEMU's map: RAM must equal
/// `pmemsave` (a segment shows only bytes that were read). Returns the
/// bytes of RAM compared.
fn check_segment(guest: &Guest, ram: &MemoryMap, pa: u64, data: &[u8]) -> u64 {
    let mut compared = 0;
    let len = data.len() as u64;
    for r in ram.ranges() {
        let (s, e) = (r.start.max(pa), r.end().min(pa + len));
        if s >= e {
            continue;
        }
        let got = &data[(s - pa) as usize..(e - pa) as usize];
        assert_same_bytes(s, got, &guest.pmemsave(s, e - s));
        compared += e - s;
    }
    compared
}

/// The `.failed` sidecar: (start, end) of each listed range.
fn failed_list(output: &Path) -> Vec<(u64, u64)> {
    let path = format!("{}.failed", output.display());
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut lines = text.lines();
    assert!(
        lines.next().is_some_and(|l| l.starts_with('#')),
        "no header in {path}: {text}"
    );
    lines
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert!(w.len() >= 3, "{path}: {l:?}");
            let n = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
            (n(w[0]), n(w[1]))
        })
        .collect()
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn spaces_lists_the_cpus_cr3_the_kernels_table_and_the_user_processes() {
    let guest = shared_guest();
    let device = guest.device_string();
    let _paused = guest.pause();
    let cr3 = guest.cr3() & ADDR_MASK;
    let kernel_dtb = guest.kernel_dtb();
    let run = leechio(&["-d", &device, "spaces", "--json"]).ok("spaces");
    let found = run.lines();
    let dtbs: Vec<u64> = found.iter().map(|c| parse_hex(&c["dtb"])).collect();
    let position = |dtb: u64| -> usize {
        dtbs.iter().position(|&d| d == dtb).unwrap_or_else(|| {
            panic!(
                "spaces does not list {dtb:#x} (CR3 {cr3:#x}, kernel {kernel_dtb:#x}); \
                 it lists {dtbs:x?}"
            )
        })
    };

    // Per the monitor: the kernel half of each listed table, and of CR3's.
    let half = |dtb: u64| guest.xp(dtb + 0x800, 256);
    let cr3_half = half(cr3);
    let halves: Vec<Vec<u64>> = dtbs.iter().map(|&d| half(d)).collect();
    let sharing_with_cr3: Vec<usize> = (0..dtbs.len()).filter(|&i| halves[i] == cr3_half).collect();

    // The kernel's own table: no user half, and the kernel entries the
    // monitor reads.
    let kernel = &found[position(kernel_dtb)];
    let top = guest.xp(kernel_dtb, 512);
    let present = |words: &[u64]| words.iter().filter(|&&e| e != 0).count() as u64;
    assert_eq!(kernel["user_entries"], present(&top[..256]), "{kernel}");
    assert_eq!(kernel["kernel_entries"], present(&top[256..]), "{kernel}");
    assert_eq!(kernel["user_mapped"], 0, "{kernel}");

    // CR3's table: listed, with the sizes `info mem` gives for it, and
    // sharing its kernel half with exactly the tables the monitor says do.
    let current = &found[position(cr3)];
    let mapped = info_mem(&guest);
    assert_eq!(
        current["user_mapped"],
        total(&clip(&mapped, 0, USER_END)),
        "{current}"
    );
    assert_eq!(
        current["kernel_mapped"],
        total(&clip(&mapped, KERNEL_HALF, u64::MAX)),
        "{current}"
    );
    assert_eq!(
        current["sharing_kernel_half"],
        sharing_with_cr3.len() as u64 - 1,
        "{current}"
    );
    assert_eq!(
        cr3_half,
        half(kernel_dtb),
        "with pti=off, CR3 shares the kernel's kernel half"
    );

    // The guest's user processes (its /init shell and the `sleep` it runs):
    // tables sharing CR3's kernel half whose lowest user page holds a
    // program's ELF header, per the monitor. (That leaves out the kernel's
    // real-mode trampoline table, whose user half maps low RAM.)
    let processes: Vec<usize> = sharing_with_cr3
        .iter()
        .copied()
        .filter(|&i| {
            lowest_user_page(&guest, dtbs[i], 0)
                .is_some_and(|pa| guest.xp(pa, 1)[0] as u32 == u32::from_le_bytes(*b"\x7fELF"))
        })
        .collect();
    eprintln!(
        "CR3 {cr3:#x}, kernel {kernel_dtb:#x}, processes {:x?}",
        processes.iter().map(|&i| dtbs[i]).collect::<Vec<_>>()
    );
    assert!(
        processes.len() >= 2,
        "user processes found: {:x?}; spaces listed: {}",
        processes.iter().map(|&i| dtbs[i]).collect::<Vec<_>>(),
        run.stdout
    );
    for &i in &processes {
        assert!(
            found[i]["user_mapped"].as_u64().unwrap() > 0,
            "{}",
            found[i]
        );
        assert!(
            found[i]["user_entries"].as_u64().unwrap() > 0,
            "{}",
            found[i]
        );
    }
    if cr3 != kernel_dtb {
        assert!(
            processes.iter().any(|&i| dtbs[i] == cr3),
            "CR3 {cr3:#x} is no process"
        );
    }
}

/// Physical address of the lowest mapped page of the user half of the
/// table at `table` (of `level`), per the monitor's `xp`.
fn lowest_user_page(guest: &Guest, table: u64, level: usize) -> Option<u64> {
    let entries = guest.xp(table, 512);
    let indices = if level == 0 { 0..256 } else { 0..512 };
    for &e in &entries[indices] {
        if e & 1 == 0 {
            continue;
        }
        let leaf = level == 3 || (level > 0 && e & 0x80 != 0);
        if leaf {
            let size: u64 = [0, 1 << 30, 2 << 20, 4096][level];
            return Some(e & ADDR_MASK & !(size - 1));
        }
        if let Some(pa) = lowest_user_page(guest, e & ADDR_MASK, level + 1) {
            return Some(pa);
        }
    }
    None
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn translate_gives_the_monitors_translation_and_null_for_unmapped_addresses() {
    let guest = shared_guest();
    let device = guest.device_string();
    let dtb = hex(guest.kernel_dtb());
    let _paused = guest.pause();
    assert_monitor_walks_the_kernel_tables(&guest);
    // A 4 KiB-mapped vmalloc address, per the monitor.
    let vmalloc = clip(
        &info_mem(&guest),
        0xffff_c900_0000_0000,
        0xffff_e900_0000_0000,
    )[0]
    .0;
    let mapped = [
        guest.kernel_text(),
        guest.kernel_text() + 0x12_3456,
        guest.init_top_pgt() + 0x8,
        DIRECT_MAP,
        DIRECT_MAP + 0x100_0000 + 0x10,
        DIRECT_MAP + 0xa_0ff8,
        vmalloc + 0x18,
    ];
    let unmapped = [0xffff_c880_0000_0000, 0x8000_0000_0000_0000, 0x10];
    for &va in &unmapped {
        assert_eq!(guest.gva2gpa(va), None, "{va:#x} is mapped");
    }

    let check = |lines: &[Value], vas: &[u64]| {
        assert_eq!(lines.len(), vas.len(), "{lines:?}");
        let mut sizes = Vec::new();
        for (line, &va) in lines.iter().zip(vas) {
            assert_eq!(line["va"], hex(va), "{line}");
            let (entries, found) = guest.xp_walk(guest.kernel_dtb(), va);
            let size = found.map(|(_, size)| size.bytes());
            match guest.gva2gpa(va) {
                Some(pa) => {
                    assert_eq!(line["pa"], hex(pa), "{line}");
                    assert!(line["error"].is_null(), "{line}");
                    assert_eq!(line["page_size"].as_u64(), size, "{line}");
                    assert_eq!(line["paging"], 4, "{line}");
                    let want: Vec<Value> = entries[1..]
                        .iter()
                        .map(|e| e.map_or(Value::Null, |e| hex(e).into()))
                        .collect();
                    assert_eq!(line["entries"], Value::Array(want), "{line}");
                    sizes.push(size.unwrap());
                }
                None => {
                    assert!(line["pa"].is_null(), "{line}");
                    assert!(line["page_size"].is_null(), "{line}");
                    assert!(!line["error"].as_str().unwrap().is_empty(), "{line}");
                }
            }
        }
        sizes
    };

    let args = |vas: &[u64]| -> Vec<String> {
        let mut a: Vec<String> = ["-d", &device, "translate", "--dtb", &dtb, "--json"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.extend(vas.iter().map(|&va| hex(va)));
        a
    };
    let a = args(&mapped);
    let run = leechio(&a.iter().map(String::as_str).collect::<Vec<_>>()).ok("translate");
    let sizes = check(&run.lines(), &mapped);
    assert!(
        sizes.contains(&4096) && sizes.contains(&(2 << 20)),
        "page sizes {sizes:?}"
    );

    // Unmapped and non-canonical addresses among mapped ones: null, an
    // error each, the rest translated, and a nonzero exit.
    let mixed = [mapped[0], unmapped[0], mapped[4], unmapped[1], unmapped[2]];
    let a = args(&mixed);
    let run = leechio(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    let lines = run.lines();
    check(&lines[..3], &mixed[..3]);
    for line in &lines[3..] {
        assert!(line["pa"].is_null(), "{line}");
        assert!(!line["error"].as_str().unwrap().is_empty(), "{line}");
    }
    assert!(
        lines[3]["error"].as_str().unwrap().contains("canonical"),
        "{}",
        lines[3]
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn read_shows_the_monitors_bytes_and_question_marks_where_unmapped() {
    let guest = shared_guest();
    let device = guest.device_string();
    let dtb = hex(guest.kernel_dtb());
    let _paused = guest.pause();
    assert_monitor_walks_the_kernel_tables(&guest);
    let bytes_of = |words: Vec<u64>| -> String {
        words
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .map(|b| format!("{b:02x}"))
            .collect()
    };

    // Virtual, across a page boundary of the kernel text.
    let va = guest.kernel_text() + 0x3000 - 0x18;
    let run = leechio(&[
        "-d",
        &device,
        "read",
        "--dtb",
        &dtb,
        &hex(va),
        "0x40",
        "--json",
    ])
    .ok("virtual read");
    let line = &run.lines()[0];
    assert_eq!(line["data"], bytes_of(guest.x(va, 8).unwrap()), "{line}");

    // Physical.
    let pa = 0x100_0000 + 0x7f8;
    let run = leechio(&["-d", &device, "read", &hex(pa), "48", "--json"]).ok("physical read");
    assert_eq!(run.lines()[0]["data"], bytes_of(guest.xp(pa, 6)));

    // Half mapped: the direct map's last page, then the hole after it.
    let end = info_mem(&guest)
        .iter()
        .find(|&&(s, size)| (s..s + size).contains(&DIRECT_MAP))
        .map(|&(s, size)| s + size)
        .unwrap();
    assert_eq!(guest.gva2gpa(end), None);
    let va = end - 16;
    let run = leechio(&[
        "-d",
        &device,
        "read",
        "--dtb",
        &dtb,
        &hex(va),
        "32",
        "--json",
    ]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    let want = format!("{}{}", bytes_of(guest.x(va, 2).unwrap()), "??".repeat(16));
    assert_eq!(run.lines()[0]["data"], want);
    assert!(run.stderr.contains("unreadable"), "{}", run.stderr);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);

    // A range past the end of the guest's RAM.
    let ram = guest.memory().bytes();
    assert_refused(
        &leechio(&[
            "-d",
            &device,
            "dump",
            "-o",
            "/tmp/leechio-never-written.elf",
            "--range",
            &format!("{:#x}-{:#x}", ram + MIB, ram + 2 * MIB),
        ]),
        &["past the end"],
    );
}

/// `leechio dump --dtb` of the kernel's own tables over `range`
/// (`START-END`) of `guest` into `out`: its JSON summary and its stderr.
fn dump_kernel_tables(guest: &Guest, out: &Path, range: &str) -> (Value, String) {
    let run = leechio(&[
        "-d",
        &guest.device_string(),
        "dump",
        "-o",
        out.to_str().unwrap(),
        "--dtb",
        &hex(guest.kernel_dtb()),
        "--range",
        range,
        "--json",
    ])
    .ok("dump");
    (serde_json::from_str(run.stdout.trim()).unwrap(), run.stderr)
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_dump_of_64_mib_of_the_direct_map_holds_the_monitors_bytes() {
    let guest = shared_guest();
    let ram = guest.ram_map();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("direct.elf");
    let (lo, hi) = (DIRECT_MAP, DIRECT_MAP + 64 * MIB);
    let _paused = guest.pause();
    assert_monitor_walks_the_kernel_tables(&guest);
    let (summary, _) = dump_kernel_tables(&guest, &out, &format!("{lo:#x}-{hi:#x}"));
    assert_eq!(summary["interrupted"], false, "{summary}");

    let elf = std::fs::read(&out).unwrap();
    let loads = program_headers(&elf);
    assert!(loads.iter().all(|l| l.0 == 1), "{loads:x?}");
    readelf_clean(&out);
    let failed = failed_list(&out);
    // The segments and the failed ranges are exactly what the monitor
    // lists as mapped there; no segment shows a byte that failed.
    let mut covered = Vec::new();
    let mut spans: Vec<(u64, u64)> = loads.iter().map(|l| (l.2, l.4)).collect();
    spans.extend(failed.iter().map(|&(s, e)| (s, e - s)));
    spans.sort_unstable();
    for &(vaddr, size) in &spans {
        merge_into(&mut covered, vaddr, size);
    }
    assert_eq!(covered, clip(&info_mem(&guest), lo, hi));
    for &(_, _, vaddr, paddr, size) in &loads {
        assert_eq!(
            vaddr - DIRECT_MAP,
            paddr,
            "the direct map maps {vaddr:#x} to {paddr:#x}"
        );
        for &(s, e) in &failed {
            assert!(
                e <= vaddr || vaddr + size <= s,
                "a PT_LOAD over failed {s:#x}..{e:#x}"
            );
        }
    }
    // "bytes" is what was read: every byte the segments show.
    let shown: u64 = loads.iter().map(|l| l.4).sum();
    assert_eq!(summary["bytes"].as_u64(), Some(shown), "{summary}");
    assert_eq!(summary["failed_ranges"], failed.len() as u64, "{summary}");
    assert_eq!(summary["failed_bytes"], total_failed(&failed), "{summary}");
    assert!(!failed.is_empty(), "ROM and holes below 1 MiB fail");

    // The bytes: RAM equals pmemsave.
    let mut compared = 0;
    for &(_, offset, _, paddr, size) in &loads {
        let data = &elf[offset as usize..(offset + size) as usize];
        compared += check_segment(&guest, &ram, paddr, data);
    }
    for &(s, e) in &failed {
        // Only what is not RAM may fail (ROM and holes below 1 MiB here).
        let pa = s - DIRECT_MAP;
        assert!(
            ram.find(pa).is_none() && ram.find(e - 1 - DIRECT_MAP).is_none(),
            "RAM at {pa:#x} failed"
        );
    }
    // The kernel's text (physical 16 MiB) was among the bytes compared.
    assert!(covered
        .iter()
        .any(|&(s, size)| s <= DIRECT_MAP + 0x100_0000 && DIRECT_MAP + 0x120_0000 <= s + size));
    assert!(compared > 60 * MIB, "only {compared:#x} bytes compared");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_dump_of_the_kernel_half_holds_aliased_memory_once_with_the_tables_permissions_for_gdb() {
    let guest = shared_guest();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("kernel.elf");
    let _paused = guest.pause();
    assert_monitor_walks_the_kernel_tables(&guest);
    let range = format!("{KERNEL_HALF:#x}-0x10000000000000000");
    let (summary, stderr) = dump_kernel_tables(&guest, &out, &range);
    readelf_clean(&out);
    let elf = std::fs::read(&out).unwrap();
    let loads = program_headers(&elf);
    let flags = load_flags(&elf);
    assert_eq!(loads.len(), flags.len());

    // The kernel's image is mapped twice (its text mapping and the direct
    // map), vmalloc'd pages are in the direct map too, and espfix maps one
    // page thousands of times: each is written once, so the file is no
    // larger than the RAM (espfix's aliases are left out, and said so).
    let ram = guest.memory().bytes();
    assert!(
        (elf.len() as u64) < ram + 4 * MIB,
        "{} bytes for {ram} of RAM",
        elf.len()
    );
    assert!(stderr.contains("left out"), "{stderr}");
    let text = guest.kernel_text();
    let containing = |va: u64| {
        loads
            .iter()
            .copied()
            .find(|l| l.2 <= va && va < l.2 + l.4)
            .unwrap_or_else(|| panic!("no segment holds {va:#x}"))
    };
    let t = containing(text);
    let text_pa = t.3 + (text - t.2);
    let d = containing(DIRECT_MAP + text_pa);
    assert_eq!(
        t.1 + (text - t.2),
        d.1 + (text_pa - d.3),
        "the text mapping shares the direct map's bytes"
    );
    assert!(
        summary["ranges"].as_u64() == Some(loads.len() as u64),
        "{summary}"
    );

    // Permissions as the monitor sees them: writable per `info mem`
    // (every level's R/W), executable per `info tlb` (the last entry's NX;
    // Linux sets NX on last entries only).
    let mut checked = [0usize; 2];
    for (start, size, access) in info_mem_access(&guest) {
        let end = start.saturating_add(size);
        for (l, f) in loads.iter().zip(&flags) {
            if l.2 < end && start < l.2 + l.4 {
                assert_eq!(
                    f.contains('W'),
                    access.ends_with('w'),
                    "{:#x}: {f:?}, but info mem says {access} for {start:#x}..{end:#x}",
                    l.2
                );
                checked[0] += 1;
            }
        }
    }
    for (va, no_execute) in info_tlb_no_execute(&guest) {
        if va < KERNEL_HALF {
            continue;
        }
        let i = loads.partition_point(|l| l.2 + l.4 <= va);
        if let Some(l) = loads.get(i).filter(|l| l.2 <= va) {
            assert_eq!(
                flags[i].contains('E'),
                !no_execute,
                "{va:#x} in {:#x}: {:?}, but info tlb says NX {no_execute}",
                l.2,
                flags[i]
            );
            checked[1] += 1;
        }
    }
    assert!(
        flags.iter().any(|f| f == "R E") && flags.iter().any(|f| f == "R"),
        "{flags:?}"
    );
    assert!(checked[0] > 100 && checked[1] > 1000, "{checked:?}");

    // gdb reads the bytes at their virtual addresses as the monitor's `x`
    // does: kernel text, the direct map, and the first vmalloc'd segment.
    let vmalloc = loads
        .iter()
        .find(|l| l.2 >= 0xffff_c900_0000_0000)
        .expect("vmalloc'd memory")
        .2;
    let vas = [text, text + 0x1234, DIRECT_MAP + 0x100_0000, vmalloc];
    let reads: Vec<(u64, usize)> = vas.iter().map(|&va| (va, 64)).collect();
    for (&va, got) in vas.iter().zip(gdb_reads(&out, &reads)) {
        let want: Vec<u8> = guest
            .x(va, 8)
            .unwrap_or_else(|| panic!("the monitor reads {va:#x}"))
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        assert_eq!(got, Some(want), "gdb at {va:#x}");
    }
}

fn total_failed(failed: &[(u64, u64)]) -> u64 {
    failed.iter().map(|(s, e)| e - s).sum()
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn ctrl_c_or_sigterm_leaves_a_valid_elf_of_what_was_read() {
    let guest = shared_guest();
    // 50 ms per device call and 4 MiB per call: 256 MiB take over 3 s.
    let slow = guest.device_string_with_delays(50_000_000, 0);
    let ram = guest.ram_map();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ram.elf");
    // Paused throughout: everything the dump holds can be compared.
    let _paused = guest.pause();
    for (signal, code) in [("-INT", 130), ("-TERM", 143)] {
        dump_until_signalled(&guest, &slow, &ram, &out, signal, code);
    }
}

/// Dumps the RAM of `guest` through `device` to `out`, sends `signal`
/// (`kill`'s spelling) once the kernel's text is in the file, and checks
/// that the dump ends with `code` and a valid ELF file of what was read.
fn dump_until_signalled(
    guest: &Guest,
    slow: &str,
    ram: &leechio::MemoryMap,
    out: &Path,
    signal: &str,
    code: i32,
) {
    // A new file: the size of the last one would say nothing.
    let _ = std::fs::remove_file(out);
    let child = leechio_command(&["-d", slow, "dump", "-o", out.to_str().unwrap(), "--json"])
        .spawn()
        .expect("run leechio");
    let pid = child.id();

    // Interrupt once the kernel's text (physical 16 MiB + 2 MiB) is in the
    // file: its data starts a page after the headers, at about its
    // physical address. Counted in the blocks the file holds, not its
    // length: the dump sizes the file sparsely to its full length for a
    // moment (to learn whether the file system can hold it) before it
    // empties it and writes.
    let want = 0x1000 + 0x120_0000;
    let deadline = Instant::now() + RUN_LIMIT;
    let mut child = Some(child);
    loop {
        let size = std::fs::metadata(out)
            .map(|m| m.blocks() * 512)
            .unwrap_or(0);
        if size >= want {
            break;
        }
        if let Some(status) = child.as_mut().unwrap().try_wait().unwrap() {
            let run = wait_with_deadline(child.take().unwrap(), RUN_LIMIT, "dump");
            panic!(
                "the dump ended ({status}) before it was interrupted: {}",
                run.stderr
            );
        }
        assert!(
            Instant::now() < deadline,
            "the dump wrote {size} bytes in {RUN_LIMIT:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let sent = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let run = wait_with_deadline(child.take().unwrap(), RUN_LIMIT, "the interrupted dump");
    assert_eq!(
        run.status.code(),
        Some(code),
        "{}\n{}",
        run.stdout,
        run.stderr
    );
    let summary: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(summary["interrupted"], true, "{summary}");

    let elf = std::fs::read(out).unwrap();
    let loads = program_headers(&elf);
    let dumped: u64 = loads.iter().map(|l| l.4).sum();
    assert!(
        dumped > 0 && dumped < ram.total_size(),
        "{dumped:#x} of {:#x} bytes",
        ram.total_size()
    );
    assert_eq!(summary["bytes"].as_u64(), Some(dumped), "{summary}");
    let failed = failed_list(out);
    let mut compared = 0;
    let mut end = 0;
    for &(kind, offset, vaddr, paddr, size) in &loads {
        // At its direct-map address, as kdump writes it: the kernel was
        // found (for the VMCOREINFO note).
        assert_eq!((kind, vaddr), (1, DIRECT_MAP + paddr), "physical segments");
        assert!(paddr >= end, "segments out of order");
        end = paddr + size;
        for &(s, e) in &failed {
            assert!(
                e <= paddr || end <= s,
                "a PT_LOAD over failed {s:#x}..{e:#x}"
            );
        }
        let data = &elf[offset as usize..(offset + size) as usize];
        compared += check_segment(guest, ram, paddr, data);
    }
    // What was read is a prefix of RAM that holds the kernel's text.
    assert!(end >= 0x120_0000, "the dump stops at {end:#x}");
    assert!(compared >= 0x100_0000, "only {compared:#x} bytes compared");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_dead_guest_gives_a_clear_error_and_never_hangs() {
    let guest = Guest::start(GuestMemory::Mib256);
    let device = guest.device_string();
    let shm = guest.shm_path().to_path_buf();
    guest.kill();

    // At once: QEMU is gone; its RAM file may still be there for a moment.
    // Whatever LeechCore makes of it, the binary ends in time, and a
    // failure reads as a message.
    let run = leechio(&["-d", &device, "info"]);
    eprintln!(
        "`info` right after the kill: {}, {}",
        run.status,
        run.stderr.trim()
    );
    if !run.status.success() {
        assert_refused(&run, &[]);
    }

    // Once the guest's script has removed the RAM file: a clear refusal,
    // naming the file, for every command that opens the device.
    wait_until_removed(&shm);
    let file = shm.display().to_string();
    for args in [
        vec!["-d", &device, "info"],
        vec!["-d", &device, "info", "--json"],
        vec!["-d", &device, "read", "0x1000", "8"],
        vec!["-d", &device, "spaces"],
    ] {
        assert_refused(&leechio(&args), &["could not open device", &file]);
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_guest_dying_during_a_dump_or_a_scan_fails_them() {
    let guest = Guest::start(GuestMemory::Mib256);
    // 100 ms per device call: the dump (4 MiB a call) and the scan take
    // seconds.
    let slow = guest.device_string_with_delays(100_000_000, 0);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ram.elf");
    let dump = leechio_command(&["-d", &slow, "dump", "-o", out.to_str().unwrap()])
        .spawn()
        .expect("run leechio");
    let scan = leechio_command(&["-d", &slow, "spaces"])
        .spawn()
        .expect("run leechio");
    // Killed once the dump has read a few calls' worth.
    let deadline = Instant::now() + RUN_LIMIT;
    while std::fs::metadata(&out).map_or(0, |m| m.len()) < 0x100_0000 {
        assert!(Instant::now() < deadline, "the dump wrote nothing");
        std::thread::sleep(Duration::from_millis(5));
    }
    guest.kill();
    for (child, what, needle) in [
        (dump, "the dump", "the target went away during the dump"),
        (scan, "the scan", "the target went away during the scan"),
    ] {
        let run = wait_with_deadline(child, RUN_LIMIT, what);
        assert_eq!(run.status.code(), Some(1), "{what}: {}", run.stderr);
        assert!(run.stderr.contains(needle), "{what}: {}", run.stderr);
    }
    // The dump stopped where the target went: far short of 256 MiB.
    let elf = std::fs::read(&out).unwrap();
    let dumped: u64 = program_headers(&elf).iter().map(|l| l.4).sum();
    assert!(
        dumped < 0x1000_0000 - 0x100_0000,
        "{dumped:#x} bytes dumped"
    );
}

/// Removes the given files on drop, whatever happens to the test.
struct RemoveOnDrop(Vec<std::path::PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// QEMU leaves a `mem-path` RAM file it was given where it is when it dies
/// (here the guest script removes it; a guest started by hand keeps it).
/// The guest is dead all the same: no QEMU, no QMP socket, memory frozen.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_dead_guests_leftover_ram_file_is_not_taken_for_a_live_guest() {
    let guest = Guest::start(GuestMemory::Mib256);
    let device = guest.device_string();
    let shm = guest.shm_path().to_path_buf();
    let kept = shm.with_file_name(format!(
        "{}-kept",
        shm.file_name().unwrap().to_string_lossy()
    ));
    let _cleanup = RemoveOnDrop(vec![kept.clone(), shm.clone()]);
    std::fs::hard_link(&shm, &kept).unwrap();
    guest.kill();
    wait_until_removed(&shm);
    // The RAM file is back where the device string says, QEMU is not.
    std::fs::hard_link(&kept, &shm).unwrap();
    assert!(!guest.is_alive());
    for args in [
        vec!["-d", &device, "info"],
        vec!["-d", &device, "read", "0x1000000", "8"],
    ] {
        assert_refused(&leechio(&args), &[]);
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn the_command_line_shows_the_librarys_warnings_and_with_v_its_notes() {
    let guest = common::qmp_monitor::guest(Default::default());
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_leechio"))
            .args(["-d", &guest.device])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // No QEMU process serves the RAM file here, only the stand-in monitor:
    // the library warns that a dying guest would go unnoticed.
    let quiet = run(&["info"]);
    assert!(
        quiet.contains("leechio: warning: no QEMU visible for /dev/shm/"),
        "{quiet}"
    );
    assert!(!quiet.contains("using QEMU's"), "{quiet}");
    // LeechCore got the map cut short, which is put right: a note, with -v.
    let verbose = run(&["-v", "info"]);
    assert!(verbose.contains("is not QEMU's; using QEMU's"), "{verbose}");
}

/// On a CPU with 5-level paging on (and KASLR), with no `--paging`:
/// `translate` finds the mode in the tables and gives the monitor's
/// translation with the five entries its own walk reads, for kernel
/// addresses through the kernel's table and a user address through the
/// pattern process's; `read --dtb` the process's own bytes; `dump --dtb`
/// of the kernel text the monitor's bytes at the monitor's addresses.
/// (Read as 4 levels, each of these would be wrong: see the vm tests.)
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn with_5_level_paging_translate_read_and_dump_follow_the_cpus_tables() {
    let guest = common::qemu::shared_la57_guest();
    let device = guest.device_string();
    let _paused = guest.pause();
    assert_monitor_walks_the_kernel_tables(&guest);
    let kernel = guest.kernel_dtb();
    let text = guest.kernel_text();
    let direct = guest.page_offset_base();
    let check = |dtb: u64, vas: &[u64]| {
        let mut args = vec!["-d".to_string(), device.clone(), "translate".into()];
        args.extend(["--json".into(), "--dtb".into(), hex(dtb)]);
        args.extend(vas.iter().map(|&va| hex(va)));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = leechio(&args);
        let lines = run.lines();
        assert_eq!(lines.len(), vas.len(), "{}", run.stderr);
        for (line, &va) in lines.iter().zip(vas) {
            assert_eq!(line["paging"], 5, "{line}");
            let (entries, found) = guest.xp_walk(dtb, va);
            match found {
                Some((pa, size)) => {
                    assert_eq!(line["pa"], hex(pa), "{line}");
                    assert_eq!(line["page_size"], size.bytes(), "{line}");
                    let want: Vec<Value> = entries
                        .iter()
                        .map(|e| e.map_or(Value::Null, |e| hex(e).into()))
                        .collect();
                    assert_eq!(line["entries"], Value::Array(want), "{line}");
                }
                None => assert!(line["pa"].is_null(), "{line}"),
            }
        }
        run.status.success()
    };
    let kernel_vas = [text, text + 0x12_3456, direct + kernel, direct + 0x100_0010];
    for &va in &kernel_vas {
        assert_eq!(guest.xp_walk(kernel, va).1.map(|f| f.0), guest.gva2gpa(va));
    }
    assert!(check(kernel, &kernel_vas));
    // Not mapped (a PML5 slot of the kernel half Linux leaves empty), and
    // canonical only with 5 levels.
    assert_eq!(guest.gva2gpa(0xff00_0000_0000_0000), None);
    assert!(!check(kernel, &[0xff00_0000_0000_0000]));

    // The pattern process, through its own table (from `ps`).
    let pattern = guest.pattern();
    let ps = leechio(&["-d", &device, "ps", "--json", "--no-cache"]).ok("ps");
    let line = ps
        .lines()
        .into_iter()
        .find(|l| l["pid"] == pattern.pid)
        .expect("the pattern process");
    let dtb = parse_hex(&line["dtb"]);
    assert!(check(dtb, &[pattern.start, pattern.start + 0x1008]));
    let read = leechio(&[
        "-d",
        &device,
        "read",
        "--json",
        "--dtb",
        &hex(dtb),
        &hex(pattern.start),
        "64",
    ])
    .ok("read");
    let want: String = pattern
        .bytes(pattern.start, 64)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(read.lines()[0]["data"], want);

    // The first 2 MiB of the kernel text, dumped through the kernel's table.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("text.elf");
    let range = format!("{}-{}", hex(text), hex(text + (2 << 20)));
    leechio(&[
        "-d",
        &device,
        "dump",
        "--no-cache",
        "--dtb",
        &hex(kernel),
        "--range",
        &range,
        "-o",
        path.to_str().unwrap(),
    ])
    .ok("dump --dtb");
    let elf = std::fs::read(&path).unwrap();
    let loads: Vec<_> = program_headers(&elf)
        .into_iter()
        .filter(|h| h.0 == 1)
        .collect();
    assert_eq!(
        loads.iter().map(|h| h.4).sum::<u64>(),
        2 << 20,
        "{loads:x?}"
    );
    for &(_, offset, vaddr, paddr, size) in &loads {
        assert_eq!(guest.gva2gpa(vaddr), Some(paddr), "{vaddr:#x}");
        let bytes = &elf[offset as usize..(offset + size) as usize];
        assert!(bytes == guest.pmemsave(paddr, size), "{vaddr:#x}+{size:#x}");
    }
}
