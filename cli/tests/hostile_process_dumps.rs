//! Process dumps of a crafted image of the test guest: its pattern
//! process's memory maps replaced by three VMAs (its read-write half as it
//! is; 4 GiB whose 2^20 page-table entries all map one frame, the half's
//! first; 15 TiB with nothing mapped), the new tables and maple node in
//! memory appended to the guest's RAM. `dump --pid` must finish within
//! seconds and a memory cap, write the frame once however often it is
//! mapped, read nothing for the holes, and say what it left out, as
//! docs/forensics.md states.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use common::bounded::{assert_clean, run_bounded, Run};
use common::elf_tools::{gdb_reads, readelf_clean};
use common::linux::{engine, no_cache};
use common::qemu::shared_guest;
use leechio::linux::Kernel;
use leechio::{AddressSpace, DeviceConfig, LeechCore};
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;
const PAGE: u64 = 0x1000;
/// Present, writable, user: a user page or table.
const USER_RW: u64 = 0x7;
/// The VMA of 4 GiB whose every page maps one frame: PML4 entry 16.
const MANY_START: u64 = 0x0800_0000_0000;
const MANY_PAGES: u64 = 1 << 20;
/// The VMA of 15 TiB with nothing mapped: PML4 entries 192 to 221.
const HOLES_START: u64 = 0x6000_0000_0000;
const HOLES_LEN: u64 = 15 << 40;
/// Memory appended to the guest's RAM for the crafted tables and VMAs.
const ROOM: u64 = 16 * MIB;
/// Time and memory a dump must stay within (a debug build on a loaded
/// 2-core machine; the old dump, which walked each VMA 4 MiB at a time,
/// wrote 4 GiB for the first and read for hours for the second).
const DEADLINE: Duration = Duration::from_secs(60);
const MEMORY_CAP_KIB: i64 = 256 << 10;
const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;

/// The crafted image and what it holds.
struct Crafted {
    _dir: tempfile::TempDir,
    path: PathBuf,
    /// Bytes of the image: the target's RAM.
    size: u64,
    /// The pattern process.
    pid: u32,
    /// Its read-write half, a VMA kept as it is.
    rw: Range<u64>,
    /// The bytes of the frame mapped 2^20 times (the half's first page).
    frame: Vec<u8>,
}

impl Crafted {
    fn device(&self) -> String {
        format!("file://{}", self.path.display())
    }

    /// `leechio dump --pid` of the crafted process within `range`, to
    /// `out`, with its JSON summary, bounded.
    fn dump(&self, range: Range<u64>, out: &Path) -> (Run, Value) {
        let (pid, range) = (
            self.pid.to_string(),
            format!("{:#x}-{:#x}", range.start, range.end),
        );
        let run = run_bounded(
            std::path::Path::new(env!("CARGO_BIN_EXE_leechio")),
            &[
                "-d",
                &self.device(),
                "--json",
                "dump",
                "--no-cache",
                "--pid",
                &pid,
                "--range",
                &range,
                "-o",
                out.to_str().unwrap(),
            ],
            DEADLINE,
        );
        assert_clean(&run, "dump --pid", MEMORY_CAP_KIB);
        assert!(run.status.success(), "{}", run.stderr);
        let summary = serde_json::from_str(run.stdout.trim())
            .unwrap_or_else(|e| panic!("{e}: {}", run.stdout));
        (run, summary)
    }
}

/// The image, built once for the tests of this file.
fn crafted() -> &'static Crafted {
    static CRAFTED: OnceLock<Crafted> = OnceLock::new();
    CRAFTED.get_or_init(craft)
}

/// An image of the guest, paused, with its pattern process's maps
/// replaced (see the top of this file). Built in its file, not in this
/// process's memory: a child's peak memory as `wait4` gives it is at least
/// what its parent's ever was.
fn craft() -> Crafted {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crafted.raw");
    let guest = shared_guest();
    let pattern = guest.pattern();
    let ram = guest.memory().bytes();
    let registers = guest.info_registers();
    let cr4 = registers
        .split("CR4=")
        .nth(1)
        .expect("CR4 in info registers");
    let cr4: String = cr4.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
    let cr4 = u64::from_str_radix(&cr4, 16).unwrap();
    assert_eq!(
        cr4 & (1 << 12),
        0,
        "the crafted tables are 4-level (no LA57)"
    );
    {
        let _paused = guest.pause();
        guest.qmp(
            "pmemsave",
            json!({ "val": 0, "size": ram, "filename": path.to_str().unwrap() }),
        );
    }
    drop(guest);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    assert_eq!(file.metadata().unwrap().len(), ram, "pmemsave");
    file.set_len(ram + ROOM).unwrap();
    let bytes = |pa: u64, len: u64| {
        let mut buf = vec![0u8; len as usize];
        file.read_exact_at(&mut buf, pa).unwrap();
        buf
    };
    let word = |pa: u64| u64::from_le_bytes(bytes(pa, 8).try_into().unwrap());
    let poke_bytes = |pa: u64, b: &[u8]| file.write_all_at(b, pa).unwrap();
    let poke = |pa: u64, value: u64| poke_bytes(pa, &value.to_le_bytes());

    let device = format!("file://{}", path.display());
    let (mem, _) = engine(LeechCore::open(&DeviceConfig::new(&device)).unwrap());
    let kernel = Kernel::find(&mem, &no_cache()).expect("the guest's kernel in its image");
    let list = kernel.processes();
    let process = list.get(pattern.pid).expect("the pattern process");
    let (mm, dtb) = (process.mm.unwrap(), process.dtb.unwrap());
    let rw = pattern.halves()[0].clone();
    let vmas = kernel.vmas(mm);
    let kept = vmas
        .vmas
        .iter()
        .find(|v| v.start == rw.start && v.end == rw.end)
        .expect("the pattern's read-write VMA");
    // Offsets from the kernel's BTF; slab objects (VMAs, maple nodes, the
    // mm) are in the direct map.
    let btf = kernel.btf();
    let offset = |ty: &str, member: &str| btf.member_offset(ty, member).unwrap();
    let direct = kernel.direct_map_base();

    // The frame mapped 2^20 times: the half's first page.
    let space = AddressSpace::new(mem.clone(), dtb, kernel.paging());
    let frame_pa = mem.block_on(space.translate(rw.start)).unwrap().pa;
    let frame = bytes(frame_pa, PAGE);
    assert!(frame == pattern.bytes(rw.start, PAGE as usize));

    // Tables in the appended room: a PDPT, 4 PDs, 2048 PTs.
    let (pdpt, pds, pts) = (ram + PAGE, ram + 2 * PAGE, ram + 6 * PAGE);
    let top = |va: u64| dtb + 8 * ((va >> 39) & 511);
    assert_eq!(word(top(MANY_START)), 0, "PML4 entry of the crafted VMA");
    for va in (HOLES_START..HOLES_START + HOLES_LEN).step_by(1 << 39) {
        assert_eq!(word(top(va)), 0, "PML4 entry of {va:#x}");
    }
    poke(top(MANY_START), pdpt | USER_RW);
    let first_pd_entry = (MANY_START >> 30) & 511;
    let pt_page: Vec<u8> = (0..512)
        .flat_map(|_| (frame_pa | USER_RW).to_le_bytes())
        .collect();
    for i in 0..MANY_PAGES / 512 {
        let (pd, pt) = (pds + (i / 512) * PAGE, pts + i * PAGE);
        if i % 512 == 0 {
            poke(pdpt + 8 * (first_pd_entry + i / 512), pd | USER_RW);
        }
        poke(pd + 8 * (i % 512), pt | USER_RW);
        poke_bytes(pt, &pt_page);
    }

    // Two VMAs like the kept one, and a maple leaf of the three.
    let vma_size = btf.size_of("vm_area_struct").unwrap();
    assert!(vma_size <= 0x400, "vm_area_struct of {vma_size} bytes");
    let kept_bytes = bytes(kept.address - direct, vma_size);
    let (node, many_vma, holes_vma) = (ram, ram + 0x400, ram + 0x800);
    for (at, start, len) in [
        (many_vma, MANY_START, MANY_PAGES * PAGE),
        (holes_vma, HOLES_START, HOLES_LEN),
    ] {
        poke_bytes(at, &kept_bytes);
        poke(at + offset("vm_area_struct", "vm_start"), start);
        poke(at + offset("vm_area_struct", "vm_end"), start + len);
    }
    let root_at = mm - direct + offset("mm_struct", "mm_mt") + offset("maple_tree", "ma_root");
    let old_root = word(root_at);
    let parent = offset("maple_range_64", "parent");
    // (last index of the slot, what it holds)
    let entries = [
        (MANY_START - 1, 0),
        (MANY_START + MANY_PAGES * PAGE - 1, direct + many_vma),
        (HOLES_START - 1, 0),
        (HOLES_START + HOLES_LEN - 1, direct + holes_vma),
        (rw.start - 1, 0),
        (rw.end - 1, kept.address),
        (u64::MAX, 0),
    ];
    poke(node + parent, word((old_root & !0xff) - direct + parent));
    let (pivots, slots) = (
        offset("maple_range_64", "pivot"),
        offset("maple_range_64", "slot"),
    );
    for (i, &(last, vma)) in (0u64..).zip(&entries) {
        if last != u64::MAX {
            poke(node + pivots + 8 * i, last);
        }
        poke(node + slots + 8 * i, vma);
    }
    // The last slot in use, for a node whose last pivot is 0.
    let meta_end = offset("maple_range_64", "meta") + offset("maple_metadata", "end");
    poke_bytes(node + meta_end, &[entries.len() as u8 - 1]);
    let leaf = btf.enum_value("maple_leaf_64").unwrap() as u64;
    poke(root_at, (direct + node) | (leaf << 3) | (old_root & 7));
    let count_at = mm - direct + offset("mm_struct", "map_count");
    poke_bytes(count_at, &3u32.to_le_bytes());
    file.sync_all().unwrap();

    // The crafted maps are what the kernel's structures now say, read by
    // the kernel found again in the crafted image (a kernel reads the
    // memory it was found in).
    let (mem, _) = engine(LeechCore::open(&DeviceConfig::new(&device)).unwrap());
    let kernel = Kernel::find(&mem, &no_cache()).expect("the guest's kernel in the crafted image");
    let maps = kernel.vmas(mm);
    assert!(maps.failed.is_empty(), "{:?}", maps.failed);
    let spans: Vec<(u64, u64)> = maps.vmas.iter().map(|v| (v.start, v.end)).collect();
    assert_eq!(
        spans,
        [
            (MANY_START, MANY_START + MANY_PAGES * PAGE),
            (HOLES_START, HOLES_START + HOLES_LEN),
            (rw.start, rw.end)
        ]
    );
    Crafted {
        _dir: dir,
        path,
        size: ram + ROOM,
        pid: pattern.pid,
        rw,
        frame,
    }
}

/// A program header: type, offset, vaddr, paddr, filesz.
#[derive(Debug, Clone, Copy)]
struct Header {
    kind: u32,
    offset: u64,
    vaddr: u64,
    paddr: u64,
    filesz: u64,
}

/// Calls `each` with every program header of the ELF file at `path`, in
/// order, their count from section header 0 when `e_phnum` says PN_XNUM
/// (ELF's extended numbering); read a few thousand at a time (see
/// [`craft`] for why this process keeps its memory small).
fn program_headers(path: &Path, mut each: impl FnMut(Header)) {
    let file = std::fs::File::open(path).unwrap();
    let read = |at: u64, len: usize| {
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, at).unwrap();
        buf
    };
    let u32_of = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let u64_of = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let head = read(0, 64);
    let phoff = u64_of(&head, 0x20);
    let count = match u16::from_le_bytes([head[0x38], head[0x39]]) {
        0xffff => u64::from(u32_of(&read(u64_of(&head, 0x28), 64), 44)),
        n => u64::from(n),
    };
    let mut done = 0;
    while done < count {
        let n = (count - done).min(4096);
        let chunk = read(phoff + done * 56, (n * 56) as usize);
        for h in chunk.chunks_exact(56) {
            each(Header {
                kind: u32_of(h, 0),
                offset: u64_of(h, 8),
                vaddr: u64_of(h, 16),
                paddr: u64_of(h, 24),
                filesz: u64_of(h, 32),
            });
        }
        done += n;
    }
}

/// The `len` bytes at `offset` of the file at `path`.
fn file_bytes(path: &Path, offset: u64, len: u64) -> Vec<u8> {
    let mut buf = vec![0u8; len as usize];
    std::fs::File::open(path)
        .unwrap()
        .read_exact_at(&mut buf, offset)
        .unwrap();
    buf
}

/// The `.failed` list beside `out`: start, end and reason of each range.
fn failed_list(out: &Path) -> Vec<(u64, u64, String)> {
    let text = std::fs::read_to_string(format!("{}.failed", out.display())).unwrap();
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    text.lines()
        .skip(1)
        .map(|l| {
            let mut words = l.splitn(3, ' ');
            let (s, e) = (words.next().unwrap(), words.next().unwrap());
            (hex(s), hex(e), words.next().unwrap_or("").to_string())
        })
        .collect()
}

#[cfg_attr(miri, ignore)]
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_frame_mapped_a_million_times_is_in_the_file_once() {
    let c = crafted();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("many.core");
    let many = MANY_START..MANY_START + MANY_PAGES * PAGE;
    let (_, summary) = c.dump(many.clone(), &out);
    // A segment per page (they cannot be one: each shows the same bytes),
    // every one at the frame's bytes, which are in the file once.
    let (mut loads, mut headers, mut note_len, mut at) = (0u64, 0u64, 0, None);
    program_headers(&out, |h| {
        headers += 1;
        if h.kind == PT_NOTE {
            note_len = h.filesz;
        }
        if h.kind != PT_LOAD {
            return;
        }
        let offset = *at.get_or_insert(h.offset);
        assert_eq!(
            (h.vaddr, h.filesz, h.offset, h.paddr),
            (many.start + loads * PAGE, PAGE, offset, u64::MAX),
            "segment {loads}"
        );
        loads += 1;
    });
    assert_eq!(loads, MANY_PAGES);
    let at = at.unwrap();
    assert!(file_bytes(&out, at, PAGE) == c.frame);
    // The file: headers, the note of mapped files, one page of memory. Its
    // size is bounded by the RAM behind it plus its headers.
    let len = std::fs::metadata(&out).unwrap().len();
    let headers_room = 64 + 56 * (headers + headers / 8) + 64;
    assert!(at <= (headers_room + note_len).next_multiple_of(PAGE));
    assert_eq!(len, at + PAGE, "one page of memory");
    assert!(len <= c.size + headers_room + note_len + PAGE);
    assert_eq!(summary["bytes"], PAGE);
    assert_eq!(summary["ranges"], MANY_PAGES);
    assert_eq!(summary["shared_segments"], MANY_PAGES - 1);
    assert_eq!(summary["shared_bytes"], (MANY_PAGES - 1) * PAGE);
    assert_eq!(summary["failed_bytes"], 0);
    assert_eq!(summary["left_out"]["ranges"], 0, "{summary}");
    // gdb reads the frame at the first, a middle and the last page (a
    // few bytes: it looks each one up among a million segments).
    let reads: Vec<(u64, usize)> = [0, MANY_PAGES / 2 + 3, MANY_PAGES - 1]
        .iter()
        .map(|&i| (MANY_START + i * PAGE + (64 * i) % PAGE, 64))
        .collect();
    for (bytes, &(va, n)) in gdb_reads(&out, &reads).iter().zip(&reads) {
        let at = (va % PAGE) as usize;
        assert!(
            bytes.as_deref() == Some(&c.frame[at..at + n]),
            "gdb at {va:#x}"
        );
    }
}

#[cfg_attr(miri, ignore)]
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_vma_of_15_tib_with_nothing_mapped_costs_nothing_and_is_listed() {
    let c = crafted();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("holes.core");
    let (_, summary) = c.dump(HOLES_START..c.rw.end, &out);
    // The kept VMA, one segment though its pages are scattered in RAM;
    // nothing of the holes.
    let mut loads = Vec::new();
    program_headers(&out, |h| {
        if h.kind == PT_LOAD {
            loads.push(h)
        }
    });
    assert_eq!(loads.len(), 1, "{loads:x?}");
    let rw_len = c.rw.end - c.rw.start;
    assert_eq!((loads[0].vaddr, loads[0].filesz), (c.rw.start, rw_len));
    let at = loads[0].offset;
    assert!(file_bytes(&out, at, PAGE) == c.frame);
    assert_eq!(std::fs::metadata(&out).unwrap().len(), at + rw_len);
    // The holes are listed, with their reason, and counted.
    assert_eq!(
        failed_list(&out),
        [(
            HOLES_START,
            HOLES_START + HOLES_LEN,
            "virtual address not mapped".to_string()
        )]
    );
    assert_eq!(summary["left_out"]["not_mapped"], HOLES_LEN, "{summary}");
    assert_eq!(summary["left_out"]["ranges"], 1, "{summary}");
    assert_eq!(summary["bytes"], rw_len);
    readelf_clean(&out);
}

#[cfg_attr(miri, ignore)]
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn gdb_and_drgn_read_segments_that_share_their_bytes() {
    let c = crafted();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("few.core");
    let pages = 16;
    let (_, summary) = c.dump(MANY_START..MANY_START + pages * PAGE, &out);
    assert_eq!(summary["shared_segments"], pages - 1);
    // The text summary says it too.
    let run_text = run_bounded(
        std::path::Path::new(env!("CARGO_BIN_EXE_leechio")),
        &[
            "-d",
            &c.device(),
            "dump",
            "--no-cache",
            "--pid",
            &c.pid.to_string(),
            "--range",
            &format!("{MANY_START:#x}-{:#x}", MANY_START + pages * PAGE),
            "-o",
            out.to_str().unwrap(),
        ],
        DEADLINE,
    );
    assert!(run_text.status.success(), "{}", run_text.stderr);
    assert!(
        run_text.stdout.contains(
            "15 segments show 60.0 KiB of memory mapped more than once, whose bytes are in the file once"
        ),
        "{}",
        run_text.stdout
    );
    readelf_clean(&out);
    let reads: Vec<(u64, usize)> = (0..pages)
        .map(|i| (MANY_START + i * PAGE, PAGE as usize))
        .collect();
    for (bytes, (va, _)) in gdb_reads(&out, &reads).iter().zip(&reads) {
        assert!(bytes.as_deref() == Some(&c.frame[..]), "gdb at {va:#x}");
    }
    let read = drgn_reads(&out, &reads);
    for (bytes, (va, _)) in read.iter().zip(&reads) {
        assert!(bytes[..] == c.frame[..], "drgn at {va:#x}");
    }
}

/// What drgn (in `target/drgn`, which `make setup` installs) reads at each
/// virtual address of `reads` in the core `path`.
fn drgn_reads(path: &Path, reads: &[(u64, usize)]) -> Vec<Vec<u8>> {
    const SCRIPT: &str = r#"
import json, sys
import drgn

prog = drgn.Program()
prog.set_core_dump(sys.argv[1])
print(json.dumps([prog.read(a, n).hex() for a, n in json.loads(sys.argv[2])]))
"#;
    let python = common::repo_root().join("target/drgn/bin/python");
    let output = common::output_within(
        Command::new(&python)
            .args(["-c", SCRIPT])
            .arg(path)
            .arg(serde_json::to_string(reads).unwrap()),
        DEADLINE,
    );
    assert!(
        output.status.success(),
        "drgn ({}): {}",
        python.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let hex: Vec<String> = serde_json::from_slice(&output.stdout).unwrap();
    hex.iter()
        .map(|s| {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        })
        .collect()
}
