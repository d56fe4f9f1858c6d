//! What a search learned about a kernel, kept in a small file under the
//! user's cache folder, keyed by the kernel's banner and build ID (the
//! linker's hash of the whole kernel, so of its types too), so that the
//! next run skips the search, and, with the answers the walks got from
//! BTF, skips reading BTF. Nothing in it is trusted: every value is
//! checked against memory, or against the caps BTF's own answers meet,
//! before use.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::btf::{Answer, BtfError, Query, MAX_ANSWERS, MAX_NAME};
use super::image::Segment;
use crate::vm::Paging;

/// Kernels remembered; the oldest goes first.
const MAX_ENTRIES: usize = 8;
/// Largest cache file read (a few KiB per kernel).
///
/// With the answers to the walks' BTF questions, an entry is about 5 KiB.
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
    /// The paging mode its tables were found in.
    pub paging: Paging,
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
    /// What a warm start checks in one batch and answers the walks from;
    /// `None` when the kernel lacks something it needs (a build ID,
    /// `page_offset_base`, BTF in memory).
    pub warm: Option<Warm>,
}

/// What a warm start needs beyond the search's results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warm {
    /// The GNU build-ID note: its address and its bytes.
    pub build_id: (u64, Vec<u8>),
    /// The top table's entry 511, which maps the image.
    pub top_entry: u64,
    /// `page_offset_base`'s value.
    pub direct_map_base: u64,
    /// The image's mapping, merged by permissions.
    pub segments: Vec<Segment>,
    /// `init_task.thread_pid` (`init_struct_pid`, in the image).
    pub init_thread_pid: u64,
    /// How many types the BTF has.
    pub type_count: usize,
    /// Every question the walks ask of BTF, and its answer.
    pub answers: BTreeMap<Query, Answer>,
}

/// Longest build-ID note kept (a SHA-1 one is 36 bytes).
pub const MAX_NOTE: usize = 96;
/// Most segments an image is mapped in (Debian's has 5).
const MAX_SEGMENTS: usize = 64;

fn hex(v: u64) -> Value {
    Value::String(format!("{v:#x}"))
}

fn parse_hex(v: &Value) -> Option<u64> {
    u64::from_str_radix(v.as_str()?.strip_prefix("0x")?, 16).ok()
}

fn bytes_hex(bytes: &[u8]) -> Value {
    Value::String(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn parse_bytes_hex(v: &Value, max: usize) -> Option<Vec<u8>> {
    let s = v.as_str()?;
    if s.len() % 2 != 0 || s.len() > 2 * max {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl Warm {
    fn to_json(&self) -> Value {
        let segments: Vec<Value> = self
            .segments
            .iter()
            .map(|s| {
                let perms = format!(
                    "r{}{}",
                    if s.writable { 'w' } else { '-' },
                    if s.executable { 'x' } else { '-' }
                );
                json!([hex(s.va), hex(s.pa), hex(s.len), perms])
            })
            .collect();
        let answers: serde_json::Map<String, Value> = self
            .answers
            .iter()
            .map(|(q, a)| {
                let v = match a {
                    Ok(v) => json!(v),
                    Err(e) => json!({ "error": e.to_string() }),
                };
                (q.to_string(), v)
            })
            .collect();
        json!({
            "build_id": [hex(self.build_id.0), bytes_hex(&self.build_id.1)],
            "top_entry": hex(self.top_entry),
            "direct_map_base": hex(self.direct_map_base),
            "segments": segments,
            "init_thread_pid": hex(self.init_thread_pid),
            "types": self.type_count,
            "answers": answers,
        })
    }

    fn from_json(v: &Value) -> Option<Warm> {
        let build_id = match &v["build_id"] {
            Value::Array(a) if a.len() == 2 => {
                (parse_hex(&a[0])?, parse_bytes_hex(&a[1], MAX_NOTE)?)
            }
            _ => return None,
        };
        let segments = v["segments"]
            .as_array()
            .filter(|s| s.len() <= MAX_SEGMENTS)?
            .iter()
            .map(|s| {
                let (perms, a) = (s.get(3)?.as_str()?, s.as_array()?);
                Some(Segment {
                    va: parse_hex(&a[0])?,
                    pa: parse_hex(&a[1])?,
                    len: parse_hex(&a[2])?,
                    writable: perms.get(1..2)? == "w",
                    executable: perms.get(2..3)? == "x",
                })
            })
            .collect::<Option<_>>()?;
        let answers = v["answers"]
            .as_object()
            .filter(|a| a.len() <= MAX_ANSWERS)?;
        let answers = answers
            .iter()
            .map(|(q, a)| {
                let answer = match a {
                    Value::Number(n) => Ok(n.as_i64()?),
                    _ => {
                        let e = a["error"].as_str().filter(|e| e.len() <= 4 * MAX_NAME)?;
                        Err(BtfError::Recorded(e.to_string()))
                    }
                };
                Some((Query::parse(q)?, answer))
            })
            .collect::<Option<_>>()?;
        Some(Warm {
            build_id,
            top_entry: parse_hex(&v["top_entry"])?,
            direct_map_base: parse_hex(&v["direct_map_base"])?,
            segments,
            init_thread_pid: parse_hex(&v["init_thread_pid"])?,
            type_count: usize::try_from(v["types"].as_u64()?).ok()?,
            answers,
        })
    }
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
            "paging": self.paging.levels(),
            "virtual_base": hex(self.virtual_base),
            "physical_base": hex(self.physical_base),
            "btf": self.btf.map(|(at, len)| json!([hex(at), hex(len)])),
            "symbols": symbols,
            "searched": self.searched,
            "warm": self.warm.as_ref().map(Warm::to_json),
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
        // An entry whose warm part is damaged is still an entry: its
        // kernel is checked the slow way.
        let warm = Warm::from_json(&v["warm"]);
        Some(Entry {
            warm,
            searched,
            banner: v["banner"].as_str()?.to_string(),
            dtb: parse_hex(&v["dtb"])?,
            paging: Paging::from_levels(u8::try_from(v["paging"].as_u64()?).ok()?)?,
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
            paging: Paging::FiveLevel,
            virtual_base: 0xffff_ffff_8100_0000,
            physical_base: 0x100_0000,
            btf: Some((0xffff_ffff_824c_1b88, 0x42_1234)),
            symbols: [("init_task".to_string(), 0xffff_ffff_82a1_aa40)].into(),
            searched: vec!["init_task".into(), "init_pid_ns".into()],
            warm: Some(Warm {
                build_id: (
                    0xffff_ffff_824c_1990,
                    vec![4, 0, 0, 0, 0x14, 0, 0, 0, 3, 0, 0, 0],
                ),
                top_entry: 0x2a15067,
                direct_map_base: 0xffff_8880_0000_0000,
                segments: vec![Segment {
                    va: 0xffff_ffff_8100_0000,
                    pa: 0x100_0000,
                    len: 0x20_0000,
                    writable: false,
                    executable: true,
                }],
                init_thread_pid: 0xffff_ffff_82a1_0000,
                type_count: 100_750,
                answers: [
                    (Query::Offset("task_struct".into(), "comm".into()), Ok(2976)),
                    (Query::Enum("PIDTYPE_PID".into()), Ok(0)),
                    (
                        Query::Offset("task_struct".into(), "__state".into()),
                        Err(BtfError::Recorded(
                            "BTF: task_struct has no member __state: no member __state".into(),
                        )),
                    ),
                ]
                .into(),
            }),
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
        // A damaged warm part: the entry without it.
        let text = std::fs::read_to_string(&file).unwrap();
        for (from, to) in [
            ("\"offset task_struct comm\"", "\"offset task_struct\""),
            ("2976", "\"2976\""),
            ("\"0xffffffff824c1990\"", "\"ffffffff824c1990\""),
            ("04000000140000000300", "0400000014000000030"),
            ("\"types\"", "\"typos\""),
        ] {
            assert!(text.contains(from), "{from}");
            std::fs::write(&file, text.replace(from, to)).unwrap();
            let loaded = load(&file);
            assert_eq!(loaded.len(), 1, "{from}");
            assert_eq!(loaded[0].warm, None, "{from}");
            assert_eq!(loaded[0].banner, "Linux version 1");
        }
    }
}
