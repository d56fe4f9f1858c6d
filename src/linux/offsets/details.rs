//! The offsets each task's details are read by: what memflow asks (its
//! executable, exit code, whether it runs 32-bit code) and what a
//! responder asks beyond the process list (credentials, start time,
//! environment). Each of the last three stands alone: a kernel whose BTF
//! lacks one still gives the others.

use crate::linux::find::btf::{Btf, BtfError};
use crate::linux::offsets::PathLayout;

/// Where the kernel says an `mm` runs 32-bit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CompatFlag {
    /// `mm->context.flags`, bit `MM_CONTEXT_UPROBE_IA32`.
    Flags(u64),
    /// `mm->context.ia32_compat` (kernels before 5.x): non-zero.
    Ia32Compat(u64),
}

impl CompatFlag {
    pub(crate) fn offset(self) -> u64 {
        match self {
            CompatFlag::Flags(at) | CompatFlag::Ia32Compat(at) => at,
        }
    }
}

/// Offsets of a task's credentials: `task_struct.real_cred` (what
/// `/proc/PID/status` shows) and `struct cred`'s ids and capability sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CredLayout {
    /// `task_struct.real_cred`.
    pub(crate) pointer: u64,
    /// `cred.usage`: a count of its users, never 0 while a task holds it.
    pub(crate) usage: u64,
    /// `uid`, `euid`, `suid`, `fsuid` (each a 4-byte `kuid_t`), in
    /// `/proc/PID/status`' order.
    pub(crate) uids: [u64; 4],
    /// `gid`, `egid`, `sgid`, `fsgid`.
    pub(crate) gids: [u64; 4],
    /// `cap_inheritable`, `cap_permitted`, `cap_effective`, `cap_bnd`
    /// (each 8 bytes: a `u64` from 6.3, two `u32`s before, the same bytes).
    pub(crate) caps: [u64; 4],
    /// `cap_ambient` (4.3 on).
    pub(crate) ambient: Option<u64>,
}

impl CredLayout {
    fn from_btf(btf: &Btf) -> Result<CredLayout, BtfError> {
        let c = |m: &str| btf.member_offset("cred", m);
        Ok(CredLayout {
            pointer: btf.member_offset("task_struct", "real_cred")?,
            usage: c("usage")?,
            uids: [c("uid")?, c("euid")?, c("suid")?, c("fsuid")?],
            gids: [c("gid")?, c("egid")?, c("sgid")?, c("fsgid")?],
            caps: [
                c("cap_inheritable")?,
                c("cap_permitted")?,
                c("cap_effective")?,
                c("cap_bset")?,
            ],
            ambient: c("cap_ambient").ok(),
        })
    }

    /// The span of a `struct cred` read: every member used.
    pub(crate) fn span(&self) -> (u64, usize) {
        let mut at: Vec<(u64, u64)> = vec![(self.usage, 4)];
        at.extend(self.uids.iter().chain(&self.gids).map(|&o| (o, 4)));
        at.extend(self.caps.iter().chain(&self.ambient).map(|&o| (o, 8)));
        let first = at.iter().map(|a| a.0).min().unwrap_or(0);
        let end = at.iter().map(|a| a.0 + a.1).max().unwrap_or(0);
        (first, (end - first) as usize)
    }
}

/// Offsets of a process's environment: its `mm`'s top table and
/// `env_start`..`env_end`, read through that table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EnvLayout {
    /// `mm_struct.pgd`, `env_start`, `env_end`.
    pub(crate) pgd: u64,
    pub(crate) start: u64,
    pub(crate) end: u64,
}

/// Offsets, from BTF, of what the details are read by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DetailsLayout {
    /// `task_struct.exit_code`, `.pid` and `.exit_state` (each 4 bytes).
    pub(crate) exit_code: u64,
    pub(crate) pid: u64,
    pub(crate) exit_state: u64,
    /// `mm_struct.exe_file`.
    pub(crate) exe_file: u64,
    pub(crate) compat: Option<CompatFlag>,
    pub(crate) paths: PathLayout,
    /// The task's credentials.
    pub(crate) credentials: Result<CredLayout, BtfError>,
    /// `task_struct.start_boottime` (5.5 on) or `real_start_time`: when
    /// it started, in nanoseconds since boot (what `/proc/PID/stat`'s
    /// start time counts in clock ticks).
    pub(crate) start_time: Result<u64, BtfError>,
    /// The process's environment.
    pub(crate) environment: Result<EnvLayout, BtfError>,
}

impl DetailsLayout {
    /// The offsets in `btf`; an error names the first member missing of
    /// those memflow needs (the rest fail alone).
    pub fn from_btf(btf: &Btf) -> Result<DetailsLayout, BtfError> {
        let compat = match btf.member_offset("mm_struct", "context.flags") {
            Ok(at) => Some(CompatFlag::Flags(at)),
            Err(_) => btf
                .member_offset("mm_struct", "context.ia32_compat")
                .ok()
                .map(CompatFlag::Ia32Compat),
        };
        let task = |m: &str| btf.member_offset("task_struct", m);
        let mm = |m: &str| btf.member_offset("mm_struct", m);
        Ok(DetailsLayout {
            exit_code: task("exit_code")?,
            pid: task("pid")?,
            exit_state: task("exit_state")?,
            exe_file: mm("exe_file")?,
            compat,
            paths: PathLayout::from_btf(btf)?,
            credentials: CredLayout::from_btf(btf),
            start_time: task("start_boottime").or_else(|_| task("real_start_time")),
            environment: (|| {
                Ok(EnvLayout {
                    pgd: mm("pgd")?,
                    start: mm("env_start")?,
                    end: mm("env_end")?,
                })
            })(),
        })
    }

    /// The span of a task read: its exit code, and the credentials'
    /// pointer and start time where the kernel has them.
    pub(crate) fn task_span(&self) -> (u64, usize) {
        let at = [
            Some((self.exit_code, 4)),
            self.credentials.as_ref().ok().map(|c| (c.pointer, 8)),
            self.start_time.as_ref().ok().map(|&o| (o, 8)),
        ];
        let first = at.iter().flatten().map(|a| a.0).min().unwrap_or(0);
        let end = at.iter().flatten().map(|a| a.0 + a.1).max().unwrap_or(0);
        (first, (end - first) as usize)
    }

    /// The span of an `mm` read: `exe_file`, the context flag, and the
    /// environment's members when asked for.
    pub(crate) fn mm_span(&self, environment: bool) -> (u64, usize) {
        let mut at = vec![Some(self.exe_file), self.compat.map(CompatFlag::offset)];
        if let (true, Ok(env)) = (environment, &self.environment) {
            at.extend([Some(env.pgd), Some(env.start), Some(env.end)]);
        }
        let first = at.iter().flatten().min().copied().unwrap_or(0);
        let last = at.iter().flatten().max().copied().unwrap_or(0);
        (first, (last + 8 - first) as usize)
    }
}
