//! The live guest's own account of itself (`common::qemu::Oracle`: what its
//! `/proc` says, printed by its `/init`), checked for completeness and
//! self-consistency, and against QEMU's monitor: the oracle that walks of
//! the guest's memory are tested against must itself be right.
//!
//! Three guests, each booted once for this binary and in parallel: the
//! default (`nokaslr`), one with KASLR on, and one with Debian's cloud
//! kernel (the same version built with another configuration).

mod common;

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::Read;
use std::sync::OnceLock;

use common::qemu::oracle::{GuestTask, Oracle, PatternProcess};
use common::qemu::{shared_guest, Guest, GuestKernel, GuestOptions, DIRECT_MAP, KERNEL_MAP};

const PAGE: u64 = 0x1000;
/// `_text` and its physical address without KASLR (`CONFIG_PHYSICAL_START`).
const DEFAULT_TEXT: u64 = 0xffff_ffff_8100_0000;
const DEFAULT_TEXT_PHYSICAL: u64 = 0x100_0000;
/// The kernel symbols the guest must print (the kallsyms tables are not in
/// 6.1's own /proc/kallsyms, so they are not required).
const SYMBOLS: [&str; 9] = [
    "_text",
    "_stext",
    "init_top_pgt",
    "init_task",
    "init_pid_ns",
    "page_offset_base",
    "__start_BTF",
    "__stop_BTF",
    "linux_banner",
];

fn kaslr_guest() -> &'static Guest {
    static GUEST: OnceLock<Guest> = OnceLock::new();
    GUEST.get_or_init(|| {
        Guest::start_with(GuestOptions {
            kaslr: true,
            ..GuestOptions::default()
        })
    })
}

fn cloud_guest() -> &'static Guest {
    static GUEST: OnceLock<Guest> = OnceLock::new();
    GUEST.get_or_init(|| {
        Guest::start_with(GuestOptions {
            kernel: GuestKernel::Cloud,
            ..GuestOptions::default()
        })
    })
}

/// The one process whose arguments are `args`.
fn process_with_args<'g>(guest: &'g Guest, args: &[&str]) -> &'g GuestTask {
    let found: Vec<_> = guest
        .processes()
        .into_iter()
        .filter(|t| t.cmdline == args)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "processes with arguments {args:?}: {found:#?}"
    );
    found[0]
}

/// The arguments of the guest's `leechio-args` shell.
fn long_arguments() -> Vec<String> {
    let mut args: Vec<String> = [
        "sh",
        "-c",
        "while :; do sleep 100002; done",
        "leechio-args",
        "two words",
        "(paren) ) (",
        "ünïcödé ✓ λ",
        "",
        "tab\tand 'quotes'",
    ]
    .map(String::from)
    .to_vec();
    args.extend((1_000_001..=1_000_600).map(|n: u32| n.to_string()));
    args.push("last-argument".into());
    args
}

/// Everything every guest must say, whatever its kernel and KASLR: the
/// task tree hangs together, the test processes are there as started, the
/// maps are in order, and the kernel symbols are where QEMU's monitor finds
/// the kernel.
fn check_oracle(guest: &Guest) {
    let oracle = guest.oracle();
    assert!(
        oracle.version.starts_with("Linux version 6."),
        "{}",
        oracle.version
    );
    let pids: BTreeSet<u32> = oracle.tasks.iter().map(|t| t.pid).collect();
    for task in &oracle.tasks {
        let root = task.ppid == 0 && (task.pid == 1 || task.pid == 2);
        assert!(
            root || pids.contains(&task.ppid),
            "parent not listed: {task:?}"
        );
        let leader = oracle
            .task(task.tgid)
            .unwrap_or_else(|| panic!("thread group not listed: {task:?}"));
        assert!(leader.is_process());
        assert_eq!(task.kernel_thread, leader.kernel_thread, "{task:?}");
        assert_eq!(task.cmdline_bytes, leader.cmdline_bytes, "{task:?}");
        if task.kernel_thread {
            assert!(task.cmdline.is_empty(), "{task:?}");
            assert!(
                task.pid == 2 || task.ppid == 2,
                "not from kthreadd: {task:?}"
            );
        }
    }
    let init = oracle.task(1).expect("pid 1");
    assert_eq!((init.comm.as_str(), init.kernel_thread), ("init", false));
    // A subshell printed the oracle while /init waited, as it waits after.
    assert_eq!(init.state, 'S');
    let kthreadd = oracle.task(2).expect("pid 2");
    assert_eq!(
        (kthreadd.comm.as_str(), kthreadd.kernel_thread),
        ("kthreadd", true)
    );
    assert!(oracle.processes().filter(|t| t.kernel_thread).count() > 20);

    let sleep = process_with_args(guest, &["sleep", "100001"]);
    assert_eq!((sleep.comm.as_str(), sleep.ppid), ("sleep", 1));
    let args = long_arguments();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let shell = process_with_args(guest, &args);
    assert_eq!((shell.comm.as_str(), shell.ppid), ("sh", 1));
    assert_eq!(
        shell.cmdline_bytes,
        [args.join("\0").as_bytes(), b"\0"].concat()
    );
    assert!(shell.cmdline_bytes.len() > PAGE as usize);
    let looped = process_with_args(guest, &["sleep", "100002"]);
    assert_eq!(looped.ppid, shell.pid);

    let pattern = guest.pattern();
    check_pattern_process(oracle, pattern);
    for pid in [1, sleep.pid, shell.pid, pattern.pid] {
        let maps = guest.maps(pid);
        let exe = if pid == pattern.pid {
            "/bin/leechio-pattern"
        } else {
            "/bin/busybox"
        };
        assert_eq!(maps[0].path, exe, "pid {pid}");
        for pair in maps.windows(2) {
            assert!(pair[0].end <= pair[1].start, "pid {pid}: {pair:?}");
        }
        for map in maps {
            assert!(
                map.start < map.end && (map.start | map.end) % PAGE == 0,
                "{map:?}"
            );
        }
    }

    for name in SYMBOLS {
        assert!(
            guest.symbol(name) >= KERNEL_MAP,
            "{name} is not a kernel address"
        );
    }
    assert_eq!(guest.symbol("_stext"), guest.symbol("_text"));
    let btf = guest.symbol("__stop_BTF") - guest.symbol("__start_BTF");
    assert_eq!(
        oracle.btf_size,
        Some(btf),
        "/sys/kernel/btf/vmlinux against __stop_BTF - __start_BTF"
    );
    check_symbols_with_the_monitor(guest);
}

/// The pattern process as `scripts/guest-pattern.c` makes it.
fn check_pattern_process(oracle: &Oracle, pattern: PatternProcess) {
    let process = oracle.task(pattern.pid).expect("the pattern process");
    assert_eq!(process.comm, "leech (pat) x");
    assert_eq!(process.cmdline, ["leechio-pattern"]);
    assert_eq!(
        (process.ppid, process.tgid, process.kernel_thread),
        (1, pattern.pid, false)
    );
    let threads: Vec<&str> = oracle
        .tasks
        .iter()
        .filter(|t| t.tgid == pattern.pid)
        .map(|t| t.comm.as_str())
        .collect();
    assert_eq!(threads, ["leech (pat) x", "leechio-thr-1", "leechio-thr-2"]);
    let children: Vec<(&str, char, bool, usize)> = oracle
        .tasks
        .iter()
        .filter(|t| t.ppid == pattern.pid)
        .map(|t| (t.comm.as_str(), t.state, t.kernel_thread, t.cmdline.len()))
        .collect();
    assert_eq!(
        children,
        [
            ("leechio-stopped", 'T', false, 1),
            ("leechio-zombie", 'Z', false, 0)
        ]
    );
    assert_eq!(pattern.end - pattern.start, 64 * PAGE);
    let [rw, ro] = pattern.halves();
    let maps = &oracle.maps[&pattern.pid];
    let at = maps
        .iter()
        .position(|m| m.start == rw.start)
        .unwrap_or_else(|| panic!("no VMA at {:#x}: {maps:#?}", rw.start));
    let spans: Vec<(u64, u64, &str, &str)> = maps[at - 1..at + 3]
        .iter()
        .map(|m| (m.start, m.end, m.perms.as_str(), m.path.as_str()))
        .collect();
    assert_eq!(
        spans,
        [
            (rw.start - PAGE, rw.start, "---p", ""),
            (rw.start, rw.end, "rw-p", ""),
            (ro.start, ro.end, "r--p", ""),
            (ro.end, ro.end + PAGE, "---p", ""),
        ]
    );
}

/// The kernel image is one physical run: every symbol sits at `_text`'s
/// physical address plus its distance from `_text`, where the monitor
/// (through the CPU's page tables) finds it too; and what the symbols name
/// is there: the banner /proc/version prints, BTF's magic.
fn check_symbols_with_the_monitor(guest: &Guest) {
    let text = guest.symbol("_text");
    let text_pa = guest.gva2gpa(text).expect("_text is mapped");
    assert_eq!(text_pa % (2 << 20), 0, "_text at {text_pa:#x}");
    for name in SYMBOLS {
        let va = guest.symbol(name);
        assert_eq!(guest.gva2gpa(va), Some(text_pa + (va - text)), "{name}");
    }
    assert_eq!(
        guest.kernel_dtb(),
        text_pa + guest.symbol("init_top_pgt") - text
    );
    let version = &guest.oracle().version;
    let banner_pa = text_pa + guest.symbol("linux_banner") - text;
    let banner = guest.pmemsave(banner_pa, version.len() as u64 + 1);
    assert_eq!(banner, format!("{version}\n").as_bytes());
    let btf_pa = text_pa + guest.symbol("__start_BTF") - text;
    assert_eq!(
        guest.pmemsave(btf_pa, 4),
        [0x9f, 0xeb, 1, 0],
        "BTF magic, version 1, flags 0"
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn the_default_guest_says_what_its_proc_says() {
    let guest = shared_guest();
    check_oracle(&guest);
    assert!(guest.oracle().kernel_cmdline.contains("nokaslr"));
    assert_eq!(guest.symbol("_text"), DEFAULT_TEXT);
    assert_eq!(guest.gva2gpa(DEFAULT_TEXT), Some(DEFAULT_TEXT_PHYSICAL));
    assert_eq!(guest.page_offset_base(), DIRECT_MAP);
}

/// Under KASLR the kernel's virtual base, its physical base and the
/// direct map each move at random. The virtual base alone stays put once
/// in ~500 boots, and with the physical base once in ~50,000: the test asks
/// that one of the two moved, and that the direct map moved.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn the_kaslr_guest_moves_the_kernel() {
    let guest = kaslr_guest();
    check_oracle(guest);
    assert!(!guest.oracle().kernel_cmdline.contains("nokaslr"));
    let text = guest.symbol("_text");
    let text_pa = guest.gva2gpa(text).expect("_text is mapped");
    println!("KASLR: _text at {text:#x}, physical {text_pa:#x}");
    assert!(
        text != DEFAULT_TEXT || text_pa != DEFAULT_TEXT_PHYSICAL,
        "the kernel did not move: _text {text:#x} at {text_pa:#x}"
    );
    assert_ne!(guest.page_offset_base(), DIRECT_MAP);
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn the_cloud_guest_is_another_build_of_the_kernel() {
    let cloud = cloud_guest();
    check_oracle(cloud);
    let default = shared_guest();
    assert_ne!(cloud.kernel_version(), default.kernel_version());
    assert!(
        cloud.kernel_version().contains("-cloud-amd64"),
        "{}",
        cloud.kernel_version()
    );
    // Other code, other data: the same symbols at other distances from
    // _text, and BTF of another size.
    let distance = |g: &Guest, name| g.symbol(name) - g.symbol("_text");
    assert_ne!(
        distance(cloud, "init_pid_ns"),
        distance(&default, "init_pid_ns")
    );
    assert_ne!(cloud.oracle().btf_size, default.oracle().btf_size);
}

/// Every page of the pattern is in the guest's RAM, byte for byte as the
/// oracle describes it (the RAM file itself, not LeechCore, is read).
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn the_pattern_is_in_the_guests_ram() {
    let guest = shared_guest();
    let pattern = guest.pattern();
    let pages: HashMap<Vec<u8>, u64> = (pattern.start..pattern.end)
        .step_by(PAGE as usize)
        .map(|va| (pattern.bytes(va, 8), va))
        .collect();
    let mut found = BTreeSet::new();
    let mut ram = File::open(guest.shm_path()).expect("the guest's RAM file");
    let mut chunk = vec![0; 16 << 20];
    loop {
        let n = ram.read(&mut chunk).expect("read the RAM file");
        if n == 0 {
            break;
        }
        assert_eq!(n % PAGE as usize, 0, "the RAM file read in whole pages");
        for page in chunk[..n].chunks(PAGE as usize) {
            if let Some(&va) = pages.get(&page[..8]) {
                if page == pattern.bytes(va, PAGE as usize) {
                    found.insert(va);
                }
            }
        }
    }
    let missing: Vec<String> = pages
        .values()
        .filter(|va| !found.contains(va))
        .map(|va| format!("{va:#x}"))
        .collect();
    assert!(missing.is_empty(), "pattern pages not in RAM: {missing:?}");
}

/// What the guest prints of a task's `sched` file: its first 64 bytes, in
/// hex (a first line `COMM (PID, #threads: N)`, then a rule of dashes).
fn sched(comm: &str, pid: u32) -> String {
    let text = format!("{comm} ({pid}, #threads: 1)\n{}\n", "-".repeat(60));
    text.bytes().take(64).map(|b| format!("{b:02x}")).collect()
}

/// Lines as the guest prints them (with the console's `\r`), among kernel
/// messages; `extra` goes before the end line, which says `end`.
fn log(extra: &str, end: &str) -> String {
    let pattern = sched("leech (pat)", 89);
    let worker = sched("kworker/R-kvfre", 8);
    format!(
        "[    1.3] Run /init as init process\r\n\
         leechio-oracle: pattern pid=89 start=7f0000001000 end=7f0000041000\r\n\
         leechio-oracle: version Linux version 6.1.0 (x) #1 SMP\r\n\
         leechio-oracle: cmdline console=ttyS0 nokaslr\r\n\
         leechio-oracle: btf 4359789\r\n\
         leechio-oracle: vmcoreinfo 0x0000000002a3b000 1024\r\n\
         leechio-oracle: symbol _text ffffffff81000000 T\r\n\
         leechio-oracle: task pid=89 tgid=89 ppid=1 state=S kthread=0 uid=0,0,0,0 gid=0,0,0,0 caps=0,1ff,1ff,1ff,0 start=5 environ=413d3100 sched={pattern} cmdline=610062000000\r\n\
         leechio-oracle: task pid=8 tgid=8 ppid=2 state=I kthread=1 uid=0,0,0,0 gid=0,0,0,0 caps=0,1ff,1ff,1ff,0 start=5 environ=413d3100 sched={worker} cmdline=\r\n\
         leechio-oracle: map 89 00400000-00401000 r--p 00001000 00:02 207                                /bin/leechio (x)\r\n\
         leechio-oracle: map 89 7f0000001000-7f0000021000 rw-p 00000000 00:00 0 \r\n\
         leechio-oracle: uname sysname Linux\r\n\
         leechio-oracle: uname nodename leechio-guest\r\n\
         leechio-oracle: uname release 6.1.0\r\n\
         leechio-oracle: uname version #1 SMP PREEMPT_DYNAMIC Debian\r\n\
         leechio-oracle: uname machine x86_64\r\n\
         leechio-oracle: uname domainname leechio.test\r\n\
         leechio-oracle: btime 1764300000\r\n\
         leechio-oracle: clock uptime=7.05 now=1764300007\r\n\
         leechio-oracle: dmesg 5b20202020302e3030303030305d204c696e7578\r\n\
         leechio-oracle: dmesg 5b20202020302e3030303030305d2009090a\r\n\
         leechio-oracle: dmesg-end lines=2\r\n\
         leechio-oracle: socket tcp 0: 0100007F:1B59 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2301 1 0000000000000000 100 0 0 10 0\r\n\
         leechio-oracle: socket tcp6 1: 0000000000000000FFFF00000100007F:9C42 0000000000000000FFFF00000100007F:1B59 01 00000000:00000000 00:00000000 00000000     0        0 2305 1 0000000000000000 20 4 30 10 -1\r\n\
         leechio-oracle: socket udp6 12: 00000000000000000000000001000000:1B5C 00000000000000000000000001000000:1B5B 01 00000000:00000000 00:00000000 00000000     0        0 2310 2 0000000000000000 0\r\n\
         leechio-oracle: iface dummy0 2 02:00:5e:10:00:01 1500 0x10c3 1\r\n\
         leechio-oracle: iface lo 1 00:00:00:00:00:00 65536 0x9 772\r\n\
         leechio-oracle: inet 1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\r\n\
         leechio-oracle: inet 2: dummy0    inet 192.0.2.1/24 scope global dummy0\\       valid_lft forever preferred_lft forever\r\n\
         leechio-oracle: inet6 20010db8000000000000000000000001 02 40 00 80   dummy0\r\n\
         leechio-oracle: inet6 00000000000000000000000000000001 01 80 10 80       lo\r\n\
         leechio-oracle: net-end sockets=3 interfaces=2 inet=2 inet6=2\r\n\
         {extra}leechio-oracle: end {end}\r\n\
         leechio-guest: ready\r\n"
    )
}

#[test]
fn oracle_lines_are_read_back() {
    let oracle = Oracle::parse(&log("", "tasks=2 maps=2 symbols=1")).unwrap();
    assert_eq!(oracle.version, "Linux version 6.1.0 (x) #1 SMP");
    let task = oracle.task(89).unwrap();
    assert_eq!((task.uid, task.gid), ([0; 4], [0; 4]));
    assert_eq!(task.caps, [0, 0x1ff, 0x1ff, 0x1ff, 0]);
    assert_eq!(
        (task.start_ticks, task.environ.as_slice()),
        (5, &b"A=1\0"[..])
    );
    assert_eq!(oracle.kernel_cmdline, "console=ttyS0 nokaslr");
    assert_eq!(oracle.btf_size, Some(4359789));
    assert_eq!(oracle.vmcoreinfo_note, Some((0x2a3b000, 0x1024)));
    assert_eq!(oracle.symbol("_text"), Some(DEFAULT_TEXT));
    let pattern = PatternProcess {
        pid: 89,
        start: 0x7f00_0000_1000,
        end: 0x7f00_0004_1000,
    };
    assert_eq!(oracle.pattern, pattern);
    assert_eq!(
        pattern.halves(),
        [
            0x7f00_0000_1000..0x7f00_0002_1000,
            0x7f00_0002_1000..0x7f00_0004_1000
        ]
    );
    assert_eq!(
        pattern.bytes(8, 12)[..8],
        common::pattern_word(8).to_le_bytes()
    );
    assert_eq!(
        pattern.bytes(8, 12)[8..],
        common::pattern_word(16).to_le_bytes()[..4]
    );
    let task = oracle.task(89).unwrap();
    assert_eq!(task.comm, "leech (pat)");
    // "a", "b", "" and a last argument whose NUL was overwritten.
    assert_eq!(task.cmdline_bytes, b"a\0b\0\0\0");
    assert_eq!(task.cmdline, ["a", "b", "", ""]);
    let worker = oracle.task(8).unwrap();
    assert!(worker.kernel_thread && worker.cmdline.is_empty());
    assert_eq!(worker.comm, "kworker/R-kvfre");
    let pids: Vec<u32> = oracle.tasks.iter().map(|t| t.pid).collect();
    assert_eq!(pids, [8, 89]);
    let maps = &oracle.maps[&89];
    assert_eq!(maps[0].path, "/bin/leechio (x)");
    assert_eq!((maps[0].offset, maps[0].inode), (0x1000, 207));
    assert_eq!(maps[0].device, "00:02");
    assert_eq!(maps[1].path, "");
    assert_eq!(
        (maps[1].start, maps[1].end),
        (0x7f00_0000_1000, 0x7f00_0002_1000)
    );
}

#[test]
fn the_network_is_read_back() {
    let oracle = Oracle::parse(&log("", "tasks=2 maps=2 symbols=1")).unwrap();
    let n = &oracle.network;
    let socket = |s: &common::qemu::oracle::network::GuestSocket| {
        (
            s.protocol.clone(),
            s.local.to_string(),
            s.peer.to_string(),
            s.state,
            s.inode,
        )
    };
    let sockets: Vec<_> = n.sockets.iter().map(socket).collect();
    assert_eq!(
        sockets,
        [
            (
                "tcp".into(),
                "127.0.0.1:7001".into(),
                "0.0.0.0:0".into(),
                10,
                2301
            ),
            (
                "tcp".into(),
                "[::ffff:127.0.0.1]:40002".into(),
                "[::ffff:127.0.0.1]:7001".into(),
                1,
                2305
            ),
            (
                "udp".into(),
                "[::1]:7004".into(),
                "[::1]:7003".into(),
                1,
                2310
            ),
        ]
    );
    let lo = &n.interfaces[0];
    assert_eq!(
        (lo.index, lo.name.as_str(), lo.flags, lo.link_type),
        (1, "lo", 9, 772)
    );
    assert_eq!(
        lo.ipv4,
        [("127.0.0.1".parse().unwrap(), 8, "lo".to_string())]
    );
    assert_eq!(lo.ipv6, [("::1".parse().unwrap(), 128, 0x10)]);
    let dummy = &n.interfaces[1];
    assert_eq!(
        (dummy.address.as_str(), dummy.mtu, dummy.flags),
        ("02:00:5e:10:00:01", 1500, 0x10c3)
    );
    assert_eq!(dummy.ipv6, [("2001:db8::1".parse().unwrap(), 64, 0)]);
    let lost = log("", "tasks=2 maps=2 symbols=1").replace("inet6=2", "inet6=3");
    assert_eq!(
        Oracle::parse(&lost).unwrap_err(),
        "the guest printed [3, 2, 2, 3] sockets, devices, IPv4 and IPv6 addresses; [3, 2, 2, 2] read"
    );
}

#[test]
fn the_kernels_names_clocks_and_log_are_read_back() {
    let oracle = Oracle::parse(&log("", "tasks=2 maps=2 symbols=1")).unwrap();
    let s = &oracle.system;
    assert_eq!(s.uname("version"), "#1 SMP PREEMPT_DYNAMIC Debian");
    assert_eq!(s.uname("domainname"), "leechio.test");
    assert_eq!(
        (s.btime, s.uptime_centis, s.now),
        (1764300000, 705, 1764300007)
    );
    assert_eq!(
        s.dmesg,
        [&b"[    0.000000] Linux"[..], b"[    0.000000] \t\t\n"]
    );
    let lost = log("", "tasks=2 maps=2 symbols=1").replace("lines=2", "lines=3");
    assert_eq!(
        Oracle::parse(&lost).unwrap_err(),
        "the guest printed 3 dmesg lines, 2 read"
    );
    let no_name =
        log("", "tasks=2 maps=2 symbols=1").replace("uname machine x86_64", "uname sysname Linux");
    assert!(Oracle::parse(&no_name)
        .unwrap_err()
        .ends_with("uname sysname given twice"));
    let bad = log("", "tasks=2 maps=2 symbols=1").replace("uptime=7.05", "uptime=7.5");
    assert!(Oracle::parse(&bad)
        .unwrap_err()
        .ends_with("uptime \"7.5\" is not S.HH"));
    let odd = log("", "tasks=2 maps=2 symbols=1").replace("2009090a", "2009090");
    assert!(Oracle::parse(&odd)
        .unwrap_err()
        .ends_with("dmesg: odd number of hex digits"));
}

#[test]
fn a_lost_or_bad_oracle_line_is_an_error() {
    let lost = Oracle::parse(&log("", "tasks=3 maps=2 symbols=1")).unwrap_err();
    assert_eq!(
        lost,
        "the guest printed [3, 2, 1, 0, 0] tasks, map lines, symbols, modules and fds; [2, 2, 1, 0, 0] read"
    );
    // A module line: read, and counted when the end line counts them.
    let module = "leechio-oracle: module crc7 16384 0 - Live 0xffffffffc0238000\r\n";
    let oracle = Oracle::parse(&log(module, "tasks=2 maps=2 symbols=1 modules=1")).unwrap();
    assert_eq!(
        oracle.modules,
        [common::qemu::oracle::GuestModule {
            name: "crc7".into(),
            size: 16384,
            state: "Live".into(),
            address: 0xffff_ffff_c023_8000,
        }]
    );
    let lost = Oracle::parse(&log(module, "tasks=2 maps=2 symbols=1 modules=2")).unwrap_err();
    assert!(lost.ends_with("[2, 2, 1, 1, 0] read"), "{lost}");
    let bad = "leechio-oracle: module crc7 sixteen 0 - Live 0xffffffffc0238000\r\n";
    assert!(Oracle::parse(&log(bad, "tasks=2 maps=2 symbols=1 modules=1")).is_err());
    let odd = Oracle::parse(&log(
        "leechio-oracle: task pid=9 tgid=9 ppid=2 state=S kthread=0 uid=0,0,0,0 gid=0,0,0,0 caps=0,1ff,1ff,1ff,0 start=5 environ=413d3100 sched=abc cmdline=\r\n",
        "tasks=3 maps=2 symbols=1",
    ))
    .unwrap_err();
    assert!(odd.ends_with("sched: odd number of hex digits"), "{odd}");
    let twice = Oracle::parse(&log(
        &format!(
            "leechio-oracle: task pid=8 tgid=8 ppid=2 state=I kthread=1 uid=0,0,0,0 gid=0,0,0,0 caps=0,1ff,1ff,1ff,0 start=5 environ=413d3100 sched={} cmdline=\r\n",
            sched("a", 8)
        ),
        "tasks=3 maps=2 symbols=1",
    ))
    .unwrap_err();
    assert_eq!(twice, "pid 8 listed twice");
    let error = Oracle::parse(&log(
        "leechio-oracle: error the pattern process did not start\r\n",
        "tasks=2 maps=2 symbols=1",
    ))
    .unwrap_err();
    assert_eq!(error, "the guest says: the pattern process did not start");
    let no_note = log("", "tasks=2 maps=2 symbols=1").replace("0x0000000002a3b000 1024", "none");
    assert_eq!(Oracle::parse(&no_note).unwrap().vmcoreinfo_note, None);
    let bad_note = log("", "tasks=2 maps=2 symbols=1").replace(" 1024", "");
    assert!(
        Oracle::parse(&bad_note)
            .unwrap_err()
            .ends_with("vmcoreinfo is not ADDRESS SIZE"),
        "{bad_note}"
    );
    let unended = log("", "tasks=2 maps=2 symbols=1").replace("leechio-oracle: end", "x");
    assert_eq!(
        Oracle::parse(&unended).unwrap_err(),
        "no oracle end line in the serial log"
    );
}

/// The page cache's lines: each file with its stat fields (the device
/// turned into the kernel's `MKDEV`), a deleted file's path with its
/// spaces; a line lost or without a field is an error.
#[test]
fn the_page_caches_files_are_read_back() {
    let lines = "leechio-oracle: cache ino=17 dev=2 size=21007 links=0 blocks=48 sha256=ab12 path=/leechio-cache/deleted.log (deleted)\r\n\
                 leechio-oracle: cache ino=5 dev=2049 size=3 links=1 blocks=8 sha256=cd34 path=/a\r\n\
                 leechio-oracle: cache-end files=2\r\n";
    let oracle = Oracle::parse(&log(lines, "tasks=2 maps=2 symbols=1")).unwrap();
    let files = &oracle.cached_files;
    assert_eq!(files.len(), 2);
    assert_eq!(files[0].path, "/leechio-cache/deleted.log (deleted)");
    assert_eq!(
        (
            files[0].inode,
            files[0].device,
            files[0].size,
            files[0].links,
            files[0].blocks
        ),
        (17, 2, 21007, 0, 48)
    );
    assert_eq!(files[0].sha256, "ab12");
    // st_dev 2049 is 8:1, which the kernel keeps as 8 << 20 | 1.
    assert_eq!(files[1].device, 8 << 20 | 1);
    let lost = Oracle::parse(&log(
        &lines.replace("files=2", "files=3"),
        "tasks=2 maps=2 symbols=1",
    ));
    assert_eq!(lost.unwrap_err(), "the guest printed 3 cache lines, 2 read");
    let bad = Oracle::parse(&log(
        &lines.replace("ino=5 ", ""),
        "tasks=2 maps=2 symbols=1",
    ));
    assert!(bad.unwrap_err().ends_with("cache: no ino="));
    // An older guest prints none.
    let none = Oracle::parse(&log("", "tasks=2 maps=2 symbols=1")).unwrap();
    assert!(none.cached_files.is_empty());
}

/// The comm is what the first line of `sched` holds before
/// ` (PID, #threads: N)`, spaces and parentheses included; a line of
/// another task, or one that is cut, is an error.
#[test]
fn the_comm_is_the_one_sched_prints() {
    let comm = |sched: String| {
        let line = format!(
            "leechio-oracle: task pid=7 tgid=7 ppid=2 state=S kthread=1 uid=0,0,0,0 gid=0,0,0,0 caps=0,1ff,1ff,1ff,0 start=5 environ=413d3100 sched={sched} cmdline=\r\n"
        );
        Oracle::parse(&log(&line, "tasks=3 maps=2 symbols=1"))
            .map(|o| o.task(7).unwrap().comm.clone())
    };
    for name in [
        "kworker/R-kvfre",
        "rcu_tasks_rude_",
        "x (7, #threads:",
        "a) (b",
        "",
    ] {
        assert_eq!(comm(sched(name, 7)).as_deref(), Ok(name));
    }
    let other = comm(sched("kthreadd", 2)).unwrap_err();
    assert!(
        other
            .ends_with(r#"sched: "kthreadd (2, #threads: 1)" does not end in " (7, #threads: N)""#),
        "{other}"
    );
    let cut = comm(sched("kthreadd", 7)[..40].to_string()).unwrap_err();
    assert!(cut.ends_with("sched: no whole first line"), "{cut}");
}

/// The modules' taint and parameters, and the kernel's taint: read back,
/// each line counted (a lost one is an error); a guest that prints none
/// has none.
#[test]
fn the_integrity_lines_are_read_back_and_counted() {
    let lines = "leechio-oracle: tainted 8192\r\n\
                 leechio-oracle: module-taint crc7 E\r\n\
                 leechio-oracle: module-taint dummy \r\n\
                 leechio-oracle: param kvm halt_poll_ns 200000\r\n\
                 leechio-oracle: parmtype dummy numdummies int\r\n\
                 leechio-oracle: param-given dummy numdummies 1\r\n\
                 leechio-oracle: integrity-end taints=2 params=1 parmtypes=1 sysmodule=67\r\n";
    let oracle = Oracle::parse(&log(lines, "tasks=2 maps=2 symbols=1")).unwrap();
    let i = &oracle.integrity;
    assert_eq!(i.tainted, 8192);
    assert_eq!(i.module_taint["crc7"], "E");
    assert_eq!(i.module_taint["dummy"], "");
    let key = |m: &str, p: &str| (m.to_string(), p.to_string());
    assert_eq!(i.params[&key("kvm", "halt_poll_ns")], "200000");
    assert_eq!(i.parmtypes[&key("dummy", "numdummies")], "int");
    assert_eq!(i.given[&key("dummy", "numdummies")], "1");
    assert_eq!(i.sysfs_entries, 67);
    let lost = lines.replace("params=1", "params=2");
    let lost = Oracle::parse(&log(&lost, "tasks=2 maps=2 symbols=1")).unwrap_err();
    assert!(lost.ends_with("[2, 1, 1] read"), "{lost}");
    let none = Oracle::parse(&log("", "tasks=2 maps=2 symbols=1")).unwrap();
    assert_eq!(none.integrity, Default::default());
}
