//! A task's credentials, as `/proc/PID/status` shows them: its
//! `real_cred`'s user and group ids and capability sets.

use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::CredLayout;

/// A task's user and group ids and capabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Credentials {
    /// Real, effective, saved and file-system user ids (the `Uid:` line).
    pub uid: [u32; 4],
    /// Real, effective, saved and file-system group ids (`Gid:`).
    pub gid: [u32; 4],
    /// Its capability sets.
    pub capabilities: Capabilities,
}

/// A task's capability sets, a bit per capability (`CapInh:` to
/// `CapAmb:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    pub inheritable: u64,
    pub permitted: u64,
    pub effective: u64,
    pub bounding: u64,
    /// `None` on kernels without ambient capabilities (before 4.3).
    pub ambient: Option<u64>,
}

/// The credentials at `cred` (a task's `real_cred`), checked to be in
/// use: a `struct cred` with no user is freed memory.
pub(super) async fn read(
    kmem: &KernelMemory<'_>,
    layout: &CredLayout,
    cred: u64,
) -> Result<Credentials, String> {
    if cred < kmem.kernel_half() {
        return Err(format!("real_cred {cred:#x} is no kernel address"));
    }
    let (first, len) = layout.span();
    let bytes = kmem.read_vec(cred.wrapping_add(first), len).await?;
    let word = |o: u64| bytes.u32_at(o - first).unwrap_or(0);
    let caps = |o: u64| bytes.u64_at(o - first).unwrap_or(0);
    if word(layout.usage) == 0 {
        return Err(format!(
            "the cred at {cred:#x} has no users: freed, not this task's"
        ));
    }
    Ok(Credentials {
        uid: layout.uids.map(word),
        gid: layout.gids.map(word),
        capabilities: Capabilities {
            inheritable: caps(layout.caps[0]),
            permitted: caps(layout.caps[1]),
            effective: caps(layout.caps[2]),
            bounding: caps(layout.caps[3]),
            ambient: layout.ambient.map(caps),
        },
    })
}
