//! The paths of files, as the kernel's `d_path` builds them: each
//! dentry's name (`d_name`) up through `d_parent`; at the root of a mount,
//! on from the dentry it is mounted on (`mnt_mountpoint`) in its parent
//! mount, until a mount that is its own parent. A file whose dentry has a
//! `d_dname` (sockets, pipes, anonymous inodes) is named by it instead
//! (see `dname`). Every path is walked at once, one level of dentries per
//! batch of reads (see `walk`), with the mounts, the inodes (number, mode
//! and device), the names not kept inside their dentry and the leaves'
//! dentry operations read beside them.
//!
//! Bounded by the kernel's `PATH_MAX`: a path of more than 4,095 bytes is
//! not built; its last components are kept after [`CUT_MARK`], and nothing
//! above them is read. Each dentry and mount is read and kept once however
//! many paths go through it, and a path is built once its walk ends, so
//! the cost grows with the distinct dentries and the text of the paths
//! (each at most `PATH_MAX`), not with files times depth.

use std::collections::HashMap;

use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::PathLayout;
use walk::{walk_paths, Naming};

mod dname;
#[cfg(test)]
pub(crate) mod fake;
mod walk;

pub(crate) use dname::{Dnames, SYMBOLS as DNAME_SYMBOLS};

/// `PATH_MAX`: a path and its NUL fit in 4,096 bytes.
const PATH_MAX: u64 = 4096;
/// Most bytes of a path's text.
const PATH_TEXT_MAX: u64 = PATH_MAX - 1;
/// Most steps up from a file: a component takes at least two bytes
/// ("/x"), and a step across a mount none, so past twice as many steps
/// as a path has room for components the walk is a loop.
const MAX_STEPS: usize = PATH_MAX as usize;
/// Longest name read (`NAME_MAX` is 255).
const NAME_MAX: u32 = 255;
/// What starts a path longer than `PATH_MAX`, before its last components
/// (a real path starts with `/`).
pub(crate) const CUT_MARK: &str = "(cut)";
/// What `d_path` adds to a file whose dentry was unlinked.
const DELETED: &str = " (deleted)";

/// What a file is: its path (or why it could not be read), inode number,
/// mode and device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileInfo {
    /// The path, or the name its `d_dname` gives; when `cut`,
    /// [`CUT_MARK`] and its last components.
    pub path: Result<String, String>,
    /// The path is longer than `PATH_MAX`.
    pub cut: bool,
    /// `i_ino`, and the device of its super block (0 when unreadable).
    pub inode: u64,
    pub device: u32,
    /// `i_mode`, or why the inode could not be read.
    pub mode: Result<u16, String>,
}

/// What a `struct file` says its path and inode are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileFields {
    /// `f_path.dentry`, `f_path.mnt` and `f_inode`.
    pub dentry: u64,
    pub vfsmount: u64,
    pub inode: u64,
}

impl FileFields {
    /// The fields in `bytes`, a span of a `struct file` read from its
    /// offset `first`.
    pub fn from_bytes(layout: &PathLayout, bytes: &[u8], first: u64) -> FileFields {
        let at = |o: u64| bytes.u64_at(o.wrapping_sub(first)).unwrap_or(0);
        FileFields {
            dentry: at(layout.file_dentry),
            vfsmount: at(layout.file_mnt),
            inode: at(layout.file_inode),
        }
    }
}

/// The fields of a span of a structure: read `len` bytes from `first`.
fn span(fields: &[u64], width: u64) -> (u64, usize) {
    let first = fields.iter().copied().min().unwrap_or(0);
    let last = fields.iter().copied().max().unwrap_or(0);
    (first, (last + width - first) as usize)
}

/// What the files at `files` (addresses of `struct file`) are, by address,
/// with the kernel's `d_dname` functions `dnames`. One batch for the
/// files, then one per level of dentries.
pub(crate) async fn files(
    kmem: &KernelMemory<'_>,
    layout: &PathLayout,
    dnames: &Dnames,
    files: &[u64],
) -> HashMap<u64, FileInfo> {
    let (first, len) = span(&[layout.file_dentry, layout.file_mnt, layout.file_inode], 8);
    let read = futures::future::join_all(
        files
            .iter()
            .map(|&file| kmem.read_vec(file.wrapping_add(first), len)),
    )
    .await;
    let fields: Vec<Result<FileFields, String>> = read
        .into_iter()
        .map(|bytes| Ok(FileFields::from_bytes(layout, &bytes?, first)))
        .collect();
    let read: Vec<FileFields> = fields.iter().filter_map(|f| f.clone().ok()).collect();
    let mut infos = of_fields(kmem, layout, dnames, &read).await.into_iter();
    files
        .iter()
        .zip(fields)
        .map(|(&file, fields)| {
            let info = match fields {
                Ok(_) => infos.next().unwrap_or_else(|| unknown("not walked".into())),
                Err(why) => unknown(format!("struct file: {why}")),
            };
            (file, info)
        })
        .collect()
}

/// A file of which nothing is known, for `why`.
fn unknown(why: String) -> FileInfo {
    FileInfo {
        path: Err(why),
        cut: false,
        inode: 0,
        device: 0,
        mode: Err("not read".into()),
    }
}

/// What the files whose `struct file`s hold `fields` are, in their order:
/// one batch per level of dentries, the inodes beside them.
pub(crate) async fn of_fields(
    kmem: &KernelMemory<'_>,
    layout: &PathLayout,
    dnames: &Dnames,
    fields: &[FileFields],
) -> Vec<FileInfo> {
    of_fields_seen(kmem, layout, dnames, fields, &HashMap::new()).await
}

/// [`of_fields`], with dentries read already: `seen` holds each one's
/// bytes (a whole `struct dentry`) by address, which the walk takes
/// instead of reading them.
pub(crate) async fn of_fields_seen(
    kmem: &KernelMemory<'_>,
    layout: &PathLayout,
    dnames: &Dnames,
    fields: &[FileFields],
    seen: &HashMap<u64, Vec<u8>>,
) -> Vec<FileInfo> {
    let walks: Vec<(u64, u64)> = fields
        .iter()
        .map(|f| (f.dentry, f.vfsmount.wrapping_sub(layout.mount_vfsmount)))
        .collect();
    let inodes: Vec<u64> = fields.iter().map(|f| f.inode).collect();
    let (paths, inodes) = futures::join!(
        walk_paths(kmem, layout, &walks, seen),
        inodes_of(kmem, layout, &inodes)
    );
    paths
        .into_iter()
        .zip(inodes)
        .map(|((naming, cut), inode)| {
            let (ino, device) = inode.as_ref().map_or((0, 0), |i| (i.0, i.2));
            let mode = inode.as_ref().map(|i| i.1).map_err(Clone::clone);
            let path = match naming {
                Ok(Naming::Path(path)) => Ok(path),
                Ok(Naming::Dname { function, name }) => match &inode {
                    Ok(_) => dnames.name(function, &name, ino),
                    Err(why) => Err(format!("inode: {why}")),
                },
                Err(why) => Err(why),
            };
            FileInfo {
                path,
                cut,
                inode: ino,
                device,
                mode,
            }
        })
        .collect()
}

/// The inode number, mode and device of each inode, or why it could not
/// be read: the inodes in one batch, their super blocks in the next.
async fn inodes_of(
    kmem: &KernelMemory<'_>,
    layout: &PathLayout,
    inodes: &[u64],
) -> Vec<Result<(u64, u16, u32), String>> {
    let (first, len) = span(&[layout.i_mode, layout.i_ino, layout.i_sb], 8);
    let fields = futures::future::join_all(
        inodes
            .iter()
            .map(|&inode| kmem.read_vec(inode.wrapping_add(first), len)),
    )
    .await;
    let fields: Vec<Result<(u64, u16, u64), String>> = fields
        .into_iter()
        .map(|bytes| {
            let b = bytes?;
            let mode = b.u32_at(layout.i_mode - first).unwrap_or(0) as u16;
            Ok((
                b.u64_at(layout.i_ino - first).unwrap_or(0),
                mode,
                b.u64_at(layout.i_sb - first).unwrap_or(0),
            ))
        })
        .collect();
    let devices = futures::future::join_all(fields.iter().map(|f| async move {
        match f {
            Ok((_, _, sb)) if *sb != 0 => kmem
                .read_vec(sb.wrapping_add(layout.s_dev), 4)
                .await
                .ok()
                .and_then(|b| b.u32_at(0))
                .unwrap_or(0),
            _ => 0,
        }
    }))
    .await;
    fields
        .into_iter()
        .zip(devices)
        .map(|(f, dev)| f.map(|(ino, mode, _)| (ino, mode, dev)))
        .collect()
}
