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
    Ok(())
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
    Ok(())
}
