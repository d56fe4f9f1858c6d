//! What the guest's `/init` says about itself, read from `/proc` inside the
//! guest and printed to its serial log before `ready` (the format is in
//! `scripts/guest.sh`, "What the guest prints"): the independent answer a
//! walk of the guest's memory is checked against.
//!
//! It is a snapshot taken at boot. The user processes it lists run for
//! ever, but kernel threads come and go (`kworker/*`), so a later walk may
//! find a few that are not here, or miss a few that are.

use std::collections::BTreeMap;
use std::ops::Range;

pub mod cache;
pub mod integrity;
pub mod network;
pub mod system;
use network::GuestNetwork;
use system::GuestSystem;

/// The prefix of every oracle line.
const TAG: &str = "leechio-oracle: ";

/// One task (a thread; a process is the task whose `pid == tgid`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestTask {
    pub pid: u32,
    pub tgid: u32,
    pub ppid: u32,
    /// The state letter of `/proc/PID/stat` (R, S, D, T, Z, I, ...).
    pub state: char,
    /// `PF_KTHREAD` in the task's flags.
    pub kernel_thread: bool,
    /// `task_struct.comm` as the kernel keeps it, from the first line of
    /// `/proc/PID/task/TID/sched`. (`/proc/PID/comm`, `stat` and `status`
    /// show more for kernel threads: a long name in full,
    /// `rcu_tasks_rude_kthread` where `comm` keeps `rcu_tasks_rude_`, and a
    /// workqueue worker's last work, `kworker/0:1-events`, or a rescuer's
    /// whole queue name, `kworker/R-kvfree_rcu_reclaim` for
    /// `kworker/R-kvfre` on 6.12.)
    pub comm: String,
    /// The arguments: `/proc/PID/cmdline` split at its NULs (empty for
    /// kernel threads and zombies).
    pub cmdline: Vec<String>,
    /// `/proc/PID/cmdline` as it is: the bytes between the process's
    /// `arg_start` and `arg_end`, each argument ending in a NUL.
    pub cmdline_bytes: Vec<u8>,
    /// `/proc/PID/status`' Uid and Gid lines: real, effective, saved and
    /// file-system ids.
    pub uid: [u32; 4],
    pub gid: [u32; 4],
    /// Its CapInh, CapPrm, CapEff, CapBnd and CapAmb.
    pub caps: [u64; 5],
    /// `/proc/PID/stat`'s start time: clock ticks (1/100 s) since boot.
    pub start_ticks: u64,
    /// `/proc/PID/environ` (empty for kernel threads).
    pub environ: Vec<u8>,
}

impl GuestTask {
    /// Whether this task leads its thread group (what `ps` lists).
    pub fn is_process(&self) -> bool {
        self.pid == self.tgid
    }

    /// `/proc/PID/environ`'s variables: split at the NUL that ends each.
    pub fn environment(&self) -> Vec<String> {
        let bytes = self.environ.strip_suffix(b"\0").unwrap_or(&self.environ);
        match bytes.is_empty() {
            true => Vec::new(),
            false => bytes
                .split(|&b| b == 0)
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .collect(),
        }
    }
}

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestMap {
    pub start: u64,
    pub end: u64,
    /// `rwxp` / `rw-s` and so on.
    pub perms: String,
    /// Offset in the mapped file, in bytes.
    pub offset: u64,
    /// `major:minor` of the file's device.
    pub device: String,
    pub inode: u64,
    /// The file's path, `[heap]`-like names, or empty for anonymous memory.
    pub path: String,
}

/// The pattern process (`scripts/guest-pattern.c`): at each 8-byte virtual
/// address `va` of `start..end` it holds `pattern_word(va)` (little
/// endian); the first half is a `rw-p` VMA, the second a `r--p` one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatternProcess {
    pub pid: u32,
    pub start: u64,
    pub end: u64,
}

impl PatternProcess {
    /// The read-write half and the read-only half.
    pub fn halves(&self) -> [Range<u64>; 2] {
        let mid = self.start + (self.end - self.start) / 2;
        [self.start..mid, mid..self.end]
    }

    /// The bytes the process holds at `va..va + len` (8-aligned `va`).
    pub fn bytes(&self, va: u64, len: usize) -> Vec<u8> {
        assert_eq!(va % 8, 0, "pattern bytes from an unaligned address");
        (va..)
            .step_by(8)
            .flat_map(|word| crate::common::pattern_word(word).to_le_bytes())
            .take(len)
            .collect()
    }
}

/// The exit status of the pattern process's zombie child
/// (`scripts/guest-pattern.c`).
pub const ZOMBIE_EXIT_STATUS: i32 = 42;

/// The symbols the guest prints that its modules export (the rest are
/// the kernel image's).
pub const MODULE_SYMBOLS: [&str; 2] = ["crc7_be", "crc_itu_t"];

/// One line of `/proc/modules`: `NAME SIZE REFS DEPS STATE ADDRESS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestModule {
    pub name: String,
    pub size: u64,
    /// `Live`, `Loading` or `Unloading`.
    pub state: String,
    /// The base of its code.
    pub address: u64,
}

/// One open fd: `/proc/PID/fdinfo/FD` and `readlink /proc/PID/fd/FD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestFd {
    pub pid: u32,
    pub fd: u32,
    /// `pos:`.
    pub pos: i64,
    /// `flags:` (printed in octal).
    pub flags: u32,
    /// `ino:`; `None` on kernels whose fdinfo has none.
    pub inode: Option<u64>,
    /// What the link names: a path, `socket:[INO]`, `pipe:[INO]`...
    pub name: String,
}

/// One `/proc/kallsyms` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestSymbol {
    pub name: String,
    pub address: u64,
    /// `T`, `D`, `R`...
    pub kind: char,
}

/// Everything the guest printed about itself.
#[derive(Debug, Clone)]
pub struct Oracle {
    /// `/proc/version`.
    pub version: String,
    /// `/proc/cmdline`.
    pub kernel_cmdline: String,
    /// Size of `/sys/kernel/btf/vmlinux`; `None` for a kernel without BTF.
    pub btf_size: Option<u64>,
    /// `/sys/kernel/vmcoreinfo`: the physical address of the kernel's own
    /// VMCOREINFO ELF note and the room it has; `None` for a kernel
    /// without crash support.
    pub vmcoreinfo_note: Option<(u64, u64)>,
    pub symbols: Vec<GuestSymbol>,
    /// Every task, by pid.
    pub tasks: Vec<GuestTask>,
    /// `/proc/PID/maps` of a few processes, by pid.
    pub maps: BTreeMap<u32, Vec<GuestMap>>,
    pub pattern: PatternProcess,
    /// `/proc/modules`, in its order.
    pub modules: Vec<GuestModule>,
    /// Every open fd of every process (but `guest.sh --processes`' extra
    /// ones), by pid and fd.
    pub fds: Vec<GuestFd>,
    /// The kernel's names, clocks and log.
    pub system: GuestSystem,
    /// Its sockets and network devices.
    pub network: GuestNetwork,
    /// The files `/init` left in the page cache.
    pub cached_files: Vec<cache::GuestCachedFile>,
    /// Its modules' taint and parameters, and its kernel's taint.
    pub integrity: integrity::GuestIntegrity,
}

impl Oracle {
    /// The open fds of process `pid`, by fd.
    pub fn fds_of(&self, pid: u32) -> impl Iterator<Item = &GuestFd> {
        self.fds.iter().filter(move |f| f.pid == pid)
    }

    /// Reads the oracle lines of a serial log. Fails, naming the line, on a
    /// line it cannot read, a missing item, an `error` line from the guest,
    /// or counts that disagree with the end line (a lost line).
    pub fn parse(log: &str) -> Result<Oracle, String> {
        let mut items = Items::default();
        for line in log.lines() {
            let Some(item) = line.trim_end_matches('\r').strip_prefix(TAG) else {
                continue;
            };
            if let Some(message) = item.strip_prefix("error ") {
                return Err(format!("the guest says: {message}"));
            }
            items
                .add(item)
                .map_err(|why| format!("oracle line {line:?}: {why}"))?;
        }
        items.finish()
    }

    /// The address of kernel symbol `name`, if the guest printed it.
    pub fn symbol(&self, name: &str) -> Option<u64> {
        self.symbols
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.address)
    }

    /// The task with pid `pid`.
    pub fn task(&self, pid: u32) -> Option<&GuestTask> {
        self.tasks
            .binary_search_by_key(&pid, |t| t.pid)
            .ok()
            .map(|at| &self.tasks[at])
    }

    /// The processes (thread-group leaders), by pid.
    pub fn processes(&self) -> impl Iterator<Item = &GuestTask> {
        self.tasks.iter().filter(|t| t.is_process())
    }
}

/// The oracle's items as they are read.
#[derive(Default)]
struct Items {
    version: Option<String>,
    kernel_cmdline: Option<String>,
    btf_size: Option<Option<u64>>,
    vmcoreinfo_note: Option<Option<(u64, u64)>>,
    pattern: Option<PatternProcess>,
    symbols: Vec<GuestSymbol>,
    tasks: Vec<GuestTask>,
    maps: BTreeMap<u32, Vec<GuestMap>>,
    map_lines: usize,
    modules: Vec<GuestModule>,
    fds: Vec<GuestFd>,
    system: system::SystemItems,
    network: network::NetworkItems,
    cache: cache::CacheItems,
    integrity: integrity::IntegrityItems,
    /// The counts of the end line: tasks, map lines, symbols, modules, fds
    /// (the last two 0 when the line has none).
    end: Option<[usize; 5]>,
}

impl Items {
    /// One line, without its tag.
    fn add(&mut self, item: &str) -> Result<(), String> {
        if self.end.is_some() {
            return Err("after the end line".into());
        }
        let (kind, rest) = item.split_once(' ').unwrap_or((item, ""));
        match kind {
            "version" => set_once(&mut self.version, rest.to_string()),
            "cmdline" => set_once(&mut self.kernel_cmdline, rest.to_string()),
            "btf" => {
                let size = match rest {
                    "none" => None,
                    size => Some(size.parse().map_err(|_| "btf size")?),
                };
                set_once(&mut self.btf_size, size)
            }
            "vmcoreinfo" => {
                let note = match rest.split_whitespace().collect::<Vec<_>>()[..] {
                    ["none"] => None,
                    [address, size] => {
                        let hex = |s: &str| {
                            u64::from_str_radix(s.trim_start_matches("0x"), 16)
                                .map_err(|_| format!("vmcoreinfo: not hex: {s:?}"))
                        };
                        Some((hex(address)?, hex(size)?))
                    }
                    _ => return Err("vmcoreinfo is not ADDRESS SIZE".into()),
                };
                set_once(&mut self.vmcoreinfo_note, note)
            }
            "pattern" => {
                let fields = Fields::new(rest);
                let pattern = PatternProcess {
                    pid: fields.decimal("pid")?,
                    start: fields.hex("start")?,
                    end: fields.hex("end")?,
                };
                set_once(&mut self.pattern, pattern)
            }
            "symbol" => {
                self.symbols.push(parse_symbol(rest)?);
                Ok(())
            }
            "task" => {
                self.tasks.push(parse_task(rest)?);
                Ok(())
            }
            "map" => {
                let (pid, map) = rest.split_once(' ').ok_or("no map")?;
                let pid = pid.parse().map_err(|_| "map pid")?;
                self.maps.entry(pid).or_default().push(parse_map(map)?);
                self.map_lines += 1;
                Ok(())
            }
            "module" => {
                self.modules.push(parse_module(rest)?);
                Ok(())
            }
            "fd" => {
                self.fds.push(parse_fd(rest)?);
                Ok(())
            }
            "uname" | "btime" | "clock" | "dmesg" | "dmesg-end" => self.system.add(kind, rest),
            "socket" | "iface" | "inet" | "inet6" | "net-end" => self.network.add(kind, rest),
            "cache" | "cache-end" => self.cache.add(kind, rest),
            "tainted" | "module-taint" | "param" | "parmtype" | "param-given" | "integrity-end" => {
                self.integrity.add(kind, rest)
            }
            "end" => {
                let fields = Fields::new(rest);
                let counts = [
                    fields.decimal("tasks")?,
                    fields.decimal("maps")?,
                    fields.decimal("symbols")?,
                    fields.decimal("modules").unwrap_or(0),
                    fields.decimal("fds").unwrap_or(0),
                ];
                set_once(&mut self.end, counts)
            }
            _ => Err("unknown kind".into()),
        }
    }

    /// The oracle, once every item came and the counts agree.
    fn finish(mut self) -> Result<Oracle, String> {
        let end = self.end.ok_or("no oracle end line in the serial log")?;
        let counted = [
            self.tasks.len(),
            self.map_lines,
            self.symbols.len(),
            self.modules.len(),
            self.fds.len(),
        ];
        if counted != end {
            return Err(format!(
                "the guest printed {end:?} tasks, map lines, symbols, modules and fds; {counted:?} read"
            ));
        }
        self.fds.sort_by_key(|f| (f.pid, f.fd));
        self.tasks.sort_by_key(|t| t.pid);
        if let Some(pair) = self.tasks.windows(2).find(|p| p[0].pid == p[1].pid) {
            return Err(format!("pid {} listed twice", pair[0].pid));
        }
        Ok(Oracle {
            version: self.version.ok_or("no version line")?,
            kernel_cmdline: self.kernel_cmdline.ok_or("no kernel command line")?,
            btf_size: self.btf_size.ok_or("no btf line")?,
            vmcoreinfo_note: self.vmcoreinfo_note.ok_or("no vmcoreinfo line")?,
            symbols: self.symbols,
            tasks: self.tasks,
            maps: self.maps,
            pattern: self.pattern.ok_or("no pattern process line")?,
            modules: self.modules,
            fds: self.fds,
            system: self.system.finish()?,
            network: self.network.finish()?,
            cached_files: self.cache.finish()?,
            integrity: self.integrity.finish()?,
        })
    }
}

/// Stores `value` unless the item was given before.
fn set_once<T>(slot: &mut Option<T>, value: T) -> Result<(), String> {
    match slot.replace(value) {
        None => Ok(()),
        Some(_) => Err("given twice".into()),
    }
}

/// `key=value` words.
struct Fields<'a>(Vec<(&'a str, &'a str)>);

impl<'a> Fields<'a> {
    fn new(text: &'a str) -> Fields<'a> {
        Fields(
            text.split_whitespace()
                .filter_map(|w| w.split_once('='))
                .collect(),
        )
    }

    fn get(&self, key: &str) -> Result<&'a str, String> {
        self.0
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
            .ok_or_else(|| format!("no {key}="))
    }

    fn decimal<T: std::str::FromStr>(&self, key: &str) -> Result<T, String> {
        let value = self.get(key)?;
        value.parse().map_err(|_| format!("{key}={value}"))
    }

    fn hex(&self, key: &str) -> Result<u64, String> {
        let value = self.get(key)?;
        u64::from_str_radix(value, 16).map_err(|_| format!("{key}={value}"))
    }

    fn bytes(&self, key: &str) -> Result<Vec<u8>, String> {
        let value = self.get(key)?;
        if value.len() % 2 != 0 {
            return Err(format!("{key}: odd number of hex digits"));
        }
        (0..value.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&value[at..at + 2], 16))
            .collect::<Result<_, _>>()
            .map_err(|_| format!("{key}: not hex"))
    }
}

/// `NAME SIZE REFS DEPS STATE 0xADDRESS` (and taint flags after).
fn parse_module(text: &str) -> Result<GuestModule, String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let [name, size, _refs, _deps, state, address, ..] = words[..] else {
        return Err("not NAME SIZE REFS DEPS STATE ADDRESS".into());
    };
    Ok(GuestModule {
        name: name.to_string(),
        size: size.parse().map_err(|_| "module size")?,
        state: state.to_string(),
        address: u64::from_str_radix(address.trim_start_matches("0x"), 16)
            .map_err(|_| "module address")?,
    })
}

/// `PID FD POS FLAGS INO NAME`: flags in octal, `-` for no inode, the
/// name the rest of the line.
fn parse_fd(text: &str) -> Result<GuestFd, String> {
    let mut rest = text;
    let mut words = [""; 5];
    for word in &mut words {
        (*word, rest) = rest
            .split_once(' ')
            .ok_or("not PID FD POS FLAGS INO NAME")?;
    }
    let [pid, fd, pos, flags, inode] = words;
    Ok(GuestFd {
        pid: pid.parse().map_err(|_| format!("fd pid {pid:?}"))?,
        fd: fd.parse().map_err(|_| format!("fd {fd:?}"))?,
        pos: pos.parse().map_err(|_| format!("fd pos {pos:?}"))?,
        flags: u32::from_str_radix(flags, 8).map_err(|_| format!("fd flags {flags:?}"))?,
        inode: match inode {
            "-" => None,
            n => Some(n.parse().map_err(|_| format!("fd inode {n:?}"))?),
        },
        name: rest.to_string(),
    })
}

/// `pid=N tgid=N ppid=N state=C kthread=0|1 sched=HEX cmdline=HEX`
fn parse_task(text: &str) -> Result<GuestTask, String> {
    let fields = Fields::new(text);
    let pid = fields.decimal("pid")?;
    let mut state = fields.get("state")?.chars();
    let (Some(state), None) = (state.next(), state.next()) else {
        return Err("state is not one letter".into());
    };
    let kernel_thread = match fields.get("kthread")? {
        "0" => false,
        "1" => true,
        other => return Err(format!("kthread={other}")),
    };
    let comm = sched_comm(&fields.bytes("sched")?, pid)?;
    let cmdline_bytes = fields.bytes("cmdline")?;
    // Each argument ends in a NUL; a process may have overwritten the last.
    let args = cmdline_bytes.strip_suffix(b"\0").unwrap_or(&cmdline_bytes);
    let cmdline = if cmdline_bytes.is_empty() {
        Vec::new()
    } else {
        args.split(|&b| b == 0)
            .map(|arg| String::from_utf8_lossy(arg).into_owned())
            .collect()
    };
    let list = |key: &str| -> Result<Vec<u64>, String> {
        let value = fields.get(key)?;
        let radix = if key == "caps" { 16 } else { 10 };
        value
            .split(',')
            .map(|v| u64::from_str_radix(v, radix).map_err(|_| format!("{key}={value}")))
            .collect()
    };
    let ids = |key: &str| -> Result<[u32; 4], String> {
        let v = list(key)?;
        let v: Vec<u32> = v.into_iter().map(|id| id as u32).collect();
        v.try_into().map_err(|_| format!("{key}: not four ids"))
    };
    let caps: [u64; 5] = list("caps")?
        .try_into()
        .map_err(|_| "caps: not five sets".to_string())?;
    Ok(GuestTask {
        uid: ids("uid")?,
        gid: ids("gid")?,
        caps,
        start_ticks: fields.decimal("start")?,
        environ: fields.bytes("environ")?,
        pid,
        tgid: fields.decimal("tgid")?,
        ppid: fields.decimal("ppid")?,
        state,
        kernel_thread,
        comm,
        cmdline,
        cmdline_bytes,
    })
}

/// The comm of task `pid` from the start of its `sched` file, whose first
/// line is `COMM (PID, #threads: N)` (the kernel's `proc_sched_show_task`);
/// the comm itself may hold spaces and parentheses.
fn sched_comm(sched: &[u8], pid: u32) -> Result<String, String> {
    let line = sched
        .split(|&b| b == b'\n')
        .next()
        .filter(|line| line.len() < sched.len())
        .ok_or("sched: no whole first line")?;
    let line = std::str::from_utf8(line).map_err(|_| "sched: comm is not UTF-8")?;
    let tail = format!(" ({pid}, #threads: ");
    let (comm, count) = line
        .rsplit_once(&tail)
        .ok_or_else(|| format!("sched: {line:?} does not end in \"{tail}N)\""))?;
    match count.strip_suffix(')') {
        Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => Ok(comm.to_string()),
        _ => Err(format!("sched: {line:?} does not end in \"{tail}N)\"")),
    }
}

/// `NAME HEX TYPE`
fn parse_symbol(text: &str) -> Result<GuestSymbol, String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let [name, address, kind] = words[..] else {
        return Err("not NAME ADDRESS TYPE".into());
    };
    let mut kind = kind.chars();
    let (Some(kind), None) = (kind.next(), kind.next()) else {
        return Err("symbol type is not one letter".into());
    };
    Ok(GuestSymbol {
        name: name.to_string(),
        address: u64::from_str_radix(address, 16).map_err(|_| "symbol address")?,
        kind,
    })
}

/// `START-END PERMS OFFSET MAJOR:MINOR INODE [PATH]`; the path is the rest
/// of the line after the padding.
fn parse_map(line: &str) -> Result<GuestMap, String> {
    let mut rest = line;
    let mut words = [""; 5];
    for word in &mut words {
        let (w, tail) = rest
            .trim_start_matches(' ')
            .split_once(' ')
            .unwrap_or((rest.trim_start_matches(' '), ""));
        *word = w;
        rest = tail;
    }
    let [span, perms, offset, device, inode] = words;
    let (start, end) = span.split_once('-').ok_or("no START-END")?;
    let hex = |s: &str| u64::from_str_radix(s, 16).map_err(|_| format!("not hex: {s:?}"));
    Ok(GuestMap {
        start: hex(start)?,
        end: hex(end)?,
        perms: perms.to_string(),
        offset: hex(offset)?,
        device: device.to_string(),
        inode: inode.parse().map_err(|_| format!("inode {inode:?}"))?,
        path: rest.trim_start_matches(' ').to_string(),
    })
}
