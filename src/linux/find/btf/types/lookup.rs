//! The questions the walks ask of checked types: a struct by name, a
//! type's size, a member path's place, an enumerator's value. Each relies
//! on the checks of the parent module, so none needs a limit of its own.

use super::*;

impl Types {
    /// `id` with its aliases looked through.
    fn resolve(&self, mut id: u32) -> u32 {
        // Chains are at most MAX_DEPTH long, and acyclic.
        while is_alias(self.kind(id)) {
            id = self.size_or_type(id);
        }
        id
    }

    /// The first struct or union named `name`.
    pub fn composite(&self, name: &str) -> Option<u32> {
        self.composites.get(name.as_bytes()).copied()
    }

    /// Size in bytes of type `id` (`None` when it has none).
    pub fn size_of(&self, id: u32) -> Option<u64> {
        Some(self.size(id)).filter(|&s| s != NO_SIZE)
    }

    /// Member `name` of struct or union `id` (resolved), looking inside
    /// anonymous members as C does.
    fn find_member(&self, id: u32, name: &[u8]) -> Option<Member> {
        for i in 0..self.vlen(id) {
            let m = self.member(id, i);
            if m.name != 0 {
                if self.string(m.name) == name {
                    return Some(m);
                }
                continue;
            }
            let inner = self.resolve(m.ty);
            if is_composite(self.kind(inner)) {
                if let Some(found) = self.find_member(inner, name) {
                    return Some(Member {
                        bits: m.bits + found.bits,
                        ..found
                    });
                }
            }
        }
        None
    }

    /// Where `path` (`a`, `a.b`, `a[2].b`) leads from struct or union
    /// `id`; the reason when it leads nowhere.
    pub fn place(&self, id: u32, path: &str) -> Result<Place, String> {
        let mut place = Place {
            ty: id,
            bits: 0,
            bitfield: None,
        };
        if path.is_empty() {
            return Err("an empty member path".into());
        }
        for part in path.split('.') {
            let (name, mut indices) = match part.find('[') {
                Some(at) => (&part[..at], &part[at..]),
                None => (part, ""),
            };
            let ty = self.resolve(place.ty);
            if !is_composite(self.kind(ty)) {
                return Err(format!(
                    "{name} is asked of a type that is not a struct or union"
                ));
            }
            let m = self
                .find_member(ty, name.as_bytes())
                .ok_or_else(|| format!("no member {name}"))?;
            place = Place {
                ty: m.ty,
                bits: place.bits + m.bits,
                bitfield: m.bitfield,
            };
            while !indices.is_empty() {
                let close = indices.find(']').ok_or("an unclosed [")?;
                let index: u64 = indices[1..close]
                    .parse()
                    .map_err(|_| format!("a bad index {:?}", &indices[1..close]))?;
                indices = &indices[close + 1..];
                if !indices.is_empty() && !indices.starts_with('[') {
                    return Err(format!("text after an index: {indices:?}"));
                }
                let array = self.resolve(place.ty);
                if self.kind(array) != KIND_ARRAY {
                    return Err(format!("{name} is not an array"));
                }
                let count = u64::from(self.extra(array, 2));
                if index >= count {
                    return Err(format!("index {index} is past {name}'s {count} elements"));
                }
                let element = self.extra(array, 0);
                // Sizes are capped, so this cannot overflow.
                place.bits += index * self.size(element) * 8;
                place.ty = element;
            }
        }
        Ok(place)
    }

    /// The value of enumerator `name` of any enum.
    pub fn enum_value(&self, name: &str) -> Option<i64> {
        let name = name.as_bytes();
        (1..=self.count()).find_map(|id| {
            let signed = self.kind_flag(id);
            match self.kind(id) {
                KIND_ENUM => (0..self.vlen(id))
                    .find(|&i| self.string(self.extra(id, 2 * i)) == name)
                    .map(|i| {
                        let v = self.extra(id, 2 * i + 1);
                        match signed {
                            true => i64::from(v as i32),
                            false => i64::from(v),
                        }
                    }),
                KIND_ENUM64 => (0..self.vlen(id))
                    .find(|&i| self.string(self.extra(id, 3 * i)) == name)
                    .map(|i| {
                        let v = u64::from(self.extra(id, 3 * i + 1))
                            | u64::from(self.extra(id, 3 * i + 2)) << 32;
                        v as i64
                    }),
                _ => None,
            }
        })
    }
}
