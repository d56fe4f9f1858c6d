//! The dentry cache's hash table: its buckets in one read, then its
//! chains a link per batch, each dentry read whole, with the inodes and
//! super blocks of each link's dentries read beside the next link.

use std::collections::HashMap;

use rustc_hash::{FxHashMap, FxHashSet};

use super::{CacheFailure, SYMBOLS};
use crate::join_all;
use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::CacheLayout;

/// Most links of a chain followed: the table has about as many buckets as
/// the dentry cache has room for dentries, so a chain longer than this is
/// crafted, or the table is being rebuilt; it is cut and named.
pub(super) const MAX_CHAIN: usize = 64;
/// Buckets read in one piece (a batch holds them all).
const BUCKETS_PER_READ: u64 = 1 << 17;
/// `S_IFMT` and `S_IFREG`.
const S_IFMT: u16 = 0o170_000;
const S_IFREG: u16 = 0o100_000;

/// A walk of the hash table: the memory it reads, and what by.
pub(super) struct HashWalk<'a> {
    pub(super) kmem: &'a KernelMemory<'a>,
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
pub(super) struct Super {
    pub(super) device: u32,
    pub(super) mount: Option<u64>,
    pub(super) name: String,
}

/// What the hash table's chains gave: the positive dentries (dentry,
/// inode), and the inodes and super blocks they name.
#[derive(Default)]
pub(super) struct Hashed {
    pub(super) dentries: Vec<(u64, u64)>,
    pub(super) inodes: FxHashMap<u64, Inode>,
    pub(super) supers: FxHashMap<u64, Super>,
    pub(super) vmemmap: Option<u64>,
    pub(super) failed: Vec<CacheFailure>,
    /// Links of the longest chain (a batch each).
    pub(super) chain_links: usize,
    /// Every positive dentry read, whole, for the paths' walk (the
    /// directories above a file are in the table too).
    pub(super) seen: HashMap<u64, Vec<u8>>,
}

/// What to keep of the dentries the chains give.
#[derive(Clone, Copy)]
pub(super) enum Want<'q> {
    /// Every regular file with cached pages.
    Cached,
    /// Every regular file whose name may be `name` (names kept outside
    /// their dentry are not read: kept).
    Named(&'q [u8]),
    /// Every regular file of this inode number.
    Number(u64),
}

impl Want<'_> {
    pub(super) fn keeps(&self, inode: &Inode) -> bool {
        inode.mode & S_IFMT == S_IFREG
            && match self {
                Want::Cached => inode.nrpages > 0,
                Want::Named(_) => true,
                Want::Number(n) => inode.number == *n,
            }
    }
}

pub(super) fn failure(address: u64, reason: impl Into<String>) -> CacheFailure {
    CacheFailure {
        address,
        reason: reason.into(),
    }
}

impl HashWalk<'_> {
    pub(super) fn kernel_pointer(&self, p: u64) -> bool {
        p >= self.kmem.kernel_half() && p % 8 == 0
    }

    /// The dentry hash table's positive dentries, with their inodes and
    /// super blocks (see the module's documentation for the batches).
    /// `symbols` are the addresses of [`SYMBOLS`], when the kernel has
    /// them.
    pub(super) async fn run(&self, symbols: [Option<u64>; 3], want: Want<'_>) -> Hashed {
        let mut out = Hashed::default();
        let word = |i: usize, len: usize| async move {
            let name = SYMBOLS[i];
            let at = symbols[i].ok_or(format!("the kernel has no symbol {name}"))?;
            let bytes = self.kmem.read_vec(at, len).await?;
            Ok::<u64, String>(match len {
                4 => u64::from(bytes.u32_at(0).unwrap_or(0)),
                _ => bytes.u64_at(0).unwrap_or(0),
            })
        };
        let (table, shift, vmemmap) = futures::join!(word(0, 8), word(1, 4), word(2, 8));
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
                // Each inode and super block asked for once (the sort and
                // dedup below leave each level's once).
                if !out.inodes.contains_key(&inode) {
                    inodes.push(inode);
                }
                if !out.supers.contains_key(&sb) {
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
    pub(super) async fn read_super(&self, at: u64) -> Result<Super, String> {
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
}
