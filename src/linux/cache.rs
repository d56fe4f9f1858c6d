//! What a search learned about a kernel, kept in a small file under the
//! user's cache folder, keyed by the kernel's banner (which names its
//! build), so that the next run skips the search. Nothing in it is
//! trusted: every value is checked against memory again before use.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// Kernels remembered; the oldest goes first.
const MAX_ENTRIES: usize = 8;
/// Largest cache file read (a few KiB per kernel).
const MAX_FILE: u64 = 1 << 20;
/// The file's name in the cache folder.
const FILE_NAME: &str = "linux-kernels.json";

/// Where the cache is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CacheLocation {
    /// `$XDG_CACHE_HOME/leechio/`, else `~/.cache/leechio/`.
    #[default]
    User,
    /// This folder.
    Folder(PathBuf),
    /// No cache: neither read nor written.
    Off,
}

impl CacheLocation {
    /// The cache file, or `None` when off or no cache folder is known.
    pub fn file(&self) -> Option<PathBuf> {
        let folder = match self {
            CacheLocation::Off => return None,
            CacheLocation::Folder(f) => f.clone(),
            CacheLocation::User => std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))?
                .join("leechio"),
        };
        Some(folder.join(FILE_NAME))
    }
}

/// One kernel as a run found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `linux_banner`, the key.
    pub banner: String,
    /// The kernel's top-level page table.
    pub dtb: u64,
    /// `_text`.
    pub virtual_base: u64,
    /// Physical address of `_text`.
    pub physical_base: u64,
    /// Where its BTF starts (virtual) and how long it is; `None` when it
    /// came from a file.
    pub btf: Option<(u64, u64)>,
    /// Symbol addresses.
    pub symbols: BTreeMap<String, u64>,
    /// The names the search looked for: an entry made when other names
    /// were wanted is searched again, so that a symbol added since is not
    /// taken for one the kernel lacks.
    pub searched: Vec<String>,
}

fn hex(v: u64) -> Value {
    Value::String(format!("{v:#x}"))
}

fn parse_hex(v: &Value) -> Option<u64> {
    u64::from_str_radix(v.as_str()?.strip_prefix("0x")?, 16).ok()
}

impl Entry {
    fn to_json(&self) -> Value {
        let symbols: serde_json::Map<String, Value> = self
            .symbols
            .iter()
            .map(|(k, v)| (k.clone(), hex(*v)))
            .collect();
        json!({
            "banner": self.banner,
            "dtb": hex(self.dtb),
            "virtual_base": hex(self.virtual_base),
            "physical_base": hex(self.physical_base),
            "btf": self.btf.map(|(at, len)| json!([hex(at), hex(len)])),
            "symbols": symbols,
            "searched": self.searched,
        })
    }

    fn from_json(v: &Value) -> Option<Entry> {
        let btf = match &v["btf"] {
            Value::Null => None,
            Value::Array(a) if a.len() == 2 => Some((parse_hex(&a[0])?, parse_hex(&a[1])?)),
            _ => return None,
        };
        let symbols = v["symbols"]
            .as_object()?
            .iter()
            .map(|(k, v)| Some((k.clone(), parse_hex(v)?)))
            .collect::<Option<_>>()?;
        let searched = match &v["searched"] {
            Value::Array(names) => names
                .iter()
                .map(|n| n.as_str().map(str::to_string))
                .collect::<Option<_>>()?,
            _ => Vec::new(),
        };
        Some(Entry {
            searched,
            banner: v["banner"].as_str()?.to_string(),
            dtb: parse_hex(&v["dtb"])?,
            virtual_base: parse_hex(&v["virtual_base"])?,
            physical_base: parse_hex(&v["physical_base"])?,
            btf,
            symbols,
        })
    }
}

/// The entries in `file`; an unreadable or malformed file is no entries
/// (it is rewritten on the next save), and so is a malformed entry.
pub fn load(file: &Path) -> Vec<Entry> {
    let ok = std::fs::metadata(file).is_ok_and(|m| m.is_file() && m.len() <= MAX_FILE);
    let text = if ok { std::fs::read(file).ok() } else { None };
    let Some(Value::Array(entries)) = text.and_then(|t| serde_json::from_slice(&t).ok()) else {
        return Vec::new();
    };
    entries.iter().filter_map(Entry::from_json).collect()
}

/// Puts `entry` first in `file` (replacing one of the same banner), keeps
/// the newest few, and writes it through a temporary file and a rename, so
/// that a reader never sees half a file.
pub fn save(file: &Path, entry: &Entry) -> std::io::Result<()> {
    let mut entries = load(file);
    entries.retain(|e| e.banner != entry.banner);
    entries.insert(0, entry.clone());
    entries.truncate(MAX_ENTRIES);
    let folder = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(folder)?;
    let text = Value::Array(entries.iter().map(Entry::to_json).collect());
    let tmp = folder.join(format!(".{FILE_NAME}.{}", std::process::id()));
    std::fs::write(&tmp, serde_json::to_vec_pretty(&text)?)?;
    std::fs::rename(&tmp, file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(banner: &str) -> Entry {
        Entry {
            banner: banner.into(),
            dtb: 0x2a10000,
            virtual_base: 0xffff_ffff_8100_0000,
            physical_base: 0x100_0000,
            btf: Some((0xffff_ffff_824c_1b88, 0x42_1234)),
            symbols: [("init_task".to_string(), 0xffff_ffff_82a1_aa40)].into(),
            searched: vec!["init_task".into(), "init_pid_ns".into()],
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: files
    fn entries_round_trip_newest_first_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let file = CacheLocation::Folder(dir.path().join("sub"))
            .file()
            .unwrap();
        assert!(load(&file).is_empty());
        for i in 0..10 {
            save(&file, &entry(&format!("Linux version {i}"))).unwrap();
        }
        save(&file, &entry("Linux version 3")).unwrap();
        let loaded = load(&file);
        assert_eq!(loaded.len(), MAX_ENTRIES);
        assert_eq!(loaded[0], entry("Linux version 3"));
        assert_eq!(loaded[1].banner, "Linux version 9");
        assert_eq!(
            loaded
                .iter()
                .filter(|e| e.banner == "Linux version 3")
                .count(),
            1
        );
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: files
    fn a_damaged_file_is_no_entries() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(FILE_NAME);
        std::fs::write(&file, b"[{\"banner\": 1}, not json").unwrap();
        assert!(load(&file).is_empty());
        std::fs::write(&file, b"[{\"banner\": \"x\", \"dtb\": \"12\"}]").unwrap();
        assert!(load(&file).is_empty());
        save(&file, &entry("Linux version 1")).unwrap();
        assert_eq!(load(&file), vec![entry("Linux version 1")]);
        assert_eq!(CacheLocation::Off.file(), None);
    }
}
