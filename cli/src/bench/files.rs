//! The open files of every process of a Linux target: the engine's walk
//! (`Kernel::open_files`, each level of every process one batch) against
//! the same walk with each read a device call of its own (the engine told
//! to put one scatter entry in a call), which is what following the
//! pointers one at a time costs.

use std::collections::BTreeMap;

use leechio::linux::{CacheLocation, Hints, Kernel, OpenFiles};
use leechio::EngineConfig;

use super::*;

const FILES: &str = "open files of every process";

/// Each process's fds, by pid: number, name and position.
type Listing = BTreeMap<u32, Vec<(u32, Result<String, String>, i64)>>;

fn listing(files: &OpenFiles) -> Listing {
    files
        .processes
        .iter()
        .map(|p| {
            let fds = p.fds.iter().map(|f| (f.fd, f.name.clone(), f.pos));
            (p.pid, fds.collect())
        })
        .collect()
}

/// The open-files rows: the engine's walk with the kernel known, then the
/// same walk a read a call, each compared with the other by pid. A target
/// with no Linux kernel gets none, and a line on stderr that says why.
pub(super) fn files(bench: &mut Bench) -> Result<(), Failure> {
    let _plugin = bench.plugin(false)?;
    let device = Arc::new(LeechCore::open(&bench.existing())?);
    let hints = Hints {
        cache: CacheLocation::Off,
        ..Hints::default()
    };
    let mem = Memory::with_config(device.clone(), Default::default());
    let kernel = match Kernel::find(&mem, &hints) {
        Ok(kernel) => kernel,
        Err(e) => {
            errln!("leechio: bench: no open-files rows: {e}");
            return Ok(());
        }
    };
    let mut batched = OpenFiles::default();
    bench.row(FILES, "engine: Kernel::open_files, kernel known", 0, || {
        Ok(timed(&device, || batched = kernel.open_files(None)))
    })?;
    let first = bench.rows.len() - 1;
    // The same kernel on an engine that makes a call of every read.
    let one_by_one = Memory::with_config(
        device.clone(),
        EngineConfig {
            max_entries_per_call: 1,
        },
    );
    let known = Hints {
        dtb: Some(kernel.dtb()),
        kernel_base: Some(kernel.virtual_base()),
        ..hints
    };
    let kernel = Kernel::find(&one_by_one, &known)
        .map_err(|e| Failure(format!("the kernel was found once, then not: {e}")))?;
    let mut single = OpenFiles::default();
    let method = "engine: the same walk, a device call a read";
    bench.row(FILES, method, 0, || {
        Ok(timed(&device, || single = kernel.open_files(None)))
    })?;
    let (before, after) = (listing(&batched), listing(&single));
    let differing: Vec<u32> = before
        .keys()
        .chain(after.keys())
        .filter(|pid| before.get(pid) != after.get(pid))
        .copied()
        .collect::<std::collections::BTreeSet<u32>>()
        .into_iter()
        .collect();
    let fds: usize = before.values().map(Vec::len).sum();
    let workload = format!("{FILES}, {fds} fds of {} processes", before.len());
    for row in &mut bench.rows[first..] {
        row.workload = workload.clone();
        row.lists = Some(ListCheck {
            processes: before.len(),
            differing: differing.clone(),
            changing: Vec::new(),
        });
    }
    Ok(())
}
