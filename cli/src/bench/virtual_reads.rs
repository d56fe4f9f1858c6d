//! Random kernel virtual reads, cold and warm: the engine's walks against
//! memflow's translation, read by read and batched.

use super::*;

/// Random 8-byte-aligned kernel addresses whose pages map RAM.
pub(super) fn random_virtual(ram: &[Mapping], rng: &mut fastrand::Rng) -> Vec<u64> {
    let mapped: u64 = ram.iter().map(|m| m.size).sum();
    (0..READS)
        .map(|_| {
            let mut off = rng.u64(0..mapped / 8) * 8;
            for m in ram {
                if off < m.size {
                    return m.va + off;
                }
                off -= m.size;
            }
            ram[0].va
        })
        .collect()
}

pub(super) const COLD: &str = "4096 random kernel virtual reads, cold";
pub(super) const WARM: &str = "4096 random kernel virtual reads, warm";

/// The 8 bytes at each of `vas` in `dtb`'s address space, each translated
/// by the engine and read straight through LeechCore: what every path of
/// the virtual workloads must read.
pub(super) fn virtual_reference(
    device: &LeechCore,
    mem: &Memory,
    dtb: u64,
    vas: &[u64],
) -> Reference {
    let space = AddressSpace::new(mem.clone(), dtb, Paging::FourLevel);
    let pas: Vec<Option<u64>> = mem
        .block_on(join_all(vas.iter().map(|&va| space.translate(va))))
        .into_iter()
        .map(|t| t.ok().map(|t| t.pa))
        .collect();
    Reference::read(device, &pas, 8)
}

pub(super) fn engine_virtual(
    bench: &mut Bench,
    device: &LeechCore,
    mem: &Memory,
    dtb: u64,
    vas: &[u64],
    reference: &Reference,
) -> Result<(), Failure> {
    let bytes = (READS * 8) as u64;
    let as_bytes = |values: &[Result<u64, leechio::PartialError>]| -> Vec<[u8; 8]> {
        values
            .iter()
            .map(|v| v.as_ref().map_or([0xa5; 8], |v| v.to_le_bytes()))
            .collect()
    };
    let mut got = Vec::new();
    bench.row(COLD, "engine: joined futures", bytes, || {
        let space = AddressSpace::new(mem.clone(), dtb, Paging::FourLevel);
        Ok(timed(device, || {
            got = mem.block_on(join_all(vas.iter().map(|&va| space.read_val::<u64>(va))));
        }))
    })?;
    bench.check_last(as_bytes(&got).iter().map(|b| &b[..]), reference);
    let space = AddressSpace::new(mem.clone(), dtb, Paging::FourLevel);
    let pas: Vec<u64> = mem
        .block_on(join_all(vas.iter().map(|&va| space.translate(va))))
        .into_iter()
        .map(|t| t.map_or(0, |t| t.pa))
        .collect();
    bench.row(WARM, "engine: joined futures", bytes, || {
        Ok(timed(device, || {
            got = mem.block_on(join_all(vas.iter().map(|&va| space.read_val::<u64>(va))));
        }))
    })?;
    bench.check_last(as_bytes(&got).iter().map(|b| &b[..]), reference);
    let mut batch = ideal_batch(pas.iter().map(|&pa| (pa, 8)));
    bench.row(
        WARM,
        "limit: one LeechCore scatter of the translated pages",
        bytes,
        || {
            let mut entries = scatter_entries(&mut batch);
            Ok(timed(device, || device.read_scatter(&mut entries)))
        },
    )
}

pub(super) fn memflow_virtual(
    bench: &mut Bench,
    dtb: u64,
    vas: &[u64],
    reference: &Reference,
) -> Result<(), Failure> {
    let bytes = (READS * 8) as u64;
    let mut bufs = vec![[0u8; 8]; READS];
    let methods: [(&'static str, VirtualRead); 2] = [
        ("memflow VirtualDma: read by read", |v, vas, bufs| {
            for (&va, b) in vas.iter().zip(bufs.iter_mut()) {
                let _ = v.read_raw_into(Address::from(va), b);
            }
        }),
        ("memflow VirtualDma: one read_raw_list", |v, vas, bufs| {
            let mut list: Vec<ReadData> = vas
                .iter()
                .zip(bufs.iter_mut())
                .map(|(&va, b)| CTup2(Address::from(va), b.as_mut_slice().into()))
                .collect();
            let _ = v.read_raw_list(&mut list);
        }),
    ];
    for (method, read) in methods {
        // A new instance per run is cold; one instance kept is warm.
        poison(&mut bufs);
        progress(COLD, method);
        let mut cold = Vec::new();
        for _ in 0..bench.runs {
            stop_requested()?;
            let p = bench.plugin(true)?;
            let mut v = virtual_dma(&p, dtb);
            cold.push(timed(&p.counter, || read(&mut v, vas, &mut bufs)));
        }
        push_median(bench, COLD, method, bytes, cold);
        bench.check_last(bufs.iter().map(|b| &b[..]), reference);
        progress(WARM, method);
        stop_requested()?;
        let p = bench.plugin_kept_warm()?;
        let mut v = virtual_dma(&p, dtb);
        read(&mut v, vas, &mut bufs);
        poison(&mut bufs);
        let warm = (0..bench.runs)
            .map(|_| timed(&p.counter, || read(&mut v, vas, &mut bufs)))
            .collect();
        push_median(bench, WARM, method, bytes, warm);
        bench.check_last(bufs.iter().map(|b| &b[..]), reference);
    }
    Ok(())
}

pub(super) fn virtual_dma(p: &Plugin, dtb: u64) -> Virtual {
    VirtualDma::new(
        p.conn.clone(),
        x64::ARCH,
        x64::new_translator(Address::from(dtb)),
    )
}

pub(super) fn push_median(
    bench: &mut Bench,
    workload: &str,
    method: &'static str,
    bytes: u64,
    runs: Vec<(Duration, u64)>,
) {
    let (time, calls) = median(runs);
    bench.rows.push(Row {
        workload: workload.to_string(),
        method,
        calls,
        time,
        bytes,
        verdict: None,
        lists: None,
    });
}
