//! BTF made to break each rule of the module's documentation, and what
//! the reader answers of BTF that keeps them.

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
        format!(
            "type {own} contains itself (through typedefs, modifiers, arrays or anonymous members)"
        )
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
    assert!(
        refusal(&b.finish()).starts_with("struct or union huge (type 2) claims 4294967295 bytes")
    );
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

#[test]
fn bit_fields_are_answered_in_bits_and_have_no_byte_offset() {
    let mut b = super::builder::BtfBuilder::new();
    let byte = b.int("u8", 1);
    b.composite_bits(
        "info",
        4,
        &[
            ("facility", byte, 16, 0),
            ("flags", byte, 24, 5),
            ("level", byte, 29, 3),
        ],
    );
    let btf = Btf::parse(&b.finish()).unwrap();
    assert_eq!(btf.member_offset("info", "facility"), Ok(2));
    assert_eq!(btf.member_bits("info", "facility"), Ok((16, 8)));
    assert_eq!(btf.member_bits("info", "level"), Ok((29, 3)));
    assert_eq!(
        btf.member_offset("info", "level"),
        Err(BtfError::BitField {
            ty: "info".into(),
            path: "level".into()
        })
    );
    // Kept as any answer is, and read back from a cache's text.
    let answers = btf.answers();
    assert!(answers.contains_key(&Query::BitOffset("info".into(), "level".into())));
    for q in answers.keys() {
        assert_eq!(Query::parse(&q.to_string()).as_ref(), Some(q));
    }
    let recorded = Btf::recorded(answers, btf.len(), btf.type_count()).unwrap();
    assert_eq!(recorded.member_bits("info", "level"), Ok((29, 3)));
}
