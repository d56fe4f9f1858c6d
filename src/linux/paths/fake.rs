//! Made-up path structures for the walks' unit tests: BTF of `file`,
//! `path`, `dentry`, `dentry_operations`, `mount`, `vfsmount`, `inode`
//! and `super_block` with members where no kernel has them, and their
//! objects built in made-up memory.

use crate::linux::fake_memory::FakeMemory;
use crate::linux::find::btf::builder::BtfBuilder;

// The made-up layout: offsets no kernel uses.
pub(crate) const FILE_SIZE: u32 = 128;
pub(crate) const F_PATH: u64 = 16;
pub(crate) const F_INODE: u64 = 40;
pub(crate) const DENTRY_SIZE: u32 = 192;
pub(crate) const D_HASH: u64 = 0;
pub(crate) const D_PARENT: u64 = 24;
pub(crate) const D_NAME: u64 = 32;
pub(crate) const D_INAME: u64 = 96;
/// Room for a name inside the dentry.
pub(crate) const D_INAME_LEN: usize = 32;
pub(crate) const D_OP: u64 = 136;
pub(crate) const D_DNAME: u64 = 72;
pub(crate) const MOUNT_SIZE: u32 = 128;
pub(crate) const MNT_PARENT: u64 = 8;
pub(crate) const MNT_MOUNTPOINT: u64 = 24;
pub(crate) const MNT: u64 = 48;
pub(crate) const MNT_ROOT: u64 = 8;
pub(crate) const INODE_SIZE: u32 = 128;
pub(crate) const I_MODE: u64 = 0;
pub(crate) const I_SB: u64 = 8;
pub(crate) const I_INO: u64 = 64;
pub(crate) const S_DEV: u64 = 16;

/// Adds the path structures to `b`, `struct file` with `file`'s members
/// beside its path and inode.
pub(crate) fn path_types(b: &mut BtfBuilder, file: &[(&str, u64)]) {
    let mut members = vec![("f_path", F_PATH), ("f_inode", F_INODE)];
    members.extend_from_slice(file);
    b.structure("file", FILE_SIZE, &members)
        .structure("path", 16, &[("mnt", 0), ("dentry", 8)])
        .structure(
            "dentry",
            DENTRY_SIZE,
            &[
                ("d_hash", D_HASH),
                ("d_parent", D_PARENT),
                ("d_name", D_NAME),
                ("d_iname", D_INAME),
                ("d_op", D_OP),
            ],
        )
        .structure("dentry_operations", 128, &[("d_dname", D_DNAME)])
        .structure("hlist_bl_node", 16, &[("next", 0), ("pprev", 8)])
        .structure("qstr", 16, &[("len", 4), ("name", 8)])
        .structure(
            "mount",
            MOUNT_SIZE,
            &[
                ("mnt_parent", MNT_PARENT),
                ("mnt_mountpoint", MNT_MOUNTPOINT),
                ("mnt", MNT),
            ],
        )
        .structure("vfsmount", 32, &[("mnt_root", MNT_ROOT)])
        .structure(
            "inode",
            INODE_SIZE,
            &[("i_mode", I_MODE), ("i_sb", I_SB), ("i_ino", I_INO)],
        )
        .structure("super_block", 64, &[("s_dev", S_DEV)]);
}

/// Builders of path objects in made-up memory.
pub(crate) trait PathObjects {
    /// A hashed dentry named `name` under `parent` (`None`: its own
    /// parent, a root); a name longer than `d_iname` lies outside it.
    fn dentry(&mut self, name: &str, parent: Option<u64>) -> u64;
    /// Marks `dentry` unhashed (deleted).
    fn unhash(&mut self, dentry: u64);
    /// Gives `dentry` the operations at `ops`.
    fn set_ops(&mut self, dentry: u64, ops: u64);
    /// A `dentry_operations` whose `d_dname` is `function`.
    fn ops(&mut self, function: u64) -> u64;
    /// A mount of `root` on `mountpoint` in `parent` (`None`: its own
    /// parent, the namespace's root).
    fn mount(&mut self, parent: Option<u64>, mountpoint: u64, root: u64) -> u64;
    /// An inode numbered `ino` of `mode` on a super block of device `dev`.
    fn inode(&mut self, ino: u64, mode: u16, dev: u32) -> u64;
    /// A `struct file` of `dentry` in `mount`, with `inode`.
    fn file(&mut self, dentry: u64, mount: u64, inode: u64) -> u64;
}

impl PathObjects for FakeMemory {
    fn dentry(&mut self, name: &str, parent: Option<u64>) -> u64 {
        let d = self.alloc(u64::from(DENTRY_SIZE));
        self.put(d + D_PARENT, parent.unwrap_or(d));
        self.put(d + D_HASH + 8, d + 0x10);
        self.put(d + D_NAME, (name.len() as u64) << 32);
        let at = match name.len() < D_INAME_LEN {
            true => {
                self.put_bytes(d + D_INAME, name.as_bytes());
                d + D_INAME
            }
            false => self.string(name),
        };
        self.put(d + D_NAME + 8, at);
        d
    }

    fn unhash(&mut self, dentry: u64) {
        self.put(dentry + D_HASH + 8, 0);
    }

    fn set_ops(&mut self, dentry: u64, ops: u64) {
        self.put(dentry + D_OP, ops);
    }

    fn ops(&mut self, function: u64) -> u64 {
        let ops = self.alloc(128);
        self.put(ops + D_DNAME, function);
        ops
    }

    fn mount(&mut self, parent: Option<u64>, mountpoint: u64, root: u64) -> u64 {
        let m = self.alloc(u64::from(MOUNT_SIZE));
        self.put(m + MNT_PARENT, parent.unwrap_or(m));
        self.put(m + MNT_MOUNTPOINT, mountpoint);
        self.put(m + MNT + MNT_ROOT, root);
        m
    }

    fn inode(&mut self, ino: u64, mode: u16, dev: u32) -> u64 {
        let sb = self.alloc(64);
        self.put_u32(sb + S_DEV, dev);
        let inode = self.alloc(u64::from(INODE_SIZE));
        self.put_bytes(inode + I_MODE, &mode.to_le_bytes());
        self.put(inode + I_SB, sb);
        self.put(inode + I_INO, ino);
        inode
    }

    fn file(&mut self, dentry: u64, mount: u64, inode: u64) -> u64 {
        let f = self.alloc(u64::from(FILE_SIZE));
        self.put(f + F_PATH, mount + MNT);
        self.put(f + F_PATH + 8, dentry);
        self.put(f + F_INODE, inode);
        f
    }
}
