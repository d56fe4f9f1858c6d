//! Open files read from made-up kernel memory whose layout (given by
//! made-up BTF) is no kernel's: fd tables inside and outside their
//! `files_struct`, every kind of name `/proc` gives, and the garbage, torn
//! tables and loops a walk must name and cut.

use super::read::Walk;
use super::*;
use crate::linux::fake_memory::{FakeMemory as Fake, DIRECT};
use crate::linux::find::btf::builder::BtfBuilder;
use crate::linux::find::btf::Btf;
use crate::linux::offsets::FilesLayout;
use crate::linux::paths::fake::{path_types, PathObjects, D_PARENT, F_INODE};
use crate::linux::paths::Dnames;

const MEMORY: usize = 1 << 20;
/// Room for more fd pointers than `NR_OPEN`.
const BIG_MEMORY: usize = 16 << 20;

// The made-up layout: offsets no kernel uses.
const TASK_PID: u64 = 16;
const TASK_TGID: u64 = 20;
const TASK_FILES: u64 = 80;
const FDT: u64 = 8;
const FDTAB: u64 = 24;
const CLOSE_ON_EXEC_INIT: u64 = 96;
const FD_ARRAY: u64 = 128;
const FILES_SIZE: u32 = 704;
const MAX_FDS: u64 = 0;
const FD: u64 = 16;
const CLOSE_ON_EXEC: u64 = 32;
const F_FLAGS: u64 = 56;
const F_MODE: u64 = 60;
const F_POS: u64 = 64;
const PRIVATE_DATA: u64 = 80;
const SOCKET_VFS_INODE: u64 = 64;
const SOCKET_FILE: u64 = 16;
const SOCKET_SK: u64 = 24;

// Where the made-up kernel's d_dname functions are.
const SOCKFS: u64 = 0xffff_ffff_8100_1000;
const PIPEFS: u64 = 0xffff_ffff_8100_2000;
const ANON_INODEFS: u64 = 0xffff_ffff_8100_3000;
const SIMPLE: u64 = 0xffff_ffff_8100_4000;
/// A d_dname no symbol names.
const OTHER: u64 = 0xffff_ffff_8100_5000;

const O_RDWR: u32 = 2;
const O_LARGEFILE: u32 = 0o100_000;
const O_CLOEXEC: u32 = 0o2_000_000;

fn btf() -> Btf {
    btf_with(true)
}

/// The made-up BTF, with `struct socket_alloc` or without.
fn btf_with(sockets: bool) -> Btf {
    let mut b = BtfBuilder::new();
    let fd_array = b.array(64);
    b.structure(
        "task_struct",
        256,
        &[
            ("pid", TASK_PID),
            ("tgid", TASK_TGID),
            ("files", TASK_FILES),
        ],
    )
    .structure_typed(
        "files_struct",
        FILES_SIZE,
        &[
            ("fdt", FDT, 0),
            ("fdtab", FDTAB, 0),
            ("close_on_exec_init", CLOSE_ON_EXEC_INIT, 0),
            ("fd_array", FD_ARRAY, fd_array),
        ],
    )
    .structure(
        "fdtable",
        56,
        &[
            ("max_fds", MAX_FDS),
            ("fd", FD),
            ("close_on_exec", CLOSE_ON_EXEC),
        ],
    )
    .structure("socket", 64, &[("file", SOCKET_FILE), ("sk", SOCKET_SK)]);
    if sockets {
        b.structure("socket_alloc", 256, &[("vfs_inode", SOCKET_VFS_INODE)]);
    }
    path_types(
        &mut b,
        &[
            ("f_flags", F_FLAGS),
            ("f_mode", F_MODE),
            ("f_pos", F_POS),
            ("private_data", PRIVATE_DATA),
        ],
    );
    Btf::parse(&b.finish()).unwrap()
}

fn dnames() -> Dnames {
    Dnames::new(|name| match name {
        "sockfs_dname" => Some(SOCKFS),
        "pipefs_dname" => Some(PIPEFS),
        "anon_inodefs_dname" => Some(ANON_INODEFS),
        "simple_dname" => Some(SIMPLE),
        _ => None,
    })
}

/// A made-up kernel: its memory, its root mount, and `fs.nr_open`.
struct World {
    f: Fake,
    root: u64,
    mount: u64,
    nr_open: u64,
    /// The pseudo file systems' mount, and their dentries' operations.
    pseudo: u64,
    ops: [u64; 5],
}

impl World {
    fn new() -> World {
        World::with_memory(MEMORY)
    }

    fn with_memory(len: usize) -> World {
        let mut f = Fake::new(len);
        let root = f.dentry("/", None);
        let mount = f.mount(None, root, root);
        let nr_open = f.alloc(8);
        f.put_u32(nr_open, 1 << 20);
        let pseudo_root = f.dentry("/", None);
        let pseudo = f.mount(None, pseudo_root, pseudo_root);
        let ops = [SOCKFS, PIPEFS, ANON_INODEFS, SIMPLE, OTHER].map(|d| f.ops(d));
        World {
            f,
            root,
            mount,
            nr_open,
            pseudo,
            ops,
        }
    }

    /// A `struct file` of `dentry` in `mount` with an inode of `mode`.
    fn file(&mut self, dentry: u64, mount: u64, ino: u64, mode: u16) -> u64 {
        let inode = self.f.inode(ino, mode, 0x800001);
        self.f.file(dentry, mount, inode)
    }

    /// A file at `path` under the root, each folder made anew.
    fn path(&mut self, path: &str, mode: u16) -> (u64, u64) {
        let mut parent = self.root;
        for name in path.trim_start_matches('/').split('/') {
            parent = self.f.dentry(name, Some(parent));
        }
        let file = self.file(parent, self.mount, 1000 + parent % 1000, mode);
        (file, parent)
    }

    /// A file with no path, named by the d_dname of `ops[which]`.
    fn pseudo(&mut self, name: &str, which: usize, ino: u64, mode: u16) -> u64 {
        let d = self.f.dentry(name, None);
        self.f.unhash(d);
        self.f.set_ops(d, self.ops[which]);
        self.file(d, self.pseudo, ino, mode)
    }

    /// A socket's file: its inode inside a `socket_alloc` whose socket
    /// points back at the file (at `back` when given).
    fn socket(&mut self, ino: u64, back: Option<u64>) -> u64 {
        let d = self.f.dentry("", None);
        self.f.set_ops(d, self.ops[0]);
        let alloc = self.f.alloc(256);
        let inode = alloc + SOCKET_VFS_INODE;
        let plain = self.f.inode(ino, 0o140_777, 8);
        // The inode's fields, copied into the socket_alloc.
        let bytes = self.f.bytes[(plain - DIRECT) as usize..][..128].to_vec();
        self.f.put_bytes(inode, &bytes);
        let file = self.f.file(d, self.pseudo, inode);
        self.f.put(file + PRIVATE_DATA, alloc);
        self.f.put(alloc + SOCKET_FILE, back.unwrap_or(file));
        self.f.put(alloc + SOCKET_SK, 0xffff_8880_0bad_c0de);
        file
    }

    fn set(&mut self, file: u64, flags: u32, mode: u32, pos: i64) {
        self.f.put_u32(file + F_FLAGS, flags);
        self.f.put_u32(file + F_MODE, mode);
        self.f.put(file + F_POS, pos as u64);
    }

    /// A task `pid` of thread group `tgid` with `files`.
    fn task(&mut self, pid: u32, tgid: u32, files: u64) -> u64 {
        let t = self.f.alloc(256);
        self.f.put_u32(t + TASK_PID, pid);
        self.f.put_u32(t + TASK_TGID, tgid);
        self.f.put(t + TASK_FILES, files);
        t
    }

    /// A `files_struct` with its own table holding `fds` (fd, file,
    /// closed on exec).
    fn files(&mut self, fds: &[(u32, u64, bool)]) -> u64 {
        let s = self.f.alloc(u64::from(FILES_SIZE));
        self.f.put(s + FDT, s + FDTAB);
        self.f.put_u32(s + FDTAB + MAX_FDS, 64);
        self.f.put(s + FDTAB + FD, s + FD_ARRAY);
        self.f
            .put(s + FDTAB + CLOSE_ON_EXEC, s + CLOSE_ON_EXEC_INIT);
        self.fill(s + FD_ARRAY, s + CLOSE_ON_EXEC_INIT, fds);
        s
    }

    /// A `files_struct` whose table of `max_fds` lies outside it.
    fn big_files(&mut self, max_fds: u32, fds: &[(u32, u64, bool)]) -> u64 {
        let s = self.f.alloc(u64::from(FILES_SIZE));
        let table = self.f.alloc(56);
        let array = self.f.alloc(u64::from(max_fds) * 8);
        let bitmap = self.f.alloc(u64::from(max_fds) / 8);
        self.f.put(s + FDT, table);
        self.f.put_u32(table + MAX_FDS, max_fds);
        self.f.put(table + FD, array);
        self.f.put(table + CLOSE_ON_EXEC, bitmap);
        self.fill(array, bitmap, fds);
        s
    }

    fn fill(&mut self, array: u64, bitmap: u64, fds: &[(u32, u64, bool)]) {
        for &(fd, file, cloexec) in fds {
            self.f.put(array + u64::from(fd) * 8, file);
            if cloexec {
                let at = bitmap + u64::from(fd / 8);
                let byte = self.f.bytes[(at - DIRECT) as usize] | 1 << (fd % 8);
                self.f.put_bytes(at, &[byte]);
            }
        }
    }

    /// The files of `tasks` (of `wanted` alone), and the read calls.
    fn read(&self, tasks: &[u64], wanted: Option<u32>) -> (TaskFiles, u64) {
        self.read_with(&btf(), tasks, wanted)
    }

    fn read_with(&self, btf: &Btf, tasks: &[u64], wanted: Option<u32>) -> (TaskFiles, u64) {
        let layout = FilesLayout::from_btf(btf).unwrap();
        self.f.read(async |kmem| {
            let walk = Walk {
                kmem: *kmem,
                layout: &layout,
                dnames: dnames(),
                nr_open: Some(self.nr_open),
            };
            walk.run(tasks, wanted).await
        })
    }
}

/// `(fd, name, kind, flags, pos)` of an fd.
type Row = (u32, Result<String, String>, FileKind, Option<u32>, i64);

fn rows(fds: &[OpenFile]) -> Vec<Row> {
    fds.iter()
        .map(|f| (f.fd, f.name.clone(), f.kind, f.flags, f.pos))
        .collect()
}

#[test]
fn every_fd_of_every_process_named_as_proc_names_it() {
    let mut w = World::new();
    let (console, _) = w.path("/dev/console", 0o020_600);
    w.set(console, O_RDWR | O_LARGEFILE, 0xf, 0);
    let (x, _) = w.path("/tmp/x", 0o100_644);
    w.set(x, O_RDWR | O_LARGEFILE, 0xf, 1234);
    let (gone, gone_dentry) = w.path("/tmp/gone", 0o100_644);
    w.f.unhash(gone_dentry);
    w.set(gone, O_LARGEFILE, 0xd, 7);
    let long = format!("/{}/leaf", "a-name-longer-than-the-dentry-holds");
    let (deep, _) = w.path(&long, 0o040_755);
    let socket = w.socket(4242, None);
    let pipe = w.pseudo("", 1, 777, 0o010_600);
    let eventfd = w.pseudo("[eventfd]", 2, 9, 0o600);
    let memfd = w.pseudo("memfd:buffer", 3, 5, 0o100_777);
    w.set(eventfd, O_RDWR | O_CLOEXEC, 3, 0);
    let a_files = w.files(&[
        (0, console, false),
        (1, console, false),
        (3, x, true),
        (4, gone, false),
        (5, socket, false),
        (6, pipe, false),
        (7, eventfd, true),
        (9, memfd, false),
        (63, deep, false),
    ]);
    let b_files = w.big_files(128, &[(2, console, false), (100, x, true)]);
    let a = w.task(10, 10, a_files);
    let a_thread = w.task(11, 10, a_files);
    let b = w.task(20, 20, b_files);
    let kernel_thread = w.task(2, 2, 0);
    let tasks = [a, a_thread, b, kernel_thread];
    let (got, calls) = w.read(&tasks, None);
    assert_eq!(got.failed, vec![], "{:#?}", got.failed);
    let ok = |s: &str| Ok(s.to_string());
    let (rw, cloexec) = (O_RDWR | O_LARGEFILE, O_CLOEXEC);
    let FdTable { pid, files, fds } = got.tasks[0].clone().unwrap();
    assert_eq!((pid, files), (10, Some(a_files)));
    assert_eq!(
        rows(&fds),
        [
            (0, ok("/dev/console"), FileKind::CharDevice, Some(rw), 0),
            (1, ok("/dev/console"), FileKind::CharDevice, Some(rw), 0),
            (3, ok("/tmp/x"), FileKind::Regular, Some(rw | cloexec), 1234),
            (
                4,
                ok("/tmp/gone (deleted)"),
                FileKind::Regular,
                Some(O_LARGEFILE),
                7
            ),
            (5, ok("socket:[4242]"), FileKind::Socket, Some(0), 0),
            (6, ok("pipe:[777]"), FileKind::Fifo, Some(0), 0),
            (
                7,
                ok("anon_inode:[eventfd]"),
                FileKind::AnonInode,
                Some(O_RDWR | cloexec),
                0
            ),
            (
                9,
                ok("/memfd:buffer (deleted)"),
                FileKind::Regular,
                Some(0),
                0
            ),
            (63, Ok(long), FileKind::Directory, Some(0), 0),
        ]
    );
    assert_eq!((fds[0].file, fds[1].file), (console, console));
    let socket_alloc = fds[4].file;
    assert_eq!(socket_alloc, socket);
    assert_eq!(fds[4].inode, 4242);
    let sock = fds[4].socket.unwrap();
    assert_eq!(sock.sock, 0xffff_8880_0bad_c0de);
    assert!(fds.iter().filter(|f| f.fd != 5).all(|f| f.socket.is_none()));
    // The thread shares its process's table: not listed again.
    assert_eq!(got.tasks[1], None);
    let FdTable { pid, files, fds } = got.tasks[2].clone().unwrap();
    assert_eq!((pid, files), (20, Some(b_files)));
    assert_eq!(
        rows(&fds),
        [
            (2, ok("/dev/console"), FileKind::CharDevice, Some(rw), 0),
            (
                100,
                ok("/tmp/x"),
                FileKind::Regular,
                Some(rw | cloexec),
                1234
            ),
        ]
    );
    let none = FdTable {
        pid: 2,
        files: None,
        fds: vec![],
    };
    assert_eq!(got.tasks[3], Some(none));
    // Tasks; files_structs; the outside table; its array and bitmap;
    // files; then the paths: the leaves with the mounts and inodes, their
    // parents with the dentry operations, super blocks and sockets, the
    // long name's folder and names kept outside the dentries: eight.
    assert_eq!(calls, 8);

    // One process alone: the same fds, its paths' names all inside their
    // dentries (no batch for names).
    let (one, calls) = w.read(&tasks, Some(20));
    assert_eq!(one.tasks, [None, None, got.tasks[2].clone(), None]);
    assert_eq!(calls, 7);
}

#[test]
fn tables_of_garbage_are_named_and_the_rest_listed() {
    let mut w = World::new();
    let (x, _) = w.path("/x", 0o100_644);
    let good = w.files(&[(0, x, false)]);
    // max_fds not a multiple of 64; more than fs.nr_open allows; a table
    // inside its files_struct that claims more fds than it holds.
    let odd = w.big_files(128, &[(1, x, false)]);
    let odd_table = w.f.bytes[(odd + FDT - DIRECT) as usize..][..8].to_vec();
    let odd_table = u64::from_le_bytes(odd_table.try_into().unwrap());
    w.f.put_u32(odd_table + MAX_FDS, 100);
    let huge = w.big_files(128, &[(1, x, false)]);
    let huge_table = u64::from_le_bytes(
        w.f.bytes[(huge + FDT - DIRECT) as usize..][..8]
            .try_into()
            .unwrap(),
    );
    w.f.put_u32(huge_table + MAX_FDS, 1 << 21);
    let torn = w.files(&[(0, x, false)]);
    w.f.put_u32(torn + FDTAB + MAX_FDS, 128);
    // A file pointer that is no kernel address, beside a good one.
    let user = w.files(&[(0, 0x7fff_1234_5678, false), (1, x, false)]);
    // A files_struct pointer that is no kernel address.
    let tasks = [
        w.task(1, 1, good),
        w.task(2, 2, odd),
        w.task(3, 3, huge),
        w.task(4, 4, torn),
        w.task(5, 5, user),
        w.task(6, 6, 0x1000),
    ];
    let (got, _) = w.read(&tasks, None);
    let listed: Vec<Option<(u32, Vec<u32>)>> = got
        .tasks
        .iter()
        .map(|t| {
            t.as_ref()
                .map(|t| (t.pid, t.fds.iter().map(|f| f.fd).collect()))
        })
        .collect();
    assert_eq!(
        listed,
        [
            Some((1, vec![0])),
            Some((2, vec![])),
            Some((3, vec![])),
            Some((4, vec![])),
            Some((5, vec![1])),
            None
        ]
    );
    let failed: Vec<(Option<u32>, Option<u32>, &str)> = got
        .failed
        .iter()
        .map(|f| (f.pid, f.fd, f.reason.as_str()))
        .collect();
    assert_eq!(
        failed,
        [
            (Some(6), None, "its files_struct pointer 0x1000 is no kernel address"),
            (Some(2), None, "max_fds is 100, not a multiple of 64 as every table's is"),
            (
                Some(3),
                None,
                "max_fds is 2097152, more than 131072, as many fd pointers as the target's 1048576 bytes of memory hold"
            ),
            (
                Some(4),
                None,
                &*format!(
                    "the table inside the files_struct says 128 fds at {:#x} (bitmap {:#x}), not its own 64 at {:#x} (bitmap {:#x}): torn",
                    torn + FD_ARRAY,
                    torn + CLOSE_ON_EXEC_INIT,
                    torn + FD_ARRAY,
                    torn + CLOSE_ON_EXEC_INIT
                )
            ),
            (Some(5), Some(0), "its file pointer 0x7fff12345678 is no kernel address"),
        ]
    );
}

#[test]
fn a_lower_nr_open_bounds_the_tables_and_garbage_in_it_is_not_believed() {
    let mut w = World::with_memory(BIG_MEMORY);
    let (x, _) = w.path("/x", 0o100_644);
    let big = w.big_files(2048, &[(1500, x, false)]);
    let tasks = [w.task(1, 1, big)];
    w.f.put_u32(w.nr_open, 1024);
    let (got, _) = w.read(&tasks, None);
    let empty = FdTable {
        pid: 1,
        files: Some(big),
        fds: vec![],
    };
    assert_eq!(got.tasks[0], Some(empty));
    assert_eq!(
        got.failed[0].reason,
        "max_fds is 2048, more than 1024, the most fs.nr_open (1024) allows"
    );
    // A value fs.nr_open cannot hold: NR_OPEN is assumed, and said.
    w.f.put_u32(w.nr_open, u32::MAX);
    let (got, _) = w.read(&tasks, None);
    assert_eq!(
        got.tasks[0].as_ref().unwrap().fds.len(),
        1,
        "{:?}",
        got.failed
    );
    let huge = w.big_files(128, &[]);
    let table = u64::from_le_bytes(
        w.f.bytes[(huge + FDT - DIRECT) as usize..][..8]
            .try_into()
            .unwrap(),
    );
    w.f.put_u32(table + MAX_FDS, 1 << 21);
    let task = w.task(2, 2, huge);
    let (got, _) = w.read(&[task], None);
    assert_eq!(
        got.failed[0].reason,
        "max_fds is 2097152, more than 1048576, the most NR_OPEN (1048576) allows (the kernel's fs.nr_open reads 4294967295, which it cannot be)"
    );
    // fs.nr_open where nothing can be read.
    w.nr_open = DIRECT + BIG_MEMORY as u64 + 0x1000;
    let (got, _) = w.read(&[task], None);
    assert_eq!(
        got.failed[0].reason,
        "max_fds is 2097152, more than 1048576, the most NR_OPEN (1048576) allows (the kernel's fs.nr_open could not be read)"
    );
}

#[test]
fn loops_bad_sockets_and_unknown_names_fail_alone() {
    let mut w = World::new();
    let (x, _) = w.path("/x", 0o100_644);
    // Two dentries each the other's parent.
    let (looped, leaf) = w.path("/a/b", 0o100_644);
    let a = w.f.bytes[(leaf + D_PARENT - DIRECT) as usize..][..8].to_vec();
    let a = u64::from_le_bytes(a.try_into().unwrap());
    w.f.put(a + D_PARENT, leaf);
    // A socket whose struct socket points at another file; a file named
    // by a d_dname no symbol names; one whose inode is unreadable.
    let liar = w.socket(1, Some(x));
    let other = w.pseudo("thing", 4, 3, 0o600);
    let (lost, _) = w.path("/lost", 0o100_644);
    w.f.put(lost + F_INODE, DIRECT + MEMORY as u64 + 0x10_0000);
    let files = w.files(&[
        (0, x, false),
        (1, looped, false),
        (2, liar, false),
        (3, other, false),
        (4, lost, false),
    ]);
    let task = w.task(7, 7, files);
    let (got, _) = w.read(&[task], None);
    let fds = got.tasks[0].clone().unwrap().fds;
    assert_eq!(fds.len(), 5);
    assert_eq!(fds[0].name, Ok("/x".into()));
    assert!(
        fds[1].name.as_ref().unwrap_err().contains("(a loop); cut"),
        "{:?}",
        fds[1].name
    );
    assert_eq!(
        (fds[2].name.clone(), fds[2].kind, fds[2].socket),
        (Ok("socket:[1]".into()), FileKind::Socket, None)
    );
    assert!(fds[3].name.as_ref().unwrap_err().starts_with(&format!(
        "named by the kernel's d_dname function at {OTHER:#x}"
    )));
    assert_eq!(
        (fds[4].name.clone(), fds[4].kind, fds[4].inode),
        (Ok("/lost".into()), FileKind::Unknown, 0)
    );
    let failed: Vec<(Option<u32>, &str)> = got
        .failed
        .iter()
        .map(|f| (f.fd, f.reason.as_str()))
        .collect();
    assert_eq!(failed.len(), 4, "{failed:#?}");
    assert!(
        failed[0].1.starts_with("name: the dentries up from"),
        "{failed:?}"
    );
    assert_eq!(
        failed[1],
        (
            Some(2),
            &*format!(
                "its struct socket {:#x} points at file {x:#x}, not at this one",
                liar_socket(&w, liar)
            )
        )
    );
    assert!(
        failed[2]
            .1
            .starts_with("name: named by the kernel's d_dname"),
        "{failed:?}"
    );
    let lost_inode = DIRECT + MEMORY as u64 + 0x10_0000;
    assert_eq!(failed[3].0, Some(4));
    assert!(
        failed[3]
            .1
            .starts_with(&format!("inode {lost_inode:#x}: {lost_inode:#x}..")),
        "{failed:?}"
    );
}

/// The `struct socket` the socket file `file` holds.
fn liar_socket(w: &World, file: u64) -> u64 {
    u64::from_le_bytes(
        w.f.bytes[(file + PRIVATE_DATA - DIRECT) as usize..][..8]
            .try_into()
            .unwrap(),
    )
}

#[test]
fn without_socket_alloc_in_btf_sockets_are_listed_and_that_is_said_once() {
    let mut w = World::new();
    let (a, b) = (w.socket(11, None), w.socket(12, None));
    let files = w.files(&[(0, a, false), (1, b, false)]);
    let task = w.task(3, 3, files);
    let (got, _) = w.read_with(&btf_with(false), &[task], None);
    let fds = got.tasks[0].clone().unwrap().fds;
    let seen: Vec<_> = fds
        .iter()
        .map(|f| (f.name.clone(), f.kind, f.socket))
        .collect();
    assert_eq!(
        seen,
        [
            (Ok("socket:[11]".to_string()), FileKind::Socket, None),
            (Ok("socket:[12]".to_string()), FileKind::Socket, None)
        ]
    );
    let failed: Vec<String> = got.failed.iter().map(|f| f.to_string()).collect();
    assert_eq!(
        failed,
        ["open files: the kernel's BTF has no struct socket_alloc: sockets are listed without their struct socket"]
    );
}
