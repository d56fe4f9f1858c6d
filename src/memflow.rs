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

use crate::{BatchOutcome, MemoryMap, MemoryRange};
use crate::{Failure, Memory};

/// Entries memflow's batching layers are told to send at once: large
/// enough that a round trip carries many pages, small enough to keep
/// memflow's own buffers modest.
const IDEAL_BATCH_SIZE: u32 = 4096;

/// The engine as memflow physical memory. Clones share the device (and its
/// queue); the device closes with the last clone.
#[derive(Clone)]
pub struct MemflowPhysical {
    mem: Memory,
    /// The user gave a memory map: maps from OS layers are ignored.
    fixed_map: bool,
    metadata: PhysicalMemoryMetadata,
}

impl std::fmt::Debug for MemflowPhysical {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemflowPhysical")
            .field("fixed_map", &self.fixed_map)
            .finish_non_exhaustive()
    }
}

impl MemflowPhysical {
    /// memflow physical memory over `mem`; `fixed_map` keeps the device's
    /// current memory map even when an OS layer offers one.
    pub fn new(mem: Memory, fixed_map: bool) -> Self {
        let metadata = metadata_of(&mem);
        MemflowPhysical {
            mem,
            fixed_map,
            metadata,
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
        self.metadata
    }

    fn set_mem_map(&mut self, mem_map: &[PhysicalMemoryMapping]) {
        if self.fixed_map {
            log::info!("keeping the memory map given by the user; ignoring the one offered by the OS layer");
            return;
        }
        match memory_map_of(mem_map.iter().copied())
            .map_err(crate::Error::from)
            .and_then(|map| self.mem.backend().set_memory_map(&map))
        {
            Ok(()) => self.metadata = metadata_of(&self.mem),
            Err(e) => log::warn!("could not apply the OS layer's memory map: {e}"),
        }
    }
}

/// Reads a memory map file in memflow's TOML format (`[[range]]` tables
/// with `base`, `length`, optional `real_base`) or LeechCore's text format.
pub fn read_memory_map_file(
    path: &std::path::Path,
) -> std::result::Result<MemoryMap, crate::Error> {
    let bad =
        |why: String| crate::Error::InvalidConfig(format!("memory map {}: {why}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    if !text.contains("[[range]]") {
        let map: MemoryMap = text
            .parse()
            .map_err(|e: crate::MemoryMapError| bad(e.to_string()))?;
        if map.is_empty() {
            return Err(bad("no ranges in it".into()));
        }
        return Ok(map);
    }
    // memflow's parser panics on overlapping ranges; keep that inside.
    let parsed = std::panic::catch_unwind(|| {
        memflow::mem::MemoryMap::<(Address, memflow::types::umem)>::open(path)
    })
    .map_err(|_| bad("ranges overlap".into()))?
    .map_err(|e| bad(format!("not a memflow memory map file ({e})")))?;
    memory_map_of(parsed.into_vec().into_iter()).map_err(|e| bad(e.to_string()))
}

/// memflow's mappings as a validated memory map.
fn memory_map_of(
    mappings: impl Iterator<Item = PhysicalMemoryMapping>,
) -> std::result::Result<MemoryMap, crate::MemoryMapError> {
    let mut ranges: Vec<MemoryRange> = mappings
        .map(|m| MemoryRange {
            start: m.base.to_umem(),
            size: m.size,
            remap: m.real_base.to_umem(),
        })
        .collect();
    ranges.sort_by_key(|r| r.start);
    MemoryMap::new(ranges)
}
