//! Finding the files: the dentry hash table's chains, the open files of
//! every process, the inodes and super blocks they name, and their paths;
//! then the contents of the one asked for (see `pages`).

use std::collections::HashMap;

use rustc_hash::{FxHashMap, FxHashSet};

use super::{
    pages, CacheError, CacheFailure, CachedFile, CachedFiles, FileContents, FileQuery, SYMBOLS,
};
use crate::join_all;
use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::CacheLayout;
use crate::linux::paths::{self, FileFields};
use crate::linux::{FileKind, Kernel};
use crate::vm::Paging;

/// Most links of a chain followed: the table has about as many buckets as
/// the dentry cache has room for dentries, so a chain longer than this is
/// crafted, or the table is being rebuilt; it is cut and named.
pub(super) const MAX_CHAIN: usize = 64;
/// Buckets read in one piece (a batch holds them all).
const BUCKETS_PER_READ: u64 = 1 << 17;
/// What `d_path` adds to a file unlinked while open.
const DELETED: &str = " (deleted)";
/// `S_IFMT` and `S_IFREG`.
const S_IFMT: u16 = 0o170_000;
const S_IFREG: u16 = 0o100_000;

/// The walk's kernel, memory and offsets.
pub(crate) struct Finder<'a> {
    pub(super) kernel: &'a Kernel,
    pub(super) kmem: KernelMemory<'a>,
    pub(super) layout: &'a CacheLayout,
}

/// An inode as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Inode {
    pub(super) address: u64,
    pub(super) number: u64,
    pub(super) mode: u16,
    pub(super) sb: u64,
    pub(super) size: i64,
    pub(super) links: u32,
    /// Its `address_space`, and that mapping's page array head and page
    /// count.
    pub(super) mapping: u64,
    pub(super) head: u64,
    pub(super) nrpages: u64,
}

/// A super block as read: its device, first mount and name.
#[derive(Debug, Clone)]
struct Super {
    device: u32,
    mount: Option<u64>,
    name: String,
}

/// What the hash table's chains gave: the positive dentries (dentry,
/// inode), and the inodes and super blocks they name.
#[derive(Default)]
struct Hashed {
    dentries: Vec<(u64, u64)>,
    inodes: FxHashMap<u64, Inode>,
    supers: FxHashMap<u64, Super>,
    vmemmap: Option<u64>,
    failed: Vec<CacheFailure>,
    /// Links of the longest chain (a batch each).
    chain_links: usize,
    /// Every positive dentry read, whole, for the paths' walk (the
    /// directories above a file are in the table too).
    seen: HashMap<u64, Vec<u8>>,
}

/// What to keep of the dentries the chains give.
#[derive(Clone, Copy)]
enum Want<'q> {
    /// Every regular file with cached pages.
    Cached,
    /// Every regular file whose name may be `name` (names kept outside
    /// their dentry are not read: kept).
    Named(&'q [u8]),
    /// Every regular file of this inode number.
    Number(u64),
}

impl Want<'_> {
    fn keeps(&self, inode: &Inode) -> bool {
        inode.mode & S_IFMT == S_IFREG
            && match self {
                Want::Cached => inode.nrpages > 0,
                Want::Named(_) => true,
                Want::Number(n) => inode.number == *n,
            }
    }
}

/// A file found: what is said of it, its page array's head, and its
/// super block (read again when `file_system` is `None`).
#[derive(Debug, Clone)]
pub(super) struct Hit {
    pub(super) file: CachedFile,
    pub(super) head: u64,
    sb: u64,
}

/// What a search found: the files, where `struct page`s start (when
/// read), what failed, and the links of the longest hash chain.
pub(super) struct Finding {
    hits: Vec<Hit>,
    vmemmap: Option<u64>,
    failed: Vec<CacheFailure>,
    chain_links: usize,
}

/// A file found, before its path is known.
struct Found {
    inode: Inode,
    path: Option<Result<String, String>>,
    /// A dentry of it and the mount to name it through.
    dentry: Option<(u64, u64)>,
    device: u32,
    file_system: Option<String>,
    open_by: Vec<u32>,
}

fn failure(address: u64, reason: impl Into<String>) -> CacheFailure {
    CacheFailure {
        address,
        reason: reason.into(),
    }
}

impl Finder<'_> {
    fn kernel_pointer(&self, p: u64) -> bool {
        p >= self.kmem.kernel_half() && p % 8 == 0
    }

    /// Every regular file with pages in the cache.
    pub(super) async fn list(&self) -> CachedFiles {
        let Finding {
            mut hits,
            mut failed,
            chain_links,
            ..
        } = self.find(Want::Cached, true).await;
        self.name_file_systems(&mut hits, &mut failed).await;
        let mut files: Vec<CachedFile> = hits.into_iter().map(|f| f.file).collect();
        files.sort_by(|a, b| (a.device, &a.path, a.inode).cmp(&(b.device, &b.path, b.inode)));
        CachedFiles {
            files,
            failed,
            chain_links,
        }
    }

    /// The contents of the file `which`.
    pub(super) async fn contents(&self, which: &FileQuery) -> Result<FileContents, CacheError> {
        let (finding, what) = match which {
            FileQuery::Path(path) => {
                let deleted = path.ends_with(DELETED);
                let base = path.trim_end_matches(DELETED);
                let name = base.rsplit('/').next().unwrap_or(base).as_bytes();
                let mut finding = self.find(Want::Named(name), deleted).await;
                finding
                    .hits
                    .retain(|f| f.file.path.as_deref() == Ok(path.as_str()));
                (finding, path.clone())
            }
            FileQuery::Inode { number, device } => {
                let mut finding = self.find(Want::Number(*number), true).await;
                finding
                    .hits
                    .retain(|f| device.is_none_or(|d| d == f.file.device));
                let what = match device {
                    Some(d) => format!("with inode {number} on device {}:{}", d >> 20, d & 0xfffff),
                    None => format!("with inode {number}"),
                };
                (finding, what)
            }
        };
        let Finding {
            hits,
            vmemmap,
            mut failed,
            chain_links,
        } = finding;
        let mut hit = match &hits[..] {
            [] => return Err(CacheError::NotFound(what)),
            [one] => vec![one.clone()],
            many => {
                let inodes: Vec<String> = many
                    .iter()
                    .map(|f| {
                        let (inode, device) = (f.file.inode, f.file.device);
                        format!("{inode} on {}:{}", device >> 20, device & 0xfffff)
                    })
                    .collect();
                return Err(CacheError::Ambiguous(what, many.len(), inodes.join(", ")));
            }
        };
        let vmemmap = vmemmap.unwrap_or(default_vmemmap(self.kmem.space.paging()));
        let (head, file) = (hit[0].head, hit[0].file.clone());
        let (read, ()) = futures::join!(
            pages::read(&self.kmem, self.layout, vmemmap, &file, head),
            self.name_file_systems(&mut hit, &mut failed)
        );
        failed.extend(read.failed);
        let file = CachedFile {
            file_system: hit[0].file.file_system.clone(),
            ..file
        };
        Ok(FileContents {
            file,
            pages: read.pages,
            missing: read.missing,
            failed,
            chain_links,
        })
    }

    /// The files `want` keeps, each with its page array's head; where
    /// `struct page`s start (when read); what failed. The open files are
    /// read too when `open` is set.
    async fn find(&self, want: Want<'_>, open: bool) -> Finding {
        let ((mut hashed, named), opened) = futures::join!(
            async {
                let mut hashed = self.hashed(want).await;
                let named = self.name_hashed(&mut hashed, want).await;
                (hashed, named)
            },
            async {
                match open {
                    true => self.opened(want).await,
                    false => (Vec::new(), Vec::new()),
                }
            }
        );
        let mut failed = std::mem::take(&mut hashed.failed);
        let (opened, open_failed) = opened;
        failed.extend(open_failed);
        // By inode: an open file's name is the one its process sees.
        let mut by_inode: FxHashMap<u64, Found> = FxHashMap::default();
        for found in opened.into_iter().chain(named) {
            match by_inode.get_mut(&found.inode.address) {
                Some(known) => known.open_by.extend(found.open_by),
                None => {
                    by_inode.insert(found.inode.address, found);
                }
            }
        }
        let mut found: Vec<Found> = by_inode.into_values().collect();
        found.sort_by_key(|f| f.inode.address);
        for f in &mut found {
            if f.file_system.is_none() {
                f.file_system = hashed.supers.get(&f.inode.sb).map(|s| s.name.clone());
            }
        }
        let files = found
            .into_iter()
            .map(|f| {
                let file = CachedFile {
                    path: f.path.unwrap_or_else(|| Err("not walked".into())),
                    inode: f.inode.number,
                    device: f.device,
                    file_system: f.file_system,
                    size: u64::try_from(f.inode.size).unwrap_or(0),
                    links: f.inode.links,
                    cached_pages: f.inode.nrpages,
                    address: f.inode.address,
                    mapping: f.inode.mapping,
                    open_by: f.open_by,
                };
                Hit {
                    file,
                    head: f.inode.head,
                    sb: f.inode.sb,
                }
            })
            .collect();
        Finding {
            hits: files,
            vmemmap: hashed.vmemmap,
            failed,
            chain_links: hashed.chain_links,
        }
    }

    /// The files of the hash table's dentries that `want` keeps, named by
    /// their paths (one dentry of each inode).
    async fn name_hashed(&self, hashed: &mut Hashed, want: Want<'_>) -> Vec<Found> {
        let mut found: Vec<Found> = Vec::new();
        let mut taken: FxHashSet<u64> = FxHashSet::default();
        for &(dentry, inode) in &hashed.dentries {
            let Some(i) = hashed.inodes.get(&inode) else {
                continue;
            };
            if !want.keeps(i) || !taken.insert(inode) {
                continue;
            }
            let sb = hashed.supers.get(&i.sb);
            found.push(Found {
                inode: *i,
                path: None,
                dentry: sb.map(|s| (dentry, s.mount.unwrap_or(0))),
                device: sb.map_or(0, |s| s.device),
                file_system: sb.map(|s| s.name.clone()),
                open_by: Vec::new(),
            });
        }
        let fields: Vec<FileFields> = found
            .iter()
            .map(|f| {
                let (dentry, mount) = f.dentry.unwrap_or((0, 0));
                FileFields {
                    dentry,
                    vfsmount: match mount {
                        0 => 0,
                        m => m + self.layout.paths.mount_vfsmount,
                    },
                    inode: f.inode.address,
                }
            })
            .collect();
        let dnames = self.kernel.dnames();
        let paths = &self.layout.paths;
        let infos = paths::of_fields_seen(&self.kmem, paths, &dnames, &fields, &hashed.seen).await;
        hashed.seen = HashMap::new();
        for (f, info) in found.iter_mut().zip(infos) {
            f.path = Some(match f.dentry {
                Some((_, 0)) => Err("its file system has no mount".into()),
                None => Err("its super block could not be read".into()),
                Some(_) => info.path,
            });
        }
        found
    }

    /// Reads the super blocks of the files whose file system is not named
    /// yet (opened files whose file system the hash table did not give),
    /// in one batch.
    async fn name_file_systems(&self, hits: &mut [Hit], failed: &mut Vec<CacheFailure>) {
        let mut sbs: Vec<u64> = hits
            .iter()
            .filter(|h| h.file.file_system.is_none() && self.kernel_pointer(h.sb))
            .map(|h| h.sb)
            .collect();
        sbs.sort_unstable();
        sbs.dedup();
        let read = join_all(sbs.iter().map(|&sb| self.read_super(sb))).await;
        let names: FxHashMap<u64, Result<Super, String>> = sbs.into_iter().zip(read).collect();
        for hit in hits.iter_mut() {
            match names.get(&hit.sb) {
                Some(Ok(sb)) if hit.file.file_system.is_none() => {
                    hit.file.file_system = Some(sb.name.clone());
                }
                Some(Err(why)) => failed.push(failure(hit.sb, format!("super block: {why}"))),
                _ => {}
            }
        }
    }

    /// The dentry hash table's positive dentries, with their inodes and
    /// super blocks (see the module's documentation for the batches).
    async fn hashed(&self, want: Want<'_>) -> Hashed {
        let mut out = Hashed::default();
        let symbol = |name: &str| self.kernel.symbol(name);
        let word = |name: &'static str, len: usize| async move {
            let at = symbol(name).ok_or(format!("the kernel has no symbol {name}"))?;
            let bytes = self.kmem.read_vec(at, len).await?;
            Ok::<u64, String>(match len {
                4 => u64::from(bytes.u32_at(0).unwrap_or(0)),
                _ => bytes.u64_at(0).unwrap_or(0),
            })
        };
        let (table, shift, vmemmap) = futures::join!(
            word(SYMBOLS[0], 8),
            word(SYMBOLS[1], 4),
            word(SYMBOLS[2], 8)
        );
        out.vmemmap = vmemmap.ok();
        let (table, buckets) = match (table, shift) {
            (Ok(table), Ok(shift)) => match self.check_table(table, shift) {
                Ok(buckets) => (table, buckets),
                Err(why) => {
                    out.failed.push(failure(table, why));
                    return out;
                }
            },
            (Err(why), _) | (_, Err(why)) => {
                out.failed.push(failure(
                    0,
                    format!("the dentry cache cannot be read: {why}"),
                ));
                return out;
            }
        };
        let pieces = join_all((0..buckets.div_ceil(BUCKETS_PER_READ)).map(|piece| {
            let first = piece * BUCKETS_PER_READ;
            let count = BUCKETS_PER_READ.min(buckets - first);
            self.kmem.read_vec(table + first * 8, (count * 8) as usize)
        }))
        .await;
        // Each chain's first link: (where its pprev must point, node).
        let mut level: Vec<(u64, u64)> = Vec::new();
        for (piece, bytes) in pieces.into_iter().enumerate() {
            let first = table + piece as u64 * BUCKETS_PER_READ * 8;
            match bytes {
                Ok(bytes) => {
                    for (i, head) in bytes.chunks_exact(8).enumerate() {
                        let node = u64::from_le_bytes(head.try_into().unwrap_or_default()) & !1;
                        if node != 0 {
                            level.push((first + i as u64 * 8, node));
                        }
                    }
                }
                Err(why) => out
                    .failed
                    .push(failure(first, format!("dentry hash table: {why}"))),
            }
        }
        self.chains(level, want, &mut out).await;
        out
    }

    /// How many buckets a table at `table` whose `d_hash_shift` is
    /// `shift` has, if the kernel could have made it.
    fn check_table(&self, table: u64, shift: u64) -> Result<u64, String> {
        if !self.kernel_pointer(table) {
            return Err(format!("dentry_hashtable {table:#x} is no kernel address"));
        }
        if !(1..=31).contains(&shift) {
            return Err(format!("d_hash_shift is {shift}, not 1 to 31"));
        }
        let buckets = 1u64 << (32 - shift);
        if buckets * 8 > self.kmem.limit {
            return Err(format!(
                "d_hash_shift {shift} gives {buckets} buckets, more than the target's {} bytes of memory hold",
                self.kmem.limit
            ));
        }
        Ok(buckets)
    }

    /// Follows every chain a link per batch, reading the inodes and super
    /// blocks of each level's dentries beside the next level.
    async fn chains(&self, mut level: Vec<(u64, u64)>, want: Want<'_>, out: &mut Hashed) {
        let l = self.layout;
        let p = &l.paths;
        let size = p.dentry_size;
        let max = (self.kmem.limit / size.max(1)) as usize;
        let mut seen: FxHashSet<u64> = FxHashSet::default();
        let (mut inodes, mut supers): (Vec<u64>, Vec<u64>) = (Vec::new(), Vec::new());
        let mut depth = 0;
        while !level.is_empty() || !inodes.is_empty() || !supers.is_empty() {
            if depth == MAX_CHAIN && !level.is_empty() {
                let why = format!(
                    "{} chain(s) of the dentry hash table longer than {MAX_CHAIN} dentries: cut",
                    level.len()
                );
                out.failed.push(failure(level[0].1, why));
                level.clear();
            }
            depth += 1;
            if !level.is_empty() {
                out.chain_links = depth;
            }
            let (dentries, read_inodes, read_supers) = futures::join!(
                join_all(level.iter().map(|&(_, node)| async move {
                    match self.kernel_pointer(node) && node >= l.d_hash {
                        true => self.kmem.read_vec(node - l.d_hash, size as usize).await,
                        false => Err(format!("chain link {node:#x} is no kernel address")),
                    }
                })),
                join_all(inodes.iter().map(|&i| self.read_inode(i))),
                join_all(supers.iter().map(|&s| self.read_super(s))),
            );
            for (&at, inode) in inodes.iter().zip(read_inodes) {
                match inode {
                    Ok(inode) => {
                        out.inodes.insert(at, inode);
                    }
                    Err(why) => out.failed.push(failure(at, format!("inode: {why}"))),
                }
            }
            for (&at, sb) in supers.iter().zip(read_supers) {
                match sb {
                    Ok(sb) => {
                        out.supers.insert(at, sb);
                    }
                    Err(why) => out.failed.push(failure(at, format!("super block: {why}"))),
                }
            }
            inodes.clear();
            supers.clear();
            let mut next = Vec::new();
            for (&(pprev, node), bytes) in level.iter().zip(dentries) {
                let dentry = node.wrapping_sub(l.d_hash);
                let bytes = match bytes {
                    Ok(bytes) => bytes,
                    Err(why) => {
                        out.failed.push(failure(dentry, format!("dentry: {why}")));
                        continue;
                    }
                };
                let at = |o: u64| bytes.u64_at(o).unwrap_or(0);
                if at(p.d_hash_pprev) != pprev {
                    let why = format!(
                        "the dentry's d_hash.pprev is {:#x}, but it was reached from {pprev:#x}: chain cut",
                        at(p.d_hash_pprev)
                    );
                    out.failed.push(failure(dentry, why));
                    continue;
                }
                if !seen.insert(dentry) {
                    let why = "dentry reached again in the hash table's chains: chain cut";
                    out.failed.push(failure(dentry, why));
                    continue;
                }
                if seen.len() > max {
                    let why = format!("more dentries than the target's memory holds ({max}): cut");
                    out.failed.push(failure(dentry, why));
                    return;
                }
                let link = at(l.d_hash);
                if link != 0 {
                    next.push((node, link));
                }
                let (inode, sb) = (at(l.d_inode), at(l.d_sb));
                if inode == 0 {
                    continue;
                }
                let named = self.named(&bytes, dentry, want);
                out.seen.insert(dentry, bytes);
                if !named {
                    continue;
                }
                if !self.kernel_pointer(inode) || !self.kernel_pointer(sb) {
                    let why =
                        format!("its inode {inode:#x} or super block {sb:#x} is no kernel address");
                    out.failed.push(failure(dentry, why));
                    continue;
                }
                out.dentries.push((dentry, inode));
                if !out.inodes.contains_key(&inode) && !inodes.contains(&inode) {
                    inodes.push(inode);
                }
                if !out.supers.contains_key(&sb) && !supers.contains(&sb) {
                    supers.push(sb);
                }
            }
            inodes.sort_unstable();
            inodes.dedup();
            supers.sort_unstable();
            supers.dedup();
            level = next;
        }
    }

    /// Whether the dentry read as `bytes` at `dentry` may be the file
    /// `want` names: its name, when kept inside it, must be the one asked.
    fn named(&self, bytes: &[u8], dentry: u64, want: Want<'_>) -> bool {
        let Want::Named(name) = want else {
            return true;
        };
        let p = &self.layout.paths;
        let len = u64::from(bytes.u32_at(p.d_name_len).unwrap_or(0));
        let at = bytes.u64_at(p.d_name_name).unwrap_or(0);
        if len != name.len() as u64 {
            return false;
        }
        match at.checked_sub(dentry) {
            Some(offset) if offset < p.dentry_size => {
                bytes.bytes_at(offset, len).is_none_or(|b| b == name)
            }
            _ => true,
        }
    }

    /// The inode at `at`, with its mapping's head and page count when the
    /// mapping is its own (every regular file's but a block device's).
    pub(super) async fn read_inode(&self, at: u64) -> Result<Inode, String> {
        let l = self.layout;
        let p = &l.paths;
        let (first, len) = l.inode_span();
        let bytes = self.kmem.read_vec(at + first, len as usize).await?;
        let u64_at = |o: u64| bytes.u64_at(o - first).unwrap_or(0);
        let u32_at = |o: u64| bytes.u32_at(o - first).unwrap_or(0);
        let mapping = u64_at(l.i_mapping);
        let own = at + l.i_data;
        let inode = Inode {
            address: at,
            number: u64_at(p.i_ino),
            mode: u32_at(p.i_mode) as u16,
            sb: u64_at(p.i_sb),
            size: u64_at(l.i_size) as i64,
            links: u32_at(l.i_nlink),
            mapping,
            head: u64_at(l.i_data + l.a_head),
            nrpages: u64_at(l.i_data + l.a_nrpages),
        };
        if inode.mode & S_IFMT != S_IFREG {
            return Ok(inode);
        }
        if mapping != own {
            return Err(format!(
                "a regular file whose mapping {mapping:#x} is not its own ({own:#x})"
            ));
        }
        let host = u64_at(l.i_data + l.a_host);
        if host != at {
            return Err(format!(
                "its mapping's host is {host:#x}, not the inode: torn"
            ));
        }
        if inode.size < 0 {
            return Err(format!("its size is {}, below zero", inode.size));
        }
        Ok(inode)
    }

    /// The super block at `at`: its device, first mount and name.
    async fn read_super(&self, at: u64) -> Result<Super, String> {
        let l = self.layout;
        let (first, len) = l.super_span();
        let bytes = self.kmem.read_vec(at + first, len as usize).await?;
        let next = bytes.u64_at(l.s_mounts - first).unwrap_or(0);
        let mount = match next == at + l.s_mounts {
            true => None,
            false if self.kernel_pointer(next) && next >= l.mnt_instance => {
                Some(next - l.mnt_instance)
            }
            false => {
                return Err(format!(
                    "its first mount link {next:#x} is no kernel address"
                ))
            }
        };
        let name = bytes.bytes_at(l.s_id.0 - first, l.s_id.1).unwrap_or(&[]);
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        Ok(Super {
            device: bytes.u32_at(l.paths.s_dev - first).unwrap_or(0),
            mount,
            name: String::from_utf8_lossy(&name[..end]).into_owned(),
        })
    }

    /// The regular files processes hold open that `want` keeps: their
    /// paths as the processes see them, and their inodes.
    async fn opened(&self, want: Want<'_>) -> (Vec<Found>, Vec<CacheFailure>) {
        let open = self.kernel.open_files_async(None).await;
        let mut failed: Vec<CacheFailure> = open
            .failed
            .iter()
            .map(|f| failure(f.address, format!("open files: {f}")))
            .collect();
        // Each inode once: its name, device and the pids holding it.
        let mut of_file: Vec<(u64, (String, u32, Vec<u32>))> = Vec::new();
        let mut at: FxHashMap<u64, usize> = FxHashMap::default();
        for process in &open.processes {
            for fd in &process.fds {
                let (FileKind::Regular, Ok(name)) = (fd.kind, &fd.name) else {
                    continue;
                };
                if !self.kernel_pointer(fd.inode_address) {
                    let why = format!("its inode {:#x} is no kernel address", fd.inode_address);
                    failed.push(failure(fd.file, why));
                    continue;
                }
                match at.get(&fd.inode_address) {
                    Some(&i) => of_file[i].1 .2.push(process.pid),
                    None => {
                        at.insert(fd.inode_address, of_file.len());
                        let info = (name.clone(), fd.device, vec![process.pid]);
                        of_file.push((fd.inode_address, info));
                    }
                }
            }
        }
        let mut wanted: Vec<u64> = of_file.iter().map(|f| f.0).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let read = join_all(wanted.iter().map(|&i| self.read_inode(i))).await;
        let inodes: FxHashMap<u64, Result<Inode, String>> = wanted.into_iter().zip(read).collect();
        let mut found: Vec<Found> = Vec::new();
        for (inode, (name, device, pids)) in of_file {
            let i = match &inodes[&inode] {
                Ok(i) => *i,
                Err(why) => {
                    failed.push(failure(inode, format!("inode of {name}: {why}")));
                    continue;
                }
            };
            if !want.keeps(&i) {
                continue;
            }
            found.push(Found {
                inode: i,
                path: Some(Ok(name)),
                dentry: None,
                device,
                file_system: None,
                open_by: pids,
            });
        }
        for f in &mut found {
            f.open_by.sort_unstable();
            f.open_by.dedup();
        }
        (found, failed)
    }
}

/// Where `struct page`s start without memory randomisation, by paging
/// mode (`VMEMMAP_START`).
pub(super) fn default_vmemmap(paging: Paging) -> u64 {
    match paging {
        Paging::FourLevel => 0xffff_ea00_0000_0000,
        Paging::FiveLevel => 0xffd4_0000_0000_0000,
    }
}
