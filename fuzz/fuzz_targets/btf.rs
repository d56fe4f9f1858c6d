//! BTF from the input, whole: `Btf::parse` (every check) and, when it
//! passes, every question the Linux walks ask of it, plus a few paths
//! through arrays and nested members. Nothing may panic, hang or take
//! memory beyond the input's few times; every offset or size answered is
//! within the cap the walks size their buffers by.
//!
//! Seeded with the test guest's BTF cut down to what the walks ask about
//! (fuzz/seeds/btf/, made by scripts/btf-seed.py).

#![no_main]

use leechio::linux::{ask_walk_questions, Btf, Query, MAX_ANSWER};
use libfuzzer_sys::fuzz_target;

/// Paths beyond the walks': through arrays, past their ends, into
/// anonymous members and bit fields.
const MORE: &[(&str, &str)] = &[
    ("task_struct", "pid_links[3]"),
    ("task_struct", "comm[15]"),
    ("pid", "tasks[1].first"),
    ("pid", "numbers[1].ns"),
    ("xa_node", "slots[63]"),
    ("maple_range_64", "pivot[14]"),
    ("task_struct", "sched_reset_on_fork"),
    ("mm_struct", "mm_mt.ma_flags"),
];

fuzz_target!(|data: &[u8]| {
    let Ok(btf) = Btf::parse(data) else {
        return;
    };
    ask_walk_questions(&btf);
    for &(ty, path) in MORE {
        let _ = btf.member_offset(ty, path);
        let _ = btf.member_size(ty, path);
        let _ = btf.member_bits(ty, path);
    }
    for (q, a) in btf.answers() {
        if let (false, Ok(v)) = (matches!(q, Query::Enum(_)), a) {
            assert!((0..=MAX_ANSWER as i64).contains(&v), "{q} = {v}");
        }
    }
});
