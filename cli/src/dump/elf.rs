//! The ELF core a dump writes: its file, program and section headers (one
//! PT_LOAD per range; past 65534, ELF's extended numbering).

use super::*;

/// ELF64 file header.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(super) struct ElfHeader {
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
pub(super) struct ProgramHeader {
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
pub(super) struct SectionHeader {
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
pub(super) const PF_R: u32 = 4;
pub(super) const PF_W: u32 = 2;

/// Bytes of the ELF headers of a dump of `ranges` ranges: the file
/// header, a program header per range, and, from [`PN_XNUM`] ranges on,
/// the section header that holds their count.
pub(super) fn headers_len(ranges: usize) -> u64 {
    let extended = if ranges >= PN_XNUM as usize {
        std::mem::size_of::<SectionHeader>()
    } else {
        0
    };
    (std::mem::size_of::<ElfHeader>() + ranges * std::mem::size_of::<ProgramHeader>() + extended)
        as u64
}

/// Where a dump of `ranges` ranges keeps its notes (`note_len` bytes of
/// them; none when 0): after its headers, which then count a `PT_NOTE`.
pub(super) fn note_offset(ranges: usize, note_len: u64) -> u64 {
    headers_len(ranges + usize::from(note_len > 0))
}

/// Writes the ELF file header, a `PT_NOTE` for `note` (written already at
/// [`note_offset`]) unless it is empty, and a `PT_LOAD` per range (as far
/// as it was written) at the start of `file`.
pub(super) fn write_elf_headers(
    file: &mut File,
    pieces: &[Piece],
    offsets: &[u64],
    written: &[u64],
    virtual_space: bool,
    note: &[u8],
) -> std::io::Result<()> {
    let note_header = (!note.is_empty()).then(|| ProgramHeader {
        kind: PT_NOTE,
        flags: 0,
        offset: note_offset(pieces.len(), note.len() as u64),
        vaddr: 0,
        paddr: 0,
        filesz: note.len() as u64,
        memsz: 0,
        align: 4,
    });
    // Ranges not (fully) read by an interruption are cut to what was read.
    let loads: Vec<ProgramHeader> = note_header
        .into_iter()
        .chain(
            pieces
                .iter()
                .zip(offsets)
                .zip(written)
                .filter(|(_, &w)| w > 0)
                .map(|((p, &offset), &w)| ProgramHeader {
                    kind: PT_LOAD,
                    flags: p.flags,
                    offset,
                    vaddr: p.addr,
                    paddr: if virtual_space { p.pa } else { p.addr },
                    filesz: w,
                    memsz: w,
                    align: PAGE,
                }),
        )
        .collect();
    // Too many for e_phnum: it says PN_XNUM, and the count is in sh_info of
    // section header 0 (a null section), after the program headers.
    let phoff = std::mem::size_of::<ElfHeader>() as u64;
    let extended = (loads.len() >= PN_XNUM as usize).then(|| SectionHeader {
        info: loads.len() as u32,
        ..Zeroable::zeroed()
    });
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
            Some(_) => phoff + (loads.len() * std::mem::size_of::<ProgramHeader>()) as u64,
            None => 0,
        },
        flags: 0,
        ehsize: std::mem::size_of::<ElfHeader>() as u16,
        phentsize: std::mem::size_of::<ProgramHeader>() as u16,
        phnum: match extended {
            Some(_) => PN_XNUM,
            None => loads.len() as u16,
        },
        shentsize: std::mem::size_of::<SectionHeader>() as u16,
        shnum: u16::from(extended.is_some()),
        // SHN_UNDEF: no section names.
        shstrndx: 0,
    };
    file.seek(SeekFrom::Start(0))?;
    file.write_all(bytemuck::bytes_of(&header))?;
    file.write_all(bytemuck::cast_slice(&loads))?;
    if let Some(section) = &extended {
        file.write_all(bytemuck::bytes_of(section))?;
    }
    file.flush()
}

const _: () = {
    assert!(std::mem::size_of::<ElfHeader>() == 64);
    assert!(std::mem::size_of::<ProgramHeader>() == 56);
    assert!(std::mem::size_of::<SectionHeader>() == 64);
};
