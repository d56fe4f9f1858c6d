//! BTF made up for tests: structs whose members lie where a test says, so
//! that walks are shown to take every offset from BTF (the layouts made
//! here are not any kernel's); and BTF no compiler would make (types that
//! contain themselves, sizes past any kernel's), for the checks.

/// `BTF_KIND_*`.
pub const KIND_INT: u32 = 1;
pub const KIND_PTR: u32 = 2;
pub const KIND_ARRAY: u32 = 3;
pub const KIND_STRUCT: u32 = 4;
pub const KIND_UNION: u32 = 5;
pub const KIND_ENUM: u32 = 6;
pub const KIND_TYPEDEF: u32 = 8;
pub const KIND_VOLATILE: u32 = 9;
pub const KIND_CONST: u32 = 10;
pub const KIND_RESTRICT: u32 = 11;
pub const KIND_TYPE_TAG: u32 = 18;

/// Builds a BTF blob type by type.
pub(crate) struct BtfBuilder {
    types: Vec<u8>,
    strings: Vec<u8>,
    count: u32,
    long: u32,
}

impl BtfBuilder {
    /// A builder holding `long` (8 bytes) as type 1.
    pub fn new() -> BtfBuilder {
        let mut b = BtfBuilder {
            types: Vec::new(),
            strings: vec![0],
            count: 0,
            long: 0,
        };
        let name = b.string("long");
        b.long = b.push(&[name, KIND_INT << 24, 8, (1 << 24) | 64]);
        b
    }

    /// An integer type `name` of `bytes` bytes (unsigned): its id.
    pub fn int(&mut self, name: &str, bytes: u32) -> u32 {
        let name = self.string(name);
        self.push(&[name, KIND_INT << 24, bytes, bytes * 8])
    }

    /// Type 1, `long`.
    pub fn long(&self) -> u32 {
        self.long
    }

    /// The id the next type gets (for types that name themselves).
    pub fn next_id(&self) -> u32 {
        self.count + 1
    }

    /// `s` in the string section; "" is offset 0 (no name).
    pub fn string(&mut self, s: &str) -> u32 {
        if s.is_empty() {
            return 0;
        }
        let at = self.strings.len() as u32;
        self.strings.extend(s.as_bytes());
        self.strings.push(0);
        at
    }

    /// A record of raw words: its id.
    pub fn push(&mut self, words: &[u32]) -> u32 {
        words
            .iter()
            .for_each(|w| self.types.extend(w.to_le_bytes()));
        self.count += 1;
        self.count
    }

    /// An array of `n` longs.
    pub fn array(&mut self, n: u32) -> u32 {
        self.array_of(self.long, n)
    }

    /// An array of `n` of type `element`.
    pub fn array_of(&mut self, element: u32, n: u32) -> u32 {
        self.push(&[0, KIND_ARRAY << 24, 0, element, self.long, n])
    }

    /// A type of `kind` naming `target` (a typedef, modifier, type tag or
    /// pointer), named `name` ("" for none).
    pub fn alias(&mut self, kind: u32, name: &str, target: u32) -> u32 {
        let name = self.string(name);
        self.push(&[name, kind << 24, target])
    }

    /// A struct or union (`kind`) of `size` bytes with members (name, "" for
    /// an anonymous one; type; byte offset): its id.
    pub fn composite(
        &mut self,
        kind: u32,
        name: &str,
        size: u32,
        members: &[(&str, u32, u64)],
    ) -> u32 {
        let name = self.string(name);
        let mut words = vec![name, (kind << 24) | members.len() as u32, size];
        for &(member, ty, at) in members {
            let member = self.string(member);
            words.extend([member, ty, (at * 8) as u32]);
        }
        self.push(&words)
    }

    /// A struct of `size` bytes with bit fields (the kind flag set):
    /// members (name; type; offset in bits; width in bits, 0 for a member
    /// that is no bit field).
    pub fn composite_bits(
        &mut self,
        name: &str,
        size: u32,
        members: &[(&str, u32, u32, u32)],
    ) -> u32 {
        let name = self.string(name);
        let info = (1 << 31) | (KIND_STRUCT << 24) | members.len() as u32;
        let mut words = vec![name, info, size];
        for &(member, ty, bits, width) in members {
            let member = self.string(member);
            words.extend([member, ty, (width << 24) | bits]);
        }
        self.push(&words)
    }

    /// `struct name` of `size` bytes whose members (each a long unless an
    /// array's type id is given) lie at the given byte offsets.
    pub fn structure(&mut self, name: &str, size: u32, members: &[(&str, u64)]) -> &mut Self {
        self.structure_typed(
            name,
            size,
            &members
                .iter()
                .map(|&(m, at)| (m, at, 0))
                .collect::<Vec<_>>(),
        )
    }

    /// The same with a type per member (0 for long).
    pub fn structure_typed(
        &mut self,
        name: &str,
        size: u32,
        members: &[(&str, u64, u32)],
    ) -> &mut Self {
        let name = self.string(name);
        let mut words = vec![name, (KIND_STRUCT << 24) | members.len() as u32, size];
        for &(member, at, ty) in members {
            let member = self.string(member);
            let ty = if ty == 0 { self.long } else { ty };
            words.extend([member, ty, (at * 8) as u32]);
        }
        self.push(&words);
        self
    }

    /// `enum name` with its values.
    pub fn enumeration(&mut self, name: &str, values: &[(&str, i32)]) -> &mut Self {
        let name = self.string(name);
        let mut words = vec![name, (KIND_ENUM << 24) | values.len() as u32, 4];
        for &(value, v) in values {
            let value = self.string(value);
            words.extend([value, v as u32]);
        }
        self.push(&words);
        self
    }

    /// The string section's bytes, to damage.
    pub fn strings_mut(&mut self) -> &mut Vec<u8> {
        &mut self.strings
    }

    /// The blob: header, types, strings.
    pub fn finish(&self) -> Vec<u8> {
        let mut blob = Vec::new();
        blob.extend(0xeb9fu16.to_le_bytes());
        blob.extend([1, 0]);
        for v in [
            24,
            0,
            self.types.len() as u32,
            self.types.len() as u32,
            self.strings.len() as u32,
        ] {
            blob.extend(v.to_le_bytes());
        }
        blob.extend(&self.types);
        blob.extend(&self.strings);
        blob
    }
}
