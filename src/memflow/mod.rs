//! memflow's `PhysicalMemory` over the engine: memflow's synchronous batches
//! become one synchronous flush each, read straight into memflow's buffers,
//! with results reported per fragment.

use memflow::cglue::tuple::{CTup2, CTup3};
use memflow::error::Result;
use memflow::mem::mem_data::opt_call;
use memflow::mem::{
    MemOps, PhysicalMemory, PhysicalMemoryMapping, PhysicalMemoryMetadata, PhysicalReadMemOps,
    PhysicalWriteMemOps,
};
use memflow::types::Address;

use std::sync::Arc;

use crate::{BatchOutcome, Memory, MemoryMap, MemoryRange};

mod backend;
pub mod linux;
mod os_map;

pub use backend::PhysicalMemoryBackend;

use os_map::{OsMap, Run};

/// Entries memflow's batching layers are told to send at once: large
/// enough that a round trip carries many pages, small enough to keep
/// memflow's own buffers modest.
const IDEAL_BATCH_SIZE: u32 = 4096;

/// The engine as memflow physical memory. Clones share the device (and its
/// queue); the device closes with the last clone. A memory map an OS layer
/// sets belongs to the instance it is set on and to clones made from that
/// instance afterwards, as with memflow's own connectors.
#[derive(Clone)]
pub struct MemflowPhysical {
    mem: Memory,
    shared: Arc<Shared>,
    /// The OS layer's map of this instance, if one was set.
    os_map: Option<Arc<OsMap>>,
    /// memflow's view of this instance's memory.
    metadata: PhysicalMemoryMetadata,
}

/// What every clone sees the same, fixed when the device was opened.
struct Shared {
    /// The user gave a memory map: maps from OS layers are ignored.
    fixed_map: bool,
    /// The device's map when it was opened, which an OS layer's map is laid
    /// over: its addresses are those this connector shows, and the device
    /// may keep them elsewhere (QEMU's RAM above 4 GiB, say).
    device_map: MemoryMap,
}

impl std::fmt::Debug for MemflowPhysical {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemflowPhysical")
            .field("fixed_map", &self.shared.fixed_map)
            .field("os_map", &self.os_map)
            .finish_non_exhaustive()
    }
}

impl MemflowPhysical {
    /// memflow physical memory over `mem`; `fixed_map` keeps the device's
    /// current memory map even when an OS layer offers one.
    pub fn new(mem: Memory, fixed_map: bool) -> Self {
        let shared = Shared {
            fixed_map,
            device_map: mem.backend().memory_map(),
        };
        MemflowPhysical {
            metadata: metadata_of(&mem),
            mem,
            shared: Arc::new(shared),
            os_map: None,
        }
    }

    /// The engine underneath, for async use beside memflow. It reads the
    /// device's addresses: an OS layer's map does not apply to it.
    pub fn memory(&self) -> &Memory {
        &self.mem
    }

    /// The runs of each of `requests` (address, length), tagged with the
    /// request's index: through this instance's OS map if it has one.
    fn runs(&self, requests: impl Iterator<Item = (u64, usize)>) -> Vec<(usize, Run)> {
        let mut runs = Vec::new();
        for (i, (addr, len)) in requests.enumerate() {
            match &self.os_map {
                Some(map) => map.split(addr, len, |run| runs.push((i, run))),
                None => runs.push((
                    i,
                    Run {
                        offset: 0,
                        len,
                        at: Some(addr),
                    },
                )),
            }
        }
        runs
    }
}

fn metadata_of(mem: &Memory) -> PhysicalMemoryMetadata {
    let backend = mem.backend();
    PhysicalMemoryMetadata {
        // memflow's max_address is the last valid address.
        max_address: Address::from(backend.max_address().saturating_sub(1)),
        real_size: backend.memory_map().total_size(),
        readonly: backend.read_only(),
        ideal_batch_size: IDEAL_BATCH_SIZE,
    }
}

/// Calls `f` with each request's index and its failed byte runs (start,
/// end), in order and merged: the runs in no range of the OS map, and what
/// the engine reported for the others (operation `k` of `outcome` is the
/// `k`-th run with an address).
fn failed_runs(
    runs: &[(usize, Run)],
    requests: usize,
    outcome: &BatchOutcome,
    mut f: impl FnMut(usize, &[(usize, usize)]),
) {
    let mut failed: Vec<(usize, usize)> = Vec::new();
    let (mut next, mut op) = (0, 0);
    for request in 0..requests {
        failed.clear();
        while let Some((_, run)) = runs.get(next).filter(|(i, _)| *i == request) {
            if run.at.is_some() {
                for e in outcome.failures(op) {
                    let a = run.offset + e.offset;
                    push(&mut failed, a, a + e.len);
                }
                op += 1;
            } else {
                push(&mut failed, run.offset, run.offset + run.len);
            }
            next += 1;
        }
        f(request, &failed);
    }
}

/// Adds the run `a..b` to `failed`, merged with a run it continues.
fn push(failed: &mut Vec<(usize, usize)>, a: usize, b: usize) {
    match failed.last_mut() {
        Some((_, end)) if *end == a => *end = b,
        _ => failed.push((a, b)),
    }
}

/// Calls `ok` for each run of `0..len` that succeeded and `failed` for each
/// failed run (start, end), in order.
fn report(
    failures: &[(usize, usize)],
    len: usize,
    mut ok: impl FnMut(usize, usize),
    mut failed: impl FnMut(usize, usize),
) {
    let mut at = 0;
    for &(a, b) in failures {
        if a > at {
            ok(at, a);
        }
        failed(a, b);
        at = b;
    }
    if at < len {
        ok(at, len);
    }
}

impl PhysicalMemory for MemflowPhysical {
    fn phys_read_raw_iter(
        &mut self,
        MemOps {
            inp,
            mut out,
            mut out_fail,
        }: PhysicalReadMemOps,
    ) -> Result<()> {
        let items: Vec<_> = inp.collect();
        let runs = self.runs(
            items
                .iter()
                .map(|CTup3(pa, _, buf)| (pa.address.to_umem(), buf.len())),
        );
        let slices = runs.iter().filter_map(|(i, run)| {
            let at = run.at?;
            let ptr = items[*i].2.as_mut_ptr();
            // SAFETY: each CSliceMut is an exclusive borrow of its buffer
            // for the whole call; the buffers are disjoint, and so are the
            // runs of one buffer.
            let part = unsafe { std::slice::from_raw_parts_mut(ptr.add(run.offset), run.len) };
            Some((at, part))
        });
        let outcome = self.mem.read_now(slices);
        failed_runs(&runs, items.len(), &outcome, |i, failed| {
            let CTup3(_, meta, buf) = &items[i];
            let ptr = buf.as_mut_ptr();
            let part = |a: usize, b: usize| {
                // SAFETY: the runs are disjoint parts of the buffer, handed
                // out once each.
                unsafe { std::slice::from_raw_parts_mut(ptr.add(a), b - a) }.into()
            };
            report(
                failed,
                buf.len(),
                |a, b| {
                    opt_call(out.as_deref_mut(), CTup2(*meta + a, part(a, b)));
                },
                |a, b| {
                    opt_call(out_fail.as_deref_mut(), CTup2(*meta + a, part(a, b)));
                },
            );
        });
        Ok(())
    }

    fn phys_write_raw_iter(
        &mut self,
        MemOps {
            inp,
            mut out,
            mut out_fail,
        }: PhysicalWriteMemOps,
    ) -> Result<()> {
        let items: Vec<_> = inp.collect();
        let runs = self.runs(
            items
                .iter()
                .map(|CTup3(pa, _, data)| (pa.address.to_umem(), data.len())),
        );
        let slices = runs.iter().filter_map(|(i, run)| {
            let data: &[u8] = items[*i].2.into();
            Some((run.at?, &data[run.offset..run.offset + run.len]))
        });
        let outcome = self.mem.write_now(slices);
        failed_runs(&runs, items.len(), &outcome, |i, failed| {
            let CTup3(_, meta, data) = items[i];
            let data: &[u8] = data.into();
            report(
                failed,
                data.len(),
                |a, b| {
                    opt_call(out.as_deref_mut(), CTup2(meta + a, data[a..b].into()));
                },
                |a, b| {
                    opt_call(out_fail.as_deref_mut(), CTup2(meta + a, data[a..b].into()));
                },
            );
        });
        Ok(())
    }

    fn metadata(&self) -> PhysicalMemoryMetadata {
        self.metadata
    }

    fn set_mem_map(&mut self, mem_map: &[PhysicalMemoryMapping]) {
        if self.shared.fixed_map {
            log::info!("keeping the memory map given by the user; ignoring the one offered by the OS layer");
            return;
        }
        match OsMap::laid_over(&self.shared.device_map, mem_map) {
            Ok(map) => {
                self.metadata = PhysicalMemoryMetadata {
                    // memflow's max_address is the last valid address.
                    max_address: Address::from(map.end() - 1),
                    real_size: map.total_size(),
                    ..metadata_of(&self.mem)
                };
                self.os_map = Some(Arc::new(map));
            }
            Err(e) => log::warn!("could not apply the OS layer's memory map: {e}"),
        }
    }
}

/// The longest memory map file read, in bytes: 16 MiB holds 100,000
/// ranges in memflow's TOML with every number written out in 16 hex
/// digits (about 10 MiB).
pub const MEMORY_MAP_FILE_MAX: u64 = 16 << 20;

/// Reads a memory map file in memflow's TOML format (`[[range]]` tables
/// with `base`, `length`, optional `real_base`) or LeechCore's text format.
/// Only a regular file of at most [`MEMORY_MAP_FILE_MAX`] bytes is read.
pub fn read_memory_map_file(
    path: &std::path::Path,
) -> std::result::Result<MemoryMap, crate::Error> {
    let bad =
        |why: String| crate::Error::InvalidConfig(format!("memory map {}: {why}", path.display()));
    let text = crate::user_file::read_regular_file(path, MEMORY_MAP_FILE_MAX).map_err(bad)?;
    parse_memory_map_text(&text).map_err(bad)
}

/// Reads the text of a memory map file (see [`read_memory_map_file`]);
/// the error says what is wrong, without naming the file.
pub fn parse_memory_map_text(text: &str) -> std::result::Result<MemoryMap, String> {
    let map = if text.contains("[[range]]") {
        parse_toml(text)?
    } else {
        text.parse()
            .map_err(|e: crate::MemoryMapError| e.to_string())?
    };
    // (`range = []`, with `[[range]]` in a comment, is TOML with none.)
    if map.is_empty() {
        return Err("no ranges in it".into());
    }
    Ok(map)
}

/// Reads memflow's TOML form.
fn parse_toml(text: &str) -> std::result::Result<MemoryMap, String> {
    // Parsed here rather than by memflow, whose parser panics on ranges
    // that overlap and on touching ones listed from the highest down.
    let file: MapFile = toml::from_str(text).map_err(|e| {
        // toml's own text is several lines, quoting the file.
        let at = e.span().map_or(0, |span| span.start);
        let before = text.get(..at).unwrap_or(text);
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
        format!(
            "not a memflow memory map file (line {line}, column {column}: {})",
            crate::printable(e.message())
        )
    })?;
    let mut ranges: Vec<MemoryRange> = file
        .range
        .iter()
        .map(|r| MemoryRange {
            start: r.base,
            size: r.length,
            remap: r.real_base.unwrap_or(r.base),
        })
        .collect();
    ranges.sort_by_key(|r| r.start);
    MemoryMap::new(ranges).map_err(|e| e.to_string())
}

/// memflow's memory map file: `[[range]]` tables.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct MapFile {
    range: Vec<MapFileRange>,
}

/// One `[[range]]`: `length` bytes at physical `base`, found at
/// `real_base` on the device (`base` if not given).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct MapFileRange {
    base: u64,
    length: u64,
    real_base: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(start: u64, size: u64, remap: u64) -> MemoryRange {
        MemoryRange { start, size, remap }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: files
    fn a_map_of_100k_ranges_loads_and_a_longer_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("map.toml");
        // Every number in 16 hex digits: the longest way to write them.
        let mut text = String::new();
        for i in 0..100_000u64 {
            let (base, real) = (i * 0x2000, 0x1_0000_0000 + i * 0x1000);
            text += &format!(
                "[[range]]\nbase = {base:#018x}\nlength = {:#018x}\nreal_base = {real:#018x}\n\n",
                0x1000
            );
        }
        std::fs::write(&path, &text).unwrap();
        let map = read_memory_map_file(&path).unwrap();
        assert_eq!(map.ranges().len(), 100_000);
        assert_eq!(
            map.ranges()[99_999],
            range(99_999 * 0x2000, 0x1000, 0x1_0000_0000 + 99_999 * 0x1000)
        );
        // Past the limit, even a valid map is refused, before it is read.
        text.extend(std::iter::repeat_n(
            '#',
            MEMORY_MAP_FILE_MAX as usize + 1 - text.len(),
        ));
        std::fs::write(&path, &text).unwrap();
        assert_eq!(
            read_memory_map_file(&path).unwrap_err().to_string(),
            format!(
                "invalid configuration: memory map {}: it is {} bytes long, more than the {MEMORY_MAP_FILE_MAX} bytes allowed",
                path.display(),
                MEMORY_MAP_FILE_MAX + 1
            )
        );
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: files
    fn a_map_that_is_not_a_regular_file_is_refused() {
        // Pipes and devices too (the tests of `user_file`, which do not
        // hang when they fail); a folder shows the message in full.
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            read_memory_map_file(dir.path()).unwrap_err().to_string(),
            format!(
                "invalid configuration: memory map {}: it is a folder, not a regular file",
                dir.path().display()
            )
        );
    }

    #[test]
    fn a_map_file_is_refused_on_one_line_naming_where() {
        // Found by the fuzz target memory_map: toml's message is several
        // lines quoting the file, and a TOML map with no range was taken.
        assert_eq!(
            parse_memory_map_text("[[range]]\nbase = 0x1000\nlength = 0x1000 0x2000\n"),
            Err("not a memflow memory map file (line 3, column 17: expected newline, `#`)".into())
        );
        assert_eq!(
            parse_memory_map_text("[[range]]\nbase = 0\n\"len\\u001bgth\" = 1\n"),
            Err(
                "not a memflow memory map file (line 3, column 1: unknown field `len\\u{1b}gth`, \
                 expected one of `base`, `length`, `real_base`)"
                    .into()
            )
        );
        assert_eq!(
            parse_memory_map_text("range = [] # [[range]]\n"),
            Err("no ranges in it".into())
        );
        let map = parse_memory_map_text("[[range]]\nbase = 0x1000\nlength = 0x2000\n").unwrap();
        assert_eq!(map.ranges(), &[MemoryRange::new(0x1000, 0x2000)]);
    }
}
