//! The kernel's names, clocks and command line read from made-up memory
//! whose layouts (made-up BTF) are no kernel's: `tk_core` as the anonymous
//! struct up to 6.12 (its timekeeper placed by the sequence count's size)
//! and as `struct tk_data` after; names without their NUL, timekeepers
//! caught mid-update, torn or holding no time, command lines without an
//! end.

use super::*;
use crate::linux::fake_memory::FakeMemory as Fake;
use crate::linux::find::btf::builder::{BtfBuilder, KIND_STRUCT};
use crate::linux::find::btf::Btf;

const MEMORY: usize = 1 << 14;
const NS: u64 = 1_000_000_000;
/// "Now", for the calendar check: 2025-01-01.
const NOW: i128 = 1_735_689_600 * NS as i128;

// Made-up layouts.
const UTS_NAME: u64 = 8;
const TK_IN_DATA: u64 = 64;
const SHIFT: u64 = 28;
const XTIME_NSEC: u64 = 32;
const MONO_BASE: u64 = 40;
const XTIME_SEC: u64 = 112;
const OFFS_REAL: u64 = 136;
const OFFS_BOOT: u64 = 152;
const TIMEKEEPER_SIZE: u32 = 200;

/// Where `tk_core`'s timekeeper is described.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Core {
    /// Up to 6.12: after a 12-byte `seqcount_raw_spinlock` (a lock
    /// pointer with lockdep), so at 16.
    Anonymous,
    /// 6.13 on: `tk_data.timekeeper`, at [`TK_IN_DATA`].
    TkData,
}

impl Core {
    fn timekeeper(self) -> u64 {
        match self {
            Core::Anonymous => 16,
            Core::TkData => TK_IN_DATA,
        }
    }
}

/// The made-up BTF of each layout (made once: slow under Miri).
fn btf(core: Core) -> &'static Btf {
    static BTF: std::sync::OnceLock<[Btf; 2]> = std::sync::OnceLock::new();
    &BTF.get_or_init(|| [make_btf(Core::Anonymous), make_btf(Core::TkData)])[core as usize]
}

fn make_btf(core: Core) -> Btf {
    let mut b = BtfBuilder::new();
    let char_ty = b.int("char", 1);
    let u32_ty = b.int("u32", 4);
    let long = b.long();
    let field = b.array_of(char_ty, 65);
    let names: Vec<(&str, u32, u64)> = UTS_FIELDS
        .iter()
        .enumerate()
        .map(|(i, f)| (*f, field, 65 * i as u64))
        .collect();
    let utsname = b.composite(KIND_STRUCT, "new_utsname", 390, &names);
    b.composite(
        KIND_STRUCT,
        "uts_namespace",
        432,
        &[("kref", u32_ty, 0), ("name", utsname, UTS_NAME)],
    );
    let seqcount = b.composite(KIND_STRUCT, "seqcount", 4, &[("sequence", u32_ty, 0)]);
    let raw = b.composite(
        KIND_STRUCT,
        "seqcount_raw_spinlock",
        12,
        &[("seqcount", seqcount, 0), ("lock", u32_ty, 8)],
    );
    let read_base = b.composite(
        KIND_STRUCT,
        "tk_read_base",
        56,
        &[
            ("mult", u32_ty, 24),
            ("shift", u32_ty, SHIFT),
            ("xtime_nsec", long, XTIME_NSEC),
            ("base", long, MONO_BASE),
        ],
    );
    let timekeeper = b.composite(
        KIND_STRUCT,
        "timekeeper",
        TIMEKEEPER_SIZE,
        &[
            ("tkr_mono", read_base, 0),
            ("tkr_raw", read_base, 56),
            ("xtime_sec", long, XTIME_SEC),
            ("offs_real", long, OFFS_REAL),
            ("offs_boot", long, OFFS_BOOT),
        ],
    );
    if core == Core::TkData {
        b.composite(
            KIND_STRUCT,
            "tk_data",
            512,
            &[("seq", raw, 0), ("timekeeper", timekeeper, TK_IN_DATA)],
        );
    }
    Btf::parse(&b.finish()).unwrap()
}

/// A made-up kernel's symbols.
struct Kernel {
    uts: u64,
    tk_core: u64,
    cmdline_ptr: u64,
    cmdline_len: u64,
    /// The command line itself.
    line: u64,
}

/// The clocks: wall clock `wall` ns, CLOCK_MONOTONIC `mono` ns, `boot`
/// ns asleep; the sequence count `sequence`.
struct Clock {
    wall: u64,
    mono: u64,
    asleep: u64,
    sequence: u32,
}

impl Clock {
    fn good() -> Clock {
        Clock {
            wall: 1_700_000_000 * NS + NS / 2,
            mono: 1234 * NS + NS / 2,
            asleep: 5 * NS,
            sequence: 42,
        }
    }
}

fn kernel(fake: &mut Fake, core: Core, clock: &Clock, cmdline: &[u8]) -> Kernel {
    let uts = fake.alloc(432);
    for (i, name) in [
        "Linux",
        "leech",
        "6.99.0-test",
        "#1 SMP",
        "x86_64",
        "example.test",
    ]
    .iter()
    .enumerate()
    {
        fake.put_bytes(uts + UTS_NAME + 65 * i as u64, name.as_bytes());
    }
    let tk_core = fake.alloc(512);
    let tk = tk_core + core.timekeeper();
    fake.put_u32(tk_core, clock.sequence);
    let nsec = clock.wall % NS;
    fake.put_u32(tk + SHIFT, 8);
    fake.put(tk + XTIME_NSEC, nsec << 8);
    fake.put(tk + MONO_BASE, clock.mono - nsec);
    fake.put(tk + XTIME_SEC, clock.wall / NS);
    fake.put(tk + OFFS_REAL, clock.wall - clock.mono);
    fake.put(tk + OFFS_BOOT, clock.asleep);
    let line = fake.alloc(cmdline.len() as u64 + 1);
    fake.put_bytes(line, cmdline);
    let cmdline_ptr = fake.alloc(8);
    fake.put(cmdline_ptr, line);
    let cmdline_len = fake.alloc(4);
    fake.put_u32(cmdline_len, cmdline.len() as u32);
    Kernel {
        uts,
        tk_core,
        cmdline_ptr,
        cmdline_len,
        line,
    }
}

/// What the kernel at `k` says, read with `btf`'s layouts (the length of
/// the command line with `with_len`), and the read calls it took.
fn system(fake: &Fake, btf: &Btf, k: &Kernel, with_len: bool) -> (System, u64) {
    let uts = UtsLayout::from_btf(btf)
        .map(|l| (l, k.uts))
        .map_err(|e| e.to_string());
    let clock = ClockLayout::from_btf(btf)
        .map(|l| (l, k.tk_core))
        .map_err(|e| e.to_string());
    let line = Ok((k.cmdline_ptr, with_len.then_some(k.cmdline_len)));
    fake.read(async |kmem| read(kmem, uts, clock, line, NOW).await)
}

#[test]
fn names_clocks_and_command_line_in_two_calls_both_layouts_of_tk_core() {
    for core in [Core::Anonymous, Core::TkData] {
        let btf = btf(core);
        let mut fake = Fake::new(MEMORY);
        let k = kernel(&mut fake, core, &Clock::good(), b"console=ttyS0 quiet");
        for with_len in [true, false] {
            let (s, calls) = system(&fake, btf, &k, with_len);
            assert_eq!(calls, 2);
            let u = &s.uname;
            assert_eq!(u.sysname.as_deref(), Ok("Linux"));
            assert_eq!(u.nodename.as_deref(), Ok("leech"));
            assert_eq!(u.release.as_deref(), Ok("6.99.0-test"));
            assert_eq!(u.version.as_deref(), Ok("#1 SMP"));
            assert_eq!(u.machine.as_deref(), Ok("x86_64"));
            assert_eq!(u.domainname.as_deref(), Ok("example.test"));
            // Wall clock less CLOCK_BOOTTIME: 1,700,000,000.5 less
            // 1,234.5 less 5 asleep.
            assert_eq!(s.boot_time, Ok(Duration::from_secs(1_699_998_761)));
            assert_eq!(s.uptime, Ok(Duration::from_nanos(1239 * NS + NS / 2)));
            assert_eq!(
                s.clock,
                Ok(Duration::from_nanos(1_700_000_000 * NS + NS / 2))
            );
            assert_eq!(s.command_line.as_deref(), Ok("console=ttyS0 quiet"));
        }
    }
}

#[test]
fn a_name_without_its_nul_fails_alone() {
    let btf = btf(Core::Anonymous);
    let mut fake = Fake::new(MEMORY);
    let k = kernel(&mut fake, Core::Anonymous, &Clock::good(), b"ro");
    fake.put_bytes(k.uts + UTS_NAME + 65, &[b'x'; 65]);
    let (s, _) = system(&fake, btf, &k, true);
    assert_eq!(
        s.uname.nodename,
        Err("new_utsname.nodename has no NUL in its 65 bytes: not a name".into())
    );
    assert_eq!(s.uname.sysname.as_deref(), Ok("Linux"));
    assert_eq!(s.uname.release.as_deref(), Ok("6.99.0-test"));
    assert!(s.boot_time.is_ok() && s.command_line.is_ok());
}

#[test]
fn a_timekeeper_caught_mid_update_is_read_again_then_given_up() {
    let btf = btf(Core::Anonymous);
    let mut fake = Fake::new(MEMORY);
    let clock = Clock {
        sequence: 43,
        ..Clock::good()
    };
    let k = kernel(&mut fake, Core::Anonymous, &clock, b"ro");
    let (s, calls) = system(&fake, btf, &k, true);
    // The second read shares the command line's call; the third is its own.
    assert_eq!(calls, 3);
    let why = "the timekeeper was being updated while read (sequence 43)";
    assert_eq!(s.boot_time, Err(why.into()));
    assert_eq!(s.uptime, Err(why.into()));
    assert_eq!(s.clock, Err(why.into()));
    assert_eq!(s.uname.nodename.as_deref(), Ok("leech"));
    assert_eq!(s.command_line.as_deref(), Ok("ro"));
}

#[test]
fn clocks_that_disagree_or_hold_no_time_are_not_believed() {
    let btf = btf(Core::Anonymous);
    // Torn: offs_real one nanosecond off the other two.
    let mut fake = Fake::new(MEMORY);
    let k = kernel(&mut fake, Core::Anonymous, &Clock::good(), b"ro");
    let tk = k.tk_core + 16;
    let offs_real = Clock::good().wall - Clock::good().mono;
    fake.put(tk + OFFS_REAL, offs_real + 1);
    let (s, calls) = system(&fake, btf, &k, true);
    assert_eq!(calls, 3, "read again, as a writer may have been caught");
    for field in [&s.boot_time, &s.uptime, &s.clock] {
        assert!(
            field.as_ref().unwrap_err().contains("clocks disagree"),
            "{field:?}"
        );
    }
    // Zeros, as before the timekeeper starts: no calendar time, though
    // CLOCK_BOOTTIME is 0 then.
    let mut fake = Fake::new(MEMORY);
    let zero = Clock {
        wall: 0,
        mono: 0,
        asleep: 0,
        sequence: 0,
    };
    let k = kernel(&mut fake, Core::Anonymous, &zero, b"ro");
    let (s, _) = system(&fake, btf, &k, true);
    assert!(s.boot_time.unwrap_err().contains("before 2000"));
    assert!(s.clock.unwrap_err().contains("before 2000"));
    assert_eq!(s.uptime, Ok(Duration::ZERO));
    // A boot over a century ahead of now.
    let mut fake = Fake::new(MEMORY);
    let ahead = Clock {
        wall: 6_000_000_000 * NS,
        ..Clock::good()
    };
    let k = kernel(&mut fake, Core::Anonymous, &ahead, b"ro");
    let (s, _) = system(&fake, btf, &k, true);
    assert!(s.boot_time.unwrap_err().contains("over a century ahead"));
    assert_eq!(s.uptime, Ok(Duration::from_nanos(1239 * NS + NS / 2)));
    // A shift past a word's bits.
    let mut fake = Fake::new(MEMORY);
    let k = kernel(&mut fake, Core::Anonymous, &Clock::good(), b"ro");
    fake.put_u32(k.tk_core + 16 + SHIFT, 64);
    let (s, calls) = system(&fake, btf, &k, true);
    assert_eq!(calls, 2, "garbage is not read again");
    assert!(s.uptime.unwrap_err().contains("shift is 64"));
}

#[test]
fn command_lines_end_within_their_bound_at_a_kernel_address() {
    let btf = btf(Core::Anonymous);
    // No NUL in the 2048 bytes read when the length is not known: the
    // rest of the first page, then up to 2048.
    let mut fake = Fake::new(MEMORY);
    let long = vec![b'a'; 3000];
    let k = kernel(&mut fake, Core::Anonymous, &Clock::good(), &long);
    let (s, calls) = system(&fake, btf, &k, false);
    assert_eq!(calls, 2 + u64::from(k.line % 0x1000 + 2048 > 0x1000));
    assert!(s
        .command_line
        .unwrap_err()
        .contains("no end within 2048 bytes"));
    // With its length: all of it, in one read.
    let (s, calls) = system(&fake, btf, &k, true);
    assert_eq!(calls, 2);
    assert_eq!(s.command_line.map(|l| l.len()), Ok(3000));
    // A length past the bound is not read at all.
    fake.put_u32(k.cmdline_len, 1 << 20);
    let (s, calls) = system(&fake, btf, &k, true);
    assert_eq!(calls, 1);
    assert!(s
        .command_line
        .unwrap_err()
        .contains("saved_command_line_len is 1048576"));
    // A user address.
    fake.put(k.cmdline_ptr, 0x4000);
    let (s, _) = system(&fake, btf, &k, false);
    assert_eq!(
        s.command_line,
        Err("saved_command_line is 0x4000, not a kernel address".into())
    );
}

#[test]
fn a_layout_btf_lacks_fails_its_fields_only() {
    let mut b = BtfBuilder::new();
    b.structure("uts_namespace", 8, &[("kref", 0)]);
    let btf = Btf::parse(&b.finish()).unwrap();
    let mut fake = Fake::new(MEMORY);
    let k = kernel(&mut fake, Core::Anonymous, &Clock::good(), b"ro");
    let (s, calls) = system(&fake, &btf, &k, true);
    assert_eq!(calls, 2);
    assert!(s.uname.sysname.unwrap_err().contains("no member name"));
    assert!(s.uptime.unwrap_err().contains("seqcount"));
    assert_eq!(s.command_line.as_deref(), Ok("ro"));
}
