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

use std::sync::{Arc, Mutex};

use crate::{BatchOutcome, MemoryMap, MemoryRange};
use crate::{Failure, Memory};

/// Entries memflow's batching layers are told to send at once: large
/// enough that a round trip carries many pages, small enough to keep
/// memflow's own buffers modest.
const IDEAL_BATCH_SIZE: u32 = 4096;

/// The engine as memflow physical memory. Clones share the device (and its
/// queue) and its memory map; the device closes with the last clone.
#[derive(Clone)]
pub struct MemflowPhysical {
    mem: Memory,
    shared: Arc<Shared>,
}

/// What every clone sees the same.
struct Shared {
    /// The user gave a memory map: maps from OS layers are ignored.
    fixed_map: bool,
    /// The device's map when it was opened, which an OS layer's map is laid
    /// over: its addresses are those this connector shows, and the device
    /// may keep them elsewhere (QEMU's RAM above 4 GiB, say).
    device_map: MemoryMap,
    /// memflow's view of the memory: an OS layer's map changes it for all.
    metadata: Mutex<PhysicalMemoryMetadata>,
}

impl std::fmt::Debug for MemflowPhysical {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemflowPhysical")
            .field("fixed_map", &self.shared.fixed_map)
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
            metadata: Mutex::new(metadata_of(&mem)),
        };
        MemflowPhysical {
            mem,
            shared: Arc::new(shared),
        }
    }

    /// The engine underneath, for async use beside memflow.
    pub fn memory(&self) -> &Memory {
        &self.mem
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

/// Calls `ok` for each run of `0..len` that succeeded and `failed` for each
/// failed run, in order.
fn report(
    failures: impl Iterator<Item = Failure>,
    len: usize,
    mut ok: impl FnMut(usize, usize),
    mut failed: impl FnMut(usize, usize),
) {
    let mut at = 0;
    for f in failures {
        if f.offset > at {
            ok(at, f.offset);
        }
        failed(f.offset, f.offset + f.len);
        at = f.offset + f.len;
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
        // SAFETY: each CSliceMut is an exclusive borrow of its buffer for
        // the whole call; the buffers are disjoint.
        let slices = items.iter().map(|CTup3(pa, _, buf)| {
            (pa.address.to_umem(), unsafe {
                std::slice::from_raw_parts_mut(buf.as_mut_ptr(), buf.len())
            })
        });
        let outcome: BatchOutcome = self.mem.read_now(slices);
        for (i, CTup3(_, meta, buf)) in items.into_iter().enumerate() {
            let ptr = buf.as_mut_ptr();
            // SAFETY: the runs are disjoint parts of the buffer, handed
            // out once each.
            let part = |a: usize, b: usize| {
                unsafe { std::slice::from_raw_parts_mut(ptr.add(a), b - a) }.into()
            };
            report(
                outcome.failures(i).copied(),
                buf.len(),
                |a, b| {
                    opt_call(out.as_deref_mut(), CTup2(meta + a, part(a, b)));
                },
                |a, b| {
                    opt_call(out_fail.as_deref_mut(), CTup2(meta + a, part(a, b)));
                },
            );
        }
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
        let slices = items
            .iter()
            .map(|CTup3(pa, _, data)| (pa.address.to_umem(), <&[u8]>::from(*data)));
        let outcome = self.mem.write_now(slices);
        for (i, CTup3(_, meta, data)) in items.into_iter().enumerate() {
            let data: &[u8] = data.into();
            report(
                outcome.failures(i).copied(),
                data.len(),
                |a, b| {
                    opt_call(out.as_deref_mut(), CTup2(meta + a, data[a..b].into()));
                },
                |a, b| {
                    opt_call(out_fail.as_deref_mut(), CTup2(meta + a, data[a..b].into()));
                },
            );
        }
        Ok(())
    }

    fn metadata(&self) -> PhysicalMemoryMetadata {
        *lock(&self.shared.metadata)
    }

    fn set_mem_map(&mut self, mem_map: &[PhysicalMemoryMapping]) {
        let shared = &*self.shared;
        if shared.fixed_map {
            log::info!("keeping the memory map given by the user; ignoring the one offered by the OS layer");
            return;
        }
        // Held while the device's map changes, so clones agree on it.
        let mut metadata = lock(&shared.metadata);
        match laid_over(&shared.device_map, mem_map)
            .and_then(|map| self.mem.backend().set_memory_map(&map))
        {
            Ok(()) => *metadata = metadata_of(&self.mem),
            Err(e) => log::warn!("could not apply the OS layer's memory map: {e}"),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // (Plain data: a panic elsewhere cannot leave it half-written.)
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An OS layer's map laid over the device's: each mapping says where its
/// physical addresses (`base`) lie among this connector's (`real_base`),
/// and the device's map says where those lie on the device. Parts of a
/// mapping the device does not hold are left out.
fn laid_over(
    device: &MemoryMap,
    mappings: &[PhysicalMemoryMapping],
) -> std::result::Result<MemoryMap, crate::Error> {
    let mut ranges = Vec::new();
    for m in mappings {
        let (base, from) = (m.base.to_umem(), m.real_base.to_umem());
        let to = from.saturating_add(m.size);
        for r in device.ranges() {
            let (lo, hi) = (from.max(r.start), to.min(r.end()));
            if lo < hi {
                ranges.push(MemoryRange {
                    start: base + (lo - from),
                    size: hi - lo,
                    remap: r.remap + (lo - r.start),
                });
            }
        }
    }
    if ranges.is_empty() {
        return Err(crate::Error::InvalidConfig(
            "none of its ranges lies in the device's memory".into(),
        ));
    }
    ranges.sort_by_key(|r| r.start);
    Ok(MemoryMap::new(ranges)?)
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
    if !text.contains("[[range]]") {
        let map: MemoryMap = text
            .parse()
            .map_err(|e: crate::MemoryMapError| bad(e.to_string()))?;
        if map.is_empty() {
            return Err(bad("no ranges in it".into()));
        }
        return Ok(map);
    }
    // Parsed here rather than by memflow, whose parser panics on ranges
    // that overlap and on touching ones listed from the highest down.
    let file: MapFile =
        toml::from_str(&text).map_err(|e| bad(format!("not a memflow memory map file ({e})")))?;
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
    MemoryMap::new(ranges).map_err(|e| bad(e.to_string()))
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

    const GIB: u64 = 1 << 30;

    fn range(start: u64, size: u64, remap: u64) -> MemoryRange {
        MemoryRange { start, size, remap }
    }

    fn mapping(base: u64, size: u64, real_base: u64) -> PhysicalMemoryMapping {
        PhysicalMemoryMapping {
            base: Address::from(base),
            size,
            real_base: Address::from(real_base),
        }
    }

    /// A 4 GiB QEMU guest: its fourth GiB is at 3 GiB in the RAM file.
    fn qemu_map() -> MemoryMap {
        MemoryMap::new(vec![
            range(0, 0xa_0000, 0),
            range(0x10_0000, 3 * GIB - 0x10_0000, 0x10_0000),
            range(4 * GIB, GIB, 3 * GIB),
        ])
        .unwrap()
    }

    #[test]
    fn an_os_map_keeps_the_devices_remapping() {
        // What memflow-win32 passes: RAM ranges, each at its own address.
        let os = [
            mapping(0, 0x9_f000, 0),
            mapping(0x10_0000, 3 * GIB - 0x10_0000, 0x10_0000),
            mapping(4 * GIB, GIB, 4 * GIB),
        ];
        let expected = MemoryMap::new(vec![
            range(0, 0x9_f000, 0),
            range(0x10_0000, 3 * GIB - 0x10_0000, 0x10_0000),
            range(4 * GIB, GIB, 3 * GIB),
        ])
        .unwrap();
        assert_eq!(laid_over(&qemu_map(), &os).unwrap(), expected);
    }

    #[test]
    fn an_os_map_is_cut_to_the_device_and_may_move_addresses() {
        let os = [
            // Across the device's hole at 0xa0000 and past its end.
            mapping(0, 0x20_0000, 0),
            // Physical 8 GiB shown at the connector's 4 GiB + 16 MiB.
            mapping(8 * GIB, 0x1000, 4 * GIB + 0x100_0000),
            mapping(6 * GIB, 0x1000, 6 * GIB),
        ];
        let expected = MemoryMap::new(vec![
            range(0, 0xa_0000, 0),
            range(0x10_0000, 0x10_0000, 0x10_0000),
            range(8 * GIB, 0x1000, 3 * GIB + 0x100_0000),
        ])
        .unwrap();
        assert_eq!(laid_over(&qemu_map(), &os).unwrap(), expected);
    }

    #[test]
    fn an_os_map_outside_the_device_or_overlapping_is_refused() {
        let outside = laid_over(&qemu_map(), &[mapping(6 * GIB, 0x1000, 6 * GIB)]);
        assert!(
            outside
                .unwrap_err()
                .to_string()
                .contains("none of its ranges"),
            "outside"
        );
        let twice = [mapping(0, 0x2000, 0), mapping(0x1000, 0x1000, 0x1000)];
        assert!(laid_over(&qemu_map(), &twice).is_err());
    }

    #[test]
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
}
