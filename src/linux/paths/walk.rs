//! The walk up from each file's dentry to the root, as `d_path` goes: one
//! level of dentries per batch, each dentry and mount read once however
//! many paths go through it, with the names kept outside their dentries
//! and the leaves' dentry operations (which tell whether a `d_dname`
//! names the file instead) read beside the next level.

use std::collections::{HashMap, HashSet};

use super::{span, CUT_MARK, DELETED, MAX_STEPS, NAME_MAX, PATH_TEXT_MAX};
use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::PathLayout;

/// A dentry as a path walk needs it.
#[derive(Debug, Clone)]
struct Dentry {
    parent: u64,
    name: Name,
    unhashed: bool,
    /// `d_op`: its `d_dname`, when set, names the file instead of its
    /// path.
    ops: u64,
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
    /// The `d_dname` of each `dentry_operations` read.
    ops: HashMap<u64, Result<u64, String>>,
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
    /// Keeps the dentry at `at`, and asks for its name when kept outside
    /// it, and for its operations when it is a leaf.
    fn learn(
        &mut self,
        at: u64,
        dentry: Result<Dentry, String>,
        leaves: &HashSet<u64>,
        pending: &mut HashSet<Name>,
        pending_ops: &mut HashSet<u64>,
    ) {
        if let Ok(d) = &dentry {
            if matches!(d.name, Name::At(..)) && !self.names.contains_key(&d.name) {
                pending.insert(d.name.clone());
            }
            if d.ops != 0 && leaves.contains(&at) && !self.ops.contains_key(&d.ops) {
                pending_ops.insert(d.ops);
            }
        }
        self.dentries.insert(at, dentry);
    }

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

    /// What the file is called once walked and its names read: the
    /// `d_dname` that names its leaf, or its path, built whole or its last
    /// components after [`CUT_MARK`]; and whether it was cut.
    fn naming(&self, known: &Known) -> (Result<Naming, String>, bool) {
        if let Some(named) = self.dname(known) {
            return (named, false);
        }
        let (path, cut) = self.path(known);
        (path.map(Naming::Path), cut)
    }

    /// The leaf's `d_dname`, as `d_path` asks it first: set in its
    /// dentry's operations, and the dentry not the root of its mount.
    fn dname(&self, known: &Known) -> Option<Result<Naming, String>> {
        let Some(Ok(leaf)) = known.dentries.get(&self.leaf) else {
            return None;
        };
        let mount_root =
            matches!(known.mounts.get(&self.leaf_mount), Some(Ok(m)) if m.root == self.leaf);
        if leaf.ops == 0 || (leaf.parent == self.leaf && mount_root) {
            return None;
        }
        let function = match known.ops.get(&leaf.ops) {
            None => return Some(Err(format!("dentry operations {:#x} not read", leaf.ops))),
            Some(Err(why)) => return Some(Err(format!("dentry operations: {why}"))),
            Some(Ok(0)) => return None,
            Some(Ok(function)) => *function,
        };
        let name = match &leaf.name {
            Name::Here(bytes) => bytes.clone(),
            Name::At(..) => match known.names.get(&leaf.name) {
                Some(Ok(bytes)) => bytes.clone(),
                Some(Err(why)) => return Some(Err(format!("name: {why}"))),
                None => return Some(Err("name not read".into())),
            },
        };
        Some(Ok(Naming::Dname { function, name }))
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

/// What a file is called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Naming {
    /// Its path, as `d_path` builds it.
    Path(String),
    /// What the `d_dname` function at `function` makes of its dentry's
    /// name.
    Dname { function: u64, name: Vec<u8> },
}

/// What the files at `(dentry, mount)` pairs are called, level by level,
/// each with whether its path was cut.
///
/// `seen` holds dentries read already (whole, by address): a walk takes
/// them from there, with no read.
pub(super) async fn walk_paths(
    kmem: &KernelMemory<'_>,
    layout: &PathLayout,
    starts: &[(u64, u64)],
    seen: &HashMap<u64, Vec<u8>>,
) -> Vec<(Result<Naming, String>, bool)> {
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
    // Names kept outside their dentries, and the leaves' operations, to
    // read with the next batch.
    let mut pending: HashSet<Name> = HashSet::new();
    let mut pending_ops: HashSet<u64> = HashSet::new();
    let leaves: HashSet<u64> = starts.iter().map(|s| s.0).collect();
    loop {
        let mut dentries = Vec::new();
        let mut mounts = Vec::new();
        let mut taken = false;
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
                match seen.get(&walk.dentry) {
                    Some(bytes) => {
                        let at = walk.dentry;
                        let found = dentry(layout, at, bytes);
                        known.learn(at, found, &leaves, &mut pending, &mut pending_ops);
                        taken = true;
                    }
                    None => dentries.push(walk.dentry),
                }
            }
        }
        // Dentries taken from those seen may carry the walks further
        // before anything is read.
        if taken {
            continue;
        }
        for list in [&mut dentries, &mut mounts] {
            list.sort_unstable();
            list.dedup();
        }
        if dentries.is_empty() && mounts.is_empty() && pending.is_empty() && pending_ops.is_empty()
        {
            break;
        }
        let names: Vec<Name> = pending.drain().collect();
        let ops: Vec<u64> = pending_ops.drain().collect();
        let (read_dentries, read_mounts, read_names, read_ops) = futures::join!(
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
            })),
            futures::future::join_all(
                ops.iter()
                    .map(|&o| kmem.read_vec(o.wrapping_add(layout.d_dname), 8))
            )
        );
        for (&at, bytes) in ops.iter().zip(read_ops) {
            known
                .ops
                .insert(at, bytes.map(|b| b.u64_at(0).unwrap_or(0)));
        }
        for (name, bytes) in names.into_iter().zip(read_names) {
            known.names.insert(name, bytes);
        }
        for (&at, bytes) in dentries.iter().zip(read_dentries) {
            let dentry = bytes.and_then(|b| dentry(layout, at, &b));
            known.learn(at, dentry, &leaves, &mut pending, &mut pending_ops);
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
    walks.iter().map(|w| w.naming(&known)).collect()
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
        ops: bytes.u64_at(layout.d_op).unwrap_or(0),
    })
}
