//! The memory map an OS layer sets on one connector instance (memflow's
//! `set_mem_map`), applied by leechio above the device.
//!
//! LeechCore keeps one map per device, shared by every clone of the
//! connector; memflow's connectors keep theirs per instance, and OS layers
//! rely on it (memflow-linux narrows a throw-away clone to a 2 MiB window
//! while it looks for the kernel). So the OS layer's map never reaches
//! LeechCore: each instance translates its own addresses to the device's.

use memflow::mem::PhysicalMemoryMapping;

use crate::{MemoryMap, MemoryRange};

/// An OS layer's map for one instance: each range's `start` is an address
/// the OS layer reads, its `remap` the connector address (the device's
/// physical address, before LeechCore's own map) it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct OsMap(MemoryMap);

/// A run of one request: `len` bytes at `offset` in it, found at connector
/// address `at`, or in no range of the map (`None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Run {
    pub offset: usize,
    pub len: usize,
    pub at: Option<u64>,
}

impl OsMap {
    /// The OS layer's `mappings` (`base`: its address, `real_base`: the
    /// connector's) cut to the ranges the device holds, `device`.
    pub fn laid_over(
        device: &MemoryMap,
        mappings: &[PhysicalMemoryMapping],
    ) -> Result<Self, crate::Error> {
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
                        remap: lo,
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
        Ok(OsMap(MemoryMap::new(ranges)?))
    }

    /// One past the highest address the OS layer may read.
    pub fn end(&self) -> u64 {
        self.0.end()
    }

    /// Bytes of memory in the map.
    pub fn total_size(&self) -> u64 {
        self.0.total_size()
    }

    /// Calls `f` with the runs of `len` bytes at `addr`, in order.
    pub fn split(&self, addr: u64, len: usize, mut f: impl FnMut(Run)) {
        let ranges = self.0.ranges();
        let mut offset = 0;
        while offset < len {
            let left = len - offset;
            // A run ends at a range's edge or at the request's end, so
            // `a` is the request's start or an edge: it does not overflow.
            let a = addr + offset as u64;
            let i = ranges.partition_point(|r| r.end() <= a);
            let run = match ranges.get(i) {
                Some(r) if r.contains(a) => Run {
                    offset,
                    len: clamp(r.end() - a, left),
                    at: Some(r.remap + (a - r.start)),
                },
                Some(next) => Run {
                    offset,
                    len: clamp(next.start - a, left),
                    at: None,
                },
                None => Run {
                    offset,
                    len: left,
                    at: None,
                },
            };
            offset += run.len;
            f(run);
        }
    }
}

/// `n` bytes, but at most `max`.
fn clamp(n: u64, max: usize) -> usize {
    usize::try_from(n).map_or(max, |n| n.min(max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use memflow::types::Address;

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

    fn os_map(ranges: Vec<MemoryRange>) -> OsMap {
        OsMap(MemoryMap::new(ranges).unwrap())
    }

    #[test]
    fn an_os_map_points_at_the_connectors_addresses_not_the_devices() {
        // What memflow-win32 passes: RAM ranges, each at its own address.
        // Where LeechCore keeps them (the fourth GiB at 3 GiB in the RAM
        // file) stays LeechCore's business.
        let os = [
            mapping(0, 0x9_f000, 0),
            mapping(0x10_0000, 3 * GIB - 0x10_0000, 0x10_0000),
            mapping(4 * GIB, GIB, 4 * GIB),
        ];
        let expected = os_map(vec![
            range(0, 0x9_f000, 0),
            range(0x10_0000, 3 * GIB - 0x10_0000, 0x10_0000),
            range(4 * GIB, GIB, 4 * GIB),
        ]);
        assert_eq!(OsMap::laid_over(&qemu_map(), &os).unwrap(), expected);
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
        let expected = os_map(vec![
            range(0, 0xa_0000, 0),
            range(0x10_0000, 0x10_0000, 0x10_0000),
            range(8 * GIB, 0x1000, 4 * GIB + 0x100_0000),
        ]);
        assert_eq!(OsMap::laid_over(&qemu_map(), &os).unwrap(), expected);
    }

    #[test]
    fn an_os_map_outside_the_device_or_overlapping_is_refused() {
        let outside = OsMap::laid_over(&qemu_map(), &[mapping(6 * GIB, 0x1000, 6 * GIB)]);
        assert!(
            outside
                .unwrap_err()
                .to_string()
                .contains("none of its ranges"),
            "outside"
        );
        let twice = [mapping(0, 0x2000, 0), mapping(0x1000, 0x1000, 0x1000)];
        assert!(OsMap::laid_over(&qemu_map(), &twice).is_err());
    }

    fn runs(map: &OsMap, addr: u64, len: usize) -> Vec<(usize, usize, Option<u64>)> {
        let mut out = Vec::new();
        map.split(addr, len, |r| out.push((r.offset, r.len, r.at)));
        out
    }

    #[test]
    fn a_request_splits_at_every_edge_of_the_map() {
        // 0x1000..0x3000 found at 0x8000; 0x5000..0x6000 at 0x5000.
        let map = os_map(vec![
            range(0x1000, 0x2000, 0x8000),
            range(0x5000, 0x1000, 0x5000),
        ]);
        assert_eq!(
            runs(&map, 0x800, 0x6000),
            vec![
                (0, 0x800, None),
                (0x800, 0x2000, Some(0x8000)),
                (0x2800, 0x2000, None),
                (0x4800, 0x1000, Some(0x5000)),
                (0x5800, 0x800, None),
            ]
        );
        assert_eq!(runs(&map, 0x2ff0, 0x10), vec![(0, 0x10, Some(0x9ff0))]);
        assert_eq!(
            runs(&map, 0x2ff0, 0x20),
            vec![(0, 0x10, Some(0x9ff0)), (0x10, 0x10, None)]
        );
        assert_eq!(runs(&map, 0x7000, 0x10), vec![(0, 0x10, None)]);
        assert_eq!(runs(&map, 0x1000, 0), vec![]);
        // Up to the end of the address space.
        assert_eq!(runs(&map, u64::MAX - 0xf, 0x10), vec![(0, 0x10, None)]);
        assert_eq!(runs(&map, u64::MAX - 0xf, 0x20), vec![(0, 0x20, None)]);
    }
}
