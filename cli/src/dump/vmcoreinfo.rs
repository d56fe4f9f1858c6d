//! The VMCOREINFO note of a dump of a Linux target's physical memory (or
//! of an address space by `--dtb`): the kernel's own VMCOREINFO text as the
//! ELF note kdump's `/proc/vmcore` and QEMU's `dump-guest-memory` carry,
//! by which crash and drgn open the file as a kernel core and learn its
//! KASLR offset, symbols and struct offsets.

use super::*;
use crate::processes::KernelArgs;

/// The note's owner: the kernel's `VMCOREINFO_NOTE_NAME`.
const OWNER: &[u8] = b"VMCOREINFO\0";
/// The note's type: the kernel writes 0.
const NOTE_TYPE: u32 = 0;

/// `leechio dump`'s switch for the note.
#[derive(Args)]
pub(super) struct VmcoreinfoArgs {
    /// Do not look for a Linux kernel in a physical (or --dtb) ELF dump, so no VMCOREINFO note (the note crash and drgn read the dump by)
    #[arg(long)]
    no_vmcoreinfo: bool,
}

/// What a dump learned of the target's kernel for its headers.
#[derive(Default)]
pub(super) struct KernelNote {
    /// The VMCOREINFO note (empty when there is none).
    pub note: Vec<u8>,
    /// Where the kernel's direct map begins (`page_offset_base`): a
    /// physical dump's segments are at their direct-map addresses, as
    /// kdump's are, so that a reader's virtual view holds nothing the
    /// kernel does not map.
    pub direct_map: Option<u64>,
}

/// The VMCOREINFO note for an ELF dump of `args`, found through the
/// kernel in `mem`; none with `--no-vmcoreinfo`, or when there is no
/// kernel, no text, or a text that contradicts the kernel found (a note
/// is the kernel's word to crash and drgn: one known to be false is left
/// out rather than corrected), then with a line on stderr that says why.
pub(super) fn note(mem: &Memory, args: &DumpArgs) -> KernelNote {
    if args.vmcoreinfo.no_vmcoreinfo {
        return KernelNote::default();
    }
    let kernel = KernelArgs {
        dtb: args.dtb,
        btf: args.btf.clone(),
        no_cache: args.no_cache,
        ..KernelArgs::default()
    }
    .find(mem);
    let kernel = match kernel {
        Ok(kernel) => kernel,
        Err(Failure(why)) => {
            errln!(
                "leechio: no VMCOREINFO note in the dump (crash and drgn need it): {}",
                crate::output::escape(&why.to_string())
            );
            return KernelNote::default();
        }
    };
    let direct_map = Some(kernel.direct_map_base());
    match kernel.vmcoreinfo() {
        Ok(text) => KernelNote {
            note: elf_note(OWNER, NOTE_TYPE, text.as_bytes()),
            direct_map,
        },
        Err(why) => {
            errln!(
                "leechio: no VMCOREINFO note in the dump (crash and drgn need it): {}",
                crate::output::escape(&why.to_string())
            );
            KernelNote {
                note: Vec::new(),
                direct_map,
            }
        }
    }
}

/// An ELF note: the sizes of its owner's name (with its NUL) and of its
/// description, its type, then the name and the description, each padded
/// to 4 bytes.
pub(super) fn elf_note(owner: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
    let mut note = Vec::new();
    for word in [owner.len() as u32, desc.len() as u32, kind] {
        note.extend(word.to_le_bytes());
    }
    note.extend(owner);
    note.resize(note.len().next_multiple_of(4), 0);
    note.extend(desc);
    note.resize(note.len().next_multiple_of(4), 0);
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_pad_name_and_description_to_four_bytes() {
        let note = elf_note(OWNER, NOTE_TYPE, b"OSRELEASE=6.1\n");
        let mut expected = Vec::new();
        expected.extend(11u32.to_le_bytes());
        expected.extend(14u32.to_le_bytes());
        expected.extend(0u32.to_le_bytes());
        expected.extend(b"VMCOREINFO\0\0");
        expected.extend(b"OSRELEASE=6.1\n\0\0");
        assert_eq!(note, expected);
    }
}
