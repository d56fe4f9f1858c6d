//! The sections, imports and exports of an ELF file mapped in a process,
//! read from the headers in the process's memory (not from the file):
//! the ELF and program headers at the module's base, the dynamic section
//! they point at, and the dynamic symbols, strings, hash tables and
//! relocations it names. Sections come from the section headers, which a
//! loader maps only when they lie in a loaded segment (a small file mapped
//! whole); where they are not mapped, a module has no sections to show.
//!
//! Everything read lies inside the module's mapping and is bounded by
//! its size, so a damaged or hostile header costs a refused read, not an
//! allocation it names.

use goblin::container::{Container, Ctx};
use goblin::elf::dynamic::{
    DT_GNU_HASH, DT_HASH, DT_JMPREL, DT_NULL, DT_PLTREL, DT_PLTRELSZ, DT_REL, DT_RELA, DT_RELASZ,
    DT_RELSZ, DT_STRSZ, DT_STRTAB, DT_SYMENT, DT_SYMTAB,
};
use goblin::elf::header::Header;
use goblin::elf::program_header::{ProgramHeader, PT_DYNAMIC, PT_LOAD};
use goblin::elf::reloc::RelocSection;
use goblin::elf::section_header::{SectionHeader, SHF_ALLOC};
use goblin::elf::sym::{Sym, STB_GLOBAL, STB_GNU_UNIQUE, STB_WEAK, STT_FILE, STT_SECTION};
use memflow::error::{ErrorKind, Result};
use memflow::os::{
    ExportCallback, ExportInfo, ImportCallback, ImportInfo, ModuleInfo, SectionCallback,
    SectionInfo,
};
use memflow::types::{umem, Address};

use super::os_error;
use crate::AddressSpace;

/// Most program or section headers read.
const MAX_HEADERS: usize = 4096;
/// Most dynamic symbols read (a large library has tens of thousands).
const MAX_SYMBOLS: usize = 1 << 20;
/// Most chain entries of a GNU hash table read past its last bucket.
const MAX_CHAIN: usize = 1 << 16;

/// A mapped ELF file, its headers read.
struct Elf<'a> {
    space: &'a AddressSpace,
    /// The module's mapping.
    base: u64,
    size: u64,
    ctx: Ctx,
    header: Header,
    phdrs: Vec<ProgramHeader>,
    /// The lowest `PT_LOAD` address, page aligned: what the module's base
    /// stands for (0 for a position-independent file).
    first_vaddr: u64,
    /// The dynamic section's entries (tag, value).
    dynamic: Vec<(u64, u64)>,
}

fn bad(info: &ModuleInfo, why: impl std::fmt::Display) -> memflow::error::Error {
    os_error(
        ErrorKind::InvalidExeFile,
        format!("linux_btf: {} at {:x}: {why}", info.path, info.base),
    )
}

impl<'a> Elf<'a> {
    /// Reads the headers of the ELF file mapped at `info.base`.
    fn load(space: &'a AddressSpace, info: &ModuleInfo) -> Result<Elf<'a>> {
        let (base, size) = (info.base.to_umem(), info.size);
        let mut elf = Elf {
            space,
            base,
            size,
            ctx: Ctx::default(),
            header: Header::new(Ctx::default()),
            phdrs: Vec::new(),
            first_vaddr: 0,
            dynamic: Vec::new(),
        };
        let ident = elf.read(base, 64).map_err(|e| bad(info, e))?;
        let header = goblin::elf::Elf::parse_header(&ident).map_err(|e| bad(info, e))?;
        let container = header.container().map_err(|e| bad(info, e))?;
        let le = header.endianness().map_err(|e| bad(info, e))?;
        elf.ctx = Ctx { container, le };
        elf.header = header;
        let count = usize::from(header.e_phnum).min(MAX_HEADERS);
        let len = count * ProgramHeader::size(elf.ctx);
        let bytes = elf
            .read(base.wrapping_add(header.e_phoff), len)
            .map_err(|e| bad(info, format!("program headers: {e}")))?;
        elf.phdrs = ProgramHeader::parse(&bytes, 0, count, elf.ctx).map_err(|e| bad(info, e))?;
        elf.first_vaddr = elf
            .phdrs
            .iter()
            .filter(|p| p.p_type == PT_LOAD)
            .map(|p| p.p_vaddr & !0xfff)
            .min()
            .ok_or_else(|| bad(info, "no loaded segment"))?;
        if let Some(d) = elf.phdrs.iter().find(|p| p.p_type == PT_DYNAMIC) {
            let at = elf.address(d.p_vaddr);
            let bytes = elf
                .read(at, d.p_memsz.min(size) as usize)
                .map_err(|e| bad(info, format!("dynamic section: {e}")))?;
            elf.dynamic = elf.entries(&bytes);
        }
        Ok(elf)
    }

    /// Where an address the file names lies in the process.
    fn address(&self, vaddr: u64) -> u64 {
        vaddr.wrapping_sub(self.first_vaddr).wrapping_add(self.base)
    }

    /// Where a pointer of the dynamic section points: the loader (glibc's)
    /// rewrites some to where they lie; the others are the file's.
    fn pointer(&self, value: u64) -> u64 {
        match (self.base..self.base + self.size).contains(&value) {
            true => value,
            false => self.address(value),
        }
    }

    /// An address as an offset from the module's base.
    fn offset(&self, address: u64) -> umem {
        address.wrapping_sub(self.base) as umem
    }

    /// `len` bytes at `va`, which must lie inside the module.
    fn read(&self, va: u64, len: usize) -> std::result::Result<Vec<u8>, String> {
        let inside = va >= self.base
            && (len as u64) <= self.size
            && va - self.base <= self.size - len as u64;
        if !inside {
            return Err(format!(
                "{len:#x} bytes at {va:#x} lie outside the module ({:#x}..{:#x})",
                self.base,
                self.base + self.size
            ));
        }
        let mut buf = vec![0u8; len];
        self.space
            .memory()
            .block_on(self.space.read(va, &mut buf))
            .map_err(|e| e.to_string())?;
        Ok(buf)
    }

    /// The words of `bytes`, in the file's width and byte order.
    fn words(&self, bytes: &[u8]) -> Vec<u64> {
        let width = match self.ctx.container {
            Container::Big => 8,
            Container::Little => 4,
        };
        bytes
            .chunks_exact(width)
            .map(|w| match (width, self.ctx.le.is_little()) {
                (8, true) => u64::from_le_bytes(w.try_into().unwrap_or_default()),
                (8, false) => u64::from_be_bytes(w.try_into().unwrap_or_default()),
                (_, true) => u64::from(u32::from_le_bytes(w.try_into().unwrap_or_default())),
                (_, false) => u64::from(u32::from_be_bytes(w.try_into().unwrap_or_default())),
            })
            .collect()
    }

    /// The dynamic entries in `bytes`, up to `DT_NULL`.
    fn entries(&self, bytes: &[u8]) -> Vec<(u64, u64)> {
        self.words(bytes)
            .chunks_exact(2)
            .map(|e| (e[0], e[1]))
            .take_while(|&(tag, _)| tag != DT_NULL)
            .collect()
    }

    /// The value of dynamic tag `tag`.
    fn tag(&self, tag: u64) -> Option<u64> {
        self.dynamic
            .iter()
            .find(|&&(t, _)| t == tag)
            .map(|&(_, v)| v)
    }

    /// `u32` words at `va`.
    fn u32s(&self, va: u64, count: usize) -> std::result::Result<Vec<u32>, String> {
        let bytes = self.read(va, count * 4)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|w| {
                let w = w.try_into().unwrap_or_default();
                match self.ctx.le.is_little() {
                    true => u32::from_le_bytes(w),
                    false => u32::from_be_bytes(w),
                }
            })
            .collect())
    }

    /// How many dynamic symbols there are: `DT_HASH`'s chain count, else
    /// what `DT_GNU_HASH` covers, else the room between the symbol and
    /// string tables.
    fn symbol_count(&self, symtab: u64, syment: u64) -> std::result::Result<usize, String> {
        if let Some(hash) = self.tag(DT_HASH) {
            let words = self.u32s(self.pointer(hash), 2)?;
            return Ok(words[1] as usize);
        }
        if let Some(hash) = self.tag(DT_GNU_HASH) {
            let at = self.pointer(hash);
            let head = self.u32s(at, 4)?;
            let (buckets, first, blooms) = (head[0] as usize, head[1] as usize, head[2] as u64);
            let word = match self.ctx.container {
                Container::Big => 8,
                Container::Little => 4,
            };
            let buckets_at = at + 16 + blooms.saturating_mul(word);
            let table = self.u32s(buckets_at, buckets.min(MAX_SYMBOLS))?;
            let Some(&last) = table.iter().max() else {
                return Ok(first);
            };
            let last = last as usize;
            if last < first {
                return Ok(first);
            }
            // The chain of the last bucket ends with a word whose low bit
            // is set; its index there is the last symbol's.
            let chains_at = buckets_at + 4 * table.len() as u64 + 4 * (last - first) as u64;
            let room = ((self.base + self.size - chains_at) / 4) as usize;
            let chain = self.u32s(chains_at, room.min(MAX_CHAIN))?;
            let end = chain
                .iter()
                .position(|w| w & 1 == 1)
                .ok_or("the GNU hash table's last chain has no end")?;
            return Ok(last + end + 1);
        }
        match self.tag(DT_STRTAB).map(|s| self.pointer(s)) {
            Some(strtab) if strtab > symtab && syment > 0 => {
                Ok(((strtab - symtab) / syment) as usize)
            }
            _ => Err("no hash table tells how many symbols there are".into()),
        }
    }

    /// The dynamic symbols with their names.
    fn symbols(&self) -> std::result::Result<Vec<(Sym, String)>, String> {
        let (Some(symtab), Some(strtab)) = (self.tag(DT_SYMTAB), self.tag(DT_STRTAB)) else {
            return Ok(Vec::new());
        };
        let (symtab, strtab) = (self.pointer(symtab), self.pointer(strtab));
        let syment = self
            .tag(DT_SYMENT)
            .unwrap_or(Sym::size(self.ctx.container) as u64);
        if syment != Sym::size(self.ctx.container) as u64 {
            return Err(format!("symbols of {syment} bytes"));
        }
        let count = self.symbol_count(symtab, syment)?.min(MAX_SYMBOLS);
        let count = count.min((self.size / syment) as usize);
        let bytes = self.read(symtab, count * syment as usize)?;
        let syms = Sym::parse(&bytes, 0, count, self.ctx).map_err(|e| e.to_string())?;
        let strsz = self.tag(DT_STRSZ).unwrap_or(0).min(self.size);
        let strings = self.read(strtab, strsz as usize)?;
        Ok(syms
            .into_iter()
            .map(|s| {
                let name = strings
                    .get(s.st_name..)
                    .map(|rest| &rest[..rest.iter().position(|&c| c == 0).unwrap_or(rest.len())])
                    .unwrap_or_default();
                (s, String::from_utf8_lossy(name).into_owned())
            })
            .collect())
    }

    /// Where each symbol (by index) is bound: the slot its relocation
    /// writes, from the PLT's relocations and the others.
    fn slots(&self) -> Vec<(usize, u64)> {
        let mut slots = Vec::new();
        let plt_rela = self.tag(DT_PLTREL) == Some(DT_RELA);
        let tables = [
            (self.tag(DT_JMPREL), self.tag(DT_PLTRELSZ), plt_rela),
            (self.tag(DT_RELA), self.tag(DT_RELASZ), true),
            (self.tag(DT_REL), self.tag(DT_RELSZ), false),
        ];
        for (at, len, rela) in tables {
            let (Some(at), Some(len)) = (at, len) else {
                continue;
            };
            let Ok(bytes) = self.read(self.pointer(at), len.min(self.size) as usize) else {
                continue;
            };
            if let Ok(relocs) = RelocSection::parse(&bytes, 0, bytes.len(), rela, self.ctx) {
                slots.extend(
                    relocs
                        .iter()
                        .filter(|r| r.r_sym != 0)
                        .map(|r| (r.r_sym, self.address(r.r_offset))),
                );
            }
        }
        slots
    }
}

/// The symbols a module defines for others: its dynamic symbols that are
/// global, weak or unique and have an address.
pub(super) fn exports(
    space: &AddressSpace,
    info: &ModuleInfo,
    mut callback: ExportCallback,
) -> Result<()> {
    let elf = Elf::load(space, info)?;
    let symbols = elf.symbols().map_err(|e| bad(info, e))?;
    for (s, name) in symbols {
        let bind = s.st_bind();
        let exported = s.st_shndx != 0
            && s.st_value != 0
            && !name.is_empty()
            && matches!(bind, STB_GLOBAL | STB_WEAK | STB_GNU_UNIQUE)
            && !matches!(s.st_type(), STT_SECTION | STT_FILE);
        if exported {
            let offset = elf.offset(elf.address(s.st_value));
            if !callback.call(ExportInfo {
                name: name.as_str().into(),
                offset,
            }) {
                break;
            }
        }
    }
    Ok(())
}

/// The symbols a module takes from others: its undefined dynamic
/// symbols, each at the slot its relocation fills (offset 0 when none
/// does).
pub(super) fn imports(
    space: &AddressSpace,
    info: &ModuleInfo,
    mut callback: ImportCallback,
) -> Result<()> {
    let elf = Elf::load(space, info)?;
    let symbols = elf.symbols().map_err(|e| bad(info, e))?;
    let slots = elf.slots();
    for (i, (s, name)) in symbols.into_iter().enumerate() {
        if s.st_shndx != 0 || name.is_empty() {
            continue;
        }
        let slot = slots.iter().find(|(sym, _)| *sym == i).map(|&(_, at)| at);
        let offset = slot.map_or(0, |at| elf.offset(at));
        if !callback.call(ImportInfo {
            name: name.as_str().into(),
            offset,
        }) {
            break;
        }
    }
    Ok(())
}

/// The sections a module's section headers name, when the headers and
/// their names lie in a loaded segment; none otherwise.
pub(super) fn sections(
    space: &AddressSpace,
    info: &ModuleInfo,
    mut callback: SectionCallback,
) -> Result<()> {
    let elf = Elf::load(space, info)?;
    let h = &elf.header;
    // Where file offset `off` is mapped, for `len` bytes.
    let mapped = |off: u64, len: u64| {
        elf.phdrs
            .iter()
            .filter(|p| p.p_type == PT_LOAD)
            .find(|p| off >= p.p_offset && off.saturating_add(len) <= p.p_offset + p.p_filesz)
            .map(|p| elf.address(p.p_vaddr + (off - p.p_offset)))
    };
    let count = usize::from(h.e_shnum).min(MAX_HEADERS);
    let len = count * SectionHeader::size(elf.ctx);
    let Some(at) = mapped(h.e_shoff, len as u64).filter(|_| count > 0) else {
        log::debug!(
            "linux_btf: {}: its section headers are not mapped",
            info.path
        );
        return Ok(());
    };
    let bytes = elf.read(at, len).map_err(|e| bad(info, e))?;
    let headers = SectionHeader::parse_from(&bytes, 0, count, elf.ctx).map_err(|e| bad(info, e))?;
    let names = headers
        .get(usize::from(h.e_shstrndx))
        .and_then(|s| Some((mapped(s.sh_offset, s.sh_size)?, s.sh_size)))
        .and_then(|(at, len)| elf.read(at, len as usize).ok())
        .unwrap_or_default();
    for s in headers
        .iter()
        .filter(|s| s.sh_flags & u64::from(SHF_ALLOC) != 0)
    {
        let name = names
            .get(s.sh_name..)
            .map(|rest| &rest[..rest.iter().position(|&c| c == 0).unwrap_or(rest.len())])
            .unwrap_or_default();
        if !callback.call(SectionInfo {
            name: String::from_utf8_lossy(name).as_ref().into(),
            base: Address::from(elf.address(s.sh_addr)),
            size: s.sh_size as umem,
        }) {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
