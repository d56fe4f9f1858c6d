//! `leechio bench`: the same workloads on one device through LeechCore
//! called directly with ideal batches (the limit), the engine, the memflow
//! plugin, and memflow's own synchronous stack. Device calls are counted
//! by LeechCore itself; times are the median of several runs.

mod chains;
mod dumps;
mod physical;
mod processes;
mod table;
mod timing;
mod verdict;
mod views;
mod virtual_reads;
mod walks;

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
use leechio::{
    AddressSpace, Call, DeviceConfig, LeechCore, Memory, MemoryMap, Paging, ScatterEntry,
};

use chains::*;
use dumps::*;
use physical::*;
use processes::*;
use table::*;
use timing::*;
use verdict::*;
use views::*;
use virtual_reads::*;
use walks::*;

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
    /// Folder holding libmemflow_leechcore.so (default: this program's
    /// folder, then ~/.local/lib/memflow)
    #[arg(long, env = "LEECHIO_PLUGINS")]
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
    /// For a process list: how it compares with the other way of reading
    /// it (`None`: no list).
    lists: Option<ListCheck>,
}

/// What every measurement needs: how to open the device (`--device`,
/// `--remote`, `--lib`, `-v`), where the plugin is, how many runs.
struct Bench {
    device: DeviceConfig,
    plugin_dir: PathBuf,
    runs: usize,
    rows: Vec<Row>,
    /// The rows' reads that differed from their reference, decided after
    /// the last row ([`Bench::settle`]).
    differing: Vec<Differing>,
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
            lists: None,
        });
        Ok(())
    }

    /// Records in the last row how its reads, left in `got`, compare with
    /// `reference`; those that differ are decided by [`Bench::settle`].
    fn check_last<'a>(&mut self, got: impl Iterator<Item = &'a [u8]>, reference: &Reference) {
        let Some(row) = self.rows.len().checked_sub(1) else {
            return;
        };
        let (checked, differing) = reference.compare(got, row);
        self.rows[row].verdict = Some(Verdict {
            checked,
            ..Verdict::default()
        });
        self.differing.extend(differing);
    }

    /// Decides the reads that differed from their reference, all rows'
    /// at once and after the last row, so a live target's memory is
    /// watched for one window whatever the number of rows (see
    /// [`settle_on`]). Where the device does not open they stay wrong or
    /// failed: nothing shows their memory changed.
    fn settle(&mut self) {
        let differing = std::mem::take(&mut self.differing);
        if differing.is_empty() {
            return;
        }
        progress(
            &format!("{} reads that differed", differing.len()),
            "reading their memory again",
        );
        let outcomes = match LeechCore::open(&self.device) {
            Ok(device) => settle_on(&device, &differing),
            Err(_) => vec![Outcome::Wrong; differing.len()],
        };
        for (d, outcome) in differing.iter().zip(outcomes) {
            if let Some(verdict) = &mut self.rows[d.row].verdict {
                verdict.count(outcome);
            }
        }
    }
}

pub fn run(cli: &super::Cli, args: &BenchArgs) -> Result<ExitCode, Failure> {
    let device = crate::device::device_config(cli)?;
    // LeechCore as --lib names it, checked first: through the plugin, a
    // library that does not load would only read as a device that did not
    // open.
    leechio::leechcore_sys::Library::load(device.library.as_deref())?;
    let plugin_dir = match &args.plugins {
        Some(dir) => dir.clone(),
        // Beside this program (a build of the repository: `make plugin`
        // puts the plugin in target/release/ too), then memflow's folder.
        None => [
            std::env::current_exe()
                .ok()
                .and_then(|exe| Some(exe.parent()?.to_path_buf()))
                .unwrap_or_default(),
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
        differing: Vec::new(),
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
    bench.settle();
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
            None => find_address_spaces(&mem, crate::paging::given(), |_, _| {})
                .first()
                .map(|c| c.dtb)
                .ok_or_else(|| {
                    Failure("no page-table root found for the virtual workloads; give --dtb".into())
                })?,
        };
        // The virtual rows compare with memflow's x64 translation, which
        // walks 4 levels only.
        if crate::paging::of(&mem, dtb)? != Paging::FourLevel {
            return Err(Failure(format!(
                "the tables at {dtb:#x} are 5-level: the virtual workloads compare with memflow's \
                 x64 translation, which has 4 levels only; bench a 4-level target"
            )));
        }
        let kernel = AddressSpace::new(mem.clone(), dtb, Paging::FourLevel);
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
    memflow_dump(bench, dtb, target, &dump_reference)?;
    // Phase three: a Linux target's processes, each way on its own context,
    // then the other walks of the Linux layer (the page cache's files
    // among them), and what hides.
    processes(bench)?;
    walks(bench)?;
    views(bench)
}

/// memflow's VirtualDma over the plugin, with memflow's default cache.
type Virtual = VirtualDma<
    ConnectorInstanceArcBox<'static>,
    memflow::mem::DirectTranslate,
    memflow::architecture::x86::X86VirtualTranslate,
>;

/// One way of reading the addresses through memflow.
type VirtualRead = fn(&mut Virtual, &[u64], &mut [[u8; 8]]);

#[cfg(test)]
mod tests;
