//! The physical workloads: random 8-byte and 4 KiB reads of RAM, read
//! straight through LeechCore for the limit and the reference bytes.

use super::*;

/// The bytes at each of `addrs` (`len` each, legal scatter entries), read
/// straight through LeechCore; `None` for an address whose read failed.
pub(super) fn direct_reads(device: &LeechCore, addrs: &[u64], len: usize) -> Vec<Option<Vec<u8>>> {
    let reads: Vec<(u64, usize)> = addrs.iter().map(|&a| (a, len)).collect();
    direct_reads_sized(device, &reads)
}

/// [`direct_reads`] of `(address, length)` pairs, in one scatter call.
pub(super) fn direct_reads_sized(
    device: &LeechCore,
    reads: &[(u64, usize)],
) -> Vec<Option<Vec<u8>>> {
    let mut bufs: Vec<Vec<u8>> = reads.iter().map(|&(_, len)| vec![0u8; len]).collect();
    let mut entries: Vec<ScatterEntry> = reads
        .iter()
        .zip(bufs.iter_mut())
        .map(|(&(a, _), b)| ScatterEntry::new(a, b))
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
pub(super) fn poison<B: AsMut<[u8]>>(bufs: &mut [B]) {
    for b in bufs {
        b.as_mut().fill(0xa5);
    }
}

/// A random address `align`-aligned with `len` bytes of RAM after it.
pub(super) fn random_ram(rng: &mut fastrand::Rng, map: &MemoryMap, align: u64, len: u64) -> u64 {
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

pub(super) fn physical(
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
        let mut limit = || {
            let mut entries = scatter_entries(&mut batch);
            Ok(timed(device, || device.read_scatter(&mut entries)))
        };
        bench.row(
            workload,
            "limit: LeechCore scatter, one batch, each page once",
            bytes,
            &mut limit,
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
        bench.check_last(bufs.iter().map(Vec::as_slice), &reference);
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
        bench.check_last(bufs.iter().map(Vec::as_slice), &reference);
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
        bench.check_last(bufs.iter().map(Vec::as_slice), &reference);
        poison(&mut bufs);
        bench.row(workload, "memflow: read by read", bytes, || {
            Ok(timed(device, || {
                for (&a, b) in addrs.iter().zip(bufs.iter_mut()) {
                    let _ = conn.phys_view().read_raw_into(Address::from(a), b);
                }
            }))
        })?;
        bench.check_last(bufs.iter().map(Vec::as_slice), &reference);
        bench.limit_again(workload, &mut limit)?;
    }
    Ok(())
}

/// The fewest scatter entries that read every byte of `reads` (address and
/// length, none crossing a page): one per page, spanning that page's reads,
/// each with its buffer. What a hand-made ideal batch sends: a page wanted
/// twice is read once (the engine does the same), and LeechCore's FPGA
/// emulation charges per entry.
pub(super) fn ideal_batch(reads: impl Iterator<Item = (u64, u64)>) -> Vec<(u64, Vec<u8>)> {
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

pub(super) fn scatter_entries(batch: &mut [(u64, Vec<u8>)]) -> Vec<ScatterEntry<'_>> {
    batch
        .iter_mut()
        .map(|(addr, buf)| ScatterEntry::new(*addr, buf))
        .collect()
}
