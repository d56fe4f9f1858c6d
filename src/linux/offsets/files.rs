//! The offsets open files are read by: a task's `files_struct`, its fd
//! table (`struct fdtable`), each `struct file`, and what identifies a
//! socket.

use crate::linux::find::btf::{Btf, BtfError};
use crate::linux::offsets::PathLayout;

/// Offsets, from BTF, of everything the open files are read by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FilesLayout {
    /// `task_struct.files`, `pid` and `tgid`.
    pub(crate) task_files: u64,
    pub(crate) task_pid: u64,
    pub(crate) task_tgid: u64,
    /// `files_struct.fdt`: the table in use.
    pub(crate) fdt: u64,
    /// `files_struct.fdtab`: the table inside the `files_struct`, in use
    /// until the process holds more fds than `fd_array` has room for.
    pub(crate) fdtab: u64,
    /// `files_struct.close_on_exec_init`, the bitmap of that table.
    pub(crate) close_on_exec_init: u64,
    /// `files_struct.fd_array` and its length (`NR_OPEN_DEFAULT`).
    pub(crate) fd_array: u64,
    pub(crate) fd_array_len: u64,
    /// `fdtable.max_fds` (a `u32`), `fd` and `close_on_exec`.
    pub(crate) max_fds: u64,
    pub(crate) fd: u64,
    pub(crate) close_on_exec: u64,
    /// `sizeof(struct file)`: no more distinct files than memory holds.
    pub(crate) file_size: u64,
    /// `file.f_flags` (a `u32`), `f_mode` (a `u32`), `f_pos` (an `i64`),
    /// `private_data`.
    pub(crate) f_flags: u64,
    pub(crate) f_mode: u64,
    pub(crate) f_pos: u64,
    pub(crate) private_data: u64,
    /// What a socket is checked by; `None` when BTF lacks it.
    pub(crate) socket: Option<SocketLayout>,
    pub(crate) paths: PathLayout,
}

/// A socket's file holds its `struct socket` in `private_data`, and the
/// socket and its inode are allocated together (`struct socket_alloc`):
/// the socket is the inode's address less `vfs_inode`, and points back at
/// its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SocketLayout {
    /// `socket_alloc.vfs_inode` (the socket is at offset 0).
    pub(crate) vfs_inode: u64,
    /// `socket.file` and `socket.sk`.
    pub(crate) file: u64,
    pub(crate) sk: u64,
}

impl FilesLayout {
    /// The offsets in `btf`; an error names the first type or member
    /// missing.
    pub fn from_btf(btf: &Btf) -> Result<FilesLayout, BtfError> {
        let task = |m: &str| btf.member_offset("task_struct", m);
        let files = |m: &str| btf.member_offset("files_struct", m);
        let table = |m: &str| btf.member_offset("fdtable", m);
        let file = |m: &str| btf.member_offset("file", m);
        let socket = match btf.member_offset("socket_alloc", "vfs_inode") {
            Ok(vfs_inode) => Some(SocketLayout {
                vfs_inode,
                file: btf.member_offset("socket", "file")?,
                sk: btf.member_offset("socket", "sk")?,
            }),
            Err(_) => None,
        };
        Ok(FilesLayout {
            task_files: task("files")?,
            task_pid: task("pid")?,
            task_tgid: task("tgid")?,
            fdt: files("fdt")?,
            fdtab: files("fdtab")?,
            close_on_exec_init: files("close_on_exec_init")?,
            fd_array: files("fd_array")?,
            fd_array_len: btf.member_size("files_struct", "fd_array")? / 8,
            max_fds: table("max_fds")?,
            fd: table("fd")?,
            close_on_exec: table("close_on_exec")?,
            file_size: btf.size_of("file")?,
            f_flags: file("f_flags")?,
            f_mode: file("f_mode")?,
            f_pos: file("f_pos")?,
            private_data: file("private_data")?,
            socket,
            paths: PathLayout::from_btf(btf)?,
        })
    }

    /// The span of a `files_struct` read: its table pointer, its own
    /// table, bitmap and fd array.
    pub(crate) fn files_span(&self) -> (u64, u64) {
        let fields = [
            (self.fdt, 8),
            (self.fdtab + self.max_fds, 4),
            (self.fdtab + self.fd, 8),
            (self.fdtab + self.close_on_exec, 8),
            (self.close_on_exec_init, 8),
            (self.fd_array, self.fd_array_len * 8),
        ];
        span(&fields)
    }

    /// The span of a `struct fdtable` read.
    pub(crate) fn table_span(&self) -> (u64, u64) {
        span(&[(self.max_fds, 4), (self.fd, 8), (self.close_on_exec, 8)])
    }

    /// The span of a `struct file` read: what its path is read by, and
    /// its flags, mode, position and private data.
    pub(crate) fn file_span(&self) -> (u64, u64) {
        let p = &self.paths;
        span(&[
            (p.file_dentry, 8),
            (p.file_mnt, 8),
            (p.file_inode, 8),
            (self.f_flags, 4),
            (self.f_mode, 4),
            (self.f_pos, 8),
            (self.private_data, 8),
        ])
    }
}

/// The first byte and the length of the smallest run holding every
/// `(offset, len)`.
pub(crate) fn span(fields: &[(u64, u64)]) -> (u64, u64) {
    let first = fields.iter().map(|f| f.0).min().unwrap_or(0);
    let end = fields.iter().map(|f| f.0 + f.1).max().unwrap_or(0);
    (first, end - first)
}
