//! Every symbol of the kernel's own table (what `/proc/kallsyms` lists for
//! the kernel image), decoded from its read-only data: one read of that
//! data, however many symbols.

use crate::linux::find::kallsyms;
use crate::linux::Kernel;

/// Most bytes of read-only data read (Debian 12's kernel has 9.5 MiB).
const MAX_RODATA: u64 = 256 << 20;

impl Kernel {
    /// Every symbol of the kernel's table with its address, in the table's
    /// order, or why it cannot be read (blocking; see
    /// [`Kernel::kallsyms_async`]).
    pub fn kallsyms(&self) -> Result<Vec<(String, u64)>, String> {
        self.memory().block_on(self.kallsyms_async())
    }

    /// Every symbol of the kernel's table: its read-only data read in one
    /// batch and the table in it decoded, checked as when the kernel was
    /// found.
    pub async fn kallsyms_async(&self) -> Result<Vec<(String, u64)>, String> {
        let rodata = self
            .image
            .rodata()
            .ok_or("the kernel image has no read-only data after its text")?;
        if rodata.len > MAX_RODATA {
            return Err(format!(
                "its read-only data is {:#x} bytes, more than {MAX_RODATA:#x}",
                rodata.len
            ));
        }
        let mut bytes = vec![0u8; rodata.len as usize];
        self.memory()
            .read(rodata.pa, &mut bytes)
            .await
            .map_err(|e| format!("its read-only data at {:#x}: {e}", rodata.va))?;
        kallsyms::all(&bytes, self.virtual_base()).ok_or_else(|| {
            format!(
                "no kallsyms tables in the read-only data at {:#x}",
                rodata.va
            )
        })
    }
}
