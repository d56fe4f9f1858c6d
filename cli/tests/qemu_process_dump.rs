//! `leechio dump --pid` of a live Linux guest's processes, page by page
//! against QEMU: every page of every VMA the guest's /proc listed is
//! walked through the process's page tables in RAM as QEMU's `pmemsave`
//! gives it (the guest paused), and the dump must hold each mapped page
//! with exactly those bytes, leave out (and list) each one that is not
//! mapped, and hold each physical page's bytes once however often the
//! process maps it.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::elf_tools::{gdb_reads, readelf_clean};
use common::qemu::{shared_guest, Guest, GuestOptions};
use leechio::MemoryMap;
use serde_json::Value;

const PAGE: u64 = 0x1000;
/// Physical address bits of a page-table entry.
const ADDRESS: u64 = 0x000f_ffff_ffff_f000;
const PT_LOAD: u32 = 1;
/// How long one run may take (LeechCore opens the qemu device in ~1 s).
const RUN_LIMIT: Duration = Duration::from_secs(120);

fn leechio(args: &[&str]) -> Output {
    common::run_within(env!("CARGO_BIN_EXE_leechio"), args, RUN_LIMIT)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("{s:?}"))
}

/// Whether the guest's CPU uses 5-level paging (CR4.LA57, bit 12), per
/// the monitor's `info registers`.
fn la57(registers: &str) -> bool {
    let at = registers.find("CR4=").expect("CR4 in info registers") + 4;
    let digits: String = registers[at..]
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect();
    u64::from_str_radix(&digits, 16).unwrap() & (1 << 12) != 0
}

/// Where a CPU would find `va` through the tables at `dtb` (`levels` of
/// them: 4, or 5 with LA57) in `ram` (physical memory from 0): its
/// physical address, or `None` where an entry on the way is not present.
fn walk(ram: &[u8], dtb: u64, levels: u32, va: u64) -> Option<u64> {
    let entry = |table: u64, index: u64| {
        let at = (table + 8 * index) as usize;
        u64::from_le_bytes(ram[at..at + 8].try_into().unwrap())
    };
    let mut table = dtb & ADDRESS;
    for level in 0..levels {
        let shift = 12 + 9 * (levels - 1 - level);
        let e = entry(table, (va >> shift) & 511);
        if e & 1 == 0 {
            return None;
        }
        // A 1 GiB or 2 MiB page (PS), or a 4 KiB one.
        if shift == 12 || (shift <= 30 && e & 0x80 != 0) {
            let size = 1u64 << shift;
            return Some((e & ADDRESS & !(size - 1)) | (va & (size - 1)));
        }
        table = e & ADDRESS;
    }
    unreachable!()
}

/// The `PT_LOAD`s of the ELF file `elf`: (offset, vaddr, paddr, filesz).
fn loads(elf: &[u8]) -> Vec<(u64, u64, u64, u64)> {
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap());
    let (phoff, count) = (
        u64_at(0x20) as usize,
        elf[0x38] as usize | (elf[0x39] as usize) << 8,
    );
    assert_ne!(
        count, 0xffff,
        "a process of the guest needs no extended numbering"
    );
    (0..count)
        .map(|i| phoff + i * 56)
        .filter(|&h| u32_at(h) == PT_LOAD)
        .map(|h| {
            (
                u64_at(h + 8),
                u64_at(h + 16),
                u64_at(h + 24),
                u64_at(h + 32),
            )
        })
        .collect()
}

/// The `.failed` list beside `core`: (start, end, reason), sorted.
fn failed_list(core: &Path) -> Vec<(u64, u64, String)> {
    let list = std::fs::read_to_string(format!("{}.failed", core.display())).unwrap();
    list.lines()
        .skip(1)
        .map(|l| {
            let mut words = l.splitn(3, ' ');
            let (s, e) = (hex(words.next().unwrap()), hex(words.next().unwrap()));
            (s, e, words.next().unwrap_or("").to_string())
        })
        .collect()
}

#[cfg_attr(miri, ignore)]
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn each_mapped_page_is_in_the_dump_once_with_the_bytes_qemu_has() {
    let guest = shared_guest();
    assert!(
        !la57(&guest.info_registers()),
        "the default guest is 4-level"
    );
    check_process_dumps(&guest);
}

#[cfg_attr(miri, ignore)]
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn the_same_with_5_level_paging_and_kaslr() {
    let guest = Guest::start_with(GuestOptions {
        la57: true,
        kaslr: true,
        ..GuestOptions::default()
    });
    assert!(la57(&guest.info_registers()), "-cpu max turns on LA57");
    check_process_dumps(&guest);
}

/// Dumps each process whose maps `guest` printed and checks every page of
/// its VMAs against the guest's RAM, walked through its tables.
fn check_process_dumps(guest: &Guest) {
    let device = guest.device_string();
    let _paused = guest.pause();
    let ram_map: MemoryMap = guest.ram_map();
    let ps = leechio(&["-d", &device, "ps", "--json", "--no-cache"]);
    assert!(ps.status.success(), "{}", text(&ps.stderr));
    let dtbs: HashMap<u32, u64> = text(&ps.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|p| p["dtb"].is_string())
        .map(|p| {
            (
                p["pid"].as_u64().unwrap() as u32,
                hex(p["dtb"].as_str().unwrap()),
            )
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let ram = guest.pmemsave(0, guest.memory().bytes());
    let levels = if la57(&guest.info_registers()) { 5 } else { 4 };
    let pattern = guest.pattern();
    let mut shared_seen = 0;
    // Every process whose maps the guest printed: pid 1 and the test
    // processes, the pattern process among them.
    for (&pid, maps) in &guest.oracle().maps {
        let core = dir.path().join(format!("{pid}.core"));
        let o = leechio(&[
            "-d",
            &device,
            "--json",
            "dump",
            "--no-cache",
            "--pid",
            &pid.to_string(),
            "-o",
            core.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "pid {pid}: {}", text(&o.stderr));
        let summary: Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
        readelf_clean(&core);
        let elf = std::fs::read(&core).unwrap();
        let dtb = dtbs[&pid];
        // Each page the segments show: its file offset.
        let mut shown: HashMap<u64, u64> = HashMap::new();
        for &(offset, vaddr, paddr, len) in &loads(&elf) {
            assert_eq!(paddr, u64::MAX, "a process's segment has no linear paddr");
            assert_eq!((vaddr % PAGE, len % PAGE, offset % PAGE), (0, 0, 0));
            for i in (0..len).step_by(PAGE as usize) {
                assert!(
                    shown.insert(vaddr + i, offset + i).is_none(),
                    "pid {pid}: {:#x} in two segments",
                    vaddr + i
                );
            }
        }
        let listed = failed_list(&core);
        let is_listed = |va: u64, why: &str| {
            listed
                .iter()
                .any(|(s, e, r)| *s <= va && va + PAGE <= *e && r.contains(why))
        };
        // The page at each file offset, and where each frame is.
        let mut frame_at: HashMap<u64, u64> = HashMap::new();
        let mut offset_of: HashMap<u64, u64> = HashMap::new();
        let (mut in_vmas, mut checked) = (0, 0);
        for m in maps {
            for va in (m.start..m.end).step_by(PAGE as usize) {
                in_vmas += 1;
                let file_offset = shown.get(&va).copied();
                match walk(&ram, dtb, levels, va) {
                    Some(pa) if ram_map.find(pa).is_some() => {
                        let offset = file_offset.unwrap_or_else(|| {
                            panic!("pid {pid}: {va:#x} maps {pa:#x} but is not in the dump")
                        });
                        checked += 1;
                        let (o, p) = (offset as usize, pa as usize);
                        assert!(
                            elf[o..o + PAGE as usize] == ram[p..p + PAGE as usize],
                            "pid {pid}: the bytes of {va:#x} (physical {pa:#x})"
                        );
                        // One place in the file per frame, one frame per
                        // place.
                        if let Some(&earlier) = offset_of.get(&pa) {
                            assert_eq!(earlier, offset, "pid {pid}: frame {pa:#x} twice");
                            shared_seen += 1;
                        }
                        offset_of.insert(pa, offset);
                        let frame = *frame_at.entry(offset).or_insert(pa);
                        assert_eq!(frame, pa, "pid {pid}: two frames at {offset:#x}");
                    }
                    Some(pa) => {
                        assert!(file_offset.is_none(), "pid {pid}: {va:#x} (not RAM) dumped");
                        assert!(
                            is_listed(va, &format!("mapped at physical {pa:#x}")),
                            "pid {pid}: {va:#x} -> {pa:#x} not listed"
                        );
                    }
                    None => {
                        assert!(file_offset.is_none(), "pid {pid}: unmapped {va:#x} dumped");
                        assert!(
                            is_listed(va, "virtual address not mapped"),
                            "pid {pid}: unmapped {va:#x} not listed"
                        );
                    }
                }
            }
        }
        // Nothing else is shown, and the file holds each frame once: its
        // memory is as long as the frames are many.
        assert_eq!(
            shown.len(),
            checked,
            "pid {pid}: pages shown outside its VMAs"
        );
        let data_start = loads(&elf).iter().map(|l| l.0).min().unwrap();
        assert_eq!(
            elf.len() as u64 - data_start,
            frame_at.len() as u64 * PAGE,
            "pid {pid}: data beyond its frames"
        );
        assert_eq!(summary["bytes"], frame_at.len() as u64 * PAGE);
        eprintln!(
            "pid {pid}: {in_vmas} pages in VMAs, {} shown, {} frames",
            shown.len(),
            frame_at.len()
        );
        if pid == pattern.pid {
            // gdb reads the pattern at its addresses.
            let reads: Vec<(u64, usize)> = pattern
                .halves()
                .iter()
                .map(|h| (h.start + 0x40, 64))
                .collect();
            for (bytes, &(va, n)) in gdb_reads(&core, &reads).iter().zip(&reads) {
                assert!(
                    bytes.as_deref() == Some(&pattern.bytes(va, n)[..]),
                    "gdb at {va:#x}"
                );
            }
        }
    }
    eprintln!("{shared_seen} pages mapped where a frame was already dumped");
}
