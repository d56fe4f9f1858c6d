//! The ELF core a dump writes: its file, program and section headers (a
//! PT_LOAD per segment; past 65534, ELF's extended numbering).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;

use bytemuck::{Pod, Zeroable};

use super::layout::Segment;
use super::PAGE;

/// ELF64 file header.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct ElfHeader {
    ident: [u8; 16],
    kind: u16,
    machine: u16,
    version: u32,
    entry: u64,
    phoff: u64,
    shoff: u64,
    flags: u32,
    ehsize: u16,
    phentsize: u16,
    phnum: u16,
    shentsize: u16,
    shnum: u16,
    shstrndx: u16,
}

/// ELF64 program header.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct ProgramHeader {
    kind: u32,
    flags: u32,
    offset: u64,
    vaddr: u64,
    paddr: u64,
    filesz: u64,
    memsz: u64,
    align: u64,
}

/// ELF64 section header: a dump has one only for extended numbering.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct SectionHeader {
    name: u32,
    kind: u32,
    flags: u64,
    addr: u64,
    offset: u64,
    size: u64,
    link: u32,
    info: u32,
    addralign: u64,
    entsize: u64,
}

/// `e_phnum` saying "as many program headers as section header 0's
/// `sh_info` says" (ELF extended numbering), for counts that do not fit.
pub(super) const PN_XNUM: u16 = 0xffff;
pub(super) const ET_CORE: u16 = 4;
pub(super) const EM_X86_64: u16 = 62;
pub(super) const PT_LOAD: u32 = 1;
pub(super) const PT_NOTE: u32 = 4;
pub(super) const PF_X: u32 = 1;
pub(super) const PF_W: u32 = 2;
pub(super) const PF_R: u32 = 4;
pub(super) const ELF_HEADER_LEN: usize = std::mem::size_of::<ElfHeader>();
pub(super) const PROGRAM_HEADER_LEN: usize = std::mem::size_of::<ProgramHeader>();
pub(super) const SECTION_HEADER_LEN: usize = std::mem::size_of::<SectionHeader>();
/// `p_paddr` of a segment with no linear physical address, as
/// `/proc/kcore` writes it.
pub(super) const NO_PHYSICAL_ADDRESS: u64 = u64::MAX;

/// Program headers written in one call.
const HEADERS_PER_WRITE: usize = 4096;

/// Where the program headers of a dump went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HeadersAt {
    /// Right after the file header, where readers look first.
    Start,
    /// At the end of the file: more than the room kept for them.
    End,
}

/// Writes the ELF file header, a `PT_NOTE` for the `note_len` bytes of
/// notes at `note_offset` (none when 0) and a `PT_LOAD` per segment to
/// `file`: after the file header when `header_slots` leave room, else at
/// `end`, the file's end (which grows by them). With `direct_map` (a
/// physical dump of a Linux target), a segment's `p_vaddr` is where the
/// kernel's direct map shows its memory, as kdump writes it; otherwise its
/// address.
pub(super) fn write_elf_headers(
    file: &mut File,
    segments: &[Segment],
    note_offset: u64,
    note_len: u64,
    header_slots: usize,
    end: u64,
    direct_map: Option<u64>,
) -> std::io::Result<HeadersAt> {
    let note_header = (note_len > 0).then_some(ProgramHeader {
        kind: PT_NOTE,
        flags: 0,
        offset: note_offset,
        vaddr: 0,
        paddr: 0,
        filesz: note_len,
        memsz: 0,
        align: 4,
    });
    let headers = note_header
        .into_iter()
        .chain(segments.iter().map(|s| ProgramHeader {
            kind: PT_LOAD,
            flags: s.flags,
            offset: s.offset,
            vaddr: match (direct_map, s.paddr()) {
                (Some(base), Some(pa)) => base.wrapping_add(pa),
                _ => s.addr,
            },
            paddr: s.paddr().unwrap_or(NO_PHYSICAL_ADDRESS),
            filesz: s.len,
            memsz: s.len,
            align: PAGE,
        }));
    let count = segments.len() + usize::from(note_len > 0);
    let at = if count <= header_slots {
        HeadersAt::Start
    } else {
        HeadersAt::End
    };
    let phoff = match at {
        HeadersAt::Start => ELF_HEADER_LEN as u64,
        HeadersAt::End => end.next_multiple_of(8),
    };
    // Too many for e_phnum: it says PN_XNUM, and the count is in sh_info of
    // section header 0 (a null section), after the program headers.
    let extended = match count {
        n if n < PN_XNUM as usize => None,
        n => Some(SectionHeader {
            info: u32::try_from(n).map_err(|_| {
                std::io::Error::other(format!("{n} program headers: more than ELF can count"))
            })?,
            ..Zeroable::zeroed()
        }),
    };
    let mut ident = [0u8; 16];
    ident[..7].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1]); // 64-bit, little endian, version 1
    let header = ElfHeader {
        ident,
        kind: ET_CORE,
        machine: EM_X86_64,
        version: 1,
        entry: 0,
        phoff,
        shoff: match extended {
            Some(_) => phoff + (count * PROGRAM_HEADER_LEN) as u64,
            None => 0,
        },
        flags: 0,
        ehsize: ELF_HEADER_LEN as u16,
        phentsize: PROGRAM_HEADER_LEN as u16,
        phnum: match extended {
            Some(_) => PN_XNUM,
            None => count as u16,
        },
        shentsize: SECTION_HEADER_LEN as u16,
        shnum: u16::from(extended.is_some()),
        // SHN_UNDEF: no section names.
        shstrndx: 0,
    };
    // Written a few thousand at a time: a dump can have millions.
    let mut at_byte = phoff;
    let mut chunk: Vec<u8> = Vec::with_capacity(HEADERS_PER_WRITE * PROGRAM_HEADER_LEN);
    let mut headers = headers.peekable();
    while headers.peek().is_some() {
        chunk.clear();
        for h in headers.by_ref().take(HEADERS_PER_WRITE) {
            chunk.extend_from_slice(bytemuck::bytes_of(&h));
        }
        file.write_all_at(&chunk, at_byte)?;
        at_byte += chunk.len() as u64;
    }
    if let Some(section) = &extended {
        file.write_all_at(bytemuck::bytes_of(section), at_byte)?;
    }
    file.write_all_at(bytemuck::bytes_of(&header), 0)?;
    file.flush()?;
    Ok(at)
}

const _: () = {
    assert!(std::mem::size_of::<ElfHeader>() == 64);
    assert!(std::mem::size_of::<ProgramHeader>() == 56);
    assert!(std::mem::size_of::<SectionHeader>() == 64);
};

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::layout::{self, Piece};
    use super::*;

    /// `readelf -h -l -W` of `path`: its output, and that it had nothing
    /// to complain about.
    fn readelf(path: &Path) -> String {
        let o = std::process::Command::new("readelf")
            .args(["-h", "-l", "-W"])
            .arg(path)
            .output()
            .expect("run readelf");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success() && err.is_empty(), "{err}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Writes the ELF dump layout and headers of `pieces` (all read) to a
    /// sparse file and returns readelf's view of it.
    fn headers_of(pieces: &[Piece], spill: bool) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dump.elf");
        let mut file = File::create(&path).unwrap();
        let layout = layout::elf(pieces.to_vec(), 0).unwrap();
        file.set_len(layout.size).unwrap();
        let slots = if spill { 0 } else { layout.header_slots };
        let at =
            write_elf_headers(&mut file, &layout.segments, 0, 0, slots, layout.size, None).unwrap();
        assert_eq!(at == HeadersAt::End, spill);
        readelf(&path)
    }

    fn pages(n: u64, stride: u64) -> Vec<Piece> {
        (0..n)
            .map(|i| Piece {
                addr: i * stride,
                pa: i * stride,
                len: 0x1000,
                flags: PF_R,
                vma: None,
            })
            .collect()
    }

    #[test]
    fn more_segments_than_e_phnum_holds_use_extended_numbering() {
        let n = PN_XNUM as u64 + 2;
        let out = headers_of(&pages(n, 0x2000), false);
        // readelf reads the count from the section header.
        assert!(
            out.contains(&format!("Number of program headers:         65535 ({n})")),
            "{}",
            &out[..2000]
        );
        let loads: Vec<&str> = out
            .lines()
            .filter(|l| l.trim_start().starts_with("LOAD"))
            .collect();
        assert_eq!(loads.len() as u64, n);
        let last = loads.last().unwrap();
        assert!(
            last.contains(&format!("0x{:016x}", (n - 1) * 0x2000)),
            "{last}"
        );

        // One fewer than PN_XNUM still fits in e_phnum: no section header.
        let out = headers_of(&pages(PN_XNUM as u64 - 1, 0x2000), false);
        assert!(
            out.contains("Number of program headers:         65534\n"),
            "{}",
            &out[..2000]
        );
        assert!(
            out.contains("Number of section headers:         0"),
            "{}",
            &out[..2000]
        );
    }

    #[test]
    fn headers_past_their_room_go_to_the_end_of_the_file() {
        let out = headers_of(&pages(3, 0x2000), true);
        assert!(
            out.contains("Number of program headers:         3\n"),
            "{out}"
        );
        assert_eq!(out.matches("  LOAD ").count(), 3, "{out}");
        let start: u64 = out
            .lines()
            .find_map(|l| l.trim().strip_prefix("Start of program headers:"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        assert!(start > 0x3000, "{out}");
    }
}
