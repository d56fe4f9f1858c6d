//! The type and string sections of a BTF blob, checked whole before any
//! question is answered, and the questions the walks ask of them. The
//! rules and caps are the parent module's; every lookup here relies on
//! them (a bounded chain of typedefs, a bounded search through anonymous
//! members, sizes that fit), so none needs a limit of its own.

mod lookup;

use rustc_hash::FxHashMap;

use super::{
    MAX_BTF, MAX_COMPOSITE, MAX_DEPTH, MAX_NAME, MAX_SEARCH, MAX_TYPES, MAX_TYPE_SIZE, POINTER_SIZE,
};

const KIND_INT: u8 = 1;
const KIND_PTR: u8 = 2;
const KIND_ARRAY: u8 = 3;
const KIND_STRUCT: u8 = 4;
const KIND_UNION: u8 = 5;
const KIND_ENUM: u8 = 6;
const KIND_FWD: u8 = 7;
const KIND_TYPEDEF: u8 = 8;
const KIND_VOLATILE: u8 = 9;
const KIND_CONST: u8 = 10;
const KIND_RESTRICT: u8 = 11;
const KIND_FUNC: u8 = 12;
const KIND_FUNC_PROTO: u8 = 13;
const KIND_VAR: u8 = 14;
const KIND_DATASEC: u8 = 15;
const KIND_FLOAT: u8 = 16;
const KIND_DECL_TAG: u8 = 17;
const KIND_TYPE_TAG: u8 = 18;
const KIND_ENUM64: u8 = 19;
/// The bits of `info` that mean something (`BTF_INFO_MASK`): vlen, kind,
/// kind_flag; the kernel refuses BTF with any other set.
const INFO_MASK: u32 = 0x9f00_ffff;
/// A type record's fixed part: name, info, size or type.
const RECORD: usize = 12;
/// Marks a type with no size (void, functions, forward declarations).
const NO_SIZE: u64 = u64::MAX;

/// Whether a type of this kind only names another (`typedef`, `const`,
/// `volatile`, `restrict`, a type tag): what a lookup looks through.
fn is_alias(kind: u8) -> bool {
    matches!(
        kind,
        KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG
    )
}

fn is_composite(kind: u8) -> bool {
    kind == KIND_STRUCT || kind == KIND_UNION
}

/// Bytes of a record after its fixed part, by kind and `vlen`; `None` for
/// a kind BTF does not have.
fn extra_len(kind: u8, vlen: usize) -> Option<usize> {
    Some(match kind {
        KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
        KIND_ARRAY => 12,
        KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => 12 * vlen,
        KIND_ENUM | KIND_FUNC_PROTO => 8 * vlen,
        KIND_PTR | KIND_FWD | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT
        | KIND_FUNC | KIND_FLOAT | KIND_TYPE_TAG => 0,
        _ => return None,
    })
}

/// A struct or union member as the lookups see it.
#[derive(Debug, Clone, Copy)]
struct Member {
    name: u32,
    ty: u32,
    /// Offset from the start of its struct, in bits.
    bits: u64,
    /// Width in bits when it is a bit field.
    bitfield: Option<u32>,
}

/// Where a member path ends: its type and its offset in bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Place {
    /// The member's type.
    pub ty: u32,
    /// Offset from the start of the struct asked about, in bits.
    pub bits: u64,
    /// Its width in bits when it is a bit field.
    pub bitfield: Option<u32>,
}

/// Checked types: the blob's sections, where each record starts, and each
/// type's size.
pub(super) struct Types {
    /// The type section.
    types: Vec<u8>,
    /// The string section (its last byte a NUL).
    strings: Vec<u8>,
    /// Start of type `id`'s record in `types`, at `id - 1`.
    starts: Vec<u32>,
    /// Size of type `id` in bytes, at `id - 1` ([`NO_SIZE`] when it has
    /// none).
    sizes: Vec<u64>,
    /// The first struct or union of each name.
    composites: FxHashMap<Box<[u8]>, u32>,
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

impl Types {
    /// Checks `types` and `strings` (the blob's two sections) against
    /// every rule, and indexes them; the error names the first rule
    /// broken and where.
    pub fn new(types: &[u8], strings: &[u8]) -> Result<Types, String> {
        if types.len() + strings.len() > MAX_BTF {
            return Err(format!("over {} MiB", MAX_BTF >> 20));
        }
        if strings.last() != Some(&0) {
            return Err("its string section does not end with a NUL".into());
        }
        let mut t = Types {
            types: types.to_vec(),
            strings: strings.to_vec(),
            starts: Vec::new(),
            sizes: Vec::new(),
            composites: FxHashMap::default(),
        };
        t.index()?;
        t.check_references()?;
        t.check_graph()?;
        t.check_members()?;
        for id in (1..=t.count()).rev() {
            if is_composite(t.kind(id)) {
                let name = t.string(t.name_of(id)).into();
                t.composites.insert(name, id);
            }
        }
        Ok(t)
    }

    /// How many types there are (ids 1 to this).
    pub fn count(&self) -> u32 {
        self.starts.len() as u32
    }

    fn start(&self, id: u32) -> usize {
        self.starts[id as usize - 1] as usize
    }

    fn kind(&self, id: u32) -> u8 {
        if id == 0 {
            return 0;
        }
        ((u32_at(&self.types, self.start(id) + 4) >> 24) & 0x1f) as u8
    }

    fn vlen(&self, id: u32) -> usize {
        (u32_at(&self.types, self.start(id) + 4) & 0xffff) as usize
    }

    fn kind_flag(&self, id: u32) -> bool {
        u32_at(&self.types, self.start(id) + 4) >> 31 != 0
    }

    /// The record's third word: a size or a type, by kind.
    fn size_or_type(&self, id: u32) -> u32 {
        u32_at(&self.types, self.start(id) + 8)
    }

    fn name_of(&self, id: u32) -> u32 {
        u32_at(&self.types, self.start(id))
    }

    /// The `i`th word after the record's fixed part.
    fn extra(&self, id: u32, i: usize) -> u32 {
        u32_at(&self.types, self.start(id) + RECORD + 4 * i)
    }

    /// The string at `offset` (checked when indexed: in bounds, ended
    /// within [`MAX_NAME`] bytes).
    fn string(&self, offset: u32) -> &[u8] {
        let s = &self.strings[offset as usize..];
        &s[..s.iter().position(|&c| c == 0).unwrap_or(s.len())]
    }

    /// Whether the string at `offset` lies in the section, NUL-terminated
    /// within [`MAX_NAME`] bytes.
    fn check_string(&self, offset: u32, what: &str) -> Result<(), String> {
        let s = self
            .strings
            .get(offset as usize..)
            .ok_or_else(|| format!("{what}'s name at {offset:#x} lies past the strings"))?;
        match s.iter().take(MAX_NAME).position(|&c| c == 0) {
            Some(_) => Ok(()),
            None => Err(format!(
                "{what}'s name at {offset:#x} is not ended within {MAX_NAME} bytes"
            )),
        }
    }

    /// Splits the type section into records, checking each one's kind,
    /// info bits, length and names.
    fn index(&mut self) -> Result<(), String> {
        let mut at = 0;
        while at < self.types.len() {
            let id = self.starts.len() + 1;
            if id > MAX_TYPES {
                return Err(format!("more than {MAX_TYPES} types"));
            }
            let fixed = self
                .types
                .get(at..at + RECORD)
                .ok_or_else(|| format!("type {id} is cut off at the end of the type section"))?;
            let info = u32_at(fixed, 4);
            if info & !INFO_MASK != 0 {
                return Err(format!("type {id} has unknown info bits ({info:#x})"));
            }
            let kind = ((info >> 24) & 0x1f) as u8;
            let vlen = (info & 0xffff) as usize;
            let extra = extra_len(kind, vlen)
                .ok_or_else(|| format!("type {id} has unknown kind {kind}"))?;
            if at + RECORD + extra > self.types.len() {
                return Err(format!(
                    "type {id} ({vlen} entries) runs past the end of the type section"
                ));
            }
            self.starts.push(at as u32);
            at += RECORD + extra;
            let id = id as u32;
            self.check_string(self.name_of(id), &format!("type {id}"))?;
            let named_entries = match kind {
                KIND_STRUCT | KIND_UNION => Some(3),
                KIND_ENUM | KIND_FUNC_PROTO => Some(2),
                KIND_ENUM64 => Some(3),
                _ => None,
            };
            if let Some(words) = named_entries {
                for i in 0..vlen {
                    self.check_string(
                        self.extra(id, words * i),
                        &format!("type {id}'s entry {i}"),
                    )?;
                }
            }
        }
        if self.starts.is_empty() {
            return Err("no types".into());
        }
        Ok(())
    }

    /// Every type a record names exists (0, void, only where C allows it).
    fn check_references(&self) -> Result<(), String> {
        let count = self.count();
        let check = |id: u32, target: u32, void_ok: bool| {
            if target > count || (target == 0 && !void_ok) {
                Err(format!("type {id} refers to type {target}, of {count}"))
            } else {
                Ok(())
            }
        };
        for id in 1..=count {
            let vlen = self.vlen(id);
            match self.kind(id) {
                KIND_PTR | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT
                | KIND_TYPE_TAG | KIND_FUNC_PROTO => check(id, self.size_or_type(id), true)?,
                KIND_FUNC | KIND_VAR | KIND_DECL_TAG => check(id, self.size_or_type(id), false)?,
                KIND_ARRAY => {
                    check(id, self.extra(id, 0), false)?;
                    check(id, self.extra(id, 1), false)?;
                }
                _ => {}
            }
            let (words, at) = match self.kind(id) {
                KIND_STRUCT | KIND_UNION => (3, 1),
                KIND_FUNC_PROTO => (2, 1),
                KIND_DATASEC => (3, 0),
                _ => continue,
            };
            for i in 0..vlen {
                // A prototype's `...` is a last parameter of type void.
                let void_ok = self.kind(id) == KIND_FUNC_PROTO;
                check(id, self.extra(id, words * i + at), void_ok)?;
            }
        }
        Ok(())
    }

    /// Entry `i` of the types a lookup goes on to from `id` without a
    /// read (what an alias names, an array's element, a struct's
    /// anonymous members): `None` past the last, `Some(None)` for an entry
    /// that leads nowhere (a named member, void).
    fn next_type(&self, id: u32, i: usize) -> Option<Option<u32>> {
        let to = match self.kind(id) {
            k if is_alias(k) && i == 0 => self.size_or_type(id),
            KIND_ARRAY if i == 0 => self.extra(id, 0),
            KIND_STRUCT | KIND_UNION if i < self.vlen(id) => match self.extra(id, 3 * i) {
                0 => self.extra(id, 3 * i + 1),
                _ => 0,
            },
            _ => return None,
        };
        Some(Some(to).filter(|&t| t != 0))
    }

    /// No cycle through aliases, arrays or anonymous members; chains of
    /// them at most [`MAX_DEPTH`] deep; a member search at most
    /// [`MAX_SEARCH`] members; and every type's size, in one depth-first
    /// pass with its own stack (no recursion a hostile blob could deepen).
    fn check_graph(&mut self) -> Result<(), String> {
        const NEW: u8 = 0;
        const OPEN: u8 = 1;
        const DONE: u8 = 2;
        let count = self.count() as usize;
        let mut state = vec![NEW; count + 1];
        let mut depth = vec![0u32; count + 1];
        // Members a search for a name in this type may look at.
        let mut search = vec![0u64; count + 1];
        self.sizes = vec![NO_SIZE; count];
        let mut stack: Vec<(u32, usize)> = Vec::new();
        for root in 1..=count as u32 {
            if state[root as usize] != NEW {
                continue;
            }
            state[root as usize] = OPEN;
            stack.push((root, 0));
            while let Some(&(id, i)) = stack.last() {
                if let Some(to) = self.next_type(id, i) {
                    stack.last_mut().expect("not empty").1 += 1;
                    match to.map(|t| (t, state[t as usize])) {
                        Some((t, NEW)) => {
                            state[t as usize] = OPEN;
                            stack.push((t, 0));
                        }
                        Some((t, OPEN)) => {
                            return Err(format!(
                                "type {t} contains itself (through typedefs, modifiers, arrays or anonymous members)"
                            ))
                        }
                        _ => {}
                    }
                    continue;
                }
                stack.pop();
                state[id as usize] = DONE;
                let next = (0..).map_while(|i| self.next_type(id, i)).flatten();
                let d = 1 + next.clone().map(|t| depth[t as usize]).max().unwrap_or(0);
                if d > MAX_DEPTH {
                    return Err(format!(
                        "type {id} is a chain of more than {MAX_DEPTH} typedefs, modifiers, arrays or anonymous members"
                    ));
                }
                depth[id as usize] = d;
                let kind = self.kind(id);
                search[id as usize] = match kind {
                    KIND_STRUCT | KIND_UNION => {
                        self.vlen(id) as u64 + next.map(|t| search[t as usize]).sum::<u64>()
                    }
                    k if is_alias(k) => next.map(|t| search[t as usize]).sum(),
                    _ => 0,
                };
                if search[id as usize] > MAX_SEARCH {
                    return Err(format!(
                        "a member search in type {id} would look at more than {MAX_SEARCH} members"
                    ));
                }
                let size = self.own_size(id)?;
                self.sizes[id as usize - 1] = size;
            }
        }
        Ok(())
    }

    /// Type `id`'s size from its record and its next types' (already
    /// known); an error when over the caps.
    fn own_size(&self, id: u32) -> Result<u64, String> {
        let size = match self.kind(id) {
            KIND_STRUCT | KIND_UNION => {
                let size = u64::from(self.size_or_type(id));
                if size > MAX_COMPOSITE {
                    return Err(format!(
                        "struct or union {} (type {id}) claims {size} bytes, over the {} MiB a kernel's largest is far below",
                        String::from_utf8_lossy(self.string(self.name_of(id))),
                        MAX_COMPOSITE >> 20
                    ));
                }
                size
            }
            KIND_INT | KIND_ENUM | KIND_ENUM64 | KIND_FLOAT => u64::from(self.size_or_type(id)),
            KIND_PTR => POINTER_SIZE,
            KIND_ARRAY => {
                let element = self.size(self.extra(id, 0));
                if element == NO_SIZE {
                    return Err(format!("array type {id} has elements with no size"));
                }
                let size = element
                    .checked_mul(u64::from(self.extra(id, 2)))
                    .filter(|&s| s <= MAX_TYPE_SIZE)
                    .ok_or_else(|| format!("array type {id} is over {MAX_TYPE_SIZE} bytes"))?;
                size
            }
            k if is_alias(k) => self.size(self.size_or_type(id)),
            _ => NO_SIZE,
        };
        if size != NO_SIZE && size > MAX_TYPE_SIZE {
            return Err(format!("type {id} claims {size} bytes"));
        }
        Ok(size)
    }

    /// Type `id`'s size in bytes ([`NO_SIZE`] for void and types with
    /// none).
    fn size(&self, id: u32) -> u64 {
        match id {
            0 => NO_SIZE,
            _ => self.sizes[id as usize - 1],
        }
    }

    fn member(&self, id: u32, i: usize) -> Member {
        let offset = self.extra(id, 3 * i + 2);
        let (bits, bitfield) = match self.kind_flag(id) {
            true => (offset & 0xff_ffff, Some(offset >> 24).filter(|&b| b != 0)),
            false => (offset, None),
        };
        Member {
            name: self.extra(id, 3 * i),
            ty: self.extra(id, 3 * i + 1),
            bits: u64::from(bits),
            bitfield,
        }
    }

    /// Every member lies inside its struct or union, and has a size.
    fn check_members(&self) -> Result<(), String> {
        for id in (1..=self.count()).filter(|&id| is_composite(self.kind(id))) {
            let struct_bits = u64::from(self.size_or_type(id)) * 8;
            for i in 0..self.vlen(id) {
                let m = self.member(id, i);
                let size = self.size(m.ty);
                if size == NO_SIZE {
                    return Err(format!("member {i} of type {id} has a type with no size"));
                }
                let width = m.bitfield.map_or(size * 8, u64::from);
                if m.bits + width > struct_bits {
                    return Err(format!(
                        "member {} of type {id} ends at bit {}, past its {struct_bits}-bit struct",
                        String::from_utf8_lossy(self.string(m.name)),
                        m.bits + width
                    ));
                }
            }
        }
        Ok(())
    }
}
