//! Page tables a target can hold to make a walk explode: a table whose
//! entries point at itself, tables that point at each other, and memory
//! where every page looks like a table. `leechio spaces`, `translate` and
//! `dump --dtb` must finish within seconds, within a memory cap, with a
//! result or a one-line error, as docs/rust.md states.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::bounded::{self, Run};
use serde_json::Value;

const MIB: u64 = 1 << 20;
/// Present, writable.
const PRESENT_RW: u64 = 0x3;

/// A raw image of `size` bytes of a filler pattern, with `tables`
/// (address, 512 entries) written in.
struct Image {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Image {
    fn new(size: u64, tables: &[(u64, Vec<u64>)]) -> Image {
        let mut bytes: Vec<u8> = (0..size / 8)
            .flat_map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) & !1).to_le_bytes())
            .collect();
        for (at, entries) in tables {
            for (i, e) in entries.iter().enumerate() {
                let o = *at as usize + i * 8;
                bytes[o..o + 8].copy_from_slice(&e.to_le_bytes());
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hostile.raw");
        std::fs::write(&path, bytes).unwrap();
        Image { _dir: dir, path }
    }

    fn device(&self) -> String {
        format!("file://{}", self.path.display())
    }
}

/// Time and memory every run here must stay within (a debug build on a
/// loaded 2-core machine; the figures of docs/rust.md are a release build's).
const DEADLINE: Duration = Duration::from_secs(30);
const MEMORY_CAP_KIB: i64 = 256 << 10;

/// Runs `leechio ARGS` within `deadline` (see [`bounded::run_bounded`]).
fn run_bounded(args: &[&str], deadline: Duration) -> Run {
    bounded::run_bounded(Path::new(env!("CARGO_BIN_EXE_leechio")), args, deadline)
}

/// A clean end within the memory cap (see [`bounded::assert_clean`]).
fn assert_clean(run: &Run, what: &str) {
    bounded::assert_clean(run, what, MEMORY_CAP_KIB)
}

fn spaces(image: &Image) -> Vec<Value> {
    let run = run_bounded(&["-d", &image.device(), "spaces", "--json"], DEADLINE);
    assert_clean(&run, "spaces");
    assert!(run.status.success(), "{}", run.stderr);
    run.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Loads of the ELF file at `path`: (vaddr, filesz).
fn loads(path: &Path) -> Vec<(u64, u64)> {
    let elf = std::fs::read(path).unwrap();
    let word = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap());
    let phoff = word(0x20) as usize;
    let count = u16::from_le_bytes([elf[0x38], elf[0x39]]) as usize;
    (0..count)
        .map(|i| phoff + i * 56)
        .filter(|&h| u32::from_le_bytes(elf[h..h + 4].try_into().unwrap()) == 1)
        .map(|h| (word(h + 16), word(h + 32)))
        .collect()
}

/// A canonical half's bytes in the mode `spaces` found for candidate `c`.
fn half(c: &Value) -> u64 {
    let levels = c["paging"].as_u64().expect("a known mode");
    1 << (levels * 9 + 11)
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_table_pointing_at_itself_everywhere_is_walked_once() {
    let p = 4 * MIB;
    let image = Image::new(16 * MIB, &[(p, vec![p | PRESENT_RW; 512])]);
    // 512^5 paths; as a CPU sees it both halves are wholly mapped. Such a
    // table reads as well in 5 levels (its "page tables" hold entries into
    // memory): the half of the mode found.
    let found = spaces(&image);
    let c = found
        .iter()
        .find(|c| c["dtb"] == format!("{p:#x}"))
        .expect("the table is a root");
    assert_eq!(c["paging"], 5, "{c}");
    let levels = 5;
    assert_eq!(c["user_mapped"], half(c));
    assert_eq!(c["kernel_mapped"], half(c));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("space.elf");
    let dtb = format!("{p:#x}");
    let run = run_bounded(
        &[
            "-d",
            &image.device(),
            "dump",
            "--dtb",
            &dtb,
            "-o",
            out.to_str().unwrap(),
        ],
        DEADLINE,
    );
    assert_clean(&run, "dump");
    assert!(run.status.success(), "{}", run.stderr);
    // The table's 512 pages at 0 once; the 511 ranges a level that alias
    // them (below the top, in the mode found) are named, not dumped.
    let l = loads(&out);
    assert_eq!(l.len(), 512, "{l:x?}");
    assert!(l
        .iter()
        .enumerate()
        .all(|(i, &(va, size))| va == i as u64 * 0x1000 && size == 0x1000));
    assert!(
        run.stderr
            .contains(&format!("{} ranges", 511 * (levels - 1)))
            && run.stderr.contains("left out"),
        "{}",
        run.stderr
    );
    // A translation is a read a level, whatever the tables.
    let run = run_bounded(
        &[
            "-d",
            &image.device(),
            "translate",
            "--dtb",
            &dtb,
            "0xffffffffffffffff",
        ],
        DEADLINE,
    );
    assert_clean(&run, "translate");
    assert!(
        run.stdout.contains(&format!("{:#x}", p + 0xfff)),
        "{}",
        run.stdout
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn tables_pointing_at_each_other_are_walked_once() {
    let (a, b) = (4 * MIB, 4 * MIB + 0x1000);
    let image = Image::new(
        16 * MIB,
        &[
            (a, vec![b | PRESENT_RW; 512]),
            (b, vec![a | PRESENT_RW; 512]),
        ],
    );
    let found = spaces(&image);
    for root in [a, b] {
        let c = found
            .iter()
            .find(|c| c["dtb"] == format!("{root:#x}"))
            .expect("both are roots");
        assert_eq!(c["user_mapped"], half(c));
        assert_eq!(c["sharing_kernel_half"], 0);
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn memory_where_every_page_looks_like_a_table_stays_cheap() {
    // 32 MiB, every page 512 present entries pointing at random pages of
    // the image: each page a root candidate, 512^4 paths from each.
    let pages = 32 * MIB / 0x1000;
    let mut rng = fastrand::Rng::with_seed(28);
    let tables: Vec<(u64, Vec<u64>)> = (0..pages)
        .map(|p| {
            let entries = (0..512)
                .map(|_| rng.u64(0..pages) << 12 | PRESENT_RW)
                .collect();
            (p * 0x1000, entries)
        })
        .collect();
    let image = Image::new(32 * MIB, &tables);
    let found = spaces(&image);
    assert_eq!(found.len() as u64, pages);
    // Every root maps both halves wholly, as a CPU sees them, in the mode
    // its tables were found in; the mode is looked for in a few groups of
    // roots only (not one detection per page), the others are unknown.
    let known: Vec<&Value> = found.iter().filter(|c| !c["paging"].is_null()).collect();
    assert!(
        !known.is_empty() && known.len() <= 16,
        "{} known",
        known.len()
    );
    assert!(known
        .iter()
        .all(|c| c["user_mapped"] == half(c) && c["kernel_mapped"] == half(c)));
    assert!(found
        .iter()
        .filter(|c| c["paging"].is_null())
        .all(|c| c["user_mapped"].is_null() && c["paging_unknown"].is_string()));
    // A dump of one root's first 64 MiB of address space: its tables
    // walked once each.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("space.elf");
    let run = run_bounded(
        &[
            "-d",
            &image.device(),
            "dump",
            "--dtb",
            "0x0",
            "--range",
            "0-0x4000000",
            "-o",
            out.to_str().unwrap(),
        ],
        DEADLINE,
    );
    assert_clean(&run, "dump");
    assert!(run.status.success(), "{}", run.stderr);
    let dumped: u64 = loads(&out).iter().map(|l| l.1).sum();
    assert!(dumped > 0 && dumped <= 64 * MIB, "{dumped:#x}");
    // Every page of the first MiB looks like a kernel's top table: the
    // search for a Linux kernel checks each, a few at a time, and finds
    // none.
    let run = run_bounded(&["-d", &image.device(), "ps", "--no-cache"], DEADLINE);
    assert_clean(&run, "ps");
    assert_eq!(run.status.code(), Some(1));
    assert!(
        run.stderr
            .starts_with("leechio: no Linux kernel found: 256 candidate top-level table(s)")
            && run.stderr.lines().count() == 1,
        "{}",
        run.stderr
    );
}
