//! Module lists read from made-up kernel memory whose layouts (given by
//! made-up BTF) are no kernel's: the typed memories of 6.4 and later and
//! the layouts before, exported symbols both ways, sections, and lists
//! that loop or break.

use super::exports::{exports, sections_of};
use super::*;
use crate::linux::fake_memory::{FakeMemory as Fake, DIRECT};
use crate::linux::find::btf::builder::{BtfBuilder, KIND_INT, KIND_STRUCT};
use crate::linux::find::btf::Btf;

const MEMORY: usize = 1 << 20;
/// The list head (in the made-up kernel's data).
const HEAD: u64 = DIRECT + 0x100;

// The made-up layout of `struct module`.
const STATE: u64 = 4;
const LIST: u64 = 16;
const NAME: u64 = 40;
const NAME_LEN: u32 = 56;
const SYMS: u64 = 112;
const NUM_SYMS: u64 = 124;
const MEMS: u64 = 160;
const MEM_SIZE: u32 = 24;
const MEM_TYPES: u64 = 7;
const SECT_ATTRS: u64 = 400;
const MODULE_SIZE: u32 = 512;
const CORE_LAYOUT: u64 = 200;
const INIT_LAYOUT: u64 = 264;
// `struct module_sect_attrs` and `module_sect_attr`.
const NSECTIONS: u64 = 8;
const ATTRS: u64 = 16;
const SECT_ATTR_SIZE: u64 = 48;
const SECT_NAME: u64 = 8;
const SECT_ADDRESS: u64 = 40;

/// Whether the made-up kernel describes module memory by type (6.4 on).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    Typed,
    Layouts,
}

fn btf(form: Form, relative: bool) -> Btf {
    let mut b = BtfBuilder::new();
    let name = b.string("char");
    let char_ty = b.push(&[name, KIND_INT << 24, 1, 8]);
    let name = b.string("int");
    let int_ty = b.push(&[name, KIND_INT << 24, 4, 32]);
    let chars = b.array_of(char_ty, NAME_LEN);
    let long = b.long();
    let list_head = b.composite(
        KIND_STRUCT,
        "list_head",
        16,
        &[("next", long, 0), ("prev", long, 8)],
    );
    let mut members = vec![
        ("state", int_ty, STATE),
        ("list", list_head, LIST),
        ("name", chars, NAME),
        ("syms", long, SYMS),
        ("num_syms", int_ty, NUM_SYMS),
        ("sect_attrs", long, SECT_ATTRS),
    ];
    let states = [
        ("MODULE_STATE_LIVE", 0),
        ("MODULE_STATE_COMING", 1),
        ("MODULE_STATE_GOING", 2),
        ("MODULE_STATE_UNFORMED", 3),
    ];
    b.enumeration("module_state", &states);
    match form {
        Form::Typed => {
            let memory = b.composite(
                KIND_STRUCT,
                "module_memory",
                MEM_SIZE,
                &[("base", long, 0), ("size", int_ty, 8)],
            );
            let mems = b.array_of(memory, MEM_TYPES as u32);
            members.push(("mem", mems, MEMS));
            b.enumeration(
                "mod_mem_type",
                &[
                    ("MOD_TEXT", 0),
                    ("MOD_DATA", 1),
                    ("MOD_RODATA", 2),
                    ("MOD_RO_AFTER_INIT", 3),
                    ("MOD_INIT_TEXT", 4),
                    ("MOD_INIT_DATA", 5),
                    ("MOD_INIT_RODATA", 6),
                    ("MOD_MEM_NUM_TYPES", 7),
                ],
            );
        }
        Form::Layouts => {
            let layout = b.composite(
                KIND_STRUCT,
                "module_layout",
                64,
                &[
                    ("base", long, 0),
                    ("size", int_ty, 8),
                    ("text_size", int_ty, 12),
                ],
            );
            members.push(("core_layout", layout, CORE_LAYOUT));
            members.push(("init_layout", layout, INIT_LAYOUT));
        }
    }
    b.composite(KIND_STRUCT, "module", MODULE_SIZE, &members);
    match relative {
        true => b.composite(
            KIND_STRUCT,
            "kernel_symbol",
            12,
            &[
                ("value_offset", int_ty, 0),
                ("name_offset", int_ty, 4),
                ("namespace_offset", int_ty, 8),
            ],
        ),
        false => b.composite(
            KIND_STRUCT,
            "kernel_symbol",
            24,
            &[
                ("value", long, 0),
                ("name", long, 8),
                ("namespace", long, 16),
            ],
        ),
    };
    let attribute = b.composite(KIND_STRUCT, "attribute", 16, &[("name", long, 0)]);
    let bin_attribute = b.composite(KIND_STRUCT, "bin_attribute", 40, &[("attr", attribute, 0)]);
    let sect_attr = b.composite(
        KIND_STRUCT,
        "module_sect_attr",
        SECT_ATTR_SIZE as u32,
        &[
            ("battr", bin_attribute, SECT_NAME),
            ("address", long, SECT_ADDRESS),
        ],
    );
    let attrs = b.array_of(sect_attr, 0);
    b.composite(
        KIND_STRUCT,
        "module_sect_attrs",
        16,
        &[("nsections", int_ty, NSECTIONS), ("attrs", attrs, ATTRS)],
    );
    Btf::parse(&b.finish()).unwrap()
}

/// The made-up kernel's modules.
trait Modules {
    fn module(&mut self, form: Form, name: &str, base: u64, sizes: &[u32]) -> u64;
    fn link(&mut self, modules: &[u64]);
}

impl Modules for Fake {
    /// A module named `name` whose memory starts at `base`, `sizes` bytes
    /// of each type (the first two for the older layouts' core and init).
    fn module(&mut self, form: Form, name: &str, base: u64, sizes: &[u32]) -> u64 {
        let m = self.alloc(u64::from(MODULE_SIZE));
        self.put_bytes(m + NAME, name.as_bytes());
        match form {
            Form::Typed => {
                self.put(m + MEMS, base);
                for (i, &size) in sizes.iter().enumerate() {
                    self.put_u32(m + MEMS + i as u64 * u64::from(MEM_SIZE) + 8, size);
                }
            }
            Form::Layouts => {
                self.put(m + CORE_LAYOUT, base);
                self.put_u32(m + CORE_LAYOUT + 8, sizes[0]);
                self.put_u32(m + INIT_LAYOUT + 8, sizes[1]);
            }
        }
        m
    }

    /// Links `modules` into the list at `HEAD`, in order.
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
}

fn list(fake: &Fake, form: Form) -> (ModuleList, u64) {
    let layout = ModuleLayout::from_btf(&btf(form, true)).unwrap();
    fake.read(async |kmem| read(kmem, &layout, HEAD).await)
}

fn names(list: &ModuleList) -> Vec<&str> {
    list.modules.iter().map(|m| m.name.as_str()).collect()
}

const NAMES: [&str; 5] = ["alpha", "bravo", "charlie", "delta", "echo"];

fn five(f: &mut Fake, form: Form) -> Vec<u64> {
    let modules: Vec<u64> = NAMES
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let i = i as u32;
            let sizes = [0x1000 * (i + 1), 0x200, 0x300, 0x40, 0, 0, 0];
            f.module(
                form,
                name,
                0xffff_ffff_c000_0000 + u64::from(i) * 0x10_0000,
                &sizes,
            )
        })
        .collect();
    f.link(&modules);
    modules
}

#[test]
fn both_layouts_give_every_module_as_proc_modules_does_from_both_ends() {
    for form in [Form::Typed, Form::Layouts] {
        let mut f = Fake::new(MEMORY);
        let modules = five(&mut f, form);
        f.put_u32(modules[3] + STATE, 1);
        let (got, calls) = list(&f, form);
        assert_eq!(got.failed, vec![]);
        assert_eq!(names(&got), NAMES);
        let m = &got.modules[1];
        assert_eq!(m.address, modules[1]);
        assert_eq!(m.base, 0xffff_ffff_c010_0000);
        let size = match form {
            Form::Typed => 0x2000 + 0x200 + 0x300 + 0x40,
            Form::Layouts => 0x2000 + 0x200,
        };
        assert_eq!(m.size, size);
        assert_eq!(m.state, ModuleState::Live);
        assert_eq!(got.modules[3].state, ModuleState::Coming);
        // The head, then three steps from both ends (1 and 5, 2 and 4, 3).
        assert_eq!(calls, 4);
    }
    // No module: the head alone.
    let mut f = Fake::new(MEMORY);
    f.link(&[]);
    let (got, calls) = list(&f, Form::Typed);
    assert_eq!((got, calls), (ModuleList::default(), 1));
}

/// The addresses of the failures of `list`, each of whose reasons must
/// say `what`.
fn failures(list: &ModuleList, what: &str) -> Vec<u64> {
    list.failed
        .iter()
        .map(|f| {
            assert!(f.reason.contains(what), "{f}");
            f.address
        })
        .collect()
}

#[test]
fn a_list_that_loops_or_breaks_is_cut_and_says_where() {
    // charlie's next leads back to bravo: the walk from the head loops,
    // the walk from the tail meets it; every module is listed once.
    let mut f = Fake::new(MEMORY);
    let modules = five(&mut f, Form::Typed);
    f.put(modules[2] + LIST, modules[1] + LIST);
    let (got, _) = list(&f, Form::Typed);
    assert_eq!(names(&got), NAMES);
    assert_eq!(failures(&got, "a loop"), [modules[1]]);

    // A module whose links point at itself both ways: its link back is
    // not the head that leads to it, so it is cut, not followed.
    let mut f = Fake::new(MEMORY);
    let m = f.module(Form::Typed, "self", 0, &[0; 7]);
    f.put(HEAD, m + LIST);
    f.put(HEAD + 8, m + LIST);
    f.put(m + LIST, m + LIST);
    f.put(m + LIST + 8, m + LIST);
    let (got, _) = list(&f, Form::Typed);
    assert_eq!(names(&got), Vec::<&str>::new());
    // Each end tries it, and it points back at neither.
    assert_eq!(failures(&got, "points back"), [m, m]);

    // charlie's prev changed while the list was read (as an unlink in
    // progress leaves it): it does not lead back to bravo, so the walk
    // from the head stops there; the walk from the tail reads charlie,
    // whose next leads back to delta, and stops at its prev.
    let mut f = Fake::new(MEMORY);
    let modules = five(&mut f, Form::Typed);
    let elsewhere = DIRECT + 0x8000;
    f.put(modules[2] + LIST + 8, elsewhere);
    let (got, _) = list(&f, Form::Typed);
    assert_eq!(names(&got), NAMES);
    assert_eq!(
        failures(&got, "points back"),
        [modules[2], elsewhere - LIST]
    );

    // A node that is no module (its name is not a string).
    let mut f = Fake::new(MEMORY);
    let modules = five(&mut f, Form::Typed);
    f.put_bytes(modules[0] + NAME, &[0xff; NAME_LEN as usize]);
    let (got, _) = list(&f, Form::Typed);
    assert_eq!(names(&got), ["bravo", "charlie", "delta", "echo"]);
    assert_eq!(failures(&got, "not a module"), [modules[0]]);
}

#[test]
fn a_wild_link_stops_its_end_and_the_other_end_reads_on() {
    // alpha's next is no kernel address: the end from the tail reads the
    // other four and meets alpha, read from the head.
    let mut f = Fake::new(MEMORY);
    let modules = five(&mut f, Form::Layouts);
    f.put(modules[0] + LIST, 0x40);
    let (got, _) = list(&f, Form::Layouts);
    assert_eq!(names(&got), NAMES);
    assert_eq!(
        got.failed,
        [StructureFailure::new(
            modules[0],
            "the list's next link is 0x40, no kernel address: the walk stopped there"
        )]
    );
}

#[test]
fn no_more_modules_are_read_than_the_walk_allows() {
    let mut f = Fake::new(MEMORY);
    let modules = five(&mut f, Form::Layouts);
    let layout = ModuleLayout::from_btf(&btf(Form::Layouts, true)).unwrap();
    let objects = list::Objects {
        node: layout.list,
        span: layout.span(),
        what: "module",
    };
    let (linked, calls) =
        f.read(async |kmem| list::objects(kmem, &layout.list_links, HEAD, objects, 2).await);
    // alpha and echo, one from each end.
    let read: Vec<u64> = linked.objects.iter().map(|o| o.0).collect();
    assert_eq!(read, [modules[0], modules[4]]);
    assert!(linked.at_limit);
    assert_eq!(
        linked.failed,
        [StructureFailure::new(
            modules[1],
            "more than 2 modules in the list: this one and those past it not read"
        )]
    );
    // Nothing read past the limit: the head, then both ends once.
    assert_eq!(calls, 2);
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

#[test]
fn exported_symbols_both_ways_and_sections() {
    for relative in [true, false] {
        let mut f = Fake::new(MEMORY);
        let modules = five(&mut f, Form::Typed);
        // (Relative offsets reach 2 GiB either way: the symbols lie near
        // their table, as a module's do.)
        let exported = [
            ("alpha_open", DIRECT + 0x9_1230),
            ("alpha_close", DIRECT + 0x8_4560),
        ];
        let size: u64 = if relative { 12 } else { 24 };
        let syms = f.alloc(size * exported.len() as u64);
        for (i, (name, value)) in exported.iter().enumerate() {
            let name = f.string(name);
            let entry = syms + i as u64 * size;
            if relative {
                f.put_u32(entry, value.wrapping_sub(entry) as u32);
                f.put_u32(entry + 4, name.wrapping_sub(entry + 4) as u32);
            } else {
                f.put(entry, *value);
                f.put(entry + 8, name);
            }
        }
        f.put(modules[0] + SYMS, syms);
        f.put_u32(modules[0] + NUM_SYMS, exported.len() as u32);
        let attrs = f.alloc(ATTRS + 2 * SECT_ATTR_SIZE);
        f.put_u32(attrs + NSECTIONS, 2);
        for (i, (name, at)) in [
            (".text", 0xffff_ffff_c000_0000u64),
            (".data", 0xffff_ffff_c000_8000),
        ]
        .iter()
        .enumerate()
        {
            let name = f.string(name);
            let entry = attrs + ATTRS + i as u64 * SECT_ATTR_SIZE;
            f.put(entry + SECT_NAME, name);
            f.put(entry + SECT_ADDRESS, *at);
        }
        f.put(modules[0] + SECT_ATTRS, attrs);
        let layout = ModuleLayout::from_btf(&btf(Form::Typed, relative)).unwrap();
        let form = layout.symbol_form.unwrap();
        let (_, section_layout) = layout.sections.unwrap();
        let ((got, sections, none), _) = f.read(async |kmem| {
            let list = read(kmem, &layout, HEAD).await;
            (
                exports(kmem, form, &list.modules[0]).await,
                sections_of(kmem, &section_layout, &list.modules[0]).await,
                exports(kmem, form, &list.modules[1]).await,
            )
        });
        let want: Vec<(String, u64)> = exported.iter().map(|(n, v)| (n.to_string(), *v)).collect();
        assert_eq!(got, Ok(want));
        assert_eq!(
            sections,
            Ok(vec![
                (".text".into(), 0xffff_ffff_c000_0000),
                (".data".into(), 0xffff_ffff_c000_8000)
            ])
        );
        assert_eq!(none, Ok(vec![]));

        // A count whose table would not fit in the module is refused
        // before anything is read or allocated for it.
        f.put_u32(modules[0] + NUM_SYMS, 60_000);
        let (refused, calls) = f.read(async |kmem| {
            let list = read(kmem, &layout, HEAD).await;
            exports(kmem, form, &list.modules[0]).await
        });
        assert!(
            refused
                .as_ref()
                .unwrap_err()
                .contains("more than the module's"),
            "{refused:?}"
        );
        // The head and three steps of the list: no read of a table.
        assert_eq!(calls, 4);
    }
}
