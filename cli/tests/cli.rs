//! The `leechio` binary, run as a user runs it, against image files.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use common::elf_tools::readelf_clean;
use common::{make_fifo, read_file_at, Image};
use serde_json::Value;
use x86_64::structures::paging::{
    FrameAllocator, Mapper, OffsetPageTable, Page, PageTable, PageTableFlags as F, PhysFrame,
    Size2MiB, Size4KiB, Translate,
};
use x86_64::{PhysAddr, VirtAddr};

const MIB: u64 = 1 << 20;

fn leechio(args: &[&str]) -> Output {
    leechio_command().args(args).output().expect("run leechio")
}

/// The program under test, with the plugin built as `make plugin` builds
/// it, for its bench (the test program lies in target/debug/, the plugin
/// in target/release/).
fn leechio_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leechio"));
    cmd.env("LEECHIO_PLUGINS", common::plugin::plugin_dir());
    cmd
}

/// `leechio -d DEVICE dump -o PATH ARGS…`.
fn dump(device: &str, path: impl AsRef<Path>, args: &[&str]) -> Output {
    let path = path.as_ref().to_str().expect("a UTF-8 path");
    leechio(&[&["-d", device, "dump", "-o", path], args].concat())
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A clear failure: nonzero exit, a message, no panic.
fn assert_refused(o: &Output, needle: &str) {
    let err = stderr(o);
    assert!(!o.status.success(), "succeeded: {}", stdout(o));
    assert!(err.contains(needle), "stderr lacks {needle:?}: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("internal error"),
        "{err}"
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn info_reports_the_device_and_its_memory_map() {
    let image = Image::new(16 * MIB);
    let o = leechio(&["-d", &image.device(), "info", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["device"], "file");
    assert!(v["leechcore_version"].as_str().unwrap().starts_with("2.23"));
    assert_eq!(v["max_address"], format!("{:#x}", image.size));
    assert_eq!(v["read_only"], true);
    assert_eq!(v["memory_map"][0]["end"], format!("{:#x}", image.size));
    let text = stdout(&leechio(&["-d", &image.device(), "info"]));
    assert!(
        text.contains("device        file") && text.contains("16 MiB"),
        "{text}"
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn read_prints_the_bytes_and_question_marks_for_unreadable_ones() {
    let image = Image::new(16 * MIB);
    let o = leechio(&["-d", &image.device(), "read", "0x1233", "0x25", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let expected: String = image
        .bytes(0x1233, 0x25)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(v["data"], expected);

    // Across the end: the readable part, then ??, and a nonzero exit.
    let end = image.size;
    let o = leechio(&[
        "-d",
        &image.device(),
        "read",
        &format!("{:#x}", end - 8),
        "16",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let line = stdout(&o);
    let bytes: Vec<String> = image
        .bytes(end - 8, 8)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert!(
        line.starts_with(&format!(
            "{:016x}  {} ?? ?? ?? ?? ?? ?? ?? ??",
            end - 8,
            bytes.join(" ")
        )),
        "{line}"
    );
    assert!(stderr(&o).contains("unreadable"), "{}", stderr(&o));
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_read_past_the_top_of_the_address_space_names_the_addresses_it_asked_for() {
    let image = Image::new(16 * MIB);
    let o = leechio(&["-d", &image.device(), "read", "0xfffffffffffffff8", "24"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("0xfffffffffffffff8..0x10000000000000000 unreadable: address past the end")
            && err.contains(
                "0x10000000000000000..0x10000000000000010 unreadable: range wraps past the end of the address space"
            ),
        "{err}"
    );
    assert!(!err.contains(": 0x0.") && !err.contains(" 0x0."), "{err}");
    let lines: Vec<String> = stdout(&o).lines().map(|l| l[..18].to_string()).collect();
    assert_eq!(lines, ["fffffffffffffff8  ", "10000000000000008 "]);

    let o = leechio(&[
        "-d",
        &image.device(),
        "read",
        "0xfffffffffffffff8",
        "16",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let failed: Vec<(&str, u64)> = v["failed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["address"].as_str().unwrap(),
                f["length"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        failed,
        [("0xfffffffffffffff8", 8), ("0x10000000000000000", 8)]
    );
}

/// A page-aligned physical memory image the `x86_64` crate's mapper writes
/// page tables into.
#[repr(C, align(4096))]
#[derive(Clone, Copy)]
struct Frame([u8; 4096]);

struct Bump(u64);

unsafe impl FrameAllocator<Size4KiB> for Bump {
    fn allocate_frame(&mut self) -> Option<PhysFrame> {
        let f = PhysFrame::containing_address(PhysAddr::new(self.0));
        self.0 += 4096;
        Some(f)
    }
}

const KERNEL_TEXT: u64 = 0xffff_ffff_8100_0000;
const USER_BASE: u64 = 0x0000_5555_5555_0000;
/// Mapped in the third space to a frame past the end of the image.
const BEYOND: u64 = 0x0000_7000_0000_0000;
/// The last page of the address space, mapped in the shared kernel half.
const TOP_PAGE: u64 = 0xffff_ffff_ffff_f000;
/// Its frame.
const TOP_FRAME: u64 = 0x150_0000;

/// An image file with address spaces in it.
struct SpacesImage {
    _dir: tempfile::TempDir,
    /// Its `file://` device string.
    device: String,
    /// The roots of its address spaces.
    dtbs: Vec<u64>,
    /// (virtual address, physical address per the `x86_64` crate), five
    /// per space.
    oracle: Vec<(u64, Option<u64>)>,
}

/// An image with three address spaces that share a kernel half (2 MiB
/// pages of "kernel text") and each map a few user pages.
fn spaces_image() -> SpacesImage {
    let size = 32 << 20;
    let mut frames = vec![Frame([0; 4096]); size / 4096];
    // Pattern the data so every page is recognisable.
    for (i, f) in frames.iter_mut().enumerate() {
        for (j, w) in f.0.chunks_exact_mut(8).enumerate() {
            w.copy_from_slice(&((i as u64) << 12 | (j as u64) << 3).to_le_bytes());
        }
    }
    let base = frames.as_mut_ptr() as *mut u8;
    let dtbs = [0x100_0000u64, 0x100_1000, 0x100_2000];
    let mut bump = Bump(0x110_0000);
    let mut oracle = Vec::new();
    for (n, &dtb) in dtbs.iter().enumerate() {
        // SAFETY: the tables and every frame the mapper touches lie in
        // `frames`, reached at offset `base`.
        let table = unsafe { &mut *(base.add(dtb as usize) as *mut PageTable) };
        *table = PageTable::new();
        if n > 0 {
            // Share the first space's kernel half.
            // SAFETY: as above.
            let first = unsafe { &*(base.add(dtbs[0] as usize) as *const PageTable) };
            for i in 256..512 {
                table[i] = first[i].clone();
            }
        }
        let mut mapper = unsafe { OffsetPageTable::new(table, VirtAddr::from_ptr(base)) };
        // SAFETY: fresh mappings on tables nothing runs on; no TLB.
        unsafe {
            if n == 0 {
                for k in 0..4u64 {
                    mapper
                        .map_to(
                            Page::<Size2MiB>::containing_address(VirtAddr::new(
                                KERNEL_TEXT + k * 0x20_0000,
                            )),
                            PhysFrame::<Size2MiB>::containing_address(PhysAddr::new(
                                0x20_0000 * (k + 1),
                            )),
                            F::PRESENT | F::WRITABLE | F::HUGE_PAGE,
                            &mut bump,
                        )
                        .unwrap()
                        .ignore();
                }
                mapper
                    .map_to(
                        Page::<Size4KiB>::containing_address(VirtAddr::new(TOP_PAGE)),
                        PhysFrame::containing_address(PhysAddr::new(TOP_FRAME)),
                        F::PRESENT | F::WRITABLE,
                        &mut bump,
                    )
                    .unwrap()
                    .ignore();
            }
            for k in 0..(3 + n as u64) {
                mapper
                    .map_to(
                        Page::<Size4KiB>::containing_address(VirtAddr::new(USER_BASE + k * 0x1000)),
                        PhysFrame::containing_address(PhysAddr::new(
                            0x140_0000 + (n as u64 * 16 + k) * 0x1000,
                        )),
                        F::PRESENT | F::WRITABLE | F::USER_ACCESSIBLE,
                        &mut bump,
                    )
                    .unwrap()
                    .ignore();
            }
        }
        if n == 2 {
            // A page whose frame lies past the end of the image: mapped,
            // but unreadable.
            // SAFETY: as above.
            unsafe {
                mapper
                    .map_to(
                        Page::<Size4KiB>::containing_address(VirtAddr::new(BEYOND)),
                        PhysFrame::containing_address(PhysAddr::new(0x4000_0000)),
                        F::PRESENT | F::USER_ACCESSIBLE,
                        &mut bump,
                    )
                    .unwrap()
                    .ignore();
            }
        }
        for va in [
            KERNEL_TEXT + 0x1234,
            KERNEL_TEXT + 0x60_0ff8,
            USER_BASE + 0x2010,
            USER_BASE + 0x5000,
            0x1000,
        ] {
            oracle.push((
                va,
                mapper.translate_addr(VirtAddr::new(va)).map(|a| a.as_u64()),
            ));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spaces.raw");
    // SAFETY: `frames` is plain initialised bytes.
    std::fs::write(&path, unsafe {
        std::slice::from_raw_parts(base as *const u8, size)
    })
    .unwrap();
    let device = format!("file://{}", path.display());
    SpacesImage {
        _dir: dir,
        device,
        dtbs: dtbs.to_vec(),
        oracle,
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn translate_agrees_with_the_x86_64_crate() {
    let SpacesImage {
        _dir,
        device,
        dtbs,
        oracle,
    } = spaces_image();
    for (n, dtb) in dtbs.iter().enumerate() {
        let expected = &oracle[n * 5..n * 5 + 5];
        let mut args = vec![
            "-d".to_string(),
            device.clone(),
            "translate".into(),
            "--json".into(),
            "--dtb".into(),
            format!("{dtb:#x}"),
        ];
        args.extend(expected.iter().map(|(va, _)| format!("{va:#x}")));
        let o = leechio(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let lines: Vec<serde_json::Value> = stdout(&o)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 5);
        for ((va, pa), line) in expected.iter().zip(&lines) {
            assert_eq!(line["va"], format!("{va:#x}"));
            match pa {
                Some(pa) => {
                    assert_eq!(line["pa"], format!("{pa:#x}"), "{line}");
                    assert!(line["error"].is_null());
                    let size = if *va >= KERNEL_TEXT { 2 << 20 } else { 4096 };
                    assert_eq!(line["page_size"], size);
                }
                None => {
                    assert!(
                        line["pa"].is_null() && line["page_size"].is_null(),
                        "{line}"
                    );
                    assert!(
                        line["error"].as_str().unwrap().contains("not mapped"),
                        "{line}"
                    );
                }
            }
        }
        assert_eq!(
            o.status.code(),
            Some(1),
            "an unmapped address makes the exit nonzero"
        );
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn spaces_finds_every_root_and_that_they_share_the_kernel_half() {
    let SpacesImage {
        _dir, device, dtbs, ..
    } = spaces_image();
    let o = leechio(&["-d", &device, "spaces", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let found: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (n, dtb) in dtbs.iter().enumerate() {
        let c = found
            .iter()
            .find(|c| c["dtb"] == format!("{dtb:#x}"))
            .unwrap_or_else(|| panic!("{dtb:#x} not found: {found:?}"));
        assert_eq!(c["sharing_kernel_half"], 2, "{c}");
        let beyond = if n == 2 { 0x1000 } else { 0 };
        assert_eq!(c["user_mapped"], (3 + n as u64) * 0x1000 + beyond, "{c}");
        assert_eq!(c["kernel_mapped"], 4 * 0x20_0000 + 0x1000, "{c}");
        // No Linux kernel here: no process names, and no error.
        assert_eq!(
            (&c["pid"], &c["process"]),
            (&Value::Null, &Value::Null),
            "{c}"
        );
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn ps_on_a_target_that_is_not_linux_names_what_is_missing() {
    let SpacesImage { _dir, device, .. } = spaces_image();
    let o = leechio(&["-d", &device, "ps", "--no-cache"]);
    assert_refused(&o, "leechio: no Linux kernel found: ");
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert_eq!(stdout(&o), "");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn modules_on_a_target_that_is_not_linux_names_what_is_missing() {
    let SpacesImage { _dir, device, .. } = spaces_image();
    for command in ["modules", "hooks"] {
        let o = leechio(&["-d", &device, command, "--no-cache"]);
        assert_refused(&o, "leechio: no Linux kernel found: ");
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
        assert_eq!(stdout(&o), "");
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn files_on_a_target_that_is_not_linux_names_what_is_missing() {
    let SpacesImage { _dir, device, .. } = spaces_image();
    for args in [
        &["files", "--no-cache"][..],
        &["files", "1", "--json", "--no-cache"],
    ] {
        let o = leechio(&[&["-d", &device][..], args].concat());
        assert_refused(&o, "leechio: no Linux kernel found: ");
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
        assert_eq!(stdout(&o), "");
    }
}

/// (type, offset, vaddr, paddr, filesz) of each program header.
fn program_headers(elf: &[u8]) -> Vec<(u32, u64, u64, u64, u64)> {
    assert_eq!(&elf[..4], b"\x7fELF");
    assert_eq!(u16::from_le_bytes([elf[16], elf[17]]), 4, "ET_CORE");
    let phoff = u64::from_le_bytes(elf[32..40].try_into().unwrap()) as usize;
    let phnum = u16::from_le_bytes([elf[56], elf[57]]) as usize;
    (0..phnum)
        .map(|i| {
            let h = &elf[phoff + i * 56..phoff + (i + 1) * 56];
            let word = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().unwrap());
            (
                u32::from_le_bytes(h[..4].try_into().unwrap()),
                word(8),
                word(16),
                word(24),
                word(32),
            )
        })
        .collect()
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_physical_dump_of_no_linux_kernel_says_why_it_has_no_vmcoreinfo_note() {
    let SpacesImage { _dir, device, .. } = spaces_image();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ram.elf");
    for args in [&["--no-cache"][..], &["--no-cache", "--dtb", "0x1000000"]] {
        let o = dump(&device, &path, args);
        assert!(o.status.success(), "{}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.starts_with(
                "leechio: no VMCOREINFO note in the dump (crash and drgn need it): no Linux kernel found: "
            ) && err.lines().count() == 1,
            "{args:?}: {err}"
        );
        let elf = std::fs::read(&path).unwrap();
        assert!(program_headers(&elf).iter().all(|h| h.0 == 1), "{args:?}");
    }
    // Not looked for: not a word about it.
    let o = dump(&device, &path, &["--no-vmcoreinfo"]);
    assert!(
        o.status.success() && stderr(&o).is_empty(),
        "{}",
        stderr(&o)
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn dumps_of_ram_and_of_an_address_space_hold_the_right_bytes() {
    let image = Image::new(16 * MIB);
    let dir = tempfile::tempdir().unwrap();
    let elf_path = dir.path().join("ram.elf");
    let o = dump(&image.device(), &elf_path, &["--range", "0x3000-0x25000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    readelf_clean(&elf_path);
    let elf = std::fs::read(&elf_path).unwrap();
    let loads = program_headers(&elf);
    assert_eq!(loads.len(), 1);
    let (kind, offset, vaddr, paddr, size) = loads[0];
    assert_eq!((kind, vaddr, paddr, size), (1, 0x3000, 0x3000, 0x22000));
    assert!(elf[offset as usize..(offset + size) as usize] == image.bytes(0x3000, 0x22000)[..]);

    // Raw, running past the end of memory: the hole is zeros.
    let raw_path = dir.path().join("tail.raw");
    let start = image.size - 0x2000;
    let o = dump(
        &image.device(),
        &raw_path,
        &[
            "--format",
            "raw",
            "--range",
            &format!("{start:#x}-{:#x}", image.size + 0x3000),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let raw = std::fs::read(&raw_path).unwrap();
    assert_eq!(raw.len(), 0x5000, "the whole range, holes included");
    assert_eq!(raw[..0x2000], image.bytes(start, 0x2000)[..]);
    assert!(raw[0x2000..].iter().all(|&b| b == 0));

    // An address space: one PT_LOAD per mapped range, virtual and physical.
    let SpacesImage {
        _dir: _d,
        device,
        dtbs,
        ..
    } = spaces_image();
    let space_path = dir.path().join("space.elf");
    let o = leechio(&[
        "-d",
        &device,
        "dump",
        "--dtb",
        &format!("{:#x}", dtbs[1]),
        "-o",
        space_path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let elf = std::fs::read(&space_path).unwrap();
    let loads = program_headers(&elf);
    let image_path = device.strip_prefix("file://").unwrap();
    let mut covered = Vec::new();
    for (_, offset, vaddr, paddr, size) in &loads {
        assert!(
            elf[*offset as usize..(offset + size) as usize]
                == read_file_at(Path::new(image_path), *paddr, *size as usize)[..]
        );
        covered.push((*vaddr, *size));
    }
    assert!(
        covered.contains(&(KERNEL_TEXT, 4 * 0x20_0000)),
        "{covered:x?}"
    );
    // The last page, its last byte included.
    assert!(covered.contains(&(TOP_PAGE, 0x1000)), "{covered:x?}");
    assert_eq!(
        covered
            .iter()
            .filter(|(va, _)| *va < KERNEL_TEXT)
            .map(|(_, s)| s)
            .sum::<u64>(),
        4 * 0x1000
    );

    // A mapped page that cannot be read: no segment shows it (a reader
    // must not take it for a page of zeros), and it is listed aside.
    let path = dir.path().join("third.elf");
    let o = leechio(&[
        "-d",
        &device,
        "dump",
        "--dtb",
        &format!("{:#x}", dtbs[2]),
        "-o",
        path.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(
        (
            summary["failed_bytes"].as_u64(),
            summary["failed_ranges"].as_u64()
        ),
        (Some(0x1000), Some(1))
    );
    readelf_clean(&path);
    let elf = std::fs::read(&path).unwrap();
    // "bytes" are those read, all in segments, as the text output says
    // too.
    let read: u64 = program_headers(&elf).iter().map(|h| h.4).sum();
    assert_eq!(summary["bytes"].as_u64(), Some(read), "{summary}");
    let o = leechio(&[
        "-d",
        &device,
        "dump",
        "--dtb",
        &format!("{:#x}", dtbs[2]),
        "-o",
        path.to_str().unwrap(),
    ]);
    assert!(
        stdout(&o).contains(&format!(": {read} bytes in ")),
        "{}",
        stdout(&o)
    );
    let over = |h: &(u32, u64, u64, u64, u64)| h.2 < BEYOND + 0x1000 && BEYOND < h.2 + h.4;
    assert!(
        !program_headers(&elf).iter().any(over),
        "a PT_LOAD over the failed page: {:x?}",
        program_headers(&elf)
    );
    let listed = std::fs::read_to_string(dir.path().join("third.elf.failed")).unwrap();
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(&format!("{BEYOND:#x} {:#x} ", BEYOND + 0x1000))),
        "{listed}"
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn the_last_byte_of_the_address_space_is_read_and_dumped() {
    let SpacesImage {
        _dir, device, dtbs, ..
    } = spaces_image();
    let image_path = Path::new(device.strip_prefix("file://").unwrap());
    let frame = read_file_at(image_path, TOP_FRAME, 0x1000);
    let dtb = format!("{:#x}", dtbs[0]);
    let dir = tempfile::tempdir().unwrap();
    // A raw range ending at 2^64: the page below is a hole, the top page
    // is there to its last byte.
    let raw = dir.path().join("top.raw");
    let o = leechio(&[
        "-d",
        &device,
        "dump",
        "--dtb",
        &dtb,
        "--format",
        "raw",
        "--range",
        "0xffff_ffff_ffff_e000-0x1_0000_0000_0000_0000",
        "-o",
        raw.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = std::fs::read(&raw).unwrap();
    assert_eq!(bytes.len(), 0x2000);
    assert!(bytes[..0x1000].iter().all(|&b| b == 0));
    assert!(bytes[0x1000..] == frame[..]);
    // `read` of the last 8 bytes.
    let o = leechio(&[
        "-d",
        &device,
        "--json",
        "read",
        "--dtb",
        &dtb,
        "0xffff_ffff_ffff_fff8",
        "8",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let line: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let hex: String = frame[0xff8..].iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(line["data"], hex, "{line}");
    // Past 2^64 there is no address space.
    let o = dump(
        &device,
        dir.path().join("past"),
        &["--dtb", &dtb, "--range", "0-0x1_0000_0000_0000_0001"],
    );
    assert_refused(&o, "past the end of the address space");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn failed_bytes_are_holes_that_take_no_disk_space() {
    use std::os::unix::fs::MetadataExt;
    let SpacesImage {
        _dir, device, dtbs, ..
    } = spaces_image();
    let dir = tempfile::tempdir().unwrap();
    // The third space's page past the end of the image, alone.
    let raw = dir.path().join("beyond.raw");
    let o = dump(
        &device,
        &raw,
        &[
            "--dtb",
            &format!("{:#x}", dtbs[2]),
            "--format",
            "raw",
            "--range",
            &format!("{BEYOND:#x}-{:#x}", BEYOND + 0x1000),
        ],
    );
    assert_refused(&o, "nothing could be read");
    let meta = std::fs::metadata(&raw).unwrap();
    assert_eq!(meta.len(), 0x1000);
    assert_eq!(meta.blocks(), 0, "the failed page was written out");
    assert!(std::fs::read(&raw).unwrap().iter().all(|&b| b == 0));
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_failed_list_that_is_the_output_is_refused() {
    let image = Image::new(16 * MIB);
    let dir = tempfile::tempdir().unwrap();
    // A new output whose `.failed` name links to it: nothing is created.
    let out = dir.path().join("x");
    std::os::unix::fs::symlink(&out, dir.path().join("x.failed")).unwrap();
    let o = dump(&image.device(), &out, &["--range", "0x1000-0x3000"]);
    assert_refused(&o, "itself (a link)");
    assert!(!out.exists(), "the output was left behind");
    // An existing output, hard-linked: left as it was.
    let kept = dir.path().join("kept");
    std::fs::write(&kept, b"old content").unwrap();
    std::fs::hard_link(&kept, dir.path().join("kept.failed")).unwrap();
    let o = dump(&image.device(), &kept, &["--range", "0x1000-0x3000"]);
    assert_refused(&o, "itself (a link)");
    assert_eq!(std::fs::read(&kept).unwrap(), b"old content");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn bad_input_gives_a_message_and_a_nonzero_exit() {
    let image = Image::new(16 * MIB);
    let dev = image.device();
    assert_refused(
        &leechio(&["-d", "nosuch://device", "info"]),
        "unknown device type `nosuch`",
    );
    assert_refused(
        &leechio(&["-d", "file:///no/such/file.raw", "info"]),
        "No such file",
    );
    assert_refused(&leechio(&["info"]), "no device");
    // The input at fault is named: the remote, the folder, the RAM file.
    assert_refused(
        &leechio(&["-d", &dev, "--remote", "bogus://x", "info"]),
        "the remote `bogus://x` is the likely cause",
    );
    let dir = tempfile::tempdir().unwrap();
    let folder = format!("file://{}", dir.path().display());
    assert_refused(&leechio(&["-d", &folder, "info"]), "is a folder");
    assert_refused(
        &leechio(&[
            "-d",
            "qemu://shm=leechio-cli-no-such-guest,qmp=/tmp/leechio-cli-no-such.qmp",
            "info",
        ]),
        "guest RAM file /dev/shm/leechio-cli-no-such-guest does not exist",
    );
    assert_refused(
        &leechio(&["-d", &dev, "read", "0x10000000000", "8"]),
        "unreadable",
    );
    assert_refused(&leechio(&["-d", &dev, "read", "zz", "8"]), "not a number");
    assert_refused(
        &dump(&dev, "/tmp/x.elf", &["--range", "0x5000-0x1000"]),
        "backwards",
    );
    assert_refused(
        &dump(&dev, "/tmp/x.elf", &["--range", "0x100000000-0x100001000"]),
        "past the end",
    );
    assert_refused(
        &dump(&dev, "/nonexistent/dir/x.elf", &[]),
        "cannot write /nonexistent/dir/x.elf",
    );
    assert_refused(
        &leechio(&["-d", &dev, "translate", "--dtb", "0x1000", "0x1234"]),
        "",
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn bench_counts_the_calls_each_path_makes() {
    let SpacesImage {
        _dir, device, dtbs, ..
    } = spaces_image();
    // Writable, for the pointer chains (in a region nothing else uses).
    let path = device.strip_prefix("file://").unwrap();
    let writable = format!("file://file={path},write=1");
    let before = std::fs::read(path).unwrap();
    let undo = _dir.path().join("chains.undo");
    let o = leechio(&[
        "-d",
        &writable,
        "bench",
        "--runs",
        "1",
        "--json",
        "--dtb",
        &format!("{:#x}", dtbs[0]),
        "--chains-at",
        "0x1800000",
        "--undo-file",
        undo.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}\n{}", stderr(&o), stdout(&o));
    let rows: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let calls = |workload: &str, method: &str| -> u64 {
        rows.iter()
            .find(|r| {
                r["workload"].as_str().unwrap().starts_with(workload)
                    && r["method"].as_str().unwrap().starts_with(method)
            })
            .unwrap_or_else(|| panic!("no row {workload} / {method}: {rows:#?}"))["calls"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(calls("4 KiB random", "limit"), 1);
    assert_eq!(calls("4 KiB random", "engine"), 1);
    assert_eq!(
        calls("4 KiB random", "engine: joined futures in a scope"),
        1
    );
    assert_eq!(calls("4 KiB random", "plugin"), 1);
    assert_eq!(calls("4 KiB random", "memflow: read by read"), 4096);
    assert_eq!(calls("8-byte random", "engine"), 1);
    assert_eq!(calls("64 pointer chains", "limit"), 8);
    assert_eq!(calls("64 pointer chains", "engine"), 8);
    assert_eq!(calls("64 pointer chains", "memflow: read by read"), 512);
    assert_eq!(calls("64 pointer chains", "memflow: hand-batched"), 8);
    assert!(calls("4096 random kernel virtual reads, cold", "engine") <= 5);
    assert_eq!(calls("4096 random kernel virtual reads, warm", "engine"), 1);
    assert_eq!(calls("4096 random kernel virtual reads, warm", "limit"), 1);
    assert!(
        calls(
            "4096 random kernel virtual reads, cold",
            "memflow VirtualDma: read by read"
        ) >= 4096
    );
    assert_eq!(calls("dump of 8 MiB", "limit"), 1);
    // No Linux kernel in this image: no process-list rows, and why.
    assert!(
        stderr(&o).contains("leechio: bench: no process-list rows: no Linux kernel found: "),
        "{}",
        stderr(&o)
    );
    assert!(
        !rows.iter().any(|r| r["processes"].is_number()),
        "{rows:#?}"
    );
    // The chain region is restored, and its undo file gone.
    assert!(
        std::fs::read(path).unwrap() == before,
        "bench left the image changed"
    );
    assert!(!undo.exists(), "the undo file was left");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn bench_chains_on_a_read_only_device_are_refused_and_change_nothing() {
    let SpacesImage {
        _dir, device, dtbs, ..
    } = spaces_image();
    let path = device.strip_prefix("file://").unwrap();
    let before = std::fs::read(path).unwrap();
    let undo = _dir.path().join("chains.undo");
    let o = leechio(&[
        "-d",
        &device,
        "bench",
        "--runs",
        "1",
        "--dtb",
        &format!("{:#x}", dtbs[0]),
        "--chains-at",
        "0x1800000",
        "--undo-file",
        undo.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cannot write the chains at 0x1800000: is the device writable")
            && !stderr(&o).contains("could not be undone"),
        "{}",
        stderr(&o)
    );
    assert!(std::fs::read(path).unwrap() == before, "the image changed");
    assert!(!undo.exists(), "an undo file of nothing changed was left");
}

/// A `leechio bench` writing its pointer chains at 16 MiB of a writable
/// image, with 1000 runs a row: it runs far longer than any test waits.
fn bench_with_chains(image: &Image, dir: &Path, undo: Option<&Path>) -> Command {
    let device = format!("file://file={},write=1", image.path.display());
    let mut cmd = leechio_command();
    cmd.args([
        "-d",
        &device,
        "bench",
        "--runs",
        "1000",
        "--chains-at",
        "0x1000000",
    ])
    .current_dir(dir)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if let Some(undo) = undo {
        cmd.arg("--undo-file").arg(undo);
    }
    cmd
}

/// Starts `cmd` and waits (60 s at most) for its line saying the chains
/// are in target memory; its stderr lines come on the receiver.
fn start_until_chains_written(cmd: &mut Command) -> (Child, Receiver<String>) {
    let mut child = cmd.spawn().expect("run leechio");
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.starts_with("leechio: pointer chains written at 0x1000000") => {
                return (child, rx)
            }
            Ok(_) => {}
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "no line about the chains within 60 s: {:?}",
                    child.wait_with_output()
                );
            }
        }
    }
}

/// Waits for `child` to end; one still running after `limit` is killed,
/// which fails the test.
fn wait_within(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("leechio still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_termination_signal_takes_the_bench_chains_out_of_target_memory() {
    let image = Image::new(32 * MIB);
    let before = std::fs::read(&image.path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let undo = dir.path().join("chains.undo");
    for sig in [
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGRTMIN() + 1,
    ] {
        let (mut child, stderr) =
            start_until_chains_written(&mut bench_with_chains(&image, dir.path(), Some(&undo)));
        assert!(
            std::fs::read(&image.path).unwrap() != before && undo.exists(),
            "signal {sig}: the chains are not in the image, or their undo file is missing"
        );
        // SAFETY: a signal to a child of this test.
        assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
        let status = wait_within(&mut child, Duration::from_secs(30));
        // Its stderr closed when it ended: this ends.
        let lines: Vec<String> = stderr.iter().collect();
        assert_eq!(status.code(), Some(128 + sig), "signal {sig}: {lines:?}");
        assert!(
            std::fs::read(&image.path).unwrap() == before,
            "signal {sig} left the image changed"
        );
        assert!(!undo.exists(), "signal {sig}: the undo file was left");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("leechio: bench stopped by ")),
            "signal {sig}: {lines:?}"
        );
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_closed_stderr_ends_the_bench_only_after_its_chains_are_out() {
    let image = Image::new(32 * MIB);
    let before = std::fs::read(&image.path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let undo = dir.path().join("chains.undo");
    let mut child = bench_with_chains(&image, dir.path(), Some(&undo))
        .spawn()
        .unwrap();
    // Its first line, saying the chains are written, then meets a closed
    // pipe.
    drop(child.stderr.take());
    let status = wait_within(&mut child, Duration::from_secs(30));
    assert_eq!(status.signal(), Some(libc::SIGPIPE), "{status:?}");
    assert!(
        std::fs::read(&image.path).unwrap() == before,
        "the image was left changed"
    );
    assert!(!undo.exists(), "the undo file was left");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn after_a_sigkill_leechio_restore_puts_target_memory_back() {
    let image = Image::new(32 * MIB);
    let before = std::fs::read(&image.path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Without --undo-file: in the current folder, named after the address.
    let undo = dir.path().join("leechio-chains-0x1000000.undo");
    let (mut child, _) =
        start_until_chains_written(&mut bench_with_chains(&image, dir.path(), None));
    child.kill().unwrap();
    assert_eq!(
        wait_within(&mut child, Duration::from_secs(30)).signal(),
        Some(libc::SIGKILL)
    );
    let killed = std::fs::read(&image.path).unwrap();
    assert!(killed != before, "the chains are not in the image");
    assert!(undo.exists(), "no undo file");

    // Another bench refuses to save over it, and leaves the image be.
    let again = bench_with_chains(&image, dir.path(), None)
        .output()
        .unwrap();
    assert_refused(
        &again,
        &format!(
            "leechio: the undo file {} exists: a run that could not put target memory back left \
             it; run `leechio restore {}` first",
            undo.display(),
            undo.display()
        ),
    );
    assert!(std::fs::read(&image.path).unwrap() == killed);

    // The device comes from the file.
    let restored = leechio(&["restore", undo.to_str().unwrap()]);
    assert!(restored.status.success(), "{}", stderr(&restored));
    assert_eq!(
        stdout(&restored),
        format!(
            "restored 2097152 bytes at 0x1000000 on file://file={},write=1; removed {}\n",
            image.path.display(),
            undo.display()
        )
    );
    assert!(
        std::fs::read(&image.path).unwrap() == before,
        "not put back"
    );
    assert!(!undo.exists(), "the undo file was left");
    assert_refused(
        &leechio(&["restore", undo.to_str().unwrap()]),
        &format!("cannot read {}: No such file", undo.display()),
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn restore_keeps_the_undo_file_until_the_bytes_are_back() {
    let image = Image::new(16 * MIB);
    let dir = tempfile::tempdir().unwrap();
    let undo = dir.path().join("hand-made.undo");
    // The format as cli/src/undo.rs describes it.
    let saved = vec![0x5a; 0x2000];
    let mut file = format!(
        "{{\"leechio_undo\":1,\"device\":\"{}\",\"remote\":null,\"address\":\"0x3000\",\"length\":8192}}\n",
        image.device()
    )
    .into_bytes();
    file.extend(&saved);
    std::fs::write(&undo, &file).unwrap();
    let undo_arg = undo.to_str().unwrap();

    // The device the file names is read-only: nothing lands, the file stays.
    let o = leechio(&["restore", undo_arg]);
    assert_refused(
        &o,
        &format!(
            "leechio: could not write target memory back at 0x3000; what was there is saved in \
             {undo_arg}: `leechio restore {undo_arg}` puts it back"
        ),
    );
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(undo.exists());
    assert_eq!(image.bytes(0x3000, 0x2000), pattern_bytes(0x3000, 0x2000));

    // --device wins over the file's.
    let writable = format!("file://file={},write=1", image.path.display());
    let o = leechio(&["-d", &writable, "restore", undo_arg]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(image.bytes(0x3000, 0x2000), saved);
    assert_eq!(image.bytes(0x5000, 0x1000), pattern_bytes(0x5000, 0x1000));
    assert!(!undo.exists());
}

/// The bytes [`Image::new`] writes at `offset`.
fn pattern_bytes(offset: u64, len: usize) -> Vec<u8> {
    (offset..offset + len as u64)
        .step_by(8)
        .flat_map(|a| common::pattern_word(a).to_le_bytes())
        .collect()
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn dump_refuses_to_write_over_its_own_image() {
    let image = Image::new(16 * MIB);
    let path = image.path.to_str().unwrap().to_string();
    let before = std::fs::read(&image.path).unwrap();
    let dir = image.path.parent().unwrap();
    let link = dir.join("link.raw");
    std::os::unix::fs::symlink(&image.path, &link).unwrap();
    let hard = dir.join("hard.raw");
    std::fs::hard_link(&image.path, &hard).unwrap();
    // The `.failed` list beside the output is created too.
    std::fs::hard_link(&image.path, dir.join("out.failed")).unwrap();
    let out = dir.join("out");
    let cases = [
        (image.device(), path.clone()),
        (
            format!("file://file={path},write=1"),
            link.display().to_string(),
        ),
        (path.clone(), format!("{}/./memory.raw", dir.display())),
        (format!("file://{}", hard.display()), path.clone()),
        (image.device(), out.display().to_string()),
    ];
    for (device, output) in &cases {
        for format in ["raw", "elf"] {
            let o = dump(device, output, &["--format", format]);
            assert_refused(&o, "refusing to write");
            assert_eq!(o.status.code(), Some(1), "{device} -o {output}");
            assert!(
                std::fs::read(&image.path).unwrap() == before,
                "{device} -o {output}: the image changed"
            );
        }
    }
    assert!(!out.exists(), "nothing was created");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn dump_refuses_outputs_that_are_not_regular_files_and_leaves_them_be() {
    use std::os::unix::fs::FileTypeExt;
    let image = Image::new(16 * MIB);
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe");
    make_fifo(&fifo);
    // A reader, so that a dump that opened the pipe would not block.
    let _reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&fifo, &link).unwrap();
    let folder = dir.path().join("folder");
    std::fs::create_dir(&folder).unwrap();
    // The `.failed` list beside a regular output counts too.
    std::fs::create_dir(dir.path().join("out.raw.failed")).unwrap();
    let cases = [
        (&fifo, &fifo, "a pipe"),
        (&link, &link, "a pipe"),
        (&folder, &folder, "a folder"),
        (
            &dir.path().join("out.raw"),
            &dir.path().join("out.raw.failed"),
            "a folder",
        ),
    ];
    for (output, named, kind) in cases {
        let o = dump(&image.device(), output, &[]);
        assert_refused(
            &o,
            &format!("refusing to write {}: it is {kind}", named.display()),
        );
        assert_eq!(o.status.code(), Some(1));
    }
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(folder.is_dir() && !dir.path().join("out.raw").exists());
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn dump_exits_nonzero_only_when_nothing_could_be_read() {
    let SpacesImage {
        _dir, device, dtbs, ..
    } = spaces_image();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("beyond.elf");
    let dump_range = |start: u64, end: u64| {
        let (dtb, range) = (format!("{:#x}", dtbs[2]), format!("{start:#x}-{end:#x}"));
        dump(&device, &path, &["--dtb", &dtb, "--range", &range])
    };
    // Only the page mapped past the end of the image: every byte fails.
    let o = dump_range(BEYOND, BEYOND + 0x1000);
    assert_refused(&o, "nothing could be read");
    assert_eq!(o.status.code(), Some(1));
    // The same page with readable ones: holes are normal, exit 0 (the
    // whole space's dump in the test above also asserts it).
    let o = dump_range(USER_BASE, BEYOND + 0x1000);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_wrong_dtb_gives_a_few_lines_not_one_per_unreadable_table() {
    // Random words as a top-level table: about half are present; of those
    // about half have PS set, which a CPU faults on in a PML4 entry, and
    // the rest point to a table past the end of the 16 MiB image.
    let image = Image::new(16 * MIB);
    let dtb = 0x1000u64;
    let present: Vec<(u64, u64)> = (0..512)
        .map(|i| (i, common::pattern_word(dtb + 8 * i)))
        .filter(|(_, e)| e & 1 != 0)
        .collect();
    assert!(
        present
            .iter()
            .all(|(_, e)| e & 0x80 != 0 || e & 0x000f_ffff_ffff_f000 >= image.size),
        "a table inside the image"
    );
    let faulting = present.iter().filter(|(_, e)| e & 0x80 != 0).count();
    assert!(
        faulting > 3 && present.len() - faulting > 3,
        "{faulting} of {}",
        present.len()
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("space.elf");
    // Such a page is a top table in neither mode: said in one line.
    let o = dump(&image.device(), &path, &["--dtb", &format!("{dtb:#x}")]);
    assert_refused(
        &o,
        "the tables at 0x1000 fit neither mode: read as 4-level, PML4E ",
    );
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(!path.exists());
    // Read as 4-level all the same: a line per kind of failure.
    let o = dump(
        &image.device(),
        &path,
        &["--dtb", &format!("{dtb:#x}"), "--paging", "4"],
    );
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 5, "{err}");
    // The first three by address, each 512 GiB (all in the lower half).
    for (line, &(i, e)) in lines[..3].iter().zip(&present) {
        let why = if e & 0x80 != 0 {
            "map nothing: page-table entry with reserved bits set (a CPU would fault)"
        } else {
            "unreadable: address past the end of the device's memory"
        };
        assert_eq!(
            *line,
            format!(
                "leechio: page tables for {:#x}..{:#x} {why}",
                i << 39,
                (i + 1) << 39
            )
        );
    }
    let more = present.len() - 3;
    assert_eq!(
        lines[3],
        format!(
            "leechio: page tables for {more} more ranges ({:.1} TiB of address space) unreadable or mapping nothing too",
            (more * 512) as f64 / 1024.0
        )
    );
    assert_eq!(
        lines[4],
        format!("leechio: nothing to dump: the address space of --dtb {dtb:#x} maps no memory")
    );
    assert!(!path.exists());
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_dump_of_a_root_outside_memory_says_so() {
    let SpacesImage { _dir, device, .. } = spaces_image();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("space.elf");
    // The image is 32 MiB: the root lies past its end.
    let o = dump(&device, &path, &["--dtb", "0x5000000"]);
    assert_refused(
        &o,
        "the page-table root 0x5000000 (--dtb) is unreadable: address past the end of the device's memory (memory ends at 0x2000000)",
    );
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(!path.exists());
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn dump_checks_the_size_of_its_file_before_dumping() {
    let image = Image::new(16 * MIB);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.raw");
    let failed = dir.path().join("huge.raw.failed");
    let o = dump(
        &image.device(),
        &path,
        &["--format", "raw", "--range", "0-0xffffffffffffffff"],
    );
    assert_refused(
        &o,
        &format!("{} would be 0xffffffffffffffff bytes", path.display()),
    );
    assert!(!path.exists() && !failed.exists());

    // A file system (here: a file size limit) that cannot hold the file
    // says so before anything is read, naming the file.
    let o = raw_dump_of_2_mib_under_a_1_mib_limit(&image, &path);
    assert_refused(
        &o,
        &format!(
            "cannot make {} 0x200000 bytes (2.0 MiB) long",
            path.display()
        ),
    );
    assert!(stderr(&o).contains("File too large"), "{}", stderr(&o));
    assert!(!path.exists() && !failed.exists(), "nothing is left behind");
}

/// Runs `leechio` with a file size limit of `limit` bytes (writes past it
/// fail with EFBIG, as on a file system that cannot hold the file).
fn leechio_with_file_limit(args: &[&str], limit: u64) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leechio"));
    cmd.args(args);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.output().unwrap()
}

/// A raw dump of the first 2 MiB of `image` into `path`, which a 1 MiB
/// file-size limit refuses.
fn raw_dump_of_2_mib_under_a_1_mib_limit(image: &Image, path: &Path) -> Output {
    leechio_with_file_limit(
        &[
            "-d",
            &image.device(),
            "dump",
            "--format",
            "raw",
            "--range",
            "0-0x200000",
            "-o",
            path.to_str().unwrap(),
        ],
        MIB,
    )
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_dump_whose_first_write_fails_leaves_no_file() {
    let image = Image::new(16 * MIB);
    let dir = tempfile::tempdir().unwrap();
    for (format, first) in [
        ("elf", "the ELF headers' place"),
        ("raw", "the first bytes"),
    ] {
        let path = dir.path().join(format!("ram.{format}"));
        let failed = dir.path().join(format!("ram.{format}.failed"));
        // Files as long as the dump, whose size then takes no write: under
        // a limit of 0 bytes, the first write is the one that fails.
        std::fs::File::create(&path)
            .unwrap()
            .set_len(32 * MIB)
            .unwrap();
        std::fs::write(&failed, "old list\n").unwrap();
        let o = leechio_with_file_limit(
            &[
                "-d",
                &image.device(),
                "dump",
                "--format",
                format,
                "--no-vmcoreinfo",
                "-o",
                path.to_str().unwrap(),
            ],
            0,
        );
        assert_refused(&o, &format!("writing {}: File too large", path.display()));
        assert_refused(&o, "removed (a dump leaves a valid file or none)");
        assert_eq!(stderr(&o).lines().count(), 1, "{first}: {}", stderr(&o));
        assert!(
            !path.exists() && !failed.exists(),
            "{first} failed, and a file is left"
        );
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_refused_dump_leaves_existing_files_as_they_were() {
    let image = Image::new(16 * MIB);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("precious.raw");
    let failed = dir.path().join("precious.raw.failed");
    std::fs::write(&path, "precious\n").unwrap();
    std::fs::write(&failed, "old list\n").unwrap();
    let too_large = || raw_dump_of_2_mib_under_a_1_mib_limit(&image, &path);
    assert_refused(&too_large(), "File too large");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious\n");
    assert_eq!(std::fs::read_to_string(&failed).unwrap(), "old list\n");
    // Nor does it leave a new failed list behind.
    std::fs::remove_file(&failed).unwrap();
    assert_refused(&too_large(), "File too large");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious\n");
    assert!(!failed.exists(), "a new failed list was left");

    // A dump that goes ahead replaces the file: no old byte is left, and
    // the holes (here past the end of memory) read as zeros.
    std::fs::write(&path, vec![0xff; 0x10000]).unwrap();
    let start = image.size - 0x1000;
    let o = dump(
        &image.device(),
        &path,
        &[
            "--format",
            "raw",
            "--range",
            &format!("{start:#x}-{:#x}", start + 0x3000),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let raw = std::fs::read(&path).unwrap();
    assert_eq!(raw.len(), 0x3000);
    assert_eq!(raw[..0x1000], image.bytes(start, 0x1000)[..]);
    assert!(raw[0x1000..].iter().all(|&b| b == 0), "stale bytes");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn an_unwritable_failed_list_is_found_before_the_dump() {
    let image = Image::new(16 * MIB);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.elf");
    let failed = dir.path().join("out.elf.failed");
    // A place that cannot be created even by root: inside no folder.
    std::os::unix::fs::symlink(dir.path().join("no/such/folder"), &failed).unwrap();
    let dump_once = || dump(&image.device(), &path, &[]);
    let o = dump_once();
    assert_refused(&o, &format!("cannot write {}", failed.display()));
    assert!(!path.exists(), "refused before the dump was written");
    // An output that was there stays as it was.
    std::fs::write(&path, "precious\n").unwrap();
    assert_refused(&dump_once(), &format!("cannot write {}", failed.display()));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious\n");
}

/// A tmpfs of a given size mounted on a temporary folder, unmounted on
/// drop: a disk that fills up.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// Mounts it, or says why it cannot (mounting needs root).
    fn mount(size: u64) -> Result<SmallDisk, String> {
        let dir = tempfile::tempdir().unwrap();
        let c = |s: &str| std::ffi::CString::new(s).unwrap();
        let (source, target, fs, options) = (
            c("tmpfs"),
            c(dir.path().to_str().unwrap()),
            c("tmpfs"),
            c(&format!("size={size}")),
        );
        // SAFETY: valid C strings; mounts on a folder of this test's own.
        let rc = unsafe {
            libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                fs.as_ptr(),
                0,
                options.as_ptr().cast(),
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        Ok(SmallDisk { dir })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let target = std::ffi::CString::new(self.dir.path().to_str().unwrap()).unwrap();
        // SAFETY: a valid C string; the folder this test mounted on.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_disk_filling_up_ends_the_dump_with_a_valid_file() {
    let disk = match SmallDisk::mount(8 * MIB) {
        Ok(disk) => disk,
        Err(e) => {
            eprintln!("skipped: cannot mount a small tmpfs ({e}); run as root to test a full disk");
            return;
        }
    };
    let image = Image::new(16 * MIB);
    let path = disk.dir.path().join("ram.elf");
    // (No search for a kernel, whose line would join the error's.)
    let o = dump(&image.device(), &path, &["--no-vmcoreinfo"]);
    assert_refused(&o, "No space left on device");
    assert_refused(&o, "the dump stopped there");
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    // readelf takes the file, and its one segment holds what was written.
    let readelf = Command::new("readelf")
        .args(["-h", "-l", "-W"])
        .arg(&path)
        .output()
        .expect("run readelf");
    assert!(
        readelf.status.success() && readelf.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&readelf.stderr)
    );
    assert!(
        String::from_utf8_lossy(&readelf.stdout).contains("CORE (Core file)"),
        "{}",
        String::from_utf8_lossy(&readelf.stdout)
    );
    let elf = std::fs::read(&path).unwrap();
    let loads = program_headers(&elf);
    assert_eq!(loads.len(), 1, "{loads:x?}");
    let (_, offset, vaddr, _, size) = loads[0];
    assert!(size > 0 && size < image.size, "{size:#x}");
    assert_eq!(
        elf.len() as u64,
        offset + size,
        "the file ends with the segment"
    );
    assert!(elf[offset as usize..] == image.bytes(vaddr, size as usize)[..]);
    assert!(disk.dir.path().join("ram.elf.failed").exists());
}

/// (offset, vaddr, filesz, align) of each `LOAD` in `readelf -l -W` of
/// `path`, which must have nothing to complain about.
fn readelf_loads(path: &Path) -> Vec<(u64, u64, u64, u64)> {
    let o = Command::new("readelf")
        .args(["-l", "-W"])
        .arg(path)
        .output()
        .expect("run readelf");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && err.is_empty(), "{err}");
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("LOAD"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Offset VirtAddr PhysAddr FileSiz MemSiz Flg Align
            (hex(f[0]), hex(f[1]), hex(f[3]), hex(f[6]))
        })
        .collect()
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn an_unaligned_range_sits_at_an_offset_congruent_to_its_address() {
    let image = Image::new(16 * MIB);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("odd.elf");
    let o = dump(&image.device(), &path, &["--range", "0x9c001-0x9e003"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let loads = readelf_loads(&path);
    assert_eq!(loads.len(), 1, "{loads:x?}");
    let (offset, vaddr, size, align) = loads[0];
    assert_eq!((vaddr, size), (0x9c001, 0x2002));
    assert_eq!(offset % align, vaddr % align, "{loads:x?}");
    let elf = std::fs::read(&path).unwrap();
    assert!(
        elf[offset as usize..(offset + size) as usize] == image.bytes(vaddr, size as usize)[..]
    );
}

/// Runs `leechio read` of 1 MiB (megabytes of text, more than a pipe
/// holds) with stdout, and stderr too when `close_stderr`, a pipe closed
/// by its reader before the first byte: a reader like `head` that is done.
fn read_into_closed_pipe(device: &str, close_stderr: bool) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_leechio"))
        .args(["-d", device, "read", "0", "1m"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut err = String::new();
    if close_stderr {
        drop(child.stderr.take());
    } else {
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
    }
    (child.wait().unwrap(), err)
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_closed_output_pipe_ends_the_program_quietly() {
    let image = Image::new(16 * MIB);
    let (status, err) = read_into_closed_pipe(&image.device(), false);
    assert_eq!(status.signal(), Some(libc::SIGPIPE), "{status:?}: {err}");
    assert_eq!(err, "", "nothing said about the closed pipe");
    // `2>&1 | head`: the error, had there been one, could not be written
    // either; before, that panicked inside a panic and aborted.
    let (status, _) = read_into_closed_pipe(&image.device(), true);
    assert_eq!(status.signal(), Some(libc::SIGPIPE), "{status:?}");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn a_virtual_read_says_whether_translation_or_the_data_failed() {
    let SpacesImage {
        _dir, device, dtbs, ..
    } = spaces_image();
    // The root table lies past the end of the 32 MiB image: said so at
    // once, as its paging mode cannot be found either; read as 4-level,
    // each range names the entry.
    let o = leechio(&["-d", &device, "read", "0x1000", "16", "--dtb", "0x5000000"]);
    assert_refused(&o, "leechio: the page-table root 0x5000000 is unreadable: ");
    let o = leechio(&[
        "-d",
        &device,
        "read",
        "0x1000",
        "16",
        "--dtb",
        "0x5000000",
        "--paging",
        "4",
    ]);
    assert_refused(
        &o,
        "0x1000..0x1010 unreadable: not translated: the page-table entry PML4E at physical 0x5000000 is unreadable",
    );
    // Mapped, but to a frame past the end: the data failed, not the walk.
    let o = leechio(&[
        "-d",
        &device,
        "read",
        &format!("{BEYOND:#x}"),
        "16",
        "--dtb",
        &format!("{:#x}", dtbs[2]),
    ]);
    assert_refused(&o, "(physical 0x40000000)");
    assert!(!stderr(&o).contains("not translated"), "{}", stderr(&o));
    // Not mapped: where the walk found nothing.
    let o = leechio(&[
        "-d",
        &device,
        "read",
        "0x1000",
        "8",
        "--dtb",
        &format!("{:#x}", dtbs[0]),
    ]);
    assert_refused(&o, "not translated: virtual address not mapped (the PML4E at physical 0x1000000 is not present)");
}

#[test]
fn bad_numbers_and_a_missing_device_are_named() {
    let image = Image::new(16 * MIB);
    let dev = image.device();
    assert_refused(
        &dump(&dev, "/tmp/x.elf", &["--range=-0x1000"]),
        "range `-0x1000` has no start",
    );
    assert_refused(
        &leechio(&["-d", &dev, "read", "0x1000", "0"]),
        "`0` is no length: give 1 or more bytes",
    );
    assert_refused(&leechio(&["-d", "", "info"]), "the device string is empty");
    assert_refused(
        &leechio(&["-d", &dev, "read", "0", "4kbbb"]),
        "`4kbbb` is not a size: `kbbb` after the number is not a unit",
    );
    let without_device = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_leechio"))
            .args(args)
            .env_remove("LEECHIO_DEVICE")
            .output()
            .unwrap()
    };
    let info = without_device(&["info"]);
    assert_refused(&info, "give --device or set LEECHIO_DEVICE (e.g.");
    assert_eq!(stderr(&info), stderr(&without_device(&["read", "0", "8"])));
    assert_eq!(stderr(&info), stderr(&without_device(&["bench"])));
}

/// An FPGA board that does not open is explained from what the machine
/// shows (`src/backend/leechcore/fpga.rs` tests each cause on crafted
/// sysfs trees): here, where no board is plugged in, the USB bus's word,
/// not LeechCore's silence alone.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn an_fpga_board_that_does_not_open_says_why() {
    let o = leechio(&["-d", "fpga", "info"]);
    assert_eq!(o.status.code(), Some(1));
    let said = stderr(&o);
    assert!(
        said.starts_with("leechio: LeechCore could not open device `fpga`: "),
        "{said}"
    );
    let causes = [
        "no FPGA board on the USB bus: no FT601 (USB id 0403:601f)",
        "cannot list the USB devices (/sys/bus/usb/devices",
    ];
    assert!(causes.iter().any(|c| said.contains(c)), "{said}");
    assert_eq!(said.lines().count(), 1, "{said}");
}

/// A number, size or range that does not parse is one line that names it,
/// as docs/cli.md promises for bad input, without clap's pointer to --help.
#[test]
fn a_bad_number_size_or_range_is_one_line() {
    let image = Image::new(16 * MIB);
    let dev = image.device();
    for (o, needle) in [
        (
            dump(&dev, "/tmp/x.elf", &["--range", "0x5000-0x1000"]),
            "range `0x5000-0x1000` is empty or backwards",
        ),
        (
            leechio(&["-d", &dev, "read", "zz", "8"]),
            "`zz` is not a number",
        ),
        (
            leechio(&["-d", &dev, "read", "0", "4kbbb"]),
            "`4kbbb` is not a size",
        ),
    ] {
        assert_refused(&o, needle);
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    }
}

/// Runs `leechio ARGS…` with the environment variables `envs`, killed
/// if it has not ended within `limit`, which fails the test.
fn leechio_within(args: &[&str], envs: &[(&str, &Path)], limit: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_leechio"))
        .args(args)
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run leechio");
    wait_within(&mut child, limit);
    child.wait_with_output().unwrap()
}

#[test]
fn a_library_that_is_a_pipe_is_refused_at_once() {
    let image = Image::new(16 * MIB);
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("leechcore.so");
    make_fifo(&fifo);
    let fifo_arg = fifo.to_str().unwrap();
    let device = image.device();
    let by_option = ["--lib", fifo_arg, "-d", &device, "info"];
    let by_variable = ["-d", &device, "info"];
    for (args, envs) in [
        (&by_option[..], &[][..]),
        (&by_variable[..], &[("LEECHCORE_LIB", fifo.as_path())][..]),
    ] {
        let o = leechio_within(args, envs, Duration::from_secs(10));
        assert_refused(&o, &format!("{fifo_arg} ("));
        assert_refused(
            &o,
            "): not a regular file (a pipe, a device or a socket), so not a library",
        );
    }
}

#[test]
fn bench_uses_the_given_library() {
    let image = Image::new(16 * MIB);
    let o = leechio(&[
        "-d",
        &image.device(),
        "--lib",
        "/nonexistent/leechcore.so",
        "bench",
        "--runs",
        "1",
    ]);
    assert_refused(&o, "/nonexistent/leechcore.so");
}
