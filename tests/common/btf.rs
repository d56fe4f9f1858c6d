//! The struct and union layouts of a kernel's BTF, read by this test code
//! on its own (the format is in the kernel's `Documentation/bpf/btf.rst`):
//! what the library's BTF parser says is checked against it.

use std::collections::BTreeMap;

/// The size and the named members of a struct or union.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub size: u32,
    /// Each named member and its byte offset; `None` for a bit field.
    pub members: Vec<(String, Option<u32>)>,
}

impl Layout {
    /// The byte offset of member `name`: `None` when it has none or is a
    /// bit field.
    pub fn offset(&self, name: &str) -> Option<u64> {
        self.members
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, offset)| offset.map(u64::from))
    }
}

/// One type: the kind, the `size`/`type` word, and a struct's or union's
/// members as (name, type id, byte offset or `None` for a bit field).
struct Type {
    kind: u32,
    name: String,
    size_or_type: u32,
    members: Vec<(String, u32, Option<u32>)>,
}

/// Every struct and union of `btf` (from its header to the end of its
/// strings) by name, leaving out names that more than one of them has
/// (which of those a lookup by name gives is not defined). Members of
/// anonymous structs and unions are listed as their parent's, as C names
/// them. Panics on anything it cannot read: the bytes are a real kernel's.
pub fn layouts(btf: &[u8]) -> BTreeMap<String, Layout> {
    let types = types(btf);
    let mut found: BTreeMap<String, Vec<Layout>> = BTreeMap::new();
    for ty in &types {
        if (ty.kind == STRUCT || ty.kind == UNION) && !ty.name.is_empty() {
            let mut members = Vec::new();
            flatten(&types, ty, 0, &mut members);
            found.entry(ty.name.clone()).or_default().push(Layout {
                size: ty.size_or_type,
                members,
            });
        }
    }
    found
        .into_iter()
        .filter_map(|(name, mut layouts)| (layouts.len() == 1).then(|| (name, layouts.remove(0))))
        .collect()
}

const STRUCT: u32 = 4;
const UNION: u32 = 5;

/// The named members of `ty` at `base` bytes, those of its anonymous
/// struct and union members included.
fn flatten(types: &[Type], ty: &Type, base: u32, out: &mut Vec<(String, Option<u32>)>) {
    for (name, id, offset) in &ty.members {
        let offset = offset.map(|o| o + base);
        if !name.is_empty() {
            out.push((name.clone(), offset));
            continue;
        }
        // Through const, volatile and the like to the struct or union.
        let mut inner = &types[*id as usize];
        while matches!(inner.kind, 9 | 10 | 11 | 18) {
            inner = &types[inner.size_or_type as usize];
        }
        if let (Some(offset), STRUCT | UNION) = (offset, inner.kind) {
            flatten(types, inner, offset, out);
        }
    }
}

/// The types of `btf`, indexed by id (id 0, `void`, is a placeholder).
fn types(btf: &[u8]) -> Vec<Type> {
    let word = |at: usize| u32::from_le_bytes(btf[at..at + 4].try_into().unwrap());
    assert_eq!(&btf[..4], [0x9f, 0xeb, 1, 0], "BTF magic, version 1");
    let header_len = word(4) as usize;
    let (type_off, type_len) = (word(8) as usize, word(12) as usize);
    let (str_off, str_len) = (word(16) as usize, word(20) as usize);
    let section = header_len + type_off..header_len + type_off + type_len;
    let strings = &btf[header_len + str_off..header_len + str_off + str_len];
    let name = |offset: u32| {
        let tail = &strings[offset as usize..];
        let end = tail.iter().position(|&b| b == 0).expect("a NUL");
        String::from_utf8(tail[..end].to_vec()).expect("a UTF-8 name")
    };
    let mut types = vec![Type {
        kind: 0,
        name: String::new(),
        size_or_type: 0,
        members: Vec::new(),
    }];
    let mut at = section.start;
    while at < section.end {
        let (name_off, info, size_or_type) = (word(at), word(at + 4), word(at + 8));
        let kind = (info >> 24) & 0x1f;
        let vlen = (info & 0xffff) as usize;
        let kind_flag = info >> 31 == 1;
        at += 12;
        let mut members = Vec::new();
        if kind == STRUCT || kind == UNION {
            for i in 0..vlen {
                let m = at + 12 * i;
                let offset = word(m + 8);
                // With kind_flag: a bit field's size in the top byte.
                let (bits, field) = if kind_flag {
                    (offset & 0xff_ffff, offset >> 24)
                } else {
                    (offset, 0)
                };
                let byte = (bits % 8 == 0 && field == 0).then_some(bits / 8);
                members.push((name(word(m)), word(m + 4), byte));
            }
        }
        // What follows the common part, by kind.
        at += match kind {
            2 | 7 | 8 | 9 | 10 | 11 | 12 | 16 | 18 => 0,
            1 | 14 | 17 => 4,
            3 => 12,
            STRUCT | UNION | 15 | 19 => 12 * vlen,
            6 | 13 => 8 * vlen,
            _ => panic!("BTF kind {kind} at type offset {}", at - 12 - section.start),
        };
        types.push(Type {
            kind,
            name: name(name_off),
            size_or_type,
            members,
        });
    }
    assert_eq!(at, section.end, "the last type runs past the type section");
    types
}
