//! Finding the files: the dentry hash table's chains, the open files of
//! every process, the inodes and super blocks they name, and their paths;
//! then the contents of the one asked for (see `pages`).

use std::collections::HashMap;

use rustc_hash::{FxHashMap, FxHashSet};

use super::hash::{failure, HashWalk, Hashed, Inode, Super, Want};
use super::{pages, CacheError, CacheFailure, CachedFile, CachedFiles, FileContents, FileQuery};
use crate::join_all;
use crate::linux::kmem::KernelMemory;
use crate::linux::offsets::CacheLayout;
use crate::linux::paths::{self, FileFields};
use crate::linux::{FileKind, Kernel};
use crate::vm::Paging;

/// What `d_path` adds to a file unlinked while open.
const DELETED: &str = " (deleted)";

/// The walk's kernel, memory and offsets.
pub(crate) struct Finder<'a> {
    pub(super) kernel: &'a Kernel,
    pub(super) kmem: KernelMemory<'a>,
    pub(super) layout: &'a CacheLayout,
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

/// An open file's name, device and the pids that hold it.
type Opened = (String, u32, Vec<u32>);

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

impl Finder<'_> {
    fn hash(&self) -> HashWalk<'_> {
        HashWalk {
            kmem: &self.kmem,
            layout: self.layout,
        }
    }

    fn kernel_pointer(&self, p: u64) -> bool {
        self.hash().kernel_pointer(p)
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
                (finding, format!("named {path}"))
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
            [] => {
                let what = what.strip_prefix("named ").unwrap_or(&what).to_string();
                return Err(CacheError::NotFound(what));
            }
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
                let symbols = super::SYMBOLS.map(|name| self.kernel.symbol(name));
                let mut hashed = self.hash().run(symbols, want).await;
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
        let hash = self.hash();
        let read = join_all(sbs.iter().map(|&sb| hash.read_super(sb))).await;
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
        let mut of_file: Vec<(u64, Opened)> = Vec::new();
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
        let hash = self.hash();
        let read = join_all(wanted.iter().map(|&i| hash.read_inode(i))).await;
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
