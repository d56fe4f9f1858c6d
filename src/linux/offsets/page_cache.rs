//! The offsets the page cache is read by: the dentry hash table's chains
//! (`dentry.d_hash`), each inode's size, link count and mapping, the
//! mapping's page array (`address_space.i_pages`, an xarray), the super
//! block's mounts, and the size of `struct page`, whose array (`vmemmap`)
//! turns a page pointer into its physical frame.

use crate::linux::find::btf::{Btf, BtfError};
use crate::linux::offsets::{PathLayout, XaLayout};

/// Offsets, from BTF, of everything the page cache is read by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CacheLayout {
    /// `dentry.d_hash.next` (an `hlist_bl_node`: the chain's next node).
    pub(crate) d_hash: u64,
    /// `dentry.d_inode` and `dentry.d_sb`.
    pub(crate) d_inode: u64,
    pub(crate) d_sb: u64,
    /// `inode.i_size` (an `i64`), `__i_nlink` (a `u32`), `i_mapping`, and
    /// `i_data` (its own `address_space`, which `i_mapping` points at but
    /// for block devices and a few file systems).
    pub(crate) i_size: u64,
    pub(crate) i_nlink: u64,
    pub(crate) i_mapping: u64,
    pub(crate) i_data: u64,
    /// `address_space.host`, `i_pages.xa_head` and `nrpages`.
    pub(crate) a_host: u64,
    pub(crate) a_pages: u64,
    pub(crate) a_head: u64,
    pub(crate) a_nrpages: u64,
    /// `super_block.s_mounts` (a `list_head` of `mount.mnt_instance`),
    /// and `s_id` (the file system's name for itself, a char array).
    pub(crate) s_mounts: u64,
    pub(crate) s_id: (u64, u64),
    pub(crate) mnt_instance: u64,
    /// `sizeof(struct page)`: a page pointer's frame is its distance
    /// from `vmemmap` in these (a folio is its first page).
    pub(crate) page_size: u64,
    pub(crate) xa: XaLayout,
    pub(crate) paths: PathLayout,
}

impl CacheLayout {
    /// The offsets in `btf`; an error names the first type or member
    /// missing.
    pub fn from_btf(btf: &Btf) -> Result<CacheLayout, BtfError> {
        let inode = |m: &str| btf.member_offset("inode", m);
        let space = |m: &str| btf.member_offset("address_space", m);
        let pages = space("i_pages")?;
        let page_size = btf.size_of("page")?;
        if !(32..=256).contains(&page_size) {
            return Err(BtfError::Parse(format!(
                "BTF gives struct page {page_size} bytes, not 32 to 256"
            )));
        }
        Ok(CacheLayout {
            d_hash: btf.member_offset("dentry", "d_hash")?
                + btf.member_offset("hlist_bl_node", "next")?,
            d_inode: btf.member_offset("dentry", "d_inode")?,
            d_sb: btf.member_offset("dentry", "d_sb")?,
            i_size: inode("i_size")?,
            i_nlink: inode("__i_nlink")?,
            i_mapping: inode("i_mapping")?,
            i_data: inode("i_data")?,
            a_host: space("host")?,
            a_pages: pages,
            a_head: pages + btf.member_offset("xarray", "xa_head")?,
            a_nrpages: space("nrpages")?,
            s_mounts: btf.member_offset("super_block", "s_mounts")?,
            s_id: (
                btf.member_offset("super_block", "s_id")?,
                btf.member_size("super_block", "s_id")?.min(64),
            ),
            mnt_instance: btf.member_offset("mount", "mnt_instance")?,
            page_size,
            xa: XaLayout::from_btf(btf)?,
            paths: PathLayout::from_btf(btf)?,
        })
    }

    /// The span of an inode read: its mode, number, super block, size,
    /// links and mapping, and its own mapping's host, page array and page
    /// count.
    pub(crate) fn inode_span(&self) -> (u64, u64) {
        let p = &self.paths;
        crate::linux::offsets::span(&[
            (p.i_mode, 2),
            (p.i_ino, 8),
            (p.i_sb, 8),
            (self.i_size, 8),
            (self.i_nlink, 4),
            (self.i_mapping, 8),
            (self.i_data + self.a_host, 8),
            (self.i_data + self.a_head, 8),
            (self.i_data + self.a_nrpages, 8),
        ])
    }

    /// The span of a super block read: its device, mounts and name.
    pub(crate) fn super_span(&self) -> (u64, u64) {
        crate::linux::offsets::span(&[
            (self.paths.s_dev, 4),
            (self.s_mounts, 8),
            (self.s_id.0, self.s_id.1),
        ])
    }
}
