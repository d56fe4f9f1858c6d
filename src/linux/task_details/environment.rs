//! A process's environment, as `/proc/PID/environ` gives it: the bytes
//! between its `mm`'s `env_start` and `env_end`, read through its own
//! page tables.

use crate::linux::kmem::KernelMemory;
use crate::linux::user_memory;

/// Most bytes of an environment read; a longer one is cut and said.
/// (The kernel bounds arguments and environment together by a quarter of
/// the stack limit, which may be unlimited.)
pub(super) const MAX_ENVIRONMENT: u64 = 1 << 20;

/// The environment of the process whose `mm` holds `(pgd, env_start,
/// env_end)`, split at its NULs.
pub(super) async fn read(
    kmem: &KernelMemory<'_>,
    (pgd, start, end): (u64, u64, u64),
) -> Result<Vec<String>, String> {
    let dtb = user_memory::top_table(kmem, pgd)?;
    let range = (start, end);
    let bytes = user_memory::read_range(kmem, dtb, range, MAX_ENVIRONMENT, "environment").await?;
    Ok(split(&bytes))
}

/// The variables in `bytes`, each ending in a NUL (the last may not, when
/// the process wrote over its environment).
pub(super) fn split(bytes: &[u8]) -> Vec<String> {
    let bytes = bytes.strip_suffix(b"\0").unwrap_or(bytes);
    if bytes.is_empty() {
        return Vec::new();
    }
    bytes
        .split(|&b| b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect()
}
