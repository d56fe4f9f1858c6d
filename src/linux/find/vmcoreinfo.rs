//! The kernel's own VMCOREINFO: the text Linux's crash support
//! (`kernel/crash_core.c`) writes at boot into a zeroed page that
//! `vmcoreinfo_data` points to, `vmcoreinfo_size` bytes long: one
//! `KEY=VALUE` line each for the release, the page size, KASLR's offset and
//! the symbols and struct offsets that crash, makedumpfile and drgn read a
//! dump by. kdump and QEMU copy it into their dumps as an ELF note.
//!
//! The text comes from the target, so what it says that the kernel found
//! can confirm is checked against it before the text is given: the
//! symbols kallsyms gave (`init_top_pgt`, and `swapper_pg_dir` and
//! `_stext`, which are `init_top_pgt` and `_text` on x86-64), `phys_base`
//! (the image's physical base less its virtual offset), the paging mode
//! (`pgtable_l5_enabled`) and KASLR's `KERNELOFFSET` (which must put the
//! link-time `_text` on a 2 MiB boundary of the kernel's mapping). A text that contradicts them is
//! refused: a reader would take its values for the kernel's.

use std::collections::BTreeMap;

use super::image::KERNEL_MAP;
use crate::linux::Kernel;
use crate::vm::Paging;

/// The pointer to the text.
pub(super) const DATA_SYMBOL: &str = "vmcoreinfo_data";
/// Its length in bytes (`size_t`).
pub(super) const SIZE_SYMBOL: &str = "vmcoreinfo_size";
/// The kernel never writes more than a page (`VMCOREINFO_BYTES`).
const MAX_LEN: u64 = 4096;
/// The kernel is linked, and placed by KASLR, on a boundary of
/// `CONFIG_PHYSICAL_ALIGN`, at least 2 MiB on x86-64.
const LINK_ALIGN: u64 = 2 << 20;
/// The link-time `_text` of x86-64 kernels built with the default
/// `CONFIG_PHYSICAL_START` (16 MiB), as distributions build them.
const DEFAULT_LINK_BASE: u64 = KERNEL_MAP + (16 << 20);
/// The kernel mapping's size when the text does not give
/// `KERNEL_IMAGE_SIZE`.
const DEFAULT_IMAGE_SIZE: u64 = 1 << 30;

/// Why the kernel's VMCOREINFO could not be read; one line each.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VmcoreinfoError {
    /// kallsyms lacks one of the two symbols.
    #[error("the kernel has no {0} symbol (built without CONFIG_CRASH_CORE?)")]
    NoSymbol(&'static str),
    /// A pointer, the size or the text could not be read.
    #[error("VMCOREINFO unreadable: {0}")]
    Unreadable(String),
    /// What was read is not the kernel's VMCOREINFO.
    #[error("VMCOREINFO at {address:#x} is not valid: {why}")]
    Invalid {
        /// Where the text was (`vmcoreinfo_data`'s value, or the
        /// pointer's own address when the pointer is the fault).
        address: u64,
        /// What is wrong with it.
        why: String,
    },
    /// The text says something the kernel found shows to be false.
    #[error("VMCOREINFO at {address:#x} contradicts the kernel found: {why}")]
    Contradicts {
        /// Where the text was.
        address: u64,
        /// The line, and what the kernel has instead.
        why: String,
    },
}

impl Kernel {
    /// The kernel's VMCOREINFO text, as `/sys/kernel/vmcoreinfo`'s note
    /// holds it (blocking; see [`Kernel::vmcoreinfo_async`]).
    pub fn vmcoreinfo(&self) -> Result<String, VmcoreinfoError> {
        self.memory().block_on(self.vmcoreinfo_async())
    }

    /// The kernel's VMCOREINFO text: the pointer and the size in one
    /// batch, then the text, checked to be `KEY=VALUE` lines that start
    /// with this kernel's `OSRELEASE` and give a `PAGESIZE`, and to agree
    /// with the kernel found (see the module's documentation). A
    /// `KERNELOFFSET` that is possible but puts the link-time `_text`
    /// elsewhere than distributions' kernels have it is logged as a
    /// warning.
    pub async fn vmcoreinfo_async(&self) -> Result<String, VmcoreinfoError> {
        let symbol = |name| self.symbol(name).ok_or(VmcoreinfoError::NoSymbol(name));
        let (data_at, size_at) = (symbol(DATA_SYMBOL)?, symbol(SIZE_SYMBOL)?);
        let kmem = self.kernel_memory();
        let (data, size) = futures::join!(kmem.read_vec(data_at, 8), kmem.read_vec(size_at, 8));
        let word = |bytes: Result<Vec<u8>, String>| {
            bytes
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes read")))
                .map_err(VmcoreinfoError::Unreadable)
        };
        let (data, size) = (word(data)?, word(size)?);
        if data == 0 {
            return Err(VmcoreinfoError::Invalid {
                address: data_at,
                why: format!("{DATA_SYMBOL} is NULL (the kernel could not allocate it)"),
            });
        }
        if size == 0 || size > MAX_LEN {
            return Err(VmcoreinfoError::Invalid {
                address: data,
                why: format!("{SIZE_SYMBOL} is {size}, not 1 to {MAX_LEN} bytes"),
            });
        }
        let text = kmem
            .read_vec(data, size as usize)
            .await
            .map_err(VmcoreinfoError::Unreadable)?;
        let text = check(text, self.release())
            .map_err(|why| VmcoreinfoError::Invalid { address: data, why })?;
        let found = Found {
            virtual_base: self.virtual_base(),
            physical_base: self.physical_base(),
            paging: self.paging(),
            symbols: &self.symbols,
        };
        let unusual = agrees(&text, &found)
            .map_err(|why| VmcoreinfoError::Contradicts { address: data, why })?;
        for line in unusual {
            log::warn!("VMCOREINFO at {data:#x}: {line}");
        }
        Ok(text)
    }
}

/// What the kernel found has that VMCOREINFO also says.
struct Found<'a> {
    virtual_base: u64,
    physical_base: u64,
    /// The mode its page tables were found to be walked in.
    paging: Paging,
    symbols: &'a BTreeMap<String, u64>,
}

impl Found<'_> {
    /// The address of `name` as the kernel found has it.
    fn symbol(&self, name: &str) -> Option<u64> {
        match name {
            // On x86-64 `_stext` is `_text`, and `swapper_pg_dir` a name
            // of `init_top_pgt`.
            "_stext" => Some(self.virtual_base),
            "swapper_pg_dir" => self.symbols.get("init_top_pgt").copied(),
            _ => self.symbols.get(name).copied(),
        }
    }
}

/// Whether `text` agrees with `found`: the first contradiction, else the
/// lines that are possible but unusual.
fn agrees(text: &str, found: &Found) -> Result<Vec<String>, String> {
    let mut unusual = Vec::new();
    let lines = || text.lines().filter_map(|l| l.split_once('='));
    let image_size = lines()
        .find(|(k, _)| *k == "NUMBER(KERNEL_IMAGE_SIZE)")
        .and_then(|(_, v)| v.parse::<u64>().ok())
        .filter(|&size| size > 0 && size <= DEFAULT_IMAGE_SIZE)
        .unwrap_or(DEFAULT_IMAGE_SIZE);
    for (key, value) in lines() {
        let says = || format!("it says {key}={value}");
        if let Some(name) = key
            .strip_prefix("SYMBOL(")
            .and_then(|k| k.strip_suffix(')'))
        {
            let Some(expected) = found.symbol(name) else {
                continue;
            };
            if u64::from_str_radix(value, 16).ok() != Some(expected) {
                return Err(format!(
                    "{}, the kernel's {name} is at {expected:#x}",
                    says()
                ));
            }
        } else if key == "NUMBER(phys_base)" {
            // `__pa_symbol(x)` is `x - __START_KERNEL_map + phys_base`.
            let expected = found
                .physical_base
                .wrapping_sub(found.virtual_base.wrapping_sub(KERNEL_MAP))
                as i64;
            if value.parse::<i64>().ok() != Some(expected) {
                return Err(format!(
                    "{}, the kernel's text at {:#x} is at physical {:#x}: phys_base {expected}",
                    says(),
                    found.virtual_base,
                    found.physical_base
                ));
            }
        } else if key == "NUMBER(pgtable_l5_enabled)" {
            let expected = u8::from(found.paging == Paging::FiveLevel);
            if value.parse::<u8>().ok() != Some(expected) {
                return Err(format!(
                    "{}, the kernel's page tables are {}",
                    says(),
                    match found.paging {
                        Paging::FourLevel => "4-level",
                        Paging::FiveLevel => "5-level",
                    }
                ));
            }
        } else if key == "KERNELOFFSET" {
            let offset = u64::from_str_radix(value, 16)
                .map_err(|_| format!("{}, not a hexadecimal number", says()))?;
            // KASLR moves `_text` from where it was linked by `offset`.
            let link = found.virtual_base.wrapping_sub(offset);
            let in_map = link >= KERNEL_MAP && link - KERNEL_MAP < image_size;
            if !in_map || link % LINK_ALIGN != 0 {
                return Err(format!(
                    "{}, which puts the link-time _text at {link:#x} for the kernel's text at {:#x}: no {}-aligned address of the kernel mapping",
                    says(),
                    found.virtual_base,
                    "2 MiB"
                ));
            }
            if link != DEFAULT_LINK_BASE {
                unusual.push(format!(
                    "{}: the kernel was linked at {link:#x}, not {DEFAULT_LINK_BASE:#x} (the default CONFIG_PHYSICAL_START); kept, as the text may be right",
                    says()
                ));
            }
        }
    }
    Ok(unusual)
}

/// `text` as VMCOREINFO of the kernel whose release is `release`:
/// printable `KEY=VALUE` lines, each ending in a newline, the first
/// `OSRELEASE=release`, one of them `PAGESIZE=` a power of two.
fn check(text: Vec<u8>, release: &str) -> Result<String, String> {
    let text = String::from_utf8(text).map_err(|_| "it is not UTF-8 text".to_string())?;
    let Some(body) = text.strip_suffix('\n') else {
        return Err("its last line has no newline".into());
    };
    for line in body.split('\n') {
        let printable = line.chars().all(|c| !c.is_control());
        if !printable || !line.contains('=') {
            return Err(format!("line {line:?} is not KEY=VALUE"));
        }
    }
    let first = body.split('\n').next().unwrap_or_default();
    let expected = format!("OSRELEASE={release}");
    if first != expected {
        return Err(format!("it starts with {first:?}, not {expected:?}"));
    }
    let page_size = body
        .split('\n')
        .find_map(|l| l.strip_prefix("PAGESIZE="))
        .ok_or("it has no PAGESIZE line")?;
    match page_size.parse::<u64>() {
        Ok(n) if n.is_power_of_two() => Ok(text),
        _ => Err(format!("PAGESIZE={page_size} is not a power of two")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RELEASE: &str = "6.1.0-56-amd64";

    fn checked(text: &str) -> Result<String, String> {
        check(text.as_bytes().to_vec(), RELEASE)
    }

    #[test]
    fn the_kernels_text_passes_whole() {
        let text = "OSRELEASE=6.1.0-56-amd64\nBUILD-ID=ab12\nPAGESIZE=4096\nSYMBOL(init_uts_ns)=ffffffff82a12345\nKERNELOFFSET=0\n";
        assert_eq!(checked(text).as_deref(), Ok(text));
    }

    #[test]
    fn text_of_another_kernel_or_no_text_is_refused_by_cause() {
        let cases = [
            (
                "OSRELEASE=6.1.0-55-amd64\nPAGESIZE=4096\n",
                "it starts with \"OSRELEASE=6.1.0-55-amd64\", not \"OSRELEASE=6.1.0-56-amd64\"",
            ),
            (
                "PAGESIZE=4096\nOSRELEASE=6.1.0-56-amd64\n",
                "it starts with \"PAGESIZE=4096\", not \"OSRELEASE=6.1.0-56-amd64\"",
            ),
            ("OSRELEASE=6.1.0-56-amd64\n", "it has no PAGESIZE line"),
            (
                "OSRELEASE=6.1.0-56-amd64\nPAGESIZE=4095\n",
                "PAGESIZE=4095 is not a power of two",
            ),
            (
                "OSRELEASE=6.1.0-56-amd64\nPAGESIZE=4096",
                "its last line has no newline",
            ),
            (
                "OSRELEASE=6.1.0-56-amd64\nPAGESIZE=4096\0\0\n",
                "line \"PAGESIZE=4096\\0\\0\" is not KEY=VALUE",
            ),
            (
                "OSRELEASE=6.1.0-56-amd64\n\nPAGESIZE=4096\n",
                "line \"\" is not KEY=VALUE",
            ),
        ];
        for (text, why) in cases {
            assert_eq!(checked(text), Err(why.to_string()), "{text:?}");
        }
        assert_eq!(
            check(vec![b'O', 0xff, b'\n'], RELEASE),
            Err("it is not UTF-8 text".to_string())
        );
    }

    /// A kernel found as the test guest's without KASLR.
    fn found(symbols: &BTreeMap<String, u64>) -> Found<'_> {
        Found {
            virtual_base: 0xffff_ffff_8100_0000,
            physical_base: 0x100_0000,
            paging: Paging::FourLevel,
            symbols,
        }
    }

    fn symbols() -> BTreeMap<String, u64> {
        [("init_top_pgt".to_string(), 0xffff_ffff_82a1_0000)].into()
    }

    const AGREEING: &str = "OSRELEASE=6.1.0-56-amd64\nPAGESIZE=4096\nSYMBOL(swapper_pg_dir)=ffffffff82a10000\nSYMBOL(_stext)=ffffffff81000000\nSYMBOL(mem_section)=ffff88800fe54000\nNUMBER(phys_base)=0\nSYMBOL(init_top_pgt)=ffffffff82a10000\nNUMBER(pgtable_l5_enabled)=0\nKERNELOFFSET=0\nNUMBER(KERNEL_IMAGE_SIZE)=1073741824\n";

    #[test]
    fn a_text_that_agrees_with_the_kernel_found_passes() {
        let symbols = symbols();
        assert_eq!(agrees(AGREEING, &found(&symbols)), Ok(vec![]));
        // Under KASLR: text 0x2e00000 higher, loaded at physical 0x7000000.
        let moved = Found {
            virtual_base: 0xffff_ffff_83e0_0000,
            physical_base: 0x700_0000,
            paging: Paging::FiveLevel,
            symbols: &[("init_top_pgt".to_string(), 0xffff_ffff_8581_0000)].into(),
        };
        let text = "SYMBOL(_stext)=ffffffff83e00000\nNUMBER(phys_base)=52428800\nSYMBOL(init_top_pgt)=ffffffff85810000\nNUMBER(pgtable_l5_enabled)=1\nKERNELOFFSET=2e00000\n";
        assert_eq!(agrees(text, &moved), Ok(vec![]));
    }

    #[test]
    fn a_text_that_contradicts_the_kernel_found_is_refused_by_its_line() {
        let symbols = symbols();
        let cases = [
            (
                "KERNELOFFSET=0",
                "KERNELOFFSET=1234567",
                "it says KERNELOFFSET=1234567, which puts the link-time _text at 0xffffffff7fdcba99",
            ),
            (
                "KERNELOFFSET=0",
                "KERNELOFFSET=40000000",
                "it says KERNELOFFSET=40000000, which puts the link-time _text at 0xffffffff41000000",
            ),
            (
                "NUMBER(phys_base)=0",
                "NUMBER(phys_base)=2097152",
                "it says NUMBER(phys_base)=2097152, the kernel's text at 0xffffffff81000000 is at physical 0x1000000: phys_base 0",
            ),
            (
                "SYMBOL(init_top_pgt)=ffffffff82a10000",
                "SYMBOL(init_top_pgt)=ffffffff82a11000",
                "it says SYMBOL(init_top_pgt)=ffffffff82a11000, the kernel's init_top_pgt is at 0xffffffff82a10000",
            ),
            (
                "SYMBOL(swapper_pg_dir)=ffffffff82a10000",
                "SYMBOL(swapper_pg_dir)=0",
                "it says SYMBOL(swapper_pg_dir)=0, the kernel's swapper_pg_dir is at 0xffffffff82a10000",
            ),
            (
                "SYMBOL(_stext)=ffffffff81000000",
                "SYMBOL(_stext)=ffffffff81200000",
                "it says SYMBOL(_stext)=ffffffff81200000, the kernel's _stext is at 0xffffffff81000000",
            ),
            (
                "NUMBER(pgtable_l5_enabled)=0",
                "NUMBER(pgtable_l5_enabled)=1",
                "it says NUMBER(pgtable_l5_enabled)=1, the kernel's page tables are 4-level",
            ),
        ];
        for (line, changed, why) in cases {
            let text = AGREEING.replace(line, changed);
            let result = agrees(&text, &found(&symbols));
            assert!(
                result.as_ref().is_err_and(|e| e.starts_with(why)),
                "{changed}: {result:?}"
            );
        }
    }

    #[test]
    fn a_possible_but_unusual_link_base_is_kept_with_a_warning() {
        let symbols = symbols();
        let text = AGREEING.replace("KERNELOFFSET=0", "KERNELOFFSET=200000");
        let unusual = agrees(&text, &found(&symbols)).unwrap();
        assert_eq!(unusual.len(), 1);
        assert!(
            unusual[0].contains("linked at 0xffffffff80e00000"),
            "{unusual:?}"
        );
    }
}
