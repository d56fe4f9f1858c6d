//! BTF made to hurt, given with `--btf FILE` to an image of the guest whose
//! own BTF is gone, and put in the image's memory in place of its own: the
//! guest's real BTF with one thing changed (a typedef naming itself, two
//! naming each other, a struct whose anonymous member is the struct, an
//! array whose element is the array, a member half a GiB into a struct, a
//! struct of 4 GiB, strings with their NULs removed), and a sparse file of
//! 1 GiB. Each must end within
//! the deadline and the memory cap with a one-line error naming what is
//! wrong; before BTF was checked, each hung, overflowed the stack or
//! allocated gigabytes.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::Path;

use std::time::Duration;

use common::bounded::{run_bounded, Run};
use common::crafted::btf_record_len;
use common::qemu::shared_guest;
use leechio::linux::{Hints, Kernel};
use leechio::{DeviceConfig, LeechCore, Memory};

const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_TYPEDEF: u32 = 8;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn put(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// A BTF blob, split to be changed and put together again.
#[derive(Clone)]
struct Blob {
    types: Vec<u8>,
    strings: Vec<u8>,
    /// Where each type's record starts (type id - 1).
    starts: Vec<usize>,
}

impl Blob {
    fn new(bytes: &[u8]) -> Blob {
        let section = |off: usize, len: usize| {
            bytes[24 + u32_at(bytes, off) as usize..][..u32_at(bytes, len) as usize].to_vec()
        };
        let (types, strings) = (section(8, 12), section(16, 20));
        let mut starts = Vec::new();
        let mut at = 0;
        while at < types.len() {
            starts.push(at);
            at += btf_record_len(u32_at(&types, at + 4));
        }
        Blob {
            types,
            strings,
            starts,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut b = vec![0x9f, 0xeb, 1, 0];
        let t = self.types.len() as u32;
        for v in [24, 0, t, t, self.strings.len() as u32] {
            b.extend(v.to_le_bytes());
        }
        b.extend(&self.types);
        b.extend(&self.strings);
        b
    }

    fn name(&self, off: u32) -> &[u8] {
        let s = &self.strings[off as usize..];
        &s[..s.iter().position(|&c| c == 0).unwrap()]
    }

    /// The id of struct `name`.
    fn id_of(&self, name: &str) -> u32 {
        let at = (0..self.starts.len())
            .find(|&i| {
                let at = self.starts[i];
                (u32_at(&self.types, at + 4) >> 24) & 0x1f == KIND_STRUCT
                    && self.name(u32_at(&self.types, at)) == name.as_bytes()
            })
            .unwrap_or_else(|| panic!("no struct {name}"));
        at as u32 + 1
    }

    /// Where member `index` of type `id` starts (its name, type, offset).
    fn member(&self, id: u32, index: usize) -> usize {
        self.starts[id as usize - 1] + 12 + 12 * index
    }

    /// Member `name` of struct `id`, or of the anonymous structs and
    /// unions inside it, however deep (where it lies differs between
    /// kernel versions): the struct or union that holds it, and its index.
    fn find_member_deep(&self, id: u32, name: &[u8]) -> Option<(u32, usize)> {
        let vlen = u32_at(&self.types, self.starts[id as usize - 1] + 4) & 0xffff;
        (0..vlen as usize).find_map(|i| {
            let at = self.member(id, i);
            match self.name(u32_at(&self.types, at)) {
                n if n == name => Some((id, i)),
                b"" => {
                    let ty = u32_at(&self.types, at + 4);
                    let kind = (u32_at(&self.types, self.starts[ty as usize - 1] + 4) >> 24) & 0x1f;
                    [KIND_STRUCT, KIND_UNION]
                        .contains(&kind)
                        .then(|| self.find_member_deep(ty, name))
                        .flatten()
                }
                _ => None,
            }
        })
    }

    /// The id the next record gets.
    fn next_id(&self) -> u32 {
        self.starts.len() as u32 + 1
    }

    /// Appends a record: its id.
    fn push(&mut self, words: &[u32]) -> u32 {
        self.starts.push(self.types.len());
        words
            .iter()
            .for_each(|w| self.types.extend(w.to_le_bytes()));
        self.starts.len() as u32
    }

    /// Makes member `index` of `id` of type `ty`.
    fn retype(&mut self, id: u32, index: usize, ty: u32) {
        let at = self.member(id, index) + 4;
        put(&mut self.types, at, ty);
    }

    /// The first anonymous member of `task_struct`, or of `mm_struct`
    /// where the task has none (6.12's): every member lookup in the struct
    /// looks inside it.
    fn task_anonymous(&self) -> (u32, usize) {
        ["task_struct", "mm_struct"]
            .iter()
            .find_map(|name| {
                let id = self.id_of(name);
                let vlen = u32_at(&self.types, self.starts[id as usize - 1] + 4) & 0xffff;
                (0..vlen as usize)
                    .find(|&i| {
                        self.name(u32_at(&self.types, self.member(id, i)))
                            .is_empty()
                    })
                    .map(|i| (id, i))
            })
            .expect("no anonymous member in task_struct or mm_struct")
    }
}

/// A hostile change to the real BTF: what it is, the BTF, the command it
/// is given to, and what the error must name.
type Case = (&'static str, Blob, &'static [&'static str], &'static str);

/// Every hostile change: given to `ps`, or to `maps 1` where only memory
/// maps read the struct changed.
fn hostile(real: &Blob) -> Vec<Case> {
    const PS: &[&str] = &["ps"];
    const ITSELF: &str = "contains itself";
    let (holder, anon) = real.task_anonymous();
    let changed = |change: &dyn Fn(&mut Blob)| {
        let mut b = real.clone();
        change(&mut b);
        b
    };
    let typedef = |b: &mut Blob, to: u32| b.push(&[0, KIND_TYPEDEF << 24, to]);
    vec![
        (
            "a typedef naming itself",
            changed(&|b| {
                let own = b.next_id();
                typedef(b, own);
                b.retype(holder, anon, own);
            }),
            PS,
            ITSELF,
        ),
        (
            "two typedefs naming each other",
            changed(&|b| {
                let first = b.next_id();
                typedef(b, first + 1);
                typedef(b, first);
                b.retype(holder, anon, first);
            }),
            PS,
            ITSELF,
        ),
        (
            "a struct whose anonymous member is itself",
            changed(&|b| b.retype(holder, anon, holder)),
            PS,
            ITSELF,
        ),
        (
            "an array whose element is itself",
            changed(&|b| {
                let (holder, comm) = b
                    .find_member_deep(b.id_of("task_struct"), b"comm")
                    .expect("task_struct.comm");
                let own = b.next_id();
                b.push(&[0, KIND_ARRAY << 24, 0, own, own, 16]);
                b.retype(holder, comm, own);
            }),
            PS,
            ITSELF,
        ),
        // mm_struct's fields are inside its first, anonymous, member: put
        // `arg_end` 512 MiB in (less the 8 bytes that keep the bit offset
        // in 32 bits), so that the fields a walk reads span half a GiB.
        (
            "a member 512 MiB in",
            changed(&|b| {
                let mm = b.id_of("mm_struct");
                let (fields, arg_end) = b
                    .find_member_deep(mm, b"arg_end")
                    .expect("mm_struct.arg_end");
                let at = b.member(fields, arg_end) + 8;
                put(&mut b.types, at, ((512u32 << 20) - 8) << 3);
            }),
            PS,
            "past its",
        ),
        (
            "a struct of 4 GiB",
            changed(&|b| {
                let at = b.starts[b.id_of("vm_area_struct") as usize - 1] + 8;
                put(&mut b.types, at, 0xffff_fff0);
            }),
            &["maps", "1"],
            "claims 4294967280 bytes",
        ),
        (
            "strings with their NULs removed",
            changed(&|b| {
                let last = b.strings.len() - 1;
                b.strings[1..last]
                    .iter_mut()
                    .filter(|c| **c == 0)
                    .for_each(|c| *c = b'x');
            }),
            PS,
            "is not ended within 512 bytes",
        ),
    ]
}

/// The image's kernel: its BTF's physical address and bytes.
fn btf_of(image: &Path) -> (usize, Vec<u8>) {
    let device =
        LeechCore::open(&DeviceConfig::new(format!("file://{}", image.display()))).unwrap();
    let mem = Memory::new(device);
    let hints = Hints {
        cache: leechio::linux::CacheLocation::Off,
        ..Hints::default()
    };
    let kernel = Kernel::find(&mem, &hints).unwrap();
    let (va, len) = kernel.btf_location().unwrap();
    let pa = (va - kernel.virtual_base() + kernel.physical_base()) as usize;
    let bytes = std::fs::read(image).unwrap();
    (pa, bytes[pa..pa + len as usize].to_vec())
}

/// How long a run may take (a debug build on a loaded 2-core machine).
const DEADLINE: Duration = Duration::from_secs(30);

fn leechio(args: &[&str]) -> Run {
    run_bounded(Path::new(env!("CARGO_BIN_EXE_leechio")), args, DEADLINE)
}

/// Memory a refused run may take beyond a good run's (which reads the
/// 256 MiB image through LeechCore's file device).
const MORE_THAN_GOOD_KIB: i64 = 64 << 10;

/// A one-line error that names `cause`, within the deadline and `cap`
/// KiB, with no panic and no abort.
fn assert_refused(run: &Run, what: &str, cause: &str, cap: i64) {
    assert!(
        run.status.code().is_some(),
        "{what}: killed: {}",
        run.stderr
    );
    assert!(!run.stderr.contains("panicked"), "{what}: {}", run.stderr);
    assert!(
        run.max_rss_kib < cap,
        "{what}: peak {} MiB",
        run.max_rss_kib >> 10
    );
    assert_eq!(run.status.code(), Some(1), "{what}: {}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{what}: {}", run.stderr);
    assert!(run.stderr.contains(cause), "{what}: {}", run.stderr);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)]
fn hostile_btf_is_refused_in_a_file_and_in_memory() {
    let guest = shared_guest();
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("guest.raw");
    {
        let _paused = guest.pause();
        std::fs::write(&image, guest.pmemsave(0, guest.memory().bytes())).unwrap();
    }
    let (btf_pa, real) = btf_of(&image);
    let blob = Blob::new(&real);
    assert_eq!(blob.bytes(), real, "the blob is put together as it was");
    // The image without BTF (the file is what is used), and the image
    // with the struct that contains itself patched in its BTF. The images
    // are written before any run: a child's peak memory counts what the
    // test held when it forked.
    let (task, anon) = blob.task_anonymous();
    let no_btf_image = dir.path().join("no-btf.raw");
    let patched_image = dir.path().join("patched.raw");
    {
        let mut bytes = std::fs::read(&image).unwrap();
        let at = btf_pa + 24 + blob.member(task, anon) + 4;
        bytes[at..at + 4].copy_from_slice(&task.to_le_bytes());
        std::fs::write(&patched_image, &bytes).unwrap();
        bytes[btf_pa..btf_pa + real.len()].fill(0);
        std::fs::write(&no_btf_image, &bytes).unwrap();
    }
    let device = format!("file://{}", no_btf_image.display());
    let good = dir.path().join("good.btf");
    std::fs::write(&good, &real).unwrap();
    let run = leechio(&[
        "-d",
        &device,
        "ps",
        "--no-cache",
        "--btf",
        good.to_str().unwrap(),
    ]);
    assert!(
        run.status.success() && run.stdout.lines().count() > 10,
        "{}",
        run.stderr
    );
    let cap = run.max_rss_kib + MORE_THAN_GOOD_KIB;
    // A sparse file of 1 GiB: refused by its size, not read.
    let huge = dir.path().join("huge.btf");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let run = leechio(&[
        "-d",
        &device,
        "ps",
        "--no-cache",
        "--btf",
        huge.to_str().unwrap(),
    ]);
    assert_refused(
        &run,
        "a 1 GiB file",
        "not a regular file of at most 64 MiB",
        cap,
    );
    for (what, b, command, cause) in hostile(&blob) {
        let file = dir.path().join("hostile.btf");
        std::fs::write(&file, b.bytes()).unwrap();
        let options = ["--no-cache", "--btf", file.to_str().unwrap()];
        let args = [&["-d", &device][..], command, &options].concat();
        let run = leechio(&args);
        assert_refused(&run, what, cause, cap);
        assert!(
            run.stderr.starts_with("leechio: BTF does not parse: "),
            "{what}: {}",
            run.stderr
        );
    }
    // In memory: the struct that contains itself, patched in place.
    let run = leechio(&[
        "-d",
        &format!("file://{}", patched_image.display()),
        "ps",
        "--no-cache",
    ]);
    assert_refused(
        &run,
        "in memory",
        &format!("type {task} contains itself"),
        cap,
    );
    assert!(
        run.stderr
            .starts_with("leechio: the kernel's BTF cannot be used (0x")
            && run.stderr.matches("0x").count() == 1
            && run.stderr.contains("give its /sys/kernel/btf/vmlinux"),
        "{}",
        run.stderr
    );
}
