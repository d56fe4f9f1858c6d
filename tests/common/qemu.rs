//! A live Linux guest under QEMU, for end-to-end tests through LeechCore's
//! `qemu://` device, with QEMU's monitor as the independent oracle.
//!
//! [`Guest::start`] runs `scripts/guest.sh`, which boots the guest with its
//! RAM in `/dev/shm/<name>` and two QMP sockets: one for LeechCore, one for
//! the monitor here (QMP serves one client at a time). It returns once the
//! guest's `/init` has printed what its `/proc` says, so the kernel's page
//! tables and the test processes are in place.
//!
//! Cleanup, whatever happens to the test:
//! - `Drop` asks the script to stop (QEMU quits, the RAM file and the socket
//!   folder go), kills QEMU itself if the script does not answer in time, and
//!   removes the RAM file and folder too;
//! - the script holds the guest only while its standard input is open: the
//!   write end lives in this process, so when the process ends for any
//!   reason (panic, abort, SIGKILL) the script sees the end of input and
//!   cleans up; that is what stops a guest kept in a `static`
//!   ([`shared_guest`]), which is never dropped;
//! - QEMU runs with a parent-death signal (SIGKILL) bound to the script.
//!
//! Names are `leechio-test-<pid>-<n>`, so guests of parallel tests and test
//! binaries never clash.
//!
//! The guest also says what its own `/proc` shows (tasks, maps, kernel
//! symbols; [`oracle`]), and [`Guest::start_with`] boots it with KASLR or
//! with a second kernel build.

pub mod oracle;
mod qmp;

use oracle::{GuestMap, GuestTask, Oracle, PatternProcess};
use qmp::{parse_dump, Qmp};

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use leechio::{DeviceConfig, LeechCore, MemoryMap, MemoryRange};
use serde_json::{json, Value};

/// How long a guest may take from start to its `/init` (about 5 s alone;
/// much more when several boot at once on two cores under TCG).
const BOOT_TIMEOUT: Duration = Duration::from_secs(240);
/// How long the script gets to stop QEMU and clean up on drop.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// Start of the kernel text mapping on x86-64 (`__START_KERNEL_map`).
pub const KERNEL_MAP: u64 = 0xffff_ffff_8000_0000;
/// Start of the direct map of all physical memory without KASLR
/// (`PAGE_OFFSET`, 4-level paging).
pub const DIRECT_MAP: u64 = 0xffff_8880_0000_0000;

/// How much RAM a guest gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GuestMemory {
    /// 256 MiB: all of it below the PCI hole. The default.
    #[default]
    Mib256,
    /// 4 GiB: 3 GiB below the PCI hole, 1 GiB at 4 GiB and up. Sparse in
    /// `/dev/shm`: only pages the guest touches take host memory.
    Gib4,
}

impl GuestMemory {
    /// The size in bytes.
    pub fn bytes(self) -> u64 {
        match self {
            GuestMemory::Mib256 => 256 << 20,
            GuestMemory::Gib4 => 4 << 30,
        }
    }

    fn qemu_size(self) -> &'static str {
        match self {
            GuestMemory::Mib256 => "256M",
            GuestMemory::Gib4 => "4G",
        }
    }
}

/// Which kernel a guest boots (both from `make setup`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GuestKernel {
    /// Debian's `linux-image-amd64`. The default.
    #[default]
    Default,
    /// Debian's `linux-image-cloud-amd64`: the same version built with
    /// another configuration, so other struct layouts.
    Cloud,
}

impl GuestKernel {
    fn flavour(self) -> &'static str {
        match self {
            GuestKernel::Default => "default",
            GuestKernel::Cloud => "cloud",
        }
    }
}

/// How a guest boots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GuestOptions {
    /// RAM size.
    pub memory: GuestMemory,
    /// KASLR on (the kernel's physical and virtual bases and the direct
    /// map's move at random); off by default (`nokaslr`).
    pub kaslr: bool,
    /// The kernel build.
    pub kernel: GuestKernel,
    /// A CPU with 5-level paging (QEMU's `-cpu max`), which the kernel
    /// turns on (CR4.LA57); QEMU's default CPU otherwise (4-level).
    pub la57: bool,
}

/// A running guest; stopped and cleaned up on drop.
pub struct Guest {
    name: String,
    options: GuestOptions,
    device: String,
    shm: PathBuf,
    dir: PathBuf,
    serial: PathBuf,
    qemu_pid: u32,
    script: Child,
    stdin: Option<ChildStdin>,
    monitor: Mutex<Option<Qmp>>,
    kernel_text: u64,
    init_top_pgt: u64,
    kernel_dtb: u64,
    oracle: Option<Oracle>,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

impl Guest {
    /// Boots a guest with `memory` and the default kernel, KASLR off, and
    /// waits until its `/init` has printed its oracle.
    pub fn start(memory: GuestMemory) -> Guest {
        Guest::start_with(GuestOptions {
            memory,
            ..GuestOptions::default()
        })
    }

    /// Boots a guest as `options` say and waits until its `/init` has
    /// printed its oracle.
    pub fn start_with(options: GuestOptions) -> Guest {
        Guest::start_with_processes(options, 0)
    }

    /// Boots a guest as `options` say, with `extra` more user processes
    /// (`sleep 300000+I` for I in 1..=extra, pids from 5000 up; see
    /// `scripts/guest.sh --processes`), and waits for its oracle.
    pub fn start_with_processes(options: GuestOptions, extra: u32) -> Guest {
        let name = format!(
            "leechio-test-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let dir = std::env::temp_dir().join(&name);
        let script = super::repo_root().join("scripts/guest.sh");
        let mut child = Command::new("bash")
            .arg(&script)
            .args(["--memory", options.memory.qemu_size(), "--name", &name])
            .args(["--kernel", options.kernel.flavour(), "--dir"])
            .arg(&dir)
            .args(options.kaslr.then_some("--kaslr"))
            .args(
                options
                    .la57
                    .then_some(["--cpu", "max"])
                    .into_iter()
                    .flatten(),
            )
            .args(["--processes", &extra.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        // Lines are read on a thread, so every wait for one has a deadline.
        // It reads to the end: a script writing to a closed pipe would die
        // of SIGPIPE before cleaning up.
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let mut guest = Guest {
            shm: Path::new("/dev/shm").join(&name),
            name,
            options,
            device: String::new(),
            dir,
            serial: PathBuf::new(),
            qemu_pid: 0,
            script: child,
            stdin,
            monitor: Mutex::new(None),
            kernel_text: 0,
            init_top_pgt: 0,
            kernel_dtb: 0,
            oracle: None,
        };
        // From here on, a panic drops `guest`, which cleans up.
        guest.wait_until_ready(lines);
        guest
    }

    fn wait_until_ready(&mut self, lines: Receiver<String>) {
        let deadline = Instant::now() + BOOT_TIMEOUT;
        loop {
            let line = match lines.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => panic!(
                    "guest {} not ready after {BOOT_TIMEOUT:?}; serial log:\n{}",
                    self.name,
                    self.serial_log()
                ),
                Err(RecvTimeoutError::Disconnected) => {
                    panic!(
                        "guest script for {} ended before the guest was ready",
                        self.name
                    )
                }
            };
            match line.split_once('=') {
                Some(("device", v)) => self.device = v.to_string(),
                Some(("serial", v)) => self.serial = v.into(),
                Some(("pid", v)) => self.qemu_pid = v.parse().expect("QEMU pid"),
                Some(("shm", v)) => assert_eq!(Path::new(v), self.shm),
                Some(("monitor", v)) => {
                    *self.monitor.get_mut().unwrap() = Some(Qmp::connect(Path::new(v), deadline))
                }
                _ if line == "ready" => break,
                _ if line.starts_with("qemu exited") => {
                    panic!("QEMU of guest {} exited during boot: {line}", self.name)
                }
                _ => {}
            }
        }
        // The guest printed what its /proc says, kernel symbols included.
        let log = self.serial_log();
        let oracle = Oracle::parse(&log)
            .unwrap_or_else(|e| panic!("guest {}: {e}; serial log:\n{log}", self.name));
        self.oracle = Some(oracle);
        self.kernel_text = self.symbol("_text");
        self.init_top_pgt = self.symbol("init_top_pgt");
        // The monitor translates through the CPU's CR3, which by now holds a
        // page table with the kernel half mapped (the running process's, or
        // the kernel's own); the kernel's own is init_top_pgt.
        assert_ne!(self.cr3(), 0, "CR3 is still zero");
        self.kernel_dtb = self
            .gva2gpa(self.init_top_pgt)
            .expect("init_top_pgt is not mapped");
        assert!(
            self.gva2gpa(self.kernel_text).is_some(),
            "kernel text is not mapped"
        );
    }

    /// LeechCore's device string: `qemu://shm=NAME,qmp=SOCKET`.
    pub fn device_string(&self) -> String {
        self.device.clone()
    }

    /// The device string with LeechCore's FPGA emulation: `latency_ns` per
    /// read call, `readpage_ns` per page.
    pub fn device_string_with_delays(&self, latency_ns: u64, readpage_ns: u64) -> String {
        format!(
            "{},delay-latency-ns={latency_ns},delay-readpage-ns={readpage_ns}",
            self.device
        )
    }

    /// Opens LeechCore's qemu device on the guest (about 1 s); see
    /// [`Guest::open_with`].
    pub fn open(&self) -> LeechCore {
        self.open_with(&self.device)
    }

    /// Opens LeechCore on `device` (this guest's device string, perhaps
    /// with extra parameters). The device itself checks LeechCore's
    /// memory map of the guest against QEMU's and fixes it (LeechCore
    /// 2.23.3 reads it with a race and can drop a range); the tests check
    /// the result against `ram_map`.
    pub fn open_with(&self, device: &str) -> LeechCore {
        open_device(device)
    }

    /// The guest's RAM as QEMU lays it out: the `ram` regions of the
    /// backend `qemu-ram` in the system address space (`info mtree -f`),
    /// each with its offset in the RAM file as `remap`.
    pub fn ram_map(&self) -> MemoryMap {
        let text = self.hmp("info mtree -f");
        let system = text
            .split("FlatView #")
            .find(|view| view.contains("Root memory region: system"))
            .unwrap_or_else(|| panic!("no system FlatView in {text}"));
        let mut ranges = Vec::new();
        for line in system.lines() {
            // "  0000000000100000-000000000fffffff (prio 0, ram): qemu-ram @0000000000100000"
            let Some((span, region)) = line.trim().split_once(' ') else {
                continue;
            };
            let Some(region) = region.split_once("ram): ").map(|(_, r)| r) else {
                continue;
            };
            let mut words = region.split_whitespace();
            if words.next() != Some("qemu-ram") {
                continue;
            }
            let (first, last) = span.split_once('-').expect("range");
            let start = u64::from_str_radix(first, 16).expect("range start");
            let end = u64::from_str_radix(last, 16).expect("range end") + 1;
            let remap = match words.next() {
                Some(at) => u64::from_str_radix(at.trim_start_matches('@'), 16).expect("offset"),
                None => start,
            };
            ranges.push(MemoryRange {
                start,
                size: end - start,
                remap,
            });
        }
        MemoryMap::new(ranges).expect("QEMU's RAM ranges")
    }

    /// The modules the guest loaded, as its `/proc/modules` listed them.
    pub fn modules(&self) -> &[oracle::GuestModule] {
        &self.oracle().modules
    }

    /// The guest's RAM size.
    pub fn memory(&self) -> GuestMemory {
        self.options.memory
    }

    /// How the guest was booted.
    pub fn options(&self) -> GuestOptions {
        self.options
    }

    /// What the guest's `/proc` said at boot.
    pub fn oracle(&self) -> &Oracle {
        self.oracle.as_ref().expect("the guest is ready")
    }

    /// Every task the guest listed (threads too), by pid.
    pub fn tasks(&self) -> &[GuestTask] {
        &self.oracle().tasks
    }

    /// The processes the guest listed (thread-group leaders), by pid.
    pub fn processes(&self) -> Vec<&GuestTask> {
        self.oracle().processes().collect()
    }

    /// `/proc/PID/maps` of `pid`, which must be one whose maps the guest
    /// prints (pid 1, `sleep 100001`, the `leechio-args` shell and the
    /// pattern process).
    pub fn maps(&self, pid: u32) -> &[GuestMap] {
        let maps = &self.oracle().maps;
        maps.get(&pid).unwrap_or_else(|| {
            panic!(
                "the guest printed no maps of pid {pid}, only of {:?}",
                maps.keys().collect::<Vec<_>>()
            )
        })
    }

    /// The address of kernel symbol `name` (per the guest's
    /// `/proc/kallsyms`); it must be one the guest prints.
    pub fn symbol(&self, name: &str) -> u64 {
        self.oracle()
            .symbol(name)
            .unwrap_or_else(|| panic!("the guest printed no symbol {name}"))
    }

    /// The kernel's `/proc/version` line.
    pub fn kernel_version(&self) -> &str {
        &self.oracle().version
    }

    /// The description of the kernel's own VMCOREINFO ELF note (its
    /// text), read by the monitor where the guest's
    /// `/sys/kernel/vmcoreinfo` says the note is.
    pub fn vmcoreinfo(&self) -> Vec<u8> {
        let (pa, room) = self
            .oracle()
            .vmcoreinfo_note
            .expect("the guest's kernel has /sys/kernel/vmcoreinfo");
        let note = self.pmemsave(pa, room);
        let word = |at: usize| u32::from_le_bytes(note[at..at + 4].try_into().unwrap()) as usize;
        let (namesz, descsz) = (word(0), word(4));
        assert_eq!(&note[12..12 + namesz], b"VMCOREINFO\0", "the note's owner");
        let desc = 12 + namesz.next_multiple_of(4);
        note[desc..desc + descsz].to_vec()
    }

    /// The process whose memory holds the known pattern, and where.
    pub fn pattern(&self) -> PatternProcess {
        self.oracle().pattern
    }

    /// The direct map's base: the value of the kernel's `page_offset_base`,
    /// read through the monitor (the guest itself cannot read it).
    pub fn page_offset_base(&self) -> u64 {
        let va = self.symbol("page_offset_base");
        self.x(va, 1).expect("page_offset_base is readable")[0]
    }

    /// The guest's RAM file, `/dev/shm/<name>`.
    pub fn shm_path(&self) -> &Path {
        &self.shm
    }

    /// QEMU's process id.
    pub fn qemu_pid(&self) -> u32 {
        self.qemu_pid
    }

    /// Virtual address of the kernel's `_text`.
    pub fn kernel_text(&self) -> u64 {
        self.kernel_text
    }

    /// Virtual address of the kernel's own top-level page table
    /// (`init_top_pgt`).
    pub fn init_top_pgt(&self) -> u64 {
        self.init_top_pgt
    }

    /// Physical address of the kernel's own top-level page table: the value
    /// the kernel loads into CR3 during boot (per the monitor's translation).
    pub fn kernel_dtb(&self) -> u64 {
        self.kernel_dtb
    }

    /// Everything the guest printed to its serial console so far.
    pub fn serial_log(&self) -> String {
        std::fs::read(&self.serial)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Runs a human monitor command and returns its text.
    pub fn hmp(&self, command: &str) -> String {
        let reply = self.qmp("human-monitor-command", json!({ "command-line": command }));
        reply
            .as_str()
            .unwrap_or_else(|| panic!("`{command}` gave {reply}"))
            .replace("\r\n", "\n")
    }

    /// Runs a QMP command and returns its `return` value; panics on error.
    pub fn qmp(&self, command: &str, arguments: Value) -> Value {
        let mut monitor = self.monitor.lock().unwrap_or_else(|e| e.into_inner());
        let qmp = monitor.as_mut().expect("monitor not connected");
        qmp.execute(command, arguments)
            .unwrap_or_else(|e| panic!("QMP `{command}` on guest {}: {e}", self.name))
    }

    /// The monitor's `info registers`.
    pub fn info_registers(&self) -> String {
        self.hmp("info registers")
    }

    /// CR3 of the (only) CPU.
    pub fn cr3(&self) -> u64 {
        self.register("CR3")
    }

    /// The paging mode the CPU runs in, per CR4.LA57 (bit 12).
    pub fn paging(&self) -> leechio::Paging {
        match self.register("CR4") & 1 << 12 {
            0 => leechio::Paging::FourLevel,
            _ => leechio::Paging::FiveLevel,
        }
    }

    /// A register of `info registers`, e.g. `CR3`.
    fn register(&self, name: &str) -> u64 {
        let regs = self.info_registers();
        let key = format!("{name}=");
        let at = regs
            .find(&key)
            .unwrap_or_else(|| panic!("no {name} in info registers"));
        let hex: String = regs[at + key.len()..]
            .chars()
            .take_while(|c| c.is_ascii_hexdigit())
            .collect();
        u64::from_str_radix(&hex, 16).unwrap_or_else(|_| panic!("{name} value"))
    }

    /// `n` qwords of guest physical memory at `pa`, by the monitor's `xp`.
    pub fn xp(&self, pa: u64, n: usize) -> Vec<u64> {
        let text = self.hmp(&format!("xp /{n}gx {pa:#x}"));
        parse_dump(&text, pa, n).unwrap_or_else(|| panic!("xp at {pa:#x}: {text:?}"))
    }

    /// The monitor's own walk of `va` from the table at `dtb`, in the
    /// CPU's paging mode: the entry read at each level (per `xp`; by
    /// level, 0 = PML5E to 4 = PTE, `None` above a 4-level walk's top and
    /// below where it ended), and the physical address and page size when
    /// it is mapped.
    pub fn xp_walk(
        &self,
        dtb: u64,
        va: u64,
    ) -> (
        [Option<u64>; leechio::vm::LEVELS],
        Option<(u64, leechio::PageSize)>,
    ) {
        use leechio::PageSize;
        const ADDRESS: u64 = 0x000f_ffff_ffff_f000;
        let mut entries = [None; leechio::vm::LEVELS];
        let mut table = dtb & ADDRESS;
        let top = self.paging().top_level();
        for (level, slot) in entries.iter_mut().enumerate().skip(top) {
            let index = (va >> (48 - 9 * level)) & 0x1ff;
            let e = self.xp(table + index * 8, 1)[0];
            *slot = Some(e);
            if e & 1 == 0 {
                return (entries, None);
            }
            let size = match level {
                2 if e & 0x80 != 0 => PageSize::Size1G,
                3 if e & 0x80 != 0 => PageSize::Size2M,
                4 => PageSize::Size4K,
                _ => {
                    table = e & ADDRESS;
                    continue;
                }
            };
            let base = e & ADDRESS & !(size.bytes() - 1);
            return (entries, Some((base + (va & (size.bytes() - 1)), size)));
        }
        unreachable!("a PTE ends every walk")
    }

    /// `n` qwords of guest virtual memory at `va` (through the CPU's CR3),
    /// by the monitor's `x`; `None` when the monitor cannot read it.
    pub fn x(&self, va: u64, n: usize) -> Option<Vec<u64>> {
        let text = self.hmp(&format!("x /{n}gx {va:#x}"));
        parse_dump(&text, va, n)
    }

    /// The monitor's translation of `va` through the CPU's CR3: `None`
    /// where QEMU says "Unmapped"; any other answer but a `gpa:` panics.
    pub fn gva2gpa(&self, va: u64) -> Option<u64> {
        let text = self.hmp(&format!("gva2gpa {va:#x}"));
        let text = text.trim();
        if text == "Unmapped" {
            return None;
        }
        // "gpa: 0x1000", but "gpa: 0" for address zero (C's `%#x`).
        let value = text
            .strip_prefix("gpa: ")
            .unwrap_or_else(|| panic!("gva2gpa {va:#x}: {text:?}"));
        let hex = value.strip_prefix("0x").unwrap_or(value);
        Some(u64::from_str_radix(hex, 16).unwrap_or_else(|_| panic!("gva2gpa {va:#x}: {text:?}")))
    }

    /// `size` bytes of guest physical memory at `pa`, by QMP `pmemsave`.
    pub fn pmemsave(&self, pa: u64, size: u64) -> Vec<u8> {
        let file = self.dir.join(format!(
            "pmemsave-{}",
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        self.qmp(
            "pmemsave",
            json!({ "val": pa, "size": size, "filename": file.to_str().unwrap() }),
        );
        let bytes = std::fs::read(&file).expect("pmemsave file");
        let _ = std::fs::remove_file(&file);
        assert_eq!(bytes.len() as u64, size, "pmemsave at {pa:#x}");
        bytes
    }

    /// Pauses the guest's CPU (QMP `stop`) until the returned guard drops:
    /// its memory does not change meanwhile.
    pub fn pause(&self) -> Paused<'_> {
        self.qmp("stop", json!({}));
        Paused(self)
    }

    /// Whether QEMU's process still runs.
    pub fn is_alive(&self) -> bool {
        process_alive(self.qemu_pid)
    }

    /// Kills QEMU (SIGKILL) and waits until it is gone. The guest's RAM
    /// file and folder are removed by the script (which sees QEMU exit).
    pub fn kill(&self) {
        // Drop the monitor first: its socket dies with QEMU.
        *self.monitor.lock().unwrap_or_else(|e| e.into_inner()) = None;
        kill_process(self.qemu_pid);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while process_alive(self.qemu_pid) {
            assert!(Instant::now() < deadline, "QEMU survived SIGKILL");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Opens LeechCore on a device string, with the reason on failure. One
/// open at a time in this process: opening the qemu device talks to the
/// guest's QMP socket, which serves one client at a time, and the device
/// refuses a guest whose QMP has not greeted within 5 s; two tests opening
/// a shared guest at once on a loaded machine could be refused so (seen
/// in `make unit`). An open takes about a second.
pub fn open_device(device: &str) -> LeechCore {
    static OPENING: Mutex<()> = Mutex::new(());
    print_warnings();
    let _one = OPENING.lock().unwrap_or_else(|e| e.into_inner());
    LeechCore::open(&DeviceConfig::new(device))
        .unwrap_or_else(|e| panic!("LeechCore cannot open {device}: {e}"))
}

/// Prints the library's warnings (a memory map it had to fix or could not
/// check, say) where libtest shows them: in the output of a failed test.
fn print_warnings() {
    struct Print;
    impl log::Log for Print {
        fn enabled(&self, metadata: &log::Metadata) -> bool {
            metadata.level() <= log::Level::Warn
        }
        fn log(&self, record: &log::Record) {
            if self.enabled(record.metadata()) {
                eprintln!("{}: {}", record.level(), record.args());
            }
        }
        fn flush(&self) {}
    }
    // Another logger already set is as good.
    if log::set_logger(&Print).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
}

/// The guest resumes when this drops (QMP `cont`), panic or not.
pub struct Paused<'g>(&'g Guest);

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        if self.0.is_alive() {
            let mut monitor = self.0.monitor.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(qmp) = monitor.as_mut() {
                let _ = qmp.execute("cont", json!({}));
            }
        }
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        *self.monitor.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
        // Ask the script to stop, then close its input (either suffices).
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"stop\n");
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match self.script.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() >= deadline => {
                    // SIGKILL; QEMU then gets its parent-death signal.
                    let _ = self.script.kill();
                    let _ = self.script.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        if self.qemu_pid != 0 && process_alive(self.qemu_pid) {
            kill_process(self.qemu_pid);
        }
        let _ = std::fs::remove_file(&self.shm);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One guest for all tests of a test binary that can share it, booted on
/// first use; the guard gives one test at a time the guest (and its
/// LeechCore socket). Never dropped: it stops when the test process ends
/// and the guest script sees its input close.
pub fn shared_guest() -> SharedGuest {
    static GUEST: OnceLock<(Guest, Mutex<()>)> = OnceLock::new();
    let (guest, lock) = GUEST.get_or_init(|| (Guest::start(GuestMemory::Mib256), Mutex::new(())));
    SharedGuest {
        _turn: lock.lock().unwrap_or_else(|e| e.into_inner()),
        guest,
    }
}

/// Like [`shared_guest`], a second guest for the tests of 5-level paging:
/// a CPU with LA57 (`-cpu max`) and KASLR on. Its mode is checked on boot.
pub fn shared_la57_guest() -> SharedGuest {
    static GUEST: OnceLock<(Guest, Mutex<()>)> = OnceLock::new();
    let (guest, lock) = GUEST.get_or_init(|| {
        let guest = Guest::start_with(GuestOptions {
            kaslr: true,
            la57: true,
            ..GuestOptions::default()
        });
        assert_eq!(
            guest.paging(),
            leechio::Paging::FiveLevel,
            "CR4.LA57 is off"
        );
        (guest, Mutex::new(()))
    });
    SharedGuest {
        _turn: lock.lock().unwrap_or_else(|e| e.into_inner()),
        guest,
    }
}

/// The shared guest, held by one test.
pub struct SharedGuest {
    _turn: MutexGuard<'static, ()>,
    guest: &'static Guest,
}

impl std::ops::Deref for SharedGuest {
    type Target = Guest;

    fn deref(&self) -> &Guest {
        self.guest
    }
}

/// Waits (30 s at most) until the guest's script has removed its RAM file.
pub fn wait_until_removed(shm: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while shm.exists() {
        assert!(
            Instant::now() < deadline,
            "{} outlived its guest",
            shm.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` exists and is not a zombie.
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "pid (comm) STATE ...": the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// SIGKILL to `pid`, if it is a QEMU (guards against a reused pid).
fn kill_process(pid: u32) {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if comm.starts_with("qemu-system") {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
}
