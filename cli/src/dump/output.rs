//! The dump's files: outputs it refuses (its own source, pipes and
//! devices), the one it leaves, and the list of failed ranges beside it.

use super::*;

/// A regular file this process has open: device and inode, and a name.
#[derive(Clone, PartialEq, Eq)]
pub struct OpenFile {
    dev: u64,
    ino: u64,
    path: PathBuf,
}

/// The regular files this process has open (from `/proc/self/fd`).
/// Compared before and after opening the device, they are the files the
/// device reads, however its device string names them.
pub fn open_files() -> Vec<OpenFile> {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    fds.flatten()
        .filter_map(|fd| {
            // Follows the link to the file itself (even a deleted one).
            let meta = std::fs::metadata(fd.path()).ok()?;
            meta.is_file().then(|| OpenFile {
                dev: meta.dev(),
                ino: meta.ino(),
                path: std::fs::read_link(fd.path()).unwrap_or_else(|_| fd.path()),
            })
        })
        .collect()
}

/// Refuses an output that is the memory being dumped: creating it would
/// truncate the device's image (or a guest's RAM file) before a byte is
/// read. Compares device and inode, so symlinks, hard links and other
/// spellings of the path are caught; checks the `.failed` list beside the
/// output too, which is created as well.
pub(super) fn refuse_own_source(
    device: &str,
    sources: &[OpenFile],
    output: &Path,
) -> Result<(), Failure> {
    let mut sources = sources.to_vec();
    if let Some(path) = leechio::backend::leechcore::device_file(device) {
        if let Ok(meta) = std::fs::metadata(&path) {
            sources.push(OpenFile {
                dev: meta.dev(),
                ino: meta.ino(),
                path,
            });
        }
    }
    for out in [output.to_path_buf(), failed_list_path(output)] {
        // An output that does not exist yet cannot be the source.
        let Ok(meta) = std::fs::metadata(&out) else {
            continue;
        };
        if let Some(s) = sources
            .iter()
            .find(|s| (s.dev, s.ino) == (meta.dev(), meta.ino()))
        {
            return Err(Failure(format!(
                "refusing to write {}: it is {}, the memory this device reads; \
                 writing it would destroy the image before it is read (choose another -o)",
                out.display(),
                s.path.display()
            )));
        }
    }
    Ok(())
}

/// Refuses an output (or its `.failed` list) that exists and is not a
/// regular file: a dump seeks in its file and sizes it, which a pipe or a
/// device cannot take, and a device node must never be replaced.
pub(super) fn refuse_non_file(output: &Path) -> Result<(), Failure> {
    for out in [output.to_path_buf(), failed_list_path(output)] {
        let Ok(meta) = std::fs::metadata(&out) else {
            continue;
        };
        let Some(kind) = leechio::user_file::non_regular_kind(meta.file_type()) else {
            continue;
        };
        return Err(Failure(format!(
            "refusing to write {}: it is {kind}, and a dump writes a regular file \
             (it seeks and sizes it); choose a file for -o",
            out.display()
        )));
    }
    Ok(())
}

/// The error for a dump too large to be a file.
pub(super) fn too_large(output: &Path, size: Option<u64>) -> Failure {
    let size = size.map_or("more than 16 EiB".into(), |n| {
        format!("{n:#x} bytes ({})", human_size(n))
    });
    Failure(format!(
        "{} would be {size}, more than a file can hold (8 EiB); narrow --range",
        output.display()
    ))
}

pub(super) fn failed_list_path(output: &std::path::Path) -> PathBuf {
    let mut name = output.as_os_str().to_owned();
    name.push(".failed");
    PathBuf::from(name)
}

/// The ranges the `.failed` list names: those whose reads `failed`, and
/// the parts of a process's VMAs `left_out`, each with its reason, in
/// address order, neighbours with one reason merged.
pub(super) fn listed_ranges(
    failed: &[(u64, u64, String)],
    left_out: &[process::LeftOut],
) -> Vec<(u64, u64, String)> {
    let mut all: Vec<(u64, u64, String)> = failed
        .iter()
        .cloned()
        .chain(left_out.iter().map(|l| (l.addr, l.len, l.why.to_string())))
        .collect();
    all.sort_by_key(|f| f.0);
    let mut merged: Vec<(u64, u64, String)> = Vec::with_capacity(all.len());
    for f in all {
        match merged.last_mut() {
            Some(last) if last.0.checked_add(last.1) == Some(f.0) && last.2 == f.2 => last.1 += f.1,
            _ => merged.push(f),
        }
    }
    merged
}

/// Writes the list of failed ranges into `file` (opened and emptied when
/// the dump started).
pub(super) fn write_failed_list(file: &File, failed: &[(u64, u64, String)]) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(file);
    writeln!(
        out,
        "# ranges not in the dump, failed or left out (no ELF segment shows them; zeros in a raw dump): start end reason"
    )?;
    for (start, len, why) in failed {
        let end = u128::from(*start) + u128::from(*len);
        writeln!(out, "{start:#x} {end:#x} {why}")?;
    }
    out.flush()
}

/// Writes `len` zeros at the start of `file`, a MiB at a time.
pub(super) fn write_zeros(file: &File, len: u64) -> std::io::Result<()> {
    let zeros = vec![0u8; (len.min(1 << 20)) as usize];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(zeros.len() as u64);
        file.write_all_at(&zeros[..n as usize], at)?;
        at += n;
    }
    Ok(())
}

/// A file a dump writes, opened without truncating it, so a dump refused
/// after opening it leaves what was there untouched.
pub(super) struct OutputFile {
    file: File,
    path: PathBuf,
    /// Whether this dump created it (and so removes it when refused).
    created: bool,
}

impl OutputFile {
    /// Opens `path` for writing, creating it if need be, keeping its content.
    pub(super) fn open(path: &Path) -> Result<OutputFile, Failure> {
        let cannot = |e: std::io::Error| Failure(format!("cannot write {}: {e}", path.display()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true);
        // `create_new` first, to know whether the file is this dump's own.
        match options.clone().create_new(true).open(path) {
            Ok(file) => Ok(OutputFile {
                file,
                path: path.to_path_buf(),
                created: true,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(OutputFile {
                file: options.open(path).map_err(cannot)?,
                path: path.to_path_buf(),
                created: false,
            }),
            Err(e) => Err(cannot(e)),
        }
    }

    /// Whether the file system lets the file be `size` bytes long: grows it
    /// (sparsely) when it is shorter. A failed `ftruncate` changes nothing,
    /// so a refused size leaves an existing file as it was.
    pub(super) fn check_size(&self, size: u64) -> std::io::Result<()> {
        if size > self.file.metadata()?.len() {
            self.file.set_len(size)?;
        }
        Ok(())
    }

    /// Whether `self` and `other` are one file (one device and inode).
    pub(super) fn is_same_file(&self, other: &OutputFile) -> bool {
        match (self.file.metadata(), other.file.metadata()) {
            (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
            _ => false,
        }
    }

    /// Gives the file up when the dump is refused: removes it if this dump
    /// created it, leaves it untouched otherwise.
    pub(super) fn abandon(self) {
        if self.created {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// Empties the file for the dump: past here its old content is gone.
    pub(super) fn truncate(self) -> Result<File, Failure> {
        self.file
            .set_len(0)
            .map_err(|e| Failure(format!("cannot write {}: {e}", self.path.display())))?;
        Ok(self.file)
    }
}
