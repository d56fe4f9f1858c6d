//! Images of the test guest changed into what hostile or corrupt kernel
//! memory looks like: structures patched where the project's own API finds
//! them (addresses from the walks, offsets from the kernel's BTF), and
//! hostile shapes (trees of many nodes) built in the guest's free RAM, the
//! longest run of zero pages of its image.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use leechio::linux::Kernel;
use serde_json::json;

use super::qemu::Guest;

const PAGE: u64 = 0x1000;

/// An image of the guest on disk, and where its longest run of zero pages
/// (free RAM) is.
pub struct Clean {
    _dir: tempfile::TempDir,
    path: PathBuf,
    free: (u64, u64),
}

impl Clean {
    /// The RAM of `guest` (paused meanwhile) in a file, by QEMU's
    /// `pmemsave`, never whole in this process's memory: the programs it
    /// starts inherit its peak for their own (`ru_maxrss` after `exec`).
    pub fn save(guest: &Guest) -> Clean {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("clean.raw");
        let size = guest.memory().bytes();
        {
            let _paused = guest.pause();
            guest.qmp(
                "pmemsave",
                json!({ "val": 0, "size": size, "filename": path.to_str().unwrap() }),
            );
        }
        let file = File::open(&path).unwrap();
        assert_eq!(file.metadata().unwrap().len(), size);
        // The longest run of zero pages, read a MiB at a time.
        let (mut best, mut run_start) = ((0, 0), None);
        let mut chunk = vec![0u8; 1 << 20];
        for at in (0..size).step_by(chunk.len()) {
            file.read_exact_at(&mut chunk, at).unwrap();
            for (i, page) in chunk.chunks(PAGE as usize).enumerate() {
                let pa = at + i as u64 * PAGE;
                match (page.iter().all(|&b| b == 0), run_start) {
                    (true, None) => run_start = Some(pa),
                    (false, Some(start)) => {
                        if pa - start > best.1 - best.0 {
                            best = (start, pa);
                        }
                        run_start = None;
                    }
                    _ => {}
                }
            }
        }
        if let Some(start) = run_start.filter(|&start| size - start > best.1 - best.0) {
            best = (start, size);
        }
        Clean {
            _dir: dir,
            path,
            free: best,
        }
    }

    /// The image's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The device string that reads it.
    pub fn device(&self) -> String {
        format!("file://{}", self.path.display())
    }

    /// A copy to change.
    pub fn craft(&self) -> Crafted {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("crafted.raw");
        std::fs::copy(&self.path, &path).unwrap();
        let file = File::options().read(true).write(true).open(&path).unwrap();
        Crafted {
            _dir: dir,
            path,
            file,
            next: self.free.0,
            end: self.free.1,
        }
    }
}

/// A copy of the guest's image being changed.
pub struct Crafted {
    _dir: tempfile::TempDir,
    path: PathBuf,
    file: File,
    next: u64,
    end: u64,
}

impl Crafted {
    /// The device string that reads it.
    pub fn device(&self) -> String {
        format!("file://{}", self.path.display())
    }

    /// `bytes` at physical `pa`.
    pub fn poke(&self, pa: u64, bytes: &[u8]) {
        self.file.write_all_at(bytes, pa).unwrap();
    }

    /// A little-endian word at physical `pa`.
    pub fn poke_u64(&self, pa: u64, value: u64) {
        self.poke(pa, &value.to_le_bytes());
    }

    /// `len` bytes at physical `pa`.
    pub fn peek(&self, pa: u64, len: usize) -> Vec<u8> {
        let mut bytes = vec![0; len];
        self.file.read_exact_at(&mut bytes, pa).unwrap();
        bytes
    }

    /// The little-endian word at physical `pa`.
    pub fn peek_u64(&self, pa: u64) -> u64 {
        u64::from_le_bytes(self.peek(pa, 8).try_into().unwrap())
    }

    /// `len` bytes of free RAM aligned to `align`: their physical address.
    pub fn alloc(&mut self, len: u64, align: u64) -> u64 {
        let at = self.next.next_multiple_of(align);
        assert!(
            at + len <= self.end,
            "the guest has no {len} bytes of free RAM left"
        );
        self.next = at + len;
        at
    }
}

/// Where a kernel virtual address of the image or the direct map is in
/// the image.
pub fn physical(kernel: &Kernel, va: u64) -> u64 {
    let image_end = kernel.virtual_base() + (1 << 30);
    if (kernel.virtual_base()..image_end).contains(&va) {
        va - kernel.virtual_base() + kernel.physical_base()
    } else {
        va - kernel.direct_map_base()
    }
}

/// The direct map's address of physical `pa`.
pub fn direct(kernel: &Kernel, pa: u64) -> u64 {
    kernel.direct_map_base() + pa
}

/// Byte offset of `path` in struct `ty`, from the kernel's BTF.
pub fn offset(kernel: &Kernel, ty: &str, path: &str) -> u64 {
    kernel
        .offset_of(ty, path)
        .unwrap_or_else(|e| panic!("{ty}.{path}: {e}"))
}

/// The maple tree's node layout, from BTF.
pub struct MapleNodes {
    parent: u64,
    pivots: u64,
    slots: u64,
    meta_end: u64,
    leaf: u64,
    range: u64,
}

/// Slots of a `maple_range_64` node.
const MAPLE_SLOTS: usize = 16;

impl MapleNodes {
    pub fn of(kernel: &Kernel) -> MapleNodes {
        let kind = |name| kernel.btf().enum_value(name).unwrap() as u64;
        let slots = kernel.btf().member_size("maple_range_64", "slot").unwrap() / 8;
        assert_eq!(slots as usize, MAPLE_SLOTS);
        MapleNodes {
            parent: offset(kernel, "maple_range_64", "parent"),
            pivots: offset(kernel, "maple_range_64", "pivot"),
            slots: offset(kernel, "maple_range_64", "slot"),
            meta_end: offset(kernel, "maple_range_64", "meta")
                + offset(kernel, "maple_metadata", "end"),
            leaf: kind("maple_leaf_64"),
            range: kind("maple_range_64"),
        }
    }

    /// A tree of range and leaf nodes in free RAM whose leaves hold
    /// `count` entries, `entry(i)` giving the value and the last index its
    /// slot covers, in order (the last covers up to the end), 16 to a
    /// node; the encoded root (`ma_root`). Written a node at a time.
    pub fn build(
        &self,
        kernel: &Kernel,
        image: &mut Crafted,
        count: u64,
        entry: impl Fn(u64) -> (u64, u64),
    ) -> u64 {
        let mut kind = self.leaf;
        let mut level: Option<Vec<(u64, u64)>> = None;
        let mut n = count;
        loop {
            let groups = n.div_ceil(MAPLE_SLOTS as u64);
            let mut above = Vec::with_capacity(groups as usize);
            for g in 0..groups {
                let group: Vec<(u64, u64)> = (g * MAPLE_SLOTS as u64
                    ..n.min((g + 1) * MAPLE_SLOTS as u64))
                    .map(|i| match &level {
                        None => entry(i),
                        Some(level) => level[i as usize],
                    })
                    .collect();
                let pa = image.alloc(256, 256);
                let max = match g + 1 == groups {
                    true => u64::MAX,
                    false => group.last().unwrap().1,
                };
                let mut node = vec![0u8; 256];
                let mut put = |at: u64, value: u64| {
                    node[at as usize..at as usize + 8].copy_from_slice(&value.to_le_bytes())
                };
                // Not the node itself, which would mark it dead; the walk
                // reads no more of it.
                put(self.parent, 1);
                for (i, &(value, last)) in group.iter().enumerate() {
                    let last = if i + 1 == group.len() { max } else { last };
                    if i < MAPLE_SLOTS - 1 {
                        put(self.pivots + 8 * i as u64, last);
                    }
                    put(self.slots + 8 * i as u64, value);
                }
                // The metadata shares the last slot: it says where the
                // data ends only in a node that does not use that slot.
                if group.len() < MAPLE_SLOTS {
                    node[self.meta_end as usize] = (group.len() - 1) as u8;
                }
                image.poke(pa, &node);
                above.push((direct(kernel, pa) | (kind << 3) | 4, max));
            }
            if groups == 1 {
                // A root pointer has bit 1 set.
                return (above[0].0 & !7) | 2;
            }
            n = groups;
            level = Some(above);
            kind = self.range;
        }
    }
}

/// The BTF type section of `btf` (a whole blob): the offset of each
/// type's record, by id (1 up), and where the names start.
struct BtfTypes {
    records: Vec<usize>,
    strings: usize,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// The length of a BTF type record whose info word is `info`: 12 bytes
/// and what its kind adds.
pub fn btf_record_len(info: u32) -> usize {
    let vlen = (info & 0xffff) as usize;
    12 + match (info >> 24) & 0x1f {
        // int, var, decl tag
        1 | 14 | 17 => 4,
        // array
        3 => 12,
        // struct, union, datasec, enum64
        4 | 5 | 15 | 19 => 12 * vlen,
        // enum, function prototype
        6 | 13 => 8 * vlen,
        _ => 0,
    }
}

impl BtfTypes {
    fn parse(btf: &[u8]) -> BtfTypes {
        let hdr = u32_at(btf, 4) as usize;
        let (type_off, type_len) = (u32_at(btf, 8) as usize, u32_at(btf, 12) as usize);
        let str_off = u32_at(btf, 16) as usize;
        let types = hdr + type_off;
        let mut records = Vec::new();
        let mut at = types;
        while at < types + type_len {
            records.push(at);
            at += btf_record_len(u32_at(btf, at + 4));
        }
        BtfTypes {
            records,
            strings: hdr + str_off,
        }
    }

    fn name<'b>(&self, btf: &'b [u8], name_off: u32) -> &'b [u8] {
        let start = self.strings + name_off as usize;
        let end = btf[start..].iter().position(|&b| b == 0).unwrap() + start;
        &btf[start..end]
    }

    /// Where, in `btf`, the `offset` word (bits) of member `member` of
    /// struct `ty` lies.
    fn member_offset_at(&self, btf: &[u8], ty: &str, member: &str) -> usize {
        for &at in &self.records {
            let info = u32_at(btf, at + 4);
            if (info >> 24) & 0x1f != 4 || self.name(btf, u32_at(btf, at)) != ty.as_bytes() {
                continue;
            }
            for m in 0..(info & 0xffff) as usize {
                let record = at + 12 + 12 * m;
                if self.name(btf, u32_at(btf, record)) == member.as_bytes() {
                    return record + 8;
                }
            }
        }
        panic!("no member {member} of struct {ty} in the BTF");
    }
}

/// Moves member `member` of struct `ty` to byte `to`, in the BTF the
/// kernel holds in memory.
pub fn move_btf_member(kernel: &Kernel, image: &Crafted, ty: &str, member: &str, to: u64) {
    let (va, len) = kernel.btf_location().expect("BTF in memory");
    let pa = physical(kernel, va);
    let btf = image.peek(pa, len as usize);
    let types = BtfTypes::parse(&btf);
    let at = types.member_offset_at(&btf, ty, member);
    image.poke(pa + at as u64, &(to as u32 * 8).to_le_bytes());
}

/// The xarray's node layout (`struct xa_node`), from BTF.
pub struct XaNodes {
    size: u64,
    shift: u64,
    offset: u64,
    parent: u64,
    array: u64,
    slots: u64,
    count: u64,
}

impl XaNodes {
    pub fn of(kernel: &Kernel) -> XaNodes {
        let at = |m| offset(kernel, "xa_node", m);
        XaNodes {
            size: kernel.btf().size_of("xa_node").unwrap(),
            shift: at("shift"),
            offset: at("offset"),
            parent: at("parent"),
            array: at("array"),
            slots: at("slots"),
            count: kernel.btf().member_size("xa_node", "slots").unwrap() / 8,
        }
    }

    /// A tree of the array at `array` in free RAM, of `levels` levels,
    /// every node full but the root, which has `root_slots` children; the
    /// leaves' slots hold `entry(index)` (0 for none). The head entry
    /// (`xa_head`). Written a node at a time.
    pub fn build(
        &self,
        kernel: &Kernel,
        image: &mut Crafted,
        array: u64,
        levels: u32,
        root_slots: u64,
        entry: impl Fn(u64) -> u64,
    ) -> u64 {
        let bits = u64::from(self.count.trailing_zeros());
        let levels = levels as usize;
        let fanout = |d: usize| if d == 0 { root_slots } else { self.count };
        // Nodes per level, each level's nodes in a run of their own.
        let mut counts = vec![1u64];
        for d in 1..levels {
            counts.push(counts[d - 1] * fanout(d - 1));
        }
        let bases: Vec<u64> = counts
            .iter()
            .map(|&n| direct(kernel, image.alloc(n * self.size, 8)))
            .collect();
        for d in 0..levels {
            let shift = bits * (levels - 1 - d) as u64;
            for j in 0..counts[d] {
                let mut node = vec![0u8; self.size as usize];
                let mut put = |at: u64, value: u64| {
                    node[at as usize..at as usize + 8].copy_from_slice(&value.to_le_bytes())
                };
                let (parent, in_parent) = match d {
                    0 => (0, 0),
                    _ => {
                        let up = fanout(d - 1);
                        (bases[d - 1] + (j / up) * self.size, j % up)
                    }
                };
                put(self.parent, parent);
                put(self.array, array);
                for slot in 0..fanout(d) {
                    // Below the root every node is full: a leaf's first
                    // index is its place in its level times the slots.
                    let value = match d + 1 == levels {
                        true => entry(j * self.count + slot),
                        false => bases[d + 1] + (j * fanout(d) + slot) * self.size + 2,
                    };
                    put(self.slots + 8 * slot, value);
                }
                node[self.shift as usize] = shift as u8;
                node[self.offset as usize] = in_parent as u8;
                image.poke(physical(kernel, bases[d] + j * self.size), &node);
            }
        }
        bases[0] + 2
    }
}
