//! The open files of processes, as `/proc/PID/fd` and `fdinfo` show
//! them, read level by level for every process at once:
//!
//! 1. each task's `files`, `pid` and `tgid`, and `fs.nr_open`;
//! 2. each `files_struct` (its table pointer, and the table, bitmap and fd
//!    array it holds itself, which serve up to 64 fds);
//! 3. the `fdtable`s that lie outside their `files_struct`;
//! 4. the fd arrays and close-on-exec bitmaps that do;
//! 5. every `struct file` (path, inode, flags, mode, position);
//! 6. their paths, a level of dentries per batch (see `paths`), with the
//!    inodes, the dentry operations that name sockets, pipes and anonymous
//!    inodes, and each socket's `struct socket` beside them.
//!
//! Steps 3 and 4 cost nothing for processes with at most 64 fds: their
//! table lies in the `files_struct` read in step 2. Each `files_struct`,
//! table and file is read once however many tasks or fds share it. The
//! walk is bounded by what the kernel allows (`max_fds` within
//! `fs.nr_open`, a multiple of 64) and by what the target holds (fd
//! arrays and files that fit in its memory); anything else is a failure
//! named with its reason, never a row.

use std::fmt;

use crate::linux::{Kernel, ProcessList};

mod describe;
mod read;

#[cfg(test)]
mod tests;

/// `sysctl_nr_open`, the most fds a process may have (`fs.nr_open`).
pub(crate) const NR_OPEN_SYMBOL: &str = "sysctl_nr_open";

/// What a file is, by its inode's type, as `lsof`'s TYPE column names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file (`REG`).
    Regular,
    /// A directory (`DIR`).
    Directory,
    /// A character device (`CHR`).
    CharDevice,
    /// A block device (`BLK`).
    BlockDevice,
    /// A pipe or FIFO (`FIFO`).
    Fifo,
    /// A socket (`sock`).
    Socket,
    /// A symbolic link (`LINK`).
    Symlink,
    /// An anonymous inode, whose mode has no type (`a_inode`).
    AnonInode,
    /// A type no inode has, or an inode that could not be read.
    Unknown,
}

/// `S_IFMT` and its types (`include/uapi/linux/stat.h`).
const S_IFMT: u16 = 0o170_000;
const S_IFSOCK: u16 = 0o140_000;

impl FileKind {
    /// The kind of an inode of mode `mode` (`None`: not read).
    pub fn of_mode(mode: Option<u16>) -> FileKind {
        match mode.map(|m| m & S_IFMT) {
            Some(0o100_000) => FileKind::Regular,
            Some(0o040_000) => FileKind::Directory,
            Some(0o020_000) => FileKind::CharDevice,
            Some(0o060_000) => FileKind::BlockDevice,
            Some(0o010_000) => FileKind::Fifo,
            Some(S_IFSOCK) => FileKind::Socket,
            Some(0o120_000) => FileKind::Symlink,
            Some(0) => FileKind::AnonInode,
            _ => FileKind::Unknown,
        }
    }
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileKind::Regular => "REG",
            FileKind::Directory => "DIR",
            FileKind::CharDevice => "CHR",
            FileKind::BlockDevice => "BLK",
            FileKind::Fifo => "FIFO",
            FileKind::Socket => "sock",
            FileKind::Symlink => "LINK",
            FileKind::AnonInode => "a_inode",
            FileKind::Unknown => "unknown",
        })
    }
}

/// A socket an fd holds: what the network's walk starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Socket {
    /// Its `struct socket` (the file's `private_data`, checked to point
    /// back at the file).
    pub address: u64,
    /// Its `struct sock` (`socket->sk`); 0 when it has none.
    pub sock: u64,
}

/// One open fd, as `/proc/PID/fd/N` and `/proc/PID/fdinfo/N` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenFile {
    /// The fd number.
    pub fd: u32,
    /// Address of its `struct file` (fds that `dup` shares hold the
    /// same).
    pub file: u64,
    /// What `readlink /proc/PID/fd/N` gives: the path (with ` (deleted)`
    /// once unlinked), `socket:[INODE]`, `pipe:[INODE]`,
    /// `anon_inode:[eventfd]`...; or why it could not be read.
    pub name: Result<String, String>,
    /// The inode's type.
    pub kind: FileKind,
    /// `fdinfo`'s `flags`: `f_flags`, with `O_CLOEXEC` when the fd is
    /// closed on exec; `None` when the table's bitmap could not be read.
    pub flags: Option<u32>,
    /// `f_mode` (`FMODE_READ` 1, `FMODE_WRITE` 2, ...).
    pub mode: u32,
    /// `fdinfo`'s `pos`: `f_pos`.
    pub pos: i64,
    /// The inode number (`fdinfo`'s `ino`) and its device; 0 when the
    /// inode could not be read.
    pub inode: u64,
    pub device: u32,
    /// Address of its `struct inode` (`f_inode`), where the page cache
    /// reads it from.
    pub inode_address: u64,
    /// The socket, when the file is one.
    pub socket: Option<Socket>,
}

/// One process's open files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessFiles {
    /// Its pid.
    pub pid: u32,
    /// Its `comm`, from the process list.
    pub name: String,
    /// Address of its `task_struct`.
    pub task: u64,
    /// Address of its `files_struct`; `None` for a process that has none
    /// (it exited).
    pub files: Option<u64>,
    /// Its open fds, by number.
    pub fds: Vec<OpenFile>,
}

/// Something of the open files that could not be read, or did not make
/// sense.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilesFailure {
    /// The process concerned, when known.
    pub pid: Option<u32>,
    /// The fd concerned, when one.
    pub fd: Option<u32>,
    /// Kernel virtual address of the structure concerned (0 for none).
    pub address: u64,
    /// Why.
    pub reason: String,
}

impl fmt::Display for FilesFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.pid, self.fd) {
            (Some(pid), Some(fd)) => write!(f, "pid {pid} fd {fd}")?,
            (Some(pid), None) => write!(f, "pid {pid}")?,
            (None, _) => f.write_str("open files")?,
        }
        if self.address != 0 {
            write!(f, " at {:#x}", self.address)?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// The open files of the processes of one walk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenFiles {
    /// The process list the files were read beside.
    pub list: ProcessList,
    /// Each process's files, by pid.
    pub processes: Vec<ProcessFiles>,
    /// What could not be read, and why; the rest stands.
    pub failed: Vec<FilesFailure>,
}

/// A process's fd table, as read from its task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FdTable {
    /// The task's pid.
    pub pid: u32,
    /// Its `files_struct`; `None` when it has none.
    pub files: Option<u64>,
    /// Its open fds, by number.
    pub fds: Vec<OpenFile>,
}

/// The files of the tasks asked for, as [`Kernel::task_files_async`]
/// gives them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskFiles {
    /// For each task asked for, in that order, its table; `None` for a
    /// task that could not be read or is not a process (a thread).
    pub tasks: Vec<Option<FdTable>>,
    /// What could not be read, and why.
    pub failed: Vec<FilesFailure>,
}

impl Kernel {
    /// The open files of every process, or of the one with pid `pid`
    /// (blocking; see [`Kernel::open_files_async`]).
    pub fn open_files(&self, pid: Option<u32>) -> OpenFiles {
        self.memory().block_on(self.open_files_async(pid))
    }

    /// The open files of every process (or of process `pid` alone), read
    /// beside the process list: the module's documentation says what is
    /// read in which batch, all of it while the list reads the processes'
    /// memory and command lines.
    pub async fn open_files_async(&self, pid: Option<u32>) -> OpenFiles {
        let (list, files) = self
            .processes_beside(|tasks| async move {
                let tasks: Vec<u64> = tasks.into_iter().map(|t| t.0).collect();
                let files = self.task_files_inner(&tasks, pid).await;
                (tasks, files)
            })
            .await;
        let Some((tasks, files)) = files else {
            return OpenFiles {
                list,
                ..OpenFiles::default()
            };
        };
        let mut processes = Vec::new();
        for (task, found) in tasks.iter().zip(files.tasks) {
            let Some(FdTable { pid, files, fds }) = found else {
                continue;
            };
            // A task the list did not believe is left out with it.
            let Some(p) = list.get(pid).filter(|p| p.task == *task) else {
                continue;
            };
            processes.push(ProcessFiles {
                pid,
                name: p.name.clone(),
                task: *task,
                files,
                fds,
            });
        }
        processes.sort_by_key(|p| p.pid);
        OpenFiles {
            list,
            processes,
            failed: files.failed,
        }
    }

    /// The open files of the processes whose `task_struct`s are at
    /// `tasks` (blocking; see [`Kernel::task_files_async`]).
    pub fn task_files(&self, tasks: &[u64]) -> TaskFiles {
        self.memory().block_on(self.task_files_async(tasks))
    }

    /// The open files of the processes whose `task_struct`s are at
    /// `tasks` (threads are left out: they share their process's table).
    /// Independent of other reads: run beside another walk, the two share
    /// their batches.
    pub async fn task_files_async(&self, tasks: &[u64]) -> TaskFiles {
        self.task_files_inner(tasks, None).await
    }

    async fn task_files_inner(&self, tasks: &[u64], pid: Option<u32>) -> TaskFiles {
        match &self.offsets.files {
            Ok(layout) => {
                let walk = read::Walk {
                    kmem: self.kernel_memory(),
                    layout,
                    dnames: self.dnames(),
                    nr_open: self.symbol(NR_OPEN_SYMBOL),
                };
                walk.run(tasks, pid).await
            }
            Err(e) => TaskFiles {
                tasks: vec![None; tasks.len()],
                failed: vec![FilesFailure {
                    pid,
                    fd: None,
                    address: 0,
                    reason: format!("open files cannot be read: {e}"),
                }],
            },
        }
    }
}
