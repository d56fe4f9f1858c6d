//! The offsets the modules' integrity is read by: each module's
//! parameters (`struct kernel_param`), the sysfs view of the modules
//! (`/sys/module`: the `module_kset`'s directory in kernfs, each entry's
//! `struct module_kobject`), and the hooks (the ftrace callbacks'
//! `struct ftrace_ops`, and how many system calls the kernel has).

use crate::linux::find::btf::{Btf, BtfError};
use crate::linux::offsets::RbLayout;

/// Offsets of a module parameter, and of the string a `string` parameter
/// keeps (`struct kparam_string`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ParamLayout {
    /// `sizeof(struct kernel_param)`: the stride of `module.kp`.
    pub(crate) size: u64,
    /// `kernel_param.name`, `.mod`, `.ops`, `.perm` (a `u16`), `.arg`.
    pub(crate) name: u64,
    pub(crate) module: u64,
    pub(crate) ops: u64,
    pub(crate) perm: u64,
    pub(crate) arg: u64,
    /// `kparam_string.maxlen` (an `unsigned int`) and `.string`.
    pub(crate) maxlen: u64,
    pub(crate) string: u64,
}

impl ParamLayout {
    /// The offsets in `btf`.
    pub fn from_btf(btf: &Btf) -> Result<ParamLayout, BtfError> {
        let kp = |m: &str| btf.member_offset("kernel_param", m);
        Ok(ParamLayout {
            size: btf.size_of("kernel_param")?,
            name: kp("name")?,
            module: kp("mod")?,
            ops: kp("ops")?,
            perm: kp("perm")?,
            arg: kp("arg")?,
            maxlen: btf.member_offset("kparam_string", "maxlen")?,
            string: btf.member_offset("kparam_string", "string")?,
        })
    }

    /// Bytes read of each parameter.
    pub(crate) fn span(&self) -> usize {
        [self.name, self.module, self.ops, self.arg]
            .iter()
            .map(|at| at + 8)
            .chain([self.perm + 2])
            .max()
            .unwrap_or(0)
            .max(self.size) as usize
    }
}

/// Offsets of the sysfs view of the modules: `/sys/module` is the
/// `module_kset`'s directory, a kernfs node whose children (a red-black
/// tree) each point at their kobject, the `kobj` of a `struct
/// module_kobject` (a loadable module's is in its `struct module`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SysfsLayout {
    /// `kset.kobj.sd`: the kset's kernfs directory.
    pub(crate) kset_dir: u64,
    /// `kernfs_node.dir.children.rb_node`: the root of its children.
    pub(crate) children: u64,
    /// `kernfs_node.rb`, `kernfs_node.priv`.
    pub(crate) node: u64,
    pub(crate) private: u64,
    pub(crate) rb: RbLayout,
    /// `module_kobject.mod`, from the `kobj` in it.
    pub(crate) module_of_kobj: u64,
    /// `module.mkobj.kobj`: a module's kobject in its `struct module`.
    pub(crate) module_kobj: u64,
    /// How a kernfs node says it is a directory; `None` where BTF lacks
    /// `kernfs_node.flags` or `KERNFS_DIR` (every entry is then
    /// taken for a kobject's directory).
    pub(crate) kind: Option<NodeKind>,
}

/// Where a kernfs node keeps its type: `kernfs_node.flags` (`size` bytes)
/// masked with `KERNFS_TYPE_MASK` is `KERNFS_DIR` (of the enum
/// `kernfs_node_type`) for a directory. Since
/// 6.12 `/sys/module` also holds a file (`compression`), whose `priv` is
/// its attribute, not a kobject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeKind {
    pub(crate) flags: u64,
    pub(crate) size: u64,
    pub(crate) mask: u64,
    pub(crate) dir: u64,
}

/// The bits of `kernfs_node.flags` that hold its type: a `#define`, so not in
/// BTF, and the same since kernfs began (3.14).
const KERNFS_TYPE_MASK: u64 = 0xf;

impl NodeKind {
    /// The offsets and values in `btf`, if it has them all; an answer a
    /// warm start did not keep is an error (the kernel is then read the
    /// slow way), not a kernel without them.
    fn from_btf(btf: &Btf) -> Result<Option<NodeKind>, BtfError> {
        let kept = |answer: Result<i64, BtfError>| match answer {
            Err(e @ BtfError::NotKept(..)) => Err(e),
            answer => Ok(answer.ok().and_then(|v| u64::try_from(v).ok())),
        };
        let signed = |r: Result<u64, BtfError>| r.map(|v| v as i64);
        let size = kept(signed(btf.member_size("kernfs_node", "flags")))?;
        let flags = kept(signed(btf.member_offset("kernfs_node", "flags")))?;
        let dir = kept(btf.enumerator("KERNFS_DIR"))?;
        Ok(match (size, flags, dir) {
            (Some(size @ (1 | 2 | 4 | 8)), Some(flags), Some(dir)) => Some(NodeKind {
                flags,
                size,
                mask: KERNFS_TYPE_MASK,
                dir,
            }),
            _ => None,
        })
    }

    /// Whether a node whose bytes are `node` (from its start) is a directory.
    pub(crate) fn is_dir(&self, node: &[u8]) -> Option<bool> {
        let at = self.flags as usize;
        let bytes = node.get(at..at + self.size as usize)?;
        let mut word = [0u8; 8];
        word[..bytes.len()].copy_from_slice(bytes);
        Some(u64::from_le_bytes(word) & self.mask == self.dir)
    }
}

impl SysfsLayout {
    /// The offsets in `btf`.
    pub fn from_btf(btf: &Btf) -> Result<SysfsLayout, BtfError> {
        let node = |m: &str| btf.member_offset("kernfs_node", m);
        let mkobj = |m: &str| btf.member_offset("module_kobject", m);
        let kobj = mkobj("kobj")?;
        let module = mkobj("mod")?;
        Ok(SysfsLayout {
            kset_dir: btf.member_offset("kset", "kobj.sd")?,
            children: node("dir.children.rb_node")?,
            node: node("rb")?,
            private: node("priv")?,
            rb: RbLayout::from_btf(btf)?,
            module_of_kobj: module
                .checked_sub(kobj)
                .ok_or_else(|| BtfError::Parse("module_kobject.mod lies before its kobj".into()))?,
            module_kobj: btf.member_offset("module", "mkobj.kobj")?,
            kind: NodeKind::from_btf(btf)?,
        })
    }

    /// Bytes read of each kernfs node: its links, its kobject pointer and
    /// its flags.
    pub(crate) fn node_span(&self) -> usize {
        let links = self.node + self.rb.left.max(self.rb.right) + 8;
        let flags = self.kind.map_or(0, |k| k.flags + k.size);
        links.max(self.private + 8).max(flags) as usize
    }
}

/// Offsets of the hooks: an ftrace callback, and how many entries the
/// system-call table has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HooksLayout {
    /// `ftrace_ops.func`, `ftrace_ops.next`; `None` in a kernel without
    /// `CONFIG_FUNCTION_TRACER`.
    pub(crate) ftrace: Option<(u64, u64)>,
    /// `NR_syscalls`: the elements of `trace_array.enter_syscall_files`
    /// (`CONFIG_FTRACE_SYSCALLS`), the one array the kernel sizes by it
    /// that BTF describes; `None` when BTF has no such member.
    pub(crate) nr_syscalls: Option<u64>,
}

impl HooksLayout {
    /// The offsets in `btf` (each a kernel may lack).
    pub fn from_btf(btf: &Btf) -> HooksLayout {
        let ops = |m: &str| btf.member_offset("ftrace_ops", m);
        HooksLayout {
            ftrace: ops("func").ok().zip(ops("next").ok()),
            nr_syscalls: btf
                .member_size("trace_array", "enter_syscall_files")
                .ok()
                .map(|bytes| bytes / 8)
                .filter(|&n| n > 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test guest's BTF cut down to what the walks ask about.
    const GUEST_BTF: &[u8] = include_bytes!("../../../fuzz/seeds/btf/debian12-6.1-walks.btf");

    #[test]
    fn a_6_1_kernel_has_every_layout_of_the_modules_integrity() {
        let btf = Btf::parse(GUEST_BTF).unwrap();
        let at = |ty: &str, path: &str| btf.member_offset(ty, path).unwrap();
        let params = ParamLayout::from_btf(&btf).unwrap();
        assert_eq!(params.size, 40);
        assert_eq!(
            (params.ops, params.arg),
            (at("kernel_param", "ops"), at("kernel_param", "arg"))
        );
        assert!(params.span() <= params.size as usize);
        let sysfs = SysfsLayout::from_btf(&btf).unwrap();
        assert_eq!(sysfs.private, at("kernfs_node", "priv"));
        // `module_kobject.mod` right after its kobject.
        assert_eq!(sysfs.module_of_kobj, btf.size_of("kobject").unwrap());
        assert_eq!(sysfs.module_kobj, at("module", "mkobj"));
        // A directory's flags are KERNFS_DIR (1) under KERNFS_TYPE_MASK (0xf).
        let kind = sysfs.kind.expect("kernfs_node.flags and KERNFS_*");
        assert_eq!(kind.flags, at("kernfs_node", "flags"));
        assert_eq!(
            (kind.flags, kind.size, kind.mask, kind.dir),
            (112, 2, 0xf, 1)
        );
        assert!(sysfs.node_span() >= (kind.flags + 2) as usize);
        let hooks = HooksLayout::from_btf(&btf);
        assert_eq!(hooks.ftrace, Some((0, 8)));
        // x86-64's NR_syscalls on 6.1 (`set_mempolicy_home_node`, 450, is
        // the last).
        assert_eq!(hooks.nr_syscalls, Some(451));
    }
}
