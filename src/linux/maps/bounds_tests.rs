//! Memory maps that would make a walk do more than the target holds: a
//! VMA named by many slots, more VMAs than the kernel lets a process have,
//! and paths longer than `PATH_MAX`, in the made-up kernel memory of
//! `tests`.

use super::tests::*;
use super::*;
use crate::linux::paths;

/// What the failures say about the VMA or structure at `address`.
fn about(vmas: &Vmas, address: u64) -> Vec<&str> {
    vmas.failed
        .iter()
        .filter(|f| f.address == address)
        .map(|f| f.reason.as_str())
        .collect()
}

#[test]
fn a_vma_named_by_many_slots_is_read_once() {
    let mut world = World::new(true);
    // The second leaf's slots of VMAs all name its first VMA.
    let leaf = world.leaves[1];
    let first = world.vmas[PER_LEAF];
    let others = &world.vmas[PER_LEAF + 1..2 * PER_LEAF];
    for slot in 0..16 {
        let at = leaf + 128 + 8 * slot;
        let pa = (at - DIRECT) as usize;
        let value = u64::from_le_bytes(world.fake.bytes[pa..pa + 8].try_into().unwrap());
        if others.contains(&value) {
            world.fake.put(at, first);
        }
    }
    let (vmas, calls) = world.read(true);
    let starts: Vec<u64> = vmas.vmas.iter().map(|v| v.start).collect();
    let expected: Vec<u64> = (0..VMAS as usize)
        .filter(|i| !(PER_LEAF + 1..2 * PER_LEAF).contains(i))
        .map(|i| world.expected[i].start)
        .collect();
    assert_eq!(starts, expected);
    assert_eq!(
        about(&vmas, first),
        [format!(
            "named by {} more slot(s) of the maple tree than its own (a tree changing while read, or crafted): read once, for its first slot",
            PER_LEAF - 1
        )]
    );
    // As many calls as the tree without the duplicates takes.
    assert_eq!(calls, 9);
}

#[test]
fn no_more_vmas_are_read_than_the_kernel_allows() {
    let mut world = World::new(true);
    let sysctl = world.fake.alloc(8, 8);
    world.fake.put(sysctl, 10);
    let symbols = Symbols {
        special: Some(SPECIAL_FN),
        max_map_count: Some(sysctl),
        ..Symbols::default()
    };
    let (vmas, _) = world.read_with(true, symbols);
    // vm.max_map_count plus one, the first by address.
    let lines: Vec<Line> = vmas.vmas.iter().map(line).collect();
    assert_eq!(lines, world.expected[..11]);
    let reasons = reasons(&vmas);
    assert_eq!(
        reasons[0],
        "more VMAs than the target's vm.max_map_count (10) allows: the first 11 read"
    );
    assert!(
        reasons[1].starts_with(&format!(
            "the maple tree names more than 11 entries: the walk stopped at index {:#x}",
            world.expected[11].start
        )),
        "{reasons:?}"
    );
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    // Without the symbol, by the memory the target has: all 24.
    let (vmas, _) = world.read(true);
    assert_eq!(vmas.vmas.len(), VMAS as usize);
    assert_eq!(vmas.failed, []);
}

#[test]
fn a_path_longer_than_path_max_is_cut_and_marked_and_not_read_above() {
    let mut world = World::new(true);
    // /d00xxx…/d01xxx…/…/d19xxx…, names of 250 bytes; the top three
    // dentries lie past the end of memory: the cut must not need them.
    let name = |i: usize| format!("d{i:02}{}", "x".repeat(247));
    let mut parent = world.bin;
    let mut chain = Vec::new();
    for i in 0..20 {
        let d = world.fake.dentry(&name(i), Some(parent), true);
        chain.push(d);
        parent = d;
    }
    let beyond = DIRECT + MEMORY as u64 + 0x10_0000;
    world.fake.put(chain[2] + D_PARENT, beyond);
    let file = world.fake.file(chain[19], world.mount, 4242, 2);
    let vma = world.vmas[0];
    world.fake.put(vma + VM_FILE, file);
    let (vmas, _) = world.read(true);
    // 4,095 bytes at most: the mark, then the 16 components of 251 bytes
    // nearest the file.
    let expected: String = std::iter::once(paths::CUT_MARK.to_string())
        .chain((4..20).map(|i| format!("/{}", name(i))))
        .collect();
    assert_eq!(expected.len(), 5 + 16 * 251);
    assert_eq!(vmas.vmas[0].file.as_deref(), Some(expected.as_str()));
    assert_eq!(vmas.vmas[0].inode, 4242);
    let (start, end) = world.range(0);
    assert_eq!(
        about(&vmas, file),
        [format!(
            "the path of the file of VMA {start:#x}-{end:#x} is longer than PATH_MAX (4096 bytes): only its last components are shown, after \"(cut)\""
        )]
    );
    assert_eq!(vmas.failed.len(), 1, "{:?}", vmas.failed);
}

/// Under /bin (4 bytes), a chain of dentries whose names have these
/// lengths: the last dentry and its path.
fn chain(world: &mut World, lengths: &[usize]) -> (u64, String) {
    let mut parent = world.bin;
    let mut path = String::from("/bin");
    for (i, &len) in lengths.iter().enumerate() {
        let name = format!("{i:02}{}", "y".repeat(len - 2));
        parent = world.fake.dentry(&name, Some(parent), true);
        path.push('/');
        path.push_str(&name);
    }
    (parent, path)
}

#[test]
fn a_path_of_path_max_less_its_nul_is_whole_and_files_share_its_dentries() {
    let mut world = World::new(true);
    // 16 names of 250 bytes and one that makes 4,095 bytes in all.
    let mut lengths = vec![250; 16];
    lengths.push(4095 - 4 - 16 * 251 - 1);
    let (leaf, path) = chain(&mut world, &lengths);
    assert_eq!(path.len(), 4095);
    // Every VMA a file of its own at that path.
    for (i, &vma) in world.vmas.clone().iter().enumerate() {
        let file = world.fake.file(leaf, world.mount, 5000 + i as u64, 2);
        world.fake.put(vma + VM_FILE, file);
    }
    let (vmas, calls) = world.read(true);
    assert_eq!(vmas.failed, []);
    assert_eq!(vmas.vmas.len(), VMAS as usize);
    assert!(vmas
        .vmas
        .iter()
        .all(|v| v.file.as_deref() == Some(path.as_str())));
    // The mm, two tree levels, the VMAs, the files, then the 17 dentries
    // and /bin a level each, read once for all 24 files.
    assert_eq!(calls, 5 + 18);

    // One byte more is cut: /bin goes, and so does the first name, to
    // make room for the mark.
    let mut world = World::new(true);
    lengths[16] += 1;
    let (leaf, path) = chain(&mut world, &lengths);
    let file = world.fake.file(leaf, world.mount, 1, 2);
    world.fake.put(world.vmas[0] + VM_FILE, file);
    let (vmas, _) = world.read(true);
    let kept = &path["/bin/".len() + 250..];
    assert!(kept.starts_with("/01"));
    assert_eq!(
        vmas.vmas[0].file.as_deref(),
        Some(format!("{}{}", paths::CUT_MARK, kept).as_str())
    );
    assert_eq!(about(&vmas, file).len(), 1, "{:?}", vmas.failed);
}
