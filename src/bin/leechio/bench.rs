//! `leechio bench`: the same workloads on one device through LeechCore
//! called directly with ideal batches (the limit), the engine, the memflow
//! plugin, and memflow's own synchronous stack. Device calls are counted
//! by LeechCore itself; times are the median of several runs.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use leechio::join_all;
use memflow::architecture::x86::x64;
use memflow::cglue::CTup2;
use memflow::plugins::{Args as PluginArgs, ConnectorMiddlewareArgs};
use memflow::prelude::v1::{
    Address, ConnectorArgs, ConnectorInstanceArcBox, Inventory, MemoryView, PhysicalMemory,
    ReadData, VirtualDma,
};
use serde_json::json;

use super::numbers::parse_number;
use super::signals;
use super::undo::Undo;
use super::Failure;
use leechio::vm::{find_address_spaces, Mapping};
use leechio::{AddressSpace, Call, DeviceConfig, LeechCore, Memory, MemoryMap, ScatterEntry};

#[derive(Args)]
pub struct BenchArgs {
    /// Page-table root (CR3) of the kernel for the virtual workloads
    /// (default: the first root `leechio spaces` lists)
    #[arg(long, value_parser = parse_number)]
    dtb: Option<u64>,
    /// Runs per measurement; the median is shown
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Physical address of 2 MiB the pointer-chain workload may overwrite
    /// (restored afterwards); without it the chains are skipped
    #[arg(long, value_parser = parse_number)]
    chains_at: Option<u64>,
    /// Where the 2 MiB are saved before the chains overwrite them, for
    /// `leechio restore` if leechio is killed (default:
    /// leechio-chains-ADDRESS.undo in the current folder)
    #[arg(long, requires = "chains_at")]
    undo_file: Option<PathBuf>,
    /// Folder holding libmemflow_leechcore.so (default: this build's
    /// target/release, then ~/.local/lib/memflow)
    #[arg(long)]
    plugins: Option<PathBuf>,
    /// Print a Markdown table
    #[arg(long)]
    markdown: bool,
}

const READS: usize = 4096;
const CHAINS: usize = 64;
const DEPTH: usize = 8;
const DUMP: u64 = 64 << 20;

/// One measured row.
struct Row {
    workload: String,
    method: &'static str,
    calls: u64,
    time: Duration,
    bytes: u64,
    /// Its reads against a direct LeechCore read of the same addresses
    /// (`None`: not checked).
    verdict: Option<Verdict>,
}

/// How a row's reads compare with the [`Reference`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Verdict {
    /// Reads compared.
    checked: usize,
    /// Of those, reads whose bytes are not the memory's.
    wrong: usize,
    /// Reads left out: their memory changed between the two direct reads
    /// (a live target at work), and the row's bytes match neither.
    changing: usize,
}

/// What each read of a workload must return: its physical address and
/// its bytes, read once straight through LeechCore before any row ran
/// (`None` where the translation or the read failed).
struct Reference {
    len: usize,
    reads: Vec<Option<(u64, Vec<u8>)>>,
}

impl Reference {
    /// Reads `len` bytes (legal scatter entries) at each of `pas`.
    fn read(device: &LeechCore, pas: &[Option<u64>], len: usize) -> Self {
        let found: Vec<u64> = pas.iter().flatten().copied().collect();
        let mut bytes = direct_reads(device, &found, len).into_iter();
        let reads = pas
            .iter()
            .map(|pa| pa.and_then(|pa| Some((pa, bytes.next().flatten()?))))
            .collect();
        Reference { len, reads }
    }

    /// Compares `got`, a row's reads in order, with the reference. A read
    /// that differs is read again through `reread` (addresses, length):
    /// a live target's memory changes, so it is wrong only if it is not
    /// what the memory holds now either, and that memory did not change.
    fn judge<'a>(
        &self,
        got: impl Iterator<Item = &'a [u8]>,
        reread: impl FnOnce(&[u64], usize) -> Vec<Option<Vec<u8>>>,
    ) -> Verdict {
        let mut verdict = Verdict::default();
        let mut differing = Vec::new();
        for (got, want) in got.zip(&self.reads) {
            if let Some((pa, want)) = want {
                verdict.checked += 1;
                if got != want.as_slice() {
                    differing.push((*pa, want, got));
                }
            }
        }
        if differing.is_empty() {
            return verdict;
        }
        let pas: Vec<u64> = differing.iter().map(|d| d.0).collect();
        for ((_, before, got), now) in differing.iter().zip(reread(&pas, self.len)) {
            match now {
                Some(now) if now.as_slice() == *got => {}
                Some(now) if now != **before => {
                    verdict.checked -= 1;
                    verdict.changing += 1;
                }
                _ => verdict.wrong += 1,
            }
        }
        verdict
    }
}

/// What every measurement needs: how to open the device (`--device`,
/// `--remote`, `--lib`, `-v`), where the plugin is, how many runs.
struct Bench {
    device: DeviceConfig,
    plugin_dir: PathBuf,
    runs: usize,
    rows: Vec<Row>,
}

/// A memflow instance of the plugin with a LeechCore handle attached to the
/// same device context (LeechCore's `existing` device), for its counter.
struct Plugin {
    conn: ConnectorInstanceArcBox<'static>,
    counter: LeechCore,
}

impl Bench {
    /// The configuration that attaches to the device already open in this
    /// process (LeechCore's `existing`): the same `leechcore.so`, whose
    /// contexts it searches, and no remote string, with which LeechCore
    /// would not look for an open context at all.
    fn existing(&self) -> DeviceConfig {
        DeviceConfig {
            device: "existing".into(),
            remote: None,
            ..self.device.clone()
        }
    }

    /// The plugin's arguments for the options given to `leechio`: the
    /// plugin opens the device the way every other path does.
    fn plugin_args(&self) -> Result<PluginArgs, Failure> {
        let mut args = PluginArgs::new();
        if let Some(lib) = &self.device.library {
            let lib = lib.to_str().ok_or_else(|| {
                Failure(format!(
                    "--lib {}: the memflow plugin takes only UTF-8 paths",
                    lib.display()
                ))
            })?;
            args = args.insert("lib", lib);
        }
        if let Some(remote) = &self.device.remote {
            args = args.insert("remote", remote);
        }
        let level = self.device.verbosity as u8;
        if level > 0 {
            args = args.insert("verbosity", &level.to_string());
        }
        if let Some(timeout) = self.device.timeout {
            args = args.insert("timeout", &format!("{}", timeout.as_secs_f64()));
        }
        Ok(args)
    }

    /// Opens the device through the plugin, as memflow does. While it is
    /// open it is the only LeechCore context, so `existing` attaches to it.
    /// `cache` is memflow's page cache, off or on with memflow's validity.
    fn plugin(&self, cache: bool) -> Result<Plugin, Failure> {
        let middleware = ConnectorMiddlewareArgs::new().cache(cache);
        self.plugin_with(middleware)
    }

    /// The plugin with memflow's page cache trusted for an hour: a warm
    /// row stays warm although runs on an emulated board wait up to a
    /// second apart (memflow's default validity is one second).
    fn plugin_kept_warm(&self) -> Result<Plugin, Failure> {
        let middleware = ConnectorMiddlewareArgs::new()
            .cache(true)
            .cache_validity_time(3_600_000);
        self.plugin_with(middleware)
    }

    fn plugin_with(&self, middleware: ConnectorMiddlewareArgs) -> Result<Plugin, Failure> {
        let mut inventory = Inventory::empty();
        inventory.add_dir(&self.plugin_dir).map_err(|e| {
            Failure(format!(
                "loading plugins from {}: {e}",
                self.plugin_dir.display()
            ))
        })?;
        let args = ConnectorArgs {
            target: Some(self.device.device.as_str().into()),
            extra_args: self.plugin_args()?,
            middleware_args: middleware,
        };
        let conn = inventory
            .instantiate_connector("leechcore", None, Some(&args))
            .map_err(|e| {
                Failure(format!(
                    "the plugin in {} did not open {}: {e}",
                    self.plugin_dir.display(),
                    self.device.device
                ))
            })?;
        let counter = LeechCore::open(&self.existing())?;
        Ok(Plugin { conn, counter })
    }

    /// Runs `run` (which returns its own time and device calls) `runs`
    /// times and records the median time.
    fn row(
        &mut self,
        workload: &str,
        method: &'static str,
        bytes: u64,
        mut run: impl FnMut() -> Result<(Duration, u64), Failure>,
    ) -> Result<(), Failure> {
        progress(workload, method);
        let mut results = Vec::new();
        for _ in 0..self.runs {
            stop_requested()?;
            results.push(run()?);
        }
        let (time, calls) = median(results);
        self.rows.push(Row {
            workload: workload.to_string(),
            method,
            calls,
            time,
            bytes,
            verdict: None,
        });
        Ok(())
    }

    /// Records in the last row how its reads, left in `got`, compare with
    /// `reference` (see [`Reference::judge`]; `device` reads again).
    fn check_last<'a>(
        &mut self,
        got: impl Iterator<Item = &'a [u8]>,
        reference: &Reference,
        device: &LeechCore,
    ) {
        let verdict = reference.judge(got, |pas, len| direct_reads(device, pas, len));
        if let Some(row) = self.rows.last_mut() {
            row.verdict = Some(verdict);
        }
    }
}

/// The bytes at each of `addrs` (`len` each, legal scatter entries), read
/// straight through LeechCore; `None` for an address whose read failed.
fn direct_reads(device: &LeechCore, addrs: &[u64], len: usize) -> Vec<Option<Vec<u8>>> {
    let mut bufs = vec![vec![0u8; len]; addrs.len()];
    let mut entries: Vec<ScatterEntry> = addrs
        .iter()
        .zip(bufs.iter_mut())
        .map(|(&a, b)| ScatterEntry::new(a, b))
        .collect();
    device.read_scatter(&mut entries);
    let ok: Vec<bool> = entries.iter().map(|e| e.result.is_ok()).collect();
    drop(entries);
    bufs.into_iter()
        .zip(ok)
        .map(|(b, ok)| ok.then_some(b))
        .collect()
}

/// Fills every buffer with a pattern no memory is checked against, so a
/// path that writes nothing cannot pass on what the last one left.
fn poison<B: AsMut<[u8]>>(bufs: &mut [B]) {
    for b in bufs {
        b.as_mut().fill(0xa5);
    }
}

/// The median time of `runs` (the mean of the middle two for an even
/// count) and the device calls of the middle run.
fn median(mut runs: Vec<(Duration, u64)>) -> (Duration, u64) {
    runs.sort();
    let n = runs.len();
    let time = if n % 2 == 0 {
        (runs[n / 2 - 1].0 + runs[n / 2].0) / 2
    } else {
        runs[n / 2].0
    };
    (time, runs[(n - 1) / 2].1)
}

/// Says on a terminal's stderr, in one line rewritten each time, what is
/// being measured (a run on an emulated FPGA board takes minutes).
fn progress(workload: &str, method: &str) {
    if std::io::stderr().is_terminal() {
        err!("\r\x1b[2Kmeasuring: {workload} / {method}");
    }
}

/// Clears the line [`progress`] wrote.
fn progress_done() {
    if std::io::stderr().is_terminal() {
        err!("\r\x1b[2K");
    }
}

/// Times `f` and counts the scatter calls it makes on `counter`.
fn timed(counter: &LeechCore, f: impl FnOnce()) -> (Duration, u64) {
    let before = counter.call_count(Call::ReadScatter);
    let start = Instant::now();
    f();
    let elapsed = start.elapsed();
    (elapsed, counter.call_count(Call::ReadScatter) - before)
}

pub fn run(cli: &super::Cli, args: &BenchArgs) -> Result<ExitCode, Failure> {
    let device = super::device_config(cli)?;
    // LeechCore as --lib names it, checked first: through the plugin, a
    // library that does not load would only read as a device that did not
    // open.
    leechio::leechcore_sys::Library::load(device.library.as_deref())?;
    let plugin_dir = match &args.plugins {
        Some(dir) => dir.clone(),
        None => [
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/release"),
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default()
                .join(".local/lib/memflow"),
        ]
        .into_iter()
        .find(|d| d.join("libmemflow_leechcore.so").exists())
        .ok_or_else(|| {
            Failure(
                "libmemflow_leechcore.so not found: run `make plugin`, or give --plugins".into(),
            )
        })?,
    };
    let mut bench = Bench {
        device,
        plugin_dir,
        runs: args.runs.max(1),
        rows: Vec::new(),
    };
    let mut rng = fastrand::Rng::with_seed(0x1ee0);

    // From here on, a termination signal only stops the bench after the
    // run in progress, so the chains are taken out of target memory first.
    let second = match args.chains_at {
        Some(at) => format!(
            "stopped at once by a second signal: the pointer chains are still in target memory \
             at {at:#x}; `leechio restore {}` puts back what they replaced",
            undo_path(args, at).display()
        ),
        None => "stopped at once by a second signal".into(),
    };
    let catching = signals::catch_termination(Some(second))?;
    let undo = match args.chains_at {
        Some(at) => Some(write_chains(&bench.device, at, &undo_path(args, at))?),
        None => None,
    };
    // A panic unwinds to here, so the chains are taken out then too.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        stop_requested()?;
        measure_all(&mut bench, args, &mut rng)
    }));
    let restored = match &undo {
        Some(undo) => LeechCore::open(&bench.device)
            .map_err(Failure::from)
            .and_then(|device| undo.put_back(&Memory::new(device))),
        None => Ok(()),
    };
    drop(catching);
    let result = result.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    progress_done();
    // What was measured is shown even when a later workload failed.
    print_rows(&bench.rows, args.markdown, cli.json);
    restored?;
    // A signal that came during the last run ends the bench the same way.
    if let Some(sig) = signals::arrived() {
        errln!(
            "leechio: bench stopped by {}; the rows above are what was measured",
            signals::name(sig)
        );
        return Ok(signals::exit_code(sig));
    }
    result.map(|()| ExitCode::SUCCESS)
}

/// The undo file of the chains at `at`.
fn undo_path(args: &BenchArgs, at: u64) -> PathBuf {
    args.undo_file
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("leechio-chains-{at:#x}.undo")))
}

/// An error once a termination signal arrived, checked before each run.
fn stop_requested() -> Result<(), Failure> {
    match signals::arrived() {
        Some(sig) => Err(Failure(format!("stopped by {}", signals::name(sig)))),
        None => Ok(()),
    }
}

fn measure_all(
    bench: &mut Bench,
    args: &BenchArgs,
    rng: &mut fastrand::Rng,
) -> Result<(), Failure> {
    // Phase one: the plugin opens the device and the engine and the limit
    // attach to the same context, so one counter sees every path.
    let (dtb, vas, reference, target, dump_reference) = {
        let plugin = bench.plugin(false)?;
        let device = Arc::new(LeechCore::open(&bench.existing())?);
        let mem = Memory::with_config(device.clone(), Default::default());
        let map = mem.backend().memory_map();
        physical(bench, &plugin, &device, &mem, &map, rng)?;
        if let Some(at) = args.chains_at {
            chains(bench, &plugin, &device, &mem, at)?;
        }
        let dtb = match args.dtb {
            Some(d) => d,
            None => find_address_spaces(&mem, |_, _| {})
                .first()
                .map(|c| c.dtb)
                .ok_or_else(|| {
                    Failure("no page-table root found for the virtual workloads; give --dtb".into())
                })?,
        };
        let kernel = AddressSpace::new(mem.clone(), dtb);
        // Each mapped piece of RAM once: Linux's espfix area maps one page
        // 65536 times over 256 MiB, which would otherwise draw half the
        // random addresses to that one page.
        let mut seen = std::collections::HashSet::new();
        let ram: Vec<Mapping> = mem
            .block_on(kernel.mappings(0xffff_8000_0000_0000..))
            .mappings
            .into_iter()
            .filter(|m| {
                map.find(m.pa)
                    .is_some_and(|r| r.contains(m.pa + m.size - 1))
            })
            .filter(|m| seen.insert((m.pa, m.size)))
            .collect();
        if ram.is_empty() {
            return Err(Failure(format!(
                "nothing in the kernel half of {dtb:#x} maps RAM; give --dtb"
            )));
        }
        let vas = random_virtual(&ram, rng);
        let reference = virtual_reference(&device, &mem, dtb, &vas);
        engine_virtual(bench, &device, &mem, dtb, &vas, &reference)?;
        // The largest run of the kernel's mappings of RAM, up to 64 MiB.
        let m = *ram.iter().max_by_key(|m| m.size).expect("some mapping");
        let target = Mapping {
            size: m.size.min(DUMP),
            ..m
        };
        let pages: Vec<Option<u64>> = (0..target.size / 4096)
            .map(|i| Some(target.pa + i * 4096))
            .collect();
        let dump_reference = Reference::read(&device, &pages, 4096);
        engine_dump(bench, &device, &mem, dtb, target, &dump_reference)?;
        (dtb, vas, reference, target, dump_reference)
    };
    // Phase two: memflow's own stack, each run on an instance of its own
    // (now the only context, which `existing` attaches to).
    memflow_virtual(bench, dtb, &vas, &reference)?;
    memflow_dump(bench, dtb, target, &dump_reference)
}

/// A random address `align`-aligned with `len` bytes of RAM after it.
fn random_ram(rng: &mut fastrand::Rng, map: &MemoryMap, align: u64, len: u64) -> u64 {
    let fitting: Vec<_> = map
        .ranges()
        .iter()
        .filter(|r| r.size >= len + align)
        .collect();
    let total: u64 = fitting.iter().map(|r| r.size - len).sum();
    let mut off = rng.u64(0..total);
    for r in fitting {
        if off < r.size - len {
            return (r.start + off) & !(align - 1);
        }
        off -= r.size - len;
    }
    unreachable!("the offset lies in some range")
}

fn physical(
    bench: &mut Bench,
    plugin: &Plugin,
    device: &LeechCore,
    mem: &Memory,
    map: &MemoryMap,
    rng: &mut fastrand::Rng,
) -> Result<(), Failure> {
    for (workload, size, align) in [
        ("4 KiB random physical pages", 4096usize, 4096u64),
        ("8-byte random physical reads", 8, 8),
    ] {
        let addrs: Vec<u64> = (0..READS)
            .map(|_| random_ram(rng, map, align, size as u64))
            .collect();
        let bytes = (READS * size) as u64;
        let pas: Vec<Option<u64>> = addrs.iter().copied().map(Some).collect();
        let reference = Reference::read(device, &pas, size);
        let mut bufs = vec![vec![0u8; size]; READS];
        let mut batch = ideal_batch(addrs.iter().map(|&a| (a, size as u64)));
        bench.row(
            workload,
            "limit: LeechCore scatter, one batch, each page once",
            bytes,
            || {
                let mut entries = scatter_entries(&mut batch);
                Ok(timed(device, || device.read_scatter(&mut entries)))
            },
        )?;
        poison(&mut bufs);
        bench.row(workload, "engine: joined futures", bytes, || {
            Ok(timed(device, || {
                mem.block_on(join_all(
                    addrs
                        .iter()
                        .zip(bufs.iter_mut())
                        .map(|(&a, b)| mem.read(a, b)),
                ));
            }))
        })?;
        bench.check_last(bufs.iter().map(Vec::as_slice), &reference, device);
        // The same into buffers lent for a scope: the device fills them
        // directly, with no copy through the engine.
        poison(&mut bufs);
        bench.row(workload, "engine: joined futures in a scope", bytes, || {
            Ok(timed(device, || {
                mem.scope(|s| {
                    let reads = addrs.iter().zip(bufs.iter_mut());
                    mem.block_on(join_all(reads.map(|(&a, b)| s.read(a, b))));
                });
            }))
        })?;
        bench.check_last(bufs.iter().map(Vec::as_slice), &reference, device);
        let mut conn = plugin.conn.clone();
        poison(&mut bufs);
        bench.row(workload, "plugin: memflow read_raw_list", bytes, || {
            let mut list: Vec<ReadData> = addrs
                .iter()
                .zip(bufs.iter_mut())
                .map(|(&a, b)| CTup2(Address::from(a), b.as_mut_slice().into()))
                .collect();
            Ok(timed(device, || {
                let _ = conn.phys_view().read_raw_list(&mut list);
            }))
        })?;
        bench.check_last(bufs.iter().map(Vec::as_slice), &reference, device);
        poison(&mut bufs);
        bench.row(workload, "memflow: read by read", bytes, || {
            Ok(timed(device, || {
                for (&a, b) in addrs.iter().zip(bufs.iter_mut()) {
                    let _ = conn.phys_view().read_raw_into(Address::from(a), b);
                }
            }))
        })?;
        bench.check_last(bufs.iter().map(Vec::as_slice), &reference, device);
    }
    Ok(())
}

/// The fewest scatter entries that read every byte of `reads` (address and
/// length, none crossing a page): one per page, spanning that page's reads,
/// each with its buffer. What a hand-made ideal batch sends: a page wanted
/// twice is read once (the engine does the same), and LeechCore's FPGA
/// emulation charges per entry.
fn ideal_batch(reads: impl Iterator<Item = (u64, u64)>) -> Vec<(u64, Vec<u8>)> {
    let mut pages: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
    for (addr, len) in reads {
        let span = pages.entry(addr & !0xfff).or_insert((addr, addr + len));
        span.0 = span.0.min(addr);
        span.1 = span.1.max(addr + len);
    }
    pages
        .into_values()
        .map(|(start, end)| (start, vec![0u8; (end - start) as usize]))
        .collect()
}

fn scatter_entries(batch: &mut [(u64, Vec<u8>)]) -> Vec<ScatterEntry<'_>> {
    batch
        .iter_mut()
        .map(|(addr, buf)| ScatterEntry::new(*addr, buf))
        .collect()
}

/// Writes 64 chains of 8 pointers into 2 MiB at `at` (each hop on its own
/// page), after saving what was there in a new undo file at `undo`.
fn write_chains(device: &DeviceConfig, at: u64, undo: &Path) -> Result<Undo, Failure> {
    let region = (CHAINS * DEPTH * 4096) as u64;
    let mem = Memory::new(LeechCore::open(device)?);
    let mut original = vec![0u8; region as usize];
    if !mem.read_now([(at, &mut original[..])]).is_ok() {
        return Err(Failure(format!(
            "the chain region {at:#x}+{region:#x} is not all readable"
        )));
    }
    let mut chains = original.clone();
    for c in 0..CHAINS {
        for h in 0..DEPTH {
            let here = hop(at, c, h) - at;
            let next = if h + 1 < DEPTH {
                hop(at, c, h + 1)
            } else {
                END ^ c as u64
            };
            chains[here as usize..here as usize + 8].copy_from_slice(&next.to_le_bytes());
        }
    }
    let undo = Undo::save(undo, device, at, original)?;
    let wrote = mem.write_now([(at, &chains[..])]);
    if !wrote.is_ok() {
        // What did land is put back: the region is left as it was found.
        let mut landed = Vec::new();
        wrote.for_each_success(0, chains.len(), |a, b| {
            landed.push((at + a as u64, &undo.bytes()[a..b]))
        });
        let restored = landed.is_empty() || mem.write_now(landed).is_ok();
        if restored {
            undo.discard()?;
        }
        return Err(Failure(format!(
            "cannot write the chains at {at:#x}: is the device writable (file://file=…,write=1)?{}",
            if restored {
                String::new()
            } else {
                format!(
                    " Part of them landed and could not be undone; what was there is saved in {}: \
                     `leechio restore {}` puts it back",
                    undo.path().display(),
                    undo.path().display()
                )
            }
        )));
    }
    // Closing flushes what LeechCore's file device buffers.
    drop(mem);
    errln!(
        "leechio: pointer chains written at {at:#x}; what they replaced is saved in {} \
         until it is put back",
        undo.path().display()
    );
    Ok(undo)
}

/// Address of hop `h` of chain `c`.
fn hop(at: u64, c: usize, h: usize) -> u64 {
    at + ((h * CHAINS + c) * 4096 + c * 8) as u64
}

/// What the last hop of chain `c` holds, xor `c`.
const END: u64 = 0x1eec_0000_c0ff_ee00;

fn chains(
    bench: &mut Bench,
    plugin: &Plugin,
    device: &LeechCore,
    mem: &Memory,
    at: u64,
) -> Result<(), Failure> {
    let workload = "64 pointer chains of depth 8";
    let bytes = (CHAINS * DEPTH * 8) as u64;
    let check = |ends: &[u64]| {
        let ok = ends.iter().enumerate().all(|(c, &e)| e == END ^ c as u64);
        if ok {
            Ok(())
        } else {
            Err(Failure(format!("the chains at {at:#x} do not read back (a live target changed them, or writes did not land)")))
        }
    };
    let mut ends = vec![0u64; CHAINS];
    bench.row(
        workload,
        "limit: LeechCore scatter, one batch per level",
        bytes,
        || {
            let mut cur: Vec<u64> = (0..CHAINS).map(|c| hop(at, c, 0)).collect();
            let t = timed(device, || {
                for _ in 0..DEPTH {
                    let mut bufs = vec![[0u8; 8]; CHAINS];
                    let mut entries: Vec<ScatterEntry> = cur
                        .iter()
                        .zip(bufs.iter_mut())
                        .map(|(&a, b)| ScatterEntry::new(a, b))
                        .collect();
                    device.read_scatter(&mut entries);
                    drop(entries);
                    cur = bufs.iter().map(|b| u64::from_le_bytes(*b)).collect();
                }
            });
            ends.copy_from_slice(&cur);
            Ok(t)
        },
    )?;
    check(&ends)?;
    bench.row(workload, "engine: joined async chains", bytes, || {
        let t = timed(device, || {
            let got = mem.block_on(join_all((0..CHAINS).map(|c| async move {
                let mut p = hop(at, c, 0);
                for _ in 0..DEPTH {
                    p = mem.read_val::<u64>(p).await.unwrap_or(0);
                }
                p
            })));
            ends.copy_from_slice(&got);
        });
        Ok(t)
    })?;
    check(&ends)?;
    let mut conn = plugin.conn.clone();
    bench.row(workload, "memflow: read by read", bytes, || {
        Ok(timed(device, || {
            for (c, end) in ends.iter_mut().enumerate() {
                let mut p = hop(at, c, 0);
                for _ in 0..DEPTH {
                    p = conn.phys_view().read::<u64>(Address::from(p)).unwrap_or(0);
                }
                *end = p;
            }
        }))
    })?;
    check(&ends)?;
    bench.row(
        workload,
        "memflow: hand-batched, read_raw_list per level",
        bytes,
        || {
            let mut cur: Vec<u64> = (0..CHAINS).map(|c| hop(at, c, 0)).collect();
            let t = timed(device, || {
                for _ in 0..DEPTH {
                    let mut bufs = vec![[0u8; 8]; CHAINS];
                    let mut list: Vec<ReadData> = cur
                        .iter()
                        .zip(bufs.iter_mut())
                        .map(|(&a, b)| CTup2(Address::from(a), b.as_mut_slice().into()))
                        .collect();
                    let _ = conn.phys_view().read_raw_list(&mut list);
                    drop(list);
                    cur = bufs.iter().map(|b| u64::from_le_bytes(*b)).collect();
                }
            });
            ends.copy_from_slice(&cur);
            Ok(t)
        },
    )?;
    check(&ends)
}

/// Random 8-byte-aligned kernel addresses whose pages map RAM.
fn random_virtual(ram: &[Mapping], rng: &mut fastrand::Rng) -> Vec<u64> {
    let mapped: u64 = ram.iter().map(|m| m.size).sum();
    (0..READS)
        .map(|_| {
            let mut off = rng.u64(0..mapped / 8) * 8;
            for m in ram {
                if off < m.size {
                    return m.va + off;
                }
                off -= m.size;
            }
            ram[0].va
        })
        .collect()
}

const COLD: &str = "4096 random kernel virtual reads, cold";
const WARM: &str = "4096 random kernel virtual reads, warm";

/// The 8 bytes at each of `vas` in `dtb`'s address space, each translated
/// by the engine and read straight through LeechCore: what every path of
/// the virtual workloads must read.
fn virtual_reference(device: &LeechCore, mem: &Memory, dtb: u64, vas: &[u64]) -> Reference {
    let space = AddressSpace::new(mem.clone(), dtb);
    let pas: Vec<Option<u64>> = mem
        .block_on(join_all(vas.iter().map(|&va| space.translate(va))))
        .into_iter()
        .map(|t| t.ok().map(|t| t.pa))
        .collect();
    Reference::read(device, &pas, 8)
}

fn engine_virtual(
    bench: &mut Bench,
    device: &LeechCore,
    mem: &Memory,
    dtb: u64,
    vas: &[u64],
    reference: &Reference,
) -> Result<(), Failure> {
    let bytes = (READS * 8) as u64;
    let as_bytes = |values: &[Result<u64, leechio::PartialError>]| -> Vec<[u8; 8]> {
        values
            .iter()
            .map(|v| v.as_ref().map_or([0xa5; 8], |v| v.to_le_bytes()))
            .collect()
    };
    let mut got = Vec::new();
    bench.row(COLD, "engine: joined futures", bytes, || {
        let space = AddressSpace::new(mem.clone(), dtb);
        Ok(timed(device, || {
            got = mem.block_on(join_all(vas.iter().map(|&va| space.read_val::<u64>(va))));
        }))
    })?;
    bench.check_last(as_bytes(&got).iter().map(|b| &b[..]), reference, device);
    let space = AddressSpace::new(mem.clone(), dtb);
    let pas: Vec<u64> = mem
        .block_on(join_all(vas.iter().map(|&va| space.translate(va))))
        .into_iter()
        .map(|t| t.map_or(0, |t| t.pa))
        .collect();
    bench.row(WARM, "engine: joined futures", bytes, || {
        Ok(timed(device, || {
            got = mem.block_on(join_all(vas.iter().map(|&va| space.read_val::<u64>(va))));
        }))
    })?;
    bench.check_last(as_bytes(&got).iter().map(|b| &b[..]), reference, device);
    let mut batch = ideal_batch(pas.iter().map(|&pa| (pa, 8)));
    bench.row(
        WARM,
        "limit: one LeechCore scatter of the translated pages",
        bytes,
        || {
            let mut entries = scatter_entries(&mut batch);
            Ok(timed(device, || device.read_scatter(&mut entries)))
        },
    )
}

/// memflow's VirtualDma over the plugin, with memflow's default cache.
type Virtual = VirtualDma<
    ConnectorInstanceArcBox<'static>,
    memflow::mem::DirectTranslate,
    memflow::architecture::x86::X86VirtualTranslate,
>;

/// One way of reading the addresses through memflow.
type VirtualRead = fn(&mut Virtual, &[u64], &mut [[u8; 8]]);

fn memflow_virtual(
    bench: &mut Bench,
    dtb: u64,
    vas: &[u64],
    reference: &Reference,
) -> Result<(), Failure> {
    let bytes = (READS * 8) as u64;
    let mut bufs = vec![[0u8; 8]; READS];
    let methods: [(&'static str, VirtualRead); 2] = [
        ("memflow VirtualDma: read by read", |v, vas, bufs| {
            for (&va, b) in vas.iter().zip(bufs.iter_mut()) {
                let _ = v.read_raw_into(Address::from(va), b);
            }
        }),
        ("memflow VirtualDma: one read_raw_list", |v, vas, bufs| {
            let mut list: Vec<ReadData> = vas
                .iter()
                .zip(bufs.iter_mut())
                .map(|(&va, b)| CTup2(Address::from(va), b.as_mut_slice().into()))
                .collect();
            let _ = v.read_raw_list(&mut list);
        }),
    ];
    for (method, read) in methods {
        // A new instance per run is cold; one instance kept is warm.
        poison(&mut bufs);
        progress(COLD, method);
        let mut cold = Vec::new();
        let mut last = None;
        for _ in 0..bench.runs {
            stop_requested()?;
            let p = bench.plugin(true)?;
            let mut v = virtual_dma(&p, dtb);
            cold.push(timed(&p.counter, || read(&mut v, vas, &mut bufs)));
            last = Some(p);
        }
        push_median(bench, COLD, method, bytes, cold);
        if let Some(p) = last {
            // The last run's instance, still open, reads again.
            bench.check_last(bufs.iter().map(|b| &b[..]), reference, &p.counter);
        }
        progress(WARM, method);
        stop_requested()?;
        let p = bench.plugin_kept_warm()?;
        let mut v = virtual_dma(&p, dtb);
        read(&mut v, vas, &mut bufs);
        poison(&mut bufs);
        let warm = (0..bench.runs)
            .map(|_| timed(&p.counter, || read(&mut v, vas, &mut bufs)))
            .collect();
        push_median(bench, WARM, method, bytes, warm);
        bench.check_last(bufs.iter().map(|b| &b[..]), reference, &p.counter);
    }
    Ok(())
}

fn virtual_dma(p: &Plugin, dtb: u64) -> Virtual {
    VirtualDma::new(
        p.conn.clone(),
        x64::ARCH,
        x64::new_translator(Address::from(dtb)),
    )
}

fn push_median(
    bench: &mut Bench,
    workload: &str,
    method: &'static str,
    bytes: u64,
    runs: Vec<(Duration, u64)>,
) {
    let (time, calls) = median(runs);
    bench.rows.push(Row {
        workload: workload.to_string(),
        method,
        calls,
        time,
        bytes,
        verdict: None,
    });
}

fn dump_workload(target: &Mapping) -> String {
    format!("dump of {} MiB of an address space", target.size >> 20)
}

fn engine_dump(
    bench: &mut Bench,
    device: &LeechCore,
    mem: &Memory,
    dtb: u64,
    m: Mapping,
    reference: &Reference,
) -> Result<(), Failure> {
    let workload = dump_workload(&m);
    let mut buf = vec![0u8; m.size as usize];
    bench.row(
        &workload,
        "limit: LeechCore scatter of every page, one batch",
        m.size,
        || {
            let mut entries: Vec<ScatterEntry> = buf
                .chunks_mut(4096)
                .enumerate()
                .map(|(i, b)| ScatterEntry::new(m.pa + i as u64 * 4096, b))
                .collect();
            Ok(timed(device, || device.read_scatter(&mut entries)))
        },
    )?;
    poison(&mut [&mut buf]);
    bench.row(
        &workload,
        "engine: one AddressSpace::read, cold",
        m.size,
        || {
            let space = AddressSpace::new(mem.clone(), dtb);
            Ok(timed(device, || {
                let _ = mem.block_on(space.read(m.va, &mut buf));
            }))
        },
    )?;
    bench.check_last(buf.chunks(4096), reference, device);
    poison(&mut [&mut buf]);
    bench.row(
        &workload,
        "engine: one AddressSpace::read in a scope, cold",
        m.size,
        || {
            let space = AddressSpace::new(mem.clone(), dtb);
            Ok(timed(device, || {
                let _ = mem.scope(|s| mem.block_on(space.read_scoped(s, m.va, &mut buf)));
            }))
        },
    )?;
    bench.check_last(buf.chunks(4096), reference, device);
    Ok(())
}

fn memflow_dump(
    bench: &mut Bench,
    dtb: u64,
    m: Mapping,
    reference: &Reference,
) -> Result<(), Failure> {
    let method = "memflow VirtualDma: one read_raw_into, cold";
    progress(&dump_workload(&m), method);
    let mut buf = vec![0xa5u8; m.size as usize];
    let mut runs = Vec::new();
    let mut last = None;
    for _ in 0..bench.runs {
        stop_requested()?;
        let p = bench.plugin(true)?;
        let mut v = virtual_dma(&p, dtb);
        runs.push(timed(&p.counter, || {
            let _ = v.read_raw_into(Address::from(m.va), &mut buf);
        }));
        last = Some(p);
    }
    push_median(bench, &dump_workload(&m), method, m.size, runs);
    if let Some(p) = last {
        bench.check_last(buf.chunks(4096), reference, &p.counter);
    }
    Ok(())
}

fn print_rows(rows: &[Row], markdown: bool, json_output: bool) {
    // Rows of one workload together, in the order workloads first came.
    let mut order: Vec<&str> = Vec::new();
    for r in rows {
        if !order.contains(&r.workload.as_str()) {
            order.push(&r.workload);
        }
    }
    let mut rows: Vec<&Row> = rows.iter().collect();
    rows.sort_by_key(|r| order.iter().position(|w| *w == r.workload));
    // The rows each one is compared with: the limit (throughput, as a
    // share of the limit's) and memflow's read-by-read code (speed-up).
    let find = |workload: &str, method: &str| {
        rows.iter()
            .find(|r| r.workload == workload && r.method.contains(method))
            .map(|r| r.time.as_secs_f64())
    };
    if markdown {
        outln!("| workload | method | device calls | median time | MB/s | of the limit | vs read by read |");
        outln!("|---|---|---:|---:|---:|---:|---:|");
    }
    for r in &rows {
        let ms = r.time.as_secs_f64() * 1e3;
        let mbs = r.bytes as f64 / r.time.as_secs_f64() / 1e6;
        // A path that got bytes wrong says so beside its name, and so
        // does one whose reads could not all be judged.
        let mut method = r.method.to_string();
        if let Some(v) = r.verdict {
            if v.wrong > 0 {
                method += &format!(" ({} of {} reads wrong or failed)", v.wrong, v.checked);
            }
            if v.changing > 0 {
                method += &format!(
                    " ({} reads not checked: the target changed that memory meanwhile)",
                    v.changing
                );
            }
        }
        if json_output {
            outln!(
                "{}",
                json!({"workload": r.workload, "method": r.method, "calls": r.calls, "ms": ms, "bytes": r.bytes,
                    "wrong_reads": r.verdict.map(|v| v.wrong), "checked_reads": r.verdict.map(|v| v.checked),
                    "changing_reads": r.verdict.map(|v| v.changing)})
            );
        } else if markdown {
            let secs = r.time.as_secs_f64();
            let of_limit = find(&r.workload, "limit")
                .map_or("".into(), |limit| format!("{:.0}%", limit / secs * 100.0));
            let speedup = find(&r.workload, "read by read")
                .map_or("".into(), |slow| format!("{:.1}x", slow / secs));
            outln!(
                "| {} | {} | {} | {ms:.2} ms | {} | {of_limit} | {speedup} |",
                r.workload,
                method,
                r.calls,
                three_digits(mbs)
            );
        } else {
            outln!(
                "{:<44} {:<54} {:>6} calls {:>10.2} ms {:>9} MB/s",
                r.workload,
                method,
                r.calls,
                ms,
                three_digits(mbs)
            );
        }
    }
}

/// A throughput with at least three significant digits (8-byte reads over
/// an emulated board run at a few hundredths of a MB/s).
fn three_digits(x: f64) -> String {
    match x {
        x if x >= 100.0 => format!("{x:.0}"),
        x if x >= 10.0 => format!("{x:.1}"),
        x if x >= 1.0 => format!("{x:.2}"),
        x => format!("{x:.3}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        let ms = |t: u64, calls: u64| (Duration::from_millis(t), calls);
        assert_eq!(median(vec![ms(9, 3), ms(1, 1), ms(5, 2)]), ms(5, 2));
        assert_eq!(
            median(vec![ms(8, 4), ms(2, 1), ms(4, 2), ms(6, 3)]),
            ms(5, 2)
        );
    }

    #[test]
    fn a_read_is_wrong_only_if_the_memory_it_read_holds_other_bytes() {
        let at = |i: u64| Some((i * 0x1000, vec![i as u8; 8]));
        let reference = Reference {
            len: 8,
            reads: vec![at(1), None, at(3), at(4), at(5), at(6)],
        };
        // Memory now: 3 changed to what the row read, 4 changed to
        // something else again, 5 and 6 as before.
        let now = |pa: u64| match pa >> 12 {
            3 => vec![0x33; 8],
            4 => vec![0x44; 8],
            n => vec![n as u8; 8],
        };
        let got = [
            [1u8; 8],  // right
            [9; 8],    // no reference: not counted
            [0x33; 8], // what the memory holds now
            [0x40; 8], // the memory changes: cannot be judged
            [0xa5; 8], // left as poisoned
            [6; 8],    // right
        ];
        let mut reread = Vec::new();
        let verdict = reference.judge(got.iter().map(|b| &b[..]), |pas, len| {
            reread.extend_from_slice(pas);
            pas.iter()
                .map(|&pa| Some(now(pa)[..len].to_vec()))
                .collect()
        });
        assert_eq!(
            verdict,
            Verdict {
                checked: 4,
                wrong: 1,
                changing: 1
            }
        );
        assert_eq!(reread, [0x3000, 0x4000, 0x5000], "only the differing reads");
        // A read that fails now, where it read before, is wrong.
        let verdict = reference.judge(got.iter().map(|b| &b[..]), |pas, _| vec![None; pas.len()]);
        assert_eq!((verdict.wrong, verdict.changing), (3, 0));
    }

    #[test]
    fn the_plugin_gets_lib_remote_verbosity_and_timeout() {
        let bench = Bench {
            device: DeviceConfig {
                device: "file:///tmp/m.raw".into(),
                remote: Some("rpc://host.example:10.0.0.1".into()),
                library: Some("/opt/lc,x/leechcore.so".into()),
                verbosity: leechio::Verbosity::from_level(2),
                max_address: None,
                timeout: Some(std::time::Duration::from_millis(2500)),
            },
            plugin_dir: PathBuf::new(),
            runs: 1,
            rows: Vec::new(),
        };
        // The plugin reads its arguments back from their string form.
        let args = bench.plugin_args().ok().expect("UTF-8 arguments");
        let args: PluginArgs = args.to_string().parse().unwrap();
        assert_eq!(args.get("lib"), Some("/opt/lc,x/leechcore.so"));
        assert_eq!(args.get("remote"), Some("rpc://host.example:10.0.0.1"));
        assert_eq!(args.get("verbosity"), Some("2"));
        assert_eq!(args.get("timeout"), Some("2.5"));
        // Attaching keeps the library, and drops the remote string, with
        // which LeechCore would not attach.
        let existing = bench.existing();
        assert_eq!(existing.device, "existing");
        assert_eq!(existing.remote, None);
        assert_eq!(existing.library, bench.device.library);
        assert_eq!(existing.verbosity, bench.device.verbosity);
    }
}
