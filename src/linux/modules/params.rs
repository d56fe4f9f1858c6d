//! Each module's parameters (`module->kp`, `num_kp` of them), as
//! `/sys/module/NAME/parameters/` shows them: the name, and the value
//! where the parameter's kind is one the kernel itself defines (its
//! `ops` is one of the kernel's `param_ops_*`, told by their kallsyms
//! addresses) and the value is read as that kind prints it. A parameter
//! of any other kind (an array, a module's own ops) has no value shown:
//! what its ops would print cannot be known from memory.
//!
//! Three batches for every module at once: the parameter arrays, then
//! each name and value, then the strings values point at (and the rest
//! of a name that crosses a page).

use std::fmt;

use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::ParamLayout;
use crate::linux::structures::StructureFailure;

/// The most parameters read of a module (a module declares a few; the
/// kernel's own `__param` section of every built-in holds some hundreds).
pub(crate) const MAX_PARAMS: u64 = 1024;
/// Longest parameter name read (`MAX_PARAM_PREFIX_LEN` is 64 less a
/// module name's; built-ins' names have a prefix too).
const MAX_NAME: usize = 128;
/// Longest string value read (sysfs shows at most a page).
const MAX_VALUE: usize = 4096;
const PAGE: u64 = 0x1000;

/// How a parameter's value is kept and shown: one of the kernel's own
/// `struct kernel_param_ops` (`kernel/params.c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// `byte` (`%hhu`), `short` (`%hi`), `ushort` (`%hu`), `int` (`%i`),
    /// `uint` (`%u`), `long` (`%li`), `ulong` (`%lu`), `ullong` (`%llu`).
    Byte,
    Short,
    Ushort,
    Int,
    Uint,
    Long,
    Ulong,
    Ullong,
    /// `hexint`: an `unsigned int` shown as `0x%08x`.
    Hexint,
    /// `bool` (and `bool_enable_only`): `Y` or `N`.
    Bool,
    /// `invbool`: a `bool` shown inverted.
    InvBool,
    /// `charp`: a `char *`, `(null)` when NULL.
    Charp,
    /// `string`: a `struct kparam_string`, the buffer it points at.
    String,
}

/// The kernel's parameter kinds, by the symbol of their ops.
pub(crate) const PARAM_OPS: [(&str, ParamKind); 14] = [
    ("param_ops_byte", ParamKind::Byte),
    ("param_ops_short", ParamKind::Short),
    ("param_ops_ushort", ParamKind::Ushort),
    ("param_ops_int", ParamKind::Int),
    ("param_ops_uint", ParamKind::Uint),
    ("param_ops_long", ParamKind::Long),
    ("param_ops_ulong", ParamKind::Ulong),
    ("param_ops_ullong", ParamKind::Ullong),
    ("param_ops_hexint", ParamKind::Hexint),
    ("param_ops_bool", ParamKind::Bool),
    ("param_ops_bool_enable_only", ParamKind::Bool),
    ("param_ops_invbool", ParamKind::InvBool),
    ("param_ops_charp", ParamKind::Charp),
    ("param_ops_string", ParamKind::String),
];

impl ParamKind {
    /// Bytes of the value `arg` points at (of the pointer, for strings).
    fn size(self) -> usize {
        match self {
            ParamKind::Byte | ParamKind::Bool | ParamKind::InvBool => 1,
            ParamKind::Short | ParamKind::Ushort => 2,
            ParamKind::Int | ParamKind::Uint | ParamKind::Hexint => 4,
            _ => 8,
        }
    }

    /// The value in `bytes` as sysfs prints it; `None` for the kinds that
    /// point at a string.
    fn show(self, bytes: &[u8]) -> Option<String> {
        let mut word = [0u8; 8];
        word[..bytes.len().min(8)].copy_from_slice(&bytes[..bytes.len().min(8)]);
        let v = u64::from_le_bytes(word);
        Some(match self {
            ParamKind::Byte => (v as u8).to_string(),
            ParamKind::Short => (v as u16 as i16).to_string(),
            ParamKind::Ushort => (v as u16).to_string(),
            ParamKind::Int => (v as u32 as i32).to_string(),
            ParamKind::Uint => (v as u32).to_string(),
            ParamKind::Long => (v as i64).to_string(),
            ParamKind::Ulong | ParamKind::Ullong => v.to_string(),
            ParamKind::Hexint => format!("{:#010x}", v as u32),
            ParamKind::Bool => if v as u8 != 0 { "Y" } else { "N" }.into(),
            ParamKind::InvBool => if v as u8 != 0 { "N" } else { "Y" }.into(),
            ParamKind::Charp | ParamKind::String => return None,
        })
    }
}

impl fmt::Display for ParamKind {
    /// The kind's name in `module_param(name, KIND, perm)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = PARAM_OPS
            .iter()
            .find(|(_, k)| k == self)
            .map_or("?", |(s, _)| &s["param_ops_".len()..]);
        f.write_str(name)
    }
}

/// One parameter of a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleParam {
    /// Its name (without the module's prefix), decoded lossily, or why it
    /// could not be read.
    pub name: Result<String, String>,
    /// Its sysfs permissions (0: not shown in sysfs).
    pub perm: u16,
    /// Its kind, when its ops are one of the kernel's own.
    pub kind: Option<ParamKind>,
    /// Its value as sysfs shows it (decoded lossily), or why it is
    /// unknown.
    pub value: Result<String, String>,
}

/// A module's parameter array: its `struct module` address, `kp` and
/// `num_kp`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ParamArray {
    pub module: u64,
    pub kp: u64,
    pub count: u64,
}

/// The parameters of each array in `arrays`, in order, and what could not
/// be read; `kinds` are the kernel's parameter ops by address.
pub(crate) async fn read(
    kmem: &KernelMemory<'_>,
    layout: &ParamLayout,
    kinds: &[(u64, ParamKind)],
    arrays: &[ParamArray],
) -> (Vec<Vec<ModuleParam>>, Vec<StructureFailure>) {
    let all = arrays
        .iter()
        .map(|array| read_array(kmem, layout, kinds, *array));
    let read = futures::future::join_all(all).await;
    let mut params = Vec::with_capacity(read.len());
    let mut failed = Vec::new();
    for (p, f) in read {
        params.push(p);
        failed.extend(f);
    }
    (params, failed)
}

/// One module's parameters.
async fn read_array(
    kmem: &KernelMemory<'_>,
    layout: &ParamLayout,
    kinds: &[(u64, ParamKind)],
    array: ParamArray,
) -> (Vec<ModuleParam>, Vec<StructureFailure>) {
    let mut failed = Vec::new();
    if array.count == 0 {
        return (Vec::new(), failed);
    }
    if array.kp < kmem.kernel_half() {
        let why = format!(
            "its parameters (kp {:#x}) are at no kernel address",
            array.kp
        );
        return (Vec::new(), vec![StructureFailure::new(array.module, why)]);
    }
    let count = array.count.min(MAX_PARAMS);
    if array.count > MAX_PARAMS {
        failed.push(StructureFailure::new(
            array.module,
            format!(
                "it claims {} parameters (num_kp), more than {MAX_PARAMS}: the first {MAX_PARAMS} read",
                array.count
            ),
        ));
    }
    let stride = layout.size.max(1);
    let len = (count - 1) * stride + layout.span() as u64;
    let bytes = match kmem.read_vec(array.kp, len as usize).await {
        Ok(bytes) => bytes,
        Err(why) => {
            failed.push(StructureFailure::new(
                array.module,
                format!("its parameters: {why}"),
            ));
            return (Vec::new(), failed);
        }
    };
    let bytes = &bytes;
    let each = (0..count).map(|i| {
        let at = i * stride;
        let word = move |offset: u64| bytes.u64_at(at + offset).unwrap_or(0);
        let perm = bytes
            .bytes_at(at + layout.perm, 2)
            .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
        let owner = word(layout.module);
        let kind = kinds
            .iter()
            .find(|(ops, _)| *ops == word(layout.ops))
            .map(|(_, k)| *k);
        let arg = word(layout.arg);
        async move {
            let name = async {
                let name = c_string(kmem, word(layout.name), MAX_NAME).await?;
                match name.is_empty() {
                    true => Err("an empty name".to_string()),
                    false => Ok(String::from_utf8_lossy(&name).into_owned()),
                }
            };
            let value = async {
                if owner != array.module {
                    return Err(format!(
                        "unknown: its module pointer {owner:#x} is not its module's"
                    ));
                }
                match kind {
                    Some(kind) => value(kmem, layout, kind, arg).await,
                    None => Err(format!(
                        "unknown: its ops at {:#x} are none of the kernel's own kinds",
                        word(layout.ops)
                    )),
                }
            };
            let (name, value) = futures::join!(name, value);
            ModuleParam {
                name,
                perm,
                kind,
                value,
            }
        }
    });
    let params = futures::future::join_all(each).await;
    (params, failed)
}

/// The value of a parameter of `kind` whose `arg` is `arg`.
async fn value(
    kmem: &KernelMemory<'_>,
    layout: &ParamLayout,
    kind: ParamKind,
    arg: u64,
) -> Result<String, String> {
    if arg < kmem.kernel_half() {
        return Err(format!(
            "unknown: its value's address {arg:#x} is no kernel address"
        ));
    }
    let unknown = |why: String| format!("unknown: {why}");
    let bytes = match kind {
        ParamKind::String => layout.string.max(layout.maxlen) as usize + 8,
        _ => kind.size(),
    };
    let bytes = kmem.read_vec(arg, bytes).await.map_err(unknown)?;
    if let Some(shown) = kind.show(&bytes) {
        return Ok(shown);
    }
    let (at, max) = match kind {
        ParamKind::Charp => (bytes.u64_at(0).unwrap_or(0), MAX_VALUE),
        _ => {
            let max = bytes.u32_at(layout.maxlen).unwrap_or(0) as usize;
            (bytes.u64_at(layout.string).unwrap_or(0), max.min(MAX_VALUE))
        }
    };
    if at == 0 && kind == ParamKind::Charp {
        return Ok("(null)".into());
    }
    if at < kmem.kernel_half() || max == 0 {
        return Err(unknown(format!(
            "its string at {at:#x} (of {max} bytes) cannot be read"
        )));
    }
    let text = c_string(kmem, at, max).await.map_err(unknown)?;
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// The string at `at`, up to its NUL, of at most `max` bytes: up to the
/// end of its page first (a string ends near one as often as not), then
/// the rest.
pub(crate) async fn c_string(
    kmem: &KernelMemory<'_>,
    at: u64,
    max: usize,
) -> Result<Vec<u8>, String> {
    if at < kmem.kernel_half() {
        return Err(format!("{at:#x} is no kernel address"));
    }
    let first = (PAGE - at % PAGE).min(max as u64) as usize;
    let mut bytes = kmem.read_vec(at, first).await?;
    if bytes.iter().all(|&b| b != 0) && first < max {
        let rest = kmem.read_vec(at.wrapping_add(first as u64), max - first);
        bytes.extend(rest.await?);
    }
    match bytes.iter().position(|&b| b == 0) {
        Some(end) => {
            bytes.truncate(end);
            Ok(bytes)
        }
        None => Err(format!("no NUL in the {max} bytes at {at:#x}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::fake_memory::FakeMemory;

    /// `struct kernel_param` and `struct kparam_string` as 6.x lays them.
    const LAYOUT: ParamLayout = ParamLayout {
        size: 40,
        name: 0,
        module: 8,
        ops: 16,
        perm: 24,
        arg: 32,
        maxlen: 0,
        string: 8,
    };
    /// Made-up addresses of the kernel's ops.
    const INT: u64 = 0xffff_ffff_8100_0000;
    const BOOL: u64 = INT + 0x40;
    const CHARP: u64 = INT + 0x80;
    const STRING: u64 = INT + 0xc0;
    const HEXINT: u64 = INT + 0x100;
    const KINDS: [(u64, ParamKind); 5] = [
        (INT, ParamKind::Int),
        (BOOL, ParamKind::Bool),
        (CHARP, ParamKind::Charp),
        (STRING, ParamKind::String),
        (HEXINT, ParamKind::Hexint),
    ];

    /// A parameter `i` of the array at `kp`.
    fn put_param(f: &mut FakeMemory, kp: u64, i: u64, name: u64, module: u64, ops: u64, arg: u64) {
        let at = kp + i * LAYOUT.size;
        f.put(at + LAYOUT.name, name);
        f.put(at + LAYOUT.module, module);
        f.put(at + LAYOUT.ops, ops);
        f.put_bytes(at + LAYOUT.perm, &0o644u16.to_le_bytes());
        f.put(at + LAYOUT.arg, arg);
    }

    #[test]
    fn each_kind_as_sysfs_shows_it_and_other_ops_unknown() {
        let mut f = FakeMemory::new(1 << 16);
        let module = f.alloc(64);
        let kp = f.alloc(8 * LAYOUT.size);
        let int = f.alloc(8);
        f.put_u32(int, (-5i32) as u32);
        let flag = f.alloc(8);
        f.put_bytes(flag, &[1]);
        let text = f.string("hello");
        let charp = f.alloc(8);
        f.put(charp, text);
        let null = f.alloc(8);
        let buffer = f.string("buffered");
        let kstring = f.alloc(16);
        f.put_u32(kstring + LAYOUT.maxlen, 32);
        f.put(kstring + LAYOUT.string, buffer);
        let hex = f.alloc(8);
        f.put_u32(hex, 0xbeef);
        let params = [
            ("count", INT, int),
            ("flag", BOOL, flag),
            ("text", CHARP, charp),
            ("none", CHARP, null),
            ("buf", STRING, kstring),
            ("mask", HEXINT, hex),
            ("own", INT + 0x1000, int),
        ];
        for (i, (name, ops, arg)) in params.iter().enumerate() {
            let name = f.string(name);
            put_param(&mut f, kp, i as u64, name, module, *ops, *arg);
        }
        // One whose module pointer is another's.
        let name = f.string("stray");
        put_param(&mut f, kp, 7, name, module + 8, INT, int);
        let array = ParamArray {
            module,
            kp,
            count: 8,
        };
        let ((params, failed), calls) =
            f.read(async |kmem| read(kmem, &LAYOUT, &KINDS, &[array]).await);
        assert_eq!(failed, []);
        let got: Vec<(String, Result<String, String>)> = params[0]
            .iter()
            .map(|p| (p.name.clone().unwrap(), p.value.clone()))
            .collect();
        let ok = |n: &str, v: &str| (n.to_string(), Ok(v.to_string()));
        assert_eq!(
            got[..6],
            [
                ok("count", "-5"),
                ok("flag", "Y"),
                ok("text", "hello"),
                ok("none", "(null)"),
                ok("buf", "buffered"),
                ok("mask", "0x0000beef"),
            ]
        );
        assert!(got[6]
            .1
            .as_ref()
            .unwrap_err()
            .contains("none of the kernel's own kinds"));
        assert!(got[7]
            .1
            .as_ref()
            .unwrap_err()
            .contains("is not its module's"));
        assert_eq!(params[0][0].perm, 0o644);
        // The array; the names and values; the strings.
        assert_eq!(calls, 3);
    }

    #[test]
    fn garbage_counts_names_without_end_and_wild_pointers_are_failures() {
        let mut f = FakeMemory::new(1 << 20);
        let module = f.alloc(64);
        let kp = f.alloc(2 * LAYOUT.size);
        // A name of 200 bytes and no NUL, across a page.
        let name = f.alloc(0x1000);
        let name = (name | 0xfff) - 99;
        f.put_bytes(name, &[b'x'; 200]);
        let int = f.alloc(8);
        put_param(&mut f, kp, 0, name, module, INT, int);
        // A value at a user address.
        let good = f.string("fine");
        put_param(&mut f, kp, 1, good, module, INT, 0x40_0000);
        let array = |count| ParamArray { module, kp, count };
        let ((params, failed), _) =
            f.read(async |kmem| read(kmem, &LAYOUT, &KINDS, &[array(2)]).await);
        assert_eq!(failed, []);
        let first = &params[0][0];
        assert!(
            first.name.as_ref().unwrap_err().contains("no NUL"),
            "{first:?}"
        );
        assert_eq!(first.value, Ok("0".into()));
        assert!(params[0][1]
            .value
            .as_ref()
            .unwrap_err()
            .contains("no kernel address"));
        // num_kp of four billion: the first MAX_PARAMS read, and said.
        let ((params, failed), calls) =
            f.read(async |kmem| read(kmem, &LAYOUT, &KINDS, &[array(u32::MAX as u64)]).await);
        assert_eq!(params[0].len(), MAX_PARAMS as usize);
        assert!(failed[0].reason.contains("more than 1024"), "{failed:?}");
        assert!(calls <= 4, "{calls}");
        // A parameter array at no kernel address, and one unreadable.
        let wild = ParamArray {
            module,
            kp: 0x1000,
            count: 1,
        };
        let past = ParamArray {
            module,
            kp: crate::linux::fake_memory::DIRECT + (2 << 20),
            count: 1,
        };
        let ((params, failed), _) =
            f.read(async |kmem| read(kmem, &LAYOUT, &KINDS, &[wild, past]).await);
        assert_eq!(params, [vec![], vec![]]);
        assert_eq!(failed.len(), 2, "{failed:?}");
    }
}
