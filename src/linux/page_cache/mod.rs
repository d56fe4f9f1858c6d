//! Files in the page cache: which regular files the kernel holds pages
//! of, and the bytes of those pages, read a level at a time:
//!
//! 1. `dentry_hashtable` and `d_hash_shift` (the dentry cache's hash
//!    table), `vmemmap_base`;
//! 2. the hash table's buckets, in one read;
//! 3. its chains, a link of every chain per batch (each dentry read whole,
//!    its name kept), with the inodes and super blocks of the dentries
//!    read the batch before;
//! 4. the paths of the files, a level of dentries per batch (`paths`);
//!
//! beside which the open files of every process are read (`files`), for
//! what the hash table no longer holds: a file unlinked while open (a
//! deleted log still in memory). A file's contents are then its mapping's
//! page array (`i_pages`, an xarray: a level of nodes per batch) and the
//! pages it names, every page's bytes in one batch: a page pointer is a
//! `struct page` in `vmemmap`, whose index there is the page's frame. A
//! large folio is one entry covering many pages (a node higher up, or
//! sibling entries after it, say how many); a value entry (an evicted
//! page's shadow) and an index with no entry are pages not cached.
//!
//! Everything is bounded by what the kernel allows and the target holds:
//! no more buckets, dentries or pages than its memory has room for, no
//! page past the file's size, each dentry read once (a chain that loops is
//! cut and named), no page frame past the end of memory.

use std::fmt;
use std::ops::Range;

use crate::linux::Kernel;

mod find;
mod hash;
mod pages;

#[cfg(test)]
mod tests;

/// The symbols the walk reads: the dentry hash table and its size, and
/// where `struct page`s start.
pub(crate) const SYMBOLS: [&str; 3] = ["dentry_hashtable", "d_hash_shift", "vmemmap_base"];

/// Bytes of a page.
pub(crate) const PAGE: u64 = 4096;

/// A regular file the page cache holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedFile {
    /// Its path as `d_path` builds it (` (deleted)` once unlinked), or why
    /// it could not be built.
    pub path: Result<String, String>,
    /// The inode number, and the device of its file system.
    pub inode: u64,
    pub device: u32,
    /// The file system's name for itself (`s_id`: `tmpfs`, `vda1`...);
    /// `None` when its super block was not read.
    pub file_system: Option<String>,
    /// `i_size`.
    pub size: u64,
    /// `i_nlink`: 0 for a file unlinked but still open.
    pub links: u32,
    /// Pages the mapping holds (`nrpages`).
    pub cached_pages: u64,
    /// Address of its `struct inode` and of its `address_space`.
    pub address: u64,
    pub mapping: u64,
    /// The pids of the processes that hold it open.
    pub open_by: Vec<u32>,
}

/// Something that could not be read, or did not make sense.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheFailure {
    /// Kernel address of what failed (0 for none).
    pub address: u64,
    /// Why, in one line.
    pub reason: String,
}

impl fmt::Display for CacheFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.address {
            0 => f.write_str(&self.reason),
            at => write!(f, "{at:#x}: {}", self.reason),
        }
    }
}

/// The regular files the page cache holds pages of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CachedFiles {
    /// By device, then path.
    pub files: Vec<CachedFile>,
    /// What could not be read, and why; the rest stands.
    pub failed: Vec<CacheFailure>,
    /// Links of the dentry hash table's longest chain: the walk read
    /// them a batch each.
    pub chain_links: usize,
}

/// Which file to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileQuery {
    /// By path, as [`CachedFile::path`] has it (ending in ` (deleted)`
    /// for a file unlinked while open).
    Path(String),
    /// By inode number, on the file system of `device` when given.
    Inode {
        /// The inode number.
        number: u64,
        /// The file system's device.
        device: Option<u32>,
    },
}

/// What the page cache holds of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileContents {
    /// The file.
    pub file: CachedFile,
    /// The pages read, `(page index, its bytes)` by index; the last is
    /// cut at the file's size.
    pub pages: Vec<(u64, Vec<u8>)>,
    /// The page indices of the file (below its size) not in the cache,
    /// or whose pages could not be read, as ranges.
    pub missing: Vec<Range<u64>>,
    /// What could not be read, and why.
    pub failed: Vec<CacheFailure>,
    /// Links of the dentry hash table's longest chain, as in
    /// [`CachedFiles::chain_links`].
    pub chain_links: usize,
}

impl FileContents {
    /// Whether every page of the file was read.
    pub fn complete(&self) -> bool {
        self.missing.is_empty() && self.failed.is_empty()
    }
}

/// Why a file could not be read at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// No file the cache holds matches.
    #[error("no file {0} in the page cache (the dentry cache and the open files were searched)")]
    NotFound(String),
    /// More than one file matches: what was asked, how many, which.
    #[error("{1} files {0} (inode {2}): name one by inode and device")]
    Ambiguous(String, usize, String),
    /// The kernel's BTF lacks what the walk reads by.
    #[error("the page cache cannot be read: {0}")]
    Layout(String),
}

impl Kernel {
    /// The regular files the page cache holds pages of (blocking; see
    /// [`Kernel::cached_files_async`]).
    pub fn cached_files(&self) -> CachedFiles {
        self.memory().block_on(self.cached_files_async())
    }

    /// The regular files the page cache holds pages of: every file the
    /// dentry cache names, and every file a process holds open; read as
    /// the module's documentation says.
    pub async fn cached_files_async(&self) -> CachedFiles {
        match self.cache_finder() {
            Ok(finder) => finder.list().await,
            Err(why) => CachedFiles {
                files: Vec::new(),
                failed: vec![CacheFailure {
                    address: 0,
                    reason: why.to_string(),
                }],
                chain_links: 0,
            },
        }
    }

    /// What the page cache holds of the file `which` (blocking; see
    /// [`Kernel::cached_file_async`]).
    pub fn cached_file(&self, which: &FileQuery) -> Result<FileContents, CacheError> {
        self.memory().block_on(self.cached_file_async(which))
    }

    /// What the page cache holds of the file `which`: its pages' bytes,
    /// and the pages not cached. A path not ending in ` (deleted)` is
    /// looked for in the dentry cache alone.
    pub async fn cached_file_async(&self, which: &FileQuery) -> Result<FileContents, CacheError> {
        self.cache_finder()?.contents(which).await
    }

    fn cache_finder(&self) -> Result<find::Finder<'_>, CacheError> {
        let layout = self
            .offsets
            .page_cache
            .as_ref()
            .map_err(|e| CacheError::Layout(e.to_string()))?;
        Ok(find::Finder {
            kernel: self,
            kmem: self.kernel_memory(),
            layout,
        })
    }
}
