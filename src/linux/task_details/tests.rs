//! Details read from made-up kernel memory whose layout (given by made-up
//! BTF) is no kernel's.

use super::*;
use crate::linux::fake_memory::{FakeMemory as Fake, DIRECT};
use crate::linux::find::btf::builder::{BtfBuilder, KIND_STRUCT};
use crate::linux::find::btf::Btf;
use crate::linux::offsets::DetailsLayout;
use crate::linux::paths::fake::{path_types, PathObjects};

const MEMORY: usize = 1 << 20;

// The made-up layout.
const EXIT_CODE: u64 = 44;
const PID: u64 = 48;
const EXIT_STATE: u64 = 40;
const EXE_FILE: u64 = 72;
const CONTEXT: u64 = 600;
const CONTEXT_FLAGS: u64 = 16;
const REAL_CRED: u64 = 64;
const START_BOOTTIME: u64 = 80;
// `struct cred`: usage, the ids from 4 (uid, gid, suid, sgid, euid, egid,
// fsuid, fsgid, as the kernel lays them), the capability sets from 48.
const USAGE: u64 = 0;
const IDS: [&str; 8] = [
    "uid", "gid", "suid", "sgid", "euid", "egid", "fsuid", "fsgid",
];
const CAPS: [&str; 5] = [
    "cap_inheritable",
    "cap_permitted",
    "cap_effective",
    "cap_bset",
    "cap_ambient",
];

/// How the made-up kernel says an mm runs 32-bit code.
#[derive(Clone, Copy)]
enum Context {
    Flags,
    Ia32Compat,
    Neither,
}

fn btf(context: Context) -> Btf {
    btf_with(context, true)
}

/// The made-up BTF; with `credentials`, `task_struct.real_cred` and
/// `start_boottime` and `struct cred`.
fn btf_with(context: Context, credentials: bool) -> Btf {
    let mut b = BtfBuilder::new();
    let mut mm = vec![("exe_file", EXE_FILE, 0)];
    let flag = match context {
        Context::Flags => Some("flags"),
        Context::Ia32Compat => Some("ia32_compat"),
        Context::Neither => None,
    };
    if let Some(flag) = flag {
        let long = b.long();
        let ctx = b.composite(
            KIND_STRUCT,
            "",
            64,
            &[("ctx_id", long, 0), (flag, long, CONTEXT_FLAGS)],
        );
        mm.push(("context", CONTEXT, ctx));
    }
    let mut task = vec![
        ("exit_state", EXIT_STATE),
        ("exit_code", EXIT_CODE),
        ("pid", PID),
    ];
    if credentials {
        task.extend([("real_cred", REAL_CRED), ("start_boottime", START_BOOTTIME)]);
        let mut cred = vec![("usage", USAGE)];
        cred.extend(IDS.iter().zip(0..).map(|(&id, i)| (id, 4 + 4 * i)));
        cred.extend(CAPS.iter().zip(0..).map(|(&cap, i)| (cap, 48 + 8 * i)));
        b.structure("cred", 128, &cred);
    }
    b.structure("task_struct", 1024, &task)
        .structure_typed("mm_struct", 1024, &mm);
    path_types(&mut b, &[]);
    Btf::parse(&b.finish()).unwrap()
}

/// The made-up kernel's tasks.
trait Objects {
    fn task(&mut self, exit_code: u32, mm: Option<(u64, u64)>) -> (u64, Option<u64>);
    fn cred(&mut self, usage: u32, ids: [u32; 8], caps: [u64; 5]) -> u64;
}

impl Objects for Fake {
    /// A task with `exit_code`, and its mm (when it has one) mapping
    /// `exe` with context flags `flags`.
    fn task(&mut self, exit_code: u32, mm: Option<(u64, u64)>) -> (u64, Option<u64>) {
        let t = self.alloc(1024);
        self.put_u32(t + EXIT_CODE, exit_code);
        let mm = mm.map(|(exe, flags)| {
            let m = self.alloc(1024);
            self.put(m + EXE_FILE, exe);
            self.put(m + CONTEXT + CONTEXT_FLAGS, flags);
            m
        });
        (t, mm)
    }

    /// A `struct cred` with `usage` users, `ids` in the kernel's order
    /// ([`IDS`]) and capability sets `caps` ([`CAPS`]).
    fn cred(&mut self, usage: u32, ids: [u32; 8], caps: [u64; 5]) -> u64 {
        let c = self.alloc(128);
        self.put_u32(c + USAGE, usage);
        for (i, id) in (0..).zip(ids) {
            self.put_u32(c + 4 + 4 * i, id);
        }
        for (i, cap) in (0..).zip(caps) {
            self.put(c + 48 + 8 * i, cap);
        }
        c
    }
}

/// Reads the details of `tasks` in `fake` with layout `btf`, and the read
/// calls it took.
fn details(fake: &Fake, btf: &Btf, tasks: &[(u64, Option<u64>)]) -> (Vec<TaskDetails>, u64) {
    let layout = DetailsLayout::from_btf(btf).unwrap();
    let dnames = crate::linux::paths::Dnames::default();
    fake.read(async |kmem| read(kmem, &layout, &dnames, tasks, DetailsAsked::default()).await)
}

/// A root mount with /bin/busybox and /usr/lib/x in it: their files.
fn files(f: &mut Fake) -> (u64, u64) {
    let root = f.dentry("/", None);
    let mount = f.mount(None, root, root);
    let bin = f.dentry("bin", Some(root));
    let busybox = f.dentry("busybox", Some(bin));
    let usr = f.dentry("usr", Some(root));
    let lib = f.dentry("lib", Some(usr));
    let x = f.dentry("x", Some(lib));
    let (a, b) = (f.inode(1, 0o100755, 1), f.inode(2, 0o100644, 1));
    (f.file(busybox, mount, a), f.file(x, mount, b))
}

#[test]
fn executables_exit_codes_and_32_bit_mms_of_every_task_at_once() {
    let mut f = Fake::new(MEMORY);
    let (busybox, x) = files(&mut f);
    let tasks = [
        f.task(0, Some((busybox, 0))),
        // A zombie: exited with 42, its mm gone.
        f.task(42 << 8, None),
        // A 32-bit process, killed by SIGKILL.
        f.task(9, Some((x, UPROBE_IA32))),
        // A process whose mm lies past the end of memory.
        (f.alloc(1024), Some(DIRECT + MEMORY as u64 + 0x1000)),
        // A task with an mm that maps no executable.
        f.task(0, Some((0, 0))),
    ];
    let (got, calls) = details(&f, &btf(Context::Flags), &tasks);
    let exe = |d: &TaskDetails| d.executable.clone();
    assert_eq!(exe(&got[0]), Some(Ok("/bin/busybox".into())));
    assert_eq!(
        (got[0].exit_status(), got[0].compat),
        (Some(0), Some(false))
    );
    assert_eq!(exe(&got[1]), None);
    assert_eq!((got[1].exit_status(), got[1].compat), (Some(42), None));
    assert_eq!(exe(&got[2]), Some(Ok("/usr/lib/x".into())));
    assert_eq!(
        (got[2].exit_status(), got[2].compat),
        (Some(137), Some(true))
    );
    assert_eq!((exe(&got[3]), got[3].compat), (None, None));
    assert_eq!(got[3].failed.len(), 1);
    assert!(
        got[3].failed[0].starts_with(&format!("mm {:#x}: ", tasks[3].1.unwrap())),
        "{:?}",
        got[3].failed
    );
    assert_eq!((exe(&got[4]), got[4].compat), (None, Some(false)));
    assert!(got
        .iter()
        .enumerate()
        .all(|(i, d)| i == 3 || d.failed.is_empty()));
    // Tasks and mms; the files; the dentries of x, of lib, of usr (the
    // root is the mount's, known once the mount is read): five.
    assert_eq!(calls, 5);
}

#[test]
fn older_kernels_say_32_bit_in_ia32_compat_and_some_kernels_not_at_all() {
    let mut f = Fake::new(MEMORY);
    let (busybox, _) = files(&mut f);
    let tasks = [f.task(0, Some((busybox, 0))), f.task(0, Some((busybox, 3)))];
    let (got, _) = details(&f, &btf(Context::Ia32Compat), &tasks);
    assert_eq!(
        got.iter().map(|d| d.compat).collect::<Vec<_>>(),
        [Some(false), Some(true)]
    );
    let (got, _) = details(&f, &btf(Context::Neither), &tasks);
    assert_eq!(
        got.iter().map(|d| d.compat).collect::<Vec<_>>(),
        [None, None]
    );
    assert_eq!(got[1].executable, Some(Ok("/bin/busybox".into())));
}

#[test]
fn credentials_and_start_times_in_the_same_batches_as_the_files() {
    let mut f = Fake::new(MEMORY);
    let (busybox, _) = files(&mut f);
    let caps = [0, 0x1ff_ffff_ffff, 0x1ff_ffff_ffff, 0x1ff_ffff_ffff, 0];
    let root = f.cred(3, [0; 8], caps);
    // Real, effective, saved and fs ids all differ, as after setresuid.
    let user = f.cred(
        1,
        [1001, 2001, 1002, 2002, 1003, 2003, 1004, 2004],
        [1, 2, 4, 8, 16],
    );
    let freed = f.cred(0, [0; 8], caps);
    let tasks = [
        f.task(0, Some((busybox, 0))),
        f.task(0, Some((busybox, 0))),
        f.task(0, None),
        f.task(0, None),
    ];
    let creds = [root, user, freed, 0x1000];
    for (i, (&(t, _), cred)) in tasks.iter().zip(creds).enumerate() {
        f.put(t + REAL_CRED, cred);
        f.put(t + START_BOOTTIME, 1_000_000_000 * (i as u64 + 1) + 7);
    }
    let (got, calls) = details(&f, &btf(Context::Flags), &tasks);
    let cred = |i: usize| got[i].credentials.clone().unwrap();
    let root_caps = Capabilities {
        inheritable: 0,
        permitted: 0x1ff_ffff_ffff,
        effective: 0x1ff_ffff_ffff,
        bounding: 0x1ff_ffff_ffff,
        ambient: Some(0),
    };
    assert_eq!(
        cred(0),
        Ok(Credentials {
            uid: [0; 4],
            gid: [0; 4],
            capabilities: root_caps
        })
    );
    let user = cred(1).unwrap();
    assert_eq!(
        (user.uid, user.gid),
        ([1001, 1003, 1002, 1004], [2001, 2003, 2002, 2004])
    );
    assert_eq!(
        user.capabilities,
        Capabilities {
            inheritable: 1,
            permitted: 2,
            effective: 4,
            bounding: 8,
            ambient: Some(16)
        }
    );
    assert!(cred(2).unwrap_err().contains("no users"), "{:?}", cred(2));
    assert!(
        cred(3).unwrap_err().contains("no kernel address"),
        "{:?}",
        cred(3)
    );
    let starts: Vec<_> = got.iter().map(|d| d.start_time).collect();
    assert_eq!(starts, [1, 2, 3, 4].map(|s| Some(s * 1_000_000_000 + 7)));
    // Tasks and mms; the files and the creds; the path's two dentries.
    assert_eq!(calls, 4);

    // A kernel whose BTF lacks them: none, and no read more.
    let (got, _) = details(&f, &btf_with(Context::Flags, false), &tasks);
    assert!(got
        .iter()
        .all(|d| d.credentials.is_none() && d.start_time.is_none()));
    assert_eq!(got[0].executable, Some(Ok("/bin/busybox".into())));
}

#[test]
fn an_environment_splits_as_proc_pid_environ() {
    assert_eq!(
        environment::split(b"A=1\0B=\0C=x y\0"),
        ["A=1", "B=", "C=x y"]
    );
    assert_eq!(environment::split(b""), Vec::<String>::new());
    // Written over: the last variable has no NUL.
    assert_eq!(environment::split(b"A=1\0tail"), ["A=1", "tail"]);
}

#[test]
fn exit_statuses_are_what_a_shell_reports() {
    assert_eq!(exit_status(0), 0);
    assert_eq!(exit_status(3 << 8), 3);
    assert_eq!(exit_status(255 << 8), 255);
    // Killed by SIGSEGV, with a core dump (0x80).
    assert_eq!(exit_status(0x80 | 11), 139);
    assert_eq!(exit_status(15), 143);
}
