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
mod header;
mod types;

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use header::HEADER_LEN;
pub use header::{find_headers, Header};
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
/// Most answers a recorded BTF holds (the walks ask about 100 questions).
pub const MAX_ANSWERS: usize = 1024;

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
    /// Offset in bits of a member path (a bit field's too).
    BitOffset(String, String),
    /// Width in bits of the member at a path (a bit field's, or its
    /// type's size).
    BitWidth(String, String),
}

impl fmt::Display for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Query::Offset(ty, path) => write!(f, "offset {ty} {path}"),
            Query::MemberSize(ty, path) => write!(f, "member_size {ty} {path}"),
            Query::Size(ty) => write!(f, "size {ty}"),
            Query::Enum(name) => write!(f, "enum {name}"),
            Query::BitOffset(ty, path) => write!(f, "bit_offset {ty} {path}"),
            Query::BitWidth(ty, path) => write!(f, "bit_width {ty} {path}"),
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
            ("bit_offset", Some(b)) => Query::BitOffset(a.into(), b.into()),
            ("bit_width", Some(b)) => Query::BitWidth(a.into(), b.into()),
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

    /// Where the member at `path` of struct or union `ty` lies, in bits:
    /// its offset and width (a bit field's own, or its type's size). For
    /// bit fields, which have no byte offset; like every answer, at most
    /// [`MAX_ANSWER`].
    pub fn member_bits(&self, ty: &str, path: &str) -> Result<(u64, u64), BtfError> {
        let offset = self.ask(Query::BitOffset(ty.into(), path.into()))?;
        let width = self.ask(Query::BitWidth(ty.into(), path.into()))?;
        Ok((offset as u64, width as u64))
    }

    /// The value of enumerator `name` (of any enum), e.g. `PIDTYPE_PID`.
    pub fn enum_value(&self, name: &str) -> Option<i64> {
        self.enumerator(name).ok()
    }

    /// [`Self::enum_value`], with why there is none: a warm start's
    /// recorded answers tell "not asked before" (`NotKept`) from "not in
    /// this kernel".
    pub fn enumerator(&self, name: &str) -> Result<i64, BtfError> {
        self.ask(Query::Enum(name.into()))
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
            match p.bitfield.is_some() || p.bits % 8 != 0 {
                true => Err(BtfError::BitField {
                    ty: ty.clone(),
                    path: path.clone(),
                }),
                false => Ok((p.bits / 8) as i64),
            }
        }
        Query::MemberSize(ty, path) => size(place(ty, path)?.ty, format!("{ty}.{path}")),
        Query::Size(ty) => size(composite(ty)?, ty.clone()),
        Query::BitOffset(ty, path) => Ok(place(ty, path)?.bits as i64),
        Query::BitWidth(ty, path) => {
            let p = place(ty, path)?;
            match p.bitfield {
                Some(width) => Ok(i64::from(width)),
                None => size(p.ty, format!("{ty}.{path}")).map(|bytes| bytes * 8),
            }
        }
        Query::Enum(name) => types
            .enum_value(name)
            .ok_or_else(|| BtfError::NoEnumerator(name.clone())),
    }
}

#[cfg(test)]
mod tests;
