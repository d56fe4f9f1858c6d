//! Memory maps read from made-up kernel memory whose layouts (given by
//! made-up BTF) are no kernel's: a maple tree of two levels, the red-black
//! tree and `mmap` list of older kernels, files across mounts, and the
//! loops and torn structures a walk must cut.

use std::sync::Arc;

use super::*;
use crate::linux::find::btf::builder::BtfBuilder;
use crate::linux::find::btf::Btf;
use crate::linux::kmem::KernelMemory;
use crate::linux::offsets::MapsLayout;
pub(super) use crate::linux::paths::fake::D_PARENT;
use crate::linux::paths::fake::{
    path_types, DENTRY_SIZE, D_HASH, D_INAME, D_NAME, FILE_SIZE, F_INODE, F_PATH, INODE_SIZE,
    I_INO, I_SB, MNT, MNT_MOUNTPOINT, MNT_PARENT, MNT_ROOT, MOUNT_SIZE, S_DEV,
};
use crate::{AddressSpace, MemBackend, Memory};

pub(super) const DIRECT: u64 = 0xffff_8880_0000_0000;
/// Where the made-up kernel's `special_mapping_name` is.
pub(super) const SPECIAL_FN: u64 = 0xffff_ffff_8123_4560;
/// Another `vm_operations_struct.name` function.
const OTHER_FN: u64 = 0xffff_ffff_8123_9990;
pub(super) const MEMORY: usize = 4 << 20;
pub(super) const VMAS: u64 = 24;
pub(super) const PER_LEAF: usize = 6;

// The made-up layout: offsets no kernel uses.
const MM_SIZE: u32 = 512;
pub(super) const MM_MT: u64 = 40;
pub(super) const MA_ROOT: u64 = 8;
const MM_MMAP: u64 = 16;
const MM_RB: u64 = 96;
pub(super) const MAP_COUNT: u64 = 200;
const START_BRK: u64 = 216;
const BRK: u64 = 224;
const START_STACK: u64 = 264;
const VMA_SIZE: u32 = 208;
const VM_NEXT: u64 = 0;
pub(super) const VM_START: u64 = 16;
pub(super) const VM_END: u64 = 24;
const VM_MM: u64 = 48;
const VM_FLAGS: u64 = 56;
const VM_RB: u64 = 64;
const ANON_NAME: u64 = 88;
const VM_OPS: u64 = 120;
const VM_PGOFF: u64 = 128;
pub(super) const VM_FILE: u64 = 144;
const VM_PRIVATE: u64 = 176;
const RB_RIGHT: u64 = 8;
const RB_LEFT: u64 = 16;
const OPS_NAME: u64 = 24;
const ANON_VMA_NAME: u64 = 4;
// The maple tree's own (its nodes are 256 bytes whatever the kernel).
pub(super) const LEAF: u64 = 1;
pub(super) const ARANGE: u64 = 3;

/// BTF of the made-up kernel: with a maple tree, or with the red-black
/// tree and list of older kernels.
fn btf(maple: bool) -> Btf {
    let mut b = BtfBuilder::new();
    let mut mm = vec![
        ("map_count", MAP_COUNT),
        ("start_brk", START_BRK),
        ("brk", BRK),
        ("start_stack", START_STACK),
    ];
    let mut vma = vec![
        ("vm_start", VM_START),
        ("vm_end", VM_END),
        ("vm_mm", VM_MM),
        ("vm_flags", VM_FLAGS),
        ("vm_ops", VM_OPS),
        ("vm_pgoff", VM_PGOFF),
        ("vm_file", VM_FILE),
        ("vm_private_data", VM_PRIVATE),
    ];
    if maple {
        mm.push(("mm_mt", MM_MT));
        vma.push(("anon_name", ANON_NAME));
        crate::linux::structures::maple::tests::maple_types(&mut b, 8, 15);
        b.structure("maple_tree", 24, &[("ma_lock", 0), ("ma_root", MA_ROOT)])
            .structure("anon_vma_name", 16, &[("name", ANON_VMA_NAME)]);
    } else {
        mm.extend([("mmap", MM_MMAP), ("mm_rb", MM_RB)]);
        vma.extend([("vm_next", VM_NEXT), ("vm_rb", VM_RB)]);
        b.structure("rb_root", 8, &[("rb_node", 0)]).structure(
            "rb_node",
            24,
            &[
                ("__rb_parent_color", 0),
                ("rb_right", RB_RIGHT),
                ("rb_left", RB_LEFT),
            ],
        );
    }
    b.structure("mm_struct", MM_SIZE, &mm)
        .structure("vm_area_struct", VMA_SIZE, &vma)
        .structure("vm_operations_struct", 128, &[("name", OPS_NAME)])
        .structure("vm_special_mapping", 64, &[("name", 0)]);
    path_types(&mut b, &[]);
    Btf::parse(&b.finish()).unwrap()
}

/// Kernel memory being made: objects placed in the direct map.
pub(super) struct Fake {
    pub(super) bytes: Vec<u8>,
    pub(super) top: u64,
}

impl Fake {
    pub(super) fn alloc(&mut self, len: u32, align: u64) -> u64 {
        self.top = self.top.next_multiple_of(align);
        let va = DIRECT + self.top;
        self.top += u64::from(len);
        va
    }

    pub(super) fn put(&mut self, va: u64, value: u64) {
        self.put_bytes(va, &value.to_le_bytes());
    }

    pub(super) fn put_bytes(&mut self, va: u64, bytes: &[u8]) {
        let pa = (va - DIRECT) as usize;
        self.bytes[pa..pa + bytes.len()].copy_from_slice(bytes);
    }

    /// A dentry named `name` under `parent` (itself when `None`); its name
    /// inside it when short, else in a buffer of its own.
    pub(super) fn dentry(&mut self, name: &str, parent: Option<u64>, hashed: bool) -> u64 {
        let d = self.alloc(DENTRY_SIZE, 64);
        self.put(d + D_PARENT, parent.unwrap_or(d));
        self.put(d + D_HASH + 8, if hashed { d + 0x1000 } else { 0 });
        self.put(d + D_NAME, (name.len() as u64) << 32);
        let at = if name.len() < 32 {
            d + D_INAME
        } else {
            self.alloc(name.len() as u32 + 1, 8)
        };
        self.put_bytes(at, name.as_bytes());
        self.put(d + D_NAME + 8, at);
        d
    }

    /// A mount whose root is `root`, mounted on `on` in `parent` (its own
    /// parent when `None`); the address of its `struct mount`.
    fn mount(&mut self, root: u64, on: Option<(u64, u64)>) -> u64 {
        let m = self.alloc(MOUNT_SIZE, 64);
        let (parent, mountpoint) = on.unwrap_or((m, root));
        self.put(m + MNT_PARENT, parent);
        self.put(m + MNT_MOUNTPOINT, mountpoint);
        self.put(m + MNT + MNT_ROOT, root);
        m
    }

    /// A `struct file` of `dentry` in `mount`, with inode number `ino` on
    /// device `dev`.
    pub(super) fn file(&mut self, dentry: u64, mount: u64, ino: u64, dev: u32) -> u64 {
        let sb = self.alloc(64, 64);
        self.put(sb + S_DEV, u64::from(dev));
        let inode = self.alloc(INODE_SIZE, 64);
        self.put(inode + I_SB, sb);
        self.put(inode + I_INO, ino);
        let f = self.alloc(FILE_SIZE, 64);
        self.put(f + F_PATH, mount + MNT);
        self.put(f + F_PATH + 8, dentry);
        self.put(f + F_INODE, inode);
        f
    }

    pub(super) fn string(&mut self, s: &str) -> u64 {
        let at = self.alloc(s.len() as u32 + 1, 8);
        self.put_bytes(at, s.as_bytes());
        at
    }
}

/// What `/proc/PID/maps` would say of one VMA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Line {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) perms: String,
    pub(super) offset: u64,
    pub(super) device: u32,
    pub(super) inode: u64,
    pub(super) path: String,
}

pub(super) fn line(v: &Vma) -> Line {
    Line {
        start: v.start,
        end: v.end,
        perms: v.flags.perms(),
        offset: v.offset(),
        device: v.device,
        inode: v.inode,
        path: v.path().to_string(),
    }
}

/// A process of `VMAS` VMAs of every kind in made-up kernel memory.
pub(super) struct World {
    pub(super) fake: Fake,
    pub(super) mm: u64,
    pub(super) vmas: Vec<u64>,
    pub(super) expected: Vec<Line>,
    /// The leaves of the maple tree, and its root node.
    pub(super) leaves: Vec<u64>,
    pub(super) root: u64,
    /// The root mount, and the dentries of /bin/busybox, of the file
    /// with a long name in /bin, and of /bin.
    pub(super) mount: u64,
    pub(super) busybox: u64,
    pub(super) long: u64,
    pub(super) bin: u64,
}

const LONG_NAME: &str = "a-file-name-too-long-to-live-inside-its-dentry.so";

impl World {
    pub(super) fn new(maple: bool) -> World {
        let mut f = Fake {
            bytes: vec![0; MEMORY],
            top: 0x1_0000,
        };
        // Mounts: / (its own parent), a file system on /mnt/data, and an
        // internal one (as memfd's) that is mounted nowhere.
        let root_a = f.dentry("/", None, true);
        let a = f.mount(root_a, None);
        let bin = f.dentry("bin", Some(root_a), true);
        let busybox = f.dentry("busybox", Some(bin), true);
        let long = f.dentry(LONG_NAME, Some(bin), true);
        let mnt = f.dentry("mnt", Some(root_a), true);
        let data = f.dentry("data", Some(mnt), true);
        let root_b = f.dentry("/", None, true);
        let b = f.mount(root_b, Some((a, data)));
        let x = f.dentry("x", Some(root_b), true);
        let libfoo = f.dentry("libfoo.so", Some(x), true);
        let root_c = f.dentry("/", None, true);
        let c = f.mount(root_c, None);
        let memfd = f.dentry("memfd:test", Some(root_c), false);
        let files = [
            (f.file(busybox, a, 135, 2), "/bin/busybox", 2, 135),
            (
                f.file(libfoo, b, 77, (8 << 20) | 1),
                "/mnt/data/x/libfoo.so",
                (8 << 20) | 1,
                77,
            ),
            (f.file(long, a, 136, 2), "/bin/LONG", 2, 136),
            (f.file(memfd, c, 1025, 1), "/memfd:test (deleted)", 1, 1025),
        ];
        let vdso = f.alloc(64, 64);
        let vdso_name = f.string("[vdso]");
        f.put(vdso, vdso_name);
        let special_ops = f.alloc(128, 64);
        f.put(special_ops + OPS_NAME, SPECIAL_FN);
        let other_ops = f.alloc(128, 64);
        f.put(other_ops + OPS_NAME, OTHER_FN);
        let anon_name = f.alloc(16, 8);
        f.put_bytes(anon_name + ANON_VMA_NAME, b"buffers\0");
        let mm = f.alloc(MM_SIZE, 64);
        let mut vmas = Vec::new();
        let mut expected = Vec::new();
        for i in 0..VMAS {
            let v = f.alloc(VMA_SIZE, 64);
            let start = 0x40_0000 + i * 0x10_0000;
            let end = start + 0x3000 + (i % 3) * 0x1000;
            let (mut flags, mut pgoff, mut path, mut device, mut inode) =
                (0x1u64 | 0x10, start >> 12, String::new(), 0, 0);
            let mut file = 0;
            match i % 8 {
                k @ 0..=4 => {
                    let (at, name, dev, ino) = files[[0, 0, 1, 2, 3][k as usize]];
                    file = at;
                    pgoff = i * 3;
                    path = name.replace("LONG", LONG_NAME);
                    (device, inode) = (dev, ino);
                    flags |= [0x4, 0x2, 0x80, 0, 0x2 | 0x8 | 0x80][k as usize];
                }
                6 => {
                    let ops = if i == 14 { other_ops } else { special_ops };
                    f.put(v + VM_OPS, ops);
                    f.put(v + VM_PRIVATE, vdso);
                    flags |= 0x4;
                    if i != 14 {
                        path = "[vdso]".into();
                    }
                }
                7 if maple => {
                    f.put(v + ANON_NAME, anon_name);
                    path = "[anon:buffers]".into();
                    flags |= 0x2;
                }
                _ => flags |= 0x2,
            }
            // The heap is the first anonymous VMA, the stack the second.
            if i == 5 {
                path = "[heap]".into();
                f.put(mm + START_BRK, start + 0x1000);
                f.put(mm + BRK, end - 0x800);
            }
            if i == 13 {
                path = "[stack]".into();
                f.put(mm + START_STACK, end - 0x10);
            }
            f.put(v + VM_START, start);
            f.put(v + VM_END, end);
            f.put(v + VM_MM, mm);
            f.put(v + VM_FLAGS, flags);
            f.put(v + VM_PGOFF, pgoff);
            f.put(v + VM_FILE, file);
            vmas.push(v);
            expected.push(Line {
                start,
                end,
                perms: VmFlags(flags).perms(),
                offset: if file != 0 { pgoff * 0x1000 } else { 0 },
                device,
                inode,
                path,
            });
        }
        f.put(mm + MAP_COUNT, VMAS);
        let mut world = World {
            fake: f,
            mm,
            vmas,
            expected,
            leaves: Vec::new(),
            root: 0,
            mount: a,
            busybox,
            long,
            bin,
        };
        match maple {
            true => world.maple_tree(),
            false => world.red_black_tree(),
        }
        world
    }

    pub(super) fn range(&self, i: usize) -> (u64, u64) {
        (self.expected[i].start, self.expected[i].end)
    }

    /// An allocation-range root over leaves of `PER_LEAF` VMAs each, gaps
    /// between them as empty slots.
    fn maple_tree(&mut self) {
        let chunks: Vec<Vec<usize>> = (0..VMAS as usize)
            .collect::<Vec<_>>()
            .chunks(PER_LEAF)
            .map(<[usize]>::to_vec)
            .collect();
        let root = self.fake.alloc(256, 256);
        let mut min = 0;
        for (k, chunk) in chunks.iter().enumerate() {
            let max = match chunks.get(k + 1) {
                Some(next) => self.range(next[0]).0 - 1,
                None => u64::MAX,
            };
            let leaf = self.fake.alloc(256, 256);
            self.fake.put(leaf, root | 0x40);
            let mut slots: Vec<(u64, u64)> = Vec::new();
            let mut at = min;
            for &i in chunk {
                let (start, end) = self.range(i);
                if start > at {
                    slots.push((start - 1, 0));
                }
                slots.push((end - 1, self.vmas[i]));
                at = end;
            }
            if at <= max {
                slots.push((max, 0));
            }
            for (j, &(last, value)) in slots.iter().enumerate() {
                if j < 15 {
                    self.fake.put(leaf + 8 + 8 * j as u64, last);
                }
                self.fake.put(leaf + 128 + 8 * j as u64, value);
            }
            self.fake.put_bytes(leaf + 248, &[(slots.len() - 1) as u8]);
            // The root's pivot of its last child stays 0: the node's max.
            if k + 1 < chunks.len() {
                self.fake.put(root + 8 + 8 * k as u64, max);
            }
            self.fake
                .put(root + 80 + 8 * k as u64, leaf | (LEAF << 3) | 4);
            self.leaves.push(leaf);
            min = max.wrapping_add(1);
        }
        self.fake.put(root, (self.mm + MM_MT) | 1);
        self.fake.put_bytes(root + 240, &[(chunks.len() - 1) as u8]);
        self.root = root;
        self.fake
            .put(self.mm + MM_MT + MA_ROOT, root | (ARANGE << 3) | 2);
    }

    /// A balanced red-black tree over the VMAs and the `mmap` list
    /// through them.
    fn red_black_tree(&mut self) {
        fn build(w: &mut World, lo: usize, hi: usize) -> u64 {
            if lo >= hi {
                return 0;
            }
            let mid = (lo + hi) / 2;
            let (left, right) = (build(w, lo, mid), build(w, mid + 1, hi));
            let node = w.vmas[mid] + VM_RB;
            w.fake.put(node + RB_LEFT, left);
            w.fake.put(node + RB_RIGHT, right);
            node
        }
        let root = build(self, 0, self.vmas.len());
        self.fake.put(self.mm + MM_RB, root);
        self.fake.put(self.mm + MM_MMAP, self.vmas[0]);
        for pair in self.vmas.clone().windows(2) {
            self.fake.put(pair[0] + VM_NEXT, pair[1]);
        }
    }

    /// The maps as read, and the read calls they took.
    pub(super) fn read(&self, maple: bool) -> (Vmas, u64) {
        self.read_with(
            maple,
            Symbols {
                special: Some(SPECIAL_FN),
                max_map_count: None,
                ..Symbols::default()
            },
        )
    }

    /// The same with the kernel's `symbols`.
    pub(super) fn read_with(&self, maple: bool, symbols: Symbols) -> (Vmas, u64) {
        let backend = Arc::new(MemBackend::new(self.fake.bytes.clone()));
        let mem = Memory::with_config(backend.clone(), Default::default());
        let layout = MapsLayout::from_btf(&btf(maple)).unwrap();
        let space = AddressSpace::new(mem.clone(), 0, crate::vm::Paging::FourLevel);
        let kmem = KernelMemory::direct_map_only(&space, DIRECT);
        let vmas = mem.block_on(read(&kmem, &layout, self.mm, symbols));
        (vmas, backend.read_calls())
    }
}

/// The failures' reasons, each with the index of the VMA or the name of
/// the structure it is about.
pub(super) fn reasons(vmas: &Vmas) -> Vec<String> {
    vmas.failed.iter().map(|f| f.reason.clone()).collect()
}

#[test]
#[cfg_attr(miri, ignore)] // Miri: slow (linux has no unsafe code)
fn a_maple_tree_of_two_levels_with_files_across_mounts() {
    let world = World::new(true);
    let (vmas, calls) = world.read(true);
    assert_eq!(vmas.failed, []);
    let lines: Vec<Line> = vmas.vmas.iter().map(line).collect();
    assert_eq!(lines, world.expected);
    assert_eq!(
        vmas.vmas.iter().map(|v| v.address).collect::<Vec<_>>(),
        world.vmas
    );
    // The mm, the tree's two levels, the VMAs, the files (with the
    // special mappings' operations and the anonymous names), then four
    // levels of dentries: libfoo.so, x, the mount point data, mnt.
    assert_eq!(calls, 9);
}

#[test]
#[cfg_attr(miri, ignore)] // Miri: slow (linux has no unsafe code)
fn the_red_black_tree_and_list_of_older_kernels() {
    let world = World::new(false);
    let (vmas, calls) = world.read(false);
    assert_eq!(vmas.failed, []);
    let lines: Vec<Line> = vmas.vmas.iter().map(line).collect();
    assert_eq!(lines, world.expected);
    // The mm, five levels of a balanced tree of 24, then as above.
    assert_eq!(calls, 1 + 5 + 1 + 4);

    // A list that disagrees with the tree (torn, or another mm's).
    let mut torn = World::new(false);
    torn.fake.put(torn.vmas[10] + VM_NEXT, torn.vmas[12]);
    let (vmas, _) = torn.read(false);
    assert_eq!(vmas.vmas.len(), VMAS as usize);
    assert_eq!(
        reasons(&vmas),
        [format!(
            "the mmap list leads to {:#x} where the tree has VMA {:#x}-{:#x}",
            torn.vmas[12], torn.expected[11].start, torn.expected[11].end
        )]
    );
}

#[test]
#[cfg_attr(miri, ignore)] // Miri: slow (linux has no unsafe code)
fn loops_in_the_maple_tree_are_cut_and_reported() {
    // The root's second child is its first again.
    let mut world = World::new(true);
    let first = world.leaves[0] | (LEAF << 3) | 4;
    world.fake.put(world.root + 80 + 8, first);
    let (vmas, _) = world.read(true);
    assert_eq!(
        reasons(&vmas),
        ["maple node reached twice (a loop, or a tree changing while read); not followed again"]
    );
    assert_eq!(vmas.failed[0].address, world.leaves[0]);
    let starts: Vec<u64> = vmas.vmas.iter().map(|v| v.start).collect();
    let without_second: Vec<u64> = (0..VMAS as usize)
        .filter(|i| !(PER_LEAF..2 * PER_LEAF).contains(i))
        .map(|i| world.expected[i].start)
        .collect();
    assert_eq!(starts, without_second);

    // A node that is its own child.
    let mut world = World::new(true);
    world
        .fake
        .put(world.root + 80 + 16, world.root | (ARANGE << 3) | 4);
    let (vmas, _) = world.read(true);
    assert_eq!(vmas.failed.len(), 1);
    assert_eq!(vmas.failed[0].address, world.root);
    assert_eq!(vmas.vmas.len(), VMAS as usize - PER_LEAF);
}

#[test]
#[cfg_attr(miri, ignore)] // Miri: slow (linux has no unsafe code)
fn torn_structures_are_reported_and_the_rest_read() {
    let mut world = World::new(true);
    // A leaf freed while the tree was read: its parent is itself.
    world.fake.put(world.leaves[3], world.leaves[3]);
    // A VMA that another mm owns.
    world.fake.put(world.vmas[2] + VM_MM, 0xffff_8880_0dea_d000);
    // A VMA whose range lies outside its slot.
    world
        .fake
        .put(world.vmas[7] + VM_END, world.expected[7].end + 0x10_0000);
    // A VMA that cannot be read.
    let beyond = DIRECT + (1 << 40);
    world.fake.put(world.leaves[1] + 128 + 8 * 3, beyond);
    // /bin/busybox's parent is busybox: a loop of dentries.
    world.fake.put(world.bin + D_PARENT, world.busybox);
    let (vmas, calls) = world.read(true);
    let e = &world.expected;
    let missing = [2, 7, 18, 19, 20, 21, 22, 23];
    let alive = || (0..VMAS as usize).filter(|i| !missing.contains(i));
    let mut expected = vec![
        "dead maple node (freed while the tree was read)".to_string(),
        format!(
            "VMA: {beyond:#x}..{:#x} unreadable: virtual address not mapped",
            beyond + u64::from(VMA_SIZE)
        ),
        format!("VMA belongs to mm 0xffff88800dead000, not {:#x}", world.mm),
        format!(
            "VMA range {:#x}-{:#x} lies outside its tree slot {:#x}-{:#x}",
            e[7].start,
            e[7].end + 0x10_0000,
            e[7].start,
            e[7].end - 1
        ),
    ];
    for i in alive().filter(|&i| e[i].path.starts_with("/bin/")) {
        // The first dentry met twice: busybox from itself, bin from
        // the other file.
        let (leaf, again) = match e[i].path.as_str() {
            "/bin/busybox" => (world.busybox, world.busybox),
            _ => (world.long, world.bin),
        };
        expected.push(format!(
            "the file of VMA {:#x}-{:#x}: the dentries up from {leaf:#x} lead back to {again:#x} (a loop); cut",
            e[i].start, e[i].end
        ));
    }
    assert_eq!(reasons(&vmas), expected);
    // The loop is followed in what was read, not by reading it again.
    assert_eq!(calls, 9);
    let kept: Vec<Line> = alive()
        .map(|i| {
            let mut l = e[i].clone();
            if l.path.starts_with("/bin/") {
                l.path = String::new();
            }
            l
        })
        .collect();
    assert_eq!(vmas.vmas.iter().map(line).collect::<Vec<_>>(), kept);
}
