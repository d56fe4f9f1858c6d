//! A process's environment, as `/proc/PID/environ` gives it: the bytes
//! between its `mm`'s `env_start` and `env_end`, read through its own
//! page tables.

use crate::linux::kmem::KernelMemory;
use crate::AddressSpace;

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
    let dtb = kmem
        .physical(pgd)
        .filter(|pa| pa % 0x1000 == 0)
        .ok_or_else(|| format!("its pgd {pgd:#x} is no page of the direct map"))?;
    if start >= end {
        return Ok(Vec::new());
    }
    let paging = kmem.space.paging();
    if end > paging.lower_half_end() {
        return Err(format!(
            "environment at {start:#x}..{end:#x} is not in user memory"
        ));
    }
    if end - start > MAX_ENVIRONMENT {
        return Err(format!(
            "{} bytes of environment at {start:#x}, more than the {MAX_ENVIRONMENT} read",
            end - start
        ));
    }
    let space = AddressSpace::new(kmem.mem.clone(), dtb, paging);
    let mut bytes = vec![0u8; (end - start) as usize];
    space.read(start, &mut bytes).await.map_err(|e| {
        format!(
            "{} of the {} bytes at {start:#x} unreadable ({})",
            e.failed_bytes(),
            bytes.len(),
            e.failed
                .first()
                .map(|f| f.reason.to_string())
                .unwrap_or_default()
        )
    })?;
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
