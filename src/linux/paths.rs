//! The paths of mapped files, as the kernel's `d_path` builds them: each
//! dentry's name (`d_name`) up through `d_parent`; at the root of a mount,
//! on from the dentry it is mounted on (`mnt_mountpoint`) in its parent
//! mount, until a mount that is its own parent. Every path is walked at
//! once, one level of dentries per batch of reads, with the mounts, the
//! inodes (number and device) and the names not kept inside their dentry
//! read beside them.

use std::collections::HashMap;

use crate::linux::btf::{Btf, BtfError};
use crate::linux::kmem::{Fields, KernelMemory};

/// Most path components followed (a path is at most `PATH_MAX`, 4096
/// bytes, so at most 2048 components); past it, the walk is a loop.
const MAX_STEPS: usize = 2048;
/// Longest name read (`NAME_MAX` is 255).
const NAME_MAX: u32 = 255;

/// Offsets, from BTF, of what a path is read by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PathLayout {
    /// `file.f_path.dentry`, `file.f_path.mnt`, `file.f_inode`.
    file_dentry: u64,
    file_mnt: u64,
    file_inode: u64,
    dentry_size: u64,
    d_parent: u64,
    /// `dentry.d_name.len` (a `u32`) and `dentry.d_name.name`.
    d_name_len: u64,
    d_name_name: u64,
    /// `dentry.d_hash.pprev`: NULL once the dentry is unhashed (deleted).
    d_hash_pprev: u64,
    /// `mount.mnt`: the `vfsmount` inside a `struct mount`.
    mount_vfsmount: u64,
    mnt_parent: u64,
    mnt_mountpoint: u64,
    /// `mount.mnt.mnt_root`.
    mnt_root: u64,
    i_ino: u64,
    i_sb: u64,
    /// `super_block.s_dev` (a `u32`).
    s_dev: u64,
}

impl PathLayout {
    /// The offsets in `btf`.
    pub fn from_btf(btf: &Btf) -> Result<PathLayout, BtfError> {
        let file = |m: &str| btf.member_offset("file", m);
        let dentry = |m: &str| btf.member_offset("dentry", m);
        let mount = |m: &str| btf.member_offset("mount", m);
        let d_name = dentry("d_name")?;
        let vfsmount = mount("mnt")?;
        Ok(PathLayout {
            file_dentry: file("f_path")? + btf.member_offset("path", "dentry")?,
            file_mnt: file("f_path")? + btf.member_offset("path", "mnt")?,
            file_inode: file("f_inode")?,
            dentry_size: btf.size_of("dentry")?,
            d_parent: dentry("d_parent")?,
            d_name_len: d_name + btf.member_offset("qstr", "len")?,
            d_name_name: d_name + btf.member_offset("qstr", "name")?,
            d_hash_pprev: dentry("d_hash")? + btf.member_offset("hlist_bl_node", "pprev")?,
            mount_vfsmount: vfsmount,
            mnt_parent: mount("mnt_parent")?,
            mnt_mountpoint: mount("mnt_mountpoint")?,
            mnt_root: vfsmount + btf.member_offset("vfsmount", "mnt_root")?,
            i_ino: btf.member_offset("inode", "i_ino")?,
            i_sb: btf.member_offset("inode", "i_sb")?,
            s_dev: btf.member_offset("super_block", "s_dev")?,
        })
    }
}

/// What a mapped file is: its path (or why it could not be read), inode
/// number and device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileInfo {
    pub path: Result<String, String>,
    pub inode: u64,
    pub device: u32,
}

/// The fields of a span of a structure: read `len` bytes from `first`.
fn span(fields: &[u64], width: u64) -> (u64, usize) {
    let first = fields.iter().copied().min().unwrap_or(0);
    let last = fields.iter().copied().max().unwrap_or(0);
    (first, (last + width - first) as usize)
}

/// A dentry as a path walk needs it.
#[derive(Debug, Clone)]
struct Dentry {
    parent: u64,
    name: Name,
    unhashed: bool,
}

/// A dentry's name: inside the dentry (`d_iname`, short names), or
/// elsewhere (to be read).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Name {
    Here(Vec<u8>),
    At(u64, u32),
}

/// A mount as a path walk needs it (addresses of `struct mount`).
#[derive(Debug, Clone, Copy)]
struct Mount {
    parent: u64,
    mountpoint: u64,
    root: u64,
}

/// One path being walked.
struct Walk {
    leaf: u64,
    dentry: u64,
    mount: u64,
    names: Vec<Name>,
    steps: usize,
    end: Option<Result<(), String>>,
}

/// Everything read so far, by address.
#[derive(Default)]
struct Known {
    dentries: HashMap<u64, Result<Dentry, String>>,
    mounts: HashMap<u64, Result<Mount, String>>,
    names: HashMap<Name, Result<Vec<u8>, String>>,
}

impl Walk {
    /// Goes up as far as what is known allows; `false` when it needs more.
    fn advance(&mut self, known: &Known) -> bool {
        while self.end.is_none() {
            if self.steps > MAX_STEPS {
                self.end = Some(Err(format!(
                    "path deeper than {MAX_STEPS} components (a loop of dentries or mounts); cut"
                )));
                break;
            }
            let mount = match known.mounts.get(&self.mount) {
                None => return false,
                Some(Err(why)) => {
                    self.end = Some(Err(format!("mount: {why}")));
                    break;
                }
                Some(Ok(mount)) => *mount,
            };
            if self.dentry == mount.root {
                // The root of a mount: on through where it is mounted, up
                // to the mount that is its own parent (the namespace's root).
                if mount.parent == self.mount || mount.parent == 0 {
                    self.end = Some(Ok(()));
                } else {
                    self.dentry = mount.mountpoint;
                    self.mount = mount.parent;
                    self.steps += 1;
                }
                continue;
            }
            let dentry = match known.dentries.get(&self.dentry) {
                None => return false,
                Some(Err(why)) => {
                    self.end = Some(Err(format!("dentry: {why}")));
                    break;
                }
                Some(Ok(dentry)) => dentry,
            };
            // A root that is not its mount's: what d_path calls an escape.
            if dentry.parent == self.dentry {
                self.end = Some(Ok(()));
                break;
            }
            self.names.push(dentry.name.clone());
            self.dentry = dentry.parent;
            self.steps += 1;
        }
        true
    }

    /// The path, once walked and its names read.
    fn path(&self, known: &Known) -> Result<String, String> {
        self.end.clone().unwrap_or(Err("not walked".into()))?;
        let mut path = String::new();
        for name in self.names.iter().rev() {
            let bytes = match name {
                Name::Here(bytes) => bytes,
                Name::At(..) => known.names[name]
                    .as_ref()
                    .map_err(|why| format!("name: {why}"))?,
            };
            path.push('/');
            path.push_str(&String::from_utf8_lossy(bytes));
        }
        if path.is_empty() {
            path.push('/');
        }
        // d_path marks a file whose dentry is no longer hashed (unlinked).
        if let Some(Ok(leaf)) = known.dentries.get(&self.leaf) {
            if leaf.unhashed && leaf.parent != self.leaf {
                path.push_str(" (deleted)");
            }
        }
        Ok(path)
    }
}

/// What the files at `files` (addresses of `struct file`) are, by address.
/// One batch for the files, then one per level of dentries.
pub(crate) async fn files(
    kmem: &KernelMemory<'_>,
    layout: &PathLayout,
    files: &[u64],
) -> HashMap<u64, FileInfo> {
    let (first, len) = span(&[layout.file_dentry, layout.file_mnt, layout.file_inode], 8);
    let read = futures::future::join_all(
        files
            .iter()
            .map(|&file| kmem.read_vec(file.wrapping_add(first), len)),
    )
    .await;
    let fields: Vec<Result<[u64; 3], String>> = read
        .into_iter()
        .map(|bytes| {
            let bytes = bytes?;
            let at = |o: u64| bytes.u64_at(o - first).unwrap_or(0);
            Ok([
                at(layout.file_dentry),
                at(layout.file_mnt),
                at(layout.file_inode),
            ])
        })
        .collect();
    let walks: Vec<(u64, u64)> = fields
        .iter()
        .filter_map(|f| f.as_ref().ok())
        .map(|&[dentry, mnt, _]| (dentry, mnt.wrapping_sub(layout.mount_vfsmount)))
        .collect();
    let inodes: Vec<u64> = fields
        .iter()
        .filter_map(|f| f.as_ref().ok())
        .map(|f| f[2])
        .collect();
    let (paths, inodes) = futures::join!(
        walk_paths(kmem, layout, &walks),
        inodes_of(kmem, layout, &inodes)
    );
    let mut paths = paths.into_iter();
    let mut inodes = inodes.into_iter();
    files
        .iter()
        .zip(fields)
        .map(|(&file, fields)| {
            let info = match fields {
                Ok(_) => {
                    let (inode, device) = inodes.next().unwrap_or_default();
                    FileInfo {
                        path: paths.next().unwrap_or(Err("not walked".into())),
                        inode,
                        device,
                    }
                }
                Err(why) => FileInfo {
                    path: Err(format!("struct file: {why}")),
                    inode: 0,
                    device: 0,
                },
            };
            (file, info)
        })
        .collect()
}

/// The paths of `(dentry, mount)` pairs, level by level.
async fn walk_paths(
    kmem: &KernelMemory<'_>,
    layout: &PathLayout,
    starts: &[(u64, u64)],
) -> Vec<Result<String, String>> {
    let mut walks: Vec<Walk> = starts
        .iter()
        .map(|&(dentry, mount)| Walk {
            leaf: dentry,
            dentry,
            mount,
            names: Vec::new(),
            steps: 0,
            end: None,
        })
        .collect();
    let mut known = Known::default();
    let (mount_first, mount_len) = span(
        &[layout.mnt_parent, layout.mnt_mountpoint, layout.mnt_root],
        8,
    );
    loop {
        let mut dentries = Vec::new();
        let mut mounts = Vec::new();
        for walk in &mut walks {
            if !walk.advance(&known) && !known.mounts.contains_key(&walk.mount) {
                mounts.push(walk.mount);
            }
        }
        let names: Vec<Name> = walks
            .iter()
            .flat_map(|w| &w.names)
            .filter(|n| matches!(n, Name::At(..)) && !known.names.contains_key(n))
            .cloned()
            .collect();
        // Every walk still going needs its dentry, unless it turns out to
        // be its mount's root: when the mount is not known yet, both are
        // read at once.
        for walk in walks.iter().filter(|w| w.end.is_none()) {
            if !known.dentries.contains_key(&walk.dentry) {
                dentries.push(walk.dentry);
            }
        }
        for list in [&mut dentries, &mut mounts] {
            list.sort_unstable();
            list.dedup();
        }
        if dentries.is_empty() && mounts.is_empty() && names.is_empty() {
            break;
        }
        let (read_dentries, read_mounts, read_names) = futures::join!(
            futures::future::join_all(
                dentries
                    .iter()
                    .map(|&d| kmem.read_vec(d, layout.dentry_size as usize))
            ),
            futures::future::join_all(
                mounts
                    .iter()
                    .map(|&m| kmem.read_vec(m.wrapping_add(mount_first), mount_len))
            ),
            futures::future::join_all(names.iter().map(|name| async move {
                match name {
                    Name::At(at, len) => kmem.read_vec(*at, *len as usize).await,
                    Name::Here(bytes) => Ok(bytes.clone()),
                }
            }))
        );
        for (&at, bytes) in dentries.iter().zip(read_dentries) {
            known
                .dentries
                .insert(at, bytes.and_then(|b| dentry(layout, at, &b)));
        }
        for (&at, bytes) in mounts.iter().zip(read_mounts) {
            let mount = bytes.map(|b| {
                let field = |o: u64| b.u64_at(o - mount_first).unwrap_or(0);
                Mount {
                    parent: field(layout.mnt_parent),
                    mountpoint: field(layout.mnt_mountpoint),
                    root: field(layout.mnt_root),
                }
            });
            known.mounts.insert(at, mount);
        }
        for (name, bytes) in names.into_iter().zip(read_names) {
            known.names.insert(name, bytes);
        }
    }
    walks.iter().map(|w| w.path(&known)).collect()
}

/// A dentry's parent and name from its bytes, read at `at`.
fn dentry(layout: &PathLayout, at: u64, bytes: &[u8]) -> Result<Dentry, String> {
    let short = || "dentry shorter than BTF says".to_string();
    let parent = bytes.u64_at(layout.d_parent).ok_or_else(short)?;
    let len = bytes.u32_at(layout.d_name_len).ok_or_else(short)?;
    let name_at = bytes.u64_at(layout.d_name_name).ok_or_else(short)?;
    if len > NAME_MAX {
        return Err(format!("dentry {at:#x} has a name of {len} bytes"));
    }
    // Short names live in the dentry itself (`d_iname`).
    let inside = name_at
        .checked_sub(at)
        .and_then(|o| bytes.get(o as usize..(o as usize).checked_add(len as usize)?));
    let name = match inside {
        Some(bytes) => Name::Here(bytes.to_vec()),
        None => Name::At(name_at, len),
    };
    Ok(Dentry {
        parent,
        name,
        unhashed: bytes.u64_at(layout.d_hash_pprev) == Some(0),
    })
}

/// The inode number and device of each inode: the inodes in one batch,
/// their super blocks in the next.
async fn inodes_of(
    kmem: &KernelMemory<'_>,
    layout: &PathLayout,
    inodes: &[u64],
) -> Vec<(u64, u32)> {
    let (first, len) = span(&[layout.i_ino, layout.i_sb], 8);
    let fields = futures::future::join_all(
        inodes
            .iter()
            .map(|&inode| kmem.read_vec(inode.wrapping_add(first), len)),
    )
    .await;
    let fields: Vec<(u64, u64)> = fields
        .into_iter()
        .map(|bytes| match bytes {
            Ok(b) => (
                b.u64_at(layout.i_ino - first).unwrap_or(0),
                b.u64_at(layout.i_sb - first).unwrap_or(0),
            ),
            Err(_) => (0, 0),
        })
        .collect();
    let devices = futures::future::join_all(fields.iter().map(|&(_, sb)| async move {
        match sb {
            0 => 0,
            sb => kmem
                .read_vec(sb + layout.s_dev, 4)
                .await
                .ok()
                .and_then(|b| b.u32_at(0))
                .unwrap_or(0),
        }
    }))
    .await;
    fields
        .into_iter()
        .zip(devices)
        .map(|((ino, _), dev)| (ino, dev))
        .collect()
}
