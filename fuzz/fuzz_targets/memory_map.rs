//! The memory-map parsers, LeechCore's text form (`MemoryMap::from_str`)
//! and the file form the plugin's `memmap=` reads (memflow's TOML, or the
//! text): never a panic; a map they accept is what `MemoryMap::new`
//! promises (sorted, disjoint, whole pages, nothing past `u64::MAX`) and
//! reads back the same from its printed form; a refusal is one line.

#![no_main]

use leechio::memflow::parse_memory_map_text;
use leechio::MemoryMap;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // (A file that is not UTF-8 is refused before it is parsed.)
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match text.parse::<MemoryMap>() {
        Ok(map) => check(&map),
        Err(e) => one_line(&e.to_string()),
    }
    match parse_memory_map_text(text) {
        Ok(map) => {
            check(&map);
            assert!(!map.is_empty(), "a map file with no ranges was taken");
            assert_eq!(parse_memory_map_text(&map.to_string()), Ok(map));
        }
        Err(e) => one_line(&e),
    }
});

/// Asserts what `MemoryMap::new` promises, checked here from the ranges.
fn check(map: &MemoryMap) {
    let mut end = 0;
    for (i, r) in map.ranges().iter().enumerate() {
        assert!(r.size > 0, "{r:x?}: empty");
        assert!(
            r.start % 0x1000 == 0 && r.size % 0x1000 == 0 && r.remap % 0x1000 == 0,
            "{r:x?}: not whole pages"
        );
        assert!(
            r.start.checked_add(r.size).is_some() && r.remap.checked_add(r.size).is_some(),
            "{r:x?}: runs past the end"
        );
        assert!(
            i == 0 || r.start >= end,
            "{r:x?}: overlaps or precedes {end:#x}"
        );
        end = r.start + r.size;
    }
    let printed = map.to_string();
    assert_eq!(printed.parse::<MemoryMap>().as_ref(), Ok(map), "{printed}");
}

/// Asserts that an error is one non-empty line.
fn one_line(error: &str) {
    assert!(
        !error.is_empty() && !error.contains(['\n', '\r']),
        "not one line: {error:?}"
    );
}
