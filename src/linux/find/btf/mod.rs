//! The kernel's BTF: where it lies, its header checked, and its types
//! read by a reader of this module's own ([`types`]) that checks the
//! whole type section before it answers anything.
//!
//! BTF comes from the target (or from a file a user was given), so it is
//! read as hostile. The `btfparse` crate this module used before followed
//! typedefs without a limit (a typedef naming itself hung it), recursed
//! through anonymous members and array elements (a struct containing
//! itself overflowed the stack), read every name up to the next NUL (BTF
//! with its NULs removed took gigabytes), and its member search probed
//! every anonymous member again at each level; checking the bytes before
//! handing them over would have meant decoding every record anyway, and
//! still leave its lookups' cost to the crate. So the checks and the
//! lookups are here, in one pass over the records and a few hundred
//! lines, with no dependency. What is checked, with the kernel's own BTF
//! verifier (`kernel/bpf/btf.c`) as the guide:
//!
//! - the header: magic, version, sections in order and in bounds, the
//!   whole at most [`MAX_BTF`] (64 MiB; Debian 12's kernel has 4.2 MiB);
//! - every record: a known kind, no unknown info bits, its entries (vlen)
//!   inside the type section; at most [`MAX_TYPES`] types
//!   (`BTF_MAX_TYPE`);
//! - every name: inside the string section, NUL-terminated within
//!   [`MAX_NAME`] bytes (`KSYM_NAME_LEN`; the longest in Debian's kernel
//!   is 71), and the section itself ends with a NUL;
//! - every type reference in range, void only where C allows it;
//! - no cycle through typedefs, `const`/`volatile`/`restrict`, type tags,
//!   array elements or anonymous members (what a lookup follows without a
//!   read), such chains at most [`MAX_DEPTH`] deep (the verifier's
//!   `MAX_RESOLVE_DEPTH`; Debian's deepest is 7), and a member search
//!   through anonymous members at most [`MAX_SEARCH`] members (Debian's
//!   largest, `task_struct`'s, a few hundred);
//! - sizes: a struct or union at most [`MAX_COMPOSITE`] (16 MiB; the
//!   largest in Debian's kernel, `rcu_state` at `NR_CPUS` 8192, is 334
//!   KB), any type below 4 GiB (the verifier's rule), and every member
//!   inside its struct.
//!
//! On top of that, every offset or size this module answers is at most
//! [`MAX_ANSWER`] (64 KiB): the walks size their buffers from these
//! answers, and the largest structure they read, `task_struct`, is 9.8 KiB
//! on Debian 12. An answer over it is an error naming the structure, so
//! no caller can forget the cap.
//!
//! A [`Btf`] also keeps every answer it gave, so that a kernel cache can
//! keep them and a warm start can answer the walks with no BTF read at
//! all ([`Btf::recorded`]); answers from there are checked against the
//! same caps, and a question they lack reads the BTF after all.

#[cfg(test)]
pub(crate) mod builder;
mod types;

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use types::Types;

/// Largest BTF read, header to the end of its strings: a kernel's is a
/// few MiB (Debian 12's 4.2 MiB, allyesconfig builds a few times that).
pub const MAX_BTF: usize = 64 << 20;
/// Longest name with its NUL (`KSYM_NAME_LEN`).
pub const MAX_NAME: usize = 512;
/// Most types (`BTF_MAX_TYPE`).
pub const MAX_TYPES: usize = 0x000f_ffff;
/// Longest chain of aliases, arrays and anonymous members
/// (`MAX_RESOLVE_DEPTH`).
pub const MAX_DEPTH: u32 = 32;
/// Most members one search for a member name may look at.
pub const MAX_SEARCH: u64 = 1 << 16;
/// Largest struct or union.
pub const MAX_COMPOSITE: u64 = 16 << 20;
/// Largest type of any kind (the verifier's: sizes are 32-bit).
pub const MAX_TYPE_SIZE: u64 = u32::MAX as u64;
/// Largest offset or size answered: what a walk may size a buffer by.
pub const MAX_ANSWER: u64 = 64 << 10;
/// x86-64's.
const POINTER_SIZE: u64 = 8;
/// Most answers a recorded BTF holds (the walks ask about 70 questions).
pub const MAX_ANSWERS: usize = 1024;

/// BTF's magic number, little endian (`BTF_MAGIC`).
const MAGIC: u16 = 0xeb9f;
/// The only BTF version there is.
const VERSION: u8 = 1;
/// Length of the header this code knows (`struct btf_header`).
const HEADER_LEN: u32 = 24;

/// A BTF header whose fields make sense: magic, version, length, and type
/// and string sections that lie after it, in order, within the bytes
/// given and [`MAX_BTF`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Offset of the type section from the end of the header.
    pub type_off: u32,
    /// Bytes of the type section.
    pub type_len: u32,
    /// Offset of the string section from the end of the header.
    pub str_off: u32,
    /// Bytes of the string section.
    pub str_len: u32,
}

impl Header {
    /// Reads and checks the header at the start of `bytes`; `None` when
    /// any field is off or the sections do not fit in `bytes`.
    pub fn parse(bytes: &[u8]) -> Option<Header> {
        let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
        if bytes.len() < HEADER_LEN as usize
            || u16::from_le_bytes([bytes[0], bytes[1]]) != MAGIC
            || bytes[2] != VERSION
            || u32_at(4)? != HEADER_LEN
        {
            return None;
        }
        let header = Header {
            type_off: u32_at(8)?,
            type_len: u32_at(12)?,
            str_off: u32_at(16)?,
            str_len: u32_at(20)?,
        };
        let type_end = u64::from(header.type_off) + u64::from(header.type_len);
        let str_end = u64::from(header.str_off) + u64::from(header.str_len);
        let sane = header.type_off % 4 == 0
            && header.type_len > 0
            && header.str_len > 0
            && u64::from(header.str_off) >= type_end
            && u64::from(HEADER_LEN) + str_end <= bytes.len() as u64
            && u64::from(HEADER_LEN) + str_end <= MAX_BTF as u64
            // The string section starts with the empty string.
            && bytes[(HEADER_LEN + header.str_off) as usize] == 0;
        sane.then_some(header)
    }

    /// Bytes from the header's first byte to the end of its last section.
    pub fn total_len(&self) -> usize {
        HEADER_LEN as usize + (self.str_off as usize + self.str_len as usize)
    }
}

/// Every offset in `bytes` (4-aligned, as the section is) where a header
/// that passes [`Header::parse`] starts.
pub fn find_headers(bytes: &[u8]) -> impl Iterator<Item = (usize, Header)> + '_ {
    let magic = MAGIC.to_le_bytes();
    (0..bytes.len().saturating_sub(HEADER_LEN as usize))
        .step_by(4)
        .filter(move |&at| bytes[at..at + 2] == magic && bytes[at + 2] == VERSION)
        .filter_map(|at| Header::parse(&bytes[at..]).map(|h| (at, h)))
}

/// Why BTF could not be used, or a question about it not answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BtfError {
    /// The bytes do not start with a sane BTF header.
    #[error(
        "not BTF: no valid header (magic 0xeb9f, version 1, 24-byte header, sections in bounds, at most 64 MiB)"
    )]
    BadHeader,
    /// The types break a rule (see the module's documentation), or a
    /// layout a walk needs is not as the walk reads it.
    #[error("BTF does not parse: {0}")]
    Parse(String),
    /// A file given as BTF could not be read.
    #[error("cannot read BTF file {path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// What the system said.
        reason: String,
    },
    /// No struct or union of that name.
    #[error("BTF has no struct or union named {0}")]
    NoType(String),
    /// The type has no such member (or the path goes through a pointer).
    #[error("BTF: {ty} has no member {path}: {reason}")]
    NoMember {
        /// The struct or union.
        ty: String,
        /// The member path asked for.
        path: String,
        /// Why.
        reason: String,
    },
    /// The member is a bit field, which has no byte offset.
    #[error("BTF: {ty}.{path} is a bit field")]
    BitField {
        /// The struct or union.
        ty: String,
        /// The member path asked for.
        path: String,
    },
    /// An offset or size over [`MAX_ANSWER`].
    #[error("BTF gives {what} {value} bytes, over the {} KiB a structure read by a walk can have", MAX_ANSWER >> 10)]
    TooLarge {
        /// What was asked.
        what: String,
        /// The answer.
        value: u64,
    },
    /// No enumerator of that name.
    #[error("BTF has no enumerator {0}")]
    NoEnumerator(String),
    /// An answer kept from an earlier run (its message then).
    #[error("{0}")]
    Recorded(String),
    /// A question the recorded answers lack, with the types not at hand.
    #[error("BTF: {0} is not among the answers kept, and the BTF cannot be read: {1}")]
    NotKept(String, String),
}

/// A question a walk asks of BTF.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Query {
    /// Byte offset of a member path in a struct or union.
    Offset(String, String),
    /// Size of the member at a path.
    MemberSize(String, String),
    /// Size of a struct or union.
    Size(String),
    /// Value of an enumerator.
    Enum(String),
}

impl fmt::Display for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Query::Offset(ty, path) => write!(f, "offset {ty} {path}"),
            Query::MemberSize(ty, path) => write!(f, "member_size {ty} {path}"),
            Query::Size(ty) => write!(f, "size {ty}"),
            Query::Enum(name) => write!(f, "enum {name}"),
        }
    }
}

impl Query {
    /// The question [`Display`](fmt::Display) wrote; `None` for any other
    /// text, or names longer than BTF allows.
    pub fn parse(text: &str) -> Option<Query> {
        let mut words = text.split(' ');
        let (verb, a, b) = (words.next()?, words.next()?, words.next());
        if words.next().is_some() || a.len() >= MAX_NAME || b.is_some_and(|b| b.len() >= MAX_NAME) {
            return None;
        }
        Some(match (verb, b) {
            ("offset", Some(b)) => Query::Offset(a.into(), b.into()),
            ("member_size", Some(b)) => Query::MemberSize(a.into(), b.into()),
            ("size", None) => Query::Size(a.into()),
            ("enum", None) => Query::Enum(a.into()),
            _ => return None,
        })
    }
}

/// What a question got: a number (an offset or size, at most
/// [`MAX_ANSWER`]; or an enumerator's value), or why not.
pub type Answer = Result<i64, BtfError>;

/// Reads and checks the types when a recorded BTF is asked what it lacks.
type Loader = Box<dyn Fn() -> Result<Btf, BtfError> + Send + Sync>;

/// The kernel's types, for the questions the walks ask: parsed and
/// checked BTF, or the answers an earlier run kept (which read the BTF
/// only when asked something else).
pub struct Btf {
    /// The checked types; for recorded answers, filled by `loader` on the
    /// first question they lack.
    types: OnceLock<Result<Types, BtfError>>,
    loader: Option<Loader>,
    len: usize,
    type_count: usize,
    /// Every answer given so far.
    answers: Mutex<BTreeMap<Query, Answer>>,
}

impl fmt::Debug for Btf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Btf")
            .field("len", &self.len)
            .field("types", &self.type_count)
            .field("parsed", &matches!(self.types.get(), Some(Ok(_))))
            .finish()
    }
}

impl Btf {
    /// Parses BTF that starts at `bytes[0]` (any bytes after its string
    /// section are ignored), checking its header, then every rule of the
    /// module's documentation.
    pub fn parse(bytes: &[u8]) -> Result<Btf, BtfError> {
        let header = Header::parse(bytes).ok_or(BtfError::BadHeader)?;
        let section = |off: u32, len: u32| {
            let start = HEADER_LEN as usize + off as usize;
            &bytes[start..start + len as usize]
        };
        let types = Types::new(
            section(header.type_off, header.type_len),
            section(header.str_off, header.str_len),
        )
        .map_err(BtfError::Parse)?;
        let type_count = types.count() as usize;
        Ok(Btf {
            types: OnceLock::from(Ok(types)),
            loader: None,
            len: header.total_len(),
            type_count,
            answers: Mutex::new(BTreeMap::new()),
        })
    }

    /// Parses a BTF file, such as `/sys/kernel/btf/vmlinux` copied off the
    /// target: a regular file of at most [`MAX_BTF`] bytes (checked before
    /// reading, and while reading, should it grow).
    pub fn from_file(path: &Path) -> Result<Btf, BtfError> {
        let file = |reason: String| BtfError::File {
            path: path.display().to_string(),
            reason,
        };
        let meta = std::fs::metadata(path).map_err(|e| file(e.to_string()))?;
        // Refuse pipes and devices, which could make reading wait for ever.
        if !meta.is_file() || meta.len() > MAX_BTF as u64 {
            return Err(file(format!(
                "not a regular file of at most {} MiB, as a kernel's BTF is",
                MAX_BTF >> 20
            )));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_BTF as u64 + 1).read_to_end(&mut bytes))
            .map_err(|e| file(e.to_string()))?;
        if bytes.len() > MAX_BTF {
            return Err(file(format!("grew past {} MiB while read", MAX_BTF >> 20)));
        }
        Btf::parse(&bytes)
    }

    /// Answers kept from an earlier run of a BTF of `len` bytes and
    /// `type_count` types; each is checked against the caps as a parsed
    /// one is (`None` when one fails, or there are too many). Asked
    /// anything else, it answers that it lacks it, until given a loader
    /// ([`Btf::with_loader`]).
    pub fn recorded(
        answers: BTreeMap<Query, Answer>,
        len: usize,
        type_count: usize,
    ) -> Option<Btf> {
        let sane = answers.len() <= MAX_ANSWERS
            && len <= MAX_BTF
            && type_count <= MAX_TYPES
            && answers.iter().all(|(q, a)| match (q, a) {
                (Query::Enum(_), _) | (_, Err(_)) => true,
                (_, Ok(v)) => (0..=MAX_ANSWER as i64).contains(v),
            });
        sane.then(|| Btf {
            types: OnceLock::new(),
            loader: None,
            len,
            type_count,
            answers: Mutex::new(answers),
        })
    }

    /// The same, reading and checking the whole BTF with `loader` the
    /// first time it is asked what it lacks.
    pub fn with_loader(
        mut self,
        loader: impl Fn() -> Result<Btf, BtfError> + Send + Sync + 'static,
    ) -> Btf {
        self.loader = Some(Box::new(loader));
        self
    }

    /// Every answer given so far (or kept), for a cache to keep.
    pub fn answers(&self) -> BTreeMap<Query, Answer> {
        self.answers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Bytes from its header to the end of its strings.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes (never, once parsed).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many types it describes.
    pub fn type_count(&self) -> usize {
        self.type_count
    }

    /// Whether the types were parsed (here, or by the loader), rather than
    /// every answer coming from those kept.
    pub fn is_parsed(&self) -> bool {
        matches!(self.types.get(), Some(Ok(_)))
    }

    /// The answer to `q`: kept, else worked out from the types (read by
    /// the loader if need be), capped, and kept.
    fn ask(&self, q: Query) -> Answer {
        if let Some(a) = self
            .answers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&q)
        {
            return a.clone();
        }
        let types = self.types.get_or_init(|| match &self.loader {
            Some(load) => load().and_then(|btf| {
                btf.types
                    .into_inner()
                    .unwrap_or_else(|| Err(BtfError::Parse("no types".into())))
            }),
            None => Err(BtfError::Parse("no BTF to read".into())),
        });
        let a = match types {
            Ok(types) => work_out(types, &q),
            Err(e) => return Err(BtfError::NotKept(q.to_string(), e.to_string())),
        };
        let a = match (&q, a) {
            (Query::Enum(_), a) => a,
            (_, Ok(v)) if !(0..=MAX_ANSWER as i64).contains(&v) => Err(BtfError::TooLarge {
                what: q.to_string(),
                value: v as u64,
            }),
            (_, a) => a,
        };
        self.answers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(q, a.clone());
        a
    }

    /// Byte offset of a member of struct or union `ty`: `path` is a member
    /// name, or a path through nested members and arrays such as
    /// `numbers[0].ns` (not through pointers).
    pub fn member_offset(&self, ty: &str, path: &str) -> Result<u64, BtfError> {
        self.ask(Query::Offset(ty.into(), path.into()))
            .map(|v| v as u64)
    }

    /// Size in bytes of the member at `path` in struct or union `ty` (an
    /// array's whole size; 0 for a flexible array).
    pub fn member_size(&self, ty: &str, path: &str) -> Result<u64, BtfError> {
        self.ask(Query::MemberSize(ty.into(), path.into()))
            .map(|v| v as u64)
    }

    /// Size in bytes of struct or union `ty`.
    pub fn size_of(&self, ty: &str) -> Result<u64, BtfError> {
        self.ask(Query::Size(ty.into())).map(|v| v as u64)
    }

    /// The value of enumerator `name` (of any enum), e.g. `PIDTYPE_PID`.
    pub fn enum_value(&self, name: &str) -> Option<i64> {
        self.ask(Query::Enum(name.into())).ok()
    }
}

/// The answer to `q` from checked types (before the cap).
fn work_out(types: &Types, q: &Query) -> Answer {
    let composite = |ty: &str| {
        types
            .composite(ty)
            .ok_or_else(|| BtfError::NoType(ty.into()))
    };
    let place = |ty: &str, path: &str| {
        types
            .place(composite(ty)?, path)
            .map_err(|reason| BtfError::NoMember {
                ty: ty.into(),
                path: path.into(),
                reason,
            })
    };
    let size = |id: u32, what: String| {
        types
            .size_of(id)
            .map(|s| s as i64)
            .ok_or(BtfError::Parse(format!("{what} has no size")))
    };
    match q {
        Query::Offset(ty, path) => {
            let p = place(ty, path)?;
            match p.bitfield || p.bits % 8 != 0 {
                true => Err(BtfError::BitField {
                    ty: ty.clone(),
                    path: path.clone(),
                }),
                false => Ok((p.bits / 8) as i64),
            }
        }
        Query::MemberSize(ty, path) => size(place(ty, path)?.ty, format!("{ty}.{path}")),
        Query::Size(ty) => size(composite(ty)?, ty.clone()),
        Query::Enum(name) => types
            .enum_value(name)
            .ok_or_else(|| BtfError::NoEnumerator(name.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::builder::*;
    use super::*;

    /// A minimal BTF blob: `struct pair { int a; long b; }`, little endian.
    pub(crate) fn tiny_btf() -> Vec<u8> {
        // Strings: "\0int\0long\0pair\0a\0b\0"
        let strings = b"\0int\0long\0pair\0a\0b\0".to_vec();
        let mut types = Vec::new();
        let mut u32s = |v: &[u32]| v.iter().for_each(|x| types.extend(x.to_le_bytes()));
        // [1] INT "int" size 4, signed, 32 bits
        u32s(&[1, 1 << 24, 4, (1 << 24) | 32]);
        // [2] INT "long" size 8, signed, 64 bits
        u32s(&[5, 1 << 24, 8, (1 << 24) | 64]);
        // [3] STRUCT "pair" size 16, 2 members: a (int, bit 0), b (long, bit 64)
        u32s(&[10, (4 << 24) | 2, 16, 15, 1, 0, 17, 2, 64]);
        let mut blob = Vec::new();
        blob.extend(0xeb9fu16.to_le_bytes());
        blob.extend([1, 0]);
        blob.extend(24u32.to_le_bytes());
        blob.extend(0u32.to_le_bytes());
        blob.extend((types.len() as u32).to_le_bytes());
        blob.extend((types.len() as u32).to_le_bytes());
        blob.extend((strings.len() as u32).to_le_bytes());
        blob.extend(types);
        blob.extend(strings);
        blob
    }

    #[test]
    fn parses_offsets_and_sizes() {
        let btf = Btf::parse(&tiny_btf()).unwrap();
        assert_eq!(btf.member_offset("pair", "a"), Ok(0));
        assert_eq!(btf.member_offset("pair", "b"), Ok(8));
        assert_eq!(btf.size_of("pair"), Ok(16));
        assert_eq!(btf.member_size("pair", "a"), Ok(4));
        assert_eq!(btf.member_size("pair", "b"), Ok(8));
        assert_eq!(btf.type_count(), 3);
        assert!(matches!(
            btf.member_offset("pair", "c"),
            Err(BtfError::NoMember { .. })
        ));
        assert_eq!(btf.size_of("int"), Err(BtfError::NoType("int".into())));
    }

    #[test]
    fn header_fields_are_checked() {
        let good = tiny_btf();
        assert!(Header::parse(&good).is_some());
        for (at, value) in [(0, 0x9e), (2, 2), (4, 25), (16, 0)] {
            let mut bad = good.clone();
            bad[at] = value;
            assert_eq!(Header::parse(&bad), None, "byte {at} = {value:#x}");
            assert_eq!(Btf::parse(&bad).unwrap_err(), BtfError::BadHeader);
        }
        // Sections that run past the bytes given.
        assert_eq!(Header::parse(&good[..good.len() - 1]), None);
    }

    #[test]
    fn found_inside_other_bytes() {
        let mut bytes = vec![0x5a; 64];
        // A header that only looks right: its sections run off the end.
        bytes[8..12].copy_from_slice(&[0x9f, 0xeb, 1, 0]);
        bytes.extend(tiny_btf());
        bytes.extend([0u8; 8]);
        let found: Vec<usize> = find_headers(&bytes).map(|(at, _)| at).collect();
        assert_eq!(found, vec![64]);
    }

    #[test]
    fn types_that_run_off_are_an_error_not_a_panic() {
        let mut blob = tiny_btf();
        // The struct claims 200 members.
        let vlen_at = 24 + 32 + 4;
        blob[vlen_at] = 200;
        assert_eq!(
            refusal(&blob),
            "type 3 (200 entries) runs past the end of the type section"
        );
    }

    /// Why `blob` is refused (a test failure when it is not).
    fn refusal(blob: &[u8]) -> String {
        match Btf::parse(blob) {
            Err(BtfError::Parse(why)) => why,
            other => panic!("not refused by the checks: {other:?}"),
        }
    }

    /// A struct `holder` with a member `x` of type `ty` (so that a lookup
    /// would go there).
    fn holder(b: &mut BtfBuilder, ty: u32) {
        b.composite(KIND_STRUCT, "holder", 64, &[("x", ty, 0)]);
    }

    #[test]
    fn aliases_that_name_themselves_or_each_other_are_refused() {
        for kind in [
            KIND_TYPEDEF,
            KIND_CONST,
            KIND_VOLATILE,
            KIND_RESTRICT,
            KIND_TYPE_TAG,
        ] {
            let mut b = BtfBuilder::new();
            let own = b.next_id();
            b.alias(kind, "me", own);
            holder(&mut b, own);
            assert!(refusal(&b.finish()).contains(&format!("type {own} contains itself")));
            // Two that name each other, one of them a typedef.
            let mut b = BtfBuilder::new();
            let a = b.next_id();
            b.alias(KIND_TYPEDEF, "a", a + 1);
            b.alias(kind, "b", a);
            holder(&mut b, a);
            assert!(
                refusal(&b.finish()).contains("contains itself"),
                "kind {kind}"
            );
        }
    }

    #[test]
    fn a_struct_or_array_that_contains_itself_is_refused() {
        // struct s { struct s; } through its anonymous member.
        let mut b = BtfBuilder::new();
        let own = b.next_id();
        b.composite(KIND_STRUCT, "s", 8, &[("", own, 0)]);
        assert_eq!(
            refusal(&b.finish()),
            format!("type {own} contains itself (through typedefs, modifiers, arrays or anonymous members)")
        );
        // Through a union and a const.
        let mut b = BtfBuilder::new();
        let s = b.next_id();
        b.composite(KIND_STRUCT, "s", 8, &[("", s + 1, 0)]);
        b.composite(KIND_UNION, "", 8, &[("", s + 2, 0)]);
        b.alias(KIND_CONST, "", s);
        assert!(refusal(&b.finish()).contains("contains itself"));
        // An array whose element is the array.
        let mut b = BtfBuilder::new();
        let own = b.next_id();
        b.array_of(own, 2);
        holder(&mut b, own);
        assert!(refusal(&b.finish()).contains(&format!("type {own} contains itself")));
        // A named member of the struct's own type is no cycle a lookup
        // follows: a path names each step.
        let mut b = BtfBuilder::new();
        let own = b.next_id();
        b.composite(KIND_STRUCT, "s", 8, &[("me", own, 0)]);
        let btf = Btf::parse(&b.finish()).unwrap();
        assert_eq!(btf.member_offset("s", "me.me.me"), Ok(0));
    }

    #[test]
    fn sizes_and_offsets_past_a_kernels_are_refused() {
        let mut b = BtfBuilder::new();
        // The farthest offset BTF can hold: a bit short of 512 MiB.
        let far = (512 << 20) - 8;
        b.composite(KIND_STRUCT, "far", 16, &[("x", 1, far)]);
        assert_eq!(
            refusal(&b.finish()),
            format!(
                "member x of type 2 ends at bit {}, past its 128-bit struct",
                far * 8 + 64
            )
        );
        let mut b = BtfBuilder::new();
        b.composite(KIND_STRUCT, "huge", u32::MAX, &[]);
        assert!(refusal(&b.finish())
            .starts_with("struct or union huge (type 2) claims 4294967295 bytes"));
        // An array of 2^31 longs: 16 GiB.
        let mut b = BtfBuilder::new();
        let array = b.array(1 << 31);
        holder(&mut b, array);
        assert_eq!(
            refusal(&b.finish()),
            format!("array type {array} is over 4294967295 bytes")
        );
        // Within the checks, but past what a walk reads: refused when
        // asked.
        let mut b = BtfBuilder::new();
        let page = b.array(1 << 17);
        b.composite(
            KIND_STRUCT,
            "mib",
            1 << 20,
            &[("a", 1, 8), ("b", page, 0), ("c", 1, 100 << 10)],
        );
        let btf = Btf::parse(&b.finish()).unwrap();
        assert_eq!(btf.member_offset("mib", "a"), Ok(8));
        assert_eq!(
            btf.size_of("mib").unwrap_err().to_string(),
            "BTF gives size mib 1048576 bytes, over the 64 KiB a structure read by a walk can have"
        );
        assert!(
            matches!(btf.member_offset("mib", "c"), Err(BtfError::TooLarge { value, .. }) if value == 100 << 10)
        );
        assert!(
            matches!(btf.member_size("mib", "b"), Err(BtfError::TooLarge { value, .. }) if value == 1 << 20)
        );
    }

    #[test]
    fn names_must_end_in_the_strings_and_soon() {
        // The strings with their NULs removed (but the first, the empty
        // name): nothing ends.
        let mut b = BtfBuilder::new();
        let long = "n".repeat(300);
        b.structure(&long, 16, &[(&long, 0), ("b", 8)]);
        let strings = b.strings_mut();
        let rest: Vec<u8> = strings[1..].iter().copied().filter(|&c| c != 0).collect();
        strings.truncate(1);
        strings.extend(rest);
        assert_eq!(
            refusal(&b.finish()),
            "its string section does not end with a NUL"
        );
        // The same with a last NUL: names run on past 512 bytes.
        b.strings_mut().push(0);
        let blob = b.finish();
        assert!(
            refusal(&blob).ends_with("is not ended within 512 bytes"),
            "{}",
            refusal(&blob)
        );
        // A name of 511 bytes is a name; of 512, not.
        for (len, ok) in [(511, true), (512, false)] {
            let mut b = BtfBuilder::new();
            b.structure(&"n".repeat(len), 8, &[("a", 0)]);
            assert_eq!(Btf::parse(&b.finish()).is_ok(), ok, "{len}");
        }
        // A name past the strings.
        let mut b = BtfBuilder::new();
        b.push(&[1 << 20, KIND_TYPEDEF << 24, 1]);
        assert_eq!(
            refusal(&b.finish()),
            "type 2's name at 0x100000 lies past the strings"
        );
    }

    #[test]
    fn references_kinds_and_counts_are_checked() {
        let mut b = BtfBuilder::new();
        b.alias(KIND_TYPEDEF, "t", 99);
        assert_eq!(refusal(&b.finish()), "type 2 refers to type 99, of 2");
        let mut b = BtfBuilder::new();
        b.push(&[0, 25 << 24, 0]);
        assert_eq!(refusal(&b.finish()), "type 2 has unknown kind 25");
        let mut b = BtfBuilder::new();
        b.push(&[0, (KIND_TYPEDEF << 24) | 1 << 20, 1]);
        assert_eq!(
            refusal(&b.finish()),
            "type 2 has unknown info bits (0x8100000)"
        );
        // A member of void.
        let mut b = BtfBuilder::new();
        b.composite(KIND_STRUCT, "s", 8, &[("v", 0, 0)]);
        assert_eq!(refusal(&b.finish()), "type 2 refers to type 0, of 2");
    }

    #[test]
    fn chains_and_searches_are_bounded() {
        // 40 typedefs, each naming the one before.
        let mut b = BtfBuilder::new();
        let mut last = b.long();
        for _ in 0..40 {
            last = b.alias(KIND_TYPEDEF, "t", last);
        }
        holder(&mut b, last);
        assert!(refusal(&b.finish()).contains("chain of more than 32"));
        // 20 levels of structs with two anonymous members each of the
        // level below: 2^20 paths to the bottom, each a search would take.
        let mut b = BtfBuilder::new();
        let mut below = b.composite(KIND_STRUCT, "", 8, &[("bottom", 1, 0)]);
        for _ in 0..20 {
            below = b.composite(KIND_STRUCT, "", 8, &[("", below, 0), ("", below, 0)]);
        }
        b.composite(KIND_STRUCT, "top", 8, &[("", below, 0)]);
        assert!(refusal(&b.finish()).contains("would look at more than 65536 members"));
    }

    #[test]
    fn lookups_go_through_anonymous_members_arrays_and_typedefs() {
        let mut b = BtfBuilder::new();
        let long = b.long();
        let inner = b.composite(KIND_STRUCT, "inner", 16, &[("p", long, 0), ("q", long, 8)]);
        let typed = b.alias(KIND_TYPEDEF, "inner_t", inner);
        let konst = b.alias(KIND_CONST, "", typed);
        let pair = b.array_of(konst, 3);
        let anon = b.composite(KIND_UNION, "", 8, &[("u", long, 0), ("w", long, 0)]);
        let ptr = b.alias(KIND_PTR, "", inner);
        b.composite(
            KIND_STRUCT,
            "outer",
            80,
            &[
                ("head", long, 0),
                ("", anon, 8),
                ("pairs", pair, 16),
                ("next", ptr, 64),
            ],
        );
        b.enumeration(
            "pid_type",
            &[("PIDTYPE_PID", 0), ("PIDTYPE_TGID", 1), ("NEG", -3)],
        );
        let btf = Btf::parse(&b.finish()).unwrap();
        assert_eq!(btf.member_offset("outer", "w"), Ok(8));
        assert_eq!(btf.member_offset("outer", "pairs[2].q"), Ok(16 + 32 + 8));
        assert_eq!(btf.member_size("outer", "pairs"), Ok(48));
        assert_eq!(btf.member_size("outer", "pairs[1]"), Ok(16));
        assert_eq!(btf.member_size("outer", "next"), Ok(8));
        assert_eq!(btf.size_of("outer"), Ok(80));
        assert_eq!(btf.enum_value("PIDTYPE_TGID"), Some(1));
        // Unsigned: no kind flag.
        assert_eq!(btf.enum_value("NEG"), Some(0xffff_fffd));
        assert_eq!(btf.enum_value("PIDTYPE_MAX"), None);
        for (path, reason) in [
            ("pairs[3]", "index 3 is past pairs's 3 elements"),
            (
                "next.p",
                "p is asked of a type that is not a struct or union",
            ),
            ("head[0]", "head is not an array"),
            ("pairs[x]", "a bad index \"x\""),
            ("nothing", "no member nothing"),
        ] {
            assert_eq!(
                btf.member_offset("outer", path),
                Err(BtfError::NoMember {
                    ty: "outer".into(),
                    path: path.into(),
                    reason: reason.into()
                })
            );
        }
        // The typedef is no struct of that name.
        assert_eq!(
            btf.size_of("inner_t"),
            Err(BtfError::NoType("inner_t".into()))
        );
    }

    #[test]
    fn answers_are_kept_and_a_recorded_btf_gives_them_back_checked() {
        let btf = Btf::parse(&tiny_btf()).unwrap();
        assert_eq!(btf.member_offset("pair", "b"), Ok(8));
        assert!(btf.member_offset("pair", "c").is_err());
        let answers = btf.answers();
        assert_eq!(answers.len(), 2);
        for q in answers.keys() {
            assert_eq!(Query::parse(&q.to_string()).as_ref(), Some(q));
        }
        let recorded = Btf::recorded(answers.clone(), btf.len(), btf.type_count()).unwrap();
        assert_eq!(recorded.member_offset("pair", "b"), Ok(8));
        assert!(!recorded.is_parsed());
        assert!(matches!(
            recorded.member_offset("pair", "a"),
            Err(BtfError::NotKept(..))
        ));
        // With a way to read the BTF, what is missing is worked out.
        let loads = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = loads.clone();
        let recorded = Btf::recorded(answers.clone(), btf.len(), btf.type_count())
            .unwrap()
            .with_loader(move || {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Btf::parse(&tiny_btf())
            });
        assert_eq!(recorded.member_offset("pair", "b"), Ok(8));
        assert_eq!(loads.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert_eq!(recorded.member_offset("pair", "a"), Ok(0));
        assert_eq!(recorded.size_of("pair"), Ok(16));
        assert_eq!(loads.load(std::sync::atomic::Ordering::SeqCst), 1);
        // An answer past the cap, from a cache that says so, is refused.
        let mut bad = answers;
        bad.insert(Query::Size("pair".into()), Ok(1 << 30));
        assert!(Btf::recorded(bad.clone(), 100, 3).is_none());
        bad.insert(Query::Size("pair".into()), Ok(-1));
        assert!(Btf::recorded(bad, 100, 3).is_none());
        for text in ["offset a", "size a b", "enum", "offset a b c", "what a"] {
            assert_eq!(Query::parse(text), None, "{text}");
        }
    }
}
