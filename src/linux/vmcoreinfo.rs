//! The kernel's own VMCOREINFO: the text Linux's crash support
//! (`kernel/crash_core.c`) writes at boot into a zeroed page that
//! `vmcoreinfo_data` points to, `vmcoreinfo_size` bytes long: one
//! `KEY=VALUE` line each for the release, the page size, KASLR's offset and
//! the symbols and struct offsets that crash, makedumpfile and drgn read a
//! dump by. kdump and QEMU copy it into their dumps as an ELF note.

use super::Kernel;
use crate::Memory;

/// The pointer to the text.
pub(super) const DATA_SYMBOL: &str = "vmcoreinfo_data";
/// Its length in bytes (`size_t`).
pub(super) const SIZE_SYMBOL: &str = "vmcoreinfo_size";
/// The kernel never writes more than a page (`VMCOREINFO_BYTES`).
const MAX_LEN: u64 = 4096;

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
}

impl Kernel {
    /// The kernel's VMCOREINFO text, as `/sys/kernel/vmcoreinfo`'s note
    /// holds it (blocking; see [`Kernel::vmcoreinfo_async`]).
    pub fn vmcoreinfo(&self, mem: &Memory) -> Result<String, VmcoreinfoError> {
        mem.block_on(self.vmcoreinfo_async(mem))
    }

    /// The kernel's VMCOREINFO text: the pointer and the size in one
    /// batch, then the text, checked to be `KEY=VALUE` lines that start
    /// with this kernel's `OSRELEASE` and give a `PAGESIZE`.
    pub async fn vmcoreinfo_async(&self, mem: &Memory) -> Result<String, VmcoreinfoError> {
        let symbol = |name| self.symbol(name).ok_or(VmcoreinfoError::NoSymbol(name));
        let (data_at, size_at) = (symbol(DATA_SYMBOL)?, symbol(SIZE_SYMBOL)?);
        let kmem = self.kernel_memory(mem);
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
        check(text, self.release()).map_err(|why| VmcoreinfoError::Invalid { address: data, why })
    }
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
}
