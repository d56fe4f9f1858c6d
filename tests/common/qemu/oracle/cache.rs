//! The files the guest left in its page cache, as it saw them: the
//! oracle's `cache` and `cache-end` lines (format in `scripts/guest.sh`).

/// One file of `/leechio-cache`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestCachedFile {
    /// Its path (a deleted file's as its fd's readlink: `... (deleted)`).
    pub path: String,
    pub inode: u64,
    /// Its device as the kernel keeps it (`MKDEV`: major << 20 | minor),
    /// from stat's `st_dev`.
    pub device: u32,
    pub size: u64,
    pub links: u32,
    /// stat's 512-byte blocks: tmpfs counts 8 for each page it holds.
    pub blocks: u64,
    /// The SHA-256 of its bytes, in hex.
    pub sha256: String,
}

/// The lines as they are read.
#[derive(Default)]
pub struct CacheItems {
    files: Vec<GuestCachedFile>,
    end: Option<usize>,
}

impl CacheItems {
    /// One line of `kind` (`cache`, `cache-end`), without its kind.
    pub fn add(&mut self, kind: &str, rest: &str) -> Result<(), String> {
        let field = |key: &str| {
            rest.split_whitespace()
                .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
                .ok_or_else(|| format!("{kind}: no {key}="))
        };
        let number = |key: &str| {
            field(key)?
                .parse::<u64>()
                .map_err(|_| format!("{kind}: {key} is no number"))
        };
        match kind {
            "cache" => {
                let (_, path) = rest.split_once(" path=").ok_or("cache: no path=")?;
                self.files.push(GuestCachedFile {
                    path: path.to_string(),
                    inode: number("ino")?,
                    device: kernel_dev(number("dev")?),
                    size: number("size")?,
                    links: number("links")? as u32,
                    blocks: number("blocks")?,
                    sha256: field("sha256")?.to_string(),
                });
                Ok(())
            }
            "cache-end" => match self.end.replace(number("files")? as usize) {
                None => Ok(()),
                Some(_) => Err("given twice".into()),
            },
            _ => Err("unknown kind".into()),
        }
    }

    /// The files, once the count agrees (an older guest prints none).
    pub fn finish(self) -> Result<Vec<GuestCachedFile>, String> {
        match self.end {
            Some(n) if n != self.files.len() => Err(format!(
                "the guest printed {n} cache lines, {} read",
                self.files.len()
            )),
            _ => Ok(self.files),
        }
    }
}

/// The kernel's `dev_t` of a user-space `st_dev` (`new_encode_dev`'s
/// inverse).
fn kernel_dev(dev: u64) -> u32 {
    let major = (dev >> 8) & 0xfff;
    let minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
    (major << 20 | minor) as u32
}

/// The SHA-256 of `bytes` in hex, by the host's `sha256sum` (coreutils).
pub fn sha256_hex(bytes: &[u8]) -> String {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha256sum (coreutils)");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(bytes).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    text.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}
