//! Module lists in made-up kernel memory, in both of `struct module`'s
//! layouts (before 6.4 and after) as made-up BTF gives them (offsets no
//! kernel uses), and the loops and torn links a walk must stop at.

use std::sync::Arc;

use super::*;
use crate::linux::find::btf::builder::BtfBuilder;
use crate::linux::find::btf::Btf;
use crate::linux::offsets::ModuleLayout;
use crate::{AddressSpace, MemBackend, Memory};

const DIRECT: u64 = 0xffff_8880_0000_0000;
const MEMORY: usize = 1 << 20;
/// The list's head.
const HEAD: u64 = DIRECT + 0x1000;
// The made-up layout.
const MODULE_SIZE: u32 = 0x300;
const STATE: u64 = 0x10;
const LIST: u64 = 0x40;
const NAME: u64 = 0x80;
const CORE: u64 = 0x100;
const INIT: u64 = 0x140;
const LAYOUT_BASE: u64 = 0x8;
const LAYOUT_SIZE: u64 = 0x18;
const MEM: u64 = 0x100;
const MEMORY_SIZE: u32 = 0x28;
const MEMORY_BASE: u64 = 0x10;
const MEMORY_BYTES: u64 = 0x20;
/// `MOD_TEXT`, made up too.
const TEXT: u64 = 2;
const KINDS: u64 = 7;

/// Made-up BTF: `struct module` before 6.4 (`core_layout`,
/// `init_layout`), or after (`mem[7]`).
fn btf(typed: bool) -> Btf {
    let mut b = BtfBuilder::new();
    b.structure("list_head", 16, &[("prev", 8), ("next", 0)]);
    let name = b.array(7);
    let mut module = vec![("state", STATE, 0), ("list", LIST, 0), ("name", NAME, name)];
    if typed {
        let memory = b.next_id();
        b.structure(
            "module_memory",
            MEMORY_SIZE,
            &[("base", MEMORY_BASE), ("size", MEMORY_BYTES)],
        );
        let mem = b.array_of(memory, KINDS as u32);
        module.push(("mem", MEM, mem));
        b.enumeration(
            "mod_mem_type",
            &[
                ("MOD_DATA", 0),
                ("MOD_RODATA", 1),
                ("MOD_TEXT", TEXT as i32),
            ],
        );
    } else {
        b.structure(
            "module_layout",
            0x40,
            &[("base", LAYOUT_BASE), ("size", LAYOUT_SIZE)],
        );
        module.extend([("core_layout", CORE, 0), ("init_layout", INIT, 0)]);
    }
    b.structure_typed("module", MODULE_SIZE, &module)
        .enumeration(
            "module_state",
            &[
                ("MODULE_STATE_LIVE", 0),
                ("MODULE_STATE_COMING", 1),
                ("MODULE_STATE_GOING", 2),
                ("MODULE_STATE_UNFORMED", 3),
            ],
        );
    Btf::parse(&b.finish()).unwrap()
}

/// Kernel memory with a list of modules.
struct World {
    bytes: Vec<u8>,
    typed: bool,
    /// The modules' addresses, in list order.
    modules: Vec<u64>,
    expected: Vec<Module>,
}

impl World {
    /// Three modules: (name, state, sizes, base).
    fn new(typed: bool) -> World {
        let mut w = World {
            bytes: vec![0; MEMORY],
            typed,
            modules: Vec::new(),
            expected: Vec::new(),
        };
        let made = [
            ("ext4", 0u32, 0xffff_ffff_c0a0_0000u64),
            ("virtio_blk", 1, 0xffff_ffff_c0b0_0000),
            (
                "a-name-of-fifty-five-bytes-that-fills-the-whole-field-x",
                2,
                0,
            ),
        ];
        for (i, &(name, state, base)) in made.iter().enumerate() {
            let m = DIRECT + 0x10_000 + i as u64 * 0x1000;
            w.put(m + STATE, u64::from(state));
            w.put_bytes(m + NAME, name.as_bytes());
            let size = match typed {
                true => {
                    let mut total = 0;
                    for kind in 0..KINDS {
                        let at = m + MEM + kind * u64::from(MEMORY_SIZE);
                        let size = 0x1000 * (kind + 1) + i as u64;
                        w.put(at + MEMORY_BYTES, size);
                        w.put(at + MEMORY_BASE, if kind == TEXT { base } else { 0xdead });
                        total += size;
                    }
                    total
                }
                false => {
                    w.put(m + CORE + LAYOUT_BASE, base);
                    w.put(m + CORE + LAYOUT_SIZE, 0x5000 + i as u64);
                    w.put(m + INIT + LAYOUT_BASE, 0xdead);
                    w.put(m + INIT + LAYOUT_SIZE, 0x2000);
                    0x7000 + i as u64
                }
            };
            w.modules.push(m);
            w.expected.push(Module {
                address: m,
                name: name.to_string(),
                size,
                base,
                state: [ModuleState::Live, ModuleState::Coming, ModuleState::Going][i],
            });
        }
        w.link(&w.modules.clone());
        w
    }

    fn put(&mut self, va: u64, value: u64) {
        self.put_bytes(va, &value.to_le_bytes());
    }

    fn put_bytes(&mut self, va: u64, bytes: &[u8]) {
        let pa = (va - DIRECT) as usize;
        self.bytes[pa..pa + bytes.len()].copy_from_slice(bytes);
    }

    /// The head and `modules` linked in a circle, both ways.
    fn link(&mut self, modules: &[u64]) {
        let nodes: Vec<u64> = std::iter::once(HEAD)
            .chain(modules.iter().map(|m| m + LIST))
            .collect();
        for (i, &node) in nodes.iter().enumerate() {
            let next = nodes[(i + 1) % nodes.len()];
            let prev = nodes[(i + nodes.len() - 1) % nodes.len()];
            self.put(node, next);
            self.put(node + 8, prev);
        }
    }

    /// The list as read, and the read calls it took.
    fn read(&self) -> (ModuleList, u64) {
        let backend = Arc::new(MemBackend::new(self.bytes.clone()));
        let mem = Memory::with_config(backend.clone(), Default::default());
        let layout = ModuleLayout::from_btf(&btf(self.typed)).unwrap();
        let space = AddressSpace::new(mem.clone(), 0, crate::vm::Paging::FourLevel);
        let kmem = KernelMemory::direct_map_only(&space, DIRECT);
        let list = mem.block_on(read(&kmem, &layout, HEAD));
        (list, backend.read_calls())
    }
}

fn reasons(list: &ModuleList) -> Vec<(u64, String)> {
    list.failed
        .iter()
        .map(|f| (f.address, f.reason.clone()))
        .collect()
}

#[test]
#[cfg_attr(miri, ignore)] // Miri: slow (linux has no unsafe code)
fn modules_in_both_layouts_as_proc_modules_shows_them() {
    for typed in [false, true] {
        let world = World::new(typed);
        let (list, calls) = world.read();
        assert_eq!(list.failed, [], "typed {typed}");
        assert_eq!(list.modules, world.expected, "typed {typed}");
        // The head, then a call per module.
        assert_eq!(calls, 1 + 3, "typed {typed}");
    }
}

#[test]
fn an_empty_list_is_its_head_alone() {
    let mut world = World::new(false);
    world.link(&[]);
    let (list, calls) = world.read();
    assert_eq!(list, ModuleList::default());
    assert_eq!(calls, 1);
}

#[test]
fn loops_torn_links_and_wild_pointers_stop_the_walk() {
    // The third module leads back to the second.
    let mut world = World::new(true);
    let [first, second, third] = world.modules[..] else {
        unreachable!()
    };
    world.put(third + LIST, second + LIST);
    let (list, calls) = world.read();
    assert_eq!(list.modules, world.expected);
    assert_eq!(
        reasons(&list),
        [(
            second,
            "module reached twice in the list (a loop, or a list changing while read): the walk stopped".to_string()
        )]
    );
    assert_eq!(calls, 1 + 3);

    // The second points back elsewhere than at the first.
    let mut world = World::new(false);
    world.put(second + LIST + 8, third + LIST);
    let (list, _) = world.read();
    assert_eq!(list.modules, world.expected[..1]);
    assert_eq!(
        reasons(&list),
        [(
            second,
            format!(
                "the module's list node points back at {:#x}, not at {:#x} that leads to it (a list changing while read): the walk stopped",
                third + LIST,
                first + LIST
            )
        )]
    );

    // The first leads nowhere, the head outside memory.
    let mut world = World::new(false);
    world.put(first + LIST, 0x40);
    let (list, _) = world.read();
    assert_eq!(list.modules, world.expected[..1]);
    assert_eq!(
        reasons(&list),
        [(
            first + LIST,
            "the list's next link is 0x40, no kernel address: the walk stopped".to_string()
        )]
    );
}

#[test]
fn no_more_modules_are_read_than_the_walk_allows() {
    let world = World::new(false);
    let backend = Arc::new(MemBackend::new(world.bytes.clone()));
    let mem = Memory::with_config(backend.clone(), Default::default());
    let layout = ModuleLayout::from_btf(&btf(false)).unwrap();
    let space = AddressSpace::new(mem.clone(), 0, crate::vm::Paging::FourLevel);
    let kmem = KernelMemory::direct_map_only(&space, DIRECT);
    let objects = list::Objects {
        node: layout.list,
        span: layout.span(),
        what: "module",
    };
    let linked = mem.block_on(list::objects(&kmem, &layout.list_links, HEAD, objects, 2));
    assert_eq!(linked.objects.len(), 2);
    assert!(linked.at_limit);
    assert_eq!(
        linked.failed,
        [StructureFailure::new(
            world.modules[2],
            "more than 2 modules in the list: this one and those after it not read"
        )]
    );
    // Nothing read past the limit: the head and two modules.
    assert_eq!(backend.read_calls(), 3);
    // What a target allows: a struct module and a page of the module
    // area each.
    assert_eq!(max_modules(1 << 20, 0x400), 1024);
    assert_eq!(max_modules(1 << 40, 0x400), 389_120);
}

#[test]
fn states_read_as_proc_modules_words() {
    let words: Vec<String> = [
        ModuleState::Live,
        ModuleState::Coming,
        ModuleState::Going,
        ModuleState::Unformed,
        ModuleState::Unknown(9),
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    assert_eq!(
        words,
        ["Live", "Loading", "Unloading", "Unformed", "unknown (9)"]
    );
}
