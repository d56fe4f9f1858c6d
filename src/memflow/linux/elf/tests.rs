//! Real ELF files of this machine loaded into made-up process memory as a
//! loader lays them out, read back through the headers in that memory,
//! and checked against goblin's parse of the files themselves.

use std::collections::BTreeSet;
use std::sync::Arc;

use goblin::elf::dynamic::{
    DT_DEBUG, DT_GNU_HASH, DT_HASH, DT_JMPREL, DT_RELA, DT_STRTAB, DT_SYMTAB,
};
use goblin::elf::Elf as FileElf;
use memflow::architecture::ArchitectureIdent;

use super::*;
use crate::vm::Paging;
use crate::{MemBackend, Memory};

/// Where the file is loaded: 1 GiB aligned, mapped by one 1 GiB page
/// onto physical address 0.
const BASE: u64 = 0x7f00_0000_0000;
const MEMORY: usize = 64 << 20;
/// The page tables: a PML4 and a PDPT, high in memory.
const PML4: u64 = 0x3f0_0000;
const PDPT: u64 = 0x3f0_1000;

/// A shared library and a position-independent executable every Debian
/// has (libdl is a small stub since glibc 2.34).
const LIBRARY: &str = "/lib/x86_64-linux-gnu/libdl.so.2";
const EXECUTABLE: &str = "/bin/true";

/// How the dynamic section in memory is changed after loading.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dynamic {
    /// As in the file.
    AsFile,
    /// Its pointers moved to where the file lies, as glibc's loader does.
    Relocated,
    /// With no `DT_HASH` (its tag made `DT_DEBUG`): the symbols counted
    /// by the GNU hash table alone.
    GnuHashOnly,
}

/// The file loaded at [`BASE`]: its address space, and the module memflow
/// would show for it.
fn load(path: &str, dynamic: Dynamic) -> (AddressSpace, ModuleInfo, Vec<u8>) {
    let file = std::fs::read(path).unwrap();
    let elf = FileElf::parse(&file).unwrap();
    let backend = Arc::new(MemBackend::new(vec![0; MEMORY]));
    backend.poke(PML4 + (BASE >> 39 & 511) * 8, &(PDPT | 3).to_le_bytes());
    backend.poke(PDPT + (BASE >> 30 & 511) * 8, &(0x83u64).to_le_bytes());
    let mut end = 0;
    for p in elf.program_headers.iter().filter(|p| p.p_type == PT_LOAD) {
        let bytes = &file[p.p_offset as usize..(p.p_offset + p.p_filesz) as usize];
        backend.poke(p.p_vaddr, bytes);
        end = end.max((p.p_vaddr + p.p_memsz).next_multiple_of(0x1000));
    }
    if dynamic != Dynamic::AsFile {
        let d = elf
            .program_headers
            .iter()
            .find(|p| p.p_type == PT_DYNAMIC)
            .unwrap();
        for at in (d.p_vaddr..d.p_vaddr + d.p_memsz).step_by(16) {
            let tag = u64::from_le_bytes(backend.bytes(at, 8).try_into().unwrap());
            let value = u64::from_le_bytes(backend.bytes(at + 8, 8).try_into().unwrap());
            match dynamic {
                Dynamic::Relocated
                    if [
                        DT_HASH,
                        DT_GNU_HASH,
                        DT_STRTAB,
                        DT_SYMTAB,
                        DT_RELA,
                        DT_JMPREL,
                    ]
                    .contains(&tag) =>
                {
                    backend.poke(at + 8, &(value + BASE).to_le_bytes())
                }
                Dynamic::GnuHashOnly if tag == DT_HASH => backend.poke(at, &DT_DEBUG.to_le_bytes()),
                _ => {}
            }
        }
    }
    let mem = Memory::with_config(backend.clone(), Default::default());
    let space = AddressSpace::new(mem, PML4, Paging::FourLevel);
    let info = ModuleInfo {
        address: Address::from(0x1000u64),
        parent_process: Address::from(0x2000u64),
        base: Address::from(BASE),
        size: end as umem,
        name: "x".into(),
        path: path.into(),
        arch: ArchitectureIdent::X86(64, false),
    };
    (space, info, file)
}

/// What goblin finds in the file: the exports (name, offset) and the
/// names of the imports.
fn expected(file: &[u8]) -> (BTreeSet<(String, u64)>, BTreeSet<String>) {
    let elf = FileElf::parse(file).unwrap();
    let mut exports = BTreeSet::new();
    let mut imports = BTreeSet::new();
    for s in elf.dynsyms.iter() {
        let name = elf.dynstrtab.get_at(s.st_name).unwrap_or("").to_string();
        if name.is_empty() {
            continue;
        }
        if s.st_shndx == 0 {
            imports.insert(name);
        } else if s.st_value != 0
            && matches!(s.st_bind(), STB_GLOBAL | STB_WEAK | STB_GNU_UNIQUE)
            && !matches!(s.st_type(), STT_SECTION | STT_FILE)
        {
            exports.insert((name, s.st_value));
        }
    }
    (exports, imports)
}

fn exports_of(space: &AddressSpace, info: &ModuleInfo) -> BTreeSet<(String, u64)> {
    let mut got = Vec::new();
    exports(space, info, (&mut got).into()).unwrap();
    got.iter()
        .map(|e: &ExportInfo| (e.name.to_string(), e.offset))
        .collect()
}

fn imports_of(space: &AddressSpace, info: &ModuleInfo) -> Vec<ImportInfo> {
    let mut got = Vec::new();
    imports(space, info, (&mut got).into()).unwrap();
    got
}

#[test]
#[cfg_attr(miri, ignore)] // Miri: files
fn exports_and_imports_read_from_memory_are_the_files_own() {
    for path in [LIBRARY, EXECUTABLE] {
        for dynamic in [Dynamic::AsFile, Dynamic::Relocated, Dynamic::GnuHashOnly] {
            let (space, info, file) = load(path, dynamic);
            let (want_exports, want_imports) = expected(&file);
            assert_eq!(
                exports_of(&space, &info),
                want_exports,
                "{path} {dynamic:?}"
            );
            let imports = imports_of(&space, &info);
            let names: BTreeSet<String> = imports.iter().map(|i| i.name.to_string()).collect();
            assert_eq!(names, want_imports, "{path} {dynamic:?}");
            // Each import the PLT or GOT binds is at the slot its
            // relocation fills, as goblin reads the relocations.
            let elf = FileElf::parse(&file).unwrap();
            for r in elf.pltrelocs.iter().chain(elf.dynrelas.iter()) {
                let Some(name) = elf
                    .dynsyms
                    .get(r.r_sym)
                    .filter(|s| s.st_shndx == 0 && r.r_sym != 0)
                    .and_then(|s| elf.dynstrtab.get_at(s.st_name))
                else {
                    continue;
                };
                let import = imports.iter().find(|i| i.name.as_ref() == name).unwrap();
                let slots: Vec<u64> = elf
                    .pltrelocs
                    .iter()
                    .chain(elf.dynrelas.iter())
                    .filter(|o| o.r_sym == r.r_sym)
                    .map(|o| o.r_offset)
                    .collect();
                assert!(slots.contains(&import.offset), "{path}: {name}");
            }
        }
    }
    // libdl exports something; /bin/true imports something.
    assert!(!expected(&std::fs::read(LIBRARY).unwrap()).0.is_empty());
    assert!(!expected(&std::fs::read(EXECUTABLE).unwrap()).1.is_empty());
}

#[test]
#[cfg_attr(miri, ignore)] // Miri: files
fn sections_come_from_mapped_section_headers_only() {
    // As a loader maps it, the file's section headers lie past every
    // loaded segment: no sections.
    let (space, info, file) = load(EXECUTABLE, Dynamic::AsFile);
    let mut got: Vec<SectionInfo> = Vec::new();
    sections(&space, &info, (&mut got).into()).unwrap();
    assert!(got.is_empty(), "{got:?}");

    // The section headers and their names copied into the largest loaded
    // segment (its last bytes, which the test reads nothing else from),
    // and the ELF header pointed at them.
    let elf = FileElf::parse(&file).unwrap();
    let header_len = elf.section_headers.len() * 64;
    let names = &elf.section_headers[elf.header.e_shstrndx as usize];
    let names_bytes = &file[names.sh_offset as usize..(names.sh_offset + names.sh_size) as usize];
    let largest = elf
        .program_headers
        .iter()
        .filter(|p| p.p_type == PT_LOAD)
        .max_by_key(|p| p.p_filesz)
        .unwrap();
    let end = (largest.p_offset + largest.p_filesz) as usize;
    let shoff = (end - header_len - names_bytes.len()) & !7;
    let names_at = shoff + header_len;
    // Where those file offsets lie in memory.
    let at = |offset: usize| (offset as u64 - largest.p_offset) + largest.p_vaddr;
    let mut headers =
        file[elf.header.e_shoff as usize..elf.header.e_shoff as usize + header_len].to_vec();
    let names_entry = elf.header.e_shstrndx as usize * 64;
    headers[names_entry + 24..names_entry + 32].copy_from_slice(&(names_at as u64).to_le_bytes());
    let write = |va: u64, bytes: &[u8]| {
        space
            .memory()
            .block_on(space.write(BASE + va, bytes))
            .unwrap()
    };
    write(at(shoff), &headers);
    write(at(names_at), names_bytes);
    write(0x28, &(shoff as u64).to_le_bytes());
    let mut got: Vec<SectionInfo> = Vec::new();
    sections(&space, &info, (&mut got).into()).unwrap();
    let got: Vec<(String, u64, u64)> = got
        .iter()
        .map(|s| (s.name.to_string(), s.base.to_umem(), s.size))
        .collect();
    let want: Vec<(String, u64, u64)> = elf
        .section_headers
        .iter()
        .filter(|s| s.sh_flags & u64::from(SHF_ALLOC) != 0)
        .map(|s| {
            let name = elf.shdr_strtab.get_at(s.sh_name).unwrap().to_string();
            (name, BASE + s.sh_addr, s.sh_size)
        })
        .collect();
    assert!(want.iter().any(|s| s.0 == ".text"), "{want:?}");
    assert_eq!(got, want);
}

#[test]
#[cfg_attr(miri, ignore)] // Miri: files
fn a_module_whose_headers_point_outside_it_is_refused_not_followed() {
    let (space, mut info, _) = load(LIBRARY, Dynamic::AsFile);
    // The program headers said to lie 1 TiB away.
    space
        .memory()
        .block_on(space.write(BASE + 0x20, &(1u64 << 40).to_le_bytes()))
        .unwrap();
    let mut got: Vec<ExportInfo> = Vec::new();
    let err = exports(&space, &info, (&mut got).into()).unwrap_err();
    assert_eq!(err.1, ErrorKind::InvalidExeFile);
    // Not an ELF file at all.
    info.base = Address::from(BASE + 0x1000);
    let err = exports(&space, &info, (&mut got).into()).unwrap_err();
    assert_eq!(err.1, ErrorKind::InvalidExeFile);
}
