//! The page cache's walks on made-up memory: a page array with holes,
//! shadows, a folio of four pages and one of 64 held a level up; page
//! entries that are no page; a file whose size is absurd; hash chains
//! that loop, run past their bound or hold garbage; a hash table whose
//! size no kernel gives.

use super::hash::{HashWalk, Want, MAX_CHAIN};
use super::pages;
use super::{CachedFile, PAGE};
use crate::linux::fake_memory::{FakeMemory, DIRECT};
use crate::linux::offsets::{CacheLayout, PathLayout, XaLayout};

/// Where the made-up kernel's `struct page`s start: never read, only
/// counted from.
const VMEMMAP: u64 = 0xffff_ea00_0000_0000;
const PAGE_STRUCT: u64 = 64;
const INODE_SIZE: u64 = 256;

/// Made-up offsets: 6.1's xa_node, the rest where no kernel has them.
fn layout() -> CacheLayout {
    let paths = PathLayout {
        file_dentry: 8,
        file_mnt: 0,
        file_inode: 40,
        dentry_size: 192,
        d_parent: 24,
        d_name_len: 36,
        d_name_name: 40,
        d_hash_pprev: 8,
        d_op: 136,
        d_dname: 72,
        mount_vfsmount: 48,
        mnt_parent: 8,
        mnt_mountpoint: 24,
        mnt_root: 56,
        i_mode: 0,
        i_ino: 64,
        i_sb: 8,
        s_dev: 16,
    };
    CacheLayout {
        d_hash: 0,
        d_inode: 48,
        d_sb: 56,
        i_size: 80,
        i_nlink: 72,
        i_mapping: 88,
        i_data: 128,
        a_host: 0,
        a_pages: 8,
        a_head: 16,
        a_nrpages: 32,
        s_mounts: 64,
        s_id: (96, 32),
        mnt_instance: 16,
        page_size: PAGE_STRUCT,
        xa: XaLayout {
            shift: 0,
            offset: 1,
            parent: 8,
            array: 16,
            slots: 40,
            slot_count: 64,
        },
        paths,
    }
}

/// The page struct of frame `pfn`.
fn page(pfn: u64) -> u64 {
    VMEMMAP + pfn * PAGE_STRUCT
}

/// An xa_node of array `array` at `at`; its entry.
fn node(
    mem: &mut FakeMemory,
    array: u64,
    shift: u8,
    offset: u8,
    parent: u64,
    slots: &[(u64, u64)],
) -> u64 {
    let at = mem.alloc(layout().xa.node_len() as u64);
    mem.put_bytes(at, &[shift, offset]);
    mem.put(at + 8, parent);
    mem.put(at + 16, array);
    for &(slot, entry) in slots {
        mem.put(at + 40 + slot * 8, entry);
    }
    at + 2
}

/// Fills frame `pfn` with bytes that say which frame and offset.
fn fill(mem: &mut FakeMemory, pfn: u64) {
    let bytes: Vec<u8> = (0..PAGE).map(|i| (pfn as u8) ^ (i as u8)).collect();
    mem.put_bytes(DIRECT + pfn * PAGE, &bytes);
}

fn file(size: u64, mapping: u64) -> CachedFile {
    CachedFile {
        path: Ok("/made/up".into()),
        inode: 7,
        device: 1,
        file_system: None,
        size,
        links: 1,
        cached_pages: 0,
        address: mapping - layout().i_data,
        mapping,
        open_by: Vec::new(),
    }
}

#[test]
fn pages_are_read_by_frame_with_holes_shadows_and_large_folios_not_cached_or_whole() {
    let l = layout();
    let mut mem = FakeMemory::new(2 << 20);
    let mapping = mem.alloc(INODE_SIZE) + l.i_data;
    let array = mapping + l.a_pages;
    // Page 0 at frame 0x100; page 1 evicted (a shadow); pages 2, 3 a
    // hole; pages 4..8 a folio of four at frame 0x104 (siblings in 5..8);
    // pages 64..128 a folio of 64 at frame 0x140, held in the root's
    // slot 1.
    for pfn in [0x100, 0x104, 0x105, 0x106, 0x107] {
        fill(&mut mem, pfn);
    }
    for pfn in 0x140..0x180 {
        fill(&mut mem, pfn);
    }
    let sibling = (4 << 2) | 2;
    let slots = [
        (0, page(0x100)),
        (1, (77 << 1) | 1),
        (4, page(0x104)),
        (5, sibling),
        (6, sibling),
        (7, sibling),
    ];
    let leaf = node(&mut mem, array, 0, 0, 0, &slots);
    let root = node(&mut mem, array, 6, 0, 0, &[(0, leaf), (1, page(0x140))]);
    // The leaf's parent is the root: written now that it is known.
    mem.put(leaf - 2 + 8, root - 2);
    let size = 128 * PAGE - 100;
    let (read, calls) =
        mem.read(async |kmem| pages::read(kmem, &l, VMEMMAP, &file(size, mapping), root).await);
    assert_eq!(read.failed, vec![]);
    let indices: Vec<u64> = read.pages.iter().map(|p| p.0).collect();
    let want: Vec<u64> = [0, 4, 5, 6, 7].into_iter().chain(64..128).collect();
    assert_eq!(indices, want);
    assert_eq!(read.missing, vec![1..4, 8..64]);
    for (index, bytes) in &read.pages {
        let pfn = match index {
            0 => 0x100,
            4..8 => 0x100 + index,
            _ => 0x140 + index - 64,
        };
        let len = if *index == 127 { PAGE - 100 } else { PAGE };
        let expected: Vec<u8> = (0..len).map(|i| (pfn as u8) ^ (i as u8)).collect();
        assert_eq!(bytes, &expected, "page {index}");
    }
    // The array's two levels, then every page at once.
    assert_eq!(calls, 3);
}

#[test]
fn entries_that_are_no_page_are_named_and_an_absurd_size_reads_nothing_more() {
    let l = layout();
    let mut mem = FakeMemory::new(1 << 20);
    let mapping = mem.alloc(INODE_SIZE) + l.i_data;
    let array = mapping + l.a_pages;
    fill(&mut mem, 0x20);
    let slots = [
        (0, VMEMMAP - PAGE_STRUCT),
        (1, page(0x20) + 8),
        (2, page(1 << 30)),
        (3, page(0x20)),
    ];
    let head = node(&mut mem, array, 0, 0, 0, &slots);
    let size = i64::MAX as u64;
    let (read, calls) =
        mem.read(async |kmem| pages::read(kmem, &l, VMEMMAP, &file(size, mapping), head).await);
    let reasons: Vec<&str> = read.failed.iter().map(|f| f.reason.as_str()).collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(reasons[0].starts_with("page 0: ") && reasons[0].contains("below vmemmap"));
    assert!(reasons[1].contains("is not a struct page"), "{reasons:?}");
    assert!(reasons[2].contains("past the end of memory"), "{reasons:?}");
    // The one page there is is read; the rest of the size is missing,
    // named as two ranges, not page by page.
    assert_eq!(read.pages.len(), 1);
    assert_eq!(read.pages[0].0, 3);
    assert_eq!(read.missing, vec![0..3, 4..size.div_ceil(PAGE)]);
    assert_eq!(calls, 2);
}

/// A made-up dentry cache: its symbols, a table of 16 buckets, and the
/// objects put in it.
struct Table {
    mem: FakeMemory,
    symbols: [Option<u64>; 3],
    table: u64,
    sb: u64,
}

impl Table {
    fn new(shift: u32) -> Table {
        let mut mem = FakeMemory::new(1 << 20);
        let (var, shift_at, vmemmap) = (mem.alloc(8), mem.alloc(4), mem.alloc(8));
        let table = mem.alloc(16 * 8);
        mem.put(var, table);
        mem.put_u32(shift_at, shift);
        mem.put(vmemmap, VMEMMAP);
        let sb = mem.alloc(128);
        mem.put(sb + 64, sb + 64);
        mem.put_bytes(sb + 96, b"made-up\0");
        Table {
            mem,
            symbols: [Some(var), Some(shift_at), Some(vmemmap)],
            table,
            sb,
        }
    }

    /// A dentry of a regular file (of a new inode of `pages` cached
    /// pages, none for a negative dentry), reached from `pprev`.
    fn dentry(&mut self, pprev: u64, inode_pages: Option<u64>) -> u64 {
        let l = layout();
        let at = self.mem.alloc(l.paths.dentry_size);
        self.mem.put(at + l.paths.d_hash_pprev, pprev);
        self.mem.put(pprev, at + l.d_hash);
        self.mem.put(at + l.d_sb, self.sb);
        if let Some(pages) = inode_pages {
            let inode = self.mem.alloc(INODE_SIZE);
            self.mem.put_u32(inode, 0o100_644);
            self.mem.put(inode + l.paths.i_sb, self.sb);
            self.mem.put(inode + l.paths.i_ino, at);
            self.mem.put(inode + l.i_size, pages * PAGE);
            self.mem.put(inode + l.i_mapping, inode + l.i_data);
            self.mem.put(inode + l.i_data + l.a_host, inode);
            self.mem.put(inode + l.i_data + l.a_nrpages, pages);
            self.mem.put(at + l.d_inode, inode);
        }
        at
    }

    fn walk(&self) -> (super::hash::Hashed, u64) {
        let l = layout();
        self.mem.read(async |kmem| {
            let walk = HashWalk { kmem, layout: &l };
            walk.run(self.symbols, Want::Cached).await
        })
    }
}

#[test]
fn a_chain_that_loops_is_cut_where_it_turns_back() {
    let mut t = Table::new(28);
    let a = t.dentry(t.table + 3 * 8, Some(1));
    let b = t.dentry(a, Some(2));
    // b's next leads back to a, whose pprev names its bucket.
    t.mem.put(b, a);
    let (hashed, calls) = t.walk();
    let found: Vec<u64> = hashed.dentries.iter().map(|d| d.0).collect();
    assert_eq!(found, [a, b]);
    assert_eq!(hashed.inodes.len(), 2);
    assert_eq!(hashed.supers[&t.sb].name, "made-up");
    assert_eq!(hashed.supers[&t.sb].mount, None);
    assert_eq!(hashed.vmemmap, Some(VMEMMAP));
    let [failure] = &hashed.failed[..] else {
        panic!("{:?}", hashed.failed)
    };
    assert_eq!(failure.address, a);
    assert!(
        failure.reason.contains("but it was reached from"),
        "{failure}"
    );
    // The symbols, the table, then the three links (the last a's again),
    // each link's inode and super block read beside the next.
    assert_eq!((hashed.chain_links, calls), (3, 5));
}

#[test]
fn a_chain_past_its_bound_is_cut_and_named() {
    let mut t = Table::new(28);
    let mut pprev = t.table;
    for _ in 0..MAX_CHAIN + 6 {
        pprev = t.dentry(pprev, None);
    }
    let (hashed, calls) = t.walk();
    assert!(hashed.dentries.is_empty());
    let [failure] = &hashed.failed[..] else {
        panic!("{:?}", hashed.failed)
    };
    assert!(
        failure.reason.contains(&format!(
            "1 chain(s) of the dentry hash table longer than {MAX_CHAIN}"
        )),
        "{failure}"
    );
    assert_eq!(
        (hashed.chain_links, calls),
        (MAX_CHAIN, 2 + MAX_CHAIN as u64)
    );
}

#[test]
fn a_table_no_kernel_makes_and_garbage_links_are_refused() {
    for (shift, why) in [
        (0, "not 1 to 31"),
        (32, "not 1 to 31"),
        (1, "more than the target's"),
    ] {
        let (hashed, calls) = Table::new(shift).walk();
        assert!(hashed.failed[0].reason.contains(why), "{:?}", hashed.failed);
        assert_eq!(calls, 1);
    }
    let mut t = Table::new(28);
    t.mem.put(t.symbols[0].unwrap(), 0x1000);
    let (hashed, _) = t.walk();
    assert!(
        hashed.failed[0].reason.contains("no kernel address"),
        "{:?}",
        hashed.failed
    );
    let mut t = Table::new(28);
    t.mem.put(t.table + 8, 0x1234_5678);
    let a = t.dentry(t.table + 2 * 8, Some(1));
    let (hashed, calls) = t.walk();
    assert_eq!(hashed.dentries.len(), 1);
    assert_eq!(hashed.dentries[0].0, a);
    assert!(
        hashed.failed[0]
            .reason
            .contains("0x12345678 is no kernel address"),
        "{:?}",
        hashed.failed
    );
    assert_eq!(calls, 4);
}

#[test]
fn the_guests_kernel_has_the_page_caches_offsets() {
    const GUEST_BTF: &[u8] = include_bytes!("../../../fuzz/seeds/btf/debian12-6.1-walks.btf");
    let btf = crate::linux::find::btf::Btf::parse(GUEST_BTF).unwrap();
    let l = CacheLayout::from_btf(&btf).unwrap();
    assert_eq!((l.page_size, l.xa.slot_count), (64, 64));
    // Its own mapping is in the span read of each inode.
    let (first, len) = l.inode_span();
    assert!(first <= l.i_data + l.a_head && l.i_data + l.a_nrpages + 8 <= first + len);
}

/// The paths' walk takes the dentries the hash table's chains read
/// instead of reading them: the same path, in the one batch of the
/// mount and inode, against a batch a level of dentries without them.
#[test]
fn paths_are_built_from_the_dentries_read_already() {
    use std::collections::HashMap;

    use crate::linux::find::btf::builder::BtfBuilder;
    use crate::linux::paths::fake::{path_types, PathObjects};
    use crate::linux::paths::{self, Dnames, FileFields};

    let mut b = BtfBuilder::new();
    path_types(&mut b, &[]);
    let btf = crate::linux::find::btf::Btf::parse(&b.finish()).unwrap();
    let layout = PathLayout::from_btf(&btf).unwrap();
    let mut mem = FakeMemory::new(1 << 20);
    let root = mem.dentry("/", None);
    let mount = mem.mount(None, root, root);
    let a = mem.dentry("leechio-cache", Some(root));
    let b = mem.dentry("a-name-longer-than-a-dentry-keeps-inside", Some(a));
    let leaf = mem.dentry("deleted.log", Some(b));
    let inode = mem.inode(299, 0o100_644, 2);
    let fields = [FileFields {
        dentry: leaf,
        vfsmount: mount + layout.mount_vfsmount,
        inode,
    }];
    let bytes = |d: u64| {
        let at = (d - DIRECT) as usize;
        mem.bytes[at..at + layout.dentry_size as usize].to_vec()
    };
    let seen: HashMap<u64, Vec<u8>> = [root, a, b, leaf].map(|d| (d, bytes(d))).into();
    let dnames = Dnames::new(|_| None);
    let (read, calls) =
        mem.read(async |kmem| paths::of_fields(kmem, &layout, &dnames, &fields).await);
    let (taken, taken_calls) =
        mem.read(async |kmem| paths::of_fields_seen(kmem, &layout, &dnames, &fields, &seen).await);
    let want = "/leechio-cache/a-name-longer-than-a-dentry-keeps-inside/deleted.log";
    assert_eq!(read[0].path.as_deref(), Ok(want));
    assert_eq!(taken, read);
    // Read: the leaf with the mount and the inode, then each directory
    // below the mount's root, the long name beside the last; taken: the
    // mount and the inode, then the long name.
    assert_eq!((calls, taken_calls), (3, 2));
}
