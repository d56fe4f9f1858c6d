//! Steps 5 and 6 of the walk of the open files: the `struct file`s, their
//! paths and sockets, and each table's fds as `/proc` shows them.

use rustc_hash::FxHashMap;

use super::read::{failure, FileRead, Slot, Walk};
use super::{FileKind, FilesFailure, OpenFile, Socket};
use crate::join_all;
use crate::linux::kmem::Fields;
use crate::linux::offsets::span;
use crate::linux::paths::{self, FileFields, FileInfo, CUT_MARK};

/// `O_CLOEXEC`, which `fdinfo` adds to the flags of an fd closed on exec.
const O_CLOEXEC: u32 = 0o2_000_000;

impl Walk<'_> {
    /// Steps 5 and 6: every distinct `struct file` of `slots`, its path
    /// and socket; the fds of each `files_struct`.
    pub(super) async fn files(
        &self,
        slots: &FxHashMap<u64, Vec<Slot>>,
        owner: &FxHashMap<u64, u32>,
        failed: &mut Vec<FilesFailure>,
    ) -> FxHashMap<u64, Vec<OpenFile>> {
        let l = self.layout;
        let mut structs: Vec<&u64> = slots.keys().collect();
        structs.sort_unstable();
        let mut files: Vec<u64> = slots.values().flatten().map(|s| s.1).collect();
        files.sort_unstable();
        files.dedup();
        let most = (self.kmem.limit / l.file_size.max(1)) as usize;
        if files.len() > most {
            let why = format!(
                "{} distinct files, more than the {most} struct files of {} bytes memory holds: those past it not read",
                files.len(),
                l.file_size
            );
            failed.push(failure(None, None, files[most], why));
            files.truncate(most);
        }
        let (first, len) = l.file_span();
        let read = join_all(
            files
                .iter()
                .map(|&f| self.kmem.read_vec(f.wrapping_add(first), len as usize)),
        )
        .await;
        let mut known: FxHashMap<u64, Result<FileRead, String>> = FxHashMap::default();
        let mut order = Vec::new();
        for (&f, bytes) in files.iter().zip(read) {
            let file = bytes.map(|b| FileRead {
                fields: FileFields::from_bytes(&l.paths, &b, first),
                flags: b.u32_at(l.f_flags - first).unwrap_or(0),
                mode: b.u32_at(l.f_mode - first).unwrap_or(0),
                pos: b.u64_at(l.f_pos - first).unwrap_or(0) as i64,
                private_data: b.u64_at(l.private_data - first).unwrap_or(0),
            });
            if let Ok(file) = &file {
                order.push((f, *file));
            }
            known.insert(f, file);
        }
        let fields: Vec<FileFields> = order.iter().map(|o| o.1.fields).collect();
        let (infos, sockets) = futures::join!(
            paths::of_fields(&self.kmem, &l.paths, &self.dnames, &fields),
            self.sockets(&order)
        );
        let described: FxHashMap<u64, (FileInfo, Option<Result<Socket, String>>)> = order
            .iter()
            .map(|o| o.0)
            .zip(infos.into_iter().zip(sockets))
            .collect();
        let mut out = FxHashMap::default();
        let mut unlayered = false;
        for s in structs {
            let pid = owner.get(s).copied();
            let mut fds = Vec::new();
            for &(fd, file, cloexec) in &slots[s] {
                let fail = |why: String| failure(pid, Some(fd), file, why);
                let read = match known.get(&file) {
                    Some(Ok(read)) => *read,
                    Some(Err(why)) => {
                        failed.push(fail(format!("struct file: {why}")));
                        continue;
                    }
                    None => continue,
                };
                let (info, socket) = &described[&file];
                let kind = FileKind::of_mode(info.mode.as_ref().ok().copied());
                if let Err(why) = &info.mode {
                    failed.push(fail(format!("inode {:#x}: {why}", read.fields.inode)));
                }
                let socket = match (kind, socket) {
                    (FileKind::Socket, Some(Ok(socket))) => Some(*socket),
                    (FileKind::Socket, Some(Err(why))) => {
                        failed.push(fail(why.clone()));
                        None
                    }
                    // Said once, after the fds.
                    (FileKind::Socket, None) if l.socket.is_none() => {
                        unlayered = true;
                        None
                    }
                    (FileKind::Socket, None) => {
                        let why = format!(
                            "a socket whose private data {:#x} is not the struct socket of its inode {:#x}",
                            read.private_data, read.fields.inode
                        );
                        failed.push(fail(why));
                        None
                    }
                    _ => None,
                };
                if let Err(why) = &info.path {
                    failed.push(fail(format!("name: {why}")));
                }
                if info.cut {
                    failed.push(fail(format!(
                        "its path is longer than PATH_MAX (4096 bytes): only its last components are shown, after \"{CUT_MARK}\""
                    )));
                }
                fds.push(OpenFile {
                    fd,
                    file,
                    name: info.path.clone(),
                    kind,
                    flags: cloexec.map(|c| read.flags | if c { O_CLOEXEC } else { 0 }),
                    mode: read.mode,
                    pos: read.pos,
                    inode: info.inode,
                    device: info.device,
                    inode_address: read.fields.inode,
                    socket,
                });
            }
            out.insert(*s, fds);
        }
        if unlayered {
            let why = "the kernel's BTF has no struct socket_alloc: sockets are listed without their struct socket";
            failed.push(failure(None, None, 0, why.into()));
        }
        out
    }

    /// The `struct socket` of each file that may be a socket (its private
    /// data lies where its inode's socket would), checked to point back at
    /// the file; `None` for the others.
    async fn sockets(&self, files: &[(u64, FileRead)]) -> Vec<Option<Result<Socket, String>>> {
        let Some(layout) = self.layout.socket else {
            return vec![None; files.len()];
        };
        let (first, len) = span(&[(layout.file, 8), (layout.sk, 8)]);
        join_all(files.iter().map(|&(file, read)| async move {
            let socket = read.private_data;
            if socket == 0 || socket != read.fields.inode.wrapping_sub(layout.vfs_inode) {
                return None;
            }
            let bytes = match self
                .kmem
                .read_vec(socket.wrapping_add(first), len as usize)
                .await
            {
                Ok(bytes) => bytes,
                Err(why) => return Some(Err(format!("struct socket: {why}"))),
            };
            let back = bytes.u64_at(layout.file - first).unwrap_or(0);
            Some(match back == file {
                true => Ok(Socket {
                    address: socket,
                    sock: bytes.u64_at(layout.sk - first).unwrap_or(0),
                }),
                false => Err(format!(
                    "its struct socket {socket:#x} points at file {back:#x}, not at this one"
                )),
            })
        }))
        .await
    }
}
