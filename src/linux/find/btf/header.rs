//! BTF's header (`struct btf_header`), checked before anything behind it
//! is read, and found by its shape in kernel memory.

use super::MAX_BTF;

/// BTF's magic number, little endian (`BTF_MAGIC`).
const MAGIC: u16 = 0xeb9f;
/// The only BTF version there is.
const VERSION: u8 = 1;
/// Length of the header this code knows (`struct btf_header`).
pub(super) const HEADER_LEN: u32 = 24;

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
