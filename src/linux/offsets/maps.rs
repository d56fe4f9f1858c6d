//! The offsets memory maps are read by: the `mm_struct`'s VMA tree and
//! fields, `vm_area_struct`, and what a mapped file's path is read by.

use crate::linux::find::btf::{Btf, BtfError};
use crate::linux::offsets::{MapleLayout, RbLayout};

/// How the VMAs hang off the `mm_struct`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tree {
    /// `mm->mm_mt.ma_root` (6.1 and later).
    Maple { root: u64, layout: MapleLayout },
    /// `mm->mm_rb.rb_node` (before 6.1), whose nodes are the VMAs'
    /// `vm_rb`, with `mm->mmap` and `vm_next` to check it by.
    RedBlack {
        root: u64,
        list: u64,
        next: u64,
        vm_rb: u64,
        layout: RbLayout,
    },
}

/// Offsets, from BTF, of everything the maps are read by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MapsLayout {
    pub(crate) tree: Tree,
    pub(crate) map_count: u64,
    pub(crate) start_brk: u64,
    pub(crate) brk: u64,
    pub(crate) start_stack: u64,
    pub(crate) vma_size: u64,
    pub(crate) vm_mm: u64,
    pub(crate) vm_start: u64,
    pub(crate) vm_end: u64,
    pub(crate) vm_flags: u64,
    pub(crate) vm_pgoff: u64,
    pub(crate) vm_file: u64,
    pub(crate) vm_ops: u64,
    pub(crate) vm_private_data: u64,
    /// `vm_area_struct.anon_name` and `anon_vma_name.name`, when the
    /// kernel names anonymous memory.
    pub(crate) anon_name: Option<(u64, u64)>,
    /// `vm_operations_struct.name`.
    pub(crate) ops_name: u64,
    /// `vm_special_mapping.name`.
    pub(crate) special_name: u64,
    pub(crate) paths: PathLayout,
}

impl MapsLayout {
    /// The offsets in `btf`; an error names the first type or member
    /// missing.
    pub fn from_btf(btf: &Btf) -> Result<MapsLayout, BtfError> {
        let mm = |m: &str| btf.member_offset("mm_struct", m);
        let vma = |m: &str| btf.member_offset("vm_area_struct", m);
        let tree = match mm("mm_mt") {
            Ok(mt) => Tree::Maple {
                root: mt + btf.member_offset("maple_tree", "ma_root")?,
                layout: MapleLayout::from_btf(btf)?,
            },
            Err(_) => Tree::RedBlack {
                root: mm("mm_rb")? + btf.member_offset("rb_root", "rb_node")?,
                list: mm("mmap")?,
                next: vma("vm_next")?,
                vm_rb: vma("vm_rb")?,
                layout: RbLayout::from_btf(btf)?,
            },
        };
        let anon_name = match vma("anon_name") {
            Ok(at) => Some((at, btf.member_offset("anon_vma_name", "name")?)),
            Err(_) => None,
        };
        Ok(MapsLayout {
            tree,
            map_count: mm("map_count")?,
            start_brk: mm("start_brk")?,
            brk: mm("brk")?,
            start_stack: mm("start_stack")?,
            vma_size: btf.size_of("vm_area_struct")?,
            vm_mm: vma("vm_mm")?,
            vm_start: vma("vm_start")?,
            vm_end: vma("vm_end")?,
            vm_flags: vma("vm_flags")?,
            vm_pgoff: vma("vm_pgoff")?,
            vm_file: vma("vm_file")?,
            vm_ops: vma("vm_ops")?,
            vm_private_data: vma("vm_private_data")?,
            anon_name,
            ops_name: btf.member_offset("vm_operations_struct", "name")?,
            special_name: btf.member_offset("vm_special_mapping", "name")?,
            paths: PathLayout::from_btf(btf)?,
        })
    }

    /// The span of the `mm_struct` read: from its first field used to past
    /// its last.
    pub(crate) fn mm_span(&self) -> (u64, u64) {
        let tree = match self.tree {
            Tree::Maple { root, .. } => vec![root],
            Tree::RedBlack { root, list, .. } => vec![root, list],
        };
        let all = [self.map_count, self.start_brk, self.brk, self.start_stack];
        let fields = tree.into_iter().chain(all);
        let first = fields.clone().min().unwrap_or(0);
        (first, fields.max().unwrap_or(0) + 8 - first)
    }
}

/// Offsets, from BTF, of what a path is read by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PathLayout {
    /// `file.f_path.dentry`, `file.f_path.mnt`, `file.f_inode`.
    pub(crate) file_dentry: u64,
    pub(crate) file_mnt: u64,
    pub(crate) file_inode: u64,
    pub(crate) dentry_size: u64,
    pub(crate) d_parent: u64,
    /// `dentry.d_name.len` (a `u32`) and `dentry.d_name.name`.
    pub(crate) d_name_len: u64,
    pub(crate) d_name_name: u64,
    /// `dentry.d_hash.pprev`: NULL once the dentry is unhashed (deleted).
    pub(crate) d_hash_pprev: u64,
    /// `dentry.d_op`, and `dentry_operations.d_dname` in what it points at.
    pub(crate) d_op: u64,
    pub(crate) d_dname: u64,
    /// `mount.mnt`: the `vfsmount` inside a `struct mount`.
    pub(crate) mount_vfsmount: u64,
    pub(crate) mnt_parent: u64,
    pub(crate) mnt_mountpoint: u64,
    /// `mount.mnt.mnt_root`.
    pub(crate) mnt_root: u64,
    /// `inode.i_mode` (a `u16`), `i_ino`, `i_sb`.
    pub(crate) i_mode: u64,
    pub(crate) i_ino: u64,
    pub(crate) i_sb: u64,
    /// `super_block.s_dev` (a `u32`).
    pub(crate) s_dev: u64,
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
            d_op: dentry("d_op")?,
            d_dname: btf.member_offset("dentry_operations", "d_dname")?,
            mount_vfsmount: vfsmount,
            mnt_parent: mount("mnt_parent")?,
            mnt_mountpoint: mount("mnt_mountpoint")?,
            mnt_root: vfsmount + btf.member_offset("vfsmount", "mnt_root")?,
            i_mode: btf.member_offset("inode", "i_mode")?,
            i_ino: btf.member_offset("inode", "i_ino")?,
            i_sb: btf.member_offset("inode", "i_sb")?,
            s_dev: btf.member_offset("super_block", "s_dev")?,
        })
    }
}
