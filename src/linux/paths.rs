//! The paths of mapped files, as the kernel's `d_path` builds them: each
//! dentry's name (`d_name`) up through `d_parent`; at the root of a mount,
//! on from the dentry it is mounted on (`mnt_mountpoint`) in its parent
//! mount, until a mount that is its own parent. Every path is walked at
//! once, one level of dentries per batch of reads, with the mounts, the
//! inodes (number and device) and the names not kept inside their dentry
//! read beside them.
//!
//! Bounded by the kernel's `PATH_MAX`: a path of more than 4,095 bytes is
//! not built; its last components are kept after [`CUT_MARK`], and nothing
//! above them is read. Each dentry and mount is read and kept once however
//! many paths go through it, and a path is built once its walk ends, so
//! the cost grows with the distinct dentries and the text of the paths
//! (each at most `PATH_MAX`), not with files times depth.

use std::collections::{HashMap, HashSet};

use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::PathLayout;

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

/// What a mapped file is: its path (or why it could not be read), inode
/// number and device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileInfo {
    /// The path; when `cut`, [`CUT_MARK`] and its last components.
    pub path: Result<String, String>,
    /// The path is longer than `PATH_MAX`.
    pub cut: bool,
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

impl Name {
    fn len(&self) -> u64 {
        match self {
            Name::Here(bytes) => bytes.len() as u64,
            Name::At(_, len) => u64::from(*len),
        }
    }
}

/// A mount as a path walk needs it (addresses of `struct mount`).
#[derive(Debug, Clone, Copy)]
struct Mount {
    parent: u64,
    mountpoint: u64,
    root: u64,
}

/// How a walk up from a file ended.
#[derive(Debug, Clone)]
enum End {
    /// At the root: the whole path is known.
    Root,
    /// Past `PATH_MAX`: only its last components are kept.
    Cut,
    Failed(String),
}

/// One path being walked: where it started, where it is, and the text so
/// far counted, not built.
struct Walk {
    leaf: u64,
    leaf_mount: u64,
    dentry: u64,
    mount: u64,
    bytes: u64,
    steps: usize,
    end: Option<End>,
}

/// Everything read so far, by address.
#[derive(Default)]
struct Known {
    dentries: HashMap<u64, Result<Dentry, String>>,
    mounts: HashMap<u64, Result<Mount, String>>,
    names: HashMap<Name, Result<Vec<u8>, String>>,
}

/// One step up from `(dentry, mount)` as `known` has it.
enum Up<'k> {
    /// Something not read yet.
    Unknown,
    Root,
    Failed(String),
    /// Across a mount: no component.
    Mount(u64, u64),
    /// Through a dentry: its name, then its parent.
    Dentry(&'k Dentry, u64),
}

impl Known {
    fn up(&self, dentry: u64, mount: u64) -> Up<'_> {
        let m = match self.mounts.get(&mount) {
            None => return Up::Unknown,
            Some(Err(why)) => return Up::Failed(format!("mount: {why}")),
            Some(Ok(m)) => *m,
        };
        if dentry == m.root {
            // The root of a mount: on through where it is mounted, up to
            // the mount that is its own parent (the namespace's root).
            return match m.parent == mount || m.parent == 0 {
                true => Up::Root,
                false => Up::Mount(m.mountpoint, m.parent),
            };
        }
        match self.dentries.get(&dentry) {
            None => Up::Unknown,
            Some(Err(why)) => Up::Failed(format!("dentry: {why}")),
            // A root that is not its mount's: what d_path calls an escape.
            Some(Ok(d)) if d.parent == dentry => Up::Root,
            Some(Ok(d)) => Up::Dentry(d, d.parent),
        }
    }

    /// Bytes `d_path` adds after the path of `leaf`.
    fn suffix(&self, leaf: u64) -> &'static str {
        match self.dentries.get(&leaf) {
            Some(Ok(d)) if d.unhashed && d.parent != leaf => DELETED,
            _ => "",
        }
    }
}

impl Walk {
    /// Goes up as far as what is known allows; `false` when it needs more.
    fn advance(&mut self, known: &Known) -> bool {
        while self.end.is_none() {
            if self.steps > MAX_STEPS {
                self.end = Some(End::Failed(format!(
                    "more than {MAX_STEPS} steps up from the file without reaching a root (a loop of mounts); cut"
                )));
                break;
            }
            match known.up(self.dentry, self.mount) {
                Up::Unknown => return false,
                Up::Root => self.end = Some(End::Root),
                Up::Failed(why) => self.end = Some(End::Failed(why)),
                Up::Mount(dentry, mount) => {
                    (self.dentry, self.mount) = (dentry, mount);
                    self.steps += 1;
                }
                Up::Dentry(d, parent) => {
                    if self.steps == 0 {
                        self.bytes += known.suffix(self.leaf).len() as u64;
                    }
                    self.bytes += 1 + d.name.len();
                    if self.bytes > PATH_TEXT_MAX {
                        self.end = Some(End::Cut);
                        break;
                    }
                    self.dentry = parent;
                    self.steps += 1;
                }
            }
        }
        true
    }

    /// The path once walked and its names read: built whole, or its last
    /// components after [`CUT_MARK`]; and whether it was cut.
    fn path(&self, known: &Known) -> (Result<String, String>, bool) {
        let cut = matches!(self.end, Some(End::Cut));
        if let Some(End::Failed(why)) = &self.end {
            return (Err(why.clone()), cut);
        }
        let suffix = known.suffix(self.leaf);
        let room = match cut {
            true => PATH_TEXT_MAX - (CUT_MARK.len() + suffix.len()) as u64,
            false => PATH_TEXT_MAX,
        };
        // A walk cut for its length may be a loop of named dentries: the
        // steps it took are checked for one.
        let mut visited = HashSet::new();
        let mut names: Vec<&Name> = Vec::new();
        let (mut dentry, mut mount, mut bytes) = (self.leaf, self.leaf_mount, 0);
        for _ in 0..=MAX_STEPS {
            if cut && !visited.insert((dentry, mount)) {
                let why = format!(
                    "the dentries up from {:#x} lead back to {dentry:#x} (a loop); cut",
                    self.leaf
                );
                return (Err(why), false);
            }
            match known.up(dentry, mount) {
                Up::Mount(d, m) => (dentry, mount) = (d, m),
                Up::Dentry(d, parent) if bytes + 1 + d.name.len() <= room => {
                    bytes += 1 + d.name.len();
                    names.push(&d.name);
                    dentry = parent;
                }
                _ => break,
            }
        }
        let mut path = String::with_capacity(bytes as usize + CUT_MARK.len() + suffix.len());
        if cut {
            path.push_str(CUT_MARK);
        }
        for name in names.iter().rev() {
            let bytes = match name {
                Name::Here(bytes) => bytes,
                Name::At(..) => match known.names.get(*name) {
                    Some(Ok(bytes)) => bytes,
                    Some(Err(why)) => return (Err(format!("name: {why}")), cut),
                    None => return (Err("name not read".into()), cut),
                },
            };
            path.push('/');
            path.push_str(&String::from_utf8_lossy(bytes));
        }
        if path.is_empty() {
            path.push('/');
        }
        path.push_str(suffix);
        (Ok(path), cut)
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
                    let (path, cut) = paths.next().unwrap_or((Err("not walked".into()), false));
                    FileInfo {
                        path,
                        cut,
                        inode,
                        device,
                    }
                }
                Err(why) => FileInfo {
                    path: Err(format!("struct file: {why}")),
                    cut: false,
                    inode: 0,
                    device: 0,
                },
            };
            (file, info)
        })
        .collect()
}

/// The paths of `(dentry, mount)` pairs, level by level, each with
/// whether it was cut.
async fn walk_paths(
    kmem: &KernelMemory<'_>,
    layout: &PathLayout,
    starts: &[(u64, u64)],
) -> Vec<(Result<String, String>, bool)> {
    let mut walks: Vec<Walk> = starts
        .iter()
        .map(|&(dentry, mount)| Walk {
            leaf: dentry,
            leaf_mount: mount,
            dentry,
            mount,
            bytes: 0,
            steps: 0,
            end: None,
        })
        .collect();
    let mut known = Known::default();
    let (mount_first, mount_len) = span(
        &[layout.mnt_parent, layout.mnt_mountpoint, layout.mnt_root],
        8,
    );
    // Names kept outside their dentries, to read with the next batch.
    let mut pending: HashSet<Name> = HashSet::new();
    loop {
        let mut dentries = Vec::new();
        let mut mounts = Vec::new();
        for walk in walks.iter_mut().filter(|w| w.end.is_none()) {
            if walk.advance(&known) {
                continue;
            }
            // The dentry is needed unless it turns out to be its mount's
            // root: when the mount is not known yet, both are read at once.
            if !known.mounts.contains_key(&walk.mount) {
                mounts.push(walk.mount);
            }
            if !known.dentries.contains_key(&walk.dentry) {
                dentries.push(walk.dentry);
            }
        }
        for list in [&mut dentries, &mut mounts] {
            list.sort_unstable();
            list.dedup();
        }
        if dentries.is_empty() && mounts.is_empty() && pending.is_empty() {
            break;
        }
        let names: Vec<Name> = pending.drain().collect();
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
        for (name, bytes) in names.into_iter().zip(read_names) {
            known.names.insert(name, bytes);
        }
        for (&at, bytes) in dentries.iter().zip(read_dentries) {
            let dentry = bytes.and_then(|b| dentry(layout, at, &b));
            if let Ok(Dentry {
                name: name @ Name::At(..),
                ..
            }) = &dentry
            {
                if !known.names.contains_key(name) {
                    pending.insert(name.clone());
                }
            }
            known.dentries.insert(at, dentry);
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
