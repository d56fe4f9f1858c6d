//! The walk of the open files: steps 1 to 4 (tasks, `files_struct`s, fd
//! tables, fd arrays), each a batch for every process at once.

use rustc_hash::FxHashMap;

use super::{FdTable, FilesFailure, TaskFiles};
use crate::join_all;
use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::{span, FilesLayout};
use crate::linux::paths::{Dnames, FileFields};

/// `NR_OPEN`: `fs.nr_open`'s default, assumed when it cannot be read.
const NR_OPEN: u64 = 1 << 20;
/// The most `fs.nr_open` can be set to (`sysctl_nr_open_max` on 64-bit
/// kernels: `INT_MAX` rounded down to `BITS_PER_LONG`).
const NR_OPEN_MAX: u64 = i32::MAX as u64 & !(FD_STEP - 1);
/// `BITS_PER_LONG`: a table holds a multiple of it.
const FD_STEP: u64 = 64;

/// A walk of the open files: the kernel memory it reads, and what it
/// reads by.
pub(super) struct Walk<'a> {
    pub(super) kmem: KernelMemory<'a>,
    pub(super) layout: &'a FilesLayout,
    pub(super) dnames: Dnames,
    /// Where `sysctl_nr_open` is.
    pub(super) nr_open: Option<u64>,
}

/// An fd table as read: how many fds, and where its fd array and
/// close-on-exec bitmap lie.
#[derive(Debug, Clone, Copy)]
struct Table {
    max_fds: u64,
    fd: u64,
    close_on_exec: u64,
}

/// One fd of a table: its number, its `struct file` and whether it is
/// closed on exec (`None`: the bitmap could not be read).
pub(super) type Slot = (u32, u64, Option<bool>);

/// What a `struct file` holds besides its path.
#[derive(Debug, Clone, Copy)]
pub(super) struct FileRead {
    pub(super) fields: FileFields,
    pub(super) flags: u32,
    pub(super) mode: u32,
    pub(super) pos: i64,
    pub(super) private_data: u64,
}

/// `len` bytes at `at` from `bytes`, which were read at `base`.
fn inside(bytes: &[u8], base: u64, at: u64, len: u64) -> Option<&[u8]> {
    bytes.bytes_at(at.checked_sub(base)?, len)
}

pub(super) fn failure(
    pid: Option<u32>,
    fd: Option<u32>,
    address: u64,
    reason: String,
) -> FilesFailure {
    FilesFailure {
        pid,
        fd,
        address,
        reason,
    }
}

impl Walk<'_> {
    /// Whether `p` can be a kernel object's address.
    fn kernel_pointer(&self, p: u64) -> bool {
        p >= self.kmem.kernel_half() && p % 8 == 0
    }

    /// The files of `tasks` (of the process `wanted` alone when given).
    pub(super) async fn run(&self, tasks: &[u64], wanted: Option<u32>) -> TaskFiles {
        let mut failed = Vec::new();
        let l = self.layout;
        // Step 1: each task's files, and fs.nr_open.
        let (first, len) = span(&[(l.task_files, 8), (l.task_pid, 4), (l.task_tgid, 4)]);
        let (reads, nr_open) = futures::join!(
            join_all(
                tasks
                    .iter()
                    .map(|&t| self.kmem.read_vec(t.wrapping_add(first), len as usize))
            ),
            async {
                let at = self.nr_open?;
                self.kmem.read_vec(at, 4).await.ok()?.u32_at(0)
            }
        );
        let mut found: Vec<Option<(u32, u64)>> = Vec::with_capacity(tasks.len());
        for (&task, bytes) in tasks.iter().zip(reads) {
            let bytes = match bytes {
                Ok(bytes) => bytes,
                Err(why) => {
                    failed.push(failure(None, None, task, format!("task: {why}")));
                    found.push(None);
                    continue;
                }
            };
            let pid = bytes.u32_at(l.task_pid - first).unwrap_or(0);
            let tgid = bytes.u32_at(l.task_tgid - first).unwrap_or(0);
            let files = bytes.u64_at(l.task_files - first).unwrap_or(0);
            // Threads share their process's table.
            if pid != tgid || wanted.is_some_and(|w| w != pid) {
                found.push(None);
                continue;
            }
            if files != 0 && !self.kernel_pointer(files) {
                let why = format!("its files_struct pointer {files:#x} is no kernel address");
                failed.push(failure(Some(pid), None, task, why));
                found.push(None);
                continue;
            }
            found.push(Some((pid, files)));
        }
        // The first process of each files_struct names its failures.
        let mut owner: FxHashMap<u64, u32> = FxHashMap::default();
        for &(pid, files) in found.iter().flatten() {
            if files != 0 {
                owner.entry(files).or_insert(pid);
            }
        }
        let mut structs: Vec<u64> = owner.keys().copied().collect();
        structs.sort_unstable();
        let slots = self.tables(&structs, &owner, nr_open, &mut failed).await;
        let fds = self.files(&slots, &owner, &mut failed).await;
        let tasks = found
            .into_iter()
            .map(|f| {
                let (pid, files) = f?;
                let fds = match files {
                    0 => Vec::new(),
                    files => fds.get(&files).cloned().unwrap_or_default(),
                };
                Some(FdTable {
                    pid,
                    files: (files != 0).then_some(files),
                    fds,
                })
            })
            .collect();
        TaskFiles { tasks, failed }
    }

    /// The most fds a table may hold, and what says so: `fs.nr_open` as
    /// read, and what the target's memory holds.
    fn max_fds(&self, nr_open: Option<u32>) -> (u64, String) {
        let (cap, why) = match nr_open.map(u64::from) {
            Some(n) if (1..=NR_OPEN_MAX).contains(&n) => (
                n.next_multiple_of(FD_STEP),
                format!("the most fs.nr_open ({n}) allows"),
            ),
            Some(n) => (
                NR_OPEN,
                format!("the most NR_OPEN ({NR_OPEN}) allows (the kernel's fs.nr_open reads {n}, which it cannot be)"),
            ),
            None => (
                NR_OPEN,
                format!("the most NR_OPEN ({NR_OPEN}) allows (the kernel's fs.nr_open could not be read)"),
            ),
        };
        let memory = self.kmem.limit / 8;
        match memory < cap {
            true => (
                memory,
                format!(
                    "as many fd pointers as the target's {} bytes of memory hold",
                    self.kmem.limit
                ),
            ),
            false => (cap, why),
        }
    }

    /// Steps 2 to 4: the fds of each `files_struct` in `structs`.
    async fn tables(
        &self,
        structs: &[u64],
        owner: &FxHashMap<u64, u32>,
        nr_open: Option<u32>,
        failed: &mut Vec<FilesFailure>,
    ) -> FxHashMap<u64, Vec<Slot>> {
        let l = self.layout;
        let (fs_first, fs_len) = l.files_span();
        let (t_first, t_len) = l.table_span();
        let read = join_all(structs.iter().map(|&s| {
            self.kmem
                .read_vec(s.wrapping_add(fs_first), fs_len as usize)
        }))
        .await;
        let mut bytes_of: FxHashMap<u64, Vec<u8>> = FxHashMap::default();
        let mut outside = Vec::new();
        for (&s, bytes) in structs.iter().zip(read) {
            match bytes {
                Ok(bytes) => {
                    let fdt = bytes.u64_at(l.fdt - fs_first).unwrap_or(0);
                    if fdt != s.wrapping_add(l.fdtab) {
                        outside.push((s, fdt));
                    }
                    bytes_of.insert(s, bytes);
                }
                Err(why) => failed.push(failure(
                    owner.get(&s).copied(),
                    None,
                    s,
                    format!("files_struct: {why}"),
                )),
            }
        }
        // Step 3: the tables outside their files_struct.
        let read = join_all(outside.iter().map(|&(_, fdt)| async move {
            match self.kernel_pointer(fdt) {
                true => {
                    self.kmem
                        .read_vec(fdt.wrapping_add(t_first), t_len as usize)
                        .await
                }
                false => Err("no kernel address".into()),
            }
        }))
        .await;
        let mut table_bytes: FxHashMap<u64, Result<Vec<u8>, String>> =
            outside.iter().map(|o| o.0).zip(read).collect();
        let (cap, cap_why) = self.max_fds(nr_open);
        let mut tables: Vec<(u64, Table)> = Vec::new();
        for &s in structs {
            let Some(bytes) = bytes_of.get(&s) else {
                continue;
            };
            let pid = owner.get(&s).copied();
            let (table, fdt) = match table_bytes.remove(&s) {
                None => {
                    let base = s.wrapping_add(fs_first);
                    let fdtab = s.wrapping_add(l.fdtab);
                    let table = inside(bytes, base, fdtab.wrapping_add(t_first), t_len);
                    (table.map(|b| b.to_vec()), fdtab)
                }
                Some(Ok(b)) => (Some(b), bytes.u64_at(l.fdt - fs_first).unwrap_or(0)),
                Some(Err(why)) => {
                    let fdt = bytes.u64_at(l.fdt - fs_first).unwrap_or(0);
                    failed.push(failure(pid, None, fdt, format!("fdtable: {why}")));
                    continue;
                }
            };
            let Some(table) = table else { continue };
            let table = Table {
                max_fds: u64::from(table.u32_at(l.max_fds - t_first).unwrap_or(0)),
                fd: table.u64_at(l.fd - t_first).unwrap_or(0),
                close_on_exec: table.u64_at(l.close_on_exec - t_first).unwrap_or(0),
            };
            match self.check(s, fdt, &table, cap, &cap_why) {
                Ok(()) => tables.push((s, table)),
                Err(why) => failed.push(failure(pid, None, fdt, why)),
            }
        }
        tables.sort_unstable_by_key(|t| t.0);
        self.slots(&tables, &bytes_of, owner, failed).await
    }

    /// Whether `table`, reached from `files_struct` `s` at `fdt`, is one
    /// the kernel could have made.
    fn check(
        &self,
        s: u64,
        fdt: u64,
        table: &Table,
        cap: u64,
        cap_why: &str,
    ) -> Result<(), String> {
        let l = self.layout;
        let t = table;
        if t.max_fds == 0 || t.max_fds % FD_STEP != 0 {
            return Err(format!(
                "max_fds is {}, not a multiple of {FD_STEP} as every table's is",
                t.max_fds
            ));
        }
        if t.max_fds > cap {
            return Err(format!(
                "max_fds is {}, more than {cap}, {cap_why}",
                t.max_fds
            ));
        }
        if fdt == s.wrapping_add(l.fdtab) {
            // The table inside the files_struct serves its own array.
            let own = (
                l.fd_array_len,
                s.wrapping_add(l.fd_array),
                s.wrapping_add(l.close_on_exec_init),
            );
            if (t.max_fds, t.fd, t.close_on_exec) != own {
                return Err(format!(
                    "the table inside the files_struct says {} fds at {:#x} (bitmap {:#x}), not its own {} at {:#x} (bitmap {:#x}): torn",
                    t.max_fds, t.fd, t.close_on_exec, own.0, own.1, own.2
                ));
            }
        } else if !self.kernel_pointer(t.fd) || !self.kernel_pointer(t.close_on_exec) {
            return Err(format!(
                "its fd array {:#x} or bitmap {:#x} is no kernel address",
                t.fd, t.close_on_exec
            ));
        }
        Ok(())
    }

    /// Step 4: the fd arrays and bitmaps of `tables`, taken from their
    /// `files_struct` where they lie in it, read otherwise; no more bytes
    /// of arrays than the target's memory holds.
    async fn slots(
        &self,
        tables: &[(u64, Table)],
        bytes_of: &FxHashMap<u64, Vec<u8>>,
        owner: &FxHashMap<u64, u32>,
        failed: &mut Vec<FilesFailure>,
    ) -> FxHashMap<u64, Vec<Slot>> {
        let (fs_first, _) = self.layout.files_span();
        let mut budget = self.kmem.limit;
        let mut wanted = Vec::new();
        for &(s, t) in tables {
            let held = |at: u64, len: u64| {
                inside(&bytes_of[&s], s.wrapping_add(fs_first), at, len).map(|b| b.to_vec())
            };
            let (array, bitmap) = (
                held(t.fd, t.max_fds * 8),
                held(t.close_on_exec, t.max_fds / 8),
            );
            let more = [&array, &bitmap]
                .iter()
                .zip([t.max_fds * 8, t.max_fds / 8])
                .filter(|(held, _)| held.is_none())
                .map(|(_, len)| len)
                .sum::<u64>();
            if more > budget {
                let why = format!(
                    "its {} fds take {more} bytes to read, more than the {budget} of the target's memory left after the tables before it",
                    t.max_fds
                );
                failed.push(failure(owner.get(&s).copied(), None, t.fd, why));
                continue;
            }
            budget -= more;
            wanted.push((s, t, array, bitmap));
        }
        let read = join_all(wanted.iter().map(|(_, t, array, bitmap)| async move {
            let array = async {
                match array {
                    Some(held) => Ok(held.clone()),
                    None => self.kmem.read_vec(t.fd, (t.max_fds * 8) as usize).await,
                }
            };
            let bitmap = async {
                match bitmap {
                    Some(held) => Ok(held.clone()),
                    None => {
                        let len = (t.max_fds / 8) as usize;
                        self.kmem.read_vec(t.close_on_exec, len).await
                    }
                }
            };
            futures::join!(array, bitmap)
        }))
        .await;
        let mut slots = FxHashMap::default();
        for ((s, t, ..), (array, bitmap)) in wanted.iter().zip(read) {
            let pid = owner.get(s).copied();
            let array = match array {
                Ok(array) => array,
                Err(why) => {
                    failed.push(failure(pid, None, t.fd, format!("fd array: {why}")));
                    continue;
                }
            };
            let bitmap = match bitmap {
                Ok(bitmap) => Some(bitmap),
                Err(why) => {
                    let why = format!("close-on-exec bitmap: {why}; the fds' flags are unknown");
                    failed.push(failure(pid, None, t.close_on_exec, why));
                    None
                }
            };
            let mut held = Vec::new();
            for (fd, entry) in array.chunks_exact(8).enumerate() {
                let file = u64::from_le_bytes(entry.try_into().unwrap_or_default());
                if file == 0 {
                    continue;
                }
                let fd = fd as u32;
                if !self.kernel_pointer(file) {
                    let why = format!("its file pointer {file:#x} is no kernel address");
                    let at = t.fd.wrapping_add(u64::from(fd) * 8);
                    failed.push(failure(pid, Some(fd), at, why));
                    continue;
                }
                let cloexec = bitmap
                    .as_ref()
                    .and_then(|b| b.get(fd as usize / 8))
                    .map(|byte| byte & (1 << (fd % 8)) != 0);
                held.push((fd, file, cloexec));
            }
            slots.insert(*s, held);
        }
        slots
    }
}
