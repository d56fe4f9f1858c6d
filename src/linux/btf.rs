//! The kernel's BTF: where it lies, its header checked, and its types
//! parsed by the `btfparse` crate.

use std::fmt;
use std::path::Path;

use btfparse::{Offset, Readable, TypeInformation, TypeVariant};

/// BTF's magic number, little endian (`BTF_MAGIC`).
const MAGIC: u16 = 0xeb9f;
/// The only BTF version there is.
const VERSION: u8 = 1;
/// Length of the header this code knows (`struct btf_header`).
const HEADER_LEN: u32 = 24;

/// A BTF header whose fields make sense: magic, version, length, and type
/// and string sections that lie after it, in order, within `available`
/// bytes.
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

/// Why BTF could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BtfError {
    /// The bytes do not start with a sane BTF header.
    #[error(
        "not BTF: no valid header (magic 0xeb9f, version 1, 24-byte header, sections in bounds)"
    )]
    BadHeader,
    /// The parser refused the types.
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
        /// The parser's reason.
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
}

/// Parsed kernel types: the layouts the walk reads structures by.
pub struct Btf {
    types: TypeInformation,
    header: Header,
    len: usize,
}

impl fmt::Debug for Btf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Btf")
            .field("header", &self.header)
            .field("types", &self.types.get().len())
            .finish()
    }
}

/// The crate reads through this; a read past the end is an error, never a
/// panic, so memory that only looks like BTF is refused cleanly.
struct Bytes<'a>(&'a [u8]);

impl Readable for Bytes<'_> {
    fn read(&self, offset: u64, buffer: &mut [u8]) -> btfparse::Result<()> {
        let src = usize::try_from(offset)
            .ok()
            .and_then(|start| self.0.get(start..start.checked_add(buffer.len())?));
        match src {
            Some(src) => {
                buffer.copy_from_slice(src);
                Ok(())
            }
            None => Err(btfparse::Error::new(
                btfparse::ErrorKind::EOF,
                "read past the end of the BTF bytes",
            )),
        }
    }
}

impl Btf {
    /// Parses BTF that starts at `bytes[0]` (any bytes after its string
    /// section are ignored), checking its header first.
    pub fn parse(bytes: &[u8]) -> Result<Btf, BtfError> {
        let header = Header::parse(bytes).ok_or(BtfError::BadHeader)?;
        let len = header.total_len();
        let types = TypeInformation::new(&Bytes(&bytes[..len]))
            .map_err(|e| BtfError::Parse(e.message().to_string()))?;
        if types.get().is_empty() {
            return Err(BtfError::Parse("no types".into()));
        }
        Ok(Btf { types, header, len })
    }

    /// Parses a BTF file, such as `/sys/kernel/btf/vmlinux` copied off the
    /// target.
    pub fn from_file(path: &Path) -> Result<Btf, BtfError> {
        let file = |reason: String| BtfError::File {
            path: path.display().to_string(),
            reason,
        };
        let meta = std::fs::metadata(path).map_err(|e| file(e.to_string()))?;
        // A kernel's BTF is a few MiB; refuse pipes and devices (which
        // could make reading wait for ever) and anything huge.
        if !meta.is_file() || meta.len() > 1 << 30 {
            return Err(file("not a regular file of at most 1 GiB".into()));
        }
        let bytes = std::fs::read(path).map_err(|e| file(e.to_string()))?;
        Btf::parse(&bytes)
    }

    /// The header it was parsed from.
    pub fn header(&self) -> Header {
        self.header
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
        self.types.get().len()
    }

    /// The id of the struct or union `name` (not a typedef, function or
    /// variable of the same name).
    fn composite(&self, name: &str) -> Result<(u32, &TypeVariant), BtfError> {
        let is_named = |tv: &TypeVariant| match tv {
            TypeVariant::Struct(s) => s.name().as_deref() == Some(name),
            TypeVariant::Union(u) => u.name().as_deref() == Some(name),
            _ => false,
        };
        if let Some(id) = self.types.id_of(name) {
            if let Some(tv) = self.types.get().get(&id).filter(|tv| is_named(tv)) {
                return Ok((id, tv));
            }
        }
        self.types
            .get()
            .iter()
            .find(|(_, tv)| is_named(tv))
            .map(|(id, tv)| (*id, tv))
            .ok_or_else(|| BtfError::NoType(name.to_string()))
    }

    /// Byte offset of a member of struct or union `ty`: `path` is a member
    /// name, or a path through nested members and arrays such as
    /// `numbers[0].ns` (not through pointers).
    pub fn member_offset(&self, ty: &str, path: &str) -> Result<u64, BtfError> {
        let (id, _) = self.composite(ty)?;
        let (_, offset) = self
            .types
            .offset_of(id, path)
            .map_err(|e| BtfError::NoMember {
                ty: ty.to_string(),
                path: path.to_string(),
                reason: e.message().to_string(),
            })?;
        match offset {
            Offset::ByteOffset(bytes) => Ok(u64::from(bytes)),
            Offset::BitOffsetAndSize(..) => Err(BtfError::BitField {
                ty: ty.to_string(),
                path: path.to_string(),
            }),
        }
    }

    /// Size in bytes of the member at `path` in struct or union `ty` (an
    /// array's whole size; 0 for a flexible array).
    pub fn member_size(&self, ty: &str, path: &str) -> Result<u64, BtfError> {
        let (id, _) = self.composite(ty)?;
        let no_member = |e: btfparse::Error| BtfError::NoMember {
            ty: ty.to_string(),
            path: path.to_string(),
            reason: e.message().to_string(),
        };
        let (member, _) = self.types.offset_of(id, path).map_err(no_member)?;
        let size = self.types.size_of(member).map_err(no_member)?;
        Ok(size as u64)
    }

    /// Size in bytes of struct or union `ty`.
    pub fn size_of(&self, ty: &str) -> Result<u64, BtfError> {
        match self.composite(ty)?.1 {
            TypeVariant::Struct(s) => Ok(*s.size() as u64),
            TypeVariant::Union(u) => Ok(*u.size() as u64),
            _ => Err(BtfError::NoType(ty.to_string())),
        }
    }

    /// The value of enumerator `name` (of any enum), e.g. `PIDTYPE_PID`.
    pub fn enum_value(&self, name: &str) -> Option<i64> {
        self.types.get().values().find_map(|tv| match tv {
            TypeVariant::Enum(e) => e
                .named_value_list()
                .iter()
                .find(|v| v.name == name)
                .map(|v| match v.value {
                    btfparse::Integer32Value::Signed(x) => i64::from(x),
                    btfparse::Integer32Value::Unsigned(x) => i64::from(x),
                }),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
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
        assert!(matches!(Btf::parse(&blob), Err(BtfError::Parse(_))));
    }
}
