//! A 64 MiB address-space read: the engine (borrowed and scoped buffers)
//! against memflow's one read.

use super::*;

pub(super) fn dump_workload(target: &Mapping) -> String {
    format!("dump of {} MiB of an address space", target.size >> 20)
}

pub(super) fn engine_dump(
    bench: &mut Bench,
    device: &LeechCore,
    mem: &Memory,
    dtb: u64,
    m: Mapping,
    reference: &Reference,
) -> Result<(), Failure> {
    let workload = dump_workload(&m);
    // The limit's own buffer: it is measured again after the other rows.
    let mut limit_buf = vec![0u8; m.size as usize];
    let mut limit = || Ok(read_pages(device, m.pa, &mut limit_buf));
    bench.row(
        &workload,
        "limit: LeechCore scatter of every page, one batch",
        m.size,
        &mut limit,
    )?;
    let mut buf = vec![0u8; m.size as usize];
    poison(&mut [&mut buf]);
    bench.row(
        &workload,
        "engine: one AddressSpace::read, cold",
        m.size,
        || {
            let space = AddressSpace::new(mem.clone(), dtb, Paging::FourLevel);
            Ok(timed(device, || {
                let _ = mem.block_on(space.read(m.va, &mut buf));
            }))
        },
    )?;
    bench.check_last(buf.chunks(4096), reference);
    poison(&mut [&mut buf]);
    bench.row(
        &workload,
        "engine: one AddressSpace::read in a scope, cold",
        m.size,
        || {
            let space = AddressSpace::new(mem.clone(), dtb, Paging::FourLevel);
            Ok(timed(device, || {
                let _ = mem.scope(|s| mem.block_on(space.read_scoped(s, m.va, &mut buf)));
            }))
        },
    )?;
    bench.check_last(buf.chunks(4096), reference);
    bench.limit_again(&workload, &mut limit)
}

pub(super) fn memflow_dump(
    bench: &mut Bench,
    dtb: u64,
    m: Mapping,
    reference: &Reference,
) -> Result<(), Failure> {
    let method = "memflow VirtualDma: one read_raw_into, cold";
    progress(&dump_workload(&m), method);
    let mut buf = vec![0xa5u8; m.size as usize];
    let mut runs = Vec::new();
    for _ in 0..bench.runs {
        stop_requested()?;
        let p = bench.plugin(true)?;
        let mut v = virtual_dma(&p, dtb);
        runs.push(timed(&p.counter, || {
            let _ = v.read_raw_into(Address::from(m.va), &mut buf);
        }));
    }
    push_median(bench, &dump_workload(&m), method, m.size, runs);
    bench.check_last(buf.chunks(4096), reference);
    // The limit again, through the plugin's context (the only one now).
    let p = bench.plugin(false)?;
    bench.limit_again(&dump_workload(&m), || {
        Ok(read_pages(&p.counter, m.pa, &mut buf))
    })
}

/// The limit's way: `buf`'s pages from physical `pa` on, one scatter entry a
/// page, in one call; its time and calls.
fn read_pages(device: &LeechCore, pa: u64, buf: &mut [u8]) -> (Duration, u64) {
    let mut entries: Vec<ScatterEntry> = buf
        .chunks_mut(4096)
        .enumerate()
        .map(|(i, b)| ScatterEntry::new(pa + i as u64 * 4096, b))
        .collect();
    timed(device, || device.read_scatter(&mut entries))
}
