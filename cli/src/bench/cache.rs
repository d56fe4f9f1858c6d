//! Files from a Linux target's page cache: the engine's walk (the list of
//! cached files, then the bytes of the largest, each level one batch)
//! against the same walk with each read a device call of its own (the
//! engine told to put one scatter entry in a call), which is what
//! following the pointers one at a time costs.

use leechio::linux::{CacheLocation, CachedFile, FileQuery, Hints, Kernel};
use leechio::EngineConfig;

use super::*;

const CACHE: &str = "files from the page cache";

/// What a run gives: each file (inode, device, path, cached pages), and
/// the bytes read of the largest.
type Read = (
    Vec<(u64, u32, Result<String, String>, u64)>,
    Vec<(u64, Vec<u8>)>,
);

/// The list, then the pages of its largest file (by cached pages).
fn read(kernel: &Kernel) -> Read {
    let list = kernel.cached_files();
    let files = list
        .files
        .iter()
        .map(|f| (f.inode, f.device, f.path.clone(), f.cached_pages))
        .collect();
    let largest: Option<&CachedFile> = list.files.iter().max_by_key(|f| f.cached_pages);
    let pages = largest
        .and_then(|f| {
            let query = FileQuery::Inode {
                number: f.inode,
                device: Some(f.device),
            };
            kernel.cached_file(&query).ok()
        })
        .map(|c| c.pages)
        .unwrap_or_default();
    (files, pages)
}

/// The page-cache rows: the engine's walk with the kernel known, then the
/// same walk a read a call, compared file by file (inode numbers named
/// where they differ). A target with no Linux kernel gets none, and a
/// line on stderr that says why.
pub(super) fn cache(bench: &mut Bench) -> Result<(), Failure> {
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
            errln!("leechio: bench: no page-cache rows: {e}");
            return Ok(());
        }
    };
    let mut batched: Read = Default::default();
    let method = "engine: Kernel::cached_files and cached_file, kernel known";
    bench.row(CACHE, method, 0, || {
        Ok(timed(&device, || batched = read(&kernel)))
    })?;
    let first = bench.rows.len() - 1;
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
    let mut single: Read = Default::default();
    let method = "engine: the same walk, a device call a read";
    bench.row(CACHE, method, 0, || {
        Ok(timed(&device, || single = read(&kernel)))
    })?;
    let mut differing: Vec<u32> = batched
        .0
        .iter()
        .filter(|f| !single.0.contains(f))
        .chain(single.0.iter().filter(|f| !batched.0.contains(f)))
        .map(|f| f.0 as u32)
        .collect();
    differing.sort_unstable();
    differing.dedup();
    if batched.1 != single.1 {
        let largest = batched.0.iter().max_by_key(|f| f.3).map_or(0, |f| f.0);
        differing.push(largest as u32);
    }
    let bytes: usize = batched.1.iter().map(|p| p.1.len()).sum();
    let workload = format!(
        "{CACHE}, {} files listed, the largest's {bytes} bytes",
        batched.0.len()
    );
    for row in &mut bench.rows[first..] {
        row.workload = workload.clone();
        row.lists = Some(ListCheck {
            processes: batched.0.len(),
            differing: differing.clone(),
            changing: Vec::new(),
            keys: Keys::Items("files"),
        });
    }
    Ok(())
}
