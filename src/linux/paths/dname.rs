//! The names of files that have no path: `d_path` names a file whose
//! dentry's operations have a `d_dname` by calling that function (unless
//! the dentry is the root of its mount), which pseudo file systems use
//! for sockets (`socket:[INODE]`), pipes (`pipe:[INODE]`), anonymous
//! inodes (`anon_inode:[eventfd]`) and files made with no directory, such
//! as a memfd (`/memfd:NAME (deleted)`). Which function a dentry has is
//! told by its address, found in kallsyms; each builds its name as below.

/// What a `d_dname` function the walk knows gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dname {
    /// `sockfs_dname`: `socket:[INODE]`.
    Socket,
    /// `pipefs_dname`: `pipe:[INODE]`.
    Pipe,
    /// `anon_inodefs_dname`: `anon_inode:` and the dentry's name.
    AnonInode,
    /// `simple_dname`: `/`, the dentry's name and ` (deleted)`.
    Simple,
    /// `pidfs_dname` (6.9 and later): `anon_inode:[pidfd]`.
    Pidfd,
    /// `ns_dname`: the namespace kind's name and its inode, which are not
    /// read.
    Namespace,
    /// `dmabuffs_dname`: the buffer's own name, which is not read.
    DmaBuf,
}

/// The kernel's `d_dname` functions, by symbol.
pub(crate) const SYMBOLS: [&str; 7] = [
    "sockfs_dname",
    "pipefs_dname",
    "anon_inodefs_dname",
    "simple_dname",
    "pidfs_dname",
    "ns_dname",
    "dmabuffs_dname",
];

/// What each of [`SYMBOLS`] gives, in its order.
const KINDS: [Dname; 7] = [
    Dname::Socket,
    Dname::Pipe,
    Dname::AnonInode,
    Dname::Simple,
    Dname::Pidfd,
    Dname::Namespace,
    Dname::DmaBuf,
];

/// Where the kernel's `d_dname` functions are: the address of each of
/// [`SYMBOLS`] the kernel has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Dnames([Option<u64>; 7]);

impl Dnames {
    /// The functions `symbol` locates.
    pub fn new(symbol: impl Fn(&str) -> Option<u64>) -> Dnames {
        Dnames(SYMBOLS.map(symbol))
    }

    fn which(&self, function: u64) -> Option<Dname> {
        let at = self.0.iter().position(|&f| f == Some(function))?;
        Some(KINDS[at])
    }

    /// The name the `d_dname` function at `function` gives a dentry named
    /// `name` whose inode is number `inode`; why not, for a function the
    /// walk does not know or whose name needs more than was read.
    pub fn name(&self, function: u64, name: &[u8], inode: u64) -> Result<String, String> {
        let name = String::from_utf8_lossy(name);
        match self.which(function) {
            Some(Dname::Socket) => Ok(format!("socket:[{inode}]")),
            Some(Dname::Pipe) => Ok(format!("pipe:[{inode}]")),
            Some(Dname::AnonInode) => Ok(format!("anon_inode:{name}")),
            Some(Dname::Simple) => Ok(format!("/{name} (deleted)")),
            Some(Dname::Pidfd) => Ok("anon_inode:[pidfd]".into()),
            Some(Dname::Namespace) => Err(format!(
                "a namespace (inode {inode}), named by ns_dname from its kind, which is not read"
            )),
            Some(Dname::DmaBuf) => Err(format!(
                "a DMA buffer ({name}), named by dmabuffs_dname from the buffer, which is not read"
            )),
            None => Err(format!(
                "named by the kernel's d_dname function at {function:#x}, which is none of {}",
                SYMBOLS.join(", ")
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_function_names_as_the_kernels_does() {
        let at = |name: &str| {
            SYMBOLS
                .iter()
                .position(|s| *s == name)
                .map(|i| 0x1000 * i as u64 + 0x1000)
        };
        let dnames = Dnames::new(|s| (s != "pidfs_dname").then(|| at(s)).flatten());
        let name = |f: &str| dnames.name(at(f).unwrap(), b"[eventfd]", 42);
        assert_eq!(name("sockfs_dname").unwrap(), "socket:[42]");
        assert_eq!(name("pipefs_dname").unwrap(), "pipe:[42]");
        assert_eq!(name("anon_inodefs_dname").unwrap(), "anon_inode:[eventfd]");
        assert_eq!(name("simple_dname").unwrap(), "/[eventfd] (deleted)");
        assert!(name("ns_dname").unwrap_err().contains("ns_dname"));
        // A kernel without the symbol: its function is unknown.
        let why = name("pidfs_dname").unwrap_err();
        assert!(
            why.starts_with(
                "named by the kernel's d_dname function at 0x5000, which is none of sockfs_dname"
            ),
            "{why}"
        );
        let with_pidfs = Dnames::new(at);
        assert_eq!(
            with_pidfs.name(0x5000, b"", 1).unwrap(),
            "anon_inode:[pidfd]"
        );
    }
}
